//! Translation of a Kubernetes `Service` into what the allocator needs, and of addresses back
//! into `status.loadBalancer`. Pure: reads `k8s-openapi` types, no I/O.
//!
//! Bad input never fails the translation: unparseable requested IPs, a wrong family or two IPs of
//! one family set [`ServiceRequest::invalid`] (the Service keeps what it holds, or waits); a
//! disagreement between annotation spellings is a warning.

use std::collections::BTreeMap;
use std::net::IpAddr;

use ferrolb_crds::addresses::{Family, parse_ip};
use ferrolb_crds::ownership::creation_seconds;
use ferrolb_crds::service::{ServiceClass, ingress};
use k8s_openapi::api::core::v1::{LoadBalancerIngress, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};

use crate::annotations::{ADDRESS_POOL, ALLOW_SHARED_IP, LOAD_BALANCER_IPS, lookup};
use crate::ipam::{Backend, FamilyPolicy, ObservedStatus, ServiceKey, ServiceRequest};

/// The field manager of every write (server-side apply).
pub const FIELD_MANAGER: &str = "ferrolb-controller";

/// Which Services are ours (`--lb-class`, `--default-class`): the rule shared with the speaker,
/// [`ferrolb_crds::service::ClassFilter`].
pub type ClassConfig = ferrolb_crds::service::ClassFilter;

/// What a Service is to us.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    /// `type: LoadBalancer` of our class: the request and warnings about its annotations.
    Ours(Box<ServiceRequest>, Vec<String>),
    /// Not `type: LoadBalancer`.
    NotLoadBalancer,
    /// `type: LoadBalancer` of another class: never read, written or announced.
    OtherClass,
}

/// The key of a Service object.
pub fn key_of(svc: &Service) -> ServiceKey {
    ServiceKey::new(
        svc.metadata.namespace.clone().unwrap_or_default(),
        svc.metadata.name.clone().unwrap_or_default(),
    )
}

/// Whether the Service is `type: LoadBalancer` of our class.
pub fn classify(svc: &Service, cfg: &ClassConfig) -> Classified {
    match cfg.classify(svc) {
        ServiceClass::NotLoadBalancer => Classified::NotLoadBalancer,
        ServiceClass::OtherClass => Classified::OtherClass,
        ServiceClass::Ours => {
            let (req, warnings) = request_of(svc);
            Classified::Ours(Box::new(req), warnings)
        }
    }
}

/// Builds the allocator's request. Never fails; see the module docs.
pub fn request_of(svc: &Service) -> (ServiceRequest, Vec<String>) {
    let empty = BTreeMap::new();
    let annotations = svc.metadata.annotations.as_ref().unwrap_or(&empty);
    let spec = svc.spec.clone().unwrap_or_default();
    let mut warnings = Vec::new();
    let families: Vec<Family> = spec
        .ip_families
        .iter()
        .flatten()
        .filter_map(|f| Family::from_k8s(f))
        .collect();
    let policy = match spec.ip_family_policy.as_deref() {
        Some("PreferDualStack") => FamilyPolicy::PreferDualStack,
        Some("RequireDualStack") => FamilyPolicy::RequireDualStack,
        _ => FamilyPolicy::SingleStack,
    };
    let (pool, w) = lookup(annotations, &ADDRESS_POOL);
    warnings.extend(w);
    let (sharing_key, w) = lookup(annotations, &ALLOW_SHARED_IP);
    warnings.extend(w);
    let (ips_annotation, w) = lookup(annotations, &LOAD_BALANCER_IPS);
    warnings.extend(w);
    let legacy = spec
        .load_balancer_ip
        .as_deref()
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let (source, text) = match (ips_annotation, legacy) {
        (Some(a), Some(l)) => {
            if a.split(',').map(str::trim).collect::<Vec<_>>() != [l] {
                warnings.push(format!(
                    "spec.loadBalancerIP={l:?} disagrees with {}={a:?}; using {}",
                    LOAD_BALANCER_IPS[0], LOAD_BALANCER_IPS[0]
                ));
            }
            (LOAD_BALANCER_IPS[0], Some(a))
        }
        (Some(a), None) => (LOAD_BALANCER_IPS[0], Some(a)),
        (None, Some(l)) => ("spec.loadBalancerIP", Some(l.to_owned())),
        (None, None) => ("", None),
    };
    let mut req = ServiceRequest {
        key: key_of(svc),
        created: creation_seconds(&svc.metadata),
        labels: svc.metadata.labels.clone().unwrap_or_default(),
        families,
        policy,
        requested: Vec::new(),
        pool,
        sharing_key,
        ports: spec
            .ports
            .iter()
            .flatten()
            .map(|p| {
                (
                    p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    u16::try_from(p.port).unwrap_or(0),
                )
            })
            .collect(),
        backend: if spec.external_traffic_policy.as_deref() == Some("Local") {
            Backend::Local(spec.selector.clone().unwrap_or_default())
        } else {
            Backend::Cluster
        },
        invalid: None,
        observed: observed_of(svc),
    };
    if let Some(text) = text {
        match parse_requested(&text, &req.wanted_families()) {
            Ok(ips) => req.requested = ips,
            Err(problem) => req.invalid = Some(format!("{source}: {problem}")),
        }
    }
    (req, warnings)
}

