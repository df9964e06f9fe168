//! Measurement, not a test (run with `--ignored --nocapture`): how long the survivors take to
//! drop a member, with default timings, over real UDP on loopback.
//!
//! * crash: the member's task is aborted (its socket closes without a word, like SIGKILL);
//! * leave: the member leaves explicitly (what SIGTERM does).
//!
//! For each trial we record the time until the *first* survivor and until *every* survivor has
//! removed the member from its alive set; the victim is then restarted (new generation, same
//! port) and the cluster re-converges before the next trial. Figures are printed; nothing is
//! asserted about speed (DESIGN: speed is measured, never asserted).
#![allow(clippy::unwrap_used)]

mod membership_common;
use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use ferrolb_speaker::membership::{
    KeyRing, Membership, MembershipConfig, MembershipEvent, MembershipSettings,
};

const GUARD: Duration = Duration::from_secs(30);

fn ring() -> KeyRing {
    let hex: String = (0..32u8)
        .map(|i| format!("{:02x}", i.wrapping_mul(59).wrapping_add(3)))
        .collect();
    KeyRing::parse(hex.as_bytes()).unwrap()
}

async fn start(name: &str, bind: SocketAddr) -> Membership {
    Membership::start(MembershipSettings {
        node_name: name.to_owned(),
        bind_addr: bind,
        advertise_addr: None,
        keys: ring(),
        config: MembershipConfig::default(),
        generation: None,
    })
    .await
    .unwrap()
}

