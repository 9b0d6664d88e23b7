// SPDX-License-Identifier: GPL-2.0

//! Interface counters, shared by datagram and connected mode and updated without locks,
//! and the clock of the times the driver keeps.

use crate::wire::HWADDR_LEN;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{
    c_str,
    net::{
        dev::Stats64,
        skb::{DropReason, SkBuff},
    },
    rdma::qp::Sent,
    str::CStr,
    time,
};

/// Monotonic time in milliseconds: last uses, idle times and join times are kept in it.
/// Read from the tick count, not a clock source, as C keeps them in jiffies: every packet
/// stamps its destination, and ages and timeouts need no finer resolution than a tick.
#[inline]
pub(crate) fn now_ms() -> i64 {
    // Not past `i64::MAX` milliseconds: jiffies would have to count for 292 million years.
    time::jiffies64_to_msecs(time::get_jiffies_64()) as i64
}

/// What `ip -s link` shows for the interface.
#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) rx_packets: AtomicU64,
    pub(crate) rx_bytes: AtomicU64,
    pub(crate) rx_dropped: AtomicU64,
    pub(crate) rx_errors: AtomicU64,
    pub(crate) tx_packets: AtomicU64,
    pub(crate) tx_bytes: AtomicU64,
    pub(crate) tx_dropped: AtomicU64,
    pub(crate) tx_errors: AtomicU64,
    /// Multicast datagrams received (broadcast ones not, as in C).
    pub(crate) multicast: AtomicU64,
    /// Transmit connections established, and attempts that failed before.
    pub(crate) cm_tx_established: AtomicU64,
    pub(crate) cm_tx_failed: AtomicU64,
    /// Receive connections accepted, closed for idleness, and destroyed once drained.
    pub(crate) cm_rx_accepted: AtomicU64,
    pub(crate) cm_rx_rejected: AtomicU64,
    pub(crate) cm_rx_stale: AtomicU64,
    pub(crate) cm_rx_drained: AtomicU64,
    /// Times the UD queue pair was brought back from a failure.
    pub(crate) qp_recoveries: AtomicU64,
    /// Times the transmit queue stayed stopped past the watchdog, and transmit connections
    /// closed then because their sends had stalled.
    pub(crate) tx_timeouts: AtomicU64,
    pub(crate) cm_tx_stalled: AtomicU64,
    /// Transmit connections closed because their destination stayed idle (as C frees a
    /// connection with its aged neighbour).
    pub(crate) cm_tx_idle_closed: AtomicU64,
    /// Destinations looked up: path record queries asked of the SA (InfiniBand), address
    /// handles made from GIDs (RoCE). A destination in use is not looked up again.
    pub(crate) path_lookups: AtomicU64,
    /// Path record queries that failed or whose path gave no address handle (InfiniBand).
    pub(crate) path_failures: AtomicU64,
    /// Multicast joins the subnet administrator refused or did not answer (InfiniBand).
    pub(crate) mcast_join_failures: AtomicU64,
}

/// What `ethtool -S` shows: the C driver's counters first, then ours.
pub(crate) const ETHTOOL_STATS: &[&CStr] = &[
    c_str!("rx_packets"),
    c_str!("tx_packets"),
    c_str!("rx_bytes"),
    c_str!("tx_bytes"),
    c_str!("tx_errors"),
    c_str!("rx_dropped"),
    c_str!("tx_dropped"),
    c_str!("multicast"),
    c_str!("rx_errors"),
    c_str!("queue_stopped"),
    c_str!("cm_tx_connections"),
    c_str!("cm_rx_connections"),
    c_str!("cm_tx_established"),
    c_str!("cm_tx_failed"),
    c_str!("cm_rx_accepted"),
    c_str!("cm_rx_rejected"),
    c_str!("cm_rx_stale_closed"),
    c_str!("cm_rx_drained"),
    c_str!("qp_recoveries"),
    c_str!("neighbours"),
    c_str!("tx_timeouts"),
    c_str!("cm_tx_stalled"),
    c_str!("cm_tx_idle_closed"),
    c_str!("path_lookups"),
    c_str!("path_failures"),
    c_str!("mcast_join_failures"),
];

