// SPDX-License-Identifier: GPL-2.0

//! IP-level multicast membership of a network device.
//!
//! C header: [`include/net/addrconf.h`](srctree/include/net/addrconf.h).

use super::dev::NetDevice;
use crate::{bindings, error::to_result, error::Result, types::ARef};

/// Membership of a device in an IPv6 multicast group, held for a kernel user rather than a
/// socket (`ipv6_dev_mc_inc`): the device accepts the group's packets while it exists.
///
/// RoCE providers carry multicast in IP packets, so an RDMA multicast group only receives
/// if the Ethernet device under the port is a member of the matching IPv6 group.
///
/// # Invariants
///
/// One `ipv6_dev_mc_inc` of `group` on `dev` is held by this object.
pub struct Ipv6McMembership {
    dev: ARef<NetDevice>,
    group: bindings::in6_addr,
}

// SAFETY: The membership may be released from any thread in process context.
unsafe impl Send for Ipv6McMembership {}
// SAFETY: Shared references give access to nothing.
unsafe impl Sync for Ipv6McMembership {}

impl Ipv6McMembership {
    /// Joins `dev` to the IPv6 multicast group `group` (16 bytes, network order). May sleep.
    pub fn join(dev: &NetDevice, group: &[u8; 16]) -> Result<Self> {
        let group = bindings::in6_addr {
            in6_u: bindings::in6_addr__bindgen_ty_1 { u6_addr8: *group },
        };
        // SAFETY: `dev` is valid and `group` is valid for the call.
        to_result(unsafe { bindings::ipv6_dev_mc_inc(dev.as_raw(), &group) })?;
        // INVARIANT: the membership was just taken.
        Ok(Self {
            dev: dev.into(),
            group,
        })
    }
}

impl Drop for Ipv6McMembership {
    fn drop(&mut self) {
        // SAFETY: By the type invariant we hold one membership, released once here. A
        // failure means the device already lost its IPv6 state, which drops memberships.
        unsafe { bindings::ipv6_dev_mc_dec(self.dev.as_raw(), &self.group) };
    }
}