/// Parses a comma list of requested addresses: each an IP, at most one per family, each of a
/// family the Service asks for.
///
/// # Errors
/// A message naming the offending item.
pub fn parse_requested(text: &str, wanted: &[Family]) -> Result<Vec<IpAddr>, String> {
    let mut out: Vec<IpAddr> = Vec::new();
    for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let ip = parse_ip(item).ok_or_else(|| format!("{item:?} is not an IP address"))?;
        let family = Family::of(ip);
        if let Some(other) = out.iter().find(|o| Family::of(**o) == family) {
            return Err(format!(
                "two {family} addresses ({other} and {ip}); at most one per family"
            ));
        }
        if !wanted.contains(&family) {
            let names: Vec<&str> = wanted.iter().map(|f| f.as_k8s()).collect();
            return Err(format!(
                "{ip} is {family} but the Service only asks for {} (spec.ipFamilies/ipFamilyPolicy)",
                names.join(" and ")
            ));
        }
        out.push(ip);
    }
    Ok(out)
}

/// `status.loadBalancer.ingress` as the allocator sees it: the shared reading
/// ([`ferrolb_crds::service::ingress`]), which the speaker uses too.
pub fn observed_of(svc: &Service) -> ObservedStatus {
    let ingress = ingress(svc);
    ObservedStatus {
        ips: ingress.ips,
        unusable: ingress.unusable,
    }
}

/// The ingress entries we write for these addresses: one per IP, `ipMode: VIP`, in order.
pub fn ingress_of(ips: &[IpAddr]) -> Vec<LoadBalancerIngress> {
    ips.iter()
        .map(|ip| LoadBalancerIngress {
            ip: Some(ip.to_string()),
            ip_mode: Some("VIP".into()),
            ..Default::default()
        })
        .collect()
}

/// Whether the Service's status is exactly what we would write (so no write is needed).
pub fn status_matches(svc: &Service, ips: &[IpAddr]) -> bool {
    let observed: Vec<LoadBalancerIngress> = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.clone())
        .unwrap_or_default();
    observed == ingress_of(ips)
}

/// Whether `status.loadBalancer.ingress` is non-empty and was written by us (our field manager
/// owns it), so that we must clear it when the Service stops being ours (R6).
pub fn we_own_ingress(svc: &Service) -> bool {
    let has_ingress = svc
        .status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty());
    has_ingress
        && svc.metadata.managed_fields.iter().flatten().any(|m| {
            m.manager.as_deref() == Some(FIELD_MANAGER)
                && m.fields_v1.as_ref().is_some_and(|f| owns(f, OWNED_INGRESS))
        })
}

