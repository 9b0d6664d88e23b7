// SPDX-License-Identifier: GPL-2.0

//! The InfiniBand connection manager: setting up reliable connections (REQ, REP, RTU),
//! tearing them down (DREQ, DREP) and refusing them (REJ).
//!
//! C header: [`include/rdma/ib_cm.h`](srctree/include/rdma/ib_cm.h).
//!
//! Every communication identifier is owned by a Rust object that destroys it on drop
//! ([`CmId`], [`Listener`]); `ib_destroy_cm_id` waits for running handlers and no event is
//! delivered afterwards, so a handler never runs after its owner is gone. Dropping an
//! identifier from inside its own handler would wait for itself: defer that to a work item.

use super::{
    device::{Device, DeviceRef, Gid},
    qp::{QpType, QueuePair, RecvBuffer, RnrTimer},
};
use crate::{
    bindings,
    error::{code::EINVAL, from_err_ptr, to_result, Result},
    ffi::{c_int, c_void},
    sync::Arc,
    sync::ArcBorrow,
    types::{ForeignOwnable, Opaque},
};
use core::{marker::PhantomData, ptr::NonNull};

/// A reference to the attributes of one GID table entry (`struct ib_gid_attr`), needed to
/// send connection requests on RoCE.
///
/// # Invariants
///
/// Holds one reference taken by `rdma_get_gid_attr`.
pub struct GidAttr(NonNull<bindings::ib_gid_attr>);

// SAFETY: The reference count is atomic; the attributes are immutable.
unsafe impl Send for GidAttr {}
// SAFETY: Shared access only reads the attributes, which never change while referenced.
unsafe impl Sync for GidAttr {}

impl GidAttr {
    /// Takes a reference on entry `index` of the GID table of `port` of `device`.
    pub fn get(device: &Device, port: u32, index: u32) -> Result<Self> {
        let index = i32::try_from(index).map_err(|_| EINVAL)?;
        if !device.ports().contains(&port) {
            return Err(EINVAL);
        }
        // SAFETY: The device is valid and `port` is one of its ports.
        let attr = from_err_ptr(unsafe {
            bindings::rdma_get_gid_attr(device.as_raw(), port, index as _).cast_mut()
        })?;
        // INVARIANT: `rdma_get_gid_attr` returned with a reference held.
        Ok(Self(NonNull::new(attr).ok_or(EINVAL)?))
    }

    /// The GID.
    #[inline]
    pub fn gid(&self) -> Gid {
        // SAFETY: By the type invariant the attributes are valid, and not changed while
        // referenced.
        let gid = unsafe { &(*self.0.as_ptr()).gid };
        // SAFETY: Every bit pattern of the union is a valid byte array.
        Gid(unsafe { gid.raw })
    }

    /// The entry's GID type.
    pub fn gid_type(&self) -> GidType {
        match self.raw_gid_type() {
            bindings::ib_gid_type_IB_GID_TYPE_IB => GidType::Ib,
            bindings::ib_gid_type_IB_GID_TYPE_ROCE => GidType::RoceV1,
            _ => GidType::RoceV2,
        }
    }

    /// The entry's GID type as the core names it (`enum ib_gid_type`).
    #[inline]
    pub(crate) fn raw_gid_type(&self) -> bindings::ib_gid_type {
        // SAFETY: By the type invariant the attributes are valid and immutable.
        unsafe { (*self.0.as_ptr()).gid_type }
    }

    #[inline]
    pub(crate) fn as_raw(&self) -> *const bindings::ib_gid_attr {
        self.0.as_ptr()
    }
}

impl Drop for GidAttr {
    fn drop(&mut self) {
        // SAFETY: By the type invariant we hold one reference, released once here.
        unsafe { bindings::rdma_put_gid_attr(self.0.as_ptr()) };
    }
}

/// What a GID table entry addresses: how packets from it are carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand (also the type of iWARP and OPA entries).
    Ib,
    /// RoCE v1: InfiniBand transport in Ethernet frames.
    RoceV1,
    /// RoCE v2: InfiniBand transport in UDP/IP.
    RoceV2,
}

/// A path between two ports (`struct sa_path_rec`), as a connection request carries it.
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct PathRecord(pub(crate) bindings::sa_path_rec);

