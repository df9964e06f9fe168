//! The simulation loop: virtual time, an event queue, the nodes (real cores, real membership),
//! the membership network and the L2 segment, on which every node's real per-interface responder
//! ([`IfaceCore`]) sends and receives real frames (see the crate docs for what is modelled).

use std::cmp::Reverse;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use ferrolb_crds::L2AdvertisementSpec;
use ferrolb_crds::v1beta1::{LabelSelector, LabelSelectorRequirement, SelectorOperator};
use ferrolb_l2::answer::announce::AnnounceSchedule;
use ferrolb_l2::answer::iface::{
    Context, IfaceConfig, IfaceCore, IfaceOutput, OwnedIp, Proto, TransmitKind, lease_allows,
};
use ferrolb_l2::answer::probe::ProbeSettings;
use ferrolb_l2::carrier::{Link, LinkReport};
use ferrolb_l2::claim::{ClaimSettings, quorum_until};
use ferrolb_l2::eligibility::{
    EXCLUDE_LB_LABEL, EndpointFacts, Interfaces, NodeFacts, PoolRef, ServiceFacts, TrafficPolicy,
};
use ferrolb_l2::membership::{
    Clock, Counters, KeyRing, MembershipConfig, MembershipCore, MembershipEvent, SpeakerId,
    envelope,
};
use ferrolb_l2::node::{
    MembershipCommand, MembershipObservation, NodeConfig, Observation, Output, SpeakerCore, Wake,
};
use ferrolb_l2::view::View;
use ferrolb_l2::wire::MacAddr;
use ferrolb_l2::wire::arp::{GratuitousForm, build_gratuitous_arp};
use ferrolb_l2::wire::claim_proof::ClaimKeys;
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};

use crate::observer::{Observer, Report};
use crate::scenario::{Fault, Scenario};

/// Wall clock at the start (ms since the Unix epoch): 2027-01-15.
const WALL0_MS: u64 = 1_800_000_000_000;
/// One-way latency of a frame on the L2 segment.
const L2_LATENCY: Duration = Duration::from_micros(50);

/// The MAC of node `i`'s NIC number `nic` (NIC `k` of every node is on segment `k`).
pub fn mac(i: usize, nic: usize) -> MacAddr {
    let [.., hi, lo] = u32::try_from(i).unwrap_or(u32::MAX).to_be_bytes();
    let nic = u8::try_from(nic).unwrap_or(u8::MAX);
    MacAddr(0x02, 0x00, 0x5e, 0x10_u8.saturating_add(nic), hi, lo)
}

/// The name of node `i`.
pub fn name(i: usize) -> String {
    format!("node-{i}")
}

/// The membership address of node `i` (`10.0.0.{i+1}:7947`; nothing is sent anywhere).
pub fn addr(i: usize) -> SocketAddr {
    let i = u32::try_from(i).unwrap_or(u32::MAX);
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x0a00_0000 + 1 + i)), 7947)
}

/// The `k`-th external IP (`198.51.100.1` …, wrapping into `198.51.101.0` and on).
pub fn ip(k: usize) -> IpAddr {
    let k = u32::try_from(k).unwrap_or(0);
    IpAddr::V4(Ipv4Addr::from(0xc633_6400 + 1 + k))
}

/// Node `i`'s facts at the start: Ready, labelled with its hostname (the L2Advertisement edits
/// of [`Fault::AdvertiseOn`] select by it).
fn node_facts(i: usize) -> NodeFacts {
    NodeFacts {
        labels: [(HOSTNAME_LABEL.to_string(), name(i))].into(),
        ..NodeFacts::default()
    }
}

/// The well-known hostname label of a Node.
/// The digest of an empty member list ([`MembershipCore::alive_digest`] of nobody).
fn empty_list() -> u64 {
    ferrolb_l2::membership::lease::member_list_digest(std::iter::empty())
}

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// The view every node has: the nodes Ready, one L2Advertisement for all, one Service per IP.
pub fn view(nodes: usize, ips: usize) -> View {
    let mut v = View {
        revision: 1,
        ..View::default()
    };
    for i in 0..nodes {
        v.cluster.nodes.insert(name(i), node_facts(i));
        // Every node runs a speaker Pod, as the DaemonSet places them (issue #32 G3).
        v.cluster.speaker_nodes.insert(name(i));
    }
    v.cluster
        .advertisements
        .insert("all".into(), L2AdvertisementSpec::default());
    for k in 0..ips {
        v.ips.insert(
            ip(k),
            vec![ServiceFacts {
                name: format!("default/svc-{k}"),
                pool: PoolRef {
                    name: "pool".into(),
                    ..Default::default()
                },
                ..Default::default()
            }],
        );
    }
    v
}

fn key_ring() -> KeyRing {
    key_ring_of(&[0])
}

/// The key ring of key numbers `ids` (first seals, all open), as a key file lists them; key 0
/// is the cluster's key at the start.
pub fn key_ring_of(ids: &[u8]) -> KeyRing {
    let text: String = ids
        .iter()
        .map(|id| {
            let hex: String = (0..32u8)
                .map(|i| {
                    let b = i.wrapping_mul(37).wrapping_add(11) ^ id.wrapping_mul(101);
                    format!("{b:02x}")
                })
                .collect();
            hex + "\n"
        })
        .collect();
    #[allow(clippy::expect_used)]
    KeyRing::parse(text.as_bytes()).expect("valid 32-byte keys")
}

/// The process state of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Proc {
    Down,
    Running,
    Stopped,
}

/// One NIC of a node: its real [`IfaceCore`], its link, and the frames that reached it while
/// the process was stopped (read at resume).
struct Nic {
    iface: IfaceCore,
    carrier: bool,
    inbox: Vec<Vec<u8>>,
}

/// The responder of one node: one [`IfaceCore`] per NIC (the default interface set: one
/// interface per segment, every owned IP on each), and what the responder task
/// (`ferrolb_speaker::l2::responder`) keeps around them.
struct Responder {
    nics: Vec<Nic>,
    lease: Option<Duration>,
    /// The voters of the quorum lease (`Output::SetVoters`).
    voters: BTreeSet<String>,
    /// The owned set with each IP's interfaces and announcement epoch, as
    /// `Responder::set_owned` keeps it.
    desired: BTreeMap<IpAddr, (Interfaces, u64)>,
    next_epoch: u64,
    fresh: BTreeSet<IpAddr>,
    /// The interface tasks' timers wait for their wake-up after a change of the owned set.
    hold_until: Duration,
    /// The observer's last [`quorum_until`] of this node (it asks at every step): keyed on the
    /// membership (its join's seed) and its evidence version, and emptied when the voters
    /// change. Valid later too: with the same evidence and voters the lease ends at the same
    /// instant, or at once if that has passed ([`World::lease_of`]).
    quorum_cache: std::cell::Cell<Option<QuorumCache>>,
}

/// What [`Responder::quorum_cache`] keeps: the membership's join seed and evidence version
/// (`None` without a membership), and the lease's end computed from them.
type QuorumCache = (Option<(u64, u64)>, Option<Instant>);

