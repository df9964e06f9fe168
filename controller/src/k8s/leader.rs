//! Leader election on a `coordination.k8s.io/v1` Lease (R13), via `kube-lease-manager`. Only the
//! leader writes; the standby keeps its watches warm and takes over within the lease duration
//! after a crash, and **at once after a release** (a leader stopping on SIGTERM releases the
//! Lease): `kube-lease-manager` alone would let the standby sleep until the released Lease's old
//! expiry (up to `--lease-duration`), so a replacement pod starting in the meantime took the Lease
//! before the warm standby did (seen on real nodes, issue #14). Every replica therefore also
//! watches the Lease ([`signal`]): a standby that sees it released rebuilds its manager, whose
//! first step takes an unlocked Lease; a leader that sees it name someone else, released or
//! deleted stops leading at once (the library alone would keep publishing "leading" until its
//! next renewal failed). Each replica applies the Lease under its own field manager, so two taking
//! a free Lease at once conflict instead of both succeeding; a stopping standby never releases.
//! A failing Lease manager is rebuilt after a pause; meanwhile this replica is not leader.

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
        .boxed();
        loop {
            // No shared field manager: kube-lease-manager's default names the identity, so two
            // replicas applying for a free Lease at once conflict (409) instead of both
            // succeeding — which the Lease watch below makes likely (every standby wakes on the
            // same release event).
            let built = LeaseManagerBuilder::new(client.clone(), cfg.name.clone())
                .with_namespace(cfg.namespace.clone())
                .with_identity(cfg.identity.clone())
                .with_duration(cfg.duration)
                .with_grace(cfg.grace)
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
            let mut rebuild_now = false;
            loop {
                let leading = *state.borrow_and_update();
                if *tx.borrow() != leading {
                    tracing::info!(leading, identity = %cfg.identity, "leadership changed");
                    let _ = tx.send(leading);
                }
                tokio::select! {
                    changed = state.changed() => if changed.is_err() { break },
                    Some(event) = lease_events.next() => {
                        let signal = match &event {
                            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                                signal(Some(l), &cfg.identity, leading)
                            }
                            Ok(watcher::Event::Delete(_)) => signal(None, &cfg.identity, leading),
                            Ok(_) => LeaseSignal::Ignore,
                            Err(e) => {
                                tracing::debug!(error = %e, "Lease watch error (needs list/watch on leases)");
                                LeaseSignal::Ignore
                            }
                        };
                        match signal {
                            LeaseSignal::Ignore => {}
                            LeaseSignal::Take => {
                                tracing::info!(identity = %cfg.identity, "the Lease was released; taking it now");
                                rebuild_now = true;
                                break;
                            }
                            LeaseSignal::StepDown => {
                                tracing::warn!(identity = %cfg.identity, "the Lease no longer names this replica; stepping down");
                                rebuild_now = true;
                                break;
                            }
                        }
                    }
                    _ = stop.changed() => {
                        let _ = tx.send(false);
                        if leading {
                            // Dropping the receiver makes the manager release the Lease, once,
                            // and end.
                            drop(state);
                            match tokio::time::timeout(Duration::from_secs(3), handle).await {
                                Ok(Ok(Ok(_))) => {}
                                Ok(Ok(Err(e))) => tracing::warn!(error = %e, "lease manager ended with an error"),
                                _ => tracing::warn!("lease manager did not stop in time"),
                            }
                        } else {
                            // A standby never releases: its view of the Lease may be stale, and
                            // the manager's release on a closed channel would clear whoever
                            // holds it now if that view looks expired.
                            handle.abort();
                            let _ = handle.await;
                        }
                        return;
                    }
                }
            }
            let _ = tx.send(false);
            if rebuild_now {
                // Aborted before `state` is dropped, so the manager never runs its release.
                handle.abort();
                let _ = handle.await;
                continue;
            }
            match handle.await {
                Ok(Err(e)) => tracing::error!(error = %e, "lease manager failed; retrying in 2s"),
                _ => tracing::warn!("lease manager stopped; retrying in 2s"),
            }
            tokio::select! {
                _ = tokio::time::sleep(Duration::from_secs(2)) => {}
                _ = stop.changed() => return,
            }
        }
    });
    (rx, task)
}

/// What a Lease watch event asks of this replica.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseSignal {
    /// Nothing to do.
    Ignore,
    /// A standby sees the Lease released: rebuild the manager now, whose first step takes it.
    Take,
    /// A leader sees the Lease name someone else, released, or deleted: stop leading at once
    /// (the rebuilt manager leads again only if the API server says it holds the Lease). Safe in
    /// the direction of R13: at worst a short pause in writing, never two writers.
    StepDown,
}

/// The verdict on a Lease watch event: `lease` is the object applied (`None`: deleted),
/// `identity` this replica's, `leading` what it publishes now.
pub fn signal(lease: Option<&Lease>, identity: &str, leading: bool) -> LeaseSignal {
    let holder = lease
        .and_then(|l| l.spec.as_ref())
        .and_then(|s| s.holder_identity.as_deref())
        .filter(|h| !h.is_empty());
    match (leading, holder) {
        (true, Some(h)) if h == identity => LeaseSignal::Ignore,
        (true, _) => LeaseSignal::StepDown,
        (false, None) if lease.is_some() => LeaseSignal::Take,
        (false, _) => LeaseSignal::Ignore,
    }
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
    fn a_standby_takes_a_released_lease_and_a_leader_steps_down_when_it_is_not_named() {
        use LeaseSignal::{Ignore, StepDown, Take};
        let me = "ferrolb-controller-0";
        let other = "ferrolb-controller-1";
        // Standby.
        assert_eq!(signal(Some(&lease(None)), me, false), Take);
        assert_eq!(signal(Some(&lease(Some(""))), me, false), Take);
        assert_eq!(signal(Some(&lease(Some(other))), me, false), Ignore);
        assert_eq!(signal(Some(&lease(Some(me))), me, false), Ignore);
        assert_eq!(signal(None, me, false), Ignore);
        // Leader.
        assert_eq!(signal(Some(&lease(Some(me))), me, true), Ignore);
        assert_eq!(signal(Some(&lease(Some(other))), me, true), StepDown);
        assert_eq!(signal(Some(&lease(None)), me, true), StepDown);
        assert_eq!(signal(None, me, true), StepDown);
    }
}
