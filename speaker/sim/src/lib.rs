//! ferrolb-sim: a deterministic cluster simulator for the speaker (issue #26), dev only.
//!
//! It runs N real [`ferrolb_l2::node::SpeakerCore`]s with the real SWIM machine
//! ([`ferrolb_l2::membership::MembershipCore`]: foca, AEAD sealing, replay guard, budgets) in
//! virtual time, single-threaded, every random choice drawn from one seed — the shape of
//! FoundationDB's simulation tests and TigerBeetle's VOPR. A [`Scenario`] is data: the cluster
//! size, the IPs, the network and a list of timed [`Fault`]s; [`run`] replays it and returns the
//! [`Report`] of an exact [`observer`], which computes per IP the intervals during which each
//! node answers (no sampling); [`invariants::check`] turns the report into [`Violation`]s of the
//! invariants I-safe, I-bounded, I-auth, I-failover, I-flap, I-announce, I-agree and I-converge.
//!
//! What is modelled ([`world`]):
//! - **membership network**: one UDP path per directed pair, latency drawn per datagram (so
//!   datagrams reorder), loss, symmetric and one-way cuts, partitions;
//! - **processes**: crash, SIGTERM (withdraw, explicit leave), restart with a new generation,
//!   SIGSTOP for any length (datagrams queue, timers fire late, the order in which the
//!   membership and the daemon run after SIGCONT is drawn from the seed), loss of carrier;
//! - **the responder**: each node's real per-interface state machine
//!   ([`ferrolb_l2::answer::iface::IfaceCore`]) on one L2 segment, with real frames: the owned
//!   set, epochs and lease of the core's outputs as the responder task applies them, the
//!   announcement schedule after a gain and the re-announcement of S4, signed gratuitous ARPs
//!   that reach the other nodes by Ethernet destination, the peer-claim yield on a proof that
//!   verifies under the cluster's claim keys, probes of fresh IPs, the lease re-checked before
//!   each leased frame goes out, frames queued while a process is stopped. The conflict policy's
//!   defence is not modelled (no foreign host holds an IP), and clients are the observer: it
//!   reads each interface's answer state instead of sending requests.
//! - **the API server**: one authoritative set of objects (Nodes Ready, one L2Advertisement for
//!   all nodes, one Service per IP at the start) and a watch per node with its own delay and
//!   outages; scripted changes: NotReady, the exclusion label, cordon and uncordon, a Node
//!   deleted and created again, the endpoint of an `externalTrafficPolicy: Local` Service
//!   moving, an L2Advertisement's node selectors, a Service's IP;
//! - **an outsider without the key**: forged ARP claims (a peer's MAC, no proof), replayed
//!   signed claims (a proof made a moment ago, as if captured on the LAN), a spoofed membership
//!   flood.
//!
//! What is not modelled yet (`docs/speaker.md`, "The decisions, sans-IO, and the cluster
//! simulator", keeps the list): speaker Pods appearing and going, a scheduler model of CPU
//! starvation beyond the shared-CPU queue, a compromised key holder.

pub mod invariants;
pub mod observer;
pub mod scenario;
pub mod search;
pub mod shrink;
pub mod world;

pub use invariants::{Violation, check};
pub use observer::Report;
pub use scenario::{Cpus, Fault, Scenario, Timed};
pub use world::run;
