// SPDX-License-Identifier: GPL-2.0

//! Multicast of an interface (C: `ipoib_multicast.c`): the broadcast group, joined with the
//! interface while its partition exists and sent to through an address handle of its own,
//! and the groups its multicast list asks for (IPv4 groups, IPv6 all-nodes and
//! solicited-node groups, groups sockets join), and on InfiniBand the groups only sent to.
//!
//! The list changes in atomic context (`set_rx_mode`), so it is copied here and the joins
//! and leaves happen in process context (the interface's multicast work item).
//!
//! On InfiniBand every join goes to the subnet administrator (`sa_group.rs`): the
//! broadcast group first, when the interface comes up; its record gives the interface's
//! Q_Key and datagram MTU, and the parameters every other group is created with (RFC
//! 4391); the other groups are joined once it is. A group sent to without being in the
//! list is joined as a send-only member, and its address handle given to the paths.
//!
//! On RoCE a join is an attach of the UD queue pair plus an IP-level join of the group on
//! the Ethernet device under the port, without which the group's packets never reach the
//! queue pair; with no subnet administrator to answer a join, the broadcast group's member
//! record is made locally, as the RDMA CM does, when the interface is made.

use crate::{
    debugfs::{write_group, GidText},
    fabric::{SaOwner, SaPort},
    local_gid::LocalGid,
    log_name::LogName,
    path::GID_INDEX,
    sa_group::{Progress, SaGroup},
    stats::{bump, now_ms, Counters},
    wire::{self, Gid, HwAddr},
};
use core::fmt::{self, Write};
use kernel::{
    net::{
        dev::{McAddrs, NetDevice},
        mcast::Ipv6McMembership,
    },
    new_mutex, new_spinlock_bh,
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    rdma::{
        ah::{AddressHandle, AhAttr},
        cm::GidAttr,
        device::{self, Device, Mtu},
        qp::{QueuePair, RecvBuffer},
        sa::{JoinState, McMemberRecord},
    },
    sync::{Arc, Mutex, SpinLockBh},
};

/// How many times a send-only join is attempted before the packets waiting for it are
/// dropped (C retries it once, after a backoff).
const SEND_ONLY_ATTEMPTS: u32 = 2;

/// How a group of the list is held.
enum Membership {
    /// RoCE: the IP-level join on the Ethernet device (the queue pair is attached too).
    Ip { _member: Ipv6McMembership },
    /// InfiniBand: the membership asked of the SA.
    Sa(SaGroup),
}

/// A group we are a member of, or asked to be.
struct Joined {
    mgid: Gid,
    /// When it was joined (ms, monotonic).
    joined_ms: i64,
    member: Membership,
}

impl Joined {
    fn new(mgid: Gid, member: Membership) -> Self {
        Self {
            mgid,
            joined_ms: now_ms(),
            member,
        }
    }
}

/// The groups the multicast list asks for.
struct Wanted {
    /// As many as the list holds (C has no limit either).
    groups: KVec<Gid>,
    /// Whether joins happen (the interface is up).
    open: bool,
}

/// The groups the interface wants and the ones it has joined.
#[pin_data]
struct McastGroups {
    #[pin]
    wanted: SpinLockBh<Wanted>,
    /// Joined groups by slot, changed in process context only; emptied slots are reused,
    /// and the slots freed once all are empty.
    #[pin]
    joined: Mutex<KVec<Option<Joined>>>,
}

impl McastGroups {
    fn new() -> impl PinInit<Self> {
        pin_init!(Self {
            wanted <- new_spinlock_bh!(
                Wanted {
                    groups: KVec::new(),
                    open: false,
                },
                "McastGroups::wanted"
            ),
            joined <- new_mutex!(KVec::new(), "McastGroups::joined"),
        })
    }

    /// Calls `f` with each joined group and when it was joined (process context); groups
    /// still asked of the SA are left out.
    fn for_each_joined(&self, mut f: impl FnMut(&Gid, i64)) {
        for j in self.joined.lock().iter().flatten() {
            if let Membership::Sa(g) = &j.member {
                if g.record().is_none() {
                    continue;
                }
            }
            f(&j.mgid, j.joined_ms);
        }
    }

