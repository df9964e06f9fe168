//! Property tests of the pure address math against brute force on small pools.
#![allow(clippy::unwrap_used, missing_docs)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use ferrolb_crds::addresses::{
    AddressEntry, FORBIDDEN_BLOCKS, Family, IpRange, PoolAddresses, forbidden_block, is_buggy_v4,
    to_offset,
};
use proptest::prelude::*;

/// Small IPv4 entries inside 198.51.100.0/23 so brute force stays cheap.
fn v4_entry() -> impl Strategy<Value = String> {
    let base = u32::from(Ipv4Addr::new(198, 51, 100, 0));
    prop_oneof![
        (0u32..512, 0u32..40).prop_map(move |(s, len)| {
            let a = Ipv4Addr::from(base + s);
            let b = Ipv4Addr::from(base + (s + len).min(511));
            format!("{a}-{b}")
        }),
        (0u32..512, 23u8..=32).prop_map(move |(s, p)| format!("{}/{p}", Ipv4Addr::from(base + s))),
    ]
}

fn brute_usable(entries: &[String], avoid_buggy: bool) -> Vec<u128> {
    let mut out = Vec::new();
    for off in
        u32::from(Ipv4Addr::new(198, 51, 100, 0))..=u32::from(Ipv4Addr::new(198, 51, 101, 255))
    {
        let ip = IpAddr::V4(Ipv4Addr::from(off));
        let in_some = entries.iter().any(|e| {
            let parsed = AddressEntry::parse(e).unwrap();
            let usable = parsed.usable();
            usable.contains(ip)
        });
        if in_some && !(avoid_buggy && is_buggy_v4(off.into())) {
            out.push(off.into());
        }
    }
    out
}

/// Whether an address must never be a LoadBalancer IP, from the standard library's own
/// predicates (an oracle independent of `FORBIDDEN_BLOCKS`).
fn std_says_forbidden(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            let first = v4.octets()[0];
            first == 0
                || v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_broadcast()
                || first >= 240
        }
        IpAddr::V6(v6) => {
            v6.is_unspecified()
                || v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unicast_link_local()
                || v6.to_ipv4_mapped().is_some()
        }
    }
}

/// An offset near an edge of a forbidden block (or anywhere), in the block's family.
fn near_edge() -> impl Strategy<Value = (Family, u128)> {
    prop_oneof![
        (0..FORBIDDEN_BLOCKS.len(), any::<bool>(), -300i32..300).prop_map(|(i, last, delta)| {
            let b = &FORBIDDEN_BLOCKS[i];
            let edge = if last {
                b.range().last_offset()
            } else {
                b.range().first_offset()
            };
            let off = if delta < 0 {
                edge.saturating_sub(u128::from(delta.unsigned_abs()))
            } else {
                edge.saturating_add(delta as u128)
                    .min(b.family().max_offset())
            };
            (b.family(), off)
        }),
        any::<u32>().prop_map(|x| (Family::V4, u128::from(x))),
        any::<u128>().prop_map(|x| (Family::V6, x)),
    ]
}

/// A small entry (at most 600 addresses) starting near a forbidden block's edge: a range or a
/// CIDR, written as text.
fn small_entry() -> impl Strategy<Value = String> {
    (near_edge(), 0u128..600, any::<bool>(), 0u32..10).prop_map(
        |((family, start), len, cidr, host)| {
            if cidr {
                let prefix = family.bits() - host;
                format!("{}/{prefix}", family.addr(start))
            } else {
                let end = start.saturating_add(len).min(family.max_offset());
                format!("{}-{}", family.addr(start), family.addr(end))
            }
        },
    )
}

