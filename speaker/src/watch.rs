//! Watches the objects the speaker reads (Services, EndpointSlices, Nodes, IPAddressPools,
//! L2Advertisements, the speaker Pods and DaemonSet of its namespace, and the L2Announcement
//! reports it writes) into kube-runtime reflector stores, each object trimmed to what the speaker
//! reads first ([`crate::trim`], DESIGN S13). Every event wakes the daemon through one
//! [`Notify`]; the daemon then recomputes its plan from the stores (level-triggered), never from
//! the single event that arrived.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use ferrolb_crds::{IPAddressPool, L2Advertisement, L2Announcement};
use ferrolb_runtime::reflector::{spawn, spawn_filtered};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::{Api, Client, Resource};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::trim;
use crate::view::{SPEAKER_DAEMONSET, View, ViewSettings, build, dropped_voters, speaker_nodes};

/// The reflector stores.
#[derive(Clone)]
pub struct Stores {
    /// Services, all namespaces.
    pub services: Store<Service>,
    /// EndpointSlices, all namespaces.
    pub slices: Store<EndpointSlice>,
    /// Nodes.
    pub nodes: Store<Node>,
    /// IPAddressPools.
    pub pools: Store<IPAddressPool>,
    /// L2Advertisements.
    pub advertisements: Store<L2Advertisement>,
    /// The L2Announcement reports in the speakers' namespace (written, never decided from).
    pub announcements: Store<L2Announcement>,
    /// The Pods of the speakers' namespace: which Nodes run a speaker, so vote (issue #32 G3,
    /// [`crate::view::speaker_nodes`]).
    pub pods: Store<Pod>,
    /// The speaker DaemonSet, for its dropped-voters annotation (issue #32 G3; never waited
    /// for: speakers outside a DaemonSet have none).
    pub daemon_sets: Store<DaemonSet>,
    /// The largest `metadata.resourceVersion` any watch the speaker decides from has delivered
    /// (deletions included, the L2Announcement reports left out: the speakers write them), as
    /// an integer: [`View::revision`].
    pub revision: Arc<AtomicU64>,
}

/// `trim`, after recording `object`'s resourceVersion into `revision` (the largest wins; one
/// that is not an integer counts as 0, KEP-5504's comparison rule).
fn tracked<K: Resource>(
    revision: &Arc<AtomicU64>,
    mut trim: impl FnMut(&mut K) + Send + 'static,
) -> impl FnMut(&mut K) + Send + 'static {
    let revision = revision.clone();
    move |object: &mut K| {
        let rv = object
            .meta()
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0);
        revision.fetch_max(rv, Ordering::Relaxed);
        trim(object);
    }
}

impl Stores {
    /// Starts all watches; `changed` is notified on every event. L2Announcements and Pods are
    /// watched in `namespace` only.
    pub fn start(
        client: &Client,
        changed: &Arc<Notify>,
        namespace: &str,
    ) -> (Stores, Vec<JoinHandle<()>>) {
        let revision = Arc::new(AtomicU64::new(0));
        let (services, a) = spawn(
            Api::all(client.clone()),
            changed.clone(),
            tracked(&revision, trim::service),
        );
        let (slices, b) = spawn(
            Api::all(client.clone()),
            changed.clone(),
            tracked(&revision, trim::endpoint_slice),
        );
        let (nodes, c) = spawn(
            Api::all(client.clone()),
            changed.clone(),
            tracked(&revision, trim::node),
        );
        let (pools, d) = spawn(
            Api::all(client.clone()),
            changed.clone(),
            tracked(&revision, trim::pool),
        );
        let (advertisements, e) = spawn(
            Api::all(client.clone()),
            changed.clone(),
            tracked(&revision, trim::advertisement),
        );
        let (announcements, f) = spawn(
            Api::namespaced(client.clone(), namespace),
            changed.clone(),
            trim::announcement,
        );
        let (pods, g) = spawn(
            Api::namespaced(client.clone(), namespace),
            changed.clone(),
            tracked(&revision, trim::pod),
        );
        let (daemon_sets, h) = spawn_filtered(
            Api::namespaced(client.clone(), namespace),
            Some(&format!("metadata.name={SPEAKER_DAEMONSET}")),
            changed.clone(),
            tracked(&revision, trim::daemon_set),
        );
        (
            Stores {
                services,
                slices,
                nodes,
                pools,
                advertisements,
                announcements,
                pods,
                daemon_sets,
                revision,
            },
            vec![a, b, c, d, e, f, g, h],
        )
    }

