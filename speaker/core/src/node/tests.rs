//! Replays of inputs through [`SpeakerCore`]: each phase of the step, and determinism.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_crds::L2AdvertisementSpec;

use super::*;
use crate::carrier::{Carriers, LinkReport};
use crate::eligibility::{NodeFacts, PoolRef, ServiceFacts};

const IP: &str = "198.51.100.53";

/// Milliseconds.
const MS: fn(u64) -> Duration = Duration::from_millis;

fn settings() -> ClaimSettings {
    ClaimSettings::for_membership(Duration::from_millis(100), Duration::from_millis(200))
}

fn view(nodes: &[&str]) -> Arc<View> {
    let mut v = View::default();
    for n in nodes {
        v.cluster.nodes.insert(n.to_string(), NodeFacts::default());
    }
    v.cluster
        .advertisements
        .insert("all".into(), L2AdvertisementSpec::default());
    v.ips.insert(
        IP.parse().unwrap(),
        vec![ServiceFacts {
            name: "default/svc-a".into(),
            pool: PoolRef {
                name: "pool".into(),
                ..Default::default()
            },
            ..Default::default()
        }],
    );
    Arc::new(v)
}

fn names(n: &[&str]) -> BTreeSet<String> {
    n.iter().map(|s| s.to_string()).collect()
}

/// The node the election gives the IP to when all three are alive.
fn owner(nodes: &[&str]) -> String {
    let p = crate::plan::plan(&view(nodes), &names(nodes), nodes[0], Some(true));
    p.ips.values().next().unwrap().owner.clone().unwrap()
}

fn obs(wake: Wake, alive: &[&str], rejoins: u64) -> Observation {
    Observation {
        wake,
        carrier: true,
        links: LinkReport::default(),
        membership: Some(MembershipObservation {
            alive: names(alive),
            self_rejoins: rejoins,
            // Every alive peer answers our lease requests (healthy two-way links).
            evidence: alive
                .iter()
                .map(|n| (n.to_string(), far_future()))
                .collect(),
            carriers: Carriers::new(),
            handover_replies: BTreeMap::new(),
            revisions: BTreeMap::new(),
            askers: BTreeMap::new(),
            releases_given: BTreeMap::new(),
            agreeing: BTreeSet::new(),
        }),
        wall_secs: 1_800_000_000,
        held_reported: BTreeSet::new(),
    }
}

fn far_future() -> Instant {
    Instant::now() + Duration::from_secs(365 * 86_400)
}

fn drain(core: &mut SpeakerCore) -> Vec<Output> {
    std::iter::from_fn(|| core.poll_output()).collect()
}

fn last_owned(outs: &[Output]) -> Option<BTreeMap<IpAddr, Interfaces>> {
    outs.iter().rev().find_map(|o| match o {
        Output::SetOwned(m) => Some(m.clone()),
        _ => None,
    })
}

fn has_membership(outs: &[Output], leave: bool) -> bool {
    outs.iter().any(|o| match o {
        Output::Membership(MembershipCommand::Leave { .. }) => leave,
        Output::Membership(MembershipCommand::Join) => !leave,
        _ => false,
    })
}

const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

/// The owner's core, converged with all three alive at `t0 + 100 ms`.
fn converged(t0: Instant) -> SpeakerCore {
    let me = owner(&NODES);
    // Started 500 ms before `t0`, converged at -400 ms; the IP's holder without it is alive, so
    // the gain is held back one stall threshold (break before make) and claimed at -100 ms.
    let ms = Duration::from_millis;
    let start = t0.checked_sub(ms(500)).unwrap();
    let mut core = SpeakerCore::new(NodeConfig::new(me, settings()), start);
    core.set_view(view(&NODES));
    core.step(start + ms(100), obs(Wake::MembersChanged, &NODES, 0));
    // Ticks 100 ms apart: no gap the gate would take for a pause of ours.
    for at in [200, 300, 400, 500] {
        core.step(start + ms(at), obs(Wake::Tick, &NODES, 0));
    }
    core.step(t0 + ms(100), obs(Wake::MembersChanged, &NODES, 0));
    core
}

/// [`converged`] with its outputs taken, and its start.
fn converged_drained() -> (Instant, SpeakerCore) {
    let t0 = Instant::now();
    let mut core = converged(t0);
    drain(&mut core);
    (t0, core)
}

/// F1 with a voter down (issue #32, found by attacking G1): five voters, `node-e` down (its
/// vote kept); a restarted `node-a` hears the other three with two-way evidence. It converges
/// at once when those whose grants list exactly its own members make, with it, a majority of
/// the voters (none of them lists `node-e`); with fewer agreeing, or none, it waits, as before,
/// for the converge timeout.
#[test]
fn a_restart_with_a_voter_down_converges_once_a_majority_lists_the_same_members() {
    let five = ["node-a", "node-b", "node-c", "node-d", "node-e"];
    let up = &five[..4];
    for (agreeing, converges) in [
        (&["node-b", "node-c", "node-d"][..], true),
        (&["node-b", "node-c"][..], true),
        (&["node-b"][..], false),
        (&[][..], false),
    ] {
        let t0 = Instant::now();
        let mut core = SpeakerCore::new(NodeConfig::new("node-a", settings()), t0);
        core.set_view(view(&five));
        let mut t = t0;
        for _ in 0..5 {
            t += Duration::from_millis(100);
            let mut o = obs(Wake::Tick, up, 0);
            if let Some(m) = o.membership.as_mut() {
                m.agreeing = names(agreeing);
            }
            core.step(t, o);
        }
        assert_eq!(
            core.standing().may_claim(),
            converges,
            "agreeing {agreeing:?}: {:?}",
            core.standing()
        );
    }
}

#[test]
fn converges_then_claims_with_a_lease_of_one_stall_threshold() {
    let t0 = Instant::now();
    let me = owner(&NODES);
    let mut core = SpeakerCore::new(NodeConfig::new(me.clone(), settings()), t0);
    core.set_view(view(&NODES));
    // Only itself heard: converging, nothing claimed, not ready.
    core.step(t0, obs(Wake::Tick, &[me.as_str()], 0));
    let outs = drain(&mut core);
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()), "{outs:?}");
    assert!(
        !outs.iter().any(|o| matches!(o, Output::SetLease(_))),
        "no lease while converging: {outs:?}"
    );
    assert!(!core.ready());
    // Everyone heard: the gate opens and the owner claims the IP, lease = now + 300 ms.
    let t1 = t0 + Duration::from_millis(100);
    core.step(t1, obs(Wake::MembersChanged, &NODES, 0));
    let outs = drain(&mut core);
    assert_eq!(core.standing(), &Standing::Majority);
    assert!(core.ready());
    assert!(outs.contains(&Output::SetLease(Some(t1 + Duration::from_millis(300)))));
    // Break before make: the IP's holder without this speaker is alive, so the gain waits one
    // stall threshold (that holder has stopped answering by then: re-planned, or lease over).
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()), "{outs:?}");
    assert_eq!(core.poll_timeout(), Some(t1 + Duration::from_millis(100)));
    core.step(t1 + Duration::from_millis(100), obs(Wake::Tick, &NODES, 0));
    assert_eq!(last_owned(&drain(&mut core)), None, "not yet");
    let t1 = t1 + Duration::from_millis(300);
    core.step(t1, obs(Wake::Tick, &NODES, 0));
    let outs = drain(&mut core);
    let owned = last_owned(&outs).unwrap();
    assert!(owned.contains_key(&IP.parse().unwrap()), "{outs:?}");
    // In the first view: assigned before this speaker started, not probed.
    assert!(
        outs.contains(&Output::SetFresh(BTreeSet::new())),
        "{outs:?}"
    );
    // An IP that appears later is new: probed before its first announcement.
    let mut v = (*view(&NODES)).clone();
    let new_ip: IpAddr = "198.51.100.54".parse().unwrap();
    let facts = v.ips.values().next().unwrap().clone();
    v.ips.insert(new_ip, facts);
    core.set_view(Arc::new(v));
    core.step(
        t1 + Duration::from_millis(50),
        obs(Wake::ViewChanged, &NODES, 0),
    );
    let outs = drain(&mut core);
    assert!(
        outs.iter()
            .any(|o| matches!(o, Output::SetFresh(f) if f.contains(&new_ip))),
        "{outs:?}"
    );
}

