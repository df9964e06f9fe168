//! The node networks a speaker reports for automatic pools (`spec.autoAddresses`, issue #28;
//! docs/design.md "Automatic pools"): the IPv4 address and prefix length of each interface it
//! answers ARP on, and the default gateway reached through that interface. Pure: the daemon
//! reads the interfaces (netlink scan) and `/proc/net/route`, this module shapes the report.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ferrolb_crds::announcement::{AddressInUse, NodeNetwork};

/// Most networks in one report (the CRD's `maxItems`).
pub const MAX_NETWORKS: usize = 32;

/// `RTF_UP | RTF_GATEWAY` (`<linux/route.h>`): a usable route through a gateway.
const RTF_UP_GATEWAY: u32 = 0x1 | 0x2;

/// The IPv4 default gateways in `/proc/net/route`, as `(interface, gateway)`: lines whose
/// destination and mask are 0 and whose flags have `RTF_UP` and `RTF_GATEWAY`. The kernel prints
/// each address as the hex of the 32-bit network-order value read as a native integer, so the
/// address's bytes are that integer's native-endian bytes. Lines that do not parse (the header
/// among them) are skipped.
pub fn default_gateways(proc_net_route: &str) -> Vec<(String, Ipv4Addr)> {
    let hex = |s: &str| u32::from_str_radix(s, 16).ok();
    proc_net_route
        .lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (iface, dest, gw, flags, mask) =
                (f.first()?, f.get(1)?, f.get(2)?, f.get(3)?, f.get(7)?);
            let (dest, gw, flags, mask) = (hex(dest)?, hex(gw)?, hex(flags)?, hex(mask)?);
            (dest == 0 && mask == 0 && flags & RTF_UP_GATEWAY == RTF_UP_GATEWAY && gw != 0)
                .then(|| ((*iface).to_owned(), Ipv4Addr::from(gw.to_ne_bytes())))
        })
        .collect()
}

/// The report: one entry per `(interface, address, prefix length)` of the ARP interfaces, with
/// the first default gateway through that interface that lies inside the address's network;
/// sorted by interface then address, duplicates dropped, at most [`MAX_NETWORKS`]. Prefix
/// lengths above 32 are dropped.
pub fn node_networks(
    addresses: &[(String, Ipv4Addr, u8)],
    gateways: &[(String, Ipv4Addr)],
) -> Vec<NodeNetwork> {
    let mut sorted: Vec<&(String, Ipv4Addr, u8)> =
        addresses.iter().filter(|(_, _, l)| *l <= 32).collect();
    sorted.sort();
    sorted.dedup();
    sorted
        .into_iter()
        .take(MAX_NETWORKS)
        .map(|(iface, ip, len)| {
            let net = ferrolb_crds::auto_pool::Net4::new(*ip, *len);
            let gateway = gateways
                .iter()
                .find(|(i, g)| i == iface && net.is_some_and(|n| n.contains(*g)))
                .map(|(_, g)| g.to_string());
            NodeNetwork {
                interface: iface.clone(),
                prefix: format!("{ip}/{len}"),
                gateway,
            }
        })
        .collect()
}

/// How often each candidate is probed again once its verdict is settled.
pub const REPROBE_EVERY: Duration = Duration::from_secs(300);
/// Consecutive quiet probes before an address counts as unanswered, or leaves `inUse` (RFC
/// 5227 §1.1 `PROBE_NUM`): one lost reply — a sleeping NIC, Wi-Fi power save — must not hand a
/// used address out.
pub const PROBE_NUM: u8 = 3;
/// The least time between two probes of one address while its quiet probes are counted (RFC
/// 5227 §1.1 `PROBE_MIN`; rounds come every 2 s, within `PROBE_MAX`).
pub const PROBE_MIN: Duration = Duration::from_secs(1);
/// Most entries in a report's `unanswered` (the CRD's `maxItems`).
pub const MAX_UNANSWERED: usize = 256;
/// Most entries in a report's `inUse` (the CRD's `maxItems`).
pub const MAX_IN_USE: usize = 256;
/// Most candidates probed in one round (a round every few seconds: a handful of frames per
/// second at most, far below RFC 5227's rate for one host).
pub const PROBES_PER_ROUND: usize = 4;

