// SPDX-License-Identifier: GPL-2.0

//! Link-layer header operations (`struct header_ops`): how the stack builds the header of a
//! packet to send and reads the source address of one received.
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h).
//!
//! A driver implements [`Operations`] for a type of its own and gives it to its devices in
//! their set-up ([`super::dev::Setup::set_header_ops`]). The operations get no driver data:
//! another driver's device may take them over (a bond of our devices copies them).
//!
//! # Examples
//!
//! ```
//! use kernel::net::header::Operations;
//! use kernel::net::dev::NetDevice;
//! use kernel::net::skb::{Lent, SkBuff};
//! use kernel::prelude::*;
//!
//! /// A header of two bytes: the protocol, big-endian.
//! struct Tag;
//!
//! #[vtable]
//! impl Operations for Tag {
//!     fn create(
//!         skb: &mut SkBuff<Lent<'_>>,
//!         _dev: &NetDevice,
//!         ethertype: u16,
//!         _daddr: Option<&[u8]>,
//!     ) -> Result<u32> {
//!         skb.push(2)?.copy_from_slice(&ethertype.to_be_bytes());
//!         Ok(2)
//!     }
//! }
//!
//! // A device's set-up takes them with `dev.set_header_ops::<Tag>()`.
//! assert!(Tag::HAS_CREATE && !Tag::HAS_PARSE);
//! ```

use super::{
    dev::NetDevice,
    skb::{Lent, SkBuff},
};
use crate::{
    bindings, build_error,
    ffi::{c_int, c_void},
    prelude::*,
};
use core::marker::PhantomData;

/// The link-layer header operations of a device (`struct header_ops`).
#[vtable]
pub trait Operations: Sized + 'static {
    /// Builds the link-layer header of an outgoing packet (`header_ops->create`): pushes it in
    /// front of `skb`'s data for protocol `ethertype` to `daddr` (the destination hardware
    /// address, `None` when the stack has none) and returns its length. `dev` may be another
    /// driver's device that took over these operations.
    fn create(
        skb: &mut SkBuff<Lent<'_>>,
        dev: &NetDevice,
        ethertype: u16,
        daddr: Option<&[u8]>,
    ) -> Result<u32>;

    /// Fills in the source hardware address of a received packet (`header_ops->parse`) and
    /// returns its length.
    fn parse(_skb: &SkBuff<Lent<'_>>, _dev: &NetDevice, _haddr: &mut [u8]) -> Result<u32> {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }
}

pub(crate) struct HeaderAdapter<T: Operations>(PhantomData<T>);

impl<T: Operations> HeaderAdapter<T> {
    pub(crate) const OPS: bindings::header_ops = bindings::header_ops {
        create: Some(Self::create_callback),
        parse: if T::HAS_PARSE {
            Some(Self::parse_callback)
        } else {
            None
        },
        // SAFETY: The other members are optional callbacks; zero is `None`.
        ..unsafe { core::mem::MaybeUninit::zeroed().assume_init() }
    };

    /// # Safety
    ///
    /// Called by the networking core only, for a device whose header operations are these
    /// (its own, or copied: bonding does), with an skb it owns and lends us alone for the
    /// call; `daddr` is null or points to `addr_len` bytes.
    unsafe extern "C" fn create_callback(
        skb: *mut bindings::sk_buff,
        dev: *mut bindings::net_device,
        ty: crate::ffi::c_ushort,
        daddr: *const c_void,
        _saddr: *const c_void,
        _len: crate::ffi::c_uint,
    ) -> c_int {
        // SAFETY: `dev` is valid for the call.
        let ndev = unsafe { NetDevice::from_raw(dev) };
        let daddr = (!daddr.is_null()).then(|| {
            // SAFETY: A non-null `daddr` points to `addr_len` bytes for the call.
            unsafe { core::slice::from_raw_parts(daddr.cast::<u8>(), ndev.addr_len()) }
        });
        // SAFETY: The core lends us the skb, for our use alone, for the call.
        let mut skb = unsafe { SkBuff::lent(skb) };
        match T::create(&mut skb, ndev, ty, daddr) {
            Ok(len) => c_int::try_from(len).unwrap_or(c_int::MAX),
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called by the networking core only, for a device whose header operations are these,
    /// with a valid skb lent for the call, which nobody changes meanwhile, and `haddr`
    /// pointing to `MAX_ADDR_LEN` writable bytes.
    unsafe extern "C" fn parse_callback(
        skb: *const bindings::sk_buff,
        dev: *const bindings::net_device,
        haddr: *mut crate::ffi::c_uchar,
    ) -> c_int {
        // SAFETY: The core passes a valid device for the call.
        let ndev = unsafe { NetDevice::from_raw(dev.cast_mut()) };
        // SAFETY: The skb is lent for the call and nobody changes it meanwhile; only shared
        // access to it is given out, so it is only read.
        let skb = unsafe { SkBuff::lent(skb.cast_mut()) };
        // SAFETY: `haddr` points to `MAX_ADDR_LEN` writable bytes nothing else uses during
        // the call.
        let haddr =
            unsafe { core::slice::from_raw_parts_mut(haddr, bindings::MAX_ADDR_LEN as usize) };
        match T::parse(&skb, ndev, haddr) {
            Ok(len) => c_int::try_from(len).unwrap_or(0),
            Err(_) => 0,
        }
    }
}
