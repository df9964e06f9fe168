//! Coexistence with another writer of `status.loadBalancer.ingress`: never a write war (DESIGN
//! R8). Pure: no `kube`, no `tokio`; time comes in as [`Instant`]s from the caller.
//!
//! The status is written with a forced server-side apply, so a status written once by another
//! implementation is simply replaced (case C-07). But when another field manager keeps rewriting
//! it (say another load balancer that also treats class-less Services as its own), replacing it
//! every time would be an endless war. The policy, per Service:
//!
//! - An *episode* is one `(spec digest, desired addresses)` pair. Within an episode ferrolb
//!   writes the status at most [`MAX_WRITES`] times (3), counting every successful write, the
//!   first one included. Only another writer can make us write the same value again in one
//!   episode, so the bound holds whatever that writer does.
//! - When the status differs once more after the last allowed write, the Service is *contested*:
//!   no further write, one Warning Event ([`STATUS_WRITE_CONFLICT`]) naming the other field
//!   manager and the fix ([`conflict_message`]). The allocation stays reserved: the address is
//!   neither freed nor handed to anyone else, and the pool still counts it as assigned.
//! - A contested Service is tried again when its spec changes (new episode) or after the long
//!   backoff of [`Policy::backoff`] (default 10 minutes; a fresh episode of up to 3 writes).
//! - If the status comes to say what we want without our writing (the other writer stopped and
//!   wrote ours, or gave up), the Service is no longer contested.
//!
//! Services have no `metadata.generation` (the API server does not maintain it for them), so the
//! "spec generation" is a digest of `spec` computed by the glue (`ferrolb_controller::service::spec_digest`).
//! State lives only in the leader's memory: a new leader starts afresh (at most 3 more writes).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use crate::ServiceKey;

/// Reason of the Warning Event published when ferrolb stops writing a contested status.
pub const STATUS_WRITE_CONFLICT: &str = "StatusWriteConflict";

/// Most status writes of one value per Service and spec (one episode) before backing off.
pub const MAX_WRITES: u32 = 3;

/// Default time after which a contested Service whose spec did not change is tried again.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(600);

/// The numbers of the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Writes per episode before backing off ([`MAX_WRITES`]; 0 is read as 1).
    pub max_writes: u32,
    /// How long a contested Service with an unchanged spec is left alone
    /// (`--status-conflict-backoff`).
    pub backoff: Duration,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_writes: MAX_WRITES,
            backoff: DEFAULT_BACKOFF,
        }
    }
}

/// What to do about a Service whose status differs from what ferrolb wants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Write the status (then report success with [`Contests::wrote`]).
    Write,
    /// Contested and still backing off: leave the status alone until `until`.
    Hold {
        /// When the Service will be tried again if its spec does not change first.
        until: Instant,
    },
    /// Contested from now on: leave the status alone; publish the Warning Event if `warn` (once
    /// per episode).
    BackOff {
        /// Our writes in this episode (the bound that was reached).
        writes: u32,
        /// Whether this is the first back-off of the episode (publish the Event).
        warn: bool,
        /// When the Service will be tried again if its spec does not change first.
        until: Instant,
    },
}

/// One episode of one Service.
#[derive(Debug, Clone)]
struct Episode {
    spec: u64,
    desired: Vec<IpAddr>,
    writes: u32,
    /// Since when we have been backing off.
    backed_off: Option<Instant>,
    warned: bool,
}

impl Episode {
    fn fresh(spec: u64, desired: &[IpAddr]) -> Episode {
        Episode {
            spec,
            desired: desired.to_vec(),
            writes: 0,
            backed_off: None,
            warned: false,
        }
    }

    fn is(&self, spec: u64, desired: &[IpAddr]) -> bool {
        self.spec == spec && self.desired == desired
    }
}

/// The write history of every Service whose status ferrolb had to write, and the verdicts.
/// Memory: one small entry per such Service, dropped by [`Contests::forget`].
#[derive(Debug, Clone, Default)]
pub struct Contests {
    policy: Policy,
    episodes: BTreeMap<ServiceKey, Episode>,
}

