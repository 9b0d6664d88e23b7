// SPDX-License-Identifier: GPL-2.0

//! Network devices.
//!
//! A driver implements [`Operations`] for a type of its own: the device's set-up and the
//! `net_device_ops` it supports (unimplemented ones stay null). [`Registration::new`]
//! allocates, sets up and registers a device with the driver's data, which every callback
//! borrows; dropping the registration unregisters and frees the device. Callbacks get the
//! device as a [`NetDevice`] borrowed for the call, and those run under RTNL an [`Rtnl`]
//! token, which the calls that need the lock require.
//!
//! The device's other tables of operations are traits of their own, given to the device as
//! it is set up ([`Setup`]), as C drivers fill them in: `header_ops`
//! ([`super::header::Operations`]), `ethtool_ops` ([`super::ethtool::Operations`]), and its
//! NAPI contexts ([`super::napi`]). `rtnl_link_ops` are those of a [`LinkKind`]
//! ([`super::link::Operations`]).
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h).
//!
//! # Examples
//!
//! ```
//! use kernel::c_str;
//! use kernel::net::dev::{NetDevice, Operations, Registration, Setup, TxResult};
//! use kernel::net::rtnl::Rtnl;
//! use kernel::net::skb::SkBuff;
//! use kernel::prelude::*;
//!
//! /// A device without a link layer that drops what it is given to send.
//! struct Sink;
//!
//! #[vtable]
//! impl Operations for Sink {
//!     type Data = ();
//!
//!     fn setup(dev: &mut Setup<Self>) {
//!         dev.set_type(0xfffe); // ARPHRD_NONE
//!         let _ = dev.set_mtu(1500, 68, 9000);
//!     }
//!
//!     fn open(dev: &NetDevice, _data: (), _rtnl: &Rtnl) -> Result {
//!         dev.start_queue();
//!         Ok(())
//!     }
//!
//!     fn stop(dev: &NetDevice, _data: (), _rtnl: &Rtnl) -> Result {
//!         dev.stop_queue();
//!         Ok(())
//!     }
//!
//!     fn start_xmit(skb: SkBuff, _dev: &NetDevice, _data: ()) -> TxResult {
//!         // Dropping the packet frees it.
//!         drop(skb);
//!         TxResult::Ok
//!     }
//! }
//!
//! let reg = Registration::<Sink>::new(c_str!("rsdoc%d"), &[], (), |setup| {
//!     setup.set_mtu(1280, 68, 9000)
//! })?;
//! let dev = reg.device();
//! assert!(dev.name().as_bytes().starts_with(b"rsdoc"));
//! assert_eq!(dev.mtu(), 1280);
//! // Dropping the registration unregisters the device.
//! drop(reg);
//! // The hardware address must have the length the set-up leaves, `configure` included.
//! let refused = Registration::<Sink>::new(c_str!("rsdoc%d"), &[], (), |s| s.set_addr_len(6));
//! assert_eq!(refused.err(), Some(EINVAL));
//! # Ok::<(), Error>(())
//! ```

use super::{
    dev_attr::{Attribute, AttributeTable, AttributeText},
    ethtool::EthtoolAdapter,
    header::HeaderAdapter,
    link::LinkKind,
    napi::{self, NapiContext, Poll},
    rtnl::{Rtnl, RtnlGuard},
    skb::SkBuff,
};
use crate::{
    bindings, build_error,
    error::{code::EBUSY, code::EINVAL, code::EIO, code::ENOMEM, from_result, to_result, Result},
    ffi::{c_int, c_void},
    prelude::*,
    str::CStr,
    sync::{rcu, Arc},
    types::{AlwaysRefCounted, ForeignOwnable, Opaque},
};
use core::{marker::PhantomData, ptr::NonNull};

/// A network device (`struct net_device`).
///
/// # Invariants
///
/// A `&NetDevice` refers to a valid, allocated `struct net_device` for the lifetime of the
/// reference.
#[repr(transparent)]
pub struct NetDevice(Opaque<bindings::net_device>);

// SAFETY: The networking core itself uses devices from any thread. The methods below call
// functions that are safe to call concurrently, read fields set up before registration, or
// copy fields RTNL may change (name, MTU, index, address) with volatile reads, never through
// references.
unsafe impl Sync for NetDevice {}
// SAFETY: A `NetDevice` is only ever reached by reference; nothing about it is tied to the
// thread that obtained the reference (references are counted by `ARef`, from any thread).
unsafe impl Send for NetDevice {}

