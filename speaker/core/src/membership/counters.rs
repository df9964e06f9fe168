//! Membership counters (DESIGN §5 S9): shared between the state machine and whoever exports
//! metrics. Lock-free atomics, monotonic except the `members` gauge (a `u64` at thousands of
//! increments per second needs millions of years to wrap); sums saturate.

use std::sync::atomic::{AtomicU64, Ordering};

/// Live counters, updated by the membership state machine.
#[derive(Debug, Default)]
pub struct Counters {
    members: AtomicU64,
    transitions_up: AtomicU64,
    transitions_down: AtomicU64,
    restarts_seen: AtomicU64,
    self_rejoins: AtomicU64,
    datagrams_in: AtomicU64,
    datagrams_out: AtomicU64,
    dropped_malformed: AtomicU64,
    dropped_unknown_source: AtomicU64,
    dropped_rate_limited: AtomicU64,
    dropped_auth: AtomicU64,
    dropped_stale: AtomicU64,
    dropped_replayed: AtomicU64,
    dropped_misdirected: AtomicU64,
    dropped_wrong_source: AtomicU64,
    dropped_rejected: AtomicU64,
    send_errors: AtomicU64,
    suspicions_postponed: AtomicU64,
    suspicions_stale: AtomicU64,
}

/// A consistent-enough copy of [`Counters`] for export (each field read atomically).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CountersSnapshot {
    /// Gauge: alive members including ourselves (0 after leaving).
    pub members: u64,
    /// Members that became alive (a [`super::MembershipEvent::Up`] each).
    pub transitions_up: u64,
    /// Members that went down or left (a [`super::MembershipEvent::Down`] each).
    pub transitions_down: u64,
    /// Members seen restarting with a newer generation while alive.
    pub restarts_seen: u64,
    /// Times this speaker was declared down by others and rejoined with a new generation.
    pub self_rejoins: u64,
    /// Datagrams received (every datagram read from the socket, accepted or not).
    pub datagrams_in: u64,
    /// Datagrams sealed and handed to the socket.
    pub datagrams_out: u64,
    /// Dropped: too short, wrong magic or version, or oversized.
    pub dropped_malformed: u64,
    /// Dropped before decryption: the source IP is neither a configured peer's nor a current
    /// member's (config `admit_only_peers`).
    pub dropped_unknown_source: u64,
    /// Dropped after authentication: over the budget of its authenticated sender (config
    /// `max_opens_per_second`, `max_other_opens_per_second`).
    pub dropped_rate_limited: u64,
    /// Dropped: authentication failed under every key (forged, corrupted, or another key).
    pub dropped_auth: u64,
    /// Dropped: authentic, but the sealed timestamp is outside the replay window.
    pub dropped_stale: u64,
    /// Dropped: authentic, but the exact datagram was already accepted.
    pub dropped_replayed: u64,
    /// Dropped: authentic, but addressed to another member (replayed to the wrong node).
    pub dropped_misdirected: u64,
    /// Dropped: authentic, but its UDP source (IP and port) is not the address of the sender
    /// identity sealed inside it — one key holder speaking for another member (issue #27
    /// item 3).
    pub dropped_wrong_source: u64,
    /// Dropped by foca after authentication (undecodable payload, from ourselves, …).
    pub dropped_rejected: u64,
    /// Sends the socket refused.
    pub send_errors: u64,
    /// Suspicions that ran out while this speaker was not running, postponed instead of
    /// declaring the member down (`MembershipCore::handle_timers`).
    pub suspicions_postponed: u64,
    /// Suspicion timers dropped because the suspect had refuted (or was gone) by then: foca
    /// would have told a healthy member it was down (`MembershipCore::handle_timers`).
    pub suspicions_stale: u64,
}

/// Which counter to bump; keeps the state machine's call sites short.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    TransitionsUp,
    TransitionsDown,
    RestartsSeen,
    SelfRejoins,
    DatagramsIn,
    DatagramsOut,
    DroppedMalformed,
    DroppedUnknownSource,
    DroppedRateLimited,
    DroppedAuth,
    DroppedStale,
    DroppedReplayed,
    DroppedMisdirected,
    DroppedWrongSource,
    DroppedRejected,
    SendErrors,
    SuspicionsPostponed,
    SuspicionsStale,
}

impl Counters {
    pub(crate) fn bump(&self, which: Counter) {
        self.cell(which).fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn set_members(&self, n: usize) {
        self.members
            .store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    /// Counts one failed send (used by the socket adapter).
    pub fn record_send_error(&self) {
        self.bump(Counter::SendErrors);
    }

    fn cell(&self, which: Counter) -> &AtomicU64 {
        match which {
            Counter::TransitionsUp => &self.transitions_up,
            Counter::TransitionsDown => &self.transitions_down,
            Counter::RestartsSeen => &self.restarts_seen,
            Counter::SelfRejoins => &self.self_rejoins,
            Counter::DatagramsIn => &self.datagrams_in,
            Counter::DatagramsOut => &self.datagrams_out,
            Counter::DroppedMalformed => &self.dropped_malformed,
            Counter::DroppedUnknownSource => &self.dropped_unknown_source,
            Counter::DroppedRateLimited => &self.dropped_rate_limited,
            Counter::DroppedAuth => &self.dropped_auth,
            Counter::DroppedStale => &self.dropped_stale,
            Counter::DroppedReplayed => &self.dropped_replayed,
            Counter::DroppedMisdirected => &self.dropped_misdirected,
            Counter::DroppedWrongSource => &self.dropped_wrong_source,
            Counter::DroppedRejected => &self.dropped_rejected,
            Counter::SendErrors => &self.send_errors,
            Counter::SuspicionsPostponed => &self.suspicions_postponed,
            Counter::SuspicionsStale => &self.suspicions_stale,
        }
    }

    /// Reads every counter.
    pub fn snapshot(&self) -> CountersSnapshot {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        CountersSnapshot {
            members: get(&self.members),
            transitions_up: get(&self.transitions_up),
            transitions_down: get(&self.transitions_down),
            restarts_seen: get(&self.restarts_seen),
            self_rejoins: get(&self.self_rejoins),
            datagrams_in: get(&self.datagrams_in),
            datagrams_out: get(&self.datagrams_out),
            dropped_malformed: get(&self.dropped_malformed),
            dropped_unknown_source: get(&self.dropped_unknown_source),
            dropped_rate_limited: get(&self.dropped_rate_limited),
            dropped_auth: get(&self.dropped_auth),
            dropped_stale: get(&self.dropped_stale),
            dropped_replayed: get(&self.dropped_replayed),
            dropped_misdirected: get(&self.dropped_misdirected),
            dropped_wrong_source: get(&self.dropped_wrong_source),
            dropped_rejected: get(&self.dropped_rejected),
            send_errors: get(&self.send_errors),
            suspicions_postponed: get(&self.suspicions_postponed),
            suspicions_stale: get(&self.suspicions_stale),
        }
    }
}

impl CountersSnapshot {
    /// All datagrams dropped for any reason.
    pub fn dropped_total(&self) -> u64 {
        [
            self.dropped_malformed,
            self.dropped_unknown_source,
            self.dropped_rate_limited,
            self.dropped_auth,
            self.dropped_stale,
            self.dropped_replayed,
            self.dropped_misdirected,
            self.dropped_wrong_source,
            self.dropped_rejected,
        ]
        .into_iter()
        .fold(0, u64::saturating_add)
    }

    /// Membership transitions (up plus down).
    pub fn transitions(&self) -> u64 {
        self.transitions_up.saturating_add(self.transitions_down)
    }
}
