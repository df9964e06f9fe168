//! The middle test tier (issue #9): Kubernetes objects in, exactly these writes and Events out —
//! the controller's [`Planner`] with no API server, milliseconds per test. One test (or more) per
//! controller rule of DESIGN §4; R13 (HA) is the executor's and is covered by the e2e suite
//! (`tests/tests/controller_cases.rs`), as the class filter of R14's metrics is.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::{Value, json};

use ferrolb_controller::contest::{self, STATUS_WRITE_CONFLICT};
use ferrolb_controller::plan::{Plan, Planner, Snapshot};
use ferrolb_controller::service::{ClassConfig, FIELD_MANAGER};
use ferrolb_crds::{IPAddressPool, L2Advertisement};

// ---- objects -------------------------------------------------------------------------------

fn pool(name: &str, addresses: &[&str], created: &str, extra: Value) -> Arc<IPAddressPool> {
    let mut spec = json!({ "addresses": addresses });
    if let (Some(s), Value::Object(e)) = (spec.as_object_mut(), extra) {
        s.extend(e);
    }
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": { "name": name, "creationTimestamp": created, "generation": 1 },
            "spec": spec,
        }))
        .unwrap(),
    )
}

fn l2_everywhere() -> Arc<L2Advertisement> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
            "metadata": { "name": "all" }, "spec": {},
        }))
        .unwrap(),
    )
}

fn node(name: &str, ip: &str) -> Arc<Node> {
    Arc::new(
        serde_json::from_value(json!({
            "metadata": { "name": name },
            "status": { "addresses": [{ "type": "InternalIP", "address": ip }] },
        }))
        .unwrap(),
    )
}

fn namespace(name: &str) -> Arc<Namespace> {
    Arc::new(serde_json::from_value(json!({ "metadata": { "name": name } })).unwrap())
}

/// A Service; `over` is merged into the object (JSON merge of top-level `metadata`/`spec`/`status`).
fn svc(name: &str, over: Value) -> Service {
    let mut v = json!({
        "metadata": { "name": name, "namespace": "default", "resourceVersion": "1", "uid": format!("uid-{name}") },
        "spec": {
            "type": "LoadBalancer",
            "ports": [{ "protocol": "TCP", "port": 80 }],
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "externalTrafficPolicy": "Cluster",
        },
    });
    merge(&mut v, over);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// `over` for a status of `ips`, written by `manager`.
fn status(ips: &[&str], manager: &str) -> Value {
    json!({
        "metadata": { "managedFields": [{
            "manager": manager, "operation": "Apply", "apiVersion": "v1",
            "fieldsType": "FieldsV1", "subresource": "status",
            "fieldsV1": { "f:status": { "f:loadBalancer": { "f:ingress": {} } } },
        }]},
        "status": { "loadBalancer": { "ingress":
            ips.iter().map(|ip| json!({ "ip": ip, "ipMode": "VIP" })).collect::<Vec<_>>() } },
    })
}

fn annotated(pairs: &[(&str, &str)]) -> Value {
    let a: BTreeMap<&str, &str> = pairs.iter().copied().collect();
    json!({ "metadata": { "annotations": a } })
}

// ---- running the planner -------------------------------------------------------------------

struct World {
    planner: Planner,
    snap: Snapshot,
    now: Instant,
}

impl World {
    fn new(pools: Vec<Arc<IPAddressPool>>) -> World {
        World::with_class(pools, ClassConfig::default())
    }

    fn with_class(pools: Vec<Arc<IPAddressPool>>, class: ClassConfig) -> World {
        World {
            planner: Planner::new(class, contest::Policy::default()),
            snap: Snapshot {
                pools,
                l2: vec![l2_everywhere()],
                namespaces: vec![namespace("default")],
                ..Snapshot::default()
            },
            now: Instant::now(),
        }
    }

    fn put(&mut self, s: Service) {
        let name = s.metadata.name.clone();
        self.snap.services.retain(|x| x.metadata.name != name);
        self.snap.services.push(Arc::new(s));
    }

    fn remove(&mut self, name: &str) {
        self.snap
            .services
            .retain(|x| x.metadata.name.as_deref() != Some(name));
    }

    /// One pass; every status write succeeds and comes back through the "watch" (the Service
    /// in the snapshot gets the status and a new resourceVersion), as the API server would do.
    fn pass(&mut self) -> Plan {
        let wall = Time(k8s_openapi::jiff::Timestamp::from_second(1_800_000_000).unwrap());
        let plan = self.planner.plan(&self.snap, self.now, &wall);
        for w in &plan.statuses {
            self.planner.status_written(w);
            let ips: Vec<String> = w.ips.iter().map(ToString::to_string).collect();
            let ips: Vec<&str> = ips.iter().map(String::as_str).collect();
            let mut s = (*w.service).clone();
            let rv: u64 = s
                .metadata
                .resource_version
                .as_deref()
                .unwrap_or("1")
                .parse()
                .unwrap();
            s.metadata.resource_version = Some((rv + 1).to_string());
            let mut v = serde_json::to_value(&s).unwrap();
            merge(&mut v, status(&ips, FIELD_MANAGER));
            if ips.is_empty() {
                v["status"]["loadBalancer"]["ingress"] = json!([]);
            }
            self.put(serde_json::from_value(v).unwrap());
        }
        for (name, st) in &plan.pools {
            let i = self
                .snap
                .pools
                .iter()
                .position(|p| p.metadata.name.as_deref() == Some(name))
                .unwrap();
            let mut p = (*self.snap.pools[i]).clone();
            p.status = Some(st.clone());
            self.snap.pools[i] = Arc::new(p);
        }
        plan
    }
}

/// `(service, ips)` of the status writes.
fn writes(plan: &Plan) -> Vec<(String, Vec<String>)> {
    let mut w: Vec<_> = plan
        .statuses
        .iter()
        .map(|w| {
            (
                w.service.metadata.name.clone().unwrap(),
                w.ips.iter().map(ToString::to_string).collect(),
            )
        })
        .collect();
    w.sort();
    w
}

/// `(service, reason)` of the Events.
fn events(plan: &Plan) -> Vec<(String, &'static str)> {
    let mut e: Vec<_> = plan
        .events
        .iter()
        .map(|(s, e)| (s.metadata.name.clone().unwrap(), e.reason))
        .collect();
    e.sort();
    e
}

fn message<'a>(plan: &'a Plan, svc: &str, reason: &str) -> &'a str {
    plan.events
        .iter()
        .find(|(s, e)| s.metadata.name.as_deref() == Some(svc) && e.reason == reason)
        .map(|(_, e)| e.message.as_str())
        .unwrap_or_else(|| panic!("no {reason} Event on {svc}: {:?}", plan.events))
}

