//! Responder counters (DESIGN S9): plain atomics the glue exports through `prometheus-client`.
//!
//! Counters are process-wide (all interfaces added up) and only ever increase. Drop reasons are
//! the stable labels of [`crate::wire::arp::ArpError::reason`], [`crate::wire::ndp::NdpError::reason`]
//! and the responder's own ignore reasons ([`IgnoreReason`]).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

pub use ferrolb_l2::answer::decide::IgnoreReason;

/// The counters of all responders of one process. Share it as `Arc<Counters>`.
#[derive(Debug, Default)]
pub struct Counters {
    /// ARP requests received (after kernel filtering), any target.
    pub arp_requests_received: AtomicU64,
    /// ARP replies sent for owned IPs.
    pub arp_replies_sent: AtomicU64,
    /// Neighbor Solicitations received (after kernel filtering), any target.
    pub ns_received: AtomicU64,
    /// Solicited Neighbor Advertisements sent (including DAD defences).
    pub na_sent: AtomicU64,
    /// Gratuitous ARP frames sent (each form counts once).
    pub gratuitous_arp_sent: AtomicU64,
    /// Unsolicited Neighbor Advertisements sent.
    pub unsolicited_na_sent: AtomicU64,
    /// Sends that failed (the frame is lost; the next announcement or request retries).
    pub send_errors: AtomicU64,
    /// Socket (re)open failures of interface responders.
    pub socket_errors: AtomicU64,
    /// Interface responder tasks that panicked and were restarted (issue #27 item 11).
    pub task_panics: AtomicU64,
    /// Failed joins/leaves of solicited-node multicast groups.
    pub multicast_errors: AtomicU64,
    /// Defensive announcements sent for an IP another host claimed (RFC 5227 §2.4; each counts
    /// once, whatever the number of frames).
    pub conflict_defenses: AtomicU64,
    /// Probes sent for newly assigned IPs before their first announcement (ARP probes and DAD
    /// Neighbor Solicitations; [`super::probe`]).
    pub address_probes_sent: AtomicU64,
    /// Probe rounds that found another host using the IP (the IP is held, not announced).
    pub probe_conflicts: AtomicU64,
    /// Owned IPs yielded on an interface because a peer speaker announced them
    /// ([`super::peers`]); each claim that starts or extends a yield counts once.
    pub peer_claim_yields: AtomicU64,
    /// Frames claiming an owned IP, from a peer speaker's MAC or carrying a claim proof, whose
    /// proof is missing, does not verify or is stale ([`crate::wire::claim_proof`]): never a
    /// yield, handled as any host's conflict (DESIGN S15).
    pub unproven_claims: AtomicU64,
    /// Frames in which another MAC claimed an owned IP, by [`super::decide::ClaimKind::label`].
    conflict_frames: Mutex<BTreeMap<&'static str, u64>>,
    /// Frames dropped or ignored, by reason label.
    dropped: Mutex<BTreeMap<&'static str, u64>>,
}

/// A point-in-time copy of [`Counters`].
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct CounterSnapshot {
    /// See [`Counters::arp_requests_received`].
    pub arp_requests_received: u64,
    /// See [`Counters::arp_replies_sent`].
    pub arp_replies_sent: u64,
    /// See [`Counters::ns_received`].
    pub ns_received: u64,
    /// See [`Counters::na_sent`].
    pub na_sent: u64,
    /// See [`Counters::gratuitous_arp_sent`].
    pub gratuitous_arp_sent: u64,
    /// See [`Counters::unsolicited_na_sent`].
    pub unsolicited_na_sent: u64,
    /// See [`Counters::send_errors`].
    pub send_errors: u64,
    /// See [`Counters::socket_errors`].
    pub socket_errors: u64,
    /// See [`Counters::task_panics`].
    pub task_panics: u64,
    /// See [`Counters::multicast_errors`].
    pub multicast_errors: u64,
    /// See [`Counters::conflict_defenses`].
    pub conflict_defenses: u64,
    /// See [`Counters::address_probes_sent`].
    pub address_probes_sent: u64,
    /// See [`Counters::probe_conflicts`].
    pub probe_conflicts: u64,
    /// See [`Counters::peer_claim_yields`].
    pub peer_claim_yields: u64,
    /// See [`Counters::unproven_claims`].
    pub unproven_claims: u64,
    /// Conflicting frames by claim kind label.
    pub conflict_frames: BTreeMap<&'static str, u64>,
    /// Dropped or ignored frames by reason label.
    pub dropped: BTreeMap<&'static str, u64>,
}

impl Counters {
    /// Add one to `counter`.
    pub fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// Count one dropped or ignored frame under `reason`.
    pub fn drop_frame(&self, reason: &'static str) {
        let mut map = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        *map.entry(reason).or_default() += 1;
    }

    /// Count one frame in which another MAC claimed an owned IP, under its kind label.
    pub fn conflict_frame(&self, kind: &'static str) {
        let mut map = self
            .conflict_frames
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        *map.entry(kind).or_default() += 1;
    }

    /// The dropped count for one reason label.
    pub fn dropped(&self, reason: &str) -> u64 {
        let map = self.dropped.lock().unwrap_or_else(|e| e.into_inner());
        map.get(reason).copied().unwrap_or_default()
    }

    /// Copy every counter.
    pub fn snapshot(&self) -> CounterSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CounterSnapshot {
            arp_requests_received: get(&self.arp_requests_received),
            arp_replies_sent: get(&self.arp_replies_sent),
            ns_received: get(&self.ns_received),
            na_sent: get(&self.na_sent),
            gratuitous_arp_sent: get(&self.gratuitous_arp_sent),
            unsolicited_na_sent: get(&self.unsolicited_na_sent),
            send_errors: get(&self.send_errors),
            socket_errors: get(&self.socket_errors),
            task_panics: get(&self.task_panics),
            multicast_errors: get(&self.multicast_errors),
            conflict_defenses: get(&self.conflict_defenses),
            address_probes_sent: get(&self.address_probes_sent),
            probe_conflicts: get(&self.probe_conflicts),
            peer_claim_yields: get(&self.peer_claim_yields),
            unproven_claims: get(&self.unproven_claims),
            conflict_frames: self
                .conflict_frames
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            dropped: self
                .dropped
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_and_snapshots() {
        let c = Counters::default();
        Counters::inc(&c.arp_replies_sent);
        Counters::inc(&c.arp_replies_sent);
        c.drop_frame("arp_truncated");
        c.drop_frame(IgnoreReason::NotOwned.label());
        c.drop_frame(IgnoreReason::NotOwned.label());
        let s = c.snapshot();
        assert_eq!(s.arp_replies_sent, 2);
        assert_eq!(s.dropped.get("not_owned"), Some(&2));
        assert_eq!(c.dropped("arp_truncated"), 1);
        assert_eq!(c.dropped("nothing"), 0);
    }
}
