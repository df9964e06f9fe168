//! The claim gate: *whether* this speaker may claim IPs at all, before the per-IP election asks
//! *which* (issue #8 rules F1, F3, F4; DESIGN S10, S12). Pure: no `kube`, no `tokio`; time comes
//! in as an argument.
//!
//! The election ([`crate::plan`]) is only as good as the member set it is fed. Three situations
//! feed it a set that is too small, and each would make a second node answer for IPs that
//! another node serves:
//!
//! - **Cold start, restart, rejoin (F1).** A speaker that has just started sees only itself. The
//!   gate stays *converging* until every speaker that should exist has been heard from, or
//!   [`ClaimSettings::converge_timeout`] has passed, whichever comes first. While converging the
//!   speaker answers for nothing, announces nothing and emits no Event. With three voters or
//!   more, "heard from" is two-way evidence from a majority and every other voter listed by the
//!   membership ([`ClaimGate::tick_listing`]): a voter that can reach us only through a third
//!   member (a one-way cut) is known to be there, and waiting for its direct word would leave
//!   the IPs the others plan on us unanswered for the whole timeout.
//! - **Partition (F3).** A speaker that cannot hear enough of its peers (membership port
//!   blocked or flooded, wrong key after a rotation) sees the others as down. The rule: a
//!   speaker may claim only while it sees a *majority* of the speakers that should exist
//!   ([`has_quorum`]); otherwise it is in the *minority* and withdraws everything. The majority
//!   side elects owners among itself as usual, so after the split each IP has at most one
//!   answerer. Exactly half is decided by the side that holds the smallest node name among the
//!   expected speakers; clusters of one or two speakers have no majority to consult and always
//!   claim (availability; documented in `docs/speaker.md`).
//! - **Stall (F4).** A speaker that was stopped (SIGSTOP, a long GC-like pause, CPU starvation)
//!   for longer than the others need to declare it down may resume with a stale member set in
//!   which it is still the owner, while its successor already answers. A gap between two ticks
//!   longer than [`ClaimSettings::stall_threshold`] closes the gate; it re-opens after
//!   [`ClaimSettings::resync`] and a fresh convergence, by which time the membership has
//!   processed the traffic that arrived during the stall (refuted or rejoined).
//!
//! "The speakers that should exist" ([`expected_speakers`]) are the Nodes in the speaker's API
//! view whose `Ready` condition is not `False`/`Unknown`, plus the speaker itself: the speaker
//! DaemonSet runs on every Linux node (`deploy/speaker.yaml` tolerates the control-plane taint).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use crate::eligibility::Cluster;

/// Timings of the claim gate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimSettings {
    /// Longest wait, after a start, rejoin or stall, for every expected speaker to be heard from
    /// before claiming with whatever the membership shows. Default 3 s: three peer
    /// announcement rounds (`peer_announce_interval` = 1 s), so a peer that exists answers
    /// within it; only expected speakers that are not running cost this wait.
    pub converge_timeout: Duration,
    /// A gap between two gate ticks longer than this is a stall. Default: the membership's
    /// `probe_period + suspect_timeout` (300 ms), the shortest time in which the others can
    /// declare this speaker down and take its IPs.
    pub stall_threshold: Duration,
    /// After a stall, claim nothing for at least this long, so the membership processes what
    /// arrived meanwhile (suspicions to refute, a "you are down" to rejoin from). Default: the
    /// stall threshold.
    pub resync: Duration,
}

impl ClaimSettings {
    /// The settings derived from the membership timings (see the fields).
    pub fn for_membership(probe_period: Duration, suspect_timeout: Duration) -> Self {
        let stall = probe_period.saturating_add(suspect_timeout);
        ClaimSettings {
            converge_timeout: Duration::from_secs(3),
            stall_threshold: stall,
            resync: stall,
        }
    }
}

/// Where this speaker stands, each tick.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Standing {
    /// Started, rejoined or resumed from a stall, and not yet converged: claim nothing.
    Converging {
        /// Expected speakers not heard from yet.
        missing: BTreeSet<String>,
    },
    /// Converged, but sees too few of the expected speakers: claim nothing (F3).
    Minority {
        /// Expected speakers alive in the membership, this one included.
        alive: usize,
        /// Expected speakers.
        expected: usize,
    },
    /// Converged and sees a majority (or the cluster is too small to need one): claim what the
    /// election gives.
    Majority,
}

impl Standing {
    /// Whether IPs may be claimed (answered, announced, reported in Events).
    pub fn may_claim(&self) -> bool {
        matches!(self, Standing::Majority)
    }

    /// A short label for logs and the `ferrolb_speaker_claim_standing` metric.
    pub fn label(&self) -> &'static str {
        match self {
            Standing::Converging { .. } => "converging",
            Standing::Minority { .. } => "minority",
            Standing::Majority => "majority",
        }
    }
}

/// What one [`ClaimGate::tick`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Tick {
    /// The standing now.
    pub standing: Standing,
    /// `Some(gap)` when this tick detected a stall of `gap` (the gate closed).
    pub stalled: Option<Duration>,
}

/// The claim gate of one speaker (see the module docs). Feed it a tick at least every
/// `stall_threshold / 2`; a missed tick *is* the stall signal.
#[derive(Clone, Debug)]
pub struct ClaimGate {
    settings: ClaimSettings,
    /// When the gate last closed (start, rejoin, stall).
    closed_since: Instant,
    /// The gate may not open before this instant (resync after a stall).
    not_before: Instant,
    /// Converged since `closed_since`.
    converged: bool,
    last_tick: Option<Instant>,
    /// Times we were declared down recently, and when last (for the hold-off back-off).
    declared_down: u32,
    last_declared_down: Option<Instant>,
    /// When a tick last found a gap longer than half the stall threshold (a pause of ours).
    last_pause: Option<Instant>,
}