fn w(svc: &str, ips: &[&str]) -> (String, Vec<String>) {
    (svc.into(), ips.iter().map(|s| (*s).to_owned()).collect())
}

fn basic_pool() -> Arc<IPAddressPool> {
    pool(
        "pool",
        &["198.51.100.0/29"],
        "2026-01-01T00:00:00Z",
        json!({}),
    )
}

// ---- R1–R14 --------------------------------------------------------------------------------

#[test]
fn r1_existing_assignments_are_kept_with_zero_writes_in_any_order() {
    for order in [[0, 1, 2], [2, 1, 0], [1, 2, 0]] {
        let mut world = World::new(vec![basic_pool()]);
        let svcs = [
            svc("a", status(&["198.51.100.2"], FIELD_MANAGER)),
            svc("b", status(&["198.51.100.1"], FIELD_MANAGER)),
            svc("c", json!({})),
        ];
        for i in order {
            world.put(svcs[i].clone());
        }
        let plan = world.pass();
        // Only the new Service is written, with an address nobody holds (IPv4 CIDR entries
        // never hand out their network and broadcast addresses).
        assert_eq!(writes(&plan), vec![w("c", &["198.51.100.3"])], "{order:?}");
        assert_eq!(events(&plan), vec![("c".into(), "IPAllocated")]);
        assert!(
            world.pass().statuses.is_empty(),
            "steady state writes nothing"
        );
    }
}

#[test]
fn r2_sharing_needs_the_same_key_and_disjoint_ports() {
    let mut world = World::new(vec![basic_pool()]);
    let share = |name: &str, port: u16| {
        let mut s = svc(
            name,
            annotated(&[
                ("ferrolb.io/allow-shared-ip", "k"),
                ("ferrolb.io/loadBalancerIPs", "198.51.100.3"),
            ]),
        );
        s.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = i32::from(port);
        s
    };
    world.put(share("a", 80));
    world.put(share("b", 443));
    world.put(share("c", 80)); // same key, overlapping port: not shared
    let plan = world.pass();
    assert_eq!(
        writes(&plan),
        vec![w("a", &["198.51.100.3"]), w("b", &["198.51.100.3"])]
    );
    assert!(
        message(&plan, "c", "AllocationFailed").contains("198.51.100.3"),
        "{:?}",
        plan.events
    );
}

