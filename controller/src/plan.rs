//! The controller's planner: a snapshot of the watched objects in, the writes that make the
//! cluster agree with the allocator out (Service status, Events, pool status) plus the tallies
//! the metrics show. Pure — no `kube`, no `tokio`, no clock of its own — so every controller rule
//! (R1–R14) can be tested by feeding objects and comparing writes (`controller/tests/planner.rs`),
//! in milliseconds and without an API server. [`crate::k8s::control`] is the executor: it takes
//! the snapshot from the watch stores, applies the [`Plan`] with timeouts, and reports the writes
//! that succeeded back through [`Planner::status_written`].
//!
//! State kept across passes (while leading): the allocator, the last status written per Service
//! (so a write on its way back through the watch is not repeated), the annotation warnings already
//! published, the write-war bookkeeping (R8, [`crate::contest`]), and the object each Service was
//! last planned from.
//!
//! A pass costs what changed (issue #9: 50,000 Services): a Service whose object is the one
//! planned last time (the watch store hands out a new `Arc` for every change) is not
//! re-translated, and its status is not re-compared unless the allocator changed its addresses,
//! a write of ours is still on its way, or it is contested. What stays O(Services) is a scan
//! comparing pointers. [`Planner::resync`] makes the next pass look at everything (the
//! executor's slow resync). A new leader starts from
//! a fresh [`Planner`]: the allocation table is rebuilt from the Services' statuses before anything
//! is handed out (R1).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{Namespace, Node, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

use ferrolb_crds::addresses::Family;
use ferrolb_crds::auto_pool::{AutoResolution, NodeNetworks};
use ferrolb_crds::ownership::creation_seconds;
use ferrolb_crds::{IPAddressPool, IPAddressPoolStatus, L2Advertisement, L2Announcement};

use crate::contest::{self, Contests, STATUS_WRITE_CONFLICT, Verdict, conflict_message};
use crate::events::{ANNOTATION_CONFLICT, EventSpec, event_for, failure_label};
use crate::ipam::{Gone, Ipam, Note, PoolConfig, ServiceKey};
use crate::pool_status::pool_status;
use crate::service::{
    ClassConfig, Classified, classify, key_of, spec_digest, status_matches, status_writer,
    we_own_ingress,
};

/// The watched objects at one instant.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    /// Every Service (all classes: the class is decided per object).
    pub services: Vec<Arc<Service>>,
    /// Every IPAddressPool.
    pub pools: Vec<Arc<IPAddressPool>>,
    /// Every L2Advertisement (a pool is `Ready` only if one covers it).
    pub l2: Vec<Arc<L2Advertisement>>,
    /// Every Node (their addresses are never handed out, R10).
    pub nodes: Vec<Arc<Node>>,
    /// Every Namespace (for namespace selectors).
    pub namespaces: Vec<Arc<Namespace>>,
    /// The speakers' `IPConflict` Events (pool condition `AddressConflict`,
    /// [`crate::conflicts`]).
    pub conflict_events: Vec<Arc<k8s_openapi::api::events::v1::Event>>,
    /// The speakers' `L2Announcement` reports; the node reports (`node-<node>`) give the node
    /// networks and the addresses in use that automatic pools are resolved from
    /// ([`ferrolb_crds::auto_pool`]). The IPs' reports are ignored here.
    pub reports: Vec<Arc<L2Announcement>>,
}

/// A status write: `status.loadBalancer.ingress` of `service` := `ips` (empty: release).
#[derive(Clone, Debug)]
pub struct StatusWrite {
    /// The Service as seen in the snapshot.
    pub service: Arc<Service>,
    /// The addresses, in the order of `spec.ipFamilies`.
    pub ips: Vec<IpAddr>,
    /// The spec digest when the write counts toward the write-war bound (R8); `None` for
    /// releases.
    pub spec: Option<u64>,
}

