//! Interface discovery and selection (DESIGN S8).
//!
//! [`scan`] lists the interfaces of the calling thread's network namespace with
//! `nix::ifaddrs::getifaddrs` (netlink inside glibc) for names, flags, MACs and addresses, and
//! `/proc/thread-self/net/if_inet6` for the IPv6 address flags (tentative, DAD failed) that
//! `getifaddrs` does not report. Carrier is the `IFF_LOWER_UP` flag (the kernel's
//! `netif_carrier_ok`, the same bit as `/sys/class/net/<if>/carrier`, but read from the calling
//! thread's namespace, which `/sys` is not).
//!
//! Bridge ports are recognised by `/sys/class/net/<if>/brport` (the sysfs of the process's mount,
//! which is the node's in a `hostNetwork` Pod and the namespace's under `ip netns exec`).
//!
//! [`select`] is pure: it applies the default set or an explicit list from
//! `L2Advertisement.spec.interfaces`:
//! - default: up, can broadcast, not loopback, name not matching the exclusions
//!   ([`super::exclusions`]: `--exclude-interfaces`, by default DESIGN S8's `veth*`, `docker*`, …);
//! - explicit list: exactly the named interfaces that exist and are up and not loopback (the
//!   name exclusions and the broadcast check do not apply: the user asked for them);
//! - never, even when named: a **bond slave** (`IFF_SLAVE`) or a **bridge port**. Their frames
//!   belong to the bond or bridge above them, which carries the node's address and its own MAC:
//!   answering or announcing on the lower device would put a second MAC (or a frame that skips
//!   the bridge) on the LAN for the same IP (issue #10 "frame identity"). Name the bond or the
//!   bridge instead;
//! - never on an `IFF_NOARP` interface: the kernel does neither ARP nor NDP there;
//! - in all cases ARP only where an IPv4 address is configured, NDP only where a usable
//!   (non-tentative, not DAD-failed) link-local IPv6 address exists — it is the source of our
//!   Neighbor Advertisements;
//! - in the default set, **one interface per segment** (issue #10 "two NICs on one segment"):
//!   interfaces whose IPv4 subnets coincide are on the same link, and only one of them does ARP —
//!   the one holding one of the Node's addresses ([`select_for_node`]), else the lowest name — so
//!   a request broadcast on that link is answered with one MAC, not one per NIC. The same holds
//!   for NDP with global IPv6 prefixes. An explicit list is taken as given;
//! - in the default set NDP also needs a usable **global** IPv6 address (issue #10): every
//!   IPv6-enabled link has a link-local address, bridge ports and point-to-point veths included,
//!   so a link-local alone says nothing about IPv6 being in use there. An explicit list may name
//!   a link-local-only interface.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use nix::net::if_::InterfaceFlags;

use super::exclusions::NameExclusions;
use crate::eligibility::Interfaces;
use crate::wire::MacAddr;

/// One interface as seen by [`scan`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InterfaceInfo {
    /// Kernel name (`eth0`).
    pub name: String,
    /// Kernel index.
    pub index: u32,
    /// Hardware address; `None` for interfaces without one (tunnels, loopback has all zeroes).
    pub mac: Option<MacAddr>,
    /// `IFF_UP`.
    pub up: bool,
    /// `IFF_BROADCAST`.
    pub broadcast: bool,
    /// `IFF_LOOPBACK`.
    pub loopback: bool,
    /// `IFF_LOWER_UP`: carrier.
    pub carrier: bool,
    /// Configured IPv4 addresses.
    pub ipv4: Vec<Ipv4Addr>,
    /// The IPv4 subnets of those addresses (network address, prefix length).
    pub ipv4_nets: Vec<(Ipv4Addr, u8)>,
    /// The prefixes of the usable global IPv6 addresses (network address, prefix length).
    pub ipv6_nets: Vec<(Ipv6Addr, u8)>,
    /// Usable global IPv6 addresses (not link-local, not tentative, not DAD-failed).
    pub ipv6: Vec<Ipv6Addr>,
    /// Usable link-local IPv6 address (not tentative, not DAD-failed), lowest first.
    pub link_local: Option<Ipv6Addr>,
    /// A usable IPv6 address that is not link-local (not tentative, not DAD-failed) exists.
    pub ipv6_global: bool,
    /// `IFF_NOARP`: no ARP and no Neighbor Discovery on this link.
    pub noarp: bool,
    /// `IFF_SLAVE`: a bond (or EQL) slave; its master answers for the link.
    pub bond_slave: bool,
    /// A port of a Linux bridge; the bridge answers for the link.
    pub bridge_port: bool,
}

