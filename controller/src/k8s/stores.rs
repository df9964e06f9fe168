//! Reflectors (watch + in-memory store) for every kind the controller reads: Services,
//! IPAddressPools, L2Advertisements (pool `Ready` condition), Namespaces (namespace selectors),
//! Nodes (R10), the speakers' `IPConflict` Events (pool condition `AddressConflict`) and their
//! `L2Announcement` reports (the stale ones are deleted, issue #27 item 5). Each touched object
//! wakes the control loop; the loop then reads the stores as a whole (level-triggered).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use k8s_openapi::api::core::v1::{Namespace, Node};
use k8s_openapi::api::events::v1::Event;
use kube::runtime::reflector::{self, Store};

use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;

use ferrolb_crds::{IPAddressPool, L2Advertisement, L2Announcement};

use crate::k8s::service_watch::ServiceWatch;

/// Read-only views of the watched objects.
#[derive(Clone)]
pub struct Stores {
    /// All Services (every class: the class is decided per object), with only the labels the
    /// pools' `serviceSelectors` read.
    pub services: ServiceWatch,
    /// All IPAddressPools.
    pub pools: Store<IPAddressPool>,
    /// All L2Advertisements.
    pub l2: Store<L2Advertisement>,
    /// All Namespaces.
    pub namespaces: Store<Namespace>,
    /// All Nodes.
    pub nodes: Store<Node>,
    /// The `IPConflict` Events (`events.k8s.io/v1`, field selector `reason=IPConflict`): the
    /// speakers' reports of another host claiming an address ([`crate::conflicts`]).
    pub conflicts: Store<Event>,
    /// The speakers' `L2Announcement` reports in their namespace. Not part of
    /// [`Stores::wait_ready`]: without the CRD (an upgrade that skipped it) the controller still
    /// allocates; [`Stores::announcements_ready`] says when the list is in.
    pub announcements: Store<L2Announcement>,
    announcements_ready: Arc<AtomicBool>,
}

/// Drops what the controller never reads before an object enters a store, to keep memory
/// O(what we use): `managedFields` of other managers (ours tell whether we own a Service's
/// ingress; Services go through [`crate::service::trim`] instead) and the `last-applied-configuration`
/// annotation.
fn slim<K: Resource>(obj: &mut K) {
    let meta = obj.meta_mut();
    if let Some(fields) = meta.managed_fields.as_mut() {
        fields.retain(|m| m.manager.as_deref() == Some(crate::service::FIELD_MANAGER));
    }
    if let Some(a) = meta.annotations.as_mut() {
        a.remove("kubectl.kubernetes.io/last-applied-configuration");
    }
}

/// Node objects carry image lists and more; only addresses and labels are read.
fn slim_node(node: &mut Node) {
    slim(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
        status.conditions = None;
        status.node_info = None;
    }
}

fn spawn_reflector<K>(api: Api<K>, wake: Arc<Notify>, trim: fn(&mut K)) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    ferrolb_runtime::reflector::spawn(api, wake, trim).0
}

impl Stores {
    /// Starts every watch; the reports are watched in `announcement_namespace`. `wake` is
    /// notified on each change.
    pub fn start(client: &Client, wake: Arc<Notify>, announcement_namespace: &str) -> Stores {
        let announcements = spawn_reflector(
            Api::<L2Announcement>::namespaced(client.clone(), announcement_namespace),
            wake.clone(),
            slim,
        );
        let announcements_ready = Arc::new(AtomicBool::new(false));
        {
            let (store, ready, wake) = (
                announcements.clone(),
                announcements_ready.clone(),
                wake.clone(),
            );
            tokio::spawn(async move {
                if store.wait_until_ready().await.is_ok() {
                    ready.store(true, Ordering::Relaxed);
                    wake.notify_one();
                }
            });
        }
        Stores {
            announcements,
            announcements_ready,
            services: ServiceWatch::new(client, wake.clone()),
            pools: spawn_reflector(
                Api::<IPAddressPool>::all(client.clone()),
                wake.clone(),
                slim,
            ),
            l2: spawn_reflector(
                Api::<L2Advertisement>::all(client.clone()),
                wake.clone(),
                slim,
            ),
            namespaces: spawn_reflector(Api::<Namespace>::all(client.clone()), wake.clone(), slim),
            nodes: spawn_reflector(Api::<Node>::all(client.clone()), wake.clone(), slim_node),
            conflicts: ferrolb_runtime::reflector::spawn_filtered(
                Api::<Event>::all(client.clone()),
                Some(&format!(
                    "reason={}",
                    ferrolb_crds::conflict_event::REASON_IP_CONFLICT
                )),
                wake,
                slim,
            )
            .0,
        }
    }

    /// The Service label keys the pools' `serviceSelectors` read now
    /// ([`crate::service_labels::selector_label_keys`]).
    pub fn service_label_keys(&self) -> std::collections::BTreeSet<String> {
        crate::service_labels::selector_label_keys(self.pools.state().iter().map(AsRef::as_ref))
    }

    /// Whether the reports' watch has listed them (false while their CRD is missing).
    pub fn announcements_ready(&self) -> bool {
        self.announcements_ready.load(Ordering::Relaxed)
    }

    /// Waits until every store (but the reports') holds its initial list; the Services are read
    /// once the pools are in, with the labels their selectors read.
    ///
    /// # Errors
    /// A watch task ended before its first list.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.pools.wait_until_ready().await?;
        self.services
            .wait_until_ready(&self.service_label_keys())
            .await?;
        self.l2.wait_until_ready().await?;
        self.namespaces.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.conflicts.wait_until_ready().await
    }
}
