// SPDX-License-Identifier: GPL-2.0

//! Queue pairs.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! A queue pair owns every buffer posted to it until the work request completes: posting
//! moves the buffer in, [`QueuePair::complete_recv`] and [`QueuePair::complete_send`] move
//! it out again for the completion that names it. The device therefore never accesses memory
//! that Rust code can see or free, and destroying the queue pair (which stops the device)
//! happens before its buffers are freed.

use super::{
    ah::{AddressHandle, AhAttr, SendClock},
    cq::{QpId, RawCompletionQueue, WorkCompletion},
    device::{Device, Gid},
    dma::{DmaBuffer, RecvSkb, ScatterBuffer, SkbMapping, MAX_SKB_SEGMENTS},
    pd::ProtectionDomain,
    slots::WorkSlots,
};
use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    bindings,
    error::{
        code::{EINVAL, ENOSPC, EOPNOTSUPP},
        from_err_ptr, to_result, Result,
    },
    ffi::{c_int, c_void},
    net::skb::SkBuff,
    prelude::*,
    str::CStr,
    sync::{Arc, Mutex, SpinLockBh},
};
use core::{mem::MaybeUninit, ptr::NonNull};

mod rq;
pub use rq::RecvQueueGuard;
use rq::RecvState;

/// Sizes of the work queues of a queue pair.
#[derive(Clone, Copy, Debug)]
pub struct QpCaps {
    /// Outstanding sends.
    pub max_send_wr: u32,
    /// Outstanding receives.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive.
    pub max_recv_sge: u32,
}

/// An asynchronous event of one queue pair, as the device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpEvent {
    /// A queue pair on a shared receive queue, in the error state, will take no more
    /// buffers from that queue: it may now be destroyed without losing one mid-message.
    LastWqeReached,
    /// A message arrived on a connection before its RTU (passive side).
    CommEstablished,
    /// The send queue finished draining.
    SqDrained,
    /// The queue pair failed and went to the error state.
    Fatal,
    /// A work request was invalid; the queue pair went to the error state.
    RequestError,
    /// A peer's request violated access rights; the queue pair went to the error state.
    AccessError,
    /// Any other event, with its raw code.
    Other(u32),
}

impl QpEvent {
    fn from_raw(event: bindings::ib_event_type) -> Self {
        match event {
            bindings::ib_event_type_IB_EVENT_QP_LAST_WQE_REACHED => Self::LastWqeReached,
            bindings::ib_event_type_IB_EVENT_COMM_EST => Self::CommEstablished,
            bindings::ib_event_type_IB_EVENT_SQ_DRAINED => Self::SqDrained,
            bindings::ib_event_type_IB_EVENT_QP_FATAL => Self::Fatal,
            bindings::ib_event_type_IB_EVENT_QP_REQ_ERR => Self::RequestError,
            bindings::ib_event_type_IB_EVENT_QP_ACCESS_ERR => Self::AccessError,
            other => Self::Other(other),
        }
    }
}

/// Receives the asynchronous events of a queue pair.
///
/// Devices report these from any context, possibly with interrupts disabled and the same
/// event more than once: implementations record what happened and must not sleep.
pub trait QpEventHandler: Send + Sync {
    /// `event` happened on the queue pair.
    fn event(&self, event: QpEvent);
}

/// # Safety
///
/// Called by the core only, for a queue pair created by [`QueuePair::with_events`], with the
/// context that function registered.
unsafe extern "C" fn qp_event_callback(event: *mut bindings::ib_event, context: *mut c_void) {
    // SAFETY: `context` is the boxed handler of a queue pair, freed only after the queue pair
    // is destroyed, which ends the calls of this function.
    let handler = unsafe { &*context.cast::<Arc<dyn QpEventHandler>>() };
    // SAFETY: `event` is valid for the call.
    let event = unsafe { &*event };
    handler.event(QpEvent::from_raw(event.event));
}

/// What a send carries: the first `len` bytes of a buffer, or a socket buffer mapped in
/// place. It is made in the send's slot and stays there: a completion takes out what it
/// carried ([`Payload::take_sent`]) and the rest is dropped where it lies.
enum Payload {
    Buffer { buf: Option<DmaBuffer>, len: u32 },
    Skb(SkbMapping),
}

impl Payload {
    /// Gives the memory to the device and describes it in `out` with `lkey`: the buffer
    /// synchronised, the skb mapped. Returns the entries written; `EINVAL` if `out` is too
    /// short.
    // Always inline: once per send, and the call (saving registers, the result through
    // memory) cost a fifth of it.
    #[inline(always)]
    fn map(&mut self, lkey: u32, out: &mut [MaybeUninit<bindings::ib_sge>]) -> Result<usize> {
        match self {
            Payload::Buffer {
                buf: Some(buf),
                len,
            } => {
                out.first_mut().ok_or(EINVAL)?.write(bindings::ib_sge {
                    addr: buf.dma_addr(),
                    length: *len,
                    lkey,
                });
                buf.sync_for_device();
                Ok(1)
            }
            Payload::Buffer { buf: None, .. } => Err(EINVAL),
            Payload::Skb(mapping) => mapping.map(lkey, out),
        }
    }

    /// Hands the memory back to the CPU and takes it out: the buffer synchronised, the skb
    /// unmapped; `None` if taken already.
    #[inline]
    fn take_sent(&mut self) -> Option<Sent> {
        match self {
            Payload::Buffer { buf, .. } => buf.take().map(|buf| {
                buf.sync_for_cpu();
                Sent::Buffer(buf)
            }),
            Payload::Skb(mapping) => mapping.take_skb().map(Sent::Skb),
        }
    }
}

/// What a completed (or dropped) send gives back.
pub enum Sent {
    /// A buffer posted with [`QueuePair::post_send`] or [`QueuePair::post_send_ud`].
    Buffer(DmaBuffer),
    /// A socket buffer posted with [`QueuePair::post_skb`] or [`QueuePair::post_skb_ud`].
    Skb(SkBuff),
}

impl Sent {
    /// Frees what a successful send carried (an skb as consumed, not as a drop).
    #[inline]
    pub fn consume(self) {
        match self {
            Sent::Skb(skb) => skb.consume(),
            Sent::Buffer(buf) => drop(buf),
        }
    }
}

/// A send posted, with what must live until it completes (its address handle waits for it
/// through the queue pair's [`SendClock`]).
struct SendSlot {
    payload: Payload,
}

/// What sends are posted with, kept under the queue pair's posting lock: the resets under
/// way, and a work request with room for its scatter/gather entries whose fields that do not
/// change from send to send are set once (C keeps such a request per interface too). A post
/// fills in the rest and hands the request to the device, which reads it during the call
/// only.
///
/// # Invariants
///
/// The pointers in `wr` are read by the device only during a post, made under the lock,
/// and set by that post: the request's entries in `sges` and the address handle the send
/// goes through.
struct Poster {
    /// Resets under way, during which sends are refused.
    resets: u32,
    /// Sends posted so far: the last one's number (see [`SendClock`]).
    posted: u64,
    wr: bindings::ib_ud_wr,
    sges: [MaybeUninit<bindings::ib_sge>; MAX_SKB_SEGMENTS],
}