/// Counts for the metrics, per pass.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Tally {
    /// Addresses allocated (incl. re-allocations).
    pub allocations: u64,
    /// Services whose addresses were released.
    pub releases: u64,
    /// Allocation failures by metric label ([`failure_label`]).
    pub failures: Vec<&'static str>,
    /// Write wars detected, by the other field manager (`unknown` if unnamed).
    pub conflicts: Vec<String>,
    /// Services currently contested (R8).
    pub contested: usize,
    /// Services left without addresses after this pass, by failure label
    /// ([`crate::events::FAILURE_LABELS`]; a label absent here has none).
    pub pending: BTreeMap<&'static str, u64>,
    /// Per pool and family: `(pool, family, assigned, available)`.
    pub pools: Vec<(String, Family, u64, u64)>,
}

/// What one pass wants written.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Service status writes (statuses first: they are what users wait for).
    pub statuses: Vec<StatusWrite>,
    /// Events on Services.
    pub events: Vec<(Arc<Service>, EventSpec)>,
    /// Pool statuses that differ from the stored ones: `(pool name, status)`.
    pub pools: Vec<(String, IPAddressPoolStatus)>,
    /// Counts for the metrics.
    pub tally: Tally,
}

/// The decision state of the leader (see the module docs).
pub struct Planner {
    class: ClassConfig,
    ipam: Ipam,
    /// Service → (resourceVersion we wrote over, what we wrote).
    written: HashMap<ServiceKey, (Option<String>, Vec<IpAddr>)>,
    /// Service → annotation warnings already published.
    warned: HashMap<ServiceKey, Vec<String>>,
    /// Our status writes per Service, against another writer's (R8).
    contests: Contests,
    /// Service → what it was last planned from. A deleted Service's `IPReleased` Event (R14)
    /// refers to the last object held here.
    known: HashMap<ServiceKey, Known>,
    /// Services whose status did not match at their last check (a write on its way, failed, or
    /// held back by the write-war policy): checked again every pass until it matches.
    unsettled: BTreeSet<ServiceKey>,
    /// Pass counter: a [`Known`] not marked by the current pass is gone from the snapshot.
    pass: u64,
    /// Automatic pools (`spec.autoAddresses`) as resolved in this pass, by name.
    auto: BTreeMap<String, AutoResolution>,
}

/// The object a Service was last planned from.
struct Known {
    /// The object (the watch store's `Arc`: a change arrives as a new one).
    svc: Arc<Service>,
    /// Whether it is ours (`type: LoadBalancer` of our class).
    ours: bool,
    /// The last pass that saw it in the snapshot.
    pass: u64,
    /// Set by [`Planner::resync`]: translate it again even if unchanged.
    stale: bool,
}

impl Planner {
    /// A fresh planner (a new leader): empty allocator, nothing written yet.
    pub fn new(class: ClassConfig, policy: contest::Policy) -> Planner {
        Planner {
            class,
            ipam: Ipam::default(),
            written: HashMap::new(),
            warned: HashMap::new(),
            contests: Contests::new(policy),
            known: HashMap::new(),
            unsettled: BTreeSet::new(),
            pass: 0,
            auto: BTreeMap::new(),
        }
    }

    /// Makes the next pass translate and check every Service and re-validate every address, as
    /// if everything had changed (a safety net; the outcome must be the same).
    pub fn resync(&mut self) {
        for k in self.known.values_mut() {
            k.stale = true;
        }
        self.ipam.resync();
    }

    /// When a contested Service is due to be tried again (R8), if any.
    pub fn next_retry(&self) -> Option<Instant> {
        self.contests.next_retry()
    }

    /// Records a status write that the API server accepted (or whose Service is gone), so it is
    /// neither repeated while the watch catches up nor counted twice by the write-war bound.
    pub fn status_written(&mut self, write: &StatusWrite) {
        let key = key_of(&write.service);
        if let Some(spec) = write.spec {
            self.contests.wrote(&key, spec, &write.ips);
        }
        self.written.insert(
            key,
            (
                write.service.metadata.resource_version.clone(),
                write.ips.clone(),
            ),
        );
    }