impl PathRecord {
    /// A RoCE v2 path from `sgid` to `dgid` with MTU `mtu` (IB encoding, see
    /// [`super::device::Mtu`]), built locally as the RDMA CM does, since RoCE has no subnet
    /// administrator to ask.
    pub fn roce_v2(sgid: &Gid, dgid: &Gid, mtu: super::device::Mtu, dmac: [u8; 6]) -> Self {
        // SAFETY: `sa_path_rec` is integers, C enums and byte arrays.
        let mut p: bindings::sa_path_rec = unsafe { core::mem::zeroed() };
        p.rec_type = bindings::sa_path_rec_type_SA_PATH_REC_TYPE_ROCE_V2;
        p.sgid = bindings::ib_gid { raw: sgid.0 };
        p.dgid = bindings::ib_gid { raw: dgid.0 };
        p.hop_limit = 64;
        p.reversible = 1;
        p.pkey = 0xffffu16.to_be();
        p.mtu_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        p.mtu = mtu as u8;
        p.rate_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        p.rate = bindings::ib_rate_IB_RATE_PORT_CURRENT as u8;
        p.packet_life_time_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        // As the RDMA CM does for RoCE: an ACK timeout of about half a second.
        p.packet_life_time = 16;
        p.__bindgen_anon_1.roce.route_resolved = true;
        p.__bindgen_anon_1.roce.dmac = dmac;
        Self(p)
    }
}

impl PathRecord {
    /// A RoCE v2 path to a peer whose GID is an IPv6 link-local address derived from its MAC
    /// (the default GID of every RoCE port), which gives the destination MAC without a
    /// neighbour lookup. Other GIDs give `EINVAL`.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{cm::PathRecord, device::{Gid, Mtu}};
    ///
    /// let ours = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x56]);
    /// let peer = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0x12, 0x34, 0x57]);
    /// let path = PathRecord::roce_v2_link_local(&ours, &peer, Mtu::Mtu1024)?;
    /// assert_eq!(path.dgid(), peer);
    /// assert_eq!(path.mtu(), Some(Mtu::Mtu1024));
    ///
    /// // An IPv4-mapped GID says nothing of the peer's MAC.
    /// let mapped = Gid([0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]);
    /// assert!(PathRecord::roce_v2_link_local(&ours, &mapped, Mtu::Mtu1024).is_err());
    /// # Ok::<(), Error>(())
    /// ```
    pub fn roce_v2_link_local(sgid: &Gid, dgid: &Gid, mtu: super::device::Mtu) -> Result<Self> {
        let g = &dgid.0;
        // fe80::/64 with a modified EUI-64 interface id (ff:fe in the middle).
        let link_local = g[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0] && g[11] == 0xff && g[12] == 0xfe;
        if !link_local {
            return Err(EINVAL);
        }
        let dmac = [g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]];
        Ok(Self::roce_v2(sgid, dgid, mtu, dmac))
    }
}

/// A random 24-bit packet sequence number to start a connection with, so that packets of an
/// earlier connection between the same queue pair numbers are not taken for new ones.
///
/// # Examples
///
/// ```
/// use kernel::rdma::cm::random_psn;
///
/// assert!((0..64).all(|_| random_psn() <= 0xff_ffff));
/// ```
#[inline]
pub fn random_psn() -> u32 {
    // SAFETY: `get_random_u32` has no preconditions and may be called in any context.
    unsafe { bindings::get_random_u32() & 0xff_ffff }
}

/// The parameters of a connection request that vary between users.
pub struct ReqParams<'a> {
    /// The path to the peer.
    pub path: &'a PathRecord,
    /// The source GID of the path (RoCE needs it).
    pub sgid_attr: &'a GidAttr,
    /// The service to connect to.
    pub service_id: u64,
    /// Up to 92 bytes for the peer.
    pub private_data: &'a [u8],
    /// Whether our queue pair receives from a shared receive queue.
    pub srq: bool,
    /// RDMA reads the peer may have outstanding toward us.
    pub responder_resources: u8,
    /// Transport retries (0 to 7).
    pub retry_count: u8,
    /// Receiver-not-ready retries (0 to 7, 7 = forever).
    pub rnr_retry_count: u8,
    /// CM message retries (at most 15).
    pub max_cm_retries: u8,
    /// How long either side may take to answer a CM message: 4.096 us x 2^this (at most
    /// 31).
    pub cm_response_timeout: u8,
    /// The packet sequence number our first send starts at (24 bits).
    pub starting_psn: u32,
}

