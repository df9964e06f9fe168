//! A pool as the allocator sees it: parsed addresses, `autoAssign`, `serviceAllocation`, and the
//! admission test of a Service against `serviceAllocation` (DESIGN §3, R3, R4).

use std::collections::BTreeMap;

use ferrolb_crds::IPAddressPoolSpec;
use ferrolb_crds::addresses::{PoolAddressError, PoolAddresses};
use ferrolb_crds::auto_pool::AutoResolution;
use ferrolb_crds::selector::any_matches;
use ferrolb_crds::v1beta1::ServiceAllocation;

use super::request::ServiceRequest;

/// One `IPAddressPool`, parsed. A pool whose addresses do not parse is kept (so its status can
/// say why) but serves nothing.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolConfig {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.creationTimestamp`, seconds since the Unix epoch. Older pools own overlapping
    /// addresses (R9); ties are broken by name.
    pub created: i64,
    /// The usable addresses, or why there are none: the first malformed entry, or every entry
    /// that overlaps a forbidden block (loopback, link-local, ...), each named
    /// (`spec.addresses[i]: …`).
    pub addresses: Result<PoolAddresses, PoolAddressError>,
    /// `spec.autoAssign`.
    pub auto_assign: bool,
    /// `spec.serviceAllocation`, with `{}` read as absent.
    pub allocation: Option<ServiceAllocation>,
    /// `spec.allowSharingAcrossNamespaces`: Services of different namespaces may share its
    /// addresses (R2; issue #27 item 6).
    pub sharing_across_namespaces: bool,
}

impl PoolConfig {
    /// Parses a pool's spec. Never fails: a bad `addresses` entry becomes an `Err` message. An
    /// automatic pool (`spec.autoAddresses`) gets no addresses here: see
    /// [`PoolConfig::from_auto`].
    pub fn from_spec(name: &str, created: i64, spec: &IPAddressPoolSpec) -> PoolConfig {
        PoolConfig::from_auto(name, created, spec, &AutoResolution::default())
    }

    /// Parses a pool's spec; an automatic pool (`spec.autoAddresses`) holds the addresses of
    /// `auto` ([`ferrolb_crds::auto_pool::resolve`]: probed with no answer, or held), never its
    /// unprobed candidates; any other pool its `spec.addresses`.
    pub fn from_auto(
        name: &str,
        created: i64,
        spec: &IPAddressPoolSpec,
        auto: &AutoResolution,
    ) -> PoolConfig {
        let addresses = if spec.auto_addresses.is_some() {
            PoolAddresses::parse(&auto.entries(), spec.avoid_buggy_ips)
        } else {
            PoolAddresses::parse(&spec.addresses, spec.avoid_buggy_ips)
        };
        PoolConfig {
            name: name.to_owned(),
            created,
            addresses,
            auto_assign: spec.auto_assign,
            allocation: spec.effective_service_allocation().cloned(),
            sharing_across_namespaces: spec.allow_sharing_across_namespaces,
        }
    }

    /// A pool from entry strings, for tests and benchmarks: `autoAssign`, no `serviceAllocation`.
    pub fn simple(name: &str, created: i64, entries: &[&str], avoid_buggy: bool) -> PoolConfig {
        PoolConfig {
            name: name.to_owned(),
            created,
            addresses: PoolAddresses::parse(entries, avoid_buggy),
            auto_assign: true,
            allocation: None,
            sharing_across_namespaces: false,
        }
    }

    /// Whether `serviceAllocation` lets this Service use the pool: its namespace is listed (or the
    /// list is empty), its Namespace's labels match a `namespaceSelectors` entry (or there are
    /// none) and its labels match a `serviceSelectors` entry (or there are none). Absent
    /// `serviceAllocation` admits everything. `namespace_labels` is `None` for an unknown
    /// Namespace (read as no labels).
    pub fn admits(
        &self,
        svc: &ServiceRequest,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let Some(a) = &self.allocation else {
            return true;
        };
        let empty = BTreeMap::new();
        (a.namespaces.is_empty() || a.namespaces.iter().any(|n| **n == *svc.key.namespace))
            && any_matches(&a.namespace_selectors, namespace_labels.unwrap_or(&empty))
            && any_matches(&a.service_selectors, &svc.labels)
    }

