// SPDX-License-Identifier: GPL-2.0

//! Driver-specific sysfs files of a network device (`/sys/class/net/NAME/FILE`), declared
//! in [`Operations::ATTRIBUTES`] and served by [`Operations::attribute_show`] and
//! [`Operations::attribute_store`].
//!
//! C header: [`include/linux/device.h`](srctree/include/linux/device.h).

use super::dev::{NetDevice, Operations};
use crate::{
    bindings,
    error::{code::EINVAL, Result},
    ffi::{c_char, c_int},
    prelude::*,
    str::CStr,
};
use core::{fmt, marker::PhantomData};

/// One file: its name, whether everyone may read it and whether root may write it.
#[derive(Clone, Copy, Debug)]
pub struct Attribute {
    name: &'static CStr,
    readable: bool,
    writable: bool,
}

impl Attribute {
    /// A file everyone may read.
    pub const fn read_only(name: &'static CStr) -> Self {
        Self {
            name,
            readable: true,
            writable: false,
        }
    }

    /// A file everyone may read and root may write.
    pub const fn read_write(name: &'static CStr) -> Self {
        Self {
            name,
            readable: true,
            writable: true,
        }
    }

    /// A file only root may write, and nobody read (a command).
    pub const fn write_only(name: &'static CStr) -> Self {
        Self {
            name,
            readable: false,
            writable: true,
        }
    }
}

/// The text of a file being read: one page, filled with `write!`.
pub struct AttributeText<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl fmt::Write for AttributeText<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let end = self.len.checked_add(s.len()).ok_or(fmt::Error)?;
        self.buf
            .get_mut(self.len..end)
            .ok_or(fmt::Error)?
            .copy_from_slice(s.as_bytes());
        self.len = end;
        Ok(())
    }
}

/// A `struct device_attribute` that knows its index in [`Operations::ATTRIBUTES`].
///
/// # Invariants
///
/// `attr.attr.name` points to the `'static` name of attribute `index` of the
/// [`AttributeTable`] holding the slot, and (with lock debugging) `attr.attr.key` to a
/// static lock class; every `device_attribute` the table's callbacks are given is the
/// `attr` of such a slot.
#[repr(C)]
struct Slot {
    attr: bindings::device_attribute,
    index: usize,
}

/// The attribute group of every device of one [`Operations`] type, allocated per device
/// registration because the group is built at run time.
///
/// # Invariants
///
/// `_ptrs` holds a pointer to each `_slots[i].attr.attr`, then null; `group.attrs` points
/// to `_ptrs`. The vectors are never resized after construction, so the pointers stay valid
/// while `self` lives.
pub(crate) struct AttributeTable<T: Operations> {
    /// Referenced by `ptrs` and sysfs, never read from Rust.
    _slots: KVec<Slot>,
    /// Referenced by `group` and sysfs.
    _ptrs: KVec<*mut bindings::attribute>,
    group: bindings::attribute_group,
    _ops: PhantomData<T>,
}

impl<T: Operations> AttributeTable<T> {
    /// The table for `T`, or `None` when `T` declares no attributes.
    pub(crate) fn new() -> Result<Option<KBox<Self>>> {
        if T::ATTRIBUTES.is_empty() {
            return Ok(None);
        }
        let n = T::ATTRIBUTES.len();
        let mut slots = KVec::with_capacity(n, GFP_KERNEL)?;
        for (index, a) in T::ATTRIBUTES.iter().enumerate() {
            // SAFETY: All-zero is a valid `device_attribute` (no callbacks, null name).
            let mut attr: bindings::device_attribute = unsafe { core::mem::zeroed() };
            attr.attr.name = a.name.as_char_ptr();
            attr.attr.mode =
                if a.readable { 0o444 } else { 0 } | if a.writable { 0o200 } else { 0 };
            #[cfg(CONFIG_DEBUG_LOCK_ALLOC)]
            {
                // One static class for all of them, as `sysfs_attr_init` in a loop gives.
                attr.attr.key = crate::static_lock_class!().as_ptr();
            }
            if a.readable {
                attr.show = Some(show_callback::<T>);
            }
            if a.writable {
                attr.store = Some(store_callback::<T>);
            }
            // INVARIANT: The name is the attribute's `'static` one, `index` its own.
            slots.push(Slot { attr, index }, GFP_KERNEL)?;
        }
        let mut ptrs = KVec::with_capacity(n + 1, GFP_KERNEL)?;
        for slot in slots.iter_mut() {
            ptrs.push(&mut slot.attr.attr as *mut bindings::attribute, GFP_KERNEL)?;
        }
        ptrs.push(core::ptr::null_mut(), GFP_KERNEL)?;
        // SAFETY: All-zero is a valid `attribute_group` (unnamed: files sit in the device's
        // own directory).
        let mut group: bindings::attribute_group = unsafe { core::mem::zeroed() };
        group.attrs = ptrs.as_mut_ptr();
        group.is_visible = Some(visible_callback::<T>);
        // INVARIANT: `ptrs` points into `slots`, null-terminated; `group` to `ptrs`.
        Ok(Some(KBox::new(
            Self {
                _slots: slots,
                _ptrs: ptrs,
                group,
                _ops: PhantomData,
            },
            GFP_KERNEL,
        )?))
    }

