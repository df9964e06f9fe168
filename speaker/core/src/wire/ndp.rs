//! Neighbor Discovery (RFC 4861) Neighbor Solicitation and Neighbor Advertisement over Ethernet,
//! with Source/Target Link-Layer Address options (RFC 4861 §4.6.1), the ICMPv6 checksum
//! (RFC 4443 §2.3), solicited-node multicast addresses (RFC 4291 §2.7.1) and their MACs
//! (RFC 2464 §7).
//!
//! Only messages whose IPv6 header is directly followed by ICMPv6 are accepted (no extension
//! headers): Neighbor Discovery never needs them and Linux never sends them.

use std::net::Ipv6Addr;

use pnet_packet::ethernet::{EtherType, EthernetPacket, MutableEthernetPacket};
use pnet_packet::icmpv6::{Icmpv6Code, Icmpv6Packet, Icmpv6Type, MutableIcmpv6Packet};
use pnet_packet::ip::IpNextHeaderProtocol;
use pnet_packet::ipv6::{Ipv6Packet, MutableIpv6Packet};

use super::{ETHERNET_HEADER_LEN, ETHERTYPE_IPV6, MacAddr};

/// Length of the fixed IPv6 header, bytes.
pub const IPV6_HEADER_LEN: usize = 40;
/// Length of the fixed part of an NS or NA (type, code, checksum, flags/reserved, target), bytes.
pub const NDP_FIXED_LEN: usize = 24;
/// IPv6 next-header value of ICMPv6.
pub const NEXT_HEADER_ICMPV6: u8 = 58;
/// ICMPv6 type of a Neighbor Solicitation (RFC 4861 §4.3).
pub const TYPE_NEIGHBOR_SOLICITATION: u8 = 135;
/// ICMPv6 type of a Neighbor Advertisement (RFC 4861 §4.4).
pub const TYPE_NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// The hop limit every ND message carries and every receiver checks (RFC 4861 §7.1).
pub const NDP_HOP_LIMIT: u8 = 255;
/// Option type of the Source Link-Layer Address option (RFC 4861 §4.6.1).
pub const OPTION_SOURCE_LINK_LAYER: u8 = 1;
/// Option type of the Target Link-Layer Address option (RFC 4861 §4.6.1).
pub const OPTION_TARGET_LINK_LAYER: u8 = 2;
/// The all-nodes multicast address `ff02::1` (RFC 4291 §2.7.1).
pub const ALL_NODES: Ipv6Addr = Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1);
/// Offset in an Ethernet frame of the IPv6 next-header byte (for kernel socket filters).
pub const OFFSET_NEXT_HEADER: usize = ETHERNET_HEADER_LEN + 6;
/// Offset in an Ethernet frame of the ICMPv6 type byte, when no extension header is present.
pub const OFFSET_ICMPV6_TYPE: usize = ETHERNET_HEADER_LEN + IPV6_HEADER_LEN;

/// The solicited-node multicast address of `addr`: `ff02::1:ff00:0/104` plus its low 24 bits
/// (RFC 4291 §2.7.1).
pub fn solicited_node_multicast(addr: Ipv6Addr) -> Ipv6Addr {
    let o = addr.octets();
    Ipv6Addr::from([
        0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff, o[13], o[14], o[15],
    ])
}

/// Whether `addr` lies in `ff02::1:ff00:0/104`.
pub fn is_solicited_node_multicast(addr: Ipv6Addr) -> bool {
    addr.octets()[..13] == [0xff, 0x02, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, 0xff]
}

/// The Ethernet MAC of an IPv6 multicast group: `33:33` and the group's low 32 bits (RFC 2464 §7).
/// For a solicited-node group that is `33:33:ff:xx:xx:xx`.
pub fn multicast_mac(group: Ipv6Addr) -> MacAddr {
    let o = group.octets();
    MacAddr(0x33, 0x33, o[12], o[13], o[14], o[15])
}

/// The ICMPv6 checksum of `icmp` (the whole ICMPv6 message; its checksum field is skipped) with
/// the IPv6 pseudo-header of `src` → `dst` (RFC 4443 §2.3, RFC 8200 §8.1).
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, icmp: &[u8]) -> u16 {
    pnet_packet::util::ipv6_checksum(
        icmp,
        1,
        &[],
        &src,
        &dst,
        IpNextHeaderProtocol(NEXT_HEADER_ICMPV6),
    )
}

