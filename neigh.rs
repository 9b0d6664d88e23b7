// SPDX-License-Identifier: GPL-2.0

//! Neighbours: the address handle for each destination this interface sends to.
//!
//! On RoCE a destination's route follows from its GID alone, so entries are keyed by GID and
//! made on first use; the destination QPN travels in each packet's pseudo header.

use kernel::{prelude::*, rbtree::RBTree, rdma::ah::AddressHandle, sync::Arc};

/// Entries kept before the table starts over; the handles are cheap to make again.
const MAX_NEIGHBOURS: usize = 256;

/// Address handles by destination GID.
pub(crate) struct Neighbours {
    entries: RBTree<[u8; 16], Arc<AddressHandle>>,
    len: usize,
}

impl Neighbours {
    pub(crate) fn new() -> Self {
        Self {
            entries: RBTree::new(),
            len: 0,
        }
    }

    /// The handle for `gid`, if one was made.
    pub(crate) fn get(&self, gid: &[u8; 16]) -> Option<Arc<AddressHandle>> {
        self.entries.get(gid).cloned()
    }

    /// Remembers `ah` for `gid`; a full table is emptied first.
    pub(crate) fn insert(&mut self, gid: [u8; 16], ah: Arc<AddressHandle>) -> Result {
        if self.len >= MAX_NEIGHBOURS {
            self.flush();
        }
        if self
            .entries
            .try_create_and_insert(gid, ah, GFP_ATOMIC)?
            .is_none()
        {
            self.len += 1;
        }
        Ok(())
    }

    /// Forgets every destination (the port's addresses changed).
    pub(crate) fn flush(&mut self) {
        self.entries = RBTree::new();
        self.len = 0;
    }
}
