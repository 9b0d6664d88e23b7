// SPDX-License-Identifier: GPL-2.0

//! Connected mode (RFC 4755): reliable connections to peers that offer them (flag 0x80 in
//! their address), set up through the IB connection manager.
//!
//! A connection carries data one way. We open a transmit connection to a peer on the first
//! packet for it; peers open receive connections to us through our listener. All receive
//! connections take their buffers from one shared receive queue (or, where the device has
//! none or `cm_srq=0`, each from a ring of its own, at most `max_nonsrq_conn_qp` of them)
//! and complete on the interface's receive CQ; each transmit connection has its own send
//! CQ. Connections are made and destroyed in process context (the work item); NAPI only
//! posts, polls and hands packets up. This file holds the per-interface state: the
//! listener, the transmit connections, the work; the connections are in `cm_tx.rs` and
//! `cm_rx.rs` (with the table of receive connections), what they share in `cm_shared.rs`,
//! the shared receive queue and the receive buffers in `srq.rs`. It knows nothing of the
//! interface that owns it: what it needs comes in through [`ConnectedMode::new`].

use crate::{
    cm_rx::{CmListen, RxOwner, RxTable},
    cm_shared::{CmOwner, CmShared},
    cm_tx::{TxConnection, TxPhase},
    cq::{self, CqGroup},
    log_name::LogName,
    params,
    partition::PartitionIndex,
    path::PathResolver,
    send_credits::SendCredits,
    srq,
    stats::{bump, now_ms, Counters, Tally},
    wire::{self, GidKey, HwAddr, CM_MTU},
};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use kernel::{
    net::{
        dev::NetDevice,
        napi::{Napi, NapiHandle},
        rtnl::Rtnl,
        skb::SkBuff,
    },
    new_mutex, new_spinlock_bh,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    rdma::{
        cm::{CmId, Listener},
        cq::{CompletionQueue, WorkCompletion},
        device::{Device, Mtu},
        pd::ProtectionDomain,
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
/// The delayed work item that has NAPI reap the sends completed on connections whose CQs it
/// left unarmed.
const TAIL_WORK: u64 = 2;

/// Connections are keyed by the peer's address without its flags byte: its GID, then its
/// QPN, which compare in a few instructions per tree node (a byte array's comparison took
/// a dozen, on every packet sent).
type PeerKey = (GidKey, u32);

#[inline]
fn peer_key(addr: &HwAddr) -> PeerKey {
    (GidKey::new(&addr.gid().0), addr.qpn())
}

/// Connected mode on one interface (C: `struct ipoib_cm_dev_priv`): the listener, the
/// connections and their tables, the shared receive queue, and the work that makes and
/// reaps connections. Tables NAPI reaches are under bottom-half spinlocks; those only
/// process context touches are under mutexes.
#[pin_data]
pub(crate) struct ConnectedMode {
    /// What the connections share.
    shared: CmShared,
    /// Whether unicast to peers that offer connected mode goes over connections: the
    /// interface's mode.
    in_use: AtomicBool,
    #[pin]
    listener: Mutex<Option<Listener<CmListen>>>,
    /// Transmit connections by peer.
    #[pin]
    tx: SpinLockBh<RBTree<PeerKey, Arc<TxConnection>>>,
    /// How many `tx` holds, changed under its lock: NAPI skips the table while it is empty
    /// (datagram mode, or no peer yet).
    tx_count: AtomicUsize,
    /// The identifiers of transmit connections, kept by the work item.
    #[pin]
    tx_ids: Mutex<RBTree<PeerKey, CmId<TxConnection>>>,
    /// Receive connections.
    #[pin]
    rx: RxTable,
    /// Sets connections up and destroys them.
    #[pin]
    work: Work<ConnectedMode, MAINTAIN_WORK>,
    /// Closes idle receive connections, periodically while the interface is up.
    #[pin]
    stale_work: DelayedWork<ConnectedMode, STALE_WORK>,
    /// NAPI left the CQs of some transmit connections unarmed after it found completed sends
    /// there: they show only when polled, which the tail work item asks for. Written by
    /// NAPI only.
    any_unarmed: AtomicBool,
    /// The tail work item asked NAPI to poll the unarmed CQs.
    reap_due: AtomicBool,
    #[pin]
    tail_work: DelayedWork<ConnectedMode, TAIL_WORK>,
}

impl ConnectedMode {
    /// Prepares connected mode for an interface: the shared receive queue, filled, where the
    /// device has one and `cm_srq` allows it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        device: &Device,
        (port, log_name, partition): (u32, Arc<LogName>, Arc<PartitionIndex>),
        local_qpn: u32,
        path_mtu: Mtu,
        resolver: PathResolver,
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
        let shared = CmShared {
            device: device.get_ref()?,
            port,
            log_name,
            partition,
            local_qpn,
            path_mtu: AtomicU32::new(path_mtu.bytes()),
            resolver,
            send_ring,
            pd: pd.clone(),
            srq,
            ring_size: recv_ring,
            recv_cq,
            credits,
            counters,
            napi: napi.clone(),
            tx_events: Arc::new(CqGroup::new(), GFP_KERNEL)?,
            open: AtomicBool::new(false),
        };
        Arc::pin_init(
            pin_init!(Self {
                shared,
                in_use: AtomicBool::new(params::CONNECTED_MODE.get()),
                listener <- new_mutex!(None, "ConnectedMode::listener"),
                tx <- new_spinlock_bh!(RBTree::new(), "ConnectedMode::tx"),
                tx_count: AtomicUsize::new(0),
                tx_ids <- new_mutex!(RBTree::new(), "ConnectedMode::tx_ids"),
                rx <- RxTable::new(nonsrq_max),
                work <- new_work!("ConnectedMode::work"),
                stale_work <- new_delayed_work!("ConnectedMode::stale_work"),
                any_unarmed: AtomicBool::new(false),
                reap_due: AtomicBool::new(false),
                tail_work <- new_delayed_work!("ConnectedMode::tail_work"),
            }),
            GFP_KERNEL,
        )
    }

    /// How many receive connections with rings of their own the receive CQ of an interface
    /// on `port` of `device` gets room for, beyond its `base_cqe` entries, with rings of
    /// `ring` buffers: none where they share a receive queue, else `max_nonsrq_conn_qp`, as
    /// far as the device allows (the cap follows, as the C driver sizes it).
    pub(crate) fn nonsrq_room(device: &Device, port: u32, ring: u32, base_cqe: u32) -> usize {
        if srq::uses_srq(device) {
            return 0;
        }
        let room = device.max_cqe().saturating_sub(base_cqe) / ring;
        let max = params::max_nonsrq_conn_qp().min(room as usize);
        if max < params::max_nonsrq_conn_qp() {
            pr_info!(
                "{} port {}: room for {} receive connections only (max_nonsrq_conn_qp {})\n",
                device.name(),
                port,
                max,
                params::max_nonsrq_conn_qp()
            );
        }
        max
    }

    /// Whether the interface is in connected mode.
    pub(crate) fn in_use(&self) -> bool {
        self.in_use.load(Ordering::Relaxed)
    }

    /// Switches the interface whose net_device is `dev` into connected mode or out of it,
    /// under RTNL: connected mode raises the MTU to its largest; datagram mode clamps it to
    /// `ud_mtu` and closes the transmit connections.
    pub(crate) fn switch(
        self: &Arc<Self>,
        dev: &NetDevice,
        rtnl: &Rtnl,
        on: bool,
        ud_mtu: u32,
    ) -> Result {
        if on {
            self.in_use.store(true, Ordering::Relaxed);
            if let Err(e) = dev.set_mtu(rtnl, CM_MTU) {
                self.in_use.store(false, Ordering::Relaxed);
                return Err(e);
            }
        } else {
            self.in_use.store(false, Ordering::Relaxed);
            if dev.mtu() > ud_mtu {
                dev.set_mtu(rtnl, ud_mtu)?;
            }
            self.close_tx();
        }
        pr_info!(
            "{}: {} mode, MTU {}\n",
            dev.name(),
            if on { "connected" } else { "datagram" },
            dev.mtu()
        );
        Ok(())
    }

    /// Starts listening for connections (the interface comes up).
    pub(crate) fn start(self: &Arc<Self>) -> Result {
        let listen = Arc::new(
            CmListen {
                owner: self.clone(),
            },
            GFP_KERNEL,
        )?;
        let sh = &self.shared;
        let listener = Listener::new(&sh.device, wire::cm_service_id(sh.local_qpn), listen)?;
        *self.listener.lock() = Some(listener);
        sh.open.store(true, Ordering::Release);
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
        let closed = self.rx.close_idle(now_ms() - Self::stale_ms());
        bump(&self.shared.counters.cm_rx_stale, u64::from(closed));
        if closed > 0 {
            pr_info!(
                "{}: {} idle receive connection(s) closed\n",
                self.shared.name(),
                closed
            );
        }
        self.destroy_connections(false);
        if self.shared.open.load(Ordering::Acquire) {
            self.schedule_stale_check();
        }
    }

    /// Hands up the message of a receive completion `wc` if a receive connection's queue
    /// pair made it (from NAPI, for completions the UD queue pair does not own).
    pub(crate) fn receive(&self, wc: &mut WorkCompletion, napi: &Napi, tally: &mut Tally<'_>) {
        self.rx.receive(&self.shared, wc, napi, tally);
    }

    /// Stops listening and destroys every connection (the interface goes down).
    pub(crate) fn stop(&self) {
        self.shared.open.store(false, Ordering::Release);
        let listener = self.listener.lock().take();
        drop(listener);
        // A run already under way may queue itself once more: flush until idle.
        while self.stale_work.flush() {}
        // A round under way may queue it once more; a run then only schedules NAPI.
        self.tail_work.flush();
        self.rx.drain();
        self.destroy_connections(true);
        self.work.flush();
        // A run that was under way may have made a connection meanwhile.
        self.destroy_connections(true);
    }

    /// Waits for connected mode's work items (the interface is gone: once stopped, only
    /// the interface's own work items, flushed before, queue them).
    pub(crate) fn flush_work(&self) {
        while self.stale_work.flush() {}
        self.tail_work.flush();
        self.work.flush();
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

    /// Closes the transmit connections that sent nothing since `deadline` (ms, monotonic)
    /// and have nothing in flight; returns how many.
    pub(crate) fn close_idle_tx(&self, deadline: i64) -> usize {
        let mut closed = 0;
        for conn in self.tx.lock().values() {
            closed += usize::from(conn.close_if_idle(deadline));
        }
        closed
    }

    /// Requests connections with path MTU `mtu` from now on (RoCE: the port's changed);
    /// those made with another are closed, to be made again with it. Returns whether it
    /// changed.
    pub(crate) fn set_path_mtu(self: &Arc<Self>, mtu: Mtu) -> bool {
        if self.shared.path_mtu.swap(mtu.bytes(), Ordering::Relaxed) == mtu.bytes() {
            return false;
        }
        self.close_tx();
        true
    }

    /// Closes every transmit connection (the interface left connected mode).
    pub(crate) fn close_tx(self: &Arc<Self>) {
        let mut dropped = 0;
        for conn in self.tx.lock().values() {
            let mut s = conn.state.lock();
            s.phase = TxPhase::Dead;
            dropped += s.held.clear();
        }
        bump(&self.shared.counters.tx_dropped, dropped);
        self.clone().schedule_work();
    }

    /// Sends `skb` to `dest` over its transmit connection, made on first use.
    pub(crate) fn xmit(this: ArcBorrow<'_, Self>, skb: SkBuff, dest: &HwAddr, dev: &NetDevice) {
        let key = peer_key(dest);
        let tx = this.tx.lock();
        let too_big = match tx.get(&key) {
            // Sent under the table's lock (taken before a connection's, as everywhere), which
            // keeps the connection: no reference taken and dropped per packet.
            Some(conn) => {
                let too_big = conn.xmit(skb, dev);
                drop(tx);
                too_big
            }
            None => {
                drop(tx);
                match Self::add_tx(this, key, dest) {
                    Ok(conn) => conn.xmit(skb, dev),
                    Err(_) => {
                        bump(&this.shared.counters.tx_dropped, 1);
                        None
                    }
                }
            }
        };
        // More than the peer takes: the sender learns its MTU, as from a router.
        if let Some((mut skb, mtu)) = too_big {
            let _ = skb.report_too_big(mtu);
        }
    }

    fn add_tx(this: ArcBorrow<'_, Self>, key: PeerKey, dest: &HwAddr) -> Result<Arc<TxConnection>> {
        if !this.shared.open.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        let cm: Arc<Self> = this.into();
        let conn = TxConnection::new(cm.clone(), *dest)?;
        let node = RBTreeNode::new(key, conn.clone(), GFP_ATOMIC)?;
        let existing = {
            let mut tx = cm.tx.lock();
            // Checked under the table's lock, which `close_tx` takes after the switch to
            // datagram mode: a transmit that raced the switch makes no connection after it.
            if !cm.in_use() {
                return Err(ENODEV);
            }
            match tx.get(&key) {
                // Another CPU made it meanwhile: its packets and ours go through one.
                Some(other) => Some(other.clone()),
                None => {
                    drop(tx.insert(node));
                    cm.tx_count.fetch_add(1, Ordering::Release);
                    None
                }
            }
        };
        if let Some(other) = existing {
            return Ok(other);
        }
        cm.schedule_work();
        Ok(conn)
    }

    /// NAPI: polls the transmit connections whose CQs fired or that hold packets to send,
    /// and, when the tail work item asked or the queue is stopped (its wake must not wait),
    /// those whose CQs it left unarmed. Returns whether some need another round.
    ///
    /// Send completions are reaped in batches, as datagrams' are (`ipoib_ud.rs`): a
    /// connection whose CQ had completed sends is left unarmed while the interface is up
    /// and its queue running, and the tail work item has NAPI look again
    /// [`cq::SEND_REAP_MS`] later, so that sends going on take a round every few
    /// milliseconds rather than one each (TCP_RR's transactions one send round in all).
    /// Every round ends with each connection's CQ armed, or the tail work item queued.
    pub(crate) fn poll_tx(
        self: &Arc<Self>,
        dev: &NetDevice,
        up: bool,
        wcs: &mut [WorkCompletion],
        tally: &mut Tally<'_>,
    ) -> bool {
        let fired = self.shared.tx_events.take();
        let stopped = dev.queue_stopped();
        let reap_all = self.any_unarmed.load(Ordering::Relaxed)
            && (self.reap_due.swap(false, Ordering::AcqRel) || stopped);
        // A connection added after this look polls in the round its CQ's event brings.
        if self.tx_count.load(Ordering::Acquire) == 0 || !(fired || reap_all) {
            return false;
        }
        let lazy = up && !stopped;
        // Under the table's lock, inside which a connection's is taken (as everywhere): the
        // table keeps each connection while it is polled, with no reference taken for it.
        let mut again = false;
        let mut unarmed = false;
        for conn in self.tx.lock().values() {
            let polled = conn.poll(dev, wcs, tally, reap_all, lazy);
            again |= polled.again;
            unarmed |= polled.unarmed;
        }
        // Every connection was looked at: whether any CQ is left unarmed is known.
        self.any_unarmed.store(unarmed, Ordering::Relaxed);
        if unarmed {
            let _ = workqueue::system()
                .enqueue_delayed::<_, TAIL_WORK>(self.clone(), msecs_to_jiffies(cq::SEND_REAP_MS));
        }
        again
    }

    /// Lists every connection for debugfs (`<if>_cm`): transmit ones, then receive ones.
    pub(crate) fn show_connections(
        &self,
        out: &mut dyn core::fmt::Write,
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
        self.rx.show(out, now)
    }

    /// Transmit and receive connections in place.
    pub(crate) fn connection_counts(&self) -> (u64, u64) {
        let tx = self.tx_count.load(Ordering::Relaxed) as u64;
        let rx = self.rx.count();
        (tx, rx)
    }

    /// Sets up new transmit connections and destroys dead ones (the work item).
    fn maintain(&self) {
        while self.shared.open.load(Ordering::Acquire) {
            let next = self
                .tx
                .lock()
                .values()
                .find(|c| c.phase() == TxPhase::New)
                .cloned();
            let Some(conn) = next else { break };
            match conn.connect() {
                Ok(id) => self.keep_id(&conn, id),
                Err(e) => {
                    bump(&self.shared.counters.cm_tx_failed, 1);
                    pr_info!(
                        "{}: cannot connect to {} ({:?})\n",
                        self.shared.name(),
                        conn.dest,
                        e
                    );
                    drop(conn.unlink());
                }
            }
        }
        self.destroy_connections(false);
    }

    /// Keeps the identifier `id` of the connection `conn` just requested, for as long as
    /// the connection is listed. The connection may have left the table while its REQ went
    /// out (the interface went down, or it failed and was reaped): then the identifier goes
    /// at once, since nothing would destroy it later and it keeps the connection, and
    /// through it connected mode, alive. Both tables are checked under `tx_ids`, which
    /// [`Self::destroy_connections`] takes after taking a connection out of `tx`.
    fn keep_id(&self, conn: &Arc<TxConnection>, id: CmId<TxConnection>) {
        let key = peer_key(&conn.dest);
        let Ok(node) = RBTreeNode::new(key, id, GFP_KERNEL) else {
            // The identifier went with the failed allocation.
            drop(conn.unlink());
            return;
        };
        let (listed, unkept) = {
            let mut ids = self.tx_ids.lock();
            let listed = self
                .tx
                .lock()
                .get(&key)
                .is_some_and(|c| Arc::ptr_eq(c, conn));
            if listed {
                (true, ids.insert(node))
            } else {
                (false, Some(node))
            }
        };
        // Destroyed here, outside the lock: destroying an identifier waits for its handler.
        drop(unkept);
        if !listed {
            drop(conn.unlink());
        }
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
                let removed = key.and_then(|k| tx.remove(&k).map(|c| (k, c)));
                if removed.is_some() {
                    self.tx_count.fetch_sub(1, Ordering::Release);
                }
                removed
            };
            let Some((key, conn)) = victim else { break };
            let id = self.tx_ids.lock().remove(&key);
            // Destroying the identifier first waits for its handler and tells the peer.
            drop(id);
            drop(conn.unlink());
        }
        // Receive connections: once drained, or when draining takes too long.
        let undrained = self.rx.destroy(&self.shared, all);
        if undrained > 0 {
            pr_warn!(
                "{}: {} receive connection(s) destroyed before their queue pair drained\n",
                self.shared.name(),
                undrained
            );
        }
    }
}

