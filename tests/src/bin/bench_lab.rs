//! `ferrolb-bench-lab`: the speaker benchmarks of DESIGN §7 in the network-namespace lab.
//!
//! - `failover`: a lab of N nodes and one client, one Service holding `198.51.100.77`. Each trial
//!   finds the owner by ARP, starts a capture in the client namespace, signals the owner's speaker
//!   (SIGKILL or SIGTERM) and measures from a wall-clock timestamp taken right before the signal to
//!   the capture's timestamp (`unix_us`) of the first gratuitous ARP for the IP from another MAC.
//!   Then the speaker is restarted and the lab waits for exactly one owner again before the next
//!   trial. A trial without such a gratuitous ARP within the timeout (10 s) is a failure.
//! - `cpu`: one speaker node and two clients A, B on the same bridge. The speaker's CPU time
//!   (`utime + stime` of `/proc/<pid>/stat`) over S seconds idle, then while A floods UDP to B
//!   (a learned unicast destination: the bridge sends it to B's port only), then while A floods UDP
//!   to an address whose neighbour entry is pinned to a MAC that is not on the LAN (unknown
//!   unicast: the bridge floods every frame to all ports, the speaker's included), then while A
//!   broadcasts ARP requests for the owned IP (each answered and checked for a conflicting claim)
//!   and for an unowned one (dropped): speaker CPU per 100k requests (issue #10).
//!
//! - `starve [--percent P] [--shares N] [--hog] [--seconds S]`: three nodes; node-1's speaker is
//!   confined to P % of one CPU (cgroup v1 CFS quota, 100 ms period), with `--hog` sharing it
//!   with a busy loop, or with `--shares N` given `cpu.shares` N and no quota (a CPU request
//!   without a limit), with `--hog` next to a busy loop on every CPU; for S seconds; reports members declared down and stalls (false failovers) per hour,
//!   wrong ARP answers and the starved owner's ARP reply latency (issue #8 F4).
//!
//! - `compare [--nodes N] [--trials T]`: ferrolb and MetalLB (built from its Go module by
//!   `tests/metallb/build.sh`) side by side, issue #11: crash (SIGKILL) and graceful (SIGTERM)
//!   failover, signal → first gratuitous ARP from the new owner and signal → first HTTP response
//!   through it (backend pods and a real kube-proxy per node, as in the demo), one fresh lab per
//!   trial, trials alternating between the implementations (`ferrolb_tests::lab::compare`);
//!   prints a markdown table with both columns and the ratio of the medians. T defaults to 3.
//! - `compare-controller [--services 1000,5000]`: each implementation's controller alone on a
//!   fresh API server — N LoadBalancer Services at once → all have status, resident memory, a
//!   restart until settled: Services written and API requests by verb and resource
//!   (`ferrolb_tests::lab::compare_controller`).
//! - `compare-steady [--nodes 3] [--seconds 600]`: each implementation at rest with 50 ClusterIP
//!   and 5 LoadBalancer Services — API requests per minute by verb and resource, speaker CPU,
//!   speaker and controller resident memory (`ferrolb_tests::lab::compare_steady`).
//!
//! Speakers run with the timing profile `--profile` (`fast`, the default, or `safe`). The
//! speaker binary is `--speaker-bin` / `FERROLB_SPEAKER_BIN`, else the debug build
//! (`target/debug/ferrolb-speaker`).
//!
//! ```text
//! cargo build --release -p ferrolb-speaker && cargo build -p ferrolb-tests --bin ferrolb-bench-lab
//! FERROLB_SPEAKER_BIN=target/release/ferrolb-speaker \
//!     target/debug/ferrolb-bench-lab failover --nodes 3 --trials 20 --signal KILL
//! FERROLB_SPEAKER_BIN=target/release/ferrolb-speaker target/debug/ferrolb-bench-lab cpu --seconds 10
//! FERROLB_SPEAKER_BIN=target/release/ferrolb-speaker \
//!     target/debug/ferrolb-bench-lab --profile safe starve --percent 3 --hog --seconds 60
//! ```
//!
//! Only addresses of the documentation ranges are used, only inside namespaces the lab created
//! (see `ferrolb_tests::lab`); nothing is added to the root namespace.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use ferrolb_crds::L2AdvertisementSpec;
use ferrolb_speaker::election;
use ferrolb_speaker::l2::capture::Client as CaptureClient;
use ferrolb_tests::cluster::{Supervised, workspace_bin};
use ferrolb_tests::lab::bench::{
    ArmedSignal, CpuSample, clock_ticks_per_second, cpu_sample, percentile, rx_packets,
    speaker_pid, start_speaker_with, unix_now_us,
};
use ferrolb_tests::lab::compare::{self, TrialSetup};
use ferrolb_tests::lab::compare_controller::{self, ControllerSetup, ValueRow};
use ferrolb_tests::lab::compare_report;
use ferrolb_tests::lab::compare_steady::{self, SteadySetup};
use ferrolb_tests::lab::starvation::{self, Starve};
use ferrolb_tests::lab::{Implementation, Lab, Seen, in_netns, within_netns};
use ferrolb_tests::objects::{apply_l2, create_pool, create_service, lb_service, set_ingress};