#[test]
fn a_tick_renews_the_lease_and_replans_only_when_due() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(200);
    core.step(t, obs(Wake::Tick, &NODES, 0));
    let outs = drain(&mut core);
    assert_eq!(
        outs,
        vec![Output::SetLease(Some(t + Duration::from_millis(300)))]
    );
    assert_eq!(core.poll_timeout(), Some(t + Duration::from_millis(100)));
    let t = t0 + Duration::from_millis(350);
    core.step(t, obs(Wake::Tick, &NODES, 0));
    let outs = drain(&mut core);
    assert!(
        outs.iter().any(|o| matches!(o, Output::Planned { .. })),
        "{outs:?}"
    );
    // Same membership, IP already owned: no re-announcement.
    assert!(!outs.contains(&Output::Reannounce));
}

#[test]
fn a_restarted_peer_makes_owned_ips_be_reannounced() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(150);
    core.step(
        t,
        obs(
            Wake::MemberEvent {
                restarted_peer: true,
            },
            &NODES,
            0,
        ),
    );
    assert!(drain(&mut core).contains(&Output::Reannounce));
}

#[test]
fn a_gap_over_the_stall_threshold_withdraws_at_once_and_leaves() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(100 + 301);
    core.step(t, obs(Wake::Tick, &NODES, 0));
    let outs = drain(&mut core);
    assert_eq!(outs[1], Output::SetLease(Some(t)), "{outs:?}");
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()));
    assert!(has_membership(&outs, true));
    assert_eq!(core.counters().stalls, 1);
    assert!(!core.in_membership());
    // Out of the membership for the resync, then back in (carrier is up).
    core.step(t + Duration::from_millis(100), obs(Wake::Tick, &NODES, 0));
    assert!(!has_membership(&drain(&mut core), false));
    core.step(t + Duration::from_millis(300), obs(Wake::Tick, &NODES, 0));
    assert!(has_membership(&drain(&mut core), false));
}

#[test]
fn declared_down_withdraws_and_holds_off_with_back_off() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(200);
    core.step(t, obs(Wake::Tick, &NODES, 1));
    let outs = drain(&mut core);
    assert_eq!(outs[0], Output::SetLease(Some(t)), "{outs:?}");
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()));
    assert!(has_membership(&outs, true));
    assert!(outs.contains(&Output::Note(Note::DeclaredDownLeaving {
        hold_off: Duration::from_millis(300)
    })));
    // No rejoin during the hold-off, a rejoin after it.
    core.step(t + Duration::from_millis(100), obs(Wake::Tick, &NODES, 1));
    assert!(!has_membership(&drain(&mut core), false));
    core.step(t + Duration::from_millis(200), obs(Wake::Tick, &NODES, 1));
    assert!(!has_membership(&drain(&mut core), false));
    let t2 = t + Duration::from_millis(300);
    core.step(t2, obs(Wake::Tick, &NODES, 0));
    assert!(has_membership(&drain(&mut core), false));
    // Declared down again within a minute: the hold-off doubles.
    let t3 = t2 + Duration::from_millis(100);
    core.step(t3, obs(Wake::Tick, &NODES, 1));
    let outs = drain(&mut core);
    assert!(
        outs.contains(&Output::Note(Note::DeclaredDownLeaving {
            hold_off: Duration::from_millis(600)
        })),
        "{outs:?}"
    );
    assert_eq!(core.counters().declared_down, 2);
}

#[test]
fn carrier_loss_leaves_and_carrier_back_rejoins_converging() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(200);
    let mut o = obs(Wake::Tick, &NODES, 0);
    o.carrier = false;
    core.step(t, o);
    let outs = drain(&mut core);
    assert!(has_membership(&outs, true));
    assert!(!core.ready());
    // Out of the membership: it sees nobody, a minority of three.
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()), "{outs:?}");
    // Carrier back: rejoin (the executor has no membership to observe yet).
    let t = t + Duration::from_millis(100);
    let mut o = obs(Wake::Tick, &NODES, 0);
    o.membership = None;
    core.step(t, o);
    let outs = drain(&mut core);
    assert!(has_membership(&outs, false));
    assert_eq!(core.standing().label(), "converging", "{outs:?}");
}

#[test]
fn a_minority_withdraws_everything() {
    let t0 = Instant::now();
    let mut core = converged(t0);
    let me = core.config().me.clone();
    drain(&mut core);
    let t = t0 + Duration::from_millis(200);
    core.step(t, obs(Wake::MembersChanged, &[me.as_str()], 0));
    let outs = drain(&mut core);
    assert_eq!(
        core.standing(),
        &Standing::Minority {
            alive: 1,
            expected: 3
        }
    );
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()));
    assert!(outs.contains(&Output::Withdrawn));
    assert!(
        !outs
            .iter()
            .any(|o| matches!(o, Output::SetLease(Some(l)) if *l > t))
    );
}

#[test]
fn the_same_inputs_give_the_same_outputs() {
    let run = || {
        let t0 = Instant::now();
        let mut core = converged(t0);
        let mut all = vec![];
        for (i, (alive, rejoins)) in [
            (&NODES[..], 0),
            (&NODES[..2], 0),
            (&NODES[..1], 0),
            (&NODES[..], 1),
            (&NODES[..], 1),
        ]
        .into_iter()
        .enumerate()
        {
            let t = t0 + Duration::from_millis(100 * (i as u64 + 2));
            core.step(t, obs(Wake::Tick, alive, rejoins));
            all.extend(drain(&mut core).into_iter().map(|o| match o {
                // Instants differ between runs: compare offsets.
                Output::SetLease(l) => format!("lease {:?}", l.map(|l| l - t0)),
                other => format!("{other:?}"),
            }));
        }
        all
    };
    assert_eq!(run(), run());
}

fn position(outs: &[Output], pred: impl Fn(&Output) -> bool) -> Option<usize> {
    outs.iter().position(pred)
}

#[test]
fn a_changed_membership_reannounces_after_the_owned_set_and_probes_before_it() {
    let t0 = Instant::now();
    let mut core = converged(t0);
    let me = core.config().me.clone();
    drain(&mut core);
    // One peer gone, the majority kept: the owner still owns the IP and re-announces it (S4).
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != me).collect();
    let alive = [me.as_str(), rest[0]];
    let mut o = obs(Wake::MembersChanged, &alive, 0);
    let held: IpAddr = "198.51.100.99".parse().unwrap();
    o.held_reported = BTreeSet::from([held]);
    core.step(t0 + Duration::from_millis(150), o);
    let outs = drain(&mut core);
    let fresh = position(
        &outs,
        |o| matches!(o, Output::SetFresh(f) if f.contains(&held)),
    )
    .expect("an IP a report says another host holds is probed first");
    let owned = position(
        &outs,
        |o| matches!(o, Output::SetOwned(m) if m.contains_key(&IP.parse().unwrap())),
    )
    .expect("still owned");
    let again = position(&outs, |o| *o == Output::Reannounce).expect("S4");
    assert!(fresh < owned && owned < again, "{outs:?}");
    assert!(outs.contains(&Output::Note(Note::MembershipChanged(names(&alive)))));
}

#[test]
fn declared_down_right_after_a_pause_withdraws_without_leaving() {
    let (t0, mut core) = converged_drained();
    // A gap of 200 ms: over half the stall threshold, not over it.
    let t = t0 + Duration::from_millis(300);
    core.step(t, obs(Wake::Tick, &NODES, 1));
    let outs = drain(&mut core);
    assert!(
        outs.contains(&Output::Note(Note::DeclaredDownAfterPause)),
        "{outs:?}"
    );
    assert!(!has_membership(&outs, true), "{outs:?}");
    assert_eq!(outs[0], Output::SetLease(Some(t)));
    assert_eq!(last_owned(&outs), Some(BTreeMap::new()));
    assert!(core.in_membership());
}

