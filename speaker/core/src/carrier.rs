//! Carrier per interface and per address family as an eligibility input (issue #32 G5.5).
//! Pure.
//!
//! A node is eligible for IP X only while the interface that would announce X to its clients
//! has carrier. Which interface that is depends on the node (its default interface set, its
//! addresses), so every speaker describes its own interfaces in a [`LinkReport`] that the
//! membership carries, sealed, to every member (`crate::membership::carrier`), and every speaker
//! applies the same rule to the same reports ([`LinkReport::carrier_for`]), so all of them drop
//! the same node from X's eligible set and elect the same owner (S2).
//!
//! **The rule.** For IP X of family F announced by node N on `which` (the interfaces its
//! L2Advertisements give: [`crate::eligibility::Cluster::announce_interfaces`]):
//! 1. N's candidates are the interfaces of its report that serve F for `which`: for
//!    [`Interfaces::All`] those of N's default set serving F (ARP for IPv4, NDP for IPv6, as N's
//!    responder selects them, `--interfaces` included), for [`Interfaces::Named`] the named
//!    ones that can serve F there;
//! 2. of these, the ones with X **on link** (X inside one of their prefixes) are the ones that
//!    face X's clients; when none has X on link, all candidates count;
//! 3. N is not eligible for X when every interface counted in 2 has lost carrier.
//!
//! A node with no report (a speaker of the previous protocol, or one whose report has not
//! arrived yet), and a report with no candidate for F, leave N eligible: the rule of release
//! N−1 (a node whose interfaces *all* lost carrier leaves the membership, `docs/speaker.md`).
//! Missing information never makes a node ineligible: a lost or late datagram must not move
//! IPs, and because a report can only *remove* a node, a speaker that lacks it elects the
//! owner the others elect or the node the report removed, which withdraws by itself (its own
//! report is always current): at most one answerer, never two (see `docs/speaker.md`).
//!
//! **Flapping.** [`CarrierHold`] publishes a lost carrier at once and a regained one only after
//! it stayed up for [`CARRIER_UP_HOLD`], so a link that flaps faster than that reads as down
//! the whole time and moves its IPs once, not at every flap.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::eligibility::{
    Cluster, Eligibility, Interfaces, NoEligibleNode, NodeExclusion, PoolRef,
};

/// How long a link must have carrier again before its report says so ([`CarrierHold`]).
pub const CARRIER_UP_HOLD: Duration = Duration::from_secs(1);

/// Most prefixes reported per link (the rest are dropped: an interface with more addresses
/// than that is unusual, and a prefix left out only makes the rule fall back to "any
/// candidate").
pub const MAX_PREFIXES: usize = 8;

/// One interface of a node as its speaker reports it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Link {
    /// Kernel name (`eth0`).
    pub name: String,
    /// Up with carrier (`IFF_UP` and `IFF_LOWER_UP`), after [`CarrierHold`].
    pub carrier: bool,
    /// In the default set, serving ARP (IPv4): used for IPv4 addresses whose L2Advertisements
    /// name no interface.
    pub default_v4: bool,
    /// In the default set, serving NDP (IPv6).
    pub default_v6: bool,
    /// Would serve ARP when named in `spec.interfaces` (an IPv4 address is configured).
    pub named_v4: bool,
    /// Would serve NDP when named (a usable link-local address exists).
    pub named_v6: bool,
    /// On-link prefixes of both families (network address, prefix length), at most
    /// [`MAX_PREFIXES`].
    pub prefixes: Vec<(IpAddr, u8)>,
}

impl Link {
    fn serves(&self, which: &Interfaces, v6: bool) -> bool {
        match which {
            Interfaces::All => {
                if v6 {
                    self.default_v6
                } else {
                    self.default_v4
                }
            }
            Interfaces::Named(names) => {
                names.contains(&self.name) && if v6 { self.named_v6 } else { self.named_v4 }
            }
        }
    }

    fn on_link(&self, ip: IpAddr) -> bool {
        self.prefixes
            .iter()
            .any(|(net, len)| contains(*net, *len, ip))
    }
}

/// Whether `ip` is inside `net`/`len` (same family only).
pub fn contains(net: IpAddr, len: u8, ip: IpAddr) -> bool {
    match (net, ip) {
        (IpAddr::V4(n), IpAddr::V4(a)) => {
            let shift = 32u32.saturating_sub(u32::from(len.min(32)));
            let mask = u32::MAX.checked_shl(shift).unwrap_or(0);
            u32::from(n) & mask == u32::from(a) & mask
        }
        (IpAddr::V6(n), IpAddr::V6(a)) => {
            let shift = 128u32.saturating_sub(u32::from(len.min(128)));
            let mask = u128::MAX.checked_shl(shift).unwrap_or(0);
            u128::from(n) & mask == u128::from(a) & mask
        }
        _ => false,
    }
}

