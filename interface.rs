// SPDX-License-Identifier: GPL-2.0

//! The interface: the state of one IPoIB interface (`ibN`, or a child in a partition of its
//! own), the C driver's `struct ipoib_dev_priv`, and what it decides.
//!
//! It owns its parts, each a type of its own file that does not know it: the datagram
//! datapath (`ipoib_ud.rs`), connected mode (`ipoib_cm.rs`), multicast (`mcast.rs`), the
//! destinations with their address handles (`neigh.rs`) and their resolution (`path.rs`),
//! its children (`child.rs`). Here it sets them up and takes them up and down, chooses for
//! each packet between a connection and a datagram, drives NAPI across them, and switches
//! modes. Port events and the flushes they cause are in `events.rs`; the net_device glue
//! (`netdev.rs`) calls in here.

use crate::{
    child::{Children, Maker, Role},
    cq::NapiHandles,
    debugfs::{DebugName, DebugView},
    ethtool::{self, EthtoolState},
    fabric::{Answered, SaOwner, SaPort},
    flush::{Flush, PendingFlushes},
    ipoib_cm::ConnectedMode,
    ipoib_ud::{send_sges, Completions, UdConfig, UdDatapath},
    local_gid::LocalGid,
    log_name::LogName,
    mcast::{Multicast, SaJoiner, SyncReport},
    params,
    partition::PartitionIndex,
    path::{PathResolver, Paths, GID_INDEX},
    send_credits::SendCredits,
    stats::{now_ms, Counters, Gauges, Tally},
    wire::{
        self, EncapHeader, EtherType, HwAddr, CM_MTU, ENCAP_HEADER_LEN, HARD_HEADER_LEN, HWADDR_LEN,
    },
};
use core::{
    fmt::{self, Write},
    sync::atomic::{AtomicBool, Ordering},
};
use kernel::{
    net::{
        dev::{McAddrs, NetDevice},
        ethtool::{Coalesce, DrvInfo},
        napi::{Budget, Napi, NapiHandle, Polled},
        rtnl::{Rtnl, RtnlGuard},
        skb::{DropReason, SkBuff},
    },
    new_mutex, new_spinlock,
    prelude::*,
    rdma::{
        device::{Device, DeviceRef, Mtu, PortState, Protocol},
        pd::ProtectionDomain,
        sa::SaClient,
    },
    sync::{Arc, ArcBorrow, Mutex, SpinLock},
    time::msecs_to_jiffies,
    types::ARef,
    workqueue::{
        self, impl_has_delayed_work, impl_has_work, new_delayed_work, new_work, DelayedWork, Work,
        WorkItem,
    },
};

/// How long the transmit queue may stay stopped before the stalled sends are looked for: a
/// fifth of the C driver's 10 s, since only the stalled connections are closed here.
pub(crate) const TX_TIMEOUT_MS: u32 = 2000;

/// The work item that makes the address handles held packets wait for.
pub(crate) const RESOLVE_WORK: u64 = 0;
/// The work item that joins and leaves the groups of the multicast list.
pub(crate) const MCAST_WORK: u64 = 1;
/// The work item that queries the port again after a port event (`events.rs`).
pub(crate) const PORT_WORK: u64 = 2;
/// The work item that looks for stalled sends after a transmit timeout.
pub(crate) const STALL_WORK: u64 = 3;
/// The delayed work item that ages the destinations (`events.rs`).
pub(crate) const NEIGH_GC_WORK: u64 = 4;
/// The delayed work item that retries failed multicast joins (InfiniBand).
const MCAST_RETRY_WORK: u64 = 5;
/// The work item that brings the net_device in line with the fabric (InfiniBand): the MTU
/// of the broadcast group, the address with a new GID. It takes RTNL, so it is not flushed
/// when the interface goes down (`ndo_stop` holds RTNL).
pub(crate) const RTNL_WORK: u64 = 6;
/// The work item that waits for the work of deleted children, then lets them go
/// ([`Children::reap`]).
const CHILD_REAP_WORK: u64 = 7;

/// What the interfaces of a port need to know of it: queried once, for the first interface
/// (querying a RoCE port takes RTNL, which child creation holds), and passed on to its
/// children.
#[derive(Clone, Copy)]
pub(crate) struct PortFacts {
    active: bool,
    active_mtu: Mtu,
    /// The largest MTU the port supports: bounds what datagram mode may be asked for.
    max_mtu: Mtu,
    gid: wire::Gid,
    speed_mbps: u32,
    lid: u16,
}

impl PortFacts {
    /// Queries `port` of `device` (process context, without RTNL).
    pub(crate) fn query(device: &Device, port: u32) -> Result<Self> {
        let attr = device.port_attr(port)?;
        let active_mtu = attr.active_mtu().ok_or(ENODEV)?;
        Ok(Self {
            active: attr.state() == PortState::Active,
            active_mtu,
            max_mtu: attr.max_mtu().map_or(active_mtu, |max| max.max(active_mtu)),
            gid: wire::Gid(device.query_gid(port, GID_INDEX)?.0),
            speed_mbps: attr.speed_mbps(),
            lid: attr.lid() as u16,
        })
    }
}