/// Field managers other than ours that own `status.loadBalancer.ingress` too (shared ownership:
/// another server-side applier wrote the same entries), read from `metadata.managedFields`.
/// On uninstall such entries are left alone (issue #27 item 10): clearing them would undo the
/// other writer's. Empty when nobody else owns the field (or managedFields were stripped).
pub fn ingress_co_owners(svc: &Service) -> Vec<String> {
    others_owning(svc, OWNED_INGRESS)
        .filter_map(|m| m.manager.clone())
        .collect()
}

/// The `managedFields` entries of field managers other than ours that own the field at
/// `pointer` (a `fieldsV1` JSON pointer such as [`OWNED_INGRESS`]) or a part of it.
fn others_owning<'a>(
    svc: &'a Service,
    pointer: &'a str,
) -> impl Iterator<Item = &'a ManagedFieldsEntry> {
    svc.metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(move |m| {
            m.manager.as_deref().is_some_and(|n| n != FIELD_MANAGER)
                && m.fields_v1.as_ref().is_some_and(|f| owns(f, pointer))
        })
}

/// The other field manager that owns `status.loadBalancer` (any of its fields), if one can be
/// identified from `metadata.managedFields`: not ours, the most recent entry first (R8, the
/// `StatusWriteConflict` Event). `None` when no other manager owns it (e.g. managedFields were
/// stripped).
pub fn status_writer(svc: &Service) -> Option<String> {
    others_owning(svc, OWNED_LOAD_BALANCER)
        .max_by_key(|m| m.time.as_ref().map(|t| t.0))
        .and_then(|m| m.manager.clone())
}

/// The longest annotation value of ours [`trim`] stores, in bytes; longer ones are shrunk by
/// [`cap_annotation`]. A valid value is far shorter: `loadBalancerIPs` holds at most one address
/// per family, `address-pool` a pool name (a DNS subdomain, ≤ 253 bytes), and a sharing key is a
/// word two Services agree on. The API server lets annotations reach 256 KiB per object, and
/// the controller keeps every Service.
pub const MAX_ANNOTATION_VALUE: usize = 576;

/// Where [`cap_annotation`] cuts an over-long value, leaving room for its marker.
const CUT_AT: usize = 512;

/// Shrinks an over-long value of one of our annotations (longer than [`MAX_ANNOTATION_VALUE`]) to
/// a bounded one with the same meaning (issue #27: the controller keeps these values for every
/// Service, so without a cap 10,000 Services could hold 2.5 GiB of them):
/// - a sharing key ([`ALLOW_SHARED_IP`]) becomes `sha256:` and the hex SHA-256 of the whole value
///   (71 bytes): two Services share exactly when their keys are equal, before and after;
/// - any other value is cut to 512 bytes (at a character boundary) and marked
///   `…(truncated from N bytes)`: it was no pool name and no address list, and stays invalid,
///   so the Service gets the same Warning Event, quoting the start of the value.
///
/// The result is at most [`MAX_ANNOTATION_VALUE`] bytes, so capping again changes nothing.
pub fn cap_annotation(key: &str, value: &mut String) {
    if value.len() <= MAX_ANNOTATION_VALUE {
        return;
    }
    if ALLOW_SHARED_IP.contains(&key) {
        let digest = ring::digest::digest(&ring::digest::SHA256, value.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        *value = format!("sha256:{hex}");
        return;
    }
    let total = value.len();
    let mut cut = CUT_AT;
    while !value.is_char_boundary(cut) {
        cut -= 1;
    }
    value.truncate(cut);
    value.push_str(&format!("…(truncated from {total} bytes)"));
}

/// The one entry an over-long `spec.selector` of an `externalTrafficPolicy: Local` Service is
/// stored as: its key, and the SHA-256 of the selector's canonical JSON as the value.
pub const SELECTOR_DIGEST_KEY: &str = "ferrolb.io/selector-sha256";

/// Shrinks a `spec.selector` whose keys and values add up to more than
/// [`MAX_ANNOTATION_VALUE`] bytes to one entry, [`SELECTOR_DIGEST_KEY`] → the SHA-256 (hex) of
/// its canonical JSON (a `BTreeMap`, so sorted by key). The controller only compares selectors
/// for equality (two `externalTrafficPolicy: Local` Services share an address only with the same
/// selector, R2), which the digest keeps: equal selectors stay equal, different ones differ.
/// Kubernetes caps each entry's length but not their number, so without this a tenant's
/// selectors of thousands of entries would grow the controller's store (issue #27 item 7).
/// The result is at most 91 bytes, so capping again changes nothing.
pub fn cap_selector(selector: &mut BTreeMap<String, String>) {
    if selector
        .iter()
        .map(|(k, v)| k.len() + v.len())
        .sum::<usize>()
        <= MAX_ANNOTATION_VALUE
    {
        return;
    }
    let canonical = serde_json::to_vec(&*selector).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA256, &canonical);
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    *selector = [(SELECTOR_DIGEST_KEY.to_owned(), hex)].into();
}

