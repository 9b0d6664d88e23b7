// SPDX-License-Identifier: GPL-2.0

//! Sends in flight on an interface, the UD queue pair and every transmit connection
//! together. Their number is the one bound that keeps every send queue and completion queue
//! from overflowing: the transmit queue stops when the last credit is taken and wakes once
//! completions have returned half of them.

use core::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};
use kernel::net::dev::NetDevice;

/// Credits for sends in flight.
pub(crate) struct SendCredits {
    in_flight: AtomicU32,
    /// Sends in flight at most.
    limit: u32,
    /// Times the last credit was taken and the queue stopped.
    stops: AtomicU64,
}

impl SendCredits {
    /// Credits for `limit` sends in flight.
    pub(crate) fn new(limit: u32) -> Self {
        Self {
            in_flight: AtomicU32::new(0),
            limit,
            stops: AtomicU64::new(0),
        }
    }

    /// Times the queue stopped for want of a credit.
    pub(crate) fn stops(&self) -> u64 {
        self.stops.load(Ordering::Relaxed)
    }

    /// Takes a credit for one send and returns how many are left; stops `dev`'s queue when
    /// it was the last. `None` when none is left (the queue is then already stopped).
    #[inline]
    pub(crate) fn take(&self, dev: &NetDevice) -> Option<u32> {
        let taken = self
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Relaxed, |n| {
                (n < self.limit).then_some(n + 1)
            });
        match taken {
            Ok(n) if n + 1 == self.limit => {
                self.stops.fetch_add(1, Ordering::Relaxed);
                dev.stop_queue();
                // A completion may have returned credits before the queue was seen stopped:
                // look again once the stop is visible, or nothing would wake the queue.
                fence(Ordering::SeqCst);
                if self.any_idle() {
                    dev.wake_queue();
                }
                Some(0)
            }
            Ok(n) => Some(self.limit - n - 1),
            Err(_) => None,
        }
    }

    /// Sends in flight.
    pub(crate) fn in_use(&self) -> u32 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// Credits free now.
    pub(crate) fn free(&self) -> u32 {
        self.limit
            .saturating_sub(self.in_flight.load(Ordering::Acquire))
    }

    /// Credits in all.
    pub(crate) fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether a credit is free.
    pub(crate) fn any_idle(&self) -> bool {
        self.in_flight.load(Ordering::Acquire) < self.limit
    }

    /// Returns `n` credits, of sends completed, failed or dropped with their queue pair.
    /// The caller then has NAPI call [`SendCredits::wake_if_room`].
    pub(crate) fn give(&self, n: u32) {
        self.in_flight.fetch_sub(n, Ordering::AcqRel);
    }

    /// Wakes `dev`'s stopped queue once half the credits are free (from NAPI, after
    /// completions), so that it does not stop again at once.
    pub(crate) fn wake_if_room(&self, dev: &NetDevice) {
        fence(Ordering::SeqCst);
        if dev.queue_stopped() && self.in_flight.load(Ordering::Acquire) <= self.limit / 2 {
            dev.wake_queue();
        }
    }
}
