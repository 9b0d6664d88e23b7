use ipoib_wire::wire::*;

/// GIDs that differ in each half, in the high and low bit of a byte, and at both ends.
fn gids() -> Vec<[u8; 16]> {
    let mut gids = vec![[0u8; 16], [0xff; 16]];
    for byte in [0, 7, 8, 15] {
        for bit in [0x01, 0x80] {
            let mut g = [0u8; 16];
            g[byte] = bit;
            gids.push(g);
            let mut g = [0xffu8; 16];
            g[byte] ^= bit;
            gids.push(g);
        }
    }
    gids.push([
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x52, 0x54, 0x00, 0xff, 0xfe, 0x12, 0x34, 0x56,
    ]);
    gids
}

#[test]
fn gid_key_orders_as_the_bytes() {
    let gids = gids();
    for a in &gids {
        for b in &gids {
            assert_eq!(
                GidKey::new(a).cmp(&GidKey::new(b)),
                a.cmp(b),
                "{a:x?} {b:x?}"
            );
        }
    }
}

#[test]
fn gid_key_gives_the_bytes_back() {
    for g in gids() {
        assert_eq!(GidKey::new(&g).to_bytes(), g);
    }
}
