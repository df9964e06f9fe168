//! Leader election on a `coordination.k8s.io/v1` Lease (R13), via `kube-lease-manager`. Only the
//! leader writes; the standby keeps its watches warm and takes over within the lease duration.
//! A failing Lease manager is rebuilt after a pause; meanwhile this replica is not leader.

use std::time::Duration;

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;

/// Lease parameters.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Lease name.
    pub name: String,
    /// Lease namespace.
    pub namespace: String,
    /// This replica's identity.
    pub identity: String,
    /// Validity without renewal, seconds.
    pub duration: u64,
    /// Renew this many seconds before expiry.
    pub grace: u64,
}

/// Starts the election. The receiver reads `true` while this replica leads. Dropping every
/// receiver (or sending on `stop`) ends the election and releases the Lease.
pub fn start(
    client: Client,
    cfg: LeaseConfig,
    mut stop: watch::Receiver<bool>,
) -> (watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(false);
    let task = tokio::spawn(async move {
        loop {
            let built = LeaseManagerBuilder::new(client.clone(), cfg.name.clone())
                .with_namespace(cfg.namespace.clone())
                .with_identity(cfg.identity.clone())
                .with_duration(cfg.duration)
                .with_grace(cfg.grace)
                .with_field_manager("ferrolb-controller-lease")
                .build()
                .await;
            let manager = match built {
                Ok(m) => m,
                Err(e) => {
                    tracing::error!(error = %e, "cannot set up the Lease; retrying in 5s");
                    tokio::select! {
                        _ = tokio::time::sleep(Duration::from_secs(5)) => continue,
                        _ = stop.changed() => return,
                    }
                }
            };
            let (mut state, handle) = manager.watch().await;
            loop {
                let leading = *state.borrow_and_update();
                if *tx.borrow() != leading {
                    tracing::info!(leading, identity = %cfg.identity, "leadership changed");
                    let _ = tx.send(leading);
                }
                tokio::select! {
                    changed = state.changed() => if changed.is_err() { break },
                    _ = stop.changed() => {
                        let _ = tx.send(false);
                        drop(state);
                        match tokio::time::timeout(Duration::from_secs(3), handle).await {
                            Ok(Ok(Ok(m))) => { let _ = m.release().await; }
                            Ok(Ok(Err(e))) => tracing::warn!(error = %e, "lease manager ended with an error"),
                            _ => tracing::warn!("lease manager did not stop in time"),
                        }
                        return;
                    }
                }
            }
            let _ = tx.send(false);
            match handle.await {
                Ok(Err(e)) => tracing::error!(error = %e, "lease manager failed; retrying in 2s"),
                _ => tracing::warn!("lease manager stopped; retrying in 2s"),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    (rx, task)
}
