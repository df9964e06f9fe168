//! `ferrolb-demo`: the one-command demo of issue 5 (see `docs/demo.md`; `demo.sh` builds and runs
//! it). Needs root on Linux, `ip`, `nft` (package `nftables`) and, for one line of evidence,
//! `conntrack`.
//!
//! ```text
//! ferrolb-demo [--verbose] [--requests N] [--proxy-mode nftables|iptables] [--implementation ferrolb|metallb]
//! ferrolb-demo --real-nodes [--upgrade]
//! ```
//! `--implementation metallb` tells the same story with MetalLB's controller and speakers (built
//! from its Go module by `tests/metallb/build.sh`, issue #11) on the same lab, to compare.
//! `--real-nodes` runs the real-node story instead (issue #14,
//! `ferrolb_tests::lab::real_nodes::story`): three nodes with containerd and kubelet, ferrolb
//! installed with `kubectl apply -k deploy/` from images built offline, a failover by deleting a
//! speaker pod, a leader change by deleting a controller pod, and the uninstall; with
//! `--upgrade`, the day-two work of issue #29 before the uninstall too (the controller's and the
//! speakers' roll-outs — a restart and an image change — with every IP probed and requested over
//! HTTP throughout, a drain, a node's hard stop, a whole-cluster power cycle).
//! Exits 0 when every step reached its goal, 1 otherwise. Ctrl-C tears the lab down too.

use std::process::ExitCode;

use clap::Parser;
use ferrolb_tests::lab::Implementation;
use ferrolb_tests::lab::demo::{self, DemoOptions};
use ferrolb_tests::lab::kube_proxy::ProxyMode;
use ferrolb_tests::lab::real_nodes::story;

#[derive(Parser)]
#[command(
    name = "ferrolb-demo",
    about = "ferrolb end to end: a real API server, kube-proxy (nftables or iptables) and speakers in network namespaces, one LoadBalancer Service, ARP, HTTP and a failover"
)]
struct Cli {
    /// Also show kube-proxy's nftables rules for the external IP on the owner node, and the log directory.
    #[arg(long, short)]
    verbose: bool,
    /// HTTP requests sent in step 5 (at least 30, so that every backend is expected to answer).
    #[arg(long, default_value_t = 300, value_parser = clap::value_parser!(u64).range(30..=100_000))]
    requests: u64,
    /// kube-proxy's mode on every node: `nftables` or `iptables` (the default of minikube and
    /// kind). IPVS needs kernel modules this lab cannot assume; see docs/datapath.md.
    #[arg(long, env = "FERROLB_DEMO_PROXY_MODE", default_value = "nftables", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<ProxyMode>()))]
    proxy_mode: ProxyMode,
    /// Whose controller and speakers run: `ferrolb`, or `metallb` (v0.15.2 from its Go module,
    /// built by tests/metallb/build.sh on first use) to see the same story with MetalLB.
    #[arg(long, env = "FERROLB_DEMO_IMPLEMENTATION", default_value = "ferrolb", value_parser = clap::builder::ValueParser::new(|s: &str| s.parse::<Implementation>()))]
    implementation: Implementation,
    /// Run the story on real nodes (kubelet + containerd in each node namespace, ferrolb's pods
    /// from `kubectl apply -k deploy/`) instead of processes; `--verbose`, `--requests` and
    /// `--proxy-mode` do not apply; `--implementation metallb` is refused.
    #[arg(long, env = "FERROLB_DEMO_REAL_NODES")]
    real_nodes: bool,
    /// With `--real-nodes`: also the day-two work (issue #29; docs/operations.md) — the
    /// controller's and the speakers' roll-outs (a restart, then an image change), what a client
    /// sending HTTP requests through every IP counted meanwhile, a drain, a node's hard stop and a
    /// whole-cluster power cycle. About 4 more minutes.
    #[arg(long, requires = "real_nodes")]
    upgrade: bool,
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "warn,kube_client=off".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    if !nix::unistd::geteuid().is_root() {
        eprintln!("ferrolb-demo creates network namespaces: run it as root (sudo ./demo.sh)");
        return ExitCode::FAILURE;
    }
    if cli.real_nodes && cli.implementation != Implementation::Ferrolb {
        eprintln!("ferrolb-demo: --real-nodes installs ferrolb's manifests; it runs ferrolb only");
        return ExitCode::FAILURE;
    }
    let opts = DemoOptions {
        verbose: cli.verbose,
        requests: usize::try_from(cli.requests).unwrap_or(300),
        proxy_mode: cli.proxy_mode,
        implementation: cli.implementation,
    };
    let mut out = std::io::stdout();
    // Dropping the demo's future (Ctrl-C) drops the lab, which stops every process and deletes
    // every namespace.
    let (real_nodes, day_two) = (cli.real_nodes, cli.upgrade);
    let run = async move {
        if real_nodes {
            story::run(3, day_two, &mut out).await.map(|_| ())
        } else {
            demo::run(&opts, &mut out).await.map(|_| ())
        }
    };
    let outcome = tokio::select! {
        r = run => r,
        _ = tokio::signal::ctrl_c() => {
            // The demo's future, and with it the lab, is dropped by now; don't wait for
            // requests still in flight on blocking threads.
            eprintln!("ferrolb-demo: interrupted; lab torn down");
            std::process::exit(130);
        }
    };
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrolb-demo failed: {e:#}");
            ExitCode::FAILURE
        }
    }
}
