//! The tokio adapter around [`MembershipCore`]: one UDP socket, one task, a deadline timer, and
//! the channels the rest of the speaker reads (DESIGN §5 S3). This is the only membership file
//! that does I/O.
//!
//! ```text
//!   set_peers ──watch──▶ ┌───────────────┐ ──watch──▶ members()  (BTreeSet<node name>)
//!   leave ─────mpsc───▶ │ task: select! │ ──bcast──▶ events()   (Up / Down / Restarted)
//!   UDP socket ◀──────▶ │ MembershipCore│ ──atomics▶ counters()
//!                       └───────────────┘
//! ```

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr, SocketAddrV6};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::net::UdpSocket;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use super::config::{ConfigError, MembershipConfig};
use super::counters::{Counters, CountersSnapshot};
use super::hello::Mismatch;
use super::identity::{IdentityError, SpeakerId, generation_now};
use super::key::KeyRing;
use super::machine::{Clock, MembershipCore, MembershipEvent};
use crate::carrier::{Carriers, LinkReport};

/// Capacity of the event broadcast channel; a receiver that lags further loses the oldest events
/// (the member set in [`Membership::members`] stays exact).
pub const EVENT_CHANNEL_CAPACITY: usize = 1024;

/// Where Linux publishes `net.core.rmem_max`: the largest receive buffer (`SO_RCVBUF`) a
/// process without `CAP_NET_ADMIN` can set (socket(7)). The speaker holds only `CAP_NET_RAW`
/// (DESIGN §1), so `SO_RCVBUFFORCE`, which may exceed it, is refused; this file is read once at
/// start (of the speaker's network namespace: the host's, `hostNetwork`).
pub const RMEM_MAX_PATH: &str = "/proc/sys/net/core/rmem_max";

/// The membership socket's receive buffer, as asked for and as granted
/// ([`Membership::receive_buffer`]; logged at start, `/metrics`
/// `ferrolb_speaker_membership_receive_buffer_bytes`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReceiveBuffer {
    /// `net.core.rmem_max` in bytes, read from [`RMEM_MAX_PATH`] at start; `None` when it could
    /// not be read (the request is then the configured size and the kernel still caps it).
    pub rmem_max: Option<usize>,
    /// Bytes asked for with `SO_RCVBUF` (never `SO_RCVBUFFORCE`): the smaller of
    /// [`MembershipConfig::socket_receive_buffer`] and `rmem_max`.
    ///
    /// [`MembershipConfig::socket_receive_buffer`]: super::MembershipConfig::socket_receive_buffer
    pub requested: usize,
    /// What `getsockopt(SO_RCVBUF)` reports: the bytes of kernel accounting (each datagram
    /// counts its data plus ~0.5–1 KiB of buffer overhead) the queue may hold before the kernel
    /// drops arrivals. Linux doubles the value set (socket(7)), so this is `2 × requested`.
    pub granted: usize,
}

/// The size to ask for: `wanted`, capped by `rmem_max` when known (what the kernel grants a
/// process without `CAP_NET_ADMIN` anyway, so the speaker never counts on more). Pure.
pub fn receive_buffer_request(wanted: usize, rmem_max: Option<usize>) -> usize {
    rmem_max.map_or(wanted, |max| wanted.min(max))
}

/// `net.core.rmem_max` parsed from the text of [`RMEM_MAX_PATH`] (one decimal number and a
/// newline); `None` for anything else. Pure.
pub fn parse_rmem_max(text: &str) -> Option<usize> {
    text.trim().parse().ok()
}

/// Most datagrams read in one turn of the task (one `recvmmsg(2)` call) before it yields to the
/// runtime and checks its timers again, so a flood cannot delay the probes by more than one
/// batch, and costs one system call per batch instead of one per datagram.
const MAX_DATAGRAMS_PER_TURN: usize = 64;

/// A timer that fires this much after its deadline says the process was paused: queued
/// datagrams are read before the timers run (see `Driver::run`). Far above the wake-up jitter of
/// an idle runtime (well under a millisecond), far below the fast profile's 40 ms probe RTT.
const LATE_TIMER: Duration = Duration::from_millis(10);

