//! The dry report: what ferrolb's controller will do with each Service once the converted pools
//! and advertisements are applied and it starts. Computed by the controller's own planner
//! ([`ferrolb_controller::plan::Planner`], pure), run once over the Services, the converted
//! objects, the Nodes and the Namespaces — the first pass of a new leader, which adopts every
//! valid existing address without a write (DESIGN R1) before it hands anything out. Nothing is
//! written anywhere.
//!
//! One finding per `type: LoadBalancer` Service of ferrolb's class saying what happens to its
//! addresses (`keeps`, `gets`, `changes … to …`, `loses`, `stays pending`) with the Events the
//! controller would publish, then one per `metallb.io/…` or `metallb.universe.tf/…` annotation
//! saying how ferrolb reads it ([`ferrolb_crds::annotations`]). A Service of another class is
//! reported only when it carries MetalLB annotations or holds an address of a converted pool
//! (MetalLB may have served it under its own class). Findings are [`Level::Warning`] when the
//! Service's addresses change, it stays pending, an Event is a Warning, or an annotation is one
//! ferrolb does not read; [`Level::Info`] otherwise.
//!
//! Before those, one [`Level::Warning`] per converted pool in which Services of different
//! namespaces share an address by their sharing key today, as MetalLB allowed by the key alone:
//! ferrolb shares across namespaces only in a pool with `spec.allowSharingAcrossNamespaces: true`,
//! which `ferrolb migrate` never sets (issue #27 item 6; [`across_namespaces`]).
//!
//! Without the cluster (files only), Namespaces not in the input are known only by the label the
//! API server sets on each, `kubernetes.io/metadata.name`, and Nodes not in the input are unknown.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use ferrolb_controller::contest::Policy;
use ferrolb_controller::plan::{Planner, Snapshot};
use ferrolb_crds::addresses::AddressEntry;
use ferrolb_crds::annotations::{ADDRESS_POOL, ALLOW_SHARED_IP, LOAD_BALANCER_IPS, lookup};
use ferrolb_crds::service::{ClassFilter, ServiceClass, ingress_ips};
use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use super::crd::NAMESPACE_NAME_LABEL;
use super::{Conversion, Finding, Level};

/// The prefixes of MetalLB's Service annotations.
pub const METALLB_PREFIXES: [&str; 2] = ["metallb.io/", "metallb.universe.tf/"];

/// The annotation in which MetalLB records the pool a Service's address came from.
const ALLOCATED_FROM_POOL: &str = "ip-allocated-from-pool";

