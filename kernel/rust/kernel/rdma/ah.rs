// SPDX-License-Identifier: GPL-2.0

//! Address handles: where a UD send goes.
//!
//! The route is an [`AhAttr`], built for an InfiniBand LID, a RoCE GID, a path record or a
//! multicast group; a UD queue pair makes an [`AddressHandle`] of it, which it alone can
//! send through, and which a send in flight keeps alive: dropping the last reference never
//! frees a handle the device still uses.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h).
//!
//! # Examples
//!
//! ```
//! use kernel::net::skb::SkBuff;
//! use kernel::prelude::*;
//! use kernel::rdma::ah::{AddressHandle, AhAttr};
//! use kernel::rdma::qp::QueuePair;
//! use kernel::sync::Arc;
//!
//! /// The handle through which `qp` sends to LID `dlid` of its subnet, on port 1.
//! fn to_lid(qp: &QueuePair<SkBuff>, dlid: u16) -> Result<Arc<AddressHandle>> {
//!     qp.address_handle(&AhAttr::ib(1, dlid, 0))
//! }
//! # let _ = to_lid;
//!
//! // A route is plain data until a queue pair makes a handle of it.
//! let route = AhAttr::ib(1, 0x12, 0);
//! drop(route);
//! ```

use super::{
    cm::{GidAttr, PathRecord},
    device::{Device, Gid, Protocol},
    pd::ProtectionDomain,
    sa::McMemberRecord,
};
use crate::{
    alloc::{flags::GFP_KERNEL, KBox},
    bindings,
    error::{code::EINVAL, from_err_ptr, to_result, Result},
    prelude::*,
    sync::{Arc, SpinLockBh},
};
use core::{
    ptr::NonNull,
    sync::atomic::{AtomicU64, Ordering},
};

/// Route attributes for an address handle (`struct rdma_ah_attr`).
///
/// # Invariants
///
/// `grh.sgid_attr` is null or holds a reference of its own, released on drop.
pub struct AhAttr(bindings::rdma_ah_attr);

impl AhAttr {
    fn zeroed() -> bindings::rdma_ah_attr {
        // SAFETY: `rdma_ah_attr` is integers, C enums, arrays and a nullable pointer.
        unsafe { core::mem::zeroed() }
    }

    /// A RoCE destination: `dgid` reached from GID `sgid_index` of `port` through the
    /// Ethernet address `dmac`, with `hop_limit` (see `Device::resolve_roce_dmac`).
    pub fn roce(port: u32, sgid_index: u8, dgid: &Gid, hop_limit: u8, dmac: [u8; 6]) -> Self {
        let mut a = Self::zeroed();
        a.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE;
        a.port_num = port;
        a.ah_flags = bindings::ib_ah_flags_IB_AH_GRH as u8;
        a.grh.dgid = bindings::ib_gid { raw: dgid.0 };
        a.grh.sgid_index = sgid_index;
        a.grh.hop_limit = hop_limit;
        a.__bindgen_anon_1.roce = bindings::roce_ah_attr { dmac };
        // INVARIANT: No source GID attribute.
        Self(a)
    }

    /// An InfiniBand destination on the local subnet: `dlid` on service level `sl`.
    pub fn ib(port: u32, dlid: u16, sl: u8) -> Self {
        let mut a = Self::zeroed();
        a.type_ = bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_IB;
        a.port_num = port;
        a.sl = sl;
        a.__bindgen_anon_1.ib = bindings::ib_ah_attr {
            dlid,
            src_path_bits: 0,
        };
        // INVARIANT: No source GID attribute.
        Self(a)
    }

    /// The route of `path` (from an SA query, or [`PathRecord::roce_v2`] on RoCE) out of
    /// `port` of `device`, sent from `sgid`, or without it from the entry of the port's GID
    /// table that holds the path's source GID.
    pub fn from_path(
        device: &Device,
        port: u32,
        path: &PathRecord,
        sgid: Option<&GidAttr>,
    ) -> Result<Self> {
        if !device.ports().contains(&port) {
            return Err(EINVAL);
        }
        let mut a = Self::zeroed();
        let mut rec = path.0;
        let sgid = sgid.map_or(core::ptr::null(), GidAttr::as_raw);
        // SAFETY: The device is valid and `port` one of its ports; `rec` and `a` are valid for
        // the call; `sgid` is null or a referenced GID attribute. On success `a` holds a GID
        // attribute reference of its own (or none).
        to_result(unsafe {
            bindings::ib_init_ah_attr_from_path(device.as_raw(), port, &mut rec, &mut a, sgid)
        })?;
        // INVARIANT: see above.
        Ok(Self(a))
    }

