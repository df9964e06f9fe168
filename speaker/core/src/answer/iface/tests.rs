//! Replay tests of [`IfaceCore`]: frames and instants in, outputs checked.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, Instant};

use super::*;
use crate::answer::decide::ClaimKind;
use crate::membership::key::KeyRing;
use crate::wire::arp::{build_arp_request, build_gratuitous_arp, parse_arp};
use crate::wire::ndp::{
    NeighborSolicitation, build_neighbor_solicitation, multicast_mac, solicited_node_multicast,
};

const MAC: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x01);
const PEER: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x02);
const CLIENT: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x99);
const WALL: u64 = 1_790_000_000_000;
const VIP: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 10));
const VIP6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x10));

/// Claim keys from a key ring of one 32-byte key derived from `seed`.
fn ring_keys(seed: u8) -> ClaimKeys {
    let hex: String = (0..32u8)
        .map(|i| format!("{:02x}", i.wrapping_mul(37) ^ seed))
        .collect();
    ClaimKeys::from_ring(&KeyRing::parse(hex.as_bytes()).unwrap())
}

fn keys() -> ClaimKeys {
    ring_keys(11)
}

fn other_keys() -> ClaimKeys {
    ring_keys(22)
}

fn core(probe: u32) -> IfaceCore {
    IfaceCore::new(IfaceConfig {
        mac: MAC,
        link_local: Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1),
        schedule: AnnounceSchedule::default(),
        probe: ProbeSettings {
            count: probe,
            ..ProbeSettings::default()
        },
    })
}

fn owned(ips: &[(IpAddr, u64, bool)]) -> BTreeMap<IpAddr, OwnedIp> {
    ips.iter()
        .map(|(ip, epoch, probe)| {
            (
                *ip,
                OwnedIp {
                    epoch: *epoch,
                    probe: *probe,
                },
            )
        })
        .collect()
}

struct Env {
    keys: ClaimKeys,
    peers: BTreeMap<MacAddr, String>,
    own: BTreeSet<MacAddr>,
    lease: Option<Instant>,
}

impl Env {
    fn new() -> Env {
        Env {
            keys: keys(),
            peers: BTreeMap::from([(PEER, "node-b".to_string())]),
            own: BTreeSet::new(),
            lease: None,
        }
    }
    fn ctx(&self, wall_ms: u64) -> Context<'_> {
        Context {
            lease: self.lease,
            wall_ms,
            keys: Some(&self.keys),
            peers: &self.peers,
            own: &self.own,
        }
    }
}

fn drain(c: &mut IfaceCore) -> Vec<IfaceOutput> {
    std::iter::from_fn(|| c.poll_output()).collect()
}

fn sent(out: &[IfaceOutput], kind: TransmitKind) -> usize {
    out.iter()
        .filter(|o| matches!(o, IfaceOutput::Transmit(t) if t.kind == kind))
        .count()
}

fn request(ip: IpAddr) -> Vec<u8> {
    let IpAddr::V4(v4) = ip else { unreachable!() };
    build_arp_request(CLIENT, Ipv4Addr::new(192, 0, 2, 99), v4)
}

fn solicitation(ip: Ipv6Addr) -> Vec<u8> {
    build_neighbor_solicitation(&NeighborSolicitation {
        eth_dst: multicast_mac(solicited_node_multicast(ip)),
        eth_src: CLIENT,
        ip_src: Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 0x99),
        ip_dst: solicited_node_multicast(ip),
        target: ip,
        source_link_layer: Some(CLIENT),
    })
}

/// A gratuitous ARP for `ip` at `mac`, signed with `keys` at `at_ms` if given.
fn claim(mac: MacAddr, ip: IpAddr, keys: Option<(&ClaimKeys, u64)>) -> Vec<u8> {
    let IpAddr::V4(v4) = ip else { unreachable!() };
    let mut frame = build_gratuitous_arp(mac, v4, GratuitousForm::Request);
    if let Some((k, at)) = keys {
        claim_proof::append_to_arp(&mut frame, &k.sign(mac, ip, at));
    }
    frame
}

