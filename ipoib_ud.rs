// SPDX-License-Identifier: GPL-2.0

//! Datagram mode's datapath (C: `ipoib_ib.c`, with the UD set-up of `ipoib_verbs.c`): the
//! interface's UD queue pair with its send and receive CQs, the receive ring refilled from
//! NAPI, sends straight from the packets' memory (bounded by the interface's send credits),
//! and the recovery of a failed queue pair.
//!
//! Send completions are reaped in batches, where C reaps each in a NAPI round of its own:
//! the transmit path reaps them itself every [`REAP_AT`] sends, and NAPI reaps what is left
//! [`cq::SEND_REAP_MS`] after it last found some (the tail work item), or as soon as one
//! comes when it last found none or the queue is stopped (the send CQ is armed then). Every
//! NAPI reap ends with the CQ armed or the tail work item queued, so no completion waits for
//! ever; meanwhile a completed send only holds its packet's memory and its credit.
//!
//! Which packets come here, and through which address handle, the interface decides
//! (`interface.rs`). The receive CQ also completes connected mode's receives: those are
//! handed back to the caller of [`UdDatapath::poll_recvs`].

use crate::{
    cq::{self, CqEvents, NapiHandles},
    local_gid::LocalGid,
    log_name::LogName,
    partition::PartitionIndex,
    rx,
    send_credits::SendCredits,
    stats::{bump, Counters, Tally},
    wire::{self, HwAddr, ENCAP_HEADER_LEN, HWADDR_LEN, UD_GRH_LEN},
};
use core::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use kernel::{
    net::{
        dev::NetDevice,
        napi::Napi,
        skb::{DropReason, PacketType, SkBuff},
    },
    prelude::*,
    rdma::{
        ah::AddressHandle,
        cq::{CompletionQueue, WcStatus, WorkCompletion},
        device::{Device, DeviceRef},
        dma::MAX_SKB_SEGMENTS,
        pd::ProtectionDomain,
        qp::{QpCaps, QpChange, QpType, QueuePair, State},
    },
    sync::{Arc, ArcBorrow},
    time::msecs_to_jiffies,
    workqueue::{
        self, impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, Work,
        WorkItem,
    },
};

/// Largest IB MTU: payloads of up to 4096 bytes after the GRH space.
const MAX_IB_MTU: usize = 4096;
/// Room left in front of a receive buffer's GRH space, so that the IP header after the GRH
/// space and the IPoIB header starts on a 64-byte boundary (with the skb's usual 64 bytes of
/// headroom); the pseudo header is later pushed into the GRH space, which is read by then.
const RECV_HEADROOM: u32 = 20;

/// Bytes a receive skb is allocated with when the port carries datagrams of `port_mtu`
/// bytes after the IPoIB header: its headroom, the GRH space and the largest datagram. The
/// skb goes up as it is, so it is sized to the port's MTU, not to the largest IB MTU (as C
/// does): at IB MTU 1024 a packet then takes about 2 KiB of memory instead of 8, which is
/// what socket receive buffers count.
fn recv_skb_len(port_mtu: u32) -> u32 {
    let datagram = (port_mtu + ENCAP_HEADER_LEN as u32).min(MAX_IB_MTU as u32);
    RECV_HEADROOM + UD_GRH_LEN as u32 + datagram
}
/// Completions handled per CQ poll call.
const POLL_BATCH: usize = 16;

/// Room for one batch of work completions, polled into: the NAPI context's own, made once
/// with the net_device (its poll state) and reused for every CQ of every round; only the
/// first entries a poll reports are read.
pub(crate) type Completions = [WorkCompletion; POLL_BATCH];

/// The work item that brings a failed queue pair back.
const RECOVER_WORK: u64 = 0;
/// The delayed work item that has NAPI reap the sends completed since its last reap.
const TAIL_WORK: u64 = 1;

/// Sends after which the transmit path reaps send completions itself, at most: a batch is
/// likely there by then. A ring of fewer sends reaps every half ring.
const REAP_AT: u32 = 32;
/// Completions reaped per CQ poll call on the transmit path (whose stack is deep already).
const XMIT_POLL_BATCH: usize = 8;

