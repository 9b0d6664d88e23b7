use ipoib_wire::wire::*;

#[test]
fn service_id_is_base_or_qpn() {
    assert_eq!(cm_service_id(0x000123), 0x1000_0000_0000_0123);
    // Only the 24 QPN bits take part.
    assert_eq!(cm_service_id(0xff00_0011), 0x1000_0000_0000_0011);
}

#[test]
fn private_data_bytes_match_the_c_driver() {
    // The C driver sends cpu_to_be32(qpn) then cpu_to_be32(IPOIB_CM_BUF_SIZE).
    let p = CmPrivateData {
        qpn: 0x00ab_cdef,
        mtu: CM_BUF_SIZE,
    };
    assert_eq!(
        p.to_bytes(),
        [0x00, 0xab, 0xcd, 0xef, 0x00, 0x00, 0xff, 0xf4]
    );
    assert_eq!(CM_BUF_SIZE, 65524);
    assert_eq!(p.payload_mtu(), Some(CM_MTU));
}

#[test]
fn private_data_parse_ignores_padding_and_qpn_high_byte() {
    let mut bytes = [0u8; 196];
    bytes[..8].copy_from_slice(&[0x7f, 0x00, 0x00, 0x11, 0x00, 0x00, 0x08, 0x00]);
    bytes[8] = 0x55;
    let p = CmPrivateData::parse(&bytes).unwrap();
    assert_eq!(p.qpn, 0x11);
    assert_eq!(p.mtu, 2048);
    assert_eq!(p.payload_mtu(), Some(2044));
}

#[test]
fn private_data_too_short_or_tiny_mtu() {
    assert_eq!(CmPrivateData::parse(&[0; 7]), Err(WireError::BadLength));
    for mtu in 0..=4 {
        let p = CmPrivateData { qpn: 1, mtu };
        assert_eq!(p.payload_mtu(), None, "mtu {mtu} must be refused");
    }
    assert_eq!(CmPrivateData { qpn: 1, mtu: 5 }.payload_mtu(), Some(1));
}
