//! When to send gratuitous ARP / unsolicited Neighbor Advertisements after gaining (or
//! re-confirming) ownership of an IP (DESIGN S4). Pure.
//!
//! Several copies a few seconds apart survive a lost frame and a switch port that is still
//! learning; an optional periodic refresh keeps switch and router caches warm. RFC 5227 §2.3 asks
//! for two announcements two seconds apart; the default sends four over five seconds.

use std::time::Duration;

/// RFC 4861 §10 `MAX_NEIGHBOR_ADVERTISEMENT`: at most this many unsolicited Neighbor
/// Advertisements after a link-layer address change (§7.2.6).
pub const MAX_NEIGHBOR_ADVERTISEMENT: usize = 3;
/// RFC 4861 §10 `RETRANS_TIMER` (1 s): unsolicited Neighbor Advertisements "MUST be separated by
/// at least RetransTimer seconds" (§7.2.6).
pub const RETRANS_TIMER: Duration = Duration::from_secs(1);

/// The announcement times relative to the moment of gain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AnnounceSchedule {
    /// Offsets of the initial burst, ascending (default 0, 0.5 s, 2 s, 5 s).
    pub offsets: Vec<Duration>,
    /// After the burst, one more every `refresh` for as long as the IP is owned (default off).
    pub refresh: Option<Duration>,
    /// The least gap between two unsolicited Neighbor Advertisements of a burst: the link's
    /// RetransTimer, [`RETRANS_TIMER`] unless a router advertises another (RFC 4861 §6.3.2).
    pub na_spacing: Duration,
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
            na_spacing: RETRANS_TIMER,
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

    /// What to send `elapsed` after the gain when `sent` announcements are done: `None` when
    /// none is due; else the new count and whether the one announcement sent now also goes out
    /// as an unsolicited NA ([`AnnounceSchedule::sends_na`] of any announcement due). After a
    /// stall (the task was not polled while several came due) the missed ones collapse into one
    /// send: never a back-to-back burst, which would also break RFC 4861's NA spacing.
    pub fn catch_up(&self, sent: usize, elapsed: Duration) -> Option<(usize, bool)> {
        let mut n = sent;
        let mut na = false;
        while self.offset(n).is_some_and(|o| o <= elapsed) {
            na |= self.sends_na(n);
            n += 1;
            if n - sent > 1_000_000 {
                break; // a refresh of nanoseconds after a stall of hours: stop counting
            }
        }
        (n > sent).then_some((n, na))
    }

    /// Whether announcement `n` (0-based, as for [`AnnounceSchedule::offset`]) is also sent as
    /// an unsolicited Neighbor Advertisement. Gratuitous ARP uses every announcement; IPv6 keeps
    /// RFC 4861 §7.2.6 within the burst: at most [`MAX_NEIGHBOR_ADVERTISEMENT`] of its offsets,
    /// each at least [`AnnounceSchedule::na_spacing`] after the previous one sent, chosen from the first
    /// (default burst 0, 0.5 s, 2 s, 5 s → NAs at 0, 2 s, 5 s). Refresh announcements after the
    /// burst (opt-in, `--announce-refresh`) are one per period and always sent.
    pub fn sends_na(&self, n: usize) -> bool {
        if n >= self.offsets.len() {
            return self.offset(n).is_some();
        }
        let mut sent: Vec<usize> = Vec::new();
        for (i, o) in self.offsets.iter().enumerate() {
            if sent.len() == MAX_NEIGHBOR_ADVERTISEMENT {
                break;
            }
            let spaced = sent
                .last()
                .and_then(|&j| self.offsets.get(j))
                .is_none_or(|prev| o.saturating_sub(*prev) >= self.na_spacing);
            if spaced {
                sent.push(i);
            }
        }
        sent.contains(&n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue #10 / RFC 4861 §7.2.6: no more than three unsolicited NAs per gain, one second apart.
    #[test]
    fn neighbor_advertisements_keep_rfc_4861_counts_and_spacing() {
        let s = AnnounceSchedule::default();
        let nas: Vec<usize> = (0..4).filter(|&n| s.sends_na(n)).collect();
        assert_eq!(nas, vec![0, 2, 3], "0 s, 2 s, 5 s; not 0.5 s");
        let dense = AnnounceSchedule {
            offsets: (0..10).map(|i| Duration::from_millis(300 * i)).collect(),
            refresh: Some(Duration::from_secs(60)),
            na_spacing: RETRANS_TIMER,
        };
        let nas: Vec<usize> = (0..10).filter(|&n| dense.sends_na(n)).collect();
        assert_eq!(nas.len(), MAX_NEIGHBOR_ADVERTISEMENT);
        for pair in nas.windows(2) {
            let gap = dense.offsets[pair[1]] - dense.offsets[pair[0]];
            assert!(gap >= RETRANS_TIMER, "{gap:?}");
        }
        assert!(dense.sends_na(10), "refresh announcements are sent");
        assert!(!s.sends_na(4), "no refresh configured");
    }

    /// A stall of 10 s after the gain: the four announcements of the burst are one send (with an
    /// NA), not four back to back; on time, one at a time.
    #[test]
    fn a_stall_collapses_missed_announcements_into_one() {
        let s = AnnounceSchedule::default();
        assert_eq!(s.catch_up(0, Duration::from_secs(10)), Some((4, true)));
        assert_eq!(s.catch_up(4, Duration::from_secs(100)), None);
        assert_eq!(s.catch_up(0, Duration::ZERO), Some((1, true)));
        assert_eq!(s.catch_up(1, Duration::from_millis(499)), None);
        assert_eq!(
            s.catch_up(1, Duration::from_millis(600)),
            Some((2, false)),
            "0.5 s: ARP only"
        );
        let refresh = AnnounceSchedule {
            refresh: Some(Duration::from_nanos(1)),
            ..Default::default()
        };
        assert!(refresh.catch_up(4, Duration::from_secs(3600)).is_some());
    }

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
            ..Default::default()
        };
        assert_eq!(only_refresh.offset(0), Some(Duration::from_secs(1)));
    }
}
