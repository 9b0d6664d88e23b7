// SPDX-License-Identifier: GPL-2.0

//! Kernel buffers mapped for DMA by an RDMA device.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`ib_dma_*`).

use super::device::{Device, DeviceRef};
use crate::{
    alloc::{Flags, KVec},
    bindings,
    error::{
        code::{EINVAL, ENOMEM},
        Error, Result,
    },
    net::skb::SkBuff,
    page::{Page, PAGE_SIZE},
};
use core::mem::ManuallyDrop;

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
#[inline]
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
#[inline]
unsafe fn map_page(
    device: *mut bindings::ib_device,
    page: *mut bindings::page,
    offset: usize,
    len: usize,
    dir: DmaDirection,
) -> Result<u64> {
    // SAFETY: The caller guarantees the device and the page.
    let addr = unsafe { bindings::ib_dma_map_page(device, page, offset, len, dir.as_raw()) };
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
/// # Invariants
///
/// `addr` is the mapping of all of `buf` (`buf.len()` bytes) for `dir` on `device`, made by
/// `ib_dma_map_single`; outside queue pairs the buffer is synchronised for the CPU.
pub struct DmaBuffer {
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
        let this = Self {
            buf,
            addr,
            dir,
            device,
        };
        this.sync_for_cpu();
        Ok(this)
    }

    /// The size of the buffer in bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes, for the CPU.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The bytes, for the CPU to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// The device address of the first byte.
    #[inline]
    pub(crate) fn dma_addr(&self) -> u64 {
        self.addr
    }

    /// Whether `device` may use the buffer: mapped on it, for the device to write it
    /// (`device_writes`: a receive) or to read it (a send).
    #[inline]
    pub(crate) fn usable_by(&self, device: &Device, device_writes: bool) -> bool {
        let allowed = match self.dir {
            DmaDirection::Bidirectional => true,
            DmaDirection::FromDevice => device_writes,
            DmaDirection::ToDevice => !device_writes,
        };
        allowed && self.device.as_raw() == device.as_raw()
    }

    /// Hands the bytes to the device (before posting).
    #[inline]
    pub(crate) fn sync_for_device(&self) {
        // SAFETY: By the type invariant `addr` maps `len()` bytes for `dir` on `device`.
        unsafe {
            sync(
                self.device.as_raw(),
                self.addr,
                self.buf.len(),
                self.dir,
                true,
            )
        };
    }

    /// Takes the bytes back for the CPU (after completion).
    #[inline]
    pub(crate) fn sync_for_cpu(&self) {
        // SAFETY: By the type invariant `addr` maps `len()` bytes for `dir` on `device`.
        unsafe {
            sync(
                self.device.as_raw(),
                self.addr,
                self.buf.len(),
                self.dir,
                false,
            )
        };
    }
}

impl Drop for DmaBuffer {
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

/// A page mapped for an RDMA device to write into (receives), whose ownership can be taken
/// back unmapped ([`DmaPage::into_page`]) and handed to the network stack without a copy.
///
/// # Invariants
///
/// `addr` is the mapping of all of `page` from the device, made by `ib_dma_map_page`;
/// outside queues the page is synchronised for the CPU.
pub struct DmaPage {
    page: ManuallyDrop<Page>,
    addr: u64,
    device: DeviceRef,
}

impl DmaPage {
    /// Allocates a page with `flags` and maps it for receiving on `device`.
    pub fn new(device: &Device, flags: Flags) -> Result<Self> {
        let device = device.get_ref()?;
        let page = Page::alloc_page(flags)?;
        // SAFETY: The device is registered; the page is ours and stays allocated until it is
        // unmapped (in `into_page` or `drop`).
        let addr = unsafe {
            map_page(
                device.as_raw(),
                page.as_ptr(),
                0,
                PAGE_SIZE,
                DmaDirection::FromDevice,
            )
        }?;
        // INVARIANT: just mapped; a fresh mapping is synchronised for the CPU.
        Ok(Self {
            page: ManuallyDrop::new(page),
            addr,
            device,
        })
    }

    /// Ends the mapping and returns the page with what the device wrote.
    pub fn into_page(self) -> Page {
        let mut this = ManuallyDrop::new(self);
        this.unmap();
        // SAFETY: `this` is never used or dropped again: the device reference is released
        // here, once, as `drop` would.
        unsafe { core::ptr::drop_in_place(&mut this.device) };
        // SAFETY: As above: the page is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.page) }
    }

    #[inline]
    fn unmap(&mut self) {
        // SAFETY: By the type invariant the mapping exists; callers release it once.
        unsafe {
            unmap(
                self.device.as_raw(),
                self.addr,
                PAGE_SIZE,
                DmaDirection::FromDevice,
                true,
            )
        };
    }

    #[inline]
    pub(crate) fn dma_addr(&self) -> u64 {
        self.addr
    }

    #[inline]
    pub(crate) fn sync_for_device(&self) {
        // SAFETY: By the type invariant `addr` maps a page from the device.
        unsafe {
            sync(
                self.device.as_raw(),
                self.addr,
                PAGE_SIZE,
                DmaDirection::FromDevice,
                true,
            )
        };
    }

