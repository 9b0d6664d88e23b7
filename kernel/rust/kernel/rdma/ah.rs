// SPDX-License-Identifier: GPL-2.0

//! Address handles: where a UD send goes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::{
    cm::{GidAttr, PathRecord},
    device::{Device, Gid, Protocol},
    pd::ProtectionDomain,
    sa::McMemberRecord,
};
use crate::{
    alloc::flags::{GFP_ATOMIC, GFP_KERNEL},
    bindings,
    error::{code::EINVAL, from_err_ptr, to_result, Result},
    sync::Arc,
};
use core::ptr::NonNull;

/// Route attributes for an address handle (`struct rdma_ah_attr`).
///
/// # Invariants
///
/// `grh.sgid_attr` is null or holds a reference of its own, released on drop.
pub struct AhAttr(bindings::rdma_ah_attr);

impl AhAttr {
    fn zeroed() -> bindings::rdma_ah_attr {
        // SAFETY: `rdma_ah_attr` is integers, C enums, arrays and a nullable pointer.
        unsafe { core::mem::zeroed() }
    }

    /// A RoCE destination: `dgid` reached from GID `sgid_index` of `port` through the
    /// Ethernet address `dmac`, with `hop_limit` (see `Device::resolve_roce_dmac`).
    pub fn roce(port: u32, sgid_index: u8, dgid: &Gid, hop_limit: u8, dmac: [u8; 6]) -> Self {
        let mut a = Self::zeroed();
        a.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        a.port_num = port;
        a.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        a.grh.dgid = bindings::ib_gid { raw: dgid.0 };
        a.grh.sgid_index = sgid_index;
        a.grh.hop_limit = hop_limit;
        a.__bindgen_anon_1.roce = bindings::roce_ah_attr { dmac };
        // INVARIANT: No source GID attribute.
        Self(a)
    }

    /// An InfiniBand destination on the local subnet: `dlid` on service level `sl`.
    pub fn ib(port: u32, dlid: u16, sl: u8) -> Self {
        let mut a = Self::zeroed();
        a.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_IB;
        a.port_num = port;
        a.sl = sl;
        a.__bindgen_anon_1.ib = bindings::ib_ah_attr {
            dlid,
            src_path_bits: 0,
        };
        // INVARIANT: No source GID attribute.
        Self(a)
    }

    /// The route of `path` (from an SA query, or [`PathRecord::roce_v2`] on RoCE) out of
    /// `port` of `device`, sent from `sgid`, or without it from the entry of the port's GID
    /// table that holds the path's source GID.
    pub fn from_path(
        device: &Device,
        port: u32,
        path: &PathRecord,
        sgid: Option<&GidAttr>,
    ) -> Result<Self> {
        if !device.ports().contains(&port) {
            return Err(EINVAL);
        }
        let mut a = Self::zeroed();
        let mut rec = path.0;
        let sgid = sgid.map_or(core::ptr::null(), GidAttr::as_raw);
        // SAFETY: The device is valid and `port` one of its ports; `rec` and `a` are valid for
        // the call; `sgid` is null or a referenced GID attribute. On success `a` holds a GID
        // attribute reference of its own (or none).
        to_result(unsafe {
            bindings::ib_init_ah_attr_from_path(device.as_raw(), port, &mut rec, &mut a, sgid)
        })?;
        // INVARIANT: see above.
        Ok(Self(a))
    }

