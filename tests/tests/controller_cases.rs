//! The controller cases C-01 … C-09 of `cases.md`, plus the HA failover test (R13) and the
//! write-war test (R8), on the real API server, running the real `ferrolb-controller` binary as a
//! process.
//!
//! Each test starts its own cluster (pools are cluster-scoped and the controller watches
//! everything, so tests must not share one); a process-wide lock runs them one at a time because
//! the machine is small. Every controller process is stopped when its handle drops, also when an
//! assertion fails.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use ferrolb_crds::addresses::FORBIDDEN_BLOCKS;
use ferrolb_crds::{IPAddressPool, IPAddressPoolSpec};
use ferrolb_tests::cluster::TestCluster;
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};

use ferrolb_tests::objects::{create_pool, create_service, ingress_ips, lb_service, set_ingress};
use ferrolb_tests::{namespace, poll};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::json;

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The shared fixture ([`ControllerProcess`]) with this suite's lease timings.
fn start_controller(cluster: &TestCluster, identity: &str, extra: &[&str]) -> ControllerProcess {
    let opts = ControllerOptions::new(identity)
        .args(&["--lease-duration=3s", "--lease-grace=1s"])
        .args(extra);
    ControllerProcess::start(cluster.kubeconfig(), cluster.dir(), &opts).expect("start controller")
}

/// A `/metrics` sample, 0 when absent.
async fn metric(ctl: &ControllerProcess, sample: &str) -> f64 {
    ctl.metric(sample).await.unwrap_or(0.0)
}

/// [`poll::until`], failing the test on timeout.
async fn wait_for<F, Fut>(what: &str, timeout: Duration, check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    poll::until(what, timeout, check).await.unwrap();
}

