//! The free addresses of one pool in one family, as disjoint intervals.
//!
//! Memory is O(number of intervals), which is at most one more than the number of allocated (or
//! excluded) addresses inside the pool's ranges: a fresh `/48` or `/64` is a single interval.
//! Taking the lowest free address, taking a given address and releasing one are O(log n) in the
//! number of intervals (R12).
//!
//! With `avoidBuggyIPs` (IPv4 addresses ending in `.0`/`.255`) intervals may still contain buggy
//! addresses; they are stepped over when handing out (at most two steps) and an interval that holds
//! only buggy addresses is dropped when met, so no buggy address is ever returned.

use std::collections::BTreeMap;

use ferrolb_crds::addresses::{Family, IpRange, is_buggy_v4};

/// Free offsets of one family (see [`ferrolb_crds::addresses::to_offset`]), as disjoint,
/// non-adjacent inclusive intervals keyed by their first offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FreeSet {
    family: Family,
    avoid_buggy: bool,
    /// first → last, inclusive; disjoint and non-adjacent.
    intervals: BTreeMap<u128, u128>,
}

impl FreeSet {
    /// An empty set of `family`. `avoid_buggy` applies only to IPv4.
    pub fn new(family: Family, avoid_buggy: bool) -> FreeSet {
        FreeSet {
            family,
            avoid_buggy: avoid_buggy && family == Family::V4,
            intervals: BTreeMap::new(),
        }
    }

    /// The family of every offset in the set.
    pub fn family(&self) -> Family {
        self.family
    }

    /// Number of stored intervals (the memory cost), not the number of free addresses.
    pub fn interval_count(&self) -> usize {
        self.intervals.len()
    }

    fn usable(&self, offset: u128) -> bool {
        !(self.avoid_buggy && is_buggy_v4(offset))
    }

    /// Adds every offset of `range` (must be of this set's family) to the set, merging with
    /// neighbours. O(k log n) where k is the number of intervals it swallows.
    pub fn insert_range(&mut self, range: IpRange) {
        debug_assert_eq!(range.family(), self.family);
        let (mut first, mut last) = (range.first_offset(), range.last_offset());
        // Merge with an interval that starts at or before `first` and reaches it (or touches it).
        if let Some((&s, &e)) = self.intervals.range(..=first).next_back()
            && e.saturating_add(1) >= first
        {
            first = s;
            last = last.max(e);
            self.intervals.remove(&s);
        }
        // Swallow intervals starting inside or right after [first, last].
        loop {
            let bound = last.saturating_add(1);
            let Some((&s, &e)) = self.intervals.range(first..=bound).next() else {
                break;
            };
            last = last.max(e);
            self.intervals.remove(&s);
        }
        self.intervals.insert(first, last);
    }

    /// Adds one offset (a release). O(log n).
    pub fn insert(&mut self, offset: u128) {
        if let Some(r) = IpRange::from_offsets(self.family, offset, offset) {
            self.insert_range(r);
        }
    }

    /// Removes every offset of `range` from the set. O(k log n) for k intervals touched.
    pub fn remove_range(&mut self, first: u128, last: u128) {
        if first > last {
            return;
        }
        // An interval starting before `first` may reach into the range.
        if let Some((&s, &e)) = self.intervals.range(..first).next_back()
            && e >= first
        {
            self.intervals.insert(s, first - 1);
            if e > last {
                self.intervals.insert(last + 1, e);
                return;
            }
        }
        let inside: Vec<(u128, u128)> = self
            .intervals
            .range(first..=last)
            .map(|(&s, &e)| (s, e))
            .collect();
        for (s, e) in inside {
            self.intervals.remove(&s);
            if e > last {
                self.intervals.insert(last + 1, e);
            }
        }
    }

    /// Removes one given offset if it is free and usable; returns whether it was. O(log n).
    pub fn take(&mut self, offset: u128) -> bool {
        if !self.contains(offset) {
            return false;
        }
        self.remove_range(offset, offset);
        true
    }

    /// Whether `offset` is free and may be handed out.
    pub fn contains(&self, offset: u128) -> bool {
        self.usable(offset)
            && self
                .intervals
                .range(..=offset)
                .next_back()
                .is_some_and(|(_, &e)| e >= offset)
    }

    /// Removes and returns the lowest free usable offset. O(log n) amortised: intervals holding
    /// only buggy addresses are dropped as they are met.
    pub fn take_lowest(&mut self) -> Option<u128> {
        loop {
            let (&s, &e) = self.intervals.iter().next()?;
            let mut candidate = s;
            while candidate <= e && !self.usable(candidate) {
                candidate += 1;
            }
            if candidate > e {
                self.intervals.remove(&s);
                continue;
            }
            self.remove_range(s, candidate);
            return Some(candidate);
        }
    }

    /// The lowest free usable offset, without taking it.
    pub fn peek_lowest(&self) -> Option<u128> {
        self.intervals.iter().find_map(|(&s, &e)| {
            let mut candidate = s;
            while candidate <= e && !self.usable(candidate) {
                candidate += 1;
            }
            (candidate <= e).then_some(candidate)
        })
    }