/// Drops everything the controller never reads from a Service before it enters the watch store,
/// so memory is O(what allocation needs) (issue #9: < 64 MiB at 10,000 Services):
/// - `metadata`: keeps name, namespace, uid, resourceVersion, creationTimestamp, labels (for
///   `serviceSelectors`; the watch then drops those no pool reads, [`crate::service_labels`])
///   and the annotations of [`crate::annotations`], each value capped by
///   [`cap_annotation`]; `managedFields` shrink
///   to the entries that own (part of) `status.loadBalancer`, in [`compact_fields`] form (ours
///   tells whether we own the ingress, another's names the other writer in a write war, R8);
/// - `spec`: drops ClusterIPs, session affinity, health-check NodePort, internal traffic policy
///   and the like; ports keep protocol and port; the selector is kept only with
///   `externalTrafficPolicy: Local` (sharing compares it, R2), capped by [`cap_selector`];
/// - `status`: keeps `loadBalancer` (compared whole with what we would write).
pub fn trim(svc: &mut Service) {
    let meta = &mut svc.metadata;
    meta.managed_fields = meta.managed_fields.take().and_then(|entries| {
        let kept: Vec<ManagedFieldsEntry> = entries
            .into_iter()
            .filter_map(|m| {
                let fields = m.fields_v1.as_ref().and_then(compact_fields)?;
                Some(ManagedFieldsEntry {
                    manager: m.manager,
                    time: m.time,
                    fields_v1: Some(fields),
                    ..Default::default()
                })
            })
            .collect();
        (!kept.is_empty()).then_some(kept)
    });
    if let Some(a) = meta.annotations.as_mut() {
        a.retain(|k, _| {
            [LOAD_BALANCER_IPS, ADDRESS_POOL, ALLOW_SHARED_IP]
                .iter()
                .any(|spellings| spellings.contains(&k.as_str()))
        });
        for (k, v) in a.iter_mut() {
            cap_annotation(k, v);
        }
    }
    meta.annotations = meta.annotations.take().filter(|a| !a.is_empty());
    meta.owner_references = None;
    meta.finalizers = None;
    meta.generate_name = None;
    meta.deletion_grace_period_seconds = None;
    if let Some(spec) = svc.spec.as_mut() {
        spec.cluster_ip = None;
        spec.cluster_ips = None;
        spec.external_ips = None;
        spec.external_name = None;
        spec.health_check_node_port = None;
        spec.internal_traffic_policy = None;
        spec.load_balancer_source_ranges = None;
        spec.publish_not_ready_addresses = None;
        spec.session_affinity = None;
        spec.session_affinity_config = None;
        spec.traffic_distribution = None;
        if spec.external_traffic_policy.as_deref() != Some("Local") {
            spec.selector = None;
        } else if let Some(selector) = spec.selector.as_mut() {
            cap_selector(selector);
        }
        for port in spec.ports.iter_mut().flatten() {
            *port = ServicePort {
                protocol: port.protocol.take(),
                port: port.port,
                ..Default::default()
            };
        }
    }
    if let Some(status) = svc.status.as_mut() {
        status.conditions = None;
    }
}