/// Which candidates of an automatic pool this speaker probes, and what it found (RFC 5227
/// §2.1.1 probes, sender IP 0.0.0.0; the daemon sends them and reads the answers). The targets
/// are the pool's candidates in its status (`status.autoAddresses.candidates`,
/// `IPAddressPool::probe_entries`) that no Service holds, plus the addresses this speaker found
/// in use (so an address that falls quiet leaves `inUse`), inside this node's networks.
///
/// - An answer puts the address in `inUse` at once ([`CandidateProbes::in_use`]).
/// - [`PROBE_NUM`] consecutive quiet probes, at least [`PROBE_MIN`] apart, make it unanswered
///   ([`CandidateProbes::unanswered`]: the only addresses the controller hands out) and take it
///   out of `inUse`; one quiet probe is not enough.
/// - [`CandidateProbes::due`] picks the addresses whose count is under way or not begun —
///   highest first, as the controller takes from the top — then those settled
///   [`REPROBE_EVERY`] ago; [`CandidateProbes::record`] takes a verdict.
/// - An address that stops being a target (a Service got it, the pool is gone) is forgotten: it
///   leaves both lists.
#[derive(Debug, Default)]
pub struct CandidateProbes {
    last: BTreeMap<Ipv4Addr, Instant>,
    in_use: BTreeMap<Ipv4Addr, String>,
    /// Consecutive quiet probes since the last answer (or ever), at most [`PROBE_NUM`].
    quiet: BTreeMap<Ipv4Addr, u8>,
}

impl CandidateProbes {
    /// The candidates to probe now among `targets`, at most [`PROBES_PER_ROUND`]: first those
    /// whose quiet count is not begun or under way (and last probed at least [`PROBE_MIN`]
    /// ago), highest first; then those settled (answered, or [`PROBE_NUM`] times quiet) and
    /// probed [`REPROBE_EVERY`] ago, least recently probed first. Forgets what is no longer a
    /// target.
    pub fn due(&mut self, now: Instant, targets: &BTreeSet<Ipv4Addr>) -> Vec<Ipv4Addr> {
        self.last.retain(|ip, _| targets.contains(ip));
        self.in_use.retain(|ip, _| targets.contains(ip));
        self.quiet.retain(|ip, _| targets.contains(ip));
        let mut counting: Vec<Ipv4Addr> = Vec::new();
        let mut settled: Vec<(Instant, Ipv4Addr)> = Vec::new();
        for ip in targets {
            let quiet = self.quiet.get(ip).copied().unwrap_or(0);
            match self.last.get(ip) {
                None => counting.push(*ip),
                Some(at) if quiet > 0 && quiet < PROBE_NUM => {
                    if now.saturating_duration_since(*at) >= PROBE_MIN {
                        counting.push(*ip);
                    }
                }
                Some(at) => {
                    if now.saturating_duration_since(*at) >= REPROBE_EVERY {
                        settled.push((*at, *ip));
                    }
                }
            }
        }
        counting.sort_by(|a, b| b.cmp(a));
        settled.sort_by(|a, b| a.0.cmp(&b.0).then(b.1.cmp(&a.1)));
        counting
            .into_iter()
            .chain(settled.into_iter().map(|(_, ip)| ip))
            .take(PROBES_PER_ROUND)
            .collect()
    }

    /// A probe of `ip` at `now`: `answered_by` the MAC of a host that claimed it (the address
    /// goes to [`CandidateProbes::in_use`] and its quiet count starts again), `None` if nobody
    /// did (one more quiet probe; at [`PROBE_NUM`] it is unanswered and leaves `inUse`).
    pub fn record(&mut self, now: Instant, ip: Ipv4Addr, answered_by: Option<String>) {
        self.last.insert(ip, now);
        match answered_by {
            Some(mac) => {
                self.in_use.insert(ip, mac);
                self.quiet.insert(ip, 0);
            }
            None => {
                let quiet = self.quiet.entry(ip).or_insert(0);
                *quiet = quiet.saturating_add(1).min(PROBE_NUM);
                if *quiet >= PROBE_NUM {
                    self.in_use.remove(&ip);
                }
            }
        }
    }

    /// The addresses found in use, ascending (the report's `inUse`); past [`MAX_IN_USE`] the
    /// highest are kept, since the controller takes candidates from the top.
    pub fn in_use(&self) -> Vec<AddressInUse> {
        let mut out: Vec<AddressInUse> = self
            .in_use
            .iter()
            .rev()
            .take(MAX_IN_USE)
            .map(|(ip, mac)| AddressInUse {
                ip: ip.to_string(),
                mac: mac.clone(),
            })
            .collect();
        out.reverse();
        out
    }

