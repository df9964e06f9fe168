//! The sans-IO membership state machine (DESIGN §5 S3): foca plus sealing, replay protection,
//! peer announcements, timers and the alive set. Pure: no sockets, no tokio; time comes in as a
//! [`Clock`] argument and datagrams go out through [`MembershipCore::take_outgoing`], so the
//! whole protocol can be driven by a simulated network in tests.
//!
//! Driving contract (what `ferrolb_speaker::membership::agent` does):
//! 1. feed every received datagram, with its source address, to
//!    [`MembershipCore::handle_datagram`];
//! 2. call [`MembershipCore::handle_timers`] whenever [`MembershipCore::next_deadline`] passes;
//! 3. feed the current peer addresses to [`MembershipCore::set_peers`] whenever they change;
//! 4. after each call, send [`MembershipCore::take_outgoing`] and publish
//!    [`MembershipCore::alive`] / [`MembershipCore::take_events`];
//! 5. on shutdown call [`MembershipCore::leave`] and send what it produced.

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Instant;

use foca::{AccumulatingRuntime, Codec, Foca, Message, NoCustomBroadcast, OwnedNotification};
use foca::{PostcardCodec, State, Timer};
use rand::SeedableRng;
use rand::rngs::StdRng;

use super::budget::{OpenBudget, SourceFilter};
use super::carrier::{CarrierBook, CarrierMsg, KIND_CARRIER, KIND_CARRIER_RELAY, RelayMsg};
use super::config::{ConfigError, MembershipConfig};
use super::counters::{Counter, Counters};
use super::envelope::{OVERHEAD, OpenError, Opener, Sealer, check_framing};
use super::hello::{
    Fingerprint, HELLO_INTERVAL, Hello, KIND_HELLO, MAX_FINGERPRINTS, MIN_PROTOCOL, Mismatch,
    PROTOCOL, Timings,
};
use super::identity::{MAX_NODE_NAME_LEN, SpeakerId};
use super::key::KeyRing;
use super::lease::{
    Evidence, HandoverAsker, HandoverReply, KIND_LEASE, KIND_SWIM, LeaseMsg, ReleasesGiven,
};
use super::replay::{ReplayError, ReplayGuard};
use super::timers::TimerQueue;

type Swim = Foca<SpeakerId, PostcardCodec, StdRng, NoCustomBroadcast>;

/// Whether `timer` would declare a suspect member down.
/// Whether `hello` supersedes `held`, the newest hello held for the same node name (issue #32
/// G5.4). One identity numbers its hellos ([`Hello::seq`]), so from the same identity the
/// higher number wins, whatever the sender's wall clock did. From another identity, the one the
/// membership lists now wins (`listed`: foca settled which incarnation is current, e.g. a
/// renewal, or a restart after a wall-clock step back that started with a smaller generation),
/// or else the newer generation.
fn hello_is_newer(hello: &Hello, held: &Hello, listed: bool) -> bool {
    if hello.src == held.src {
        hello.seq > held.seq
    } else {
        listed || hello.src.generation > held.src.generation
    }
}

fn is_suspicion(timer: &Timer<SpeakerId>) -> bool {
    matches!(timer, Timer::ChangeSuspectToDown { .. })
}

/// Most times one suspicion is postponed because it ran out while this speaker was not running
/// ([`MembershipCore::handle_timers`]).
pub const MAX_POSTPONEMENTS: u32 = 4;

/// How many times a leaving speaker sends its leave to every active member
/// ([`MembershipCore::leave`]): 2, so one lost datagram does not leave a member to learn it
/// second-hand. Costs `2 × (members − 1)` datagrams once per shut-down.
pub const LEAVE_ROUNDS: usize = 2;

/// Most peer names whose hello is remembered (only key holders can add one).
pub const MAX_HELLOS: usize = 4096;

/// How long a peer's hello is remembered after it arrived: three [`HELLO_INTERVAL`]s, so a
/// peer that keeps saying hello (a member, or a refused peer announcing itself) is never
/// forgotten between two of them.
pub const HELLO_MEMORY: std::time::Duration = std::time::Duration::from_secs(30);

/// The two clocks the state machine needs, read once per call by the driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Clock {
    /// Monotonic time, for foca's timers.
    pub mono: Instant,
    /// Wall-clock milliseconds since the Unix epoch, for sealed timestamps and replay checks.
    pub wall_ms: u64,
}

/// A sealed datagram to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    /// Destination (the member's advertised UDP address).
    pub to: SocketAddr,
    /// The sealed bytes (see [`super::envelope`]).
    pub datagram: Vec<u8>,
}

/// A change of the alive member set, by node name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum MembershipEvent {
    /// The node's speaker became alive (joined, or came back after being down).
    Up(String),
    /// The node's speaker was declared down (crash, partition) or left explicitly.
    Down(String),
    /// The node's speaker restarted with a newer generation while it was alive: still a member,
    /// but its state (e.g. what it announces) may have been reset.
    Restarted(String),
}

/// Why an incoming datagram was not fed to (or was refused by) foca. Each is counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DropReason {
    /// Framing is wrong or the datagram is larger than any member sends.
    #[error("malformed")]
    Malformed,
    /// The source IP is neither a configured peer's nor a current member's (checked before
    /// any decryption; config `admit_only_peers`).
    #[error("unknown source")]
    UnknownSource,
    /// Authentic and fresh, but over the budget of its authenticated sender (config
    /// `max_opens_per_second`, `max_other_opens_per_second`). Checked only *after*
    /// authentication and the replay check, so a datagram nobody authenticated never spends a
    /// member's budget (DESIGN S15: a spoofed flood of a member's own `IP:port` must not crowd
    /// out that member's real datagrams).
    #[error("over the sender's budget")]
    RateLimited,
    /// No key authenticates it.
    #[error("authentication failed")]
    AuthFailed,
    /// Authentic, but its timestamp is outside the replay window.
    #[error("stale timestamp")]
    Stale,
    /// Authentic, but already accepted once.
    #[error("replayed")]
    Replayed,
    /// Authentic, but addressed to another member.
    #[error("addressed to another member")]
    Misdirected,
    /// Authentic, but its UDP source (IP and port; an IPv4-mapped source counts as its IPv4
    /// form) is not the address of the sender identity sealed inside it
    /// ([`SpeakerId::is_sent_from`]): a key holder speaking for another member from its own
    /// address (issue #27 item 3). Checked for every kind of message right after
    /// authentication, before the replay cache, the budget, foca, the lease, the hellos and the
    /// carrier reports, so such a datagram changes no state.
    #[error("sent from another address than its sender's")]
    WrongSource,
    /// Authentic, but foca refused it (undecodable, from ourselves, …).
    #[error("refused by SWIM")]
    Rejected,
    /// We have left the cluster and ignore everything.
    #[error("member has left")]
    Left,
}

/// The membership state machine of one speaker.
pub struct MembershipCore {
    foca: Swim,
    runtime: AccumulatingRuntime<SpeakerId>,
    timers: TimerQueue<Timer<SpeakerId>>,
    /// Suspicions postponed because they ran out while we were not running, per (member,
    /// incarnation): how many times ([`MAX_POSTPONEMENTS`]).
    postponed: std::collections::HashMap<(SpeakerId, foca::Incarnation), u32>,
    /// One sealer per key of the ring, the primary first ([`Self::seal_key_for`]).
    sealers: Vec<Sealer>,
    /// Per peer address, the key of our ring its latest authenticated SWIM datagram was opened
    /// with (only while our ring holds more than one key; at most [`MAX_HELLOS`] entries).
    heard_keys: std::collections::HashMap<SocketAddr, usize>,
    opener: Opener,
    nonce_rng: StdRng,
    replay: ReplayGuard,
    counters: Arc<Counters>,
    config: MembershipConfig,
    peers: BTreeSet<SocketAddr>,
    sources: SourceFilter,
    budget: OpenBudget,
    /// Member addresses last given to `sources` and `budget`.
    admitted_members: BTreeSet<SocketAddr>,
    next_peer_announce: Option<Instant>,
    alive: BTreeSet<String>,
    /// [`super::lease::member_list_digest`] of `alive`, made when `alive` changes (every grant
    /// carries it, and [`Self::agreeing`] compares it).
    alive_digest: u64,
    events: Vec<MembershipEvent>,
    outbox: Vec<Outgoing>,
    left: bool,
    /// Grants received, per peer (issue #32 G1, G2; see [`super::lease`]).
    evidence: Evidence,
    /// When the next round of lease requests is due (`None` until the first `process`).
    next_heartbeat: Option<Instant>,
    /// What our hellos say (issue #32 G5.4, [`super::hello`]): our timings and the
    /// fingerprints of our keys, the primary first.
    own_timings: Timings,
    own_keys: Vec<Fingerprint>,
    /// Per peer name, the newest hello heard ([`hello_is_newer`]): when it arrived, the hello.
    /// At most [`MAX_HELLOS`] names; forgotten [`HELLO_MEMORY`] after the last one.
    hellos: BTreeMap<String, (Instant, Hello)>,
    /// The [`Hello::seq`] of our next hello.
    hello_seq: u64,
    /// The voters of the majority rule, by node name, as the speaker's core last named them
    /// ([`Self::set_voters`]); empty until then.
    voters: BTreeSet<String>,
    /// How many times [`Self::process`] ran (what a datagram costs, in tests).
    #[cfg(test)]
    processed: u64,
    /// Member identities a hello went to since the last [`HELLO_INTERVAL`] round.
    greeted: std::collections::HashSet<SpeakerId>,
    /// Whether the member list, the hellos, the keys, `greeted` or `left` may have changed
    /// since [`Self::process`] last sent owed hellos and carrier reports and recomputed the
    /// alive set. foca changes its member list only with a notification, so a step without
    /// one skips that work (it ran at every datagram: a fifth of the simulator's time at 10
    /// nodes).
    members_dirty: bool,
    /// When the next round of hellos is due.
    next_hello_round: Option<Instant>,
    /// Carrier reports, ours and the peers' (issue #32 G5.5, [`super::carrier`]).
    carrier: CarrierBook,
    /// Handover asks ([`Self::set_handovers`]): per holder name, the IPs we wait to claim.
    asks: BTreeMap<String, Vec<IpAddr>>,
    /// The IPs this speaker answers for now ([`Self::set_handovers`]).
    holding: BTreeSet<IpAddr>,
    /// The revision of the API view [`Self::plan`] was made from ([`Self::set_plan`]).
    revision: u64,
    /// Per member name, the view revision its latest grant carried ([`Self::peer_revisions`]).
    revisions: BTreeMap<String, u64>,
    /// The newest suspicion of ours a peer told us of ([`LeaseMsg::Suspected`]) that we
    /// refuted: our identity then and the incarnation suspected. A repeat of it (the suspecter
    /// has not heard the refutation yet) refutes nothing new.
    refuted: Option<(SpeakerId, foca::Incarnation)>,
    /// This speaker's latest plan ([`Self::set_plan`]): whom its own view gives an asked IP.
    plan: Option<Arc<crate::plan::Plan>>,
    /// The holders' latest replies to our asks ([`Self::handover_replies`]).
    replies: BTreeMap<(String, IpAddr), HandoverReply>,
    /// Per IP we hold back for a third node, the newest-view requester that asked about it
    /// ([`Self::handover_askers`]).
    askers: BTreeMap<IpAddr, HandoverAsker>,
    /// Per IP of our plan, the requester our latest grant released it to and when
    /// ([`Self::releases_given`]).
    given: ReleasesGiven,
    /// Per IP in `given`, the sequence number of the request the release answered.
    given_seq: BTreeMap<IpAddr, u64>,
    /// Per granter's node name, the member-list digest its latest grant carried
    /// ([`Self::agreeing`]).
    list_digests: BTreeMap<String, u64>,
}

impl MembershipCore {
    /// A fresh member with identity `identity`, not yet joined (alive set = itself). Random
    /// numbers (foca's member choice and the nonces) come from the OS-seeded `StdRng` CSPRNG.
    ///
    /// # Errors
    /// [`ConfigError`] if `config` is inconsistent.
    pub fn new(
        identity: SpeakerId,
        config: MembershipConfig,
        keys: &KeyRing,
        counters: Arc<Counters>,
    ) -> Result<Self, ConfigError> {
        Self::with_rngs(
            identity,
            config,
            keys,
            counters,
            rand::make_rng(),
            rand::make_rng(),
        )
    }

    /// Like [`MembershipCore::new`] with a fixed seed, for deterministic simulations only
    /// (nonces become predictable; every member must use a different seed).
    ///
    /// # Errors
    /// [`ConfigError`] if `config` is inconsistent.
    pub fn with_seed(
        identity: SpeakerId,
        config: MembershipConfig,
        keys: &KeyRing,
        counters: Arc<Counters>,
        seed: u64,
    ) -> Result<Self, ConfigError> {
        Self::with_rngs(
            identity,
            config,
            keys,
            counters,
            StdRng::seed_from_u64(seed),
            StdRng::seed_from_u64(seed ^ 0x9e37_79b9_7f4a_7c15),
        )
    }

    fn with_rngs(
        identity: SpeakerId,
        config: MembershipConfig,
        keys: &KeyRing,
        counters: Arc<Counters>,
        foca_rng: StdRng,
        nonce_rng: StdRng,
    ) -> Result<Self, ConfigError> {
        let foca_config = config.to_foca()?;
        let own_timings = Timings::from_durations(
            config.probe_period,
            config.probe_rtt,
            config.suspect_timeout,
        );
        let alive = BTreeSet::from([identity.name.clone()]);
        counters.set_members(alive.len());
        Ok(Self {
            foca: Foca::new(identity, foca_config, foca_rng, PostcardCodec),
            runtime: AccumulatingRuntime::new(),
            timers: TimerQueue::default(),
            postponed: std::collections::HashMap::new(),
            sealers: keys.keys().iter().map(Sealer::new).collect(),
            heard_keys: std::collections::HashMap::new(),
            opener: Opener::new(keys),
            nonce_rng,
            replay: ReplayGuard::new(config.replay_window_ms(), config.replay_cache_capacity),
            counters,
            peers: BTreeSet::new(),
            sources: SourceFilter::new(config.admit_only_peers),
            budget: OpenBudget::new(
                config.max_opens_per_second,
                config.max_other_opens_per_second,
            ),
            admitted_members: BTreeSet::new(),
            next_peer_announce: None,
            alive_digest: super::lease::member_list_digest(&alive),
            alive,
            events: Vec::new(),
            outbox: Vec::new(),
            left: false,
            evidence: Evidence::default(),
            next_heartbeat: None,
            own_timings,
            own_keys: keys
                .keys()
                .iter()
                .map(super::key::Key::fingerprint)
                .collect(),
            hellos: BTreeMap::new(),
            hello_seq: 0,
            voters: BTreeSet::new(),
            #[cfg(test)]
            processed: 0,
            greeted: std::collections::HashSet::new(),
            members_dirty: true,
            next_hello_round: None,
            carrier: CarrierBook::default(),
            asks: BTreeMap::new(),
            holding: BTreeSet::new(),
            revision: 0,
            revisions: BTreeMap::new(),
            refuted: None,
            plan: None,
            replies: BTreeMap::new(),
            askers: BTreeMap::new(),
            given: BTreeMap::new(),
            given_seq: BTreeMap::new(),
            list_digests: BTreeMap::new(),
            config,
        })
    }

    /// Our current identity (its generation grows if the cluster declared us down and we
    /// rejoined).
    pub fn identity(&self) -> &SpeakerId {
        self.foca.identity()
    }

    /// Alive members by node name, ourselves included; empty after [`MembershipCore::leave`].
    pub fn alive(&self) -> &BTreeSet<String> {
        &self.alive
    }

    /// [`super::lease::member_list_digest`] of [`Self::alive`]: equal digests mean equal lists
    /// (a collision has probability 2^-64), so a caller can see a change without comparing
    /// the lists.
    pub fn alive_digest(&self) -> u64 {
        self.alive_digest
    }

    /// The two-way evidence this speaker holds: per peer name, until when its latest lease grant
    /// counts ([`super::lease`]). Empty after a rejoin or [`MembershipCore::leave`].
    pub fn evidence(&self) -> &BTreeMap<String, Instant> {
        self.evidence.until()
    }

