//! The speaker's per-node decisions, sans-IO: membership phase (declared down, hold-off, carrier
//! gating), voters and the claim gate, stall handling, the lease, planning and the owned set,
//! fresh-IP probing and the S4 re-announcement.
//!
//! Shaped like the sans-IO protocol crates (`quinn-proto`, `str0m`): the executor
//! (`ferrolb_speaker::daemon`) turns I/O into inputs — [`SpeakerCore::set_view`] when the API
//! view changes, [`SpeakerCore::step`] with an [`Observation`] and the time at every wake-up — and
//! applies the [`Output`]s that [`SpeakerCore::poll_output`] returns, in order; it sleeps until
//! [`SpeakerCore::poll_timeout`] when nothing else wakes it. Nothing here reads a clock, draws a
//! random number or touches a socket, so the same inputs give the same outputs: the cluster
//! simulator and the tests below replay them.
//!
//! One step runs fixed phases, as the daemon loop always did:
//! 1. declared down by the others → withdraw (lease ends now), and leave for a hold-off unless a
//!    pause of ours explains it ([`ClaimGate::declared_down`]);
//! 2. carrier gates the membership: leave when no announce interface has carrier, rejoin when it
//!    is back and no hold-off runs; per interface and family, carrier is an eligibility input
//!    (issue #32 G5.5, [`crate::carrier`]): this node's report, after the hold-down of regained
//!    carrier, is planned with at once and handed to the membership ([`Output::SetCarrier`]),
//!    and the members' reports come in with [`MembershipObservation::carriers`];
//! 3. voters ([`Voters`]) and the claim gate ([`ClaimGate::tick`]): converged, majority, stall;
//! 4. a stall (a gap between steps over the threshold, F4) → withdraw and leave;
//! 5. closed gate → withdraw everything;
//! 6. open gate → renew the lease for one stall threshold, and re-plan on every event and at
//!    least every [`NodeConfig::replan_every`]: owned set, fresh IPs probed first, S4
//!    re-announcement when the membership changed or a peer restarted.
//!
//! What the plan leads to off the answer path (Events, `L2Announcement` reports, conflict
//! defence, the kernel-ARP preflight) is reported by the executor from [`Output::Planned`].

mod input;
mod output;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub use input::{MembershipObservation, Observation, Wake};
pub use output::{MembershipCommand, Note, Output};

use crate::carrier::{CarrierHold, Carriers, LinkReport};
use crate::claim::{ClaimGate, ClaimSettings, Standing, VOTER_MEMORY, Voters};
use crate::eligibility::Interfaces;
use crate::fresh::FreshIps;
use crate::membership::lease::{HandoverReply, newer_view};
use crate::plan::plan_with_carrier;

/// The plan over `alive` without this node's overall carrier, with the members' carrier
/// reports `carriers` (who held each IP before).
fn plan_without_carrier(
    view: &View,
    alive: &BTreeSet<String>,
    me: &str,
    carriers: &Carriers,
) -> crate::plan::Plan {
    plan_with_carrier(view, alive, me, None, carriers)
}
use crate::view::View;

/// The core's timings and identity.
#[derive(Clone, Debug)]
pub struct NodeConfig {
    /// This node's name (`spec.nodeName` of the speaker Pod).
    pub me: String,
    /// The claim gate: convergence, majority, stall threshold, resync.
    pub claim: ClaimSettings,
    /// How long a speaker heard once keeps its vote ([`VOTER_MEMORY`], 5 minutes).
    pub voter_memory: Duration,
    /// The step period when nothing else wakes the executor (100 ms): renews the lease and feeds
    /// the stall detector, which needs steps well inside its threshold.
    pub tick: Duration,
    /// Longest time between two full re-plans without any event (250 ms; interface carrier is
    /// polled).
    pub replan_every: Duration,
    /// How long a background leave may wait for its datagrams.
    pub leave_grace: Duration,
}

impl NodeConfig {
    /// The daemon's timings (tick 100 ms, re-plan 250 ms, voter memory 5 min, leave 500 ms).
    pub fn new(me: impl Into<String>, claim: ClaimSettings) -> Self {
        NodeConfig {
            me: me.into(),
            claim,
            voter_memory: VOTER_MEMORY,
            tick: Duration::from_millis(100),
            replan_every: Duration::from_millis(250),
            leave_grace: Duration::from_millis(500),
        }
    }
}

/// Counters the executor exports as metrics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CoreCounters {
    /// Times the others declared this speaker down.
    pub declared_down: u64,
    /// Stalls detected (gaps between steps over the stall threshold).
    pub stalls: u64,
}

/// Longest wait for a previous holder that keeps saying it still answers for an IP (issue #32
/// G5.8): its watch may lag ours, or ours theirs; past this the gain is claimed anyway (two
/// answerers until the later watch delivers). Three seconds, the converge timeout: longer than
/// the watch lags the simulator and the lab see (under 500 ms), short enough that a holder whose
/// watch is stuck (an API outage on its node) is not followed for long.
pub const HANDOVER_HOLD_MAX: Duration = Duration::from_secs(3);

