// SPDX-License-Identifier: GPL-2.0

//! Connected mode, transmit side: the connection we open to a peer on the first packet for
//! it, set up by connected mode's work item (own send CQ, RC queue pair on the shared
//! receive queue, REQ), packets held until the REP and then sent in order from NAPI, torn
//! down on any failure so that the next packet starts over. A connection reaches connected
//! mode, which owns it, through [`CmOwner`].

use crate::{
    cm_shared::{CmOwner, CmShared},
    cq::CqEvents,
    send_credits::SendCredits,
    stats::{bump, now_ms, Tally},
    wire::{self, CmPrivateData, HwAddr, CM_MTU, HWADDR_LEN},
};
use core::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, Ordering};
use kernel::{
    net::{dev::NetDevice, skb::SkBuff},
    new_spinlock_bh,
    prelude::*,
    rdma::{
        cm::{self, CmId, CmIdRef, Event, Handler, QpState, ReqParams},
        cq::{CompletionQueue, WcStatus, WorkCompletion},
        qp::QueuePair,
    },
    sync::{Arc, SpinLockBh},
};

/// Packets a transmit connection holds while it is being set up.
const HELD_MAX: usize = 32;

/// Packets waiting, in order, for a connection to be established.
pub(crate) struct Held {
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
    pub(crate) fn clear(&mut self) -> u64 {
        let n = self.len as u64;
        while self.pop().is_some() {}
        n
    }
}

/// Where a transmit connection is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TxPhase {
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
pub(crate) struct TxLink {
    qp: Pin<KBox<QueuePair>>,
    cq: Arc<CompletionQueue<CqEvents>>,
    credits: Arc<SendCredits>,
    /// The destination LID of the connection's path (InfiniBand), shown in debugfs: a
    /// connection set up after the fabric changed uses the path the SA gives now.
    dlid: Option<u16>,
    /// NAPI left the CQ unarmed after it found completed sends there (see
    /// `ConnectedMode::poll_tx`): the sends completed since show only when it is polled.
    unarmed: AtomicBool,
}

impl Drop for TxLink {
    fn drop(&mut self) {
        // Sends still in flight go with the queue pair: their credits come back here, and
        // NAPI wakes the queue if it waited for them.
        let lost = self.qp.sends_in_flight();
        if lost > 0 {
            self.credits.give(lost as u32);
            self.cq.handler().kick();
        }
    }
}

pub(crate) struct TxState {
    pub(crate) phase: TxPhase,
    pub(crate) held: Held,
    /// Present from set-up until the work item destroys the connection. NAPI reaches it
    /// only under this lock and never clones it, so the last reference goes in process
    /// context.
    pub(crate) link: Option<Arc<TxLink>>,
}

/// A connection we send over, to one peer.
#[pin_data]
pub(crate) struct TxConnection {
    pub(crate) dest: HwAddr,
    cm: Arc<dyn CmOwner>,
    #[pin]
    pub(crate) state: SpinLockBh<TxState>,
    /// The largest payload the peer receives, from its REP.
    mtu: AtomicU32,
    /// Messages posted, and sends completed (any status).
    packets: AtomicU64,
    done: AtomicU64,
    /// When a send last completed or was posted with none in flight (ms, monotonic): while
    /// sends are in flight, the connection has made no progress since then. For the stall
    /// watchdog and debugfs.
    last_ms: AtomicI64,
}

impl TxConnection {
    /// One line for debugfs (`<if>_cm`): peer, state, queue pair, MTU, traffic.
    pub(crate) fn show(&self, out: &mut dyn core::fmt::Write, now: i64) -> core::fmt::Result {
        let (phase, qpn, dlid) = {
            let s = self.state.lock();
            let link = s.link.as_ref();
            (
                s.phase,
                link.map(|l| l.qp.qp_num()),
                link.and_then(|l| l.dlid),
            )
        };
        write!(out, "tx peer {} state {:?} qpn ", self.dest, phase)?;
        match qpn {
            Some(qpn) => write!(out, "0x{qpn:06x}")?,
            None => out.write_str("-")?,
        }
        write!(
            out,
            " mtu {} packets {} idle {} ms",
            self.mtu.load(Ordering::Relaxed),
            self.packets.load(Ordering::Relaxed),
            now - self.last_ms.load(Ordering::Relaxed)
        )?;
        match dlid {
            Some(dlid) => writeln!(out, " dlid 0x{dlid:04x}"),
            None => writeln!(out),
        }
    }

