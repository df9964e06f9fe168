//! Uninstall (issue #14): when ferrolb is uninstalled, the Service statuses it wrote are released,
//! so no `status.loadBalancer.ingress` of ours is left behind pointing at an address nobody
//! announces any more.
//!
//! **The signal is the deletion of the controller's own namespace**, read once when the process
//! is asked to stop (SIGTERM), never a guess from timing: `kubectl delete -k deploy/` (and
//! `helm uninstall` of the chart with `namespace.create: true`) delete the namespace
//! `ferrolb-system`, and a namespace gets its
//! `deletionTimestamp` before its pods are deleted, so a replica stopped by an uninstall finds its
//! namespace terminating. A rolling update or a node drain stops the pod while the namespace is
//! alive: then nothing is released (a restart must never cost an address, DESIGN R1).
//!
//! Only the leader (the holder of the Lease, R13) releases; a standby does nothing. It releases
//! exactly the statuses it wrote — Services whose `status.loadBalancer.ingress` our field manager
//! owns ([`crate::service::we_own_ingress`]); `ingress` is an atomic list, so owning it means
//! every entry in it is ours — with the same write as every other release (server-side apply of
//! an empty `ingress`, field manager `ferrolb-controller`, R6), made conditional on the
//! `resourceVersion` it was listed at so that an entry another writer put there since is never
//! cleared ([`release_service_status_at`]), and a
//! Normal `IPReleased` Event per Service (R14). A Service whose ingress another writer owns (of
//! another class, or contested, R8), or co-owns with us (it applied the same entries: shared
//! ownership in server-side apply, issue #27 item 10), is not touched. Everything is bounded by [`RELEASE_DEADLINE`],
//! below the pod's `terminationGracePeriodSeconds` (10 s in `deploy/controller.yaml`); what is
//! left when it passes is logged.
//!
//! Reading the namespace may fail (403 once the uninstall removed the controller's RBAC, 404,
//! a timeout): that is *not* an uninstall, and it is logged. This path is best effort: `kubectl
//! delete -k deploy/` removes the RBAC before the pods stop, and a namespace deletion removes the
//! ServiceAccount, whose token the API server then accepts only while its 10 s cache of
//! successful authentications holds it. The documented uninstall is therefore `ferrolb uninstall`
//! (the command-line tool, `cli/src/uninstall.rs`), which stops the controller and calls
//! [`release_all`] with the user's credentials; see `docs/install.md`, "Uninstall".

use std::collections::BTreeMap;
use std::time::Duration;

use ferrolb_runtime::reflector::LIST_PAGE_SIZE;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::{Client, ResourceExt};
use tokio::time::{Instant, timeout_at};

use ferrolb_runtime::events::Publisher;

use crate::events::{EventSpec, IP_RELEASED};
use crate::ipam::ServiceKey;
use crate::k8s::writer::{publish, release_service_status_at};
use crate::service::{key_of, we_own_ingress};

/// How long the leader may spend, from SIGTERM, reading its namespace and releasing statuses:
/// below the controller pod's `terminationGracePeriodSeconds: 10` (`deploy/controller.yaml`), so
/// that the Lease release and the exit still fit before the kubelet's SIGKILL (issue #14).
pub const RELEASE_DEADLINE: Duration = Duration::from_secs(8);

/// Longest wait for the read of the controller's namespace on SIGTERM (issue #14); the rest of
/// [`RELEASE_DEADLINE`] is for the writes.
pub const NAMESPACE_READ_TIMEOUT: Duration = Duration::from_secs(3);

/// The annotation on the bookmark that ends a streaming list's initial events (Kubernetes'
/// `WatchList`, KEP-3157).
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Listing rounds: a write the control loop had in flight at SIGTERM may land after the first
/// listing; the next round finds it. Stops early once a round finds nothing of ours.
const ROUNDS: usize = 3;

/// What the read of the controller's own namespace says (issue #14).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// The namespace has a `deletionTimestamp`: ferrolb is being uninstalled.
    Uninstall,
    /// The namespace is alive: a restart, a rolling update, a drain.
    Alive,
    /// The read failed (message): treated as not an uninstall.
    Unknown(String),
}

/// The verdict from the result of reading the namespace: only a `deletionTimestamp` is an
/// uninstall, a failed read is not (issue #14). Pure.
pub fn verdict(read: Result<Namespace, String>) -> Verdict {
    match read {
        Ok(ns) if ns.metadata.deletion_timestamp.is_some() => Verdict::Uninstall,
        Ok(_) => Verdict::Alive,
        Err(e) => Verdict::Unknown(e),
    }
}

