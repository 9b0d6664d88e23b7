// SPDX-License-Identifier: GPL-2.0

//! NAPI: polled packet processing for network devices.
//!
//! C header: [`include/linux/netdevice.h`](srctree/include/linux/netdevice.h).
//!
//! A driver implements [`Poll`] for what its poll function keeps from round to round (a
//! batch of completions to poll into, for example), makes a [`NapiContext`] of it and gives
//! it to its device as the registration sets the device up ([`Configure::add_napi`]); a device
//! may have several. The device enables its contexts before `open` and disables them after
//! `stop`, so poll functions only run while the interface is up, and deletes them when it
//! is released. [`NapiHandle`]s schedule a context from anywhere (a completion interrupt,
//! for example). Scheduling a context not yet added, disabled or deleted polls nothing
//! then (the core remembers it was asked, and the first round after the context is enabled
//! is followed by another), and a handle keeps the context's memory alive, so a handle that
//! outlives the device is harmless.
//!
//! A poll round ends in one of two ways, and its [`Budget`] is consumed by the one taken:
//! the whole budget used (the core polls again), or fewer packets and the context completed.
//! A round cannot do both, which would leave the core polling a context no longer
//! scheduled.
//!
//! # Examples
//!
//! A device with two contexts, each scheduled and polled once it is up:
//!
//! ```
//! use core::sync::atomic::{AtomicU32, Ordering};
//! use kernel::c_str;
//! use kernel::delay::msleep;
//! use kernel::net::dev::{NetDevice, Operations, Registration, Setup, TxResult};
//! use kernel::net::napi::{Budget, Napi, NapiContext, Poll, Polled};
//! use kernel::net::rtnl::{Rtnl, RtnlGuard};
//! use kernel::net::skb::SkBuff;
//! use kernel::prelude::*;
//!
//! /// A device that drops what it sends and receives nothing.
//! struct Quiet;
//!
//! #[vtable]
//! impl Operations for Quiet {
//!     type Data = ();
//!
//!     fn setup(dev: &mut Setup<Self>) {
//!         dev.set_type(0xfffe); // ARPHRD_NONE
//!     }
//!
//!     fn open(_dev: &NetDevice, _data: (), _rtnl: &Rtnl) -> Result {
//!         Ok(())
//!     }
//!
//!     fn stop(_dev: &NetDevice, _data: (), _rtnl: &Rtnl) -> Result {
//!         Ok(())
//!     }
//!
//!     fn start_xmit(skb: SkBuff, _dev: &NetDevice, _data: ()) -> TxResult {
//!         drop(skb);
//!         TxResult::Ok
//!     }
//! }
//!
//! /// Rounds polled, per context.
//! static ROUNDS: [AtomicU32; 2] = [AtomicU32::new(0), AtomicU32::new(0)];
//!
//! /// The poll function of context `self.0`: it counts its rounds.
//! struct Counted(usize);
//!
//! impl Poll for Counted {
//!     type Device = Quiet;
//!
//!     fn poll(
//!         &mut self,
//!         _dev: &NetDevice,
//!         _data: (),
//!         _napi: &Napi,
//!         budget: Budget<'_>,
//!     ) -> Polled {
//!         ROUNDS[self.0].fetch_add(1, Ordering::Relaxed);
//!         // Nothing to handle: the round completes the context.
//!         budget.complete(0).0
//!     }
//! }
//!
//! let (first, second) = (NapiContext::new(Counted(0))?, NapiContext::new(Counted(1))?);
//! let handles = [first.handle(), second.handle()];
//! // Not added to a device yet: scheduling polls nothing.
//! assert!(!handles[0].schedule());
//! let reg = Registration::<Quiet>::new(c_str!("rsdoc%d"), &[], (), |setup| {
//!     setup.add_napi(first);
//!     setup.add_napi(second);
//!     Ok(())
//! })?;
//! // Added, but disabled while the device is down.
//! assert!(!handles[1].schedule());
//! reg.device().set_up(&RtnlGuard::lock(), true)?;
//! for (handle, rounds) in handles.iter().zip(&ROUNDS) {
//!     assert!(handle.schedule());
//!     let mut waited = 0;
//!     while rounds.load(Ordering::Relaxed) == 0 && waited < 100 {
//!         msleep(10);
//!         waited += 1;
//!     }
//!     // One round, and maybe the one the core owes the context for the schedule above.
//!     assert!((1..=2).contains(&rounds.load(Ordering::Relaxed)));
//! }
//! // Unregistering disables and deletes the contexts; the handles stay safe to use.
//! drop(reg);
//! assert!(!handles[0].schedule() && !handles[1].schedule());
//! # Ok::<(), Error>(())
//! ```
//!
//! [`Configure::add_napi`]: super::dev::Configure::add_napi

