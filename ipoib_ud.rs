// SPDX-License-Identifier: GPL-2.0

//! Datagram mode: one UD queue pair per interface, a receive ring refilled from NAPI, sends
//! straight from the packets' memory (bounded by the interface's send credits), and address
//! handles per destination.

use crate::{
    child::{Children, Maker},
    cq::CqEvents,
    ethtool::EthtoolState,
    ipoib_cm::ConnectedMode,
    mcast::{Joined, McastGroups},
    neigh::{Neighbours, REAP_BATCH},
    params,
    path::PathResolver,
    rx,
    send_credits::SendCredits,
    stats::{bump, now_ms, Counters, Gauges},
    wire::{self, HwAddr, CM_MTU, ENCAP_HEADER_LEN, HWADDR_LEN, UD_GRH_LEN},
};
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use kernel::{
    c_str,
    net::{
        dev::{McAddrs, NetDevice, Stats64},
        ethtool::{Coalesce, DrvInfo},
        mcast::Ipv6McMembership,
        napi::{Napi, NapiHandle},
        neigh,
        rtnl::Rtnl,
        skb::{PacketType, SkBuff},
    },
    new_spinlock_bh,
    prelude::*,
    rdma::{
        ah::{AddressHandle, AhAttr},
        cm::GidAttr,
        cq::{CompletionQueue, WcStatus, WorkCompletion},
        device::{Device, DeviceRef, Gid, Mtu, FW_VERSION_LEN},
        dma::{DmaBuffer, DmaDirection, MAX_SKB_SEGMENTS},
        pd::ProtectionDomain,
        qp::{QpCaps, QpType, QueuePair, State},
        sa::McMemberRecord,
    },
    sync::{Arc, ArcBorrow, SpinLockBh},
    time::msecs_to_jiffies,
    types::ARef,
    workqueue::{
        self, impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, Work,
        WorkItem,
    },
};

/// Largest IB MTU: payloads of up to 4096 bytes after the GRH space.
const MAX_IB_MTU: usize = 4096;
/// Completions handled per CQ poll call.
const POLL_BATCH: usize = 16;
/// The GID table entry the interface's address uses, as in the C driver.
const GID_INDEX: u32 = 0;
/// How long the transmit queue may stay stopped before the stalled sends are looked for: a
/// fifth of the C driver's 10 s, since only the stalled connections are closed here.
pub(crate) const TX_TIMEOUT_MS: u32 = 2000;
/// Packets held while their destination's address handle is being made.
const PENDING_MAX: usize = 64;

/// The work item that makes the address handles held packets wait for.
const RESOLVE_WORK: u64 = 0;
/// The work item that joins and leaves the groups of the multicast list.
const MCAST_WORK: u64 = 1;
/// The work item that brings a failed queue pair back.
const RECOVER_WORK: u64 = 2;
/// The work item that queries the port again after a port event.
const PORT_WORK: u64 = 3;
/// The work item that looks for stalled sends after a transmit timeout.
const STALL_WORK: u64 = 4;
/// The delayed work item that ages the neighbours.
const NEIGH_GC_WORK: u64 = 5;

/// What the interfaces of a port need to know of it: queried once, for the first interface
/// (querying a RoCE port takes RTNL, which child creation holds), and passed on to its
/// children.
#[derive(Clone, Copy)]
pub(crate) struct PortFacts {
    active: bool,
    active_mtu: Mtu,
    gid: wire::Gid,
    speed_mbps: u32,
}

impl PortFacts {
    /// Queries `port` of `device` (process context, without RTNL).
    pub(crate) fn query(device: &Device, port: u32) -> Result<Self> {
        let attr = device.port_attr(port)?;
        Ok(Self {
            active: attr.state() == kernel::rdma::device::PortState::Active,
            active_mtu: attr.active_mtu().ok_or(ENODEV)?,
            gid: wire::Gid(device.query_gid(port, GID_INDEX)?.0),
            speed_mbps: attr.speed_mbps(),
        })
    }
}

/// Where an interface stands among those of its port.
enum Role {
    /// The port's own interface (`ibN`), which may have children.
    Parent,
    /// A child interface of `parent`, whose datapath is `port`.
    Child {
        parent: ARef<NetDevice>,
        /// Kept for the port facts; the parent's list holds us in turn (see `child.rs`).
        port: Arc<UdPort>,
    },
}