/// Why a frame is not a valid Neighbor Solicitation/Advertisement. [`NdpError::reason`] is the
/// counter label. Each validation clause cites RFC 4861 §7.1.1 (NS) / §7.1.2 (NA).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NdpError {
    /// Shorter than Ethernet + IPv6 + the 24-byte NS/NA body.
    #[error("truncated frame: {len} bytes")]
    Truncated {
        /// Bytes received.
        len: usize,
    },
    /// The ethertype is not IPv6 (0x86dd).
    #[error("not an IPv6 frame: ethertype {0:#06x}")]
    NotIpv6(u16),
    /// The IP version field is not 6.
    #[error("IP version {0} in an IPv6 frame")]
    IpVersion(u8),
    /// The IPv6 payload length claims more bytes than the frame holds.
    #[error("IPv6 payload length {declared} exceeds the {available} bytes received")]
    PayloadLength {
        /// The header's payload length.
        declared: usize,
        /// Bytes after the IPv6 header.
        available: usize,
    },
    /// The next header is not ICMPv6 (extension headers are not accepted).
    #[error("next header {0} is not ICMPv6")]
    NextHeader(u8),
    /// The ICMPv6 message is shorter than 24 bytes (§7.1.1 "ICMP length is 24 or more octets").
    #[error("ICMPv6 message of {0} bytes is shorter than an NS/NA")]
    MessageTooShort(usize),
    /// ICMPv6 type other than NS (135) or NA (136).
    #[error("ICMPv6 type {0} is not a Neighbor Solicitation/Advertisement")]
    IcmpType(u8),
    /// Hop limit is not 255: the message was forwarded by a router (§7.1.1).
    #[error("hop limit {0}, Neighbor Discovery requires 255")]
    HopLimit(u8),
    /// ICMP code is not 0 (§7.1.1).
    #[error("ICMPv6 code {0}, expected 0")]
    IcmpCode(u8),
    /// The ICMPv6 checksum does not match (RFC 4443 §2.3).
    #[error("ICMPv6 checksum {found:#06x}, computed {computed:#06x}")]
    Checksum {
        /// The checksum in the message.
        found: u16,
        /// The checksum computed over the message.
        computed: u16,
    },
    /// The IPv6 source is a multicast address (RFC 4291 §2.7: never a source).
    #[error("IPv6 source {0} is multicast")]
    SourceMulticast(Ipv6Addr),
    /// The target address is multicast (§7.1.1).
    #[error("target {0} is multicast")]
    TargetMulticast(Ipv6Addr),
    /// An option has length 0 (§7.1.1 "all included options have a length that is greater than zero").
    #[error("option of type {0} has length zero")]
    OptionZeroLength(u8),
    /// An option runs past the end of the message.
    #[error("option runs past the end of the message")]
    OptionOverrun,
    /// A link-layer address option is not 8 bytes long (length 1 on Ethernet, RFC 4861 §4.6.1).
    #[error("link-layer address option of length {0}, Ethernet needs 1")]
    LinkLayerOptionLength(u8),
    /// A DAD probe (unspecified source) carries a Source Link-Layer Address option (§7.1.1).
    #[error("DAD probe with a source link-layer address option")]
    DadWithSourceLinkLayer,
    /// A DAD probe (unspecified source) is not sent to a solicited-node multicast address (§7.1.1).
    #[error("DAD probe sent to {0}, not to a solicited-node multicast address")]
    DadNotToSolicitedNode(Ipv6Addr),
    /// A multicast NS from a specified source without the Source Link-Layer Address option, which
    /// RFC 4861 §4.3 says MUST be included (we would not know where to send the answer).
    #[error("multicast Neighbor Solicitation without a source link-layer address option")]
    MulticastWithoutSourceLinkLayer,
    /// An NA to a multicast destination has the Solicited flag set (§7.1.2).
    #[error("solicited Neighbor Advertisement sent to multicast {0}")]
    SolicitedToMulticast(Ipv6Addr),
}

impl NdpError {
    /// A stable snake_case label for drop counters (`ndp_hop_limit`, …).
    pub fn reason(&self) -> &'static str {
        match self {
            NdpError::Truncated { .. } => "ndp_truncated",
            NdpError::NotIpv6(_) => "ndp_not_ipv6",
            NdpError::IpVersion(_) => "ndp_ip_version",
            NdpError::PayloadLength { .. } => "ndp_payload_length",
            NdpError::NextHeader(_) => "ndp_next_header",
            NdpError::MessageTooShort(_) => "ndp_message_too_short",
            NdpError::IcmpType(_) => "ndp_icmp_type",
            NdpError::HopLimit(_) => "ndp_hop_limit",
            NdpError::IcmpCode(_) => "ndp_icmp_code",
            NdpError::Checksum { .. } => "ndp_checksum",
            NdpError::SourceMulticast(_) => "ndp_source_multicast",
            NdpError::TargetMulticast(_) => "ndp_target_multicast",
            NdpError::OptionZeroLength(_) => "ndp_option_zero_length",
            NdpError::OptionOverrun => "ndp_option_overrun",
            NdpError::LinkLayerOptionLength(_) => "ndp_link_layer_option_length",
            NdpError::DadWithSourceLinkLayer => "ndp_dad_with_source_link_layer",
            NdpError::DadNotToSolicitedNode(_) => "ndp_dad_not_to_solicited_node",
            NdpError::MulticastWithoutSourceLinkLayer => "ndp_multicast_without_source_link_layer",
            NdpError::SolicitedToMulticast(_) => "ndp_solicited_to_multicast",
        }
    }
}