/// One IPoIB interface. Named for what it is rather than, as in C, for the net_device's
/// private area it lives in: the net_device's operations reach it as their data.
///
/// Fields without a lock are set once or atomic. `events.rs` reaches the fields marked
/// `pub(crate)` too.
#[pin_data(PinnedDrop)]
pub(crate) struct Interface {
    /// Keeps the device registered while the interface exists.
    pub(crate) device: DeviceRef,
    pub(crate) port: u32,
    /// How log lines name the interface (`events.rs` logs too).
    pub(crate) log_name: Arc<LogName>,
    facts: PortFacts,
    /// The port's subnet administrator (InfiniBand); `None` on RoCE.
    sa: Option<Arc<SaPort>>,
    /// The partition, full-membership bit set.
    pkey: u16,
    /// Its index in the port's P_Key table, re-read after P_Key changes; while the table
    /// lacks it the interface exists but carries nothing (its queue pair is not made
    /// ready). Shared with the datapath and connected mode.
    partition: Arc<PartitionIndex>,
    role: Role<Interface>,
    #[pin]
    children: Children<Interface>,
    /// Largest IPoIB payload of a datagram (the port's IB MTU less the encapsulation
    /// header): the interface's first MTU. The datapath's may be lower (the broadcast
    /// group's).
    pub(crate) mtu: u32,
    /// Largest MTU datagram mode may be asked for (the port's largest IB MTU less the
    /// encapsulation header, as C's `IPOIB_UD_MTU(max_ib_mtu)`): the interface runs at the
    /// smaller of it and what its datagrams carry.
    max_ud_mtu: u32,
    /// Sends in flight at most.
    pub(crate) send_ring: u32,
    /// Our hardware address as made: flags, UD QPN, and the GID of then ([`Interface::local`]
    /// has the current one).
    address: HwAddr,
    /// Our GID, which the subnet manager may change (`events.rs`).
    pub(crate) gid: Arc<LocalGid>,
    pub(crate) broadcast: HwAddr,
    pd: Arc<ProtectionDomain>,
    /// The datagram datapath: UD queue pair, CQs (which connected mode's receives share),
    /// receive ring.
    pub(crate) ud: Arc<UdDatapath>,
    /// The broadcast group and the multicast list.
    #[pin]
    pub(crate) mcast: Multicast,
    /// The destinations with their address handles, and the packets waiting for one.
    #[pin]
    pub(crate) paths: Paths,
    /// Sends in flight on the UD queue pair and every transmit connection.
    pub(crate) credits: Arc<SendCredits>,
    /// Whether sends may gather page fragments (the device takes more than one segment).
    pub(crate) scatter_gather: bool,
    pub(crate) counters: Arc<Counters>,
    /// Connected mode, when the device offers it.
    pub(crate) cm: Option<Arc<ConnectedMode>>,
    /// `umcast`: groups user space joined through the subnet administrator are left to
    /// it. Without one (RoCE) there are none, so the setting changes nothing there.
    umcast: AtomicBool,
    /// The NAPI context that sends held packets once their address handles exist.
    send_napi: NapiHandle,
    /// Whether the port passes traffic, as last queried or reported by a port event. Kept
    /// here because querying a RoCE port takes RTNL, which `open` already holds.
    active: AtomicBool,
    /// Whether the interface is up.
    up: AtomicBool,
    /// The flushes InfiniBand port events asked for, which the port work item does
    /// (`events.rs`).
    pub(crate) flushes: PendingFlushes,
    /// Our net_device while the interface is up, for the carrier the multicast work item
    /// turns on (holding it longer would keep it from being unregistered).
    #[pin]
    netdev: SpinLock<Option<ARef<NetDevice>>>,
    /// Renames the debugfs files when the interface comes up under a new name.
    #[pin]
    debug_name: Mutex<Option<DebugName>>,
    /// Link speed and receive coalescing, for ethtool.
    pub(crate) ethtool: EthtoolState,
    #[pin]
    resolve_work: Work<Interface, RESOLVE_WORK>,
    #[pin]
    mcast_work: Work<Interface, MCAST_WORK>,
    #[pin]
    mcast_retry: DelayedWork<Interface, MCAST_RETRY_WORK>,
    #[pin]
    rtnl_work: Work<Interface, RTNL_WORK>,
    /// Not run from the event handler, which runs under the core's event lock, nor from a
    /// work item flushed under RTNL (querying a RoCE port takes RTNL).
    #[pin]
    port_work: Work<Interface, PORT_WORK>,
    #[pin]
    stall_work: Work<Interface, STALL_WORK>,
    #[pin]
    child_reap_work: Work<Interface, CHILD_REAP_WORK>,
    /// Runs periodically while the interface is up.
    #[pin]
    neigh_gc: DelayedWork<Interface, NEIGH_GC_WORK>,
}

impl Interface {
    /// Sets up the interface of `port` of `device`, whose NAPI contexts are `napi`: its parts,
    /// and on RoCE the broadcast group joined. On InfiniBand its subnet administrator is
    /// asked through `sa_client`. `maker` makes its children.
    pub(crate) fn new(
        device: &Device,
        port: u32,
        facts: &PortFacts,
        napi: &NapiHandles,
        sa_client: &Arc<SaClient>,
        maker: Maker<Interface>,
    ) -> Result<Arc<Self>> {
        // The port's own partition is the first of its table, as in the C driver.
        let pkey = device.query_pkey(port, 0)? | wire::PKEY_FULL_MEMBER;
        let pkey_index = device.find_pkey(port, pkey)?;
        let sa = match device.protocol(port)? {
            Protocol::InfiniBand => Some(SaPort::new(sa_client, device, port)?),
            _ => None,
        };
        Self::build(
            device,
            port,
            facts,
            sa,
            (pkey, pkey_index),
            napi,
            Role::Parent,
            Some(maker),
        )
    }