    /// The route to the group of `rec` out of `port` of `device`: on InfiniBand the group's
    /// LID, on RoCE the group's Ethernet multicast address (see [`Gid::multicast_mac`]).
    /// The source GID is the record's port GID, which must be in the port's table.
    pub fn from_mcmember(device: &Device, port: u32, rec: &McMemberRecord) -> Result<Self> {
        if !device.ports().contains(&port) {
            return Err(EINVAL);
        }
        let mut a = Self::zeroed();
        let mut raw = *rec.raw();
        // On RoCE the source GID is looked up among the entries of the port's own network
        // device: a VLAN device above it may have an entry with the same GID.
        let ndev = match device.protocol(port)? {
            Protocol::Roce => Some(device.netdev(port)?),
            _ => None,
        };
        let ndev_raw = ndev.as_ref().map_or(core::ptr::null_mut(), |n| n.as_raw());
        // SAFETY: The device is valid and `port` one of its ports; `raw` and `a` are valid for
        // the call; `ndev_raw` is null or a network device we hold a reference to. On
        // success `a` holds a GID attribute reference of its own.
        to_result(unsafe {
            bindings::ib_init_ah_from_mcmember(
                device.as_raw(),
                port,
                &mut raw,
                ndev_raw,
                rec.gid_type(),
                &mut a,
            )
        })?;
        if a.type_ == bindings::rdma_ah_attr_type_RDMA_AH_ATTR_TYPE_ROCE {
            a.__bindgen_anon_1.roce = bindings::roce_ah_attr {
                dmac: rec.mgid().multicast_mac(),
            };
        }
        // INVARIANT: see above.
        Ok(Self(a))
    }
}

impl Drop for AhAttr {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the GID attribute, if any, is referenced by us; the
        // call releases it and nothing else.
        unsafe { bindings::rdma_destroy_ah_attr(&mut self.0) };
    }
}

/// An address handle (`struct ib_ah`): the destination of UD sends, made for one UD queue
/// pair ([`QueuePair::address_handle`]) and usable only with it.
///
/// Sends take no reference to it. As the C IPoIB driver does with `ah->last_send` and its
/// list of dead handles, each send through the handle records its number here, and when the
/// last reference goes the C object is kept by the queue pair until that send was taken
/// back; [`QueuePair::reap_address_handles`] then destroys it, in process context, as some
/// providers (rxe) need. While the queue pair lives, dropping a handle is therefore cheap
/// and allowed in any context but hard interrupts; once it is gone, a handle is destroyed
/// when dropped, which must then be in process context.
///
/// [`QueuePair::address_handle`]: super::qp::QueuePair::address_handle
/// [`QueuePair::reap_address_handles`]: super::qp::QueuePair::reap_address_handles
///
/// # Invariants
///
/// `ah` is the C object `remains` owns, which is `Some` until `drop`. `last_send` is at
/// least the number `clock` gave the last send posted through it (0 for none): a post the
/// device refused leaves the number the next send gets.
pub struct AddressHandle {
    ah: NonNull<bindings::ib_ah>,
    last_send: AtomicU64,
    clock: Arc<SendClock>,
    remains: Option<KBox<Remains>>,
}

// SAFETY: The core allows address handles to be used and destroyed from any thread.
unsafe impl Send for AddressHandle {}
// SAFETY: Shared use only passes the pointer to the core and stores a send number atomically;
// `remains` is reached by `drop` alone.
unsafe impl Sync for AddressHandle {}

