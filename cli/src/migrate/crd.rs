//! MetalLB's CRDs (`metallb.io/v1beta1`, MetalLB ≥ 0.13) as ferrolb's. The spec fields have the
//! same names and meanings, with these differences, matched to MetalLB v0.16's behaviour:
//!
//! | MetalLB | ferrolb | |
//! |---|---|---|
//! | `IPAddressPool` `spec.addresses` | `spec.addresses` | entries ferrolb's API server refuses are reported and left out ([`super::fields::address_entries`]); a pool left with none is not converted |
//! | `spec.autoAssign`, `spec.avoidBuggyIPs` | same | same defaults (true, false); written out explicitly |
//! | `spec.serviceAllocation.priority` | same | MetalLB counts only priorities above 0 (0 is "no priority"); 0 is converted as absent, a negative one as absent with a finding |
//! | `spec.serviceAllocation.namespaces` + `namespaceSelectors` | `namespaceSelectors` | MetalLB admits a namespace that is listed *or* selected; ferrolb requires both when both are set, so with selectors present the list becomes one more selector on the label `kubernetes.io/metadata.name` (set on every Namespace by the API server): same meaning |
//! | `spec.serviceAllocation.serviceSelectors` | same | |
//! | `L2Advertisement` `spec.ipAddressPools`, `ipAddressPoolSelectors`, `nodeSelectors`, `interfaces` | same | |
//! | `spec.serviceSelectors` | — | reported; the advertisement is converted without it, so it covers every Service of its pools |
//! | `spec.preferredNodeSelectors` | — | reported; ferrolb elects one owner per IP among the eligible nodes without preferences |
//!
//! Every other field is reported and left out.

use ferrolb_crds::v1beta1::{
    IPAddressPool, IPAddressPoolSpec, L2Advertisement, L2AdvertisementSpec, LabelSelector,
    LabelSelectorRequirement, SelectorOperator, ServiceAllocation,
};
use serde_json::{Map, Value};

use super::Level;
use super::fields::{
    Sink, address_entries, boolean, describe, metadata, selectors, strings, top_level,
};

/// The label the API server sets on every Namespace to its name.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// A `metallb.io` `IPAddressPool` as ferrolb's, or `None` (reported) when it has no name or no
/// address entry ferrolb accepts.
pub(crate) fn pool(obj: &Map<String, Value>, sink: &mut Sink<'_>) -> Option<IPAddressPool> {
    top_level(obj, sink);
    let meta = metadata(obj, sink)?;
    let empty = Map::new();
    let spec = match obj.get("spec") {
        Some(Value::Object(s)) => s,
        None | Some(Value::Null) => &empty,
        Some(other) => {
            sink.omitted(
                "spec",
                format!("{} is not a mapping; left out", describe(other)),
            );
            &empty
        }
    };
    let mut out = IPAddressPoolSpec {
        addresses: Vec::new(),
        auto_assign: true,
        avoid_buggy_ips: false,
        allow_sharing_across_namespaces: false,
        service_allocation: None,
        auto_addresses: None,
    };
    for (key, value) in spec {
        let field = format!("spec.{key}");
        match key.as_str() {
            "addresses" => out.addresses = address_entries(value, &field, sink),
            "autoAssign" => out.auto_assign = boolean(value, &field, true, sink),
            "avoidBuggyIPs" => out.avoid_buggy_ips = boolean(value, &field, false, sink),
            "serviceAllocation" => out.service_allocation = service_allocation(value, &field, sink),
            _ => sink.omitted(
                &field,
                "ferrolb's IPAddressPool has no such field; left out",
            ),
        }
    }
    if out.addresses.is_empty() {
        sink.push(
            Level::Omitted,
            None,
            "no address entry ferrolb accepts; the pool is not converted",
        );
        return None;
    }
    Some(IPAddressPool {
        metadata: meta,
        spec: out,
        status: None,
    })
}

