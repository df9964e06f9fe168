//! ARP for IPv4 over Ethernet (RFC 826), with the probe and announcement forms of RFC 5227 §3 and
//! the reply form of gratuitous ARP of RFC 2002 §4.6.
//!
//! A frame is 14 bytes of Ethernet header and 28 bytes of ARP; anything after that (Ethernet
//! padding up to 60 bytes) is ignored.

use std::net::Ipv4Addr;

use pnet_packet::arp::{ArpHardwareTypes, ArpOperation, ArpPacket, MutableArpPacket};
use pnet_packet::ethernet::{EtherType, EthernetPacket, MutableEthernetPacket};

use super::{
    BROADCAST_MAC, ETHERNET_HEADER_LEN, ETHERTYPE_ARP, ETHERTYPE_IPV4, MacAddr, ZERO_MAC,
    is_group_mac,
};

/// Length of the ARP body for Ethernet/IPv4 (RFC 826): 8 bytes of header, 2 × (6 + 4) of addresses.
pub const ARP_LEN: usize = 28;
/// Length of a whole ARP frame as built here (Ethernet header + ARP body, no padding), bytes.
pub const ARP_FRAME_LEN: usize = ETHERNET_HEADER_LEN + ARP_LEN;

/// The ARP operation code (RFC 826 `ar$op`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ArpOp {
    /// `ares_op$REQUEST` (1).
    Request,
    /// `ares_op$REPLY` (2).
    Reply,
}

impl ArpOp {
    fn code(self) -> u16 {
        match self {
            ArpOp::Request => 1,
            ArpOp::Reply => 2,
        }
    }
}

/// Why a frame is not an ARP message we can use. [`ArpError::reason`] is the counter label.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ArpError {
    /// Fewer than 42 bytes (Ethernet header + ARP body).
    #[error("truncated ARP frame: {len} bytes, need {ARP_FRAME_LEN}")]
    Truncated {
        /// Bytes received.
        len: usize,
    },
    /// The Ethernet type is not ARP (0x0806).
    #[error("not an ARP frame: ethertype {0:#06x}")]
    NotArp(u16),
    /// `ar$hrd` is not Ethernet (1).
    #[error("ARP hardware type {0} is not Ethernet (1)")]
    HardwareType(u16),
    /// `ar$pro` is not IPv4 (0x0800).
    #[error("ARP protocol type {0:#06x} is not IPv4")]
    ProtocolType(u16),
    /// `ar$hln`/`ar$pln` are not 6/4.
    #[error("ARP address lengths {hardware}/{protocol}, expected 6/4")]
    AddressLengths {
        /// `ar$hln`.
        hardware: u8,
        /// `ar$pln`.
        protocol: u8,
    },
    /// `ar$op` is neither request (1) nor reply (2) (e.g. RARP).
    #[error("ARP operation {0} is neither request nor reply")]
    Operation(u16),
    /// The sender hardware address is a group (multicast/broadcast) address: nobody can own it.
    #[error("ARP sender hardware address {0} is not unicast")]
    SenderNotUnicast(MacAddr),
}

impl ArpError {
    /// A stable snake_case label for drop counters (`arp_truncated`, …).
    pub fn reason(&self) -> &'static str {
        match self {
            ArpError::Truncated { .. } => "arp_truncated",
            ArpError::NotArp(_) => "arp_not_arp",
            ArpError::HardwareType(_) => "arp_hardware_type",
            ArpError::ProtocolType(_) => "arp_protocol_type",
            ArpError::AddressLengths { .. } => "arp_address_lengths",
            ArpError::Operation(_) => "arp_operation",
            ArpError::SenderNotUnicast(_) => "arp_sender_not_unicast",
        }
    }
}

/// One ARP message for IPv4 over Ethernet, with the Ethernet addresses it came in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArpMessage {
    /// Ethernet destination of the frame.
    pub eth_dst: MacAddr,
    /// Ethernet source of the frame.
    pub eth_src: MacAddr,
    /// Request or reply.
    pub op: ArpOp,
    /// `ar$sha`.
    pub sender_mac: MacAddr,
    /// `ar$spa` (0.0.0.0 in an RFC 5227 probe).
    pub sender_ip: Ipv4Addr,
    /// `ar$tha` (ignored in requests; RFC 5227 says all zeroes).
    pub target_mac: MacAddr,
    /// `ar$tpa`: the address being asked about.
    pub target_ip: Ipv4Addr,
}

