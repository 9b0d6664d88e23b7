// SPDX-License-Identifier: GPL-2.0

//! RDMA devices and their ports.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).

use crate::{
    bindings,
    error::{
        code::{EINVAL, ENODEV, ENOENT},
        to_result, Result,
    },
    net::dev::NetDevice,
    str::CStr,
    types::{ARef, Opaque},
};
use core::{
    fmt,
    ops::{Deref, RangeInclusive},
    ptr::NonNull,
};

/// Bytes of a firmware version string, NUL included ([`Device::fw_version`]).
pub const FW_VERSION_LEN: usize = bindings::IB_FW_VERSION_NAME_MAX as usize;

/// An RDMA device (`struct ib_device`), as handed to an IB client.
///
/// # Invariants
///
/// A `&Device` always refers to a registered `struct ib_device` that stays valid for the
/// lifetime of the reference.
#[repr(transparent)]
pub struct Device(Opaque<bindings::ib_device>);

impl Device {
    /// Creates a reference to a [`Device`] from a raw pointer.
    ///
    /// # Safety
    ///
    /// `ptr` must point to a registered `struct ib_device` that stays valid for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::ib_device) -> &'a Self {
        // CAST: `Device` is `repr(transparent)` over `Opaque<bindings::ib_device>`, which has
        // the layout of `bindings::ib_device`.
        // SAFETY: The caller guarantees validity for `'a`, which establishes the invariant.
        unsafe { &*ptr.cast() }
    }

    /// Returns the raw `struct ib_device` pointer.
    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_device {
        self.0.get()
    }

    /// Takes a registration reference: the device stays registered until it is dropped.
    ///
    /// Fails with `ENODEV` once unregistration has begun. Within [`super::client::Client`]
    /// callbacks it always succeeds. Objects that must not outlive the device (protection
    /// domains, queues, buffers) hold one, so the core's unregistration waits for them.
    pub fn get_ref(&self) -> Result<DeviceRef> {
        // SAFETY: By the type invariant the device is valid.
        if unsafe { bindings::ib_device_try_get(self.as_raw()) } {
            // INVARIANT: the reference was just taken.
            Ok(DeviceRef(NonNull::from(self)))
        } else {
            Err(ENODEV)
        }
    }

    /// Finds a registered device by name and takes a registration reference on it.
    pub fn get_by_name(name: &CStr) -> Result<DeviceRef> {
        // SAFETY: `name` is NUL-terminated; any driver id is accepted.
        let raw = unsafe {
            bindings::ib_device_get_by_name(
                name.as_char_ptr(),
                bindings::rdma_driver_id_RDMA_DRIVER_UNKNOWN,
            )
        };
        let raw = NonNull::new(raw).ok_or(ENODEV)?;
        // INVARIANT: `ib_device_get_by_name` returned with a registration reference held.
        Ok(DeviceRef(raw.cast()))
    }

    /// The device's name as it is now, e.g. `rxe0`: a copy, since `rdma dev set NAME name`
    /// rewrites it in place while we may hold the device.
    pub fn name(&self) -> DeviceName {
        let mut name = [0u8; DEVICE_NAME_MAX];
        // SAFETY: By the type invariant the device is valid; only the address of its `name`
        // array is taken, no reference (a rename writes it meanwhile).
        let src = unsafe { core::ptr::addr_of!((*self.as_raw()).name) }.cast::<u8>();
        // The last byte stays 0: the copy is NUL-terminated whatever is read.
        for (i, byte) in name.iter_mut().enumerate().take(DEVICE_NAME_MAX - 1) {
            // SAFETY: `i` is within the array; each byte is read once, as `READ_ONCE` reads
            // it (a rename racing this gives a torn name, as C's printers may see).
            *byte = unsafe { core::ptr::read_volatile(src.wrapping_add(i)) };
        }
        DeviceName(name)
    }

    /// The device this RDMA device is part of (the PCI function of an adapter), if its driver
    /// gave it one (software devices have none). Upper layers make it the parent of their
    /// net devices too, so that tools find an interface's hardware.
    pub fn parent(&self) -> Option<&crate::device::Device> {
        // SAFETY: By the type invariant the device is valid; `dev` is the member of the
        // union the core initialises (`coredev` starts with it too); its parent is set before
        // the device is registered and not changed after.
        let parent = unsafe { (*self.as_raw()).__bindgen_anon_1.dev.parent };
        if parent.is_null() {
            return None;
        }
        // SAFETY: A registered device holds a reference to its parent, so the parent stays
        // valid for as long as `self` is borrowed.
        Some(unsafe { crate::device::Device::as_ref(parent) })
    }

    /// Writes the firmware version the driver reports into `buf` (empty when it reports
    /// none); returns the written part.
    pub fn fw_version<'a>(&self, buf: &'a mut [u8; FW_VERSION_LEN]) -> &'a [u8] {
        buf.fill(0);
        // SAFETY: By the type invariant the device is valid; `buf` has room for the
        // `IB_FW_VERSION_NAME_MAX` bytes the core writes at most, NUL included.
        unsafe { bindings::ib_get_device_fw_str(self.as_raw(), buf.as_mut_ptr().cast()) };
        let n = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        &buf[..n]
    }

    /// Scatter/gather entries a send work request may have on this device.
    #[inline]
    pub fn max_send_sge(&self) -> u32 {
        // SAFETY: By the type invariant the device is valid; its attributes are set before
        // registration and fixed afterwards.
        let n = unsafe { (*self.as_raw()).attrs.max_send_sge };
        u32::try_from(n).unwrap_or(0)
    }

    /// Entries a completion queue may have on this device.
    #[inline]
    pub fn max_cqe(&self) -> u32 {
        // SAFETY: As for `max_send_sge`.
        let n = unsafe { (*self.as_raw()).attrs.max_cqe };
        u32::try_from(n).unwrap_or(0)
    }

    /// Returns the range of valid port numbers (1-based on every device but switches).
    pub fn ports(&self) -> RangeInclusive<u32> {
        // SAFETY: By the type invariant the device is valid.
        let first = unsafe { bindings::rdma_start_port(self.as_raw()) };
        // SAFETY: By the type invariant the device is valid.
        let last = unsafe { bindings::rdma_end_port(self.as_raw()) };
        first..=last
    }

    fn check_port(&self, port: u32) -> Result {
        if self.ports().contains(&port) {
            Ok(())
        } else {
            Err(EINVAL)
        }
    }

    /// Queries the attributes of `port`; `EINVAL` for a port the device does not have.
    pub fn port_attr(&self, port: u32) -> Result<PortAttr> {
        self.check_port(port)?;
        let mut attr = PortAttr::zeroed();
        // SAFETY: The device is valid, `port` is one of its ports and `attr` is writable.
        to_result(unsafe { bindings::ib_query_port(self.as_raw(), port, &mut attr.0) })?;
        Ok(attr)
    }

    /// Returns the link layer of `port`; `EINVAL` for a port the device does not have.
    pub fn link_layer(&self, port: u32) -> Result<LinkLayer> {
        self.check_port(port)?;
        // SAFETY: The device is valid and `port` is one of its ports.
        let ll = unsafe { bindings::rdma_port_get_link_layer(self.as_raw(), port) };
        Ok(match ll {
            bindings::rdma_link_layer_IB_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
            bindings::rdma_link_layer_IB_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
            _ => LinkLayer::Unspecified,
        })
    }

    /// Returns the transport protocol of `port`; `EINVAL` for a port the device does not have.
    pub fn protocol(&self, port: u32) -> Result<Protocol> {
        self.check_port(port)?;
        // SAFETY: The device is valid and `port` is one of its ports.
        if unsafe { bindings::rdma_protocol_ib(self.as_raw(), port) } {
            return Ok(Protocol::InfiniBand);
        }
        // SAFETY: The device is valid and `port` is one of its ports.
        if unsafe { bindings::rdma_protocol_roce(self.as_raw(), port) } {
            return Ok(Protocol::Roce);
        }
        Ok(Protocol::Other)
    }

    /// The network device under `port` (on RoCE the Ethernet device), referenced; `ENODEV`
    /// if the port has none.
    pub fn netdev(&self, port: u32) -> Result<ARef<NetDevice>> {
        self.check_port(port)?;
        // SAFETY: The device is valid and `port` is one of its ports.
        let ndev = unsafe { bindings::ib_device_get_netdev(self.as_raw(), port) };
        let ndev = NonNull::new(ndev).ok_or(ENODEV)?;
        // SAFETY: `ib_device_get_netdev` returned with a reference (`dev_hold`) we take over.
        Ok(unsafe { ARef::from_raw(ndev.cast()) })
    }

    /// Entry `index` of the P_Key table of `port`; `EINVAL` for a port the device does not
    /// have or an index beyond the table.
    pub fn query_pkey(&self, port: u32, index: u16) -> Result<u16> {
        self.check_port(port)?;
        let mut pkey = 0u16;
        // SAFETY: The device is valid, `port` is one of its ports and `pkey` is writable;
        // the core checks `index` against the table size.
        to_result(unsafe { bindings::ib_query_pkey(self.as_raw(), port, index, &mut pkey) })?;
        Ok(pkey)
    }

    /// The index of `pkey` in the P_Key table of `port` (a full-member entry preferred),
    /// `None` if the table lacks it; `EINVAL` for a port the device does not have.
    pub fn find_pkey(&self, port: u32, pkey: u16) -> Result<Option<u16>> {
        self.check_port(port)?;
        let mut index = 0u16;
        // SAFETY: The device is valid, `port` is one of its ports and `index` is writable.
        let ret = unsafe { bindings::ib_find_pkey(self.as_raw(), port, pkey, &mut index) };
        if ret == ENOENT.to_errno() {
            return Ok(None);
        }
        to_result(ret)?;
        Ok(Some(index))
    }

    /// Reads entry `index` of the GID table of `port`.
    ///
    /// Fails with `EINVAL` for a bad port or index and with the core's error for an empty entry.
    pub fn query_gid(&self, port: u32, index: u32) -> Result<Gid> {
        self.check_port(port)?;
        let index = i32::try_from(index).map_err(|_| EINVAL)?;
        let mut gid = bindings::ib_gid { raw: [0; 16] };
        // SAFETY: The device is valid, `port` is one of its ports and `gid` is writable; the
        // core checks `index` against the table size.
        to_result(unsafe { bindings::rdma_query_gid(self.as_raw(), port, index, &mut gid) })?;
        // SAFETY: Every bit pattern of the union is a valid `raw` byte array.
        Ok(Gid(unsafe { gid.raw }))
    }

    /// Where `gid` is in the GID tables of the device's InfiniBand ports: the first port and
    /// index that have it, if any (C: `ib_find_gid`; RoCE ports are not searched).
    pub fn find_gid(&self, gid: &Gid) -> Option<(u32, u16)> {
        let mut raw = bindings::ib_gid { raw: gid.0 };
        let (mut port, mut index) = (0u32, 0u16);
        // SAFETY: The device is valid, and the three pointers are to locals, writable for
        // the call.
        let ret = unsafe { bindings::ib_find_gid(self.as_raw(), &mut raw, &mut port, &mut index) };
        (ret == 0).then_some((port, index))
    }
}

