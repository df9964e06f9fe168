//! Two-way evidence and the quorum lease (issue #32 G1, G2). Pure: time comes in as an argument.
//!
//! SWIM tells a speaker which members are alive, but not that *they* can hear *it*: a node whose
//! outgoing or incoming path is cut still lists its peers as alive until it has probed each of
//! them, one probe period at a time, so an isolated owner used to keep answering (and counting a
//! majority) for about ⌈N/2⌉ probe periods after the others had replaced it. The lease fixes that
//! with a direct, timed exchange:
//!
//! - every [`lease_heartbeat`](super::MembershipConfig::lease_heartbeat) a speaker sends each
//!   active member a [`LeaseMsg::Request`] addressed to that member's current identity, and
//!   remembers the monotonic instant `p` at which it sent round `seq`;
//! - a member answers with a [`LeaseMsg::Grant`] only if the request is addressed to its own
//!   current identity and comes from an identity that is active in its own SWIM view (a peer
//!   that has declared the requester down grants nothing);
//! - a grant for round `seq`, addressed to the requester's current identity, is **evidence**
//!   about the granting member that is valid until `p + L`
//!   ([`lease`](super::MembershipConfig::lease)). The lease runs from when the *request* was
//!   sent, not from when the grant arrived, so a grant delayed in the network never extends it
//!   (the leader-lease argument of Chubby and Raft: the granter considered the requester alive at
//!   some instant after `p`).
//!
//! A speaker counts a peer toward convergence and the majority only while it holds evidence
//! from it ([`Evidence::valid_at`]; hearing of a peer through third-party gossip is not
//! evidence: G1), and it answers for its IPs only while evidence from a majority of the voters
//! is valid ([`crate::claim::quorum_until`]: G2), whatever its member list says. With `L`
//! shorter than the quickest declaration of death (one probe period plus the suspicion
//! timeout), an owner cut off from the majority has stopped answering before anyone can have
//! declared it down and claimed its IPs.
//!
//! Replays need no cache here: a replayed grant names a round that is either still outstanding
//! (then it proves nothing new: the same `p`) or forgotten, and a replayed request only makes
//! its addressee send one more grant to the real requester.

use std::collections::{BTreeMap, VecDeque};
use std::net::IpAddr;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::identity::SpeakerId;

/// A lease message, carried in a sealed envelope (kind byte [`KIND_LEASE`], postcard body).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum LeaseMsg {
    /// "Do you still consider me alive?", sent to one member's current identity.
    Request {
        /// The requester's current identity.
        src: SpeakerId,
        /// The addressee's identity as the requester knows it.
        dst: SpeakerId,
        /// The requester's heartbeat round.
        seq: u64,
        /// IPs the requester's plan gives it that it holds back because the addressee held them
        /// under its previous plan (break before make; at most [`MAX_ASKS`]): "do you still
        /// answer for these?" Empty almost always.
        asks: Vec<IpAddr>,
        /// The revision of the API view the requester's plan was made from
        /// ([`crate::view::View::revision`]; 0: unknown, and from speakers before it): a holder
        /// that holds one of `asks` back for the requester releases it when this view is the
        /// newer ([`newer_view`]).
        rev: u64,
    },
    /// "Yes", the reply to a [`LeaseMsg::Request`], addressed to the requester's identity.
    Grant {
        /// The granter's current identity.
        src: SpeakerId,
        /// The requester's identity, copied from the request.
        dst: SpeakerId,
        /// The round of the request answered.
        seq: u64,
        /// Those of the request's `asks` the granter did not answer for when it granted: it
        /// has let them go, so the requester may claim them at once instead of waiting out
        /// the stall threshold (issue #32 G5.8, API skew).
        released: Vec<IpAddr>,
        /// [`member_list_digest`] of the members the granter lists alive when it grants
        /// (itself included); `None` from speakers before it. A restarted speaker whose own
        /// list matches a majority's needs not wait for the voters they all left out (issue
        /// #32 F1: a voter that is down).
        members: Option<u64>,
        /// The revision of the API view the granter's plan was made from (0: unknown, and from
        /// speakers before it): a requester whose holder's view is the newer waits for it
        /// without [`crate::node::HANDOVER_HOLD_MAX`] ([`newer_view`]).
        rev: u64,
    },
    /// "I suspect you", sent with each lease request to a member this speaker lists as
    /// suspect, addressed to that member's current identity. SWIM's suspect refutes a
    /// suspicion when it hears of it; the suspicion's own gossip is spent after
    /// `max_transmissions`, and a suspicion raised while its holder was cut off never reached
    /// the suspect at all: held (postponed) for a suspect that keeps granting, it stayed
    /// listed, and a later one-way cut between the two turned it into a "down" at once (the
    /// simulator's 100,000-scenario run, partition seed 4096: two answerers for 50 µs).
    /// The suspect refutes (foca raises its incarnation) and the next message it sends ends
    /// the suspicion. Speakers before it drop this variant as undecodable, and nothing else
    /// depends on it.
    Suspected {
        /// The suspecter's current identity.
        src: SpeakerId,
        /// The suspect's identity as the suspecter lists it.
        dst: SpeakerId,
        /// The incarnation at which `src` lists `dst` as suspect (foca's `Incarnation`).
        incarnation: u16,
    },
}

