// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: one pool of receive buffers for many queue pairs.
//!
//! A [`SharedReceiveQueue`] is made in a protection domain and given to the queue pairs
//! that receive through it. Buffers are posted by value and come back, synchronised for the
//! CPU, with the completion of the receive that filled them, whichever queue pair it was
//! for ([`SharedReceiveQueue::complete_recv`]); or stay where they are and are posted again
//! once read ([`SharedReceiveQueue::recycle`]). A completion gives its buffer back once.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! # Examples
//!
//! ```
//! use kernel::prelude::*;
//! use kernel::rdma::cq::WorkCompletion;
//! use kernel::rdma::dma::{DmaBuffer, DmaDirection};
//! use kernel::rdma::pd::ProtectionDomain;
//! use kernel::rdma::srq::SharedReceiveQueue;
//! use kernel::sync::Arc;
//!
//! /// A queue of `n` buffers of 2 KiB in `pd`, all posted.
//! fn filled(pd: &Arc<ProtectionDomain>, n: u32) -> Result<Arc<SharedReceiveQueue>> {
//!     if !SharedReceiveQueue::supported(pd.device()) {
//!         return Err(EOPNOTSUPP);
//!     }
//!     let srq = SharedReceiveQueue::new(pd, n, 1)?;
//!     for _ in 0..n {
//!         let buf = DmaBuffer::new(pd.device(), 2048, DmaDirection::FromDevice, GFP_KERNEL)?;
//!         srq.post_recv(buf)?;
//!     }
//!     Ok(srq)
//! }
//!
//! /// The first byte of the message `wc` completed, its buffer posted again in place.
//! fn first_byte(srq: &SharedReceiveQueue, wc: &mut WorkCompletion) -> Option<u8> {
//!     let mut first = None;
//!     srq.recycle(wc, |buf, len| first = buf.as_slice().first().copied().filter(|_| len > 0))?
//!         .ok()?;
//!     first
//! }
//! # let _ = (filled, first_byte);
//! ```

use super::{
    cq::WorkCompletion,
    device::Device,
    dma::DmaBuffer,
    pd::ProtectionDomain,
    qp::{RecvBuffer, RecvRing, RecyclableBuffer, SharedQueue},
};
use crate::{
    bindings,
    error::{
        code::{EINVAL, EOPNOTSUPP},
        from_err_ptr, to_result, Result,
    },
    ffi::{c_int, c_void},
    prelude::*,
    sync::Arc,
};
use core::ptr::NonNull;

/// An asynchronous event of a shared receive queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SrqEvent {
    /// Fewer buffers than the armed limit are posted (see
    /// [`SharedReceiveQueue::arm_limit`]); the limit is disarmed until armed again.
    LimitReached,
    /// The queue failed; its queue pairs receive nothing more.
    Error,
    /// Any other event, with its raw code.
    Other(u32),
}

/// Receives the asynchronous events of a shared receive queue.
///
/// Devices report these from any context, possibly with interrupts disabled: implementations
/// record what happened (and schedule work for the rest) and must not sleep.
pub trait SrqEventHandler: Send + Sync {
    /// `event` happened on the queue.
    fn event(&self, event: SrqEvent);
}

/// # Safety
///
/// Called by the core only, for a queue created by [`SharedReceiveQueue::with_events`], with
/// the context that function registered.
unsafe extern "C" fn srq_event_callback(event: *mut bindings::ib_event, context: *mut c_void) {
    // SAFETY: `context` is the boxed handler of a queue, freed only after the queue is
    // destroyed, which ends the calls of this function.
    let handler = unsafe { &*context.cast::<Arc<dyn SrqEventHandler>>() };
    // SAFETY: `event` is valid for the call.
    let event = unsafe { &*event };
    handler.event(match event.event {
        bindings::ib_event_type_IB_EVENT_SRQ_LIMIT_REACHED => SrqEvent::LimitReached,
        bindings::ib_event_type_IB_EVENT_SRQ_ERR => SrqEvent::Error,
        other => SrqEvent::Other(other),
    });
}

/// A shared receive queue (`struct ib_srq`). Queue pairs created on it hold an [`Arc`] to
/// it, so it is destroyed after all of them.
///
/// # Invariants
///
/// `srq` was returned by `ib_create_srq_user` in `pd` and is destroyed only in `drop`,
/// before the buffers in `ring` are freed and, if set, `events` (from `KBox::into_raw`, the
/// core's event context of the queue) is released.
#[pin_data(PinnedDrop)]
pub struct SharedReceiveQueue<B: RecvBuffer = DmaBuffer> {
    srq: NonNull<bindings::ib_srq>,
    ring: RecvRing<B>,
    pd: Arc<ProtectionDomain>,
    events: Option<NonNull<Arc<dyn SrqEventHandler>>>,
}