/// Reads `namespace` (bounded by [`NAMESPACE_READ_TIMEOUT`]) and says whether it is being
/// deleted, i.e. whether ferrolb is being uninstalled (issue #14).
pub async fn namespace_verdict(client: &Client, namespace: &str) -> Verdict {
    let api: Api<Namespace> = Api::all(client.clone());
    let read = match tokio::time::timeout(NAMESPACE_READ_TIMEOUT, api.get(namespace)).await {
        Ok(Ok(ns)) => Ok(ns),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {NAMESPACE_READ_TIMEOUT:?}")),
    };
    verdict(read)
}

/// The addresses to release from a Service on uninstall (issue #14): its ingress IPs when our
/// field manager owns `status.loadBalancer.ingress` (so every entry is ours, as for R6) and no
/// other field manager co-owns it ([`crate::service::ingress_co_owners`], issue #27 item 10:
/// another writer applied the same entries, and clearing them would undo its write), else
/// `None` (nothing of ours, or entries another writer has or shares: never touched). Pure.
pub fn owned_ingress(svc: &Service) -> Option<Vec<String>> {
    if !we_own_ingress(svc) || !crate::service::ingress_co_owners(svc).is_empty() {
        return None;
    }
    Some(
        svc.status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .map(|i| {
                i.ip.clone()
                    .or_else(|| i.hostname.clone())
                    .unwrap_or_default()
            })
            .collect(),
    )
}

/// Why the statuses are released when the leader stops while its namespace is being deleted
/// (issue #14): the end of the `IPReleased` message. Pure.
pub fn namespace_deleted(namespace: &str) -> String {
    format!("ferrolb is being uninstalled (its namespace {namespace} is being deleted)")
}

/// The Normal `IPReleased` Event (R14) on a Service whose status is released because ferrolb is
/// being uninstalled (issue #14): "released `ips`: `why`", `why` from [`namespace_deleted`] or
/// the `ferrolb uninstall` command's own. Pure.
pub fn release_event(ips: &[String], why: &str) -> EventSpec {
    EventSpec {
        warning: false,
        reason: IP_RELEASED,
        message: format!("released {}: {why}", ips.join(", ")),
    }
}

/// What [`release_all`] did (logged by the binary; issue #14 asks that what is left be said).
#[derive(Debug, Default)]
pub struct Report {
    /// Services whose status was released.
    pub released: Vec<ServiceKey>,
    /// Services whose release failed or did not finish before the deadline, with why.
    pub left: Vec<(ServiceKey, String)>,
    /// Why the search for statuses did not finish (a list failed or the deadline passed), if
    /// it did not: more statuses of ours may remain than `left` names.
    pub incomplete: Option<String>,
}

/// Releases every Service status ferrolb wrote (see the module docs, issue #14), until a
/// complete listing finds none or `deadline` passes. `why` ends each Service's `IPReleased`
/// Event ([`release_event`]); `concurrency` bounds the writes in flight. Used by the leader on
/// SIGTERM during an uninstall and by `ferrolb uninstall` (the `ferrolb` command-line tool, with
/// the user's credentials, once the controller is stopped).
pub async fn release_all(
    client: &Client,
    recorder: &Publisher,
    why: &str,
    concurrency: usize,
    deadline: Instant,
) -> Report {
    let api: Api<Service> = Api::all(client.clone());
    let mut report = Report::default();
    // Latest failure per Service; a later success removes it.
    let mut left: BTreeMap<ServiceKey, String> = BTreeMap::new();
    for _ in 0..ROUNDS {
        // What is left is what the latest round could not release: a Service that failed in an
        // earlier round and is no longer ours (deleted, taken by another writer) is not.
        left.clear();
        // A listing cut short still releases what it found (each write is conditional on the
        // resourceVersion it was read at), then stops.
        let (owned, cut_short) = owned_services(&api, deadline).await;
        let found = owned.len();
        let results: Vec<(ServiceKey, Result<(), String>)> = futures::stream::iter(owned)
            .map(|(svc, ips)| release_one(client, recorder, why, svc, ips, deadline))
            .buffer_unordered(concurrency.max(1))
            .collect()
            .await;
        for (key, result) in results {
            match result {
                Ok(()) => {
                    left.remove(&key);
                    report.released.push(key);
                }
                Err(why) => {
                    left.insert(key, why);
                }
            }
        }
        if let Some(why) = cut_short {
            report.incomplete = Some(why);
            report.left = left.into_iter().collect();
            return report;
        }
        if found == 0 {
            // A complete listing found nothing of ours: nothing is left.
            return report;
        }
        if Instant::now() >= deadline {
            report.incomplete = Some("the deadline passed".into());
            break;
        }
        // A failed write is tried again in the next round, if the Service is still ours then.
    }
    if report.incomplete.is_none() {
        // Every round found statuses of ours: something keeps writing them (a controller still
        // leading?); no complete listing came back empty.
        report.incomplete = Some(format!(
            "{ROUNDS} listings in a row still found statuses of ours (is a controller still writing them?)"
        ));
    }
    report.left = left.into_iter().collect();
    report
}