impl InterfaceInfo {
    /// An up, broadcast-capable, plain Ethernet interface `name` with carrier, index 1, MAC
    /// `02:00:00:00:00:01`, the IPv4 addresses `ipv4` and no link-local address: a starting point
    /// for tests of the pure rules (change fields with struct update syntax).
    pub fn plain(name: &str, ipv4: &[Ipv4Addr]) -> InterfaceInfo {
        InterfaceInfo {
            name: name.into(),
            index: 1,
            mac: Some(MacAddr(2, 0, 0, 0, 0, 1)),
            up: true,
            broadcast: true,
            loopback: false,
            carrier: true,
            ipv4: ipv4.to_vec(),
            ipv4_nets: ipv4.iter().map(|a| (*a, 32)).collect(),
            ipv6_nets: Vec::new(),
            ipv6: Vec::new(),
            link_local: None,
            ipv6_global: false,
            noarp: false,
            bond_slave: false,
            bridge_port: false,
        }
    }
}

/// An interface chosen for announcements, with the protocols it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Selected {
    /// The interface.
    pub info: InterfaceInfo,
    /// Answer ARP and send gratuitous ARP here (an IPv4 address is configured).
    pub arp: bool,
    /// Answer NDP and send unsolicited NAs here (a usable link-local address exists).
    pub ndp: bool,
}

/// Choose interfaces and protocols (pure; rules in the module docs), without knowing the Node's
/// addresses and with the built-in exclusions: [`select_for_node`] with none and
/// [`NameExclusions::default`].
pub fn select(interfaces: &[InterfaceInfo], which: &Interfaces) -> Vec<Selected> {
    select_for_node(
        interfaces,
        which,
        &BTreeSet::new(),
        &NameExclusions::default(),
    )
}

/// Choose interfaces and protocols (pure; rules in the module docs). `node_addresses` are the
/// Node's InternalIP/ExternalIP addresses: on a segment reached by several interfaces of the
/// default set, the one holding such an address serves it. `excluded` names the interfaces the
/// default set leaves out ([`Interfaces::All`] only). An interface without a MAC is never
/// selected. Output is sorted by name.
pub fn select_for_node(
    interfaces: &[InterfaceInfo],
    which: &Interfaces,
    node_addresses: &BTreeSet<IpAddr>,
    excluded: &NameExclusions,
) -> Vec<Selected> {
    let mut out: Vec<Selected> = interfaces
        .iter()
        .filter(|i| i.up && !i.loopback && i.mac.is_some())
        .filter(|i| !i.noarp && !i.bond_slave && !i.bridge_port)
        .filter(|i| match which {
            Interfaces::All => i.broadcast && !excluded.matches(&i.name),
            Interfaces::Named(names) => names.contains(&i.name),
        })
        .map(|i| Selected {
            info: i.clone(),
            arp: !i.ipv4.is_empty(),
            ndp: i.link_local.is_some() && (i.ipv6_global || matches!(which, Interfaces::Named(_))),
        })
        .collect();
    out.sort_by(|a, b| a.info.name.cmp(&b.info.name));
    if matches!(which, Interfaces::All) {
        one_per_segment(&mut out, node_addresses);
    }
    out.retain(|s| s.arp || s.ndp);
    out
}

