//! Attacks on the claim gate (issue #8 F1–F6, `docs/speaker.md` "Under faults: the claim gate"):
//! faults in which two nodes answer for one IP at once, or none answers for longer than a
//! failover. Each test prints `ATTACK` lines with what it observed (run with `--nocapture`) and
//! asserts the promise ("exactly one node answers"), so a failing test is a finding. Every one
//! holds now, some only after the fixes they prompted (A13: a speaker declared down leaves the
//! membership for a hold-off; A8, A14: two-way evidence and the quorum lease; A3, A11: only
//! Nodes that run a speaker vote, a deleted Node's speaker keeps its vote for the memory —
//! `docs/speaker.md`, "Faults the lab attacks found").
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::Ipv4Addr;
use std::time::Duration;

use ferrolb_tests::lab::scenario::{
    self, Sample, answer_timeline, dual_answer_window, expected_owner, gratuitous_macs, ips_where,
    lab_with_ips, node_names,
};
use ferrolb_tests::lab::{Lab, pause_process};
use ferrolb_tests::objects::create_speaker_pod;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

const LISTEN: Duration = Duration::from_millis(120);
const PORT: u16 = 7947;

async fn wait_owner(lab: &Lab, ip: Ipv4Addr, members: &[&str]) {
    scenario::wait_owners(lab, &[ip], members).await.unwrap();
}

/// Writes Node `name`'s status like the node controller would: `Ready` = `ready`.
async fn set_ready(client: &kube::Client, name: &str, ip: Ipv4Addr, ready: &str) {
    ferrolb_tests::lab::set_node_conditions(client, name, ip, ready, false)
        .await
        .unwrap();
}

/// Cuts (or restores) node `name`'s speaker from the API server (the relay on 127.0.0.1:6443 in
/// its namespace): its watch view freezes, as for a kubelet/speaker behind a partition.
fn block_api(lab: &Lab, name: &str, block: bool) {
    let netns = lab.node(name).netns.clone();
    let _ = lab.exec(&netns, "nft", &["delete", "table", "inet", "attack_api"]);
    if block {
        let file = lab.dir().join(format!("api-{name}.nft"));
        std::fs::write(
            &file,
            "table inet attack_api {\n chain output { type filter hook output priority -10; tcp dport 6443 drop; tcp sport 6443 drop; }\n}\n",
        )
        .unwrap();
        lab.exec(&netns, "nft", &["-f", &file.to_string_lossy()])
            .unwrap();
    }
}

fn summary(timeline: &[Sample], lab: &Lab) -> String {
    let name = |mac: &String| {
        lab.node_by_mac(mac)
            .map_or_else(|| mac.clone(), |n| n.name.clone())
    };
    let mut out = String::new();
    let mut last: Option<Vec<String>> = None;
    for s in timeline {
        let names: Vec<String> = s.macs.iter().map(name).collect();
        if last.as_ref() != Some(&names) {
            out.push_str(&format!("{:>6}ms {:?}\n", s.at.as_millis(), names));
            last = Some(names);
        }
    }
    out
}

fn stats(timeline: &[Sample]) -> (usize, usize, usize) {
    let dual = timeline.iter().filter(|s| s.macs.len() > 1).count();
    let none = timeline.iter().filter(|s| s.macs.is_empty()).count();
    (dual, none, timeline.len())
}

/// Longest run of consecutive probes with no answer, as time (from the first silent probe to
/// the end of the last one).
fn longest_silence(timeline: &[Sample]) -> Duration {
    let mut best = Duration::ZERO;
    let mut start: Option<Duration> = None;
    for s in timeline {
        if s.macs.is_empty() {
            let from = *start.get_or_insert(s.at);
            best = best.max(s.at + LISTEN - from);
        } else {
            start = None;
        }
    }
    best
}

/// Copies the speaker logs to /tmp/attack-logs/<tag>-<node>.log.
fn keep_logs(lab: &Lab, tag: &str) {
    let _ = std::fs::create_dir_all("/tmp/attack-logs");
    for n in &lab.nodes {
        let _ = std::fs::copy(
            lab.dir().join(format!("speaker-{}.log", n.name)),
            format!("/tmp/attack-logs/{tag}-{}.log", n.name),
        );
    }
}

fn attack(name: &str, what: &str, value: impl std::fmt::Debug) {
    println!("ATTACK {name}: {what} = {value:?}");
}

// ---------------------------------------------------------------------------------------------
// A1 — a partition that also separates nodes from the API server. node-1 (owner) is cut off on
// the membership port from node-2/node-3 (the minority, correctly withdrawn). node-2 and node-3
// also lose the API server (their views freeze, all Ready), and the node controller marks them
// NotReady. Once node-1's expected set shrank to {node-1}: a "cluster of one", which always
// claimed. Now the voters it heard keep their vote (`claim::Voters`), so it stays a minority.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a1_partition_where_the_minority_keeps_the_api_server_gives_two_answerers() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let successor = expected_owner(ip, &["node-2", "node-3"]);

    // Split: node-1 alone on the membership; node-2/3 lose the API server.
    block_api(&lab, "node-2", true);
    block_api(&lab, "node-3", true);
    lab.partition_membership("node-1", &["node-2", "node-3"], PORT, true)
        .unwrap();
    wait_owner(&lab, ip, &["node-2", "node-3"]).await;
    let before = answer_timeline(&lab, 0, ip, Duration::from_secs(2), LISTEN)
        .await
        .unwrap();
    attack(
        "A1",
        "after the split (before NotReady)",
        summary(&before, &lab),
    );

    // The node controller (on node-1's side of the partition) marks node-2/3 NotReady.
    set_ready(&client, "node-2", lab.node("node-2").ip, "Unknown").await;
    set_ready(&client, "node-3", lab.node("node-3").ip, "Unknown").await;
    let timeline = answer_timeline(&lab, 0, ip, Duration::from_secs(8), LISTEN)
        .await
        .unwrap();
    let (dual, none, total) = stats(&timeline);
    attack(
        "A1",
        "after NotReady: probes dual/none/total",
        (dual, none, total),
    );
    attack("A1", "timeline", summary(&timeline, &lab));
    attack(
        "A1",
        "dual-answer window",
        dual_answer_window(&timeline, LISTEN),
    );
    println!("{}", lab.speaker_log("node-1", 15));
    assert_eq!(
        dual, 0,
        "node-1 (alone, with the API) and {successor} (majority) both answer {ip}"
    );
}

