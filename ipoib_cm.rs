// SPDX-License-Identifier: GPL-2.0

//! Connected mode (RFC 4755): reliable connections to peers that offer them (flag 0x80 in
//! their address), set up through the IB connection manager.
//!
//! A connection carries data one way. We open a transmit connection to a peer on the first
//! packet for it; peers open receive connections to us through our listener. All receive
//! connections take their buffers from one shared receive queue and complete on the
//! interface's receive CQ; each transmit connection has its own send CQ. Connections are
//! made and destroyed in process context (the port's work item); NAPI only posts, polls
//! and hands packets up.

use crate::{
    cq::TxCqEvents,
    params, rx,
    send_buffers::SendBuffers,
    stats::{bump, Counters},
    wire::{self, CmPrivateData, HwAddr, CM_BUF_SIZE, CM_MTU, HWADDR_LEN},
};
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use kernel::{
    c_str,
    net::{
        dev::NetDevice,
        napi::{Napi, NapiHandle},
        skb::{PacketType, SkBuff},
    },
    new_mutex, new_spinlock_bh,
    page::PAGE_SIZE,
    prelude::*,
    rbtree::{RBTree, RBTreeNode, RBTreeNodeReservation},
    rdma::{
        cm::{
            self, CmId, CmIdRef, Event, GidAttr, Handler, ListenHandler, Listener, PathRecord,
            QpState, ReqParams, Request,
        },
        cq::{CompletionQueue, QpId, WcStatus, WorkCompletion},
        device::{Device, DeviceRef, Gid, Mtu},
        dma::{DmaPage, ScatterBuffer},
        pd::ProtectionDomain,
        qp::{QpCaps, QpType, QueuePair},
        srq::SharedReceiveQueue,
    },
    sync::{Arc, ArcBorrow, Mutex, SpinLockBh},
    time::{msecs_to_jiffies, Ktime},
    workqueue::{
        self, impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, Work,
        WorkItem,
    },
};

const OWNER: &CStr = c_str!("ib_ipoib");
/// Receive buffers in the shared receive queue, for all receive connections together.
pub(crate) const SRQ_SIZE: u32 = 64;
/// Pages of a receive buffer after its head: with the head, `CM_BUF_SIZE` bytes.
const RX_PAGES: usize = CM_BUF_SIZE as usize / PAGE_SIZE;
/// The head of a receive buffer: what is left of `CM_BUF_SIZE` after whole pages (4084
/// bytes with 4 KiB pages, as in the C driver). It becomes the skb's linear part.
const RX_HEAD: usize = CM_BUF_SIZE as usize % PAGE_SIZE;
/// Packets a transmit connection holds while it is being set up.
const HELD_MAX: usize = 32;
/// The GID table entry our connections start from, as for datagram mode.
const GID_INDEX: u32 = 0;
/// Completions handled per CQ poll call.
const POLL_BATCH: usize = 16;

/// Connections are keyed by the peer's address without its flags byte.
type PeerKey = [u8; HWADDR_LEN];

fn peer_key(addr: &HwAddr) -> PeerKey {
    let mut key = *addr.as_bytes();
    key[0] = 0;
    key
}

/// Packets waiting, in order, for a connection to be established.
struct Held {
    slots: KVec<Option<SkBuff>>,
    head: usize,
    len: usize,
}

impl Held {
    fn new() -> Result<Self> {
        let mut slots = KVec::with_capacity(HELD_MAX, GFP_ATOMIC)?;
        for _ in 0..HELD_MAX {
            slots.push(None, GFP_ATOMIC)?;
        }
        Ok(Self {
            slots,
            head: 0,
            len: 0,
        })
    }

    /// Appends `skb`; gives it back when full.
    fn push(&mut self, skb: SkBuff) -> core::result::Result<(), SkBuff> {
        if self.len == HELD_MAX {
            return Err(skb);
        }
        self.slots[(self.head + self.len) % HELD_MAX] = Some(skb);
        self.len += 1;
        Ok(())
    }