#[test]
fn r3_a_held_request_waits_and_is_granted_when_freed() {
    let mut world = World::new(vec![basic_pool()]);
    world.put(svc("a", status(&["198.51.100.1"], FIELD_MANAGER)));
    world.put(svc(
        "b",
        annotated(&[("ferrolb.io/loadBalancerIPs", "198.51.100.1")]),
    ));
    let plan = world.pass();
    assert!(writes(&plan).is_empty());
    assert!(message(&plan, "b", "AllocationFailed").contains("default/a"));
    world.remove("a");
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("b", &["198.51.100.1"])]);
}

#[test]
fn r4_pool_choice_named_then_priority_then_name() {
    let created = "2026-01-01T00:00:00Z";
    let mut world = World::new(vec![
        pool("b-auto", &["198.51.100.8/30"], created, json!({})),
        pool("a-auto", &["198.51.100.4/30"], created, json!({})),
        pool(
            "prio",
            &["198.51.100.12/30"],
            created,
            json!({ "serviceAllocation": { "priority": 1, "namespaces": ["default"] } }),
        ),
        pool(
            "manual",
            &["198.51.100.16/30"],
            created,
            json!({ "autoAssign": false }),
        ),
    ]);
    world.put(svc("matched", json!({})));
    world.put(svc(
        "named",
        annotated(&[("ferrolb.io/address-pool", "manual")]),
    ));
    let plan = world.pass();
    assert_eq!(
        writes(&plan),
        vec![
            w("matched", &["198.51.100.13"]),
            w("named", &["198.51.100.17"])
        ]
    );
    // Without serviceAllocation pools matching: autoAssign pools by name.
    let mut world = World::new(vec![
        pool("b-auto", &["198.51.100.8/30"], created, json!({})),
        pool("a-auto", &["198.51.100.4/30"], created, json!({})),
    ]);
    world.put(svc("x", json!({})));
    assert_eq!(writes(&world.pass()), vec![w("x", &["198.51.100.5"])]);
}

#[test]
fn r5_require_dual_stack_needs_both_families_from_one_pool() {
    let dual =
        json!({ "spec": { "ipFamilies": ["IPv4", "IPv6"], "ipFamilyPolicy": "RequireDualStack" } });
    let prefer =
        json!({ "spec": { "ipFamilies": ["IPv6", "IPv4"], "ipFamilyPolicy": "PreferDualStack" } });
    let mut world = World::new(vec![pool(
        "v4",
        &["198.51.100.0/30"],
        "2026-01-01T00:00:00Z",
        json!({}),
    )]);
    world.put(svc("require", dual.clone()));
    world.put(svc("prefer", prefer.clone()));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("prefer", &["198.51.100.1"])]);
    assert_eq!(
        events(&plan),
        vec![
            ("prefer".into(), "AllocationFailed"),
            ("prefer".into(), "IPAllocated"),
            ("require".into(), "AllocationFailed")
        ]
    );
    let mut world = World::new(vec![pool(
        "both",
        &["198.51.100.0/30", "2001:db8::/126"],
        "2026-01-01T00:00:00Z",
        json!({}),
    )]);
    world.put(svc("require", dual));
    world.put(svc("prefer", prefer));
    assert_eq!(
        writes(&world.pass()),
        vec![
            // In the order of spec.ipFamilies.
            w("prefer", &["2001:db8::", "198.51.100.1"]),
            w("require", &["198.51.100.2", "2001:db8::1"]),
        ]
    );
}

#[test]
fn r6_release_clears_our_status_and_serves_the_waiting_at_once() {
    let mut world = World::new(vec![pool(
        "one",
        &["198.51.100.9/32"],
        "2026-01-01T00:00:00Z",
        json!({}),
    )]);
    world.put(svc("a", json!({})));
    world.put(svc("b", json!({})));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["198.51.100.9"])]);
    // a becomes ClusterIP: its status is cleared, the IP goes to b in the same pass.
    let mut a: Service = (**world
        .snap
        .services
        .iter()
        .find(|s| s.metadata.name.as_deref() == Some("a"))
        .unwrap())
    .clone();
    a.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
    world.put(a);
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &[]), w("b", &["198.51.100.9"])]);
    assert!(events(&plan).contains(&("a".into(), "IPReleased")));
}