impl Responder {
    /// A process's fresh responder on node `i`, its NICs' links as `links` says.
    fn new(i: usize, links: &[bool]) -> Self {
        let nics = links
            .iter()
            .enumerate()
            .map(|(k, up)| Nic {
                iface: IfaceCore::new(IfaceConfig {
                    mac: mac(i, k),
                    link_local: std::net::Ipv6Addr::UNSPECIFIED,
                    schedule: AnnounceSchedule::default(),
                    probe: ProbeSettings::default(),
                }),
                carrier: *up,
                inbox: Vec::new(),
            })
            .collect();
        Responder {
            nics,
            lease: None,
            voters: BTreeSet::new(),
            desired: BTreeMap::new(),
            next_epoch: 0,
            fresh: BTreeSet::new(),
            hold_until: Duration::ZERO,
            quorum_cache: std::cell::Cell::new(None),
        }
    }

    /// The links of the NICs.
    fn links(&self) -> Vec<bool> {
        self.nics.iter().map(|n| n.carrier).collect()
    }

    /// What `Responder::carrier(&Interfaces::All)` reports to the daemon: some interface of the
    /// default set has carrier.
    fn carrier(&self) -> bool {
        self.nics.iter().any(|n| n.carrier)
    }

    /// What the speaker's interface scan reports (issue #32 G5.5): NIC `k` is `nic{k}`, in the
    /// default set, IPv4 only; NIC 0 holds an address of the clients' network (the IPs'
    /// `198.51.0.0/16`), NIC `k ≥ 1` one of `10.k.0.0/24`.
    fn link_report(&self) -> LinkReport {
        LinkReport {
            links: self
                .nics
                .iter()
                .enumerate()
                .map(|(k, nic)| Link {
                    name: format!("nic{k}"),
                    carrier: nic.carrier,
                    default_v4: true,
                    default_v6: false,
                    named_v4: true,
                    named_v6: false,
                    prefixes: vec![if k == 0 {
                        (IpAddr::V4(Ipv4Addr::new(198, 51, 0, 0)), 16)
                    } else {
                        let k = u8::try_from(k).unwrap_or(u8::MAX);
                        (IpAddr::V4(Ipv4Addr::new(10, k, 0, 0)), 24)
                    }],
                })
                .collect(),
            withdrawn: false,
        }
    }

    /// Whether the node reaches the clients: its NIC on segment 0 has carrier.
    fn reaches_clients(&self) -> bool {
        self.nics.first().is_some_and(|n| n.carrier)
    }
}

struct Node {
    /// [`name`] of this node, made once (the observer needs it at every step).
    name: String,
    /// The API view this node's watches have delivered, and its version.
    view: (u64, Arc<View>),
    watch_delay: Duration,
    outage_until: Option<Duration>,
    proc_: Proc,
    core: Option<SpeakerCore>,
    membership: Option<MembershipCore>,
    inbox: Vec<(SocketAddr, Vec<u8>)>,
    /// [`MembershipCore::alive_digest`] when the members last woke the core.
    last_alive: u64,
    /// The membership's handover replies when they last woke the core (issue #32 G5.8).
    last_replies: BTreeMap<(String, IpAddr), ferrolb_l2::membership::lease::HandoverReply>,
    responder: Responder,
    /// The plan of the last step that made one (the gate was open).
    plan: Option<Arc<ferrolb_l2::plan::Plan>>,
    seed: u64,
    /// How far this node's wall clock is off the true time (clock steps), in ms.
    clock_offset_ms: i64,
    /// The key ring the node's Secret holds now (key numbers, [`key_ring_of`]): read at the
    /// next process start, as today's speaker does.
    mounted_keys: Vec<u8>,
    /// The timing profile the node's speaker is configured with now (read at its next start),
    /// and the one its running process uses ([`Fault::SetProfile`]).
    mounted_profile: crate::scenario::Profile,
    profile: crate::scenario::Profile,
    /// The key ring the running process uses, and the claim keys derived from it.
    keys: KeyRing,
    claim_keys: ClaimKeys,
    /// The MACs of this node's NICs ([`Context::own`]).
    own_macs: BTreeSet<MacAddr>,
    /// A SIGTERM was sent and its handler has not run yet ([`Event::Terminate`]).
    sigterm_pending: bool,
    /// A [`Fault::Restart`] came while the SIGTERM was pending: the process starts again
    /// when it has exited (kubelet restarts a container after it exits, never before).
    restart_on_exit: bool,
}

enum Event {
    Datagram {
        from: usize,
        to: usize,
        bytes: Vec<u8>,
    },
    Fault(Fault),
    /// SIGTERM, once the signal handler ran.
    Terminate(usize),
    Resume(usize),
    /// A watch delivers API version `.1` to node `.0`.
    View(usize, u64, Arc<View>),
    /// Node `.0`'s API outage ends: it relists.
    Relist(usize),
    Wake(usize, Wake),
    /// Nothing happens, but the observer looks at this instant (a yield ends).
    Recheck,
    /// An Ethernet frame reaches node `to`'s interface.
    Frame {
        to: usize,
        nic: usize,
        frame: Vec<u8>,
    },
    /// One millisecond of a spoofed membership flood.
    Flood {
        per_ms: u32,
        until: Duration,
    },
    /// One forged (or replayed, `proven`) ARP claim, and the next one.
    Forged {
        ip: IpAddr,
        every: Duration,
        until: Duration,
        proven: bool,
    },
}

struct World {
    /// `SIM_TRACE` set: owned sets, notes, membership commands and yields go to stderr.
    trace: bool,
    t0: Instant,
    now: Duration,
    rng: StdRng,
    scenario: Scenario,
    membership: MembershipConfig,
    claim: ClaimSettings,
    /// The API server's objects, and their version.
    view: Arc<View>,
    version: u64,
    /// Every IP the observer follows: the Services' IPs at the start and every IP a Service
    /// moved to ([`Fault::ChangeIp`]).
    ips: Vec<IpAddr>,
    /// The IP of Service `k` now.
    service_ips: Vec<IpAddr>,
    /// Every node's MAC and name (the responder's peer map).
    peer_macs: BTreeMap<MacAddr, String>,
    nodes: Vec<Node>,
    queue: BinaryHeap<Reverse<(Duration, u64)>>,
    events: BTreeMap<u64, Event>,
    seq: u64,
    cut: BTreeSet<(usize, usize)>,
    observer: Observer,
    /// [`World::oracle`]'s last result and what it was computed from.
    #[allow(clippy::type_complexity)]
    oracle_cache: Option<((u64, Vec<bool>), BTreeMap<IpAddr, Option<usize>>)>,
    announcements: Vec<(Duration, usize, IpAddr)>,
    /// Per IP and sending node, the latest gratuitous ARP (with its claim proof) sent on the
    /// clients' segment and when: what an outsider there can capture and replay
    /// ([`Fault::ReplayedClaims`]).
    captured: BTreeMap<(IpAddr, usize), (Duration, Vec<u8>)>,
    /// Announcements sent while the node did not answer the IP (I-announce).
    stray_announcements: Vec<(Duration, usize, IpAddr)>,
    drops: BTreeMap<String, u64>,
    datagrams: u64,
    steps: u64,
    /// When each shared CPU of [`Scenario::cpus`] is next free (empty without the model).
    cpu_free: Vec<Duration>,
}

/// Runs a scenario to its end and reports what the observer saw.
pub fn run(scenario: &Scenario) -> Report {
    let mut w = World::new(scenario);
    let end = Duration::from_millis(scenario.end_ms);
    loop {
        let next = w.next_time().unwrap_or(end).min(end);
        w.account(next);
        w.now = next;
        if next >= end {
            break;
        }
        w.process_due();
    }
    w.report(end)
}