/// A registration reference on a [`Device`]: while it exists the device stays registered
/// (its unregistration waits), so everything built on the device may use it.
///
/// # Invariants
///
/// Holds one registration reference (`ib_device_try_get`) on a valid device.
pub struct DeviceRef(NonNull<Device>);

// SAFETY: The reference count is atomic and the device may be used from any thread.
unsafe impl Send for DeviceRef {}
// SAFETY: `&DeviceRef` only gives `&Device`, which is `Sync`.
unsafe impl Sync for DeviceRef {}

impl Deref for DeviceRef {
    type Target = Device;

    #[inline]
    fn deref(&self) -> &Device {
        // SAFETY: By the type invariant the device is valid while the reference is held.
        unsafe { self.0.as_ref() }
    }
}

impl Drop for DeviceRef {
    fn drop(&mut self) {
        // SAFETY: By the type invariant this object holds one reference, released once here.
        unsafe { bindings::ib_device_put(self.as_raw()) };
    }
}

// SAFETY: `Device` is a handle to a C object whose lifetime the RDMA core manages; shared
// references are used concurrently by the core itself.
unsafe impl Sync for Device {}
// SAFETY: See above; nothing in `Device` is tied to a thread.
unsafe impl Send for Device {}

/// How a port's frames are carried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LinkLayer {
    /// An InfiniBand fabric.
    InfiniBand,
    /// Ethernet (RoCE or iWARP).
    Ethernet,
    /// The driver did not say.
    Unspecified,
}