/// Why a peer refused a connection (`enum ib_cm_rej_reason`), as a raw code.
pub type RejReason = u32;
/// The REJ reason for a request to a service nobody listens on.
pub const REJ_INVALID_SERVICE_ID: RejReason =
    bindings::ib_cm_rej_reason_IB_CM_REJ_INVALID_SERVICE_ID;
/// The REJ reason for a request refused for want of a queue pair (or its resources).
pub const REJ_NO_QP: RejReason = bindings::ib_cm_rej_reason_IB_CM_REJ_NO_QP;
/// The REJ reason a consumer gives when it declines a request.
pub const REJ_CONSUMER_DEFINED: RejReason = bindings::ib_cm_rej_reason_IB_CM_REJ_CONSUMER_DEFINED;

/// A connection manager event for an identifier.
pub enum Event<'a> {
    /// The peer accepted our request.
    RepReceived {
        /// The peer's private data (196 bytes as received).
        private_data: &'a [u8],
        /// The peer's queue pair.
        remote_qpn: u32,
        /// How often our queue pair is to retry when the peer's has no receive buffer (7:
        /// forever), as the peer's reply sets it.
        rnr_retry_count: u8,
    },
    /// The peer confirmed our reply: the connection is established.
    RtuReceived,
    /// The peer asks to disconnect; answer with [`CmIdRef::send_drep`].
    DreqReceived,
    /// The peer answered our disconnect request.
    DrepReceived,
    /// The peer refused.
    RejReceived {
        /// The reason code.
        reason: RejReason,
    },
    /// The peer received our request (or reply) and asks us to wait longer for its answer:
    /// the CM has extended its timeout; nothing to do but keep waiting.
    MraReceived {
        /// How long the peer may take: 4.096 us x 2^`service_timeout`.
        service_timeout: u8,
    },
    /// A request or reply got no answer.
    Timeout,
    /// The identifier left the time-wait state; it may be reused or destroyed.
    TimewaitExit,
    /// Any other event, with its raw code.
    Other(u32),
}

/// What an identifier's owner does with its events. Runs in process context (the CM's work
/// queue): it may sleep, but must not drop the identifier it handles.
pub trait Handler: Send + Sync + 'static {
    /// An event for `id`.
    fn event(&self, id: &CmIdRef, event: Event<'_>);
}

/// An identifier seen from inside a callback.
///
/// # Invariants
///
/// A `&CmIdRef` refers to a live identifier for the lifetime of the reference: the one a
/// callback is running for, or one a [`CmId`] owns.
#[repr(transparent)]
pub struct CmIdRef(Opaque<bindings::ib_cm_id>);

impl CmIdRef {
    fn raw(&self) -> *mut bindings::ib_cm_id {
        self.0.get()
    }

    /// # Safety
    ///
    /// `ptr` must be a valid identifier for `'a`.
    unsafe fn from_raw<'a>(ptr: *mut bindings::ib_cm_id) -> &'a Self {
        // SAFETY: `CmIdRef` is `repr(transparent)`; validity is the caller's guarantee.
        // INVARIANT: Live for `'a`, as the caller guarantees.
        unsafe { &*ptr.cast() }
    }

