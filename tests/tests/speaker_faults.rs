//! Issue #8 — one announcer per IP under faults — in the network-namespace lab: real speakers,
//! a real API server, real ARP frames. Each test is named after the rule it checks (F1 … F6,
//! documented in `docs/speaker.md`). Measured windows are printed (run with `--nocapture`);
//! the assertions are about frames and answers, never about wall-clock limits.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use ferrolb_tests::lab::scenario::{
    self, Sample, answer_timeline, capture_around, dual_answer_window, events_for, expected_owner,
    gratuitous_macs, ips_where, lab_with_ips, metric_value, node_names,
};
use ferrolb_tests::lab::starvation::{self, Starve};
use ferrolb_tests::lab::{Lab, Seen};

const SETTLE: Duration = Duration::from_secs(20);
const LISTEN: Duration = Duration::from_millis(120);
const PORT: u16 = 7947;

fn start_all(lab: &mut Lab, nodes: &[String]) {
    for n in nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
}

/// Waits until each IP is answered by exactly its owner among `members`.
async fn wait_owners(lab: &Lab, ips: &[Ipv4Addr], members: &[&str]) {
    scenario::wait_owners(lab, ips, members).await.unwrap();
}

fn macs_of(lab: &Lab, nodes: &[&str]) -> BTreeSet<String> {
    nodes.iter().map(|n| lab.node(n).mac.clone()).collect()
}

/// Probes `ip` for 5 s while node `node`'s speaker is stopped (SIGSTOP) for `pause`, starting
/// 200 ms in.
async fn probe_through_stall(lab: &Lab, node: &str, ip: Ipv4Addr, pause: Duration) -> Vec<Sample> {
    let stall = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        lab.pause_speaker(node, pause).await.unwrap();
    };
    let (timeline, ()) = tokio::join!(
        answer_timeline(lab, 0, ip, Duration::from_secs(5), LISTEN),
        stall
    );
    timeline.unwrap()
}

fn report(rule: &str, what: &str, value: impl std::fmt::Debug) {
    println!("MEASURED {rule}: {what} = {value:?}");
}