/// Per IP of the granter's plan, the requester its latest grant released the IP to and the
/// instant of that grant ([`super::MembershipCore::releases_given`], issue #32 G5.8).
pub type ReleasesGiven = BTreeMap<IpAddr, (String, Instant)>;

/// A holder's answer to one ask ([`LeaseMsg::Request::asks`]), as the asker records it
/// ([`super::MembershipCore::handover_replies`], issue #32 G5.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HandoverReply {
    /// When the request this grant answered was sent (the grant came after).
    pub sent: Instant,
    /// `true`: the holder neither answered for the IP nor held it back when it granted.
    /// `false`: it still did.
    pub released: bool,
    /// The revision of the holder's API view when it granted ([`LeaseMsg::Grant::rev`]; 0:
    /// unknown).
    pub rev: u64,
}

/// A request about an IP this speaker holds back for a third node, from a member whose view is
/// strictly newer than ours (issue #32 G5.8, [`super::MembershipCore::handover_askers`]): the
/// newer view gives the IP to the requester, and the node we wait for may never release it to
/// us (its own view gives it to the requester too), so the core waits on the requester instead
/// (`SpeakerCore`'s handover, "deferred to a newer view").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandoverAsker {
    /// The requester's node name.
    pub from: String,
    /// The revision of the requester's API view ([`LeaseMsg::Request::rev`]), larger than ours.
    pub rev: u64,
    /// When the request arrived (monotonic).
    pub at: Instant,
}

/// Whether the API view at revision `a_rev` of the speaker named `a` is newer than `b`'s at
/// `b_rev` (issue #32 G5.8, the mutual hold): the larger revision, and between equal ones the
/// larger name, so that of two speakers exactly one is the newer and both agree which. `None`
/// when either revision is unknown (0): the caller keeps the rules without it.
///
/// Two speakers whose views each give them an IP, each waiting for the other that held it
/// under its previous view, used to wait for each other until the later watch caught up
/// (silent for up to two watch lags). One of the two views is stale, and the one that has read
/// further into the API server's history is the one to follow: the older view's holder releases
/// to the newer one, and a gain whose holder's view is newer waits for it without a cap (its own
/// view is the one that lags). Equal revisions (a deletion raises no object's resourceVersion
/// in a store) are broken by name: either view may be the stale one, and exactly one claims.
pub fn newer_view(a: &str, a_rev: u64, b: &str, b_rev: u64) -> Option<bool> {
    (a_rev != 0 && b_rev != 0).then(|| (a_rev, a) > (b_rev, b))
}

/// The `members` value of a grant from a speaker whose gate is closed (no plan): it vouches
/// for no member list, so it never counts as agreeing (issue #32 F1). A real digest equal to it
/// (probability 2^-64) would only make that list never agree: the gate then waits, as before.
pub const GATE_CLOSED: u64 = 0;

/// A digest of a member list (node names): SipHash-1-3 with fixed keys over the sorted names,
/// each followed by a 0 byte. Two speakers that list the same names get the same digest on any
/// platform; different lists collide with probability 2^-64.
pub fn member_list_digest<'a>(names: impl IntoIterator<Item = &'a String>) -> u64 {
    use std::hash::Hasher;
    let mut sorted: Vec<&String> = names.into_iter().collect();
    sorted.sort();
    sorted.dedup();
    let mut h =
        siphasher::sip::SipHasher13::new_with_keys(0x0066_6572_726f_6c62, 0x006d_656d_6265_7273);
    for n in sorted {
        h.write(n.as_bytes());
        h.write_u8(0);
    }
    h.finish()
}

