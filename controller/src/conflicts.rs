//! Which pool addresses another host claims, from the speakers' `IPConflict` Events (issue #10
//! item 5). Pure: the caller passes the Events (watched with a `reason=IPConflict` field
//! selector) and the wall clock.
//!
//! The speaker that owns an IP writes the Event when another MAC claims it (on an announced IP,
//! or in answer to the probe before the first announcement), and again every 5 minutes while the
//! conflict lasts (`ferrolb_speaker::l2::conflict`), at most 3 per IP and 20 per speaker in any
//! 5 minutes. An IP is *in conflict* while such an Event was last observed less than
//! [`CONFLICT_MEMORY`] ago; the pool condition `AddressConflict` lists those IPs
//! ([`crate::pool_status`]), at most [`MAX_IPS_LISTED`] of them with at most [`MAX_MACS_LISTED`]
//! MACs each, and counts the rest ([`listed`], issue #27 item 4), so its message stays short
//! however many MACs a host on the LAN forges. Events from other reporters, or whose note does
//! not start with [`ferrolb_crds::conflict_event::note_head`], are ignored.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use ferrolb_crds::conflict_event::{REASON_IP_CONFLICT, parse_note};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The `reportingController` of the speakers' Events.
pub const SPEAKER_REPORTER: &str = "ferrolb.io/speaker";

/// How long after the last report an IP counts as in conflict: two of the speaker's report
/// periods (5 minutes), so one lost report does not clear the condition.
pub const CONFLICT_MEMORY: Duration = Duration::from_secs(600);

/// Most addresses the condition `AddressConflict` names per pool; the rest are counted.
pub const MAX_IPS_LISTED: usize = 8;
/// Most foreign MACs the condition names per address; the rest are counted.
pub const MAX_MACS_LISTED: usize = 3;

/// The entries of a pool's `AddressConflict` message, from its claimed addresses (ascending) and
/// their foreign MACs: `198.51.100.70 (by 02:…:66, 02:…:77, 02:…:88 and 5 more MACs)`, at most
/// [`MAX_IPS_LISTED`] of them, then `and N more addresses`. Each entry is at most ~110
/// characters, so the message stays under 1 KiB whatever the input.
pub fn listed(claimed: &[(IpAddr, &BTreeSet<String>)]) -> Vec<String> {
    let mut out: Vec<String> = claimed
        .iter()
        .take(MAX_IPS_LISTED)
        .map(|(ip, macs)| {
            let named: Vec<&str> = macs
                .iter()
                .take(MAX_MACS_LISTED)
                .map(String::as_str)
                .collect();
            match macs.len().saturating_sub(MAX_MACS_LISTED) {
                0 => format!("{ip} (by {})", named.join(", ")),
                more => format!(
                    "{ip} (by {} and {more} more MAC{})",
                    named.join(", "),
                    if more == 1 { "" } else { "s" }
                ),
            }
        })
        .collect();
    match claimed.len().saturating_sub(MAX_IPS_LISTED) {
        0 => {}
        1 => out.push("and 1 more address".into()),
        more => out.push(format!("and {more} more addresses")),
    }
    out
}