/// How long after a grant released an IP to a requester this speaker still treats that
/// requester as the IP's holder when it gains the IP back because a carrier report says the
/// requester has withdrawn (issue #32 G5.8, found by the simulator: one-way class, seed 1999).
/// The report may have been sent before the request the grant answered — the requester
/// converged in between, asked, was released the IP and claimed it — so the gain waits for the
/// requester's release like any handover instead of claiming at once (which made two answerers
/// for 99.6 ms, until the requester's next report arrived). A requester that really withdrew
/// answers nothing and says so to the next lease request: it releases what it does not hold,
/// and a grant from a closed gate (revision 0) ends its holding at once, whatever it says of
/// the IP. [`HANDOVER_HOLD_MAX`]: longer than a report relayed around a cut takes to arrive.
pub const RELEASE_MEMORY: Duration = HANDOVER_HOLD_MAX;

/// A gain held back until its previous holder has stopped ([`SpeakerCore::hold_handovers`]).
#[derive(Clone, Debug)]
struct Handover {
    /// The node that held the IP under the previous plan.
    holder: String,
    /// When it is claimed unless the holder says otherwise ([`Self::refresh`]).
    due: Instant,
    /// When the gain was held back.
    since: Instant,
    /// The largest revision a holder whose view was newer than ours said it held the IP at
    /// ([`Self::refresh`]): until our own view has read that far, our gain may come from the
    /// stale view, and only the holder's release (or its loss) lets us claim ([`Self::waiting`]).
    newer: Option<u64>,
}

impl Handover {
    /// The holder's latest reply about `ip` to a lease request sent since the gain was held
    /// back (issue #32 G5.8), if any.
    fn reply(
        &self,
        ip: &IpAddr,
        membership: &Option<MembershipObservation>,
    ) -> Option<HandoverReply> {
        let m = membership.as_ref()?;
        let r = m.handover_replies.get(&(self.holder.clone(), *ip))?;
        (r.sent >= self.since).then_some(*r)
    }

    /// Whether the holder has said it no longer answers for (nor holds back) `ip`.
    fn released(&self, ip: &IpAddr, membership: &Option<MembershipObservation>) -> bool {
        self.reply(ip, membership).is_some_and(|r| r.released)
    }

    /// Moves `due` by what the holder said: one stall threshold after the holder last said it
    /// still answers for `ip` (while it says so, its view differs from ours and it is the only
    /// answerer: wait for it), never beyond [`HANDOVER_HOLD_MAX`] after the gain — unless the
    /// holder's view is the newer ([`newer_view`] of its revision and ours, `my_rev`): then
    /// ours is the one that lags and the holder's word holds without a cap (a mutual hold is
    /// decided by the same comparison, on the holder's side). A holder that says nothing
    /// (grants lost, a speaker before G5.8) is waited for one stall threshold, as before.
    fn refresh(
        &mut self,
        ip: &IpAddr,
        membership: &Option<MembershipObservation>,
        w: Duration,
        (me, my_rev): (&str, u64),
    ) {
        if let Some(r) = self.reply(ip, membership).filter(|r| !r.released) {
            let held = r.sent.checked_add(w).unwrap_or(r.sent);
            let due = if newer_view(&self.holder, r.rev, me, my_rev) == Some(true) {
                self.newer = Some(self.newer.map_or(r.rev, |n| n.max(r.rev)));
                held
            } else {
                let cap = self
                    .since
                    .checked_add(HANDOVER_HOLD_MAX)
                    .unwrap_or(self.since);
                held.min(cap)
            };
            self.due = self.due.max(due);
        }
    }

    /// Waits on `asker` instead of the holder, if it asked for the IP since the gain was held
    /// back (issue #32 G5.8), the holder's view is strictly newer than ours (`mine`; as its
    /// latest grant said, `revisions`) and the asker's is exactly the holder's: that
    /// view gives the IP to the asker, so the node we wait for, whose own view (if it is as new) gives it to the asker
    /// too, would never release it to us — both would wait until our watch caught up (found
    /// by the simulator: two ETP Local endpoint moves within one watch lag, 965 ms silent).
    /// From then on we ask the asker, which holds the IP back for us: a mutual hold, which
    /// the newer view's side claims, and we wait on it like on any newer holder
    /// ([`Self::waiting`]). Returns whether the holder changed.
    fn defer(
        &mut self,
        asker: &crate::membership::lease::HandoverAsker,
        now: Instant,
        alive: &BTreeSet<String>,
        (me, my_rev): (&str, u64),
        revisions: &BTreeMap<String, u64>,
    ) -> bool {
        // The holder's own latest grant, never `self.newer`: after a holder that went down,
        // that is the dead holder's revision, not the new one's (a third attack: the new
        // holder, older and answering, was bypassed — two answerers 399 ms, then 2.2 s).
        let holder_rev = revisions.get(&self.holder).copied().unwrap_or(0);
        // Only a holder heard with a view newer than ours and exactly as new as the asker's:
        // it sees the API state that gives the IP to the asker, so it no longer answers the
        // IP, but it will not release it to us either. A holder whose view is as old as ours
        // or older may still answer (found by an attack: the asker claimed next to it, two
        // answerers 350 ms, then 2.3 s silent under the holder's yield), and so may one
        // between ours and the asker's, whose plan may have given the IP back to it (a second
        // attack: 450 ms, then 2.1 s). Its "not released" does not say which.
        let newer = my_rev != 0 && holder_rev > my_rev && asker.rev == holder_rev;
        if !newer
            || asker.at < self.since
            || asker.from == self.holder
            || asker.from == me
            || !alive.contains(&asker.from)
        {
            return false;
        }
        self.holder.clone_from(&asker.from);
        self.since = now;
        self.newer = Some(asker.rev);
        self.due = self
            .due
            .max(now.checked_add(HANDOVER_HOLD_MAX).unwrap_or(now));
        true
    }