/// At most this many full batches are read before late timers run.
const LATE_DRAIN_BATCHES: usize = 4;

/// Everything needed to start membership.
#[derive(Debug, Clone)]
pub struct MembershipSettings {
    /// This speaker's Kubernetes Node name (the Pod's `spec.nodeName`).
    pub node_name: String,
    /// Address to bind the UDP socket to: the advertised address (what the speaker does: its
    /// `--advertise-address` or the Node's InternalIP, with the port), or `0.0.0.0:port` /
    /// `[::]:port` (IPv4 peers are then reached as IPv4-mapped addresses), where the kernel picks
    /// each datagram's source IP by route. Peers drop a datagram whose source is not its
    /// sender's advertised address (`wrong_source`, issue #27 item 3), so a wildcard bind works
    /// only where that route's source is the advertised IP.
    pub bind_addr: SocketAddr,
    /// Address peers reach us at (Node InternalIP and port). `None`: the bound address, which
    /// must then be a specific address (not `0.0.0.0` / `::`). Must be the bound address, or
    /// have the bound port when bound to a wildcard ([`StartError::AdvertiseNotBound`]).
    pub advertise_addr: Option<SocketAddr>,
    /// The keys (first seals, all open).
    pub keys: KeyRing,
    /// Timings and limits.
    pub config: MembershipConfig,
    /// Start generation; `None` = wall-clock microseconds now (the normal case: every start
    /// supersedes the previous one).
    pub generation: Option<u64>,
}

/// Why membership could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Inconsistent timings.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Bad node name.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The UDP socket could not be bound.
    #[error("cannot bind membership UDP socket {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        source: std::io::Error,
    },
    /// No usable advertise address.
    #[error(
        "membership advertise address {0} is unspecified; set it to the node's InternalIP and port"
    )]
    AdvertiseUnspecified(SocketAddr),
    /// The advertised address is not where the socket sends from, so every peer would drop
    /// this member's datagrams as `wrong_source` (issue #27 item 3).
    #[error(
        "membership advertise address {advertise} is not the bound address {bound}: peers drop \
         datagrams whose source is not the sender's advertised address; bind to it"
    )]
    AdvertiseNotBound {
        /// The advertised address.
        advertise: SocketAddr,
        /// The bound address.
        bound: SocketAddr,
    },
}

enum Command {
    Leave(oneshot::Sender<()>),
    SetKeys(KeyRing),
}

/// A running membership member: the handle the speaker's main loop holds.
///
/// Dropping it (or [`Membership::abort`]) stops the task **without** leaving — peers then detect
/// the silence as a failure, exactly as after a crash. Call [`Membership::leave`] on SIGTERM.
pub struct Membership {
    commands: mpsc::Sender<Command>,
    peers: watch::Sender<BTreeSet<SocketAddr>>,
    voters: watch::Sender<BTreeSet<String>>,
    members: watch::Receiver<BTreeSet<String>>,
    evidence: watch::Receiver<BTreeMap<String, std::time::Instant>>,
    agreeing: watch::Receiver<BTreeSet<String>>,
    refused: watch::Receiver<BTreeMap<String, Mismatch>>,
    carrier: watch::Sender<Option<LinkReport>>,
    carriers: watch::Receiver<Carriers>,
    handovers: watch::Sender<Handovers>,
    replies: watch::Receiver<HandoverReplies>,
    revisions: watch::Receiver<BTreeMap<String, u64>>,
    askers: watch::Receiver<HandoverAskers>,
    given: watch::Receiver<ReleasesGiven>,
    events: broadcast::Sender<MembershipEvent>,
    counters: Arc<Counters>,
    identity: SpeakerId,
    local_addr: SocketAddr,
    receive_buffer: ReceiveBuffer,
    task: Option<JoinHandle<()>>,
}