// ---------------------------------------------------------------------------------------------
// A2 — one Node NotReady (kubelet down) while its speaker still runs and is eligible; then the
// owner is isolated on the membership port. The isolated owner's expected set is {itself, the
// other Ready node}: two, so it always claimed; the other side has the majority. Now the
// NotReady node it heard still votes (`claim::Voters`).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a2_not_ready_node_with_a_live_speaker_turns_an_owner_partition_into_two_answerers() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    // node-3's kubelet stops posting status: NotReady. Its speaker runs on; nothing changes.
    set_ready(&client, "node-3", lab.node("node-3").ip, "False").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_owner(&lab, ip, &all).await;

    let split = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        lab.partition_membership("node-1", &["node-2", "node-3"], PORT, true)
            .unwrap();
    };
    let (timeline, ()) = tokio::join!(
        answer_timeline(&lab, 0, ip, Duration::from_secs(8), LISTEN),
        split
    );
    let timeline = timeline.unwrap();
    let (dual, none, total) = stats(&timeline);
    attack("A2", "probes dual/none/total", (dual, none, total));
    attack("A2", "timeline", summary(&timeline, &lab));
    attack(
        "A2",
        "dual-answer window",
        dual_answer_window(&timeline, LISTEN),
    );
    assert!(
        dual <= 1,
        "more than one probe straddling the split saw two answerers"
    );
}

// ---------------------------------------------------------------------------------------------
// A3 — a Ready Node without a speaker (DaemonSet excluded by nodeSelector/label, a Windows node,
// a speaker Pod stuck Pending). 4 Nodes, speakers on node-2..4, their Pods bound there (as the
// DaemonSet makes them). One speaker crashes: 2 of 4 Nodes alive, and the speakerless node-1
// holds the smallest name — before issue #32 G3 nobody answered, for as long as node-1 was Ready
// (forever). With G3 only Nodes a speaker Pod is bound to vote: 2 of 3, a majority, serving.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a3_ready_node_without_a_speaker_makes_one_crash_a_total_outage() {
    let running = ["node-2", "node-3", "node-4"];
    let ips = ips_where(&running, 1, |o| o == "node-2");
    let ip = ips[0];
    let (mut lab, client) = lab_with_ips(4, &ips).await.unwrap();
    for n in running {
        create_speaker_pod(&client, "ferrolb-system", n)
            .await
            .unwrap();
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &running).await;
    attack("A3", "3 speakers of 4 Ready nodes", "serving");

    let killed = tokio::time::Instant::now();
    lab.signal_speaker("node-2", "KILL").unwrap();
    let timeline = answer_timeline(&lab, 0, ip, Duration::from_secs(15), LISTEN)
        .await
        .unwrap();
    let (dual, none, total) = stats(&timeline);
    attack(
        "A3",
        "after SIGKILL of the owner: dual/none/total",
        (dual, none, total),
    );
    attack("A3", "timeline", summary(&timeline, &lab));
    attack("A3", "longest silence", longest_silence(&timeline));
    attack("A3", "elapsed", killed.elapsed());
    println!("{}", lab.speaker_log("node-3", 8));
    // A crash is a benign fault: never two answerers; the silence is a crash failover, within
    // the simulator's I-failover bound at 4 nodes with `fast` (probe period × (N + 1) + suspect
    // timeout + two ticks = 500 + 200 + 200 ms).
    assert_eq!(dual, 0, "two answerers after a crash");
    let t_fo = Duration::from_millis(900);
    assert!(
        longest_silence(&timeline) <= t_fo,
        "{ip} unanswered longer than {t_fo:?} after one of three running speakers crashed"
    );
    assert!(
        timeline.last().is_some_and(|s| !s.macs.is_empty()),
        "nobody answers {ip} at the end"
    );
}

// ---------------------------------------------------------------------------------------------
// A4 — SIGSTOP just under the stall threshold, back to back: stopped 250 ms, running 30 ms, for
// 6 s. Every tick gap stays under 300 ms (no stall detected, lease renewed each time), yet the
// owner answers at most 30 ms out of 280.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a4_repeated_stalls_just_under_the_threshold() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let pid = lab.speaker_pid("node-1").unwrap();
    let stop_ms: u64 = std::env::var("A4_STOP_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(250);
    let run_ms: u64 = std::env::var("A4_RUN_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30);
    let stalls = async move {
        tokio::time::sleep(Duration::from_millis(200)).await;
        tokio::task::spawn_blocking(move || {
            let end = std::time::Instant::now() + Duration::from_secs(6);
            while std::time::Instant::now() < end {
                pause_process(pid, Duration::from_millis(stop_ms)).unwrap();
                std::thread::sleep(Duration::from_millis(run_ms));
            }
        })
        .await
        .unwrap();
    };
    let (seen, (timeline, ())) = tokio::join!(lab.capture(0, Duration::from_secs(8)), async {
        tokio::join!(
            answer_timeline(
                &lab,
                0,
                ip,
                Duration::from_secs(8),
                Duration::from_millis(300)
            ),
            stalls
        )
    });
    let seen = seen.unwrap();
    let timeline = timeline.unwrap();
    let (dual, none, total) = stats(&timeline);
    let g = gratuitous_macs(&seen, ip);
    let name = |m: &String| lab.node_by_mac(m).map(|n| n.name.clone());
    attack(
        "A4",
        &format!("{stop_ms}/{run_ms} ms: dual/none/total (300 ms probes)"),
        (dual, none, total),
    );
    attack("A4", "timeline", summary(&timeline, &lab));
    attack(
        "A4",
        "gratuitous ARP senders",
        g.iter().map(name).collect::<Vec<_>>(),
    );
    let m = lab.speaker_http("node-1", "/metrics").await.unwrap().1;
    for l in m.lines().filter(|l| {
        l.starts_with("ferrolb_speaker_stalls_total")
            || l.starts_with("ferrolb_speaker_frames_dropped_total")
            || l.starts_with("ferrolb_speaker_membership_transitions_total")
    }) {
        println!("node-1 {l}");
    }
    for n in ["node-2", "node-3"] {
        let m = lab.speaker_http(n, "/metrics").await.unwrap().1;
        for l in m
            .lines()
            .filter(|l| l.starts_with("ferrolb_speaker_membership_transitions_total"))
        {
            println!("{n} {l}");
        }
    }
    assert_eq!(dual, 0, "two answerers during sub-threshold stalls");
}

// ---------------------------------------------------------------------------------------------
// A5 — the owner's membership port flaps (blocked/unblocked every `A5_PERIOD_MS`, default 400 ms)
// for 8 s.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a5_membership_port_flapping_on_the_owner() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let period: u64 = std::env::var("A5_PERIOD_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(400);
    let flap = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let end = tokio::time::Instant::now() + Duration::from_secs(8);
        let mut block = true;
        while tokio::time::Instant::now() < end {
            lab.partition_membership("node-1", &[], PORT, block)
                .unwrap();
            block = !block;
            tokio::time::sleep(Duration::from_millis(period)).await;
        }
        lab.partition_membership("node-1", &[], PORT, false)
            .unwrap();
    };
    let (seen, (timeline, ())) = tokio::join!(lab.capture(0, Duration::from_secs(11)), async {
        tokio::join!(
            answer_timeline(&lab, 0, ip, Duration::from_secs(11), LISTEN),
            flap
        )
    });
    let timeline = timeline.unwrap();
    let seen = seen.unwrap();
    let (dual, none, total) = stats(&timeline);
    let name = |m: &String| lab.node_by_mac(m).map(|n| n.name.clone());
    attack(
        "A5",
        &format!("flap every {period} ms: dual/none/total"),
        (dual, none, total),
    );
    attack("A5", "timeline", summary(&timeline, &lab));
    attack("A5", "longest silence", longest_silence(&timeline));
    attack(
        "A5",
        "gratuitous ARP senders",
        gratuitous_macs(&seen, ip)
            .iter()
            .map(name)
            .collect::<Vec<_>>(),
    );
    wait_owner(&lab, ip, &all).await;
    // The documented window is one probe per split; flapping makes many splits, so only a run
    // of two or more consecutive dual probes counts as a finding.
    let longest_dual_run = timeline
        .split(|s| s.macs.len() <= 1)
        .map(<[Sample]>::len)
        .max()
        .unwrap_or(0);
    attack("A5", "longest run of dual probes", longest_dual_run);
    assert!(
        longest_dual_run <= 1,
        "{dual} probes saw two answerers while flapping"
    );
}

