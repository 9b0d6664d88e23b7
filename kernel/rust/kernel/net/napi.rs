// SPDX-License-Identifier: GPL-2.0

//! NAPI: polled packet processing for network devices.
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h).
//!
//! A device registered by [`super::dev::Registration`] whose operations implement
//! [`super::dev::Operations::napi_poll`] gets one NAPI context. The registration enables it
//! before `open` and disables it after `stop`, so the poll function only runs while the
//! interface is up. [`NapiHandle`]s schedule it from anywhere (a completion interrupt, for
//! example); scheduling a context not yet added, disabled or deleted does nothing, and a
//! handle keeps the context's memory alive, so a handle that outlives the device is
//! harmless.
//!
//! A poll round ends in one of two ways, and its [`Budget`] is consumed by the one taken:
//! the whole budget used (the core polls again), or fewer packets and the context completed.
//! A round cannot do both, which would leave the core polling a context no longer
//! scheduled.

use super::{dev::NetDevice, skb::SkBuff};
use crate::{bindings, prelude::*, sync::Arc, types::Opaque};
use core::sync::atomic::AtomicBool;

/// The NAPI context of a device (`struct napi_struct`), kept in an [`Arc`] so that
/// [`NapiHandle`]s keep its memory valid.
///
/// # Invariants
///
/// `napi` is all-zero with its SCHED bit set (as a disabled context has it) until a
/// registration adds it to its device (`netif_napi_add_weight`, `attached` set), and is
/// deleted by that registration before the device is freed: at every time, scheduling it
/// is a no-op or schedules a context added to a live device.
pub(crate) struct NapiBlock {
    napi: Opaque<bindings::napi_struct>,
    /// Whether a registration has added the context to its device.
    pub(crate) attached: AtomicBool,
}

// SAFETY: The block is only scheduled through `napi_schedule`, which any thread may call;
// the core serialises polling. Nothing in it is tied to a thread.
unsafe impl Send for NapiBlock {}
// SAFETY: Shared access only schedules the context (callable concurrently from any
// context) or reads `attached`, an atomic.
unsafe impl Sync for NapiBlock {}

impl NapiBlock {
    /// An unattached context: zeroed, as `netif_napi_add_weight` expects, but marked
    /// scheduled, as a disabled context is, so that scheduling it before it is added does
    /// nothing (its poll function is still unset).
    pub(crate) fn new() -> Result<Arc<Self>> {
        // SAFETY: An all-zero `napi_struct` is what the C drivers embed before adding it.
        let mut raw = unsafe { core::mem::zeroed::<bindings::napi_struct>() };
        // `netif_napi_add_weight` sets this bit too; `napi_enable` clears it.
        raw.state = 1 << bindings::NAPI_STATE_SCHED;
        let napi = Opaque::new(raw);
        // INVARIANT: Zeroed with SCHED set, not attached.
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
    /// A NAPI context for one device, to pass to [`super::dev::Registration::new`]. Until
    /// the registration enables it, scheduling it does nothing:
    ///
    /// ```
    /// use kernel::net::napi::NapiHandle;
    ///
    /// let napi = NapiHandle::new()?;
    /// assert!(!napi.schedule());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn new() -> Result<Self> {
        Ok(Self(NapiBlock::new()?))
    }

    /// Asks for a poll soon, unless one is pending or the context is disabled. Callable
    /// from any context, interrupts included. Returns whether this call scheduled it.
    #[inline]
    pub fn schedule(&self) -> bool {
        // SAFETY: The block is alive (we hold a reference); a context not yet added, disabled
        // or deleted has its SCHED bit set, which makes this a no-op, and an added one is
        // on a live device (type invariant of `NapiBlock`).
        unsafe { schedule(self.0.as_raw()) }
    }
}

/// Asks for a poll of `napi` soon, as `napi_schedule` (inline in C) does: the call that
/// claims the context's scheduled bit queues it. Returns whether this call did.
///
/// # Safety
///
/// `napi` must point to a context whose block is alive and that is added to a live device,
/// or whose scheduled bit is set (not yet added, disabled or deleted), which makes this a
/// no-op.
#[inline]
unsafe fn schedule(napi: *mut bindings::napi_struct) -> bool {
    // SAFETY: `napi` is valid (the caller's guarantee).
    if !unsafe { bindings::napi_schedule_prep(napi) } {
        return false;
    }
    // SAFETY: This call claimed the context, which is now ours to queue.
    unsafe { bindings::__napi_schedule(napi) };
    true
}

/// The NAPI context as seen by a poll function.
///
/// # Invariants
///
/// A `&Napi` refers to a context being polled (from the core's poll call, in softirq
/// context, a NAPI thread or netpoll), added to a live, registered device, for the
/// lifetime of the reference.
#[repr(transparent)]
pub struct Napi(Opaque<bindings::napi_struct>);