/// JSON pointer into a `fieldsV1` set: the manager owns `status.loadBalancer.ingress`.
const OWNED_INGRESS: &str = "/f:status/f:loadBalancer/f:ingress";
/// JSON pointer into a `fieldsV1` set: the manager owns (part of) `status.loadBalancer`.
const OWNED_LOAD_BALANCER: &str = "/f:status/f:loadBalancer";

/// Whether a `fieldsV1` set contains `pointer`. Reads both the API's form (a tree of `f:` keys)
/// and the compact form [`compact_fields`] leaves in the controller's store (a JSON string holding
/// the deepest pointer owned).
fn owns(fields: &FieldsV1, pointer: &str) -> bool {
    match &fields.0 {
        serde_json::Value::String(deepest) => deepest.starts_with(pointer),
        tree => tree.pointer(pointer).is_some(),
    }
}

/// The only fact the controller reads from a `fieldsV1` set, in a compact form: a JSON string
/// with the deepest of [`OWNED_INGRESS`] / [`OWNED_LOAD_BALANCER`] the set contains, or `None`
/// when it contains neither. A `fieldsV1` tree costs ~2 KiB in memory per Service (nested
/// `serde_json` maps); the string costs ~40 bytes. The compact form never leaves the process.
pub fn compact_fields(fields: &FieldsV1) -> Option<FieldsV1> {
    [OWNED_INGRESS, OWNED_LOAD_BALANCER]
        .into_iter()
        .find(|p| owns(fields, p))
        .map(|p| FieldsV1(serde_json::Value::String(p.to_owned())))
}