impl Membership {
    /// Binds the socket and starts the membership task on the current tokio runtime. The member
    /// is alone until [`Membership::set_peers`] gives it addresses to announce to.
    ///
    /// # Errors
    /// [`StartError`] for a bad name or config, a bind failure, or an unspecified advertise
    /// address.
    pub async fn start(settings: MembershipSettings) -> Result<Self, StartError> {
        settings.config.validate()?;
        let (socket, receive_buffer) =
            bind_socket(settings.bind_addr, settings.config.socket_receive_buffer).map_err(
                |source| StartError::Bind {
                    addr: settings.bind_addr,
                    source,
                },
            )?;
        let local_addr = socket.local_addr().map_err(|source| StartError::Bind {
            addr: settings.bind_addr,
            source,
        })?;
        let advertise = settings.advertise_addr.unwrap_or(local_addr);
        if advertise.ip().is_unspecified() {
            return Err(StartError::AdvertiseUnspecified(advertise));
        }
        let sends_as_advertised = if local_addr.ip().is_unspecified() {
            advertise.port() == local_addr.port()
        } else {
            SpeakerId::placeholder(advertise).is_sent_from(local_addr)
        };
        if !sends_as_advertised {
            return Err(StartError::AdvertiseNotBound {
                advertise,
                bound: local_addr,
            });
        }
        let identity = SpeakerId::with_generation(
            &settings.node_name,
            advertise,
            settings.generation.unwrap_or_else(generation_now),
        )?;
        // One byte more than the largest datagram a member sends: a longer one arrives truncated
        // to this length (or flagged MSG_TRUNC) and is dropped as malformed, never cut to a
        // valid length.
        let slot_len = settings
            .config
            .max_packet_size
            .saturating_add(super::envelope::OVERHEAD)
            .saturating_add(1);
        let counters = Arc::new(Counters::default());
        let core = MembershipCore::new(
            identity.clone(),
            settings.config,
            &settings.keys,
            Arc::clone(&counters),
        )?;
        let (commands, command_rx) = mpsc::channel(4);
        let (peers, peers_rx) = watch::channel(BTreeSet::new());
        let (voters, voters_rx) = watch::channel(BTreeSet::new());
        let (members_tx, members) = watch::channel(core.alive().clone());
        let (evidence_tx, evidence) = watch::channel(BTreeMap::new());
        let (agreeing_tx, agreeing) = watch::channel(BTreeSet::new());
        let (refused_tx, refused) = watch::channel(BTreeMap::new());
        let (carrier, carrier_rx) = watch::channel(None);
        let (carriers_tx, carriers) = watch::channel(Carriers::new());
        let (handovers, handovers_rx) = watch::channel(Handovers::default());
        let (replies_tx, replies) = watch::channel(HandoverReplies::new());
        let (revisions_tx, revisions) = watch::channel(BTreeMap::new());
        let (askers_tx, askers) = watch::channel(HandoverAskers::new());
        let (given_tx, given) = watch::channel(ReleasesGiven::new());
        let (events, _) = broadcast::channel(EVENT_CHANNEL_CAPACITY);
        let driver = Driver {
            batch: RecvBatch::new(slot_len),
            core,
            local_is_v6: local_addr.is_ipv6(),
            socket,
            command_rx,
            peers_rx,
            voters_rx,
            members_tx,
            evidence_tx,
            agreeing_tx,
            refused_tx,
            carrier_rx,
            carriers_tx,
            handovers_rx,
            replies_tx,
            revisions_tx,
            askers_tx,
            given_tx,
            events: events.clone(),
        };
        tracing::info!(identity = ?identity, %local_addr, "membership: started");
        let task = tokio::spawn(driver.run());
        Ok(Self {
            commands,
            peers,
            voters,
            members,
            evidence,
            agreeing,
            refused,
            carrier,
            carriers,
            handovers,
            replies,
            revisions,
            askers,
            given,
            events,
            counters,
            identity,
            local_addr,
            receive_buffer,
            task: Some(task),
        })
    }

    /// Sets the complete set of peer addresses now (level-triggered; e.g. every Node's
    /// InternalIP with the membership port, recomputed on each Node watch event). Our own
    /// address may be included; it is ignored.
    pub fn set_peers(&self, peers: impl IntoIterator<Item = SocketAddr>) {
        let peers: BTreeSet<SocketAddr> = peers.into_iter().collect();
        self.peers.send_if_modified(|current| {
            if *current == peers {
                false
            } else {
                *current = peers;
                true
            }
        });
    }

