//! The exact observer: per IP, the intervals with two or more answerers and with none, and the
//! changes of the sole answerer. Not sampled: between two simulation events the only thing that
//! can change who answers is a lease running out, and its instant is known, so each interval is
//! computed to the nanosecond.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Duration;

/// A maximal interval `[start, end)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Window {
    /// Start, since the scenario's start.
    pub start: Duration,
    /// End (exclusive).
    pub end: Duration,
    /// The nodes that answered at some instant of it (dual windows); empty for windows with none.
    pub nodes: BTreeSet<usize>,
}

impl Window {
    /// The window's length.
    pub fn len(&self) -> Duration {
        self.end.saturating_sub(self.start)
    }

    /// Whether the window is empty.
    pub fn is_empty(&self) -> bool {
        self.end <= self.start
    }
}

/// What the observer saw for one IP.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpRecord {
    /// Windows with two or more answerers.
    pub dual: Vec<Window>,
    /// Windows with no answerer after the IP was first answered.
    pub none: Vec<Window>,
    /// When the IP was first answered.
    pub first_answered: Option<Duration>,
    /// `(when, who)` each time the sole answerer changed (`None`: nobody or several).
    pub owners: Vec<(Duration, Option<usize>)>,
    open_dual: Option<(Duration, BTreeSet<usize>)>,
    open_none: Option<Duration>,
}

/// The observer's result for a whole run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// Per IP.
    pub ips: BTreeMap<IpAddr, IpRecord>,
    /// Who answers each IP at the end.
    pub final_answerers: BTreeMap<IpAddr, BTreeSet<usize>>,
    /// The owners the running speakers' last plans name for each IP (speakers whose claim gate
    /// is closed have no plan).
    pub final_plans: BTreeMap<IpAddr, BTreeSet<Option<String>>>,
    /// The rendezvous owner of each IP over the speakers running at the end.
    pub final_oracle: BTreeMap<IpAddr, Option<usize>>,
    /// Every gratuitous ARP / unsolicited NA sent: `(when, node, ip)`.
    pub announcements: Vec<(Duration, usize, IpAddr)>,
    /// Announcements a node sent while it did not answer the IP itself (lease expired, yielded,
    /// probing, process not running): `(when, node, ip)`; the invariant I-announce.
    pub stray_announcements: Vec<(Duration, usize, IpAddr)>,
    /// Membership datagrams dropped, by `DropReason` (delivered ones; not those queued while a
    /// node was stopped).
    pub drops: BTreeMap<String, u64>,
    /// Simulated time.
    pub end: Duration,
    /// Membership datagrams sent.
    pub datagrams: u64,
    /// Core steps run.
    pub steps: u64,
}

impl Report {
    /// The longest dual window over all IPs, if any.
    pub fn worst_dual(&self) -> Option<(IpAddr, &Window)> {
        self.ips
            .iter()
            .flat_map(|(ip, r)| r.dual.iter().map(move |w| (*ip, w)))
            .max_by_key(|(_, w)| w.len())
    }

    /// The longest window without an answerer over all IPs, if any.
    pub fn worst_none(&self) -> Option<(IpAddr, &Window)> {
        self.ips
            .iter()
            .flat_map(|(ip, r)| r.none.iter().map(move |w| (*ip, w)))
            .max_by_key(|(_, w)| w.len())
    }
}

/// Accumulates [`IpRecord`]s from the answer state at each event.
#[derive(Debug, Default)]
pub struct Observer {
    records: BTreeMap<IpAddr, IpRecord>,
}

