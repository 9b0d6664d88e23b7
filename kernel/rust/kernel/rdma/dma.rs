// SPDX-License-Identifier: GPL-2.0

//! Kernel buffers mapped for DMA by an RDMA device.
//!
//! A [`DmaBuffer`] is kernel memory with its streaming mapping on one device; a
//! [`ScatterBuffer`] is a head and pages, each mapped, for messages larger than a page.
//! Owning one means owning its bytes for the CPU: queue pairs and shared receive queues
//! take buffers by value while the device may use them and give them back synchronised, so
//! the CPU never reads memory the device is writing, and a mapping cannot outlive its
//! memory or its device.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`ib_dma_*`).
//!
//! # Examples
//!
//! ```
//! use kernel::prelude::*;
//! use kernel::rdma::device::Device;
//! use kernel::rdma::dma::{DmaBuffer, DmaDirection};
//!
//! /// A message of `text` to send from `device`: the bytes written while the CPU owns them.
//! fn message(device: &Device, text: &[u8]) -> Result<DmaBuffer> {
//!     let mut buf = DmaBuffer::new(device, text.len(), DmaDirection::ToDevice, GFP_KERNEL)?;
//!     buf.as_mut_slice().copy_from_slice(text);
//!     Ok(buf)
//! }
//!
//! /// A buffer of no bytes has no memory to map.
//! fn empty(device: &Device) -> bool {
//!     DmaBuffer::new(device, 0, DmaDirection::FromDevice, GFP_KERNEL).is_err()
//! }
//! # let _ = (message, empty);
//! ```

use super::device::{Device, DeviceRef};
use crate::{
    alloc::{Flags, KBox, KVec},
    bindings,
    error::{
        code::{EINVAL, ENOMEM},
        Error, Result,
    },
    net::skb::{frag_page, SkBuff},
    page::{Page, PAGE_SIZE},
};
use core::mem::{ManuallyDrop, MaybeUninit};

/// Which way data moves through a mapping.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DmaDirection {
    /// The device reads the buffer (sends).
    ToDevice,
    /// The device writes the buffer (receives).
    FromDevice,
    /// Both.
    Bidirectional,
}

impl DmaDirection {
    fn as_raw(self) -> bindings::dma_data_direction {
        match self {
            DmaDirection::ToDevice => bindings::dma_data_direction_DMA_TO_DEVICE,
            DmaDirection::FromDevice => bindings::dma_data_direction_DMA_FROM_DEVICE,
            DmaDirection::Bidirectional => bindings::dma_data_direction_DMA_BIDIRECTIONAL,
        }
    }
}

/// Whether `device` takes kernel virtual addresses as DMA addresses (a software device such
/// as rxe: `ib_uses_virt_dma`). Its mappings are then the addresses themselves, and syncing
/// and unmapping do nothing: decided here, without a call, as C's inline `ib_dma_*`
/// functions decide it.
///
/// # Safety
///
/// `device` must be valid.
#[inline]
unsafe fn uses_virt_dma(device: *mut bindings::ib_device) -> bool {
    // SAFETY: The caller guarantees the device.
    cfg!(CONFIG_INFINIBAND_VIRT_DMA) && unsafe { (*device).dma_device.is_null() }
}

/// Maps the `len` bytes at `ptr` for `dir` on `device` (`ib_dma_map_single`); `ENOMEM` if
/// the mapping fails.
///
/// # Safety
///
/// `device` must be valid, and the memory must stay allocated until unmapped.
// Always inline: for a software device it is one test, which a call would cost more than.
#[inline(always)]
unsafe fn map_single(
    device: *mut bindings::ib_device,
    ptr: *mut u8,
    len: usize,
    dir: DmaDirection,
) -> Result<u64> {
    // SAFETY: The caller guarantees the device.
    if unsafe { uses_virt_dma(device) } {
        return Ok(ptr as u64);
    }
    // SAFETY: The caller guarantees the device and the memory.
    let addr = unsafe { bindings::ib_dma_map_single(device, ptr.cast(), len, dir.as_raw()) };
    // SAFETY: The device is valid and `addr` came from a mapping on it.
    if unsafe { bindings::ib_dma_mapping_error(device, addr) } != 0 {
        return Err(ENOMEM);
    }
    Ok(addr)
}