/// The Service IP of both benchmarks (a documentation range, on-link from the clients).
const FAILOVER_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 77);
/// A LAN address nobody holds; client A pins its neighbour entry to [`ABSENT_MAC`].
const UNKNOWN_UNICAST_IP: Ipv4Addr = Ipv4Addr::new(192, 0, 2, 250);
/// A locally administered MAC that is not on the LAN, so the bridge never learns it.
const ABSENT_MAC: &str = "02:00:00:00:00:99";
/// An IP of the LAN that no Service holds (ARP requests for it are parsed and dropped).
const UNOWNED_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 79);
/// UDP port of the flood (B binds it and never reads).
const FLOOD_PORT: u16 = 9;
/// How long the lab may take to reach exactly one owner (startup, after a restart).
const SETTLE_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Parser)]
#[command(about = "Speaker benchmarks in the network-namespace lab (DESIGN §7)")]
struct Cli {
    /// The speaker binary; default: target/debug/ferrolb-speaker (built if missing).
    #[arg(long, env = "FERROLB_SPEAKER_BIN", global = true)]
    speaker_bin: Option<PathBuf>,
    /// The speakers' `--timing-profile` (fast, safe).
    #[arg(
        long,
        env = "FERROLB_BENCH_PROFILE",
        global = true,
        default_value = "fast"
    )]
    profile: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Owner speaker signalled → first gratuitous ARP from another node, seen by a client.
    Failover {
        /// Node namespaces (each runs a speaker).
        #[arg(long, env = "FERROLB_BENCH_NODES", default_value_t = 3)]
        nodes: usize,
        /// Trials.
        #[arg(long, env = "FERROLB_BENCH_TRIALS", default_value_t = 20)]
        trials: usize,
        /// Signal sent to the owner's speaker.
        #[arg(long, env = "FERROLB_BENCH_SIGNAL", value_enum, default_value_t = Sig::Kill)]
        signal: Sig,
        /// A trial without a gratuitous ARP from another MAC within this many ms fails.
        #[arg(long, env = "FERROLB_BENCH_TIMEOUT_MS", default_value_t = 10_000)]
        timeout_ms: u64,
        /// Quiet time after the lab is back to one owner, so that no announcement of the previous
        /// trial (default offsets 0, 0.5, 2, 5 s) is still due, in ms.
        #[arg(long, env = "FERROLB_BENCH_SETTLE_MS", default_value_t = 6_000)]
        settle_ms: u64,
    },
    /// One speaker under a cgroup CPU quota (issue #8 F4): members declared down and stalls
    /// (false failovers) per hour, wrong ARP answers, the starved owner's ARP reply latency.
    Starve {
        /// CPU quota, % of one CPU per 100 ms period.
        #[arg(long, env = "FERROLB_BENCH_PERCENT", default_value_t = 3)]
        percent: u32,
        /// A busy loop shares the speaker's cgroup (the quota runs out every period); with
        /// `--shares`, a neighbour group keeps every CPU busy instead.
        #[arg(long, env = "FERROLB_BENCH_HOG")]
        hog: bool,
        /// Instead of a quota: the speaker's group gets this `cpu.shares` and no quota, as a CPU
        /// request without a limit (the manifests' 20m request = 20 shares).
        #[arg(long, env = "FERROLB_BENCH_SHARES")]
        shares: Option<u32>,
        /// How long, seconds.
        #[arg(long, env = "FERROLB_BENCH_SECONDS", default_value_t = 60)]
        seconds: u64,
    },
    /// ferrolb vs. MetalLB, everything in one command and one markdown table with the ratio
    /// (issue #11): crash and graceful failover (first gratuitous ARP, first HTTP response
    /// through the new owner; alternating trials, at each node count), the controller rows of
    /// compare-controller, the at-rest rows of compare-steady and the CPU rows of compare-cpu.
    /// The defaults fit in about 30 minutes on 2 cores; `--only failover` and the separate
    /// subcommands run one part with more trials or longer windows.
    Compare {
        /// Node counts of the failover rows (comma-separated; one fresh lab per trial).
        #[arg(long, env = "FERROLB_BENCH_NODES", value_delimiter = ',', default_values_t = [3, 10])]
        nodes: Vec<usize>,
        /// Trials per implementation and signal with up to 5 nodes.
        #[arg(long, env = "FERROLB_BENCH_TRIALS", default_value_t = 8)]
        trials: usize,
        /// Trials per implementation and signal with more than 5 nodes.
        #[arg(long, env = "FERROLB_BENCH_TRIALS_LARGE", default_value_t = 3)]
        trials_large: usize,
        /// A trial without a gratuitous ARP from another node (or an HTTP answer through it)
        /// within this many ms fails (in that row).
        #[arg(long, env = "FERROLB_BENCH_TIMEOUT_MS", default_value_t = 30_000)]
        timeout_ms: u64,
        /// Quiet time after the lab reached one owner, before the signal, in ms.
        #[arg(long, env = "FERROLB_BENCH_SETTLE_MS", default_value_t = 6_000)]
        settle_ms: u64,
        /// Services of the controller rows (comma-separated: one run each).
        #[arg(long, env = "FERROLB_BENCH_SERVICES", value_delimiter = ',', default_values_t = [1000])]
        services: Vec<usize>,
        /// The at-rest window per implementation, seconds.
        #[arg(long, env = "FERROLB_BENCH_STEADY_SECONDS", default_value_t = 60)]
        steady_seconds: u64,
        /// Length of each CPU phase, seconds.
        #[arg(long, env = "FERROLB_BENCH_CPU_SECONDS", default_value_t = 5)]
        cpu_seconds: u64,
        /// Sections to run, comma-separated: failover, controller, steady, cpu.
        #[arg(long, value_delimiter = ',', default_values_t = ["failover".to_owned(), "controller".to_owned(), "steady".to_owned(), "cpu".to_owned()])]
        only: Vec<String>,
        /// Also write the report (table, per-trial figures, versions, machine, load) into this
        /// file between its compare markers (e.g. docs/comparison.md).
        #[arg(long)]
        write: Option<PathBuf>,
        /// ferrolb's controller binary; default: target/release/ferrolb-controller if built,
        /// else the debug build.
        #[arg(long, env = "FERROLB_CONTROLLER_BIN")]
        controller_bin: Option<PathBuf>,
    },
    /// ferrolb's vs. MetalLB's controller: N Services created at once → all have status,
    /// resident memory, a restart's writes and API requests; one markdown table (issue #11).
    CompareController {
        /// Services per run (repeat for several runs, e.g. `--services 1000 --services 5000`).
        #[arg(long, env = "FERROLB_BENCH_SERVICES", value_delimiter = ',', default_values_t = [1000])]
        services: Vec<usize>,
        /// Concurrent create calls.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// ferrolb's controller binary; default: target/release/ferrolb-controller if built,
        /// else the debug build.
        #[arg(long, env = "FERROLB_CONTROLLER_BIN")]
        controller_bin: Option<PathBuf>,
        /// A run whose Services do not all have status within this many seconds fails.
        #[arg(long, default_value_t = 600)]
        timeout_s: u64,
    },
    /// ferrolb vs. MetalLB at rest: API requests per minute by verb, speaker CPU, resident
    /// memory, with 50 ClusterIP and 5 LoadBalancer Services (issue #11).
    CompareSteady {
        /// Node namespaces (each runs a speaker).
        #[arg(long, env = "FERROLB_BENCH_NODES", default_value_t = 3)]
        nodes: usize,
        /// The measured window per implementation, seconds.
        #[arg(long, env = "FERROLB_BENCH_STEADY_SECONDS", default_value_t = 600)]
        seconds: u64,
        /// ferrolb's controller binary; default: target/release/ferrolb-controller if built,
        /// else the debug build.
        #[arg(long, env = "FERROLB_CONTROLLER_BIN")]
        controller_bin: Option<PathBuf>,
    },
    /// ferrolb's vs. MetalLB's speaker CPU time: idle, and under the floods of `cpu` (one node,
    /// each implementation in a fresh lab, ferrolb first); one markdown table (issue #11).
    CompareCpu {
        /// Length of each phase, seconds.
        #[arg(long, env = "FERROLB_BENCH_SECONDS", default_value_t = 10)]
        seconds: u64,
    },
    /// Speaker CPU time idle vs. while UDP floods cross the bridge, and while ARP requests for
    /// the owned IP and for an unowned one flood it.
    Cpu {
        /// Length of each phase, seconds.
        #[arg(long, env = "FERROLB_BENCH_SECONDS", default_value_t = 10)]
        seconds: u64,
    },
}

