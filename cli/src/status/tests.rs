//! Each section of the report from fixed objects, and the text rendering.
#![allow(clippy::unwrap_used)]

use super::*;
use serde_json::json;

fn obj<T: serde::de::DeserializeOwned>(v: serde_json::Value) -> T {
    serde_json::from_value(v).unwrap()
}

fn node(name: &str, labels: serde_json::Value) -> Node {
    obj(json!({"metadata": {"name": name, "labels": labels}}))
}

fn service(ns: &str, name: &str, ips: &[&str]) -> Service {
    let ingress: Vec<_> = ips.iter().map(|ip| json!({"ip": ip})).collect();
    obj(json!({
        "metadata": {"name": name, "namespace": ns, "uid": format!("uid-{name}")},
        "spec": {"type": "LoadBalancer"},
        "status": {"loadBalancer": {"ingress": ingress}},
    }))
}

fn warning(ns: &str, name: &str, reason: &str, message: &str, at: &str) -> Event {
    obj(json!({
        "metadata": {"name": format!("{name}.{reason}"), "namespace": ns},
        "involvedObject": {"kind": "Service", "namespace": ns, "name": name, "uid": format!("uid-{name}")},
        "type": "Warning", "reason": reason, "message": message, "lastTimestamp": at,
    }))
}

fn ip_report(ip: &str, node: &str, held_by: Option<&str>) -> L2Announcement {
    obj(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Announcement",
        "metadata": {"name": ferrolb_crds::announcement_name(ip.parse().unwrap()), "namespace": "ferrolb-system"},
        "spec": {"ip": ip, "node": node, "interfaces": if held_by.is_some() { json!([]) } else { json!(["eth0"]) },
                 "services": ["default/web"], "heldBy": held_by},
    }))
}

fn member_report(node: &str, members: u32) -> L2Announcement {
    obj(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Announcement",
        "metadata": {"name": format!("node-{node}"), "namespace": "ferrolb-system"},
        "spec": {"ip": "", "node": node,
                 "membership": {"members": members, "observed": "2026-12-05T21:00:00Z"}},
    }))
}

fn base() -> Collected {
    Collected {
        version: Some(ServerVersion {
            git_version: "v1.34.1".into(),
            major: "1".into(),
            minor: "34".into(),
            emulation: None,
        }),
        namespace_name: "ferrolb-system".into(),
        namespace: Some(obj(
            json!({"metadata": {"name": "ferrolb-system", "labels": {
            "pod-security.kubernetes.io/enforce": "privileged",
            "pod-security.kubernetes.io/warn": "privileged",
            "kubernetes.io/metadata.name": "ferrolb-system"}}}),
        )),
        key_secret: ("ferrolb-memberlist".into(), true),
        metallb_namespace_name: "metallb-system".into(),
        ..Default::default()
    }
}

#[test]
fn a_healthy_install_needs_no_attention() {
    let mut c = base();
    c.nodes = vec![node("node-1", json!({})), node("node-2", json!({}))];
    c.announcements = vec![
        ip_report("198.51.100.10", "node-2", None),
        member_report("node-1", 2),
        member_report("node-2", 2),
    ];
    c.services = vec![service("default", "web", &["198.51.100.10"])];
    let r = report(&c);
    assert_eq!(r.attention, Vec::<String>::new());
    assert_eq!(r.kubernetes.supported, Some(true));
    assert_eq!(r.kubernetes.minimum, "1.32");
    assert_eq!(
        r.namespace.pod_security,
        BTreeMap::from([
            ("enforce".into(), "privileged".into()),
            ("warn".into(), "privileged".into())
        ])
    );
    assert!(r.key.exists);
    assert_eq!(
        r.addresses,
        vec![AddressReport {
            ip: "198.51.100.10".into(),
            services: vec!["default/web".into()],
            node: Some("node-2".into()),
            interfaces: vec!["eth0".into()],
            held_by: None,
        }]
    );
    assert_eq!(r.membership.agree, Some(true));
    assert_eq!(r.membership.reporting, 2);
    assert_eq!(
        r.nodes[0].members_observed.as_deref(),
        Some("2026-12-05T21:00:00Z")
    );
    assert_eq!(r.kube_proxy.mode, "unknown");
    assert_eq!(r.kube_proxy.strict_arp, "unknown");
    assert!(!r.metallb.active && !r.metallb.namespace_exists);
    let text = render(&r);
    assert!(text.contains("198.51.100.10           node-2"), "{text}");
    assert!(text.contains("Nothing needs attention."), "{text}");
}

