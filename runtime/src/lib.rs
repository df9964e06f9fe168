//! The operational surface shared by `ferrolb-controller` and `ferrolb-speaker` (issue #9), so
//! both binaries look the same to an operator: the same flag names and environment variables for
//! shared settings ([`SharedArgs`]), one log format flag and one log filter variable written to
//! stderr ([`logging`]), the same admin endpoints with the same content types ([`admin`]), the
//! same API client construction ([`client`]), shutdown on SIGTERM/SIGINT ([`shutdown`]), trimmed watch stores ([`reflector`]), Event
//! publishing with byte-limited notes and a bounded cache ([`events`]) and a
//! startup line plus `build_info` metric with version and commit ([`build_info`]).

pub mod admin;
pub mod args;
pub mod build_info;
pub mod client;
pub mod duration;
pub mod events;
pub mod logging;
pub mod reflector;
pub mod shutdown;

pub use args::SharedArgs;
