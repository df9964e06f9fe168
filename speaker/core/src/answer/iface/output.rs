//! What [`super::IfaceCore`] asks its executor to do: frames to send and facts to count, record
//! or log. The executor (`ferrolb_speaker::l2::responder`, or the cluster simulator) turns each
//! into I/O; none of them carries a decision left to the executor except the lease re-check of
//! [`Transmit::leased`] frames at the instant of sending ([`super::lease_allows`]).

use std::collections::BTreeSet;
use std::net::IpAddr;

use crate::answer::decide::Claim;
use crate::answer::probe::Verdict;
use crate::wire::MacAddr;

/// Which socket a frame goes out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Proto {
    /// The interface's ARP socket (IPv4, RFC 826).
    Arp,
    /// The interface's NDP socket (IPv6, RFC 4861).
    Ndp,
}

impl Proto {
    /// The socket that carries frames about `ip`.
    pub fn of(ip: IpAddr) -> Proto {
        if ip.is_ipv4() { Proto::Arp } else { Proto::Ndp }
    }
}

/// Why a frame is sent; the executor counts it under the matching counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransmitKind {
    /// An ARP reply to a request for an owned IP (RFC 826).
    ArpReply,
    /// A solicited Neighbor Advertisement (RFC 4861 §7.2.4).
    NeighborAdvertisement,
    /// A gratuitous ARP announcing an owned IP (RFC 5227 §3; request and reply forms).
    GratuitousArp,
    /// An unsolicited Neighbor Advertisement announcing an owned IP (RFC 4861 §7.2.6).
    UnsolicitedNa,
    /// An address probe before the first announcement (RFC 5227 §2.1.1 ARP probe, RFC 4862
    /// §5.4 DAD NS).
    AddressProbe,
}

/// One frame to send on the interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The socket.
    pub proto: Proto,
    /// The whole Ethernet frame.
    pub frame: Vec<u8>,
    /// Why (the counter).
    pub kind: TransmitKind,
    /// The IP the frame announces, defends or probes (`None` for answers to requests).
    pub ip: Option<IpAddr>,
    /// Whether the frame speaks for an owned IP (answers, announcements, defences): the executor
    /// reads the clock immediately before sending it and sends it only if [`super::lease_allows`]
    /// still holds then, so a frame that waited through a stall (SIGSTOP) is never sent on a
    /// stale lease. Probes speak for nobody and are not leased.
    pub leased: bool,
}

/// An output of [`super::IfaceCore`], in the order the core produced them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IfaceOutput {
    /// Send a frame.
    Transmit(Transmit),
    /// A received frame not answered, or an announcement not sent: count it under this drop
    /// label (the `arp_…`/`ndp_…` parse errors, [`crate::answer::decide::IgnoreReason::label`],
    /// [`super::LEASE_EXPIRED`]).
    Dropped(&'static str),
    /// Another MAC claimed an owned or probed IP: count it by [`Claim::kind`]; record it as a
    /// conflict sighting when `record` (not for probes: an election handover probes too, and
    /// not for answers to this node's own probe, which the probe itself judges).
    Conflict {
        /// The claim.
        claim: Claim,
        /// Record a sighting for the conflict policy.
        record: bool,
    },
    /// A claim with a proof that did not verify, or by a peer's MAC without any proof: counted
    /// (`unproven_claims`), never yielded to (DESIGN S15).
    UnprovenClaim(Claim),
    /// A proven claim by a peer speaker made this node yield `ip` until `until` (DESIGN S15);
    /// `first` when the IP was not yielded already (the executor logs it once).
    PeerYield {
        /// The IP.
        ip: IpAddr,
        /// The claiming MAC.
        mac: MacAddr,
        /// Yielded until (monotonic).
        until: std::time::Instant,
        /// Not yielded before this claim.
        first: bool,
    },
    /// A probe round ended ([`crate::answer::probe`]): `Free` → the IP is announced now, and the
    /// executor forgets what it remembered about it; `InUse` → held while `mac` answers.
    ProbeVerdict {
        /// The IP.
        ip: IpAddr,
        /// The verdict.
        verdict: Verdict,
    },
    /// The set of owned IPs being probed (or held) on this interface changed.
    Probing(BTreeSet<IpAddr>),
    /// A defensive announcement of this IP was sent ([`super::IfaceCore::defend`]).
    Defended(IpAddr),
    /// An announcement went out (`n` = announcements of this schedule so far), for debug logs.
    Announced {
        /// The IP.
        ip: IpAddr,
        /// Announcements of the current schedule.
        n: usize,
    },
}