    /// Sets the voters of the majority rule, by node name (level-triggered: the speaker core's
    /// latest `SetVoters`; [`MembershipCore::set_voters`]).
    pub fn set_voters(&self, voters: &BTreeSet<String>) {
        self.voters.send_if_modified(|current| {
            if current == voters {
                false
            } else {
                current.clone_from(voters);
                true
            }
        });
    }

    /// Replaces the keys at run time, e.g. when the Secret-mounted key file changed (kubelet
    /// updates it in place); parse the new file with [`KeyRing::from_file`] first and keep the
    /// old keys on a parse error. See `docs/membership.md` for a rotation that never splits the
    /// cluster.
    pub async fn set_keys(&self, keys: KeyRing) {
        let _ = self.commands.send(Command::SetKeys(keys)).await;
    }

    /// The alive member set by node name, ourselves included (empty once we have left). Always
    /// the complete current set; use it level-triggered.
    pub fn members(&self) -> watch::Receiver<BTreeSet<String>> {
        self.members.clone()
    }

    /// The two-way evidence, per peer name: until when its latest lease grant counts
    /// ([`MembershipCore::evidence`]). Updated as grants arrive; nobody is woken by it (the
    /// responder reads it at each send to compute the quorum lease).
    pub fn evidence(&self) -> watch::Receiver<BTreeMap<String, std::time::Instant>> {
        self.evidence.clone()
    }

    /// Members whose latest grant listed exactly our members ([`MembershipCore::agreeing`]):
    /// read at each step for the F1 gate; nobody is woken by it.
    pub fn agreeing(&self) -> watch::Receiver<BTreeSet<String>> {
        self.agreeing.clone()
    }

    /// Peers refused for a configuration mismatch, by node name (issue #32 G5.4,
    /// [`MembershipCore::refused`]): the executor reports them (Event, metric).
    pub fn refused(&self) -> watch::Receiver<BTreeMap<String, Mismatch>> {
        self.refused.clone()
    }

    /// Sets this speaker's carrier report (issue #32 G5.5, [`MembershipCore::set_carrier_report`]):
    /// sent to every member when it changed.
    pub fn set_carrier_report(&self, report: LinkReport) {
        let report = Some(report);
        self.carrier.send_if_modified(|current| {
            if *current == report {
                false
            } else {
                *current = report;
                true
            }
        });
    }

    /// The members' carrier reports by node name ([`MembershipCore::carrier_reports`]).
    pub fn carriers(&self) -> watch::Receiver<Carriers> {
        self.carriers.clone()
    }

    /// Sets the handover state (issue #32 G5.8, [`MembershipCore::set_handovers`]): the gains
    /// held back per previous holder, and the IPs answered for now — call it after the
    /// responder has applied the owned set — with the plan and the revision of the API view it
    /// was made from ([`MembershipCore::set_plan`]). Level-triggered.
    pub fn set_handovers(
        &self,
        asks: &BTreeMap<String, BTreeSet<IpAddr>>,
        holding: &BTreeSet<IpAddr>,
        plan: Option<Arc<ferrolb_l2::plan::Plan>>,
        revision: u64,
    ) {
        self.handovers.send_if_modified(|current| {
            let same_plan = match (&current.plan, &plan) {
                (Some(a), Some(b)) => Arc::ptr_eq(a, b),
                (None, None) => true,
                _ => false,
            };
            if current.asks == *asks
                && current.holding == *holding
                && same_plan
                && current.revision == revision
            {
                false
            } else {
                current.asks.clone_from(asks);
                current.holding.clone_from(holding);
                current.plan = plan;
                current.revision = revision;
                true
            }
        });
    }

    /// The holders' replies to our handover asks ([`MembershipCore::handover_replies`]); the
    /// executor wakes on a change.
    pub fn handover_replies(&self) -> watch::Receiver<HandoverReplies> {
        self.replies.clone()
    }