impl LeaseMsg {
    /// Decodes a lease body. Speakers before the handover fields (protocol 2 and early 3)
    /// encode `Request`/`Grant` without `asks`/`released`/`members`; such a body decodes with
    /// them empty,
    /// so a mixed roll-out keeps its leases. (Older speakers read ours too: postcard ignores the
    /// trailing field.)
    ///
    /// # Errors
    ///
    /// The postcard error of the current layout when neither layout decodes.
    pub fn decode(body: &[u8]) -> Result<Self, postcard::Error> {
        postcard::from_bytes::<Self>(body).or_else(|error| {
            postcard::from_bytes::<UnversionedLeaseMsg>(body)
                .map(Self::from)
                .or_else(|_| postcard::from_bytes::<LegacyLeaseMsg>(body).map(Self::from))
                .map_err(|_| error)
        })
    }
}

/// [`LeaseMsg`] as speakers between issue #32 G5.8's handover fields and the view revisions
/// encode it (no `rev`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum UnversionedLeaseMsg {
    Request {
        src: SpeakerId,
        dst: SpeakerId,
        seq: u64,
        asks: Vec<IpAddr>,
    },
    Grant {
        src: SpeakerId,
        dst: SpeakerId,
        seq: u64,
        released: Vec<IpAddr>,
        members: Option<u64>,
    },
    Suspected {
        src: SpeakerId,
        dst: SpeakerId,
        incarnation: u16,
    },
}

impl From<UnversionedLeaseMsg> for LeaseMsg {
    fn from(m: UnversionedLeaseMsg) -> Self {
        match m {
            UnversionedLeaseMsg::Request {
                src,
                dst,
                seq,
                asks,
            } => Self::Request {
                src,
                dst,
                seq,
                asks,
                rev: 0,
            },
            UnversionedLeaseMsg::Grant {
                src,
                dst,
                seq,
                released,
                members,
            } => Self::Grant {
                src,
                dst,
                seq,
                released,
                members,
                rev: 0,
            },
            UnversionedLeaseMsg::Suspected {
                src,
                dst,
                incarnation,
            } => Self::Suspected {
                src,
                dst,
                incarnation,
            },
        }
    }
}

/// [`LeaseMsg`] as speakers before issue #32 G5.8 encode it (same variants, no handover
/// fields).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
enum LegacyLeaseMsg {
    Request {
        src: SpeakerId,
        dst: SpeakerId,
        seq: u64,
    },
    Grant {
        src: SpeakerId,
        dst: SpeakerId,
        seq: u64,
    },
}

impl From<LegacyLeaseMsg> for LeaseMsg {
    fn from(m: LegacyLeaseMsg) -> Self {
        match m {
            LegacyLeaseMsg::Request { src, dst, seq } => Self::Request {
                src,
                dst,
                seq,
                asks: Vec::new(),
                rev: 0,
            },
            LegacyLeaseMsg::Grant { src, dst, seq } => Self::Grant {
                src,
                dst,
                seq,
                released: Vec::new(),
                members: None,
                rev: 0,
            },
        }
    }
}

/// Most IPs one lease request asks about: keeps a request far below the membership's packet
/// size (an IPv6 address costs 17 bytes in postcard). IPs beyond it wait the stall threshold,
/// as without asking.
pub const MAX_ASKS: usize = 32;

/// First plaintext byte of a sealed foca message.
pub const KIND_SWIM: u8 = 0;
/// First plaintext byte of a sealed [`LeaseMsg`].
pub const KIND_LEASE: u8 = 1;

/// The evidence one speaker holds about its peers: rounds of requests still within the lease,
/// and per peer name the instant until which its latest grant counts.
#[derive(Debug, Clone, Default)]
pub struct Evidence {
    next_seq: u64,
    /// Rounds sent within the last lease: `(seq, sent at)`, oldest first.
    rounds: VecDeque<(u64, Instant)>,
    until: BTreeMap<String, Instant>,
    /// Per peer name, when the grant arrived that started its current unbroken run of valid
    /// evidence ([`Evidence::valid_throughout`]).
    since: BTreeMap<String, Instant>,
    /// Bumped whenever `until` changes ([`Evidence::version`]).
    version: u64,
}

impl Evidence {
    /// Starts a new round at `now` and returns its number; rounds older than `lease` are
    /// forgotten (a grant for them could not count any more).
    pub fn start_round(&mut self, now: Instant, lease: Duration) -> u64 {
        let seq = self.next_seq;
        self.next_seq = self.next_seq.wrapping_add(1);
        while self
            .rounds
            .front()
            .is_some_and(|(_, at)| now.saturating_duration_since(*at) >= lease)
        {
            self.rounds.pop_front();
        }
        self.rounds.push_back((seq, now));
        seq
    }