    /// The oldest packet.
    fn pop(&mut self) -> Option<SkBuff> {
        let skb = self.slots[self.head].take()?;
        self.head = (self.head + 1) % HELD_MAX;
        self.len -= 1;
        Some(skb)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Drops every packet; returns how many went.
    fn clear(&mut self) -> u64 {
        let n = self.len as u64;
        while self.pop().is_some() {}
        n
    }
}

/// Where a transmit connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TxPhase {
    /// Made by the first packet; the work item sets it up.
    New,
    /// REQ sent, waiting for the REP.
    Connecting,
    /// Established: packets go out.
    Live,
    /// Failed or closed: the work item destroys it; the next packet makes a new one.
    Dead,
}

/// A transmit connection's queue pair with its own send CQ.
///
/// Dropped in process context only: NAPI reaches it under the connection's state lock and
/// never holds a reference of its own.
struct TxLink {
    qp: Pin<KBox<QueuePair>>,
    cq: Arc<CompletionQueue<TxCqEvents>>,
    buffers: Arc<SendBuffers>,
}

impl Drop for TxLink {
    fn drop(&mut self) {
        // Sends still in flight lose their buffers with the queue pair: replace them, or the
        // interface would run out.
        let lost = self.qp.sends_in_flight();
        if lost > 0 {
            if let Err(e) = self.buffers.replace_lost(lost) {
                pr_warn!("{} send buffers not replaced ({:?})\n", lost, e);
            }
            self.cq.handler().kick();
        }
    }
}

struct TxState {
    phase: TxPhase,
    held: Held,
    /// Present from set-up until the work item destroys the connection. NAPI reaches it
    /// only under this lock and never clones it, so the last reference goes in process
    /// context.
    link: Option<Arc<TxLink>>,
}

impl TxState {
    /// Whether NAPI has work here: completions, or held packets of an established
    /// connection (held back when the send buffers ran out).
    fn needs_poll(&self) -> bool {
        self.link.as_ref().is_some_and(|l| l.cq.handler().fired())
            || (self.phase == TxPhase::Live && !self.held.is_empty())
    }
}

/// A connection we send over, to one peer.
#[pin_data]
pub(crate) struct TxConnection {
    dest: HwAddr,
    port: Arc<CmPort>,
    #[pin]
    state: SpinLockBh<TxState>,
    /// The largest payload the peer receives, from its REP.
    mtu: AtomicU32,
}

impl TxConnection {
    fn new(port: Arc<CmPort>, dest: HwAddr) -> Result<Arc<Self>> {
        let held = Held::new()?;
        Arc::pin_init(
            pin_init!(Self {
                dest,
                port,
                state <- new_spinlock_bh!(
                    TxState {
                        phase: TxPhase::New,
                        held,
                        link: None,
                    },
                    "TxConnection::state"
                ),
                mtu: AtomicU32::new(0),
            }),
            GFP_ATOMIC,
        )
    }

    fn phase(&self) -> TxPhase {
        self.state.lock().phase
    }

    /// Sends `skb` (pseudo header first) now if established and nothing waits before it,
    /// else holds it for the connection.
    fn xmit(&self, skb: SkBuff, dev: &NetDevice) {
        let c = &self.port.counters;
        let mut s = self.state.lock();
        match s.phase {
            TxPhase::Live if s.held.is_empty() => self.post(&s, skb, dev),
            TxPhase::New | TxPhase::Connecting | TxPhase::Live => {
                if s.held.push(skb).is_err() {
                    bump(&c.tx_dropped, 1);
                }
                if s.phase == TxPhase::Live {
                    // Packets wait behind others: have NAPI send them in order.
                    if let Some(link) = s.link.as_ref() {
                        link.cq.handler().kick();
                    }
                }
            }
            TxPhase::Dead => bump(&c.tx_dropped, 1),
        }
    }

    /// Posts `skb` on the established connection; called with the state lock held, which
    /// keeps packets in order.
    fn post(&self, s: &TxState, mut skb: SkBuff, dev: &NetDevice) {
        let c = &self.port.counters;
        let Some(link) = s.link.as_ref() else {
            bump(&c.tx_dropped, 1);
            return;
        };
        let Some(len) = skb.len().checked_sub(HWADDR_LEN as u32) else {
            bump(&c.tx_dropped, 1);
            return;
        };
        let mtu = self.mtu.load(Ordering::Relaxed);
        if len > mtu + wire::ENCAP_HEADER_LEN as u32 || len as usize > self.port.buffers.size() {
            // More than the peer takes: the stack learns its MTU, as from a router.
            let _ = skb.report_too_big(mtu);
            bump(&c.tx_dropped, 1);
            return;
        }
        let Some(mut buf) = self.port.buffers.take(dev) else {
            bump(&c.tx_dropped, 1);
            return;
        };
        let n = len as usize;
        if skb
            .copy_bits(HWADDR_LEN as u32, &mut buf.as_mut_slice()[..n])
            .is_err()
        {
            self.port.buffers.give(buf);
            bump(&c.tx_dropped, 1);
            return;
        }
        skb.consume();
        match link.qp.post_send(buf, n) {
            Ok(()) => {
                bump(&c.tx_packets, 1);
                bump(&c.tx_bytes, u64::from(len));
            }
            Err((_, buf)) => {
                self.port.buffers.give(buf);
                bump(&c.tx_errors, 1);
            }
        }
    }