    /// The route to the group of `rec` out of `port` of `device`: on InfiniBand the group's
    /// LID, on RoCE the group's Ethernet multicast address (see [`Gid::multicast_mac`]).
    /// The source GID is the record's port GID, which must be in the port's table.
    pub fn from_mcmember(device: &Device, port: u32, rec: &McMemberRecord) -> Result<Self> {
        if !device.ports().contains(&port) {
            return Err(EINVAL);
        }
        let mut a = Self::zeroed();
        let mut raw = *rec.raw();
        // On RoCE the source GID is looked up among the entries of the port's own network
        // device: a VLAN device above it may have an entry with the same GID.
        let ndev = match device.protocol(port)? {
            Protocol::Roce => Some(device.netdev(port)?),
            _ => None,
        };
        let ndev_raw = ndev.as_ref().map_or(core::ptr::null_mut(), |n| n.as_raw());
        // SAFETY: The device is valid and `port` one of its ports; `raw` and `a` are valid for
        // the call; `ndev_raw` is null or a network device we hold a reference to. On
        // success `a` holds a GID attribute reference of its own.
        to_result(unsafe {
            bindings::ib_init_ah_from_mcmember(
                device.as_raw(),
                port,
                &mut raw,
                ndev_raw,
                rec.gid_type(),
                &mut a,
            )
        })?;
        if a.type_ == bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE {
            a.__bindgen_anon_1.roce = bindings::roce_ah_attr {
                dmac: rec.mgid().multicast_mac(),
            };
        }
        // INVARIANT: see above.
        Ok(Self(a))
    }
}

impl Drop for AhAttr {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the GID attribute, if any, is referenced by us; the
        // call releases it and nothing else.
        unsafe { bindings::rdma_destroy_ah_attr(&mut self.0) };
    }
}

/// An address handle (`struct ib_ah`): the destination of UD sends.
///
/// Shared through [`Arc`]: queue pairs keep the handle of each send until it completes.
/// Dropping the last reference may sleep (it may release the protection domain's last
/// reference, and some providers, rxe among them, take locks that softirq context must not
/// take): let it go in process context, as a work item does.
///
/// # Invariants
///
/// `ah` was returned by `rdma_create_ah` in `pd` and is destroyed only in `drop`.
pub struct AddressHandle {
    ah: NonNull<bindings::ib_ah>,
    pd: Arc<ProtectionDomain>,
}

// SAFETY: The core allows address handles to be used and destroyed from any thread.
unsafe impl Send for AddressHandle {}
// SAFETY: Shared use only passes the pointer to the core.
unsafe impl Sync for AddressHandle {}

impl AddressHandle {
    /// Creates an address handle in `pd` for `attr`. May sleep.
    pub fn new(pd: &Arc<ProtectionDomain>, attr: &AhAttr) -> Result<Arc<Self>> {
        Self::create(
            pd,
            attr,
            bindings::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE,
        )
    }

    /// Creates an address handle in `pd` for `attr` without sleeping, e.g. on the transmit
    /// path.
    pub fn new_atomic(pd: &Arc<ProtectionDomain>, attr: &AhAttr) -> Result<Arc<Self>> {
        Self::create(pd, attr, 0)
    }

    fn create(pd: &Arc<ProtectionDomain>, attr: &AhAttr, flags: u32) -> Result<Arc<Self>> {
        let mut raw = attr.0;
        // SAFETY: `pd` is valid; `raw` is a valid attribute set, copied so the core may fill in
        // (and release again) its GID attribute; a GID attribute already set stays referenced
        // by `attr` during the call, and the core takes its own reference if it keeps it; the
        // flags tell the core whether it may sleep.
        let ah = from_err_ptr(unsafe { bindings::rdma_create_ah(pd.as_raw(), &mut raw, flags) })?;
        let ah = NonNull::new(ah).ok_or(EINVAL)?;
        // INVARIANT: `ah` was just created in `pd`.
        let gfp = if flags == 0 { GFP_ATOMIC } else { GFP_KERNEL };
        Ok(Arc::new(Self { ah, pd: pd.clone() }, gfp)?)
    }

    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_ah {
        self.ah.as_ptr()
    }

    /// The protection domain the handle was made in.
    #[inline]
    pub(crate) fn pd(&self) -> &ProtectionDomain {
        &self.pd
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: `ah` is valid and destroyed only here. (Without the sleepable flag the
        // core itself does not sleep; see the type's documentation for the provider.)
        unsafe { bindings::rdma_destroy_ah_user(self.ah.as_ptr(), 0, core::ptr::null_mut()) };
    }
}
