// SPDX-License-Identifier: GPL-2.0

//! A spinlock that also keeps softirqs (bottom halves) off the local CPU while held.
//!
//! Data shared between process context and softirq context (a network driver's transmit
//! path and its NAPI poll, for example) needs this lock: a plain spinlock taken in process
//! context could be interrupted by a softirq on the same CPU that spins on it forever.
//!
//! C header: [`include/linux/spinlock.h`](srctree/include/linux/spinlock.h).

/// Creates a [`SpinLockBh`] initialiser with the given name and a newly-created lock class.
#[macro_export]
macro_rules! new_spinlock_bh {
    ($inner:expr $(, $name:literal)? $(,)?) => {
        $crate::sync::SpinLockBh::new(
            $inner, $crate::optional_name!($($name)?), $crate::static_lock_class!())
    };
}
pub use new_spinlock_bh;

/// A spinlock taken with `spin_lock_bh`: softirqs stay disabled on the local CPU while the
/// guard lives.
///
/// # Examples
///
/// ```
/// use kernel::sync::{new_spinlock_bh, SpinLockBh};
///
/// #[pin_data]
/// struct Counters {
///     #[pin]
///     packets: SpinLockBh<u64>,
/// }
///
/// let c = KBox::pin_init(pin_init!(Counters { packets <- new_spinlock_bh!(0) }), GFP_KERNEL)?;
/// *c.packets.lock() += 2;
/// assert_eq!(*c.packets.lock(), 2);
/// # Ok::<(), Error>(())
/// ```
pub type SpinLockBh<T> = super::Lock<T, SpinLockBhBackend>;

/// A kernel `spinlock_t` lock backend using the `_bh` lock and unlock variants.
pub struct SpinLockBhBackend;

// SAFETY: The underlying kernel `spinlock_t` object ensures mutual exclusion; `relock` uses the
// default implementation, which always calls the same locking method.
unsafe impl super::Backend for SpinLockBhBackend {
    type State = bindings::spinlock_t;
    type GuardState = ();

    unsafe fn init(
        ptr: *mut Self::State,
        name: *const crate::ffi::c_char,
        key: *mut bindings::lock_class_key,
    ) {
        // SAFETY: The safety requirements ensure that `ptr` is valid for writes, and `name` and
        // `key` are valid for read indefinitely.
        unsafe { bindings::__spin_lock_init(ptr, name, key) }
    }

    #[inline]
    unsafe fn lock(ptr: *mut Self::State) -> Self::GuardState {
        // SAFETY: The safety requirements of this function ensure that `ptr` points to valid,
        // initialised memory.
        unsafe { bindings::spin_lock_bh(ptr) }
    }

    #[inline]
    unsafe fn unlock(ptr: *mut Self::State, _guard_state: &Self::GuardState) {
        // SAFETY: The safety requirements of this function ensure that `ptr` is valid and that
        // the caller holds the lock.
        unsafe { bindings::spin_unlock_bh(ptr) }
    }
}