impl NetDevice {
    /// # Safety
    ///
    /// `ptr` must point to a valid `struct net_device` that stays valid for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::net_device) -> &'a Self {
        // SAFETY: `NetDevice` is `repr(transparent)` over the C struct; validity is the
        // caller's guarantee.
        // INVARIANT: Valid for `'a`, as the caller guarantees.
        unsafe { &*ptr.cast() }
    }

    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::net_device {
        self.0.get()
    }

    /// The interface name, e.g. `ib0`, as it is now: a copy, since RTNL may rename the
    /// device while we hold it.
    pub fn name(&self) -> IfName {
        let mut name = [0u8; IFNAMSIZ];
        // SAFETY: The device is valid, so is its `name` array.
        let src = unsafe { core::ptr::addr_of!((*self.as_raw()).name) }.cast::<u8>();
        // The last byte stays 0: the copy is NUL-terminated whatever is read.
        for (i, byte) in name.iter_mut().enumerate().take(IFNAMSIZ - 1) {
            // SAFETY: `i` is within the array; each byte is read once, as `READ_ONCE`
            // reads it, since a rename may write it meanwhile (C's readers race the same
            // way: the name may then be torn, never unterminated).
            *byte = unsafe { core::ptr::read_volatile(src.wrapping_add(i)) };
        }
        IfName(name)
    }

    /// Changes the MTU as `ip link set NAME mtu MTU` does: checked against the device's range
    /// and by its driver, and announced to the stack.
    #[inline]
    pub fn set_mtu(&self, _rtnl: &Rtnl, mtu: u32) -> Result {
        let mtu = c_int::try_from(mtu).map_err(|_| EINVAL)?;
        // SAFETY: The device is valid and RTNL is held, as `dev_set_mtu` requires.
        to_result(unsafe { bindings::dev_set_mtu(self.as_raw(), mtu) })
    }

    /// Brings the interface up or down as `ip link set NAME up|down` does (C:
    /// `dev_change_flags`), for a driver whose interfaces follow another's (an IPoIB
    /// child, its parent). Nothing happens if it is already so; a failure to open it is
    /// returned.
    pub fn set_up(&self, _rtnl: &Rtnl, up: bool) -> Result {
        // SAFETY: The device is valid and RTNL is held, which serialises its flags.
        let flags = unsafe { bindings::dev_get_flags(self.as_raw()) };
        let is_up = flags & bindings::net_device_flags_IFF_UP != 0;
        if is_up == up {
            return Ok(());
        }
        let flags = flags ^ bindings::net_device_flags_IFF_UP;
        // SAFETY: The device is valid and RTNL is held, as `dev_change_flags` requires; no
        // extended ack is asked for.
        to_result(unsafe {
            bindings::dev_change_flags(self.as_raw(), flags, core::ptr::null_mut())
        })
    }

    /// Changes the hardware address, as a driver whose address follows its hardware does
    /// (C: `dev_addr_set`, then the `NETDEV_CHANGEADDR` notification, so that neighbours
    /// and listeners learn it). `EINVAL` unless `addr` has the device's address length.
    pub fn set_address(&self, _rtnl: &Rtnl, addr: &[u8]) -> Result {
        if addr.len() != self.addr_len() {
            return Err(EINVAL);
        }
        // SAFETY: The device is valid, RTNL is held, and `addr` has `addr_len` bytes.
        unsafe { bindings::dev_addr_set(self.as_raw(), addr.as_ptr()) };
        // SAFETY: The device is valid and RTNL is held, as the notifier chain requires.
        unsafe {
            bindings::call_netdevice_notifiers(
                bindings::netdev_cmd_NETDEV_CHANGEADDR as _,
                self.as_raw(),
            )
        };
        Ok(())
    }

    /// The current MTU.
    #[inline]
    pub fn mtu(&self) -> u32 {
        // SAFETY: The device is valid; no reference to the field is made, since RTNL may
        // write it meanwhile.
        let field = unsafe { core::ptr::addr_of!((*self.as_raw()).mtu) };
        // SAFETY: `field` is an aligned word of the device, read whole as `READ_ONCE` does.
        unsafe { core::ptr::read_volatile(field) }
    }

    /// The interface index, which moving the device to another namespace may change.
    #[inline]
    pub fn ifindex(&self) -> i32 {
        // SAFETY: As in `mtu`.
        let field = unsafe { core::ptr::addr_of!((*self.as_raw()).ifindex) };
        // SAFETY: As in `mtu`.
        unsafe { core::ptr::read_volatile(field) }
    }

    /// The hardware address (`dev_addr`, `addr_len` bytes) as it is now: a copy, since
    /// RTNL may change it while we hold the device.
    pub fn dev_addr(&self) -> DevAddr {
        let mut addr = DevAddr {
            bytes: [0; MAX_ADDR_LEN],
            len: self.addr_len().min(MAX_ADDR_LEN),
        };
        // SAFETY: The device is valid; `dev_addr` points to the `MAX_ADDR_LEN` bytes of its
        // address list entry, which the device keeps while it exists.
        let src = unsafe { (*self.as_raw()).dev_addr };
        for (i, byte) in addr.bytes.iter_mut().enumerate().take(addr.len) {
            // SAFETY: `i` is below `MAX_ADDR_LEN`; each byte is read once, as `READ_ONCE`
            // reads it, since `dev_addr_set` may write it meanwhile.
            *byte = unsafe { core::ptr::read_volatile(src.wrapping_add(i)) };
        }
        addr
    }

    /// The length of the device's hardware addresses.
    #[inline]
    pub fn addr_len(&self) -> usize {
        // SAFETY: The device is valid; `addr_len` is set before registration.
        usize::from(unsafe { (*self.as_raw()).addr_len })
    }

    /// Tells the stack the link is up.
    #[inline]
    pub fn carrier_on(&self) {
        // SAFETY: The device is valid; callable from any context.
        unsafe { bindings::netif_carrier_on(self.as_raw()) };
    }

    /// Tells the stack the link is down.
    #[inline]
    pub fn carrier_off(&self) {
        // SAFETY: The device is valid; callable from any context.
        unsafe { bindings::netif_carrier_off(self.as_raw()) };
    }

    /// Lets the stack transmit (from `open`).
    #[inline]
    pub fn start_queue(&self) {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_start_queue(self.as_raw()) };
    }

    /// Stops transmission, e.g. when the send ring is full.
    #[inline]
    pub fn stop_queue(&self) {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_stop_queue(self.as_raw()) };
    }

    /// Resumes transmission stopped with [`NetDevice::stop_queue`].
    #[inline]
    pub fn wake_queue(&self) {
        // SAFETY: The device is valid.
        unsafe { bindings::netif_wake_queue(self.as_raw()) };
    }

    /// Whether transmission is stopped (`netif_queue_stopped`: the driver's stop bit of
    /// the first transmit queue, read without a call).
    #[inline]
    pub fn queue_stopped(&self) -> bool {
        // SAFETY: The device is valid, with its transmit queues from its allocation on.
        let queue = unsafe { (*self.as_raw())._tx };
        let bit = bindings::netdev_queue_state_t___QUEUE_STATE_DRV_XOFF;
        // SAFETY: `queue` is the device's first transmit queue (above); its state word is
        // read as `test_bit` reads it, without ordering.
        let state = unsafe { core::ptr::read_volatile(&raw const (*queue).state) };
        state & (1 << bit) != 0
    }

    /// Hands a received packet to the stack (from any context; queued to the backlog).
    #[inline]
    pub fn rx(&self, mut skb: SkBuff) {
        skb.set_dev(self);
        // SAFETY: `skb` is owned and valid; `netif_rx` takes ownership whatever it returns.
        unsafe { bindings::netif_rx(skb.into_raw()) };
    }
}

impl NetDevice {
    /// Whether `addr`, an IPv4 or IPv6 address, is one of this device's own (as the stack
    /// would deliver it here); an address of another family never is. Does not sleep.
    pub fn has_address(&self, addr: &SockAddr) -> bool {
        // The device's address lists are read under RCU.
        let _rcu = rcu::read_lock();
        let dev = self.as_raw();
        // SAFETY: The device is valid (type invariant); its namespace lives as long as it.
        let net = unsafe { bindings::dev_net(dev) };
        match u32::from(addr.family()) {
            bindings::AF_INET => {
                // SAFETY: The family says the address is a `sockaddr_in` (type invariant of
                // `SockAddr`).
                let ip = unsafe {
                    (*addr.as_raw().cast::<bindings::sockaddr_in>())
                        .sin_addr
                        .s_addr
                };
                // SAFETY: The device is valid; a non-null result holds a reference.
                let in_dev = unsafe { bindings::in_dev_get(dev) };
                if in_dev.is_null() {
                    return false;
                }
                // SAFETY: `net` and the referenced `in_dev` are valid for the call, and the
                // RCU read lock its address list needs is held.
                let found = unsafe {
                    bindings::inet_confirm_addr(
                        net,
                        in_dev,
                        0,
                        ip,
                        bindings::rt_scope_t_RT_SCOPE_HOST as _,
                    )
                };
                // SAFETY: Releases the reference `in_dev_get` took.
                unsafe { bindings::in_dev_put(in_dev) };
                found != 0
            }
            bindings::AF_INET6 => {
                // SAFETY: The family says the address is a `sockaddr_in6` (type invariant of
                // `SockAddr`).
                let ip = unsafe { &(*addr.as_raw().cast::<bindings::sockaddr_in6>()).sin6_addr };
                // SAFETY: `net`, `ip` and the device are valid for the call; 1 asks for an
                // address of this device only.
                unsafe { bindings::ipv6_chk_addr(net, ip, dev, 1) != 0 }
            }
            _ => false,
        }
    }

