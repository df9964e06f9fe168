//! Which `L2Announcement` objects to write (issue #12 part 2; the type is
//! [`ferrolb_crds::L2Announcement`]). Pure: no `kube`, no `tokio`; the daemon feeds the plan and
//! the objects its watch stored, and hands the [`Op`]s to a writer task off the data path.
//!
//! - The **owner** of an IP that it announces (not while probing or holding it) wants an object
//!   naming itself, its interfaces and the IP's Services; it writes one only when the stored
//!   object differs in one of those (or is missing): zero writes at steady state.
//! - A speaker **deletes nothing** and writes only objects naming its own node: its Role grants
//!   no `delete`, and the admission policy `deploy/speaker-admission.yaml` denies a write naming
//!   another node (issue #27 item 5). The controller deletes the objects of IPs no Service holds
//!   any more and of Nodes that are gone.
//! - A write in flight is not repeated until the watch shows its result or [`RETRY_AFTER`] has
//!   passed (the watch lags the write by a round trip; a failed write is retried).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use ferrolb_crds::announcement::{AddressInUse, NodeNetwork};
use ferrolb_crds::announcement_name;

use crate::plan::Plan;

/// How long a write is trusted to be in flight before it is sent again.
pub const RETRY_AFTER: Duration = Duration::from_secs(10);

/// The parts of a stored object the speaker compares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Stored {
    /// `spec.node`.
    pub node: String,
    /// `spec.interfaces`.
    pub interfaces: Vec<String>,
    /// `spec.services`.
    pub services: Vec<String>,
    /// `spec.since` as stored (RFC 3339), kept while the node stays the same.
    pub since: Option<String>,
    /// `spec.heldBy`: the node holds the IP back, another host (this MAC) has it.
    pub held_by: Option<String>,
}

/// One write: always an object naming this node (no variant deletes, issue #27 item 5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// Server-side apply of the whole spec.
    Apply {
        /// Object name ([`announcement_name`]).
        name: String,
        /// The IP.
        ip: IpAddr,
        /// This node.
        node: String,
        /// Interfaces it answers on.
        interfaces: Vec<String>,
        /// `namespace/name` of the Services.
        services: Vec<String>,
        /// `spec.since` to keep; `None`: now (a new owner).
        since: Option<String>,
        /// `spec.heldBy`: set while the IP is held (not announced).
        held_by: Option<String>,
    },
    /// Server-side apply of this node's membership report
    /// ([`ferrolb_crds::announcement::member_report_name`]): `ip` empty, `membership.members` set,
    /// `membership.observed` the time of the write ([`MemberReportPlanner`]).
    Members {
        /// Object name (`node-<node>`).
        name: String,
        /// This node.
        node: String,
        /// Alive members this speaker counts, itself included.
        members: u32,
        /// `spec.networks`: the node's IPv4 networks, only while an automatic pool exists
        /// (issue #28, [`crate::networks`]); empty otherwise (the field is then removed).
        networks: Vec<NodeNetwork>,
        /// `spec.inUse`: candidates another host answered ([`crate::networks::CandidateProbes`]).
        in_use: Vec<AddressInUse>,
        /// `spec.unanswered`: candidates probed with no answer, as merged entries
        /// ([`crate::networks::CandidateProbes::unanswered`]).
        unanswered: Vec<String>,
    },
}

impl Op {
    /// The object name.
    pub fn name(&self) -> &str {
        match self {
            Op::Apply { name, .. } | Op::Members { name, .. } => name,
        }
    }
}

/// Shortest time between two writes of a node's membership report.
pub const MEMBER_REPORT_EVERY: Duration = Duration::from_secs(10);

/// When a speaker writes its node's membership report (`ferrolb status` reads every node's count
/// and says whether they agree; docs/design.md, "Membership reports"): when the count it sees
/// differs from the stored report (or there is none), at most once per [`MEMBER_REPORT_EVERY`].
/// Zero writes at steady state; a membership that flaps costs one small write per 10 s per node,
/// and a count that settles within 10 s of a write is written once the 10 s are over. A failed
/// write is retried the same way (the stored report still differs).
#[derive(Debug, Default)]
pub struct MemberReportPlanner {
    last_write: Option<Instant>,
}

