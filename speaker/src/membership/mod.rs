//! Speaker membership: SWIM (crate `foca`) over UDP, every datagram sealed with
//! XChaCha20-Poly1305 (DESIGN §5 S3; user documentation in `docs/membership.md`).
//!
//! Module map — everything but [`agent`] is pure (no tokio, no kube) and lives in the `ferrolb-l2`
//! crate (`ferrolb_l2::membership`), re-exported here under its old paths:
//! - [`key`]: the key file format and weak-key checks;
//! - [`envelope`]: the sealed datagram format (seal / open);
//! - [`budget`]: source admission (before any cryptography) and the per-sender budget (after authentication);
//! - [`replay`]: timestamp window and nonce cache against replays;
//! - [`identity`]: [`SpeakerId`] (node name, address, generation) as a foca identity;
//! - [`config`]: [`MembershipConfig`] timings and their foca mapping;
//! - [`counters`]: [`Counters`] for metrics;
//! - [`timers`]: the deadline queue for foca timers;
//! - [`machine`]: [`MembershipCore`], the sans-IO state machine;
//! - [`agent`]: [`Membership`], the tokio task owning the socket;
//! - [`key_source`]: where the key ring comes from (the Secret through the API, waited for; or a
//!   mounted file).
//!
//! Glue usage:
//! ```no_run
//! # async fn demo(keys: ferrolb_speaker::membership::KeyRing) -> anyhow::Result<()> {
//! use ferrolb_speaker::membership::{Membership, MembershipConfig, MembershipSettings, DEFAULT_PORT};
//! use std::net::SocketAddr;
//! let membership = Membership::start(MembershipSettings {
//!     node_name: "node-1".into(),
//!     // Bound to the advertised address: peers drop datagrams from any other source.
//!     bind_addr: SocketAddr::from(([192, 0, 2, 10], DEFAULT_PORT)),
//!     advertise_addr: None,
//!     keys,
//!     config: MembershipConfig::default(),
//!     generation: None,
//! })
//! .await?;
//! membership.set_peers([SocketAddr::from(([192, 0, 2, 11], DEFAULT_PORT))]);
//! let mut members = membership.members();
//! members.changed().await?;
//! println!("alive: {:?}", *members.borrow());
//! membership.leave(std::time::Duration::from_secs(1)).await; // on SIGTERM
//! # Ok(()) }
//! ```

pub mod agent;
pub mod key_source;
pub use ferrolb_l2::membership::{
    budget, config, counters, envelope, hello, identity, key, lease, machine, replay, timers,
};

pub use agent::{
    HandoverAskers, HandoverReplies, Membership, MembershipSettings, ReceiveBuffer, StartError,
};
pub use config::{
    ConfigError, DEFAULT_PORT, DEFAULT_RECV_BUFFER_BYTES, MembershipConfig, TimingProfile,
};
pub use counters::{Counters, CountersSnapshot};
pub use hello::Mismatch;
pub use identity::SpeakerId;
pub use key::{Key, KeyError, KeyRing};
pub use key_source::KeySource;
pub use machine::{Clock, DropReason, MembershipCore, MembershipEvent, Outgoing};
