// SPDX-License-Identifier: GPL-2.0

//! The subnet administrator (SA) of an InfiniBand fabric: path record queries and multicast
//! group membership, and the member records that RoCE builds locally instead.
//!
//! C header: [`include/rdma/ib_sa.h`](srctree/include/rdma/ib_sa.h).
//!
//! Queries and joins go to the SA over MADs and only exist on InfiniBand ports; on other
//! ports they fail with `EOPNOTSUPP` before anything is sent. Their handlers never run after
//! their owner ([`PathQuery`], [`McJoin`]) is dropped: dropping cancels and waits. A
//! [`SaClient`] outlives its queries (each holds it) and waits for them when dropped, as
//! `ib_sa_unregister_client` requires.

use super::{
    cm::{GidAttr, PathRecord},
    device::{Device, DeviceRef, Gid, Mtu, Protocol},
};
use crate::{
    alloc::flags::GFP_KERNEL,
    bindings,
    error::{
        code::{EINVAL, EIO, EOPNOTSUPP},
        from_err_ptr, Error, Result,
    },
    ffi::{c_int, c_uint, c_void},
    prelude::*,
    sync::{Arc, CondVar, LockClassKey, SpinLock},
    types::{ForeignOwnable, Opaque},
};
use core::{
    marker::PhantomData,
    ptr::NonNull,
    sync::atomic::{AtomicBool, Ordering},
};

/// Bit `n` of a component mask (`IB_SA_COMP_MASK(n)`), which is big-endian.
const fn comp(n: u32) -> u64 {
    (1u64 << n).to_be()
}

// Path record components (IBA 15.2.5.16).
const PATH_DGID: u64 = comp(2);
const PATH_SGID: u64 = comp(3);
const PATH_NUMB_PATH: u64 = comp(12);
const PATH_PKEY: u64 = comp(13);

// Member record components (IBA 15.2.5.17).
const MC_MGID: u64 = comp(0);
const MC_PORT_GID: u64 = comp(1);
const MC_QKEY: u64 = comp(2);
const MC_MTU_SELECTOR: u64 = comp(4);
const MC_MTU: u64 = comp(5);
const MC_TRAFFIC_CLASS: u64 = comp(6);
const MC_PKEY: u64 = comp(7);
const MC_RATE_SELECTOR: u64 = comp(8);
const MC_RATE: u64 = comp(9);
const MC_SL: u64 = comp(12);
const MC_FLOW_LABEL: u64 = comp(13);
const MC_HOP_LIMIT: u64 = comp(14);
const MC_JOIN_STATE: u64 = comp(16);

/// Fails with `EOPNOTSUPP` unless `port` of `device` has a subnet administrator to ask.
fn require_sa(device: &Device, port: u32) -> Result {
    match device.protocol(port)? {
        Protocol::InfiniBand => Ok(()),
        _ => Err(EOPNOTSUPP),
    }
}

/// A registered user of the SA (`struct ib_sa_client`).
///
/// # Invariants
///
/// `client` is registered with `ib_sa_register_client` from initialisation until `drop`.
#[pin_data(PinnedDrop)]
pub struct SaClient {
    #[pin]
    client: Opaque<bindings::ib_sa_client>,
}

// SAFETY: The SA core serialises its use of the client (an atomic count and a completion).
unsafe impl Send for SaClient {}
// SAFETY: Shared access only passes the client to SA functions, which may run
// concurrently on it.
unsafe impl Sync for SaClient {}

impl SaClient {
    /// Registers a new client.
    pub fn new() -> Result<Arc<Self>> {
        // INVARIANT: Registered here, unregistered on drop.
        Arc::pin_init(
            pin_init!(Self {
                // SAFETY: `ib_sa_register_client` initialises the whole structure.
                client <- Opaque::ffi_init(|p| unsafe { bindings::ib_sa_register_client(p) }),
            }),
            GFP_KERNEL,
        )
    }

    fn as_raw(&self) -> *mut bindings::ib_sa_client {
        self.client.get()
    }
}

