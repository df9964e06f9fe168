//! The planner's incremental passes (issue #9 item 4) decide exactly what passes over everything
//! decide: two planners see the same random history of Service, pool and Namespace changes, one
//! planning only what changed, the other told to [`Planner::resync`] before every pass; their
//! status writes, Events and pool statuses must be identical. Writes succeed or fail at random
//! and come back through the "watch" as the API server would return them.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Namespace, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;
use serde_json::{Value, json};

use ferrolb_controller::contest;
use ferrolb_controller::plan::{Plan, Planner, Snapshot};
use ferrolb_controller::service::{ClassConfig, FIELD_MANAGER};
use ferrolb_crds::{IPAddressPool, L2Advertisement};

#[derive(Debug, Clone)]
enum Op {
    /// Create or change Service `slot`.
    Put { slot: u8, spec: Spec },
    /// Delete Service `slot`.
    Delete(u8),
    /// Replace the pool's addresses (`/29`s of 198.51.100.0/26, `wide` → two of them).
    Pool { base: u8, wide: bool },
    /// Label the Namespace (the pool admits only `team=a` Namespaces when `gated`).
    Label(bool),
    /// One pass; `fail` makes every status write of the pass fail.
    Pass { fail: bool },
}

#[derive(Debug, Clone)]
struct Spec {
    load_balancer: bool,
    other_class: bool,
    port: u8,
    sharing: bool,
    requested: Option<u8>,
    dual: bool,
}

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::bool::weighted(0.85),
        prop::bool::weighted(0.1),
        0u8..3,
        any::<bool>(),
        prop::option::weighted(0.2, 0u8..16),
        prop::bool::weighted(0.2),
    )
        .prop_map(
            |(load_balancer, other_class, port, sharing, requested, dual)| Spec {
                load_balancer,
                other_class,
                port,
                sharing,
                requested,
                dual,
            },
        )
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0u8..10, spec()).prop_map(|(slot, spec)| Op::Put { slot, spec }),
        2 => (0u8..10).prop_map(Op::Delete),
        1 => (0u8..3, any::<bool>()).prop_map(|(base, wide)| Op::Pool { base, wide }),
        1 => any::<bool>().prop_map(Op::Label),
        4 => Just(Op::Pass { fail: false }),
        2 => Just(Op::Pass { fail: true }),
    ]
}

fn service(slot: u8, spec: &Spec, rv: u64) -> Service {
    let mut v = json!({
        "metadata": { "name": format!("s{slot}"), "namespace": "default",
            "resourceVersion": rv.to_string(), "uid": format!("uid-{slot}-{rv}"),
            "creationTimestamp": format!("2026-01-01T00:00:{:02}Z", slot) },
        "spec": {
            "type": if spec.load_balancer { "LoadBalancer" } else { "ClusterIP" },
            "ports": [{ "protocol": "TCP", "port": 80 + u16::from(spec.port) }],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": if spec.dual { "PreferDualStack" } else { "SingleStack" },
            "externalTrafficPolicy": "Cluster",
        },
    });
    if spec.other_class {
        v["spec"]["loadBalancerClass"] = json!("example.com/other");
    }
    let mut annotations = serde_json::Map::new();
    if spec.sharing {
        annotations.insert("ferrolb.io/allow-shared-ip".into(), json!("k"));
    }
    if let Some(r) = spec.requested {
        annotations.insert(
            "ferrolb.io/loadBalancerIPs".into(),
            json!(format!("198.51.100.{}", 1 + r)),
        );
    }
    v["metadata"]["annotations"] = Value::Object(annotations);
    serde_json::from_value(v).unwrap()
}

fn pool(base: u8, wide: bool, gated: bool) -> Arc<IPAddressPool> {
    let first = format!("198.51.100.{}/29", u16::from(base) * 8);
    let mut addresses = vec![first];
    if wide {
        addresses.push(format!("198.51.100.{}/29", 32 + u16::from(base) * 8));
    }
    let mut spec = json!({ "addresses": addresses });
    if gated {
        spec["serviceAllocation"] =
            json!({ "namespaceSelectors": [{ "matchLabels": { "team": "a" } }] });
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": { "name": "pool", "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1 },
            "spec": spec,
        }))
        .unwrap(),
    )
}

fn namespace(labelled: bool) -> Arc<Namespace> {
    let labels = if labelled {
        json!({ "team": "a" })
    } else {
        json!({})
    };
    Arc::new(
        serde_json::from_value(json!({ "metadata": { "name": "default", "labels": labels } }))
            .unwrap(),
    )
}