#[test]
fn no_rejoin_before_a_doubled_hold_off_ends() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(200);
    core.step(t, obs(Wake::Tick, &NODES, 1));
    let out_of = |core: &mut SpeakerCore, at: Instant| {
        let mut o = obs(Wake::Tick, &NODES, 0);
        o.membership = None;
        core.step(at, o);
        has_membership(&drain(core), false)
    };
    assert!(!out_of(&mut core, t + Duration::from_millis(100)));
    assert!(!out_of(&mut core, t + Duration::from_millis(200)));
    assert!(out_of(&mut core, t + Duration::from_millis(300)));
    // Declared down again: 600 ms this time.
    let t3 = t + Duration::from_millis(400);
    core.step(t3, obs(Wake::Tick, &NODES, 1));
    let outs = drain(&mut core);
    assert!(
        outs.contains(&Output::Note(Note::DeclaredDownLeaving {
            hold_off: Duration::from_millis(600)
        })),
        "{outs:?}"
    );
    for ms in [100, 200, 300, 400, 500] {
        assert!(
            !out_of(&mut core, t3 + Duration::from_millis(ms)),
            "rejoined {ms} ms into a 600 ms hold-off"
        );
    }
    assert!(out_of(&mut core, t3 + Duration::from_millis(600)));
}

#[test]
fn a_failed_join_is_asked_again_at_the_next_step() {
    let (t0, mut core) = converged_drained();
    let mut o = obs(Wake::Tick, &NODES, 0);
    o.carrier = false;
    core.step(t0 + Duration::from_millis(200), o);
    drain(&mut core);
    let mut o = obs(Wake::Tick, &NODES, 0);
    o.membership = None;
    core.step(t0 + Duration::from_millis(300), o.clone());
    assert!(has_membership(&drain(&mut core), false));
    core.join_failed();
    assert!(!core.in_membership() && !core.ready());
    core.step(t0 + Duration::from_millis(400), o);
    assert!(has_membership(&drain(&mut core), false));
}

#[test]
fn no_lease_is_renewed_while_out_of_the_membership_for_a_resync() {
    let (t0, mut core) = converged_drained();
    let t = t0 + Duration::from_millis(100 + 301);
    core.step(t, obs(Wake::Tick, &NODES, 0));
    drain(&mut core);
    let mut o = obs(Wake::Tick, &NODES, 0);
    o.membership = None;
    core.step(t + Duration::from_millis(100), o);
    let outs = drain(&mut core);
    assert!(
        !outs
            .iter()
            .any(|o| matches!(o, Output::SetLease(Some(l)) if *l > t)),
        "{outs:?}"
    );
}

/// G1: peers the membership lists as alive but that have not answered this speaker's lease
/// requests (no two-way evidence) count for nothing: the gate waits out its convergence
/// timeout and then sees a minority (itself, of three), so nothing is claimed.
#[test]
fn only_peers_with_two_way_evidence_count() {
    let t0 = Instant::now();
    let me = owner(&NODES);
    let mut core = SpeakerCore::new(NodeConfig::new(me.clone(), settings()), t0);
    core.set_view(view(&NODES));
    let mut o = obs(Wake::MembersChanged, &NODES, 0);
    if let Some(m) = o.membership.as_mut() {
        m.evidence.clear();
    }
    let mut t = t0;
    for _ in 0..40 {
        t += Duration::from_millis(100);
        core.step(t, o.clone());
    }
    assert!(
        matches!(
            core.standing(),
            Standing::Minority {
                alive: 1,
                expected: 3
            }
        ),
        "{:?}",
        core.standing()
    );
    assert_eq!(core.owned(), &BTreeMap::new());
}

/// Break before make: a gain whose holder under the previous membership is still alive waits
/// one stall threshold; a gain from a holder that is down (failover) is claimed at once, and
/// so is a held-back gain whose holder goes down during the wait.
#[test]
fn a_failback_waits_for_the_holder_a_failover_does_not() {
    let (t0, mut core) = converged_drained();
    let me = core.config().me.clone();
    let ip: IpAddr = IP.parse().unwrap();
    let others: Vec<&str> = NODES.iter().copied().filter(|n| *n != me).collect();
    let ms = Duration::from_millis;
    // The owner (me) is out of the picture: simulate by a core on the next-ranked node.
    let second = {
        let p = crate::plan::plan(&view(&NODES), &names(&others), others[0], Some(true));
        p.ips[&ip].owner.clone().unwrap()
    };
    let third: &str = others.iter().copied().find(|n| *n != second).unwrap();
    let mut next = SpeakerCore::new(NodeConfig::new(second.clone(), settings()), t0);
    next.set_view(view(&NODES));
    let mut t = t0;
    for _ in 0..5 {
        t += ms(100);
        next.step(t, obs(Wake::Tick, &NODES, 0));
    }
    assert_eq!(
        next.owned(),
        &BTreeMap::new(),
        "not the owner while it is alive"
    );
    // Failover: the owner is declared down; the next one claims at once.
    t += ms(100);
    next.step(t, obs(Wake::MembersChanged, &[second.as_str(), third], 0));
    assert!(next.owned().contains_key(&ip), "failover claims at once");
    // Failback: the owner is back; the next one drops the IP at once.
    t += ms(100);
    next.step(t, obs(Wake::MembersChanged, &NODES, 0));
    assert_eq!(next.owned(), &BTreeMap::new());
    drain(&mut core);
    drop(core);
    // The owner, restarted (no previous plan), waits while the next one (alive) may still
    // answer, and claims at once when that one goes down meanwhile.
    let mut back = SpeakerCore::new(NodeConfig::new(me.clone(), settings()), t);
    back.set_view(view(&NODES));
    t += ms(100);
    back.step(t, obs(Wake::MembersChanged, &NODES, 0));
    assert_eq!(back.owned(), &BTreeMap::new(), "held back");
    t += ms(100);
    back.step(t, obs(Wake::MembersChanged, &[me.as_str(), third], 0));
    assert!(back.owned().contains_key(&ip), "the holder went down");
}

/// A voter the membership lists but that cannot reach us directly (a one-way cut: no grant,
/// so no two-way evidence) does not hold the gate shut once a majority gave evidence (issue #32
/// G1); an IP it held is handed over after one stall threshold, like any other.
#[test]
fn a_listed_voter_without_two_way_evidence_does_not_hold_the_gate_shut() {
    let me = owner(&NODES);
    let ip: IpAddr = IP.parse().unwrap();
    let others: Vec<&str> = NODES.iter().copied().filter(|n| *n != me).collect();
    // The IP's holder while `me` was away.
    let holder = {
        let p = crate::plan::plan(&view(&NODES), &names(&others), others[0], Some(true));
        p.ips[&ip].owner.clone().unwrap()
    };
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let mut core = SpeakerCore::new(NodeConfig::new(me.clone(), settings()), t0);
    core.set_view(view(&NODES));
    let mut o = obs(Wake::MembersChanged, &NODES, 0);
    if let Some(m) = o.membership.as_mut() {
        m.evidence.remove(&holder);
    }
    let mut first_owned = None;
    let mut t = t0;
    for step in 0..10 {
        t += ms(100);
        core.step(t, o.clone());
        if step == 0 {
            assert!(core.standing().may_claim(), "{:?}", core.standing());
        }
        if first_owned.is_none() && core.owned().contains_key(&ip) {
            first_owned = Some(t.saturating_duration_since(t0));
        }
    }
    let waited = first_owned.expect("claimed");
    assert!(waited < ms(1000), "{waited:?}");
}

/// A bare tick that observes another membership than the last plan's re-plans before it renews
/// the lease: the owner never answers one more lease on a plan made for an older membership
/// (the change's own wake-up may come later, e.g. under CPU starvation).
#[test]
fn a_tick_that_sees_a_new_membership_replans() {
    let (t0, mut core) = converged_drained();
    let me = core.config().me.clone();
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != me).collect();
    let t = t0 + Duration::from_millis(200);
    core.step(t, obs(Wake::Tick, &[me.as_str(), rest[0]], 0));
    let outs = drain(&mut core);
    assert!(
        outs.iter().any(|o| matches!(o, Output::Planned { .. })),
        "{outs:?}"
    );
}

