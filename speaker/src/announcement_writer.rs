//! The `L2Announcement` executor (issue #12 part 2): applies the [`Op`]s of
//! [`crate::announcements::AnnouncementPlanner`] off the data path, like the Event writer
//! ([`crate::event_sink`]): [`AnnouncementWriter::send`] never waits; one task writes with a
//! per-write timeout; a newer op for the same object replaces a queued one; the queue is bounded
//! (oldest dropped first). A failed write is simply retried by the planner
//! ([`crate::announcements::RETRY_AFTER`]). Outcomes are counted for `/metrics`
//! (`ferrolb_speaker_announcement_writes_total{outcome}`).
//!
//! Writes: server-side apply with field manager [`FIELD_MANAGER`], forced (a new owner takes
//! over the fields the previous one wrote), of objects naming this node only. No deletes: the
//! speaker's Role grants none and the controller removes stale objects (issue #27 item 5); the
//! admission policy `deploy/speaker-admission.yaml` denies a write naming another node, which is
//! counted as failed like any other refused write.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_crds::announcement::MembershipReport;
use ferrolb_crds::{L2Announcement, L2AnnouncementSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Patch, PatchParams};
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
    /// Writes that failed or timed out (retried by the planner).
    pub failed: AtomicU64,
    /// Ops dropped from a full queue.
    pub dropped: AtomicU64,
}

/// Queued ops: one per object name, in first-queued order (replacing a queued op keeps its
/// place). O(log n) per op, so a cold start with thousands of IPs costs no quadratic scan.
#[derive(Default)]
struct Queue {
    order: VecDeque<String>,
    ops: BTreeMap<String, Op>,
}

impl Queue {
    fn push(&mut self, op: Op, counters: &WriteCounters) {
        let name = op.name().to_owned();
        if let Some(queued) = self.ops.get_mut(&name) {
            *queued = op;
            return;
        }
        while self.ops.len() >= CAPACITY {
            let Some(oldest) = self.order.pop_front() else {
                break;
            };
            if self.ops.remove(&oldest).is_some() {
                counters.dropped.fetch_add(1, Ordering::Relaxed);
            }
        }
        self.order.push_back(name.clone());
        self.ops.insert(name, op);
    }

    fn pop(&mut self) -> Option<Op> {
        while let Some(name) = self.order.pop_front() {
            if let Some(op) = self.ops.remove(&name) {
                return Some(op);
            }
        }
        None
    }
}

struct Shared {
    queue: Mutex<Queue>,
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
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
            counters,
        });
        let worker = shared.clone();
        let api: Api<L2Announcement> = Api::namespaced(client, namespace);
        let handle = tokio::spawn(async move {
            let mut last_warning: Option<std::time::Instant> = None;
            loop {
                let next = worker.queue.lock().unwrap_or_else(|e| e.into_inner()).pop();
                let Some(op) = next else {
                    worker.wake.notified().await;
                    continue;
                };
                write(&api, &worker.counters, op, &mut last_warning).await;
            }
        });
        (AnnouncementWriter { shared }, handle)
    }

    /// Queues `op`, replacing a queued op for the same object. Never waits.
    pub fn send(&self, op: Op) {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(op, &self.shared.counters);
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

/// At most one warning per this period about failed writes (e.g. the CRD or the namespace is
/// missing: every IP would fail every 10 s); the rest are debug lines, all counted.
const WARN_EVERY: Duration = Duration::from_secs(60);

async fn write(
    api: &Api<L2Announcement>,
    counters: &WriteCounters,
    op: Op,
    last_warning: &mut Option<std::time::Instant>,
) {
    let name = op.name().to_owned();
    let result = match op {
        Op::Apply {
            name,
            ip,
            node,
            interfaces,
            services,
            since,
            held_by,
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
                    held_by,
                    membership: None,
                    networks: Vec::new(),
                    in_use: Vec::new(),
                    unanswered: Vec::new(),
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
        Op::Members {
            name,
            node,
            members,
            networks,
            in_use,
            unanswered,
        } => {
            // A node's membership report: no IP, no interfaces or Services (docs/design.md,
            // "Membership reports").
            let object = L2Announcement::new(
                &name,
                L2AnnouncementSpec {
                    ip: String::new(),
                    node,
                    interfaces: Vec::new(),
                    services: Vec::new(),
                    since: None,
                    held_by: None,
                    membership: Some(MembershipReport {
                        members,
                        observed: now(),
                    }),
                    networks,
                    in_use,
                    unanswered,
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
    };
    let error = match result {
        Ok(Ok(counter)) => {
            counter.fetch_add(1, Ordering::Relaxed);
            return;
        }
        Ok(Err(e)) => e.to_string(),
        Err(_) => format!("timed out after {WRITE_TIMEOUT:?}"),
    };
    counters.failed.fetch_add(1, Ordering::Relaxed);
    let now = std::time::Instant::now();
    if last_warning.is_none_or(|at| now.saturating_duration_since(at) >= WARN_EVERY) {
        *last_warning = Some(now);
        tracing::warn!(object = %name, %error, "could not write the L2Announcement (retried; further failures for a minute are logged at debug level and counted in announcement_writes_total{{outcome=\"failed\"}})");
    } else {
        tracing::debug!(object = %name, %error, "could not write the L2Announcement");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn apply(name: &str, node: &str) -> Op {
        Op::Apply {
            name: name.into(),
            ip: std::net::IpAddr::from([198, 51, 100, 10]),
            node: node.into(),
            interfaces: vec!["eth0".into()],
            services: vec![],
            since: None,
            held_by: None,
        }
    }

    #[test]
    fn a_newer_op_replaces_a_queued_one_in_place_and_the_queue_is_bounded() {
        let counters = WriteCounters::default();
        let mut q = Queue::default();
        q.push(apply("a", "n1"), &counters);
        q.push(apply("b", "n1"), &counters);
        q.push(apply("a", "n2"), &counters);
        assert_eq!(q.pop(), Some(apply("a", "n2")));
        assert_eq!(q.pop(), Some(apply("b", "n1")));
        assert_eq!(q.pop(), None);
        for i in 0..CAPACITY + 3 {
            q.push(apply(&format!("ip-{i}"), "n1"), &counters);
        }
        assert_eq!(counters.dropped.load(Ordering::Relaxed), 3);
        assert_eq!(q.pop(), Some(apply("ip-3", "n1")), "oldest dropped first");
    }
}
