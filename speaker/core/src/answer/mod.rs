//! The responder's pure rules, shared by the speaker's packet tasks (`ferrolb_speaker::l2`, which
//! re-exports them under their old paths) and the cluster simulator (`speaker/sim`):
//!
//! - [`announce`]: when gratuitous ARPs and unsolicited Neighbor Advertisements go out after a
//!   gain (RFC 5227 §2.3-style burst, RFC 4861 §7.2.6 spacing for NAs);
//! - [`peers`]: which MAC is which peer speaker, and when an owner yields an IP a peer claims
//!   with a valid claim proof (DESIGN S15).

pub mod announce;
pub mod peers;