/// Keeps, per link, ARP on one interface and NDP on one interface (module docs). Two interfaces
/// are on one link when they share an IPv4 subnet (for ARP) or a global IPv6 prefix (for NDP),
/// prefix length included. The one kept has carrier if any does, then holds a Node address,
/// then has the lowest name (`out` is sorted by name). Not recognised as one link: subnets of
/// different lengths (a /25 and a /24 could as well be two links with overlapping plans, and
/// silencing one of those would leave its clients without an answer), and addresses configured
/// as /32 or /128 (DHCPv6 IA_NA) whose on-link prefix is only a route.
fn one_per_segment(out: &mut [Selected], node_addresses: &BTreeSet<IpAddr>) {
    let holds = |s: &Selected, v6: bool| {
        if v6 {
            s.info
                .ipv6
                .iter()
                .any(|a| node_addresses.contains(&IpAddr::V6(*a)))
        } else {
            s.info
                .ipv4
                .iter()
                .any(|a| node_addresses.contains(&IpAddr::V4(*a)))
        }
    };
    let n = out.len();
    for v6 in [false, true] {
        // Decide on a snapshot, so one interface giving a segment up cannot change who wins.
        let snapshot: Vec<Selected> = out.to_vec();
        for (i, a) in snapshot.iter().enumerate() {
            let serves = |s: &Selected| if v6 { s.ndp } else { s.arp };
            let nets_overlap = |x: &Selected, y: &Selected| {
                if v6 {
                    x.info
                        .ipv6_nets
                        .iter()
                        .any(|n| y.info.ipv6_nets.contains(n))
                } else {
                    x.info
                        .ipv4_nets
                        .iter()
                        .any(|n| y.info.ipv4_nets.contains(n))
                }
            };
            let beaten = (0..n).filter(|&j| j != i).any(|j| {
                snapshot.get(j).is_some_and(|b| {
                    serves(a)
                        && serves(b)
                        && nets_overlap(a, b)
                        && (b.info.carrier, holds(b, v6), std::cmp::Reverse(j))
                            > (a.info.carrier, holds(a, v6), std::cmp::Reverse(i))
                })
            });
            if beaten && let Some(sel) = out.get_mut(i) {
                if v6 {
                    sel.ndp = false;
                } else {
                    sel.arp = false;
                }
            }
        }
    }
}

/// This node's carrier report (issue #32 G5.5, [`crate::carrier`]): every interface of the
/// default set `default` (the automatic set, or `--interfaces` resolved as
/// [`Interfaces::Named`]) and every interface in `named` (the names any L2Advertisement lists),
/// with what it serves for each family as [`select_for_node`] decides it, its carrier and its
/// on-link prefixes. An interface that is administratively down is judged as if it were up and
/// reported without carrier, so that losing it counts like losing its carrier instead of
/// dropping it from the report (which would make the rule fall back to the other interfaces).
/// `excluded`: as in [`select_for_node`]. Sorted by name. Pure.
pub fn link_report(
    interfaces: &[InterfaceInfo],
    default: &Interfaces,
    named: &BTreeSet<String>,
    node_addresses: &BTreeSet<IpAddr>,
    excluded: &NameExclusions,
) -> crate::carrier::LinkReport {
    let as_if_up: Vec<InterfaceInfo> = interfaces
        .iter()
        .map(|i| InterfaceInfo {
            up: true,
            carrier: i.up && i.carrier,
            ..i.clone()
        })
        .collect();
    let mut links: BTreeMap<String, crate::carrier::Link> = BTreeMap::new();
    let mut entry = |s: &Selected| {
        links
            .entry(s.info.name.clone())
            .or_insert_with(|| crate::carrier::Link {
                name: s.info.name.clone(),
                carrier: s.info.carrier,
                default_v4: false,
                default_v6: false,
                named_v4: false,
                named_v6: false,
                prefixes: s
                    .info
                    .ipv4_nets
                    .iter()
                    .map(|(n, l)| (IpAddr::V4(*n), *l))
                    .chain(s.info.ipv6_nets.iter().map(|(n, l)| (IpAddr::V6(*n), *l)))
                    .take(crate::carrier::MAX_PREFIXES)
                    .collect(),
            });
    };
    let defaults = select_for_node(&as_if_up, default, node_addresses, excluded);
    for s in &defaults {
        entry(s);
    }
    let listed = Interfaces::Named(named.clone());
    let named_sel = select_for_node(&as_if_up, &listed, node_addresses, excluded);
    for s in &named_sel {
        entry(s);
    }
    for s in &defaults {
        if let Some(l) = links.get_mut(&s.info.name) {
            l.default_v4 = s.arp;
            l.default_v6 = s.ndp;
        }
    }
    for s in &named_sel {
        if let Some(l) = links.get_mut(&s.info.name) {
            l.named_v4 = s.arp;
            l.named_v6 = s.ndp;
        }
    }
    crate::carrier::LinkReport {
        links: links.into_values().collect(),
        withdrawn: false,
    }
}

/// One line of `/proc/net/if_inet6`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Inet6Entry {
    /// The address.
    pub addr: Ipv6Addr,
    /// Interface index.
    pub index: u32,
    /// Prefix length.
    pub prefix_len: u8,
    /// `IFA_F_*` flags.
    pub flags: u32,
    /// Interface name.
    pub name: String,
}