/// The datagram-mode state of one interface.
#[pin_data(PinnedDrop)]
pub(crate) struct UdPort {
    /// Keeps the device registered while the datapath exists.
    device: DeviceRef,
    port: u32,
    facts: PortFacts,
    /// The partition, full-membership bit set.
    pkey: u16,
    /// Its index in the port's P_Key table; `None` while the table lacks it: the
    /// interface then exists but carries nothing (its queue pair is not made ready).
    pkey_index: Option<u16>,
    role: Role,
    #[pin]
    children: Children,
    /// Largest IPoIB payload (the IB MTU less the encapsulation header).
    pub(crate) mtu: u32,
    /// Sends in flight at most.
    pub(crate) send_ring: u32,
    /// Receive buffers kept posted on the UD queue pair.
    recv_ring: u32,
    /// Our hardware address: flags, UD QPN, GID.
    pub(crate) local: HwAddr,
    pub(crate) broadcast: HwAddr,
    pd: Arc<ProtectionDomain>,
    send_cq: Arc<CompletionQueue<CqEvents>>,
    recv_cq: Arc<CompletionQueue<CqEvents>>,
    qp: Pin<KBox<QueuePair>>,
    bcast_ah: Arc<AddressHandle>,
    /// The IP-level join RoCE needs for the broadcast group to reach the QP (none while the
    /// partition is missing).
    _bcast_member: Option<Ipv6McMembership>,
    #[pin]
    neigh: SpinLockBh<Neighbours>,
    /// Sends posted on the UD queue pair (under the `neigh` lock) and completed: the clock
    /// by which retired address handles are known to be unused.
    sends_posted: AtomicU64,
    sends_done: AtomicU64,
    /// Sends in flight on the UD queue pair and every transmit connection.
    credits: Arc<SendCredits>,
    /// Whether sends may gather page fragments (the device takes more than one segment).
    pub(crate) scatter_gather: bool,
    pub(crate) counters: Arc<Counters>,
    /// Connected mode, when the device offers it.
    cm: Option<Arc<ConnectedMode>>,
    /// `umcast`: groups user space joined through the subnet administrator are left to
    /// it. Without one (RoCE) there are none, so the setting changes nothing there.
    umcast: AtomicBool,
    /// Packets waiting for an address handle, with their destination GID. Address handles
    /// are made in process context (providers such as rxe may not make them in softirq
    /// context); NAPI sends the packets once the handle exists.
    #[pin]
    pending: SpinLockBh<KVec<Option<(wire::Gid, SkBuff)>>>,
    /// How many `pending` slots are used, so NAPI skips the table when none is.
    pending_count: AtomicUsize,
    #[pin]
    resolve_work: Work<UdPort, RESOLVE_WORK>,
    /// Groups of the multicast list, joined and left by `mcast_work`.
    #[pin]
    mcast: McastGroups,
    #[pin]
    mcast_work: Work<UdPort, MCAST_WORK>,
    napi: NapiHandle,
    /// Whether the port passes traffic, as last queried or reported by a port event. Kept
    /// here because querying a RoCE port takes RTNL, which `open` already holds.
    active: AtomicBool,
    /// NAPI saw a failed send or an unexpected flush: the queue pair may have failed.
    recovery_due: AtomicBool,
    /// Brings a failed queue pair back (a device may fail it when a send finds the port
    /// down; rxe does).
    #[pin]
    recover_work: Work<UdPort, RECOVER_WORK>,
    /// Queries the port again after a port event: not from the event handler, which runs
    /// under the core's event lock, nor from a work item flushed under RTNL (querying a
    /// RoCE port takes RTNL).
    #[pin]
    port_work: Work<UdPort, PORT_WORK>,
    /// Looks for the stalled sends after a transmit timeout.
    #[pin]
    stall_work: Work<UdPort, STALL_WORK>,
    /// Ages the neighbours, periodically while the interface is up.
    #[pin]
    neigh_gc: DelayedWork<UdPort, NEIGH_GC_WORK>,
    /// Whether the interface is up.
    up: AtomicBool,
    /// Link speed and receive coalescing, for ethtool.
    pub(crate) ethtool: EthtoolState,
    /// When the broadcast group was joined (ms, monotonic), for debugfs.
    #[cfg_attr(not(CONFIG_DEBUG_FS), allow(dead_code))]
    bcast_joined_ms: i64,
}

fn rdma_gid(g: &wire::Gid) -> Gid {
    Gid(g.0)
}

/// Scatter/gather entries a send asks for: a packet's linear part and each of its page
/// fragments, as far as `device` takes them (beyond, packets are linearised).
pub(crate) fn send_sges(device: &Device) -> u32 {
    device.max_send_sge().clamp(1, MAX_SKB_SEGMENTS as u32)
}

impl UdPort {
    /// Sets up datagram mode for the interface of `port` of `device`: PD, CQs driving
    /// `napi`, a ready UD QP, the broadcast group, posted receive buffers and the send
    /// credits. `maker` makes its children.
    pub(crate) fn new(
        device: &Device,
        port: u32,
        facts: &PortFacts,
        napi: &NapiHandle,
        maker: Maker,
    ) -> Result<Arc<Self>> {
        // The port's own partition is the first of its table, as in the C driver.
        let pkey = device.query_pkey(port, 0)? | wire::PKEY_FULL_MEMBER;
        let pkey_index = device.find_pkey(port, pkey)?;
        Self::build(
            device,
            port,
            facts,
            (pkey, pkey_index),
            napi,
            Role::Parent,
            Some(maker),
        )
    }

    /// Sets up the datapath of a child of `parent` (whose datapath is `this`) in partition
    /// `pkey`, under RTNL: the port facts come from the parent.
    pub(crate) fn new_child(
        this: &Arc<Self>,
        parent: &NetDevice,
        pkey: u16,
        napi: &NapiHandle,
    ) -> Result<Arc<Self>> {
        let pkey_index = this.device.find_pkey(this.port, pkey)?;
        let mut facts = this.facts;
        facts.active = this.port_active();
        facts.speed_mbps = this.ethtool.link_settings().speed_mbps;
        let role = Role::Child {
            parent: parent.into(),
            port: this.clone(),
        };
        Self::build(
            &this.device,
            this.port,
            &facts,
            (pkey, pkey_index),
            napi,
            role,
            None,
        )
    }

