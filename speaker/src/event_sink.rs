//! The Event executor (issue #8 F2, DESIGN S11: the API server is never on the data path).
//!
//! The daemon hands [`EventIntent`]s to [`EventSink::send`], which never waits: intents go into
//! a bounded queue and one task writes them with a per-write timeout. While the API server is
//! slow, hung or unreachable, taking over and withdrawing IPs goes on at full speed; Events
//! queue up to [`EventSinkConfig::capacity`] and are then dropped oldest first, and a newer
//! statement about the same Service and reason replaces a queued one (coalescing). A write that
//! fails or times out is tried again, up to [`WRITE_ATTEMPTS`] times in all, after the Events
//! queued behind it and a [`RETRY_PAUSE`] (a statement made once — e.g. `KernelAnswersARP`, sent
//! when the condition is first found — is not lost to one slow write while the API server is
//! busy). Every outcome is counted ([`EventCounters`], exported on `/metrics`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ferrolb_runtime::events::Publisher;
use k8s_openapi::api::core::v1::{ObjectReference, Service};
use kube::Resource;
use kube::runtime::events::{Event, EventType};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::events::{EventIntent, Severity};
use crate::watch::Stores;

/// Writes of one Event, the first included, before it is given up (counted `failed` each time).
pub const WRITE_ATTEMPTS: u32 = 3;

/// The writer's pause after a failed write, before the next one.
pub const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// Queue and timeout settings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventSinkConfig {
    /// Most Events waiting to be written (one per Service and statement). Default 1024.
    pub capacity: usize,
    /// Longest wait for one Event write before it is counted as failed (and tried again, up to
    /// [`WRITE_ATTEMPTS`] writes in all).
    /// Default 5 s.
    pub write_timeout: Duration,
}

impl Default for EventSinkConfig {
    fn default() -> Self {
        EventSinkConfig {
            capacity: 1024,
            write_timeout: Duration::from_secs(5),
        }
    }
}

/// What happened to Events, for `/metrics` (`ferrolb_speaker_events_total{outcome}`).
#[derive(Debug, Default)]
pub struct EventCounters {
    /// Written to the API server.
    pub published: AtomicU64,
    /// The write failed or timed out.
    pub failed: AtomicU64,
    /// Dropped because the queue was full.
    pub dropped: AtomicU64,
    /// Replaced in the queue by a newer statement about the same Service and reason.
    pub coalesced: AtomicU64,
}

/// What an Event is about.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// A Service, `namespace/name`.
    Service(String),
    /// A Node, by name (this speaker's own: membership reports).
    Node(String),
}

#[derive(Debug)]
struct Pending {
    target: Target,
    severity: Severity,
    reason: &'static str,
    note: String,
    /// Writes tried so far.
    attempts: u32,
}

struct Shared {
    queue: Mutex<VecDeque<Pending>>,
    wake: Notify,
    counters: Arc<EventCounters>,
    capacity: usize,
}

/// The sending side: cheap to clone, never blocks.
#[derive(Clone)]
pub struct EventSink {
    shared: Arc<Shared>,
}

impl EventSink {
    /// Starts the writer task on the current Tokio runtime. `stores` resolves Service keys to
    /// object references at write time (an Event about a Service deleted meanwhile is skipped).
    pub fn spawn(
        recorder: Publisher,
        stores: Stores,
        config: EventSinkConfig,
        counters: Arc<EventCounters>,
    ) -> (EventSink, JoinHandle<()>) {
        let shared = Arc::new(Shared {
            queue: Mutex::new(VecDeque::new()),
            wake: Notify::new(),
            counters,
            capacity: config.capacity.max(1),
        });
        let worker = shared.clone();
        let handle = tokio::spawn(async move {
            loop {
                let next = worker
                    .queue
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front();
                let Some(p) = next else {
                    worker.wake.notified().await;
                    continue;
                };
                let retry = write(&recorder, &stores, &config, &worker.counters, p).await;
                if let Some(mut p) = retry {
                    p.attempts += 1;
                    if p.attempts < WRITE_ATTEMPTS {
                        let mut queue = worker.queue.lock().unwrap_or_else(|e| e.into_inner());
                        requeue(&mut queue, p, worker.capacity);
                    }
                    tokio::time::sleep(RETRY_PAUSE).await;
                }
            }
        });
        (EventSink { shared }, handle)
    }

    /// Queues `intent` (one Event per Service in it). Never waits.
    pub fn send(&self, intent: EventIntent) {
        tracing::info!(reason = intent.reason, note = %intent.note, "event");
        for service in intent.services {
            self.queue(Pending {
                target: Target::Service(service),
                severity: intent.severity,
                reason: intent.reason,
                note: intent.note.clone(),
                attempts: 0,
            });
        }
        self.shared.wake.notify_one();
    }