    /// Changes whenever [`Self::evidence`] does, within one `MembershipCore`
    /// ([`super::lease::Evidence::version`]).
    pub fn evidence_version(&self) -> u64 {
        self.evidence.version()
    }

    /// Whether [`MembershipCore::leave`] was called.
    pub fn has_left(&self) -> bool {
        self.left
    }

    /// The shared counters.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }

    /// The peer addresses currently configured (our own address excluded).
    pub fn peers(&self) -> &BTreeSet<SocketAddr> {
        &self.peers
    }

    /// Replaces the keys (e.g. after the Secret-mounted key file changed): the new ring's first
    /// key seals from now on and all its keys open. Remembered nonces are kept. Every member
    /// gets a new hello with the new fingerprints at the next call that processes, and peers
    /// are judged again against the new primary key.
    pub fn set_keys(&mut self, keys: &KeyRing) {
        self.members_dirty = true;
        self.sealers = keys.keys().iter().map(Sealer::new).collect();
        self.heard_keys.clear();
        self.opener = Opener::new(keys);
        self.own_keys = keys
            .keys()
            .iter()
            .map(super::key::Key::fingerprint)
            .collect();
        self.greeted.clear();
        self.refresh_alive(Vec::new());
    }

    /// Sets the voters of the majority rule (node names; the speaker core's `SetVoters`,
    /// level-triggered): [`Self::cut_off`] counts against them, so a speaker that lists few
    /// members (just rejoined, its own sends lost) but hears from fewer than half of the voters
    /// knows it is the one cut off and declares nobody down (issue #32 G1).
    pub fn set_voters(&mut self, voters: BTreeSet<String>) {
        self.voters = voters;
    }

    /// The handover state of this speaker (issue #32 G5.8): `asks`, per holder node name, the
    /// IPs its plan gives it but that it holds back because that node held them (break before
    /// make); `holding`, the IPs it answers for now. Each lease request to a holder asks about
    /// (at most [`super::lease::MAX_ASKS`] of) its IPs, and each grant this speaker sends says
    /// which of the requester's asks are not in `holding`. Releases of IPs no longer asked
    /// about are forgotten. An IP is released only to the node this speaker's own plan gives
    /// it, or when it gives it nobody ([`Self::set_plan`]).
    pub fn set_handovers(
        &mut self,
        asks: BTreeMap<String, BTreeSet<IpAddr>>,
        holding: BTreeSet<IpAddr>,
    ) {
        self.replies
            .retain(|(holder, ip), _| asks.get(holder).is_some_and(|ips| ips.contains(ip)));
        self.askers
            .retain(|ip, _| asks.values().any(|ips| ips.contains(ip)));
        self.asks = asks
            .into_iter()
            .map(|(holder, ips)| {
                let ips = ips.into_iter().take(super::lease::MAX_ASKS).collect();
                (holder, ips)
            })
            .collect();
        self.holding = holding;
    }

    /// This speaker's latest plan (issue #32 G5.8), `None` while it plans nothing (gate
    /// closed). A grant releases an asked IP only to the node this plan gives it (or when it
    /// gives it nobody, or there is no plan): a holder whose view has handed the IP to a third
    /// node never tells a requester whose view lags that it may claim it.
    ///
    /// `revision` is that of the API view the plan was made from
    /// ([`crate::view::View::revision`]): sent with every lease request and grant, it decides a
    /// mutual hold ([`super::lease::newer_view`]).
    pub fn set_plan(&mut self, plan: Option<Arc<crate::plan::Plan>>, revision: u64) {
        if let Some(p) = plan.as_ref() {
            self.given.retain(|ip, _| p.ips.contains_key(ip));
            self.given_seq.retain(|ip, _| p.ips.contains_key(ip));
        }
        self.plan = plan;
        self.revision = revision;
    }

    /// The holders' replies (issue #32 G5.8): per (holder name, IP) asked about, the latest
    /// grant's answer — released, or still answered for (or held back) there — with the send
    /// instant of the request it answered. The grant was sent after that instant, so a release
    /// says the holder had let the IP go at some moment after it.
    pub fn handover_replies(&self) -> &BTreeMap<(String, IpAddr), HandoverReply> {
        &self.replies
    }

    /// Per IP this speaker holds back for a node other than the requester (issue #32 G5.8), the
    /// requester with the newest view that asked about it since, if its view is strictly newer
    /// than ours (the largest revision; the latest request between equal ones). Such a
    /// request is not granted — the IP is held back for someone else — but the core then waits
    /// on the requester instead of the node it held the IP back for, and asks it; the mutual
    /// hold that follows releases the IP to the newer view. Forgotten when the IP is no longer
    /// held back ([`Self::set_handovers`]).
    pub fn handover_askers(&self) -> &BTreeMap<IpAddr, HandoverAsker> {
        &self.askers
    }

    /// The releases this speaker gave (issue #32 G5.8): per IP of its plan, the requester its
    /// latest grant that released the IP was sent to, and the instant (monotonic) of that grant.
    /// The requester may claim the IP once the grant arrives, so for a while after it the
    /// requester is the IP's holder whatever a carrier report of its received since says: that
    /// report may have been sent before the request (a stale "withdrawn"), and taking the IP
    /// back at once would make two answerers ([`crate::node::SpeakerCore`] asks it first).
    /// Bounded by the plan's IPs; forgotten when the plan no longer has the IP, and when a later
    /// request from the requester carries no revision (its gate closed since: it dropped what it
    /// was given and answers nothing).
    pub fn releases_given(&self) -> &ReleasesGiven {
        &self.given
    }

    /// The revision this speaker sends: its plan's view's, or 0 (none) while its gate is closed
    /// — a speaker with no plan vouches for no view (found by an attack: a node cut off from
    /// the majority, its gate closed, was still asked as "the newest view" and kept a failover
    /// waiting for as long as the cut lasted).
    fn view_revision(&self) -> u64 {
        if self.plan.is_some() {
            self.revision
        } else {
            0
        }
    }

    /// Per member name, the revision of the API view its latest grant to us was made from
    /// ([`LeaseMsg::Grant::rev`]; members whose grants carry none are left out). A gain whose
    /// holder had the newer view and went down asks the member with the newest view instead
    /// (issue #32 G5.8).
    pub fn peer_revisions(&self) -> &BTreeMap<String, u64> {
        &self.revisions
    }

    /// Members whose gate is open and whose latest lease grant said they list exactly the
    /// members this speaker lists alive now ([`Self::alive`];
    /// [`super::lease::member_list_digest`]; a speaker with its gate closed sends
    /// [`super::lease::GATE_CLOSED`] instead, so peers that are starting themselves never count). A voter that a
    /// majority of the voters agreeing with us leaves out is one they have declared down or
    /// never heard of: a restarted speaker's gate need not wait for it (issue #32 F1). Pair it
    /// with the lease evidence: only a grant within the lease says anything about now.
    pub fn agreeing(&self) -> BTreeSet<String> {
        if self.left {
            return BTreeSet::new();
        }
        let ours = self.alive_digest;
        self.list_digests
            .iter()
            .filter(|(_, d)| **d == ours && **d != super::lease::GATE_CLOSED)
            .map(|(n, _)| n.clone())
            .collect()
    }

    /// Peers whose configuration disagrees with ours (issue #32 G5.4, [`super::hello`]), by node
    /// name — refused unless [`Mismatch::refuses`] says it is only reported (a key-ring
    /// disagreement): every peer whose latest hello (within [`HELLO_MEMORY`]) disagrees with ours,
    /// whatever identity it holds now (a peer renewed after being declared down, or restarted,
    /// keeps its judgement until its next hello, which it sends at once). Members among them
    /// are left out of [`Self::alive`] and of the lease; the others (e.g. a peer that cannot
    /// open our datagrams, which SWIM soon declares down) are listed so that they can be
    /// reported.
    ///
    /// Under our own name: [`Mismatch::SameName`] while the membership lists another member
    /// under this speaker's node name at another address (issue #29 O6; reported only).
    pub fn refused(&self) -> BTreeMap<String, Mismatch> {
        if self.left {
            return BTreeMap::new();
        }
        let me = self.identity();
        let twin = self
            .foca
            .iter_members()
            .map(foca::Member::id)
            .find(|id| id.name == me.name && id.addr != me.addr)
            .map(|id| (me.name.clone(), Mismatch::SameName { addr: id.addr }));
        self.hellos
            .iter()
            .filter_map(|(name, (_, hello))| Some((name.clone(), self.judge(hello)?)))
            .chain(twin)
            .collect()
    }

    /// Why the member `id` is refused: judged by name on its latest hello (see
    /// [`Self::refused`]).
    fn mismatch_of(&self, id: &SpeakerId) -> Option<Mismatch> {
        let (_, hello) = self.hellos.get(&id.name)?;
        self.judge(hello).filter(Mismatch::refuses)
    }

    fn judge(&self, hello: &Hello) -> Option<Mismatch> {
        hello.mismatch(self.own_timings, self.own_keys.first()?)
    }

    /// Our next hello to `dst` (a member's identity, or a placeholder for a peer address).
    fn hello_to(&mut self, dst: SpeakerId) -> Hello {
        let seq = self.hello_seq;
        self.hello_seq = self.hello_seq.wrapping_add(1);
        Hello {
            src: self.identity().clone(),
            dst,
            seq,
            protocol: PROTOCOL,
            min_protocol: MIN_PROTOCOL,
            timings: self.own_timings,
            keys: self.own_keys.clone(),
        }
    }

    /// Replaces the set of peer addresses (level-triggered: the complete set now, e.g. every
    /// Node's InternalIP with the membership port). Announces at once to new peers that are not
    /// alive members, and from then on every `peer_announce_interval` to any peer that is not.
    /// Our own advertised address is ignored. Removing a peer never removes a member: a member
    /// leaves only by failing, or leaving, in SWIM.
    pub fn set_peers(&mut self, peers: impl IntoIterator<Item = SocketAddr>, now: Clock) {
        let own = self.identity().addr;
        let peers: BTreeSet<SocketAddr> = peers.into_iter().filter(|p| *p != own).collect();
        let new: Vec<SocketAddr> = peers.difference(&self.peers).copied().collect();
        self.peers = peers;
        self.sources.set_peers(&self.peers);
        if self.left {
            return;
        }
        let member_addrs = self.member_addrs();
        for peer in new {
            if !member_addrs.contains(&peer) {
                self.announce_to(peer, now);
            }
        }
        if self.next_peer_announce.is_none() {
            self.next_peer_announce =
                Some(self.after(now.mono, self.config.peer_announce_interval));
        }
    }

    /// Processes one datagram received from `from` (the source address the socket reported).
    /// Never panics, whatever the bytes or the source.
    ///
    /// Checks, cheapest first (see `docs/membership.md`): size and framing and source admission
    /// (no cryptography), then authentication (the Poly1305 tag is verified before anything is
    /// decrypted), the sender's address (the sealed sender identity must be at `from`:
    /// [`DropReason::WrongSource`]), replay, the authenticated sender's budget, destination and
    /// foca. Nothing a datagram without a valid tag carries changes any state: not a budget, not
    /// the replay cache, not foca's; nor does an authentic one sent from another address than
    /// its sender's.
    ///
    /// # Errors
    /// The [`DropReason`] when the datagram was dropped (it is counted as well).
    pub fn handle_datagram(
        &mut self,
        datagram: &[u8],
        from: SocketAddr,
        now: Clock,
    ) -> Result<(), DropReason> {
        self.counters.bump(Counter::DatagramsIn);
        if let Err(reason) = self.admit(datagram, from) {
            self.count_drop(reason);
            return Err(reason);
        }
        let result = self.accept(datagram, from, now);
        match result {
            Ok(()) => self.process(now),
            // foca refused it: it may have queued datagrams or timers before refusing.
            Err(DropReason::Rejected) => {
                self.count_drop(DropReason::Rejected);
                self.process(now);
            }
            // Dropped before any state changed (a forgery, a replay, an exhausted budget, a
            // misdirected one): nothing to process. A flood of them costs the tag check alone,
            // not a pass over the members (issue #32 G4).
            Err(reason) => self.count_drop(reason),
        }
        result
    }

    /// The checks that run before any cryptography; they change no state at all (a forger can
    /// spoof any source, so nothing here may be spendable), and a datagram they drop needs no
    /// [`MembershipCore::process`] either.
    fn admit(&self, datagram: &[u8], from: SocketAddr) -> Result<(), DropReason> {
        if self.left {
            return Err(DropReason::Left);
        }
        if datagram.len() > self.config.max_packet_size.saturating_add(OVERHEAD)
            || check_framing(datagram).is_err()
        {
            return Err(DropReason::Malformed);
        }
        if !self.sources.admits(from) {
            return Err(DropReason::UnknownSource);
        }
        Ok(())
    }

    fn count_drop(&self, reason: DropReason) {
        self.counters.bump(match reason {
            DropReason::Malformed => Counter::DroppedMalformed,
            DropReason::UnknownSource => Counter::DroppedUnknownSource,
            DropReason::RateLimited => Counter::DroppedRateLimited,
            DropReason::AuthFailed => Counter::DroppedAuth,
            DropReason::Stale => Counter::DroppedStale,
            DropReason::Replayed => Counter::DroppedReplayed,
            DropReason::Misdirected => Counter::DroppedMisdirected,
            DropReason::WrongSource => Counter::DroppedWrongSource,
            DropReason::Rejected | DropReason::Left => Counter::DroppedRejected,
        });
    }

    /// Authentication onwards, for a datagram from `from` that [`MembershipCore::admit`] let
    /// through.
    fn accept(&mut self, datagram: &[u8], from: SocketAddr, now: Clock) -> Result<(), DropReason> {
        let opened = self.opener.open(datagram).map_err(|e| match e {
            OpenError::Malformed => DropReason::Malformed,
            OpenError::AuthFailed => DropReason::AuthFailed,
        })?;
        let Some((&kind, body)) = opened.payload.split_first() else {
            return Err(DropReason::Malformed);
        };
        // Every message names its sender's identity (foca's header always names the sender
        // itself, also when it relays an indirect probe); it must be at `from` (issue #27 item
        // 3). Decoded before the replay check, so a datagram refused here changes no state.
        let rejected = |_| DropReason::Rejected;
        let sender = match kind {
            KIND_SWIM => {
                Codec::<SpeakerId>::decode_header(&mut PostcardCodec, body)
                    .map_err(|_| DropReason::Rejected)?
                    .src
            }
            KIND_LEASE => {
                let msg = LeaseMsg::decode(body).map_err(rejected)?;
                let (LeaseMsg::Request { src, .. }
                | LeaseMsg::Grant { src, .. }
                | LeaseMsg::Suspected { src, .. }) = &msg;
                if !src.is_sent_from(from) {
                    return Err(DropReason::WrongSource);
                }
                // No replay check for lease messages (the lease module says why).
                return self.handle_lease(msg, now);
            }
            KIND_HELLO => postcard::from_bytes::<Hello>(body).map_err(rejected)?.src,
            KIND_CARRIER => {
                postcard::from_bytes::<CarrierMsg>(body)
                    .map_err(rejected)?
                    .src
            }
            KIND_CARRIER_RELAY => {
                postcard::from_bytes::<RelayMsg>(body)
                    .map_err(rejected)?
                    .via
            }
            _ => return Err(DropReason::Malformed),
        };
        if !sender.is_sent_from(from) {
            return Err(DropReason::WrongSource);
        }
        self.replay
            .check(&opened.nonce, opened.sent_at_ms, now.wall_ms)
            .map_err(|e| match e {
                ReplayError::Stale => DropReason::Stale,
                ReplayError::Replayed => DropReason::Replayed,
            })?;
        if kind == KIND_HELLO {
            return self.handle_hello(body, now.mono);
        }
        if kind == KIND_CARRIER || kind == KIND_CARRIER_RELAY {
            let (me, foca) = (self.foca.identity(), &self.foca);
            let listed = |id: &SpeakerId| foca.iter_members().any(|m| m.id() == id);
            let changed = if kind == KIND_CARRIER {
                self.carrier.receive(body, me, listed, now.mono)?
            } else {
                self.carrier.receive_relay(body, me, listed, now.mono)?
            };
            if changed && !self.left {
                // Passed on at once to the members that may not have it (a one-way cut).
                self.send_carrier(now);
            }
            return Ok(());
        }
        let swim = body;
        let header = Codec::<SpeakerId>::decode_header(&mut PostcardCodec, swim)
            .map_err(|_| DropReason::Rejected)?;
        if header.src.name.is_empty() || header.src.name.len() > MAX_NODE_NAME_LEN {
            return Err(DropReason::Rejected);
        }
        self.heard_with(header.src.addr, opened.key);
        // The budget of the sender the tag proves (a key holder): bounds foca's work for a
        // member that floods, and can be spent by nobody else.
        if !self.budget.try_open(header.src.addr, now.mono) {
            return Err(DropReason::RateLimited);
        }
        // foca itself ignores, silently, payloads for another identity; checking here counts
        // them (e.g. a datagram captured on its way to one member and replayed to another).
        let for_us = header.dst == *self.identity()
            || (header.message == Message::Announce && header.dst.addr == self.identity().addr);
        if !for_us {
            return Err(DropReason::Misdirected);
        }
        self.foca
            .handle_data(swim, &mut self.runtime)
            .map_err(|error| {
                tracing::debug!(%error, from = ?header.src, "membership: datagram refused by foca");
                DropReason::Rejected
            })
    }