async fn get_svc(client: &Client, ns: &str, name: &str) -> Service {
    Api::<Service>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

async fn ips(client: &Client, ns: &str, name: &str) -> Vec<String> {
    ingress_ips(&get_svc(client, ns, name).await)
}

async fn wait_ips(client: &Client, ns: &str, name: &str, want: &[&str]) {
    let want: Vec<String> = want.iter().map(|s| s.to_string()).collect();
    let mut last = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        last = ips(client, ns, name).await;
        if last == want {
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("{ns}/{name}: ingress {last:?}, want {want:?}");
}

/// `(type, reason, note)` of every Event regarding the Service.
async fn events(client: &Client, ns: &str, name: &str) -> Vec<(String, String, String)> {
    ferrolb_tests::lab::scenario::typed_events_for(client, ns, name)
        .await
        .unwrap()
}

async fn wait_event(client: &Client, ns: &str, name: &str, reason: &str, contains: &str) -> String {
    let mut seen = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(20) {
        seen = events(client, ns, name).await;
        if let Some((_, _, note)) = seen
            .iter()
            .find(|(_, r, n)| r == reason && n.contains(contains))
        {
            return note.clone();
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    panic!("{ns}/{name}: no {reason} Event containing {contains:?}; saw {seen:#?}");
}

fn annotate(mut svc: Service, pairs: &[(&str, &str)]) -> Service {
    let a = svc.metadata.annotations.get_or_insert_with(BTreeMap::new);
    for (k, v) in pairs {
        a.insert(k.to_string(), v.to_string());
    }
    svc
}

fn families(mut svc: Service, fams: &[&str], policy: &str) -> Service {
    let spec = svc.spec.as_mut().unwrap();
    spec.ip_families = Some(fams.iter().map(|f| f.to_string()).collect());
    spec.ip_family_policy = Some(policy.into());
    svc
}

/// Whether `ferrolb-controller` ever wrote this Service (its managedFields entry).
fn written_by_controller(svc: &Service) -> bool {
    svc.metadata
        .managed_fields
        .iter()
        .flatten()
        .any(|m| m.manager.as_deref() == Some("ferrolb-controller"))
}

async fn apply_pool(client: &Client, name: &str, spec: serde_json::Value) {
    let obj = json!({ "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool", "metadata": { "name": name }, "spec": spec });
    Api::<IPAddressPool>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply("ferrolb-tests").force(),
            &Patch::Apply(&obj),
        )
        .await
        .unwrap();
}

async fn delete_pool(client: &Client, name: &str) {
    Api::<IPAddressPool>::all(client.clone())
        .delete(name, &DeleteParams::default())
        .await
        .unwrap();
}

async fn delete_svc(client: &Client, ns: &str, name: &str) {
    let api = Api::<Service>::namespaced(client.clone(), ns);
    api.delete(name, &DeleteParams::default()).await.unwrap();
    wait_for("service deletion", Duration::from_secs(10), || {
        let api = api.clone();
        async move { api.get_opt(name).await.unwrap().is_none() }
    })
    .await;
}

async fn setup() -> (TestCluster, Client) {
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    (cluster, client)
}

async fn c01_variant(a_requests: bool, b_first: bool) {
    let (cluster, client) = setup().await;
    create_pool(&client, "pool", &["198.51.100.10/32"])
        .await
        .unwrap();
    // Namespaces order the watch's initial list: `aaa-…` is delivered before `zzz-…`.
    let (ns_a, ns_b) = if b_first {
        (
            namespace::fresh(&client, "zzz").await.unwrap(),
            namespace::fresh(&client, "aaa").await.unwrap(),
        )
    } else {
        (
            namespace::fresh(&client, "aaa").await.unwrap(),
            namespace::fresh(&client, "zzz").await.unwrap(),
        )
    };
    // svc-b is created first (it is the older one) and is pending; svc-a holds the IP, as a
    // previous controller left it.
    create_service(
        &client,
        &lb_service(&ns_b, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut a = lb_service(&ns_a, "svc-a", &[("TCP", 80)], "Cluster");
    if a_requests {
        a = annotate(a, &[("ferrolb.io/loadBalancerIPs", "198.51.100.10")]);
    }
    create_service(&client, &a).await.unwrap();
    set_ingress(&client, &ns_a, "svc-a", &["198.51.100.10"])
        .await
        .unwrap();
    let rv = get_svc(&client, &ns_a, "svc-a").await.resource_version();

    for round in 0..2 {
        let ctl = start_controller(&cluster, &format!("c01-{round}"), &[]);
        let note = wait_event(&client, &ns_b, "svc-b", "AllocationFailed", "exhausted").await;
        assert!(note.contains("pool pool"), "{note}");
        tokio::time::sleep(Duration::from_secs(2)).await;
        let a_now = get_svc(&client, &ns_a, "svc-a").await;
        assert_eq!(
            ingress_ips(&a_now),
            vec!["198.51.100.10"],
            "{}",
            ctl.log_tail(40)
        );
        assert_eq!(
            a_now.resource_version(),
            rv,
            "svc-a must see no write at all (round {round})"
        );
        assert!(!written_by_controller(&a_now));
        assert!(ips(&client, &ns_b, "svc-b").await.is_empty());
        drop(ctl);
    }
}

#[tokio::test]
async fn c01_restart_must_not_steal_ips() {
    let _serial = SERIAL.lock().await;
    c01_variant(false, true).await;
    c01_variant(false, false).await;
    c01_variant(true, true).await;
}

#[tokio::test]
async fn c02_sharing_groups_survive_restarts_and_recreation() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c02").await.unwrap();
    let shared = |name: &str, port: i32| {
        let mut s = annotate(
            lb_service(&ns, name, &[("TCP", port)], "Cluster"),
            &[("ferrolb.io/allow-shared-ip", "k1")],
        );
        s.spec.as_mut().unwrap().selector =
            Some(BTreeMap::from([("app".to_string(), "shared".to_string())]));
        s
    };
    let ctl = start_controller(&cluster, "c02-0", &[]);
    create_service(&client, &shared("svc-a", 80)).await.unwrap();
    create_service(&client, &shared("svc-b", 8080))
        .await
        .unwrap();
    wait_ips(&client, &ns, "svc-a", &["198.51.100.1"]).await;
    wait_ips(&client, &ns, "svc-b", &["198.51.100.1"]).await;
    // (a) restart: nothing changes, nothing is written.
    let rvs = (
        get_svc(&client, &ns, "svc-a").await.resource_version(),
        get_svc(&client, &ns, "svc-b").await.resource_version(),
    );
    drop(ctl);
    let ctl = start_controller(&cluster, "c02-1", &[]);
    wait_for(
        "restarted controller leads",
        Duration::from_secs(15),
        || lease_holder_is(&client, "c02-1"),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        rvs,
        (
            get_svc(&client, &ns, "svc-a").await.resource_version(),
            get_svc(&client, &ns, "svc-b").await.resource_version()
        ),
        "{}",
        ctl.log_tail(40)
    );
    // (b) delete svc-b and create it again unchanged: same IP.
    delete_svc(&client, &ns, "svc-b").await;
    create_service(&client, &shared("svc-b", 8080))
        .await
        .unwrap();
    wait_ips(&client, &ns, "svc-b", &["198.51.100.1"]).await;
    assert_eq!(ips(&client, &ns, "svc-a").await, vec!["198.51.100.1"]);
    // The IP returns to the pool only when the last member goes: a newcomer without the key
    // does not get .1 while svc-a holds it, and gets it once both are gone.
    delete_svc(&client, &ns, "svc-b").await;
    create_service(
        &client,
        &lb_service(&ns, "svc-c", &[("TCP", 9000)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-c", &["198.51.100.2"]).await;
    delete_svc(&client, &ns, "svc-a").await;
    create_service(
        &client,
        &lb_service(&ns, "svc-d", &[("TCP", 9000)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-d", &["198.51.100.1"]).await;
    drop(ctl);
}

/// Issue #27 item 6 on the real API server: one sharing key in two namespaces shares an address
/// only where the pool sets `spec.allowSharingAcrossNamespaces`. Without it, a Service of the
/// holder's namespace shares; a tenant's `Local` twin (same key, same selector, another port)
/// requesting the holder's address stays pending with a Warning Event naming the rule and the
/// field, and one without a request gets an address of its own with a `NotShared` Warning. With
/// the field, the twin joins; taking it back moves the twin, not the holders.
#[tokio::test]
async fn r2_sharing_across_namespaces_needs_the_pools_opt_in() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    apply_pool(&client, "pool", json!({ "addresses": ["198.51.100.0/28"] })).await;
    let shop = namespace::fresh(&client, "shop").await.unwrap();
    let tenant = namespace::fresh(&client, "tenant").await.unwrap();
    let member = |ns: &str, name: &str, port: i32, request: Option<&str>| {
        let mut pairs = vec![("ferrolb.io/allow-shared-ip", "k1")];
        if let Some(ip) = request {
            pairs.push(("ferrolb.io/loadBalancerIPs", ip));
        }
        let mut s = annotate(lb_service(ns, name, &[("TCP", port)], "Local"), &pairs);
        s.spec.as_mut().unwrap().selector =
            Some(BTreeMap::from([("app".to_string(), "web".to_string())]));
        s
    };
    let ctl = start_controller(&cluster, "xns-0", &[]);
    create_service(&client, &member(&shop, "web", 80, None))
        .await
        .unwrap();
    wait_ips(&client, &shop, "web", &["198.51.100.1"]).await;
    create_service(&client, &member(&shop, "api", 443, None))
        .await
        .unwrap();
    wait_ips(&client, &shop, "api", &["198.51.100.1"]).await;

    create_service(
        &client,
        &member(&tenant, "twin", 8080, Some("198.51.100.1")),
    )
    .await
    .unwrap();
    // Either holder may be the one named (both hold the address); the rule must be.
    let why = format!(
        "and {tenant}/twin carry the same sharing key but are in different namespaces, and pool pool does not allow sharing across namespaces (spec.allowSharingAcrossNamespaces: true would)"
    );
    let note = wait_event(&client, &tenant, "twin", "AllocationFailed", &why).await;
    assert!(
        note.contains("requested IP 198.51.100.1 is held by"),
        "{note}"
    );
    assert!(
        [format!("{shop}/api {why}"), format!("{shop}/web {why}")]
            .iter()
            .any(|named| note.contains(named.as_str())),
        "{note}"
    );
    create_service(&client, &member(&tenant, "auto", 9090, None))
        .await
        .unwrap();
    wait_ips(&client, &tenant, "auto", &["198.51.100.2"]).await;
    let note = wait_event(
        &client,
        &tenant,
        "auto",
        "NotShared",
        "not sharing 198.51.100.1 with ",
    )
    .await;
    assert!(note.contains("different namespaces"), "{note}");
    assert!(
        events(&client, &tenant, "auto")
            .await
            .iter()
            .any(|(t, r, _)| t == "Warning" && r == "NotShared")
    );
    assert!(ips(&client, &tenant, "twin").await.is_empty());

    // The opt-in: the twin joins; the other tenant Service keeps its own address.
    apply_pool(
        &client,
        "pool",
        json!({ "addresses": ["198.51.100.0/28"], "allowSharingAcrossNamespaces": true }),
    )
    .await;
    wait_ips(&client, &tenant, "twin", &["198.51.100.1"]).await;
    assert_eq!(ips(&client, &tenant, "auto").await, vec!["198.51.100.2"]);

    // Taken back: the twin (the newer, of the other namespace) leaves; the holders stay.
    apply_pool(&client, "pool", json!({ "addresses": ["198.51.100.0/28"] })).await;
    wait_ips(&client, &tenant, "twin", &[]).await;
    assert_eq!(ips(&client, &shop, "web").await, vec!["198.51.100.1"]);
    assert_eq!(ips(&client, &shop, "api").await, vec!["198.51.100.1"]);
    drop(ctl);
}

async fn lease_holder_is(client: &Client, identity: &str) -> bool {
    holder(client).await.as_deref() == Some(identity)
}

async fn holder(client: &Client) -> Option<String> {
    Api::<Lease>::namespaced(client.clone(), "default")
        .get_opt("ferrolb-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec)
        .and_then(|s| s.holder_identity)
}

#[tokio::test]
async fn c03_pool_deleted_while_in_use() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    create_pool(&client, "pool-a", &["198.51.100.0/24"])
        .await
        .unwrap();
    create_pool(&client, "pool-b", &["203.0.113.0/24"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c03").await.unwrap();
    for (name, ip) in [
        ("svc-a", "198.51.100.1"),
        ("svc-b", "203.0.113.1"),
        ("svc-c", "203.0.113.2"),
    ] {
        create_service(
            &client,
            &annotate(
                lb_service(&ns, name, &[("TCP", 80)], "Cluster"),
                &[("ferrolb.io/loadBalancerIPs", ip)],
            ),
        )
        .await
        .unwrap();
    }
    let ctl = start_controller(&cluster, "c03", &[]);
    wait_ips(&client, &ns, "svc-c", &["203.0.113.2"]).await;
    // The requests pinned the first allocation; drop them so the Services may move.
    for name in ["svc-a", "svc-b", "svc-c"] {
        Api::<Service>::namespaced(client.clone(), &ns)
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"ferrolb.io/loadBalancerIPs": null}}}),
                ),
            )
            .await
            .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(
        ips(&client, &ns, "svc-b").await,
        vec!["203.0.113.1"],
        "dropping a request moves nothing"
    );
    delete_pool(&client, "pool-b").await;
    wait_ips(&client, &ns, "svc-b", &["198.51.100.2"]).await;
    wait_ips(&client, &ns, "svc-c", &["198.51.100.3"]).await;
    assert_eq!(ips(&client, &ns, "svc-a").await, vec!["198.51.100.1"]);
    for name in ["svc-b", "svc-c"] {
        let note = wait_event(&client, &ns, name, "Reallocated", "left every pool").await;
        assert!(note.contains("203.0.113."), "{note}");
    }
    // Re-created svc-b (carrying the old status, as a restore would) does not get it back.
    delete_svc(&client, &ns, "svc-b").await;
    create_service(
        &client,
        &lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    set_ingress(&client, &ns, "svc-b", &["203.0.113.1"])
        .await
        .unwrap();
    wait_ips(&client, &ns, "svc-b", &["198.51.100.2"]).await;
    // pool-b comes back smaller: nothing moves.
    let before: Vec<_> = snapshot(&client, &ns, &["svc-a", "svc-b", "svc-c"]).await;
    create_pool(&client, "pool-b", &["203.0.113.128/25"])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        before,
        snapshot(&client, &ns, &["svc-a", "svc-b", "svc-c"]).await,
        "{}",
        ctl.log_tail(40)
    );
}

/// `(ips, resourceVersion)` of each Service.
async fn snapshot(client: &Client, ns: &str, names: &[&str]) -> Vec<(Vec<String>, Option<String>)> {
    let mut out = Vec::new();
    for n in names {
        let s = get_svc(client, ns, n).await;
        out.push((ingress_ips(&s), s.resource_version()));
    }
    out
}

#[tokio::test]
async fn c04_type_change_frees_the_ip_for_waiting_services() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    create_pool(&client, "pool", &["198.51.100.10/31"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c04").await.unwrap();
    let _ctl = start_controller(&cluster, "c04", &[]);
    create_service(
        &client,
        &lb_service(&ns, "svc-a", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-a", &["198.51.100.10"]).await;
    create_service(
        &client,
        &lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-b", &["198.51.100.11"]).await;
    create_service(
        &client,
        &lb_service(&ns, "svc-c", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    create_service(
        &client,
        &annotate(
            lb_service(&ns, "svc-d", &[("TCP", 80)], "Cluster"),
            &[("ferrolb.io/loadBalancerIPs", "198.51.100.11")],
        ),
    )
    .await
    .unwrap();
    wait_event(
        &client,
        &ns,
        "svc-d",
        "AllocationFailed",
        &format!("held by {ns}/svc-b"),
    )
    .await;
    // (1) svc-a → ClusterIP: status cleared, svc-c gets the IP at once.
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    api.patch(
        "svc-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-a", &[]).await;
    wait_ips(&client, &ns, "svc-c", &["198.51.100.10"]).await;
    // (2) back to LoadBalancer: no stale IP, pending.
    api.patch(
        "svc-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"type": "LoadBalancer"}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(ips(&client, &ns, "svc-a").await.is_empty());
    // (3) svc-b deleted: svc-d gets .11 (its request wins over the older pending svc-a).
    delete_svc(&client, &ns, "svc-b").await;
    wait_ips(&client, &ns, "svc-d", &["198.51.100.11"]).await;
    assert!(ips(&client, &ns, "svc-a").await.is_empty());
}

#[tokio::test]
async fn c05_dual_stack_with_a_single_family_pool() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    apply_pool(&client, "pool", json!({"addresses": ["198.51.100.0/28"]})).await;
    let ns = namespace::fresh(&client, "c05").await.unwrap();
    let _ctl = start_controller(&cluster, "c05", &[]);
    let a = families(
        lb_service(&ns, "svc-a", &[("TCP", 80)], "Cluster"),
        &["IPv4", "IPv6"],
        "PreferDualStack",
    );
    create_service(&client, &a).await.unwrap();
    wait_ips(&client, &ns, "svc-a", &["198.51.100.1"]).await;
    wait_event(
        &client,
        &ns,
        "svc-a",
        "AllocationFailed",
        "IPv6 address not available",
    )
    .await;
    let b = families(
        lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
        &["IPv4", "IPv6"],
        "RequireDualStack",
    );
    create_service(&client, &b).await.unwrap();
    wait_event(
        &client,
        &ns,
        "svc-b",
        "AllocationFailed",
        "family unavailable",
    )
    .await;
    assert!(ips(&client, &ns, "svc-b").await.is_empty());
    // Adding IPv6 to the pool: svc-a gains IPv6 without changing IPv4; svc-b is served.
    apply_pool(
        &client,
        "pool",
        json!({"addresses": ["198.51.100.0/28", "2001:db8:0:1::/120"]}),
    )
    .await;
    wait_ips(&client, &ns, "svc-a", &["198.51.100.1", "2001:db8:0:1::"]).await;
    wait_ips(&client, &ns, "svc-b", &["198.51.100.2", "2001:db8:0:1::1"]).await;
    // SingleStack IPv4 on the mixed pool: exactly one IPv4 address.
    create_service(
        &client,
        &families(
            lb_service(&ns, "svc-c", &[("TCP", 80)], "Cluster"),
            &["IPv4"],
            "SingleStack",
        ),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-c", &["198.51.100.3"]).await;
}

#[tokio::test]
async fn c06_priority_without_selectors() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    apply_pool(
        &client,
        "pool-b",
        json!({"addresses": ["203.0.113.0/28"], "serviceAllocation": {"priority": 2}}),
    )
    .await;
    apply_pool(
        &client,
        "pool-a",
        json!({"addresses": ["198.51.100.0/28"], "serviceAllocation": {"priority": 1}}),
    )
    .await;
    let ns = namespace::fresh(&client, "c06").await.unwrap();
    let _ctl = start_controller(&cluster, "c06", &[]);
    create_service(
        &client,
        &lb_service(&ns, "svc-1", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-1", &["198.51.100.1"]).await;
    // `serviceAllocation: {}` behaves as if absent: after the selecting pools, by name.
    // (svc-1 goes first so it does not move into the new pools.)
    delete_svc(&client, &ns, "svc-1").await;
    delete_pool(&client, "pool-a").await;
    delete_pool(&client, "pool-b").await;
    apply_pool(
        &client,
        "pool-z",
        json!({"addresses": ["203.0.113.16/28"], "serviceAllocation": {}}),
    )
    .await;
    apply_pool(&client, "pool-y", json!({"addresses": ["203.0.113.32/28"]})).await;
    create_service(
        &client,
        &lb_service(&ns, "svc-2", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-2", &["203.0.113.33"]).await;
}

/// Issue #27 item 7: the controller keeps only the Service labels a pool's `serviceSelectors`
/// reads (here `team`; not the thousand others each Service carries), so a pool created (or
/// changed) later that reads another label makes it read every Service again — a Service
/// labelled long before is still served by it. Without the re-read, `web` stays pending.
#[tokio::test]
async fn service_selectors_see_labels_set_before_the_pool_read_them() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    apply_pool(
        &client,
        "team-a",
        json!({"addresses": ["198.51.100.0/30"], "serviceAllocation": {"serviceSelectors": [
            {"matchExpressions": [{"key": "team", "operator": "In", "values": ["a"]}]}]}}),
    )
    .await;
    let ns = namespace::fresh(&client, "labels").await.unwrap();
    let _ctl = start_controller(&cluster, "labels", &[]);
    let labelled = |name: &str, pairs: &[(&str, &str)]| {
        let mut svc = lb_service(&ns, name, &[("TCP", 80)], "Cluster");
        svc.metadata.labels = Some(
            (0..1000)
                .map(|i| (format!("tenant.example/l{i}"), "v".repeat(63)))
                .chain(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
                .collect(),
        );
        svc
    };
    create_service(&client, &labelled("web", &[("tier", "web")]))
        .await
        .unwrap();
    create_service(&client, &labelled("db", &[("team", "a")]))
        .await
        .unwrap();
    // The controller keeps `team` (the pool's selector reads it) and no other label.
    wait_ips(&client, &ns, "db", &["198.51.100.1"]).await;
    assert!(
        ips(&client, &ns, "web").await.is_empty(),
        "web is not team a"
    );
    apply_pool(
        &client,
        "tier-web",
        json!({"addresses": ["203.0.113.0/30"], "serviceAllocation": {"serviceSelectors": [
            {"matchLabels": {"tier": "web"}}]}}),
    )
    .await;
    wait_ips(&client, &ns, "web", &["203.0.113.1"]).await;
    wait_ips(&client, &ns, "db", &["198.51.100.1"]).await;
}

#[tokio::test]
async fn c07_foreign_status_is_replaced_not_looped_on() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c07").await.unwrap();
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    let variants: Vec<(&str, serde_json::Value)> = vec![
        (
            "two-node-ips",
            json!([{"ip": "192.0.2.4"}, {"ip": "192.0.2.5"}]),
        ),
        (
            "three",
            json!([{"ip": "192.0.2.4"}, {"ip": "192.0.2.5"}, {"ip": "192.0.2.6"}]),
        ),
        ("hostname", json!([{"hostname": "lb.example.com"}])),
        ("v6-on-v4", json!([{"ip": "2001:db8::5"}])),
    ];
    for (name, ingress) in &variants {
        create_service(
            &client,
            &families(
                lb_service(&ns, name, &[("TCP", 80)], "Cluster"),
                &["IPv4"],
                "SingleStack",
            ),
        )
        .await
        .unwrap();
        let patch = json!({"apiVersion": "v1", "kind": "Service", "status": {"loadBalancer": {"ingress": ingress}}});
        api.patch_status(
            name,
            &PatchParams::apply("other-implementation").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap();
    }
    let ctl = start_controller(&cluster, "c07", &[]);
    let mut rvs = BTreeMap::new();
    let mut seen = BTreeSet::new();
    for (name, _) in &variants {
        wait_for("a fresh pool address", Duration::from_secs(20), || async {
            let got = ips(&client, &ns, name).await;
            got.len() == 1 && got[0].starts_with("198.51.100.")
        })
        .await;
        let ip = ips(&client, &ns, name).await.remove(0);
        assert!(seen.insert(ip), "two Services on one IP");
        let note = wait_event(&client, &ns, name, "StatusReplaced", "discarded").await;
        let named = match *name {
            "hostname" => "lb.example.com",
            "v6-on-v4" => "2001:db8::5",
            _ => "192.0.2.4",
        };
        assert!(note.contains(named), "{note}");
        rvs.insert(
            name.to_string(),
            get_svc(&client, &ns, name).await.resource_version(),
        );
    }
    // No further writes for 30 s.
    tokio::time::sleep(Duration::from_secs(30)).await;
    for (name, _) in &variants {
        assert_eq!(
            rvs[*name],
            get_svc(&client, &ns, name).await.resource_version(),
            "{name} written again: {}",
            ctl.log_tail(40)
        );
    }
}

#[tokio::test]
async fn c08_unusable_pool_entries_are_named() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    let pools = Api::<IPAddressPool>::all(client.clone());
    for bad in ["-", "", "198.51.100.30-198.51.100.20", "198.51.100.300/32"] {
        let pool = IPAddressPool::new(
            "bad",
            IPAddressPoolSpec {
                addresses: vec![bad.into()],
                auto_assign: true,
                avoid_buggy_ips: false,
                allow_sharing_across_namespaces: false,
                service_allocation: None,
                auto_addresses: None,
            },
        );
        match pools.create(&PostParams::default(), &pool).await {
            Err(kube::Error::Api(e)) => assert!(
                e.message.contains(&format!("\"{bad}\"")),
                "{bad:?}: {}",
                e.message
            ),
            other => panic!("{bad:?} accepted: {other:?}"),
        }
    }
    let ns = namespace::fresh(&client, "c08").await.unwrap();
    let _ctl = start_controller(&cluster, "c08", &[]);
    create_service(&client, &lb_service(&ns, "svc", &[("TCP", 80)], "Cluster"))
        .await
        .unwrap();
    wait_event(
        &client,
        &ns,
        "svc",
        "AllocationFailed",
        "no pool can serve this Service",
    )
    .await;
    create_pool(&client, "fixed", &["198.51.100.20-198.51.100.30"])
        .await
        .unwrap();
    wait_ips(&client, &ns, "svc", &["198.51.100.20"]).await;
}

async fn pool_counts(client: &Client, name: &str) -> Option<(i64, i64, i64, i64)> {
    let p = Api::<IPAddressPool>::all(client.clone())
        .get(name)
        .await
        .ok()?;
    let s = p.status?;
    Some((
        s.assigned_ipv4,
        s.available_ipv4,
        s.assigned_ipv6,
        s.available_ipv6,
    ))
}

/// A pool with an entry in a forbidden block (issue 10 item 6), stored before the CRD had the rule
/// (installed here with the rule taken out, then the full CRD again): the API server keeps it, and
/// the controller must treat it as refused. It is named first, so without the rule its good
/// entry would be used.
#[tokio::test]
async fn forbidden_entries_stored_before_the_rule_serve_nothing() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let (_, crd) = ferrolb_crds::manifests::crds()
        .into_iter()
        .find(|(_, c)| c.spec.names.kind == "IPAddressPool")
        .unwrap();
    let mut old = serde_json::to_value(&crd).unwrap();
    let rules = old
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/addresses/items/x-kubernetes-validations")
        .and_then(serde_json::Value::as_array_mut)
        .unwrap();
    let before = rules.len();
    rules.retain(|r| !r.to_string().contains("never a LoadBalancer IP"));
    assert_eq!(before - rules.len(), FORBIDDEN_BLOCKS.len());
    let pp = PatchParams::apply("ferrolb-tests").force();
    crds.patch("ipaddresspools.ferrolb.io", &pp, &Patch::Apply(&old))
        .await
        .unwrap();
    let entries = ["198.51.100.0/28", "126.255.255.250-128.0.0.5"];
    wait_for(
        "the old CRD admits the pool",
        Duration::from_secs(20),
        || async { create_pool(&client, "a-legacy", &entries).await.is_ok() },
    )
    .await;
    cluster.install_crds().await.unwrap();
    let pools = Api::<IPAddressPool>::all(client.clone());
    let probe = IPAddressPool::new(
        "refused",
        IPAddressPoolSpec {
            addresses: entries.iter().map(|a| (*a).into()).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            allow_sharing_across_namespaces: false,
            service_allocation: None,
            auto_addresses: None,
        },
    );
    let dry_run = PostParams {
        dry_run: true,
        ..Default::default()
    };
    wait_for(
        "the CRD refuses such pools again",
        Duration::from_secs(20),
        || async {
            matches!(
                pools.create(&dry_run, &probe).await,
                Err(kube::Error::Api(e)) if e.message.contains("never a LoadBalancer IP")
            )
        },
    )
    .await;
    create_pool(&client, "good", &["203.0.113.0/28"])
        .await
        .unwrap();

    let ns = namespace::fresh(&client, "forbidden").await.unwrap();
    let _ctl = start_controller(&cluster, "forbidden", &[]);
    create_service(&client, &lb_service(&ns, "svc", &[("TCP", 80)], "Cluster"))
        .await
        .unwrap();
    wait_ips(&client, &ns, "svc", &["203.0.113.1"]).await;
    let condition = || async {
        let p = pools.get("a-legacy").await.ok()?;
        p.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Invalid")
    };
    wait_for(
        "Invalid=True, ForbiddenAddresses",
        Duration::from_secs(20),
        || async {
            condition()
                .await
                .is_some_and(|c| c.status == "True" && c.reason == "ForbiddenAddresses")
        },
    )
    .await;
    let message = condition().await.unwrap().message;
    assert!(
        message.contains(
            "spec.addresses[1]: addresses entry \"126.255.255.250-128.0.0.5\" overlaps 127.0.0.0/8"
        ),
        "{message}"
    );
}

#[tokio::test]
async fn c09_big_ipv6_pools() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    let ns = namespace::fresh(&client, "c09").await.unwrap();
    let _ctl = start_controller(&cluster, "c09", &[]);
    let mut counts = Vec::new();
    for entries in [
        ["2001:db8:0:3::/64", "198.51.100.0/24"],
        ["198.51.100.0/24", "2001:db8:0:3::/64"],
    ] {
        create_pool(&client, "big", &entries).await.unwrap();
        wait_for("pool status", Duration::from_secs(20), || async {
            pool_counts(&client, "big").await.is_some()
        })
        .await;
        counts.push(pool_counts(&client, "big").await.unwrap());
        delete_pool(&client, "big").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(counts[0], counts[1]);
    assert_eq!(counts[0], (0, 254, 0, i64::MAX));

    create_pool(
        &client,
        "three",
        &[
            "2001:db8:0:4::/64",
            "2001:db8:0:5::/64",
            "2001:db8:0:6::/64",
        ],
    )
    .await
    .unwrap();
    for i in 0..3 {
        create_service(
            &client,
            &families(
                lb_service(&ns, &format!("v6-{i}"), &[("TCP", 80)], "Cluster"),
                &["IPv6"],
                "SingleStack",
            ),
        )
        .await
        .unwrap();
    }
    // cases.md writes this address as `2001:db8:0:6::ffff:ffff:ffff:fffe`, which is not valid IPv6
    // (`::` standing for no group); the address meant is the one below.
    let req = annotate(
        families(
            lb_service(&ns, "req", &[("TCP", 80)], "Cluster"),
            &["IPv6"],
            "SingleStack",
        ),
        &[(
            "ferrolb.io/loadBalancerIPs",
            "2001:db8:0:6:ffff:ffff:ffff:fffe",
        )],
    );
    create_service(&client, &req).await.unwrap();
    wait_ips(&client, &ns, "req", &["2001:db8:0:6:ffff:ffff:ffff:fffe"]).await;
    let mut all = BTreeSet::new();
    for i in 0..3 {
        wait_for("v6 address", Duration::from_secs(20), || async {
            ips(&client, &ns, &format!("v6-{i}")).await.len() == 1
        })
        .await;
        all.insert(ips(&client, &ns, &format!("v6-{i}")).await.remove(0));
    }
    assert_eq!(all.len(), 3);
    wait_for("counts of three /64s", Duration::from_secs(20), || async {
        pool_counts(&client, "three").await == Some((0, 0, 4, i64::MAX))
    })
    .await;
    delete_pool(&client, "three").await;

    apply_pool(
        &client,
        "tiny",
        json!({"addresses": ["198.51.100.0/32"], "avoidBuggyIPs": true}),
    )
    .await;
    wait_for("tiny pool status", Duration::from_secs(20), || async {
        pool_counts(&client, "tiny").await == Some((0, 0, 0, 0))
    })
    .await;
    create_service(
        &client,
        &families(
            lb_service(&ns, "v4", &[("TCP", 80)], "Cluster"),
            &["IPv4"],
            "SingleStack",
        ),
    )
    .await
    .unwrap();
    wait_event(
        &client,
        &ns,
        "v4",
        "AllocationFailed",
        "no pool can serve this Service",
    )
    .await;
}

#[tokio::test]
async fn ha_leader_killed_in_a_burst_of_creations() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    // IPv6 Services: the cluster's IPv4 ClusterIP range (/26) is too small for the burst.
    create_pool(&client, "pool", &["2001:db8:1::/112"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "ha").await.unwrap();
    let one = start_controller(&cluster, "ha-1", &[]);
    wait_for("a leader", Duration::from_secs(15), || async {
        holder(&client).await.is_some()
    })
    .await;
    let two = start_controller(&cluster, "ha-2", &[]);
    let leader = holder(&client).await.unwrap();
    let total = 200;
    let create = |range: std::ops::Range<usize>| {
        let tasks: Vec<_> = range
            .map(|i| {
                let client = client.clone();
                let ns = ns.clone();
                tokio::spawn(async move {
                    let svc = lb_service(&ns, &format!("svc-{i:03}"), &[("TCP", 80)], "Cluster");
                    create_service(&client, &families(svc, &["IPv6"], "SingleStack")).await
                })
            })
            .collect();
        async move {
            for t in tasks {
                t.await.unwrap().unwrap();
            }
        }
    };
    create(0..total / 2).await;
    // Kill the leader while it is writing the first half, without letting it release the Lease.
    let victim = if leader == "ha-1" { &one } else { &two };
    victim.process().signal("KILL");
    create(total / 2..total).await;
    let survivor = if leader == "ha-1" { "ha-2" } else { "ha-1" };
    wait_for("the standby takes over", Duration::from_secs(20), || {
        lease_holder_is(&client, survivor)
    })
    .await;
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    wait_for("every Service has its IP", Duration::from_secs(60), || {
        let api = api.clone();
        async move {
            let list = api.list(&ListParams::default()).await.unwrap();
            list.items
                .iter()
                .filter(|s| ingress_ips(s).len() == 1)
                .count()
                == total
        }
    })
    .await;
    let list = api.list(&ListParams::default()).await.unwrap();
    let distinct: BTreeSet<String> = list.items.iter().flat_map(ingress_ips).collect();
    assert_eq!(distinct.len(), total, "duplicated addresses");
    let survivor_log = if survivor == "ha-1" { &one } else { &two };
    let log = std::fs::read_to_string(survivor_log.process().log_path()).unwrap();
    assert!(
        log.contains("leading: rebuilding the allocation table"),
        "{log}"
    );
}

#[tokio::test]
async fn classes_and_bad_annotations() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "cls").await.unwrap();
    let ctl = start_controller(&cluster, "cls", &["--default-class=false"]);
    let with_class = |name: &str, class: Option<&str>| {
        let mut s = lb_service(&ns, name, &[("TCP", 80)], "Cluster");
        s.spec.as_mut().unwrap().load_balancer_class = class.map(str::to_owned);
        s
    };
    create_service(&client, &with_class("classless", None))
        .await
        .unwrap();
    create_service(&client, &with_class("other", Some("example.com/other")))
        .await
        .unwrap();
    create_service(&client, &with_class("ours", Some("ferrolb.io/l2")))
        .await
        .unwrap();
    wait_ips(&client, &ns, "ours", &["198.51.100.1"]).await;
    // Bad input: a Warning naming the problem, no address, no crash.
    let bad = annotate(
        with_class("bad", Some("ferrolb.io/l2")),
        &[("ferrolb.io/loadBalancerIPs", "198.51.100.5,nope")],
    );
    create_service(&client, &bad).await.unwrap();
    wait_event(
        &client,
        &ns,
        "bad",
        "AllocationFailed",
        "\"nope\" is not an IP address",
    )
    .await;
    // Conflicting spellings: ours wins, with a Warning.
    let conflict = annotate(
        with_class("conflict", Some("ferrolb.io/l2")),
        &[
            ("ferrolb.io/loadBalancerIPs", "198.51.100.7"),
            ("metallb.universe.tf/loadBalancerIPs", "198.51.100.8"),
        ],
    );
    create_service(&client, &conflict).await.unwrap();
    wait_ips(&client, &ns, "conflict", &["198.51.100.7"]).await;
    wait_event(
        &client,
        &ns,
        "conflict",
        "AnnotationConflict",
        "metallb.universe.tf/loadBalancerIPs",
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for name in ["classless", "other"] {
        let s = get_svc(&client, &ns, name).await;
        assert!(
            ingress_ips(&s).is_empty() && !written_by_controller(&s),
            "{name} was touched: {}",
            ctl.log_tail(40)
        );
        assert!(
            events(&client, &ns, name).await.is_empty(),
            "{name} got Events"
        );
    }
    assert!(ips(&client, &ns, "bad").await.is_empty());
    // The controller is still alive and serving after the bad input.
    create_service(&client, &with_class("after", Some("ferrolb.io/l2")))
        .await
        .unwrap();
    wait_ips(&client, &ns, "after", &["198.51.100.2"]).await;
}

/// `(note, occurrences)` of the Events of `reason` regarding the Service; occurrences counts an
/// Event series (the recorder folds repeats into one object) as its count.
async fn occurrences(client: &Client, ns: &str, name: &str, reason: &str) -> Vec<(String, i32)> {
    Api::<Event>::namespaced(client.clone(), ns)
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .map(|e| {
            let n = e.series.as_ref().map_or(1, |s| s.count);
            (e.note.unwrap_or_default(), n)
        })
        .collect()
}

/// R8: another field manager (`other-lb`) keeps rewriting the status of a class-less Service.
/// ferrolb writes at most 3 times per spec, then leaves the status alone with one Warning Event
/// naming `other-lb`, keeps the address reserved, tries again (bounded again) after a spec change,
/// and once more after the long backoff — when, the other writer gone, it wins.
#[tokio::test]
async fn r8_write_war_backs_off() {
    use kube::runtime::{WatchStreamExt, watcher};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    const OURS: &str = "198.51.100.1";
    const BACKOFF_S: u64 = 15;
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "r8").await.unwrap();
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    let backoff_flag = format!("--status-conflict-backoff={BACKOFF_S}s");
    let ctl = start_controller(&cluster, "r8", &[&backoff_flag]);
    create_service(
        &client,
        &lb_service(&ns, "svc-a", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-a", &[OURS]).await;
    let generation = get_svc(&client, &ns, "svc-a").await.metadata.generation;
    println!("svc-a metadata.generation = {generation:?} (not maintained for Services)");

    // Every status change of svc-a as the API server records it: a change into our address is a
    // write of ours, any other change one of the other writer.
    let ours_n = Arc::new(AtomicUsize::new(0));
    let theirs_n = Arc::new(AtomicUsize::new(0));
    let watch = {
        let (ours_n, theirs_n) = (ours_n.clone(), theirs_n.clone());
        let cfg = watcher::Config::default().fields("metadata.name=svc-a");
        let stream = watcher(api.clone(), cfg).applied_objects();
        tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            let mut last: Option<Vec<String>> = None;
            while let Some(Ok(svc)) = futures::StreamExt::next(&mut stream).await {
                let now = ingress_ips(&svc);
                if last.as_ref().is_some_and(|l| *l != now) {
                    if now == [OURS] {
                        ours_n.fetch_add(1, Ordering::SeqCst);
                    } else {
                        theirs_n.fetch_add(1, Ordering::SeqCst);
                    }
                }
                last = Some(now);
            }
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;

    // The other writer: every 200 ms for 20 s, alternating two addresses so that the status
    // keeps changing even while ferrolb stays out of it.
    let started = Instant::now();
    let attempts = Arc::new(AtomicUsize::new(0));
    let writer = {
        let (api, attempts) = (api.clone(), attempts.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while started.elapsed() < Duration::from_secs(20) {
                let ip = if i % 2 == 0 {
                    "192.0.2.77"
                } else {
                    "192.0.2.78"
                };
                let patch = json!({"apiVersion": "v1", "kind": "Service",
                    "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
                api.patch_status(
                    "svc-a",
                    &PatchParams::apply("other-lb").force(),
                    &Patch::Apply(&patch),
                )
                .await
                .unwrap();
                attempts.fetch_add(1, Ordering::SeqCst);
                i += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
    };
    let conflicts = "ferrolb_controller_status_write_conflicts_total{manager=\"other-lb\"}";

    // Phase 1: ferrolb backs off with one Event naming other-lb and the fix.
    let t = Instant::now();
    let note = loop {
        let seen = occurrences(&client, &ns, "svc-a", "StatusWriteConflict").await;
        if let Some((note, _)) = seen.into_iter().find(|e| e.0.contains("\"other-lb\"")) {
            break note;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no StatusWriteConflict Event naming other-lb; events {:?}; log {}",
            events(&client, &ns, "svc-a").await,
            ctl.log_tail(40)
        );
        tokio::time::sleep(Duration::from_millis(150)).await;
    };
    assert!(
        note.contains("--default-class=false") && note.contains("spec.loadBalancerClass"),
        "{note}"
    );
    assert_eq!(
        metric(&ctl, "ferrolb_controller_status_contested").await,
        1.0
    );
    assert_eq!(metric(&ctl, conflicts).await, 1.0);
    // The address stays reserved: a new Service gets the next one.
    create_service(
        &client,
        &lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    wait_ips(&client, &ns, "svc-b", &["198.51.100.2"]).await;
    assert_eq!(pool_counts(&client, "pool").await.unwrap().0, 2);
    while started.elapsed() < Duration::from_secs(8) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let phase1 = (
        ours_n.load(Ordering::SeqCst),
        theirs_n.load(Ordering::SeqCst),
    );
    // The first write (allocation) came before the watch; the watch sees the repeats.
    assert!(
        phase1.0 <= 2,
        "{} writes of ours for one spec: {}",
        phase1.0 + 1,
        ctl.log_tail(40)
    );
    let events1 = occurrences(&client, &ns, "svc-a", "StatusWriteConflict").await;
    assert_eq!(events1.iter().map(|e| e.1).sum::<i32>(), 1, "{events1:?}");

    // Phase 2: a spec change (a port) is a new episode: ferrolb tries again, bounded again.
    let spec = json!({"spec": {"ports": [{"name": "tcp-8080", "protocol": "TCP", "port": 8080}]}});
    api.patch("svc-a", &PatchParams::default(), &Patch::Merge(&spec))
        .await
        .unwrap();
    wait_for("a second back-off", Duration::from_secs(10), || async {
        metric(&ctl, conflicts).await == 2.0
    })
    .await;
    writer.await.unwrap();
    let phase2 = (
        ours_n.load(Ordering::SeqCst) - phase1.0,
        theirs_n.load(Ordering::SeqCst) - phase1.1,
    );
    assert!(
        (1..=3).contains(&phase2.0),
        "{} writes of ours after the spec change: {}",
        phase2.0,
        ctl.log_tail(40)
    );
    let events2 = occurrences(&client, &ns, "svc-a", "StatusWriteConflict").await;
    assert!(
        events2.iter().all(|e| e.0.contains("\"other-lb\"")),
        "{events2:?}"
    );
    assert_eq!(
        events2.iter().map(|e| e.1).sum::<i32>(),
        2,
        "one per spec: {events2:?}"
    );
    assert_eq!(
        metric(&ctl, "ferrolb_controller_status_contested").await,
        1.0
    );

    // Phase 3: the other writer has stopped; after the backoff ferrolb writes once and wins.
    wait_for(
        "ferrolb to retry after the backoff",
        Duration::from_secs(BACKOFF_S + 10),
        || async { ips(&client, &ns, "svc-a").await == [OURS] },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        metric(&ctl, "ferrolb_controller_status_contested").await,
        0.0
    );
    let ours_total = ours_n.load(Ordering::SeqCst) + 1;
    let theirs_total = theirs_n.load(Ordering::SeqCst);
    println!(
        "write war: other-lb {} attempts, {theirs_total} status changes; ferrolb {ours_total} writes \
         (phase 1: {}, after the spec change: {}, after the backoff: {})",
        attempts.load(Ordering::SeqCst),
        phase1.0 + 1,
        phase2.0,
        ours_total - phase1.0 - 1 - phase2.0,
    );
    assert_eq!(ours_total - phase1.0 - 1 - phase2.0, 1);
    watch.abort();
}

/// Issue #28: an automatic pool (`spec.autoAddresses`) on the real API server, with a node
/// report written by hand in the speakers' namespace standing in for the speaker (reports are
/// plain objects; the speaker's side is its own test). No addresses before a report, nor before
/// the report lists the candidates probed with no answer; then the Service gets the lowest of
/// the top candidates, the gateway, Node addresses and an address in
/// use are left out, and the pool's status says which prefix was chosen and what was skipped.
#[tokio::test]
async fn auto_pool_takes_the_top_of_the_reported_network() {
    let _serial = SERIAL.lock().await;
    let (cluster, client) = setup().await;
    ferrolb_tests::lab::create_node(&client, "kind-worker", "172.18.0.3".parse().unwrap())
        .await
        .unwrap();
    ferrolb_tests::lab::create_node(
        &client,
        "kind-control-plane",
        "172.18.255.252".parse().unwrap(),
    )
    .await
    .unwrap();
    apply_pool(&client, "laptop", json!({ "autoAddresses": { "size": 4 } })).await;
    apply_pool(
        &client,
        "laptop-l2",
        json!({ "autoAddresses": { "size": 1 } }),
    )
    .await;
    let ns = namespace::fresh(&client, "auto").await.unwrap();
    let _ctl = start_controller(&cluster, "auto", &[]);
    create_service(&client, &lb_service(&ns, "web", &[("TCP", 80)], "Cluster"))
        .await
        .unwrap();
    let pools = Api::<IPAddressPool>::all(client.clone());
    let ready_reason = |p: &IPAddressPool| {
        p.status
            .as_ref()
            .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
            .map(|c| c.reason.clone())
    };
    wait_for(
        "the pool waits for a report",
        Duration::from_secs(20),
        || {
            let pools = pools.clone();
            async move {
                ready_reason(&pools.get("laptop").await.unwrap()).as_deref()
                    == Some("WaitingForNodeNetwork")
            }
        },
    )
    .await;
    assert!(ips(&client, &ns, "web").await.is_empty());

    // What the speaker of kind-worker writes: its eth0 network, the gateway on it, and a
    // candidate another host answered.
    let system = Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone());
    let _ = system
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({ "metadata": { "name": "ferrolb-system" } })).unwrap(),
        )
        .await;
    let report: ferrolb_crds::L2Announcement = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Announcement",
        "metadata": { "name": "node-kind-worker", "namespace": "ferrolb-system" },
        "spec": {
            "ip": "", "node": "kind-worker",
            "membership": { "members": 2, "observed": "2026-01-01T00:00:00Z" },
            "networks": [{ "interface": "eth0", "prefix": "172.18.0.3/16", "gateway": "172.18.255.254" }],
            "inUse": [{ "ip": "172.18.255.253", "mac": "02:42:ac:12:ff:fd" }],
        },
    }))
    .unwrap();
    let reports = Api::<ferrolb_crds::L2Announcement>::namespaced(client.clone(), "ferrolb-system");
    reports
        .create(&PostParams::default(), &report)
        .await
        .unwrap();
    // The candidates are known, none is probed yet: nothing is handed out.
    wait_for("the pool waits for probes", Duration::from_secs(20), || {
        let pools = pools.clone();
        async move {
            ready_reason(&pools.get("laptop").await.unwrap()).as_deref() == Some("WaitingForProbes")
        }
    })
    .await;
    assert!(ips(&client, &ns, "web").await.is_empty());
    // The speaker probed the candidates and nobody answered.
    reports
        .patch(
            "node-kind-worker",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": { "unanswered": ["172.18.255.248-172.18.255.251"] }
            })),
        )
        .await
        .unwrap();
    // Candidates top down: .255.253 (in use: skipped, one more taken), .255.251, .255.250,
    // .255.249, .255.248 — .255.255 is the broadcast address, .255.254 the gateway, .255.252 a
    // Node. Pools are tried by name: "laptop" first, and its lowest free address is handed out.
    wait_ips(&client, &ns, "web", &["172.18.255.248"]).await;
    let laptop = pools.get("laptop").await.unwrap();
    let auto = laptop
        .status
        .as_ref()
        .and_then(|s| s.auto_addresses.clone())
        .unwrap();
    assert_eq!(auto.prefix.as_deref(), Some("172.18.0.0/16"));
    assert_eq!(auto.addresses, vec!["172.18.255.248-172.18.255.251"]);
    assert_eq!(
        (auto.skipped.as_slice(), auto.skipped_count),
        (
            &[
                "172.18.255.253 (answered by 02:42:ac:12:ff:fd, probed from node kind-worker)"
                    .to_owned()
            ][..],
            1
        )
    );
    // What the speakers read back: the same addresses (`Layout::of_pools`).
    assert_eq!(
        laptop.address_entries(),
        vec!["172.18.255.248-172.18.255.251"]
    );
    // A second automatic pool on the network (created after "laptop", or in the same second
    // with a later name) takes its window below laptop's window and probe-ahead
    // (.255.244-.255.251): .255.243, handed out once probed.
    wait_for(
        "laptop-l2 waits for a probe below laptop's candidates",
        Duration::from_secs(20),
        || {
            let pools = pools.clone();
            async move {
                let p = pools.get("laptop-l2").await.unwrap();
                ready_reason(&p).as_deref() == Some("WaitingForProbes")
                    && p.status
                        .as_ref()
                        .and_then(|s| s.auto_addresses.as_ref())
                        .is_some_and(|a| a.candidates == vec!["172.18.255.239-172.18.255.243"])
            }
        },
    )
    .await;
    reports
        .patch(
            "node-kind-worker",
            &PatchParams::default(),
            &Patch::Merge(json!({
                "spec": { "unanswered": ["172.18.255.239-172.18.255.251"] }
            })),
        )
        .await
        .unwrap();
    wait_for("laptop-l2 resolved", Duration::from_secs(20), || {
        let pools = pools.clone();
        async move {
            pools.get("laptop-l2").await.unwrap().address_entries() == vec!["172.18.255.243/32"]
        }
    })
    .await;
    assert_eq!(
        pools.get("laptop").await.unwrap().address_entries(),
        vec!["172.18.255.248-172.18.255.251"]
    );
}