    #[inline]
    pub(crate) fn sync_for_cpu(&self) {
        // SAFETY: By the type invariant `addr` maps a page from the device.
        unsafe {
            sync(
                self.device.as_raw(),
                self.addr,
                PAGE_SIZE,
                DmaDirection::FromDevice,
                false,
            )
        };
    }
}

impl Drop for DmaPage {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: Unmapped above; the page is dropped once, here.
        unsafe { ManuallyDrop::drop(&mut self.page) };
    }
}

/// A receive buffer in several segments: a head buffer, then pages. Large messages land
/// mostly in the pages, which the receiver passes up as skb fragments and replaces
/// ([`ScatterBuffer::replace_page`]) instead of copying.
pub struct ScatterBuffer {
    head: DmaBuffer,
    pages: PageSegments,
}

/// The page segments of a [`ScatterBuffer`].
pub struct PageSegments(KVec<DmaPage>);

impl PageSegments {
    /// The number of pages.
    #[inline]
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Puts `fresh` in place of page `index` and returns the old page, unmapped, with what
    /// the device wrote; `None` (and `fresh` dropped) if there is no such page.
    pub fn replace(&mut self, index: usize, fresh: DmaPage) -> Option<Page> {
        let slot = self.0.get_mut(index)?;
        Some(core::mem::replace(slot, fresh).into_page())
    }
}

impl ScatterBuffer {
    /// A head of `head_len` bytes and `pages` pages, mapped for receiving on `device`.
    pub fn new(device: &Device, head_len: usize, pages: usize, flags: Flags) -> Result<Self> {
        let head = DmaBuffer::new(device, head_len, DmaDirection::FromDevice, flags)?;
        let mut v = KVec::with_capacity(pages, flags)?;
        for _ in 0..pages {
            v.push(DmaPage::new(device, flags)?, flags)?;
        }
        Ok(Self {
            head,
            pages: PageSegments(v),
        })
    }

    /// The head segment.
    pub fn head(&self) -> &[u8] {
        self.head.as_slice()
    }

    /// The head segment to read and the pages to take, at once.
    pub fn parts_mut(&mut self) -> (&[u8], &mut PageSegments) {
        (self.head.as_slice(), &mut self.pages)
    }

    /// The segments as scatter/gather entries with `lkey`, at most `out.len()` of them.
    pub(crate) fn fill_sges(&self, lkey: u32, out: &mut [bindings::ib_sge]) -> Result<usize> {
        let n = 1 + self.pages.len();
        if n > out.len() {
            return Err(crate::error::code::EINVAL);
        }
        out[0] = bindings::ib_sge {
            addr: self.head.dma_addr(),
            length: u32::try_from(self.head.len()).map_err(|_| crate::error::code::EINVAL)?,
            lkey,
        };
        for (sge, page) in out[1..n].iter_mut().zip(self.pages.0.iter()) {
            *sge = bindings::ib_sge {
                addr: page.dma_addr(),
                length: PAGE_SIZE as u32,
                lkey,
            };
        }
        Ok(n)
    }

    #[inline]
    pub(crate) fn sync_for_device(&self) {
        self.head.sync_for_device();
        self.pages.0.iter().for_each(DmaPage::sync_for_device);
    }

    /// Whether `device` may write every segment: all mapped on it for receiving (pages put
    /// in by [`PageSegments::replace`] may come from anywhere).
    #[inline]
    pub(crate) fn usable_by(&self, device: &Device) -> bool {
        self.head.usable_by(device, true)
            && self
                .pages
                .0
                .iter()
                .all(|page| page.device.as_raw() == device.as_raw())
    }