// ---------------------------------------------------------------------------------------------
// A6 — two non-owners restarted at once (SIGKILL + immediate restart, e.g. an upgrade with
// maxUnavailable 2, or two nodes rebooting): the owner, which never failed, drops to a minority.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a6_two_non_owners_restarted_at_once_silence_the_owner() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let mut results = Vec::new();
    for signal in ["KILL", "TERM"] {
        // Probing starts right after both restarts (the lab needs `&mut` to restart).
        lab.signal_speaker("node-2", signal).unwrap();
        lab.signal_speaker("node-3", signal).unwrap();
        lab.start_speaker("node-2", &[]).unwrap();
        lab.start_speaker("node-3", &[]).unwrap();
        let probing = answer_timeline(&lab, 0, ip, Duration::from_secs(8), LISTEN);
        let timeline = probing.await.unwrap();
        let (dual, none, total) = stats(&timeline);
        attack(
            "A6",
            &format!("{signal}: dual/none/total"),
            (dual, none, total),
        );
        attack(
            "A6",
            &format!("{signal}: timeline"),
            summary(&timeline, &lab),
        );
        attack(
            "A6",
            &format!("{signal}: longest silence"),
            longest_silence(&timeline),
        );
        results.push(longest_silence(&timeline));
        wait_owner(&lab, ip, &all).await;
    }
    println!("{}", lab.speaker_log("node-1", 12));
    assert!(
        results.iter().all(|d| *d < Duration::from_millis(600)),
        "the owner went silent: {results:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A7 — one stall just over the threshold that the others do not (yet) fail over: the owner
// withdraws for the resync period and nobody answers meanwhile, although no failover happened.
// `A7_PROFILE` (fast|safe, default safe) and `A7_STALL_MS` (default 6500; fast: try 350).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a7_stall_just_over_the_threshold_silences_the_ip_for_stall_plus_resync() {
    let profile = std::env::var("A7_PROFILE").unwrap_or_else(|_| "safe".into());
    let stall_ms: u64 = std::env::var("A7_STALL_MS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if profile == "safe" { 6500 } else { 350 });
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &["--timing-profile", &profile])
            .unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    // Let the membership settle (safe profile: slow).
    tokio::time::sleep(Duration::from_secs(3)).await;
    wait_owner(&lab, ip, &all).await;
    let pid = lab.speaker_pid("node-1").unwrap();
    let total = Duration::from_millis(stall_ms * 2 + 4000);
    let stall = async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        tokio::task::spawn_blocking(move || {
            pause_process(pid, Duration::from_millis(stall_ms)).unwrap()
        })
        .await
        .unwrap();
    };
    let (timeline, ()) = tokio::join!(answer_timeline(&lab, 0, ip, total, LISTEN), stall);
    let timeline = timeline.unwrap();
    let (dual, none, n) = stats(&timeline);
    attack(
        "A7",
        &format!("{profile}, one {stall_ms} ms SIGSTOP from 500 ms: dual/none/total"),
        (dual, none, n),
    );
    attack("A7", "timeline", summary(&timeline, &lab));
    let silence = longest_silence(&timeline);
    attack("A7", "longest silence", silence);
    for n in &all {
        let m = lab.speaker_http(n, "/metrics").await.unwrap().1;
        for l in m.lines().filter(|l| {
            l.starts_with("ferrolb_speaker_stalls_total")
                || l.starts_with("ferrolb_speaker_membership_transitions_total")
        }) {
            println!("{n} {l}");
        }
    }
    assert!(
        silence < Duration::from_millis(stall_ms) + Duration::from_millis(1000),
        "nobody answered {ip} for {silence:?} after a {stall_ms} ms stall"
    );
}

/// Drops node `name`'s membership datagrams in one direction only (`"input"` or `"output"`).
fn one_way(lab: &Lab, name: &str, dir: Option<&str>) {
    let netns = lab.node(name).netns.clone();
    let _ = lab.exec(&netns, "nft", &["delete", "table", "inet", "attack_oneway"]);
    if let Some(dir) = dir {
        let file = lab.dir().join(format!("oneway-{name}.nft"));
        std::fs::write(
            &file,
            format!(
                "table inet attack_oneway {{\n chain {dir} {{ type filter hook {dir} priority -10; udp dport {PORT} drop; }}\n}}\n"
            ),
        )
        .unwrap();
        lab.exec(&netns, "nft", &["-f", &file.to_string_lossy()])
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// A8 — asymmetric partition on the owner: only its incoming (`A8_DIR=input`) or outgoing
// (`output`, default) membership datagrams are dropped, for 6 s, then restored.

// Once a known fault (convergence was one-way); fixed by two-way evidence and the quorum lease
// (issue #32 G1, G2): the owner that cannot send gets no lease grants and stops within the
// lease, before the others can declare it down. A benign-fault guarantee: zero dual probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a8_asymmetric_partition_of_the_owner() {
    let dir = std::env::var("A8_DIR").unwrap_or_else(|_| "output".into());
    let count: usize = std::env::var("A8_NODES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let nodes = node_names(count);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(count, &ips).await.unwrap();
    let profile = std::env::var("A8_PROFILE").unwrap_or_else(|_| "fast".into());
    let fault_s: u64 = std::env::var("A8_FAULT_S")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    for n in &nodes {
        lab.start_speaker(n, &["--timing-profile", &profile])
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    wait_owner(&lab, ip, &all).await;
    wait_owner(&lab, ip, &all).await;
    let fault = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        one_way(&lab, "node-1", Some(&dir));
        tokio::time::sleep(Duration::from_secs(fault_s)).await;
        one_way(&lab, "node-1", None);
    };
    let (timeline, ()) = tokio::join!(
        answer_timeline(&lab, 0, ip, Duration::from_secs(fault_s + 4), LISTEN),
        fault
    );
    let timeline = timeline.unwrap();
    let (dual, none, n) = stats(&timeline);
    attack(
        "A8",
        &format!("{profile}, {count} nodes, {dir} dropped {fault_s} s: dual/none/total"),
        (dual, none, n),
    );
    attack("A8", "timeline", summary(&timeline, &lab));
    attack("A8", "dual window", dual_answer_window(&timeline, LISTEN));
    attack("A8", "longest silence", longest_silence(&timeline));
    keep_logs(&lab, "a8");
    assert_eq!(dual, 0, "probes saw two answerers");
}

// ---------------------------------------------------------------------------------------------
// A9 — non-transitive partition: node-1 (owner) and node-2 cannot hear each other; node-3 hears
// both. 6 s, then healed.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a9_non_transitive_partition() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let fault = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        lab.partition_membership("node-1", &["node-2"], PORT, true)
            .unwrap();
        tokio::time::sleep(Duration::from_secs(6)).await;
        lab.partition_membership("node-1", &[], PORT, false)
            .unwrap();
    };
    let (timeline, ()) = tokio::join!(
        answer_timeline(&lab, 0, ip, Duration::from_secs(10), LISTEN),
        fault
    );
    let timeline = timeline.unwrap();
    let (dual, none, n) = stats(&timeline);
    attack("A9", "dual/none/total", (dual, none, n));
    attack("A9", "timeline", summary(&timeline, &lab));
    attack("A9", "dual window", dual_answer_window(&timeline, LISTEN));
    attack("A9", "longest silence", longest_silence(&timeline));
    keep_logs(&lab, "a9");
    assert!(dual <= 1, "{dual} probes saw two answerers");
}

