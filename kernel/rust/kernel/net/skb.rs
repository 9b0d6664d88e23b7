// SPDX-License-Identifier: GPL-2.0

//! Socket buffers.
//!
//! An [`SkBuff`] is owned: exactly one holder frees it, when dropped, and handing it to the
//! stack or to a device moves it. Headers are built with [`SkBuff::reserve`],
//! [`SkBuff::put`] and [`SkBuff::push`], each bounds-checked, and read back through
//! [`SkBuff::data`]; a callback the stack lends a packet to gets an `SkBuff<Lent<'_>>`,
//! which it can edit but neither free nor keep.
//!
//! C header: [`include/linux/skbuff.h`](srctree/include/linux/skbuff.h).
//!
//! # Examples
//!
//! ```
//! use kernel::net::skb::{DropReason, SkBuff};
//! use kernel::prelude::*;
//!
//! // Room for a 4-byte header in front of an 8-byte payload.
//! let mut skb = SkBuff::alloc(None, 64, GFP_KERNEL)?;
//! skb.reserve(4)?;
//! skb.put(8)?.copy_from_slice(b"payload!");
//! skb.push(4)?.copy_from_slice(&[0x08, 0x00, 0x00, 0x00]);
//! assert_eq!(skb.len(), 12);
//! assert_eq!(&skb.data()[..6], &[0x08, 0x00, 0x00, 0x00, b'p', b'a']);
//! // Taking the header off again, and cutting the payload short.
//! skb.pull(4)?;
//! skb.trim(3)?;
//! assert_eq!(skb.data(), b"pay");
//! // More than the linear part holds is refused, and nothing changes.
//! assert_eq!(skb.pull(4), Err(EINVAL));
//! assert_eq!(skb.len(), 3);
//! // Dropping the skb frees it; a driver that drops a packet says why.
//! skb.drop_with(DropReason::PktTooSmall);
//! # Ok::<(), Error>(())
//! ```

use super::dev::NetDevice;
use crate::{
    alloc::Flags,
    bindings,
    error::{code::EINVAL, code::ENOMEM, code::ENOSPC, to_result, Result},
    ffi::{c_int, c_ulong},
    page::{Page, PAGE_SIZE},
};
use core::{marker::PhantomData, mem::ManuallyDrop, ptr::NonNull};

/// A position in an skb's buffer as `sk_buff` records it (`sk_buff_data_t`): an offset from
/// `head` where the kernel keeps offsets (64-bit), a pointer elsewhere.
trait DataPosition: Sized {
    /// The position's address in a buffer that starts at `head`.
    fn at(self, head: *mut u8) -> *mut u8;
    /// The position `n` bytes further on.
    fn advanced(self, n: u32) -> Self;
}

impl DataPosition for u32 {
    #[inline]
    fn at(self, head: *mut u8) -> *mut u8 {
        head.wrapping_add(self as usize)
    }
    #[inline]
    fn advanced(self, n: u32) -> Self {
        self.wrapping_add(n)
    }
}

impl DataPosition for *mut u8 {
    #[inline]
    fn at(self, _head: *mut u8) -> *mut u8 {
        self
    }
    #[inline]
    fn advanced(self, n: u32) -> Self {
        self.wrapping_add(n as usize)
    }
}

/// Who a received packet was addressed to (`PACKET_*` of `if_packet.h`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketType {
    /// To us.
    Host = 0,
    /// To everyone on the link.
    Broadcast = 1,
    /// To a multicast group.
    Multicast = 2,
}

mod private {
    pub trait Sealed {}
}

/// Why a packet is dropped (`enum skb_drop_reason`), for [`SkBuff::drop_with`]: what drop
/// monitors report. Dropping an skb without one reports `NOT_SPECIFIED`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// The device is not ready to send or receive (`DEV_READY`): down, or not yet joined to
    /// its link.
    DevReady,
    /// The driver's own header or metadata is invalid (`DEV_HDR`).
    DevHdr,
    /// The packet is larger than the link carries (`PKT_TOO_BIG`).
    PktTooBig,
    /// The packet is too short for its headers (`PKT_TOO_SMALL`).
    PktTooSmall,
    /// A ring the packet needed was full (`FULL_RING`).
    FullRing,
    /// Memory ran out (`NOMEM`).
    NoMem,
    /// The packet waited for its destination's address, and the queue of those waiting was
    /// full (`NEIGH_QUEUEFULL`).
    NeighQueueFull,
    /// The destination's address could not be resolved (`NEIGH_FAILED`).
    NeighFailed,
    /// A protocol the device does not carry (`UNHANDLED_PROTO`).
    UnhandledProto,
    /// Freed with the rest of a queue being emptied (`QUEUE_PURGE`).
    QueuePurge,
}

