//! What every speaker tells its peers about itself, and which peers it refuses for it (issue
//! #32 G5.4). Pure.
//!
//! Speakers that disagree on the protocol, the timings or the key cannot keep the one-answerer
//! promise together: a peer with a longer quorum lease than our quickest declaration of death
//! still answers after we have taken its IPs, and a peer whose key ring lacks our primary key
//! cannot open anything we seal with it. So every speaker sends each active member a sealed [`Hello`]
//! (kind byte [`KIND_HELLO`]) when it first sees that member's identity and every
//! [`HELLO_INTERVAL`] after, saying:
//!
//! - the membership protocol versions it speaks, `min_protocol..=protocol` ([`PROTOCOL`],
//!   [`MIN_PROTOCOL`]);
//! - its timings ([`Timings`]: probe period, probe timeout, suspicion timeout; the quorum lease
//!   and its heartbeat derive from them);
//! - the [fingerprints](super::Key::fingerprint) of the keys of its ring, the primary first.
//!
//! The receiver compares them with its own ([`Hello::mismatch`]) and **refuses** a peer that
//! disagrees: it is no longer listed alive (so no IP is planned for it), it gets no lease grant
//! and its grants count for nothing (so it is no evidence toward the majority). It stays a voter
//! if its speaker Pod exists: refused peers count *against* the majority, the safe direction.
//! Both sides of a protocol or timing mismatch refuse each other (the checks are symmetric), so
//! a cluster split by configuration behaves like a partition: only a side with a majority of
//! the voters answers. A **key** mismatch is reported and not refused: a hello we could open
//! was sealed with a key both rings hold, and the membership seals to that peer with the first
//! key of our ring it lists, so both sides keep two-way evidence through a rotation rolled out
//! of order (refusing it, as release 0.2 first did, left a side that could open nothing from
//! the other, and with a skipped step no side had a majority: every IP silent for seconds).
//! The executor reports every mismatched peer (Warning Event on its Node,
//! reason `MembershipMismatch`, and the gauge `ferrolb_speaker_membership_refused_peers`).
//!
//! **Roll-outs.** A speaker of the previous protocol ([`MIN_PROTOCOL`], release 0.1.0) sends no
//! hello and is accepted as it is: release N and N−1 interoperate for the length of one
//! roll-out (docs/versioning.md). A peer is judged, by node name, on its latest hello, whatever
//! identity it holds now: a peer declared down and renewed (generation + 1), or restarted,
//! keeps its judgement until its next hello says otherwise — and a speaker sends every member
//! a hello as soon as its own identity changes (a rejoin) or the member's does, so the new one
//! comes one datagram after the change. A hello is replay-checked like SWIM (timestamp window
//! and nonce cache), and an older hello never overrides a newer one: older by the sender's
//! [`Hello::seq`] within one process, by generation across processes unless the older-looking
//! one comes from the identity the membership lists now (a restart after a wall-clock step
//! back). A recorded hello therefore cannot bring an old configuration back, and a sender's
//! clock step cannot hide a new one.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::identity::SpeakerId;

/// First plaintext byte of a sealed [`Hello`] (0 is SWIM, 1 the lease). Speakers of protocol 2
/// drop it as `malformed`.
pub const KIND_HELLO: u8 = 2;

/// The membership protocol this build speaks: 1 = envelope v1 (never released), 2 = envelope v2
/// with the quorum lease (no hello), 3 = protocol 2 plus [`Hello`].
pub const PROTOCOL: u16 = 3;

/// The oldest protocol this build interoperates with: one release back.
pub const MIN_PROTOCOL: u16 = 2;

/// How often a hello goes to every active member besides the first one to each new identity:
/// a lost hello, or a peer that changed its configuration by restarting, is noticed within it.
pub const HELLO_INTERVAL: Duration = Duration::from_secs(10);

/// Most key fingerprints a hello carries (a key ring holds at most
/// [`super::key::MAX_KEYS`]); more is refused as malformed.
pub const MAX_FINGERPRINTS: usize = 8;

/// A key fingerprint: see [`super::Key::fingerprint`].
pub type Fingerprint = [u8; 8];