    /// The identifier's context.
    ///
    /// # Safety
    ///
    /// The context must be `Arc<C>::into_foreign` of a reference released no earlier than
    /// `'a` ends.
    unsafe fn context<'a, C: Send + Sync + 'static>(&'a self) -> ArcBorrow<'a, C> {
        // SAFETY: The identifier is valid (type invariant); its context is set before its
        // callbacks run and only changed by the REQ callback that owns it then.
        let ctx = unsafe { (*self.raw()).context };
        // SAFETY: `ctx` is an `Arc<C>` alive for `'a` (the caller's guarantee).
        unsafe { <Arc<C> as ForeignOwnable>::borrow(ctx) }
    }

    fn private(data: &[u8]) -> Result<(*const c_void, u8)> {
        let len = u8::try_from(data.len()).map_err(|_| EINVAL)?;
        Ok((data.as_ptr().cast(), len))
    }

    /// Sends a connection request for `qp` (an RC queue pair in INIT).
    pub fn send_req<B: RecvBuffer>(&self, qp: &QueuePair<B>, p: &ReqParams<'_>) -> Result {
        let (data, len) = Self::private(p.private_data)?;
        let mut path = p.path.0;
        // SAFETY: All-zero is a valid `ib_cm_req_param`.
        let mut param: bindings::ib_cm_req_param = unsafe { core::mem::zeroed() };
        param.primary_path = &mut path;
        param.ppath_sgid_attr = p.sgid_attr.as_raw();
        param.service_id = p.service_id.to_be();
        param.qp_num = qp.qp_num();
        param.qp_type = match qp.qp_type() {
            QpType::Rc => bindings::ib_qp_type_IB_QPT_RC,
            QpType::Uc => bindings::ib_qp_type_IB_QPT_UC,
            QpType::Ud => return Err(EINVAL),
        };
        if p.cm_response_timeout > 31 {
            return Err(EINVAL);
        }
        param.starting_psn = p.starting_psn & 0xff_ffff;
        param.private_data = data;
        param.private_data_len = len;
        param.responder_resources = p.responder_resources;
        param.initiator_depth = 0;
        param.remote_cm_response_timeout = p.cm_response_timeout;
        param.local_cm_response_timeout = p.cm_response_timeout;
        param.retry_count = p.retry_count;
        param.rnr_retry_count = p.rnr_retry_count;
        param.max_cm_retries = p.max_cm_retries;
        param.srq = u8::from(p.srq);
        // SAFETY: The identifier is valid; `param`, `path` and the private data are valid for
        // the call (the CM copies what it keeps); the GID attribute is referenced by `p`.
        to_result(unsafe { bindings::ib_send_cm_req(self.raw(), &mut param) })
    }

    /// Accepts a connection request with `qp` (moved to RTR beforehand), starting at `psn`.
    pub fn send_rep<B: RecvBuffer>(
        &self,
        qp: &QueuePair<B>,
        psn: u32,
        private_data: &[u8],
        srq: bool,
        rnr_retry_count: u8,
    ) -> Result {
        let (data, len) = Self::private(private_data)?;
        // SAFETY: All-zero is a valid `ib_cm_rep_param`.
        let mut param: bindings::ib_cm_rep_param = unsafe { core::mem::zeroed() };
        param.qp_num = qp.qp_num();
        param.starting_psn = psn & 0xff_ffff;
        param.private_data = data;
        param.private_data_len = len;
        param.rnr_retry_count = rnr_retry_count;
        param.srq = u8::from(srq);
        // SAFETY: The identifier is valid; `param` and the private data are valid for the call.
        to_result(unsafe { bindings::ib_send_cm_rep(self.raw(), &mut param) })
    }

    /// Confirms the peer's reply: the connection is established.
    #[inline]
    pub fn send_rtu(&self) -> Result {
        // SAFETY: The identifier is valid; no private data.
        to_result(unsafe { bindings::ib_send_cm_rtu(self.raw(), core::ptr::null(), 0) })
    }

    /// Asks the peer to disconnect.
    #[inline]
    pub fn send_dreq(&self) -> Result {
        // SAFETY: The identifier is valid; no private data.
        to_result(unsafe { bindings::ib_send_cm_dreq(self.raw(), core::ptr::null(), 0) })
    }

    /// Answers the peer's disconnect request.
    #[inline]
    pub fn send_drep(&self) -> Result {
        // SAFETY: The identifier is valid; no private data.
        to_result(unsafe { bindings::ib_send_cm_drep(self.raw(), core::ptr::null(), 0) })
    }

    /// Tells the peer its request (or reply) arrived and the answer will take up to
    /// 4.096 us x 2^`service_timeout` (at most 31), so that it waits instead of retrying.
    pub fn send_mra(&self, service_timeout: u8, private_data: &[u8]) -> Result {
        if service_timeout > 31 {
            return Err(EINVAL);
        }
        let (data, len) = Self::private(private_data)?;
        // SAFETY: The identifier is valid; the private data is valid for the call (the CM
        // copies it into the message).
        to_result(unsafe { bindings::ib_send_cm_mra(self.raw(), service_timeout, data, len) })
    }

    /// Refuses a connection request.
    pub fn send_rej(&self, reason: RejReason) -> Result {
        // SAFETY: The identifier is valid; no additional data.
        to_result(unsafe {
            bindings::ib_send_cm_rej(
                self.raw(),
                reason,
                core::ptr::null_mut(),
                0,
                core::ptr::null(),
                0,
            )
        })
    }

    /// Moves `qp` to `state` (RTR or RTS) with the attributes the CM negotiated.
    #[inline]
    pub fn modify_qp<B: RecvBuffer>(&self, qp: &QueuePair<B>, state: QpState) -> Result {
        self.modify_qp_psn(qp, state, None)
    }

    /// Moves `qp` to RTR on the passive side before replying: the CM does not know the
    /// starting PSN of our reply yet, so the receive PSN is given here and must be the one
    /// passed to [`CmIdRef::send_rep`]. A sender that finds no receive buffer is told to
    /// wait `rnr_timer` (the CM would have it wait the longest, 655 ms).
    #[inline]
    pub fn modify_qp_for_rep<B: RecvBuffer>(
        &self,
        qp: &QueuePair<B>,
        psn: u32,
        rnr_timer: RnrTimer,
    ) -> Result {
        self.modify_qp_psn(qp, QpState::Rtr, Some((psn & 0xff_ffff, rnr_timer)))
    }

    fn modify_qp_psn<B: RecvBuffer>(
        &self,
        qp: &QueuePair<B>,
        state: QpState,
        receiver: Option<(u32, RnrTimer)>,
    ) -> Result {
        // SAFETY: All-zero is a valid `ib_qp_attr`.
        let mut attr: bindings::ib_qp_attr = unsafe { core::mem::zeroed() };
        attr.qp_state = match state {
            QpState::Rtr => bindings::ib_qp_state_IB_QPS_RTR,
            QpState::Rts => bindings::ib_qp_state_IB_QPS_RTS,
        };
        let mut mask: c_int = 0;
        // SAFETY: The identifier is valid; `attr` and `mask` are valid for writes.
        to_result(unsafe { bindings::ib_cm_init_qp_attr(self.raw(), &mut attr, &mut mask) })?;
        if let Some((psn, rnr_timer)) = receiver {
            // The CM's mask for RTR has both (the timer only for RC, which alone has one).
            attr.rq_psn = psn;
            attr.min_rnr_timer = rnr_timer.code();
        }
        qp.modify_raw(&mut attr, mask as u32)
    }
}

/// Connection states a queue pair reaches through the CM.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Ready to receive.
    Rtr,
    /// Ready to send.
    Rts,
}