/// `spec.serviceAllocation` (see the module docs for `priority` and `namespaces`).
fn service_allocation(
    value: &Value,
    field: &str,
    sink: &mut Sink<'_>,
) -> Option<ServiceAllocation> {
    let m = match value {
        Value::Null => return None,
        Value::Object(m) => m,
        other => {
            sink.omitted(
                field,
                format!("{} is not a mapping; left out", describe(other)),
            );
            return None;
        }
    };
    let mut out = ServiceAllocation::default();
    let mut namespaces = Vec::new();
    for (key, value) in m {
        let at = format!("{field}.{key}");
        match key.as_str() {
            "priority" => out.priority = priority(value, &at, sink),
            "namespaces" => namespaces = strings(value, &at, sink),
            "namespaceSelectors" => out.namespace_selectors = selectors(value, &at, sink),
            "serviceSelectors" => out.service_selectors = selectors(value, &at, sink),
            _ => sink.omitted(
                &at,
                "ferrolb's serviceAllocation has no such field; left out",
            ),
        }
    }
    if out.namespace_selectors.is_empty() || namespaces.is_empty() {
        out.namespaces = namespaces;
    } else {
        out.namespace_selectors.push(LabelSelector {
            match_expressions: vec![LabelSelectorRequirement {
                key: NAMESPACE_NAME_LABEL.to_owned(),
                operator: SelectorOperator::In,
                values: namespaces,
            }],
            ..LabelSelector::default()
        });
        sink.push(
            Level::Info,
            Some(&format!("{field}.namespaces")),
            format!(
                "MetalLB admits a namespace that is listed or selected, ferrolb one that is listed and selected; the list is converted as one more namespaceSelectors entry on the label {NAMESPACE_NAME_LABEL} (same meaning)"
            ),
        );
    }
    (!out.is_empty()).then_some(out)
}

/// `priority`: MetalLB sorts by it only when it is above 0.
fn priority(value: &Value, field: &str, sink: &mut Sink<'_>) -> Option<i32> {
    match value {
        Value::Null => None,
        Value::Number(n) => match n.as_i64().and_then(|p| i32::try_from(p).ok()) {
            Some(p) if p > 0 => Some(p),
            Some(0) => None,
            Some(p) => {
                sink.push(
                    Level::Changed,
                    Some(field),
                    format!(
                        "{p}: MetalLB counts only priorities above 0 (it does not order this pool reliably); converted without a priority, so the pool comes after every numbered one"
                    ),
                );
                None
            }
            None => {
                sink.omitted(field, format!("{n} is not a 32-bit integer; left out"));
                None
            }
        },
        other => {
            sink.omitted(
                field,
                format!("{} is not an integer; left out", describe(other)),
            );
            None
        }
    }
}

/// A `metallb.io` `L2Advertisement` as ferrolb's, or `None` (reported) when it has no name.
pub(crate) fn l2_advertisement(
    obj: &Map<String, Value>,
    sink: &mut Sink<'_>,
) -> Option<L2Advertisement> {
    top_level(obj, sink);
    let meta = metadata(obj, sink)?;
    let mut out = L2AdvertisementSpec::default();
    match obj.get("spec") {
        None | Some(Value::Null) => {}
        Some(Value::Object(spec)) => {
            for (key, value) in spec {
                let field = format!("spec.{key}");
                match key.as_str() {
                    "ipAddressPools" => out.ip_address_pools = strings(value, &field, sink),
                    "ipAddressPoolSelectors" => {
                        out.ip_address_pool_selectors = selectors(value, &field, sink);
                    }
                    "nodeSelectors" => out.node_selectors = selectors(value, &field, sink),
                    "interfaces" => out.interfaces = strings(value, &field, sink),
                    "serviceSelectors" if is_empty(value) => {}
                    "serviceSelectors" => sink.omitted(
                        &field,
                        "ferrolb's L2Advertisement cannot be limited to some Services; it is converted without this, so it covers every Service of its pools",
                    ),
                    "preferredNodeSelectors" if is_empty(value) => {}
                    "preferredNodeSelectors" => sink.omitted(
                        &field,
                        "ferrolb has no preferred announcing nodes (it elects one owner per IP among the eligible nodes); left out",
                    ),
                    _ => sink.omitted(&field, "ferrolb's L2Advertisement has no such field; left out"),
                }
            }
        }
        Some(other) => sink.omitted(
            "spec",
            format!("{} is not a mapping; left out", describe(other)),
        ),
    }
    Some(L2Advertisement {
        metadata: meta,
        spec: out,
    })
}

