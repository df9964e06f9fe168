//! "Why is my Service pending / not reachable?" answered by `kubectl describe svc` alone
//! (issue #12 part 2): for each common cause, the real kubectl's describe output of the Service
//! carries an Event that names the cause in words. Real controller, real speakers, real API
//! server, real kubectl. The texts are also listed in docs/troubleshooting.md.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use ferrolb_crds::v1beta1::LabelSelector;
use ferrolb_crds::{IPAddressPool, IPAddressPoolSpec, L2AdvertisementSpec};
use ferrolb_tests::cluster::kubectl;
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::objects::{apply_l2, create_service, lb_service};
use ferrolb_tests::poll::until;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::PostParams;

const SETTLE: Duration = Duration::from_secs(30);
const NODES: [&str; 2] = ["node-1", "node-2"];

async fn pool(client: &kube::Client, name: &str, addresses: &[&str], auto_assign: bool) {
    let pool = IPAddressPool::new(
        name,
        IPAddressPoolSpec {
            addresses: addresses.iter().map(|a| (*a).into()).collect(),
            auto_assign,
            avoid_buggy_ips: false,
            allow_sharing_across_namespaces: false,
            service_allocation: None,
            auto_addresses: None,
        },
    );
    Api::<IPAddressPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
}

fn annotated(mut svc: Service, pairs: &[(&str, &str)]) -> Service {
    let a = svc
        .metadata
        .annotations
        .get_or_insert_with(Default::default);
    for (k, v) in pairs {
        a.insert((*k).into(), (*v).into());
    }
    svc
}

/// Waits until `kubectl describe svc <name>` shows all of `words`; returns the output.
async fn describe_shows(lab: &Lab, name: &str, words: &[&str]) -> String {
    let kubeconfig = lab.cluster().kubeconfig().to_path_buf();
    let mut last = String::new();
    let found = until(
        &format!("describe svc {name} shows {words:?}"),
        SETTLE,
        || {
            let out = kubectl(&kubeconfig, &["describe", "svc", name], None).unwrap();
            last = String::from_utf8_lossy(&out.stdout).into_owned();
            let ok = words.iter().all(|w| last.contains(w));
            async move { ok }
        },
    )
    .await;
    assert!(found.is_ok(), "{found:?}\n{last}");
    last
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_svc_tells_why_a_service_is_pending_or_not_reachable() {
    let mut lab = Lab::start(2, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    pool(&client, "main", &["198.51.100.88/29"], true).await;
    pool(&client, "small", &["198.51.100.80-198.51.100.81"], false).await;
    pool(&client, "nowhere", &["198.51.100.96/30"], false).await;
    apply_l2(
        &client,
        "main",
        L2AdvertisementSpec {
            ip_address_pools: vec!["main".into(), "small".into()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    apply_l2(
        &client,
        "rack-9",
        L2AdvertisementSpec {
            ip_address_pools: vec!["nowhere".into()],
            node_selectors: vec![LabelSelector {
                match_labels: [("rack".to_owned(), "9".to_owned())].into(),
                ..Default::default()
            }],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    for node in NODES {
        lab.start_speaker(node, &[]).unwrap();
    }
    let _controller = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("stories"),
    )
    .unwrap();
    let svc = |name: &str, etp: &str| lb_service("default", name, &[("TCP", 80)], etp);

    // Sharing refused: the requested IP is held by another Service without a common key.
    let share_a = annotated(
        svc("share-a", "Cluster"),
        &[("ferrolb.io/loadBalancerIPs", "198.51.100.81")],
    );
    create_service(&client, &share_a).await.unwrap();
    describe_shows(&lab, "share-a", &["IPAllocated", "198.51.100.81"]).await;
    let share_b = annotated(
        svc("share-b", "Cluster"),
        &[("ferrolb.io/loadBalancerIPs", "198.51.100.81")],
    );
    create_service(&client, &share_b).await.unwrap();
    describe_shows(
        &lab,
        "share-b",
        &[
            "AllocationFailed",
            "requested IP 198.51.100.81 is held by default/share-a",
        ],
    )
    .await;

    // Pool exhausted: "small" has two addresses, one shared above, one taken here.
    for name in ["small-a", "small-b"] {
        let s = annotated(
            svc(name, "Cluster"),
            &[("ferrolb.io/address-pool", "small")],
        );
        create_service(&client, &s).await.unwrap();
    }
    describe_shows(
        &lab,
        "small-b",
        &[
            "AllocationFailed",
            "pool small is exhausted: no free IPv4 address",
        ],
    )
    .await;

    // Requested IP outside every pool.
    let outside = annotated(
        svc("outside", "Cluster"),
        &[("ferrolb.io/loadBalancerIPs", "203.0.113.9")],
    );
    create_service(&client, &outside).await.unwrap();
    describe_shows(
        &lab,
        "outside",
        &[
            "AllocationFailed",
            "requested IP 203.0.113.9 is in no pool that admits this Service: no pool contains it",
        ],
    )
    .await;

    // Allocated, but no node may announce it: the advertisement selects no node.
    let nowhere = annotated(
        svc("nowhere", "Cluster"),
        &[("ferrolb.io/address-pool", "nowhere")],
    );
    create_service(&client, &nowhere).await.unwrap();
    describe_shows(
        &lab,
        "nowhere",
        &[
            "NoEligibleNode",
            "the nodeSelectors of L2Advertisement(s) rack-9 covering pool nowhere match no eligible node",
        ],
    )
    .await;

    // externalTrafficPolicy Local without a ready endpoint.
    create_service(&client, &svc("local", "Local"))
        .await
        .unwrap();
    describe_shows(
        &lab,
        "local",
        &[
            "NoEligibleNode",
            "no ready endpoint on any node for default/local (externalTrafficPolicy Local)",
        ],
    )
    .await;

    // A reachable one, then every node excluded from external load balancers.
    create_service(&client, &svc("web", "Cluster"))
        .await
        .unwrap();
    describe_shows(
        &lab,
        "web",
        &["IPAllocated", "AnnouncingIP", "announcing 198.51.100."],
    )
    .await;
    // What a person looks at first: the advertisements and who announces what.
    let kubeconfig = lab.cluster().kubeconfig().to_path_buf();
    let out = kubectl(&kubeconfig, &["get", "l2advertisements"], None).unwrap();
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        table.contains("NODE-SELECTORS") && table.contains(r#"{"matchLabels":{"rack":"9"}}"#),
        "{table}"
    );
    let mut announced = String::new();
    let found = until(
        "kubectl get l2announcements names web's node",
        SETTLE,
        || {
            let out = kubectl(
                &kubeconfig,
                &["-n", "ferrolb-system", "get", "l2announcements"],
                None,
            )
            .unwrap();
            announced = String::from_utf8_lossy(&out.stdout).into_owned();
            let ok = announced.contains("default/web") && announced.contains("NODE");
            async move { ok }
        },
    )
    .await;
    assert!(found.is_ok(), "{announced}");
    println!("{table}\n{announced}");
    for node in NODES {
        lab.label_node(
            node,
            "node.kubernetes.io/exclude-from-external-load-balancers",
            Some("true"),
        )
        .await
        .unwrap();
    }
    // Every Node labelled (what a single-node minikube or kind cluster looks like): under the
    // default --exclude-lb-label=auto the label is set aside and the Service says so (issue #28
    // item 1). The label excluding some nodes only is speaker_lab's c14.
    let out = describe_shows(
        &lab,
        "web",
        &[
            "ExclusionLabelIgnored",
            "every Node carries node.kubernetes.io/exclude-from-external-load-balancers",
        ],
    )
    .await;
    println!("{out}");
}