/// Scatter/gather entries a send asks for: a packet's linear part and each of its page
/// fragments, as far as `device` takes them (beyond, packets are linearised).
pub(crate) fn send_sges(device: &Device) -> u32 {
    device.max_send_sge().clamp(1, MAX_SKB_SEGMENTS as u32)
}

/// What a datapath is made with, besides its device and the interface's shared parts.
pub(crate) struct UdConfig {
    pub(crate) port: u32,
    /// The interface's name in log lines.
    pub(crate) log_name: Arc<LogName>,
    /// The partition's index in the port's P_Key table, shared with the interface; while
    /// the table lacks it the queue pair is not made ready and no buffer posted.
    pub(crate) partition: Arc<PartitionIndex>,
    /// Sends in flight at most, and receive buffers kept posted.
    pub(crate) send_ring: u32,
    pub(crate) recv_ring: u32,
    /// Entries of the receive CQ, which connected mode's receives share.
    pub(crate) recv_cqe: u32,
    /// Largest IPoIB payload of a datagram (the IB MTU less the encapsulation header).
    pub(crate) mtu: u32,
    /// Our GID and LID, and the broadcast group's GID: they tell received datagrams apart.
    pub(crate) gid: Arc<LocalGid>,
    pub(crate) lid: u16,
    pub(crate) broadcast: wire::Gid,
}

/// The UD queue pair of an interface and what keeps it going.
#[pin_data]
pub(crate) struct UdDatapath {
    /// Keeps the device registered while the queue pair exists.
    device: DeviceRef,
    port: u32,
    log_name: Arc<LogName>,
    partition: Arc<PartitionIndex>,
    /// The P_Key index the queue pair was made ready with, if it was (the recovery work
    /// item changes it).
    readied: PartitionIndex,
    /// Largest payload of a datagram is the smaller of the port's (which follows the port:
    /// under rxe, the Ethernet MTU) and, on InfiniBand, the broadcast group's (`u32::MAX`
    /// until joined): read together, so that two writers cannot leave a stale minimum.
    port_mtu: AtomicU32,
    group_mtu: AtomicU32,
    /// The MTU asked for in datagram mode when above what datagrams carry (C's
    /// `admin_mtu`), 0 when the interface follows the fabric's.
    admin_mtu: AtomicU32,
    recv_ring: u32,
    /// The port MTU the receive skbs on the ring were made for: when the port's grows past
    /// it, larger datagrams would not fit, and the ring is made again (see `recover`).
    ring_mtu: AtomicU32,
    gid: Arc<LocalGid>,
    /// Our LID (InfiniBand; 0 on RoCE), changed by port events.
    lid: AtomicU32,
    /// The Q_Key of our datagrams, and of those we accept: the broadcast group's.
    qkey: AtomicU32,
    broadcast: wire::Gid,
    send_cq: Arc<CompletionQueue<CqEvents>>,
    recv_cq: Arc<CompletionQueue<CqEvents>>,
    /// The UD queue pair; datagrams land in skbs that go up as they are.
    qp: Pin<KBox<QueuePair<SkBuff>>>,
    /// Sends in flight on the interface, shared with connected mode.
    credits: Arc<SendCredits>,
    counters: Arc<Counters>,
    /// Every how many sends [`UdDatapath::post`] reaps completions first, and how many it
    /// posted since it last did: a hint only, read and written without exclusion (NAPI's
    /// held-packet sends may race the transmit path's).
    reap_at: u32,
    posts: AtomicU32,
    /// NAPI saw a failed send or an unexpected flush: the queue pair may have failed.
    recovery_due: AtomicBool,
    /// NAPI left the send CQ unarmed, for the tail work item: completions there show only
    /// when it is polled. Written by NAPI only.
    send_unarmed: AtomicBool,
    /// Brings a failed queue pair back (a device may fail it when a send finds the port
    /// down; rxe does).
    #[pin]
    recover_work: Work<UdDatapath, RECOVER_WORK>,
    /// Has NAPI reap the sends completed since it last found some.
    #[pin]
    tail_work: DelayedWork<UdDatapath, TAIL_WORK>,
}