// SAFETY: The pointers `wr` holds are only meaningful during a post on the CPU that made it
// (type invariant); between posts they are stale and never dereferenced.
unsafe impl Send for Poster {}

impl Poster {
    fn new() -> Self {
        // SAFETY: All-zero is a valid `ib_ud_wr`: no next request, no header, P_Key index 0.
        let mut wr: bindings::ib_ud_wr = unsafe { core::mem::zeroed() };
        wr.wr.opcode = bindings::ib_wr_opcode_IB_WR_SEND;
        wr.wr.send_flags = bindings::ib_send_flags_IB_SEND_SIGNALED;
        Self {
            resets: 0,
            posted: 0,
            wr,
            sges: [const { MaybeUninit::uninit() }; MAX_SKB_SEGMENTS],
        }
    }
}

/// The transport of a queue pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpType {
    /// Unreliable datagram: any peer per send, through an address handle.
    Ud,
    /// Reliable connected: one peer, set up through the IB CM.
    Rc,
    /// Unreliable connected: one peer, set up through the IB CM, nothing resent.
    Uc,
}

/// How long a sender that found no receive buffer waits before it sends again: the RNR
/// NAK timer a receiving RC queue pair advertises (its minimum RNR timer). The wire carries
/// a 5-bit code: 1 to 31 grow from 10 us to 491.52 ms, and 0 is the longest, 655.36 ms.
///
/// # Examples
///
/// ```
/// use kernel::rdma::qp::RnrTimer;
///
/// assert_eq!(RnrTimer::at_least_us(640).code(), 12);
/// assert_eq!(RnrTimer::at_least_us(641).micros(), 960);
/// assert_eq!(RnrTimer::at_least_us(0).code(), 1);
/// assert_eq!(RnrTimer::at_least_us(500_000).code(), 0);
/// assert_eq!(RnrTimer::at_least_us(u32::MAX).micros(), 655_360);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RnrTimer(u8);

impl RnrTimer {
    /// The wait of each code, in microseconds.
    const MICROS: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560,
        3_840, 5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880,
        163_840, 245_760, 327_680, 491_520,
    ];

    /// The shortest wait of at least `us` microseconds (the longest there is, if none is
    /// that long).
    pub const fn at_least_us(us: u32) -> Self {
        let mut code = 1;
        while code < Self::MICROS.len() {
            if Self::MICROS[code] >= us {
                return Self(code as u8);
            }
            code += 1;
        }
        Self(0)
    }

    /// The code the wire carries.
    #[inline]
    pub const fn code(self) -> u8 {
        self.0
    }

    /// The wait, in microseconds.
    #[inline]
    pub const fn micros(self) -> u32 {
        Self::MICROS[self.0 as usize]
    }
}

mod sealed {
    use crate::{bindings, error::Result};

    /// How receive memory is handed to a device and taken back.
    pub trait Sealed: Sized {
        /// What a receive ring keeps while the device owns the memory.
        type Posted: Send;
        /// Room for the scatter/gather entries of a receive, for memory that does not keep
        /// its own (made for every receive posted: `Default` makes it cheaply).
        type Sges: AsMut<[bindings::ib_sge]> + Default;
        /// Makes the memory the device's to write: `EINVAL` unless `device` may write all
        /// of it; on failure the memory is freed.
        ///
        /// # Safety
        ///
        /// `device` must stay valid for as long as the result lives.
        unsafe fn hand_over(self, device: &super::Device) -> Result<Self::Posted>;
        /// The memory as scatter/gather entries with `lkey`: written to `scratch`, or kept by
        /// the memory itself, on the heap, where they stay when the memory moves (into its
        /// slot, before it is posted).
        fn sges<'a>(
            posted: &'a mut Self::Posted,
            lkey: u32,
            scratch: &'a mut Self::Sges,
        ) -> Result<&'a mut [bindings::ib_sge]>;
        /// Takes the memory back for the CPU, with the number of bytes the device wrote if
        /// the receive completed.
        fn take_back(posted: Self::Posted, written: Option<u32>) -> Self;
    }

    /// Receive memory the device writes where the CPU reads it, so that it can be posted
    /// again where it lies.
    pub trait InPlace: Sealed<Posted = Self> {
        /// Hands the memory, back from the device, to the CPU.
        fn to_cpu(&self);
        /// Whether `device` may write all of the memory.
        fn writable_by(&self, device: &super::Device) -> bool;
        /// Hands the memory to its device.
        fn sync_to_device(&self);
        /// Hands the memory to the device again: `EINVAL` unless `device` may write all of
        /// it.
        #[inline]
        fn to_device(&self, device: &super::Device) -> Result {
            if !self.writable_by(device) {
                return Err(crate::error::code::EINVAL);
            }
            self.sync_to_device();
            Ok(())
        }
    }
}

/// Memory a receive can land in: a [`DmaBuffer`] (one segment), a [`ScatterBuffer`] (a
/// head and pages, up to 16 segments) or an [`SkBuff`], whose tailroom the device writes
/// and which comes back holding what it received (the skb for the stack, without a copy).
pub trait RecvBuffer: sealed::Sealed + Send {}

/// A [`RecvBuffer`] that a completion can lend to the receiver and that is then posted again
/// in the same slot ([`super::srq::SharedReceiveQueue::recycle`]): a [`DmaBuffer`] or a
/// [`ScatterBuffer`]. Nothing is moved or taken out of the queue's slot per receive.
pub trait RecyclableBuffer: RecvBuffer + sealed::InPlace {}

impl sealed::Sealed for DmaBuffer {
    type Posted = Self;
    type Sges = [bindings::ib_sge; 1];
    #[inline]
    unsafe fn hand_over(self, device: &Device) -> Result<Self> {
        sealed::InPlace::to_device(&self, device)?;
        Ok(self)
    }
    #[inline]
    fn sges<'a>(
        posted: &'a mut Self,
        lkey: u32,
        scratch: &'a mut Self::Sges,
    ) -> Result<&'a mut [bindings::ib_sge]> {
        let length = u32::try_from(posted.len()).map_err(|_| EINVAL)?;
        *scratch = [bindings::ib_sge {
            addr: posted.dma_addr(),
            length,
            lkey,
        }];
        Ok(&mut scratch[..])
    }
    #[inline]
    fn take_back(posted: Self, _written: Option<u32>) -> Self {
        posted.sync_for_cpu();
        posted
    }
}
impl sealed::InPlace for DmaBuffer {
    #[inline]
    fn to_cpu(&self) {
        self.sync_for_cpu();
    }
    #[inline]
    fn writable_by(&self, device: &Device) -> bool {
        self.usable_by(device, true)
    }
    #[inline]
    fn sync_to_device(&self) {
        self.sync_for_device();
    }
}
impl RecvBuffer for DmaBuffer {}
impl RecyclableBuffer for DmaBuffer {}

