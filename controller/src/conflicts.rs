//! Which pool addresses another host claims, from the speakers' `IPConflict` Events (issue #10
//! item 5). Pure: the caller passes the Events (watched with a `reason=IPConflict` field
//! selector) and the wall clock.
//!
//! The speaker that owns an IP writes the Event when another MAC claims it (on an announced IP,
//! or in answer to the probe before the first announcement), and again every 5 minutes while the
//! conflict lasts (`ferrolb_speaker::l2::conflict`). An IP is *in conflict* while such an Event
//! was last observed less than [`CONFLICT_MEMORY`] ago; the pool condition `AddressConflict`
//! lists those IPs ([`crate::pool_status`]). Events from other reporters, or whose note does not
//! start with [`ferrolb_crds::conflict_event::note_head`], are ignored.

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
