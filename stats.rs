// SPDX-License-Identifier: GPL-2.0

//! Interface counters, shared by datagram and connected mode and updated without locks.

use core::sync::atomic::{AtomicU64, Ordering};
use kernel::net::dev::Stats64;

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
}

/// Adds `n` to counter `c`.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

impl Counters {
    /// Copies the counters into the stack's statistics.
    pub(crate) fn fill(&self, stats: &mut Stats64) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        stats.set_rx(l(&self.rx_packets), l(&self.rx_bytes));
        stats.set_tx(l(&self.tx_packets), l(&self.tx_bytes));
        stats.set_rx_errors(l(&self.rx_errors), l(&self.rx_dropped));
        stats.set_tx_errors(l(&self.tx_errors), l(&self.tx_dropped));
    }
}
