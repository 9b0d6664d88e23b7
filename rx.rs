// SPDX-License-Identifier: GPL-2.0

//! Received IPoIB messages (UD datagrams and RC messages alike) handed to the stack.

use crate::{
    stats::{bump, Counters},
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
/// Of a larger message, the bytes copied into the linear part (the headers); the rest goes
/// into page fragments, so that even a 64 KiB message needs only order-0 allocations.
const HEAD_LEN: usize = 256;

/// Passes `msg` (the 4-byte IPoIB header, then the payload) up as a packet of `pkt_type`;
/// drops it, counted, when its protocol is not one IPoIB carries or memory is short.
pub(crate) fn deliver(msg: &[u8], pkt_type: PacketType, napi: &Napi, c: &Counters) {
    let Ok((header, _)) = EncapHeader::parse(msg) else {
        bump(&c.rx_dropped, 1);
        return;
    };
    if header.protocol().is_none() {
        bump(&c.rx_dropped, 1);
        return;
    }
    match build(msg, header.ethertype, pkt_type, napi) {
        Ok(skb) => {
            bump(&c.rx_packets, 1);
            bump(&c.rx_bytes, u64::from(skb.len()));
            napi.gro_receive(skb);
        }
        Err(_) => bump(&c.rx_dropped, 1),
    }
}

/// An skb holding a zeroed pseudo header and `msg`, with the MAC header spanning both
/// (as the C driver exposes it) and the data starting after it.
fn build(msg: &[u8], ethertype: u16, pkt_type: PacketType, napi: &Napi) -> Result<SkBuff> {
    let linear = if msg.len() <= COPY_MAX {
        msg.len()
    } else {
        HEAD_LEN
    };
    let (head, rest) = msg.split_at(linear);
    let linear = (HWADDR_LEN + head.len()) as u32;
    let mut skb = SkBuff::alloc(napi.device(), linear, GFP_ATOMIC)?;
    let room = skb.put(linear)?;
    room[..HWADDR_LEN].fill(0);
    room[HWADDR_LEN..].copy_from_slice(head);
    skb.append_paged(rest, GFP_ATOMIC)?;
    skb.reset_mac_header();
    skb.pull(wire::HARD_HEADER_LEN as u32)?;
    skb.set_protocol(ethertype);
    skb.set_pkt_type(pkt_type);
    Ok(skb)
}
