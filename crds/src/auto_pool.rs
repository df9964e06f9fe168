//! Automatic pools (`spec.autoAddresses`, issue #28): which addresses a pool with no numbers
//! holds. Pure: the speakers report their nodes' IPv4 networks, the candidates another host
//! answered and the candidates they probed with no answer (`L2Announcement` `node-<node>`,
//! [`crate::announcement::NodeNetwork`], [`crate::announcement::AddressInUse`],
//! `spec.unanswered`); the controller calls [`resolve`] and writes the result into the pool's
//! status, which the speakers read back (docs/design.md, "Automatic pools"). A pool hands out
//! only candidates some speaker probed (RFC 5227 §2.1.1 ARP probe) and no host answered, plus
//! the addresses Services already hold (R7).
//!
//! The candidates of a network are its highest host addresses ([`candidates`]): never the
//! network or broadcast address, a Node's InternalIP/ExternalIP, or a reported gateway. IPv4
//! only for now: an IPv6 node network has no "top" that is likely free (SLAAC addresses are
//! spread over the whole /64).

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};

use crate::addresses::{IpRange, PoolAddresses};
use crate::announcement::{L2Announcement, MEMBER_REPORT_PREFIX, member_report_name};

/// An IPv4 network: the network address (host bits zero) and the prefix length (0–32).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Net4 {
    /// The network address.
    pub network: Ipv4Addr,
    /// The prefix length, 0–32.
    pub len: u8,
}

impl Net4 {
    /// Parses `192.168.49.2/24` (an interface address with its prefix length, as `ip addr` and
    /// [`crate::announcement::NodeNetwork::prefix`] spell it) into its network
    /// `192.168.49.0/24`. `None` for anything else (IPv6, no length, a length above 32).
    pub fn parse(text: &str) -> Option<Net4> {
        let (ip, len) = text.trim().split_once('/')?;
        let ip: Ipv4Addr = ip.parse().ok()?;
        let len: u8 = len.parse().ok()?;
        Net4::new(ip, len)
    }

    /// The network of `ip`/`len`; `None` when `len > 32`.
    pub fn new(ip: Ipv4Addr, len: u8) -> Option<Net4> {
        let mask = mask(len)?;
        Some(Net4 {
            network: Ipv4Addr::from(u32::from(ip) & mask),
            len,
        })
    }

    /// The first and last address of the network (network and broadcast address for `len` ≤
    /// 30).
    pub fn bounds(&self) -> (u32, u32) {
        let first = u32::from(self.network);
        let host_mask = !mask(self.len).unwrap_or(u32::MAX);
        (first, first | host_mask)
    }

    /// Whether the network can hold LoadBalancer IPs: it overlaps none of
    /// [`crate::addresses::FORBIDDEN_BLOCKS`] (so not link-local `169.254.0.0/16`, loopback, or a
    /// short prefix such as `0.0.0.0/0` that covers them).
    pub fn usable(&self) -> bool {
        let (first, last) = self.bounds();
        IpRange::from_offsets(
            crate::addresses::Family::V4,
            u128::from(first),
            u128::from(last),
        )
        .is_some_and(|r| r.forbidden_overlap().is_none())
    }

    /// Whether `ip` is inside the network.
    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let (first, last) = self.bounds();
        (first..=last).contains(&u32::from(ip))
    }
}

impl std::fmt::Display for Net4 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.len)
    }
}

/// The netmask of a prefix length, `None` above 32.
fn mask(len: u8) -> Option<u32> {
    match len {
        0 => Some(0),
        1..=32 => Some(u32::MAX << (32 - u32::from(len))),
        _ => None,
    }
}

/// The `size` highest host addresses of `net`, highest first, leaving out `excluded` (Node
/// addresses, gateways). Host addresses are every address but the network and broadcast
/// address for a /30 or wider, both addresses of a /31 (RFC 3021) and the one of a /32. Fewer
/// than `size` when the network has fewer hosts.
pub fn candidates(net: Net4, size: u16, excluded: &BTreeSet<Ipv4Addr>) -> Vec<Ipv4Addr> {
    let (first, last) = net.bounds();
    let (low, high) = if net.len <= 30 {
        (first + 1, last - 1)
    } else {
        (first, last)
    };
    (low..=high)
        .rev()
        .map(Ipv4Addr::from)
        .filter(|ip| !excluded.contains(ip))
        .take(usize::from(size))
        .collect()
}

