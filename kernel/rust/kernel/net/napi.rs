// SPDX-License-Identifier: GPL-2.0

//! NAPI: polled packet processing for network devices.
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h).
//!
//! A device registered by [`super::dev::Registration`] whose operations implement
//! [`super::dev::Operations::napi_poll`] gets one NAPI context. The registration enables it
//! before `open` and disables it after `stop`, so the poll function only runs while the
//! interface is up. [`NapiHandle`]s schedule it from anywhere (a completion interrupt, for
//! example); scheduling a disabled or deleted context does nothing, and a handle keeps the
//! context's memory alive, so a handle that outlives the device is harmless.

use super::{dev::NetDevice, skb::SkBuff};
use crate::{bindings, prelude::*, sync::Arc, types::Opaque};
use core::sync::atomic::AtomicBool;

/// The NAPI context of a device (`struct napi_struct`), kept in an [`Arc`] so that
/// [`NapiHandle`]s keep its memory valid.
///
/// # Invariants
///
/// `napi` is initialised by `netif_napi_add_weight` for the device that owns the context,
/// then deleted by the registration before that device is freed.
pub(crate) struct NapiBlock {
    napi: Opaque<bindings::napi_struct>,
    /// Whether a registration has added the context to its device.
    pub(crate) attached: AtomicBool,
}

// SAFETY: NAPI contexts are scheduled from any context; the core serialises polling.
unsafe impl Send for NapiBlock {}
// SAFETY: See above.
unsafe impl Sync for NapiBlock {}

impl NapiBlock {
    /// An unattached context: zeroed, as `netif_napi_add_weight` expects.
    pub(crate) fn new() -> Result<Arc<Self>> {
        // SAFETY: An all-zero `napi_struct` is what the C drivers embed before adding it.
        let napi = Opaque::new(unsafe { core::mem::zeroed::<bindings::napi_struct>() });
        Ok(Arc::new(
            Self {
                napi,
                attached: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::napi_struct {
        self.napi.get()
    }
}

/// Schedules a device's NAPI context; cheap to clone and valid after the device is gone
/// (then it does nothing).
#[derive(Clone)]
pub struct NapiHandle(pub(crate) Arc<NapiBlock>);

impl NapiHandle {
    /// A NAPI context for one device, to pass to [`super::dev::Registration::new`].
    pub fn new() -> Result<Self> {
        Ok(Self(NapiBlock::new()?))
    }

    /// Asks for a poll soon, unless one is pending or the context is disabled. Callable
    /// from any context, interrupts included. Returns whether this call scheduled it.
    pub fn schedule(&self) -> bool {
        // SAFETY: The block is alive (we hold a reference) and was initialised by
        // `netif_napi_add_weight`; a disabled or deleted context has its SCHED bit set, which
        // makes this a no-op.
        unsafe { bindings::napi_schedule(self.0.as_raw()) }
    }
}

/// The NAPI context as seen by a poll function.
#[repr(transparent)]
pub struct Napi(Opaque<bindings::napi_struct>);

impl Napi {
    /// # Safety
    ///
    /// `ptr` must be a NAPI context being polled, valid for `'a`.
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::napi_struct) -> &'a Self {
        // SAFETY: `Napi` is `repr(transparent)`; validity is the caller's guarantee.
        unsafe { &*ptr.cast() }
    }

    /// The device the context polls for.
    pub fn device(&self) -> &NetDevice {
        // SAFETY: The context is being polled, so it is added to a live, registered device.
        unsafe { NetDevice::from_raw((*self.0.get()).dev) }
    }

    /// Hands a received packet to the stack through GRO.
    pub fn gro_receive(&self, mut skb: SkBuff) {
        skb.set_dev(self.device());
        // SAFETY: The context is being polled (softirq context); `skb` is owned and its
        // ownership passes to the stack.
        unsafe { bindings::napi_gro_receive(self.0.get(), skb.into_raw()) };
    }

    /// Asks for another poll round (after [`Napi::complete_done`], when events slipped in
    /// before the interrupt source was re-armed).
    pub fn schedule_again(&self) -> bool {
        // SAFETY: The context is being polled, hence added and enabled.
        unsafe { bindings::napi_schedule(self.0.get()) }
    }

    /// Ends this poll round after `work_done` packets (fewer than the budget). Returns false
    /// if the context must keep polling (it was scheduled again meanwhile).
    pub fn complete_done(&self, work_done: u32) -> bool {
        let work = i32::try_from(work_done).unwrap_or(i32::MAX);
        // SAFETY: The context is being polled by us.
        unsafe { bindings::napi_complete_done(self.0.get(), work) }
    }
}
