//! ferrolb-l2: the speaker's layer-2 core, everything the speaker decides without I/O (DESIGN §5).
//! No `kube`, no `tokio`, no sockets (`crds/tests/purity.rs` checks the dependency tree): the
//! `ferrolb-speaker` crate feeds it from its watches, its packet sockets and its UDP socket, and
//! re-exports every module under its old path (`ferrolb_speaker::election`, …).
//!
//! - [`view`]: Kubernetes objects reduced to per-IP facts (which IPs are announced, R9/R10);
//! - [`eligibility`]: which nodes may announce an IP, and why nobody may (S1);
//! - [`election`]: the per-IP owner, a rendezvous hash (S2);
//! - [`plan`]: what this node announces, on which interfaces, and who reports the rest;
//! - [`announcements`]: which `L2Announcement` objects to write or delete;
//! - [`answer`]: the responder's pure rules (announcement schedule, peer yields);
//! - [`carrier`]: carrier per interface and family as an eligibility input (issue #32 G5.5);
//! - [`claim`]: the claim gate — converge before claiming, partitions (S10, S12);
//! - [`events`]: which Events to emit for a plan change (the pure `EventPlanner`);
//! - [`fresh`]: which IPs were newly assigned (probed before their first announcement);
//! - [`node`]: the per-node decision state machine the daemon executes ([`node::SpeakerCore`]);
//! - [`networks`]: the node networks a speaker reports for automatic pools (issue #28);
//! - [`wire`]: ARP and NDP frames, parsed and built;
//! - [`membership`]: the sans-IO SWIM state machine and its pure parts (keys, envelope, budget,
//!   replay guard, timers, config).

pub mod announcements;
pub mod answer;
pub mod carrier;
pub mod claim;
pub mod election;
pub mod eligibility;
pub mod events;
pub mod fresh;
pub mod membership;
pub mod networks;
pub mod node;
pub mod plan;
pub mod trim;
pub mod view;
pub mod wire;
