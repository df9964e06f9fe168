//! The speaker field cases (`../shared/cases.md`) against MetalLB (issue #11, item 4): the same
//! lab, the same frames and the same expectations as ferrolb's own tests in `speaker_lab.rs`,
//! with MetalLB's speakers configured through its own `metallb.io` CRDs. Service status is written
//! by the test as a controller would (MetalLB's speaker announces any ingress inside one of its
//! pools), and every Service gets a ready endpoint (MetalLB announces only those).
//!
//! Opt-in (`#[ignore]`): run with
//! `cargo test -p ferrolb-tests --features extended --test metallb_cases -- --ignored --nocapture --test-threads 1`.
//! Each test checks every expectation of its case, prints one `PASS`/`FAIL` line per
//! expectation, and fails if any failed — a failure here is a finding about MetalLB, recorded
//! in `docs/comparison.md`, never a reason to change the case. Where ferrolb's test asserts
//! ferrolb's own names (Event reasons, metrics, the rendezvous-hash owner), the expectation here
//! is the case's wording: "a Warning Event", "exactly one node", "the other node".
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ferrolb_tests::lab::scenario::{c12_links, capture_around, gratuitous_macs, typed_events_for};
use ferrolb_tests::lab::{Implementation, Lab, Seen, case_c03, metallb};
use ferrolb_tests::objects::{apply_endpoints, create_service, lb_service, set_ingress};
use ferrolb_tests::verdicts::Verdicts;
use k8s_openapi::api::core::v1::Node;
use kube::Api;

const SETTLE: Duration = Duration::from_secs(20);
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// A MetalLB lab of `nodes` nodes and one client, pool `pools`, Service `default/svc-a` (TCP 80,
/// `etp`) holding `ip` in its status with one ready endpoint on node-1, speakers started with
/// `args`.
async fn lab_with_service(
    nodes: usize,
    pools: &[&str],
    ip: &str,
    etp: &str,
    args: &[&str],
) -> (Lab, kube::Client) {
    let mut lab = Lab::start_implementation(Implementation::MetalLb, nodes, 1)
        .await
        .expect("MetalLB lab");
    let client = lab.client().await.unwrap();
    lab.advertise_pool("pool", pools).await.unwrap();
    let mut svc = lb_service("default", "svc-a", &[("TCP", 80)], etp);
    if ip.contains(':')
        && let Some(spec) = svc.spec.as_mut()
    {
        spec.ip_families = Some(vec!["IPv6".into()]);
        spec.ip_family_policy = Some("SingleStack".into());
    }
    create_service(&client, &svc).await.unwrap();
    set_ingress(&client, "default", "svc-a", &[ip])
        .await
        .unwrap();
    apply_endpoints(
        &client,
        "default",
        "svc-a",
        80,
        &[("192.0.2.200", Some("node-1"), true, true, false)],
    )
    .await
    .unwrap();
    for i in 1..=nodes {
        lab.start_speaker(&format!("node-{i}"), args).unwrap();
    }
    (lab, client)
}

/// The one node answering ARP for `ip` within [`SETTLE`], if exactly one does.
async fn sole_owner(lab: &Lab, ip: Ipv4Addr) -> Option<String> {
    lab.wait_for_sole_answerer(0, ip, SETTLE).await.unwrap()
}

/// Whether exactly node `want` answers (or, `None`, nobody) within [`SETTLE`]; the last answers.
async fn owner_is(lab: &Lab, ip: Ipv4Addr, want: Option<&str>) -> (bool, BTreeSet<String>) {
    let answers = lab.wait_for_owner(0, ip, want, SETTLE).await.unwrap();
    let ok = match want {
        Some(node) => answers == BTreeSet::from([lab.node(node).mac.clone()]),
        None => answers.is_empty(),
    };
    (ok, answers)
}

/// Every Event on `default/<name>` now: `(type, reason, note)` (MetalLB records core/v1 Events;
/// the API server serves them as events.k8s.io/v1 with `regarding` = `involvedObject`).
async fn events(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    typed_events_for(client, "default", name).await.unwrap()
}

