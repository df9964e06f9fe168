//! Controller field cases of `shared/cases.md` against MetalLB v0.15.2's controller (issue #11),
//! opt-in (`cargo test -p ferrolb-tests --features extended --test metallb_controller_cases -- --ignored
//! --nocapture --test-threads 1`): the same expectations as ferrolb's own
//! `tests/tests/controller_cases.rs`, with MetalLB's objects (`metallb.io` pools, the
//! `metallb.io/loadBalancerIPs` annotation) and in the case's own words where ferrolb's test names
//! ferrolb's Event messages. Each expectation is printed as PASS or FAIL ([`Verdicts`]); results
//! go into docs/comparison.md. Never change a case to make MetalLB pass.
//!
//! The lab has no nodes (the controller needs none): the API server, MetalLB's CRDs and its
//! controller (webhooks and certificate rotation off, no leader election, as its single-replica
//! Deployment runs).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::Ipv6Addr;
use std::time::{Duration, Instant};

use ferrolb_tests::lab::scenario::typed_events_for;
use ferrolb_tests::lab::{Implementation, Lab, bench, metallb};
use ferrolb_tests::namespace;
use ferrolb_tests::objects::{create_service, ingress_ips, lb_service, set_ingress};
use ferrolb_tests::verdicts::Verdicts;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::{Client, ResourceExt};
use serde_json::json;

/// How long an expected change may take.
const SETTLE: Duration = Duration::from_secs(20);

async fn lab() -> (Lab, Client) {
    let mut lab = Lab::start_implementation(Implementation::MetalLb, 0, 0)
        .await
        .unwrap();
    lab.start_metallb_controller().unwrap();
    let client = lab.client().await.unwrap();
    (lab, client)
}

async fn svc(client: &Client, ns: &str, name: &str) -> Service {
    Api::<Service>::namespaced(client.clone(), ns)
        .get(name)
        .await
        .unwrap()
}

async fn ips(client: &Client, ns: &str, name: &str) -> Vec<String> {
    ingress_ips(&svc(client, ns, name).await)
}

/// Waits up to [`SETTLE`] until `cond` holds for the Service's ingress IPs; returns the last IPs
/// seen.
async fn wait_ips(
    client: &Client,
    ns: &str,
    name: &str,
    cond: impl Fn(&[String]) -> bool,
) -> Vec<String> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let now = ips(client, ns, name).await;
        if cond(&now) || tokio::time::Instant::now() >= deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Waits up to [`SETTLE`] for a Warning Event on the Service; returns `(reason, note)` of the