    /// One pass over `snap`. `now` drives the write-war backoff; `wall` is the transition time
    /// for pool conditions that change.
    pub fn plan(&mut self, snap: &Snapshot, now: Instant, wall: &Time) -> Plan {
        self.feed_cluster(snap);
        self.pass = self.pass.wrapping_add(1);
        let pass = self.pass;
        let mut plan = Plan::default();

        // Which Services changed since the last pass (new object), which are unchanged.
        let mut changed: Vec<(ServiceKey, Arc<Service>)> = Vec::new();
        for svc in &snap.services {
            let key = key_of(svc);
            match self.known.get_mut(&key) {
                Some(k) if !k.stale && Arc::ptr_eq(&k.svc, svc) => k.pass = pass,
                _ => changed.push((key, svc.clone())),
            }
        }

        // Translate the changed ones.
        let mut check: BTreeSet<ServiceKey> = BTreeSet::new();
        let mut releases: Vec<Arc<Service>> = Vec::new();
        for (key, svc) in changed {
            let ours = match classify(&svc, &self.class) {
                Classified::Ours(mut req, warnings) => {
                    if !warnings.is_empty() && self.warned.get(&key) != Some(&warnings) {
                        for w in &warnings {
                            plan.events.push((
                                svc.clone(),
                                EventSpec {
                                    warning: true,
                                    reason: ANNOTATION_CONFLICT,
                                    message: w.clone(),
                                },
                            ));
                        }
                    }
                    if warnings.is_empty() {
                        self.warned.remove(&key);
                    } else {
                        self.warned.insert(key.clone(), warnings);
                    }
                    req.key = key.clone(); // one key allocation shared by every map
                    self.ipam.upsert_service(*req);
                    true
                }
                Classified::NotLoadBalancer | Classified::OtherClass => {
                    self.warned.remove(&key);
                    self.contests.forget(&key);
                    self.release(
                        &key,
                        Gone::NotHandled,
                        || svc.clone(),
                        "the Service is no longer a LoadBalancer of this class",
                        &mut plan,
                    );
                    false
                }
            };
            check.insert(key.clone());
            self.known.insert(
                key,
                Known {
                    svc,
                    ours,
                    pass,
                    stale: false,
                },
            );
        }

        // Services no longer in the snapshot were deleted: their addresses are freed (R6).
        let gone: Vec<ServiceKey> = self
            .known
            .iter()
            .filter(|(_, k)| k.pass != pass)
            .map(|(key, _)| key.clone())
            .collect();
        for key in gone {
            let last = self.known.remove(&key);
            self.warned.remove(&key);
            self.written.remove(&key);
            self.unsettled.remove(&key);
            self.contests.forget(&key);
            let uid = last.as_ref().and_then(|k| k.svc.metadata.uid.as_ref());
            self.release(
                &key,
                Gone::Deleted,
                || Arc::new(deleted_service(&key, uid)),
                "the Service was deleted",
                &mut plan,
            );
        }

        for n in &self.ipam.reconcile() {
            match &n.note {
                Note::Allocated { ips, .. } => plan.tally.allocations += ips.len() as u64,
                Note::Reallocated { to, .. } => plan.tally.allocations += to.len() as u64,
                Note::Failed(f) => plan.tally.failures.push(failure_label(f)),
                _ => {}
            }
            if let Some(k) = self.known.get(&n.key) {
                plan.events.push((k.svc.clone(), event_for(&n.note)));
            }
            check.insert(n.key.clone());
        }

        // Statuses to compare: changed Services, those whose addresses the allocator changed,
        // and those not settled yet (incl. contested ones).
        check.extend(self.unsettled.iter().cloned());
        for key in check {
            let Some(k) = self.known.get(&key) else {
                continue;
            };
            let svc = k.svc.clone();
            if k.ours {
                let ips = self.ipam.desired_ips(&key);
                self.queue_status(&svc, ips, Some(now), &mut plan);
            } else if we_own_ingress(&svc) {
                releases.push(svc); // no longer ours: clear the status we wrote (R6)
            } else {
                self.unsettled.remove(&key);
            }
        }
        for svc in releases {
            self.queue_status(&svc, Vec::new(), None, &mut plan);
        }
        plan.tally.contested = self.contests.contested();
        for (_, failure) in self.ipam.pending() {
            *plan
                .tally
                .pending
                .entry(failure_label(failure))
                .or_default() += 1;
        }
        self.plan_pools(snap, wall, &mut plan);
        plan
    }

