// SPDX-License-Identifier: GPL-2.0

//! Connected mode (RFC 4755): reliable connections to peers that offer them (flag 0x80 in
//! their address), set up through the IB connection manager.
//!
//! A connection carries data one way. We open a transmit connection to a peer on the first
//! packet for it; peers open receive connections to us through our listener. All receive
//! connections take their buffers from one shared receive queue (or, where the device has
//! none or `cm_srq=0`, each from a ring of its own, at most `max_nonsrq_conn_qp` of them)
//! and complete on the interface's receive CQ; each transmit connection has its own send
//! CQ. Connections are made and destroyed in process context (the port's work item); NAPI
//! only posts, polls and hands packets up. This file holds the per-interface state; the
//! connections are in `cm_tx.rs` and `cm_rx.rs`, the shared receive queue and the receive
//! buffers in `srq.rs`.

use crate::{
    cm_rx::{CmListen, RxConnection},
    cm_tx::{TxConnection, TxPhase},
    params,
    send_credits::SendCredits,
    srq::{self, Srq},
    stats::{bump, now_ms, Counters},
    wire::{self, CmPrivateData, HwAddr, CM_BUF_SIZE, HWADDR_LEN},
};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use kernel::{
    delay,
    net::{
        dev::NetDevice,
        napi::{Napi, NapiHandle},
        skb::SkBuff,
    },
    new_mutex, new_spinlock_bh,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    rdma::{
        cm::{CmId, Listener},
        cq::{CompletionQueue, QpId, RawCompletionQueue, WcStatus, WorkCompletion},
        device::{Device, DeviceRef, Mtu},
        dma::ScatterBuffer,
        pd::ProtectionDomain,
        qp::{QpCaps, QpEventHandler, QpType, QueuePair, RecvBuffer, SharedQueue},
    },
    sync::{Arc, ArcBorrow, Mutex, SpinLockBh},
    time::msecs_to_jiffies,
    workqueue::{
        self, impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, Work,
        WorkItem,
    },
};

/// The work item that sets transmit connections up and destroys dead connections.
const MAINTAIN_WORK: u64 = 0;
/// The delayed work item that closes idle receive connections.
const STALE_WORK: u64 = 1;

/// How long a closed receive connection may take to drain before it is destroyed anyway.
const DRAIN_TIMEOUT_MS: i64 = 5000;

/// Connections are keyed by the peer's address without its flags byte.
type PeerKey = [u8; HWADDR_LEN];

fn peer_key(addr: &HwAddr) -> PeerKey {
    let mut key = *addr.as_bytes();
    key[0] = 0;
    key
}

/// Connected mode on one interface.
#[pin_data]
pub(crate) struct CmPort {
    pub(crate) device: DeviceRef,
    pub(crate) port: u32,
    /// Our UD QPN, announced in REQs and REPs.
    local_qpn: u32,
    /// The path MTU of connections (the port's active MTU).
    pub(crate) path_mtu: Mtu,
    /// Sends a transmit connection's queue pair and CQ take: all the interface's credits.
    pub(crate) send_ring: u32,
    pub(crate) pd: Arc<ProtectionDomain>,
    /// Where receive connections take their buffers from; `None`: from rings of their own.
    pub(crate) srq: Option<Arc<Srq>>,
    /// Buffers of a receive connection's own ring (without a shared receive queue).
    pub(crate) ring_size: u32,
    /// Receive connections with rings of their own accepted at most: `max_nonsrq_conn_qp`,
    /// or fewer if the receive CQ could not be made large enough for them.
    pub(crate) nonsrq_max: usize,
    /// Receive connections with rings of their own, counted against `max_nonsrq_conn_qp`
    /// from the request on, until destroyed.
    pub(crate) nonsrq_conns: AtomicUsize,
    /// Receive connections with rings of their own, by queue pair: NAPI finds a
    /// completion's buffer there. Removed before the connection is destroyed, so NAPI never
    /// holds the last reference.
    #[pin]
    pub(crate) rx_rings: SpinLockBh<RBTree<QpId, Arc<RxConnection>>>,
    /// The interface's receive CQ, shared with the UD queue pair.
    pub(crate) recv_cq: Arc<CompletionQueue<crate::cq::CqEvents>>,
    pub(crate) credits: Arc<SendCredits>,
    pub(crate) counters: Arc<Counters>,
    pub(crate) napi: NapiHandle,
    /// Whether connections are made and accepted (the interface is up).
    pub(crate) open: AtomicBool,
    #[pin]
    listener: Mutex<Option<Listener<CmListen>>>,
    /// Transmit connections by peer.
    #[pin]
    tx: SpinLockBh<RBTree<PeerKey, Arc<TxConnection>>>,
    /// The identifiers of transmit connections, kept by the work item.
    #[pin]
    tx_ids: Mutex<RBTree<PeerKey, CmId<TxConnection>>>,
    /// Receive connections by arrival number.
    #[pin]
    pub(crate) rx: Mutex<RBTree<u64, CmId<RxConnection>>>,
    pub(crate) rx_serial: AtomicU64,
    /// When each receive connection last delivered a message (ms, monotonic), by queue
    /// pair: NAPI only knows a completion's queue pair.
    #[pin]
    pub(crate) rx_seen: SpinLockBh<RBTree<QpId, RxSeen>>,
    /// Sets connections up and destroys them.
    #[pin]
    work: Work<CmPort, MAINTAIN_WORK>,
    /// Closes idle receive connections, periodically while the interface is up.
    #[pin]
    stale_work: DelayedWork<CmPort, STALE_WORK>,
}

