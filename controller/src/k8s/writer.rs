//! Writes: Service status (server-side apply, field manager `ferrolb-controller`, forced so a
//! foreign status is replaced, R8 — how often is bounded by `crate::contest`), pool status, and
//! Events on Services (R14).

use std::net::IpAddr;

use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder};
use kube::{Api, Client, Resource};
use serde_json::json;

use ferrolb_crds::{IPAddressPool, IPAddressPoolStatus};

use crate::ipam::{Failure, Note};
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

/// An Event about to be published: type, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Normal or Warning.
    pub warning: bool,
    /// `IPAllocated`, `IPReleased`, `Reallocated`, `AllocationFailed`, `StatusReplaced`,
    /// `AnnotationConflict`, `StatusWriteConflict` ([`crate::contest::STATUS_WRITE_CONFLICT`]).
    pub reason: &'static str,
    /// Human-readable message.
    pub message: String,
}

fn list(ips: &[IpAddr]) -> String {
    ips.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}

/// The Event for an allocator note.
pub fn event_for(note: &Note) -> EventSpec {
    match note {
        Note::Allocated { ips, pool } => EventSpec {
            warning: false,
            reason: "IPAllocated",
            message: format!("assigned {} from pool {pool}", list(ips)),
        },
        Note::Reallocated { from, to, why } if to.is_empty() => EventSpec {
            warning: true,
            reason: "Reallocated",
            message: format!(
                "lost {}: {why}; no replacement yet (see AllocationFailed)",
                list(from)
            ),
        },
        Note::Reallocated { from, to, why } => EventSpec {
            warning: true,
            reason: "Reallocated",
            message: format!("moved from {} to {}: {why}", list(from), list(to)),
        },
        Note::Released { ips, why } => EventSpec {
            warning: false,
            reason: "IPReleased",
            message: format!("released {}: {why}", list(ips)),
        },
        Note::Failed(f) => EventSpec {
            warning: true,
            reason: "AllocationFailed",
            message: f.to_string(),
        },
        Note::Partial { missing, why } => EventSpec {
            warning: true,
            reason: "AllocationFailed",
            message: format!(
                "PreferDualStack: {missing} address not available ({why}); serving the other family, {missing} follows when possible"
            ),
        },
        Note::StatusReplaced { discarded } => EventSpec {
            warning: true,
            reason: "StatusReplaced",
            message: format!(
                "discarded status.loadBalancer.ingress not written by ferrolb or not valid here: {}",
                discarded.join("; ")
            ),
        },
    }
}

/// Metric label of a failure.
pub fn failure_label(f: &Failure) -> &'static str {
    match f {
        Failure::NoPool(_) => "no_pool",
        Failure::Exhausted { .. } => "exhausted",
        Failure::RequestedHeld { .. } => "requested_held",
        Failure::RequestedInNoPool { .. } => "requested_in_no_pool",
        Failure::FamilyUnavailable(_) => "family_unavailable",
        Failure::Invalid(_) => "invalid",
    }
}

/// Publishes an Event on a Service; failures are logged, never retried in a loop.
pub async fn publish(recorder: &Recorder, svc: &Service, ev: &EventSpec) {
    let reference: ObjectReference = svc.object_ref(&());
    let event = Event {
        type_: if ev.warning {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: ev.reason.to_owned(),
        note: Some(ev.message.chars().take(1000).collect()),
        action: "Allocate".to_owned(),
        secondary: None,
    };
    if let Err(e) = recorder.publish(&event, &reference).await {
        tracing::warn!(error = %e, reason = ev.reason, "cannot publish Event");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::ServiceKey;

    #[test]
    fn event_texts_name_the_reason() {
        let e = event_for(&Note::Failed(Failure::RequestedHeld {
            ip: "198.51.100.11"
                .parse()
                .unwrap_or(IpAddr::from([0, 0, 0, 0])),
            holder: ServiceKey::new("default", "svc-b"),
        }));
        assert!(
            e.warning
                && e.reason == "AllocationFailed"
                && e.message.contains("held by default/svc-b")
        );
        let e = event_for(&Note::Failed(Failure::NoPool("x".into())));
        assert!(e.message.starts_with("no pool can serve this Service"));
    }
}