    /// A Service we held is gone or no longer ours: frees its addresses (R6) and, if it held
    /// any, counts the release and queues an `IPReleased` Event about `svc()` saying `why`.
    fn release(
        &mut self,
        key: &ServiceKey,
        gone: Gone,
        svc: impl FnOnce() -> Arc<Service>,
        why: &str,
        plan: &mut Plan,
    ) {
        if !self.ipam.handles(key) {
            return;
        }
        let freed = self.ipam.remove_service(key, gone);
        if !freed.is_empty() {
            plan.tally.releases += 1;
            plan.events.push((
                svc(),
                event_for(&Note::Released {
                    ips: freed,
                    why: why.into(),
                }),
            ));
        }
    }

    /// Queues a status write if the status differs. `contested_at`: the time of the pass when the
    /// write is bounded by the write-war policy (R8), `None` for releases (which stop by
    /// themselves: another writer's forced apply takes the field from us, and we clear only a
    /// status we own).
    fn queue_status(
        &mut self,
        svc: &Arc<Service>,
        ips: Vec<IpAddr>,
        contested_at: Option<Instant>,
        plan: &mut Plan,
    ) {
        let key = key_of(svc);
        if status_matches(svc, &ips) {
            self.contests.settled(&key);
            // The write (if any) came back through the watch: nothing to remember.
            self.written.remove(&key);
            self.unsettled.remove(&key);
            return;
        }
        self.unsettled.insert(key.clone());
        if let Some((rv, wrote)) = self.written.get(&key)
            && *rv == svc.metadata.resource_version
            && *wrote == ips
        {
            return; // our write is on its way back through the watch
        }
        let Some(now) = contested_at else {
            plan.statuses.push(StatusWrite {
                service: svc.clone(),
                ips,
                spec: None,
            });
            return;
        };
        let spec = spec_digest(svc);
        match self.contests.assess(&key, spec, &ips, now) {
            Verdict::Write => plan.statuses.push(StatusWrite {
                service: svc.clone(),
                ips,
                spec: Some(spec),
            }),
            Verdict::Hold { .. } => {}
            Verdict::BackOff {
                writes: ours, warn, ..
            } => {
                let manager = status_writer(svc);
                plan.tally
                    .conflicts
                    .push(manager.clone().unwrap_or_else(|| "unknown".into()));
                if warn {
                    let class_less = svc
                        .spec
                        .as_ref()
                        .is_none_or(|s| s.load_balancer_class.is_none());
                    plan.events.push((
                        svc.clone(),
                        EventSpec {
                            warning: true,
                            reason: STATUS_WRITE_CONFLICT,
                            message: conflict_message(
                                manager.as_deref(),
                                &ips,
                                ours,
                                self.contests.policy().backoff,
                                &self.class.lb_class,
                                class_less,
                            ),
                        },
                    ));
                }
            }
        }
    }