    pub(crate) fn new(cm: Arc<dyn CmOwner>, dest: HwAddr) -> Result<Arc<Self>> {
        let held = Held::new()?;
        Arc::pin_init(
            pin_init!(Self {
                dest,
                cm,
                state <- new_spinlock_bh!(
                    TxState {
                        phase: TxPhase::New,
                        held,
                        link: None,
                    },
                    "TxConnection::state"
                ),
                mtu: AtomicU32::new(0),
                packets: AtomicU64::new(0),
                done: AtomicU64::new(0),
                last_ms: AtomicI64::new(now_ms()),
            }),
            GFP_ATOMIC,
        )
    }

    /// What the connection shares with the others of its interface.
    fn shared(&self) -> &CmShared {
        self.cm.shared()
    }

    pub(crate) fn phase(&self) -> TxPhase {
        self.state.lock().phase
    }

    /// Sends `skb` (pseudo header first) now if established and nothing waits before it,
    /// else holds it for the connection. A packet too big for the peer comes back with the
    /// peer's MTU, for the caller to report once it holds no lock.
    #[must_use]
    pub(crate) fn xmit(&self, skb: SkBuff, dev: &NetDevice) -> Option<(SkBuff, u32)> {
        let c = &self.shared().counters;
        let mut s = self.state.lock();
        match s.phase {
            TxPhase::Live if s.held.is_empty() => return self.post(&s, skb, dev),
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
        None
    }

    /// Posts `skb` on the established connection; called with the state lock held, which
    /// keeps packets in order. A packet over the peer's MTU is dropped, counted, and given
    /// back with that MTU: from the transmit path the caller tells the sender, once it
    /// holds no lock (the ICMP may leave through another interface of this driver, whose
    /// transmit path takes locks of the same classes).
    fn post(&self, s: &TxState, mut skb: SkBuff, dev: &NetDevice) -> Option<(SkBuff, u32)> {
        // Once: each call is a virtual one.
        let shared = self.shared();
        let c = &shared.counters;
        let Some(link) = s.link.as_ref() else {
            bump(&c.tx_dropped, 1);
            return None;
        };
        let Some(len) = skb.len().checked_sub(HWADDR_LEN as u32) else {
            bump(&c.tx_dropped, 1);
            return None;
        };
        let mtu = self.mtu.load(Ordering::Relaxed);
        if len > mtu + wire::ENCAP_HEADER_LEN as u32 {
            bump(&c.tx_dropped, 1);
            return Some((skb, mtu));
        }
        match shared.credits.take(dev) {
            None => {
                bump(&c.tx_dropped, 1);
                return None;
            }
            // The queue stopped: NAPI reaps the unarmed CQs, whose completions return credits,
            // and wakes it.
            Some(0) => link.cq.handler().kick(),
            Some(_) => {}
        }
        // The packet stays ours until its send completes; its socket need not wait.
        skb.orphan();
        // Under the state lock, as the completions are counted: nothing in flight before
        // this send means the connection was idle, not stalled.
        let idle = self.packets.load(Ordering::Relaxed) == self.done.load(Ordering::Relaxed);
        crate::params::ipoib_dbg_cm_data!(
            "{}: sending message, length {} on QPN 0x{:06x} to {}\n",
            shared.name(),
            len,
            link.qp.qp_num(),
            self.dest
        );
        match link.qp.post_skb(skb, HWADDR_LEN as u32) {
            Ok(()) => {
                self.packets.fetch_add(1, Ordering::Relaxed);
                if idle {
                    self.last_ms.store(now_ms(), Ordering::Relaxed);
                }
            }
            Err(_) => {
                shared.credits.give(1);
                bump(&c.tx_errors, 1);
            }
        }
        None
    }

    /// Sets the connection up (process context): its CQ and RC queue pair, then the REQ.
    pub(crate) fn connect(self: &Arc<Self>) -> Result<CmId<TxConnection>> {
        let port = self.shared();
        let events = Arc::new(
            CqEvents::in_group(port.napi.clone(), port.tx_events.clone()),
            GFP_KERNEL,
        )?;
        let ring = port.send_ring;
        let cq = CompletionQueue::new(&port.device, ring + 1, 0, events, crate::OWNER)?;
        let qp = port.new_rc_qp(cq.clone(), ring, None, 0)?;
        let (path, sgid) =
            port.resolver
                .connection_path(&port.device, &self.dest.gid(), port.path_mtu())?;
        let link = Arc::new(
            TxLink {
                qp,
                cq,
                credits: port.credits.clone(),
                dlid: port.resolver.has_sa().then(|| path.dlid()),
                unarmed: AtomicBool::new(false),
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
        let (retry_count, rnr_retry_count) = port.req_retries();
        id.id().send_req(
            &link.qp,
            &ReqParams {
                path: &path,
                sgid_attr: &sgid,
                service_id: wire::cm_service_id(self.dest.qpn()),
                private_data: &private,
                // Whether our receive side shares a queue: with `cm_srq=0` it does not.
                srq: port.srq.is_some(),
                responder_resources: 4,
                retry_count,
                rnr_retry_count,
                max_cm_retries: 15,
                cm_response_timeout: 20,
                // Where C starts: at the queue pair number.
                starting_psn: link.qp.qp_num(),
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
        bump(&self.shared().counters.cm_tx_established, 1);
        crate::params::ipoib_dbg!(
            "{}: connected to {} (QPN 0x{:06x}, MTU {})\n",
            self.shared().name(),
            self.dest,
            link.qp.qp_num(),
            mtu
        );
        link.cq.handler().kick();
        Ok(())
    }

    /// Fails the connection if sends are in flight but none completed since `deadline`
    /// (ms, monotonic), nor was the oldest of them posted after it: the peer went silent.
    /// Returns whether it did.
    pub(crate) fn fail_if_stalled(&self, deadline: i64) -> bool {
        let in_flight = {
            let s = self.state.lock();
            match (&s.link, s.phase) {
                (Some(link), TxPhase::Live) => link.qp.sends_in_flight(),
                _ => 0,
            }
        };
        if in_flight == 0 || self.last_ms.load(Ordering::Relaxed) >= deadline {
            return false;
        }
        pr_info!(
            "{}: connection to {} stalled with {} sends in flight; closed\n",
            self.shared().name(),
            self.dest,
            in_flight
        );
        bump(&self.shared().counters.cm_tx_stalled, 1);
        self.fail();
        true
    }

    /// Closes the connection if it is established with nothing in flight or waiting, and
    /// sent nothing since `deadline` (ms, monotonic): its destination went idle, and the C
    /// driver frees a connection with its aged neighbour. The next packet to the
    /// destination makes a new one. Returns whether it did.
    pub(crate) fn close_if_idle(&self, deadline: i64) -> bool {
        {
            let mut s = self.state.lock();
            let idle = match (&s.link, s.phase) {
                (Some(link), TxPhase::Live) => link.qp.sends_in_flight() == 0 && s.held.is_empty(),
                _ => false,
            };
            // Under the state lock, which sends are posted under: none can slip in.
            if !idle || self.last_ms.load(Ordering::Relaxed) >= deadline {
                return false;
            }
            s.phase = TxPhase::Dead;
        }
        crate::params::ipoib_dbg!(
            "{}: connection to {} idle; closed\n",
            self.shared().name(),
            self.dest
        );
        bump(&self.shared().counters.cm_tx_idle_closed, 1);
        self.cm.clone().schedule_work();
        true
    }

    /// Takes the queue pair out (process context), so that it is destroyed here.
    pub(crate) fn unlink(&self) -> Option<Arc<TxLink>> {
        let mut s = self.state.lock();
        s.phase = TxPhase::Dead;
        let dropped = s.held.clear();
        bump(&self.shared().counters.tx_dropped, dropped);
        s.link.take()
    }

    /// Marks the connection dead and has the work item destroy it.
    fn fail(&self) {
        let (dropped, never_up) = {
            let mut s = self.state.lock();
            let never_up = matches!(s.phase, TxPhase::New | TxPhase::Connecting);
            s.phase = TxPhase::Dead;
            (s.held.clear(), never_up)
        };
        bump(&self.shared().counters.tx_dropped, dropped);
        bump(&self.shared().counters.cm_tx_failed, u64::from(never_up));
        crate::params::ipoib_dbg!(
            "{}: connection to {} closed{}\n",
            self.shared().name(),
            self.dest,
            if never_up { " before it was up" } else { "" }
        );
        self.cm.clone().schedule_work();
    }

    /// NAPI: reaps send completions if the CQ fired, or if it was left unarmed and
    /// `reap_unarmed`; sends held packets once established. If it found some and `lazy`,
    /// the CQ is left unarmed (more are likely on their way; see
    /// `ConnectedMode::poll_tx`), else armed again.
    pub(crate) fn poll(
        &self,
        dev: &NetDevice,
        wcs: &mut [WorkCompletion],
        tally: &mut Tally<'_>,
        reap_unarmed: bool,
        lazy: bool,
    ) -> TxPolled {
        // Once: each call is a virtual one.
        let shared = self.shared();
        let mut s = self.state.lock();
        let mut failed = false;
        let mut polled = TxPolled::default();
        // Whether a send completed: the connection's last activity, read once per poll.
        let mut active = false;
        if let Some(link) = s.link.as_ref() {
            let unarmed = link.unarmed.load(Ordering::Relaxed);
            if link.cq.handler().take() || (reap_unarmed && unarmed) {
                let mut reaped = 0;
                loop {
                    let n = link.cq.poll(wcs).unwrap_or(0);
                    for wc in &mut wcs[..n] {
                        let sent = link.qp.complete_send(wc);
                        crate::params::ipoib_dbg_cm_data!(
                            "{}: send completion on QPN 0x{:06x}, status {:?}\n",
                            shared.name(),
                            link.qp.qp_num(),
                            wc.status()
                        );
                        if sent.is_some() {
                            shared.credits.give(1);
                            self.done.fetch_add(1, Ordering::Relaxed);
                        }
                        match wc.status() {
                            WcStatus::Success => {
                                if let Some(sent) = sent {
                                    tally.sent(sent);
                                    active = true;
                                }
                            }
                            // A flushed send means the queue pair is in the error state:
                            // the device may put it there without an error completion
                            // (rxe does when a send finds the link down). Unless we closed
                            // the connection ourselves, it is lost.
                            WcStatus::Flushed => {
                                bump(&shared.counters.tx_dropped, 1);
                                if s.phase == TxPhase::Live && !failed {
                                    pr_info!(
                                        "{}: connection to {} lost (its queue pair failed)\n",
                                        shared.name(),
                                        self.dest
                                    );
                                    failed = true;
                                }
                            }
                            WcStatus::Error(status) => {
                                bump(&shared.counters.tx_errors, 1);
                                if !failed {
                                    pr_info!(
                                        "{}: connection to {} failed (send status {})\n",
                                        shared.name(),
                                        self.dest,
                                        status
                                    );
                                }
                                failed = true;
                            }
                        }
                    }
                    reaped += n;
                    if n < wcs.len() {
                        break;
                    }
                }
                if reaped > 0 && lazy {
                    link.unarmed.store(true, Ordering::Relaxed);
                    polled.unarmed = true;
                } else {
                    link.unarmed.store(false, Ordering::Relaxed);
                    polled.again = crate::cq::rearm(&link.cq);
                }
            } else {
                polled.unarmed = unarmed;
            }
        }
        if active {
            self.last_ms.store(now_ms(), Ordering::Relaxed);
        }
        while s.phase == TxPhase::Live && !s.held.is_empty() && shared.credits.any_idle() {
            if let Some(skb) = s.held.pop() {
                // Too big for the peer: dropped, its sender not told from NAPI.
                drop(self.post(&s, skb, dev));
            }
        }
        if s.phase == TxPhase::Live && !s.held.is_empty() {
            // Out of credits: the round that completions returning some bring looks here
            // again.
            if let Some(link) = s.link.as_ref() {
                link.cq.handler().mark();
            }
        }
        drop(s);
        if failed {
            self.fail();
        }
        polled
    }
}

/// What a NAPI poll of a transmit connection left.
#[derive(Default)]
pub(crate) struct TxPolled {
    /// The CQ needs another round.
    pub(crate) again: bool,
    /// The CQ is left unarmed.
    pub(crate) unarmed: bool,
}

impl Handler for TxConnection {
    fn event(&self, id: &CmIdRef, event: Event<'_>) {
        match event {
            Event::RepReceived { private_data, .. } => {
                if let Err(e) = self.established(id, private_data) {
                    pr_info!(
                        "{}: connection to {} refused ({:?})\n",
                        self.shared().name(),
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
            // An MRA only means the peer is slow: the CM waits longer on its own.
            Event::RtuReceived | Event::MraReceived { .. } | Event::Other(_) => {}
        }
    }
}