    /// Waits until every store the speaker decides from has its initial list — the Pods too,
    /// so the voters seeded from the first view are the Nodes that run a speaker (issue #32
    /// G3). The
    /// L2Announcement reports are not waited for: a cluster without their CRD (an upgrade that
    /// skipped it) or without the RBAC for them must still be served; see
    /// [`Stores::announcements_ready`].
    ///
    /// # Errors
    /// A reflector stopped before its first list.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.pools.wait_until_ready().await?;
        self.pods.wait_until_ready().await?;
        self.advertisements.wait_until_ready().await
    }

    /// A flag that turns true once the L2Announcement store has its initial list (never, if the
    /// CRD or the permission to read it is missing; the watch keeps retrying and logs why).
    pub fn announcements_ready(&self) -> Arc<std::sync::atomic::AtomicBool> {
        let flag = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (store, set) = (self.announcements.clone(), flag.clone());
        tokio::spawn(async move {
            if store.wait_until_ready().await.is_ok() {
                set.store(true, std::sync::atomic::Ordering::Relaxed);
            }
        });
        flag
    }

    /// The current [`View`].
    pub fn view(&self, settings: &ViewSettings) -> View {
        let services = self.services.state();
        let slices = self.slices.state();
        let nodes = self.nodes.state();
        let pools = self.pools.state();
        let advertisements = self.advertisements.state();
        let pods = self.pods.state();
        // Read before the stores. It is raised as an event is trimmed, a moment before its
        // store applies it, so it may run one event in flight ahead of the stores: the change
        // notice that follows re-reads both.
        let revision = self.revision.load(Ordering::Relaxed);
        let mut view = build(
            settings,
            &services.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &slices.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &nodes.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &pools.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &advertisements.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        );
        view.cluster.speaker_nodes =
            speaker_nodes(&pods.iter().map(AsRef::as_ref).collect::<Vec<_>>());
        let daemon_sets = self.daemon_sets.state();
        view.cluster.dropped_voters =
            dropped_voters(&daemon_sets.iter().map(AsRef::as_ref).collect::<Vec<_>>());
        view.revision = revision;
        view
    }

    /// A Service by `namespace/name`.
    pub fn service(&self, key: &str) -> Option<Arc<Service>> {
        let (ns, name) = key.split_once('/')?;
        self.services
            .get(&reflector::ObjectRef::new(name).within(ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The view revision is the largest resourceVersion read, before trimming; one that is not
    /// an integer counts for nothing (issue #32 G5.8).
    #[test]
    fn the_revision_is_the_largest_resource_version_read() {
        let revision = Arc::new(AtomicU64::new(0));
        let trimmed = Arc::new(AtomicU64::new(0));
        let counted = trimmed.clone();
        let mut see = tracked(&revision, move |node: &mut Node| {
            counted.fetch_add(1, Ordering::Relaxed);
            node.metadata.labels = None;
        });
        for rv in [
            Some("120"),
            Some("95"),
            Some("not-a-number"),
            None,
            Some("121"),
        ] {
            let mut node = Node::default();
            node.metadata.resource_version = rv.map(String::from);
            see(&mut node);
        }
        assert_eq!(revision.load(Ordering::Relaxed), 121);
        assert_eq!(
            trimmed.load(Ordering::Relaxed),
            5,
            "every object is still trimmed"
        );
    }
}