impl Contests {
    /// No history yet.
    pub fn new(policy: Policy) -> Contests {
        Contests {
            policy,
            episodes: BTreeMap::new(),
        }
    }

    /// The policy in force.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The status of `key` differs from `desired` (and no write of ours is on its way): write or
    /// hold back. `spec` is the digest of the Service's spec; `now` the current time.
    pub fn assess(
        &mut self,
        key: &ServiceKey,
        spec: u64,
        desired: &[IpAddr],
        now: Instant,
    ) -> Verdict {
        let policy = self.policy;
        let ep = self
            .episodes
            .entry(key.clone())
            .or_insert_with(|| Episode::fresh(spec, desired));
        if !ep.is(spec, desired) {
            *ep = Episode::fresh(spec, desired);
        }
        if let Some(since) = ep.backed_off {
            let until = since + policy.backoff;
            if now < until {
                return Verdict::Hold { until };
            }
            *ep = Episode::fresh(spec, desired);
        }
        if ep.writes < policy.max_writes.max(1) {
            return Verdict::Write;
        }
        ep.backed_off = Some(now);
        let warn = !ep.warned;
        ep.warned = true;
        Verdict::BackOff {
            writes: ep.writes,
            warn,
            until: now + policy.backoff,
        }
    }

    /// A status write for `key` succeeded (`spec` and `desired` as passed to
    /// [`Contests::assess`]).
    pub fn wrote(&mut self, key: &ServiceKey, spec: u64, desired: &[IpAddr]) {
        let ep = self
            .episodes
            .entry(key.clone())
            .or_insert_with(|| Episode::fresh(spec, desired));
        if !ep.is(spec, desired) {
            *ep = Episode::fresh(spec, desired);
        }
        ep.writes = ep.writes.saturating_add(1);
    }

    /// The status of `key` says what ferrolb wants: it is no longer contested. The write count of
    /// the episode is kept (a status matching right after our own write is no sign of peace).
    pub fn settled(&mut self, key: &ServiceKey) {
        if let Some(ep) = self.episodes.get_mut(key) {
            ep.backed_off = None;
        }
    }

    /// The Service is gone or no longer ours: drop its history.
    pub fn forget(&mut self, key: &ServiceKey) {
        self.episodes.remove(key);
    }

    /// Whether ferrolb is backing off from the status of `key`.
    pub fn is_contested(&self, key: &ServiceKey) -> bool {
        self.episodes
            .get(key)
            .is_some_and(|e| e.backed_off.is_some())
    }

    /// Number of contested Services (the `status_contested` gauge).
    pub fn contested(&self) -> usize {
        self.episodes
            .values()
            .filter(|e| e.backed_off.is_some())
            .count()
    }

    /// The earliest end of a long backoff, if any Service is contested: wake up then.
    pub fn next_retry(&self) -> Option<Instant> {
        self.episodes
            .values()
            .filter_map(|e| e.backed_off)
            .min()
            .map(|since| since + self.policy.backoff)
    }
}