/// Longest hold-off after being declared down repeatedly: 32 resync periods.
const MAX_DECLARED_DOWN_FACTOR: u32 = 32;

impl ClaimGate {
    /// A closed gate, as at start-up.
    pub fn new(settings: ClaimSettings, now: Instant) -> Self {
        ClaimGate {
            settings,
            closed_since: now,
            not_before: now,
            converged: false,
            last_tick: None,
            declared_down: 0,
            last_declared_down: None,
            last_pause: None,
        }
    }

    /// The settings.
    pub fn settings(&self) -> &ClaimSettings {
        &self.settings
    }

    /// Close the gate as at start-up, e.g. after rejoining the membership with a new
    /// generation (carrier came back, or after the hold-off that follows a declaration of
    /// death): our member set restarts from ourselves. It opens again once every expected
    /// speaker is heard (F1) — at once, if they all are: waiting longer would leave our IPs
    /// unanswered, since the others elect us as soon as we are alive.
    pub fn restart(&mut self, now: Instant) {
        self.closed_since = now;
        self.not_before = now;
        self.converged = false;
    }

    /// The others declared this speaker down (it learned so from their gossip and rejoined with a
    /// new generation): some of them may have elected new owners for its IPs, so it withdraws at
    /// once — even though it may still hear all of them (a one-way or lossy link) — and converges
    /// again. Returns whether it must also stay out of the membership until [`Self::held_until`]:
    /// yes — for one resync period, doubling with each further declaration less than a minute
    /// after the previous one, up to 32 periods — unless a short pause of its own explains the
    /// declaration (a tick gap over half the stall threshold but not over it, now or within the
    /// last two stall thresholds): then the others merely could not hear it for a moment, the
    /// rejoin usually undoes the declaration before anybody moved an IP, and leaving would turn
    /// a short stall into a failover (F4). A stall (a longer gap) explains nothing: the gate
    /// holds for a resync then, and staying in the membership would get it elected while silent. (MetalLB's memberlist rejoins too, but the speaker keeps answering
    /// meanwhile.)
    pub fn declared_down(&mut self, now: Instant) -> bool {
        self.closed_since = now;
        self.converged = false;
        // A short pause shows as a long gap since the last tick, or was seen by a recent tick.
        // A stall (a gap over the threshold) explains nothing: the gate then holds for a resync
        // anyway, and staying in the membership meanwhile would get us elected while silent.
        let pausing = self.last_tick.is_some_and(|t| {
            let gap = now.saturating_duration_since(t);
            gap > self.settings.stall_threshold / 2 && gap <= self.settings.stall_threshold
        });
        let explained = pausing
            || self.last_pause.is_some_and(|t| {
                now.saturating_duration_since(t) <= self.settings.stall_threshold.saturating_mul(2)
            });
        if explained {
            // Keep a resync already running after a stall.
            self.not_before = self.not_before.max(now);
            return false;
        }
        let recent = self
            .last_declared_down
            .is_some_and(|t| now.saturating_duration_since(t) < Duration::from_secs(60));
        self.declared_down = if recent {
            self.declared_down.saturating_add(1)
        } else {
            1
        };
        self.last_declared_down = Some(now);
        let factor = 1u32
            .checked_shl(self.declared_down.saturating_sub(1))
            .unwrap_or(u32::MAX)
            .min(MAX_DECLARED_DOWN_FACTOR);
        self.not_before = now
            .checked_add(self.settings.resync.saturating_mul(factor))
            .unwrap_or(now);
        true
    }

    /// The gate may not open before this instant (after a stall or a declaration of death; the
    /// daemon also stays out of the membership until then after the latter).
    pub fn held_until(&self) -> Instant {
        self.not_before
    }

    /// Advance to `now` with the current membership (`alive`, node names, this speaker
    /// included) and the speakers that should exist (`expected`, see [`expected_speakers`]).
    /// [`Self::tick_listing`] with `alive` as the listing too.
    pub fn tick(
        &mut self,
        now: Instant,
        alive: &BTreeSet<String>,
        expected: &BTreeSet<String>,
    ) -> Tick {
        self.tick_listing(now, alive, alive, expected)
    }