/// Makes a fresh skb (of `recv_skb_len` bytes) a receive buffer.
fn recv_buffer(skb: Result<SkBuff>) -> Result<SkBuff> {
    let mut skb = skb?;
    skb.reserve(RECV_HEADROOM)?;
    Ok(skb)
}

/// Brings a new (or reset) UD queue pair up as IPoIB uses it (C: `ipoib_init_qp`): on
/// `port` in the partition at `pkey_index`, taking datagrams with `qkey`, sending from PSN 0.
fn bring_up(qp: &QueuePair<SkBuff>, port: u32, pkey_index: u16, qkey: u32) -> Result {
    qp.modify(
        &QpChange::to_init()
            .port(port)
            .pkey_index(pkey_index)
            .qkey(qkey),
    )?;
    qp.modify(&QpChange::to_ready_to_receive())?;
    qp.modify(&QpChange::to_ready_to_send().send_psn(0))
}

impl UdDatapath {
    /// Sets up the datapath in `pd` as `config` says: CQs driving `napi`, the UD queue pair,
    /// made ready with its receive ring posted if the partition exists.
    pub(crate) fn new(
        device: &Device,
        pd: &Arc<ProtectionDomain>,
        config: UdConfig,
        napi: &NapiHandles,
        credits: Arc<SendCredits>,
        counters: Arc<Counters>,
    ) -> Result<Arc<Self>> {
        let UdConfig {
            port,
            log_name,
            partition,
            send_ring,
            recv_ring,
            recv_cqe,
            mtu,
            gid,
            lid,
            broadcast,
        } = config;
        let send_events = Arc::new(CqEvents::new(napi.send.clone()), GFP_KERNEL)?;
        let recv_events = Arc::new(CqEvents::new(napi.recv.clone()), GFP_KERNEL)?;
        let send_cq = CompletionQueue::new(device, send_ring + 1, 0, send_events, crate::OWNER)?;
        let recv_cq = CompletionQueue::new(device, recv_cqe, 0, recv_events, crate::OWNER)?;
        let caps = QpCaps {
            max_send_wr: send_ring,
            max_recv_wr: recv_ring,
            max_send_sge: send_sges(device),
            max_recv_sge: 1,
        };
        let qp = QueuePair::with_buffers(
            QpType::Ud,
            pd,
            send_cq.clone(),
            recv_cq.clone(),
            None,
            caps,
            None,
            crate::OWNER,
        )?;
        let index = partition.get();
        if let Some(index) = index {
            bring_up(&qp, port, index, wire::DEFAULT_QKEY)?;
            for _ in 0..recv_ring {
                let len = recv_skb_len(mtu);
                qp.post_recv(recv_buffer(SkBuff::alloc(None, len, GFP_KERNEL))?)?;
            }
        }
        let device = device.get_ref()?;
        Arc::pin_init(
            pin_init!(Self {
                device,
                port,
                log_name,
                partition,
                readied: PartitionIndex::new(index),
                port_mtu: AtomicU32::new(mtu),
                ring_mtu: AtomicU32::new(mtu),
                group_mtu: AtomicU32::new(u32::MAX),
                admin_mtu: AtomicU32::new(0),
                recv_ring,
                gid,
                lid: AtomicU32::new(u32::from(lid)),
                qkey: AtomicU32::new(wire::DEFAULT_QKEY),
                broadcast,
                send_cq,
                recv_cq,
                qp,
                credits,
                counters,
                reap_at: (send_ring / 2).clamp(1, REAP_AT),
                posts: AtomicU32::new(0),
                recovery_due: AtomicBool::new(false),
                send_unarmed: AtomicBool::new(true),
                recover_work <- new_work!("UdDatapath::recover_work"),
                tail_work <- new_delayed_work!("UdDatapath::tail_work"),
            }),
            GFP_KERNEL,
        )
    }

    /// The UD queue pair (multicast groups attach to it).
    pub(crate) fn qp(&self) -> &QueuePair<SkBuff> {
        &self.qp
    }