impl sealed::Sealed for ScatterBuffer {
    type Posted = Self;
    /// None: the buffer keeps its own.
    type Sges = [bindings::ib_sge; 0];
    #[inline]
    unsafe fn hand_over(self, device: &Device) -> Result<Self> {
        sealed::InPlace::to_device(&self, device)?;
        Ok(self)
    }
    #[inline]
    fn sges<'a>(
        posted: &'a mut Self,
        lkey: u32,
        _scratch: &'a mut Self::Sges,
    ) -> Result<&'a mut [bindings::ib_sge]> {
        posted.scatter_list(lkey)
    }
    #[inline]
    fn take_back(posted: Self, _written: Option<u32>) -> Self {
        posted.sync_for_cpu();
        posted
    }
}
impl sealed::InPlace for ScatterBuffer {
    #[inline]
    fn to_cpu(&self) {
        self.sync_for_cpu();
    }
    #[inline]
    fn writable_by(&self, device: &Device) -> bool {
        self.usable_by(device)
    }
    #[inline]
    fn sync_to_device(&self) {
        self.sync_for_device();
    }
}
impl RecvBuffer for ScatterBuffer {}
impl RecyclableBuffer for ScatterBuffer {}

impl sealed::Sealed for SkBuff {
    type Posted = RecvSkb;
    type Sges = [bindings::ib_sge; 1];
    #[inline]
    unsafe fn hand_over(self, device: &Device) -> Result<RecvSkb> {
        // SAFETY: The caller keeps the device valid while the mapping lives.
        unsafe { RecvSkb::new(device.as_raw(), self) }
    }
    #[inline]
    fn sges<'a>(
        posted: &'a mut RecvSkb,
        lkey: u32,
        scratch: &'a mut Self::Sges,
    ) -> Result<&'a mut [bindings::ib_sge]> {
        *scratch = [posted.sge(lkey)];
        Ok(&mut scratch[..])
    }
    #[inline]
    fn take_back(posted: RecvSkb, written: Option<u32>) -> Self {
        posted.into_skb(written.unwrap_or(0))
    }
}
impl RecvBuffer for SkBuff {}

/// A shared receive queue as queue pairs see it: something they can be created on. Sealed:
/// only [`super::srq::SharedReceiveQueue`] is one.
pub trait SharedQueue: Send + Sync + super::private::Sealed {
    /// The C object, valid while `self` is.
    #[doc(hidden)]
    fn as_raw(&self) -> *mut bindings::ib_srq;

    /// The device the queue lives on.
    fn device(&self) -> &Device;
}

/// Receive buffers posted to a shared receive queue, each in the slot its request names
/// until the request completes. Posted and completed from any context at once (connected
/// mode refills it from process context too), hence slots taken by atomic operations.
pub(crate) struct RecvRing<B: RecvBuffer> {
    slots: WorkSlots<B::Posted>,
}

impl<B: RecvBuffer> RecvRing<B> {
    #[inline]
    pub(crate) fn new(n: u32) -> Result<Self> {
        Ok(Self {
            slots: WorkSlots::new(n)?,
        })
    }

    /// Posts `buf` through `post` (which hands the request to the device and returns its
    /// status); keeps the buffer until its completion. `EINVAL` unless `device` may write
    /// all of the buffer, `ENOSPC` when every slot is in use; on failure the buffer is freed.
    ///
    /// # Safety
    ///
    /// `device` must stay valid for as long as the ring lives (buffers it keeps may need it
    /// to be released).
    #[inline]
    pub(crate) unsafe fn post(
        &self,
        buf: B,
        (device, lkey): (&Device, u32),
        post: impl FnOnce(&bindings::ib_recv_wr) -> c_int,
    ) -> Result {
        // SAFETY: The caller keeps `device` valid while the ring, hence what it keeps, lives.
        let mut posted = unsafe { B::hand_over(buf, device) }?;
        let mut scratch = B::Sges::default();
        let list =
            B::sges(&mut posted, lkey, &mut scratch).map(|list| (list.as_mut_ptr(), list.len()))?;
        let claim = self.slots.claim().ok_or(ENOSPC)?;
        // The buffer is in its slot before the device can complete the request (entries it
        // keeps stay where they are).
        let wr_id = claim.fill(posted);
        self.submit(wr_id, list, post)
    }

    /// Posts request `wr_id`, whose buffer is in its slot, with the `n` entries at `sg_list`
    /// through `post`; if that fails, takes the buffer back and frees it. The entries are
    /// on the caller's stack or in the buffer: either way valid until the device has taken
    /// the request in, which it does before it can complete it.
    #[inline(always)]
    fn submit(
        &self,
        wr_id: u64,
        (sg_list, n): (*mut bindings::ib_sge, usize),
        post: impl FnOnce(&bindings::ib_recv_wr) -> c_int,
    ) -> Result {
        let ret = match c_int::try_from(n) {
            Ok(num_sge) => post(&bindings::ib_recv_wr {
                next: core::ptr::null_mut(),
                __bindgen_anon_1: bindings::ib_recv_wr__bindgen_ty_1 { wr_id },
                sg_list,
                num_sge,
            }),
            Err(_) => EINVAL.to_errno(),
        };
        if ret != 0 {
            // Not posted: no completion names the slot (a reset may have taken the buffer
            // meanwhile, and given it back).
            if let Some(posted) = self.slots.take(wr_id) {
                drop(B::take_back(posted, None));
            }
        }
        to_result(ret)
    }

    /// Takes back the buffer that `wc` completes, if `wc` names one of our requests, and
    /// uses `wc` up: completing it again gives nothing (the slot may hold a buffer posted
    /// since).
    #[inline]
    pub(crate) fn complete(&self, wc: &mut WorkCompletion) -> Option<B> {
        let posted = self.slots.take(wc.wr_id())?;
        wc.consume();
        Some(B::take_back(posted, Some(wc.byte_len())))
    }

    /// Lends the buffer that `wc` completes, synchronised for the CPU, to `f` with the number
    /// of bytes the device wrote, then posts it again through `post` in the same slot, and
    /// uses `wc` up. `None` if `wc` names none of our requests (or was used up already); else
    /// whether the buffer was posted again. `EINVAL` if the device may not write all of what
    /// `f` left; then, or if `post` fails, the buffer is freed.
    ///
    /// # Safety
    ///
    /// As for [`RecvRing::post`].
    #[inline]
    pub(crate) unsafe fn recycle(
        &self,
        wc: &mut WorkCompletion,
        (device, lkey): (&Device, u32),
        post: impl FnOnce(&bindings::ib_recv_wr) -> c_int,
        f: impl FnOnce(&mut B, u32),
    ) -> Option<Result>
    where
        B: RecyclableBuffer,
    {
        let mut held = self.slots.hold(wc.wr_id())?;
        wc.consume();
        let buf = held.value()?;
        sealed::InPlace::to_cpu(buf);
        f(buf, wc.byte_len());
        let mut scratch = B::Sges::default();
        // Dropping `held` on failure frees the buffer and empties the slot.
        let described = sealed::InPlace::to_device(buf, device)
            .and_then(|()| B::sges(buf, lkey, &mut scratch))
            .map(|list| (list.as_mut_ptr(), list.len()));
        let list = match described {
            Ok(list) => list,
            Err(e) => return Some(Err(e)),
        };
        // The buffer stays in its slot: the slot names the new request before the device
        // can complete it.
        let wr_id = held.refill();
        Some(self.submit(wr_id, list, post))
    }

