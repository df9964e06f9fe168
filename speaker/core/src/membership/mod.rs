//! Speaker membership, the pure part: SWIM (crate `foca`) as a sans-IO state machine, every
//! datagram sealed with XChaCha20-Poly1305 (DESIGN §5 S3; user documentation in
//! `docs/membership.md`). The tokio task owning the UDP socket is `ferrolb_speaker::membership::agent`.
//!
//! - [`key`]: the key file format and weak-key checks;
//! - [`envelope`]: the sealed datagram format (seal / open);
//! - [`budget`]: source admission (before any cryptography) and the per-sender budget (after authentication);
//! - [`replay`]: timestamp window and nonce cache against replays;
//! - [`identity`]: [`SpeakerId`] (node name, address, generation) as a foca identity;
//! - [`config`]: [`MembershipConfig`] timings and their foca mapping;
//! - [`counters`]: [`Counters`] for metrics;
//! - [`timers`]: the deadline queue for foca timers;
//! - [`lease`]: two-way evidence and the quorum lease's heartbeats;
//! - [`hello`]: protocol version, timings and key fingerprints exchanged, mismatched peers refused;
//! - [`carrier`]: every speaker's carrier report, sealed to every member (issue #32 G5.5);
//! - [`machine`]: [`MembershipCore`], the sans-IO state machine.

pub mod budget;
pub mod carrier;
pub mod config;
pub mod counters;
pub mod envelope;
pub mod hello;
pub mod identity;
pub mod key;
pub mod lease;
pub mod machine;
pub mod replay;
pub mod timers;

pub use config::{
    ConfigError, DEFAULT_PORT, DEFAULT_RECV_BUFFER_BYTES, MembershipConfig, TimingProfile,
};
pub use counters::{Counters, CountersSnapshot};
pub use identity::SpeakerId;
pub use key::{Key, KeyError, KeyRing};
pub use machine::{Clock, DropReason, MembershipCore, MembershipEvent, Outgoing};
