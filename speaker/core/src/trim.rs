//! What the speaker keeps of each watched object (DESIGN S13): only the fields [`crate::view`]
//! and the Event writer read, so a tenant cannot exhaust the memory of every speaker in the
//! cluster with large annotations, labels or `managedFields` on their Services or
//! EndpointSlices. Applied to every object before it enters a watch store. Pure.
//!
//! Kept, by kind:
//! - every object: name, namespace, uid, resourceVersion, creationTimestamp, generation (for
//!   Events and pool age, R9);
//! - Service: of the spec only `type`, `loadBalancerClass` and `externalTrafficPolicy` (whose
//!   Service it is, and where it may be answered); `status.loadBalancer`; and the pool its
//!   `address-pool` annotation names (the winning spelling's value, as the controller reads it,
//!   kept as `ferrolb.io/address-pool`: the pool the Service is served from, R9 and
//!   `ferrolb_crds::ownership::Layout::pool_for`); no other annotation and no label. The rest of
//!   the spec has lists Kubernetes does not cap in number (`selector`, `externalIPs`,
//!   `loadBalancerSourceRanges`, `ports`): kept, they let a tenant grow every speaker (issue #27
//!   item 7);
//! - EndpointSlice: the `kubernetes.io/service-name` label, and per endpoint only `nodeName` and
//!   `conditions`;
//! - Node: labels (node selectors, the exclusion label), `spec.unschedulable` (cordon, issue
//!   #29 O3) and nothing else of the spec, `status.addresses` and `status.conditions`
//!   (`NetworkUnavailable`, `Ready`), nothing else of the status;
//! - IPAddressPool and L2Advertisement: labels (pool selectors), `spec`, `status`;
//! - L2Announcement (the speakers' own reports): `spec` only.

use ferrolb_crds::annotations::{ADDRESS_POOL, address_pool};
use ferrolb_crds::{IPAddressPool, L2Advertisement, L2Announcement};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{
    Node, NodeSpec, NodeStatus, Pod, PodSpec, PodStatus, Service, ServiceSpec,
};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::eligibility::DROPPED_VOTERS_ANNOTATION;
use crate::view::SERVICE_NAME_LABEL;

/// The identity fields of `meta`; labels and annotations are left to the caller.
fn identity(meta: &ObjectMeta) -> ObjectMeta {
    ObjectMeta {
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        creation_timestamp: meta.creation_timestamp.clone(),
        generation: meta.generation,
        ..ObjectMeta::default()
    }
}

/// Trims a Service in place (see the module docs).
pub fn service(svc: &mut Service) {
    // The winning spelling's value as the controller reads it (`address_pool`: precedence,
    // whitespace trimmed), kept under our spelling. A pool name is an object name, at most 253
    // bytes: a longer value names no pool, for the controller too.
    let pool = address_pool(svc.metadata.annotations.as_ref()).filter(|p| p.len() <= 253);
    svc.metadata = identity(&svc.metadata);
    svc.metadata.annotations = pool.map(|p| [(ADDRESS_POOL[0].to_owned(), p)].into());
    svc.spec = svc.spec.take().map(|spec| ServiceSpec {
        type_: spec.type_,
        load_balancer_class: spec.load_balancer_class,
        external_traffic_policy: spec.external_traffic_policy,
        ..ServiceSpec::default()
    });
    if let Some(status) = svc.status.as_mut() {
        status.conditions = None;
    }
}

/// Trims an EndpointSlice in place (see the module docs).
pub fn endpoint_slice(slice: &mut EndpointSlice) {
    let mut meta = identity(&slice.metadata);
    meta.labels = slice
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(SERVICE_NAME_LABEL))
        .map(|v| [(SERVICE_NAME_LABEL.to_owned(), v.clone())].into());
    slice.metadata = meta;
    slice.ports = None;
    for e in slice.endpoints.iter_mut().flatten() {
        *e = Endpoint {
            node_name: e.node_name.take(),
            conditions: e.conditions.take(),
            ..Endpoint::default()
        };
    }
}