fn event_of(ev: &bindings::ib_cm_event) -> Event<'_> {
    match ev.event {
        bindings::ib_cm_event_type_IB_CM_REP_RECEIVED => {
            let len = bindings::ib_cm_data_size_IB_CM_REP_PRIVATE_DATA_SIZE as usize;
            // SAFETY: For a REP the CM passes its private data, this many bytes.
            let private_data = unsafe { core::slice::from_raw_parts(ev.private_data.cast(), len) };
            // SAFETY: For a REP the CM fills the `rep_rcvd` member of the union.
            let rep = unsafe { &ev.param.rep_rcvd };
            // SAFETY: `rep` is a valid REP event parameter block (the helper reads one field).
            let rnr_retry_count = unsafe { bindings::ib_cm_rep_rnr_retry_count(rep) };
            Event::RepReceived {
                private_data,
                remote_qpn: rep.remote_qpn,
                rnr_retry_count,
            }
        }
        bindings::ib_cm_event_type_IB_CM_RTU_RECEIVED => Event::RtuReceived,
        bindings::ib_cm_event_type_IB_CM_DREQ_RECEIVED => Event::DreqReceived,
        bindings::ib_cm_event_type_IB_CM_DREP_RECEIVED => Event::DrepReceived,
        bindings::ib_cm_event_type_IB_CM_REJ_RECEIVED => {
            // SAFETY: For a REJ the CM fills the `rej_rcvd` member of the union.
            let reason = unsafe { ev.param.rej_rcvd.reason };
            Event::RejReceived { reason }
        }
        bindings::ib_cm_event_type_IB_CM_MRA_RECEIVED => {
            // SAFETY: For an MRA the CM fills the `mra_rcvd` member of the union.
            let service_timeout = unsafe { ev.param.mra_rcvd.service_timeout };
            Event::MraReceived { service_timeout }
        }
        bindings::ib_cm_event_type_IB_CM_REQ_ERROR | bindings::ib_cm_event_type_IB_CM_REP_ERROR => {
            Event::Timeout
        }
        bindings::ib_cm_event_type_IB_CM_TIMEWAIT_EXIT => Event::TimewaitExit,
        other => Event::Other(other),
    }
}