    /// Leaks every posted buffer, for a queue the device may still write to (its destroy
    /// failed): never freed, they stay valid for it.
    #[inline]
    pub(crate) fn leak_all(&self) {
        self.slots.drain(core::mem::forget);
    }
}

/// The state of a queue pair, as the device reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// Just created or reset: no work is processed.
    Reset,
    /// Initialised: receives may be posted.
    Init,
    /// Ready to receive.
    ReadyToReceive,
    /// Ready to send.
    ReadyToSend,
    /// Send queue drained.
    SendQueueDrained,
    /// A send failed; the send queue stopped (unreliable transports).
    SendQueueError,
    /// Failed: posted work completes as flushed.
    Error,
}

/// A change of a queue pair's state and attributes (`struct ib_qp_attr` with its mask),
/// built by the user and applied with [`QueuePair::modify`]: which attributes a transport
/// needs at each step is the user's protocol, which the core checks. Moving to RESET or
/// ERROR has its own methods ([`QueuePair::reset`], [`QueuePair::set_error`]), since the
/// buffers posted are accounted for there.
///
/// # Examples
///
/// A UD queue pair brought up on port 1, P_Key index 0, with a Q_Key:
///
/// ```
/// use kernel::rdma::qp::{QpChange, QueuePair};
///
/// fn bring_up(qp: &QueuePair) -> Result {
///     qp.modify(&QpChange::to_init().port(1).pkey_index(0).qkey(0x0b1b))?;
///     qp.modify(&QpChange::to_ready_to_receive())?;
///     qp.modify(&QpChange::to_ready_to_send().send_psn(0))
/// }
/// # let _ = bring_up;
/// ```
///
/// # Invariants
///
/// `attr` holds no pointer: its address vectors are zeroed (their `sgid_attr` null), since
/// no method sets them and nothing would release what they pointed to.
#[derive(Clone, Copy)]
pub struct QpChange {
    attr: bindings::ib_qp_attr,
    mask: u32,
}

/// Attributes that change nothing but the state, to `state`.
fn qp_attr(state: bindings::ib_qp_state) -> bindings::ib_qp_attr {
    // SAFETY: All-zero is a valid `ib_qp_attr`.
    let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
    attr.qp_state = state;
    attr
}

impl QpChange {
    fn to(state: bindings::ib_qp_state) -> Self {
        Self {
            attr: qp_attr(state),
            mask: bindings::ib_qp_attr_mask_IB_QP_STATE,
        }
    }

    /// To INIT, from RESET (or INIT again).
    #[inline]
    pub fn to_init() -> Self {
        Self::to(bindings::ib_qp_state_IB_QPS_INIT)
    }

    /// To ready-to-receive, from INIT.
    #[inline]
    pub fn to_ready_to_receive() -> Self {
        Self::to(bindings::ib_qp_state_IB_QPS_RTR)
    }

    /// To ready-to-send, from ready-to-receive (or from SQE/SQD back).
    #[inline]
    pub fn to_ready_to_send() -> Self {
        Self::to(bindings::ib_qp_state_IB_QPS_RTS)
    }

    /// Attributes only, the state kept (as a Q_Key changed on a queue pair in use).
    pub fn attributes() -> Self {
        Self {
            attr: qp_attr(bindings::ib_qp_state_IB_QPS_RTS),
            mask: 0,
        }
    }

    /// The port the queue pair sends from.
    #[inline]
    pub fn port(mut self, port: u32) -> Self {
        self.attr.port_num = port;
        self.mask |= bindings::ib_qp_attr_mask_IB_QP_PORT;
        self
    }

    /// The index of its partition key in the port's P_Key table.
    #[inline]
    pub fn pkey_index(mut self, index: u16) -> Self {
        self.attr.pkey_index = index;
        self.mask |= bindings::ib_qp_attr_mask_IB_QP_PKEY_INDEX;
        self
    }

    /// The Q_Key a datagram must carry to be taken (UD).
    #[inline]
    pub fn qkey(mut self, qkey: u32) -> Self {
        self.attr.qkey = qkey;
        self.mask |= bindings::ib_qp_attr_mask_IB_QP_QKEY;
        self
    }

    /// The first send's packet sequence number (24 bits).
    #[inline]
    pub fn send_psn(mut self, psn: u32) -> Self {
        self.attr.sq_psn = psn & 0xff_ffff;
        self.mask |= bindings::ib_qp_attr_mask_IB_QP_SQ_PSN;
        self
    }

    /// Received messages may be written to local memory (the only access a connected
    /// queue pair of ours needs: no memory is registered for remote access).
    #[inline]
    pub fn local_write(mut self) -> Self {
        self.attr.qp_access_flags = bindings::ib_access_flags_IB_ACCESS_LOCAL_WRITE as i32;
        self.mask |= bindings::ib_qp_attr_mask_IB_QP_ACCESS_FLAGS;
        self
    }
}

/// A queue pair (`struct ib_qp`) of type [`QpType`].
///
/// # Invariants
///
/// `qp` was returned by `ib_create_qp_kernel` in `pd` with `send_cq` and `recv_cq`, and is
/// destroyed only in `drop`, before the buffers in `send` and `recv` are freed and before
/// `events` (if any: a `KBox` turned into a raw pointer, the context of the queue pair's
/// event callback) is freed. A slot of `send` whose state is a `wr_id` holds the buffer of
/// the work request posted (or about to be) with that `wr_id` and not completed through
/// this object; during a reset, also of requests the device dropped, whose `wr_id` carries
/// the serial before it was renewed. `recv` keeps the receives likewise ([`RecvState`]).
/// While `posting` counts a reset, no send is posted; while `recv` does, no receive.
/// `clock` is `Some` for a UD queue pair only: every send
/// posted through an address handle is numbered `posting.posted + 1` and has that number
/// stored in the handle before the device sees it, `posting.posted` counts the sends the
/// device took, and the clock counts each send taken back out of `send` once, by its
/// completion or by a reset.
#[pin_data(PinnedDrop)]
pub struct QueuePair<B: RecvBuffer = DmaBuffer> {
    qp: NonNull<bindings::ib_qp>,
    qp_type: QpType,
    /// Scatter/gather entries a send may have, as the device granted.
    max_send_sge: usize,
    /// Resets under way and the request sends are posted with; held across each
    /// `ib_post_send`, so that no send overlaps a reset.
    #[pin]
    posting: SpinLockBh<Poster>,
    /// What each send in flight carries; the completion path (NAPI on another CPU) takes
    /// it back without waiting for a post in progress.
    send: WorkSlots<SendSlot>,
    /// Numbers the sends for the address handles made for this queue pair (UD).
    clock: Option<Arc<SendClock>>,
    /// The receives posted (none on a shared receive queue), held across each
    /// `ib_post_recv`: a receive being posted while a reset hands the buffers back would
    /// leave the device a buffer given back.
    #[pin]
    recv: SpinLockBh<RecvState<<B as sealed::Sealed>::Posted>>,
    /// Multicast groups attached, left before the queue pair is destroyed.
    #[pin]
    mcast: Mutex<KVec<Option<(Gid, u16)>>>,
    pd: Arc<ProtectionDomain>,
    srq: Option<Arc<dyn SharedQueue>>,
    events: Option<NonNull<Arc<dyn QpEventHandler>>>,
    send_cq: Arc<dyn RawCompletionQueue>,
    recv_cq: Arc<dyn RawCompletionQueue>,
}