    /// The receive CQ (connected mode's receives complete there too; ethtool moderates it).
    pub(crate) fn recv_cq(&self) -> &Arc<CompletionQueue<CqEvents>> {
        &self.recv_cq
    }

    /// Sets the Q_Key of our datagrams (the broadcast group's), on the queue pair too.
    pub(crate) fn set_qkey(&self, qkey: u32) -> Result {
        if self.qkey.swap(qkey, Ordering::Relaxed) != qkey && self.readied.get().is_some() {
            self.qp.modify(&QpChange::attributes().qkey(qkey))?;
        }
        Ok(())
    }

    /// Bounds datagram payloads by `mtu` (the broadcast group's) where it is below the
    /// port's.
    pub(crate) fn limit_mtu(&self, mtu: u32) {
        let old = self.mtu();
        // An MTU asked for that the group gave exactly follows the group from now on (C:
        // the admin MTU follows the group's when they are equal).
        let _ = self
            .admin_mtu
            .compare_exchange(old, 0, Ordering::Relaxed, Ordering::Relaxed);
        self.group_mtu.store(mtu, Ordering::Relaxed);
        let port = self.port_mtu.load(Ordering::Relaxed);
        if self.mtu() < old && mtu < port {
            pr_info!(
                "{}: the broadcast group's MTU limits datagrams to {} bytes (the port takes {})\n",
                self.log_name,
                mtu,
                port
            );
        }
    }

    /// Takes the payload the port now carries, `mtu` (its active MTU less the
    /// encapsulation header); returns the datagram payload if it changed.
    pub(crate) fn set_port_mtu(&self, mtu: u32) -> Option<u32> {
        let old = self.mtu();
        self.port_mtu.store(mtu, Ordering::Relaxed);
        let new = self.mtu();
        (new != old).then_some(new)
    }

    /// Largest IPoIB payload of a datagram.
    pub(crate) fn mtu(&self) -> u32 {
        self.port_mtu
            .load(Ordering::Relaxed)
            .min(self.group_mtu.load(Ordering::Relaxed))
    }

    /// Takes `asked` as the interface's datagram-mode MTU; returns the MTU it runs at now:
    /// at most what datagrams carry.
    pub(crate) fn set_admin_mtu(&self, asked: u32) -> u32 {
        let carried = self.mtu();
        let admin = if asked == carried { 0 } else { asked };
        self.admin_mtu.store(admin, Ordering::Relaxed);
        asked.min(carried)
    }

    /// The MTU the interface runs at in datagram mode: what datagrams carry, or less if
    /// less was asked for.
    pub(crate) fn netdev_mtu(&self) -> u32 {
        match self.admin_mtu.load(Ordering::Relaxed) {
            0 => self.mtu(),
            admin => admin.min(self.mtu()),
        }
    }

    /// Records our LID after a port event.
    pub(crate) fn set_lid(&self, lid: u16) {
        self.lid.store(u32::from(lid), Ordering::Relaxed);
    }

    /// Sends that may be posted now without one being refused for want of a credit, and how
    /// many may be in flight at most.
    pub(crate) fn send_room(&self) -> (u32, u32) {
        (self.credits.free(), self.credits.limit())
    }

    /// Whether the message `skb` carries after its pseudo header fits a datagram; if not,
    /// the caller drops it for the reason returned, counted here. From the transmit path
    /// only (see `TxConnection::post` on reporting the path MTU).
    pub(crate) fn sendable(&self, skb: &mut SkBuff) -> Result<(), DropReason> {
        let c = &self.counters;
        let Some(len) = skb.len().checked_sub(HWADDR_LEN as u32) else {
            bump(&c.tx_dropped, 1);
            return Err(DropReason::PktTooSmall);
        };
        // rxe drops an oversize UD send while reporting success: enforce the MTU here. In
        // connected mode the stack may send more toward a peer reached over UD: tell it the
        // path MTU, as a router would.
        let mtu = self.mtu();
        if len > mtu + ENCAP_HEADER_LEN as u32 {
            let _ = skb.report_too_big(mtu);
            bump(&c.tx_dropped, 1);
            return Err(DropReason::PktTooBig);
        }
        Ok(())
    }