/// What one speaker reports about its interfaces (sorted by name), and whether it has
/// withdrawn from answering.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LinkReport {
    /// The interfaces of its default set and those named by an L2Advertisement it knows.
    pub links: Vec<Link>,
    /// The speaker's claim gate is closed because it hears a minority of the voters: it
    /// answers for nothing, so no IP is planned on it ([`exclude_without_carrier`]; issue #32,
    /// `docs/speaker.md` "A withdrawn speaker"; `crate::node::SpeakerCore::withdrawn`). `false`
    /// from speakers before it (the wire layout without it decodes with `false`:
    /// `crate::membership::carrier`).
    pub withdrawn: bool,
}

impl LinkReport {
    /// Whether the reporting node has carrier towards the clients of `ip` announced on
    /// `which` (the rule of the module docs): `Some(false)` when every interface facing them
    /// lost carrier, `None` when the report has no interface serving `ip`'s family there.
    pub fn carrier_for(&self, which: &Interfaces, ip: IpAddr) -> Option<bool> {
        let v6 = ip.is_ipv6();
        let candidates: Vec<&Link> = self.links.iter().filter(|l| l.serves(which, v6)).collect();
        if candidates.is_empty() {
            return None;
        }
        let facing: Vec<&Link> = candidates
            .iter()
            .copied()
            .filter(|l| l.on_link(ip))
            .collect();
        let counted = if facing.is_empty() {
            candidates
        } else {
            facing
        };
        Some(counted.iter().any(|l| l.carrier))
    }

    /// Whether any reported link has carrier.
    pub fn any_carrier(&self) -> bool {
        self.links.iter().any(|l| l.carrier)
    }

    /// Whether the report can exclude its node from any IP: it is withdrawn, or a link lacks
    /// carrier.
    pub fn restricts(&self) -> bool {
        self.withdrawn || self.links.iter().any(|l| !l.carrier)
    }
}

/// Every member's latest report, by node name (this speaker's own included).
pub type Carriers = BTreeMap<String, LinkReport>;

/// Removes from `eligibility` every node whose report says it has withdrawn
/// ([`LinkReport::withdrawn`]) or has no carrier towards the clients of `ip`
/// ([`LinkReport::carrier_for`] on the interfaces `cluster` gives it for `pool`). When that
/// leaves nobody, the reason says so ([`NodeExclusion::Withdrawn`],
/// [`NodeExclusion::NoCarrier`]).
pub fn exclude_without_carrier(
    eligibility: &mut Eligibility,
    cluster: &Cluster,
    carriers: &Carriers,
    pool: &PoolRef,
    ip: IpAddr,
) {
    if carriers.is_empty() {
        return;
    }
    let dropped: BTreeMap<String, NodeExclusion> = eligibility
        .nodes
        .iter()
        .filter_map(|n| {
            let r = carriers.get(n)?;
            // A report that is not withdrawn and has carrier on every link cannot exclude:
            // skip the interface lookup (the common case, at every IP of every re-plan).
            if r.withdrawn {
                Some((n.clone(), NodeExclusion::Withdrawn))
            } else if r.restricts()
                && r.carrier_for(&cluster.announce_interfaces(pool, n), ip) == Some(false)
            {
                Some((n.clone(), NodeExclusion::NoCarrier))
            } else {
                None
            }
        })
        .collect();
    if dropped.is_empty() {
        return;
    }
    eligibility.nodes.retain(|n| !dropped.contains_key(n));
    if eligibility.nodes.is_empty() {
        eligibility.reason = Some(NoEligibleNode::NodeChecks(dropped));
    }
}

/// The hold-down of regained carrier (module docs): what this speaker reports and plans with.
#[derive(Clone, Debug)]
pub struct CarrierHold {
    hold: Duration,
    /// Per link name, since when it has had carrier without a break (as observed).
    up_since: BTreeMap<String, Instant>,
    /// Whether a report was observed before: the first one is taken as it is (a speaker that
    /// starts has no flapping to damp, and converges before it claims anyway).
    started: bool,
}

impl Default for CarrierHold {
    fn default() -> Self {
        CarrierHold::new(CARRIER_UP_HOLD)
    }
}

impl CarrierHold {
    /// A hold of `hold` for regained carrier.
    pub fn new(hold: Duration) -> Self {
        CarrierHold {
            hold,
            up_since: BTreeMap::new(),
            started: false,
        }
    }

