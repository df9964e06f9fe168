//! `IPAddressPool.status` from the allocator's [`PoolReport`]: per-family counters (int64,
//! saturating) and the conditions `Ready`, `Overlapping`, `NodeAddressConflict`, `Invalid`
//! (DESIGN §3) and `AddressConflict` (another host on the LAN claims an assigned address, from
//! the speakers' `IPConflict` Events, [`crate::conflicts`]; issue #10 item 5). Pure; the caller
//! supplies the clock.
//!
//! `Invalid=True` has reason `BadAddressEntry` for a malformed entry (the first one) and
//! `ForbiddenAddresses` for entries overlapping a block that is never a LoadBalancer IP (every
//! one named: loopback, link-local, multicast, ...; [`ferrolb_crds::addresses::FORBIDDEN_BLOCKS`],
//! issue 10 item 6). Either way the pool serves nothing, as if the API server had refused it
//! (its CEL rules refuse both at admission; such a pool exists only if it was stored before).
//!
//! An automatic pool (`spec.autoAddresses`) is `Ready=False` with reason `WaitingForNodeNetwork`
//! before any node report lists a network, and `WaitingForProbes` while it has candidates but no
//! address (no speaker has yet probed one with no answer; docs/design.md, "Automatic pools").
//!
//! `lastTransitionTime` is kept from the current status while a condition's status is unchanged,
//! so an unchanged pool produces an identical status and no write.

use ferrolb_crds::IPAddressPoolStatus;
use ferrolb_crds::addresses::{PoolAddressError, api_count};
use ferrolb_crds::auto_pool::AutoResolution;
use ferrolb_crds::v1beta1::AutoAddressesStatus;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use crate::ipam::PoolReport;

/// At most this many skipped addresses are listed in `status.autoAddresses.skipped` (all are
/// counted in `skippedCount`), so the status stays small whatever the LAN answers.
pub const SKIPPED_LISTED: usize = 8;

/// Builds the status. `auto`: an automatic pool's resolution ([`ferrolb_crds::auto_pool`]),
/// `None` for a pool with `spec.addresses`; `advertised`: some L2Advertisement covers the pool; `conflicts`: its
/// addresses another host claims, each with the foreign MACs (e.g. `198.51.100.70 (by
/// 02:00:00:00:00:66)`); `generation`: the pool's `metadata.generation`; `current`: its status
/// now; `now`: the transition time to use.
pub fn pool_status(
    report: &PoolReport,
    auto: Option<&AutoResolution>,
    advertised: bool,
    conflicts: &[String],
    generation: Option<i64>,
    current: Option<&IPAddressPoolStatus>,
    now: &Time,
) -> IPAddressPoolStatus {
    let mut conditions = Vec::new();
    let (ready, reason, message) = if let Some(invalid) = &report.invalid {
        (false, "Invalid", format!("pool serves nothing: {invalid}"))
    } else if auto.is_some_and(|a| a.prefix.is_none()) {
        (
            false,
            "WaitingForNodeNetwork",
            "automatic pool: waiting for speakers to report the node network (no node report lists an IPv4 network yet)".to_owned(),
        )
    } else if auto.is_some_and(AutoResolution::waiting_for_probes) {
        (
            false,
            "WaitingForProbes",
            "automatic pool: waiting for speakers to probe the candidates (status.autoAddresses.candidates); only an address some speaker probed and no host answered is handed out (RFC 5227 ARP probe)".to_owned(),
        )
    } else if !advertised {
        (
            false,
            "NotAdvertised",
            "addresses are allocated from this pool but not announced: no L2Advertisement covers it".to_owned(),
        )
    } else {
        (
            true,
            "Serving",
            "addresses are allocated and announced".to_owned(),
        )
    };
    conditions.push(("Ready", ready, reason, message));
    conditions.push(match report.overlaps.is_empty() {
        true => (
            "Overlapping",
            false,
            "NoOverlap",
            "no address is shared with an older pool".into(),
        ),
        false => (
            "Overlapping",
            true,
            "OlderPoolOwnsAddresses",
            format!(
                "not handed out from this pool: {}",
                report.overlaps.join(", ")
            ),
        ),
    });
    conditions.push(match report.node_conflicts.is_empty() {
        true => (
            "NodeAddressConflict",
            false,
            "NoConflict",
            "no Node address inside the pool".into(),
        ),
        false => (
            "NodeAddressConflict",
            true,
            "NodeAddressInPool",
            format!("never handed out: {}", report.node_conflicts.join(", ")),
        ),
    });
    conditions.push(match conflicts.is_empty() {
        true => (
            "AddressConflict",
            false,
            "NoConflict",
            "no other host claims an assigned address".into(),
        ),
        false => (
            "AddressConflict",
            true,
            "ForeignHostClaimsAddress",
            format!(
                "another host on the LAN claims: {}; see the IPConflict Events of the Services using them",
                conflicts.join(", ")
            ),
        ),
    });
    conditions.push(match &report.invalid {
        None => (
            "Invalid",
            false,
            "Valid",
            "every addresses entry is usable".into(),
        ),
        Some(e @ PoolAddressError::Malformed { .. }) => {
            ("Invalid", true, "BadAddressEntry", e.to_string())
        }
        Some(e @ PoolAddressError::Forbidden(_)) => (
            "Invalid",
            true,
            "ForbiddenAddresses",
            format!("never handed out nor announced, the pool serves nothing: {e}"),
        ),
    });
    let conditions = conditions
        .into_iter()
        .map(|(type_, status, reason, message)| {
            let status = if status { "True" } else { "False" };
            let last = current
                .and_then(|c| {
                    c.conditions
                        .iter()
                        .find(|c| c.type_ == type_ && c.status == status)
                })
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.clone());
            Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.to_owned(),
                message,
                last_transition_time: last,
                observed_generation: generation,
            }
        })
        .collect();
    IPAddressPoolStatus {
        conditions,
        assigned_ipv4: api_count(report.assigned_v4),
        available_ipv4: api_count(report.available_v4),
        assigned_ipv6: api_count(report.assigned_v6),
        available_ipv6: api_count(report.available_v6),
        auto_addresses: auto.map(auto_status),
    }
}