    fn build(
        device: &Device,
        port: u32,
        facts: &PortFacts,
        (pkey, pkey_index): (u16, Option<u16>),
        napi: &NapiHandle,
        role: Role,
        maker: Option<Maker>,
    ) -> Result<Arc<Self>> {
        let ib_mtu = facts.active_mtu.bytes();
        let mtu = ib_mtu - ENCAP_HEADER_LEN as u32;
        let gid = facts.gid;
        let pd = ProtectionDomain::new(device, crate::OWNER)?;
        let events = Arc::new(CqEvents::new(napi.clone()), GFP_KERNEL)?;
        // Sends in flight at most (the queue stops when all are used), and receive buffers
        // kept posted, on the UD queue pair and on the shared receive queue each.
        let (send_ring, recv_ring) = (params::send_queue_size(), params::recv_queue_size());
        let send_cq = CompletionQueue::new(device, send_ring + 1, 0, events.clone(), crate::OWNER)?;
        // The receive CQ takes connected mode's receives too.
        let cm_capable = params::CM_ENABLED.get();
        let base_cqe = 2 * recv_ring + 1;
        let nonsrq_max = if cm_capable {
            ConnectedMode::nonsrq_room(device, port, recv_ring, base_cqe)
        } else {
            0
        };
        let recv_cqe = base_cqe + nonsrq_max as u32 * recv_ring;
        let recv_cq = CompletionQueue::new(device, recv_cqe, 0, events, crate::OWNER)?;
        let max_send_sge = send_sges(device);
        let caps = QpCaps {
            max_send_wr: send_ring,
            max_recv_wr: recv_ring,
            max_send_sge,
            max_recv_sge: 1,
        };
        let qp = QueuePair::new(
            QpType::Ud,
            &pd,
            send_cq.clone(),
            recv_cq.clone(),
            None,
            caps,
            crate::OWNER,
        )?;
        if let Some(index) = pkey_index {
            qp.ready(port, index, wire::DEFAULT_QKEY)?;
        }
        let counters = Arc::new(Counters::default(), GFP_KERNEL)?;
        let credits = Arc::new(SendCredits::new(send_ring), GFP_KERNEL)?;
        let cm = if cm_capable {
            let made = ConnectedMode::new(
                device,
                port,
                qp.qp_num(),
                facts.active_mtu,
                PathResolver::new(port),
                (send_ring, recv_ring, nonsrq_max),
                &pd,
                recv_cq.clone(),
                credits.clone(),
                counters.clone(),
                napi,
            );
            match made {
                Ok(cm) => Some(cm),
                Err(e) => {
                    pr_warn!(
                        "{} port {}: connected mode unavailable ({:?})\n",
                        device.name(),
                        port,
                        e
                    );
                    None
                }
            }
        } else {
            None
        };
        // The flag tells peers we accept connections, whatever our own mode.
        let flags = if cm.is_some() {
            wire::FLAG_CONNECTED_MODE
        } else {
            0
        };
        let local = HwAddr::new(flags, qp.qp_num(), gid).map_err(|_| EINVAL)?;
        let broadcast = HwAddr::broadcast(pkey);
        let mgid = broadcast.gid();

        let member = match pkey_index {
            Some(_) => Some(Self::join_broadcast(device, port, &qp, &mgid)?),
            None => None,
        };
        // RoCE has no SA to answer a join with the group's record: it is made locally, as
        // the RDMA CM does, and gives the route (the group's Ethernet address, one hop).
        let port_gid = GidAttr::get(device, port, GID_INDEX)?;
        let record = McMemberRecord::roce(
            &rdma_gid(&mgid),
            &port_gid,
            wire::DEFAULT_QKEY,
            facts.active_mtu,
            1,
        );
        let bcast_ah = AddressHandle::new(&pd, &AhAttr::from_mcmember(device, port, &record)?)?;

        let recv_ring_posted = if pkey_index.is_some() { recv_ring } else { 0 };
        for _ in 0..recv_ring_posted {
            qp.post_recv(Self::recv_buffer(device)?)
                .map_err(|(e, _)| e)?;
        }
        let mut pending = KVec::with_capacity(PENDING_MAX, GFP_KERNEL)?;
        for _ in 0..PENDING_MAX {
            pending.push(None, GFP_KERNEL)?;
        }
        let device = device.get_ref()?;
        let mcast = McastGroups::new()?;
        let neigh = Neighbours::new()?;
        Arc::pin_init(
            pin_init!(Self {
                device,
                port,
                facts: *facts,
                pkey,
                pkey_index,
                role,
                children <- Children::new(maker),
                mtu,
                send_ring,
                recv_ring,
                local,
                broadcast,
                pd,
                send_cq,
                recv_cq,
                qp,
                bcast_ah,
                _bcast_member: member,
                neigh <- new_spinlock_bh!(neigh, "UdPort::neigh"),
                sends_posted: AtomicU64::new(0),
                sends_done: AtomicU64::new(0),
                credits,
                scatter_gather: max_send_sge > 1,
                counters,
                umcast: AtomicBool::new(false),
                cm,
                active: AtomicBool::new(facts.active),
                pending <- new_spinlock_bh!(pending, "UdPort::pending"),
                pending_count: AtomicUsize::new(0),
                resolve_work <- new_work!("UdPort::resolve_work"),
                mcast <- mcast,
                mcast_work <- new_work!("UdPort::mcast_work"),
                napi: napi.clone(),
                recovery_due: AtomicBool::new(false),
                recover_work <- new_work!("UdPort::recover_work"),
                port_work <- new_work!("UdPort::port_work"),
                stall_work <- new_work!("UdPort::stall_work"),
                neigh_gc <- new_delayed_work!("UdPort::neigh_gc"),
                up: AtomicBool::new(false),
                ethtool: EthtoolState::new(facts.speed_mbps),
                bcast_joined_ms: now_ms(),
            }),
            GFP_KERNEL,
        )
    }

    /// Attaches `qp` to the broadcast group `mgid` and joins it at the IP level, which RoCE
    /// needs for the group's traffic to reach the port.
    fn join_broadcast(
        device: &Device,
        port: u32,
        qp: &QueuePair,
        mgid: &wire::Gid,
    ) -> Result<Ipv6McMembership> {
        qp.attach_mcast(&rdma_gid(mgid), 0)?;
        let member = device
            .netdev(port)
            .and_then(|ndev| Ipv6McMembership::join(&ndev, &mgid.0));
        if member.is_err() {
            let _ = qp.detach_mcast(&rdma_gid(mgid), 0);
        }
        member
    }

    /// The interface's partition, full-membership bit set.
    pub(crate) fn pkey(&self) -> u16 {
        self.pkey
    }

    /// Whether the port's P_Key table has the interface's partition.
    pub(crate) fn has_partition(&self) -> bool {
        self.pkey_index.is_some()
    }

    /// Whether the interface carries traffic: its port is up and its partition there.
    pub(crate) fn carrier_ready(&self) -> bool {
        self.port_active() && self.has_partition()
    }

