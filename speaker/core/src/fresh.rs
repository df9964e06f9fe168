//! Which IPs were newly assigned: the ones the owner probes before announcing (issue #10 item 5,
//! `ferrolb_speaker::l2::probe`). Pure.
//!
//! An IP is *fresh* for [`FRESH_FOR`] after it first got an owner (some node eligible to
//! announce it: the daemon observes the IPs of the plan that have one) while this speaker was
//! watching with its claim gate open — an IP assigned before its pods were ready (ETP Local) or
//! before an L2Advertisement covered its pool is fresh when it first becomes announceable. IPs present in the first complete view (a speaker start, or a restart) are not
//! fresh: they were assigned before, another speaker may be announcing them, and probing them would
//! delay a cold start or, worse, find the previous owner and hold back. Likewise a failover or a
//! handover never makes an IP fresh — only its appearance does — so failover is never delayed by
//! a probe. An IP released and assigned again later is fresh again: in between, another host may
//! have taken the address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long after its appearance an IP is probed by whoever owns it (the owner normally gains it
/// within a plan interval; this covers a claim gate that opens a little later).
pub const FRESH_FOR: Duration = Duration::from_secs(30);

/// The IPs seen in the view and when each appeared (`None`: already there at the first view).
#[derive(Clone, Debug, Default)]
pub struct FreshIps {
    first_seen: BTreeMap<IpAddr, Option<Instant>>,
    started: bool,
}

impl FreshIps {
    /// Record the IPs of the current view at `now`. The first call marks every IP as old.
    pub fn observe(&mut self, now: Instant, ips: impl IntoIterator<Item = IpAddr>) {
        self.observe_assigned(now, ips, &BTreeSet::new());
    }

    /// [`Self::observe`] with the IPs still `assigned` (in a Service status, with or without an
    /// eligible node): an IP that had an owner and lost every eligible node while it stayed
    /// assigned (an `externalTrafficPolicy: Local` Service whose endpoints all went away for a
    /// moment, an exclusion, a Node NotReady) is not fresh when it regains one. It was
    /// announced before and never left its Service, so nothing new could have taken it but a
    /// conflict, which the conflict reports catch; a probe would only add a probe round to its
    /// return (issue #32, found by the simulator: lag + 400 ms). MetalLB never probes. Only an
    /// IP that leaves its Service and is assigned again is fresh again.
    pub fn observe_assigned(
        &mut self,
        now: Instant,
        ips: impl IntoIterator<Item = IpAddr>,
        assigned: &BTreeSet<IpAddr>,
    ) {
        let current: BTreeSet<IpAddr> = ips.into_iter().collect();
        self.first_seen.retain(|ip, at| {
            if current.contains(ip) {
                true
            } else if assigned.contains(ip) {
                *at = None;
                true
            } else {
                false
            }
        });
        let appeared = self.started.then_some(now);
        for ip in current {
            self.first_seen.entry(ip).or_insert(appeared);
        }
        self.started = true;
    }

    /// After the claim gate was closed: the next [`FreshIps::observe`] marks the IPs it has not
    /// seen as old (what got an owner meanwhile was announced by others), as at a start; IPs
    /// still fresh stay fresh (a new IP whose probe the closure interrupted is probed again).
    pub fn restart(&mut self) {
        self.first_seen.retain(|_, at| at.is_some());
        self.started = false;
    }

    /// `ip` is handed over from a live holder (issue #32 G5.8): it has been answered in the
    /// cluster, so it is fresh no more — a probe would only meet the holder's last answers
    /// and hold the new owner back for a probe round. Until it disappears from the view.
    pub fn handed_over(&mut self, ip: &IpAddr) {
        if let Some(at) = self.first_seen.get_mut(ip) {
            *at = None;
        }
    }

    /// The IPs that appeared less than [`FRESH_FOR`] before `now`.
    pub fn fresh(&self, now: Instant) -> BTreeSet<IpAddr> {
        self.first_seen
            .iter()
            .filter(|(_, at)| at.is_some_and(|at| now.saturating_duration_since(at) < FRESH_FOR))
            .map(|(ip, _)| *ip)
            .collect()
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
    fn only_ips_that_appear_later_are_fresh_and_only_for_a_while() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, [ip("198.51.100.1")]);
        assert!(f.fresh(t0).is_empty(), "present at start: not fresh");
        let t1 = t0 + Duration::from_secs(1);
        f.observe(t1, [ip("198.51.100.1"), ip("2001:db8::2")]);
        assert_eq!(f.fresh(t1), BTreeSet::from([ip("2001:db8::2")]));
        // Seen again later: still the first appearance that counts.
        f.observe(
            t1 + Duration::from_secs(20),
            [ip("198.51.100.1"), ip("2001:db8::2")],
        );
        assert_eq!(f.fresh(t1 + FRESH_FOR - Duration::from_millis(1)).len(), 1);
        assert!(f.fresh(t1 + FRESH_FOR).is_empty());
    }

    #[test]
    fn an_ip_released_and_assigned_again_is_fresh_again() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, [ip("198.51.100.1")]);
        f.observe(t0 + Duration::from_secs(1), []);
        let t2 = t0 + Duration::from_secs(2);
        f.observe(t2, [ip("198.51.100.1")]);
        assert_eq!(f.fresh(t2), BTreeSet::from([ip("198.51.100.1")]));
    }

    /// Issue #32: an IP that lost its owner while it stayed assigned is not fresh when it
    /// regains one, even within [`FRESH_FOR`] of its first appearance; one that left its Service
    /// is.
    #[test]
    fn an_ip_that_regains_an_owner_while_assigned_is_not_fresh() {
        let t0 = Instant::now();
        let (a, b) = (ip("198.51.100.1"), ip("198.51.100.2"));
        let mut f = FreshIps::default();
        f.observe(t0, []);
        let t1 = t0 + Duration::from_secs(1);
        f.observe_assigned(t1, [a, b], &[a, b].into());
        assert_eq!(f.fresh(t1), BTreeSet::from([a, b]));
        let t2 = t1 + Duration::from_secs(1);
        f.observe_assigned(t2, [], &[a].into());
        let t3 = t2 + Duration::from_secs(1);
        f.observe_assigned(t3, [a, b], &[a, b].into());
        assert_eq!(f.fresh(t3), BTreeSet::from([b]), "only the one that left");
    }

    /// Reviewer finding (second round, F1): a claim-gate closure right after a new IP appeared
    /// must not make it old — its probe was interrupted and must run again.
    #[test]
    fn a_restart_keeps_ips_that_are_still_fresh() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, [ip("198.51.100.1")]);
        f.observe(t0, [ip("198.51.100.1"), ip("198.51.100.2")]);
        f.restart();
        let t1 = t0 + Duration::from_secs(2);
        f.observe(
            t1,
            [ip("198.51.100.1"), ip("198.51.100.2"), ip("198.51.100.3")],
        );
        assert_eq!(f.fresh(t1), BTreeSet::from([ip("198.51.100.2")]));
    }

    #[test]
    fn an_empty_first_view_still_counts_as_the_start() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, []);
        f.observe(t0, [ip("198.51.100.9")]);
        assert_eq!(f.fresh(t0).len(), 1);
    }
}