/// Maps `len` bytes at `offset` of `page` for `dir` on `device` (`ib_dma_map_page`);
/// `ENOMEM` if the mapping fails.
///
/// # Safety
///
/// `device` must be valid, and the page must stay allocated until unmapped.
// Always inline: for a software device it is one test, which a call would cost more than.
#[inline(always)]
unsafe fn map_page(
    device: *mut bindings::ib_device,
    page: *mut bindings::page,
    offset: usize,
    len: usize,
    dir: DmaDirection,
) -> Result<u64> {
    // SAFETY: The caller guarantees the device and the page.
    let addr = unsafe { bindings::ib_dma_map_page(device, page, offset, len, dir.as_raw()) };
    // SAFETY: The caller guarantees the device. A virtual address is no failed mapping.
    if unsafe { uses_virt_dma(device) } {
        return Ok(addr);
    }
    // SAFETY: The device is valid and `addr` came from a mapping on it.
    if unsafe { bindings::ib_dma_mapping_error(device, addr) } != 0 {
        return Err(ENOMEM);
    }
    Ok(addr)
}

/// Ends a mapping made by [`map_single`] (`page` false) or [`map_page`] (`page` true).
///
/// # Safety
///
/// `device` must be valid, and `addr` a live mapping of `len` bytes for `dir` on it, made
/// as `page` says and ended once.
#[inline]
unsafe fn unmap(
    device: *mut bindings::ib_device,
    addr: u64,
    len: usize,
    dir: DmaDirection,
    page: bool,
) {
    // SAFETY: The caller guarantees the device.
    if unsafe { uses_virt_dma(device) } {
        return;
    }
    if page {
        // SAFETY: The caller guarantees the mapping.
        unsafe { bindings::ib_dma_unmap_page(device, addr, len, dir.as_raw()) };
    } else {
        // SAFETY: The caller guarantees the mapping.
        unsafe { bindings::ib_dma_unmap_single(device, addr, len, dir.as_raw()) };
    }
}

/// Hands `len` bytes mapped at `addr` on `device` to the device (`to_device`) or back to the
/// CPU.
///
/// # Safety
///
/// `device` must be valid, and `addr` a live streaming mapping of at least `len` bytes for
/// `dir` on it.
#[inline]
unsafe fn sync(
    device: *mut bindings::ib_device,
    addr: u64,
    len: usize,
    dir: DmaDirection,
    to_device: bool,
) {
    // SAFETY: The caller guarantees the device.
    if unsafe { uses_virt_dma(device) } {
        return;
    }
    if to_device {
        // SAFETY: The caller guarantees the mapping.
        unsafe { bindings::ib_dma_sync_single_for_device(device, addr, len, dir.as_raw()) };
    } else {
        // SAFETY: The caller guarantees the mapping.
        unsafe { bindings::ib_dma_sync_single_for_cpu(device, addr, len, dir.as_raw()) };
    }
}

/// A zero-filled kernel buffer with a streaming DMA mapping for one device.
///
/// The mapping lives as long as the buffer. Whoever owns a `DmaBuffer` owns it for the CPU:
/// queue pairs take buffers by value while the device may access them, and hand them back
/// synchronised for the CPU, so CPU and device never touch the bytes at the same time.
///
/// The buffer and its mapping are kept in an allocation of their own, so that a
/// `DmaBuffer` is one pointer: what a completed send gives back ([`super::qp::Sent`]) then
/// moves in registers.
pub struct DmaBuffer(KBox<MappedBuffer>);

/// The bytes of a [`DmaBuffer`] and their mapping.
///
/// # Invariants
///
/// `addr` is the mapping of all of `buf` (`buf.len()` bytes) for `dir` on `device`, made by
/// `ib_dma_map_single`; outside queue pairs the buffer is synchronised for the CPU.
struct MappedBuffer {
    buf: KVec<u8>,
    addr: u64,
    dir: DmaDirection,
    device: DeviceRef,
}