impl DropReason {
    #[inline]
    fn as_raw(self) -> bindings::skb_drop_reason {
        match self {
            DropReason::DevReady => bindings::skb_drop_reason_SKB_DROP_REASON_DEV_READY,
            DropReason::DevHdr => bindings::skb_drop_reason_SKB_DROP_REASON_DEV_HDR,
            DropReason::PktTooBig => bindings::skb_drop_reason_SKB_DROP_REASON_PKT_TOO_BIG,
            DropReason::PktTooSmall => bindings::skb_drop_reason_SKB_DROP_REASON_PKT_TOO_SMALL,
            DropReason::FullRing => bindings::skb_drop_reason_SKB_DROP_REASON_FULL_RING,
            DropReason::NoMem => bindings::skb_drop_reason_SKB_DROP_REASON_NOMEM,
            DropReason::NeighQueueFull => bindings::skb_drop_reason_SKB_DROP_REASON_NEIGH_QUEUEFULL,
            DropReason::NeighFailed => bindings::skb_drop_reason_SKB_DROP_REASON_NEIGH_FAILED,
            DropReason::UnhandledProto => bindings::skb_drop_reason_SKB_DROP_REASON_UNHANDLED_PROTO,
            DropReason::QueuePurge => bindings::skb_drop_reason_SKB_DROP_REASON_QUEUE_PURGE,
        }
    }
}

/// Who holds a [`SkBuff`]: its owner ([`Owned`]), who frees it, or a callee it is lent to
/// ([`Lent`]), who gives it back.
pub trait Ownership: private::Sealed {
    /// Lets go of the skb when its holder is dropped.
    ///
    /// # Safety
    ///
    /// `skb` must be the valid skb of a holder being dropped, held as `Self` says.
    #[doc(hidden)]
    unsafe fn release(skb: NonNull<bindings::sk_buff>);
}

/// An skb its holder owns: dropping the holder frees it.
pub struct Owned;

/// An skb the stack lends to a callback for `'a` (as `header_ops->create` is lent the packet
/// it builds): usable like an owned one, but neither freed nor given away, and a lent skb
/// cannot be put in the place of an owned one (their types differ).
pub struct Lent<'a>(PhantomData<&'a mut bindings::sk_buff>);

impl private::Sealed for Owned {}
impl private::Sealed for Lent<'_> {}

impl Ownership for Owned {
    unsafe fn release(skb: NonNull<bindings::sk_buff>) {
        // SAFETY: The holder owned the skb (the caller's guarantee). This variant is safe
        // in any context.
        unsafe { bindings::dev_kfree_skb_any(skb.as_ptr()) };
    }
}

impl Ownership for Lent<'_> {
    unsafe fn release(_skb: NonNull<bindings::sk_buff>) {}
}

/// A socket buffer (`struct sk_buff`), owned by default, or lent for a call ([`Lent`]).
///
/// Exactly one owner frees an owned skb: dropping it frees it as a drop
/// (`dev_kfree_skb_any`, counted by drop monitors), [`SkBuff::consume`] frees it as
/// consumed, and handing it to the stack ([`NetDevice::rx`]) or taking it from the stack
/// passes ownership along.
///
/// # Invariants
///
/// `ptr` points to a valid `struct sk_buff` that this object owns exclusively (`O` is
/// [`Owned`]) or is lent for `'a` (`O` is [`Lent<'a>`]): exclusively, or unchanged by others
/// if the object is only ever shared.
pub struct SkBuff<O: Ownership = Owned> {
    ptr: NonNull<bindings::sk_buff>,
    _holder: PhantomData<O>,
}

// SAFETY: An owned skb may be moved between threads; the stack does so all the time. A lent
// one cannot outlive the call it is lent for (`'a`), and an skb carries no state tied to a
// thread, so sending it for the duration of the loan is as safe.
unsafe impl<O: Ownership> Send for SkBuff<O> {}

impl SkBuff<Owned> {
    /// Takes ownership of a raw skb.
    ///
    /// # Safety
    ///
    /// `ptr` must be a valid skb whose ownership the caller gives up.
    #[inline]
    pub(crate) unsafe fn from_raw(ptr: *mut bindings::sk_buff) -> Self {
        // INVARIANT: A valid skb whose ownership the caller gives to us.
        Self {
            // SAFETY: The caller guarantees `ptr` is valid, hence non-null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            _holder: PhantomData,
        }
    }

    /// Gives up ownership and returns the raw skb.
    #[inline]
    pub(crate) fn into_raw(self) -> *mut bindings::sk_buff {
        let ptr = self.ptr.as_ptr();
        core::mem::forget(self);
        ptr
    }

    /// Allocates an skb for receiving with `len` bytes of room (and the usual headroom), on
    /// `dev` if given (else the device is set when the packet is received).
    pub fn alloc(dev: Option<&NetDevice>, len: u32, flags: Flags) -> Result<Self> {
        let dev = dev.map_or(core::ptr::null_mut(), NetDevice::as_raw);
        // SAFETY: `dev` is valid or null, which the function accepts.
        let skb = unsafe { bindings::__netdev_alloc_skb(dev, len, flags.as_raw()) };
        // INVARIANT: a new skb is owned by its allocator.
        Ok(Self {
            ptr: NonNull::new(skb).ok_or(ENOMEM)?,
            _holder: PhantomData,
        })
    }