async fn wait_all(members: &[Membership], expected: &BTreeSet<String>) {
    for m in members {
        let mut rx = m.members();
        tokio::time::timeout(GUARD, rx.wait_for(|s| s == expected))
            .await
            .unwrap()
            .unwrap();
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stop {
    Crash,
    Leave,
}

struct Figures {
    first: Vec<Duration>,
    all: Vec<Duration>,
    false_downs: usize,
}

fn quantile(sorted: &[Duration], q: f64) -> Duration {
    // Nearest-rank quantile.
    let rank = (q * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted[rank.min(sorted.len()) - 1]
}

fn summary(label: &str, mut xs: Vec<Duration>) {
    xs.sort();
    let mean = xs.iter().sum::<Duration>() / u32::try_from(xs.len()).unwrap();
    println!(
        "{label:<34} n={:<3} p50={:>7.1} ms  p99={:>7.1} ms  max={:>7.1} ms  mean={:>7.1} ms",
        xs.len(),
        quantile(&xs, 0.50).as_secs_f64() * 1e3,
        quantile(&xs, 0.99).as_secs_f64() * 1e3,
        xs.last().unwrap().as_secs_f64() * 1e3,
        mean.as_secs_f64() * 1e3,
    );
}

async fn run(n: usize, trials: usize, stop: Stop) -> Figures {
    let mut members = Vec::new();
    for i in 0..n {
        members.push(start(&format!("node-{i}"), SocketAddr::from(([127, 0, 0, 1], 0))).await);
    }
    let addrs: Vec<SocketAddr> = members.iter().map(Membership::local_addr).collect();
    for m in &members {
        m.set_peers(addrs.iter().copied());
    }
    let all: BTreeSet<String> = (0..n).map(|i| format!("node-{i}")).collect();
    wait_all(&members, &all).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut figures = Figures {
        first: Vec::new(),
        all: Vec::new(),
        false_downs: 0,
    };
    for trial in 0..trials {
        let v = trial % n;
        let victim_name = format!("node-{v}");
        let mut waiters = Vec::new();
        let mut event_rxs = Vec::new();
        for (i, m) in members.iter().enumerate() {
            if i == v {
                continue;
            }
            let mut rx = m.members();
            rx.borrow_and_update();
            let name = victim_name.clone();
            waiters.push(tokio::spawn(async move {
                tokio::time::timeout(GUARD, rx.wait_for(|s| !s.contains(&name)))
                    .await
                    .unwrap()
                    .unwrap();
                Instant::now()
            }));
            event_rxs.push(m.events());
        }
        let victim = members.remove(v);
        let bind = victim.local_addr();
        let t0 = Instant::now();
        match stop {
            Stop::Crash => victim.abort().await,
            Stop::Leave => victim.leave(Duration::from_secs(1)).await,
        }
        let mut seen = Vec::new();
        for w in waiters {
            seen.push(w.await.unwrap() - t0);
        }
        figures.first.push(*seen.iter().min().unwrap());
        figures.all.push(*seen.iter().max().unwrap());

        // Restart the victim with a new generation on the same port, then re-converge.
        let restarted = start(&victim_name, bind).await;
        restarted.set_peers(addrs.iter().copied());
        members.insert(v, restarted);
        wait_all(&members, &all).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        for mut rx in event_rxs {
            while let Ok(e) = rx.try_recv() {
                if matches!(&e, MembershipEvent::Down(x) if *x != victim_name) {
                    figures.false_downs += 1;
                }
            }
        }
    }
    for m in members {
        m.abort().await;
    }
    figures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn membership_measure_failure_detection_on_loopback() {
    let trials: usize = std::env::var("TRIALS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(30);
    let c = MembershipConfig::default();
    println!(
        "defaults: probe_period={:?} probe_rtt={:?} suspect_timeout={:?} gossip_interval={:?}",
        c.probe_period, c.probe_rtt, c.suspect_timeout, c.gossip_interval
    );
    for stop in [Stop::Crash, Stop::Leave] {
        for n in [3usize, 10] {
            let f = run(n, trials, stop).await;
            summary(&format!("{stop:?} N={n} first survivor"), f.first);
            summary(&format!("{stop:?} N={n} all survivors"), f.all);
            println!(
                "{stop:?} N={n} false downs of live members: {}",
                f.false_downs
            );
        }
    }
}

/// CPU time (user + system) of the calling thread or the whole process, in seconds.
fn cpu_seconds(who: nix::sys::resource::UsageWho) -> f64 {
    use nix::sys::time::TimeValLike;
    let usage = nix::sys::resource::getrusage(who).unwrap();
    let us = usage.user_time().num_microseconds() + usage.system_time().num_microseconds();
    us as f64 / 1e6
}

/// The kernel's drop count (socket queue full) of the UDP socket bound to `addr`, from
/// `/proc/net/udp` (IPv4 only; `None` if not found).
fn kernel_drops(addr: SocketAddr) -> Option<u64> {
    let SocketAddr::V4(v4) = addr else {
        return None;
    };
    let local = format!(
        "{:08X}:{:04X}",
        u32::from_le_bytes(v4.ip().octets()),
        v4.port()
    );
    let table = std::fs::read_to_string("/proc/net/udp").ok()?;
    table
        .lines()
        .find(|l| l.split_whitespace().nth(1) == Some(local.as_str()))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
}

struct Phase {
    label: &'static str,
    seconds: f64,
    sent: u64,
    /// CPU seconds of the process minus the flooder thread.
    membership_cpu: f64,
    read: u64,
    dropped_unknown: u64,
    dropped_limited: u64,
    dropped_malformed: u64,
    authenticated_failed: u64,
    kernel_drops: u64,
    false_events: usize,
}

/// One phase: flood `target` from `from` (or stay idle when `None`) for `seconds`.
async fn flood_phase(
    label: &'static str,
    members: &[Membership],
    from: Option<SocketAddr>,
    seconds: f64,
) -> Phase {
    use nix::sys::resource::UsageWho;
    let target = members[0].local_addr();
    let mut events: Vec<_> = members.iter().map(Membership::events).collect();
    let before = members[0].counters();
    let kdrops_before = kernel_drops(target).unwrap_or(0);
    let duration = Duration::from_secs_f64(seconds);
    let cpu0 = cpu_seconds(UsageWho::RUSAGE_SELF);
    let t0 = Instant::now();
    let (sent, flooder_cpu) = match from {
        None => {
            tokio::time::sleep(duration).await;
            (0, 0.0)
        }
        Some(from) => {
            let material = membership_common::keyless_material(512, 5);
            std::thread::spawn(move || {
                let cpu_start = cpu_seconds(UsageWho::RUSAGE_THREAD);
                let socket = std::net::UdpSocket::bind(from).unwrap();
                let end = Instant::now() + duration;
                let mut sent = 0u64;
                while Instant::now() < end {
                    for d in &material {
                        sent += u64::from(socket.send_to(d, target).is_ok());
                    }
                }
                (sent, cpu_seconds(UsageWho::RUSAGE_THREAD) - cpu_start)
            })
            .join()
            .unwrap()
        }
    };
    let elapsed = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds(UsageWho::RUSAGE_SELF) - cpu0 - flooder_cpu;
    // Let the queue drain and any suspicion started during the flood play out (not in the CPU
    // figure: this is the same for every phase).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let after = members[0].counters();
    let false_events = events
        .iter_mut()
        .map(|rx| {
            let mut n = 0;
            while let Ok(e) = rx.try_recv() {
                n += usize::from(matches!(
                    e,
                    MembershipEvent::Down(_) | MembershipEvent::Restarted(_)
                ));
            }
            n
        })
        .sum();
    Phase {
        label,
        seconds: elapsed,
        sent,
        membership_cpu: cpu,
        read: after.datagrams_in - before.datagrams_in,
        dropped_unknown: after.dropped_unknown_source - before.dropped_unknown_source,
        dropped_limited: after.dropped_rate_limited - before.dropped_rate_limited,
        dropped_malformed: after.dropped_malformed - before.dropped_malformed,
        authenticated_failed: after.dropped_auth - before.dropped_auth,
        kernel_drops: kernel_drops(target).unwrap_or(0) - kdrops_before,
        false_events,
    }
}

async fn flood_cluster(config: &MembershipConfig) -> Vec<Membership> {
    let mut members = Vec::new();
    for i in 0..3u8 {
        members.push(
            Membership::start(MembershipSettings {
                node_name: format!("node-{i}"),
                bind_addr: SocketAddr::from(([127, 0, 0, i + 1], 0)),
                advertise_addr: None,
                keys: ring(),
                config: config.clone(),
                generation: None,
            })
            .await
            .unwrap(),
        );
    }
    let addrs: Vec<SocketAddr> = members.iter().map(Membership::local_addr).collect();
    for m in &members {
        m.set_peers(addrs.iter().copied());
    }
    let all: BTreeSet<String> = (0..3).map(|i| format!("node-{i}")).collect();
    wait_all(&members, &all).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    members
}

/// F5 measurement: CPU of the membership (three members on 127.0.0.1–3 in this process, default
/// timings) while one blocking loop floods node-0 with keyless datagrams, against idle; and, for
/// comparison, the same flood with the early drops turned off (every datagram authenticated).
/// The flooder thread's own CPU (RUSAGE_THREAD) is subtracted from the process's
/// (RUSAGE_SELF). `FLOOD_SECONDS` sets the phase length (default 5), `FLOOD_RCVBUF` the receive
/// buffer asked for (default 212,992 bytes, Linux's default `net.core.rmem_max`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "measurement; run with --ignored --nocapture"]
async fn membership_measure_keyless_flood_cpu() {
    let seconds: f64 = std::env::var("FLOOD_SECONDS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(5.0);
    // The receive buffer asked for (capped by net.core.rmem_max): by default 212,992 bytes,
    // Linux's default rmem_max, what a speaker gets on a host nobody tuned (issue #27 item 9).
    let rcvbuf: usize = std::env::var("FLOOD_RCVBUF")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(212_992);
    let protected = MembershipConfig {
        socket_receive_buffer: rcvbuf,
        ..MembershipConfig::default()
    };
    let unprotected = MembershipConfig {
        admit_only_peers: false,
        max_opens_per_second: u32::MAX,
        max_other_opens_per_second: u32::MAX,
        ..protected.clone()
    };
    let mut phases = Vec::new();
    let members = flood_cluster(&protected).await;
    let member_ip = members[1].local_addr().ip();
    phases.push(flood_phase("idle", &members, None, seconds).await);
    phases.push(
        flood_phase(
            "flood from non-peer 127.0.0.99",
            &members,
            Some(SocketAddr::from(([127, 0, 0, 99], 0))),
            seconds,
        )
        .await,
    );
    phases.push(
        flood_phase(
            "flood from member IP, other port",
            &members,
            Some(SocketAddr::new(member_ip, 0)),
            seconds,
        )
        .await,
    );
    for m in members {
        m.abort().await;
    }
    let members = flood_cluster(&unprotected).await;
    phases.push(flood_phase("idle, checks off", &members, None, seconds).await);
    phases.push(
        flood_phase(
            "flood from 127.0.0.99, checks off",
            &members,
            Some(SocketAddr::from(([127, 0, 0, 99], 0))),
            seconds,
        )
        .await,
    );
    for m in members {
        m.abort().await;
    }
    let idle = phases[0].membership_cpu / phases[0].seconds;
    println!(
        "receive buffer: asked {rcvbuf} B (FLOOD_RCVBUF), granted {} B of kernel accounting",
        2 * rcvbuf.min(
            ferrolb_speaker::membership::agent::parse_rmem_max(
                &std::fs::read_to_string(ferrolb_speaker::membership::agent::RMEM_MAX_PATH)
                    .unwrap_or_default()
            )
            .unwrap_or(usize::MAX)
        )
    );
    println!(
        "{:<36} {:>9} {:>9} {:>8} {:>7} {:>7} {:>9} {:>9} {:>9} {:>7} {:>8} {:>6}",
        "phase",
        "sent/s",
        "read/s",
        "kdrop/s",
        "cpu %",
        "x idle",
        "malformed",
        "unknown",
        "limited",
        "auth",
        "µs/read",
        "false"
    );
    for p in &phases {
        let cpu_share = p.membership_cpu / p.seconds;
        let per_read = if p.read > 0 {
            format!("{:.2}", p.membership_cpu * 1e6 / p.read as f64)
        } else {
            "-".into()
        };
        println!(
            "{:<36} {:>9.0} {:>9.0} {:>8.0} {:>7.1} {:>7.1} {:>9} {:>9} {:>9} {:>7} {:>8} {:>6}",
            p.label,
            p.sent as f64 / p.seconds,
            p.read as f64 / p.seconds,
            p.kernel_drops as f64 / p.seconds,
            cpu_share * 100.0,
            cpu_share / idle,
            p.dropped_malformed,
            p.dropped_unknown,
            p.dropped_limited,
            p.authenticated_failed,
            per_read,
            p.false_events,
        );
    }
}