    /// Calls `f` with each group held through the SA (process context).
    fn for_each_sa(&self, mut f: impl FnMut(&mut SaGroup)) {
        for j in self.joined.lock().iter_mut().flatten() {
            if let Membership::Sa(g) = &mut j.member {
                f(g);
            }
        }
    }

    /// Records the groups the multicast list now asks for (atomic context) and, if they
    /// changed while the interface is up, calls `schedule` (under the lock, so that
    /// [`McastGroups::close`] cannot miss it).
    fn set_wanted(&self, fresh: KVec<Gid>, schedule: impl FnOnce()) {
        let mut wanted = self.wanted.lock();
        let changed = wanted.groups[..] != fresh[..];
        let old = core::mem::replace(&mut wanted.groups, fresh);
        if changed && wanted.open {
            schedule();
        }
        drop(wanted);
        drop(old);
    }

    /// A sorted copy of the wanted groups, none while the interface is down (process
    /// context: the copy is allocated outside the lock, to the size last seen).
    fn wanted_sorted(&self) -> Result<KVec<Gid>> {
        loop {
            let seen = self.wanted.lock().groups.len();
            let mut copy = KVec::with_capacity(seen, GFP_KERNEL)?;
            let wanted = self.wanted.lock();
            if !wanted.open {
                return Ok(KVec::new());
            }
            if wanted.groups.len() <= copy.capacity() {
                // Within the capacity: no allocation under the lock.
                copy.extend_from_slice(&wanted.groups, GFP_NOWAIT)?;
                drop(wanted);
                copy.sort_unstable();
                return Ok(copy);
            }
        }
    }

    /// Lets joins happen (the interface comes up).
    fn open(&self) {
        self.wanted.lock().open = true;
    }

    /// Stops scheduling joins; the caller then flushes its work item and calls
    /// [`McastGroups::leave_all`].
    fn close(&self) {
        self.wanted.lock().open = false;
    }

    /// Brings the joined groups in line with the wanted ones (process context): leaves the
    /// groups no longer wanted with `leave`, joins new ones with `join`. Returns how many
    /// joins failed, or the error that kept the list from being read.
    fn sync(&self, join: impl Fn(&Gid) -> Result<Joined>, leave: impl Fn(Joined)) -> Result<usize> {
        let wanted = self.wanted_sorted()?;
        let mut joined = self.joined.lock();
        let mut have = KVec::with_capacity(joined.len(), GFP_KERNEL)?;
        for slot in joined.iter_mut() {
            let Some(j) = slot.as_ref() else {
                continue;
            };
            if wanted.binary_search(&j.mgid).is_ok() {
                have.push(j.mgid, GFP_KERNEL)?;
            } else if let Some(j) = slot.take() {
                leave(j);
            }
        }
        if joined.iter().all(Option::is_none) {
            *joined = KVec::new();
        }
        have.sort_unstable();
        let mut failed = 0;
        let mut free = 0;
        for g in wanted.iter() {
            if have.binary_search(g).is_ok() {
                continue;
            }
            // The first empty slot from `free` on (slots before it are taken), or a new one.
            free += joined.iter().skip(free).take_while(|s| s.is_some()).count();
            if free == joined.len() && joined.push(None, GFP_KERNEL).is_err() {
                failed += 1;
                continue;
            }
            match (join(g), joined.get_mut(free)) {
                (Ok(j), Some(slot)) => *slot = Some(j),
                (Ok(j), None) => leave(j),
                (Err(_), _) => failed += 1,
            }
        }
        Ok(failed)
    }

    /// Leaves every group (the interface goes down, or the fabric changed) with `leave`;
    /// forgets the wanted ones if `forget`.
    fn leave_all(&self, leave: impl Fn(Joined), forget: bool) {
        let mut joined = self.joined.lock();
        for j in core::mem::take(&mut *joined).into_iter().flatten() {
            leave(j);
        }
        drop(joined);
        if forget {
            let old = core::mem::take(&mut self.wanted.lock().groups);
            drop(old);
        }
    }
}

fn rdma_gid(g: &Gid) -> device::Gid {
    device::Gid(g.0)
}

