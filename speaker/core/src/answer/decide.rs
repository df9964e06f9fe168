//! What to answer to one received frame (DESIGN S6, S7), and whether it claims an owned IP for
//! another MAC (issue #10 item 5, IP conflict detection). Pure: the socket tasks call these with
//! the interface's MAC and a membership test for the IPs owned on that interface *at that moment*,
//! so an IP whose ownership was withdrawn is never answered again (S5).
//!
//! Replies and advertisements are never answered: only ARP requests (RFC 826) and Neighbor
//! Solicitations (RFC 4861 §7.2.3) are. The responder sockets also pass ARP replies and Neighbor
//! Advertisements so that [`Inspected::claim`] sees every frame in which another host says it
//! has one of our IPs.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::wire::arp::{ArpMessage, ArpOp, build_arp_reply, parse_arp};
use crate::wire::claim_proof::{self, Proof};
use crate::wire::ndp::{NdpMessage, build_advertisement_for, parse_ndp, solicited_node_multicast};
use crate::wire::{BROADCAST_MAC, MacAddr};

/// Why a well-formed frame got no answer. [`IgnoreReason::label`] is the counter label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IgnoreReason {
    /// A frame we sent ourselves (Ethernet or ARP sender MAC is the interface's MAC).
    OwnFrame,
    /// The target IP is not owned on this interface.
    NotOwned,
    /// Another MAC claims an IP we own ([`ClaimKind`]; issue #10 item 5): handled by
    /// the conflict policy (`ferrolb_speaker::l2::conflict`), not answered.
    Conflict,
    /// An ARP reply (only requests are answered; replies are read for conflict detection).
    Reply,
    /// A Neighbor Advertisement (only solicitations are answered).
    Advertisement,
    /// An NS whose IPv6 destination is neither the target's solicited-node group nor the target.
    WrongDestination,
}

impl IgnoreReason {
    /// Stable snake_case label.
    pub fn label(self) -> &'static str {
        match self {
            IgnoreReason::OwnFrame => "own_frame",
            IgnoreReason::NotOwned => "not_owned",
            IgnoreReason::Conflict => "conflict",
            IgnoreReason::Reply => "reply",
            IgnoreReason::Advertisement => "advertisement",
            IgnoreReason::WrongDestination => "wrong_destination",
        }
    }
}

/// The outcome for one received frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send this frame back on the same interface.
    Answer(Vec<u8>),
    /// A valid frame that needs no answer.
    Ignore(IgnoreReason),
    /// An invalid frame; the label is the drop reason (`arp_…` / `ndp_…`).
    Drop(&'static str),
}

/// How a frame claimed an owned IP for another MAC (issue #10 item 5).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ClaimKind {
    /// An ARP request or reply whose sender IP is the IP (RFC 826 `ar$spa`), gratuitous ones
    /// (RFC 5227 §3 announcement, RFC 2002 §4.6 reply form) included: the "conflicting ARP
    /// packet" of RFC 5227 §2.4.
    ArpSender,
    /// A broadcast RFC 5227 §2.1.1 probe for the IP (sender IP 0.0.0.0): another host is about to
    /// configure it. Still answered, as RFC 5227 §2.1.1 expects of the owner. A probe unicast to
    /// one MAC is not a claim: switches check that a known host is alive that way (e.g. Cisco IP
    /// Device Tracking), asking nothing about who may use the address.
    ArpProbe,
    /// A Neighbor Advertisement (RFC 4861 §4.4) for the IP whose Target Link-Layer Address (or,
    /// without one, Ethernet source) is another MAC.
    NeighborAdvertisement,
    /// A Neighbor Solicitation whose IPv6 source is the IP (RFC 4861 §7.2.2: the sender uses it).
    SolicitationSource,
    /// A Duplicate Address Detection probe for the IP (RFC 4862 §5.4.2: source `::`): another host
    /// is about to configure it. Still defended with an NA (RFC 4862 §5.4.3).
    DadProbe,
}

