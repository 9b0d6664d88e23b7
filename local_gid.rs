// SPDX-License-Identifier: GPL-2.0

//! The interface's GID (entry 0 of its port's GID table), which the subnet manager may
//! change by setting another subnet prefix: read by the datapath, the paths and the joins,
//! written after a GID change event. The interface's hardware address carries it.

use crate::wire::Gid;
use core::sync::atomic::{AtomicU64, Ordering};

/// A GID that changes while others read it: its two halves, each read and written whole.
/// Readers may see halves of two GIDs while it changes; the event that changed it flushes
/// every path and group made meanwhile.
pub(crate) struct LocalGid {
    prefix: AtomicU64,
    interface_id: AtomicU64,
}

impl LocalGid {
    pub(crate) fn new(gid: Gid) -> Self {
        let (prefix, interface_id) = Self::halves(&gid);
        Self {
            prefix: AtomicU64::new(prefix),
            interface_id: AtomicU64::new(interface_id),
        }
    }

    fn halves(gid: &Gid) -> (u64, u64) {
        let mut prefix = [0u8; 8];
        let mut id = [0u8; 8];
        prefix.copy_from_slice(&gid.0[..8]);
        id.copy_from_slice(&gid.0[8..]);
        (u64::from_be_bytes(prefix), u64::from_be_bytes(id))
    }

    /// The GID.
    pub(crate) fn get(&self) -> Gid {
        let mut gid = Gid::default();
        gid.0[..8].copy_from_slice(&self.prefix.load(Ordering::Acquire).to_be_bytes());
        gid.0[8..].copy_from_slice(&self.interface_id.load(Ordering::Acquire).to_be_bytes());
        gid
    }

    /// The interface ID, the GID's lower half: what a GRH tells of our own datagrams.
    pub(crate) fn interface_id(&self) -> [u8; 8] {
        self.interface_id.load(Ordering::Acquire).to_be_bytes()
    }

    /// Records a new GID; returns whether it changed.
    pub(crate) fn set(&self, gid: Gid) -> bool {
        let (prefix, interface_id) = Self::halves(&gid);
        let old_prefix = self.prefix.swap(prefix, Ordering::AcqRel);
        let old_id = self.interface_id.swap(interface_id, Ordering::AcqRel);
        old_prefix != prefix || old_id != interface_id
    }
}
