//! Issue #27 item 1, "No manual key step": the controller creates the speakers' membership-key
//! Secret when it is absent, and the speakers read it through the API, waiting — alive, not
//! ready — until it exists. On the real API server, with the real binaries:
//!
//! - `the_controller_creates_one_key_and_never_replaces_one`: two controller replicas started
//!   together in a namespace without the Secret make exactly one, holding 64 hex digits the
//!   speakers' parser accepts, labelled `app.kubernetes.io/managed-by=ferrolb-controller`; a
//!   restart leaves it unchanged (same resourceVersion); a Secret the user made (a two-key
//!   rotation ring) is left exactly as it is; with `--create-memberlist-secret=false` nothing is
//!   created. The controller logs that the API server's version is above the floor (issue #28
//!   item 4).
//! - `speakers_wait_not_ready_until_the_controller_creates_the_key` (lab, two nodes): speakers
//!   started without a key file and without the Secret keep running for 6 s with `/livez` 200
//!   and `/readyz` 503 naming the Secret (before issue #27 a missing key was a start-up error: a
//!   crash loop, or `ContainerCreating` with the Secret mounted); once a controller runs, the
//!   Secret appears, both speakers become ready, and they form one membership with its key.
//! - `the_documented_rotation_needs_no_restart_and_a_wrong_order_is_reported` (lab, three nodes,
//!   issue #27 item 2): the three rotation steps done by editing the Secret alone reach every
//!   running speaker, with an owned IP answered by its owner alone throughout; a step that
//!   reaches only two speakers is reported as a key mismatch (metric and Event).
//!
//! Fast tier.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ferrolb_speaker::membership::KeyRing;
use ferrolb_speaker::membership::key_source::fingerprint_hex;
use ferrolb_tests::cluster::TestCluster;
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::{namespace, poll};
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, PostParams};
use kube::{Client, ResourceExt};

/// How long each ARP probe of the rotation test listens for answers.
const LISTEN: Duration = Duration::from_millis(120);

/// One test at a time: each starts its own cluster and the machine is small.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const SECRET: &str = "ferrolb-memberlist";

fn controller(
    cluster: &TestCluster,
    identity: &str,
    home: &str,
    args: &[&str],
) -> ControllerProcess {
    let opts = ControllerOptions::new(identity)
        .lease_namespace(home)
        .args(args);
    ControllerProcess::start(cluster.kubeconfig(), cluster.dir(), &opts).expect("start controller")
}