/// The findings about `conversion.services` (see the module docs). `class` is the controller's
/// `--lb-class` / `--default-class`; `now` is any instant (the planner's clock for write-war
/// backoffs, which a single pass never reaches).
pub fn report(
    conversion: &Conversion,
    nodes: &[Node],
    namespaces: &[Namespace],
    class: &ClassFilter,
    now: Instant,
) -> Vec<Finding> {
    let services: Vec<Arc<Service>> = conversion
        .services
        .iter()
        .map(|(_, s)| Arc::new(s.clone()))
        .collect();
    let snap = Snapshot {
        services: services.clone(),
        pools: conversion
            .pools
            .iter()
            .map(|p| Arc::new(p.object.clone()))
            .collect(),
        l2: conversion
            .advertisements
            .iter()
            .map(|a| Arc::new(a.object.clone()))
            .collect(),
        nodes: nodes.iter().cloned().map(Arc::new).collect(),
        namespaces: with_service_namespaces(namespaces, &conversion.services),
        conflict_events: Vec::new(),
        reports: Vec::new(),
    };
    let mut planner = Planner::new(class.clone(), Policy::default());
    // The wall clock only stamps pool conditions, which the report does not show.
    let plan = planner.plan(&snap, now, &Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));

    let mut out = across_namespaces(conversion, class);
    for ((source, svc), planned) in conversion.services.iter().zip(&services) {
        let subject = format!(
            "Service {}/{}",
            svc.metadata.namespace.as_deref().unwrap_or_default(),
            svc.metadata.name.as_deref().unwrap_or_default()
        );
        let mut push = |level: Level, message: String| {
            out.push(Finding {
                level,
                source: source.clone(),
                subject: subject.clone(),
                field: None,
                message,
            });
        };
        let annotations = metallb_annotations(svc);
        let current = ingress_ips(svc);
        match class.classify(svc) {
            ServiceClass::NotLoadBalancer => {
                if !annotations.is_empty() {
                    push(
                        Level::Info,
                        "not type LoadBalancer: its MetalLB annotations have no effect".into(),
                    );
                }
            }
            ServiceClass::OtherClass => {
                if !annotations.is_empty() || current.iter().any(|ip| in_pools(conversion, *ip)) {
                    push(Level::Warning, other_class(svc, class));
                }
            }
            ServiceClass::Ours => {
                let write = plan
                    .statuses
                    .iter()
                    .find(|w| Arc::ptr_eq(&w.service, planned))
                    .map(|w| w.ips.clone());
                let events: Vec<_> = plan
                    .events
                    .iter()
                    .filter(|(s, _)| Arc::ptr_eq(s, planned))
                    .map(|(_, e)| e)
                    .collect();
                let (mut level, outcome) = outcome(&current, write.as_deref());
                if events.iter().any(|e| e.warning) {
                    level = Level::Warning;
                }
                let events: Vec<String> = events
                    .iter()
                    .map(|e| {
                        let kind = if e.warning { "Warning" } else { "Normal" };
                        format!("{kind} {}: {}", e.reason, e.message)
                    })
                    .collect();
                let mut message = if events.is_empty() {
                    outcome
                } else {
                    format!("{outcome} (Event {})", events.join("; Event "))
                };
                let kept = write.as_deref().unwrap_or(&current);
                for ip in current.iter().filter(|ip| !kept.contains(ip)) {
                    if let Some(hint) = network_or_broadcast(conversion, *ip) {
                        message.push_str("; ");
                        message.push_str(&hint);
                    }
                }
                push(level, message);
                for (key, value) in &annotations {
                    let (level, message) = annotation(key, value);
                    push(level, message);
                }
            }
        }
    }
    out
}

/// (index of the converted pool, address) → sharing key → the Services (`namespace`, `name`)
/// whose status holds the address with that key.
type SharesByAddress = BTreeMap<(usize, IpAddr), BTreeMap<String, BTreeSet<(String, String)>>>;

/// One [`Level::Warning`] per converted pool with addresses that Services of our class in
/// different namespaces share today by one sharing key ([`ALLOW_SHARED_IP`], read as the
/// controller reads it): MetalLB shares by the key alone, ferrolb only where the pool sets
/// `spec.allowSharingAcrossNamespaces` (DESIGN R2, issue #27 item 6). The migration leaves that
/// field false — it lets any namespace the pool serves join another's address by copying its key,
/// a decision about trust between namespaces — so the finding names the addresses, the Services
/// and the key, says what happens without the field (the Services' own lines show it: a status
/// replaced, an address of their own) and where to set it. The pool of an address is the first
/// converted pool containing it.
fn across_namespaces(conversion: &Conversion, class: &ClassFilter) -> Vec<Finding> {
    let mut shared: SharesByAddress = BTreeMap::new();
    for (_, svc) in &conversion.services {
        if !class.handles(svc) {
            continue;
        }
        let Some(key) = svc
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| lookup(a, &ALLOW_SHARED_IP).0)
        else {
            continue;
        };
        let ns = svc
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let name = svc.metadata.name.clone().unwrap_or_default();
        for ip in ingress_ips(svc) {
            if let Some(pool) = pool_containing(conversion, ip) {
                shared
                    .entry((pool, ip))
                    .or_default()
                    .entry(key.clone())
                    .or_default()
                    .insert((ns.clone(), name.clone()));
            }
        }
    }
    // Pool index -> one text per shared address.
    let mut by_pool: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for ((pool, ip), keys) in shared {
        for (key, members) in keys {
            let namespaces: BTreeSet<&str> = members.iter().map(|(ns, _)| ns.as_str()).collect();
            if namespaces.len() < 2 {
                continue;
            }
            let names: Vec<String> = members.iter().map(|(ns, n)| format!("{ns}/{n}")).collect();
            by_pool
                .entry(pool)
                .or_default()
                .push(format!("{ip} ({}; key {key:?})", names.join(", ")));
        }
    }
    by_pool
        .into_iter()
        .filter_map(|(pool, addresses)| {
            let p = conversion.pools.get(pool)?;
            if p.object.spec.allow_sharing_across_namespaces {
                return None;
            }
            let name = p.object.metadata.name.as_deref().unwrap_or_default();
            Some(Finding {
                level: Level::Warning,
                source: p.source.clone(),
                subject: p.origin.clone(),
                field: Some("spec.allowSharingAcrossNamespaces".into()),
                message: format!(
                    "Services of different namespaces share {} by a sharing key, which MetalLB allows by the key alone; ferrolb shares across namespaces only in a pool with allowSharingAcrossNamespaces: true, and the converted pool {name} has false, so only the Services in the namespace of an address's oldest holder keep it and the others lose it (their lines below). Set it to true only if the namespaces this pool serves trust each other: whoever can read a Service can copy its key and join its address",
                    addresses.join(", ")
                ),
            })
        })
        .collect()
}