#[test]
fn r7_pool_edits_never_readdress_an_ip_still_inside() {
    let created = "2026-01-01T00:00:00Z";
    let mut world = World::new(vec![pool("p", &["198.51.100.0/29"], created, json!({}))]);
    world.put(svc("a", status(&["198.51.100.5"], FIELD_MANAGER)));
    assert!(world.pass().statuses.is_empty());
    // Shrunk but still containing .5: nothing moves.
    world.snap.pools = vec![pool("p", &["198.51.100.4/30"], created, json!({}))];
    assert!(world.pass().statuses.is_empty());
    // Shrunk past it: re-allocated with a Warning.
    world.snap.pools = vec![pool("p", &["198.51.100.0/30"], created, json!({}))];
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["198.51.100.1"])]);
    assert!(events(&plan).contains(&("a".into(), "Reallocated")));
}

#[test]
fn r8_foreign_status_is_replaced_once_then_a_write_war_backs_off() {
    let mut world = World::new(vec![basic_pool()]);
    world.put(svc("a", status(&["192.0.2.4", "192.0.2.5"], "other-lb")));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["198.51.100.1"])]);
    assert!(message(&plan, "a", "StatusReplaced").contains("192.0.2.4"));
    // The other writer keeps putting its status back: at most 3 writes of ours, then one Warning.
    let mut ours = 1;
    let mut warnings = 0;
    for round in 0..10 {
        let rv = format!("{}", 100 + round);
        let mut s = svc("a", status(&["192.0.2.4"], "other-lb"));
        s.metadata.resource_version = Some(rv);
        world.put(s);
        world.now += Duration::from_secs(1);
        let plan = world.pass();
        ours += plan.statuses.len();
        let warned = events(&plan)
            .iter()
            .filter(|(_, r)| *r == STATUS_WRITE_CONFLICT)
            .count();
        if warned > 0 {
            assert!(message(&plan, "a", STATUS_WRITE_CONFLICT).contains("other-lb"));
        }
        warnings += warned;
    }
    assert_eq!((ours, warnings), (3, 1));
}

#[test]
fn r9_overlapping_addresses_belong_to_the_older_pool_unless_the_service_names_the_newer() {
    let mut world = World::new(vec![
        pool(
            "new",
            &["198.51.100.0/30"],
            "2026-02-01T00:00:00Z",
            json!({}),
        ),
        pool(
            "old",
            &["198.51.100.2/31"],
            "2026-01-01T00:00:00Z",
            json!({}),
        ),
    ]);
    world.put(svc(
        "n",
        annotated(&[
            ("ferrolb.io/address-pool", "new"),
            ("ferrolb.io/loadBalancerIPs", "198.51.100.2"),
        ]),
    ));
    // Without the annotation the same request is served by the owner, "old".
    world.put(svc(
        "o",
        annotated(&[("ferrolb.io/loadBalancerIPs", "198.51.100.3")]),
    ));
    // Naming "new" without a request: "new" hands out only what it owns (.1; .0 is the network).
    world.put(svc("x", annotated(&[("ferrolb.io/address-pool", "new")])));
    let plan = world.pass();
    assert_eq!(
        writes(&plan),
        vec![
            w("n", &["198.51.100.2"]),
            w("o", &["198.51.100.3"]),
            w("x", &["198.51.100.1"]),
        ]
    );
    let events = events(&plan);
    assert!(events.contains(&("n".into(), "IPAllocated")), "{events:?}");
    let new_status = plan
        .pools
        .iter()
        .find(|(n, _)| n == "new")
        .map(|(_, s)| s.clone())
        .unwrap();
    let overlapping = new_status
        .conditions
        .iter()
        .find(|c| c.type_ == "Overlapping")
        .unwrap();
    assert_eq!(overlapping.status, "True");
    assert!(overlapping.message.contains("old"));
}

