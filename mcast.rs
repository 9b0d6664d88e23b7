// SPDX-License-Identifier: GPL-2.0

//! Multicast groups of an interface beyond the broadcast group: the ones its multicast list
//! asks for (IPv4 groups, IPv6 all-nodes and solicited-node groups, groups sockets join).
//!
//! The list changes in atomic context (`set_rx_mode`), so it is copied here and the joins
//! and leaves happen in process context. On RoCE a join is an attach of the UD queue pair
//! plus an IP-level join of the group on the Ethernet device under the port, without which
//! the group's packets never reach the queue pair.

use crate::wire::Gid;
use kernel::{
    net::mcast::Ipv6McMembership, new_mutex, new_spinlock_bh, prelude::*, sync::Mutex,
    sync::SpinLockBh,
};

/// Groups joined at most; further ones are not joined (their count is logged).
pub(crate) const MAX_GROUPS: usize = 64;

/// A group we are a member of.
pub(crate) struct Joined {
    mgid: Gid,
    /// When it was joined (ms, monotonic).
    joined_ms: i64,
    /// The IP-level join on the Ethernet device.
    _member: Ipv6McMembership,
}

impl Joined {
    pub(crate) fn new(mgid: Gid, member: Ipv6McMembership) -> Self {
        Self {
            mgid,
            joined_ms: crate::stats::now_ms(),
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
pub(crate) struct McastGroups {
    #[pin]
    wanted: SpinLockBh<Wanted>,
    /// Joined groups by slot, changed in process context only.
    #[pin]
    joined: Mutex<KVec<Option<Joined>>>,
}

impl McastGroups {
    pub(crate) fn new() -> Result<impl PinInit<Self>> {
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
    pub(crate) fn for_each_joined(&self, mut f: impl FnMut(&Gid, i64)) {
        for j in self.joined.lock().iter().flatten() {
            f(&j.mgid, j.joined_ms);
        }
    }

    /// Records the groups the multicast list now asks for (atomic context) and, if they
    /// changed while the interface is up, calls `schedule` (under the lock, so that
    /// [`McastGroups::close`] cannot miss it). Returns how many groups did not fit.
    pub(crate) fn set_wanted(
        &self,
        groups: impl Iterator<Item = Gid>,
        schedule: impl FnOnce(),
    ) -> usize {
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
    pub(crate) fn open(&self) {
        self.wanted.lock().open = true;
    }

    /// Stops scheduling joins; the caller then flushes its work item and calls
    /// [`McastGroups::leave_all`].
    pub(crate) fn close(&self) {
        self.wanted.lock().open = false;
    }

    /// Brings the joined groups in line with the wanted ones (process context): leaves the
    /// groups no longer wanted with `leave`, joins new ones with `join`. Returns how many
    /// joins failed.
    pub(crate) fn sync(
        &self,
        join: impl Fn(&Gid) -> Result<Joined>,
        leave: impl Fn(&Gid),
    ) -> usize {
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
    pub(crate) fn leave_all(&self, leave: impl Fn(&Gid)) {
        for slot in self.joined.lock().iter_mut() {
            if let Some(j) = slot.take() {
                leave(&j.mgid);
            }
        }
        self.wanted.lock().len = 0;
    }
}
