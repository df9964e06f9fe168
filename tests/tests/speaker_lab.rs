//! Speaker cases C-10 … C-16 (`../shared/cases.md`) in the network-namespace lab: real speakers in
//! node namespaces, a real API server, real ARP frames on a bridge. Service status is written by
//! the test as a controller would; the speaker reads nothing else about allocation.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::Duration;

use ferrolb_crds::L2AdvertisementSpec;
use ferrolb_crds::v1beta1::LabelSelector;
use ferrolb_tests::lab::http_client::unix_us;
use ferrolb_tests::lab::scenario::{
    c12_links, capture_around, events_for, expected_owner, gratuitous_macs, metric_value,
    node_names as names,
};
use ferrolb_tests::lab::{Implementation, Lab, Seen, case_c03};
use ferrolb_tests::objects::{
    announced_service, apply_l2, create_pool, create_service, lb_service, set_ingress,
};
use k8s_openapi::api::core::v1::Service;
use kube::Api;

const SETTLE: Duration = Duration::from_secs(20);

fn node_selector(node: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [("kubernetes.io/hostname".to_string(), node.to_string())].into(),
        ..Default::default()
    }
}

async fn wait_for_event(
    client: &kube::Client,
    namespace: &str,
    name: &str,
    reason: &str,
    contains: &str,
) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let events = events_for(client, namespace, name).await.unwrap();
        if events
            .iter()
            .any(|(r, n)| r == reason && n.contains(contains))
            || tokio::time::Instant::now() >= deadline
        {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_one_ip_one_announcer() {
    let mut lab = Lab::start(3, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    create_pool(&client, "pool", &["198.51.100.0/24"])
        .await
        .unwrap();
    apply_l2(&client, "all", L2AdvertisementSpec::default())
        .await
        .unwrap();
    let ip = Ipv4Addr::new(198, 51, 100, 53);
    for (name, proto) in [("svc-a", "TCP"), ("svc-b", "UDP")] {
        create_service(
            &client,
            &lb_service("default", name, &[(proto, 53)], "Cluster"),
        )
        .await
        .unwrap();
        set_ingress(&client, "default", name, &["198.51.100.53"])
            .await
            .unwrap();
    }
    for n in ["node-1", "node-2", "node-3"] {
        lab.start_speaker(n, &[]).unwrap();
    }
    let owner = expected_owner(ip, &["node-1", "node-2", "node-3"]);
    let answers = lab
        .wait_for_owner(0, ip, Some(&owner), SETTLE)
        .await
        .unwrap();
    assert_eq!(
        answers,
        BTreeSet::from([lab.node(&owner).mac.clone()]),
        "logs:\n{}",
        lab.speaker_log(&owner, 30)
    );
    // Steady state: every probe gets exactly one answer, always the same MAC.
    for _ in 0..5 {
        let answers = lab.arp_answers(0, ip).await.unwrap();
        assert_eq!(answers, BTreeSet::from([lab.node(&owner).mac.clone()]));
    }
    // S9: health endpoints and metrics of the owner.
    assert_eq!(lab.speaker_http(&owner, "/livez").await.unwrap().0, 200);
    assert_eq!(lab.speaker_http(&owner, "/readyz").await.unwrap().0, 200);
    let (code, metrics) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    assert_eq!(code, 200);
    let value = |name: &str| -> f64 {
        metrics
            .lines()
            // The whole metric name: `ferrolb_speaker_members` must not match
            // `ferrolb_speaker_membership_receive_buffer_bytes`.
            .find(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .and_then(|l| l.split_whitespace().last())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing in:\n{metrics}"))
    };
    assert!(
        value("ferrolb_speaker_arp_replies_sent_total") >= 5.0,
        "{metrics}"
    );
    assert!(value("ferrolb_speaker_arp_requests_received_total") >= 5.0);
    assert!(value("ferrolb_speaker_gratuitous_arp_sent_total") >= 1.0);
    assert_eq!(value("ferrolb_speaker_owned_ips"), 1.0);
    assert_eq!(value("ferrolb_speaker_members"), 3.0);
    let events = wait_for_event(
        &client,
        "default",
        "svc-a",
        "AnnouncingIP",
        &format!("announcing 198.51.100.53 from {owner} on eth0"),
    )
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "AnnouncingIP" && n.contains(&owner)),
        "no AnnouncingIP event: {events:?}"
    );

    // Two overlapping pools, each Service naming its own, each pool advertised from another node:
    // the Services on the shared IP are restricted to disjoint nodes → nobody announces, and a
    // Warning says why.
    create_pool(&client, "pool-b", &["198.51.100.0/26"])
        .await
        .unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for (svc, pool) in [("svc-a", "pool"), ("svc-b", "pool-b")] {
        let patch = serde_json::json!({ "metadata": { "annotations": { "ferrolb.io/address-pool": pool } } });
        services
            .patch(
                svc,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await
            .unwrap();
    }
    kube::Api::<ferrolb_crds::L2Advertisement>::all(client.clone())
        .delete("all", &Default::default())
        .await
        .unwrap();
    apply_l2(
        &client,
        "pool-on-node-1",
        L2AdvertisementSpec {
            ip_address_pools: vec!["pool".into()],
            node_selectors: vec![node_selector("node-1")],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    apply_l2(
        &client,
        "pool-b-on-node-2",
        L2AdvertisementSpec {
            ip_address_pools: vec!["pool-b".into()],
            node_selectors: vec![node_selector("node-2")],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let answers = lab.wait_for_owner(0, ip, None, SETTLE).await.unwrap();
    assert!(
        answers.is_empty(),
        "nobody may announce, but {answers:?} answered"
    );
    let events = wait_for_event(
        &client,
        "default",
        "svc-a",
        "NoEligibleNode",
        "198.51.100.53",
    )
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "NoEligibleNode" && n.contains("198.51.100.53")),
        "no NoEligibleNode event: {events:?}"
    );
    // Quiet from now on: probes keep getting no answer.
    let seen = lab
        .arp_probe(0, ip, Duration::from_millis(500))
        .await
        .unwrap();
    assert!(
        !seen.iter().any(|s| matches!(s, Seen::ArpReply { .. })),
        "{seen:?}"
    );
}

/// A lab with `nodes` nodes and one client, a pool `198.51.100.0/24` advertised everywhere, Service
/// `svc-a` (TCP 80, given ETP) holding `ip`, and speakers started with `speaker_args`.
async fn lab_with_service(
    nodes: usize,
    ip: &str,
    etp: &str,
    speaker_args: &[&str],
) -> (Lab, kube::Client) {
    lab_with_service_and_clients(nodes, 1, ip, etp, speaker_args).await
}

/// [`lab_with_service`] with `clients` clients.
async fn lab_with_service_and_clients(
    nodes: usize,
    clients: usize,
    ip: &str,
    etp: &str,
    speaker_args: &[&str],
) -> (Lab, kube::Client) {
    let mut lab = Lab::start(nodes, clients).await.expect("lab");
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.0/24", "2001:db8:0:8::/64"],
        "svc-a",
        etp,
        &[ip],
    )
    .await
    .unwrap();
    for i in 1..=nodes {
        lab.start_speaker(&format!("node-{i}"), speaker_args)
            .unwrap();
    }
    (lab, client)
}

const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// C-03's speaker half: `pool-b` deleted while `svc-b` and `svc-c`'s status still holds its
/// addresses — nobody answers ARP for them any more, `pool-a`'s address still is
/// (`ferrolb_tests::lab::case_c03`; the same function runs against MetalLB in
/// `tests/tests/metallb_cases.rs`). The speaker's rule: an IP in no `IPAddressPool` is never
/// announced (`speaker/core/src/view.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c03_speaker_stops_announcing_a_deleted_pool() {
    case_c03::speaker_half(Implementation::Ferrolb, &[])
        .await
        .unwrap()
        .finish();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c11_losing_ownership_stops_answering_at_once() {
    let ip = Ipv4Addr::new(198, 51, 100, 11);
    let (mut lab, _client) = lab_with_service(3, "198.51.100.11", "Cluster", &[]).await;
    let all = names(3);
    let all_refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let first = expected_owner(ip, &all_refs);
    let answers = lab
        .wait_for_owner(0, ip, Some(&first), SETTLE)
        .await
        .unwrap();
    assert_eq!(
        answers.len(),
        1,
        "{answers:?}\n{}",
        lab.speaker_log(&first, 20)
    );

    // Three owner changes one second apart: exclude the owner, then let it back.
    let mut excluded: Option<String> = None;
    for round in 0..3 {
        let (expect, change_label): (String, (String, Option<&str>)) = match &excluded {
            None => {
                let owner = expected_owner(ip, &all_refs);
                let rest: Vec<&str> = all_refs.iter().copied().filter(|n| *n != owner).collect();
                (expected_owner(ip, &rest), (owner, Some("")))
            }
            Some(node) => (expected_owner(ip, &all_refs), (node.clone(), None)),
        };
        // When the label is written: the owner's own initial burst (gratuitous ARPs at 0, 0.5, 2
        // and 5 s after its gain) may still be running when the capture opens, and what it sends
        // before the change is no loss of ownership.
        let mut changed_us = 0;
        let seen = capture_around(&lab, Duration::from_millis(2500), async {
            changed_us = unix_us();
            lab.label_node(&change_label.0, EXCLUDE, change_label.1)
                .await
                .unwrap();
        })
        .await
        .unwrap();
        let seen: Vec<_> = seen
            .into_iter()
            .filter(|s| s.unix_us() >= changed_us)
            .collect();
        excluded = if change_label.1.is_some() {
            Some(change_label.0.clone())
        } else {
            None
        };
        let answers = lab
            .wait_for_owner(0, ip, Some(&expect), SETTLE)
            .await
            .unwrap();
        assert_eq!(
            answers,
            BTreeSet::from([lab.node(&expect).mac.clone()]),
            "round {round}"
        );
        let garp = gratuitous_macs(&seen, ip);
        assert_eq!(
            garp,
            BTreeSet::from([lab.node(&expect).mac.clone()]),
            "round {round}: gratuitous ARP only from the new owner {expect}"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    // Restart the speakers one by one: after each settles, exactly one MAC answers, the owner's.
    if let Some(node) = excluded {
        lab.label_node(&node, EXCLUDE, None).await.unwrap();
    }
    for node in &all {
        lab.signal_speaker(node, "TERM").unwrap();
        lab.start_speaker(node, &[]).unwrap();
        let owner = expected_owner(ip, &all_refs);
        let answers = lab
            .wait_for_owner(0, ip, Some(&owner), SETTLE)
            .await
            .unwrap();
        assert_eq!(
            answers,
            BTreeSet::from([lab.node(&owner).mac.clone()]),
            "after restarting {node}"
        );
        for _ in 0..3 {
            assert_eq!(
                lab.arp_answers(0, ip).await.unwrap().len(),
                1,
                "after restarting {node}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c14_exclusion_label_is_never_silent() {
    let ip = Ipv4Addr::new(198, 51, 100, 14);
    // Under --exclude-lb-label=honour (MetalLB's rule): the label on the only node silences it.
    for (value, excludes) in [("", true), ("true", true), ("false", false)] {
        let (lab, client) = lab_with_service(
            1,
            "198.51.100.14",
            "Cluster",
            &["--exclude-lb-label=honour"],
        )
        .await;
        lab.label_node("node-1", EXCLUDE, Some(value))
            .await
            .unwrap();
        if excludes {
            let answers = lab.wait_for_owner(0, ip, None, SETTLE).await.unwrap();
            assert!(answers.is_empty(), "label {value:?}: {answers:?}");
            let events = wait_for_event(
                &client,
                "default",
                "svc-a",
                "NoEligibleNode",
                "excluded by label",
            )
            .await;
            assert!(
                events
                    .iter()
                    .any(|(r, n)| r == "NoEligibleNode" && n.contains("excluded by label")),
                "label {value:?}: {events:?}"
            );
            // Removing the label makes it announce, with gratuitous ARP.
            let seen = capture_around(&lab, Duration::from_millis(2500), async {
                lab.label_node("node-1", EXCLUDE, None).await.unwrap();
            })
            .await
            .unwrap();
            assert_eq!(
                gratuitous_macs(&seen, ip),
                BTreeSet::from([lab.node("node-1").mac.clone()]),
                "label {value:?}"
            );
            let answers = lab
                .wait_for_owner(0, ip, Some("node-1"), SETTLE)
                .await
                .unwrap();
            assert_eq!(answers.len(), 1);
            // Adding it back withdraws.
            lab.label_node("node-1", EXCLUDE, Some(value))
                .await
                .unwrap();
            assert!(
                lab.wait_for_owner(0, ip, None, SETTLE)
                    .await
                    .unwrap()
                    .is_empty()
            );
        } else {
            let answers = lab
                .wait_for_owner(0, ip, Some("node-1"), SETTLE)
                .await
                .unwrap();
            assert_eq!(answers.len(), 1, "\"false\" does not exclude");
        }
    }
    // Under the default --exclude-lb-label=auto (issue #28 item 1) a label every Node carries —
    // the only node of a minikube or kind cluster — is set aside: the node keeps answering, and
    // the Service says why in a Warning Event. (`ignore`, and its older spelling
    // `--ignore-exclude-lb`, are unit-tested: the same clause, never in force.)
    let (lab, client) = lab_with_service(1, "198.51.100.14", "Cluster", &[]).await;
    lab.label_node("node-1", EXCLUDE, Some("")).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let answers = lab
        .wait_for_owner(0, ip, Some("node-1"), SETTLE)
        .await
        .unwrap();
    assert_eq!(answers.len(), 1, "auto: the only node carries the label");
    let events = wait_for_event(
        &client,
        "default",
        "svc-a",
        "ExclusionLabelIgnored",
        "every Node carries",
    )
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "ExclusionLabelIgnored" && n.contains("198.51.100.14")),
        "{events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c15_node_health_gates_eligibility() {
    let ip = Ipv4Addr::new(198, 51, 100, 30);
    let (mut lab, client) = lab_with_service(2, "198.51.100.30", "Cluster", &[]).await;
    let a = expected_owner(ip, &["node-1", "node-2"]);
    let b = if a == "node-1" {
        "node-2".to_string()
    } else {
        "node-1".to_string()
    };
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&a), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );

    // (a) Restart A's speaker while its Node has NetworkUnavailable=True: B keeps the IP until the
    // condition clears, then it moves back with gratuitous ARP.
    let a_ip = lab.node(&a).ip;
    ferrolb_tests::lab::set_node_status(&client, &a, a_ip, true)
        .await
        .unwrap();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&b), SETTLE).await.unwrap(),
        BTreeSet::from([lab.node(&b).mac.clone()])
    );
    lab.signal_speaker(&a, "TERM").unwrap();
    lab.start_speaker(&a, &[]).unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        lab.arp_answers(0, ip).await.unwrap(),
        BTreeSet::from([lab.node(&b).mac.clone()]),
        "B keeps the IP"
    );
    let seen = capture_around(&lab, Duration::from_millis(2500), async {
        ferrolb_tests::lab::set_node_status(&client, &a, a_ip, false)
            .await
            .unwrap();
    })
    .await
    .unwrap();
    assert!(
        gratuitous_macs(&seen, ip).contains(&lab.node(&a).mac),
        "A re-announces: {seen:?}"
    );
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&a), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );

    // (b) Delete A's Node object: B announces.
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .delete(&a, &Default::default())
        .await
        .unwrap();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&b), SETTLE).await.unwrap(),
        BTreeSet::from([lab.node(&b).mac.clone()])
    );
    ferrolb_tests::lab::create_node(&client, &a, a_ip)
        .await
        .unwrap();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&a), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );

    // (c) Take A's announce interface down while the rest of the node stays up: B takes over.
    lab.set_link(&a, "eth0", false).unwrap();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&b), SETTLE).await.unwrap(),
        BTreeSet::from([lab.node(&b).mac.clone()])
    );
    lab.set_link(&a, "eth0", true).unwrap();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&a), SETTLE)
            .await
            .unwrap()
            .len(),
        1,
        "{}",
        lab.speaker_log(&a, 30)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c16_external_traffic_policy_local_follows_endpoints() {
    use ferrolb_tests::objects::apply_endpoints;
    let ip = Ipv4Addr::new(198, 51, 100, 40);
    let (lab, client) = lab_with_service(3, "198.51.100.40", "Local", &[]).await;
    apply_endpoints(
        &client,
        "default",
        "svc-a",
        8080,
        &[("192.0.2.200", Some("node-2"), true, true, false)],
    )
    .await
    .unwrap();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some("node-2"), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );

    // (1) The endpoint moves to node-3 (old one terminating, new one ready).
    let seen = capture_around(&lab, Duration::from_millis(2500), async {
        apply_endpoints(
            &client,
            "default",
            "svc-a",
            8080,
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
    assert_eq!(
        gratuitous_macs(&seen, ip),
        BTreeSet::from([lab.node("node-3").mac.clone()])
    );
    assert_eq!(
        lab.wait_for_owner(0, ip, Some("node-3"), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );

    // (2) Scale to zero: nobody announces, with a Warning.
    apply_endpoints(&client, "default", "svc-a", 8080, &[])
        .await
        .unwrap();
    assert!(
        lab.wait_for_owner(0, ip, None, SETTLE)
            .await
            .unwrap()
            .is_empty()
    );
    let events = wait_for_event(
        &client,
        "default",
        "svc-a",
        "NoEligibleNode",
        "198.51.100.40",
    )
    .await;
    assert!(
        events.iter().any(|(r, _)| r == "NoEligibleNode"),
        "{events:?}"
    );

    // (3) A ready endpoint without nodeName: never silent (documented: it makes no node eligible).
    apply_endpoints(
        &client,
        "default",
        "svc-a",
        8080,
        &[("192.0.2.202", None, true, true, false)],
    )
    .await
    .unwrap();
    let events = wait_for_event(
        &client,
        "default",
        "svc-a",
        "EndpointWarning",
        "no nodeName",
    )
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "EndpointWarning" && n.contains("no nodeName")),
        "{events:?}"
    );
    assert!(lab.arp_answers(0, ip).await.unwrap().is_empty());

    // The same endpoint moves with ETP Cluster never move the announcement.
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let patch = serde_json::json!({ "spec": { "externalTrafficPolicy": "Cluster" } });
    services
        .patch(
            "svc-a",
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&patch),
        )
        .await
        .unwrap();
    let owner = expected_owner(ip, &["node-1", "node-2", "node-3"]);
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&owner), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );
    for eps in [
        vec![("192.0.2.200", Some("node-2"), true, true, false)],
        vec![("192.0.2.201", Some("node-3"), true, true, false)],
        vec![],
    ] {
        apply_endpoints(&client, "default", "svc-a", 8080, &eps)
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert_eq!(
            lab.arp_answers(0, ip).await.unwrap(),
            BTreeSet::from([lab.node(&owner).mac.clone()]),
            "ETP Cluster with {eps:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c13_unicast_neighbor_solicitation() {
    let vip: std::net::Ipv6Addr = "2001:db8:0:8::100".parse().unwrap();
    let (lab, _client) = lab_with_service(1, "2001:db8:0:8::100", "Cluster", &[]).await;
    let client_ns = lab.clients[0].netns.clone();
    lab.add_address(&client_ns, "2001:db8:0:8::1/64").unwrap();
    // IPv6 in use on the node's link: the default NDP interface set needs a global address
    // besides the link-local one (issue #10).
    let node_ns = lab.node("node-1").netns.clone();
    lab.add_address(&node_ns, "2001:db8:0:8::10/64").unwrap();
    let node_mac = lab.node("node-1").mac.clone();
    let answered = |seen: &[Seen]| {
        seen.iter().any(|s| {
            matches!(s, Seen::NeighborAdvertisement { solicited: true, override_flag: true, mac: Some(m), ip, .. }
                if *ip == vip && *m == node_mac)
        })
    };
    // Wait until node-1 announces (its link-local must pass DAD first).
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let seen = lab
            .ndp_probe(0, vip, None, None, Duration::from_millis(300))
            .await
            .unwrap();
        if answered(&seen) {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no NA for {vip}: {seen:?}\n{}",
            lab.speaker_log("node-1", 30)
        );
    }
    // (a) multicast to the solicited-node group, (b) unicast to the VIP at node-1's MAC from the
    // link-local source, (c) unicast from a global source.
    let global: std::net::Ipv6Addr = "2001:db8:0:8::1".parse().unwrap();
    for (what, unicast, source) in [
        ("multicast", None, None),
        ("unicast link-local", Some(node_mac.as_str()), None),
        ("unicast global", Some(node_mac.as_str()), Some(global)),
    ] {
        let seen = lab
            .ndp_probe(0, vip, unicast, source, Duration::from_millis(500))
            .await
            .unwrap();
        assert!(
            answered(&seen),
            "{what}: no solicited NA with TLLA {node_mac}: {seen:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c12_responders_per_interface_are_independent() {
    let ip = Ipv4Addr::new(192, 0, 2, 200);
    let mut lab = Lab::start(1, 1).await.expect("lab");
    // node-1: eth0 on the LAN (client 0), eth1 IPv6 only, eth2 no address, a pod veth, eth3 IPv4.
    let (c_eth1, c_eth3) = c12_links(&mut lab, "node-1").unwrap();
    let client = lab.client().await.unwrap();
    create_pool(&client, "pool", &["192.0.2.200/32"])
        .await
        .unwrap();
    apply_l2(&client, "all", L2AdvertisementSpec::default())
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
    lab.start_speaker("node-1", &[]).unwrap();
    let node1 = lab.node("node-1").mac.clone();

    // Default interface set: answered on eth0 and eth3; never on eth1 (no IPv4); the eth2/lo/veth
    // setup never prevents eth0 from working.
    assert_eq!(
        lab.wait_for_owner(0, ip, Some("node-1"), SETTLE)
            .await
            .unwrap(),
        BTreeSet::from([node1.clone()]),
        "{}",
        lab.speaker_log("node-1", 30)
    );
    let deadline = tokio::time::Instant::now() + SETTLE;
    let eth3_answers = loop {
        let a = lab.arp_answers(c_eth3, ip).await.unwrap();
        if !a.is_empty() || tokio::time::Instant::now() >= deadline {
            break a;
        }
    };
    assert_eq!(eth3_answers.len(), 1, "eth3 answers with its own MAC");
    assert!(
        !eth3_answers.contains(&node1),
        "eth3 answers with eth3's MAC, not eth0's"
    );
    let eth1_seen = lab
        .arp_probe(c_eth1, ip, Duration::from_millis(800))
        .await
        .unwrap();
    assert!(
        !eth1_seen
            .iter()
            .any(|s| matches!(s, Seen::ArpReply { .. } | Seen::GratuitousArp { .. })),
        "no ARP ever leaves eth1: {eth1_seen:?}"
    );

    // interfaces: [eth0] → the client on eth3 gets no reply; eth0 still answers.
    apply_l2(
        &client,
        "all",
        L2AdvertisementSpec {
            interfaces: vec!["eth0".into()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let a = lab.arp_answers(c_eth3, ip).await.unwrap();
        if a.is_empty() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "eth3 still answers with interfaces: [eth0]: {a:?}"
        );
    }
    assert_eq!(
        lab.arp_answers(0, ip).await.unwrap(),
        BTreeSet::from([node1])
    );
}

/// Issue #32 G5.4 on real speakers: node-3's speaker runs another timing profile (`safe`
/// beside two `fast` ones). The others refuse it and it refuses them: the IP whose rendezvous
/// owner over all three would be node-3 is answered by the owner over node-1 and node-2 alone,
/// node-1 writes a Warning Event `MembershipMismatch` about its Node naming node-3 and the
/// reason, and the gauge `membership_refused_peers{reason="timings"}` is 1 on node-1 and 2 on
/// node-3. Without the hello node-3 would be counted alive and planned the IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g5_4_a_speaker_on_another_timing_profile_is_refused_and_reported() {
    let all = ["node-1", "node-2", "node-3"];
    let ip = (10..=250)
        .map(|last| Ipv4Addr::new(198, 51, 100, last))
        .find(|ip| expected_owner(*ip, &all) == "node-3")
        .unwrap();
    let mut lab = Lab::start(3, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.0/24"],
        "svc-a",
        "Cluster",
        &[&ip.to_string()],
    )
    .await
    .unwrap();
    lab.start_speaker("node-1", &[]).unwrap();
    lab.start_speaker("node-2", &[]).unwrap();
    lab.start_speaker("node-3", &["--timing-profile", "safe"])
        .unwrap();
    let owner = expected_owner(ip, &["node-1", "node-2"]);
    let answers = lab
        .wait_for_owner(0, ip, Some(&owner), SETTLE)
        .await
        .unwrap();
    assert_eq!(answers, BTreeSet::from([lab.node(&owner).mac.clone()]));
    let events = wait_for_event(
        &client,
        "default",
        "node-1",
        "MembershipMismatch",
        "node-3 (timings",
    )
    .await;
    assert!(
        events
            .iter()
            .any(|(r, n)| r == "MembershipMismatch" && n.contains("node-3 (timings")),
        "{events:?}\n{}",
        lab.speaker_log("node-1", 30)
    );
    let series = "ferrolb_speaker_membership_refused_peers{reason=\"timings\"}";
    let (_, m1) = lab.speaker_http("node-1", "/metrics").await.unwrap();
    assert_eq!(metric_value(&m1, series), Some(1.0), "{m1}");
    let (_, m3) = lab.speaker_http("node-3", "/metrics").await.unwrap();
    assert_eq!(metric_value(&m3, series), Some(2.0), "{m3}");
    // Steady: the refused node never answers.
    for _ in 0..5 {
        let answers = lab.arp_answers(0, ip).await.unwrap();
        assert_eq!(answers, BTreeSet::from([lab.node(&owner).mac.clone()]));
    }
}

/// Sets `spec.unschedulable` of Node `node` as `kubectl cordon` / `uncordon` does.
async fn cordon(client: &kube::Client, node: &str, on: bool) {
    use kube::api::{Patch, PatchParams};
    let patch = serde_json::json!({ "spec": { "unschedulable": on } });
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
}

/// One move of an IP as client 0 saw it, probing every ~50 ms ([`probe_move`]).
struct Move {
    /// When the new owner first answered, counted from the API write.
    first: Option<Duration>,
    /// The longest the IP went unanswered: from the start of the last probe the old owner
    /// answered (or the API write) to the end of the first probe the new owner answered. An
    /// over-estimate by up to two probes.
    silent: Duration,
    /// Probes sent.
    probes: usize,
}

/// Probes `ip` from client 0 every ~50 ms for `span` after `changed` and returns the move from
/// `from` to `to`; panics on any probe answered by two MACs, by a MAC other than `from`'s or
/// `to`'s, or, once `to` has answered, by anyone but `to` alone (the move is final: no
/// flapping back, no silence after it).
async fn probe_move(
    lab: &Lab,
    ip: Ipv4Addr,
    from: &str,
    to: &str,
    changed: std::time::Instant,
    span: Duration,
) -> Move {
    let (from_mac, to_mac) = (lab.node(from).mac.clone(), lab.node(to).mac.clone());
    let (mut first, mut last_from, mut probes) = (None, Duration::ZERO, 0);
    while changed.elapsed() < span {
        let sent = changed.elapsed();
        let seen = lab
            .arp_probe(0, ip, Duration::from_millis(50))
            .await
            .unwrap();
        probes += 1;
        let who: BTreeSet<String> = seen
            .iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == std::net::IpAddr::V4(ip))
            .map(|s| s.mac().to_owned())
            .collect();
        let at = changed.elapsed();
        assert!(who.len() <= 1, "two answerers {who:?} at {at:?}");
        assert!(
            who.iter().all(|m| *m == from_mac || *m == to_mac),
            "{who:?} at {at:?}: neither {from} nor {to}"
        );
        if first.is_some() {
            assert_eq!(
                who,
                BTreeSet::from([to_mac.clone()]),
                "after {to} answered, at {at:?}"
            );
        } else if who.contains(&to_mac) {
            first = Some(at);
        } else if who.contains(&from_mac) {
            last_from = sent;
        }
    }
    Move {
        first,
        silent: first.map_or(span, |f| f.saturating_sub(last_from)),
        probes,
    }
}

/// Issue #29 O3 on real frames: `kubectl cordon` of the owner moves its IP to the rendezvous
/// owner of the uncordoned nodes and `kubectl uncordon` moves it back, with no probe answered
/// by two nodes and the IP unanswered no longer than the documented window (the gainer's watch
/// delay + W, W = 300 ms with `fast`: asserted under 1 s, allowing 500 ms of watch delay and
/// two probes of granularity); on a one-node cluster the cordoned node keeps answering every
/// probe (docs/operations.md, "Cordon and drain"). Without the rule the owner keeps the IP and
/// the first move never happens (`o3_with_ignore_cordon_a_cordoned_owner_keeps_its_ip`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_cordon_moves_the_owners_ip_and_uncordon_brings_it_back() {
    const SILENCE: Duration = Duration::from_millis(1_000);
    let ip = Ipv4Addr::new(198, 51, 100, 29);
    let (lab, client) = lab_with_service(3, "198.51.100.29", "Cluster", &[]).await;
    let all = names(3);
    let all_refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let owner = expected_owner(ip, &all_refs);
    let rest: Vec<&str> = all_refs.iter().copied().filter(|n| *n != owner).collect();
    let successor = expected_owner(ip, &rest);
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&owner), SETTLE)
            .await
            .unwrap(),
        BTreeSet::from([lab.node(&owner).mac.clone()])
    );
    for (on, from, to) in [(true, &owner, &successor), (false, &successor, &owner)] {
        let changed = std::time::Instant::now();
        cordon(&client, &owner, on).await;
        let m = probe_move(&lab, ip, from, to, changed, Duration::from_secs(4)).await;
        let took = m.first.unwrap_or_else(|| {
            panic!(
                "{to} never answered (cordon {on}):\n{}\n{}",
                lab.speaker_log(from, 20),
                lab.speaker_log(to, 20)
            )
        });
        eprintln!(
            "O3: cordon={on}: {to} answered {took:?} after the API write, unanswered for at most {:?}; {} probes, none answered twice",
            m.silent, m.probes
        );
        assert!(
            m.silent <= SILENCE,
            "cordon={on}: unanswered for {:?}",
            m.silent
        );
    }

    drop((lab, client));

    // One node, cordoned: it keeps answering every probe.
    let (lab, client) = lab_with_service(1, "198.51.100.29", "Cluster", &[]).await;
    assert_eq!(
        lab.wait_for_owner(0, ip, Some("node-1"), SETTLE)
            .await
            .unwrap()
            .len(),
        1
    );
    cordon(&client, "node-1", true).await;
    let mac = lab.node("node-1").mac.clone();
    for k in 0..10 {
        assert_eq!(
            lab.arp_answers(0, ip).await.unwrap(),
            BTreeSet::from([mac.clone()]),
            "probe {k} after cordoning the only node"
        );
    }
}

