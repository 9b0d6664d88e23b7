// SPDX-License-Identifier: GPL-2.0

//! Paths: how a destination's GID becomes the address handle datagrams to it go through and
//! the path record connections to it are requested over, and the packets that wait while
//! that happens (the C driver's `ipoib_path` and its queue).
//!
//! All resolution goes through [`PathResolver`]. On RoCE, the only kind of port so far, a
//! destination's route follows from its GID alone (as the RDMA CM derives it), so a handle
//! is made at once in process context. An InfiniBand port will ask the subnet
//! administrator for a path record here instead; the held packets wait for it the same way.
//! [`Paths`] keeps the handles made per destination (the table is `neigh.rs`'s) and sends
//! datagrams through them.

use crate::{
    debugfs::{write_group, GidText},
    ipoib_ud::UdDatapath,
    neigh::{self, Neighbours},
    stats::{bump, now_ms, Counters},
    wire::{self, Gid, HwAddr, HWADDR_LEN},
};
use core::{
    fmt::{self, Write},
    sync::atomic::{AtomicUsize, Ordering},
};
use kernel::{
    net::{dev::NetDevice, skb::SkBuff},
    new_spinlock_bh,
    prelude::*,
    rdma::{
        ah::{AddressHandle, AhAttr},
        cm::{GidAttr, PathRecord},
        device::{self, Device, Mtu},
        pd::ProtectionDomain,
    },
    sync::{Arc, SpinLockBh},
};

/// The GID table entry our addresses and paths start from, as in the C driver.
pub(crate) const GID_INDEX: u32 = 0;
/// Packets held while their destinations are resolved.
const HELD_MAX: usize = 64;

/// Resolves the destinations of one port.
#[derive(Clone, Copy)]
pub(crate) struct PathResolver {
    port: u32,
}

impl PathResolver {
    /// The resolver of `port` (a RoCE port).
    pub(crate) fn new(port: u32) -> Self {
        Self { port }
    }

    /// The address handle for datagrams to `gid`, in `pd` (process context: providers such
    /// as rxe may not make one in softirq context). Multicast stays on the link; a unicast
    /// MAC is resolved as the handle is made.
    pub(crate) fn address_handle(
        &self,
        pd: &Arc<ProtectionDomain>,
        gid: &Gid,
    ) -> Result<Arc<AddressHandle>> {
        let (hops, dmac) = if gid.is_multicast() {
            (1, wire::multicast_mac(gid))
        } else {
            (64, [0; 6])
        };
        let attr = AhAttr::roce(self.port, GID_INDEX as u8, &device::Gid(gid.0), hops, dmac);
        AddressHandle::new(pd, &attr)
    }

    /// The path a connection to `dest` is requested over, with `mtu`, and the local GID
    /// entry it starts from (process context).
    pub(crate) fn connection_path(
        &self,
        device: &Device,
        dest: &Gid,
        mtu: Mtu,
    ) -> Result<(PathRecord, GidAttr)> {
        let sgid = GidAttr::get(device, self.port, GID_INDEX)?;
        let path = PathRecord::roce_v2_link_local(&sgid.gid(), &device::Gid(dest.0), mtu)?;
        Ok((path, sgid))
    }
}

/// The destinations of an interface: their address handles (`neigh.rs`), the packets
/// waiting for one, and the resolution that makes them. NAPI sends the packets once the
/// handles exist.
#[pin_data]
pub(crate) struct Paths {
    resolver: PathResolver,
    /// Address handles per destination. Every send through one is posted under this lock
    /// (see `neigh.rs`); the transmit path, NAPI and process context take it.
    #[pin]
    neigh: SpinLockBh<Neighbours>,
    /// The held packets with their destination GIDs; taken from the transmit path, NAPI
    /// and the resolve work item.
    #[pin]
    held: SpinLockBh<KVec<Option<(Gid, SkBuff)>>>,
    /// How many `held` slots are used, so NAPI skips the table when none is.
    held_count: AtomicUsize,
    counters: Arc<Counters>,
}

impl Paths {
    /// The destinations of an interface on the port `resolver` resolves for, which counts
    /// its packets in `counters`.
    pub(crate) fn new(
        resolver: PathResolver,
        counters: Arc<Counters>,
    ) -> Result<impl PinInit<Self>> {
        let mut held = KVec::with_capacity(HELD_MAX, GFP_KERNEL)?;
        for _ in 0..HELD_MAX {
            held.push(None, GFP_KERNEL)?;
        }
        let neigh = Neighbours::new()?;
        Ok(pin_init!(Self {
            resolver,
            neigh <- new_spinlock_bh!(neigh, "Paths::neigh"),
            held <- new_spinlock_bh!(held, "Paths::held"),
            held_count: AtomicUsize::new(0),
            counters,
        }))
    }

    /// Sends `skb` (pseudo header first) as a datagram to `dest` through `ud`: through `ah`
    /// if given (the broadcast group's), else through the handle of its destination, a GID
    /// (unicast, or a multicast group sent to without joining: RoCE needs no join to send).
    /// Without one yet the packet is held; returns whether the resolve work item must run.
    pub(crate) fn send(
        &self,
        ud: &UdDatapath,
        mut skb: SkBuff,
        dest: &HwAddr,
        ah: Option<&Arc<AddressHandle>>,
        dev: &NetDevice,
    ) -> bool {
        let Some(len) = ud.sendable_len(&mut skb) else {
            return false;
        };
        // Every send through a neighbour's handle is posted under the table's lock, so that
        // a handle the table retires is known to be unused once as many sends completed as
        // were posted by then (see `neigh.rs`).
        let mut neigh = self.neigh.lock();
        if let Some(ah) = ah {
            ud.post(skb, dest, ah, len, dev);
            return false;
        }
        match neigh.get(&dest.gid().0, now_ms()) {
            Some(ah) => {
                ud.post(skb, dest, ah, len, dev);
                false
            }
            None => {
                drop(neigh);
                self.hold(dest.gid(), skb);
                true
            }
        }
    }