/// A Neighbor Solicitation (RFC 4861 §4.3) with its Ethernet and IPv6 addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborSolicitation {
    /// Ethernet destination (a `33:33:ff…` group for a multicast NS, a unicast MAC otherwise).
    pub eth_dst: MacAddr,
    /// Ethernet source.
    pub eth_src: MacAddr,
    /// IPv6 source; `::` for a DAD probe.
    pub ip_src: Ipv6Addr,
    /// IPv6 destination: the target's solicited-node group, or the target itself (unicast NS).
    pub ip_dst: Ipv6Addr,
    /// The address being resolved.
    pub target: Ipv6Addr,
    /// The Source Link-Layer Address option, if present.
    pub source_link_layer: Option<MacAddr>,
}

impl NeighborSolicitation {
    /// A Duplicate Address Detection probe: the source is the unspecified address (RFC 4862 §5.4.2).
    pub fn is_dad(&self) -> bool {
        self.ip_src.is_unspecified()
    }
}

/// A Neighbor Advertisement (RFC 4861 §4.4) with its Ethernet and IPv6 addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NeighborAdvertisement {
    /// Ethernet destination.
    pub eth_dst: MacAddr,
    /// Ethernet source.
    pub eth_src: MacAddr,
    /// IPv6 source (an address of the sending interface; ferrolb uses its link-local one).
    pub ip_src: Ipv6Addr,
    /// IPv6 destination: the solicitor, or `ff02::1`.
    pub ip_dst: Ipv6Addr,
    /// R flag: the sender is a router (always false for ferrolb).
    pub router: bool,
    /// S flag: sent in response to a Neighbor Solicitation.
    pub solicited: bool,
    /// O flag: override an existing cache entry.
    pub override_flag: bool,
    /// The address being advertised.
    pub target: Ipv6Addr,
    /// The Target Link-Layer Address option, if present.
    pub target_link_layer: Option<MacAddr>,
}

/// A parsed NS or NA.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NdpMessage {
    /// ICMPv6 type 135.
    Solicitation(NeighborSolicitation),
    /// ICMPv6 type 136.
    Advertisement(NeighborAdvertisement),
}

const FLAG_ROUTER: u8 = 0x80;
const FLAG_SOLICITED: u8 = 0x40;
const FLAG_OVERRIDE: u8 = 0x20;

/// Parse and validate an Ethernet frame carrying an NS or NA (RFC 4861 §7.1.1, §7.1.2).
/// Bytes beyond the IPv6 payload length (Ethernet padding) are ignored.
///
/// Errors: see [`NdpError`]; never panics.
pub fn parse_ndp(frame: &[u8]) -> Result<NdpMessage, NdpError> {
    let min = ETHERNET_HEADER_LEN + IPV6_HEADER_LEN + NDP_FIXED_LEN;
    let truncated = NdpError::Truncated { len: frame.len() };
    if frame.len() < min {
        return Err(truncated);
    }
    let eth = EthernetPacket::new(frame).ok_or_else(|| truncated.clone())?;
    let ethertype = eth.get_ethertype().0;
    if ethertype != ETHERTYPE_IPV6 {
        return Err(NdpError::NotIpv6(ethertype));
    }
    let ip_bytes = frame
        .get(ETHERNET_HEADER_LEN..)
        .ok_or_else(|| truncated.clone())?;
    let ip = Ipv6Packet::new(ip_bytes).ok_or_else(|| truncated.clone())?;
    if ip.get_version() != 6 {
        return Err(NdpError::IpVersion(ip.get_version()));
    }
    let declared = usize::from(ip.get_payload_length());
    let available = ip_bytes.len() - IPV6_HEADER_LEN;
    let icmp = ip_bytes
        .get(IPV6_HEADER_LEN..IPV6_HEADER_LEN + declared)
        .ok_or(NdpError::PayloadLength {
            declared,
            available,
        })?;
    let next_header = ip.get_next_header().0;
    if next_header != NEXT_HEADER_ICMPV6 {
        return Err(NdpError::NextHeader(next_header));
    }
    if icmp.len() < NDP_FIXED_LEN {
        return Err(NdpError::MessageTooShort(icmp.len()));
    }
    let header = Icmpv6Packet::new(icmp).ok_or(NdpError::MessageTooShort(icmp.len()))?;
    let icmp_type = header.get_icmpv6_type().0;
    if icmp_type != TYPE_NEIGHBOR_SOLICITATION && icmp_type != TYPE_NEIGHBOR_ADVERTISEMENT {
        return Err(NdpError::IcmpType(icmp_type));
    }
    if ip.get_hop_limit() != NDP_HOP_LIMIT {
        return Err(NdpError::HopLimit(ip.get_hop_limit()));
    }
    if header.get_icmpv6_code().0 != 0 {
        return Err(NdpError::IcmpCode(header.get_icmpv6_code().0));
    }
    let (ip_src, ip_dst) = (ip.get_source(), ip.get_destination());
    let computed = icmpv6_checksum(ip_src, ip_dst, icmp);
    let found = header.get_checksum();
    if computed != found {
        return Err(NdpError::Checksum { found, computed });
    }
    if ip_src.is_multicast() {
        return Err(NdpError::SourceMulticast(ip_src));
    }
    let mut target_octets = [0u8; 16];
    target_octets.copy_from_slice(
        icmp.get(8..24)
            .ok_or(NdpError::MessageTooShort(icmp.len()))?,
    );
    let target = Ipv6Addr::from(target_octets);
    if target.is_multicast() {
        return Err(NdpError::TargetMulticast(target));
    }
    let options = icmp.get(NDP_FIXED_LEN..).unwrap_or_default();
    let (eth_dst, eth_src) = (eth.get_destination(), eth.get_source());
    if icmp_type == TYPE_NEIGHBOR_SOLICITATION {
        let source_link_layer = link_layer_option(options, OPTION_SOURCE_LINK_LAYER)?;
        if ip_src.is_unspecified() {
            if !is_solicited_node_multicast(ip_dst) {
                return Err(NdpError::DadNotToSolicitedNode(ip_dst));
            }
            if source_link_layer.is_some() {
                return Err(NdpError::DadWithSourceLinkLayer);
            }
        } else if ip_dst.is_multicast() && source_link_layer.is_none() {
            return Err(NdpError::MulticastWithoutSourceLinkLayer);
        }
        Ok(NdpMessage::Solicitation(NeighborSolicitation {
            eth_dst,
            eth_src,
            ip_src,
            ip_dst,
            target,
            source_link_layer,
        }))
    } else {
        let flags = icmp.get(4).copied().unwrap_or_default();
        let solicited = flags & FLAG_SOLICITED != 0;
        if solicited && ip_dst.is_multicast() {
            return Err(NdpError::SolicitedToMulticast(ip_dst));
        }
        Ok(NdpMessage::Advertisement(NeighborAdvertisement {
            eth_dst,
            eth_src,
            ip_src,
            ip_dst,
            router: flags & FLAG_ROUTER != 0,
            solicited,
            override_flag: flags & FLAG_OVERRIDE != 0,
            target,
            target_link_layer: link_layer_option(options, OPTION_TARGET_LINK_LAYER)?,
        }))
    }
}