use super::{
    dev::{Adapter, NetDevice, Operations},
    skb::SkBuff,
};
use crate::{
    bindings,
    ffi::c_int,
    prelude::*,
    sync::Arc,
    types::{ForeignOwnable, Opaque},
};
use core::cell::UnsafeCell;

/// A poll function and what it keeps from round to round (`self`), for the devices of
/// `Self::Device`.
///
/// The value is dropped with the context, when the device and the last [`NapiHandle`] have
/// let go of it: maybe in atomic context (a handle dropped by an interrupt handler), so its
/// drop must not sleep.
pub trait Poll: Send + 'static {
    /// The operations of the devices the context is added to: each round borrows the
    /// polled device's data.
    type Device: Operations;

    /// Polls for received packets and completions in softirq context, handling at most
    /// `budget.get()` packets, and ends the round through `budget`: all of it used, or the
    /// context completed. Only runs while the interface is up. The core never runs two
    /// rounds of one context at once, so each has `self` mutably, without a lock.
    fn poll(
        &mut self,
        dev: &NetDevice,
        data: <<Self::Device as Operations>::Data as ForeignOwnable>::Borrowed<'_>,
        napi: &Napi,
        budget: Budget<'_>,
    ) -> Polled;
}

/// A NAPI context (`struct napi_struct`) and the state of its poll function, in an [`Arc`]
/// so that [`NapiHandle`]s keep its memory valid.
///
/// # Invariants
///
/// `napi` is all-zero with its SCHED bit set (as a disabled context has it) until it is
/// added to a device of `P::Device` ([`Configure::add_napi`], with [`poll_callback`] for `P` as
/// its poll function), which then holds a reference to the block (from `Arc::into_raw`)
/// and deletes the context ([`release_all`]) before the device is freed: at every time,
/// scheduling it is a no-op or schedules a context added to a live device. `state` is
/// reached only by that poll function. The context is the first field of the header, the
/// header that of the block, both `repr(C)`: a pointer to the context is one to the block.
///
/// [`Configure::add_napi`]: super::dev::Configure::add_napi
#[repr(C)]
struct NapiBlock<P: Poll> {
    header: NapiHeader,
    state: UnsafeCell<P>,
}

/// The part of a [`NapiBlock`] that does not depend on its poll state, at its start.
#[repr(C)]
struct NapiHeader {
    napi: Opaque<bindings::napi_struct>,
    /// Gives back the device's reference to the block ([`NapiBlock::put`] for its `P`).
    put: unsafe fn(*mut bindings::napi_struct),
}

// SAFETY: The context is only scheduled through `napi_schedule`, which any thread may call;
// the core serialises polling, and the state is `Send`.
unsafe impl<P: Poll> Send for NapiBlock<P> {}
// SAFETY: Shared access only schedules the context (callable concurrently from any
// context); the state is reached by the poll function alone, one round at a time.
unsafe impl<P: Poll> Sync for NapiBlock<P> {}

impl<P: Poll> NapiBlock<P> {
    /// Gives back the reference that the device of the context `napi` holds.
    ///
    /// # Safety
    ///
    /// `napi` must be the context of a `NapiBlock<P>` added to a device, now deleted from
    /// it, and this is called once per addition.
    unsafe fn put(napi: *mut bindings::napi_struct) {
        // SAFETY: A pointer to the context is one to the block (type invariant), whose
        // reference the device took with `Arc::into_raw` when the context was added.
        drop(unsafe { Arc::from_raw(napi.cast::<Self>().cast_const()) });
    }
}