    /// Posts what `skb` carries after its pseudo header to `dest` through `ah`, from the
    /// packet's own memory (its size checked by [`Self::sendable`]).
    pub(crate) fn post(&self, mut skb: SkBuff, dest: &HwAddr, ah: &AddressHandle, dev: &NetDevice) {
        let c = &self.counters;
        let posts = self.posts.load(Ordering::Relaxed) + 1;
        if posts < self.reap_at {
            self.posts.store(posts, Ordering::Relaxed);
        } else {
            self.posts.store(0, Ordering::Relaxed);
            self.reap_in_passing();
        }
        let Some(left) = self.credits.take(dev) else {
            c.tx_drop(skb, DropReason::FullRing);
            return;
        };
        if left == 0 {
            // The queue stopped: NAPI wakes it as soon as completions return credits.
            self.send_cq.handler().kick();
        }
        // The packet stays ours until its send completes; its socket need not wait (C
        // does the same).
        skb.orphan();
        let offset = HWADDR_LEN as u32;
        let qkey = self.qkey.load(Ordering::Relaxed);
        crate::params::ipoib_dbg_data!(
            "{}: sending datagram, length {} to QPN 0x{:06x}\n",
            self.log_name,
            skb.len() - offset,
            dest.qpn()
        );
        if self
            .qp
            .post_skb_ud(skb, offset, ah, dest.qpn(), qkey)
            .is_err()
        {
            self.credits.give(1);
            bump(&c.tx_errors, 1);
        }
    }

    /// Reaps the send completions (from NAPI) if the send CQ fired or the tail work item
    /// asked, or the queue is stopped while the CQ is not armed (connected mode may have
    /// taken the last credit, and datagram sends completed but not reaped must not hold its
    /// wake back; an armed CQ says when they complete). If it found some, more are likely
    /// on their way: the tail work item has NAPI reap them together later, while the
    /// interface is `up`. Otherwise, or while the queue is stopped (whose wake must not
    /// wait), the CQ is armed again.
    pub(crate) fn poll_sends(
        self: &Arc<Self>,
        dev: &NetDevice,
        up: bool,
        wcs: &mut Completions,
        tally: &mut Tally<'_>,
    ) {
        let stopped = dev.queue_stopped();
        let due =
            self.send_cq.handler().take() || (stopped && self.send_unarmed.load(Ordering::Relaxed));
        if !due {
            return;
        }
        if self.reap_sends(wcs, tally) > 0 && !stopped && up {
            self.send_unarmed.store(true, Ordering::Relaxed);
            let _ = workqueue::system()
                .enqueue_delayed::<_, TAIL_WORK>(self.clone(), msecs_to_jiffies(cq::SEND_REAP_MS));
        } else {
            cq::rearm(&self.send_cq);
            self.send_unarmed.store(false, Ordering::Relaxed);
        }
    }

    /// Reaps the completed sends from the transmit path, once enough were posted that a batch
    /// is likely there: one CQ poll for several sends, and no NAPI round for them.
    #[inline(never)]
    fn reap_in_passing(&self) {
        let mut wcs = <[WorkCompletion; XMIT_POLL_BATCH]>::default();
        let mut tally = Tally::new(&self.counters);
        self.reap_sends(&mut wcs, &mut tally);
        if self.recovery_due.load(Ordering::Relaxed) {
            // Only NAPI schedules the recovery.
            self.send_cq.handler().kick();
        }
    }

