// SPDX-License-Identifier: GPL-2.0

//! Link kinds (`struct rtnl_link_ops`): `ip link set DEV type KIND ...` and
//! `ip -d link show DEV` for devices of a driver.
//!
//! C header: [`include/net/rtnetlink.h`](srctree/include/net/rtnetlink.h).
//!
//! A [`LinkKind`] is registered once per driver, by a [`LinkRegistration`] the module
//! owns, and attached to its devices with [`super::dev::Registration::set_link_kind`].
//! Devices keep the kind's memory alive but do not count for its registration: the module
//! unregisters it when it goes, which deletes the devices the core made of the kind and
//! waits for them, so none outlives the module's code, and a device released last only
//! frees memory (unregistering from its release would wait for that very device).
//!
//! The kind's callbacks are the driver's [`Operations`], implemented for the type of its
//! device operations.
//!
//! Drivers that implement [`Operations::new_link`] also let `ip link add link PARENT ...`
//! make devices on top of theirs, and may make such devices themselves
//! ([`LinkKind::create`]). Those devices belong to the core: `ip link del` deletes them
//! (if [`Operations::del_link`] agrees), and the driver keeps [`LinkDevice`] handles to
//! delete them itself, with their parent for example.

use super::{
    dev::{self, alloc, Adapter, Configure, NetDevice, Owner},
    rtnl::Rtnl,
    skb::SkBuff,
};
use crate::{
    bindings, build_error,
    error::{
        code::{EINVAL, EMLINK, ENODEV},
        from_result, to_result, Result,
    },
    ffi::c_int,
    prelude::*,
    str::CStr,
    sync::{Arc, ArcBorrow},
    types::{ARef, ForeignOwnable, Opaque},
};
use core::{
    marker::PhantomData,
    sync::atomic::{AtomicBool, Ordering},
};

/// Bytes an attribute with a payload of `payload` bytes takes in a message
/// (`nla_total_size`): what [`Operations::fill_link_info`]'s size has to add up.
///
/// # Examples
///
/// ```
/// use kernel::net::link::attr_size;
///
/// assert_eq!(attr_size(0), 4); // a flag: the header alone
/// assert_eq!(attr_size(2), 8); // a u16, padded to 4 bytes
/// assert_eq!(attr_size(4), 8);
/// assert_eq!(attr_size(5), 12);
/// ```
#[inline]
pub const fn attr_size(payload: usize) -> usize {
    const NLA_ALIGNTO: usize = 4;
    const NLA_HDRLEN: usize = 4;
    (NLA_HDRLEN + payload + NLA_ALIGNTO - 1) & !(NLA_ALIGNTO - 1)
}