/// How an InfiniBand interface asks for its groups: its port's SA, and the GID and
/// partition its joins name.
pub(crate) struct SaJoiner {
    pub(crate) sa: Arc<SaPort>,
    pub(crate) port_gid: Arc<LocalGid>,
    pub(crate) pkey: u16,
}

impl SaJoiner {
    /// The join of `mgid` as `state`.
    fn record(&self, mgid: &Gid, state: JoinState) -> McMemberRecord {
        let port_gid = rdma_gid(&self.port_gid.get());
        McMemberRecord::ib_join(&rdma_gid(mgid), &port_gid, self.pkey, state)
    }
}

/// The groups asked of the SA besides those of the list (InfiniBand).
struct SaGroups {
    broadcast: Option<SaGroup>,
    /// Groups sent to without joining them fully, by GID: as many as are sent to, each
    /// left once nothing is sent to it (C: reaped with their neighbours).
    send_only: RBTree<[u8; 16], SaGroup>,
    /// Groups the paths asked handles for since the last run of the work item, by GID (a
    /// burst may ask for thousands).
    requested: RBTree<[u8; 16], ()>,
    /// The neighbour collection ran since: the send-only groups no longer sent to are left
    /// by the next run of the work item (C: reaped with their neighbours). Other runs,
    /// one per answer of the SA, leave the groups alone.
    reap_due: bool,
}

/// What a run of the multicast work item tells the interface.
#[derive(Default)]
pub(crate) struct SyncReport {
    /// The broadcast group was joined, with this record: Q_Key, MTU, carrier.
    pub(crate) broadcast: Option<McMemberRecord>,
    /// Handles for groups sent to, for the paths.
    pub(crate) handles: KVec<(Gid, Arc<AddressHandle>)>,
    /// Groups sent to that could not be joined: their packets go.
    pub(crate) unreachable: KVec<Gid>,
    /// When the work item is due again for a retry (ms, monotonic).
    pub(crate) retry_at: Option<i64>,
}

impl SyncReport {
    /// Hands the paths the handle `made` for group `mgid`, or, without one, has its packets
    /// dropped.
    fn give(&mut self, mgid: Gid, made: Result<Arc<AddressHandle>>) {
        let _ = match made {
            Ok(ah) => self.handles.push((mgid, ah), GFP_KERNEL),
            Err(_) => self.unreachable.push(mgid, GFP_KERNEL),
        };
    }

    fn retry(&mut self, at: Option<i64>) {
        if let Some(at) = at {
            self.retry_at = Some(self.retry_at.map_or(at, |r| r.min(at)));
        }
    }
}

/// The multicast state of an interface: the broadcast group and the other groups.
#[pin_data]
pub(crate) struct Multicast {
    /// The interface's name in log lines.
    log_name: Arc<LogName>,
    /// The broadcast group (its GID carries the interface's P_Key).
    broadcast: Gid,
    /// Its hardware address, which the groups of the list must resemble.
    broadcast_addr: HwAddr,
    /// The address handle broadcasts are sent through; on InfiniBand only once joined.
    #[pin]
    bcast_ah: SpinLockBh<Option<Arc<AddressHandle>>>,
    /// The IP-level join RoCE needs for the broadcast group to reach the queue pair (none
    /// while the partition is missing, and on InfiniBand).
    _bcast_member: Option<Ipv6McMembership>,
    /// When the broadcast group was joined (ms, monotonic), for debugfs.
    bcast_joined_ms: core::sync::atomic::AtomicI64,
    /// The SA (InfiniBand); `None` on RoCE.
    sa: Option<SaJoiner>,
    /// The groups of the multicast list.
    #[pin]
    groups: McastGroups,
    /// The broadcast and send-only groups asked of the SA (InfiniBand).
    #[pin]
    sa_groups: Mutex<SaGroups>,
    counters: Arc<Counters>,
}