#[test]
fn answers_owned_ips_only_and_stops_at_withdrawal() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    c.handle_frame(t0, Proto::Arp, &request(VIP), &env.ctx(WALL));
    let out = drain(&mut c);
    assert_eq!(sent(&out, TransmitKind::ArpReply), 1, "{out:?}");
    let reply = out
        .iter()
        .find_map(|o| match o {
            IfaceOutput::Transmit(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap();
    assert!(reply.leased);
    assert_eq!(parse_arp(&reply.frame).unwrap().sender_mac, MAC);
    c.handle_frame(
        t0,
        Proto::Arp,
        &request(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 11))),
        &env.ctx(WALL),
    );
    assert_eq!(drain(&mut c), vec![IfaceOutput::Dropped("not_owned")]);
    // S5: withdrawn, never answered again.
    c.set_owned(t0, &BTreeMap::new(), |_| None);
    c.handle_frame(t0, Proto::Arp, &request(VIP), &env.ctx(WALL));
    assert_eq!(drain(&mut c), vec![IfaceOutput::Dropped("not_owned")]);
    assert!(!c.answers(VIP, t0));
}

#[test]
fn answers_neighbor_solicitations_for_owned_ipv6() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP6, 1, false)]), |_| None);
    let IpAddr::V6(v6) = VIP6 else { unreachable!() };
    c.handle_frame(t0, Proto::Ndp, &solicitation(v6), &env.ctx(WALL));
    assert_eq!(sent(&drain(&mut c), TransmitKind::NeighborAdvertisement), 1);
}

#[test]
fn an_expired_lease_answers_and_announces_nothing() {
    let mut env = Env::new();
    let t0 = Instant::now();
    env.lease = Some(t0 + Duration::from_millis(100));
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    c.handle_timeout(t0, &env.ctx(WALL));
    assert_eq!(sent(&drain(&mut c), TransmitKind::GratuitousArp), 2);
    let late = t0 + Duration::from_millis(100);
    assert!(!lease_allows(env.lease, late));
    c.handle_frame(late, Proto::Arp, &request(VIP), &env.ctx(WALL));
    assert_eq!(drain(&mut c), vec![IfaceOutput::Dropped(LEASE_EXPIRED)]);
    let due = c.poll_timeout().unwrap();
    c.handle_timeout(due.max(late), &env.ctx(WALL));
    let out = drain(&mut c);
    assert_eq!(sent(&out, TransmitKind::GratuitousArp), 0, "{out:?}");
    assert!(out.contains(&IfaceOutput::Dropped(LEASE_EXPIRED)));
    c.defend(late, VIP, &env.ctx(WALL));
    assert_eq!(drain(&mut c), vec![IfaceOutput::Dropped(LEASE_EXPIRED)]);
}

#[test]
fn a_gain_announces_on_the_schedule_signed_and_a_stall_collapses_missed_sends() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    assert_eq!(c.poll_timeout(), Some(t0));
    c.handle_timeout(t0, &env.ctx(WALL));
    let out = drain(&mut c);
    let frames: Vec<&Transmit> = out
        .iter()
        .filter_map(|o| match o {
            IfaceOutput::Transmit(t) => Some(t),
            _ => None,
        })
        .collect();
    assert_eq!(frames.len(), 2, "request and reply forms");
    for t in &frames {
        assert_eq!(t.ip, Some(VIP));
        let proof = claim_proof::from_arp(&t.frame).expect("signed");
        assert!(env.keys.verify(&proof, MAC, VIP, WALL).is_ok());
    }
    // Ten seconds of stall: every missed announcement goes out as one.
    let late = t0 + Duration::from_secs(10);
    c.handle_timeout(late, &env.ctx(WALL));
    assert_eq!(sent(&drain(&mut c), TransmitKind::GratuitousArp), 2);
    // A new epoch restarts the schedule (S4).
    c.set_owned(late, &owned(&[(VIP, 2, false)]), |_| None);
    assert_eq!(c.poll_timeout(), Some(late));
}