    /// Pools, Nodes and Namespaces of the snapshot into the allocator; automatic pools are
    /// resolved first ([`Planner::resolve_auto`]).
    fn feed_cluster(&mut self, snap: &Snapshot) {
        let names: BTreeSet<String> = snap.pools.iter().map(|p| name_of(&p.metadata)).collect();
        self.resolve_auto(snap);
        let waiting = AutoResolution::default();
        for p in &snap.pools {
            let created = creation_seconds(&p.metadata);
            let name = name_of(&p.metadata);
            let auto = self.auto.get(&name).unwrap_or(&waiting);
            self.ipam
                .upsert_pool(PoolConfig::from_auto(&name, created, &p.spec, auto));
        }
        for name in self.ipam.pool_names() {
            if !names.contains(&name) {
                self.ipam.remove_pool(&name);
            }
        }
        let nodes = ferrolb_crds::node::address_map(snap.nodes.iter().map(|n| &**n));
        self.ipam.set_nodes(nodes);
        let ns_names: BTreeSet<String> = snap
            .namespaces
            .iter()
            .map(|n| name_of(&n.metadata))
            .collect();
        for ns in &snap.namespaces {
            self.ipam.set_namespace(
                &name_of(&ns.metadata),
                ns.metadata.labels.clone().unwrap_or_default(),
            );
        }
        for name in self.ipam.namespace_names() {
            if !ns_names.contains(&name) {
                self.ipam.remove_namespace(&name);
            }
        }
    }

    /// Resolves every automatic pool (`spec.autoAddresses`) from the node reports, the Nodes'
    /// addresses and the LoadBalancer IPs in the Services' status
    /// ([`ferrolb_crds::auto_pool::resolve`]). Cheap: nothing is read unless such a pool exists.
    fn resolve_auto(&mut self, snap: &Snapshot) {
        let previous = std::mem::take(&mut self.auto);
        if !snap.pools.iter().any(|p| p.spec.auto_addresses.is_some()) {
            return;
        }
        // Reports of Nodes that exist only: a deleted node's report says nothing of today's LAN.
        let node_names: BTreeSet<&str> = snap
            .nodes
            .iter()
            .filter_map(|n| n.metadata.name.as_deref())
            .collect();
        let reports: Vec<NodeNetworks> = snap
            .reports
            .iter()
            .filter_map(|r| NodeNetworks::of_report(r))
            .filter(|r| node_names.contains(r.node.as_str()))
            .collect();
        let node_ips: BTreeSet<IpAddr> =
            ferrolb_crds::node::address_map(snap.nodes.iter().map(|n| &**n))
                .into_keys()
                .collect();
        // The LoadBalancer IPs of the Services of our class: another implementation's address
        // is a host using it like any other, never one of ours to keep.
        let held: BTreeSet<IpAddr> = snap
            .services
            .iter()
            .filter(|s| self.class.classify(s) == ferrolb_crds::service::ServiceClass::Ours)
            .flat_map(|s| ferrolb_crds::service::ingress_ips(s))
            .collect();
        // What the allocator holds, by pool (in memory: ahead of any status write).
        let mut allocated: BTreeMap<&str, BTreeSet<IpAddr>> = BTreeMap::new();
        for (ip, pool, _) in self.ipam.held() {
            allocated.entry(pool).or_default().insert(ip);
        }
        // Oldest first (R9's order): a newer automatic pool on the same network takes the
        // addresses below the older ones' (their candidates and addresses are left out of its
        // window), instead of an overlap that R9 gives to the older pool whole.
        let mut autos: Vec<&Arc<IPAddressPool>> = snap
            .pools
            .iter()
            .filter(|p| p.spec.auto_addresses.is_some())
            .collect();
        autos.sort_by_key(|p| (creation_seconds(&p.metadata), name_of(&p.metadata)));
        let mut excluded = node_ips;
        for p in autos {
            if let Some(auto) = p.spec.auto_addresses {
                let name = name_of(&p.metadata);
                // The held addresses of the previous resolution stay (R7): those of the status we
                // wrote (after a restart, the only record), of the resolution in memory (the
                // status write may lag or have failed), and those the allocator handed out.
                let stored =
                    ferrolb_crds::addresses::PoolAddresses::parse(&p.address_entries(), false).ok();
                let in_memory = previous.get(&name);
                let keep: BTreeSet<std::net::Ipv4Addr> = held
                    .iter()
                    .filter_map(|ip| match ip {
                        IpAddr::V4(v4) => Some((ip, *v4)),
                        IpAddr::V6(_) => None,
                    })
                    .filter(|(ip, v4)| {
                        stored
                            .as_ref()
                            .is_some_and(|a| a.ranges().iter().any(|r| r.contains(**ip)))
                            || in_memory.is_some_and(|r| r.addresses.contains(v4))
                            || allocated
                                .get(name.as_str())
                                .is_some_and(|a| a.contains(*ip))
                    })
                    .map(|(_, v4)| v4)
                    .collect();
                // Never a window over an address another pool handed out (an older pool grown
                // into a newer one's addresses would otherwise take them back).
                let mut left_out = excluded.clone();
                left_out.extend(
                    allocated
                        .iter()
                        .filter(|(pool, _)| **pool != name.as_str())
                        .flat_map(|(_, ips)| ips.iter().copied()),
                );
                let resolved =
                    ferrolb_crds::auto_pool::resolve(auto.size, &reports, &left_out, &held, &keep);
                excluded.extend(
                    resolved
                        .candidates
                        .iter()
                        .chain(&resolved.addresses)
                        .map(|ip| IpAddr::V4(*ip)),
                );
                self.auto.insert(name, resolved);
            }
        }
    }

