//! The speaker's middle test tier (issue #9): Kubernetes objects and a membership in, exactly
//! these owners, answered IPs and Events out — the pure pipeline `view::build` → `plan::plan` →
//! `EventPlanner::plan` of every node, no API server, no sockets, milliseconds per test.
//!
//! Rules at this tier: S1 (eligibility), S2 (one owner per IP, stable under removal of a
//! non-owner), S5 (loss = no longer answered), S9 (one Event per owner change; one reporter for an
//! IP nobody may announce), R10 on the speaker side, and S13 (watch objects trimmed to what the
//! speaker reads give the same plans). The wire formats (S6, S7) have their own
//! unit and property tests, membership (S3) `membership_sim.rs`/`membership_udp.rs`, the claim
//! gate (S10, S12) `claim.rs`; announcements on real links (S4, S8, S11, S13) are lab tests.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use serde_json::{Value, json};

use ferrolb_crds::{IPAddressPool, L2Advertisement};
use ferrolb_speaker::events::{
    EventIntent, EventPlanner, REASON_ANNOUNCING, REASON_NO_ELIGIBLE_NODE,
};
use ferrolb_speaker::plan::plan;
use ferrolb_speaker::view::{View, ViewSettings, build};

const IP: &str = "198.51.100.53";

fn obj<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn node(name: &str, ip: &str, labels: Value, conditions: Value) -> Node {
    obj(json!({
        "metadata": { "name": name, "labels": labels },
        "status": {
            "addresses": [{ "type": "InternalIP", "address": ip }],
            "conditions": conditions,
        },
    }))
}

fn service(name: &str, ip: &str, etp: &str) -> Service {
    obj(json!({
        "metadata": { "name": name, "namespace": "default" },
        "spec": { "type": "LoadBalancer", "externalTrafficPolicy": etp,
                  "ports": [{ "protocol": "TCP", "port": 80 }] },
        "status": { "loadBalancer": { "ingress": [{ "ip": ip, "ipMode": "VIP" }] } },
    }))
}

fn slice(service: &str, ready_on: &[&str]) -> EndpointSlice {
    obj(json!({
        "metadata": { "name": format!("{service}-x"), "namespace": "default",
                      "labels": { "kubernetes.io/service-name": service } },
        "addressType": "IPv4",
        "endpoints": ready_on.iter().enumerate().map(|(i, n)| json!({
            "addresses": [format!("10.0.0.{}", i + 1)], "nodeName": n,
            "conditions": { "ready": true },
        })).collect::<Vec<_>>(),
    }))
}

fn pool() -> IPAddressPool {
    obj(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": { "name": "pool", "creationTimestamp": "2026-01-01T00:00:00Z" },
        "spec": { "addresses": ["198.51.100.0/24"] },
    }))
}

fn l2(spec: Value) -> L2Advertisement {
    obj(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
        "metadata": { "name": "l2" }, "spec": spec,
    }))
}

/// A cluster: objects plus which speakers are alive.
struct Cluster {
    nodes: Vec<Node>,
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    l2: Vec<L2Advertisement>,
    alive: BTreeSet<String>,
}

impl Cluster {
    /// `n` Ready nodes `node-1…`, all speakers alive, one ETP Cluster Service on [`IP`].
    fn new(n: usize) -> Cluster {
        let nodes: Vec<Node> = (1..=n)
            .map(|i| {
                node(
                    &format!("node-{i}"),
                    &format!("192.0.2.{}", 10 + i),
                    json!({}),
                    json!([]),
                )
            })
            .collect();
        Cluster {
            alive: nodes
                .iter()
                .map(|n| n.metadata.name.clone().unwrap())
                .collect(),
            nodes,
            services: vec![service("svc", IP, "Cluster")],
            slices: vec![],
            l2: vec![l2(json!({}))],
        }
    }

    /// The view every speaker builds from these objects.
    fn view(&self) -> View {
        let p = [pool()];
        build(
            &ViewSettings::default(),
            &self.services.iter().collect::<Vec<_>>(),
            &self.slices.iter().collect::<Vec<_>>(),
            &self.nodes.iter().collect::<Vec<_>>(),
            &p.iter().collect::<Vec<_>>(),
            &self.l2.iter().collect::<Vec<_>>(),
        )
    }

    /// Per node: the IPs it answers for.
    fn answers(&self) -> BTreeMap<String, BTreeSet<IpAddr>> {
        let view = self.view();
        self.alive
            .iter()
            .map(|me| {
                let plan = plan(&view, &self.alive, me, Some(true));
                (me.clone(), plan.owned.keys().copied().collect())
            })
            .collect()
    }

    /// The nodes answering for [`IP`].
    fn owners(&self) -> Vec<String> {
        let ip: IpAddr = IP.parse().unwrap();
        self.answers()
            .into_iter()
            .filter(|(_, ips)| ips.contains(&ip))
            .map(|(n, _)| n)
            .collect()
    }