/// The transport protocol a port speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Protocol {
    /// Native InfiniBand, with a subnet manager and LID routing.
    InfiniBand,
    /// RDMA over Converged Ethernet (v1 or v2), such as soft-RoCE.
    Roce,
    /// Anything else (iWARP, OPA, USNIC), on which IPoIB does not run.
    Other,
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::InfiniBand => "InfiniBand",
            Protocol::Roce => "RoCE",
            Protocol::Other => "other",
        })
    }
}

/// The logical state of a port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PortState {
    /// No state change.
    Nop,
    /// The link is down.
    Down,
    /// The link is up but not configured by the subnet manager.
    Init,
    /// Configured, not yet forwarding.
    Armed,
    /// Passing traffic.
    Active,
    /// Active, deferring errors.
    ActiveDefer,
}

impl fmt::Display for PortState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PortState::Nop => "NOP",
            PortState::Down => "DOWN",
            PortState::Init => "INIT",
            PortState::Armed => "ARMED",
            PortState::Active => "ACTIVE",
            PortState::ActiveDefer => "ACTIVE_DEFER",
        })
    }
}

/// An IB MTU: the largest payload of one packet on the fabric (`enum ib_mtu`).
///
/// # Examples
///
/// ```
/// use kernel::rdma::device::Mtu;
///
/// assert_eq!(Mtu::Mtu256.bytes(), 256);
/// assert_eq!(Mtu::Mtu1024.bytes(), 1024);
/// assert_eq!(Mtu::Mtu4096.bytes(), 4096);
/// assert!(Mtu::Mtu2048 < Mtu::Mtu4096);
/// assert_eq!(Mtu::from_bytes(2048), Some(Mtu::Mtu2048));
/// assert_eq!(Mtu::from_bytes(1500), None);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mtu {
    /// 256 bytes.
    Mtu256 = 1,
    /// 512 bytes.
    Mtu512 = 2,
    /// 1024 bytes.
    Mtu1024 = 3,
    /// 2048 bytes.
    Mtu2048 = 4,
    /// 4096 bytes.
    Mtu4096 = 5,
}