/// The `rtnl_link_ops` of the devices of a driver: `ip link add`, `del`, `set ... type`
/// and `ip -d link show`.
#[vtable]
pub trait Operations: dev::Operations {
    /// Creates a device of the kind on top of `parent`, a device of ours
    /// (`ip link add link PARENT name NAME type KIND ...`, under RTNL): the driver makes the
    /// new device's data and registers `link` with it ([`NewLink::register`]).
    fn new_link(
        _link: NewLink<'_, Self>,
        _parent: &NetDevice,
        _parent_data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _rtnl: &Rtnl,
        _attrs: &LinkAttributes<'_>,
    ) -> Result {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Asks whether `ip link del DEV` may delete a device made by [`Operations::new_link`]
    /// or [`LinkKind::create`] (under RTNL). On `Ok` the core unregisters it: the driver
    /// gives up here any [`LinkDevice`] it holds of it, since the core waits for them.
    /// Devices of a [`Registration`] are never deleted this way.
    fn del_link(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _rtnl: &Rtnl,
    ) -> Result {
        Ok(())
    }

    /// Bytes [`Operations::fill_link_info`] adds at most (see [`attr_size`]).
    const LINK_INFO_SIZE: usize = 0;

    /// Applies `ip link set DEV type KIND ...` (`rtnl_link_ops->changelink`), under RTNL.
    fn change_link(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _rtnl: &Rtnl,
        _attrs: &LinkAttributes<'_>,
    ) -> Result {
        Err(EINVAL)
    }

    /// Describes the device's kind-specific settings for `ip -d link show`
    /// (`rtnl_link_ops->fill_info`), at most [`Operations::LINK_INFO_SIZE`] bytes.
    fn fill_link_info(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _info: &mut LinkInfo<'_>,
    ) -> Result {
        Ok(())
    }
}

/// A link kind for the devices of `T`, registered while its [`LinkRegistration`] lives.
///
/// # Invariants
///
/// `ops` names the callbacks of `T`; it is registered with `rtnl_link_register` from
/// creation until `registered` turns false (under RTNL), then unregistered.
#[pin_data]
pub struct LinkKind<T: dev::Operations> {
    #[pin]
    ops: Opaque<bindings::rtnl_link_ops>,
    registered: AtomicBool,
    _ops: PhantomData<T>,
}

/// The registration of a [`LinkKind`], owned by the module: dropping it (in process
/// context, without RTNL, before the module's code goes) unregisters the kind, which
/// deletes every device the core made of it and waits until they are released.
pub struct LinkRegistration<T: Operations> {
    kind: Arc<LinkKind<T>>,
}

impl<T: Operations> LinkRegistration<T> {
    /// The kind, for devices and for [`LinkKind::create`].
    #[inline]
    pub fn kind(&self) -> &Arc<LinkKind<T>> {
        &self.kind
    }
}

impl<T: Operations> Drop for LinkRegistration<T> {
    fn drop(&mut self) {
        // After this no device of the kind can be made ([`LinkKind::create`] checks under
        // RTNL); those made before are deleted below.
        let rtnl = super::rtnl::RtnlGuard::lock();
        self.kind.registered.store(false, Ordering::Relaxed);
        drop(rtnl);
        // SAFETY: By the type invariant `ops` is registered, and only this, the kind's one
        // registration, unregisters it.
        unsafe { bindings::rtnl_link_unregister(self.kind.ops.get()) };
    }
}

// SAFETY: The core reads `ops` under RTNL; Rust never touches it after registration.
unsafe impl<T: dev::Operations> Send for LinkKind<T> {}
// SAFETY: Shared access reads only `registered` (an atomic) and the address of `ops`,
// whose contents the core reads under RTNL.
unsafe impl<T: dev::Operations> Sync for LinkKind<T> {}

impl<T: Operations> LinkKind<T> {
    /// Registers kind `kind` whose attributes (`IFLA_INFO_DATA`) go up to `maxtype`.
    pub fn register(kind: &'static CStr, maxtype: u32) -> Result<LinkRegistration<T>> {
        let this = Arc::pin_init(
            pin_init!(Self {
                ops <- Opaque::ffi_init(|slot: *mut bindings::rtnl_link_ops| {
                    // SAFETY: All-zero is a valid `rtnl_link_ops` (no callbacks).
                    let zeroed = unsafe { core::mem::zeroed() };
                    // SAFETY: `slot` is valid for writes.
                    unsafe { slot.write(zeroed) };
                    // SAFETY: Initialised just above; nothing else refers to it yet.
                    let ops = unsafe { &mut *slot };
                    ops.kind = kind.as_char_ptr();
                    // Devices in a namespace that goes away return to the initial one, as
                    // devices without a kind do.
                    ops.netns_refund = true;
                    ops.maxtype = maxtype;
                    ops.changelink = Some(change_link_callback::<T>);
                    if T::HAS_NEW_LINK {
                        ops.priv_size = Adapter::<T>::PRIV_SIZE;
                        ops.setup = Some(Adapter::<T>::setup_callback);
                        ops.newlink = Some(new_link_callback::<T>);
                    }
                    // Set even without `newlink`, so the core never installs its own, which
                    // would delete any device.
                    ops.dellink = Some(del_link_callback::<T>);
                    ops.get_size = Some(get_size_callback::<T>);
                    ops.fill_info = Some(fill_info_callback::<T>);
                }),
                registered: AtomicBool::new(true),
                _ops: PhantomData,
            }),
            GFP_KERNEL,
        )?;
        // SAFETY: `ops` is initialised and pinned inside the `Arc`, which outlives its
        // registration (the registration holds it).
        to_result(unsafe { bindings::rtnl_link_register(this.ops.get()) })?;
        // INVARIANT: registered just above, until the registration made here drops.
        Ok(LinkRegistration { kind: this })
    }
}

impl<T: dev::Operations> LinkKind<T> {
    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::rtnl_link_ops {
        self.ops.get()
    }
}

impl<T: Operations> LinkKind<T> {
    /// Makes a device of the kind named `name` (under RTNL), as `ip link add` would, for a
    /// driver that creates devices on request (a sysfs file, for example). The arguments
    /// are those of [`super::dev::Registration::new`]; the core owns the device, which
    /// `ip link del` may delete (see [`Operations::del_link`]).
    pub fn create(
        self: ArcBorrow<'_, Self>,
        rtnl: &Rtnl,
        name: &CStr,
        hw_addr: &[u8],
        data: T::Data,
        configure: impl FnOnce(&mut Configure<T>) -> Result,
    ) -> Result<LinkDevice<T>> {
        // RTNL is held: the registration cannot end meanwhile. Once it has ended, a device
        // made now would escape its deletion.
        if !self.registered.load(Ordering::Relaxed) {
            return Err(ENODEV);
        }
        let dev = alloc::<T>(name, bindings::NET_NAME_USER)?;
        let raw = dev.as_ptr();
        // SAFETY: Allocated just above for `T`; ours alone.
        let registered = unsafe {
            Adapter::<T>::register(
                raw,
                rtnl,
                hw_addr,
                data,
                Owner::Core(self.into()),
                configure,
            )
        };
        if let Err(e) = registered {
            // SAFETY: Allocated above, never registered, holding nothing of ours.
            unsafe { bindings::free_netdev(raw) };
            return Err(e);
        }
        // SAFETY: Registered just above by `register`, not owned by a registration.
        Ok(unsafe { LinkDevice::new(raw) })
    }
}

/// A device of kind `T` that the core owns, made by [`Operations::new_link`] or
/// [`LinkKind::create`]: a reference that keeps it allocated, and the means to delete it.
///
/// The core waits for these references when it unregisters the device: the driver gives
/// them up in [`Operations::del_link`] and when it deletes the device.
///
/// # Invariants
///
/// `dev` was set up by [`Adapter::register`] for `T`, not as owned by a registration.
pub struct LinkDevice<T: Operations> {
    dev: ARef<NetDevice>,
    _ops: PhantomData<T>,
}

impl<T: Operations> LinkDevice<T> {
    /// # Safety
    ///
    /// `raw` must be a registered device set up by [`Adapter::register`] for `T`, not as
    /// owned by a registration.
    unsafe fn new(raw: *mut bindings::net_device) -> Self {
        // SAFETY: The device is registered, so valid; `from_raw` then `into` takes a
        // reference of our own.
        let dev: ARef<NetDevice> = unsafe { NetDevice::from_raw(raw) }.into();
        // INVARIANT: per the safety requirements.
        Self {
            dev,
            _ops: PhantomData,
        }
    }