    /// The group to install in `net_device::sysfs_groups[0]` before registration.
    #[inline]
    pub(crate) fn group(&self) -> *const bindings::attribute_group {
        &self.group
    }
}

/// # Safety
///
/// `attr` must be the `attr` field of a [`Slot`], and `dev` the `dev` field of a network
/// device set up by [`super::dev::Adapter::register`].
unsafe fn resolve<'a>(
    dev: *mut bindings::device,
    attr: *mut bindings::device_attribute,
) -> (&'a NetDevice, usize) {
    // SAFETY: Per the safety requirements `dev` is the `dev` field of a network device.
    let ndev = unsafe { crate::container_of!(dev, bindings::net_device, dev) }.cast_mut();
    // SAFETY: Per the safety requirements `attr` is the `attr` field of a `Slot`.
    let slot = unsafe { crate::container_of!(attr, Slot, attr) };
    // SAFETY: The slot lives in the device's attribute table, unchanged while the device's
    // files exist, so for the callback.
    let index = unsafe { (*slot).index };
    // SAFETY: The device is valid while its files exist.
    (unsafe { NetDevice::from_raw(ndev) }, index)
}

/// # Safety
///
/// Called by sysfs only, as a device with an [`AttributeTable<T>`] is registered, for one of
/// its files.
unsafe extern "C" fn visible_callback<T: Operations>(
    kobj: *mut bindings::kobject,
    attr: *mut bindings::attribute,
    _n: c_int,
) -> bindings::umode_t {
    // SAFETY: The group's files belong to a network device's `struct device`, whose `kobj`
    // this is; `attr` is the `attr` field of a `device_attribute`, itself the `attr` field
    // of a `Slot`.
    let dev = unsafe { crate::container_of!(kobj, bindings::device, kobj) }.cast_mut();
    // SAFETY: As above.
    let dattr = unsafe { crate::container_of!(attr, bindings::device_attribute, attr) }.cast_mut();
    // SAFETY: As above: a network device's `dev` and a `Slot`'s `attr`.
    let (ndev, index) = unsafe { resolve(dev, dattr) };
    // SAFETY: `attr` is valid for the call.
    let mode = unsafe { (*attr).mode };
    // SAFETY: The device is being registered by `Adapter::register`, its data stored.
    let data = unsafe { super::dev::Adapter::<T>::data(ndev.as_raw()) };
    if T::attribute_visible(ndev, data, index) {
        mode
    } else {
        0
    }
}

/// # Safety
///
/// Called by sysfs only, for a file of an [`AttributeTable<T>`] installed on a device set up
/// by [`super::dev::Adapter::register`]; `buf` is a page.
unsafe extern "C" fn show_callback<T: Operations>(
    dev: *mut bindings::device,
    attr: *mut bindings::device_attribute,
    buf: *mut c_char,
) -> isize {
    // SAFETY: Per the safety requirements; the files are removed when the device is
    // unregistered, before the data is released.
    let (ndev, index) = unsafe { resolve(dev, attr) };
    // SAFETY: sysfs passes a page-sized buffer, ours for the call.
    let page = unsafe { core::slice::from_raw_parts_mut(buf.cast::<u8>(), bindings::PAGE_SIZE) };
    let mut text = AttributeText { buf: page, len: 0 };
    // SAFETY: The device was set up by `Adapter::register` for `T`.
    let data = unsafe { super::dev::Adapter::<T>::data(ndev.as_raw()) };
    match T::attribute_show(ndev, data, index, &mut text) {
        Ok(()) => text.len as isize,
        Err(e) => e.to_errno() as isize,
    }
}

/// # Safety
///
/// As for [`show_callback`]; `buf` holds `count` bytes.
unsafe extern "C" fn store_callback<T: Operations>(
    dev: *mut bindings::device,
    attr: *mut bindings::device_attribute,
    buf: *const c_char,
    count: usize,
) -> isize {
    // SAFETY: As in `show_callback`.
    let (ndev, index) = unsafe { resolve(dev, attr) };
    // SAFETY: sysfs passes `count` readable bytes.
    let input = unsafe { core::slice::from_raw_parts(buf.cast::<u8>(), count) };
    // SAFETY: The device was set up by `Adapter::register` for `T`.
    let data = unsafe { super::dev::Adapter::<T>::data(ndev.as_raw()) };
    match T::attribute_store(ndev, data, index, input) {
        Ok(()) => isize::try_from(count).unwrap_or(EINVAL.to_errno() as isize),
        Err(e) => e.to_errno() as isize,
    }
}
