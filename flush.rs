// SPDX-License-Identifier: GPL-2.0

//! The flushes InfiniBand port events ask for (C: `enum ipoib_flush_level` and its three
//! work items), kept until the port work item does them (`events.rs`).

use core::sync::atomic::{AtomicU8, Ordering};
use kernel::rdma::event::AsyncEvent;

/// How deep a flush a port event asks for (C: `enum ipoib_flush_level`), one bit each.
#[derive(Clone, Copy)]
pub(crate) enum Flush {
    /// Groups joined again, paths queried again as they are used; carrier and connections
    /// kept.
    Light = 1,
    /// Paths and their connections forgotten, groups left and joined again, the carrier
    /// off meanwhile.
    Normal = 2,
    /// A normal flush if the interface's P_Key moved in the table or left it.
    Heavy = 4,
}

impl Flush {
    /// The flush InfiniBand's `event` asks for, if any.
    pub(crate) fn for_event(event: &AsyncEvent) -> Option<Self> {
        match event {
            AsyncEvent::ClientReregister(_) | AsyncEvent::GidChange(_) => Some(Self::Light),
            AsyncEvent::PortActive(_) | AsyncEvent::PortError(_) | AsyncEvent::LidChange(_) => {
                Some(Self::Normal)
            }
            AsyncEvent::PkeyChange(_) => Some(Self::Heavy),
            // A new SM alone changes nothing of ours (as in C).
            _ => None,
        }
    }
}

/// The flushes asked for and not yet done by the port work item, as [`Flush`] bits.
pub(crate) struct PendingFlushes(AtomicU8);

impl PendingFlushes {
    pub(crate) fn new() -> Self {
        Self(AtomicU8::new(0))
    }

    pub(crate) fn ask(&self, flush: Flush) {
        self.0.fetch_or(flush as u8, Ordering::Relaxed);
    }

    /// Takes the flushes asked for: whether each of light, normal and heavy was.
    pub(crate) fn take(&self) -> Pending {
        let bits = self.0.swap(0, Ordering::Relaxed);
        let has = |f: Flush| bits & f as u8 != 0;
        Pending {
            light: has(Flush::Light),
            normal: has(Flush::Normal),
            heavy: has(Flush::Heavy),
        }
    }
}

/// The flushes taken from [`PendingFlushes`].
#[derive(Clone, Copy)]
pub(crate) struct Pending {
    pub(crate) light: bool,
    pub(crate) normal: bool,
    pub(crate) heavy: bool,
}