#[derive(Clone, Copy, ValueEnum)]
enum Sig {
    #[value(name = "KILL", alias = "kill")]
    Kill,
    #[value(name = "TERM", alias = "term")]
    Term,
}

impl Sig {
    fn name(self) -> &'static str {
        match self {
            Sig::Kill => "KILL",
            Sig::Term => "TERM",
        }
    }
}

/// A lab and the speakers this benchmark started in it. Field order: speakers stop before the lab
/// is torn down.
struct BenchLab {
    speakers: BTreeMap<String, Supervised>,
    speaker: SpeakerCmd,
    lab: Lab,
}

/// How the benchmark starts speakers: which binary, which timing profile.
#[derive(Clone)]
struct SpeakerCmd {
    bin: PathBuf,
    profile: String,
}

impl BenchLab {
    /// A lab of `nodes` nodes and `clients` clients with pool `198.51.100.0/24` advertised on every
    /// node and Service `default/bench` (TCP 80, ETP Cluster) holding `ip`; speakers started.
    async fn start(
        speaker: SpeakerCmd,
        nodes: usize,
        clients: usize,
        ip: Ipv4Addr,
    ) -> anyhow::Result<BenchLab> {
        let lab = Lab::start(nodes, clients).await?;
        let client = lab.client().await?;
        create_pool(&client, "bench", &["198.51.100.0/24"]).await?;
        apply_l2(&client, "bench", L2AdvertisementSpec::default()).await?;
        create_service(
            &client,
            &lb_service("default", "bench", &[("TCP", 80)], "Cluster"),
        )
        .await?;
        set_ingress(&client, "default", "bench", &[&ip.to_string()]).await?;
        let mut bench = BenchLab {
            speakers: BTreeMap::new(),
            speaker,
            lab,
        };
        for i in 1..=nodes {
            bench.start_speaker(&format!("node-{i}"))?;
        }
        Ok(bench)
    }

    fn start_speaker(&mut self, node: &str) -> anyhow::Result<()> {
        if let Some(old) = self.speakers.remove(node) {
            old.stop(Duration::from_secs(5));
        }
        let s = start_speaker_with(
            &self.lab,
            &self.speaker.bin,
            node,
            &["--timing-profile", &self.speaker.profile],
        )?;
        self.speakers.insert(node.to_owned(), s);
        Ok(())
    }

    /// The real `ferrolb-speaker` pid of node `node`.
    fn pid(&self, node: &str) -> anyhow::Result<u32> {
        let s = self
            .speakers
            .get(node)
            .with_context(|| format!("{node} has no speaker"))?;
        let launched = s
            .pid()
            .with_context(|| format!("{node}'s speaker is gone"))?;
        speaker_pid(launched, &self.lab.node(node).netns)
    }

    /// Polls until exactly one MAC answers ARP for `ip` and it is node `want`'s.
    async fn wait_for_single_owner(&self, ip: Ipv4Addr, want: &str) -> anyhow::Result<()> {
        let answers = self
            .lab
            .wait_for_owner(0, ip, Some(want), SETTLE_TIMEOUT)
            .await?;
        if answers.len() != 1 || !answers.contains(&self.lab.node(want).mac) {
            bail!(
                "expected {want} ({}) alone to answer for {ip}, got {answers:?}; its log:\n{}",
                self.lab.node(want).mac,
                self.lab.speaker_log(want, 30)
            );
        }
        Ok(())
    }
}

fn speaker_bin(cli: &Cli) -> anyhow::Result<PathBuf> {
    let bin = match &cli.speaker_bin {
        Some(p) => p.clone(),
        None => workspace_bin("ferrolb-speaker")?,
    };
    if !bin.is_file() {
        bail!("speaker binary {} does not exist", bin.display());
    }
    Ok(std::fs::canonicalize(&bin)?)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client::client::builder=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let bin = speaker_bin(&cli)?;
    println!(
        "speaker binary: {}, timing profile {}",
        bin.display(),
        cli.profile
    );
    let speaker = SpeakerCmd {
        bin,
        profile: cli.profile.clone(),
    };
    let run = async {
        match cli.command {
            Command::Failover {
                nodes,
                trials,
                signal,
                timeout_ms,
                settle_ms,
            } => {
                failover(
                    speaker,
                    nodes,
                    trials,
                    signal,
                    Duration::from_millis(timeout_ms),
                    Duration::from_millis(settle_ms),
                )
                .await
            }
            Command::Cpu { seconds } => cpu(speaker, Duration::from_secs(seconds)).await,
            Command::CompareCpu { seconds } => compare_cpu(speaker, Duration::from_secs(seconds))
                .await
                .map(drop),
            Command::Compare {
                nodes,
                trials,
                trials_large,
                timeout_ms,
                settle_ms,
                services,
                steady_seconds,
                cpu_seconds,
                only,
                write,
                controller_bin,
            } => {
                let plan = ComparePlan {
                    nodes,
                    trials,
                    trials_large,
                    timeout: Duration::from_millis(timeout_ms),
                    settle: Duration::from_millis(settle_ms),
                    services,
                    steady: Duration::from_secs(steady_seconds),
                    cpu: Duration::from_secs(cpu_seconds),
                    only,
                    write,
                    controller: controller_bin.or_else(ferrolb_tests::controller::release_binary),
                };
                compare_all(speaker, plan).await
            }
            Command::CompareController {
                services,
                concurrency,
                controller_bin,
                timeout_s,
            } => {
                let setup = ControllerSetup {
                    services: 0,
                    concurrency,
                    ferrolb_controller: controller_bin
                        .or_else(ferrolb_tests::controller::release_binary),
                    timeout: Duration::from_secs(timeout_s),
                    ferrolb_speaker: Some(speaker.bin.clone()),
                    ferrolb_args: vec!["--timing-profile".into(), speaker.profile.clone()],
                };
                compare_controllers(setup, &services).await.map(drop)
            }
            Command::CompareSteady {
                nodes,
                seconds,
                controller_bin,
            } => {
                let setup = SteadySetup {
                    nodes,
                    window: Duration::from_secs(seconds),
                    settle: Duration::from_secs(10),
                    ferrolb_speaker: Some(speaker.bin.clone()),
                    ferrolb_args: vec!["--timing-profile".into(), speaker.profile.clone()],
                    ferrolb_controller: controller_bin
                        .or_else(ferrolb_tests::controller::release_binary),
                };
                compare_steady(setup).await.map(drop)
            }
            Command::Starve {
                percent,
                hog,
                shares,
                seconds,
            } => {
                let how = Starve {
                    percent,
                    hog,
                    shares,
                    duration: Duration::from_secs(seconds),
                    listen: Duration::from_millis(500),
                };
                let outcome = starvation::run(
                    Some(speaker.bin.clone()),
                    &["--timing-profile", &speaker.profile],
                    how,
                )
                .await?;
                let limit = match (shares, hog) {
                    (Some(s), true) => {
                        format!("cpu.shares {s}, no quota, next to a busy loop on every CPU")
                    }
                    (Some(s), false) => format!("cpu.shares {s}, no quota"),
                    (None, true) => format!("{percent} % quota shared with a busy loop"),
                    (None, false) => format!("{percent} % quota"),
                };
                println!(
                    "starve: profile {}, {limit}, {seconds} s: {}",
                    speaker.profile,
                    outcome.summary()
                );
                Ok(())
            }
        }
    };
    // On Ctrl-C the run future is dropped, so the lab is torn down (its Drop) before exiting.
    tokio::select! {
        r = run => r,
        _ = tokio::signal::ctrl_c() => bail!("interrupted"),
    }
}

