// SPDX-License-Identifier: GPL-2.0

//! RCU read-side critical sections.
//!
//! C header: [`include/linux/rcupdate.h`](srctree/include/linux/rcupdate.h)

use crate::bindings;
use core::marker::PhantomData;

/// Evidence that the RCU read-side lock is held: what C protects with RCU may be read, and
/// stays valid, while the guard exists. Dropping it ends the critical section. The section
/// must not sleep: on a kernel without preemptible RCU a sleep would let a grace period end,
/// and what was read under the guard could be freed while still referenced.
///
/// The guard is neither `Send` nor `Sync`: a critical section ends where it began.
///
/// # Invariants
///
/// The RCU read-side lock is held, taken by this guard, for as long as it exists.
///
/// # Examples
///
/// ```
/// use kernel::sync::rcu;
///
/// let guard = rcu::read_lock();
/// // Read what RCU protects here, without sleeping.
/// drop(guard);
/// ```
#[must_use = "the critical section ends when the guard is dropped"]
pub struct Guard {
    _not_send: PhantomData<*mut ()>,
}

impl Guard {
    /// Enters a read-side critical section (C: `rcu_read_lock`). Sections nest.
    #[inline]
    pub fn new() -> Self {
        // SAFETY: Has no requirements; it may be called in any context, nested.
        unsafe { bindings::rcu_read_lock() };
        // INVARIANT: The lock was taken just above.
        Self {
            _not_send: PhantomData,
        }
    }
}

impl Default for Guard {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for Guard {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: The guard took the lock (type invariant), on this thread (it is not
        // `Send`), and gives it back once.
        unsafe { bindings::rcu_read_unlock() };
    }
}

/// Enters a read-side critical section, which lasts as long as the returned guard.
#[inline]
#[must_use = "the critical section ends when the guard is dropped"]
pub fn read_lock() -> Guard {
    Guard::new()
}
