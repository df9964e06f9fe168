//! One watch → trimmed in-memory store, the same way in both binaries: `kube-runtime`'s watcher
//! with its default backoff, every object trimmed *before* it enters the store (so memory is
//! O(what the binary reads), DESIGN S13 and issue #9), each change waking the binary's
//! level-triggered loop through one [`Notify`].

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::StreamExt;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Starts watching `api`: returns the store (readable at once, complete after
/// `wait_until_ready`) and the task feeding it. The task logs watch errors and retries with
/// backoff; it ends only if the watch stream itself ends (logged as an error), so callers that
/// supervise it (the speaker) learn of a dead watch.
pub fn spawn<K>(api: Api<K>, wake: Arc<Notify>, trim: fn(&mut K)) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    spawn_filtered(api, None, wake, trim)
}

/// Like [`spawn`], watching only the objects that match `fields` (a field selector, e.g.
/// `reason=IPConflict` for Events), when given.
pub fn spawn_filtered<K>(
    api: Api<K>,
    fields: Option<&str>,
    wake: Arc<Notify>,
    trim: fn(&mut K),
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let mut config = watcher::Config::default().any_semantic();
    if let Some(fields) = fields {
        config = config.fields(fields);
    }
    let stream = watcher(api, config)
        .default_backoff()
        .modify(trim)
        .reflect(writer)
        .touched_objects();
    // One span per watch: its errors and its end carry `watch{kind=…}`.
    let span = tracing::info_span!("watch", kind = %kind);
    let task = tokio::spawn(
        async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(item) = stream.next().await {
                match item {
                    Ok(_) => wake.notify_one(),
                    Err(e) => {
                        tracing::warn!(kind, error = %e, "watch error (retrying with backoff)")
                    }
                }
            }
            tracing::error!(kind, "watch stream ended");
        }
        .instrument(span),
    );
    (reader, task)
}
