//! When to send gratuitous ARP / unsolicited Neighbor Advertisements after gaining (or
//! re-confirming) ownership of an IP (DESIGN S4). Pure.
//!
//! Several copies a few seconds apart survive a lost frame and a switch port that is still
//! learning; an optional periodic refresh keeps switch and router caches warm. RFC 5227 §2.3 asks
//! for two announcements two seconds apart; the default sends four over five seconds.

use std::time::Duration;

/// The announcement times relative to the moment of gain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceSchedule {
    /// Offsets of the initial burst, ascending (default 0, 0.5 s, 2 s, 5 s).
    pub offsets: Vec<Duration>,
    /// After the burst, one more every `refresh` for as long as the IP is owned (default off).
    pub refresh: Option<Duration>,
}

impl Default for AnnounceSchedule {
    fn default() -> Self {
        AnnounceSchedule {
            offsets: vec![
                Duration::ZERO,
                Duration::from_millis(500),
                Duration::from_secs(2),
                Duration::from_secs(5),
            ],
            refresh: None,
        }
    }
}

impl AnnounceSchedule {
    /// When the announcement number `n` (0-based) is due, relative to the gain; `None` when the
    /// schedule is over. Saturates instead of overflowing.
    pub fn offset(&self, n: usize) -> Option<Duration> {
        if let Some(o) = self.offsets.get(n) {
            return Some(*o);
        }
        let refresh = self.refresh.filter(|r| !r.is_zero())?;
        let last = self.offsets.last().copied().unwrap_or_default();
        let k = u32::try_from(n - self.offsets.len() + 1).unwrap_or(u32::MAX);
        Some(last.saturating_add(refresh.saturating_mul(k)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_burst_then_stop() {
        let s = AnnounceSchedule::default();
        let got: Vec<_> = (0..5).map(|n| s.offset(n)).collect();
        assert_eq!(
            got,
            vec![
                Some(Duration::ZERO),
                Some(Duration::from_millis(500)),
                Some(Duration::from_secs(2)),
                Some(Duration::from_secs(5)),
                None
            ]
        );
    }

    #[test]
    fn refresh_continues_after_the_burst() {
        let s = AnnounceSchedule {
            refresh: Some(Duration::from_secs(60)),
            ..Default::default()
        };
        assert_eq!(s.offset(4), Some(Duration::from_secs(65)));
        assert_eq!(s.offset(5), Some(Duration::from_secs(125)));
        assert!(s.offset(usize::MAX).is_some());
        let zero = AnnounceSchedule {
            refresh: Some(Duration::ZERO),
            ..Default::default()
        };
        assert_eq!(zero.offset(4), None);
        let only_refresh = AnnounceSchedule {
            offsets: vec![],
            refresh: Some(Duration::from_secs(1)),
        };
        assert_eq!(only_refresh.offset(0), Some(Duration::from_secs(1)));
    }
}