    /// Sort key for automatic choice (R4): pools with `serviceAllocation` first, by priority
    /// (absent = after every number) then name; then pools without it, by name.
    pub fn choice_key(&self) -> (u8, i64, &str) {
        match &self.allocation {
            Some(a) => (
                0,
                a.priority.map_or(i64::MAX, i64::from),
                self.name.as_str(),
            ),
            None => (1, 0, self.name.as_str()),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::request::ServiceKey;
    use ferrolb_crds::v1beta1::LabelSelector;

    fn svc(ns: &str, labels: &[(&str, &str)]) -> ServiceRequest {
        ServiceRequest {
            key: ServiceKey::new(ns, "s"),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn empty_service_allocation_is_absent() {
        let spec = IPAddressPoolSpec {
            addresses: vec!["198.51.100.0/28".into()],
            auto_assign: true,
            avoid_buggy_ips: false,
            allow_sharing_across_namespaces: false,
            service_allocation: Some(ServiceAllocation::default()),
            auto_addresses: None,
        };
        let p = PoolConfig::from_spec("p", 0, &spec);
        assert_eq!(p.allocation, None);
        assert_eq!(p.choice_key().0, 1);
    }

    #[test]
    fn an_automatic_pool_holds_its_resolution_only() {
        let spec = IPAddressPoolSpec {
            addresses: vec![],
            auto_assign: true,
            avoid_buggy_ips: false,
            allow_sharing_across_namespaces: false,
            service_allocation: None,
            auto_addresses: Some(ferrolb_crds::v1beta1::AutoAddresses { size: 4 }),
        };
        let waiting = PoolConfig::from_spec("auto", 0, &spec);
        assert_eq!(waiting.addresses.unwrap().ranges().len(), 0);
        let auto = AutoResolution {
            prefix: ferrolb_crds::auto_pool::Net4::parse("192.168.49.2/24"),
            candidates: vec![
                "192.168.49.252".parse().unwrap(),
                "192.168.49.253".parse().unwrap(),
                "192.168.49.254".parse().unwrap(),
            ],
            addresses: vec![
                "192.168.49.253".parse().unwrap(),
                "192.168.49.254".parse().unwrap(),
            ],
            skipped: vec![],
        };
        let p = PoolConfig::from_auto("auto", 0, &spec, &auto);
        let ranges: Vec<String> = p
            .addresses
            .unwrap()
            .ranges()
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(ranges, vec!["192.168.49.253-192.168.49.254"]);
    }

    #[test]
    fn admission_ands_the_three_lists() {
        let mut p = PoolConfig::simple("p", 0, &["198.51.100.0/28"], false);
        p.allocation = Some(ServiceAllocation {
            priority: Some(1),
            namespaces: vec!["prod".into()],
            namespace_selectors: vec![],
            service_selectors: vec![LabelSelector {
                match_labels: [("tier".to_string(), "web".to_string())].into(),
                ..Default::default()
            }],
        });
        assert!(p.admits(&svc("prod", &[("tier", "web")]), None));
        assert!(!p.admits(&svc("dev", &[("tier", "web")]), None));
        assert!(!p.admits(&svc("prod", &[]), None));
    }

    #[test]
    fn bad_entry_is_named() {
        let p = PoolConfig::simple("p", 0, &["198.51.100.30-198.51.100.20"], false);
        let err = p.addresses.unwrap_err().to_string();
        assert!(
            err.contains("spec.addresses[0]") && err.contains("198.51.100.30-198.51.100.20"),
            "{err}"
        );
    }
}
