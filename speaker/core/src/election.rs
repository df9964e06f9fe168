//! Per-IP owner election (DESIGN S2): rendezvous (highest random weight) hashing of
//! (node name, IP) over the eligible nodes. Pure: no `kube`, no `tokio`.
//!
//! The weight is SipHash-1-3 (crate `siphasher`) with the fixed keys [`KEY0`]/[`KEY1`] over the
//! bytes `node name ‖ 0xff ‖ family tag (4 or 6) ‖ IP octets` — never std's randomly seeded hasher,
//! and no `usize` lengths — so every speaker, on any architecture and in any process, computes the
//! same owner from the same eligible set. `0xff` never occurs in UTF-8, so the encoding is
//! unambiguous. Ties (equal 64-bit weights) go to the lexicographically greatest name.
//!
//! Properties (tested): removing a node that does not own an IP never moves it; adding a node moves
//! only the IPs the new node now wins; IPs spread evenly over nodes.

use std::collections::BTreeSet;
use std::hash::Hasher;
use std::net::IpAddr;

use siphasher::sip::SipHasher13;

/// First SipHash key ("ferrolb-" in ASCII, little-endian). Changing it moves every IP.
pub const KEY0: u64 = u64::from_le_bytes(*b"ferrolb-");
/// Second SipHash key ("election" in ASCII, little-endian).
pub const KEY1: u64 = u64::from_le_bytes(*b"election");

/// The rendezvous weight of `node` for `ip`: SipHash-1-3 with fixed keys, see the module docs.
pub fn weight(node: &str, ip: IpAddr) -> u64 {
    let mut h = SipHasher13::new_with_keys(KEY0, KEY1);
    h.write(node.as_bytes());
    h.write(&[0xff]);
    match ip {
        IpAddr::V4(v4) => {
            h.write(&[4]);
            h.write(&v4.octets());
        }
        IpAddr::V6(v6) => {
            h.write(&[6]);
            h.write(&v6.octets());
        }
    }
    h.finish()
}

/// The owner of `ip` among `eligible` node names: the one with the highest [`weight`] (ties: the
/// greatest name). `None` when `eligible` is empty. Order and duplicates of `eligible` don't matter.
pub fn owner<'a, I>(ip: IpAddr, eligible: I) -> Option<&'a str>
where
    I: IntoIterator<Item = &'a str>,
{
    eligible
        .into_iter()
        .max_by_key(|node| (weight(node, ip), *node))
}

/// The eligible set of a shared IP: the intersection of the eligible sets of the Services on it
/// (DESIGN S1). No sets → empty.
pub fn intersect_all<'a, I>(sets: I) -> BTreeSet<String>
where
    I: IntoIterator<Item = &'a BTreeSet<String>>,
{
    let mut iter = sets.into_iter();
    let Some(first) = iter.next() else {
        return BTreeSet::new();
    };
    iter.fold(first.clone(), |acc, s| {
        acc.intersection(s).cloned().collect()
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeMap;
    use std::net::{Ipv4Addr, Ipv6Addr};

    /// 2001:db8::/32 (documentation range) + n.
    fn ip(n: u32) -> IpAddr {
        IpAddr::V6(Ipv6Addr::from((0x2001_0db8_u128 << 96) | u128::from(n)))
    }

    #[test]
    fn weights_are_pinned() {
        // Golden values: if these change, every cluster re-elects every IP on upgrade.
        let a = weight("node-1", "198.51.100.10".parse().unwrap());
        let b = weight("node-2", "198.51.100.10".parse().unwrap());
        let c = weight("node-1", "2001:db8::10".parse().unwrap());
        assert_eq!(
            a,
            weight("node-1", IpAddr::V4(Ipv4Addr::new(198, 51, 100, 10)))
        );
        assert_ne!(a, b);
        assert_ne!(a, c);
        assert_eq!([a, b, c], GOLDEN);
    }

    // Regression pins taken from this implementation (siphasher 1.0.4); they guard the encoding.
    const GOLDEN: [u64; 3] = [
        11694472201587948344,
        17710026074787348024,
        913133756571670877,
    ];

    #[test]
    fn families_do_not_collide() {
        // ::c633:640a has the same low octets as 198.51.100.10; the family tag separates them.
        let v6 = IpAddr::V6(Ipv6Addr::new(0, 0, 0, 0, 0, 0, 0xc633, 0x640a));
        assert_ne!(
            weight("n", v6),
            weight("n", "198.51.100.10".parse().unwrap())
        );
    }

    #[test]
    fn empty_set_has_no_owner_and_order_does_not_matter() {
        assert_eq!(owner(ip(1), []), None);
        let nodes = ["node-1", "node-2", "node-3"];
        for i in 0..50 {
            let fwd = owner(ip(i), nodes);
            let rev = owner(ip(i), nodes.iter().rev().copied());
            let dup = owner(ip(i), nodes.iter().chain(nodes.iter()).copied());
            assert_eq!(fwd, rev);
            assert_eq!(fwd, dup);
        }
    }

    #[test]
    fn distribution_is_roughly_even() {
        let nodes: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
        let mut count: BTreeMap<&str, u32> = BTreeMap::new();
        for i in 0..10_000 {
            let o = owner(ip(i), nodes.iter().map(String::as_str)).unwrap();
            *count.entry(o).or_default() += 1;
        }
        assert_eq!(count.len(), 10);
        for (node, n) in count {
            // Expected 1000 each, σ ≈ 30: ±20% is a very loose bound (≈ 6.7σ).
            assert!((800..=1200).contains(&n), "{node} owns {n} of 10000");
        }
    }

    #[test]
    fn intersection_of_service_sets() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
        assert_eq!(
            intersect_all([&s(&["a", "b", "c"]), &s(&["b", "c"]), &s(&["c", "d"])]),
            s(&["c"])
        );
        assert_eq!(intersect_all([&s(&["a"]), &s(&["b"])]), s(&[]));
        assert_eq!(intersect_all(std::iter::empty()), s(&[]));
    }

    fn node_set() -> impl Strategy<Value = BTreeSet<String>> {
        proptest::collection::btree_set("[a-z]{1,6}-[0-9]{1,2}", 1..12)
    }

    proptest! {
        #[test]
        fn removing_a_non_owner_never_moves_the_ip(nodes in node_set(), ip in any::<u32>(), pick in any::<usize>()) {
            let ip = IpAddr::V4(Ipv4Addr::from(ip));
            let before = owner(ip, nodes.iter().map(String::as_str)).unwrap().to_owned();
            let victim = nodes.iter().nth(pick % nodes.len()).unwrap().clone();
            prop_assume!(victim != before);
            let after = owner(ip, nodes.iter().filter(|n| **n != victim).map(String::as_str)).unwrap();
            prop_assert_eq!(after, before.as_str());
        }

        #[test]
        fn adding_a_node_moves_only_to_it(nodes in node_set(), ip in any::<[u8; 16]>(), extra in "[a-z]{1,6}-[0-9]{1,2}") {
            let ip = IpAddr::V6(Ipv6Addr::from(ip));
            let before = owner(ip, nodes.iter().map(String::as_str)).unwrap();
            let after = owner(ip, nodes.iter().map(String::as_str).chain([extra.as_str()])).unwrap();
            prop_assert!(after == before || after == extra.as_str());
        }
    }
}