    /// Whether the gain still waits at `now`. Normally while `due` is ahead and the holder is
    /// alive (`holder_alive`: it serves, or it is a requester we released the IP to within
    /// [`RELEASE_MEMORY`]): a holder that has gone down hands over nothing.
    ///
    /// But after a holder with a newer view than ours said it held the IP ([`Self::newer`]),
    /// and until our view (revision `mine.1`) has read as far, our plan may be the stale one
    /// and only a newer view may vouch for it:
    /// - while that holder is alive, we wait whatever its silence (a SIGSTOPped holder is
    ///   failed over by the nodes whose views are current, not by ours, which may give the IP
    ///   to another node than theirs);
    /// - once it is declared down, we ask the alive member whose view is the newest
    ///   (`revisions`, from the grants) instead, if that view is newer than ours: it releases
    ///   the IP to us only if its own plan gives it to us, and holds it (and is waited for)
    ///   otherwise;
    /// - with no alive member newer than us, we claim: nobody knows better.
    fn waiting(
        &mut self,
        now: Instant,
        (holder_alive, alive): (bool, &BTreeSet<String>),
        (me, my_rev): (&str, u64),
        revisions: &BTreeMap<String, u64>,
    ) -> bool {
        if self.newer.is_none_or(|rev| my_rev >= rev) {
            return self.due > now && holder_alive;
        }
        if !holder_alive {
            let Some(next) = newest_view(alive, revisions, (me, my_rev)) else {
                return false;
            };
            self.holder = next;
            self.since = now;
        }
        // No wake-up for it: a reply or a change of the members re-plans.
        self.due = self
            .due
            .max(now.checked_add(HANDOVER_HOLD_MAX).unwrap_or(now));
        true
    }
}

/// The alive member (not `me`) whose API view is the newest by its latest grant
/// (`revisions`; a member whose gate is closed sends none), if its revision is strictly larger
/// than ours (`my_rev`, known). Not the name tie-break of [`newer_view`], which only decides a
/// mutual hold: between equal revisions the views are most likely the same, and asking would
/// only add a round trip to every failover (found by an attack: ~50 ms at 5 nodes).
fn newest_view(
    alive: &BTreeSet<String>,
    revisions: &BTreeMap<String, u64>,
    (me, my_rev): (&str, u64),
) -> Option<String> {
    if my_rev == 0 {
        return None;
    }
    alive
        .iter()
        .filter(|n| n.as_str() != me)
        .filter_map(|n| Some((n, *revisions.get(n)?)))
        .filter(|(_, rev)| *rev > my_rev)
        .max_by(|(a, ra), (b, rb)| (ra, a).cmp(&(rb, b)))
        .map(|(n, _)| n.clone())
}

/// One speaker's decision state (see the module docs). Created at start-up with the first
/// membership already started (the executor starts it before the first step).
#[derive(Debug)]
pub struct SpeakerCore {
    config: NodeConfig,
    gate: ClaimGate,
    voters: Voters,
    voters_seeded: bool,
    /// Whether this speaker is (or is joining) the membership; the executor follows the
    /// `Membership` commands.
    in_membership: bool,
    seen_rejoins: u64,
    view: Arc<View>,
    standing: Standing,
    last_standing: &'static str,
    ever_converged: bool,
    last_step: Option<Instant>,
    last_plan: Option<Instant>,
    last_alive: BTreeSet<String>,
    /// The voting set last sent with [`Output::SetVoters`].
    last_voters: BTreeSet<String>,
    /// What the last `SetOwned` asked for.
    owned: BTreeMap<IpAddr, Interfaces>,
    /// The API view the last plan was made from (`None` before the first plan and after a
    /// withdrawal): who held an IP before a gain is read from it ([`Self::hold_handovers`]).
    planned_view: Option<Arc<View>>,
    /// Gains held back until their previous holder has stopped ([`Self::hold_handovers`]):
    /// the holder's name and when this speaker may start.
    handovers: BTreeMap<IpAddr, Handover>,
    /// The IPs of the last [`Output::SetOwned`] (what the membership was told is answered for).
    holding: BTreeSet<IpAddr>,
    /// The plan of the latest step that planned, while the gate is open (handed to the
    /// membership with [`Output::SetHandovers`]: whom a release may go to).
    current_plan: Option<Arc<crate::plan::Plan>>,
    fresh: FreshIps,
    counters: CoreCounters,
    outputs: VecDeque<Output>,
    /// The gate and rejoin counter before the last `Join`, restored if it fails.
    before_join: Option<(ClaimGate, u64)>,
    /// The hold-down of regained carrier, and this node's report as last published with
    /// [`Output::SetCarrier`] (issue #32 G5.5).
    carrier_hold: CarrierHold,
    own_links: Option<LinkReport>,
    /// The members' carrier reports the last plan used, this node's included.
    last_carriers: Carriers,
    /// The report last handed on with [`Output::SetCarrier`].
    published: Option<LinkReport>,
    /// Since when this node has stood in a minority without a break, while in the membership
    /// ([`Self::withdrawn`]).
    minority_since: Option<Instant>,
}

