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
        let last_probe = s.interval.saturating_mul(s.count.saturating_sub(1));
        let quiet = self.round_start + last_probe.saturating_add(s.interval.saturating_mul(2));
        match self.first_claim {
            Some(first) => quiet.max(first + s.confirm),
            None => quiet,
        }
    }

    fn probe_at(&self, n: u32, s: &ProbeSettings) -> Instant {
        self.round_start + s.interval.saturating_mul(n)
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
    /// [`Verdict::InUse`] the probe stays (held) and the next round starts
    /// [`ProbeSettings::retry`] later; after [`Verdict::Free`] the caller drops it.
    pub fn step(&mut self, now: Instant, s: &ProbeSettings) -> ProbeStep {
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
        let in_use = match (self.first_claim, self.last_claim, self.mac) {
            (Some(first), Some(last), Some(mac)) if last.duration_since(first) >= s.confirm / 2 => {
                Some(mac)
            }
            _ => None,
        };
        out.verdict = Some(match in_use {
            Some(mac) => {
                *self = Probe {
                    held: Some(mac),
                    ..Probe::new(now + s.retry)
                };
                Verdict::InUse { mac }
            }
            None => {
                self.held = None;
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

    /// Runs a probe from `t0` in 10 ms steps until a verdict; `answers(t)` says whether the other
    /// host answers a probe sent at `t` (its answer arrives 1 ms later). Returns the verdict, its
    /// time and the probe times.
    fn run(
        s: &ProbeSettings,
        answers: impl Fn(Duration) -> bool,
    ) -> (Verdict, Duration, Vec<Duration>) {
        let t0 = Instant::now();
        let mut p = Probe::new(t0);
        let mut sent = Vec::new();
        let mut pending: Vec<Duration> = Vec::new();
        for step in 0..10_000u64 {
            let now = t0 + ms(step);
            let answers_now = pending.iter().filter(|at| t0 + **at + ms(1) == now).count();
            for _ in 0..answers_now {
                p.claim(now, OTHER);
            }
            assert!(p.next_due(s) >= now || step == 0, "due in the past");
            let got = p.step(now, s);
            for _ in 0..got.send {
                sent.push(ms(step));
                if answers(ms(step)) {
                    pending.push(ms(step));
                }
            }
            if let Some(v) = got.verdict {
                return (v, ms(step), sent);
            }
        }
        panic!("no verdict");
    }

    #[test]
    fn nobody_answers_free_after_three_probes_and_a_wait() {
        let s = ProbeSettings::default();
        let (v, at, sent) = run(&s, |_| false);
        assert_eq!(v, Verdict::Free);
        assert_eq!(sent, vec![ms(0), ms(100), ms(200)]);
        assert_eq!(at, ms(400), "two intervals after the last probe");
    }

    /// A host that has the address answers every probe: in use, and it kept answering probes
    /// sent after the first answer (not only the first few).
    #[test]
    fn a_host_answering_every_probe_holds_the_ip() {
        let s = ProbeSettings::default();
        let (v, at, sent) = run(&s, |_| true);
        assert_eq!(v, Verdict::InUse { mac: OTHER });
        assert_eq!(at, ms(1001), "confirm after the first answer");
        assert!(
            sent.len() >= 10,
            "probing goes on until the verdict: {sent:?}"
        );
    }

    /// The previous owner answers the first two probes, then withdraws (an election handover
    /// while the IP is still fresh): free, about a second later than without it.
    #[test]
    fn a_previous_owner_withdrawing_is_not_a_conflict() {
        let s = ProbeSettings::default();
        let (v, at, _) = run(&s, |t| t < ms(150));
        assert_eq!(v, Verdict::Free);
        assert_eq!(at, ms(1001));
    }

    #[test]
    fn a_held_ip_is_probed_again_after_retry_and_freed_when_the_host_leaves() {
        let s = ProbeSettings::default();
        let t0 = Instant::now();
        let mut p = Probe::new(t0);
        p.step(t0, &s);
        p.claim(t0 + ms(1), OTHER);
        p.step(t0 + ms(600), &s);
        p.claim(t0 + ms(601), OTHER);
        let r = p.step(t0 + ms(1001), &s);
        assert_eq!(r.verdict, Some(Verdict::InUse { mac: OTHER }));
        assert_eq!(p.held_by(), Some(OTHER));
        // Between rounds: nothing to send; claims do not count for the next round.
        assert_eq!(p.next_due(&s), t0 + ms(1001) + s.retry);
        p.claim(t0 + ms(2000), OTHER);
        assert_eq!(p.step(t0 + ms(2000), &s), ProbeStep::default());
        // The next round: the host is gone.
        let start = t0 + ms(1001) + s.retry;
        assert_eq!(p.step(start, &s).send, 1);
        assert_eq!(p.step(start + ms(200), &s).send, 2);
        let r = p.step(start + ms(400), &s);
        assert_eq!(r.verdict, Some(Verdict::Free));
        assert_eq!(p.held_by(), None);
    }

    #[test]
    fn one_probe_with_a_long_interval_still_needs_a_lasting_claim() {
        let s = ProbeSettings {
            count: 1,
            interval: Duration::from_secs(2),
            ..Default::default()
        };
        let (v, _, sent) = run(&s, |_| true);
        assert_eq!(v, Verdict::InUse { mac: OTHER });
        assert_eq!(sent, vec![ms(0), ms(2000)]);
        let (v, at, _) = run(&s, |_| false);
        assert_eq!((v, at), (Verdict::Free, ms(4000)));
    }

    /// After a stall (the task was not polled), the due probes are sent at once and the
    /// verdict still needs the claims to last.
    #[test]
    fn a_late_step_sends_what_is_due_and_decides() {
        let s = ProbeSettings::default();
        let t0 = Instant::now();
        let mut p = Probe::new(t0);
        let r = p.step(t0 + ms(5000), &s);
        assert_eq!(r.send, 3);
        assert_eq!(r.verdict, Some(Verdict::Free));
    }
}
