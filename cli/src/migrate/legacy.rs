//! MetalLB's legacy configuration (MetalLB ≤ 0.12, and what the minikube addon writes): the YAML
//! in `data.config` of the ConfigMap `metallb-system/config`, with the keys `address-pools`,
//! `peers`, `bgp-communities` and `bfd-profiles`.
//!
//! An `address-pools` entry with `protocol: layer2` becomes an `IPAddressPool` (`addresses`,
//! `auto-assign` → `autoAssign`, default true; `avoid-buggy-ips` → `avoidBuggyIPs`, default false)
//! and an `L2Advertisement` of the same name covering just that pool — what MetalLB did with a
//! layer-2 pool: announce it from every node on every interface. A pool whose `name` is not a
//! valid Kubernetes object name (MetalLB ≤ 0.12 allowed any string) is renamed: lower case, and
//! every character other than `a-z`, `0-9`, `-` and `.` replaced by `-` (a finding says so: a
//! Service naming the old spelling in its `address-pool` annotation needs the new one).
//!
//! Reported and not converted: pools with `protocol: bgp` (their addresses are routed, not on a
//! LAN segment: announcing them with ARP would not reach them; ferrolb has no BGP mode), pools
//! with any other or no `protocol` (MetalLB refuses such a configuration as a whole), each entry
//! of `peers`, `bgp-communities` and `bfd-profiles`, and any key MetalLB's strict parser would
//! refuse.

use ferrolb_crds::v1beta1::{
    IPAddressPool, IPAddressPoolSpec, L2Advertisement, L2AdvertisementSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde_json::{Map, Value};

use super::Level;
use super::fields::{Sink, address_entries, boolean, describe, list};

/// One converted layer-2 pool of the legacy format.
#[derive(Clone, Debug)]
pub(crate) struct LegacyPool {
    /// The pool (with no address when `unconfigured`).
    pub pool: IPAddressPool,
    /// Its advertisement, covering just that pool.
    pub advertisement: L2Advertisement,
    /// Where it was, `<prefix>address-pools[i]`.
    pub field: String,
    /// Its `addresses` is the minikube addon's unfilled `- -` ([`super::addon`]): the addresses
    /// are proposed once every Service is known.
    pub unconfigured: bool,
}

/// The top-level keys of the legacy format.
pub const KEYS: [&str; 4] = ["address-pools", "peers", "bgp-communities", "bfd-profiles"];

/// Whether a mapping is (probably) legacy MetalLB configuration: it has one of [`KEYS`].
pub fn looks_like_config(obj: &Map<String, Value>) -> bool {
    KEYS.iter().any(|k| obj.contains_key(*k))
}

/// The layer-2 pools of `config`; each [`LegacyPool::field`] names its entry
/// (`<prefix>address-pools[0]`). Everything else is reported into `sink`, fields prefixed with
/// `prefix` (`data.config: ` inside a ConfigMap).
pub(crate) fn convert(config: &Value, prefix: &str, sink: &mut Sink<'_>) -> Vec<LegacyPool> {
    let mut out = Vec::new();
    let Some(obj) = config.as_object() else {
        return out;
    };
    for (key, value) in obj {
        let field = format!("{prefix}{key}");
        match key.as_str() {
            "address-pools" => {
                for (i, entry) in list(value, &field, sink) {
                    out.extend(pool(entry, &format!("{field}[{i}]"), sink));
                }
            }
            "peers" => {
                for (i, peer) in list(value, &field, sink) {
                    let addr = peer.get("peer-address").map_or("?".into(), describe);
                    sink.omitted(
                        &format!("{field}[{i}]"),
                        format!("BGP peer {addr}: ferrolb has no BGP mode; not converted"),
                    );
                }
            }
            "bgp-communities" => match value {
                Value::Object(m) => {
                    for (name, v) in m {
                        sink.omitted(
                            &format!("{field}.{name}"),
                            format!(
                                "BGP community {}: ferrolb has no BGP mode; not converted",
                                describe(v)
                            ),
                        );
                    }
                }
                Value::Null => {}
                other => sink.omitted(
                    &field,
                    format!("{} is not a mapping; left out", describe(other)),
                ),
            },
            "bfd-profiles" => {
                for (i, profile) in list(value, &field, sink) {
                    let name = profile.get("name").map_or("?".into(), describe);
                    sink.omitted(
                        &format!("{field}[{i}]"),
                        format!("BFD profile {name}: ferrolb has no BGP mode; not converted"),
                    );
                }
            }
            _ => sink.omitted(
                &field,
                "not a key of MetalLB's legacy configuration (MetalLB refuses it); left out",
            ),
        }
    }
    out
}

/// One `address-pools` entry at `field`.
fn pool(entry: &Value, field: &str, sink: &mut Sink<'_>) -> Option<LegacyPool> {
    let Some(obj) = entry.as_object() else {
        sink.omitted(
            field,
            format!("{} is not a mapping; left out", describe(entry)),
        );
        return None;
    };
    let Some(name) = obj
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        sink.omitted(
            field,
            "no name: MetalLB refuses a pool without one; not converted",
        );
        return None;
    };
    match obj.get("protocol").and_then(Value::as_str) {
        Some("layer2") => {}
        Some("bgp") => {
            sink.omitted(
                &format!("{field}.protocol"),
                format!("pool {name:?} is announced with BGP; ferrolb has no BGP mode, so the pool is not converted"),
            );
            return None;
        }
        _ => {
            let found = obj.get("protocol").map_or("none".into(), describe);
            sink.omitted(
                &format!("{field}.protocol"),
                format!("{found}: MetalLB accepts only layer2 or bgp and refuses the whole configuration otherwise; pool {name:?} is not converted"),
            );
            return None;
        }
    }
    let mut spec = IPAddressPoolSpec {
        addresses: Vec::new(),
        auto_assign: true,
        avoid_buggy_ips: false,
        allow_sharing_across_namespaces: false,
        service_allocation: None,
        auto_addresses: None,
    };
    let mut unconfigured = false;
    for (key, value) in obj {
        let at = format!("{field}.{key}");
        match key.as_str() {
            "name" | "protocol" => {}
            "addresses" if super::addon::is_reset_range(value) => unconfigured = true,
            "addresses" => spec.addresses = address_entries(value, &at, sink),
            "auto-assign" => spec.auto_assign = boolean(value, &at, true, sink),
            "avoid-buggy-ips" => spec.avoid_buggy_ips = boolean(value, &at, false, sink),
            "bgp-advertisements" if list(value, &at, sink).is_empty() => {}
            "bgp-advertisements" => sink.omitted(
                &at,
                "MetalLB refuses bgp-advertisements in a layer2 pool; left out",
            ),
            _ => sink.omitted(
                &at,
                "not a key of a legacy address pool (MetalLB refuses it); left out",
            ),
        }
    }
    if spec.addresses.is_empty() && !unconfigured {
        sink.omitted(
            field,
            format!("pool {name:?} has no address entry ferrolb accepts; not converted"),
        );
        return None;
    }
    let object_name = object_name(name);
    if object_name.is_empty() {
        sink.omitted(
            &format!("{field}.name"),
            format!("{name:?} cannot be made into a Kubernetes object name; not converted"),
        );
        return None;
    }
    if object_name != name {
        sink.push(
            Level::Changed,
            Some(&format!("{field}.name")),
            format!("{name:?} is not a valid Kubernetes object name; the pool and its L2Advertisement are named {object_name:?} (a Service naming {name:?} in an address-pool annotation needs the new name)"),
        );
    }
    let meta = ObjectMeta {
        name: Some(object_name.clone()),
        ..ObjectMeta::default()
    };
    let pool = IPAddressPool {
        metadata: meta.clone(),
        spec,
        status: None,
    };
    let adv = L2Advertisement {
        metadata: meta,
        spec: L2AdvertisementSpec {
            ip_address_pools: vec![object_name],
            ..L2AdvertisementSpec::default()
        },
    };
    Some(LegacyPool {
        pool,
        advertisement: adv,
        field: field.to_owned(),
        unconfigured,
    })
}