    /// The device this one is enslaved to (a bond, a team, a bridge or a VRF), if any (C:
    /// `netdev_master_upper_dev_get_rcu`): valid while `_rcu` is held.
    #[inline]
    pub fn master_upper<'a>(&'a self, _rcu: &'a rcu::Guard) -> Option<&'a NetDevice> {
        // SAFETY: The device is valid (type invariant), and the RCU read lock is held.
        let master = unsafe { bindings::netdev_master_upper_dev_get_rcu(self.as_raw()) };
        // SAFETY: The core unlinks an upper device (RCU-safely) before it unregisters it and
        // waits a grace period before freeing it: valid while the read lock, held before
        // this call, is held.
        (!master.is_null()).then(|| unsafe { NetDevice::from_raw(master) })
    }

    /// Whether this is an L3 master device, a VRF (C: `netif_is_l3_master`).
    #[inline]
    pub fn is_l3_master(&self) -> bool {
        // SAFETY: The device is valid; its private flags are read as C reads them, without a
        // lock.
        unsafe { bindings::netif_is_l3_master(self.as_raw()) }
    }

    /// The first device above this one, at any level, depth first, for which `pred` holds
    /// (C: `netdev_walk_all_upper_dev_rcu`): valid while `_rcu` is held. `pred` runs under
    /// RCU, so it must not sleep.
    pub fn find_upper<'a, F: FnMut(&NetDevice) -> bool>(
        &'a self,
        _rcu: &'a rcu::Guard,
        pred: F,
    ) -> Option<&'a NetDevice> {
        struct Walk<F> {
            pred: F,
            found: *mut bindings::net_device,
        }
        /// # Safety
        ///
        /// `data` of `priv_` must point to a `Walk<F>` nothing else uses during the call, and
        /// `upper` to a device valid under the RCU read lock the walk's caller holds.
        unsafe extern "C" fn visit<F: FnMut(&NetDevice) -> bool>(
            upper: *mut bindings::net_device,
            priv_: *mut bindings::netdev_nested_priv,
        ) -> c_int {
            // SAFETY: Per the safety requirements, `data` is our `Walk<F>`, used by us alone.
            let walk = unsafe { &mut *(*priv_).data.cast::<Walk<F>>() };
            // SAFETY: `upper` is valid for the call (the safety requirements).
            let dev = unsafe { NetDevice::from_raw(upper) };
            if (walk.pred)(dev) {
                walk.found = upper;
                // Non-zero stops the walk.
                1
            } else {
                0
            }
        }
        let mut walk = Walk {
            pred,
            found: core::ptr::null_mut(),
        };
        let mut priv_ = bindings::netdev_nested_priv {
            flags: 0,
            data: core::ptr::addr_of_mut!(walk).cast(),
        };
        // SAFETY: The device is valid and the RCU read lock is held; `visit` is called with
        // `priv_`, whose `data` is `walk`, of the type `visit` is instantiated for; both
        // outlive the call.
        unsafe {
            bindings::netdev_walk_all_upper_dev_rcu(self.as_raw(), Some(visit::<F>), &mut priv_)
        };
        // SAFETY: An upper device the walk passed is valid while the read lock is held (as
        // for `master_upper`).
        (!walk.found.is_null()).then(|| unsafe { NetDevice::from_raw(walk.found) })
    }
}

/// A socket address (`struct sockaddr`), borrowed from C.
///
/// # Invariants
///
/// The memory behind it is as large as its family's address structure (`sockaddr_in`,
/// `sockaddr_in6`, ...), and valid for the lifetime of the reference.
#[repr(transparent)]
pub struct SockAddr(Opaque<bindings::sockaddr>);

impl SockAddr {
    /// # Safety
    ///
    /// `ptr` must point to a socket address valid for `'a` and as large as its family's
    /// address structure.
    #[inline]
    pub unsafe fn from_raw<'a>(ptr: *const bindings::sockaddr) -> &'a Self {
        // SAFETY: `SockAddr` is `repr(transparent)`; validity is the caller's guarantee.
        unsafe { &*ptr.cast() }
    }

    fn as_raw(&self) -> *const bindings::sockaddr {
        self.0.get()
    }

    /// The address family (`AF_INET`, `AF_INET6`, ...).
    #[inline]
    pub fn family(&self) -> u16 {
        // SAFETY: Valid by the type invariant.
        unsafe { (*self.as_raw()).sa_family }
    }
}

// SAFETY: `dev_hold` and `dev_put` keep the device allocated while a reference exists,
// whatever the state of its registration.
unsafe impl AlwaysRefCounted for NetDevice {
    fn inc_ref(&self) {
        // SAFETY: The existence of `&self` proves the count is non-zero.
        unsafe { bindings::dev_hold(self.as_raw()) };
    }

    unsafe fn dec_ref(obj: NonNull<Self>) {
        // SAFETY: The caller gives up one reference, so the device is valid until this call.
        unsafe { bindings::dev_put(obj.cast().as_ptr()) };
    }
}

/// The device being set up before registration (`setup` callback of `alloc_netdev`): the
/// only place where its type, sizes and flags are written.
///
/// # Invariants
///
/// The device is being allocated or set up before registration: nobody but the holder of
/// the `&mut Setup` reads or writes it meanwhile. It is lent out only during the set-up that
/// precedes a registration ([`Registration::new`], [`super::link::LinkKind::create`], a new
/// link): the device is registered, or freed unregistered, before that call returns.
#[repr(transparent)]
pub struct Setup<T: Operations>(NetDevice, PhantomData<T>);

impl<T: Operations> Setup<T> {
    fn raw(&mut self) -> *mut bindings::net_device {
        self.0.as_raw()
    }

    /// The C structure, ours alone while the device is set up.
    fn fields(&mut self) -> &mut bindings::net_device {
        // SAFETY: The device is valid and nobody else accesses it (type invariant), for as
        // long as `self` is borrowed.
        unsafe { &mut *self.raw() }
    }

    /// The hardware type (`ARPHRD_*`).
    #[inline]
    pub fn set_type(&mut self, ty: u16) {
        self.fields().type_ = ty;
    }

    /// Room the stack reserves in front of packets for the link-layer header.
    #[inline]
    pub fn set_hard_header_len(&mut self, len: u16) {
        self.fields().hard_header_len = len;
    }

    /// The length of hardware addresses; at most 32 (`MAX_ADDR_LEN`).
    pub fn set_addr_len(&mut self, len: u8) -> Result {
        if usize::from(len) > bindings::MAX_ADDR_LEN as usize {
            return Err(EINVAL);
        }
        self.fields().addr_len = len;
        Ok(())
    }