    /// The report to publish at `now` for the interfaces observed as `raw`: a link without
    /// carrier at once, a link with carrier once it has had it for the hold (from the first
    /// observation on: immediately).
    pub fn apply(&mut self, now: Instant, raw: &LinkReport) -> LinkReport {
        let first = !self.started;
        self.started = true;
        let mut out = raw.clone();
        let mut up_since = BTreeMap::new();
        for link in &mut out.links {
            if !link.carrier {
                continue;
            }
            let since = match self.up_since.get(&link.name) {
                Some(t) => *t,
                None if first => now.checked_sub(self.hold).unwrap_or(now),
                None => now,
            };
            up_since.insert(link.name.clone(), since);
            link.carrier = now.saturating_duration_since(since) >= self.hold;
        }
        self.up_since = up_since;
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn link(name: &str, carrier: bool, prefix: &str, len: u8) -> Link {
        let net: IpAddr = prefix.parse().unwrap();
        Link {
            name: name.into(),
            carrier,
            default_v4: net.is_ipv4(),
            default_v6: net.is_ipv6(),
            named_v4: net.is_ipv4(),
            named_v6: net.is_ipv6(),
            prefixes: vec![(net, len)],
        }
    }

    fn two_nics(client: bool, storage: bool) -> LinkReport {
        LinkReport {
            links: vec![
                link("eth0", client, "198.51.100.0", 24),
                link("eth1", storage, "10.1.0.0", 24),
            ],
            withdrawn: false,
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn the_interface_with_the_ip_on_link_decides() {
        let x = ip("198.51.100.7");
        assert_eq!(
            two_nics(true, true).carrier_for(&Interfaces::All, x),
            Some(true)
        );
        assert_eq!(
            two_nics(false, true).carrier_for(&Interfaces::All, x),
            Some(false),
            "the client-facing NIC is down: not eligible, whatever the other NIC"
        );
        assert_eq!(
            two_nics(true, false).carrier_for(&Interfaces::All, x),
            Some(true),
            "the other NIC does not face X's clients"
        );
        // An IP on no reported link: any candidate with carrier will do (the rule before).
        let off = ip("203.0.113.9");
        assert_eq!(
            two_nics(false, true).carrier_for(&Interfaces::All, off),
            Some(true)
        );
        assert_eq!(
            two_nics(false, false).carrier_for(&Interfaces::All, off),
            Some(false)
        );
    }

    #[test]
    fn families_are_judged_apart_and_missing_ones_say_nothing() {
        let r = LinkReport {
            links: vec![
                link("eth0", false, "198.51.100.0", 24),
                link("eth1", true, "2001:db8::", 64),
            ],
            withdrawn: false,
        };
        assert_eq!(
            r.carrier_for(&Interfaces::All, ip("198.51.100.7")),
            Some(false)
        );
        assert_eq!(
            r.carrier_for(&Interfaces::All, ip("2001:db8::7")),
            Some(true)
        );
        let v4_only = two_nics(false, false);
        assert_eq!(
            v4_only.carrier_for(&Interfaces::All, ip("2001:db8::7")),
            None
        );
    }

    #[test]
    fn named_interfaces_replace_the_default_set() {
        let r = two_nics(false, true);
        let x = ip("198.51.100.7");
        let eth1 = Interfaces::Named(["eth1".to_string()].into());
        assert_eq!(r.carrier_for(&eth1, x), Some(true));
        let eth0 = Interfaces::Named(["eth0".to_string()].into());
        assert_eq!(r.carrier_for(&eth0, x), Some(false));
        let absent = Interfaces::Named(["bond0".to_string()].into());
        assert_eq!(r.carrier_for(&absent, x), None);
    }

    #[test]
    fn prefixes_contain_their_addresses_only() {
        assert!(contains(ip("10.1.0.0"), 24, ip("10.1.0.255")));
        assert!(!contains(ip("10.1.0.0"), 24, ip("10.1.1.0")));
        assert!(contains(ip("0.0.0.0"), 0, ip("10.1.1.0")));
        assert!(contains(ip("2001:db8::"), 64, ip("2001:db8::1")));
        assert!(!contains(ip("2001:db8::"), 64, ip("2001:db9::1")));
        assert!(!contains(ip("10.1.0.0"), 24, ip("::ffff:10.1.0.1")));
    }

    #[test]
    fn regained_carrier_is_published_after_the_hold_lost_carrier_at_once() {
        let t0 = Instant::now();
        let mut hold = CarrierHold::new(Duration::from_secs(1));
        assert_eq!(
            hold.apply(t0, &two_nics(true, true)),
            two_nics(true, true),
            "first: as is"
        );
        let t = |ms| t0 + Duration::from_millis(ms);
        assert_eq!(
            hold.apply(t(100), &two_nics(false, true)),
            two_nics(false, true)
        );
        // Back after 200 ms, flapping every 300 ms: down the whole time.
        for (ms, up) in [
            (300, true),
            (600, false),
            (900, true),
            (1_200, false),
            (1_500, true),
        ] {
            let raw = two_nics(up, true);
            assert_eq!(hold.apply(t(ms), &raw), two_nics(false, true), "{ms} ms");
        }
        assert_eq!(
            hold.apply(t(2_499), &two_nics(true, true)),
            two_nics(false, true)
        );
        assert_eq!(
            hold.apply(t(2_500), &two_nics(true, true)),
            two_nics(true, true)
        );
    }
}