    /// The Events every alive node's planner (state in `planners`) calls for now.
    fn events(&self, planners: &mut BTreeMap<String, EventPlanner>) -> Vec<(String, EventIntent)> {
        let view = self.view();
        let mut out = Vec::new();
        for me in &self.alive {
            let plan = plan(&view, &self.alive, me, Some(true));
            let planner = planners
                .entry(me.clone())
                .or_insert_with(|| EventPlanner::new(me));
            for e in planner.plan(&plan, |_| Some(vec!["eth0".into()])) {
                out.push((me.clone(), e));
            }
        }
        out
    }
}

#[test]
fn s2_exactly_one_owner_and_removing_a_non_owner_moves_nothing() {
    let mut c = Cluster::new(5);
    let owners = c.owners();
    assert_eq!(owners.len(), 1, "{owners:?}");
    let owner = owners[0].clone();
    for gone in c.alive.clone().into_iter().filter(|n| *n != owner) {
        let mut fewer = Cluster::new(5);
        fewer.alive.remove(&gone);
        assert_eq!(fewer.owners(), vec![owner.clone()], "{gone} left");
    }
    // S5: the owner leaves → exactly one other node answers, the old one no longer does.
    c.alive.remove(&owner);
    let next = c.owners();
    assert_eq!(next.len(), 1);
    assert_ne!(next[0], owner);
}

#[test]
fn s1_excluded_unavailable_and_unselected_nodes_never_answer() {
    // Every node but one is ineligible for a different reason: the remaining one owns the IP.
    let mut c = Cluster::new(4);
    c.nodes[0] = node(
        "node-1",
        "192.0.2.11",
        json!({ "node.kubernetes.io/exclude-from-external-load-balancers": "" }),
        json!([]),
    );
    c.nodes[1] = node(
        "node-2",
        "192.0.2.12",
        json!({}),
        json!([{ "type": "NetworkUnavailable", "status": "True" }]),
    );
    c.nodes[2] = node("node-3", "192.0.2.13", json!({ "rack": "b" }), json!([]));
    c.nodes[3] = node("node-4", "192.0.2.14", json!({ "rack": "a" }), json!([]));
    c.l2 = vec![l2(
        json!({ "nodeSelectors": [{ "matchLabels": { "rack": "a" } }] }),
    )];
    assert_eq!(c.owners(), vec!["node-4".to_owned()]);
    // …and when that one is gone too, nobody answers.
    c.alive.remove("node-4");
    assert!(c.owners().is_empty());
}

#[test]
fn s1_external_traffic_policy_local_follows_ready_endpoints() {
    let mut c = Cluster::new(4);
    c.services = vec![service("svc", IP, "Local")];
    c.slices = vec![slice("svc", &["node-2", "node-3"])];
    let owners = c.owners();
    assert_eq!(owners.len(), 1);
    assert!(
        ["node-2", "node-3"].contains(&owners[0].as_str()),
        "{owners:?}"
    );
    c.slices = vec![slice("svc", &["node-4"])];
    assert_eq!(c.owners(), vec!["node-4".to_owned()]);
    c.slices = vec![];
    assert!(c.owners().is_empty(), "no endpoint → nobody announces");
}

#[test]
fn r10_a_node_address_in_a_status_is_never_answered() {
    // node-1's address lies inside the pool and a (foreign) status names it.
    let mut c = Cluster::new(3);
    c.nodes[0] = node("node-1", "198.51.100.20", json!({}), json!([]));
    c.services = vec![service("svc", "198.51.100.20", "Cluster")];
    assert!(
        c.answers().values().all(BTreeSet::is_empty),
        "{:?}",
        c.answers()
    );
    // The same status with an address that is no Node's is answered by exactly one node.
    c.services = vec![service("svc", "198.51.100.21", "Cluster")];
    assert_eq!(
        c.answers().values().filter(|ips| !ips.is_empty()).count(),
        1
    );
}

#[test]
fn s9_one_announcing_event_per_owner_change_and_one_reporter_when_nobody_may() {
    let mut c = Cluster::new(3);
    let mut planners = BTreeMap::new();
    let first = c.events(&mut planners);
    let owner = c.owners()[0].clone();
    assert_eq!(first.len(), 1, "{first:?}");
    assert_eq!(first[0].0, owner);
    assert_eq!(first[0].1.reason, REASON_ANNOUNCING);
    assert!(first[0].1.note.contains(&owner));
    assert!(
        c.events(&mut planners).is_empty(),
        "nothing new, nothing said"
    );

    c.alive.remove(&owner);
    let second = c.events(&mut planners);
    assert_eq!(second.len(), 1, "{second:?}");
    assert_ne!(second[0].0, owner);
    assert_eq!(second[0].1.reason, REASON_ANNOUNCING);

    // Nobody eligible: exactly one alive speaker reports it, once.
    c.l2 = vec![l2(
        json!({ "nodeSelectors": [{ "matchLabels": { "rack": "none" } }] }),
    )];
    let third = c.events(&mut planners);
    let warnings: Vec<_> = third
        .iter()
        .filter(|(_, e)| e.reason == REASON_NO_ELIGIBLE_NODE)
        .collect();
    assert_eq!(warnings.len(), 1, "{third:?}");
    assert!(c.events(&mut planners).is_empty());
}

