// SPDX-License-Identifier: GPL-2.0

//! How the kernel log names an interface: `ib0`, as C's `ipoib_warn` does, so that
//! `dmesg | grep ib0` finds every line about it; before its net_device has a name, the
//! RDMA device and port.

use core::{
    fmt,
    sync::atomic::{AtomicU64, Ordering},
};
use kernel::{net::dev::NetDevice, rdma::device::DeviceRef, str::BStr};

/// Bytes of an interface name, its NUL included (`IFNAMSIZ`): two words.
const NAME_LEN: usize = 16;

/// The name of one interface for its log lines, shared by the parts that log about it.
///
/// A copy of the net_device's name, taken when it is registered and each time it is brought
/// up: the core renames a device only while it is down, so the copy is current while the
/// interface works (after a rename, lines logged while down still carry the old name). Kept
/// in atomics, not under a lock, since lines are logged from any context; a line racing
/// the update may show a mix of the two names.
pub(crate) struct LogName {
    device: DeviceRef,
    port: u32,
    name: [AtomicU64; NAME_LEN / 8],
}

impl LogName {
    pub(crate) fn new(device: DeviceRef, port: u32) -> Self {
        Self {
            device,
            port,
            name: [AtomicU64::new(0), AtomicU64::new(0)],
        }
    }

    /// Takes the name `dev` has now.
    pub(crate) fn update(&self, dev: &NetDevice) {
        let mut bytes = [0u8; NAME_LEN];
        let name = dev.name();
        let name = name.as_bytes();
        let len = name.len().min(NAME_LEN - 1);
        bytes[..len].copy_from_slice(&name[..len]);
        let (low, high) = bytes.split_at(8);
        let mut word = [0u8; 8];
        word.copy_from_slice(low);
        self.name[0].store(u64::from_ne_bytes(word), Ordering::Relaxed);
        word.copy_from_slice(high);
        self.name[1].store(u64::from_ne_bytes(word), Ordering::Relaxed);
    }
}

impl fmt::Display for LogName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut bytes = [0u8; NAME_LEN];
        bytes[..8].copy_from_slice(&self.name[0].load(Ordering::Relaxed).to_ne_bytes());
        bytes[8..].copy_from_slice(&self.name[1].load(Ordering::Relaxed).to_ne_bytes());
        let len = bytes.iter().position(|&b| b == 0).unwrap_or(NAME_LEN);
        if len == 0 {
            write!(f, "{} port {}", self.device.name(), self.port)
        } else {
            BStr::from_bytes(&bytes[..len]).fmt(f)
        }
    }
}