    /// Keeps `skb` until `gid` has an address handle; drops it, counted, when too many wait.
    fn hold(&self, gid: Gid, skb: SkBuff) {
        let mut held = self.held.lock();
        match held.iter_mut().find(|slot| slot.is_none()) {
            Some(slot) => {
                *slot = Some((gid, skb));
                self.held_count.fetch_add(1, Ordering::Relaxed);
            }
            None => bump(&self.counters.tx_dropped, 1),
        }
    }

    /// Sends through `ud` the held packets whose destinations now have a handle (from
    /// NAPI).
    pub(crate) fn send_ready(&self, ud: &UdDatapath, dev: &NetDevice) {
        if self.held_count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut neigh = self.neigh.lock();
        let mut held = self.held.lock();
        let now = now_ms();
        for slot in held.iter_mut() {
            let Some(gid) = slot.as_ref().map(|(gid, _)| gid.0) else {
                continue;
            };
            let Some(ah) = neigh.get(&gid, now) else {
                continue;
            };
            let Some((_, skb)) = slot.take() else {
                continue;
            };
            self.held_count.fetch_sub(1, Ordering::Relaxed);
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
            ud.post(skb, &dest, ah, len, dev);
        }
    }

    /// Makes the address handles the held packets wait for (the resolve work item) in `pd`
    /// and enters them in the table, as sends through `ud` go. The packets of a destination
    /// that gets none are dropped; `device` names the port in the log.
    pub(crate) fn resolve(&self, device: &Device, pd: &Arc<ProtectionDomain>, ud: &UdDatapath) {
        let mut wanted: [Option<Gid>; HELD_MAX] = [None; HELD_MAX];
        {
            let held = self.held.lock();
            for (i, slot) in held.iter().enumerate() {
                if let Some(w) = wanted.get_mut(i) {
                    *w = slot.as_ref().map(|(gid, _)| *gid);
                }
            }
        }
        let port = self.resolver.port;
        for (i, gid) in wanted.iter().enumerate() {
            let Some(gid) = gid else { continue };
            if wanted[..i].contains(&Some(*gid)) || self.neigh.lock().contains(&gid.0) {
                continue;
            }
            let made = self
                .resolver
                .address_handle(pd, gid)
                .and_then(|ah| Neighbours::node(gid.0, ah, now_ms()))
                .map(|node| {
                    let mut neigh = self.neigh.lock();
                    neigh.insert(&gid.0, node, ud.sends_posted())
                });
            match &made {
                Ok(None) => crate::params::ipoib_dbg!(
                    "{} port {}: address handle made for {}\n",
                    device.name(),
                    port,
                    GidText(&gid.0)
                ),
                Err(e) => crate::params::ipoib_dbg!(
                    "{} port {}: no address handle for {} ({:?})\n",
                    device.name(),
                    port,
                    GidText(&gid.0),
                    e
                ),
                Ok(Some(_)) => {}
            }
            // A handle made twice is dropped here, outside the lock, never used.
            if let Err(_) | Ok(Some(_)) = made {
                // No route: the packets for it go.
                let mut held = self.held.lock();
                for slot in held.iter_mut() {
                    if slot.as_ref().is_some_and(|(g, _)| g == gid) {
                        *slot = None;
                        self.held_count.fetch_sub(1, Ordering::Relaxed);
                        bump(&self.counters.tx_errors, 1);
                    }
                }
            }
        }
    }

    /// Drops every held packet (the interface goes down).
    pub(crate) fn drop_all(&self) {
        let mut held = self.held.lock();
        for slot in held.iter_mut() {
            *slot = None;
        }
        self.held_count.store(0, Ordering::Relaxed);
    }

    /// Forgets the destinations unused since `deadline` (all with `i64::MAX`): their
    /// handles go once the sends through `ud` that may use them have completed (process
    /// context).
    pub(crate) fn forget(&self, ud: &UdDatapath, deadline: i64) {
        neigh::retire(
            &self.neigh,
            deadline,
            || ud.sends_posted(),
            || ud.sends_done(),
        );
    }

    /// How many destinations have an address handle.
    pub(crate) fn count(&self) -> usize {
        self.neigh.lock().len()
    }

    /// The unicast destinations for debugfs (`<if>_path`), in the C driver's format: each
    /// has an address handle (on RoCE no LID or SL applies), with its idle time.
    pub(crate) fn show_paths(&self, out: &mut dyn Write, now: i64) -> fmt::Result {
        let mut result = Ok(());
        self.neigh.lock().for_each(|gid, used| {
            if result.is_ok() && !Gid(*gid).is_multicast() {
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

    /// The multicast groups sent to without joining, for debugfs (`<if>_mcg`), with their
    /// last use as creation time.
    pub(crate) fn show_send_only(&self, out: &mut dyn Write) -> fmt::Result {
        let mut result = Ok(());
        self.neigh.lock().for_each(|gid, used| {
            if result.is_ok() && Gid(*gid).is_multicast() {
                result = write_group(out, gid, used, true);
            }
        });
        result
    }
}