/// A NAPI context whose poll function is `P`, not yet added to a device: give it to one
/// with [`Configure::add_napi`], which takes it (a context belongs to one device).
///
/// [`Configure::add_napi`]: super::dev::Configure::add_napi
pub struct NapiContext<P: Poll>(Arc<NapiBlock<P>>);

impl<P: Poll> NapiContext<P> {
    /// A context whose poll function starts with `state`. Until a device enables it,
    /// scheduling it polls nothing.
    pub fn new(state: P) -> Result<Self> {
        // SAFETY: All-zero is a valid `napi_struct` (integers, null pointers, `None` callbacks,
        // lists the core initialises when the context is added): what C drivers embed in
        // their zeroed private data before adding it.
        let mut raw = unsafe { core::mem::zeroed::<bindings::napi_struct>() };
        // `netif_napi_add_weight` sets this bit too; `napi_enable` clears it.
        raw.state = 1 << bindings::NAPI_STATE_SCHED;
        // INVARIANT: Zeroed with SCHED set, not added; the block is `repr(C)` with the
        // context first.
        let block = Arc::new(
            NapiBlock {
                header: NapiHeader {
                    napi: Opaque::new(raw),
                    put: NapiBlock::<P>::put,
                },
                state: UnsafeCell::new(state),
            },
            GFP_KERNEL,
        )?;
        Ok(Self(block))
    }

    /// A handle that schedules the context.
    #[inline]
    pub fn handle(&self) -> NapiHandle {
        // INVARIANT: The context of the block the handle keeps. Only scheduled through it,
        // so a pointer to the context alone is enough.
        NapiHandle {
            napi: self.0.header.napi.get(),
            _block: self.0.clone(),
        }
    }

    /// Adds the context to `dev`, which takes the context's reference.
    ///
    /// # Safety
    ///
    /// `dev` must be a device set up for `P::Device` (by `alloc`), not yet registered and
    /// used by nobody else, that [`Adapter::register`] completes or [`release_all`] clears
    /// before it is freed.
    pub(crate) unsafe fn add(self, dev: *mut bindings::net_device) {
        // The device's reference, given back by `put` once the context is deleted. The poll
        // function and `put` reach the whole block and its `Arc` from the context: its
        // pointer is the one `into_raw` gives (the context comes first in the block).
        let napi = Arc::into_raw(self.0)
            .cast_mut()
            .cast::<bindings::napi_struct>();
        // The context starts disabled; `open` enables it.
        // SAFETY: `dev` is valid and ours alone (the caller's guarantee); the context was
        // never added (the context is consumed by this), and its block stays allocated while
        // it is on the device's list: the device holds a reference to it until it deletes
        // it.
        // INVARIANT: Added with `poll_callback::<P>` to a device of `P::Device`.
        unsafe {
            bindings::netif_napi_add_weight(
                dev,
                napi,
                Some(poll_callback::<P>),
                bindings::NAPI_POLL_WEIGHT as i32,
            )
        };
    }
}

/// Runs `f` on each NAPI context of `dev`.
///
/// # Safety
///
/// `dev` must be a valid device whose contexts are all those of [`NapiBlock`]s, and calling
/// `f` on each must be safe. `f` may delete the context it is given, no other.
unsafe fn for_each(dev: *mut bindings::net_device, mut f: impl FnMut(*mut bindings::napi_struct)) {
    // SAFETY: `dev` is valid.
    let head = unsafe { core::ptr::addr_of_mut!((*dev).napi_list) };
    // SAFETY: `head` is the device's list, valid, changed only by its owner (us).
    let mut node = unsafe { (*head).next };
    while node != head {
        // Read before `f`, which may take `node` off the list.
        // SAFETY: `node` is an entry of the list.
        let next = unsafe { (*node).next };
        // SAFETY: The list links contexts by their `dev_list` member.
        let napi = unsafe { crate::container_of!(node, bindings::napi_struct, dev_list) };
        f(napi.cast_mut());
        node = next;
    }
}

