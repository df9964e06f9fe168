//! Prometheus metrics of the controller (R14), served on `/metrics` in the text exposition
//! format.

use std::collections::BTreeSet;
use std::sync::Mutex;

use ferrolb_crds::addresses::Family as AddressFamily;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Labels of per-reason failure counts.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabels {
    /// `no_pool`, `exhausted`, `requested_held`, `requested_in_no_pool`, `family_unavailable`,
    /// `invalid`.
    pub reason: String,
}

/// Labels of the write-conflict counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ManagerLabels {
    /// The other field manager owning `status.loadBalancer`, or `unknown`.
    pub manager: String,
}

/// Labels of per-pool gauges.
#[derive(Debug, Clone, Hash, PartialEq, Eq, PartialOrd, Ord, EncodeLabelSet)]
pub struct PoolLabels {
    /// Pool name.
    pub pool: String,
    /// `IPv4` or `IPv6`.
    pub family: String,
}

/// Every metric, registered in [`Metrics::registry`].
#[derive(Debug)]
pub struct Metrics {
    /// The registry to encode.
    pub registry: Registry,
    /// `ferrolb_controller_allocations_total`: addresses handed out (including re-allocations).
    pub allocations: Counter,
    /// `ferrolb_controller_allocation_failures_total{reason}`: Services that became pending
    /// (every reason of [`crate::events::FAILURE_LABELS`] exported from the start, at 0).
    pub failures: Family<ReasonLabels, Counter>,
    /// `ferrolb_controller_releases_total`: Services whose addresses were freed.
    pub releases: Counter,
    /// `ferrolb_controller_status_writes_total`: Service status writes.
    pub status_writes: Counter,
    /// `ferrolb_controller_status_write_conflicts_total{manager}`: times a Service's status was
    /// given up to another field manager after the bounded number of writes (R8,
    /// `crate::contest`).
    pub status_conflicts: Family<ManagerLabels, Counter>,
    /// `ferrolb_controller_status_contested`: Services whose status ferrolb currently leaves to
    /// another writer (their addresses stay reserved).
    pub status_contested: Gauge,
    /// `ferrolb_controller_services_pending{reason}`: Services of this class left without any
    /// address by the last pass, by why (every reason of
    /// [`crate::events::FAILURE_LABELS`], 0 included; all 0 on a replica that is not leading).
    pub services_pending: Family<ReasonLabels, Gauge>,
    /// `ferrolb_controller_pool_assigned{pool,family}`.
    pub pool_assigned: Family<PoolLabels, Gauge>,
    /// `ferrolb_controller_pool_available{pool,family}` (saturating at i64::MAX).
    pub pool_available: Family<PoolLabels, Gauge>,
    /// `ferrolb_controller_reconcile_duration_seconds`: one pass over the index plus its writes.
    pub reconcile_seconds: Histogram,
    /// `ferrolb_controller_leader`: 1 while this replica holds the Lease.
    pub leader: Gauge,
    /// The pool series exported now ([`Metrics::set_pools`] removes the others).
    pools_exported: Mutex<BTreeSet<PoolLabels>>,
}