impl World {
    fn new(s: &Scenario) -> Self {
        let (probe_period, probe_rtt, suspect_timeout) = s.profile.timing().timings();
        let membership = MembershipConfig {
            probe_period,
            probe_rtt,
            suspect_timeout,
            ..MembershipConfig::default()
        };
        let claim = ClaimSettings::for_membership(probe_period, suspect_timeout);
        let mut w = World {
            trace: std::env::var_os("SIM_TRACE").is_some(),
            t0: Instant::now(),
            now: Duration::ZERO,
            rng: StdRng::seed_from_u64(s.seed),
            scenario: s.clone(),
            membership,
            claim,
            peer_macs: (0..s.nodes)
                .flat_map(|i| (0..s.nics.max(1)).map(move |k| (mac(i, k), name(i))))
                .collect(),
            view: Arc::new(view(s.nodes, s.ips)),
            version: 1,
            ips: (0..s.ips).map(ip).collect(),
            service_ips: (0..s.ips).map(ip).collect(),
            nodes: Vec::new(),
            queue: BinaryHeap::new(),
            events: BTreeMap::new(),
            seq: 0,
            cut: BTreeSet::new(),
            observer: Observer::default(),
            oracle_cache: None,
            announcements: Vec::new(),
            captured: BTreeMap::new(),
            stray_announcements: Vec::new(),
            drops: BTreeMap::new(),
            datagrams: 0,
            steps: 0,
            cpu_free: Vec::new(),
        };
        for i in 0..s.nodes {
            let seed = w.rng.random::<u64>();
            let first = (w.version, w.view.clone());
            w.nodes.push(Node {
                name: name(i),
                view: first,
                watch_delay: Duration::ZERO,
                outage_until: None,
                proc_: Proc::Down,
                core: None,
                membership: None,
                inbox: Vec::new(),
                last_alive: empty_list(),
                last_replies: BTreeMap::new(),
                responder: Responder::new(i, &vec![true; s.nics.max(1)]),
                plan: None,
                seed,
                clock_offset_ms: 0,
                mounted_keys: vec![0],
                mounted_profile: s.profile,
                profile: s.profile,
                keys: key_ring(),
                claim_keys: ClaimKeys::from_ring(&key_ring()),
                own_macs: (0..s.nics.max(1)).map(|k| mac(i, k)).collect(),
                sigterm_pending: false,
                restart_on_exit: false,
            });
            w.start(i);
        }
        for t in s.faults.clone() {
            w.push(Duration::from_millis(t.at_ms), Event::Fault(t.fault));
        }
        w
    }

    /// One hop between the speaker's tasks, from now to the instant the woken task acts: the
    /// hop itself ([`Scenario::task_delay_us`]) and, with [`Scenario::cpus`], the wait for the
    /// first CPU to come free and the task's run on it (the CPU is booked now, so wake-ups are
    /// served in the order they were made).
    fn task_delay(&mut self) -> Duration {
        let (lo, hi) = self.scenario.task_delay_us;
        let hop = if hi == 0 {
            Duration::ZERO
        } else {
            Duration::from_micros(self.rng.random_range(lo..=hi.max(lo)))
        };
        let Some(cpus) = self.scenario.cpus else {
            return hop;
        };
        if self.cpu_free.is_empty() {
            self.cpu_free = vec![Duration::ZERO; cpus.count.max(1)];
        }
        let (run_lo, run_hi) = cpus.run_us;
        let run = Duration::from_micros(self.rng.random_range(run_lo..=run_hi.max(run_lo)));
        let ready = self.now + hop;
        let (k, free) = self
            .cpu_free
            .iter()
            .copied()
            .enumerate()
            .min_by_key(|(_, free)| *free)
            .unwrap_or((0, Duration::ZERO));
        let done = ready.max(free) + run;
        if let Some(slot) = self.cpu_free.get_mut(k) {
            *slot = done;
        }
        done - self.now
    }

    fn mono(&self) -> Instant {
        self.t0 + self.now
    }

    fn clock(&self) -> Clock {
        Clock {
            mono: self.mono(),
            wall_ms: WALL0_MS + u64::try_from(self.now.as_millis()).unwrap_or(0),
        }
    }

    /// Node `i`'s clocks: the shared monotonic clock and its own wall clock, off by its clock
    /// steps ([`Fault::ClockStep`]).
    fn clock_of(&self, i: usize) -> Clock {
        let c = self.clock();
        let offset = self.nodes.get(i).map_or(0, |n| n.clock_offset_ms);
        Clock {
            mono: c.mono,
            wall_ms: c.wall_ms.saturating_add_signed(offset),
        }
    }

    fn push(&mut self, at: Duration, event: Event) {
        self.seq += 1;
        self.queue.push(Reverse((at, self.seq)));
        self.events.insert(self.seq, event);
    }

    /// The next instant anything happens: a queued event, a membership timer or a core timer of
    /// a running node.
    fn next_time(&self) -> Option<Duration> {
        let queued = self.queue.peek().map(|Reverse((t, _))| *t);
        let timers = self
            .nodes
            .iter()
            .filter(|n| n.proc_ == Proc::Running)
            .flat_map(|n| {
                let m = n
                    .membership
                    .as_ref()
                    .and_then(MembershipCore::next_deadline);
                let c = n.core.as_ref().and_then(SpeakerCore::poll_timeout);
                [m, c]
            })
            .flatten()
            .map(|d| d.saturating_duration_since(self.t0))
            .chain((0..self.nodes.len()).flat_map(|i| {
                (0..self.nodes[i].responder.nics.len()).filter_map(move |k| self.iface_due(i, k))
            }))
            .min();
        match (queued, timers) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
        .map(|t| t.max(self.now))
    }

    /// Runs every queued event and every timer due now.
    fn process_due(&mut self) {
        loop {
            let mut progressed = false;
            while let Some(Reverse((t, seq))) = self.queue.peek().copied() {
                if t > self.now {
                    break;
                }
                self.queue.pop();
                if let Some(e) = self.events.remove(&seq) {
                    self.handle(e);
                }
                progressed = true;
            }
            let mono = self.mono();
            for i in 0..self.nodes.len() {
                if self.nodes[i].proc_ != Proc::Running {
                    continue;
                }
                if self.nodes[i]
                    .membership
                    .as_ref()
                    .and_then(MembershipCore::next_deadline)
                    .is_some_and(|d| d <= mono)
                {
                    let clock = self.clock_of(i);
                    let _span = self.log_span(i).entered();
                    if let Some(m) = self.nodes[i].membership.as_mut() {
                        m.handle_timers(clock);
                    }
                    self.flush(i);
                    progressed = true;
                }
                if self.nodes[i]
                    .core
                    .as_ref()
                    .and_then(SpeakerCore::poll_timeout)
                    .is_some_and(|d| d <= mono)
                {
                    self.step(i, Wake::Tick);
                    progressed = true;
                }
                for k in 0..self.nodes[i].responder.nics.len() {
                    if self.iface_due(i, k).is_some_and(|d| d <= self.now) {
                        self.iface_timer(i, k);
                        progressed = true;
                    }
                }
            }
            if !progressed {
                break;
            }
        }
    }

    /// With `SIM_LOG` set (the `ferrolb-sim` binary installs a log subscriber), a span naming
    /// node `i` and the virtual time, so the membership's logs say who and when.
    fn log_span(&self, i: usize) -> tracing::Span {
        if self.trace {
            tracing::debug_span!(
                "sim",
                node = i,
                t = format!("{:.6}", self.now.as_secs_f64())
            )
        } else {
            tracing::Span::none()
        }
    }