// ---------------------------------------------------------------------------------------------
// F1 — no claim before the view has converged.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_restart_of_a_non_owner_sends_no_gratuitous_frames_and_changes_no_answer() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    // node-3 owns none of these; node-1 and node-2 share them.
    let ips = ips_where(&all, 3, |owner| owner != "node-3");
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    start_all(&mut lab, &nodes);
    wait_owners(&lab, &ips, &all).await;
    let victim_mac = lab.node("node-3").mac.clone();

    for signal in ["KILL", "TERM"] {
        // Restart node-3's speaker, capturing and probing the first IP from the restart on.
        lab.signal_speaker("node-3", signal).unwrap();
        lab.start_speaker("node-3", &[]).unwrap();
        let (seen, timeline) = tokio::join!(
            lab.capture(0, Duration::from_secs(6)),
            answer_timeline(&lab, 0, ips[0], Duration::from_secs(6), LISTEN),
        );
        let seen = seen.unwrap();
        let timeline = timeline.unwrap();
        let from_victim: Vec<&Seen> = seen
            .iter()
            .filter(|s| s.mac().eq_ignore_ascii_case(&victim_mac))
            .collect();
        assert!(
            from_victim.is_empty(),
            "{signal}: the restarted non-owner sent {from_victim:?}\n{}",
            lab.speaker_log("node-3", 40)
        );
        let owner0 = lab.node(&expected_owner(ips[0], &all)).mac.clone();
        for s in &timeline {
            assert!(
                s.macs.is_empty() || s.macs == BTreeSet::from([owner0.clone()]),
                "{signal}: at {:?} {:?} answered for {}",
                s.at,
                s.macs,
                ips[0]
            );
        }
        // The speaker is back; answers are unchanged and it still sends nothing for our IPs.
        let seen = capture_around(&lab, Duration::from_secs(5), async {})
            .await
            .unwrap();
        assert!(
            !seen
                .iter()
                .any(|s| s.mac().eq_ignore_ascii_case(&victim_mac)),
            "{signal}: after the restart node-3 sent {seen:?}"
        );
        // The restarted member re-confirmed every owner (F1): each IP's gratuitous ARP after the
        // restart came from its owner only.
        for ip in &ips {
            let g = gratuitous_macs(&seen, *ip);
            assert!(
                g.is_subset(&BTreeSet::from([lab
                    .node(&expected_owner(*ip, &all))
                    .mac
                    .clone()])),
                "{signal}: {ip}: {g:?}"
            );
        }
        wait_owners(&lab, &ips, &all).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_cold_start_of_every_speaker_gives_one_announcer_and_one_event_per_ip() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 3, |_| true);
    let (mut lab, client) = lab_with_ips(3, &ips).await.unwrap();
    // All at once; the capture starts before any of them has even synced its watches.
    start_all(&mut lab, &nodes);
    let seen = lab.capture(0, Duration::from_secs(6)).await.unwrap();
    for ip in &ips {
        let owner = expected_owner(*ip, &all);
        assert_eq!(
            gratuitous_macs(&seen, *ip),
            BTreeSet::from([lab.node(&owner).mac.clone()]),
            "{ip}: gratuitous ARP only from its owner {owner}"
        );
    }
    wait_owners(&lab, &ips, &all).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for (i, ip) in ips.iter().enumerate() {
        let owner = expected_owner(*ip, &all);
        let events = events_for(&client, "default", &format!("svc-{i}"))
            .await
            .unwrap();
        let announcing: Vec<&(String, String)> =
            events.iter().filter(|(r, _)| r == "AnnouncingIP").collect();
        assert_eq!(
            announcing.len(),
            1,
            "{ip}: one AnnouncingIP Event, from {owner}: {events:?}"
        );
        assert!(announcing[0].1.contains(&owner), "{announcing:?}");
        assert!(
            !events.iter().any(|(r, _)| r == "NoEligibleNode"),
            "no spurious warning during convergence: {events:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// F2 — the API server is never on the data path.

/// Resumes the API server when the test ends, also on failure.
struct ApiFrozen(nix::unistd::Pid);

impl ApiFrozen {
    fn freeze(lab: &Lab) -> Self {
        let pid = lab.cluster().apiserver_pid().expect("kube-apiserver runs");
        let pid = nix::unistd::Pid::from_raw(i32::try_from(pid).unwrap());
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGSTOP).unwrap();
        ApiFrozen(pid)
    }
}

impl Drop for ApiFrozen {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(self.0, nix::sys::signal::Signal::SIGCONT);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_hung_api_server_changes_nothing_about_who_answers() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |_| true);
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    start_all(&mut lab, &nodes);
    wait_owners(&lab, &ips, &all).await;
    let owner = expected_owner(ip, &all);
    let rest: Vec<&str> = all.iter().copied().filter(|n| *n != owner).collect();
    let successor = expected_owner(ip, &rest);

    let frozen = ApiFrozen::freeze(&lab);
    // The owner stalls long enough to be failed over: the successor takes the IP (and wants to
    // write an Event, which hangs).
    let timeline = probe_through_stall(&lab, &owner, ip, Duration::from_secs(2)).await;
    assert!(
        timeline
            .iter()
            .any(|s| s.macs == BTreeSet::from([lab.node(&successor).mac.clone()])),
        "the successor {successor} answered during the stall: {timeline:?}"
    );
    // The owner is back: the successor must withdraw although its Event write hangs.
    let answers = lab
        .wait_for_owner(0, ip, Some(&owner), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        answers,
        BTreeSet::from([lab.node(&owner).mac.clone()]),
        "{}",
        lab.speaker_log(&successor, 30)
    );
    let window = dual_answer_window(&timeline, LISTEN);
    report(
        "F2",
        "dual-answer window after a 2 s stall, API hung",
        window,
    );

    // A crash of the owner during the outage still fails over.
    let killed = tokio::time::Instant::now();
    lab.signal_speaker(&owner, "KILL").unwrap();
    let answers = lab
        .wait_for_owner(0, ip, Some(&successor), SETTLE)
        .await
        .unwrap();
    assert_eq!(answers, BTreeSet::from([lab.node(&successor).mac.clone()]));
    report(
        "F2",
        "owner SIGKILL → successor answers (API hung, probe resolution 120 ms)",
        killed.elapsed(),
    );
    for _ in 0..3 {
        assert_eq!(
            lab.arp_answers(0, ip).await.unwrap(),
            BTreeSet::from([lab.node(&successor).mac.clone()])
        );
    }
    drop(frozen);
}