/// A held-back gain stays held across later steps until its start (the later steps' previous
/// plan already names this speaker, which must not read as "no holder").
#[test]
fn a_held_back_gain_stays_held_across_steps() {
    let t0 = Instant::now();
    let me = owner(&NODES);
    let ip: IpAddr = IP.parse().unwrap();
    let mut core = SpeakerCore::new(NodeConfig::new(me.clone(), settings()), t0);
    core.set_view(view(&NODES));
    let ms = Duration::from_millis;
    core.step(t0 + ms(100), obs(Wake::MembersChanged, &NODES, 0));
    assert!(!core.owned().contains_key(&ip), "held back");
    core.step(t0 + ms(102), obs(Wake::ViewChanged, &NODES, 0));
    core.step(t0 + ms(200), obs(Wake::MembersChanged, &NODES, 0));
    assert!(!core.owned().contains_key(&ip), "still held back");
    core.step(t0 + ms(400), obs(Wake::Tick, &NODES, 0));
    assert!(core.owned().contains_key(&ip), "claimed at the start");
}

/// [`view`] with `excluded` carrying the exclusion label: not eligible for any IP.
fn view_excluding(nodes: &[&str], excluded: &str) -> Arc<View> {
    let mut v = (*view(nodes)).clone();
    if let Some(n) = v.cluster.nodes.get_mut(excluded) {
        n.labels
            .insert(crate::eligibility::EXCLUDE_LB_LABEL.into(), String::new());
    }
    Arc::new(v)
}

/// A core on the node that owns the IP once `holder` is left out by the API, converged on
/// [`view`] with every node alive (it owns nothing), and the time of its last step.
fn successor_of(holder: &str, t0: Instant) -> (SpeakerCore, Instant) {
    let ip: IpAddr = IP.parse().unwrap();
    let excluded = view_excluding(&NODES, holder);
    let next = crate::plan::plan(&excluded, &names(&NODES), NODES[0], Some(true)).ips[&ip]
        .owner
        .clone()
        .unwrap();
    assert_ne!(next, holder);
    let mut core = SpeakerCore::new(NodeConfig::new(next, settings()), t0);
    core.set_view(view(&NODES));
    let mut t = t0;
    for _ in 0..6 {
        t += Duration::from_millis(100);
        core.step(t, obs(Wake::Tick, &NODES, 0));
    }
    assert!(core.standing().may_claim(), "{:?}", core.standing());
    assert_eq!(core.owned(), &BTreeMap::new(), "not the owner yet");
    drain(&mut core);
    (core, t)
}

/// The successor of `holder`, stepped 5 ms after a view change that excludes `holder` (an API
/// gain), and the instant of that step.
fn api_gain(holder: &str) -> (SpeakerCore, Instant) {
    let (mut core, mut t) = successor_of(holder, Instant::now());
    core.set_view(view_excluding(&NODES, holder));
    t += Duration::from_millis(5);
    core.step(t, obs(Wake::ViewChanged, &NODES, 0));
    (core, t)
}

/// Make after break for a gain that comes from the API view (review F-2, issue #32): an
/// L2Advertisement, label or endpoint change that gives this node an IP whose owner under its
/// previous view is alive waits one stall threshold before it claims, as a failback does: the
/// holder's watch may deliver the change later, and until then it still answers. The holder,
/// whose own view has the change, drops the IP at once. A holder that goes down meanwhile hands
/// over nothing: claimed at once.
#[test]
fn a_gain_from_the_api_view_waits_for_a_live_holder() {
    let (ip, holder, ms) = (IP.parse::<IpAddr>().unwrap(), owner(&NODES), MS);
    let (mut core, mut t) = api_gain(&holder);
    assert!(!core.owned().contains_key(&ip), "held back for the holder");
    let due = core.poll_timeout().unwrap();
    assert!(due <= t + settings().stall_threshold, "wakes for the start");
    for _ in 0..2 {
        t += ms(100);
        core.step(t, obs(Wake::Tick, &NODES, 0));
        assert!(!core.owned().contains_key(&ip), "still held back");
    }
    t += ms(100);
    core.step(t, obs(Wake::Tick, &NODES, 0));
    assert!(
        core.owned().contains_key(&ip),
        "claimed one stall threshold after the gain"
    );

    // The holder goes down during the wait: claimed at once.
    let (mut core, mut t) = api_gain(&holder);
    assert!(!core.owned().contains_key(&ip));
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != holder).collect();
    t += ms(50);
    core.step(t, obs(Wake::MembersChanged, &rest, 0));
    assert!(core.owned().contains_key(&ip), "the holder went down");

    // The holder's side: its own view leaves it out, it drops the IP in the same step.
    let (t0, mut owner_core) = converged_drained();
    assert!(owner_core.owned().contains_key(&ip));
    owner_core.set_view(view_excluding(&NODES, &holder));
    owner_core.step(t0 + ms(150), obs(Wake::ViewChanged, &NODES, 0));
    assert_eq!(owner_core.owned(), &BTreeMap::new(), "released at once");
}

/// An observation carrying `holder`'s reply about `ip` to a request sent at `sent`.
fn replied(holder: &str, ip: IpAddr, sent: Instant, released: bool) -> Observation {
    replied_at(holder, ip, sent, released, 0)
}

/// [`replied`] from a holder whose view is at revision `rev`.
fn replied_at(holder: &str, ip: IpAddr, sent: Instant, released: bool, rev: u64) -> Observation {
    let mut o = obs(Wake::HandoverReply, &NODES, 0);
    if let Some(m) = o.membership.as_mut() {
        m.handover_replies = [(
            (holder.to_string(), ip),
            crate::membership::lease::HandoverReply {
                sent,
                released,
                rev,
            },
        )]
        .into();
    }
    o
}

/// Issue #32 G5.8, the mutual hold: a holder whose view is newer than ours (a larger
/// revision) is waited for as long as it says it holds the IP, past [`HANDOVER_HOLD_MAX`]: our
/// view is the one that lags. One whose view is older is waited for up to the cap, as before
/// (its watch may be stuck). A newer holder that falls silent is still waited for while it is
/// alive (the nodes with current views fail it over, not ours); once it is declared down, the
/// alive member with the newest view is asked instead, or, with none newer than ours, the gain
/// is claimed.
#[test]
fn a_holder_with_the_newer_view_is_waited_for_without_the_cap() {
    let (ip, holder, ms) = (IP.parse::<IpAddr>().unwrap(), owner(&NODES), MS);
    let at_rev = |rev: u64| {
        Arc::new(View {
            revision: rev,
            ..(*view_excluding(&NODES, &holder)).clone()
        })
    };
    let others: Vec<&str> = NODES.iter().copied().filter(|n| *n != holder).collect();
    // The holder declared down: its last reply (sent at `t`) and the others' revisions.
    let quiet = |t: Instant, revisions: &[(&str, u64)]| {
        let mut o = obs(Wake::Tick, &others, 0);
        if let Some(m) = o.membership.as_mut() {
            m.handover_replies = replied_at(&holder, ip, t, false, 11)
                .membership
                .map(|m| m.handover_replies)
                .unwrap_or_default();
            m.revisions = revisions.iter().map(|(n, r)| (n.to_string(), *r)).collect();
        }
        o
    };
    for (holder_rev, claimed) in [(11, false), (9, true)] {
        let (mut core, mut t) = successor_of(&holder, Instant::now());
        core.set_view(at_rev(10));
        t += ms(5);
        core.step(t, obs(Wake::ViewChanged, &NODES, 0));
        let gained_at = t;
        assert!(!core.owned().contains_key(&ip), "held back");
        while t < gained_at + HANDOVER_HOLD_MAX + ms(500) {
            t += ms(50);
            core.step(t, replied_at(&holder, ip, t - ms(1), false, holder_rev));
        }
        assert_eq!(
            core.owned().contains_key(&ip),
            claimed,
            "holder at revision {holder_rev}, ours 10"
        );
        if claimed {
            continue;
        }
        // The newer holder falls silent: still held while it is listed alive.
        let said = t - ms(1);
        for _ in 0..10 {
            t += ms(100);
            core.step(t, replied_at(&holder, ip, said, false, holder_rev));
        }
        assert!(!core.owned().contains_key(&ip), "a silent newer holder");
        // Declared down, with no member whose view is newer than ours (equal revisions do not
        // count: no round trip added to a failover): claimed at once.
        t += ms(100);
        let equal: Vec<(&str, u64)> = others.iter().map(|n| (*n, 10)).collect();
        core.step(t, quiet(said, &equal));
        assert!(core.owned().contains_key(&ip), "nobody knows better");
    }
    // Declared down while another member's view is newer still: that member is asked instead,
    // and its word decides (held while it holds the IP, claimed on its release).
    let (mut core, mut t) = successor_of(&holder, Instant::now());
    let me = core.config().me.clone();
    let next = others
        .iter()
        .copied()
        .find(|n| **n != me)
        .unwrap_or_default();
    core.set_view(at_rev(10));
    t += ms(5);
    core.step(t, obs(Wake::ViewChanged, &NODES, 0));
    t += ms(50);
    core.step(t, replied_at(&holder, ip, t - ms(1), false, 11));
    let mut asked = BTreeSet::new();
    t += ms(100);
    core.step(t, quiet(t - ms(101), &[(next, 12)]));
    while let Some(o) = core.poll_output() {
        if let Output::SetHandovers { asks, .. } = o {
            asked = asks.keys().cloned().collect();
        }
    }
    assert!(
        !core.owned().contains_key(&ip),
        "asks the newest alive view"
    );
    assert_eq!(asked, [next.to_string()].into(), "the next holder is asked");
    // The next holder's reply (sent just before `t`), the first one down.
    let next_says = |t: Instant, released: bool| {
        let mut o = quiet(t - ms(101), &[(next, 12)]);
        if let Some(m) = o.membership.as_mut() {
            m.handover_replies = replied_at(next, ip, t - ms(1), released, 12)
                .membership
                .map(|m| m.handover_replies)
                .unwrap_or_default();
        }
        o
    };
    for _ in 0..40 {
        t += ms(100);
        core.step(t, next_says(t, false));
        assert!(!core.owned().contains_key(&ip), "the next holder holds it");
    }
    t += ms(100);
    core.step(t, next_says(t, true));
    assert!(
        core.owned().contains_key(&ip),
        "released by the newest view"
    );
}