/// The `compare` subcommand: [`compare::failover_rows`], printing each trial as it ends and
/// then the table.
async fn compare_failover(setup: TrialSetup, trials: usize) -> anyhow::Result<Vec<compare::Row>> {
    let metallb = ferrolb_tests::lab::metallb::Binaries::locate()?;
    println!(
        "compare: ferrolb vs. MetalLB {} ({}), {} nodes, {trials} trials each per signal, alternating, timeout {} ms, settle {} ms",
        metallb.version()?,
        metallb.speaker().display(),
        setup.nodes,
        setup.timeout.as_millis(),
        setup.settle.as_millis()
    );
    let started = Instant::now();
    let rows = compare::failover_rows(&setup, trials, |line| println!("{line}")).await;
    println!(
        "\n{}\n({} trials per cell, one fresh lab per trial, {:.0} s in all)",
        compare::table(&rows),
        trials,
        started.elapsed().as_secs_f64()
    );
    Ok(rows)
}

/// What `compare` runs (its flags).
struct ComparePlan {
    nodes: Vec<usize>,
    trials: usize,
    trials_large: usize,
    timeout: Duration,
    settle: Duration,
    services: Vec<usize>,
    steady: Duration,
    cpu: Duration,
    only: Vec<String>,
    write: Option<PathBuf>,
    controller: Option<PathBuf>,
}

/// The `compare` subcommand: every selected section in turn, then the one table
/// (`lab::compare_report`), the per-trial figures and — with `--write` — the report spliced into
/// the file. A section that fails is reported and leaves its rows out; the others still run.
async fn compare_all(speaker: SpeakerCmd, plan: ComparePlan) -> anyhow::Result<()> {
    let metallb = ferrolb_tests::lab::metallb::Binaries::locate()?;
    let started = Instant::now();
    let load_before = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let wants = |s: &str| plan.only.iter().any(|o| o == s);
    let mut failover = Vec::new();
    let mut values = Vec::new();
    let mut failed = Vec::new();
    if wants("failover") {
        for &nodes in &plan.nodes {
            let setup = TrialSetup {
                nodes,
                signal: "KILL",
                timeout: plan.timeout,
                settle: plan.settle,
                ferrolb_speaker: Some(speaker.bin.clone()),
                ferrolb_args: vec!["--timing-profile".into(), speaker.profile.clone()],
            };
            let trials = if nodes > 5 {
                plan.trials_large
            } else {
                plan.trials
            };
            match compare_failover(setup, trials).await {
                Ok(rows) => failover.extend(rows),
                Err(e) => failed.push(format!("failover, {nodes} nodes: {e:#}")),
            }
        }
    }
    if wants("controller") {
        let setup = ControllerSetup {
            services: 0,
            concurrency: 64,
            ferrolb_controller: plan.controller.clone(),
            timeout: Duration::from_secs(1500),
            ferrolb_speaker: Some(speaker.bin.clone()),
            ferrolb_args: vec!["--timing-profile".into(), speaker.profile.clone()],
        };
        match compare_controllers(setup, &plan.services).await {
            Ok(rows) => values.extend(rows),
            Err(e) => failed.push(format!("controller: {e:#}")),
        }
    }
    if wants("steady") {
        let setup = SteadySetup {
            nodes: 3,
            window: plan.steady,
            settle: Duration::from_secs(10),
            ferrolb_speaker: Some(speaker.bin.clone()),
            ferrolb_args: vec!["--timing-profile".into(), speaker.profile.clone()],
            ferrolb_controller: plan.controller.clone(),
        };
        match compare_steady(setup).await {
            Ok(rows) => values.extend(rows),
            Err(e) => failed.push(format!("steady: {e:#}")),
        }
    }
    if wants("cpu") {
        match compare_cpu(speaker.clone(), plan.cpu).await {
            Ok(rows) => values.extend(rows),
            Err(e) => failed.push(format!("cpu: {e:#}")),
        }
    }
    let table = compare_report::table(&failover, &values);
    let trials = compare_report::per_trial(&failover);
    let load_after = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("\n{table}\n{trials}");
    for f in &failed {
        println!("FAILED section {f}");
    }
    let elapsed = started.elapsed();
    println!("({:.0} s in all)", elapsed.as_secs_f64());
    if let Some(path) = &plan.write {
        let cpu = std::fs::read_to_string("/proc/cpuinfo")
            .unwrap_or_default()
            .lines()
            .find_map(|l| {
                l.strip_prefix("model name")
                    .map(|m| m.trim_start_matches([' ', '\t', ':']).to_owned())
            })
            .unwrap_or_else(|| "?".into());
        let cores = std::thread::available_parallelism().map_or(0, std::num::NonZero::get);
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
        let commit = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        let report = format!(
            "### One run of `ferrolb-bench-lab compare` ({date})\n\n\
             - command: `{command}`\n\
             - ferrolb {version} (commit {commit}): speaker `{speaker_bin}` (profile `{profile}`), controller `{controller}`\n\
             - MetalLB {metallb}\n\
             - machine: {cores} × {cpu}, Linux {kernel}; load average before {load_before}, after {load_after}\n\
             - {elapsed:.0} s in all{failed}\n\n\
             {table}\n\
             Per-trial figures of the failover rows (ms, in the order they ran):\n\n{trials}",
            date = jiff_date(),
            command = std::env::args().collect::<Vec<_>>().join(" "),
            version = env!("CARGO_PKG_VERSION"),
            speaker_bin = speaker.bin.display(),
            profile = speaker.profile,
            controller = plan
                .controller
                .as_ref()
                .map_or_else(|| "debug build".into(), |b| b.display().to_string()),
            metallb = metallb.version()?,
            kernel = kernel.trim(),
            load_before = load_before
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            load_after = load_after
                .split_whitespace()
                .take(3)
                .collect::<Vec<_>>()
                .join(" "),
            elapsed = elapsed.as_secs_f64(),
            failed = if failed.is_empty() {
                String::new()
            } else {
                format!("; sections that failed: {}", failed.join("; "))
            },
        );
        let doc = std::fs::read_to_string(path).unwrap_or_default();
        let out = compare_report::splice(&doc, &report).map_err(anyhow::Error::msg)?;
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))?;
        println!("report written to {}", path.display());
    }
    Ok(())
}