/// `IFA_F_TENTATIVE`: duplicate address detection still running.
pub const IFA_F_TENTATIVE: u32 = 0x40;
/// `IFA_F_DADFAILED`: duplicate address detection failed.
pub const IFA_F_DADFAILED: u32 = 0x08;

/// Parse `/proc/net/if_inet6` (`address index prefixlen scope flags name`, all hex but the name).
/// Malformed lines are skipped.
pub fn parse_if_inet6(text: &str) -> Vec<Inet6Entry> {
    text.lines()
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let [addr, index, plen, _scope, flags, name] = f.as_slice() else {
                return None;
            };
            let addr = u128::from_str_radix(addr, 16)
                .ok()
                .filter(|_| addr.len() == 32)?;
            Some(Inet6Entry {
                addr: Ipv6Addr::from(addr),
                index: u32::from_str_radix(index, 16).ok()?,
                prefix_len: u8::from_str_radix(plen, 16).ok()?,
                flags: u32::from_str_radix(flags, 16).ok()?,
                name: (*name).to_owned(),
            })
        })
        .collect()
}

/// Whether `addr` is in `fe80::/10`.
pub fn is_link_local(addr: Ipv6Addr) -> bool {
    addr.segments()[0] & 0xffc0 == 0xfe80
}

/// The usable link-local address per interface name from `/proc/net/if_inet6` entries.
pub fn usable_link_locals(entries: &[Inet6Entry]) -> BTreeMap<String, Ipv6Addr> {
    let mut out = BTreeMap::new();
    for e in entries {
        if is_link_local(e.addr) && e.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED) == 0 {
            out.entry(e.name.clone())
                .and_modify(|a: &mut Ipv6Addr| *a = (*a).min(e.addr))
                .or_insert(e.addr);
        }
    }
    out
}

/// Per interface name, its usable IPv6 addresses that are not link-local (global or unique
/// local) with their prefix lengths, from `/proc/net/if_inet6` entries.
pub fn usable_globals(entries: &[Inet6Entry]) -> BTreeMap<String, Vec<(Ipv6Addr, u8)>> {
    let mut out: BTreeMap<String, Vec<(Ipv6Addr, u8)>> = BTreeMap::new();
    for e in entries
        .iter()
        .filter(|e| !is_link_local(e.addr) && !e.addr.is_loopback())
        .filter(|e| e.flags & (IFA_F_TENTATIVE | IFA_F_DADFAILED) == 0)
    {
        out.entry(e.name.clone())
            .or_default()
            .push((e.addr, e.prefix_len));
    }
    out
}

/// The network address of `addr`/`len`.
fn v4_network(addr: Ipv4Addr, len: u8) -> Ipv4Addr {
    let mask = u32::MAX
        .checked_shl(32 - u32::from(len.min(32)))
        .unwrap_or(0);
    Ipv4Addr::from(u32::from(addr) & mask)
}

/// The network address of `addr`/`len`.
fn v6_network(addr: Ipv6Addr, len: u8) -> Ipv6Addr {
    let mask = u128::MAX
        .checked_shl(128 - u32::from(len.min(128)))
        .unwrap_or(0);
    Ipv6Addr::from(u128::from(addr) & mask)
}