impl Multicast {
    /// The multicast state of an interface whose broadcast address is `broadcast`, joined
    /// through `sa` on InfiniBand. On RoCE the broadcast group is joined here with `qp` on
    /// `port` of `device` if `join` (the partition exists), and its address handle made for
    /// `qp` for paths of `mtu`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        device: &Device,
        (port, log_name): (u32, Arc<LogName>),
        qp: &QueuePair<impl RecvBuffer>,
        broadcast: &HwAddr,
        mtu: Mtu,
        join: bool,
        sa: Option<SaJoiner>,
        counters: Arc<Counters>,
    ) -> Result<impl PinInit<Self>> {
        let mgid = broadcast.gid();
        let (member, bcast_ah) = if sa.is_some() {
            (None, None)
        } else {
            let member = if join {
                Some(Self::join_broadcast(device, port, qp, &mgid)?)
            } else {
                None
            };
            // RoCE has no SA to answer a join with the group's record: it is made locally,
            // as the RDMA CM does, and gives the route (the group's Ethernet address, one
            // hop).
            let port_gid = GidAttr::get(device, port, GID_INDEX)?;
            let record =
                McMemberRecord::roce(&rdma_gid(&mgid), &port_gid, wire::DEFAULT_QKEY, mtu, 1);
            let ah = qp.address_handle(&AhAttr::from_mcmember(device, port, &record)?)?;
            (member, Some(ah))
        };
        let broadcast_addr = *broadcast;
        Ok(pin_init!(Self {
            log_name,
            broadcast: mgid,
            broadcast_addr,
            bcast_ah <- new_spinlock_bh!(bcast_ah, "Multicast::bcast_ah"),
            _bcast_member: member,
            bcast_joined_ms: core::sync::atomic::AtomicI64::new(now_ms()),
            sa,
            groups <- McastGroups::new(),
            sa_groups <- new_mutex!(
                SaGroups {
                    broadcast: None,
                    send_only: RBTree::new(),
                    requested: RBTree::new(),
                    reap_due: false,
                },
                "Multicast::sa_groups"
            ),
            counters,
        }))
    }

    /// Attaches `qp` to the broadcast group `mgid` and joins it at the IP level, which RoCE
    /// needs for the group's traffic to reach the port.
    fn join_broadcast(
        device: &Device,
        port: u32,
        qp: &QueuePair<impl RecvBuffer>,
        mgid: &Gid,
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

    /// Detaches `qp` from the broadcast group (the interface goes away).
    pub(crate) fn detach_broadcast(&self, qp: &QueuePair<impl RecvBuffer>) {
        if self.sa.is_none() {
            let _ = qp.detach_mcast(&rdma_gid(&self.broadcast), 0);
        }
    }

    /// The address handle of the broadcast group, once there is one.
    pub(crate) fn broadcast_ah(&self) -> Option<Arc<AddressHandle>> {
        self.bcast_ah.lock().clone()
    }

    /// Whether broadcasts can be sent: on InfiniBand once the group is joined.
    pub(crate) fn broadcast_ready(&self) -> bool {
        self.bcast_ah.lock().is_some()
    }

    /// Takes the multicast list of `dev` in (atomic context): its groups are joined and left
    /// by [`Multicast::sync`], from the work item `schedule` queues if the list changed while
    /// the interface is up. The broadcast group is always joined.
    /// Addresses of other partitions or scopes, and not IPoIB groups, are left out, as C
    /// leaves them out.
    pub(crate) fn take_list(&self, dev: &NetDevice, mc: &McAddrs<'_>, schedule: impl FnOnce()) {
        let mut groups = KVec::new();
        let mut unkept = 0usize;
        if groups.reserve(mc.len(), GFP_ATOMIC).is_err() {
            unkept = mc.len();
        } else {
            mc.for_each(|addr| {
                let Ok(a) = HwAddr::from_bytes(addr) else {
                    return;
                };
                if a.gid() != self.broadcast
                    && a.is_group_of(&self.broadcast_addr)
                    && groups.push(a.gid(), GFP_ATOMIC).is_err()
                {
                    unkept += 1;
                }
            });
        }
        if unkept > 0 {
            // As C, which skips a group it has no memory for: the next change retries.
            pr_warn!(
                "{}: {} multicast groups not joined: out of memory\n",
                dev.name(),
                unkept
            );
            return;
        }
        self.groups.set_wanted(groups, schedule);
    }

    /// Lets joins happen (the interface comes up).
    pub(crate) fn open(&self) {
        self.groups.open();
    }

    /// Stops scheduling joins (the interface goes down); the caller then flushes the work
    /// item and calls [`Multicast::leave_all`].
    pub(crate) fn close(&self) {
        self.groups.close();
    }

    /// Whether joins happen (the interface is up).
    fn is_open(&self) -> bool {
        self.groups.wanted.lock().open
    }

    /// Asks for the handle of group `mgid`, sent to by a held packet (InfiniBand, from the
    /// resolve work item): the multicast work item joins it as a send-only member unless
    /// it is joined already. Returns whether the work item must run.
    pub(crate) fn request_send(&self, mgid: &Gid) -> bool {
        let mut sa = self.sa_groups.lock();
        let joining = sa
            .send_only
            .get(&mgid.0)
            .is_some_and(|g| g.record().is_none());
        // A group being joined gives its handle when its answer comes.
        if joining || sa.requested.get(&mgid.0).is_some() {
            return false;
        }
        match RBTreeNode::new(mgid.0, (), GFP_KERNEL) {
            Ok(node) => {
                sa.requested.insert(node);
                true
            }
            Err(_) => false,
        }
    }

    /// Joins and leaves groups with `qp` on `port` of `device` as the multicast list asks
    /// (process context); on InfiniBand also takes the SA's answers in, making handles for
    /// `qp`, with `owner` hearing of answers to come, if `joinable` (the partition is in
    /// the port's table), and with `umcast` leaves to user space the groups it joined
    /// itself; a group only sent to is left once `sent_to` says nothing uses it. Tells the
    /// interface what changed.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn sync(
        &self,
        device: &Device,
        port: u32,
        qp: &QueuePair<impl RecvBuffer>,
        owner: &Arc<dyn SaOwner>,
        joinable: bool,
        umcast: bool,
        sent_to: &dyn Fn(&Gid) -> bool,
    ) -> SyncReport {
        match &self.sa {
            Some(_) if !joinable => SyncReport::default(),
            Some(sa) => self.sync_sa(sa, device, port, qp, owner, umcast, sent_to),
            None => {
                self.sync_roce(device, port, qp);
                SyncReport::default()
            }
        }
    }

    /// [`Multicast::sync`] on InfiniBand.
    #[allow(clippy::too_many_arguments)]
    fn sync_sa(
        &self,
        sa: &SaJoiner,
        device: &Device,
        port: u32,
        qp: &QueuePair<impl RecvBuffer>,
        owner: &Arc<dyn SaOwner>,
        umcast: bool,
        sent_to: &dyn Fn(&Gid) -> bool,
    ) -> SyncReport {
        let mut report = SyncReport::default();
        let now = now_ms();
        let name = &self.log_name;
        let mut groups = self.sa_groups.lock();
        if !self.is_open() {
            return report;
        }
        // The broadcast group first: the others are created with its parameters.
        if groups.broadcast.is_none() {
            match SaGroup::new(self.broadcast, false, owner) {
                Ok(g) => groups.broadcast = Some(g),
                Err(_) => return report,
            }
        }
        let Some(bcast) = groups.broadcast.as_mut() else {
            return report;
        };
        let _ = bcast.ask(&sa.sa, |mgid| sa.record(mgid, JoinState::FullMember), now);
        match bcast.take_answer(qp, now) {
            Progress::Joined(rec) => {
                match AhAttr::from_mcmember(device, port, &rec)
                    .and_then(|attr| qp.address_handle(&attr))
                {
                    Ok(ah) => {
                        *self.bcast_ah.lock() = Some(ah);
                        self.bcast_joined_ms
                            .store(now, core::sync::atomic::Ordering::Relaxed);
                        report.broadcast = Some(rec);
                        pr_info!(
                            "{}: joined broadcast group {} (MLID 0x{:04x}, Q_Key 0x{:x}, MTU {})\n",
                            name,
                            GidText(&self.broadcast.0),
                            rec.mlid(),
                            rec.qkey(),
                            rec.mtu().map_or(0, |m| m.bytes())
                        );
                    }
                    Err(e) => {
                        pr_warn!("{name}: no handle for the broadcast group ({e:?})\n");
                        bcast.leave(qp);
                    }
                }
            }
            Progress::Failed(e) => {
                bump(&self.counters.mcast_join_failures, 1);
                *self.bcast_ah.lock() = None;
                pr_info!("{name}: broadcast group join failed ({e:?}); retried\n");
            }
            Progress::Unchanged => {}
        }
        report.retry(bcast.retry_at());
        let Some(params) = bcast.record().copied() else {
            // The other groups wait for the broadcast group.
            return report;
        };
        drop(groups);
        self.sync_list(sa, qp, &params, owner, now, umcast, &mut report);
        self.sync_send_only(
            sa,
            (device, port),
            qp,
            &params,
            owner,
            now,
            sent_to,
            &mut report,
        );
        report
    }

    /// Joins and leaves the groups of the list through the SA, with the broadcast group's
    /// parameters `params`; with `umcast`, a new group some other client on this host
    /// (user space through the RDMA CM) has joined is left to it, as in C.
    #[allow(clippy::too_many_arguments)]
    fn sync_list(
        &self,
        sa: &SaJoiner,
        qp: &QueuePair<impl RecvBuffer>,
        params: &McMemberRecord,
        owner: &Arc<dyn SaOwner>,
        now: i64,
        umcast: bool,
        report: &mut SyncReport,
    ) {
        let synced = self.groups.sync(
            |mgid| {
                if umcast
                    && McMemberRecord::local_group(&sa.sa.device, sa.sa.port, &rdma_gid(mgid))
                        .is_some()
                {
                    crate::params::ipoib_dbg_mcast!(
                        "{}: multicast group {} joined by user space, left to it (umcast)\n",
                        self.log_name,
                        GidText(&mgid.0)
                    );
                    return Err(EEXIST);
                }
                let g = SaGroup::new(*mgid, false, owner)?;
                Ok(Joined::new(*mgid, Membership::Sa(g)))
            },
            |mut j| {
                if let Membership::Sa(g) = &mut j.member {
                    g.leave(qp);
                }
            },
        );
        if let Err(e) = synced {
            pr_warn!("{}: multicast list not synced ({e:?})\n", self.log_name);
        }
        self.groups.for_each_sa(|g| {
            let rec = |mgid: &Gid| {
                sa.record(mgid, JoinState::FullMember)
                    .with_group_params(params)
            };
            let _ = g.ask(&sa.sa, rec, now);
            match g.take_answer(qp, now) {
                Progress::Joined(_) => crate::params::ipoib_dbg_mcast!(
                    "{}: joined multicast group {}\n",
                    self.log_name,
                    GidText(&g.mgid().0)
                ),
                Progress::Failed(e) => {
                    bump(&self.counters.mcast_join_failures, 1);
                    crate::params::ipoib_dbg_mcast!(
                        "{}: join of multicast group {} failed ({:?})\n",
                        self.log_name,
                        GidText(&g.mgid().0),
                        e
                    );
                }
                Progress::Unchanged => {}
            }
            report.retry(g.retry_at());
        });
    }

    /// Gives the paths handles for the groups they asked for, made on `port` of `device`
    /// for `qp`: a group of the list already joined lends its record; others are joined as
    /// send-only members (C: send-only joins), with the broadcast group's parameters
    /// `params`, and left once `sent_to` says nothing uses them any more.
    #[allow(clippy::too_many_arguments)]
    fn sync_send_only(
        &self,
        sa: &SaJoiner,
        (device, port): (&Device, u32),
        qp: &QueuePair<impl RecvBuffer>,
        params: &McMemberRecord,
        owner: &Arc<dyn SaOwner>,
        now: i64,
        sent_to: &dyn Fn(&Gid) -> bool,
        report: &mut SyncReport,
    ) {
        let (requested, reap) = {
            let mut groups = self.sa_groups.lock();
            let reap = core::mem::replace(&mut groups.reap_due, false);
            (core::mem::take(&mut groups.requested), reap)
        };
        let handle = |rec: &McMemberRecord| {
            AhAttr::from_mcmember(device, port, rec).and_then(|attr| qp.address_handle(&attr))
        };
        if reap {
            self.leave_unused_send_only(qp, &requested, sent_to);
        }
        for key in requested.keys() {
            let mgid = &Gid(*key);
            let mut joined = None;
            self.groups.for_each_sa(|g| {
                if g.mgid() == mgid {
                    joined = g.record().copied();
                }
            });
            if let Some(rec) = joined {
                report.give(*mgid, handle(&rec));
                continue;
            }
            let mut groups = self.sa_groups.lock();
            if let Some(g) = groups.send_only.get(&mgid.0) {
                // Joined already: its handle aged out of the paths' table and is made
                // again. Still joining: its answer gives one.
                if let Some(rec) = g.record() {
                    report.give(*mgid, handle(rec));
                }
                continue;
            }
            let node = SaGroup::new(*mgid, true, owner)
                .and_then(|g| RBTreeNode::new(mgid.0, g, GFP_KERNEL));
            match node {
                Ok(node) => {
                    groups.send_only.insert(node);
                }
                Err(_) => {
                    let _ = report.unreachable.push(*mgid, GFP_KERNEL);
                }
            }
        }
        let mut failed = KVec::new();
        let mut last_error = None;
        let mut groups = self.sa_groups.lock();
        for g in groups.send_only.values_mut() {
            let rec = |mgid: &Gid| {
                sa.record(mgid, JoinState::SendOnlyFullMember)
                    .with_group_params(params)
            };
            let asked = g.ask(&sa.sa, rec, now);
            let progress = match asked {
                Ok(()) => g.take_answer(qp, now),
                Err(e) => Progress::Failed(e),
            };
            match progress {
                Progress::Joined(rec) => report.give(*g.mgid(), handle(&rec)),
                Progress::Failed(_) if g.failures() < SEND_ONLY_ATTEMPTS => {
                    // Asked again after a backoff, its packets held meanwhile (as in C).
                    bump(&self.counters.mcast_join_failures, 1);
                    report.retry(g.retry_at());
                }
                Progress::Failed(e) => {
                    // Its packets go; a later packet asks again (as in C).
                    bump(&self.counters.mcast_join_failures, 1);
                    last_error = Some((*g.mgid(), e));
                    g.leave(qp);
                    let _ = report.unreachable.push(*g.mgid(), GFP_KERNEL);
                    let _ = failed.push(*g.mgid(), GFP_KERNEL);
                }
                Progress::Unchanged => {}
            }
        }
        for mgid in failed.iter() {
            groups.send_only.remove(&mgid.0);
        }
        if let Some((mgid, e)) = last_error {
            // One line per run, however many groups failed (C logs each, up to 20 times).
            pr_info!(
                "{}: {} send-only joins failed again, their packets dropped (the last: {}, {:?})\n",
                self.log_name,
                failed.len(),
                GidText(&mgid.0),
                e
            );
        }
    }

    /// Leaves the send-only groups joined that nothing is sent to any more: no handle in the
    /// paths' table and no packet waiting for one (`sent_to`), and none of `requested`.
    fn leave_unused_send_only(
        &self,
        qp: &QueuePair<impl RecvBuffer>,
        requested: &RBTree<[u8; 16], ()>,
        sent_to: &dyn Fn(&Gid) -> bool,
    ) {
        let mut groups = self.sa_groups.lock();
        let mut unused = KVec::new();
        let mut missed = false;
        for g in groups.send_only.values() {
            if g.record().is_some() && requested.get(&g.mgid().0).is_none() && !sent_to(g.mgid()) {
                if unused.push(*g.mgid(), GFP_KERNEL).is_err() {
                    missed = true;
                    break;
                }
            }
        }
        // The rest (no memory for the list) go with the next run.
        groups.reap_due |= missed;
        for mgid in unused.iter() {
            if let Some(mut g) = groups.send_only.remove(&mgid.0) {
                g.leave(qp);
            }
        }
        if !unused.is_empty() {
            crate::params::ipoib_dbg_mcast!(
                "{}: left {} send-only groups no longer sent to\n",
                self.log_name,
                unused.len()
            );
        }
    }

    /// Has the next run of the multicast work item leave the send-only groups no longer
    /// sent to (the neighbour collection ran); returns whether there are any (InfiniBand),
    /// and so whether it must run.
    pub(crate) fn reap_send_only(&self) -> bool {
        if self.sa.is_none() {
            return false;
        }
        let mut groups = self.sa_groups.lock();
        let any = groups.send_only.keys().next().is_some();
        groups.reap_due = any;
        groups.reap_due
    }

    /// [`Multicast::sync`] on RoCE.
    fn sync_roce(&self, device: &Device, port: u32, qp: &QueuePair<impl RecvBuffer>) {
        let ndev = match device.netdev(port) {
            Ok(ndev) => ndev,
            Err(e) => {
                pr_warn!(
                    "{}: no Ethernet device for multicast ({:?})\n",
                    self.log_name,
                    e
                );
                return;
            }
        };
        let synced = self.groups.sync(
            |mgid| {
                qp.attach_mcast(&rdma_gid(mgid), 0)?;
                match Ipv6McMembership::join(&ndev, &mgid.0) {
                    Ok(member) => {
                        crate::params::ipoib_dbg_mcast!(
                            "{}: joined multicast group {}\n",
                            self.log_name,
                            GidText(&mgid.0)
                        );
                        Ok(Joined::new(*mgid, Membership::Ip { _member: member }))
                    }
                    Err(e) => {
                        let _ = qp.detach_mcast(&rdma_gid(mgid), 0);
                        Err(e)
                    }
                }
            },
            |j| {
                let _ = qp.detach_mcast(&rdma_gid(&j.mgid), 0);
                crate::params::ipoib_dbg_mcast!(
                    "{}: left multicast group {}\n",
                    self.log_name,
                    GidText(&j.mgid.0)
                );
            },
        );
        match synced {
            Ok(0) => {}
            Ok(failed) => pr_warn!("{}: {} multicast joins failed\n", self.log_name, failed),
            Err(e) => pr_warn!("{}: multicast list not synced ({e:?})\n", self.log_name),
        }
    }

    /// Leaves every group of the list, and on InfiniBand the broadcast and send-only
    /// groups too, detaching `qp` (process context). `forget`: the list is forgotten too
    /// (the interface goes down); else it is joined again by the next run of the work item
    /// (the fabric changed).
    pub(crate) fn leave_all(&self, qp: &QueuePair<impl RecvBuffer>, forget: bool) {
        self.groups.leave_all(
            |mut j| match &mut j.member {
                Membership::Sa(g) => g.leave(qp),
                Membership::Ip { .. } => {
                    let _ = qp.detach_mcast(&rdma_gid(&j.mgid), 0);
                }
            },
            forget,
        );
        if self.sa.is_none() {
            return;
        }
        *self.bcast_ah.lock() = None;
        let taken = {
            let mut groups = self.sa_groups.lock();
            groups.requested = RBTree::new();
            (
                groups.broadcast.take(),
                core::mem::take(&mut groups.send_only),
            )
        };
        let (bcast, mut send_only) = taken;
        if let Some(mut g) = bcast {
            g.leave(qp);
        }
        for g in send_only.values_mut() {
            g.leave(qp);
        }
    }

    /// The groups joined as a send-only member, those still being joined included, for
    /// debugfs (`<if>_mcg`; InfiniBand).
    pub(crate) fn show_send_only(&self, out: &mut dyn Write) -> fmt::Result {
        let groups = self.sa_groups.lock();
        for g in groups.send_only.values() {
            write_group(out, &g.mgid().0, g.created_ms(), true, g.record().is_some())?;
        }
        Ok(())
    }

    /// The groups joined in full (process context).
    pub(crate) fn joined_groups(&self) -> KVec<Gid> {
        let mut all = KVec::new();
        self.groups.for_each_joined(|mgid, _| {
            let _ = all.push(*mgid, GFP_KERNEL);
        });
        all
    }

    /// The groups joined, for debugfs (`<if>_mcg`): the broadcast group, then the others.
    pub(crate) fn show_joined(&self, out: &mut dyn Write) -> fmt::Result {
        let mut result = Ok(());
        if self.broadcast_ready() {
            let joined = self
                .bcast_joined_ms
                .load(core::sync::atomic::Ordering::Relaxed);
            result = write_group(out, &self.broadcast.0, joined, false, true);
        }
        self.groups.for_each_joined(|mgid, joined_ms| {
            if result.is_ok() {
                result = write_group(out, &mgid.0, joined_ms, false, true);
            }
        });
        result
    }
}