// ---------------------------------------------------------------------------------------------
// A10 — the isolated owner is restarted at the moment its partition heals.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a10_owner_restarted_as_its_partition_heals() {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    lab.partition_membership("node-1", &["node-2", "node-3"], PORT, true)
        .unwrap();
    wait_owner(&lab, ip, &["node-2", "node-3"]).await;
    let mut results = Vec::new();
    for signal in ["KILL", "TERM"] {
        lab.signal_speaker("node-1", signal).unwrap();
        lab.partition_membership("node-1", &[], PORT, false)
            .unwrap();
        lab.start_speaker("node-1", &[]).unwrap();
        let (seen, timeline) = tokio::join!(
            lab.capture(0, Duration::from_secs(6)),
            answer_timeline(&lab, 0, ip, Duration::from_secs(6), LISTEN)
        );
        let timeline = timeline.unwrap();
        let seen = seen.unwrap();
        let (dual, none, n) = stats(&timeline);
        attack(
            "A10",
            &format!("{signal}: dual/none/total"),
            (dual, none, n),
        );
        attack(
            "A10",
            &format!("{signal}: timeline"),
            summary(&timeline, &lab),
        );
        attack(
            "A10",
            &format!("{signal}: gratuitous"),
            gratuitous_macs(&seen, ip)
                .iter()
                .map(|m| lab.node_by_mac(m).map(|n| n.name.clone()))
                .collect::<Vec<_>>(),
        );
        results.push(dual);
        wait_owner(&lab, ip, &all).await;
        // Isolate again for the next round.
        lab.partition_membership("node-1", &["node-2", "node-3"], PORT, true)
            .unwrap();
        wait_owner(&lab, ip, &["node-2", "node-3"]).await;
    }
    assert!(results.iter().all(|d| *d <= 1), "{results:?}");
}

// ---------------------------------------------------------------------------------------------
// A11 — the owner node-1 is isolated (minority, withdrawn: correct). Then, while the partition
// lasts, node-3's Node flips NotReady (its kubelet restarts, say) or is deleted (its speaker
// keeps running). node-1's expected set drops to {node-1, node-2}: a "cluster of two", which
// always claimed. The NotReady node still votes (`claim::Voters`); since issue #32 G3 a deleted
// Node's heard speaker keeps its vote for the voter memory too. Both modes run (`A11_MODE`
// picks one).

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a11_node_flips_not_ready_or_is_deleted_while_the_owner_is_partitioned() {
    let modes = match std::env::var("A11_MODE") {
        Ok(mode) => vec![mode],
        Err(_) => vec!["notready".to_string(), "delete".to_string()],
    };
    for mode in modes {
        a11(&mode).await;
    }
}

async fn a11(mode: &str) {
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    lab.partition_membership("node-1", &["node-2", "node-3"], PORT, true)
        .unwrap();
    wait_owner(&lab, ip, &["node-2", "node-3"]).await;
    let before = answer_timeline(&lab, 0, ip, Duration::from_secs(2), LISTEN)
        .await
        .unwrap();
    attack(
        "A11",
        "partitioned, before the flip",
        summary(&before, &lab),
    );
    match mode {
        "delete" => {
            let api: Api<Node> = Api::all(client.clone());
            api.delete("node-3", &Default::default()).await.unwrap();
        }
        _ => set_ready(&client, "node-3", lab.node("node-3").ip, "False").await,
    }
    let timeline = answer_timeline(&lab, 0, ip, Duration::from_secs(6), LISTEN)
        .await
        .unwrap();
    let (dual, none, n) = stats(&timeline);
    attack("A11", &format!("{mode}: dual/none/total"), (dual, none, n));
    attack(
        "A11",
        &format!("{mode}: timeline"),
        summary(&timeline, &lab),
    );
    keep_logs(&lab, "a11");
    assert_eq!(dual, 0, "two answerers for {ip} after node-3 went {mode}");
}

// ---------------------------------------------------------------------------------------------
// A12 — the default (fast) profile starved by a busy neighbour (3 % quota shared with a busy
// loop, 60 s): documented to fail over falsely; does any probe see two answerers? (CFS
// throttles per-CPU run queues, so the speaker's threads need not stop together.)

#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier (tests/run.sh --extended): a one-minute starvation soak, docs/testing.md"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a12_fast_profile_starved_owner_never_answers_alongside_its_successor() {
    use ferrolb_tests::lab::starvation::{self, Starve};
    let secs: u64 = std::env::var("A12_SECONDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let outcome = starvation::run(
        None,
        &[],
        Starve {
            percent: 3,
            hog: true,
            shares: None,
            duration: Duration::from_secs(secs),
            listen: Duration::from_millis(500),
        },
    )
    .await
    .unwrap();
    println!("ATTACK A12: {}", outcome.summary());
    let dual: Vec<_> = outcome
        .wrong_answers
        .iter()
        .filter(|(_, macs)| macs.len() > 1)
        .collect();
    let none = outcome
        .wrong_answers
        .iter()
        .filter(|(_, macs)| macs.is_empty())
        .count();
    attack("A12", "probes", outcome.probes);
    attack("A12", "dual-answer probes (500 ms listen)", &dual);
    attack("A12", "unanswered probes", none);
    attack("A12", "foreign gratuitous", &outcome.foreign_announcements);
    // The fast profile is documented to fail over falsely under this load (use `safe` there);
    // what must hold is that the starved owner and its successor rarely answer together: at
    // most 5 % of the probes. Measured: 1–6 of 112 before the peer-claim yield (`l2::peers`)
    // and the postponed late suspicions (`MembershipCore::handle_timers`), 0–1 of 112 after
    // (docs/speaker.md).
    assert!(
        dual.len() * 20 <= outcome.probes.max(1),
        "{} of {} probes saw two answerers: {dual:?}",
        dual.len(),
        outcome.probes
    );
}

