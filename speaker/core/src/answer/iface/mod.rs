//! The per-interface responder as a sans-IO state machine (issue #26): what one interface task
//! decides per received frame and per timer — answer or not, the announcement schedule, probes
//! before the first announcement, yields to a peer's proven claim, conflict defence, the lease —
//! with frames and time as inputs and frames to send as outputs. Sockets, multicast groups and
//! counters stay in `ferrolb_speaker::l2::responder`, which drives one [`IfaceCore`] per
//! interface; the cluster simulator drives the same core with virtual time.
//!
//! Shape (after `quinn-proto`/`str0m`): [`IfaceCore::set_owned`], [`IfaceCore::handle_frame`],
//! [`IfaceCore::defend`] and [`IfaceCore::handle_timeout`] take the instant (`now`, monotonic)
//! and, where a frame is built or judged, a [`Context`] (lease, wall clock for claim proofs, claim
//! keys, peer MACs); [`IfaceCore::poll_output`] drains the [`IfaceOutput`]s they produced, in
//! order; [`IfaceCore::poll_timeout`] says when [`IfaceCore::handle_timeout`] is due next.
//!
//! Rules, each from the module that states it: answers (RFC 826, RFC 4861 §7.2.3;
//! [`crate::answer::decide`]); the schedule ([`crate::answer::announce`]); probes (RFC 5227
//! §2.1.1, RFC 4862 §5.4; [`crate::answer::probe`]); yields (DESIGN S15;
//! [`crate::answer::peers`]); the lease (issue #8 F4): nothing that speaks for an owned IP goes
//! out once the lease has expired, and the executor re-checks [`lease_allows`] with a fresh clock
//! immediately before it sends a [`Transmit::leased`] frame.

mod output;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

pub use output::{IfaceOutput, Proto, Transmit, TransmitKind};

use crate::answer::announce::AnnounceSchedule;
use crate::answer::decide::{Claim, ClaimKind, Decision, Inspected, inspect_arp, inspect_ndp};
use crate::answer::peers::{PEER_SETTLE, YIELD_FOR, yields_to};
use crate::answer::probe::{Probe, ProbeSettings, Verdict};
use crate::wire::MacAddr;
use crate::wire::arp::{GratuitousForm, build_arp_request, build_gratuitous_arp};
use crate::wire::claim_proof::{self, ClaimKeys};
use crate::wire::ndp::{append_option, build_dad_probe, build_unsolicited_advertisement};

/// Drop label of frames not answered (and announcements not sent) because the lease expired.
pub const LEASE_EXPIRED: &str = "lease_expired";

/// Whether a frame that speaks for an owned IP may go out at `now` under `lease` (`None` = no
/// lease: always). The executor calls it with a clock read immediately before sending.
pub fn lease_allows(lease: Option<Instant>, now: Instant) -> bool {
    lease.is_none_or(|until| now < until)
}

/// What one interface is: its MAC, its IPv6 link-local address (the source of NAs;
/// `Ipv6Addr::UNSPECIFIED` when it has none) and the timing of announcements and probes.
#[derive(Clone, Debug)]
pub struct IfaceConfig {
    /// The interface's MAC: answers and announcements carry it.
    pub mac: MacAddr,
    /// The IPv6 source of Neighbor Advertisements.
    pub link_local: Ipv6Addr,
    /// Gratuitous ARP / unsolicited NA timing.
    pub schedule: AnnounceSchedule,
    /// Probing of newly assigned IPs before their first announcement.
    pub probe: ProbeSettings,
}

/// An owned IP as the interface is told it: a change of `epoch` restarts its announcement
/// schedule (S4); `probe` = newly assigned, probe before the first announcement here.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OwnedIp {
    /// Announcement epoch.
    pub epoch: u64,
    /// Probe before announcing.
    pub probe: bool,
}

/// The inputs a frame is judged or built with, read by the executor when the input happens.
#[derive(Clone, Copy, Debug)]
pub struct Context<'a> {
    /// Serve owned IPs only before this instant (`None`: no lease).
    pub lease: Option<Instant>,
    /// Wall-clock milliseconds since the Unix epoch: the time of claim proofs made and checked.
    pub wall_ms: u64,
    /// The claim keys: sign announcements, verify peers' claims. `None`: nothing is signed and
    /// no claim makes this interface yield.
    pub keys: Option<&'a ClaimKeys>,
    /// MACs of peer speakers ([`crate::answer::peers::peer_macs`]).
    pub peers: &'a BTreeMap<MacAddr, String>,
    /// MACs of this node's own interfaces (every interface the responder serves). A claim from
    /// one of them is this node's own announcement heard on another of its NICs on the same
    /// segment: no yield, no conflict, no probe answer (review of the IfaceCore extraction,
    /// finding 3: two NICs of one node yielded to each other's signed claims and left the IP
    /// silent).
    pub own: &'a BTreeSet<MacAddr>,
}