    /// Whether at least one usable offset is free.
    pub fn has_free(&self) -> bool {
        self.peek_lowest().is_some()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use ferrolb_crds::addresses::to_offset;
    use proptest::prelude::*;
    use std::collections::BTreeSet;
    use std::net::IpAddr;

    fn off(s: &str) -> u128 {
        to_offset(s.parse::<IpAddr>().unwrap())
    }

    fn set_of(family: Family, first: &str, last: &str, avoid: bool) -> FreeSet {
        let mut f = FreeSet::new(family, avoid);
        f.insert_range(IpRange::from_offsets(family, off(first), off(last)).unwrap());
        f
    }

    #[test]
    fn lowest_first_and_release_merges_back() {
        let mut f = set_of(Family::V4, "198.51.100.1", "198.51.100.4", false);
        assert_eq!(f.take_lowest(), Some(off("198.51.100.1")));
        assert_eq!(f.take_lowest(), Some(off("198.51.100.2")));
        assert!(f.take(off("198.51.100.4")));
        assert!(!f.take(off("198.51.100.4")), "taken twice");
        assert_eq!(f.take_lowest(), Some(off("198.51.100.3")));
        assert_eq!(f.take_lowest(), None);
        for a in [
            "198.51.100.3",
            "198.51.100.1",
            "198.51.100.4",
            "198.51.100.2",
        ] {
            f.insert(off(a));
        }
        assert_eq!(f.interval_count(), 1);
    }

    #[test]
    fn a_slash_48_is_one_interval_until_used() {
        let mut f = set_of(
            Family::V6,
            "2001:db8::",
            "2001:db8:0:ffff:ffff:ffff:ffff:ffff",
            false,
        );
        assert_eq!(f.interval_count(), 1);
        assert!(f.take(off("2001:db8:0:6:ffff:ffff:ffff:fffe")));
        assert_eq!(f.interval_count(), 2);
        assert_eq!(f.take_lowest(), Some(off("2001:db8::")));
    }

    #[test]
    fn buggy_addresses_are_never_handed_out() {
        let mut f = set_of(Family::V4, "198.51.100.254", "198.51.101.1", true);
        assert!(!f.contains(off("198.51.100.255")));
        assert!(!f.take(off("198.51.101.0")));
        assert_eq!(f.take_lowest(), Some(off("198.51.100.254")));
        assert_eq!(f.take_lowest(), Some(off("198.51.101.1")));
        assert_eq!(f.take_lowest(), None);
        let mut f = set_of(Family::V4, "198.51.100.0", "198.51.100.0", true);
        assert!(!f.has_free());
        assert_eq!(f.take_lowest(), None);
    }

    #[test]
    fn top_of_the_v6_space_does_not_overflow() {
        let mut f = set_of(
            Family::V6,
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
            "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            false,
        );
        assert!(f.take(u128::MAX));
        f.insert(u128::MAX);
        assert_eq!(f.interval_count(), 1);
        assert_eq!(f.take_lowest(), Some(u128::MAX - 1));
        assert_eq!(f.take_lowest(), Some(u128::MAX));
        assert_eq!(f.take_lowest(), None);
    }

    #[derive(Debug, Clone)]
    enum Op {
        TakeLowest,
        Take(u8),
        Release(u8),
        RemoveRange(u8, u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            Just(Op::TakeLowest),
            any::<u8>().prop_map(Op::Take),
            any::<u8>().prop_map(Op::Release),
            (any::<u8>(), any::<u8>()).prop_map(|(a, b)| Op::RemoveRange(a.min(b), a.max(b))),
        ]
    }

    proptest! {
        /// The interval set behaves exactly like a plain set of offsets (the model), stays
        /// normalised (disjoint, non-adjacent) and never hands out a buggy address.
        #[test]
        fn matches_a_plain_set(avoid in any::<bool>(), ops in proptest::collection::vec(op(), 0..200)) {
            let base = off("198.51.100.0");
            let mut f = FreeSet::new(Family::V4, avoid);
            f.insert_range(IpRange::from_offsets(Family::V4, base, base + 255).unwrap());
            let mut model: BTreeSet<u128> = (base..=base + 255).collect();
            let usable = |o: u128| !(avoid && is_buggy_v4(o));
            for op in ops {
                match op {
                    Op::TakeLowest => {
                        let want = model.iter().copied().find(|&o| usable(o));
                        prop_assert_eq!(f.take_lowest(), want);
                        if let Some(w) = want { model.remove(&w); }
                    }
                    Op::Take(i) => {
                        let o = base + u128::from(i);
                        let want = model.contains(&o) && usable(o);
                        prop_assert_eq!(f.take(o), want);
                        if want { model.remove(&o); }
                    }
                    Op::Release(i) => {
                        let o = base + u128::from(i);
                        f.insert(o);
                        model.insert(o);
                    }
                    Op::RemoveRange(a, b) => {
                        f.remove_range(base + u128::from(a), base + u128::from(b));
                        for o in base + u128::from(a)..=base + u128::from(b) { model.remove(&o); }
                    }
                }
                let ivs: Vec<(u128, u128)> = f.intervals.iter().map(|(&s, &e)| (s, e)).collect();
                for w in ivs.windows(2) {
                    prop_assert!(w[0].1 + 1 < w[1].0, "not normalised: {:?}", ivs);
                }
                for o in base..=base + 255 {
                    prop_assert_eq!(f.contains(o), model.contains(&o) && usable(o));
                }
            }
        }
    }
}