    /// The interface's children (none for a child).
    pub(crate) fn children(&self) -> &Children {
        &self.children
    }

    /// The interface a child was made on; `None` for a port's own interface.
    pub(crate) fn parent(&self) -> Option<&NetDevice> {
        match &self.role {
            Role::Parent => None,
            Role::Child { parent, .. } => Some(parent),
        }
    }

    /// The datapath of the interface a child was made on.
    pub(crate) fn parent_port(&self) -> Option<&Arc<UdPort>> {
        match &self.role {
            Role::Parent => None,
            Role::Child { port, .. } => Some(port),
        }
    }

    /// A receive buffer: GRH space and the largest datagram.
    fn recv_buffer(device: &Device) -> Result<DmaBuffer> {
        DmaBuffer::new(
            device,
            UD_GRH_LEN + MAX_IB_MTU,
            DmaDirection::FromDevice,
            GFP_KERNEL,
        )
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
    /// entries stay valid) and fresh receive buffers. Multicast attachments stay.
    fn recover(&self) {
        let Some(pkey_index) = self.pkey_index else {
            return;
        };
        let name = self.device.name();
        let state = match self.qp.state() {
            Ok(state) => state,
            Err(e) => {
                pr_warn!(
                    "{} port {}: cannot query the UD queue pair ({:?})\n",
                    name,
                    self.port,
                    e
                );
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
                pr_info!(
                    "{} port {}: UD queue pair recovered from {:?}\n",
                    name,
                    self.port,
                    state
                )
            }
            Err(e) => pr_err!(
                "{} port {}: UD queue pair stuck in {:?} ({:?})\n",
                name,
                self.port,
                state,
                e
            ),
        }
        self.napi.schedule();
    }

    /// Resets the failed UD queue pair and brings it up with its receive ring full again.
    fn reset_qp(&self, pkey_index: u16) -> Result {
        let mut kept = KVec::new();
        self.qp.reset(
            |sent| {
                self.sends_done.fetch_add(1, Ordering::Relaxed);
                self.credits.give(1);
                drop(sent);
            },
            |buf| {
                // A buffer that finds no room here is freed; a fresh one replaces it.
                let _ = kept.push(buf, GFP_KERNEL);
            },
        )?;
        self.qp.ready(self.port, pkey_index, wire::DEFAULT_QKEY)?;
        // NAPI may repost a buffer it took just before the reset: count what is posted.
        let wanted = self.recv_ring as usize;
        let mut kept = kept.into_iter();
        while self.qp.recvs_posted() < wanted {
            let buf = match kept.next() {
                Some(buf) => buf,
                None => Self::recv_buffer(&self.device)?,
            };
            self.qp.post_recv(buf).map_err(|(e, _)| e)?;
        }
        Ok(())
    }

    /// Handles the watchdog's report that the transmit queue stayed stopped (atomic
    /// context): the stalled sends are looked for in process context.
    pub(crate) fn tx_timeout(this: ArcBorrow<'_, Self>, dev: &NetDevice) {
        bump(&this.counters.tx_timeouts, 1);
        pr_warn!(
            "{}: transmit timeout: queue stopped with {} sends in flight\n",
            dev.name(),
            this.credits.in_use()
        );
        let _ = workqueue::system().enqueue::<_, STALL_WORK>(Arc::<Self>::from(this));
    }

    /// After a transmit timeout: the UD queue pair is checked, and the connections whose
    /// sends stalled for as long are closed, which returns their credits. The C driver
    /// restarts the whole interface instead.
    fn unstall(self: &Arc<Self>) {
        // By the recovery work item, which must not run twice at once.
        Self::schedule_recovery(self.as_arc_borrow());
        if let Some(cm) = &self.cm {
            cm.fail_stalled(now_ms() - i64::from(TX_TIMEOUT_MS));
        }
        self.napi.schedule();
    }

    /// Waits for every work item of the interface (once it is unregistered).
    pub(crate) fn flush_work(&self) {
        self.stall_work.flush();
        self.resolve_work.flush();
        self.mcast_work.flush();
        self.recover_work.flush();
        self.port_work.flush();
        while self.neigh_gc.flush() {}
    }

    /// Sends `skb`, which starts with the pseudo header (destination hardware address) and
    /// the encapsulation header that `header_create` pushed. A unicast destination without
    /// an address handle yet waits in `pending` while the resolve work makes one.
    pub(crate) fn xmit(this: ArcBorrow<'_, Self>, mut skb: SkBuff, dev: &NetDevice) {
        let c = &this.counters;
        let mut hdr = [0u8; HWADDR_LEN];
        // Without its partition the queue pair is not ready (and the carrier off).
        if !this.has_partition() || skb.copy_bits(0, &mut hdr).is_err() {
            bump(&c.tx_dropped, 1);
            return;
        }
        let Ok(dest) = HwAddr::from_bytes(&hdr) else {
            bump(&c.tx_dropped, 1);
            return;
        };
        if !dest.is_multicast() && dest.connected_mode() && this.connected() {
            if let Some(cm) = &this.cm {
                ConnectedMode::xmit(cm.as_arc_borrow(), skb, &dest, dev);
                return;
            }
        }
        let Some(len) = this.sendable_len(&mut skb) else {
            return;
        };
        // Every send through a neighbour's handle is posted under the table's lock, so that
        // a handle the table retires is known to be unused once as many sends completed as
        // were posted by then (see `neigh.rs`).
        let mut neigh = this.neigh.lock();
        if dest.gid() == this.broadcast.gid() {
            this.post(skb, &dest, &this.bcast_ah, len, dev);
            return;
        }
        // Unicast, or a multicast group sent to without joining (RoCE needs no join to
        // send): an address handle per GID, made in process context.
        match neigh.get(&dest.gid().0, now_ms()) {
            Some(ah) => this.post(skb, &dest, ah, len, dev),
            None => {
                drop(neigh);
                this.hold_for_resolution(dest.gid(), skb);
                let _ = workqueue::system().enqueue::<_, RESOLVE_WORK>(Arc::<Self>::from(this));
            }
        }
    }

    /// Keeps `skb` until `gid` has an address handle; drops it when too many wait.
    fn hold_for_resolution(&self, gid: wire::Gid, skb: SkBuff) {
        let mut pending = self.pending.lock();
        match pending.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => {
                *slot = Some((gid, skb));
                self.pending_count.fetch_add(1, Ordering::Relaxed);
            }
            None => bump(&self.counters.tx_dropped, 1),
        }
    }

