//! What the executor observes and hands to [`super::SpeakerCore::step`]: one value per wake-up,
//! with every clock reading and every piece of I/O state already taken (sans-IO).

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::time::Instant;

/// Why the executor woke the core.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Wake {
    /// The timer of [`super::SpeakerCore::poll_timeout`] fired and nothing else happened.
    Tick,
    /// The API view changed (the executor has called [`super::SpeakerCore::set_view`]).
    ViewChanged,
    /// The membership's live set changed.
    MembersChanged,
    /// A member event arrived. `restarted_peer` is true for `Up` or `Restarted` of another node:
    /// a peer that restarted may have announced our IPs while it converged, so every IP this node
    /// still owns is re-announced (S4, issue #8 F1).
    MemberEvent {
        /// Another node came up or restarted with a new generation.
        restarted_peer: bool,
    },
    /// A previous holder replied about an IP this node holds back
    /// ([`MembershipObservation::handover_replies`]).
    HandoverReply,
}

impl Wake {
    /// Every wake-up but the bare tick re-plans at once.
    pub fn is_event(&self) -> bool {
        !matches!(self, Wake::Tick)
    }
}

/// What the membership showed at this wake-up (`None` in [`Observation::membership`] while this
/// speaker is out of it: left, or its start failed).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MembershipObservation {
    /// Names of the alive members (foca's active set: Alive and Suspect), this node included.
    pub alive: BTreeSet<String>,
    /// How many times foca has rejoined this node with a new identity since the membership
    /// started: it grows when the others declared this node down (the counter
    /// `self_rejoins` of [`crate::membership::CountersSnapshot`]).
    pub self_rejoins: u64,
    /// Two-way evidence: per peer name, until when its latest lease grant counts
    /// ([`crate::membership::MembershipCore::evidence`], issue #32 G1). Only peers with valid
    /// evidence count toward convergence and the majority, and the lease ends with the evidence
    /// of a majority of the voters ([`crate::claim::quorum_until`]).
    pub evidence: BTreeMap<String, Instant>,
    /// Handover replies (issue #32 G5.8): per (previous holder's node name, IP) this node holds
    /// back, the holder's latest answer
    /// ([`crate::membership::MembershipCore::handover_replies`]): released (claim at once) or
    /// still answered for there (keep waiting, up to [`super::HANDOVER_HOLD_MAX`]).
    pub handover_replies: BTreeMap<(String, IpAddr), crate::membership::lease::HandoverReply>,
    /// Per IP this node holds back for a third node, the member with a strictly newer view
    /// that asked for it ([`crate::membership::MembershipCore::handover_askers`]): the gain is
    /// then waited on that member instead (issue #32 G5.8).
    pub askers: BTreeMap<IpAddr, crate::membership::lease::HandoverAsker>,
    /// Per member, the revision of its API view as its latest grant said
    /// ([`crate::membership::MembershipCore::peer_revisions`]).
    pub revisions: BTreeMap<String, u64>,
    /// Per IP of our plan, the requester our latest grant released it to and when
    /// ([`crate::membership::MembershipCore::releases_given`]): for
    /// [`super::RELEASE_MEMORY`] after it, that requester is the IP's holder even while a
    /// report says it has withdrawn.
    pub releases_given: crate::membership::lease::ReleasesGiven,
    /// Members whose latest lease grant listed exactly the members in `alive`
    /// ([`crate::membership::MembershipCore::agreeing`]): when those with evidence and this
    /// node make a majority of the voters, a voter none of them lists counts as heard of for
    /// convergence (F1; issue #32: a restart while another speaker is down).
    pub agreeing: BTreeSet<String>,
    /// The members' carrier reports, by node name: the listed identities' latest
    /// ([`crate::membership::MembershipCore::carrier_reports`], issue #32 G5.5). A member
    /// without one is judged as before G5.5 ([`crate::carrier`]).
    pub carriers: crate::carrier::Carriers,
}

/// Everything one step needs besides the API view: taken by the executor right before
/// [`super::SpeakerCore::step`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Observation {
    /// Why the executor woke.
    pub wake: Wake,
    /// Whether any announce interface has carrier (`Responder::carrier(&Interfaces::All)`).
    pub carrier: bool,
    /// This node's interfaces as observed now, before the hold-down of regained carrier
    /// (issue #32 G5.5, [`crate::carrier`]): what the executor's interface scan says.
    pub links: crate::carrier::LinkReport,
    /// The membership, while this speaker is in it.
    pub membership: Option<MembershipObservation>,
    /// Wall-clock seconds since the Unix epoch, read once: the voter memory is seeded against the
    /// Nodes' `lastTransitionTime` ([`crate::claim::Voters::seed`]).
    pub wall_secs: i64,
    /// IPs a stored `L2Announcement` report says another host holds (`heldBy` set): probed before
    /// they are announced, whoever owns them now (issue #10 item 5).
    pub held_reported: BTreeSet<IpAddr>,
}