impl ClaimKind {
    /// Stable snake_case label (metrics, logs, Events).
    pub fn label(self) -> &'static str {
        match self {
            ClaimKind::ArpSender => "arp",
            ClaimKind::ArpProbe => "arp_probe",
            ClaimKind::NeighborAdvertisement => "neighbor_advertisement",
            ClaimKind::SolicitationSource => "ns_source",
            ClaimKind::DadProbe => "dad_probe",
        }
    }

    /// Every kind, for metrics that list each label.
    pub const ALL: [ClaimKind; 5] = [
        ClaimKind::ArpSender,
        ClaimKind::ArpProbe,
        ClaimKind::NeighborAdvertisement,
        ClaimKind::SolicitationSource,
        ClaimKind::DadProbe,
    ];
}

/// Another MAC claims an owned IP.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// The owned IP.
    pub ip: IpAddr,
    /// The MAC the frame says the IP is at (ARP sender hardware address, NA Target Link-Layer
    /// Address, else the frame's Ethernet source).
    pub mac: MacAddr,
    /// Which kind of frame.
    pub kind: ClaimKind,
    /// The claim proof the frame carries, unverified ([`crate::wire::claim_proof`]: after the
    /// ARP payload, or an NDP option of an NA). Only a proof that verifies makes an owner yield.
    pub proof: Option<Proof>,
}

/// The outcome for one frame, and the conflict it shows, if any.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inspected {
    /// What to do with the frame.
    pub decision: Decision,
    /// Another MAC claims an owned IP in it.
    pub claim: Option<Claim>,
}

/// The claim in an ARP message from another MAC (see [`ClaimKind`]).
fn arp_claim(msg: &ArpMessage, frame: &[u8], owned: &impl Fn(Ipv4Addr) -> bool) -> Option<Claim> {
    let (ip, kind) = if !msg.sender_ip.is_unspecified() && owned(msg.sender_ip) {
        (msg.sender_ip, ClaimKind::ArpSender)
    } else if msg.is_probe() && msg.eth_dst == BROADCAST_MAC && owned(msg.target_ip) {
        (msg.target_ip, ClaimKind::ArpProbe)
    } else {
        return None;
    };
    Some(Claim {
        ip: IpAddr::V4(ip),
        mac: msg.sender_mac,
        kind,
        proof: claim_proof::from_arp(frame),
    })
}

/// Decide on an ARP frame (RFC 826): answer a request (or an RFC 5227 probe) whose target IP is
/// owned with "target is at `our_mac`"; ignore our own frames, replies, gratuitous ARP and
/// requests for other IPs. A frame from another MAC whose sender IP is owned, or a broadcast
/// probe for an owned IP, is a conflict ([`ClaimKind`]); only the probe is answered.
pub fn inspect_arp(frame: &[u8], our_mac: MacAddr, owned: impl Fn(Ipv4Addr) -> bool) -> Inspected {
    let msg = match parse_arp(frame) {
        Ok(m) => m,
        Err(e) => {
            return Inspected {
                decision: Decision::Drop(e.reason()),
                claim: None,
            };
        }
    };
    if msg.eth_src == our_mac || msg.sender_mac == our_mac {
        return Inspected {
            decision: Decision::Ignore(IgnoreReason::OwnFrame),
            claim: None,
        };
    }
    let claim = arp_claim(&msg, frame, &owned);
    let ignore = |otherwise| {
        Decision::Ignore(match claim {
            Some(_) => IgnoreReason::Conflict,
            None => otherwise,
        })
    };
    let decision = if msg.op == ArpOp::Reply {
        ignore(IgnoreReason::Reply)
    } else if msg.is_gratuitous() || !owned(msg.target_ip) {
        ignore(IgnoreReason::NotOwned)
    } else {
        Decision::Answer(build_arp_reply(our_mac, msg.target_ip, &msg))
    };
    Inspected { decision, claim }
}

/// [`inspect_arp`] without the conflict.
pub fn decide_arp(frame: &[u8], our_mac: MacAddr, owned: impl Fn(Ipv4Addr) -> bool) -> Decision {
    inspect_arp(frame, our_mac, owned).decision
}

