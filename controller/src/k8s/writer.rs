//! Writes: Service status (server-side apply, field manager `ferrolb-controller`, forced so a
//! foreign status is replaced, R8 — how often is bounded by `crate::contest`), pool status, and
//! Events on Services (R14).

use std::net::IpAddr;

use ferrolb_runtime::events::Publisher;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType};
use kube::{Api, Client, Resource};
use serde_json::json;

use ferrolb_crds::{IPAddressPool, IPAddressPoolStatus};

use crate::events::EventSpec;
use crate::service::{FIELD_MANAGER, ingress_of};

/// Applies `status.loadBalancer.ingress` = `ips` (empty list to release, R6).
///
/// # Errors
/// The API call failed.
pub async fn apply_service_status(
    client: &Client,
    namespace: &str,
    name: &str,
    ips: &[IpAddr],
) -> kube::Result<Service> {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let patch = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": namespace },
        "status": { "loadBalancer": { "ingress": ingress_of(ips) } },
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}

/// Releases a Service's `status.loadBalancer.ingress` (an empty list, R6) only if the Service is
/// still at `resource_version` — the one whose ingress was found to be ours — so an entry another
/// writer put there since is never cleared (issue #14 uninstall). Same field manager and forced
/// apply as [`apply_service_status`]; the `metadata.resourceVersion` in the applied object is the
/// precondition (Kubernetes API reference, server-side apply).
///
/// # Errors
/// The API call failed; 409 Conflict when the Service changed since `resource_version`.
pub async fn release_service_status_at(
    client: &Client,
    namespace: &str,
    name: &str,
    resource_version: &str,
) -> kube::Result<Service> {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let patch = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": name, "namespace": namespace, "resourceVersion": resource_version },
        "status": { "loadBalancer": { "ingress": [] } },
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}

/// Applies a pool's status.
///
/// # Errors
/// The API call failed.
pub async fn apply_pool_status(
    client: &Client,
    name: &str,
    status: &IPAddressPoolStatus,
) -> kube::Result<IPAddressPool> {
    let api: Api<IPAddressPool> = Api::all(client.clone());
    let patch = json!({
        "apiVersion": "ferrolb.io/v1beta1",
        "kind": "IPAddressPool",
        "metadata": { "name": name },
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}

/// Publishes an Event on a Service; failures are logged, never retried in a loop.
pub async fn publish(recorder: &Publisher, svc: &Service, ev: &EventSpec) {
    let reference: ObjectReference = svc.object_ref(&());
    let event = Event {
        type_: if ev.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: ev.reason.to_owned(),
        note: Some(ev.message.clone()),
        action: "Allocate".to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::warn!(error = %e, reason = ev.reason, "cannot publish Event");
    }
}