    /// Sets the device the packet arrived on.
    #[inline]
    pub(crate) fn set_dev(&mut self, dev: &super::dev::NetDevice) {
        // SAFETY: By the type invariant the skb is valid and owned by us; `dev` sits in the
        // first union of `struct sk_buff` (next/prev/dev), unused while we own it alone.
        unsafe {
            (*self.raw())
                .__bindgen_anon_1
                .__bindgen_anon_1
                .__bindgen_anon_1
                .dev = dev.as_raw()
        };
    }

    /// Frees the skb as a drop for `reason`, which drop monitors (`perf trace -e
    /// skb:kfree_skb`, `dropwatch`) report. Safe in any context, as the drop is.
    #[inline]
    pub fn drop_with(self, reason: DropReason) {
        // SAFETY: We own the skb; ownership ends here.
        unsafe { bindings::dev_kfree_skb_any_reason(self.into_raw(), reason.as_raw()) };
    }

    /// Frees the skb as successfully consumed (not counted as a drop). Safe in any context,
    /// as the drop is: a sent packet may be freed from the transmit path, which netpoll
    /// calls with interrupts off.
    #[inline]
    pub fn consume(self) {
        // SAFETY: We own the skb; ownership ends here.
        unsafe {
            bindings::dev_kfree_skb_any_reason(
                self.into_raw(),
                bindings::skb_drop_reason_SKB_CONSUMED,
            )
        };
    }
}

impl<'a> SkBuff<Lent<'a>> {
    /// Borrows an skb lent for `'a`.
    ///
    /// # Safety
    ///
    /// `ptr` must be a valid skb lent for `'a`, which its lender frees, and which nobody else
    /// uses for `'a` (or, if the result is only ever shared, nobody changes).
    #[inline]
    pub(crate) unsafe fn lent(ptr: *mut bindings::sk_buff) -> Self {
        // INVARIANT: As the caller guarantees.
        Self {
            // SAFETY: The caller guarantees `ptr` is valid, hence non-null.
            ptr: unsafe { NonNull::new_unchecked(ptr) },
            _holder: PhantomData,
        }
    }
}

impl<O: Ownership> SkBuff<O> {
    #[inline]
    fn raw(&self) -> *mut bindings::sk_buff {
        self.ptr.as_ptr()
    }

    /// Total length of the data, linear part and fragments.
    #[inline]
    pub fn len(&self) -> u32 {
        // SAFETY: By the type invariant the skb is valid.
        unsafe { (*self.raw()).len }
    }

    /// Whether the skb carries no data.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Length of the linear part (`skb_headlen`, computed here rather than through a call).
    #[inline]
    pub fn headlen(&self) -> u32 {
        // SAFETY: By the type invariant the skb is valid.
        let len = unsafe { (*self.raw()).len };
        // SAFETY: As above.
        let data_len = unsafe { (*self.raw()).data_len };
        len.saturating_sub(data_len)
    }

    /// Whether part of the data lies in fragments (`skb_is_nonlinear`).
    #[inline]
    fn is_nonlinear(&self) -> bool {
        // SAFETY: By the type invariant the skb is valid.
        unsafe { (*self.raw()).data_len != 0 }
    }

    /// The addresses of the buffer's start (`head`), the data, its tail and the buffer's
    /// end (where the shared info sits), read here rather than through calls.
    #[inline]
    fn bounds(&self) -> [*mut u8; 4] {
        let skb = self.raw();
        // SAFETY: By the type invariant the skb is valid.
        let (head, data, tail, end) =
            unsafe { ((*skb).head, (*skb).data, (*skb).tail, (*skb).end) };
        [head, data, tail.at(head), end.at(head)]
    }

    /// Free space in front of the data.
    #[inline]
    pub fn headroom(&self) -> u32 {
        let [head, data, _, _] = self.bounds();
        (data as usize).saturating_sub(head as usize) as u32
    }

    /// Free space after the linear data (none when the skb has fragments, whose data
    /// comes after the linear part).
    #[inline]
    pub fn tailroom(&self) -> u32 {
        if self.is_nonlinear() {
            return 0;
        }
        let [_, _, tail, end] = self.bounds();
        (end as usize).saturating_sub(tail as usize) as u32
    }

