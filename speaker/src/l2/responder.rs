//! The level-triggered responder: the glue says which IPs this node owns and where they may be
//! announced; the responder converges its per-interface tasks to that (DESIGN S4–S8).
//!
//! - [`Responder::start`] scans interfaces once, then re-scans whenever the kernel reports a link
//!   or address change (an rtnetlink socket subscribed to `RTMGRP_LINK`, `RTMGRP_IPV4_IFADDR`,
//!   `RTMGRP_IPV6_IFADDR`; `netlink-sys`), and at the latest every
//!   [`L2Config::rescan_interval`] as a safety net; interfaces appearing, disappearing or changing
//!   (MAC, index, addresses) get their task started, stopped or restarted — a recreated interface
//!   is served within milliseconds, and an IPv6 link-local address leaving DAD starts NDP at once
//!   (issue #10 item 3). An interface whose carrier comes back has every owned IP re-announced, as
//!   on a gain: the switch may have forgotten the MAC while the link was down. So has one the
//!   kernel asks to notify its peers ([`peers_to_notify`]: a bond that failed over, a VLAN on it,
//!   a migrated virtual NIC), as the kernel does for the interface's own addresses (issue #30).
//! - [`Responder::set_owned`] replaces the whole owned set. It updates every interface task's view
//!   synchronously, before returning, so a withdrawn IP is never answered again (S5); a newly owned
//!   IP is announced at once and then on the [`AnnounceSchedule`].
//! - [`Responder::reannounce`] restarts the announcement schedule of every owned IP (S4: after a
//!   membership change in which this node re-confirmed ownership).
//! - [`Responder::set_lease`] bounds how long the current owned set may be served without the
//!   daemon confirming it (issue #8 F4): a speaker that resumes from a stall stops answering by
//!   itself before its daemon loop has even run.
//! - Conflicts (issue #10 item 5): frames in which another MAC claims an owned IP
//!   ([`super::decide::Claim`]) are recorded per IP ([`Responder::conflicts`]) and counted, never
//!   logged or answered per frame; the daemon's [`super::conflict::ConflictPolicy`] decides what
//!   to say and asks for one defensive announcement at a time ([`Responder::defend`]).
//! - One task per interface; a task whose sockets fail logs, counts
//!   ([`Counters::socket_errors`]), backs off (0.5 s doubling to 30 s) and retries, and never
//!   touches the others.
//!
//! Runs on the Tokio runtime it is started from; every socket is opened by a task of that runtime,
//! so a runtime on a thread that entered another network namespace serves that namespace.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::net::{IpAddr, Ipv6Addr};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::Interest;
use tokio::io::unix::AsyncFd;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::claim::quorum_until;
use crate::eligibility::Interfaces;
use crate::wire::MacAddr;
use crate::wire::claim_proof::ClaimKeys;
use crate::wire::ndp::{OFFSET_ICMPV6_TYPE, TYPE_NEIGHBOR_SOLICITATION, solicited_node_multicast};

use super::announce::AnnounceSchedule;
use super::conflict::{Sighting, Sightings};
use super::counters::Counters;
use super::exclusions::NameExclusions;
use super::iface::{
    Context, IfaceConfig, IfaceCore, IfaceOutput, OwnedIp, Proto, TransmitKind, lease_allows,
};
use super::interfaces::{InterfaceInfo, Selected, scan, select_for_node};
use super::probe::{ProbeSettings, Verdict};
use super::socket::{Filter, Memberships, PacketSocket, Received};

pub use super::iface::LEASE_EXPIRED;

/// Responder settings.
#[derive(Clone, Debug)]
pub struct L2Config {
    /// Gratuitous ARP / unsolicited NA timing.
    pub schedule: AnnounceSchedule,
    /// Probing of newly assigned IPs before their first announcement ([`super::probe`]).
    pub probe: ProbeSettings,
    /// How often interfaces are re-scanned (default 5 s).
    pub rescan_interval: Duration,
    /// First retry delay of a failed interface task (default 0.5 s), doubled up to `retry_max`.
    pub retry_min: Duration,
    /// Longest retry delay (default 30 s).
    pub retry_max: Duration,
    /// The default interface set (`--interfaces`): `None` chooses it automatically (DESIGN S8:
    /// every interface that is up, can broadcast and is not excluded, one per segment);
    /// `Some(names)` uses exactly these interfaces, as given, like an L2Advertisement's
    /// `spec.interfaces`. Applies to IPs whose L2Advertisements name no interface
    /// ([`Interfaces::All`]) and to the carrier check.
    pub default_interfaces: Option<BTreeSet<String>>,
    /// The names the automatic default set leaves out (`--exclude-interfaces`, DESIGN S8;
    /// [`super::exclusions`]). Not applied to named interfaces.
    pub excluded_interfaces: NameExclusions,
}

impl Default for L2Config {
    fn default() -> Self {
        L2Config {
            schedule: AnnounceSchedule::default(),
            probe: ProbeSettings::default(),
            rescan_interval: Duration::from_secs(5),
            retry_min: Duration::from_millis(500),
            retry_max: Duration::from_secs(30),
            default_interfaces: None,
            excluded_interfaces: NameExclusions::default(),
        }
    }
}

impl L2Config {
    /// `which` with [`Interfaces::All`] replaced by [`L2Config::default_interfaces`] when set.
    pub fn resolve(&self, which: &Interfaces) -> Interfaces {
        match (which, &self.default_interfaces) {
            (Interfaces::All, Some(names)) => Interfaces::Named(names.clone()),
            (other, _) => other.clone(),
        }
    }
}

/// What one interface task is doing, for logs, `/readyz` and tests.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct InterfaceStatus {
    /// Interface name.
    pub name: String,
    /// Serving ARP here.
    pub arp: bool,
    /// Serving NDP here.
    pub ndp: bool,
    /// Carrier at the last scan.
    pub carrier: bool,
    /// Sockets are open and the task is answering.
    pub running: bool,
    /// The last socket error, if the task is backing off.
    pub last_error: Option<String>,
    /// IPs owned on this interface now.
    pub owned: Vec<IpAddr>,
    /// Of those, the IPs not announced here yet: being probed, or held because another host
    /// answered the probe ([`super::probe`]).
    pub probing: Vec<IpAddr>,
}

/// IPs owned on one interface.
type OwnedHere = BTreeMap<IpAddr, OwnedIp>;

/// An owned IP that this node does not announce on `interface` because another host answered
/// its probe ([`super::probe::Verdict::InUse`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Held {
    /// The interface of the probe.
    pub interface: String,
    /// The MAC that answered.
    pub mac: MacAddr,
    /// Since when this MAC has held it here (monotonic).
    pub since: std::time::Instant,
}

struct Desired {
    interfaces: Interfaces,
    epoch: u64,
}

struct Task {
    selected: Selected,
    tx: watch::Sender<Arc<OwnedHere>>,
    /// Defensive announcements asked for ([`Responder::defend`]).
    defend: mpsc::Sender<IpAddr>,
    handle: JoinHandle<()>,
    status: Arc<Mutex<InterfaceStatus>>,
}