impl AddressHandle {
    /// Creates an address handle for `attr` in `pd`, for the queue pair `clock` numbers the
    /// sends of. May sleep.
    pub(crate) fn new(
        pd: &Arc<ProtectionDomain>,
        clock: &Arc<SendClock>,
        attr: &AhAttr,
    ) -> Result<Arc<Self>> {
        let mut raw = attr.0;
        // Allocated first: nothing to undo if it fails.
        let mut remains = KBox::new(
            Remains {
                ah: None,
                _pd: pd.clone(),
                last_send: 0,
                may_sleep: false,
                next: None,
            },
            GFP_KERNEL,
        )?;
        // SAFETY: `pd` is valid; `raw` is a valid attribute set, copied so the core may fill in
        // (and release again) its GID attribute; a GID attribute already set stays referenced
        // by `attr` during the call, and the core takes its own reference if it keeps it; the
        // flag lets the core sleep.
        let ah = from_err_ptr(unsafe {
            bindings::rdma_create_ah(
                pd.as_raw(),
                &mut raw,
                bindings::rdma_create_ah_flags_RDMA_CREATE_AH_SLEEPABLE,
            )
        })?;
        let ah = NonNull::new(ah).ok_or(EINVAL)?;
        // INVARIANT: `ah` was just created in `pd`; `remains` owns it from here on.
        remains.ah = Some(ah);
        // INVARIANT: no send went through it yet. Should the allocation fail, the handle is
        // dropped, and its object destroyed by the next reap.
        Ok(Arc::new(
            Self {
                ah,
                last_send: AtomicU64::new(0),
                clock: clock.clone(),
                remains: Some(remains),
            },
            GFP_KERNEL,
        )?)
    }

    #[inline]
    pub(crate) fn as_raw(&self) -> *mut bindings::ib_ah {
        self.ah.as_ptr()
    }

    /// Whether sends through the handle are numbered by `clock` (the handle was made for
    /// the queue pair that owns it).
    #[inline]
    pub(crate) fn is_of(&self, clock: &SendClock) -> bool {
        core::ptr::eq(&*self.clock, clock)
    }

    /// Records that the send numbered `serial` goes through the handle (under the queue
    /// pair's posting lock, so the numbers stored only grow).
    #[inline]
    pub(crate) fn mark_sent(&self, serial: u64) {
        self.last_send.store(serial, Ordering::Relaxed);
    }
}

impl Drop for AddressHandle {
    fn drop(&mut self) {
        if let Some(mut remains) = self.remains.take() {
            remains.last_send = *self.last_send.get_mut();
            self.clock.bury(remains);
        }
    }
}

/// The C object of an address handle whose last reference went, with what it needs, until
/// no send uses it: an entry of a [`SendClock`]'s list.
///
/// # Invariants
///
/// `ah`, once set, was returned by `rdma_create_ah` in `pd` and is destroyed only in `drop`.
struct Remains {
    ah: Option<NonNull<bindings::ib_ah>>,
    /// The domain the object was made in, alive until it is destroyed.
    _pd: Arc<ProtectionDomain>,
    /// At least the number of the last send posted through the handle.
    last_send: u64,
    /// Destroyed in process context: the core may sleep.
    may_sleep: bool,
    next: Option<KBox<Remains>>,
}

impl Drop for Remains {
    fn drop(&mut self) {
        // The rest of the list goes one by one, not by recursion (thousands of handles may
        // go at once).
        let mut next = self.next.take();
        while let Some(mut r) = next {
            next = r.next.take();
            r.may_sleep = self.may_sleep;
            drop(r);
        }
        let Some(ah) = self.ah else {
            return;
        };
        let flags = if self.may_sleep {
            bindings::rdma_destroy_ah_flags_RDMA_DESTROY_AH_SLEEPABLE
        } else {
            0
        };
        // SAFETY: `ah` is valid and destroyed only here (type invariant); the domain it was
        // made in is still referenced; the flags tell the core whether it may sleep. The
        // core's result is not acted on: the object is unusable either way (C ignores it
        // too).
        unsafe { bindings::rdma_destroy_ah_user(ah.as_ptr(), flags, core::ptr::null_mut()) };
    }
}

// SAFETY: The core allows address handles to be destroyed from any thread.
unsafe impl Send for Remains {}

/// Whether the queue pair a [`SendClock`] numbers the sends of still exists.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Owner {
    /// It exists: handles wait for their last send to be taken back.
    Live,
    /// It was destroyed: no send is in flight any more.
    Destroyed,
    /// Its destroy failed: the device may still read every handle, which is never freed.
    Leaked,
}