    /// Sets the connection up (process context): its CQ and RC queue pair, then the REQ.
    fn connect(self: &Arc<Self>) -> Result<CmId<TxConnection>> {
        let port = &self.port;
        let events = Arc::new(TxCqEvents::new(port.napi.clone()), GFP_KERNEL)?;
        let ring = crate::ipoib_ud::SEND_RING;
        let cq = CompletionQueue::new(&port.device, ring + 1, 0, events, OWNER)?;
        let caps = QpCaps {
            max_send_wr: ring,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 0,
        };
        let qp = QueuePair::new(
            QpType::Rc,
            &port.pd,
            cq.clone(),
            cq.clone(),
            Some(port.srq.clone()),
            caps,
            OWNER,
        )?;
        qp.init_rc(port.port, 0)?;
        let sgid = GidAttr::get(&port.device, port.port, GID_INDEX)?;
        let path =
            PathRecord::roce_v2_link_local(&sgid.gid(), &Gid(self.dest.gid().0), port.path_mtu)?;
        let link = Arc::new(
            TxLink {
                qp,
                cq,
                buffers: port.buffers.clone(),
            },
            GFP_KERNEL,
        )?;
        let id = CmId::new(&port.device, self.clone())?;
        {
            // The REP may come back before `send_req` returns: be ready for it.
            let mut s = self.state.lock();
            if s.phase != TxPhase::New {
                return Err(EAGAIN);
            }
            s.phase = TxPhase::Connecting;
            s.link = Some(link.clone());
        }
        let private = port.private_data();
        id.id().send_req(
            &link.qp,
            &ReqParams {
                path: &path,
                sgid_attr: &sgid,
                service_id: wire::cm_service_id(self.dest.qpn()),
                private_data: &private,
                srq: true,
                responder_resources: 4,
                // The C driver asks for no retries, which suits lossless InfiniBand; RoCE
                // may drop packets (rxe does under load), so retry as often as allowed.
                // Only our own queue pair is affected: peers see no difference.
                retry_count: 7,
                rnr_retry_count: 7,
                max_cm_retries: 15,
            },
        )?;
        Ok(id)
    }

    /// The peer accepted: move the queue pair to RTS, confirm, and let NAPI send what waits.
    fn established(&self, id: &CmIdRef, private_data: &[u8]) -> Result {
        let peer = CmPrivateData::parse(private_data).map_err(|_| EINVAL)?;
        let mtu = peer.payload_mtu().ok_or(EINVAL)?.min(CM_MTU);
        let link = self.state.lock().link.clone().ok_or(EAGAIN)?;
        id.modify_qp(&link.qp, QpState::Rtr)?;
        id.modify_qp(&link.qp, QpState::Rts)?;
        self.mtu.store(mtu, Ordering::Relaxed);
        id.send_rtu()?;
        {
            let mut s = self.state.lock();
            if s.phase == TxPhase::Connecting {
                s.phase = TxPhase::Live;
            }
        }
        link.cq.handler().kick();
        Ok(())
    }

    /// Takes the queue pair out (process context), so that it is destroyed here.
    fn unlink(&self) -> Option<Arc<TxLink>> {
        let mut s = self.state.lock();
        s.phase = TxPhase::Dead;
        let dropped = s.held.clear();
        bump(&self.port.counters.tx_dropped, dropped);
        s.link.take()
    }

    /// Marks the connection dead and has the work item destroy it.
    fn fail(&self) {
        let dropped = {
            let mut s = self.state.lock();
            s.phase = TxPhase::Dead;
            s.held.clear()
        };
        bump(&self.port.counters.tx_dropped, dropped);
        self.port.schedule_work();
    }

