// SPDX-License-Identifier: GPL-2.0

//! Multicast of an interface (C: `ipoib_multicast.c`): the broadcast group, joined with the
//! interface while its partition exists and sent to through an address handle of its own,
//! and the groups its multicast list asks for (IPv4 groups, IPv6 all-nodes and
//! solicited-node groups, groups sockets join).
//!
//! The list changes in atomic context (`set_rx_mode`), so it is copied here and the joins
//! and leaves happen in process context (the interface's multicast work item). On RoCE a
//! join is an attach of the UD queue pair plus an IP-level join of the group on the Ethernet
//! device under the port, without which the group's packets never reach the queue pair;
//! with no subnet administrator to answer a join, the broadcast group's member record is
//! made locally, as the RDMA CM does. Joins through the SA (InfiniBand) belong here too.

use crate::{
    debugfs::{write_group, GidText},
    path::GID_INDEX,
    stats::now_ms,
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
    rdma::{
        ah::{AddressHandle, AhAttr},
        cm::GidAttr,
        device::{self, Device, Mtu},
        pd::ProtectionDomain,
        qp::QueuePair,
        sa::McMemberRecord,
    },
    sync::{Arc, Mutex, SpinLockBh},
};

/// Groups joined at most; further ones are not joined (their count is logged).
const MAX_GROUPS: usize = 64;

/// A group we are a member of.
struct Joined {
    mgid: Gid,
    /// When it was joined (ms, monotonic).
    joined_ms: i64,
    /// The IP-level join on the Ethernet device.
    _member: Ipv6McMembership,
}

impl Joined {
    fn new(mgid: Gid, member: Ipv6McMembership) -> Self {
        Self {
            mgid,
            joined_ms: now_ms(),
            _member: member,
        }
    }
}

/// The groups the multicast list asks for.
struct Wanted {
    groups: [Gid; MAX_GROUPS],
    len: usize,
    /// Whether joins happen (the interface is up).
    open: bool,
}

/// The groups the interface wants and the ones it has joined.
#[pin_data]
struct McastGroups {
    #[pin]
    wanted: SpinLockBh<Wanted>,
    /// Joined groups by slot, changed in process context only.
    #[pin]
    joined: Mutex<KVec<Option<Joined>>>,
}