    /// A grant of round `seq` from `peer` arrived at `now`: its evidence runs until the
    /// round's send instant plus `lease`. Returns whether that extended it (unknown or
    /// forgotten rounds do nothing). A grant that finds the peer's evidence lapsed (or none)
    /// starts a new unbroken run at `now`.
    pub fn grant(&mut self, peer: &str, seq: u64, lease: Duration, now: Instant) -> bool {
        let Some((_, sent)) = self.rounds.iter().find(|(s, _)| *s == seq) else {
            return false;
        };
        let Some(until) = sent.checked_add(lease) else {
            return false;
        };
        match self.until.get_mut(peer) {
            Some(t) if *t >= until => false,
            Some(t) => {
                if *t <= now {
                    self.since.insert(peer.to_owned(), now);
                }
                *t = until;
                self.version = self.version.wrapping_add(1);
                true
            }
            None => {
                self.until.insert(peer.to_owned(), until);
                self.since.insert(peer.to_owned(), now);
                self.version = self.version.wrapping_add(1);
                true
            }
        }
    }

    /// When round `seq` was sent, while it is within the lease.
    pub fn round_sent(&self, seq: u64) -> Option<Instant> {
        self.rounds
            .iter()
            .find(|(s, _)| *s == seq)
            .map(|(_, at)| *at)
    }

    /// Forgets everything (our identity changed: grants to the old one count no more; or we
    /// left).
    pub fn reset(&mut self) {
        self.rounds.clear();
        self.until.clear();
        self.since.clear();
        self.version = self.version.wrapping_add(1);
    }

    /// A number that changes whenever [`Evidence::until`] does (a grant that extended a peer's
    /// evidence, a reset), so that a caller can cache what it computes from it: the quorum
    /// lease ([`crate::claim::quorum_until`]) of the same evidence and voters at a later
    /// instant is the same instant, or that later instant once it has passed.
    pub fn version(&self) -> u64 {
        self.version
    }

    /// Per peer name, the instant until which its evidence counts (possibly past).
    pub fn until(&self) -> &BTreeMap<String, Instant> {
        &self.until
    }

    /// Whether `peer`'s evidence is valid at `now`.
    pub fn valid_at(&self, peer: &str, now: Instant) -> bool {
        self.until.get(peer).is_some_and(|t| now < *t)
    }

