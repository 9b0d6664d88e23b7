// SPDX-License-Identifier: GPL-2.0

//! Connected mode, receive side: connections peers open to us through the interface's
//! listener, and the table that keeps them. Their queue pairs take buffers from the shared
//! receive queue and complete on the interface's receive CQ, from which NAPI hands their
//! messages here. A DREQ, a failure or idleness closes one: its queue pair goes to the
//! error state, and once the device reports that it took its last buffer from the shared
//! queue (last WQE reached) the work item destroys it, so no buffer is lost with the queue
//! pair mid-message.
//!
//! Without a shared receive queue each connection has a ring of its own, filled when it is
//! accepted (in the CM's request handler, as the C driver does: `recv_queue_size` buffers of
//! 64 KiB) and freed with its queue pair, which closing puts in the error state and the work
//! item destroys at once (there is no shared queue to drain into). At most
//! `max_nonsrq_conn_qp` such connections are accepted (further requests get a REJ, "no QP"),
//! as in the C driver.
//!
//! Connected mode (`ipoib_cm.rs`) owns the table; the connections and the listener reach it
//! through [`RxOwner`].

use crate::{
    cm_shared::{CmOwner, CmShared},
    srq,
    stats::{bump, now_ms, Tally},
    wire::{CmPrivateData, MIN_MTU},
};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use kernel::{
    delay,
    net::napi::Napi,
    new_mutex, new_spinlock_bh,
    prelude::*,
    rbtree::{RBTree, RBTreeNode, RBTreeNodeReservation},
    rdma::{
        cm::{self, CmId, CmIdRef, Event, Handler, ListenHandler, QpState, Request},
        cq::{QpId, WcStatus, WorkCompletion},
        dma::ScatterBuffer,
        qp::{QpEvent, QpEventHandler, QpType, QueuePair, RnrTimer},
    },
    sync::{Arc, Mutex, SpinLockBh},
};

/// How long a closed receive connection may take to drain before it is destroyed anyway.
const DRAIN_TIMEOUT_MS: i64 = 5000;

/// How long a sender that found our receive buffers used up waits before it sends again:
/// about as long as NAPI takes to put them back. The CM's default, the longest there is
/// (655 ms), would stall a sender that retries (on RoCE, forever) for that long each time.
const RNR_TIMER: RnrTimer = RnrTimer::at_least_us(640);

/// Connected mode as receive connections and the listener see it.
pub(crate) trait RxOwner: CmOwner {
    /// The receive connections.
    fn rx(&self) -> &RxTable;
}

/// What NAPI records of a receive connection's traffic.
#[derive(Clone, Copy)]
struct RxSeen {
    /// When it last delivered a message (ms, monotonic).
    last: i64,
    /// Messages delivered.
    packets: u64,
}

/// The receive connections of an interface.
#[pin_data]
pub(crate) struct RxTable {
    /// Receive connections with rings of their own accepted at most: `max_nonsrq_conn_qp`,
    /// or fewer if the receive CQ could not be made large enough for them.
    nonsrq_max: usize,
    /// Receive connections with rings of their own, counted against `max_nonsrq_conn_qp`
    /// from the request on, until destroyed.
    nonsrq_conns: AtomicUsize,
    /// Receive connections with rings of their own, by queue pair: NAPI finds a
    /// completion's buffer there. Removed before the connection is destroyed, so NAPI never
    /// holds the last reference.
    #[pin]
    rings: SpinLockBh<RBTree<QpId, Arc<RxConnection>>>,
    /// Receive connections by arrival number (process context).
    #[pin]
    conns: Mutex<RBTree<u64, CmId<RxConnection>>>,
    serial: AtomicU64,
    /// When each receive connection last delivered a message (ms, monotonic), by queue
    /// pair: NAPI only knows a completion's queue pair.
    #[pin]
    seen: SpinLockBh<RBTree<QpId, RxSeen>>,
}

impl RxTable {
    /// An empty table that accepts at most `nonsrq_max` connections with rings of their own.
    pub(crate) fn new(nonsrq_max: usize) -> impl PinInit<Self> {
        pin_init!(Self {
            nonsrq_max,
            nonsrq_conns: AtomicUsize::new(0),
            rings <- new_spinlock_bh!(RBTree::new(), "RxTable::rings"),
            conns <- new_mutex!(RBTree::new(), "RxTable::conns"),
            serial: AtomicU64::new(0),
            seen <- new_spinlock_bh!(RBTree::new(), "RxTable::seen"),
        })
    }

    /// How many receive connections are in place.
    pub(crate) fn count(&self) -> u64 {
        self.conns.lock().iter().count() as u64
    }

