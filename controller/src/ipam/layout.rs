//! Who owns which address: pools' usable ranges after overlap resolution (R9: the older pool
//! keeps overlapping addresses; creation time, then name) and after removing Node addresses (R10).
//!
//! The result is a set of disjoint owned ranges, each tagged with its pool, and per pool the
//! messages of its `Overlapping` and `NodeAddressConflict` conditions. Cost is
//! O((ranges + node addresses) · log) and independent of pool sizes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrolb_crds::addresses::{Family, IpRange, PoolAddresses, to_offset};

use super::pool::PoolConfig;

/// The owned ranges of one pool and what was taken away from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolLayout {
    /// Ranges this pool hands out from (before `avoidBuggyIPs`), ascending, disjoint.
    pub owned: Vec<IpRange>,
    /// `"198.51.100.0-198.51.100.15 (also in older pool pool-a)"`, one per overlapped pool.
    pub overlaps: Vec<String>,
    /// `"198.51.100.5 (InternalIP/ExternalIP of node node-1)"`, one per Node address inside.
    pub node_conflicts: Vec<String>,
}

/// Owned ranges of every pool, and a lookup from address to owning pool.
#[derive(Debug, Clone, Default)]
pub struct Layout {
    /// Per pool name.
    pub pools: BTreeMap<String, PoolLayout>,
    /// `(family, first offset)` → `(last offset, pool name)`; disjoint across pools.
    index: BTreeMap<(Family, u128), (u128, String)>,
}

/// `ranges` minus `hole` (same family or not), keeping order.
fn subtract(ranges: &[IpRange], hole: &IpRange) -> Vec<IpRange> {
    let mut out = Vec::with_capacity(ranges.len() + 1);
    for r in ranges {
        match r.intersect(hole) {
            None => out.push(*r),
            Some(i) => {
                if i.first_offset() > r.first_offset()
                    && let Some(left) =
                        IpRange::from_offsets(r.family(), r.first_offset(), i.first_offset() - 1)
                {
                    out.push(left);
                }
                if i.last_offset() < r.last_offset()
                    && let Some(right) =
                        IpRange::from_offsets(r.family(), i.last_offset() + 1, r.last_offset())
                {
                    out.push(right);
                }
            }
        }
    }
    out
}

impl Layout {
    /// Computes ownership for `pools` given Node addresses (`address → node name`).
    pub fn build<'a>(
        pools: impl IntoIterator<Item = &'a PoolConfig>,
        nodes: &BTreeMap<IpAddr, String>,
    ) -> Layout {
        let mut by_age: Vec<&PoolConfig> = pools.into_iter().collect();
        by_age.sort_by(|a, b| (a.created, &a.name).cmp(&(b.created, &b.name)));
        let mut layout = Layout::default();
        let mut claimed: Vec<(IpRange, &str)> = Vec::new();
        for pool in by_age {
            let mut pl = PoolLayout::default();
            let addrs: &[IpRange] = match &pool.addresses {
                Ok(a) => a.ranges(),
                Err(_) => &[],
            };
            let mut owned = addrs.to_vec();
            for (range, other) in &claimed {
                let before = owned.clone();
                owned = subtract(&owned, range);
                if owned != before {
                    for r in &before {
                        if let Some(i) = r.intersect(range) {
                            pl.overlaps
                                .push(format!("{i} (also in older pool {other})"));
                        }
                    }
                }
            }
            for r in &owned {
                claimed.push((*r, pool.name.as_str()));
            }
            for (ip, node) in nodes {
                let o = to_offset(*ip);
                if let Some(hole) = IpRange::from_offsets(Family::of(*ip), o, o)
                    && owned.iter().any(|r| r.contains(*ip))
                {
                    owned = subtract(&owned, &hole);
                    pl.node_conflicts
                        .push(format!("{ip} (InternalIP/ExternalIP of node {node})"));
                }
            }
            for r in &owned {
                layout.index.insert(
                    (r.family(), r.first_offset()),
                    (r.last_offset(), pool.name.clone()),
                );
            }
            pl.owned = owned;
            layout.pools.insert(pool.name.clone(), pl);
        }
        layout
    }

    /// The pool whose owned ranges contain `ip` (before `avoidBuggyIPs`), if any. O(log n).
    pub fn owner_of(&self, ip: IpAddr) -> Option<&str> {
        let family = Family::of(ip);
        let o = to_offset(ip);
        self.index
            .range((family, 0)..=(family, o))
            .next_back()
            .filter(|(_, (last, _))| *last >= o)
            .map(|(_, (_, pool))| pool.as_str())
    }

    /// Usable addresses of `family` owned by `pool` (`avoidBuggyIPs` applied), saturating.
    pub fn usable_count(&self, pool: &str, addresses: &PoolAddresses, family: Family) -> u128 {
        self.pools.get(pool).map_or(0, |pl| {
            pl.owned
                .iter()
                .filter(|r| r.family() == family)
                .fold(0u128, |acc, r| acc.saturating_add(addresses.usable_in(r)))
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn older_pool_owns_the_overlap_whatever_the_names() {
        let newer = PoolConfig::simple("a-newer", 20, &["198.51.100.0/24"], false);
        let older = PoolConfig::simple("z-older", 10, &["198.51.100.128/25"], false);
        let l = Layout::build([&newer, &older], &BTreeMap::new());
        assert_eq!(l.owner_of(ip("198.51.100.200")), Some("z-older"));
        assert_eq!(l.owner_of(ip("198.51.100.1")), Some("a-newer"));
        assert_eq!(
            l.owner_of(ip("198.51.100.255")),
            None,
            "broadcast of the older /25 is owned by nobody"
        );
        let msg = &l.pools["a-newer"].overlaps;
        assert_eq!(msg.len(), 1);
        assert!(msg[0].contains("z-older"), "{msg:?}");
        assert!(l.pools["z-older"].overlaps.is_empty());
    }

    #[test]
    fn same_age_breaks_ties_by_name() {
        let a = PoolConfig::simple("pool-a", 5, &["198.51.100.0/28"], false);
        let b = PoolConfig::simple("pool-b", 5, &["198.51.100.0/28"], false);
        let l = Layout::build([&b, &a], &BTreeMap::new());
        assert_eq!(l.owner_of(ip("198.51.100.1")), Some("pool-a"));
        assert!(l.pools["pool-b"].owned.is_empty());
    }

    #[test]
    fn node_addresses_are_owned_by_nobody() {
        let p = PoolConfig::simple("p", 0, &["198.51.100.0/28"], false);
        let nodes = [(ip("198.51.100.5"), "node-1".to_string())].into();
        let l = Layout::build([&p], &nodes);
        assert_eq!(l.owner_of(ip("198.51.100.5")), None);
        assert_eq!(l.owner_of(ip("198.51.100.4")), Some("p"));
        assert_eq!(l.owner_of(ip("198.51.100.6")), Some("p"));
        assert!(l.pools["p"].node_conflicts[0].contains("node-1"));
        let PoolConfig {
            addresses: Ok(a), ..
        } = &p
        else {
            panic!()
        };
        assert_eq!(l.usable_count("p", a, Family::V4), 13);
    }
}