    /// NAPI: reaps send completions and sends held packets once established. Returns whether
    /// the CQ needs another round.
    fn poll(&self, dev: &NetDevice) -> bool {
        let mut s = self.state.lock();
        let mut failed = false;
        let mut again = false;
        if let Some(link) = s.link.as_ref() {
            if link.cq.handler().take() {
                loop {
                    let mut wcs = [const { WorkCompletion::new() }; POLL_BATCH];
                    let n = link.cq.poll(&mut wcs).unwrap_or(0);
                    for wc in &wcs[..n] {
                        if let Some(buf) = link.qp.complete_send(wc) {
                            self.port.buffers.give(buf);
                        }
                        match wc.status() {
                            WcStatus::Success | WcStatus::Flushed => {}
                            WcStatus::Error(status) => {
                                bump(&self.port.counters.tx_errors, 1);
                                if !failed {
                                    pr_info!(
                                        "{} port {}: connection to {} failed (send status {})\n",
                                        self.port.name(),
                                        self.port.port,
                                        self.dest,
                                        status
                                    );
                                }
                                failed = true;
                            }
                        }
                    }
                    if n < POLL_BATCH {
                        break;
                    }
                }
                again = link.cq.request_notify().unwrap_or(true);
                if again {
                    link.cq.handler().kick();
                }
            }
        }
        while s.phase == TxPhase::Live && !s.held.is_empty() && self.port.buffers.any_idle() {
            if let Some(skb) = s.held.pop() {
                self.post(&s, skb, dev);
            }
        }
        drop(s);
        if failed {
            self.fail();
        }
        again
    }
}

impl Handler for TxConnection {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::RepReceived { private_data, .. } => {
                if let Err(e) = self.established(id, private_data) {
                    pr_info!(
                        "{} port {}: connection to {} refused ({:?})\n",
                        self.port.name(),
                        self.port.port,
                        self.dest,
                        e
                    );
                    let _ = id.send_rej(cm::REJ_CONSUMER_DEFINED);
                    self.fail();
                }
            }
            Event::DreqReceived => {
                let _ = id.send_drep();
                self.fail();
            }
            Event::RejReceived { .. }
            | Event::Timeout
            | Event::DrepReceived
            | Event::TimewaitExit => self.fail(),
            Event::RtuReceived | Event::Other(_) => {}
        }
    }
}

/// A connection a peer opened to us: its queue pair receives from the shared receive queue.
pub(crate) struct RxConnection {
    qp: Pin<KBox<QueuePair>>,
    port: Arc<CmPort>,
    /// Closed or failed: the work item destroys it.
    dead: AtomicBool,
}

impl RxConnection {
    fn close(&self) {
        self.dead.store(true, Ordering::Release);
        self.port.schedule_work();
    }
}

impl Handler for RxConnection {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::DreqReceived => {
                let _ = id.send_drep();
                // Buffers this queue pair took from the SRQ come back flushed.
                let _ = self.qp.set_error();
                self.close();
            }
            Event::RejReceived { .. }
            | Event::Timeout
            | Event::DrepReceived
            | Event::TimewaitExit => {
                let _ = self.qp.set_error();
                self.close();
            }
            Event::RtuReceived | Event::RepReceived { .. } | Event::Other(_) => {}
        }
    }
}

/// Takes connection requests for the port's service.
struct CmListen {
    port: Arc<CmPort>,
}

