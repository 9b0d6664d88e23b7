// SPDX-License-Identifier: GPL-2.0

//! ethtool operations (`struct ethtool_ops`): `ethtool -i`, `-S`, `-c`/`-C` and the link
//! settings of `ethtool DEV` for the devices of a driver.
//!
//! C header: [`include/linux/ethtool.h`](srctree/include/linux/ethtool.h).
//!
//! A driver implements [`Operations`] for the type of its device operations and gives them
//! to its devices in their set-up ([`super::dev::Setup::set_ethtool_ops`]); each callback
//! borrows the device's data, as those of [`super::dev::Operations`] do. Operations left
//! out stay null: `ethtool` says they are not supported. The link state (`get_link`) is
//! always the carrier's.
//!
//! # Examples
//!
//! ```
//! use kernel::c_str;
//! use kernel::net::dev::{self, NetDevice, Setup};
//! use kernel::net::ethtool::{self, DrvInfo};
//! # use kernel::net::{rtnl::Rtnl, skb::SkBuff, dev::TxResult};
//! use kernel::prelude::*;
//!
//! struct Dummy;
//!
//! #[vtable]
//! impl dev::Operations for Dummy {
//!     type Data = ();
//!
//!     fn setup(dev: &mut Setup<Self>) {
//!         dev.set_ethtool_ops();
//!     }
//!     // ...
//! #   fn open(_dev: &NetDevice, _data: (), _rtnl: &Rtnl) -> Result { Ok(()) }
//! #   fn stop(_dev: &NetDevice, _data: (), _rtnl: &Rtnl) -> Result { Ok(()) }
//! #   fn start_xmit(skb: SkBuff, _dev: &NetDevice, _data: ()) -> TxResult {
//! #       drop(skb);
//! #       TxResult::Ok
//! #   }
//! }
//!
//! #[vtable]
//! impl ethtool::Operations for Dummy {
//!     fn get_drvinfo(_dev: &NetDevice, _data: (), info: &mut DrvInfo) {
//!         info.set_driver(c_str!("dummy"));
//!     }
//!
//!     const ETHTOOL_STATS: &'static [&'static CStr] = &[c_str!("rx_packets")];
//!
//!     fn get_ethtool_stats(_dev: &NetDevice, _data: (), values: &mut [u64]) {
//!         if let Some(rx_packets) = values.first_mut() {
//!             *rx_packets = 0;
//!         }
//!     }
//! }
//!
//! let reg = dev::Registration::<Dummy>::new(c_str!("rsdoc%d"), &[], (), |_| Ok(()))?;
//! drop(reg);
//! # Ok::<(), Error>(())
//! ```

use super::dev::{Adapter, NetDevice};
use crate::{
    bindings, build_error,
    error::{Error, Result},
    ffi::c_int,
    prelude::*,
    str::CStr,
    types::ForeignOwnable,
};
use core::marker::PhantomData;

/// Bytes of one counter name in `ethtool -S`, NUL included.
pub const STRING_LEN: usize = bindings::ETH_GSTRING_LEN as usize;

/// What `ethtool -i` shows of a device (`struct ethtool_drvinfo`).
#[repr(transparent)]
pub struct DrvInfo(bindings::ethtool_drvinfo);

/// Copies `s` into `dst`, cut to fit, NUL-terminated.
fn copy_str(dst: &mut [crate::ffi::c_char], s: &[u8]) {
    let n = s.len().min(dst.len().saturating_sub(1));
    for (d, &b) in dst.iter_mut().zip(&s[..n]) {
        *d = b as crate::ffi::c_char;
    }
    if let Some(end) = dst.get_mut(n) {
        *end = 0;
    }
}

impl DrvInfo {
    /// The driver's name.
    #[inline]
    pub fn set_driver(&mut self, s: &CStr) {
        copy_str(&mut self.0.driver, s.as_bytes());
    }

    /// The driver's version.
    #[inline]
    pub fn set_version(&mut self, s: &CStr) {
        copy_str(&mut self.0.version, s.as_bytes());
    }

    /// The firmware's version.
    #[inline]
    pub fn set_fw_version(&mut self, s: &[u8]) {
        copy_str(&mut self.0.fw_version, s);
    }

    /// Where the hardware sits (a bus address, or the name of the device carrying it).
    #[inline]
    pub fn set_bus_info(&mut self, s: &[u8]) {
        copy_str(&mut self.0.bus_info, s);
    }

    /// Where the hardware sits: the name of `dev`, the device the hardware is on (the bus
    /// address of a PCI function), as C drivers fill it in.
    pub fn set_bus_info_of(&mut self, dev: &crate::device::Device) {
        // SAFETY: `dev` is a valid device.
        let name = unsafe { bindings::dev_name(dev.as_raw()) };
        if name.is_null() {
            // A device not added yet may have no name: nothing to show.
            return;
        }
        // SAFETY: A non-null name is a NUL-terminated string that lives as long as the
        // device, which outlives this call.
        let name = unsafe { CStr::from_char_ptr(name) };
        copy_str(&mut self.0.bus_info, name.as_bytes());
    }
}

