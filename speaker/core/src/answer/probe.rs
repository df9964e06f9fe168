//! Probing a newly assigned IP before announcing it (issue #10 item 5; RFC 5227 §2.1.1 for IPv4,
//! RFC 4862 §5.4 Duplicate Address Detection for IPv6). Pure: no `tokio`, no `kube`; the
//! responder's interface task sends the frames and feeds the answers in.
//!
//! When the controller hands out an address that another host on the LAN already uses (a
//! forgotten static configuration, a DHCP lease inside the pool), announcing it at once would
//! steal it from that host: every client's neighbour cache flips to the owner's MAC. So before the
//! *first* announcement of an IP that was newly assigned (it appeared in a Service status while
//! this speaker was running; see `ferrolb_speaker_core::fresh`), the owner sends
//! [`ProbeSettings::count`] probes — ARP requests with sender IP 0.0.0.0, or Neighbor
//! Solicitations from `::` to the solicited-node group — [`ProbeSettings::interval`] apart,
//! answers nothing for the IP meanwhile, and listens for a host that says it has it (an ARP frame
//! with the IP as sender address, a Neighbor Advertisement for it, a Neighbor Solicitation from
//! it). RFC 5227's timings (three probes 1–2 s apart, 2 s wait) are scaled down: the default
//! (3 probes 100 ms apart, then a wait of two intervals) delays a new Service by 0.4 s; a failover
//! never probes (the IP was not newly assigned), so it is not delayed at all.
//!
//! Differences from RFC 5227, on purpose:
//! - **Probes of others are not conflicts.** Two speakers that both believe they own a new IP
//!   (a partition at the moment of assignment) would each see the other's probe and both hold
//!   back: nobody would answer. Only a host that *uses* the address counts.
//! - **A short claim is a handover, not a conflict.** When ownership moves while an IP is still
//!   fresh, the previous owner may answer a probe or two before it withdraws (a few hundred
//!   milliseconds). The verdict waits until [`ProbeSettings::confirm`] after the first claim and
//!   says "in use" only if the claims span at least half of it: a host that keeps answering.
//! - **A held IP is probed again** every [`ProbeSettings::retry`]: when the other host lets the
//!   address go, the owner announces it without anyone restarting anything.
//!
//! An IP found in use is *held*: owned by this node's election but neither announced nor
//! answered, reported by a Warning Event `IPConflict` that names the other MAC (and, through the
//! controller, a pool condition); clients keep reaching the other host, as before ferrolb came.

use std::time::{Duration, Instant};

use crate::wire::MacAddr;

/// How to probe (flags `--address-probes`, `--address-probe-interval`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSettings {
    /// Probes per round (RFC 5227 `PROBE_NUM` = 3). 0 disables probing: a new IP is announced
    /// at once, as MetalLB does.
    pub count: u32,
    /// Time between probes (RFC 5227: `PROBE_MIN`..`PROBE_MAX`, 1–2 s); the round ends two
    /// intervals after the last probe (RFC 5227 `ANNOUNCE_WAIT`, 2 s).
    pub interval: Duration,
    /// How long after the first claim the verdict waits (see the module docs).
    pub confirm: Duration,
    /// Time between rounds while the IP is held (RFC 5227 `RATE_LIMIT_INTERVAL` is 60 s; a held
    /// IP costs `count` frames per round).
    pub retry: Duration,
}

impl Default for ProbeSettings {
    fn default() -> Self {
        ProbeSettings {
            count: 3,
            interval: Duration::from_millis(100),
            confirm: Duration::from_secs(1),
            retry: Duration::from_secs(5),
        }
    }
}

impl ProbeSettings {
    /// Whether new IPs are probed at all.
    pub fn enabled(&self) -> bool {
        self.count > 0
    }
}

/// The outcome of a probe round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nobody else uses the IP: announce it now.
    Free,
    /// `mac` kept claiming the IP: hold it and probe again after [`ProbeSettings::retry`].
    InUse {
        /// The MAC of the latest claim.
        mac: MacAddr,
    },
}

/// What [`Probe::step`] asks for at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProbeStep {
    /// Send this many probes now (0 or 1, more only after a stall).
    pub send: u32,
    /// The round just ended.
    pub verdict: Option<Verdict>,
}

/// How long after a first "in use" verdict rounds follow each other without a pause: a previous
/// owner that withdraws late (watch or gossip lag during an election handover) stops within
/// this, and the IP is then announced at the end of the next round, not after `retry`.
pub const HANDOVER_BOUND: Duration = Duration::from_secs(5);