impl MemberReportPlanner {
    /// The write node `me` should make now, if any: `members` is the count it sees now, `node`
    /// what it found for automatic pools ([`AutoFindings`], all empty unless an automatic pool
    /// exists); `stored` the count and findings in its stored report (`None`: no report, or one
    /// without a count). Networks and probe verdicts change rarely, so they share the count's
    /// write and its rate limit.
    pub fn plan(
        &mut self,
        now: Instant,
        me: &str,
        members: u32,
        node: AutoFindings<'_>,
        stored: Option<(u32, AutoFindings<'_>)>,
    ) -> Option<Op> {
        if stored == Some((members, node)) {
            return None;
        }
        let (networks, in_use, unanswered) = node;
        if self
            .last_write
            .is_some_and(|at| now.saturating_duration_since(at) < MEMBER_REPORT_EVERY)
        {
            return None;
        }
        self.last_write = Some(now);
        Some(Op::Members {
            name: ferrolb_crds::announcement::member_report_name(me),
            node: me.to_owned(),
            members,
            networks: networks.to_vec(),
            in_use: in_use.to_vec(),
            unanswered: unanswered.to_vec(),
        })
    }
}

/// What a node report says for automatic pools (issue #28): `(spec.networks, spec.inUse,
/// spec.unanswered)` — the node's IPv4 networks, the candidates another host answered, and the
/// candidates probed with no answer as merged entries ([`crate::networks::CandidateProbes`]).
pub type AutoFindings<'a> = (&'a [NodeNetwork], &'a [AddressInUse], &'a [String]);

/// Remembers the writes in flight.
#[derive(Debug, Default)]
pub struct AnnouncementPlanner {
    inflight: BTreeMap<String, (Op, Instant)>,
    /// Per object: when this speaker last wrote it, how many times in a row another writer
    /// changed it back soon after, and until when this speaker leaves it alone.
    fights: BTreeMap<String, Fight>,
}

#[derive(Debug, Clone, Copy)]
struct Fight {
    wrote: Instant,
    rounds: u32,
    quiet_until: Option<Instant>,
}

/// A write undone by another speaker within this long after ours is a fight (two speakers that
/// both believe they own the IP).
pub const FIGHT_WINDOW: Duration = Duration::from_secs(60);
/// The first pause in a fight, doubled each round up to [`FIGHT_BACKOFF_MAX`].
pub const FIGHT_BACKOFF: Duration = Duration::from_secs(10);
/// The longest pause in a fight.
pub const FIGHT_BACKOFF_MAX: Duration = Duration::from_secs(300);
/// Most interfaces listed in a report (the CRD's `maxItems`).
pub const MAX_INTERFACES: usize = 32;

impl AnnouncementPlanner {
    /// Forget what is in flight (e.g. after the claim gate closed).
    pub fn forget(&mut self) {
        self.inflight.clear();
    }

    /// Whether `op` may be written now, given that `undone` says another writer changed the
    /// object since our last write; records a new round of a fight and its pause.
    fn may_write(&mut self, now: Instant, name: &str, undone: bool) -> bool {
        let Some(f) = self.fights.get_mut(name) else {
            return true;
        };
        if f.quiet_until.is_some_and(|t| now < t) {
            return false;
        }
        if !undone {
            return true;
        }
        if f.quiet_until.take().is_some() {
            // The pause is over: write once more; if it is undone again, the next pause doubles.
            return true;
        }
        if now.saturating_duration_since(f.wrote) >= FIGHT_WINDOW {
            f.rounds = 0; // after a long peace: a new disagreement, not the old fight
            return true;
        }
        f.rounds = f.rounds.saturating_add(1);
        let pause = FIGHT_BACKOFF
            .saturating_mul(1u32 << f.rounds.saturating_sub(1).min(16))
            .min(FIGHT_BACKOFF_MAX);
        f.quiet_until = now.checked_add(pause);
        false
    }