/// `null`, `[]` or `{}`: nothing is lost by leaving it out.
fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(a) => a.is_empty(),
        Value::Object(o) => o.is_empty(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::migrate::Finding;
    use serde_json::json;

    fn run<T>(
        obj: Value,
        f: impl FnOnce(&Map<String, Value>, &mut Sink<'_>) -> Option<T>,
    ) -> (Option<T>, Vec<String>) {
        let mut findings: Vec<Finding> = Vec::new();
        let mut sink = Sink {
            findings: &mut findings,
            source: "f",
            subject: "K m/x",
        };
        let out = f(obj.as_object().unwrap(), &mut sink);
        (out, findings.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn pool_fields_map_one_to_one() {
        let (p, lines) = run(
            json!({"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool",
                   "metadata": {"name": "x", "namespace": "m"},
                   "spec": {"addresses": ["198.51.100.0/24"], "autoAssign": false, "avoidBuggyIPs": true,
                            "serviceAllocation": {"priority": 50, "serviceSelectors": [{"matchLabels": {"a": "b"}}]}},
                   "status": {"assignedIPv4": 3}}),
            pool,
        );
        assert!(lines.is_empty(), "{lines:?}");
        let p = p.unwrap();
        assert!(!p.spec.auto_assign && p.spec.avoid_buggy_ips);
        let sa = p.spec.service_allocation.unwrap();
        assert_eq!(sa.priority, Some(50));
        assert_eq!(sa.service_selectors.len(), 1);
        assert!(p.status.is_none());
    }

    #[test]
    fn defaults_are_metallbs() {
        let (p, _) = run(
            json!({"metadata": {"name": "x"}, "spec": {"addresses": ["198.51.100.0/24"], "autoAssign": null}}),
            pool,
        );
        let p = p.unwrap();
        assert!(p.spec.auto_assign && !p.spec.avoid_buggy_ips);
        assert!(p.spec.service_allocation.is_none());
    }

    #[test]
    fn priority_zero_is_no_priority_and_negative_is_reported() {
        let mk = |p: i64| {
            json!({"metadata": {"name": "x"}, "spec": {"addresses": ["198.51.100.0/24"],
                   "serviceAllocation": {"priority": p, "namespaces": ["a"]}}})
        };
        let (p, lines) = run(mk(0), pool);
        let sa = p.unwrap().spec.service_allocation.unwrap();
        assert_eq!((sa.priority, sa.namespaces), (None, vec!["a".to_owned()]));
        assert!(lines.is_empty());
        let (p, lines) = run(mk(-3), pool);
        assert_eq!(p.unwrap().spec.service_allocation.unwrap().priority, None);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("f: changed: K m/x: spec.serviceAllocation.priority: -3: MetalLB counts only priorities above 0"), "{}", lines[0]);
    }

    #[test]
    fn listed_or_selected_namespaces_become_one_selector_list() {
        let (p, lines) = run(
            json!({"metadata": {"name": "x"}, "spec": {"addresses": ["198.51.100.0/24"],
                   "serviceAllocation": {"namespaces": ["a", "b"], "namespaceSelectors": [{"matchLabels": {"foo": "bar"}}]}}}),
            pool,
        );
        let sa = p.unwrap().spec.service_allocation.unwrap();
        assert!(sa.namespaces.is_empty());
        assert_eq!(
            serde_json::to_value(&sa.namespace_selectors).unwrap(),
            json!([{"matchLabels": {"foo": "bar"}},
                   {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["a", "b"]}]}])
        );
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("f: info: K m/x: spec.serviceAllocation.namespaces: MetalLB admits a namespace that is listed or selected"), "{}", lines[0]);
    }

    #[test]
    fn a_pool_without_acceptable_addresses_is_not_converted() {
        let (p, lines) = run(
            json!({"metadata": {"name": "x"}, "spec": {"addresses": ["127.0.0.0/8"], "color": "red"}}),
            pool,
        );
        assert!(p.is_none());
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(
            lines[0].contains(
                "spec.addresses[0]: addresses entry \"127.0.0.0/8\" overlaps 127.0.0.0/8"
            )
        );
        assert_eq!(
            lines[1],
            "f: omitted: K m/x: spec.color: ferrolb's IPAddressPool has no such field; left out"
        );
        assert_eq!(
            lines[2],
            "f: omitted: K m/x: no address entry ferrolb accepts; the pool is not converted"
        );
    }

    #[test]
    fn advertisement_fields_and_what_ferrolb_lacks() {
        let (a, lines) = run(
            json!({"metadata": {"name": "x", "namespace": "m"},
                   "spec": {"ipAddressPools": ["p"], "ipAddressPoolSelectors": [{"matchLabels": {"l": "2"}}],
                            "nodeSelectors": [{"matchLabels": {"kubernetes.io/hostname": "n1"}}],
                            "interfaces": ["eth0"],
                            "serviceSelectors": [{"matchLabels": {"a": "b"}}],
                            "preferredNodeSelectors": []}}),
            l2_advertisement,
        );
        let a = a.unwrap();
        assert_eq!(a.spec.ip_address_pools, ["p"]);
        assert_eq!(a.spec.ip_address_pool_selectors.len(), 1);
        assert_eq!(a.spec.node_selectors.len(), 1);
        assert_eq!(a.spec.interfaces, ["eth0"]);
        assert_eq!(
            lines,
            [
                "f: omitted: K m/x: spec.serviceSelectors: ferrolb's L2Advertisement cannot be limited to some Services; it is converted without this, so it covers every Service of its pools"
            ]
        );
        let (a, lines) = run(json!({"metadata": {"name": "empty"}}), l2_advertisement);
        assert_eq!(a.unwrap().spec, L2AdvertisementSpec::default());
        assert!(lines.is_empty());
    }
}
