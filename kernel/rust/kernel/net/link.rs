// SPDX-License-Identifier: GPL-2.0

//! Link kinds (`struct rtnl_link_ops`): `ip link set DEV type KIND ...` and
//! `ip -d link show DEV` for devices of a driver.
//!
//! C header: [`include/net/rtnetlink.h`](srctree/include/net/rtnetlink.h).
//!
//! A [`LinkKind`] is registered once per driver and attached to its devices with
//! [`super::dev::Registration::set_link_kind`]; each device keeps the kind alive, so the
//! kind is unregistered only after all its devices are gone. Creating and deleting devices
//! through `ip link add/del` is not offered: those operations stay unset.

use super::{
    dev::{Adapter, NetDevice, Operations},
    rtnl::Rtnl,
    skb::SkBuff,
};
use crate::{
    bindings,
    error::{code::EINVAL, code::EMLINK, from_result, to_result, Result},
    ffi::c_int,
    prelude::*,
    str::CStr,
    sync::Arc,
    types::Opaque,
};
use core::marker::PhantomData;

/// Bytes an attribute with a payload of `payload` bytes takes in a message
/// (`nla_total_size`).
pub const fn attr_size(payload: usize) -> usize {
    const NLA_ALIGNTO: usize = 4;
    const NLA_HDRLEN: usize = 4;
    (NLA_HDRLEN + payload + NLA_ALIGNTO - 1) & !(NLA_ALIGNTO - 1)
}

/// A registered link kind for the devices of `T`; unregistered when the last device and the
/// owner let go of it.
///
/// # Invariants
///
/// `ops` is registered with `rtnl_link_register` and names the callbacks of `T`.
#[pin_data(PinnedDrop)]
pub struct LinkKind<T: Operations> {
    #[pin]
    ops: Opaque<bindings::rtnl_link_ops>,
    _ops: PhantomData<T>,
}

// SAFETY: The core reads `ops` under RTNL; Rust never touches it after registration.
unsafe impl<T: Operations> Send for LinkKind<T> {}
// SAFETY: See above.
unsafe impl<T: Operations> Sync for LinkKind<T> {}

impl<T: Operations> LinkKind<T> {
    /// Registers kind `kind` whose attributes (`IFLA_INFO_DATA`) go up to `maxtype`.
    pub fn register(kind: &'static CStr, maxtype: u32) -> Result<Arc<Self>> {
        let this = Arc::pin_init(
            pin_init!(Self {
                ops <- Opaque::ffi_init(|slot: *mut bindings::rtnl_link_ops| {
                    // SAFETY: All-zero is a valid `rtnl_link_ops` (no callbacks); `slot` is
                    // valid for writes.
                    unsafe {
                        slot.write(core::mem::zeroed());
                        (*slot).kind = kind.as_char_ptr();
                        // Devices in a namespace that goes away return to the initial one,
                        // as devices without a kind do.
                        (*slot).netns_refund = true;
                        (*slot).maxtype = maxtype;
                        (*slot).changelink = Some(change_link_callback::<T>);
                        (*slot).get_size = Some(get_size_callback::<T>);
                        (*slot).fill_info = Some(fill_info_callback::<T>);
                    }
                }),
                _ops: PhantomData,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `ops` is initialised and pinned inside the `Arc` for as long as it is
        // registered (until `drop`). Without `setup` or `alloc` the core leaves `dellink`
        // unset: devices of the kind cannot be deleted through netlink.
        to_result(unsafe { bindings::rtnl_link_register(this.ops.get()) })?;
        // INVARIANT: registered just above.
        Ok(this)
    }

    pub(crate) fn as_raw(&self) -> *mut bindings::rtnl_link_ops {
        self.ops.get()
    }
}

#[pinned_drop]
impl<T: Operations> PinnedDrop for LinkKind<T> {
    fn drop(self: Pin<&mut Self>) {
        // SAFETY: By the type invariant `ops` is registered. Every device of the kind holds
        // a reference to us and is unregistered before letting go, so none is left for the
        // core to delete.
        unsafe { bindings::rtnl_link_unregister(self.ops.get()) };
    }
}

/// The kind-specific attributes of an `ip link` change (`IFLA_INFO_DATA`).
pub struct LinkAttributes<'a> {
    /// `maxtype + 1` attribute pointers, or null when the message has none.
    data: *mut *mut bindings::nlattr,
    maxtype: u32,
    _data: PhantomData<&'a bindings::nlattr>,
}

impl LinkAttributes<'_> {
    /// The attribute of type `kind` as a `u16`: `None` if absent, `EINVAL` if it holds
    /// another size.
    pub fn u16(&self, kind: u16) -> Result<Option<u16>> {
        if self.data.is_null() || u32::from(kind) > self.maxtype {
            return Ok(None);
        }
        // SAFETY: The core passes `maxtype + 1` entries, and `kind <= maxtype`.
        let attr = unsafe { *self.data.add(usize::from(kind)) };
        if attr.is_null() {
            return Ok(None);
        }
        // SAFETY: A non-null entry is a parsed attribute inside the message; its length
        // covers its header and payload.
        let (len, payload) = unsafe {
            (
                usize::from((*attr).nla_len),
                attr.cast::<u8>().add(attr_size(0)),
            )
        };
        if len != attr_size(0) + 2 {
            return Err(EINVAL);
        }
        let mut bytes = [0u8; 2];
        // SAFETY: The payload has the two bytes checked above.
        unsafe { core::ptr::copy_nonoverlapping(payload, bytes.as_mut_ptr(), 2) };
        // Netlink attributes are in host order.
        Ok(Some(u16::from_ne_bytes(bytes)))
    }
}

/// The message `ip -d link show` fills with a device's kind-specific attributes.
pub struct LinkInfo<'a> {
    skb: *mut bindings::sk_buff,
    _skb: PhantomData<&'a mut SkBuff>,
}

