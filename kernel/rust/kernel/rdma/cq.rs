// SPDX-License-Identifier: GPL-2.0

//! Completion queues and work completions.
//!
//! A driver makes a [`CompletionQueue`] with a [`CompletionHandler`] of its own, which the
//! device calls, in any context, when a completion arrives on a queue that asked for one
//! ([`CompletionQueue::request_notify`]). The driver then polls the queue, usually from
//! NAPI, into [`WorkCompletion`]s it keeps for the purpose, and arms it again.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! # Examples
//!
//! ```
//! use core::sync::atomic::{AtomicBool, Ordering};
//! use kernel::c_str;
//! use kernel::prelude::*;
//! use kernel::rdma::cq::{CompletionHandler, CompletionQueue, WcStatus, WorkCompletion};
//! use kernel::rdma::device::Device;
//! use kernel::sync::Arc;
//!
//! /// Remembers that a completion came, for the poller.
//! struct Pending(AtomicBool);
//!
//! impl CompletionHandler for Pending {
//!     fn completion(&self) {
//!         self.0.store(true, Ordering::Release);
//!     }
//! }
//!
//! /// A queue of 256 completions on `device`, reporting on vector 0, armed.
//! fn queue(device: &Device) -> Result<Arc<CompletionQueue<Pending>>> {
//!     let pending = Arc::new(Pending(AtomicBool::new(false)), GFP_KERNEL)?;
//!     let cq = CompletionQueue::new(device, 256, 0, pending, c_str!("example"))?;
//!     cq.request_notify()?;
//!     Ok(cq)
//! }
//!
//! /// Polls `cq` empty, eight completions at a time; returns how many succeeded.
//! fn drain(cq: &CompletionQueue<Pending>, wcs: &mut [WorkCompletion; 8]) -> Result<usize> {
//!     let mut done = 0;
//!     loop {
//!         let n = cq.poll(wcs)?;
//!         done += wcs[..n].iter().filter(|wc| wc.status() == WcStatus::Success).count();
//!         if n < wcs.len() {
//!             return Ok(done);
//!         }
//!     }
//! }
//! # let _ = (queue, drain);
//!
//! // Completions to poll into are plain data: an empty one belongs to no request.
//! let wcs: [WorkCompletion; 8] = Default::default();
//! assert!(wcs.iter().all(|wc| wc.wr_id() == 0));
//! ```

use super::device::{Device, DeviceRef};
use crate::{
    alloc::flags::GFP_KERNEL,
    bindings,
    error::{
        code::{EINVAL, EOPNOTSUPP},
        from_err_ptr, to_result, Result,
    },
    ffi::c_void,
    str::CStr,
    sync::Arc,
};
use core::ptr::NonNull;

/// Told when a completion arrives on a queue that asked for notification.
///
/// Runs in whatever context the device reports completions from, interrupt context
/// included: it must not sleep. Drivers typically schedule NAPI or a work item here.
pub trait CompletionHandler: Send + Sync {
    /// A completion event for the queue.
    fn completion(&self);
}

/// A completion queue (`struct ib_cq`) with its event handler `H`.
///
/// # Invariants
///
/// `cq` was returned by `__ib_create_cq` with `handler` as its context, and is destroyed only
/// in `drop`, before `handler` is released.
pub struct CompletionQueue<H: CompletionHandler> {
    cq: NonNull<bindings::ib_cq>,
    handler: Arc<H>,
    device: DeviceRef,
}

// SAFETY: Providers serialise access to a CQ internally; the handler is `Send + Sync`.
unsafe impl<H: CompletionHandler> Send for CompletionQueue<H> {}
// SAFETY: Shared access polls and arms the CQ, which providers lock internally, and
// reaches the handler, which is `Sync`.
unsafe impl<H: CompletionHandler> Sync for CompletionQueue<H> {}

/// # Safety
///
/// Called by the RDMA core only, with the context given to `__ib_create_cq`.
unsafe extern "C" fn completion_callback<H: CompletionHandler>(
    _cq: *mut bindings::ib_cq,
    context: *mut c_void,
) {
    // SAFETY: `context` is the `*const H` of the `Arc<H>` given at creation, which outlives
    // the CQ (type invariant of `CompletionQueue`), and the core only calls this while the
    // CQ exists.
    let handler = unsafe { &*context.cast::<H>() };
    handler.completion();
}

