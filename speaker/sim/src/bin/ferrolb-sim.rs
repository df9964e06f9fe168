//! `ferrolb-sim`: long runs of the cluster simulator (release mode; the test suite runs a fixed
//! list of seeds only).
//!
//! ```text
//! ferrolb-sim search   [--nodes N] [--seeds S] [--threads T] [--ips K] [--from SEED] [--class C]
//!     S seeded scenarios of every fault class (or class C) at N nodes; per class and invariant: violations,
//!     the worst window and its scenario as a Rust literal; scenarios/s and simulated seconds per
//!     CPU second.
//! ferrolb-sim shrink   --class C --nodes N --seed S --invariant I [--min-window-us W] [--ips K]
//!     The scenario `search` generated for that seed, shrunk to the fewest faults that still
//!     break invariant I with a window of at least W µs; prints it as a Rust literal and who
//!     answered the worst IP when.
//! ferrolb-sim failover [--nodes N] [--trials K] [--first-seed S] [--signal kill|term]
//!     [--task-delay-us D] [--cpus C --task-run-us R]
//!     The owner of one IP is killed (or sent SIGTERM) K times, once per seed from S (default 0;
//!     `--first-seed S --trials 1` replays one trial, with `SIM_TRACE=1` traced); milliseconds from
//!     the signal to the first gratuitous ARP of another node (what `ferrolb-bench-lab failover`
//!     measures on real frames): p50, p90, p99, max and the seed of the slowest trial.
//! ```
//!
//! `SIM_TRACE=1` prints each node's owned sets, notes, membership commands and yields;
//! `SIM_LOG=<filter>` (e.g. `debug`, with `SIM_TRACE`) adds the speakers' and foca's own logs,
//! each tagged with its node and virtual time (`search --seeds 1 --from S` replays one seed).
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use ferrolb_sim::search::{FaultClass, scenario};
use ferrolb_sim::world::{ip, name, view};
use ferrolb_sim::{Cpus, Fault, Scenario, check, run};

fn arg<T: std::str::FromStr>(args: &[String], flag: &str, default: T) -> T {
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    if std::env::var_os("SIM_LOG").is_some() {
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::from_env("SIM_LOG"))
            .without_time()
            .with_writer(std::io::stderr)
            .init();
    }
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("search") => search(&args),
        Some("failover") => failover(&args),
        Some("shrink") => shrink_one(&args),
        _ => {
            eprintln!("usage: ferrolb-sim search|failover [options] (see the source's docs)");
            std::process::exit(2);
        }
    }
}