    /// The length of the message `skb` carries after its pseudo header, if it fits a
    /// datagram; otherwise drops it, counted. From the transmit path only (see
    /// `TxConnection::post` on reporting the path MTU).
    fn sendable_len(&self, skb: &mut SkBuff) -> Option<u32> {
        let c = &self.counters;
        let Some(len) = skb.len().checked_sub(HWADDR_LEN as u32) else {
            bump(&c.tx_dropped, 1);
            return None;
        };
        // rxe drops an oversize UD send while reporting success: enforce the MTU here. In
        // connected mode the stack may send more toward a peer reached over UD: tell it the
        // path MTU, as a router would.
        if len > self.mtu + ENCAP_HEADER_LEN as u32 {
            let _ = skb.report_too_big(self.mtu);
            bump(&c.tx_dropped, 1);
            return None;
        }
        Some(len)
    }

    /// Posts the `len` bytes `skb` carries after its pseudo header to `dest` through `ah`,
    /// from the packet's own memory. Called with the neighbour table locked.
    fn post(&self, skb: SkBuff, dest: &HwAddr, ah: &Arc<AddressHandle>, len: u32, dev: &NetDevice) {
        let c = &self.counters;
        if !self.credits.take(dev) {
            bump(&c.tx_dropped, 1);
            return;
        }
        let offset = HWADDR_LEN as u32;
        match self
            .qp
            .post_skb_ud(skb, offset, ah, dest.qpn(), wire::DEFAULT_QKEY)
        {
            Ok(()) => {
                self.sends_posted.fetch_add(1, Ordering::Relaxed);
                bump(&c.tx_packets, 1);
                bump(&c.tx_bytes, u64::from(len));
            }
            Err((_, skb)) => {
                self.credits.give(1);
                drop(skb);
                bump(&c.tx_errors, 1);
            }
        }
    }

    /// Sends the held packets whose address handles now exist (from NAPI).
    fn send_pending(&self, dev: &NetDevice) {
        if self.pending_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut neigh = self.neigh.lock();
        let mut pending = self.pending.lock();
        let now = now_ms();
        for slot in pending.iter_mut() {
            let Some(gid) = slot.as_ref().map(|(gid, _)| gid.0) else {
                continue;
            };
            let Some(ah) = neigh.get(&gid, now) else {
                continue;
            };
            let Some((_, skb)) = slot.take() else {
                continue;
            };
            self.pending_count.fetch_sub(1, Ordering::Relaxed);
            let mut hdr = [0u8; HWADDR_LEN];
            let dest = skb
                .copy_bits(0, &mut hdr)
                .map(|()| HwAddr::from_bytes(&hdr));
            let Ok(Ok(dest)) = dest else {
                bump(&self.counters.tx_dropped, 1);
                continue;
            };
            // Its size was checked when it was held.
            let len = skb.len().saturating_sub(HWADDR_LEN as u32);
            self.post(skb, &dest, ah, len, dev);
        }
    }

    /// Makes the address handles held packets wait for (process context).
    fn resolve(&self) {
        let mut wanted: [Option<wire::Gid>; PENDING_MAX] = [None; PENDING_MAX];
        {
            let pending = self.pending.lock();
            for (i, slot) in pending.iter().enumerate() {
                if let Some(w) = wanted.get_mut(i) {
                    *w = slot.as_ref().map(|(gid, _)| *gid);
                }
            }
        }
        for (i, gid) in wanted.iter().enumerate() {
            let Some(gid) = gid else { continue };
            if wanted[..i].contains(&Some(*gid)) || self.neigh.lock().contains(&gid.0) {
                continue;
            }
            // Multicast stays on the link; a unicast MAC is resolved when the handle is made.
            let (hops, dmac) = if gid.is_multicast() {
                (1, wire::multicast_mac(gid))
            } else {
                (64, [0; 6])
            };
            let attr = AhAttr::roce(self.port, GID_INDEX as u8, &rdma_gid(gid), hops, dmac);
            let made = AddressHandle::new(&self.pd, &attr)
                .and_then(|ah| Neighbours::node(gid.0, ah, now_ms()))
                .map(|node| {
                    let mut neigh = self.neigh.lock();
                    let posted = self.sends_posted.load(Ordering::Relaxed);
                    neigh.insert(&gid.0, node, posted)
                });
            match &made {
                Ok(None) => crate::params::ipoib_dbg!(
                    "{} port {}: address handle made for {}\n",
                    self.device.name(),
                    self.port,
                    crate::debugfs::GidText(&gid.0)
                ),
                Err(e) => crate::params::ipoib_dbg!(
                    "{} port {}: no address handle for {} ({:?})\n",
                    self.device.name(),
                    self.port,
                    crate::debugfs::GidText(&gid.0),
                    e
                ),
                Ok(Some(_)) => {}
            }
            // A handle made twice is dropped here, outside the lock, never used.
            if let Err(_) | Ok(Some(_)) = made {
                // No route: the packets for it go.
                let mut pending = self.pending.lock();
                for slot in pending.iter_mut() {
                    if slot.as_ref().is_some_and(|(g, _)| g == gid) {
                        *slot = None;
                        self.pending_count.fetch_sub(1, Ordering::Relaxed);
                        bump(&self.counters.tx_errors, 1);
                    }
                }
            }
        }
        self.napi.schedule();
    }

