//! ferrolb speaker: membership among speakers (SWIM), per-IP owner election (rendezvous hash),
//! ARP/NDP responders and gratuitous announcements (DESIGN §5).
//!
//! The pure layer-2 core is its own crate, `ferrolb-l2` (no `kube`, no `tokio`, no sockets); its
//! modules are re-exported here under their old paths: [`claim`], [`election`], [`eligibility`],
//! [`events`], [`node`] (the sans-IO per-node core the daemon executes), [`plan`], [`trim`] (what the watch stores keep, S13), [`view`], [`wire`], and the pure parts of [`membership`].
//! I/O edges: [`l2`] (packet sockets), [`membership`] (SWIM over UDP, [`membership::agent`]),
//! [`watch`] and [`event_sink`] (Kubernetes), [`http`], [`metrics`], [`daemon`].

pub use ferrolb_l2::{
    announcements, carrier, claim, election, eligibility, events, fresh, node, plan, trim, view,
    wire,
};

pub mod announcement_writer;
pub mod daemon;
pub mod event_sink;
pub mod http;
pub mod l2;
pub mod membership;
pub mod metrics;
pub mod peer_macs;
pub mod watch;
