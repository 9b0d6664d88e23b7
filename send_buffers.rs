// SPDX-License-Identifier: GPL-2.0

//! Send buffers shared by the UD queue pair and every transmit connection. Their number is
//! the one bound on sends in flight on the interface: the transmit queue stops when the
//! last one is taken and wakes when completions return some, so no send queue and no
//! completion queue can overflow.

use crate::wire::HWADDR_LEN;
use core::sync::atomic::{AtomicU64, Ordering};
use kernel::{
    net::{dev::NetDevice, skb::SkBuff},
    new_spinlock_bh,
    prelude::*,
    rdma::{
        device::{Device, DeviceRef},
        dma::{DmaBuffer, DmaDirection},
    },
    sync::{Arc, SpinLockBh},
};

/// The interface's send buffers; a `None` slot is a buffer in flight.
#[pin_data]
pub(crate) struct SendBuffers {
    #[pin]
    slots: SpinLockBh<KVec<Option<DmaBuffer>>>,
    /// Bytes per buffer: the largest message the interface sends.
    size: usize,
    device: DeviceRef,
    /// Times the last idle buffer was taken and the queue stopped.
    stops: AtomicU64,
}

impl SendBuffers {
    /// Allocates `count` buffers of `size` bytes mapped for sending on `device`.
    pub(crate) fn new(device: &Device, count: u32, size: usize) -> Result<Arc<Self>> {
        let mut slots = KVec::with_capacity(count as usize, GFP_KERNEL)?;
        for _ in 0..count {
            let buf = DmaBuffer::new(device, size, DmaDirection::ToDevice, GFP_KERNEL)?;
            slots.push(Some(buf), GFP_KERNEL)?;
        }
        let device = device.get_ref()?;
        Arc::pin_init(
            pin_init!(Self {
                slots <- new_spinlock_bh!(slots, "SendBuffers::slots"),
                size,
                device,
                stops: AtomicU64::new(0),
            }),
            GFP_KERNEL,
        )
    }

    /// Times the queue stopped for want of a buffer.
    pub(crate) fn stops(&self) -> u64 {
        self.stops.load(Ordering::Relaxed)
    }

    /// Bytes per buffer.
    pub(crate) fn size(&self) -> usize {
        self.size
    }

    /// Takes an idle buffer; stops `dev`'s queue when it was the last (or none is left).
    pub(crate) fn take(&self, dev: &NetDevice) -> Option<DmaBuffer> {
        let (buf, last) = {
            let mut slots = self.slots.lock();
            let buf = slots.iter_mut().find_map(|slot| slot.take());
            // Stops at the first idle buffer: no need to count them all per packet.
            (buf, !slots.iter().any(|s| s.is_some()))
        };
        if last {
            self.stops.fetch_add(1, Ordering::Relaxed);
            dev.stop_queue();
        }
        buf
    }

    /// Takes an idle buffer and copies into it the message `skb` carries: its `len` bytes
    /// after the pseudo header. `None` when no buffer is idle or `skb` is shorter (the
    /// buffer then stays in the pool).
    pub(crate) fn load(&self, skb: &SkBuff, len: usize, dev: &NetDevice) -> Option<DmaBuffer> {
        let mut buf = self.take(dev)?;
        let copied = buf
            .as_mut_slice()
            .get_mut(..len)
            .map(|dst| skb.copy_bits(HWADDR_LEN as u32, dst));
        if let Some(Ok(())) = copied {
            Some(buf)
        } else {
            self.give(buf);
            None
        }
    }

    /// Whether a buffer is idle.
    pub(crate) fn any_idle(&self) -> bool {
        self.slots.lock().iter().any(|s| s.is_some())
    }

    /// Returns a buffer after its send completed or failed.
    pub(crate) fn give(&self, buf: DmaBuffer) {
        let mut slots = self.slots.lock();
        if let Some(slot) = slots.iter_mut().find(|s| s.is_none()) {
            *slot = Some(buf);
        }
    }

    /// Replaces `lost` buffers that went with a destroyed queue pair (process context).
    pub(crate) fn replace_lost(&self, lost: usize) -> Result {
        for _ in 0..lost {
            let buf = DmaBuffer::new(&self.device, self.size, DmaDirection::ToDevice, GFP_KERNEL)?;
            self.give(buf);
        }
        Ok(())
    }
}
