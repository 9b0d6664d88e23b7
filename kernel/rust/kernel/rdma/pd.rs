// SPDX-License-Identifier: GPL-2.0

//! Protection domains.
//!
//! A [`ProtectionDomain`] is allocated on a device and shared, through [`Arc`], by what is
//! made in it (queue pairs, shared receive queues, address handles), each of which keeps a
//! reference: the domain is freed after the last of them.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! # Examples
//!
//! ```
//! use kernel::c_str;
//! use kernel::prelude::*;
//! use kernel::rdma::{device::Device, pd::ProtectionDomain};
//! use kernel::sync::Arc;
//!
//! /// A domain on `device`, named after this module in `rdma resource show pd`.
//! fn domain(device: &Device) -> Result<Arc<ProtectionDomain>> {
//!     let pd = ProtectionDomain::new(device, c_str!("example"))?;
//!     // The key with which the device reaches kernel memory mapped for DMA.
//!     let _lkey = pd.local_dma_lkey();
//!     Ok(pd)
//! }
//! # let _ = domain;
//! ```

use super::device::{Device, DeviceRef};
use crate::{bindings, error::from_err_ptr, error::Result, str::CStr, sync::Arc};
use core::ptr::NonNull;

/// A protection domain (`struct ib_pd`): the scope of queue pairs, address handles and
/// memory keys. Shared through [`Arc`] by everything created in it, so it is freed last.
///
/// # Invariants
///
/// `pd` was returned by `__ib_alloc_pd` on the device `device` refers to and is deallocated
/// only in `drop`.
pub struct ProtectionDomain {
    pd: NonNull<bindings::ib_pd>,
    device: DeviceRef,
}

// SAFETY: The RDMA core allows a PD to be used and freed from any thread.
unsafe impl Send for ProtectionDomain {}
// SAFETY: The shared methods only read fields that are fixed after allocation.
unsafe impl Sync for ProtectionDomain {}

impl ProtectionDomain {
    /// Allocates a protection domain on `device`. `owner` names the allocating module in the
    /// core's resource tracking (`rdma resource show pd`).
    pub fn new(device: &Device, owner: &'static CStr) -> Result<Arc<Self>> {
        let device = device.get_ref()?;
        // SAFETY: The device is registered (we hold a reference); `owner` is a static string.
        let pd = from_err_ptr(unsafe {
            bindings::__ib_alloc_pd(device.as_raw(), 0, owner.as_char_ptr())
        })?;
        let pd = NonNull::new(pd).ok_or(crate::error::code::ENOMEM)?;
        // INVARIANT: `pd` was just allocated on `device`.
        Ok(Arc::new(
            Self { pd, device },
            crate::alloc::flags::GFP_KERNEL,
        )?)
    }

    /// The device the domain lives on.
    #[inline]
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// The key that lets the device access any kernel memory mapped for DMA.
    #[inline]
    pub fn local_dma_lkey(&self) -> u32 {
        // SAFETY: By the type invariant `pd` is valid; the field is fixed at allocation.
        unsafe { (*self.pd.as_ptr()).local_dma_lkey }
    }

    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_pd {
        self.pd.as_ptr()
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: By the type invariant `pd` is valid and freed only here. Everything created
        // in it holds an `Arc` to it, so nothing uses it any more.
        unsafe { bindings::ib_dealloc_pd_user(self.pd.as_ptr(), core::ptr::null_mut()) };
    }
}