#[pinned_drop]
impl PinnedDrop for SaClient {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: Registered since initialisation (type invariant); every query holds an
        // `Arc` to us, so none of ours is left; this waits for the SA's own references.
        unsafe { bindings::ib_sa_unregister_client(self.client.get()) };
    }
}

impl PathRecord {
    /// What an InfiniBand path query asks for: one reversible path from `sgid` to `dgid` in
    /// partition `pkey`. The answer fills in the rest.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{cm::PathRecord, device::Gid};
    ///
    /// let ours = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xff, 0, 0, 1]);
    /// let peer = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xff, 0, 0, 2]);
    /// let query = PathRecord::ib_query(&ours, &peer, 0xffff);
    /// assert_eq!(query.dgid(), peer);
    /// // Unknown until the SA answers.
    /// assert_eq!(query.dlid(), 0);
    /// assert_eq!(query.mtu(), None);
    /// ```
    pub fn ib_query(sgid: &Gid, dgid: &Gid, pkey: u16) -> Self {
        // SAFETY: `sa_path_rec` is integers, C enums and byte arrays.
        let mut p: bindings::sa_path_rec = unsafe { core::mem::zeroed() };
        p.rec_type = bindings::sa_path_rec_type_SA_PATH_REC_TYPE_IB;
        p.sgid = bindings::ib_gid { raw: sgid.0 };
        p.dgid = bindings::ib_gid { raw: dgid.0 };
        p.pkey = pkey.to_be();
        p.numb_path = 1;
        p.reversible = 1;
        Self(p)
    }

    /// The destination GID.
    #[inline]
    pub fn dgid(&self) -> Gid {
        // SAFETY: Every bit pattern of the union is a valid byte array.
        Gid(unsafe { self.0.dgid.raw })
    }

    /// The path MTU; `None` for a value no [`Mtu`] names.
    #[inline]
    pub fn mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(u32::from(self.0.mtu))
    }

    /// The destination LID (InfiniBand).
    #[inline]
    pub fn dlid(&self) -> u16 {
        // SAFETY: Every bit pattern of the union is a valid record; InfiniBand paths use
        // its `ib` member (OPA LIDs are not asked for).
        u16::from_be(unsafe { self.0.__bindgen_anon_1.ib.dlid })
    }

    /// The service level.
    #[inline]
    pub fn sl(&self) -> u8 {
        self.0.sl
    }
}

/// Receives the answer of a [`PathQuery`].
pub trait PathHandler: Send + Sync + 'static {
    /// The path found, or why there is none (`ETIMEDOUT`, `EIO`, `ENETUNREACH`, ...).
    /// Runs in process context (the MAD layer's work queue), at most once per query.
    fn path(&self, result: Result<&PathRecord>);
}

/// What a query shares with its callback.
#[pin_data]
struct QueryState<T> {
    handler: Arc<T>,
    /// Set by the owner before it cancels: the callback then skips the handler.
    cancelled: AtomicBool,
    /// Set by the callback before it gives the handler the answer. A query whose answer
    /// came is never cancelled: a cancel between the SA's matching of the answer and the
    /// completion of its request would make the SA call the callback a second time (with
    /// `EINTR`), after the first released the context.
    answered: AtomicBool,
    /// Set by the callback when it has finished with the handler, before the SA frees the
    /// query. The callback runs in process context, never under this lock's holder.
    #[pin]
    done: SpinLock<bool>,
    #[pin]
    finished: CondVar,
}

/// An asynchronous path record query to the SA.
///
/// Dropping it cancels the query and waits until its callback is over, so the handler never
/// runs afterwards. Callbacks of a port run one at a time on the MAD layer's work queue:
/// do not drop a query from any SA handler (defer it to a work item).
///
/// # Invariants
///
/// `id` and `query` name a query started with `path_callback::<T>` and a context that is
/// `state.into_foreign()`; the callback runs exactly once and releases that context.
pub struct PathQuery<T: PathHandler> {
    state: Arc<QueryState<T>>,
    id: c_int,
    query: *mut bindings::ib_sa_query,
    _client: Arc<SaClient>,
    _device: DeviceRef,
}