/// Issue #29 O3, the setting off: with `--ignore-cordon` a cordoned owner keeps its IP, alone,
/// for every probe of 3 s after the cordon (the moves above come from the rule, not from
/// anything else the cordon does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o3_with_ignore_cordon_a_cordoned_owner_keeps_its_ip() {
    let ip = Ipv4Addr::new(198, 51, 100, 29);
    let (lab, client) = lab_with_service(3, "198.51.100.29", "Cluster", &["--ignore-cordon"]).await;
    let all = names(3);
    let all_refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let owner = expected_owner(ip, &all_refs);
    let mac = lab.node(&owner).mac.clone();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&owner), SETTLE)
            .await
            .unwrap(),
        BTreeSet::from([mac.clone()])
    );
    let changed = std::time::Instant::now();
    cordon(&client, &owner, true).await;
    while changed.elapsed() < Duration::from_secs(3) {
        let seen = lab
            .arp_probe(0, ip, Duration::from_millis(50))
            .await
            .unwrap();
        let who: BTreeSet<String> = seen
            .iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == std::net::IpAddr::V4(ip))
            .map(|s| s.mac().to_owned())
            .collect();
        assert_eq!(
            who,
            BTreeSet::from([mac.clone()]),
            "at {:?}",
            changed.elapsed()
        );
    }
}