impl DmaBuffer {
    /// Allocates `size` zeroed bytes with `flags` and maps them for `dir` on `device`;
    /// `EINVAL` for 0 bytes (there would be no memory to map).
    pub fn new(device: &Device, size: usize, dir: DmaDirection, flags: Flags) -> Result<Self> {
        if size == 0 {
            return Err(EINVAL);
        }
        let device = device.get_ref()?;
        let mut buf = KVec::from_elem(0u8, size, flags)?;
        // SAFETY: The device is registered; `buf` is a live allocation of `size` bytes that
        // is not moved (only its owning `KVec` is) until unmapped in `drop`.
        let addr = unsafe { map_single(device.as_raw(), buf.as_mut_ptr(), size, dir) }?;
        // INVARIANT: `addr` maps all of `buf` for `dir`; a fresh mapping is synchronised for
        // the CPU below.
        let mapped = MappedBuffer {
            buf,
            addr,
            dir,
            device,
        };
        // A mapping not kept is released by `MappedBuffer::drop`.
        let this = Self(KBox::new(mapped, flags)?);
        this.sync_for_cpu();
        Ok(this)
    }

    /// The size of the buffer in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.buf.len()
    }

    /// Whether the buffer has no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.0.buf.is_empty()
    }

    /// The bytes, for the CPU.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.0.buf.as_slice()
    }

    /// The bytes, for the CPU to fill.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.0.buf.as_mut_slice()
    }

    /// The device address of the first byte.
    #[inline]
    pub(crate) fn dma_addr(&self) -> u64 {
        self.0.addr
    }

    /// Whether `device` may use the buffer: mapped on it, for the device to write it
    /// (`device_writes`: a receive) or to read it (a send).
    #[inline]
    pub(crate) fn usable_by(&self, device: &Device, device_writes: bool) -> bool {
        let allowed = match self.0.dir {
            DmaDirection::Bidirectional => true,
            DmaDirection::FromDevice => device_writes,
            DmaDirection::ToDevice => !device_writes,
        };
        allowed && self.0.device.as_raw() == device.as_raw()
    }

    /// Hands the bytes to the device (before posting).
    #[inline]
    pub(crate) fn sync_for_device(&self) {
        // SAFETY: By `MappedBuffer`'s invariant `addr` maps `len()` bytes for `dir` on `device`.
        unsafe {
            sync(
                self.0.device.as_raw(),
                self.0.addr,
                self.0.buf.len(),
                self.0.dir,
                true,
            )
        };
    }

    /// Takes the bytes back for the CPU (after completion).
    #[inline]
    pub(crate) fn sync_for_cpu(&self) {
        // SAFETY: By `MappedBuffer`'s invariant `addr` maps `len()` bytes for `dir` on `device`.
        unsafe {
            sync(
                self.0.device.as_raw(),
                self.0.addr,
                self.0.buf.len(),
                self.0.dir,
                false,
            )
        };
    }
}

impl Drop for MappedBuffer {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the mapping exists and is released only here, before
        // `buf` is freed (fields drop after this body).
        unsafe {
            unmap(
                self.device.as_raw(),
                self.addr,
                self.buf.len(),
                self.dir,
                false,
            )
        };
    }
}

/// A receive buffer in several segments: a head buffer, then pages. Large messages land
/// mostly in the pages, which the receiver passes up as skb fragments, putting fresh pages
/// in their place ([`PageSegments::renew`]) instead of copying.
///
/// It keeps its scatter list, so that posting it again rewrites only the entries of pages
/// renewed since it was last posted.
///
/// # Invariants
///
/// `sges` has `1 + pages.len()` entries. If `lkey` is `Some(k)`, they all have key `k`: the
/// first describes all of `head`, and entry `1 + i` all of page `i` of `pages`, for every
/// `i` from `pages.renewed` on.
pub struct ScatterBuffer {
    head: DmaBuffer,
    pages: PageSegments,
    sges: KVec<bindings::ib_sge>,
    lkey: Option<u32>,
}

