// SPDX-License-Identifier: GPL-2.0

//! Module parameters (`modprobe MODULE NAME=VALUE`, or `MODULE.NAME=VALUE` on the kernel
//! command line for built-in code), shown in `/sys/module/MODULE/parameters/`.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).
//!
//! Declared with [`module_param!`](crate::module_param); read with [`ModuleParam::get`] or
//! [`WritableParam::get`]. Most parameters are read-only after loading (mode 0444): the
//! kernel writes them only while parsing the load arguments, before any code of the module
//! runs, so reading them needs no lock. A [`WritableParam`] root may also change at run time
//! (mode 0644) by writing its sysfs file; it is an atomic, read anywhere.

use crate::{bindings, error::to_result, ffi::c_char, str::CStr};
use core::{
    cell::UnsafeCell,
    sync::atomic::{AtomicU32, Ordering},
};

/// The value of a module parameter of type `T` (`bool` or `u32`).
///
/// # Invariants
///
/// Written only by the kernel's argument parser before the module's code runs (the
/// parameter is registered read-only by [`KernelParam`]), or never.
#[repr(transparent)]
pub struct ModuleParam<T: Copy>(UnsafeCell<T>);

// SAFETY: By the type invariant no write happens once the module's code can read.
unsafe impl<T: Copy + Send> Sync for ModuleParam<T> {}

impl<T: Copy> ModuleParam<T> {
    /// A parameter with value `default` until the load arguments say otherwise.
    #[inline]
    pub const fn new(default: T) -> Self {
        Self(UnsafeCell::new(default))
    }

    /// The value.
    #[inline]
    pub fn get(&self) -> T {
        // SAFETY: By the type invariant nothing writes the value any more.
        unsafe { *self.0.get() }
    }
}

/// A `u32` module parameter that root may also change at run time, through its sysfs file.
#[repr(transparent)]
pub struct WritableParam(AtomicU32);

impl WritableParam {
    /// A parameter with value `default` until the load arguments or a write say otherwise.
    #[inline]
    pub const fn new(default: u32) -> Self {
        Self(AtomicU32::new(default))
    }

    /// The value (it may change at any time).
    #[inline]
    pub fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
}

/// # Safety
///
/// Called by the kernel only, for a parameter made by [`KernelParam::new_u32_writable`]:
/// `val` is a NUL-terminated string and `kp.arg` points to its [`WritableParam`].
unsafe extern "C" fn set_writable_u32(
    val: *const c_char,
    kp: *const bindings::kernel_param,
) -> crate::ffi::c_int {
    let mut value = 0u32;
    // SAFETY: `val` is NUL-terminated and `value` writable; base 0 takes 0x and 0 prefixes.
    if let Err(e) = to_result(unsafe { bindings::kstrtouint(val, 0, &mut value) }) {
        return e.to_errno();
    }
    // SAFETY: Per the safety requirements `kp` is one of our parameters.
    let param = unsafe { writable_param(kp) };
    param.0.store(value, Ordering::Relaxed);
    0
}

/// The value behind a parameter made by [`KernelParam::new_u32_writable`].
///
/// # Safety
///
/// `kp` must be such a parameter, valid (the kernel passes it to our callbacks).
unsafe fn writable_param(kp: *const bindings::kernel_param) -> &'static WritableParam {
    // SAFETY: `kp` is valid (the caller's guarantee).
    let arg = unsafe { &(*kp).__bindgen_anon_1 };
    // SAFETY: Our parameters set the union's `arg` member (`KernelParam::new`).
    let arg = unsafe { arg.arg };
    // SAFETY: For such a parameter `arg` points to a `'static` `WritableParam`, only ever
    // shared.
    unsafe { &*arg.cast::<WritableParam>() }
}

/// # Safety
///
/// Called by the kernel only, for a parameter made by [`KernelParam::new_u32_writable`];
/// `buffer` holds a page.
unsafe extern "C" fn get_writable_u32(
    buffer: *mut c_char,
    kp: *const bindings::kernel_param,
) -> crate::ffi::c_int {
    // SAFETY: Per the safety requirements `kp` is one of our parameters.
    let param = unsafe { writable_param(kp) };
    let mut digits = [0u8; 11];
    let mut at = digits.len() - 1;
    digits[at] = b'\n';
    let mut value = param.get();
    loop {
        at -= 1;
        digits[at] = b'0' + (value % 10) as u8;
        value /= 10;
        if value == 0 {
            break;
        }
    }
    let text = &digits[at..];
    // SAFETY: `buffer` holds a page, more than the 11 bytes of the longest value.
    unsafe { core::ptr::copy_nonoverlapping(text.as_ptr(), buffer.cast::<u8>(), text.len()) };
    text.len() as crate::ffi::c_int
}

/// Parses and shows [`WritableParam`]s.
static WRITABLE_U32_OPS: bindings::kernel_param_ops = bindings::kernel_param_ops {
    flags: 0,
    set: Some(set_writable_u32),
    get: Some(get_writable_u32),
    free: None,
};

/// The kernel's description of one parameter (`struct kernel_param`), placed in the
/// `__param` section by [`module_param!`](crate::module_param).
///
/// # Invariants
///
/// `name` points to a `'static` NUL-terminated name, `ops` to `'static` operations whose
/// callbacks accept `arg` (a `'static` object of the type they expect), and `mod_` is null.
#[repr(transparent)]
pub struct KernelParam(bindings::kernel_param);