// SAFETY: The core allows a QP to be used from any thread; the buffers are `Send`.
unsafe impl<B: RecvBuffer> Send for QueuePair<B> {}
// SAFETY: Shared access posts (the core's posting functions may run concurrently) and
// takes buffers back from the slots, each slot by one thread at a time (`WorkSlots`); the
// buffers are `Send`.
unsafe impl<B: RecvBuffer> Sync for QueuePair<B> {}

/// The lock classes of every queue pair's posting lock and multicast list. Lockdep wants
/// one name per class, and generic code instantiated in another crate would bring its own
/// copy of a name literal: the classes are made here, in code that is not generic and not
/// inlined.
#[inline(never)]
fn qp_lock_classes() -> [(&'static CStr, &'static crate::sync::LockClassKey); 3] {
    [
        (
            crate::c_str!("QueuePair::posting"),
            crate::static_lock_class!(),
        ),
        (
            crate::c_str!("QueuePair::recv"),
            crate::static_lock_class!(),
        ),
        (
            crate::c_str!("QueuePair::mcast"),
            crate::static_lock_class!(),
        ),
    ]
}

impl QueuePair {
    /// Creates a queue pair of type `qp_type` in `pd`, completing sends on `send_cq` and
    /// receives on `recv_cq`. Every send is signalled. `owner` names the creating module in
    /// the core's resource tracking.
    #[inline]
    pub fn new(
        qp_type: QpType,
        pd: &Arc<ProtectionDomain>,
        send_cq: Arc<dyn RawCompletionQueue>,
        recv_cq: Arc<dyn RawCompletionQueue>,
        srq: Option<Arc<dyn SharedQueue>>,
        caps: QpCaps,
        owner: &'static CStr,
    ) -> Result<Pin<KBox<Self>>> {
        Self::with_events(qp_type, pd, send_cq, recv_cq, srq, caps, None, owner)
    }

    /// As [`QueuePair::new`], with `events` receiving the queue pair's asynchronous events
    /// until it is destroyed.
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub fn with_events(
        qp_type: QpType,
        pd: &Arc<ProtectionDomain>,
        send_cq: Arc<dyn RawCompletionQueue>,
        recv_cq: Arc<dyn RawCompletionQueue>,
        srq: Option<Arc<dyn SharedQueue>>,
        caps: QpCaps,
        events: Option<Arc<dyn QpEventHandler>>,
        owner: &'static CStr,
    ) -> Result<Pin<KBox<Self>>> {
        Self::with_buffers(qp_type, pd, send_cq, recv_cq, srq, caps, events, owner)
    }
}

impl<B: RecvBuffer> QueuePair<B> {
    /// As [`QueuePair::with_events`], for a queue pair whose own receive queue takes
    /// buffers of type `B` (a [`ScatterBuffer`] for messages larger than a page).
    #[allow(clippy::too_many_arguments)]
    pub fn with_buffers(
        qp_type: QpType,
        pd: &Arc<ProtectionDomain>,
        send_cq: Arc<dyn RawCompletionQueue>,
        recv_cq: Arc<dyn RawCompletionQueue>,
        srq: Option<Arc<dyn SharedQueue>>,
        caps: QpCaps,
        events: Option<Arc<dyn QpEventHandler>>,
        owner: &'static CStr,
    ) -> Result<Pin<KBox<Self>>> {
        // The core would link objects of different devices; refused instead.
        let device = pd.device().as_raw();
        if send_cq.device().as_raw() != device
            || recv_cq.device().as_raw() != device
            || srq.as_ref().is_some_and(|s| s.device().as_raw() != device)
        {
            return Err(EINVAL);
        }
        let events = match events {
            Some(handler) => Some(KBox::new(handler, GFP_KERNEL)?),
            None => None,
        };
        // Freed after the queue pair is destroyed: by `drop`, or below if set-up fails.
        let events = events.map(|b| {
            // SAFETY: `KBox::into_raw` never returns null.
            unsafe { NonNull::new_unchecked(KBox::into_raw(b)) }
        });
        let free_events = |events: Option<NonNull<Arc<dyn QpEventHandler>>>| {
            if let Some(p) = events {
                // SAFETY: `p` came from `KBox::into_raw` above and no queue pair uses it.
                drop(unsafe { KBox::from_raw(p.as_ptr()) });
            }
        };
        // SAFETY: All-zero is a valid `ib_qp_init_attr` (null pointers, zero sizes).
        let mut attr: bindings::ib_qp_init_attr = unsafe { core::mem::zeroed() };
        attr.send_cq = send_cq.as_raw();
        attr.recv_cq = recv_cq.as_raw();
        attr.cap.max_send_wr = caps.max_send_wr;
        attr.cap.max_recv_wr = caps.max_recv_wr;
        attr.cap.max_send_sge = caps.max_send_sge;
        attr.cap.max_recv_sge = caps.max_recv_sge;
        attr.sq_sig_type = bindings::ib_sig_type_IB_SIGNAL_ALL_WR;
        if let Some(srq) = &srq {
            // Receives come from the shared queue; this queue pair has none of its own.
            attr.srq = srq.as_raw();
            attr.cap.max_recv_wr = 0;
            attr.cap.max_recv_sge = 0;
        }
        attr.qp_type = match qp_type {
            QpType::Ud => bindings::ib_qp_type_IB_QPT_UD,
            QpType::Rc => bindings::ib_qp_type_IB_QPT_RC,
            QpType::Uc => bindings::ib_qp_type_IB_QPT_UC,
        };
        if let Some(p) = events {
            attr.event_handler = Some(qp_event_callback);
            attr.qp_context = p.as_ptr().cast();
        }
        let rings = WorkSlots::new(caps.max_send_wr).and_then(|send| {
            let recv = RecvState::new(if srq.is_some() { 0 } else { caps.max_recv_wr })?;
            let clock = match qp_type {
                QpType::Ud => Some(SendClock::new()?),
                _ => None,
            };
            Ok((send, recv, clock))
        });
        let (send, recv, clock) = match rings {
            Ok(rings) => rings,
            Err(e) => {
                free_events(events);
                return Err(e);
            }
        };
        // SAFETY: `pd`, both CQs and the SRQ are valid (we hold references, kept in the object);
        // `attr` is valid for the call; `owner` is a static string; the event context lives
        // until the queue pair is destroyed.
        let created = from_err_ptr(unsafe {
            bindings::ib_create_qp_kernel(pd.as_raw(), &mut attr, owner.as_char_ptr())
        })
        .and_then(|qp| NonNull::new(qp).ok_or(EINVAL));
        let qp = match created {
            Ok(qp) => qp,
            Err(e) => {
                free_events(events);
                return Err(e);
            }
        };
        // INVARIANT: `qp` was just created with these queues, in `pd`; every slot is empty.
        let init = pin_init!(Self {
            qp,
            qp_type,
            // The device writes back what it granted, at least what was asked.
            max_send_sge: (attr.cap.max_send_sge.max(caps.max_send_sge) as usize)
                .min(MAX_SKB_SEGMENTS),
            posting <- {
                let [(name, key), _, _] = qp_lock_classes();
                SpinLockBh::new(Poster::new(), name, key)
            },
            send,
            clock,
            recv <- {
                let [_, (name, key), _] = qp_lock_classes();
                SpinLockBh::new(recv, name, key)
            },
            mcast <- {
                let [_, _, (name, key)] = qp_lock_classes();
                Mutex::new(KVec::new(), name, key)
            },
            pd: pd.clone(),
            srq,
            events,
            send_cq,
            recv_cq,
        });
        match KBox::pin_init(init, GFP_KERNEL) {
            Ok(this) => Ok(this),
            Err(e) => {
                // SAFETY: `qp` was created above, nothing was posted to it, and it is not
                // referenced anywhere else.
                unsafe { bindings::ib_destroy_qp_user(qp.as_ptr(), core::ptr::null_mut()) };
                free_events(events);
                Err(e)
            }
        }
    }