impl Mtu {
    pub(crate) fn from_raw(raw: bindings::ib_mtu) -> Option<Self> {
        Some(match raw {
            bindings::ib_mtu_IB_MTU_256 => Mtu::Mtu256,
            bindings::ib_mtu_IB_MTU_512 => Mtu::Mtu512,
            bindings::ib_mtu_IB_MTU_1024 => Mtu::Mtu1024,
            bindings::ib_mtu_IB_MTU_2048 => Mtu::Mtu2048,
            bindings::ib_mtu_IB_MTU_4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }

    /// The MTU in bytes.
    #[inline]
    pub fn bytes(self) -> u32 {
        128 << (self as u32)
    }

    /// The MTU of `bytes` bytes, if there is one of that size.
    pub fn from_bytes(bytes: u32) -> Option<Self> {
        Some(match bytes {
            256 => Mtu::Mtu256,
            512 => Mtu::Mtu512,
            1024 => Mtu::Mtu1024,
            2048 => Mtu::Mtu2048,
            4096 => Mtu::Mtu4096,
            _ => return None,
        })
    }
}

const DEVICE_NAME_MAX: usize = bindings::IB_DEVICE_NAME_MAX as usize;

/// A copy of an RDMA device's name ([`Device::name`]).
#[derive(Clone, Copy)]
pub struct DeviceName([u8; DEVICE_NAME_MAX]);

impl DeviceName {
    /// The name's bytes, without the NUL.
    pub fn as_bytes(&self) -> &[u8] {
        let len = self
            .0
            .iter()
            .position(|&b| b == 0)
            .unwrap_or(DEVICE_NAME_MAX - 1);
        self.0.get(..len).unwrap_or(&[])
    }
}

impl core::fmt::Display for DeviceName {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        for &b in self.as_bytes() {
            core::fmt::Write::write_char(f, char::from(b))?;
        }
        Ok(())
    }
}

/// The attributes of a port (`struct ib_port_attr`), as read by [`Device::port_attr`].
pub struct PortAttr(bindings::ib_port_attr);

impl PortAttr {
    fn zeroed() -> Self {
        // SAFETY: `ib_port_attr` is plain data: integers and C enums for which zero is a valid
        // value.
        Self(unsafe { core::mem::zeroed() })
    }

    /// The logical port state.
    pub fn state(&self) -> PortState {
        match self.0.state {
            bindings::ib_port_state_IB_PORT_DOWN => PortState::Down,
            bindings::ib_port_state_IB_PORT_INIT => PortState::Init,
            bindings::ib_port_state_IB_PORT_ARMED => PortState::Armed,
            bindings::ib_port_state_IB_PORT_ACTIVE => PortState::Active,
            bindings::ib_port_state_IB_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
            _ => PortState::Nop,
        }
    }