#[test]
fn r10_node_addresses_are_never_handed_out() {
    let mut world = World::new(vec![basic_pool()]);
    world.snap.nodes = vec![node("n1", "198.51.100.1"), node("n2", "198.51.100.2")];
    world.put(svc("a", json!({})));
    world.put(svc(
        "b",
        annotated(&[("ferrolb.io/loadBalancerIPs", "198.51.100.2")]),
    ));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["198.51.100.3"])]);
    assert!(events(&plan).contains(&("b".into(), "AllocationFailed")));
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "pool").unwrap();
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == "NodeAddressConflict")
        .unwrap();
    assert_eq!(c.status, "True");
}

#[test]
fn r11_pending_services_are_served_when_a_pool_appears() {
    let mut world = World::new(vec![]);
    world.put(svc("a", json!({})));
    let plan = world.pass();
    assert!(writes(&plan).is_empty());
    assert!(message(&plan, "a", "AllocationFailed").contains("no pool can serve this Service"));
    world.snap.pools = vec![basic_pool()];
    assert_eq!(writes(&world.pass()), vec![w("a", &["198.51.100.1"])]);
}

#[test]
fn r12_a_slash_48_pool_is_served_and_counted_without_overflow() {
    let mut world = World::new(vec![pool(
        "v6",
        &["2001:db8:1::/48"],
        "2026-01-01T00:00:00Z",
        json!({}),
    )]);
    world.put(svc("a", json!({ "spec": { "ipFamilies": ["IPv6"] } })));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["2001:db8:1::"])]);
    let (_, _, assigned, available) = plan
        .tally
        .pools
        .iter()
        .find(|(p, f, _, _)| p == "v6" && f.as_k8s() == "IPv6")
        .unwrap()
        .clone();
    assert_eq!(assigned, 1);
    assert_eq!(available, u64::MAX, "2^80 - 1 free saturates");
}

#[test]
fn r14_events_and_counters_say_what_happened() {
    let mut world = World::new(vec![basic_pool()]);
    world.put(svc("a", json!({})));
    let plan = world.pass();
    assert_eq!(plan.tally.allocations, 1);
    assert!(message(&plan, "a", "IPAllocated").contains("198.51.100.1 from pool pool"));
    world.remove("a");
    let plan = world.pass();
    assert_eq!(plan.tally.releases, 1);
    assert!(writes(&plan).is_empty(), "a deleted Service is not written");
    // A deleted Service still gets IPReleased, about the object it was (namespace, name, uid).
    assert_eq!(events(&plan), vec![("a".to_string(), "IPReleased")]);
    assert!(
        message(&plan, "a", "IPReleased")
            .contains("released 198.51.100.1: the Service was deleted")
    );
    let (gone, _) = &plan.events[0];
    assert_eq!(gone.metadata.namespace.as_deref(), Some("default"));
    assert_eq!(gone.metadata.uid.as_deref(), Some("uid-a"));
}

#[test]
fn r14_pending_services_are_tallied_by_reason_until_served_or_gone() {
    let mut world = World::new(vec![basic_pool()]);
    world.put(svc("served", json!({})));
    world.put(svc(
        "stray",
        annotated(&[("ferrolb.io/loadBalancerIPs", "203.0.113.7")]),
    ));
    world.put(svc(
        "unnamed-pool",
        annotated(&[("ferrolb.io/address-pool", "nowhere")]),
    ));
    let plan = world.pass();
    assert_eq!(
        plan.tally.pending,
        BTreeMap::from([("no_pool", 1), ("requested_in_no_pool", 1)])
    );
    // A pass that changes nothing still reports them: the gauge is a level, not an edge.
    assert_eq!(world.pass().tally.pending, plan.tally.pending);
    world.remove("stray");
    assert_eq!(world.pass().tally.pending, BTreeMap::from([("no_pool", 1)]));
    world.snap.pools.push(pool(
        "nowhere",
        &["198.51.100.64/29"],
        "2026-01-01T00:00:00Z",
        json!({ "autoAssign": false }),
    ));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("unnamed-pool", &["198.51.100.65"])]);
    assert!(plan.tally.pending.is_empty(), "{:?}", plan.tally.pending);
}

#[test]
fn class_filter_other_classes_are_never_written() {
    let mut world = World::with_class(
        vec![basic_pool()],
        ClassConfig {
            lb_class: "ferrolb.io/ferrolb".into(),
            default_class: false,
        },
    );
    world.put(svc("classless", json!({})));
    world.put(svc(
        "other",
        json!({ "spec": { "loadBalancerClass": "example.com/other" } }),
    ));
    world.put(svc(
        "ours",
        json!({ "spec": { "loadBalancerClass": "ferrolb.io/ferrolb" } }),
    ));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("ours", &["198.51.100.1"])]);
    assert_eq!(events(&plan), vec![("ours".into(), "IPAllocated")]);
}