/// Today's date (UTC), `YYYY-MM-DD`.
fn jiff_date() -> String {
    k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%d")
        .to_string()
}

/// The `compare-controller` subcommand: one run of each implementation per Service count
/// (ferrolb first, then MetalLB), each in a fresh lab; prints the figures and the table.
async fn compare_controllers(
    setup: ControllerSetup,
    counts: &[usize],
) -> anyhow::Result<Vec<ValueRow>> {
    let metallb = ferrolb_tests::lab::metallb::Binaries::locate()?;
    println!(
        "compare-controller: ferrolb ({}) vs. MetalLB {} ({}), Services {counts:?}",
        setup
            .ferrolb_controller
            .as_ref()
            .map_or_else(|| "debug build".into(), |b| b.display().to_string()),
        metallb.version()?,
        metallb.controller().display()
    );
    let started = Instant::now();
    let mut rows = Vec::new();
    for &services in counts {
        let setup = ControllerSetup {
            services,
            ..setup.clone()
        };
        let mut figures = Vec::new();
        for implementation in [Implementation::Ferrolb, Implementation::MetalLb] {
            let result = compare_controller::run(implementation, &setup).await;
            match &result {
                Ok(f) => println!(
                    "{services} Services {:<8} created in {:.1} s, all status after {:.1} s, RSS {:?} KiB (peak {:?}); speaker RSS {:?} KiB (peak {:?}); restart: settled after {:?}, {} Services written, requests {}, RSS {:?} KiB",
                    implementation.name(),
                    f.created.as_secs_f64(),
                    f.all_status.as_secs_f64(),
                    f.rss_kib,
                    f.peak_kib,
                    f.speaker_rss_kib,
                    f.speaker_peak_kib,
                    f.restart_settled,
                    f.restart_changed,
                    compare_controller::by_verb_line(&f.restart_requests),
                    f.restart_rss_kib
                ),
                Err(e) => println!(
                    "{services} Services {:<8} FAILED: {e:#}",
                    implementation.name()
                ),
            }
            figures.push(result.ok());
        }
        rows.extend(compare_controller::value_rows(
            services,
            figures[0].as_ref(),
            figures[1].as_ref(),
        ));
    }
    println!(
        "\n{}\n(one run per implementation and Service count, {:.0} s in all)",
        compare_controller::value_table(&rows),
        started.elapsed().as_secs_f64()
    );
    Ok(rows)
}

/// The `compare-steady` subcommand: one window per implementation (ferrolb first), each in a
/// fresh lab; prints the requests by verb and the table.
async fn compare_steady(setup: SteadySetup) -> anyhow::Result<Vec<ValueRow>> {
    let metallb = ferrolb_tests::lab::metallb::Binaries::locate()?;
    println!(
        "compare-steady: ferrolb vs. MetalLB {}, {} nodes, {} s window each",
        metallb.version()?,
        setup.nodes,
        setup.window.as_secs()
    );
    let started = Instant::now();
    let mut figures = Vec::new();
    for implementation in [Implementation::Ferrolb, Implementation::MetalLb] {
        let result = compare_steady::run(implementation, &setup).await;
        match &result {
            Ok(f) => println!(
                "{:<8} {:.0} requests/min ({}), speaker CPU {:.0} ms/min, speaker RSS {:?} KiB, controller RSS {:?} KiB",
                implementation.name(),
                f.requests_per_min(),
                compare_controller::by_verb_line(&f.requests),
                f.speaker_cpu_ms_per_min,
                f.speaker_rss_kib,
                f.controller_rss_kib
            ),
            Err(e) => println!("{:<8} FAILED: {e:#}", implementation.name()),
        }
        figures.push(result.ok());
    }
    let rows = compare_steady::value_rows(figures[0].as_ref(), figures[1].as_ref());
    println!(
        "\n{}\n(one window per implementation, {:.0} s in all)",
        compare_controller::value_table(&rows),
        started.elapsed().as_secs_f64()
    );
    Ok(rows)
}

/// One failover trial's outcome.
struct Trial {
    victim: String,
    /// Microseconds from the timestamp before the signal to the first gratuitous ARP, if any.
    latency_us: Option<u64>,
    /// Node whose MAC the first gratuitous ARP carried (`?` for a MAC of no node).
    new_owner: Option<String>,
    expected_new_owner: String,
    /// From the timestamp to the exit of the shell that sent the signal: the uncertainty on
    /// when the signal was delivered.
    kill_window_us: u64,
    /// Gratuitous ARPs for the IP seen between the capture start and the signal (should be 0).
    stray_before: usize,
    /// MACs answering ARP right after the failover (should be exactly the new owner's).
    answers_after: Vec<String>,
}

async fn failover(
    speaker: SpeakerCmd,
    nodes: usize,
    trials: usize,
    signal: Sig,
    timeout: Duration,
    settle: Duration,
) -> anyhow::Result<()> {
    if nodes < 2 {
        bail!("failover needs at least 2 nodes");
    }
    let ip = FAILOVER_IP;
    let names: Vec<String> = (1..=nodes).map(|i| format!("node-{i}")).collect();
    let owner_of = |excluded: Option<&str>| -> anyhow::Result<String> {
        election::owner(
            IpAddr::V4(ip),
            names
                .iter()
                .map(String::as_str)
                .filter(|n| Some(*n) != excluded),
        )
        .map(str::to_owned)
        .context("no eligible node")
    };
    let first_owner = owner_of(None)?;
    println!(
        "failover: {nodes} nodes, {trials} trials, SIG{}, IP {ip}, timeout {} ms, settle {} ms",
        signal.name(),
        timeout.as_millis(),
        settle.as_millis()
    );
    let started = Instant::now();
    let mut bench = BenchLab::start(speaker, nodes, 1, ip).await?;
    bench.wait_for_single_owner(ip, &first_owner).await?;
    println!(
        "lab up in {:.1} s; owner {first_owner}",
        started.elapsed().as_secs_f64()
    );
    tokio::time::sleep(settle).await;

    let mut results = Vec::new();
    // The trials; an error ends them early, but the trials done so far are still summarised.
    let outcome: anyhow::Result<()> = async {
        for trial in 1..=trials {
            let answers = bench.lab.arp_answers(0, ip).await?;
            let [owner_mac] = answers.iter().collect::<Vec<_>>()[..] else {
                bail!("trial {trial}: not exactly one owner before the signal: {answers:?}");
            };
            let victim = bench
                .lab
                .node_by_mac(owner_mac)
                .with_context(|| format!("owner MAC {owner_mac} is no node's"))?
                .name
                .clone();
            let t = run_trial(
                &mut bench,
                ip,
                &victim,
                owner_of(Some(&victim))?,
                signal,
                timeout,
            )
            .await?;
            print_trial(trial, &t);
            results.push(t);
            // Restart the signalled speaker; the IP goes back to the owner by election.
            bench.start_speaker(&victim)?;
            let restart = Instant::now();
            bench.wait_for_single_owner(ip, &first_owner).await?;
            let back = restart.elapsed();
            tokio::time::sleep(settle).await;
            let answers = bench.lab.arp_answers(0, ip).await?;
            if answers.len() != 1 {
                bail!(
                    "trial {trial}: after the restart and {} ms of quiet, answers {answers:?}",
                    settle.as_millis()
                );
            }
            println!(
                "         restarted {victim}; one owner again after {:.2} s",
                back.as_secs_f64()
            );
        }
        Ok(())
    }
    .await;
    summarize(&results, signal, nodes);
    drop(bench);
    outcome
}