/// Issue #32 G5.8, two API changes within one watch lag: our gain is held back for the node
/// that held the IP, whose view is newer and gives it to a third node. A member whose view is
/// exactly the holder's that asks us for the IP is then waited on and asked instead: a mutual
/// hold that its side claims. An asker whose view is not the holder's, a holder whose view is
/// not newer than ours, or an ask from before the gain changes nothing.
#[test]
fn a_gain_held_for_a_holder_waits_on_a_newer_view_that_asks_for_it() {
    let (ip, holder, ms) = (IP.parse::<IpAddr>().unwrap(), owner(&NODES), MS);
    let at_rev = |rev: u64| {
        Arc::new(View {
            revision: rev,
            ..(*view_excluding(&NODES, &holder)).clone()
        })
    };
    let asked_by = |t: Instant, from: &str, rev: u64, at: Instant, holder_rev: u64| {
        let mut o = replied_at(&holder, ip, t - ms(1), false, holder_rev);
        if let Some(m) = o.membership.as_mut() {
            m.askers = [(
                ip,
                crate::membership::lease::HandoverAsker {
                    from: from.to_string(),
                    rev,
                    at,
                },
            )]
            .into();
            m.revisions = [(holder.clone(), holder_rev)].into();
        }
        o
    };
    // (asker's revision, holder's, asked after the gain, waited on the asker); ours is 10. A
    // holder whose view is no newer than ours may still answer: never bypassed.
    for (asker_rev, holder_rev, after, deferred) in [
        (12, 12, true, true),
        (12, 11, true, false),
        (10, 12, true, false),
        (11, 12, true, false),
        (12, 12, false, false),
        (12, 10, true, false),
        (12, 9, true, false),
    ] {
        let (mut core, mut t) = successor_of(&holder, Instant::now());
        let me = core.config().me.clone();
        let asker = NODES
            .iter()
            .copied()
            .find(|n| *n != me && *n != holder)
            .unwrap_or_default();
        let before = t;
        core.set_view(at_rev(10));
        t += ms(5);
        core.step(t, obs(Wake::ViewChanged, &NODES, 0));
        drain(&mut core);
        assert!(!core.owned().contains_key(&ip), "held back");
        let asked_at = if after { t + ms(10) } else { before };
        t += ms(50);
        core.step(t, asked_by(t, asker, asker_rev, asked_at, holder_rev));
        let mut asks = BTreeMap::new();
        while let Some(o) = core.poll_output() {
            if let Output::SetHandovers { asks: a, .. } = o {
                asks = a;
            }
        }
        let described = format!("asker {asker_rev}, holder {holder_rev}, after {after}");
        let waited_on = if deferred { asker } else { holder.as_str() };
        if deferred {
            assert_eq!(
                asks.keys().cloned().collect::<Vec<_>>(),
                vec![waited_on.to_string()],
                "{described}"
            );
        }
        // Waited on past the cap while the asker (or the newer holder) holds it.
        for _ in 0..40 {
            t += ms(100);
            core.step(t, replied_at(waited_on, ip, t - ms(1), false, 12));
            assert!(!core.owned().contains_key(&ip), "{described}");
        }
        t += ms(100);
        core.step(t, replied_at(waited_on, ip, t - ms(1), true, 12));
        assert!(core.owned().contains_key(&ip), "released: {described}");
    }
}

/// Issue #32 G5.8: while the holder keeps saying it still answers for the IP (its view gives
/// it the IP: one of the two watches lags), the gain keeps waiting — one answerer, not two —
/// until the holder lets go or [`HANDOVER_HOLD_MAX`] after the gain; a holder that stops
/// replying is waited for one stall threshold after its last reply.
#[test]
fn a_holder_that_still_answers_is_waited_for_up_to_the_hold_max() {
    let (ip, holder, ms) = (IP.parse::<IpAddr>().unwrap(), owner(&NODES), MS);
    let (mut core, mut t) = api_gain(&holder);
    let gained_at = t;
    // The holder says "still mine" every 50 ms: held past W, up to the cap.
    while t < gained_at + HANDOVER_HOLD_MAX - ms(100) {
        t += ms(50);
        core.step(t, replied(&holder, ip, t - ms(1), false));
        assert!(
            !core.owned().contains_key(&ip),
            "held at {:?}",
            t - gained_at
        );
    }
    while t < gained_at + HANDOVER_HOLD_MAX + ms(50) {
        t += ms(50);
        core.step(t, replied(&holder, ip, t - ms(1), false));
    }
    assert!(core.owned().contains_key(&ip), "claimed at the cap");

    // The holder goes quiet after one reply: claimed one stall threshold after it.
    let (mut core, mut t) = api_gain(&holder);
    let said = t + ms(100);
    t = said;
    core.step(t, replied(&holder, ip, said, false));
    t += ms(250);
    core.step(t, replied(&holder, ip, said, false));
    assert!(
        !core.owned().contains_key(&ip),
        "within W of the last reply"
    );
    t += ms(100);
    core.step(t, replied(&holder, ip, said, false));
    assert!(core.owned().contains_key(&ip), "W after the last reply");
}

/// Issue #32 G5.8: the held-back gain asks the holder (an `Output::SetHandovers` naming it) and
/// is claimed in the step that sees the holder's release, well before the stall threshold; a
/// release from a request sent before the gain was held back, or about another IP, changes
/// nothing. The membership is told the IPs held before the responder adds one (never a release
/// of an IP the responder answers for).
#[test]
fn a_released_handover_is_claimed_at_once() {
    let (ip, holder, ms) = (IP.parse::<IpAddr>().unwrap(), owner(&NODES), MS);
    let (mut core, mut t) = api_gain(&holder);
    let gained_at = t;
    let outs = drain(&mut core);
    let asked = outs.iter().rev().find_map(|o| match o {
        Output::SetHandovers { asks, .. } => Some(asks.clone()),
        _ => None,
    });
    assert_eq!(
        asked,
        Some([(holder.clone(), [ip].into())].into()),
        "{outs:?}"
    );
    let with_release = |sent: Instant, about: IpAddr| replied(&holder, about, sent, true);
    // Stale or about another IP: still held back.
    t += ms(10);
    core.step(t, with_release(gained_at - ms(1), ip));
    assert!(
        !core.owned().contains_key(&ip),
        "a release from before the gain"
    );
    core.step(t, with_release(t, "198.51.100.99".parse().unwrap()));
    assert!(!core.owned().contains_key(&ip), "a release of another IP");
    // Released by the holder: claimed in this step, 20 ms after the gain (the threshold: 200).
    drain(&mut core);
    t += ms(10);
    core.step(t, with_release(gained_at + ms(1), ip));
    assert!(core.owned().contains_key(&ip), "claimed on the release");
    assert!(t < gained_at + settings().stall_threshold);
    let outs = drain(&mut core);
    let owned_at = outs
        .iter()
        .position(|o| matches!(o, Output::SetOwned(_)))
        .unwrap();
    let widened = outs[..owned_at]
        .iter()
        .any(|o| matches!(o, Output::SetHandovers { holding, .. } if holding.contains(&ip)));
    assert!(
        widened,
        "holding told before the responder answers: {outs:?}"
    );
}

