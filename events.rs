// SPDX-License-Identifier: GPL-2.0

//! What befalls an interface from outside its datapath, and the flushes it causes: port
//! events for an interface and its children (the carrier follows the port; a port that
//! comes back has the UD queue pair checked and is queried again; changed addresses flush
//! the destinations), the periodic ageing of destinations, and the transmit watchdog. C has
//! these in `ipoib_event` (`ipoib_verbs.c`), the flushes of `ipoib_ib.c` and the neighbour
//! reaping of `ipoib_main.c`.
//!
//! On InfiniBand the subnet manager stands behind most events, and each asks for a flush
//! of its own depth, as C's flush levels do (the port work item does them, for the
//! interface and its children): a request to register again (an SM that restarted or
//! handed over) or a new GID, a light one: groups joined again and paths queried again as
//! they are used, the carrier and the connections kept; a new LID or the port going down
//! or up, a normal one: paths forgotten with the connections made over them, groups left
//! and joined again, the carrier off until the broadcast group is joined; a changed P_Key
//! table, a normal one where the interface's P_Key moved or left, else none; a new SM
//! alone, none.

use crate::{
    flush::{Flush, Pending},
    interface::{
        Interface, MCAST_WORK, NEIGH_GC_WORK, PORT_WORK, RESOLVE_WORK, RTNL_WORK, STALL_WORK,
        TX_TIMEOUT_MS,
    },
    ipoib_ud::UdDatapath,
    stats::{bump, now_ms},
    wire::ENCAP_HEADER_LEN,
};
use kernel::{
    net::{dev::NetDevice, neigh::arp_gc_interval_ms},
    prelude::*,
    rdma::{device::Mtu, event::AsyncEvent},
    sync::{Arc, ArcBorrow},
    time::msecs_to_jiffies,
    workqueue::{self, WorkItem},
};

impl Interface {
    /// Applies a port event to a port's own interface, whose net_device is `dev`, and to
    /// its children (from the device's event handler).
    pub(crate) fn port_event(this: &Arc<Self>, dev: &NetDevice, event: &AsyncEvent) {
        let flush = if this.on_infiniband() {
            Flush::for_event(event)
        } else {
            None
        };
        if let Some(f) = flush {
            this.flushes.ask(f);
        }
        if flush.is_some() || matches!(event, AsyncEvent::PortActive(_)) {
            // The speed may have changed with the link (children learn it from us).
            let _ = workqueue::system().enqueue::<_, PORT_WORK>(this.clone());
        }
        this.apply_port_event(dev, event);
        this.children()
            .for_each(|c| c.interface().apply_port_event(c.device(), event));
    }

    /// Applies a port event to this interface alone, whose net_device is `dev`.
    fn apply_port_event(&self, dev: &NetDevice, event: &AsyncEvent) {
        match event {
            AsyncEvent::PortActive(_) => {
                self.set_port_active(true);
                // A send that found the port down may have failed the queue pair.
                UdDatapath::schedule_recovery(self.ud.as_arc_borrow());
                if self.carrier_ready() {
                    dev.carrier_on();
                }
            }
            AsyncEvent::PortError(_) => {
                self.set_port_active(false);
                dev.carrier_off();
            }
            // InfiniBand's flushes are the port work item's, by depth.
            _ if self.on_infiniband() => {}
            // RoCE: addresses changed (GIDs follow the Ethernet device's IP addresses).
            _ => self.flush_neighbours(),
        }
    }

    /// Queries the port again after a port event (the port work item) and passes the speed
    /// on to the children; on InfiniBand, after a change of the fabric, flushes paths and
    /// groups of the interface and its children.
    pub(crate) fn refresh_port(self: &Arc<Self>) {
        // Queried here, in a work item no one waits for under RTNL: querying a RoCE port
        // takes RTNL.
        match self.device.port_attr(self.port) {
            Ok(attr) => {
                self.ethtool.set_speed(attr.speed_mbps());
                if let Some(mtu) = attr.active_mtu() {
                    self.follow_port_mtu(mtu);
                }
            }
            Err(e) => pr_warn!("{}: port not queried ({:?})\n", self.log_name, e),
        }
        self.children()
            .for_each(|c| c.interface().ethtool.copy_speed(&self.ethtool));
        let pending = self.flushes.take();
        if pending.light || pending.normal || pending.heavy {
            self.flush_fabric(pending);
            self.children()
                .for_each(|c| c.interface().flush_fabric(pending));
        }
    }

    /// Does the flushes `pending` asks for (InfiniBand): a P_Key change only where our
    /// P_Key moved in the table or left it (C: `update_parent_pkey`, `update_child_pkey`);
    /// the deepest one needed, which includes the others.
    fn flush_fabric(self: &Arc<Self>, pending: Pending) {
        let moved = pending.heavy && self.refresh_partition();
        if moved || pending.normal {
            self.flush_normal();
        } else if pending.light {
            self.flush_light();
        }
    }

    /// A light flush (the SM asked ports to register again, or the GID changed): the GID
    /// read again (the address follows it), paths queried again as they are used, their
    /// handles used meanwhile, and groups left and joined again, with the carrier and the
    /// connections kept (C: `IPOIB_FLUSH_LIGHT`).
    fn flush_light(self: &Arc<Self>) {
        let gid_changed = self.gid.refresh(&self.device, self.port);
        // Queries asked of the SM that went away may never be answered: asked again.
        self.paths.cancel_queries();
        self.paths.mark_stale();
        if !self.is_up() {
            return;
        }
        if gid_changed {
            let _ = workqueue::system().enqueue::<_, RTNL_WORK>(self.clone());
        }
        self.rejoin_groups();
        let _ = workqueue::system().enqueue::<_, MCAST_WORK>(self.clone());
        let _ = workqueue::system().enqueue::<_, RESOLVE_WORK>(self.clone());
    }