#[derive(Default)]
struct State {
    desired: BTreeMap<IpAddr, Desired>,
    scanned: Vec<InterfaceInfo>,
    /// The Node's own addresses (one interface per segment prefers the NIC holding them).
    node_addresses: BTreeSet<IpAddr>,
    tasks: BTreeMap<String, Task>,
    next_epoch: u64,
    /// Newly assigned IPs ([`Responder::set_fresh`]).
    fresh: BTreeSet<IpAddr>,
}

struct Inner {
    config: L2Config,
    counters: Arc<Counters>,
    state: Mutex<State>,
    /// Serve owned IPs only before this instant; `None` = no lease (always serve).
    lease: Mutex<Option<std::time::Instant>>,
    /// The quorum lease ([`Responder::set_quorum`]), applied on top of `lease`.
    quorum: Mutex<Option<Quorum>>,
    /// Conflicts seen on owned IPs (only while they are owned).
    conflicts: Mutex<Sightings>,
    /// Owned IPs held back after a probe, per (IP, interface): the MAC that answered.
    held: Mutex<BTreeMap<(IpAddr, String), (MacAddr, std::time::Instant)>>,
    /// IPs found in use, per IP: the MAC and when a round last said so. Outlives the task that
    /// held the IP, a claim-gate closure ([`Responder::set_owned`] keeps it [`HOLD_MEMORY`]
    /// after the IP stopped being owned) and an interface change, so the IP is probed again
    /// before it is announced anywhere; cleared by a round that finds the IP free.
    memory: Mutex<BTreeMap<IpAddr, (MacAddr, std::time::Instant)>>,
    /// MACs of peer speakers ([`Responder::set_peer_macs`]): an unproven claim from one of
    /// them within [`super::peers::PEER_SETTLE`] of a gain is a handover frame, not a conflict.
    peers: Mutex<BTreeMap<MacAddr, String>>,
    /// The claim keys ([`Responder::set_claim_keys`]): they sign this node's announcements and
    /// verify the proofs of other speakers' claims; without them nothing is signed and no claim
    /// makes this node yield.
    claim_keys: Mutex<Option<ClaimKeys>>,
    /// The MACs of every interface of this host (the last scan): a claim from one of them is
    /// this node's own announcement heard on another NIC ([`Context::own`]).
    own: Mutex<BTreeSet<MacAddr>>,
}

/// What the quorum lease (issue #32 G2, [`ferrolb_l2::claim::quorum_until`]) is computed from
/// at each send: this node's name, the voters the core last named, and the membership's two-way
/// evidence as it stands (`None` while out of the membership: no evidence at all).
pub struct Quorum {
    /// This node's name.
    pub me: String,
    /// The voting set (`Output::SetVoters`).
    pub voters: BTreeSet<String>,
    /// The membership's evidence (`Membership::evidence`).
    pub evidence: Option<watch::Receiver<BTreeMap<String, std::time::Instant>>>,
}

