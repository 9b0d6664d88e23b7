// SPDX-License-Identifier: GPL-2.0

//! Received IPoIB messages (UD datagrams and RC messages alike) handed to the stack.

use crate::{
    stats::{bump, Tally},
    wire::{self, EncapHeader, HWADDR_LEN},
};
use kernel::{
    net::{
        napi::Napi,
        skb::{PacketType, SkBuff},
    },
    prelude::*,
};

/// Messages up to this size are copied whole into the skb's linear part.
const COPY_MAX: usize = 2048;
/// Of a larger message in one buffer, the bytes copied into the linear part (the headers);
/// the rest is copied into page fragments, so that only order-0 allocations are needed.
const HEAD_LEN: usize = 256;

/// Passes `msg` (the 4-byte IPoIB header, then the payload) up as a packet of `pkt_type`,
/// whatever its ethertype (as C: a packet socket may want it; the stack drops and counts
/// what nobody takes). A message shorter than the header is counted as an error; one that
/// finds memory short, as dropped.
pub(crate) fn deliver(msg: &[u8], pkt_type: PacketType, napi: &Napi, tally: &mut Tally<'_>) {
    let linear = if msg.len() <= COPY_MAX {
        msg.len()
    } else {
        HEAD_LEN
    };
    let (head, rest) = msg.split_at(linear);
    deliver_with(head, pkt_type, napi, tally, |skb| {
        if rest.is_empty() {
            Ok(())
        } else {
            skb.append_paged(rest, GFP_ATOMIC)
        }
    });
}

/// Passes up a message whose first bytes are `head` (the 4-byte IPoIB header first), copied
/// into the skb's linear part, and whose remainder `rest` attaches as page fragments.
pub(crate) fn deliver_with(
    head: &[u8],
    pkt_type: PacketType,
    napi: &Napi,
    tally: &mut Tally<'_>,
    rest: impl FnOnce(&mut SkBuff) -> Result,
) {
    let Ok((header, _)) = EncapHeader::parse(head) else {
        bump(&tally.counters().rx_errors, 1);
        return;
    };
    match build(head, header.ethertype, pkt_type, napi, rest) {
        Ok(skb) => {
            tally.received(skb.len());
            napi.gro_receive(skb);
        }
        Err(_) => bump(&tally.counters().rx_dropped, 1),
    }
}

/// An skb holding a zeroed pseudo header and the message, with the MAC header spanning the
/// pseudo header and the IPoIB header (as the C driver exposes it) and the data after them.
fn build(
    head: &[u8],
    ethertype: u16,
    pkt_type: PacketType,
    napi: &Napi,
    rest: impl FnOnce(&mut SkBuff) -> Result,
) -> Result<SkBuff> {
    let linear = (HWADDR_LEN + head.len()) as u32;
    let mut skb = napi.alloc_skb(linear)?;
    let room = skb.put(linear)?;
    room[..HWADDR_LEN].fill(0);
    room[HWADDR_LEN..].copy_from_slice(head);
    rest(&mut skb)?;
    skb.reset_mac_header();
    skb.pull(wire::HARD_HEADER_LEN as u32)?;
    skb.set_protocol(ethertype);
    skb.set_pkt_type(pkt_type);
    Ok(skb)
}
