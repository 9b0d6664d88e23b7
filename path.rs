// SPDX-License-Identifier: GPL-2.0

//! Paths: how a destination's GID becomes the address handle datagrams to it go through and
//! the path record connections to it are requested over, and the packets that wait while
//! that happens (the C driver's `ipoib_path` and its queue).
//!
//! All resolution goes through [`PathResolver`]. On InfiniBand the subnet administrator
//! answers a path record query per destination (asynchronously: the held packets wait,
//! and go when the handle is made from the answer, or are dropped if the query failed).
//! On RoCE a destination's route follows from its GID alone (as the RDMA CM derives it), so
//! a handle is made at once in process context. Multicast groups on InfiniBand are sent to
//! through the handle of their membership, which the interface's multicast part makes.
//! [`Paths`] keeps the handles made per destination (the table is `neigh.rs`'s) and sends
//! datagrams through them.

use crate::{
    debugfs::{write_group, GidText},
    fabric::{Answer, Answered, PathLookup, SaOwner, SaPort},
    held::{HeldPackets, Hold, Spare},
    ipoib_ud::UdDatapath,
    local_gid::LocalGid,
    log_name::LogName,
    neigh::{self, Neighbours, Route},
    stats::{bump, now_ms, Counters},
    wire::{self, Gid, HwAddr, HWADDR_LEN},
};
use core::{
    fmt::{self, Write},
    sync::atomic::{AtomicBool, AtomicUsize, Ordering},
};
use kernel::{
    net::{
        dev::NetDevice,
        skb::{DropReason, SkBuff},
    },
    new_mutex, new_spinlock_bh,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    rdma::{
        ah::{AddressHandle, AhAttr},
        cm::{GidAttr, PathRecord},
        device::{self, Device, Mtu},
    },
    sync::{Arc, Mutex, SpinLockBh},
};

/// The GID table entry our addresses and paths start from, as in the C driver.
pub(crate) const GID_INDEX: u32 = 0;

/// Resolves the destinations of one interface.
#[derive(Clone)]
pub(crate) struct PathResolver {
    port: u32,
    /// The subnet administrator to ask (InfiniBand); `None` on RoCE.
    sa: Option<Arc<SaPort>>,
    /// Our GID and partition: paths start there.
    sgid: Arc<LocalGid>,
    pkey: u16,
}

impl PathResolver {
    /// The resolver of an interface on `port` with GID `sgid` in partition `pkey`, asking
    /// `sa` (an InfiniBand port) or deriving routes from GIDs (RoCE, without).
    pub(crate) fn new(port: u32, sa: Option<Arc<SaPort>>, sgid: Arc<LocalGid>, pkey: u16) -> Self {
        Self {
            port,
            sa,
            sgid,
            pkey,
        }
    }

    /// Whether paths come from a subnet administrator (an InfiniBand port).
    pub(crate) fn has_sa(&self) -> bool {
        self.sa.is_some()
    }

    /// The address handle for datagrams to `gid` on RoCE, for `ud` (process context:
    /// providers such as rxe may not make one in softirq context). Multicast stays on the
    /// link. A unicast peer's MAC follows from its link-local GID (the handle is not
    /// resolved by the core); rxe needs it to deliver to its own port (a child, or the
    /// parent of one), which the IP route, through `lo`, does not reach.
    fn roce_address_handle(&self, ud: &UdDatapath, gid: &Gid) -> Result<Arc<AddressHandle>> {
        let (hops, dmac) = if gid.is_multicast() {
            (1, wire::multicast_mac(gid))
        } else {
            (64, gid.link_local_mac().unwrap_or([0; 6]))
        };
        let attr = AhAttr::roce(self.port, GID_INDEX as u8, &device::Gid(gid.0), hops, dmac);
        ud.qp().address_handle(&attr)
    }

    /// The path a connection to `dest` is requested over, and the local GID entry it starts
    /// from (process context): the SA's on InfiniBand (waited for), with `mtu` on RoCE.
    pub(crate) fn connection_path(
        &self,
        device: &Device,
        dest: &Gid,
        mtu: Mtu,
    ) -> Result<(PathRecord, GidAttr)> {
        let sgid = GidAttr::get(device, self.port, GID_INDEX)?;
        let path = match &self.sa {
            Some(sa) => sa.path(&self.sgid.get(), dest, self.pkey)?,
            None => PathRecord::roce_v2_link_local(&sgid.gid(), &device::Gid(dest.0), mtu)?,
        };
        Ok((path, sgid))
    }
}

