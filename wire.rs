// SPDX-License-Identifier: GPL-2.0

//! IPoIB wire formats (RFC 4391, 4392, 4755), byte for byte as the C driver sends them.
//!
//! Uses `core` only, so the same file is unit-tested on the host (`tests/wire`).

use core::fmt;

/// Length of an IPoIB hardware address.
pub const HWADDR_LEN: usize = 20;
/// Length of the encapsulation header in front of every IPoIB payload.
pub const ENCAP_HEADER_LEN: usize = 4;
/// Length of the pseudo header (the destination hardware address) kept in front of the
/// encapsulation header inside the kernel.
pub const PSEUDO_HEADER_LEN: usize = HWADDR_LEN;
/// The net_device `hard_header_len`: pseudo header plus encapsulation header.
pub const HARD_HEADER_LEN: usize = PSEUDO_HEADER_LEN + ENCAP_HEADER_LEN;
/// Flag bit in byte 0 of a hardware address: the node accepts connected mode.
pub const FLAG_CONNECTED_MODE: u8 = 0x80;
/// The destination QPN of every multicast (and broadcast) send.
pub const MULTICAST_QPN: u32 = 0x00ff_ffff;
/// Largest QPN: QPNs are 24 bits.
pub const MAX_QPN: u32 = 0x00ff_ffff;
/// The bit that marks a P_Key full membership.
pub const PKEY_FULL_MEMBER: u16 = 0x8000;

/// Bytes in front of every UD receive: room for the GRH (on RoCE, possibly an IPv4 header
/// after 20 bytes of padding).
pub const UD_GRH_LEN: usize = 40;
/// The Q_Key of the IPoIB broadcast group when no subnet administrator sets one (RoCE):
/// OpenSM's default for IPoIB, so RoCE nodes agree without configuration.
pub const DEFAULT_QKEY: u32 = 0x0b1b;
/// The default partition, full member: the only one on RoCE.
pub const DEFAULT_PKEY: u16 = 0xffff;
/// The smallest MTU IPv4 works with: the floor of an interface's MTU, and of the receive
/// size a connecting peer may announce.
pub const MIN_MTU: u32 = 68;

/// The Ethernet address that carries IPv6 multicast `mgid` (`33:33` and its last 32 bits):
/// the destination MAC of RoCE multicast.
pub fn multicast_mac(mgid: &Gid) -> [u8; 6] {
    [0x33, 0x33, mgid.0[12], mgid.0[13], mgid.0[14], mgid.0[15]]
}

/// Why bytes were refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WireError {
    /// The slice has the wrong length for the format.
    BadLength,
    /// A QPN does not fit in 24 bits.
    BadQpn,
}

/// A GID as the key of an ordered table: its two halves as numbers, compared in the
/// order of the bytes. A lookup compares the subnet prefixes, mostly equal, then the
/// interface IDs: a few instructions per tree node, where one 128-bit comparison took two
/// dozen and a byte array's more.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct GidKey {
    prefix: u64,
    interface_id: u64,
}

impl GidKey {
    /// The key of the GID whose bytes are `gid`.
    #[inline]
    pub fn new(gid: &[u8; 16]) -> Self {
        Self {
            prefix: u64::from_be_bytes(first_bytes(gid)),
            interface_id: u64::from_be_bytes(first_bytes(&gid[8..])),
        }
    }

    /// The GID's bytes.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut gid = [0; 16];
        let (prefix, interface_id) = gid.split_at_mut(8);
        prefix.copy_from_slice(&self.prefix.to_be_bytes());
        interface_id.copy_from_slice(&self.interface_id.to_be_bytes());
        gid
    }
}

