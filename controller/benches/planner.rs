//! Planner benchmarks (issue #9 item 4): one steady-state pass of the controller's planner over
//! N Services that all hold their addresses already (the pass the controller runs on every watch
//! event and every resync), and the pass after one Service was added. Pure: no API server.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

use ferrolb_controller::contest;
use ferrolb_controller::plan::{Planner, Snapshot};
use ferrolb_controller::service::{ClassConfig, FIELD_MANAGER, trim};
use ferrolb_crds::{IPAddressPool, L2Advertisement};

fn service(i: usize, ip: Option<String>) -> Arc<Service> {
    let mut v = json!({
        "metadata": { "name": format!("svc-{i:05}"), "namespace": "bench",
            "resourceVersion": format!("{}", 2 * i + 1), "uid": format!("uid-{i}"),
            "creationTimestamp": "2026-01-01T00:00:00Z" },
        "spec": { "type": "LoadBalancer", "ports": [{ "protocol": "TCP", "port": 80 }],
            "ipFamilies": ["IPv6"], "ipFamilyPolicy": "SingleStack",
            "externalTrafficPolicy": "Cluster", "selector": { "app": format!("svc-{i}") } },
    });
    if let Some(ip) = ip {
        v["metadata"]["managedFields"] = json!([{ "manager": FIELD_MANAGER, "operation": "Apply",
            "subresource": "status",
            "fieldsV1": { "f:status": { "f:loadBalancer": { "f:ingress": {} } } } }]);
        v["status"] = json!({ "loadBalancer": { "ingress": [{ "ip": ip, "ipMode": "VIP" }] } });
    }
    let mut s: Service = serde_json::from_value(v).unwrap();
    trim(&mut s);
    Arc::new(s)
}

/// A snapshot of `n` Services holding `2001:db8:1::/112` addresses, and a planner that has
/// adopted them (its first pass is done).
fn world(n: usize) -> (Planner, Snapshot) {
    let pool: IPAddressPool = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": { "name": "bench", "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1 },
        "spec": { "addresses": ["2001:db8:1::/112"] },
    }))
    .unwrap();
    let l2: L2Advertisement = serde_json::from_value(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
        "metadata": { "name": "all" }, "spec": {},
    }))
    .unwrap();
    let ns: Namespace = serde_json::from_value(json!({ "metadata": { "name": "bench" } })).unwrap();
    let snap = Snapshot {
        services: (0..n)
            .map(|i| service(i, Some(format!("2001:db8:1::{:x}", i + 1))))
            .collect(),
        pools: vec![Arc::new(pool)],
        l2: vec![Arc::new(l2)],
        namespaces: vec![Arc::new(ns)],
        nodes: Vec::new(),
        conflict_events: Vec::new(),
        reports: Vec::new(),
    };
    let mut planner = Planner::new(ClassConfig::default(), contest::Policy::default());
    let plan = planner.plan(&snap, Instant::now(), &wall());
    assert!(
        plan.statuses.is_empty(),
        "the statuses are adopted as they are"
    );
    (planner, snap)
}

fn wall() -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap())
}

fn steady(c: &mut Criterion) {
    let mut g = c.benchmark_group("planner_pass");
    g.sample_size(10);
    for n in [10_000, 50_000] {
        let (mut planner, snap) = world(n);
        g.bench_function(format!("steady_{n}"), |b| {
            b.iter(|| black_box(planner.plan(&snap, Instant::now(), &wall()).statuses.len()));
        });
        let mut grown = snap.clone();
        grown.services.push(service(n, None));
        g.bench_function(format!("one_new_service_{n}"), |b| {
            b.iter_batched(
                || world(n).0,
                |mut p| black_box(p.plan(&grown, Instant::now(), &wall()).statuses.len()),
                BatchSize::PerIteration,
            );
        });
    }
    g.finish();
}

criterion_group!(benches, steady);
criterion_main!(benches);
