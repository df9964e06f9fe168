//! Who owns which address — the one implementation of R9 and R10, used by the controller (to hand
//! addresses out) and by the speaker (to decide which pool, hence which L2Advertisements, an
//! announced address belongs to). Pure: no `kube`, no `tokio`.
//!
//! - **R9, overlapping pools:** an address inside several pools belongs to the *older* pool
//!   (`metadata.creationTimestamp`, then name; a pool without a timestamp counts as created at the
//!   epoch): only the older pool hands it out, so nothing is allocated twice, and the newer pool
//!   reports `Overlapping`. A Service whose `address-pool` annotation names a pool that contains
//!   its address is served from *that* pool ([`Layout::pool_for`]): the controller keeps or grants
//!   such an address (a requested or shared one), and the speaker announces it under that pool's
//!   L2Advertisements. Both call [`Layout::pool_for`], so they cannot disagree.
//! - **R10, Node addresses:** an InternalIP/ExternalIP of any Node ([`crate::node`]) is owned by no
//!   pool: never handed out, never announced. The pool reports `NodeAddressConflict`.
//!
//! The result is a set of disjoint owned ranges, each tagged with its pool, and per pool the
//! messages of its `Overlapping` and `NodeAddressConflict` conditions. Cost is
//! O((ranges + node addresses) · log) and independent of pool sizes.

use std::collections::BTreeMap;
use std::net::IpAddr;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::IPAddressPool;
use crate::addresses::{Family, IpRange, PoolAddresses, to_offset};

/// `metadata.creationTimestamp` in seconds since the Unix epoch, the age R9 compares; 0 when
/// absent (only objects that never went through the API server lack one).
pub fn creation_seconds(meta: &ObjectMeta) -> i64 {
    meta.creation_timestamp
        .as_ref()
        .map_or(0, |t| t.0.as_second())
}

/// One pool as ownership sees it: its name, age and usable ranges (empty when its addresses do not
/// parse: such a pool owns nothing).
#[derive(Debug, Clone, Copy)]
pub struct PoolClaim<'a> {
    /// `metadata.name`.
    pub name: &'a str,
    /// [`creation_seconds`].
    pub created: i64,
    /// Usable ranges ([`PoolAddresses::ranges`]), before `avoidBuggyIPs`.
    pub ranges: &'a [IpRange],
}