    /// The linear part of the data.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: By the type invariant the skb is valid.
        let data = unsafe { (*self.raw()).data };
        // SAFETY: `data` points to `headlen()` initialised bytes, which nobody writes while
        // the borrow lasts: we hold the skb exclusively, or (cloned, or lent for shared use)
        // its data is read-only for every holder by the kernel's rules for shared skbs.
        unsafe { core::slice::from_raw_parts(data, self.headlen() as usize) }
    }

    /// The linear part of the data, writable. Data shared with clones is copied first, so
    /// this may fail with `ENOMEM`.
    #[inline]
    pub fn data_mut(&mut self) -> Result<&mut [u8]> {
        // SAFETY: The skb is valid; `skb_cow` makes its linear data private to it.
        to_result(unsafe { bindings::skb_cow(self.raw(), 0) })?;
        // SAFETY: By the type invariant the skb is valid.
        let data = unsafe { (*self.raw()).data };
        // SAFETY: `data` points to `headlen()` initialised bytes that only this skb uses now
        // (unshared above), and the borrow is exclusive.
        Ok(unsafe { core::slice::from_raw_parts_mut(data, self.headlen() as usize) })
    }

    #[inline]
    fn is_cloned(&self) -> bool {
        // SAFETY: By the type invariant the skb is valid.
        let skb = unsafe { &*self.raw() };
        // An skb never cloned has its own data: decided here without a call.
        if skb.cloned() == 0 {
            return false;
        }
        // SAFETY: As above.
        unsafe { bindings::skb_cloned(self.raw()) != 0 }
    }

    /// Whether the header (what lies before the data) is shared with a clone
    /// (`skb_header_cloned`, inline in C, and here: TCP sends clones, whose headers its
    /// own protocol left to the device).
    #[inline]
    fn is_header_cloned(&self) -> bool {
        // SAFETY: By the type invariant the skb is valid.
        let skb = unsafe { &*self.raw() };
        if skb.cloned() == 0 {
            return false;
        }
        let [_, _, _, end] = self.bounds();
        let shinfo = end.cast::<bindings::skb_shared_info>();
        // SAFETY: The shared info of a valid skb sits at its end (`skb_shinfo`).
        let counter = unsafe { core::ptr::addr_of_mut!((*shinfo).dataref.counter) };
        // SAFETY: `counter` is the shared info's reference count, an `atomic_t` that lives as
        // the skb does and is only ever accessed atomically; read as `atomic_read` reads it.
        let dataref = unsafe { core::sync::atomic::AtomicI32::from_ptr(counter) }
            .load(core::sync::atomic::Ordering::Relaxed);
        // The low half counts the holders of the buffer, the high half those of them that
        // do not use the header.
        let holders = dataref & bindings::SKB_DATAREF_MASK as i32;
        let payload_only = dataref >> bindings::SKB_DATAREF_SHIFT;
        holders - payload_only != 1
    }

    /// Appends `len` bytes at the tail and returns them; `EINVAL` without tailroom or when
    /// the data is shared with a clone.
    #[inline]
    pub fn put(&mut self, len: u32) -> Result<&mut [u8]> {
        if len > self.tailroom() || self.is_cloned() {
            return Err(EINVAL);
        }
        let [_, _, tail, _] = self.bounds();
        // SAFETY: The skb is valid and ours alone (`&mut self`), linear with `len` bytes of
        // tailroom (checked above): what `skb_put` does, without the call.
        unsafe {
            let skb = &mut *self.raw();
            skb.tail = skb.tail.advanced(len);
            skb.len += len;
        }
        // SAFETY: The `len` bytes at the old tail are now the end of the data, ours to write.
        Ok(unsafe { core::slice::from_raw_parts_mut(tail, len as usize) })
    }

    /// Cuts the data of a linear skb to its first `len` bytes (no change if it holds
    /// fewer); `EINVAL` for an skb with fragments.
    #[inline]
    pub fn trim(&mut self, len: u32) -> Result {
        if self.is_nonlinear() {
            return Err(EINVAL);
        }
        // SAFETY: The skb is valid, held exclusively by us, and linear.
        unsafe { bindings::skb_trim(self.raw(), len) };
        Ok(())
    }

    /// Prepends `len` bytes and returns them. A header shared with clones, or too little
    /// headroom, is reallocated first, so this may fail with `ENOMEM`.
    #[inline]
    pub fn push(&mut self, len: u32) -> Result<&mut [u8]> {
        if len > self.headroom() || self.is_header_cloned() {
            // SAFETY: The skb is valid; `skb_cow_head` gives it a private header with `len`
            // bytes of headroom.
            to_result(unsafe { bindings::skb_cow_head(self.raw(), len) })?;
        }
        // SAFETY: The skb is valid, ours alone (`&mut self`), with `len` bytes of private
        // headroom (checked or made above): what `skb_push` does, without the call.
        let data = unsafe {
            let skb = &mut *self.raw();
            skb.data = skb.data.wrapping_sub(len as usize);
            skb.len += len;
            skb.data
        };
        // SAFETY: `data` is the start of the `len` new bytes, now the data's first.
        Ok(unsafe { core::slice::from_raw_parts_mut(data, len as usize) })
    }

    /// Starts a series of changes to the front of the data ([`FrontEdit`]): headers read,
    /// stripped and added one after another, as a receive path does. `EINVAL` for an skb with
    /// fragments or whose buffer is shared with a clone: bytes pulled may be pushed back
    /// and written, so the whole buffer must be the skb's own, not only its header.
    ///
    /// ```
    /// use kernel::{alloc::flags::GFP_KERNEL, net::skb::SkBuff};
    ///
    /// let mut skb = SkBuff::alloc(None, 64, GFP_KERNEL)?;
    /// skb.put(9)?.copy_from_slice(b"GRHheader");
    /// let room = skb.headroom();
    /// {
    ///     let mut front = skb.edit_front()?;
    ///     assert_eq!(front.data().get(..3), Some(&b"GRH"[..]));
    ///     front.pull(3)?;
    ///     // The headroom, grown by what was pulled, bounds what may be pushed.
    ///     assert!(front.push(room + 4).is_err());
    ///     front.push(2)?.copy_from_slice(b"->");
    ///     front.reset_mac_header();
    ///     assert!(front.pull(9).is_err());
    /// }
    /// // The skb takes the edit's data when the edit ends.
    /// assert_eq!(skb.data(), b"->header");
    /// assert_eq!(skb.headroom(), room + 1);
    ///
    /// // Data in fragments cannot be edited so.
    /// skb.append_paged(b"tail", GFP_KERNEL)?;
    /// assert!(skb.edit_front().is_err());
    /// # Ok::<(), Error>(())
    /// ```
    #[inline]
    pub fn edit_front(&mut self) -> Result<FrontEdit<'_, O>> {
        if self.is_nonlinear() || self.is_cloned() {
            return Err(EINVAL);
        }
        let [head, data, _, _] = self.bounds();
        let len = self.len();
        // INVARIANT: checked linear and not cloned above; `data` and `len` are the skb's
        // own, `data` being `headroom` bytes after `head`.
        Ok(FrontEdit {
            headroom: (data as usize).wrapping_sub(head as usize) as u32,
            data,
            len,
            skb: self,
        })
    }

    /// Removes `len` bytes from the front of the linear part; `EINVAL` if it is shorter.
    #[inline]
    pub fn pull(&mut self, len: u32) -> Result {
        if len > self.headlen() {
            return Err(EINVAL);
        }
        // SAFETY: The skb is valid, ours alone (`&mut self`), and its linear part holds at
        // least `len` bytes: what `skb_pull` does, without the call.
        unsafe {
            let skb = &mut *self.raw();
            skb.len -= len;
            skb.data = skb.data.wrapping_add(len as usize);
        }
        Ok(())
    }

    /// Reserves `len` bytes of headroom in an empty skb; `EINVAL` if it has data or too
    /// little room.
    #[inline]
    pub fn reserve(&mut self, len: u32) -> Result {
        if !self.is_empty() || len > self.tailroom() {
            return Err(EINVAL);
        }
        // SAFETY: The skb is valid, ours alone (`&mut self`), empty, and has room for `len`
        // bytes: what `skb_reserve` does, without the call.
        unsafe {
            let skb = &mut *self.raw();
            skb.data = skb.data.wrapping_add(len as usize);
            skb.tail = skb.tail.advanced(len);
        }
        Ok(())
    }

    /// The protocol of the payload (an ethertype, host order).
    #[inline]
    pub fn protocol(&self) -> u16 {
        // SAFETY: By the type invariant the skb is valid.
        let group = unsafe { &(*self.raw()).__bindgen_anon_4 };
        // SAFETY: `protocol` sits in the `headers` struct group, whose anonymous view
        // bindgen names `__bindgen_anon_4.__bindgen_anon_1`: both views are always valid.
        let headers = unsafe { group.__bindgen_anon_1.as_ref() };
        u16::from_be(headers.protocol)
    }

    /// Sets the protocol of the payload (an ethertype, host order).
    #[inline]
    pub fn set_protocol(&mut self, ethertype: u16) {
        self.headers_mut().protocol = ethertype.to_be();
    }

    /// The `headers` struct group (protocol, packet type, ...), ours to write.
    #[inline]
    fn headers_mut(&mut self) -> &mut bindings::sk_buff__bindgen_ty_4__bindgen_ty_1 {
        // SAFETY: By the type invariant the skb is valid and held exclusively by us, for as
        // long as `self` is borrowed.
        let group = unsafe { &mut (*self.raw()).__bindgen_anon_4 };
        // SAFETY: See `protocol`: both views of the group are always valid.
        unsafe { group.__bindgen_anon_1.as_mut() }
    }

    /// Tells the local sender of this IPv4 or IPv6 packet that it exceeds the path MTU
    /// `mtu`, as a tunnel does from its transmit path: the route's cached path MTU is
    /// lowered and an ICMP "fragmentation needed" (ICMPv6 "packet too big") is generated,
    /// so TCP and UDP adapt. `EINVAL` for other protocols. The packet itself is left to the
    /// caller, which drops it.
    pub fn report_too_big(&mut self, mtu: u32) -> Result {
        const ETH_P_IP: u16 = 0x0800;
        #[cfg(CONFIG_IPV6)]
        const ETH_P_IPV6: u16 = 0x86dd;
        const ICMP_DEST_UNREACH: c_int = 3;
        const ICMP_FRAG_NEEDED: c_int = 4;
        match self.protocol() {
            ETH_P_IP => {
                // SAFETY: The skb is valid and ours; the helper skips a packet without a
                // route.
                unsafe { bindings::skb_dst_update_pmtu_no_confirm(self.raw(), mtu) };
                // SAFETY: The skb is valid and ours. The ICMP code does nothing for a packet
                // without a route, and reads the IP header only after checking that the
                // network header lies within the linear data.
                unsafe {
                    bindings::icmp_ndo_send(
                        self.raw(),
                        ICMP_DEST_UNREACH,
                        ICMP_FRAG_NEEDED,
                        mtu.to_be(),
                    )
                };
                Ok(())
            }
            #[cfg(CONFIG_IPV6)]
            ETH_P_IPV6 => {
                const ICMPV6_PKT_TOOBIG: u8 = 2;
                // SAFETY: As for IPv4.
                unsafe { bindings::skb_dst_update_pmtu_no_confirm(self.raw(), mtu) };
                // SAFETY: As for IPv4: the ICMPv6 code checks the IPv6 header's place too.
                unsafe { bindings::icmpv6_ndo_send(self.raw(), ICMPV6_PKT_TOOBIG, 0, mtu) };
                Ok(())
            }
            _ => Err(EINVAL),
        }
    }

    /// Copies `to.len()` bytes starting at `offset` of the data (linear part and fragments)
    /// into `to`; `EINVAL` if the skb holds fewer.
    #[inline]
    pub fn copy_bits(&self, offset: u32, to: &mut [u8]) -> Result {
        let len = i32::try_from(to.len()).map_err(|_| EINVAL)?;
        let offset = i32::try_from(offset).map_err(|_| EINVAL)?;
        // SAFETY: The skb is valid; `to` is valid for `len` bytes of writes; the function
        // checks the range against the skb's length.
        to_result(unsafe {
            bindings::skb_copy_bits(self.raw(), offset, to.as_mut_ptr().cast(), len)
        })
    }

    /// Marks the start of the data as the start of the link-layer header.
    #[inline]
    pub fn reset_mac_header(&mut self) {
        let [head, data, _, _] = self.bounds();
        // The offset of the data from the head (`skb_reset_mac_header`): within the buffer,
        // whose size fits the field.
        self.headers_mut().mac_header = (data as usize).wrapping_sub(head as usize) as u16;
    }

    /// Sets who the packet was addressed to.
    #[inline]
    pub fn set_pkt_type(&mut self, pkt_type: PacketType) {
        // `pkt_type` is a bitfield in the byte that `__pkt_type_offset` marks, in the bits of
        // `PKT_TYPE_MAX` (as the kernel's BPF code writes it): one byte read and written,
        // where the generated bit-by-bit setter takes dozens of instructions.
        const MASK: u8 = bindings::PKT_TYPE_MAX as u8;
        // `PKT_TYPE_OFFSET`: the `headers` group is a union whose views both start at its
        // own offset.
        const OFFSET: usize = core::mem::offset_of!(bindings::sk_buff, __bindgen_anon_4)
            + core::mem::offset_of!(
                bindings::sk_buff__bindgen_ty_4__bindgen_ty_1,
                __pkt_type_offset
            );
        let value = (pkt_type as u8) << MASK.trailing_zeros();
        // SAFETY: By the type invariant the skb is valid; `OFFSET` lies within it.
        let byte = unsafe { self.raw().cast::<u8>().add(OFFSET) };
        // SAFETY: `byte` is the skb's byte holding the bitfield; we hold the skb exclusively
        // (`&mut self`), and only the bits of `MASK` change.
        unsafe { *byte = (*byte & !MASK) | (value & MASK) };
    }

    /// Appends `len` bytes at `offset` of `page` as the next page fragment; the skb takes
    /// the page. `EINVAL` for a cloned skb or a range outside the page, `ENOSPC` when all
    /// `MAX_SKB_FRAGS` fragments are used (the page is dropped with the error).
    pub fn add_page(&mut self, page: Page, offset: usize, len: usize) -> Result {
        if self.is_cloned() || offset.checked_add(len).map_or(true, |end| end > PAGE_SIZE) {
            return Err(EINVAL);
        }
        let nr = self.shinfo().nr_frags;
        if u32::from(nr) >= bindings::MAX_SKB_FRAGS {
            return Err(ENOSPC);
        }
        // The skb takes over the page reference.
        let page = ManuallyDrop::new(page);
        // SAFETY: The skb is valid, owned and not cloned, so its fragments are ours to
        // extend; `nr` is below `MAX_SKB_FRAGS`; the range lies in the page, whose reference
        // is handed over.
        unsafe {
            bindings::skb_add_rx_frag(
                self.raw(),
                c_int::from(nr),
                page.as_ptr(),
                offset as c_int,
                len as c_int,
                PAGE_SIZE as u32,
            )
        };
        Ok(())
    }

    /// Appends a copy of `data` as page fragments, in pages allocated with `flags`: large
    /// messages then need no high-order allocation. `ENOSPC` when the fragments run out
    /// (part of the data appended), `EINVAL` for a cloned skb.
    pub fn append_paged(&mut self, data: &[u8], flags: Flags) -> Result {
        for chunk in data.chunks(PAGE_SIZE) {
            let page = Page::alloc_page(flags)?;
            // SAFETY: `chunk` is valid for reads of its length, at most a page, and does not
            // overlap the new page.
            unsafe { page.write_raw(chunk.as_ptr(), 0, chunk.len())? };
            self.add_page(page, 0, chunk.len())?;
        }
        Ok(())
    }

    /// Number of page fragments after the linear part.
    #[inline]
    pub fn nr_frags(&self) -> usize {
        usize::from(self.shinfo().nr_frags)
    }

    /// The shared info (fragments), read while the skb is held.
    #[inline]
    fn shinfo(&self) -> &bindings::skb_shared_info {
        let [_, _, _, end] = self.bounds();
        // SAFETY: Every skb has its shared info at `end` (`skb_shinfo`), valid while the skb
        // is; its fragments are changed only by the holder of an unshared skb, through
        // `&mut self`.
        unsafe { &*end.cast::<bindings::skb_shared_info>() }
    }

    /// Moves all data into the linear part, for a device that cannot gather this many
    /// fragments. `ENOMEM` when the larger head cannot be allocated (atomically).
    #[inline]
    pub fn linearize(&mut self) -> Result {
        // SAFETY: By the type invariant the skb is valid and held exclusively by us.
        to_result(unsafe { bindings::skb_linearize(self.raw()) })
    }

    /// Detaches the packet from its socket, which gets its send-buffer space back now
    /// rather than when the packet is freed, and drops its route. For a device that keeps
    /// packets until their send completes: the socket's limits on what sits below it (TCP
    /// small queues) would otherwise count packets already handed to the hardware.
    ///
    /// What `skb_orphan` and `skb_dst_drop` do, without a call for either.
    #[inline]
    pub fn orphan(&mut self) {
        let skb = self.raw();
        // SAFETY: By the type invariant the skb is valid and held exclusively by us. The
        // union's member in use is the route and the destructor: the other is a TCP
        // socket's queue anchor, and the skb left that queue before it came to a device.
        let owner = unsafe { &raw mut (*skb).__bindgen_anon_3.__bindgen_anon_1 };
        // SAFETY: `owner` is valid (above).
        if let Some(destructor) = unsafe { (*owner).destructor } {
            // SAFETY: The destructor its socket set, called once on the skb it was set for,
            // as `skb_orphan` calls it: with the skb still naming it.
            unsafe { destructor(skb) };
            // SAFETY: As above; the socket is forgotten with its destructor.
            unsafe {
                (*owner).destructor = None;
                (*skb).sk = core::ptr::null_mut();
            }
        }
        // SAFETY: `owner` is valid (above).
        let route = unsafe { core::mem::take(&mut (*owner)._skb_refdst) };
        let noref = bindings::SKB_DST_NOREF as c_ulong;
        if route != 0 && route & noref == 0 {
            // A counted route (the low bit flags one not counted): its address, and the
            // skb's reference, now ours to drop.
            let dst = (route & !noref) as *mut bindings::dst_entry;
            // SAFETY: `dst` is a route the skb held a reference to, given up here.
            unsafe { bindings::dst_release(dst) };
        }
    }
}

