//! The Services' watch: every Service trimmed ([`crate::service::trim`]) and stripped of the
//! labels no pool's `serviceSelectors` reads ([`crate::service_labels`], issue #27 item 7), and
//! read again from the API server when the pools start reading a label key it dropped.
//!
//! A re-read is a second watch, started with the larger key set beside the first; until its
//! store holds the initial state, [`ServiceWatch::state`] answers `None` and the control loop
//! skips its pass (so no Service is allocated from a pool whose selector could not see its
//! labels); once it is in, the loop is woken, the new store replaces the old and the old watch is
//! stopped. The key set only grows for the life of the process: a pool that stops reading a key
//! costs nothing until the next restart, and the set holds only what the pools' selectors name,
//! which only those who may write pools choose (tenants who may create Services cannot add a
//! key). A standby makes the same re-reads ([`ServiceWatch::prepare`]), so its caches are warm
//! when it takes over.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};

use k8s_openapi::api::core::v1::Service;
use kube::runtime::reflector::{Store, store::WriterDropped};
use kube::{Api, Client};
use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;

/// One watch of every Service, keeping the labels of `keys`.
struct Read {
    store: Store<Service>,
    keys: BTreeSet<String>,
    /// True once the store holds its initial state. Set by the one task that awaits the store's
    /// readiness: `Store::wait_until_ready` wakes only its latest waiter (one oneshot receiver
    /// behind it), so nothing else may await or poll it while that task runs.
    ready: watch::Receiver<bool>,
    tasks: [JoinHandle<()>; 2],
}

impl Read {
    /// Starts a watch keeping `keys`; `wake` is notified on every change and once when the
    /// initial state is in.
    fn start(client: &Client, wake: &Arc<Notify>, keys: BTreeSet<String>) -> Read {
        let kept = keys.clone();
        let (store, watch) = ferrolb_runtime::reflector::spawn(
            Api::<Service>::all(client.clone()),
            wake.clone(),
            move |svc: &mut Service| {
                crate::service::trim(svc);
                crate::service_labels::keep_labels(svc, &kept);
            },
        );
        let (ready_tx, ready) = watch::channel(false);
        let announce = {
            let (store, wake) = (store.clone(), wake.clone());
            tokio::spawn(async move {
                if store.wait_until_ready().await.is_ok() {
                    ready_tx.send_replace(true);
                    wake.notify_one();
                }
            })
        };
        Read {
            store,
            keys,
            ready,
            tasks: [watch, announce],
        }
    }

    /// Whether the store holds its initial state.
    fn ready(&self) -> bool {
        *self.ready.borrow()
    }

    /// Waits until the store holds its initial state.
    ///
    /// # Errors
    /// The watch task ended before its first list.
    async fn until_ready(
        store: Store<Service>,
        mut ready: watch::Receiver<bool>,
    ) -> Result<(), WriterDropped> {
        if ready.wait_for(|r| *r).await.is_ok() {
            return Ok(());
        }
        // The announcing task has ended without the state: the store's readiness is settled
        // (an error) and may be awaited here alone.
        store.wait_until_ready().await
    }

    fn stop(self) {
        for t in self.tasks {
            t.abort();
        }
    }
}

/// The Services' store in use (none before the first is in) and, while one is being read, the
/// next (see the module docs).
#[derive(Default)]
struct Reads {
    current: Option<Read>,
    next: Option<Read>,
}

/// The Services' watch (see the module docs). Clones share it.
#[derive(Clone)]
pub struct ServiceWatch {
    client: Client,
    wake: Arc<Notify>,
    reads: Arc<Mutex<Reads>>,
}

impl ServiceWatch {
    /// A watch of every Service that starts reading when first asked for a state
    /// ([`ServiceWatch::wait_until_ready`] or [`ServiceWatch::state`]), with the label keys asked
    /// for. `wake` is notified on each change.
    pub fn new(client: &Client, wake: Arc<Notify>) -> ServiceWatch {
        ServiceWatch {
            client: client.clone(),
            wake,
            reads: Arc::default(),
        }
    }

    /// Every Service, with the labels of `keys` (and of any key asked for before): `None` while
    /// they are being read because `keys` names one the store in use dropped, or before the
    /// first read is in (the read wakes the loop when it is).
    pub fn state(&self, keys: &BTreeSet<String>) -> Option<Vec<Arc<Service>>> {
        self.step(keys).map(|s| s.state())
    }

    /// Whether a store with the labels of `keys` is in use; starts (or promotes) the read that
    /// makes one, as [`ServiceWatch::state`] does, without copying the state out. A standby
    /// calls it so that its caches are warm when it takes over.
    pub fn prepare(&self, keys: &BTreeSet<String>) -> bool {
        self.step(keys).is_some()
    }

    /// Promotes a finished read, starts one when `keys` needs it, and returns the store to read
    /// from (`None`: not yet).
    fn step(&self, keys: &BTreeSet<String>) -> Option<Store<Service>> {
        let mut reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
        let reads = &mut *reads;
        if let Some(next) = reads.next.take() {
            if !keys.is_subset(&next.keys) {
                next.stop();
            } else if next.ready() {
                if let Some(old) = reads.current.replace(next) {
                    old.stop();
                }
            } else {
                reads.next = Some(next);
            }
        }
        if let Some(current) = &reads.current
            && keys.is_subset(&current.keys)
        {
            return Some(current.store.clone());
        }
        if reads.next.is_none() {
            let held = reads.current.as_ref().map(|c| &c.keys);
            let wanted: BTreeSet<String> =
                held.into_iter().flatten().chain(keys).cloned().collect();
            if let Some(held) = held {
                tracing::info!(
                    keys = ?keys.difference(held).collect::<Vec<_>>(),
                    "a pool's serviceSelectors read Service labels the store dropped: reading every Service again"
                );
            }
            reads.next = Some(Read::start(&self.client, &self.wake, wanted));
        }
        None
    }

    /// Waits until a store with the labels of `keys` holds its initial state (starting its read
    /// if none has been).
    ///
    /// # Errors
    /// A watch task ended before its first list.
    pub async fn wait_until_ready(&self, keys: &BTreeSet<String>) -> Result<(), WriterDropped> {
        loop {
            if self.step(keys).is_some() {
                return Ok(());
            }
            let next = {
                let reads = self.reads.lock().unwrap_or_else(PoisonError::into_inner);
                reads
                    .next
                    .as_ref()
                    .map(|n| (n.store.clone(), n.ready.clone()))
            };
            if let Some((store, ready)) = next {
                Read::until_ready(store, ready).await?;
            }
        }
    }
}
