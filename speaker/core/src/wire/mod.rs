//! ARP and NDP on the wire: parse and build whole Ethernet frames (pure: no I/O, no `tokio`).
//!
//! Formats come from `pnet_packet`; the validation rules are ours and cite their RFC:
//! - [`arp`]: RFC 826 requests and replies, RFC 5227 §3 probes and announcements (gratuitous ARP),
//!   RFC 2002 §4.6 for the reply form of gratuitous ARP;
//! - [`ndp`]: RFC 4861 Neighbor Solicitation / Neighbor Advertisement with link-layer address options,
//!   the validation of RFC 4861 §7.1.1/§7.1.2, the ICMPv6 checksum of RFC 4443 §2.3 and the
//!   solicited-node multicast address of RFC 4291 §2.7.1 with its MAC (RFC 2464 §7);
//! - [`claim_proof`]: the membership-keyed proof a speaker's announcements carry, without which
//!   no claim makes an owner yield (DESIGN S15).
//!
//! Parsers take a frame as received from an `AF_PACKET`/`SOCK_RAW` socket (Ethernet header first,
//! trailing padding allowed) and return a typed error whose [`arp::ArpError::reason`] /
//! [`ndp::NdpError::reason`] is a stable label for drop counters. They never panic on any input
//! (property-tested over arbitrary bytes and over mutations of valid frames).

pub mod arp;
pub mod claim_proof;
pub mod ndp;

pub use pnet_base::MacAddr;

/// Length of an Ethernet II header (destination, source, ethertype), bytes.
pub const ETHERNET_HEADER_LEN: usize = 14;
/// Ethertype of ARP (RFC 826), as in `ETH_P_ARP`.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethertype of IPv4, the only protocol type ARP is used for here.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of IPv6 (RFC 2464), as in `ETH_P_IPV6`.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;
/// The Ethernet broadcast address.
pub const BROADCAST_MAC: MacAddr = MacAddr(0xff, 0xff, 0xff, 0xff, 0xff, 0xff);
/// The all-zero MAC (ARP target hardware address "unknown", RFC 5227 §2.1.1).
pub const ZERO_MAC: MacAddr = MacAddr(0, 0, 0, 0, 0, 0);

/// Whether `mac` is a group (multicast or broadcast) address: the I/G bit of the first octet.
pub fn is_group_mac(mac: MacAddr) -> bool {
    mac.0 & 0x01 == 0x01
}
