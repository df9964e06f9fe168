//! Kubernetes glue: watches feeding in-memory stores ([`stores`]; the Services' one re-reads
//! them when the pools start reading another label, [`service_watch`]), leader election
//! ([`leader`]), writes of Service/pool status and Events ([`writer`]), the control loop that
//! drives the allocator from the stores ([`control`]), and the release of every status we wrote
//! when ferrolb is uninstalled ([`uninstall`], issue #14), and the speakers' membership-key
//! Secret, created when absent ([`memberlist_secret`], issue #27); the Kubernetes version floor,
//! checked at start-up ([`version`]).

pub mod control;
pub mod leader;
pub mod memberlist_secret;
pub mod service_watch;
pub mod stores;
pub mod uninstall;
pub mod version;
pub mod writer;
