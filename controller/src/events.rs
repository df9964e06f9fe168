//! The Events the controller publishes on Services (R14): what an allocator [`Note`] says, as
//! type, reason and message. Pure; published by [`crate::k8s::writer::publish`].

use std::net::IpAddr;

use crate::ipam::{Failure, Note};

/// Reason: addresses were assigned.
pub const IP_ALLOCATED: &str = "IPAllocated";
/// Reason: addresses were released.
pub const IP_RELEASED: &str = "IPReleased";
/// Reason: the Service lost its address(es) and got others, or none yet.
pub const REALLOCATED: &str = "Reallocated";
/// Reason: nothing could be assigned (the message says why).
pub const ALLOCATION_FAILED: &str = "AllocationFailed";
/// Reason: a foreign or invalid status was replaced (R8).
pub const STATUS_REPLACED: &str = "StatusReplaced";
/// Reason: a Service with a sharing key did not join its group's address in another namespace,
/// because the pool does not allow sharing across namespaces (issue #27 item 6).
pub const NOT_SHARED: &str = "NotShared";
/// Reason: our annotations and MetalLB's disagree; ours win.
pub const ANNOTATION_CONFLICT: &str = "AnnotationConflict";

/// An Event about to be published: type, reason, message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// Normal or Warning.
    pub warning: bool,
    /// `IPAllocated`, `IPReleased`, `Reallocated`, `AllocationFailed`, `StatusReplaced`,
    /// `NotShared`, `AnnotationConflict`, `StatusWriteConflict` ([`crate::contest::STATUS_WRITE_CONFLICT`]).
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
            reason: IP_ALLOCATED,
            message: format!("assigned {} from pool {pool}", list(ips)),
        },
        Note::Reallocated { from, to, why } if to.is_empty() => EventSpec {
            warning: true,
            reason: REALLOCATED,
            message: format!(
                "lost {}: {why}; no replacement yet (see AllocationFailed)",
                list(from)
            ),
        },
        Note::Reallocated { from, to, why } => EventSpec {
            warning: true,
            reason: REALLOCATED,
            message: format!("moved from {} to {}: {why}", list(from), list(to)),
        },
        Note::Released { ips, why } => EventSpec {
            warning: false,
            reason: IP_RELEASED,
            message: format!("released {}: {why}", list(ips)),
        },
        Note::Failed(f) => EventSpec {
            warning: true,
            reason: ALLOCATION_FAILED,
            message: f.to_string(),
        },
        Note::Partial { missing, why } => EventSpec {
            warning: true,
            reason: ALLOCATION_FAILED,
            message: format!(
                "PreferDualStack: {missing} address not available ({why}); serving the other family, {missing} follows when possible"
            ),
        },
        Note::NotShared { ip, holder, why } => EventSpec {
            warning: true,
            reason: NOT_SHARED,
            message: format!(
                "not sharing {ip} with {holder}: {why}; this Service got an address of its own"
            ),
        },
        Note::StatusReplaced { discarded } => EventSpec {
            warning: true,
            reason: STATUS_REPLACED,
            message: format!(
                "discarded status.loadBalancer.ingress not written by ferrolb or not valid here: {}",
                discarded.join("; ")
            ),
        },
    }
}

/// Every label [`failure_label`] returns: the `reason` values of
/// `ferrolb_controller_allocation_failures_total` and `ferrolb_controller_services_pending`
/// (the gauge exports each of them, 0 included, so a dashboard and an alert never see a series
/// vanish).
pub const FAILURE_LABELS: [&str; 6] = [
    "no_pool",
    "exhausted",
    "requested_held",
    "requested_in_no_pool",
    "family_unavailable",
    "invalid",
];

/// Metric label of a failure (one of [`FAILURE_LABELS`]).
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipam::ServiceKey;
    use ferrolb_crds::addresses::Family;

    #[test]
    fn every_failure_label_is_listed_once() {
        let ip = IpAddr::from([198, 51, 100, 1]);
        let failures = [
            Failure::NoPool(crate::ipam::NoPool::NamedMissing("p".into())),
            Failure::Exhausted {
                family: Family::V4,
                pools: vec!["p".into()],
            },
            Failure::RequestedHeld {
                ip,
                holder: ServiceKey::new("default", "a"),
                why: "no common key".into(),
            },
            Failure::RequestedInNoPool {
                ip,
                detail: crate::ipam::NotHandedOut::InNoPool,
            },
            Failure::FamilyUnavailable(Family::V6),
            Failure::Invalid("bad".into()),
        ];
        let labels: Vec<&str> = failures.iter().map(failure_label).collect();
        assert_eq!(labels, FAILURE_LABELS);
    }

    #[test]
    fn event_texts_name_the_reason() {
        let e = event_for(&Note::Failed(Failure::RequestedHeld {
            ip: "198.51.100.11"
                .parse()
                .unwrap_or(IpAddr::from([0, 0, 0, 0])),
            holder: ServiceKey::new("default", "svc-b"),
            why: "default/svc-b and default/svc-c do not carry the same sharing key".into(),
        }));
        assert!(
            e.warning
                && e.reason == "AllocationFailed"
                && e.message.contains("held by default/svc-b: ")
                && e.message.ends_with("do not carry the same sharing key")
        );
        let e = event_for(&Note::Failed(Failure::NoPool(crate::ipam::NoPool::NoPools)));
        assert!(e.message.starts_with("no pool can serve this Service"));
    }
}