    /// Pool gauges and the pool statuses that differ from the stored ones.
    fn plan_pools(&mut self, snap: &Snapshot, wall: &Time, plan: &mut Plan) {
        let pools: BTreeMap<String, &Arc<IPAddressPool>> = snap
            .pools
            .iter()
            .map(|p| (name_of(&p.metadata), p))
            .collect();
        // Addresses another host claims, by the pool they were handed out from.
        let claimed = crate::conflicts::recent_conflicts(&snap.conflict_events, wall);
        let mut by_pool: BTreeMap<&str, Vec<(IpAddr, &BTreeSet<String>)>> = BTreeMap::new();
        for (ip, pool, _) in self.ipam.held() {
            if let Some(macs) = claimed.get(&ip) {
                by_pool.entry(pool).or_default().push((ip, macs));
            }
        }
        // Bounded whatever the number of addresses and MACs (issue #27 item 4).
        let conflicts: BTreeMap<String, Vec<String>> = by_pool
            .into_iter()
            .map(|(pool, claimed)| (pool.to_owned(), crate::conflicts::listed(&claimed)))
            .collect();
        for report in self.ipam.pool_reports() {
            plan.tally.pools.push((
                report.name.clone(),
                Family::V4,
                report.assigned_v4,
                report.available_v4,
            ));
            plan.tally.pools.push((
                report.name.clone(),
                Family::V6,
                report.assigned_v6,
                report.available_v6,
            ));
            let Some(pool) = pools.get(&report.name) else {
                continue;
            };
            let labels = pool.metadata.labels.clone().unwrap_or_default();
            let advertised = snap
                .l2
                .iter()
                .any(|a| a.spec.covers_pool(&report.name, &labels));
            let desired = pool_status(
                &report,
                self.auto.get(&report.name),
                advertised,
                conflicts.get(&report.name).map_or(&[][..], Vec::as_slice),
                pool.metadata.generation,
                pool.status.as_ref(),
                wall,
            );
            if pool.status.as_ref() != Some(&desired) {
                plan.pools.push((report.name.clone(), desired));
            }
        }
    }
}

/// What an Event about a deleted Service refers to: its namespace, name and (when we saw it)
/// uid, all an Event's `involvedObject` needs.
fn deleted_service(key: &ServiceKey, uid: Option<&String>) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(key.namespace.to_string()),
            name: Some(key.name.to_string()),
            uid: uid.cloned(),
            ..ObjectMeta::default()
        },
        ..Service::default()
    }
}

/// `metadata.name`, or empty (objects from the API server always have one).
fn name_of(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> String {
    meta.name.clone().unwrap_or_default()
}