impl ArpMessage {
    /// An RFC 5227 §2.1.1 probe: a request whose sender IP is 0.0.0.0.
    pub fn is_probe(&self) -> bool {
        self.op == ArpOp::Request && self.sender_ip.is_unspecified()
    }

    /// Gratuitous ARP (RFC 5227 §3 announcement, RFC 2002 §4.6): sender and target IP are equal and
    /// not 0.0.0.0. Both operations count.
    pub fn is_gratuitous(&self) -> bool {
        !self.sender_ip.is_unspecified() && self.sender_ip == self.target_ip
    }
}

/// Parse an Ethernet frame carrying ARP for IPv4 (RFC 826). Trailing bytes are ignored.
///
/// Errors: see [`ArpError`]; never panics.
pub fn parse_arp(frame: &[u8]) -> Result<ArpMessage, ArpError> {
    if frame.len() < ARP_FRAME_LEN {
        return Err(ArpError::Truncated { len: frame.len() });
    }
    let eth = EthernetPacket::new(frame).ok_or(ArpError::Truncated { len: frame.len() })?;
    let ethertype = eth.get_ethertype().0;
    if ethertype != ETHERTYPE_ARP {
        return Err(ArpError::NotArp(ethertype));
    }
    let body = frame.get(ETHERNET_HEADER_LEN..).unwrap_or_default();
    let arp = ArpPacket::new(body).ok_or(ArpError::Truncated { len: frame.len() })?;
    let hardware = arp.get_hardware_type().0;
    if hardware != ArpHardwareTypes::Ethernet.0 {
        return Err(ArpError::HardwareType(hardware));
    }
    let protocol = arp.get_protocol_type().0;
    if protocol != ETHERTYPE_IPV4 {
        return Err(ArpError::ProtocolType(protocol));
    }
    let (hln, pln) = (arp.get_hw_addr_len(), arp.get_proto_addr_len());
    if (hln, pln) != (6, 4) {
        return Err(ArpError::AddressLengths {
            hardware: hln,
            protocol: pln,
        });
    }
    let op = match arp.get_operation().0 {
        1 => ArpOp::Request,
        2 => ArpOp::Reply,
        other => return Err(ArpError::Operation(other)),
    };
    let sender_mac = arp.get_sender_hw_addr();
    if is_group_mac(sender_mac) {
        return Err(ArpError::SenderNotUnicast(sender_mac));
    }
    Ok(ArpMessage {
        eth_dst: eth.get_destination(),
        eth_src: eth.get_source(),
        op,
        sender_mac,
        sender_ip: arp.get_sender_proto_addr(),
        target_mac: arp.get_target_hw_addr(),
        target_ip: arp.get_target_proto_addr(),
    })
}

/// Build a 42-byte ARP frame from its parts (no Ethernet padding; the NIC pads to 60).
pub fn build_arp(msg: &ArpMessage) -> Vec<u8> {
    let mut frame = vec![0u8; ARP_FRAME_LEN];
    let (head, body) = frame.split_at_mut(ETHERNET_HEADER_LEN);
    if let Some(mut eth) = MutableEthernetPacket::new(head) {
        eth.set_destination(msg.eth_dst);
        eth.set_source(msg.eth_src);
        eth.set_ethertype(EtherType(ETHERTYPE_ARP));
    }
    if let Some(mut arp) = MutableArpPacket::new(body) {
        arp.set_hardware_type(ArpHardwareTypes::Ethernet);
        arp.set_protocol_type(EtherType(ETHERTYPE_IPV4));
        arp.set_hw_addr_len(6);
        arp.set_proto_addr_len(4);
        arp.set_operation(ArpOperation(msg.op.code()));
        arp.set_sender_hw_addr(msg.sender_mac);
        arp.set_sender_proto_addr(msg.sender_ip);
        arp.set_target_hw_addr(msg.target_mac);
        arp.set_target_proto_addr(msg.target_ip);
    }
    frame
}