/// The entries of a set of IPv4 addresses, ascending: merged ranges `a-b`, or `a/32` for a
/// lone address; each parses with [`crate::addresses::AddressEntry::parse`]. What
/// `status.autoAddresses.addresses` and `.candidates` and a node report's `spec.unanswered`
/// hold: at most as many entries as addresses, and one entry for a run of consecutive ones.
pub fn address_entries(addresses: impl IntoIterator<Item = Ipv4Addr>) -> Vec<String> {
    let ranges: Vec<IpRange> = addresses
        .into_iter()
        .filter_map(|ip| {
            let o = u128::from(u32::from(ip));
            IpRange::from_offsets(crate::addresses::Family::V4, o, o)
        })
        .collect();
    PoolAddresses::from_ranges(ranges, false)
        .ranges()
        .iter()
        .map(|r| match r.first_offset() == r.last_offset() {
            true => format!("{}/32", r.first()),
            false => r.to_string(),
        })
        .collect()
}

/// What one node's report says for automatic pools, parsed: its networks (with the gateway on
/// each, if any), the candidates another host answered and those nobody answered. Entries that
/// do not parse are dropped (a report is input from the network).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeNetworks {
    /// The node.
    pub node: String,
    /// Its announce interfaces' IPv4 networks and gateways. A network that overlaps a block
    /// that is never a LoadBalancer IP ([`crate::addresses::FORBIDDEN_BLOCKS`]: link-local,
    /// loopback, `0.0.0.0/0` …) is dropped: it must not win the vote.
    pub networks: Vec<(Net4, Option<Ipv4Addr>)>,
    /// The interfaces' own addresses (the host part of each reported prefix: the node's
    /// address, and any secondary address such as another tool's VIP). Never a candidate: the
    /// node owning it does not answer its own probe.
    pub addresses: Vec<Ipv4Addr>,
    /// Candidates another host answered: `(address, MAC)`.
    pub in_use: Vec<(Ipv4Addr, String)>,
    /// Candidates this node's speaker probed with no answer (`spec.unanswered`), as IPv4
    /// ranges: kept as ranges, never expanded, so a report listing `0.0.0.0/1` costs one
    /// entry. IPv6 entries are dropped.
    pub unanswered: Vec<IpRange>,
}

impl NodeNetworks {
    /// Whether this node probed `ip` and no host answered.
    pub fn probed_unanswered(&self, ip: Ipv4Addr) -> bool {
        self.unanswered.iter().any(|r| r.contains(IpAddr::V4(ip)))
    }
}

impl NodeNetworks {
    /// Reads a node's report; `None` for an IP's report, or a node report whose name is not
    /// the one of its `spec.node` (the admission policy binds `spec.node` to the writer's node,
    /// not the name: a report under another node's name is ignored).
    pub fn of_report(report: &L2Announcement) -> Option<NodeNetworks> {
        let name = report.metadata.name.as_deref()?;
        if !name.starts_with(MEMBER_REPORT_PREFIX) || name != member_report_name(&report.spec.node)
        {
            return None;
        }
        let mut networks = Vec::new();
        let mut addresses = Vec::new();
        for n in &report.spec.networks {
            let Some(net) = Net4::parse(&n.prefix).filter(Net4::usable) else {
                continue;
            };
            let gateway = n.gateway.as_deref().and_then(|g| g.parse().ok());
            networks.push((net, gateway));
            if let Some(ip) = n
                .prefix
                .split('/')
                .next()
                .and_then(|a| a.trim().parse().ok())
            {
                addresses.push(ip);
            }
        }
        let in_use = report
            .spec
            .in_use
            .iter()
            .filter_map(|u| Some((u.ip.parse().ok()?, u.mac.clone())))
            .collect();
        let unanswered = report
            .spec
            .unanswered
            .iter()
            .filter_map(|e| crate::addresses::AddressEntry::parse(e).ok())
            .map(|e| e.range)
            .filter(|r| r.family() == crate::addresses::Family::V4)
            .collect();
        Some(NodeNetworks {
            node: report.spec.node.clone(),
            networks,
            addresses,
            in_use,
            unanswered,
        })
    }
}