/// Walk the options (RFC 4861 §4.6): every option must have a non-zero length that fits; the first
/// option of type `wanted` must be 8 bytes (Ethernet) and gives the MAC. Other options are skipped.
fn link_layer_option(mut options: &[u8], wanted: u8) -> Result<Option<MacAddr>, NdpError> {
    let mut found = None;
    while let [kind, len8, ..] = *options {
        if len8 == 0 {
            return Err(NdpError::OptionZeroLength(kind));
        }
        let len = usize::from(len8) * 8;
        let option = options.get(..len).ok_or(NdpError::OptionOverrun)?;
        if kind == wanted && found.is_none() {
            match *option {
                [_, 1, a, b, c, d, e, f] => found = Some(MacAddr(a, b, c, d, e, f)),
                _ => return Err(NdpError::LinkLayerOptionLength(len8)),
            }
        }
        options = options.get(len..).unwrap_or_default();
    }
    if options.is_empty() {
        Ok(found)
    } else {
        Err(NdpError::OptionOverrun)
    }
}

/// Assemble Ethernet + IPv6 (hop limit 255) + an ICMPv6 body whose checksum field is then filled.
fn build_frame(
    eth_dst: MacAddr,
    eth_src: MacAddr,
    src: Ipv6Addr,
    dst: Ipv6Addr,
    mut icmp: Vec<u8>,
) -> Vec<u8> {
    let checksum = icmpv6_checksum(src, dst, &icmp);
    if let Some(mut h) = MutableIcmpv6Packet::new(&mut icmp) {
        h.set_checksum(checksum);
    }
    let mut frame = vec![0u8; ETHERNET_HEADER_LEN + IPV6_HEADER_LEN];
    let (eth_bytes, ip_bytes) = frame.split_at_mut(ETHERNET_HEADER_LEN);
    if let Some(mut eth) = MutableEthernetPacket::new(eth_bytes) {
        eth.set_destination(eth_dst);
        eth.set_source(eth_src);
        eth.set_ethertype(EtherType(ETHERTYPE_IPV6));
    }
    if let Some(mut ip) = MutableIpv6Packet::new(ip_bytes) {
        ip.set_version(6);
        ip.set_payload_length(u16::try_from(icmp.len()).unwrap_or(u16::MAX));
        ip.set_next_header(IpNextHeaderProtocol(NEXT_HEADER_ICMPV6));
        ip.set_hop_limit(NDP_HOP_LIMIT);
        ip.set_source(src);
        ip.set_destination(dst);
    }
    frame.extend_from_slice(&icmp);
    frame
}