#[test]
fn the_version_floor_is_1_32_and_provider_suffixes_parse() {
    let mut c = base();
    for (minor, ok) in [("31", Some(false)), ("32+", Some(true)), ("x", None)] {
        c.version = Some(ServerVersion {
            git_version: format!("v1.{minor}"),
            major: "1".into(),
            minor: minor.into(),
            emulation: None,
        });
        let r = report(&c);
        assert_eq!(r.kubernetes.supported, ok, "{minor}");
        assert_eq!(
            r.attention.iter().any(|a| a.contains("older than")),
            ok == Some(false)
        );
    }
    c.version = None;
    assert_eq!(report(&c).kubernetes.version, "unknown");
}

#[test]
fn a_missing_namespace_key_or_a_restricted_namespace_is_reported() {
    let mut c = base();
    c.key_secret.1 = false;
    let r = report(&c);
    assert!(!r.key.exists);
    assert!(
        r.attention.iter().any(|a| a
            .contains("membership key Secret ferrolb-system/ferrolb-memberlist does not exist")),
        "{:?}",
        r.attention
    );
    c.namespace = Some(obj(
        json!({"metadata": {"name": "ferrolb-system", "labels": {
        "pod-security.kubernetes.io/enforce": "baseline"}}}),
    ));
    let r = report(&c);
    assert!(
        r.attention
            .iter()
            .any(|a| a.contains("enforces Pod Security level baseline"))
    );
    c.namespace = None;
    let r = report(&c);
    assert!(!r.namespace.exists);
    assert!(
        r.attention
            .iter()
            .any(|a| a == "namespace ferrolb-system does not exist")
    );
}

#[test]
fn pools_show_use_per_family_and_bad_conditions() {
    let mut c = base();
    c.pools = vec![obj(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": {"name": "main"},
        "spec": {"addresses": ["198.51.100.0/30", "2001:db8::/126"]},
        "status": {"assignedIPv4": 3, "availableIPv4": 1, "assignedIPv6": 0, "availableIPv6": 4,
                   "conditions": [
                     {"type": "Ready", "status": "False", "reason": "NotAdvertised", "message": "no L2Advertisement covers pool main", "lastTransitionTime": "2026-12-05T21:00:00Z"},
                     {"type": "Overlapping", "status": "False", "reason": "NoOverlap", "message": "", "lastTransitionTime": "2026-12-05T21:00:00Z"}]},
    }))];
    let r = report(&c);
    assert_eq!(r.pools[0].ipv4, Usage { used: 3, free: 1 });
    assert_eq!(r.pools[0].ipv6, Usage { used: 0, free: 4 });
    assert_eq!(r.pools[0].conditions.len(), 2);
    assert_eq!(
        r.attention,
        vec!["pool main: Ready=False NotAdvertised: no L2Advertisement covers pool main"]
    );
    assert!(render(&r).contains("main                 3/1                  0/4"));
}

