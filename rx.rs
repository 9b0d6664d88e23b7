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

/// Passes up a message whose first bytes are `head` (the 4-byte IPoIB header first), copied
/// into the skb's linear part, and whose remainder `rest` attaches as page fragments,
/// whatever its ethertype (as C: a packet socket may want it; the stack drops and counts
/// what nobody takes). A message shorter than the header is counted as an error; one that
/// finds memory short, as dropped.
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

/// Passes up `skb`, received in place: its data is `FRONT` bytes that `classify` reads
/// (the GRH space of a datagram), then the message, the 4-byte IPoIB header first. The
/// front makes room for the pseudo header. `classify` says who the message was addressed
/// to, or `None` to drop it uncounted (our own multicast come back). The front is stripped
/// and the message framed in one edit of the skb. Counted as `deliver_with` counts; a
/// message shorter than its front, as an error.
pub(crate) fn deliver_skb<const FRONT: usize>(
    mut skb: SkBuff,
    classify: impl FnOnce(&[u8; FRONT]) -> Option<PacketType>,
    napi: &Napi,
    tally: &mut Tally<'_>,
) {
    let counters = tally.counters();
    let Ok(mut front) = skb.edit_front() else {
        bump(&counters.rx_dropped, 1);
        return;
    };
    let Some(head) = front.data().first_chunk::<FRONT>() else {
        bump(&counters.rx_errors, 1);
        return;
    };
    let Some(pkt_type) = classify(head) else {
        return;
    };
    let header = match front.pull(FRONT as u32) {
        Ok(()) => EncapHeader::parse(front.data()).ok(),
        Err(_) => None,
    };
    let Some((header, _)) = header else {
        bump(&counters.rx_errors, 1);
        return;
    };
    // The pseudo header goes in front of the IPoIB header, zeroed; the MAC header spans
    // both (as C exposes it) and the data starts after them.
    let framed = match front.push(HWADDR_LEN as u32) {
        Ok(pseudo) => {
            pseudo.fill(0);
            front.reset_mac_header();
            front.pull(wire::HARD_HEADER_LEN as u32)
        }
        Err(e) => Err(e),
    };
    drop(front);
    if framed.is_err() {
        bump(&counters.rx_dropped, 1);
        return;
    }
    skb.set_protocol(header.ethertype);
    skb.set_pkt_type(pkt_type);
    tally.received(skb.len());
    napi.gro_receive(skb);
}

/// An skb holding a zeroed pseudo header and the message, framed.
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
    frame(&mut skb, ethertype, pkt_type)?;
    Ok(skb)
}

/// Frames an skb whose data is the pseudo header, the IPoIB header, then the payload: the
/// MAC header spans both headers (as the C driver exposes it) and the data starts after
/// them.
fn frame(skb: &mut SkBuff, ethertype: u16, pkt_type: PacketType) -> Result {
    skb.reset_mac_header();
    skb.pull(wire::HARD_HEADER_LEN as u32)?;
    skb.set_protocol(ethertype);
    skb.set_pkt_type(pkt_type);
    Ok(())
}
