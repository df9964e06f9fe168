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
use ferrolb_controller::k8s::memberlist_secret;
use ferrolb_controller::k8s::stores::Stores;
use ferrolb_controller::k8s::uninstall::{self, Verdict};
use ferrolb_controller::metrics::Metrics;
use ferrolb_controller::service::ClassConfig;
use ferrolb_runtime::{admin, build_info, client::client, logging, shutdown};

/// jemalloc instead of glibc's malloc: the watch stores and the allocator hold many small
/// objects that change in bursts, and glibc's per-thread arenas kept ~10 % more resident memory
/// at 10,000 Services (docs/benchmarks.md, controller).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Everything after SIGTERM (the uninstall release, then the Lease release) fits in this, below
/// the pod's `terminationGracePeriodSeconds: 10` (`deploy/controller.yaml`).
const SHUTDOWN_BUDGET: Duration = Duration::from_millis(9500);
/// Longest wait for the Lease release (R13: the standby takes over at once).
const LEASE_RELEASE_WAIT: Duration = Duration::from_secs(4);

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

    // The version floor (issue #28 item 4): below it the speakers' admission policy denies
    // every report, so the install is refused here, loudly, before anything is written.
    tokio::select! {
        checked = ferrolb_controller::k8s::version::check_floor(&client) => {
            if let Err(refusal) = checked {
                tracing::error!(error = %refusal, "refusing to start");
                http.abort();
                anyhow::bail!("refusing to start: {refusal}");
            }
        }
        () = shutdown::signal() => {
            tracing::info!("shutting down before the Kubernetes version could be read");
            http.abort();
            return Ok(());
        }
    }

    let wake = Arc::new(Notify::new());
    let stores = Stores::start(&client, wake.clone(), &cfg.announcement_namespace());
    let (stop_tx, stop_rx) = watch::channel(false);
    let identity = cfg.identity();
    // The Lease's namespace is the controller's own (`FERROLB_LEASE_NAMESPACE` from the downward
    // API in deploy/controller.yaml): its deletion is the uninstall signal (issue #14).
    let namespace = cfg.lease_namespace();
    let (leader_rx, lease_task) = leader::start(
        client.clone(),
        LeaseConfig {
            name: cfg.lease_name.clone(),
            namespace: namespace.clone(),
            identity: identity.clone(),
            duration: cfg.lease_duration_secs(),
            grace: cfg.lease_grace_secs(),
        },
        stop_rx,
    );

    // The speakers' membership key (issue #27): created when absent, by every replica (the API
    // server lets one create win), independent of leadership and readiness.
    let key_task = cfg.create_memberlist_secret.then(|| {
        memberlist_secret::spawn(
            client.clone(),
            namespace.clone(),
            cfg.memberlist_secret.clone(),
        )
    });

    let ready_stores = stores.clone();
    let ready_flag = ready.clone();
    let leading = leader_rx.clone();
    let release_client = client.clone();
    let release_recorder = ferrolb_runtime::events::Publisher::new(
        client.clone(),
        Reporter {
            controller: "ferrolb.io/controller".into(),
            instance: Some(identity.clone()),
        },
    );
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
        announcement_namespace: cfg.announcement_namespace(),
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
    let stopping = tokio::time::Instant::now();
    main_loop.abort();
    if let Some(task) = &key_task {
        task.abort();
    }
    // Wait until the loop is gone, so no write of it starts after this point.
    let _ = main_loop.await;
    // Still holding the Lease: only the leader releases (issue #14, R13).
    if *leading.borrow() {
        release_if_uninstalling(
            &release_client,
            &release_recorder,
            &namespace,
            cfg.write_concurrency,
            stopping + uninstall::RELEASE_DEADLINE,
        )
        .await;
    } else {
        tracing::info!("shutting down: not leading, no Service status to release");
    }
    tracing::info!("shutting down: releasing the Lease");
    let _ = stop_tx.send(true);
    let lease_wait = LEASE_RELEASE_WAIT
        .min(SHUTDOWN_BUDGET.saturating_sub(stopping.elapsed()))
        .max(Duration::from_millis(500));
    let _ = tokio::time::timeout(lease_wait, lease_task).await;
    http.abort();
    Ok(())
}

/// On SIGTERM, as the leader: if the controller's namespace is being deleted (ferrolb is being
/// uninstalled, issue #14), releases every Service status it wrote before `deadline`, and logs
/// what was left; otherwise (restart, rolling update, drain, or the namespace cannot be read)
/// keeps them all.
async fn release_if_uninstalling(
    client: &kube::Client,
    recorder: &ferrolb_runtime::events::Publisher,
    namespace: &str,
    concurrency: usize,
    deadline: tokio::time::Instant,
) {
    match uninstall::namespace_verdict(client, namespace).await {
        Verdict::Alive => tracing::info!(
            namespace,
            "shutting down: namespace alive (restart, rolling update or drain), keeping every Service status"
        ),
        Verdict::Unknown(error) => tracing::warn!(
            namespace,
            error,
            "shutting down: cannot read the controller's namespace; not treated as an uninstall, keeping every Service status"
        ),
        Verdict::Uninstall => {
            tracing::info!(
                namespace,
                "shutting down: namespace being deleted, ferrolb is being uninstalled; releasing every Service status it wrote"
            );
            let started = tokio::time::Instant::now();
            let report = uninstall::release_all(
                client,
                recorder,
                &uninstall::namespace_deleted(namespace),
                concurrency,
                deadline,
            )
            .await;
            let left: Vec<String> = report
                .left
                .iter()
                .map(|(key, why)| format!("{key} ({why})"))
                .collect();
            if left.is_empty() && report.incomplete.is_none() {
                tracing::info!(
                    released = report.released.len(),
                    elapsed_ms = started.elapsed().as_millis(),
                    "released every Service status ferrolb wrote"
                );
            } else {
                tracing::warn!(
                    released = report.released.len(),
                    left = left.len(),
                    services = %left.join(", "),
                    incomplete = report.incomplete.as_deref().unwrap_or(""),
                    "uninstall: Service statuses left behind (clear them with kubectl, docs/install.md \"Uninstall\")"
                );
            }
        }
    }
}