    /// Per member, the revision of its API view its latest grant carried
    /// ([`MembershipCore::peer_revisions`]).
    pub fn peer_revisions(&self) -> watch::Receiver<BTreeMap<String, u64>> {
        self.revisions.clone()
    }

    /// Per IP held back for a third node, the newer-view member that asked for it
    /// ([`MembershipCore::handover_askers`]).
    pub fn handover_askers(&self) -> watch::Receiver<HandoverAskers> {
        self.askers.clone()
    }

    /// Per IP of our plan, the requester our latest grant released it to and when
    /// ([`MembershipCore::releases_given`]).
    pub fn releases_given(&self) -> watch::Receiver<ReleasesGiven> {
        self.given.clone()
    }

    /// Subscribes to transition events from now on.
    pub fn events(&self) -> broadcast::Receiver<MembershipEvent> {
        self.events.subscribe()
    }

    /// The current counter values.
    pub fn counters(&self) -> CountersSnapshot {
        self.counters.snapshot()
    }

    /// The live counters, for a metrics collector that reads them on scrape.
    pub fn counters_handle(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }

    /// The identity we started with (name, advertised address, generation).
    pub fn identity(&self) -> &SpeakerId {
        &self.identity
    }

    /// Whether the membership task is still running (it ends only after a leave or an abort;
    /// anything else is a crash the speaker's supervisor acts on).
    pub fn is_running(&self) -> bool {
        self.task.as_ref().is_some_and(|t| !t.is_finished())
    }

    /// The membership socket's receive buffer as asked for and granted at start.
    pub fn receive_buffer(&self) -> ReceiveBuffer {
        self.receive_buffer
    }

    /// The address the UDP socket is bound to.
    pub fn local_addr(&self) -> SocketAddr {
        self.local_addr
    }

    /// Leaves the cluster explicitly and waits until the leave datagrams were handed to the
    /// socket and the task ended (bounded by `timeout`; the task is aborted after it).
    pub async fn leave(mut self, timeout: Duration) {
        let (done, done_rx) = oneshot::channel();
        if self.commands.send(Command::Leave(done)).await.is_ok() {
            let _ = tokio::time::timeout(timeout, done_rx).await;
        }
        if let Some(task) = self.task.take() {
            let handle = task.abort_handle();
            if tokio::time::timeout(timeout, task).await.is_err() {
                handle.abort();
            }
        }
    }

    /// Stops the task without leaving (crash-like) and waits until its socket is closed.
    pub async fn abort(mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
            let _ = task.await;
        }
    }
}

impl Drop for Membership {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Binds the membership UDP socket: non-blocking, dual-stack when bound to an IPv6 address,
/// with a receive buffer of `wanted` bytes capped by `net.core.rmem_max` ([`ReceiveBuffer`]; a
/// refused size is logged, not fatal).
fn bind_socket(addr: SocketAddr, wanted: usize) -> std::io::Result<(UdpSocket, ReceiveBuffer)> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::DGRAM, Some(Protocol::UDP))?;
    if addr.is_ipv6() {
        // IPv4 peers are then reached as IPv4-mapped addresses (the documented `[::]` setup),
        // whatever the system's `net.ipv6.bindv6only`.
        socket.set_only_v6(false)?;
    }
    let rmem_max = match std::fs::read_to_string(RMEM_MAX_PATH) {
        Ok(text) => parse_rmem_max(&text),
        Err(error) => {
            tracing::warn!(%error, path = RMEM_MAX_PATH, "membership: cannot read net.core.rmem_max");
            None
        }
    };
    let requested = receive_buffer_request(wanted, rmem_max);
    // Plain SO_RCVBUF, never SO_RCVBUFFORCE: the speaker has no CAP_NET_ADMIN, and a test or a
    // privileged run must not be granted a buffer the DaemonSet would not get.
    if let Err(error) = socket.set_recv_buffer_size(requested) {
        tracing::warn!(%error, requested, "membership: cannot set the UDP receive buffer size");
    }
    let granted = socket.recv_buffer_size().unwrap_or(0);
    let buffer = ReceiveBuffer {
        rmem_max,
        requested,
        granted,
    };
    tracing::info!(
        rmem_max = ?rmem_max,
        wanted,
        requested,
        granted,
        "membership: UDP receive buffer (SO_RCVBUF, capped by net.core.rmem_max; \
         granted is the kernel's accounting, twice the size set)"
    );
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    Ok((UdpSocket::from_std(socket.into())?, buffer))
}

