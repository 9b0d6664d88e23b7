// SPDX-License-Identifier: GPL-2.0

//! Work request slots: what a queue keeps for each request it posted, until the completion
//! that names the request takes it back.
//!
//! A request's `wr_id` is `serial << 32 | index`: the slot's index, and the serial of the
//! queue at the time, renewed when the queue is reset so that a completion of a request the
//! reset discarded matches none posted afterwards.
//!
//! Posting and completing run on different CPUs at once (a send posted from the transmit
//! path while NAPI reaps the last one), and a reset takes every slot back. Each slot has a
//! state word: a slot is claimed, filled, taken and emptied by compare-and-exchange on that
//! word alone, so a post and a completion never wait for each other, and whoever moved a
//! slot to `BUSY` is the only one to touch its contents. A completion sees what the post put
//! in the slot: the slot is filled (a release store) before the request reaches the device,
//! and the device completes it only after the post's doorbell.

use crate::{
    alloc::{flags::GFP_KERNEL, KVec},
    error::{code::EINVAL, Error, Result},
};
use core::{
    cell::UnsafeCell,
    sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering},
};

/// The state of a slot that holds nothing.
const EMPTY: u64 = 0;
/// The state of a slot being filled or emptied. Never a `wr_id`: no queue has 2^32 slots.
const BUSY: u64 = u64::MAX;

/// A serial for a queue, never 0: a work request id of serial 0 names no request, which is
/// what a completion already used up carries ([`super::cq::WorkCompletion::consume`]).
// Never inline: the counter is a static of this crate, which modules cannot link to; inlined
// into a module's generic code (as rustc did with other code-generation options), the
// module would not load.
#[inline(never)]
pub(crate) fn next_serial() -> u32 {
    /// Numbers every queue of this kernel, so that a completion left in a shared CQ by a
    /// destroyed queue is never taken for one of a new queue at the same address.
    static SERIAL: AtomicU32 = AtomicU32::new(1);
    loop {
        let serial = SERIAL.fetch_add(1, Ordering::Relaxed);
        if serial != 0 {
            return serial;
        }
    }
}

/// One request's entry.
///
/// # Invariants
///
/// `value` is accessed only by the thread that moved `state` to `BUSY`, as [`WorkSlots`]
/// states.
struct Slot<T> {
    /// `EMPTY`, `BUSY`, or the `wr_id` of the posted request whose `T` the slot holds.
    state: AtomicU64,
    value: UnsafeCell<Option<T>>,
}

/// What a queue keeps of each posted request, by work request index.
///
/// # Invariants
///
/// - The `value` of a slot is accessed only by the thread that moved the slot's `state` to
///   `BUSY` (by a compare-and-exchange, so one thread at a time), until that thread stores
///   another state with release ordering.
/// - A slot whose state is a `wr_id` holds `Some`: what the request of that `wr_id` uses,
///   posted or about to be; an `EMPTY` slot holds `None`.
/// - `slots` has fewer than `u32::MAX` entries, so no `wr_id` equals `BUSY`; serials are not
///   0, so no `wr_id` equals `EMPTY`.
pub(crate) struct WorkSlots<T> {
    serial: AtomicU32,
    /// Where the next claim starts looking: requests complete about in the order posted.
    next: AtomicUsize,
    slots: KVec<Slot<T>>,
}

// SAFETY: A slot's value is reached only by the one thread that holds the slot `BUSY` (type
// invariant), so sharing the table shares no `T` between threads; `T: Send` lets it move to
// whichever thread takes it.
unsafe impl<T: Send> Sync for WorkSlots<T> {}

impl<T> WorkSlots<T> {
    /// A table of `n` empty slots.
    pub(crate) fn new(n: u32) -> Result<Self> {
        let n = n.min(u32::MAX - 1);
        let mut slots = KVec::with_capacity(n as usize, GFP_KERNEL)?;
        for _ in 0..n {
            slots.push(
                Slot {
                    state: AtomicU64::new(EMPTY),
                    value: UnsafeCell::new(None),
                },
                GFP_KERNEL,
            )?;
        }
        // INVARIANT: every slot is empty; `n` is below `u32::MAX`.
        Ok(Self {
            serial: AtomicU32::new(next_serial()),
            next: AtomicUsize::new(0),
            slots,
        })
    }