/// The index of the first converted pool with an entry containing `ip` (network and broadcast
/// addresses included).
fn pool_containing(conversion: &Conversion, ip: IpAddr) -> Option<usize> {
    conversion.pools.iter().position(|p| {
        p.object
            .spec
            .addresses
            .iter()
            .filter_map(|e| AddressEntry::parse(e.as_ref()).ok())
            .any(|e| e.range.contains(ip))
    })
}

/// What happens to the addresses, from the status now and the write the planner wants (`None`:
/// no write).
fn outcome(current: &[IpAddr], write: Option<&[IpAddr]>) -> (Level, String) {
    match write {
        None if current.is_empty() => (Level::Warning, "stays pending".into()),
        None => (
            Level::Info,
            format!(
                "keeps {} (valid in the converted pools: adopted without a status write)",
                list(current)
            ),
        ),
        Some([]) => (Level::Warning, format!("loses {} and waits", list(current))),
        Some(new) if current.is_empty() => (Level::Info, format!("gets {}", list(new))),
        Some(new) if new == current => (
            Level::Info,
            format!(
                "keeps {} (valid in the converted pools: adopted; the status is written once in ferrolb's form, ipMode VIP, same addresses)",
                list(current)
            ),
        ),
        Some(new) => (
            Level::Warning,
            format!("changes {} to {}", list(current), list(new)),
        ),
    }
}

/// How ferrolb reads one MetalLB annotation of a Service it handles.
fn annotation(key: &str, value: &str) -> (Level, String) {
    let ours = [LOAD_BALANCER_IPS, ADDRESS_POOL, ALLOW_SHARED_IP]
        .into_iter()
        .find(|spellings| spellings[1..].contains(&key))
        .map(|spellings| spellings[0]);
    match ours {
        Some(ours) => (
            Level::Info,
            format!("{key}={value:?}: read as {ours}, kept as it is"),
        ),
        None if key.ends_with(&format!("/{ALLOCATED_FROM_POOL}")) => (
            Level::Info,
            format!(
                "{key}: MetalLB's record of the pool; ferrolb neither reads nor writes it (it may stay or be removed)"
            ),
        ),
        None => (
            Level::Warning,
            format!(
                "{key}: not an annotation ferrolb reads; what MetalLB did with it does not carry over"
            ),
        ),
    }
}

/// The finding for a Service of another class.
fn other_class(svc: &Service, class: &ClassFilter) -> String {
    let ours = &class.lb_class;
    match svc
        .spec
        .as_ref()
        .and_then(|s| s.load_balancer_class.as_deref())
    {
        Some(other) => format!(
            "spec.loadBalancerClass {other:?} is not ferrolb's ({ours:?}): ferrolb leaves this Service alone; if MetalLB served it, re-create it with class {ours:?} or without a class"
        ),
        None => format!(
            "no spec.loadBalancerClass and --default-class=false: ferrolb leaves this Service alone; re-create it with class {ours:?} for ferrolb to serve it"
        ),
    }
}

/// The Service's annotations with a MetalLB prefix, sorted by key.
fn metallb_annotations(svc: &Service) -> BTreeMap<String, String> {
    svc.metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| METALLB_PREFIXES.iter().any(|p| k.starts_with(p)))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