/// A page of a [`PageSegments`], mapped for its device to write into.
struct RecvPage {
    page: Page,
    addr: u64,
}

/// The page segments of a [`ScatterBuffer`], all mapped on one device: the segments hold
/// one reference to it, not one per page, so that a page renewed per message costs an
/// allocation and a mapping alone.
///
/// # Invariants
///
/// - The `addr` of each of the first `mapped` pages is the mapping of all of its page from
///   `device`, made by `ib_dma_map_page`, until the page leaves the segments
///   ([`PageSegments::renew`]) or the segments drop; once made by [`ScatterBuffer::new`],
///   every page is mapped. Outside queues the pages are synchronised for the CPU.
/// - No page from `renewed` on changed since `renewed` was last set to 0.
pub struct PageSegments {
    pages: KVec<RecvPage>,
    mapped: usize,
    renewed: usize,
    device: DeviceRef,
}

impl PageSegments {
    /// The number of pages.
    #[inline]
    pub fn len(&self) -> usize {
        self.pages.len()
    }

    /// Whether there are none.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pages.is_empty()
    }

    /// Maps `page` for receiving on `device`.
    ///
    /// # Safety
    ///
    /// `device` must be valid, and `page` stay allocated until the mapping is ended.
    #[inline]
    unsafe fn map(device: *mut bindings::ib_device, page: &Page) -> Result<u64> {
        // SAFETY: As the caller guarantees.
        unsafe {
            map_page(
                device,
                page.as_ptr(),
                0,
                PAGE_SIZE,
                DmaDirection::FromDevice,
            )
        }
    }

    /// Puts fresh pages, allocated with `flags` and mapped on the same device, in place of
    /// the first `count` pages, and hands each old one, unmapped with what the device wrote,
    /// to `f` with its index, in order. Stops at the first error: `EINVAL` if there are fewer
    /// than `count` pages, `ENOMEM` if no fresh page could be had (the old one then stays),
    /// or the error `f` returned.
    #[inline]
    pub fn renew_first(
        &mut self,
        count: usize,
        flags: Flags,
        mut f: impl FnMut(usize, Page) -> Result,
    ) -> Result {
        let device = self.device.as_raw();
        let slots = self
            .pages
            .get_mut(..self.mapped)
            .and_then(|mapped| mapped.get_mut(..count))
            .ok_or(EINVAL)?;
        let mut renewed = 0;
        let mut result = Ok(());
        for (index, slot) in slots.iter_mut().enumerate() {
            let fresh = Page::alloc_page(flags)
                .map_err(Error::from)
                .and_then(|page| {
                    // SAFETY: The device is valid while `self.device` holds its reference; the
                    // page is unmapped before it leaves the segments or is dropped with them.
                    let addr = unsafe { Self::map(device, &page) }?;
                    Ok(RecvPage { page, addr })
                });
            let old = match fresh {
                Ok(fresh) => core::mem::replace(slot, fresh),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            };
            renewed = index + 1;
            // SAFETY: By the type invariant `old.addr` maps `old.page` on `device`; the page
            // has left the segments, so it is unmapped once, here.
            unsafe { unmap(device, old.addr, PAGE_SIZE, DmaDirection::FromDevice, true) };
            if let Err(e) = f(index, old.page) {
                result = Err(e);
                break;
            }
        }
        // INVARIANT: of the pages, only the first `renewed` changed.
        self.renewed = self.renewed.max(renewed);
        result
    }

    /// Hands every page to the device (`to_device`) or back to the CPU.
    #[inline]
    fn sync(&self, to_device: bool) {
        let device = self.device.as_raw();
        // SAFETY: The device is valid while `self.device` holds its reference.
        if unsafe { uses_virt_dma(device) } {
            return;
        }
        for page in self.pages.iter().take(self.mapped) {
            // SAFETY: By the type invariant `addr` maps the page from the device.
            unsafe {
                sync(
                    device,
                    page.addr,
                    PAGE_SIZE,
                    DmaDirection::FromDevice,
                    to_device,
                )
            };
        }
    }
}