#[test]
fn annotation_conflicts_warn_once() {
    let mut world = World::new(vec![basic_pool()]);
    world.put(svc(
        "a",
        annotated(&[
            ("ferrolb.io/loadBalancerIPs", "198.51.100.1"),
            ("metallb.universe.tf/loadBalancerIPs", "198.51.100.2"),
        ]),
    ));
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["198.51.100.1"])]);
    assert!(events(&plan).contains(&("a".into(), "AnnotationConflict")));
    let again = world.pass();
    assert!(events(&again).is_empty(), "{:?}", again.events);
}

// ---- automatic pools (issue #28) ------------------------------------------------------------

/// The node report `node-<node>` a speaker writes, with its networks and in-use candidates.
fn node_report(node: &str, networks: Value, in_use: Value) -> Arc<ferrolb_crds::L2Announcement> {
    probed_report(node, networks, in_use, json!([]))
}

/// [`node_report`] with `unanswered`: the candidates the speaker probed with no answer.
fn probed_report(
    node: &str,
    networks: Value,
    in_use: Value,
    unanswered: Value,
) -> Arc<ferrolb_crds::L2Announcement> {
    Arc::new(
        serde_json::from_value(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Announcement",
            "metadata": { "name": format!("node-{node}"), "namespace": "ferrolb-system" },
            "spec": {
                "ip": "", "node": node, "networks": networks, "inUse": in_use,
                "unanswered": unanswered,
            },
        }))
        .unwrap(),
    )
}

fn ready_of(plan: &Plan, pool: &str) -> (String, String, String) {
    let (_, st) = plan.pools.iter().find(|(n, _)| n == pool).unwrap();
    let c = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

/// Issue #28: "an address that answers ARP when probed is skipped and reported, not handed
/// out". A Service waiting when the pool first resolves gets nothing until a speaker reports
/// the candidate probed with no answer; a candidate another host answered is never handed out.
#[test]
fn automatic_pool_hands_out_only_addresses_a_speaker_probed_unanswered() {
    let auto = Arc::new(
        serde_json::from_value::<IPAddressPool>(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": { "name": "laptop", "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1 },
            "spec": { "autoAddresses": { "size": 2 } },
        }))
        .unwrap(),
    );
    let mut world = World::new(vec![auto]);
    world.snap.nodes = vec![node("minikube", "192.168.49.2")];
    world.put(svc("a", json!({})));
    let eth0 = json!([{ "interface": "eth0", "prefix": "192.168.49.2/24" }]);
    // The network arrives with the Service already waiting: candidates, no address yet.
    world.snap.reports = vec![node_report("minikube", eth0.clone(), json!([]))];
    let plan = world.pass();
    assert!(writes(&plan).is_empty(), "{:?}", writes(&plan));
    assert!(events(&plan).contains(&("a".into(), "AllocationFailed")));
    let (status, reason, msg) = ready_of(&plan, "laptop");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "WaitingForProbes")
    );
    assert!(msg.contains("probe"), "{msg}");
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "laptop").unwrap();
    let a = st.auto_addresses.clone().unwrap();
    // The window (.253, .254) and four below it, probed ahead.
    assert_eq!(a.candidates, vec!["192.168.49.249-192.168.49.254"]);
    assert!(a.addresses.is_empty());
    // Nothing changes on the next pass: still pending, no write.
    assert!(writes(&world.pass()).is_empty());

    // The speaker probed the top two: .254 answered (another host), .253 quiet. .254 is skipped
    // and never handed out; the window moves down to .252 (not probed yet); the Service gets
    // .253.
    world.snap.reports = vec![probed_report(
        "minikube",
        eth0.clone(),
        json!([{ "ip": "192.168.49.254", "mac": "02:42:c0:a8:31:fe" }]),
        json!(["192.168.49.253/32"]),
    )];
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["192.168.49.253"])]);
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "laptop").unwrap();
    let a = st.auto_addresses.clone().unwrap();
    assert_eq!(a.candidates, vec!["192.168.49.248-192.168.49.253"]);
    assert_eq!(a.addresses, vec!["192.168.49.253/32"]);
    assert_eq!(a.skipped_count, 1);
    assert_eq!(ready_of(&plan, "laptop").0, "True");

    // A second Service waits for .252's probe.
    world.put(svc("b", json!({})));
    let plan = world.pass();
    assert!(writes(&plan).is_empty(), "{:?}", writes(&plan));
    // The speaker stops listing .253 (a Service holds it: no longer probed): it stays (R7).
    world.snap.reports = vec![probed_report(
        "minikube",
        eth0,
        json!([{ "ip": "192.168.49.254", "mac": "02:42:c0:a8:31:fe" }]),
        json!(["192.168.49.252/32"]),
    )];
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("b", &["192.168.49.252"])]);
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "laptop").unwrap();
    assert_eq!(
        st.auto_addresses.clone().unwrap().addresses,
        vec!["192.168.49.252-192.168.49.253"]
    );
}