    /// The initial MTU and the range user space may set.
    pub fn set_mtu(&mut self, mtu: u32, min: u32, max: u32) -> Result {
        if !(min <= mtu && mtu <= max) {
            return Err(EINVAL);
        }
        let dev = self.fields();
        dev.mtu = mtu;
        dev.min_mtu = min;
        dev.max_mtu = max;
        Ok(())
    }

    /// Interface flags (`IFF_*`).
    #[inline]
    pub fn set_flags(&mut self, flags: u32) {
        self.fields().flags = flags;
    }

    /// Keeps each packet's route attached until `start_xmit`, which the core otherwise
    /// drops early: a driver that reports path MTU problems to the stack
    /// ([`SkBuff::report_too_big`]) needs it.
    #[inline]
    pub fn keep_dst(&mut self) {
        // SAFETY: The device is being set up by us alone.
        unsafe { bindings::netif_keep_dst(self.raw()) };
    }

    /// Offers scatter-gather: packets may come with page fragments, which the driver sends
    /// without gathering them first. On by default, switchable with `ethtool -K DEV sg`.
    #[inline]
    pub fn set_scatter_gather(&mut self) {
        let dev = self.fields();
        dev.hw_features |= bindings::NETIF_F_SG;
        dev.features |= bindings::NETIF_F_SG;
    }

    /// Refuses VLAN devices on top (`ip link add ... type vlan` fails with `EOPNOTSUPP`): for
    /// link layers whose frames have no room for an 802.1Q tag. Fixed for the device's
    /// life.
    #[inline]
    pub fn set_vlan_challenged(&mut self) {
        self.fields().features |= bindings::NETIF_F_VLAN_CHALLENGED;
    }

    /// Which port of its hardware the device is (`dev_port`, from 0), for devices that share
    /// one parent: udev names them apart by it. Also set as `dev_id`, which older tools read.
    #[inline]
    pub fn set_dev_port(&mut self, port: u16) {
        let dev = self.fields();
        dev.dev_port = port;
        dev.dev_id = port;
    }

    /// Makes `parent` the device's parent (`SET_NETDEV_DEV`): the hardware it belongs to,
    /// which `/sys/class/net/<name>/device` links to and udev names the interface after.
    #[inline]
    pub fn set_parent(&mut self, parent: &crate::device::Device) {
        // The core takes a reference to the parent when it registers the device, which
        // happens while `parent` is still borrowed (type invariant); an unregistered device
        // is freed without reading it.
        self.fields().dev.parent = parent.as_raw();
    }

    /// How long the transmit queue may stay stopped before [`Operations::tx_timeout`] is
    /// called (the core's default is 5 s).
    #[inline]
    pub fn set_watchdog_timeout(&mut self, ms: u32) {
        let jiffies = crate::time::msecs_to_jiffies(ms);
        self.fields().watchdog_timeo = c_int::try_from(jiffies).unwrap_or(c_int::MAX);
    }

    /// Length of the transmit queue in packets.
    #[inline]
    pub fn set_tx_queue_len(&mut self, len: u32) {
        self.fields().tx_queue_len = len;
    }

    /// The broadcast address (`addr_len` bytes at most 32).
    pub fn set_broadcast(&mut self, addr: &[u8]) -> Result {
        self.fields()
            .broadcast
            .get_mut(..addr.len())
            .ok_or(EINVAL)?
            .copy_from_slice(addr);
        Ok(())
    }

    /// Builds and parses the device's link-layer headers with `H` (`header_ops`).
    #[inline]
    pub fn set_header_ops<H: super::header::Operations>(&mut self) {
        self.fields().header_ops = &HeaderAdapter::<H>::OPS;
    }

    /// Answers ethtool with `T`'s [`super::ethtool::Operations`] (`ethtool_ops`).
    #[inline]
    pub fn set_ethtool_ops(&mut self)
    where
        T: super::ethtool::Operations,
    {
        self.fields().ethtool_ops = &EthtoolAdapter::<T>::OPS;
    }
}

/// The device's set-up as a registration completes it (the `configure` argument of
/// [`Registration::new`], [`super::link::LinkKind::create`] and
/// [`super::link::NewLink::register`]): what [`Setup`] allows, and its NAPI contexts, which
/// only a registration, which deletes them on failure, may add.
///
/// # Invariants
///
/// As for [`Setup`]; in addition the device is being registered by [`Adapter::register`],
/// which deletes its contexts if it fails.
#[repr(transparent)]
pub struct Configure<T: Operations>(Setup<T>);

impl<T: Operations> core::ops::Deref for Configure<T> {
    type Target = Setup<T>;

    #[inline]
    fn deref(&self) -> &Setup<T> {
        &self.0
    }
}

impl<T: Operations> core::ops::DerefMut for Configure<T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut Setup<T> {
        &mut self.0
    }
}

impl<T: Operations> Configure<T> {
    /// Adds `napi` to the device, which keeps it until it is released: enabled while the
    /// interface is up, its poll function borrowing the device's data.
    #[inline]
    pub fn add_napi<P: Poll<Device = T>>(&mut self, napi: NapiContext<P>) {
        let raw = self.0.raw();
        // SAFETY: The device was allocated for `T` = `P::Device` and is ours alone, not
        // registered (type invariant of `Setup`); the registration under way completes it
        // or deletes its contexts (type invariant).
        unsafe { napi.add(raw) };
    }
}

/// Counters reported to user space (`struct rtnl_link_stats64`).
#[repr(transparent)]
pub struct Stats64(bindings::rtnl_link_stats64);

impl Stats64 {
    /// Packets and bytes received.
    #[inline]
    pub fn set_rx(&mut self, packets: u64, bytes: u64) {
        self.0.rx_packets = packets;
        self.0.rx_bytes = bytes;
    }

    /// Packets and bytes sent.
    #[inline]
    pub fn set_tx(&mut self, packets: u64, bytes: u64) {
        self.0.tx_packets = packets;
        self.0.tx_bytes = bytes;
    }

    /// Receive errors and drops.
    #[inline]
    pub fn set_rx_errors(&mut self, errors: u64, dropped: u64) {
        self.0.rx_errors = errors;
        self.0.rx_dropped = dropped;
    }

    /// Transmit errors and drops.
    #[inline]
    pub fn set_tx_errors(&mut self, errors: u64, dropped: u64) {
        self.0.tx_errors = errors;
        self.0.tx_dropped = dropped;
    }

    /// Multicast packets received.
    #[inline]
    pub fn set_multicast(&mut self, packets: u64) {
        self.0.multicast = packets;
    }
}

const IFNAMSIZ: usize = bindings::IFNAMSIZ as usize;
const MAX_ADDR_LEN: usize = bindings::MAX_ADDR_LEN as usize;

/// A copy of a device's name ([`NetDevice::name`]).
#[derive(Clone, Copy)]
pub struct IfName([u8; IFNAMSIZ]);

impl IfName {
    /// The name's bytes, without the NUL.
    #[inline]
    pub fn as_bytes(&self) -> &[u8] {
        self.as_c_str().as_bytes()
    }