    fn handle(&mut self, e: Event) {
        match e {
            Event::Datagram { from, to, bytes } => self.deliver(from, to, bytes),
            Event::Fault(f) => self.fault(f),
            Event::Terminate(i) => {
                self.nodes[i].sigterm_pending = false;
                self.stop_process(i, true);
                if std::mem::take(&mut self.nodes[i].restart_on_exit) {
                    self.start(i);
                }
            }
            Event::Resume(i) => self.resume(i),
            Event::View(i, version, view) => self.deliver_view(i, version, view),
            Event::Relist(i) => {
                if self.nodes[i].outage_until.is_some_and(|u| u <= self.now) {
                    self.nodes[i].outage_until = None;
                    let (version, view) = (self.version, self.view.clone());
                    self.deliver_view(i, version, view);
                }
            }
            Event::Wake(i, wake) => {
                if self.nodes[i].proc_ == Proc::Running {
                    self.step(i, wake);
                }
            }
            Event::Frame { to, nic, frame } => self.receive_frame(to, nic, frame),
            Event::Recheck => {}
            Event::Flood { per_ms, until } => self.flood(per_ms, until),
            Event::Forged {
                ip,
                every,
                until,
                proven,
            } => {
                self.outsider_claim(ip, proven);
                if self.now + every < until {
                    self.push(
                        self.now + every,
                        Event::Forged {
                            ip,
                            every,
                            until,
                            proven,
                        },
                    );
                }
            }
        }
    }

    // --- processes -------------------------------------------------------------------------

    fn start(&mut self, i: usize) {
        self.nodes[i].profile = self.nodes[i].mounted_profile;
        let claim = if self.nodes[i].profile == self.scenario.profile {
            self.claim.clone()
        } else {
            let (probe_period, _, suspect_timeout) = self.nodes[i].profile.timing().timings();
            ClaimSettings::for_membership(probe_period, suspect_timeout)
        };
        let node = NodeConfig::new(name(i), claim);
        let mut core = SpeakerCore::new(node, self.mono());
        // A start lists the API (unless it is unreachable: then the last view it had).
        if self.nodes[i].outage_until.is_none() {
            self.nodes[i].view = (self.version, self.view.clone());
        }
        core.set_view(self.nodes[i].view.1.clone());
        let n = &mut self.nodes[i];
        n.keys = key_ring_of(&n.mounted_keys);
        n.claim_keys = ClaimKeys::from_ring(&n.keys);
        n.core = Some(core);
        n.proc_ = Proc::Running;
        n.inbox.clear();
        n.responder = Responder::new(i, &n.responder.links());
        self.join(i);
        self.step(i, Wake::Tick);
    }

    /// Node `i`'s membership settings: the scenario's, or its own profile's timings.
    fn membership_config(&self, i: usize) -> MembershipConfig {
        let profile = self.nodes[i].profile;
        if profile == self.scenario.profile {
            return self.membership.clone();
        }
        let (probe_period, probe_rtt, suspect_timeout) = profile.timing().timings();
        MembershipConfig {
            probe_period,
            probe_rtt,
            suspect_timeout,
            ..self.membership.clone()
        }
    }

    fn join(&mut self, i: usize) {
        self.nodes[i].seed = self.nodes[i].seed.wrapping_add(1);
        let generation = self.clock_of(i).wall_ms;
        let membership = SpeakerId::with_generation(&name(i), addr(i), generation)
            .ok()
            .and_then(|id| {
                MembershipCore::with_seed(
                    id,
                    self.membership_config(i),
                    &self.nodes[i].keys,
                    Arc::new(Counters::default()),
                    self.nodes[i].seed,
                )
                .ok()
            });
        let Some(mut m) = membership else {
            if let Some(core) = self.nodes[i].core.as_mut() {
                core.join_failed();
            }
            return;
        };
        let peers: Vec<SocketAddr> = (0..self.scenario.nodes).map(addr).collect();
        m.set_peers(peers, self.clock_of(i));
        m.set_voters(self.nodes[i].responder.voters.clone());
        self.nodes[i].membership = Some(m);
        self.nodes[i].last_alive = empty_list();
        self.flush(i);
    }