/// An API edit seen and undone within the wait (an L2Advertisement edited and reverted, a
/// label set and removed) never makes this node answer: the gain leaves the plan before its
/// start, and the holder, whose watch may never have shown the edit, answers throughout.
#[test]
fn an_api_edit_undone_within_the_wait_claims_nothing() {
    let (ip, holder, ms) = (IP.parse::<IpAddr>().unwrap(), owner(&NODES), MS);
    let (mut core, mut t) = api_gain(&holder);
    assert!(!core.owned().contains_key(&ip), "held back");
    core.set_view(view(&NODES));
    t += ms(150);
    core.step(t, obs(Wake::ViewChanged, &NODES, 0));
    for _ in 0..10 {
        t += ms(100);
        core.step(t, obs(Wake::Tick, &NODES, 0));
        assert!(!core.owned().contains_key(&ip), "never claimed");
    }
}

/// [`view`] with `cordoned` cordoned (`spec.unschedulable`, issue #29 O3).
fn view_cordoning(nodes: &[&str], cordoned: &[&str]) -> Arc<View> {
    let mut v = (*view(nodes)).clone();
    for c in cordoned {
        if let Some(n) = v.cluster.nodes.get_mut(*c) {
            n.unschedulable = true;
        }
    }
    Arc::new(v)
}

/// Issue #29 O3: a cordon and an uncordon are API gains like any other, so break before make
/// holds both ways. Cordon: the cordoned owner drops the IP in the step whose view has the
/// cordon; its successor claims one stall threshold after its own view has it. Uncordon: the
/// rendezvous owner gets the IP back one stall threshold after its view has the uncordon, the
/// node that held it meanwhile drops it as soon as its view has it. Every node cordoned: the
/// owner keeps the IP.
#[test]
fn o3_cordon_and_uncordon_hand_the_ip_over_break_before_make() {
    let (ip, holder, ms) = (
        IP.parse::<IpAddr>().unwrap(),
        owner(&NODES),
        Duration::from_millis,
    );
    let wait = settings().stall_threshold;
    let cordoned = view_cordoning(&NODES, &[&holder]);

    // The owner, cordoned: released in the step that sees it.
    let (t0, mut owner_core) = converged_drained();
    assert!(owns_ip(&owner_core));
    owner_core.set_view(cordoned.clone());
    owner_core.step(t0 + ms(150), obs(Wake::ViewChanged, &NODES, 0));
    assert!(!owns_ip(&owner_core), "released at once");

    // Its successor: held back for the live holder, claimed one stall threshold later.
    let successor = crate::plan::plan(&cordoned, &names(&NODES), NODES[0], Some(true)).ips[&ip]
        .owner
        .clone()
        .unwrap();
    assert_ne!(successor, holder);
    let mut core = SpeakerCore::new(NodeConfig::new(successor.clone(), settings()), t0);
    core.set_view(view(&NODES));
    let mut t = t0;
    for _ in 0..6 {
        t += ms(100);
        core.step(t, obs(Wake::Tick, &NODES, 0));
    }
    assert!(!owns_ip(&core), "not the owner before the cordon");
    core.set_view(cordoned.clone());
    let gained = t + ms(5);
    core.step(gained, obs(Wake::ViewChanged, &NODES, 0));
    assert!(!owns_ip(&core), "held back for the cordoned holder");
    t = gained;
    while t + ms(100) < gained + wait {
        t += ms(100);
        core.step(t, obs(Wake::Tick, &NODES, 0));
        assert!(!owns_ip(&core), "still held back at {:?}", t - gained);
    }
    core.step(gained + wait, obs(Wake::Tick, &NODES, 0));
    assert!(
        owns_ip(&core),
        "claimed one stall threshold after the cordon"
    );

    // Uncordon: the successor drops it at once...
    core.set_view(view(&NODES));
    let uncordoned = gained + wait + ms(50);
    core.step(uncordoned, obs(Wake::ViewChanged, &NODES, 0));
    assert!(!owns_ip(&core), "the successor releases at once");

    // ...and the rendezvous owner, converged while cordoned, waits one stall threshold.
    let mut back = SpeakerCore::new(NodeConfig::new(holder.clone(), settings()), t0);
    back.set_view(cordoned.clone());
    let mut t = t0;
    for _ in 0..6 {
        t += ms(100);
        back.step(t, obs(Wake::Tick, &NODES, 0));
    }
    assert!(back.standing().may_claim(), "{:?}", back.standing());
    assert!(!owns_ip(&back), "a cordoned node is not planned the IP");
    back.set_view(view(&NODES));
    let gained = t + ms(5);
    back.step(gained, obs(Wake::ViewChanged, &NODES, 0));
    assert!(!owns_ip(&back), "held back for the successor");
    back.step(gained + wait - ms(1), obs(Wake::Tick, &NODES, 0));
    assert!(!owns_ip(&back), "held back until the stall threshold");
    back.step(gained + wait, obs(Wake::Tick, &NODES, 0));
    assert!(owns_ip(&back), "the rendezvous owner is back");

    // Every node cordoned: the owner keeps answering, nothing moves.
    let (t0, mut owner_core) = converged_drained();
    owner_core.set_view(view_cordoning(&NODES, &NODES));
    for k in 1..=5 {
        owner_core.step(t0 + ms(100 + 100 * k), obs(Wake::ViewChanged, &NODES, 0));
        assert!(owns_ip(&owner_core), "all cordoned: kept");
    }
}

/// Two NICs: `eth0` faces the clients (the IP is on its /24), `eth1` another network.
fn two_nics(client: bool, other: bool) -> LinkReport {
    let link = |name: &str, carrier, net: &str| crate::carrier::Link {
        name: name.into(),
        carrier,
        default_v4: true,
        default_v6: false,
        named_v4: true,
        named_v6: false,
        prefixes: vec![(net.parse().unwrap(), 24)],
    };
    LinkReport {
        links: vec![
            link("eth0", client, "198.51.100.0"),
            link("eth1", other, "10.1.0.0"),
        ],
        withdrawn: false,
    }
}

fn obs_links(alive: &[&str], links: LinkReport, carriers: &[(&str, LinkReport)]) -> Observation {
    let mut o = obs(Wake::Tick, alive, 0);
    o.links = links;
    if let Some(m) = o.membership.as_mut() {
        m.carriers = carriers
            .iter()
            .map(|(n, r)| (n.to_string(), r.clone()))
            .collect();
    }
    o
}

fn owns_ip(core: &SpeakerCore) -> bool {
    core.owned().contains_key(&IP.parse::<IpAddr>().unwrap())
}

/// The owner of [`view`]'s IP over [`NODES`] and the node that owns it without the owner,
/// with a core for each started at `t0` on that view: `(owner, successor, owner's core,
/// successor's core)`.
fn owner_and_successor(t0: Instant) -> (String, String, SpeakerCore, SpeakerCore) {
    let me = owner(&NODES);
    let others: Vec<&str> = NODES.iter().copied().filter(|n| *n != me).collect();
    let successor = crate::plan::plan(&view(&others), &names(&others), others[0], Some(true))
        .first_owner()
        .unwrap();
    let start = |name: &str| {
        let mut core = SpeakerCore::new(NodeConfig::new(name, settings()), t0);
        core.set_view(view(&NODES));
        core
    };
    let (o, s) = (start(&me), start(&successor));
    (me, successor, o, s)
}