/// Warning Events on `default/<name>` within [`SETTLE`] (returns as soon as there is one).
async fn warnings(client: &kube::Client, name: &str) -> Vec<(String, String, String)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let found: Vec<_> = events(client, name)
            .await
            .into_iter()
            .filter(|(t, _, _)| t == "Warning")
            .collect();
        if !found.is_empty() || tokio::time::Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// C-10 (first part): two Services sharing one IP (TCP 53 and UDP 53), exactly one node answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c10_one_ip_one_announcer() {
    let mut v = Verdicts::new("C-10");
    let mut lab = Lab::start_implementation(Implementation::MetalLb, 3, 1)
        .await
        .unwrap();
    let client = lab.client().await.unwrap();
    lab.advertise_pool("pool", &["198.51.100.0/24"])
        .await
        .unwrap();
    let ip = Ipv4Addr::new(198, 51, 100, 53);
    for (name, proto) in [("svc-a", "TCP"), ("svc-b", "UDP")] {
        let mut svc = lb_service("default", name, &[(proto, 53)], "Cluster");
        svc.metadata.annotations = Some(
            [
                ("metallb.io/allow-shared-ip".to_owned(), "k1".to_owned()),
                (
                    "metallb.io/loadBalancerIPs".to_owned(),
                    "198.51.100.53".to_owned(),
                ),
            ]
            .into(),
        );
        create_service(&client, &svc).await.unwrap();
        set_ingress(&client, "default", name, &["198.51.100.53"])
            .await
            .unwrap();
        apply_endpoints(
            &client,
            "default",
            name,
            53,
            &[("192.0.2.200", Some("node-1"), true, true, false)],
        )
        .await
        .unwrap();
    }
    lab.start_every_speaker(&[]).unwrap();
    let owner = sole_owner(&lab, ip).await;
    v.check(owner.is_some(), "exactly one node answers", "not one MAC");
    let mut steady = true;
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        let answers = lab.arp_answers(0, ip).await.unwrap();
        steady &= answers.len() == 1;
        seen.extend(answers);
    }
    v.check(
        steady && seen.len() == 1,
        "every probe answered by one and the same MAC",
        format!("{seen:?}"),
    );
    v.finish();
}

/// C-10 (second part): the two Services on the shared IP restricted to disjoint nodes — two
/// overlapping pools, each Service naming its own (`metallb.io/address-pool`), each pool
/// advertised from another node (`nodeSelectors`), as ferrolb's own test does — nobody
/// announces, and a Warning Event on a Service says why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c10_disjoint_nodes_nobody_announces_and_says_why() {
    let mut v = Verdicts::new("C-10");
    let mut lab = Lab::start_implementation(Implementation::MetalLb, 3, 1)
        .await
        .unwrap();
    let client = lab.client().await.unwrap();
    metallb::create_pool(&client, "pool", &["198.51.100.0/24"])
        .await
        .unwrap();
    metallb::create_pool(&client, "pool-b", &["198.51.100.0/26"])
        .await
        .unwrap();
    metallb::advertise_pool_on(&client, "pool-on-node-1", "pool", "node-1")
        .await
        .unwrap();
    metallb::advertise_pool_on(&client, "pool-b-on-node-2", "pool-b", "node-2")
        .await
        .unwrap();
    let ip = Ipv4Addr::new(198, 51, 100, 53);
    for (name, proto, pool) in [("svc-a", "TCP", "pool"), ("svc-b", "UDP", "pool-b")] {
        let mut svc = lb_service("default", name, &[(proto, 53)], "Cluster");
        svc.metadata.annotations = Some(
            [
                ("metallb.io/allow-shared-ip".to_owned(), "k1".to_owned()),
                (
                    "metallb.io/loadBalancerIPs".to_owned(),
                    "198.51.100.53".to_owned(),
                ),
                ("metallb.io/address-pool".to_owned(), pool.to_owned()),
            ]
            .into(),
        );
        create_service(&client, &svc).await.unwrap();
        set_ingress(&client, "default", name, &["198.51.100.53"])
            .await
            .unwrap();
        // An endpoint on every node, so that no node is ineligible for lack of one.
        apply_endpoints(
            &client,
            "default",
            name,
            53,
            &[
                ("192.0.2.201", Some("node-1"), true, true, false),
                ("192.0.2.202", Some("node-2"), true, true, false),
                ("192.0.2.203", Some("node-3"), true, true, false),
            ],
        )
        .await
        .unwrap();
    }
    lab.start_every_speaker(&[]).unwrap();
    tokio::time::sleep(SETTLE).await;
    let mut seen = BTreeSet::new();
    for _ in 0..5 {
        seen.extend(lab.arp_answers(0, ip).await.unwrap());
    }
    let who: Vec<String> = seen
        .iter()
        .map(|mac| {
            lab.node_by_mac(mac)
                .map_or_else(|| mac.clone(), |n| n.name.clone())
        })
        .collect();
    v.check(
        seen.is_empty(),
        "nobody announces",
        format!("answered by {who:?}"),
    );
    let mut warnings = Vec::new();
    for name in ["svc-a", "svc-b"] {
        warnings.extend(
            typed_events_for(&client, "default", name)
                .await
                .unwrap()
                .into_iter()
                .filter(|(t, _, _)| t == "Warning"),
        );
    }
    println!("C-10 Warning Events: {warnings:?}");
    v.check(
        !warnings.is_empty(),
        "a Warning Event says why",
        "no Warning Event on either Service",
    );
    // Control (the harness is not blind): pool-b deleted and the pool advertised from every
    // node, one node answers. (MetalLB refuses the whole configuration while two pools overlap —
    // its speaker logs "CIDR … overlaps with already defined CIDR" and announces nothing — and a
    // shared IP lives in one pool, whose L2Advertisements select nodes for every Service in it:
    // the case's restriction cannot be expressed in metallb.io objects.)
    metallb::delete_pool(&client, "pool-b").await.unwrap();
    metallb::advertise_pool(&client, "pool", &["198.51.100.0/24"])
        .await
        .unwrap();
    let control = sole_owner(&lab, ip).await;
    v.check(
        control.is_some(),
        "control: with pool-b gone and the pool advertised on every node, one node answers",
        "still no single answer",
    );
    v.finish();
}