/// What the RDMA abstractions (`rdma::dma`) need to post skbs to devices: built with them,
/// so that the net abstractions build alone without leaving these unused.
#[cfg(CONFIG_RUST_INFINIBAND_ABSTRACTIONS)]
impl<O: Ownership> SkBuff<O> {
    /// The tailroom of a linear skb whose data is its own, for a device to write into: its
    /// first byte and its length. `EINVAL` for an skb with fragments or a clone (whose
    /// buffer others read). The bytes are valid while the skb is owned and its tail and end
    /// unchanged; what the device wrote joins the data through [`SkBuff::put`].
    #[inline]
    pub(crate) fn tailroom_for_device(&mut self) -> Result<(NonNull<u8>, u32)> {
        if self.is_nonlinear() || self.is_cloned() {
            return Err(EINVAL);
        }
        let [_, _, tail, end] = self.bounds();
        let room = (end as usize).saturating_sub(tail as usize) as u32;
        Ok((NonNull::new(tail).ok_or(EINVAL)?, room))
    }

    /// Appends to the data the first `len` bytes of the tailroom, which a device wrote
    /// (`skb_put` without its checks, for a receive buffer whose tailroom was measured when
    /// it was handed to the device).
    ///
    /// # Safety
    ///
    /// The skb must be linear, its data not shared with a clone, and its tailroom at least
    /// `len` bytes long.
    #[inline]
    pub(crate) unsafe fn put_received(&mut self, len: u32) {
        // SAFETY: The skb is valid and ours alone (`&mut self`); the caller guarantees the
        // tailroom: what `skb_put` does, without the call.
        unsafe {
            let skb = &mut *self.raw();
            skb.tail = skb.tail.advanced(len);
            skb.len += len;
        }
    }

