use ipoib_wire::wire::*;

const GID: Gid = Gid([
    0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
]);

#[test]
fn build_and_parse_round_trip() {
    let a = HwAddr::new(FLAG_CONNECTED_MODE, 0x000123, GID).unwrap();
    let b = HwAddr::from_bytes(a.as_bytes()).unwrap();
    assert_eq!(a, b);
    assert_eq!(&a.as_bytes()[..4], &[0x80, 0x00, 0x01, 0x23]);
    assert_eq!(&a.as_bytes()[4..], &GID.0);
}

#[test]
fn flags_qpn_and_gid_fields() {
    let bytes: [u8; 20] = [
        0x80, 0xab, 0xcd, 0xef, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0x00, 0xff, 0xfe, 0x12,
        0x34, 0x56,
    ];
    let a = HwAddr::from_bytes(&bytes).unwrap();
    assert_eq!(a.flags(), 0x80);
    assert!(a.connected_mode());
    assert_eq!(a.qpn(), 0xabcdef);
    assert_eq!(a.gid(), GID);
    assert_eq!(a.gid().subnet_prefix(), 0xfe80_0000_0000_0000);
    assert_eq!(a.gid().interface_id(), 0x5254_00ff_fe12_3456);
    assert!(!a.is_multicast());

    let datagram_only = HwAddr::new(0, 0xabcdef, GID).unwrap();
    assert!(!datagram_only.connected_mode());
    assert_eq!(datagram_only.qpn(), 0xabcdef);
}

#[test]
fn qpn_wider_than_24_bits_is_rejected() {
    assert_eq!(HwAddr::new(0, 0x0100_0000, GID), Err(WireError::BadQpn));
    assert!(HwAddr::new(0, MAX_QPN, GID).is_ok());
}

#[test]
fn invalid_lengths_are_rejected() {
    for len in [0usize, 1, 4, 19, 21, 24, 40] {
        let bytes = vec![0u8; len];
        assert_eq!(
            HwAddr::from_bytes(&bytes),
            Err(WireError::BadLength),
            "len {len}"
        );
    }
}

#[test]
fn broadcast_address_matches_the_c_driver() {
    // ipoib_add_port: "\x00\xff\xff\xff\xff\x12\x40\x1b\x00\x00..." with the P_Key at 8..10.
    let expect: [u8; 20] = [
        0x00, 0xff, 0xff, 0xff, 0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff,
        0xff, 0xff,
    ];
    let b = HwAddr::broadcast(0xffff);
    assert_eq!(b.as_bytes(), &expect);
    assert!(b.is_multicast());
    assert_eq!(b.qpn(), MULTICAST_QPN);
    assert_eq!(
        b.to_string(),
        "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff"
    );
}

#[test]
fn broadcast_forces_the_full_member_bit() {
    // A limited-member P_Key 0x1234 becomes 0x9234 in the MGID.
    let b = HwAddr::broadcast(0x1234);
    assert_eq!(&b.as_bytes()[8..10], &[0x92, 0x34]);
    assert_eq!(HwAddr::broadcast(0x9234), b);
}

#[test]
fn encapsulation_header_round_trip() {
    let h = EncapHeader {
        ethertype: EtherType::Ipv6 as u16,
    };
    assert_eq!(h.to_bytes(), [0x86, 0xdd, 0, 0]);
    let packet = [0x08, 0x06, 0, 0, 1, 2, 3];
    let (h, payload) = EncapHeader::parse(&packet).unwrap();
    assert_eq!(h.protocol(), Some(EtherType::Arp));
    assert_eq!(payload, &[1, 2, 3]);
}

#[test]
fn encapsulation_header_too_short_is_rejected() {
    for len in 0..ENCAP_HEADER_LEN {
        assert_eq!(
            EncapHeader::parse(&[0x08, 0x00, 0][..len]).err(),
            Some(WireError::BadLength)
        );
    }
}

#[test]
fn only_the_c_drivers_ethertypes_are_carried() {
    for (value, t) in [
        (0x0800, EtherType::Ipv4),
        (0x0806, EtherType::Arp),
        (0x8035, EtherType::Rarp),
        (0x86dd, EtherType::Ipv6),
        (0x88ca, EtherType::Tipc),
    ] {
        assert_eq!(EtherType::from_u16(value), Some(t));
    }
    for value in [0x0000, 0x88cc, 0x8100, 0x88f7, 0xffff] {
        assert_eq!(EtherType::from_u16(value), None, "{value:#06x}");
    }
    let (h, _) = EncapHeader::parse(&[0x88, 0xcc, 0, 0]).unwrap();
    assert_eq!(h.protocol(), None);
}

#[test]
fn header_lengths_match_the_c_driver() {
    assert_eq!(HWADDR_LEN, 20);
    assert_eq!(ENCAP_HEADER_LEN, 4);
    assert_eq!(HARD_HEADER_LEN, 24);
}

#[test]
fn multicast_mac_of_the_broadcast_group() {
    let mgid = HwAddr::broadcast(DEFAULT_PKEY).gid();
    assert!(mgid.is_multicast());
    assert_eq!(multicast_mac(&mgid), [0x33, 0x33, 0xff, 0xff, 0xff, 0xff]);
    let g = Gid([
        0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xe0, 0x00, 0x00, 0x01,
    ]);
    assert_eq!(multicast_mac(&g), [0x33, 0x33, 0xe0, 0, 0, 1]);
}

#[test]
fn multicast_list_keeps_the_groups_c_keeps() {
    let bcast = HwAddr::broadcast(0x8001);
    let group = |gid: [u8; 16]| HwAddr::new(0, MULTICAST_QPN, Gid(gid)).unwrap();
    // IPv4 (0x401b) and IPv6 (0x601b) groups of the partition, link-local scope.
    let v4 = [
        0xff, 0x12, 0x40, 0x1b, 0x80, 0x01, 0, 0, 0, 0, 0, 0, 0xe0, 0, 0, 0xfb,
    ];
    let v6 = [
        0xff, 0x12, 0x60, 0x1b, 0x80, 0x01, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 1,
    ];
    assert!(group(v4).is_group_of(&bcast));
    assert!(group(v6).is_group_of(&bcast));
    assert!(bcast.is_group_of(&bcast));
    // Another partition, scope or signature, a unicast QPN or flags: left out.
    let mut other_pkey = v4;
    other_pkey[5] = 0x02;
    let mut site_scope = v4;
    site_scope[1] = 0x15;
    let mut not_ipoib = v4;
    not_ipoib[3] = 0x1c;
    for gid in [other_pkey, site_scope, not_ipoib] {
        assert!(!group(gid).is_group_of(&bcast));
    }
    assert!(!HwAddr::new(0, 0x12, Gid(v4)).unwrap().is_group_of(&bcast));
    assert!(!HwAddr::new(FLAG_CONNECTED_MODE, MULTICAST_QPN, Gid(v4))
        .unwrap()
        .is_group_of(&bcast));
}

#[test]
fn link_local_gid_gives_its_mac() {
    // fe80::5054:ff:fe12:3456 was made from 52:54:00:12:34:56 (universal/local bit flipped).
    let g = Gid([
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ]);
    assert_eq!(
        g.link_local_mac(),
        Some([0x52, 0x54, 0x00, 0x12, 0x34, 0x56])
    );
    // A global prefix, or an interface ID not made from a MAC: none.
    let mut global = g;
    global.0[0] = 0x20;
    let mut not_eui = g;
    not_eui.0[11] = 0x00;
    assert_eq!(global.link_local_mac(), None);
    assert_eq!(not_eui.link_local_mac(), None);
}
