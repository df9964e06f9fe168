//! What [`super::SpeakerCore`] asks its executor to do, in order (sans-IO): the responder's owned
//! set, lease and probes, membership joins and leaves, and the notes the executor logs and counts.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::claim::Standing;
use crate::eligibility::Interfaces;
use crate::plan::Plan;

/// One command for the executor. Apply them in the order [`super::SpeakerCore::poll_output`]
/// returns them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Output {
    /// The responder answers for owned IPs until this instant (`Some(now)`: stop at once), then
    /// goes silent unless renewed: the bound on answering after this process stops stepping.
    /// The executor also cuts it at the quorum lease ([`Output::SetVoters`]).
    SetLease(Option<Instant>),
    /// The voting set changed: the executor keeps the responder's quorum lease
    /// ([`crate::claim::quorum_until`] over the membership's evidence and these voters) current
    /// between steps, as grants arrive, besides the step's own [`Output::SetLease`].
    SetVoters(BTreeSet<String>),
    /// Probe these IPs before their first announcement (RFC 5227 probes; issue #10 item 5).
    SetFresh(BTreeSet<IpAddr>),
    /// Answer for exactly these IPs, on these interfaces (empty: withdraw everything).
    SetOwned(BTreeMap<IpAddr, Interfaces>),
    /// Frames every [`Output::SetOwned`]: hand the membership
    /// ([`crate::membership::MembershipCore::set_handovers`]) the gains held back, per previous
    /// holder, and the IPs held. Apply in order: one before a `SetOwned` that adds IPs lists
    /// the old and new ones, the one after lists the new ones, so the membership never says
    /// this node let an IP go while its responder still answers for it (issue #32 G5.8).
    SetHandovers {
        /// Per previous holder's node name, the IPs held back waiting for it.
        asks: BTreeMap<String, BTreeSet<IpAddr>>,
        /// The IPs held: a superset of what the responder answers for while this applies.
        holding: BTreeSet<IpAddr>,
        /// The latest plan, `None` while the gate is closed
        /// ([`crate::membership::MembershipCore::set_plan`]).
        plan: Option<Arc<crate::plan::Plan>>,
        /// The revision of the API view in use ([`crate::view::View::revision`]), handed to
        /// `set_plan` with the plan.
        revision: u64,
    },
    /// Re-announce every owned IP at once (S4: after a membership change).
    Reannounce,
    /// Join or leave the membership.
    Membership(MembershipCommand),
    /// The gate is closed and everything was withdrawn: the executor's reporting state (Event
    /// and L2Announcement planners, gauges) starts over.
    Withdrawn,
    /// A new plan was made while the gate is open; emitted before the `SetFresh`/`SetOwned` it
    /// leads to. The executor reports from it (Events, L2Announcements, gauges, conflicts).
    Planned {
        /// The plan.
        plan: Arc<Plan>,
        /// The membership it was made with.
        alive: BTreeSet<String>,
    },
    /// Something worth a log line or a counter.
    Note(Note),
    /// This node's carrier report changed ([`crate::carrier`], issue #32 G5.5): hand it to the
    /// membership ([`crate::membership::MembershipCore::set_carrier_report`]), which sends it to
    /// every member. Comes after the owned set it changed.
    SetCarrier(crate::carrier::LinkReport),
}

/// Membership commands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MembershipCommand {
    /// Leave in the background, waiting at most `grace` for the leave datagrams (the step must
    /// not wait: a late tick reads as a stall). The executor drops the membership's receivers.
    Leave {
        /// How long the leave may take.
        grace: Duration,
    },
    /// Start a new membership with a new generation. If it cannot start, the executor reports
    /// [`super::SpeakerCore::join_failed`] and the core asks again on a later step.
    Join,
}

/// Log lines and counters, as values (the executor maps them to `tracing` and metrics).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Note {
    /// The others declared this speaker down; it withdraws and stays out for `hold_off`.
    DeclaredDownLeaving {
        /// How long it stays out of the membership.
        hold_off: Duration,
    },
    /// The others declared this speaker down right after a short pause of its own: it withdraws
    /// and converges again without leaving.
    DeclaredDownAfterPause,
    /// No announce interface has carrier: leaving the membership.
    CarrierLost,
    /// Rejoining the membership (carrier back, or the hold-off is over).
    Rejoining,
    /// The step found a gap of `gap` since the previous one (a stall, F4): withdrawn, leaving.
    Stalled {
        /// The gap between two steps.
        gap: Duration,
    },
    /// The claim gate's standing changed.
    Standing(Standing),
    /// The live set changed (logged once per change).
    MembershipChanged(BTreeSet<String>),
}