// SAFETY: The query is only passed to `ib_sa_cancel_query`, which may be called from any thread.
unsafe impl<T: PathHandler> Send for PathQuery<T> {}
// SAFETY: `&PathQuery` gives access to nothing.
unsafe impl<T: PathHandler> Sync for PathQuery<T> {}

/// The lock classes of every path query's state. Lockdep wants one name per class, and this
/// generic code, instantiated in each module that queries paths, would bring its own copy of
/// a name literal (two modules querying made lockdep warn): the classes are made here, in
/// code that is not generic and not inlined.
#[inline(never)]
fn query_lock_classes() -> [(&'static CStr, &'static LockClassKey); 2] {
    [
        (
            crate::c_str!("PathQuery::done"),
            crate::static_lock_class!(),
        ),
        (
            crate::c_str!("PathQuery::finished"),
            crate::static_lock_class!(),
        ),
    ]
}

impl<T: PathHandler> PathQuery<T> {
    /// Asks the SA of `port` for the path `rec` describes (see [`PathRecord::ib_query`]);
    /// `handler` gets the answer within about `timeout_ms`. `EOPNOTSUPP` on a port without
    /// an SA (RoCE, iWARP).
    pub fn start(
        client: &Arc<SaClient>,
        device: &Device,
        port: u32,
        rec: &PathRecord,
        timeout_ms: u32,
        handler: Arc<T>,
    ) -> Result<Self> {
        require_sa(device, port)?;
        let device = device.get_ref()?;
        let [done, finished] = query_lock_classes();
        let state = Arc::pin_init(
            pin_init!(QueryState {
                handler,
                cancelled: AtomicBool::new(false),
                answered: AtomicBool::new(false),
                done <- SpinLock::new(false, done.0, done.1),
                finished <- CondVar::new(finished.0, finished.1),
            }),
            GFP_KERNEL,
        )?;
        let ctx = state.clone().into_foreign();
        let mut rec = rec.0;
        let mut query = core::ptr::null_mut();
        // SAFETY: The client is registered, the device valid and `port` one of its ports
        // (checked by `require_sa`); `rec` is copied by the SA; `ctx` stays valid until the
        // callback releases it.
        let id = unsafe {
            bindings::ib_sa_path_rec_get(
                client.as_raw(),
                device.as_raw(),
                port,
                &mut rec,
                PATH_DGID | PATH_SGID | PATH_NUMB_PATH | PATH_PKEY,
                timeout_ms as _,
                GFP_KERNEL.as_raw(),
                Some(path_callback::<T>),
                ctx.cast_mut(),
                &mut query,
            )
        };
        if id < 0 {
            // SAFETY: The query was not started, so the callback will not run: the context
            // is still ours.
            drop(unsafe { <Arc<QueryState<T>> as ForeignOwnable>::from_foreign(ctx) });
            return Err(Error::from_errno(id));
        }
        // INVARIANT: started with our callback and context.
        Ok(Self {
            state,
            id,
            query,
            _client: client.clone(),
            _device: device,
        })
    }
}

impl<T: PathHandler> Drop for PathQuery<T> {
    fn drop(&mut self) {
        self.state.cancelled.store(true, Ordering::SeqCst);
        let mut done = self.state.done.lock();
        // Dropped once its answer came (the usual case): nothing to cancel, the callback
        // only has to finish.
        if !*done && !self.state.answered.load(Ordering::SeqCst) {
            // SAFETY: The callback has not finished (it sets `done` under this lock before
            // returning to the SA, which frees the query only afterwards), so `query` is
            // live and `id` still names it. The call does not sleep.
            unsafe { bindings::ib_sa_cancel_query(self.id, self.query) };
        }
        while !*done {
            self.state.finished.wait(&mut done);
        }
    }
}