/// Decide on an NDP frame (RFC 4861 §7.2.3–7.2.4): answer a valid NS for an owned target that is
/// sent to the target's solicited-node group or to the target itself (unicast probe), from any
/// source (link-local, global, or `::` for DAD), with an NA from `our_source` (the interface's
/// link-local address) carrying the Target Link-Layer Address `our_mac`. Advertisements are
/// never answered. Conflicts ([`ClaimKind`]): an NA for an owned IP at another MAC, an NS from
/// another MAC whose source is an owned IP, a DAD probe for an owned IP (still defended).
pub fn inspect_ndp(
    frame: &[u8],
    our_mac: MacAddr,
    our_source: Ipv6Addr,
    owned: impl Fn(Ipv6Addr) -> bool,
) -> Inspected {
    let ignore = |reason, claim| Inspected {
        decision: Decision::Ignore(reason),
        claim,
    };
    let ns = match parse_ndp(frame) {
        Ok(NdpMessage::Solicitation(ns)) => ns,
        Ok(NdpMessage::Advertisement(na)) => {
            let mac = na.target_link_layer.unwrap_or(na.eth_src);
            if na.eth_src == our_mac || mac == our_mac {
                return ignore(IgnoreReason::OwnFrame, None);
            }
            if !owned(na.target) {
                return ignore(IgnoreReason::Advertisement, None);
            }
            let claim = Claim {
                ip: IpAddr::V6(na.target),
                mac,
                kind: ClaimKind::NeighborAdvertisement,
                proof: claim_proof::from_na(frame),
            };
            return ignore(IgnoreReason::Conflict, Some(claim));
        }
        Err(e) => {
            return Inspected {
                decision: Decision::Drop(e.reason()),
                claim: None,
            };
        }
    };
    let sender = ns.source_link_layer.unwrap_or(ns.eth_src);
    if ns.eth_src == our_mac || sender == our_mac {
        return ignore(IgnoreReason::OwnFrame, None);
    }
    let claim = if ns.is_dad() && owned(ns.target) {
        Some((ns.target, ClaimKind::DadProbe))
    } else if !ns.is_dad() && owned(ns.ip_src) {
        Some((ns.ip_src, ClaimKind::SolicitationSource))
    } else {
        None
    }
    .map(|(ip, kind)| Claim {
        ip: IpAddr::V6(ip),
        mac: sender,
        kind,
        proof: None,
    });
    if !owned(ns.target) {
        let reason = match claim {
            Some(_) => IgnoreReason::Conflict,
            None => IgnoreReason::NotOwned,
        };
        return ignore(reason, claim);
    }
    if ns.ip_dst != ns.target && ns.ip_dst != solicited_node_multicast(ns.target) {
        return ignore(IgnoreReason::WrongDestination, claim);
    }
    Inspected {
        decision: Decision::Answer(build_advertisement_for(our_mac, our_source, &ns)),
        claim,
    }
}