    /// The queue pair number: what peers address and what IPoIB puts in its hardware address.
    #[inline]
    pub fn qp_num(&self) -> u32 {
        // SAFETY: By the type invariant `qp` is valid; `qp_num` is fixed at creation.
        unsafe { (*self.qp.as_ptr()).qp_num }
    }

    /// Makes an address handle for `attr`, for sends of this queue pair only (UD; `EINVAL`
    /// for another transport). May sleep.
    #[inline]
    pub fn address_handle(&self, attr: &AhAttr) -> Result<Arc<AddressHandle>> {
        let clock = self.clock.as_ref().ok_or(EINVAL)?;
        AddressHandle::new(&self.pd, clock, attr)
    }

    /// Destroys the address handles made for this queue pair that were dropped and that no
    /// send in flight uses; returns how many. Process context: the others wait for the
    /// next call, or for the queue pair's destruction.
    #[inline]
    pub fn reap_address_handles(&self) -> usize {
        self.clock.as_ref().map_or(0, |c| c.reap())
    }

    /// How many dropped address handles wait for a send in flight (or for a reap).
    #[inline]
    pub fn address_handles_waiting(&self) -> usize {
        self.clock.as_ref().map_or(0, |c| c.waiting())
    }

    /// The name completions of this queue pair carry ([`WorkCompletion::qp_id`]).
    #[inline]
    pub fn id(&self) -> QpId {
        QpId(self.qp.as_ptr() as usize)
    }

    /// The transport of this queue pair.
    #[inline]
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Applies `attr` under `mask` as it is (the core checks the attributes against the
    /// transition and the transport).
    #[inline]
    pub(crate) fn modify_raw(&self, attr: &mut bindings::ib_qp_attr, mask: u32) -> Result {
        // SAFETY: `qp` is valid and `attr` is valid for the call.
        to_result(unsafe { bindings::ib_modify_qp(self.qp.as_ptr(), attr, mask as i32) })
    }

    /// Applies `change` (process context). Attributes the transition does not take, or a
    /// required one missing, give `EINVAL` from the core (IBTA's table of QP attributes
    /// per transition and transport).
    #[inline]
    pub fn modify(&self, change: &QpChange) -> Result {
        let mut attr = change.attr;
        self.modify_raw(&mut attr, change.mask)
    }

    /// Moves the queue pair to the error state: posted work completes as flushed.
    #[inline]
    pub fn set_error(&self) -> Result {
        let mut attr = qp_attr(bindings::ib_qp_state_IB_QPS_ERR);
        self.modify_raw(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE)
    }

    /// Joins the multicast group `gid` (with `lid` on InfiniBand, 0 on RoCE) on this QP
    /// (process context). The queue pair leaves every group still joined when it is dropped:
    /// the core refuses to destroy an attached queue pair.
    pub fn attach_mcast(&self, gid: &Gid, lid: u16) -> Result {
        let mut attached = self.mcast.lock();
        // A free slot first, so that a group attached is always recorded.
        if !attached.iter().any(Option::is_none) {
            attached.push(None, GFP_KERNEL)?;
        }
        let mut raw = bindings::ib_gid { raw: gid.0 };
        // SAFETY: `qp` is valid and `raw` is valid for the call.
        to_result(unsafe { bindings::ib_attach_mcast(self.qp.as_ptr(), &mut raw, lid) })?;
        if let Some(slot) = attached.iter_mut().find(|slot| slot.is_none()) {
            *slot = Some((*gid, lid));
        }
        Ok(())
    }

    /// Leaves the multicast group `gid` (process context).
    pub fn detach_mcast(&self, gid: &Gid, lid: u16) -> Result {
        let mut attached = self.mcast.lock();
        Self::detach_raw(self.qp, gid, lid)?;
        if let Some(slot) = attached.iter_mut().find(|slot| **slot == Some((*gid, lid))) {
            *slot = None;
        }
        Ok(())
    }

    fn detach_raw(qp: NonNull<bindings::ib_qp>, gid: &Gid, lid: u16) -> Result {
        let mut raw = bindings::ib_gid { raw: gid.0 };
        // SAFETY: `qp` is a valid queue pair of ours and `raw` is valid for the call.
        to_result(unsafe { bindings::ib_detach_mcast(qp.as_ptr(), &mut raw, lid) })
    }

    /// The queue pair's current state, queried from the device (process context).
    pub fn state(&self) -> Result<State> {
        // SAFETY: All-zero is a valid `ib_qp_attr` and `ib_qp_init_attr`.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        // SAFETY: As above.
        let mut init: bindings::ib_qp_init_attr = unsafe { core::mem::zeroed() };
        // SAFETY: `qp` is valid; both attribute structures are valid for the call.
        to_result(unsafe {
            bindings::ib_query_qp(
                self.qp.as_ptr(),
                &mut attr,
                bindings::ib_qp_attr_mask_IB_QP_STATE as i32,
                &mut init,
            )
        })?;
        Ok(match attr.qp_state {
            bindings::ib_qp_state_IB_QPS_RESET => State::Reset,
            bindings::ib_qp_state_IB_QPS_INIT => State::Init,
            bindings::ib_qp_state_IB_QPS_RTR => State::ReadyToReceive,
            bindings::ib_qp_state_IB_QPS_RTS => State::ReadyToSend,
            bindings::ib_qp_state_IB_QPS_SQD => State::SendQueueDrained,
            bindings::ib_qp_state_IB_QPS_SQE => State::SendQueueError,
            _ => State::Error,
        })
    }

    /// Restarts a send queue stopped by an error (state SQE, unreliable transports): back
    /// to ready-to-send.
    #[inline]
    pub fn restart_send_queue(&self) -> Result {
        let mut attr = qp_attr(bindings::ib_qp_state_IB_QPS_RTS);
        self.modify_raw(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE)
    }

    /// Moves the queue pair to RESET, where the device drops every posted request without
    /// completing it: the buffers come back, sends to `send_back` and receives to
    /// `recv_back`. Completions of requests posted before, still queued in a CQ, match none
    /// posted afterwards. Sends and receives posted meanwhile are refused (`EINVAL`). The
    /// queue pair is then brought up again like a new one.
    pub fn reset(&self, send_back: impl FnMut(Sent), recv_back: impl FnMut(B)) -> Result {
        // No post runs from here on until the buffers are back: one could otherwise queue a
        // request to the device beside the reset, with memory handed back below.
        let count = |begins: bool| {
            let mut poster = self.posting.lock();
            poster.resets = if begins {
                poster.resets.saturating_add(1)
            } else {
                poster.resets.saturating_sub(1)
            };
            drop(poster);
            self.recv.lock().count_reset(begins);
        };
        count(true);
        let done = self.reset_posts_held(send_back, recv_back);
        count(false);
        done
    }

    fn reset_posts_held(
        &self,
        mut send_back: impl FnMut(Sent),
        mut recv_back: impl FnMut(B),
    ) -> Result {
        let mut attr = qp_attr(bindings::ib_qp_state_IB_QPS_RESET);
        self.modify_raw(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE)?;
        self.send.renew();
        let mut discarded = 0;
        self.send.drain(|mut slot| {
            discarded += 1;
            if let Some(sent) = slot.payload.take_sent() {
                send_back(sent);
            }
        });
        // Every send in flight is over: their address handles may go.
        if let Some(clock) = &self.clock {
            clock.taken_back(discarded);
        }
        // In RESET the device holds no request and writes no posted buffer; the caller
        // counted the reset in `recv`, so none is being posted. One at a time, so that
        // `recv_back` runs unlocked.
        self.recv.lock().renew();
        loop {
            let posted = self.recv.lock().take_any();
            let Some(posted) = posted else {
                break;
            };
            recv_back(B::take_back(posted, None));
        }
        Ok(())
    }

    /// Receives posted and not yet completed through this object.
    #[inline]
    pub fn recvs_posted(&self) -> usize {
        self.recv.lock().posted()
    }

    /// Locks the receive queue, through which receives are posted and completed: once for
    /// a batch, rather than once for each. `EINVAL` for a queue pair on a shared receive
    /// queue, whose receives go through that queue.
    #[inline]
    pub fn lock_recvs(&self) -> Result<RecvQueueGuard<'_, B>> {
        if self.srq.is_some() {
            return Err(EINVAL);
        }
        Ok(RecvQueueGuard::new(self, self.recv.lock()))
    }

