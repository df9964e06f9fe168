//! ferrolb controller: assigns external IPs from `IPAddressPool`s to Services of type
//! LoadBalancer and writes their status (DESIGN §4).
//!
//! Pure modules (no `kube`, no `tokio`): [`ipam`] (the allocator), [`annotations`], [`service`]
//! (Service ↔ allocator translation), [`pool_status`], [`contest`] (no write wars over the
//! status, R8), [`events`], and [`plan`] (the planner: a snapshot of the watched objects in,
//! the writes out).
//!
//! I/O edges: [`k8s`] (watches, Lease, writes, control loop), [`http`], [`metrics`], [`config`];
//! the binary is `src/main.rs`.
pub mod annotations;
pub mod config;
pub mod contest;
pub mod events;
pub mod http;
pub mod ipam;
pub mod k8s;
pub mod metrics;
pub mod plan;
pub mod pool_status;
pub mod service;