/// # Safety
///
/// Called by the CM only, for an identifier whose context is an `Arc<T>` owned by a [`CmId`].
unsafe extern "C" fn handler_callback<T: Handler>(
    id: *mut bindings::ib_cm_id,
    ev: *const bindings::ib_cm_event,
) -> c_int {
    // SAFETY: The CM passes a valid identifier for the duration of the call.
    let idref = unsafe { CmIdRef::from_raw(id) };
    // SAFETY: The CM passes a valid event for the duration of the call.
    let ev = unsafe { &*ev };
    // SAFETY: The context is the `Arc<T>` the owning `CmId` keeps until the identifier is
    // destroyed, after which no callback runs.
    let handler = unsafe { idref.context::<T>() };
    handler.event(idref, event_of(ev));
    0
}

/// The C signature of a CM event callback.
type RawHandler =
    unsafe extern "C" fn(*mut bindings::ib_cm_id, *const bindings::ib_cm_event) -> c_int;

/// Creates an identifier on `device` whose events go to `callback` with `context` (an
/// `Arc<C>` given up to the identifier). On failure the context is released again.
fn create_id<C: Send + Sync + 'static>(
    device: &DeviceRef,
    callback: RawHandler,
    context: Arc<C>,
) -> Result<NonNull<bindings::ib_cm_id>> {
    let ctx = context.into_foreign();
    // SAFETY: The device is registered; `ctx` stays valid until released by `destroy_id`
    // (or just below on failure).
    let id = unsafe { bindings::ib_create_cm_id(device.as_raw(), Some(callback), ctx.cast_mut()) };
    match from_err_ptr(id).map(NonNull::new) {
        Ok(Some(id)) => Ok(id),
        failed => {
            // SAFETY: `ctx` came from `into_foreign` above and was not handed to the CM.
            drop(unsafe { <Arc<C> as ForeignOwnable>::from_foreign(ctx) });
            Err(failed.err().unwrap_or(EINVAL))
        }
    }
}

/// Destroys `id` and releases its `Arc<C>` context.
///
/// # Safety
///
/// `id` must be live, owned by the caller, with an `Arc<C>` context from [`create_id`] or
/// [`Request::accept`].
unsafe fn destroy_id<C: Send + Sync + 'static>(id: NonNull<bindings::ib_cm_id>) {
    let id = id.as_ptr();
    // SAFETY: `id` is live and ours.
    let ctx = unsafe { (*id).context };
    // SAFETY: `id` is live and ours, destroyed once.
    unsafe { bindings::ib_destroy_cm_id(id) };
    // SAFETY: After `ib_destroy_cm_id` returned no callback runs any more; `ctx` came from
    // `Arc<C>::into_foreign` and is released once.
    drop(unsafe { <Arc<C> as ForeignOwnable>::from_foreign(ctx) });
}

/// A communication identifier owned by Rust with handler `T`: destroyed on drop.
///
/// # Invariants
///
/// `id` is a live identifier whose handler is `handler_callback::<T>` and whose context is
/// `Arc<T>::into_foreign` of a reference released only in `drop`, after destruction.
pub struct CmId<T: Handler> {
    id: NonNull<bindings::ib_cm_id>,
    _device: DeviceRef,
    _handler: PhantomData<Arc<T>>,
}

// SAFETY: The CM allows identifiers to be used and destroyed from any thread.
unsafe impl<T: Handler> Send for CmId<T> {}
// SAFETY: Shared use only calls CM functions, which lock internally.
unsafe impl<T: Handler> Sync for CmId<T> {}