    /// The device.
    #[inline]
    pub fn device(&self) -> &NetDevice {
        &self.dev
    }

    /// Unregisters the device (under RTNL), unless it is already going; the core frees it
    /// once the lock is dropped.
    pub fn delete(self, _rtnl: &Rtnl) {
        let raw = self.dev.as_raw();
        // SAFETY: The device is valid while we hold our reference, and RTNL is held, so
        // its registration state cannot change under us.
        if unsafe { bindings::netdev_is_registered(raw) } {
            // SAFETY: As above; by the type invariant the core owns it: no registration
            // will unregister it again.
            unsafe { bindings::unregister_netdevice_queue(raw, core::ptr::null_mut()) };
        }
    }
}

/// A device the core allocated for `ip link add` with `T`'s set-up, to be registered by
/// [`Operations::new_link`].
///
/// # Invariants
///
/// `dev` was allocated by the core for kind `kind`, with `T`'s private size and set-up, and
/// is not registered; it stays valid for `'a` (the `newlink` callback). `links` are the
/// message's link attributes (`IFLA_*`).
pub struct NewLink<'a, T: Operations> {
    dev: *mut bindings::net_device,
    kind: ArcBorrow<'a, LinkKind<T>>,
    links: LinkAttributes<'a>,
}

impl<T: Operations> NewLink<'_, T> {
    /// The hardware address asked for (`ip link add ... address ADDR`), if any: `EINVAL`
    /// unless it has the device's address length.
    pub fn address(&self) -> Result<Option<&[u8]>> {
        let Some(addr) = self.links.payload(bindings::IFLA_ADDRESS as u16) else {
            return Ok(None);
        };
        // SAFETY: `dev` is valid for the callback (type invariant); its `addr_len` was set
        // by the kind's set-up.
        let len = usize::from(unsafe { (*self.dev).addr_len });
        if addr.len() != len {
            return Err(EINVAL);
        }
        Ok(Some(addr))
    }

    /// Registers the device with `data`; the other arguments are those of
    /// [`super::dev::Registration::new`].
    pub fn register(
        self,
        rtnl: &Rtnl,
        hw_addr: &[u8],
        data: T::Data,
        configure: impl FnOnce(&mut Configure<T>) -> Result,
    ) -> Result<LinkDevice<T>> {
        // SAFETY: The core allocated the device with our private size and set-up for this
        // callback and has not registered it (type invariant); on failure the core frees
        // it.
        unsafe {
            Adapter::<T>::register(
                self.dev,
                rtnl,
                hw_addr,
                data,
                Owner::Core(self.kind.into()),
                configure,
            )
        }?;
        // SAFETY: Registered just above, not owned by a registration.
        Ok(unsafe { LinkDevice::new(self.dev) })
    }
}

