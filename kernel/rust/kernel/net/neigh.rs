// SPDX-License-Identifier: GPL-2.0

//! The stack's neighbour tables (ARP, neighbour discovery), as drivers that keep their own
//! per-destination state next to them see them.
//!
//! C header: [`include/net/neighbour.h`](srctree/include/net/neighbour.h).

use crate::bindings;

/// How often the ARP table collects idle entries (`net.ipv4.neigh.default.gc_interval`),
/// in milliseconds. Drivers that cache state per destination age it at the same pace.
#[inline]
pub fn arp_gc_interval_ms() -> u32 {
    // SAFETY: `arp_tbl` is a static object of the kernel; only the address of its field is
    // taken, no reference (sysctl writes it meanwhile).
    let field = unsafe { core::ptr::addr_of!(bindings::arp_tbl.gc_interval) };
    // SAFETY: `gc_interval` is an aligned `int` that sysctl writes whole, so a volatile read
    // sees an old or a new value, never a torn one.
    let jiffies = unsafe { field.read_volatile() };
    // SAFETY: `jiffies_to_msecs` is a pure conversion.
    unsafe { bindings::jiffies_to_msecs(jiffies.max(0) as _) }
}