    /// The addresses probed [`PROBE_NUM`] times in a row with no answer, as merged entries
    /// ascending (`192.168.49.252-192.168.49.254`, `192.168.49.250/32`:
    /// [`ferrolb_crds::auto_pool::address_entries`]) — the report's `unanswered`. At most
    /// [`MAX_UNANSWERED`] entries (the CRD's `maxItems`); past it the highest are kept, since
    /// the controller takes candidates from the top.
    pub fn unanswered(&self) -> Vec<String> {
        let quiet = self
            .quiet
            .iter()
            .filter(|(ip, q)| **q >= PROBE_NUM && !self.in_use.contains_key(ip))
            .map(|(ip, _)| *ip);
        let mut entries = ferrolb_crds::auto_pool::address_entries(quiet);
        let extra = entries.len().saturating_sub(MAX_UNANSWERED);
        entries.drain(..extra);
        entries
    }

    /// The addresses found in use (to keep probing them).
    pub fn in_use_ips(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        self.in_use.keys().copied()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    // A minikube node (docker driver): eth0 192.168.49.2/24 via 192.168.49.1, plus a docker
    // bridge route without a gateway and a non-default route through a gateway.
    fn route_text() -> String {
        let gw = u32::from_ne_bytes([192, 168, 49, 1]);
        let net = u32::from_ne_bytes([192, 168, 49, 0]);
        let mask = u32::from_ne_bytes([255, 255, 255, 0]);
        let other = u32::from_ne_bytes([10, 96, 0, 0]);
        format!(
            "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT\n\
             eth0\t00000000\t{gw:08X}\t0003\t0\t0\t0\t00000000\t0\t0\t0\n\
             eth0\t{net:08X}\t00000000\t0001\t0\t0\t0\t{mask:08X}\t0\t0\t0\n\
             eth0\t{other:08X}\t{gw:08X}\t0003\t0\t0\t0\t{mask:08X}\t0\t0\t0\n\
             docker0\t00000000\t00000000\t0001\t0\t0\t0\t00000000\t0\t0\t0\n\
             garbage line\n"
        )
    }

    #[test]
    fn default_gateways_come_from_proc_net_route() {
        assert_eq!(
            default_gateways(&route_text()),
            vec![("eth0".to_owned(), Ipv4Addr::new(192, 168, 49, 1))]
        );
        assert!(default_gateways("").is_empty());
    }

    #[test]
    fn networks_name_the_interface_prefix_and_the_gateway_inside_it() {
        let gws = default_gateways(&route_text());
        let addrs = vec![
            ("eth0".to_owned(), Ipv4Addr::new(192, 168, 49, 2), 24),
            ("eth1".to_owned(), Ipv4Addr::new(10, 0, 0, 5), 16),
            ("eth0".to_owned(), Ipv4Addr::new(192, 168, 49, 2), 24),
            ("eth2".to_owned(), Ipv4Addr::new(10, 0, 0, 6), 40),
        ];
        let nets = node_networks(&addrs, &gws);
        assert_eq!(
            nets,
            vec![
                NodeNetwork {
                    interface: "eth0".into(),
                    prefix: "192.168.49.2/24".into(),
                    gateway: Some("192.168.49.1".into()),
                },
                NodeNetwork {
                    interface: "eth1".into(),
                    prefix: "10.0.0.5/16".into(),
                    gateway: None,
                },
            ]
        );
        // A gateway outside the address's network is not listed for it.
        let far = vec![("eth1".to_owned(), Ipv4Addr::new(192, 168, 49, 1))];
        assert_eq!(node_networks(&addrs[1..2], &far)[0].gateway, None);
    }

    /// Runs rounds 2 s apart from `t`, each probe answered by `answer(ip)`; returns the time
    /// after the last round.
    fn rounds(
        p: &mut CandidateProbes,
        mut t: Instant,
        n: usize,
        targets: &BTreeSet<Ipv4Addr>,
        answer: impl Fn(Ipv4Addr) -> Option<String>,
    ) -> Instant {
        for _ in 0..n {
            for ip in p.due(t, targets) {
                p.record(t, ip, answer(ip));
            }
            t += Duration::from_secs(2);
        }
        t
    }

    fn addr(d: u8) -> Ipv4Addr {
        Ipv4Addr::new(192, 168, 49, d)
    }

    #[test]
    fn candidates_are_confirmed_top_first_by_three_quiet_probes_and_probed_again_after_five_minutes()
     {
        let t0 = Instant::now();
        let mut p = CandidateProbes::default();
        let targets: BTreeSet<Ipv4Addr> = (245..=254).map(addr).collect();
        let answer = |ip: Ipv4Addr| (ip == addr(253)).then(|| "02:42:c0:a8:31:fd".to_owned());
        let first = p.due(t0, &targets);
        assert_eq!(first, vec![addr(254), addr(253), addr(252), addr(251)]);
        for ip in &first {
            p.record(t0, *ip, answer(*ip));
        }
        // An answer counts at once; one quiet probe is not enough (RFC 5227 PROBE_NUM).
        assert_eq!(
            p.in_use(),
            vec![AddressInUse {
                ip: "192.168.49.253".into(),
                mac: "02:42:c0:a8:31:fd".into()
            }]
        );
        assert!(p.unanswered().is_empty());
        // Not again within PROBE_MIN: the next ones below.
        let soon = p.due(t0 + Duration::from_millis(500), &targets);
        assert_eq!(soon, vec![addr(250), addr(249), addr(248), addr(247)]);
        // Two more rounds complete the count of the top ones first.
        let t = rounds(&mut p, t0 + Duration::from_secs(2), 2, &targets, answer);
        assert_eq!(
            p.unanswered(),
            vec!["192.168.49.251-192.168.49.252", "192.168.49.254/32"]
        );
        // The rest, then nothing until five minutes after each settled.
        let t = rounds(&mut p, t, 6, &targets, answer);
        assert_eq!(
            p.unanswered(),
            vec!["192.168.49.245-192.168.49.252", "192.168.49.254/32"]
        );
        assert!(p.due(t, &targets).is_empty());
        let later = t0 + REPROBE_EVERY + Duration::from_secs(20);
        assert_eq!(p.due(later, &targets).len(), PROBES_PER_ROUND);
        // The used address quiet once: still in use; three times: unanswered.
        p.record(later, addr(253), None);
        assert_eq!(p.in_use().len(), 1);
        p.record(later + Duration::from_secs(2), addr(253), None);
        p.record(later + Duration::from_secs(4), addr(253), None);
        assert!(p.in_use().is_empty());
        assert_eq!(p.unanswered(), vec!["192.168.49.245-192.168.49.254"]);
        // An address that answers a later probe leaves unanswered for inUse at once.
        p.record(later, addr(254), Some("02:00:00:00:00:fe".into()));
        assert_eq!(p.unanswered(), vec!["192.168.49.245-192.168.49.253"]);
        assert_eq!(p.in_use().len(), 1);
        // A Service takes an address: forgotten, in neither list.
        let fewer: BTreeSet<Ipv4Addr> = targets
            .iter()
            .copied()
            .filter(|ip| *ip != addr(254))
            .collect();
        p.due(later, &fewer);
        assert!(p.in_use().is_empty());
        assert_eq!(p.unanswered(), vec!["192.168.49.245-192.168.49.253"]);
    }

    #[test]
    fn one_lost_reply_does_not_make_a_used_address_unanswered() {
        let t0 = Instant::now();
        let mut p = CandidateProbes::default();
        let targets: BTreeSet<Ipv4Addr> = [addr(254)].into();
        p.record(t0, addr(254), Some("02:00:00:00:00:01".into()));
        // The host misses one probe, then answers again.
        let t1 = t0 + REPROBE_EVERY;
        assert_eq!(p.due(t1, &targets), vec![addr(254)]);
        p.record(t1, addr(254), None);
        assert!(p.unanswered().is_empty());
        assert_eq!(p.in_use().len(), 1);
        // Counted again soon, not in five minutes.
        assert_eq!(p.due(t1 + PROBE_MIN, &targets), vec![addr(254)]);
        p.record(t1 + PROBE_MIN, addr(254), Some("02:00:00:00:00:01".into()));
        assert!(p.unanswered().is_empty());
        assert_eq!(p.in_use().len(), 1);
    }

    #[test]
    fn in_use_keeps_the_highest_entries_within_the_crd_bound() {
        let t0 = Instant::now();
        let mut p = CandidateProbes::default();
        for o in 0..300u32 {
            p.record(t0, Ipv4Addr::from(0x0a00_0000 + o), Some("m".into()));
        }
        let u = p.in_use();
        assert_eq!(u.len(), MAX_IN_USE);
        assert_eq!(u.last().map(|a| a.ip.as_str()), Some("10.0.1.43"));
        assert_eq!(u.first().map(|a| a.ip.as_str()), Some("10.0.0.44"));
    }

    #[test]
    fn unanswered_keeps_the_highest_entries_within_the_crd_bound() {
        let t0 = Instant::now();
        let mut p = CandidateProbes::default();
        // Every other address of 10.0.0.0/22 quiet: 512 lone entries.
        for o in (0..1024u32).step_by(2) {
            for _ in 0..PROBE_NUM {
                p.record(t0, Ipv4Addr::from(0x0a00_0000 + o), None);
            }
        }
        let u = p.unanswered();
        assert_eq!(u.len(), MAX_UNANSWERED);
        assert_eq!(u.last().map(String::as_str), Some("10.0.3.254/32"));
        assert_eq!(u.first().map(String::as_str), Some("10.0.2.0/32"));
    }
}
