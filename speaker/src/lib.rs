//! ferrolb speaker: membership among speakers (SWIM), per-IP owner election (rendezvous hash),
//! ARP/NDP responders and gratuitous announcements (DESIGN §5).
//!
//! Pure modules (no `kube`, no `tokio`): [`claim`], [`election`], [`eligibility`], [`events`],
//! [`plan`], [`trim`], [`view`], [`wire`].
//! I/O edges: [`l2`] (packet sockets), [`membership`] (SWIM over UDP).

pub mod claim;
pub mod daemon;
pub mod election;
pub mod eligibility;
pub mod event_sink;
pub mod events;
pub mod http;
pub mod l2;
pub mod membership;
pub mod metrics;
pub mod plan;
pub mod trim;
pub mod view;
pub mod watch;
pub mod wire;
