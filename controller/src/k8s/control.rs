//! The control loop: on every change (and on a slow resync tick), read the stores as a whole,
//! feed the allocator, run one reconcile pass and write what differs: Service status, Events,
//! pool status. Level-triggered: what is written depends on the stores, not on which event woke
//! the loop.
//!
//! Only the leader runs passes and writes (R13). Becoming leader starts from a fresh allocator,
//! so the table is rebuilt from the statuses on the Services before anything is handed out (R1).
//! A Service whose status already matches is never written (zero writes at start-up). A write we
//! just made is not repeated while the store still shows the object version we wrote over.
//!
//! A status that another field manager keeps rewriting is written at most 3 times per spec, then
//! left alone with one Warning Event (R8, [`crate::contest`]); the address stays reserved.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::runtime::events::Recorder;
use kube::{Client, ResourceExt};
use tokio::sync::{Notify, watch};

use ferrolb_crds::addresses::Family;
use ferrolb_crds::ownership::creation_seconds;

use crate::contest::{self, Contests, STATUS_WRITE_CONFLICT, Verdict, conflict_message};
use crate::ipam::{Gone, Ipam, Note, PoolConfig, ServiceKey};
use crate::k8s::stores::Stores;
use crate::k8s::writer::{
    EventSpec, apply_pool_status, apply_service_status, event_for, failure_label, publish,
};
use crate::metrics::{ManagerLabels, Metrics, PoolLabels, ReasonLabels};
use crate::pool_status::pool_status;
use crate::service::{
    ClassConfig, Classified, classify, key_of, spec_digest, status_matches, status_writer,
    we_own_ingress,
};

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
    /// Event recorder.
    pub recorder: Recorder,
    /// Safety-net resync period.
    pub resync: Duration,
    /// Concurrent writes.
    pub concurrency: usize,
    /// When to stop writing a status another field manager keeps rewriting (R8).
    pub contest: contest::Policy,
}

/// A status write: the Service as seen, the addresses, and the spec digest when the write counts
/// toward the write-war bound (`None` for releases).
type StatusWrite = (Arc<Service>, Vec<IpAddr>, Option<u64>);

/// Writes collected during a pass.
#[derive(Default)]
struct Writes {
    statuses: Vec<StatusWrite>,
    events: Vec<(Arc<Service>, EventSpec)>,
}

/// State kept across passes while leading.
#[derive(Default)]
struct Leading {
    ipam: Ipam,
    /// Service → (resourceVersion we wrote over, what we wrote).
    written: HashMap<ServiceKey, (Option<String>, Vec<IpAddr>)>,
    /// Service → annotation warnings already published.
    warned: HashMap<ServiceKey, Vec<String>>,
    /// Our status writes per Service, against another writer's (R8).
    contests: Contests,
}