impl Drop for PageSegments {
    fn drop(&mut self) {
        for page in self.pages.iter().take(self.mapped) {
            // SAFETY: By the type invariant `addr` maps the page from the device, valid while
            // `self.device` holds its reference; the pages are dropped right after.
            unsafe {
                unmap(
                    self.device.as_raw(),
                    page.addr,
                    PAGE_SIZE,
                    DmaDirection::FromDevice,
                    true,
                )
            };
        }
    }
}

impl ScatterBuffer {
    /// A head of `head_len` bytes and `pages` pages, mapped for receiving on `device`.
    pub fn new(device: &Device, head_len: usize, pages: usize, flags: Flags) -> Result<Self> {
        let head = DmaBuffer::new(device, head_len, DmaDirection::FromDevice, flags)?;
        let mut segments = PageSegments {
            pages: KVec::with_capacity(pages, flags)?,
            mapped: 0,
            renewed: 0,
            device: device.get_ref()?,
        };
        for _ in 0..pages {
            // Kept before it is mapped, so that a failure drops (and unmaps) exactly the
            // pages mapped.
            let page = Page::alloc_page(flags)?;
            segments.pages.push(RecvPage { page, addr: 0 }, flags)?;
            let device = segments.device.as_raw();
            let last = segments.pages.last_mut().ok_or(EINVAL)?;
            // SAFETY: The device is valid while `segments.device` holds its reference; the
            // page is unmapped before it leaves the segments or is dropped with them.
            last.addr = unsafe { PageSegments::map(device, &last.page) }?;
            // INVARIANT: the page is counted as soon as it is mapped.
            segments.mapped += 1;
        }
        let sges = KVec::from_elem(bindings::ib_sge::default(), 1 + pages, flags)?;
        // INVARIANT: the scatter list has its entries, not written yet (`lkey` is `None`).
        Ok(Self {
            head,
            pages: segments,
            sges,
            lkey: None,
        })
    }

    /// The buffer's scatter list with `lkey`, as kept from its last post: written in full
    /// the first time (or for another key), else only the entries of pages renewed since.
    #[inline]
    pub(crate) fn scatter_list(&mut self, lkey: u32) -> Result<&mut [bindings::ib_sge]> {
        let all = self.lkey != Some(lkey);
        let (first, rest) = self.sges.split_first_mut().ok_or(EINVAL)?;
        if all {
            self.lkey = None;
            *first = bindings::ib_sge {
                addr: self.head.dma_addr(),
                length: u32::try_from(self.head.len()).map_err(|_| EINVAL)?,
                lkey,
            };
        }
        let stale = if all {
            &self.pages.pages[..]
        } else {
            self.pages
                .pages
                .get(..self.pages.renewed)
                .unwrap_or_default()
        };
        for (sge, page) in rest.iter_mut().zip(stale) {
            if all {
                *sge = bindings::ib_sge {
                    addr: page.addr,
                    length: PAGE_SIZE as u32,
                    lkey,
                };
            } else {
                sge.addr = page.addr;
            }
        }
        // INVARIANT: every entry is written with `lkey`: all of them, or those of the pages
        // renewed since the last time.
        self.pages.renewed = 0;
        self.lkey = Some(lkey);
        Ok(&mut self.sges)
    }

    /// The head segment.
    #[inline]
    pub fn head(&self) -> &[u8] {
        self.head.as_slice()
    }

    /// The head segment to read and the pages to take, at once.
    #[inline]
    pub fn parts_mut(&mut self) -> (&[u8], &mut PageSegments) {
        (self.head.as_slice(), &mut self.pages)
    }

    #[inline]
    pub(crate) fn sync_for_device(&self) {
        self.head.sync_for_device();
        self.pages.sync(true);
    }

    /// Whether `device` may write every segment: all mapped on it for receiving.
    #[inline]
    pub(crate) fn usable_by(&self, device: &Device) -> bool {
        self.head.usable_by(device, true) && self.pages.device.as_raw() == device.as_raw()
    }