/// The reply to `request` saying "`owned_ip` is at `our_mac`" (RFC 826 "swap fields, put in the
/// local hardware and protocol addresses"). Sent unicast to the requester's sender hardware
/// address. For an RFC 5227 probe the target IP of the reply is 0.0.0.0, as Linux does.
pub fn build_arp_reply(our_mac: MacAddr, owned_ip: Ipv4Addr, request: &ArpMessage) -> Vec<u8> {
    build_arp(&ArpMessage {
        eth_dst: request.sender_mac,
        eth_src: our_mac,
        op: ArpOp::Reply,
        sender_mac: our_mac,
        sender_ip: owned_ip,
        target_mac: request.sender_mac,
        target_ip: request.sender_ip,
    })
}

/// A broadcast ARP request from (`sender_mac`, `sender_ip`) asking for `target_ip` (what a client
/// sends; used by the probe tool and tests). `sender_ip` 0.0.0.0 makes an RFC 5227 probe.
pub fn build_arp_request(sender_mac: MacAddr, sender_ip: Ipv4Addr, target_ip: Ipv4Addr) -> Vec<u8> {
    build_arp(&ArpMessage {
        eth_dst: BROADCAST_MAC,
        eth_src: sender_mac,
        op: ArpOp::Request,
        sender_mac,
        sender_ip,
        target_mac: ZERO_MAC,
        target_ip,
    })
}

/// The two forms of gratuitous ARP. ferrolb sends both on every announcement (DESIGN S4) because
/// some hosts update their caches only from one of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GratuitousForm {
    /// RFC 5227 §3 ARP Announcement: a request with sender IP = target IP, target MAC all zeroes.
    Request,
    /// RFC 2002 §4.6 reply form: a reply with sender IP = target IP and target MAC = sender MAC.
    Reply,
}