/// Values that are not counters of [`Counters`], for [`Counters::fill_ethtool`].
pub(crate) struct Gauges {
    pub(crate) neighbours: u64,
    pub(crate) queue_stopped: u64,
    pub(crate) cm_tx_connections: u64,
    pub(crate) cm_rx_connections: u64,
}

/// Adds `n` to counter `c`.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// The packets one NAPI round received and sent, added to the interface's [`Counters`]
/// when the round ends (four atomic additions a round, not two per packet). Other counters
/// change seldom and are bumped at once, through [`Tally::counters`].
pub(crate) struct Tally<'a> {
    counters: &'a Counters,
    rx_packets: u64,
    rx_bytes: u64,
    tx_packets: u64,
    tx_bytes: u64,
}

impl<'a> Tally<'a> {
    /// An empty tally for `counters`.
    pub(crate) fn new(counters: &'a Counters) -> Self {
        Self {
            counters,
            rx_packets: 0,
            rx_bytes: 0,
            tx_packets: 0,
            tx_bytes: 0,
        }
    }

    /// The counters the tally is added to.
    pub(crate) fn counters(&self) -> &'a Counters {
        self.counters
    }

    /// Counts a packet of `len` bytes handed to the stack.
    #[inline]
    pub(crate) fn received(&mut self, len: u32) {
        self.rx_packets += 1;
        self.rx_bytes += u64::from(len);
    }

    /// Counts a packet whose send completed successfully, and frees it: a packet is sent
    /// when the device says so, not when it is posted (a failed completion counts as an
    /// error only). Its bytes are those after the pseudo header, as the C driver counts them.
    // Always inline: once per send completion, and the call cost a third of it.
    #[inline(always)]
    pub(crate) fn sent(&mut self, sent: Sent) {
        match sent {
            Sent::Skb(skb) => {
                self.tx_packets += 1;
                self.tx_bytes += u64::from(skb.len().saturating_sub(HWADDR_LEN as u32));
                skb.consume();
            }
            other => other.consume(),
        }
    }
}

impl Drop for Tally<'_> {
    fn drop(&mut self) {
        let c = self.counters;
        if self.rx_packets != 0 {
            bump(&c.rx_packets, self.rx_packets);
            bump(&c.rx_bytes, self.rx_bytes);
        }
        if self.tx_packets != 0 {
            bump(&c.tx_packets, self.tx_packets);
            bump(&c.tx_bytes, self.tx_bytes);
        }
    }
}

impl Counters {
    /// Drops a packet the interface was given to send, counted and with its `reason`.
    pub(crate) fn tx_drop(&self, skb: SkBuff, reason: DropReason) {
        bump(&self.tx_dropped, 1);
        skb.drop_with(reason);
    }

    /// Copies the counters into the stack's statistics.
    pub(crate) fn fill(&self, stats: &mut Stats64) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        stats.set_rx(l(&self.rx_packets), l(&self.rx_bytes));
        stats.set_tx(l(&self.tx_packets), l(&self.tx_bytes));
        stats.set_rx_errors(l(&self.rx_errors), l(&self.rx_dropped));
        stats.set_tx_errors(l(&self.tx_errors), l(&self.tx_dropped));
        stats.set_multicast(l(&self.multicast));
    }

    /// Fills `values` in the order of [`ETHTOOL_STATS`].
    pub(crate) fn fill_ethtool(&self, g: &Gauges, values: &mut [u64]) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let all = [
            l(&self.rx_packets),
            l(&self.tx_packets),
            l(&self.rx_bytes),
            l(&self.tx_bytes),
            l(&self.tx_errors),
            l(&self.rx_dropped),
            l(&self.tx_dropped),
            l(&self.multicast),
            l(&self.rx_errors),
            g.queue_stopped,
            g.cm_tx_connections,
            g.cm_rx_connections,
            l(&self.cm_tx_established),
            l(&self.cm_tx_failed),
            l(&self.cm_rx_accepted),
            l(&self.cm_rx_rejected),
            l(&self.cm_rx_stale),
            l(&self.cm_rx_drained),
            l(&self.qp_recoveries),
            g.neighbours,
            l(&self.tx_timeouts),
            l(&self.cm_tx_stalled),
            l(&self.cm_tx_idle_closed),
            l(&self.path_lookups),
            l(&self.path_failures),
            l(&self.mcast_join_failures),
        ];
        for (v, a) in values.iter_mut().zip(all) {
            *v = a;
        }
    }
}
