//! Kubernetes glue: watches feeding in-memory stores ([`stores`]), leader election
//! ([`leader`]), writes of Service/pool status and Events ([`writer`]), and the control loop
//! that drives the allocator from the stores ([`control`]).

pub mod control;
pub mod leader;
pub mod stores;
pub mod writer;
