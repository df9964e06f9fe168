//! Which node each [`Implementation`] picks to announce an IP, so a lab story can say in advance
//! who must answer ARP and check it (the demo's steps 4 and 6 for either implementation):
//!
//! - **ferrolb**: the rendezvous hash of DESIGN S2 (`ferrolb_speaker::election::owner`).
//! - **MetalLB** (v0.15.2, `speaker/layer2_controller.go`, `ShouldAnnounce`): the usable nodes
//!   sorted by `sha256(node + "#" + ip)`, compared as bytes; the first one announces. `ip` is the
//!   first address the Service announces, in Go's `net.IP.String()` form: RFC 5952 text for
//!   IPv6 as Rust's `Display` writes it, and dotted for IPv4 — also for an IPv4-mapped IPv6
//!   address, hence [`IpAddr::to_canonical`] first.
//!
//! For MetalLB the caller passes the nodes MetalLB considers usable for the Service: speakers in
//! its memberlist on nodes its `L2Advertisement` selects, minus nodes with `NetworkUnavailable`
//! or the `node.kubernetes.io/exclude-from-external-load-balancers` label, and for
//! `externalTrafficPolicy: Local` only nodes with a serving endpoint (terminating ones included).

use std::net::IpAddr;

use ring::digest::{SHA256, digest};

use super::Implementation;

/// The node `implementation` picks to announce `ip` among `nodes` (all of them usable), or
/// `None` when `nodes` is empty. The order of `nodes` does not matter.
pub fn expected_owner<'a>(
    implementation: Implementation,
    ip: IpAddr,
    nodes: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    match implementation {
        Implementation::Ferrolb => ferrolb_speaker::election::owner(ip, nodes).map(str::to_owned),
        Implementation::MetalLb => metallb_owner(ip, nodes),
    }
}

/// How the demo names the rule of [`expected_owner`] in one phrase.
pub fn rule_name(implementation: Implementation) -> &'static str {
    match implementation {
        Implementation::Ferrolb => "the rendezvous hash",
        Implementation::MetalLb => "MetalLB's order by sha256(node#IP)",
    }
}

/// MetalLB's choice: the node whose `sha256("<node>#<ip>")` is smallest as bytes.
fn metallb_owner<'a>(ip: IpAddr, nodes: impl IntoIterator<Item = &'a str>) -> Option<String> {
    let ip = ip.to_canonical().to_string();
    nodes
        .into_iter()
        .map(|node| {
            let hash = digest(&SHA256, format!("{node}#{ip}").as_bytes());
            (hash.as_ref().to_vec(), node)
        })
        .min()
        .map(|(_, node)| node.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    /// The sha256 order as `sha256sum` computes it (`printf 'node-N#IP' | sha256sum`):
    /// 198.51.100.40 → node-1 (52a1…) < node-3 (98f7…) < node-2 (e005…);
    /// 198.51.100.41 → node-1 (0efe…) < node-2 (74e4…) < node-3 (f432…).
    #[test]
    fn metallb_picks_the_smallest_sha256_of_node_and_ip() {
        let m = Implementation::MetalLb;
        assert_eq!(
            expected_owner(m, ip("198.51.100.40"), NODES).as_deref(),
            Some("node-1")
        );
        assert_eq!(
            expected_owner(m, ip("198.51.100.40"), ["node-2", "node-3"]).as_deref(),
            Some("node-3")
        );
        assert_eq!(
            expected_owner(m, ip("198.51.100.41"), ["node-3", "node-2"]).as_deref(),
            Some("node-2")
        );
        assert_eq!(expected_owner(m, ip("198.51.100.41"), []), None);
    }

    /// `printf 'node-N#2001:db8::7' | sha256sum`: node-3 (10d3…) < node-1 (3012…) < node-2
    /// (7254…); an IPv4-mapped address hashes as its dotted IPv4 text, as Go prints it.
    #[test]
    fn metallb_hashes_ipv6_and_mapped_addresses_as_go_prints_them() {
        let m = Implementation::MetalLb;
        assert_eq!(
            expected_owner(m, ip("2001:db8::7"), NODES).as_deref(),
            Some("node-3")
        );
        assert_eq!(
            expected_owner(m, ip("::ffff:198.51.100.41"), NODES),
            expected_owner(m, ip("198.51.100.41"), NODES)
        );
    }

    #[test]
    fn ferrolb_is_the_speakers_own_election() {
        let a = ip("198.51.100.200");
        assert_eq!(
            expected_owner(Implementation::Ferrolb, a, NODES).as_deref(),
            ferrolb_speaker::election::owner(a, NODES)
        );
    }

    #[test]
    fn the_order_of_the_nodes_does_not_matter() {
        for implementation in [Implementation::Ferrolb, Implementation::MetalLb] {
            let a = ip("2001:db8::7");
            assert_eq!(
                expected_owner(implementation, a, NODES),
                expected_owner(implementation, a, ["node-3", "node-1", "node-2"])
            );
        }
    }
}