impl Napi {
    /// # Safety
    ///
    /// `ptr` must be a NAPI context being polled, valid for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::napi_struct) -> &'a Self {
        // SAFETY: `Napi` is `repr(transparent)`; validity is the caller's guarantee.
        // INVARIANT: Being polled, as the caller guarantees.
        unsafe { &*ptr.cast() }
    }

    /// Whether this poll runs with bottom halves off and interrupts on, where NAPI's per-CPU
    /// caches may be used: every poll but netpoll's (the core polls from its softirq, a
    /// NAPI thread or a busy-polling socket, with bottom halves off), which may come from
    /// any context and marks the context `NAPI_STATE_NPSVC` while it polls. One load, where
    /// asking the CPU for its context would take three calls.
    #[inline]
    fn bh_context(&self) -> bool {
        // SAFETY: The context is valid (type invariant); `state` is an aligned word that
        // others change with atomic bit operations and compare-and-exchange only, so it is
        // read once, volatile, as C's `READ_ONCE`.
        let state = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.0.get()).state)) };
        // Set by netpoll on this CPU before it calls the poll, cleared after it returns;
        // `napi_disable` sets it only once no poll runs.
        state & (1 << bindings::NAPI_STATE_NPSVC) == 0
    }

    /// The device the context polls for.
    #[inline]
    pub fn device(&self) -> &NetDevice {
        // SAFETY: The context is valid (type invariant); its `dev` is set when it is added.
        let dev = unsafe { (*self.0.get()).dev };
        // SAFETY: The context is added to a live, registered device (type invariant),
        // which outlives the poll.
        unsafe { NetDevice::from_raw(dev) }
    }

    /// Allocates an skb for a packet received in this round, with `len` bytes of room (and
    /// the usual headroom): from NAPI's per-CPU caches (`napi_alloc_skb`, no interrupts
    /// masked, the skb's own memory taken in bulk) where they may be used, with bottom halves
    /// off and interrupts on, as in every round with a budget; otherwise (netpoll may poll
    /// from any context) as [`SkBuff::alloc`] does.
    #[inline]
    pub fn alloc_skb(&self, len: u32) -> Result<SkBuff> {
        if !self.bh_context() {
            return SkBuff::alloc(Some(self.device()), len, GFP_ATOMIC);
        }
        // SAFETY: The context is being polled (type invariant), on a live device, and the
        // CPU runs with bottom halves off, interrupts on (checked above), as the per-CPU
        // caches require.
        let skb = unsafe { bindings::napi_alloc_skb(self.0.get(), len) };
        if skb.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: A new skb, whose allocator (we) owns it.
        Ok(unsafe { SkBuff::from_raw(skb) })
    }

    /// Hands a received packet to the stack through GRO.
    #[inline]
    pub fn gro_receive(&self, mut skb: SkBuff) {
        skb.set_dev(self.device());
        // SAFETY: The context is being polled (type invariant); `skb` is owned and its
        // ownership passes to the stack.
        unsafe { bindings::napi_gro_receive(self.0.get(), skb.into_raw()) };
    }

    /// Asks for another poll round (after [`Budget::complete`], when events slipped in
    /// before the interrupt source was re-armed).
    #[inline]
    pub fn schedule_again(&self) -> bool {
        // SAFETY: The context is being polled, hence added and enabled.
        unsafe { schedule(self.0.get()) }
    }
}

/// What a poll round may handle: up to [`Budget::get`] packets. Made by the core's call of
/// the poll function only, and consumed by how the round ends: [`Budget::exhausted`] or
/// [`Budget::complete`].
///
/// # Invariants
///
/// `napi` is the context being polled, in the round whose budget is `limit`, which has not
/// completed it.
pub struct Budget<'a> {
    napi: &'a Napi,
    limit: u32,
}

impl<'a> Budget<'a> {
    /// # Safety
    ///
    /// `napi` must be the context being polled, in the round whose budget is `limit`.
    pub(crate) unsafe fn new(napi: &'a Napi, limit: u32) -> Self {
        // INVARIANT: As the caller guarantees; nothing has completed the round yet.
        Self { napi, limit }
    }

    /// How many packets the round may handle.
    #[inline]
    pub fn get(&self) -> u32 {
        self.limit
    }

    /// Ends the round with the whole budget used: the context stays scheduled and the core
    /// polls it again.
    pub fn exhausted(self) -> Polled {
        Polled(self.limit)
    }

    /// Ends the round after `work_done` packets and completes the context
    /// (`napi_complete_done`), which the next [`NapiHandle::schedule`] schedules again.
    /// `work_done` counts as less than the budget, as completing requires. Returns whether
    /// the context completed: not if it was scheduled again meanwhile (it then keeps
    /// polling), nor in a round of budget 0 (netpoll's), which must not complete.
    #[inline]
    pub fn complete(self, work_done: u32) -> (Polled, bool) {
        let Some(most) = self.limit.checked_sub(1) else {
            return (Polled(0), false);
        };
        let done = work_done.min(most);
        let work = i32::try_from(done).unwrap_or(i32::MAX);
        // SAFETY: The context is being polled by us and this round has not completed it
        // (type invariant); completing consumes the budget, so it cannot happen twice.
        let completed = unsafe { bindings::napi_complete_done(self.napi.0.get(), work) };
        (Polled(done), completed)
    }
}

/// How a poll round ended, made from its [`Budget`]: the packets it handled, which the poll
/// function returns to the core.
pub struct Polled(u32);

impl Polled {
    /// The packets handled.
    pub fn work_done(&self) -> u32 {
        self.0
    }
}