    /// Claims an empty slot for a request about to be posted, preferring ring order;
    /// `None` when every slot is in use.
    #[inline]
    pub(crate) fn claim(&self) -> Option<Claim<'_, T>> {
        let n = self.slots.len();
        let start = self.next.load(Ordering::Relaxed);
        let start = if start < n { start } else { 0 };
        let mut index = start;
        loop {
            let slot = self.slots.get(index)?;
            if slot
                .state
                .compare_exchange(EMPTY, BUSY, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
            {
                let next = index + 1;
                self.next
                    .store(if next < n { next } else { 0 }, Ordering::Relaxed);
                let wr_id = (u64::from(self.serial.load(Ordering::Relaxed)) << 32) | index as u64;
                // INVARIANT: this thread moved the slot to `BUSY`; an empty slot holds `None`.
                return Some(Claim { slot, wr_id });
            }
            index = if index + 1 < n { index + 1 } else { 0 };
            if index == start {
                return None;
            }
        }
    }

    /// The slot of request `wr_id`, moved to `BUSY` by this thread; `None` if the slot does
    /// not hold that request's value (taken already, or a reset renewed the serial since).
    #[inline]
    fn seize(&self, wr_id: u64) -> Option<&Slot<T>> {
        if wr_id == EMPTY || wr_id == BUSY {
            return None;
        }
        let slot = self.slots.get((wr_id & 0xffff_ffff) as usize)?;
        slot.state
            .compare_exchange(wr_id, BUSY, Ordering::Acquire, Ordering::Relaxed)
            .ok()?;
        Some(slot)
    }

    /// Takes what the request `wr_id` left in its slot, if the slot still holds that
    /// request's (it does not once taken, or after a reset renewed the serial).
    #[inline]
    pub(crate) fn take(&self, wr_id: u64) -> Option<T> {
        let slot = self.seize(wr_id)?;
        // SAFETY: This thread moved the slot to `BUSY` (`seize`), so no other accesses the
        // value until the store below (type invariant).
        let value = unsafe { (*slot.value.get()).take() };
        // INVARIANT: the slot is emptied, then released.
        slot.state.store(EMPTY, Ordering::Release);
        value
    }

    /// Runs `f` on what the request `wr_id` left in its slot, where it lies, then empties the
    /// slot, dropping what `f` left in place; `None` if the slot does not hold that
    /// request's (as [`WorkSlots::take`]). For values too big to move cheaply.
    #[inline]
    pub(crate) fn take_with<R>(&self, wr_id: u64, f: impl FnOnce(&mut T) -> R) -> Option<R> {
        let slot = self.seize(wr_id)?;
        // SAFETY: This thread moved the slot to `BUSY` (`seize`), so no other accesses the
        // value until the store below (type invariant).
        let value = unsafe { &mut *slot.value.get() };
        let taken = value.as_mut().map(f);
        *value = None;
        // INVARIANT: the slot is emptied, then released.
        slot.state.store(EMPTY, Ordering::Release);
        taken
    }

    /// Keeps what the request `wr_id` left in its slot there, for the request that will use
    /// it next: the slot is held as a claim is, but full. `None` if the slot does not hold
    /// that request's (as [`WorkSlots::take`]). For values posted again and again.
    #[inline]
    pub(crate) fn hold(&self, wr_id: u64) -> Option<Held<'_, T>> {
        let slot = self.seize(wr_id)?;
        // INVARIANT: this thread moved the slot to `BUSY`; a slot named by a `wr_id` holds
        // `Some`.
        Some(Held {
            slot,
            index: wr_id & 0xffff_ffff,
            serial: &self.serial,
        })
    }

    /// Takes what every request left in its slot, one by one to `f`, for a queue the device
    /// gave up (a reset, a destroy that failed). A slot another thread holds `BUSY` at that
    /// moment (a post or a completion under way) is left to it.
    pub(crate) fn drain(&self, mut f: impl FnMut(T)) {
        for slot in self.slots.iter() {
            let state = slot.state.load(Ordering::Relaxed);
            if state == EMPTY || state == BUSY {
                continue;
            }
            // The index in `state` is the slot's own: `take` finds this slot.
            if let Some(value) = self.take(state) {
                f(value);
            }
        }
    }

    /// Renews the serial: completions of requests posted so far match none posted from now
    /// on (a reset, before it takes the slots back).
    #[inline]
    pub(crate) fn renew(&self) {
        self.serial.store(next_serial(), Ordering::Relaxed);
    }

    /// Slots in use: requests posted and not completed, and posts and completions under
    /// way.
    #[inline]
    pub(crate) fn used(&self) -> usize {
        self.slots
            .iter()
            .filter(|slot| slot.state.load(Ordering::Relaxed) != EMPTY)
            .count()
    }
}