/// The owned ranges of one pool and what was taken away from it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PoolLayout {
    /// Ranges this pool hands out from (before `avoidBuggyIPs`), ascending, disjoint.
    pub owned: Vec<IpRange>,
    /// `"198.51.100.0-198.51.100.15 (also in older pool pool-a)"`, one per overlapped pool.
    pub overlaps: Vec<String>,
    /// `"198.51.100.5 (InternalIP/ExternalIP of node node-1)"`, one per Node address inside.
    pub node_conflicts: Vec<String>,
    /// Every range of the pool, overlaps included, minus Node addresses: what a Service that
    /// names this pool may hold ([`Layout::pool_for`]).
    pub covered: Vec<IpRange>,
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
    /// Computes ownership for `pools` given Node addresses (`address → node name`, see
    /// [`crate::node::address_map`]).
    pub fn build<'a>(
        pools: impl IntoIterator<Item = PoolClaim<'a>>,
        nodes: &BTreeMap<IpAddr, String>,
    ) -> Layout {
        let mut by_age: Vec<PoolClaim<'a>> = pools.into_iter().collect();
        by_age.sort_by(|a, b| (a.created, a.name).cmp(&(b.created, b.name)));
        let mut layout = Layout::default();
        let mut claimed: Vec<(IpRange, &str)> = Vec::new();
        for pool in by_age {
            let mut pl = PoolLayout::default();
            let mut owned = pool.ranges.to_vec();
            let mut covered = pool.ranges.to_vec();
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
                claimed.push((*r, pool.name));
            }
            for (ip, node) in nodes {
                let o = to_offset(*ip);
                let Some(hole) = IpRange::from_offsets(Family::of(*ip), o, o) else {
                    continue;
                };
                if covered.iter().any(|r| r.contains(*ip)) {
                    covered = subtract(&covered, &hole);
                }
                if owned.iter().any(|r| r.contains(*ip)) {
                    owned = subtract(&owned, &hole);
                    pl.node_conflicts
                        .push(format!("{ip} (InternalIP/ExternalIP of node {node})"));
                }
            }
            pl.covered = covered;
            for r in &owned {
                layout.index.insert(
                    (r.family(), r.first_offset()),
                    (r.last_offset(), pool.name.to_owned()),
                );
            }
            pl.owned = owned;
            layout.pools.insert(pool.name.to_owned(), pl);
        }
        layout
    }

    /// Ownership among `IPAddressPool` objects as read from the API: each pool's addresses
    /// ([`IPAddressPool::address_entries`]: an automatic pool's come from its status) are
    /// parsed (a pool whose addresses do not parse owns nothing) and aged by
    /// [`creation_seconds`]; pools without a name are ignored.
    pub fn of_pools(pools: &[&IPAddressPool], nodes: &BTreeMap<IpAddr, String>) -> Layout {
        let parsed: Vec<(&str, i64, Vec<IpRange>)> = pools
            .iter()
            .filter_map(|p| {
                let ranges = PoolAddresses::parse(&p.address_entries(), p.spec.avoid_buggy_ips)
                    .map(|a| a.ranges().to_vec())
                    .unwrap_or_default();
                Some((
                    p.metadata.name.as_deref()?,
                    creation_seconds(&p.metadata),
                    ranges,
                ))
            })
            .collect();
        Layout::build(
            parsed.iter().map(|(name, created, ranges)| PoolClaim {
                name,
                created: *created,
                ranges,
            }),
            nodes,
        )
    }

    /// The pool whose owned ranges contain `ip` (before `avoidBuggyIPs`), if any: `None` for an
    /// address in no pool and for a Node address. O(log n).
    pub fn owner_of(&self, ip: IpAddr) -> Option<&str> {
        let family = Family::of(ip);
        let o = to_offset(ip);
        self.index
            .range((family, 0)..=(family, o))
            .next_back()
            .filter(|(_, (last, _))| *last >= o)
            .map(|(_, (_, pool))| pool.as_str())
    }

    /// The pool a Service that names `named` (its `address-pool` annotation, if any) is served
    /// from at `ip`: the named pool when its addresses contain `ip` (overlap with an older pool
    /// included, Node addresses excluded), else the owner ([`Layout::owner_of`]). The
    /// controller keeps such an address for the Service (R7) and the speaker announces it under
    /// that pool's L2Advertisements, so two Services sharing an address may be served from two
    /// pools (case C-10). MetalLB likewise records the pool a Service was given and announces
    /// under it. O(log n) plus the named pool's range count.
    pub fn pool_for<'a>(&'a self, named: Option<&'a str>, ip: IpAddr) -> Option<&'a str> {
        named
            .filter(|n| {
                self.pools
                    .get(*n)
                    .is_some_and(|pl| pl.covered.iter().any(|r| r.contains(ip)))
            })
            .or_else(|| self.owner_of(ip))
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
    use crate::IPAddressPoolSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn addrs(entries: &[&str]) -> PoolAddresses {
        PoolAddresses::parse(entries, false).unwrap()
    }

    fn claim<'a>(name: &'a str, created: i64, a: &'a PoolAddresses) -> PoolClaim<'a> {
        PoolClaim {
            name,
            created,
            ranges: a.ranges(),
        }
    }

    #[test]
    fn older_pool_owns_the_overlap_whatever_the_names() {
        let (n, o) = (addrs(&["198.51.100.0/24"]), addrs(&["198.51.100.128/25"]));
        let l = Layout::build(
            [claim("a-newer", 20, &n), claim("z-older", 10, &o)],
            &BTreeMap::new(),
        );
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
        let a = addrs(&["198.51.100.0/28"]);
        let l = Layout::build(
            [claim("pool-b", 5, &a), claim("pool-a", 5, &a)],
            &BTreeMap::new(),
        );
        assert_eq!(l.owner_of(ip("198.51.100.1")), Some("pool-a"));
        assert!(l.pools["pool-b"].owned.is_empty());
    }

    #[test]
    fn node_addresses_are_owned_by_nobody() {
        let a = addrs(&["198.51.100.0/28"]);
        let nodes = [(ip("198.51.100.5"), "node-1".to_string())].into();
        let l = Layout::build([claim("p", 0, &a)], &nodes);
        assert_eq!(l.owner_of(ip("198.51.100.5")), None);
        assert_eq!(l.owner_of(ip("198.51.100.4")), Some("p"));
        assert_eq!(l.owner_of(ip("198.51.100.6")), Some("p"));
        assert!(l.pools["p"].node_conflicts[0].contains("node-1"));
        assert_eq!(l.usable_count("p", &a, Family::V4), 13);
    }

    fn pool(name: &str, entries: &[&str], created: Option<i64>) -> IPAddressPool {
        let mut p = IPAddressPool::new(
            name,
            IPAddressPoolSpec {
                addresses: entries.iter().map(|a| (*a).into()).collect(),
                auto_assign: true,
                avoid_buggy_ips: false,
                allow_sharing_across_namespaces: false,
                service_allocation: None,
                auto_addresses: None,
            },
        );
        p.metadata.creation_timestamp =
            created.map(|s| Time(k8s_openapi::jiff::Timestamp::from_second(s).unwrap()));
        p
    }

    #[test]
    fn pools_from_the_api_are_aged_by_creation_then_name() {
        let newer = pool("a-newer", &["198.51.100.0/24"], Some(200));
        let older = pool("z-older", &["198.51.100.0/28"], Some(100));
        let untimed = pool("untimed", &["198.51.100.16/28"], None);
        let bad = pool("bad", &["198.51.100.30-198.51.100.20"], Some(1));
        let l = Layout::of_pools(&[&newer, &older, &untimed, &bad], &BTreeMap::new());
        assert_eq!(l.owner_of(ip("198.51.100.5")), Some("z-older"));
        assert_eq!(
            l.owner_of(ip("198.51.100.20")),
            Some("untimed"),
            "no timestamp counts as the epoch: older than both"
        );
        assert_eq!(l.owner_of(ip("198.51.100.100")), Some("a-newer"));
        assert!(
            l.pools["bad"].owned.is_empty(),
            "an invalid pool owns nothing"
        );
    }

    #[test]
    fn an_automatic_pool_owns_what_its_status_says_and_ignores_its_spec() {
        let mut auto = pool("laptop", &[], Some(1));
        auto.spec.auto_addresses = Some(crate::v1beta1::AutoAddresses { size: 4 });
        let l = Layout::of_pools(&[&auto], &BTreeMap::new());
        assert!(
            l.pools["laptop"].owned.is_empty(),
            "nothing before the controller resolves it"
        );
        auto.status = Some(crate::IPAddressPoolStatus {
            auto_addresses: Some(crate::v1beta1::AutoAddressesStatus {
                prefix: Some("192.168.49.0/24".into()),
                // Probed by the speakers, not announced: only `addresses` are.
                candidates: vec!["192.168.49.250-192.168.49.254".into()],
                addresses: vec![
                    "192.168.49.251-192.168.49.253".into(),
                    "192.168.49.240/32".into(),
                ],
                ..Default::default()
            }),
            ..Default::default()
        });
        let l = Layout::of_pools(&[&auto], &BTreeMap::new());
        assert_eq!(l.owner_of(ip("192.168.49.252")), Some("laptop"));
        assert_eq!(l.owner_of(ip("192.168.49.240")), Some("laptop"));
        assert_eq!(l.owner_of(ip("192.168.49.254")), None);
        // The speakers probe the candidates; a status without them (an older controller): the
        // addresses.
        assert_eq!(auto.probe_entries(), vec!["192.168.49.250-192.168.49.254"]);
        let mut older = auto.clone();
        if let Some(a) = older
            .status
            .as_mut()
            .and_then(|s| s.auto_addresses.as_mut())
        {
            a.candidates.clear();
        }
        assert_eq!(older.probe_entries(), older.address_entries());
        // A pool with spec.addresses ignores a stray status.autoAddresses.
        let mut plain = pool("plain", &["198.51.100.0/30"], Some(1));
        plain.status = auto.status.clone();
        let l = Layout::of_pools(&[&plain], &BTreeMap::new());
        assert_eq!(l.owner_of(ip("192.168.49.252")), None);
        assert_eq!(l.owner_of(ip("198.51.100.1")), Some("plain"));
        assert!(plain.probe_entries().is_empty());
    }
}
