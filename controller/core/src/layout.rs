//! Who owns which address: the shared rule ([`ferrolb_crds::ownership`]: R9, the older pool
//! keeps overlapping addresses — creation time, then name; R10, Node addresses are owned by
//! nobody), fed with the allocator's parsed pools. The speaker computes the same [`Layout`] from
//! the same objects, so both agree on the pool of every address.

pub use ferrolb_crds::ownership::{Layout, PoolClaim, PoolLayout};

use super::pool::PoolConfig;

impl PoolConfig {
    /// This pool as ownership sees it (a pool whose addresses do not parse claims nothing).
    pub fn claim(&self) -> PoolClaim<'_> {
        PoolClaim {
            name: &self.name,
            created: self.created,
            ranges: match &self.addresses {
                Ok(a) => a.ranges(),
                Err(_) => &[],
            },
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::collections::BTreeMap;
    use std::net::IpAddr;

    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn pool_configs_feed_the_shared_rule() {
        let newer = PoolConfig::simple("a-newer", 20, &["198.51.100.0/24"], false);
        let older = PoolConfig::simple("z-older", 10, &["198.51.100.128/25"], false);
        let bad = PoolConfig::simple("bad", 0, &["198.51.100.30-198.51.100.20"], false);
        let l = Layout::build(
            [&newer, &older, &bad].map(PoolConfig::claim),
            &BTreeMap::new(),
        );
        assert_eq!(l.owner_of(ip("198.51.100.200")), Some("z-older"));
        assert_eq!(l.owner_of(ip("198.51.100.1")), Some("a-newer"));
        assert!(l.pools["bad"].owned.is_empty());
    }
}