#[test]
fn pending_services_say_why_from_the_newest_warning_or_a_condition() {
    let mut c = base();
    c.services = vec![
        service("default", "full", &[]),
        service("default", "quiet", &[]),
        obj(json!({
            "metadata": {"name": "cond", "namespace": "default"},
            "spec": {"type": "LoadBalancer"},
            "status": {"conditions": [{"type": "Allocated", "status": "False", "reason": "Exhausted", "message": "pool full", "lastTransitionTime": "2026-12-05T21:00:00Z"}]},
        })),
        // Another implementation's Service is not ours: never pending here.
        obj(
            json!({"metadata": {"name": "other", "namespace": "default"},
                   "spec": {"type": "LoadBalancer", "loadBalancerClass": "example.com/lb"}}),
        ),
    ];
    c.service_events = vec![
        warning(
            "default",
            "full",
            "AllocationFailed",
            "old",
            "2026-12-05T20:00:00Z",
        ),
        warning(
            "default",
            "full",
            "AllocationFailed",
            "pool small is exhausted: no free IPv4 address",
            "2026-12-05T21:00:00Z",
        ),
    ];
    let r = report(&c);
    let got: Vec<(&str, &str)> = r
        .pending
        .iter()
        .map(|p| (p.service.as_str(), p.reason.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("default/cond", "Allocated=False Exhausted: pool full"),
            (
                "default/full",
                "AllocationFailed: pool small is exhausted: no free IPv4 address"
            ),
            (
                "default/quiet",
                "no Warning Event or condition says why (is the controller running? kubectl -n <namespace> get pods)"
            ),
        ]
    );
    assert_eq!(r.attention.len(), 3);
}

#[test]
fn an_ip_without_report_or_held_is_flagged() {
    let mut c = base();
    c.services = vec![service(
        "default",
        "web",
        &["198.51.100.10", "198.51.100.11"],
    )];
    c.announcements = vec![ip_report(
        "198.51.100.11",
        "node-1",
        Some("02:00:00:00:00:09"),
    )];
    let r = report(&c);
    assert_eq!(r.addresses[0].node, None);
    assert_eq!(r.addresses[1].held_by.as_deref(), Some("02:00:00:00:00:09"));
    assert!(
        r.attention
            .iter()
            .any(|a| a.starts_with("198.51.100.10 (default/web) has no L2Announcement"))
    );
    assert!(
        r.attention
            .iter()
            .any(|a| a.contains("198.51.100.11 is held back by node-1"))
    );
    assert!(render(&r).contains("(nobody)"));
}

#[test]
fn excluded_nodes_say_why_and_the_speakers_override_counts() {
    let mut c = base();
    c.nodes = vec![
        node("node-1", json!({EXCLUDE_LB_LABEL: ""})),
        node("node-2", json!({EXCLUDE_LB_LABEL: "false", "rack": "b"})),
        obj(
            json!({"metadata": {"name": "node-3", "labels": {"rack": "a"}},
                   "status": {"conditions": [{"type": "NetworkUnavailable", "status": "True"}]}}),
        ),
    ];
    c.advertisements = vec![obj(json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
        "metadata": {"name": "rack-a-b"},
        "spec": {"nodeSelectors": [{"matchExpressions": [{"key": "rack", "operator": "In", "values": ["a", "b"]}]}]},
    }))];
    c.announcements = vec![member_report("node-2", 0)];
    let r = report(&c);
    let why: Vec<(&str, Vec<String>)> = r
        .nodes
        .iter()
        .map(|n| (n.name.as_str(), n.excluded.clone()))
        .collect();
    assert_eq!(
        why,
        vec![
            (
                "node-1",
                vec![
                    format!("label {EXCLUDE_LB_LABEL}="),
                    "no L2Advertisement's nodeSelectors select it".to_owned()
                ]
            ),
            (
                "node-2",
                vec!["its speaker is out of the membership".to_owned()]
            ),
            (
                "node-3",
                vec!["condition NetworkUnavailable=True".to_owned()]
            ),
        ]
    );
    assert!(
        r.attention
            .iter()
            .any(|a| a == "no node may announce any IP")
    );
    // Speakers started with --ignore-exclude-lb: the label excludes nobody.
    c.advertisements.clear();
    c.speaker_daemonset = Some(obj(json!({
        "metadata": {"name": "ferrolb-speaker"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "speaker", "args": ["--ignore-exclude-lb"]}]}}},
    })));
    let r = report(&c);
    assert!(r.nodes[0].excluded.is_empty(), "{:?}", r.nodes[0]);
    // Or with the environment variable, read as the speaker reads it (clap's falsey values).
    for (value, ignored) in [
        ("true", true),
        ("1", true),
        ("yes", true),
        ("On", true),
        ("false", false),
        ("0", false),
        ("No", false),
        ("", false),
    ] {
        c.speaker_daemonset = Some(obj(json!({
            "metadata": {"name": "ferrolb-speaker"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "speaker", "env": [{"name": "FERROLB_IGNORE_EXCLUDE_LB", "value": value}]}]}}},
        })));
        let r = report(&c);
        assert_eq!(
            r.nodes[0].excluded.is_empty(),
            ignored,
            "{value:?}: {:?}",
            r.nodes[0]
        );
    }
    // Issue #28 item 1: --exclude-lb-label, as a flag (both forms) or in the environment.
    for (container, in_force) in [
        (
            json!({"name": "speaker", "args": ["--exclude-lb-label=ignore"]}),
            false,
        ),
        (
            json!({"name": "speaker", "args": ["--exclude-lb-label", "ignore"]}),
            false,
        ),
        (
            json!({"name": "speaker", "args": ["--exclude-lb-label", "honour"]}),
            true,
        ),
        (
            json!({"name": "speaker", "env": [{"name": "FERROLB_EXCLUDE_LB_LABEL", "value": "ignore"}]}),
            false,
        ),
        (
            json!({"name": "speaker", "env": [{"name": "FERROLB_EXCLUDE_LB_LABEL", "value": "auto"}]}),
            true,
        ),
        // The flag wins over the environment, as in clap.
        (
            json!({"name": "speaker", "args": ["--exclude-lb-label=honour"],
                "env": [{"name": "FERROLB_EXCLUDE_LB_LABEL", "value": "ignore"}]}),
            true,
        ),
    ] {
        c.speaker_daemonset = Some(obj(json!({
            "metadata": {"name": "ferrolb-speaker"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [container.clone()]}}},
        })));
        let r = report(&c);
        assert_eq!(
            r.nodes[0].excluded.is_empty(),
            !in_force,
            "{container}: {:?}",
            r.nodes[0]
        );
    }
}