    /// The page fragments after the linear part, in order (see [`frag_page`]).
    #[inline]
    pub(crate) fn frags(&self) -> &[bindings::skb_frag_t] {
        let shinfo = self.shinfo();
        // The first `nr_frags` fragments are initialised.
        let n = usize::from(shinfo.nr_frags).min(shinfo.frags.len());
        &shinfo.frags[..n]
    }

    /// The length of fragment `index`, `None` past the last one.
    #[inline]
    pub(crate) fn frag_len(&self, index: usize) -> Option<usize> {
        Some(self.frag_at(index)?.len as usize)
    }

    /// Fragment `index`, `None` past the last one.
    #[inline]
    fn frag_at(&self, index: usize) -> Option<&bindings::skb_frag_t> {
        let shinfo = self.shinfo();
        if index >= usize::from(shinfo.nr_frags) {
            return None;
        }
        // `index` is below `nr_frags`, so the fragment is initialised.
        shinfo.frags.get(index)
    }
}

/// A series of changes to the front of a linear skb's data whose buffer is its own, made
/// on copies of the data's address and length and written back to the skb once, when the
/// edit ends: each step is a check and an addition, where the same step on the skb reads
/// its fields again and works out the linear length again. Made by [`SkBuff::edit_front`].
///
/// # Invariants
///
/// - `skb` is linear and its buffer is not shared with a clone; the edit borrows it
///   exclusively, so that stays so.
/// - `data` lies `headroom` bytes after the skb's `head`, and the `len` bytes at `data` are
///   the skb's data, all in its linear part. The skb's own `data` and `len` are those of the
///   edit once it ends.
pub struct FrontEdit<'a, O: Ownership = Owned> {
    skb: &'a mut SkBuff<O>,
    data: *mut u8,
    len: u32,
    headroom: u32,
}