/// The least interval used, whatever the settings say (an interval of 0 would never advance).
const MIN_INTERVAL: Duration = Duration::from_millis(1);
/// A step this much later than due (or two intervals, if longer) is a stall of the task: the
/// round is restarted instead of deciding on probes nobody had time to answer.
const STALL: Duration = Duration::from_millis(200);

/// The probing of one IP on one interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probe {
    round_start: Instant,
    sent: u32,
    first_claim: Option<Instant>,
    last_claim: Option<Instant>,
    mac: Option<MacAddr>,
    /// Found in use by the previous round; a round is scheduled.
    held: Option<MacAddr>,
    /// Rounds in a row that found the IP in use.
    rounds_held: u32,
    /// When the first of those rounds ended.
    held_since: Option<Instant>,
}

/// `t + d`, or a far but finite instant when that overflows (a misconfigured interval must not
/// panic the interface task).
fn add(t: Instant, d: Duration) -> Instant {
    t.checked_add(d)
        .or_else(|| t.checked_add(Duration::from_secs(86_400 * 365)))
        .unwrap_or(t)
}

impl Probe {
    /// Start probing at `now` (the first probe is due at once).
    pub fn new(now: Instant) -> Probe {
        Probe {
            round_start: now,
            sent: 0,
            first_claim: None,
            last_claim: None,
            mac: None,
            held: None,
            rounds_held: 0,
            held_since: None,
        }
    }

    /// Start probing at `now` an IP known to be held by `mac` (e.g. by this node's interface
    /// task before it restarted): it stays held until a round finds it free.
    pub fn held(now: Instant, mac: MacAddr) -> Probe {
        Probe {
            held: Some(mac),
            rounds_held: 1,
            held_since: Some(now),
            ..Probe::new(now)
        }
    }

    /// Another host (`mac`) said at `now` that it has the IP. Probes of other hosts must not be
    /// passed here (see the module docs).
    pub fn claim(&mut self, now: Instant, mac: MacAddr) {
        if now < self.round_start {
            return; // held, between rounds: the next round decides
        }
        self.first_claim.get_or_insert(now);
        self.last_claim = Some(now);
        self.mac = Some(mac);
    }

    /// The host that held the IP at the end of the last round, while the IP is held.
    pub fn held_by(&self) -> Option<MacAddr> {
        self.held
    }

    fn verdict_at(&self, s: &ProbeSettings) -> Instant {
        let interval = s.interval.max(MIN_INTERVAL);
        let last_probe = interval.saturating_mul(s.count.saturating_sub(1));
        let quiet = add(
            self.round_start,
            last_probe.saturating_add(interval.saturating_mul(2)),
        );
        match self.first_claim {
            Some(first) => quiet.max(add(first, s.confirm)),
            None => quiet,
        }
    }

    fn probe_at(&self, n: u32, s: &ProbeSettings) -> Instant {
        add(
            self.round_start,
            s.interval.max(MIN_INTERVAL).saturating_mul(n),
        )
    }

    /// When [`Probe::step`] has something to do next.
    pub fn next_due(&self, s: &ProbeSettings) -> Instant {
        let verdict = self.verdict_at(s);
        let probe = self.probe_at(self.sent, s);
        // After a claim, probes go on until the verdict (the other host must keep answering).
        if (self.sent < s.count || self.first_claim.is_some()) && probe < verdict {
            probe
        } else {
            verdict
        }
    }

