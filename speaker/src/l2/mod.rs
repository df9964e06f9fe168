//! Layer-2 announcements: ARP and NDP responders and gratuitous announcements on the node's
//! interfaces (DESIGN S4–S9).
//!
//! Pure parts (re-exported from `ferrolb_l2::answer`): [`iface`] (the per-interface state
//! machine the responder tasks execute: frames and timers in, frames out), [`decide`] (what to
//! answer to a frame, and whether it claims an owned IP for another MAC), [`conflict`] (the rate-limited reaction to such claims), [`announce`] (when to announce),
//! [`probe`] (probing a newly assigned IP before its first announcement), [`peers`] (yielding an
//! owned IP a peer speaker announces),
//! [`interfaces::select`] (which interfaces; [`exclusions`], the names the automatic set leaves out), the BPF programs and refcounts of [`socket`],
//! [`preflight::kernel_answers_arp`] (does the node's kernel answer ARP for an LB IP too).
//! I/O parts: [`socket`] (kernel-filtered `AF_PACKET` sockets), [`interfaces::scan`],
//! [`neighbours::dump`] (the kernel's neighbour table),
//! [`responder`] (the Tokio tasks), [`capture`] (a blocking client for probes and tests).
//!
//! For the glue:
//! ```text
//! let counters = Arc::new(Counters::default());
//! let responder = Responder::start(L2Config::default(), counters.clone())?;   // inside a Tokio runtime
//! responder.set_owned(BTreeMap::from([(vip, Interfaces::All)]));             // level-triggered, full set
//! responder.reannounce();                                                    // after a membership change
//! responder.carrier(&Interfaces::All);                                       // NodeFacts::carrier
//! counters.snapshot();                                                       // for /metrics
//! ```

pub mod candidate_probe;
pub mod capture;
pub mod counters;
pub mod exclusions;
pub mod interfaces;
pub mod neighbours;
pub mod preflight;
pub mod responder;
pub mod socket;

pub use ferrolb_l2::answer::{announce, conflict, decide, iface, peers, probe};

pub use announce::AnnounceSchedule;
pub use counters::{CounterSnapshot, Counters, IgnoreReason};
pub use responder::{InterfaceStatus, L2Config, Responder};