impl_has_work! {
    impl HasWork<Self, MAINTAIN_WORK> for ConnectedMode { self.work }
}

impl WorkItem<MAINTAIN_WORK> for ConnectedMode {
    type Pointer = Arc<ConnectedMode>;

    fn run(this: Arc<ConnectedMode>) {
        this.maintain();
    }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, STALE_WORK> for ConnectedMode { self.stale_work }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, TAIL_WORK> for ConnectedMode { self.tail_work }
}

impl WorkItem<TAIL_WORK> for ConnectedMode {
    type Pointer = Arc<ConnectedMode>;

    fn run(this: Arc<ConnectedMode>) {
        this.reap_due.store(true, Ordering::Release);
        this.shared.napi.schedule();
    }
}

impl WorkItem<STALE_WORK> for ConnectedMode {
    type Pointer = Arc<ConnectedMode>;

    fn run(this: Arc<ConnectedMode>) {
        this.reap_stale();
    }
}

impl CmOwner for ConnectedMode {
    fn shared(&self) -> &CmShared {
        &self.shared
    }

    fn schedule_work(self: Arc<Self>) {
        let _ = workqueue::system().enqueue::<_, MAINTAIN_WORK>(self);
    }
}

impl RxOwner for ConnectedMode {
    fn rx(&self) -> &RxTable {
        &self.rx
    }
}