    #[inline]
    pub(crate) fn sync_for_cpu(&self) {
        self.head.sync_for_cpu();
        self.pages.0.iter().for_each(DmaPage::sync_for_cpu);
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
        // The tailroom is unchanged since it was measured, so this cannot fail.
        let _ = skb.put(written.min(this.len));
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
/// another. Dropping it ends the mappings, then frees the skb.
///
/// # Invariants
///
/// `device` stays valid while the object lives. `head` (if any) maps the linear bytes of
/// `skb` from `offset` on, and `frags[..mapped]` its first `mapped` fragments, all with
/// `ib_dma_map_*` for `DMA_TO_DEVICE` on `device`. The skb is owned and unchanged while
/// mapped.
pub(crate) struct SkbMapping {
    skb: ManuallyDrop<SkBuff>,
    offset: u32,
    head: Option<u64>,
    frags: [u64; MAX_SKB_SEGMENTS - 1],
    mapped: usize,
    device: *mut bindings::ib_device,
}

// SAFETY: The device may be used from any thread, and an owned skb may move between threads.
unsafe impl Send for SkbMapping {}

impl SkbMapping {
    /// Maps `skb` from `offset` (in its linear part) on for `device` to read. On failure
    /// hands the skb back with the error: `EINVAL` when `offset` is past the linear part or
    /// a fragment is not a page, `ENOMEM` when a mapping fails.
    ///
    /// # Safety
    ///
    /// `device` must be valid and stay so until the object is dropped or turned back into
    /// its skb.
    pub(crate) unsafe fn new(
        device: *mut bindings::ib_device,
        skb: SkBuff,
        offset: u32,
    ) -> core::result::Result<Self, (Error, SkBuff)> {
        if offset > skb.headlen() || skb.nr_frags() >= MAX_SKB_SEGMENTS {
            return Err((EINVAL, skb));
        }
        // INVARIANT: nothing is mapped yet; each mapping is recorded as soon as it is made,
        // so a failure below ends exactly those made.
        let mut this = Self {
            skb: ManuallyDrop::new(skb),
            offset,
            head: None,
            frags: [0; MAX_SKB_SEGMENTS - 1],
            mapped: 0,
            device,
        };
        let head = this.head_bytes();
        if !head.is_empty() {
            // SAFETY: The caller guarantees the device; `head` lies in the skb's linear part,
            // which stays allocated and unchanged until unmapped (the skb is ours).
            let mapped = unsafe {
                map_single(
                    device,
                    head.as_ptr().cast_mut(),
                    head.len(),
                    DmaDirection::ToDevice,
                )
            };
            match mapped {
                Ok(addr) => this.head = Some(addr),
                Err(e) => return Err((e, this.into_skb())),
            }
        }
        for index in 0..this.skb.nr_frags() {
            let Some((page, offset, len)) = this.skb.frag(index) else {
                return Err((EINVAL, this.into_skb()));
            };
            // SAFETY: The device is valid; the fragment's page holds `len` bytes at `offset`
            // and stays referenced by the skb until unmapped.
            let mapped =
                unsafe { map_page(device, page.as_ptr(), offset, len, DmaDirection::ToDevice) };
            let addr = match mapped {
                Ok(addr) => addr,
                Err(e) => return Err((e, this.into_skb())),
            };
            // `nr_frags` is below the array's length (checked above).
            if let Some(slot) = this.frags.get_mut(index) {
                *slot = addr;
                this.mapped = index + 1;
            }
        }
        Ok(this)
    }

    /// The mapped bytes of the linear part.
    fn head_bytes(&self) -> &[u8] {
        self.skb.data().get(self.offset as usize..).unwrap_or(&[])
    }

    /// Number of segments: what a send needs in scatter/gather entries.
    pub(crate) fn segments(skb: &SkBuff, offset: u32) -> usize {
        usize::from(skb.headlen() > offset) + skb.nr_frags()
    }

    /// Number of segments mapped: the scatter/gather entries a send of them takes.
    #[inline]
    pub(crate) fn mapped_segments(&self) -> usize {
        usize::from(self.head.is_some()) + self.mapped
    }

    /// The segments as scatter/gather entries with `lkey`; returns how many were written,
    /// `EINVAL` if `out` is too short.
    pub(crate) fn fill_sges(&self, lkey: u32, out: &mut [bindings::ib_sge]) -> Result<usize> {
        let mut n = 0;
        if let Some(addr) = self.head {
            let sge = out.get_mut(n).ok_or(EINVAL)?;
            *sge = bindings::ib_sge {
                addr,
                length: u32::try_from(self.head_bytes().len()).map_err(|_| EINVAL)?,
                lkey,
            };
            n += 1;
        }
        for (index, &addr) in self.frags.iter().take(self.mapped).enumerate() {
            let len = self.skb.frag_len(index).unwrap_or(0);
            let sge = out.get_mut(n).ok_or(EINVAL)?;
            *sge = bindings::ib_sge {
                addr,
                length: u32::try_from(len).map_err(|_| EINVAL)?,
                lkey,
            };
            n += 1;
        }
        Ok(n)
    }

    /// Ends the mappings and returns the skb.
    #[inline]
    pub(crate) fn into_skb(self) -> SkBuff {
        let mut this = ManuallyDrop::new(self);
        this.unmap();
        // SAFETY: `this` is never used or dropped again, so the skb is taken exactly once.
        unsafe { ManuallyDrop::take(&mut this.skb) }
    }

    /// Ends every mapping recorded and forgets it.
    #[inline]
    fn unmap(&mut self) {
        if let Some(addr) = self.head.take() {
            // SAFETY: By the type invariant `addr` maps the head bytes on `device`, which is
            // valid; it is forgotten above.
            unsafe {
                unmap(
                    self.device,
                    addr,
                    self.head_bytes().len(),
                    DmaDirection::ToDevice,
                    false,
                )
            };
        }
        for (index, &addr) in self.frags.iter().take(self.mapped).enumerate() {
            let len = self.skb.frag_len(index).unwrap_or(0);
            // SAFETY: By the type invariant `addr` maps fragment `index` (`len` bytes) on
            // `device`, which is valid; it is forgotten below.
            unsafe { unmap(self.device, addr, len, DmaDirection::ToDevice, true) };
        }
        self.mapped = 0;
    }
}

impl Drop for SkbMapping {
    fn drop(&mut self) {
        self.unmap();
        // SAFETY: The skb is taken only here or in `into_skb`, which forgets `self`.
        drop(unsafe { ManuallyDrop::take(&mut self.skb) });
    }
}