    /// Drops every held packet (the interface goes down).
    pub(crate) fn drop_pending(&self) {
        let mut pending = self.pending.lock();
        for slot in pending.iter_mut() {
            *slot = None;
        }
        self.pending_count.store(0, Ordering::Relaxed);
    }

    /// Hands one received datagram to the stack, or drops it.
    fn receive(&self, wc: &WorkCompletion, buf: &DmaBuffer, napi: &Napi) {
        let c = &self.counters;
        let len = wc.byte_len() as usize;
        let Some(msg) = buf.as_slice().get(UD_GRH_LEN..len) else {
            bump(&c.rx_errors, 1);
            return;
        };
        // The GRH space holds the sender's GID at bytes 8..24 (an IPv6 header on RoCE v2
        // over IPv6). Our own multicast comes back to us: drop it.
        let grh = &buf.as_slice()[..UD_GRH_LEN];
        if wc.src_qp() == self.local.qpn() && grh[8..24] == self.local.gid().0 {
            return;
        }
        let dgid = &grh[24..40];
        let pkt_type = if !wc.has_grh() || dgid[0] != 0xff {
            PacketType::Host
        } else if dgid == self.broadcast.gid().0 {
            PacketType::Broadcast
        } else {
            PacketType::Multicast
        };
        if pkt_type != PacketType::Host {
            bump(&c.multicast, 1);
        }
        rx::deliver(msg, pkt_type, napi, c);
    }

    /// Handles up to `budget` receives and all send completions; returns the receives done.
    pub(crate) fn poll(&self, napi: &Napi, budget: u32) -> u32 {
        let dev = napi.device();
        // Send completions free their packets, return credits and restart a stopped queue.
        loop {
            let mut wcs = [const { WorkCompletion::new() }; POLL_BATCH];
            let n = self.send_cq.poll(&mut wcs).unwrap_or(0);
            for wc in &wcs[..n] {
                if let Some(sent) = self.qp.complete_send(wc) {
                    self.sends_done.fetch_add(1, Ordering::Relaxed);
                    self.credits.give(1);
                    match wc.status() {
                        WcStatus::Success => sent.consume(),
                        // Failed or flushed: either way the queue pair may have failed,
                        // have it checked. The packet is freed as a drop.
                        status => {
                            let c = &self.counters;
                            let counter = match status {
                                WcStatus::Error(_) => &c.tx_errors,
                                _ => &c.tx_dropped,
                            };
                            bump(counter, 1);
                            self.recovery_due.store(true, Ordering::Relaxed);
                        }
                    }
                }
            }
            if n < POLL_BATCH {
                break;
            }
        }
        self.send_pending(dev);
        let mut again = match &self.cm {
            Some(cm) => cm.poll_tx(dev),
            None => false,
        };
        self.credits.wake_if_room(dev);

        let mut done = 0u32;
        while done < budget {
            let want = (budget - done).min(POLL_BATCH as u32) as usize;
            let mut wcs = [const { WorkCompletion::new() }; POLL_BATCH];
            let n = self.recv_cq.poll(&mut wcs[..want]).unwrap_or(0);
            for wc in &wcs[..n] {
                let Some(buf) = self.qp.complete_recv(wc) else {
                    // Not the UD queue pair's: a receive connection's, from the SRQ.
                    if let Some(cm) = &self.cm {
                        cm.receive(wc, napi);
                    }
                    continue;
                };
                match wc.status() {
                    WcStatus::Success => self.receive(wc, &buf, napi),
                    // The queue pair failed: its buffers go, and it is brought back.
                    WcStatus::Flushed => {
                        self.recovery_due.store(true, Ordering::Relaxed);
                        continue;
                    }
                    WcStatus::Error(_) => bump(&self.counters.rx_errors, 1),
                }
                if self.qp.post_recv(buf).is_err() {
                    bump(&self.counters.rx_errors, 1);
                }
            }
            done += n as u32;
            if n < want {
                break;
            }
        }
        if done < budget && napi.complete_done(done) {
            // Re-arm both queues; completions that slipped in meanwhile need another round.
            let missed_rx = self.recv_cq.request_notify().unwrap_or(true);
            let missed_tx = self.send_cq.request_notify().unwrap_or(true);
            again |= missed_rx || missed_tx;
        } else {
            again = false;
        }
        if again {
            napi.schedule_again();
        }
        done
    }

    /// Arms both completion queues (when the interface comes up).
    pub(crate) fn arm(&self) {
        let _ = self.recv_cq.request_notify();
        let _ = self.send_cq.request_notify();
    }

    /// The multicast groups for debugfs (`<if>_mcg`): the broadcast group, the joined ones,
    /// then the ones sent to without joining (with their last use as creation time).
    #[cfg(CONFIG_DEBUG_FS)]
    pub(crate) fn show_groups(&self, out: &mut impl core::fmt::Write) -> core::fmt::Result {
        use crate::debugfs::write_group;
        let mut result = write_group(out, &self.broadcast.gid().0, self.bcast_joined_ms, false);
        self.mcast.for_each_joined(|mgid, joined_ms| {
            if result.is_ok() {
                result = write_group(out, &mgid.0, joined_ms, false);
            }
        });
        self.neigh.lock().for_each(|gid, used| {
            if result.is_ok() && wire::Gid(*gid).is_multicast() {
                result = write_group(out, gid, used, true);
            }
        });
        result
    }

    /// The unicast destinations for debugfs (`<if>_path`), in the C driver's format: each
    /// has an address handle (on RoCE no LID or SL applies), with its idle time.
    #[cfg(CONFIG_DEBUG_FS)]
    pub(crate) fn show_paths(
        &self,
        out: &mut impl core::fmt::Write,
        now: i64,
    ) -> core::fmt::Result {
        use crate::debugfs::GidText;
        let neigh = self.neigh.lock();
        let mut result = Ok(());
        neigh.for_each(|gid, used| {
            if result.is_ok() && !wire::Gid(*gid).is_multicast() {
                result = write!(
                    out,
                    "GID: {}\n  complete: {:>6}\n  idle: {:>10} ms\n\n",
                    GidText(gid),
                    "yes",
                    now - used
                );
            }
        });
        result
    }

