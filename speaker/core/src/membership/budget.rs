//! Cheap admission of incoming datagrams, and the per-sender budget of authenticated ones (F5:
//! the membership port is hostile ground). Pure: time comes in as an [`Instant`] argument, never
//! read.
//!
//! 1. **Source admission** ([`SourceFilter`]), before any cryptography: the sender's IP must be
//!    the IP of a configured peer (the Node InternalIPs given to `set_peers`) or of a current
//!    member. Compared by IP only (the port is not trusted either way), IPv4-mapped IPv6
//!    addresses (`::ffff:a.b.c.d`, as a socket bound to `[::]` reports IPv4 senders) equal to
//!    their IPv4 form. While no peer is configured every source is admitted, so a member whose
//!    peer list has not arrived yet can still be joined. It keeps no state a datagram can change:
//!    a spoofed source passes it and costs one tag check, nothing more.
//! 2. **Sender budget** ([`OpenBudget`]), *after* authentication and the replay check: token
//!    buckets limiting how many fresh, authentic datagrams per second each sender may hand to
//!    SWIM. Every current member's advertised address (IP *and* port, as the sealed header
//!    names it) has its own bucket, an equal share of `member_rate`; every other authenticated
//!    sender (a joining peer) shares one bucket of `other_rate`. Before this order (a budget
//!    spent before the tag was checked), a flood spoofing a member's exact address spent that
//!    member's bucket and its real datagrams were dropped with the forged ones: one host without
//!    the key made every speaker see a minority (DESIGN S15, issue #32 G4). Now only a key holder
//!    can spend a budget, and only its own.
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

/// The canonical form of an address for comparisons: IPv4-mapped IPv6 (`::ffff:a.b.c.d`)
/// becomes IPv4, everything else is unchanged (RFC 4291 §2.5.5.2).
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    ip.to_canonical()
}

/// [`canonical_ip`] applied to a socket address (the port is kept; flow info and scope id of
/// a mapped address are dropped).
pub fn canonical_addr(addr: SocketAddr) -> SocketAddr {
    SocketAddr::new(canonical_ip(addr.ip()), addr.port())
}

/// Which source IPs may send us datagrams at all (check 1 above).
#[derive(Debug, Clone, Default)]
pub struct SourceFilter {
    enabled: bool,
    peer_ips: BTreeSet<IpAddr>,
    member_ips: BTreeSet<IpAddr>,
}

impl SourceFilter {
    /// A filter; `enabled = false` admits every source (config `admit_only_peers`).
    pub fn new(enabled: bool) -> Self {
        Self {
            enabled,
            ..Self::default()
        }
    }

    /// Replaces the configured peer addresses (only their IPs matter).
    pub fn set_peers<'a>(&mut self, peers: impl IntoIterator<Item = &'a SocketAddr>) {
        self.peer_ips = peers.into_iter().map(|p| canonical_ip(p.ip())).collect();
    }

    /// Replaces the addresses of the current members (only their IPs matter).
    pub fn set_members(&mut self, members: impl IntoIterator<Item = SocketAddr>) {
        self.member_ips = members.into_iter().map(|m| canonical_ip(m.ip())).collect();
    }

    /// Whether a datagram from `from` may go on to authentication: always when the filter is
    /// disabled or no peer is configured, otherwise when its IP is a peer's or a member's.
    pub fn admits(&self, from: SocketAddr) -> bool {
        if !self.enabled || self.peer_ips.is_empty() {
            return true;
        }
        let ip = canonical_ip(from.ip());
        self.peer_ips.contains(&ip) || self.member_ips.contains(&ip)
    }
}

/// A token bucket: `rate` tokens per second, at most `burst`, starting full. Time only moves
/// forward (an earlier `now` than the last one refills nothing).
#[derive(Debug, Clone)]
pub struct TokenBucket {
    tokens: f64,
    last: Option<Instant>,
}

impl TokenBucket {
    /// A full bucket of `burst` tokens.
    pub fn full(burst: f64) -> Self {
        Self {
            tokens: burst.max(0.0),
            last: None,
        }
    }