#[test]
fn a_fresh_ip_is_probed_unanswered_then_announced_when_free() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(3);
    c.set_owned(t0, &owned(&[(VIP, 1, true)]), |_| None);
    assert_eq!(drain(&mut c), vec![IfaceOutput::Probing([VIP].into())]);
    assert!(!c.answers(VIP, t0));
    c.handle_frame(t0, Proto::Arp, &request(VIP), &env.ctx(WALL));
    assert_eq!(sent(&drain(&mut c), TransmitKind::ArpReply), 0);
    let mut probes = 0;
    let mut t = t0;
    while let Some(due) = c.poll_timeout() {
        t = due;
        c.handle_timeout(t, &env.ctx(WALL));
        let out = drain(&mut c);
        probes += sent(&out, TransmitKind::AddressProbe);
        if out.contains(&IfaceOutput::ProbeVerdict {
            ip: VIP,
            verdict: Verdict::Free,
        }) {
            assert!(out.contains(&IfaceOutput::Probing(BTreeSet::new())));
            assert_eq!(
                sent(&out, TransmitKind::GratuitousArp),
                2,
                "announced once free"
            );
            break;
        }
        assert!(t < t0 + Duration::from_secs(5), "the probe ends");
    }
    assert_eq!(probes, 3);
    assert!(c.answers(VIP, t));
}

#[test]
fn a_probe_answered_by_another_host_holds_the_ip() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(3);
    c.set_owned(t0, &owned(&[(VIP, 1, true)]), |_| None);
    c.handle_timeout(t0, &env.ctx(WALL));
    drain(&mut c);
    // Another host keeps saying it has the IP.
    let mut t = t0;
    let mut held = false;
    for _ in 0..40 {
        t += Duration::from_millis(100);
        c.handle_frame(t, Proto::Arp, &claim(CLIENT, VIP, None), &env.ctx(WALL));
        c.handle_timeout(t, &env.ctx(WALL));
        let out = drain(&mut c);
        assert_eq!(sent(&out, TransmitKind::GratuitousArp), 0);
        held |= out.contains(&IfaceOutput::ProbeVerdict {
            ip: VIP,
            verdict: Verdict::InUse { mac: CLIENT },
        });
    }
    assert!(held);
    assert!(!c.answers(VIP, t));
    // Remembered: probed again, starting held, after a re-assignment.
    let mut c = core(3);
    c.set_owned(t, &owned(&[(VIP, 1, true)]), |_| Some(CLIENT));
    assert!(c.probing().contains(&VIP));
}

/// A proven peer claim that arrives while the lease has lapsed for a moment (the quorum lease,
/// issue #32 G2) still starts the yield: when the lease comes back the node does not answer
/// next to the peer it would have yielded to (review of the IfaceCore extraction, finding 4).
#[test]
fn a_proven_claim_during_a_lapsed_lease_still_yields() {
    let mut env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    c.handle_timeout(t0, &env.ctx(WALL));
    drain(&mut c);
    let t = t0 + PEER_SETTLE;
    env.lease = Some(t);
    c.handle_frame(
        t,
        Proto::Arp,
        &claim(PEER, VIP, Some((&env.keys, WALL))),
        &env.ctx(WALL),
    );
    let out = drain(&mut c);
    assert!(
        out.iter()
            .any(|o| matches!(o, IfaceOutput::PeerYield { ip, .. } if *ip == VIP)),
        "{out:?}"
    );
    assert!(
        out.contains(&IfaceOutput::Dropped(LEASE_EXPIRED)),
        "{out:?}"
    );
    env.lease = None;
    assert!(!c.answers(VIP, t + Duration::from_millis(1)), "yielding");
}

