//! One watch → trimmed in-memory store, the same way in both binaries: `kube-runtime`'s watcher
//! with its default backoff, every object trimmed *before* it enters the store (so what is kept
//! is O(what the binary reads), DESIGN S13 and issue #9), each change waking the binary's
//! level-triggered loop through one [`Notify`].
//!
//! **Bounded reads (issue #27 item 7).** Trimming bounds what is *kept*; what is *read* at once
//! is bounded too, so that large objects on many Services (a tenant's 100 KiB annotations) cannot
//! push every speaker and the controller past their memory limit with one response:
//! - the initial state is read as a **streaming list** (`sendInitialEvents`, the API server's
//!   `WatchList` feature, on by default in Kubernetes 1.32 and from 1.34): one object per watch
//!   event, trimmed before the next is read, so at most one untrimmed object (≤ etcd's 1.5 MiB
//!   request limit) is in memory at a time;
//! - where the API server refuses it (`WatchList` off, the default of 1.33), the watch falls back,
//!   for the life of the process, to a **paged LIST** of [`LIST_PAGE_SIZE`] objects per response
//!   (most-recent semantics; `resourceVersion=0` would make the API server ignore `limit` and
//!   answer with the whole list from its cache — checked against 1.37 — though kube-rs already
//!   leaves it out when a limit is set).
//!
//! Before this, every watch read pages of kube-rs's default 500 objects (client-go's): 500
//! Services with a 100 KiB annotation each were one 49 MiB response, and the debug speaker peaked
//! at 128 MiB — its limit — the controller at 179 MiB, although both stored none of it.
//!
//! The lab test `speaker_memory_stays_bounded_by_what_it_stores`
//! (`tests/tests/memory_bounds.rs`) checks the speaker's peak RSS with 500 Services of 100 KiB each.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::Instrument;

/// Objects per response of the paged LIST the watches fall back to when the API server refuses
/// streaming lists. 20 objects of at most 1.5 MiB each (etcd's default request limit, so the
/// largest object the API server stores) are ≤ 30 MiB per page; the client holds a page about
/// three times while reading it (the body, its text and the decoded objects), ≤ 90 MiB, under
/// the speaker's 128 MiB limit. Realistic objects are far smaller (annotations are capped at
/// 256 KiB per object), and 10,000 Services still take only 500 requests.
pub const LIST_PAGE_SIZE: u32 = 20;

/// How a watch reads its initial state (and re-reads it after its resource version expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitialList {
    /// Streaming list, falling back to [`InitialList::Paged`] when the API server refuses it
    /// (the default).
    StreamingOrPaged,
    /// Paged LIST of [`LIST_PAGE_SIZE`] objects per response, most-recent semantics.
    Paged,
}

/// True when an API server's refusal of a streaming list's initial watch means "not supported
/// here" (`422 Invalid`: "sendInitialEvents is forbidden for watch unless the WatchList feature
/// gate is enabled"; `400` from older servers or proxies), not a permission or network error.
pub fn streaming_refused(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchStartFailed(kube::Error::Api(status))
            if status.code == 422 || status.code == 400
    )
}

/// The watch event stream of `api` (filtered by `fields`), read as `mode` says; see the module
/// docs. Errors are passed on (the caller backs off), except the one refusal of a streaming list
/// that switches this stream to paged LISTs.
pub fn events<K>(
    api: Api<K>,
    fields: Option<&str>,
    mode: InitialList,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    let mut config = watcher::Config::default();
    if let Some(fields) = fields {
        config = config.fields(fields);
    }
    let paged = config.clone().page_size(LIST_PAGE_SIZE);
    let (current, fallback): (BoxStream<'static, _>, _) = match mode {
        InitialList::StreamingOrPaged => (
            watcher(api.clone(), config.streaming_lists()).boxed(),
            Some((api, paged)),
        ),
        InitialList::Paged => (watcher(api, paged).boxed(), None),
    };
    futures::stream::unfold(
        (current, fallback),
        |(mut current, mut fallback)| async move {
            loop {
                let item = current.next().await?;
                if let Err(error) = &item
                    && streaming_refused(error)
                    && let Some((api, paged)) = fallback.take()
                {
                    tracing::info!(
                        %error,
                        page_size = LIST_PAGE_SIZE,
                        "the API server refuses streaming lists (WatchList off): reading paged lists"
                    );
                    current = watcher(api, paged).boxed();
                    continue;
                }
                return Some((item, (current, fallback)));
            }
        },
    )
}

/// Starts watching `api`: returns the store (readable at once, complete after
/// `wait_until_ready`) and the task feeding it. The task logs watch errors and retries with
/// backoff; it ends only if the watch stream itself ends (logged as an error), so callers that
/// supervise it (the speaker) learn of a dead watch.
pub fn spawn<K, T>(api: Api<K>, wake: Arc<Notify>, trim: T) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    T: FnMut(&mut K) + Send + 'static,
{
    spawn_filtered(api, None, wake, trim)
}

/// Like [`spawn`], watching only the objects that match `fields` (a field selector, e.g.
/// `reason=IPConflict` for Events), when given.
pub fn spawn_filtered<K, T>(
    api: Api<K>,
    fields: Option<&str>,
    wake: Arc<Notify>,
    trim: T,
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
    T: FnMut(&mut K) + Send + 'static,
{
    let (reader, writer) = reflector::store();
    let kind = K::kind(&K::DynamicType::default()).to_string();
    let stream = events(api, fields, InitialList::StreamingOrPaged)
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