/// Trims a Node in place (see the module docs).
pub fn node(node: &mut Node) {
    let mut meta = identity(&node.metadata);
    meta.labels = node.metadata.labels.take();
    node.metadata = meta;
    // Only the cordon: taints, podCIDRs and providerID are never read.
    node.spec = node
        .spec
        .take()
        .and_then(|s| s.unschedulable)
        .map(|u| NodeSpec {
            unschedulable: Some(u),
            ..NodeSpec::default()
        });
    node.status = node.status.take().map(|s| NodeStatus {
        addresses: s.addresses,
        conditions: s.conditions.map(|cs| {
            cs.into_iter()
                .filter(|c| c.type_ == "NetworkUnavailable" || c.type_ == "Ready")
                .map(|mut c| {
                    // The message and reason can be long; eligibility reads type and status.
                    c.message = None;
                    c.reason = None;
                    c
                })
                .collect()
        }),
        ..NodeStatus::default()
    });
}

/// Trims a Pod of the speakers' namespace in place to what [`crate::view::speaker_nodes`]
/// reads: labels, `spec.nodeName`, `status.phase`.
pub fn pod(pod: &mut Pod) {
    let mut meta = identity(&pod.metadata);
    meta.labels = pod.metadata.labels.take();
    pod.metadata = meta;
    pod.spec = pod.spec.take().map(|s| PodSpec {
        node_name: s.node_name,
        ..PodSpec::default()
    });
    pod.status = pod.status.take().map(|s| PodStatus {
        phase: s.phase,
        ..PodStatus::default()
    });
}

/// Trims the speaker DaemonSet in place to its [`DROPPED_VOTERS_ANNOTATION`] (issue #32 G3);
/// its spec and status are never read.
pub fn daemon_set(ds: &mut DaemonSet) {
    let dropped = ds
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DROPPED_VOTERS_ANNOTATION))
        .cloned();
    ds.metadata = identity(&ds.metadata);
    ds.metadata.annotations = dropped.map(|v| [(DROPPED_VOTERS_ANNOTATION.to_owned(), v)].into());
    ds.spec = Default::default();
    ds.status = None;
}

/// Trims an IPAddressPool in place (see the module docs).
pub fn pool(pool: &mut IPAddressPool) {
    let mut meta = identity(&pool.metadata);
    meta.labels = pool.metadata.labels.take();
    pool.metadata = meta;
}

/// Trims an L2Announcement in place (see the module docs).
pub fn announcement(ann: &mut L2Announcement) {
    ann.metadata = identity(&ann.metadata);
}

/// Trims an L2Advertisement in place (see the module docs).
pub fn advertisement(adv: &mut L2Advertisement) {
    let mut meta = identity(&adv.metadata);
    meta.labels = adv.metadata.labels.take();
    adv.metadata = meta;
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    /// Issue #27 item 7: a Service's spec lists that Kubernetes does not cap in number are not
    /// kept; the three fields the speaker reads are.
    #[test]
    fn a_service_keeps_only_the_spec_fields_the_speaker_reads() {
        let many =
            |prefix: &str| -> Vec<String> { (0..1000).map(|i| format!("{prefix}{i}")).collect() };
        let mut svc = Service {
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                load_balancer_class: Some("ferrolb.io/l2".into()),
                external_traffic_policy: Some("Local".into()),
                selector: Some(
                    many("k")
                        .into_iter()
                        .map(|k| (k, "v".repeat(63)))
                        .collect::<BTreeMap<_, _>>(),
                ),
                external_ips: Some(many("192.0.2.")),
                load_balancer_source_ranges: Some(many("10.0.0.0/")),
                ..ServiceSpec::default()
            }),
            ..Service::default()
        };
        service(&mut svc);
        assert_eq!(
            svc.spec,
            Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                load_balancer_class: Some("ferrolb.io/l2".into()),
                external_traffic_policy: Some("Local".into()),
                ..ServiceSpec::default()
            })
        );
    }
}