async fn run_trial(
    bench: &mut BenchLab,
    ip: Ipv4Addr,
    victim: &str,
    expected_new_owner: String,
    signal: Sig,
    timeout: Duration,
) -> anyhow::Result<Trial> {
    let victim_mac = bench.lab.node(victim).mac.clone();
    let pid = bench.pid(victim)?;
    let armed = ArmedSignal::arm(pid, signal.name())?;
    // The timestamp right before the signal; 0 until then. The capture stops at the first
    // gratuitous ARP for the IP from another MAC captured after it.
    let t0 = Arc::new(AtomicU64::new(0));
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let netns = bench.lab.clients[0].netns.clone();
    let capture = {
        let t0 = t0.clone();
        let victim_mac = victim_mac.clone();
        tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || {
                let c = CaptureClient::open("eth0")?;
                c.drain();
                let _ = ready_tx.send(());
                // Long enough for the signal to be sent plus the timeout.
                let seen = c.listen(timeout + Duration::from_secs(2), |seen| {
                    let t0 = t0.load(Ordering::SeqCst);
                    t0 != 0 && seen.iter().any(|s| is_takeover(s, ip, &victim_mac, t0))
                })?;
                Ok(seen)
            })
        })
    };
    ready_rx.await.context("the capture did not start")?;
    // t0 is published just before the release; a frame cannot be a reaction before it.
    t0.store(unix_now_us(), Ordering::SeqCst);
    let (before, kill_window_us) = armed.fire()?;
    t0.store(before, Ordering::SeqCst);
    let seen = capture.await??;
    // Reap the signalled speaker (it is gone or leaving; stop() waits, then escalates).
    if let Some(s) = bench.speakers.remove(victim) {
        tokio::task::spawn_blocking(move || s.stop(Duration::from_secs(5))).await?;
    }
    let first = seen
        .iter()
        .find(|s| is_takeover(s, ip, &victim_mac, before));
    let latency_us = first
        .map(|s| seen_unix_us(s).saturating_sub(before))
        .filter(|us| *us <= u64::try_from(timeout.as_micros()).unwrap_or(u64::MAX));
    let new_owner = first.filter(|_| latency_us.is_some()).map(|s| {
        bench
            .lab
            .node_by_mac(s.mac())
            .map_or_else(|| format!("?{}", s.mac()), |n| n.name.clone())
    });
    let stray_before = seen
        .iter()
        .filter(|s| {
            matches!(s, Seen::GratuitousArp { .. })
                && s.ip() == IpAddr::V4(ip)
                && seen_unix_us(s) < before
        })
        .count();
    let answers_after = bench.lab.arp_answers(0, ip).await?.into_iter().collect();
    Ok(Trial {
        victim: victim.to_owned(),
        latency_us,
        new_owner,
        expected_new_owner,
        kill_window_us,
        stray_before,
        answers_after,
    })
}

/// A gratuitous ARP for `ip` from a MAC other than `old_mac`, captured at or after `t0` (µs).
fn is_takeover(s: &Seen, ip: Ipv4Addr, old_mac: &str, t0: u64) -> bool {
    matches!(s, Seen::GratuitousArp { .. })
        && s.ip() == IpAddr::V4(ip)
        && !s.mac().eq_ignore_ascii_case(old_mac)
        && seen_unix_us(s) >= t0
}

fn seen_unix_us(s: &Seen) -> u64 {
    s.unix_us()
}

fn print_trial(trial: usize, t: &Trial) {
    let what = match (&t.latency_us, &t.new_owner) {
        (Some(us), Some(owner)) => format!(
            "{:>9.1} ms  new owner {owner} (expected {})",
            *us as f64 / 1000.0,
            t.expected_new_owner
        ),
        _ => format!(
            "   FAILED    no gratuitous ARP from another MAC in time (expected {})",
            t.expected_new_owner
        ),
    };
    println!(
        "trial {trial:>3}: SIG to {:<8} {what}  kill window {:.2} ms  stray before {}  answers after {:?}",
        t.victim,
        t.kill_window_us as f64 / 1000.0,
        t.stray_before,
        t.answers_after
    );
}

fn summarize(results: &[Trial], signal: Sig, nodes: usize) {
    let mut ok: Vec<u64> = results.iter().filter_map(|t| t.latency_us).collect();
    ok.sort_unstable();
    let failures = results.len() - ok.len();
    let wrong_owner = results
        .iter()
        .filter(|t| {
            t.new_owner
                .as_ref()
                .is_some_and(|o| *o != t.expected_new_owner)
        })
        .count();
    let not_single = results
        .iter()
        .filter(|t| t.answers_after.len() != 1)
        .count();
    let max_window = results.iter().map(|t| t.kill_window_us).max().unwrap_or(0);
    // The signal reached the speaker somewhere inside the kill window; measured from the window's
    // end instead, the figures are lower bounds.
    let mut lower: Vec<u64> = results
        .iter()
        .filter_map(|t| t.latency_us.map(|us| us.saturating_sub(t.kill_window_us)))
        .collect();
    lower.sort_unstable();
    let ms = |v: &[u64], p: u32| {
        percentile(v, p).map_or_else(|| "-".to_owned(), |us| format!("{:.1}", us as f64 / 1000.0))
    };
    println!(
        "summary SIG{} {nodes} nodes: {} trials, {} ok, {failures} failed (no gratuitous ARP from another MAC within the timeout)",
        signal.name(),
        results.len(),
        ok.len()
    );
    println!(
        "  signal → first gratuitous ARP from the new owner (ms): p50 {}  p90 {}  p99 {}  max {}  min {}",
        ms(&ok, 50),
        ms(&ok, 90),
        ms(&ok, 99),
        ms(&ok, 100),
        ok.first().map_or_else(
            || "-".to_owned(),
            |us| format!("{:.1}", *us as f64 / 1000.0)
        ),
    );
    println!(
        "  the same from the end of the kill window (lower bound, ms): p50 {}  p90 {}  p99 {}  max {}",
        ms(&lower, 50),
        ms(&lower, 90),
        ms(&lower, 99),
        ms(&lower, 100),
    );
    if ok.len() < 100 {
        println!(
            "  (nearest-rank percentiles; with {} < 100 samples p99 is the max)",
            ok.len()
        );
    }
    println!(
        "  new owner other than the election's choice: {wrong_owner}; not exactly one ARP answer right after: {not_single}; largest kill window {:.2} ms",
        max_window as f64 / 1000.0
    );
}