/// C-12: responders per interface are independent — node-1 with `eth0` on the LAN, `eth1` IPv6
/// only, `eth2` without an address, a pod veth and `eth3` IPv4 (a second client): the VIP is
/// answered on `eth0` and `eth3` by default, never on `eth1`; with `interfaces: [eth0]` the client
/// on `eth3` gets no reply and `eth0` still does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c12_responders_per_interface() {
    let mut v = Verdicts::new("C-12");
    let ip = Ipv4Addr::new(192, 0, 2, 200);
    let mut lab = Lab::start_implementation(Implementation::MetalLb, 1, 1)
        .await
        .unwrap();
    // node-1: eth0 on the LAN (client 0), eth1 IPv6 only, eth2 no address, a pod veth, eth3 IPv4.
    let (c_eth1, c_eth3) = c12_links(&mut lab, "node-1").unwrap();
    let client = lab.client().await.unwrap();
    lab.advertise_pool("pool", &["192.0.2.200/32"])
        .await
        .unwrap();
    create_service(
        &client,
        &lb_service("default", "svc-a", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    set_ingress(&client, "default", "svc-a", &["192.0.2.200"])
        .await
        .unwrap();
    apply_endpoints(
        &client,
        "default",
        "svc-a",
        80,
        &[("192.0.2.201", Some("node-1"), true, true, false)],
    )
    .await
    .unwrap();
    lab.start_every_speaker(&[]).unwrap();
    let node1 = lab.node("node-1").mac.clone();
    let owner = sole_owner(&lab, ip).await;
    v.check(
        owner.as_deref() == Some("node-1"),
        "eth0 answers (the eth2/lo/veth setup does not prevent it)",
        format!("{owner:?}"),
    );
    let deadline = tokio::time::Instant::now() + SETTLE;
    let eth3 = loop {
        let a = lab.arp_answers(c_eth3, ip).await.unwrap();
        if !a.is_empty() || tokio::time::Instant::now() >= deadline {
            break a;
        }
    };
    v.check(
        eth3.len() == 1 && !eth3.contains(&node1),
        "eth3 answers by default, with eth3's own MAC",
        format!("{eth3:?}"),
    );
    let eth1_seen = lab
        .arp_probe(c_eth1, ip, Duration::from_millis(800))
        .await
        .unwrap();
    v.check(
        !eth1_seen
            .iter()
            .any(|s| matches!(s, Seen::ArpReply { .. } | Seen::GratuitousArp { .. })),
        "no ARP ever leaves eth1 (IPv6 only)",
        format!("{eth1_seen:?}"),
    );
    metallb::apply_l2(
        &client,
        "pool",
        serde_json::json!({ "ipAddressPools": ["pool"], "interfaces": ["eth0"] }),
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    let eth3_after = loop {
        let a = lab.arp_answers(c_eth3, ip).await.unwrap();
        if a.is_empty() || tokio::time::Instant::now() >= deadline {
            break a;
        }
    };
    v.check(
        eth3_after.is_empty(),
        "with interfaces: [eth0] the client on eth3 gets no reply",
        format!("{eth3_after:?}"),
    );
    let eth0_after = lab.arp_answers(0, ip).await.unwrap();
    v.check(
        eth0_after == BTreeSet::from([node1]),
        "with interfaces: [eth0] eth0 still answers",
        format!("{eth0_after:?}"),
    );
    v.finish();
}

/// C-13: a VIP answered for multicast NS, unicast NS to the VIP at the owner's MAC (a router's
/// reachability probe) and unicast NS from a global source, each with a solicited NA carrying
/// the Target Link-Layer Address option.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c13_unicast_neighbor_solicitation() {
    let mut v = Verdicts::new("C-13");
    let vip: Ipv6Addr = "2001:db8:0:8::100".parse().unwrap();
    let (lab, _client) = lab_with_service(
        1,
        &["2001:db8:0:8::/64"],
        "2001:db8:0:8::100",
        "Cluster",
        &[],
    )
    .await;
    let client_ns = lab.clients[0].netns.clone();
    lab.add_address(&client_ns, "2001:db8:0:8::1/64").unwrap();
    let node_ns = lab.node("node-1").netns.clone();
    lab.add_address(&node_ns, "2001:db8:0:8::10/64").unwrap();
    let node_mac = lab.node("node-1").mac.clone();
    let answered = |seen: &[Seen]| {
        seen.iter().any(|s| {
            matches!(s, Seen::NeighborAdvertisement { solicited: true, mac: Some(m), ip, .. }
                if *ip == vip && *m == node_mac)
        })
    };
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut first = false;
    while tokio::time::Instant::now() < deadline {
        let seen = lab
            .ndp_probe(0, vip, None, None, Duration::from_millis(300))
            .await
            .unwrap();
        if answered(&seen) {
            first = true;
            break;
        }
    }
    v.check(first, "the VIP is answered at all (multicast NS)", "no NA");
    let global: Ipv6Addr = "2001:db8:0:8::1".parse().unwrap();
    for (what, unicast, source) in [
        ("multicast NS", None, None),
        (
            "unicast NS from the link-local source",
            Some(node_mac.as_str()),
            None,
        ),
        (
            "unicast NS from a global source",
            Some(node_mac.as_str()),
            Some(global),
        ),
    ] {
        let seen = lab
            .ndp_probe(0, vip, unicast, source, Duration::from_millis(500))
            .await
            .unwrap();
        v.check(
            answered(&seen),
            &format!("{what}: solicited NA with TLLA"),
            format!("{seen:?}"),
        );
    }
    v.finish();
}

/// C-14: the exclusion label (values `""` and `"true"` exclude, `"false"` does not) is never
/// silent; removing it announces with a gratuitous ARP, adding it back withdraws; with
/// `--ignore-exclude-lb` the labelled node announces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c14_exclusion_label_is_never_silent() {
    let mut v = Verdicts::new("C-14");
    let ip = Ipv4Addr::new(198, 51, 100, 14);
    for (value, excludes) in [("", true), ("true", true), ("false", false)] {
        let (lab, client) =
            lab_with_service(1, &["198.51.100.0/24"], "198.51.100.14", "Cluster", &[]).await;
        lab.label_node("node-1", EXCLUDE, Some(value))
            .await
            .unwrap();
        if excludes {
            let (ok, answers) = owner_is(&lab, ip, None).await;
            v.check(
                ok,
                &format!("label {value:?}: nobody announces"),
                format!("{answers:?}"),
            );
            let w = warnings(&client, "svc-a").await;
            v.check(
                !w.is_empty(),
                &format!("label {value:?}: a Warning Event on the Service"),
                "no Warning Event",
            );
            let seen = capture_around(&lab, Duration::from_millis(2500), async {
                lab.label_node("node-1", EXCLUDE, None).await.unwrap();
            })
            .await
            .unwrap();
            let garp = gratuitous_macs(&seen, ip);
            v.check(
                garp == BTreeSet::from([lab.node("node-1").mac.clone()]),
                &format!("label {value:?} removed: gratuitous ARP within 2.5 s"),
                format!("{garp:?}"),
            );
            let (ok, answers) = owner_is(&lab, ip, Some("node-1")).await;
            v.check(
                ok,
                &format!("label {value:?} removed: node-1 announces"),
                format!("{answers:?}"),
            );
            lab.label_node("node-1", EXCLUDE, Some(value))
                .await
                .unwrap();
            let (ok, answers) = owner_is(&lab, ip, None).await;
            v.check(
                ok,
                &format!("label {value:?} back: withdrawn"),
                format!("{answers:?}"),
            );
        } else {
            let (ok, answers) = owner_is(&lab, ip, Some("node-1")).await;
            v.check(
                ok,
                "label \"false\" does not exclude",
                format!("{answers:?}"),
            );
        }
    }
    let (lab, _client) = lab_with_service(
        1,
        &["198.51.100.0/24"],
        "198.51.100.14",
        "Cluster",
        &["--ignore-exclude-lb"],
    )
    .await;
    lab.label_node("node-1", EXCLUDE, Some("")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let (ok, answers) = owner_is(&lab, ip, Some("node-1")).await;
    v.check(
        ok,
        "--ignore-exclude-lb: the labelled node announces",
        format!("{answers:?}"),
    );
    v.finish();
}

/// C-15: (a) the owner's Node gets `NetworkUnavailable=True` → the other node announces, keeps it
/// across the first one's speaker restart, and the IP moves back with a gratuitous ARP when the
/// condition clears; (b) the owner's Node object deleted → the other node announces; (c) the
/// owner's announce interface down → the other node takes over.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c15_node_health_gates_eligibility() {
    let mut v = Verdicts::new("C-15");
    let ip = Ipv4Addr::new(198, 51, 100, 30);
    let (mut lab, client) =
        lab_with_service(2, &["198.51.100.0/24"], "198.51.100.30", "Cluster", &[]).await;
    let a = sole_owner(&lab, ip).await.expect("one owner");
    let b = if a == "node-1" { "node-2" } else { "node-1" }.to_owned();
    let a_ip = lab.node(&a).ip;
    ferrolb_tests::lab::set_node_status(&client, &a, a_ip, true)
        .await
        .unwrap();
    let (ok, answers) = owner_is(&lab, ip, Some(&b)).await;
    v.check(
        ok,
        "(a) NetworkUnavailable=True on the owner: the other node announces",
        format!("{answers:?}"),
    );
    lab.signal_speaker(&a, "TERM").unwrap();
    lab.start_speaker(&a, &[]).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let answers = lab.arp_answers(0, ip).await.unwrap();
    v.check(
        answers == BTreeSet::from([lab.node(&b).mac.clone()]),
        "(a) the other node keeps it across the owner's speaker restart",
        format!("{answers:?}"),
    );
    let seen = capture_around(&lab, Duration::from_millis(2500), async {
        ferrolb_tests::lab::set_node_status(&client, &a, a_ip, false)
            .await
            .unwrap();
    })
    .await
    .unwrap();
    v.check(
        gratuitous_macs(&seen, ip).contains(&lab.node(&a).mac),
        "(a) the condition cleared: it moves back with a gratuitous ARP within 2.5 s",
        format!("{:?}", gratuitous_macs(&seen, ip)),
    );
    let (ok, answers) = owner_is(&lab, ip, Some(&a)).await;
    v.check(
        ok,
        "(a) then the first node alone answers",
        format!("{answers:?}"),
    );
    Api::<Node>::all(client.clone())
        .delete(&a, &Default::default())
        .await
        .unwrap();
    let (ok, answers) = owner_is(&lab, ip, Some(&b)).await;
    v.check(
        ok,
        "(b) owner's Node deleted: the other node announces",
        format!("{answers:?}"),
    );
    ferrolb_tests::lab::create_node(&client, &a, a_ip)
        .await
        .unwrap();
    let back = owner_is(&lab, ip, Some(&a)).await.0;
    if !back {
        v.check(
            false,
            "(c) skipped: the first node did not come back after (b)",
            "",
        );
        v.finish();
        return;
    }
    lab.set_link(&a, "eth0", false).unwrap();
    let (ok, answers) = owner_is(&lab, ip, Some(&b)).await;
    v.check(
        ok,
        "(c) owner's interface down: the other node takes over",
        format!("{answers:?}"),
    );
    v.finish();
}

