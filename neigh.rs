// SPDX-License-Identifier: GPL-2.0

//! Neighbours: the address handle for each destination this interface sends to.
//!
//! On RoCE a destination's route follows from its GID alone, so entries are keyed by GID and
//! made on first use; the destination QPN travels in each packet's pseudo header. Entries
//! unused for two ARP collection intervals are forgotten, as the C driver ages its own.
//!
//! A handle dropped here may still be used by a send in flight: the queue pair it was made
//! for keeps it until that send is over, and destroys it when the collection work item
//! reaps (see `kernel::rdma::ah`).

use crate::wire::GidKey;
use kernel::{
    prelude::*,
    rbtree::{RBTree, RBTreeNode},
    rdma::ah::AddressHandle,
    sync::{Arc, SpinLockBh},
};

/// Entries kept: twice the default hard limit of each of the stack's neighbour tables
/// (1024, ARP and neighbour discovery), which bound the destinations IP sends to, so that
/// only packets to made-up addresses (packet sockets) fill it. Beyond, the destination
/// used least recently makes room (its handle is cheap to make again).
const MAX_NEIGHBOURS: usize = 4096;
/// Entries forgotten per lock hold when collecting.
const FORGET_BATCH: usize = 16;

/// One destination: its handle, when a packet last used it (ms, monotonic), and on
/// InfiniBand the LID and service level of its path.
pub(crate) struct Neighbour {
    ah: Arc<AddressHandle>,
    used: i64,
    route: Option<Route>,
    /// The table's epoch when the handle was made or last found current.
    epoch: u32,
}

/// Where a path record sends a destination's packets (InfiniBand), for debugfs.
#[derive(Clone, Copy)]
pub(crate) struct Route {
    pub(crate) dlid: u16,
    pub(crate) sl: u8,
}

/// A table entry made outside the lock, for [`Neighbours::insert`].
pub(crate) type NeighbourNode = RBTreeNode<GidKey, Neighbour>;

/// Address handles by destination GID.
pub(crate) struct Neighbours {
    entries: RBTree<GidKey, Neighbour>,
    len: usize,
    /// Advanced when every path may have changed (the subnet manager asked ports to
    /// register again): an entry of an older epoch is stale, used still, and its path
    /// queried again when next used.
    epoch: u32,
}

impl Neighbours {
    pub(crate) fn new() -> Result<Self> {
        Ok(Self {
            entries: RBTree::new(),
            len: 0,
            epoch: 0,
        })
    }

    /// A table entry for `gid`, reached through `ah` on `route` (process context, before
    /// taking the lock).
    pub(crate) fn node(
        gid: [u8; 16],
        ah: Arc<AddressHandle>,
        route: Option<Route>,
        now: i64,
    ) -> Result<NeighbourNode> {
        RBTreeNode::new(
            GidKey::new(&gid),
            Neighbour {
                ah,
                used: now,
                route,
                epoch: 0,
            },
            GFP_KERNEL,
        )
    }

    /// The handle for `gid`, if one was made, and whether it was stale: its path is then to
    /// be queried again (it counts as current from now on). `now` marks the entry used.
    /// Sends through it are posted before the lock is released.
    pub(crate) fn get(&mut self, gid: &[u8; 16], now: i64) -> Option<(&Arc<AddressHandle>, bool)> {
        let epoch = self.epoch;
        let n = self.entries.get_mut(&GidKey::new(gid))?;
        n.used = now;
        let stale = n.epoch != epoch;
        n.epoch = epoch;
        Some((&n.ah, stale))
    }

    /// The handle for `gid`, stale or not; `now` marks the entry used. Sends through it are
    /// posted before the lock is released.
    pub(crate) fn handle(&mut self, gid: &[u8; 16], now: i64) -> Option<&Arc<AddressHandle>> {
        let n = self.entries.get_mut(&GidKey::new(gid))?;
        n.used = now;
        Some(&n.ah)
    }

    /// Makes every entry stale: each destination's path is queried again when next used,
    /// while its handle goes on being used (C: `ipoib_mark_paths_invalid`).
    pub(crate) fn mark_stale(&mut self) {
        self.epoch = self.epoch.wrapping_add(1);
    }

    /// Calls `f` with each destination, when a packet last used it, and its route.
    pub(crate) fn for_each(&self, mut f: impl FnMut(&[u8; 16], i64, Option<Route>)) {
        for (gid, entry) in self.entries.iter() {
            f(&gid.to_bytes(), entry.used, entry.route);
        }
    }

    /// Whether `gid` has a handle.
    pub(crate) fn contains(&self, gid: &[u8; 16]) -> bool {
        self.entries.get(&GidKey::new(gid)).is_some()
    }

    /// Adds `node`, made for `gid`; returns the entry it replaces (a handle made again, its
    /// path queried again), to be dropped outside the lock. In a full table the destination
    /// used least recently makes room.
    pub(crate) fn insert(&mut self, gid: &[u8; 16], node: NeighbourNode) -> Option<NeighbourNode> {
        if !self.contains(gid) {
            if self.len >= MAX_NEIGHBOURS {
                self.forget_oldest();
            }
            self.len += 1;
        }
        let replaced = self.entries.insert(node);
        let epoch = self.epoch;
        if let Some(n) = self.entries.get_mut(&GidKey::new(gid)) {
            n.epoch = epoch;
        }
        replaced
    }

    /// How many destinations have a handle.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Forgets up to [`FORGET_BATCH`] destinations unused since `deadline`; returns how many.
    fn forget_idle(&mut self, deadline: i64) -> usize {
        let mut keys = [GidKey::default(); FORGET_BATCH];
        let mut n = 0;
        for (gid, entry) in self.entries.iter() {
            if entry.used < deadline {
                keys[n] = *gid;
                n += 1;
                if n == keys.len() {
                    break;
                }
            }
        }
        for key in &keys[..n] {
            if self.entries.remove(key).is_some() {
                self.len -= 1;
            }
        }
        n
    }

    /// Forgets the destination used least recently. Handles just made, which packets may
    /// still wait for, are the newest: they stay.
    fn forget_oldest(&mut self) {
        let oldest = self
            .entries
            .iter()
            .min_by_key(|(_, entry)| entry.used)
            .map(|(gid, _)| *gid);
        if let Some(gid) = oldest {
            if self.entries.remove(&gid).is_some() {
                self.len -= 1;
            }
        }
    }
}

/// Forgets the destinations of `table` unused since `deadline` (all with `i64::MAX`), a
/// batch per lock hold.
pub(crate) fn forget(table: &SpinLockBh<Neighbours>, deadline: i64) {
    while table.lock().forget_idle(deadline) == FORGET_BATCH {}
}
