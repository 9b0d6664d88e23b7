// SPDX-License-Identifier: GPL-2.0

//! Shared receive queues: one pool of receive buffers for many queue pairs.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::{
    cq::WorkCompletion,
    device::Device,
    dma::DmaBuffer,
    pd::ProtectionDomain,
    qp::{RecvBuffer, RecvRing, SharedQueue},
};
use crate::{
    bindings,
    error::{code::EINVAL, from_err_ptr, Error, Result},
    prelude::*,
    sync::Arc,
};
use core::ptr::NonNull;

/// A shared receive queue (`struct ib_srq`). Queue pairs created on it hold an [`Arc`] to
/// it, so it is destroyed after all of them.
///
/// # Invariants
///
/// `srq` was returned by `ib_create_srq_user` in `pd` and is destroyed only in `drop`,
/// before the buffers in `ring` are freed.
#[pin_data(PinnedDrop)]
pub struct SharedReceiveQueue<B: RecvBuffer = DmaBuffer> {
    srq: NonNull<bindings::ib_srq>,
    #[pin]
    ring: RecvRing<B>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: The core allows SRQs to be used from any thread; the ring is behind a lock.
unsafe impl<B: RecvBuffer> Send for SharedReceiveQueue<B> {}
// SAFETY: See above.
unsafe impl<B: RecvBuffer> Sync for SharedReceiveQueue<B> {}

impl<B: RecvBuffer> SharedQueue for SharedReceiveQueue<B> {
    fn as_raw(&self) -> *mut bindings::ib_srq {
        self.srq.as_ptr()
    }
}

impl SharedReceiveQueue {
    /// Whether `device` offers shared receive queues.
    pub fn supported(device: &Device) -> bool {
        // SAFETY: The device is valid; its attributes are set before registration and do not
        // change afterwards.
        unsafe { (*device.as_raw()).attrs.max_srq > 0 }
    }
}

impl<B: RecvBuffer> SharedReceiveQueue<B> {
    /// Creates a shared receive queue in `pd` for `max_wr` buffers of up to `max_sge`
    /// segments each.
    pub fn new(pd: &Arc<ProtectionDomain>, max_wr: u32, max_sge: u32) -> Result<Arc<Self>> {
        // SAFETY: All-zero is a valid `ib_srq_init_attr` (basic SRQ, no event handler).
        let mut attr: bindings::ib_srq_init_attr = unsafe { core::mem::zeroed() };
        attr.attr.max_wr = max_wr;
        attr.attr.max_sge = max_sge;
        attr.srq_type = bindings::ib_srq_type_IB_SRQT_BASIC;
        let ring = RecvRing::new(max_wr)?;
        // SAFETY: `pd` is valid and `attr` is valid for the call; kernel SRQs have no user
        // object or data.
        let srq = from_err_ptr(unsafe {
            bindings::ib_create_srq_user(
                pd.as_raw(),
                &mut attr,
                core::ptr::null_mut(),
                core::ptr::null_mut(),
            )
        })?;
        let srq = NonNull::new(srq).ok_or(EINVAL)?;
        let init = pin_init!(Self {
            srq,
            ring <- ring,
            pd: pd.clone(),
        });
        // INVARIANT: `srq` was just created in `pd`.
        Arc::pin_init(init, GFP_KERNEL).inspect_err(|_| {
            // SAFETY: Created above, nothing posted, referenced nowhere else.
            unsafe { bindings::ib_destroy_srq_user(srq.as_ptr(), core::ptr::null_mut()) };
        })
    }

    /// Posts `buf` for the next message any attached queue pair receives. On failure the
    /// buffer comes back with the error.
    pub fn post_recv(&self, buf: B) -> core::result::Result<(), (Error, B)> {
        self.ring.post(buf, self.pd.local_dma_lkey(), |wr| {
            let mut bad = core::ptr::null();
            // SAFETY: `srq` is valid; `wr` is valid for the call and describes a buffer the
            // ring keeps until the request completes.
            unsafe { bindings::ib_post_srq_recv(self.srq.as_ptr(), wr, &mut bad) }
        })
    }

    /// Takes back the buffer of the receive that `wc` (from any attached queue pair)
    /// completes, synchronised for the CPU; `None` if `wc` is not one of ours.
    pub fn complete_recv(&self, wc: &WorkCompletion) -> Option<B> {
        self.ring.complete(wc)
    }
}

#[pinned_drop]
impl<B: RecvBuffer> PinnedDrop for SharedReceiveQueue<B> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant `srq` is valid and destroyed only here; attached queue
        // pairs hold an `Arc` to us, so none is left. The device stops accessing posted
        // buffers, which are freed afterwards with the ring.
        unsafe { bindings::ib_destroy_srq_user(self.srq.as_ptr(), core::ptr::null_mut()) };
    }
}