/// A slot claimed for a request: filled with what the request uses ([`Claim::fill`]) just
/// before it is posted, or given back empty when dropped.
///
/// # Invariants
///
/// The claim moved `slot` to `BUSY` and holds it so; the slot's value is `None`. `wr_id`
/// names the slot (its index) under the table's serial at the time of the claim.
pub(crate) struct Claim<'a, T> {
    slot: &'a Slot<T>,
    wr_id: u64,
}

impl<T> Claim<'_, T> {
    /// Puts `value` in the slot and returns the `wr_id` to post the request with: from now
    /// on the completion of that `wr_id` (or a reset) takes it back.
    #[inline]
    pub(crate) fn fill(self, value: T) -> u64 {
        let this = core::mem::ManuallyDrop::new(self);
        // SAFETY: The claim holds the slot `BUSY` (type invariant), so this thread alone
        // accesses the value until the store below; it is `None`, so nothing is dropped.
        unsafe { this.slot.value.get().write(Some(value)) };
        // INVARIANT: the slot holds the request's value before it names the request.
        this.slot.state.store(this.wr_id, Ordering::Release);
        this.wr_id
    }

    /// Makes the request's value in the slot itself, for values too big to move cheaply:
    /// `make` gets the empty slot, fills it and prepares the value for the device. On
    /// success returns the `wr_id` to post the request with, as [`Claim::fill`], and what
    /// `make` returned. If `make` fails, or leaves the slot empty, the slot is given back
    /// and its value returned to be freed.
    #[inline]
    pub(crate) fn fill_with<R>(
        self,
        make: impl FnOnce(&mut Option<T>) -> Result<R>,
    ) -> core::result::Result<(u64, R), (Error, Option<T>)> {
        // SAFETY: The claim holds the slot `BUSY` (type invariant), so this thread alone
        // accesses the value until the claim ends (below, or its drop).
        let value = unsafe { &mut *self.slot.value.get() };
        match make(value) {
            Ok(made) if value.is_some() => {
                let this = core::mem::ManuallyDrop::new(self);
                // INVARIANT: the slot holds the request's value before it names the request.
                this.slot.state.store(this.wr_id, Ordering::Release);
                Ok((this.wr_id, made))
            }
            // INVARIANT: emptied before the claim's drop gives the slot back.
            Ok(_) => Err((EINVAL, value.take())),
            Err(e) => Err((e, value.take())),
        }
    }
}

impl<T> Drop for Claim<'_, T> {
    fn drop(&mut self) {
        // INVARIANT: the claim never filled the slot, or emptied it again.
        self.slot.state.store(EMPTY, Ordering::Release);
    }
}

/// A slot held with the value a completed request left in it, to be used by the next request
/// where it lies ([`Held::refill`]); dropping it empties the slot, dropping the value.
///
/// # Invariants
///
/// The holder moved `slot` to `BUSY` and keeps it so; the slot's value is `Some`. `index` is
/// the slot's index in the table whose serial is `serial`.
pub(crate) struct Held<'a, T> {
    slot: &'a Slot<T>,
    index: u64,
    serial: &'a AtomicU32,
}

impl<T> Held<'_, T> {
    /// The value, for the holder alone.
    #[inline]
    pub(crate) fn value(&mut self) -> Option<&mut T> {
        // SAFETY: The slot is `BUSY` by this holder (type invariant), so this thread alone
        // accesses the value while `self` is borrowed.
        unsafe { (*self.slot.value.get()).as_mut() }
    }

    /// Names the slot's value as the value of a new request, and returns the request's
    /// `wr_id`, as [`Claim::fill`] does.
    #[inline]
    pub(crate) fn refill(self) -> u64 {
        let this = core::mem::ManuallyDrop::new(self);
        let wr_id = (u64::from(this.serial.load(Ordering::Relaxed)) << 32) | this.index;
        // INVARIANT: the slot still holds `Some` (only `value` reached it, which cannot empty
        // it), so it holds the request's value before it names the request.
        this.slot.state.store(wr_id, Ordering::Release);
        wr_id
    }
}

impl<T> Drop for Held<'_, T> {
    fn drop(&mut self) {
        // SAFETY: The slot is `BUSY` by this holder (type invariant); emptied before it is
        // released.
        let value = unsafe { (*self.slot.value.get()).take() };
        // INVARIANT: the slot is emptied, then released.
        self.slot.state.store(EMPTY, Ordering::Release);
        drop(value);
    }
}