/// Enables the contexts of `dev`.
///
/// # Safety
///
/// `dev` must be a device of ours (set up by [`Adapter::register`]), being opened: its
/// contexts are added and disabled.
pub(crate) unsafe fn enable_all(dev: *mut bindings::net_device) {
    let enable = |napi| {
        // SAFETY: A context of the device being opened: added and disabled.
        unsafe { bindings::napi_enable(napi) }
    };
    // SAFETY: As required above; `enable` deletes no context.
    unsafe { for_each(dev, enable) };
}

/// Disables the contexts of `dev`, waiting for the rounds under way.
///
/// # Safety
///
/// `dev` must be a device of ours whose contexts are enabled, in process context.
pub(crate) unsafe fn disable_all(dev: *mut bindings::net_device) {
    let disable = |napi| {
        // SAFETY: An enabled context of the device, in process context.
        unsafe { bindings::napi_disable(napi) }
    };
    // SAFETY: As required above; `disable` deletes no context.
    unsafe { for_each(dev, disable) };
}

/// Deletes the contexts of `dev` and gives back its references to them.
///
/// # Safety
///
/// `dev` must be a valid device whose contexts were all added by [`NapiContext::add`] (only
/// [`super::dev::Configure::add_napi`] adds contexts to our devices) and are disabled (never
/// enabled, or disabled by `stop`), and on which no callback of ours runs any more: not
/// registered, or unregistered.
pub(crate) unsafe fn release_all(dev: *mut bindings::net_device) {
    let release = |napi: *mut bindings::napi_struct| {
        // SAFETY: Added by `NapiContext::add`, so the context of a `NapiBlock`, which
        // starts with its header, itself with the context (both `repr(C)`); `put` is the
        // block's own.
        let put = unsafe { (*napi.cast::<NapiHeader>()).put };
        // SAFETY: The context is on the device's list and disabled (the safety
        // requirements); this takes it off the list.
        unsafe { bindings::netif_napi_del(napi) };
        // SAFETY: Deleted just above, given back once.
        unsafe { put(napi) };
    };
    // SAFETY: As required above; `release` deletes only the context it is given.
    unsafe { for_each(dev, release) };
}

/// The core's call of the poll function of a context added by [`NapiContext::add`].
///
/// # Safety
///
/// Called by the networking core only, for a context of a `NapiBlock<P>` added to a device
/// of `P::Device`, while the context is enabled (the interface is up).
unsafe extern "C" fn poll_callback<P: Poll>(
    napi: *mut bindings::napi_struct,
    budget: c_int,
) -> c_int {
    // SAFETY: The context is the first field of a `NapiBlock<P>` (its type invariant),
    // alive while it is added.
    let cell = unsafe { core::ptr::addr_of!((*napi.cast::<NapiBlock<P>>()).state) };
    // SAFETY: Only this poll function reaches the state (type invariant of `NapiBlock`),
    // and the core never runs two rounds of a context at once: no other reference to it
    // exists while the call lasts.
    let state = unsafe { &mut *UnsafeCell::raw_get(cell) };
    // SAFETY: The context is being polled, for this call.
    let napi = unsafe { Napi::from_raw(napi) };
    let dev = napi.device();
    // SAFETY: A context added to a device of `P::Device` is polled while the device is
    // registered and up, set up by `Adapter::register`.
    let data = unsafe { Adapter::<P::Device>::data(dev.as_raw()) };
    let limit = u32::try_from(budget).unwrap_or(0);
    // SAFETY: `napi` is being polled in this round, of budget `limit`.
    let budget = unsafe { Budget::new(napi, limit) };
    let done = state.poll(dev, data, napi, budget).work_done();
    c_int::try_from(done).unwrap_or(0)
}