impl SpeakerCore {
    /// A core at start-up (`now`), with the membership started and nothing claimed.
    pub fn new(config: NodeConfig, now: Instant) -> Self {
        SpeakerCore {
            gate: ClaimGate::new(config.claim.clone(), now),
            voters: Voters::new(config.voter_memory),
            config,
            voters_seeded: false,
            in_membership: true,
            seen_rejoins: 0,
            view: Arc::new(View::default()),
            standing: Standing::Converging {
                missing: BTreeSet::new(),
            },
            last_standing: "",
            ever_converged: false,
            last_step: None,
            last_plan: None,
            last_alive: BTreeSet::new(),
            last_voters: BTreeSet::new(),
            owned: BTreeMap::new(),
            planned_view: None,
            handovers: BTreeMap::new(),
            holding: BTreeSet::new(),
            current_plan: None,
            fresh: FreshIps::default(),
            counters: CoreCounters::default(),
            outputs: VecDeque::new(),
            before_join: None,
            carrier_hold: CarrierHold::default(),
            own_links: None,
            last_carriers: Carriers::new(),
            published: None,
            minority_since: None,
        }
    }

    /// The settings.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// A new API view (level-triggered: the latest one wins). Takes effect at the next step.
    pub fn set_view(&mut self, view: Arc<View>) {
        self.view = view;
    }

    /// The API view in use.
    pub fn view(&self) -> &Arc<View> {
        &self.view
    }

    /// Whether the executor should hand a freshly read view before the next step: a re-plan is
    /// due (the view is re-read at every re-plan, as a guard against a lost change notice).
    pub fn replan_due(&self, now: Instant) -> bool {
        self.last_plan
            .is_none_or(|at| now.saturating_duration_since(at) >= self.config.replan_every)
    }

    /// The executor reports that a requested [`MembershipCommand::Join`] failed (the socket
    /// could not be bound, say): the core is out of the membership again, with the claim gate and
    /// the rejoin counter as they were before the join was asked for; the next step asks again.
    pub fn join_failed(&mut self) {
        self.in_membership = false;
        if let Some((gate, seen)) = self.before_join.take() {
            self.gate = gate;
            self.seen_rejoins = seen;
        }
    }

    /// When the next tick is due if nothing else wakes the executor: one tick after the last
    /// step. The daemon sleeps a whole tick after applying a step's outputs instead, so the time
    /// a step takes counts toward the gap the stall detector sees, as it always did (the
    /// simulator applies outputs at once: both agree there).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let tick = self.last_step.and_then(|t| t.checked_add(self.config.tick));
        let handover = self.handovers.values().map(|h| h.due).min();
        match (tick, handover) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The next command for the executor, in order.
    pub fn poll_output(&mut self) -> Option<Output> {
        self.outputs.pop_front()
    }

    /// The claim gate's standing after the last step.
    pub fn standing(&self) -> &Standing {
        &self.standing
    }

    /// Ready (`/readyz`): converged at least once and in the membership.
    pub fn ready(&self) -> bool {
        self.ever_converged && self.in_membership
    }

    /// Whether this speaker is in (or joining) the membership.
    pub fn in_membership(&self) -> bool {
        self.in_membership
    }

    /// The membership the last step used (empty while out of it).
    pub fn alive(&self) -> &BTreeSet<String> {
        &self.last_alive
    }

    /// What the last `SetOwned` asked for.
    pub fn owned(&self) -> &BTreeMap<IpAddr, Interfaces> {
        &self.owned
    }

    /// Counters since start.
    pub fn counters(&self) -> CoreCounters {
        self.counters
    }

    /// The instant until which the gate holds after a stall or a declaration of death.
    pub fn held_until(&self) -> Instant {
        self.gate.held_until()
    }

    /// One step at `now` (see the module docs for its phases); outputs queue for
    /// [`Self::poll_output`]. A changed carrier report of this node ([`crate::carrier`]) is
    /// planned with in this step and handed on last, after the owned set it changed, as
    /// [`Output::SetCarrier`].
    pub fn step(&mut self, now: Instant, obs: Observation) {
        let links = self.carrier_hold.apply(now, &obs.links);
        self.own_links = Some(links);
        let was_in = self.in_membership;
        self.phases(now, obs);
        // After the phases: a gate that closed in this step has withdrawn (the owned set is
        // empty) before the report says so.
        let report = self.own_report();
        let changed = report.as_ref() != self.published.as_ref();
        // A membership joined in this step is a new one: it has no report yet.
        if let Some(report) = report.filter(|_| changed || (!was_in && self.in_membership)) {
            self.published = Some(report.clone());
            self.outputs.push_back(Output::SetCarrier(report));
        }
    }