/// A path record query under way for a destination (its GID is the key it is kept by).
struct PendingPath {
    answer: Arc<Answer<PathRecord>>,
    _query: PathLookup,
}

/// The destinations of an interface: their address handles (`neigh.rs`), the packets
/// waiting for one, and the resolution that makes them. NAPI sends the packets once the
/// handles exist.
#[pin_data]
pub(crate) struct Paths {
    resolver: PathResolver,
    /// The interface's name in log lines.
    log_name: Arc<LogName>,
    /// Address handles per destination. Every send through one is posted under this lock
    /// (see `neigh.rs`); the transmit path, NAPI and process context take it.
    #[pin]
    neigh: SpinLockBh<Neighbours>,
    /// The packets waiting for a handle, per destination; taken from the transmit path,
    /// NAPI and the resolve work item, after `neigh` when both are.
    #[pin]
    held: SpinLockBh<HeldPackets>,
    /// How many packets `held` has, so NAPI skips it when none waits.
    held_count: AtomicUsize,
    /// Whether a destination packets wait for may have a handle now: NAPI looks through
    /// `held` only then.
    held_ready: AtomicBool,
    /// Destinations whose stale handles were used since the resolve work item last ran:
    /// their paths are queried again (InfiniBand); taken from the transmit path.
    #[pin]
    stale: SpinLockBh<KVec<Gid>>,
    /// Path queries under way (InfiniBand) by destination, at most one each, so that
    /// thousands waiting at once cost a lookup, not a walk, per packet held (C keeps its
    /// paths in a tree too); only the resolve work item and `stop` take the lock.
    #[pin]
    queries: Mutex<RBTree<[u8; 16], PendingPath>>,
    counters: Arc<Counters>,
}

impl Paths {
    /// The destinations of an interface on the port `resolver` resolves for, which counts
    /// its packets in `counters`.
    pub(crate) fn new(
        resolver: PathResolver,
        log_name: Arc<LogName>,
        counters: Arc<Counters>,
    ) -> Result<impl PinInit<Self>> {
        let neigh = Neighbours::new()?;
        Ok(pin_init!(Self {
            resolver,
            log_name,
            neigh <- new_spinlock_bh!(neigh, "Paths::neigh"),
            held <- new_spinlock_bh!(HeldPackets::new(), "Paths::held"),
            held_count: AtomicUsize::new(0),
            held_ready: AtomicBool::new(false),
            stale <- new_spinlock_bh!(KVec::new(), "Paths::stale"),
            queries <- new_mutex!(RBTree::new(), "Paths::queries"),
            counters,
        }))
    }

    /// Sends `skb` (pseudo header first) as a datagram to `dest` through `ud`: through `ah`
    /// if given (the broadcast group's), else through the handle of its destination, a GID
    /// (unicast, or a multicast group sent to without joining: RoCE needs no join to send).
    /// Without one yet, or while earlier packets to it still wait, the packet is held;
    /// returns whether the resolve work item must run.
    pub(crate) fn send(
        &self,
        ud: &UdDatapath,
        mut skb: SkBuff,
        dest: &HwAddr,
        ah: Option<&Arc<AddressHandle>>,
        dev: &NetDevice,
    ) -> bool {
        if let Err(reason) = ud.sendable(&mut skb) {
            skb.drop_with(reason);
            return false;
        }
        if let Some(ah) = ah {
            ud.post(skb, dest, ah, dev);
            return false;
        }
        // A neighbour's handle is borrowed from the table while the send is posted: the
        // lock keeps it alive without a reference of the packet's own.
        let mut neigh = self.neigh.lock();
        let gid = dest.gid();
        match neigh.get(&gid.0, now_ms()) {
            // Not ahead of packets to the same destination that still wait.
            Some((ah, stale))
                if self.held_count.load(Ordering::Relaxed) == 0
                    || !self.held.lock().contains(&gid) =>
            {
                ud.post(skb, dest, ah, dev);
                drop(neigh);
                stale && self.stale.lock().push(gid, GFP_ATOMIC).is_ok()
            }
            Some(_) => {
                drop(neigh);
                self.hold(&gid, skb);
                self.held_ready.store(true, Ordering::Release);
                true
            }
            None => {
                drop(neigh);
                self.hold(&gid, skb);
                true
            }
        }
    }