    /// The name as a C string.
    #[inline]
    pub fn as_c_str(&self) -> &CStr {
        // The last byte is 0, so there is a first NUL.
        let len = self.0.iter().position(|&b| b == 0).unwrap_or(IFNAMSIZ - 1);
        CStr::from_bytes_with_nul(&self.0[..=len]).unwrap_or(crate::c_str!(""))
    }
}

impl core::fmt::Display for IfName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self.as_c_str(), f)
    }
}

/// A copy of a device's hardware address ([`NetDevice::dev_addr`]).
#[derive(Clone, Copy)]
pub struct DevAddr {
    bytes: [u8; MAX_ADDR_LEN],
    len: usize,
}

impl core::ops::Deref for DevAddr {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        self.bytes.get(..self.len).unwrap_or(&[])
    }
}

/// The multicast hardware addresses of a device (`dev->mc`), readable while the core holds
/// the device's address lock, as in [`Operations::set_rx_mode`].
///
/// # Invariants
///
/// The address list of `dev` is locked (`netif_addr_lock`) for `'a`.
pub struct McAddrs<'a> {
    dev: &'a NetDevice,
}

impl McAddrs<'_> {
    /// How many addresses the list holds (`netdev_mc_count`).
    #[inline]
    pub fn len(&self) -> usize {
        // SAFETY: The list is locked for our lifetime (type invariant), so its count is
        // stable and may be read.
        let count = unsafe { (*self.dev.as_raw()).mc.count };
        usize::try_from(count).unwrap_or(0)
    }

    /// Whether the list is empty.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Calls `f` with each address (`addr_len` bytes each).
    pub fn for_each(&self, mut f: impl FnMut(&[u8])) {
        let raw = self.dev.as_raw();
        let len = self.dev.addr_len();
        // SAFETY: The device is valid; only the address of its list head is taken.
        let head = unsafe { core::ptr::addr_of_mut!((*raw).mc.list) };
        // SAFETY: The address list is locked for our lifetime (type invariant): its links
        // stay as they are.
        let mut node = unsafe { (*head).next };
        while node != head {
            // SAFETY: The nodes of the list are the `list` members of `netdev_hw_addr`
            // entries.
            let ha = unsafe { crate::container_of!(node, bindings::netdev_hw_addr, list) };
            // SAFETY: `ha` is an entry of the locked list, unchanged while it is locked.
            let addr = unsafe { &(*ha).addr };
            if let Some(addr) = addr.get(..len) {
                f(addr);
            }
            // SAFETY: As for the head's link.
            node = unsafe { (*node).next };
        }
    }
}

/// What `start_xmit` did with a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TxResult {
    /// The packet was taken (sent, queued or dropped and counted).
    Ok,
}

