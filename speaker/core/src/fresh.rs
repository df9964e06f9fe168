//! Which IPs were newly assigned: the ones the owner probes before announcing (issue #10 item 5,
//! `ferrolb_speaker::l2::probe`). Pure.
//!
//! An IP is *fresh* for [`FRESH_FOR`] after it first got an owner (some node eligible to
//! announce it) since it appeared in the view while this speaker was watching with its claim
//! gate open — an IP assigned before its pods were ready (ETP Local) or before an
//! L2Advertisement covered its pool is fresh when it first becomes announceable. IPs present
//! in the first complete view with an owner (a speaker start, or a restart) are not fresh: they
//! were assigned before, another speaker may be announcing them, and probing them would delay a
//! cold start or, worse, find the previous owner and hold back. Likewise a failover or a
//! handover never makes an IP fresh — only its assignment does — so failover is never delayed
//! by a probe.
//!
//! **Once announceable, never fresh again while assigned** (issue #32, API seed 2023 of the
//! simulator): an IP that loses every eligible node (the last ETP Local endpoint goes, the
//! last eligible node is excluded, cordoned or down) and regains one is not probed again. It
//! has been in service, a probe would only add its round (~400 ms) to every rescheduled pod
//! of an ETP Local Service, and a foreign host that took the address meanwhile is still found
//! by the conflict policy (`IPConflict`). MetalLB never probes at all. An IP that leaves the
//! view (released) and is assigned again later is fresh again: in between, another host may
//! have taken the address.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

/// How long after its appearance an IP is probed by whoever owns it (the owner normally gains it
/// within a plan interval; this covers a claim gate that opens a little later).
pub const FRESH_FOR: Duration = Duration::from_secs(30);

/// Where one IP of the view stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// Not to be probed while it stays in the view.
    Old,
    /// Appeared while watching, no owner yet: fresh once it gets one.
    Waiting,
    /// Got its first owner at this instant.
    Fresh(Instant),
}

/// The IPs seen in the view and where each stands ([module docs](self)).
#[derive(Clone, Debug, Default)]
pub struct FreshIps {
    seen: BTreeMap<IpAddr, Seen>,
    started: bool,
}

impl FreshIps {
    /// Record the IPs of the current view at `now`, each with whether it has an owner (a node
    /// eligible to announce it). The first call marks every IP with an owner as old.
    pub fn observe(&mut self, now: Instant, ips: impl IntoIterator<Item = (IpAddr, bool)>) {
        let current: BTreeMap<IpAddr, bool> = ips.into_iter().collect();
        self.seen.retain(|ip, _| current.contains_key(ip));
        for (ip, owned) in current {
            let seen = self.seen.entry(ip).or_insert(if self.started || !owned {
                Seen::Waiting
            } else {
                Seen::Old
            });
            *seen = match (*seen, owned) {
                (Seen::Waiting, true) => Seen::Fresh(now),
                (Seen::Fresh(_), false) => Seen::Old,
                (s, _) => s,
            };
        }
        self.started = true;
    }

    /// After the claim gate was closed: the next [`FreshIps::observe`] marks the IPs it has not
    /// seen with an owner, and those that got one meanwhile, as old (what got an owner meanwhile
    /// was announced by others), as at a start; IPs still fresh stay fresh (a new IP whose probe
    /// the closure interrupted is probed again), old ones stay old.
    pub fn restart(&mut self) {
        self.seen.retain(|_, s| *s != Seen::Waiting);
        self.started = false;
    }

    /// `ip` is handed over from a live holder (issue #32 G5.8): it has been answered in the
    /// cluster, so it is fresh no more — a probe would only meet the holder's last answers
    /// and hold the new owner back for a probe round. Until it disappears from the view.
    pub fn handed_over(&mut self, ip: &IpAddr) {
        if let Some(s) = self.seen.get_mut(ip) {
            *s = Seen::Old;
        }
    }