// SAFETY: The core allows SRQs to be used from any thread; the ring's slots are shared
// safely (`WorkSlots`).
unsafe impl<B: RecvBuffer> Send for SharedReceiveQueue<B> {}
// SAFETY: Shared access posts (callable concurrently) and takes buffers back from the
// ring's slots, each slot by one thread at a time; the buffers are `Send`.
unsafe impl<B: RecvBuffer> Sync for SharedReceiveQueue<B> {}

impl<B: RecvBuffer> super::private::Sealed for SharedReceiveQueue<B> {}

impl<B: RecvBuffer> SharedQueue for SharedReceiveQueue<B> {
    fn as_raw(&self) -> *mut bindings::ib_srq {
        self.srq.as_ptr()
    }

    fn device(&self) -> &Device {
        self.pd.device()
    }
}

impl SharedReceiveQueue {
    /// Whether `device` offers shared receive queues.
    #[inline]
    pub fn supported(device: &Device) -> bool {
        // SAFETY: The device is valid; its attributes are set before registration and do not
        // change afterwards.
        unsafe { (*device.as_raw()).attrs.max_srq > 0 }
    }
}

impl<B: RecvBuffer> SharedReceiveQueue<B> {
    /// Creates a shared receive queue in `pd` for `max_wr` buffers of up to `max_sge`
    /// segments each.
    #[inline]
    pub fn new(pd: &Arc<ProtectionDomain>, max_wr: u32, max_sge: u32) -> Result<Arc<Self>> {
        Self::with_events(pd, max_wr, max_sge, None)
    }