    /// Closes the connections idle since `deadline` (ms, monotonic); returns how many.
    pub(crate) fn close_idle(&self, deadline: i64) -> u32 {
        let mut closed = 0u32;
        for id in self.conns.lock().values() {
            let conn = id.handler();
            if conn.is_dead() {
                continue;
            }
            let last = self.seen.lock().get(&conn.qp.id()).map(|s| s.last);
            if last.map_or(true, |t| t < deadline) {
                conn.close();
                closed += 1;
            }
        }
        closed
    }

    /// Closes every connection and waits, boundedly, until their queue pairs have let go of
    /// the shared receive queue.
    pub(crate) fn drain(&self) {
        for id in self.conns.lock().values() {
            id.handler().close();
        }
        let start = now_ms();
        while now_ms() - start < DRAIN_TIMEOUT_MS
            && !self
                .conns
                .lock()
                .values()
                .all(|id| id.handler().drain.drained())
        {
            delay::msleep(10);
        }
    }

    /// Destroys the connections that drained, or took too long to, or all of them (process
    /// context); returns how many went before their queue pair drained.
    pub(crate) fn destroy(&self, shared: &CmShared, all: bool) -> u32 {
        let now = now_ms();
        let due = |conn: &RxConnection| {
            all || conn.drain.drained()
                || conn.closed_at().is_some_and(|t| now - t > DRAIN_TIMEOUT_MS)
        };
        let mut undrained = 0u32;
        loop {
            let victim = {
                let mut conns = self.conns.lock();
                let key = conns
                    .iter()
                    .find(|(_, id)| due(&id.handler()))
                    .map(|(k, _)| *k);
                key.and_then(|k| conns.remove(&k))
            };
            let Some(id) = victim else { break };
            let conn = id.handler();
            if conn.drain.drained() {
                bump(&shared.counters.cm_rx_drained, 1);
            } else {
                undrained += 1;
            }
            self.seen.lock().remove(&conn.qp.id());
            let ring = self.rings.lock().remove(&conn.qp.id());
            if ring.is_some() {
                self.nonsrq_conns.fetch_sub(1, Ordering::AcqRel);
            }
            drop(ring);
            drop(id);
        }
        undrained
    }

    /// Lists the connections for debugfs (`<if>_cm`), one line each.
    pub(crate) fn show(&self, out: &mut dyn core::fmt::Write, now: i64) -> core::fmt::Result {
        for id in self.conns.lock().values() {
            let conn = id.handler();
            let seen = self.seen.lock().get(&conn.qp.id()).copied();
            write!(
                out,
                "rx peer-qpn 0x{:06x} peer-ud-qpn 0x{:06x} state {} qpn 0x{:06x} packets {} idle {} ms",
                conn.peer_qpn,
                conn.peer_ud_qpn,
                if conn.is_dead() { "closing" } else { "live" },
                conn.qp.qp_num(),
                seen.map_or(0, |s| s.packets),
                seen.map_or(0, |s| now - s.last),
            )?;
            if conn.own_ring {
                writeln!(out, " recv ring {}", conn.qp.recvs_posted())?;
            } else {
                writeln!(out, " recv srq")?;
            }
        }
        Ok(())
    }

    /// Hands up the message of a receive completion `wc` if a receive connection made it,
    /// and posts its buffer again (from NAPI). With a shared receive queue the buffer stays
    /// in the queue's slot throughout.
    pub(crate) fn receive(
        &self,
        shared: &CmShared,
        wc: &mut WorkCompletion,
        napi: &Napi,
        tally: &mut Tally<'_>,
    ) {
        let (qp, status) = (wc.qp_id(), wc.status());
        let reposted = match &shared.srq {
            Some(srq) => srq.recycle(wc, |buf, len| {
                self.handle(shared, buf, len, qp, status, napi, tally)
            }),
            None => self.receive_own(shared, wc, napi, tally),
        };
        if let Some(Err(_)) = reposted {
            bump(&shared.counters.rx_errors, 1);
        }
    }

    /// [`RxTable::receive`] for connections with rings of their own: the buffer is taken
    /// from the connection's ring and posted to it again. The table's lock is not held
    /// across the delivery, and NAPI never holds a reference to the connection.
    fn receive_own(
        &self,
        shared: &CmShared,
        wc: &mut WorkCompletion,
        napi: &Napi,
        tally: &mut Tally<'_>,
    ) -> Option<Result> {
        let (qp, status) = (wc.qp_id(), wc.status());
        let mut buf = self
            .rings
            .lock()
            .get(&qp)
            .and_then(|conn| conn.qp.complete_recv(wc))?;
        self.handle(shared, &mut buf, wc.byte_len(), qp, status, napi, tally);
        // A flushed buffer belongs to a closing connection: it goes with it.
        if matches!(status, WcStatus::Flushed) {
            return None;
        }
        let rings = self.rings.lock();
        let conn = rings.get(&qp)?;
        // A connection closing meanwhile refuses it; it goes.
        match conn.qp.post_recv(buf) {
            Err(_) if conn.is_dead() => None,
            posted => Some(posted),
        }
    }

