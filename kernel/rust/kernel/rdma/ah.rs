// SPDX-License-Identifier: GPL-2.0

//! Address handles: where a UD send goes.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use super::{device::Gid, pd::ProtectionDomain};
use crate::{
    alloc::flags::{GFP_ATOMIC, GFP_KERNEL},
    bindings,
    error::{code::EINVAL, from_err_ptr, Result},
    sync::Arc,
};
use core::ptr::NonNull;

/// Route attributes for an address handle (`struct rdma_ah_attr`).
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
        Self(a)
    }
}

/// An address handle (`struct ib_ah`): the destination of UD sends.
///
/// Shared through [`Arc`]: queue pairs keep the handle of each send until it completes.
///
/// # Invariants
///
/// `ah` was returned by `rdma_create_ah` in `pd` and is destroyed only in `drop`.
pub struct AddressHandle {
    ah: NonNull<bindings::ib_ah>,
    _pd: Arc<ProtectionDomain>,
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
        // (and release again) its GID attribute; the flags tell the core whether it may sleep.
        let ah = from_err_ptr(unsafe { bindings::rdma_create_ah(pd.as_raw(), &mut raw, flags) })?;
        let ah = NonNull::new(ah).ok_or(EINVAL)?;
        // INVARIANT: `ah` was just created in `pd`.
        let gfp = if flags == 0 { GFP_ATOMIC } else { GFP_KERNEL };
        Ok(Arc::new(
            Self {
                ah,
                _pd: pd.clone(),
            },
            gfp,
        )?)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::ib_ah {
        self.ah.as_ptr()
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        // SAFETY: `ah` is valid and destroyed only here. Without the sleepable flag this is
        // allowed in atomic context, where the last send completion may drop the handle.
        unsafe { bindings::rdma_destroy_ah_user(self.ah.as_ptr(), 0, core::ptr::null_mut()) };
    }
}