/// Issue #32 G5.5: the owner whose client-facing NIC loses carrier while its other NIC keeps
/// it withdraws at once and reports it after the withdrawal; the successor, given that report
/// by the membership, takes the IP one stall threshold later (break before make); when the
/// carrier returns, the owner reports it only after [`crate::carrier::CARRIER_UP_HOLD`] and
/// then waits for the successor to stop before it claims again. Without the rule the owner
/// keeps the IP (its other NIC has carrier) and the successor never takes it.
#[test]
fn client_link_carrier_loss_hands_the_ip_over_and_back_with_holds() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let (me, successor, mut o, mut s) = owner_and_successor(t0);
    let up = two_nics(true, true);
    let down = two_nics(false, true);
    let mut at = t0;
    let tick = |o: &mut SpeakerCore, s: &mut SpeakerCore, at: Instant, mine, theirs| {
        o.step(at, obs_links(&NODES, mine, &[(&successor, up.clone())]));
        s.step(at, obs_links(&NODES, up.clone(), &[(me.as_str(), theirs)]));
        (drain(o), drain(s))
    };
    for _ in 0..6 {
        at += ms(100);
        tick(&mut o, &mut s, at, up.clone(), up.clone());
    }
    assert!(owns_ip(&o) && !owns_ip(&s));
    // eth0 of the owner loses carrier: it withdraws at once, then reports.
    at += ms(100);
    let (outs, _) = tick(&mut o, &mut s, at, down.clone(), up.clone());
    assert!(!owns_ip(&o), "{outs:?}");
    let withdrawn = position(&outs, |x| matches!(x, Output::SetOwned(m) if m.is_empty()));
    let reported = position(&outs, |x| matches!(x, Output::SetCarrier(r) if *r == down));
    assert!(withdrawn.unwrap() < reported.unwrap(), "{outs:?}");
    // The report reaches the successor: it takes the IP after one stall threshold.
    let reached = at + ms(100);
    while at < reached + ms(400) {
        at += ms(100);
        tick(&mut o, &mut s, at, down.clone(), down.clone());
        let held = at < reached + settings().stall_threshold;
        assert_eq!(owns_ip(&s), !held, "{:?} after the report", at - reached);
        assert!(!owns_ip(&o));
    }
    // Carrier back on eth0, flapping once: the owner reports and plans with it only after it
    // stayed up for the hold, and then waits one stall threshold for the successor to stop.
    at += ms(100);
    tick(&mut o, &mut s, at, up.clone(), down.clone());
    at += ms(100);
    tick(&mut o, &mut s, at, down.clone(), down.clone());
    let back = at + ms(100);
    let mut reported_up = None;
    while at < back + crate::carrier::CARRIER_UP_HOLD + ms(600) {
        at += ms(100);
        let theirs = if reported_up.is_some() {
            up.clone()
        } else {
            down.clone()
        };
        let (outs, _) = tick(&mut o, &mut s, at, up.clone(), theirs);
        if outs
            .iter()
            .any(|x| matches!(x, Output::SetCarrier(r) if *r == up))
        {
            reported_up = Some(at);
        }
        match reported_up {
            None => {
                assert!(at < back + crate::carrier::CARRIER_UP_HOLD);
                assert!(!owns_ip(&o) && owns_ip(&s));
            }
            Some(t) => {
                assert_eq!(t, back + crate::carrier::CARRIER_UP_HOLD);
                let held = at < t + settings().stall_threshold;
                assert_eq!(owns_ip(&o), !held, "{:?} after the report", at - t);
                // The report reaches the successor one step later; it stops then, before the
                // owner claims.
                assert_eq!(owns_ip(&s), at == t, "{:?} after the report", at - t);
                assert!(!(owns_ip(&o) && owns_ip(&s)));
            }
        }
    }
    assert!(owns_ip(&o));
}

/// [`obs_links`] where only this node has two-way evidence: the others are listed alive
/// (indirect probes) but none answers our lease requests, so the gate sees a minority.
fn obs_cut(me: &str, links: LinkReport, carriers: &[(&str, LinkReport)]) -> Observation {
    let mut o = obs_links(&NODES, links, carriers);
    if let Some(m) = o.membership.as_mut() {
        m.evidence.retain(|n, _| n == me);
    }
    o
}

fn withdrawn_report(r: &LinkReport) -> LinkReport {
    LinkReport {
        withdrawn: true,
        ..r.clone()
    }
}

/// Issue #32, the minority-gate row: an owner the others still list alive but which hears a
/// minority withdraws and then reports itself withdrawn; the successor, given that report,
/// claims the IP at once (the withdrawn holder answers nothing: no break-before-make wait).
/// When the owner's gate reopens it says so in the same step and waits for the successor to
/// stop before it claims: never two answerers. Without the rule the owner reports nothing and
/// the successor never takes the IP (silent for as long as the cut lasts: 6.05 s in the
/// simulator's `a_failover_never_waits_for_a_member_whose_gate_is_closed`).
#[test]
fn a_speaker_that_hears_a_minority_reports_it_and_its_ips_move_to_the_others() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let (me, successor, mut o, mut s) = owner_and_successor(t0);
    let up = two_nics(true, true);
    let gone = withdrawn_report(&up);
    // Both nodes step with every carrier up and nothing withdrawn.
    let both_up = |o: &mut SpeakerCore, s: &mut SpeakerCore, at: Instant| {
        o.step(
            at,
            obs_links(&NODES, up.clone(), &[(&successor, up.clone())]),
        );
        s.step(
            at,
            obs_links(&NODES, up.clone(), &[(me.as_str(), up.clone())]),
        );
    };
    let mut at = t0;
    for _ in 0..6 {
        at += ms(100);
        both_up(&mut o, &mut s, at);
    }
    assert!(owns_ip(&o) && !owns_ip(&s));
    assert!(!o.withdrawn());
    drain(&mut o);
    // The owner is cut: it withdraws at once, and reports it once the minority has lasted
    // the stall threshold (the others' own time to declare it down), not before.
    at += ms(100);
    let cut = at;
    o.step(at, obs_cut(&me, up.clone(), &[(&successor, up.clone())]));
    let mut outs = drain(&mut o);
    assert!(!o.standing().may_claim() && !owns_ip(&o));
    let withdrew = position(&outs, |x| matches!(x, Output::SetOwned(m) if m.is_empty()));
    assert!(withdrew.is_some(), "{outs:?}");
    while !o.withdrawn() {
        assert!(at < cut + settings().stall_threshold, "reported too late");
        assert!(
            !outs.iter().any(|x| matches!(x, Output::SetCarrier(_))),
            "{outs:?}"
        );
        at += ms(100);
        o.step(at, obs_cut(&me, up.clone(), &[(&successor, up.clone())]));
        outs = drain(&mut o);
        if !o.withdrawn() {
            // Until the report, the successor waits for the holder (break before make).
            s.step(
                at,
                obs_links(&NODES, up.clone(), &[(me.as_str(), up.clone())]),
            );
            assert!(!owns_ip(&s));
        }
    }
    assert_eq!(at - cut, settings().stall_threshold);
    assert!(outs.contains(&Output::SetCarrier(gone.clone())), "{outs:?}");
    // The report reaches the successor: it claims at once.
    s.step(
        at,
        obs_links(&NODES, up.clone(), &[(me.as_str(), gone.clone())]),
    );
    assert!(owns_ip(&s), "a withdrawn holder is not waited for");
    // The cut heals: the owner's gate reopens and it says so at once, before claiming.
    let healed = at + ms(100);
    o.step(
        healed,
        obs_links(&NODES, up.clone(), &[(&successor, up.clone())]),
    );
    let outs = drain(&mut o);
    assert!(o.standing().may_claim() && !o.withdrawn());
    assert!(!owns_ip(&o), "held back for the successor");
    assert!(outs.contains(&Output::SetCarrier(up.clone())), "{outs:?}");
    // The report reaches the successor one step later: it drops the IP; the owner claims
    // after its break-before-make wait (the successor says nothing in this replay).
    at = healed;
    while at < healed + ms(600) {
        at += ms(100);
        both_up(&mut o, &mut s, at);
        assert!(!owns_ip(&s));
        let held = at < healed + settings().stall_threshold;
        assert_eq!(owns_ip(&o), !held, "{:?} after the heal", at - healed);
    }
}