#[test]
fn a_settled_owner_yields_to_a_proven_peer_claim_only() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    c.handle_timeout(t0, &env.ctx(WALL));
    drain(&mut c);
    let t = t0 + PEER_SETTLE;
    // Unproven with a peer's MAC (a forged frame from a keyless host): no yield.
    c.handle_frame(t, Proto::Arp, &claim(PEER, VIP, None), &env.ctx(WALL));
    let out = drain(&mut c);
    assert!(
        out.iter()
            .any(|o| matches!(o, IfaceOutput::UnprovenClaim(_))),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, IfaceOutput::Conflict { record: true, .. }))
    );
    assert!(c.answers(VIP, t));
    // Signed with another key, or replayed beyond the clock skew: no yield either.
    let other = other_keys();
    c.handle_frame(
        t,
        Proto::Arp,
        &claim(PEER, VIP, Some((&other, WALL))),
        &env.ctx(WALL),
    );
    let stale = WALL - claim_proof::MAX_CLOCK_SKEW - 1;
    c.handle_frame(
        t,
        Proto::Arp,
        &claim(PEER, VIP, Some((&env.keys, stale))),
        &env.ctx(WALL),
    );
    assert!(
        !drain(&mut c)
            .iter()
            .any(|o| matches!(o, IfaceOutput::PeerYield { .. }))
    );
    assert!(c.answers(VIP, t));
    // Proven: yield for YIELD_FOR, then announce again from the start of the schedule.
    c.handle_frame(
        t,
        Proto::Arp,
        &claim(PEER, VIP, Some((&env.keys, WALL))),
        &env.ctx(WALL),
    );
    let out = drain(&mut c);
    assert!(
        out.contains(&IfaceOutput::PeerYield {
            ip: VIP,
            mac: PEER,
            until: t + YIELD_FOR,
            first: true
        }),
        "{out:?}"
    );
    assert!(!c.answers(VIP, t));
    c.handle_frame(t, Proto::Arp, &request(VIP), &env.ctx(WALL));
    assert_eq!(sent(&drain(&mut c), TransmitKind::ArpReply), 0);
    c.defend(t, VIP, &env.ctx(WALL));
    assert!(drain(&mut c).is_empty(), "no defence while yielded");
    assert_eq!(c.poll_timeout(), Some(t + YIELD_FOR));
    c.handle_timeout(t + YIELD_FOR, &env.ctx(WALL));
    assert_eq!(sent(&drain(&mut c), TransmitKind::GratuitousArp), 2);
    assert!(c.answers(VIP, t + YIELD_FOR));
}

#[test]
fn a_new_owner_ignores_handover_frames_of_peers() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    drain(&mut c);
    // The old owner's announcements within PEER_SETTLE: consumed, no conflict, no yield.
    c.handle_frame(
        t0,
        Proto::Arp,
        &claim(PEER, VIP, Some((&env.keys, WALL))),
        &env.ctx(WALL),
    );
    let out = drain(&mut c);
    assert!(
        !out.iter().any(|o| matches!(
            o,
            IfaceOutput::Conflict { .. } | IfaceOutput::PeerYield { .. }
        )),
        "{out:?}"
    );
    assert!(c.answers(VIP, t0));
}

#[test]
fn probes_of_other_hosts_are_answered_but_not_recorded() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    drain(&mut c);
    let IpAddr::V4(v4) = VIP else { unreachable!() };
    c.handle_frame(
        t0,
        Proto::Arp,
        &build_arp_request(CLIENT, Ipv4Addr::UNSPECIFIED, v4),
        &env.ctx(WALL),
    );
    let out = drain(&mut c);
    assert!(out.iter().any(|o| matches!(o, IfaceOutput::Conflict { claim, record: false } if claim.kind == ClaimKind::ArpProbe)), "{out:?}");
    assert_eq!(sent(&out, TransmitKind::ArpReply), 1);
}

#[test]
fn defend_sends_both_forms_once() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    drain(&mut c);
    c.defend(t0, VIP, &env.ctx(WALL));
    let out = drain(&mut c);
    assert_eq!(sent(&out, TransmitKind::GratuitousArp), 2);
    assert_eq!(out.last(), Some(&IfaceOutput::Defended(VIP)));
    c.defend(t0, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 11)), &env.ctx(WALL));
    assert!(drain(&mut c).is_empty());
}

#[test]
fn malformed_frames_are_dropped_with_their_reason() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    for frame in [&[][..], &[0u8; 10][..], &[0xffu8; 60][..]] {
        c.handle_frame(t0, Proto::Arp, frame, &env.ctx(WALL));
        c.handle_frame(t0, Proto::Ndp, frame, &env.ctx(WALL));
    }
    let out = drain(&mut c);
    assert_eq!(out.len(), 6);
    assert!(
        out.iter().all(|o| matches!(o, IfaceOutput::Dropped(_))),
        "{out:?}"
    );
}