    /// The connections for debugfs (`<if>_cm`), one line each.
    #[cfg(CONFIG_DEBUG_FS)]
    pub(crate) fn show_connections(
        &self,
        out: &mut impl core::fmt::Write,
        now: i64,
    ) -> core::fmt::Result {
        match &self.cm {
            Some(cm) => cm.show_connections(out, now),
            None => Ok(()),
        }
    }

    /// Applies `ethtool -C` to the receive CQ.
    pub(crate) fn set_coalesce(&self, wanted: Coalesce, name: &CStr) -> Result {
        self.ethtool.set_coalesce(&self.recv_cq, wanted, name)
    }

    /// Has the port queried again (after a port event), from a work item.
    pub(crate) fn refresh_port(this: ArcBorrow<'_, Self>) {
        let _ = workqueue::system().enqueue::<_, PORT_WORK>(Arc::<Self>::from(this));
    }

    /// Whether the port passes traffic.
    pub(crate) fn port_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Records a port event's news.
    pub(crate) fn set_port_active(&self, active: bool) {
        self.active.store(active, Ordering::Relaxed);
    }

    /// Forgets all destinations (addresses changed).
    pub(crate) fn flush_neighbours(&self) {
        self.retire_neighbours(i64::MAX);
    }

    /// Retires the neighbours unused since `deadline`, then drops the retired handles no
    /// send refers to any more (process context).
    fn retire_neighbours(&self, deadline: i64) {
        {
            let mut neigh = self.neigh.lock();
            let posted = self.sends_posted.load(Ordering::Relaxed);
            neigh.retire_idle(deadline, posted);
        }
        loop {
            let mut out = [const { None }; REAP_BATCH];
            let done = self.sends_done.load(Ordering::Relaxed);
            let n = self.neigh.lock().take_reapable(done, &mut out);
            // Destroyed here, in process context, without the lock.
            drop(out);
            if n < REAP_BATCH {
                break;
            }
        }
    }

    /// The pace of neighbour ageing: the ARP table's collection interval, at least 1 s.
    fn neigh_gc_ms() -> u32 {
        neigh::arp_gc_interval_ms().max(1000)
    }

    fn schedule_neigh_gc(self: &Arc<Self>) {
        let delay = msecs_to_jiffies(Self::neigh_gc_ms());
        let _ = workqueue::system().enqueue_delayed::<_, NEIGH_GC_WORK>(self.clone(), delay);
    }

    /// Forgets destinations unused for two collection intervals (the delayed work item),
    /// then runs again while the interface is up.
    fn collect_neighbours(self: &Arc<Self>) {
        self.retire_neighbours(now_ms() - 2 * i64::from(Self::neigh_gc_ms()));
        if self.up.load(Ordering::Acquire) {
            self.schedule_neigh_gc();
        }
    }

    pub(crate) fn fill_stats(&self, stats: &mut Stats64) {
        self.counters.fill(stats);
    }

    /// Fills the values of `ethtool -S`.
    pub(crate) fn fill_ethtool_stats(&self, values: &mut [u64]) {
        let (cm_tx_connections, cm_rx_connections) =
            self.cm.as_ref().map_or((0, 0), |cm| cm.connection_counts());
        let gauges = Gauges {
            neighbours: self.neigh.lock().len() as u64,
            queue_stopped: self.credits.stops(),
            cm_tx_connections,
            cm_rx_connections,
        };
        self.counters.fill_ethtool(&gauges, values);
    }

    /// What `ethtool -i` shows: the driver, and the RDMA device with its firmware.
    pub(crate) fn fill_drvinfo(&self, info: &mut DrvInfo) {
        info.set_driver(c_str!("ib_ipoib"));
        info.set_version(c_str!("1.0.0"));
        let mut fw = [0u8; FW_VERSION_LEN];
        info.set_fw_version(self.device.fw_version(&mut fw));
        info.set_bus_info(self.device.name().as_bytes());
    }

    /// The `umcast` setting.
    pub(crate) fn umcast(&self) -> bool {
        self.umcast.load(Ordering::Relaxed)
    }

    /// Changes the `umcast` setting; returns whether it changed.
    pub(crate) fn set_umcast(&self, on: bool) -> bool {
        self.umcast.swap(on, Ordering::Relaxed) != on
    }

    /// Whether unicast to peers that offer it goes over connections.
    pub(crate) fn connected(&self) -> bool {
        self.cm.as_ref().is_some_and(|cm| cm.in_use())
    }

    /// Switches between datagram and connected mode, as a write to the `mode` file asks.
    pub(crate) fn set_mode(&self, dev: &NetDevice, rtnl: &Rtnl, connected: bool) -> Result {
        if connected == self.connected() {
            return Ok(());
        }
        let Some(cm) = &self.cm else {
            pr_info!(
                "{}: connected mode not supported by the device\n",
                dev.name()
            );
            return Err(EINVAL);
        };
        cm.switch(dev, rtnl, connected, self.mtu)
    }

    /// The largest MTU the interface takes in its current mode.
    pub(crate) fn max_mtu(&self) -> u32 {
        if self.connected() {
            CM_MTU
        } else {
            self.mtu
        }
    }

    /// The largest MTU of any mode the interface offers.
    pub(crate) fn mode_max_mtu(&self) -> u32 {
        if self.cm.is_some() {
            CM_MTU
        } else {
            self.mtu
        }
    }

