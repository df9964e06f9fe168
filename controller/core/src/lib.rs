//! ferrolb-ipam: the controller's pure core — the allocator (DESIGN §4) and the write-war policy
//! (R8). No `kube`, no `tokio` (`crds/tests/purity.rs` checks the dependency tree); the
//! `ferrolb-controller` crate feeds it from its watches and re-exports it as
//! `ferrolb_controller::ipam` (and [`contest`] as `ferrolb_controller::contest`).
//!
//! - [`free_set`]: free addresses of one pool and family as intervals (R12);
//! - [`layout`]: which pool owns which address after overlaps (R9) and Node addresses (R10);
//! - [`pool`]: a parsed pool and its `serviceAllocation` admission test (R4);
//! - [`request`]: what a Service asks for;
//! - [`sharing`]: when two Services may share an IP (R2);
//! - [`outcome`]: failure reasons and notes that become Events (R14);
//! - [`choice`]: candidate pools and per-family picks for one Service (R2–R5), as a plan (`pick`);
//! - [`engine`]: the index and the level-triggered reconcile pass (R1–R11);
//! - [`contest`]: no write wars over a Service's status (R8).

pub mod choice;
pub mod contest;
pub mod engine;
pub mod free_set;
pub mod layout;
pub mod outcome;
mod pick;
pub mod pool;
pub mod request;
pub mod sharing;

#[cfg(test)]
mod tests;

pub use engine::{Assignment, Gone, Ipam, PoolReport};
pub use outcome::{Failure, NoPool, NotHandedOut, Note, ServiceNote};
pub use pool::PoolConfig;
pub use request::{
    Backend, FamilyPolicy, ObservedStatus, PortKey, Ports, ServiceKey, ServiceRequest,
};