/// List the interfaces of the calling thread's network namespace (see module docs).
///
/// Errors: `getifaddrs` failing. A missing `/proc/thread-self/net/if_inet6` (IPv6 disabled)
/// means no interface serves NDP.
pub fn scan() -> io::Result<Vec<InterfaceInfo>> {
    let inet6 = std::fs::read_to_string("/proc/thread-self/net/if_inet6").unwrap_or_default();
    let entries = parse_if_inet6(&inet6);
    let link_locals = usable_link_locals(&entries);
    let globals = usable_globals(&entries);
    let mut by_name: BTreeMap<String, InterfaceInfo> = BTreeMap::new();
    for ifa in nix::ifaddrs::getifaddrs().map_err(io::Error::from)? {
        let entry = by_name
            .entry(ifa.interface_name.clone())
            .or_insert_with(|| InterfaceInfo {
                name: ifa.interface_name.clone(),
                index: 0,
                mac: None,
                up: ifa.flags.contains(InterfaceFlags::IFF_UP),
                broadcast: ifa.flags.contains(InterfaceFlags::IFF_BROADCAST),
                loopback: ifa.flags.contains(InterfaceFlags::IFF_LOOPBACK),
                carrier: ifa.flags.contains(InterfaceFlags::IFF_LOWER_UP),
                ipv4: Vec::new(),
                ipv4_nets: Vec::new(),
                ipv6_nets: globals
                    .get(&ifa.interface_name)
                    .into_iter()
                    .flatten()
                    .map(|(a, l)| (v6_network(*a, *l), *l))
                    .collect(),
                ipv6: globals
                    .get(&ifa.interface_name)
                    .into_iter()
                    .flatten()
                    .map(|(a, _)| *a)
                    .collect(),
                link_local: link_locals.get(&ifa.interface_name).copied(),
                ipv6_global: globals.contains_key(&ifa.interface_name),
                noarp: ifa.flags.contains(InterfaceFlags::IFF_NOARP),
                bond_slave: ifa.flags.contains(InterfaceFlags::IFF_SLAVE),
                bridge_port: is_bridge_port(&ifa.interface_name),
            });
        let Some(addr) = ifa.address else { continue };
        if let Some(link) = addr.as_link_addr() {
            entry.index = u32::try_from(link.ifindex()).unwrap_or_default();
            entry.mac = link
                .addr()
                .filter(|_| link.halen() == 6)
                .map(|o| MacAddr(o[0], o[1], o[2], o[3], o[4], o[5]));
        } else if let Some(v4) = addr.as_sockaddr_in() {
            let len = ifa
                .netmask
                .and_then(|m| m.as_sockaddr_in().map(|m| u32::from(m.ip()).count_ones()))
                .and_then(|n| u8::try_from(n).ok())
                .unwrap_or(32);
            entry.ipv4.push(v4.ip());
            entry.ipv4_nets.push((v4_network(v4.ip(), len), len));
        }
    }
    Ok(by_name.into_values().filter(|i| i.index != 0).collect())
}

/// Whether `name` is a port of a Linux bridge (`/sys/class/net/<name>/brport` exists).
fn is_bridge_port(name: &str) -> bool {
    !name.contains('/')
        && std::path::Path::new("/sys/class/net")
            .join(name)
            .join("brport")
            .exists()
}

