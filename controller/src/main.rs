//! `ferrolb-controller`: watches Services, IPAddressPools, L2Advertisements, Namespaces and Nodes,
//! assigns addresses while holding the Lease, and serves `/livez`, `/readyz`, `/metrics`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use clap::Parser;
use kube::runtime::events::Reporter;
use tokio::sync::{Notify, watch};

use ferrolb_controller::config::{Config, DEFAULT_ADMIN_ADDRESS};
use ferrolb_controller::contest::{MAX_WRITES, Policy as ContestPolicy};
use ferrolb_controller::http::Health;
use ferrolb_controller::k8s::control::Control;
use ferrolb_controller::k8s::leader::{self, LeaseConfig};
use ferrolb_controller::k8s::stores::Stores;
use ferrolb_controller::metrics::Metrics;
use ferrolb_controller::service::ClassConfig;
use ferrolb_runtime::{admin, build_info, client::client, logging, shutdown};

/// jemalloc instead of glibc's malloc: the watch stores and the allocator hold many small
/// objects that change in bursts, and glibc's per-thread arenas kept ~10 % more resident memory
/// at 10,000 Services (docs/benchmarks.md, controller).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let cfg = Config::parse();
    logging::init(cfg.shared.log_format(), "info");
    build_info::log_startup("ferrolb-controller");
    let client = client(cfg.shared.kubeconfig.as_deref()).await?;
    let metrics = Arc::new(Metrics::new());
    let ready = Arc::new(AtomicBool::new(false));
    let health = Health {
        ready: ready.clone(),
        metrics: metrics.clone(),
    };
    let admin_address = cfg.shared.admin_address(DEFAULT_ADMIN_ADDRESS);
    let http = tokio::spawn(async move {
        if let Err(e) = admin::serve(admin_address, Arc::new(health)).await {
            tracing::error!(error = %e, "admin endpoints failed");
        }
    });

    let wake = Arc::new(Notify::new());
    let stores = Stores::start(&client, wake.clone());
    let (stop_tx, stop_rx) = watch::channel(false);
    let identity = cfg.identity();
    let (leader_rx, lease_task) = leader::start(
        client.clone(),
        LeaseConfig {
            name: cfg.lease_name.clone(),
            namespace: cfg.lease_namespace(),
            identity: identity.clone(),
            duration: cfg.lease_duration_secs(),
            grace: cfg.lease_grace_secs(),
        },
        stop_rx,
    );

    let ready_stores = stores.clone();
    let ready_flag = ready.clone();
    let control = Control {
        client: client.clone(),
        class: ClassConfig {
            lb_class: cfg.lb_class.clone(),
            default_class: cfg.default_class,
        },
        stores,
        wake,
        leader: leader_rx,
        metrics,
        recorder: ferrolb_runtime::events::Publisher::new(
            client,
            Reporter {
                controller: "ferrolb.io/controller".into(),
                instance: Some(identity.clone()),
            },
        ),
        resync: cfg.resync(),
        concurrency: cfg.write_concurrency,
        contest: ContestPolicy {
            max_writes: MAX_WRITES,
            backoff: cfg.status_conflict_backoff(),
        },
    };
    tracing::info!(identity, lb_class = %cfg.lb_class, default_class = cfg.default_class, "configured");
    let main_loop = tokio::spawn(async move {
        if ready_stores.wait_ready().await.is_err() {
            tracing::error!("a watch ended before its first list");
            return;
        }
        ready_flag.store(true, Ordering::Relaxed);
        tracing::info!("watches synced; ready");
        control.run().await;
    });

    shutdown::signal().await;
    tracing::info!("shutting down: releasing the Lease");
    main_loop.abort();
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(4), lease_task).await;
    http.abort();
    Ok(())
}