// ---------------------------------------------------------------------------------------------
// F3 — partitions have a stated, tested policy: the majority side serves, the minority
// withdraws; an even split is won by the side holding the smallest node name.

/// Partitions the membership so that `isolated` (node names) hear nobody outside their group,
/// checks who answers after the split and after the heal, and reports the windows.
/// What a failed answer check needs to tell a lapsed quorum lease (G2: a speaker whose grants
/// arrive later than the lease stops answering, by design) from a wrong owner: each speaker's
/// `lease_expired` drops and the tail of its log.
async fn lease_diagnosis(lab: &Lab, nodes: &[&str]) -> String {
    let mut out = String::new();
    for n in nodes {
        let metrics = lab
            .speaker_http(n, "/metrics")
            .await
            .map(|(_, body)| body)
            .unwrap_or_default();
        let lapsed = metric_value(
            &metrics,
            "ferrolb_speaker_frames_dropped_total{reason=\"lease_expired\"}",
        );
        out += &format!(
            "--- {n}: lease_expired drops {lapsed:?}\n{}\n",
            lab.speaker_log(n, 15)
        );
    }
    out
}

async fn partition_scenario(shape: &str, nodes: usize, isolated: &[&str], ips: &[Ipv4Addr]) {
    let names = node_names(nodes);
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let (mut lab, _client) = lab_with_ips(nodes, ips).await.unwrap();
    start_all(&mut lab, &names);
    wait_owners(&lab, ips, &all).await;
    let other: Vec<&str> = all
        .iter()
        .copied()
        .filter(|n| !isolated.contains(n))
        .collect();
    let majority: &[&str] = if other.len() * 2 > all.len()
        || (other.len() * 2 == all.len() && other.contains(&"node-1"))
    {
        &other
    } else {
        isolated
    };
    let minority_macs = macs_of(
        &lab,
        &all.iter()
            .copied()
            .filter(|n| !majority.contains(n))
            .collect::<Vec<_>>(),
    );

    // Split, probing the first IP throughout.
    let split = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for n in isolated {
            lab.partition_membership(n, &other, PORT, true).unwrap();
        }
    };
    let (timeline, ()) = tokio::join!(
        answer_timeline(&lab, 0, ips[0], Duration::from_secs(4), LISTEN),
        split
    );
    let timeline = timeline.unwrap();
    report(
        "F3",
        &format!("{shape}: dual-answer window at the split ({})", ips[0]),
        dual_answer_window(&timeline, LISTEN),
    );
    // A partition is a benign fault: no probe may see two answerers (issue #32 G6; the quorum
    // lease stops the cut-off side before the other can declare it down).
    assert_no_dual(shape, "split", &timeline);
    // After the split settled: each IP answered by its owner among the majority, the minority
    // silent.
    wait_owners(&lab, ips, majority).await;
    for _ in 0..3 {
        for ip in ips {
            let answers = lab.arp_answers(0, *ip).await.unwrap();
            if !(answers.is_disjoint(&minority_macs) && answers.len() == 1) {
                panic!(
                    "{shape}: {ip}: {answers:?}\n{}",
                    lease_diagnosis(&lab, &all).await
                );
            }
        }
    }

    // Heal: the rightful owners re-announce and exactly one answers.
    let heal = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        for n in isolated {
            lab.partition_membership(n, &[], PORT, false).unwrap();
        }
    };
    let (seen, (timeline, ())) = tokio::join!(lab.capture(0, Duration::from_secs(4)), async {
        tokio::join!(
            answer_timeline(&lab, 0, ips[0], Duration::from_secs(4), LISTEN),
            heal
        )
    });
    let seen = seen.unwrap();
    let timeline = timeline.unwrap();
    let rightful = lab.node(&expected_owner(ips[0], &all)).mac.clone();
    report(
        "F3",
        &format!("{shape}: dual-answer window at the heal"),
        dual_answer_window(&timeline, LISTEN),
    );
    assert_no_dual(shape, "heal", &timeline);
    report(
        "F3",
        &format!("{shape}: heal → rightful owner alone answers"),
        first_stable(&timeline, &rightful).map(|d| d.saturating_sub(Duration::from_millis(200))),
    );
    wait_owners(&lab, ips, &all).await;
    for ip in ips {
        let owner = lab.node(&expected_owner(*ip, &all)).mac.clone();
        let g = gratuitous_macs(&seen, *ip);
        if majority.contains(&expected_owner(*ip, &all).as_str()) {
            continue; // the owner never changed; nothing to re-announce
        }
        assert!(
            g.contains(&owner),
            "{shape}: {ip}: the rightful owner re-announces after the heal: {g:?}"
        );
    }
}