/// [`inspect_ndp`] without the conflict.
pub fn decide_ndp(
    frame: &[u8],
    our_mac: MacAddr,
    our_source: Ipv6Addr,
    owned: impl Fn(Ipv6Addr) -> bool,
) -> Decision {
    inspect_ndp(frame, our_mac, our_source, owned).decision
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::wire::arp::{GratuitousForm, build_arp_request, build_gratuitous_arp};
    use crate::wire::ndp::{
        NeighborSolicitation, build_neighbor_solicitation, build_unsolicited_advertisement,
        multicast_mac,
    };

    const OURS: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x01);
    const CLIENT: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x02);
    const VIP4: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 200);
    const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0, 8, 0, 0, 0, 0x100);
    const OUR_LL: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

    fn owned4(ip: Ipv4Addr) -> bool {
        ip == VIP4
    }
    fn owned6(ip: Ipv6Addr) -> bool {
        ip == VIP6
    }

    #[test]
    fn arp_answers_only_owned_requests() {
        let req = build_arp_request(CLIENT, Ipv4Addr::new(192, 0, 2, 10), VIP4);
        let Decision::Answer(reply) = decide_arp(&req, OURS, owned4) else {
            panic!("no answer")
        };
        let reply = parse_arp(&reply).unwrap();
        assert_eq!(
            (reply.op, reply.sender_mac, reply.sender_ip, reply.eth_dst),
            (ArpOp::Reply, OURS, VIP4, CLIENT)
        );

        let other = build_arp_request(
            CLIENT,
            Ipv4Addr::new(192, 0, 2, 10),
            Ipv4Addr::new(192, 0, 2, 201),
        );
        assert_eq!(
            decide_arp(&other, OURS, owned4),
            Decision::Ignore(IgnoreReason::NotOwned)
        );
        // Withdrawn: the same request, the owned set now empty.
        assert_eq!(
            decide_arp(&req, OURS, |_| false),
            Decision::Ignore(IgnoreReason::NotOwned)
        );
        let own = build_arp_request(OURS, Ipv4Addr::new(192, 0, 2, 10), VIP4);
        assert_eq!(
            decide_arp(&own, OURS, owned4),
            Decision::Ignore(IgnoreReason::OwnFrame)
        );
        let conflict = build_gratuitous_arp(CLIENT, VIP4, GratuitousForm::Request);
        assert_eq!(
            decide_arp(&conflict, OURS, owned4),
            Decision::Ignore(IgnoreReason::Conflict)
        );
        let probe = build_arp_request(CLIENT, Ipv4Addr::UNSPECIFIED, VIP4);
        assert!(matches!(
            decide_arp(&probe, OURS, owned4),
            Decision::Answer(_)
        ));
        assert_eq!(
            decide_arp(&req[..20], OURS, owned4),
            Decision::Drop("arp_truncated")
        );
    }

    fn ns(ip_src: Ipv6Addr, ip_dst: Ipv6Addr, eth_dst: MacAddr, slla: Option<MacAddr>) -> Vec<u8> {
        build_neighbor_solicitation(&NeighborSolicitation {
            eth_dst,
            eth_src: CLIENT,
            ip_src,
            ip_dst,
            target: VIP6,
            source_link_layer: slla,
        })
    }

    fn answer(d: Decision) -> crate::wire::ndp::NeighborAdvertisement {
        let Decision::Answer(f) = d else {
            panic!("no answer: {d:?}")
        };
        let Ok(NdpMessage::Advertisement(na)) = parse_ndp(&f) else {
            panic!("not an NA")
        };
        na
    }

    /// C-13 (pure part): multicast NS, unicast NS from link-local, unicast NS from a global source.
    #[test]
    fn ndp_answers_multicast_and_unicast_solicitations() {
        let group = solicited_node_multicast(VIP6);
        let client_ll: Ipv6Addr = "fe80::2".parse().unwrap();
        let client_global: Ipv6Addr = "2001:db8:0:8::2".parse().unwrap();
        for (src, dst, eth_dst, slla) in [
            (client_ll, group, multicast_mac(group), Some(CLIENT)),
            (client_ll, VIP6, OURS, Some(CLIENT)),
            (client_global, VIP6, OURS, None),
        ] {
            let na = answer(decide_ndp(
                &ns(src, dst, eth_dst, slla),
                OURS,
                OUR_LL,
                owned6,
            ));
            assert!(na.solicited && na.override_flag);
            assert_eq!(
                (na.target, na.target_link_layer, na.ip_dst, na.eth_dst),
                (VIP6, Some(OURS), src, CLIENT)
            );
        }
        let dad = ns(Ipv6Addr::UNSPECIFIED, group, multicast_mac(group), None);
        let na = answer(decide_ndp(&dad, OURS, OUR_LL, owned6));
        assert!(!na.solicited && na.override_flag);
        assert_eq!(na.ip_dst, crate::wire::ndp::ALL_NODES);

        let wrong = ns(
            client_ll,
            "ff02::1:ff00:1".parse().unwrap(),
            OURS,
            Some(CLIENT),
        );
        assert_eq!(
            decide_ndp(&wrong, OURS, OUR_LL, owned6),
            Decision::Ignore(IgnoreReason::WrongDestination)
        );
        assert_eq!(
            decide_ndp(
                &ns(client_ll, group, multicast_mac(group), Some(CLIENT)),
                OURS,
                OUR_LL,
                |_| false
            ),
            Decision::Ignore(IgnoreReason::NotOwned)
        );
        // Advertisements are never answered (for an owned IP they are a conflict, see below).
        let na = build_unsolicited_advertisement(CLIENT, client_ll, VIP6);
        assert_eq!(
            decide_ndp(&na, OURS, OUR_LL, |_| false),
            Decision::Ignore(IgnoreReason::Advertisement)
        );
        assert_eq!(
            decide_ndp(&na, OURS, OUR_LL, owned6),
            Decision::Ignore(IgnoreReason::Conflict)
        );
        let mut bad = ns(client_ll, group, multicast_mac(group), Some(CLIENT));
        bad[21] = 64;
        assert_eq!(
            decide_ndp(&bad, OURS, OUR_LL, owned6),
            Decision::Drop("ndp_hop_limit")
        );
    }

    const FOREIGN: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x66);

    fn claim4(frame: &[u8]) -> Option<(MacAddr, ClaimKind)> {
        inspect_arp(frame, OURS, owned4).claim.map(|c| {
            assert_eq!(c.ip, IpAddr::V4(VIP4));
            (c.mac, c.kind)
        })
    }

    /// Issue #10 item 5: every ARP frame in which another MAC says it has an owned IP is a claim
    /// (RFC 5227 §2.4: sender IP = ours, requests and replies, gratuitous or not; a broadcast
    /// probe, §2.1.1); replies are never answered, probes still are.
    #[test]
    fn arp_frames_claiming_an_owned_ip_for_another_mac_are_conflicts() {
        use crate::wire::arp::{ArpMessage, build_arp};
        let reply_from_vip = build_arp(&ArpMessage {
            eth_dst: CLIENT,
            eth_src: FOREIGN,
            op: ArpOp::Reply,
            sender_mac: FOREIGN,
            sender_ip: VIP4,
            target_mac: CLIENT,
            target_ip: Ipv4Addr::new(192, 0, 2, 10),
        });
        let cases: [(Vec<u8>, ClaimKind, Decision); 5] = [
            (
                build_gratuitous_arp(FOREIGN, VIP4, GratuitousForm::Request),
                ClaimKind::ArpSender,
                Decision::Ignore(IgnoreReason::Conflict),
            ),
            (
                build_gratuitous_arp(FOREIGN, VIP4, GratuitousForm::Reply),
                ClaimKind::ArpSender,
                Decision::Ignore(IgnoreReason::Conflict),
            ),
            (
                reply_from_vip,
                ClaimKind::ArpSender,
                Decision::Ignore(IgnoreReason::Conflict),
            ),
            // The foreign host resolving its gateway from the VIP.
            (
                build_arp_request(FOREIGN, VIP4, Ipv4Addr::new(192, 0, 2, 1)),
                ClaimKind::ArpSender,
                Decision::Ignore(IgnoreReason::Conflict),
            ),
            (
                build_arp_request(FOREIGN, Ipv4Addr::UNSPECIFIED, VIP4),
                ClaimKind::ArpProbe,
                decide_arp(
                    &build_arp_request(FOREIGN, Ipv4Addr::UNSPECIFIED, VIP4),
                    OURS,
                    owned4,
                ),
            ),
        ];
        for (frame, kind, decision) in cases {
            assert_eq!(claim4(&frame), Some((FOREIGN, kind)), "{kind:?}");
            assert_eq!(inspect_arp(&frame, OURS, owned4).decision, decision);
        }
        // The probe is answered (RFC 5227 §2.1.1: the owner replies, the prober backs off).
        assert!(matches!(
            decide_arp(
                &build_arp_request(FOREIGN, Ipv4Addr::UNSPECIFIED, VIP4),
                OURS,
                owned4
            ),
            Decision::Answer(_)
        ));

        // Not claims: an ordinary request for the VIP, our own announcement, a probe unicast to
        // our MAC (a switch's liveness check), anything about other IPs, or a withdrawn IP.
        let mut unicast_probe = build_arp_request(FOREIGN, Ipv4Addr::UNSPECIFIED, VIP4);
        unicast_probe[..6].copy_from_slice(&OURS.octets());
        for frame in [
            build_arp_request(CLIENT, Ipv4Addr::new(192, 0, 2, 10), VIP4),
            build_gratuitous_arp(OURS, VIP4, GratuitousForm::Request),
            unicast_probe,
            build_gratuitous_arp(
                FOREIGN,
                Ipv4Addr::new(192, 0, 2, 201),
                GratuitousForm::Reply,
            ),
        ] {
            assert_eq!(claim4(&frame), None);
        }
        let g = build_gratuitous_arp(FOREIGN, VIP4, GratuitousForm::Request);
        assert_eq!(inspect_arp(&g, OURS, |_| false).claim, None);
        // An ordinary reply is not answered either.
        let reply = build_arp(&ArpMessage {
            eth_dst: OURS,
            eth_src: CLIENT,
            op: ArpOp::Reply,
            sender_mac: CLIENT,
            sender_ip: Ipv4Addr::new(192, 0, 2, 10),
            target_mac: OURS,
            target_ip: VIP4,
        });
        assert_eq!(
            inspect_arp(&reply, OURS, owned4),
            Inspected {
                decision: Decision::Ignore(IgnoreReason::Reply),
                claim: None
            }
        );
    }

    /// Issue #10 item 5, IPv6: an NA for an owned IP at another MAC (RFC 4861 §4.4), an NS sent
    /// from an owned IP, and a DAD probe for one (RFC 4862 §5.4.2) are claims; the DAD probe is
    /// still defended, the NA never answered.
    #[test]
    fn ndp_frames_claiming_an_owned_ip_for_another_mac_are_conflicts() {
        use crate::wire::ndp::{NeighborAdvertisement, build_neighbor_advertisement};
        let foreign_ll: Ipv6Addr = "fe80::66".parse().unwrap();
        let na = |eth_src, tlla| {
            build_neighbor_advertisement(&NeighborAdvertisement {
                eth_dst: multicast_mac(crate::wire::ndp::ALL_NODES),
                eth_src,
                ip_src: foreign_ll,
                ip_dst: crate::wire::ndp::ALL_NODES,
                router: false,
                solicited: false,
                override_flag: true,
                target: VIP6,
                target_link_layer: tlla,
            })
        };
        let inspect = |f: &[u8]| inspect_ndp(f, OURS, OUR_LL, owned6);
        for (frame, mac) in [
            (
                build_unsolicited_advertisement(FOREIGN, foreign_ll, VIP6),
                FOREIGN,
            ),
            (na(FOREIGN, None), FOREIGN),
            // A proxy advertising a third MAC.
            (na(CLIENT, Some(FOREIGN)), FOREIGN),
        ] {
            let got = inspect(&frame);
            assert_eq!(got.decision, Decision::Ignore(IgnoreReason::Conflict));
            assert_eq!(
                got.claim,
                Some(Claim {
                    ip: IpAddr::V6(VIP6),
                    mac,
                    kind: ClaimKind::NeighborAdvertisement,
                    proof: None,
                })
            );
        }
        // Ours, or someone advertising our MAC, or another target: no claim.
        for frame in [
            build_unsolicited_advertisement(OURS, OUR_LL, VIP6),
            na(CLIENT, Some(OURS)),
        ] {
            assert_eq!(inspect(&frame).claim, None);
        }
        let other =
            build_unsolicited_advertisement(FOREIGN, foreign_ll, "2001:db8::9".parse().unwrap());
        assert_eq!(
            inspect(&other),
            Inspected {
                decision: Decision::Ignore(IgnoreReason::Advertisement),
                claim: None
            }
        );

        let group = solicited_node_multicast(VIP6);
        let mut dad = ns(Ipv6Addr::UNSPECIFIED, group, multicast_mac(group), None);
        dad[6..12].copy_from_slice(&FOREIGN.octets());
        let got = inspect(&dad);
        assert!(
            matches!(got.decision, Decision::Answer(_)),
            "DAD still defended"
        );
        assert_eq!(
            got.claim.map(|c| (c.mac, c.kind)),
            Some((FOREIGN, ClaimKind::DadProbe))
        );

        // The foreign host resolving its router from the VIP.
        let router: Ipv6Addr = "2001:db8:0:8::1".parse().unwrap();
        let from_vip = build_neighbor_solicitation(&NeighborSolicitation {
            eth_dst: multicast_mac(solicited_node_multicast(router)),
            eth_src: FOREIGN,
            ip_src: VIP6,
            ip_dst: solicited_node_multicast(router),
            target: router,
            source_link_layer: Some(FOREIGN),
        });
        let got = inspect(&from_vip);
        assert_eq!(got.decision, Decision::Ignore(IgnoreReason::Conflict));
        assert_eq!(
            got.claim.map(|c| (c.mac, c.kind)),
            Some((FOREIGN, ClaimKind::SolicitationSource))
        );
        // An ordinary NS for the VIP is answered and claims nothing.
        let plain = ns(
            "fe80::2".parse().unwrap(),
            group,
            multicast_mac(group),
            Some(CLIENT),
        );
        let got = inspect(&plain);
        assert!(matches!(got.decision, Decision::Answer(_)));
        assert_eq!(got.claim, None);
    }

    proptest::proptest! {
        /// Over mutated frames of every kind: replies and advertisements are never answered, a
        /// frame from our own MAC never claims anything, and a claim is always for an owned IP.
        #[test]
        fn replies_are_never_answered_and_own_frames_never_claim(
            which in 0usize..6,
            flips in proptest::collection::vec((0usize..90, proptest::prelude::any::<u8>()), 0..4),
            ours_src in proptest::prelude::any::<bool>(),
        ) {
            let group = solicited_node_multicast(VIP6);
            let src = if ours_src { OURS } else { FOREIGN };
            let mut f = match which {
                0 => build_gratuitous_arp(src, VIP4, GratuitousForm::Reply),
                1 => build_gratuitous_arp(src, VIP4, GratuitousForm::Request),
                2 => build_arp_request(src, Ipv4Addr::UNSPECIFIED, VIP4),
                3 => build_unsolicited_advertisement(src, OUR_LL, VIP6),
                4 => {
                    let mut f = ns(Ipv6Addr::UNSPECIFIED, group, multicast_mac(group), None);
                    f[6..12].copy_from_slice(&src.octets());
                    f
                }
                _ => build_arp_request(src, VIP4, Ipv4Addr::new(192, 0, 2, 1)),
            };
            for (i, b) in flips {
                if let Some(x) = f.get_mut(i) { *x = b; }
            }
            let owned_v4 = |ip| ip == VIP4;
            let a = inspect_arp(&f, OURS, owned_v4);
            let n = inspect_ndp(&f, OURS, OUR_LL, owned6);
            if let Ok(m) = parse_arp(&f) {
                if m.op == ArpOp::Reply {
                    proptest::prop_assert!(!matches!(a.decision, Decision::Answer(_)));
                }
                if m.eth_src == OURS || m.sender_mac == OURS {
                    proptest::prop_assert_eq!(a.claim, None);
                }
            }
            if let Ok(NdpMessage::Advertisement(na)) = parse_ndp(&f) {
                proptest::prop_assert!(!matches!(n.decision, Decision::Answer(_)));
                if na.eth_src == OURS {
                    proptest::prop_assert_eq!(n.claim, None);
                }
            }
            for c in [a.claim, n.claim].into_iter().flatten() {
                proptest::prop_assert!(c.mac != OURS);
                proptest::prop_assert!(c.ip == IpAddr::V4(VIP4) || c.ip == IpAddr::V6(VIP6));
            }
        }
    }
}