impl Control {
    /// Runs until the process ends.
    pub async fn run(mut self) {
        let mut state: Option<Leading> = None;
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
                    Leading {
                        contests: Contests::new(self.contest),
                        ..Leading::default()
                    }
                });
                let started = Instant::now();
                let retry = self.pass(st).await;
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
            } else if state.take().is_some() {
                tracing::info!("no longer leading: standing by with warm caches");
                self.metrics.status_contested.set(0);
            }
            // A contested Service is tried again when its backoff ends (R8); never sooner than
            // a second from now, so a stale deadline cannot spin the loop.
            let retry_at = state
                .as_ref()
                .and_then(|s| s.contests.next_retry())
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
                _ = resync.tick() => {}
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
    async fn pass(&self, st: &mut Leading) -> bool {
        let services = self.stores.services.state();
        let by_key: BTreeMap<ServiceKey, Arc<Service>> =
            services.iter().map(|s| (key_of(s), s.clone())).collect();
        self.feed_cluster(&mut st.ipam);

        let mut writes = Writes::default();
        let mut ours: BTreeSet<ServiceKey> = BTreeSet::new();
        let mut releases: Vec<Arc<Service>> = Vec::new();
        for svc in &services {
            let key = key_of(svc);
            match classify(svc, &self.class) {
                Classified::Ours(req, warnings) => {
                    if !warnings.is_empty() && st.warned.get(&key) != Some(&warnings) {
                        for w in &warnings {
                            writes.events.push((
                                svc.clone(),
                                EventSpec {
                                    warning: true,
                                    reason: "AnnotationConflict",
                                    message: w.clone(),
                                },
                            ));
                        }
                    }
                    st.warned.insert(key.clone(), warnings);
                    st.ipam.upsert_service(*req);
                    ours.insert(key);
                }
                Classified::NotLoadBalancer | Classified::OtherClass => {
                    if we_own_ingress(svc) {
                        releases.push(svc.clone());
                    }
                }
            }
        }
        let known: Vec<ServiceKey> = st.ipam.services().map(|s| s.key.clone()).collect();
        for key in known.into_iter().filter(|k| !ours.contains(k)) {
            st.warned.remove(&key);
            match by_key.get(&key) {
                Some(svc) => {
                    let freed = st.ipam.remove_service(&key, Gone::NotHandled);
                    if !freed.is_empty() {
                        self.metrics.releases.inc();
                        writes.events.push((
                            svc.clone(),
                            event_for(&Note::Released {
                                ips: freed,
                                why: "the Service is no longer a LoadBalancer of this class".into(),
                            }),
                        ));
                    }
                }
                None => {
                    if !st.ipam.remove_service(&key, Gone::Deleted).is_empty() {
                        self.metrics.releases.inc();
                    }
                    st.written.remove(&key);
                }
            }
            st.contests.forget(&key);
        }

        let notes = st.ipam.reconcile();
        for n in &notes {
            match &n.note {
                Note::Allocated { ips, .. } => {
                    self.metrics.allocations.inc_by(ips.len() as u64);
                }
                Note::Reallocated { to, .. } => {
                    self.metrics.allocations.inc_by(to.len() as u64);
                }
                Note::Failed(f) => {
                    self.metrics
                        .failures
                        .get_or_create(&ReasonLabels {
                            reason: failure_label(f).into(),
                        })
                        .inc();
                }
                _ => {}
            }
            if let Some(svc) = by_key.get(&n.key) {
                let ev = event_for(&n.note);
                tracing::info!(service = %n.key, reason = ev.reason, message = %ev.message, "allocation");
                writes.events.push((svc.clone(), ev));
            }
        }

        let now = Instant::now();
        for key in &ours {
            let Some(svc) = by_key.get(key) else { continue };
            let ips = st.ipam.desired_ips(key);
            self.queue_status(st, svc, ips, Some(now), &mut writes);
        }
        for svc in releases {
            self.queue_status(st, &svc, Vec::new(), None, &mut writes);
        }
        self.metrics
            .status_contested
            .set(i64::try_from(st.contests.contested()).unwrap_or(i64::MAX));

        let failed = self.execute(st, writes).await;
        self.write_pools(&mut st.ipam).await;
        failed
    }

    /// Queues a status write if the status differs. `contested_at`: the time of the pass when the
    /// write is bounded by the write-war policy (R8), `None` for releases (which stop by
    /// themselves: another writer's forced apply takes the field from us, and we clear only a
    /// status we own).
    fn queue_status(
        &self,
        st: &mut Leading,
        svc: &Arc<Service>,
        ips: Vec<IpAddr>,
        contested_at: Option<Instant>,
        writes: &mut Writes,
    ) {
        let key = key_of(svc);
        if status_matches(svc, &ips) {
            st.contests.settled(&key);
            return;
        }
        if let Some((rv, wrote)) = st.written.get(&key)
            && *rv == svc.resource_version()
            && *wrote == ips
        {
            return; // our write is on its way back through the watch
        }
        let Some(now) = contested_at else {
            writes.statuses.push((svc.clone(), ips, None));
            return;
        };
        let spec = spec_digest(svc);
        match st.contests.assess(&key, spec, &ips, now) {
            Verdict::Write => writes.statuses.push((svc.clone(), ips, Some(spec))),
            Verdict::Hold { .. } => {}
            Verdict::BackOff {
                writes: ours, warn, ..
            } => {
                let manager = status_writer(svc);
                let label = manager.clone().unwrap_or_else(|| "unknown".into());
                self.metrics
                    .status_conflicts
                    .get_or_create(&ManagerLabels {
                        manager: label.clone(),
                    })
                    .inc();
                tracing::warn!(
                    service = %key,
                    manager = %label,
                    writes = ours,
                    "status keeps being overwritten by another field manager; backing off"
                );
                if warn {
                    let class_less = svc
                        .spec
                        .as_ref()
                        .is_none_or(|s| s.load_balancer_class.is_none());
                    writes.events.push((
                        svc.clone(),
                        EventSpec {
                            warning: true,
                            reason: STATUS_WRITE_CONFLICT,
                            message: conflict_message(
                                manager.as_deref(),
                                &ips,
                                ours,
                                st.contests.policy().backoff,
                                &self.class.lb_class,
                                class_less,
                            ),
                        },
                    ));
                }
            }
        }
    }

    /// Runs writes concurrently (statuses first, then Events). Returns whether any failed.
    async fn execute(&self, st: &mut Leading, writes: Writes) -> bool {
        let Writes { statuses, events } = writes;
        let mut failed = false;
        let results: Vec<(StatusWrite, bool)> = futures::stream::iter(statuses)
            .map(|(svc, ips, spec)| async move {
                let key = key_of(&svc);
                if !*self.leader.borrow() {
                    return ((svc, ips, spec), false);
                }
                let res = apply_service_status(&self.client, &key.namespace, &key.name, &ips).await;
                let ok = match res {
                    Ok(_) => true,
                    Err(kube::Error::Api(e)) if e.code == 404 => true,
                    Err(e) => {
                        tracing::warn!(service = %key, error = %e, "status write failed");
                        false
                    }
                };
                ((svc, ips, spec), ok)
            })
            .buffer_unordered(self.concurrency.max(1))
            .collect()
            .await;
        for ((svc, ips, spec), ok) in results {
            if ok {
                let key = key_of(&svc);
                self.metrics.status_writes.inc();
                if let Some(spec) = spec {
                    st.contests.wrote(&key, spec, &ips);
                }
                st.written.insert(key, (svc.resource_version(), ips));
            } else {
                failed = true;
            }
        }
        futures::stream::iter(events)
            .for_each_concurrent(self.concurrency.max(1), |(svc, ev)| async move {
                publish(&self.recorder, &svc, &ev).await;
            })
            .await;
        failed
    }

    /// Pools, Nodes and Namespaces from the stores into the allocator.
    fn feed_cluster(&self, ipam: &mut Ipam) {
        let pools = self.stores.pools.state();
        let names: BTreeSet<String> = pools.iter().map(|p| p.name_any()).collect();
        for p in &pools {
            let created = creation_seconds(&p.metadata);
            ipam.upsert_pool(PoolConfig::from_spec(&p.name_any(), created, &p.spec));
        }
        for name in ipam.pool_names() {
            if !names.contains(&name) {
                ipam.remove_pool(&name);
            }
        }
        let nodes = self.stores.nodes.state();
        ipam.set_nodes(ferrolb_crds::node::address_map(nodes.iter().map(|n| &**n)));
        let namespaces = self.stores.namespaces.state();
        let ns_names: BTreeSet<String> = namespaces.iter().map(|n| n.name_any()).collect();
        for ns in &namespaces {
            ipam.set_namespace(&ns.name_any(), ns.labels().clone());
        }
        for name in ipam.namespace_names() {
            if !ns_names.contains(&name) {
                ipam.remove_namespace(&name);
            }
        }
    }

    /// Pool status and gauges; writes only pools whose status differs.
    async fn write_pools(&self, ipam: &mut Ipam) {
        let now = Time(
            k8s_openapi::jiff::Timestamp::from_second(
                k8s_openapi::jiff::Timestamp::now().as_second(),
            )
            .unwrap_or_default(),
        );
        let l2 = self.stores.l2.state();
        let pools: BTreeMap<String, _> = self
            .stores
            .pools
            .state()
            .into_iter()
            .map(|p| (p.name_any(), p))
            .collect();
        for report in ipam.pool_reports() {
            for (family, assigned, available) in [
                (Family::V4, report.assigned_v4, report.available_v4),
                (Family::V6, report.assigned_v6, report.available_v6),
            ] {
                let labels = PoolLabels {
                    pool: report.name.clone(),
                    family: family.as_k8s().into(),
                };
                self.metrics
                    .pool_assigned
                    .get_or_create(&labels)
                    .set(ferrolb_crds::addresses::api_count(assigned));
                self.metrics
                    .pool_available
                    .get_or_create(&labels)
                    .set(ferrolb_crds::addresses::api_count(available));
            }
            let Some(pool) = pools.get(&report.name) else {
                continue;
            };
            let advertised = l2
                .iter()
                .any(|a| a.spec.covers_pool(&report.name, pool.labels()));
            let desired = pool_status(
                &report,
                advertised,
                pool.metadata.generation,
                pool.status.as_ref(),
                &now,
            );
            if pool.status.as_ref() == Some(&desired) || !*self.leader.borrow() {
                continue;
            }
            if let Err(e) = apply_pool_status(&self.client, &report.name, &desired).await {
                tracing::warn!(pool = %report.name, error = %e, "pool status write failed");
            }
        }
    }
}