    /// Advance to `now` with `alive`, the members with two-way evidence (node names, this
    /// speaker included: what the majority counts, issue #32 G1), `listed`, every member the
    /// membership lists alive (gossip included), and the speakers that should exist
    /// (`expected`, see [`expected_speakers`]).
    ///
    /// Convergence (F1) needs every expected speaker in `alive`; or, with three expected or
    /// more, a majority of them in `alive` ([`has_quorum`]) and the rest in `listed`; or the
    /// converge timeout. The second way leaves the safety of claiming to the majority of two-way
    /// evidence (and the quorum lease): it only stops a listed voter that cannot send to us
    /// directly (a one-way cut) from holding our gate shut while the others, who hear us, plan
    /// IPs on us (the simulator's one-way class: up to 3 s unanswered).
    pub fn tick_listing(
        &mut self,
        now: Instant,
        alive: &BTreeSet<String>,
        listed: &BTreeSet<String>,
        expected: &BTreeSet<String>,
    ) -> Tick {
        let gap = self
            .last_tick
            .map(|last| now.saturating_duration_since(last));
        self.last_tick = Some(now);
        let stalled = gap.filter(|g| *g > self.settings.stall_threshold);
        if stalled.is_some() {
            self.last_pause = None;
        } else if gap.is_some_and(|g| g > self.settings.stall_threshold / 2) {
            self.last_pause = Some(now);
        }
        if stalled.is_some() {
            self.closed_since = now;
            // A stall during a longer hold-off (after a declaration of death) keeps it.
            let resync = now.checked_add(self.settings.resync).unwrap_or(now);
            self.not_before = self.not_before.max(resync);
            self.converged = false;
        }
        if !self.converged && now >= self.not_before {
            let waited = now.saturating_duration_since(self.closed_since);
            let heard_of_all = expected
                .iter()
                .all(|n| alive.contains(n) || listed.contains(n));
            let majority_and_listed =
                expected.len() >= 3 && heard_of_all && has_quorum(alive, expected);
            self.converged = expected.is_subset(alive)
                || majority_and_listed
                || waited >= self.settings.converge_timeout;
        }
        let standing = if !self.converged {
            Standing::Converging {
                missing: expected.difference(alive).cloned().collect(),
            }
        } else if has_quorum(alive, expected) {
            Standing::Majority
        } else {
            Standing::Minority {
                alive: expected.intersection(alive).count(),
                expected: expected.len(),
            }
        };
        Tick { standing, stalled }
    }
}

/// The speakers that should exist and vote in the majority rule: every Node of the API view
/// that a speaker Pod of ours is bound to ([`Cluster::speaker_nodes`], issue #32 G3: a Node that
/// runs no speaker — a Windows node, a node outside the DaemonSet's `nodeSelector`, one whose
/// speaker cannot be scheduled — never votes; when no speaker Pod is visible at all, every Node
/// counts), whose `Ready` condition is not `False`/`Unknown` and that could announce something
/// — not excluded by the `node.kubernetes.io/exclude-from-external-load-balancers` label
/// (unless `--ignore-exclude-lb`) and selected by the `nodeSelectors` of at least one
/// L2Advertisement (when there is any) — plus `me` (a speaker always counts itself). Nodes that
/// can announce nothing often run no speaker (a narrowed DaemonSet); counting them would make
/// the survivors of one crash a minority. Every speaker computes the same set from the same API
/// view, which is what keeps the majority rule to one side of a partition; a speaker Pod
/// deleted and re-created by a roll-out keeps its node's vote through [`Voters`]' memory.
pub fn expected_speakers(cluster: &Cluster, me: &str) -> BTreeSet<String> {
    let pods = &cluster.speaker_nodes;
    cluster
        .nodes
        .iter()
        .filter(|(name, _)| pods.is_empty() || pods.contains(*name))
        .filter(|(name, _)| !cluster.dropped_voters.contains(*name))
        .filter(|(_, facts)| !facts.not_ready)
        .filter(|(name, _)| cluster.may_announce_anything(name))
        .map(|(name, _)| name.clone())
        .chain(std::iter::once(me.to_owned()))
        .collect()
}

/// How long a speaker heard in the membership keeps its vote after it stops being heard, while
/// its Node still exists: 5 minutes, the default time Kubernetes waits before evicting ordinary
/// Pods from a NotReady or unreachable Node (`tolerationSeconds: 300`; DaemonSet Pods such as
/// the speaker's are never evicted) — by then the cluster has moved its workloads away from the
/// silent Nodes, and the survivors serve again. A partition that lasts longer, with the isolated
/// side keeping the API server, can give two answerers after it (docs/speaker.md, F3).
pub const VOTER_MEMORY: Duration = Duration::from_secs(300);

/// The voting set of the majority rule, remembered across API changes: [`expected_speakers`]
/// (Ready Nodes that run a speaker Pod and could announce something, and this speaker) plus
/// every speaker heard in the membership within the last [`VOTER_MEMORY`] (issue #32 G3:
/// two-way evidence, or listed by the membership — [`Self::observe`]), less the Nodes an operator dropped
/// ([`Cluster::dropped_voters`]). Without the memory, a Node turning `NotReady` (its kubelet lost the API server,
/// say) would shrink the set on one side of a partition only, and an isolated owner that keeps
/// the API server would find itself a majority of one next to the others' new owner (the lab
/// attacks A1, A2, A11). The price: when a majority of the speakers crash at once, the survivors
/// claim nothing for up to [`VOTER_MEMORY`] (dropping the dead Nodes with
/// [`crate::eligibility::DROPPED_VOTERS_ANNOTATION`] ends it at once).
#[derive(Clone, Debug)]
pub struct Voters {
    memory: Duration,
    heard: BTreeMap<String, Instant>,
}

impl Voters {
    /// An empty memory of `memory` length (normally [`VOTER_MEMORY`]).
    pub fn new(memory: Duration) -> Self {
        Voters {
            memory,
            heard: BTreeMap::new(),
        }
    }