#[derive(Clone, Copy, Debug)]
struct Announcing {
    epoch: u64,
    start: Instant,
    sent: usize,
}

/// One interface's responder state. See the module docs.
#[derive(Debug)]
pub struct IfaceCore {
    config: IfaceConfig,
    owned: BTreeMap<IpAddr, OwnedIp>,
    announcing: BTreeMap<IpAddr, Announcing>,
    /// Newly assigned IPs not announced here yet: never answered meanwhile.
    probes: BTreeMap<IpAddr, Probe>,
    /// When each owned IP became owned here.
    owned_since: BTreeMap<IpAddr, Instant>,
    /// IPs yielded to a peer that announced them, until when.
    yields: BTreeMap<IpAddr, Instant>,
    outputs: VecDeque<IfaceOutput>,
}

impl IfaceCore {
    /// An interface that owns nothing yet.
    pub fn new(config: IfaceConfig) -> IfaceCore {
        IfaceCore {
            config,
            owned: BTreeMap::new(),
            announcing: BTreeMap::new(),
            probes: BTreeMap::new(),
            owned_since: BTreeMap::new(),
            yields: BTreeMap::new(),
            outputs: VecDeque::new(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &IfaceConfig {
        &self.config
    }

    /// Replaces the owned set (level-triggered, S5: a withdrawn IP is not answered after this
    /// returns). A new IP, or one whose epoch changed, starts its announcement schedule now —
    /// after a running yield ends — unless it must be probed first: a fresh IP (`probe`) not
    /// announced here yet is probed, starting held when `remembered` names a MAC that answered
    /// an earlier probe (an IP found in use is probed again before it is announced anywhere).
    pub fn set_owned(
        &mut self,
        now: Instant,
        owned: &BTreeMap<IpAddr, OwnedIp>,
        remembered: impl Fn(IpAddr) -> Option<MacAddr>,
    ) {
        self.owned = owned.clone();
        self.announcing.retain(|ip, _| owned.contains_key(ip));
        self.owned_since.retain(|ip, _| owned.contains_key(ip));
        self.yields.retain(|ip, _| owned.contains_key(ip));
        for ip in owned.keys() {
            self.owned_since.entry(*ip).or_insert(now);
        }
        let probed_before: Vec<IpAddr> = self.probes.keys().copied().collect();
        self.probes.retain(|ip, _| owned.contains_key(ip));
        for (ip, o) in owned {
            if self.probes.contains_key(ip) {
                continue; // announced when the probe says the IP is free
            }
            if o.probe && !self.announcing.contains_key(ip) {
                let probe = match remembered(*ip) {
                    Some(mac) => Probe::held(now, mac),
                    None => Probe::new(now),
                };
                self.probes.insert(*ip, probe);
                continue;
            }
            if self.announcing.get(ip).is_none_or(|a| a.epoch != o.epoch) {
                // A re-announcement while yielded to a peer waits for the yield's end.
                let start = self.yields.get(ip).map_or(now, |until| now.max(*until));
                self.announcing.insert(
                    *ip,
                    Announcing {
                        epoch: o.epoch,
                        start,
                        sent: 0,
                    },
                );
            }
        }
        if !self.probes.keys().eq(probed_before.iter()) {
            self.note_probing();
        }
    }

    /// Judges one received frame (`proto` = the socket it came from): answers a request for an
    /// answerable IP, reports claims by other MACs, yields to a peer's proven claim, feeds
    /// answers to running probes. A frame that arrives after the lease expired is not answered
    /// ([`LEASE_EXPIRED`]), but a peer's proven claim still starts a yield and an answer still
    /// reaches a running probe: both only make this node say less, and a lease that lapses for
    /// a moment (the quorum lease) must not make it miss the handover it would otherwise have
    /// yielded to, nor a probe miss the host that holds the IP.
    pub fn handle_frame(&mut self, now: Instant, proto: Proto, frame: &[u8], ctx: &Context<'_>) {
        let leased = lease_allows(ctx.lease, now);
        self.yields.retain(|_, until| *until > now);
        let (owned, probes, yields) = (&self.owned, &self.probes, &self.yields);
        let answerable = |ip: IpAddr| {
            owned.contains_key(&ip) && !probes.contains_key(&ip) && !yielding(yields, ip, now)
        };
        let mut inspected = inspect(&self.config, proto, frame, answerable);
        if !yields.is_empty() && inspected.claim.is_none() {
            // A yielded IP is not answerable, but a claim on it still extends the yield.
            let claimable = |ip: IpAddr| owned.contains_key(&ip) && !probes.contains_key(&ip);
            inspected.claim = inspect(&self.config, proto, frame, claimable).claim;
        }
        inspected.claim = not_own(inspected.claim, ctx);
        self.peer_claim(&mut inspected, now, ctx);
        if leased {
            self.act(inspected, proto);
        } else {
            self.outputs.push_back(IfaceOutput::Dropped(LEASE_EXPIRED));
        }
        if !self.probes.is_empty() {
            let probes = &self.probes;
            let claim = inspect(&self.config, proto, frame, |ip| probes.contains_key(&ip)).claim;
            self.probe_answer(now, not_own(claim, ctx));
        }
    }

    /// One defensive announcement of `ip` (the conflict policy asked for it, issue #10 item 5):
    /// nothing if `ip` is not owned here, is being probed or is yielded to a peer; dropped if the
    /// lease expired.
    pub fn defend(&mut self, now: Instant, ip: IpAddr, ctx: &Context<'_>) {
        if !self.owned.contains_key(&ip)
            || self.probes.contains_key(&ip)
            || yielding(&self.yields, ip, now)
        {
            return;
        }
        if !lease_allows(ctx.lease, now) {
            self.outputs.push_back(IfaceOutput::Dropped(LEASE_EXPIRED));
            return;
        }
        self.announce(ip, ctx);
        self.outputs.push_back(IfaceOutput::Defended(ip));
    }

    /// Advances probes and announcement schedules to `now`. Announcements missed during a stall
    /// collapse into one send; announcements due after the lease expired are dropped (and count
    /// as sent, as the schedule moves on).
    pub fn handle_timeout(&mut self, now: Instant, ctx: &Context<'_>) {
        let valid = lease_allows(ctx.lease, now);
        if !self.probes.is_empty() {
            let mut verdicts = Vec::new();
            for (ip, p) in self.probes.iter_mut() {
                let step = p.step(now, &self.config.probe);
                for _ in 0..step.send {
                    let frame = match ip {
                        IpAddr::V4(v4) => {
                            build_arp_request(self.config.mac, Ipv4Addr::UNSPECIFIED, *v4)
                        }
                        IpAddr::V6(v6) => build_dad_probe(self.config.mac, *v6),
                    };
                    self.outputs.push_back(IfaceOutput::Transmit(Transmit {
                        proto: Proto::of(*ip),
                        frame,
                        kind: TransmitKind::AddressProbe,
                        ip: Some(*ip),
                        leased: false,
                    }));
                }
                if let Some(v) = step.verdict {
                    verdicts.push((*ip, v));
                }
            }
            let changed = !verdicts.is_empty();
            for (ip, verdict) in verdicts {
                if verdict == Verdict::Free {
                    self.probes.remove(&ip);
                    if let Some(o) = self.owned.get(&ip) {
                        self.announcing.insert(
                            ip,
                            Announcing {
                                epoch: o.epoch,
                                start: now,
                                sent: 0,
                            },
                        );
                    }
                }
                self.outputs
                    .push_back(IfaceOutput::ProbeVerdict { ip, verdict });
            }
            if changed {
                self.note_probing();
            }
        }
        let mut due = Vec::new();
        for (ip, a) in self.announcing.iter_mut() {
            if a.start > now || yielding(&self.yields, *ip, now) {
                continue; // yielded to a peer: the schedule restarts when the yield ends
            }
            let Some((sent, na)) = self
                .config
                .schedule
                .catch_up(a.sent, now.saturating_duration_since(a.start))
            else {
                continue;
            };
            a.sent = sent;
            due.push((*ip, sent, na));
        }
        for (ip, n, na) in due {
            if !valid {
                self.outputs.push_back(IfaceOutput::Dropped(LEASE_EXPIRED));
                continue;
            }
            if ip.is_ipv4() || na {
                self.announce(ip, ctx);
            }
            self.outputs.push_back(IfaceOutput::Announced { ip, n });
        }
    }

    /// The next output, in the order produced.
    pub fn poll_output(&mut self) -> Option<IfaceOutput> {
        self.outputs.pop_front()
    }

    /// When [`IfaceCore::handle_timeout`] is due next (`None`: nothing scheduled).
    pub fn poll_timeout(&self) -> Option<Instant> {
        let schedule = &self.config.schedule;
        self.announcing
            .values()
            .filter_map(|a| schedule.offset(a.sent).and_then(|o| a.start.checked_add(o)))
            .chain(self.probes.values().map(|p| p.next_due(&self.config.probe)))
            .min()
    }

    /// Whether a request for `ip` received at `now` would be answered, lease aside: owned here,
    /// not being probed, not yielded to a peer.
    pub fn answers(&self, ip: IpAddr, now: Instant) -> bool {
        self.owned.contains_key(&ip)
            && !self.probes.contains_key(&ip)
            && !yielding(&self.yields, ip, now)
    }

    /// The owned set as last given.
    pub fn owned(&self) -> &BTreeMap<IpAddr, OwnedIp> {
        &self.owned
    }

    /// The owned IPs being probed (or held after a probe was answered).
    pub fn probing(&self) -> BTreeSet<IpAddr> {
        self.probes.keys().copied().collect()
    }

    /// Until when `ip` is yielded to a peer, if it is at `now`.
    pub fn yielded_until(&self, ip: IpAddr, now: Instant) -> Option<Instant> {
        self.yields.get(&ip).copied().filter(|until| now < *until)
    }

    fn note_probing(&mut self) {
        self.outputs.push_back(IfaceOutput::Probing(self.probing()));
    }

    /// The announcement of `ip` (a gratuitous ARP in both forms, or an unsolicited NA), signed
    /// when the claim keys are set.
    fn announce(&mut self, ip: IpAddr, ctx: &Context<'_>) {
        let mac = self.config.mac;
        let frames: Vec<(Vec<u8>, TransmitKind)> = match ip {
            IpAddr::V4(v4) => [GratuitousForm::Request, GratuitousForm::Reply]
                .into_iter()
                .map(|form| {
                    let mut frame = build_gratuitous_arp(mac, v4, form);
                    if let Some(keys) = ctx.keys {
                        claim_proof::append_to_arp(&mut frame, &keys.sign(mac, ip, ctx.wall_ms));
                    }
                    (frame, TransmitKind::GratuitousArp)
                })
                .collect(),
            IpAddr::V6(v6) => {
                let mut frame = build_unsolicited_advertisement(mac, self.config.link_local, v6);
                if let Some(keys) = ctx.keys {
                    let proof = keys.sign(mac, ip, ctx.wall_ms);
                    append_option(&mut frame, &claim_proof::ndp_option(&proof));
                }
                vec![(frame, TransmitKind::UnsolicitedNa)]
            }
        };
        for (frame, kind) in frames {
            self.outputs.push_back(IfaceOutput::Transmit(Transmit {
                proto: Proto::of(ip),
                frame,
                kind,
                ip: Some(ip),
                leased: true,
            }));
        }
    }

    /// The peer-claim rule ([`crate::answer::peers`], DESIGN S15) applied to a frame's claim. A
    /// claim whose proof verifies under the claim keys and is fresh comes from a speaker of this
    /// cluster: on an IP owned here for at least [`PEER_SETTLE`] it starts or extends a yield of
    /// [`YIELD_FOR`] and restarts the IP's schedule at its end, and is left for the conflict
    /// report like any claim. A proven claim within the settle time, or an unproven one from a
    /// peer's MAC within it, is a handover frame: consumed, no sighting. Any other claim without
    /// a valid proof — a forged frame with a peer's MAC, a replay older than
    /// [`claim_proof::MAX_CLOCK_SKEW`], a speaker with another key — never yields: it is counted
    /// and reported as any host's conflict.
    ///
    /// **A claim signed before this node began to own the IP is no successor's** (issue #32 G4,
    /// I-auth): it is handled as unproven. A successor claims an IP that this node already
    /// owns, so its proof is signed after `owned_since`; a proof signed earlier is a replay of
    /// an earlier holder's announcement — e.g. the interim owner's, captured on the LAN and
    /// replayed, within the proof's 2 s clock-skew allowance, to the owner that failed back. The
    /// comparison is on this node's wall clock: a successor whose clock runs behind ours by more
    /// than we have owned the IP is not yielded to, and the hand-over waits for the membership
    /// (as it does for any unproven claim).
    fn peer_claim(&mut self, inspected: &mut Inspected, now: Instant, ctx: &Context<'_>) {
        let Some(claim) = inspected.claim else {
            return;
        };
        if matches!(claim.kind, ClaimKind::ArpProbe | ClaimKind::DadProbe) {
            return;
        }
        let ip = claim.ip;
        let peer = ctx.peers.contains_key(&claim.mac);
        let owned_for = self.owned_since.get(&ip).map_or(Duration::ZERO, |since| {
            now.saturating_duration_since(*since)
        });
        let owned_since_ms = ctx
            .wall_ms
            .saturating_sub(u64::try_from(owned_for.as_millis()).unwrap_or(u64::MAX));
        let proven = match (claim.proof, ctx.keys) {
            (Some(proof), Some(keys)) => keys.verify(&proof, claim.mac, ip, ctx.wall_ms).is_ok(),
            _ => false,
        };
        let signed_before_ours = claim.proof.is_some_and(|p| p.at_ms <= owned_since_ms);
        let settled = owned_for >= PEER_SETTLE;
        if proven && signed_before_ours && settled {
            // An earlier holder's announcement, replayed: no yield; reported and defended as
            // any unproven claim. (Within the settle time it is a hand-over frame, below.)
            self.outputs.push_back(IfaceOutput::UnprovenClaim(claim));
            return;
        }
        if !proven {
            if peer || claim.proof.is_some() {
                self.outputs.push_back(IfaceOutput::UnprovenClaim(claim));
            }
            if peer && !settled {
                inspected.claim = None;
            }
            return;
        }
        if yields_to(proven, owned_for) {
            let until = now + YIELD_FOR;
            let first = !yielding(&self.yields, ip, now);
            self.yields.insert(ip, until);
            if let Some(a) = self.announcing.get_mut(&ip) {
                a.start = until;
                a.sent = 0;
            }
            self.outputs.push_back(IfaceOutput::PeerYield {
                ip,
                mac: claim.mac,
                until,
                first,
            });
            return;
        }
        inspected.claim = None;
    }

    /// Reports the frame's claim and answers, or counts, the frame.
    fn act(&mut self, inspected: Inspected, proto: Proto) {
        if let Some(claim) = inspected.claim {
            // A probe (ARP probe, DAD NS) for an owned IP is answered, which is the RFC 5227 /
            // RFC 4862 defence, and counted — but not a conflict to react to: during an election
            // handover the new owner probes the IP before the old one has withdrawn, and a
            // defensive announcement would turn the clients back to the old owner.
            let record = !matches!(claim.kind, ClaimKind::ArpProbe | ClaimKind::DadProbe);
            self.outputs
                .push_back(IfaceOutput::Conflict { claim, record });
        }
        let out = match inspected.decision {
            Decision::Answer(frame) => IfaceOutput::Transmit(Transmit {
                proto,
                frame,
                kind: match proto {
                    Proto::Arp => TransmitKind::ArpReply,
                    Proto::Ndp => TransmitKind::NeighborAdvertisement,
                },
                ip: None,
                leased: true,
            }),
            Decision::Ignore(reason) => IfaceOutput::Dropped(reason.label()),
            Decision::Drop(reason) => IfaceOutput::Dropped(reason),
        };
        self.outputs.push_back(out);
    }

    /// Feeds an answer to a probe (a claim on an IP being probed) into its [`Probe`]. Probes of
    /// other hosts are not answers ([`crate::answer::probe`]: two speakers probing at once must
    /// not both hold back).
    fn probe_answer(&mut self, now: Instant, claim: Option<crate::answer::decide::Claim>) {
        let Some(claim) = claim else { return };
        if matches!(claim.kind, ClaimKind::ArpProbe | ClaimKind::DadProbe) {
            return;
        }
        if let Some(p) = self.probes.get_mut(&claim.ip) {
            self.outputs.push_back(IfaceOutput::Conflict {
                claim,
                record: false,
            });
            p.claim(now, claim.mac);
        }
    }
}

/// Whether `ip` is yielded to a peer at `now`.
fn yielding(yields: &BTreeMap<IpAddr, Instant>, ip: IpAddr, now: Instant) -> bool {
    yields.get(&ip).is_some_and(|until| now < *until)
}

/// [`inspect_arp`] or [`inspect_ndp`] with `owned` over [`IpAddr`].
/// `claim`, unless it comes from one of this node's own MACs ([`Context::own`]).
fn not_own(claim: Option<Claim>, ctx: &Context<'_>) -> Option<Claim> {
    claim.filter(|c| !ctx.own.contains(&c.mac))
}

fn inspect(
    config: &IfaceConfig,
    proto: Proto,
    frame: &[u8],
    owned: impl Fn(IpAddr) -> bool,
) -> Inspected {
    match proto {
        Proto::Arp => inspect_arp(frame, config.mac, |ip: Ipv4Addr| owned(IpAddr::V4(ip))),
        Proto::Ndp => inspect_ndp(frame, config.mac, config.link_local, |ip: Ipv6Addr| {
            owned(IpAddr::V6(ip))
        }),
    }
}