    #[inline]
    pub(crate) fn sync_for_cpu(&self) {
        self.head.sync_for_cpu();
        self.pages.sync(false);
    }
}

/// A socket buffer whose tailroom is mapped for a device to write one receive into: the
/// bytes received become the skb's data where they landed, without a copy
/// ([`RecvSkb::into_skb`]). Dropping it ends the mapping, then frees the skb. Only queues
/// make and keep them: posting an [`SkBuff`] for a receive maps it.
///
/// # Invariants
///
/// `device` stays valid while the object lives. `addr` maps the `len` bytes of the skb's
/// tailroom with `ib_dma_map_single` for `DMA_FROM_DEVICE` on `device`. The skb is owned,
/// linear and not cloned, and its data pointers are unchanged while mapped.
pub struct RecvSkb {
    skb: ManuallyDrop<SkBuff>,
    addr: u64,
    len: u32,
    device: *mut bindings::ib_device,
}

// SAFETY: The device may be used from any thread, and an owned skb may move between threads.
unsafe impl Send for RecvSkb {}

impl RecvSkb {
    /// Maps the tailroom of `skb` for `device` to write. `EINVAL` (the skb freed) for an skb
    /// with fragments, a clone or no tailroom, `ENOMEM` when the mapping fails.
    ///
    /// # Safety
    ///
    /// `device` must be valid and stay so until the object is dropped or turned back into
    /// its skb.
    #[inline]
    pub(crate) unsafe fn new(device: *mut bindings::ib_device, mut skb: SkBuff) -> Result<Self> {
        let (tail, len) = skb.tailroom_for_device()?;
        if len == 0 {
            return Err(EINVAL);
        }
        // SAFETY: The caller guarantees the device; the `len` bytes at `tail` are the skb's
        // tailroom, which stays allocated and written by nobody else while the skb is ours.
        let addr = unsafe {
            map_single(
                device,
                tail.as_ptr(),
                len as usize,
                DmaDirection::FromDevice,
            )
        }?;
        // INVARIANT: `addr` maps the tailroom, just measured, of an skb checked linear and
        // not cloned.
        Ok(Self {
            skb: ManuallyDrop::new(skb),
            addr,
            len,
            device,
        })
    }

    /// The mapped bytes as the one scatter/gather entry of a receive, with `lkey`.
    #[inline]
    pub(crate) fn sge(&self, lkey: u32) -> bindings::ib_sge {
        bindings::ib_sge {
            addr: self.addr,
            length: self.len,
            lkey,
        }
    }

    /// Ends the mapping and returns the skb, its data extended by the `written` bytes the
    /// device reported (no more than were mapped).
    #[inline]
    pub(crate) fn into_skb(self, written: u32) -> SkBuff {
        let mut this = ManuallyDrop::new(self);
        this.unmap();
        // SAFETY: `this` is never used or dropped again, so the skb is taken exactly once.
        let mut skb = unsafe { ManuallyDrop::take(&mut this.skb) };
        // SAFETY: By the type invariant the skb is linear, not cloned, and its tailroom, of
        // `len` bytes when mapped, is unchanged; no more than that is appended.
        unsafe { skb.put_received(written.min(this.len)) };
        skb
    }

    #[inline]
    fn unmap(&mut self) {
        // SAFETY: By the type invariant `addr` maps `len` bytes on `device`, which is valid;
        // callers unmap once.
        unsafe {
            unmap(
                self.device,
                self.addr,
                self.len as usize,
                DmaDirection::FromDevice,
                false,
            )
        };
    }
}

impl Drop for RecvSkb {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: The skb is taken only here or in `into_skb`, which forgets `self`.
        drop(unsafe { ManuallyDrop::take(&mut self.skb) });
    }
}

/// Most segments of a mapped socket buffer: its linear part and every page fragment.
pub const MAX_SKB_SEGMENTS: usize = bindings::MAX_SKB_FRAGS as usize + 1;