/// Issue #32 G5.8 (simulator, one-way class, seed 1999): a successor whose grant released the
/// IP to its owner (the owner had come back and asked for it) and which then gets the owner's
/// "withdrawn" report does not claim at once: the report may predate the request the grant
/// answered, and the owner may be answering on that release. It asks the owner like any holder
/// and claims on its release or on a grant from its closed gate (revision 0: it answers
/// nothing), or one stall threshold later without a word; a release given
/// longer than [`super::RELEASE_MEMORY`] ago is not waited on (a withdrawn holder answers
/// nothing: claimed at once, as before). Without the rule the successor claims in the step of
/// the report (two answerers for 99.6 ms in the simulator).
#[test]
fn a_withdrawn_report_after_our_release_to_its_sender_waits_for_the_senders_word() {
    let ip: IpAddr = IP.parse().unwrap();
    let up = two_nics(true, true);
    let gone = withdrawn_report(&up);
    // (how long ago the release was given, the owner's reply to our ask, sent in each step:
    // released or not, and the revision its grant carried — 0 from a closed gate) → owns the
    // IP in the step of the report, and one stall threshold later.
    let cases = [
        (MS(0), None, (false, true)),
        (MS(0), Some((true, 1)), (true, true)),
        (MS(0), Some((false, 1)), (false, false)),
        // A closed gate answers nothing, whatever it says of the IP (it cannot vouch for our
        // view): claimed on its word (found by an attack, 2.9 s silent at 5 nodes).
        (MS(0), Some((false, 0)), (true, true)),
        (super::RELEASE_MEMORY, None, (true, true)),
    ];
    for (ago, reply, (at_once, later)) in cases {
        let t0 = Instant::now();
        let (me, successor, _, mut s) = owner_and_successor(t0);
        let mut at = t0;
        for _ in 0..6 {
            at += MS(100);
            s.step(
                at,
                obs_links(&NODES, up.clone(), &[(me.as_str(), up.clone())]),
            );
        }
        assert!(!owns_ip(&s), "the owner holds it");
        at += MS(100);
        let report = at;
        let with_report = |at: Instant, reply: Option<(bool, u64)>| {
            let mut o = obs_links(&NODES, up.clone(), &[(me.as_str(), gone.clone())]);
            if let Some(m) = o.membership.as_mut() {
                m.releases_given = [(ip, (me.clone(), report - ago))].into();
                if let Some((released, rev)) = reply {
                    o.wake = Wake::HandoverReply;
                    m.handover_replies = [(
                        (me.clone(), ip),
                        crate::membership::lease::HandoverReply {
                            sent: at,
                            released,
                            rev,
                        },
                    )]
                    .into();
                }
            }
            o
        };
        s.step(at, with_report(at, None));
        if reply.is_some() {
            at += MS(10);
            s.step(at, with_report(at, reply));
        }
        let case = format!("{successor}: released {ago:?} ago, reply {reply:?}");
        assert_eq!(owns_ip(&s), at_once, "{case}");
        at = report + settings().stall_threshold;
        s.step(at, with_report(at, reply));
        assert_eq!(owns_ip(&s), later, "{case}, one stall threshold later");
    }
}

/// A minority shorter than the stall threshold (one step without a majority's evidence under
/// steady loss) closes the owner's gate but reports nothing: the successor does not take the
/// IP for a step and give it back (two owner changes for no fault, I-flap; the simulator's loss
/// class found it at 3 nodes, seed 418). Without the wait the report goes out in the first
/// step of the minority.
#[test]
fn a_minority_shorter_than_the_stall_threshold_is_not_reported() {
    let ms = Duration::from_millis;
    let t0 = Instant::now();
    let me = owner(&NODES);
    let others: Vec<&str> = NODES.iter().copied().filter(|n| *n != me).collect();
    let successor = others[0];
    let mut o = SpeakerCore::new(NodeConfig::new(me.as_str(), settings()), t0);
    o.set_view(view(&NODES));
    let up = two_nics(true, true);
    let mut at = t0;
    for _ in 0..6 {
        at += ms(100);
        o.step(
            at,
            obs_links(&NODES, up.clone(), &[(successor, up.clone())]),
        );
    }
    assert!(owns_ip(&o));
    drain(&mut o);
    let blip = settings().stall_threshold - ms(100);
    let cut = at;
    while at < cut + blip {
        at += ms(100);
        o.step(at, obs_cut(&me, up.clone(), &[(successor, up.clone())]));
        assert!(!o.standing().may_claim() && !owns_ip(&o) && !o.withdrawn());
    }
    at += ms(100);
    o.step(
        at,
        obs_links(&NODES, up.clone(), &[(successor, up.clone())]),
    );
    assert!(o.standing().may_claim() && !o.withdrawn());
    let outs = drain(&mut o);
    assert!(
        !outs.iter().any(|x| matches!(x, Output::SetCarrier(_))),
        "{outs:?}"
    );
    // A second minority starts its own count: the first one's steps do not add up with it.
    let cut = at;
    while at < cut + blip {
        at += ms(100);
        o.step(at, obs_cut(&me, up.clone(), &[(successor, up.clone())]));
        assert!(!o.withdrawn());
    }
}

/// A converging speaker that hears a majority reports nothing withdrawn (a cold start: every
/// gate is closed while the speakers converge, and excluding them would give every IP to the
/// first gate that opens); one whose membership lists a majority alive but that hears only
/// itself while converging — restarted while cut from a majority — reports it once that has
/// lasted the stall threshold, still converging (it converges only by `converge_timeout`, 3 s,
/// and the others plan its IPs on it meanwhile). Without the second half of the rule it reports
/// nothing until it converges. A speaker that started before the others, whose membership
/// lists only itself (a minority of the voters), is not withdrawn however long that lasts: reported, the others planned its IPs elsewhere when they converged and moved them back
/// when its evidence came (the lab's
/// `f1_cold_start_of_every_speaker_gives_one_announcer_and_one_event_per_ip` saw two
/// `AnnouncingIP` Events for an IP in 4 of 14 runs).
#[test]
fn a_converging_speaker_is_withdrawn_only_while_it_hears_a_minority() {
    let t0 = Instant::now();
    let me = NODES[0];
    let start = || {
        let mut core = SpeakerCore::new(NodeConfig::new(me, settings()), t0);
        core.set_view(view(&NODES));
        core
    };
    let mut heard = start();
    for k in 1..=20 {
        heard.step(
            t0 + Duration::from_millis(100 * k),
            obs_links(&NODES, two_nics(true, true), &[]),
        );
        assert!(!heard.withdrawn());
    }
    let outs = drain(&mut heard);
    assert!(
        outs.iter()
            .all(|x| !matches!(x, Output::SetCarrier(r) if r.withdrawn)),
        "{outs:?}"
    );
    let mut alone = start();
    for k in 1..=20 {
        let at = Duration::from_millis(100 * k);
        alone.step(t0 + at, obs_cut(me, two_nics(true, true), &[]));
        assert!(matches!(alone.standing(), Standing::Converging { .. }));
        // Minority from the first step (100 ms): reported from the stall threshold on.
        let due = at >= Duration::from_millis(100) + settings().stall_threshold;
        assert_eq!(alone.withdrawn(), due, "after {at:?}");
    }
    let outs = drain(&mut alone);
    assert!(
        outs.iter()
            .any(|x| matches!(x, Output::SetCarrier(r) if r.withdrawn)),
        "{outs:?}"
    );
    let mut first = start();
    for k in 1..=20 {
        // Alone for two seconds: the others have not started.
        let mut o = obs_links(&[me], two_nics(true, true), &[]);
        if let Some(m) = o.membership.as_mut() {
            m.evidence.retain(|n, _| n == me);
        }
        first.step(t0 + Duration::from_millis(100 * k), o);
        assert!(matches!(first.standing(), Standing::Converging { .. }));
        assert!(!first.withdrawn(), "step {k}");
    }
    let outs = drain(&mut first);
    assert!(
        outs.iter()
            .all(|x| !matches!(x, Output::SetCarrier(r) if r.withdrawn)),
        "{outs:?}"
    );
}