impl Inner {
    /// The lease in force at `now`: the daemon's, cut at the end of the evidence of a majority
    /// of the voters. Read right before each leased send, so grants that arrived since the
    /// daemon's last step count, and evidence that ran out since counts no more.
    fn lease_at(&self, now: std::time::Instant) -> Option<std::time::Instant> {
        let step = *lock(&self.lease);
        let quorum = lock(&self.quorum).as_ref().and_then(|q| {
            let empty = BTreeMap::new();
            match &q.evidence {
                Some(rx) => quorum_until(&rx.borrow(), &q.voters, &q.me, now),
                None => quorum_until(&empty, &q.voters, &q.me, now),
            }
        });
        match (step, quorum) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

/// How long an IP found in use is remembered after this node stopped owning it.
pub const HOLD_MEMORY: Duration = Duration::from_secs(60);

/// Drop reason: the frame reached this interface's socket but the kernel received it on another
/// interface stacked on it — a VLAN sub-interface or a bond master ([`Received::arrived_on`]).
/// The responder of that interface answers it, if it is selected; this one must not (issue #10).
pub const OTHER_INTERFACE: &str = "other_interface";

/// The ARP/NDP responder of one node. Dropping it stops every task (sockets close, multicast
/// groups are left).
pub struct Responder {
    inner: Arc<Inner>,
    rescanner: JoinHandle<()>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Responder {
    /// Scan interfaces and start the re-scan loop on the current Tokio runtime.
    ///
    /// Errors: the first interface scan failed (no netlink).
    pub fn start(config: L2Config, counters: Arc<Counters>) -> io::Result<Responder> {
        let scanned = scan()?;
        let inner = Arc::new(Inner {
            config,
            counters,
            state: Mutex::new(State::default()),
            lease: Mutex::new(None),
            quorum: Mutex::new(None),
            conflicts: Mutex::new(Sightings::default()),
            peers: Mutex::new(BTreeMap::new()),
            own: Mutex::new(BTreeSet::new()),
            claim_keys: Mutex::new(None),
            held: Mutex::new(BTreeMap::new()),
            memory: Mutex::new(BTreeMap::new()),
        });
        {
            let mut state = lock(&inner.state);
            state.scanned = scanned;
            reconcile(&inner, &mut state);
        }
        let weak = Arc::downgrade(&inner);
        let interval = inner.config.rescan_interval;
        // Opened here, in the caller's network namespace (the task may run on another thread).
        let changes = match link_changes() {
            Ok(socket) => Some(socket),
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch link and address changes (rtnetlink); re-scanning on the interval only");
                None
            }
        };
        let rescanner = tokio::spawn(async move {
            loop {
                let mut notify = BTreeSet::new();
                tokio::select! {
                    () = tokio::time::sleep(interval) => {}
                    first = next_change(changes.as_ref()) => {
                        // One change usually comes with several messages (link, addresses,
                        // routes): let them arrive, then scan once.
                        tokio::time::sleep(CHANGE_SETTLE).await;
                        notify = first;
                        notify.extend(drain(changes.as_ref()));
                    }
                }
                let Some(inner) = weak.upgrade() else { return };
                rescan(&inner, &notify);
            }
        });
        Ok(Responder { inner, rescanner })
    }

    /// Replace the owned set: every IP this node must answer for, with the interfaces it may use
    /// (from `L2Advertisement.spec.interfaces`, [`Interfaces::All`] for the default set).
    /// Level-triggered: pass the full set each time. IPs that stay owned keep their announcement
    /// schedule; new ones are announced now; removed ones are not answered once this returns.
    pub fn set_owned(&self, owned: BTreeMap<IpAddr, Interfaces>) {
        let mut state = lock(&self.inner.state);
        let mut desired = BTreeMap::new();
        for (ip, interfaces) in owned {
            let interfaces = self.inner.config.resolve(&interfaces);
            let epoch = match state.desired.remove(&ip) {
                Some(d) if d.interfaces == interfaces => d.epoch,
                _ => {
                    state.next_epoch += 1;
                    state.next_epoch
                }
            };
            desired.insert(ip, Desired { interfaces, epoch });
        }
        state.desired = desired;
        lock(&self.inner.conflicts).retain(|ip| state.desired.contains_key(ip));
        lock(&self.inner.held).retain(|(ip, _), _| state.desired.contains_key(ip));
        let now = std::time::Instant::now();
        lock(&self.inner.memory).retain(|ip, (_, at)| {
            state.desired.contains_key(ip) || now.saturating_duration_since(*at) < HOLD_MEMORY
        });
        reconcile(&self.inner, &mut state);
    }

    /// The newly assigned IPs ([`crate::fresh::FreshIps::fresh`]): an IP of this set that becomes
    /// owned on an interface is probed there before it is announced or answered
    /// ([`super::probe`]), unless probing is disabled ([`ProbeSettings::count`] 0). Call it
    /// before [`Responder::set_owned`]; it takes effect at the next change of the owned set.
    pub fn set_fresh(&self, fresh: BTreeSet<IpAddr>) {
        lock(&self.inner.state).fresh = fresh;
    }

    /// Owned IPs held back because another host answered the probe, per IP (one interface
    /// named when several hold it).
    pub fn held(&self) -> BTreeMap<IpAddr, Held> {
        let state = lock(&self.inner.state);
        lock(&self.inner.held)
            .iter()
            .filter(|((ip, _), _)| state.desired.contains_key(ip))
            .map(|((ip, interface), (mac, since))| {
                (
                    *ip,
                    Held {
                        interface: interface.clone(),
                        mac: *mac,
                        since: *since,
                    },
                )
            })
            .collect()
    }

    /// The conflicts seen on IPs owned now, per IP (issue #10 item 5).
    pub fn conflicts(&self) -> BTreeMap<IpAddr, Sighting> {
        lock(&self.inner.conflicts).all().clone()
    }

    /// Send one defensive announcement of `ip` on `interface` (RFC 5227 §2.4 (b); gratuitous ARP
    /// in both forms, or one unsolicited NA), if the IP is owned there and the lease is valid.
    /// Never waits; a request that finds the interface's queue full is dropped (the caller rate
    /// limits, see [`super::conflict::ConflictPolicy`]).
    pub fn defend(&self, ip: IpAddr, interface: &str) {
        let state = lock(&self.inner.state);
        if let Some(t) = state.tasks.get(interface) {
            let _ = t.defend.try_send(ip);
        }
    }

    /// The MACs of peer speakers and their Node names ([`super::peers::peer_macs`]);
    /// replaces the previous map. A frame from one of them without a valid claim proof that
    /// claims an IP owned here for less than [`super::peers::PEER_SETTLE`] is a handover frame
    /// (no conflict); it never makes this node yield.
    pub fn set_peer_macs(&self, peers: BTreeMap<MacAddr, String>) {
        *lock(&self.inner.peers) = peers;
    }

    /// The claim keys, derived from the membership key ring (DESIGN S15): from now on this
    /// node's gratuitous ARPs and unsolicited NAs carry a claim proof, and a claim of an IP owned
    /// here for at least [`super::peers::PEER_SETTLE`] makes this node yield it on that interface
    /// for [`super::peers::YIELD_FOR`] only when its proof verifies under these keys and is fresh
    /// ([`crate::wire::claim_proof`]).
    pub fn set_claim_keys(&self, keys: ClaimKeys) {
        *lock(&self.inner.claim_keys) = Some(keys);
    }

    /// Serve the owned set only until `until` (monotonic); `None` lifts the lease. The daemon
    /// renews it every tick while its claim gate is open, so a process that was stopped longer
    /// than the lease stops answering on its own when it resumes (counted as
    /// [`LEASE_EXPIRED`] drops) until the daemon has re-checked the membership.
    pub fn set_lease(&self, until: Option<std::time::Instant>) {
        *lock(&self.inner.lease) = until;
    }

    /// Sets what the quorum lease is computed from ([`Quorum`]); `None` lifts it (a node that
    /// runs no membership). The lease in force is the earlier of [`Self::set_lease`]'s and the
    /// quorum lease at the instant of each send.
    pub fn set_quorum(&self, quorum: Option<Quorum>) {
        *lock(&self.inner.quorum) = quorum;
    }

    /// Announce every owned IP again from the start of the schedule (DESIGN S4).
    pub fn reannounce(&self) {
        let mut state = lock(&self.inner.state);
        let mut epoch = state.next_epoch;
        for d in state.desired.values_mut() {
            epoch += 1;
            d.epoch = epoch;
        }
        state.next_epoch = epoch;
        reconcile(&self.inner, &mut state);
    }

    /// The Node's InternalIP/ExternalIP addresses: where several interfaces of the default set
    /// reach one segment, the one holding such an address answers on it
    /// ([`crate::l2::interfaces::select_for_node`]). Cheap when unchanged.
    pub fn set_node_addresses(&self, addresses: BTreeSet<IpAddr>) {
        let mut state = lock(&self.inner.state);
        if state.node_addresses != addresses {
            state.node_addresses = addresses;
            reconcile(&self.inner, &mut state);
        }
    }

    /// Re-scan interfaces now (also done every `rescan_interval`).
    pub fn rescan(&self) {
        rescan(&self.inner, &BTreeSet::new());
    }

    /// The shared counters.
    pub fn counters(&self) -> Arc<Counters> {
        self.inner.counters.clone()
    }

    /// Status of every interface task, sorted by name.
    pub fn interfaces(&self) -> Vec<InterfaceStatus> {
        let state = lock(&self.inner.state);
        state
            .tasks
            .values()
            .map(|t| lock(&t.status).clone())
            .collect()
    }

    /// This node's carrier report per interface and family at the last scan (issue #32 G5.5,
    /// [`super::interfaces::link_report`]): the default set (`--interfaces` applied) and the
    /// interfaces in `named` (those the L2Advertisements list).
    pub fn link_report(&self, named: &BTreeSet<String>) -> crate::carrier::LinkReport {
        let state = lock(&self.inner.state);
        let default = self.inner.config.resolve(&Interfaces::All);
        super::interfaces::link_report(
            &state.scanned,
            &default,
            named,
            &state.node_addresses,
            &self.inner.config.excluded_interfaces,
        )
    }

    /// The IPv4 addresses with their prefix lengths of the interfaces of the default set
    /// (`--interfaces` applied) that answer ARP, at the last scan, as `(interface, address,
    /// prefix length)`: what a node reports for automatic pools (issue #28,
    /// [`ferrolb_l2::networks`]). An address whose subnet the scan did not record is left out.
    pub fn arp_ipv4(&self) -> Vec<(String, std::net::Ipv4Addr, u8)> {
        let state = lock(&self.inner.state);
        let default = self.inner.config.resolve(&Interfaces::All);
        select_for_node(
            &state.scanned,
            &default,
            &state.node_addresses,
            &self.inner.config.excluded_interfaces,
        )
        .into_iter()
        .filter(|s| s.arp)
        .flat_map(|s| {
            let info = s.info;
            info.ipv4
                .iter()
                .filter_map(|ip| {
                    let net = ferrolb_crds::auto_pool::Net4::new(*ip, 32)?;
                    info.ipv4_nets
                        .iter()
                        .filter(|(n, l)| {
                            ferrolb_crds::auto_pool::Net4::new(*n, *l)
                                .is_some_and(|sub| sub.contains(net.network))
                        })
                        .map(|(_, l)| *l)
                        .min()
                        .map(|len| (info.name.clone(), *ip, len))
                })
                .collect::<Vec<_>>()
        })
        .collect()
    }

    /// Whether any interface usable for `which` (an IP's announce interfaces) is up with carrier
    /// at the last scan. Feeds [`crate::eligibility::NodeFacts::carrier`] (DESIGN S1, case C-15c:
    /// the announce interface going down makes the node ineligible).
    pub fn carrier(&self, which: &Interfaces) -> bool {
        let state = lock(&self.inner.state);
        let which = self.inner.config.resolve(which);
        select_for_node(
            &state.scanned,
            &which,
            &state.node_addresses,
            &self.inner.config.excluded_interfaces,
        )
        .iter()
        .any(|s| s.info.carrier)
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.rescanner.abort();
        for (_, t) in std::mem::take(&mut lock(&self.inner.state).tasks) {
            t.handle.abort();
        }
    }
}

/// Re-scans the interfaces and converges the tasks. `notify`: the indexes of the interfaces whose
/// peers the kernel was asked to notify since the last scan ([`peers_to_notify`]).
fn rescan(inner: &Arc<Inner>, notify: &BTreeSet<u32>) {
    match scan() {
        Ok(scanned) => {
            let mut state = lock(&inner.state);
            // The kernel re-announces its own addresses on such an interface (a bond that failed
            // over to another slave, a VLAN on it, a migrated virtual NIC): the switch must learn
            // the new path of the IPs this node answers for too.
            let notified: Vec<String> = scanned
                .iter()
                .filter(|now| notify.contains(&now.index) && now.up && now.carrier)
                .filter(|now| state.tasks.contains_key(&now.name))
                .map(|i| i.name.clone())
                .collect();
            let regained: Vec<String> = scanned
                .iter()
                .filter(|now| now.up && now.carrier)
                .filter(|now| {
                    state
                        .scanned
                        .iter()
                        .find(|before| before.name == now.name && before.index == now.index)
                        .is_some_and(|before| !before.carrier)
                })
                .map(|i| i.name.clone())
                .collect();
            state.scanned = scanned;
            if !notified.is_empty() {
                tracing::info!(interfaces = ?notified, "the kernel notifies this link's peers (bond failover, migration); re-announcing");
            }
            if !regained.is_empty() {
                tracing::info!(interfaces = ?regained, "carrier back; re-announcing");
            }
            if !regained.is_empty() || !notified.is_empty() {
                // As on a gain: new epochs restart the announcement schedule of every owned IP.
                let mut epoch = state.next_epoch;
                for d in state.desired.values_mut() {
                    epoch += 1;
                    d.epoch = epoch;
                }
                state.next_epoch = epoch;
            }
            reconcile(inner, &mut state);
        }
        Err(e) => {
            tracing::warn!(error = %e, "interface scan failed; keeping the previous interface set")
        }
    }
}

/// How long to wait after the first rtnetlink message before re-scanning, so one change (link,
/// addresses, routes) costs one scan.
const CHANGE_SETTLE: Duration = Duration::from_millis(20);

// Multicast groups of rtnetlink (Linux `include/uapi/linux/rtnetlink.h`).
const RTMGRP_LINK: u32 = 0x1;
const RTMGRP_IPV4_IFADDR: u32 = 0x10;
const RTMGRP_IPV6_IFADDR: u32 = 0x100;

/// An rtnetlink socket of the calling thread's network namespace that receives a message on
/// every link change and IPv4/IPv6 address change. Must be called inside a Tokio runtime.
///
/// Errors: the socket could not be opened or bound.
fn link_changes() -> io::Result<netlink_sys::TokioSocket> {
    use netlink_sys::{AsyncSocket, SocketAddr, TokioSocket, protocols::NETLINK_ROUTE};
    let mut socket = TokioSocket::new(NETLINK_ROUTE)?;
    socket.socket_mut().bind(&SocketAddr::new(
        0,
        RTMGRP_LINK | RTMGRP_IPV4_IFADDR | RTMGRP_IPV6_IFADDR,
    ))?;
    Ok(socket)
}

/// Resolves when a message arrives (never without a socket), with the interfaces whose peers it
/// asks to notify ([`peers_to_notify`]). A receive error — e.g. `ENOBUFS` after a burst the socket
/// buffer could not hold — counts as a change too: something happened.
async fn next_change(socket: Option<&netlink_sys::TokioSocket>) -> BTreeSet<u32> {
    use netlink_sys::AsyncSocketExt;
    match socket {
        Some(socket) => {
            let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
            let _ = socket.recv(&mut buf).await;
            peers_to_notify(&buf)
        }
        None => std::future::pending().await,
    }
}

/// Reads the messages already queued; returns the interfaces whose peers they ask to notify
/// (nothing else in them is needed: the scan that follows reads the new state).
fn drain(socket: Option<&netlink_sys::TokioSocket>) -> BTreeSet<u32> {
    use netlink_sys::AsyncSocket;
    let mut notify = BTreeSet::new();
    if let Some(socket) = socket {
        // The socket is non-blocking (Tokio's): `recv` fails with `WouldBlock` once it is empty.
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        while socket.socket_ref().recv(&mut buf, 0).is_ok_and(|n| n > 0) {
            notify.extend(peers_to_notify(&buf));
            buf.clear();
        }
    }
    notify
}

/// `IFLA_EVENT_NOTIFY_PEERS` (Linux `include/uapi/linux/if_link.h`), as `IFLA_EVENT`'s value.
#[cfg(test)]
const IFLA_EVENT_NOTIFY_PEERS: u32 = 4;

/// The interface indexes of the `RTM_NEWLINK` messages in `buf` (one datagram of the rtnetlink
/// socket) that carry `IFLA_EVENT = IFLA_EVENT_NOTIFY_PEERS`: the kernel's `NETDEV_NOTIFY_PEERS`,
/// after which it sends a gratuitous ARP / unsolicited NA for each of the interface's own
/// addresses — a bond that failed over to another slave (and every VLAN on it), a virtual NIC
/// after a live migration, a team port change. Pure; a message that does not
/// parse (`netlink-packet-route`) is skipped, a malformed length ends the datagram.
pub fn peers_to_notify(buf: &[u8]) -> BTreeSet<u32> {
    use netlink_packet_core::{NetlinkMessage, NetlinkPayload};
    use netlink_packet_route::RouteNetlinkMessage;
    use netlink_packet_route::link::{LinkAttribute, LinkEvent};
    let mut out = BTreeSet::new();
    let mut offset = 0;
    while let Some(bytes) = buf.get(offset..).filter(|b| !b.is_empty()) {
        // The header's length field (first 4 bytes, host order) says where the next message
        // starts, parsed or not; messages are 4-byte aligned (NLMSG_ALIGN).
        let length = bytes
            .get(..4)
            .and_then(|b| <[u8; 4]>::try_from(b).ok())
            .map_or(0, |b| usize::try_from(u32::from_ne_bytes(b)).unwrap_or(0));
        if length < 16 || length > bytes.len() {
            break;
        }
        offset += length.next_multiple_of(4);
        let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(&bytes[..length])
        else {
            continue;
        };
        if let NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewLink(link)) = message.payload
            && link
                .attributes
                .iter()
                .any(|a| matches!(a, LinkAttribute::Event(LinkEvent::NotifyPeers)))
        {
            out.insert(link.header.index);
        }
    }
    out
}

/// Whether two selections need the same sockets (carrier changes do not restart a task).
fn same_sockets(a: &Selected, b: &Selected) -> bool {
    (a.arp, a.ndp, a.info.index, a.info.mac, a.info.link_local)
        == (b.arp, b.ndp, b.info.index, b.info.mac, b.info.link_local)
}

/// Converge tasks and their owned sets to `state.desired` × `state.scanned`.
fn reconcile(inner: &Arc<Inner>, state: &mut State) {
    *lock(&inner.own) = state.scanned.iter().filter_map(|i| i.mac).collect();
    // Every interface any owned IP may use, plus the default set (so sockets are ready early).
    let mut selections: BTreeMap<&Interfaces, Vec<Selected>> = BTreeMap::new();
    let node_addresses = &state.node_addresses;
    let default_set = inner.config.resolve(&Interfaces::All);
    let excluded = &inner.config.excluded_interfaces;
    selections.insert(
        &default_set,
        select_for_node(&state.scanned, &default_set, node_addresses, excluded),
    );
    for d in state.desired.values() {
        selections.entry(&d.interfaces).or_insert_with(|| {
            select_for_node(&state.scanned, &d.interfaces, node_addresses, excluded)
        });
    }
    // One task per interface, with the sockets every selection that uses it needs: an
    // interface may serve ARP for the default set but also NDP for an IP whose L2Advertisement
    // names it (or the other way round). The owned set below still follows each IP's own
    // selection.
    let mut universe: BTreeMap<String, Selected> = BTreeMap::new();
    for s in selections.values().flatten() {
        universe
            .entry(s.info.name.clone())
            .and_modify(|u| {
                u.arp |= s.arp;
                u.ndp |= s.ndp;
            })
            .or_insert_with(|| s.clone());
    }
    let mut owned: BTreeMap<String, OwnedHere> = universe
        .keys()
        .map(|n| (n.clone(), OwnedHere::new()))
        .collect();
    // An IP held anywhere on this node stays held wherever it is served: a restarted or new
    // interface task probes it again before announcing it.
    let held_anywhere: BTreeSet<IpAddr> = lock(&inner.memory).keys().copied().collect();
    for (ip, d) in &state.desired {
        for s in selections.get(&d.interfaces).into_iter().flatten() {
            let serves = match ip {
                IpAddr::V4(_) => s.arp,
                IpAddr::V6(_) => s.ndp,
            };
            if serves && let Some(here) = owned.get_mut(&s.info.name) {
                let probe = inner.config.probe.enabled()
                    && (state.fresh.contains(ip) || held_anywhere.contains(ip));
                here.insert(
                    *ip,
                    OwnedIp {
                        epoch: d.epoch,
                        probe,
                    },
                );
            }
        }
    }
    // Stop tasks of vanished or changed interfaces.
    let stale: Vec<String> = state
        .tasks
        .iter()
        .filter(|(name, t)| {
            universe
                .get(*name)
                .is_none_or(|s| !same_sockets(s, &t.selected))
        })
        .map(|(name, _)| name.clone())
        .collect();
    for name in stale {
        if let Some(t) = state.tasks.remove(&name) {
            tracing::info!(interface = %name, "interface gone or changed; stopping its responder");
            t.handle.abort();
            // Its held IPs are no longer held *here*; they stay in `memory` (probed first
            // wherever they are served next).
            lock(&inner.held).retain(|(_, iface), _| *iface != name);
        }
    }
    for (name, selected) in universe {
        let here = Arc::new(owned.remove(&name).unwrap_or_default());
        if let Some(t) = state.tasks.get(&name) {
            let mut st = lock(&t.status);
            st.carrier = selected.info.carrier;
            // New IPs to be probed are "probing" from now on, not only once the task has read
            // its new owned set: the daemon reads the status right after set_owned to decide
            // whether it may say "announcing".
            let new_probes: Vec<IpAddr> = here
                .iter()
                .filter(|(ip, o)| o.probe && !st.owned.contains(ip))
                .map(|(ip, _)| *ip)
                .collect();
            st.probing.retain(|ip| here.contains_key(ip));
            for ip in new_probes {
                if !st.probing.contains(&ip) {
                    st.probing.push(ip);
                }
            }
            st.owned = here.keys().copied().collect();
            drop(st);
            t.tx.send_if_modified(|cur| {
                let changed = **cur != *here;
                *cur = here.clone();
                changed
            });
            continue;
        }
        let (tx, rx) = watch::channel(here.clone());
        let (defend, defend_rx) = mpsc::channel(16);
        let status = Arc::new(Mutex::new(InterfaceStatus {
            name: name.clone(),
            arp: selected.arp,
            ndp: selected.ndp,
            carrier: selected.info.carrier,
            owned: here.keys().copied().collect(),
            probing: here
                .iter()
                .filter(|(_, o)| o.probe)
                .map(|(ip, _)| *ip)
                .collect(),
            ..Default::default()
        }));
        tracing::info!(interface = %name, arp = selected.arp, ndp = selected.ndp, "starting responder");
        let handle = tokio::spawn(run_interface(
            selected.clone(),
            rx,
            defend_rx,
            inner.clone(),
            status.clone(),
        ));
        state.tasks.insert(
            name,
            Task {
                selected,
                tx,
                defend,
                handle,
                status,
            },
        );
    }
}

/// One interface, forever: serve, and on error or panic log, count, back off and retry (issue
/// #27 item 11: an interface task is never left dead while the node owns IPs; a new attempt
/// re-reads the owned set, as `serve` marks it changed).
async fn run_interface(
    selected: Selected,
    rx: watch::Receiver<Arc<OwnedHere>>,
    mut defend_rx: mpsc::Receiver<IpAddr>,
    inner: Arc<Inner>,
    status: Arc<Mutex<InterfaceStatus>>,
) {
    let mut backoff = inner.config.retry_min;
    loop {
        let started = tokio::time::Instant::now();
        let outcome = guarded(serve(
            &selected,
            rx.clone(),
            &mut defend_rx,
            &inner,
            &status,
        ))
        .await;
        let Some(err) = failure(outcome, &selected.info.name, backoff, &inner.counters) else {
            return;
        };
        {
            let mut st = lock(&status);
            st.running = false;
            st.last_error = Some(err);
        }
        // An attempt that served for longer than the longest backoff was healthy: the next
        // failure is a new one, retried after the shortest delay again, not after the
        // longest a few old failures grew it to.
        if started.elapsed() > inner.config.retry_max {
            backoff = inner.config.retry_min;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(inner.config.retry_max);
    }
}

/// Runs `attempt`, turning a panic inside it into `Err(message)` instead of ending the task.
async fn guarded(
    attempt: impl std::future::Future<Output = io::Result<()>>,
) -> Result<io::Result<()>, String> {
    use futures::FutureExt as _;
    std::panic::AssertUnwindSafe(attempt)
        .catch_unwind()
        .await
        .map_err(|panic| {
            panic
                .downcast_ref::<&str>()
                .map(|s| (*s).to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into())
        })
}

/// What one attempt of an interface task ended with: `None` when it ended on purpose (the
/// responder dropped the interface); otherwise the error for the status, logged and counted
/// ([`Counters::socket_errors`], or [`Counters::task_panics`] for a panic).
fn failure(
    outcome: Result<io::Result<()>, String>,
    interface: &str,
    retry_in: Duration,
    counters: &Counters,
) -> Option<String> {
    match outcome {
        Ok(Ok(())) => None,
        Ok(Err(e)) => {
            Counters::inc(&counters.socket_errors);
            tracing::warn!(%interface, error = %e, ?retry_in, "responder failed; retrying");
            Some(e.to_string())
        }
        Err(panic) => {
            Counters::inc(&counters.task_panics);
            tracing::error!(%interface, %panic, ?retry_in, "responder task panicked (a bug: please report this line); restarting it");
            Some(format!("panicked: {panic}"))
        }
    }
}

/// Wait for a frame on `fd` (never resolves when `fd` is `None`). A pending socket error (e.g.
/// `ENETDOWN` when the interface goes down, `ENODEV` when it is deleted) is returned too: it
/// wakes only the error interest, so both are awaited.
async fn recv_frame(fd: Option<&AsyncFd<PacketSocket>>, buf: &mut [u8]) -> io::Result<Received> {
    let Some(fd) = fd else {
        return std::future::pending().await;
    };
    loop {
        tokio::select! {
            guard = fd.readable() => {
                if let Ok(result) = guard?.try_io(|s| s.get_ref().recv(buf)) {
                    return result;
                }
            }
            guard = fd.ready(Interest::ERROR) => {
                let mut guard = guard?;
                match fd.get_ref().recv(buf) {
                    Ok(got) => return Ok(got),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => guard.clear_ready(),
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

fn send(
    fd: Option<&AsyncFd<PacketSocket>>,
    frame: &[u8],
    counters: &Counters,
    counter: &std::sync::atomic::AtomicU64,
) {
    match fd.map(|fd| fd.get_ref().send(frame)) {
        Some(Ok(_)) => Counters::inc(counter),
        Some(Err(e)) => {
            Counters::inc(&counters.send_errors);
            tracing::debug!(error = %e, "send failed");
        }
        None => Counters::inc(&counters.send_errors),
    }
}

/// Open the sockets of one interface and answer until the task is aborted or a socket fails: the
/// executor of this interface's [`IfaceCore`] (frames, the owned set, defence requests and timers
/// in; frames, counters, records and logs out).
async fn serve(
    selected: &Selected,
    mut rx: watch::Receiver<Arc<OwnedHere>>,
    defend_rx: &mut mpsc::Receiver<IpAddr>,
    inner: &Inner,
    status: &Mutex<InterfaceStatus>,
) -> io::Result<()> {
    let info = &selected.info;
    let mac = info
        .mac
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "interface has no MAC"))?;
    let arp = if selected.arp {
        Some(PacketSocket::open(&info.name, Filter::ResponderArp, true)?.into_async()?)
    } else {
        None
    };
    let ndp = if selected.ndp {
        Some(PacketSocket::open(&info.name, Filter::ResponderNdp, true)?.into_async()?)
    } else {
        None
    };
    let mut serving = Serving {
        name: &info.name,
        ifindex: usize::try_from(info.index).unwrap_or(usize::MAX),
        core: IfaceCore::new(IfaceConfig {
            mac,
            link_local: info.link_local.unwrap_or(Ipv6Addr::UNSPECIFIED),
            schedule: inner.config.schedule.clone(),
            probe: inner.config.probe,
        }),
        groups: selected.ndp.then(|| Memberships::new(info.index)),
        joined: BTreeSet::new(),
        want_groups: BTreeSet::new(),
        join_retry: None,
        join_backoff: Backoff::new(inner.config.retry_min, inner.config.retry_max),
        inner,
        status,
    };
    // Held here again once this task's own probe says so (`memory` makes it probe first).
    lock(&inner.held).retain(|(_, iface), _| *iface != info.name);
    {
        let mut st = lock(status);
        st.running = true;
        st.last_error = None;
        // As the owned set is read below: what it probes first.
        st.probing = rx
            .borrow()
            .iter()
            .filter(|(_, o)| o.probe)
            .map(|(ip, _)| *ip)
            .collect();
    }
    rx.mark_changed();
    let (mut arp_buf, mut ndp_buf) = (vec![0u8; 1600], vec![0u8; 1600]);
    loop {
        let next_due = serving.core.poll_timeout().map(Instant::from_std);
        tokio::select! {
            changed = rx.changed() => {
                if changed.is_err() {
                    return Ok(()); // the responder dropped this interface
                }
                let owned = rx.borrow_and_update().clone();
                serving.apply_owned(&owned);
            }
            got = recv_frame(arp.as_ref(), &mut arp_buf) => {
                let got = got?;
                // Replies pass the filter too (conflict detection); count requests only.
                if arp_buf.get(20..22) == Some(&[0, 1]) {
                    Counters::inc(&inner.counters.arp_requests_received);
                }
                serving.frame(Proto::Arp, &got, &arp_buf, &mut rx, arp.as_ref(), ndp.as_ref());
            }
            got = recv_frame(ndp.as_ref(), &mut ndp_buf) => {
                let got = got?;
                // Advertisements pass the filter too (conflict detection); count NSs only.
                if ndp_buf.get(OFFSET_ICMPV6_TYPE) == Some(&TYPE_NEIGHBOR_SOLICITATION) {
                    Counters::inc(&inner.counters.ns_received);
                }
                serving.frame(Proto::Ndp, &got, &ndp_buf, &mut rx, arp.as_ref(), ndp.as_ref());
            }
            Some(ip) = defend_rx.recv() => {
                serving.sync_owned(&mut rx);
                let core = &mut serving.core;
                with_context(inner, |ctx| core.defend(std::time::Instant::now(), ip, ctx));
                serving.flush(arp.as_ref(), ndp.as_ref());
            }
            () = sleep_until(serving.join_retry) => {
                // Joins that failed (e.g. ENOBUFS: socket option memory) are retried on their
                // own, with backoff, not only at the next change of the owned set (issue #10).
                serving.join_backoff.grow();
                serving.sync_groups();
            }
            () = sleep_until(next_due) => {
                // An owned set published since the last look applies first (S5): a withdrawn
                // IP's due announcement, or a probe's verdict on it, must not go out.
                serving.sync_owned(&mut rx);
                let core = &mut serving.core;
                with_context(inner, |ctx| core.handle_timeout(std::time::Instant::now(), ctx));
                serving.flush(arp.as_ref(), ndp.as_ref());
            }
        }
    }
}

/// One interface task's state besides its sockets: the [`IfaceCore`] and the solicited-node
/// groups joined for its owned IPv6 addresses.
struct Serving<'a> {
    name: &'a str,
    ifindex: usize,
    core: IfaceCore,
    groups: Option<Memberships>,
    joined: BTreeSet<Ipv6Addr>,
    want_groups: BTreeSet<Ipv6Addr>,
    join_retry: Option<Instant>,
    join_backoff: Backoff,
    inner: &'a Inner,
    status: &'a Mutex<InterfaceStatus>,
}

impl Serving<'_> {
    /// Gives the core the owned set and joins exactly the solicited-node groups it needs.
    fn apply_owned(&mut self, owned: &OwnedHere) {
        self.want_groups = owned
            .keys()
            .filter_map(|ip| match ip {
                IpAddr::V6(v6) => Some(*v6),
                IpAddr::V4(_) => None,
            })
            .collect();
        self.sync_groups();
        let memory = lock(&self.inner.memory);
        self.core.set_owned(std::time::Instant::now(), owned, |ip| {
            memory.get(&ip).map(|(mac, _)| *mac)
        });
        drop(memory);
        // Set-owned outputs are reports only (which IPs are probed); no frame.
        self.flush(None, None);
    }

    /// Applies an owned set published since the last look, so a frame or a defence request
    /// handled now never sees a withdrawn IP (S5: withdrawn = not answered once
    /// [`Responder::set_owned`] returned).
    fn sync_owned(&mut self, rx: &mut watch::Receiver<Arc<OwnedHere>>) {
        if rx.has_changed().unwrap_or(false) {
            let owned = rx.borrow_and_update().clone();
            self.apply_owned(&owned);
        }
    }

    /// (Re)joins the groups of `want_groups`; schedules a retry with backoff if a join failed.
    fn sync_groups(&mut self) {
        let Some(groups) = self.groups.as_mut() else {
            self.join_retry = None;
            return;
        };
        let failed = sync_groups(
            groups,
            &self.want_groups,
            &mut self.joined,
            &self.inner.counters,
            self.name,
        );
        self.join_retry = failed.then(|| Instant::now() + self.join_backoff.current());
        if !failed {
            self.join_backoff.reset();
        }
    }

    /// One received frame: dropped if it arrived on another interface stacked on this one,
    /// else judged by the core.
    fn frame(
        &mut self,
        proto: Proto,
        got: &Received,
        buf: &[u8],
        rx: &mut watch::Receiver<Arc<OwnedHere>>,
        arp: Option<&AsyncFd<PacketSocket>>,
        ndp: Option<&AsyncFd<PacketSocket>>,
    ) {
        if !got.arrived_on(self.ifindex) {
            self.inner.counters.drop_frame(OTHER_INTERFACE);
            return;
        }
        self.sync_owned(rx);
        let frame = buf.get(..got.len).unwrap_or_default();
        let core = &mut self.core;
        with_context(self.inner, |ctx| {
            core.handle_frame(std::time::Instant::now(), proto, frame, ctx);
        });
        self.flush(arp, ndp);
    }

    /// Carries out the core's outputs. A leased frame is sent only if the lease still allows it
    /// at a clock read immediately before the send.
    fn flush(&mut self, arp: Option<&AsyncFd<PacketSocket>>, ndp: Option<&AsyncFd<PacketSocket>>) {
        let inner = self.inner;
        let counters = &inner.counters;
        let interface = self.name;
        while let Some(out) = self.core.poll_output() {
            match out {
                IfaceOutput::Transmit(t) => {
                    let now = std::time::Instant::now();
                    if t.leased && !lease_allows(inner.lease_at(now), now) {
                        counters.drop_frame(LEASE_EXPIRED);
                        continue;
                    }
                    let fd = match t.proto {
                        Proto::Arp => arp,
                        Proto::Ndp => ndp,
                    };
                    let counter = match t.kind {
                        TransmitKind::ArpReply => &counters.arp_replies_sent,
                        TransmitKind::NeighborAdvertisement => &counters.na_sent,
                        TransmitKind::GratuitousArp => &counters.gratuitous_arp_sent,
                        TransmitKind::UnsolicitedNa => &counters.unsolicited_na_sent,
                        TransmitKind::AddressProbe => &counters.address_probes_sent,
                    };
                    send(fd, &t.frame, counters, counter);
                }
                IfaceOutput::Dropped(label) => counters.drop_frame(label),
                IfaceOutput::Conflict { claim, record } => {
                    // Never logged per frame: the daemon's conflict policy logs at most once per
                    // IP per 10 s.
                    counters.conflict_frame(claim.kind.label());
                    if record {
                        lock(&inner.conflicts).record(&claim, interface, std::time::Instant::now());
                    }
                }
                IfaceOutput::UnprovenClaim(_) => Counters::inc(&counters.unproven_claims),
                IfaceOutput::PeerYield { ip, mac, first, .. } => {
                    if first {
                        let peer = lock(&inner.peers).get(&mac).cloned();
                        tracing::warn!(
                            %interface, %ip, peer = peer.as_deref().unwrap_or("?"), %mac,
                            "a peer speaker announces an IP this node owns, with a valid claim proof: its view differs (it sees this node down or ineligible); not answering for it here for {:?}",
                            super::peers::YIELD_FOR
                        );
                    }
                    Counters::inc(&counters.peer_claim_yields);
                }
                IfaceOutput::ProbeVerdict { ip, verdict } => {
                    probe_verdict(inner, interface, ip, verdict)
                }
                IfaceOutput::Probing(probing) => {
                    note_probes(inner, self.status, interface, &probing)
                }
                IfaceOutput::Defended(ip) => {
                    Counters::inc(&counters.conflict_defenses);
                    tracing::debug!(%interface, %ip, "defended against a conflicting claim");
                }
                IfaceOutput::Announced { ip, n } => {
                    tracing::debug!(%interface, %ip, n, "announced");
                }
            }
        }
    }
}

/// Runs `f` with the [`Context`] read now: the lease, the wall clock, the claim keys, the
/// peer MACs and this host's own MACs.
fn with_context<R>(inner: &Inner, f: impl FnOnce(&Context<'_>) -> R) -> R {
    let keys = lock(&inner.claim_keys);
    let peers = lock(&inner.peers);
    let own = lock(&inner.own);
    let ctx = Context {
        lease: inner.lease_at(std::time::Instant::now()),
        wall_ms: wall_ms(),
        keys: keys.as_ref(),
        peers: &peers,
        own: &own,
    };
    f(&ctx)
}

/// Records a probe's verdict: a free IP is forgotten (announced now by the core); an IP in use
/// is remembered ([`HOLD_MEMORY`]) and held on this interface, said once per MAC.
fn probe_verdict(inner: &Inner, interface: &str, ip: IpAddr, verdict: Verdict) {
    match verdict {
        Verdict::Free => {
            lock(&inner.held).remove(&(ip, interface.to_string()));
            lock(&inner.memory).remove(&ip);
            tracing::info!(%interface, %ip, "probe: no other host has the IP; announcing");
        }
        Verdict::InUse { mac: other } => {
            Counters::inc(&inner.counters.probe_conflicts);
            lock(&inner.memory).insert(ip, (other, std::time::Instant::now()));
            let mut held = lock(&inner.held);
            let key = (ip, interface.to_string());
            let known = held.get(&key).is_some_and(|(mac, _)| *mac == other);
            if !known {
                held.insert(key, (other, std::time::Instant::now()));
            }
            drop(held);
            if !known {
                tracing::warn!(%interface, %ip, mac = %other, "probe: another host uses the IP; not announcing it while it does");
            }
        }
    }
}

/// Joins and leaves solicited-node groups so that exactly the groups of `want` (owned IPv6
/// addresses) are joined: leaves first, then joins. A failed join or leave is logged and counted
/// but never stops the responder. Returns whether some join failed (the caller retries).
fn sync_groups(
    groups: &mut Memberships,
    want: &BTreeSet<Ipv6Addr>,
    joined: &mut BTreeSet<Ipv6Addr>,
    counters: &Counters,
    interface: &str,
) -> bool {
    for gone in joined.difference(want).copied().collect::<Vec<_>>() {
        if let Err(e) = groups.remove(solicited_node_multicast(gone)) {
            Counters::inc(&counters.multicast_errors);
            tracing::warn!(%interface, %gone, error = %e, "leaving the solicited-node group failed");
        }
        joined.remove(&gone);
    }
    let mut failed = false;
    for new in want.difference(joined).copied().collect::<Vec<_>>() {
        match groups.add(solicited_node_multicast(new)) {
            Ok(()) => {
                joined.insert(new);
            }
            Err(e) => {
                failed = true;
                Counters::inc(&counters.multicast_errors);
                tracing::warn!(%interface, %new, error = %e, "joining the solicited-node group failed; retrying");
            }
        }
    }
    failed
}

/// Doubling delay between `min` and `max`.
struct Backoff {
    min: Duration,
    max: Duration,
    current: Duration,
}

impl Backoff {
    fn new(min: Duration, max: Duration) -> Backoff {
        Backoff {
            min,
            max,
            current: min,
        }
    }

    fn current(&self) -> Duration {
        self.current
    }

    fn grow(&mut self) {
        self.current = (self.current * 2).min(self.max);
    }

    fn reset(&mut self) {
        self.current = self.min;
    }
}

async fn sleep_until(due: Option<Instant>) {
    match due {
        Some(t) => tokio::time::sleep_until(t).await,
        None => std::future::pending().await,
    }
}

/// Wall-clock milliseconds since the Unix epoch, read immediately before a proof is made or
/// checked (0 if the clock is before 1970, which verifies nothing).
fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Publishes the IPs being probed or held on `interface` (status, and the held set for
/// [`Responder::held`]).
fn note_probes(
    inner: &Inner,
    status: &Mutex<InterfaceStatus>,
    interface: &str,
    probing: &BTreeSet<IpAddr>,
) {
    lock(status).probing = probing.iter().copied().collect();
    lock(&inner.held).retain(|(ip, iface), _| iface != interface || probing.contains(ip));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link_message(new: bool, index: u32, event: Option<u32>) -> Vec<u8> {
        use netlink_packet_core::{NetlinkHeader, NetlinkMessage, NetlinkPayload};
        use netlink_packet_route::RouteNetlinkMessage;
        use netlink_packet_route::link::{LinkAttribute, LinkEvent, LinkMessage};
        let mut link = LinkMessage::default();
        link.header.index = index;
        link.attributes
            .push(LinkAttribute::IfName(format!("if{index}")));
        link.attributes.push(LinkAttribute::Mtu(1500));
        if let Some(event) = event {
            link.attributes
                .push(LinkAttribute::Event(LinkEvent::from(event)));
        }
        link.attributes.push(LinkAttribute::Carrier(1));
        let payload = if new {
            RouteNetlinkMessage::NewLink(link)
        } else {
            RouteNetlinkMessage::DelLink(link)
        };
        let mut message =
            NetlinkMessage::new(NetlinkHeader::default(), NetlinkPayload::from(payload));
        message.finalize();
        let mut buf = vec![0; message.buffer_len()];
        message.serialize(&mut buf);
        buf
    }

    /// Issue #30 (the VM lab's bond test): a link message carrying `IFLA_EVENT_NOTIFY_PEERS` — a
    /// bond failing over, a VLAN on it, a migrated virtual NIC — names its interface; other
    /// events (`BONDING_FAILOVER` alone: the bond was told not to notify peers), other messages
    /// and junk name none, and a truncated datagram ends the parse without a panic.
    #[test]
    fn peer_notifications_are_read_from_link_messages() {
        let mut datagram = link_message(true, 3, None);
        datagram.extend(link_message(true, 7, Some(IFLA_EVENT_NOTIFY_PEERS)));
        datagram.extend(link_message(true, 8, Some(3))); // IFLA_EVENT_BONDING_FAILOVER
        datagram.extend(link_message(false, 9, Some(IFLA_EVENT_NOTIFY_PEERS)));
        datagram.extend(link_message(true, 12, Some(IFLA_EVENT_NOTIFY_PEERS)));
        assert_eq!(peers_to_notify(&datagram), BTreeSet::from([7, 12]));
        for cut in 0..datagram.len() {
            let _ = peers_to_notify(&datagram[..cut]);
        }
        assert!(peers_to_notify(&[0xff; 64]).is_empty());
        assert!(peers_to_notify(&[]).is_empty());
    }

    /// Issue #27 item 11: a panic inside an interface task's attempt is caught (the task lives
    /// on to retry), counted and reported; an error is counted as a socket error; a clean end
    /// is no failure.
    #[tokio::test(flavor = "current_thread")]
    async fn a_panicking_interface_task_is_caught_counted_and_retried() {
        let counters = Counters::default();
        let d = Duration::from_millis(500);
        let panicked = guarded(async {
            if counters.snapshot().task_panics == 0 {
                panic!("injected");
            }
            Ok(())
        })
        .await;
        assert!(
            matches!(&panicked, Err(m) if m == "injected"),
            "{panicked:?}"
        );
        assert_eq!(
            failure(panicked, "eth0", d, &counters).as_deref(),
            Some("panicked: injected")
        );
        assert_eq!(counters.snapshot().task_panics, 1);
        let failed = guarded(async { Err(io::Error::other("socket gone")) }).await;
        assert_eq!(
            failure(failed, "eth0", d, &counters).as_deref(),
            Some("socket gone")
        );
        assert_eq!(counters.snapshot().socket_errors, 1);
        assert_eq!(
            failure(guarded(async { Ok(()) }).await, "eth0", d, &counters),
            None
        );
    }
}