/// Buffers for one `recvmmsg(2)` call: [`MAX_DATAGRAMS_PER_TURN`] slots of `slot_len` bytes.
struct RecvBatch {
    slots: Vec<Vec<u8>>,
    /// (length, source) of each datagram of the last call, in order; the bytes are in `slots`.
    received: Vec<(usize, Option<SocketAddr>)>,
}

impl RecvBatch {
    fn new(slot_len: usize) -> Self {
        Self {
            slots: vec![vec![0u8; slot_len]; MAX_DATAGRAMS_PER_TURN],
            received: Vec::with_capacity(MAX_DATAGRAMS_PER_TURN),
        }
    }

    /// Reads up to [`MAX_DATAGRAMS_PER_TURN`] queued datagrams without blocking (one system
    /// call); `WouldBlock` when none is queued.
    fn recv(&mut self, socket: &UdpSocket) -> std::io::Result<usize> {
        use nix::sys::socket::{MsgFlags, MultiHeaders, SockaddrStorage, recvmmsg};
        use std::os::fd::AsRawFd;
        self.received.clear();
        let slot_len = self.slots.first().map_or(0, Vec::len);
        let mut iovs: Vec<[std::io::IoSliceMut<'_>; 1]> = self
            .slots
            .iter_mut()
            .map(|slot| [std::io::IoSliceMut::new(slot)])
            .collect();
        // Not kept across calls: nix's headers hold raw pointers and are not `Send`, and this
        // task must be. One small allocation per batch, instead of a system call per datagram.
        let mut headers =
            MultiHeaders::<SockaddrStorage>::preallocate(MAX_DATAGRAMS_PER_TURN, None);
        let results = recvmmsg(
            socket.as_raw_fd(),
            &mut headers,
            iovs.iter_mut(),
            MsgFlags::MSG_DONTWAIT,
            None,
        )
        .map_err(std::io::Error::from)?;
        for message in results {
            let len = if message.flags.contains(MsgFlags::MSG_TRUNC) {
                slot_len
            } else {
                message.bytes.min(slot_len)
            };
            let from = message.address.as_ref().and_then(|a| {
                a.as_sockaddr_in()
                    .map(|v4| SocketAddr::from(*v4))
                    .or_else(|| a.as_sockaddr_in6().map(|v6| SocketAddr::from(*v6)))
            });
            self.received.push((len, from));
        }
        Ok(self.received.len())
    }
}

struct Driver {
    core: MembershipCore,
    batch: RecvBatch,
    /// Whether the socket is IPv6 (then IPv4 destinations are sent as IPv4-mapped addresses).
    local_is_v6: bool,
    socket: UdpSocket,
    command_rx: mpsc::Receiver<Command>,
    peers_rx: watch::Receiver<BTreeSet<SocketAddr>>,
    voters_rx: watch::Receiver<BTreeSet<String>>,
    members_tx: watch::Sender<BTreeSet<String>>,
    evidence_tx: watch::Sender<BTreeMap<String, std::time::Instant>>,
    agreeing_tx: watch::Sender<BTreeSet<String>>,
    refused_tx: watch::Sender<BTreeMap<String, Mismatch>>,
    carrier_rx: watch::Receiver<Option<LinkReport>>,
    carriers_tx: watch::Sender<Carriers>,
    handovers_rx: watch::Receiver<Handovers>,
    replies_tx: watch::Sender<HandoverReplies>,
    revisions_tx: watch::Sender<BTreeMap<String, u64>>,
    askers_tx: watch::Sender<HandoverAskers>,
    given_tx: watch::Sender<ReleasesGiven>,
    events: broadcast::Sender<MembershipEvent>,
}

/// What [`Membership::set_handovers`] hands the membership task.
#[derive(Debug, Clone, Default)]
struct Handovers {
    asks: BTreeMap<String, BTreeSet<IpAddr>>,
    holding: BTreeSet<IpAddr>,
    plan: Option<Arc<ferrolb_l2::plan::Plan>>,
    revision: u64,
}

/// Per (previous holder, IP), the holder's latest reply to our asks
/// ([`MembershipCore::handover_replies`]).
pub type HandoverReplies = BTreeMap<(String, IpAddr), ferrolb_l2::membership::lease::HandoverReply>;

/// Per IP held back for a third node, the newer-view member that asked for it
/// ([`MembershipCore::handover_askers`]).
pub type HandoverAskers = BTreeMap<IpAddr, ferrolb_l2::membership::lease::HandoverAsker>;

/// Per IP of our plan, the requester our latest grant released it to and the instant of that
/// grant ([`MembershipCore::releases_given`]).
pub use ferrolb_l2::membership::lease::ReleasesGiven;

fn clock() -> Clock {
    Clock {
        mono: std::time::Instant::now(),
        wall_ms: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
            .unwrap_or(0),
    }
}

impl Driver {
    async fn run(mut self) {
        let far = Duration::from_secs(3600);
        loop {
            let deadline = self
                .core
                .next_deadline()
                .map(tokio::time::Instant::from_std)
                .unwrap_or_else(|| tokio::time::Instant::now() + far);
            tokio::select! {
                biased;
                command = self.command_rx.recv() => match command {
                    Some(Command::Leave(done)) => {
                        self.core.leave(clock());
                        self.flush().await;
                        let _ = done.send(());
                        tracing::info!("membership: left the cluster");
                        return;
                    }
                    Some(Command::SetKeys(keys)) => {
                        self.core.set_keys(&keys);
                        tracing::info!(keys = keys.keys().len(), "membership: keys replaced");
                    }
                    // Handle dropped without leave: stop like a crash.
                    None => return,
                },
                // Timers before the socket: a flood of datagrams must not starve the probes.
                () = tokio::time::sleep_until(deadline) => {
                    // A timer that fires late means this process was not running (CPU
                    // starvation, a pause): the answers to its probes and the others'
                    // refutations may be waiting in its own socket. Read them first, so a
                    // paused speaker does not declare healthy peers down on timers that ran out
                    // while it was not looking (SWIM's Lifeguard extension makes the same point
                    // with its local health score). Bounded: a flood cannot starve the timers.
                    if tokio::time::Instant::now().saturating_duration_since(deadline) > LATE_TIMER {
                        for _ in 0..LATE_DRAIN_BATCHES {
                            if self.receive_batch() < MAX_DATAGRAMS_PER_TURN {
                                break;
                            }
                        }
                    }
                    self.core.handle_timers(clock());
                }
                changed = self.carrier_rx.changed() => {
                    let report = self.carrier_rx.borrow_and_update().clone();
                    if let (Ok(()), Some(report)) = (changed, report) {
                        self.core.set_carrier_report(report, clock());
                    }
                }
                changed = self.peers_rx.changed() => {
                    if changed.is_ok() {
                        let peers = self.peers_rx.borrow_and_update().clone();
                        self.core.set_peers(peers, clock());
                    }
                }
                changed = self.handovers_rx.changed() => {
                    if changed.is_ok() {
                        let h = self.handovers_rx.borrow_and_update().clone();
                        self.core.set_handovers(h.asks, h.holding);
                        self.core.set_plan(h.plan, h.revision);
                    }
                }
                changed = self.voters_rx.changed() => {
                    if changed.is_ok() {
                        let voters = self.voters_rx.borrow_and_update().clone();
                        self.core.set_voters(voters);
                    }
                }
                ready = self.socket.readable() => {
                    if let Err(error) = ready {
                        tracing::debug!(%error, "membership: socket readiness error");
                    } else if self.receive_batch() == MAX_DATAGRAMS_PER_TURN {
                        // More may be queued (a flood): send what we owe, then give the timers
                        // (first in this biased select) and the runtime their turn.
                        self.flush().await;
                        tokio::task::yield_now().await;
                    }
                }
            }
            self.flush().await;
        }
    }