/// A 128-bit global identifier: subnet prefix then interface ID, big-endian.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// The upper 64 bits.
    pub fn subnet_prefix(&self) -> u64 {
        u64::from_be_bytes(first_bytes(&self.0))
    }

    /// The lower 64 bits.
    pub fn interface_id(&self) -> u64 {
        u64::from_be_bytes(first_bytes(&self.0[8..]))
    }

    /// Whether this is a multicast GID (first byte 0xff).
    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff
    }

    /// The MAC address a link-local GID was made from (fe80::/64 with a modified EUI-64
    /// interface ID, the default GID of a RoCE port), `None` for other GIDs.
    pub fn link_local_mac(&self) -> Option<[u8; 6]> {
        let g = &self.0;
        let link_local = g[..8] == [0xfe, 0x80, 0, 0, 0, 0, 0, 0] && g[11] == 0xff && g[12] == 0xfe;
        link_local.then(|| [g[8] ^ 0x02, g[9], g[10], g[13], g[14], g[15]])
    }
}

/// Copies the first `N` bytes of `bytes`, which the caller knows to be long enough.
fn first_bytes<const N: usize>(bytes: &[u8]) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&bytes[..N]);
    out
}

/// An IPoIB hardware address: flags (1 byte), UD QPN (3 bytes, big-endian), port GID.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HwAddr([u8; HWADDR_LEN]);

impl HwAddr {
    /// Builds the address of a UD QP; `BadQpn` when `qpn` is wider than 24 bits.
    pub fn new(flags: u8, qpn: u32, gid: Gid) -> Result<Self, WireError> {
        if qpn > MAX_QPN {
            return Err(WireError::BadQpn);
        }
        let mut b = [0u8; HWADDR_LEN];
        b[0] = flags;
        b[1..4].copy_from_slice(&qpn.to_be_bytes()[1..]);
        b[4..].copy_from_slice(&gid.0);
        Ok(Self(b))
    }

    /// Parses exactly 20 bytes.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, WireError> {
        if bytes.len() != HWADDR_LEN {
            return Err(WireError::BadLength);
        }
        Ok(Self(first_bytes(bytes)))
    }

    /// The IPoIB broadcast address of the partition `pkey` (full-member bit forced on):
    /// QPN 0xffffff and the MGID ff12:401b:PPPP::ffff:ffff.
    pub fn broadcast(pkey: u16) -> Self {
        let mut b = [0u8; HWADDR_LEN];
        b[1..4].copy_from_slice(&MULTICAST_QPN.to_be_bytes()[1..]);
        b[4..8].copy_from_slice(&[0xff, 0x12, 0x40, 0x1b]);
        b[8..10].copy_from_slice(&(pkey | PKEY_FULL_MEMBER).to_be_bytes());
        b[16..20].copy_from_slice(&[0xff; 4]);
        Self(b)
    }

    /// The 20 bytes.
    pub fn as_bytes(&self) -> &[u8; HWADDR_LEN] {
        &self.0
    }

    /// The flags byte.
    pub fn flags(&self) -> u8 {
        self.0[0]
    }

    /// Whether the peer accepts connected mode.
    pub fn connected_mode(&self) -> bool {
        self.0[0] & FLAG_CONNECTED_MODE != 0
    }

    /// The 24-bit UD QPN.
    pub fn qpn(&self) -> u32 {
        u32::from_be_bytes([0, self.0[1], self.0[2], self.0[3]])
    }

    /// The port GID, or the MGID of a multicast address.
    pub fn gid(&self) -> Gid {
        Gid(first_bytes(&self.0[4..]))
    }

    /// Whether this addresses a multicast group.
    pub fn is_multicast(&self) -> bool {
        self.qpn() == MULTICAST_QPN && self.gid().is_multicast()
    }

    /// Whether this addresses a group an interface with broadcast address `broadcast`
    /// joins from its multicast list, as C filters the list: the same flags, QPN, GID
    /// prefix, flags and scope, and partition as the broadcast group, and an IPoIB
    /// signature (IPv4's 0x401b or IPv6's 0x601b, which differ in their first byte only).
    pub fn is_group_of(&self, broadcast: &HwAddr) -> bool {
        self.0[..6] == broadcast.0[..6] && self.0[7..10] == broadcast.0[7..10]
    }
}

impl fmt::Display for HwAddr {
    /// Colon-separated hex bytes, as `ip link` shows the address.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Ethertypes an IPoIB interface carries; everything else is dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtherType {
    /// IPv4.
    Ipv4 = 0x0800,
    /// ARP.
    Arp = 0x0806,
    /// Reverse ARP.
    Rarp = 0x8035,
    /// IPv6.
    Ipv6 = 0x86dd,
    /// TIPC.
    Tipc = 0x88ca,
}