    /// As [`SharedReceiveQueue::new`], with `events` receiving the queue's asynchronous
    /// events until it is destroyed.
    pub fn with_events(
        pd: &Arc<ProtectionDomain>,
        max_wr: u32,
        max_sge: u32,
        events: Option<Arc<dyn SrqEventHandler>>,
    ) -> Result<Arc<Self>> {
        let events = match events {
            Some(handler) => Some(KBox::new(handler, GFP_KERNEL)?),
            None => None,
        };
        // Freed after the queue is destroyed: by `drop`, or below if set-up fails.
        let events = events.map(|b| {
            // SAFETY: `KBox::into_raw` never returns null.
            unsafe { NonNull::new_unchecked(KBox::into_raw(b)) }
        });
        let free_events = || {
            if let Some(p) = events {
                // SAFETY: `p` came from `KBox::into_raw` above and no queue uses it.
                drop(unsafe { KBox::from_raw(p.as_ptr()) });
            }
        };
        // SAFETY: All-zero is a valid `ib_srq_init_attr` (basic SRQ, no event handler).
        let mut attr: bindings::ib_srq_init_attr = unsafe { core::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        attr.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        if let Some(p) = events {
            attr.event_handler = Some(srq_event_callback);
            attr.srq_context = p.as_ptr().cast();
        }
        let ring = RecvRing::new(max_wr).inspect_err(|_| free_events())?;
        // SAFETY: `pd` is valid and `attr` is valid for the call; kernel SRQs have no user
        // object or data; the event context lives until the queue is destroyed.
        let srq = from_err_ptr(unsafe {
            bindings::ib_create_srq_user(
                pd.as_raw(),
                &mut attr,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        })
        .and_then(|srq| NonNull::new(srq).ok_or(EINVAL))
        .inspect_err(|_| free_events())?;
        let init = pin_init!(Self {
            srq,
            ring,
            pd: pd.clone(),
            events,
        });
        // INVARIANT: `srq` was just created in `pd` with `events` as its context.
        Arc::pin_init(init, GFP_KERNEL).inspect_err(|_| {
            // SAFETY: Created above, nothing posted, referenced nowhere else.
            unsafe { bindings::ib_destroy_srq_user(srq.as_ptr(), core::ptr::null_mut()) };
            free_events();
        })
    }

    /// Arms the limit event: once fewer than `limit` buffers are posted, the queue's handler
    /// gets [`SrqEvent::LimitReached`], once. A `limit` beyond the queue's size is refused
    /// (`EINVAL`); 0 disarms. Needs a queue made with [`SharedReceiveQueue::with_events`].
    pub fn arm_limit(&self, limit: u32) -> Result {
        if self.events.is_none() {
            return Err(EINVAL);
        }
        // SAFETY: All-zero is a valid `ib_srq_attr`.
        let mut attr: bindings::ib_srq_attr = unsafe { core::mem::zeroed() };
        attr.srq_limit = limit;
        // SAFETY: `srq` is valid; `attr` is valid for the call; only the limit is changed.
        to_result(unsafe {
            bindings::ib_modify_srq(
                self.srq.as_ptr(),
                &mut attr,
                bindings::ib_srq_attr_mask_IB_SRQ_LIMIT,
            )
        })
    }

    /// How a request is handed to the device: as `ib_post_srq_recv` (inline in C) does.
    /// `EOPNOTSUPP` if the device cannot.
    #[inline]
    fn poster(&self) -> Result<impl FnOnce(&bindings::ib_recv_wr) -> c_int> {
        let srq = self.srq.as_ptr();
        // SAFETY: `srq` is valid, and so its device, whose operations are set while it is
        // registered.
        let post_srq_recv = unsafe { (*(*srq).device).ops.post_srq_recv }.ok_or(EOPNOTSUPP)?;
        Ok(move |wr: &bindings::ib_recv_wr| {
            let mut bad = core::ptr::null();
            // SAFETY: `srq` is valid; `wr` is valid for the call and describes a buffer the
            // ring keeps until the request completes.
            unsafe { post_srq_recv(srq, wr, &mut bad) }
        })
    }

    /// Posts `buf` for the next message any attached queue pair receives. On failure the
    /// buffer is freed.
    #[inline]
    pub fn post_recv(&self, buf: B) -> Result {
        let post = self.poster()?;
        let device = (self.pd.device(), self.pd.local_dma_lkey());
        // SAFETY: The domain, which holds the device, is dropped after the ring (field order).
        unsafe { self.ring.post(buf, device, post) }
    }

    /// Lends the buffer of the receive that `wc` (from any attached queue pair) completes,
    /// synchronised for the CPU, to `f` with the number of bytes received, then posts it
    /// again, and uses `wc` up: the buffer never leaves the queue. `None` if `wc` is not one
    /// of ours, or was used up already; else whether the buffer was posted again (if not, it
    /// was freed: `EINVAL` if `f` left one the device may not write).
    #[inline]
    pub fn recycle(&self, wc: &mut WorkCompletion, f: impl FnOnce(&mut B, u32)) -> Option<Result>
    where
        B: RecyclableBuffer,
    {
        let post = match self.poster() {
            Ok(post) => post,
            Err(e) => {
                // Taken back without being posted again: freed.
                drop(self.complete_recv(wc)?);
                return Some(Err(e));
            }
        };
        let device = (self.pd.device(), self.pd.local_dma_lkey());
        // SAFETY: The domain, which holds the device, is dropped after the ring (field order).
        unsafe { self.ring.recycle(wc, device, post, f) }
    }

    /// Takes back the buffer of the receive that `wc` (from any attached queue pair)
    /// completes, synchronised for the CPU, and uses `wc` up; `None` if `wc` is not one of
    /// ours, or was used up already.
    #[inline]
    pub fn complete_recv(&self, wc: &mut WorkCompletion) -> Option<B> {
        self.ring.complete(wc)
    }
}

#[pinned_drop]
impl<B: RecvBuffer> PinnedDrop for SharedReceiveQueue<B> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant `srq` is valid and destroyed only here; attached queue
        // pairs hold an `Arc` to us, so none is left. Once destroyed, the device no longer
        // accesses posted buffers, which are freed afterwards with the ring.
        let ret =
            unsafe { bindings::ib_destroy_srq_user(self.srq.as_ptr(), core::ptr::null_mut()) };
        if ret != 0 {
            // The device may still use the posted buffers and report events: they are
            // leaked, never freed, and so is the protection domain they live in.
            crate::pr_err!(
                "shared receive queue not destroyed ({}): its buffers leaked\n",
                ret
            );
            self.ring.leak_all();
            core::mem::forget(self.pd.clone());
            return;
        }
        if let Some(p) = self.events {
            // SAFETY: By the type invariant `p` came from `KBox::into_raw`; the queue that used
            // it is gone and `drop` runs once.
            drop(unsafe { KBox::from_raw(p.as_ptr()) });
        }
    }
}
