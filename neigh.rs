// SPDX-License-Identifier: GPL-2.0

//! Neighbours: the address handle for each destination this interface sends to.
//!
//! On RoCE a destination's route follows from its GID alone, so entries are keyed by GID and
//! made on first use; the destination QPN travels in each packet's pseudo header. Entries
//! unused for two ARP collection intervals are forgotten, as the C driver ages its own.
//!
//! Some providers (rxe) must not destroy an address handle in softirq context or under a
//! lock taken there. A forgotten handle is therefore retired, not dropped: it waits, with
//! the number of sends posted when it left the table, until that many sends have completed
//! (a UD send queue completes in order, and every send through the table is posted under
//! its lock), then the work item drops it in process context as its last user.

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
/// Handles dropped per [`Neighbours::take_reapable`] call.
const REAP_BATCH: usize = 16;

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
pub(crate) type NeighbourNode = RBTreeNode<[u8; 16], Neighbour>;

/// Address handles by destination GID, and the retired ones.
pub(crate) struct Neighbours {
    entries: RBTree<[u8; 16], Neighbour>,
    len: usize,
    /// Retired handles with the count of sends posted when they left the table; slots are
    /// reused, and added as needed.
    retired: KVec<Option<(u64, Arc<AddressHandle>)>>,
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
            retired: KVec::new(),
            epoch: 0,
        })
    }

    /// The index of a free retirement slot, added if none is (under the table's lock:
    /// without sleeping); `None` if none could be.
    fn free_slot(&mut self) -> Option<usize> {
        if let Some(i) = self.retired.iter().position(Option::is_none) {
            return Some(i);
        }
        self.retired.push(None, GFP_ATOMIC).ok()?;
        Some(self.retired.len() - 1)
    }

    /// Moves the entry of `gid` into the free retirement slot `slot`, `posted` sends having
    /// been posted so far; returns whether there was one.
    fn retire_into(&mut self, slot: usize, gid: &[u8; 16], posted: u64) -> bool {
        let Some(free) = self.retired.get_mut(slot) else {
            return false;
        };
        let Some(entry) = self.entries.remove(gid) else {
            return false;
        };
        *free = Some((posted, entry.ah));
        self.len -= 1;
        true
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
            gid,
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
        let n = self.entries.get_mut(gid)?;
        n.used = now;
        let stale = n.epoch != epoch;
        n.epoch = epoch;
        Some((&n.ah, stale))
    }

    /// The handle for `gid`, stale or not; `now` marks the entry used. Sends through it are
    /// posted before the lock is released.
    pub(crate) fn handle(&mut self, gid: &[u8; 16], now: i64) -> Option<&Arc<AddressHandle>> {
        let n = self.entries.get_mut(gid)?;
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
            f(gid, entry.used, entry.route);
        }
    }

    /// Whether `gid` has a handle.
    pub(crate) fn contains(&self, gid: &[u8; 16]) -> bool {
        self.entries.get(gid).is_some()
    }

    /// Adds `node`, made for `gid`, `posted` sends having been posted so far: a handle made
    /// again (its path queried again) retires the one it replaces; in a full table the
    /// destination used least recently makes room. Without a slot to retire the old one
    /// in, `node` comes back, to be dropped outside the lock (nothing was sent through it).
    pub(crate) fn insert(
        &mut self,
        gid: &[u8; 16],
        node: NeighbourNode,
        posted: u64,
    ) -> Option<NeighbourNode> {
        if self.contains(gid) {
            match self.free_slot() {
                Some(slot) => {
                    self.retire_into(slot, gid, posted);
                }
                None => return Some(node),
            }
        } else if self.len >= MAX_NEIGHBOURS {
            self.retire_oldest(posted);
        }
        // Not present (retired above if it was): nothing is replaced.
        let replaced = self.entries.insert(node);
        self.len += 1;
        let epoch = self.epoch;
        if let Some(n) = self.entries.get_mut(gid) {
            n.epoch = epoch;
        }
        replaced
    }

    /// How many destinations have a handle.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Retires the destinations unused since `deadline` (all with `i64::MAX`), `posted`
    /// sends having been posted so far; returns how many. Entries stay while no retirement
    /// slot is free.
    fn retire_idle(&mut self, deadline: i64, posted: u64) -> usize {
        let mut retired = 0;
        loop {
            let mut keys = [[0u8; 16]; REAP_BATCH];
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
                let Some(slot) = self.free_slot() else {
                    return retired;
                };
                retired += usize::from(self.retire_into(slot, key, posted));
            }
            if n < keys.len() {
                return retired;
            }
        }
    }

    /// Retires the destination used least recently, `posted` sends having been posted so
    /// far. Handles just made, which packets may still wait for, are the newest: they stay.
    fn retire_oldest(&mut self, posted: u64) {
        let Some(oldest) = self
            .entries
            .iter()
            .min_by_key(|(_, entry)| entry.used)
            .map(|(gid, _)| *gid)
        else {
            return;
        };
        if let Some(slot) = self.free_slot() {
            self.retire_into(slot, &oldest, posted);
        }
    }

    /// Takes out retired handles whose sends have all completed (`completed` sends so
    /// far), into `out`; the caller drops them outside the lock, in process context.
    /// Returns how many.
    fn take_reapable(
        &mut self,
        completed: u64,
        out: &mut [Option<Arc<AddressHandle>>; REAP_BATCH],
    ) -> usize {
        let mut n = 0;
        for slot in self.retired.iter_mut() {
            if n == out.len() {
                break;
            }
            if slot
                .as_ref()
                .is_some_and(|(posted, _)| *posted <= completed)
            {
                out[n] = slot.take().map(|(_, ah)| ah);
                n += 1;
            }
        }
        n
    }
}

/// Retires the destinations of `table` unused since `deadline` (all with `i64::MAX`), then
/// drops the retired handles no send refers to any more, in process context and outside
/// the lock. `posted` and `completed` tell the sends posted and completed so far.
pub(crate) fn retire(
    table: &SpinLockBh<Neighbours>,
    deadline: i64,
    posted: impl Fn() -> u64,
    completed: impl Fn() -> u64,
) {
    {
        let mut neigh = table.lock();
        neigh.retire_idle(deadline, posted());
    }
    loop {
        let mut out = [const { None }; REAP_BATCH];
        let done = completed();
        let n = table.lock().take_reapable(done, &mut out);
        // Destroyed here, in process context, without the lock.
        drop(out);
        if n < REAP_BATCH {
            break;
        }
    }
    // Once all are gone, so are their slots (many after a large table was collected).
    let slots = {
        let mut neigh = table.lock();
        if neigh.retired.iter().all(Option::is_none) {
            core::mem::take(&mut neigh.retired)
        } else {
            KVec::new()
        }
    };
    drop(slots);
}