    /// Sets up a child of `parent` (whose interface is `this`) in partition `pkey`, under
    /// RTNL: the port facts come from the parent.
    pub(crate) fn new_child(
        this: &Arc<Self>,
        parent: &NetDevice,
        pkey: u16,
        napi: &NapiHandles,
    ) -> Result<Arc<Self>> {
        let pkey_index = this.device.find_pkey(this.port, pkey)?;
        let mut facts = this.facts;
        facts.active = this.port_active();
        facts.speed_mbps = this.ethtool.link_settings().speed_mbps;
        facts.gid = this.gid.get();
        let role = Role::Child {
            parent: parent.into(),
            interface: this.clone(),
        };
        let child = Self::build(
            &this.device,
            this.port,
            &facts,
            this.sa.clone(),
            (pkey, pkey_index),
            napi,
            role,
            None,
        )?;
        // A GUID the user chose for the parent is the child's too (C: `ipoib_child_init`).
        if this.gid.is_chosen() {
            child.take_interface_id(u64::from_be_bytes(this.gid.interface_id()));
        }
        Ok(child)
    }

    /// Takes `addr` as the interface's hardware address (`ip link set ibN address`, the
    /// interface down; C: `ipoib_set_mac`): only the GID's interface ID may change (the
    /// flags, QPN and subnet prefix as they are, the ID not zero), on InfiniBand, and the
    /// children take it too. Groups are joined with it only while the port's GID table has
    /// it.
    pub(crate) fn set_address(
        this: ArcBorrow<'_, Self>,
        dev: &NetDevice,
        rtnl: &Rtnl,
        addr: &[u8],
    ) -> Result {
        let Ok(asked) = HwAddr::from_bytes(addr) else {
            return Err(EINVAL);
        };
        let current = dev.dev_addr();
        let kept = asked.as_bytes().get(..HWADDR_LEN - 8) == current.get(..HWADDR_LEN - 8);
        let id = asked.gid().interface_id();
        if !kept || id == 0 {
            pr_info!(
                "{}: address refused: only its last 8 bytes (a GUID, not 0) may change\n",
                dev.name()
            );
            return Err(EINVAL);
        }
        if !this.on_infiniband() {
            pr_info!(
                "{}: the address of a RoCE port's interface is fixed\n",
                dev.name()
            );
            return Err(EOPNOTSUPP);
        }
        // The children first: once the GID is taken, the change is not refused.
        let children = this.children().members(rtnl)?;
        this.take_interface_id(id);
        for (child, child_dev) in children.iter() {
            child.take_interface_id(id);
            if let Err(e) = child_dev.set_address(rtnl, child.local().as_bytes()) {
                pr_warn!("{}: address not set ({:?})\n", child_dev.name(), e);
            }
        }
        if !children.is_empty() {
            // Children that are up leave the groups joined with their old GID and join
            // again with the new one, if they may (the port work item flushes them).
            this.flushes.ask(Flush::Light);
            let _ = workqueue::system().enqueue::<_, PORT_WORK>(Arc::<Self>::from(this));
        }
        Ok(())
    }

    /// The GID's interface ID of `addr`, asked for with `ip link add ... address` for a
    /// new child of this interface, whose net_device is `parent`: as
    /// [`Interface::set_address`] takes it (the flags, QPN and prefix are the child's own),
    /// checked before the child is made.
    pub(crate) fn child_address(&self, parent: &NetDevice, addr: &[u8]) -> Result<u64> {
        if !self.on_infiniband() {
            pr_info!(
                "{}: the address of a RoCE port's interface is fixed\n",
                parent.name()
            );
            return Err(EOPNOTSUPP);
        }
        let id = HwAddr::from_bytes(addr)
            .map_err(|_| EINVAL)?
            .gid()
            .interface_id();
        if id == 0 {
            pr_info!(
                "{}: child's address refused: its GUID is 0\n",
                parent.name()
            );
            return Err(EINVAL);
        }
        Ok(id)
    }

    /// Takes `id` (from [`Interface::child_address`]) as the interface ID of this new
    /// child, whose net_device is `dev`.
    pub(crate) fn take_address(&self, dev: &NetDevice, rtnl: &Rtnl, id: u64) -> Result {
        self.take_interface_id(id);
        dev.set_address(rtnl, self.local().as_bytes())
    }

