//! The minikube addon's unconfigured ConfigMap (issue #28 item 4). `minikube addons enable
//! metallb` writes `metallb-system/config` from a template whose only address entry is
//! `- {{ .LoadBalancerStartIP }}-{{ .LoadBalancerEndIP }}`; until `minikube addons configure
//! metallb` fills them in — and again on every `minikube start`, which re-applies the addon with
//! empty values — the entry renders as `- -`, which YAML reads as a list holding one null: a pool
//! without a single address. Services that got an IP before keep it in their status, but MetalLB
//! no longer has a pool holding it.
//!
//! [`is_reset_range`] recognises that entry; [`proposal`] proposes, in its place, the addresses
//! that keep every LoadBalancer Service's current IP: the IPs in `status.loadBalancer.ingress`
//! of the Services MetalLB served (no `spec.loadBalancerClass`) that no other converted pool
//! covers, consecutive IPs merged into ranges. Pure.

use std::collections::BTreeSet;
use std::net::IpAddr;

use ferrolb_crds::addresses::{Family, PoolAddresses, forbidden_block, to_offset};
use ferrolb_crds::service::ingress_ips;
use k8s_openapi::api::core::v1::Service;
use serde_json::Value;

/// Whether a legacy pool's `addresses` is the addon's unfilled template: one entry, `- -` (a list
/// holding one null), or the same written as the string `"-"`.
pub fn is_reset_range(addresses: &Value) -> bool {
    let Some(list) = addresses.as_array() else {
        return false;
    };
    let reset = |v: &Value| match v {
        Value::Array(inner) => inner.len() == 1 && inner[0].is_null(),
        Value::String(s) => s.trim() == "-",
        _ => false,
    };
    !list.is_empty() && list.iter().all(reset)
}

/// What [`proposal`] found.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Proposal {
    /// The addresses entries (`192.168.49.100/32`, `192.168.49.101-192.168.49.103`), sorted.
    pub entries: Vec<String>,
    /// The IPs the entries keep, sorted.
    pub kept: Vec<IpAddr>,
    /// `namespace/name` of the Services whose IPs are kept, sorted.
    pub services: Vec<String>,
    /// IPs left out because no pool may hold them (loopback, link-local, …), with the reason.
    pub refused: Vec<String>,
}

/// The entries keeping the current IPs of `services` (module docs) that `others` do not already
/// cover (`others`: the addresses of the other converted pools).
pub fn proposal(services: &[(String, Service)], others: &[PoolAddresses]) -> Proposal {
    let mut ips: BTreeSet<IpAddr> = BTreeSet::new();
    let mut names: BTreeSet<String> = BTreeSet::new();
    let mut refused = Vec::new();
    for (_, svc) in services {
        let spec = svc.spec.as_ref();
        let lb = spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer");
        let unclassed = spec.and_then(|s| s.load_balancer_class.as_ref()).is_none();
        if !lb || !unclassed {
            continue;
        }
        let name = format!(
            "{}/{}",
            svc.metadata.namespace.as_deref().unwrap_or("default"),
            svc.metadata.name.as_deref().unwrap_or_default()
        );
        for ip in ingress_ips(svc) {
            if others.iter().any(|p| p.covers(ip)) {
                continue;
            }
            if let Some(block) = forbidden_block(ip) {
                refused.push(format!("{ip} ({name}: {})", block.what));
                continue;
            }
            ips.insert(ip);
            names.insert(name.clone());
        }
    }
    Proposal {
        entries: entries(&ips),
        kept: ips.into_iter().collect(),
        services: names.into_iter().collect(),
        refused,
    }
}

/// `ips` as address entries: a run of consecutive IPs as `first-last`, a lone IP as a host CIDR
/// (`/32`, `/128`).
fn entries(ips: &BTreeSet<IpAddr>) -> Vec<String> {
    let mut runs: Vec<(IpAddr, IpAddr)> = Vec::new();
    for ip in ips {
        match runs.last_mut() {
            Some((_, last))
                if Family::of(*last) == Family::of(*ip)
                    && to_offset(*last).checked_add(1) == Some(to_offset(*ip)) =>
            {
                *last = *ip;
            }
            _ => runs.push((*ip, *ip)),
        }
    }
    runs.into_iter()
        .map(|(first, last)| {
            if first == last {
                let bits = if first.is_ipv4() { 32 } else { 128 };
                format!("{first}/{bits}")
            } else {
                format!("{first}-{last}")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn svc(ns: &str, name: &str, class: Option<&str>, ips: &[&str]) -> (String, Service) {
        let v = serde_json::json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": class},
            "status": {"loadBalancer": {"ingress": ips.iter().map(|ip| serde_json::json!({"ip": ip})).collect::<Vec<_>>()}},
        });
        ("f".into(), serde_json::from_value(v).unwrap())
    }

    #[test]
    fn the_addon_template_unfilled_is_recognised() {
        let parsed: Value = serde_saphyr::from_str("addresses:\n- -\n").unwrap();
        assert!(is_reset_range(&parsed["addresses"]));
        assert!(is_reset_range(&serde_json::json!(["-"])));
        for not in [
            serde_json::json!(["192.168.49.100-192.168.49.120"]),
            serde_json::json!(["192.168.49.100-"]),
            serde_json::json!([]),
            serde_json::json!([["-"]]),
            serde_json::json!(null),
        ] {
            assert!(!is_reset_range(&not), "{not}");
        }
    }

    #[test]
    fn the_proposal_keeps_exactly_the_current_ips() {
        let services = [
            svc("default", "web", None, &["192.168.49.101"]),
            svc("default", "api", None, &["192.168.49.102", "2001:db8::5"]),
            svc("shop", "cart", None, &["192.168.49.104"]),
            svc(
                "other",
                "theirs",
                Some("example.com/lb"),
                &["192.168.49.103"],
            ),
            svc("old", "covered", None, &["198.51.100.7"]),
            svc("bad", "lo", None, &["127.0.0.9"]),
        ];
        let others = [PoolAddresses::parse(&["198.51.100.0/24"], false).unwrap()];
        let p = proposal(&services, &others);
        assert_eq!(
            p.entries,
            [
                "192.168.49.101-192.168.49.102",
                "192.168.49.104/32",
                "2001:db8::5/128"
            ]
        );
        assert_eq!(p.kept.len(), 4);
        assert_eq!(p.services, ["default/api", "default/web", "shop/cart"]);
        assert_eq!(p.refused.len(), 1, "{:?}", p.refused);
        assert!(
            p.refused[0].starts_with("127.0.0.9 (bad/lo: "),
            "{:?}",
            p.refused
        );
        // The entries are what the API server accepts.
        PoolAddresses::parse(&p.entries, false).unwrap();
    }

    #[test]
    fn no_service_with_an_ip_proposes_nothing() {
        let p = proposal(&[svc("default", "web", None, &[])], &[]);
        assert!(p.entries.is_empty() && p.services.is_empty());
    }
}
