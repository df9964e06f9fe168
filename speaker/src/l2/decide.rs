//! What to answer to one received frame (DESIGN S6, S7). Pure: the socket tasks call these with
//! the interface's MAC and a membership test for the IPs owned on that interface *at that moment*,
//! so an IP whose ownership was withdrawn is never answered again (S5).

use std::net::{Ipv4Addr, Ipv6Addr};

use crate::wire::MacAddr;
use crate::wire::arp::{ArpOp, build_arp_reply, parse_arp};
use crate::wire::ndp::{NdpMessage, build_advertisement_for, parse_ndp, solicited_node_multicast};

use super::counters::IgnoreReason;

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

/// Decide on an ARP frame (RFC 826): answer a request (or an RFC 5227 probe) whose target IP is
/// owned with "target is at `our_mac`"; ignore our own frames and requests for other IPs. A
/// gratuitous request from another MAC for an owned IP is a conflict (logged by the caller) and is
/// not answered: it asks nothing.
pub fn decide_arp(frame: &[u8], our_mac: MacAddr, owned: impl Fn(Ipv4Addr) -> bool) -> Decision {
    let msg = match parse_arp(frame) {
        Ok(m) => m,
        Err(e) => return Decision::Drop(e.reason()),
    };
    if msg.eth_src == our_mac || msg.sender_mac == our_mac {
        return Decision::Ignore(IgnoreReason::OwnFrame);
    }
    if !owned(msg.target_ip) {
        return Decision::Ignore(IgnoreReason::NotOwned);
    }
    if msg.is_gratuitous() {
        return Decision::Ignore(IgnoreReason::Conflict);
    }
    if msg.op == ArpOp::Reply {
        return Decision::Ignore(IgnoreReason::Reply);
    }
    Decision::Answer(build_arp_reply(our_mac, msg.target_ip, &msg))
}

/// Decide on an NDP frame (RFC 4861 §7.2.3–7.2.4): answer a valid NS for an owned target that is
/// sent to the target's solicited-node group or to the target itself (unicast probe), from any
/// source (link-local, global, or `::` for DAD), with an NA from `our_source` (the interface's
/// link-local address) carrying the Target Link-Layer Address `our_mac`.
pub fn decide_ndp(
    frame: &[u8],
    our_mac: MacAddr,
    our_source: Ipv6Addr,
    owned: impl Fn(Ipv6Addr) -> bool,
) -> Decision {
    let ns = match parse_ndp(frame) {
        Ok(NdpMessage::Solicitation(ns)) => ns,
        Ok(NdpMessage::Advertisement(_)) => return Decision::Ignore(IgnoreReason::Advertisement),
        Err(e) => return Decision::Drop(e.reason()),
    };
    if ns.eth_src == our_mac {
        return Decision::Ignore(IgnoreReason::OwnFrame);
    }
    if !owned(ns.target) {
        return Decision::Ignore(IgnoreReason::NotOwned);
    }
    if ns.ip_dst != ns.target && ns.ip_dst != solicited_node_multicast(ns.target) {
        return Decision::Ignore(IgnoreReason::WrongDestination);
    }
    Decision::Answer(build_advertisement_for(our_mac, our_source, &ns))
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
        let na = build_unsolicited_advertisement(CLIENT, client_ll, VIP6);
        assert_eq!(
            decide_ndp(&na, OURS, OUR_LL, owned6),
            Decision::Ignore(IgnoreReason::Advertisement)
        );
        let mut bad = ns(client_ll, group, multicast_mac(group), Some(CLIENT));
        bad[21] = 64;
        assert_eq!(
            decide_ndp(&bad, OURS, OUR_LL, owned6),
            Decision::Drop("ndp_hop_limit")
        );
    }
}