    fn fault(&mut self, f: Fault) {
        match f {
            Fault::Crash(i) => self.stop_process(i, false),
            Fault::Terminate(i) => {
                let delay = self.task_delay();
                self.nodes[i].sigterm_pending = true;
                self.push(self.now + delay, Event::Terminate(i));
            }
            Fault::Restart(i) => {
                if self.nodes[i].proc_ == Proc::Down {
                    self.start(i);
                } else if self.nodes[i].sigterm_pending {
                    // Starved, the SIGTERM handler had not run by the restart's time: the
                    // restart follows the exit (it used to be lost, and the node stayed down
                    // for the rest of the scenario: the majority the checker assumes was gone;
                    // starved seeds 4378 and 7706 of the 100,000-scenario run).
                    self.nodes[i].restart_on_exit = true;
                }
            }
            Fault::Stop { node, for_ms } => {
                if self.nodes[node].proc_ == Proc::Running {
                    self.nodes[node].proc_ = Proc::Stopped;
                    self.push(
                        self.now + Duration::from_millis(for_ms),
                        Event::Resume(node),
                    );
                }
            }
            Fault::Isolate(i) => {
                for j in 0..self.scenario.nodes {
                    if j != i {
                        self.cut.insert((i, j));
                        self.cut.insert((j, i));
                    }
                }
            }
            Fault::Partition(side) => {
                let side: BTreeSet<usize> = side.into_iter().collect();
                for a in 0..self.scenario.nodes {
                    for b in 0..self.scenario.nodes {
                        if side.contains(&a) != side.contains(&b) {
                            self.cut.insert((a, b));
                        }
                    }
                }
            }
            Fault::CutOneWay { from, to } => {
                self.cut.insert((from, to));
            }
            Fault::CutPair(a, b) => {
                self.cut.insert((a, b));
                self.cut.insert((b, a));
            }
            Fault::Heal => self.cut.clear(),
            Fault::NodeReady { node, ready } => {
                let since = i64::try_from(self.clock().wall_ms / 1000).unwrap_or(i64::MAX);
                self.change_api(|v| {
                    if let Some(f) = v.cluster.nodes.get_mut(&name(node)) {
                        f.not_ready = !ready;
                        f.not_ready_since = (!ready).then_some(since);
                    }
                });
            }
            Fault::ExcludeLabel { node, on } => self.change_api(|v| {
                if let Some(f) = v.cluster.nodes.get_mut(&name(node)) {
                    if on {
                        f.labels.insert(EXCLUDE_LB_LABEL.into(), String::new());
                    } else {
                        f.labels.remove(EXCLUDE_LB_LABEL);
                    }
                }
            }),
            Fault::Cordon { node, on } => self.change_api(|v| {
                if let Some(f) = v.cluster.nodes.get_mut(&name(node)) {
                    f.unschedulable = on;
                }
            }),
            Fault::DeleteNode(node) => self.change_api(|v| {
                v.cluster.nodes.remove(&name(node));
                // Deleting a Node garbage-collects the Pods bound to it.
                v.cluster.speaker_nodes.remove(&name(node));
            }),
            Fault::RemovePod(node) => self.change_api(|v| {
                v.cluster.speaker_nodes.remove(&name(node));
            }),
            Fault::RecreateNode(node) => self.change_api(|v| {
                v.cluster.nodes.insert(name(node), node_facts(node));
                v.cluster.speaker_nodes.insert(name(node));
            }),
            Fault::AdvertiseOn(nodes) => self.change_api(|v| {
                let selectors = if nodes.is_empty() {
                    Vec::new()
                } else {
                    vec![LabelSelector {
                        match_labels: BTreeMap::new(),
                        match_expressions: vec![LabelSelectorRequirement {
                            key: HOSTNAME_LABEL.into(),
                            operator: SelectorOperator::In,
                            values: nodes.iter().map(|n| name(*n)).collect(),
                        }],
                    }]
                };
                if let Some(a) = v.cluster.advertisements.get_mut("all") {
                    a.node_selectors = selectors;
                }
            }),
            Fault::ChangeIp { ip: k } => {
                // Service k's address moves to one no Service had (a fresh IP for every node).
                let Some(old) = self.service_ips.get(k).copied() else {
                    return;
                };
                let new = ip(self.ips.len());
                self.service_ips[k] = new;
                self.ips.push(new);
                self.change_api(|v| {
                    if let Some(services) = v.ips.remove(&old) {
                        v.ips.insert(new, services);
                    }
                });
            }
            Fault::EndpointOn { ip: k, node } => self.change_api(|v| {
                if let Some(services) = v.ips.get_mut(&ip(k)) {
                    for svc in services {
                        svc.traffic_policy = TrafficPolicy::Local;
                        svc.endpoints = vec![EndpointFacts {
                            node_name: Some(name(node)),
                            ready: true,
                            serving: true,
                        }];
                    }
                }
            }),
            Fault::WatchDelay { node, ms } => {
                self.nodes[node].watch_delay = Duration::from_millis(ms);
            }
            Fault::ApiOutage { node, for_ms } => {
                let until = self.now + Duration::from_millis(for_ms);
                self.nodes[node].outage_until = Some(until);
                self.push(until, Event::Relist(node));
            }
            Fault::ForgedClaims {
                ip: k,
                every_ms,
                for_ms,
            } => self.outsider_claims(ip(k), every_ms, for_ms, false),
            Fault::ReplayedClaims {
                ip: k,
                every_ms,
                for_ms,
            } => self.outsider_claims(ip(k), every_ms, for_ms, true),
            Fault::SpoofFlood { per_ms, for_ms } => {
                let until = self.now + Duration::from_millis(for_ms);
                self.push(self.now, Event::Flood { per_ms, until });
            }
            Fault::SetKeys { node, ring } => self.nodes[node].mounted_keys = ring,
            Fault::SetProfile { node, profile } => self.nodes[node].mounted_profile = profile,
            Fault::ClockStep { node, ms } => {
                self.nodes[node].clock_offset_ms =
                    self.nodes[node].clock_offset_ms.saturating_add(ms);
            }
            Fault::NicCarrier { node, nic, up } => {
                if let Some(n) = self.nodes[node].responder.nics.get_mut(nic) {
                    n.carrier = up;
                }
                if self.nodes[node].proc_ == Proc::Running {
                    self.step(node, Wake::Tick);
                }
            }
            Fault::Carrier { node, up } => {
                for nic in &mut self.nodes[node].responder.nics {
                    nic.carrier = up;
                }
                if self.nodes[node].proc_ == Proc::Running {
                    self.step(node, Wake::Tick);
                }
            }
        }
    }

    /// An outsider's ARP claims for `ip` every `every_ms` for `for_ms`: forged (no valid proof)
    /// or replayed (`proven`: a speaker's signed claim, still within the clock-skew allowance).
    fn outsider_claims(&mut self, ip: IpAddr, every_ms: u64, for_ms: u64, proven: bool) {
        let until = self.now + Duration::from_millis(for_ms);
        self.push(
            self.now,
            Event::Forged {
                ip,
                every: Duration::from_millis(every_ms.max(1)),
                until,
                proven,
            },
        );
    }

    /// Crash (`graceful == false`) or SIGTERM.
    fn stop_process(&mut self, i: usize, graceful: bool) {
        if self.nodes[i].proc_ == Proc::Down {
            return;
        }
        if graceful && self.nodes[i].proc_ == Proc::Running {
            // The executor's shut-down: withdraw, then leave explicitly.
            let mono = self.mono();
            for nic in &mut self.nodes[i].responder.nics {
                nic.iface.set_owned(mono, &BTreeMap::new(), |_| None);
            }
            let clock = self.clock_of(i);
            if let Some(m) = self.nodes[i].membership.as_mut() {
                m.leave(clock);
            }
            self.flush(i);
        }
        let n = &mut self.nodes[i];
        n.proc_ = Proc::Down;
        n.core = None;
        n.plan = None;
        n.membership = None;
        n.inbox.clear();
        n.responder = Responder::new(i, &n.responder.links());
    }

    fn resume(&mut self, i: usize) {
        if self.nodes[i].proc_ != Proc::Stopped {
            return;
        }
        self.nodes[i].proc_ = Proc::Running;
        // After SIGCONT the membership task and the daemon loop race; the seed decides.
        let daemon_first = self.rng.random_bool(0.5);
        if daemon_first {
            self.step(i, Wake::Tick);
        }
        let clock = self.clock_of(i);
        let inbox = std::mem::take(&mut self.nodes[i].inbox);
        if let Some(m) = self.nodes[i].membership.as_mut() {
            m.handle_timers(clock);
            for (from, bytes) in inbox {
                let _ = m.handle_datagram(&bytes, from, clock);
            }
        }
        self.flush(i);
        // The responder task reads the frames queued meanwhile and runs its late timers, before
        // the daemon loop has renewed or ended the lease when the daemon runs second.
        for k in 0..self.nodes[i].responder.nics.len() {
            for frame in std::mem::take(&mut self.nodes[i].responder.nics[k].inbox) {
                self.receive_frame(i, k, frame);
            }
            if self.iface_due(i, k).is_some_and(|d| d <= self.now) {
                self.iface_timer(i, k);
            }
        }
        if !daemon_first {
            self.step(i, Wake::Tick);
        }
    }

    // --- the API server -------------------------------------------------------------------

    /// Changes the API server's objects and sends the new version down every node's watch
    /// (after its delay; not during its outage, whose relist delivers the latest).
    fn change_api(&mut self, change: impl FnOnce(&mut View)) {
        let mut v = (*self.view).clone();
        change(&mut v);
        self.version += 1;
        // The API server's revision: what the speakers compare in a mutual hold.
        v.revision = self.version;
        self.view = Arc::new(v);
        for i in 0..self.nodes.len() {
            if self.nodes[i].outage_until.is_some() {
                continue;
            }
            let at = self.now + self.nodes[i].watch_delay;
            self.push(at, Event::View(i, self.version, self.view.clone()));
        }
    }

    /// A watch delivers a view: newer than the node's, it replaces it and wakes the daemon.
    fn deliver_view(&mut self, i: usize, version: u64, view: Arc<View>) {
        if version <= self.nodes[i].view.0 {
            return;
        }
        self.nodes[i].view = (version, view.clone());
        if let Some(core) = self.nodes[i].core.as_mut() {
            core.set_view(view);
        }
        if self.nodes[i].proc_ == Proc::Running {
            self.step(i, Wake::ViewChanged);
        }
    }