/// Fails when a probe of `timeline` (taken around the `when` of partition `shape`) was answered
/// by two or more MACs.
fn assert_no_dual(shape: &str, when: &str, timeline: &[Sample]) {
    let dual: Vec<&Sample> = timeline.iter().filter(|s| s.macs.len() > 1).collect();
    assert!(
        dual.is_empty(),
        "{shape}: {} of {} probes at the {when} answered by two or more nodes: {dual:?}",
        dual.len(),
        timeline.len()
    );
}

/// When the timeline settled on exactly `mac` for good (from that probe on, every probe saw
/// only `mac`).
fn first_stable(samples: &[Sample], mac: &str) -> Option<Duration> {
    let want = BTreeSet::from([mac.to_owned()]);
    let last_bad = samples.iter().rposition(|s| s.macs != want);
    match last_bad {
        None => samples.first().map(|s| s.at),
        Some(i) => samples.get(i + 1).map(|s| s.at),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_partition_owner_isolated() {
    let all = ["node-1", "node-2", "node-3"];
    let ips = ips_where(&all, 2, |o| o == "node-1");
    partition_scenario("owner isolated (3 nodes)", 3, &["node-1"], &ips).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_partition_non_owner_isolated() {
    let all = ["node-1", "node-2", "node-3"];
    let ips = ips_where(&all, 2, |o| o != "node-3");
    partition_scenario("non-owner isolated (3 nodes)", 3, &["node-3"], &ips).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_partition_even_split_of_four() {
    let all = ["node-1", "node-2", "node-3", "node-4"];
    // IPs owned on each side before the split; the side with node-1 keeps serving all of them.
    let mut ips = ips_where(&all, 1, |o| o == "node-3");
    ips.extend(ips_where(&all, 1, |o| o == "node-2"));
    partition_scenario("even split of 4", 4, &["node-3", "node-4"], &ips).await;
}

// The partition shapes at 10 nodes (issue #32 G6): about 20 s each here, so they run in CI.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_partition_owner_isolated_at_ten_nodes() {
    let names = node_names(10);
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 2, |o| o == "node-1");
    partition_scenario("owner isolated (10 nodes)", 10, &["node-1"], &ips).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_partition_owner_on_a_minority_of_four_at_ten_nodes() {
    let names = node_names(10);
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut ips = ips_where(&all, 1, |o| o == "node-3");
    ips.extend(ips_where(&all, 1, |o| o == "node-8"));
    partition_scenario(
        "owner on a minority of 4 (10 nodes)",
        10,
        &["node-3", "node-4", "node-5", "node-6"],
        &ips,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_partition_even_split_at_ten_nodes() {
    let names = node_names(10);
    let all: Vec<&str> = names.iter().map(String::as_str).collect();
    // The side with node-1 (the smallest name) keeps serving; an IP owned on each side.
    let mut ips = ips_where(&all, 1, |o| o == "node-2");
    ips.extend(ips_where(&all, 1, |o| o == "node-7"));
    partition_scenario(
        "even split 5 | 5 (10 nodes)",
        10,
        &["node-6", "node-7", "node-8", "node-9", "node-10"],
        &ips,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// F4 — stalls are not crashes.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_short_stall_causes_no_failover_and_a_long_one_no_double_answer() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |_| true);
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    start_all(&mut lab, &nodes);
    wait_owners(&lab, &ips, &all).await;
    let owner = expected_owner(ip, &all);
    let owner_mac = lab.node(&owner).mac.clone();

    // 150 ms stalls, five times: nobody else ever announces or answers.
    for round in 0..5 {
        let seen = capture_around(&lab, Duration::from_secs(2), async {
            lab.pause_speaker(&owner, Duration::from_millis(150))
                .await
                .unwrap();
        })
        .await
        .unwrap();
        let g = gratuitous_macs(&seen, ip);
        assert!(
            g.is_subset(&BTreeSet::from([owner_mac.clone()])),
            "round {round}: a 150 ms stall caused a failover: {g:?}\n{}",
            nodes
                .iter()
                .map(|n| format!("--- {n}\n{}", lab.speaker_log(n, 25)))
                .collect::<Vec<_>>()
                .join("\n")
        );
        assert_eq!(
            lab.arp_answers(0, ip).await.unwrap(),
            BTreeSet::from([owner_mac.clone()]),
            "round {round}"
        );
    }

    // A 2 s stall: failed over, and when it resumes the owner does not answer alongside its
    // successor (beyond the measured window), then takes its IP back.
    let timeline = probe_through_stall(&lab, &owner, ip, Duration::from_secs(2)).await;
    let rest: Vec<&str> = all.iter().copied().filter(|n| *n != owner).collect();
    let successor_mac = lab.node(&expected_owner(ip, &rest)).mac.clone();
    assert!(
        timeline
            .iter()
            .any(|s| s.macs == BTreeSet::from([successor_mac.clone()])),
        "failed over during the 2 s stall: {timeline:?}"
    );
    let window = dual_answer_window(&timeline, LISTEN);
    report("F4", "dual-answer window around a 2 s SIGSTOP", window);
    let dual: Vec<&Sample> = timeline.iter().filter(|s| s.macs.len() > 1).collect();
    assert!(
        dual.len() <= 1,
        "at most one probe may straddle the hand-back: {dual:?}"
    );
    wait_owners(&lab, &ips, &all).await;
    let stalls = lab.speaker_http(&owner, "/metrics").await.unwrap().1;
    assert!(
        stalls
            .lines()
            .any(|l| l.starts_with("ferrolb_speaker_stalls_total") && !l.ends_with(" 0")),
        "the stall was detected:\n{stalls}"
    );
}

/// The starvation of issue #8 F4: `percent` % of one CPU for 60 s (probes listen 500 ms: a
/// throttled owner answers late, not never).
fn starve_for_a_minute(percent: u32, hog: bool) -> Starve {
    Starve {
        percent,
        hog,
        shares: None,
        duration: Duration::from_secs(60),
        listen: Duration::from_millis(500),
    }
}

/// [`starvation::run`] with speakers started with `args`. Asserts the premise (throttled in at
/// least `min_throttled_share` of the periods) and that nothing failed over: no gratuitous ARP
/// from a non-owner, every probe answered by the owner alone, no member declared down, no stall.
async fn no_false_failover_while_starved(how: Starve, args: &[&str], min_throttled_share: f64) {
    let outcome = starvation::run(None, args, how).await.unwrap();
    println!("F4 starvation {how:?} {args:?}: {}", outcome.summary());
    let t = outcome.throttling;
    assert!(
        t.throttled_periods > 0
            && t.throttled_periods as f64 >= min_throttled_share * t.periods as f64,
        "the premise failed: {} was not throttled enough: {t:?}",
        starvation::STARVED
    );
    assert!(
        outcome.foreign_announcements.is_empty(),
        "gratuitous ARP from non-owners while starved: {:?}",
        outcome.foreign_announcements
    );
    // Every answer comes from the owner alone. A throttled owner may answer a probe later than
    // the 500 ms it listens (p99 ~470 ms at 3 %): at most 5 % of the probes go unanswered.
    let (late, foreign): (Vec<_>, Vec<_>) = outcome
        .wrong_answers
        .iter()
        .partition(|(_, macs)| macs.is_empty());
    assert!(
        foreign.is_empty(),
        "answers other than the owner's: {foreign:?}"
    );
    assert!(
        late.len() * 20 <= outcome.probes,
        "{} of {} probes unanswered within {:?}",
        late.len(),
        outcome.probes,
        how.listen
    );
    assert_eq!(
        outcome.failovers(),
        0.0,
        "members declared down or stalls detected: {}",
        outcome.summary()
    );
}

/// The safe profile, the speaker alone under a 1 % quota (throttled in bursts: the idle
/// debug-build speaker uses 0.7–1 % of a CPU, 40 of 591 periods throttled in one run): never
/// failed over. The fast profile is not
/// tested here: its premise is unstable (at 2 % the speaker is often not throttled at all, at
/// 1 % it is failed over dozens of times a minute); `ferrolb-bench-lab starve --percent N`
/// measures it, and docs/speaker.md says to use `safe` on nodes with CPU limits.
#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier (tests/run.sh --extended): a one-minute starvation soak, docs/testing.md"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_a_speaker_throttled_at_a_1_percent_quota_is_not_failed_over_with_the_safe_profile() {
    no_false_failover_while_starved(
        starve_for_a_minute(1, false),
        &["--timing-profile", "safe"],
        0.0,
    )
    .await;
}

/// The safe profile, the speaker sharing a 3 % quota with a busy loop (throttled in every
/// period): never failed over. (The fast profile fails this one; `docs/benchmarks.md` has its
/// false failovers per hour from `ferrolb-bench-lab starve`.)
#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier (tests/run.sh --extended): a one-minute starvation soak, docs/testing.md"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_a_speaker_starved_by_a_busy_neighbour_is_not_failed_over_with_the_safe_profile() {
    no_false_failover_while_starved(
        starve_for_a_minute(3, true),
        &["--timing-profile", "safe"],
        0.9,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------
// F6 — crash-only supervision.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_a_dead_task_takes_the_speaker_down_and_the_others_serve() {
    let nodes = node_names(2);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let (mut lab, _client) = lab_with_ips(2, &ips).await.unwrap();
    // Occupy node-1's metrics port: its HTTP task ends at once.
    let netns = lab.node("node-1").netns.clone();
    let blocker = ferrolb_tests::lab::within_netns(&netns, || {
        Ok(std::net::TcpListener::bind("127.0.0.1:7473")?)
    })
    .unwrap();
    start_all(&mut lab, &nodes);
    let answers = lab
        .wait_for_owner(0, ips[0], Some("node-2"), SETTLE)
        .await
        .unwrap();
    assert_eq!(answers, BTreeSet::from([lab.node("node-2").mac.clone()]));
    let deadline = tokio::time::Instant::now() + SETTLE;
    let status = loop {
        if let Some(status) = lab.speaker_exit(all[0]) {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "node-1's speaker kept running without its HTTP endpoints:\n{}",
            lab.speaker_log("node-1", 20)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let log = lab.speaker_log("node-1", 200);
    assert!(
        !status.success() && log.contains("supervised task 'http' ended"),
        "{status}: {log}"
    );
    drop(blocker);
    // Restarted (as the kubelet would), it takes its IP back.
    lab.start_speaker("node-1", &[]).unwrap();
    wait_owners(&lab, &ips, &all).await;
}