    /// Whether this node reports itself withdrawn ([`LinkReport::withdrawn`]; issue #32, the
    /// minority-gate row): its gate has been closed **because it hears a minority** of the
    /// voters for at least [`ClaimSettings::stall_threshold`] (300 ms `fast`) without a break —
    /// converged ([`Standing::Minority`]) or still converging while its membership lists a
    /// majority of the voters alive of which it hears (two-way) a minority only (restarted or
    /// rejoined while cut from a majority). The report goes to
    /// every member and is relayed like a lost carrier, so the others, who may still list this
    /// node alive (indirect probes), plan its IPs on other nodes instead of leaving them to a
    /// node that answers nothing.
    ///
    /// The wait is the shortest time in which the others could declare this node down
    /// themselves (`probe_period + suspect_timeout`): a withdrawal is a declaration of death
    /// made by the node itself, and it moves IPs no sooner than a real one would. A shorter
    /// minority — one step without a majority's evidence under steady loss — closes the gate
    /// (the lease) but moves nothing: reporting it at once gave the IP to another node for one
    /// step and back (two owner changes for no fault, I-flap, 9 of 500 seeds of the
    /// simulator's loss class at 3 nodes). A converging speaker that hears a majority is not
    /// withdrawn: at a cold start every gate is closed while the speakers converge, and
    /// excluding them would hand every IP to whichever gate opened first (and move them again
    /// as each of the others opened). One that hears a minority is (session 35): the others,
    /// who list it alive through a peer, planned its IPs on it until it converged by
    /// `converge_timeout` and only then reported — 3.4 s silent in the simulator's
    /// `a_speaker_restarted_while_cut_from_a_majority_is_not_waited_for`. One whose membership
    /// lists a minority (it started before the others) is not: reported, the others planned its
    /// IPs elsewhere as they converged and moved them back once its evidence came (two
    /// `AnnouncingIP` Events for one IP at a cold start in the lab, 4 runs of 14). When
    /// the gate reopens the report says so in the same step: a withdrawn node plans nothing, so
    /// its own report never changes its own plan, and its gains wait for the others' release
    /// (break before make).
    pub fn withdrawn(&self) -> bool {
        let lasted = |since: Instant| {
            self.last_step.is_some_and(|now| {
                now.saturating_duration_since(since) >= self.config.claim.stall_threshold
            })
        };
        self.in_membership && self.minority_since.is_some_and(lasted)
    }

    /// This node's report: its links after the hold-down, and whether it has withdrawn.
    fn own_report(&self) -> Option<LinkReport> {
        let withdrawn = self.withdrawn();
        self.own_links.clone().map(|mut r| {
            r.withdrawn = withdrawn;
            r
        })
    }

    /// The carrier reports to plan with: the members' (while in the membership) and ours.
    fn carriers(&self, obs: &Observation) -> Carriers {
        let mut carriers = match (&obs.membership, self.in_membership) {
            (Some(m), true) => m.carriers.clone(),
            _ => Carriers::new(),
        };
        if let Some(own) = self.own_report() {
            carriers.insert(self.config.me.clone(), own);
        }
        carriers
    }