impl<O: Ownership> FrontEdit<'_, O> {
    /// The data as edited so far.
    #[inline]
    pub fn data(&self) -> &[u8] {
        // SAFETY: By the type invariant the `len` bytes at `data` are the skb's linear data,
        // which nobody else writes while the skb is borrowed by the edit.
        unsafe { core::slice::from_raw_parts(self.data, self.len as usize) }
    }

    /// Removes `len` bytes from the front of the data; `EINVAL` if it is shorter.
    #[inline]
    pub fn pull(&mut self, len: u32) -> Result {
        if len > self.len {
            return Err(EINVAL);
        }
        // INVARIANT: the first `len` bytes of the data join the headroom. The headroom and
        // data together lie in the buffer, whose size fits a `u32`.
        self.data = self.data.wrapping_add(len as usize);
        self.len -= len;
        self.headroom = self.headroom.wrapping_add(len);
        Ok(())
    }

    /// Prepends `len` bytes of the headroom to the data and returns them; `EINVAL` if the
    /// headroom is shorter (it is not reallocated, unlike [`SkBuff::push`]).
    #[inline]
    pub fn push(&mut self, len: u32) -> Result<&mut [u8]> {
        if len > self.headroom {
            return Err(EINVAL);
        }
        // INVARIANT: the last `len` bytes of the headroom become the data's first.
        self.data = self.data.wrapping_sub(len as usize);
        self.len = self.len.wrapping_add(len);
        self.headroom -= len;
        // SAFETY: The `len` bytes at `data` lay in the headroom, within the skb's buffer,
        // which is its own (type invariant) and borrowed exclusively through `&mut self`.
        Ok(unsafe { core::slice::from_raw_parts_mut(self.data, len as usize) })
    }

    /// Marks the start of the data as the start of the link-layer header
    /// (`skb_reset_mac_header`).
    #[inline]
    pub fn reset_mac_header(&mut self) {
        // The data's offset from the head, which fits the field as the buffer's size does.
        self.skb.headers_mut().mac_header = self.headroom as u16;
    }
}