    /// The IPs that first got an owner less than [`FRESH_FOR`] before `now`.
    pub fn fresh(&self, now: Instant) -> BTreeSet<IpAddr> {
        self.seen
            .iter()
            .filter(|(_, s)| {
                matches!(s, Seen::Fresh(at) if now.saturating_duration_since(*at) < FRESH_FOR)
            })
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

    /// The view's IPs, each with an owner.
    fn owned<const N: usize>(ips: [IpAddr; N]) -> impl Iterator<Item = (IpAddr, bool)> {
        ips.into_iter().map(|ip| (ip, true))
    }

    #[test]
    fn only_ips_that_appear_later_are_fresh_and_only_for_a_while() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, owned([ip("198.51.100.1")]));
        assert!(f.fresh(t0).is_empty(), "present at start: not fresh");
        let t1 = t0 + Duration::from_secs(1);
        f.observe(t1, owned([ip("198.51.100.1"), ip("2001:db8::2")]));
        assert_eq!(f.fresh(t1), BTreeSet::from([ip("2001:db8::2")]));
        // Seen again later: still the first appearance that counts.
        f.observe(
            t1 + Duration::from_secs(20),
            owned([ip("198.51.100.1"), ip("2001:db8::2")]),
        );
        assert_eq!(f.fresh(t1 + FRESH_FOR - Duration::from_millis(1)).len(), 1);
        assert!(f.fresh(t1 + FRESH_FOR).is_empty());
    }

    #[test]
    fn an_ip_released_and_assigned_again_is_fresh_again() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, owned([ip("198.51.100.1")]));
        f.observe(t0 + Duration::from_secs(1), owned([]));
        let t2 = t0 + Duration::from_secs(2);
        f.observe(t2, owned([ip("198.51.100.1")]));
        assert_eq!(f.fresh(t2), BTreeSet::from([ip("198.51.100.1")]));
    }

    /// Reviewer finding (second round, F1): a claim-gate closure right after a new IP appeared
    /// must not make it old — its probe was interrupted and must run again.
    #[test]
    fn a_restart_keeps_ips_that_are_still_fresh() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, owned([ip("198.51.100.1")]));
        f.observe(t0, owned([ip("198.51.100.1"), ip("198.51.100.2")]));
        f.restart();
        let t1 = t0 + Duration::from_secs(2);
        f.observe(
            t1,
            owned([ip("198.51.100.1"), ip("198.51.100.2"), ip("198.51.100.3")]),
        );
        assert_eq!(f.fresh(t1), BTreeSet::from([ip("198.51.100.2")]));
    }

    #[test]
    fn an_empty_first_view_still_counts_as_the_start() {
        let t0 = Instant::now();
        let mut f = FreshIps::default();
        f.observe(t0, owned([]));
        f.observe(t0, owned([ip("198.51.100.9")]));
        assert_eq!(f.fresh(t0).len(), 1);
    }

    /// Issue #32 (API seed 2023): an IP whose last eligible node went (its ETP Local endpoint
    /// moved, an exclusion) and came back is not probed again — neither while still within
    /// [`FRESH_FOR`] of its first owner nor later; a failover never makes an IP fresh.
    #[test]
    fn an_ip_that_regains_an_owner_is_not_fresh_again() {
        let t0 = Instant::now();
        let a = ip("198.51.100.1");
        let mut f = FreshIps::default();
        f.observe(t0, []);
        // Assigned while no node is eligible (ETP Local, no pod yet): fresh at its first owner.
        f.observe(t0, [(a, false)]);
        let t1 = t0 + Duration::from_secs(1);
        f.observe(t1, [(a, true)]);
        assert_eq!(f.fresh(t1), BTreeSet::from([a]));
        // Its pod goes, and comes back two seconds later: not probed again.
        for (dt, owner) in [(2, false), (4, true), (40, false), (42, true)] {
            let t = t1 + Duration::from_secs(dt);
            f.observe(t, [(a, owner)]);
            assert!(f.fresh(t).is_empty(), "at {dt} s");
        }
        // Present without an owner at the start: fresh at its first owner.
        let mut f = FreshIps::default();
        f.observe(t0, [(a, false)]);
        f.observe(t1, [(a, true)]);
        assert_eq!(f.fresh(t1), BTreeSet::from([a]));
        // An old IP stays old across a closure of the claim gate, owner or not.
        let mut f = FreshIps::default();
        f.observe(t0, [(a, true)]);
        f.observe(t0, [(a, false)]);
        f.restart();
        f.observe(t1, [(a, false)]);
        f.observe(t1, [(a, true)]);
        assert!(f.fresh(t1).is_empty());
    }
}