impl LinkInfo<'_> {
    /// Adds attribute `kind` holding `value`; `EMLINK` when the message is full.
    pub fn put_u16(&mut self, kind: u16, value: u16) -> Result {
        let value = value.to_ne_bytes();
        // SAFETY: The skb is the message being built, valid for the callback; `value` is
        // valid for 2 bytes.
        let ret =
            unsafe { bindings::nla_put(self.skb, c_int::from(kind), 2, value.as_ptr().cast()) };
        to_result(ret).map_err(|_| EMLINK)
    }
}

/// # Safety
///
/// Called by the core only, under RTNL, for a device of a [`LinkKind<T>`] registered by
/// [`super::dev::Registration<T>`].
unsafe extern "C" fn change_link_callback<T: Operations>(
    dev: *mut bindings::net_device,
    _tb: *mut *mut bindings::nlattr,
    data: *mut *mut bindings::nlattr,
    _extack: *mut bindings::netlink_ext_ack,
) -> c_int {
    from_result(|| {
        // SAFETY: Per the safety requirements the device is ours and valid, RTNL is held,
        // and the device's kind is `T`'s, whose `maxtype` sized `data`.
        let (ndev, data_t, rtnl, maxtype) = unsafe {
            (
                NetDevice::from_raw(dev),
                Adapter::<T>::data(dev),
                Rtnl::assume_held(),
                (*(*dev).rtnl_link_ops).maxtype,
            )
        };
        let attrs = LinkAttributes {
            data,
            maxtype,
            _data: PhantomData,
        };
        T::change_link(ndev, data_t, rtnl, &attrs)?;
        Ok(0)
    })
}

/// # Safety
///
/// As for [`change_link_callback`].
unsafe extern "C" fn get_size_callback<T: Operations>(_dev: *const bindings::net_device) -> usize {
    T::LINK_INFO_SIZE
}

/// # Safety
///
/// As for [`change_link_callback`]; `skb` is the message being built.
unsafe extern "C" fn fill_info_callback<T: Operations>(
    skb: *mut bindings::sk_buff,
    dev: *const bindings::net_device,
) -> c_int {
    from_result(|| {
        let dev = dev.cast_mut();
        // SAFETY: Per the safety requirements the device is ours and valid.
        let (ndev, data) = unsafe { (NetDevice::from_raw(dev), Adapter::<T>::data(dev)) };
        let mut info = LinkInfo {
            skb,
            _skb: PhantomData,
        };
        T::fill_link_info(ndev, data, &mut info)?;
        Ok(0)
    })
}