impl Observer {
    /// Accounts `[from, to)` for `ip`, given for each node that answers at `from` the instant
    /// its lease runs out (`Duration::MAX`: no lease), and whether some running speaker may
    /// announce the IP at all (`eligible`; silence while nobody may is no failover to wait for
    /// and is not counted).
    pub fn account(
        &mut self,
        ip: IpAddr,
        from: Duration,
        to: Duration,
        answering: &[(usize, Duration)],
        eligible: bool,
    ) {
        if to <= from {
            return;
        }
        let r = self.records.entry(ip).or_default();
        let mut until: Vec<(Duration, usize)> = answering
            .iter()
            .filter(|(_, u)| *u > from)
            .map(|(n, u)| (*u, *n))
            .collect();
        until.sort_by(|a, b| b.cmp(a));
        // Sole answerer at `from`.
        let sole = match until.as_slice() {
            [(_, n)] => Some(*n),
            _ => None,
        };
        if r.owners.last().map(|(_, o)| *o) != Some(sole) {
            r.owners.push((from, sole));
        }
        if !until.is_empty() && r.first_answered.is_none() {
            r.first_answered = Some(from);
        }
        // Two or more answer on [from, min(to, second lease)).
        if until.len() >= 2 {
            let end = to.min(until[1].0);
            let nodes: BTreeSet<usize> = until.iter().map(|(_, n)| *n).collect();
            let (start, mut seen) = r.open_dual.take().unwrap_or((from, BTreeSet::new()));
            seen.extend(nodes);
            if end < to {
                r.dual.push(Window {
                    start,
                    end,
                    nodes: seen,
                });
            } else {
                r.open_dual = Some((start, seen));
            }
        } else if let Some((start, nodes)) = r.open_dual.take() {
            r.dual.push(Window {
                start,
                end: from,
                nodes,
            });
        }
        // Nobody answers on [min(to, first lease), to), once the IP was answered, while some
        // running speaker may announce it.
        if !eligible {
            if let Some(start) = r.open_none.take() {
                r.none.push(Window {
                    start,
                    end: from,
                    nodes: BTreeSet::new(),
                });
            }
        } else if r.first_answered.is_some() {
            let none_from = until.first().map_or(from, |(u, _)| (*u).min(to));
            if none_from > from
                && let Some(start) = r.open_none.take()
            {
                r.none.push(Window {
                    start,
                    end: from,
                    nodes: BTreeSet::new(),
                });
            }
            if none_from < to && r.open_none.is_none() {
                r.open_none = Some(none_from);
            }
        }
    }

    /// Closes the open windows at `end` and returns the records.
    pub fn finish(mut self, end: Duration) -> BTreeMap<IpAddr, IpRecord> {
        for r in self.records.values_mut() {
            if let Some((start, nodes)) = r.open_dual.take() {
                r.dual.push(Window { start, end, nodes });
            }
            if let Some(start) = r.open_none.take() {
                r.none.push(Window {
                    start,
                    end,
                    nodes: BTreeSet::new(),
                });
            }
            r.dual.retain(|w| !w.is_empty());
            r.none.retain(|w| !w.is_empty());
        }
        self.records
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_lease_that_runs_out_between_events_ends_the_dual_window_exactly() {
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        let mut o = Observer::default();
        o.account(ip, ms(0), ms(100), &[(0, Duration::MAX)], true);
        // Node 1 joins at 100 ms; node 0's lease runs out at 130 ms; next event at 200 ms.
        o.account(
            ip,
            ms(100),
            ms(200),
            &[(0, ms(130)), (1, Duration::MAX)],
            true,
        );
        o.account(ip, ms(200), ms(300), &[(1, Duration::MAX)], true);
        let r = o.finish(ms(300));
        let r = &r[&ip];
        assert_eq!(r.dual.len(), 1);
        assert_eq!((r.dual[0].start, r.dual[0].end), (ms(100), ms(130)));
        assert!(r.none.is_empty());
        assert_eq!(
            r.owners,
            vec![(ms(0), Some(0)), (ms(100), None), (ms(200), Some(1))]
        );
    }

    #[test]
    fn silence_is_counted_from_the_lease_end_to_the_next_answer() {
        let ip: IpAddr = "198.51.100.1".parse().unwrap();
        let mut o = Observer::default();
        o.account(ip, ms(0), ms(50), &[], true);
        o.account(ip, ms(50), ms(100), &[(0, ms(80))], true);
        o.account(ip, ms(100), ms(400), &[], true);
        o.account(ip, ms(400), ms(500), &[(1, Duration::MAX)], true);
        let r = o.finish(ms(500));
        let r = &r[&ip];
        assert_eq!(r.first_answered, Some(ms(50)));
        assert_eq!(r.none.len(), 1);
        assert_eq!((r.none[0].start, r.none[0].end), (ms(80), ms(400)));
        assert!(r.dual.is_empty());
    }
}