/// `name` as a Kubernetes object name (a DNS-1123 subdomain): lower case, characters other than
/// `a-z`, `0-9`, `-`, `.` replaced by `-`, no leading or trailing `-`/`.`, at most 253
/// characters. Empty when nothing is left.
pub fn object_name(name: &str) -> String {
    let mapped: String = name
        .chars()
        .map(|c| c.to_ascii_lowercase())
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.' {
                c
            } else {
                '-'
            }
        })
        .collect();
    let alnum = |c: char| c.is_ascii_alphanumeric();
    let trimmed = mapped.trim_matches(|c: char| !alnum(c));
    let cut: String = trimmed.chars().take(253).collect();
    cut.trim_end_matches(|c: char| !alnum(c)).to_owned()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::migrate::Finding;

    fn run(text: &str) -> (Vec<LegacyPool>, Vec<String>) {
        let v: Value = serde_saphyr::from_str(text).unwrap();
        let mut findings: Vec<Finding> = Vec::new();
        let mut sink = Sink {
            findings: &mut findings,
            source: "f",
            subject: "ConfigMap m/config",
        };
        let out = convert(&v, "data.config: ", &mut sink);
        (out, findings.iter().map(ToString::to_string).collect())
    }

    #[test]
    fn a_layer2_pool_becomes_a_pool_and_its_advertisement() {
        let (out, lines) = run(
            "address-pools:\n- name: default\n  protocol: layer2\n  addresses: [192.168.49.100-192.168.49.120]\n  auto-assign: no\n  avoid-buggy-ips: yes\n",
        );
        assert!(lines.is_empty(), "{lines:?}");
        let LegacyPool {
            pool,
            advertisement: adv,
            field,
            unconfigured,
        } = &out[0];
        assert!(!unconfigured);
        assert_eq!(pool.metadata.name.as_deref(), Some("default"));
        assert_eq!(
            pool.spec.addresses[0].as_ref(),
            "192.168.49.100-192.168.49.120"
        );
        assert!(
            !pool.spec.auto_assign && pool.spec.avoid_buggy_ips,
            "YAML 1.1 booleans, as MetalLB reads them"
        );
        assert_eq!(adv.metadata.name.as_deref(), Some("default"));
        assert_eq!(adv.spec.ip_address_pools, ["default"]);
        assert!(adv.spec.node_selectors.is_empty() && adv.spec.interfaces.is_empty());
        assert_eq!(field, "data.config: address-pools[0]");
    }

    #[test]
    fn bgp_and_everything_else_is_reported() {
        let (out, lines) = run(
            "peers:\n- {peer-address: 10.0.0.1, peer-asn: 1, my-asn: 2}\nbgp-communities: {no-export: '65535:65281'}\nbfd-profiles:\n- {name: b1}\naddress-pools:\n- {name: r, protocol: bgp, addresses: [198.51.100.0/24]}\n- {name: l, protocol: l2, addresses: [198.51.100.0/24]}\n- {protocol: layer2, addresses: [198.51.100.0/24]}\n- {name: x, protocol: layer2, addresses: [198.51.100.0/24], bgp-advertisements: [{localpref: 1}], color: red}\nextra: 1\n",
        );
        assert_eq!(out.len(), 1);
        assert_eq!(
            lines,
            [
                "f: omitted: ConfigMap m/config: data.config: address-pools[0].protocol: pool \"r\" is announced with BGP; ferrolb has no BGP mode, so the pool is not converted",
                "f: omitted: ConfigMap m/config: data.config: address-pools[1].protocol: \"l2\": MetalLB accepts only layer2 or bgp and refuses the whole configuration otherwise; pool \"l\" is not converted",
                "f: omitted: ConfigMap m/config: data.config: address-pools[2]: no name: MetalLB refuses a pool without one; not converted",
                "f: omitted: ConfigMap m/config: data.config: address-pools[3].bgp-advertisements: MetalLB refuses bgp-advertisements in a layer2 pool; left out",
                "f: omitted: ConfigMap m/config: data.config: address-pools[3].color: not a key of a legacy address pool (MetalLB refuses it); left out",
                "f: omitted: ConfigMap m/config: data.config: bfd-profiles[0]: BFD profile \"b1\": ferrolb has no BGP mode; not converted",
                "f: omitted: ConfigMap m/config: data.config: bgp-communities.no-export: BGP community \"65535:65281\": ferrolb has no BGP mode; not converted",
                "f: omitted: ConfigMap m/config: data.config: extra: not a key of MetalLB's legacy configuration (MetalLB refuses it); left out",
                "f: omitted: ConfigMap m/config: data.config: peers[0]: BGP peer \"10.0.0.1\": ferrolb has no BGP mode; not converted",
            ]
        );
    }

    /// The minikube addon's `- -` is recognised, not reported as a bad entry: the pool is kept,
    /// without addresses, for the proposal ([`crate::migrate::addon`]).
    #[test]
    fn the_addon_reset_range_is_kept_for_the_proposal() {
        let (out, lines) =
            run("address-pools:\n- name: default\n  protocol: layer2\n  addresses:\n  - -\n");
        assert!(lines.is_empty(), "{lines:?}");
        assert!(out[0].unconfigured && out[0].pool.spec.addresses.is_empty());
    }

    #[test]
    fn names_are_made_object_names_and_said_so() {
        assert_eq!(object_name("Capitalized_Pool"), "capitalized-pool");
        assert_eq!(object_name("01-numbered"), "01-numbered");
        assert_eq!(object_name("_x_"), "x");
        assert_eq!(object_name("__"), "");
        assert_eq!(object_name(&"a".repeat(300)).len(), 253);
        let (out, lines) = run(
            "address-pools:\n- {name: My_Pool, protocol: layer2, addresses: [198.51.100.0/24]}\n",
        );
        assert_eq!(out[0].pool.metadata.name.as_deref(), Some("my-pool"));
        assert_eq!(out[0].advertisement.spec.ip_address_pools, ["my-pool"]);
        assert_eq!(lines.len(), 1);
        assert!(lines[0].starts_with("f: changed: ConfigMap m/config: data.config: address-pools[0].name: \"My_Pool\" is not a valid Kubernetes object name"), "{}", lines[0]);
    }
}
