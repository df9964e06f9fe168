//! Preflight: does this node's **kernel** answer ARP for a LoadBalancer IP next to the speaker?
//! (issue #10 item 4). Pure: [`kernel_answers_arp`] works on a scan and sysctl values.
//!
//! Linux answers an ARP request for any address configured on *any* of its interfaces, on every
//! interface, unless `net.ipv4.conf.{all,<iface>}.arp_ignore` ≥ 1 (then only for addresses on the
//! interface the request came in on; Linux `Documentation/networking/ip-sysctl.rst`, the
//! effective value is the maximum of `all` and the interface's). kube-proxy in **IPVS** mode
//! puts every Service IP, external IPs included, on its `kube-ipvs0` dummy interface: with
//! `strictARP` off (`arp_ignore` 0, `arp_announce` 0) every node's kernel then answers ARP for every
//! external IP with its own MAC, beside the owner's speaker, and clients flap between nodes.
//! `strictARP: true` makes kube-proxy set `arp_ignore=1` and `arp_announce=2`. The same happens
//! when anything else puts an external IP on a local interface (a manual `ip addr add … dev lo`).
//! MetalLB documents the requirement; ferrolb also detects it and says so (a Warning Event
//! `KernelAnswersARP` on the Service, the gauge `kernel_arp_conflicts`, a log line).
//!
//! IPv6 is not affected: Neighbor Discovery answers only for addresses of the receiving interface.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use super::interfaces::InterfaceInfo;

/// One LoadBalancer IP the node's kernel answers ARP for on an announce interface.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct KernelArp {
    /// The LoadBalancer IP.
    pub ip: Ipv4Addr,
    /// The local interface holding it (`kube-ipvs0`, `lo`, …).
    pub holder: String,
    /// The announce interface whose kernel answers for it.
    pub answers_on: String,
    /// The effective `arp_ignore` there (max of `all` and the interface's).
    pub arp_ignore: u8,
}

impl KernelArp {
    /// The text of the Warning Event and log line, naming the node, the interfaces and the fix.
    pub fn note(&self, node: &str) -> String {
        if self.holder == self.answers_on {
            format!(
                "{ip} is configured on {holder} of node {node}: its kernel answers ARP for it on {holder} with its own MAC, beside the owner's speaker. Remove the address from the interface",
                ip = self.ip,
                holder = self.holder
            )
        } else {
            format!(
                "{ip} is configured on {holder} of node {node} and net.ipv4.conf.{on}.arp_ignore is {ai}: its kernel answers ARP for it on {on} with its own MAC, beside the owner's speaker. With kube-proxy in IPVS mode set strictARP: true (arp_ignore=1, arp_announce=2); see docs/install.md",
                ip = self.ip,
                holder = self.holder,
                on = self.answers_on,
                ai = self.arp_ignore
            )
        }
    }
}

/// The LoadBalancer IPs in `lb_ips` that this node's kernel answers ARP for on one of the
/// `announce` interfaces (those the speaker answers ARP on), given the `scanned` interfaces and
/// `arp_ignore(name)` (`"all"` or an interface name; `0` if unreadable). An IP configured on the
/// announce interface itself is always answered; one on another interface only while the
/// effective `arp_ignore` of the announce interface is 0. Sorted, one entry per (IP, announce
/// interface).
pub fn kernel_answers_arp(
    scanned: &[InterfaceInfo],
    announce: &BTreeSet<String>,
    lb_ips: &BTreeSet<IpAddr>,
    arp_ignore: impl Fn(&str) -> u8,
) -> Vec<KernelArp> {
    let all = arp_ignore("all");
    let mut out = Vec::new();
    for ip in lb_ips.iter().filter_map(|ip| match ip {
        IpAddr::V4(v4) => Some(*v4),
        IpAddr::V6(_) => None,
    }) {
        let Some(holder) = scanned.iter().find(|i| i.ipv4.contains(&ip)) else {
            continue;
        };
        for on in announce {
            let effective = all.max(arp_ignore(on));
            if holder.name == *on || effective == 0 {
                out.push(KernelArp {
                    ip,
                    holder: holder.name.clone(),
                    answers_on: on.clone(),
                    arp_ignore: effective,
                });
            }
        }
    }
    out.sort();
    out
}

/// `net.ipv4.conf.<name>.arp_ignore` of the calling process's network namespace, 0 when it
/// cannot be read (the kernel default).
pub fn read_arp_ignore(name: &str) -> u8 {
    if name.contains('/') {
        return 0;
    }
    std::fs::read_to_string(format!("/proc/sys/net/ipv4/conf/{name}/arp_ignore"))
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn iface(name: &str, v4: &[&str]) -> InterfaceInfo {
        let v4: Vec<Ipv4Addr> = v4.iter().map(|a| a.parse().unwrap()).collect();
        InterfaceInfo::plain(name, &v4)
    }

    fn ips(v: &[&str]) -> BTreeSet<IpAddr> {
        v.iter().map(|a| a.parse().unwrap()).collect()
    }

    #[test]
    fn ipvs_dummy_with_strict_arp_off_is_found_and_strict_arp_clears_it() {
        let scanned = [
            iface("eth0", &["192.0.2.11"]),
            iface("kube-ipvs0", &["198.51.100.10", "192.0.2.150"]),
        ];
        let announce: BTreeSet<String> = ["eth0".to_string()].into();
        let lb = ips(&["198.51.100.10", "198.51.100.11", "2001:db8::10"]);
        let found = kernel_answers_arp(&scanned, &announce, &lb, |_| 0);
        assert_eq!(
            found,
            vec![KernelArp {
                ip: "198.51.100.10".parse().unwrap(),
                holder: "kube-ipvs0".into(),
                answers_on: "eth0".into(),
                arp_ignore: 0,
            }]
        );
        assert!(found[0].note("node-2").contains("strictARP: true"));
        // strictARP: arp_ignore=1 on all (or on the interface) — the kernel stays silent.
        assert!(kernel_answers_arp(&scanned, &announce, &lb, |n| u8::from(n == "all")).is_empty());
        assert!(kernel_answers_arp(&scanned, &announce, &lb, |n| u8::from(n == "eth0")).is_empty());
        // The ClusterIP on kube-ipvs0 (192.0.2.150) is not a LoadBalancer IP: not reported.
    }

    #[test]
    fn an_lb_ip_on_the_announce_interface_itself_is_always_answered() {
        let scanned = [iface("eth0", &["192.0.2.11", "198.51.100.10"])];
        let announce: BTreeSet<String> = ["eth0".to_string()].into();
        let found = kernel_answers_arp(&scanned, &announce, &ips(&["198.51.100.10"]), |_| 1);
        assert_eq!(found.len(), 1);
        assert!(found[0].note("node-1").contains("Remove the address"));
    }
}