// SAFETY: The description is immutable; the kernel only reads it.
unsafe impl Sync for KernelParam {}

impl KernelParam {
    const fn new(
        name: &'static CStr,
        ops: *const bindings::kernel_param_ops,
        arg: *mut core::ffi::c_void,
        perm: u16,
    ) -> Self {
        // INVARIANT: `name` is `'static`; each constructor below pairs `ops` with a `'static`
        // `arg` of the type they expect.
        Self(bindings::kernel_param {
            name: name.as_char_ptr(),
            // Without a module, writes are serialised by the kernel's global parameter lock;
            // our own parameters are atomics anyway.
            mod_: core::ptr::null_mut(),
            ops,
            perm,
            level: -1,
            flags: 0,
            __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 { arg },
        })
    }

    /// A `bool` parameter named `name`, stored in `value`.
    pub const fn new_bool(name: &'static CStr, value: &'static ModuleParam<bool>) -> Self {
        // `param_ops_bool` parses "0/1/y/n/Y/N" into a C `bool`, which `bool` matches.
        Self::new(
            name,
            &raw const bindings::param_ops_bool,
            value.0.get().cast(),
            0o444,
        )
    }

    /// A `u32` parameter named `name`, stored in `value`.
    pub const fn new_u32(name: &'static CStr, value: &'static ModuleParam<u32>) -> Self {
        // `param_ops_uint` parses into a C `unsigned int`, which `u32` matches.
        Self::new(
            name,
            &raw const bindings::param_ops_uint,
            value.0.get().cast(),
            0o444,
        )
    }

    /// A `u32` parameter named `name`, stored in `value`, which root may change at run
    /// time.
    pub const fn new_u32_writable(name: &'static CStr, value: &'static WritableParam) -> Self {
        Self::new(
            name,
            &raw const WRITABLE_U32_OPS,
            value.0.as_ptr().cast(),
            0o644,
        )
    }
}

/// Copies `s` into an array of its length, for `.modinfo` strings made with `concat!`.
#[doc(hidden)]
pub const fn modinfo<const N: usize>(s: &str) -> [u8; N] {
    let b = s.as_bytes();
    let mut out = [0u8; N];
    let mut i = 0;
    while i < N {
        out[i] = b[i];
        i += 1;
    }
    out
}

/// Declares a module parameter of type `bool` or `u32` (read-only), or `writable u32`.
///
/// `module_param!(NAME, "module", "param", bool, default, "description");` makes a static
/// [`ModuleParam`] `NAME` (a [`WritableParam`] for `writable u32`), set with
/// `modprobe module param=VALUE` (or `module.param=VALUE` on the kernel command line when
/// built in), listed by `modinfo` with its description and shown in
/// `/sys/module/module/parameters/param`, where root may write a writable one.
#[macro_export]
macro_rules! module_param {
    ($(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, bool,
     $default:expr, $desc:literal) => {
        $crate::module_param!(@impl $(#[$meta])* $vis $static, $module, $name,
            $crate::module_param::ModuleParam<bool>, "bool", new_bool, $default, $desc);
    };
    ($(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, u32,
     $default:expr, $desc:literal) => {
        $crate::module_param!(@impl $(#[$meta])* $vis $static, $module, $name,
            $crate::module_param::ModuleParam<u32>, "uint", new_u32, $default, $desc);
    };
    ($(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, writable u32,
     $default:expr, $desc:literal) => {
        $crate::module_param!(@impl $(#[$meta])* $vis $static, $module, $name,
            $crate::module_param::WritableParam, "uint", new_u32_writable, $default, $desc);
    };
    (@impl $(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, $ty:ty,
     $cty:literal, $ctor:ident, $default:expr, $desc:literal) => {
        $(#[$meta])*
        $vis static $static: $ty = <$ty>::new($default);

        const _: () = {
            // Loadable modules name their parameters plainly, built-in code prefixes them.
            #[cfg(MODULE)]
            const NAME: &$crate::str::CStr = $crate::c_str!($name);
            #[cfg(not(MODULE))]
            const NAME: &$crate::str::CStr = $crate::c_str!(concat!($module, ".", $name));
            #[link_section = "__param"]
            #[used(compiler)]
            static PARAM: $crate::module_param::KernelParam =
                $crate::module_param::KernelParam::$ctor(NAME, &$static);

            #[cfg(MODULE)]
            const TYPE: &str = concat!("parmtype=", $name, ":", $cty, "\0");
            #[cfg(not(MODULE))]
            const TYPE: &str = concat!($module, ".parmtype=", $name, ":", $cty, "\0");
            #[link_section = ".modinfo"]
            #[used(compiler)]
            static TYPE_INFO: [u8; TYPE.len()] = $crate::module_param::modinfo(TYPE);

            #[cfg(MODULE)]
            const DESC: &str = concat!("parm=", $name, ":", $desc, "\0");
            #[cfg(not(MODULE))]
            const DESC: &str = concat!($module, ".parm=", $name, ":", $desc, "\0");
            #[link_section = ".modinfo"]
            #[used(compiler)]
            static DESC_INFO: [u8; DESC.len()] = $crate::module_param::modinfo(DESC);
        };
    };
}