fn auto_pool(name: &str, size: u16, created: &str) -> Arc<IPAddressPool> {
    Arc::new(
        serde_json::from_value::<IPAddressPool>(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": { "name": name, "creationTimestamp": created, "generation": 1 },
            "spec": { "autoAddresses": { "size": size } },
        }))
        .unwrap(),
    )
}

fn auto_addresses(plan: &Plan, pool: &str) -> Vec<String> {
    let (_, st) = plan.pools.iter().find(|(n, _)| n == pool).unwrap();
    st.auto_addresses.clone().unwrap().addresses
}

/// R7 for automatic pools: an address a Service holds stays in the pool when the reports are
/// gone (a controller that just started, a node that lost its address) and when another network
/// wins the vote; the Service is never re-addressed.
#[test]
fn automatic_pool_keeps_held_addresses_without_reports_and_across_a_network_change() {
    let mut world = World::new(vec![auto_pool("laptop", 2, "2026-01-01T00:00:00Z")]);
    world.snap.nodes = vec![node("minikube", "192.168.49.2")];
    world.put(svc("a", json!({})));
    let eth0 = json!([{ "interface": "eth0", "prefix": "192.168.49.2/24" }]);
    world.snap.reports = vec![probed_report(
        "minikube",
        eth0,
        json!([]),
        json!(["192.168.49.249-192.168.49.254"]),
    )];
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["192.168.49.253"])]);
    // No report at all.
    world.snap.reports = vec![];
    let plan = world.pass();
    assert!(writes(&plan).is_empty(), "{:?}", writes(&plan));
    assert_eq!(auto_addresses(&plan, "laptop"), vec!["192.168.49.253/32"]);
    // Another network now.
    world.snap.reports = vec![probed_report(
        "minikube",
        json!([{ "interface": "eth0", "prefix": "10.0.0.2/24" }]),
        json!([]),
        json!(["10.0.0.249-10.0.0.254"]),
    )];
    let plan = world.pass();
    assert!(writes(&plan).is_empty(), "{:?}", writes(&plan));
    assert!(
        auto_addresses(&plan, "laptop").contains(&"192.168.49.253/32".to_owned()),
        "{:?}",
        auto_addresses(&plan, "laptop")
    );
    // A report of a Node that no longer exists counts for nothing.
    world.snap.reports = vec![probed_report(
        "gone",
        json!([{ "interface": "eth0", "prefix": "172.16.0.2/24" }]),
        json!([]),
        json!(["172.16.0.249-172.16.0.254"]),
    )];
    let plan = world.pass();
    assert_eq!(auto_addresses(&plan, "laptop"), vec!["192.168.49.253/32"]);
}

/// Two automatic pools on one network: the newer one takes the addresses below the older
/// one's window and probe-ahead, instead of the same window (which R9 would give to the older
/// pool whole, leaving the newer one nothing).
#[test]
fn a_newer_automatic_pool_takes_the_addresses_below_the_older_one() {
    let mut world = World::new(vec![
        auto_pool("second", 2, "2026-02-01T00:00:00Z"),
        auto_pool("first", 2, "2026-01-01T00:00:00Z"),
    ]);
    world.snap.nodes = vec![node("minikube", "192.168.49.2")];
    world.snap.reports = vec![probed_report(
        "minikube",
        json!([{ "interface": "eth0", "prefix": "192.168.49.2/24" }]),
        json!([]),
        json!(["192.168.49.240-192.168.49.254"]),
    )];
    let plan = world.pass();
    assert_eq!(
        auto_addresses(&plan, "first"),
        vec!["192.168.49.253-192.168.49.254"]
    );
    assert_eq!(
        auto_addresses(&plan, "second"),
        vec!["192.168.49.247-192.168.49.248"]
    );
}