/// The names of interfaces in `selected` (for logs and status).
pub fn names(selected: &[Selected]) -> BTreeSet<String> {
    selected.iter().map(|s| s.info.name.clone()).collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// An interface with (if `v4`) an IPv4 address of its own — distinct per name, so that
    /// different interfaces are on different segments — and (if `ll`) IPv6.
    fn iface(name: &str, v4: bool, ll: bool) -> InterfaceInfo {
        let host = name
            .bytes()
            .fold(10u8, |h, b| h.wrapping_mul(31).wrapping_add(b));
        let v4: &[Ipv4Addr] = if v4 {
            &[Ipv4Addr::new(192, 0, 2, host)]
        } else {
            &[]
        };
        InterfaceInfo {
            link_local: ll.then(|| "fe80::1".parse().unwrap()),
            ipv6_global: ll,
            ..InterfaceInfo::plain(name, v4)
        }
    }

    /// The C-12 node: eth0 v4, eth1 v6 only, eth2 no address, lo, a veth, eth3 v4.
    fn c12() -> Vec<InterfaceInfo> {
        let lo = InterfaceInfo {
            loopback: true,
            broadcast: false,
            mac: Some(MacAddr(0, 0, 0, 0, 0, 0)),
            ..iface("lo", true, false)
        };
        vec![
            iface("eth0", true, true),
            iface("eth1", false, true),
            iface("eth2", false, false),
            lo,
            iface("veth1234", true, true),
            iface("eth3", true, true),
        ]
    }

    fn summary(s: &[Selected]) -> Vec<(String, bool, bool)> {
        s.iter()
            .map(|s| (s.info.name.clone(), s.arp, s.ndp))
            .collect()
    }

    #[test]
    fn c12_default_selection() {
        let s = select(&c12(), &Interfaces::All);
        assert_eq!(
            summary(&s),
            vec![
                ("eth0".into(), true, true),
                ("eth1".into(), false, true),
                ("eth3".into(), true, true)
            ]
        );
    }

    #[test]
    fn c12_explicit_list_overrides() {
        let named = |v: &[&str]| Interfaces::Named(v.iter().map(|s| s.to_string()).collect());
        assert_eq!(
            summary(&select(&c12(), &named(&["eth0"]))),
            vec![("eth0".into(), true, true)]
        );
        // An explicitly named veth is used; an unknown name and lo are not.
        assert_eq!(
            summary(&select(&c12(), &named(&["veth1234", "nope", "lo"]))),
            vec![("veth1234".into(), true, true)]
        );
        // eth1 has no IPv4: never ARP there, even when named.
        assert_eq!(
            summary(&select(&c12(), &named(&["eth1"]))),
            vec![("eth1".into(), false, true)]
        );
    }

    #[test]
    fn down_or_no_broadcast_or_no_mac_is_skipped() {
        let down = InterfaceInfo {
            up: false,
            ..iface("eth0", true, true)
        };
        let p2p = InterfaceInfo {
            broadcast: false,
            ..iface("wg0", true, true)
        };
        let nomac = InterfaceInfo {
            mac: None,
            ..iface("eth5", true, true)
        };
        assert!(select(&[down, p2p, nomac], &Interfaces::All).is_empty());
    }

    /// Issue #10: bond slaves, bridge ports and NOARP links never answer or announce, even when
    /// an L2Advertisement names them; the bond and the bridge do.
    #[test]
    fn bond_slaves_bridge_ports_and_noarp_are_never_selected() {
        let slave = InterfaceInfo {
            bond_slave: true,
            ..iface("eth0", false, false)
        };
        let port = InterfaceInfo {
            bridge_port: true,
            ..iface("eth1", false, true)
        };
        let noarp = InterfaceInfo {
            noarp: true,
            ..iface("eth2", true, true)
        };
        let all = vec![
            slave,
            port,
            noarp,
            iface("bond0", true, true),
            iface("br0", true, true),
        ];
        assert_eq!(
            summary(&select(&all, &Interfaces::All)),
            vec![("bond0".into(), true, true), ("br0".into(), true, true)]
        );
        let named = Interfaces::Named(
            ["eth0", "eth1", "eth2"]
                .into_iter()
                .map(String::from)
                .collect(),
        );
        assert!(select(&all, &named).is_empty());
    }

    /// Issue #10: by default a link-local address alone does not make an NDP interface; a global
    /// one is needed. Named interfaces need only the link-local (the NA source).
    #[test]
    fn default_ndp_needs_a_global_address() {
        let ll_only = InterfaceInfo {
            ipv6_global: false,
            ..iface("eth2", false, true)
        };
        let v4_and_ll = InterfaceInfo {
            ipv6_global: false,
            ..iface("eth0", true, true)
        };
        let all = [ll_only, v4_and_ll, iface("eth1", false, true)];
        assert_eq!(
            summary(&select(&all, &Interfaces::All)),
            vec![("eth0".into(), true, false), ("eth1".into(), false, true)]
        );
        let named = Interfaces::Named(["eth2".to_string()].into());
        assert_eq!(
            summary(&select(&all, &named)),
            vec![("eth2".into(), false, true)]
        );
        let entries = parse_if_inet6(
            "fe800000000000000000000000000001 02 40 20 80 eth0\n\
             20010db8000000070000000000000010 03 40 00 80 eth1\n\
             20010db8000000070000000000000011 04 40 00 c0 eth3\n\
             00000000000000000000000000000001 01 80 10 80 lo\n",
        );
        let globals = usable_globals(&entries);
        assert_eq!(globals.keys().cloned().collect::<Vec<_>>(), ["eth1"]);
        assert_eq!(
            globals["eth1"],
            vec![("2001:db8:0:7::10".parse().unwrap(), 0x40)]
        );
    }

    /// Issue #32 G5.5: the carrier report lists the default set and the named interfaces with
    /// what each serves per family, its carrier and its prefixes; an administratively down
    /// interface stays in it without carrier; the client-facing NIC losing carrier makes the
    /// node lose carrier for an IP on its subnet only.
    #[test]
    fn the_link_report_follows_the_selection_per_family() {
        let a: Ipv4Addr = "198.51.100.10".parse().unwrap();
        let b: Ipv4Addr = "10.1.0.10".parse().unwrap();
        let eth0 = InterfaceInfo {
            ipv4_nets: vec![(v4_network(a, 24), 24)],
            ..InterfaceInfo::plain("eth0", &[a])
        };
        let eth1 = InterfaceInfo {
            index: 2,
            ipv4_nets: vec![(v4_network(b, 24), 24)],
            link_local: Some("fe80::2".parse().unwrap()),
            ..InterfaceInfo::plain("eth1", &[b])
        };
        let veth = InterfaceInfo {
            index: 3,
            ..InterfaceInfo::plain("veth9", &[])
        };
        let named: BTreeSet<String> = ["eth1".to_string()].into();
        let x: IpAddr = "198.51.100.53".parse().unwrap();
        let report = |e0: InterfaceInfo| {
            link_report(
                &[e0, eth1.clone(), veth.clone()],
                &Interfaces::All,
                &named,
                &BTreeSet::new(),
                &NameExclusions::default(),
            )
        };
        let r = report(eth0.clone());
        let names: Vec<&str> = r.links.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            names,
            ["eth0", "eth1"],
            "the veth is neither default nor named"
        );
        assert!(r.links[0].default_v4 && !r.links[0].default_v6 && !r.links[0].named_v4);
        assert!(r.links[1].default_v4 && !r.links[1].default_v6);
        assert!(
            r.links[1].named_v4 && r.links[1].named_v6,
            "NDP on a named link-local"
        );
        assert_eq!(
            r.links[0].prefixes,
            vec![(IpAddr::V4(v4_network(a, 24)), 24)]
        );
        assert_eq!(r.carrier_for(&Interfaces::All, x), Some(true));
        let lost = report(InterfaceInfo {
            carrier: false,
            ..eth0.clone()
        });
        assert_eq!(lost.carrier_for(&Interfaces::All, x), Some(false));
        let admin_down = report(InterfaceInfo {
            up: false,
            ..eth0.clone()
        });
        assert_eq!(admin_down.links.len(), 2);
        assert_eq!(admin_down.carrier_for(&Interfaces::All, x), Some(false));
        // An IP on no subnet of the node: any interface of the family will do.
        let off: IpAddr = "203.0.113.9".parse().unwrap();
        assert_eq!(lost.carrier_for(&Interfaces::All, off), Some(true));
    }

    /// Issue #10: two NICs of a node on one segment answer with one MAC — the NIC holding the
    /// Node's address, else the lowest name; NICs on other segments are unaffected, and an
    /// explicit list is taken as given.
    #[test]
    fn two_nics_on_one_segment_answer_once() {
        let nic = |name: &str, v4: &str, v6: Option<&str>| {
            let a: Ipv4Addr = v4.parse().unwrap();
            let mut i = InterfaceInfo {
                ipv4_nets: vec![(v4_network(a, 24), 24)],
                link_local: Some("fe80::1".parse().unwrap()),
                ..InterfaceInfo::plain(name, &[a])
            };
            if let Some(v6) = v6 {
                let g: Ipv6Addr = v6.parse().unwrap();
                i.ipv6 = vec![g];
                i.ipv6_nets = vec![(v6_network(g, 64), 64)];
                i.ipv6_global = true;
            }
            i
        };
        let all = [
            nic("eth0", "192.0.2.11", Some("2001:db8:1a::b")),
            nic("eth1", "192.0.2.21", Some("2001:db8:1a::15")),
            nic("eth2", "203.0.113.5", None),
        ];
        // Without the Node's addresses: the lowest name on the shared segment.
        assert_eq!(
            summary(&select(&all, &Interfaces::All)),
            vec![("eth0".into(), true, true), ("eth2".into(), true, false)]
        );
        // The NIC holding the Node's InternalIP wins, per family.
        let node: BTreeSet<IpAddr> = ["192.0.2.21".parse().unwrap()].into();
        assert_eq!(
            summary(&select_for_node(
                &all,
                &Interfaces::All,
                &node,
                &NameExclusions::default()
            )),
            vec![
                ("eth0".into(), false, true),
                ("eth1".into(), true, false),
                ("eth2".into(), true, false)
            ]
        );
        let named = Interfaces::Named(["eth0".to_string(), "eth1".to_string()].into());
        assert_eq!(
            select_for_node(&all, &named, &node, &NameExclusions::default()).len(),
            2
        );
        // The NIC holding the Node's address lost its cable: the other one on the segment serves.
        let unplugged = [
            all[0].clone(),
            InterfaceInfo {
                carrier: false,
                ..all[1].clone()
            },
        ];
        let arp_on = |sel: Vec<Selected>| -> Vec<String> {
            sel.into_iter()
                .filter(|s| s.arp)
                .map(|s| s.info.name)
                .collect()
        };
        assert_eq!(
            arp_on(select_for_node(
                &unplugged,
                &Interfaces::All,
                &node,
                &NameExclusions::default()
            )),
            vec!["eth0".to_string()]
        );
        // Unequal masks (/24 and /25) are not taken for one segment: both keep ARP.
        let narrow = InterfaceInfo {
            ipv4_nets: vec![(v4_network("192.0.2.21".parse().unwrap(), 25), 25)],
            ..all[1].clone()
        };
        assert_eq!(
            arp_on(select(&[all[0].clone(), narrow], &Interfaces::All)),
            vec!["eth0".to_string(), "eth1".to_string()]
        );
        assert_eq!(
            v4_network("192.0.2.77".parse().unwrap(), 25),
            "192.0.2.0".parse::<Ipv4Addr>().unwrap()
        );
        assert_eq!(
            v4_network("192.0.2.77".parse().unwrap(), 0),
            Ipv4Addr::UNSPECIFIED
        );
    }

    /// `--exclude-interfaces` shapes the automatic set only: a replaced list lets a veth in and
    /// keeps a bridge out; an explicit list names its interfaces whatever the exclusions say.
    #[test]
    fn the_exclusions_shape_the_default_set_only() {
        let eth0 = InterfaceInfo::plain("eth0", &["192.0.2.10".parse().unwrap()]);
        let veth = InterfaceInfo {
            index: 2,
            ..InterfaceInfo::plain("veth1", &["198.51.100.1".parse().unwrap()])
        };
        let br = InterfaceInfo {
            index: 3,
            ..InterfaceInfo::plain("br-1a2b", &["203.0.113.1".parse().unwrap()])
        };
        let all = [eth0, veth, br];
        let names = |ex: &str, which: &Interfaces| -> Vec<String> {
            let ex = NameExclusions::parse(ex).unwrap();
            select_for_node(&all, which, &BTreeSet::new(), &ex)
                .into_iter()
                .map(|s| s.info.name)
                .collect()
        };
        assert_eq!(names("default", &Interfaces::All), ["br-1a2b", "eth0"]);
        assert_eq!(names("default,br-*", &Interfaces::All), ["eth0"]);
        assert_eq!(names("br-*", &Interfaces::All), ["eth0", "veth1"]);
        assert_eq!(
            names("none", &Interfaces::All),
            ["br-1a2b", "eth0", "veth1"]
        );
        let named = Interfaces::Named(["veth1".to_string()].into());
        assert_eq!(names("default", &named), ["veth1"]);
    }

    #[test]
    fn if_inet6_parsing_and_tentative() {
        let text = "\
fe800000000000000000000000000002 03 40 20 c0 eth1
fe800000000000000000000000000001 02 40 20 80 eth0
20010db8000000070000000000000010 03 40 00 80 eth1
fe800000000000000000000000000009 04 40 20 88 eth2
garbage line
fe80000000000000000000000000000a 05 40 20 80 eth3
fe800000000000000000000000000003 05 40 20 80 eth3
";
        let entries = parse_if_inet6(text);
        assert_eq!(entries.len(), 6);
        assert_eq!(entries[0].flags, 0xc0);
        let ll = usable_link_locals(&entries);
        // eth1's link-local is tentative (0x40); eth2's failed DAD (0x08); eth3 keeps the lowest.
        assert_eq!(ll.len(), 2);
        assert_eq!(ll["eth0"], "fe80::1".parse::<Ipv6Addr>().unwrap());
        assert_eq!(ll["eth3"], "fe80::3".parse::<Ipv6Addr>().unwrap());
        assert!(
            is_link_local("febf::1".parse().unwrap()) && !is_link_local("fec0::1".parse().unwrap())
        );
    }

    #[test]
    fn scan_sees_loopback() {
        // Every namespace has lo; it is found, flagged loopback, and never selected.
        let all = scan().unwrap();
        let lo = all.iter().find(|i| i.name == "lo").unwrap();
        assert!(lo.loopback);
        assert!(select(&all, &Interfaces::Named(["lo".to_string()].into())).is_empty());
    }
}