    /// Reads one batch of queued datagrams and feeds them to the core; returns how many.
    fn receive_batch(&mut self) -> usize {
        // A handover change published before the responder changed is applied before any
        // request is answered (G5.8: a grant never releases an IP the responder answers for).
        if self.handovers_rx.has_changed().unwrap_or(false) {
            let h = self.handovers_rx.borrow_and_update().clone();
            self.core.set_handovers(h.asks, h.holding);
            self.core.set_plan(h.plan, h.revision);
        }
        let Self {
            socket,
            batch,
            core,
            ..
        } = self;
        let received = socket.try_io(tokio::io::Interest::READABLE, || batch.recv(socket));
        match received {
            Ok(n) => {
                let now = clock();
                for (slot, (len, from)) in batch.slots.iter().zip(&batch.received) {
                    let data = slot.get(..*len).unwrap_or_default();
                    let Some(from) = *from else {
                        continue;
                    };
                    if let Err(reason) = core.handle_datagram(data, from, now) {
                        tracing::trace!(%from, %reason, len, "membership: datagram dropped");
                    }
                }
                n
            }
            Err(error) if error.kind() == std::io::ErrorKind::WouldBlock => 0,
            Err(error) => {
                // E.g. ICMP errors surfacing on some platforms; never fatal.
                tracing::debug!(%error, "membership: recv error");
                0
            }
        }
    }