    /// Keeps `skb` until `gid` has an address handle; drops it, counted, when its
    /// destination's queue is full or no queue can be made for it.
    fn hold(&self, gid: &Gid, skb: SkBuff) {
        // Declared first, dropped last: an unused spare is freed outside the lock.
        let mut spare = None;
        let mut skb = skb;
        loop {
            let mut held = self.held.lock();
            match held.hold(gid, skb, &mut spare) {
                Hold::Held => {
                    self.held_count.fetch_add(1, Ordering::Relaxed);
                    return;
                }
                Hold::Dropped => break,
                Hold::NeedsQueue(back) if spare.is_none() => {
                    drop(held);
                    // The destination's first packet: its queue is made outside the lock.
                    match Spare::new(gid) {
                        Ok(s) => spare = Some(s),
                        Err(_) => {
                            back.drop_with(DropReason::NoMem);
                            break;
                        }
                    }
                    skb = back;
                }
                // A queue was given: never asked for again.
                Hold::NeedsQueue(back) => {
                    drop(held);
                    back.drop_with(DropReason::NeighQueueFull);
                    break;
                }
            }
        }
        bump(&self.counters.tx_dropped, 1);
    }

    /// Sends through `ud` the held packets whose destinations now have a handle (from
    /// NAPI), each destination's in the order they were held, as many destinations' as the
    /// send queue has room for: the rest wait for the next round, which the completions of
    /// these sends bring.
    pub(crate) fn send_ready(&self, ud: &UdDatapath, dev: &NetDevice) {
        if self.held_count.load(Ordering::Relaxed) == 0
            || !self.held_ready.swap(false, Ordering::Acquire)
        {
            return;
        }
        let mut neigh = self.neigh.lock();
        let mut held = self.held.lock();
        let now = now_ms();
        let before = held.packets();
        let mut malformed = 0;
        // With nothing in flight a destination goes whatever it holds: no completion would
        // come to make more room (its packets beyond the send queue's size are dropped).
        let (room, limit) = ud.send_room();
        let (mut room, limit) = (room as usize, limit as usize);
        let stopped = held.release(
            |gid| neigh.handle(gid, now).cloned(),
            |n| {
                let fits = n <= room || room == limit;
                room = room.saturating_sub(n);
                fits
            },
            |ah, skb| {
                let mut hdr = [0u8; HWADDR_LEN];
                let dest = skb
                    .copy_bits(0, &mut hdr)
                    .map(|()| HwAddr::from_bytes(&hdr));
                match dest {
                    // Its size was checked when it was held.
                    Ok(Ok(dest)) => ud.post(skb, &dest, ah, dev),
                    _ => malformed += 1,
                }
            },
        );
        self.held_count
            .fetch_sub(before - held.packets(), Ordering::Relaxed);
        if stopped {
            self.held_ready.store(true, Ordering::Release);
        }
        // The handles' last references may go only once the table's lock is released (see
        // `neigh.rs`); they are still in the table here, so these are not the last.
        drop(held);
        drop(neigh);
        bump(&self.counters.tx_dropped, malformed);
    }

    /// The destinations held packets wait for (process context: the copy is allocated
    /// outside the lock, to the size last seen).
    fn wanted(&self) -> Result<KVec<Gid>> {
        loop {
            let seen = self.held.lock().destinations();
            let mut wanted = KVec::with_capacity(seen, GFP_KERNEL)?;
            let held = self.held.lock();
            if held.destinations() <= wanted.capacity() {
                held.destinations_into(&mut wanted);
                return Ok(wanted);
            }
        }
    }