    /// Reaps every send completion the send CQ holds, polled `wcs.len()` at a time: they
    /// free their packets and return their credits; a failed or flushed one has the queue
    /// pair checked. Returns how many there were.
    #[inline]
    fn reap_sends(&self, wcs: &mut [WorkCompletion], tally: &mut Tally<'_>) -> usize {
        let mut reaped = 0;
        loop {
            let n = self.send_cq.poll(wcs).unwrap_or(0);
            // Credits go back once for the batch.
            let mut done = 0;
            for wc in &mut wcs[..n] {
                let status = wc.status();
                let Some(sent) = self.qp.complete_send(wc) else {
                    continue;
                };
                done += 1;
                match status {
                    WcStatus::Success => tally.sent(sent),
                    // Failed or flushed: either way the queue pair may have failed, have
                    // it checked. The packet is freed as a drop.
                    status => {
                        drop(sent);
                        let c = &self.counters;
                        let counter = match status {
                            WcStatus::Error(_) => &c.tx_errors,
                            _ => &c.tx_dropped,
                        };
                        bump(counter, 1);
                        self.recovery_due.store(true, Ordering::Relaxed);
                    }
                }
                crate::params::ipoib_dbg_data!(
                    "{}: send completion, status {:?}\n",
                    self.log_name,
                    status
                );
            }
            if done != 0 {
                self.credits.give(done);
            }
            reaped += n;
            if n < wcs.len() {
                return reaped;
            }
        }
    }

    /// Takes the receive CQ's request for a look (from NAPI): the round that takes it polls
    /// the CQ ([`Self::poll_recvs`]), then arms it again or passes the request on
    /// ([`Self::recvs_polled`]).
    pub(crate) fn take_recvs(&self) -> bool {
        self.recv_cq.handler().take()
    }

    /// The NAPI round that took the receive CQ's request is over: `completed` when NAPI
    /// stopped polling, and the CQ is armed again (completions that slipped in meanwhile
    /// bring another round); otherwise the next round, already due, looks again.
    pub(crate) fn recvs_polled(&self, completed: bool) {
        if completed {
            cq::rearm(&self.recv_cq);
        } else {
            self.recv_cq.handler().mark();
        }
    }

