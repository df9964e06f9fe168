//! The `L2Announcement` executor (issue #12 part 2): applies the [`Op`]s of
//! [`crate::announcements::AnnouncementPlanner`] off the data path, like the Event writer
//! ([`crate::event_sink`]): [`AnnouncementWriter::send`] never waits; one task writes with a
//! per-write timeout; a newer op for the same object replaces a queued one; the queue is bounded
//! (oldest dropped first). A failed write is simply retried by the planner
//! ([`crate::announcements::RETRY_AFTER`]). Outcomes are counted for `/metrics`
//! (`ferrolb_speaker_announcement_writes_total{outcome}`).
//!
//! Writes: server-side apply with field manager [`FIELD_MANAGER`], forced (a new owner takes
//! over the fields the previous one wrote); deletes with a `resourceVersion` precondition (a
//! conflict or a missing object is someone else's newer write, not an error).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_crds::{L2Announcement, L2AnnouncementSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Client};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::announcements::Op;

/// The field manager of the speakers' writes.
pub const FIELD_MANAGER: &str = "ferrolb-speaker";
/// Most ops waiting (one per object). Oldest dropped first.
pub const CAPACITY: usize = 4096;
/// Longest wait for one write.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(5);

/// Outcomes, for `/metrics`.
#[derive(Debug, Default)]
pub struct WriteCounters {
    /// Objects applied.
    pub applied: AtomicU64,
    /// Objects deleted (or found already gone / changed: someone else's newer write).
    pub deleted: AtomicU64,
    /// Writes that failed or timed out (retried by the planner).
    pub failed: AtomicU64,
    /// Ops dropped from a full queue.
    pub dropped: AtomicU64,
}

struct Shared {
    queue: Mutex<VecDeque<Op>>,
    wake: Notify,
    counters: Arc<WriteCounters>,
}

/// The sending side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct AnnouncementWriter {
    shared: Arc<Shared>,
}

impl AnnouncementWriter {
    /// Starts the writer task for objects in `namespace` on the current Tokio runtime.
    pub fn spawn(
        client: Client,
        namespace: &str,
        counters: Arc<WriteCounters>,
    ) -> (AnnouncementWriter, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            counters,
        });
        let worker = shared.clone();
        let api: Api<L2Announcement> = Api::namespaced(client, namespace);
        let handle = tokio::spawn(async move {
            loop {
                let next = worker
                    .queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front();
                let Some(op) = next else {
                    worker.wake.notified().await;
                    continue;
                };
                write(&api, &worker.counters, op).await;
            }
        });
        (AnnouncementWriter { shared }, handle)
    }

    /// Queues `op`, replacing a queued op for the same object. Never waits.
    pub fn send(&self, op: Op) {
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(queued) = queue.iter_mut().find(|q| q.name() == op.name()) {
                *queued = op;
            } else {
                if queue.len() >= CAPACITY {
                    queue.pop_front();
                    self.shared.counters.dropped.fetch_add(1, Ordering::Relaxed);
                }
                queue.push_back(op);
            }
        }
        self.shared.wake.notify_one();
    }
}

/// `now` as an API timestamp (whole seconds).
fn now() -> Time {
    Time(
        k8s_openapi::jiff::Timestamp::from_second(k8s_openapi::jiff::Timestamp::now().as_second())
            .unwrap_or_default(),
    )
}

async fn write(api: &Api<L2Announcement>, counters: &WriteCounters, op: Op) {
    let name = op.name().to_owned();
    let result = match op {
        Op::Apply {
            name,
            ip,
            node,
            interfaces,
            services,
            since,
        } => {
            let since = since
                .and_then(|s| s.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .map_or_else(now, Time);
            let object = L2Announcement::new(
                &name,
                L2AnnouncementSpec {
                    ip: ip.to_string(),
                    node,
                    interfaces,
                    services,
                    since: Some(since),
                },
            );
            let params = PatchParams::apply(FIELD_MANAGER).force();
            tokio::time::timeout(
                WRITE_TIMEOUT,
                api.patch(&name, &params, &Patch::Apply(&object)),
            )
            .await
            .map(|r| r.map(|_| &counters.applied))
        }
        Op::Delete {
            name,
            resource_version,
        } => {
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    resource_version,
                    uid: None,
                }),
                ..DeleteParams::default()
            };
            tokio::time::timeout(WRITE_TIMEOUT, api.delete(&name, &params))
                .await
                .map(|r| match r {
                    Ok(_) => Ok(&counters.deleted),
                    // Gone already, or changed since: another writer was first.
                    Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                        Ok(&counters.deleted)
                    }
                    Err(e) => Err(e),
                })
        }
    };
    match result {
        Ok(Ok(counter)) => {
            counter.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Err(e)) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(object = %name, error = %e, "could not write the L2Announcement; retrying later");
        }
        Err(_) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(object = %name, timeout = ?WRITE_TIMEOUT, "L2Announcement write timed out; retrying later");
        }
    }
}