/// The client's neighbour entry for `ip` in namespace `netns`: its link-layer address, if any.
fn neighbour_mac(lab: &Lab, netns: &str, ip: Ipv4Addr) -> Option<String> {
    let out = lab
        .exec(
            netns,
            "ip",
            &["neigh", "show", &ip.to_string(), "dev", "eth0"],
        )
        .unwrap();
    let words: Vec<&str> = out.split_whitespace().collect();
    words
        .iter()
        .position(|w| *w == "lladdr")
        .and_then(|k| words.get(k + 1))
        .map(|m| m.to_lowercase())
}

/// Issue #29 O6 on real frames: a node replaced under the same name, twice — with the same
/// address, then with a new one. Each time the owner's machine dies (SIGKILL of its speaker)
/// and its Node is deleted; the IP moves to the successor. The machine comes back with a new
/// NIC — a new MAC — and registers the same Node name again (what kubelet does; the second
/// time with a new InternalIP), and its speaker starts: as the rendezvous owner again, it takes
/// the IP back. From then on only the new MAC answers, nothing on the LAN carries the old MAC
/// (no reply, no gratuitous ARP), and a client that last talked to the old machine — its
/// neighbour entry still holding the old MAC, and sending nothing — moves to the new MAC from
/// the new owner's gratuitous ARPs alone. (The netns lab, not the real-node lab: what is under
/// test is the speakers' handling of the name's new identity; kubelet's part is the Node
/// object the test writes.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn o6_a_node_replaced_under_the_same_name_answers_from_its_new_mac() {
    let ip = Ipv4Addr::new(198, 51, 100, 36);
    let (mut lab, client) =
        lab_with_service_and_clients(3, 2, "198.51.100.36", "Cluster", &[]).await;
    let all = names(3);
    let all_refs: Vec<&str> = all.iter().map(String::as_str).collect();
    let owner = expected_owner(ip, &all_refs);
    let rest: Vec<&str> = all_refs.iter().copied().filter(|n| *n != owner).collect();
    let successor = expected_owner(ip, &rest);
    let successor_mac = lab.node(&successor).mac.clone();
    let netns = lab.node(&owner).netns.clone();
    let first_ip = lab.node(&owner).ip;
    let mut old_mac = lab.node(&owner).mac.clone();
    assert_eq!(
        lab.wait_for_owner(0, ip, Some(&owner), SETTLE)
            .await
            .unwrap(),
        BTreeSet::from([old_mac.clone()])
    );
    let quiet = lab.client_netns(1).unwrap();

    let replacements = [
        ("02:fe:00:00:06:01", first_ip),
        ("02:fe:00:00:06:02", Ipv4Addr::new(192, 0, 2, 61)),
    ];
    let mut node_ip = first_ip;
    for (new_mac, new_ip) in replacements {
        let round = format!("replacement with MAC {new_mac}, address {new_ip}");
        // Client 1 last talked to the old machine; it sends nothing from here on.
        lab.exec(
            &quiet,
            "ip",
            &[
                "neigh",
                "replace",
                &ip.to_string(),
                "lladdr",
                &old_mac,
                "dev",
                "eth0",
                "nud",
                "stale",
            ],
        )
        .unwrap();
        assert_eq!(neighbour_mac(&lab, &quiet, ip), Some(old_mac.clone()));

        // The machine dies and its Node is deleted: the IP moves to the successor.
        lab.signal_speaker(&owner, "KILL").unwrap();
        Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
            .delete(&owner, &Default::default())
            .await
            .unwrap();
        let deadline = std::time::Instant::now() + SETTLE;
        while lab.arp_answers(0, ip).await.unwrap() != BTreeSet::from([successor_mac.clone()]) {
            assert!(
                std::time::Instant::now() < deadline,
                "{round}: the successor {successor} never answered alone\n{}",
                lab.speaker_log(&successor, 20)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // Its replacement: a new NIC (new MAC), the same name, the same or a new address.
        lab.exec(
            &netns,
            "ip",
            &["link", "set", "dev", "eth0", "address", new_mac],
        )
        .unwrap();
        if new_ip != node_ip {
            lab.exec(
                &netns,
                "ip",
                &["addr", "del", &format!("{node_ip}/24"), "dev", "eth0"],
            )
            .unwrap();
            lab.exec(
                &netns,
                "ip",
                &["addr", "add", &format!("{new_ip}/24"), "dev", "eth0"],
            )
            .unwrap();
            node_ip = new_ip;
        }
        ferrolb_tests::lab::create_node(&client, &owner, node_ip)
            .await
            .unwrap();
        let capture = lab.start_capture(0, Duration::from_secs(12));
        tokio::time::sleep(Duration::from_millis(200)).await;
        let replaced_us = unix_us();
        lab.start_speaker(&owner, &[]).unwrap();

        let deadline = std::time::Instant::now() + SETTLE;
        loop {
            let answers = lab.arp_answers(0, ip).await.unwrap();
            if answers == BTreeSet::from([new_mac.to_string()]) {
                break;
            }
            assert!(
                !answers.contains(&old_mac),
                "{round}: the old MAC answers: {answers:?}"
            );
            assert!(
                std::time::Instant::now() < deadline,
                "{round}: the replacement never took its IP back alone: {answers:?}\n{}",
                lab.speaker_log(&owner, 30)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        for k in 0..5 {
            assert_eq!(
                lab.arp_answers(0, ip).await.unwrap(),
                BTreeSet::from([new_mac.to_string()]),
                "{round}: probe {k} after the replacement took its IP back"
            );
        }

        let seen = capture.await.unwrap().unwrap();
        let seen: Vec<_> = seen
            .into_iter()
            .filter(|s| s.unix_us() >= replaced_us)
            .collect();
        assert!(
            !seen.iter().any(|s| s.mac() == old_mac),
            "{round}: a frame carries the old MAC after the replacement: {:?}",
            seen.iter()
                .filter(|s| s.mac() == old_mac)
                .collect::<Vec<_>>()
        );
        assert!(
            gratuitous_macs(&seen, ip).contains(new_mac),
            "{round}: the replacement announced the IP by gratuitous ARP: {seen:?}"
        );
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while neighbour_mac(&lab, &quiet, ip).as_deref() != Some(new_mac) {
            assert!(
                std::time::Instant::now() < deadline,
                "{round}: the quiet client still sends to {:?}",
                neighbour_mac(&lab, &quiet, ip)
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        old_mac = new_mac.to_string();
    }
}