/// One CPU phase's figures.
struct Phase {
    name: &'static str,
    wall: Duration,
    cpu_ms: f64,
    thread_ms: Option<f64>,
    rx_packets: u64,
    /// UDP packets sent over the whole flood (`flood_time`, a little longer than `wall`).
    sent: u64,
    send_errors: u64,
    flood_time: Duration,
}

async fn cpu(speaker: SpeakerCmd, seconds: Duration) -> anyhow::Result<()> {
    let ip = Ipv4Addr::new(198, 51, 100, 78);
    println!(
        "cpu: 1 speaker node, clients A and B, {} s per phase, speaker owns {ip}",
        seconds.as_secs()
    );
    let bench = BenchLab::start(speaker, 1, 2, ip).await?;
    bench.wait_for_single_owner(ip, "node-1").await?;
    let pid = bench.pid("node-1")?;
    let tck = clock_ticks_per_second()?;
    let node_ns = bench.lab.node("node-1").netns.clone();
    let a_ns = bench.lab.clients[0].netns.clone();
    let b_ns = bench.lab.clients[1].netns.clone();
    let a_ip = bench.lab.clients[0].ip;
    let b_ip = bench.lab.clients[1].ip;
    println!("speaker pid {pid}; CLK_TCK {tck}; A {a_ns} {a_ip}, B {b_ns} {b_ip}");
    // Let start-up and the announcements (last one 5 s after gaining) pass.
    tokio::time::sleep(Duration::from_secs(6)).await;

    let (sink, plan) = flood_plan(&bench.lab, ip)?;
    let mut phases = Vec::new();
    for (name, flood) in plan {
        phases.push(measure(pid, tck, &node_ns, name, seconds, flood).await?);
    }
    drop(sink);

    let idle = phases.first().map_or(0.0, |p| p.cpu_ms);
    println!();
    println!(
        "{:<46} {:>7} {:>10} {:>10} {:>9} {:>10} {:>10} {:>14} {:>12}",
        "phase",
        "wall s",
        "sent pkts",
        "sent/s",
        "send errs",
        "speaker rx",
        "rx/s",
        "speaker cpu ms",
        "threads ms"
    );
    for p in &phases {
        println!(
            "{:<46} {:>7.2} {:>10} {:>10.0} {:>9} {:>10} {:>10.0} {:>14.0} {:>12}",
            p.name,
            p.wall.as_secs_f64(),
            p.sent,
            if p.flood_time.is_zero() {
                0.0
            } else {
                p.sent as f64 / p.flood_time.as_secs_f64()
            },
            p.send_errors,
            p.rx_packets,
            p.rx_packets as f64 / p.wall.as_secs_f64(),
            p.cpu_ms,
            p.thread_ms
                .map_or_else(|| "-".to_owned(), |m| format!("{m:.1}"))
        );
    }
    for p in phases.iter().skip(1) {
        let ratio = if idle > 0.0 {
            format!("{:.2}", p.cpu_ms / idle)
        } else {
            "n/a (idle 0 ticks)".to_owned()
        };
        let thread_ratio = match (phases.first().and_then(|i| i.thread_ms), p.thread_ms) {
            (Some(i), Some(f)) if i > 0.0 => format!("{:.2}", f / i),
            _ => "n/a".to_owned(),
        };
        println!(
            "{} / idle: utime+stime ratio {ratio}, thread schedstat ratio {thread_ratio}",
            p.name
        );
        if p.rx_packets >= 10_000 {
            let per_100k = |ms: f64| ms / (p.rx_packets as f64 / 100_000.0);
            println!(
                "  speaker CPU per 100k received frames: {:.1} ms utime+stime{}",
                per_100k(p.cpu_ms - idle * p.wall.as_secs_f64() / seconds.as_secs_f64().max(1e-9)),
                p.thread_ms
                    .map(|t| format!(", {:.1} ms schedstat", per_100k(t)))
                    .unwrap_or_default()
            );
        }
    }
    println!(
        "(utime+stime resolution: {:.0} ms per tick; CPU shares are of one core over the phase)",
        1000.0 / tck as f64
    );
    drop(bench);
    Ok(())
}

/// The `compare-cpu` subcommand: for ferrolb, then MetalLB, a fresh one-node lab
/// (`lab::compare_cpu`), the phases of [`flood_plan`], and one table of speaker CPU time per
/// second of each phase with the ratio MetalLB ÷ ferrolb.
async fn compare_cpu(speaker: SpeakerCmd, seconds: Duration) -> anyhow::Result<Vec<ValueRow>> {
    let ip = Ipv4Addr::new(198, 51, 100, 78);
    let tck = clock_ticks_per_second()?;
    let metallb = ferrolb_tests::lab::metallb::Binaries::locate()?;
    println!(
        "compare-cpu: ferrolb ({}, profile {}) vs. MetalLB {}, 1 speaker node owning {ip}, {} s per phase",
        speaker.bin.display(),
        speaker.profile,
        metallb.version()?,
        seconds.as_secs()
    );
    let args = vec!["--timing-profile".to_owned(), speaker.profile.clone()];
    let mut runs: Vec<Vec<Phase>> = Vec::new();
    for implementation in [Implementation::Ferrolb, Implementation::MetalLb] {
        println!("\n{}:", implementation.name());
        let lab = ferrolb_tests::lab::compare_cpu::start(
            implementation,
            ip,
            Some(speaker.bin.clone()),
            &args,
        )
        .await?;
        let pid = lab.speaker_pid("node-1")?;
        let node_ns = lab.node("node-1").netns.clone();
        // Let start-up and the announcements pass.
        tokio::time::sleep(Duration::from_secs(6)).await;
        let (sink, plan) = flood_plan(&lab, ip)?;
        let mut phases = Vec::new();
        for (name, flood) in plan {
            phases.push(measure(pid, tck, &node_ns, name, seconds, flood).await?);
        }
        drop(sink);
        drop(lab);
        runs.push(phases);
    }
    let per_s = |p: &Phase| p.cpu_ms / p.wall.as_secs_f64().max(1e-9);
    // Floods of at least 10,000 frames: CPU per 100,000 frames the node's eth0 received (the two
    // floods do not reach the same rate).
    let per_100k =
        |p: &Phase| (p.rx_packets >= 10_000).then(|| p.cpu_ms / (p.rx_packets as f64 / 100_000.0));
    let mut rows = Vec::new();
    for (f, m) in runs[0].iter().zip(&runs[1]) {
        rows.push(ValueRow {
            what: format!(
                "speaker CPU, {} (eth0 received {} / {} frames): ms per s",
                f.name, f.rx_packets, m.rx_packets
            ),
            ferrolb: Some(per_s(f)),
            metallb: Some(per_s(m)),
        });
        if let (Some(fr), Some(mr)) = (per_100k(f), per_100k(m)) {
            rows.push(ValueRow {
                what: format!("speaker CPU, {}: ms per 100,000 frames received", f.name),
                ferrolb: Some(fr),
                metallb: Some(mr),
            });
        }
    }
    println!(
        "\n{}\n(utime + stime of the speaker process, {:.0} ms per tick; one run)",
        compare_controller::value_table(&rows),
        1000.0 / tck as f64
    );
    Ok(rows)
}