    /// Advance to `now`: the probes now due, and the verdict when the round is over. After
    /// [`Verdict::InUse`] the probe stays (held) and the next round starts at once for
    /// [`HANDOVER_BOUND`] after the first such verdict (an election handover whose previous
    /// owner withdrew late is over by then), then every [`ProbeSettings::retry`]; after
    /// [`Verdict::Free`] the caller drops it.
    ///
    /// The IP is in use when a host was still claiming it at the end of the round (its last
    /// claim no more than two intervals before the verdict, the verdict at least
    /// [`ProbeSettings::confirm`] after its first claim): a host that keeps answering. A step
    /// much later than due (the task stalled) restarts the round rather than decide on probes
    /// nobody had time to answer.
    pub fn step(&mut self, now: Instant, s: &ProbeSettings) -> ProbeStep {
        let interval = s.interval.max(MIN_INTERVAL);
        let due = self.next_due(s);
        if now > add(due, STALL.max(interval.saturating_mul(2))) && self.round_start <= due {
            let (held, rounds_held, held_since) = (self.held, self.rounds_held, self.held_since);
            *self = Probe {
                held,
                rounds_held,
                held_since,
                ..Probe::new(now)
            };
        }
        let mut out = ProbeStep::default();
        let verdict_at = self.verdict_at(s);
        while (self.sent < s.count || self.first_claim.is_some())
            && self.probe_at(self.sent, s) <= now
            && self.probe_at(self.sent, s) < verdict_at
        {
            self.sent += 1;
            out.send += 1;
        }
        if now < verdict_at {
            return out;
        }
        let still_claiming = |last: Instant| add(last, interval.saturating_mul(2)) >= verdict_at;
        let in_use = match (self.last_claim, self.mac) {
            (Some(last), Some(mac)) if still_claiming(last) => Some(mac),
            _ => None,
        };
        out.verdict = Some(match in_use {
            Some(mac) => {
                let rounds_held = self.rounds_held.saturating_add(1);
                let held_since = self.held_since.unwrap_or(now);
                // Back to back while a late-withdrawing previous owner may still explain the
                // claims (HANDOVER_BOUND), then every `retry`.
                let wait = if now.saturating_duration_since(held_since) < HANDOVER_BOUND {
                    Duration::ZERO
                } else {
                    s.retry
                };
                *self = Probe {
                    held: Some(mac),
                    rounds_held,
                    held_since: Some(held_since),
                    ..Probe::new(add(now, wait))
                };
                Verdict::InUse { mac }
            }
            None => {
                self.held = None;
                self.rounds_held = 0;
                self.held_since = None;
                Verdict::Free
            }
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OTHER: MacAddr = MacAddr(2, 0, 0, 0, 0, 0x66);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Steps a probe every millisecond from `t0` for `total`, as the interface task does (it
    /// wakes at `next_due`); `answers(t)` says whether the other host answers a probe sent at
    /// `t` (1 ms later). Returns the verdicts with their times, and the probe times.
    fn simulate(
        mut p: Probe,
        s: &ProbeSettings,
        total: Duration,
        answers: impl Fn(Duration) -> bool,
    ) -> (Vec<(Duration, Verdict)>, Vec<Duration>) {
        let t0 = p.round_start;
        let (mut verdicts, mut sent, mut pending) = (Vec::new(), Vec::new(), Vec::new());
        for step in 0..=u64::try_from(total.as_millis()).unwrap_or(0) {
            let now = t0 + ms(step);
            let answers_now = pending.iter().filter(|at| t0 + **at + ms(1) == now).count();
            for _ in 0..answers_now {
                p.claim(now, OTHER);
            }
            if p.next_due(s) > now {
                continue; // the task sleeps until then
            }
            let got = p.step(now, s);
            for _ in 0..got.send {
                sent.push(ms(step));
                if answers(ms(step)) {
                    pending.push(ms(step));
                }
            }
            if let Some(v) = got.verdict {
                verdicts.push((ms(step), v));
                if v == Verdict::Free {
                    break;
                }
            }
        }
        (verdicts, sent)
    }

    fn first(p: &(Vec<(Duration, Verdict)>, Vec<Duration>)) -> (Duration, Verdict) {
        p.0[0]
    }

    #[test]
    fn nobody_answers_free_after_three_probes_and_a_wait() {
        let s = ProbeSettings::default();
        let r = simulate(Probe::new(Instant::now()), &s, ms(2000), |_| false);
        assert_eq!(
            first(&r),
            (ms(400), Verdict::Free),
            "two intervals after the last probe"
        );
        assert_eq!(r.1, vec![ms(0), ms(100), ms(200)]);
    }

    /// A host that has the address answers every probe: in use, after it kept answering the
    /// probes sent until the verdict (not only the first few).
    #[test]
    fn a_host_answering_every_probe_holds_the_ip() {
        let s = ProbeSettings::default();
        let r = simulate(Probe::new(Instant::now()), &s, ms(1500), |_| true);
        assert_eq!(first(&r), (ms(1001), Verdict::InUse { mac: OTHER }));
        assert!(
            r.1.len() >= 10,
            "probing goes on until the verdict: {:?}",
            r.1
        );
    }

    /// The previous owner answers for a while, then withdraws (an election handover while the
    /// IP is still fresh): free, not held — up to ~0.8 s of overlap with the default settings.
    #[test]
    fn a_previous_owner_withdrawing_is_not_a_conflict() {
        let s = ProbeSettings::default();
        for overlap in [150, 600, 750] {
            let r = simulate(Probe::new(Instant::now()), &s, ms(3000), |t| {
                t < ms(overlap)
            });
            assert_eq!(first(&r), (ms(1001), Verdict::Free), "overlap {overlap} ms");
        }
    }

    /// A host answering for longer: held; rounds follow each other at once for
    /// HANDOVER_BOUND, then every `retry`; freed when the host leaves.
    #[test]
    fn a_held_ip_is_probed_again_and_freed_when_the_host_leaves() {
        let s = ProbeSettings::default();
        let r = simulate(Probe::new(Instant::now()), &s, ms(30_000), |t| t < ms(9000));
        let times: Vec<Duration> = r.0.iter().map(|(t, _)| *t).collect();
        // Back to back, each a second after its first answer (≥ 5 s after the first: pause).
        assert_eq!(
            &times[..6],
            &[ms(1001), ms(2003), ms(3005), ms(4007), ms(5009), ms(6011)]
        );
        // Then a 5 s pause: 11011 → 11411, the host left at 9 s: free.
        assert_eq!(r.0[6], (ms(11_411), Verdict::Free));
    }

    /// Second review, F2: the previous owner withdraws just under 3 s late: the IP is announced
    /// at the end of the round that follows, not 5 s later.
    #[test]
    fn a_very_late_withdrawal_costs_one_round_not_a_retry() {
        let s = ProbeSettings::default();
        let r = simulate(Probe::new(Instant::now()), &s, ms(20_000), |t| t < ms(2850));
        let free =
            r.0.iter()
                .find(|(_, v)| *v == Verdict::Free)
                .map(|(t, _)| *t);
        assert!(free.is_some_and(|t| t < ms(4500)), "{:?}", r.0);
    }

    #[test]
    fn a_held_probe_starts_held() {
        let s = ProbeSettings::default();
        let p = Probe::held(Instant::now(), OTHER);
        assert_eq!(p.held_by(), Some(OTHER));
        let r = simulate(p, &s, ms(2000), |_| false);
        assert_eq!(first(&r), (ms(400), Verdict::Free));
    }

    #[test]
    fn one_probe_with_a_long_interval_still_needs_a_lasting_claim() {
        let s = ProbeSettings {
            count: 1,
            interval: Duration::from_secs(2),
            ..Default::default()
        };
        let r = simulate(Probe::new(Instant::now()), &s, ms(5000), |_| true);
        assert_eq!(first(&r).1, Verdict::InUse { mac: OTHER });
        assert_eq!(&r.1[..2], &[ms(0), ms(2000)]);
        let r = simulate(Probe::new(Instant::now()), &s, ms(5000), |_| false);
        assert_eq!(first(&r), (ms(4000), Verdict::Free));
    }

    /// After a stall (the task was not polled), the round restarts: no verdict on probes nobody
    /// had time to answer — neither in a first round nor while held.
    #[test]
    fn a_stall_restarts_the_round() {
        let s = ProbeSettings::default();
        let t0 = Instant::now();
        let mut p = Probe::new(t0);
        let r = p.step(t0 + ms(5000), &s);
        assert_eq!((r.send, r.verdict), (1, None));
        let mut held = Probe::held(t0, OTHER);
        held.claim(t0 + ms(1), OTHER);
        let r = held.step(t0 + ms(10_000), &s);
        assert_eq!((r.send, r.verdict), (1, None));
        assert_eq!(held.held_by(), Some(OTHER));
    }

    /// Settings the CLI refuses still do not hang or panic the task.
    #[test]
    fn degenerate_settings_neither_hang_nor_panic() {
        let t0 = Instant::now();
        let zero = ProbeSettings {
            interval: Duration::ZERO,
            ..Default::default()
        };
        let mut p = Probe::new(t0);
        p.claim(t0, OTHER);
        let r = p.step(t0 + ms(1), &zero);
        assert!(r.send >= 1 && r.send < 10_000, "{r:?}");
        let huge = ProbeSettings {
            interval: Duration::from_secs(u64::MAX / 2),
            ..Default::default()
        };
        let mut p = Probe::new(t0);
        let _ = p.next_due(&huge);
        let r = p.step(t0, &huge);
        assert_eq!(r.send, 1);
    }
}