/// The link as `ethtool DEV` shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LinkSettings {
    /// Data rate in Mb/s; 0 when unknown.
    pub speed_mbps: u32,
    /// Whether both directions carry data at once.
    pub full_duplex: bool,
}

/// Interrupt coalescing of received packets (`ethtool -c`, `-C`): an event after
/// `rx_max_frames` packets or `rx_usecs` microseconds, whichever comes first.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Coalesce {
    /// `rx-usecs`.
    pub rx_usecs: u32,
    /// `rx-frames`.
    pub rx_max_frames: u32,
}

/// The ethtool operations of the devices of a driver (`struct ethtool_ops`).
#[vtable]
pub trait Operations: super::dev::Operations {
    /// Fills what `ethtool -i` shows (`ethtool_ops->get_drvinfo`).
    fn get_drvinfo(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _info: &mut DrvInfo,
    ) {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// The link's speed and duplex, as `ethtool DEV` shows them
    /// (`ethtool_ops->get_link_ksettings`; called under RTNL).
    fn get_link_settings(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
    ) -> Result<LinkSettings> {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// The receive coalescing in effect, for `ethtool -c` (`ethtool_ops->get_coalesce`).
    fn get_coalesce(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
    ) -> Result<Coalesce> {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Applies `ethtool -C DEV rx-usecs N rx-frames N` (`ethtool_ops->set_coalesce`; only
    /// offered with [`Operations::get_coalesce`]). The ethtool core refuses other
    /// parameters.
    fn set_coalesce(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _coalesce: Coalesce,
    ) -> Result {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }

    /// Names of the counters `ethtool -S` shows, each shorter than
    /// [`STRING_LEN`] bytes.
    const ETHTOOL_STATS: &'static [&'static CStr] = &[];

    /// Fills `values` (zeroed), one per name of [`Operations::ETHTOOL_STATS`]
    /// (`ethtool_ops->get_ethtool_stats`).
    fn get_ethtool_stats(
        _dev: &NetDevice,
        _data: <Self::Data as ForeignOwnable>::Borrowed<'_>,
        _values: &mut [u64],
    ) {
        build_error!(crate::error::VTABLE_DEFAULT_ERROR)
    }
}

pub(crate) struct EthtoolAdapter<T: Operations>(PhantomData<T>);

impl<T: Operations> EthtoolAdapter<T> {
    pub(crate) const OPS: bindings::ethtool_ops = bindings::ethtool_ops {
        get_drvinfo: if T::HAS_GET_DRVINFO {
            Some(Self::get_drvinfo_callback)
        } else {
            None
        },
        get_link: Some(bindings::ethtool_op_get_link),
        get_link_ksettings: if T::HAS_GET_LINK_SETTINGS {
            Some(Self::get_link_ksettings_callback)
        } else {
            None
        },
        // The ethtool core refuses every other parameter before calling `set_coalesce`.
        supported_coalesce_params: if T::HAS_GET_COALESCE {
            bindings::ETHTOOL_COALESCE_RX_USECS | bindings::ETHTOOL_COALESCE_RX_MAX_FRAMES
        } else {
            0
        },
        get_coalesce: if T::HAS_GET_COALESCE {
            Some(Self::get_coalesce_callback)
        } else {
            None
        },
        set_coalesce: if T::HAS_SET_COALESCE {
            Some(Self::set_coalesce_callback)
        } else {
            None
        },
        get_sset_count: if T::HAS_GET_ETHTOOL_STATS {
            Some(Self::get_sset_count_callback)
        } else {
            None
        },
        get_strings: if T::HAS_GET_ETHTOOL_STATS {
            Some(Self::get_strings_callback)
        } else {
            None
        },
        get_ethtool_stats: if T::HAS_GET_ETHTOOL_STATS {
            Some(Self::get_ethtool_stats_callback)
        } else {
            None
        },
        // SAFETY: The other members are optional callbacks and integers; zero is `None`/0.
        ..unsafe { core::mem::MaybeUninit::zeroed().assume_init() }
    };

    /// # Safety
    ///
    /// Called by the ethtool core only, for a registered device of ours, with `info` valid
    /// for writes.
    unsafe extern "C" fn get_drvinfo_callback(
        dev: *mut bindings::net_device,
        info: *mut bindings::ethtool_drvinfo,
    ) {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
        // SAFETY: The core passes a block writable by us alone for the call; `DrvInfo` is
        // `repr(transparent)` over it.
        let info = unsafe { &mut *info.cast::<DrvInfo>() };
        T::get_drvinfo(ndev, data, info);
    }

    /// # Safety
    ///
    /// Called by the ethtool core only, for a registered device of ours, with `cmd` valid
    /// for writes.
    unsafe extern "C" fn get_link_ksettings_callback(
        dev: *mut bindings::net_device,
        cmd: *mut bindings::ethtool_link_ksettings,
    ) -> c_int {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
        match T::get_link_settings(ndev, data) {
            Ok(link) => {
                // SAFETY: `cmd` is valid for writes; the core zeroed the link modes.
                let base = unsafe { &mut (*cmd).base };
                base.speed = link.speed_mbps;
                base.duplex = if link.full_duplex {
                    bindings::DUPLEX_FULL as u8
                } else {
                    bindings::DUPLEX_HALF as u8
                };
                base.port = bindings::PORT_OTHER as u8;
                base.autoneg = bindings::AUTONEG_DISABLE as u8;
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called by the ethtool core only, for a registered device of ours, with `coal` valid
    /// for writes.
    unsafe extern "C" fn get_coalesce_callback(
        dev: *mut bindings::net_device,
        coal: *mut bindings::ethtool_coalesce,
        _kernel_coal: *mut bindings::kernel_ethtool_coalesce,
        _extack: *mut bindings::netlink_ext_ack,
    ) -> c_int {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
        match T::get_coalesce(ndev, data) {
            Ok(c) => {
                // SAFETY: `coal` is valid for writes.
                let coal = unsafe { &mut *coal };
                coal.rx_coalesce_usecs = c.rx_usecs;
                coal.rx_max_coalesced_frames = c.rx_max_frames;
                0
            }
            Err(e) => e.to_errno(),
        }
    }

    /// # Safety
    ///
    /// Called by the ethtool core only, for a registered device of ours, with `coal` valid
    /// for reads.
    unsafe extern "C" fn set_coalesce_callback(
        dev: *mut bindings::net_device,
        coal: *mut bindings::ethtool_coalesce,
        _kernel_coal: *mut bindings::kernel_ethtool_coalesce,
        _extack: *mut bindings::netlink_ext_ack,
    ) -> c_int {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
        // SAFETY: The core passes a valid request, unchanged during the call.
        let coal = unsafe { &*coal };
        let wanted = Coalesce {
            rx_usecs: coal.rx_coalesce_usecs,
            rx_max_frames: coal.rx_max_coalesced_frames,
        };
        T::set_coalesce(ndev, data, wanted).map_or_else(Error::to_errno, |()| 0)
    }

    /// # Safety
    ///
    /// Called by the ethtool core only, for a registered device of ours.
    unsafe extern "C" fn get_sset_count_callback(
        _dev: *mut bindings::net_device,
        sset: c_int,
    ) -> c_int {
        if sset == bindings::ethtool_stringset_ETH_SS_STATS as c_int {
            T::ETHTOOL_STATS.len() as c_int
        } else {
            -(bindings::EOPNOTSUPP as c_int)
        }
    }

    /// # Safety
    ///
    /// Called by the ethtool core only, with `data` valid for writes of as many
    /// [`STRING_LEN`]-byte names as `get_sset_count` announced for `sset`.
    unsafe extern "C" fn get_strings_callback(
        _dev: *mut bindings::net_device,
        sset: u32,
        data: *mut u8,
    ) {
        if sset != bindings::ethtool_stringset_ETH_SS_STATS {
            return;
        }
        let names = T::ETHTOOL_STATS;
        // SAFETY: The core sized `data` from `get_sset_count` for this set.
        let out = unsafe { core::slice::from_raw_parts_mut(data, names.len() * STRING_LEN) };
        out.fill(0);
        let mut at = 0;
        for name in names {
            let bytes = name.as_bytes();
            let n = bytes.len().min(STRING_LEN - 1);
            if let (Some(dst), Some(src)) = (out.get_mut(at..at + n), bytes.get(..n)) {
                dst.copy_from_slice(src);
            }
            at += STRING_LEN;
        }
    }

    /// # Safety
    ///
    /// Called by the ethtool core only, for a registered device of ours, with `values` valid
    /// for writes of as many counters as `get_sset_count` announced.
    unsafe extern "C" fn get_ethtool_stats_callback(
        dev: *mut bindings::net_device,
        _stats: *mut bindings::ethtool_stats,
        values: *mut u64,
    ) {
        // SAFETY: The core passes a valid registered device of ours.
        let (ndev, data) = unsafe { Adapter::<T>::ours(dev) };
        // SAFETY: The core passes room for one value per counter name, ours for the call.
        let values = unsafe { core::slice::from_raw_parts_mut(values, T::ETHTOOL_STATS.len()) };
        values.fill(0);
        T::get_ethtool_stats(ndev, data, values);
    }
}