impl Metrics {
    /// Creates and registers every metric.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("ferrolb_controller");
        ferrolb_runtime::build_info::register(&mut registry);
        let m = Metrics {
            allocations: Counter::default(),
            failures: Family::default(),
            releases: Counter::default(),
            status_writes: Counter::default(),
            status_conflicts: Family::default(),
            status_contested: Gauge::default(),
            services_pending: Family::default(),
            pool_assigned: Family::default(),
            pool_available: Family::default(),
            reconcile_seconds: Histogram::new(exponential_buckets(0.0005, 2.0, 16)),
            leader: Gauge::default(),
            pools_exported: Mutex::default(),
            registry: Registry::default(),
        };
        registry.register("allocations", "Addresses handed out", m.allocations.clone());
        registry.register(
            "allocation_failures",
            "Services that became pending, by reason",
            m.failures.clone(),
        );
        registry.register(
            "releases",
            "Services whose addresses were freed",
            m.releases.clone(),
        );
        registry.register(
            "status_writes",
            "Service status writes",
            m.status_writes.clone(),
        );
        registry.register(
            "status_write_conflicts",
            "Times ferrolb stopped writing a Service status that another field manager keeps rewriting, by that manager",
            m.status_conflicts.clone(),
        );
        registry.register(
            "status_contested",
            "Services whose status ferrolb leaves to another writer for now (addresses stay reserved)",
            m.status_contested.clone(),
        );
        registry.register(
            "services_pending",
            "Services left without any address by the last reconcile pass, by reason (0 on a replica that is not leading)",
            m.services_pending.clone(),
        );
        registry.register(
            "pool_assigned",
            "Addresses held per pool and family",
            m.pool_assigned.clone(),
        );
        registry.register(
            "pool_available",
            "Free addresses per pool and family",
            m.pool_available.clone(),
        );
        registry.register(
            "reconcile_duration_seconds",
            "Duration of one reconcile pass including its writes",
            m.reconcile_seconds.clone(),
        );
        registry.register(
            "leader",
            "1 while this replica holds the Lease",
            m.leader.clone(),
        );
        m.set_pending(&std::collections::BTreeMap::new());
        // Every known reason from the start, at 0: `rate()` then sees the first failure, and a
        // dashboard shows 0 rather than nothing.
        for reason in crate::events::FAILURE_LABELS {
            let _ = m.failures.get_or_create(&ReasonLabels {
                reason: reason.into(),
            });
        }
        Metrics { registry, ..m }
    }

    /// Sets `services_pending{reason}` for every reason of [`crate::events::FAILURE_LABELS`]
    /// from `pending` (a reason absent there is 0).
    pub fn set_pending(&self, pending: &std::collections::BTreeMap<&'static str, u64>) {
        for reason in crate::events::FAILURE_LABELS {
            let n = pending.get(reason).copied().unwrap_or(0);
            self.services_pending
                .get_or_create(&ReasonLabels {
                    reason: reason.into(),
                })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        }
    }

    /// Sets `pool_assigned` and `pool_available` from a pass's `(pool, family, assigned,
    /// available)` and removes the series of pools not listed (deleted pools; every pool when
    /// this replica stops leading and passes `&[]`), so neither a dashboard nor the
    /// "pool nearly full" alert sees a pool that is gone or a standby's stale numbers.
    pub fn set_pools(&self, pools: &[(String, AddressFamily, u64, u64)]) {
        let mut exported = self
            .pools_exported
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut now = BTreeSet::new();
        for (pool, family, assigned, available) in pools {
            let labels = PoolLabels {
                pool: pool.clone(),
                family: family.as_k8s().into(),
            };
            self.pool_assigned
                .get_or_create(&labels)
                .set(ferrolb_crds::addresses::api_count(*assigned));
            self.pool_available
                .get_or_create(&labels)
                .set(ferrolb_crds::addresses::api_count(*available));
            now.insert(labels);
        }
        for gone in exported.difference(&now) {
            self.pool_assigned.remove(gone);
            self.pool_available.remove(gone);
        }
        *exported = now;
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_named_metrics() {
        let m = Metrics::new();
        m.allocations.inc();
        m.failures
            .get_or_create(&ReasonLabels {
                reason: "exhausted".into(),
            })
            .inc();
        m.leader.set(1);
        m.status_conflicts
            .get_or_create(&ManagerLabels {
                manager: "other-lb".into(),
            })
            .inc();
        m.status_contested.set(1);
        m.set_pending(&[("exhausted", 2)].into());
        let text = m.encode();
        assert!(
            text.contains("ferrolb_controller_allocations_total 1"),
            "{text}"
        );
        assert!(
            text.contains("ferrolb_controller_allocation_failures_total{reason=\"exhausted\"} 1"),
            "{text}"
        );
        assert!(text.contains("ferrolb_controller_leader 1"), "{text}");
        assert!(
            text.contains(
                "ferrolb_controller_status_write_conflicts_total{manager=\"other-lb\"} 1"
            ),
            "{text}"
        );
        assert!(
            text.contains("ferrolb_controller_status_contested 1"),
            "{text}"
        );
        assert!(
            text.contains("ferrolb_controller_services_pending{reason=\"exhausted\"} 2"),
            "{text}"
        );
        assert!(
            text.contains("ferrolb_controller_allocation_failures_total{reason=\"invalid\"} 0"),
            "every failure reason is exported from the start: {text}"
        );
        assert!(
            text.contains("ferrolb_controller_services_pending{reason=\"no_pool\"} 0"),
            "every reason is exported, 0 included: {text}"
        );
        assert!(
            text.contains("ferrolb_controller_build_info{version=\""),
            "{text}"
        );
    }

    #[test]
    fn pool_series_of_a_deleted_pool_or_a_standby_are_removed() {
        let m = Metrics::new();
        m.set_pools(&[
            ("a".into(), AddressFamily::V4, 9, 1),
            ("b".into(), AddressFamily::V4, 1, 9),
        ]);
        let text = m.encode();
        assert!(
            text.contains("ferrolb_controller_pool_assigned{pool=\"a\",family=\"IPv4\"} 9"),
            "{text}"
        );
        assert!(
            text.contains("ferrolb_controller_pool_available{pool=\"b\",family=\"IPv4\"} 9"),
            "{text}"
        );
        m.set_pools(&[("b".into(), AddressFamily::V4, 2, 8)]);
        let text = m.encode();
        assert!(!text.contains("pool=\"a\""), "pool a was deleted: {text}");
        assert!(
            text.contains("ferrolb_controller_pool_assigned{pool=\"b\",family=\"IPv4\"} 2"),
            "{text}"
        );
        m.set_pools(&[]);
        assert!(!m.encode().contains("pool=\""), "standby: no pool series");
    }
}