impl ListenHandler for CmListen {
    fn request(&self, req: Request<'_>) -> Result {
        let port = &self.port;
        if !port.open.load(Ordering::Acquire) {
            return Err(ENODEV);
        }
        // The peer's data is only checked: it announces its UD QPN and receive size, which
        // matter for the connection it opens toward us, not for this one.
        CmPrivateData::parse(req.private_data()).map_err(|_| EINVAL)?;
        let caps = QpCaps {
            // Nothing is sent, but a send queue must exist.
            max_send_wr: 1,
            max_recv_wr: 0,
            max_send_sge: 1,
            max_recv_sge: 0,
        };
        let qp = QueuePair::new(
            QpType::Rc,
            &port.pd,
            port.recv_cq.clone(),
            port.recv_cq.clone(),
            Some(port.srq.clone()),
            caps,
            OWNER,
        )?;
        qp.init_rc(port.port, 0)?;
        let psn = cm::random_psn();
        req.id().modify_qp_for_rep(&qp, psn)?;
        req.id().modify_qp(&qp, QpState::Rts)?;
        let conn = Arc::new(
            RxConnection {
                qp,
                port: port.clone(),
                dead: AtomicBool::new(false),
            },
            GFP_KERNEL,
        )?;
        let key = port.rx_serial.fetch_add(1, Ordering::Relaxed);
        let seen = RBTreeNode::new(conn.qp.id(), now_ms(), GFP_KERNEL)?;
        let old = port.rx_seen.lock().insert(seen);
        drop(old);
        let mut rx = port.rx.lock();
        // Room first: once accepted, the identifier must be kept.
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let id = req.accept(conn.clone())?;
        let private = port.private_data();
        // The requester retries forever when our shared receive queue runs dry, rather than
        // failing the connection (the C driver passes the REQ's count, 0, on).
        if let Err(e) = id.id().send_rep(&conn.qp, psn, &private, true, 7) {
            pr_info!(
                "{} port {}: reply to a connection request failed ({:?})\n",
                port.name(),
                port.port,
                e
            );
            conn.dead.store(true, Ordering::Release);
        }
        let old = rx.insert(node.into_node(key, id));
        drop(rx);
        drop(old);
        if conn.dead.load(Ordering::Acquire) {
            port.schedule_work();
        }
        Ok(())
    }
}

/// Connected mode on one interface.
#[pin_data]
pub(crate) struct CmPort {
    device: DeviceRef,
    port: u32,
    /// Our UD QPN, announced in REQs and REPs.
    local_qpn: u32,
    /// The path MTU of connections (the port's active MTU).
    path_mtu: Mtu,
    pd: Arc<ProtectionDomain>,
    srq: Arc<SharedReceiveQueue<ScatterBuffer>>,
    /// The interface's receive CQ, shared with the UD queue pair.
    recv_cq: Arc<CompletionQueue<crate::cq::CqEvents>>,
    buffers: Arc<SendBuffers>,
    counters: Arc<Counters>,
    napi: NapiHandle,
    /// Whether connections are made and accepted (the interface is up).
    open: AtomicBool,
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
    rx: Mutex<RBTree<u64, CmId<RxConnection>>>,
    rx_serial: AtomicU64,
    /// When each receive connection last delivered a message (ms, monotonic), by queue
    /// pair: NAPI only knows a completion's queue pair.
    #[pin]
    rx_seen: SpinLockBh<RBTree<QpId, i64>>,
    /// Sets connections up and destroys them.
    #[pin]
    work: Work<CmPort>,
    /// Closes idle receive connections, periodically while the interface is up.
    #[pin]
    stale_work: DelayedWork<CmPort, 1>,
}

/// Monotonic time in milliseconds.
fn now_ms() -> i64 {
    Ktime::ktime_get().to_ms()
}

