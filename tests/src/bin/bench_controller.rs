//! `ferrolb-bench-controller`: the controller benchmark on the test cluster (DESIGN §7).
//!
//! 1. Creates N (default 5,000) LoadBalancer Services at once (IPv6 single-stack: the cluster's
//!    IPv4 ClusterIP range is a /26; `allocateLoadBalancerNodePorts: false`: the NodePort range
//!    holds only 2,768 ports) and reports the time until every one has its status.
//! 2. Restarts the controller and reports the number of Service status writes (must be 0), the
//!    time until `/readyz` answers 200, and the time until the new leader finished its first pass.
//!
//! ```text
//! cargo build --release -p ferrolb-controller
//! cargo run -p ferrolb-tests --bin ferrolb-bench-controller -- --services 5000
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Parser;
use k8s_openapi::api::core::v1::Service;
use kube::api::Api;

use ferrolb_tests::cluster::TestCluster;
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::lab::bench::proc_status_kib;
use ferrolb_tests::lab::compare_controller::{create_services, versions, when_all_have_status};
use ferrolb_tests::namespace;
use ferrolb_tests::objects::create_pool;

#[derive(Parser)]
#[command(about = "Benchmark the ferrolb controller on the test cluster")]
struct Cli {
    /// Number of Services.
    #[arg(long, default_value_t = 5000)]
    services: usize,
    /// Concurrent creations.
    #[arg(long, default_value_t = 64)]
    concurrency: usize,
    /// Controller binary; default: target/release/ferrolb-controller if built, else debug.
    #[arg(long)]
    controller: Option<PathBuf>,
}

fn start(cluster: &TestCluster, cli: &Cli, identity: &str) -> anyhow::Result<ControllerProcess> {
    let mut opts = ControllerOptions::new(identity).prefer_release().args(&[
        "--lease-duration=5s",
        "--lease-grace=2s",
        "--log-format=json",
    ]);
    if let Some(bin) = &cli.controller {
        opts.binary = Some(bin.clone());
    }
    println!(
        "controller binary: {}",
        opts.binary
            .as_ref()
            .map_or_else(|| "debug build".into(), |b| b.display().to_string())
    );
    ControllerProcess::start(cluster.kubeconfig(), cluster.dir(), &opts)
}

/// `VmRSS` (now) or `VmHWM` (peak) of a process, KiB.
fn proc_kib(pid: Option<u32>, field: &str) -> Option<u64> {
    proc_status_kib(pid?, field)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let cluster = TestCluster::start().await.context("test cluster")?;
    let client = cluster.client().await?;
    create_pool(&client, "bench", &["2001:db8:1::/112"]).await?;
    let ns = namespace::fresh(&client, "bench").await?;
    let first = start(&cluster, &cli, "bench-1")?;
    let t = Instant::now();
    while first.metric("ferrolb_controller_leader").await != Some(1.0) {
        if t.elapsed() > Duration::from_secs(30) {
            bail!("controller did not lead: {}", first.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Count Services with status as the watch sees them.
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    let total = cli.services;
    let done = when_all_have_status(api, total);
    let started = Instant::now();
    create_services(&client, &ns, total, cli.concurrency).await?;
    let created = started.elapsed();
    let all_done = tokio::time::timeout(Duration::from_secs(600), done)
        .await
        .context("Services did not all get status within 600 s")??;
    let alloc = all_done.duration_since(started);
    println!("services: {total}");
    println!(
        "create calls finished after: {:.2} s ({:.0} Services/s: the API server's create rate)",
        created.as_secs_f64(),
        total as f64 / created.as_secs_f64()
    );
    println!(
        "all have status after: {:.2} s ({:.0} Services/s; {:.3} of the create rate)",
        alloc.as_secs_f64(),
        total as f64 / alloc.as_secs_f64(),
        created.as_secs_f64() / alloc.as_secs_f64()
    );
    println!(
        "controller status writes: {:?}; RSS: {:?} KiB, peak RSS: {:?} KiB",
        first.metric("ferrolb_controller_status_writes_total").await,
        proc_kib(first.process().pid(), "VmRSS:"),
        proc_kib(first.process().pid(), "VmHWM:")
    );

    // Restart.
    let before = versions(&client, &ns).await?;
    if before.values().filter(|(_, s)| *s).count() != total {
        bail!("not every Service has status before the restart");
    }
    first.stop(Duration::from_secs(5));
    let restart = Instant::now();
    let second = start(&cluster, &cli, "bench-2")?;
    while second.get("/readyz").await.map(|(c, _)| c) != Some(200) {
        if restart.elapsed() > Duration::from_secs(120) {
            bail!("restarted controller not ready: {}", second.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ready = restart.elapsed();
    // First pass done as leader: the reconcile histogram has a sample.
    while second
        .metric("ferrolb_controller_reconcile_duration_seconds_count")
        .await
        .unwrap_or(0.0)
        < 1.0
    {
        if restart.elapsed() > Duration::from_secs(120) {
            bail!("restarted controller did no pass: {}", second.log_tail(20));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let first_pass = restart.elapsed();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = versions(&client, &ns).await?;
    let changed = before
        .iter()
        .filter(|(k, v)| after.get(*k) != Some(v))
        .count();
    println!(
        "restart: ready (/readyz 200) after {:.3} s",
        ready.as_secs_f64()
    );
    println!(
        "restart: first pass as leader done after {:.3} s",
        first_pass.as_secs_f64()
    );
    println!("restart: Services changed (resourceVersion): {changed}");
    println!(
        "restart: controller status writes: {:?}; RSS: {:?} KiB, peak RSS: {:?} KiB",
        second
            .metric("ferrolb_controller_status_writes_total")
            .await,
        proc_kib(second.process().pid(), "VmRSS:"),
        proc_kib(second.process().pid(), "VmHWM:")
    );
    second.stop(Duration::from_secs(5));
    if changed != 0 {
        bail!("{changed} Services were written during the restart");
    }
    Ok(())
}