impl<H: CompletionHandler> CompletionQueue<H> {
    /// Creates a queue of at least `entries` completions on `device`, reporting events on
    /// completion vector `vector` to `handler`. `owner` names the creating module in the
    /// core's resource tracking.
    pub fn new(
        device: &Device,
        entries: u32,
        vector: u32,
        handler: Arc<H>,
        owner: &'static CStr,
    ) -> Result<Arc<Self>> {
        let device = device.get_ref()?;
        let attr = bindings::ib_cq_init_attr {
            cqe: entries,
            comp_vector: vector,
            flags: 0,
        };
        let context: *const H = &*handler;
        // SAFETY: The device is registered; `attr` is valid for the call; `context` stays
        // valid until the CQ is destroyed (it is kept in the returned object).
        let cq = from_err_ptr(unsafe {
            bindings::__ib_create_cq(
                device.as_raw(),
                Some(completion_callback::<H>),
                None,
                context.cast_mut().cast(),
                &attr,
                owner.as_char_ptr(),
            )
        })?;
        let cq = NonNull::new(cq).ok_or(EINVAL)?;
        // INVARIANT: `cq` was just created with `handler` as its context.
        Ok(Arc::new(
            Self {
                cq,
                handler,
                device,
            },
            GFP_KERNEL,
        )?)
    }

    /// The handler of this queue.
    #[inline]
    pub fn handler(&self) -> &Arc<H> {
        &self.handler
    }

    /// Moves up to `wc.len()` completions into `wc`; returns how many.
    #[inline]
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let n = i32::try_from(wc.len()).unwrap_or(i32::MAX);
        let cq = self.cq.as_ptr();
        // SAFETY: `cq` is valid, and so its device, whose operations are set while it is
        // registered.
        let Some(poll_cq) = (unsafe { (*(*cq).device).ops.poll_cq }) else {
            return Err(EOPNOTSUPP);
        };
        // SAFETY: `cq` is valid; `wc` has room for `n` entries of the `repr(transparent)`
        // `WorkCompletion`. The device's own operation is called as `ib_poll_cq` (inline in
        // C) calls it.
        let ret = unsafe { poll_cq(cq, n, wc.as_mut_ptr().cast()) };
        // A count, or a negative errno (`to_result` is not inlined: checked here first).
        match usize::try_from(ret) {
            Ok(n) => Ok(n),
            Err(_) => to_result(ret).map(|()| 0),
        }
    }

    /// Moderates completion events: one after `count` completions or `period_us`
    /// microseconds, whichever comes first (0 and 0: an event per completion). `EOPNOTSUPP`
    /// where the device cannot.
    #[inline]
    pub fn set_moderation(&self, count: u16, period_us: u16) -> Result {
        // SAFETY: `cq` is valid.
        to_result(unsafe { bindings::rdma_set_cq_moderation(self.cq.as_ptr(), count, period_us) })
    }

    /// Asks for a handler call at the next completion. Returns `true` when completions may
    /// have arrived before the request took effect: the caller must poll again.
    #[inline]
    pub fn request_notify(&self) -> Result<bool> {
        let flags = bindings::ib_cq_notify_flags_IB_CQ_NEXT_COMP
            | bindings::ib_cq_notify_flags_IB_CQ_REPORT_MISSED_EVENTS;
        let cq = self.cq.as_ptr();
        // SAFETY: `cq` is valid, and so its device, whose operations are set while it is
        // registered.
        let Some(req_notify_cq) = (unsafe { (*(*cq).device).ops.req_notify_cq }) else {
            return Err(EOPNOTSUPP);
        };
        // SAFETY: `cq` is valid; called as `ib_req_notify_cq` (inline in C) calls it.
        let ret = unsafe { req_notify_cq(cq, flags) };
        if ret < 0 {
            to_result(ret)?;
        }
        Ok(ret > 0)
    }
}

/// What a queue pair needs of a completion queue, whatever its handler type. Sealed: only
/// [`CompletionQueue`] is one.
pub trait RawCompletionQueue: Send + Sync + super::private::Sealed {
    /// The `struct ib_cq`, valid while `self` is.
    #[doc(hidden)]
    fn as_raw(&self) -> *mut bindings::ib_cq;

    /// The device the queue lives on.
    fn device(&self) -> &Device;
}

impl<H: CompletionHandler> super::private::Sealed for CompletionQueue<H> {}

impl<H: CompletionHandler> RawCompletionQueue for CompletionQueue<H> {
    #[inline]
    fn as_raw(&self) -> *mut bindings::ib_cq {
        self.cq.as_ptr()
    }

    fn device(&self) -> &Device {
        &self.device
    }
}