/// A socket buffer whose bytes from `offset` on are mapped for a device to read (a send),
/// without a copy: what remains of the linear part is one segment, each page fragment
/// another. Made unmapped and mapped where it lies ([`SkbMapping::map`]): it lives in a
/// send's slot, and the addresses of up to `MAX_SKB_FRAGS` fragments are written there
/// once, never moved. Dropping it ends the mappings, then frees the skb.
///
/// # Invariants
///
/// `device` stays valid while the object lives. If `head_len` is not 0, `head_addr` maps the
/// `head_len` linear bytes of the skb from `offset` on; `frags[..mapped]` are initialised
/// and map its first `mapped` fragments; all with `ib_dma_map_*` for `DMA_TO_DEVICE` on
/// `device`. While anything is mapped, `skb` holds the skb, owned and unchanged.
pub(crate) struct SkbMapping {
    skb: Option<SkBuff>,
    device: *mut bindings::ib_device,
    head_addr: u64,
    offset: u32,
    head_len: u32,
    mapped: usize,
    frags: [MaybeUninit<u64>; MAX_SKB_SEGMENTS - 1],
}

// SAFETY: The device may be used from any thread, and an owned skb may move between threads.
unsafe impl Send for SkbMapping {}

impl SkbMapping {
    /// Whether `skb` can be mapped from `offset` on: `EINVAL` when `offset` is past the
    /// linear part or the skb has more fragments than a mapping holds.
    #[inline]
    pub(crate) fn check(skb: &SkBuff, offset: u32) -> Result {
        if offset > skb.headlen() || skb.nr_frags() >= MAX_SKB_SEGMENTS {
            return Err(EINVAL);
        }
        Ok(())
    }

    /// `skb`, to be mapped from `offset` on for `device` by [`SkbMapping::map`]; nothing is
    /// mapped yet.
    ///
    /// # Safety
    ///
    /// `device` must be valid and stay so until the object is dropped.
    #[inline]
    pub(crate) unsafe fn new(device: *mut bindings::ib_device, skb: SkBuff, offset: u32) -> Self {
        // INVARIANT: nothing is mapped; the caller guarantees the device.
        Self {
            skb: Some(skb),
            device,
            head_addr: 0,
            offset,
            head_len: 0,
            mapped: 0,
            frags: [const { MaybeUninit::uninit() }; MAX_SKB_SEGMENTS - 1],
        }
    }

    /// Maps the skb's bytes from the offset on and describes them in `out` with `lkey`, in
    /// one pass; returns the entries written. `EINVAL` when the skb was checked by
    /// [`SkbMapping::check`] in vain, a fragment is not a page or `out` is too short,
    /// `ENOMEM` when a mapping fails. Whatever was mapped stays recorded, and is ended with
    /// the object.
    // Always inline, with `Payload::map`: once per send, and the call (saving registers,
    // the result through memory) cost a fifth of it.
    #[inline(always)]
    pub(crate) fn map(
        &mut self,
        lkey: u32,
        out: &mut [MaybeUninit<bindings::ib_sge>],
    ) -> Result<usize> {
        if self.head_len != 0 || self.mapped != 0 {
            return Err(EINVAL);
        }
        let Some(skb) = self.skb.as_ref() else {
            return Err(EINVAL);
        };
        Self::check(skb, self.offset)?;
        let head = skb.data().get(self.offset as usize..).unwrap_or(&[]);
        let frags = skb.frags();
        // Room for every segment, checked before anything is mapped: the loop below then
        // walks the fragments, their records and their entries together.
        let needed = usize::from(!head.is_empty()) + frags.len();
        let mut out = out.get_mut(..needed).ok_or(EINVAL)?.iter_mut();
        let mut written = 0;
        if !head.is_empty() {
            let length = u32::try_from(head.len()).map_err(|_| EINVAL)?;
            let sge = out.next().ok_or(EINVAL)?;
            // SAFETY: The device is valid (type invariant); `head` lies in the skb's linear
            // part, which stays allocated and unchanged until unmapped (the skb is ours).
            let addr = unsafe {
                map_single(
                    self.device,
                    head.as_ptr().cast_mut(),
                    head.len(),
                    DmaDirection::ToDevice,
                )
            }?;
            // INVARIANT: the head is recorded as soon as it is mapped.
            (self.head_addr, self.head_len) = (addr, length);
            sge.write(bindings::ib_sge { addr, length, lkey });
            written = 1;
        }
        // A linear skb (most datagrams) is done: no loop set up for its fragments.
        if frags.is_empty() {
            return Ok(written);
        }
        // `check` leaves fewer fragments than `self.frags` has records: none is skipped.
        for ((frag, slot), sge) in frags.iter().zip(self.frags.iter_mut()).zip(out) {
            let (page, offset, len) = frag_page(frag).ok_or(EINVAL)?;
            let length = u32::try_from(len).map_err(|_| EINVAL)?;
            // SAFETY: The device is valid; the fragment's page holds `len` bytes at `offset`
            // and stays referenced by the skb until unmapped.
            let addr = unsafe {
                map_page(
                    self.device,
                    page.as_ptr(),
                    offset,
                    len,
                    DmaDirection::ToDevice,
                )
            }?;
            slot.write(addr);
            // INVARIANT: each fragment is recorded as soon as it is mapped, in order.
            self.mapped += 1;
            sge.write(bindings::ib_sge { addr, length, lkey });
        }
        Ok(written + self.mapped)
    }

