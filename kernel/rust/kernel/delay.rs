// SPDX-License-Identifier: GPL-2.0

//! Sleeping for a while.
//!
//! C header: [`include/linux/delay.h`](srctree/include/linux/delay.h).

use crate::bindings;

/// Sleeps for at least `msecs` milliseconds (process context only; it may sleep longer).
pub fn msleep(msecs: u32) {
    // SAFETY: `msleep` may be called from any sleepable context with any value.
    unsafe { bindings::msleep(msecs) }
}