/// Per class and invariant: count, worst window, example, and each violating seed with its
/// worst window there.
type Findings =
    BTreeMap<(FaultClass, &'static str), (u64, Duration, String, BTreeMap<u64, Duration>)>;

fn search(args: &[String]) {
    let nodes: usize = arg(args, "--nodes", 5);
    let seeds: u64 = arg(args, "--seeds", 100);
    let from: u64 = arg(args, "--from", 0);
    let ips: usize = arg(args, "--ips", 8);
    let threads: u64 = arg(args, "--threads", 2).max(1);
    let only: String = arg(args, "--class", String::new());
    let classes: Vec<FaultClass> = FaultClass::ALL
        .into_iter()
        .filter(|c| only.is_empty() || c.label() == only)
        .chain(FaultClass::EXTRA.into_iter().filter(|c| c.label() == only))
        .collect();
    let started = Instant::now();
    let cpu = std::sync::Mutex::new(Duration::ZERO);
    let simulated = std::sync::Mutex::new(Duration::ZERO);
    let findings = std::sync::Mutex::new(Findings::new());
    // Per class: the longest two-answerer and no-answerer windows seen, violation or not.
    let worst = std::sync::Mutex::new(BTreeMap::<FaultClass, (Duration, Duration)>::new());
    std::thread::scope(|scope| {
        for t in 0..threads {
            let (cpu, simulated, findings, worst, classes) =
                (&cpu, &simulated, &findings, &worst, &classes);
            scope.spawn(move || {
                let mut seed = from + t;
                while seed < from + seeds {
                    for &class in classes {
                        let s = scenario(seed, nodes, ips, class);
                        let begun = Instant::now();
                        let r = run(&s);
                        let took = begun.elapsed();
                        let violations = check(&s, &r);
                        if let Ok(mut w) = worst.lock() {
                            let e = w.entry(class).or_default();
                            e.0 =
                                e.0.max(r.worst_dual().map_or(Duration::ZERO, |(_, w)| w.len()));
                            e.1 =
                                e.1.max(r.worst_none().map_or(Duration::ZERO, |(_, w)| w.len()));
                        }
                        if let (Ok(mut c), Ok(mut sim)) = (cpu.lock(), simulated.lock()) {
                            *c += took;
                            *sim += r.end;
                        }
                        let Ok(mut f) = findings.lock() else { continue };
                        for v in violations {
                            let e = f.entry((class, v.invariant)).or_insert((
                                0,
                                Duration::ZERO,
                                String::new(),
                                BTreeMap::new(),
                            ));
                            e.0 += 1;
                            let at = e.3.entry(seed).or_default();
                            *at = (*at).max(v.window);
                            if v.window >= e.1 || e.2.is_empty() {
                                e.1 = v.window;
                                e.2 = format!("{v:?}\n      {}", s.literal());
                            }
                        }
                    }
                    seed += threads;
                }
            });
        }
    });
    let wall = started.elapsed();
    let cpu = cpu.into_inner().unwrap_or_default();
    let simulated = simulated.into_inner().unwrap_or_default();
    let scenarios = seeds * classes.len() as u64;
    println!(
        "nodes {nodes}, ips {ips}, {scenarios} scenarios ({seeds} seeds × {} classes) on {threads} threads in {:.1} s: {:.1} scenarios/s, {:.2} simulated s per CPU s",
        classes.len(),
        wall.as_secs_f64(),
        scenarios as f64 / wall.as_secs_f64(),
        simulated.as_secs_f64() / cpu.as_secs_f64().max(1e-9),
    );
    for (class, (dual, none)) in worst.into_inner().unwrap_or_default() {
        println!(
            "{}: longest window with two answerers {dual:?}, with none {none:?}",
            class.label()
        );
    }
    let findings = findings.into_inner().unwrap_or_default();
    if findings.is_empty() {
        println!("no violation");
    }
    for ((class, invariant), (count, worst, example, seeds)) in findings {
        println!(
            "{} {invariant}: {count} violations, worst window {worst:?}\n    {example}",
            class.label()
        );
        let listed: Vec<String> = seeds.iter().map(|(s, w)| format!("{s} ({w:?})")).collect();
        println!("    seeds: {}", listed.join(", "));
    }
}

fn shrink_one(args: &[String]) {
    let nodes: usize = arg(args, "--nodes", 5);
    let seed: u64 = arg(args, "--seed", 0);
    let ips: usize = arg(args, "--ips", 8);
    let invariant: String = arg(args, "--invariant", "I-safe".to_string());
    let min = Duration::from_micros(arg(args, "--min-window-us", 0));
    let class: String = arg(args, "--class", "partition".to_string());
    let Some(class) = FaultClass::ALL
        .into_iter()
        .chain(FaultClass::EXTRA)
        .find(|c| c.label() == class)
    else {
        eprintln!("unknown class");
        std::process::exit(2);
    };
    let fails = |s: &Scenario| {
        check(s, &run(s))
            .iter()
            .any(|v| v.invariant == invariant && v.window >= min)
    };
    let s = scenario(seed, nodes, ips, class);
    if !fails(&s) {
        println!("seed {seed} does not break {invariant} with a window of {min:?}");
        return;
    }
    let small = ferrolb_sim::shrink::shrink(&s, fails);
    println!("{}", small.literal());
    let r = run(&small);
    let worst = check(&small, &r)
        .into_iter()
        .filter(|v| v.invariant == invariant)
        .max_by_key(|v| v.window);
    if let Some(v) = worst {
        println!("{v:?}");
        if let Some(rec) = r.ips.get(&v.ip) {
            println!("sole answerer over time: {:?}", rec.owners);
            println!("dual windows: {:?}", rec.dual);
            println!("unanswered windows: {:?}", rec.none);
        }
    }
}

fn failover(args: &[String]) {
    let nodes: usize = arg(args, "--nodes", 3);
    let trials: u64 = arg(args, "--trials", 100);
    let signal: String = arg(args, "--signal", "kill".to_string());
    let delay: u64 = arg(args, "--task-delay-us", 0);
    let cpus: usize = arg(args, "--cpus", 0);
    let run_us: u64 = arg(args, "--task-run-us", 0);
    let v = view(nodes, 1);
    let all = (0..nodes).map(name).collect();
    let owner_name = ferrolb_l2::plan::plan(&v, &all, &name(0), Some(true))
        .ips
        .values()
        .next()
        .and_then(|p| p.owner.clone())
        .unwrap_or_default();
    let owner = (0..nodes).find(|i| name(*i) == owner_name).unwrap_or(0);
    let mut ms = Vec::new();
    let mut failures = 0;
    let mut worst: Option<(f64, u64)> = None;
    let first: u64 = arg(args, "--first-seed", 0);
    for seed in first..first + trials {
        // The signal at a point of SWIM's probe cycle drawn from the seed.
        let at = 5_000 + (seed * 7_919) % 1_000;
        let fault = if signal == "term" {
            Fault::Terminate(owner)
        } else {
            Fault::Crash(owner)
        };
        let mut s = Scenario::quiet(seed, nodes, 1).with(at, fault);
        s.task_delay_us = (0, delay);
        s.cpus = (cpus > 0).then_some(Cpus {
            count: cpus,
            run_us: (0, run_us),
        });
        s.end_ms = at + 10_000;
        let r = run(&s);
        let t = Duration::from_millis(at);
        match r
            .announcements
            .iter()
            .find(|(when, node, addr)| *when >= t && *node != owner && *addr == ip(0))
        {
            Some((when, _, _)) => {
                let took = (*when - t).as_secs_f64() * 1000.0;
                if worst.is_none_or(|(w, _)| took > w) {
                    worst = Some((took, seed));
                }
                ms.push(took);
            }
            None => failures += 1,
        }
    }
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| {
        let i = ((p * ms.len() as f64).ceil() as usize).clamp(1, ms.len().max(1)) - 1;
        ms.get(i).copied().unwrap_or(f64::NAN)
    };
    println!(
        "nodes {nodes}, signal {signal}, trials {trials}, failures {failures}: p50 {:.1} ms, p90 {:.1}, p99 {:.1}, max {:.1} (seed {}), min {:.1}",
        pct(0.5),
        pct(0.9),
        pct(0.99),
        ms.last().copied().unwrap_or(f64::NAN),
        worst.map_or(0, |(_, seed)| seed),
        ms.first().copied().unwrap_or(f64::NAN),
    );
}