    /// Handles up to `budget` receive completions (from NAPI): datagrams go up and their
    /// buffers back on the ring; completions of other queue pairs (connected mode's) go to
    /// `other`. Returns how many were handled.
    pub(crate) fn poll_recvs(
        &self,
        napi: &Napi,
        budget: u32,
        wcs: &mut Completions,
        tally: &mut Tally<'_>,
        mut other: impl FnMut(&mut WorkCompletion, &mut Tally<'_>),
    ) -> u32 {
        let mut done = 0u32;
        while done < budget {
            let want = (budget - done).min(POLL_BATCH as u32) as usize;
            let n = self.recv_cq.poll(&mut wcs[..want]).unwrap_or(0);
            if n == 0 {
                break;
            }
            for wc in &mut wcs[..n] {
                if wc.qp_id() != self.qp.id() {
                    other(wc, tally);
                    continue;
                }
                // The receive queue is locked while the buffer is taken back and replaced in
                // its slot; the datagram goes up once it is unlocked.
                let ours =
                    self.qp.lock_recvs().ok().and_then(|mut rq| {
                        rq.complete_with(wc, |skb, wc| self.refill(wc, skb, napi))
                    });
                let Some((up, posted)) = ours else {
                    other(wc, tally);
                    continue;
                };
                if posted.is_err() {
                    bump(&self.counters.rx_errors, 1);
                }
                if let Some(skb) = up {
                    self.receive(wc, skb, napi, tally);
                }
            }
            done += n as u32;
            if n < want {
                break;
            }
        }
        done
    }

    /// What goes back on the ring in place of `skb`, which `wc` completed (a fresh skb, or
    /// `skb` emptied, or nothing when the queue pair failed), and `skb` if it holds a
    /// datagram to hand up.
    // Always inline: once per datagram, in the NAPI round.
    #[inline(always)]
    fn refill(
        &self,
        wc: &WorkCompletion,
        skb: SkBuff,
        napi: &Napi,
    ) -> (Option<SkBuff>, Option<SkBuff>) {
        crate::params::ipoib_dbg_data!(
            "{}: receive completion, {} bytes from QPN 0x{:06x}, status {:?}\n",
            self.log_name,
            wc.byte_len(),
            wc.src_qp(),
            wc.status()
        );
        let status = wc.status();
        if status == WcStatus::Flushed {
            // The queue pair failed: its buffers go, and it is brought back.
            self.recovery_due.store(true, Ordering::Relaxed);
            return (None, None);
        }
        // The datagram goes up in its skb, replaced on the ring by a fresh one (of the
        // port's MTU now: a failed receive may have been a datagram too large for a buffer
        // posted before the MTU grew). Without memory for one, the datagram is dropped and
        // its skb posted again, emptied.
        let (up, repost) = match (status, recv_buffer(napi.alloc_skb(self.recv_skb_len()))) {
            (WcStatus::Success, Ok(fresh)) => (Some(skb), Ok(fresh)),
            (WcStatus::Success, Err(_)) => {
                bump(&self.counters.rx_dropped, 1);
                (None, Err(skb))
            }
            (_, fresh) => {
                bump(&self.counters.rx_errors, 1);
                (None, fresh.or(Err(skb)))
            }
        };
        match repost.or_else(|mut skb| skb.trim(0).map(|()| skb)) {
            Ok(repost) => (Some(repost), up),
            Err(_) => {
                bump(&self.counters.rx_errors, 1);
                (None, up)
            }
        }
    }

    /// Bytes a receive skb is allocated with at the port's MTU.
    fn recv_skb_len(&self) -> u32 {
        recv_skb_len(self.port_mtu.load(Ordering::Relaxed))
    }

    /// Hands one received datagram (`skb`: the GRH space, then the datagram) to the stack,
    /// or drops it.
    fn receive(&self, wc: &WorkCompletion, skb: SkBuff, napi: &Napi, tally: &mut Tally<'_>) {
        let classify = |grh: &[u8; UD_GRH_LEN]| {
            // The GRH space holds the sender's GID at bytes 8..24 when a GRH came (an IPv6
            // header on RoCE v2 over IPv6). Our own multicast comes back to us: it has our
            // LID and QPN, and, if a GRH came, our interface ID (the C driver's rule; on
            // RoCE the LIDs are 0).
            if wc.src_qp() == self.qp.qp_num()
                && wc.slid() == self.lid.load(Ordering::Relaxed)
                && (!wc.has_grh() || grh[16..24] == self.gid.interface_id())
            {
                return None;
            }
            let dgid = &grh[24..40];
            let pkt_type = if !wc.has_grh() || dgid[0] != 0xff {
                PacketType::Host
            } else if dgid == self.broadcast.0 {
                PacketType::Broadcast
            } else {
                PacketType::Multicast
            };
            if pkt_type == PacketType::Multicast {
                bump(&self.counters.multicast, 1);
            }
            Some(pkt_type)
        };
        rx::deliver_skb(skb, classify, napi, tally);
    }

    /// Arms both completion queues (when the interface comes up), and has NAPI look at
    /// both once for what completed while they were not armed.
    pub(crate) fn arm(&self) {
        let _ = self.recv_cq.request_notify();
        let _ = self.send_cq.request_notify();
        self.kick();
    }

    /// Has NAPI poll both completion queues.
    pub(crate) fn kick(&self) {
        self.recv_cq.handler().kick();
        self.send_cq.handler().kick();
    }

    /// Has the queue pair checked, and brought back if it failed (process context).
    pub(crate) fn schedule_recovery(this: ArcBorrow<'_, Self>) {
        let _ = workqueue::system().enqueue::<_, RECOVER_WORK>(Arc::<Self>::from(this));
    }

    /// Whether NAPI asked for a check of the queue pair since the last call.
    pub(crate) fn take_recovery_due(&self) -> bool {
        self.recovery_due.swap(false, Ordering::Relaxed)
    }

    /// Brings the UD queue pair back to ready-to-send if it failed: from SQE by restarting
    /// its send queue, from the error state by a reset (the same QPN, so peers' neighbour
    /// entries stay valid) and fresh receive buffers. Multicast attachments stay. Also
    /// follows the partition's place in the P_Key table: made ready with the new index
    /// (reset first if it was ready), or failed while the partition is missing.
    fn recover(&self) {
        let name = &self.log_name;
        let Some(pkey_index) = self.partition.get() else {
            if self.readied.set(None) {
                let _ = self.qp.set_error();
                pr_info!("{name}: partition gone from the P_Key table\n");
            }
            return;
        };
        let outgrown = self.ring_outgrown();
        if self.readied.get() != Some(pkey_index) || outgrown {
            match self.reset_qp(pkey_index) {
                Ok(()) if outgrown => pr_info!(
                    "{name}: receive buffers made again for datagrams of {} bytes\n",
                    self.ring_mtu.load(Ordering::Relaxed)
                ),
                Ok(()) => pr_info!("{name}: UD queue pair ready at P_Key index {pkey_index}\n"),
                Err(e) => {
                    pr_err!("{name}: UD queue pair not ready at P_Key index {pkey_index} ({e:?})\n")
                }
            }
            self.kick();
            return;
        }
        let state = match self.qp.state() {
            Ok(state) => state,
            Err(e) => {
                pr_warn!("{}: cannot query the UD queue pair ({:?})\n", name, e);
                return;
            }
        };
        let result = match state {
            State::SendQueueError => self.qp.restart_send_queue(),
            State::Error => self.reset_qp(pkey_index),
            _ => return,
        };
        match result {
            Ok(()) => {
                bump(&self.counters.qp_recoveries, 1);
                pr_info!("{}: UD queue pair recovered from {:?}\n", name, state)
            }
            Err(e) => pr_err!("{}: UD queue pair stuck in {:?} ({:?})\n", name, state, e),
        }
        self.kick();
    }

    /// Whether the port's MTU grew past the one the receive ring was made for.
    pub(crate) fn ring_outgrown(&self) -> bool {
        self.port_mtu.load(Ordering::Relaxed) > self.ring_mtu.load(Ordering::Relaxed)
    }

    /// Resets the UD queue pair (failed, or with receive buffers too small for the port's
    /// MTU) and brings it up with its receive ring full again, of buffers of the port's MTU.
    fn reset_qp(&self, pkey_index: u16) -> Result {
        let mtu = self.port_mtu.load(Ordering::Relaxed);
        self.ring_mtu.store(mtu, Ordering::Relaxed);
        let room = recv_skb_len(mtu) - RECV_HEADROOM;
        let mut kept = KVec::new();
        self.qp.reset(
            |sent| {
                self.credits.give(1);
                drop(sent);
            },
            |skb: SkBuff| {
                // A buffer too small now, or that finds no room here, is freed; a fresh one
                // replaces it.
                if skb.tailroom() >= room {
                    let _ = kept.push(skb, GFP_KERNEL);
                }
            },
        )?;
        self.readied.set(None);
        bring_up(
            &self.qp,
            self.port,
            pkey_index,
            self.qkey.load(Ordering::Relaxed),
        )?;
        self.readied.set(Some(pkey_index));
        // NAPI may repost a buffer it took just before the reset: count what is posted.
        let wanted = self.recv_ring as usize;
        let mut kept = kept.into_iter();
        while self.qp.recvs_posted() < wanted {
            let buf = match kept.next() {
                Some(buf) => buf,
                None => recv_buffer(SkBuff::alloc(None, self.recv_skb_len(), GFP_KERNEL))?,
            };
            self.qp.post_recv(buf)?;
        }
        Ok(())
    }

    /// Waits for the recovery and tail work items (once the interface is unregistered, or
    /// down). Once the interface is down NAPI queues no tail work item, except from a round
    /// that began before: a run of it then only schedules NAPI, disabled by then.
    pub(crate) fn flush_work(&self) {
        self.tail_work.flush();
        self.recover_work.flush();
    }
}

impl_has_work! {
    impl HasWork<Self, RECOVER_WORK> for UdDatapath { self.recover_work }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, TAIL_WORK> for UdDatapath { self.tail_work }
}

impl WorkItem<TAIL_WORK> for UdDatapath {
    type Pointer = Arc<UdDatapath>;

    fn run(this: Arc<UdDatapath>) {
        this.send_cq.handler().kick();
    }
}

impl WorkItem<RECOVER_WORK> for UdDatapath {
    type Pointer = Arc<UdDatapath>;

    fn run(this: Arc<UdDatapath>) {
        this.recover();
    }
}