/// If `ip` is the network or broadcast address of an IPv4 CIDR entry of prefix length ≤ 30 in a
/// converted pool — handed out by MetalLB, never by ferrolb — how to keep it.
fn network_or_broadcast(conversion: &Conversion, ip: IpAddr) -> Option<String> {
    conversion.pools.iter().find_map(|p| {
        let pool = p.object.metadata.name.as_deref().unwrap_or_default();
        p.object.spec.addresses.iter().find_map(|e| {
            let entry = AddressEntry::parse(e.as_ref()).ok()?;
            let (first, last) = (entry.range.first(), entry.range.last());
            let v4_cidr = matches!(entry.prefix, Some(p) if p <= 30) && ip.is_ipv4();
            (v4_cidr && (ip == first || ip == last)).then(|| {
                format!(
                    "{ip} is the network or broadcast address of {} in pool {pool}, which MetalLB hands out and ferrolb never does; to keep it, write that entry as the range {first}-{last} before applying",
                    e.as_ref()
                )
            })
        })
    })
}

/// Whether `ip` is inside an entry of a converted pool (network and broadcast addresses
/// included).
fn in_pools(conversion: &Conversion, ip: IpAddr) -> bool {
    pool_containing(conversion, ip).is_some()
}

/// `namespaces`, plus one Namespace for each namespace of a Service that is not among them,
/// labelled as the API server labels every Namespace (file input: nothing else is known).
fn with_service_namespaces(
    namespaces: &[Namespace],
    services: &[(String, Service)],
) -> Vec<Arc<Namespace>> {
    let known: BTreeSet<&str> = namespaces
        .iter()
        .filter_map(|n| n.metadata.name.as_deref())
        .collect();
    let missing: BTreeSet<&str> = services
        .iter()
        .filter_map(|(_, s)| s.metadata.namespace.as_deref())
        .filter(|n| !known.contains(n))
        .collect();
    namespaces
        .iter()
        .cloned()
        .chain(missing.into_iter().map(|name| Namespace {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(BTreeMap::from([(
                    NAMESPACE_NAME_LABEL.to_owned(),
                    name.to_owned(),
                )])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        }))
        .map(Arc::new)
        .collect()
}

fn list(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::migrate::{convert, parse_documents};

    const CONFIG: &str = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: config, namespace: metallb-system}\ndata:\n  config: |\n    address-pools:\n    - name: default\n      protocol: layer2\n      addresses: [192.168.49.0/24]\n";

    fn svc(name: &str, extra: &str) -> String {
        format!(
            "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: web\n  creationTimestamp: '2024-01-01T00:00:00Z'\n{extra}"
        )
    }

    fn lines(input: &str) -> Vec<String> {
        let c = convert(&parse_documents("in.yaml", input).unwrap());
        report(&c, &[], &[], &ClassFilter::default(), Instant::now())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const LB: &str = "spec: {type: LoadBalancer, ports: [{port: 80, protocol: TCP}]}\n";

    #[test]
    fn a_valid_address_is_kept_without_a_write() {
        let input = format!(
            "{CONFIG}{}{LB}status: {{loadBalancer: {{ingress: [{{ip: 192.168.49.7, ipMode: VIP}}]}}}}\n",
            svc(
                "keep",
                "  annotations: {metallb.universe.tf/address-pool: default, metallb.io/ip-allocated-from-pool: default}\n"
            )
        );
        assert_eq!(
            lines(&input),
            [
                "in.yaml: info: Service web/keep: keeps 192.168.49.7 (valid in the converted pools: adopted without a status write)",
                "in.yaml: info: Service web/keep: metallb.io/ip-allocated-from-pool: MetalLB's record of the pool; ferrolb neither reads nor writes it (it may stay or be removed)",
                "in.yaml: info: Service web/keep: metallb.universe.tf/address-pool=\"default\": read as ferrolb.io/address-pool, kept as it is",
            ]
        );
    }

    #[test]
    fn a_status_without_ip_mode_is_rewritten_with_the_same_address() {
        let input = format!(
            "{CONFIG}{}{LB}status: {{loadBalancer: {{ingress: [{{ip: 192.168.49.7}}]}}}}\n",
            svc("old", "")
        );
        assert_eq!(
            lines(&input),
            [
                "in.yaml: info: Service web/old: keeps 192.168.49.7 (valid in the converted pools: adopted; the status is written once in ferrolb's form, ipMode VIP, same addresses)"
            ]
        );
    }

    #[test]
    fn a_network_address_metallb_handed_out_changes() {
        let input = format!(
            "{CONFIG}{}{LB}status: {{loadBalancer: {{ingress: [{{ip: 192.168.49.0}}]}}}}\n",
            svc("net", "")
        );
        let lines = lines(&input);
        assert_eq!(lines.len(), 1, "{lines:?}");
        assert!(
            lines[0].starts_with("in.yaml: warning: Service web/net: changes 192.168.49.0 to 192.168.49.1 (Event Warning "),
            "{}",
            lines[0]
        );
        assert!(
            lines[0].ends_with("; 192.168.49.0 is the network or broadcast address of 192.168.49.0/24 in pool default, which MetalLB hands out and ferrolb never does; to keep it, write that entry as the range 192.168.49.0-192.168.49.255 before applying"),
            "{}",
            lines[0]
        );
    }

    #[test]
    fn new_pending_and_other_class_services() {
        let input = format!(
            "{CONFIG}{}{LB}{}spec: {{type: LoadBalancer, loadBalancerClass: metallb.io/metallb}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 192.168.49.9}}]}}}}\n{}{LB}{}spec: {{type: ClusterIP}}\n",
            svc("new", ""),
            svc("other", ""),
            svc(
                "nopool",
                "  annotations: {metallb.io/address-pool: gone, metallb.universe.tf/foo: x}\n"
            ),
            svc("plain", "")
        );
        let lines = lines(&input);
        assert_eq!(lines.len(), 5, "{lines:?}");
        assert_eq!(
            lines[0],
            "in.yaml: info: Service web/new: gets 192.168.49.1 (Event Normal IPAllocated: assigned 192.168.49.1 from pool default)"
        );
        assert!(lines[1].starts_with("in.yaml: warning: Service web/other: spec.loadBalancerClass \"metallb.io/metallb\" is not ferrolb's"), "{}", lines[1]);
        assert!(lines[2].starts_with("in.yaml: warning: Service web/nopool: stays pending (Event Warning AllocationFailed: no pool can serve this Service"), "{}", lines[2]);
        assert_eq!(
            lines[3],
            "in.yaml: info: Service web/nopool: metallb.io/address-pool=\"gone\": read as ferrolb.io/address-pool, kept as it is"
        );
        assert_eq!(
            lines[4],
            "in.yaml: warning: Service web/nopool: metallb.universe.tf/foo: not an annotation ferrolb reads; what MetalLB did with it does not carry over"
        );
    }

    /// Issue #27 item 6: a MetalLB share across namespaces is named, with the field that would
    /// keep it; the newer Service's line says it loses the address and why; a share within one
    /// namespace, and a Service of another namespace with the key but its own address, are not
    /// named; a pending Service of a third namespace with the key is told it does not join.
    #[test]
    fn sharing_across_namespaces_is_named_with_the_field_that_would_keep_it() {
        let shared = |ns: &str, name: &str, created: &str, port: u16, ip: &str| {
            format!(
                "---\napiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {ns}\n  creationTimestamp: '{created}'\n  annotations: {{metallb.io/allow-shared-ip: k}}\nspec: {{type: LoadBalancer, ports: [{{port: {port}, protocol: TCP}}]}}\n{}",
                if ip.is_empty() {
                    String::new()
                } else {
                    format!("status: {{loadBalancer: {{ingress: [{{ip: {ip}, ipMode: VIP}}]}}}}\n")
                }
            )
        };
        let input = [
            CONFIG.to_owned(),
            shared("shop", "web", "2024-01-01T00:00:00Z", 80, "192.168.49.7"),
            shared("shop", "api", "2024-01-02T00:00:00Z", 443, "192.168.49.7"),
            shared(
                "tenant",
                "twin",
                "2024-01-03T00:00:00Z",
                8080,
                "192.168.49.7",
            ),
            shared("other", "own", "2024-01-04T00:00:00Z", 80, "192.168.49.9"),
            shared("late", "new", "2024-01-05T00:00:00Z", 9090, ""),
        ]
        .concat();
        let lines = lines(&input);
        let want = "in.yaml: warning: ConfigMap metallb-system/config data.config: address-pools[0]: spec.allowSharingAcrossNamespaces: Services of different namespaces share 192.168.49.7 (shop/api, shop/web, tenant/twin; key \"k\") by a sharing key, which MetalLB allows by the key alone; ferrolb shares across namespaces only in a pool with allowSharingAcrossNamespaces: true, and the converted pool default has false, so only the Services in the namespace of an address's oldest holder keep it and the others lose it (their lines below). Set it to true only if the namespaces this pool serves trust each other: whoever can read a Service can copy its key and join its address";
        assert_eq!(lines[0], want, "{lines:#?}");
        assert_eq!(
            lines
                .iter()
                .filter(|l| l.contains("allowSharingAcrossNamespaces: Services"))
                .count(),
            1,
            "{lines:#?}"
        );
        let line = |name: &str| {
            lines
                .iter()
                .find(|l| {
                    l.contains(&format!(": Service {name}: "))
                        && !l.contains("metallb.io/allow-shared-ip=")
                })
                .unwrap_or_else(|| panic!("{name}: {lines:#?}"))
                .clone()
        };
        assert!(
            line("shop/web").starts_with("in.yaml: info: Service shop/web: keeps 192.168.49.7")
        );
        assert!(
            line("shop/api").starts_with("in.yaml: info: Service shop/api: keeps 192.168.49.7")
        );
        assert!(
            line("other/own").starts_with("in.yaml: info: Service other/own: keeps 192.168.49.9")
        );
        let twin = line("tenant/twin");
        assert!(
            twin.starts_with("in.yaml: warning: Service tenant/twin: changes 192.168.49.7 to ")
                && twin.contains("Event Warning StatusReplaced")
                && twin.contains("are in different namespaces, and pool default does not allow sharing across namespaces"),
            "{twin}"
        );
        let new = line("late/new");
        assert!(
            new.starts_with("in.yaml: warning: Service late/new: gets ")
                && new.contains("Event Warning NotShared: not sharing 192.168.49."),
            "{new}"
        );
    }

    /// With the field set (by hand, after the migration), the same share is not named.
    #[test]
    fn a_pool_that_allows_it_is_not_named() {
        let c = convert(&parse_documents("in.yaml", &format!(
            "{CONFIG}---\napiVersion: v1\nkind: Service\nmetadata: {{name: a, namespace: shop, annotations: {{metallb.io/allow-shared-ip: k}}}}\n{LB}status: {{loadBalancer: {{ingress: [{{ip: 192.168.49.7}}]}}}}\n---\napiVersion: v1\nkind: Service\nmetadata: {{name: b, namespace: tenant, annotations: {{metallb.io/allow-shared-ip: k}}}}\nspec: {{type: LoadBalancer, ports: [{{port: 81, protocol: TCP}}]}}\nstatus: {{loadBalancer: {{ingress: [{{ip: 192.168.49.7}}]}}}}\n"
        )).unwrap());
        assert_eq!(across_namespaces(&c, &ClassFilter::default()).len(), 1);
        let mut open = c.clone();
        open.pools[0].object.spec.allow_sharing_across_namespaces = true;
        assert!(across_namespaces(&open, &ClassFilter::default()).is_empty());
    }

    #[test]
    fn namespace_selectors_see_the_name_label_without_the_cluster() {
        let input = format!(
            "apiVersion: metallb.io/v1beta1\nkind: IPAddressPool\nmetadata: {{name: p, namespace: m}}\nspec:\n  addresses: [198.51.100.0/24]\n  serviceAllocation: {{namespaces: [web], namespaceSelectors: [{{matchLabels: {{team: x}}}}]}}\n---\napiVersion: metallb.io/v1beta1\nkind: L2Advertisement\nmetadata: {{name: l, namespace: m}}\n{}{LB}",
            svc("sel", "")
        );
        let lines = lines(&input);
        assert_eq!(
            lines,
            [
                "in.yaml: info: Service web/sel: gets 198.51.100.1 (Event Normal IPAllocated: assigned 198.51.100.1 from pool p)"
            ]
        );
    }
}