/// Waits until `ctl`'s log holds `line`.
async fn logged(ctl: &ControllerProcess, line: &str) {
    poll::until(
        &format!("the controller logs {line:?}"),
        Duration::from_secs(30),
        || async { ctl.log_tail(200).contains(line) },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", ctl.log_tail(40)));
}

async fn secret(client: &Client, ns: &str) -> Option<Secret> {
    Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(SECRET)
        .await
        .unwrap()
}

fn key_of(secret: &Secret) -> Vec<u8> {
    secret.data.as_ref().unwrap()["key"].0.clone()
}

#[tokio::test]
async fn the_controller_creates_one_key_and_never_replaces_one() {
    let _serial = SERIAL.lock().await;
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();

    // Two replicas at once, no Secret: exactly one is created, and it is a valid key.
    let home = namespace::fresh(&client, "ferrolb-key").await.unwrap();
    let a = controller(&cluster, "key-a", &home, &[]);
    let b = controller(&cluster, "key-b", &home, &[]);
    let made = poll::until_some("the key Secret", Duration::from_secs(30), || async {
        secret(&client, &home).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", a.log_tail(40)));
    // The version floor (issue #28 item 4): the test cluster's API server is above it, so the
    // controller read /version and went on (the refusal below 1.32 is unit-tested in
    // `ferrolb_crds::version`; this API server cannot pretend to be older).
    logged(&a, "Kubernetes version supported").await;
    let key = key_of(&made);
    let text = std::str::from_utf8(&key).unwrap();
    assert!(
        text.len() == 65
            && text.ends_with('\n')
            && text[..64].bytes().all(|b| b.is_ascii_hexdigit()),
        "not 64 hex digits and a newline ({} bytes)",
        text.len()
    );
    assert_eq!(KeyRing::parse(&key).unwrap().keys().len(), 1);
    assert_eq!(
        made.labels()
            .get("app.kubernetes.io/managed-by")
            .map(String::as_str),
        Some("ferrolb-controller")
    );
    assert_eq!(made.type_.as_deref(), Some("Opaque"));
    let list = Api::<Secret>::namespaced(client.clone(), &home)
        .list(&Default::default())
        .await
        .unwrap();
    assert_eq!(list.items.len(), 1, "one Secret, whoever won the race");
    let creators = [&a, &b]
        .iter()
        .filter(|c| {
            c.log_tail(200)
                .contains("created the speakers' membership key")
        })
        .count();
    assert_eq!(creators, 1, "exactly one replica created it");

    // A restart finds it and leaves it alone.
    a.stop(Duration::from_secs(5));
    b.stop(Duration::from_secs(5));
    let c = controller(&cluster, "key-c", &home, &[]);
    logged(&c, "the speakers' membership key exists; left as it is").await;
    let after = secret(&client, &home).await.unwrap();
    assert_eq!(after.resource_version(), made.resource_version());
    assert_eq!(key_of(&after), key);
    c.stop(Duration::from_secs(5));

    // A key the user made (a rotation's two lines, no label) is never replaced.
    let mine = namespace::fresh(&client, "user-key").await.unwrap();
    let ring = "00112233445566778899aabbccddeeff0123456789abcdeffedcba9876543210\n\
                ffeeddccbbaa99887766554433221100fedcba98765432100123456789abcdef\n";
    let users: Secret = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(SECRET.into()),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "key".to_owned(),
            ByteString(ring.as_bytes().to_vec()),
        )])),
        ..Default::default()
    };
    let users = Api::<Secret>::namespaced(client.clone(), &mine)
        .create(&PostParams::default(), &users)
        .await
        .unwrap();
    let d = controller(&cluster, "key-d", &mine, &[]);
    logged(&d, "the speakers' membership key exists; left as it is").await;
    let after = secret(&client, &mine).await.unwrap();
    assert_eq!(after.resource_version(), users.resource_version());
    assert_eq!(key_of(&after), ring.as_bytes());
    d.stop(Duration::from_secs(5));

    // --create-memberlist-secret=false (the chart's memberlist.existingSecret): nothing created.
    let none = namespace::fresh(&client, "no-key").await.unwrap();
    let e = controller(
        &cluster,
        "key-e",
        &none,
        &["--create-memberlist-secret=false"],
    );
    poll::until(
        "the controller is ready",
        Duration::from_secs(30),
        || async { e.get("/readyz").await.map(|(code, _)| code) == Some(200) },
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(secret(&client, &none).await.is_none(), "{}", e.log_tail(40));
    assert!(
        !e.log_tail(200).contains("membership key"),
        "{}",
        e.log_tail(40)
    );
}