impl<T: Handler> CmId<T> {
    /// Creates an identifier on `device` whose events go to `handler`.
    pub fn new(device: &Device, handler: Arc<T>) -> Result<Self> {
        let device = device.get_ref()?;
        let id = create_id(&device, handler_callback::<T>, handler)?;
        // INVARIANT: created with our callback and context.
        Ok(Self {
            id,
            _device: device,
            _handler: PhantomData,
        })
    }

    /// The handler of this identifier.
    #[inline]
    pub fn handler(&self) -> ArcBorrow<'_, T> {
        // SAFETY: By the type invariant the context is our `Arc<T>`, released only in `drop`.
        unsafe { self.id().context::<T>() }
    }

    /// The identifier, to send messages with.
    #[inline]
    pub fn id(&self) -> &CmIdRef {
        // SAFETY: By the type invariant the identifier is live while `self` exists.
        unsafe { CmIdRef::from_raw(self.id.as_ptr()) }
    }
}

impl<T: Handler> Drop for CmId<T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `id` is live, ours, with an `Arc<T>` context.
        unsafe { destroy_id::<T>(self.id) };
    }
}

/// A connection request that arrived at a [`Listener`].
///
/// # Invariants
///
/// `ev` is the event of type `IB_CM_REQ_RECEIVED` the CM passed to the listener's callback
/// for `id`, the new identifier: its `req_rcvd` parameters and its private data (the REQ's
/// size) are valid for `'a`.
pub struct Request<'a> {
    id: &'a CmIdRef,
    ev: &'a bindings::ib_cm_event,
    accepted: &'a core::cell::Cell<bool>,
}

impl<'a> Request<'a> {
    /// The private data of the request (92 bytes as received).
    #[inline]
    pub fn private_data(&self) -> &'a [u8] {
        let len = bindings::ib_cm_data_size_IB_CM_REQ_PRIVATE_DATA_SIZE as usize;
        // SAFETY: For a REQ the CM passes this many bytes of private data.
        unsafe { core::slice::from_raw_parts(self.ev.private_data.cast(), len) }
    }

    /// The transport the requester asks for; `None` for one no [`QpType`] names.
    pub fn qp_type(&self) -> Option<QpType> {
        // SAFETY: For a REQ the CM fills the `req_rcvd` member of the union.
        match unsafe { self.ev.param.req_rcvd.qp_type } {
            bindings::ib_qp_type_IB_QPT_RC => Some(QpType::Rc),
            bindings::ib_qp_type_IB_QPT_UC => Some(QpType::Uc),
            _ => None,
        }
    }

    /// The requester's queue pair.
    #[inline]
    pub fn remote_qpn(&self) -> u32 {
        // SAFETY: For a REQ the CM fills the `req_rcvd` member of the union.
        unsafe { self.ev.param.req_rcvd.remote_qpn }
    }

    /// How often the requester's queue pair retries when ours has no receive buffer (7:
    /// forever); C IPoIB peers echo it in their reply.
    #[inline]
    pub fn rnr_retry_count(&self) -> u8 {
        // Not bindgen's bit-field accessor: it reads the wrong bits (see the C helper).
        // SAFETY: As for `remote_qpn`.
        let req = unsafe { &self.ev.param.req_rcvd };
        // SAFETY: `req` is a valid REQ event parameter block (the helper reads one field).
        unsafe { bindings::ib_cm_req_rnr_retry_count(req) }
    }

    /// The port the request arrived on.
    #[inline]
    pub fn port(&self) -> u32 {
        // SAFETY: As for `remote_qpn`.
        u32::from(unsafe { self.ev.param.req_rcvd.port })
    }

    /// The new identifier, to reply with.
    #[inline]
    pub fn id(&self) -> &CmIdRef {
        self.id
    }

    /// Takes the new identifier over with `handler` for its later events. Without this, the
    /// CM rejects the request and destroys the identifier when the callback returns.
    pub fn accept<T: Handler>(self, handler: Arc<T>) -> Result<CmId<T>> {
        let raw = self.id.raw();
        // SAFETY: The identifier is valid; `device` is set at creation and never changes.
        let device = unsafe { (*raw).device };
        // SAFETY: The identifier's device is registered while it exists.
        let device = unsafe { Device::from_raw(device) }.get_ref()?;
        // SAFETY: We are inside the REQ callback of this new identifier: the CM delivers no
        // other event for it until we return, so switching its handler is safe.
        unsafe { (*raw).cm_handler = Some(handler_callback::<T>) };
        // SAFETY: As above, for its context; the listener's, there before, is borrowed, not
        // owned by the new identifier.
        unsafe { (*raw).context = handler.into_foreign().cast_mut() };
        self.accepted.set(true);
        // INVARIANT: handler and context set just above; the CM keeps the identifier since
        // the callback reports acceptance.
        Ok(CmId {
            // SAFETY: `raw` comes from a reference, hence non-null.
            id: unsafe { NonNull::new_unchecked(raw) },
            _device: device,
            _handler: PhantomData,
        })
    }
}