    /// The earliest instant at which [`MembershipCore::handle_timers`] has work.
    pub fn next_deadline(&self) -> Option<Instant> {
        [
            self.timers.next_deadline(),
            self.next_peer_announce,
            self.next_heartbeat.filter(|_| !self.left),
            self.next_hello_round.filter(|_| !self.left),
            self.carrier.next_round().filter(|_| !self.left),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    /// Runs every timer due at `now.mono`: foca's protocol timers and the peer re-announce.
    ///
    /// **A late suspicion is postponed, not acted on.** foca's `ChangeSuspectToDown` timer that
    /// runs more than half a suspicion timeout after it was due means this process was not
    /// running when the suspicion ran out (CPU starvation, a pause): the suspect had no fair
    /// chance to refute through us, and our own slowness is the likelier cause. It is scheduled
    /// again one suspicion timeout later instead of declaring the member down, at most
    /// [`MAX_POSTPONEMENTS`] times per suspicion: a starved survivor still declares a crashed
    /// peer down within five suspicion timeouts (Lifeguard caps its multiplier the same way),
    /// which matters where no healthy speaker is left to do it (two nodes) (counted in
    /// [`CountersSnapshot::suspicions_postponed`](super::counters::CountersSnapshot)). Without
    /// it, a starved speaker declared healthy peers down, and its gossip made every other
    /// speaker drop them too (lab attack A12: each healthy node declared down ~55 times a
    /// minute). The idea is SWIM's Lifeguard "local health" extension (Dadgar et al., 2017),
    /// reduced to the one decision that hurts others; the healthy side still declares the
    /// starved speaker down on time.
    pub fn handle_timers(&mut self, now: Clock) {
        let late_after = self.config.suspect_timeout / 2;
        // A suspicion covers one probe period (the failed probe) and the suspicion timeout.
        let suspicion_span = self
            .config
            .probe_period
            .saturating_add(self.config.suspect_timeout);
        while let Some((due, timer)) = self.timers.pop_due_with_deadline(now.mono) {
            let late = now.mono.saturating_duration_since(due) > late_after;
            if self.stale_suspicion(&timer) {
                // The suspect refuted (or is gone): foca 2.0.0 would still send it a
                // `TurnUndead` ("you are down") from this timer, and the healthy member would
                // renew its identity and give up its IPs (issue #32: the steady-loss flapping).
                self.counters.bump(Counter::SuspicionsStale);
                continue;
            }
            if is_suspicion(&timer)
                && (now
                    .mono
                    .checked_sub(suspicion_span)
                    .is_none_or(|from| self.cut_off(now.mono, from))
                    || self.answered_lately(&timer, now.mono))
            {
                // We have not held two-way evidence from half of our members throughout the
                // suspicion (its failed probe included): the likelier story is that *we* were
                // cut off, not that they all failed — also just after a heal, when the
                // suspect has had no chance to hear of the suspicion and refute it (the
                // 100,000-scenario run, partition seed 8939: a suspicion raised while isolated
                // ran out 20 ms after the heal, and two nodes answered for 50 µs). A down notice of
                // ours would spread the moment the link heals (foca's Down is final for an
                // identity) and make healthy owners rejoin and lose their IPs; hold it until
                // we hear a majority again (issue #32 G1). Nor is a suspect that has answered
                // our own lease request within the lease declared down: that is direct proof it
                // is alive, fresher than its refutation, which travels by gossip.
                self.counters.bump(Counter::SuspicionsPostponed);
                self.hold_suspicion(now.mono, timer);
                continue;
            }
            if self.postpone(&timer, late) {
                self.counters.bump(Counter::SuspicionsPostponed);
                tracing::debug!(late = ?now.mono.saturating_duration_since(due), "membership: suspicion ran out while this speaker was not running; postponed");
                self.hold_suspicion(now.mono, timer);
                continue;
            }
            if let Err(error) = self.foca.handle_timer(timer, &mut self.runtime) {
                tracing::debug!(%error, "membership: timer handling reported an error");
            }
            self.process(now);
        }
        if !self.left && self.next_heartbeat.is_some_and(|at| at <= now.mono) {
            self.next_heartbeat = Some(self.after(now.mono, self.config.lease_heartbeat()));
            self.send_lease_requests(now);
        }
        if !self.left && self.next_hello_round.is_some_and(|at| at <= now.mono) {
            self.next_hello_round = Some(self.after(now.mono, HELLO_INTERVAL));
            // Everyone hears from us again; hellos of names that are no members are forgotten.
            self.greeted.clear();
            self.members_dirty = true;
            self.hellos
                .retain(|_, (heard, _)| now.mono.saturating_duration_since(*heard) < HELLO_MEMORY);
            self.process(now);
        }
        if !self.left && {
            let round = self.carrier.round_due(now.mono);
            self.carrier.repeat_due(now.mono) || round
        } {
            self.send_carrier(now);
        }
        if self.next_peer_announce.is_some_and(|at| at <= now.mono) {
            self.next_peer_announce =
                Some(self.after(now.mono, self.config.peer_announce_interval));
            if !self.left {
                let member_addrs = self.member_addrs();
                let missing: Vec<SocketAddr> = self
                    .peers
                    .iter()
                    .filter(|p| !member_addrs.contains(p))
                    .copied()
                    .collect();
                for peer in missing {
                    self.announce_to(peer, now);
                }
            }
        }
    }

    /// Whether this speaker has held valid two-way evidence ([`super::lease`]) *throughout*
    /// `[from, now]` from fewer than half of the voters ([`Self::set_voters`]; before they are
    /// known, of the members it lists), itself included, with at least three of them (with one
    /// or two, a survivor cannot tell its peer's crash from a cut and must declare it down).
    /// With `from == now`: whether it is cut off now.
    fn cut_off(&self, now: Instant, from: Instant) -> bool {
        let heard_throughout = |name: &str| self.evidence.valid_throughout(name, from, now);
        let me = &self.identity().name;
        if !self.voters.is_empty() {
            // Against the voters (the majority rule's set): a speaker that lists only the few
            // members it heard since it rejoined is as cut off as one that lists them all.
            // Refused peers (G5.4) give no evidence but stay voters: they count against.
            let total = self.voters.len() + usize::from(!self.voters.contains(me));
            if total < 3 {
                return false;
            }
            let heard = 1 + self
                .foca
                .iter_members()
                .filter(|m| m.id().name != *me && self.voters.contains(&m.id().name))
                .filter(|m| self.mismatch_of(m.id()).is_none())
                .filter(|m| heard_throughout(&m.id().name))
                .count();
            return heard * 2 < total;
        }
        // Refused peers (issue #32 G5.4) give no evidence by design: they do not count here.
        let listed = 1 + self
            .foca
            .iter_members()
            .filter(|m| self.mismatch_of(m.id()).is_none())
            .count();
        if listed < 3 {
            return false;
        }
        let heard = 1 + self
            .foca
            .iter_members()
            .filter(|m| self.mismatch_of(m.id()).is_none())
            .filter(|m| heard_throughout(&m.id().name))
            .count();
        heard * 2 < listed
    }

    /// Schedules a held suspect→down `timer` again one suspicion timeout from `now`, unless a
    /// timer for the same suspicion (member and incarnation) is already pending: foca adds one
    /// after every failed probe of a member it already suspects, and re-queueing each of them
    /// made a long isolation's queue grow by about ten timers a second without bound (about
    /// 3,000 postponements a second after a minute; found by attacking the held-suspicion
    /// rule).
    fn hold_suspicion(&mut self, now: Instant, timer: Timer<SpeakerId>) {
        let same = |t: &Timer<SpeakerId>| match (t, &timer) {
            (
                Timer::ChangeSuspectToDown {
                    member_id: a,
                    incarnation: i,
                    ..
                },
                Timer::ChangeSuspectToDown {
                    member_id: b,
                    incarnation: j,
                    ..
                },
            ) => a == b && i == j,
            _ => false,
        };
        if !self.timers.any(same) {
            self.timers
                .schedule(now, self.config.suspect_timeout, timer);
        }
    }

    /// Whether a suspect→down `timer` no longer concerns a suspicion: its member is not listed
    /// as suspect at the timer's incarnation (it refuted with a higher one, was declared down,
    /// left or was renewed). foca 2.0.0 checks the incarnation before declaring the member down
    /// but sends the member a `TurnUndead` message from such a timer all the same (its
    /// `handle_timer` sends it whenever the member is known), which makes a member that
    /// refuted a suspicion in time believe it was declared down.
    fn stale_suspicion(&self, timer: &Timer<SpeakerId>) -> bool {
        let Timer::ChangeSuspectToDown {
            member_id,
            incarnation,
            ..
        } = timer
        else {
            return false;
        };
        !self.foca.iter_members().any(|m| {
            m.id() == member_id && m.incarnation() == *incarnation && m.state() == State::Suspect
        })
    }

    /// Whether the suspect of a suspect→down `timer` holds valid two-way evidence: it granted a
    /// lease request of ours sent within the lease.
    fn answered_lately(&self, timer: &Timer<SpeakerId>, now: Instant) -> bool {
        matches!(timer, Timer::ChangeSuspectToDown { member_id, .. }
            if self.evidence.valid_at(&member_id.name, now))
    }

    /// Whether to postpone `timer` (see [`MembershipCore::handle_timers`]): a suspect→down timer
    /// that runs `late`, postponed fewer than [`MAX_POSTPONEMENTS`] times so far. Forgets the
    /// count of a suspicion handed to foca.
    fn postpone(&mut self, timer: &Timer<SpeakerId>, late: bool) -> bool {
        let Timer::ChangeSuspectToDown {
            member_id,
            incarnation,
            ..
        } = timer
        else {
            return false;
        };
        let key = (member_id.clone(), *incarnation);
        let times = self.postponed.get(&key).copied().unwrap_or(0);
        if late && times < MAX_POSTPONEMENTS {
            self.postponed.insert(key, times + 1);
            true
        } else {
            self.postponed.remove(&key);
            false
        }
    }

    /// Leaves the cluster explicitly (SIGTERM): declares our identity down and gossips that to
    /// up to `max_transmissions` members at once (foca `leave_cluster` plus extra gossip rounds),
    /// so the others drop us without waiting for failure detection. Afterwards the alive set is
    /// empty and every datagram is ignored. Idempotent.
    pub fn leave(&mut self, now: Clock) {
        if self.left {
            return;
        }
        // foca's leave_cluster tells `indirect_probes` random members and carries the update
        // `max_transmissions` times: the others learn it second-hand, up to a gossip period
        // later, and when the rendezvous successor is one of them the graceful hand-over waits
        // for it (the simulator, 10 nodes, seed 79 of `ferrolb-sim failover --signal term`:
        // 50 ms instead of 5). So every active member is told directly, in each of
        // `LEAVE_ROUNDS` rounds (a second one for a lost datagram).
        let active = self.foca.iter_members().count().max(1);
        let widened = self.config.to_foca().ok().and_then(|mut config| {
            config.num_indirect_probes = std::num::NonZeroUsize::new(active)?;
            config.max_transmissions = std::num::NonZeroU8::new(
                u8::try_from(active.saturating_mul(LEAVE_ROUNDS)).unwrap_or(u8::MAX),
            )?;
            Some(config)
        });
        if let Some(config) = widened
            && let Err(error) = self.foca.set_config(config)
        {
            tracing::debug!(%error, "membership: widening the leave's fan-out failed");
        }
        if let Err(error) = self.foca.leave_cluster(&mut self.runtime) {
            tracing::warn!(%error, "membership: leave_cluster failed");
        }
        for _ in 1..LEAVE_ROUNDS {
            if let Err(error) = self.foca.gossip(&mut self.runtime) {
                tracing::debug!(%error, "membership: leave gossip failed");
            }
        }
        self.left = true;
        self.members_dirty = true;
        self.evidence.reset();
        self.list_digests.clear();
        self.process(now);
    }

    /// Datagrams produced since the last call, sealed, in order.
    pub fn take_outgoing(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.outbox)
    }

    /// Membership events produced since the last call, in order.
    pub fn take_events(&mut self) -> Vec<MembershipEvent> {
        std::mem::take(&mut self.events)
    }

    /// Announces to a peer known only by its address, with a hello to its address (so a peer
    /// that can open our datagrams but not answer them learns why: G5.4).
    fn announce_to(&mut self, peer: SocketAddr, now: Clock) {
        if let Err(error) = self
            .foca
            .announce(SpeakerId::placeholder(peer), &mut self.runtime)
        {
            tracing::debug!(%error, %peer, "membership: announce failed");
        }
        let hello = self.hello_to(SpeakerId::placeholder(peer));
        if let Ok(body) = postcard::to_allocvec(&hello) {
            self.send_sealed(KIND_HELLO, &body, peer, now);
        }
        self.process(now);
    }

    fn member_addrs(&self) -> BTreeSet<SocketAddr> {
        self.foca.iter_members().map(|m| m.id().addr).collect()
    }

    fn after(&self, now: Instant, delay: std::time::Duration) -> Instant {
        now.checked_add(delay).unwrap_or(now)
    }

    /// Drains foca's runtime: seal and queue datagrams, schedule timers, react to notifications;
    /// then recompute the alive set and derive events.
    fn process(&mut self, now: Clock) {
        #[cfg(test)]
        {
            self.processed += 1;
        }
        let mut restarted = Vec::new();
        loop {
            let mut gossip_now = false;
            while let Some((to, data)) = self.runtime.to_send() {
                self.send_sealed(KIND_SWIM, &data, to.addr, now);
            }
            while let Some((after, timer)) = self.runtime.to_schedule() {
                self.timers.schedule(now.mono, after, timer);
            }
            while let Some(notification) = self.runtime.to_notify() {
                self.members_dirty = true;
                match notification {
                    OwnedNotification::MemberDown(id) => {
                        tracing::info!(member = ?id, "membership: member down");
                        // Spread the news now instead of at the next gossip tick.
                        gossip_now = true;
                    }
                    OwnedNotification::MemberUp(id) => {
                        tracing::info!(member = ?id, "membership: member up");
                    }
                    OwnedNotification::Rename(old, new) => {
                        tracing::info!(?old, ?new, "membership: member restarted");
                        restarted.push(new.name);
                    }
                    OwnedNotification::Rejoin(id) => {
                        // Grants were addressed to the old identity: they count no more.
                        self.evidence.reset();
                        self.list_digests.clear();
                        // Every member hears our new identity's hello now (G5.4).
                        self.greeted.clear();
                        tracing::warn!(identity = ?id, "membership: we were declared down; rejoined with a new generation");
                        self.counters.bump(Counter::SelfRejoins);
                    }
                    OwnedNotification::Defunct if !self.left => {
                        tracing::error!("membership: declared down and unable to rejoin");
                    }
                    OwnedNotification::Active => tracing::info!("membership: joined the cluster"),
                    OwnedNotification::Idle => {
                        tracing::warn!("membership: no other member is alive");
                    }
                    _ => {}
                }
            }
            if gossip_now && !self.left {
                if let Err(error) = self.foca.gossip(&mut self.runtime) {
                    tracing::debug!(%error, "membership: gossip failed");
                }
                continue;
            }
            break;
        }
        if self.next_heartbeat.is_none() && !self.left {
            // Lease requests start with the membership: first round at the next timer call.
            self.next_heartbeat = Some(now.mono);
        }
        if self.next_hello_round.is_none() && !self.left {
            self.next_hello_round = Some(self.after(now.mono, HELLO_INTERVAL));
        }
        if !self.members_dirty {
            return;
        }
        self.members_dirty = false;
        if !self.left {
            self.send_hellos(now);
            self.send_carrier(now);
        }
        self.refresh_alive(restarted);
    }

    /// A hello to every active member identity that has not had one this round (the set is
    /// cleared every [`HELLO_INTERVAL`], which also forgets identities that went away).
    fn send_hellos(&mut self, now: Clock) {
        let members: Vec<SpeakerId> = self
            .foca
            .iter_members()
            .filter(|m| !self.greeted.contains(m.id()))
            .map(|m| m.id().clone())
            .collect();
        for dst in members {
            self.greeted.insert(dst.clone());
            let to = dst.addr;
            let hello = self.hello_to(dst);
            if let Ok(body) = postcard::to_allocvec(&hello) {
                self.send_sealed(KIND_HELLO, &body, to, now);
            }
        }
    }

    /// Our carrier report to every member identity that does not have its current version, and
    /// the relays of the peers' reports owed ([`super::carrier`]).
    fn send_carrier(&mut self, now: Clock) {
        let me = self.identity().clone();
        let members: Vec<SpeakerId> = self.foca.iter_members().map(|m| m.id().clone()).collect();
        let limit = self.config.max_packet_size.saturating_sub(1);
        for msg in self
            .carrier
            .outgoing(&me, members.iter().cloned(), now.mono)
        {
            let to = msg.dst.addr;
            if let Some(body) = super::carrier::encode(msg, limit) {
                self.send_sealed(KIND_CARRIER, &body, to, now);
            }
        }
        for relay in self.carrier.relays(&me, members, now.mono) {
            let to = relay.msg.dst.addr;
            if let Some(body) = super::carrier::encode_relay(relay, limit) {
                self.send_sealed(KIND_CARRIER_RELAY, &body, to, now);
            }
        }
    }

    /// Sets this speaker's carrier report (issue #32 G5.5, [`super::carrier`]): every member
    /// gets it at once when it changed.
    pub fn set_carrier_report(&mut self, report: crate::carrier::LinkReport, now: Clock) {
        if self.carrier.set_own(report) && !self.left {
            self.send_carrier(now);
        }
    }

    /// The carrier reports of the members listed now and not refused, by node name (issue #32
    /// G5.5); a member without a report is missing.
    pub fn carrier_reports(&self) -> crate::carrier::Carriers {
        if self.left {
            return crate::carrier::Carriers::new();
        }
        self.carrier.reports(|id| {
            self.foca.iter_members().any(|m| m.id() == id) && self.mismatch_of(id).is_none()
        })
    }

    /// An authenticated, fresh hello (replay-checked by the caller), addressed to our identity
    /// or, like an `Announce`, to our address: remembered as the peer's newest unless it is
    /// older than what we hold ([`hello_is_newer`]).
    fn handle_hello(&mut self, body: &[u8], now: Instant) -> Result<(), DropReason> {
        let hello: Hello = postcard::from_bytes(body).map_err(|_| DropReason::Rejected)?;
        let me = self.identity();
        let for_us = hello.dst == *me || (hello.dst.name.is_empty() && hello.dst.addr == me.addr);
        if !for_us {
            return Err(DropReason::Misdirected);
        }
        if hello.src.name.is_empty()
            || hello.src.name.len() > MAX_NODE_NAME_LEN
            || hello.src.name == self.identity().name
            || hello.keys.len() > MAX_FINGERPRINTS
        {
            return Err(DropReason::Rejected);
        }
        let held = self.hellos.get(&hello.src.name);
        let listed = self.foca.iter_members().any(|m| *m.id() == hello.src);
        let newer = held.is_none_or(|(_, held)| hello_is_newer(&hello, held, listed));
        if held.is_none() && self.hellos.len() >= MAX_HELLOS {
            return Err(DropReason::Rejected);
        }
        if newer {
            let name = hello.src.name.clone();
            let was = held.and_then(|(_, h)| self.judge(h));
            let now_mismatch = self.judge(&hello);
            if now_mismatch != was {
                match &now_mismatch {
                    Some(m) => {
                        tracing::warn!(peer = %name, reason = m.label(), "membership: refusing a peer ({m})")
                    }
                    None => {
                        tracing::info!(peer = %name, "membership: peer's configuration agrees again")
                    }
                }
            }
            self.hellos.insert(name, (now, hello));
            self.members_dirty = true;
        }
        Ok(())
    }

    /// Seals `body` behind the kind byte `kind` and queues it for `to`.
    fn send_sealed(&mut self, kind: u8, body: &[u8], to: SocketAddr, now: Clock) {
        let mut plain = Vec::with_capacity(body.len() + 1);
        plain.push(kind);
        plain.extend_from_slice(body);
        let key = self.seal_key_for(to);
        let Some(sealer) = self.sealers.get(key).or_else(|| self.sealers.first()) else {
            self.counters.bump(Counter::SendErrors);
            return;
        };
        match sealer.seal(&plain, now.wall_ms, &mut self.nonce_rng) {
            Some(datagram) => {
                self.counters.bump(Counter::DatagramsOut);
                self.outbox.push(Outgoing { to, datagram });
            }
            None => self.counters.bump(Counter::SendErrors),
        }
    }

    /// Which key of our ring seals what goes to `to` (an index into the ring, 0 = the
    /// primary). Normally the primary. During a key rotation rolled out of order (a step
    /// skipped), a peer may lack our primary while both rings still share a key: sealing with
    /// the primary there made the link one-way — we opened its datagrams, it opened none of
    /// ours — and, with no two-way evidence, both sides of the rotation saw a minority and the
    /// cluster went silent (issue #32 G1; the simulator's rotation class). So: the first key of
    /// our ring that the peer's latest hello lists; without a hello from that address, the key
    /// its latest SWIM datagram was opened with (it holds that one), so that the hellos can
    /// flow; otherwise the primary. Sealing with an older key both hold gives nothing away that
    /// accepting it does not: our ring opens it anyway.
    fn seal_key_for(&self, to: SocketAddr) -> usize {
        if self.sealers.len() < 2 {
            return 0;
        }
        let from_hello = self
            .hellos
            .values()
            .find(|(_, hello)| hello.src.addr == to)
            .map(|(_, hello)| {
                self.own_keys
                    .iter()
                    .position(|k| hello.keys.contains(k))
                    .unwrap_or(0)
            });
        from_hello
            .or_else(|| self.heard_keys.get(&to).copied())
            .unwrap_or(0)
    }

    /// Notes that the sealed sender at `addr` sealed with our key `key` ([`Self::seal_key_for`]).
    fn heard_with(&mut self, addr: SocketAddr, key: usize) {
        if self.sealers.len() < 2 {
            return;
        }
        if key == 0 {
            self.heard_keys.remove(&addr);
            return;
        }
        if self.heard_keys.len() >= MAX_HELLOS && !self.heard_keys.contains_key(&addr) {
            self.heard_keys.clear();
        }
        self.heard_keys.insert(addr, key);
    }

    /// One round of lease requests: one to each active member's current identity.
    fn send_lease_requests(&mut self, now: Clock) {
        let seq = self.evidence.start_round(now.mono, self.config.lease());
        let me = self.identity().clone();
        let members: Vec<(SpeakerId, Option<foca::Incarnation>)> = self
            .foca
            .iter_members()
            .filter(|m| self.mismatch_of(m.id()).is_none())
            .map(|m| {
                let suspected = (m.state() == State::Suspect).then(|| m.incarnation());
                (m.id().clone(), suspected)
            })
            .collect();
        for (dst, suspected) in members {
            let to = dst.addr;
            if let Some(incarnation) = suspected {
                // The suspect refutes when it hears of it ([`LeaseMsg::Suspected`]).
                let msg = LeaseMsg::Suspected {
                    src: me.clone(),
                    dst: dst.clone(),
                    incarnation,
                };
                if let Ok(body) = postcard::to_allocvec(&msg) {
                    self.send_sealed(KIND_LEASE, &body, to, now);
                }
            }
            let asks = self.asks.get(&dst.name).cloned().unwrap_or_default();
            let msg = LeaseMsg::Request {
                src: me.clone(),
                dst,
                seq,
                asks,
                rev: self.view_revision(),
            };
            if let Ok(body) = postcard::to_allocvec(&msg) {
                self.send_sealed(KIND_LEASE, &body, to, now);
            }
        }
    }

    /// An authenticated lease message (see [`super::lease`]). Requests are granted only when
    /// addressed to our current identity by an identity active in our view; grants count only
    /// when addressed to our current identity by an active member. No replay check is needed
    /// (the module docs say why) and no sender budget is spent: nothing here reaches foca.
    fn handle_lease(&mut self, msg: LeaseMsg, now: Clock) -> Result<(), DropReason> {
        let me = self.identity().clone();
        let active = |id: &SpeakerId| self.foca.iter_members().any(|m| m.id() == id);
        match msg {
            LeaseMsg::Request {
                src,
                dst,
                seq,
                asks,
                rev,
            } => {
                if dst != me {
                    return Err(DropReason::Misdirected);
                }
                if !active(&src) || self.mismatch_of(&src).is_some() {
                    return Err(DropReason::Rejected);
                }
                let to = src.addr;
                // Released: not answered for here, and either
                // - not held back here either (a gain of ours waiting for its own holder counts
                //   as held) and our own plan gives it to the requester or to nobody (not to a
                //   third node: the requester's view lags) — and, when the requester's view is
                //   older than ours, to the requester itself: our newer view must vouch for its
                //   gain (a gate that is closed, a plan that gives the IP to nobody do not); or
                // - held back here for the requester itself, whose view is the newer: a mutual
                //   hold, in which the newer view claims (`newer_view`). Never to a third node:
                //   our own gain may still be released to us by the node we wait for.
                // Our own view's revision, even while our gate is closed (then we send none:
                // no plan vouches for it, but it still says the requester lags).
                let mine = self.revision;
                let requester_newer =
                    super::lease::newer_view(&src.name, rev, &me.name, mine).unwrap_or(false);
                // Strictly: between equal revisions the views may well be the same.
                let requester_older = rev != 0 && mine != 0 && rev < mine;
                let asked: Vec<IpAddr> = asks.into_iter().take(super::lease::MAX_ASKS).collect();
                let released = asked
                    .iter()
                    .copied()
                    .filter(|ip| {
                        if self.holding.contains(ip) {
                            return false;
                        }
                        let mut waiting_for = self
                            .asks
                            .iter()
                            .filter(|(_, ips)| ips.contains(ip))
                            .map(|(holder, _)| holder);
                        match waiting_for.next() {
                            Some(holder) => {
                                requester_newer
                                    && *holder == src.name
                                    && waiting_for.next().is_none()
                            }
                            None => {
                                let owner = self
                                    .plan
                                    .as_ref()
                                    .map(|p| p.ips.get(ip).and_then(|p| p.owner.as_ref()));
                                if requester_older {
                                    owner.flatten().is_some_and(|o| *o == src.name)
                                } else {
                                    owner.flatten().is_none_or(|o| *o == src.name)
                                }
                            }
                        }
                    })
                    .collect::<Vec<IpAddr>>();
                // Strictly newer: it is waited on instead of a third node (`handover_askers`).
                if mine != 0 && rev > mine {
                    self.note_askers(&src.name, rev, (&asked, &released), now.mono);
                }
                // A later request from a release's recipient sent with no revision: its gate has
                // closed since the release, and a closed gate drops every hand-over and answers
                // nothing, so the release is void (it asks anew when its gate reopens). Found by
                // an attack: the grant was lost on a one-way cut, the recipient withdrew, and
                // the granter waited a stall threshold on it (900 ms–1 s silent, bound 800 ms).
                if rev == 0 {
                    let seqs = &self.given_seq;
                    self.given.retain(|ip, (to, _)| {
                        *to != src.name || seqs.get(ip).is_none_or(|s| *s >= seq)
                    });
                }
                if let Some(plan) = self.plan.as_ref() {
                    for ip in released.iter().filter(|ip| plan.ips.contains_key(*ip)) {
                        self.given.insert(*ip, (src.name.clone(), now.mono));
                        self.given_seq.insert(*ip, seq);
                    }
                }
                let grant = LeaseMsg::Grant {
                    src: me,
                    dst: src,
                    seq,
                    released,
                    // Only a speaker whose gate is open (it has a plan) says what it lists: a
                    // restarted speaker converges early on an agreeing majority of speakers that
                    // serve (issue #32 F1), never on peers that are starting themselves — at a
                    // cold start of every speaker, two fast ones must not plan without a third
                    // that is a moment late (lab F1 cold start: two announcers of one IP).
                    // A closed gate sends `GATE_CLOSED`, never `None`: `None` marks a speaker
                    // from before the handover fields, whose replies say nothing.
                    members: Some(if self.plan.is_some() {
                        self.alive_digest
                    } else {
                        super::lease::GATE_CLOSED
                    }),
                    rev: self.view_revision(),
                };
                if let Ok(body) = postcard::to_allocvec(&grant) {
                    self.send_sealed(KIND_LEASE, &body, to, now);
                }
                Ok(())
            }
            LeaseMsg::Suspected {
                src,
                dst,
                incarnation,
            } => {
                if dst != me {
                    return Err(DropReason::Misdirected);
                }
                if !active(&src) || self.mismatch_of(&src).is_some() {
                    return Err(DropReason::Rejected);
                }
                if self
                    .refuted
                    .as_ref()
                    .is_some_and(|(id, done)| *id == me && incarnation <= *done)
                {
                    return Ok(());
                }
                // foca refutes a suspicion of its own identity at an incarnation not below
                // its own by raising its incarnation and gossiping; every message it sends
                // from then on carries the refutation (an older incarnation: nothing to do).
                self.refuted = Some((me.clone(), incarnation));
                let suspicion = foca::Member::new(me, incarnation, State::Suspect);
                if let Err(error) =
                    self.foca
                        .apply_many(std::iter::once(suspicion), true, &mut self.runtime)
                {
                    tracing::debug!(%error, "membership: refuting a suspicion failed");
                }
                tracing::debug!(suspecter = ?src, incarnation, "membership: a peer suspects us; refuted");
                Ok(())
            }
            LeaseMsg::Grant {
                src,
                dst,
                seq,
                released,
                members,
                rev,
            } => {
                if dst != me {
                    return Err(DropReason::Misdirected);
                }
                if !active(&src) || self.mismatch_of(&src).is_some() {
                    return Err(DropReason::Rejected);
                }
                self.evidence
                    .grant(&src.name, seq, self.config.lease(), now.mono);
                if let Some(sent) = self.evidence.round_sent(seq) {
                    // Per grant, so no allocation unless the revision changed.
                    if rev == 0 {
                        self.revisions.remove(&src.name);
                    } else if self.revisions.get(&src.name) != Some(&rev) {
                        self.revisions.insert(src.name.clone(), rev);
                    }
                    match members {
                        Some(d) => self.list_digests.insert(src.name.clone(), d),
                        None => self.list_digests.remove(&src.name),
                    };
                    // Only what we ask that holder about is recorded; a grant without the
                    // member digest comes from a speaker before G5.8 and says nothing about
                    // the asks (its empty list is no "still holding").
                    if members.is_some()
                        && let Some(asked) = self.asks.get(&src.name)
                    {
                        for ip in asked {
                            let reply = HandoverReply {
                                sent,
                                released: released.contains(ip),
                                rev,
                            };
                            let latest =
                                self.replies.entry((src.name.clone(), *ip)).or_insert(reply);
                            if latest.sent <= sent {
                                *latest = reply;
                            }
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// Records `from` (view revision `rev`, newer than ours) as the asker of each IP it asked
    /// about (`asked`) that it was not `released` and that we hold back for another node
    /// ([`Self::handover_askers`]): bounded by what we hold back.
    fn note_askers(
        &mut self,
        from: &str,
        rev: u64,
        (asked, released): (&[IpAddr], &[IpAddr]),
        at: Instant,
    ) {
        for ip in asked.iter().filter(|ip| !released.contains(ip)) {
            let held_back = self
                .asks
                .iter()
                .any(|(holder, ips)| holder != from && ips.contains(ip));
            if !held_back {
                continue;
            }
            let newest = self.askers.get(ip).is_none_or(|a| a.rev <= rev);
            if newest {
                self.askers.insert(
                    *ip,
                    HandoverAsker {
                        from: from.to_owned(),
                        rev,
                        at,
                    },
                );
            }
        }
    }

    fn refresh_alive(&mut self, restarted: Vec<String>) {
        let now_alive: BTreeSet<String> = if self.left {
            BTreeSet::new()
        } else {
            // Refused peers (a configuration mismatch, issue #32 G5.4) are not counted alive.
            self.foca
                .iter_members()
                .filter(|m| self.mismatch_of(m.id()).is_none())
                .map(|m| m.id().name.clone())
                .chain(std::iter::once(self.identity().name.clone()))
                .collect()
        };
        if !self.left {
            for name in now_alive.difference(&self.alive) {
                self.counters.bump(Counter::TransitionsUp);
                self.events.push(MembershipEvent::Up(name.clone()));
            }
            for name in self.alive.difference(&now_alive) {
                self.counters.bump(Counter::TransitionsDown);
                self.events.push(MembershipEvent::Down(name.clone()));
            }
            for name in restarted {
                if self.alive.contains(&name) && now_alive.contains(&name) {
                    self.counters.bump(Counter::RestartsSeen);
                    self.events.push(MembershipEvent::Restarted(name));
                }
            }
        }
        // Source admission and the per-member sender budgets follow the members' addresses.
        let member_addrs = if self.left {
            BTreeSet::new()
        } else {
            self.member_addrs()
        };
        if member_addrs != self.admitted_members {
            self.sources.set_members(member_addrs.iter().copied());
            self.budget.set_members(member_addrs.iter().copied());
            self.admitted_members = member_addrs;
        }
        if now_alive != self.alive {
            self.alive_digest = super::lease::member_list_digest(&now_alive);
            self.alive = now_alive;
        }
        self.counters.set_members(self.alive.len());
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::net::SocketAddrV6;
    use std::time::Duration;

    const WALL0: u64 = 1_800_000_000_000;

    fn ring() -> KeyRing {
        let hex: String = (0..32u8)
            .map(|i| format!("{:02x}", i.wrapping_mul(47).wrapping_add(5)))
            .collect();
        KeyRing::parse(hex.as_bytes()).unwrap()
    }

    fn addr(last: u8, port: u16) -> SocketAddr {
        SocketAddr::from(([192, 0, 2, last], port))
    }

    fn mapped(a: SocketAddr) -> SocketAddr {
        let SocketAddr::V4(v4) = a else {
            unreachable!("test addresses are IPv4")
        };
        SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
    }

    fn core(last: u8, config: MembershipConfig, seed: u64) -> MembershipCore {
        let id = SpeakerId::with_generation(&format!("node-{last}"), addr(last, 7947), 1).unwrap();
        MembershipCore::with_seed(id, config, &ring(), Arc::new(Counters::default()), seed).unwrap()
    }

    fn clock(t0: Instant, ms: u64) -> Clock {
        Clock {
            mono: t0 + Duration::from_millis(ms),
            wall_ms: WALL0 + ms,
        }
    }

    /// A keyless datagram that passes the framing check (magic and version right).
    fn keyless(len: usize, fill: u8) -> Vec<u8> {
        let mut d = vec![fill; len.max(OVERHEAD)];
        d[..4].copy_from_slice(&super::super::envelope::MAGIC);
        d[4] = super::super::envelope::VERSION;
        d
    }

    /// Delivers everything both cores send to each other until they are quiet.
    fn exchange(a: &mut MembershipCore, b: &mut MembershipCore, now: Clock) {
        for _ in 0..50 {
            let (from_a, from_b) = (a.take_outgoing(), b.take_outgoing());
            if from_a.is_empty() && from_b.is_empty() {
                return;
            }
            let (addr_a, addr_b) = (a.identity().addr, b.identity().addr);
            for out in from_a.into_iter().filter(|o| o.to == addr_b) {
                let _ = b.handle_datagram(&out.datagram, addr_a, now);
            }
            for out in from_b.into_iter().filter(|o| o.to == addr_a) {
                let _ = a.handle_datagram(&out.datagram, addr_b, now);
            }
        }
    }

    /// Runs `nodes` for `ms` milliseconds from `from`, one timer pass per millisecond, every
    /// datagram delivered at once unless `cut` says the path (from, to) is cut.
    fn mesh(
        nodes: &mut [MembershipCore],
        t0: Instant,
        from: u64,
        ms: u64,
        cut: impl Fn(usize, usize) -> bool,
    ) {
        for t in from..from + ms {
            let now = clock(t0, t);
            for n in nodes.iter_mut() {
                n.handle_timers(now);
            }
            for _ in 0..10 {
                let mut any = false;
                for i in 0..nodes.len() {
                    for out in nodes[i].take_outgoing() {
                        any = true;
                        let src = nodes[i].identity().addr;
                        if let Some(j) = nodes.iter().position(|n| n.identity().addr == out.to)
                            && !cut(i, j)
                        {
                            let _ = nodes[j].handle_datagram(&out.datagram, src, now);
                        }
                    }
                }
                if !any {
                    break;
                }
            }
        }
    }

    /// G1/G2: lease grants give each member two-way evidence of the others; a member cut off
    /// loses it within the lease (150 ms with `fast`) — before anyone can have declared it
    /// down (300 ms) — and, hearing fewer than half of its members, holds its own suspicions
    /// instead of declaring the majority down, while the majority declares it down.
    #[test]
    fn evidence_lapses_within_the_lease_and_a_cut_off_member_declares_nobody_down() {
        let t0 = Instant::now();
        let config = MembershipConfig::default();
        let lease = config.lease();
        assert_eq!(lease, Duration::from_millis(150));
        let mut nodes: Vec<MembershipCore> = (1..=3)
            .map(|i| core(i, config.clone(), u64::from(i)))
            .collect();
        let addrs: Vec<SocketAddr> = (1..=3).map(|i| addr(i, 7947)).collect();
        for n in nodes.iter_mut() {
            n.set_peers(addrs.iter().copied(), clock(t0, 0));
        }
        mesh(&mut nodes, t0, 0, 2000, |_, _| false);
        let now = t0 + Duration::from_millis(2000);
        for n in &nodes {
            assert_eq!(n.alive().len(), 3);
            let valid = n.evidence().values().filter(|t| now < **t).count();
            assert_eq!(valid, 2, "{:?}", n.evidence());
        }
        // Cut node-1 off both ways.
        mesh(&mut nodes, t0, 2000, 2000, |a, b| a == 0 || b == 0);
        let cut_at = t0 + Duration::from_millis(2000);
        let lapsed = nodes[0].evidence().values().max().copied().unwrap();
        assert!(lapsed <= cut_at + lease, "{lapsed:?} vs {cut_at:?}");
        assert_eq!(nodes[0].alive().len(), 3, "declared nobody down");
        assert!(nodes[0].counters().snapshot().suspicions_postponed > 0);
        for n in &nodes[1..] {
            assert!(!n.alive().contains("node-1"), "{:?}", n.alive());
        }
    }

    /// A suspicion raised while its holder was cut off never turns into a "down" of a member
    /// that still reaches the majority: after the heal the holder waits until it has heard a
    /// majority for a whole suspicion (probe period + suspicion timeout) before it declares
    /// anyone down, and its lease requests tell the suspect, who refutes. So a cut between
    /// the two that follows (a non-transitive partition: each still reaches the third) is
    /// bridged by indirect probes, as SWIM intends, and nobody is declared down. Before: the
    /// suspicion ran out just after the heal (partition seed 8939 of the 100,000-scenario
    /// run), or stayed listed, held for a suspect that kept granting, until the cut made the
    /// grants stop (seed 4096); either way the suspect was declared down while it still
    /// answered, and the third node claimed its IPs next to it.
    #[test]
    fn a_suspicion_raised_while_cut_off_is_refuted_and_declares_nobody_down() {
        let t0 = Instant::now();
        let mut nodes = three_joined(t0);
        let ids: Vec<SpeakerId> = nodes.iter().map(|n| n.identity().clone()).collect();
        for (start, isolated_ms, case) in [
            (2000, 330, "heal just before the suspicion runs out"),
            (5000, 420, "heal after"),
        ] {
            // node-1 isolated: it suspects the others.
            mesh(&mut nodes, t0, start, isolated_ms, |a, b| a == 0 || b == 0);
            mesh(&mut nodes, t0, start + isolated_ms, 1000, |_, _| false);
            // node-1 and node-3 cut from each other; both still reach node-2.
            mesh(&mut nodes, t0, start + isolated_ms + 1000, 1500, |a, b| {
                (a, b) == (0, 2) || (a, b) == (2, 0)
            });
            for (i, n) in nodes.iter().enumerate() {
                assert_eq!(
                    n.identity(),
                    &ids[i],
                    "{case}: nobody was declared down and rejoined"
                );
                assert_eq!(
                    n.alive().len(),
                    3,
                    "{case}: node-{} lists {:?}",
                    i + 1,
                    n.alive()
                );
            }
            mesh(&mut nodes, t0, start + isolated_ms + 2500, 500, |_, _| {
                false
            });
        }
    }

    /// A long isolation keeps one pending suspect→down timer per suspicion: held suspicions are
    /// not re-queued next to a timer foca added for the same one after another failed probe.
    #[test]
    fn a_long_isolation_keeps_one_timer_per_held_suspicion() {
        let t0 = Instant::now();
        let mut nodes = three_joined(t0);
        mesh(&mut nodes, t0, 2000, 10_000, |a, b| a == 0 || b == 0);
        // foca's own timers (probe, gossip, announce) plus one per held suspicion; without the
        // rule, about a hundred more after 10 s.
        assert!(
            nodes[0].timers.len() < 20,
            "{} timers",
            nodes[0].timers.len()
        );
    }

    /// A suspicion that runs out after its holder heard a majority again, but not for a whole
    /// suspicion (probe period + suspicion timeout), is held: node-1, cut off for 250 ms,
    /// suspects node-3; its link to node-2 heals first, and the suspicion runs out just after
    /// node-2's first grant, before node-3 (still cut from node-1, but reaching node-2) could
    /// hear of it. Declared down then, node-3 — alive, with a majority — would be replaced
    /// next to itself.
    #[test]
    fn a_suspicion_is_held_until_a_majority_was_heard_for_a_whole_suspicion() {
        let t0 = Instant::now();
        let mut nodes = three_joined(t0);
        let node_3 = nodes[2].identity().clone();
        // Shorter than the others need to declare node-1 down (300 ms).
        mesh(&mut nodes, t0, 2000, 250, |a, b| a == 0 || b == 0);
        let cut_1_3 = |a: usize, b: usize| (a, b) == (0, 2) || (a, b) == (2, 0);
        // node-1 hears node-2 again from 2.25 s; node-3 only from 2.6 s.
        let mut t = 2250;
        while !nodes[0]
            .evidence
            .valid_at("node-2", t0 + Duration::from_millis(t))
        {
            mesh(&mut nodes, t0, t, 1, cut_1_3);
            t += 1;
            assert!(t < 2400, "node-2 granted nothing");
        }
        // The suspicion, as node-1 lists node-3 now, runs out 1 ms later.
        let a = &mut nodes[0];
        let incarnation = a
            .foca
            .iter_members()
            .find(|m| m.id() == &node_3)
            .map(|m| m.incarnation())
            .unwrap();
        let suspect = foca::Member::new(node_3.clone(), incarnation, State::Suspect);
        a.foca
            .apply_many(std::iter::once(suspect), false, &mut a.runtime)
            .unwrap();
        let timer = Timer::ChangeSuspectToDown {
            member_id: node_3.clone(),
            incarnation,
            token: 0,
        };
        a.timers.schedule(
            t0 + Duration::from_millis(t),
            Duration::from_millis(1),
            timer,
        );
        mesh(&mut nodes, t0, t, 2600 - t, cut_1_3);
        assert!(
            nodes[0].alive().contains("node-3"),
            "declared node-3 down on a suspicion raised while cut off: {:?}",
            nodes[0].alive()
        );
        mesh(&mut nodes, t0, 2600, 1000, |_, _| false);
        assert_eq!(
            nodes[2].identity(),
            &node_3,
            "node-3 was never declared down"
        );
        for n in &nodes[1..] {
            assert_eq!(n.alive().len(), 3, "{:?}", n.alive());
        }
    }

    /// G5.8: a lease request asks the previous holder about the IPs held back for it; its
    /// grant says of each whether it still answers for it (or holds it back itself), recorded
    /// with the round's send instant (never later than the holder's answer). Nothing is recorded
    /// about IPs nobody asked; replies are forgotten once the IP is no longer asked. Two
    /// speakers that each hold an IP back for the other never release it to each other.
    #[test]
    fn a_grant_releases_only_asked_ips_the_holder_neither_holds_nor_waits_for() {
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes = vec![core_with(1, c.clone(), &ring()), core_with(2, c, &ring())];
        joined(&mut nodes, t0, 2000);
        let ip = |last: u8| IpAddr::from([198, 51, 100, last]);
        let key = |n: &str, last: u8| (n.to_string(), ip(last));
        let asked: BTreeSet<IpAddr> = [ip(1), ip(2)].into();
        nodes[0].set_handovers([("node-2".to_string(), asked)].into(), BTreeSet::new());
        // node-2 answers for .2 (and .3, never asked about); not for .1.
        nodes[1].set_handovers(BTreeMap::new(), [ip(2), ip(3)].into());
        mesh(&mut nodes, t0, 2000, 500, |_, _| false);
        let replies = nodes[0].handover_replies().clone();
        let keys: Vec<_> = replies.keys().cloned().collect();
        assert_eq!(
            keys,
            vec![key("node-2", 1), key("node-2", 2)],
            "{replies:?}"
        );
        assert!(replies[&key("node-2", 1)].released);
        assert!(!replies[&key("node-2", 2)].released, "still answered there");
        let at = replies[&key("node-2", 1)].sent;
        assert!(at <= t0 + Duration::from_millis(2500), "{at:?}");
        // node-2 lets .2 go: released at a later round.
        nodes[1].set_handovers(BTreeMap::new(), [ip(3)].into());
        mesh(&mut nodes, t0, 2500, 500, |_, _| false);
        assert!(nodes[0].handover_replies()[&key("node-2", 2)].released);
        assert!(nodes[0].handover_replies()[&key("node-2", 1)].sent > at);
        // node-2 now holds .2 back itself, waiting for node-1: not released.
        nodes[1].set_handovers(
            [("node-1".to_string(), [ip(2)].into())].into(),
            BTreeSet::new(),
        );
        mesh(&mut nodes, t0, 3000, 500, |_, _| false);
        assert!(!nodes[0].handover_replies()[&key("node-2", 2)].released);
        assert!(!nodes[1].handover_replies()[&key("node-1", 2)].released);
        // node-2 lets .2 go but its own plan gives .2 to node-3 (node-1's view lags): not
        // released to node-1; once its plan gives .2 to node-1 (or nobody), released.
        let plan_giving = |owner: Option<&str>| plan_giving(ip(2), owner);
        nodes[1].set_handovers(BTreeMap::new(), BTreeSet::new());
        for (from, owner, released) in [
            (3500, Some("node-3"), false),
            (3700, Some("node-1"), true),
            (3900, Some("node-3"), false),
            (4100, None, true),
        ] {
            nodes[1].set_plan(plan_giving(owner), 0);
            mesh(&mut nodes, t0, from, 200, |_, _| false);
            assert_eq!(
                nodes[0].handover_replies()[&key("node-2", 2)].released,
                released,
                "plan gives .2 to {owner:?}"
            );
        }
        // Nothing asked any more: nothing remembered.
        nodes[0].set_handovers(BTreeMap::new(), BTreeSet::new());
        assert!(nodes[0].handover_replies().is_empty());
        assert!(!nodes[1].handover_replies().contains_key(&key("node-1", 3)));
    }

    /// Issue #32 G5.8, the mutual hold: two speakers whose views each give them an IP, each
    /// holding it back for the other. The holder whose view is older releases it to the
    /// requester with the newer view (revision, then name: `newer_view`), never the other way,
    /// and never to a third node; without revisions (0: speakers before them) nobody releases
    /// (both wait, as before). Grants carry the granter's revision.
    #[test]
    fn a_mutual_hold_is_released_to_the_newer_view_only() {
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes = vec![
            core_with(1, c.clone(), &ring()),
            core_with(2, c.clone(), &ring()),
            core_with(3, c, &ring()),
        ];
        joined(&mut nodes, t0, 2000);
        let ip = IpAddr::from([198, 51, 100, 7]);
        let asking = |holder: &str| -> BTreeMap<String, BTreeSet<IpAddr>> {
            [(holder.to_string(), [ip].into())].into()
        };
        let released = |n: &MembershipCore, holder: &str| {
            n.handover_replies()
                .get(&(holder.to_string(), ip))
                .map(|r| (r.released, r.rev))
        };
        let mut from = 2000;
        // (node-1's revision, node-2's): who is released to whom.
        for (rev_1, rev_2, to_1, to_2) in [
            (8, 7, true, false),
            (7, 8, false, true),
            (7, 7, false, true),
            (0, 7, false, false),
            (7, 0, false, false),
        ] {
            nodes[0].set_handovers(asking("node-2"), BTreeSet::new());
            nodes[0].set_plan(Some(Arc::new(crate::plan::Plan::default())), rev_1);
            nodes[1].set_handovers(asking("node-1"), BTreeSet::new());
            nodes[1].set_plan(Some(Arc::new(crate::plan::Plan::default())), rev_2);
            mesh(&mut nodes, t0, from, 300, |_, _| false);
            from += 300;
            assert_eq!(
                released(&nodes[0], "node-2"),
                Some((to_1, rev_2)),
                "revisions {rev_1} and {rev_2}"
            );
            assert_eq!(
                released(&nodes[1], "node-1"),
                Some((to_2, rev_1)),
                "revisions {rev_1} and {rev_2}"
            );
        }
        // node-3 has the newest view, but node-2 holds the IP back for node-1, not for it.
        nodes[0].set_handovers(asking("node-2"), BTreeSet::new());
        nodes[0].set_plan(Some(Arc::new(crate::plan::Plan::default())), 5);
        nodes[1].set_handovers(asking("node-1"), BTreeSet::new());
        nodes[1].set_plan(Some(Arc::new(crate::plan::Plan::default())), 6);
        nodes[2].set_handovers(asking("node-2"), BTreeSet::new());
        nodes[2].set_plan(Some(Arc::new(crate::plan::Plan::default())), 9);
        mesh(&mut nodes, t0, from, 300, |_, _| false);
        assert_eq!(released(&nodes[2], "node-2"), Some((false, 6)));
        assert_eq!(
            released(&nodes[1], "node-1"),
            Some((true, 5)),
            "node-2 is newer than node-1"
        );
        assert_eq!(released(&nodes[0], "node-2"), Some((false, 6)));
    }

    /// Issue #32 G5.8: a holder that neither answers nor holds back an asked IP releases it to
    /// a requester whose view is older than its own only when its own (newer) plan gives the
    /// IP to that requester — not with its gate closed (no plan), nor when its plan gives the
    /// IP to nobody or to a third node. Without revisions the rule before them holds (no plan
    /// or nobody: released).
    #[test]
    fn a_requester_with_an_older_view_is_released_only_what_the_newer_plan_gives_it() {
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes = vec![core_with(1, c.clone(), &ring()), core_with(2, c, &ring())];
        joined(&mut nodes, t0, 2000);
        let ip = IpAddr::from([198, 51, 100, 9]);
        let plan_giving = |owner: Option<&str>| plan_giving(ip, owner);
        nodes[0].set_handovers(
            [("node-2".to_string(), [ip].into())].into(),
            BTreeSet::new(),
        );
        nodes[1].set_handovers(BTreeMap::new(), BTreeSet::new());
        let mut from = 2000;
        for (rev_1, rev_2, plan, released) in [
            (5, 9, None, false),
            (5, 9, plan_giving(None), false),
            (5, 9, plan_giving(Some("node-3")), false),
            (5, 9, plan_giving(Some("node-1")), true),
            (9, 5, None, true),
            (9, 5, plan_giving(None), true),
            (0, 9, None, true),
            (5, 0, plan_giving(None), true),
        ] {
            let described = format!("{rev_1} asks {rev_2} with plan {plan:?}");
            nodes[0].set_plan(Some(Arc::new(crate::plan::Plan::default())), rev_1);
            nodes[1].set_plan(plan, rev_2);
            mesh(&mut nodes, t0, from, 300, |_, _| false);
            from += 300;
            let reply = nodes[0].handover_replies()[&("node-2".to_string(), ip)];
            assert_eq!(reply.released, released, "{described}");
            assert_eq!(
                nodes[0].peer_revisions().get("node-2").copied(),
                (nodes[1].plan.is_some() && rev_2 != 0).then_some(rev_2),
                "a closed gate sends no revision: {described}"
            );
        }
    }

    /// Issue #32 G5.8: a speaker that holds an IP back for a third node does not release it to
    /// a requester, but records the requester whose view is strictly newer than its own
    /// (`handover_askers`, for the core to wait on it instead); not one whose view is as old or
    /// older, and nothing once the IP is no longer held back.
    #[test]
    fn a_newer_requester_of_an_ip_held_back_for_a_third_node_is_recorded() {
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes = vec![core_with(1, c.clone(), &ring()), core_with(2, c, &ring())];
        joined(&mut nodes, t0, 2000);
        let ip = IpAddr::from([198, 51, 100, 9]);
        // node-2 holds the IP back for node-3 and is asked about it by node-1.
        nodes[1].set_handovers(
            [("node-3".to_string(), [ip].into())].into(),
            BTreeSet::new(),
        );
        nodes[0].set_handovers(
            [("node-2".to_string(), [ip].into())].into(),
            BTreeSet::new(),
        );
        nodes[1].set_plan(Some(plan_giving(ip, Some("node-2")).unwrap()), 5);
        let mut from = 2000;
        for (rev_1, recorded) in [(5, false), (4, false), (0, false), (9, true)] {
            nodes[0].set_plan(Some(plan_giving(ip, Some("node-1")).unwrap()), rev_1);
            mesh(&mut nodes, t0, from, 300, |_, _| false);
            from += 300;
            let reply = nodes[0].handover_replies()[&("node-2".to_string(), ip)];
            assert!(!reply.released, "held back for node-3: revision {rev_1}");
            let asker = nodes[1].handover_askers().get(&ip);
            assert_eq!(
                asker.map(|a| (a.from.as_str(), a.rev)),
                recorded.then_some(("node-1", rev_1)),
                "revision {rev_1} against 5"
            );
        }
        nodes[1].set_handovers(BTreeMap::new(), BTreeSet::new());
        assert!(nodes[1].handover_askers().is_empty());
    }

    /// Issue #32 F1 with a voter down: each grant carries the granter's member-list digest;
    /// members listing what we list are `agreeing`; after a leave nobody is.
    #[test]
    fn grants_say_whose_member_list_agrees_with_ours() {
        let t0 = Instant::now();
        let config = MembershipConfig::default();
        let mut nodes: Vec<MembershipCore> = (1..=3)
            .map(|i| core(i, config.clone(), u64::from(i)))
            .collect();
        let addrs: Vec<SocketAddr> = (1..=3).map(|i| addr(i, 7947)).collect();
        for n in nodes.iter_mut() {
            n.set_peers(addrs.iter().copied(), clock(t0, 0));
        }
        mesh(&mut nodes, t0, 0, 2000, |_, _| false);
        // Gates closed (no plan yet, as at a cold start): nobody vouches for its list.
        for n in &nodes {
            assert!(n.agreeing().is_empty(), "{:?}", n.agreeing());
        }
        for n in nodes.iter_mut() {
            n.set_plan(Some(Arc::new(crate::plan::Plan::default())), 0);
        }
        mesh(&mut nodes, t0, 2000, 2000, |_, _| false);
        let others = |me: &str| -> BTreeSet<String> {
            ["node-1", "node-2", "node-3"]
                .into_iter()
                .filter(|n| *n != me)
                .map(String::from)
                .collect()
        };
        for n in &nodes {
            assert_eq!(n.agreeing(), others(&n.identity().name));
        }
        // node-1 left: node-2 and node-3 list two members once they know, node-1's old
        // digests say nothing any more.
        nodes[0].leave(clock(t0, 5000));
        assert!(nodes[0].agreeing().is_empty());
    }

    /// A plan that gives `ip` to `owner` (or to nobody) and names no other IP.
    fn plan_giving(ip: IpAddr, owner: Option<&str>) -> Option<Arc<crate::plan::Plan>> {
        let mut plan = crate::plan::Plan::default();
        plan.ips.insert(
            ip,
            crate::plan::IpPlan {
                owner: owner.map(String::from),
                services: Vec::new(),
                no_owner_reason: None,
                warnings: Vec::new(),
                reporter: None,
                label_set_aside: false,
            },
        );
        Some(Arc::new(plan))
    }

    fn core_with(last: u8, config: MembershipConfig, keys: &KeyRing) -> MembershipCore {
        let id = SpeakerId::with_generation(&format!("node-{last}"), addr(last, 7947), 1).unwrap();
        MembershipCore::with_seed(
            id,
            config,
            keys,
            Arc::new(Counters::default()),
            u64::from(last),
        )
        .unwrap()
    }

    /// node-1, node-2 and node-3 (default settings) after two seconds of a full mesh.
    fn three_joined(t0: Instant) -> Vec<MembershipCore> {
        let config = MembershipConfig::default();
        let mut nodes: Vec<MembershipCore> = (1..=3)
            .map(|i| core(i, config.clone(), u64::from(i)))
            .collect();
        joined(&mut nodes, t0, 2000);
        nodes
    }

    /// G5.5 behind a one-way cut: node-1's client NIC loses carrier while nothing it sends
    /// reaches node-2 (SWIM keeps it listed there through node-3's indirect probes). node-2
    /// gets the report from node-3's relay, keeps it while the cut lasts (past
    /// `CARRIER_MEMORY`), and gets "up again" the same way.
    #[test]
    fn a_carrier_report_reaches_a_member_behind_a_one_way_cut_through_a_relay() {
        let t0 = Instant::now();
        let mut nodes = three_joined(t0);
        let link = |up: bool| super::super::carrier::tests::one_link("eth1", up);
        for n in nodes.iter_mut() {
            n.set_carrier_report(link(true), clock(t0, 2000));
        }
        mesh(&mut nodes, t0, 2000, 500, |_, _| false);
        let cut = |from: usize, to: usize| from == 0 && to == 1;
        mesh(&mut nodes, t0, 2500, 500, cut);
        nodes[0].set_carrier_report(link(false), clock(t0, 3000));
        mesh(&mut nodes, t0, 3000, 50, cut);
        assert!(nodes[1].alive().contains("node-1"), "listed through node-3");
        assert_eq!(
            nodes[1].carrier_reports()["node-1"],
            link(false),
            "relayed at once"
        );
        mesh(&mut nodes, t0, 3050, 15_000, cut);
        assert!(nodes[1].alive().contains("node-1"));
        assert_eq!(
            nodes[1].carrier_reports()["node-1"],
            link(false),
            "kept past the memory"
        );
        nodes[0].set_carrier_report(link(true), clock(t0, 18_050));
        mesh(&mut nodes, t0, 18_050, 50, cut);
        assert_eq!(nodes[1].carrier_reports()["node-1"], link(true));
    }

    fn joined(nodes: &mut [MembershipCore], t0: Instant, ms: u64) {
        let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.identity().addr).collect();
        for n in nodes.iter_mut() {
            n.set_peers(addrs.iter().copied(), clock(t0, 0));
        }
        mesh(nodes, t0, 0, ms, |_, _| false);
    }

    /// Issue #29 O6: a second speaker under this node's own name (a replaced node's old machine
    /// back on the network) is reported by both as `SameName` under their own name — not
    /// refused — with the other's address, and nothing is reported once it has left.
    #[test]
    fn a_second_speaker_under_our_own_name_is_reported_not_refused() {
        let t0 = Instant::now();
        let twin_id = SpeakerId::with_generation("node-1", addr(9, 7947), 2).unwrap();
        let twin = MembershipCore::with_seed(
            twin_id,
            MembershipConfig::default(),
            &ring(),
            Arc::new(Counters::default()),
            9,
        )
        .unwrap();
        let mut nodes = vec![
            core(1, MembershipConfig::default(), 1),
            core(2, MembershipConfig::default(), 2),
            twin,
        ];
        for n in &nodes {
            assert!(n.refused().is_empty(), "{:?}", n.refused());
        }
        joined(&mut nodes, t0, 2_000);
        assert_eq!(
            nodes[0].refused().get("node-1"),
            Some(&Mismatch::SameName {
                addr: addr(9, 7947)
            })
        );
        assert_eq!(
            nodes[2].refused().get("node-1"),
            Some(&Mismatch::SameName {
                addr: addr(1, 7947)
            })
        );
        assert!(
            !Mismatch::SameName {
                addr: addr(9, 7947)
            }
            .refuses()
        );
        assert!(nodes[1].refused().is_empty(), "{:?}", nodes[1].refused());
        nodes[2].leave(clock(t0, 2_000));
        mesh(&mut nodes, t0, 2_000, 3_000, |_, _| false);
        assert!(nodes[0].refused().is_empty(), "{:?}", nodes[0].refused());
    }

    /// G1 (found by the simulator's one-way class): a speaker that lists few members (here
    /// one, as after a rejoin while its sends were lost) but knows three voters is cut off when
    /// it hears from fewer than half of *the voters*, and declares nobody down: at the heal its
    /// down notices would have made the healthy owners believe they were declared down and
    /// leave. With the voters unknown it falls back on its list (two members: it declares).
    #[test]
    fn a_speaker_that_hears_from_less_than_half_of_the_voters_declares_nobody_down() {
        for voters_known in [true, false] {
            let t0 = Instant::now();
            let c = MembershipConfig::default();
            let mut nodes = vec![core_with(1, c.clone(), &ring()), core_with(2, c, &ring())];
            joined(&mut nodes, t0, 2000);
            assert_eq!(nodes[0].alive().len(), 2);
            if voters_known {
                let voters = ["node-1", "node-2", "node-3"].map(String::from).into();
                nodes[0].set_voters(voters);
            }
            // node-1 hears nothing more from node-2.
            mesh(&mut nodes, t0, 2000, 3000, |from, _| from == 1);
            assert_eq!(
                nodes[0].alive().contains("node-2"),
                voters_known,
                "voters known: {voters_known}"
            );
        }
    }

    /// A suspect→down timer whose suspect has refuted (here: no suspicion at that incarnation
    /// at all) is dropped. foca 2.0.0 sends the member a `TurnUndead` from such a timer, and the
    /// healthy member renewed its identity and gave up its IPs: with 2–5 % membership loss,
    /// owners moved every few seconds (the simulator's loss class, I-flap).
    #[test]
    fn a_refuted_suspicion_tells_nobody_it_is_down() {
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes = vec![core_with(1, c.clone(), &ring()), core_with(2, c, &ring())];
        joined(&mut nodes, t0, 2000);
        let b = nodes[1].identity().clone();
        let incarnation = nodes[0]
            .foca
            .iter_members()
            .find(|m| *m.id() == b)
            .map(|m| m.incarnation())
            .unwrap();
        // The timer of a suspicion raised at an older incarnation, due 200 ms on, when the
        // lease evidence of the quiet pair has lapsed (nothing is exchanged meanwhile).
        nodes[0].timers.schedule(
            t0 + Duration::from_millis(2000),
            Duration::from_millis(200),
            Timer::ChangeSuspectToDown {
                member_id: b.clone(),
                incarnation: incarnation.wrapping_sub(1),
                token: foca::TimerToken::default(),
            },
        );
        nodes[0].handle_timers(clock(t0, 2200));
        let (now, from) = (clock(t0, 2200), nodes[0].identity().addr);
        for out in nodes[0].take_outgoing() {
            let _ = nodes[1].handle_datagram(&out.datagram, from, now);
        }
        assert_eq!(
            *nodes[1].identity(),
            b,
            "node-2 was told it is down and renewed"
        );
        assert_eq!(nodes[0].counters().snapshot().suspicions_stale, 1);
        assert!(nodes[0].alive().contains("node-2"));
    }

    /// node-1 and node-2 on the default timings, node-3 with a 400 ms suspicion, joined for 2 s.
    fn two_fast_one_slow(t0: Instant) -> Vec<MembershipCore> {
        let fast = MembershipConfig::default();
        let slow = MembershipConfig {
            suspect_timeout: Duration::from_millis(400),
            ..MembershipConfig::default()
        };
        let mut nodes = vec![
            core_with(1, fast.clone(), &ring()),
            core_with(2, fast, &ring()),
            core_with(3, slow, &ring()),
        ];
        joined(&mut nodes, t0, 2000);
        nodes
    }

    /// G5.4: a peer with other timings is refused by both sides: not alive, no evidence either
    /// way, counted in `refused()` with the reason; the agreeing members are unaffected. Without
    /// the hello the three would list each other alive and grant each other leases.
    #[test]
    fn a_peer_with_other_timings_is_refused_by_both_sides() {
        let t0 = Instant::now();
        let nodes = two_fast_one_slow(t0);
        let now = t0 + Duration::from_millis(2000);
        for n in &nodes[..2] {
            assert!(!n.alive().contains("node-3"), "{:?}", n.alive());
            assert_eq!(n.alive().len(), 2);
            assert_eq!(
                n.refused().get("node-3").map(Mismatch::label),
                Some("timings")
            );
            assert!(n.evidence().get("node-3").is_none_or(|t| now >= *t));
        }
        assert_eq!(
            nodes[2].alive(),
            &BTreeSet::from(["node-3".to_owned()]),
            "the odd one out lists nobody"
        );
        assert_eq!(nodes[2].refused().len(), 2);
        assert!(nodes[2].evidence().values().all(|t| now >= *t));
    }

    /// G5.4 (found by a review): a refused peer that is declared down and rejoins (foca renews
    /// its identity: generation + 1, same process, same configuration) stays refused. Before
    /// the fix the refusers held its hello under the old identity and treated the renewed one
    /// as unjudged, and the rejoiner sent no hello until its next `HELLO_INTERVAL` round: it was
    /// counted alive (IPs planned for it), got grants and its grants counted. Here: a 500 ms
    /// cut, shorter than node-3's own suspicion, so node-3 keeps its peers as members and never
    /// announces (an announce would carry a hello); every cut from 300 to 650 ms does it.
    #[test]
    fn a_refused_peer_that_rejoins_stays_refused() {
        let t0 = Instant::now();
        let mut nodes = two_fast_one_slow(t0);
        assert_eq!(
            nodes[0].refused().get("node-3").map(Mismatch::label),
            Some("timings")
        );
        let gen_before = nodes[2].identity().generation;
        // node-3 is cut off for 500 ms: node-1 and node-2 declare it down, it renews.
        mesh(&mut nodes, t0, 2000, 500, |a, b| a == 2 || b == 2);
        let mut counted_alive_ms = Vec::new();
        for t in 2500..12_000 {
            mesh(&mut nodes, t0, t, 1, |_, _| false);
            if nodes[0].alive().contains("node-3") {
                counted_alive_ms.push(t);
            }
        }
        assert!(
            nodes[2].identity().generation > gen_before,
            "node-3 rejoined under a renewed identity"
        );
        assert_eq!(
            nodes[0].refused().get("node-3").map(Mismatch::label),
            Some("timings"),
            "refused again once its next hello round came"
        );
        assert!(
            counted_alive_ms.is_empty(),
            "node-1 counted the refused node-3 alive for {} ms after the heal ({:?}..={:?} ms)",
            counted_alive_ms.len(),
            counted_alive_ms.first(),
            counted_alive_ms.last(),
        );
    }

    /// Like [`mesh`] with no cut, each node's wall clock off by `skew[i]` ms (an NTP step).
    fn mesh_skewed(nodes: &mut [MembershipCore], t0: Instant, from: u64, ms: u64, skew: &[i64]) {
        let clock_of = |i: usize, t: u64| Clock {
            mono: t0 + Duration::from_millis(t),
            wall_ms: (WALL0 + t).saturating_add_signed(skew[i]),
        };
        for t in from..from + ms {
            for (i, n) in nodes.iter_mut().enumerate() {
                n.handle_timers(clock_of(i, t));
            }
            for _ in 0..10 {
                let mut any = false;
                for i in 0..nodes.len() {
                    for out in nodes[i].take_outgoing() {
                        any = true;
                        let src = nodes[i].identity().addr;
                        if let Some(j) = nodes.iter().position(|n| n.identity().addr == out.to) {
                            let _ = nodes[j].handle_datagram(&out.datagram, src, clock_of(j, t));
                        }
                    }
                }
                if !any {
                    break;
                }
            }
        }
    }

    /// G5.4 (found by a review): hellos of one identity are ordered by its sequence number,
    /// not by the sender's wall clock (as they were). node-2's wall clock steps back 20 s (an
    /// NTP step; inside the 30 s replay window, so SWIM and the lease carry on). Then the
    /// documented rotation runs with `set_keys`: step 1 (old+new) on every node, and a second
    /// later step 2 (new+old) on node-1. Ordered by clock, node-2's step-1 hello (and every
    /// hello for 20 s) looked older than the one node-1 held and was ignored, so node-1 judged
    /// node-2 on its pre-rotation hello ([old]), which lacks node-1's new primary: node-1
    /// refused a consistent peer while node-2 kept node-1 alive, the two disagreeing on who is
    /// alive (the recipe for two answerers, or none).
    #[test]
    fn a_senders_clock_step_back_never_hides_its_key_change() {
        let (old, new) = (ring(), second_ring());
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes = vec![
            core_with(1, c.clone(), &old),
            core_with(2, c.clone(), &old),
            core_with(3, c, &old),
        ];
        joined(&mut nodes, t0, 2000);
        assert!(
            nodes
                .iter()
                .all(|n| n.alive().len() == 3 && n.refused().is_empty())
        );
        let skew = [0, -20_000, 0];
        mesh_skewed(&mut nodes, t0, 2000, 100, &skew);
        // Step 1 everywhere.
        for n in nodes.iter_mut() {
            n.set_keys(&ring_of(&old, &new));
        }
        mesh_skewed(&mut nodes, t0, 2100, 900, &skew);
        assert!(nodes.iter().all(|n| n.refused().is_empty()));
        // Step 2 on node-1.
        nodes[0].set_keys(&ring_of(&new, &old));
        mesh_skewed(&mut nodes, t0, 3000, 1000, &skew);
        assert!(
            nodes[1].alive().contains("node-1"),
            "node-2 keeps node-1 alive: {:?}",
            nodes[1].alive()
        );
        assert!(
            nodes[0].refused().is_empty() && nodes[0].alive().len() == 3,
            "node-1 refuses a consistent peer: refused {:?}, alive {:?}; node-1 holds node-2's \
             hello saying {:?} (its ring is old+new)",
            nodes[0].refused(),
            nodes[0].alive(),
            nodes[0].hellos.get("node-2").map(|h| h.1.keys.clone()),
        );
    }

    /// G5.4 and G1: during a key rotation, a peer whose ring lacks our primary key (a step
    /// skipped: it went straight to the new key alone) is reported, with reason `key`, by the
    /// side that can open its datagrams — and not refused: that side seals to it with the key
    /// both hold, so the link is two-way and both list each other alive with lease evidence.
    /// (Refusing it, as before, left node-2 able to open nothing from node-1: with a third node
    /// down, neither side had a majority and every IP went silent — the simulator's rotation
    /// class.) A peer holding both keys is accepted whichever it seals with (the documented
    /// order), and finishing the rotation clears the report.
    #[test]
    fn a_peer_whose_ring_lacks_our_primary_key_is_reported_and_reached_with_the_shared_key() {
        let (old, new) = (ring(), second_ring());
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        // Documented order, mid-roll: old+new beside new+old: all agree.
        let mut nodes = vec![
            core_with(1, c.clone(), &ring_of(&old, &new)),
            core_with(2, c.clone(), &ring_of(&new, &old)),
        ];
        joined(&mut nodes, t0, 1000);
        for n in &nodes {
            assert!(n.refused().is_empty(), "{:?}", n.refused());
            assert_eq!(n.alive().len(), 2);
        }
        // Skipped step: node-2 holds the new key alone; node-1 (old+new) opens its datagrams
        // and seals to it with the new key.
        let mut nodes = vec![
            core_with(1, c.clone(), &ring_of(&old, &new)),
            core_with(2, c, &new),
        ];
        joined(&mut nodes, t0, 1000);
        assert_eq!(
            nodes[0].refused().get("node-2").map(Mismatch::label),
            Some("key")
        );
        assert!(nodes[1].refused().is_empty(), "{:?}", nodes[1].refused());
        let now = t0 + Duration::from_millis(1000);
        for (n, peer) in [(&nodes[0], "node-2"), (&nodes[1], "node-1")] {
            assert!(n.alive().contains(peer), "{:?}", n.alive());
            assert!(
                n.evidence().get(peer).is_some_and(|until| *until > now),
                "two-way evidence of {peer}: {:?}",
                n.evidence()
            );
        }
        // Finishing the rotation on node-1 clears the report at once.
        nodes[0].set_keys(&new);
        assert!(nodes[0].refused().is_empty());
    }

    fn hex_of(key: &super::super::key::Key) -> String {
        key.as_bytes().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A second key, for rotations: [`ring`]'s successor.
    fn second_ring() -> KeyRing {
        let hex: String = (0..32u8)
            .map(|i| format!("{:02x}", i.wrapping_mul(29).wrapping_add(3)))
            .collect();
        KeyRing::parse(hex.as_bytes()).unwrap()
    }

    /// The ring `first`'s primary then `second`'s (a rotation step).
    fn ring_of(first: &KeyRing, second: &KeyRing) -> KeyRing {
        let text = format!(
            "{}\n{}\n",
            hex_of(first.primary()),
            hex_of(second.primary())
        );
        KeyRing::parse(text.as_bytes()).unwrap()
    }

    /// G5.4: an older hello (a recording, or one overtaken in the network) never overrides a
    /// newer one, so a replayed hello cannot bring an old configuration back: from one identity
    /// by its sequence number (not the sender's clock), across identities by generation unless
    /// the older-looking identity is the one the membership lists.
    #[test]
    fn an_older_hello_never_overrides_a_newer_one() {
        let t0 = Instant::now();
        let mut a = core(1, MembershipConfig::default(), 1);
        let b_id = SpeakerId::with_generation("node-2", addr(2, 7947), 5).unwrap();
        let (me, ours) = (a.identity().clone(), a.own_timings);
        let hello = |src: &SpeakerId, seq: u64, timings: Timings| Hello {
            src: src.clone(),
            dst: me.clone(),
            seq,
            protocol: PROTOCOL,
            min_protocol: MIN_PROTOCOL,
            timings,
            keys: vec![ring().primary().fingerprint()],
        };
        let good = hello(&b_id, 10, ours);
        let mut odd = ours;
        odd.suspect_timeout_ms += 1;
        let body = |h: &Hello| postcard::to_allocvec(h).unwrap();
        assert_eq!(a.handle_hello(&body(&good), t0), Ok(()));
        assert_eq!(a.handle_hello(&body(&hello(&b_id, 9, odd)), t0), Ok(()));
        assert_eq!(a.hellos["node-2"].1, good, "the older hello was ignored");
        assert!(a.refused().is_empty());
        assert_eq!(a.handle_hello(&body(&hello(&b_id, 11, odd)), t0), Ok(()));
        assert_eq!(
            a.refused().get("node-2").map(Mismatch::label),
            Some("timings")
        );
        // An older generation (a previous process) that the membership does not list: ignored,
        // whatever its sequence number.
        let earlier = SpeakerId::with_generation("node-2", addr(2, 7947), 4).unwrap();
        assert_eq!(
            a.handle_hello(&body(&hello(&earlier, 99, ours)), t0),
            Ok(())
        );
        assert!(a.refused().contains_key("node-2"));
        // A newer generation (restarted) wins from its first hello.
        let later = SpeakerId::with_generation("node-2", addr(2, 7947), 6).unwrap();
        assert_eq!(a.handle_hello(&body(&hello(&later, 0, ours)), t0), Ok(()));
        assert!(a.refused().is_empty());
        // Addressed to another member: misdirected.
        let mut other = good.clone();
        other.dst = b_id.clone();
        assert_eq!(
            a.handle_hello(&body(&other), t0),
            Err(DropReason::Misdirected)
        );
    }

    #[test]
    fn empty_peer_set_admits_every_source_to_authentication() {
        let t0 = Instant::now();
        let mut c = core(1, MembershipConfig::default(), 1);
        let from = addr(99, 1234);
        assert_eq!(
            c.handle_datagram(&keyless(100, 7), from, clock(t0, 0)),
            Err(DropReason::AuthFailed)
        );
        let s = c.counters().snapshot();
        assert_eq!((s.dropped_auth, s.dropped_unknown_source), (1, 0));
    }

    #[test]
    fn unknown_sources_are_dropped_before_authentication() {
        let t0 = Instant::now();
        let mut c = core(1, MembershipConfig::default(), 2);
        c.set_peers([addr(2, 7947), addr(3, 7947)], clock(t0, 0));
        let _ = c.take_outgoing();
        for from in [addr(99, 7947), mapped(addr(99, 7947)), addr(4, 7947)] {
            assert_eq!(
                c.handle_datagram(&keyless(200, 1), from, clock(t0, 1)),
                Err(DropReason::UnknownSource),
                "{from}"
            );
        }
        // A peer's IP, from any port and in IPv4-mapped form, goes on to authentication.
        for from in [addr(2, 7947), addr(2, 50_000), mapped(addr(3, 7947))] {
            assert_eq!(
                c.handle_datagram(&keyless(200, 1), from, clock(t0, 1)),
                Err(DropReason::AuthFailed),
                "{from}"
            );
        }
        // Framing is checked first, whatever the source.
        assert_eq!(
            c.handle_datagram(b"junk", addr(99, 1), clock(t0, 1)),
            Err(DropReason::Malformed)
        );
        let s = c.counters().snapshot();
        assert_eq!(s.dropped_unknown_source, 3);
        assert_eq!(s.dropped_auth, 3);
        assert_eq!(s.dropped_malformed, 1);
        assert_eq!(s.datagrams_in, 7);
        assert_eq!(s.dropped_total(), 7);
    }

    #[test]
    fn admission_can_be_turned_off() {
        let t0 = Instant::now();
        let config = MembershipConfig {
            admit_only_peers: false,
            ..MembershipConfig::default()
        };
        let mut c = core(1, config, 3);
        c.set_peers([addr(2, 7947)], clock(t0, 0));
        assert_eq!(
            c.handle_datagram(&keyless(200, 1), addr(99, 7947), clock(t0, 1)),
            Err(DropReason::AuthFailed)
        );
    }

    #[test]
    fn members_are_admitted_even_when_not_among_the_peers() {
        let t0 = Instant::now();
        let mut a = core(1, MembershipConfig::default(), 4);
        let mut b = core(2, MembershipConfig::default(), 5);
        // b knows a; a's peer list (from the API) lags: it only knows some other node.
        a.set_peers([addr(3, 7947)], clock(t0, 0));
        let _ = a.take_outgoing();
        b.set_peers([addr(1, 7947)], clock(t0, 0));
        // b's announce, and the hello that goes with it, are dropped by a: unknown source.
        exchange(&mut a, &mut b, clock(t0, 1));
        assert_eq!(a.counters().snapshot().dropped_unknown_source, 2);
        assert_eq!(a.alive().len(), 1);
        // a's peer list catches up: a announces to b, they join, and b is now a member.
        a.set_peers([addr(2, 7947), addr(3, 7947)], clock(t0, 2));
        exchange(&mut a, &mut b, clock(t0, 3));
        assert_eq!(a.alive().len(), 2, "{:?}", a.alive());
        assert!(a.sources.admits(addr(2, 7947)));
        // Remove b from a's peers again: a member stays admitted (and still a member).
        a.set_peers([addr(3, 7947)], clock(t0, 4));
        assert!(a.sources.admits(addr(2, 7947)));
        assert!(a.sources.admits(mapped(addr(2, 1))));
        assert!(!a.sources.admits(addr(4, 7947)));
        assert!(a.budget.is_member(mapped(addr(2, 7947))));
    }

    /// G4 / S15: datagrams nobody authenticated spend nothing. Forged floods from a member's IP
    /// on another port *and from the member's own `IP:port`* (what one host without the key did
    /// in the lab, issue #32: every speaker lost its peers' datagrams to the budget and withdrew),
    /// and a replay flood of one of the member's genuine datagrams, all at 20 datagrams/ms while
    /// the member's own traffic flows: none of its datagrams is dropped, none of the flood is
    /// rate-limited (each is refused by its tag or as a replay), it stays alive, and no dropped
    /// datagram costs a pass over the members (`process`).
    #[test]
    fn forged_and_replayed_floods_spend_no_members_budget() {
        let t0 = Instant::now();
        let config = MembershipConfig {
            max_opens_per_second: 2000,
            max_other_opens_per_second: 100,
            ..MembershipConfig::default()
        };
        let mut a = core(1, config.clone(), 6);
        let mut b = core(2, config, 7);
        a.set_peers([addr(2, 7947)], clock(t0, 0));
        b.set_peers([addr(1, 7947)], clock(t0, 0));
        exchange(&mut a, &mut b, clock(t0, 0));
        assert_eq!(a.alive().len(), 2);
        let before = a.counters().snapshot();
        let other_port = addr(2, 40_000);
        let spoofed = b.identity().addr;
        let mut captured: Option<Vec<u8>> = None;
        let mut member_drops = 0;
        for ms in 1..=2000u64 {
            let now = clock(t0, ms);
            for i in 0..20 {
                let (datagram, from, expected) = match (i % 3, captured.as_ref()) {
                    (0, _) => (keyless(300, 9), other_port, DropReason::AuthFailed),
                    (1, _) | (_, None) => (keyless(300, 7), spoofed, DropReason::AuthFailed),
                    (_, Some(c)) => (c.clone(), spoofed, DropReason::Replayed),
                };
                let processed = a.processed;
                assert_eq!(a.handle_datagram(&datagram, from, now), Err(expected));
                assert_eq!(
                    a.processed, processed,
                    "a dropped datagram costs no processing"
                );
            }
            a.handle_timers(now);
            b.handle_timers(now);
            for out in b.take_outgoing() {
                if out.to != a.identity().addr {
                    continue;
                }
                if let Err(reason) = a.handle_datagram(&out.datagram, spoofed, now) {
                    assert_ne!(reason, DropReason::RateLimited);
                    member_drops += 1;
                }
                // A SWIM datagram: lease messages are not replay-checked (`super::lease`).
                let swim = Opener::new(&ring())
                    .open(&out.datagram)
                    .is_ok_and(|o| o.payload.first() == Some(&KIND_SWIM));
                if swim {
                    captured.get_or_insert(out.datagram);
                }
            }
            for out in a.take_outgoing() {
                let _ = b.handle_datagram(&out.datagram, a.identity().addr, now);
            }
        }
        assert_eq!(member_drops, 0);
        assert_eq!(a.alive().len(), 2);
        assert!(
            a.take_events()
                .iter()
                .all(|e| matches!(e, MembershipEvent::Up(_)))
        );
        let after = a.counters().snapshot();
        assert_eq!(after.dropped_rate_limited, before.dropped_rate_limited);
        assert!(after.dropped_replayed > before.dropped_replayed);
        assert_eq!(
            (after.dropped_auth - before.dropped_auth)
                + (after.dropped_replayed - before.dropped_replayed),
            40_000
        );
    }

    #[test]
    fn ipv4_mapped_member_sources_use_the_member_bucket() {
        let t0 = Instant::now();
        let mut a = core(1, MembershipConfig::default(), 8);
        let mut b = core(2, MembershipConfig::default(), 9);
        a.set_peers([addr(2, 7947)], clock(t0, 0));
        b.set_peers([addr(1, 7947)], clock(t0, 0));
        exchange(&mut a, &mut b, clock(t0, 0));
        // b's probes seen as if a's socket were bound to [::].
        let mut delivered = 0;
        for ms in (10..1000).step_by(10) {
            b.handle_timers(clock(t0, ms));
            for out in b.take_outgoing() {
                assert_eq!(
                    a.handle_datagram(&out.datagram, mapped(b.identity().addr), clock(t0, ms)),
                    Ok(())
                );
                delivered += 1;
            }
            let _ = a.take_outgoing();
        }
        assert!(delivered > 0);
        assert!(a.budget.is_member(mapped(b.identity().addr)));
        assert_eq!(a.counters().snapshot().dropped_total(), 0);
    }

    /// Issue #27 item 3: a key holder cannot speak for another member from its own address.
    /// node-3 (one compromised node: a peer, a member, the key) sends node-1 every datagram
    /// node-2 sends node-1 — SWIM, lease, hello and carrier messages, sealed with the cluster key,
    /// naming node-2 as their sender — from node-3's own address, before node-2's own copy
    /// arrives. Each is dropped as `wrong_source` and changes no state: node-2's copy is then
    /// accepted (not a replay), and the membership runs as if nothing had been sent. Then
    /// node-3 announces a restarted node-2 (a newer generation) from its own address: dropped,
    /// node-1 keeps the real node-2 and reports no restart.
    #[test]
    fn a_key_holder_cannot_speak_for_another_member() {
        let t0 = Instant::now();
        let config = MembershipConfig::default();
        let mut nodes: Vec<MembershipCore> = (1..=3)
            .map(|i| core(i, config.clone(), 60 + u64::from(i)))
            .collect();
        let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.identity().addr).collect();
        for n in nodes.iter_mut() {
            n.set_peers(addrs.iter().copied(), clock(t0, 0));
        }
        nodes[1].set_carrier_report(crate::carrier::LinkReport::default(), clock(t0, 0));
        let kind_of = |d: &[u8]| Opener::new(&ring()).open(d).unwrap().payload[0];
        let mut forged = BTreeMap::<u8, u64>::new();
        for t in 0..3000 {
            let now = clock(t0, t);
            for n in nodes.iter_mut() {
                n.handle_timers(now);
            }
            for _ in 0..10 {
                let mut any = false;
                for i in 0..nodes.len() {
                    for out in nodes[i].take_outgoing() {
                        any = true;
                        let src = addrs[i];
                        let j = addrs.iter().position(|a| *a == out.to).unwrap();
                        if i == 1 && j == 0 {
                            assert_eq!(
                                nodes[0].handle_datagram(&out.datagram, addrs[2], now),
                                Err(DropReason::WrongSource)
                            );
                            *forged.entry(kind_of(&out.datagram)).or_default() += 1;
                            assert_ne!(
                                nodes[0].handle_datagram(&out.datagram, src, now),
                                Err(DropReason::Replayed)
                            );
                        } else {
                            let _ = nodes[j].handle_datagram(&out.datagram, src, now);
                        }
                    }
                }
                if !any {
                    break;
                }
            }
        }
        let kinds: BTreeSet<u8> = forged.keys().copied().collect();
        assert_eq!(
            kinds,
            BTreeSet::from([KIND_SWIM, KIND_LEASE, KIND_HELLO, KIND_CARRIER]),
            "{forged:?}"
        );
        let c = nodes[0].counters().snapshot();
        assert_eq!(c.dropped_wrong_source, forged.values().sum::<u64>());
        assert_eq!(c.dropped_replayed, 0);
        for n in &nodes {
            assert_eq!(n.alive().len(), 3, "{:?}", n.alive());
        }
        let now = t0 + Duration::from_millis(3000);
        assert_eq!(
            nodes[0].evidence().values().filter(|t| now < **t).count(),
            2
        );
        let _ = nodes[0].take_events();

        // A restarted node-2, made up by node-3 with the key and sent from node-3's address.
        let newer = SpeakerId::with_generation("node-2", addrs[1], 9).unwrap();
        let mut impostor =
            MembershipCore::with_seed(newer, config, &ring(), Arc::new(Counters::default()), 99)
                .unwrap();
        impostor.set_peers([addrs[0]], clock(t0, 3000));
        let sent = impostor.take_outgoing();
        assert!(!sent.is_empty());
        for out in sent {
            assert_eq!(
                nodes[0].handle_datagram(&out.datagram, addrs[2], clock(t0, 3000)),
                Err(DropReason::WrongSource)
            );
        }
        assert!(
            nodes[0].foca.iter_members().all(|m| m.id().generation == 1),
            "node-1 took the impostor in"
        );
        assert!(
            !nodes[0]
                .take_events()
                .contains(&MembershipEvent::Restarted("node-2".into()))
        );
    }

    /// Issue #27 item 3, the lease messages' handover fields (issue #32 G5.8): a key holder at
    /// another member's address (node-3) cannot release, in node-2's name, an IP node-2 still answers for (node-1
    /// would claim it at once: two answerers), nor ask node-1 in node-2's name which of its IPs
    /// it has let go. Both are dropped as `wrong_source`, with nothing recorded and nothing
    /// sent; the same grant from node-2's own address is recorded, so the source check alone
    /// stops it.
    #[test]
    fn a_key_holder_cannot_release_or_ask_in_another_members_name() {
        let t0 = Instant::now();
        let c = MembershipConfig::default();
        let mut nodes: Vec<_> = (1..=3).map(|i| core_with(i, c.clone(), &ring())).collect();
        joined(&mut nodes, t0, 2000);
        let ip = IpAddr::from([198, 51, 100, 1]);
        // node-1 waits to claim .1 from node-2, which still answers for it.
        nodes[0].set_handovers(
            [("node-2".to_string(), BTreeSet::from([ip]))].into(),
            BTreeSet::new(),
        );
        nodes[1].set_handovers(BTreeMap::new(), BTreeSet::from([ip]));
        mesh(&mut nodes, t0, 2000, 500, |_, _| false);
        let released = |n: &MembershipCore| {
            n.handover_replies()
                .get(&("node-2".to_string(), ip))
                .is_some_and(|r| r.released)
        };
        assert!(!released(&nodes[0]), "{:?}", nodes[0].handover_replies());
        // node-1's next lease request to node-2: a forged grant answers its round.
        let opener = Opener::new(&ring());
        let mut round = None;
        for t in 2500..5000 {
            nodes[0].handle_timers(clock(t0, t));
            for out in nodes[0].take_outgoing() {
                let opened = opener.open(&out.datagram).unwrap();
                if let Some((&KIND_LEASE, body)) = opened.payload.split_first()
                    && let Ok(LeaseMsg::Request { dst, seq, asks, .. }) = LeaseMsg::decode(body)
                    && dst.name == "node-2"
                {
                    assert_eq!(asks, vec![ip]);
                    round = Some((seq, t));
                }
            }
            if round.is_some() {
                break;
            }
        }
        let (seq, t) = round.expect("node-1 sends node-2 a lease request");
        let now = clock(t0, t);
        let mut rng = StdRng::seed_from_u64(7);
        let mut seal = |msg: &LeaseMsg| {
            let mut plain = vec![KIND_LEASE];
            plain.extend(postcard::to_allocvec(msg).unwrap());
            Sealer::new(ring().primary())
                .seal(&plain, now.wall_ms, &mut rng)
                .unwrap()
        };
        let (me, node_2) = (nodes[0].identity().clone(), nodes[1].identity().clone());
        let grant = seal(&LeaseMsg::Grant {
            src: node_2.clone(),
            dst: me.clone(),
            seq,
            released: vec![ip],
            members: Some(0),
            rev: 0,
        });
        let request = seal(&LeaseMsg::Request {
            src: node_2.clone(),
            dst: me,
            seq: 0,
            asks: vec![ip],
            rev: 0,
        });
        // node-3, a member holding the key, sends them from its own address.
        let attacker = nodes[2].identity().addr;
        for forged in [&grant, &request] {
            assert_eq!(
                nodes[0].handle_datagram(forged, attacker, now),
                Err(DropReason::WrongSource)
            );
        }
        assert!(!released(&nodes[0]), "{:?}", nodes[0].handover_replies());
        assert!(nodes[0].take_outgoing().is_empty(), "a grant went out");
        assert_eq!(nodes[0].counters().snapshot().dropped_wrong_source, 2);
        // The same grant from node-2's own address counts.
        assert_eq!(nodes[0].handle_datagram(&grant, node_2.addr, now), Ok(()));
        assert!(released(&nodes[0]), "{:?}", nodes[0].handover_replies());
    }

    /// Lists node-2 as a suspect (at `incarnation`) and schedules foca's suspect→down timer for
    /// it, due 1 s after `t0`.
    fn suspect_node_2(a: &mut MembershipCore, t0: Instant, incarnation: foca::Incarnation) {
        let victim = SpeakerId::with_generation("node-2", addr(2, 7947), 1).unwrap();
        let suspect = foca::Member::new(victim.clone(), incarnation, State::Suspect);
        a.foca
            .apply_many(std::iter::once(suspect), false, &mut a.runtime)
            .unwrap();
        let _ = a.take_outgoing();
        let timer = Timer::ChangeSuspectToDown {
            member_id: victim,
            incarnation,
            token: 0,
        };
        a.timers.schedule(t0, Duration::from_millis(1000), timer);
    }

    /// A suspect→down timer that runs more than half a suspicion timeout late (this speaker
    /// was not running) is postponed by one suspicion timeout, every time it is late; one that
    /// runs on time is handed to foca.
    #[test]
    fn a_late_suspicion_is_postponed_and_an_on_time_one_is_not() {
        let config = MembershipConfig::default();
        let suspect = config.suspect_timeout;
        let mut a = core(1, config, 7);
        let t0 = Instant::now();
        suspect_node_2(&mut a, t0, 0);
        // Runs 150 ms late (half the fast profile's 200 ms suspicion is 100 ms): postponed.
        let late = clock(t0, 1150);
        a.handle_timers(late);
        assert_eq!(a.counters().snapshot().suspicions_postponed, 1);
        // Not due again before one suspicion timeout has passed…
        a.handle_timers(Clock {
            mono: late.mono + suspect - Duration::from_millis(1),
            wall_ms: WALL0 + 1_300,
        });
        assert_eq!(a.counters().snapshot().suspicions_postponed, 1);
        // …and late again then (still starved): postponed again, so it was re-queued.
        let later = clock(t0, 1150 + u64::try_from(suspect.as_millis()).unwrap() + 150);
        a.handle_timers(later);
        assert_eq!(a.counters().snapshot().suspicions_postponed, 2);
        // On time: foca gets it (node-2 is declared down), not postponed again.
        let on_time = later.mono + suspect;
        a.handle_timers(Clock {
            mono: on_time,
            wall_ms: WALL0 + 5_000,
        });
        assert_eq!(a.counters().snapshot().suspicions_postponed, 2);
    }

    /// A speaker whose timers are always late still declares a suspect down after
    /// [`MAX_POSTPONEMENTS`] postponements (a crashed peer of a starved survivor fails over).
    #[test]
    fn a_suspicion_is_postponed_at_most_four_times() {
        let config = MembershipConfig::default();
        let suspect = config.suspect_timeout;
        let mut a = core(1, config, 9);
        let t0 = Instant::now();
        suspect_node_2(&mut a, t0, 3);
        let mut at = t0 + Duration::from_millis(1000);
        for _ in 0..10 {
            at += suspect + Duration::from_millis(150); // always 150 ms late
            a.handle_timers(Clock {
                mono: at,
                wall_ms: WALL0,
            });
        }
        assert_eq!(
            a.counters().snapshot().suspicions_postponed,
            u64::from(MAX_POSTPONEMENTS)
        );
        assert!(a.postponed.is_empty(), "the count goes with the suspicion");
    }
}