/// Issue #28 item 1: under `auto` (the default) a label every Node carries is set aside, and the
/// report says so; under `honour` the Node is excluded.
#[test]
fn a_label_on_every_node_is_set_aside_under_auto() {
    let mut c = base();
    c.nodes = vec![node("node-1", json!({EXCLUDE_LB_LABEL: ""}))];
    let r = report(&c);
    assert!(r.nodes[0].excluded.is_empty(), "{:?}", r.nodes[0]);
    assert!(
        r.attention
            .iter()
            .any(|a| a.starts_with(&format!("every Node carries {EXCLUDE_LB_LABEL}"))),
        "{:?}",
        r.attention
    );
    c.speaker_daemonset = Some(obj(json!({
        "metadata": {"name": "ferrolb-speaker"},
        "spec": {"selector": {}, "template": {"spec": {"containers": [
            {"name": "speaker", "args": ["--exclude-lb-label=honour"]}]}}},
    })));
    let r = report(&c);
    assert_eq!(r.nodes[0].excluded, [format!("label {EXCLUDE_LB_LABEL}=")]);
    assert!(
        !r.attention
            .iter()
            .any(|a| a.starts_with("every Node carries"))
    );
}

#[test]
fn member_counts_agree_or_not() {
    let mut c = base();
    c.nodes = vec![
        node("node-1", json!({})),
        node("node-2", json!({})),
        node("node-3", json!({})),
    ];
    c.announcements = vec![member_report("node-1", 3), member_report("node-2", 2)];
    let r = report(&c);
    assert_eq!(r.membership.agree, Some(false));
    assert_eq!(
        r.membership.counts,
        BTreeMap::from([("node-1".into(), 3), ("node-2".into(), 2)])
    );
    assert_eq!(r.nodes[2].members, None);
    assert!(
        r.attention
            .iter()
            .any(|a| a.contains("node-1 sees 3, node-2 sees 2"))
    );
    // A report of a node that no longer exists is not counted.
    c.announcements = vec![member_report("node-1", 2), member_report("gone", 3)];
    assert_eq!(report(&c).membership.agree, Some(true));
    c.announcements.clear();
    assert_eq!(report(&c).membership.agree, None);
}

