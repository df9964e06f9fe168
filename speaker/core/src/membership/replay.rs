//! Replay protection for opened datagrams (DESIGN §5 S3). Pure.
//!
//! An authenticated datagram is accepted only if
//! 1. its sealed `sent_at` timestamp is within `window` of the receiver's wall clock (either
//!    direction: clocks of nodes are assumed NTP-synchronised to well within the window), and
//! 2. its nonce has not been accepted before within that window.
//!
//! Nonces are remembered for as long as their timestamp is inside the window, so an exact replay
//! is refused for the whole time it could otherwise pass check 1. Memory is bounded by
//! `capacity`: when full, the oldest entry is evicted and the guard raises a *floor* — datagrams
//! stamped at or before the newest evicted timestamp are then refused as stale — so eviction can
//! never re-open a replay. What remains possible is documented in `docs/membership.md`: a
//! receiver that restarts forgets its nonces and accepts replays of datagrams younger than the
//! window, once each.

use std::collections::{HashSet, VecDeque};

use super::envelope::NONCE_LEN;

/// Why an authenticated datagram was refused by the replay guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    /// Its timestamp is outside the acceptance window (or at/below the eviction floor).
    #[error("membership datagram timestamp outside the replay window")]
    Stale,
    /// Its nonce was already accepted.
    #[error("membership datagram is a replay")]
    Replayed,
}

/// Remembers recently accepted nonces.
#[derive(Debug)]
pub struct ReplayGuard {
    window_ms: u64,
    capacity: usize,
    seen: HashSet<[u8; NONCE_LEN]>,
    order: VecDeque<(u64, [u8; NONCE_LEN])>,
    floor_ms: Option<u64>,
}

impl ReplayGuard {
    /// A guard accepting timestamps within `window_ms` of now and remembering at most
    /// `capacity` nonces (at least 1).
    pub fn new(window_ms: u64, capacity: usize) -> Self {
        Self {
            window_ms,
            capacity: capacity.max(1),
            seen: HashSet::new(),
            order: VecDeque::new(),
            floor_ms: None,
        }
    }

    /// Checks a datagram opened at wall-clock `now_ms` and, if accepted, records its nonce.
    ///
    /// # Errors
    /// [`ReplayError::Stale`] or [`ReplayError::Replayed`]; nothing is recorded then.
    pub fn check(
        &mut self,
        nonce: &[u8; NONCE_LEN],
        sent_at_ms: u64,
        now_ms: u64,
    ) -> Result<(), ReplayError> {
        self.expire(now_ms);
        if sent_at_ms.abs_diff(now_ms) > self.window_ms
            || self.floor_ms.is_some_and(|floor| sent_at_ms <= floor)
        {
            return Err(ReplayError::Stale);
        }
        if self.seen.contains(nonce) {
            return Err(ReplayError::Replayed);
        }
        if self.order.len() >= self.capacity
            && let Some((evicted_at, evicted)) = self.order.pop_front()
        {
            self.seen.remove(&evicted);
            self.floor_ms = Some(self.floor_ms.map_or(evicted_at, |f| f.max(evicted_at)));
        }
        self.seen.insert(*nonce);
        self.order.push_back((sent_at_ms, *nonce));
        Ok(())
    }

    /// Number of nonces currently remembered.
    pub fn len(&self) -> usize {
        self.order.len()
    }

    /// Whether no nonce is remembered.
    pub fn is_empty(&self) -> bool {
        self.order.is_empty()
    }

    /// Forgets nonces whose timestamp left the window: they would be refused as stale anyway.
    /// Entries are kept in arrival order, so an entry is never dropped while its own timestamp
    /// is still inside the window.
    fn expire(&mut self, now_ms: u64) {
        let oldest_valid = now_ms.saturating_sub(self.window_ms);
        while let Some((at, nonce)) = self.order.front().copied() {
            if at >= oldest_valid {
                break;
            }
            self.order.pop_front();
            self.seen.remove(&nonce);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn n(x: u8) -> [u8; NONCE_LEN] {
        [x; NONCE_LEN]
    }

    #[test]
    fn accepts_fresh_refuses_replay_and_stale() {
        let mut g = ReplayGuard::new(1_000, 100);
        assert_eq!(g.check(&n(1), 10_000, 10_000), Ok(()));
        assert_eq!(g.check(&n(1), 10_000, 10_010), Err(ReplayError::Replayed));
        assert_eq!(g.check(&n(2), 8_999, 10_000), Err(ReplayError::Stale));
        assert_eq!(g.check(&n(3), 11_001, 10_000), Err(ReplayError::Stale));
        assert_eq!(
            g.check(&n(4), 10_999, 10_000),
            Ok(()),
            "small future skew is fine"
        );
    }

    #[test]
    fn expired_entries_are_forgotten_but_still_refused_as_stale() {
        let mut g = ReplayGuard::new(1_000, 100);
        assert_eq!(g.check(&n(1), 10_000, 10_000), Ok(()));
        assert_eq!(g.len(), 1);
        assert_eq!(g.check(&n(1), 10_000, 11_500), Err(ReplayError::Stale));
        assert!(g.is_empty());
    }

    #[test]
    fn eviction_raises_the_floor() {
        let mut g = ReplayGuard::new(10_000, 2);
        assert_eq!(g.check(&n(1), 1_000, 1_000), Ok(()));
        assert_eq!(g.check(&n(2), 1_001, 1_001), Ok(()));
        assert_eq!(g.check(&n(3), 1_002, 1_002), Ok(()));
        // n(1) was evicted; replaying it must still fail, now as stale.
        assert_eq!(g.check(&n(1), 1_000, 1_003), Err(ReplayError::Stale));
        assert_eq!(g.check(&n(2), 1_001, 1_003), Err(ReplayError::Replayed));
        assert_eq!(g.len(), 2);
    }

    proptest! {
        /// Whatever the sequence, one datagram (nonce and timestamp) is accepted at most once, only
        /// inside the window, and memory stays bounded.
        #[test]
        fn never_accepts_a_nonce_twice(
            events in proptest::collection::vec((0u8..40, 0u64..5_000, 0u64..200), 1..300),
        ) {
            let mut g = ReplayGuard::new(1_000, 16);
            let mut accepted = std::collections::HashSet::new();
            let mut now = 10_000u64;
            for (nonce, back, advance) in events {
                now += advance;
                let sent = now.saturating_sub(back);
                if g.check(&n(nonce), sent, now).is_ok() {
                    prop_assert!(accepted.insert((nonce, sent)), "datagram {}@{} accepted twice", nonce, sent);
                    prop_assert!(now - sent <= 1_000);
                }
                prop_assert!(g.len() <= 16);
            }
        }
    }
}
