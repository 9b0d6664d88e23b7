// SPDX-License-Identifier: GPL-2.0

//! Kernel buffers mapped for DMA by an RDMA device.
//!
//! C header: [`include/rdma/ib_verbs.h`](srctree/include/rdma/ib_verbs.h) (`ib_dma_*`).

use super::device::{Device, DeviceRef};
use crate::{
    alloc::{Flags, KVec},
    bindings,
    error::{code::ENOMEM, Result},
};

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
    /// Allocates `size` zeroed bytes with `flags` and maps them for `dir` on `device`.
    pub fn new(device: &Device, size: usize, dir: DmaDirection, flags: Flags) -> Result<Self> {
        let device = device.get_ref()?;
        let mut buf = KVec::from_elem(0u8, size, flags)?;
        // SAFETY: The device is registered; `buf` is a live allocation of `size` bytes that
        // is not moved (only its owning `KVec` is) until unmapped in `drop`.
        let addr = unsafe {
            bindings::ib_dma_map_single(
                device.as_raw(),
                buf.as_mut_ptr().cast(),
                size,
                dir.as_raw(),
            )
        };
        // SAFETY: The device is valid and `addr` came from a mapping on it.
        if unsafe { bindings::ib_dma_mapping_error(device.as_raw(), addr) } != 0 {
            return Err(ENOMEM);
        }
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
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether the buffer has no bytes.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes, for the CPU.
    pub fn as_slice(&self) -> &[u8] {
        self.buf.as_slice()
    }

    /// The bytes, for the CPU to fill.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        self.buf.as_mut_slice()
    }

    /// The device address of the first byte.
    pub(crate) fn dma_addr(&self) -> u64 {
        self.addr
    }

    /// Hands the bytes to the device (before posting).
    pub(crate) fn sync_for_device(&self) {
        // SAFETY: By the type invariant `addr` maps `len()` bytes for `dir` on `device`.
        unsafe {
            bindings::ib_dma_sync_single_for_device(
                self.device.as_raw(),
                self.addr,
                self.buf.len(),
                self.dir.as_raw(),
            )
        };
    }

    /// Takes the bytes back for the CPU (after completion).
    pub(crate) fn sync_for_cpu(&self) {
        // SAFETY: By the type invariant `addr` maps `len()` bytes for `dir` on `device`.
        unsafe {
            bindings::ib_dma_sync_single_for_cpu(
                self.device.as_raw(),
                self.addr,
                self.buf.len(),
                self.dir.as_raw(),
            )
        };
    }
}

impl Drop for DmaBuffer {
    fn drop(&mut self) {
        // SAFETY: By the type invariant the mapping exists and is released only here, before
        // `buf` is freed (fields drop after this body).
        unsafe {
            bindings::ib_dma_unmap_single(
                self.device.as_raw(),
                self.addr,
                self.buf.len(),
                self.dir.as_raw(),
            )
        };
    }
}