    /// Hands up a message that filled `len` bytes of `buf`, received on connection queue
    /// pair `qp` with `status`.
    #[allow(clippy::too_many_arguments)]
    fn handle(
        &self,
        shared: &CmShared,
        buf: &mut ScatterBuffer,
        len: u32,
        qp: QpId,
        status: WcStatus,
        napi: &Napi,
        tally: &mut Tally<'_>,
    ) {
        crate::params::ipoib_dbg_cm_data!(
            "{}: connection receive completion, {} bytes, status {:?}\n",
            shared.name(),
            len,
            status
        );
        match status {
            WcStatus::Success => {
                if let Some(seen) = self.seen.lock().get_mut(&qp) {
                    seen.last = now_ms();
                    seen.packets += 1;
                }
                srq::deliver(buf, len as usize, napi, tally)
            }
            // A receive connection closed: the buffers it had taken come back.
            WcStatus::Flushed => {}
            WcStatus::Error(_) => bump(&shared.counters.rx_errors, 1),
        }
    }
}

/// Whether a receive connection's queue pair is done with the shared receive queue, as its
/// last-WQE-reached event tells.
pub(crate) struct RxDrain {
    drained: AtomicBool,
    owner: Arc<dyn RxOwner>,
}

impl RxDrain {
    pub(crate) fn drained(&self) -> bool {
        self.drained.load(Ordering::Acquire)
    }
}

impl QpEventHandler for RxDrain {
    fn event(&self, event: QpEvent) {
        // Devices repeat the event; the first one has the work item run.
        if event == QpEvent::LastWqeReached && !self.drained.swap(true, Ordering::AcqRel) {
            self.owner.clone().schedule_work();
        }
    }
}

/// A connection a peer opened to us: its queue pair receives from the shared receive queue,
/// or into a ring of its own.
pub(crate) struct RxConnection {
    pub(crate) qp: Pin<KBox<QueuePair<ScatterBuffer>>>,
    /// Whether the queue pair has its own ring (no shared receive queue).
    pub(crate) own_ring: bool,
    owner: Arc<dyn RxOwner>,
    pub(crate) drain: Arc<RxDrain>,
    /// Closed or failed: the work item destroys it once drained.
    dead: AtomicBool,
    /// When it was closed (ms, monotonic; 0 while open). Set before `dead`, so that whoever
    /// sees the connection dead also sees when it closed.
    closed_at: AtomicI64,
    /// The peer's queue pair of the connection, and its UD queue pair (from the REQ).
    pub(crate) peer_qpn: u32,
    pub(crate) peer_ud_qpn: u32,
}

impl RxConnection {
    /// Stops the connection: its queue pair goes to the error state, which makes the device
    /// report the last buffer it takes from the shared queue; the work item destroys it then.
    pub(crate) fn close(&self) {
        // The first close keeps its time. Stored before `dead`: the work item, finding the
        // connection dead with the time still unset, would take it for long closed and
        // destroy it before its queue pair drained.
        let _ = self.closed_at.compare_exchange(
            0,
            now_ms().max(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if !self.dead.swap(true, Ordering::AcqRel) {
            // Buffers this queue pair took come back flushed.
            let _ = self.qp.set_error();
        }
        if self.own_ring {
            // No shared queue to give buffers back to: the ring goes with the queue pair,
            // and completions still queued for it find no connection and are dropped.
            self.drain.drained.store(true, Ordering::Release);
        }
        self.owner.clone().schedule_work();
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(Ordering::Acquire)
    }

    /// When it was closed, if it was.
    pub(crate) fn closed_at(&self) -> Option<i64> {
        self.is_dead()
            .then(|| self.closed_at.load(Ordering::Acquire))
    }
}

impl Handler for RxConnection {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::DreqReceived => {
                let _ = id.send_drep();
                self.close();
            }
            Event::RejReceived { .. }
            | Event::Timeout
            | Event::DrepReceived
            | Event::TimewaitExit => self.close(),
            Event::RtuReceived
            | Event::RepReceived { .. }
            | Event::MraReceived { .. }
            | Event::Other(_) => {}
        }
    }
}

/// Takes connection requests for the interface's service.
pub(crate) struct CmListen {
    pub(crate) owner: Arc<dyn RxOwner>,
}