proptest! {
    #[test]
    fn forbidden_block_agrees_with_std((family, off) in near_edge()) {
        let ip = family.addr(off);
        prop_assert_eq!(forbidden_block(ip).is_some(), std_says_forbidden(ip), "{}", ip);
    }

    #[test]
    fn entry_is_refused_iff_some_address_in_it_is_forbidden(entry in small_entry()) {
        let Ok(parsed) = AddressEntry::parse(&entry) else {
            // Only an end written in IPv4-mapped syntax fails to parse; the parser refuses it.
            let mapped = entry.split(['-', '/']).any(|end| {
                end.parse::<Ipv6Addr>().is_ok_and(|a| a.to_ipv4_mapped().is_some())
            });
            prop_assert!(mapped, "{} does not parse", entry);
            prop_assert!(PoolAddresses::parse(&[&entry], false).is_err());
            return Ok(());
        };
        let r = parsed.range;
        let brute = (r.first_offset()..=r.last_offset())
            .any(|o| forbidden_block(r.family().addr(o)).is_some());
        prop_assert_eq!(parsed.forbidden().is_some(), brute, "{}", entry);
        prop_assert_eq!(PoolAddresses::parse(&[&entry], false).is_err(), brute, "{}", entry);
        if let Some(block) = parsed.forbidden() {
            prop_assert!(r.intersect(&block.range()).is_some());
        }
    }

    #[test]
    fn parse_never_panics(s in ".{0,120}") {
        let _ = AddressEntry::parse(&s);
    }

    #[test]
    fn walk_count_and_membership_match_brute_force(entries in prop::collection::vec(v4_entry(), 1..5), avoid in any::<bool>()) {
        let pool = PoolAddresses::parse(&entries, avoid).unwrap();
        let want = brute_usable(&entries, avoid);
        let walked: Vec<u128> = pool.iter(Family::V4).map(to_offset).collect();
        prop_assert_eq!(&walked, &want);
        prop_assert_eq!(pool.count(Family::V4) as usize, want.len());
        for off in want.iter().take(50) {
            prop_assert!(pool.is_usable(Family::V4.addr(*off)));
        }
        prop_assert_eq!(pool.count(Family::V6), 0);
    }

    #[test]
    fn next_usable_skips_nothing(entries in prop::collection::vec(v4_entry(), 1..4), avoid in any::<bool>(), from in 0u32..600) {
        let pool = PoolAddresses::parse(&entries, avoid).unwrap();
        let from = u128::from(u32::from(Ipv4Addr::new(198, 51, 100, 0)) + from);
        let want = brute_usable(&entries, avoid).into_iter().find(|o| *o >= from);
        prop_assert_eq!(pool.next_usable(Family::V4, from), want);
    }

    #[test]
    fn entry_order_does_not_matter(mut entries in prop::collection::vec(v4_entry(), 1..6), avoid in any::<bool>()) {
        let a = PoolAddresses::parse(&entries, avoid).unwrap();
        entries.reverse();
        let b = PoolAddresses::parse(&entries, avoid).unwrap();
        prop_assert_eq!(a, b);
    }

    #[test]
    fn ranges_roundtrip_through_text(x in any::<u128>(), y in any::<u128>()) {
        let (lo, hi) = (x.min(y), x.max(y));
        let r = IpRange::from_offsets(Family::V6, lo, hi).unwrap();
        let text = format!("{}-{}", r.first(), r.last());
        let parsed = AddressEntry::parse(&text).unwrap();
        prop_assert_eq!(parsed.range, r);
        let reversed = format!("{}-{}", r.last(), r.first());
        prop_assert_eq!(AddressEntry::parse(&reversed).is_ok(), lo == hi);
    }

    #[test]
    fn big_v6_pools_count_saturating_and_never_negative(prefix in 3u8..=128) {
        let pool = PoolAddresses::parse(&[format!("2001:db8::/{prefix}")], false);
        // prefixes shorter than /32 mask 2001:db8 away — still a valid entry down to 2000::/3;
        // ::/2 and shorter hold forbidden blocks (::, ::1, ...).
        let pool = pool.unwrap();
        let n = pool.count(Family::V6);
        let want = if prefix <= 64 { u64::MAX } else { 1u64 << (128 - u32::from(prefix)) };
        prop_assert_eq!(n, want);
        prop_assert!(ferrolb_crds::addresses::api_count(n) >= 0);
    }
}