    /// Sends what the core produced and publishes the member set and events.
    async fn flush(&mut self) {
        let local_is_v6 = self.local_is_v6;
        for out in self.core.take_outgoing() {
            let to = match out.to {
                SocketAddr::V4(v4) if local_is_v6 => {
                    SocketAddr::V6(SocketAddrV6::new(v4.ip().to_ipv6_mapped(), v4.port(), 0, 0))
                }
                other => other,
            };
            if let Err(error) = self.socket.send_to(&out.datagram, to).await {
                self.core.counters().record_send_error();
                tracing::debug!(%error, %to, "membership: send failed");
            }
        }
        // Events first: whoever wakes up on the new member set finds its events already queued.
        for event in self.core.take_events() {
            // No receiver is fine: the member set is the source of truth.
            let _ = self.events.send(event);
        }
        publish(&self.evidence_tx, self.core.evidence());
        publish(&self.agreeing_tx, &self.core.agreeing());
        publish(&self.refused_tx, &self.core.refused());
        publish(&self.carriers_tx, &self.core.carrier_reports());
        publish(&self.replies_tx, self.core.handover_replies());
        publish(&self.revisions_tx, self.core.peer_revisions());
        publish(&self.askers_tx, self.core.handover_askers());
        publish(&self.given_tx, self.core.releases_given());
        publish(&self.members_tx, self.core.alive());
    }
}

/// Sends `value` on `tx` only if it differs from what the channel holds (receivers that wait for
/// a change are woken only by a real one).
fn publish<T: PartialEq + Clone>(tx: &watch::Sender<T>, value: &T) {
    tx.send_if_modified(|current| {
        if current == value {
            false
        } else {
            current.clone_from(value);
            true
        }
    });
}

#[cfg(test)]
mod tests {
    use super::{parse_rmem_max, receive_buffer_request};

    #[test]
    fn the_request_never_exceeds_rmem_max() {
        assert_eq!(receive_buffer_request(16 << 20, Some(212_992)), 212_992);
        assert_eq!(receive_buffer_request(65_536, Some(212_992)), 65_536);
        assert_eq!(receive_buffer_request(16 << 20, None), 16 << 20);
    }

    #[test]
    fn rmem_max_parses_the_proc_file_only() {
        assert_eq!(parse_rmem_max("212992\n"), Some(212_992));
        assert_eq!(parse_rmem_max(""), None);
        assert_eq!(parse_rmem_max("-1\n"), None);
        assert_eq!(parse_rmem_max("4194304 1\n"), None);
    }
}