    /// Makes the address handles the held packets wait for (the resolve work item), for
    /// sends through `ud`, and enters them in the table: on RoCE at once, on
    /// InfiniBand from the path records the SA answers, whose arrival `owner` hears of.
    /// Multicast groups on InfiniBand are passed to `multicast`, whose handles come from
    /// their memberships ([`Paths::add_handle`]). The packets of a destination that gets
    /// none are dropped; `device` names the port in the log.
    pub(crate) fn resolve(
        &self,
        device: &Device,
        ud: &UdDatapath,
        owner: &Arc<dyn SaOwner>,
        mut multicast: impl FnMut(&Gid),
    ) {
        self.take_answers(device, ud);
        // Stale handles in use: their paths queried again, the handles used meanwhile.
        let stale = core::mem::take(&mut *self.stale.lock());
        for gid in stale.iter() {
            match &self.resolver.sa {
                Some(_) if gid.is_multicast() => multicast(gid),
                Some(sa) => {
                    if self.ask(sa, gid, owner).is_err() {
                        bump(&self.counters.path_failures, 1);
                    }
                }
                None => {}
            }
        }
        let Ok(wanted) = self.wanted() else {
            // Tried again with the next packet held.
            return;
        };
        for gid in wanted.iter() {
            if self.neigh.lock().contains(&gid.0) {
                // Made meanwhile: NAPI sends what waits for it.
                self.held_ready.store(true, Ordering::Release);
                continue;
            }
            let made = match &self.resolver.sa {
                Some(_) if gid.is_multicast() => {
                    multicast(gid);
                    continue;
                }
                Some(sa) => match self.ask(sa, gid, owner) {
                    Ok(()) => continue,
                    Err(e) => {
                        bump(&self.counters.path_failures, 1);
                        Err(e)
                    }
                },
                None => {
                    bump(&self.counters.path_lookups, 1);
                    self.resolver.roce_address_handle(ud, gid)
                }
            };
            self.enter(gid, made, None);
        }
    }

    /// Starts a path query for `gid` unless one is under way.
    fn ask(&self, sa: &SaPort, gid: &Gid, owner: &Arc<dyn SaOwner>) -> Result {
        let mut queries = self.queries.lock();
        if queries.get(&gid.0).is_some() {
            return Ok(());
        }
        let slot = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let answer = Answer::new(Some((owner.clone(), Answered::Path)))?;
        let sgid = self.resolver.sgid.get();
        let query = sa.query_path(&sgid, gid, self.resolver.pkey, answer.clone())?;
        bump(&self.counters.path_lookups, 1);
        queries.insert(slot.into_node(
            gid.0,
            PendingPath {
                answer,
                _query: query,
            },
        ));
        Ok(())
    }

    /// The next answered path query after `from` (in GID order), taken out of the table:
    /// one walk over the queries per run of the resolve work item, however many answered.
    fn next_answered(&self, from: &[u8; 16]) -> Option<([u8; 16], PendingPath)> {
        let mut queries = self.queries.lock();
        let mut cursor = queries.cursor_lower_bound(from)?;
        while !cursor.current().1.answer.latest_ready() {
            cursor = cursor.move_next()?;
        }
        let (_, node) = cursor.remove_current();
        Some(node.to_key_value())
    }

    /// Takes in the answered path queries: a handle is made from each path found.
    fn take_answers(&self, device: &Device, ud: &UdDatapath) {
        let mut from = [0; 16];
        while let Some((key, done)) = self.next_answered(&from) {
            from = key;
            let gid = Gid(key);
            // The query is over; dropped here, outside the lock.
            let PendingPath { answer, .. } = done;
            let Some(answer) = answer.take() else {
                continue;
            };
            let made = answer.and_then(|path| {
                let attr = AhAttr::from_path(device, self.resolver.port, &path, None)?;
                let route = Route {
                    dlid: path.dlid(),
                    sl: path.sl(),
                };
                Ok((ud.qp().address_handle(&attr)?, route))
            });
            match made {
                Ok((ah, route)) => self.enter(&gid, Ok(ah), Some(route)),
                Err(e) => {
                    bump(&self.counters.path_failures, 1);
                    crate::params::ipoib_dbg!(
                        "{}: no path to {} ({:?})\n",
                        self.log_name,
                        GidText(&gid.0),
                        e
                    );
                    self.drop_held(&gid);
                }
            }
        }
    }

    /// Enters the handle `made` for `gid` (if it was made) in the table; without one, the
    /// packets held for `gid` are dropped.
    fn enter(&self, gid: &Gid, made: Result<Arc<AddressHandle>>, route: Option<Route>) {
        let made = made
            .and_then(|ah| Neighbours::node(gid.0, ah, route, now_ms()))
            .map(|node| self.neigh.lock().insert(&gid.0, node));
        match &made {
            Ok(_) => crate::params::ipoib_dbg!(
                "{}: address handle made for {}\n",
                self.log_name,
                GidText(&gid.0)
            ),
            Err(e) => crate::params::ipoib_dbg!(
                "{}: no address handle for {} ({:?})\n",
                self.log_name,
                GidText(&gid.0),
                e
            ),
        }
        // The entry replaced is dropped here, outside the lock. Without a route the packets
        // for it go.
        match made {
            Ok(_) => self.held_ready.store(true, Ordering::Release),
            Err(_) => self.drop_held(gid),
        }
    }