    // --- membership network ----------------------------------------------------------------

    /// Sends node `i`'s outgoing datagrams and turns its membership changes into wake-ups.
    fn flush(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let Some(m) = node.membership.as_mut() else {
            return;
        };
        let out = m.take_outgoing();
        let events = m.take_events();
        let alive = (m.alive_digest() != node.last_alive).then(|| m.alive_digest());
        let replies =
            (*m.handover_replies() != node.last_replies).then(|| m.handover_replies().clone());
        for o in out {
            let Some(to) = (0..self.scenario.nodes).find(|j| addr(*j) == o.to) else {
                continue;
            };
            self.datagrams += 1;
            let (lo, hi) = self.scenario.latency_us;
            let latency = Duration::from_micros(self.rng.random_range(lo..=hi.max(lo)));
            let dup = self.scenario.dup_ppm;
            if dup > 0 && self.rng.random_range(0..1_000_000u32) < dup {
                let again = Duration::from_micros(self.rng.random_range(lo..=hi.max(lo)));
                self.push(
                    self.now + again,
                    Event::Datagram {
                        from: i,
                        to,
                        bytes: o.datagram.clone(),
                    },
                );
            }
            self.push(
                self.now + latency,
                Event::Datagram {
                    from: i,
                    to,
                    bytes: o.datagram,
                },
            );
        }
        if let Some(alive) = alive {
            self.nodes[i].last_alive = alive;
            let at = self.now + self.task_delay();
            self.push(at, Event::Wake(i, Wake::MembersChanged));
        }
        if let Some(replies) = replies {
            self.nodes[i].last_replies = replies;
            let at = self.now + self.task_delay();
            self.push(at, Event::Wake(i, Wake::HandoverReply));
        }
        let me = name(i);
        for e in events {
            let restarted_peer = matches!(
                &e,
                MembershipEvent::Up(n) | MembershipEvent::Restarted(n) if *n != me
            );
            let at = self.now + self.task_delay();
            self.push(at, Event::Wake(i, Wake::MemberEvent { restarted_peer }));
        }
    }

    fn deliver(&mut self, from: usize, to: usize, bytes: Vec<u8>) {
        if self.cut.contains(&(from, to)) {
            return;
        }
        let loss = self.scenario.loss_ppm;
        if loss > 0 && self.rng.random_range(0..1_000_000u32) < loss {
            return;
        }
        match self.nodes[to].proc_ {
            Proc::Down => {}
            Proc::Stopped => self.nodes[to].inbox.push((addr(from), bytes)),
            Proc::Running => {
                let clock = self.clock_of(to);
                let _span = self.log_span(to).entered();
                let result = self.nodes[to]
                    .membership
                    .as_mut()
                    .map(|m| m.handle_datagram(&bytes, addr(from), clock));
                self.count(result);
                self.flush(to);
            }
        }
    }

    /// One millisecond of spoofed datagrams: framed like a member's (`FLBm`, the current
    /// envelope version), sealed with no key, each from another member's address to a running node's membership port.
    fn flood(&mut self, per_ms: u32, until: Duration) {
        let n = self.scenario.nodes;
        if n >= 2 {
            for k in 0..per_ms {
                let to = self.rng.random_range(0..n);
                let as_node = (to + self.rng.random_range(1..n)) % n;
                let mut bytes = envelope::MAGIC.to_vec();
                bytes.push(envelope::VERSION);
                bytes.extend(
                    (0..8 + 24 + 96 + 16).map(|i: u32| (i as u8).wrapping_mul(151) ^ (k as u8)),
                );
                if self.nodes[to].proc_ == Proc::Running {
                    let clock = self.clock_of(to);
                    let result = self.nodes[to]
                        .membership
                        .as_mut()
                        .map(|m| m.handle_datagram(&bytes, addr(as_node), clock));
                    self.count(result);
                    self.flush(to);
                }
            }
        }
        let next = self.now + Duration::from_millis(1);
        if next < until {
            self.push(next, Event::Flood { per_ms, until });
        }
    }

    fn count(&mut self, result: Option<Result<(), ferrolb_l2::membership::DropReason>>) {
        if let Some(Err(reason)) = result {
            *self.drops.entry(format!("{reason:?}")).or_default() += 1;
        }
    }

    // --- the core and its outputs ----------------------------------------------------------

    fn step(&mut self, i: usize, wake: Wake) {
        let now = self.mono();
        let wall_secs = i64::try_from(self.clock_of(i).wall_ms / 1000).unwrap_or(i64::MAX);
        let n = &mut self.nodes[i];
        let obs = Observation {
            wake,
            carrier: n.responder.carrier(),
            links: n.responder.link_report(),
            membership: n.membership.as_ref().map(|m| MembershipObservation {
                alive: m.alive().clone(),
                self_rejoins: m.counters().snapshot().self_rejoins,
                evidence: m.evidence().clone(),
                carriers: m.carrier_reports(),
                handover_replies: m.handover_replies().clone(),
                revisions: m.peer_revisions().clone(),
                askers: m.handover_askers().clone(),
                releases_given: m.releases_given().clone(),
                agreeing: m.agreeing(),
            }),
            wall_secs,
            held_reported: BTreeSet::new(),
        };
        let Some(core) = n.core.as_mut() else {
            return;
        };
        core.step(now, obs);
        self.steps += 1;
        let mut outputs = Vec::new();
        while let Some(o) = core.poll_output() {
            outputs.push(o);
        }
        for o in outputs {
            self.apply(i, o);
        }
    }

    fn apply(&mut self, i: usize, output: Output) {
        if self.trace {
            match &output {
                Output::SetOwned(o) => eprintln!(
                    "{:>10.6} node {i} owns {:?}",
                    self.now.as_secs_f64(),
                    o.keys().collect::<Vec<_>>()
                ),
                Output::Note(n) => eprintln!("{:>10.6} node {i} {n:?}", self.now.as_secs_f64()),
                Output::Membership(c) => {
                    eprintln!("{:>10.6} node {i} {c:?}", self.now.as_secs_f64())
                }
                _ => {}
            }
        }
        match output {
            Output::SetLease(until) => {
                self.nodes[i].responder.lease = until.map(|u| u.saturating_duration_since(self.t0));
            }
            Output::SetVoters(voters) => {
                // As the executor: the responder's quorum and the membership's cut-off test.
                if let Some(m) = self.nodes[i].membership.as_mut() {
                    m.set_voters(voters.clone());
                }
                self.nodes[i].responder.voters = voters;
                self.nodes[i].responder.quorum_cache.set(None);
            }
            Output::SetOwned(owned) => {
                // As `Responder::set_owned`: an IP keeps its epoch while its interfaces stay.
                let r = &mut self.nodes[i].responder;
                let mut desired = BTreeMap::new();
                for (ip, interfaces) in owned {
                    let epoch = match r.desired.remove(&ip) {
                        Some((old, epoch)) if old == interfaces => epoch,
                        _ => {
                            r.next_epoch += 1;
                            r.next_epoch
                        }
                    };
                    desired.insert(ip, (interfaces, epoch));
                }
                r.desired = desired;
                self.apply_owned(i);
            }
            Output::Reannounce => {
                // As `Responder::reannounce`: every owned IP's schedule starts again.
                let r = &mut self.nodes[i].responder;
                for (_, epoch) in r.desired.values_mut() {
                    r.next_epoch += 1;
                    *epoch = r.next_epoch;
                }
                self.apply_owned(i);
            }
            Output::Membership(MembershipCommand::Leave { .. }) => {
                let clock = self.clock_of(i);
                if let Some(m) = self.nodes[i].membership.as_mut() {
                    m.leave(clock);
                }
                self.flush(i);
                self.nodes[i].membership = None;
                self.nodes[i].last_alive = empty_list();
            }
            Output::Membership(MembershipCommand::Join) => self.join(i),
            Output::Planned { plan, .. } => self.nodes[i].plan = Some(plan),
            Output::Withdrawn => self.nodes[i].plan = None,
            Output::SetFresh(fresh) => self.nodes[i].responder.fresh = fresh,
            Output::Note(_) => {}
            Output::SetHandovers {
                asks,
                holding,
                plan,
                revision,
            } => {
                // As the executor: after the owned set was applied.
                if let Some(m) = self.nodes[i].membership.as_mut() {
                    m.set_handovers(asks, holding);
                    m.set_plan(plan, revision);
                }
            }
            Output::SetCarrier(report) => {
                let clock = self.clock_of(i);
                if let Some(m) = self.nodes[i].membership.as_mut() {
                    m.set_carrier_report(report, clock);
                }
                self.flush(i);
            }
        }
    }