#[test]
fn kube_proxy_mode_and_strict_arp_come_from_its_config_map() {
    let cm = |conf: &str| -> ConfigMap {
        obj(
            json!({"metadata": {"name": "kube-proxy", "namespace": "kube-system"}, "data": {"config.conf": conf}}),
        )
    };
    let mut c = base();
    c.kube_proxy = Some(cm(
        "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\nmode: ipvs\nipvs:\n  strictARP: false\n",
    ));
    let r = report(&c);
    assert_eq!(
        (r.kube_proxy.mode.as_str(), r.kube_proxy.strict_arp.as_str()),
        ("ipvs", "false")
    );
    assert!(
        r.attention
            .iter()
            .any(|a| a.contains("IPVS mode with strictARP false"))
    );
    c.kube_proxy = Some(cm("mode: \"\"\nipvs:\n  strictARP: true\n"));
    let r = report(&c);
    assert_eq!(
        (r.kube_proxy.mode.as_str(), r.kube_proxy.strict_arp.as_str()),
        ("iptables", "true")
    );
    assert!(r.attention.is_empty());
    c.kube_proxy = Some(cm("mode: nftables\n"));
    assert_eq!(report(&c).kube_proxy.strict_arp, "unknown");
    c.kube_proxy = Some(cm(": not yaml ["));
    assert_eq!(report(&c).kube_proxy.mode, "unknown");
}

#[test]
fn metallb_and_the_minikube_addon_are_found() {
    let mut c = base();
    c.metallb_namespace = Some(obj(json!({"metadata": {"name": "metallb-system",
        "labels": {"kubernetes.io/minikube-addons": "metallb", "addonmanager.kubernetes.io/mode": "Reconcile"}}})));
    c.metallb_deployments = vec![obj(json!({"metadata": {"name": "controller"},
        "spec": {"replicas": 1, "selector": {}, "template": {}}, "status": {"readyReplicas": 1}}))];
    c.metallb_daemonsets = vec![obj(json!({"metadata": {"name": "speaker"},
        "spec": {"selector": {}, "template": {}},
        "status": {"desiredNumberScheduled": 1, "numberReady": 1, "currentNumberScheduled": 1, "numberMisscheduled": 0}}))];
    let r = report(&c);
    assert!(r.metallb.active && r.metallb.minikube_addon);
    assert_eq!(r.metallb.workloads.len(), 2);
    assert!(
        r.attention
            .iter()
            .any(|a| a.contains("minikube addons disable metallb"))
    );
    // Scaled to zero and the namespace left: not active.
    c.metallb_deployments[0] = obj(json!({"metadata": {"name": "controller"},
        "spec": {"replicas": 0, "selector": {}, "template": {}}}));
    c.metallb_daemonsets.clear();
    let r = report(&c);
    assert!(!r.metallb.active && r.metallb.namespace_exists);
    assert!(render(&r).contains("not running (namespace metallb-system remains)"));
}

#[test]
fn json_field_names_are_the_documented_ones() {
    let mut c = base();
    c.nodes = vec![node("node-1", json!({}))];
    c.announcements = vec![member_report("node-1", 1)];
    let v = serde_json::to_value(report(&c)).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(
        keys,
        [
            "addresses",
            "attention",
            "key",
            "kubeProxy",
            "kubernetes",
            "membership",
            "metallb",
            "namespace",
            "nodes",
            "pending",
            "pools"
        ]
    );
    assert_eq!(v["kubeProxy"]["strictArp"], "unknown");
    assert_eq!(v["nodes"][0]["members"], 1);
    assert_eq!(v["nodes"][0]["membersObserved"], "2026-12-05T21:00:00Z");
    assert_eq!(v["membership"]["agree"], true);
    assert_eq!(v["kubernetes"]["supported"], true);
    assert_eq!(v["namespace"]["podSecurity"]["enforce"], "privileged");
    assert_eq!(v["metallb"]["minikubeAddon"], false);
}
