// SPDX-License-Identifier: GPL-2.0

//! Packets held while their destination's address handle is made (C: the queues of
//! `ipoib_path`, `ipoib_neigh` and `ipoib_mcast`). Every destination has a queue of its
//! own, so that one that never resolves (a path the SA does not know, a group that cannot
//! be joined) keeps no other from resolving: a few packets per unicast destination, more
//! per multicast group, whose join takes longer and which may be sent a burst meanwhile.

use crate::wire::Gid;
use kernel::{
    net::skb::{DropReason, SkBuff},
    prelude::*,
    rbtree::{Entry, RBTree, RBTreeNodeReservation},
};

/// Packets held per unicast destination while its path is resolved, as in C.
const PER_PATH: usize = 3;
/// Packets held per multicast group while it is joined, as in C.
const PER_GROUP: usize = 64;
/// Destinations with held packets, at most: twice the default hard limit of each of the
/// stack's neighbour tables (1024, ARP and neighbour discovery), which bound the
/// destinations IP sends to. Only packets to made-up addresses (packet sockets) reach it.
const MAX_DESTINATIONS: usize = 4096;

/// How many packets `gid` may have waiting.
fn limit(gid: &Gid) -> usize {
    if gid.is_multicast() {
        PER_GROUP
    } else {
        PER_PATH
    }
}

/// A destination's queue, made outside the lock (it allocates) before the destination's
/// first packet is held.
pub(crate) struct Spare {
    node: RBTreeNodeReservation<[u8; 16], KVec<SkBuff>>,
    queue: KVec<SkBuff>,
}

impl Spare {
    /// An empty queue for `gid`, at its full size (atomic context: the transmit path).
    pub(crate) fn new(gid: &Gid) -> Result<Self> {
        Ok(Self {
            node: RBTreeNodeReservation::new(GFP_ATOMIC)?,
            queue: KVec::with_capacity(limit(gid), GFP_ATOMIC)?,
        })
    }
}

/// What [`HeldPackets::hold`] did with a packet.
pub(crate) enum Hold {
    /// It waits in its destination's queue.
    Held,
    /// Its destination's queue is full, or too many destinations wait: it goes.
    Dropped,
    /// Its destination has no queue yet: it comes back, to be held again with a [`Spare`].
    NeedsQueue(SkBuff),
}

/// The held packets of an interface, by destination GID; kept under its owner's lock.
pub(crate) struct HeldPackets {
    queues: RBTree<[u8; 16], KVec<SkBuff>>,
    destinations: usize,
    packets: usize,
}

impl HeldPackets {
    pub(crate) fn new() -> Self {
        Self {
            queues: RBTree::new(),
            destinations: 0,
            packets: 0,
        }
    }

    /// Holds `skb` for `gid`, in a queue taken from `spare` if `gid` has none yet.
    pub(crate) fn hold(&mut self, gid: &Gid, skb: SkBuff, spare: &mut Option<Spare>) -> Hold {
        let full = self.destinations >= MAX_DESTINATIONS;
        let queue = match self.queues.entry(gid.0) {
            Entry::Occupied(o) => o.into_mut(),
            Entry::Vacant(_) if full => {
                skb.drop_with(DropReason::NeighQueueFull);
                return Hold::Dropped;
            }
            Entry::Vacant(v) => match spare.take() {
                Some(Spare { node, queue }) => {
                    self.destinations += 1;
                    v.insert(queue, node)
                }
                None => return Hold::NeedsQueue(skb),
            },
        };
        if queue.len() >= limit(gid) {
            skb.drop_with(DropReason::NeighQueueFull);
            return Hold::Dropped;
        }
        // Within the capacity it was made with: no allocation.
        if queue.push(skb, GFP_ATOMIC).is_err() {
            return Hold::Dropped;
        }
        self.packets += 1;
        Hold::Held
    }

    /// Whether packets wait for `gid`.
    pub(crate) fn contains(&self, gid: &Gid) -> bool {
        self.queues.get(&gid.0).is_some()
    }

    /// How many packets wait.
    pub(crate) fn packets(&self) -> usize {
        self.packets
    }

    /// How many destinations packets wait for.
    pub(crate) fn destinations(&self) -> usize {
        self.destinations
    }

    /// Appends to `out` the destinations packets wait for, as many as its capacity takes.
    pub(crate) fn destinations_into(&self, out: &mut KVec<Gid>) {
        for gid in self.queues.keys() {
            if out.len() == out.capacity() || out.push(Gid(*gid), GFP_NOWAIT).is_err() {
                return;
            }
        }
    }

    /// Hands `send` the packets of every destination that `handle` gives a handle now, in
    /// the order each destination's were held, and forgets their queues; stops at the first
    /// destination whose packets `room` says cannot go now (the send queue is full: they
    /// wait for its completions, as C's go back through the qdisc). Returns whether it
    /// stopped so.
    pub(crate) fn release<H>(
        &mut self,
        mut handle: impl FnMut(&[u8; 16]) -> Option<H>,
        mut room: impl FnMut(usize) -> bool,
        mut send: impl FnMut(&H, SkBuff),
    ) -> bool {
        let mut cursor = self.queues.cursor_front();
        while let Some(c) = cursor {
            let key = *c.current().0;
            let Some(h) = handle(&key) else {
                cursor = c.move_next();
                continue;
            };
            if !room(c.current().1.len()) {
                return true;
            }
            let (next, node) = c.remove_current();
            // The cursor moves back only when the removed node was the last.
            cursor = next.filter(|n| *n.current().0 > key);
            let (_, queue) = node.to_key_value();
            self.destinations -= 1;
            self.packets -= queue.len();
            for skb in queue {
                send(&h, skb);
            }
        }
        false
    }

    /// Takes out the packets held for `gid`, to be dropped by the caller outside the lock.
    pub(crate) fn take(&mut self, gid: &Gid) -> Option<KVec<SkBuff>> {
        let queue = self.queues.remove(&gid.0)?;
        self.destinations -= 1;
        self.packets -= queue.len();
        Some(queue)
    }

    /// Takes out every held packet, to be dropped by the caller outside the lock.
    pub(crate) fn take_all(&mut self) -> (usize, RBTree<[u8; 16], KVec<SkBuff>>) {
        let packets = self.packets;
        self.destinations = 0;
        self.packets = 0;
        (packets, core::mem::take(&mut self.queues))
    }
}