/// # Safety
///
/// Called by the SA only, once, for a query started by [`PathQuery::start`] with its context.
unsafe extern "C" fn path_callback<T: PathHandler>(
    status: c_int,
    resp: *mut bindings::sa_path_rec,
    num_prs: c_uint,
    context: *mut c_void,
) {
    // SAFETY: The context is the `Arc` given up in `PathQuery::start`; this is its only release.
    let state = unsafe { <Arc<QueryState<T>> as ForeignOwnable>::from_foreign(context) };
    // Before the handler, which may have the owner drop the query.
    state.answered.store(true, Ordering::SeqCst);
    if !state.cancelled.load(Ordering::SeqCst) {
        let result = if status == 0 && num_prs > 0 && !resp.is_null() {
            // SAFETY: On success `resp` points to `num_prs` records valid for the call;
            // `PathRecord` is a transparent wrapper.
            Ok(unsafe { &*resp.cast::<PathRecord>() })
        } else if status < 0 {
            Err(Error::from_errno(status))
        } else {
            Err(EIO)
        };
        state.handler.path(result);
    }
    *state.done.lock() = true;
    state.finished.notify_all();
}

/// How a port belongs to a multicast group (`join_state`, IBA 15.2.5.17).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum JoinState {
    /// Sends and receives.
    FullMember = 1,
    /// Sends only, without creating the group or receiving from it.
    SendOnlyFullMember = 8,
}

/// A multicast member record (`struct ib_sa_mcmember_rec`) with the components it sets.
#[derive(Clone, Copy)]
pub struct McMemberRecord {
    rec: bindings::ib_sa_mcmember_rec,
    comp_mask: u64,
    gid_type: bindings::ib_gid_type,
}

impl McMemberRecord {
    fn zeroed() -> bindings::ib_sa_mcmember_rec {
        // SAFETY: `ib_sa_mcmember_rec` is integers and byte arrays.
        unsafe { core::mem::zeroed() }
    }

    /// What an InfiniBand port asks the SA to join group `mgid` in partition `pkey` with.
    /// A group that does not exist yet also needs [`McMemberRecord::with_group_params`].
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::{device::Gid, sa::{JoinState, McMemberRecord}};
    ///
    /// // The IPoIB broadcast group of partition 0x8001.
    /// let mgid = Gid([
    ///     0xff, 0x12, 0x40, 0x1b, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff,
    /// ]);
    /// let port = Gid([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xff, 0, 0, 1]);
    /// let join = McMemberRecord::ib_join(&mgid, &port, 0x8001, JoinState::FullMember);
    /// assert_eq!(join.mgid(), mgid);
    /// // The group's Q_Key and MLID come with the SA's answer.
    /// assert_eq!((join.qkey(), join.mlid()), (0, 0));
    /// ```
    pub fn ib_join(mgid: &Gid, port_gid: &Gid, pkey: u16, join_state: JoinState) -> Self {
        let mut rec = Self::zeroed();
        rec.mgid = bindings::ib_gid { raw: mgid.0 };
        rec.port_gid = bindings::ib_gid { raw: port_gid.0 };
        rec.pkey = pkey.to_be();
        rec.join_state = join_state as u8;
        Self {
            rec,
            comp_mask: MC_MGID | MC_PORT_GID | MC_PKEY | MC_JOIN_STATE,
            gid_type: bindings::ib_gid_type_IB_GID_TYPE_IB,
        }
    }

    /// This join, creating its group (if the SA has none yet) with the parameters of
    /// `group`: Q_Key, MTU, rate, service level, flow label, hop limit, traffic class. The
    /// caller picks the model group (IPoIB takes its broadcast group's).
    pub fn with_group_params(mut self, group: &McMemberRecord) -> Self {
        let (r, g) = (&mut self.rec, &group.rec);
        r.qkey = g.qkey;
        r.mtu_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        r.mtu = g.mtu;
        r.rate_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        r.rate = g.rate;
        r.sl = g.sl;
        r.flow_label = g.flow_label;
        r.hop_limit = g.hop_limit;
        r.traffic_class = g.traffic_class;
        self.comp_mask |= MC_QKEY
            | MC_MTU_SELECTOR
            | MC_MTU
            | MC_RATE_SELECTOR
            | MC_RATE
            | MC_SL
            | MC_FLOW_LABEL
            | MC_HOP_LIMIT
            | MC_TRAFFIC_CLASS;
        self
    }