/// A broadcast gratuitous ARP saying "`ip` is at `mac`", in the given form.
pub fn build_gratuitous_arp(mac: MacAddr, ip: Ipv4Addr, form: GratuitousForm) -> Vec<u8> {
    let (op, target_mac) = match form {
        GratuitousForm::Request => (ArpOp::Request, ZERO_MAC),
        GratuitousForm::Reply => (ArpOp::Reply, mac),
    };
    build_arp(&ArpMessage {
        eth_dst: BROADCAST_MAC,
        eth_src: mac,
        op,
        sender_mac: mac,
        sender_ip: ip,
        target_mac,
        target_ip: ip,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const OURS: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x01);
    const CLIENT: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x02);
    const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
    const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 20);

    #[test]
    fn request_round_trips_and_reply_swaps_fields() {
        let req = build_arp_request(CLIENT, CLIENT_IP, VIP);
        assert_eq!(req.len(), 42);
        // Hand-checked bytes: broadcast dst, ethertype 0x0806, htype 1, ptype 0x0800, 6/4, op 1.
        assert_eq!(&req[0..6], &[0xff; 6]);
        assert_eq!(&req[12..22], &[0x08, 0x06, 0, 1, 0x08, 0x00, 6, 4, 0, 1]);
        let msg = parse_arp(&req).unwrap();
        assert_eq!(msg.op, ArpOp::Request);
        assert_eq!(
            (msg.sender_mac, msg.sender_ip, msg.target_ip),
            (CLIENT, CLIENT_IP, VIP)
        );
        assert!(!msg.is_probe() && !msg.is_gratuitous());

        let reply = parse_arp(&build_arp_reply(OURS, VIP, &msg)).unwrap();
        assert_eq!(reply.op, ArpOp::Reply);
        assert_eq!((reply.eth_dst, reply.eth_src), (CLIENT, OURS));
        assert_eq!((reply.sender_mac, reply.sender_ip), (OURS, VIP));
        assert_eq!((reply.target_mac, reply.target_ip), (CLIENT, CLIENT_IP));
    }

    #[test]
    fn probe_and_gratuitous_forms() {
        let probe = parse_arp(&build_arp_request(CLIENT, Ipv4Addr::UNSPECIFIED, VIP)).unwrap();
        assert!(probe.is_probe() && !probe.is_gratuitous());
        let reply = parse_arp(&build_arp_reply(OURS, VIP, &probe)).unwrap();
        assert_eq!(reply.target_ip, Ipv4Addr::UNSPECIFIED);

        let g = parse_arp(&build_gratuitous_arp(OURS, VIP, GratuitousForm::Request)).unwrap();
        assert_eq!(
            (g.op, g.eth_dst, g.target_mac, g.target_ip),
            (ArpOp::Request, BROADCAST_MAC, ZERO_MAC, VIP)
        );
        assert!(g.is_gratuitous());
        let g = parse_arp(&build_gratuitous_arp(OURS, VIP, GratuitousForm::Reply)).unwrap();
        assert_eq!(
            (g.op, g.eth_dst, g.target_mac, g.target_ip),
            (ArpOp::Reply, BROADCAST_MAC, OURS, VIP)
        );
        assert!(g.is_gratuitous());
    }

    #[test]
    fn padding_is_ignored() {
        let mut f = build_arp_request(CLIENT, CLIENT_IP, VIP);
        f.resize(60, 0xaa);
        assert_eq!(parse_arp(&f).unwrap().target_ip, VIP);
    }

    #[test]
    fn each_bad_field_has_its_error() {
        let good = build_arp_request(CLIENT, CLIENT_IP, VIP);
        assert_eq!(parse_arp(&good[..41]), Err(ArpError::Truncated { len: 41 }));
        assert_eq!(parse_arp(&[]), Err(ArpError::Truncated { len: 0 }));
        let cases: [(usize, u8, ArpError); 6] = [
            (12, 0x86, ArpError::NotArp(0x8606)),
            (15, 6, ArpError::HardwareType(6)),
            (16, 0x86, ArpError::ProtocolType(0x8600)),
            (
                18,
                8,
                ArpError::AddressLengths {
                    hardware: 8,
                    protocol: 4,
                },
            ),
            (21, 3, ArpError::Operation(3)),
            (
                22,
                0x01,
                ArpError::SenderNotUnicast(MacAddr(0x01, 0, 0, 0, 0, 0x02)),
            ),
        ];
        for (offset, byte, err) in cases {
            let mut f = good.clone();
            f[offset] = byte;
            let got = parse_arp(&f).unwrap_err();
            assert_eq!(got, err, "offset {offset}");
            assert!(got.reason().starts_with("arp_"));
        }
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..128)) {
            let _ = parse_arp(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_frames(
            flips in proptest::collection::vec((0usize..42, any::<u8>()), 1..6),
            cut in 0usize..=60,
        ) {
            let mut f = build_gratuitous_arp(OURS, VIP, GratuitousForm::Reply);
            f.resize(60, 0);
            for (i, b) in flips { f[i] = b; }
            f.truncate(cut);
            if let Ok(m) = parse_arp(&f) {
                // Whatever parses must rebuild to the same 42 bytes.
                prop_assert_eq!(&build_arp(&m)[..], &f[..42]);
            }
        }

        #[test]
        fn build_parse_round_trip(
            sha in any::<[u8; 6]>(), spa in any::<[u8; 4]>(), tha in any::<[u8; 6]>(),
            tpa in any::<[u8; 4]>(), reply in any::<bool>(),
        ) {
            let sender_mac = MacAddr(sha[0] & 0xfe, sha[1], sha[2], sha[3], sha[4], sha[5]);
            let m = ArpMessage {
                eth_dst: BROADCAST_MAC, eth_src: sender_mac,
                op: if reply { ArpOp::Reply } else { ArpOp::Request },
                sender_mac, sender_ip: spa.into(),
                target_mac: MacAddr(tha[0], tha[1], tha[2], tha[3], tha[4], tha[5]), target_ip: tpa.into(),
            };
            prop_assert_eq!(parse_arp(&build_arp(&m)), Ok(m));
        }
    }
}