impl EtherType {
    /// The ethertype for a protocol number, `None` for one IPoIB does not carry.
    pub fn from_u16(value: u16) -> Option<Self> {
        Some(match value {
            0x0800 => Self::Ipv4,
            0x0806 => Self::Arp,
            0x8035 => Self::Rarp,
            0x86dd => Self::Ipv6,
            0x88ca => Self::Tipc,
            _ => return None,
        })
    }
}

/// The 4-byte encapsulation header: big-endian ethertype, then 16 reserved bits (zero).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EncapHeader {
    /// The protocol of the payload, as a raw ethertype.
    pub ethertype: u16,
}

impl EncapHeader {
    /// Reads the header at the start of `bytes` and returns it with the payload after it.
    /// The reserved bits are ignored, as the C driver ignores them.
    pub fn parse(bytes: &[u8]) -> Result<(Self, &[u8]), WireError> {
        if bytes.len() < ENCAP_HEADER_LEN {
            return Err(WireError::BadLength);
        }
        let ethertype = u16::from_be_bytes([bytes[0], bytes[1]]);
        Ok((Self { ethertype }, &bytes[ENCAP_HEADER_LEN..]))
    }

    /// The header's bytes on the wire (reserved bits zero).
    pub fn to_bytes(self) -> [u8; ENCAP_HEADER_LEN] {
        let t = self.ethertype.to_be_bytes();
        [t[0], t[1], 0, 0]
    }

    /// The carried protocol, `None` when IPoIB does not carry it.
    pub fn protocol(&self) -> Option<EtherType> {
        EtherType::from_u16(self.ethertype)
    }
}

/// Connected mode (RFC 4755): a node listens on this base ORed with its UD QPN.
pub const CM_SERVICE_ID_BASE: u64 = 0x1000_0000_0000_0000;
/// The largest IPoIB MTU in connected mode.
pub const CM_MTU: u32 = 65520;
/// What a connection's receive buffers hold: the MTU plus the encapsulation header. Also
/// the mtu a node announces in its REQ and REP.
pub const CM_BUF_SIZE: u32 = CM_MTU + ENCAP_HEADER_LEN as u32;
/// Bytes of the private data of a connected-mode REQ or REP.
pub const CM_PRIVATE_DATA_LEN: usize = 8;

/// The service a connection request to the node with UD QP `qpn` is sent to.
pub fn cm_service_id(qpn: u32) -> u64 {
    CM_SERVICE_ID_BASE | u64::from(qpn & MAX_QPN)
}

/// The private data of a connected-mode REQ or REP: the sender's UD QPN and the largest
/// message it receives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CmPrivateData {
    /// The sender's UD QPN (24 bits; the top byte is ignored on receive).
    pub qpn: u32,
    /// The largest message (IPoIB header included) the sender receives.
    pub mtu: u32,
}

impl CmPrivateData {
    /// Reads the private data at the start of `bytes` (the CM delivers more bytes than
    /// were sent, zero-padded).
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let b = bytes
            .get(..CM_PRIVATE_DATA_LEN)
            .ok_or(WireError::BadLength)?;
        Ok(Self {
            qpn: u32::from_be_bytes([b[0], b[1], b[2], b[3]]) & MAX_QPN,
            mtu: u32::from_be_bytes([b[4], b[5], b[6], b[7]]),
        })
    }

    /// The bytes on the wire.
    pub fn to_bytes(self) -> [u8; CM_PRIVATE_DATA_LEN] {
        let q = self.qpn.to_be_bytes();
        let m = self.mtu.to_be_bytes();
        [q[0], q[1], q[2], q[3], m[0], m[1], m[2], m[3]]
    }

    /// The largest IPoIB payload the sender receives, `None` when the announced mtu leaves
    /// no room after the header (such a reply is refused).
    pub fn payload_mtu(&self) -> Option<u32> {
        self.mtu
            .checked_sub(ENCAP_HEADER_LEN as u32)
            .filter(|&m| m > 0)
    }
}