/// The timings two speakers must share, in milliseconds (the membership's
/// [`super::MembershipConfig`]; the lease is half the probe period plus the suspicion timeout).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Timings {
    /// SWIM probe period.
    pub probe_period_ms: u32,
    /// Probe timeout before indirect probes.
    pub probe_rtt_ms: u32,
    /// How long a member stays suspect before it is declared down.
    pub suspect_timeout_ms: u32,
}

impl Timings {
    /// From durations, saturating at `u32::MAX` ms (49 days; refused long before by the config).
    pub fn from_durations(probe_period: Duration, probe_rtt: Duration, suspect: Duration) -> Self {
        let ms = |d: Duration| u32::try_from(d.as_millis()).unwrap_or(u32::MAX);
        Timings {
            probe_period_ms: ms(probe_period),
            probe_rtt_ms: ms(probe_rtt),
            suspect_timeout_ms: ms(suspect),
        }
    }
}

impl std::fmt::Display for Timings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "probe {} ms, probe timeout {} ms, suspicion {} ms",
            self.probe_period_ms, self.probe_rtt_ms, self.suspect_timeout_ms
        )
    }
}

/// One speaker's statement about itself, sealed with kind byte [`KIND_HELLO`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hello {
    /// The sender's current identity.
    pub src: SpeakerId,
    /// The addressee's identity as the sender knows it (a hello replayed to another member is
    /// `misdirected`).
    pub dst: SpeakerId,
    /// The sender's hello counter: one more for every hello it sends, from 0 when its process
    /// starts. Orders the hellos of one process (its generation's start) whatever its wall
    /// clock does: a step back must not make its newest statement look older.
    pub seq: u64,
    /// Newest protocol the sender speaks.
    pub protocol: u16,
    /// Oldest protocol the sender interoperates with.
    pub min_protocol: u16,
    /// The sender's timings.
    pub timings: Timings,
    /// Fingerprints of the sender's keys, its primary (sealing) key first.
    pub keys: Vec<Fingerprint>,
}

/// Why a peer is refused.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mismatch {
    /// No protocol version in common: the peer speaks `min..=max`.
    Protocol {
        /// The peer's oldest protocol.
        min: u16,
        /// The peer's newest protocol.
        max: u16,
    },
    /// Other timings (another `--timing-profile` or timing flags).
    Timings {
        /// The peer's timings.
        theirs: Timings,
        /// Ours.
        ours: Timings,
    },
    /// The peer's key ring lacks our primary key (a rotation step skipped or rolled out of
    /// order). Reported, not refused: an opened hello proves the rings share the key it was
    /// sealed with, and this speaker seals to that peer with the first key of its ring the
    /// peer lists (`MembershipCore`'s per-peer sealing key), so the link stays two-way.
    Key,
    /// Another speaker runs under this speaker's own node name, at `addr` (the membership
    /// lists it as a member of its own): a replaced node whose old machine came back, or two
    /// machines given one name (issue #29 O6, docs/operations.md). Reported, not refused:
    /// neither side can tell which of the two is current. Listed under our own name.
    SameName {
        /// The other speaker's membership address.
        addr: std::net::SocketAddr,
    },
}

impl Mismatch {
    /// Whether the peer is refused (left out of the alive set, the lease and the plans):
    /// for protocol and timings; a key-ring disagreement ([`Mismatch::Key`]) and a speaker
    /// under our own name ([`Mismatch::SameName`]) are only reported.
    pub fn refuses(&self) -> bool {
        !matches!(self, Mismatch::Key | Mismatch::SameName { .. })
    }

    /// The metric label and short reason: `protocol`, `timings`, `key` or `name`.
    pub fn label(&self) -> &'static str {
        match self {
            Mismatch::Protocol { .. } => "protocol",
            Mismatch::Timings { .. } => "timings",
            Mismatch::Key => "key",
            Mismatch::SameName { .. } => "name",
        }
    }
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Mismatch::Protocol { min, max } => write!(
                f,
                "speaks membership protocol {min}..={max}, this speaker {MIN_PROTOCOL}..={PROTOCOL}"
            ),
            Mismatch::Timings { theirs, ours } => {
                write!(f, "runs other timings ({theirs}; this speaker: {ours})")
            }
            Mismatch::Key => f.write_str(
                "its key ring lacks this speaker's primary key (a key rotation step skipped or rolled out of order; docs/membership.md): not refused, sealed to with a key both rings hold until the rotation is finished",
            ),
            Mismatch::SameName { addr } => write!(
                f,
                "another speaker runs under this node's name at {addr} (a replaced node's old machine back on the network?): both may answer this node's IPs; stop the one that should not run (docs/operations.md)"
            ),
        }
    }
}