    /// Refills for the time since the last call, then takes one token if there is one.
    /// `rate` is in tokens per second; `burst` caps the content.
    pub fn try_take(&mut self, now: Instant, rate: f64, burst: f64) -> bool {
        if let Some(last) = self.last {
            let elapsed = now.saturating_duration_since(last).as_secs_f64();
            self.tokens = (self.tokens + elapsed * rate.max(0.0)).min(burst);
        }
        if self.last.is_none_or(|last| now > last) {
            self.last = Some(now);
        }
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Smallest burst of any bucket, so that a short burst (a leave, an announce reply) passes
/// even when a member's share of the rate is small.
const MIN_BURST: f64 = 16.0;

/// The sender budget (check 2 above).
///
/// `member_rate` (opens per second) is shared equally among the current members, each through
/// the bucket of its own advertised address; `other_rate` is for every other source together.
/// Each bucket holds at most one second of its rate (at least [`MIN_BURST`] tokens). Total AEAD
/// work is therefore bounded by `member_rate + other_rate` opens per second, plus the bursts.
#[derive(Debug, Clone)]
pub struct OpenBudget {
    member_rate: f64,
    other_rate: f64,
    members: BTreeMap<SocketAddr, TokenBucket>,
    other: TokenBucket,
}

impl OpenBudget {
    /// A budget with full buckets. Rates are opens per second.
    pub fn new(member_rate: u32, other_rate: u32) -> Self {
        let other_rate = f64::from(other_rate);
        Self {
            member_rate: f64::from(member_rate),
            other_rate,
            members: BTreeMap::new(),
            other: TokenBucket::full(other_rate.max(MIN_BURST)),
        }
    }

    /// Replaces the set of current member addresses: new members get a full bucket, departed
    /// members lose theirs.
    pub fn set_members(&mut self, members: impl IntoIterator<Item = SocketAddr>) {
        let members: BTreeSet<SocketAddr> = members.into_iter().map(canonical_addr).collect();
        self.members.retain(|addr, _| members.contains(addr));
        let burst = self.member_burst_for(members.len());
        for addr in members {
            self.members
                .entry(addr)
                .or_insert_with(|| TokenBucket::full(burst));
        }
    }

    /// Whether `from` is the advertised address of a current member (IP and port).
    pub fn is_member(&self, from: SocketAddr) -> bool {
        self.members.contains_key(&canonical_addr(from))
    }

    /// Takes one token from the bucket of `from` (an *authenticated* sender's advertised
    /// address, never an unverified UDP source); `false` means over budget (drop it).
    pub fn try_open(&mut self, from: SocketAddr, now: Instant) -> bool {
        let n = self.members.len();
        let share = self.member_rate / n.max(1) as f64;
        let burst = self.member_burst_for(n);
        match self.members.get_mut(&canonical_addr(from)) {
            Some(bucket) => bucket.try_take(now, share, burst),
            None => self
                .other
                .try_take(now, self.other_rate, self.other_rate.max(MIN_BURST)),
        }
    }

    fn member_burst_for(&self, n: usize) -> f64 {
        (self.member_rate / n.max(1) as f64).max(MIN_BURST)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddrV6};
    use std::time::Duration;

    fn v4(last: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, last], port))
    }

    fn mapped(last: u8, port: u16) -> SocketAddr {
        SocketAddr::V6(SocketAddrV6::new(
            Ipv4Addr::new(192, 0, 2, last).to_ipv6_mapped(),
            port,
            0,
            0,
        ))
    }

    #[test]
    fn empty_peer_set_admits_every_source() {
        let filter = SourceFilter::new(true);
        assert!(filter.admits(v4(99, 1234)));
        assert!(filter.admits(SocketAddr::from((Ipv6Addr::LOCALHOST, 1))));
    }

    #[test]
    fn disabled_filter_admits_every_source() {
        let mut filter = SourceFilter::new(false);
        filter.set_peers(&[v4(1, 7947)]);
        assert!(filter.admits(v4(99, 7947)));
    }

    #[test]
    fn peers_and_members_are_admitted_by_ip_only() {
        let mut filter = SourceFilter::new(true);
        filter.set_peers(&[v4(1, 7947), v4(2, 7947)]);
        assert!(filter.admits(v4(1, 7947)));
        assert!(filter.admits(v4(2, 40_000)), "another port of a peer IP");
        assert!(!filter.admits(v4(3, 7947)), "not a peer");
        filter.set_members([v4(3, 7947)]);
        assert!(
            filter.admits(v4(3, 7947)),
            "a member not (yet) among the peers"
        );
        filter.set_members([]);
        assert!(!filter.admits(v4(3, 7947)));
    }

    #[test]
    fn mapped_ipv6_sources_equal_their_ipv4_peer() {
        let mut filter = SourceFilter::new(true);
        filter.set_peers(&[v4(1, 7947)]);
        assert!(filter.admits(mapped(1, 7947)));
        assert!(!filter.admits(mapped(9, 7947)));
        // And the other way round: a peer configured as a mapped address.
        filter.set_peers(&[mapped(5, 7947)]);
        assert!(filter.admits(v4(5, 7947)));
        // Unrelated IPv6 sources are not confused with IPv4 ones.
        assert!(!filter.admits(SocketAddr::from((Ipv6Addr::LOCALHOST, 7947))));
    }

    #[test]
    fn token_bucket_refills_at_its_rate_and_caps_at_burst() {
        let t0 = Instant::now();
        let mut b = TokenBucket::full(3.0);
        assert!((0..3).all(|_| b.try_take(t0, 10.0, 3.0)));
        assert!(!b.try_take(t0, 10.0, 3.0), "empty");
        // 100 ms at 10/s: exactly one more.
        let t1 = t0 + Duration::from_millis(100);
        assert!(b.try_take(t1, 10.0, 3.0));
        assert!(!b.try_take(t1, 10.0, 3.0));
        // A long pause refills only up to the burst.
        let t2 = t1 + Duration::from_secs(60);
        assert_eq!((0..10).filter(|_| b.try_take(t2, 10.0, 3.0)).count(), 3);
        // Time going backwards refills nothing and does not move `last` back.
        assert!(!b.try_take(t0, 10.0, 3.0));
        assert!(!b.try_take(t2, 10.0, 3.0));
    }

    #[test]
    fn a_flood_from_other_sources_never_spends_member_budget() {
        let t0 = Instant::now();
        let mut budget = OpenBudget::new(100, 20);
        let (a, b) = (v4(1, 7947), v4(2, 7947));
        budget.set_members([a, b]);
        // One second of flood from a non-member (here a member IP from another port): only the
        // "other" bucket's 20 tokens are spent.
        let spoof = v4(1, 5555);
        assert!(!budget.is_member(spoof));
        let passed = (0..10_000)
            .filter(|i| budget.try_open(spoof, t0 + Duration::from_micros(*i)))
            .count();
        assert!((20..=21).contains(&passed), "{passed}");
        // Members still have their full share (50 each).
        assert_eq!((0..50).filter(|_| budget.try_open(a, t0)).count(), 50);
        assert!(!budget.try_open(a, t0));
        assert_eq!((0..50).filter(|_| budget.try_open(b, t0)).count(), 50);
    }

    #[test]
    fn a_flood_spoofing_one_member_spends_only_that_members_share() {
        let t0 = Instant::now();
        let mut budget = OpenBudget::new(2000, 200);
        let members: Vec<SocketAddr> = (1..=4).map(|i| v4(i, 7947)).collect();
        budget.set_members(members.iter().copied());
        let victim = members[0];
        // 10 s of flood at 1 datagram/µs from the victim's exact address.
        let mut passed = 0u64;
        for ms in 0..10_000u64 {
            let now = t0 + Duration::from_millis(ms);
            for _ in 0..1000 {
                passed += u64::from(budget.try_open(mapped(1, 7947), now));
            }
            // The other members' normal traffic, ~100 datagrams/s each, all pass.
            if ms % 10 == 0 {
                for m in &members[1..] {
                    assert!(budget.try_open(*m, now), "{m} at {ms} ms");
                }
            }
        }
        // Its share is 500/s plus the initial burst of one second.
        assert!((5000..=5600).contains(&passed), "{passed}");
        assert!(budget.is_member(victim));
    }

    #[test]
    fn departed_members_lose_their_bucket() {
        let t0 = Instant::now();
        let mut budget = OpenBudget::new(100, 0);
        let a = v4(1, 7947);
        budget.set_members([a]);
        assert!(budget.try_open(a, t0));
        budget.set_members([]);
        assert!(!budget.is_member(a));
        // Now in the "other" bucket, which has a rate of 0 but the minimum burst.
        let passed = (0..100).filter(|_| budget.try_open(a, t0)).count();
        assert_eq!(passed as f64, MIN_BURST);
    }
}
