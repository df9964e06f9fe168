//! Membership over real UDP sockets on loopback (127.0.0.1, ephemeral ports): convergence,
//! crash detection, explicit leave, restart, wrong keys, forged gossip, garbage and replays, a
//! key holder speaking for another member.
//! Timeouts are only failure guards; nothing asserts wall-clock speed.
#![allow(clippy::unwrap_used)]

mod membership_common;
use std::net::SocketAddr;
use std::time::Duration;

use ferrolb_speaker::membership::envelope::Sealer;
use ferrolb_speaker::membership::{
    KeyRing, Membership, MembershipConfig, MembershipEvent, MembershipSettings, SpeakerId,
};
use rand::SeedableRng;
use rand::rngs::StdRng;
use tokio::net::UdpSocket;

use membership_common::{GUARD, drain, names, ring, start_at, wait_for_set};

/// Relaxed timings for tests whose subject is not failure detection: on a loaded test machine a
/// stalled member must not be declared down by accident.
fn calm() -> MembershipConfig {
    MembershipConfig {
        probe_period: Duration::from_millis(300),
        probe_rtt: Duration::from_millis(150),
        suspect_timeout: Duration::from_secs(60),
        ..MembershipConfig::default()
    }
}

async fn start(name: &str, keys: &KeyRing, config: &MembershipConfig) -> Membership {
    start_at(name, SocketAddr::from(([127, 0, 0, 1], 0)), keys, config).await
}