    /// The MTU in use on the link, `None` if the driver reported none.
    #[inline]
    pub fn active_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.active_mtu)
    }

    /// The data rate of the link in Mb/s: the lane rate times the lanes, 0 if the driver
    /// reported neither.
    pub fn speed_mbps(&self) -> u32 {
        let lane = match u32::from(self.0.active_speed) {
            bindings::ib_port_speed_IB_SPEED_SDR => 2500,
            bindings::ib_port_speed_IB_SPEED_DDR => 5000,
            bindings::ib_port_speed_IB_SPEED_QDR | bindings::ib_port_speed_IB_SPEED_FDR10 => 10000,
            bindings::ib_port_speed_IB_SPEED_FDR => 14000,
            bindings::ib_port_speed_IB_SPEED_EDR => 25000,
            bindings::ib_port_speed_IB_SPEED_HDR => 50000,
            bindings::ib_port_speed_IB_SPEED_NDR => 100000,
            bindings::ib_port_speed_IB_SPEED_XDR => 200000,
            _ => 0,
        };
        let lanes = match u32::from(self.0.active_width) {
            bindings::ib_port_width_IB_WIDTH_1X => 1,
            bindings::ib_port_width_IB_WIDTH_2X => 2,
            bindings::ib_port_width_IB_WIDTH_4X => 4,
            bindings::ib_port_width_IB_WIDTH_8X => 8,
            bindings::ib_port_width_IB_WIDTH_12X => 12,
            _ => 0,
        };
        lane * lanes
    }

    /// The largest MTU the port supports, `None` if the driver reported none.
    #[inline]
    pub fn max_mtu(&self) -> Option<Mtu> {
        Mtu::from_raw(self.0.max_mtu)
    }

    /// The port's LID (InfiniBand only; zero on RoCE).
    #[inline]
    pub fn lid(&self) -> u32 {
        self.0.lid
    }

    /// Number of entries in the GID table.
    #[inline]
    pub fn gid_table_len(&self) -> u32 {
        u32::try_from(self.0.gid_tbl_len).unwrap_or(0)
    }

    /// Number of entries in the P_Key table.
    #[inline]
    pub fn pkey_table_len(&self) -> u16 {
        self.0.pkey_tbl_len
    }
}

/// A 128-bit global identifier (`union ib_gid`): subnet prefix then interface ID, big-endian.
///
/// # Examples
///
/// ```
/// use kernel::{fmt, rdma::device::Gid, str::CString};
///
/// let gid = Gid([
///     0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
/// ]);
/// let text = CString::try_from_fmt(fmt!("{gid}"))?;
/// assert_eq!(text.to_str()?, "fe80:0000:0000:0000:5254:00ff:fe12:3456");
/// # Ok::<(), Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The Ethernet multicast address a RoCE frame to this multicast GID goes to: for an
    /// IPv4-mapped group (`::ffff:224.0.0.0/100`) `01:00:5e` and the low 23 bits of the IPv4
    /// address, otherwise `33:33` and the GID's last four bytes, as IP does.
    ///
    /// # Examples
    ///
    /// ```
    /// use kernel::rdma::device::Gid;
    ///
    /// let mut g = [0u8; 16];
    /// g[..2].copy_from_slice(&[0xff, 0x12]);
    /// g[12..].copy_from_slice(&[0xff, 0xff, 0xff, 0xff]);
    /// assert_eq!(Gid(g).multicast_mac(), [0x33, 0x33, 0xff, 0xff, 0xff, 0xff]);
    /// let mut v4 = [0u8; 16];
    /// v4[10..].copy_from_slice(&[0xff, 0xff, 239, 129, 2, 3]);
    /// assert_eq!(Gid(v4).multicast_mac(), [0x01, 0x00, 0x5e, 0x01, 0x02, 0x03]);
    /// ```
    pub fn multicast_mac(&self) -> [u8; 6] {
        let g = &self.0;
        let v4_mapped = g[..10].iter().all(|&b| b == 0) && g[10] == 0xff && g[11] == 0xff;
        if v4_mapped {
            [0x01, 0x00, 0x5e, g[13] & 0x7f, g[14], g[15]]
        } else {
            [0x33, 0x33, g[12], g[13], g[14], g[15]]
        }
    }
}

impl fmt::Display for Gid {
    /// Formats as eight groups of four hex digits, as `ibv_devinfo` prints GIDs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, pair) in self.0.chunks_exact(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", pair[0], pair[1])?;
        }
        Ok(())
    }
}