    /// A normal flush (a new LID, the port down or up, our P_Key moved): our LID and P_Key
    /// index read again, paths forgotten (the held packets asked for again) with the
    /// transmit connections made over them (made again on demand, as C frees them with
    /// their paths), groups left and joined again, the carrier off until the broadcast
    /// group is joined (C: `IPOIB_FLUSH_NORMAL`).
    fn flush_normal(self: &Arc<Self>) {
        self.refresh_partition();
        let gid_changed = self.gid.refresh(&self.device, self.port);
        match self.device.port_attr(self.port) {
            Ok(attr) => self.ud.set_lid(attr.lid() as u16),
            Err(e) => pr_warn!("{}: port not queried ({:?})\n", self.log_name, e),
        }
        self.paths.cancel_queries();
        self.flush_neighbours();
        if let Some(cm) = &self.cm {
            cm.close_tx();
        }
        if !self.is_up() {
            return;
        }
        if let Some(dev) = self.up_netdev() {
            dev.carrier_off();
        }
        if gid_changed {
            // The address carries the GID (C: `ipoib_dev_addr_changed_valid`).
            let _ = workqueue::system().enqueue::<_, RTNL_WORK>(self.clone());
        }
        self.rejoin_groups();
        let _ = workqueue::system().enqueue::<_, MCAST_WORK>(self.clone());
        let _ = workqueue::system().enqueue::<_, RESOLVE_WORK>(self.clone());
    }

    /// Forgets all destinations (addresses changed).
    fn flush_neighbours(&self) {
        self.paths.forget(&self.ud, i64::MAX);
    }

    /// The pace of destination ageing: the ARP table's collection interval, at least 1 s.
    fn neigh_gc_ms() -> u32 {
        arp_gc_interval_ms().max(1000)
    }

    /// Has the destinations aged after one collection interval.
    pub(crate) fn schedule_neigh_gc(self: &Arc<Self>) {
        let delay = msecs_to_jiffies(Self::neigh_gc_ms());
        let _ = workqueue::system().enqueue_delayed::<_, NEIGH_GC_WORK>(self.clone(), delay);
    }

    /// Follows the port's active MTU `mtu`, which under rxe follows its Ethernet device's
    /// MTU without an event: datagrams carry at most as much (in datagram mode the
    /// interface's MTU is lowered to it by the RTNL work item; raised again, it is the
    /// user's to raise), and on RoCE connections are made with it as their path MTU (those
    /// made with another are closed and made again).
    fn follow_port_mtu(self: &Arc<Self>, mtu: Mtu) {
        let datagrams = self.ud.set_port_mtu(mtu.bytes() - ENCAP_HEADER_LEN as u32);
        let connections = match &self.cm {
            Some(cm) if !self.on_infiniband() => cm.set_path_mtu(mtu),
            _ => false,
        };
        if self.ud.ring_outgrown() {
            UdDatapath::schedule_recovery(self.ud.as_arc_borrow());
        }
        if datagrams.is_none() && !connections {
            return;
        }
        pr_info!(
            "{}: the port's MTU is {} now: datagrams carry {} bytes\n",
            self.log_name,
            mtu.bytes(),
            self.ud.mtu()
        );
        let _ = workqueue::system().enqueue::<_, RTNL_WORK>(self.clone());
    }

    /// Forgets destinations unused for two collection intervals (the delayed work item),
    /// with their transmit connections, and has the port read again (its MTU may have
    /// changed), then runs again while the interface is up.
    pub(crate) fn collect_neighbours(self: &Arc<Self>) {
        let deadline = now_ms() - 2 * i64::from(Self::neigh_gc_ms());
        self.paths.forget(&self.ud, deadline);
        // The send-only groups whose handles went are left (C: with their neighbours).
        if self.mcast.reap_send_only() {
            let _ = workqueue::system().enqueue::<_, MCAST_WORK>(self.clone());
        }
        // Packets still waiting have their destinations resolved again: whatever was to
        // give them a handle (a path query, a join) has failed or been lost by now.
        if self.paths.holds_packets() {
            let _ = workqueue::system().enqueue::<_, RESOLVE_WORK>(self.clone());
        }
        // Their connections go with them.
        if let Some(cm) = &self.cm {
            cm.close_idle_tx(deadline);
        }
        let _ = workqueue::system().enqueue::<_, PORT_WORK>(self.clone());
        if self.is_up() {
            self.schedule_neigh_gc();
        }
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
    pub(crate) fn unstall(&self) {
        // By the recovery work item, which must not run twice at once.
        UdDatapath::schedule_recovery(self.ud.as_arc_borrow());
        if let Some(cm) = &self.cm {
            cm.fail_stalled(now_ms() - i64::from(TX_TIMEOUT_MS));
        }
        // Both CQs polled once more, whether or not their events came.
        self.ud.kick();
    }
}

impl WorkItem<PORT_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.refresh_port();
    }
}

impl WorkItem<STALL_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.unstall();
    }
}

impl WorkItem<NEIGH_GC_WORK> for Interface {
    type Pointer = Arc<Interface>;

    fn run(this: Arc<Interface>) {
        this.collect_neighbours();
    }
}
