//! ferrolb controller: assigns external IPs from `IPAddressPool`s to Services of type
//! LoadBalancer and writes their status (DESIGN §4).
//!
//! The allocator and the write-war policy are the pure crate `ferrolb-ipam` (no `kube`, no
//! `tokio`), re-exported here as [`ipam`] and [`contest`]. Other pure modules: [`annotations`]
//! (the shared rule of `ferrolb-crds`), [`announcements`] (the speakers' stale reports),
//! [`service`] (Service ↔ allocator translation), [`service_labels`] (the Service labels kept),
//! [`pool_status`], [`events`] (Event texts and reasons), and
//! [`plan`] (the planner: a snapshot of the watched objects in, the writes out).
//!
//! I/O edges: [`k8s`] (watches, Lease, writes, control loop), [`http`], [`metrics`], [`config`];
//! the binary is `src/main.rs`.
pub mod annotations;
pub mod announcements;
pub mod config;
pub mod conflicts;
pub mod events;
pub use ferrolb_ipam as ipam;
pub use ferrolb_ipam::contest;
pub mod http;
pub mod k8s;
pub mod metrics;
pub mod plan;
pub mod pool_status;
pub mod service;
pub mod service_labels;