/// Schedules a NAPI context; cheap to clone and valid after the device is gone (then it
/// does nothing).
///
/// # Invariants
///
/// `napi` is the context of the [`NapiBlock`] that `_block` keeps alive, which is therefore
/// never scheduled unless added to a live device.
#[derive(Clone)]
pub struct NapiHandle {
    /// Kept, rather than asked of the block, so that scheduling makes no indirect call.
    napi: *mut bindings::napi_struct,
    _block: Arc<dyn Send + Sync>,
}

// SAFETY: `napi` is only scheduled, which any thread may do; the block is `Send + Sync`.
unsafe impl Send for NapiHandle {}
// SAFETY: As above: shared access only schedules the context.
unsafe impl Sync for NapiHandle {}

impl NapiHandle {
    /// Asks for a poll soon, unless one is pending or the context is disabled. Callable
    /// from any context, interrupts included. Returns whether this call scheduled it.
    #[inline]
    pub fn schedule(&self) -> bool {
        // SAFETY: The block is alive (we hold a reference); a context not yet added, disabled
        // or deleted has its SCHED bit set, which makes this a no-op, and an added one is
        // on a live device (type invariants).
        unsafe { schedule(self.napi) }
    }
}

/// Asks for a poll of `napi` soon, as `napi_schedule` (inline in C) does: the call that
/// claims the context's scheduled bit queues it. Returns whether this call did.
///
/// # Safety
///
/// `napi` must point to a context whose block is alive and that is added to a live device,
/// or whose scheduled bit is set (not yet added, disabled or deleted), which makes this a
/// no-op.
#[inline]
unsafe fn schedule(napi: *mut bindings::napi_struct) -> bool {
    // SAFETY: `napi` is valid (the caller's guarantee).
    if !unsafe { bindings::napi_schedule_prep(napi) } {
        return false;
    }
    // SAFETY: This call claimed the context, which is now ours to queue.
    unsafe { bindings::__napi_schedule(napi) };
    true
}

/// The NAPI context as seen by a poll function.
///
/// # Invariants
///
/// A `&Napi` refers to a context being polled (from the core's poll call, in softirq
/// context, a NAPI thread or netpoll), added to a live, registered device, for the
/// lifetime of the reference.
#[repr(transparent)]
pub struct Napi(Opaque<bindings::napi_struct>);

impl Napi {
    /// # Safety
    ///
    /// `ptr` must be a NAPI context being polled, valid for `'a`.
    #[inline]
    pub(crate) unsafe fn from_raw<'a>(ptr: *mut bindings::napi_struct) -> &'a Self {
        // SAFETY: `Napi` is `repr(transparent)`; validity is the caller's guarantee.
        // INVARIANT: Being polled, as the caller guarantees.
        unsafe { &*ptr.cast() }
    }

    /// Whether this poll runs with bottom halves off and interrupts on, where NAPI's per-CPU
    /// caches may be used: every poll but netpoll's (the core polls from its softirq, a
    /// NAPI thread or a busy-polling socket, with bottom halves off), which may come from
    /// any context and marks the context `NAPI_STATE_NPSVC` while it polls. One load, where
    /// asking the CPU for its context would take three calls.
    #[inline]
    fn bh_context(&self) -> bool {
        // SAFETY: The context is valid (type invariant); `state` is an aligned word that
        // others change with atomic bit operations and compare-and-exchange only, so it is
        // read once, volatile, as C's `READ_ONCE`.
        let state = unsafe { core::ptr::read_volatile(core::ptr::addr_of!((*self.0.get()).state)) };
        // Set by netpoll on this CPU before it calls the poll, cleared after it returns;
        // `napi_disable` sets it only once no poll runs.
        state & (1 << bindings::NAPI_STATE_NPSVC) == 0
    }

    /// The device the context polls for.
    #[inline]
    pub fn device(&self) -> &NetDevice {
        // SAFETY: The context is valid (type invariant); its `dev` is set when it is added.
        let dev = unsafe { (*self.0.get()).dev };
        // SAFETY: The context is added to a live, registered device (type invariant),
        // which outlives the poll.
        unsafe { NetDevice::from_raw(dev) }
    }