/// Operations of a network device (`struct net_device_ops`) and its set-up.
#[vtable]
pub trait Operations: Sized + 'static {
    /// Per-device driver data, reachable from every callback.
    type Data: ForeignOwnable + Send + Sync;

    /// Sets the device's type, sizes, flags and its other tables of operations, as it is
    /// allocated.
    fn setup(dev: &mut Setup<Self>);

    /// The interface is brought up, under RTNL.
    fn open(
        dev: &NetDevice,
        data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        rtnl: &Rtnl,
    ) -> Result;

    /// The interface is brought down, under RTNL.
    fn stop(
        dev: &NetDevice,
        data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        rtnl: &Rtnl,
    ) -> Result;

    /// Transmits `skb`, which the driver now owns.
    fn start_xmit(
        skb: SkBuff,
        dev: &NetDevice,
        data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
    ) -> TxResult;

    /// The transmit queue has stayed stopped longer than the watchdog allows
    /// ([`Setup::set_watchdog_timeout`]): a send is stuck. Called from the watchdog timer
    /// (atomic context); recovery belongs in process context.
    fn tx_timeout(_dev: &NetDevice, _data: <Self::Data as ForeignOwnable>::Borrowed<'_>) {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// The index of the device this one sends through (`ndo_get_iflink`), which `ip link`
    /// shows as `NAME@LINK` and netlink as `IFLA_LINK`; the device's own index for a device
    /// on no other. Called under RCU, maybe without RTNL: must not sleep.
    fn get_iflink(_dev: &NetDevice, _data: <Self::Data as ForeignOwnable>::Borrowed<'_>) -> i32 {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Takes a new MTU (already within the device's range): returns the MTU the device runs
    /// at, which may be lower than the one asked for (a link whose fabric carries less for
    /// now), never higher.
    fn change_mtu(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _new_mtu: u32,
    ) -> Result<u32> {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Takes `addr` (`addr_len` bytes) as the device's hardware address (`ip link set NAME
    /// address ADDR`, under RTNL): on `Ok` the device has it, and the core tells the stack.
    /// Only asked while the device is down: while it is up the core's caller gets `EBUSY`
    /// (no live address change).
    fn set_address(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _rtnl: &Rtnl,
        _addr: &[u8],
    ) -> Result {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// The interface's own sysfs files, served by [`Operations::attribute_show`] and
    /// [`Operations::attribute_store`] with their index in this list.
    const ATTRIBUTES: &'static [Attribute] = &[];

    /// Writes the content of file `index` of [`Operations::ATTRIBUTES`] (process context).
    fn attribute_show(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _index: usize,
        _text: &mut AttributeText<'_>,
    ) -> Result {
        Err(EIO)
    }

    /// Takes a write of `input` to file `index` of [`Operations::ATTRIBUTES`] (process
    /// context, without RTNL: see [`super::rtnl::RtnlGuard::try_lock`]).
    fn attribute_store(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _index: usize,
        _input: &[u8],
    ) -> Result {
        Err(EIO)
    }

    /// Whether file `index` of [`Operations::ATTRIBUTES`] appears on `dev`, asked once as
    /// the device is registered.
    fn attribute_visible(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _index: usize,
    ) -> bool {
        true
    }

    /// The multicast address list or the flags changed (`ndo_set_rx_mode`). Runs in atomic
    /// context with the address lists locked: copy what is needed from `mc` and finish in
    /// process context.
    fn set_rx_mode(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _mc: &McAddrs<'_>,
    ) {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Fills the interface counters.
    fn get_stats64(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _stats: &mut Stats64,
    ) {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }
}

pub(crate) struct Adapter<T: Operations>(PhantomData<T>);

impl<T: Operations> Adapter<T> {
    const OPS: bindings::net_device_ops = bindings::net_device_ops {
        ndo_open: Some(Self::open_callback),
        ndo_stop: Some(Self::stop_callback),
        ndo_start_xmit: Some(Self::start_xmit_callback),
        ndo_change_mtu: if T::HAS_CHANGE_MTU {
            Some(Self::change_mtu_callback)
        } else {
            None
        },
        ndo_set_mac_address: if T::HAS_SET_ADDRESS {
            Some(Self::set_address_callback)
        } else {
            None
        },
        ndo_get_stats64: if T::HAS_GET_STATS64 {
            Some(Self::get_stats64_callback)
        } else {
            None
        },
        ndo_set_rx_mode: if T::HAS_SET_RX_MODE {
            Some(Self::set_rx_mode_callback)
        } else {
            None
        },
        ndo_tx_timeout: if T::HAS_TX_TIMEOUT {
            Some(Self::tx_timeout_callback)
        } else {
            None
        },
        ndo_get_iflink: if T::HAS_GET_IFLINK {
            Some(Self::get_iflink_callback)
        } else {
            None
        },
        // SAFETY: The other members are optional callbacks and integers; zero is `None`/0.
        ..unsafe { core::mem::MaybeUninit::zeroed().assume_init() }
    };

    /// # Safety
    ///
    /// `dev` must be a device set up by [`Adapter::register`] and not yet released (any
    /// device the core passes to one of our callbacks).
    #[inline]
    pub(crate) unsafe fn data<'a>(
        dev: *mut bindings::net_device,
    ) -> <T::Data as ForeignOwnable>::Borrowed<'a> {
        // SAFETY: Such a device's private area holds a `Private<T>`.
        let private = unsafe { Self::private(dev) };
        // SAFETY: `private` is valid; `data` is stored before registration and released
        // only after unregistration.
        let stored = unsafe { (*private).data };
        // SAFETY: `stored` came from `into_foreign` and is released only after the device
        // (see above), so it outlives `'a`.
        unsafe { T::Data::borrow(stored) }
    }

    /// The device a callback is given, with its data.
    ///
    /// # Safety
    ///
    /// As for [`Adapter::data`]; `dev` stays valid for `'a`.
    #[inline]
    pub(crate) unsafe fn ours<'a>(
        dev: *mut bindings::net_device,
    ) -> (&'a NetDevice, <T::Data as ForeignOwnable>::Borrowed<'a>) {
        // SAFETY: `dev` is a valid device for `'a` (the caller's guarantee).
        let ndev = unsafe { NetDevice::from_raw(dev) };
        // SAFETY: Set up by `register` and not yet released (the caller's guarantee).
        let data = unsafe { Self::data(dev) };
        (ndev, data)
    }

    /// # Safety
    ///
    /// Called by the networking core only, for a device set up by [`Adapter::register`].
    unsafe extern "C" fn open_callback(dev: *mut bindings::net_device) -> c_int {
        from_result(|| {
            // SAFETY: The core passes a valid registered device of ours.
            let (ndev, data) = unsafe { Self::ours(dev) };
            // SAFETY: The core opens a device under RTNL, held for this call.
            let rtnl = unsafe { Rtnl::assume_held() };
            // SAFETY: The device is ours and being opened, so its NAPI contexts are added and
            // disabled.
            unsafe { napi::enable_all(dev) };
            if let Err(e) = T::open(ndev, data, rtnl) {
                // SAFETY: Enabled just above; `open` runs in process context.
                unsafe { napi::disable_all(dev) };
                return Err(e);
            }
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// As for `open_callback`.
    unsafe extern "C" fn stop_callback(dev: *mut bindings::net_device) -> c_int {
        from_result(|| {
            // SAFETY: The core passes a valid registered device of ours.
            let (ndev, data) = unsafe { Self::ours(dev) };
            // SAFETY: The core stops a device under RTNL, held for this call.
            let rtnl = unsafe { Rtnl::assume_held() };
            let ret = T::stop(ndev, data, rtnl);
            // SAFETY: The device is ours and up, so its NAPI contexts are enabled; `stop` runs
            // in process context. The core ignores a failing stop, so they are disabled
            // whatever `stop` returned.
            unsafe { napi::disable_all(dev) };
            ret?;
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// As for `open_callback`; `skb` is a valid skb the core hands over.
    unsafe extern "C" fn start_xmit_callback(
        skb: *mut bindings::sk_buff,
        dev: *mut bindings::net_device,
    ) -> bindings::netdev_tx_t {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Self::ours(dev) };
        // SAFETY: The core gives `skb` up to us.
        let skb = unsafe { SkBuff::from_raw(skb) };
        match T::start_xmit(skb, ndev, data) {
            TxResult::Ok => bindings::netdev_tx_NETDEV_TX_OK,
        }
    }

    /// # Safety
    ///
    /// As for `open_callback`; called under RTNL.
    unsafe extern "C" fn change_mtu_callback(
        dev: *mut bindings::net_device,
        new_mtu: c_int,
    ) -> c_int {
        from_result(|| {
            // SAFETY: The core passes a valid registered device of ours.
            let (ndev, data) = unsafe { Self::ours(dev) };
            let asked = u32::try_from(new_mtu).map_err(|_| EINVAL)?;
            let mtu = T::change_mtu(ndev, data, asked)?.min(asked);
            // SAFETY: The device is valid; no reference to its MTU is made, since lockless
            // readers read it meanwhile.
            let field = unsafe { core::ptr::addr_of_mut!((*dev).mtu) };
            // SAFETY: Under RTNL the MTU is ours to write; written whole, as `WRITE_ONCE`
            // writes it, for the readers.
            unsafe { core::ptr::write_volatile(field, mtu) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// As for `open_callback`; called under RTNL (`dev_set_mac_address`), with `sa` a
    /// socket address whose data holds `addr_len` initialised bytes: netlink's `do_setlink`
    /// allocates and fills that many, the `SIOCSIFHWADDR` ioctl refuses devices whose
    /// addresses do not fit its `struct sockaddr`, and in-kernel callers (team, bonding)
    /// pass a `sockaddr_storage`.
    unsafe extern "C" fn set_address_callback(
        dev: *mut bindings::net_device,
        sa: *mut c_void,
    ) -> c_int {
        from_result(|| {
            // SAFETY: The core passes a valid registered device of ours.
            let (ndev, data) = unsafe { Self::ours(dev) };
            // SAFETY: The core calls this under RTNL, held for the call.
            let rtnl = unsafe { Rtnl::assume_held() };
            // SAFETY: The device is valid and RTNL is held, which serialises its flags.
            let flags = unsafe { bindings::dev_get_flags(dev) };
            if flags & bindings::net_device_flags_IFF_UP != 0 {
                return Err(EBUSY);
            }
            let sa = sa.cast::<bindings::sockaddr>();
            // SAFETY: `sa` is valid; no reference to its data (`sa_data`, the union after
            // `sa_family`) is made before the slice below.
            let data_ptr = unsafe { core::ptr::addr_of!((*sa).__bindgen_anon_1) }.cast::<u8>();
            // SAFETY: The caller's buffer holds `addr_len` initialised bytes from `sa_data`
            // on (the safety requirements), which nothing writes during the call.
            let addr = unsafe { core::slice::from_raw_parts(data_ptr, ndev.addr_len()) };
            T::set_address(ndev, data, rtnl, addr)?;
            // SAFETY: The device is valid, RTNL is held, and `addr` has `addr_len` bytes.
            unsafe { bindings::dev_addr_set(dev, addr.as_ptr()) };
            Ok(0)
        })
    }

    /// # Safety
    ///
    /// As for `open_callback`; the core holds the device's address lock (`netif_addr_lock`).
    unsafe extern "C" fn set_rx_mode_callback(dev: *mut bindings::net_device) {
        // SAFETY: The core passes a valid registered device of ours, with its address lists
        // locked for the call.
        let (ndev, data) = unsafe { Self::ours(dev) };
        // INVARIANT: The core holds the address lock for the whole call.
        let mc = McAddrs { dev: ndev };
        T::set_rx_mode(ndev, data, &mc);
    }

    /// # Safety
    ///
    /// As for `open_callback`; called from the watchdog timer.
    unsafe extern "C" fn tx_timeout_callback(
        dev: *mut bindings::net_device,
        _txqueue: crate::ffi::c_uint,
    ) {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Self::ours(dev) };
        T::tx_timeout(ndev, data);
    }

    /// # Safety
    ///
    /// As for `open_callback`; called under RCU.
    unsafe extern "C" fn get_iflink_callback(dev: *const bindings::net_device) -> c_int {
        // The device is only read through (`NetDevice` gives no `&mut` access).
        let dev = dev.cast_mut();
        // SAFETY: The core passes a valid registered device of ours.
        let ndev = unsafe { NetDevice::from_raw(dev) };
        // SAFETY: As above: set up by `register`, not yet released.
        let data = unsafe { Self::data(dev) };
        T::get_iflink(ndev, data)
    }

    /// # Safety
    ///
    /// As for `open_callback`; `stats` is valid for writes.
    unsafe extern "C" fn get_stats64_callback(
        dev: *mut bindings::net_device,
        stats: *mut bindings::rtnl_link_stats64,
    ) {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Self::ours(dev) };
        // SAFETY: The core passes a writable, zeroed counter block for the call alone;
        // `Stats64` is `repr(transparent)` over it.
        let stats = unsafe { &mut *stats.cast::<Stats64>() };
        T::get_stats64(ndev, data, stats);
    }

    /// # Safety
    ///
    /// Called by `alloc_netdev_mqs` only, on the device it is allocating.
    pub(crate) unsafe extern "C" fn setup_callback(dev: *mut bindings::net_device) {
        // SAFETY: The device is valid and not yet visible to anyone but us; `Setup` is
        // `repr(transparent)` over `NetDevice`.
        let setup = unsafe { &mut *dev.cast::<Setup<T>>() };
        T::setup(setup);
    }
}

/// What the private area of a device of `T` holds, from its set-up until the core releases
/// it after unregistration ([`Adapter::release_callback`]).
///
/// # Invariants
///
/// `data` is the foreign representation of a `T::Data`.
struct Private<T: Operations> {
    data: *const c_void,
    /// The sysfs files; installed as the device's first group.
    _attributes: Option<KBox<AttributeTable<T>>>,
    /// The kind whose operations `rtnl_link_ops` points to: its memory kept until the device
    /// is released (its registration is the module's: see [`super::link`]).
    link_kind: Option<Arc<LinkKind<T>>>,
    /// Whether a [`Registration`] owns the device: only dropping it unregisters the device,
    /// never `ip link del`.
    owned: bool,
}

/// Who unregisters a device.
pub(crate) enum Owner<T: Operations> {
    /// A [`Registration`], when dropped.
    Registration,
    /// The core (`ip link del`), or the driver through a [`super::link::LinkDevice`]; the
    /// device is of this kind.
    Core(Arc<LinkKind<T>>),
}

impl<T: Operations> Adapter<T> {
    /// The private area of `dev`.
    ///
    /// # Safety
    ///
    /// `dev` must have been set up by [`Adapter::register`].
    #[inline]
    unsafe fn private(dev: *mut bindings::net_device) -> *mut Private<T> {
        // `netdev_priv`, without the call: the private area is the device's trailing `priv`
        // array, sized for `Private<T>` and aligned by the core to `NETDEV_ALIGN`.
        const OFFSET: usize = core::mem::offset_of!(bindings::net_device, priv_);
        // SAFETY: `dev` is a valid device (the caller's guarantee), allocated with its
        // private area, so the offset stays within the allocation.
        unsafe { dev.cast::<u8>().add(OFFSET).cast() }
    }

    /// Bytes of private area a device of `T` needs.
    pub(crate) const PRIV_SIZE: usize = core::mem::size_of::<Private<T>>();

    /// Completes the set-up of the unregistered device `raw` with `T`'s operations,
    /// `hw_addr` and `data`, and registers it. From then on the core owns the device:
    /// it frees it after unregistration and then releases what it holds of ours
    /// ([`Adapter::release_callback`]).
    ///
    /// # Safety
    ///
    /// `raw` must be a device allocated with a private area of [`Adapter::PRIV_SIZE`] bytes
    /// and set up by [`Adapter::setup_callback`], not registered, used by nobody else. On
    /// failure it is left unregistered and holding nothing of ours, for the caller to free.
    pub(crate) unsafe fn register(
        raw: *mut bindings::net_device,
        _rtnl: &Rtnl,
        hw_addr: &[u8],
        data: T::Data,
        owner: Owner<T>,
        configure: impl FnOnce(&mut Configure<T>) -> Result,
    ) -> Result {
        let (link_kind, owned) = match owner {
            Owner::Registration => (None, true),
            Owner::Core(kind) => (Some(kind), false),
        };
        let attributes = AttributeTable::<T>::new()?;
        // SAFETY: `raw` is valid and unregistered: we are its only user; `Configure` is
        // `repr(transparent)` over `Setup`, itself over it.
        // INVARIANT: Nobody else accesses the device until it is registered below.
        // INVARIANT: Registered here, which deletes the device's contexts on failure.
        let configured = configure(unsafe { &mut *raw.cast::<Configure<T>>() });
        // Read after `configure`, which may set it (`Setup::set_addr_len`).
        // SAFETY: `raw` is valid and unregistered.
        let addr_len = usize::from(unsafe { (*raw).addr_len });
        if hw_addr.len() != addr_len || configured.is_err() {
            // SAFETY: The device is ours alone and unregistered; its contexts were added by
            // `configure` and never enabled.
            unsafe { napi::release_all(raw) };
            return Err(configured.err().unwrap_or(EINVAL));
        }
        // SAFETY: `raw` is valid and unregistered: we are its only user; `hw_addr` has
        // `addr_len` bytes.
        unsafe { bindings::dev_addr_set(raw, hw_addr.as_ptr()) };
        {
            // SAFETY: `raw` is valid and unregistered: nobody else accesses it while
            // `fields` lives.
            let fields = unsafe { &mut *raw };
            fields.netdev_ops = &Adapter::<T>::OPS;
            if let Some(table) = &attributes {
                // The first group is the driver's; the core adds its own after it.
                fields.sysfs_groups[0] = table.group();
            }
            if let Some(kind) = &link_kind {
                fields.rtnl_link_ops = kind.as_raw();
            }
        }
        // SAFETY: The private area of `raw` is sized for `Private<T>` (safety requirement).
        let slot = unsafe { Self::private(raw) };
        // INVARIANT: `data` comes from `into_foreign`.
        // SAFETY: `slot` is valid for writes, aligned, and holds nothing yet.
        unsafe {
            slot.write(Private {
                data: data.into_foreign(),
                _attributes: attributes,
                link_kind,
                owned,
            })
        };
        // SAFETY: The device is fully set up and RTNL is held.
        if let Err(e) = to_result(unsafe { bindings::register_netdevice(raw) }) {
            // SAFETY: Registration failed and was undone: a device a notifier refused after
            // it became visible was unregistered again, which waits for the callbacks in
            // flight. So none of ours runs any more and the core keeps no reference to our
            // operations or attribute group.
            unsafe { (*raw).sysfs_groups[0] = core::ptr::null() };
            // SAFETY: As above; what was stored above is taken back, once.
            unsafe { Self::release(raw) };
            return Err(e);
        }
        // SAFETY: Registered under RTNL, which we still hold: nobody can have started to
        // unregister it, and the core reads this only when it does.
        unsafe { (*raw).needs_free_netdev = true };
        // SAFETY: As above.
        unsafe { (*raw).priv_destructor = Some(Self::release_callback) };
        Ok(())
    }

    /// Takes back what [`Adapter::register`] stored in the private area and drops it.
    ///
    /// # Safety
    ///
    /// `raw` must be a device set up by [`Adapter::register`] that no callback of ours
    /// runs on any more, and this is called once.
    unsafe fn release(raw: *mut bindings::net_device) {
        // SAFETY: Per the safety requirements the private area holds a `Private<T>`.
        let slot = unsafe { Self::private(raw) };
        // SAFETY: `slot` is valid and read (moved out) once.
        let private = unsafe { slot.read() };
        // SAFETY: The device's contexts were added by `Configure::add_napi` and are
        // disabled by `stop` or never enabled; no callback of ours runs any more.
        unsafe { napi::release_all(raw) };
        // SAFETY: By the invariant of `Private`, `data` came from `into_foreign`, and no
        // callback borrows it any more.
        drop(unsafe { T::Data::from_foreign(private.data) });
    }

    /// # Safety
    ///
    /// Called by the core only (`priv_destructor`), once a device set up by
    /// [`Adapter::register`] is unregistered and unused, before it frees it.
    unsafe extern "C" fn release_callback(dev: *mut bindings::net_device) {
        // SAFETY: Unregistered and unused: no callback of ours runs on it any more.
        unsafe { Self::release(dev) };
    }

    /// Whether a [`Registration`] owns `dev`.
    ///
    /// # Safety
    ///
    /// As for [`Adapter::data`].
    #[inline]
    pub(crate) unsafe fn owned(dev: *mut bindings::net_device) -> bool {
        // SAFETY: Per the safety requirements the private area holds a `Private<T>`.
        let private = unsafe { Self::private(dev) };
        // SAFETY: `private` is valid; `owned` is written only before registration.
        unsafe { (*private).owned }
    }
}

/// A registered network device with driver data `T::Data`; unregistered on drop, after
/// which the core frees it and releases the data.
///
/// # Invariants
///
/// `dev` was set up by [`Adapter::register`] as owned by us: it stays registered until we
/// drop it.
pub struct Registration<T: Operations> {
    dev: NonNull<bindings::net_device>,
    _ops: PhantomData<T>,
}

// SAFETY: The registration may be dropped from any thread in process context.
unsafe impl<T: Operations> Send for Registration<T> {}
// SAFETY: Shared access only gives `&NetDevice`, which is `Sync`.
unsafe impl<T: Operations> Sync for Registration<T> {}

impl<T: Operations> Registration<T> {
    /// Allocates a device named after `name` (`ib%d` picks the first free number), sets it up
    /// with [`Operations::setup`] and `hw_addr`, and registers it with `data`.
    ///
    /// `configure` completes the set-up with values known only at run time (the MTU of the
    /// port, for example) and adds the device's NAPI contexts ([`Configure::add_napi`]),
    /// before the device becomes visible.
    pub fn new(
        name: &CStr,
        hw_addr: &[u8],
        data: T::Data,
        configure: impl FnOnce(&mut Configure<T>) -> Result,
    ) -> Result<Self> {
        let dev = alloc::<T>(name, bindings::NET_NAME_ENUM)?;
        let raw = dev.as_ptr();
        let rtnl = RtnlGuard::lock();
        // SAFETY: Allocated just above for `T`; ours alone.
        let registered = unsafe {
            Adapter::<T>::register(raw, &rtnl, hw_addr, data, Owner::Registration, configure)
        };
        drop(rtnl);
        if let Err(e) = registered {
            // SAFETY: Allocated above, never registered, holding nothing of ours.
            unsafe { bindings::free_netdev(raw) };
            return Err(e);
        }
        // INVARIANT: set up by `register`, owned by us.
        Ok(Self {
            dev,
            _ops: PhantomData,
        })
    }

    /// Makes the device one of `kind` for `ip link` (changes and detailed listings reach
    /// its [`super::link::Operations`]).
    pub fn set_link_kind(&mut self, kind: Arc<LinkKind<T>>)
    where
        T: super::link::Operations,
    {
        let raw = self.dev.as_ptr();
        let _rtnl = RtnlGuard::lock();
        // SAFETY: The device is registered while we exist (type invariant); RTNL
        // serialises the readers of `rtnl_link_ops`. The private area keeps the kind alive
        // (below) until the device is released.
        unsafe { (*raw).rtnl_link_ops = kind.as_raw() };
        // SAFETY: Set up by `Adapter::register` (type invariant), so its private area is a
        // `Private<T>`.
        let private = unsafe { Adapter::<T>::private(raw) };
        // SAFETY: `private` is valid; only RTNL holders write `link_kind`, and we hold it.
        unsafe { (*private).link_kind = Some(kind) };
    }

    /// The device.
    #[inline]
    pub fn device(&self) -> &NetDevice {
        // SAFETY: By the type invariant the device is valid.
        unsafe { NetDevice::from_raw(self.dev.as_ptr()) }
    }
}

impl<T: Operations> Drop for Registration<T> {
    fn drop(&mut self) {
        let raw = self.dev.as_ptr();
        // SAFETY: By the type invariant the device is registered and nobody else
        // unregisters it. The core releases our data and frees the device when
        // `unregister_netdev` drops RTNL, before it returns.
        unsafe { bindings::unregister_netdev(raw) };
    }
}

/// Allocates a device of `T` named after `name`, set up by [`Operations::setup`].
pub(crate) fn alloc<T: Operations>(
    name: &CStr,
    assign: u32,
) -> Result<NonNull<bindings::net_device>> {
    // SAFETY: `name` is NUL-terminated; the setup callback is ours; one queue each way.
    let dev = unsafe {
        bindings::alloc_netdev_mqs(
            Adapter::<T>::PRIV_SIZE as c_int,
            name.as_char_ptr(),
            assign as u8,
            Some(Adapter::<T>::setup_callback),
            1,
            1,
        )
    };
    NonNull::new(dev).ok_or(ENOMEM)
}