/// The text of the [`STATUS_WRITE_CONFLICT`] Event.
///
/// `manager`: the other field manager owning `status.loadBalancer`, if one could be identified;
/// `ips`: what ferrolb keeps reserved; `writes`: our writes in the episode; `backoff`: until the
/// retry; `lb_class`: our `--lb-class`; `class_less`: whether the Service has no
/// `spec.loadBalancerClass` (then `--default-class=false` is a fix too).
pub fn conflict_message(
    manager: Option<&str>,
    ips: &[IpAddr],
    writes: u32,
    backoff: Duration,
    lb_class: &str,
    class_less: bool,
) -> String {
    let who = match manager {
        Some(m) => format!("field manager {m:?}"),
        None => "another writer".to_owned(),
    };
    let ips = if ips.is_empty() {
        "an empty status".to_owned()
    } else {
        ips.iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fix = if class_less {
        format!(
            "set spec.loadBalancerClass to separate the implementations ({lb_class:?} for ferrolb, \
             or the other implementation's class), or run ferrolb-controller with \
             --default-class=false to leave class-less Services to the other implementation"
        )
    } else {
        format!(
            "the other writer ignores spec.loadBalancerClass={lb_class:?}; configure it to leave \
             this class alone, or give this Service the other implementation's class"
        )
    };
    format!(
        "status.loadBalancer.ingress keeps being overwritten by {who}: ferrolb wrote {ips} {writes} \
         time(s) for this spec and stops writing it to avoid a write war; {ips} stays reserved \
         for this Service; ferrolb tries again when the Service's spec changes or after {}s. \
         Fix: {fix}",
        backoff.as_secs()
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use proptest::prelude::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn key() -> ServiceKey {
        ServiceKey::new("ns", "svc")
    }

    /// What one pass does in the glue: a matching status settles, a differing one is assessed;
    /// a `Write` verdict succeeds and the other writer may overwrite it again.
    #[derive(Debug, Clone, Copy)]
    enum Step {
        /// The other writer overwrites our status.
        Foreign,
        /// The Service's spec changes (new digest).
        SpecChange,
        /// Time passes, in seconds.
        Wait(u64),
        /// The other writer writes what we want (peace).
        Agree,
    }

    /// Replays a history; returns (our writes, events published, contested at the end).
    fn replay(policy: Policy, steps: &[Step]) -> (u32, u32, bool) {
        let mut c = Contests::new(policy);
        let t0 = Instant::now();
        let (mut now, mut spec, mut ours) = (t0, 1_u64, false);
        let desired = [ip("198.51.100.1")];
        let (mut writes, mut events) = (0, 0);
        // Start: a new Service without status.
        let mut pass = |c: &mut Contests, now: Instant, spec: u64, ours: &mut bool| {
            if *ours {
                c.settled(&key());
                return;
            }
            match c.assess(&key(), spec, &desired, now) {
                Verdict::Write => {
                    c.wrote(&key(), spec, &desired);
                    writes += 1;
                    *ours = true;
                }
                Verdict::Hold { .. } => {}
                Verdict::BackOff { warn, .. } => events += u32::from(warn),
            }
        };
        pass(&mut c, now, spec, &mut ours);
        for s in steps {
            match s {
                Step::Foreign => ours = false,
                Step::SpecChange => spec += 1,
                Step::Wait(secs) => now += Duration::from_secs(*secs),
                Step::Agree => ours = true,
            }
            pass(&mut c, now, spec, &mut ours);
        }
        (writes, events, c.is_contested(&key()))
    }

    use Step::{Agree, Foreign, SpecChange, Wait};

    #[test]
    fn table() {
        let p = Policy::default();
        // (history, our writes, events, contested at the end)
        let cases: &[(&[Step], u32, u32, bool)] = &[
            // Nobody else writes: one write.
            (&[], 1, 0, false),
            (&[Wait(5), Wait(700)], 1, 0, false),
            // C-07: one foreign overwrite is replaced, no event.
            (&[Foreign], 2, 0, false),
            (&[Foreign, Foreign], 3, 0, false),
            // The third overwrite of our third write: back off, one event.
            (&[Foreign, Foreign, Foreign], 3, 1, true),
            (&[Foreign; 50], 3, 1, true),
            // A spec change retries (bounded again), with a second event.
            (&[Foreign, Foreign, Foreign, SpecChange], 4, 1, false),
            (
                &[
                    Foreign, Foreign, Foreign, SpecChange, Foreign, Foreign, Foreign,
                ],
                6,
                2,
                true,
            ),
            // Time alone does nothing before the backoff ends ...
            (&[Foreign, Foreign, Foreign, Wait(599), Foreign], 3, 1, true),
            // ... and retries (a fresh episode) after it.
            (&[Foreign, Foreign, Foreign, Wait(600)], 4, 1, false),
            (
                &[
                    Foreign,
                    Foreign,
                    Foreign,
                    Wait(600),
                    Foreign,
                    Foreign,
                    Foreign,
                ],
                6,
                2,
                true,
            ),
            // Peace while backed off: no longer contested, but the writes stay spent and the
            // event is not repeated.
            (&[Foreign, Foreign, Foreign, Agree], 3, 1, false),
            (&[Foreign, Foreign, Foreign, Agree, Foreign], 3, 1, true),
        ];
        for (steps, writes, events, contested) in cases {
            assert_eq!(
                replay(p, steps),
                (*writes, *events, *contested),
                "history {steps:?}"
            );
        }
    }

    #[test]
    fn new_desired_value_is_a_new_episode() {
        let mut c = Contests::new(Policy::default());
        let now = Instant::now();
        let (a, b) = ([ip("198.51.100.1")], [ip("198.51.100.2")]);
        for _ in 0..3 {
            assert_eq!(c.assess(&key(), 7, &a, now), Verdict::Write);
            c.wrote(&key(), 7, &a);
        }
        assert!(matches!(
            c.assess(&key(), 7, &a, now),
            Verdict::BackOff {
                writes: 3,
                warn: true,
                ..
            }
        ));
        assert_eq!(c.contested(), 1);
        // The allocator moved the Service (say its pool was deleted): write the new address.
        assert_eq!(c.assess(&key(), 7, &b, now), Verdict::Write);
        assert_eq!(c.contested(), 0);
        c.forget(&key());
        assert_eq!(c.next_retry(), None);
    }

    #[test]
    fn hold_until_and_next_retry() {
        let p = Policy {
            max_writes: 1,
            backoff: Duration::from_secs(30),
        };
        let mut c = Contests::new(p);
        let t0 = Instant::now();
        let a = [ip("2001:db8::1")];
        assert_eq!(c.assess(&key(), 1, &a, t0), Verdict::Write);
        c.wrote(&key(), 1, &a);
        let until = t0 + Duration::from_secs(30);
        assert_eq!(
            c.assess(&key(), 1, &a, t0),
            Verdict::BackOff {
                writes: 1,
                warn: true,
                until
            }
        );
        assert_eq!(c.next_retry(), Some(until));
        assert_eq!(
            c.assess(&key(), 1, &a, t0 + Duration::from_secs(10)),
            Verdict::Hold { until }
        );
        assert_eq!(c.policy(), p);
    }

    #[test]
    fn messages_name_the_manager_and_the_fix() {
        let ips = [ip("198.51.100.1")];
        let m = conflict_message(
            Some("other-lb"),
            &ips,
            3,
            DEFAULT_BACKOFF,
            "ferrolb.io/l2",
            true,
        );
        assert!(m.contains("field manager \"other-lb\""), "{m}");
        assert!(m.contains("198.51.100.1 3 time(s)"), "{m}");
        assert!(m.contains("spec.loadBalancerClass"), "{m}");
        assert!(m.contains("--default-class=false"), "{m}");
        assert!(m.contains("after 600s"), "{m}");
        let m = conflict_message(None, &ips, 3, DEFAULT_BACKOFF, "ferrolb.io/l2", false);
        assert!(m.contains("by another writer"), "{m}");
        assert!(!m.contains("--default-class"), "{m}");
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            6 => Just(Foreign),
            1 => Just(SpecChange),
            2 => (0_u64..900).prop_map(Wait),
            1 => Just(Agree),
        ]
    }

    proptest! {
        /// Whatever the other writer does: at most 3 writes per spec and per backoff period,
        /// and at most one event per episode.
        #[test]
        fn writes_are_bounded(steps in prop::collection::vec(step(), 0..200)) {
            let p = Policy::default();
            let specs = 1 + steps.iter().filter(|s| matches!(s, SpecChange)).count() as u32;
            let waited: u64 = steps
                .iter()
                .map(|s| if let Wait(n) = s { *n } else { 0 })
                .sum();
            let periods = 1 + u32::try_from(waited / p.backoff.as_secs()).unwrap();
            let (writes, events, _) = replay(p, &steps);
            prop_assert!(writes <= MAX_WRITES * (specs + periods), "{writes} writes");
            prop_assert!(events <= specs + periods, "{events} events");
            // Without spec changes or long waits, never more than 3 writes.
            let quiet: Vec<Step> = steps
                .iter()
                .copied()
                .filter(|s| matches!(s, Foreign | Agree))
                .collect();
            let (writes, events, _) = replay(p, &quiet);
            prop_assert!(writes <= MAX_WRITES && events <= 1);
        }
    }
}