    /// The writes node `me` should make now. `interfaces_of(ip)` names the interfaces an IP it
    /// owns is answered on, `None` while it is not announced (probing, held); `held` maps the
    /// IPs it holds to the MAC of the host that has them; `stored` the objects by name. Every
    /// [`Op`] names `me`: objects of IPs nobody announces are left to the controller.
    pub fn plan(
        &mut self,
        now: Instant,
        me: &str,
        plan: &Plan,
        interfaces_of: impl Fn(IpAddr) -> Option<Vec<String>>,
        held: &BTreeMap<IpAddr, String>,
        stored: &BTreeMap<String, Stored>,
    ) -> Vec<Op> {
        let mut wanted: Vec<Op> = Vec::new();
        for (ip, p) in &plan.ips {
            if p.owner.as_deref() != Some(me) {
                continue;
            }
            let held_by = held.get(ip).cloned();
            let interfaces = match (&held_by, interfaces_of(*ip)) {
                (Some(_), _) => Vec::new(),
                (None, Some(mut i)) if !i.is_empty() => {
                    i.truncate(MAX_INTERFACES);
                    i
                }
                _ => continue, // being probed, or no interface yet
            };
            let name = announcement_name(*ip);
            let current = stored.get(&name);
            let same = current.is_some_and(|s| {
                s.node == me
                    && s.interfaces == interfaces
                    && s.services == p.services
                    && s.held_by == held_by
            });
            if same {
                continue;
            }
            wanted.push(Op::Apply {
                name,
                ip: *ip,
                node: me.to_owned(),
                interfaces,
                services: p.services.clone(),
                since: current
                    .filter(|s| s.node == me)
                    .and_then(|s| s.since.clone()),
                held_by,
            });
        }
        let names: BTreeSet<&str> = wanted.iter().map(Op::name).collect();
        self.inflight
            .retain(|name, _| names.contains(name.as_str()));
        self.fights.retain(|name, f| {
            names.contains(name.as_str()) || now.saturating_duration_since(f.wrote) < FIGHT_WINDOW
        });
        let mut out = Vec::new();
        for op in wanted {
            let repeat = self.inflight.get(op.name()).is_some_and(|(sent, at)| {
                *sent == op && now.saturating_duration_since(*at) < RETRY_AFTER
            });
            if repeat {
                continue;
            }
            // Another writer undid our last write: the object names someone else. Missing after
            // our apply: the write failed, the watch lags, or the controller deleted it as stale
            // (retried after RETRY_AFTER).
            let undone = stored.get(op.name()).is_some_and(|s| s.node != me);
            if !self.may_write(now, op.name(), undone) {
                continue;
            }
            self.inflight
                .insert(op.name().to_owned(), (op.clone(), now));
            let f = self.fights.entry(op.name().to_owned()).or_insert(Fight {
                wrote: now,
                rounds: 0,
                quiet_until: None,
            });
            f.wrote = now;
            out.push(op);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::plan::IpPlan;

    #[test]
    fn member_reports_are_written_on_change_at_most_every_ten_seconds() {
        let t0 = Instant::now();
        let mut p = MemberReportPlanner::default();
        let op = |members| Op::Members {
            name: "node-node-1".into(),
            node: "node-1".into(),
            members,
            networks: vec![],
            in_use: vec![],
            unanswered: vec![],
        };
        assert_eq!(
            p.plan(t0, "node-1", 1, (&[], &[], &[]), None),
            Some(op(1)),
            "no report yet"
        );
        // The count changes 1 s later: held back until 10 s after the first write.
        assert_eq!(
            p.plan(
                t0 + Duration::from_secs(1),
                "node-1",
                3,
                (&[], &[], &[]),
                Some((1, (&[], &[], &[])))
            ),
            None
        );
        assert_eq!(
            p.plan(
                t0 + Duration::from_secs(9),
                "node-1",
                3,
                (&[], &[], &[]),
                Some((1, (&[], &[], &[])))
            ),
            None
        );
        let t1 = t0 + MEMBER_REPORT_EVERY;
        assert_eq!(
            p.plan(t1, "node-1", 3, (&[], &[], &[]), Some((1, (&[], &[], &[])))),
            Some(op(3))
        );
        // Steady state: the stored count is the seen one, nothing is written.
        let later = t1 + Duration::from_secs(3600);
        assert_eq!(
            p.plan(
                later,
                "node-1",
                3,
                (&[], &[], &[]),
                Some((3, (&[], &[], &[])))
            ),
            None
        );
        // A lost write (the stored count never changed) is retried after the same 10 s.
        assert_eq!(
            p.plan(
                later,
                "node-1",
                2,
                (&[], &[], &[]),
                Some((3, (&[], &[], &[])))
            ),
            Some(op(2))
        );
        assert_eq!(
            p.plan(
                later + Duration::from_secs(5),
                "node-1",
                2,
                (&[], &[], &[]),
                Some((3, (&[], &[], &[])))
            ),
            None
        );
        assert_eq!(
            p.plan(
                later + MEMBER_REPORT_EVERY,
                "node-1",
                2,
                (&[], &[], &[]),
                Some((3, (&[], &[], &[])))
            ),
            Some(op(2))
        );
        // A network appearing (an automatic pool was created) is a change like a count.
        let eth0 = [NodeNetwork {
            interface: "eth0".into(),
            prefix: "192.168.49.2/24".into(),
            gateway: Some("192.168.49.1".into()),
        }];
        let t2 = later + Duration::from_secs(3600);
        assert_eq!(
            p.plan(
                t2,
                "node-1",
                2,
                (&eth0, &[], &[]),
                Some((2, (&[], &[], &[])))
            ),
            Some(Op::Members {
                name: "node-node-1".into(),
                node: "node-1".into(),
                members: 2,
                networks: eth0.to_vec(),
                in_use: vec![],
                unanswered: vec![],
            })
        );
        assert_eq!(
            p.plan(
                t2 + MEMBER_REPORT_EVERY,
                "node-1",
                2,
                (&eth0, &[], &[]),
                Some((2, (&eth0, &[], &[])))
            ),
            None
        );
        // So is an answer to a probe.
        let answered = [AddressInUse {
            ip: "192.168.49.254".into(),
            mac: "02:42:c0:a8:31:fe".into(),
        }];
        let t3 = t2 + MEMBER_REPORT_EVERY * 2;
        assert!(matches!(
            p.plan(t3, "node-1", 2, (&eth0, &answered, &[]), Some((2, (&eth0, &[], &[])))),
            Some(Op::Members { in_use, .. }) if in_use == answered
        ));
        // And a quiet probe (the controller hands out only such addresses).
        let quiet = ["192.168.49.252-192.168.49.253".to_owned()];
        let t4 = t3 + MEMBER_REPORT_EVERY;
        assert!(matches!(
            p.plan(t4, "node-1", 2, (&eth0, &answered, &quiet), Some((2, (&eth0, &answered, &[])))),
            Some(Op::Members { unanswered, .. }) if unanswered == quiet
        ));
    }

    const IP: &str = "198.51.100.10";

    fn ip() -> IpAddr {
        IP.parse().unwrap()
    }

    fn plan_with(owner: Option<&str>, reporter: &str) -> Plan {
        let mut p = Plan::default();
        p.ips.insert(
            ip(),
            IpPlan {
                owner: owner.map(str::to_owned),
                services: vec!["default/web".into()],
                no_owner_reason: None,
                warnings: vec![],
                reporter: Some(reporter.into()),
                label_set_aside: false,
            },
        );
        p
    }

    fn no_held() -> BTreeMap<IpAddr, String> {
        BTreeMap::new()
    }

    fn eth0(_: IpAddr) -> Option<Vec<String>> {
        Some(vec!["eth0".into()])
    }

    fn stored(node: &str) -> BTreeMap<String, Stored> {
        BTreeMap::from([(
            announcement_name(ip()),
            Stored {
                node: node.into(),
                interfaces: vec!["eth0".into()],
                services: vec!["default/web".into()],
                since: Some("2026-12-01T19:00:00Z".into()),
                held_by: None,
            },
        )])
    }

    /// The owner writes once; nothing while the write is in flight or once stored; a new owner
    /// overwrites with a new `since`; the old owner says nothing.
    #[test]
    fn the_owner_writes_on_change_only() {
        let t0 = Instant::now();
        let mut p = AnnouncementPlanner::default();
        let plan = plan_with(Some("node-1"), "node-2");
        let ops = p.plan(t0, "node-1", &plan, eth0, &no_held(), &BTreeMap::new());
        assert!(
            matches!(&ops[..], [Op::Apply { since: None, .. }]),
            "{ops:?}"
        );
        assert!(
            p.plan(t0, "node-1", &plan, eth0, &no_held(), &BTreeMap::new())
                .is_empty()
        );
        let later = t0 + RETRY_AFTER;
        assert_eq!(
            p.plan(later, "node-1", &plan, eth0, &no_held(), &BTreeMap::new())
                .len(),
            1
        );
        // Stored as wanted: steady state, no writes.
        assert!(
            p.plan(later, "node-1", &plan, eth0, &no_held(), &stored("node-1"))
                .is_empty()
        );
        // Interfaces change: rewritten, since kept.
        let eth1 = |_: IpAddr| Some(vec!["eth1".into()]);
        let ops = p.plan(later, "node-1", &plan, eth1, &no_held(), &stored("node-1"));
        assert!(
            matches!(&ops[..], [Op::Apply { since: Some(s), .. }] if s == "2026-12-01T19:00:00Z"),
            "{ops:?}"
        );
        // Failover: node-2 owns it now, the object still names node-1.
        let moved = plan_with(Some("node-2"), "node-2");
        let mut q = AnnouncementPlanner::default();
        let ops = q.plan(later, "node-2", &moved, eth0, &no_held(), &stored("node-1"));
        assert!(matches!(&ops[..], [Op::Apply { since: None, node, .. }] if node == "node-2"));
        assert!(
            p.plan(later, "node-1", &moved, eth0, &no_held(), &stored("node-1"))
                .is_empty()
        );
    }

    #[test]
    fn an_ip_being_probed_or_held_is_not_written() {
        let mut p = AnnouncementPlanner::default();
        let plan = plan_with(Some("node-1"), "node-1");
        let none = |_: IpAddr| None;
        assert!(
            p.plan(
                Instant::now(),
                "node-1",
                &plan,
                none,
                &no_held(),
                &BTreeMap::new()
            )
            .is_empty()
        );
    }

    /// A held IP is reported with `heldBy` and no interfaces, while it is held.
    #[test]
    fn a_held_ip_is_reported_as_held() {
        let plan = plan_with(Some("node-1"), "node-1");
        let held = BTreeMap::from([(ip(), "02:00:00:00:00:66".to_owned())]);
        let none = |_: IpAddr| None;
        let ops = AnnouncementPlanner::default().plan(
            Instant::now(),
            "node-1",
            &plan,
            none,
            &held,
            &stored("node-1"),
        );
        assert!(
            matches!(&ops[..], [Op::Apply { interfaces, held_by: Some(m), .. }] if interfaces.is_empty() && m == "02:00:00:00:00:66"),
            "{ops:?}"
        );
    }

    /// Second review, F4: two speakers that both believe they own the IP (a partition) undo each
    /// other's write; each backs off (10 s, 20 s, … up to 5 min) instead of writing forever.
    #[test]
    fn two_writers_fighting_back_off() {
        let t0 = Instant::now();
        let mut a = AnnouncementPlanner::default();
        let mut b = AnnouncementPlanner::default();
        let (pa, pb) = (
            plan_with(Some("node-1"), "node-1"),
            plan_with(Some("node-2"), "node-1"),
        );
        let mut holder = String::new();
        let (mut writes_a, mut writes_b) = (0, 0);
        for step in 0..(10 * 60 * 2) {
            let now = t0 + Duration::from_millis(500) * step;
            let store = if holder.is_empty() {
                BTreeMap::new()
            } else {
                stored(&holder)
            };
            for op in a.plan(now, "node-1", &pa, eth0, &no_held(), &store) {
                writes_a += 1;
                let (Op::Apply { node, .. } | Op::Members { node, .. }) = op;
                holder = node;
            }
            let store = stored(&holder);
            for op in b.plan(now, "node-2", &pb, eth0, &no_held(), &store) {
                writes_b += 1;
                let (Op::Apply { node, .. } | Op::Members { node, .. }) = op;
                holder = node;
            }
        }
        // Ten minutes: without backoff ~1200 writes each; with pauses of 10 s doubling to 5 min,
        // about seven each.
        assert!(writes_a + writes_b <= 20, "{writes_a} + {writes_b}");
        assert!(writes_a >= 1 && writes_b >= 1);
    }

    /// Issue #27 item 5: nobody announces the IP any more (no plan entry, or no eligible node):
    /// no speaker writes anything — neither a delete (its Role has none; the controller removes
    /// the object) nor an object naming another node (the admission policy would deny it).
    #[test]
    fn a_speaker_never_deletes_nor_writes_for_another_node() {
        let t0 = Instant::now();
        for plan in [Plan::default(), plan_with(None, "node-2")] {
            for me in ["node-1", "node-2", "node-3"] {
                let ops = AnnouncementPlanner::default().plan(
                    t0,
                    me,
                    &plan,
                    eth0,
                    &no_held(),
                    &stored("node-1"),
                );
                assert!(ops.is_empty(), "{me}: {ops:?}");
            }
        }
        // Owners write objects naming themselves only.
        for owner in ["node-1", "node-2"] {
            let plan = plan_with(Some(owner), "node-1");
            for me in ["node-1", "node-2"] {
                let ops = AnnouncementPlanner::default().plan(
                    t0,
                    me,
                    &plan,
                    eth0,
                    &no_held(),
                    &stored("node-1"),
                );
                assert!(
                    ops.iter()
                        .all(|op| matches!(op, Op::Apply { node, .. } if node == me)),
                    "{me}: {ops:?}"
                );
            }
        }
    }
}
