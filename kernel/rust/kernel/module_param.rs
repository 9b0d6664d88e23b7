// SPDX-License-Identifier: GPL-2.0

//! Read-only module parameters (`modprobe MODULE NAME=VALUE`, or `MODULE.NAME=VALUE` on the
//! kernel command line for built-in code), shown in `/sys/module/MODULE/parameters/`.
//!
//! C header: [`include/linux/moduleparam.h`](srctree/include/linux/moduleparam.h).
//!
//! Declared with [`module_param!`](crate::module_param); read with [`ModuleParam::get`].
//! Parameters are read-only after loading (mode 0444): the kernel writes them only while
//! parsing the load arguments, before any code of the module runs, so reading them needs
//! no lock.

use crate::bindings;
use core::cell::UnsafeCell;

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
    pub const fn new(default: T) -> Self {
        Self(UnsafeCell::new(default))
    }

    /// The value.
    pub fn get(&self) -> T {
        // SAFETY: By the type invariant nothing writes the value any more.
        unsafe { *self.0.get() }
    }
}

/// The kernel's description of one parameter (`struct kernel_param`), placed in the
/// `__param` section by [`module_param!`](crate::module_param).
#[repr(transparent)]
pub struct KernelParam(bindings::kernel_param);

// SAFETY: The description is immutable; the kernel only reads it.
unsafe impl Sync for KernelParam {}

impl KernelParam {
    const fn new(
        name: &'static [u8],
        ops: *const bindings::kernel_param_ops,
        arg: *mut core::ffi::c_void,
    ) -> Self {
        Self(bindings::kernel_param {
            name: name.as_ptr().cast(),
            // Only used to lock writable parameters; these are read-only.
            mod_: core::ptr::null_mut(),
            ops,
            perm: 0o444,
            level: -1,
            flags: 0,
            __bindgen_anon_1: bindings::kernel_param__bindgen_ty_1 { arg },
        })
    }

    /// A `bool` parameter named `name` (NUL-terminated), stored in `value`.
    pub const fn new_bool(name: &'static [u8], value: &'static ModuleParam<bool>) -> Self {
        // `param_ops_bool` parses "0/1/y/n/Y/N" into a C `bool`, which `bool` matches.
        Self::new(
            name,
            &raw const bindings::param_ops_bool,
            value.0.get().cast(),
        )
    }

    /// A `u32` parameter named `name` (NUL-terminated), stored in `value`.
    pub const fn new_u32(name: &'static [u8], value: &'static ModuleParam<u32>) -> Self {
        // `param_ops_uint` parses into a C `unsigned int`, which `u32` matches.
        Self::new(
            name,
            &raw const bindings::param_ops_uint,
            value.0.get().cast(),
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

/// Declares a read-only module parameter of type `bool` or `u32`.
///
/// `module_param!(NAME, "module", "param", bool, default, "description");` makes a static
/// [`ModuleParam`] `NAME`, set with `modprobe module param=VALUE` (or `module.param=VALUE`
/// on the kernel command line when built in), listed by `modinfo` with its description
/// and shown in `/sys/module/module/parameters/param`.
#[macro_export]
macro_rules! module_param {
    ($(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, bool, $default:expr, $desc:literal) => {
        $crate::module_param!(@impl $(#[$meta])* $vis $static, $module, $name, bool, "bool", new_bool, $default, $desc);
    };
    ($(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, u32, $default:expr, $desc:literal) => {
        $crate::module_param!(@impl $(#[$meta])* $vis $static, $module, $name, u32, "uint", new_u32, $default, $desc);
    };
    (@impl $(#[$meta:meta])* $vis:vis $static:ident, $module:literal, $name:literal, $ty:ty, $cty:literal, $ctor:ident, $default:expr, $desc:literal) => {
        $(#[$meta])*
        $vis static $static: $crate::module_param::ModuleParam<$ty> =
            $crate::module_param::ModuleParam::new($default);

        const _: () = {
            // Loadable modules name their parameters plainly, built-in code prefixes them.
            #[cfg(MODULE)]
            const NAME: &str = concat!($name, "\0");
            #[cfg(not(MODULE))]
            const NAME: &str = concat!($module, ".", $name, "\0");
            #[link_section = "__param"]
            #[used(compiler)]
            static PARAM: $crate::module_param::KernelParam =
                $crate::module_param::KernelParam::$ctor(NAME.as_bytes(), &$static);

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