/// What a plan writes, in a comparable form.
fn summary(plan: &Plan) -> (Vec<String>, Vec<String>, Vec<String>) {
    let mut statuses: Vec<String> = plan
        .statuses
        .iter()
        .map(|w| format!("{:?} {:?}", w.service.metadata.name, w.ips))
        .collect();
    statuses.sort();
    let mut events: Vec<String> = plan
        .events
        .iter()
        .map(|(s, e)| format!("{:?} {} {}", s.metadata.name, e.reason, e.message))
        .collect();
    events.sort();
    let pools = plan
        .pools
        .iter()
        .map(|(n, st)| format!("{n} {:?}", st.conditions))
        .collect();
    (statuses, events, pools)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("FERROLB_PROP_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]
    #[test]
    fn incremental_passes_write_what_full_passes_write(ops in prop::collection::vec(op(), 1..50)) {
        let l2: L2Advertisement = serde_json::from_value(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
            "metadata": { "name": "all" }, "spec": {},
        })).unwrap();
        let mut snap = Snapshot {
            pools: vec![pool(0, false, false)],
            l2: vec![Arc::new(l2)],
            namespaces: vec![namespace(false)],
            ..Snapshot::default()
        };
        let mut incremental = Planner::new(ClassConfig::default(), contest::Policy::default());
        let mut full = Planner::new(ClassConfig::default(), contest::Policy::default());
        let now = Instant::now();
        let wall = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let mut rv = 1u64;
        let mut gated = false;
        let (mut base, mut wide) = (0u8, false);
        for op in ops.into_iter().chain([Op::Pass { fail: false }, Op::Pass { fail: false }]) {
            rv += 1;
            match op {
                Op::Put { slot, spec } => {
                    let name = format!("s{slot}");
                    // Keep the status the Service has (the API server keeps it across a spec
                    // update).
                    let old = snap.services.iter().find(|s| s.metadata.name.as_deref() == Some(&name)).cloned();
                    let mut s = service(slot, &spec, rv);
                    if let Some(old) = old {
                        s.metadata.uid.clone_from(&old.metadata.uid);
                        s.metadata.creation_timestamp.clone_from(&old.metadata.creation_timestamp);
                        s.metadata.managed_fields.clone_from(&old.metadata.managed_fields);
                        s.status.clone_from(&old.status);
                    }
                    snap.services.retain(|x| x.metadata.name.as_deref() != Some(&name));
                    snap.services.push(Arc::new(s));
                }
                Op::Delete(slot) => {
                    let name = format!("s{slot}");
                    snap.services.retain(|x| x.metadata.name.as_deref() != Some(&name));
                }
                Op::Pool { base: b, wide: w } => {
                    (base, wide) = (b, w);
                    snap.pools = vec![pool(base, wide, gated)];
                }
                Op::Label(labelled) => {
                    gated = !gated;
                    snap.pools = vec![pool(base, wide, gated)];
                    snap.namespaces = vec![namespace(labelled)];
                }
                Op::Pass { fail } => {
                    full.resync();
                    let a = incremental.plan(&snap, now, &wall);
                    let b = full.plan(&snap, now, &wall);
                    prop_assert_eq!(summary(&a), summary(&b));
                    if fail {
                        continue;
                    }
                    for w in &a.statuses {
                        incremental.status_written(w);
                    }
                    for w in &b.statuses {
                        full.status_written(w);
                    }
                    for w in &a.statuses {
                        let name = w.service.metadata.name.clone();
                        let Some(i) = snap.services.iter().position(|x| x.metadata.name == name) else {
                            continue;
                        };
                        let mut s = (*snap.services[i]).clone();
                        rv += 1;
                        s.metadata.resource_version = Some(rv.to_string());
                        let ingress: Vec<Value> = w.ips.iter()
                            .map(|ip| json!({ "ip": ip.to_string(), "ipMode": "VIP" })).collect();
                        let mut v = serde_json::to_value(&s).unwrap();
                        v["status"] = json!({ "loadBalancer": { "ingress": ingress } });
                        v["metadata"]["managedFields"] = json!([{
                            "manager": FIELD_MANAGER, "operation": "Apply", "subresource": "status",
                            "fieldsV1": { "f:status": { "f:loadBalancer": { "f:ingress": {} } } } }]);
                        snap.services[i] = Arc::new(serde_json::from_value(v).unwrap());
                    }
                    for (name, st) in &a.pools {
                        if let Some(i) = snap.pools.iter().position(|p| p.metadata.name.as_deref() == Some(name)) {
                            let mut p = (*snap.pools[i]).clone();
                            p.status = Some(st.clone());
                            snap.pools[i] = Arc::new(p);
                        }
                    }
                }
            }
        }
        // After two quiet passes the incremental planner has nothing left to write.
        prop_assert!(incremental.plan(&snap, now, &wall).statuses.is_empty());
    }
}