/// What NAPI records of a receive connection's traffic.
#[derive(Clone, Copy)]
pub(crate) struct RxSeen {
    /// When it last delivered a message (ms, monotonic).
    pub(crate) last: i64,
    /// Messages delivered.
    pub(crate) packets: u64,
}

impl CmPort {
    /// Prepares connected mode for an interface: the shared receive queue, filled, where the
    /// device has one and `cm_srq` allows it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        device: &Device,
        port: u32,
        local_qpn: u32,
        path_mtu: Mtu,
        (send_ring, recv_ring, nonsrq_max): (u32, u32, usize),
        pd: &Arc<ProtectionDomain>,
        recv_cq: Arc<CompletionQueue<crate::cq::CqEvents>>,
        credits: Arc<SendCredits>,
        counters: Arc<Counters>,
        napi: &NapiHandle,
    ) -> Result<Arc<Self>> {
        let srq = if srq::uses_srq(device) {
            Some(srq::new_srq(device, pd, recv_ring)?)
        } else {
            None
        };
        let device = device.get_ref()?;
        Arc::pin_init(
            pin_init!(Self {
                device,
                port,
                local_qpn,
                path_mtu,
                send_ring,
                pd: pd.clone(),
                srq,
                ring_size: recv_ring,
                nonsrq_max,
                nonsrq_conns: AtomicUsize::new(0),
                rx_rings <- new_spinlock_bh!(RBTree::new(), "CmPort::rx_rings"),
                recv_cq,
                credits,
                counters,
                napi: napi.clone(),
                open: AtomicBool::new(false),
                listener <- new_mutex!(None, "CmPort::listener"),
                tx <- new_spinlock_bh!(RBTree::new(), "CmPort::tx"),
                tx_ids <- new_mutex!(RBTree::new(), "CmPort::tx_ids"),
                rx <- new_mutex!(RBTree::new(), "CmPort::rx"),
                rx_serial: AtomicU64::new(0),
                rx_seen <- new_spinlock_bh!(RBTree::new(), "CmPort::rx_seen"),
                work <- new_work!("CmPort::work"),
                stale_work <- new_delayed_work!("CmPort::stale_work"),
            }),
            GFP_KERNEL,
        )
    }

    pub(crate) fn name(&self) -> &CStr {
        self.device.name()
    }

    pub(crate) fn private_data(&self) -> [u8; wire::CM_PRIVATE_DATA_LEN] {
        CmPrivateData {
            qpn: self.local_qpn,
            mtu: CM_BUF_SIZE,
        }
        .to_bytes()
    }

    /// A new RC queue pair completing on `cq`, with room for `send_wr` sends, reporting its
    /// events to `events`, in INIT: what both kinds of connection start from. It receives
    /// into a ring of its own of `own_ring` buffers (posted by the caller) if that is not
    /// zero, else from the shared receive queue, if any.
    pub(crate) fn new_rc_qp<B: RecvBuffer>(
        &self,
        cq: Arc<dyn RawCompletionQueue>,
        send_wr: u32,
        events: Option<Arc<dyn QpEventHandler>>,
        own_ring: u32,
    ) -> Result<Pin<KBox<QueuePair<B>>>> {
        let caps = QpCaps {
            max_send_wr: send_wr,
            max_recv_wr: own_ring,
            max_send_sge: crate::ipoib_ud::send_sges(&self.device),
            max_recv_sge: if own_ring > 0 { srq::recv_sges() } else { 0 },
        };
        let srq = match own_ring {
            0 => self.srq.clone().map(|s| s as Arc<dyn SharedQueue>),
            _ => None,
        };
        let qp = QueuePair::with_buffers(
            QpType::Rc,
            &self.pd,
            cq.clone(),
            cq,
            srq,
            caps,
            events,
            crate::OWNER,
        )?;
        qp.init_rc(self.port, 0)?;
        Ok(qp)
    }

    /// Has the work item run; one already queued does the job.
    pub(crate) fn schedule_work(self: &Arc<Self>) {
        let _ = workqueue::system().enqueue::<_, MAINTAIN_WORK>(self.clone());
    }

    /// Starts listening for connections (the interface comes up).
    pub(crate) fn start(self: &Arc<Self>) -> Result {
        let listen = Arc::new(CmListen { port: self.clone() }, GFP_KERNEL)?;
        let listener = Listener::new(&self.device, wire::cm_service_id(self.local_qpn), listen)?;
        *self.listener.lock() = Some(listener);
        self.open.store(true, Ordering::Release);
        self.schedule_stale_check();
        Ok(())
    }

    /// The idle time after which a receive connection is closed, in ms.
    fn stale_ms() -> i64 {
        i64::from(params::CM_STALE_SECS.get().max(1)) * 1000
    }

    fn schedule_stale_check(self: &Arc<Self>) {
        // Checked twice per idle period, so a connection goes at most 1.5 periods idle.
        let period = (Self::stale_ms() / 2).clamp(1000, i64::from(u32::MAX)) as u32;
        let _ = workqueue::system()
            .enqueue_delayed::<_, STALE_WORK>(self.clone(), msecs_to_jiffies(period));
    }

    /// Closes the receive connections idle for longer than the stale time (the delayed work
    /// item), destroys closed ones that never drained, then checks again later while the
    /// interface is up.
    fn reap_stale(self: &Arc<Self>) {
        let deadline = now_ms() - Self::stale_ms();
        let mut closed = 0u32;
        for id in self.rx.lock().values() {
            let conn = id.handler();
            if conn.is_dead() {
                continue;
            }
            let last = self.rx_seen.lock().get(&conn.qp.id()).map(|s| s.last);
            if last.map_or(true, |t| t < deadline) {
                conn.close();
                closed += 1;
            }
        }
        bump(&self.counters.cm_rx_stale, u64::from(closed));
        if closed > 0 {
            pr_info!(
                "{} port {}: {} idle receive connection(s) closed\n",
                self.name(),
                self.port,
                closed
            );
        }
        self.destroy_connections(false);
        if self.open.load(Ordering::Acquire) {
            self.schedule_stale_check();
        }
    }

    /// Stops listening and destroys every connection (the interface goes down).
    pub(crate) fn stop(&self) {
        self.open.store(false, Ordering::Release);
        let listener = self.listener.lock().take();
        drop(listener);
        // A run already under way may queue itself once more: flush until idle.
        while self.stale_work.flush() {}
        self.drain_rx();
        self.destroy_connections(true);
        self.work.flush();
        // A run that was under way may have made a connection meanwhile.
        self.destroy_connections(true);
    }

    /// Closes every receive connection and waits, boundedly, until their queue pairs have
    /// let go of the shared receive queue.
    fn drain_rx(&self) {
        for id in self.rx.lock().values() {
            id.handler().close();
        }
        let start = now_ms();
        while now_ms() - start < DRAIN_TIMEOUT_MS
            && !self
                .rx
                .lock()
                .values()
                .all(|id| id.handler().drain.drained())
        {
            delay::msleep(10);
        }
    }

    /// Fails the transmit connections whose sends have not completed since `deadline` (ms,
    /// monotonic), after a transmit timeout; returns how many.
    pub(crate) fn fail_stalled(&self, deadline: i64) -> usize {
        let mut failed = 0;
        for conn in self.tx.lock().values() {
            failed += usize::from(conn.fail_if_stalled(deadline));
        }
        failed
    }

    /// Closes every transmit connection (the interface left connected mode).
    pub(crate) fn close_tx(self: &Arc<Self>) {
        let mut dropped = 0;
        for conn in self.tx.lock().values() {
            let mut s = conn.state.lock();
            s.phase = TxPhase::Dead;
            dropped += s.held.clear();
        }
        bump(&self.counters.tx_dropped, dropped);
        self.schedule_work();
    }

    /// Sends `skb` to `dest` over its transmit connection, made on first use.
    pub(crate) fn xmit(this: ArcBorrow<'_, Self>, skb: SkBuff, dest: &HwAddr, dev: &NetDevice) {
        let key = peer_key(dest);
        let found = this.tx.lock().get(&key).cloned();
        let conn = match found {
            Some(conn) => conn,
            None => match Self::add_tx(this, key, dest) {
                Ok(conn) => conn,
                Err(_) => {
                    bump(&this.counters.tx_dropped, 1);
                    return;
                }
            },
        };
        conn.xmit(skb, dev);
    }

    fn add_tx(this: ArcBorrow<'_, Self>, key: PeerKey, dest: &HwAddr) -> Result<Arc<TxConnection>> {
        if !this.open.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        let port: Arc<Self> = this.into();
        let conn = TxConnection::new(port.clone(), *dest)?;
        let node = RBTreeNode::new(key, conn.clone(), GFP_ATOMIC)?;
        let old = port.tx.lock().insert(node);
        drop(old);
        port.schedule_work();
        Ok(conn)
    }

    /// NAPI: polls the transmit connections whose CQs fired or that hold packets to send.
    /// Returns whether some need another round.
    pub(crate) fn poll_tx(&self, dev: &NetDevice) -> bool {
        const BATCH: usize = 16;
        let mut again = false;
        let mut skip = 0;
        loop {
            let mut due: [Option<Arc<TxConnection>>; BATCH] = [const { None }; BATCH];
            let mut n = 0;
            let mut seen = 0;
            {
                let tx = self.tx.lock();
                for conn in tx.values().skip(skip) {
                    seen += 1;
                    if conn.state.lock().needs_poll() {
                        due[n] = Some(conn.clone());
                        n += 1;
                        if n == BATCH {
                            break;
                        }
                    }
                }
            }
            for conn in due.iter().flatten() {
                again |= conn.poll(dev);
            }
            if n < BATCH {
                break;
            }
            skip += seen;
        }
        again
    }

    /// Lists every connection for debugfs (`<if>_cm`): transmit ones, then receive ones.
    #[cfg(CONFIG_DEBUG_FS)]
    pub(crate) fn show_connections(
        &self,
        out: &mut impl core::fmt::Write,
        now: i64,
    ) -> core::fmt::Result {
        // Each connection's state lock is taken outside the table's.
        let mut tx = KVec::new();
        for conn in self.tx.lock().values() {
            if tx.push(conn.clone(), GFP_ATOMIC).is_err() {
                break;
            }
        }
        for conn in &tx {
            conn.show(out, now)?;
        }
        for id in self.rx.lock().values() {
            let conn = id.handler();
            let seen = self.rx_seen.lock().get(&conn.qp.id()).copied();
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

    /// Transmit and receive connections in place.
    pub(crate) fn connection_counts(&self) -> (u64, u64) {
        let tx = self.tx.lock().iter().count() as u64;
        let rx = self.rx.lock().iter().count() as u64;
        (tx, rx)
    }

    /// Takes back the buffer of a receive connection that `wc` completes, if it is one.
    pub(crate) fn complete_recv(&self, wc: &WorkCompletion) -> Option<ScatterBuffer> {
        match &self.srq {
            Some(srq) => srq.complete_recv(wc),
            None => self
                .rx_rings
                .lock()
                .get(&wc.qp_id())
                .and_then(|conn| conn.qp.complete_recv(wc)),
        }
    }

    /// Gives `buf` back to the queue it came from, after a completion of `status` on
    /// connection queue pair `qp`; returns whether that failed where it should not have.
    fn repost(&self, buf: ScatterBuffer, qp: QpId, status: WcStatus) -> bool {
        match &self.srq {
            Some(srq) => srq.post_recv(buf).is_err(),
            // A flushed buffer belongs to a closing connection: it goes with it.
            None if matches!(status, WcStatus::Flushed) => false,
            None => match self.rx_rings.lock().get(&qp) {
                // A connection closing meanwhile refuses it; it goes.
                Some(conn) => conn.qp.post_recv(buf).is_err() && !conn.is_dead(),
                None => false,
            },
        }
    }

    /// Hands a message received on a connection up and reposts its buffer.
    pub(crate) fn receive(&self, wc: &WorkCompletion, mut buf: ScatterBuffer, napi: &Napi) {
        let c = &self.counters;
        if let WcStatus::Success = wc.status() {
            if let Some(seen) = self.rx_seen.lock().get_mut(&wc.qp_id()) {
                seen.last = now_ms();
                seen.packets += 1;
            }
        }
        match wc.status() {
            WcStatus::Success => {
                srq::deliver(&self.device, &mut buf, wc.byte_len() as usize, napi, c)
            }
            // A receive connection closed: the buffers it had taken come back.
            WcStatus::Flushed => {}
            WcStatus::Error(_) => bump(&c.rx_errors, 1),
        }
        if self.repost(buf, wc.qp_id(), wc.status()) {
            bump(&c.rx_errors, 1);
        }
    }

    /// Sets up new transmit connections and destroys dead ones (the work item).
    fn maintain(&self) {
        while self.open.load(Ordering::Acquire) {
            let next = self
                .tx
                .lock()
                .values()
                .find(|c| c.phase() == TxPhase::New)
                .cloned();
            let Some(conn) = next else { break };
            match conn.connect() {
                Ok(id) => match RBTreeNode::new(peer_key(&conn.dest), id, GFP_KERNEL) {
                    Ok(node) => {
                        let old = self.tx_ids.lock().insert(node);
                        drop(old);
                    }
                    Err(_) => drop(conn.unlink()),
                },
                Err(e) => {
                    bump(&self.counters.cm_tx_failed, 1);
                    pr_info!(
                        "{} port {}: cannot connect to {} ({:?})\n",
                        self.name(),
                        self.port,
                        conn.dest,
                        e
                    );
                    drop(conn.unlink());
                }
            }
        }
        self.destroy_connections(false);
    }

    /// Destroys dead connections, or all of them (process context).
    fn destroy_connections(&self, all: bool) {
        // Transmit connections: out of the table first, so no new packet finds them.
        loop {
            let victim = {
                let mut tx = self.tx.lock();
                let key = tx
                    .iter()
                    .find(|(_, c)| all || c.phase() == TxPhase::Dead)
                    .map(|(k, _)| *k);
                key.and_then(|k| tx.remove(&k).map(|c| (k, c)))
            };
            let Some((key, conn)) = victim else { break };
            let id = self.tx_ids.lock().remove(&key);
            // Destroying the identifier first waits for its handler and tells the peer.
            drop(id);
            drop(conn.unlink());
        }
        // Receive connections: once drained, or when draining takes too long.
        let now = now_ms();
        let due = |conn: &RxConnection| {
            all || conn.drain.drained()
                || conn.closed_at().is_some_and(|t| now - t > DRAIN_TIMEOUT_MS)
        };
        let mut undrained = 0u32;
        loop {
            let victim = {
                let mut rx = self.rx.lock();
                let key = rx
                    .iter()
                    .find(|(_, id)| due(&id.handler()))
                    .map(|(k, _)| *k);
                key.and_then(|k| rx.remove(&k))
            };
            let Some(id) = victim else { break };
            let conn = id.handler();
            if conn.drain.drained() {
                bump(&self.counters.cm_rx_drained, 1);
            } else {
                undrained += 1;
            }
            self.rx_seen.lock().remove(&conn.qp.id());
            let ring = self.rx_rings.lock().remove(&conn.qp.id());
            if ring.is_some() {
                self.nonsrq_conns.fetch_sub(1, Ordering::AcqRel);
            }
            drop(ring);
            drop(id);
        }
        if undrained > 0 {
            pr_warn!(
                "{} port {}: {} receive connection(s) destroyed before their queue pair drained\n",
                self.name(),
                self.port,
                undrained
            );
        }
    }
}

impl_has_work! {
    impl HasWork<Self, MAINTAIN_WORK> for CmPort { self.work }
}

impl WorkItem<MAINTAIN_WORK> for CmPort {
    type Pointer = Arc<CmPort>;

    fn run(this: Arc<CmPort>) {
        this.maintain();
    }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, STALE_WORK> for CmPort { self.stale_work }
}

impl WorkItem<STALE_WORK> for CmPort {
    type Pointer = Arc<CmPort>;

    fn run(this: Arc<CmPort>) {
        this.reap_stale();
    }
}