#[test]
fn automatic_pool_waits_for_a_network_then_skips_gateways_nodes_and_hosts_in_use() {
    let auto = Arc::new(
        serde_json::from_value::<IPAddressPool>(json!({
            "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
            "metadata": { "name": "laptop", "creationTimestamp": "2026-01-01T00:00:00Z", "generation": 1 },
            "spec": { "autoAddresses": { "size": 4 } },
        }))
        .unwrap(),
    );
    let mut world = World::new(vec![auto]);
    world.snap.nodes = vec![
        node("minikube", "192.168.49.2"),
        node("m02", "192.168.49.252"),
    ];
    world.put(svc("a", json!({})));
    let plan = world.pass();
    assert!(
        writes(&plan).is_empty(),
        "nothing to hand out before a report"
    );
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "laptop").unwrap();
    let ready = st.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "WaitingForNodeNetwork")
    );

    // The speaker of minikube reports eth0 in 192.168.49.0/24 (gateway .254 for the test) and
    // that .253 answered its probe. Candidates, top down: .253, .251, .250, .249, .248 (.255 is
    // the broadcast address, .254 the gateway, .252 a Node); .253 is skipped, .248 taken instead.
    world.snap.reports = vec![probed_report(
        "minikube",
        json!([{ "interface": "eth0", "prefix": "192.168.49.2/24", "gateway": "192.168.49.254" }]),
        json!([{ "ip": "192.168.49.253", "mac": "02:42:c0:a8:31:fd" }]),
        json!(["192.168.49.248-192.168.49.251"]),
    )];
    let plan = world.pass();
    assert_eq!(writes(&plan), vec![w("a", &["192.168.49.248"])]);
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "laptop").unwrap();
    let a = st.auto_addresses.clone().unwrap();
    assert_eq!(a.prefix.as_deref(), Some("192.168.49.0/24"));
    assert_eq!(a.addresses, vec!["192.168.49.248-192.168.49.251"]);
    assert_eq!(
        (a.skipped.as_slice(), a.skipped_count),
        (
            &[
                "192.168.49.253 (answered by 02:42:c0:a8:31:fd, probed from node minikube)"
                    .to_owned()
            ][..],
            1
        )
    );
    assert_eq!(
        st.conditions
            .iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status.as_str()),
        Some("True")
    );

    // A later in-use report for the address a Service holds is ours answering, and with .253
    // quiet again the top four are .249-.253: the held .248 stays in the pool all the same.
    world.snap.reports = vec![probed_report(
        "minikube",
        json!([{ "interface": "eth0", "prefix": "192.168.49.2/24", "gateway": "192.168.49.254" }]),
        json!([{ "ip": "192.168.49.248", "mac": "02:42:c0:a8:31:02" }]),
        json!(["192.168.49.249-192.168.49.253"]),
    )];
    let plan = world.pass();
    assert!(
        writes(&plan).is_empty(),
        "{:?} {:?}",
        writes(&plan),
        plan.events
    );
    let (_, st) = plan.pools.iter().find(|(n, _)| n == "laptop").unwrap();
    let a = st.auto_addresses.clone().unwrap();
    assert_eq!(
        a.addresses,
        vec!["192.168.49.248-192.168.49.251", "192.168.49.253/32"]
    );
    assert_eq!(a.skipped_count, 0);

    // A report under another node's name is not believed (the admission policy binds only
    // spec.node to the writer).
    let mut forged = (*node_report(
        "minikube",
        json!([{ "interface": "eth0", "prefix": "10.9.0.2/16" }]),
        json!([]),
    ))
    .clone();
    forged.metadata.name = Some("node-m02".into());
    world.snap.reports.push(Arc::new(forged.clone()));
    forged.metadata.name = Some("node-m03".into());
    world.snap.reports.push(Arc::new(forged));
    world.pass();
    let laptop = world
        .snap
        .pools
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("laptop"))
        .unwrap();
    let prefix = laptop
        .status
        .as_ref()
        .and_then(|s| s.auto_addresses.as_ref())
        .and_then(|a| a.prefix.clone());
    assert_eq!(prefix.as_deref(), Some("192.168.49.0/24"));
}