/// `status.autoAddresses` of a resolution: the prefix, the candidates and the addresses as merged
/// ranges, the first
/// [`SKIPPED_LISTED`] skipped addresses with who answered and who probed, and their count.
fn auto_status(auto: &AutoResolution) -> AutoAddressesStatus {
    AutoAddressesStatus {
        prefix: auto.prefix.map(|p| p.to_string()),
        candidates: auto.candidate_entries(),
        addresses: auto.entries(),
        skipped: auto
            .skipped
            .iter()
            .take(SKIPPED_LISTED)
            .map(|(ip, mac, node)| format!("{ip} (answered by {mac}, probed from node {node})"))
            .collect(),
        skipped_count: i64::try_from(auto.skipped.len()).unwrap_or(i64::MAX),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> PoolReport {
        PoolReport {
            name: "p".into(),
            assigned_v4: 1,
            available_v4: 253,
            assigned_v6: 3,
            available_v6: u64::MAX,
            overlaps: vec!["198.51.100.0-198.51.100.15 (also in older pool pool-a)".into()],
            node_conflicts: vec![],
            invalid: None,
        }
    }

    #[test]
    fn counters_saturate_and_conditions_name_the_other_pool() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap_or_default());
        let s = pool_status(&report(), None, true, &[], Some(2), None, &t0);
        assert_eq!(s.available_ipv6, i64::MAX);
        let overlapping = s
            .conditions
            .iter()
            .find(|c| c.type_ == "Overlapping")
            .map(|c| (&c.status, &c.message));
        assert!(matches!(overlapping, Some((st, m)) if st == "True" && m.contains("pool-a")));
        // Same inputs later: identical status (no write).
        let t1 = Time(k8s_openapi::jiff::Timestamp::from_second(2000).unwrap_or_default());
        assert_eq!(
            pool_status(&report(), None, true, &[], Some(2), Some(&s), &t1),
            s
        );
        let not_adv = pool_status(&report(), None, false, &[], Some(2), Some(&s), &t1);
        let ready = not_adv.conditions.iter().find(|c| c.type_ == "Ready");
        assert!(
            matches!(ready, Some(c) if c.status == "False" && c.reason == "NotAdvertised" && c.last_transition_time == t1)
        );
    }

    #[test]
    fn address_conflicts_are_a_condition_naming_the_addresses() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap_or_default());
        let get = |s: &IPAddressPoolStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "AddressConflict")
                .cloned()
                .unwrap()
        };
        let clear = pool_status(&report(), None, true, &[], Some(1), None, &t0);
        assert_eq!(get(&clear).status, "False");
        let claimed = ["198.51.100.70 (by 02:00:00:00:00:66)".to_owned()];
        let s = pool_status(&report(), None, true, &claimed, Some(1), Some(&clear), &t0);
        let c = get(&s);
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("True", "ForeignHostClaimsAddress")
        );
        assert!(
            c.message.contains("198.51.100.70 (by 02:00:00:00:00:66)"),
            "{c:?}"
        );
        // Ready is unaffected: the other addresses are served.
        assert_eq!(
            s.conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| c.status.as_str()),
            Some("True")
        );
    }

    #[test]
    fn automatic_pools_wait_for_a_network_then_list_what_they_skipped() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap_or_default());
        let ready = |s: &IPAddressPoolStatus| {
            s.conditions
                .iter()
                .find(|c| c.type_ == "Ready")
                .map(|c| (c.status.clone(), c.reason.clone()))
                .unwrap_or_default()
        };
        let waiting = AutoResolution::default();
        let s = pool_status(&report(), Some(&waiting), true, &[], Some(1), None, &t0);
        assert_eq!(ready(&s), ("False".into(), "WaitingForNodeNetwork".into()));
        assert_eq!(s.auto_addresses, Some(AutoAddressesStatus::default()));
        let skipped: Vec<_> = (0..10u8)
            .map(|i| {
                (
                    std::net::Ipv4Addr::new(192, 168, 49, 200 + i),
                    "02:00:00:00:00:01".to_owned(),
                    "minikube".to_owned(),
                )
            })
            .collect();
        let top = |d: u8| std::net::Ipv4Addr::new(192, 168, 49, d);
        let unprobed = AutoResolution {
            prefix: ferrolb_crds::auto_pool::Net4::parse("192.168.49.2/24"),
            candidates: vec![top(253), top(254)],
            addresses: vec![],
            skipped: vec![],
        };
        let s = pool_status(&report(), Some(&unprobed), true, &[], Some(1), None, &t0);
        assert_eq!(ready(&s), ("False".into(), "WaitingForProbes".into()));
        let a = s.auto_addresses.unwrap_or_default();
        assert_eq!(a.candidates, vec!["192.168.49.253-192.168.49.254"]);
        assert!(a.addresses.is_empty());
        let resolved = AutoResolution {
            addresses: vec![top(253)],
            skipped,
            ..unprobed
        };
        let s = pool_status(&report(), Some(&resolved), true, &[], Some(1), None, &t0);
        assert_eq!(ready(&s), ("True".into(), "Serving".into()));
        let a = s.auto_addresses.unwrap_or_default();
        assert_eq!(a.prefix.as_deref(), Some("192.168.49.0/24"));
        assert_eq!(a.addresses, vec!["192.168.49.253/32"]);
        assert_eq!((a.skipped.len(), a.skipped_count), (SKIPPED_LISTED, 10));
        assert_eq!(
            a.skipped[0],
            "192.168.49.200 (answered by 02:00:00:00:00:01, probed from node minikube)"
        );
        // A pool with spec.addresses has no autoAddresses status.
        let plain = pool_status(&report(), None, true, &[], Some(1), None, &t0);
        assert_eq!(plain.auto_addresses, None);
    }

    #[test]
    fn forbidden_entries_are_named_under_their_own_reason() {
        let t0 = Time(k8s_openapi::jiff::Timestamp::from_second(1000).unwrap_or_default());
        let condition = |entries: &[&str]| {
            let mut r = report();
            r.invalid = ferrolb_crds::addresses::PoolAddresses::parse(entries, false).err();
            let s = pool_status(&r, None, true, &[], Some(1), None, &t0);
            let get = |t: &str| s.conditions.iter().find(|c| c.type_ == t).cloned();
            (get("Invalid"), get("Ready"))
        };
        let (invalid, ready) = condition(&["198.51.100.0/24", "169.254.169.254/32", "::1/128"]);
        let Some(invalid) = invalid else {
            panic!("no Invalid condition")
        };
        assert_eq!(
            (invalid.status.as_str(), invalid.reason.as_str()),
            ("True", "ForbiddenAddresses")
        );
        for want in [
            "spec.addresses[1]: addresses entry \"169.254.169.254/32\" overlaps 169.254.0.0/16",
            "spec.addresses[2]: addresses entry \"::1/128\" overlaps ::1/128 (loopback",
        ] {
            assert!(invalid.message.contains(want), "{}", invalid.message);
        }
        assert!(matches!(ready, Some(c) if c.status == "False" && c.reason == "Invalid"));
        let (invalid, _) = condition(&["198.51.100.30-198.51.100.20"]);
        assert!(matches!(invalid, Some(c) if c.reason == "BadAddressEntry"));
        let (invalid, _) = condition(&["198.51.100.0/24"]);
        assert!(matches!(invalid, Some(c) if c.status == "False" && c.reason == "Valid"));
    }
}