/// C-16: ETP Local follows the endpoints — (1) the endpoint moves to node-3 (the old one
/// terminating but still serving): the announcement moves there with a gratuitous ARP; (2) no
/// endpoints: nobody announces, with a Warning Event; (3) a ready endpoint without `nodeName`:
/// never silent (a Warning Event); then the same moves with ETP Cluster, scaling to zero included
/// (as ferrolb's test does), never move the announcement.
///
/// Run for the case's `198.51.100.40` and for `198.51.100.41`: MetalLB orders the usable nodes by
/// sha256(`node#IP`), and a terminating-but-serving endpoint keeps node-2 usable
/// (`epslices.EndpointCanServe`), so with `.40` (node-3 sorts first) step (1) passes whatever the
/// rule; `.41` (node-2 sorts first) tests the rule itself. ferrolb's rule (ready endpoints first,
/// serving ones only when none is ready) does not depend on the IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c16_external_traffic_policy_local_follows_endpoints() {
    let mut v = Verdicts::new("C-16");
    for last in [40u8, 41] {
        let ip = Ipv4Addr::new(198, 51, 100, last);
        let (lab, client) =
            lab_with_service(3, &["198.51.100.0/24"], &ip.to_string(), "Local", &[]).await;
        // lab_with_service wrote the slice with node-1; this replaces it with node-2.
        apply_endpoints(
            &client,
            "default",
            "svc-a",
            80,
            &[("192.0.2.200", Some("node-2"), true, true, false)],
        )
        .await
        .unwrap();
        let (ok, answers) = owner_is(&lab, ip, Some("node-2")).await;
        v.check(
            ok,
            &format!("{ip}: the endpoint's node (node-2) announces"),
            format!("{answers:?}"),
        );
        let mut assigned = events(&client, "svc-a").await;
        for _ in 0..20 {
            if !assigned.is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
            assigned = events(&client, "svc-a").await;
        }
        v.check(
            !assigned.is_empty(),
            &format!("{ip}: (harness control) MetalLB's own Events are visible to the query"),
            "no Event at all on the Service",
        );
        let seen = capture_around(&lab, Duration::from_millis(2500), async {
            apply_endpoints(
                &client,
                "default",
                "svc-a",
                80,
                &[
                    ("192.0.2.200", Some("node-2"), false, true, true),
                    ("192.0.2.201", Some("node-3"), true, true, false),
                ],
            )
            .await
            .unwrap();
        })
        .await
        .unwrap();
        let garp = gratuitous_macs(&seen, ip);
        v.check(
            garp == BTreeSet::from([lab.node("node-3").mac.clone()]),
            &format!("{ip} (1): endpoint moved to node-3: gratuitous ARP from node-3 within 2.5 s"),
            format!("{garp:?}"),
        );
        let (ok, answers) = owner_is(&lab, ip, Some("node-3")).await;
        v.check(
            ok,
            &format!("{ip} (1): node-3 alone answers"),
            format!("{answers:?}"),
        );
        apply_endpoints(&client, "default", "svc-a", 80, &[])
            .await
            .unwrap();
        let (ok, answers) = owner_is(&lab, ip, None).await;
        v.check(
            ok,
            &format!("{ip} (2): scaled to zero: nobody announces"),
            format!("{answers:?}"),
        );
        let w = warnings(&client, "svc-a").await;
        v.check(
            !w.is_empty(),
            &format!("{ip} (2): a Warning Event on the Service"),
            "no Warning Event",
        );
        apply_endpoints(
            &client,
            "default",
            "svc-a",
            80,
            &[("192.0.2.202", None, true, true, false)],
        )
        .await
        .unwrap();
        let w = warnings(&client, "svc-a").await;
        v.check(
            !w.is_empty(),
            &format!("{ip} (3): ready endpoint without nodeName: a Warning Event"),
            "no Warning Event",
        );
        if last != 40 {
            continue;
        }
        // ETP Cluster: the same endpoint moves never move the announcement.
        let services: Api<k8s_openapi::api::core::v1::Service> =
            Api::namespaced(client.clone(), "default");
        let patch = serde_json::json!({ "spec": { "externalTrafficPolicy": "Cluster" } });
        services
            .patch(
                "svc-a",
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
        apply_endpoints(
            &client,
            "default",
            "svc-a",
            80,
            &[("192.0.2.200", Some("node-1"), true, true, false)],
        )
        .await
        .unwrap();
        let Some(owner) = sole_owner(&lab, ip).await else {
            v.check(false, "(Cluster) one node announces", "not one MAC");
            continue;
        };
        for eps in [
            vec![("192.0.2.200", Some("node-2"), true, true, false)],
            vec![("192.0.2.201", Some("node-3"), true, true, false)],
            vec![],
        ] {
            apply_endpoints(&client, "default", "svc-a", 80, &eps)
                .await
                .unwrap();
            tokio::time::sleep(Duration::from_secs(2)).await;
            let answers = lab.arp_answers(0, ip).await.unwrap();
            v.check(
                answers == BTreeSet::from([lab.node(&owner).mac.clone()]),
                &format!("(Cluster) endpoints {eps:?}: the announcement stays on {owner}"),
                format!("{answers:?}"),
            );
        }
    }
    v.finish();
}

