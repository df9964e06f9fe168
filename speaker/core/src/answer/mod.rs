//! The responder's pure rules, shared by the speaker's packet tasks (`ferrolb_speaker::l2`, which
//! re-exports them under their old paths) and the cluster simulator (`speaker/sim`):
//!
//! - [`decide`]: what to answer to one received frame (RFC 826, RFC 4861 §7.2.3), and whether it
//!   claims an owned IP for another MAC (RFC 5227 §2.4 conflicts);
//! - [`conflict`]: the rate-limited reaction to another host's claim of an owned IP, and the
//!   bound on the `IPConflict` Events it writes, whatever the number of foreign MACs (issue #10
//!   item 5, issue #27 item 4);
//! - [`announce`]: when gratuitous ARPs and unsolicited Neighbor Advertisements go out after a
//!   gain (RFC 5227 §2.3-style burst, RFC 4861 §7.2.6 spacing for NAs);
//! - [`probe`]: probing a newly assigned IP before its first announcement (RFC 5227 §2.1.1,
//!   RFC 4862 §5.4 DAD);
//! - [`peers`]: which MAC is which peer speaker, and when an owner yields an IP a peer claims
//!   with a valid claim proof (DESIGN S15);
//! - [`iface`]: the per-interface state machine ([`iface::IfaceCore`]) that combines them: frames
//!   and timers in, frames to send and reports out, time as an input.

pub mod announce;
pub mod conflict;
pub mod decide;
pub mod iface;
pub mod peers;
pub mod probe;
