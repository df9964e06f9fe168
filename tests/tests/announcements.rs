//! "Who answers for what" with kubectl (issue #12 part 2): one `L2Announcement` per announced IP
//! in `ferrolb-system`, written by the owner, replaced by the new owner after a crash failover,
//! untouched at steady state, and deleted by the controller once no Service holds the IP (the
//! speakers delete nothing, issue #27 item 5). Real speakers, real controller, real API server.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ferrolb_crds::{L2Announcement, announcement_name};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::lab::scenario::{expected_owner, metric_value};
use ferrolb_tests::objects::announced_service;
use ferrolb_tests::poll::until;
use kube::Api;

const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 70);
const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
const SETTLE: Duration = Duration::from_secs(30);

fn names(a: &Option<L2Announcement>) -> Option<(String, Vec<String>, Vec<String>)> {
    a.as_ref().map(|a| {
        (
            a.spec.node.clone(),
            a.spec.interfaces.clone(),
            a.spec.services.clone(),
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_is_named_replaced_after_failover_and_removed_with_the_ip() {
    let mut lab = Lab::start(3, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.70"],
    )
    .await
    .unwrap();
    for node in NODES {
        lab.start_speaker(node, &[]).unwrap();
    }
    let owner = expected_owner(VIP, &NODES);
    lab.wait_for_owner(0, VIP, Some(&owner), SETTLE)
        .await
        .unwrap();
    let api: Api<L2Announcement> = Api::namespaced(client.clone(), "ferrolb-system");
    let name = announcement_name(VIP.into());
    let want = |node: &str| {
        Some((
            node.to_owned(),
            vec!["eth0".to_owned()],
            vec!["default/svc".to_owned()],
        ))
    };
    until("the owner names itself", SETTLE, || async {
        names(&api.get_opt(&name).await.unwrap()) == want(&owner)
    })
    .await
    .unwrap();
    let first = api.get(&name).await.unwrap();
    assert_eq!(first.spec.ip, VIP.to_string());
    assert!(first.spec.since.is_some());

    // Steady state: no writes (same resourceVersion, and no speaker applied anything more).
    let applied = || async {
        let mut sum = 0.0;
        for node in NODES {
            let (_, body) = lab.speaker_http(node, "/metrics").await.unwrap();
            sum += metric_value(
                &body,
                "ferrolb_speaker_announcement_writes_total{outcome=\"applied\"}",
            )
            .unwrap();
        }
        sum
    };
    let before = applied().await;
    assert_eq!(before, 1.0, "one write for one IP");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(applied().await, before);
    assert_eq!(
        api.get(&name).await.unwrap().metadata.resource_version,
        first.metadata.resource_version
    );

    // Crash failover: the new owner overwrites the object.
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != owner).collect();
    let next = expected_owner(VIP, &rest);
    let killed = Instant::now();
    lab.signal_speaker(&owner, "KILL").unwrap();
    until("the new owner named", SETTLE, || async {
        names(&api.get_opt(&name).await.unwrap()) == want(&next)
    })
    .await
    .unwrap();
    println!(
        "SIGKILL of {owner}'s speaker -> L2Announcement names {next}: {:?}",
        killed.elapsed()
    );
    let after = api.get(&name).await.unwrap();
    assert_ne!(after.spec.since, None);

    // The Service is deleted: the controller (the speakers may not delete) removes the object.
    let controller = ferrolb_tests::controller::ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ferrolb_tests::controller::ControllerOptions::new("announcements"),
    )
    .unwrap();
    until("the controller ready", SETTLE, || async {
        controller
            .get("/readyz")
            .await
            .is_some_and(|(code, _)| code == 200)
    })
    .await
    .unwrap();
    let services: Api<k8s_openapi::api::core::v1::Service> =
        Api::namespaced(client.clone(), "default");
    services.delete("svc", &Default::default()).await.unwrap();
    until("the object removed", SETTLE, || async {
        api.get_opt(&name).await.unwrap().is_none()
    })
    .await
    .unwrap();
    assert!(
        controller
            .log_tail(200)
            .contains("deleted a stale L2Announcement"),
        "{}",
        controller.log_tail(50)
    );

    // Issue #28: an automatic pool. The live speakers report their eth0 network in their node
    // reports and probe the candidates; a client already uses the top one (192.0.2.254), so the
    // controller skips it and takes .253 and .252 (the lab has no default gateway), and the
    // Service's address is answered on the LAN.
    ferrolb_tests::lab::in_netns(
        &lab.clients[0].netns,
        "ip",
        &["addr", "add", "192.0.2.254/24", "dev", "eth0"],
    )
    .unwrap();
    let pools: Api<ferrolb_crds::IPAddressPool> = Api::all(client.clone());
    let auto: ferrolb_crds::IPAddressPool = serde_json::from_value(serde_json::json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": { "name": "auto" },
        "spec": { "autoAddresses": { "size": 2 } },
    }))
    .unwrap();
    let created = Instant::now();
    pools.create(&Default::default(), &auto).await.unwrap();
    let reports = api.clone();
    until("the node reports list eth0's network", SETTLE, || async {
        reports
            .get_opt(&ferrolb_crds::announcement::member_report_name(rest[0]))
            .await
            .unwrap()
            .is_some_and(|r| {
                r.spec.networks.iter().any(|n| {
                    n.interface == "eth0"
                        && n.prefix.ends_with("/24")
                        && n.prefix.starts_with("192.0.2.")
                })
            })
    })
    .await
    .unwrap();
    let resolved = || async {
        pools
            .get("auto")
            .await
            .unwrap()
            .status
            .and_then(|s| s.auto_addresses)
            .map(|a| (a.prefix, a.addresses, a.skipped_count))
    };
    until("the client's address skipped", SETTLE, || async {
        resolved().await
            == Some((
                Some("192.0.2.0/24".to_owned()),
                vec!["192.0.2.252-192.0.2.253".to_owned()],
                1,
            ))
    })
    .await
    .unwrap();
    println!(
        "automatic pool created -> the used address skipped: {:?}",
        created.elapsed()
    );
    let mut svc =
        ferrolb_tests::objects::lb_service("default", "auto-svc", &[("TCP", 80)], "Cluster");
    svc.metadata.annotations =
        Some([("ferrolb.io/address-pool".to_owned(), "auto".to_owned())].into());
    ferrolb_tests::objects::create_service(&client, &svc)
        .await
        .unwrap();
    let auto_ip = Ipv4Addr::new(192, 0, 2, 252);
    until("auto-svc gets 192.0.2.252", SETTLE, || async {
        services.get("auto-svc").await.ok().is_some_and(|s| {
            ferrolb_crds::service::ingress_ips(&s) == vec![std::net::IpAddr::V4(auto_ip)]
        })
    })
    .await
    .unwrap();
    lab.wait_for_owner(0, auto_ip, Some(&expected_owner(auto_ip, &rest)), SETTLE)
        .await
        .unwrap();
    println!(
        "automatic pool created -> its address answered: {:?}",
        created.elapsed()
    );
}
