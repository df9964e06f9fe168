//! F5 (issue #8): a keyless flood of the membership port causes no false failover. In its own
//! test binary, so no sibling test competes with the flood and the three members for the CPUs
//! (test binaries run one after another; tests within one binary run in parallel).
#![allow(clippy::unwrap_used)]

mod membership_common;

use std::net::SocketAddr;
use std::time::Duration;

use ferrolb_speaker::membership::{Membership, MembershipConfig, MembershipEvent};
use membership_common::{drain, keyless_material, names, ring, start_at, wait_for_set};

/// The flood rate of this test, datagrams per second: about 2,000 times what a member
/// receives at the default timings (~50/s). The unpaced flood (~450,000/s, as fast as one thread
/// sends) is `membership_measure_keyless_flood_cpu`; here it would starve the two members that
/// are not flooded, which share this process and its two CPUs with the flooder and the flooded
/// member (on real nodes each speaker has its own CPUs).
const RATE: u64 = 100_000;

/// Linux's default `net.core.rmem_max`, bytes: the receive buffer F5 asks for.
const DEFAULT_LINUX_RMEM_MAX: usize = 212_992;

/// Sends `material` round-robin from `from` to `to` at [`RATE`] for `duration`; returns how many
/// datagrams the kernel accepted.
fn flood(from: SocketAddr, to: SocketAddr, duration: Duration, material: Vec<Vec<u8>>) -> u64 {
    let socket = std::net::UdpSocket::bind(from).unwrap();
    let start = std::time::Instant::now();
    let mut sent = 0u64;
    let mut attempted = 0u64;
    while start.elapsed() < duration {
        for d in &material {
            if socket.send_to(d, to).is_ok() {
                sent += 1;
            }
        }
        attempted += material.len() as u64;
        let due = Duration::from_secs_f64(attempted as f64 / RATE as f64);
        if let Some(ahead) = due.checked_sub(start.elapsed()) {
            std::thread::sleep(ahead);
        }
    }
    sent
}

/// F5: a keyless flood must not cause a false failover, and must be dropped before any
/// decryption when it comes from a non-peer address, or by its tag — without spending any
/// budget — when it comes from a peer's IP (another port). Members sit on 127.0.0.1–3 with
/// default timings and the receive buffer of an untuned host (208 KiB); the flood goes to node-0 at [`RATE`] for 5 s per phase. Nothing asserts
/// speed; the figures are printed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_keyless_flood_causes_no_false_failover() {
    const PHASE: Duration = Duration::from_secs(5);
    let keys = ring(1);
    // The receive buffer of a host nobody tuned: Linux's default net.core.rmem_max, all a
    // speaker without CAP_NET_ADMIN gets there (issue #27 item 9).
    let config = MembershipConfig {
        socket_receive_buffer: DEFAULT_LINUX_RMEM_MAX,
        ..MembershipConfig::default()
    };
    let mut members = Vec::new();
    for i in 0..3u8 {
        let bind = SocketAddr::from(([127, 0, 0, i + 1], 0));
        members.push(start_at(&format!("node-{i}"), bind, &keys, &config).await);
    }
    let addrs: Vec<SocketAddr> = members.iter().map(Membership::local_addr).collect();
    for m in &members {
        m.set_peers(addrs.iter().copied());
    }
    let all = names(&["node-0", "node-1", "node-2"]);
    for m in &members {
        wait_for_set(m, &all).await;
    }
    let mut events: Vec<_> = members.iter().map(Membership::events).collect();
    let target = addrs[0];
    let phases = [
        (
            "non-peer 127.0.0.99",
            SocketAddr::from(([127, 0, 0, 99], 0)),
        ),
        (
            "member IP 127.0.0.2, other port",
            SocketAddr::new(addrs[1].ip(), 0),
        ),
    ];
    for (phase, (label, from)) in phases.into_iter().enumerate() {
        let before = members[0].counters();
        let material = keyless_material(512, 11);
        let sent = tokio::task::spawn_blocking(move || flood(from, target, PHASE, material))
            .await
            .unwrap();
        // Let the socket drain and any suspicion started during the flood run its course.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after = members[0].counters();
        let d =
            |f: fn(&ferrolb_speaker::membership::CountersSnapshot) -> u64| f(&after) - f(&before);
        let (malformed, unknown, limited, auth) = (
            d(|c| c.dropped_malformed),
            d(|c| c.dropped_unknown_source),
            d(|c| c.dropped_rate_limited),
            d(|c| c.dropped_auth),
        );
        let dropped = after.dropped_total() - before.dropped_total();
        println!(
            "flood from {label}: sent {sent} in {PHASE:?} ({:.0}/s); node-0 read {} and dropped \
             {dropped}: malformed {malformed}, unknown source {unknown}, rate limited {limited}, \
             auth {auth}",
            sent as f64 / PHASE.as_secs_f64(),
            d(|c| c.datagrams_in),
        );
        assert!(sent > 10_000, "the flood itself ran ({sent})");
        // Every flood datagram node-0 read was dropped and counted. How many it read depends on
        // the CPU it got (the kernel drops the rest when the socket queue is full: a loaded
        // machine read fewer than half), so the counts are against what was read, less the
        // members' own traffic of the phase (a few hundred datagrams; LEGIT bounds it).
        const LEGIT: u64 = 2_000;
        let read = d(|c| c.datagrams_in);
        assert!(read > 5 * LEGIT, "node-0 read {read} of {sent}");
        assert!(dropped + LEGIT >= read, "dropped {dropped} of {read} read");
        let flood = read - LEGIT;
        assert_eq!(after.dropped_stale, before.dropped_stale);
        assert_eq!(after.dropped_replayed, before.dropped_replayed);
        if phase == 0 {
            // Nothing from a non-peer reached decryption.
            assert_eq!(auth, 0);
            assert_eq!(limited, 0);
            assert!(
                unknown + malformed >= flood,
                "unknown source {unknown} + malformed {malformed} of {read} read"
            );
        } else {
            // Admitted by IP, then refused by its tag: no budget is spent by a datagram nobody
            // authenticated (DESIGN S15; the lab's A16 spoofs the members' exact addresses).
            assert_eq!(limited, 0, "a keyless flood spent a sender budget");
            assert_eq!(unknown, 0);
            assert!(
                auth + malformed >= flood,
                "refused by its tag {auth} + malformed {malformed} of {read} read"
            );
        }
        for (m, rx) in members.iter().zip(events.iter_mut()) {
            let seen = drain(rx);
            assert!(
                !seen
                    .iter()
                    .any(|e| matches!(e, MembershipEvent::Down(_) | MembershipEvent::Restarted(_))),
                "{} saw {seen:?} during the flood from {label}",
                m.identity().name
            );
            assert_eq!(*m.members().borrow(), all);
        }
    }
}
