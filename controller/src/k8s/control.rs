//! The executor of the control loop: on every change (and on a slow resync tick) it takes a
//! [`Snapshot`] of the watch stores, asks the [`Planner`] what to write, and applies the plan —
//! Service statuses first, then Events, then pool statuses — each write bounded by
//! [`WRITE_TIMEOUT`]. Level-triggered: what is written depends on the stores, not on which event
//! woke the loop. All decisions are in [`crate::plan`] (pure, tested without an API server).
//!
//! After the plan, the leader deletes the speakers' stale `L2Announcement` reports
//! ([`crate::announcements`], issue #27 item 5: the speakers may not delete them).
//!
//! Only the leader runs passes and writes (R13). Becoming leader starts from a fresh planner, so
//! the table is rebuilt from the statuses on the Services before anything is handed out (R1).
//! A status that another field manager keeps rewriting is written at most 3 times per spec, then
//! left alone with one Warning Event (R8, [`crate::contest`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_runtime::events::Publisher;
use futures::StreamExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Client;
use tokio::sync::{Notify, watch};
use tracing::Instrument;

use crate::contest;
use crate::k8s::stores::Stores;
use crate::k8s::writer::{apply_pool_status, apply_service_status, publish};
use crate::metrics::{ManagerLabels, Metrics, ReasonLabels};
use crate::plan::{Plan, Planner, Snapshot, StatusWrite, Tally};
use crate::service::{ClassConfig, key_of};

/// Longest wait for one API write (status, Event, pool status). A write that takes longer is
/// abandoned and counts as failed; the pass is retried 2 s later. Keeps a hung API server from
/// stalling the loop (and the leader's other Services) forever.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

/// Everything the loop needs.
pub struct Control {
    /// API client.
    pub client: Client,
    /// Class selection.
    pub class: ClassConfig,
    /// The watched objects.
    pub stores: Stores,
    /// Woken by the watches.
    pub wake: Arc<Notify>,
    /// Leadership.
    pub leader: watch::Receiver<bool>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Event publisher (bounded recorder cache, byte-limited notes).
    pub recorder: Publisher,
    /// Safety-net resync period.
    pub resync: Duration,
    /// Concurrent writes.
    pub concurrency: usize,
    /// When to stop writing a status another field manager keeps rewriting (R8).
    pub contest: contest::Policy,
    /// The namespace of the speakers' `L2Announcement` reports.
    pub announcement_namespace: String,
}

