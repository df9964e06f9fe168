//! Which MAC belongs to which peer speaker, and the owner's rule for a peer that announces
//! one of its IPs. Pure: no `tokio`, no `kube`.
//!
//! **Why.** A SWIM failure detector decides *elsewhere*, and under CPU starvation views stop
//! being transitive (lab attack A12): the others can declare a starved speaker down while its
//! own ticks stayed inside the stall threshold, and its successor announces the IP before the
//! starved speaker has processed the gossip that says so; and the starved speaker itself
//! processes its peers' acknowledgements too late, declares a *healthy* peer down, finds itself
//! in a majority with the third node, and claims the healthy peer's IPs. Either way, for a
//! moment two nodes answer. The claimant's gratuitous ARP / unsolicited NA reaches the other
//! owner's socket *before* any request sent after it, so reacting to it closes the window at
//! the frame level, whatever the scheduler does.
//!
//! **The rule ([`PEER_SETTLE`], [`YIELD_FOR`]).** When a frame claims an IP this speaker has
//! owned for at least [`PEER_SETTLE`], and carries a claim proof that verifies under one of the
//! membership keys and is fresh ([`crate::wire::claim_proof`]: only a speaker of this cluster
//! can make one, and every speaker signs its gratuitous ARPs and unsolicited NAs), the owner
//! *yields* the IP on that interface: it answers no request and sends no announcement for
//! it for [`YIELD_FOR`] (extended by every further claim), then announces it again from the
//! start of the schedule if it still owns it. The claimant can only be announcing because its
//! view differs (it declared this speaker down, or sees it ineligible); one answerer is the
//! invariant, and yielding never adds an answerer. If both sides keep their views, they take
//! turns: the one that resumes announces, and the other, settled by then, yields to it. Unlike
//! an IP conflict with a foreign host (`ferrolb_speaker::l2::conflict`), there is no defence while the yield
//! lasts; the `IPConflict` Event still comes if the IP is still owned a second later (another
//! announcer on the peer's Node, e.g. a MetalLB speaker left running during a migration, sends
//! with that Node's MAC too). A claim that comes within [`PEER_SETTLE`] of the gain is the
//! previous owner's last frame of a handover and changes nothing. MetalLB has no such rule
//! (its speakers never look at each other's announcements).
//!
//! **Only proven claims (DESIGN S15, issue #32 G4).** Until December 2026 the evidence was the
//! sender MAC: a frame whose MAC belonged to a peer Node made the owner yield. Any host on the
//! LAN can write any MAC into a frame, and in the lab one forged ARP per second with a peer's MAC
//! kept an owned IP unanswered for as long as the attacker liked. A claim without a valid proof
//! (none, forged, altered, a replay older than [`crate::wire::claim_proof::MAX_CLOCK_SKEW`])
//! now never yields: it is counted (`unproven_claims`) and handled as any host's conflict (one
//! RFC 5227 defence per 10 s while it persists, the `IPConflict` Event). During a roll-out from
//! a version that did not sign, claims of old speakers are unproven: the handover then waits
//! for the membership (the claim gate) instead of the frame, as it did before the yield existed.
//!
//! **MAC → Node.** Still used for one thing: an unproven claim from a peer's MAC within
//! [`PEER_SETTLE`] of a gain is the previous owner's handover frame and records no conflict.
//! From the kernel's neighbour table (`ferrolb_speaker::l2::neighbours`) joined with the
//! Nodes' InternalIP/ExternalIP addresses ([`peer_macs`]). A MAC seen for two Nodes' addresses
//! (a router answering for routed peers, proxy ARP) names no peer. A peer whose announce
//! interface is not the one that carries its membership traffic is unknown here, which no longer
//! matters for the yield: a proof names no interface.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

use crate::wire::MacAddr;

/// An IP owned for less than this is not yielded: the claim is the previous owner's handover
/// frame (a burst announcement it sent before it processed the loss; a healthy speaker
/// withdraws within milliseconds of the membership change, usually before the new owner has
/// even converged). Kept short on purpose: under CPU starvation a speaker regains an IP and is
/// declared down again within a second, and the owner that must yield then is the starved one
/// (lab attack A12: with 1 s, most of those claims came too early to count).
pub const PEER_SETTLE: Duration = Duration::from_millis(250);

/// How long one peer claim silences the owner for that IP on that interface. Long enough for
/// the owner to process the membership gossip that made the claimant announce (a declared-down
/// notice closes the claim gate, which ends the yield at once), short enough that a claimant
/// that has since handed the IP back leaves it unanswered only briefly. 2.5 s matches no gap of
/// the default announcement schedule (0, 0.5, 2, 5 s; unsolicited NAs at 0, 2, 5 s): a yield
/// never ends at the moment the claimant's next announcement arrives, so two owners taking
/// turns cannot cross announcements and both fall silent.
pub const YIELD_FOR: Duration = Duration::from_millis(2500);