/// How many candidates below an automatic pool's window the speakers probe ahead (one probe
/// round's worth, `ferrolb_l2::networks::PROBES_PER_ROUND`): an answer in the window then moves
/// it onto an address already probed, instead of waiting one more probe round and node-report
/// write (10 s).
pub const LOOKAHEAD: u16 = 4;

/// An automatic pool, resolved.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AutoResolution {
    /// The node network chosen; `None` while no node reported an IPv4 network.
    pub prefix: Option<Net4>,
    /// What the speakers probe (`status.autoAddresses.candidates`), ascending: the window —
    /// the highest `size` candidates of the network that no report lists in use — and up to
    /// [`LOOKAHEAD`] more below it, so that when a host answers the next address down has
    /// already been probed.
    pub candidates: Vec<Ipv4Addr>,
    /// The pool's addresses, ascending: the candidates some node's report lists as probed with
    /// no answer, plus the kept addresses Services hold. Only these are handed out.
    pub addresses: Vec<Ipv4Addr>,
    /// Candidates left out because another host answered: `(address, MAC, reporting node)`,
    /// ascending by address, one per address.
    pub skipped: Vec<(Ipv4Addr, String, String)>,
}

impl AutoResolution {
    /// The addresses as pool entries (merged ranges: `a-b`, or `a/32` for a lone address), what
    /// `status.autoAddresses.addresses` holds; each parses with
    /// [`crate::addresses::AddressEntry::parse`].
    pub fn entries(&self) -> Vec<String> {
        address_entries(self.addresses.iter().copied())
    }

    /// The candidates as entries ([`address_entries`]), what `status.autoAddresses.candidates`
    /// holds.
    pub fn candidate_entries(&self) -> Vec<String> {
        address_entries(self.candidates.iter().copied())
    }

    /// Whether the pool waits for its first probe: it has candidates but no address yet (no
    /// report lists a candidate as probed with no answer, and no Service holds one).
    pub fn waiting_for_probes(&self) -> bool {
        self.addresses.is_empty() && !self.candidates.is_empty()
    }
}

/// The network an automatic pool takes its addresses from: the IPv4 network reported by the
/// most nodes (each node counted once per network), the lowest (address, then length) on a tie.
pub fn choose_network(reports: &[NodeNetworks]) -> Option<Net4> {
    let mut votes: BTreeMap<Net4, BTreeSet<&str>> = BTreeMap::new();
    for r in reports {
        for (net, _) in &r.networks {
            votes.entry(*net).or_default().insert(&r.node);
        }
    }
    // `max_by_key` keeps the last maximum; iterate descending so that is the lowest network.
    votes
        .iter()
        .rev()
        .max_by_key(|(_, nodes)| nodes.len())
        .map(|(net, _)| *net)
}