impl ListenHandler for CmListen {
    fn request(&self, req: Request<'_>) -> Result {
        let port = self.owner.shared();
        let table = self.owner.rx();
        if !port.open.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        // Only RC connections carry IPoIB. The peer's data announces its UD QPN and receive
        // size, which matter for the connection it opens toward us, not for this one; a size
        // that could not carry the smallest IPv4 packet is malformed. Refused requests get
        // a REJ.
        let peer = CmPrivateData::parse(req.private_data())
            .ok()
            .filter(|p| p.payload_mtu().is_some_and(|m| m >= MIN_MTU));
        let (Some(QpType::Rc), Some(peer)) = (req.qp_type(), peer) else {
            bump(&port.counters.cm_rx_rejected, 1);
            crate::params::ipoib_dbg!(
                "{}: connection request refused (not RC, or bad private data)\n",
                port.name()
            );
            return Err(EINVAL);
        };
        let own_ring = port.srq.is_none();
        let slot = if own_ring {
            let Some(slot) = NonSrqSlot::take(table) else {
                bump(&port.counters.cm_rx_rejected, 1);
                crate::params::ipoib_dbg!(
                    "{}: connection request refused: {} connections with rings of their own (max_nonsrq_conn_qp)\n",
                    port.name(),
                    table.nonsrq_max
                );
                let _ = req.id().send_rej(cm::REJ_NO_QP);
                return Err(ENOSPC);
            };
            Some(slot)
        } else {
            None
        };
        let drain = Arc::new(
            RxDrain {
                drained: AtomicBool::new(false),
                owner: self.owner.clone(),
            },
            GFP_KERNEL,
        )?;
        // Nothing is sent, but a send queue must exist.
        let ring = if own_ring { port.ring_size } else { 0 };
        let qp = port.new_rc_qp(port.recv_cq.clone(), 1, Some(drain.clone()), ring)?;
        for _ in 0..ring {
            qp.post_recv(srq::recv_buffer(&port.device)?)?;
        }
        let psn = cm::random_psn();
        req.id().modify_qp_for_rep(&qp, psn, RNR_TIMER)?;
        req.id().modify_qp(&qp, QpState::Rts)?;
        let conn = Arc::new(
            RxConnection {
                qp,
                own_ring,
                owner: self.owner.clone(),
                drain,
                dead: AtomicBool::new(false),
                closed_at: AtomicI64::new(0),
                peer_qpn: req.remote_qpn(),
                peer_ud_qpn: peer.qpn,
            },
            GFP_KERNEL,
        )?;
        let key = table.serial.fetch_add(1, Ordering::Relaxed);
        let seen = RxSeen {
            last: now_ms(),
            packets: 0,
        };
        let seen = RBTreeNode::new(conn.qp.id(), seen, GFP_KERNEL)?;
        let ring_node = match slot {
            Some(_) => Some(RBTreeNode::new(conn.qp.id(), conn.clone(), GFP_KERNEL)?),
            None => None,
        };
        let rnr_retry = port.rep_rnr_retry(req.rnr_retry_count());
        let mut rx = table.conns.lock();
        // Room first: once accepted, the identifier must be kept.
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let id = req.accept(conn.clone())?;
        // Listed only once accepted: a refused request leaves nothing behind.
        let old = table.seen.lock().insert(seen);
        drop(old);
        if let (Some(slot), Some(ring_node)) = (slot, ring_node) {
            // Listed before the reply, so NAPI finds the ring of the first message; the
            // place is given back when the connection is destroyed.
            let old = table.rings.lock().insert(ring_node);
            drop(old);
            slot.keep();
        }
        let private = port.private_data();
        let replied = id
            .id()
            .send_rep(&conn.qp, psn, &private, !own_ring, rnr_retry);
        bump(&port.counters.cm_rx_accepted, u64::from(replied.is_ok()));
        crate::params::ipoib_dbg!(
            "{}: connection from QPN 0x{:06x} (UD QPN 0x{:06x}) accepted on QPN 0x{:06x}\n",
            port.name(),
            conn.peer_qpn,
            conn.peer_ud_qpn,
            conn.qp.qp_num()
        );
        let old = rx.insert(node.into_node(key, id));
        drop(rx);
        drop(old);
        if let Err(e) = replied {
            pr_info!(
                "{}: reply to a connection request failed ({:?})\n",
                port.name(),
                e
            );
            conn.close();
        }
        Ok(())
    }
}

/// A place among the `max_nonsrq_conn_qp` receive connections with rings of their own,
/// given back if the connection is not made.
struct NonSrqSlot<'a> {
    table: &'a RxTable,
}

impl<'a> NonSrqSlot<'a> {
    /// Takes a place, if one is free.
    fn take(table: &'a RxTable) -> Option<Self> {
        let max = table.nonsrq_max;
        table
            .nonsrq_conns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self { table })
    }

    /// The connection is made: the place is given back when it is destroyed.
    fn keep(self) {
        core::mem::forget(self);
    }
}

impl Drop for NonSrqSlot<'_> {
    fn drop(&mut self) {
        self.table.nonsrq_conns.fetch_sub(1, Ordering::AcqRel);
    }
}