#[tokio::test]
async fn speakers_wait_not_ready_until_the_controller_creates_the_key() {
    let _serial = SERIAL.lock().await;
    let mut lab = Lab::start(2, 0).await.expect("lab");
    let client = lab.client().await.unwrap();
    let ns = namespace::fresh(&client, "ferrolb-system").await.unwrap();
    let nodes = ["node-1", "node-2"];
    let args = ["--namespace", ns.as_str(), "--memberlist-secret", SECRET];
    for node in nodes {
        lab.start_speaker_key_from_secret(node, &args).unwrap();
    }

    // No Secret: alive, not ready, saying why — for 6 s, well past the watches' sync and any
    // start-up error.
    let started = Instant::now();
    let mut seen_waiting = [false; 2];
    while started.elapsed() < Duration::from_secs(6) {
        for (i, node) in nodes.iter().enumerate() {
            assert!(
                lab.speaker_exit(node).is_none(),
                "the speaker of {node} exited without its key:\n{}",
                lab.speaker_log(node, 30)
            );
            let Ok((live, _)) = lab.speaker_http(node, "/livez").await else {
                continue; // not listening yet
            };
            assert_eq!(live, 200);
            let (ready, why) = lab.speaker_http(node, "/readyz").await.unwrap();
            assert_eq!(ready, 503, "{node} ready without a key: {why}");
            if why.contains(&format!("Secret {ns}/{SECRET} does not exist yet")) {
                seen_waiting[i] = true;
            }
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    assert_eq!(
        seen_waiting,
        [true, true],
        "/readyz never named the missing Secret:\n{}",
        lab.speaker_log("node-1", 30)
    );

    // The controller creates it; both speakers read it, become ready and see each other.
    let ctl = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("key-lab").lease_namespace(&ns),
    )
    .unwrap();
    let made = poll::until_some("the key Secret", Duration::from_secs(30), || async {
        secret(&client, &ns).await
    })
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", ctl.log_tail(40)));
    assert!(KeyRing::parse(&key_of(&made)).is_ok());
    for node in nodes {
        poll::until(
            &format!("{node} ready with two members"),
            Duration::from_secs(30),
            || async {
                let ready = lab.speaker_http(node, "/readyz").await.map(|r| r.0).ok() == Some(200);
                let members = lab
                    .speaker_http(node, "/metrics")
                    .await
                    .ok()
                    .and_then(|(_, m)| {
                        m.lines()
                            .find(|l| l.starts_with("ferrolb_speaker_members "))
                            .and_then(|l| l.split_whitespace().last())
                            .and_then(|v| v.parse::<f64>().ok())
                    });
                ready && members == Some(2.0)
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}:\n{}", lab.speaker_log(node, 30)));
    }
    assert!(
        lab.speaker_log("node-1", 200)
            .contains("membership key ring read"),
        "{}",
        lab.speaker_log("node-1", 30)
    );
}

/// The MACs answering one ARP probe of `ip` from client 0 within `listen`.
async fn answers(lab: &Lab, ip: std::net::Ipv4Addr, listen: Duration) -> BTreeSet<String> {
    use ferrolb_tests::lab::Seen;
    lab.arp_probe(0, ip, listen)
        .await
        .unwrap()
        .iter()
        .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == std::net::IpAddr::V4(ip))
        .map(|s| s.mac().to_owned())
        .collect()
}

/// The fast profile's failover bound at three nodes (the simulator's I-failover: probe period ×
/// (N + 1) + suspect timeout + two ticks = 400 + 200 + 200 ms).
const T_FO: Duration = Duration::from_millis(800);

/// Asserts that no probe of `samples` (`(sent at, MACs that answered)`, back to back, each
/// listening [`LISTEN`]) saw a MAC but `owner`'s — never two answerers, never another node — and,
/// with `silence_bound`, that no run of unanswered probes lasted longer. Silences within
/// [`T_FO`] during the rotation are the claim gate withdrawing while the speakers are starved of
/// CPU (F4: every speaker at once, also between rotation steps, on a loaded machine); a rotation
/// that split the membership would show as `auth` drops, refusals and failovers, which the
/// caller checks.
fn only_the_owner_answers(
    lab: &Lab,
    during: &str,
    samples: &[(Duration, BTreeSet<String>)],
    owner: &str,
    silence_bound: Option<Duration>,
) {
    let others: Vec<_> = samples
        .iter()
        .filter(|(_, macs)| macs.iter().any(|m| m != owner))
        .collect();
    let mut longest = Duration::ZERO;
    let mut silent_from: Option<Duration> = None;
    for (at, macs) in samples {
        if macs.is_empty() {
            let from = *silent_from.get_or_insert(*at);
            longest = longest.max(*at + LISTEN - from);
        } else {
            silent_from = None;
        }
    }
    let silent = samples.iter().filter(|(_, m)| m.is_empty()).count();
    eprintln!(
        "{during}: {} probes, {} answered by another node, {silent} unanswered, longest silence {longest:?}",
        samples.len(),
        others.len()
    );
    assert!(
        others.is_empty(),
        "{during}: probes answered by another node than the owner: {others:?}\n{}",
        lab.speaker_log("node-1", 30)
    );
    if let Some(bound) = silence_bound {
        assert!(
            longest <= bound,
            "{during}: unanswered for {longest:?}\n{}",
            lab.speaker_log("node-1", 30)
        );
    }
}

/// Replaces the `key` of the Secret `ns/SECRET` (a `kubectl edit`).
async fn write_key(client: &Client, ns: &str, ring: &str) {
    let api = Api::<Secret>::namespaced(client.clone(), ns);
    let mut s = api.get(SECRET).await.unwrap();
    s.data = Some(BTreeMap::from([(
        "key".to_owned(),
        ByteString(ring.as_bytes().to_vec()),
    )]));
    api.replace(SECRET, &PostParams::default(), &s)
        .await
        .unwrap();
}

/// The series `membership_key_info` a speaker holding `ring` exports.
fn key_info(ring: &str) -> String {
    let ring = KeyRing::parse(ring.as_bytes()).unwrap();
    format!(
        "ferrolb_speaker_membership_key_info{{primary=\"{}\",keys=\"{}\"}} 1",
        fingerprint_hex(ring.primary()),
        ring.keys().len()
    )
}

/// Waits until every speaker of `nodes` exports [`key_info`] of `ring`: the step has reached it.
async fn applied_everywhere(lab: &Lab, nodes: &[&str], ring: &str) {
    let info = key_info(ring);
    for node in nodes {
        poll::until(
            &format!("{node} uses the new ring"),
            Duration::from_secs(30),
            || async {
                lab.speaker_http(node, "/metrics")
                    .await
                    .is_ok_and(|(_, m)| m.lines().any(|l| l == info))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}:\n{}", lab.speaker_log(node, 30)));
    }
}

/// Cuts (or restores) node `name`'s speaker from the API server (the relay on 127.0.0.1:6443 in
/// its namespace): it sees no change of the Secret, as a speaker behind a partition.
fn block_api(lab: &Lab, name: &str, block: bool) {
    let netns = lab.node(name).netns.clone();
    let _ = lab.exec(&netns, "nft", &["delete", "table", "inet", "key_api"]);
    if block {
        let file = lab.dir().join(format!("api-{name}.nft"));
        std::fs::write(
            &file,
            "table inet key_api {\n chain output { type filter hook output priority -10; tcp dport 6443 drop; tcp sport 6443 drop; }\n}\n",
        )
        .unwrap();
        lab.exec(&netns, "nft", &["-f", &file.to_string_lossy()])
            .unwrap();
    }
}

/// Issue #27 item 2 (lab, three nodes, real frames): the documented three-step rotation, done by
/// editing the Secret alone — `old\nnew`, `new\nold`, `new`, each step waited for until every
/// speaker's `/metrics` shows the ring in use (`membership_key_info`) — needs no restart. An IP
/// owned by node-1 is probed back to back all along: never answered by another node (so never
/// by two), never silent for longer than the failover bound; no datagram fails authentication
/// and nobody is refused or goes down. Before the change the speakers read the key ring once, at
/// start, so the first wait never ended.
///
/// Then a step rolled out to only two speakers: node-3 is cut from the API server and the
/// Secret skips straight to `newer\nnew` (step 2 without step 1). node-1's and node-2's primary
/// key is one node-3 lacks: they report it (`membership_refused_peers{reason="key"}`, a
/// `MembershipMismatch` Event) but do not refuse it — each seals to node-3 with the first key
/// of its ring node-3's hello lists (`new`), so the membership stays one (issue #32 G1, G5.4;
/// `docs/membership.md`, *Mismatched speakers*): every speaker still counts three members,
/// nothing fails authentication, and the IP is answered by node-1 alone, never silent for
/// longer than the failover bound. Once node-3 reads the Secret again the report ends. (Before
/// that change node-1 and node-2 refused node-3, and the wrong order allowed silences.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_rotation_needs_no_restart_and_a_wrong_order_is_reported() {
    use ferrolb_tests::lab::scenario::{self, ips_where, lab_with_ips, metric_value, node_names};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    const OLD: &str = "cba06b5736faf67e54b07b561eae94395e774c517a7d910a54369e1263ccfbd4";
    const NEW: &str = "11507a0e2f5e69d5dfa40a62a1bd7b6ee57e6bcd85c67c9b8431b36fff21c437";
    const NEWER: &str = "804f51f71254c4081e37e7c887073560f4a6fa6cdad202e9ac67e032c43ed1e1";
    let _serial = SERIAL.lock().await;
    let nodes = node_names(3);
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    let ip = ips_where(&all, 1, |o| o == "node-1")[0];
    let (mut lab, client) = lab_with_ips(3, &[ip]).await.expect("lab");
    let ns = namespace::fresh(&client, "ferrolb-system").await.unwrap();
    Api::<Secret>::namespaced(client.clone(), &ns)
        .create(
            &PostParams::default(),
            &Secret {
                metadata: kube::api::ObjectMeta {
                    name: Some(SECRET.into()),
                    ..Default::default()
                },
                data: Some(BTreeMap::from([(
                    "key".to_owned(),
                    ByteString(format!("{OLD}\n").into_bytes()),
                )])),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let args = ["--namespace", ns.as_str(), "--memberlist-secret", SECRET];
    for node in &all {
        lab.start_speaker_key_from_secret(node, &args).unwrap();
    }
    scenario::wait_owners(&lab, &[ip], &all).await.unwrap();
    applied_everywhere(&lab, &all, OLD).await;

    // The rotation, probed all along.
    let done = AtomicBool::new(false);
    let probes = AtomicUsize::new(0);
    let probe = async {
        let start = Instant::now();
        let mut samples = Vec::new();
        while !done.load(Ordering::Relaxed) {
            let at = start.elapsed();
            samples.push((at, answers(&lab, ip, LISTEN).await));
            probes.fetch_add(1, Ordering::Relaxed);
        }
        samples
    };
    let rotate = async {
        for (step, ring) in [
            format!("{OLD}\n{NEW}\n"),
            format!("{NEW}\n{OLD}\n"),
            format!("{NEW}\n"),
        ]
        .iter()
        .enumerate()
        {
            let written = Instant::now();
            write_key(&client, &ns, ring).await;
            applied_everywhere(&lab, &all, ring).await;
            eprintln!(
                "step {}: on every speaker {:?} after the edit",
                step + 1,
                written.elapsed()
            );
            // Ten probes on each step before the next.
            let from = probes.load(Ordering::Relaxed);
            poll::until(
                "ten probes on this step",
                Duration::from_secs(30),
                || async { probes.load(Ordering::Relaxed) >= from + 10 },
            )
            .await
            .unwrap();
        }
        done.store(true, Ordering::Relaxed);
    };
    let (samples, ()) = tokio::join!(probe, rotate);
    let owner = lab.node("node-1").mac.clone();
    assert!(samples.len() > 20, "too few probes: {}", samples.len());
    only_the_owner_answers(&lab, "the rotation", &samples, &owner, Some(T_FO));
    for node in &all {
        let (_, m) = lab.speaker_http(node, "/metrics").await.unwrap();
        let value = |series: &str| metric_value(&m, series);
        assert_eq!(
            value("ferrolb_speaker_membership_datagrams_dropped_total{reason=\"auth\"}"),
            Some(0.0),
            "{node}"
        );
        assert_eq!(
            value("ferrolb_speaker_membership_refused_peers{reason=\"key\"}"),
            Some(0.0),
            "{node}"
        );
        assert_eq!(
            value("ferrolb_speaker_membership_transitions_total{direction=\"down\"}"),
            Some(0.0),
            "{node}"
        );
        assert_eq!(value("ferrolb_speaker_members"), Some(3.0), "{node}");
        assert_eq!(
            value("ferrolb_speaker_membership_key_changes_total{result=\"applied\"}"),
            Some(3.0),
            "{node}"
        );
    }

    // A wrong order: step 2 of the next rotation reaches node-1 and node-2 only.
    block_api(&lab, "node-3", true);
    let skipped = format!("{NEWER}\n{NEW}\n");
    write_key(&client, &ns, &skipped).await;
    applied_everywhere(&lab, &["node-1", "node-2"], &skipped).await;
    let refused = "ferrolb_speaker_membership_refused_peers{reason=\"key\"}";
    for node in ["node-1", "node-2"] {
        poll::until(
            &format!("{node} reports node-3 for its key"),
            Duration::from_secs(30),
            || async {
                lab.speaker_http(node, "/metrics")
                    .await
                    .is_ok_and(|(_, m)| metric_value(&m, refused) == Some(1.0))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}:\n{}", lab.speaker_log(node, 30)));
    }
    poll::until(
        "a MembershipMismatch Event naming node-3",
        Duration::from_secs(30),
        || async {
            scenario::events_for(&client, "default", "node-1")
                .await
                .is_ok_and(|events| {
                    events
                        .iter()
                        .any(|(r, n)| r == "MembershipMismatch" && n.contains("node-3 (key"))
                })
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}:\n{}", lab.speaker_log("node-1", 30)));
    let start = Instant::now();
    let mut samples = Vec::new();
    for _ in 0..10 {
        let at = start.elapsed();
        samples.push((at, answers(&lab, ip, LISTEN).await));
    }
    // Reported, not refused: the membership stays one (node-1 and node-2 seal to node-3, and to
    // each other until both hold the skipped ring, with a key both sides hold), so the owner
    // answers alone with no more than the rotation's silences.
    only_the_owner_answers(&lab, "the wrong order", &samples, &owner, Some(T_FO));
    for node in &all {
        let (_, m) = lab.speaker_http(node, "/metrics").await.unwrap();
        let value = |series: &str| metric_value(&m, series);
        assert_eq!(
            value("ferrolb_speaker_membership_datagrams_dropped_total{reason=\"auth\"}"),
            Some(0.0),
            "{node}"
        );
        assert_eq!(value("ferrolb_speaker_members"), Some(3.0), "{node}");
    }
    // node-3's own primary key (`new`) is in the others' ring: it has nothing to report.
    let (_, m) = lab.speaker_http("node-3", "/metrics").await.unwrap();
    assert_eq!(metric_value(&m, refused), Some(0.0));
    // node-3 reads the Secret again: the report ends.
    block_api(&lab, "node-3", false);
    applied_everywhere(&lab, &all, &skipped).await;
    for node in ["node-1", "node-2"] {
        poll::until(
            &format!("{node} no longer reports node-3"),
            Duration::from_secs(30),
            || async {
                lab.speaker_http(node, "/metrics")
                    .await
                    .is_ok_and(|(_, m)| metric_value(&m, refused) == Some(0.0))
            },
        )
        .await
        .unwrap_or_else(|e| panic!("{e}:\n{}", lab.speaker_log(node, 30)));
    }
}
