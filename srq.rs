// SPDX-License-Identifier: GPL-2.0

//! Connected mode's receive buffers and the shared receive queue (SRQ) they are posted to.
//!
//! A buffer holds `CM_BUF_SIZE` bytes (64 KiB): a head of what is left after whole pages
//! (4084 bytes with 4 KiB pages, as in the C driver), which becomes the skb's linear part,
//! then whole pages, handed up as fragments and replaced by fresh ones, so the bulk of a
//! large message is never copied. All receive connections of an interface take them from one
//! SRQ (memory stays constant as peers grow); where the device has none, or with `cm_srq=0`,
//! each connection fills a ring of its own with the same buffers (see `cm_rx.rs`).

use crate::{
    params, rx,
    stats::{bump, Tally},
    wire::CM_BUF_SIZE,
};
use kernel::{
    net::{napi::Napi, skb::PacketType},
    page::PAGE_SIZE,
    prelude::*,
    rdma::{device::Device, dma::ScatterBuffer, pd::ProtectionDomain, srq::SharedReceiveQueue},
    sync::Arc,
};

/// Pages of a receive buffer after its head: with the head, `CM_BUF_SIZE` bytes.
const RX_PAGES: usize = CM_BUF_SIZE as usize / PAGE_SIZE;
/// The head of a receive buffer: what is left of `CM_BUF_SIZE` after whole pages. It
/// becomes the skb's linear part.
const RX_HEAD: usize = CM_BUF_SIZE as usize % PAGE_SIZE;

/// The shared receive queue of an interface's receive connections.
pub(crate) type Srq = SharedReceiveQueue<ScatterBuffer>;

/// Whether receive connections on `device` share one receive queue: where it has them,
/// unless `cm_srq=0`.
pub(crate) fn uses_srq(device: &Device) -> bool {
    params::CM_SRQ.get() && SharedReceiveQueue::supported(device)
}

/// Scatter/gather entries one receive buffer takes: its head and its pages.
pub(crate) fn recv_sges() -> u32 {
    1 + RX_PAGES as u32
}

/// A receive buffer of connected mode: a head and pages, `CM_BUF_SIZE` bytes in all.
pub(crate) fn recv_buffer(device: &Device) -> Result<ScatterBuffer> {
    ScatterBuffer::new(device, RX_HEAD, RX_PAGES, GFP_KERNEL)
}

/// A shared receive queue of `size` buffers in `pd`, filled.
pub(crate) fn new_srq(device: &Device, pd: &Arc<ProtectionDomain>, size: u32) -> Result<Arc<Srq>> {
    let srq = SharedReceiveQueue::new(pd, size, recv_sges())?;
    for _ in 0..size {
        srq.post_recv(recv_buffer(device)?)?;
    }
    Ok(srq)
}

/// Hands up a message that filled `len` bytes of `buf`: the head is copied into the skb,
/// the pages the message reached go up as fragments and fresh pages take their place.
/// Without a fresh page the old one stays and the message is dropped.
pub(crate) fn deliver(buf: &mut ScatterBuffer, len: usize, napi: &Napi, tally: &mut Tally<'_>) {
    let (head, pages) = buf.parts_mut();
    let Some(head) = head.get(..len.min(RX_HEAD)) else {
        bump(&tally.counters().rx_errors, 1);
        return;
    };
    rx::deliver_with(head, PacketType::Host, napi, tally, |skb| {
        let rest = len.saturating_sub(RX_HEAD);
        pages.renew_first(rest.div_ceil(PAGE_SIZE), GFP_ATOMIC, |index, page| {
            let n = rest
                .saturating_sub(index.saturating_mul(PAGE_SIZE))
                .min(PAGE_SIZE);
            skb.add_page(page, 0, n)
        })
    });
}
