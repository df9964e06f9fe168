//! Reports the peers whose configuration disagrees with this speaker's (issue #32 G5.4; refused
//! for protocol or timings, only reported for a key ring lacking our primary key):
//! the gauge `ferrolb_speaker_membership_refused_peers{reason}` and a Warning Event
//! `MembershipMismatch` about this speaker's Node.
//!
//! One Event per change of the refused set, listing at most [`MAX_NAMED`] peers with their
//! reason and the count of the rest, and at most one per [`MIN_EVENT_INTERVAL`] (the set can
//! only change on authenticated hellos, but a compromised key holder could flip its own hello
//! at will). A set that empties again gets a Normal Event `MembershipAgrees`.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use crate::event_sink::EventSink;
use crate::events::Severity;
use crate::membership::Mismatch;
use crate::metrics::SpeakerMetrics;

/// Event reason for peers refused for a mismatch.
pub const REASON_MISMATCH: &str = "MembershipMismatch";
/// Event reason once no peer is refused any more.
pub const REASON_AGREES: &str = "MembershipAgrees";
/// Most peers named in one Event.
pub const MAX_NAMED: usize = 5;
/// Least time between two Events.
pub const MIN_EVENT_INTERVAL: Duration = Duration::from_secs(10);

/// What was last reported.
#[derive(Debug, Default)]
pub(super) struct MismatchReports {
    reported: BTreeMap<String, Mismatch>,
    last_event: Option<Instant>,
}

impl MismatchReports {
    /// Updates the gauge with `refused` and, if it differs from what was last reported and the
    /// interval allows, queues the Event about `node`.
    pub(super) fn update(
        &mut self,
        now: Instant,
        refused: &BTreeMap<String, Mismatch>,
        metrics: &SpeakerMetrics,
        sink: &EventSink,
        node: &str,
    ) {
        for (cell, label) in metrics
            .membership_refused
            .iter()
            .zip(["protocol", "timings", "key", "name"])
        {
            let n = refused.values().filter(|m| m.label() == label).count();
            cell.store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
        }
        if *refused == self.reported
            || self
                .last_event
                .is_some_and(|at| now.saturating_duration_since(at) < MIN_EVENT_INTERVAL)
        {
            return;
        }
        self.last_event = Some(now);
        self.reported.clone_from(refused);
        if refused.is_empty() {
            sink.send_about_node(
                node,
                Severity::Normal,
                REASON_AGREES,
                "every speaker heard agrees with this one on membership protocol, timings and key"
                    .into(),
            );
        } else {
            sink.send_about_node(node, Severity::Warning, REASON_MISMATCH, note(refused));
        }
    }
}

/// The Event note: each named peer and why, then how many more.
fn note(refused: &BTreeMap<String, Mismatch>) -> String {
    let named: Vec<String> = refused
        .iter()
        .take(MAX_NAMED)
        .map(|(name, m)| format!("{name} ({}: {m})", m.label()))
        .collect();
    let more = refused.len().saturating_sub(MAX_NAMED);
    let tail = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    let refusing = refused.values().filter(|m| m.refuses()).count();
    format!(
        "{} speaker(s) disagree with this one: {}{tail}; refused ({refusing}: protocol or timings) get no lease and are not counted alive, a key ring lacking this speaker's primary key is only reported (docs/membership.md, \"Mismatched speakers\")",
        refused.len(),
        named.join("; ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_note_names_a_few_peers_and_counts_the_rest() {
        let refused: BTreeMap<String, Mismatch> = (0..8)
            .map(|i| (format!("node-{i}"), Mismatch::Key))
            .collect();
        let n = note(&refused);
        assert!(n.starts_with("8 speaker(s) disagree"), "{n}");
        assert!(n.contains("refused (0: protocol or timings)"), "{n}");
        assert!(n.contains("node-0 (key: its key ring lacks"), "{n}");
        assert!(n.contains("node-4 (key"), "{n}");
        assert!(!n.contains("node-5 ("), "{n}");
        assert!(n.contains("and 3 more"), "{n}");
    }
}
