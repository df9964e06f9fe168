//! Leader election on a `coordination.k8s.io/v1` Lease (R13), via `kube-lease-manager`. Only the
//! leader writes; the standby keeps its watches warm and takes over within the lease duration
//! after a crash, and **at once after a release** (a leader stopping on SIGTERM releases the
//! Lease): `kube-lease-manager` alone would let the standby sleep until the released Lease's old
//! expiry (up to `--lease-duration`), so a replacement pod starting in the meantime took the Lease
//! before the warm standby did (seen on real nodes, issue #14). The standby therefore also watches
//! the Lease and, when it sees it released, rebuilds its manager, whose first step takes an
//! unlocked Lease. A failing Lease manager is rebuilt after a pause; meanwhile this replica is not
//! leader.

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client};
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
        let leases: Api<Lease> = Api::namespaced(client.clone(), &cfg.namespace);
        let mut lease_events = watcher(
            leases,
            watcher::Config::default().fields(&format!("metadata.name={}", cfg.name)),
        )
        .default_backoff()
        .applied_objects()
        .boxed();
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
            let mut released = false;
            loop {
                let leading = *state.borrow_and_update();
                if *tx.borrow() != leading {
                    tracing::info!(leading, identity = %cfg.identity, "leadership changed");
                    let _ = tx.send(leading);
                }
                tokio::select! {
                    changed = state.changed() => if changed.is_err() { break },
                    Some(event) = lease_events.next(), if !leading => {
                        if event.as_ref().is_ok_and(is_released) {
                            tracing::info!(identity = %cfg.identity, "the Lease was released; taking it now");
                            handle.abort();
                            released = true;
                            break;
                        }
                    }
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
            if released {
                let _ = handle.await;
                continue;
            }
            match handle.await {
                Ok(Err(e)) => tracing::error!(error = %e, "lease manager failed; retrying in 2s"),
                _ => tracing::warn!("lease manager stopped; retrying in 2s"),
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });
    (rx, task)
}

/// A Lease without a holder: what `kube-lease-manager`'s release leaves (it clears
/// `spec.holderIdentity`); an empty identity counts as none too.
pub fn is_released(lease: &Lease) -> bool {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .is_none_or(str::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::coordination::v1::LeaseSpec;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                ..LeaseSpec::default()
            }),
            ..Lease::default()
        }
    }

    #[test]
    fn a_lease_without_a_holder_is_released() {
        assert!(is_released(&lease(None)));
        assert!(is_released(&lease(Some(""))));
        assert!(is_released(&Lease::default()));
        assert!(!is_released(&lease(Some("ferrolb-controller-0"))));
    }
}