async fn cluster(n: usize, keys: &KeyRing, config: &MembershipConfig) -> Vec<Membership> {
    let mut members = Vec::new();
    for i in 0..n {
        members.push(start(&format!("node-{i}"), keys, config).await);
    }
    let addrs: Vec<SocketAddr> = members.iter().map(Membership::local_addr).collect();
    for m in &members {
        m.set_peers(addrs.iter().copied());
    }
    members
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_five_members_converge() {
    let members = cluster(5, &ring(1), &MembershipConfig::default()).await;
    let all = names(&["node-0", "node-1", "node-2", "node-3", "node-4"]);
    for m in &members {
        wait_for_set(m, &all).await;
        assert_eq!(m.counters().members, 5);
        assert!(m.counters().datagrams_in > 0 && m.counters().datagrams_out > 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_crashed_member_is_detected() {
    let mut members = cluster(4, &ring(1), &MembershipConfig::default()).await;
    let all = names(&["node-0", "node-1", "node-2", "node-3"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let mut events: Vec<_> = members.iter().map(Membership::events).collect();
    let victim = members.remove(3);
    victim.abort().await;
    let rest = names(&["node-0", "node-1", "node-2"]);
    for (m, rx) in members.iter().zip(events.iter_mut()) {
        wait_for_set(m, &rest).await;
        assert!(drain(rx).contains(&MembershipEvent::Down("node-3".into())));
        assert!(m.counters().transitions_down >= 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_explicit_leave_is_observed_without_failure_detection() {
    // Suspicion lasts 60 s: within the 20 s guard only the leave message can remove node-3.
    let mut members = cluster(4, &ring(1), &calm()).await;
    let all = names(&["node-0", "node-1", "node-2", "node-3"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let leaver = members.remove(3);
    let mut own = leaver.members();
    leaver.leave(Duration::from_secs(2)).await;
    assert!(
        own.borrow_and_update().is_empty(),
        "leaver publishes an empty set"
    );
    let rest = names(&["node-0", "node-1", "node-2"]);
    for m in &members {
        wait_for_set(m, &rest).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_restarted_member_rejoins_with_a_new_generation() {
    let keys = ring(1);
    let config = MembershipConfig::default();
    let mut members = cluster(3, &keys, &config).await;
    let all = names(&["node-0", "node-1", "node-2"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let old = members.remove(2);
    let (addr, old_generation) = (old.local_addr(), old.identity().generation);
    old.abort().await;
    for m in &members {
        wait_for_set(m, &names(&["node-0", "node-1"])).await;
    }
    let peers: Vec<SocketAddr> = members.iter().map(Membership::local_addr).collect();
    let new = start_at("node-2", addr, &keys, &config).await;
    assert!(new.identity().generation > old_generation);
    new.set_peers(peers);
    members.push(new);
    for m in &members {
        wait_for_set(m, &all).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_fast_restart_is_seen_as_a_restart_not_a_failure() {
    let keys = ring(1);
    let config = calm();
    let mut members = cluster(3, &keys, &config).await;
    let all = names(&["node-0", "node-1", "node-2"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let mut events: Vec<_> = members.iter().map(Membership::events).collect();
    let old = members.remove(2);
    let addr = old.local_addr();
    old.abort().await;
    let new = start_at("node-2", addr, &keys, &config).await;
    new.set_peers(members.iter().map(Membership::local_addr));
    wait_for_set(&new, &all).await;
    for (m, rx) in members.iter().zip(events.iter_mut()) {
        let mut seen = Vec::new();
        let restarted = MembershipEvent::Restarted("node-2".into());
        let got = tokio::time::timeout(GUARD, async {
            loop {
                let e = rx.recv().await.unwrap();
                seen.push(e.clone());
                if e == restarted {
                    break;
                }
            }
        })
        .await;
        assert!(got.is_ok(), "{seen:?}");
        assert!(
            !seen.iter().any(|e| matches!(e, MembershipEvent::Down(_))),
            "{seen:?}"
        );
        assert_eq!(*m.members().borrow(), all);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_member_with_the_wrong_key_is_never_admitted() {
    let config = calm();
    let good = cluster(3, &ring(1), &config).await;
    let all = names(&["node-0", "node-1", "node-2"]);
    for m in &good {
        wait_for_set(m, &all).await;
    }
    let mut events: Vec<_> = good.iter().map(Membership::events).collect();
    let intruder = start("intruder", &ring(2), &config).await;
    let mut everyone: Vec<SocketAddr> = good.iter().map(Membership::local_addr).collect();
    everyone.push(intruder.local_addr());
    intruder.set_peers(everyone.iter().copied());
    for m in &good {
        m.set_peers(everyone.iter().copied());
    }
    // Wait until every good member has refused at least two of the intruder's announcements
    // (it re-announces every second), and the intruder refused theirs.
    tokio::time::timeout(GUARD, async {
        while !(good.iter().all(|m| m.counters().dropped_auth >= 2)
            && intruder.counters().dropped_auth >= 2)
        {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .unwrap();
    for (m, rx) in good.iter().zip(events.iter_mut()) {
        assert_eq!(*m.members().borrow(), all);
        assert!(drain(rx).is_empty(), "no transition at all");
    }
    assert_eq!(*intruder.members().borrow(), names(&["intruder"]));
}

/// Builds, with foca itself, the gossip `mallory` (its identity's address is where it must send
/// from) sends to `to` claiming `victim` is down.
fn forged_down_gossip(
    mallory: SocketAddr,
    to: &SpeakerId,
    victim: &SpeakerId,
    keys: &KeyRing,
) -> Vec<u8> {
    use foca::{AccumulatingRuntime, Foca, Member, PostcardCodec};
    let mallory = SpeakerId::with_generation("mallory", mallory, 1).unwrap();
    let mut foca = Foca::new(
        mallory,
        MembershipConfig::default().to_foca().unwrap(),
        StdRng::seed_from_u64(7),
        PostcardCodec,
    );
    let mut rt = AccumulatingRuntime::new();
    foca.apply_many(
        [Member::alive(to.clone()), Member::down(victim.clone())].into_iter(),
        true,
        &mut rt,
    )
    .unwrap();
    while rt.to_send().is_some() {}
    foca.gossip(&mut rt).unwrap();
    let (_, payload) = rt.to_send().unwrap();
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    // Envelope v2: the plaintext starts with the kind byte.
    let mut plain = vec![ferrolb_speaker::membership::lease::KIND_SWIM];
    plain.extend_from_slice(&payload);
    Sealer::new(keys.primary())
        .seal(&plain, now_ms, &mut rand::make_rng::<StdRng>())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_forged_down_gossip_needs_the_key() {
    let keys = ring(1);
    let members = cluster(3, &keys, &calm()).await;
    let all = names(&["node-0", "node-1", "node-2"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let mut events = members[0].events();
    let attacker = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let target = members[0].identity().clone();
    let victim = members[1].identity().clone();

    let mallory = attacker.local_addr().unwrap();
    let before = members[0].counters().dropped_auth;
    let forged = forged_down_gossip(mallory, &target, &victim, &ring(9));
    for _ in 0..5 {
        attacker.send_to(&forged, target.addr).await.unwrap();
    }
    tokio::time::timeout(GUARD, async {
        while members[0].counters().dropped_auth < before + 5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    assert_eq!(*members[0].members().borrow(), all);
    assert!(drain(&mut events).is_empty());

    // Control: sealed with the cluster key, the same forgery works, so the key is what stops it
    // (a key holder may gossip from its own address; it cannot speak for another member:
    // `membership_a_key_holder_cannot_speak_for_another_member`).
    let genuine = forged_down_gossip(mallory, &target, &victim, &keys);
    attacker.send_to(&genuine, target.addr).await.unwrap();
    let down = tokio::time::timeout(GUARD, async {
        loop {
            if events.recv().await.unwrap() == MembershipEvent::Down("node-1".into()) {
                break;
            }
        }
    })
    .await;
    assert!(down.is_ok());
}

/// An `Announce` from `sender` to `to`, made with foca itself and sealed with `keys`.
fn announce_as(sender: &SpeakerId, to: &SpeakerId, keys: &KeyRing) -> Vec<u8> {
    use foca::{AccumulatingRuntime, Foca, PostcardCodec};
    let mut foca = Foca::new(
        sender.clone(),
        MembershipConfig::default().to_foca().unwrap(),
        StdRng::seed_from_u64(11),
        PostcardCodec,
    );
    let mut rt = AccumulatingRuntime::new();
    foca.announce(to.clone(), &mut rt).unwrap();
    let (_, payload) = rt.to_send().unwrap();
    let now_ms = u64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    let mut plain = vec![ferrolb_speaker::membership::lease::KIND_SWIM];
    plain.extend_from_slice(&payload);
    Sealer::new(keys.primary())
        .seal(&plain, now_ms, &mut rand::make_rng::<StdRng>())
        .unwrap()
}

/// Issue #27 item 3: a key holder cannot speak for another member from its own address.
/// Three members on three loopback addresses; node-2's host (one compromised node: it has the
/// key) sends node-0, from its own IP, an announce sealed with the cluster key in which node-1
/// restarted (its name and address, a newer generation). Without the check node-0 takes it in
/// (a `Restarted` event, node-1's identity replaced by the impostor's); with it, every copy is
/// dropped and counted as `wrong_source`, and node-0 sees no event. Control: node-1 really
/// restarting on its own address is reported as a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_a_key_holder_cannot_speak_for_another_member() {
    let keys = ring(1);
    let mut members = Vec::new();
    for i in 0..3u8 {
        let bind = SocketAddr::from(([127, 0, 0, i + 1], 0));
        members.push(start_at(&format!("node-{i}"), bind, &keys, &calm()).await);
    }
    let addrs: Vec<SocketAddr> = members.iter().map(Membership::local_addr).collect();
    for m in &members {
        m.set_peers(addrs.iter().copied());
    }
    let all = names(&["node-0", "node-1", "node-2"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let mut events = members[0].events();
    let real = members[1].identity().clone();
    let impostor = SpeakerId::with_generation(&real.name, real.addr, real.generation + 1).unwrap();
    let forged = announce_as(&impostor, members[0].identity(), &keys);
    // node-2's host, from its own IP (a port of its own: the member's socket is the speaker's).
    let compromised = UdpSocket::bind(SocketAddr::from(([127, 0, 0, 3], 0)))
        .await
        .unwrap();
    for _ in 0..5 {
        compromised.send_to(&forged, addrs[0]).await.unwrap();
    }
    tokio::time::timeout(GUARD, async {
        while members[0].counters().dropped_wrong_source < 5 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("not dropped for its source: {:?}", members[0].counters()));
    // Give a wrongly accepted copy time to show.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(*members[0].members().borrow(), all);
    assert!(drain(&mut events).is_empty());
    assert_eq!(members[0].counters().dropped_wrong_source, 5);

    // Control: node-1 really restarting (a newer generation, from its own address) is seen as
    // a restart: the check above is about the source, not about announces.
    let real_addr = members[1].local_addr();
    members.remove(1).abort().await;
    let restarted = start_at("node-1", real_addr, &keys, &calm()).await;
    restarted.set_peers(addrs.iter().copied());
    let seen = tokio::time::timeout(GUARD, async {
        loop {
            if events.recv().await.unwrap() == MembershipEvent::Restarted("node-1".into()) {
                break;
            }
        }
    })
    .await;
    assert!(seen.is_ok(), "the real restart was not seen");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_garbage_truncated_and_replayed_datagrams_are_dropped() {
    let keys = ring(1);
    let members = cluster(2, &keys, &calm()).await;
    let both = names(&["node-0", "node-1"]);
    for m in &members {
        wait_for_set(m, &both).await;
    }
    // A listener posing as a peer address: node-0 announces to it, which hands us a genuine
    // sealed datagram to replay.
    let tap = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    members[0].set_peers([members[1].local_addr(), tap.local_addr().unwrap()]);
    let mut buf = vec![0u8; 4096];
    let (len, _) = tokio::time::timeout(GUARD, tap.recv_from(&mut buf))
        .await
        .unwrap()
        .unwrap();
    let captured = buf[..len].to_vec();
    let target = members[1].local_addr();
    let before = members[1].counters();

    let mut rng = rand::make_rng::<StdRng>();
    let mut sent_bad = 0u64;
    for i in 0..50usize {
        let mut junk = vec![0u8; (i * 37) % 1600];
        rand::Rng::fill_bytes(&mut rng, &mut junk);
        tap.send_to(&junk, target).await.unwrap();
        sent_bad += 1;
    }
    for cut in 0..captured.len() {
        tap.send_to(&captured[..cut], target).await.unwrap();
        sent_bad += 1;
    }
    tap.send_to(&vec![0xff; 3000], target).await.unwrap();
    sent_bad += 1;
    // The captured announce, node-0's, sent again from the tap's address: refused for its
    // source both times (issue #27 item 3), before the replay cache — the sim tests cover
    // replays and misdirected datagrams from the sender's own address.
    tap.send_to(&captured, target).await.unwrap();
    tap.send_to(&captured, target).await.unwrap();

    tokio::time::timeout(GUARD, async {
        loop {
            let c = members[1].counters();
            if c.dropped_malformed + c.dropped_auth - before.dropped_malformed - before.dropped_auth
                >= sent_bad
                && c.dropped_wrong_source >= before.dropped_wrong_source + 2
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap();
    let after = members[1].counters();
    assert_eq!(
        after.dropped_malformed + after.dropped_auth
            - before.dropped_malformed
            - before.dropped_auth,
        sent_bad
    );
    assert_eq!(after.dropped_wrong_source - before.dropped_wrong_source, 2);
    assert_eq!(after.dropped_replayed, before.dropped_replayed);
    // Still healthy: same members, still exchanging datagrams.
    assert_eq!(*members[1].members().borrow(), both);
    let later = tokio::time::timeout(GUARD, async {
        while members[1].counters().datagrams_out <= after.datagrams_out {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(later.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn membership_bad_settings_are_refused_with_clear_errors() {
    let mut settings = MembershipSettings {
        node_name: "node-0".into(),
        bind_addr: SocketAddr::from(([0, 0, 0, 0], 0)),
        advertise_addr: None,
        keys: ring(1),
        config: MembershipConfig::default(),
        generation: None,
    };
    let err = Membership::start(settings.clone()).await.err().unwrap();
    assert!(err.to_string().contains("unspecified"), "{err}");
    // Issue #27 item 3: an advertised address the socket does not send from is refused (its
    // peers would drop every datagram as `wrong_source`).
    settings.bind_addr = SocketAddr::from(([127, 0, 0, 1], 0));
    settings.advertise_addr = Some(SocketAddr::from(([127, 0, 0, 2], 7947)));
    let err = Membership::start(settings.clone()).await.err().unwrap();
    assert!(err.to_string().contains("not the bound address"), "{err}");
    settings.advertise_addr = None;
    settings.node_name = String::new();
    let err = Membership::start(settings.clone()).await.err().unwrap();
    assert!(err.to_string().contains("empty"), "{err}");
    settings.node_name = "node-0".into();
    settings.config.probe_rtt = settings.config.probe_period;
    let err = Membership::start(settings).await.err().unwrap();
    assert!(err.to_string().contains("probe_rtt"), "{err}");
}

/// The socket's receive buffer as the kernel holds it (`ss -m`: `skmem:(…,rb<bytes>,…)`, the
/// socket's `sk_rcvbuf`), for the UDP socket bound to `addr`; read from outside the speaker.
fn kernel_rcvbuf(addr: SocketAddr) -> usize {
    let out = std::process::Command::new("ss")
        .args(["-u", "-a", "-n", "-m", "-H", &format!("src = {addr}")])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.split([',', '(', ')', ' ', '\n'])
        .find_map(|f| f.strip_prefix("rb")?.parse().ok())
        .unwrap_or_else(|| panic!("no rb in `ss -m` output: {text}"))
}

/// Issue #27 item 9: the speaker holds only `CAP_NET_RAW`, so its membership socket never counts
/// on more receive buffer than `net.core.rmem_max`: it asks with `SO_RCVBUF` for the smaller of
/// its configured size and `rmem_max` (read at start), and what the kernel reports (twice the
/// size set, socket(7)) matches — also in this process, which runs as root with
/// `CAP_NET_ADMIN`, where `SO_RCVBUFFORCE` (the speaker's previous first try) would have granted
/// the configured 16 MiB. A smaller configured size is asked for as it is.
#[tokio::test]
async fn receive_buffer_is_sized_for_rmem_max() {
    use ferrolb_speaker::membership::DEFAULT_RECV_BUFFER_BYTES;
    use ferrolb_speaker::membership::agent::{RMEM_MAX_PATH, parse_rmem_max};
    let rmem_max = parse_rmem_max(&std::fs::read_to_string(RMEM_MAX_PATH).unwrap()).unwrap();
    let keys = ring(1);
    for wanted in [DEFAULT_RECV_BUFFER_BYTES, 212_992, 65_536] {
        let config = MembershipConfig {
            socket_receive_buffer: wanted,
            ..calm()
        };
        let m = start("node-0", &keys, &config).await;
        let b = m.receive_buffer();
        let kernel = kernel_rcvbuf(m.local_addr());
        println!(
            "MEASURED rmem_max {rmem_max}: wanted {wanted}, requested {}, granted {} (ss: {kernel})",
            b.requested, b.granted
        );
        assert_eq!(b.rmem_max, Some(rmem_max));
        assert_eq!(b.requested, wanted.min(rmem_max));
        assert_eq!(b.granted, 2 * b.requested, "Linux doubles SO_RCVBUF");
        assert_eq!(
            kernel, b.granted,
            "the kernel holds what the speaker reports"
        );
        assert!(kernel <= 2 * rmem_max, "never more than rmem_max allows");
        m.abort().await;
    }
}