impl Control {
    /// Runs until the process ends.
    pub async fn run(mut self) {
        let mut state: Option<Planner> = None;
        let mut passes: u64 = 0;
        // The resync tick makes the next pass look at every Service, not only the changed ones.
        let mut full = false;
        let mut resync = tokio::time::interval(self.resync);
        resync.tick().await;
        loop {
            let leading = *self.leader.borrow_and_update();
            self.metrics.leader.set(i64::from(leading));
            if leading {
                let st = state.get_or_insert_with(|| {
                    tracing::info!(
                        "leading: rebuilding the allocation table from Service statuses"
                    );
                    Planner::new(self.class.clone(), self.contest)
                });
                if std::mem::take(&mut full) {
                    st.resync();
                }
                let started = Instant::now();
                passes = passes.wrapping_add(1);
                // One span per pass: every log line of the pass (and of its writes) carries
                // `reconcile{pass=N}`.
                let retry = self
                    .pass(st)
                    .instrument(tracing::info_span!("reconcile", pass = passes))
                    .await;
                self.metrics
                    .reconcile_seconds
                    .observe(started.elapsed().as_secs_f64());
                if retry {
                    let wake = self.wake.clone();
                    tokio::spawn(async move {
                        tokio::time::sleep(Duration::from_secs(2)).await;
                        wake.notify_one();
                    });
                }
            } else {
                if state.take().is_some() {
                    tracing::info!("no longer leading: standing by with warm caches");
                    self.metrics.status_contested.set(0);
                    self.metrics.set_pending(&std::collections::BTreeMap::new());
                    // Only the leader reports pools (a standby's numbers would go stale).
                    self.metrics.set_pools(&[]);
                }
                // A standby reads the Services again, as the leader does, when the pools name a
                // new label: its caches are warm when it takes over (the read wakes this loop).
                self.stores
                    .services
                    .prepare(&self.stores.service_label_keys());
            }
            // A contested Service is tried again when its backoff ends (R8); never sooner than
            // a second from now, so a stale deadline cannot spin the loop.
            let retry_at = state
                .as_ref()
                .and_then(Planner::next_retry)
                .map(|t| t.max(Instant::now() + Duration::from_secs(1)));
            let backoff_ends = async move {
                match retry_at {
                    Some(t) => tokio::time::sleep_until(t.into()).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = backoff_ends => {}
                _ = self.wake.notified() => {
                    // Coalesce a burst of watch events into one pass.
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                _ = resync.tick() => full = true,
                changed = self.leader.changed() => {
                    if changed.is_err() {
                        tracing::warn!("leader election ended; stopping writes");
                        return;
                    }
                }
            }
        }
    }

    /// One pass. Returns whether a write failed (retry soon).
    async fn pass(&self, planner: &mut Planner) -> bool {
        let pools = self.stores.pools.state();
        let keys = crate::service_labels::selector_label_keys(pools.iter().map(AsRef::as_ref));
        let Some(services) = self.stores.services.state(&keys) else {
            // The Services are being read again with a label a pool's selector now reads: no
            // pass until they are in (the read wakes the loop).
            return false;
        };
        let snap = Snapshot {
            services,
            pools,
            l2: self.stores.l2.state(),
            nodes: self.stores.nodes.state(),
            namespaces: self.stores.namespaces.state(),
            conflict_events: self.stores.conflicts.state(),
            reports: self.stores.announcements.state(),
        };
        let wall = Time(
            k8s_openapi::jiff::Timestamp::from_second(
                k8s_openapi::jiff::Timestamp::now().as_second(),
            )
            .unwrap_or_default(),
        );
        let plan = planner.plan(&snap, Instant::now(), &wall);
        self.record(&plan.tally);
        let failed = self.execute(planner, plan).await;
        if self.stores.announcements_ready() {
            let stale = crate::announcements::stale(
                &self.stores.announcements.state(),
                &snap.services,
                &snap.nodes,
                &self.class,
            );
            self.delete_stale(stale).await;
        }
        failed
    }

    /// Deletes stale reports, each with its `resourceVersion` as precondition; gone already or
    /// changed since (a speaker rewrote it) is not an error: the next pass decides again.
    async fn delete_stale(&self, stale: Vec<crate::announcements::Stale>) {
        let api: kube::Api<ferrolb_crds::L2Announcement> =
            kube::Api::namespaced(self.client.clone(), &self.announcement_namespace);
        for s in stale {
            if !*self.leader.borrow() {
                return;
            }
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    resource_version: s.resource_version.clone(),
                    uid: None,
                }),
                ..kube::api::DeleteParams::default()
            };
            match tokio::time::timeout(WRITE_TIMEOUT, api.delete(&s.name, &params)).await {
                Ok(Ok(_)) => {
                    tracing::info!(announcement = %s.name, why = %s.why, "deleted a stale L2Announcement");
                }
                Ok(Err(kube::Error::Api(e))) if e.code == 404 || e.code == 409 => {}
                Ok(Err(e)) => {
                    tracing::warn!(announcement = %s.name, error = %e, "could not delete a stale L2Announcement");
                }
                Err(_) => {
                    tracing::warn!(announcement = %s.name, "deleting a stale L2Announcement timed out")
                }
            }
        }
    }

    /// Metrics from a pass's tallies.
    fn record(&self, tally: &Tally) {
        let m = &self.metrics;
        m.allocations.inc_by(tally.allocations);
        m.releases.inc_by(tally.releases);
        for reason in &tally.failures {
            m.failures
                .get_or_create(&ReasonLabels {
                    reason: (*reason).into(),
                })
                .inc();
        }
        for manager in &tally.conflicts {
            tracing::warn!(
                manager = %manager,
                "a status keeps being overwritten by another field manager; backing off"
            );
            m.status_conflicts
                .get_or_create(&ManagerLabels {
                    manager: manager.clone(),
                })
                .inc();
        }
        m.status_contested
            .set(i64::try_from(tally.contested).unwrap_or(i64::MAX));
        m.set_pending(&tally.pending);
        m.set_pools(&tally.pools);
    }

    /// Applies a plan: statuses (concurrently), then Events, then pool statuses, each write
    /// bounded by [`WRITE_TIMEOUT`]; successful status writes are reported to the planner.
    /// Returns whether any status write failed.
    async fn execute(&self, planner: &mut Planner, plan: Plan) -> bool {
        let Plan {
            statuses,
            events,
            pools,
            ..
        } = plan;
        let results: Vec<(StatusWrite, bool)> = futures::stream::iter(statuses)
            .map(|w| async move {
                let key = key_of(&w.service);
                if !*self.leader.borrow() {
                    return (w, false);
                }
                let write = apply_service_status(&self.client, &key.namespace, &key.name, &w.ips);
                let ok = match tokio::time::timeout(WRITE_TIMEOUT, write).await {
                    Ok(Ok(_)) => true,
                    Ok(Err(kube::Error::Api(e))) if e.code == 404 => true,
                    Ok(Err(e)) => {
                        tracing::warn!(service = %key, error = %e, "status write failed");
                        false
                    }
                    Err(_) => {
                        tracing::warn!(service = %key, "status write timed out");
                        false
                    }
                };
                (w, ok)
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        let mut failed = false;
        for (w, ok) in results {
            if ok {
                self.metrics.status_writes.inc();
                planner.status_written(&w);
            } else {
                failed = true;
            }
        }
        futures::stream::iter(events)
            .for_each_concurrent(self.concurrency.max(1), |(svc, ev)| async move {
                tracing::info!(service = %key_of(&svc), reason = ev.reason, message = %ev.message, "event");
                if tokio::time::timeout(WRITE_TIMEOUT, publish(&self.recorder, &svc, &ev))
                    .await
                    .is_err()
                {
                    tracing::warn!(service = %key_of(&svc), reason = ev.reason, "Event write timed out");
                }
            })
            .await;
        for (name, status) in pools {
            if !*self.leader.borrow() {
                break;
            }
            match tokio::time::timeout(
                WRITE_TIMEOUT,
                apply_pool_status(&self.client, &name, &status),
            )
            .await
            {
                Ok(Ok(_)) => {}
                Ok(Err(e)) => tracing::warn!(pool = %name, error = %e, "pool status write failed"),
                Err(_) => tracing::warn!(pool = %name, "pool status write timed out"),
            }
        }
        failed
    }
}
