// SPDX-License-Identifier: GPL-2.0

//! The routing netlink lock (RTNL), which serialises configuration changes of network
//! devices.
//!
//! C header: [`include/linux/rtnetlink.h`](srctree/include/linux/rtnetlink.h).

use crate::{
    bindings,
    error::{code::ERESTARTNOINTR, Error},
};
use core::marker::PhantomData;

/// Proof that the current task holds RTNL, for functions that need it.
///
/// Callbacks that the core runs under RTNL receive a `&Rtnl`; others take it with
/// [`RtnlGuard::try_lock`].
///
/// # Invariants
///
/// While a `&Rtnl` (or an `Rtnl` inside a guard) exists, the current task holds RTNL; the
/// marker keeps it on that task (the type is neither `Send` nor `Sync`).
pub struct Rtnl {
    /// Only meaningful on the task that holds the lock.
    _not_send: PhantomData<*mut ()>,
}

impl Rtnl {
    /// # Safety
    ///
    /// The current task must hold RTNL for `'a`.
    #[inline]
    pub(crate) unsafe fn assume_held<'a>() -> &'a Rtnl {
        // INVARIANT: The caller guarantees RTNL is held for `'a`.
        &Rtnl {
            _not_send: PhantomData,
        }
    }
}

/// RTNL taken by us; released on drop.
///
/// # Invariants
///
/// The current task holds RTNL, taken when this guard was made.
pub struct RtnlGuard {
    rtnl: Rtnl,
}

impl core::ops::Deref for RtnlGuard {
    type Target = Rtnl;

    fn deref(&self) -> &Rtnl {
        &self.rtnl
    }
}

impl RtnlGuard {
    /// Takes RTNL, waiting for it (process context; not from a device's sysfs file, see
    /// [`RtnlGuard::try_lock`]).
    pub fn lock() -> Self {
        // SAFETY: `rtnl_lock` has no precondition but a context that may sleep, which (as for
        // every sleeping lock of this crate) is the caller's to provide; `might_sleep`
        // reports a caller that does not.
        unsafe { bindings::rtnl_lock() };
        // INVARIANT: just taken.
        Self {
            rtnl: Rtnl {
                _not_send: PhantomData,
            },
        }
    }

    /// Takes RTNL if it is free.
    ///
    /// Writers of a device's sysfs files use this rather than waiting: unregistering a
    /// device holds RTNL while it waits for those writers to finish. When RTNL is busy they
    /// return [`restart_syscall`] and the write is retried.
    pub fn try_lock() -> Option<Self> {
        // SAFETY: `rtnl_trylock` may be called from any sleepable context.
        if unsafe { bindings::rtnl_trylock() } != 0 {
            // INVARIANT: just taken.
            Some(Self {
                rtnl: Rtnl {
                    _not_send: PhantomData,
                },
            })
        } else {
            None
        }
    }
}

impl Drop for RtnlGuard {
    fn drop(&mut self) {
        // SAFETY: By the type invariant this task holds RTNL.
        unsafe { bindings::rtnl_unlock() };
    }
}

/// Makes the current system call restart once the task returns to user space (after a
/// signal check), for a caller that could not take a lock it needs; returns the error to
/// give back.
#[inline]
pub fn restart_syscall() -> Error {
    // SAFETY: `restart_syscall` only sets a flag on the current task, which matters only on
    // the way back from a system call: harmless anywhere else.
    let _ = unsafe { bindings::restart_syscall() };
    ERESTARTNOINTR
}