    /// Queues one Event about the Node `node` (e.g. a membership mismatch this speaker
    /// found, issue #32 G5.4), coalesced with a queued one of the same reason. Never waits.
    pub fn send_about_node(
        &self,
        node: &str,
        severity: Severity,
        reason: &'static str,
        note: String,
    ) {
        tracing::info!(reason, %note, "event");
        self.queue(Pending {
            target: Target::Node(node.to_owned()),
            severity,
            reason,
            note,
            attempts: 0,
        });
        self.shared.wake.notify_one();
    }

    fn queue(&self, pending: Pending) {
        let counters = &self.shared.counters;
        let mut queue = self.shared.queue.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(queued) = queue
            .iter_mut()
            .find(|p| p.target == pending.target && p.reason == pending.reason)
        {
            queued.note = pending.note;
            queued.severity = pending.severity;
            counters.coalesced.fetch_add(1, Ordering::Relaxed);
            return;
        }
        if queue.len() >= self.shared.capacity {
            queue.pop_front();
            counters.dropped.fetch_add(1, Ordering::Relaxed);
        }
        queue.push_back(pending);
    }

    /// Events waiting to be written.
    pub fn queued(&self) -> usize {
        self.shared
            .queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }
}

/// Puts a failed write back at the end of `queue`, unless a newer statement about the same
/// target and reason is already queued (it says more) or the queue is full (the new Events win).
fn requeue(queue: &mut VecDeque<Pending>, p: Pending, capacity: usize) {
    let newer = queue
        .iter()
        .any(|q| q.target == p.target && q.reason == p.reason);
    if !newer && queue.len() < capacity {
        queue.push_back(p);
    }
}

/// Writes one Event; returns it when the write failed or timed out (to be tried again).
async fn write(
    recorder: &Publisher,
    stores: &Stores,
    config: &EventSinkConfig,
    counters: &EventCounters,
    p: Pending,
) -> Option<Pending> {
    let reference = match &p.target {
        Target::Service(key) => {
            // A Service deleted meanwhile: nothing to say, nothing to retry.
            let svc = stores.service(key)?;
            Service::object_ref(&svc, &())
        }
        // As the kubelet does for its Node's Events: the uid is the Node's name.
        Target::Node(name) => ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(name.clone()),
            uid: Some(name.clone()),
            ..ObjectReference::default()
        },
    };
    let about = match &p.target {
        Target::Service(key) => key.as_str(),
        Target::Node(name) => name.as_str(),
    };
    let event = Event {
        type_: match p.severity {
            Severity::Normal => EventType::Normal,
            Severity::Warning => EventType::Warning,
        },
        reason: p.reason.into(),
        note: Some(p.note.clone()),
        action: "Announce".into(),
        secondary: None,
    };
    match tokio::time::timeout(config.write_timeout, recorder.publish(&event, &reference)).await {
        Ok(Ok(())) => {
            counters.published.fetch_add(1, Ordering::Relaxed);
            None
        }
        Ok(Err(e)) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%about, error = %e, attempt = p.attempts + 1, "could not publish Event");
            Some(p)
        }
        Err(_) => {
            counters.failed.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(%about, timeout = ?config.write_timeout, attempt = p.attempts + 1, "Event write timed out");
            Some(p)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(target: &str, reason: &'static str, note: &str) -> Pending {
        Pending {
            target: Target::Service(target.into()),
            severity: Severity::Warning,
            reason,
            note: note.into(),
            attempts: 1,
        }
    }

    #[test]
    fn a_failed_write_goes_back_behind_the_queued_events() {
        let mut queue = VecDeque::from([pending("ns/b", "KernelAnswersARP", "b")]);
        requeue(&mut queue, pending("ns/a", "KernelAnswersARP", "a"), 8);
        let order: Vec<&str> = queue.iter().map(|p| p.note.as_str()).collect();
        assert_eq!(order, ["b", "a"]);
    }

    #[test]
    fn a_newer_statement_about_the_same_service_and_reason_replaces_the_retry() {
        let mut queue = VecDeque::from([pending("ns/a", "KernelAnswersARP", "newer")]);
        requeue(&mut queue, pending("ns/a", "KernelAnswersARP", "older"), 8);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue[0].note, "newer");
        // Another reason about the same Service is its own statement.
        requeue(&mut queue, pending("ns/a", "IPConflict", "other"), 8);
        assert_eq!(queue.len(), 2);
    }

    #[test]
    fn a_full_queue_keeps_its_events_and_drops_the_retry() {
        let mut queue = VecDeque::from([pending("ns/b", "AnnouncingIP", "b")]);
        requeue(&mut queue, pending("ns/a", "KernelAnswersARP", "a"), 1);
        assert_eq!(queue.len(), 1);
        assert_eq!(queue[0].note, "b");
    }
}