/// How long the streaming list may go without an event before it is given up for the paged
/// LIST: an API server (or an aggregated or proxied one) that accepts the watch but never sends
/// the bookmark ending the initial events must not spend the whole [`RELEASE_DEADLINE`].
const STREAM_GAP: Duration = Duration::from_secs(2);

/// Every Service whose status is ours to release ([`owned_ingress`]), trimmed
/// ([`crate::service::trim`]) with its ingress IPs, from one complete listing that ends before
/// `deadline`; with `Some(why)` when the listing did not complete (what it found until then is
/// still returned: releasing it is safe, each write being conditional on the resourceVersion
/// read).
///
/// **Memory stays bounded by one object, not by a page** (issue #27 item 7): a tenant's large
/// Services (annotations up to 256 KiB, any number of labels) must not push the leader past its
/// memory limit as it stops, nor `ferrolb uninstall`. The listing is a streaming list (a watch
/// with `sendInitialEvents`, most-recent semantics: resource version "" and `NotOlderThan`, so
/// a status written just before is in it), which delivers one object per event; each is looked
/// at and dropped or trimmed before the next is read. If the streaming list fails in any way
/// before its end — refused (`WatchList` off, Kubernetes 1.33's default: 422), an error, a 429
/// while the watch cache warms up, a stream that ends early or goes [`STREAM_GAP`] without an
/// event — what it found is dropped and the Services are read again with a LIST in pages of
/// [`LIST_PAGE_SIZE`] objects, most-recent semantics too (client-go's reflector falls back the
/// same way). Before, pages of 500 whole Services: 500 Services of 126 KiB each were one 62 MiB
/// response.
///
/// Not [`ferrolb_runtime::reflector::events`], which reads the same two ways: kube-runtime's
/// watcher asks its streaming list with `resourceVersion=0` ("any" semantics, served from the
/// watch cache and possibly a moment behind), and a status written just before the uninstall
/// must not be missed; nor does a one-shot search want its retries and backoff.
async fn owned_services(
    api: &Api<Service>,
    deadline: Instant,
) -> (Vec<(Service, Vec<String>)>, Option<String>) {
    // By Service: a change after its first event replaces it (or drops it, no longer ours).
    let mut owned: BTreeMap<ServiceKey, (Service, Vec<String>)> = BTreeMap::new();
    let keep = |owned: &mut BTreeMap<ServiceKey, (Service, Vec<String>)>, mut svc: Service| {
        let key = key_of(&svc);
        match owned_ingress(&svc) {
            Some(ips) => {
                crate::service::trim(&mut svc);
                owned.insert(key, (svc, ips));
            }
            None => {
                owned.remove(&key);
            }
        }
    };
    let streamed = async {
        let events = api
            .watch(&WatchParams::streaming_lists(), "")
            .await
            .map_err(|e| e.to_string())?;
        let mut events = std::pin::pin!(events);
        loop {
            let event = timeout_at(Instant::now() + STREAM_GAP, events.next())
                .await
                .map_err(|_| format!("no event for {STREAM_GAP:?}"))?;
            match event {
                None => return Err("the stream ended before its last object".to_string()),
                Some(Err(e)) => return Err(e.to_string()),
                Some(Ok(WatchEvent::Added(svc) | WatchEvent::Modified(svc))) => {
                    keep(&mut owned, svc);
                }
                Some(Ok(WatchEvent::Deleted(svc))) => {
                    owned.remove(&key_of(&svc));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => {
                    if b.metadata
                        .annotations
                        .get(INITIAL_EVENTS_END)
                        .map(String::as_str)
                        == Some("true")
                    {
                        return Ok(());
                    }
                }
                Some(Ok(WatchEvent::Error(e))) => return Err(e.message),
            }
        }
    };
    match timeout_at(deadline, streamed).await {
        Ok(Ok(())) => return (owned.into_values().collect(), None),
        Ok(Err(error)) => {
            tracing::info!(
                %error,
                page_size = LIST_PAGE_SIZE,
                "no streaming list of Services (refused, failed or incomplete): reading paged lists"
            );
            owned.clear();
        }
        Err(_) => {
            return (
                owned.into_values().collect(),
                Some("the deadline passed while listing Services".into()),
            );
        }
    }
    let mut token: Option<String> = None;
    loop {
        let mut lp = ListParams::default().limit(LIST_PAGE_SIZE);
        if let Some(t) = &token {
            lp = lp.continue_token(t);
        }
        let page = match timeout_at(deadline, api.list(&lp)).await {
            Ok(Ok(page)) => page,
            Ok(Err(e)) => {
                return (
                    owned.into_values().collect(),
                    Some(format!("listing Services failed: {e}")),
                );
            }
            Err(_) => {
                return (
                    owned.into_values().collect(),
                    Some("the deadline passed while listing Services".into()),
                );
            }
        };
        token = page.metadata.continue_.filter(|t| !t.is_empty());
        for svc in page.items {
            keep(&mut owned, svc);
        }
        if token.is_none() {
            return (owned.into_values().collect(), None);
        }
    }
}

/// Releases one Service: the status first, then the Event (whose failure is only logged).
async fn release_one(
    client: &Client,
    recorder: &Publisher,
    why: &str,
    svc: Service,
    ips: Vec<String>,
    deadline: Instant,
) -> (ServiceKey, Result<(), String>) {
    let key = key_of(&svc);
    let (ns, name) = (svc.namespace().unwrap_or_default(), svc.name_any());
    let version = svc.resource_version().unwrap_or_default();
    match timeout_at(
        deadline,
        release_service_status_at(client, &ns, &name, &version),
    )
    .await
    {
        Ok(Ok(_)) => {}
        // Deleted meanwhile: nothing of ours is left on it.
        Ok(Err(kube::Error::Api(e))) if e.code == 404 => return (key, Ok(())),
        // Changed since it was listed: the next round looks at it again.
        Ok(Err(kube::Error::Api(e))) if e.code == 409 => {
            return (key, Err("changed since it was listed".into()));
        }
        Ok(Err(e)) => return (key, Err(format!("status write failed: {e}"))),
        Err(_) => return (key, Err("the deadline passed".into())),
    }
    let ev = release_event(&ips, why);
    tracing::info!(service = %key, reason = ev.reason, message = %ev.message, "event");
    if timeout_at(deadline, publish(recorder, &svc, &ev))
        .await
        .is_err()
    {
        tracing::warn!(service = %key, reason = ev.reason, "Event write timed out");
    }
    (key, Ok(()))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use k8s_openapi::api::core::v1::{LoadBalancerIngress, LoadBalancerStatus, ServiceStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        FieldsV1, ManagedFieldsEntry, ObjectMeta, Time,
    };
    use serde_json::json;

    fn svc(manager: &str, ips: &[&str]) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some("ns".into()),
                name: Some("svc".into()),
                managed_fields: Some(vec![ManagedFieldsEntry {
                    manager: Some(manager.into()),
                    operation: Some("Apply".into()),
                    subresource: Some("status".into()),
                    fields_v1: Some(FieldsV1(
                        json!({"f:status": {"f:loadBalancer": {"f:ingress": {}}}}),
                    )),
                    ..Default::default()
                }]),
                ..Default::default()
            },
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        ips.iter()
                            .map(|ip| LoadBalancerIngress {
                                ip: Some((*ip).into()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn only_a_deleted_namespace_is_an_uninstall() {
        let mut ns = Namespace::default();
        assert_eq!(verdict(Ok(ns.clone())), Verdict::Alive);
        ns.metadata.deletion_timestamp = Some(Time(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        assert_eq!(verdict(Ok(ns)), Verdict::Uninstall);
        assert_eq!(
            verdict(Err("403 Forbidden".into())),
            Verdict::Unknown("403 Forbidden".into()),
            "a failed read is not an uninstall"
        );
    }

    #[test]
    fn only_our_entries_are_released() {
        let ours = svc(
            crate::service::FIELD_MANAGER,
            &["198.51.100.1", "2001:db8::1"],
        );
        assert_eq!(
            owned_ingress(&ours),
            Some(vec!["198.51.100.1".into(), "2001:db8::1".into()])
        );
        assert_eq!(owned_ingress(&svc("other-lb", &["192.0.2.9"])), None);
        // Co-owned with another server-side applier (issue #27 item 10): left alone.
        let mut shared = ours.clone();
        let mut theirs = shared.metadata.managed_fields.as_ref().unwrap()[0].clone();
        theirs.manager = Some("other-lb".into());
        shared
            .metadata
            .managed_fields
            .as_mut()
            .unwrap()
            .push(theirs);
        assert_eq!(owned_ingress(&shared), None);
        assert_eq!(crate::service::ingress_co_owners(&shared), ["other-lb"]);
        assert!(crate::service::ingress_co_owners(&ours).is_empty());
        assert_eq!(
            owned_ingress(&svc(crate::service::FIELD_MANAGER, &[])),
            None,
            "nothing to release"
        );
        let ev = release_event(
            &["198.51.100.1".into()],
            &namespace_deleted("ferrolb-system"),
        );
        assert!(!ev.warning);
        assert_eq!(ev.reason, "IPReleased");
        assert_eq!(
            ev.message,
            "released 198.51.100.1: ferrolb is being uninstalled (its namespace ferrolb-system is being deleted)"
        );
    }
}
