//! Speaker cases C-10 … C-16 (`../shared/cases.md`) in the network-namespace lab: real speakers in
//! node namespaces, a real API server, real ARP frames on a bridge. Service status is written by
//! the test as a controller would; the speaker reads nothing else about allocation.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ferrolb_crds::L2AdvertisementSpec;
use ferrolb_crds::v1beta1::LabelSelector;
use ferrolb_speaker::election;
use ferrolb_tests::lab::{Lab, Seen};
use ferrolb_tests::objects::{apply_l2, create_pool, create_service, lb_service, set_ingress};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

const SETTLE: Duration = Duration::from_secs(20);

fn node_selector(node: &str) -> LabelSelector {
    LabelSelector {
        match_labels: [("kubernetes.io/hostname".to_string(), node.to_string())].into(),
        ..Default::default()
    }
}

/// Events in `namespace` about object `name`, as `(reason, note)`.
async fn events_for(client: &kube::Client, namespace: &str, name: &str) -> Vec<(String, String)> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default()).await.unwrap();
    list.items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

async fn wait_for_event(client: &kube::Client, namespace: &str, name: &str, reason: &str, contains: &str) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let events = events_for(client, namespace, name).await;
        if events.iter().any(|(r, n)| r == reason && n.contains(contains)) || tokio::time::Instant::now() >= deadline {
            return events;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn expected_owner(ip: Ipv4Addr, nodes: &[&str]) -> String {
    election::owner(IpAddr::V4(ip), nodes.iter().copied()).unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_one_ip_one_announcer() {
    let mut lab = Lab::start(3, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    create_pool(&client, "pool", &["198.51.100.0/24"]).await.unwrap();
    apply_l2(&client, "all", L2AdvertisementSpec::default()).await.unwrap();
    let ip = Ipv4Addr::new(198, 51, 100, 53);
    for (name, proto) in [("svc-a", "TCP"), ("svc-b", "UDP")] {
        create_service(&client, &lb_service("default", name, &[(proto, 53)], "Cluster")).await.unwrap();
        set_ingress(&client, "default", name, &["198.51.100.53"]).await.unwrap();
    }
    for n in ["node-1", "node-2", "node-3"] {
        lab.start_speaker(n, &[]).unwrap();
    }
    let owner = expected_owner(ip, &["node-1", "node-2", "node-3"]);
    let answers = lab.wait_for_owner(0, ip, Some(&owner), SETTLE).await.unwrap();
    assert_eq!(answers, BTreeSet::from([lab.node(&owner).mac.clone()]), "logs:\n{}", lab.speaker_log(&owner, 30));
    // Steady state: every probe gets exactly one answer, always the same MAC.
    for _ in 0..5 {
        let answers = lab.arp_answers(0, ip).await.unwrap();
        assert_eq!(answers, BTreeSet::from([lab.node(&owner).mac.clone()]));
    }
    let events = wait_for_event(&client, "default", "svc-a", "AnnouncingIP", &format!("announcing 198.51.100.53 from {owner} on eth0")).await;
    assert!(
        events.iter().any(|(r, n)| r == "AnnouncingIP" && n.contains(&owner)),
        "no AnnouncingIP event: {events:?}"
    );

    // Two overlapping pools, each Service naming its own, each pool advertised from another node:
    // the Services on the shared IP are restricted to disjoint nodes → nobody announces, and a
    // Warning says why.
    create_pool(&client, "pool-b", &["198.51.100.0/26"]).await.unwrap();
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    for (svc, pool) in [("svc-a", "pool"), ("svc-b", "pool-b")] {
        let patch = serde_json::json!({ "metadata": { "annotations": { "ferrolb.io/address-pool": pool } } });
        services
            .patch(svc, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
            .await
            .unwrap();
    }
    kube::Api::<ferrolb_crds::L2Advertisement>::all(client.clone())
        .delete("all", &Default::default())
        .await
        .unwrap();
    apply_l2(&client, "pool-on-node-1", L2AdvertisementSpec {
        ip_address_pools: vec!["pool".into()],
        node_selectors: vec![node_selector("node-1")],
        ..Default::default()
    })
    .await
    .unwrap();
    apply_l2(&client, "pool-b-on-node-2", L2AdvertisementSpec {
        ip_address_pools: vec!["pool-b".into()],
        node_selectors: vec![node_selector("node-2")],
        ..Default::default()
    })
    .await
    .unwrap();
    let answers = lab.wait_for_owner(0, ip, None, SETTLE).await.unwrap();
    assert!(answers.is_empty(), "nobody may announce, but {answers:?} answered");
    let events = wait_for_event(&client, "default", "svc-a", "NoEligibleNode", "198.51.100.53").await;
    assert!(
        events.iter().any(|(r, n)| r == "NoEligibleNode" && n.contains("198.51.100.53")),
        "no NoEligibleNode event: {events:?}"
    );
    // Quiet from now on: probes keep getting no answer.
    let seen = lab.arp_probe(0, ip, Duration::from_millis(500)).await.unwrap();
    assert!(!seen.iter().any(|s| matches!(s, Seen::ArpReply { .. })), "{seen:?}");
}
