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