/// C-11: three owner changes one second apart (the owner excluded by label, then let back), then
/// the speakers restarted one by one: after each change settles, exactly one MAC answers, and the
/// gratuitous ARPs of the change come from that MAC alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c11_losing_ownership_stops_answering_at_once() {
    let mut v = Verdicts::new("C-11");
    let ip = Ipv4Addr::new(198, 51, 100, 11);
    let (mut lab, _client) =
        lab_with_service(3, &["198.51.100.0/24"], "198.51.100.11", "Cluster", &[]).await;
    let mut owner = sole_owner(&lab, ip).await.expect("one owner");
    let mut excluded: Option<String> = None;
    for round in 1..=3 {
        let (node, value) = match excluded.take() {
            None => (owner.clone(), Some("")),
            Some(node) => (node, None),
        };
        let seen = capture_around(&lab, Duration::from_millis(2500), async {
            lab.label_node(&node, EXCLUDE, value).await.unwrap();
        })
        .await
        .unwrap();
        if value.is_some() {
            excluded = Some(node.clone());
        }
        match sole_owner(&lab, ip).await {
            Some(now) => {
                let garp = gratuitous_macs(&seen, ip);
                v.check(
                    garp == BTreeSet::from([lab.node(&now).mac.clone()]),
                    &format!("change {round}: gratuitous ARP from the owner {now}, and only it"),
                    format!("{garp:?}"),
                );
                v.check(
                    excluded.as_deref() != Some(now.as_str()),
                    &format!("change {round}: the excluded node does not answer"),
                    &now,
                );
                owner = now;
            }
            None => v.check(
                false,
                &format!("change {round}: exactly one MAC answers"),
                "not one",
            ),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if let Some(node) = excluded {
        lab.label_node(&node, EXCLUDE, None).await.unwrap();
    }
    for node in ["node-1", "node-2", "node-3"] {
        lab.signal_speaker(node, "TERM").unwrap();
        lab.start_speaker(node, &[]).unwrap();
        let settled = sole_owner(&lab, ip).await.is_some();
        let mut ones = true;
        for _ in 0..3 {
            ones &= lab.arp_answers(0, ip).await.unwrap().len() == 1;
        }
        v.check(
            settled && ones,
            &format!("after restarting {node}'s speaker: exactly one MAC answers"),
            "not one",
        );
    }
    v.finish();
}

/// C-03 (speaker half): a pool deleted while in use, the same steps and checks as ferrolb's run in
/// `tests/tests/speaker_lab.rs` (`ferrolb_tests::lab::case_c03`). MetalLB's speaker refuses a configuration under which an
/// IP it serves is in no pool (`SetConfig` in `speaker/main.go`: "service has no configuration
/// under new config", "new configuration rejected") and keeps the old one while it retries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c03_speaker_stops_announcing_a_deleted_pool() {
    case_c03::speaker_half(Implementation::MetalLb, &[])
        .await
        .unwrap()
        .finish();
}