    /// Seeds the memory at start from the first API view (`wall_secs`: the wall clock in Unix
    /// seconds): every Node that may announce and is Ready, or turned NotReady less than the
    /// memory ago (or at an unknown time), counts as heard at `now`. So a speaker that restarts
    /// during a partition does not forget the voters on the far side (their Nodes turned
    /// NotReady a moment ago), while Nodes dead for longer do not silence a restarted survivor.
    /// Only Nodes a speaker Pod is bound to are seeded when any is ([`Cluster::speaker_nodes`]):
    /// a Node that runs no speaker is never heard, and seeding it would make it vote for the
    /// whole memory after every restart.
    pub fn seed(&mut self, now: Instant, wall_secs: i64, cluster: &Cluster) {
        let memory = i64::try_from(self.memory.as_secs()).unwrap_or(i64::MAX);
        let pods = &cluster.speaker_nodes;
        for (name, facts) in &cluster.nodes {
            if !pods.is_empty() && !pods.contains(name) {
                continue;
            }
            let recent = !facts.not_ready
                || facts
                    .not_ready_since
                    .is_none_or(|t| wall_secs.saturating_sub(t) < memory);
            if recent && cluster.may_announce_anything(name) {
                self.heard.entry(name.clone()).or_insert(now);
            }
        }
    }

    /// Records the speakers present at `now` — those with two-way evidence and those the
    /// membership lists (a member's gossip: somebody heard them; the set only grows the
    /// denominator of the majority, it never counts toward one) — and forgets those not heard
    /// for longer than the memory. A speaker restarted on the minority side of a split learns
    /// the far side's speakers from its peers' member lists, also those whose Node was deleted
    /// meanwhile and so is missing from the API view it seeded from ([`Self::seed`]; the
    /// simulator's `a_restart_on_the_minority_side_after_a_node_deletion_claims_nothing`).
    pub fn observe(&mut self, now: Instant, alive: &BTreeSet<String>) {
        for name in alive {
            match self.heard.get_mut(name) {
                Some(t) => *t = now,
                None => {
                    self.heard.insert(name.clone(), now);
                }
            }
        }
        let memory = self.memory;
        self.heard
            .retain(|_, t| now.saturating_duration_since(*t) <= memory);
    }

    /// The voting set now (see the type docs). A heard speaker keeps its vote for the memory
    /// whatever the API view says of its Node (issue #32 G3: a node votes while its speaker
    /// was heard within the memory): deleted, NotReady, excluded by the label or left out by
    /// every L2Advertisement — views of such a change differ between speakers, and one side
    /// of a partition must not shrink its voters alone (lab attack A11, `delete`; the
    /// simulator's `an_exclusion_seen_by_the_minority_side_only_gives_it_no_majority`, where
    /// an exclusion seen by the minority only made its 2 of 4 a "majority" next to the other
    /// side's 3 of 5). One exception: a Node that can announce nothing and no longer has a
    /// speaker Pod bound (the DaemonSet was narrowed to the announcing nodes; Pods visible)
    /// votes no more — otherwise one more crash within the memory left the survivors at half
    /// without the smallest name (`a_gone_excluded_speaker_does_not_silence_the_survivors_of_one_crash`).
    /// [`Cluster::dropped_voters`] ends a vote at once.
    pub fn voters(&self, cluster: &Cluster, me: &str) -> BTreeSet<String> {
        let pods = &cluster.speaker_nodes;
        let mut set = expected_speakers(cluster, me);
        set.extend(
            self.heard
                .keys()
                .filter(|n| !cluster.dropped_voters.contains(*n))
                .filter(|n| {
                    !cluster.nodes.contains_key(*n)
                        || pods.is_empty()
                        || pods.contains(*n)
                        || cluster.may_announce_anything(n)
                })
                .cloned(),
        );
        set
    }
}

/// The F3 majority rule: `alive` sees a majority of `expected` when more than half of the
/// expected speakers are alive, or exactly half including the smallest expected name (a
/// deterministic tie-break, so an even split has exactly one majority side). With one or two
/// expected speakers there is always "quorum": a survivor cannot tell its peer's crash from a
/// partition, and ferrolb then prefers answering to staying silent.
pub fn has_quorum(alive: &BTreeSet<String>, expected: &BTreeSet<String>) -> bool {
    let total = expected.len();
    if total <= 2 {
        return true;
    }
    let seen = expected.intersection(alive).count();
    match (seen * 2).cmp(&total) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => expected.first().is_some_and(|n| alive.contains(n)),
        std::cmp::Ordering::Less => false,
    }
}