    /// Takes `id` as the GID's interface ID, the user's choice; says so if the port's GID
    /// table lacks it.
    fn take_interface_id(&self, id: u64) {
        self.gid.choose(id, &self.device, self.port);
        if !self.gid.in_table() {
            pr_info!(
                "{}: address {}: GID not in port {}'s GID table, no group is joined with it\n",
                self.log_name,
                self.local(),
                self.port
            );
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        device: &Device,
        port: u32,
        facts: &PortFacts,
        sa: Option<Arc<SaPort>>,
        (pkey, pkey_index): (u16, Option<u16>),
        napi: &NapiHandles,
        role: Role<Interface>,
        maker: Option<Maker<Interface>>,
    ) -> Result<Arc<Self>> {
        let mtu = facts.active_mtu.bytes() - ENCAP_HEADER_LEN as u32;
        let pd = ProtectionDomain::new(device, crate::OWNER)?;
        // Sends in flight at most (the queue stops when all are used), and receive buffers
        // kept posted, on the UD queue pair and on the shared receive queue each.
        let (send_ring, recv_ring) = (params::send_queue_size(), params::recv_queue_size());
        let cm_capable = params::CM_ENABLED.get();
        // The receive CQ takes connected mode's receives too.
        let base_cqe = 2 * recv_ring + 1;
        let partition = Arc::new(PartitionIndex::new(pkey_index), GFP_KERNEL)?;
        let gid = Arc::pin_init(LocalGid::new(facts.gid), GFP_KERNEL)?;
        let nonsrq_max = if cm_capable {
            ConnectedMode::nonsrq_room(device, port, recv_ring, base_cqe)
        } else {
            0
        };
        let counters = Arc::new(Counters::default(), GFP_KERNEL)?;
        let credits = Arc::new(SendCredits::new(send_ring), GFP_KERNEL)?;
        let broadcast = HwAddr::broadcast(pkey);
        let log_name = Arc::new(LogName::new(device.get_ref()?, port), GFP_KERNEL)?;
        let config = UdConfig {
            port,
            log_name: log_name.clone(),
            partition: partition.clone(),
            send_ring,
            recv_ring,
            recv_cqe: base_cqe + nonsrq_max as u32 * recv_ring,
            mtu,
            gid: gid.clone(),
            lid: facts.lid,
            broadcast: broadcast.gid(),
        };
        let ud = UdDatapath::new(device, &pd, config, napi, credits.clone(), counters.clone())?;
        let qpn = ud.qp().qp_num();
        let resolver = PathResolver::new(port, sa.clone(), gid.clone(), pkey);
        let cm = if cm_capable {
            ConnectedMode::new(
                device,
                (port, log_name.clone(), partition.clone()),
                qpn,
                facts.active_mtu,
                resolver.clone(),
                (send_ring, recv_ring, nonsrq_max),
                &pd,
                ud.recv_cq().clone(),
                credits.clone(),
                counters.clone(),
                &napi.send,
            )
            .inspect_err(|e| pr_warn!("{log_name}: connected mode unavailable ({e:?})\n"))
            .ok()
        } else {
            None
        };
        // The flag tells peers we accept connections, whatever our own mode.
        let flags = if cm.is_some() {
            wire::FLAG_CONNECTED_MODE
        } else {
            0
        };
        let address = HwAddr::new(flags, qpn, facts.gid).map_err(|_| EINVAL)?;
        let joiner = sa.as_ref().map(|sa| SaJoiner {
            sa: sa.clone(),
            port_gid: gid.clone(),
            pkey,
        });
        let mcast = Multicast::new(
            device,
            (port, log_name.clone()),
            ud.qp(),
            &broadcast,
            facts.active_mtu,
            pkey_index.is_some(),
            joiner,
            counters.clone(),
        )?;
        let paths = Paths::new(resolver, log_name.clone(), counters.clone())?;
        let scatter_gather = send_sges(device) > 1;
        let device = device.get_ref()?;
        Arc::pin_init(
            pin_init!(Self {
                device,
                port,
                log_name,
                facts: *facts,
                sa,
                pkey,
                partition,
                role,
                children <- Children::new(maker),
                mtu,
                max_ud_mtu: facts.max_mtu.bytes() - ENCAP_HEADER_LEN as u32,
                send_ring,
                address,
                gid,
                broadcast,
                pd,
                ud,
                mcast <- mcast,
                paths <- paths,
                credits,
                scatter_gather,
                counters,
                umcast: AtomicBool::new(false),
                cm,
                send_napi: napi.send.clone(),
                active: AtomicBool::new(facts.active),
                up: AtomicBool::new(false),
                flushes: PendingFlushes::new(),
                netdev <- new_spinlock!(None, "Interface::netdev"),
                debug_name <- new_mutex!(None, "Interface::debug_name"),
                ethtool: EthtoolState::new(facts.speed_mbps),
                resolve_work <- new_work!("Interface::resolve_work"),
                mcast_work <- new_work!("Interface::mcast_work"),
                mcast_retry <- new_delayed_work!("Interface::mcast_retry"),
                rtnl_work <- new_work!("Interface::rtnl_work"),
                port_work <- new_work!("Interface::port_work"),
                stall_work <- new_work!("Interface::stall_work"),
                child_reap_work <- new_work!("Interface::child_reap_work"),
                neigh_gc <- new_delayed_work!("Interface::neigh_gc"),
            }),
            GFP_KERNEL,
        )
    }

    /// Our hardware address: flags, UD QPN, GID.
    pub(crate) fn local(&self) -> HwAddr {
        HwAddr::new(self.address.flags(), self.address.qpn(), self.gid.get())
            .unwrap_or(self.address)
    }

    /// The interface's partition, full-membership bit set.
    pub(crate) fn pkey(&self) -> u16 {
        self.pkey
    }

    /// Whether the port's P_Key table has the interface's partition.
    pub(crate) fn has_partition(&self) -> bool {
        self.partition.get().is_some()
    }

    /// Looks the partition up in the port's P_Key table again (after a P_Key change, from
    /// the port work item); a new place has the queue pair made ready there. Returns
    /// whether it changed.
    pub(crate) fn refresh_partition(&self) -> bool {
        let index = match self.device.find_pkey(self.port, self.pkey) {
            Ok(index) => index,
            Err(e) => {
                pr_warn!("{}: P_Key table not read ({:?})\n", self.log_name, e);
                return false;
            }
        };
        if !self.partition.set(index) {
            return false;
        }
        match index {
            Some(i) => pr_info!(
                "{}: P_Key 0x{:04x} now at index {}\n",
                self.log_name,
                self.pkey,
                i
            ),
            None => pr_info!(
                "{}: P_Key 0x{:04x} no longer in the P_Key table\n",
                self.log_name,
                self.pkey
            ),
        }
        UdDatapath::schedule_recovery(self.ud.as_arc_borrow());
        true
    }

    /// Whether the interface carries traffic: its port is up, its partition there, and
    /// (InfiniBand) its broadcast group joined.
    pub(crate) fn carrier_ready(&self) -> bool {
        self.port_active() && self.has_partition() && self.mcast.broadcast_ready()
    }

    /// Our net_device, while the interface is up.
    pub(crate) fn up_netdev(&self) -> Option<ARef<NetDevice>> {
        self.netdev.lock().clone()
    }

    /// Leaves every group, which the multicast work item joins again (the fabric changed).
    pub(crate) fn rejoin_groups(&self) {
        self.mcast.leave_all(self.ud.qp(), false);
    }

    /// Whether the port is an InfiniBand one, with a subnet administrator.
    pub(crate) fn on_infiniband(&self) -> bool {
        self.sa.is_some()
    }

    /// Whether the port passes traffic.
    pub(crate) fn port_active(&self) -> bool {
        self.active.load(Ordering::Relaxed)
    }

    /// Records a port event's news.
    pub(crate) fn set_port_active(&self, active: bool) {
        self.active.store(active, Ordering::Relaxed);
    }

    /// Whether the interface is up.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    /// The interface's children (none for a child).
    pub(crate) fn children(&self) -> &Children<Interface> {
        &self.children
    }

    /// Where the interface stands among those of its port.
    pub(crate) fn role(&self) -> &Role<Interface> {
        &self.role
    }

    /// Takes the handle that renames the interface's debugfs files.
    pub(crate) fn attach_debug_name(&self, name: DebugName) {
        *self.debug_name.lock() = Some(name);
    }

    /// Gives the debugfs files the name `dev` has now (process context, from `open`).
    pub(crate) fn follow_debug_name(&self, dev: &NetDevice) {
        if let Some(name) = self.debug_name.lock().as_ref() {
            name.follow(dev.name().as_c_str());
        }
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

    /// Sends `skb`, which starts with the pseudo header (destination hardware address) and
    /// the encapsulation header that `header_create` pushed: the transmit decision. Only
    /// the protocols C carries go, to a group too; IP and TIPC to a peer that offers connected
    /// mode go over its connection while the interface is in connected mode; everything
    /// else goes as a datagram (ARP too, as in C: an answer must not wait for a
    /// connection), through its destination's address handle, which the packet waits for
    /// in `paths` while the resolve work item makes it.
    pub(crate) fn xmit(this: ArcBorrow<'_, Self>, skb: SkBuff, dev: &NetDevice) {
        let c = &this.counters;
        // Without its partition the queue pair is not ready (and the carrier off).
        if !this.has_partition() {
            c.tx_drop(skb, DropReason::DevReady);
            return;
        }
        // The headers are in the linear part unless the packet was built elsewhere (a
        // packet socket's): then they are copied out.
        let mut copy = [0u8; HARD_HEADER_LEN];
        let hdr = match skb.data().get(..HARD_HEADER_LEN) {
            Some(hdr) => hdr,
            None if skb.copy_bits(0, &mut copy).is_ok() => &copy,
            None => {
                c.tx_drop(skb, DropReason::PktTooSmall);
                return;
            }
        };
        let (addr, encap) = hdr.split_at(HWADDR_LEN);
        let (Ok(dest), Ok((encap, _))) = (HwAddr::from_bytes(addr), EncapHeader::parse(encap))
        else {
            c.tx_drop(skb, DropReason::DevHdr);
            return;
        };
        // Unicast and multicast alike (as C).
        let Some(protocol) = encap.protocol() else {
            c.tx_drop(skb, DropReason::UnhandledProto);
            return;
        };
        if !dest.is_multicast() && !matches!(protocol, EtherType::Arp | EtherType::Rarp) {
            if let Some(cm) = this
                .cm
                .as_ref()
                .filter(|_| dest.connected_mode() && this.connected())
            {
                ConnectedMode::xmit(cm.as_arc_borrow(), skb, &dest, dev);
                return;
            }
        }
        let bcast = if dest.gid() == this.broadcast.gid() {
            // Not before the broadcast group is joined (InfiniBand).
            let Some(ah) = this.mcast.broadcast_ah() else {
                c.tx_drop(skb, DropReason::DevReady);
                return;
            };
            Some(ah)
        } else {
            None
        };
        if this.paths.send(&this.ud, skb, &dest, bcast.as_ref(), dev) {
            let _ = workqueue::system().enqueue::<_, RESOLVE_WORK>(Arc::<Self>::from(this));
        }
    }

    /// Makes the address handles held packets wait for, then has NAPI send them (the
    /// resolve work item). Multicast groups on InfiniBand are asked of the multicast work
    /// item.
    fn resolve(self: Arc<Self>) {
        let owner: Arc<dyn SaOwner> = self.clone();
        let mut joins = false;
        self.paths.resolve(&self.device, &self.ud, &owner, |mgid| {
            joins |= self.mcast.request_send(mgid);
        });
        if joins {
            let _ = workqueue::system().enqueue::<_, MCAST_WORK>(self.clone());
        }
        self.send_napi.schedule();
    }

    /// Joins and leaves multicast groups and takes the SA's answers in (the multicast work
    /// items): the broadcast group's record sets the Q_Key and turns the carrier on.
    fn sync_multicast(self: Arc<Self>) {
        let owner: Arc<dyn SaOwner> = self.clone();
        let report = self.mcast.sync(
            &self.device,
            self.port,
            self.ud.qp(),
            &owner,
            self.has_partition() && self.gid.in_table(),
            self.umcast(),
            &|mgid| self.paths.in_use(mgid),
        );
        let SyncReport {
            broadcast,
            handles,
            unreachable,
            retry_at,
        } = report;
        if let Some(rec) = broadcast {
            self.broadcast_joined(&rec);
        }
        let sends = !handles.is_empty();
        for (mgid, ah) in handles {
            self.paths.add_handle(&mgid, ah);
        }
        for mgid in unreachable.iter() {
            self.paths.drop_held(mgid);
        }
        if sends {
            self.send_napi.schedule();
        }
        // The handles of the groups left go once no send uses them.
        self.ud.qp().reap_address_handles();
        if let Some(at) = retry_at {
            let delay = (at - now_ms()).clamp(1, 60_000) as u32;
            let _ = workqueue::system()
                .enqueue_delayed::<_, MCAST_RETRY_WORK>(self.clone(), msecs_to_jiffies(delay));
        }
    }

    /// The broadcast group was joined with `rec`: its Q_Key is the interface's, its MTU
    /// bounds datagrams (and in datagram mode the interface's MTU), and the carrier comes
    /// on.
    fn broadcast_joined(self: &Arc<Self>, rec: &kernel::rdma::sa::McMemberRecord) {
        if let Err(e) = self.ud.set_qkey(rec.qkey()) {
            pr_warn!(
                "{}: Q_Key 0x{:x} not set ({:?})\n",
                self.log_name,
                rec.qkey(),
                e
            );
        }
        if let Some(mtu) = rec.mtu() {
            self.ud.limit_mtu(mtu.bytes() - ENCAP_HEADER_LEN as u32);
            // In datagram mode the interface's MTU follows the group's, down or (up to what
            // was asked for) up.
            if !self.connected() {
                let _ = workqueue::system().enqueue::<_, RTNL_WORK>(self.clone());
            }
        }
        if let Some(dev) = self.up_netdev() {
            if self.carrier_ready() && self.is_up() {
                dev.carrier_on();
            }
        }
    }

    /// The send NAPI context: handles the send completions, sends the held packets whose
    /// handles now exist and what waits on connections, and wakes a stopped queue; completes
    /// the round (and asks for another if connections still have packets waiting).
    // Always inline: into the send context's poll (`netdev.rs`), its only caller.
    #[inline(always)]
    pub(crate) fn poll_send(
        &self,
        napi: &Napi,
        budget: Budget<'_>,
        wcs: &mut Completions,
    ) -> Polled {
        let dev = napi.device();
        let mut tally = Tally::new(&self.counters);
        // Send completions free their packets, return credits and restart a stopped queue.
        self.ud.poll_sends(dev, self.is_up(), wcs, &mut tally);
        self.paths.send_ready(&self.ud, dev);
        let again = match &self.cm {
            Some(cm) => cm.poll_tx(dev, self.is_up(), wcs, &mut tally),
            None => false,
        };
        self.credits.wake_if_room(dev);
        drop(tally);
        let (polled, completed) = budget.complete(0);
        if again && completed {
            napi.schedule_again();
        }
        if self.ud.take_recovery_due() {
            UdDatapath::schedule_recovery(self.ud.as_arc_borrow());
        }
        polled
    }

    /// The receive NAPI context: handles up to `budget` received packets, on the UD queue
    /// pair and on connections; completes the round unless the budget was used up.
    pub(crate) fn poll_recv(
        &self,
        napi: &Napi,
        budget: Budget<'_>,
        wcs: &mut Completions,
    ) -> Polled {
        let mut tally = Tally::new(&self.counters);
        let recvs = self.ud.take_recvs();
        let done = if recvs {
            self.ud
                .poll_recvs(napi, budget.get(), wcs, &mut tally, |wc, tally| {
                    // Not the UD queue pair's: a receive connection's.
                    if let Some(cm) = &self.cm {
                        cm.receive(wc, napi, tally);
                    }
                })
        } else {
            0
        };
        let (polled, completed) = if done < budget.get() {
            budget.complete(done)
        } else {
            (budget.exhausted(), false)
        };
        if recvs {
            self.ud.recvs_polled(completed);
        }
        drop(tally);
        if self.ud.take_recovery_due() {
            UdDatapath::schedule_recovery(self.ud.as_arc_borrow());
        }
        polled
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
        cm.switch(dev, rtnl, connected, self.ud.netdev_mtu())?;
        if !connected {
            // Back in datagram mode at the MTU the interface now has (C: the smaller of
            // the group's and the one it had), which later joins of the group keep.
            self.ud.set_admin_mtu(dev.mtu());
        }
        Ok(())
    }

    /// The largest MTU the interface takes in its current mode.
    pub(crate) fn max_mtu(&self) -> u32 {
        if self.connected() {
            CM_MTU
        } else {
            self.max_ud_mtu.max(self.ud.mtu())
        }
    }

    /// Takes `asked` as the interface's MTU (already within [`Interface::max_mtu`]) and
    /// returns the MTU it runs at: in connected mode what was asked; in datagram mode at
    /// most what datagrams carry (the broadcast group's), the rest kept for when the group
    /// allows it, as C keeps its `admin_mtu`.
    pub(crate) fn admit_mtu(&self, dev: &NetDevice, asked: u32) -> u32 {
        if self.connected() {
            return asked;
        }
        let mtu = self.ud.set_admin_mtu(asked);
        if mtu < asked {
            pr_info!(
                "{}: MTU {} asked for, {} until the broadcast group carries more\n",
                dev.name(),
                asked,
                mtu
            );
        }
        mtu
    }

    /// Brings the net_device in line with the fabric (the RTNL work item; C does both from
    /// its join task and its flushes): in datagram mode its MTU lowered to what its
    /// datagrams carry, and its address given our current GID.
    fn apply_under_rtnl(&self) {
        let Some(dev) = self.up_netdev() else {
            return;
        };
        let rtnl = RtnlGuard::lock();
        let mtu = self.ud.netdev_mtu();
        if !self.connected() && dev.mtu() != mtu {
            match dev.set_mtu(&rtnl, mtu) {
                Ok(()) => pr_info!(
                    "{}: MTU {} (the broadcast group's)\n",
                    dev.name(),
                    dev.mtu()
                ),
                Err(e) => pr_warn!("{}: MTU {} not set ({:?})\n", dev.name(), mtu, e),
            }
        }
        let local = self.local();
        if *dev.dev_addr() != local.as_bytes()[..] {
            match dev.set_address(&rtnl, local.as_bytes()) {
                Ok(()) => pr_info!(
                    "{}: address {} (the port's GID changed)\n",
                    dev.name(),
                    local
                ),
                Err(e) => pr_warn!("{}: address {} not set ({:?})\n", dev.name(), local, e),
            }
        }
    }

    /// The largest MTU of any mode the interface offers.
    pub(crate) fn mode_max_mtu(&self) -> u32 {
        if self.cm.is_some() {
            CM_MTU
        } else {
            self.mtu.max(self.max_ud_mtu)
        }
    }

    /// Takes the multicast list in (atomic context): the multicast work item joins and
    /// leaves its groups.
    pub(crate) fn set_multicast_list(this: ArcBorrow<'_, Self>, dev: &NetDevice, mc: &McAddrs<'_>) {
        this.mcast.take_list(dev, mc, || {
            let _ = workqueue::system().enqueue::<_, MCAST_WORK>(Arc::<Self>::from(this));
        });
    }

    /// The interface, whose net_device is `dev`, comes up: completions armed, groups
    /// joined, connections accepted.
    pub(crate) fn start(this: ArcBorrow<'_, Self>, dev: &NetDevice) -> Result {
        let this: Arc<Self> = this.into();
        *this.netdev.lock() = Some(dev.into());
        this.ud.arm();
        this.mcast.open();
        this.up.store(true, Ordering::Release);
        if this.on_infiniband() {
            if !this.gid.in_table() {
                pr_info!(
                    "{}: address {}: GID not in port {}'s GID table, no group joined, no carrier\n",
                    dev.name(),
                    this.local(),
                    this.port
                );
            }
            // The broadcast group first; the carrier comes on once it is joined. The
            // address may have missed a GID change while the interface was down.
            let _ = workqueue::system().enqueue::<_, MCAST_WORK>(this.clone());
            let _ = workqueue::system().enqueue::<_, RTNL_WORK>(this.clone());
        }
        this.schedule_neigh_gc();
        if let Some(cm) = &this.cm {
            if let Err(e) = cm.start() {
                pr_info!("{}: cannot listen for connections ({:?})\n", dev.name(), e);
                // Nothing may stay running for an interface that did not come up: its
                // neighbour ageing would requeue itself for ever.
                this.stop();
                return Err(e);
            }
        }
        Ok(())
    }

    /// The interface goes down: groups left, held packets dropped, connections destroyed,
    /// and no work left running.
    pub(crate) fn stop(&self) {
        self.mcast.close();
        self.mcast_work.flush();
        while self.mcast_retry.flush() {}
        self.mcast_work.flush();
        self.up.store(false, Ordering::Release);
        // A run under way may queue itself once more: flush until idle.
        while self.neigh_gc.flush() {}
        self.mcast.leave_all(self.ud.qp(), true);
        *self.netdev.lock() = None;
        self.paths.drop_all();
        if let Some(cm) = &self.cm {
            cm.stop();
        }
        self.resolve_work.flush();
        self.ud.flush_work();
        self.stall_work.flush();
        self.paths.drop_all();
        // Paths are asked for again once up (C: `ipoib_flush_paths` when the interface
        // goes down), so that a fabric changed meanwhile is seen.
        self.paths.forget(&self.ud, i64::MAX);
    }

    /// Has the work of deleted children waited for, then lets them go (from a deletion,
    /// under RTNL).
    pub(crate) fn reap_children_later(this: &Arc<Self>) {
        // Already queued: that run reaps this child too.
        let _ = workqueue::system().enqueue::<_, CHILD_REAP_WORK>(this.clone());
    }

    /// Waits for every work item of the interface (once it is unregistered).
    pub(crate) fn flush_work(&self) {
        // Deleted children's work is waited for by the parent's removal
        // (`Children::delete_all`, which runs first); a reaping run may still be under way.
        self.child_reap_work.flush();
        // Those that queue others first: neighbour ageing queues the port work item, which
        // (like the stall work item) may queue the RTNL, resolve and multicast work items,
        // the UD recovery and connected mode's work.
        while self.neigh_gc.flush() {}
        self.port_work.flush();
        self.stall_work.flush();
        self.rtnl_work.flush();
        self.resolve_work.flush();
        self.mcast_work.flush();
        while self.mcast_retry.flush() {}
        self.ud.flush_work();
        if let Some(cm) = &self.cm {
            cm.flush_work();
        }
    }

    /// Applies `ethtool -C` to the receive CQ.
    pub(crate) fn set_coalesce(&self, wanted: Coalesce, name: &CStr) -> Result {
        self.ethtool.set_coalesce(self.ud.recv_cq(), wanted, name)
    }

    /// Fills the values of `ethtool -S`.
    pub(crate) fn fill_ethtool_stats(&self, values: &mut [u64]) {
        let (cm_tx_connections, cm_rx_connections) =
            self.cm.as_ref().map_or((0, 0), |cm| cm.connection_counts());
        let gauges = Gauges {
            neighbours: self.paths.count() as u64,
            queue_stopped: self.credits.stops(),
            cm_tx_connections,
            cm_rx_connections,
        };
        self.counters.fill_ethtool(&gauges, values);
    }

    /// What `ethtool -i` shows: the driver, and the RDMA device with its firmware.
    pub(crate) fn fill_drvinfo(&self, info: &mut DrvInfo) {
        ethtool::fill_drvinfo(&self.device, info);
    }
}

impl DebugView for Interface {
    fn show_groups(&self, out: &mut dyn Write) -> fmt::Result {
        self.mcast.show_joined(out)?;
        if self.on_infiniband() {
            return self.mcast.show_send_only(out);
        }
        // Groups joined in full that packets are sent to too are listed once.
        let joined = self.mcast.joined_groups();
        self.paths.show_send_only(out, &joined)
    }

    fn show_paths(&self, out: &mut dyn Write, now: i64) -> fmt::Result {
        self.paths.show_paths(out, now)
    }

    fn show_connections(&self, out: &mut dyn Write, now: i64) -> fmt::Result {
        match &self.cm {
            Some(cm) => cm.show_connections(out, now),
            None => Ok(()),
        }
    }
}

impl_has_work! {
    impl HasWork<Self, RESOLVE_WORK> for Interface { self.resolve_work }
    impl HasWork<Self, MCAST_WORK> for Interface { self.mcast_work }
    impl HasWork<Self, PORT_WORK> for Interface { self.port_work }
    impl HasWork<Self, STALL_WORK> for Interface { self.stall_work }
    impl HasWork<Self, RTNL_WORK> for Interface { self.rtnl_work }
    impl HasWork<Self, CHILD_REAP_WORK> for Interface { self.child_reap_work }
}

impl_has_delayed_work! {
    impl HasDelayedWork<Self, NEIGH_GC_WORK> for Interface { self.neigh_gc }
    impl HasDelayedWork<Self, MCAST_RETRY_WORK> for Interface { self.mcast_retry }
}

impl SaOwner for Interface {
    fn answered(self: Arc<Self>, what: Answered) {
        let _ = match what {
            Answered::Path => workqueue::system().enqueue::<_, RESOLVE_WORK>(self),
            Answered::Join => workqueue::system().enqueue::<_, MCAST_WORK>(self),
        };
    }
}

impl WorkItem<RESOLVE_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.resolve();
    }
}

impl WorkItem<MCAST_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.sync_multicast();
    }
}

impl WorkItem<RTNL_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.apply_under_rtnl();
    }
}

impl WorkItem<CHILD_REAP_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.children.reap();
    }
}

impl WorkItem<MCAST_RETRY_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.sync_multicast();
    }
}

#[pinned_drop]
impl PinnedDrop for Interface {
    fn drop(self: Pin<&mut Self>) {
        self.mcast.detach_broadcast(self.ud.qp());
    }
}