    /// The record RoCE uses for group `mgid`, built locally as the RDMA CM does (there is no
    /// SA to answer): sent from GID `port` with `qkey`, `mtu` and `hop_limit`.
    pub fn roce(mgid: &Gid, port: &GidAttr, qkey: u32, mtu: Mtu, hop_limit: u8) -> Self {
        let mut rec = Self::zeroed();
        rec.mgid = bindings::ib_gid { raw: mgid.0 };
        rec.port_gid = bindings::ib_gid { raw: port.gid().0 };
        rec.qkey = qkey.to_be();
        rec.pkey = 0xffffu16.to_be();
        rec.mtu_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        rec.mtu = mtu as u8;
        rec.rate_selector = bindings::ib_sa_selector_IB_SA_EQ as u8;
        rec.rate = bindings::ib_rate_IB_RATE_PORT_CURRENT as u8;
        rec.hop_limit = hop_limit;
        rec.join_state = JoinState::FullMember as u8;
        Self {
            rec,
            comp_mask: 0,
            gid_type: port.raw_gid_type(),
        }
    }

    /// The record of group `mgid` if some client on this host joined it through `port` of
    /// `device` (`ib_sa_get_mcmember_rec`), user space through the RDMA CM included.
    /// `None` on a port without an SA.
    pub fn local_group(device: &Device, port: u32, mgid: &Gid) -> Option<Self> {
        require_sa(device, port).ok()?;
        let mut rec = Self::zeroed();
        let mut raw = bindings::ib_gid { raw: mgid.0 };
        // SAFETY: The device is valid and `port` one of its ports (checked by
        // `require_sa`); `raw` and `rec` are valid for the call, which copies into `rec`.
        let ret =
            unsafe { bindings::ib_sa_get_mcmember_rec(device.as_raw(), port, &mut raw, &mut rec) };
        (ret == 0).then_some(Self {
            rec,
            comp_mask: 0,
            gid_type: bindings::ib_gid_type_IB_GID_TYPE_IB,
        })
    }

    /// The group.
    #[inline]
    pub fn mgid(&self) -> Gid {
        // SAFETY: Every bit pattern of the union is a valid byte array.
        Gid(unsafe { self.rec.mgid.raw })
    }

    /// The group's Q_Key.
    #[inline]
    pub fn qkey(&self) -> u32 {
        u32::from_be(self.rec.qkey)
    }

    /// The group's multicast LID (InfiniBand).
    #[inline]
    pub fn mlid(&self) -> u16 {
        u16::from_be(self.rec.mlid)
    }

    /// The group's MTU; `None` for a value no [`Mtu`] names.
    #[inline]
    pub fn mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(u32::from(self.rec.mtu))
    }

    /// The group's service level.
    #[inline]
    pub fn sl(&self) -> u8 {
        self.rec.sl
    }

    #[inline]
    pub(crate) fn raw(&self) -> &bindings::ib_sa_mcmember_rec {
        &self.rec
    }

    #[inline]
    pub(crate) fn gid_type(&self) -> bindings::ib_gid_type {
        self.gid_type
    }
}

/// Receives the outcome of a [`McJoin`].
pub trait McHandler: Send + Sync + 'static {
    /// The join completed with the group's record, or failed (`ETIMEDOUT`, `EINVAL` for
    /// parameters that differ from the group's); later `ENETRESET` means the group was lost
    /// (e.g. the SM moved) and must be joined anew. Runs in process context (the SA's work
    /// queue); may run more than once.
    fn joined(&self, result: Result<&McMemberRecord>);
}