/// Handles waiting for their last send.
struct Graves {
    head: Option<KBox<Remains>>,
    len: usize,
    owner: Owner,
}

/// The numbering of a UD queue pair's sends and the address handles waiting on it.
///
/// Sends are numbered from 1 as the device takes them, and counted as they are taken back,
/// by their completion or by a reset of the queue pair. A send queue completes in order
/// (InfiniBand Architecture Specification, 10.8.3: work requests on a queue complete in the
/// order they were submitted), and a reset ends every send in flight: so when `n` sends
/// were taken back, sends 1 to `n` are over, and a handle whose last send is at most `n`
/// is used by none.
///
/// # Invariants
///
/// `completed` is at most the number of sends that are over, and those are the first ones
/// posted: it grows only as sends are taken back, each once.
#[pin_data]
pub(crate) struct SendClock {
    completed: AtomicU64,
    #[pin]
    graves: SpinLockBh<Graves>,
}

impl SendClock {
    /// A clock of no send, for a new queue pair.
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::pin_init(
            pin_init!(Self {
                completed: AtomicU64::new(0),
                graves <- crate::new_spinlock_bh!(
                    Graves {
                        head: None,
                        len: 0,
                        owner: Owner::Live,
                    },
                    "SendClock::graves"
                ),
            }),
            GFP_KERNEL,
        )
    }

    /// `n` sends were taken back (from the queue pair only: by completions, or by a reset
    /// once the device dropped them).
    #[inline]
    pub(crate) fn taken_back(&self, n: u64) {
        // INVARIANT: the caller took back `n` sends, each once.
        self.completed.fetch_add(n, Ordering::Release);
    }

    /// Keeps `remains` until its last send was taken back; at once gone if the queue pair
    /// is (leaked if the queue pair's destroy failed).
    fn bury(&self, mut remains: KBox<Remains>) {
        let mut graves = self.graves.lock();
        match graves.owner {
            Owner::Live => {
                remains.next = graves.head.take();
                graves.head = Some(remains);
                graves.len += 1;
            }
            Owner::Destroyed => {
                drop(graves);
                // Destroyed here, with no lock held.
                drop(remains);
            }
            Owner::Leaked => core::mem::forget(remains),
        }
    }

    /// Destroys the handles whose last send was taken back; returns how many. Process
    /// context: some providers sleep or take locks softirqs take when destroying one.
    pub(crate) fn reap(&self) -> usize {
        let mut list = {
            let mut graves = self.graves.lock();
            graves.len = 0;
            graves.head.take()
        };
        let done = self.completed.load(Ordering::Acquire);
        let (mut kept, mut kept_len, mut dead, mut reaped) = (None, 0, None, 0);
        while let Some(mut r) = list {
            list = r.next.take();
            if r.last_send <= done {
                r.next = dead.take();
                dead = Some(r);
                reaped += 1;
            } else {
                r.next = kept.take();
                kept = Some(r);
                kept_len += 1;
            }
        }
        if kept.is_some() {
            // The handles still in use go back, with any buried meanwhile (few).
            let mut graves = self.graves.lock();
            let mut newer = graves.head.take();
            while let Some(mut r) = newer {
                newer = r.next.take();
                r.next = kept.take();
                kept = Some(r);
            }
            graves.head = kept;
            graves.len += kept_len;
        }
        if let Some(r) = dead.as_mut() {
            r.may_sleep = true;
        }
        // Destroyed here, with no lock held.
        drop(dead);
        reaped
    }

    /// How many handles wait for a send to be taken back (or for a reap).
    #[inline]
    pub(crate) fn waiting(&self) -> usize {
        self.graves.lock().len
    }

    /// The queue pair is gone (process context): `destroyed` if the device accesses none of
    /// its work any more, and the handles waiting go; otherwise they are leaked, as those
    /// dropped later.
    pub(crate) fn close(&self, destroyed: bool) {
        let mut list = {
            let mut graves = self.graves.lock();
            graves.owner = if destroyed {
                Owner::Destroyed
            } else {
                Owner::Leaked
            };
            graves.len = 0;
            graves.head.take()
        };
        if !destroyed {
            core::mem::forget(list);
            return;
        }
        if let Some(r) = list.as_mut() {
            r.may_sleep = true;
        }
        drop(list);
    }
}