/// The kind-specific attributes of an `ip link` change (`IFLA_INFO_DATA`).
///
/// # Invariants
///
/// `data` is null or points to `maxtype + 1` entries, each null or a parsed attribute of
/// the message, valid for `'a` (the callback).
pub struct LinkAttributes<'a> {
    /// `maxtype + 1` attribute pointers, or null when the message has none.
    data: *mut *mut bindings::nlattr,
    maxtype: u32,
    _data: PhantomData<&'a bindings::nlattr>,
}

impl<'a> LinkAttributes<'a> {
    /// The payload of the attribute of type `kind`, if present.
    fn payload(&self, kind: u16) -> Option<&'a [u8]> {
        if self.data.is_null() || u32::from(kind) > self.maxtype {
            return None;
        }
        // SAFETY: The core passes `maxtype + 1` entries, and `kind <= maxtype`.
        let attr = unsafe { *self.data.wrapping_add(usize::from(kind)) };
        if attr.is_null() {
            return None;
        }
        // SAFETY: A non-null entry is a parsed attribute inside the message.
        let len = usize::from(unsafe { (*attr).nla_len });
        // The parser checked that its length covers its header.
        let payload = attr.cast::<u8>().wrapping_add(attr_size(0));
        // SAFETY: The payload's `len - header` bytes are inside the message, which is not
        // changed for `'a`.
        Some(unsafe { core::slice::from_raw_parts(payload, len.saturating_sub(attr_size(0))) })
    }

    /// The payload of the attribute of type `kind`: `None` if absent, `EINVAL` if it is not
    /// `N` bytes long.
    fn bytes<const N: usize>(&self, kind: u16) -> Result<Option<[u8; N]>> {
        match self.payload(kind) {
            None => Ok(None),
            Some(payload) => Ok(Some(payload.try_into().map_err(|_| EINVAL)?)),
        }
    }

    /// The attribute of type `kind` as a `u16`: `None` if absent, `EINVAL` if it holds
    /// another size.
    #[inline]
    pub fn u16(&self, kind: u16) -> Result<Option<u16>> {
        // Netlink attributes are in host order.
        Ok(self.bytes(kind)?.map(u16::from_ne_bytes))
    }

    /// The attribute of type `kind` as a `u32`, as for [`LinkAttributes::u16`].
    #[inline]
    pub fn u32(&self, kind: u16) -> Result<Option<u32>> {
        Ok(self.bytes(kind)?.map(u32::from_ne_bytes))
    }
}

/// The message `ip -d link show` fills with a device's kind-specific attributes.
///
/// # Invariants
///
/// `skb` is the message being built, ours to add attributes to for `'a` (the callback).
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
/// [`Adapter::register`] for `T`.
unsafe extern "C" fn change_link_callback<T: Operations>(
    dev: *mut bindings::net_device,
    _tb: *mut *mut bindings::nlattr,
    data: *mut *mut bindings::nlattr,
    _extack: *mut bindings::netlink_ext_ack,
) -> c_int {
    from_result(|| {
        // SAFETY: Per the safety requirements the device is ours and valid.
        let (ndev, data_t) = unsafe { Adapter::<T>::ours(dev) };
        // SAFETY: Per the safety requirements RTNL is held.
        let rtnl = unsafe { Rtnl::assume_held() };
        // SAFETY: The device is valid; its kind's operations are `T`'s, registered.
        let ops = unsafe { (*dev).rtnl_link_ops };
        // SAFETY: `ops` is valid while registered; its `maxtype` sized `data`.
        let maxtype = unsafe { (*ops).maxtype };
        // INVARIANT: The core passes `maxtype + 1` entries or null, for the callback.
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
        let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
        // INVARIANT: The message being built, for the callback.
        let mut info = LinkInfo {
            skb,
            _skb: PhantomData,
        };
        T::fill_link_info(ndev, data, &mut info)?;
        Ok(0)
    })
}