    /// Whether `peer`'s evidence has been valid without a break from `from` (or earlier) to
    /// `now`. Conservative: a run starts when the grant that began it *arrived*.
    pub fn valid_throughout(&self, peer: &str, from: Instant, now: Instant) -> bool {
        self.valid_at(peer, now) && self.since.get(peer).is_some_and(|s| *s <= from)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn a_grant_counts_from_when_its_request_was_sent() {
        let t0 = Instant::now();
        let lease = 150 * MS;
        let mut e = Evidence::default();
        let s0 = e.start_round(t0, lease);
        let s1 = e.start_round(t0 + 50 * MS, lease);
        assert!(e.grant("b", s1, lease, t0 + 60 * MS));
        assert_eq!(e.until()["b"], t0 + 200 * MS);
        assert!(
            !e.grant("b", s0, lease, t0 + 70 * MS),
            "an older round never shortens nor extends"
        );
        assert!(e.valid_at("b", t0 + 199 * MS));
        assert!(!e.valid_at("b", t0 + 200 * MS));
        assert!(!e.valid_at("c", t0));
        assert!(!e.grant("b", 99, lease, t0 + 70 * MS), "unknown round");
        e.start_round(t0 + 200 * MS, lease);
        assert!(!e.grant("c", s0, lease, t0 + 200 * MS), "forgotten round");
        e.reset();
        assert!(!e.valid_at("b", t0));
    }

    /// An unbroken run starts when the grant that found the evidence lapsed arrived; a grant
    /// that extends valid evidence keeps the run going.
    #[test]
    fn evidence_is_valid_throughout_only_since_its_last_break() {
        let t0 = Instant::now();
        let lease = 150 * MS;
        let mut e = Evidence::default();
        let s0 = e.start_round(t0, lease);
        assert!(e.grant("b", s0, lease, t0 + 10 * MS));
        let s1 = e.start_round(t0 + 100 * MS, lease);
        assert!(
            e.grant("b", s1, lease, t0 + 110 * MS),
            "extends valid evidence"
        );
        assert!(e.valid_throughout("b", t0 + 10 * MS, t0 + 200 * MS));
        assert!(!e.valid_throughout("b", t0 + 9 * MS, t0 + 200 * MS));
        // Lapsed at t0 + 250 ms; the next grant arrives at t0 + 330 ms.
        let s2 = e.start_round(t0 + 300 * MS, lease);
        assert!(!e.valid_throughout("b", t0 + 10 * MS, t0 + 260 * MS));
        assert!(e.grant("b", s2, lease, t0 + 330 * MS));
        assert!(
            !e.valid_throughout("b", t0 + 10 * MS, t0 + 340 * MS),
            "the break counts"
        );
        assert!(e.valid_throughout("b", t0 + 330 * MS, t0 + 340 * MS));
        assert!(!e.valid_throughout("c", t0, t0));
    }

    /// A mixed roll-out: lease bodies of speakers before the handover fields, or before the
    /// view revisions, decode with them empty (0), and theirs read ours (postcard ignores the
    /// trailing fields).
    #[test]
    fn lease_bodies_without_the_handover_fields_still_decode() {
        let id = |n: &str, last: u8| {
            SpeakerId::with_generation(n, std::net::SocketAddr::from(([192, 0, 2, last], 7947)), 1)
                .unwrap()
        };
        let (a, b) = (id("node-a", 1), id("node-b", 2));
        let old = LegacyLeaseMsg::Grant {
            src: a.clone(),
            dst: b.clone(),
            seq: 7,
        };
        let body = postcard::to_allocvec(&old).unwrap();
        assert_eq!(
            LeaseMsg::decode(&body).unwrap(),
            LeaseMsg::Grant {
                src: a.clone(),
                dst: b.clone(),
                seq: 7,
                released: Vec::new(),
                members: None,
                rev: 0,
            }
        );
        let unversioned = UnversionedLeaseMsg::Grant {
            src: a.clone(),
            dst: b.clone(),
            seq: 8,
            released: vec![IpAddr::from([198, 51, 100, 2])],
            members: Some(5),
        };
        let body = postcard::to_allocvec(&unversioned).unwrap();
        assert_eq!(
            LeaseMsg::decode(&body).unwrap(),
            LeaseMsg::Grant {
                src: a.clone(),
                dst: b.clone(),
                seq: 8,
                released: vec![IpAddr::from([198, 51, 100, 2])],
                members: Some(5),
                rev: 0,
            }
        );
        let new = LeaseMsg::Request {
            src: a.clone(),
            dst: b.clone(),
            seq: 9,
            asks: vec![IpAddr::from([198, 51, 100, 1])],
            rev: 41,
        };
        let body = postcard::to_allocvec(&new).unwrap();
        assert_eq!(LeaseMsg::decode(&body).unwrap(), new);
        let LegacyLeaseMsg::Request { seq, .. } = postcard::from_bytes(&body).unwrap() else {
            panic!("a request stays a request for an older speaker");
        };
        assert_eq!(seq, 9);
        let UnversionedLeaseMsg::Request { asks, .. } = postcard::from_bytes(&body).unwrap() else {
            panic!("a request stays a request for a speaker before the revisions");
        };
        assert_eq!(asks, vec![IpAddr::from([198, 51, 100, 1])]);
        let grant = LeaseMsg::Grant {
            src: a,
            dst: b,
            seq: 10,
            released: Vec::new(),
            members: Some(3),
            rev: 42,
        };
        let body = postcard::to_allocvec(&grant).unwrap();
        assert_eq!(LeaseMsg::decode(&body).unwrap(), grant);
        let UnversionedLeaseMsg::Grant { members, .. } = postcard::from_bytes(&body).unwrap()
        else {
            panic!("a grant stays a grant for a speaker before the revisions");
        };
        assert_eq!(members, Some(3));
        assert!(LeaseMsg::decode(&[0xff; 3]).is_err());
    }

    /// Exactly one of two speakers has the newer view, and both agree which; an unknown
    /// revision decides nothing.
    #[test]
    fn of_two_views_exactly_one_is_newer() {
        for (a_rev, b_rev) in [(5, 4), (4, 5), (7, 7)] {
            let ab = newer_view("node-a", a_rev, "node-b", b_rev).unwrap();
            let ba = newer_view("node-b", b_rev, "node-a", a_rev).unwrap();
            assert_ne!(ab, ba, "{a_rev} {b_rev}");
        }
        assert_eq!(newer_view("node-a", 5, "node-b", 4), Some(true));
        assert_eq!(
            newer_view("node-a", 7, "node-b", 7),
            Some(false),
            "the larger name"
        );
        assert_eq!(newer_view("node-a", 0, "node-b", 4), None);
        assert_eq!(newer_view("node-a", 3, "node-b", 0), None);
    }
}
