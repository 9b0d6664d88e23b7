//! What must hold for any bytes a peer can send: the properties the fuzz target checks,
//! shared with the regression tests that replay the inputs it once found.

use crate::wire::*;

/// Runs every parser of the wire formats on `data` and checks what the driver relies on:
/// no panic, parsed values round-trip to the bytes they came from, and QPNs stay 24-bit.
pub fn all_parsers(data: &[u8]) {
    // A received message: the encapsulation header, then the payload.
    if let Ok((header, payload)) = EncapHeader::parse(data) {
        assert_eq!(payload.len(), data.len() - ENCAP_HEADER_LEN);
        assert_eq!(header.to_bytes()[..2], data[..2]);
        if let Some(protocol) = header.protocol() {
            assert_eq!(EtherType::from_u16(header.ethertype), Some(protocol));
        }
    } else {
        assert!(data.len() < ENCAP_HEADER_LEN);
    }
    // A hardware address (from a neighbour entry or a pseudo header).
    if let Some(bytes) = data.get(..HWADDR_LEN) {
        let addr = HwAddr::from_bytes(bytes).expect("20 bytes always parse");
        assert_eq!(addr.as_bytes()[..], bytes[..]);
        assert!(addr.qpn() <= 0x00ff_ffff);
        let again = HwAddr::new(addr.flags(), addr.qpn(), addr.gid()).expect("24-bit QPN");
        assert_eq!(again, addr);
        let _ = addr.to_string();
        if addr.is_multicast() {
            let _ = multicast_mac(&addr.gid());
        }
    }
    assert!(HwAddr::from_bytes(data).is_ok() == (data.len() == HWADDR_LEN));
    // The private data of a connection request or reply.
    if let Ok(p) = CmPrivateData::parse(data) {
        assert!(p.qpn <= 0x00ff_ffff);
        assert_eq!(p.to_bytes()[1..], data[1..CM_PRIVATE_DATA_LEN]);
        assert_eq!(CmPrivateData::parse(&p.to_bytes()), Ok(p));
        if let Some(mtu) = p.payload_mtu() {
            assert!(mtu > 0 && mtu < p.mtu);
        }
        let id = cm_service_id(p.qpn);
        assert_eq!(id & 0x00ff_ffff, u64::from(p.qpn));
    } else {
        assert!(data.len() < CM_PRIVATE_DATA_LEN);
    }
}