    /// Posts `buf` to receive one message (on UD: 40 bytes of GRH space, then the
    /// datagram). On failure, for a queue pair on an SRQ or during a reset (`EINVAL`), the
    /// buffer is freed.
    #[inline]
    pub fn post_recv(&self, buf: B) -> Result {
        self.lock_recvs()?.post(buf)
    }

    /// Posts the first `len` bytes of `buf` as one datagram to QP `remote_qpn` with Q_Key
    /// `remote_qkey` through `ah` (UD only). The buffer is the queue pair's until the send
    /// completes; on failure it is freed.
    pub fn post_send_ud(
        &self,
        buf: DmaBuffer,
        len: usize,
        ah: &AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Result {
        if self.qp_type != QpType::Ud {
            return Err(EINVAL);
        }
        self.post_buffer(buf, len, Some((ah, remote_qpn, remote_qkey)))
    }

    /// Posts the first `len` bytes of `buf` as one message to the connected peer (RC only).
    /// The buffer is the queue pair's until the send completes; on failure it is freed.
    pub fn post_send(&self, buf: DmaBuffer, len: usize) -> Result {
        if self.qp_type != QpType::Rc {
            return Err(EINVAL);
        }
        self.post_buffer(buf, len, None)
    }

    /// Posts the bytes of `skb` from `offset` (in its linear part) on as one datagram to QP
    /// `remote_qpn` with Q_Key `remote_qkey` through `ah` (UD only), without copying them.
    /// The skb is the queue pair's until the send completes; on failure it is freed as a
    /// drop (as `dev_queue_xmit` consumes an skb whatever it returns).
    #[inline]
    pub fn post_skb_ud(
        &self,
        skb: SkBuff,
        offset: u32,
        ah: &AddressHandle,
        remote_qpn: u32,
        remote_qkey: u32,
    ) -> Result {
        if self.qp_type != QpType::Ud {
            return Err(EINVAL);
        }
        self.post_skb_inner(skb, offset, Some((ah, remote_qpn, remote_qkey)))
    }

    /// Posts the bytes of `skb` from `offset` (in its linear part) on as one message to the
    /// connected peer (RC only), without copying them. The skb is the queue pair's until the
    /// send completes; on failure it is freed as a drop.
    #[inline]
    pub fn post_skb(&self, skb: SkBuff, offset: u32) -> Result {
        if self.qp_type != QpType::Rc {
            return Err(EINVAL);
        }
        self.post_skb_inner(skb, offset, None)
    }

    fn post_buffer(
        &self,
        buf: DmaBuffer,
        len: usize,
        ud: Option<(&AddressHandle, u32, u32)>,
    ) -> Result {
        let len = match u32::try_from(len) {
            Ok(l) if len <= buf.len() && buf.usable_by(self.pd.device(), false) => l,
            _ => return Err(EINVAL),
        };
        self.post_wr(
            || Payload::Buffer {
                buf: Some(buf),
                len,
            },
            ud,
        )
    }

    fn post_skb_inner(
        &self,
        mut skb: SkBuff,
        offset: u32,
        ud: Option<(&AddressHandle, u32, u32)>,
    ) -> Result {
        // More fragments than the device gathers: copy them into the linear part first.
        if SkbMapping::segments(&skb, offset) > self.max_send_sge {
            skb.linearize()?;
        }
        // `SkbMapping::map` refuses an offset past the linear part (the skb is freed then).
        let device = self.pd.device().as_raw();
        let payload = || {
            // SAFETY: The protection domain holds a reference to the device, and this object
            // holds the domain until after its send slots, where the mapping lives and from
            // which it never leaves (a completion or a reset takes its skb out), are dropped
            // (fields drop in declaration order).
            Payload::Skb(unsafe { SkbMapping::new(device, skb, offset) })
        };
        self.post_wr(payload, ud)
    }

    /// Posts a signalled send of what `payload` makes. The payload is made in the request's
    /// slot, before the device sees the request, so that its completion finds it whenever it
    /// comes; it is mapped there, never moved. A request that cannot be posted has its
    /// payload freed (`EINVAL` for an address handle made for another queue pair, or while
    /// the queue pair is being reset; `ENOSPC` when every slot is in use).
    #[inline]
    fn post_wr(
        &self,
        payload: impl FnOnce() -> Payload,
        ud: Option<(&AddressHandle, u32, u32)>,
    ) -> Result {
        // A handle made for another queue pair is not numbered by this one's clock.
        if let Some((ah, _, _)) = ud {
            if !self.clock.as_ref().is_some_and(|c| ah.is_of(c)) {
                return Err(EINVAL);
            }
        }
        let qp = self.qp.as_ptr();
        // SAFETY: `qp` is valid, and so its device, whose operations are set while it is
        // registered.
        let Some(post_send) = (unsafe { (*(*qp).device).ops.post_send }) else {
            return Err(EOPNOTSUPP);
        };
        let lkey = self.pd.local_dma_lkey();
        let mut poster = self.posting.lock();
        let claim = if poster.resets == 0 {
            self.send.claim()
        } else {
            None
        };
        let Some(claim) = claim else {
            let e = if poster.resets == 0 { ENOSPC } else { EINVAL };
            // The payload, never made, is freed with no lock held.
            drop(poster);
            drop(payload);
            return Err(e);
        };
        let Poster {
            wr, sges, posted, ..
        } = &mut *poster;
        // Only the entries the payload has are written (`Payload::map`).
        let limit = self.max_send_sge.min(sges.len());
        let sges = &mut sges[..limit];
        let filled = claim.fill_with(|place| {
            let slot = place.insert(SendSlot { payload: payload() });
            slot.payload.map(lkey, sges)
        });
        let (wr_id, num_sge) = match filled {
            Ok((wr_id, n)) => (wr_id, n),
            Err((e, refused)) => {
                // A refused payload is freed with no lock held.
                drop(poster);
                drop(refused);
                return Err(e);
            }
        };
        wr.wr.__bindgen_anon_1.wr_id = wr_id;
        // The first `num_sge` entries, written by the payload's mapping.
        wr.wr.sg_list = sges.as_mut_ptr().cast();
        // At most `MAX_SKB_SEGMENTS` entries, a small constant.
        wr.wr.num_sge = num_sge as c_int;
        let serial = *posted + 1;
        if let Some((ah, remote_qpn, remote_qkey)) = ud {
            // Before the device sees the send: the handle is not destroyed until it is over.
            ah.mark_sent(serial);
            wr.ah = ah.as_raw();
            wr.remote_qpn = remote_qpn;
            wr.remote_qkey = remote_qkey;
        }
        let mut bad = core::ptr::null();
        // What the request points to outlives the send: the payload stays in the request's
        // slot, which only this request's completion takes out (no reset runs while
        // `posting` is held) or the failure below; the address handle, made for this queue
        // pair (checked above), holds this send's number (stored above) and is not destroyed
        // before this queue pair's clock counts that many sends taken back (`SendClock`).
        // SAFETY: `qp` is valid; `wr` (whose first member is the generic request, the only
        // part an RC queue pair reads) and the first `num_sge` entries of `sges` (written by
        // `Payload::map`) are valid for the call, and so is what they describe (see above).
        // Called as `ib_post_send` (inline in C) calls it.
        let ret = unsafe { post_send(qp, &wr.wr, &mut bad) };
        if ret != 0 {
            // Not posted: no completion names the slot, and no reset runs, so it still
            // holds the payload. Its number goes to the next send, which the handle's
            // destruction then waits for.
            let refused = self.send.take(wr_id);
            drop(poster);
            drop(refused);
            return to_result(ret);
        }
        // INVARIANT: the device took the send numbered `serial`.
        *posted = serial;
        Ok(())
    }

    /// Sends posted and not yet completed through this object. Their buffers are freed with
    /// the queue pair if it is dropped first.
    #[inline]
    pub fn sends_in_flight(&self) -> usize {
        self.send.used()
    }

    /// Takes back the buffer of the receive that `wc` completes, synchronised for the CPU,
    /// and uses `wc` up; `None` if `wc` is not a receive completion of this queue pair's own
    /// receive queue, or was used up already.
    #[inline]
    pub fn complete_recv(&self, wc: &mut WorkCompletion) -> Option<B> {
        if wc.qp() != self.qp.as_ptr() {
            return None;
        }
        self.lock_recvs().ok()?.complete(wc)
    }

    /// Takes back what the send that `wc` completes carried, and uses `wc` up; `None` if
    /// `wc` is not a send completion of this queue pair, or was used up already.
    #[inline]
    pub fn complete_send(&self, wc: &mut WorkCompletion) -> Option<Sent> {
        if wc.qp() != self.qp.as_ptr() {
            return None;
        }
        // The slot still holds the request's payload only if no completion or reset took it.
        let sent = self
            .send
            .take_with(wc.wr_id(), |slot| slot.payload.take_sent())?;
        wc.consume();
        // INVARIANT: the send was taken back, once.
        if let Some(clock) = &self.clock {
            clock.taken_back(1);
        }
        sent
    }
}

#[pinned_drop]
impl<B: RecvBuffer> PinnedDrop for QueuePair<B> {
    fn drop(self: Pin<&mut Self>) {
        // The core refuses to destroy a queue pair still attached to a group.
        for (gid, lid) in self.mcast.lock().iter_mut().filter_map(Option::take) {
            let _ = Self::detach_raw(self.qp, &gid, lid);
        }
        // In RESET the device drops arriving packets before they reach the queue pair. A
        // packet a peer still sends could otherwise meet the destroy half way (rxe warns
        // then, in `rxe_sched_task`). Destroyed anyway if the device refuses.
        let mut attr = qp_attr(bindings::ib_qp_state_IB_QPS_RESET);
        let _ = self.modify_raw(&mut attr, bindings::ib_qp_attr_mask_IB_QP_STATE);
        // SAFETY: By the type invariant `qp` is valid and destroyed only here. Once destroyed,
        // the device no longer accesses posted buffers, which are freed afterwards with the
        // fields, and reports no events.
        let ret = unsafe { bindings::ib_destroy_qp_user(self.qp.as_ptr(), core::ptr::null_mut()) };
        if ret != 0 {
            // The device may still use all the queue pair refers to: posted buffers, the
            // event handler, the queues and the domain are leaked, never freed.
            crate::pr_err!(
                "queue pair {} not destroyed ({}): what it uses leaked\n",
                self.qp_num(),
                ret
            );
            while let Some(posted) = self.recv.lock().take_any() {
                core::mem::forget(posted);
            }
            self.send.drain(core::mem::forget);
            if let Some(clock) = &self.clock {
                clock.close(false);
            }
            core::mem::forget(self.pd.clone());
            core::mem::forget(self.srq.clone());
            core::mem::forget(self.send_cq.clone());
            core::mem::forget(self.recv_cq.clone());
            return;
        }
        // No send is in flight any more: the address handles waiting go.
        if let Some(clock) = &self.clock {
            clock.close(true);
        }
        if let Some(p) = self.events {
            // SAFETY: By the type invariant `p` came from `KBox::into_raw`; the queue pair that
            // used it is gone and `drop` runs once.
            drop(unsafe { KBox::from_raw(p.as_ptr()) });
        }
    }
}