/// Warnings seen.
async fn wait_warning(client: &Client, ns: &str, name: &str) -> Vec<(String, String)> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let found: Vec<(String, String)> = typed_events_for(client, ns, name)
            .await
            .unwrap()
            .into_iter()
            .filter(|(t, _, _)| t == "Warning")
            .map(|(_, reason, note)| (reason, note))
            .collect();
        if !found.is_empty() || tokio::time::Instant::now() >= deadline {
            return found;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Waits up to [`SETTLE`] for an Event on the Service for which `pred(type, reason, note)`
/// holds; returns whether one came and every Event seen.
async fn wait_event_matching(
    client: &Client,
    ns: &str,
    name: &str,
    pred: impl Fn(&str, &str, &str) -> bool,
) -> (bool, Vec<(String, String, String)>) {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let events = typed_events_for(client, ns, name).await.unwrap();
        let found = events.iter().any(|(t, r, n)| pred(t, r, n));
        if found || tokio::time::Instant::now() >= deadline {
            return (found, events);
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn annotated(mut s: Service, pairs: &[(&str, &str)]) -> Service {
    s.metadata.annotations = Some(
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    s
}

/// One C-01 variant: `svc-b` (older, pending: the pool is full) and `svc-a` holding
/// `198.51.100.10` (optionally requested with `metallb.io/loadBalancerIPs`), the watch delivering
/// `svc-b` first or not (namespace names order the initial list); the controller restarted
/// twice, each restart judged on its own writes to `svc-a` (the second against the state the
/// first left).
async fn c01_variant(v: &mut Verdicts, a_requests: bool, b_first: bool) {
    let (mut lab, client) = lab().await;
    lab.stop_metallb_controller();
    metallb::create_pool(&client, "pool", &["198.51.100.10/32"])
        .await
        .unwrap();
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
    create_service(
        &client,
        &lb_service(&ns_b, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut a = lb_service(&ns_a, "svc-a", &[("TCP", 80)], "Cluster");
    if a_requests {
        a = annotated(a, &[("metallb.io/loadBalancerIPs", "198.51.100.10")]);
    }
    create_service(&client, &a).await.unwrap();
    set_ingress(&client, &ns_a, "svc-a", &["198.51.100.10"])
        .await
        .unwrap();
    let mut before = svc(&client, &ns_a, "svc-a").await;
    let variant = format!(
        "(svc-a {}, svc-b delivered {})",
        if a_requests {
            "requested the IP"
        } else {
            "did not request it"
        },
        if b_first { "first" } else { "second" }
    );
    for round in 1..=2 {
        lab.start_metallb_controller().unwrap();
        let warnings = wait_warning(&client, &ns_b, "svc-b").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let a_now = svc(&client, &ns_a, "svc-a").await;
        v.check(
            ingress_ips(&a_now) == ["198.51.100.10"],
            &format!("restart {round} {variant}: svc-a keeps 198.51.100.10"),
            format!(
                "svc-a has {:?}, svc-b has {:?}",
                ingress_ips(&a_now),
                ips(&client, &ns_b, "svc-b").await
            ),
        );
        v.check(
            a_now.resource_version() == before.resource_version(),
            &format!("restart {round} {variant}: no write to svc-a at all"),
            format!(
                "resourceVersion moved; annotations now {:?}, managers {:?}",
                a_now.annotations(),
                a_now
                    .metadata
                    .managed_fields
                    .iter()
                    .flatten()
                    .map(|m| (m.manager.clone(), m.subresource.clone()))
                    .collect::<Vec<_>>()
            ),
        );
        v.check(
            ips(&client, &ns_b, "svc-b").await.is_empty(),
            &format!("restart {round} {variant}: svc-b stays pending"),
            format!("svc-b has {:?}", ips(&client, &ns_b, "svc-b").await),
        );
        v.check(
            warnings.iter().any(|(r, _)| r == "AllocationFailed"),
            &format!("restart {round} {variant}: svc-b has an AllocationFailed Event"),
            format!("{warnings:?}"),
        );
        lab.stop_metallb_controller();
        // The next restart is judged on its own writes.
        before = a_now;
    }
}

/// C-01: restart must not steal IPs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c01_restart_must_not_steal_ips() {
    let mut v = Verdicts::new("C-01");
    c01_variant(&mut v, false, true).await;
    c01_variant(&mut v, false, false).await;
    c01_variant(&mut v, true, true).await;
    v.finish();
}

/// C-04: a type change frees the IP for waiting Services — (1) `svc-a` to ClusterIP: its status
/// is cleared and the waiting `svc-c` gets the IP at once; (2) back to LoadBalancer: no stale IP,
/// pending; (3) `svc-b` deleted: `svc-d`, which requested `svc-b`'s address, gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c04_type_change_frees_the_ip_for_waiting_services() {
    let mut v = Verdicts::new("C-04");
    let (_lab, client) = lab().await;
    metallb::create_pool(&client, "pool", &["198.51.100.10/31"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c04").await.unwrap();
    create_service(
        &client,
        &lb_service(&ns, "svc-a", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let a_ip = wait_ips(&client, &ns, "svc-a", |i| i.len() == 1).await;
    create_service(
        &client,
        &lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let b_ip = wait_ips(&client, &ns, "svc-b", |i| i.len() == 1).await;
    assert!(
        a_ip.len() == 1 && b_ip.len() == 1 && a_ip != b_ip,
        "setup: svc-a {a_ip:?}, svc-b {b_ip:?}"
    );
    create_service(
        &client,
        &lb_service(&ns, "svc-c", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    create_service(
        &client,
        &annotated(
            lb_service(&ns, "svc-d", &[("TCP", 80)], "Cluster"),
            &[("metallb.io/loadBalancerIPs", b_ip[0].as_str())],
        ),
    )
    .await
    .unwrap();
    let d_warn = wait_warning(&client, &ns, "svc-d").await;
    v.check(
        ips(&client, &ns, "svc-c").await.is_empty() && ips(&client, &ns, "svc-d").await.is_empty(),
        "setup: svc-c and svc-d pending",
        format!("svc-d warnings {d_warn:?}"),
    );

    let api = Api::<Service>::namespaced(client.clone(), &ns);
    api.patch(
        "svc-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"type": "ClusterIP"}})),
    )
    .await
    .unwrap();
    let a_now = wait_ips(&client, &ns, "svc-a", <[String]>::is_empty).await;
    v.check(
        a_now.is_empty(),
        "(1) svc-a's ingress status is cleared",
        format!("{a_now:?}"),
    );
    let c_now = wait_ips(&client, &ns, "svc-c", |i| i == a_ip.as_slice()).await;
    v.check(
        c_now == a_ip,
        "(1) the waiting svc-c gets the freed IP at once",
        format!("svc-c has {c_now:?} after {SETTLE:?}"),
    );

    api.patch(
        "svc-a",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"type": "LoadBalancer"}})),
    )
    .await
    .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let a_back = ips(&client, &ns, "svc-a").await;
    v.check(
        a_back.is_empty(),
        "(2) back to LoadBalancer, svc-a gets no stale IP: pending",
        format!("{a_back:?}"),
    );

    api.delete("svc-b", &DeleteParams::default()).await.unwrap();
    let d_now = wait_ips(&client, &ns, "svc-d", |i| i == b_ip.as_slice()).await;
    v.check(
        d_now == b_ip,
        "(3) svc-b deleted: svc-d gets the address it requested",
        format!(
            "svc-d has {d_now:?}, svc-a {:?}",
            ips(&client, &ns, "svc-a").await
        ),
    );
    v.finish();
}

/// C-06: priority without selectors — `pool-a` (priority 1) is used before `pool-b` (priority
/// 2); a pool with `serviceAllocation: {}` serves Services as one without it does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c06_priority_without_selectors() {
    let mut v = Verdicts::new("C-06");
    let (_lab, client) = lab().await;
    metallb::apply_pool(
        &client,
        "pool-b",
        json!({"addresses": ["203.0.113.0/28"], "serviceAllocation": {"priority": 2}}),
    )
    .await
    .unwrap();
    metallb::apply_pool(
        &client,
        "pool-a",
        json!({"addresses": ["198.51.100.0/28"], "serviceAllocation": {"priority": 1}}),
    )
    .await
    .unwrap();
    let ns = namespace::fresh(&client, "c06").await.unwrap();
    create_service(
        &client,
        &lb_service(&ns, "svc-1", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let got = wait_ips(&client, &ns, "svc-1", |i| !i.is_empty()).await;
    v.check(
        got.len() == 1 && got[0].starts_with("198.51.100."),
        "a new IPv4 Service gets an address from pool-a (priority 1)",
        format!("{got:?}"),
    );
    Api::<Service>::namespaced(client.clone(), &ns)
        .delete("svc-1", &DeleteParams::default())
        .await
        .unwrap();
    metallb::delete_pool(&client, "pool-a").await.unwrap();
    metallb::delete_pool(&client, "pool-b").await.unwrap();
    metallb::apply_pool(
        &client,
        "pool-z",
        json!({"addresses": ["203.0.113.16/28"], "serviceAllocation": {}}),
    )
    .await
    .unwrap();
    create_service(
        &client,
        &lb_service(&ns, "svc-2", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let got = wait_ips(&client, &ns, "svc-2", |i| !i.is_empty()).await;
    let warnings = if got.is_empty() {
        wait_warning(&client, &ns, "svc-2").await
    } else {
        Vec::new()
    };
    v.check(
        got.len() == 1 && got[0].starts_with("203.0.113."),
        "the only pool, with serviceAllocation: {}, serves a Service as one without it",
        format!("svc-2 has {got:?}; warnings {warnings:?}"),
    );
    v.finish();
}

/// C-07: a foreign status (another implementation's entries) is replaced by one fresh pool
/// address, an Event names what was discarded, and nothing is written again for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c07_foreign_status_is_replaced_not_looped_on() {
    let mut v = Verdicts::new("C-07");
    let (mut lab, client) = lab().await;
    lab.stop_metallb_controller();
    metallb::create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c07").await.unwrap();
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    let variants: Vec<(&str, serde_json::Value, &str)> = vec![
        (
            "two-node-ips",
            json!([{"ip": "192.0.2.4"}, {"ip": "192.0.2.5"}]),
            "192.0.2.4",
        ),
        (
            "three",
            json!([{"ip": "192.0.2.4"}, {"ip": "192.0.2.5"}, {"ip": "192.0.2.6"}]),
            "192.0.2.4",
        ),
        (
            "hostname",
            json!([{"hostname": "lb.example.com"}]),
            "lb.example.com",
        ),
        ("v6-on-v4", json!([{"ip": "2001:db8::5"}]), "2001:db8::5"),
    ];
    for (name, ingress, _) in &variants {
        let mut s = lb_service(&ns, name, &[("TCP", 80)], "Cluster");
        let spec = s.spec.as_mut().unwrap();
        spec.ip_families = Some(vec!["IPv4".into()]);
        spec.ip_family_policy = Some("SingleStack".into());
        create_service(&client, &s).await.unwrap();
        let patch = json!({"apiVersion": "v1", "kind": "Service", "status": {"loadBalancer": {"ingress": ingress}}});
        api.patch_status(
            name,
            &PatchParams::apply("other-implementation").force(),
            &Patch::Apply(&patch),
        )
        .await
        .unwrap();
    }
    lab.start_metallb_controller().unwrap();
    let mut versions = Vec::new();
    for (name, _, discarded) in &variants {
        let got = wait_ips(&client, &ns, name, |i| {
            i.len() == 1 && i[0].starts_with("198.51.100.")
        })
        .await;
        v.check(
            got.len() == 1 && got[0].starts_with("198.51.100."),
            &format!("{name}: one fresh pool address replaces the foreign entries"),
            format!("{got:?}"),
        );
        let events = typed_events_for(&client, &ns, name).await.unwrap();
        v.check(
            events.iter().any(|(_, _, note)| note.contains(discarded)),
            &format!("{name}: an Event names what was discarded ({discarded})"),
            format!("{events:?}"),
        );
        versions.push(svc(&client, &ns, name).await.resource_version());
    }
    tokio::time::sleep(Duration::from_secs(30)).await;
    for ((name, _, _), rv) in variants.iter().zip(&versions) {
        let now = svc(&client, &ns, name).await;
        v.check(
            now.resource_version() == *rv,
            &format!("{name}: no further writes for 30 s"),
            format!("written again: ingress now {:?}", ingress_ips(&now)),
        );
    }
    v.finish();
}

fn with_families(mut s: Service, families: &[&str], policy: &str) -> Service {
    let spec = s.spec.as_mut().unwrap();
    spec.ip_families = Some(families.iter().map(|f| (*f).to_owned()).collect());
    spec.ip_family_policy = Some(policy.into());
    s
}

/// C-05: dual-stack with a single-family pool — PreferDualStack gets one IPv4 address and an
/// Event that IPv6 was not available; RequireDualStack stays pending with a clear reason; once
/// the pool gains an IPv6 range the first gains IPv6 without changing its IPv4 address; a
/// SingleStack IPv4 Service on the mixed pool gets exactly one IPv4 address.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c05_dual_stack_with_a_single_family_pool() {
    let mut v = Verdicts::new("C-05");
    let (_lab, client) = lab().await;
    metallb::create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c05").await.unwrap();
    let a = with_families(
        lb_service(&ns, "svc-a", &[("TCP", 80)], "Cluster"),
        &["IPv4", "IPv6"],
        "PreferDualStack",
    );
    create_service(&client, &a).await.unwrap();
    let a_ips = wait_ips(&client, &ns, "svc-a", |i| !i.is_empty()).await;
    v.check(
        a_ips.len() == 1 && a_ips[0].starts_with("198.51.100."),
        "PreferDualStack gets one IPv4 address",
        format!("{a_ips:?}"),
    );
    // MetalLB's own reason for the second family counts, whatever its wording.
    let (said, a_events) = wait_event_matching(&client, &ns, "svc-a", |_, r, n| {
        n.contains("IPv6") || r == "AdditionalAssignFailed"
    })
    .await;
    v.check(
        said,
        "an Event says IPv6 was not available",
        format!("{a_events:?}"),
    );
    let b = with_families(
        lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
        &["IPv4", "IPv6"],
        "RequireDualStack",
    );
    create_service(&client, &b).await.unwrap();
    let (clear, b_events) = wait_event_matching(&client, &ns, "svc-b", |t, _, n| {
        t == "Warning" && (n.contains("IPv6") || n.contains("family"))
    })
    .await;
    let b_ips = ips(&client, &ns, "svc-b").await;
    v.check(
        b_ips.is_empty(),
        "RequireDualStack stays pending",
        format!("{b_ips:?}"),
    );
    v.check(
        clear,
        "with a clear reason (a Warning Event naming the missing family)",
        format!("{b_events:?}"),
    );
    metallb::create_pool(&client, "pool", &["198.51.100.0/28", "2001:db8:0:1::/120"])
        .await
        .unwrap();
    let a_after = wait_ips(&client, &ns, "svc-a", |i| i.len() == 2).await;
    v.check(
        a_after.len() == 2 && a_after.contains(&a_ips[0]),
        "the pool gains IPv6: svc-a gains an IPv6 address, its IPv4 address unchanged",
        format!("before {a_ips:?}, after {a_after:?}"),
    );
    let b_after = wait_ips(&client, &ns, "svc-b", |i| i.len() == 2).await;
    v.check(
        b_after.len() == 2,
        "the pool gains IPv6: svc-b is served",
        format!("{b_after:?}"),
    );
    let c = with_families(
        lb_service(&ns, "svc-c", &[("TCP", 80)], "Cluster"),
        &["IPv4"],
        "SingleStack",
    );
    create_service(&client, &c).await.unwrap();
    let c_ips = wait_ips(&client, &ns, "svc-c", |i| !i.is_empty()).await;
    v.check(
        c_ips.len() == 1 && c_ips[0].starts_with("198.51.100."),
        "SingleStack IPv4 on the mixed pool: exactly one IPv4 address",
        format!("{c_ips:?}"),
    );
    v.finish();
}

/// C-02: sharing groups survive restarts and re-creation — `svc-a` TCP 80 and `svc-b` TCP 8080,
/// same selector and ETP, sharing key `k1`, on one IP: (a) a restart changes and writes nothing;
/// (b) `svc-b` deleted and created again unchanged gets the same IP; the IP returns to the pool
/// only when the last member goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c02_sharing_groups_survive_restarts_and_recreation() {
    let mut v = Verdicts::new("C-02");
    let (mut lab, client) = lab().await;
    metallb::create_pool(&client, "pool", &["198.51.100.0/28"])
        .await
        .unwrap();
    let ns = namespace::fresh(&client, "c02").await.unwrap();
    let shared = |name: &str, port: i32| {
        let mut s = annotated(
            lb_service(&ns, name, &[("TCP", port)], "Cluster"),
            &[("metallb.io/allow-shared-ip", "k1")],
        );
        s.spec.as_mut().unwrap().selector = Some([("app".to_owned(), "shared".to_owned())].into());
        s
    };
    create_service(&client, &shared("svc-a", 80)).await.unwrap();
    create_service(&client, &shared("svc-b", 8080))
        .await
        .unwrap();
    let a_ip = wait_ips(&client, &ns, "svc-a", |i| i.len() == 1).await;
    let b_ip = wait_ips(&client, &ns, "svc-b", |i| i == a_ip.as_slice()).await;
    v.check(
        a_ip.len() == 1 && a_ip == b_ip,
        "svc-a and svc-b share one IP",
        format!("svc-a {a_ip:?}, svc-b {b_ip:?}"),
    );
    // Let the first assignments' writes (annotations, pool status) finish.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let rvs = (
        svc(&client, &ns, "svc-a").await.resource_version(),
        svc(&client, &ns, "svc-b").await.resource_version(),
    );
    lab.start_metallb_controller().unwrap();
    tokio::time::sleep(Duration::from_secs(8)).await;
    let after = (
        svc(&client, &ns, "svc-a").await.resource_version(),
        svc(&client, &ns, "svc-b").await.resource_version(),
    );
    v.check(
        ips(&client, &ns, "svc-a").await == a_ip && ips(&client, &ns, "svc-b").await == a_ip,
        "(a) after a restart both are still on the same IP",
        format!(
            "svc-a {:?}, svc-b {:?}",
            ips(&client, &ns, "svc-a").await,
            ips(&client, &ns, "svc-b").await
        ),
    );
    v.check(
        rvs == after,
        "(a) the restart writes neither Service",
        format!("{rvs:?} → {after:?}"),
    );
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    api.delete("svc-b", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    create_service(&client, &shared("svc-b", 8080))
        .await
        .unwrap();
    let b_again = wait_ips(&client, &ns, "svc-b", |i| !i.is_empty()).await;
    v.check(
        b_again == a_ip && ips(&client, &ns, "svc-a").await == a_ip,
        "(b) svc-b deleted and created again gets the same IP",
        format!(
            "svc-b {b_again:?}, svc-a {:?}",
            ips(&client, &ns, "svc-a").await
        ),
    );
    api.delete("svc-b", &DeleteParams::default()).await.unwrap();
    create_service(
        &client,
        &lb_service(&ns, "svc-c", &[("TCP", 9000)], "Cluster"),
    )
    .await
    .unwrap();
    let c_ip = wait_ips(&client, &ns, "svc-c", |i| !i.is_empty()).await;
    v.check(
        c_ip.len() == 1 && c_ip != a_ip,
        "the IP stays out of the pool while a member (svc-a) holds it",
        format!("svc-c {c_ip:?}, svc-a {a_ip:?}"),
    );
    v.finish();
}

/// C-03: a pool deleted while in use — `svc-b` and `svc-c` (in `pool-b`) move to free addresses
/// of `pool-a`, never onto `svc-a`'s, with a Warning Event each; `svc-b` deleted and created
/// again gets no address of the deleted pool; `pool-b` re-created as `203.0.113.128/25` moves
/// nothing. (The speaker half of the case, which stops announcing, is
/// `metallb_c03_speaker_stops_announcing_a_deleted_pool` in `metallb_cases.rs`.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c03_pool_deleted_while_in_use() {
    let mut v = Verdicts::new("C-03");
    let (_lab, client) = lab().await;
    metallb::create_pool(&client, "pool-a", &["198.51.100.0/24"])
        .await
        .unwrap();
    metallb::create_pool(&client, "pool-b", &["203.0.113.0/24"])
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
            &annotated(
                lb_service(&ns, name, &[("TCP", 80)], "Cluster"),
                &[("metallb.io/loadBalancerIPs", ip)],
            ),
        )
        .await
        .unwrap();
        let got = wait_ips(&client, &ns, name, |i| i == [ip]).await;
        assert_eq!(got, [ip], "setup: {name}");
    }
    // The requests are gone (users remove them once assigned); the addresses stay.
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    for name in ["svc-a", "svc-b", "svc-c"] {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"metallb.io/loadBalancerIPs": null}}}),
            ),
        )
        .await
        .unwrap();
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    metallb::delete_pool(&client, "pool-b").await.unwrap();
    for name in ["svc-b", "svc-c"] {
        let got = wait_ips(&client, &ns, name, |i| {
            i.len() == 1 && i[0].starts_with("198.51.100.")
        })
        .await;
        v.check(
            got.len() == 1 && got[0].starts_with("198.51.100.") && got[0] != "198.51.100.1",
            &format!("{name} moves to a free address of pool-a, not 198.51.100.1"),
            format!("{got:?}"),
        );
        let warnings = wait_warning(&client, &ns, name).await;
        v.check(
            !warnings.is_empty(),
            &format!("{name}: a Warning Event"),
            "none",
        );
    }
    v.check(
        ips(&client, &ns, "svc-a").await == ["198.51.100.1"],
        "svc-a keeps 198.51.100.1",
        format!("{:?}", ips(&client, &ns, "svc-a").await),
    );
    api.delete("svc-b", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    create_service(
        &client,
        &lb_service(&ns, "svc-b", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let b_again = wait_ips(&client, &ns, "svc-b", |i| !i.is_empty()).await;
    v.check(
        b_again.len() == 1 && !b_again[0].starts_with("203.0.113."),
        "svc-b re-created gets no address of the deleted pool",
        format!("{b_again:?}"),
    );
    let before: Vec<Vec<String>> = [
        ips(&client, &ns, "svc-a").await,
        ips(&client, &ns, "svc-b").await,
        ips(&client, &ns, "svc-c").await,
    ]
    .into();
    metallb::create_pool(&client, "pool-b", &["203.0.113.128/25"])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after: Vec<Vec<String>> = [
        ips(&client, &ns, "svc-a").await,
        ips(&client, &ns, "svc-b").await,
        ips(&client, &ns, "svc-c").await,
    ]
    .into();
    v.check(
        before == after,
        "pool-b re-created as 203.0.113.128/25: nothing moves",
        format!("{before:?} → {after:?}"),
    );
    v.finish();
}

/// `[assignedIPv4, availableIPv4, assignedIPv6, availableIPv6]` of MetalLB pool `name`'s
/// status (`api/v1beta1/ipaddresspool_types.go` of v0.15.2), once it has all four.
async fn pool_counts(client: &Client, name: &str) -> Option<[i64; 4]> {
    let resource = ApiResource {
        group: "metallb.io".into(),
        version: "v1beta1".into(),
        api_version: "metallb.io/v1beta1".into(),
        kind: "IPAddressPool".into(),
        plural: "ipaddresspools".into(),
    };
    let pool = Api::<DynamicObject>::namespaced_with(client.clone(), metallb::NAMESPACE, &resource)
        .get_opt(name)
        .await
        .unwrap()?;
    let status = pool.data.get("status")?;
    let field = |f: &str| status.get(f).and_then(serde_json::Value::as_i64);
    Some([
        field("assignedIPv4")?,
        field("availableIPv4")?,
        field("assignedIPv6")?,
        field("availableIPv6")?,
    ])
}

/// Pool `name`'s counts once they have stayed the same for 3 s (MetalLB's status reconciler may
/// first write the counters of a pool its allocator does not know yet), within [`SETTLE`];
/// `None` when they did not settle (or never appeared), so unsettled counts are never compared.
async fn settled_counts(client: &Client, name: &str) -> Option<[i64; 4]> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    let mut last = None;
    let mut since = tokio::time::Instant::now();
    loop {
        let now = pool_counts(client, name).await;
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        } else if last.is_some() && since.elapsed() >= Duration::from_secs(3) {
            return last;
        }
        if tokio::time::Instant::now() >= deadline {
            println!("C-09 pool {name}: counts did not settle within {SETTLE:?}, last {last:?}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn never_negative(counts: Option<[i64; 4]>) -> bool {
    counts.is_some_and(|c| c.iter().all(|n| *n >= 0))
}

/// Whether `ip` is an IPv6 address inside `2001:db8:0:<n>::/64` for one of `nets`.
fn in_v6_nets(ip: &str, nets: &[u16]) -> bool {
    ip.parse::<Ipv6Addr>().is_ok_and(|a| {
        let s = a.segments();
        s[..3] == [0x2001, 0x0db8, 0] && nets.contains(&s[3])
    })
}

/// One size of the growth measurement, in a lab of its own (fresh API server and controller):
/// an IPv6 pool `cidr`, then [`GROWTH_SERVICES`] IPv6 Services created one after the other.
/// Returns the time from the first creation until all have an address, and the controller's
/// `VmRSS` before the Services, `VmRSS` 2 s after and `VmHWM` then (KiB).
async fn growth_run(cidr: &str) -> (Duration, u64, u64, u64) {
    let (lab, client) = lab().await;
    metallb::create_pool(&client, "grow", &[cidr])
        .await
        .unwrap();
    let counts = settled_counts(&client, "grow").await;
    assert!(counts.is_some(), "setup: pool {cidr} got no status");
    let pid = lab.metallb_controller_pid().unwrap();
    let rss = || bench::proc_status_kib(pid, "VmRSS:").unwrap();
    let idle = rss();
    let ns = namespace::fresh(&client, "c09-grow").await.unwrap();
    let start = Instant::now();
    for i in 0..GROWTH_SERVICES {
        create_service(
            &client,
            &with_families(
                lb_service(&ns, &format!("g-{i:02}"), &[("TCP", 80)], "Cluster"),
                &["IPv6"],
                "SingleStack",
            ),
        )
        .await
        .unwrap();
    }
    let deadline = tokio::time::Instant::now() + SETTLE * 3;
    loop {
        let list = Api::<Service>::namespaced(client.clone(), &ns)
            .list(&Default::default())
            .await
            .unwrap();
        let done = list
            .items
            .iter()
            .filter(|s| ingress_ips(s).len() == 1)
            .count();
        if done == GROWTH_SERVICES {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "setup: only {done} of {GROWTH_SERVICES} Services got an address from {cidr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let took = start.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss();
    let hwm = bench::proc_status_kib(pid, "VmHWM:").unwrap();
    println!(
        "C-09 growth {cidr}: counts {counts:?}; {GROWTH_SERVICES} Services assigned in {:.2} s; \
         controller VmRSS {:.1} MiB before them, {:.1} MiB after, VmHWM {:.1} MiB",
        took.as_secs_f64(),
        mib(idle),
        mib(after),
        mib(hwm)
    );
    (took, idle, after, hwm)
}

/// How many Services each size of the growth measurement assigns.
const GROWTH_SERVICES: usize = 30;

#[allow(clippy::cast_precision_loss)]
fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

/// C-09: big IPv6 pools — `[2001:db8:0:3::/64, 198.51.100.0/24]` and the same in reverse order
/// give identical per-family counts (MetalLB's `IPAddressPool` status: `assignedIPv4`,
/// `availableIPv4`, `assignedIPv6`, `availableIPv6`), never negative; a pool of three /64s serves
/// three Services and an explicit request (`metallb.io/loadBalancerIPs`) for
/// `2001:db8:0:6:ffff:ffff:ffff:fffe`; `198.51.100.0/32` with `avoidBuggyIPs: true` has 0 usable
/// addresses (no Service gets one, its count says 0; control: without `avoidBuggyIPs` the waiting
/// Service gets `198.51.100.0`); memory and time do not grow with the pool size (a /64 against a
/// /120, each in a fresh lab: the controller's `VmRSS` and the time to assign
/// [`GROWTH_SERVICES`] Services; "grows" = the /64 takes more than 1.5× the /120's memory, or
/// more than 2× + 1 s its time — a dependence on a /64's 2^64 addresses would be orders of
/// magnitude, the margins are for noise on two cores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c09_big_ipv6_pools() {
    let mut v = Verdicts::new("C-09");
    {
        let (_lab, client) = lab().await;
        let ns = namespace::fresh(&client, "c09").await.unwrap();
        let mut counts = Vec::new();
        for (pool, entries) in [
            ("big-v6-first", ["2001:db8:0:3::/64", "198.51.100.0/24"]),
            ("big-v4-first", ["198.51.100.0/24", "2001:db8:0:3::/64"]),
        ] {
            metallb::create_pool(&client, pool, &entries).await.unwrap();
            let c = settled_counts(&client, pool).await;
            println!(
                "C-09 pool {entries:?}: [assignedIPv4, availableIPv4, assignedIPv6, availableIPv6] = {c:?}"
            );
            counts.push(c);
            metallb::delete_pool(&client, pool).await.unwrap();
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        v.check(
            counts[0].is_some() && counts[0] == counts[1],
            "[/64, /24] and [/24, /64]: the per-family counts are identical",
            format!("{:?} vs {:?}", counts[0], counts[1]),
        );
        v.check(
            never_negative(counts[0]) && never_negative(counts[1]),
            "[/64, /24] and [/24, /64]: the counts are never negative",
            format!("{:?} vs {:?}", counts[0], counts[1]),
        );

        metallb::create_pool(
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
        let v6 = |name: &str| {
            with_families(
                lb_service(&ns, name, &[("TCP", 80)], "Cluster"),
                &["IPv6"],
                "SingleStack",
            )
        };
        for i in 0..3 {
            create_service(&client, &v6(&format!("v6-{i}")))
                .await
                .unwrap();
        }
        let wanted = "2001:db8:0:6:ffff:ffff:ffff:fffe";
        create_service(
            &client,
            &annotated(v6("req"), &[("metallb.io/loadBalancerIPs", wanted)]),
        )
        .await
        .unwrap();
        let mut got = Vec::new();
        for i in 0..3 {
            got.push(wait_ips(&client, &ns, &format!("v6-{i}"), |i| i.len() == 1).await);
        }
        let distinct: BTreeSet<&String> = got.iter().flatten().collect();
        v.check(
            got.iter()
                .all(|i| i.len() == 1 && in_v6_nets(&i[0], &[4, 5, 6]))
                && distinct.len() == 3,
            "three /64s: three Services each get a distinct address of the pool",
            format!("{got:?}"),
        );
        let req = wait_ips(&client, &ns, "req", |i| i == [wanted]).await;
        let req_events = if req == [wanted] {
            Vec::new()
        } else {
            typed_events_for(&client, &ns, "req").await.unwrap()
        };
        v.check(
            req == [wanted],
            &format!("three /64s: the explicit request for {wanted} is honoured"),
            format!("req has {req:?}; events {req_events:?}"),
        );
        let three = settled_counts(&client, "three").await;
        println!("C-09 pool of three /64s with four Services: {three:?}");
        v.check(
            never_negative(three),
            "three /64s: the counts are never negative",
            format!("{three:?}"),
        );
        metallb::delete_pool(&client, "three").await.unwrap();

        metallb::apply_pool(
            &client,
            "tiny",
            json!({"addresses": ["198.51.100.0/32"], "avoidBuggyIPs": true}),
        )
        .await
        .unwrap();
        let tiny = settled_counts(&client, "tiny").await;
        println!("C-09 pool 198.51.100.0/32 with avoidBuggyIPs: {tiny:?}");
        create_service(
            &client,
            &with_families(
                lb_service(&ns, "v4", &[("TCP", 80)], "Cluster"),
                &["IPv4"],
                "SingleStack",
            ),
        )
        .await
        .unwrap();
        let warnings = wait_warning(&client, &ns, "v4").await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        let v4 = ips(&client, &ns, "v4").await;
        v.check(
            v4.is_empty(),
            "198.51.100.0/32 with avoidBuggyIPs: 0 usable addresses, a Service gets none",
            format!("v4 has {v4:?}"),
        );
        println!("C-09 the IPv4 Service's Warning Events: {warnings:?}");
        v.check(
            tiny.is_some_and(|c| c[1] == 0) && never_negative(tiny),
            "198.51.100.0/32 with avoidBuggyIPs: its counts say 0 usable (availableIPv4 0), never negative",
            format!("[assignedIPv4, availableIPv4, assignedIPv6, availableIPv6] = {tiny:?}"),
        );
        // Control (the harness is not blind): without avoidBuggyIPs the address is usable.
        metallb::apply_pool(
            &client,
            "tiny",
            json!({"addresses": ["198.51.100.0/32"], "avoidBuggyIPs": false}),
        )
        .await
        .unwrap();
        let v4 = wait_ips(&client, &ns, "v4", |i| i == ["198.51.100.0"]).await;
        v.check(
            v4 == ["198.51.100.0"],
            "control: the same pool without avoidBuggyIPs gives the waiting Service 198.51.100.0",
            format!("v4 has {v4:?}"),
        );
    }

    let (t120, _, rss120, _) = growth_run("2001:db8:0:9::/120").await;
    let (t64, _, rss64, _) = growth_run("2001:db8:0:9::/64").await;
    #[allow(clippy::cast_precision_loss)]
    let ratio = rss64 as f64 / rss120 as f64;
    v.check(
        ratio <= 1.5,
        "memory does not grow with the pool size (controller VmRSS, /64 vs /120)",
        format!(
            "{:.1} MiB with the /64, {:.1} MiB with the /120 ({ratio:.2}×)",
            mib(rss64),
            mib(rss120)
        ),
    );
    v.check(
        t64 <= t120 * 2 + Duration::from_secs(1),
        &format!("time does not grow with the pool size ({GROWTH_SERVICES} Services, /64 vs /120)"),
        format!(
            "{:.2} s with the /64, {:.2} s with the /120",
            t64.as_secs_f64(),
            t120.as_secs_f64()
        ),
    );
    v.finish();
}

/// Creates MetalLB pool `name` with `addresses` in its namespace (`dry_run`: checked, not
/// stored) with a plain create, as ferrolb's C-08 does; `Err` holds the API server's refusal.
async fn c08_create_pool(
    client: &Client,
    name: &str,
    addresses: &[&str],
    dry_run: bool,
) -> Result<(), String> {
    let pool: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": { "name": name, "namespace": metallb::NAMESPACE },
        "spec": { "addresses": addresses },
    }))
    .unwrap();
    let params = kube::api::PostParams {
        dry_run,
        ..Default::default()
    };
    match metallb::pools(client).create(&params, &pool).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) => Err(e.message),
        Err(e) => Err(e.to_string()),
    }
}

/// Whether a pool create was refused with a message containing `needle`.
fn refused_with(result: &Result<(), String>, needle: &str) -> bool {
    matches!(result, Err(m) if m.contains(needle))
}

/// C-08: unusable pool entries are named — pools whose only entry is `-`, `""`, a reversed range
/// or `198.51.100.300/32` are refused naming the entry; the pending Service's Event says no pool
/// can serve it (not a generic "no addresses"); the pool fixed to `198.51.100.20-198.51.100.30`
/// allocates `198.51.100.20` without a restart. MetalLB checks pool entries only in its
/// validating webhook (its CRD schema takes any string), so its controller runs here WITH the
/// webhook ([`metallb::webhook`]); controls first show the API server really consults it (a
/// self-overlapping pool, which the schema accepts, is refused by MetalLB's overlap check) and
/// that it lets a valid pool through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "opt-in: field cases against MetalLB (issue #11); run with --ignored"]
async fn metallb_c08_unusable_pool_entries_are_named() {
    let mut v = Verdicts::new("C-08");
    let mut lab = Lab::start_implementation(Implementation::MetalLb, 0, 0)
        .await
        .unwrap();
    let webhook = metallb::webhook::start_controller_with_webhook(&mut lab)
        .await
        .unwrap();
    println!(
        "C-08 MetalLB's controller serves its webhook; the API server calls it at https://127.0.0.1:{}",
        webhook.port()
    );
    let client = lab.client().await.unwrap();

    let overlap = c08_create_pool(
        &client,
        "control",
        &["203.0.113.0/28", "203.0.113.8/29"],
        false,
    )
    .await;
    v.check(
        refused_with(&overlap, "admission webhook") && refused_with(&overlap, "overlaps"),
        "control: MetalLB's webhook refuses a self-overlapping pool (the CRD schema accepts it)",
        format!("{overlap:?}"),
    );
    let valid = c08_create_pool(&client, "control", &["203.0.113.0/28"], true).await;
    v.check(
        valid.is_ok(),
        "control: MetalLB's webhook accepts a valid pool (dry run)",
        format!("{valid:?}"),
    );
    assert!(
        refused_with(&overlap, "admission webhook")
            && refused_with(&overlap, "overlaps")
            && valid.is_ok(),
        "the webhook controls failed: refusals would say nothing about MetalLB"
    );

    for bad in ["-", "", "198.51.100.30-198.51.100.20", "198.51.100.300/32"] {
        let got = c08_create_pool(&client, "bad", &[bad], false).await;
        println!("C-08 pool [{bad:?}]: {got:?}");
        v.check(
            refused_with(&got, &format!("\"{bad}\"")),
            &format!("a pool whose only entry is {bad:?} is refused with a message naming it"),
            format!("{got:?}"),
        );
        if got.is_ok() {
            metallb::delete_pool(&client, "bad").await.unwrap();
        }
    }

    let ns = namespace::fresh(&client, "c08").await.unwrap();
    let pid = lab.metallb_controller_pid().unwrap();
    create_service(&client, &lb_service(&ns, "svc", &[("TCP", 80)], "Cluster"))
        .await
        .unwrap();
    // MetalLB's own wording counts if it says that no pool can serve the Service; a generic
    // "no available IPs" does not (that is the point of the case).
    let (said, events) = wait_event_matching(&client, &ns, "svc", |t, _, n| {
        let n = n.to_lowercase();
        t == "Warning"
            && ["no pool", "no suitable pool", "no usable pool"]
                .iter()
                .any(|w| n.contains(w))
    })
    .await;
    let pending = ips(&client, &ns, "svc").await;
    v.check(
        pending.is_empty(),
        "the Service stays pending",
        format!("{pending:?}"),
    );
    v.check(
        said,
        "its Event says \"no pool can serve this Service\" (not a generic \"no addresses\")",
        format!("Events {events:?}"),
    );

    let fixed = c08_create_pool(&client, "fixed", &["198.51.100.20-198.51.100.30"], false).await;
    v.check(
        fixed.is_ok(),
        "the pool fixed to 198.51.100.20-198.51.100.30 is accepted",
        format!("{fixed:?}"),
    );
    let got = wait_ips(&client, &ns, "svc", |i| i == ["198.51.100.20"]).await;
    v.check(
        got == ["198.51.100.20"],
        "the fixed pool allocates 198.51.100.20",
        format!("{got:?} after {SETTLE:?}"),
    );
    let pid_after = lab.metallb_controller_pid();
    v.check(
        pid_after.as_ref().ok() == Some(&pid),
        "without restarting anything (the same controller process throughout)",
        format!("pid {pid} before, {pid_after:?} after"),
    );
    let overlap_after = c08_create_pool(&client, "control", &["198.51.100.24/29"], false).await;
    v.check(
        refused_with(&overlap_after, "overlaps"),
        "control: afterwards a pool overlapping the fixed one is still refused by the webhook",
        format!("{overlap_after:?}"),
    );
    drop(webhook);
    v.finish();
}