    /// Allocates an skb for a packet received in this round, with `len` bytes of room (and
    /// the usual headroom): from NAPI's per-CPU caches (`napi_alloc_skb`, no interrupts
    /// masked, the skb's own memory taken in bulk) where they may be used, with bottom halves
    /// off and interrupts on, as in every round with a budget; otherwise (netpoll may poll
    /// from any context) as [`SkBuff::alloc`] does.
    #[inline]
    pub fn alloc_skb(&self, len: u32) -> Result<SkBuff> {
        if !self.bh_context() {
            return SkBuff::alloc(Some(self.device()), len, GFP_ATOMIC);
        }
        // SAFETY: The context is being polled (type invariant), on a live device, and the
        // CPU runs with bottom halves off, interrupts on (checked above), as the per-CPU
        // caches require.
        let skb = unsafe { bindings::napi_alloc_skb(self.0.get(), len) };
        if skb.is_null() {
            return Err(ENOMEM);
        }
        // SAFETY: A new skb, whose allocator (we) owns it.
        Ok(unsafe { SkBuff::from_raw(skb) })
    }

    /// Hands a received packet to the stack through GRO.
    #[inline]
    pub fn gro_receive(&self, mut skb: SkBuff) {
        skb.set_dev(self.device());
        // SAFETY: The context is being polled (type invariant); `skb` is owned and its
        // ownership passes to the stack.
        unsafe { bindings::napi_gro_receive(self.0.get(), skb.into_raw()) };
    }

    /// Asks for another poll round (after [`Budget::complete`], when events slipped in
    /// before the interrupt source was re-armed).
    #[inline]
    pub fn schedule_again(&self) -> bool {
        // SAFETY: The context is being polled, hence added and enabled.
        unsafe { schedule(self.0.get()) }
    }
}

/// What a poll round may handle: up to [`Budget::get`] packets. Made by the core's call of
/// the poll function only, and consumed by how the round ends: [`Budget::exhausted`] or
/// [`Budget::complete`].
///
/// # Invariants
///
/// `napi` is the context being polled, in the round whose budget is `limit`, which has not
/// completed it.
pub struct Budget<'a> {
    napi: &'a Napi,
    limit: u32,
}

impl<'a> Budget<'a> {
    /// # Safety
    ///
    /// `napi` must be the context being polled, in the round whose budget is `limit`.
    #[inline]
    pub(crate) unsafe fn new(napi: &'a Napi, limit: u32) -> Self {
        // INVARIANT: As the caller guarantees; nothing has completed the round yet.
        Self { napi, limit }
    }

    /// How many packets the round may handle.
    #[inline]
    pub fn get(&self) -> u32 {
        self.limit
    }

    /// Ends the round with the whole budget used: the context stays scheduled and the core
    /// polls it again.
    #[inline]
    pub fn exhausted(self) -> Polled {
        Polled(self.limit)
    }

    /// Ends the round after `work_done` packets and completes the context
    /// (`napi_complete_done`), which the next [`NapiHandle::schedule`] schedules again.
    /// `work_done` counts as less than the budget, as completing requires. Returns whether
    /// the context completed: not if it was scheduled again meanwhile (it then keeps
    /// polling), nor in a round of budget 0 (netpoll's), which must not complete.
    #[inline]
    pub fn complete(self, work_done: u32) -> (Polled, bool) {
        let Some(most) = self.limit.checked_sub(1) else {
            return (Polled(0), false);
        };
        let done = work_done.min(most);
        let work = i32::try_from(done).unwrap_or(i32::MAX);
        // SAFETY: The context is being polled by us and this round has not completed it
        // (type invariant); completing consumes the budget, so it cannot happen twice.
        let completed = unsafe { bindings::napi_complete_done(self.napi.0.get(), work) };
        (Polled(done), completed)
    }
}

/// How a poll round ended, made from its [`Budget`]: the packets it handled, which the poll
/// function returns to the core.
pub struct Polled(u32);

impl Polled {
    /// The packets handled.
    #[inline]
    pub fn work_done(&self) -> u32 {
        self.0
    }
}