    /// Takes the multicast list in (atomic context): its groups are joined and left by the
    /// multicast work item. The broadcast group is always joined.
    pub(crate) fn set_multicast_list(this: ArcBorrow<'_, Self>, dev: &NetDevice, mc: &McAddrs<'_>) {
        let mut groups = [wire::Gid::default(); crate::mcast::MAX_GROUPS + 1];
        let mut n = 0;
        let mut extra = 0;
        mc.for_each(|addr| {
            let Ok(a) = HwAddr::from_bytes(addr) else {
                return;
            };
            if a.gid() == this.broadcast.gid() || !a.is_multicast() {
                return;
            }
            match groups.get_mut(n) {
                Some(slot) => {
                    *slot = a.gid();
                    n += 1;
                }
                None => extra += 1,
            }
        });
        let excess = this.mcast.set_wanted(groups[..n].iter().copied(), || {
            let _ = workqueue::system().enqueue::<_, MCAST_WORK>(Arc::<Self>::from(this));
        }) + extra;
        if excess > 0 {
            pr_warn!(
                "{}: {} multicast groups beyond {} not joined\n",
                dev.name(),
                excess,
                crate::mcast::MAX_GROUPS
            );
        }
    }

    /// Joins and leaves groups as the multicast list asks (process context).
    fn sync_multicast(&self) {
        let ndev = match self.device.netdev(self.port) {
            Ok(ndev) => ndev,
            Err(e) => {
                pr_warn!(
                    "{} port {}: no Ethernet device for multicast ({:?})\n",
                    self.device.name(),
                    self.port,
                    e
                );
                return;
            }
        };
        let failed = self.mcast.sync(
            |mgid| {
                self.qp.attach_mcast(&rdma_gid(mgid), 0)?;
                match Ipv6McMembership::join(&ndev, &mgid.0) {
                    Ok(member) => {
                        crate::params::ipoib_dbg_mcast!(
                            "{} port {}: joined multicast group {}\n",
                            self.device.name(),
                            self.port,
                            crate::debugfs::GidText(&mgid.0)
                        );
                        Ok(Joined::new(*mgid, member))
                    }
                    Err(e) => {
                        let _ = self.qp.detach_mcast(&rdma_gid(mgid), 0);
                        Err(e)
                    }
                }
            },
            |mgid| {
                let _ = self.qp.detach_mcast(&rdma_gid(mgid), 0);
                crate::params::ipoib_dbg_mcast!(
                    "{} port {}: left multicast group {}\n",
                    self.device.name(),
                    self.port,
                    crate::debugfs::GidText(&mgid.0)
                );
            },
        );
        if failed > 0 {
            pr_warn!(
                "{} port {}: {} multicast joins failed\n",
                self.device.name(),
                self.port,
                failed
            );
        }
    }

    /// The interface comes up: completions armed, connections accepted.
    pub(crate) fn start(this: ArcBorrow<'_, Self>) -> Result {
        let this: Arc<Self> = this.into();
        this.arm();
        this.mcast.open();
        this.up.store(true, Ordering::Release);
        this.schedule_neigh_gc();
        if let Some(cm) = &this.cm {
            cm.start()?;
        }
        Ok(())
    }

    /// The interface goes down: held packets dropped, connections destroyed, and no work
    /// left running.
    pub(crate) fn stop(&self) {
        self.mcast.close();
        self.mcast_work.flush();
        self.up.store(false, Ordering::Release);
        // A run under way may queue itself once more: flush until idle.
        while self.neigh_gc.flush() {}
        self.mcast.leave_all(|mgid| {
            let _ = self.qp.detach_mcast(&rdma_gid(mgid), 0);
        });
        self.drop_pending();
        if let Some(cm) = &self.cm {
            cm.stop();
        }
        self.resolve_work.flush();
        self.recover_work.flush();
        self.stall_work.flush();
        self.drop_pending();
    }
}

impl_has_work! {
    impl HasWork<Self, RESOLVE_WORK> for UdPort { self.resolve_work }
}

impl WorkItem<RESOLVE_WORK> for UdPort {
    type Pointer = Arc<UdPort>;

    fn run(this: Arc<UdPort>) {
        this.resolve();
    }
}

impl_has_work! {
    impl HasWork<Self, MCAST_WORK> for UdPort { self.mcast_work }
}

impl WorkItem<MCAST_WORK> for UdPort {
    type Pointer = Arc<UdPort>;

    fn run(this: Arc<UdPort>) {
        this.sync_multicast();
    }
}

impl_has_work! {
    impl HasWork<Self, RECOVER_WORK> for UdPort { self.recover_work }
}

impl_has_work! {
    impl HasWork<Self, PORT_WORK> for UdPort { self.port_work }
}

impl WorkItem<PORT_WORK> for UdPort {
    type Pointer = Arc<UdPort>;

    fn run(this: Arc<UdPort>) {
        this.ethtool.refresh(&this.device, this.port);
        this.children
            .for_each(|c| c.datapath().ethtool.copy_speed(&this.ethtool));
    }
}

impl WorkItem<RECOVER_WORK> for UdPort {
    type Pointer = Arc<UdPort>;

    fn run(this: Arc<UdPort>) {
        this.recover();
    }
}

impl_has_work! {
    impl HasWork<Self, STALL_WORK> for UdPort { self.stall_work }
}

impl WorkItem<STALL_WORK> for UdPort {
    type Pointer = Arc<UdPort>;

    fn run(this: Arc<UdPort>) {
        this.unstall();
    }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, NEIGH_GC_WORK> for UdPort { self.neigh_gc }
}

impl WorkItem<NEIGH_GC_WORK> for UdPort {
    type Pointer = Arc<UdPort>;

    fn run(this: Arc<UdPort>) {
        this.collect_neighbours();
    }
}

#[pinned_drop]
impl PinnedDrop for UdPort {
    fn drop(self: Pin<&mut Self>) {
        let mgid = rdma_gid(&self.broadcast.gid());
        let _ = self.qp.detach_mcast(&mgid, 0);
    }
}