    fn phases(&mut self, now: Instant, obs: Observation) {
        self.last_step = Some(now);
        self.membership_phase(now, &obs);
        let alive = match (&obs.membership, self.in_membership) {
            (Some(m), true) => m.alive.clone(),
            _ => BTreeSet::new(),
        };
        if !self.voters_seeded && !self.view.cluster.nodes.is_empty() {
            self.voters_seeded = true;
            self.voters.seed(now, obs.wall_secs, &self.view.cluster);
        }
        // G1: a peer counts toward convergence, the majority and the voter memory only while it
        // has answered this speaker's own lease requests (two-way evidence), not because gossip
        // says it is alive.
        let evidence = obs
            .membership
            .as_ref()
            .filter(|_| self.in_membership)
            .map(|m| &m.evidence);
        let evidenced: BTreeSet<String> = alive
            .iter()
            .filter(|n| {
                **n == self.config.me
                    || evidence.is_some_and(|e| e.get(*n).is_some_and(|t| now < *t))
            })
            .cloned()
            .collect();
        // The voter memory records every listed member (`evidenced` is a subset): a
        // denominator that only grows.
        self.voters.observe(now, &alive);
        let expected = self.voters.voters(&self.view.cluster, &self.config.me);
        if expected != self.last_voters {
            self.last_voters = expected.clone();
            self.outputs.push_back(Output::SetVoters(expected.clone()));
        }
        // F1 with a voter down: the members with evidence that list exactly what we list,
        // with us, are a majority of the voters: a voter none of them lists is down (or never
        // was) for all of them, and they plan nothing on it. It counts as heard of.
        let agreed: BTreeSet<String> = obs
            .membership
            .as_ref()
            .filter(|_| self.in_membership)
            .map(|m| {
                m.agreeing
                    .intersection(&evidenced)
                    .cloned()
                    .chain(std::iter::once(self.config.me.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let listed = if expected.len() >= 3 && crate::claim::has_quorum(&agreed, &expected) {
            alive.union(&expected).cloned().collect()
        } else {
            alive.clone()
        };
        let tick = self.gate.tick_listing(now, &evidenced, &listed, &expected);
        if let Some(gap) = tick.stalled {
            // F4: we were not running for longer than the others need to take our IPs. Stop
            // answering now, and stay out of the membership for the resync: the others may not
            // have declared us down yet, and an alive member that claims nothing would stay
            // elected and leave its IPs unanswered (the lab attack A7).
            self.counters.stalls += 1;
            self.note(Note::Stalled { gap });
            self.withdraw_now(now);
            self.leave();
        }
        let label = tick.standing.label();
        let standing_changed = label != self.last_standing;
        if standing_changed {
            self.note(Note::Standing(tick.standing.clone()));
        }
        self.ever_converged |= !matches!(tick.standing, Standing::Converging { .. });
        self.standing = tick.standing;
        // A minority for the withdrawn report: a converged speaker's, or a converging one's
        // whose membership lists a majority of the voters alive of which it hears (two-way)
        // only a minority ([`Self::withdrawn`]).
        let minority = match &self.standing {
            Standing::Minority { .. } => true,
            Standing::Converging { .. } => {
                crate::claim::has_quorum(&alive, &expected)
                    && !crate::claim::has_quorum(&evidenced, &expected)
            }
            Standing::Majority => false,
        };
        self.minority_since = if minority && self.in_membership {
            self.minority_since.or(Some(now))
        } else {
            None
        };
        let w = self.config.claim.stall_threshold;
        let mine = (self.config.me.as_str(), self.view.revision);
        for (ip, h) in self.handovers.iter_mut() {
            h.refresh(ip, &obs.membership, w, mine);
        }
        let carriers = self.carriers(&obs);
        // The members that may answer: alive and not withdrawn. A withdrawn holder answers
        // nothing, and when its gate reopens it waits for the others' release of what it
        // gains ([`Self::withdrawn`]), so a gain waits for it no more than for one that is down.
        let serving: BTreeSet<String> = alive
            .iter()
            .filter(|n| !carriers.get(*n).is_some_and(|r| r.withdrawn))
            .cloned()
            .collect();
        // A newer view asked for an IP we hold back for a third node: wait on it instead.
        let mut deferred = false;
        if let Some(m) = obs.membership.as_ref().filter(|_| self.in_membership) {
            for (ip, h) in self.handovers.iter_mut() {
                if let Some(asker) = m.askers.get(ip) {
                    deferred |= h.defer(asker, now, &serving, mine, &m.revisions);
                }
            }
        }
        let handover_due = deferred
            || self
                .handovers
                .iter()
                .any(|(ip, h)| h.due <= now || h.released(ip, &obs.membership));
        // A step that sees another membership than the last plan's re-plans, whatever woke
        // it: renewing the lease on a plan made for an older membership would let this node
        // answer, for one more lease, an IP that a newcomer has been told it may claim once
        // its break-before-make wait is over (the wake-up for the change may come later).
        let replan = obs.wake.is_event()
            || standing_changed
            || handover_due
            || alive != self.last_alive
            || carriers != self.last_carriers
            || self.replan_due(now);
        self.last_standing = label;
        if !self.standing.may_claim() {
            self.handovers.clear();
            self.current_plan = None;
            self.set_owned(BTreeMap::new());
            self.outputs.push_back(Output::Withdrawn);
            // What was assigned meanwhile was announced by the others: not new to us.
            self.fresh.restart();
            self.last_alive.clear();
            self.planned_view = None;
            return;
        }
        // The gate is open: serve what we own for one more stall threshold. The quorum lease
        // (G2: never beyond the evidence of a majority of the voters) is the executor's to apply
        // on top, with the evidence as it stands at each send ([`Output::SetVoters`]).
        self.outputs.push_back(Output::SetLease(
            now.checked_add(self.config.claim.stall_threshold),
        ));
        let restarted_peer = matches!(
            obs.wake,
            Wake::MemberEvent {
                restarted_peer: true
            }
        );
        if !replan && !restarted_peer {
            return;
        }
        self.last_plan = Some(now);
        let plan = Arc::new(plan_with_carrier(
            &self.view,
            &alive,
            &self.config.me,
            Some(obs.carrier),
            &carriers,
        ));
        self.current_plan = Some(plan.clone());
        self.outputs.push_back(Output::Planned {
            plan: plan.clone(),
            alive: alive.clone(),
        });
        // Probed before their first announcement (issue #10 item 5): IPs that newly got an
        // owner, and IPs a report says another host holds (whoever held them before).
        self.fresh.observe_assigned(
            now,
            plan.ips
                .iter()
                .filter(|(_, p)| p.owner.is_some())
                .map(|(ip, _)| *ip),
            &plan.ips.keys().copied().collect(),
        );
        let mut probe_first = self.fresh.fresh(now);
        probe_first.extend(obs.held_reported.iter().copied());
        let previously_owned = std::mem::take(&mut self.owned);
        // A holder that said it let the IP go since the gain was held back (G5.8) has handed
        // it over: claim at once. (A handover held back in this step began after any release
        // already heard.)
        self.handovers
            .retain(|ip, h| !h.released(ip, &obs.membership));
        let no_revisions = BTreeMap::new();
        let revisions = obs
            .membership
            .as_ref()
            .map_or(&no_revisions, |m| &m.revisions);
        // A release recipient whose grant since the release says its gate is closed (revision
        // 0: no plan, so it answers nothing) is no holder: its "not released" only says it
        // cannot vouch for our view (found by an attack: a withdrawn recipient, its view newer
        // than ours, kept the IP silent 2.9 s at 5 nodes).
        let given: crate::membership::lease::ReleasesGiven = obs
            .membership
            .as_ref()
            .map(|m| {
                m.releases_given
                    .iter()
                    .filter(|(ip, (to, at))| {
                        !m.handover_replies
                            .get(&(to.clone(), **ip))
                            .is_some_and(|r| r.sent >= *at && r.rev == 0)
                    })
                    .map(|(ip, g)| (*ip, g.clone()))
                    .collect()
            })
            .unwrap_or_default();
        let owned = self.hold_handovers(
            now,
            &plan,
            (&alive, &serving, revisions, &given),
            &carriers,
            &previously_owned,
            &mut probe_first,
        );
        self.planned_view = Some(self.view.clone());
        self.last_carriers = carriers;
        self.outputs.push_back(Output::SetFresh(probe_first));
        self.set_owned(owned);
        if alive != self.last_alive || restarted_peer {
            // S4: re-confirm ownership after any membership change.
            if plan
                .owned
                .keys()
                .any(|ip| previously_owned.contains_key(ip))
            {
                self.outputs.push_back(Output::Reannounce);
            }
            if alive != self.last_alive {
                self.note(Note::MembershipChanged(alive.clone()));
            }
            self.last_alive = alive;
        }
    }

    /// Break before make (issue #32 G2): an IP the plan newly gives this speaker while the node
    /// that held it — its owner under the previous plan (that plan's API view and membership),
    /// or, for a speaker that has no previous plan (start, rejoin), its owner without this
    /// speaker — is still alive is held back for [`ClaimSettings::stall_threshold`] after the
    /// gain. The holder, for its part, drops an IP in the step whose plan no longer gives it.
    ///
    /// - **Failback** (the gain comes from the membership): the holder answered this speaker's
    ///   lease requests (its grant is what let this speaker converge), so it had this speaker in
    ///   its membership then; from then on it either steps, re-plans and drops the IP, or does
    ///   not step and its own lease (one stall threshold after its last step) ends. Either way
    ///   it has stopped answering when this speaker starts: no overlap.
    /// - **API change** (an L2Advertisement, label or endpoint edit, a Node deleted or back;
    ///   review F-2): the holder drops the IP when its own watch delivers the change. With
    ///   `ℓ` how much later that is than this speaker's delivery, `W` the stall threshold: two
    ///   answerers for at most `ℓ − W` (none when `ℓ ≤ W`; the holder also yields to this
    ///   speaker's signed claim once it has held the IP for [`crate::answer::peers::PEER_SETTLE`]),
    ///   and the IP is unanswered for at most the gainer's own lag plus `W`. An edit undone within
    ///   `W` of its delivery moves nothing. Before this rule the gainer claimed at once and both
    ///   answered for the whole lag (and a holder that gained within `PEER_SETTLE` did not yield).
    ///
    /// An IP whose previous holder is down (failover) or has withdrawn (`serving` leaves it
    /// out: [`Self::withdrawn`]) — unless our grant released the IP to that holder within
    /// [`RELEASE_MEMORY`] (`given`: the report may predate its claim) — and a fresh IP without a live holder
    /// (probed first), are claimed at once; a fresh IP with one is a handover like any other and
    /// is not probed (`probe_first` loses it). A holder the membership lists but that has not answered our lease
    /// requests (it cannot reach us directly: the gate lets us converge without it, issue #32
    /// G1) waits the same: our datagrams reach it (then it knows us directly), or it learns of
    /// us by gossip, and its IP waiting the whole converge timeout left it unanswered for
    /// seconds in the simulator's one-way class. Returns the owned set to apply now.
    fn hold_handovers(
        &mut self,
        now: Instant,
        plan: &crate::plan::Plan,
        (alive, serving, revisions, given): (
            &BTreeSet<String>,
            &BTreeSet<String>,
            &BTreeMap<String, u64>,
            &crate::membership::lease::ReleasesGiven,
        ),
        carriers: &Carriers,
        previously_owned: &BTreeMap<IpAddr, Interfaces>,
        probe_first: &mut BTreeSet<IpAddr>,
    ) -> BTreeMap<IpAddr, Interfaces> {
        let me = self.config.me.clone();
        // A holder that serves, or the alive requester our grant released the IP to within
        // `RELEASE_MEMORY`, whatever its report says since (`RELEASE_MEMORY`'s docs).
        let holds = |ip: &IpAddr, q: &str| {
            serving.contains(q)
                || (alive.contains(q)
                    && given.get(ip).is_some_and(|(to, at)| {
                        to == q && at.checked_add(RELEASE_MEMORY).is_some_and(|end| now < end)
                    }))
        };
        // A gain already held back keeps its holder and its start: the previous plan of a later
        // step already names this speaker, so recomputing would find no holder.
        let gains: Vec<IpAddr> = plan
            .owned
            .keys()
            .filter(|ip| !previously_owned.contains_key(*ip) && !self.handovers.contains_key(*ip))
            .copied()
            .collect();
        self.handovers.retain(|ip, _| plan.owned.contains_key(ip));
        if !gains.is_empty() {
            // The previous plan's carrier reports too: an IP handed back by a node whose
            // carrier returned is held by the node that took it meanwhile (G5.5).
            let (before, carriers_before) = if self.last_alive.is_empty() {
                (
                    alive.iter().filter(|n| **n != me).cloned().collect(),
                    carriers,
                )
            } else {
                (self.last_alive.clone(), &self.last_carriers)
            };
            // The previous plan's own view, not today's: a gain that comes from the API view
            // (an L2Advertisement edit, a label, an endpoint that moved, a Node back) has a
            // holder too, whose watch may not have delivered the change yet (review F-2).
            let before_view = self
                .planned_view
                .clone()
                .filter(|_| !self.last_alive.is_empty())
                .unwrap_or_else(|| self.view.clone());
            let previous = plan_without_carrier(&before_view, &before, &me, carriers_before);
            for ip in gains {
                let previous_owner = previous.ips.get(&ip).and_then(|p| p.owner.clone());
                // Ours already under the previous plan: a gain held back before and let go
                // (released, or its wait is over).
                let ours = previous_owner.as_deref() == Some(me.as_str());
                let holder = previous_owner.filter(|q| *q != me && holds(&ip, q));
                match holder {
                    Some(holder) => {
                        // A handover, even of an IP still fresh: the holder's word, not a
                        // probe that would meet its last answers (issue #32 G5.8).
                        self.fresh.handed_over(&ip);
                        probe_first.remove(&ip);
                        let due = now
                            .checked_add(self.config.claim.stall_threshold)
                            .unwrap_or(now);
                        self.handovers.entry(ip).or_insert(Handover {
                            holder,
                            due,
                            since: now,
                            newer: None,
                        });
                    }
                    // No live holder: claim — unless an alive member's view is newer than
                    // ours, whose plan may give the IP to another node (our view lags: a stale
                    // failover). Ask it like a holder: it releases the IP only if its own plan
                    // gives it to us, says it holds it if it does, and is waited for one stall
                    // threshold if it says nothing.
                    None => {
                        match newest_view(serving, revisions, (me.as_str(), self.view.revision))
                            .filter(|_| !ours)
                        {
                            Some(newest) => {
                                let due = now
                                    .checked_add(self.config.claim.stall_threshold)
                                    .unwrap_or(now);
                                self.handovers.entry(ip).or_insert(Handover {
                                    holder: newest,
                                    due,
                                    since: now,
                                    newer: None,
                                });
                            }
                            None => {
                                self.handovers.remove(&ip);
                            }
                        }
                    }
                }
            }
        }
        // A holder that has gone down meanwhile hands over nothing: claim at once (unless
        // its view was the newer: `Handover::waiting`).
        let mine = (me.as_str(), self.view.revision);
        self.handovers.retain(|ip, h| {
            let holder_alive = holds(ip, &h.holder);
            h.waiting(now, (holder_alive, serving), mine, revisions)
        });
        plan.owned
            .iter()
            .filter(|(ip, _)| !self.handovers.contains_key(*ip))
            .map(|(ip, i)| (*ip, i.clone()))
            .collect()
    }

    /// Phases 1 and 2: declared down, carrier.
    fn membership_phase(&mut self, now: Instant, obs: &Observation) {
        // Declared down by the others (we learned it from their gossip and foca rejoined us
        // with a new generation): some of them may have elected new owners for our IPs.
        // Withdraw now and converge again. Unless a pause of ours explains it, also stay out of
        // the membership for a hold-off that doubles while it keeps happening: an alive member
        // that claims nothing would be elected by the others and leave its IPs unanswered.
        if self.in_membership
            && let Some(m) = &obs.membership
            && m.self_rejoins > self.seen_rejoins
        {
            self.seen_rejoins = m.self_rejoins;
            let leave = self.gate.declared_down(now);
            self.counters.declared_down += 1;
            self.withdraw_now(now);
            if leave {
                self.note(Note::DeclaredDownLeaving {
                    hold_off: self.gate.held_until().saturating_duration_since(now),
                });
                self.leave();
            } else {
                self.note(Note::DeclaredDownAfterPause);
            }
        }
        let held_off = now < self.gate.held_until();
        // Carrier gates membership: without any announce interface we must not look alive.
        if self.in_membership && !obs.carrier {
            self.note(Note::CarrierLost);
            self.leave();
        } else if !self.in_membership && obs.carrier && !held_off {
            self.note(Note::Rejoining);
            self.outputs
                .push_back(Output::Membership(MembershipCommand::Join));
            self.in_membership = true;
            self.before_join = Some((self.gate.clone(), self.seen_rejoins));
            self.seen_rejoins = 0;
            self.gate.restart(now);
        }
    }

    /// Stop answering at once: lease ends now, owned set empty.
    fn withdraw_now(&mut self, now: Instant) {
        self.outputs.push_back(Output::SetLease(Some(now)));
        self.current_plan = None;
        self.set_owned(BTreeMap::new());
    }

    /// Answers for exactly `owned`, framed by two [`Output::SetHandovers`] so that the
    /// membership's `holding` always covers what the responder answers (G5.8: a grant never
    /// says an IP is let go while it is answered for): before the responder changes, the IPs
    /// answered before and after; after it, those answered now.
    fn set_owned(&mut self, owned: BTreeMap<IpAddr, Interfaces>) {
        let mut asks: BTreeMap<String, BTreeSet<IpAddr>> = BTreeMap::new();
        for (ip, h) in &self.handovers {
            asks.entry(h.holder.clone()).or_default().insert(*ip);
        }
        let holding: BTreeSet<IpAddr> = owned.keys().copied().collect();
        let widened: BTreeSet<IpAddr> = self.holding.union(&holding).copied().collect();
        if widened != self.holding {
            self.outputs.push_back(Output::SetHandovers {
                asks: asks.clone(),
                holding: widened,
                plan: self.current_plan.clone(),
                revision: self.view.revision,
            });
        }
        self.owned = owned.clone();
        self.outputs.push_back(Output::SetOwned(owned));
        self.holding.clone_from(&holding);
        self.outputs.push_back(Output::SetHandovers {
            asks,
            holding,
            plan: self.current_plan.clone(),
            revision: self.view.revision,
        });
    }

    fn leave(&mut self) {
        if self.in_membership {
            self.in_membership = false;
            self.outputs
                .push_back(Output::Membership(MembershipCommand::Leave {
                    grace: self.config.leave_grace,
                }));
        }
    }

    fn note(&mut self, note: Note) {
        self.outputs.push_back(Output::Note(note));
    }
}