    // --- the L2 segment --------------------------------------------------------------------

    /// Gives node `i`'s interfaces its owned set (a responder task applies it before the next
    /// frame it reads, so answering follows at once); their timers wait for the task's wake-up.
    fn apply_owned(&mut self, i: usize) {
        let mono = self.mono();
        let hop = self.task_delay();
        let r = &mut self.nodes[i].responder;
        let probe = ProbeSettings::default().enabled();
        let owned: BTreeMap<IpAddr, OwnedIp> = r
            .desired
            .iter()
            .map(|(ip, (_, epoch))| {
                let o = OwnedIp {
                    epoch: *epoch,
                    probe: probe && r.fresh.contains(ip),
                };
                (*ip, o)
            })
            .collect();
        for nic in &mut r.nics {
            nic.iface.set_owned(mono, &owned, |_| None);
        }
        r.hold_until = self.now + hop;
        for k in 0..self.nodes[i].responder.nics.len() {
            self.drain_iface(i, k);
        }
    }

    /// The lease of node `i` (monotonic) and its wall clock now: the [`Context`] of its
    /// interfaces besides the claim keys and the peer MACs.
    fn iface_context(&self, i: usize) -> (Option<Instant>, u64) {
        (self.lease_of(i), self.clock_of(i).wall_ms)
    }