/// The MAC → Node map of peers: every neighbour entry whose IP is an address of a Node in
/// `nodes` (name → InternalIP/ExternalIP addresses) that is in `alive` (the speakers heard
/// recently) and is not `me`. A MAC that maps to two Nodes is left out (ambiguous).
pub fn peer_macs(
    neighbours: &[(IpAddr, MacAddr)],
    nodes: &BTreeMap<String, BTreeSet<IpAddr>>,
    alive: &BTreeSet<String>,
    me: &str,
) -> BTreeMap<MacAddr, String> {
    // An address listed by two Nodes (a shared ExternalIP behind NAT) names neither.
    let mut owners: BTreeMap<IpAddr, BTreeSet<&str>> = BTreeMap::new();
    for (name, ips) in nodes {
        for ip in ips {
            owners.entry(*ip).or_default().insert(name.as_str());
        }
    }
    let by_ip: BTreeMap<IpAddr, &str> = owners
        .into_iter()
        .filter_map(
            |(ip, names)| match names.into_iter().collect::<Vec<_>>()[..] {
                [one] if one != me && alive.contains(one) => Some((ip, one)),
                _ => None,
            },
        )
        .collect();
    let mut out: BTreeMap<MacAddr, Option<String>> = BTreeMap::new();
    for (ip, mac) in neighbours {
        let Some(name) = by_ip.get(ip) else { continue };
        match out.get(mac) {
            None => {
                out.insert(*mac, Some((*name).to_owned()));
            }
            Some(Some(known)) if known == name => {}
            Some(_) => {
                out.insert(*mac, None);
            }
        }
    }
    out.into_iter()
        .filter_map(|(mac, name)| name.map(|n| (mac, n)))
        .collect()
}

/// Whether a claim on an IP owned for `owned_for` makes the owner yield it ([module
/// docs](self)): only a claim whose proof verified (`proven`, [`crate::wire::claim_proof`]), and
/// only once the IP has been owned for [`PEER_SETTLE`]. Who the sender MAC belongs to plays no
/// part: a MAC is no evidence, anyone can put any MAC in a frame.
pub fn yields_to(proven: bool, owned_for: Duration) -> bool {
    proven && owned_for >= PEER_SETTLE
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn mac(n: u8) -> MacAddr {
        MacAddr(2, 0, 0, 0, 0, n)
    }

    fn nodes() -> BTreeMap<String, BTreeSet<IpAddr>> {
        [
            ("node-1", vec!["192.0.2.11", "2001:db8::11"]),
            ("node-2", vec!["192.0.2.12"]),
            ("node-3", vec!["192.0.2.13"]),
        ]
        .into_iter()
        .map(|(n, ips)| {
            (
                n.to_owned(),
                ips.iter().map(|i| i.parse().unwrap()).collect(),
            )
        })
        .collect()
    }

    fn alive(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn maps_the_macs_of_live_peers_only() {
        let neighbours = vec![
            ("192.0.2.11".parse().unwrap(), mac(1)),
            ("2001:db8::11".parse().unwrap(), mac(1)),
            ("192.0.2.12".parse().unwrap(), mac(2)),
            ("192.0.2.13".parse().unwrap(), mac(3)),
            ("192.0.2.99".parse().unwrap(), mac(9)), // not a Node
        ];
        let map = peer_macs(
            &neighbours,
            &nodes(),
            &alive(&["node-1", "node-2"]),
            "node-2",
        );
        assert_eq!(map, BTreeMap::from([(mac(1), "node-1".to_owned())]));
    }

    #[test]
    fn a_mac_shared_by_two_nodes_names_no_peer() {
        // A router answering for two routed Nodes (proxy ARP): the MAC is nobody's.
        let neighbours = vec![
            ("192.0.2.12".parse().unwrap(), mac(7)),
            ("192.0.2.13".parse().unwrap(), mac(7)),
            ("192.0.2.11".parse().unwrap(), mac(1)),
        ];
        let all = alive(&["node-1", "node-2", "node-3"]);
        let map = peer_macs(&neighbours, &nodes(), &all, "node-9");
        assert_eq!(map, BTreeMap::from([(mac(1), "node-1".to_owned())]));
    }

    #[test]
    fn an_address_of_two_nodes_names_neither() {
        let mut n = nodes();
        n.get_mut("node-3")
            .unwrap()
            .insert("192.0.2.12".parse().unwrap());
        let neighbours = vec![("192.0.2.12".parse().unwrap(), mac(2))];
        let all = alive(&["node-1", "node-2", "node-3"]);
        assert!(peer_macs(&neighbours, &n, &all, "node-1").is_empty());
    }

    #[test]
    fn only_a_settled_owner_yields_and_only_to_a_proven_claim() {
        assert!(yields_to(true, PEER_SETTLE));
        assert!(!yields_to(true, PEER_SETTLE - Duration::from_millis(1)));
        assert!(!yields_to(false, Duration::from_secs(3600)));
    }
}