/// # Safety
///
/// Called by the core only, under RTNL, for `ip link add` of kind `T`: `dev` is allocated
/// with `T`'s private size and set-up and its `rtnl_link_ops` are the kind's; `tb` holds
/// `IFLA_MAX + 1` entries and `data` null or `maxtype + 1`.
unsafe extern "C" fn new_link_callback<T: Operations>(
    src_net: *mut bindings::net,
    dev: *mut bindings::net_device,
    tb: *mut *mut bindings::nlattr,
    data: *mut *mut bindings::nlattr,
    _extack: *mut bindings::netlink_ext_ack,
) -> c_int {
    from_result(|| {
        // SAFETY: Per the safety requirements RTNL is held.
        let rtnl = unsafe { Rtnl::assume_held() };
        // SAFETY: `dev` is valid; its operations are the kind's, registered, inside the
        // `LinkKind<T>` that registered them, alive while they are.
        let ops = unsafe { (*dev).rtnl_link_ops };
        // SAFETY: `ops` points to the `ops` field of a `LinkKind<T>` (`Opaque` is
        // `repr(transparent)`).
        let kind = unsafe { crate::container_of!(ops, LinkKind<T>, ops) };
        // SAFETY: That `LinkKind<T>` lives inside an `Arc`, the only kind `register` makes,
        // whose pointer `Arc::into_raw` would give; the `Arc` outlives the registration of
        // its operations, so this callback.
        let kind = unsafe { ArcBorrow::from_raw(kind) };
        // INVARIANT: The core passes `IFLA_MAX + 1` entries, for the callback.
        let links = LinkAttributes {
            data: tb,
            maxtype: bindings::__IFLA_MAX - 1,
            _data: PhantomData,
        };
        let index = links.u32(bindings::IFLA_LINK as u16)?.ok_or(EINVAL)?;
        let index = c_int::try_from(index).map_err(|_| ENODEV)?;
        // SAFETY: RTNL is held, as `__dev_get_by_index` requires; `src_net` is valid.
        let parent = unsafe { bindings::__dev_get_by_index(src_net, index) };
        // SAFETY: A non-null result is a registered device, valid under RTNL.
        if parent.is_null() || unsafe { (*parent).rtnl_link_ops } != ops {
            return Err(ENODEV);
        }
        // SAFETY: The parent is of our kind, so set up by `Adapter::register` for `T`, and
        // registered.
        let (parent_dev, parent_data) = unsafe { Adapter::<T>::ours(parent) };
        // INVARIANT: The core passes `maxtype + 1` entries or null, for the callback.
        let attrs = LinkAttributes {
            data,
            // SAFETY: The kind's operations are valid (above).
            maxtype: unsafe { (*ops).maxtype },
            _data: PhantomData,
        };
        // INVARIANT: Allocated for the kind by the core, unregistered, for the callback.
        let link = NewLink { dev, kind, links };
        let made = T::new_link(link, parent_dev, parent_data, rtnl, &attrs);
        // SAFETY: `dev` is valid for the callback and RTNL is held.
        let registered = unsafe { bindings::netdev_is_registered(dev) };
        match made {
            Ok(()) if registered => Ok(0),
            // The driver did not register the device: the core frees it.
            Ok(()) => Err(EINVAL),
            Err(e) => {
                if registered {
                    // SAFETY: Registered through `NewLink`, so set up by `Adapter::register`
                    // for `T`.
                    let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
                    // The driver lets go of the device as for `ip link del`, whatever it
                    // answers: the device goes.
                    let _ = T::del_link(ndev, data, rtnl);
                    // SAFETY: Registered by the driver through `NewLink`: the core owns it;
                    // unregistered here, it is freed by the core, which also frees it on
                    // our error (a no-op for a device being unregistered).
                    unsafe { bindings::unregister_netdevice_queue(dev, core::ptr::null_mut()) };
                }
                Err(e)
            }
        }
    })
}

/// # Safety
///
/// Called by the core only, under RTNL, for `ip link del` of a device of kind `T` (or a
/// failed `ip link add`, or the kind's unregistration); `head` is the list to queue the
/// device on.
unsafe extern "C" fn del_link_callback<T: Operations>(
    dev: *mut bindings::net_device,
    head: *mut bindings::list_head,
) {
    // SAFETY: Per the safety requirements the device is of our kind, so set up by
    // `Adapter::register` for `T`.
    let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
    // SAFETY: Per the safety requirements RTNL is held.
    let rtnl = unsafe { Rtnl::assume_held() };
    // SAFETY: As for `ours`.
    let owned = unsafe { Adapter::<T>::owned(dev) };
    if owned {
        // A registration unregisters its device when dropped; the core cannot report a
        // refusal, so say it.
        pr_info!(
            "{}: not deleted: the driver removes it with its hardware\n",
            ndev.name()
        );
        return;
    }
    if T::del_link(ndev, data, rtnl).is_ok() {
        // SAFETY: The device is registered and RTNL is held; the core unregisters the
        // devices on `head` and frees them.
        unsafe { bindings::unregister_netdevice_queue(dev, head) };
    }
}