/// A digest of `spec`, standing for the "spec generation": the API server does not maintain
/// `metadata.generation` for Services, so a spec change is detected by content. Stable within one
/// process (which is all the write-war policy needs, `crate::contest`). In the controller the
/// Service has passed through [`trim`], so only changes to the fields it keeps count (type,
/// class, families, requested IP, ports, traffic policy, …): the ones a user changes to settle a
/// write war.
pub fn spec_digest(svc: &Service) -> u64 {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut h = DefaultHasher::new();
    // Serialising k8s-openapi types cannot fail and is deterministic (maps are BTreeMaps).
    serde_json::to_string(&svc.spec)
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerStatus, ServicePort, ServiceSpec, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, ObjectMeta, Time,
    };

    fn lb(annotations: &[(&str, &str)], families: &[&str], policy: &str) -> Service {
        Service {
            metadata: ObjectMeta {
                name: Some("svc".into()),
                namespace: Some("ns".into()),
                annotations: Some(
                    annotations
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                ),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                ip_families: Some(families.iter().map(|f| f.to_string()).collect()),
                ip_family_policy: Some(policy.into()),
                ports: Some(vec![ServicePort {
                    port: 80,
                    protocol: Some("TCP".into()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
            status: None,
        }
    }

    fn cfg(default_class: bool) -> ClassConfig {
        ClassConfig {
            lb_class: "ferrolb.io/l2".into(),
            default_class,
        }
    }

    #[test]
    fn classes() {
        let mut s = lb(&[], &["IPv4"], "SingleStack");
        assert!(matches!(classify(&s, &cfg(true)), Classified::Ours(..)));
        assert_eq!(classify(&s, &cfg(false)), Classified::OtherClass);
        s.spec.as_mut().unwrap().load_balancer_class = Some("ferrolb.io/l2".into());
        assert!(matches!(classify(&s, &cfg(false)), Classified::Ours(..)));
        s.spec.as_mut().unwrap().load_balancer_class = Some("example.com/other".into());
        assert_eq!(classify(&s, &cfg(true)), Classified::OtherClass);
        s.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert_eq!(classify(&s, &cfg(true)), Classified::NotLoadBalancer);
    }

    #[test]
    fn bad_requests_are_named_not_fatal() {
        for (value, want) in [
            ("198.51.100.1, nope", "\"nope\" is not an IP address"),
            ("198.51.100.1,198.51.100.2", "two IPv4 addresses"),
            ("2001:db8::1", "is IPv6 but the Service only asks for IPv4"),
        ] {
            let (req, _) = request_of(&lb(
                &[("ferrolb.io/loadBalancerIPs", value)],
                &["IPv4"],
                "SingleStack",
            ));
            let msg = req.invalid.unwrap();
            assert!(
                msg.starts_with("ferrolb.io/loadBalancerIPs: ") && msg.contains(want),
                "{msg}"
            );
        }
        let (req, _) = request_of(&lb(
            &[(
                "metallb.universe.tf/loadBalancerIPs",
                "198.51.100.1,2001:db8::1",
            )],
            &["IPv4", "IPv6"],
            "RequireDualStack",
        ));
        assert_eq!(req.invalid, None);
        assert_eq!(req.requested.len(), 2);
    }

    #[test]
    fn legacy_load_balancer_ip_is_honoured_and_loses_to_the_annotation() {
        let mut s = lb(&[], &["IPv4"], "SingleStack");
        s.spec.as_mut().unwrap().load_balancer_ip = Some("198.51.100.7".into());
        let (req, w) = request_of(&s);
        assert_eq!(
            req.requested,
            vec!["198.51.100.7".parse::<IpAddr>().unwrap()]
        );
        assert!(w.is_empty());
        s.metadata.annotations = Some(
            [(
                "ferrolb.io/loadBalancerIPs".to_string(),
                "198.51.100.8".to_string(),
            )]
            .into(),
        );
        let (req, w) = request_of(&s);
        assert_eq!(
            req.requested,
            vec!["198.51.100.8".parse::<IpAddr>().unwrap()]
        );
        assert!(w[0].contains("spec.loadBalancerIP"), "{w:?}");
    }

    #[test]
    fn observed_and_written_status() {
        let mut s = lb(&[], &["IPv4"], "SingleStack");
        s.status = Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(vec![
                    LoadBalancerIngress {
                        hostname: Some("lb.example.com".into()),
                        ..Default::default()
                    },
                    LoadBalancerIngress {
                        ip: Some("192.0.2.4".into()),
                        ..Default::default()
                    },
                ]),
            }),
            ..Default::default()
        });
        let o = observed_of(&s);
        assert_eq!(o.ips, vec!["192.0.2.4".parse::<IpAddr>().unwrap()]);
        assert!(o.unusable[0].contains("lb.example.com"));
        let ips: Vec<IpAddr> = vec!["198.51.100.1".parse().unwrap()];
        assert!(!status_matches(&s, &ips));
        s.status
            .as_mut()
            .unwrap()
            .load_balancer
            .as_mut()
            .unwrap()
            .ingress = Some(ingress_of(&ips));
        assert!(status_matches(&s, &ips));
        assert!(!we_own_ingress(&s), "no managedFields of ours");
    }

    fn managed(manager: &str, second: i64, fields: serde_json::Value) -> ManagedFieldsEntry {
        ManagedFieldsEntry {
            manager: Some(manager.into()),
            operation: Some("Apply".into()),
            subresource: Some("status".into()),
            time: Some(Time(
                k8s_openapi::jiff::Timestamp::from_second(second).unwrap(),
            )),
            fields_v1: Some(FieldsV1(fields)),
            ..Default::default()
        }
    }

    #[test]
    fn the_other_status_writer_is_named() {
        let lb_fields = serde_json::json!({"f:status": {"f:loadBalancer": {"f:ingress": {}}}});
        let mut s = lb(&[], &["IPv4"], "SingleStack");
        assert_eq!(status_writer(&s), None);
        s.metadata.managed_fields = Some(vec![
            managed(FIELD_MANAGER, 30, lb_fields.clone()),
            managed(
                "kubectl",
                40,
                serde_json::json!({"f:metadata": {"f:labels": {}}}),
            ),
            managed("old-lb", 10, lb_fields.clone()),
            managed("other-lb", 20, lb_fields),
        ]);
        assert_eq!(status_writer(&s).as_deref(), Some("other-lb"));
        assert!(we_own_ingress(&{
            let mut s = s.clone();
            s.status = Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(ingress_of(&["198.51.100.1".parse().unwrap()])),
                }),
                ..Default::default()
            });
            s
        }));
    }

    #[test]
    fn spec_digest_follows_the_spec_only() {
        let s = lb(&[], &["IPv4"], "SingleStack");
        let mut t = s.clone();
        t.metadata.labels = Some([("a".to_string(), "b".to_string())].into());
        t.status = Some(ServiceStatus::default());
        assert_eq!(spec_digest(&s), spec_digest(&t));
        t.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].port = 81;
        assert_ne!(spec_digest(&s), spec_digest(&t));
    }

    /// Issue #27 item 7: a `spec.selector` of thousands of entries is stored as one digest entry,
    /// and sharing still tells equal selectors from different ones.
    #[test]
    fn trim_caps_a_long_local_selector_and_keeps_equality() {
        let with_selector = |n: usize, last: &str| {
            let mut s = lb(&[], &["IPv4"], "SingleStack");
            let spec = s.spec.as_mut().unwrap();
            spec.external_traffic_policy = Some("Local".into());
            spec.selector = Some(
                (0..n)
                    .map(|i| (format!("tenant.example/k{i}"), "v".repeat(63)))
                    .chain([("app".to_string(), last.to_string())])
                    .collect(),
            );
            s
        };
        let backend = |mut s: Service| {
            trim(&mut s);
            let (req, _) = request_of(&s);
            (s.spec.unwrap().selector.unwrap(), req.backend)
        };
        let (big, a) = backend(with_selector(1000, "web"));
        let (_, b) = backend(with_selector(1000, "web"));
        let (_, c) = backend(with_selector(1000, "db"));
        assert_eq!(big.len(), 1, "one digest entry");
        assert!(big.iter().all(|(k, v)| k.len() + v.len() <= 91));
        assert_eq!(a, b, "equal selectors stay equal");
        assert_ne!(a, c, "different selectors stay different");
        let (small, _) = backend(with_selector(2, "web"));
        assert_eq!(small.len(), 3, "a short selector is kept as it is");
        let mut again = big.clone();
        cap_selector(&mut again);
        assert_eq!(again, big);
    }

    /// Issue #27: our annotations' values are bounded in the store whatever their size on the
    /// API server, and keep their meaning: equal sharing keys stay equal, different ones stay
    /// different; an over-long pool name or address list stays invalid.
    #[test]
    fn trim_caps_our_annotation_values_and_keeps_their_meaning() {
        let long = |c: char, n: usize| c.to_string().repeat(n);
        let mut s = lb(
            &[
                ("ferrolb.io/allow-shared-ip", &long('k', 100 * 1024)),
                ("metallb.io/address-pool", &long('p', 100 * 1024)),
                (
                    "ferrolb.io/loadBalancerIPs",
                    &format!("198.51.100.9,{}", long('é', 60_000)),
                ),
            ],
            &["IPv4"],
            "SingleStack",
        );
        let (_, warned_before) = request_of(&s);
        trim(&mut s);
        let a = s.metadata.annotations.clone().unwrap();
        assert!(
            a.values().all(|v| v.len() <= MAX_ANNOTATION_VALUE),
            "{:?}",
            a.values().map(String::len).collect::<Vec<_>>()
        );
        assert!(a["ferrolb.io/allow-shared-ip"].starts_with("sha256:"));
        assert!(a["metallb.io/address-pool"].ends_with("…(truncated from 102400 bytes)"));
        assert!(a["ferrolb.io/loadBalancerIPs"].starts_with("198.51.100.9,é"));
        // The same request as before — a pool nobody has, a sharing key, the same warnings
        // (the invalid address list) — in bounded words.
        let (req, warned) = request_of(&s);
        assert!(
            req.pool.as_ref().is_some_and(|p| p.len() > 253),
            "{:?}",
            req.pool
        );
        assert!(req.sharing_key.is_some());
        assert_eq!(warned.len(), warned_before.len(), "{warned:?}");
        assert!(
            warned.iter().all(|w| w.len() < 4 * MAX_ANNOTATION_VALUE),
            "{warned:?}"
        );
        let mut again = s.clone();
        trim(&mut again);
        assert_eq!(again, s, "idempotent");
        // Sharing keys: equal long keys stay equal, long keys differing in the last byte differ.
        let key = |k: &str| {
            let mut t = lb(
                &[("ferrolb.io/allow-shared-ip", k)],
                &["IPv4"],
                "SingleStack",
            );
            trim(&mut t);
            request_of(&t).0.sharing_key
        };
        let (a1, a2) = (long('k', 4096), format!("{}x", long('k', 4095)));
        assert_eq!(key(&a1), key(&a1.clone()));
        assert_ne!(key(&a1), key(&a2));
        assert_eq!(key("short"), key("short"));
    }

    /// Every fact the planner reads is the same before and after [`trim`], for a Service with
    /// all the fields the trim drops or shrinks.
    #[test]
    fn trim_keeps_every_fact_the_planner_reads() {
        let lb_fields = serde_json::json!({"f:status": {"f:loadBalancer": {"f:ingress": {}}},
            "f:metadata": {"f:labels": {"f:big": {}}}});
        for (etp, ours_own) in [("Cluster", true), ("Local", false)] {
            let mut s = lb(
                &[
                    ("metallb.io/address-pool", "blue"),
                    ("ferrolb.io/allow-shared-ip", "k"),
                    ("ferrolb.io/loadBalancerIPs", "198.51.100.9"),
                    ("kubectl.kubernetes.io/last-applied-configuration", "{…}"),
                ],
                &["IPv4"],
                "SingleStack",
            );
            s.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
            s.metadata.uid = Some("u-1".into());
            s.metadata.resource_version = Some("7".into());
            let spec = s.spec.as_mut().unwrap();
            spec.external_traffic_policy = Some(etp.into());
            spec.selector = Some([("app".to_string(), "web".to_string())].into());
            spec.cluster_ips = Some(vec!["10.0.0.1".into()]);
            spec.session_affinity = Some("ClientIP".into());
            let port = &mut spec.ports.as_mut().unwrap()[0];
            port.name = Some("http".into());
            port.node_port = Some(30080);
            s.status = Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(ingress_of(&["198.51.100.9".parse().unwrap()])),
                }),
                ..Default::default()
            });
            let mut entries = vec![
                managed("kubectl", 40, serde_json::json!({"f:spec": {}})),
                managed("other-lb", 20, lb_fields.clone()),
            ];
            if ours_own {
                entries.push(managed(FIELD_MANAGER, 30, lb_fields.clone()));
            }
            s.metadata.managed_fields = Some(entries);

            let mut t = s.clone();
            trim(&mut t);
            assert_eq!(request_of(&t), request_of(&s), "{etp}");
            assert_eq!(key_of(&t), key_of(&s));
            assert_eq!(we_own_ingress(&t), ours_own);
            assert_eq!(we_own_ingress(&t), we_own_ingress(&s));
            assert_eq!(status_writer(&t).as_deref(), Some("other-lb"));
            let ips = ["198.51.100.9".parse().unwrap()];
            assert!(status_matches(&t, &ips) && status_matches(&s, &ips));
            assert_eq!(t.metadata.annotations.as_ref().unwrap().len(), 3);
            assert_eq!(
                t.metadata.managed_fields.as_ref().unwrap().len(),
                1 + usize::from(ours_own)
            );
            let spec = t.spec.as_ref().unwrap();
            assert_eq!(spec.cluster_ips, None);
            assert_eq!(spec.selector.is_some(), etp == "Local");
            assert_eq!(spec.ports.as_ref().unwrap()[0].node_port, None);
            // Trimming is idempotent: the compact form reads the same.
            let mut u = t.clone();
            trim(&mut u);
            assert_eq!(u, t);
        }
    }
}