/// The quorum lease (issue #32 G2): the instant until which this speaker (`me`) may answer on
/// the two-way evidence it holds — per peer name, until when its latest lease grant counts
/// ([`crate::membership::lease`]) — that is, the first instant at or after `now` at which the
/// voters with valid evidence, `me` included, are no longer a majority of `voters`
/// ([`has_quorum`]); `Some(now)` when they are not one now. `None` (no limit) with one or two
/// voters, which always claim. The lease always wins: the responder stops answering at this
/// instant whatever the member list says and whether or not the daemon steps again.
pub fn quorum_until(
    evidence: &BTreeMap<String, Instant>,
    voters: &BTreeSet<String>,
    me: &str,
    now: Instant,
) -> Option<Instant> {
    let total = voters.len();
    if total <= 2 {
        return None;
    }
    // The same rule as `has_quorum`, counted without building sets: it runs at every send
    // (and at every step of the simulator's observer). Voters and evidence are both sorted by
    // name, so one merged pass finds each voter's evidence.
    let mut me_votes = false;
    let mut me_first = false;
    let mut valid: Vec<(Instant, bool)> = Vec::with_capacity(total);
    let mut evidence = evidence.iter().peekable();
    for (k, v) in voters.iter().enumerate() {
        if v == me {
            me_votes = true;
            me_first = k == 0;
            continue;
        }
        while evidence.next_if(|(e, _)| e.as_str() < v.as_str()).is_some() {}
        if let Some((_, until)) = evidence.next_if(|(e, _)| *e == v)
            && *until > now
        {
            valid.push((*until, k == 0));
        }
    }
    valid.sort_unstable();
    let mut seen = valid.len() + usize::from(me_votes);
    let mut first_seen = me_first || valid.iter().any(|(_, f)| *f);
    let majority = |seen: usize, first_seen: bool| match (seen * 2).cmp(&total) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Equal => first_seen,
        std::cmp::Ordering::Less => false,
    };
    if !majority(seen, first_seen) {
        return Some(now);
    }
    for (until, is_first) in valid {
        seen -= 1;
        first_seen &= !is_first;
        if !majority(seen, first_seen) {
            return Some(until);
        }
    }
    Some(now)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::eligibility::NodeFacts;
    use proptest::prelude::*;

    fn set(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn nodes_that_can_announce_nothing_do_not_vote() {
        use ferrolb_crds::L2AdvertisementSpec;
        let mut cluster = Cluster::default();
        let node = |labels: &[(&str, &str)], not_ready: bool| NodeFacts {
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            not_ready,
            ..NodeFacts::default()
        };
        cluster
            .nodes
            .insert("a".into(), node(&[("rack", "1")], false));
        cluster
            .nodes
            .insert("b".into(), node(&[("rack", "1")], false));
        cluster
            .nodes
            .insert("c".into(), node(&[("rack", "1")], true));
        cluster
            .nodes
            .insert("d".into(), node(&[("rack", "2")], false));
        cluster.nodes.insert(
            "e".into(),
            node(
                &[
                    ("rack", "1"),
                    (
                        "node.kubernetes.io/exclude-from-external-load-balancers",
                        "",
                    ),
                ],
                false,
            ),
        );
        // No L2Advertisement yet: every Ready, non-excluded Node votes.
        assert_eq!(expected_speakers(&cluster, "a"), set(&["a", "b", "d"]));
        let spec: L2AdvertisementSpec = serde_json::from_value(serde_json::json!({
            "nodeSelectors": [{ "matchLabels": { "rack": "1" } }]
        }))
        .unwrap();
        cluster.advertisements.insert("rack-1".into(), spec);
        assert_eq!(expected_speakers(&cluster, "a"), set(&["a", "b"]));
        // A speaker always counts itself.
        assert_eq!(expected_speakers(&cluster, "d"), set(&["a", "b", "d"]));
        cluster.exclude_lb_label = crate::eligibility::ExcludeLbLabel::Ignore;
        assert_eq!(expected_speakers(&cluster, "a"), set(&["a", "b", "e"]));
    }

    #[test]
    fn declared_down_holds_off_with_a_growing_period_unless_a_pause_explains_it() {
        let t0 = Instant::now();
        let mut gate = ClaimGate::new(settings(), t0);
        let all = set(&["a", "b", "c"]);
        let step = Duration::from_millis(100);
        let mut now = t0;
        assert_eq!(gate.tick(now, &all, &all).standing, Standing::Majority);
        let open_after = |gate: &mut ClaimGate, mut now: Instant| {
            let start = now;
            loop {
                now += step;
                if gate.tick(now, &all, &all).standing == Standing::Majority {
                    return (now - start, now);
                }
            }
        };
        // Declared down while everyone still looks alive to us and we ran normally: out of the
        // membership for one resync (300 ms), then twice as long, then four times.
        for want in [300, 600, 1200] {
            assert!(gate.declared_down(now));
            let (held, t) = open_after(&mut gate, now);
            now = t;
            assert_eq!(held, Duration::from_millis(want));
        }
        // Quiet for over a minute: back to one period.
        for _ in 0..700 {
            now += step;
            gate.tick(now, &all, &all);
        }
        assert!(gate.declared_down(now));
        let (held, t) = open_after(&mut gate, now);
        now = t;
        assert_eq!(held, Duration::from_millis(300));
        // Declarations right after pauses of ours (a 200 ms tick gap > 300 ms / 2, seen by a
        // tick or not yet) are explained by them: closed until converged, never held off.
        for seen_by_a_tick in [true, false, true, false] {
            now += Duration::from_millis(200);
            if seen_by_a_tick {
                gate.tick(now, &all, &all);
            }
            assert!(!gate.declared_down(now), "a pause explains it");
            assert!(
                matches!(
                    gate.tick(now, &set(&["a", "b"]), &all).standing,
                    Standing::Converging { .. }
                ),
                "closed until converged"
            );
            let (held, t) = open_after(&mut gate, now);
            now = t;
            assert_eq!(held, step);
        }
        // A stall (a 400 ms gap > 300 ms) explains nothing: out of the membership.
        for _ in 0..7 {
            now += step;
            gate.tick(now, &all, &all);
        }
        now += Duration::from_millis(400);
        assert!(gate.declared_down(now), "a stall does not explain it");
        now += Duration::from_secs(61);
        gate.tick(now, &all, &all);
        now += Duration::from_millis(400);
        assert!(gate.tick(now, &all, &all).stalled.is_some());
        assert!(gate.declared_down(now), "nor one seen by a tick");
    }

    #[test]
    fn the_quorum_lease_ends_when_the_evidence_of_a_majority_has() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let voters = set(&["a", "b", "c", "d", "e"]);
        let evidence: BTreeMap<String, Instant> = [("b", 50), ("c", 120), ("d", 90), ("x", 500)]
            .into_iter()
            .map(|(n, t)| (n.to_string(), ms(t)))
            .collect();
        // a + b, c, d valid: the third to lapse (b at 50, d at 90) leaves a, c: 2 of 5.
        assert_eq!(quorum_until(&evidence, &voters, "a", t0), Some(ms(90)));
        assert_eq!(quorum_until(&evidence, &voters, "a", ms(60)), Some(ms(90)));
        assert_eq!(quorum_until(&evidence, &voters, "a", ms(95)), Some(ms(95)));
        assert_eq!(
            quorum_until(&evidence, &set(&["a", "b"]), "a", ms(600)),
            None,
            "two voters always claim"
        );
        // Exactly half decides by the smallest voter: a, b of a, b, c, d.
        let four = set(&["a", "b", "c", "d"]);
        assert_eq!(quorum_until(&evidence, &four, "a", t0), Some(ms(120)));
        assert_eq!(quorum_until(&evidence, &four, "d", t0), Some(ms(50)));
    }

    /// Issue #32 G3: with speaker Pods visible, a Ready Node without one never votes, neither
    /// through the API view nor through the memory seeded at start; a speaker heard in the
    /// membership still does; without any Pod visible every Node votes as before.
    #[test]
    fn only_nodes_running_a_speaker_pod_vote() {
        let t0 = Instant::now();
        let mut cluster = Cluster::default();
        for n in ["a", "b", "c", "d", "e"] {
            cluster.nodes.insert(n.into(), NodeFacts::default());
        }
        assert_eq!(
            expected_speakers(&cluster, "a"),
            set(&["a", "b", "c", "d", "e"])
        );
        // Speakers on a and b only (c, d, e: Windows nodes, say): a and b are a majority.
        cluster.speaker_nodes = set(&["a", "b"]);
        assert_eq!(expected_speakers(&cluster, "a"), set(&["a", "b"]));
        let mut voters = Voters::new(VOTER_MEMORY);
        voters.seed(t0, 1_000_000, &cluster);
        voters.observe(t0, &set(&["a", "b"]));
        let v = voters.voters(&cluster, "a");
        assert_eq!(v, set(&["a", "b"]));
        assert!(has_quorum(&set(&["a", "b"]), &v));
        // b's Pod is deleted by a roll-out: b keeps its vote through the memory.
        cluster.speaker_nodes = set(&["a"]);
        assert_eq!(voters.voters(&cluster, "a"), set(&["a", "b"]));
        // A speaker heard in the membership votes even before its Pod is seen.
        voters.observe(t0, &set(&["a", "b", "c"]));
        assert_eq!(voters.voters(&cluster, "a"), set(&["a", "b", "c"]));
    }

    #[test]
    fn voters_remember_heard_speakers_for_the_memory() {
        let t0 = Instant::now();
        let mut cluster = Cluster::default();
        for n in ["a", "b", "c"] {
            cluster.nodes.insert(n.into(), NodeFacts::default());
        }
        let mut voters = Voters::new(Duration::from_secs(300));
        voters.observe(t0, &set(&["a", "b", "c"]));
        // b and c turn NotReady and fall silent (a partition that also cut them off the API
        // server): they still vote, so the isolated a is a minority, not a cluster of one.
        for n in ["b", "c"] {
            if let Some(f) = cluster.nodes.get_mut(n) {
                f.not_ready = true;
            }
        }
        let later = t0 + Duration::from_secs(60);
        voters.observe(later, &set(&["a"]));
        let v = voters.voters(&cluster, "a");
        assert_eq!(v, set(&["a", "b", "c"]));
        assert!(!has_quorum(&set(&["a"]), &v));
        assert_eq!(
            expected_speakers(&cluster, "a"),
            set(&["a"]),
            "without the memory"
        );
        // A deleted Node keeps its vote for the memory (issue #32 G3), unless an operator drops
        // it; a silent one stops after the memory.
        cluster.nodes.remove("c");
        assert_eq!(voters.voters(&cluster, "a"), set(&["a", "b", "c"]));
        cluster.dropped_voters = set(&["c"]);
        assert_eq!(voters.voters(&cluster, "a"), set(&["a", "b"]));
        cluster.dropped_voters.clear();
        voters.observe(t0 + Duration::from_secs(301), &set(&["a"]));
        assert_eq!(voters.voters(&cluster, "a"), set(&["a"]));

        // A restarted speaker seeds its memory from the API: b turned NotReady a minute ago
        // (a partition) still votes; d, NotReady for an hour, does not.
        let wall = 1_000_000;
        for (n, since) in [("b", wall - 60), ("d", wall - 3600)] {
            cluster.nodes.insert(
                n.into(),
                NodeFacts {
                    not_ready: true,
                    not_ready_since: Some(since),
                    ..NodeFacts::default()
                },
            );
        }
        let mut fresh = Voters::new(Duration::from_secs(300));
        fresh.seed(t0, wall, &cluster);
        assert_eq!(fresh.voters(&cluster, "a"), set(&["a", "b"]));
    }

    /// Issue #32 G3, "the voter set must not shrink on one side of a partition only": a heard
    /// speaker keeps its vote for the memory when its Node is excluded or no L2Advertisement
    /// selects it any more (the simulator's `an_exclusion_seen_by_the_minority_side_only_*`:
    /// the minority's 2 of 4 was a "majority"), as when it turns NotReady or is deleted.
    #[test]
    fn a_heard_speaker_keeps_its_vote_when_its_node_can_announce_nothing() {
        let t0 = Instant::now();
        let mut cluster = Cluster::default();
        for n in ["a", "b", "c", "d", "e"] {
            cluster.nodes.insert(n.into(), NodeFacts::default());
        }
        let mut voters = Voters::new(VOTER_MEMORY);
        voters.observe(t0, &set(&["a", "b", "c", "d", "e"]));
        if let Some(f) = cluster.nodes.get_mut("e") {
            f.labels
                .insert(crate::eligibility::EXCLUDE_LB_LABEL.into(), String::new());
        }
        assert!(!cluster.may_announce_anything("e"));
        assert!(!expected_speakers(&cluster, "a").contains("e"));
        let v = voters.voters(&cluster, "a");
        assert_eq!(v, set(&["a", "b", "c", "d", "e"]));
        assert!(!has_quorum(&set(&["a", "b"]), &v), "2 of 5, not 2 of 4");
        // Its speaker Pod is deleted for good (a narrowed DaemonSet; Pods visible): no vote,
        // so the survivors of one more crash keep a majority. A Pod deleted from a Node that
        // may announce (a roll-out) keeps the vote.
        cluster.speaker_nodes = set(&["a", "b", "c", "d", "e"]);
        assert!(voters.voters(&cluster, "a").contains("e"));
        cluster.speaker_nodes = set(&["a", "b", "c", "d"]);
        assert!(!voters.voters(&cluster, "a").contains("e"));
        cluster.speaker_nodes = set(&["a", "b", "c", "e"]);
        assert!(voters.voters(&cluster, "a").contains("d"));
        // Unheard for the memory: gone.
        cluster.speaker_nodes.clear();
        voters.observe(t0 + VOTER_MEMORY + Duration::from_secs(1), &set(&["a"]));
        assert!(!voters.voters(&cluster, "a").contains("e"));
    }

    fn settings() -> ClaimSettings {
        ClaimSettings::for_membership(Duration::from_millis(100), Duration::from_millis(200))
    }

    const MS: Duration = Duration::from_millis(1);

    /// F1 with a one-way cut (issue #32 G1): a voter the membership lists but that cannot send
    /// to us directly does not hold the gate shut once a majority gave two-way evidence; a
    /// voter nobody lists still does, and so does a minority of evidence, and with two voters
    /// the listing never stands in for evidence.
    #[test]
    fn f1_a_listed_voter_without_a_direct_path_does_not_hold_the_gate_shut() {
        let t0 = Instant::now();
        let expected = set(&["node-1", "node-2", "node-3"]);
        let me_and_2 = set(&["node-1", "node-2"]);
        let mut gate = ClaimGate::new(settings(), t0);
        let tick = gate.tick_listing(t0, &me_and_2, &expected, &expected);
        assert_eq!(tick.standing, Standing::Majority);
        // node-3 not even listed: converging (until the timeout).
        let mut gate = ClaimGate::new(settings(), t0);
        let tick = gate.tick_listing(t0, &me_and_2, &me_and_2, &expected);
        assert!(!tick.standing.may_claim(), "{tick:?}");
        // Everyone listed but only ourselves evidenced (our sends are lost: the lab's A8).
        let mut gate = ClaimGate::new(settings(), t0);
        let tick = gate.tick_listing(t0, &set(&["node-1"]), &expected, &expected);
        assert!(!tick.standing.may_claim(), "{tick:?}");
        // Two voters: the listing is not enough.
        let two = set(&["node-1", "node-2"]);
        let mut gate = ClaimGate::new(settings(), t0);
        let tick = gate.tick_listing(t0, &set(&["node-1"]), &two, &two);
        assert!(!tick.standing.may_claim(), "{tick:?}");
    }

    #[test]
    fn f1_a_fresh_speaker_claims_nothing_until_it_has_heard_every_expected_peer() {
        let t0 = Instant::now();
        let mut gate = ClaimGate::new(settings(), t0);
        let expected = set(&["node-1", "node-2", "node-3"]);
        let tick = gate.tick(t0, &set(&["node-2"]), &expected);
        assert_eq!(
            tick.standing,
            Standing::Converging {
                missing: set(&["node-1", "node-3"])
            }
        );
        assert!(!tick.standing.may_claim());
        let tick = gate.tick(t0 + 50 * MS, &expected, &expected);
        assert_eq!(tick.standing, Standing::Majority);
    }

    #[test]
    fn f1_the_wait_is_bounded_and_then_the_majority_rule_decides() {
        let t0 = Instant::now();
        let mut gate = ClaimGate::new(settings(), t0);
        let expected = set(&["node-1", "node-2", "node-3"]);
        let two = set(&["node-1", "node-2"]);
        let mut t = t0;
        while t < t0 + Duration::from_secs(3) {
            assert!(!gate.tick(t, &two, &expected).standing.may_claim());
            t += 100 * MS;
        }
        assert_eq!(gate.tick(t, &two, &expected).standing, Standing::Majority);
        // A lone speaker of three (wrong key, blocked port) never claims.
        let mut gate = ClaimGate::new(settings(), t0);
        let mut t = t0;
        while t < t0 + Duration::from_secs(10) {
            assert!(
                !gate
                    .tick(t, &set(&["node-1"]), &expected)
                    .standing
                    .may_claim()
            );
            t += 100 * MS;
        }
    }

    #[test]
    fn f1_single_node_cluster_opens_at_once() {
        let t0 = Instant::now();
        let mut gate = ClaimGate::new(settings(), t0);
        let me = set(&["node-1"]);
        assert_eq!(gate.tick(t0, &me, &me).standing, Standing::Majority);
    }

    #[test]
    fn f3_majority_rule_and_tie_break() {
        let four = set(&["a", "b", "c", "d"]);
        assert!(has_quorum(&set(&["a", "b", "c"]), &four));
        assert!(
            has_quorum(&set(&["a", "b"]), &four),
            "half with the smallest"
        );
        assert!(!has_quorum(&set(&["c", "d"]), &four), "half without it");
        assert!(!has_quorum(&set(&["d"]), &four));
        let three = set(&["a", "b", "c"]);
        assert!(has_quorum(&set(&["b", "c"]), &three));
        assert!(!has_quorum(&set(&["a"]), &three));
        // One or two speakers: always.
        assert!(has_quorum(&set(&["b"]), &set(&["a", "b"])));
        assert!(has_quorum(&set(&["a"]), &set(&["a"])));
        // Members the API does not expect do not count.
        assert!(!has_quorum(&set(&["a", "x", "y"]), &three));
    }

    #[test]
    fn f4_a_stall_closes_the_gate_until_resync_and_convergence() {
        let t0 = Instant::now();
        let mut gate = ClaimGate::new(settings(), t0);
        let all = set(&["node-1", "node-2", "node-3"]);
        assert!(gate.tick(t0, &all, &all).standing.may_claim());
        assert!(gate.tick(t0 + 100 * MS, &all, &all).standing.may_claim());
        // 150 ms stall: below the threshold, nothing happens.
        let tick = gate.tick(t0 + 250 * MS, &all, &all);
        assert_eq!(tick.stalled, None);
        assert!(tick.standing.may_claim());
        // 2 s stall.
        let resumed = t0 + 2250 * MS;
        let tick = gate.tick(resumed, &all, &all);
        assert_eq!(tick.stalled, Some(2000 * MS));
        assert!(!tick.standing.may_claim());
        assert!(
            !gate
                .tick(resumed + 200 * MS, &all, &all)
                .standing
                .may_claim()
        );
        assert!(
            gate.tick(resumed + 300 * MS, &all, &all)
                .standing
                .may_claim()
        );
    }

    #[test]
    fn restart_closes_the_gate() {
        let t0 = Instant::now();
        let mut gate = ClaimGate::new(settings(), t0);
        let all = set(&["node-1", "node-2", "node-3"]);
        assert!(gate.tick(t0, &all, &all).standing.may_claim());
        gate.restart(t0 + 50 * MS);
        let tick = gate.tick(t0 + 60 * MS, &set(&["node-1"]), &all);
        assert!(matches!(tick.standing, Standing::Converging { .. }));
    }

    fn names() -> impl Strategy<Value = BTreeSet<String>> {
        proptest::collection::btree_set("[a-f]", 1..7)
    }

    proptest! {
        /// Whatever the split of the expected speakers into two sides, at most one side has
        /// quorum once there are three or more (so no IP gets an answerer on both sides).
        #[test]
        fn f3_at_most_one_side_of_any_split_claims(expected in names(), mask in any::<u8>()) {
            let mut left = BTreeSet::new();
            let mut right = BTreeSet::new();
            for (i, n) in expected.iter().enumerate() {
                if mask & (1 << i) != 0 { left.insert(n.clone()); } else { right.insert(n.clone()); }
            }
            let sides = [has_quorum(&left, &expected), has_quorum(&right, &expected)];
            if expected.len() >= 3 {
                prop_assert!(!(sides[0] && sides[1]), "{left:?} | {right:?}");
            }
            // And some side always has it, so a split never silences every IP.
            prop_assert!(sides[0] || sides[1], "{left:?} | {right:?}");
        }

        /// The quorum lease is `has_quorum` over time: the voters with evidence valid at `t`
        /// (`me` always) have quorum at every instant in `[now, until)` and not at `until`,
        /// or `until` is `now` when they have none now. Names outside the voters never count.
        #[test]
        fn the_quorum_lease_is_has_quorum_over_time(
            voters in proptest::collection::btree_set("[a-f]", 2..7),
            me in "[a-g]",
            evidence in proptest::collection::btree_map("[a-g]", 0u64..200, 0..8),
            now in 0u64..100,
        ) {
            let t0 = Instant::now();
            let at = |ms: u64| t0 + Duration::from_millis(ms);
            let evidence: BTreeMap<String, Instant> =
                evidence.into_iter().map(|(n, t)| (n, at(t))).collect();
            let alive_at = |t: Instant| -> BTreeSet<String> {
                evidence
                    .iter()
                    .filter(|(_, u)| **u > t)
                    .map(|(n, _)| n.clone())
                    .chain([me.clone()])
                    .collect()
            };
            let until = quorum_until(&evidence, &voters, &me, at(now));
            if voters.len() <= 2 {
                prop_assert_eq!(until, None);
                return Ok(());
            }
            let until = until.expect("three or more voters have a lease");
            prop_assert!(until >= at(now));
            if until == at(now) {
                prop_assert!(!has_quorum(&alive_at(at(now)), &voters));
            } else {
                // The evidence only changes at its instants: check each one in the window.
                for t in [at(now)].into_iter().chain(evidence.values().copied()) {
                    if t >= at(now) && t < until {
                        prop_assert!(has_quorum(&alive_at(t), &voters), "at {t:?}");
                    }
                }
                prop_assert!(!has_quorum(&alive_at(until), &voters));
            }
        }
    }
}
