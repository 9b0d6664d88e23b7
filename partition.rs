// SPDX-License-Identifier: GPL-2.0

//! The interface's place in its port's P_Key table, which the subnet manager may change:
//! read by the datapath and the connections, re-read after a P_Key change event. An
//! interface whose partition is missing from the table exists but carries nothing.

use core::sync::atomic::{AtomicU32, Ordering};

/// Stands for "not in the table".
const MISSING: u32 = u32::MAX;

/// An index into the port's P_Key table, or none.
pub(crate) struct PartitionIndex(AtomicU32);

impl PartitionIndex {
    pub(crate) fn new(index: Option<u16>) -> Self {
        Self(AtomicU32::new(index.map_or(MISSING, u32::from)))
    }

    /// The index; `None` while the table lacks the partition.
    pub(crate) fn get(&self) -> Option<u16> {
        u16::try_from(self.0.load(Ordering::Acquire)).ok()
    }

    /// Records a new index; returns whether it changed.
    pub(crate) fn set(&self, index: Option<u16>) -> bool {
        let new = index.map_or(MISSING, u32::from);
        self.0.swap(new, Ordering::AcqRel) != new
    }
}