impl McastGroups {
    fn new() -> Result<impl PinInit<Self>> {
        let mut slots = KVec::with_capacity(MAX_GROUPS, GFP_KERNEL)?;
        for _ in 0..MAX_GROUPS {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(pin_init!(Self {
            wanted <- new_spinlock_bh!(
                Wanted {
                    groups: [Gid::default(); MAX_GROUPS],
                    len: 0,
                    open: false,
                },
                "McastGroups::wanted"
            ),
            joined <- new_mutex!(slots, "McastGroups::joined"),
        }))
    }

    /// Calls `f` with each joined group and when it was joined (process context).
    fn for_each_joined(&self, mut f: impl FnMut(&Gid, i64)) {
        for j in self.joined.lock().iter().flatten() {
            f(&j.mgid, j.joined_ms);
        }
    }

    /// Records the groups the multicast list now asks for (atomic context) and, if they
    /// changed while the interface is up, calls `schedule` (under the lock, so that
    /// [`McastGroups::close`] cannot miss it). Returns how many groups did not fit.
    fn set_wanted(&self, groups: impl Iterator<Item = Gid>, schedule: impl FnOnce()) -> usize {
        let mut fresh = [Gid::default(); MAX_GROUPS];
        let mut len = 0;
        let mut excess = 0;
        for g in groups {
            match fresh.get_mut(len) {
                Some(slot) => {
                    *slot = g;
                    len += 1;
                }
                None => excess += 1,
            }
        }
        let mut wanted = self.wanted.lock();
        let changed = wanted.groups[..wanted.len] != fresh[..len];
        wanted.groups = fresh;
        wanted.len = len;
        if changed && wanted.open {
            schedule();
        }
        excess
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
    /// joins failed.
    fn sync(&self, join: impl Fn(&Gid) -> Result<Joined>, leave: impl Fn(&Gid)) -> usize {
        let (groups, len) = {
            let w = self.wanted.lock();
            (w.groups, if w.open { w.len } else { 0 })
        };
        let wanted = &groups[..len];
        let mut joined = self.joined.lock();
        for slot in joined.iter_mut() {
            if slot.as_ref().is_some_and(|j| !wanted.contains(&j.mgid)) {
                if let Some(j) = slot.take() {
                    leave(&j.mgid);
                }
            }
        }
        let mut failed = 0;
        for g in wanted {
            if joined.iter().flatten().any(|j| j.mgid == *g) {
                continue;
            }
            let Some(slot) = joined.iter_mut().find(|s| s.is_none()) else {
                failed += 1;
                continue;
            };
            match join(g) {
                Ok(j) => *slot = Some(j),
                Err(_) => failed += 1,
            }
        }
        failed
    }

    /// Leaves every group (the interface goes down) and forgets the wanted ones.
    fn leave_all(&self, leave: impl Fn(&Gid)) {
        for slot in self.joined.lock().iter_mut() {
            if let Some(j) = slot.take() {
                leave(&j.mgid);
            }
        }
        self.wanted.lock().len = 0;
    }
}

fn rdma_gid(g: &Gid) -> device::Gid {
    device::Gid(g.0)
}

/// The multicast state of an interface: the broadcast group and the other groups.
#[pin_data]
pub(crate) struct Multicast {
    /// The broadcast group (its GID carries the interface's P_Key).
    broadcast: Gid,
    /// The address handle broadcasts are sent through.
    bcast_ah: Arc<AddressHandle>,
    /// The IP-level join RoCE needs for the broadcast group to reach the queue pair (none
    /// while the partition is missing).
    _bcast_member: Option<Ipv6McMembership>,
    /// When the broadcast group was joined (ms, monotonic), for debugfs.
    bcast_joined_ms: i64,
    /// The groups of the multicast list.
    #[pin]
    groups: McastGroups,
}

impl Multicast {
    /// Joins the broadcast group of `broadcast` on `port` of `device` with `qp` if `join`
    /// (the partition exists), and makes its address handle in `pd` for paths of `mtu`.
    pub(crate) fn new(
        device: &Device,
        port: u32,
        qp: &QueuePair,
        pd: &Arc<ProtectionDomain>,
        broadcast: &HwAddr,
        mtu: Mtu,
        join: bool,
    ) -> Result<impl PinInit<Self>> {
        let mgid = broadcast.gid();
        let member = if join {
            Some(Self::join_broadcast(device, port, qp, &mgid)?)
        } else {
            None
        };
        // RoCE has no SA to answer a join with the group's record: it is made locally, as
        // the RDMA CM does, and gives the route (the group's Ethernet address, one hop).
        let port_gid = GidAttr::get(device, port, GID_INDEX)?;
        let record = McMemberRecord::roce(&rdma_gid(&mgid), &port_gid, wire::DEFAULT_QKEY, mtu, 1);
        let bcast_ah = AddressHandle::new(pd, &AhAttr::from_mcmember(device, port, &record)?)?;
        let groups = McastGroups::new()?;
        Ok(pin_init!(Self {
            broadcast: mgid,
            bcast_ah,
            _bcast_member: member,
            bcast_joined_ms: now_ms(),
            groups <- groups,
        }))
    }

    /// Attaches `qp` to the broadcast group `mgid` and joins it at the IP level, which RoCE
    /// needs for the group's traffic to reach the port.
    fn join_broadcast(
        device: &Device,
        port: u32,
        qp: &QueuePair,
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
    pub(crate) fn detach_broadcast(&self, qp: &QueuePair) {
        let _ = qp.detach_mcast(&rdma_gid(&self.broadcast), 0);
    }

    /// The address handle of the broadcast group.
    pub(crate) fn broadcast_ah(&self) -> &Arc<AddressHandle> {
        &self.bcast_ah
    }

    /// Takes the multicast list of `dev` in (atomic context): its groups are joined and left
    /// by [`Multicast::sync`], from the work item `schedule` queues if the list changed while
    /// the interface is up. The broadcast group is always joined.
    pub(crate) fn take_list(&self, dev: &NetDevice, mc: &McAddrs<'_>, schedule: impl FnOnce()) {
        let mut groups = [Gid::default(); MAX_GROUPS + 1];
        let mut n = 0;
        let mut extra = 0;
        mc.for_each(|addr| {
            let Ok(a) = HwAddr::from_bytes(addr) else {
                return;
            };
            if a.gid() == self.broadcast || !a.is_multicast() {
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
        let excess = self
            .groups
            .set_wanted(groups[..n].iter().copied(), schedule)
            + extra;
        if excess > 0 {
            pr_warn!(
                "{}: {} multicast groups beyond {} not joined\n",
                dev.name(),
                excess,
                MAX_GROUPS
            );
        }
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

    /// Joins and leaves groups with `qp` on `port` of `device` as the multicast list asks
    /// (process context).
    pub(crate) fn sync(&self, device: &Device, port: u32, qp: &QueuePair) {
        let ndev = match device.netdev(port) {
            Ok(ndev) => ndev,
            Err(e) => {
                pr_warn!(
                    "{} port {}: no Ethernet device for multicast ({:?})\n",
                    device.name(),
                    port,
                    e
                );
                return;
            }
        };
        let failed = self.groups.sync(
            |mgid| {
                qp.attach_mcast(&rdma_gid(mgid), 0)?;
                match Ipv6McMembership::join(&ndev, &mgid.0) {
                    Ok(member) => {
                        crate::params::ipoib_dbg_mcast!(
                            "{} port {}: joined multicast group {}\n",
                            device.name(),
                            port,
                            GidText(&mgid.0)
                        );
                        Ok(Joined::new(*mgid, member))
                    }
                    Err(e) => {
                        let _ = qp.detach_mcast(&rdma_gid(mgid), 0);
                        Err(e)
                    }
                }
            },
            |mgid| {
                let _ = qp.detach_mcast(&rdma_gid(mgid), 0);
                crate::params::ipoib_dbg_mcast!(
                    "{} port {}: left multicast group {}\n",
                    device.name(),
                    port,
                    GidText(&mgid.0)
                );
            },
        );
        if failed > 0 {
            pr_warn!(
                "{} port {}: {} multicast joins failed\n",
                device.name(),
                port,
                failed
            );
        }
    }

    /// Detaches `qp` from every group of the list and forgets them (the interface goes
    /// down).
    pub(crate) fn leave_all(&self, qp: &QueuePair) {
        self.groups.leave_all(|mgid| {
            let _ = qp.detach_mcast(&rdma_gid(mgid), 0);
        });
    }

    /// The groups joined, for debugfs (`<if>_mcg`): the broadcast group, then the others.
    pub(crate) fn show_joined(&self, out: &mut dyn Write) -> fmt::Result {
        let mut result = write_group(out, &self.broadcast.0, self.bcast_joined_ms, false);
        self.groups.for_each_joined(|mgid, joined_ms| {
            if result.is_ok() {
                result = write_group(out, &mgid.0, joined_ms, false);
            }
        });
        result
    }
}