    /// Number of segments: what a send needs in scatter/gather entries.
    #[inline]
    pub(crate) fn segments(skb: &SkBuff, offset: u32) -> usize {
        usize::from(skb.headlen() > offset) + skb.nr_frags()
    }

    /// The address and length of mapped fragment `index` (below `mapped`).
    #[inline]
    fn frag_mapping(&self, index: usize) -> (u64, usize) {
        let len = self.skb.as_ref().and_then(|skb| skb.frag_len(index));
        match self.frags.get(index) {
            // SAFETY: `frags[..mapped]` are initialised (type invariant) and the caller asks
            // for one of them.
            Some(addr) if index < self.mapped => (unsafe { addr.assume_init() }, len.unwrap_or(0)),
            _ => (0, 0),
        }
    }

    /// Ends the mappings and takes the skb out, in place; `None` if it was taken already.
    #[inline]
    pub(crate) fn take_skb(&mut self) -> Option<SkBuff> {
        self.unmap();
        self.skb.take()
    }

    /// Ends every mapping recorded and forgets it. Inline when there is nothing to end: when
    /// nothing is recorded (a send's slot dropped after its completion took the skb out),
    /// or when the addresses are the memory's own (a software device: every send).
    #[inline]
    fn unmap(&mut self) {
        if self.head_len == 0 && self.mapped == 0 {
            return;
        }
        // SAFETY: The device is valid (type invariant).
        if unsafe { uses_virt_dma(self.device) } {
            (self.head_len, self.mapped) = (0, 0);
            return;
        }
        self.unmap_recorded();
    }

    #[inline(never)]
    fn unmap_recorded(&mut self) {
        if self.head_len != 0 {
            // SAFETY: By the type invariant `head_addr` maps `head_len` bytes on `device`,
            // which is valid; it is forgotten below.
            unsafe {
                unmap(
                    self.device,
                    self.head_addr,
                    self.head_len as usize,
                    DmaDirection::ToDevice,
                    false,
                )
            };
            self.head_len = 0;
        }
        for index in 0..self.mapped {
            let (addr, len) = self.frag_mapping(index);
            // SAFETY: By the type invariant `addr` maps fragment `index` (`len` bytes, the skb
            // being unchanged) on `device`, which is valid; it is forgotten below.
            unsafe { unmap(self.device, addr, len, DmaDirection::ToDevice, true) };
        }
        self.mapped = 0;
    }
}

impl Drop for SkbMapping {
    #[inline]
    fn drop(&mut self) {
        // The skb, if still here, is freed after its mappings end, with the field.
        self.unmap();
    }
}