/// The phases of `cpu` and `compare-cpu` (idle, UDP floods from client A, ARP request floods,
/// idle again) against the speaker of `lab`'s node owning `ip`; client B's socket that sinks the
/// learned-unicast flood (keep it until the phases are done).
fn flood_plan(lab: &Lab, ip: Ipv4Addr) -> anyhow::Result<(UdpSocket, Vec<PlannedPhase>)> {
    let a_ns = lab.clients[0].netns.clone();
    let b_ns = lab.clients[1].netns.clone();
    let a_ip = lab.clients[0].ip;
    let b_ip = lab.clients[1].ip;
    // B listens on the flood port and never reads (so it sends no ICMP port unreachable).
    let sink = within_netns(&b_ns, move || {
        Ok(UdpSocket::bind(SocketAddr::from((b_ip, FLOOD_PORT)))?)
    })?;
    in_netns(
        &a_ns,
        "ip",
        &[
            "neigh",
            "replace",
            &UNKNOWN_UNICAST_IP.to_string(),
            "lladdr",
            ABSENT_MAC,
            "nud",
            "permanent",
            "dev",
            "eth0",
        ],
    )?;

    // Issue #10: ARP requests aimed at the owned IP — each is parsed, checked for a conflicting
    // claim and answered — and at an IP nobody owns (parsed, checked, dropped).
    let unknown = SocketAddr::from((UNKNOWN_UNICAST_IP, FLOOD_PORT));
    let plan: Vec<PlannedPhase> = vec![
        ("idle", None),
        (
            "flood A→B (learned unicast)",
            Some(Flood::Udp(
                a_ns.clone(),
                a_ip,
                SocketAddr::from((b_ip, FLOOD_PORT)),
            )),
        ),
        (
            "flood A→absent MAC (unknown unicast, flooded)",
            Some(Flood::Udp(a_ns.clone(), a_ip, unknown)),
        ),
        (
            "ARP requests A→owned IP (each answered)",
            Some(Flood::ArpRequests(a_ns.clone(), ip)),
        ),
        (
            "ARP requests A→unowned IP (dropped)",
            Some(Flood::ArpRequests(a_ns.clone(), UNOWNED_IP)),
        ),
        ("idle again", None),
    ];
    Ok((sink, plan))
}

/// A phase of [`flood_plan`]: its name and what floods the LAN meanwhile (`None`: idle).
type PlannedPhase = (&'static str, Option<Flood>);

/// What a phase floods the LAN with, from a client namespace.
enum Flood {
    /// Minimum-size UDP datagrams from `.1` to `.2`.
    Udp(String, Ipv4Addr, SocketAddr),
    /// Broadcast ARP requests for `.1` (the speaker's responder socket receives each).
    ArpRequests(String, Ipv4Addr),
}

/// Measures the speaker's CPU time and its interface's received frames over `length`, while
/// (optionally) a thread in the flood's namespace sends as fast as it can for the same time.
async fn measure(
    pid: u32,
    tck: u64,
    node_ns: &str,
    name: &'static str,
    length: Duration,
    flood: Option<Flood>,
) -> anyhow::Result<Phase> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let flooder = flood.map(|flood| {
        tokio::task::spawn_blocking(move || {
            let netns = match &flood {
                Flood::Udp(netns, ..) | Flood::ArpRequests(netns, _) => netns.clone(),
            };
            within_netns(&netns, move || {
                let udp;
                let arp;
                let mut send: Box<dyn FnMut() -> std::io::Result<()>> = match flood {
                    Flood::Udp(_, from, to) => {
                        udp = UdpSocket::bind(SocketAddr::from((from, 0)))?;
                        udp.connect(to)?;
                        let payload = [0u8; 18]; // a minimum-size Ethernet frame (60 bytes + FCS)
                        Box::new(move || udp.send(&payload).map(drop))
                    }
                    Flood::ArpRequests(_, target) => {
                        arp = ferrolb_speaker::l2::capture::Client::open("eth0")?;
                        Box::new(move || arp.send_arp_request(target, None))
                    }
                };
                let (mut sent, mut errors) = (0u64, 0u64);
                let _ = ready_tx.send(());
                // Bounded: a little longer than the measured window so it covers all of it.
                let start = Instant::now();
                let deadline = start + length + Duration::from_millis(300);
                while Instant::now() < deadline {
                    match send() {
                        Ok(()) => sent += 1,
                        Err(_) => errors += 1,
                    }
                }
                Ok((sent, errors, start.elapsed()))
            })
        })
    });
    if flooder.is_some() {
        ready_rx.await.context("the flood did not start")?;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let rx0 = rx_packets(node_ns, "eth0")?;
    let c0 = cpu_sample(pid)?;
    let start = Instant::now();
    tokio::time::sleep(length).await;
    let c1 = cpu_sample(pid)?;
    let wall = start.elapsed();
    let rx1 = rx_packets(node_ns, "eth0")?;
    let (sent, send_errors, flood_time) = match flooder {
        Some(f) => f.await??,
        None => (0, 0, Duration::ZERO),
    };
    let phase = Phase {
        name,
        wall,
        cpu_ms: cpu_ms(c0, c1, tck),
        thread_ms: match (c0.thread_ns, c1.thread_ns) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / 1e6),
            _ => None,
        },
        rx_packets: rx1.saturating_sub(rx0),
        sent,
        send_errors,
        flood_time,
    };
    println!(
        "{name}: speaker {:.0} ms CPU ({:.2} % of a core) in {:.2} s; its eth0 received {} frames; {} packets sent in {:.2} s",
        phase.cpu_ms,
        phase.cpu_ms / wall.as_secs_f64() / 10.0,
        wall.as_secs_f64(),
        phase.rx_packets,
        phase.sent,
        phase.flood_time.as_secs_f64()
    );
    Ok(phase)
}

fn cpu_ms(a: CpuSample, b: CpuSample, tck: u64) -> f64 {
    b.ticks.saturating_sub(a.ticks) as f64 * 1000.0 / tck as f64
}