    /// Node `i`'s lease as its responder applies it (monotonic): the step's lease, cut at the
    /// end of the evidence of a majority of its voters (the quorum lease, kept current as grants
    /// arrive, as the executor does). It changes only at events (a step, a grant), so it is
    /// exact until the next one.
    fn lease_of(&self, i: usize) -> Option<Instant> {
        let n = &self.nodes[i];
        let step = n.responder.lease.map(|l| self.t0 + l);
        let key = n
            .membership
            .as_ref()
            .map(|m| (n.seed, m.evidence_version()));
        let quorum = match n.responder.quorum_cache.get() {
            // The majority only shrinks as evidence runs out: the same instant, or now.
            Some((k, q)) if k == key => q.map(|q| q.max(self.mono())),
            _ => {
                let empty = BTreeMap::new();
                let evidence = n.membership.as_ref().map_or(&empty, |m| m.evidence());
                let q = quorum_until(evidence, &n.responder.voters, &n.name, self.mono());
                n.responder.quorum_cache.set(Some((key, q)));
                q
            }
        };
        match (step, quorum) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the timers of node `i`'s NIC `k` are due (virtual time), if the process runs.
    fn iface_due(&self, i: usize, k: usize) -> Option<Duration> {
        let n = &self.nodes[i];
        if n.proc_ != Proc::Running {
            return None;
        }
        let due = n.responder.nics.get(k)?.iface.poll_timeout()?;
        Some(
            due.saturating_duration_since(self.t0)
                .max(n.responder.hold_until),
        )
    }

    /// Runs `input` on the `IfaceCore` of node `i`'s NIC `k` with its [`Context`] now, then
    /// carries out what it produced.
    fn iface_input(
        &mut self,
        i: usize,
        k: usize,
        input: impl FnOnce(&mut IfaceCore, Instant, &Context<'_>),
    ) {
        let mono = self.mono();
        let (lease, wall_ms) = self.iface_context(i);
        let n = &mut self.nodes[i];
        let ctx = Context {
            lease,
            wall_ms,
            keys: Some(&n.claim_keys),
            peers: &self.peer_macs,
            own: &n.own_macs,
        };
        if let Some(nic) = n.responder.nics.get_mut(k) {
            input(&mut nic.iface, mono, &ctx);
        }
        self.drain_iface(i, k);
    }

    fn iface_timer(&mut self, i: usize, k: usize) {
        self.iface_input(i, k, |iface, now, ctx| iface.handle_timeout(now, ctx));
        if self.iface_due(i, k).is_some_and(|d| d <= self.now) {
            // Nothing more can happen at this instant (a schedule caught up): look again later.
            self.nodes[i].responder.hold_until = self.now + Duration::from_micros(1);
        }
    }

    /// A frame reaches NIC `k` of node `to`: read now if the process runs and the link is up,
    /// at resume if it is stopped.
    fn receive_frame(&mut self, to: usize, k: usize, frame: Vec<u8>) {
        let proc_ = self.nodes[to].proc_;
        let Some(nic) = self.nodes[to].responder.nics.get_mut(k) else {
            return;
        };
        match proc_ {
            Proc::Down => return,
            Proc::Stopped => {
                nic.inbox.push(frame);
                return;
            }
            Proc::Running => {}
        }
        if !nic.carrier {
            return;
        }
        let proto = match frame.get(12..14) {
            Some([0x08, 0x06]) => Proto::Arp,
            Some([0x86, 0xdd]) => Proto::Ndp,
            _ => return,
        };
        self.iface_input(to, k, |iface, now, ctx| {
            iface.handle_frame(now, proto, &frame, ctx);
        });
    }

    /// Carries out the outputs of node `i`'s NIC `k` as the responder task does: a leased
    /// frame goes out only if the lease still allows it now; frames reach the other NICs on the
    /// segment by Ethernet destination (broadcast and multicast: all). Every announcement is
    /// recorded, and checked against I-announce: the node answers the IP there at that instant.
    fn drain_iface(&mut self, i: usize, k: usize) {
        let mono = self.mono();
        let lease = self.lease_of(i);
        let mut frames = Vec::new();
        let mut rechecks = Vec::new();
        loop {
            let Some(nic) = self.nodes[i].responder.nics.get_mut(k) else {
                return;
            };
            let Some(out) = nic.iface.poll_output() else {
                break;
            };
            let carrier = nic.carrier;
            let t = match out {
                IfaceOutput::Transmit(t) => t,
                IfaceOutput::PeerYield { until, ip, .. } => {
                    if self.trace {
                        eprintln!(
                            "{:>10.6} node {i} nic {k} yields {ip} until {:.6}",
                            self.now.as_secs_f64(),
                            until.saturating_duration_since(self.t0).as_secs_f64()
                        );
                    }
                    rechecks.push(until.saturating_duration_since(self.t0));
                    continue;
                }
                _ => continue,
            };
            if (t.leased && !lease_allows(lease, mono)) || !carrier {
                continue;
            }
            if let (TransmitKind::GratuitousArp | TransmitKind::UnsolicitedNa, Some(ip)) =
                (t.kind, t.ip)
            {
                if self.answers_on(i, k, ip).is_none() {
                    self.stray_announcements.push((self.now, i, ip));
                }
                if k == 0 && self.announcements.last() != Some(&(self.now, i, ip)) {
                    self.announcements.push((self.now, i, ip));
                }
                if k == 0 && t.kind == TransmitKind::GratuitousArp {
                    self.captured.insert((ip, i), (self.now, t.frame.clone()));
                }
            }
            frames.push(t.frame);
        }
        for at in rechecks {
            self.push(at, Event::Recheck);
        }
        for frame in frames {
            self.send_frame(Some(i), k, frame);
        }
    }

    /// Puts `frame` on segment `k` from node `from`'s NIC there (`None`: an outsider).
    fn send_frame(&mut self, from: Option<usize>, k: usize, frame: Vec<u8>) {
        let multicast = frame.first().is_some_and(|b| b & 1 == 1);
        let dst = frame
            .get(..6)
            .map(|d| MacAddr(d[0], d[1], d[2], d[3], d[4], d[5]));
        for to in 0..self.nodes.len() {
            if Some(to) == from || (!multicast && dst != Some(mac(to, k))) {
                continue;
            }
            self.push(
                self.now + L2_LATENCY,
                Event::Frame {
                    to,
                    nic: k,
                    frame: frame.clone(),
                },
            );
        }
    }

    /// Whether node `i` answers ARP/NDP for `ip` on segment `k` now, and until when at the
    /// latest (its lease).
    fn answers_on(&self, i: usize, k: usize, ip: IpAddr) -> Option<Duration> {
        let n = &self.nodes[i];
        let nic = n.responder.nics.get(k)?;
        if n.proc_ != Proc::Running || !nic.carrier || !nic.iface.answers(ip, self.mono()) {
            return None;
        }
        match self
            .lease_of(i)
            .map(|l| l.saturating_duration_since(self.t0))
        {
            Some(l) if l > self.now => Some(l),
            Some(_) => None,
            None => Some(Duration::MAX),
        }
    }

    /// Whether node `i` answers `ip` for the clients (on segment 0), and until when at most.
    fn answers_until(&self, i: usize, ip: IpAddr) -> Option<Duration> {
        self.answers_on(i, 0, ip)
    }

    /// One outsider claim of `ip` to every node: a gratuitous ARP whose sender MAC is a peer's
    /// (the next node's), forged without a proof, or (`replayed`) with a proof made a moment ago
    /// under the cluster's key — a speaker's signed claim captured on the LAN and replayed
    /// within the clock-skew allowance; unicast to each node so no node sees its own MAC.
    fn outsider_claim(&mut self, ip: IpAddr, replayed: bool) {
        let IpAddr::V4(v4) = ip else {
            return;
        };
        let n = self.nodes.len();
        for to in 0..n {
            let frame = if replayed {
                // The worst replay for node `to`: the latest signed claim another speaker
                // really sent for the IP, as captured (its proof verifies while within the
                // 2 s clock-skew allowance). Nothing if no other speaker announced it yet.
                let latest = self
                    .captured
                    .iter()
                    .filter(|((i, from), _)| *i == ip && *from != to)
                    .max_by_key(|(_, (at, _))| *at)
                    .map(|(_, (_, frame))| frame.clone());
                match latest {
                    Some(frame) => frame,
                    None => continue,
                }
            } else {
                build_gratuitous_arp(mac((to + 1) % n, 0), v4, GratuitousForm::Request)
            };
            let mut frame = frame;
            let m = mac(to, 0);
            if let Some(dst) = frame.get_mut(..6) {
                dst.copy_from_slice(&[m.0, m.1, m.2, m.3, m.4, m.5]);
            }
            self.push(self.now + L2_LATENCY, Event::Frame { to, nic: 0, frame });
        }
    }

    // --- the observer ----------------------------------------------------------------------

    /// Accounts `[now, to)` with the answer state at `now`.
    fn account(&mut self, to: Duration) {
        let eligible: Vec<bool> = {
            let ips = self.ips.clone();
            let oracle = self.oracle();
            ips.iter()
                .map(|ip| oracle.get(ip).is_some_and(Option::is_some))
                .collect()
        };
        let ips = self.ips.clone();
        for (ip, eligible) in ips.into_iter().zip(eligible) {
            let answering: Vec<(usize, Duration)> = (0..self.nodes.len())
                .filter_map(|i| self.answers_until(i, ip).map(|u| (i, u)))
                .collect();
            self.observer
                .account(ip, self.now, to, &answering, eligible);
        }
    }

    /// The rendezvous owner of each IP over the speakers whose process is up and whose
    /// interface has carrier, in the API server's view (`None`: no running speaker may announce
    /// it). Cached until the view or a process or carrier changes.
    fn oracle(&mut self) -> &BTreeMap<IpAddr, Option<usize>> {
        // The key is cheap to build (it is compared at every step); the names only on a miss.
        let running: Vec<bool> = self
            .nodes
            .iter()
            // A speaker on another profile than the cluster's is refused by the others (issue
            // #32 G5.4): not eligible.
            .map(|n| {
                n.proc_ != Proc::Down
                    && n.responder.reaches_clients()
                    && n.profile == self.scenario.profile
            })
            .collect();
        let key = (self.version, running);
        if self.oracle_cache.as_ref().is_none_or(|(k, _)| *k != key) {
            let names: BTreeSet<String> = (0..self.nodes.len())
                .filter(|i| key.1[*i])
                .map(name)
                .collect();
            let plan = ferrolb_l2::plan::plan(&self.view, &names, &name(0), Some(true));
            let owners = self
                .ips
                .iter()
                .map(|ip| {
                    let owner = plan
                        .ips
                        .get(ip)
                        .and_then(|p| p.owner.as_deref())
                        .and_then(|o| o.strip_prefix("node-"))
                        .and_then(|n| n.parse().ok());
                    (*ip, owner)
                })
                .collect();
            self.oracle_cache = Some((key, owners));
        }
        &self.oracle_cache.get_or_insert_with(Default::default).1
    }

    fn report(mut self, end: Duration) -> Report {
        let final_oracle = self.oracle().clone();
        let final_answerers = self
            .ips
            .iter()
            .map(|ip| {
                (
                    *ip,
                    (0..self.nodes.len())
                        .filter(|i| self.answers_until(*i, *ip).is_some())
                        .collect(),
                )
            })
            .collect();
        let final_plans = self
            .ips
            .iter()
            .map(|ip| {
                let owners = (0..self.nodes.len())
                    .filter(|i| self.nodes[*i].proc_ == Proc::Running)
                    .filter_map(|i| self.nodes[i].plan.as_ref())
                    .map(|p| p.ips.get(ip).and_then(|x| x.owner.clone()))
                    .collect();
                (*ip, owners)
            })
            .collect();
        Report {
            final_plans,
            ips: self.observer.finish(end),
            final_answerers,
            final_oracle,
            announcements: self.announcements,
            stray_announcements: self.stray_announcements,
            drops: self.drops,
            end,
            datagrams: self.datagrams,
            steps: self.steps,
        }
    }
}