/// Drops `percent` % of node `name`'s membership datagrams at random in `dirs` ("input",
/// "output"); `None` restores.
fn lossy(lab: &Lab, name: &str, percent: Option<u32>, dirs: &[&str]) {
    let netns = lab.node(name).netns.clone();
    let _ = lab.exec(&netns, "nft", &["delete", "table", "inet", "attack_loss"]);
    if let Some(p) = percent {
        let chains: String = dirs
            .iter()
            .map(|d| {
                format!(
                    " chain {d} {{ type filter hook {d} priority -10; udp dport {PORT} numgen random mod 100 < {p} drop; udp sport {PORT} numgen random mod 100 < {p} drop; }}\n"
                )
            })
            .collect();
        let file = lab.dir().join(format!("loss-{name}.nft"));
        std::fs::write(&file, format!("table inet attack_loss {{\n{chains}}}\n")).unwrap();
        lab.exec(&netns, "nft", &["-f", &file.to_string_lossy()])
            .unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// A13 — a lossy owner: `A13_LOSS` % (default 60) of node-1's membership datagrams are dropped
// at random in `A13_DIRS` (default "output"; "input,output" for both) for 20 s.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a13_lossy_membership_link_on_the_owner() {
    let loss: u32 = std::env::var("A13_LOSS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(60);
    let dirs_s = std::env::var("A13_DIRS").unwrap_or_else(|_| "output".into());
    let dirs: Vec<&str> = dirs_s.split(',').collect();
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    let profile = std::env::var("A13_PROFILE").unwrap_or_else(|_| "fast".into());
    for n in &nodes {
        lab.start_speaker(n, &["--timing-profile", &profile])
            .unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    lossy(&lab, "node-1", Some(loss), &dirs);
    let timeline = answer_timeline(&lab, 0, ip, Duration::from_secs(20), LISTEN)
        .await
        .unwrap();
    lossy(&lab, "node-1", None, &dirs);
    let (dual, none, n) = stats(&timeline);
    let longest_dual_run = timeline
        .split(|s| s.macs.len() <= 1)
        .map(<[Sample]>::len)
        .max()
        .unwrap_or(0);
    attack(
        "A13",
        &format!("{profile}, {loss}% {dirs_s}: dual/none/total"),
        (dual, none, n),
    );
    attack("A13", "longest run of dual probes", longest_dual_run);
    attack("A13", "longest silence", longest_silence(&timeline));
    attack("A13", "timeline", summary(&timeline, &lab));
    keep_logs(&lab, "a13");
    // Each time the others declare the owner down, both answer until it learns so: a bounded
    // window (at most 3 probes in a row, ~0.5 s), and rare (at most 10 % of the probes; without
    // the hold-off of docs/speaker.md, runs of 6 and more).
    assert!(
        longest_dual_run <= 3,
        "a run of {longest_dual_run} dual answers"
    );
    assert!(dual * 10 <= n, "{dual} of {n} probes saw two answerers");
}

// ---------------------------------------------------------------------------------------------
// A14 — a key rotation rolled out in the wrong order (step 2 of docs/membership.md, `new\nold`,
// before step 1 reached everyone): the first restarted speaker seals with a key the others
// cannot open, but opens theirs — one-way hearing, as in A8. It is restarted while owning an IP
// (a `rollout restart` restarts owners too).

// Once a known fault (convergence was one-way); fixed by two-way evidence (issue #32 G1): the
// restarted speaker whose datagrams the others cannot open gets no lease grants, so it never
// converges and claims nothing. Zero dual probes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a14_misordered_key_rotation_restart_of_the_owner() {
    let profile = std::env::var("A14_PROFILE").unwrap_or_else(|_| "fast".into());
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &["--timing-profile", &profile])
            .unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let old = std::fs::read_to_string(lab.key_file()).unwrap();
    let new = "5f1e0c9a7b3d2e4f60718293a4b5c6d7e8f90a1b2c3d4e5f60718293a4b5c6d7";
    std::fs::write(lab.key_file(), format!("{new}\n{}", old.trim())).unwrap();
    lab.signal_speaker("node-1", "TERM").unwrap();
    lab.start_speaker("node-1", &["--timing-profile", &profile])
        .unwrap();
    let (seen, timeline) = tokio::join!(
        lab.capture(0, Duration::from_secs(12)),
        answer_timeline(&lab, 0, ip, Duration::from_secs(12), LISTEN)
    );
    let timeline = timeline.unwrap();
    let seen = seen.unwrap();
    let (dual, none, n) = stats(&timeline);
    attack(
        "A14",
        &format!("{profile}: dual/none/total"),
        (dual, none, n),
    );
    attack("A14", "timeline", summary(&timeline, &lab));
    attack("A14", "dual window", dual_answer_window(&timeline, LISTEN));
    attack(
        "A14",
        "gratuitous",
        gratuitous_macs(&seen, ip)
            .iter()
            .map(|m| lab.node_by_mac(m).map(|n| n.name.clone()))
            .collect::<Vec<_>>(),
    );
    keep_logs(&lab, "a14");
    assert_eq!(dual, 0, "probes saw two answerers");
}

// ---------------------------------------------------------------------------------------------
// A15 — forged peer claims (issue #32 G4, DESIGN S15). A host on the LAN without the key sends
// gratuitous ARPs for an owned IP with a peer Node's MAC as Ethernet source and sender hardware
// address, in both forms, without a proof and with a proof of its own making, five times a
// second for 6 s. Before claim proofs the owner yielded to every one of them for 2.5 s and the IP
// went unanswered for as long as the attack lasted (confirmed on real frames). A claim without a
// valid proof may now cause a counter, an Event and an RFC 5227 defence, never silence: every
// probe is answered by the owner alone.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_forged_peer_claims_never_silence_the_owner() {
    use ferrolb_speaker::wire::arp::{GratuitousForm, build_gratuitous_arp};
    use ferrolb_speaker::wire::claim_proof::{self, Proof};
    const ATTACK: Duration = Duration::from_secs(6);
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let owner_mac = lab.node("node-1").mac.clone();
    let peer_mac: ferrolb_speaker::wire::MacAddr = lab.node("node-2").mac.parse().unwrap();
    let mut frames = Vec::new();
    for form in [GratuitousForm::Request, GratuitousForm::Reply] {
        let plain = build_gratuitous_arp(peer_mac, ip, form);
        let mut with_garbage = plain.clone();
        let now_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        claim_proof::append_to_arp(
            &mut with_garbage,
            &Proof {
                at_ms: now_ms,
                tag: [0x5a; 16],
            },
        );
        frames.push(plain);
        frames.push(with_garbage);
    }
    let netns = lab.client_netns(0).unwrap();
    let forger = tokio::task::spawn_blocking(move || {
        ferrolb_tests::lab::within_netns(&netns, move || {
            let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
            let start = std::time::Instant::now();
            let mut sent = 0u32;
            while start.elapsed() < ATTACK {
                for f in &frames {
                    c.send_frame(f)?;
                    sent += 1;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
            Ok(sent)
        })
    });
    let timeline = answer_timeline(&lab, 0, ip, ATTACK, LISTEN).await.unwrap();
    let sent = forger.await.unwrap().unwrap();
    let (_, body) = lab.speaker_http("node-1", "/metrics").await.unwrap();
    let unproven = scenario::metric_value(&body, "ferrolb_speaker_unproven_claims_total");
    let yields = scenario::metric_value(&body, "ferrolb_speaker_peer_claim_yields_total");
    attack("A15", "forged frames sent", sent);
    attack("A15", "timeline", summary(&timeline, &lab));
    attack(
        "A15",
        "owner's unproven claims / yields",
        (unproven, yields),
    );
    let wrong: Vec<&Sample> = timeline
        .iter()
        .filter(|s| s.macs != std::collections::BTreeSet::from([owner_mac.clone()]))
        .collect();
    assert!(
        wrong.is_empty(),
        "probes not answered by the owner alone during forged peer claims: {wrong:?}\n{}",
        lab.speaker_log("node-1", 20)
    );
    assert!(timeline.len() > 10, "too few probes: {}", timeline.len());
    assert!(unproven.unwrap_or(0.0) > 0.0, "the forged claims were seen");
    assert_eq!(yields, Some(0.0), "no yield to a forged claim");
}

// ---------------------------------------------------------------------------------------------
// A16 — a spoofed flood of the membership port (issue #32 G4, DESIGN S15). A host on the LAN
// without the key floods every speaker's UDP 7947 with forged membership datagrams, spoofed as
// every other member's own IP:port and from its own address, as fast as one thread sends (at a
// lower priority than the speakers: on a real LAN the attacker has its own CPU). Before the fix
// the forged datagrams spent their members' decrypt budget, every speaker lost its peers and
// withdrew every IP. Now nothing a datagram without a valid tag carries spends a budget: no
// member is declared down, no IP is withdrawn, and every probe is answered by its owner alone.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a16_spoofed_membership_flood_withdraws_nothing() {
    use ferrolb_tests::lab::bench::{clock_ticks_per_second, cpu_sample};
    use ferrolb_tests::lab::spoof::{flood, member_flows};
    use std::net::SocketAddrV4;
    const ATTACK: Duration = Duration::from_secs(8);
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips: Vec<Ipv4Addr> = nodes
        .iter()
        .flat_map(|n| ips_where(&all, 1, |o| o == n))
        .collect();
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    scenario::wait_owners(&lab, &ips, &all).await.unwrap();
    let downs = |body: &str| {
        scenario::metric_value(
            body,
            "ferrolb_speaker_membership_transitions_total{direction=\"down\"}",
        )
    };
    let mut before = Vec::new();
    for n in &nodes {
        let (_, body) = lab.speaker_http(n, "/metrics").await.unwrap();
        before.push((
            downs(&body),
            cpu_sample(lab.speaker_pid(n).unwrap()).unwrap(),
        ));
    }
    let members: Vec<SocketAddrV4> = nodes
        .iter()
        .map(|n| SocketAddrV4::new(lab.node(n).ip, PORT))
        .collect();
    let flows = member_flows(&members, lab.clients[0].ip);
    let netns = lab.client_netns(0).unwrap();
    let attacker = tokio::task::spawn_blocking(move || {
        ferrolb_tests::lab::within_netns(&netns, move || flood(&flows, ATTACK, 10))
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let probe = ATTACK - Duration::from_millis(600);
    let (t0, t1, t2) = tokio::join!(
        answer_timeline(&lab, 0, ips[0], probe, LISTEN),
        answer_timeline(&lab, 0, ips[1], probe, LISTEN),
        answer_timeline(&lab, 0, ips[2], probe, LISTEN),
    );
    let report = attacker.await.unwrap().unwrap();
    // The flood is over: whatever it did to the membership shows within a suspect timeout.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let hz = clock_ticks_per_second().unwrap() as f64;
    attack(
        "A16",
        "flood datagrams/s (accepted by the kernel)",
        report.rate().round(),
    );
    attack("A16", "flood send failures", report.failed);
    let mut wrong = Vec::new();
    for ((n, (downs_before, cpu_before)), (ip, timeline)) in nodes
        .iter()
        .zip(&before)
        .zip(ips.iter().zip([t0.unwrap(), t1.unwrap(), t2.unwrap()]))
    {
        let (_, body) = lab.speaker_http(n, "/metrics").await.unwrap();
        let cpu = cpu_sample(lab.speaker_pid(n).unwrap()).unwrap();
        let cpu_share = (cpu.ticks - cpu_before.ticks) as f64 / hz / report.elapsed.as_secs_f64();
        attack(
            "A16",
            &format!("{n}: CPU during the flood, cores"),
            (cpu_share * 100.0).round() / 100.0,
        );
        attack(
            "A16",
            &format!("{n}: timeline of {ip}"),
            summary(&timeline, &lab),
        );
        assert_eq!(
            downs(&body),
            *downs_before,
            "{n} declared a member down during a keyless flood\n{}",
            lab.speaker_log(n, 30)
        );
        let owner_mac = lab.node(&expected_owner(*ip, &all)).mac.clone();
        wrong.extend(
            timeline
                .into_iter()
                .filter(|s| s.macs != std::collections::BTreeSet::from([owner_mac.clone()]))
                .map(|s| (*ip, s)),
        );
    }
    assert!(report.sent > 0, "the attacker sent nothing: {report:?}");
    assert!(
        wrong.is_empty(),
        "probes not answered by the owner alone during the flood: {wrong:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// A17 — signed claims captured and replayed across a failback (issue #32 G4, I-auth). A host on
// the LAN without the key captures every gratuitous ARP the interim owner sends for the IP (with
// its claim proof) and replays the latest one ten times a second while it is within the proof's
// 2 s clock-skew allowance. The owner node-1 is killed, the interim owner takes the IP, node-1
// restarts and takes it back. Before the rule "a claim signed before this node began to own the
// IP never yields", the settled owner yielded to the replays for 2.5 s each and the IP went
// unanswered; now, once node-1 answers again, every probe is answered by node-1 alone, and the
// replays that reach it are counted as unproven claims, never a yield.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a17_replayed_claims_across_a_failback_never_silence_the_owner() {
    use ferrolb_speaker::wire::arp::parse_arp;
    use ferrolb_speaker::wire::claim_proof;
    const ATTACK: Duration = Duration::from_secs(14);
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ips = ips_where(&all, 1, |o| o == "node-1");
    let ip = ips[0];
    let interim = expected_owner(ip, &["node-2", "node-3"]);
    let (mut lab, _client) = lab_with_ips(3, &ips).await.unwrap();
    for n in &nodes {
        lab.start_speaker(n, &[]).unwrap();
    }
    wait_owner(&lab, ip, &all).await;
    let interim_mac: ferrolb_speaker::wire::MacAddr = lab.node(&interim).mac.parse().unwrap();
    let replayer = replay_latest_claim(&lab, ATTACK, false, move |f| {
        parse_arp(f)
            .is_ok_and(|m| m.is_gratuitous() && m.sender_mac == interim_mac && m.sender_ip == ip)
            && claim_proof::from_arp(f).is_some()
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    lab.signal_speaker("node-1", "KILL").unwrap();
    wait_owner(&lab, ip, &["node-2", "node-3"]).await;
    lab.start_speaker("node-1", &[]).unwrap();
    let timeline = answer_timeline(&lab, 0, ip, Duration::from_secs(8), LISTEN)
        .await
        .unwrap();
    let (captured, sent) = replayer.await.unwrap().unwrap();
    let (_, body) = lab.speaker_http("node-1", "/metrics").await.unwrap();
    let unproven = scenario::metric_value(&body, "ferrolb_speaker_unproven_claims_total");
    let yields = scenario::metric_value(&body, "ferrolb_speaker_peer_claim_yields_total");
    attack(
        "A17",
        "interim claims captured / replays sent",
        (captured, sent),
    );
    attack("A17", "timeline", summary(&timeline, &lab));
    attack("A17", "node-1 unproven claims / yields", (unproven, yields));
    keep_logs(&lab, "a17");
    let owner_mac = lab.node("node-1").mac.clone();
    let alone = std::collections::BTreeSet::from([owner_mac]);
    let back = timeline
        .iter()
        .position(|s| s.macs == alone)
        .expect("node-1 answers again after its restart");
    let wrong: Vec<&Sample> = timeline[back..]
        .iter()
        .filter(|s| s.macs != alone)
        .collect();
    assert!(
        wrong.is_empty(),
        "after the failback, probes not answered by node-1 alone while the interim owner's claims were replayed: {wrong:?}\n{}",
        lab.speaker_log("node-1", 30)
    );
    assert!(captured > 0 && sent > 0, "nothing captured or replayed");
    assert!(
        unproven.unwrap_or(0.0) > 0.0,
        "no replay reached node-1 while it owned the IP: the attack did not happen"
    );
    assert_eq!(yields, Some(0.0), "no yield to a replayed claim");
}

// ---------------------------------------------------------------------------------------------
// A15 on IPv6 (issue #32 G4, G6): the same keyless host forges unsolicited Neighbor
// Advertisements (O=1, to all-nodes) for an owned IPv6 address with a peer Node's MAC as
// Ethernet source and Target Link-Layer Address, five times a second for 6 s, without a claim
// proof. Every Neighbor Solicitation is answered by the owner alone, and the owner yields
// nothing.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a15_ndp_forged_peer_advertisements_never_silence_the_owner() {
    use ferrolb_speaker::wire::ndp::{
        ALL_NODES, NeighborAdvertisement, build_neighbor_advertisement, multicast_mac,
    };
    const ATTACK: Duration = Duration::from_secs(6);
    let (lab, vip) = ipv6_lab_owned_by_node_1().await;
    let owner_mac = lab.node("node-1").mac.clone();
    let alone = std::collections::BTreeSet::from([owner_mac.clone()]);
    wait_ndp_owner(&lab, vip, &alone).await;
    let peer_mac: ferrolb_speaker::wire::MacAddr = lab.node("node-2").mac.parse().unwrap();
    let forged = build_neighbor_advertisement(&NeighborAdvertisement {
        eth_dst: multicast_mac(ALL_NODES),
        eth_src: peer_mac,
        ip_src: "fe80::bad".parse().unwrap(),
        ip_dst: ALL_NODES,
        router: false,
        solicited: false,
        override_flag: true,
        target: vip,
        target_link_layer: Some(peer_mac),
    });
    let netns = lab.client_netns(0).unwrap();
    let forger = tokio::task::spawn_blocking(move || {
        ferrolb_tests::lab::within_netns(&netns, move || {
            let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
            let start = std::time::Instant::now();
            let mut sent = 0u32;
            while start.elapsed() < ATTACK {
                c.send_frame(&forged)?;
                sent += 1;
                std::thread::sleep(Duration::from_millis(200));
            }
            Ok(sent)
        })
    });
    let start = tokio::time::Instant::now();
    let mut samples = Vec::new();
    while start.elapsed() < ATTACK {
        let seen = lab.ndp_probe(0, vip, None, None, LISTEN).await.unwrap();
        samples.push(ndp_answers(&seen, vip));
    }
    let sent = forger.await.unwrap().unwrap();
    let (_, body) = lab.speaker_http("node-1", "/metrics").await.unwrap();
    let unproven = scenario::metric_value(&body, "ferrolb_speaker_unproven_claims_total");
    let yields = scenario::metric_value(&body, "ferrolb_speaker_peer_claim_yields_total");
    attack("A15v6", "forged NAs sent / probes", (sent, samples.len()));
    attack(
        "A15v6",
        "owner's unproven claims / yields",
        (unproven, yields),
    );
    let wrong: Vec<&std::collections::BTreeSet<String>> =
        samples.iter().filter(|s| **s != alone).collect();
    assert!(
        wrong.is_empty(),
        "Neighbor Solicitations not answered by the owner alone during forged NAs: {wrong:?}\n{}",
        lab.speaker_log("node-1", 20)
    );
    assert!(samples.len() > 10, "too few probes: {}", samples.len());
    assert!(unproven.unwrap_or(0.0) > 0.0, "the forged NAs were seen");
    assert_eq!(yields, Some(0.0), "no yield to a forged NA");
}

/// A 3-node lab with an IPv6 LoadBalancer address in `2001:db8:0:8::/64` whose rendezvous owner
/// is node-1, a global address on every node (the default NDP interface set needs one besides the
/// link-local) and on client 0, and every speaker started.
async fn ipv6_lab_owned_by_node_1() -> (Lab, std::net::Ipv6Addr) {
    use std::net::{IpAddr, Ipv6Addr};
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let vip: Ipv6Addr = (0x100u16..0x1ff)
        .map(|i| Ipv6Addr::new(0x2001, 0xdb8, 0, 8, 0, 0, 0, i))
        .find(|ip| {
            ferrolb_speaker::election::owner(IpAddr::V6(*ip), all.iter().copied()) == Some("node-1")
        })
        .unwrap();
    let mut lab = ferrolb_tests::lab::Lab::start(3, 1).await.unwrap();
    let client = lab.client().await.unwrap();
    ferrolb_tests::objects::announced_service(
        &client,
        &["2001:db8:0:8::/64"],
        "svc-a",
        "Cluster",
        &[&vip.to_string()],
    )
    .await
    .unwrap();
    let client_ns = lab.clients[0].netns.clone();
    lab.add_address(&client_ns, "2001:db8:0:8::1/64").unwrap();
    for (i, n) in nodes.iter().enumerate() {
        let ns = lab.node(n).netns.clone();
        lab.add_address(&ns, &format!("2001:db8:0:8::{}/64", 10 + i))
            .unwrap();
        lab.start_speaker(n, &[]).unwrap();
    }
    (lab, vip)
}

/// The MACs that answered a Neighbor Solicitation for `vip` (solicited advertisements).
fn ndp_answers(
    seen: &[ferrolb_tests::lab::Seen],
    vip: std::net::Ipv6Addr,
) -> std::collections::BTreeSet<String> {
    use ferrolb_tests::lab::Seen;
    seen.iter()
        .filter(
            |s| matches!(s, Seen::NeighborAdvertisement { solicited: true, ip, .. } if *ip == vip),
        )
        .map(|s| s.mac().to_owned())
        .collect()
}

/// Probes `vip` until exactly the MACs `want` answer (at most 30 s).
async fn wait_ndp_owner(
    lab: &Lab,
    vip: std::net::Ipv6Addr,
    want: &std::collections::BTreeSet<String>,
) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let seen = lab.ndp_probe(0, vip, None, None, LISTEN).await.unwrap();
        if ndp_answers(&seen, vip) == *want {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{want:?} never answered {vip} alone: {seen:?}\n{}",
            lab.speaker_log("node-1", 30)
        );
    }
}

// ---------------------------------------------------------------------------------------------
// A17 on IPv6 (issue #32 G4, G6): the keyless host captures every unsolicited Neighbor
// Advertisement the interim owner sends for the IPv6 address (with its claim proof option) and
// replays the latest one ten times a second while it is within the proof's 2 s clock-skew
// allowance, across a failback: node-1 (the owner) is killed, the interim owner takes the
// address, node-1 restarts and takes it back. Once node-1 answers again, every Neighbor
// Solicitation is answered by node-1 alone, and the replays that reach it are counted as
// unproven claims, never a yield.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a17_ndp_replayed_advertisements_across_a_failback_never_silence_the_owner() {
    use ferrolb_speaker::wire::claim_proof;
    use ferrolb_speaker::wire::ndp::{NdpMessage, parse_ndp};
    const ATTACK: Duration = Duration::from_secs(14);
    let (mut lab, vip) = ipv6_lab_owned_by_node_1().await;
    let owner_mac = lab.node("node-1").mac.clone();
    let alone = std::collections::BTreeSet::from([owner_mac.clone()]);
    wait_ndp_owner(&lab, vip, &alone).await;
    let interim = ferrolb_speaker::election::owner(std::net::IpAddr::V6(vip), ["node-2", "node-3"])
        .unwrap()
        .to_owned();
    let interim_mac: ferrolb_speaker::wire::MacAddr = lab.node(&interim).mac.parse().unwrap();
    let replayer = replay_latest_claim(&lab, ATTACK, true, move |f| {
        matches!(parse_ndp(f), Ok(NdpMessage::Advertisement(na))
            if !na.solicited && na.eth_src == interim_mac && na.target == vip)
            && claim_proof::from_na(f).is_some()
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    lab.signal_speaker("node-1", "KILL").unwrap();
    let interim_alone = std::collections::BTreeSet::from([lab.node(&interim).mac.clone()]);
    wait_ndp_owner(&lab, vip, &interim_alone).await;
    lab.start_speaker("node-1", &[]).unwrap();
    let start = tokio::time::Instant::now();
    let mut timeline = Vec::new();
    while start.elapsed() < Duration::from_secs(8) {
        let seen = lab.ndp_probe(0, vip, None, None, LISTEN).await.unwrap();
        timeline.push((start.elapsed(), ndp_answers(&seen, vip)));
    }
    let (captured, sent) = replayer.await.unwrap().unwrap();
    let (_, body) = lab.speaker_http("node-1", "/metrics").await.unwrap();
    let unproven = scenario::metric_value(&body, "ferrolb_speaker_unproven_claims_total");
    let yields = scenario::metric_value(&body, "ferrolb_speaker_peer_claim_yields_total");
    attack(
        "A17v6",
        "interim advertisements captured / replays sent",
        (captured, sent),
    );
    attack(
        "A17v6",
        "node-1 unproven claims / yields",
        (unproven, yields),
    );
    keep_logs(&lab, "a17v6");
    let back = timeline
        .iter()
        .position(|(_, macs)| *macs == alone)
        .expect("node-1 answers again after its restart");
    let wrong: Vec<_> = timeline[back..]
        .iter()
        .filter(|(_, macs)| *macs != alone)
        .collect();
    attack(
        "A17v6",
        "probes after the failback / not by node-1 alone",
        (timeline.len() - back, wrong.len()),
    );
    assert!(
        wrong.is_empty(),
        "after the failback, solicitations not answered by node-1 alone while the interim owner's advertisements were replayed: {wrong:?}\n{}",
        lab.speaker_log("node-1", 30)
    );
    assert!(captured > 0 && sent > 0, "nothing captured or replayed");
    assert!(
        unproven.unwrap_or(0.0) > 0.0,
        "no replay reached node-1 while it owned the address: the attack did not happen"
    );
    assert_eq!(yields, Some(0.0), "no yield to a replayed advertisement");
}

/// The replayer of A17 (IPv4, `icmp6` false: gratuitous ARPs) and A17 on IPv6 (`icmp6` true:
/// unsolicited Neighbor Advertisements), on client 0 for `duration`: it captures every frame
/// `captured` accepts and resends the latest one ten times a second while it is younger than
/// 1.9 s (within the claim proof's 2 s clock-skew allowance), as a keyless host on the LAN can.
/// Returns (frames captured, replays sent).
fn replay_latest_claim(
    lab: &Lab,
    duration: Duration,
    icmp6: bool,
    captured: impl Fn(&[u8]) -> bool + Send + 'static,
) -> tokio::task::JoinHandle<anyhow::Result<(u32, u32)>> {
    let netns = lab.client_netns(0).unwrap();
    tokio::task::spawn_blocking(move || {
        ferrolb_tests::lab::within_netns(&netns, move || {
            let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
            let mut latest: Option<(std::time::Instant, Vec<u8>)> = None;
            let mut last_sent = std::time::Instant::now();
            let (mut count, mut sent) = (0u32, 0u32);
            let on = |c: &ferrolb_speaker::l2::capture::Client, frame: Option<&[u8]>| {
                if let Some(f) = frame
                    && captured(f)
                {
                    count += 1;
                    latest = Some((std::time::Instant::now(), f.to_vec()));
                }
                if let Some((at, f)) = &latest
                    && at.elapsed() < Duration::from_millis(1_900)
                    && last_sent.elapsed() >= Duration::from_millis(100)
                {
                    last_sent = std::time::Instant::now();
                    if c.send_frame(f).is_ok() {
                        sent += 1;
                    }
                }
            };
            if icmp6 {
                c.each_icmp6_frame(duration, on)?;
            } else {
                c.each_arp_frame(duration, on)?;
            }
            Ok((count, sent))
        })
    })
}