impl CmPort {
    /// Prepares connected mode for an interface: the shared receive queue, filled.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        device: &Device,
        port: u32,
        local_qpn: u32,
        path_mtu: Mtu,
        pd: &Arc<ProtectionDomain>,
        recv_cq: Arc<CompletionQueue<crate::cq::CqEvents>>,
        buffers: Arc<SendBuffers>,
        counters: Arc<Counters>,
        napi: &NapiHandle,
    ) -> Result<Arc<Self>> {
        let srq = SharedReceiveQueue::new(pd, SRQ_SIZE, 1 + RX_PAGES as u32)?;
        for _ in 0..SRQ_SIZE {
            let buf = ScatterBuffer::new(device, RX_HEAD, RX_PAGES, GFP_KERNEL)?;
            srq.post_recv(buf).map_err(|(e, _)| e)?;
        }
        let device = device.get_ref()?;
        Arc::pin_init(
            pin_init!(Self {
                device,
                port,
                local_qpn,
                path_mtu,
                pd: pd.clone(),
                srq,
                recv_cq,
                buffers,
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

    fn name(&self) -> &CStr {
        self.device.name()
    }

    fn private_data(&self) -> [u8; wire::CM_PRIVATE_DATA_LEN] {
        CmPrivateData {
            qpn: self.local_qpn,
            mtu: CM_BUF_SIZE,
        }
        .to_bytes()
    }

    /// Has the work item run; one already queued does the job.
    fn schedule_work(self: &Arc<Self>) {
        let _ = workqueue::system().enqueue::<_, 0>(self.clone());
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
        let _ = workqueue::system().enqueue_delayed::<_, 1>(self.clone(), msecs_to_jiffies(period));
    }

    /// Closes the receive connections idle for longer than the stale time (the delayed work
    /// item), then checks again later while the interface is up.
    fn reap_stale(self: &Arc<Self>) {
        let deadline = now_ms() - Self::stale_ms();
        let mut closed = 0u32;
        {
            let rx = self.rx.lock();
            let seen = self.rx_seen.lock();
            for id in rx.values() {
                let conn = id.handler();
                let idle = seen.get(&conn.qp.id()).map_or(true, |&t| t < deadline);
                if idle && !conn.dead.swap(true, Ordering::AcqRel) {
                    let _ = conn.qp.set_error();
                    closed += 1;
                }
            }
        }
        if closed > 0 {
            pr_info!(
                "{} port {}: {} idle receive connection(s) closed\n",
                self.name(),
                self.port,
                closed
            );
            self.destroy_connections(false);
        }
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
        self.destroy_connections(true);
        self.work.flush();
        // A run that was under way may have made a connection meanwhile.
        self.destroy_connections(true);
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

    /// Takes back the shared-receive-queue buffer `wc` completes, if it is one.
    pub(crate) fn complete_recv(&self, wc: &WorkCompletion) -> Option<ScatterBuffer> {
        self.srq.complete_recv(wc)
    }

    /// Hands up a message that filled `len` bytes of `buf`: the head is copied into the
    /// skb, the pages the message reached go up as fragments and fresh pages take their
    /// place (no copy of the bulk of a large message).
    fn deliver(&self, buf: &mut ScatterBuffer, len: usize, napi: &Napi) {
        let (head, pages) = buf.parts_mut();
        let Some(head) = head.get(..len.min(RX_HEAD)) else {
            bump(&self.counters.rx_errors, 1);
            return;
        };
        let device = &self.device;
        rx::deliver_with(head, PacketType::Host, napi, &self.counters, |skb| {
            let mut left = len.saturating_sub(RX_HEAD);
            let mut index = 0;
            while left > 0 {
                // Without a fresh page the old one stays and the packet is dropped.
                let fresh = DmaPage::new(device, GFP_ATOMIC)?;
                let page = pages.replace(index, fresh).ok_or(EINVAL)?;
                let n = left.min(PAGE_SIZE);
                skb.add_page(page, 0, n)?;
                left -= n;
                index += 1;
            }
            Ok(())
        });
    }

    /// Hands a message received on a connection up and reposts its buffer.
    pub(crate) fn receive(&self, wc: &WorkCompletion, mut buf: ScatterBuffer, napi: &Napi) {
        let c = &self.counters;
        if let WcStatus::Success = wc.status() {
            if let Some(t) = self.rx_seen.lock().get_mut(&wc.qp_id()) {
                *t = now_ms();
            }
        }
        match wc.status() {
            WcStatus::Success => self.deliver(&mut buf, wc.byte_len() as usize, napi),
            // A receive connection closed: the buffers it had taken come back.
            WcStatus::Flushed => {}
            WcStatus::Error(_) => bump(&c.rx_errors, 1),
        }
        if self.srq.post_recv(buf).is_err() {
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
        loop {
            let victim = {
                let mut rx = self.rx.lock();
                let key = rx
                    .iter()
                    .find(|(_, id)| all || id.handler().dead.load(Ordering::Acquire))
                    .map(|(k, _)| *k);
                key.and_then(|k| rx.remove(&k))
            };
            let Some(id) = victim else { break };
            self.rx_seen.lock().remove(&id.handler().qp.id());
            drop(id);
        }
    }
}

impl_has_work! {
    impl HasWork<Self> for CmPort { self.work }
}

impl WorkItem for CmPort {
    type Pointer = Arc<CmPort>;

    fn run(this: Arc<CmPort>) {
        this.maintain();
    }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, 1> for CmPort { self.stale_work }
}

impl WorkItem<1> for CmPort {
    type Pointer = Arc<CmPort>;

    fn run(this: Arc<CmPort>) {
        this.reap_stale();
    }
}