/// Issue #29 O3 from the Node objects: `kubectl cordon` sets `spec.unschedulable`, which the
/// trimmed watch object keeps (S13) and the view reads; the owner's IP moves to one other node,
/// comes back on uncordon, and stays when every node is cordoned.
#[test]
fn o3_a_cordoned_owner_moves_its_ip_through_the_trimmed_watch_objects() {
    use ferrolb_speaker::trim;
    let cordon = |n: &mut Node, on: bool| {
        let mut full = n.clone();
        // What the API server sends: the spec with more than the cordon, all of it trimmed
        // but `unschedulable`.
        full.spec = Some(obj(json!({
            "unschedulable": on, "podCIDR": "10.244.1.0/24", "providerID": "x://y",
            "taints": [{ "key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule" }],
        })));
        trim::node(&mut full);
        assert_eq!(
            serde_json::to_value(&full.spec).unwrap(),
            json!({ "unschedulable": on })
        );
        *n = full;
    };
    let mut c = Cluster::new(3);
    let owner = c.owners();
    assert_eq!(owner.len(), 1);
    let first = owner[0].clone();
    let k = c
        .nodes
        .iter()
        .position(|n| n.metadata.name.as_deref() == Some(first.as_str()))
        .unwrap();
    cordon(&mut c.nodes[k], true);
    let during = c.owners();
    assert_eq!(during.len(), 1, "{during:?}");
    assert_ne!(during[0], first);
    cordon(&mut c.nodes[k], false);
    assert_eq!(c.owners(), vec![first.clone()]);
    for n in &mut c.nodes {
        cordon(n, true);
    }
    assert_eq!(
        c.owners(),
        vec![first],
        "every node cordoned: nothing moves"
    );
}

#[test]
fn s13_trimmed_watch_objects_give_the_same_plans_and_stay_small() {
    use ferrolb_speaker::trim;
    let bulk = "x".repeat(1 << 20);
    let big_meta = json!({
        "labels": { "team": "a", "kubernetes.io/service-name": "svc" },
        "annotations": {
            "kubectl.kubernetes.io/last-applied-configuration": bulk,
            "ferrolb.io/address-pool": "pool",
        },
        "managedFields": [{ "manager": "kubectl", "operation": "Apply",
                            "fieldsType": "FieldsV1", "fieldsV1": { "f:spec": {} } }],
    });
    let mut full = Cluster::new(4);
    full.services = vec![service("svc", IP, "Local")];
    full.slices = vec![slice("svc", &["node-2", "node-3"])];
    full.nodes[1] = node(
        "node-2",
        "192.0.2.12",
        json!({ "rack": "a" }),
        json!([{ "type": "Ready", "status": "True", "message": bulk.clone() },
               { "type": "MemoryPressure", "status": "False" }]),
    );
    for m in [
        &mut full.services[0].metadata,
        &mut full.slices[0].metadata,
        &mut full.nodes[0].metadata,
    ] {
        let mut v = serde_json::to_value(&*m).unwrap();
        let Value::Object(extra) = big_meta.clone() else {
            unreachable!()
        };
        v.as_object_mut().unwrap().extend(extra);
        *m = serde_json::from_value(v).unwrap();
    }
    let mut trimmed = Cluster::new(4);
    trimmed.services = full.services.clone();
    trimmed.slices = full.slices.clone();
    trimmed.nodes = full.nodes.clone();
    trimmed.services.iter_mut().for_each(trim::service);
    trimmed.slices.iter_mut().for_each(trim::endpoint_slice);
    trimmed.nodes.iter_mut().for_each(trim::node);
    trimmed.l2.iter_mut().for_each(trim::advertisement);

    assert_eq!(full.answers(), trimmed.answers());
    assert_eq!(full.owners().len(), 1);
    for (what, bytes) in [
        (
            "Service",
            serde_json::to_vec(&trimmed.services[0]).unwrap().len(),
        ),
        (
            "EndpointSlice",
            serde_json::to_vec(&trimmed.slices[0]).unwrap().len(),
        ),
        ("Node", serde_json::to_vec(&trimmed.nodes[1]).unwrap().len()),
    ] {
        assert!(bytes < 2048, "trimmed {what} is {bytes} bytes");
    }
    // What the view reads survives (spec, status, the address-pool annotation, the service-name
    // label); nothing else does.
    let svc = &trimmed.services[0];
    assert!(svc.status.is_some() && svc.spec.is_some());
    assert_eq!(
        svc.metadata.annotations,
        Some([("ferrolb.io/address-pool".to_string(), "pool".to_string())].into())
    );
    assert!(svc.metadata.managed_fields.is_none());
    assert_eq!(
        trimmed.slices[0].metadata.labels.as_ref().map(|l| l.len()),
        Some(1)
    );
}