impl<O: Ownership> Drop for FrontEdit<'_, O> {
    #[inline]
    fn drop(&mut self) {
        // SAFETY: The skb is valid and borrowed exclusively by the edit; its data becomes the
        // edit's, which lies in its linear part (type invariant).
        unsafe {
            let skb = &mut *self.skb.raw();
            skb.data = self.data;
            skb.len = self.len;
        }
    }
}

impl<O: Ownership> Drop for SkBuff<O> {
    fn drop(&mut self) {
        // SAFETY: The skb is valid and held as `O` says (type invariant); it is dropped.
        unsafe { O::release(self.ptr) };
    }
}

/// The page fragment `frag` lies in, the offset of its bytes in that page and their
/// length; `None` for memory that is not a page (device memory). Valid while the skb
/// the fragment is of is owned and unchanged.
// For the RDMA abstractions, as the block of `SkBuff` methods above.
#[cfg(CONFIG_RUST_INFINIBAND_ABSTRACTIONS)]
#[inline]
pub(crate) fn frag_page(
    frag: &bindings::skb_frag_t,
) -> Option<(NonNull<bindings::page>, usize, usize)> {
    // As `skb_frag_page` (inline in C): a fragment's `netmem` is its page's address,
    // unless its low bit marks device memory, which has no page.
    if frag.netmem & bindings::NET_IOV as bindings::netmem_ref != 0 {
        return None;
    }
    let page = frag.netmem as *mut bindings::page;
    Some((NonNull::new(page)?, frag.offset as usize, frag.len as usize))
}