/// Receives connection requests for a service.
pub trait ListenHandler: Send + Sync + 'static {
    /// A request arrived: call [`Request::accept`] (and reply) to take it on, or return
    /// without accepting (or with an error) to have the CM reject it.
    fn request(&self, req: Request<'_>) -> Result;
}

/// # Safety
///
/// Called by the CM only, for the listening identifier of a [`Listener<L>`] or for a new
/// identifier it spawned for a request (which inherits the listener's context).
unsafe extern "C" fn listen_callback<L: ListenHandler>(
    id: *mut bindings::ib_cm_id,
    ev: *const bindings::ib_cm_event,
) -> c_int {
    // SAFETY: The CM passes a valid identifier for the duration of the call.
    let idref = unsafe { CmIdRef::from_raw(id) };
    // SAFETY: The CM passes a valid event for the duration of the call.
    let ev = unsafe { &*ev };
    if ev.event != bindings::ib_cm_event_type_IB_CM_REQ_RECEIVED {
        // Only requests reach a listener; a spawned identifier not accepted gets none.
        return 0;
    }
    // SAFETY: The context is the listener's `Arc<L>`, alive while the listening identifier
    // exists, which the CM guarantees while requests for it are delivered.
    let listener = unsafe { idref.context::<L>() };
    let accepted = core::cell::Cell::new(false);
    // INVARIANT: A REQ event (checked above) for the new identifier `idref`.
    let ret = listener.request(Request {
        id: idref,
        ev,
        accepted: &accepted,
    });
    if accepted.get() {
        // Owned by a `CmId` now; errors after acceptance are the owner's to handle.
        0
    } else {
        // Non-zero makes the CM reject and destroy the new identifier.
        ret.err()
            .map_or(-(bindings::ECONNREFUSED as c_int), |e| e.to_errno())
    }
}

/// A listening identifier: requests for its service go to `L`.
///
/// # Invariants
///
/// `id` is a live identifier listening with `listen_callback::<L>` and context
/// `Arc<L>::into_foreign`, released only in `drop` after destruction.
pub struct Listener<L: ListenHandler> {
    id: NonNull<bindings::ib_cm_id>,
    _device: DeviceRef,
    _handler: PhantomData<Arc<L>>,
}

// SAFETY: As for `CmId`.
unsafe impl<L: ListenHandler> Send for Listener<L> {}
// SAFETY: As for `CmId`.
unsafe impl<L: ListenHandler> Sync for Listener<L> {}

impl<L: ListenHandler> Listener<L> {
    /// Listens for requests to `service_id` on `device`.
    pub fn new(device: &Device, service_id: u64, handler: Arc<L>) -> Result<Self> {
        let device = device.get_ref()?;
        let id = create_id(&device, listen_callback::<L>, handler)?;
        // INVARIANT: created with our callback and context; listening below.
        let this = Self {
            id,
            _device: device,
            _handler: PhantomData,
        };
        // SAFETY: The identifier is live.
        to_result(unsafe { bindings::ib_cm_listen(id.as_ptr(), service_id.to_be()) })?;
        Ok(this)
    }
}

impl<L: ListenHandler> Drop for Listener<L> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `id` is live, ours, with an `Arc<L>` context.
        // Identifiers spawned for accepted requests carry their own context.
        unsafe { destroy_id::<L>(self.id) };
    }
}
