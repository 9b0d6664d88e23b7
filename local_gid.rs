// SPDX-License-Identifier: GPL-2.0

//! The interface's GID, which its hardware address carries: read by the datapath, the paths
//! and the joins. Its subnet prefix is always that of entry 0 of the port's GID table, which
//! the subnet manager may change; its interface ID is entry 0's too, unless the user chose
//! another (`ip link set ibN address`, `ip link add ... address`; C: `ipoib_set_mac`,
//! `ipoib_dev_addr_changed_valid`), for a port with several GUIDs.

use crate::wire::Gid;
use core::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use kernel::{
    new_mutex,
    prelude::*,
    rdma::device::{Device, Gid as DeviceGid},
    sync::Mutex,
};

/// A GID that changes while others read it: its two halves, each read and written whole.
/// Readers may see halves of two GIDs while it changes; the event that changed it flushes
/// every path and group made meanwhile.
#[pin_data]
pub(crate) struct LocalGid {
    prefix: AtomicU64,
    interface_id: AtomicU64,
    /// Whether the port's GID table has the GID (C: `IPOIB_FLAG_DEV_ADDR_SET`): groups are
    /// joined, so the carrier comes on, only then.
    in_table: AtomicBool,
    /// Whether the user chose the interface ID (C: `IPOIB_FLAG_DEV_ADDR_CTRL`); writers of
    /// the GID hold this lock.
    #[pin]
    chosen: Mutex<bool>,
}

impl LocalGid {
    pub(crate) fn new(gid: Gid) -> impl PinInit<Self> {
        let (prefix, interface_id) = Self::halves(&gid);
        pin_init!(Self {
            prefix: AtomicU64::new(prefix),
            interface_id: AtomicU64::new(interface_id),
            in_table: AtomicBool::new(true),
            chosen <- new_mutex!(false, "LocalGid::chosen"),
        })
    }

    fn halves(gid: &Gid) -> (u64, u64) {
        let mut prefix = [0u8; 8];
        let mut id = [0u8; 8];
        prefix.copy_from_slice(&gid.0[..8]);
        id.copy_from_slice(&gid.0[8..]);
        (u64::from_be_bytes(prefix), u64::from_be_bytes(id))
    }

    fn whole(prefix: u64, interface_id: u64) -> Gid {
        let mut gid = Gid::default();
        gid.0[..8].copy_from_slice(&prefix.to_be_bytes());
        gid.0[8..].copy_from_slice(&interface_id.to_be_bytes());
        gid
    }

    /// The GID.
    pub(crate) fn get(&self) -> Gid {
        Self::whole(
            self.prefix.load(Ordering::Acquire),
            self.interface_id.load(Ordering::Acquire),
        )
    }

    /// The interface ID, the GID's lower half: what a GRH tells of our own datagrams.
    pub(crate) fn interface_id(&self) -> [u8; 8] {
        self.interface_id.load(Ordering::Acquire).to_be_bytes()
    }

    /// Whether the port's GID table had the GID when last read.
    pub(crate) fn in_table(&self) -> bool {
        self.in_table.load(Ordering::Acquire)
    }

    /// Reads the port's GID table again (at creation and after a port event): the subnet
    /// prefix is entry 0's, and so is the interface ID unless the user chose one, which is
    /// then looked for in the table (chosen as entry 0's, it is no longer a choice: the
    /// interface follows entry 0 again). Returns whether the GID changed; nothing changes if
    /// the table cannot be read.
    pub(crate) fn refresh(&self, device: &Device, port: u32) -> bool {
        let Ok(first) = device.query_gid(port, 0) else {
            return false;
        };
        let (prefix, first_id) = Self::halves(&Gid(first.0));
        let mut chosen = self.chosen.lock();
        let id = if *chosen {
            self.interface_id.load(Ordering::Acquire)
        } else {
            first_id
        };
        let in_table = if *chosen {
            match device.find_gid(&DeviceGid(Self::whole(prefix, id).0)) {
                Some((found, index)) if found == port => {
                    *chosen = index != 0;
                    true
                }
                _ => false,
            }
        } else {
            true
        };
        let old_prefix = self.prefix.swap(prefix, Ordering::AcqRel);
        let old_id = self.interface_id.swap(id, Ordering::AcqRel);
        self.in_table.store(in_table, Ordering::Release);
        old_prefix != prefix || old_id != id
    }

    /// Takes `interface_id` as the user's choice (C: `set_base_guid`) and reads the table
    /// for it ([`LocalGid::refresh`]).
    pub(crate) fn choose(&self, interface_id: u64, device: &Device, port: u32) {
        {
            let mut chosen = self.chosen.lock();
            *chosen = true;
            self.interface_id.store(interface_id, Ordering::Release);
            // Not known to be in the table until it is read (it may not be readable).
            self.in_table.store(false, Ordering::Release);
        }
        self.refresh(device, port);
    }

    /// Whether the interface ID is the user's choice, not entry 0's.
    pub(crate) fn is_chosen(&self) -> bool {
        *self.chosen.lock()
    }
}