    /// Enters `ah`, the handle of a multicast group's membership, for `gid` (process
    /// context).
    pub(crate) fn add_handle(&self, gid: &Gid, ah: Arc<AddressHandle>) {
        self.enter(gid, Ok(ah), None);
    }

    /// Drops the packets held for `gid`, which has no route: counted as dropped, as C
    /// counts them (`ip -s link` shows the same with either driver).
    pub(crate) fn drop_held(&self, gid: &Gid) {
        let Some(queue) = self.held.lock().take(gid) else {
            return;
        };
        self.held_count.fetch_sub(queue.len(), Ordering::Relaxed);
        bump(&self.counters.tx_dropped, queue.len() as u64);
        // Freed here, outside the lock.
        drop(queue);
    }

    /// Makes every destination's handle stale: its path is queried again when next used,
    /// the handle used meanwhile (the subnet manager asked ports to register again).
    pub(crate) fn mark_stale(&self) {
        self.neigh.lock().mark_stale();
    }

    /// Whether packets wait for a handle.
    pub(crate) fn holds_packets(&self) -> bool {
        self.held_count.load(Ordering::Relaxed) != 0
    }

    /// Whether `gid` is in use: it has a handle, or packets wait for one.
    pub(crate) fn in_use(&self, gid: &Gid) -> bool {
        self.neigh.lock().contains(&gid.0) || self.held.lock().contains(gid)
    }

    /// Cancels the path queries under way (the interface goes down or the fabric changed).
    pub(crate) fn cancel_queries(&self) {
        let queries = core::mem::take(&mut *self.queries.lock());
        // Cancelled here, outside the lock: each waits for its callback.
        drop(queries);
    }

    /// Drops every held packet, counted, and the queries for them (the interface goes
    /// down).
    pub(crate) fn drop_all(&self) {
        self.cancel_queries();
        let stale = core::mem::take(&mut *self.stale.lock());
        drop(stale);
        let (dropped, queues) = self.held.lock().take_all();
        self.held_count.store(0, Ordering::Relaxed);
        bump(&self.counters.tx_dropped, dropped as u64);
        // Freed here, outside the lock.
        drop(queues);
    }

    /// Forgets the destinations unused since `deadline` (all with `i64::MAX`), then destroys
    /// the handles of `ud`'s queue pair that no send in flight uses any more (process
    /// context).
    pub(crate) fn forget(&self, ud: &UdDatapath, deadline: i64) {
        neigh::forget(&self.neigh, deadline);
        ud.qp().reap_address_handles();
    }

    /// How many destinations have an address handle.
    pub(crate) fn count(&self) -> usize {
        self.neigh.lock().len()
    }

    /// The unicast destinations for debugfs (`<if>_path`), in the C driver's format: each
    /// has an address handle, with its path's LID and SL on InfiniBand (none apply on
    /// RoCE), and its idle time.
    pub(crate) fn show_paths(&self, out: &mut dyn Write, now: i64) -> fmt::Result {
        let mut result = Ok(());
        self.neigh.lock().for_each(|gid, used, route| {
            if result.is_err() || Gid(*gid).is_multicast() {
                return;
            }
            result = write!(out, "GID: {}\n  complete: {:>6}\n", GidText(gid), "yes");
            if let (Ok(()), Some(r)) = (result, route) {
                result = write!(out, "  DLID:     0x{:04x}\n  SL: {:>12}\n", r.dlid, r.sl);
            }
            if result.is_ok() {
                result = write!(out, "  idle: {:>10} ms\n\n", now - used);
            }
        });
        result
    }

    /// The multicast groups sent to without joining them (those not in `joined`), for
    /// debugfs (`<if>_mcg`; RoCE, where sending needs no join), with their last use as
    /// creation time.
    pub(crate) fn show_send_only(&self, out: &mut dyn Write, joined: &[Gid]) -> fmt::Result {
        let mut result = Ok(());
        self.neigh.lock().for_each(|gid, used, _| {
            if result.is_ok() && Gid(*gid).is_multicast() && !joined.contains(&Gid(*gid)) {
                result = write_group(out, gid, used, true, true);
            }
        });
        result
    }
}