fn icmp_body(icmp_type: u8, flags: u8, target: Ipv6Addr, option: Option<(u8, MacAddr)>) -> Vec<u8> {
    let mut body = vec![0u8; NDP_FIXED_LEN];
    if let Some(mut h) = MutableIcmpv6Packet::new(&mut body) {
        h.set_icmpv6_type(Icmpv6Type(icmp_type));
        h.set_icmpv6_code(Icmpv6Code(0));
    }
    body[4] = flags;
    body[8..24].copy_from_slice(&target.octets());
    if let Some((kind, mac)) = option {
        body.extend_from_slice(&[kind, 1]);
        body.extend_from_slice(&mac.octets());
    }
    body
}

/// Appends one NDP option (type, length in units of 8 bytes, content: `option.len()` must be a
/// non-zero multiple of 8, RFC 4861 §4.6) to a frame built here, and fixes the IPv6 payload
/// length and the ICMPv6 checksum. Used for the claim proof of an unsolicited NA
/// ([`super::claim_proof`]). A frame too short to be ours or an option of a bad length is left
/// unchanged and `false` is returned.
pub fn append_option(frame: &mut Vec<u8>, option: &[u8]) -> bool {
    let icmp_at = ETHERNET_HEADER_LEN + IPV6_HEADER_LEN;
    if frame.len() < icmp_at + 4 || option.is_empty() || !option.len().is_multiple_of(8) {
        return false;
    }
    let Some(ip) = Ipv6Packet::new(&frame[ETHERNET_HEADER_LEN..icmp_at]) else {
        return false;
    };
    let (src, dst) = (ip.get_source(), ip.get_destination());
    let mut icmp = frame.split_off(icmp_at);
    icmp.extend_from_slice(option);
    icmp[2] = 0;
    icmp[3] = 0;
    let checksum = icmpv6_checksum(src, dst, &icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    if let Some(mut ip) = MutableIpv6Packet::new(&mut frame[ETHERNET_HEADER_LEN..icmp_at]) {
        ip.set_payload_length(u16::try_from(icmp.len()).unwrap_or(u16::MAX));
    }
    frame.extend_from_slice(&icmp);
    true
}

/// Build a Neighbor Solicitation frame. The Source Link-Layer Address option is included when
/// `source_link_layer` is set (leave it `None` for a DAD probe, RFC 4861 §4.3).
pub fn build_neighbor_solicitation(ns: &NeighborSolicitation) -> Vec<u8> {
    let option = ns.source_link_layer.map(|m| (OPTION_SOURCE_LINK_LAYER, m));
    let body = icmp_body(TYPE_NEIGHBOR_SOLICITATION, 0, ns.target, option);
    build_frame(ns.eth_dst, ns.eth_src, ns.ip_src, ns.ip_dst, body)
}

/// A Duplicate Address Detection probe for `target` (RFC 4862 §5.4.2): a Neighbor Solicitation
/// from `::` to the target's solicited-node group, without a Source Link-Layer Address option
/// (RFC 4861 §4.3 forbids it with an unspecified source). A host that has `target` answers with
/// a Neighbor Advertisement to all-nodes (RFC 4862 §5.4.3).
pub fn build_dad_probe(our_mac: MacAddr, target: Ipv6Addr) -> Vec<u8> {
    let group = solicited_node_multicast(target);
    build_neighbor_solicitation(&NeighborSolicitation {
        eth_dst: multicast_mac(group),
        eth_src: our_mac,
        ip_src: Ipv6Addr::UNSPECIFIED,
        ip_dst: group,
        target,
        source_link_layer: None,
    })
}

/// Build a Neighbor Advertisement frame (with the Target Link-Layer Address option when set).
pub fn build_neighbor_advertisement(na: &NeighborAdvertisement) -> Vec<u8> {
    let flags = (if na.router { FLAG_ROUTER } else { 0 })
        | (if na.solicited { FLAG_SOLICITED } else { 0 })
        | (if na.override_flag { FLAG_OVERRIDE } else { 0 });
    let option = na.target_link_layer.map(|m| (OPTION_TARGET_LINK_LAYER, m));
    let body = icmp_body(TYPE_NEIGHBOR_ADVERTISEMENT, flags, na.target, option);
    build_frame(na.eth_dst, na.eth_src, na.ip_src, na.ip_dst, body)
}

/// The answer to `ns` for an owned target (RFC 4861 §7.2.4), sent from `our_mac` with IPv6 source
/// `our_source` (the interface's link-local address), always with O=1 and the Target Link-Layer
/// Address option:
/// - an ordinary NS gets a solicited NA (S=1) unicast to the solicitor, at the MAC of its Source
///   Link-Layer Address option or, without one (unicast NS), at the frame's Ethernet source;
/// - a DAD probe (unspecified source) is defended with S=0 to all-nodes `ff02::1` (RFC 4861 §7.2.4,
///   RFC 4862 §5.4.3).
pub fn build_advertisement_for(
    our_mac: MacAddr,
    our_source: Ipv6Addr,
    ns: &NeighborSolicitation,
) -> Vec<u8> {
    let (eth_dst, ip_dst, solicited) = if ns.is_dad() {
        (multicast_mac(ALL_NODES), ALL_NODES, false)
    } else {
        (ns.source_link_layer.unwrap_or(ns.eth_src), ns.ip_src, true)
    };
    build_neighbor_advertisement(&NeighborAdvertisement {
        eth_dst,
        eth_src: our_mac,
        ip_src: our_source,
        ip_dst,
        router: false,
        solicited,
        override_flag: true,
        target: ns.target,
        target_link_layer: Some(our_mac),
    })
}

/// An unsolicited Neighbor Advertisement (S=0, O=1, TLLA) to all-nodes `ff02::1` announcing that
/// `target` is at `our_mac` (RFC 4861 §7.2.6). The IPv6 equivalent of gratuitous ARP.
pub fn build_unsolicited_advertisement(
    our_mac: MacAddr,
    our_source: Ipv6Addr,
    target: Ipv6Addr,
) -> Vec<u8> {
    build_neighbor_advertisement(&NeighborAdvertisement {
        eth_dst: multicast_mac(ALL_NODES),
        eth_src: our_mac,
        ip_src: our_source,
        ip_dst: ALL_NODES,
        router: false,
        solicited: false,
        override_flag: true,
        target,
        target_link_layer: Some(our_mac),
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    const OURS: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x01);
    const CLIENT: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x02);
    const VIP: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 8, 0, 0, 0, 0x100);
    const CLIENT_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 2);
    const OUR_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

    #[test]
    fn a_dad_probe_parses_as_one() {
        let frame = build_dad_probe(OURS, VIP);
        match parse_ndp(&frame).unwrap() {
            NdpMessage::Solicitation(ns) => {
                assert!(ns.is_dad());
                assert_eq!(ns.target, VIP);
                assert_eq!(ns.ip_dst, solicited_node_multicast(VIP));
                assert_eq!(ns.eth_dst, multicast_mac(ns.ip_dst));
                assert_eq!(ns.source_link_layer, None);
            }
            other => panic!("{other:?}"),
        }
    }

    fn multicast_ns() -> NeighborSolicitation {
        let group = solicited_node_multicast(VIP);
        NeighborSolicitation {
            eth_dst: multicast_mac(group),
            eth_src: CLIENT,
            ip_src: CLIENT_LL,
            ip_dst: group,
            target: VIP,
            source_link_layer: Some(CLIENT),
        }
    }

    #[test]
    fn solicited_node_address_and_mac() {
        let vip: Ipv6Addr = "2001:db8::1:2345:6789".parse().unwrap();
        let group = solicited_node_multicast(vip);
        assert_eq!(group, "ff02::1:ff45:6789".parse::<Ipv6Addr>().unwrap());
        assert!(is_solicited_node_multicast(group));
        assert!(!is_solicited_node_multicast(ALL_NODES));
        assert_eq!(
            multicast_mac(group),
            MacAddr(0x33, 0x33, 0xff, 0x45, 0x67, 0x89)
        );
        assert_eq!(multicast_mac(ALL_NODES), MacAddr(0x33, 0x33, 0, 0, 0, 1));
    }

    #[test]
    fn checksum_matches_a_hand_computed_value() {
        // NS from fe80::2 to ff02::1:ff00:100 for 2001:db8:0:8::100 with SLLA 02:00:00:00:00:02.
        // One's-complement sum worked out by hand over pseudo-header + message = 0x10f8 → !sum.
        let frame = build_neighbor_solicitation(&multicast_ns());
        let icmp = &frame[54..];
        assert_eq!(icmp.len(), 32);
        let mut sum: u32 = 0;
        let mut words = Vec::new();
        words.extend_from_slice(&CLIENT_LL.octets());
        words.extend_from_slice(&solicited_node_multicast(VIP).octets());
        words.extend_from_slice(&[0, 0, 0, 32, 0, 0, 0, 58]);
        words.extend_from_slice(icmp);
        for c in words.chunks(2) {
            sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        // Including the stored checksum, the sum must be all ones (RFC 1071).
        assert_eq!(sum, 0xffff);
    }

    #[test]
    fn ns_round_trips_with_hop_limit_255() {
        let ns = multicast_ns();
        let frame = build_neighbor_solicitation(&ns);
        assert_eq!(frame[21], 255);
        assert_eq!(frame[20], 58);
        assert_eq!(frame[OFFSET_ICMPV6_TYPE], 135);
        assert_eq!(parse_ndp(&frame), Ok(NdpMessage::Solicitation(ns)));
        let mut padded = frame.clone();
        padded.extend_from_slice(&[0; 10]);
        assert_eq!(parse_ndp(&padded), Ok(NdpMessage::Solicitation(ns)));
    }

    #[test]
    fn solicited_answer_goes_to_the_solicitor() {
        let na = build_advertisement_for(OURS, OUR_LL, &multicast_ns());
        let NdpMessage::Advertisement(na) = parse_ndp(&na).unwrap() else {
            panic!("not an NA")
        };
        assert_eq!(
            (na.eth_dst, na.eth_src, na.ip_src, na.ip_dst),
            (CLIENT, OURS, OUR_LL, CLIENT_LL)
        );
        assert!(na.solicited && na.override_flag && !na.router);
        assert_eq!((na.target, na.target_link_layer), (VIP, Some(OURS)));

        // Unicast NS without SLLA (router probe): answer at the frame's Ethernet source.
        let probe = NeighborSolicitation {
            eth_dst: OURS,
            ip_dst: VIP,
            source_link_layer: None,
            ip_src: "2001:db8:0:8::1".parse().unwrap(),
            ..multicast_ns()
        };
        let NdpMessage::Advertisement(na) =
            parse_ndp(&build_advertisement_for(OURS, OUR_LL, &probe)).unwrap()
        else {
            panic!("not an NA")
        };
        assert_eq!((na.eth_dst, na.ip_dst), (CLIENT, probe.ip_src));
    }

    #[test]
    fn dad_is_defended_to_all_nodes() {
        let dad = NeighborSolicitation {
            ip_src: Ipv6Addr::UNSPECIFIED,
            source_link_layer: None,
            ..multicast_ns()
        };
        let frame = build_neighbor_solicitation(&dad);
        let NdpMessage::Solicitation(parsed) = parse_ndp(&frame).unwrap() else {
            panic!("not an NS")
        };
        assert!(parsed.is_dad());
        let NdpMessage::Advertisement(na) =
            parse_ndp(&build_advertisement_for(OURS, OUR_LL, &parsed)).unwrap()
        else {
            panic!("not an NA")
        };
        assert_eq!(
            (na.ip_dst, na.eth_dst),
            (ALL_NODES, MacAddr(0x33, 0x33, 0, 0, 0, 1))
        );
        assert!(!na.solicited && na.override_flag);

        let unsolicited = build_unsolicited_advertisement(OURS, OUR_LL, VIP);
        let NdpMessage::Advertisement(na) = parse_ndp(&unsolicited).unwrap() else {
            panic!("not an NA")
        };
        assert_eq!(
            (
                na.ip_dst,
                na.solicited,
                na.override_flag,
                na.target_link_layer
            ),
            (ALL_NODES, false, true, Some(OURS))
        );
    }

    /// Rebuild `frame` with its checksum recomputed, so a test reaches the check after it.
    fn fix_checksum(mut frame: Vec<u8>) -> Vec<u8> {
        let src = Ipv6Addr::from(<[u8; 16]>::try_from(&frame[22..38]).unwrap());
        let dst = Ipv6Addr::from(<[u8; 16]>::try_from(&frame[38..54]).unwrap());
        frame[56] = 0;
        frame[57] = 0;
        let c = icmpv6_checksum(src, dst, &frame[54..]);
        frame[56..58].copy_from_slice(&c.to_be_bytes());
        frame
    }

    #[test]
    fn rfc4861_validation_clauses() {
        let good = build_neighbor_solicitation(&multicast_ns());
        let with = |offset: usize, byte: u8| {
            let mut f = good.clone();
            f[offset] = byte;
            fix_checksum(f)
        };
        assert!(matches!(
            parse_ndp(&good[..77]),
            Err(NdpError::Truncated { len: 77 })
        ));
        assert_eq!(parse_ndp(&with(12, 0x08)), Err(NdpError::NotIpv6(0x08dd)));
        assert_eq!(parse_ndp(&with(14, 0x40)), Err(NdpError::IpVersion(4)));
        assert_eq!(
            parse_ndp(&with(19, 200)),
            Err(NdpError::PayloadLength {
                declared: 200,
                available: 32
            })
        );
        assert_eq!(parse_ndp(&with(20, 0)), Err(NdpError::NextHeader(0)));
        assert_eq!(parse_ndp(&with(21, 64)), Err(NdpError::HopLimit(64)));
        assert_eq!(parse_ndp(&with(54, 128)), Err(NdpError::IcmpType(128)));
        assert_eq!(parse_ndp(&with(55, 1)), Err(NdpError::IcmpCode(1)));
        assert_eq!(
            parse_ndp(&with(22, 0xff)).unwrap_err().reason(),
            "ndp_source_multicast"
        );
        assert_eq!(
            parse_ndp(&with(62, 0xff)).unwrap_err().reason(),
            "ndp_target_multicast"
        );
        assert_eq!(parse_ndp(&with(79, 0)), Err(NdpError::OptionZeroLength(1)));
        assert_eq!(parse_ndp(&with(79, 2)), Err(NdpError::OptionOverrun));
        let mut bad = good.clone();
        bad[57] ^= 0xff;
        assert!(matches!(parse_ndp(&bad), Err(NdpError::Checksum { .. })));
        // Payload length 20: shorter than an NS.
        let mut short = good.clone();
        short[18..20].copy_from_slice(&20u16.to_be_bytes());
        short.truncate(74);
        short.extend_from_slice(&[0; 10]);
        assert_eq!(parse_ndp(&short), Err(NdpError::MessageTooShort(20)));
        // A 16-byte SLLA option (length 2) is not Ethernet.
        let mut long = good.clone();
        long[19] = 40;
        long[79] = 2;
        long.extend_from_slice(&[0; 8]);
        assert_eq!(
            parse_ndp(&fix_checksum(long)),
            Err(NdpError::LinkLayerOptionLength(2))
        );
        // Stray bytes after the last option.
        let mut stray = good.clone();
        stray[19] = 33;
        stray.push(1);
        assert_eq!(
            parse_ndp(&fix_checksum(stray)),
            Err(NdpError::OptionOverrun)
        );
    }

    #[test]
    fn multicast_ns_needs_source_link_layer() {
        let bare = NeighborSolicitation {
            source_link_layer: None,
            ..multicast_ns()
        };
        assert_eq!(
            parse_ndp(&build_neighbor_solicitation(&bare)),
            Err(NdpError::MulticastWithoutSourceLinkLayer)
        );
        // Unicast without it is fine (RFC 4861 §4.3: SHOULD), and so is DAD (MUST NOT).
        let unicast = NeighborSolicitation {
            ip_dst: VIP,
            eth_dst: OURS,
            ..bare
        };
        assert!(parse_ndp(&build_neighbor_solicitation(&unicast)).is_ok());
    }

    #[test]
    fn dad_rules() {
        let dad_with_slla = NeighborSolicitation {
            ip_src: Ipv6Addr::UNSPECIFIED,
            ..multicast_ns()
        };
        assert_eq!(
            parse_ndp(&build_neighbor_solicitation(&dad_with_slla)),
            Err(NdpError::DadWithSourceLinkLayer)
        );
        let dad_unicast = NeighborSolicitation {
            ip_src: Ipv6Addr::UNSPECIFIED,
            ip_dst: VIP,
            source_link_layer: None,
            ..multicast_ns()
        };
        assert_eq!(
            parse_ndp(&build_neighbor_solicitation(&dad_unicast)),
            Err(NdpError::DadNotToSolicitedNode(VIP))
        );
        let solicited_multicast = NeighborAdvertisement {
            eth_dst: multicast_mac(ALL_NODES),
            eth_src: OURS,
            ip_src: OUR_LL,
            ip_dst: ALL_NODES,
            router: false,
            solicited: true,
            override_flag: true,
            target: VIP,
            target_link_layer: None,
        };
        assert_eq!(
            parse_ndp(&build_neighbor_advertisement(&solicited_multicast)),
            Err(NdpError::SolicitedToMulticast(ALL_NODES))
        );
    }

    #[test]
    fn unknown_options_are_skipped() {
        // A nonce option (type 14, RFC 3971) before the SLLA must not hide it.
        let ns = multicast_ns();
        let mut body = icmp_body(TYPE_NEIGHBOR_SOLICITATION, 0, ns.target, None);
        body.extend_from_slice(&[14, 1, 1, 2, 3, 4, 5, 6]);
        body.extend_from_slice(&[OPTION_SOURCE_LINK_LAYER, 1]);
        body.extend_from_slice(&CLIENT.octets());
        let frame = build_frame(ns.eth_dst, ns.eth_src, ns.ip_src, ns.ip_dst, body);
        assert_eq!(parse_ndp(&frame), Ok(NdpMessage::Solicitation(ns)));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = parse_ndp(&bytes);
        }

        #[test]
        fn never_panics_on_mutated_frames(
            flips in proptest::collection::vec((0usize..96, any::<u8>()), 1..6),
            extra in proptest::collection::vec(any::<u8>(), 0..24),
            cut in 0usize..120,
            recompute in any::<bool>(),
        ) {
            let mut f = build_neighbor_solicitation(&multicast_ns());
            f.extend_from_slice(&extra);
            for (i, b) in flips {
                if let Some(x) = f.get_mut(i) { *x = b; }
            }
            f.truncate(cut.max(58));
            if recompute { f = fix_checksum(f); }
            if let Ok(NdpMessage::Solicitation(ns)) = parse_ndp(&f) {
                prop_assert!(!ns.target.is_multicast());
                prop_assert_eq!(f[21], 255);
            }
        }

        #[test]
        fn na_round_trips(
            target in any::<[u8; 16]>(), mac in any::<[u8; 6]>(),
            solicited in any::<bool>(), override_flag in any::<bool>(), router in any::<bool>(),
        ) {
            let mut t = target;
            if t[0] == 0xff { t[0] = 0x20; }
            let na = NeighborAdvertisement {
                eth_dst: CLIENT, eth_src: OURS, ip_src: OUR_LL, ip_dst: CLIENT_LL,
                router, solicited, override_flag, target: Ipv6Addr::from(t),
                target_link_layer: Some(MacAddr(mac[0], mac[1], mac[2], mac[3], mac[4], mac[5])),
            };
            prop_assert_eq!(parse_ndp(&build_neighbor_advertisement(&na)), Ok(NdpMessage::Advertisement(na)));
        }
    }
}