/// Two NICs of one node on one segment hear each other's signed announcements: a claim from a
/// MAC of this node ([`Context::own`]) neither yields, nor is a conflict, nor answers a probe;
/// the same frame from a peer's MAC does yield (review finding 3).
#[test]
fn a_claim_from_another_nic_of_this_node_is_not_a_peer_claim() {
    const SIBLING: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x03);
    let mut env = Env::new();
    env.own = BTreeSet::from([MAC, SIBLING]);
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    c.handle_timeout(t0, &env.ctx(WALL));
    drain(&mut c);
    let t = t0 + PEER_SETTLE;
    let signed = claim(SIBLING, VIP, Some((&env.keys, WALL)));
    c.handle_frame(t, Proto::Arp, &signed, &env.ctx(WALL));
    let out = drain(&mut c);
    assert!(
        !out.iter().any(|o| matches!(
            o,
            IfaceOutput::PeerYield { .. }
                | IfaceOutput::Conflict { .. }
                | IfaceOutput::UnprovenClaim(_)
        )),
        "{out:?}"
    );
    assert!(c.answers(VIP, t));
    // A fresh IP probed on this NIC is not held by the sibling NIC's announcement either.
    let mut fresh = core(2);
    fresh.set_owned(t0, &owned(&[(VIP, 1, true)]), |_| None);
    fresh.handle_timeout(t0, &env.ctx(WALL));
    drain(&mut fresh);
    fresh.handle_frame(t0, Proto::Arp, &signed, &env.ctx(WALL));
    assert!(
        !drain(&mut fresh)
            .iter()
            .any(|o| matches!(o, IfaceOutput::ProbeVerdict { .. })),
    );
    // The control: the same signed frame from a MAC that is not ours yields.
    env.own = BTreeSet::from([MAC]);
    c.handle_frame(t, Proto::Arp, &signed, &env.ctx(WALL));
    assert!(
        drain(&mut c)
            .iter()
            .any(|o| matches!(o, IfaceOutput::PeerYield { .. }))
    );
    assert!(!c.answers(VIP, t));
}

/// Issue #32 G4 / I-auth: a claim whose proof verifies but was signed before this node began to
/// own the IP — an earlier holder's announcement replayed within the 2 s clock-skew allowance,
/// e.g. the interim owner's after a failback — never yields: counted, reported and defended as
/// an unproven claim. One signed after the ownership began still yields.
#[test]
fn a_proven_claim_signed_before_our_ownership_began_never_yields() {
    let env = Env::new();
    let t0 = Instant::now();
    let mut c = core(0);
    c.set_owned(t0, &owned(&[(VIP, 1, false)]), |_| None);
    c.handle_timeout(t0, &env.ctx(WALL - 1_000));
    drain(&mut c);
    // Owned for 1 s at wall time WALL: ownership began at WALL - 1000.
    let t = t0 + Duration::from_secs(1);
    let replayed = WALL - 1_500;
    assert!(
        WALL - replayed < claim_proof::MAX_CLOCK_SKEW,
        "within the skew"
    );
    c.handle_frame(
        t,
        Proto::Arp,
        &claim(PEER, VIP, Some((&env.keys, replayed))),
        &env.ctx(WALL),
    );
    let out = drain(&mut c);
    assert!(
        !out.iter()
            .any(|o| matches!(o, IfaceOutput::PeerYield { .. })),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, IfaceOutput::UnprovenClaim(_))),
        "{out:?}"
    );
    assert!(
        out.iter()
            .any(|o| matches!(o, IfaceOutput::Conflict { record: true, .. })),
        "{out:?}"
    );
    assert!(c.answers(VIP, t));
    // A successor's claim, signed after our ownership began: yields.
    c.handle_frame(
        t,
        Proto::Arp,
        &claim(PEER, VIP, Some((&env.keys, WALL - 500))),
        &env.ctx(WALL),
    );
    assert!(
        drain(&mut c)
            .iter()
            .any(|o| matches!(o, IfaceOutput::PeerYield { .. }))
    );
    assert!(!c.answers(VIP, t));
}