/// A membership of a multicast group through the SA; left when dropped.
///
/// Dropping waits until no callback runs (`ib_sa_free_multicast`): do not drop it from any
/// SA handler (defer it to a work item).
///
/// # Invariants
///
/// `mc` was returned by `ib_sa_join_multicast` with `mc_callback::<T>` and the context
/// `ctx` (an `Arc<T>` given up), released only in `drop` after `ib_sa_free_multicast`.
pub struct McJoin<T: McHandler> {
    mc: NonNull<bindings::ib_sa_multicast>,
    ctx: *const c_void,
    _client: Arc<SaClient>,
    _device: DeviceRef,
    _handler: PhantomData<Arc<T>>,
}

// SAFETY: The membership may be freed from any thread; the context is `Send + Sync`.
unsafe impl<T: McHandler> Send for McJoin<T> {}
// SAFETY: `&McJoin` gives access to nothing.
unsafe impl<T: McHandler> Sync for McJoin<T> {}

impl<T: McHandler> McJoin<T> {
    /// Asks the SA of `port` to join `rec`'s group (see [`McMemberRecord::ib_join`]);
    /// `handler` hears the outcome. `EOPNOTSUPP` on a port without an SA (RoCE, where
    /// [`McMemberRecord::roce`] stands in for the answer), `EINVAL` for a RoCE record.
    pub fn start(
        client: &Arc<SaClient>,
        device: &Device,
        port: u32,
        rec: &McMemberRecord,
        handler: Arc<T>,
    ) -> Result<Self> {
        require_sa(device, port)?;
        if rec.comp_mask == 0 {
            return Err(EINVAL);
        }
        let device = device.get_ref()?;
        let ctx = handler.into_foreign();
        let mut raw = rec.rec;
        // SAFETY: The client is registered, the device valid and `port` one of its ports;
        // `raw` is copied by the SA; `ctx` stays valid until released in `drop` (or below).
        let mc = from_err_ptr(unsafe {
            bindings::ib_sa_join_multicast(
                client.as_raw(),
                device.as_raw(),
                port,
                &mut raw,
                rec.comp_mask,
                GFP_KERNEL.as_raw(),
                Some(mc_callback::<T>),
                ctx.cast_mut(),
            )
        })
        .and_then(|mc| NonNull::new(mc).ok_or(EINVAL));
        match mc {
            // INVARIANT: joined with our callback and context.
            Ok(mc) => Ok(Self {
                mc,
                ctx,
                _client: client.clone(),
                _device: device,
                _handler: PhantomData,
            }),
            Err(e) => {
                // SAFETY: The join was not started: no callback has the context.
                drop(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(ctx) });
                Err(e)
            }
        }
    }
}

impl<T: McHandler> Drop for McJoin<T> {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `mc` is ours and freed only here; the call waits for
        // running callbacks and no callback starts afterwards.
        unsafe { bindings::ib_sa_free_multicast(self.mc.as_ptr()) };
        // SAFETY: No callback has the context any more (above); it came from `into_foreign`
        // and is released once.
        drop(unsafe { <Arc<T> as ForeignOwnable>::from_foreign(self.ctx) });
    }
}

/// # Safety
///
/// Called by the SA only, for a membership made by [`McJoin::start`], before it is freed.
unsafe extern "C" fn mc_callback<T: McHandler>(
    status: c_int,
    mc: *mut bindings::ib_sa_multicast,
) -> c_int {
    // SAFETY: `mc` is valid for the call.
    let mc = unsafe { &*mc };
    // SAFETY: Its context is the handler `McJoin` keeps until `ib_sa_free_multicast` has
    // waited for this call.
    let handler = unsafe { <Arc<T> as ForeignOwnable>::borrow(mc.context) };
    if status == 0 {
        handler.joined(Ok(&McMemberRecord {
            rec: mc.rec,
            comp_mask: mc.comp_mask,
            gid_type: bindings::ib_gid_type_IB_GID_TYPE_IB,
        }));
    } else {
        handler.joined(Err(Error::from_errno(status)));
    }
    // Zero keeps the membership: only `McJoin::drop` frees it.
    0
}