/// Resolves an automatic pool of `size`: walking the [`candidates`] of [`choose_network`] from
/// the top (every Node address in `node_ips` and every gateway any node reported left out), the
/// first `size` that no node reported in use are the pool's window; its addresses are the
/// window's candidates some node reported probed with no answer
/// ([`NodeNetworks::unanswered`]), plus `keep`. The speakers probe the window and [`LOOKAHEAD`]
/// candidates below it ([`AutoResolution::candidates`]).
///
/// - A candidate nobody has probed yet is not an address: an automatic pool hands out only
///   what some speaker probed (an RFC 5227 §2.1.1 ARP probe) and no host answered (issue #28:
///   an address that answers is "skipped and reported, not handed out").
/// - An address another host answered is skipped (and listed) and the next lower one becomes
///   a candidate, so the pool holds `size` addresses while the network has enough hosts and
///   the speakers have probed them. An in-use report wins over another node's unanswered one
///   (that host may be reachable from one node only). The speakers probe the candidates, so
///   they follow the window down (docs/design.md, "Automatic pools").
/// - An in-use report for an address a Service holds (`held`: every LoadBalancer IP in the
///   Services' status) is ignored: it answers because ferrolb announces it.
/// - `keep`: addresses of the pool's previous resolution that a Service holds. They stay in the
///   pool whatever moved (a new gateway, an answer above them, no report at all, another
///   network chosen), so an assigned address is never taken back (R7); they count toward
///   nothing. Only a Node's or a reported interface's own address, or a gateway, drops one.
/// - Every reported interface address (a node's, or a secondary one such as a VIP) is left out
///   like a Node's address: its own node does not answer its probe.
pub fn resolve(
    size: u16,
    reports: &[NodeNetworks],
    node_ips: &BTreeSet<IpAddr>,
    held: &BTreeSet<IpAddr>,
    keep: &BTreeSet<Ipv4Addr>,
) -> AutoResolution {
    let mut excluded: BTreeSet<Ipv4Addr> = node_ips
        .iter()
        .filter_map(|ip| match ip {
            IpAddr::V4(v4) => Some(*v4),
            IpAddr::V6(_) => None,
        })
        .collect();
    excluded.extend(
        reports
            .iter()
            .flat_map(|r| r.networks.iter().filter_map(|(_, g)| *g)),
    );
    excluded.extend(reports.iter().flat_map(|r| r.addresses.iter().copied()));
    // Held addresses stay whatever the reports say — none yet (a controller that just
    // started), none any more (a node's address lost), or another network now (R7).
    let mut addresses: BTreeSet<Ipv4Addr> = keep
        .iter()
        .filter(|ip| !excluded.contains(ip))
        .copied()
        .collect();
    let Some(net) = choose_network(reports) else {
        return AutoResolution {
            addresses: addresses.into_iter().collect(),
            ..AutoResolution::default()
        };
    };
    let mut in_use: BTreeMap<Ipv4Addr, (String, String)> = BTreeMap::new();
    for r in reports {
        for (ip, mac) in &r.in_use {
            if !held.contains(&IpAddr::V4(*ip)) {
                in_use
                    .entry(*ip)
                    .or_insert_with(|| (mac.clone(), r.node.clone()));
            }
        }
    }
    // Each skipped address moves the window down by one, so `size + skipped + LOOKAHEAD`
    // candidates suffice.
    let walk = size
        .saturating_add(u16::try_from(in_use.len()).unwrap_or(u16::MAX))
        .saturating_add(LOOKAHEAD);
    let mut skipped = Vec::new();
    let mut window = 0u16;
    let mut below = 0u16;
    let mut probe = BTreeSet::new();
    for ip in candidates(net, walk, &excluded) {
        if window == size {
            // Below the window: probed ahead, never an address (yet).
            if below == LOOKAHEAD {
                break;
            }
            if !in_use.contains_key(&ip) {
                probe.insert(ip);
                below += 1;
            }
            continue;
        }
        match in_use.get(&ip) {
            Some((mac, node)) => skipped.push((ip, mac.clone(), node.clone())),
            None => {
                probe.insert(ip);
                window += 1;
                if reports.iter().any(|r| r.probed_unanswered(ip)) {
                    addresses.insert(ip);
                }
            }
        }
    }
    skipped.sort();
    AutoResolution {
        prefix: Some(net),
        candidates: probe.into_iter().collect(),
        addresses: addresses.into_iter().collect(),
        skipped,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> Ipv4Addr {
        s.parse().unwrap()
    }

    fn net(s: &str) -> Net4 {
        Net4::parse(s).unwrap()
    }

    fn set(ips: &[&str]) -> BTreeSet<Ipv4Addr> {
        ips.iter().map(|s| ip(s)).collect()
    }

    fn report(node: &str, nets: &[(&str, Option<&str>)], in_use: &[(&str, &str)]) -> NodeNetworks {
        NodeNetworks {
            node: node.into(),
            networks: nets.iter().map(|(n, g)| (net(n), g.map(ip))).collect(),
            addresses: nets
                .iter()
                .filter_map(|(n, _)| n.split('/').next()?.parse().ok())
                .collect(),
            in_use: in_use.iter().map(|(i, m)| (ip(i), m.to_string())).collect(),
            unanswered: vec![],
        }
    }

    #[test]
    fn held_addresses_stay_with_no_report_and_across_a_network_change() {
        let keep = set(&["192.168.49.250"]);
        let held: BTreeSet<IpAddr> = [IpAddr::V4(ip("192.168.49.250"))].into();
        // A controller that just started, or a single node that lost its address: no network.
        let r = resolve(4, &[], &BTreeSet::new(), &held, &keep);
        assert_eq!(r.prefix, None);
        assert_eq!(r.addresses, vec![ip("192.168.49.250")]);
        // The majority network is another one now: the held address stays.
        let other = [
            report("a", &[("10.0.0.5/24", None)], &[]),
            report("b", &[("10.0.0.6/24", None)], &[]),
        ];
        let r = resolve(4, &other, &BTreeSet::new(), &held, &keep);
        assert_eq!(r.prefix, Some(net("10.0.0.0/24")));
        assert!(r.addresses.contains(&ip("192.168.49.250")), "{r:?}");
    }

    #[test]
    fn an_interface_address_is_never_a_candidate() {
        // node a holds a secondary address at the top (another tool's VIP); it does not answer
        // its own probe, and node b's report says nothing about it yet.
        let reports = [
            probed(
                report(
                    "a",
                    &[("192.168.49.2/24", None), ("192.168.49.254/24", None)],
                    &[],
                ),
                &["192.168.49.250-192.168.49.254"],
            ),
            report("b", &[("192.168.49.3/24", None)], &[]),
        ];
        let r = resolve(
            2,
            &reports,
            &BTreeSet::new(),
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        assert!(!r.candidates.contains(&ip("192.168.49.254")), "{r:?}");
        assert_eq!(
            r.addresses,
            vec![ip("192.168.49.252"), ip("192.168.49.253")]
        );
    }

    #[test]
    fn a_network_overlapping_a_never_usable_block_is_unusable() {
        assert!(!net("169.254.0.0/16").usable());
        assert!(!net("127.0.0.1/8").usable());
        assert!(!net("0.0.0.0/0").usable());
        assert!(!net("224.0.0.0/4").usable());
        assert!(net("10.0.0.0/8").usable());
        assert!(net("192.168.49.0/24").usable());
    }

    /// `r` with `entries` as its `spec.unanswered` (probed, nobody answered).
    fn probed(mut r: NodeNetworks, entries: &[&str]) -> NodeNetworks {
        r.unanswered = entries
            .iter()
            .map(|e| crate::addresses::AddressEntry::parse(e).unwrap().range)
            .collect();
        r
    }

    #[test]
    fn reports_are_read_only_under_their_own_node_name() {
        use crate::announcement::{AddressInUse, L2AnnouncementSpec, NodeNetwork};
        let spec = L2AnnouncementSpec {
            ip: String::new(),
            node: "minikube".into(),
            interfaces: vec![],
            services: vec![],
            since: None,
            held_by: None,
            membership: None,
            networks: vec![
                NodeNetwork {
                    interface: "eth0".into(),
                    prefix: "192.168.49.2/24".into(),
                    gateway: Some("192.168.49.1".into()),
                },
                NodeNetwork {
                    interface: "eth1".into(),
                    prefix: "fd00::2/64".into(),
                    gateway: None,
                },
                // Link-local: never a pool's network.
                NodeNetwork {
                    interface: "eth2".into(),
                    prefix: "169.254.7.7/16".into(),
                    gateway: None,
                },
            ],
            in_use: vec![AddressInUse {
                ip: "192.168.49.254".into(),
                mac: "02:42:c0:a8:31:fe".into(),
            }],
            // Entries that do not parse, and IPv6 ones, are dropped.
            unanswered: vec![
                "192.168.49.252-192.168.49.253".into(),
                "192.168.49.250/32".into(),
                "not an address".into(),
                "fd00::9/128".into(),
            ],
        };
        let read = NodeNetworks::of_report(&L2Announcement::new("node-minikube", spec.clone()));
        assert_eq!(
            read,
            Some(probed(
                report(
                    "minikube",
                    &[("192.168.49.2/24", Some("192.168.49.1"))],
                    &[("192.168.49.254", "02:42:c0:a8:31:fe")]
                ),
                &["192.168.49.252-192.168.49.253", "192.168.49.250/32"]
            ))
        );
        let read = read.unwrap();
        assert!(read.probed_unanswered(ip("192.168.49.253")));
        assert!(!read.probed_unanswered(ip("192.168.49.251")));
        // Another node's name, or an IP's report: ignored.
        assert_eq!(
            NodeNetworks::of_report(&L2Announcement::new("node-other", spec.clone())),
            None
        );
        assert_eq!(
            NodeNetworks::of_report(&L2Announcement::new("ip-192-168-49-254", spec)),
            None
        );
    }

    #[test]
    fn prefixes_parse_to_their_network_and_ipv6_is_refused() {
        assert_eq!(net("192.168.49.2/24").to_string(), "192.168.49.0/24");
        assert_eq!(net("10.0.0.9/32").to_string(), "10.0.0.9/32");
        assert_eq!(net("10.1.2.3/0").to_string(), "0.0.0.0/0");
        for bad in [
            "192.168.49.2",
            "192.168.49.2/33",
            "2001:db8::1/64",
            "x/24",
            "",
        ] {
            assert_eq!(Net4::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn candidates_are_the_top_hosts_without_broadcast_and_excluded() {
        let n = net("192.168.49.2/24");
        assert_eq!(
            candidates(n, 3, &BTreeSet::new()),
            vec![
                ip("192.168.49.254"),
                ip("192.168.49.253"),
                ip("192.168.49.252")
            ]
        );
        // A node address and a gateway at the top are skipped, not counted.
        assert_eq!(
            candidates(n, 2, &set(&["192.168.49.254", "192.168.49.253"])),
            vec![ip("192.168.49.252"), ip("192.168.49.251")]
        );
        // Size above the host count: every host, never the network or broadcast address.
        let small = net("198.51.100.9/29");
        let all = candidates(small, 256, &set(&["198.51.100.9"]));
        assert_eq!(all.len(), 5);
        assert!(!all.contains(&ip("198.51.100.8")) && !all.contains(&ip("198.51.100.15")));
        assert!(!all.contains(&ip("198.51.100.9")));
    }

    #[test]
    fn tiny_networks() {
        // /30: two hosts.
        assert_eq!(
            candidates(net("10.0.0.1/30"), 16, &BTreeSet::new()),
            vec![ip("10.0.0.2"), ip("10.0.0.1")]
        );
        // /31 (RFC 3021): both addresses are hosts; with the node on one, the other remains.
        assert_eq!(
            candidates(net("10.0.0.0/31"), 16, &set(&["10.0.0.0"])),
            vec![ip("10.0.0.1")]
        );
        // /32: the node's own address, nothing to hand out.
        assert!(candidates(net("10.0.0.5/32"), 16, &set(&["10.0.0.5"])).is_empty());
    }

    #[test]
    fn the_network_most_nodes_report_wins_the_lowest_on_a_tie() {
        let a = report("a", &[("192.168.49.2/24", None)], &[]);
        let b = report(
            "b",
            &[("192.168.49.3/24", None), ("10.9.0.3/16", None)],
            &[],
        );
        let c = report("c", &[("10.9.0.4/16", None)], &[]);
        assert_eq!(
            choose_network(&[a.clone(), b.clone()]),
            Some(net("192.168.49.0/24"))
        );
        // 2 votes each: the lower network.
        assert_eq!(
            choose_network(&[a.clone(), b.clone(), c.clone()]),
            Some(net("10.9.0.0/16"))
        );
        // A node listing one network twice counts once.
        let twice = report(
            "d",
            &[("172.18.0.2/16", None), ("172.18.0.9/16", None)],
            &[],
        );
        assert_eq!(choose_network(&[a, twice]), Some(net("172.18.0.0/16")));
        assert_eq!(choose_network(&[]), None);
    }

    #[test]
    fn resolution_skips_nodes_gateways_and_reported_hosts_but_not_held_addresses() {
        // Every candidate probed: kind-worker found the top ones quiet.
        let reports = [
            probed(
                report(
                    "kind-worker",
                    &[("172.18.0.3/16", Some("172.18.0.1"))],
                    &[("172.18.255.253", "02:42:ac:12:ff:fd")],
                ),
                &["172.18.255.200-172.18.255.251"],
            ),
            report(
                "kind-control-plane",
                &[("172.18.0.2/16", Some("172.18.255.254"))],
                &[("172.18.255.251", "02:00:00:00:00:01")],
            ),
        ];
        let nodes: BTreeSet<IpAddr> = ["172.18.0.2", "172.18.0.3", "172.18.255.252"]
            .iter()
            .map(|s| s.parse().unwrap())
            .collect();
        let held: BTreeSet<IpAddr> = ["172.18.255.251".parse().unwrap()].into();
        let r = resolve(4, &reports, &nodes, &held, &BTreeSet::new());
        assert_eq!(r.prefix, Some(net("172.18.0.0/16")));
        // Candidates: .255.253, .255.251, .255.250, .255.249, .255.248 (gateway .254 and node
        // .252 left out); .253 answered, so one more is taken; .251 is held by a Service so its
        // answer is ours.
        assert_eq!(
            r.addresses,
            vec![
                ip("172.18.255.248"),
                ip("172.18.255.249"),
                ip("172.18.255.250"),
                ip("172.18.255.251")
            ]
        );
        assert_eq!(
            r.skipped,
            vec![(
                ip("172.18.255.253"),
                "02:42:ac:12:ff:fd".to_owned(),
                "kind-worker".to_owned()
            )]
        );
        assert_eq!(r.entries(), vec!["172.18.255.248-172.18.255.251"]);
        // Held addresses of the previous resolution stay, even below the window, when the
        // answer above them is gone, or outside the network chosen now (R7); not a Node address.
        let keep = set(&["172.18.255.240", "10.0.0.1", "172.18.255.252"]);
        let kept = resolve(4, &reports[..1], &nodes, &held, &keep);
        // (Without kind-control-plane's report .255.254 is no gateway: a candidate, unprobed.)
        assert_eq!(kept.addresses.first(), Some(&ip("10.0.0.1")));
        assert!(kept.addresses.contains(&ip("172.18.255.240")));
        assert_eq!(kept.addresses.len(), 5);
        assert!(kept.candidates.contains(&ip("172.18.255.254")));
        assert!(!kept.addresses.contains(&ip("172.18.255.254")));
        assert!(!kept.addresses.contains(&ip("172.18.255.252")));
        let lone = AutoResolution {
            addresses: vec![ip("172.18.255.249"), ip("172.18.255.251")],
            ..r
        };
        assert_eq!(
            lone.entries(),
            vec!["172.18.255.249/32", "172.18.255.251/32"]
        );
        assert!(PoolAddresses::parse(&lone.entries(), false).is_ok());
        // Before any report: nothing, no prefix.
        assert_eq!(
            resolve(4, &[], &nodes, &held, &BTreeSet::new()),
            AutoResolution::default()
        );
        // A size beyond the hosts left: every free host, no panic.
        let tiny = [probed(
            report("n", &[("10.0.0.1/30", None)], &[("10.0.0.2", "m")]),
            &["10.0.0.0/24"],
        )];
        let r = resolve(
            256,
            &tiny,
            &BTreeSet::new(),
            &BTreeSet::new(),
            &BTreeSet::new(),
        );
        // .1 is the node's own address, .2 answered: nothing left.
        assert!(r.addresses.is_empty(), "{r:?}");
    }

    /// Issue #28: "an address that answers ARP when probed is skipped and reported, not handed
    /// out" — and neither is one nobody has probed yet.
    #[test]
    fn only_probed_unanswered_candidates_are_addresses() {
        let nodes: BTreeSet<IpAddr> = ["192.168.49.2".parse().unwrap()].into();
        let none = BTreeSet::new();
        let no_keep = BTreeSet::new();
        let net_only = report("minikube", &[("192.168.49.2/24", None)], &[]);
        // The network is known, nothing is probed: the window of four and four below it are
        // probe candidates, nothing is an address.
        let r = resolve(4, std::slice::from_ref(&net_only), &nodes, &none, &no_keep);
        assert_eq!(r.prefix, Some(net("192.168.49.0/24")));
        assert_eq!(r.candidate_entries(), vec!["192.168.49.247-192.168.49.254"]);
        assert!(r.addresses.is_empty() && r.waiting_for_probes(), "{r:?}");
        // Two probed quiet: those two only.
        let some = probed(net_only.clone(), &["192.168.49.253-192.168.49.254"]);
        let r = resolve(4, &[some], &nodes, &none, &no_keep);
        assert_eq!(r.entries(), vec!["192.168.49.253-192.168.49.254"]);
        assert!(!r.waiting_for_probes());
        // Probed ahead below the window: not an address while the window is whole.
        let all = probed(net_only.clone(), &["192.168.49.240-192.168.49.254"]);
        let r = resolve(4, &[all], &nodes, &none, &no_keep);
        assert_eq!(r.entries(), vec!["192.168.49.251-192.168.49.254"]);
        // .254 answered: skipped, the window moves down to .250, not an address until probed
        // (the speakers probe four more below the window).
        let answered = probed(
            report(
                "minikube",
                &[("192.168.49.2/24", None)],
                &[("192.168.49.254", "02:00:00:00:00:fe")],
            ),
            &["192.168.49.251-192.168.49.253"],
        );
        let r = resolve(4, std::slice::from_ref(&answered), &nodes, &none, &no_keep);
        assert_eq!(r.candidate_entries(), vec!["192.168.49.246-192.168.49.253"]);
        assert_eq!(r.entries(), vec!["192.168.49.251-192.168.49.253"]);
        assert_eq!(r.skipped.len(), 1);
        // Another node's quiet probe does not override an answer: still skipped.
        let other = probed(
            report("m02", &[("192.168.49.3/24", None)], &[]),
            &["192.168.49.250-192.168.49.254"],
        );
        let r = resolve(4, &[answered, other], &nodes, &none, &no_keep);
        assert_eq!(r.entries(), vec!["192.168.49.250-192.168.49.253"]);
        assert!(!r.addresses.contains(&ip("192.168.49.254")));
        // An unanswered entry outside the window adds nothing.
        let below = probed(net_only.clone(), &["192.168.49.1-192.168.49.200"]);
        assert!(
            resolve(4, &[below], &nodes, &none, &no_keep)
                .addresses
                .is_empty()
        );
        // A kept address a Service holds stays, probed or not (R7: never taken back).
        let held: BTreeSet<IpAddr> = ["192.168.49.254".parse().unwrap()].into();
        let keep = set(&["192.168.49.254"]);
        let r = resolve(4, &[net_only], &nodes, &held, &keep);
        assert_eq!(r.addresses, vec![ip("192.168.49.254")]);
        assert!(!r.waiting_for_probes());
        // The CRD's maxItems of status.autoAddresses.candidates.
        assert_eq!(crate::v1beta1::AUTO_SIZE_MAX + LOOKAHEAD, 260);
        assert_eq!(
            address_entries([ip("10.0.0.3"), ip("10.0.0.1"), ip("10.0.0.2")]),
            vec!["10.0.0.1-10.0.0.3"]
        );
    }
}