impl Hello {
    /// Why a speaker with `ours` timings and primary key fingerprint `our_primary` must refuse
    /// the sender of this hello, if it must. The first failing check wins, in the order
    /// protocol, timings, key. Symmetric for protocol and timings.
    pub fn mismatch(&self, ours: Timings, our_primary: &Fingerprint) -> Option<Mismatch> {
        if self.min_protocol > PROTOCOL
            || self.protocol < MIN_PROTOCOL
            || self.min_protocol > self.protocol
        {
            return Some(Mismatch::Protocol {
                min: self.min_protocol,
                max: self.protocol,
            });
        }
        if self.timings != ours {
            return Some(Mismatch::Timings {
                theirs: self.timings,
                ours,
            });
        }
        if !self.keys.contains(our_primary) {
            return Some(Mismatch::Key);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn id(n: &str) -> SpeakerId {
        SpeakerId::with_generation(n, "192.0.2.1:7947".parse().unwrap(), 1).unwrap()
    }

    fn fast() -> Timings {
        Timings {
            probe_period_ms: 100,
            probe_rtt_ms: 40,
            suspect_timeout_ms: 200,
        }
    }

    fn hello(protocol: (u16, u16), timings: Timings, keys: Vec<Fingerprint>) -> Hello {
        Hello {
            src: id("a"),
            dst: id("b"),
            seq: 1,
            min_protocol: protocol.0,
            protocol: protocol.1,
            timings,
            keys,
        }
    }

    #[test]
    fn agreement_and_each_kind_of_mismatch() {
        let k1 = [1; 8];
        let k2 = [2; 8];
        let ours = fast();
        assert_eq!(
            hello((MIN_PROTOCOL, PROTOCOL), ours, vec![k1]).mismatch(ours, &k1),
            None
        );
        // Our primary is the peer's secondary (rotation step 2 reached us first): fine.
        assert_eq!(
            hello((MIN_PROTOCOL, PROTOCOL), ours, vec![k2, k1]).mismatch(ours, &k1),
            None
        );
        // The next release (N+1, still reading N) and the previous one are compatible.
        assert_eq!(
            hello((PROTOCOL, PROTOCOL + 1), ours, vec![k1]).mismatch(ours, &k1),
            None
        );
        assert_eq!(
            hello((PROTOCOL + 1, PROTOCOL + 2), ours, vec![k1]).mismatch(ours, &k1),
            Some(Mismatch::Protocol {
                min: PROTOCOL + 1,
                max: PROTOCOL + 2
            })
        );
        assert_eq!(
            hello((1, 1), ours, vec![k1]).mismatch(ours, &k1),
            Some(Mismatch::Protocol { min: 1, max: 1 })
        );
        let safe = Timings {
            probe_period_ms: 1000,
            probe_rtt_ms: 500,
            suspect_timeout_ms: 5000,
        };
        let m = hello((MIN_PROTOCOL, PROTOCOL), safe, vec![k1]).mismatch(ours, &k1);
        assert_eq!(m.as_ref().map(Mismatch::label), Some("timings"));
        assert_eq!(
            hello((MIN_PROTOCOL, PROTOCOL), ours, vec![k2]).mismatch(ours, &k1),
            Some(Mismatch::Key)
        );
    }

    #[test]
    fn a_hello_round_trips_through_postcard() {
        let h = hello((MIN_PROTOCOL, PROTOCOL), fast(), vec![[7; 8], [9; 8]]);
        let bytes = postcard::to_allocvec(&h).unwrap();
        assert_eq!(postcard::from_bytes::<Hello>(&bytes).unwrap(), h);
    }
}