/// The foreign MACs per IP of the speakers' `IPConflict` Events last observed within
/// [`CONFLICT_MEMORY`] before `now`.
pub fn recent_conflicts(events: &[Arc<Event>], now: &Time) -> BTreeMap<IpAddr, BTreeSet<String>> {
    let mut out: BTreeMap<IpAddr, BTreeSet<String>> = BTreeMap::new();
    for e in events {
        if e.reason.as_deref() != Some(REASON_IP_CONFLICT)
            || e.reporting_controller.as_deref() != Some(SPEAKER_REPORTER)
        {
            continue;
        }
        let Some((ip, mac)) = e.note.as_deref().and_then(parse_note) else {
            continue;
        };
        let last = [
            e.series.as_ref().map(|s| s.last_observed_time.0),
            e.event_time.as_ref().map(|t| t.0),
            e.deprecated_last_timestamp.as_ref().map(|t| t.0),
            e.metadata.creation_timestamp.as_ref().map(|t| t.0),
        ]
        .into_iter()
        .flatten()
        .max();
        // In whole seconds; an Event stamped in the future (clock skew) counts as recent.
        let memory = i64::try_from(CONFLICT_MEMORY.as_secs()).unwrap_or(i64::MAX);
        let recent =
            last.is_some_and(|at| now.0.as_second().saturating_sub(at.as_second()) < memory);
        if recent {
            out.entry(ip).or_default().insert(mac);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    /// Issue #27 item 4: 500 addresses, each claimed by 60 MACs, make a condition message of at
    /// most [`MAX_IPS_LISTED`] addresses with at most [`MAX_MACS_LISTED`] MACs each, and the
    /// counts of the rest — under 1 KiB, where the unbounded list was about 9 MB.
    #[test]
    fn the_condition_lists_a_few_addresses_and_macs_and_counts_the_rest() {
        let macs: BTreeSet<String> = (0..60).map(|i| format!("02:5e:00:00:00:{i:02x}")).collect();
        let claimed: Vec<(IpAddr, &BTreeSet<String>)> = (0..500u32)
            .map(|i| (IpAddr::V4(std::net::Ipv4Addr::from(0xc633_6400 + i)), &macs))
            .collect();
        let entries = listed(&claimed);
        assert_eq!(entries.len(), MAX_IPS_LISTED + 1);
        assert_eq!(
            entries[0],
            "198.51.100.0 (by 02:5e:00:00:00:00, 02:5e:00:00:00:01, 02:5e:00:00:00:02 and 57 more MACs)"
        );
        assert_eq!(entries[MAX_IPS_LISTED], "and 492 more addresses");
        assert!(entries.join(", ").len() < 1024);
        // A few: every one named, nothing counted.
        let two: BTreeSet<String> = ["02:00:00:00:00:66".into(), "02:00:00:00:00:77".into()].into();
        let ip: IpAddr = "198.51.100.70".parse().unwrap();
        assert_eq!(
            listed(&[(ip, &two)]),
            ["198.51.100.70 (by 02:00:00:00:00:66, 02:00:00:00:00:77)"]
        );
        assert!(listed(&[]).is_empty());
    }
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;

    fn at(second: i64) -> k8s_openapi::jiff::Timestamp {
        k8s_openapi::jiff::Timestamp::from_second(second).unwrap()
    }

    fn event(note: &str, reporter: &str, second: i64) -> Arc<Event> {
        Arc::new(Event {
            reason: Some(REASON_IP_CONFLICT.into()),
            reporting_controller: Some(reporter.into()),
            note: Some(note.into()),
            event_time: Some(MicroTime(at(second))),
            ..Event::default()
        })
    }

    #[test]
    fn recent_speaker_reports_count_old_and_foreign_ones_do_not() {
        let note =
            |ip: &str, mac: &str| format!("{ip} is also claimed by {mac} on eth0 of node-1: …");
        let events = vec![
            event(
                &note("198.51.100.70", "02:00:00:00:00:66"),
                SPEAKER_REPORTER,
                10_001,
            ),
            event(
                &note("198.51.100.70", "02:00:00:00:00:77"),
                SPEAKER_REPORTER,
                10_500,
            ),
            event(
                &note("198.51.100.71", "02:00:00:00:00:66"),
                SPEAKER_REPORTER,
                9_000,
            ),
            event(
                &note("198.51.100.72", "02:00:00:00:00:66"),
                "someone-else",
                10_500,
            ),
            event("198.51.100.73 is in trouble", SPEAKER_REPORTER, 10_500),
        ];
        let now = Time(at(10_600));
        let got = recent_conflicts(&events, &now);
        assert_eq!(got.len(), 1, "{got:?}");
        let macs = &got[&"198.51.100.70".parse::<IpAddr>().unwrap()];
        assert_eq!(macs.len(), 2);
        // Exactly CONFLICT_MEMORY after a report, that report no longer counts.
        let edge = Time(at(10_001 + CONFLICT_MEMORY.as_secs() as i64));
        let macs = &recent_conflicts(&events, &edge)[&"198.51.100.70".parse::<IpAddr>().unwrap()];
        assert_eq!(macs.len(), 1, "{macs:?}");
        // Ten minutes after the last report: cleared.
        let later = Time(at(10_500 + CONFLICT_MEMORY.as_secs() as i64));
        assert!(recent_conflicts(&events, &later).is_empty());
    }
}