impl<H: CompletionHandler> Drop for CompletionQueue<H> {
    fn drop(&mut self) {
        // SAFETY: `cq` is valid and destroyed only here; queue pairs using it hold an `Arc`
        // to it, so none is left. Once it is destroyed the handler is no longer called.
        let ret = unsafe { bindings::ib_destroy_cq_user(self.cq.as_ptr(), core::ptr::null_mut()) };
        if ret != 0 {
            // The device may still call the handler: it is leaked, never freed.
            crate::pr_err!(
                "completion queue not destroyed ({}): its handler leaked\n",
                ret
            );
            core::mem::forget(self.handler.clone());
        }
    }
}

/// Status of a work completion.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// Flushed because the queue pair moved to the error state.
    Flushed,
    /// Any other failure, with the core's status code.
    Error(u32),
}

/// Kind of work that completed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcOpcode {
    /// A send.
    Send,
    /// A receive.
    Recv,
    /// Anything else, with the core's opcode.
    Other(u32),
}

/// Names a queue pair while it exists, to match completions from a shared completion queue
/// with their queue pair ([`WorkCompletion::qp_id`], [`super::qp::QueuePair::id`]). A
/// destroyed queue pair's name may be given to a new one.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct QpId(pub(crate) usize);

/// One work completion (`struct ib_wc`), filled in by [`CompletionQueue::poll`].
///
/// # Invariants
///
/// The pointers inside (`qp`, and `wr_cqe` sharing its place with `wr_id`) are never
/// dereferenced: they only identify the queue pair and request a completion is for.
#[repr(transparent)]
pub struct WorkCompletion(bindings::ib_wc);

// SAFETY: A completion is plain data; its pointers only identify objects, never dereferenced.
unsafe impl Send for WorkCompletion {}
// SAFETY: Shared access only reads plain fields.
unsafe impl Sync for WorkCompletion {}

impl WorkCompletion {
    /// An empty completion, to poll into.
    #[inline]
    pub const fn new() -> Self {
        // SAFETY: `ib_wc` is integers, C enums and pointers, for which zero is valid.
        // INVARIANT: Null pointers, never dereferenced.
        Self(unsafe { core::mem::MaybeUninit::zeroed().assume_init() })
    }

    #[inline]
    fn raw(&self) -> &bindings::ib_wc {
        &self.0
    }

    /// The token of the work request, as given when it was posted (0 once the completion
    /// was used up, or for one never filled in).
    #[inline]
    pub fn wr_id(&self) -> u64 {
        // SAFETY: Both union members are 64-bit; this API always posts with `wr_id`.
        unsafe { self.raw().__bindgen_anon_1.wr_id }
    }

    /// Uses the completion up: its buffer was taken back, and the slot it named may hold
    /// another one now. Queues number their requests with serials other than 0, so an id
    /// of 0 matches none.
    #[inline]
    pub(crate) fn consume(&mut self) {
        self.0.__bindgen_anon_1.wr_id = 0;
    }

    /// The completion status.
    #[inline]
    pub fn status(&self) -> WcStatus {
        match self.raw().status {
            bindings::ib_wc_status_IB_WC_SUCCESS => WcStatus::Success,
            bindings::ib_wc_status_IB_WC_WR_FLUSH_ERR => WcStatus::Flushed,
            s => WcStatus::Error(s),
        }
    }

    /// What kind of work completed (valid on success).
    #[inline]
    pub fn opcode(&self) -> WcOpcode {
        match self.raw().opcode {
            bindings::ib_wc_opcode_IB_WC_SEND => WcOpcode::Send,
            bindings::ib_wc_opcode_IB_WC_RECV => WcOpcode::Recv,
            o => WcOpcode::Other(o),
        }
    }

    /// Bytes received (receives only), including the 40-byte GRH space on UD.
    #[inline]
    pub fn byte_len(&self) -> u32 {
        self.raw().byte_len
    }

    /// The sender's QPN (UD receives).
    #[inline]
    pub fn src_qp(&self) -> u32 {
        self.raw().src_qp
    }

    /// The sender's LID (InfiniBand UD receives).
    #[inline]
    pub fn slid(&self) -> u32 {
        self.raw().slid
    }

    /// Whether the receive buffer starts with a valid GRH.
    #[inline]
    pub fn has_grh(&self) -> bool {
        self.raw().wc_flags & (bindings::ib_wc_flags_IB_WC_GRH as i32) != 0
    }

    /// The queue pair the completion belongs to.
    #[inline]
    pub fn qp_id(&self) -> QpId {
        QpId(self.qp() as usize)
    }

    #[inline]
    pub(crate) fn qp(&self) -> *mut bindings::ib_qp {
        self.raw().qp
    }
}

impl Default for WorkCompletion {
    #[inline]
    fn default() -> Self {
        Self::new()
    }
}
