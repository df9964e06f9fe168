//! Watches the objects the speaker reads (Services, EndpointSlices, Nodes, IPAddressPools,
//! L2Advertisements) into kube-runtime reflector stores. Every event wakes the daemon through one
//! [`Notify`]; the daemon then recomputes its plan from the stores (level-triggered), never from
//! the single event that arrived.

use std::fmt::Debug;
use std::hash::Hash;
use std::sync::Arc;

use ferrolb_crds::{IPAddressPool, L2Advertisement};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::view::{View, ViewSettings, build};

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
}

fn spawn_reflector<K>(api: Api<K>, changed: Arc<Notify>) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + Hash + Clone + Send + Sync,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, watcher::Config::default()))
        .default_backoff()
        .for_each(move |event| {
            if let Err(e) = event {
                tracing::warn!(error = %e, kind = %K::kind(&K::DynamicType::default()), "watch error; retrying");
            }
            changed.notify_one();
            futures::future::ready(())
        });
    (reader, tokio::spawn(stream))
}

impl Stores {
    /// Starts all watches; `changed` is notified on every event.
    pub fn start(client: &Client, changed: &Arc<Notify>) -> (Stores, Vec<JoinHandle<()>>) {
        let (services, a) = spawn_reflector(Api::all(client.clone()), changed.clone());
        let (slices, b) = spawn_reflector(Api::all(client.clone()), changed.clone());
        let (nodes, c) = spawn_reflector(Api::all(client.clone()), changed.clone());
        let (pools, d) = spawn_reflector(Api::all(client.clone()), changed.clone());
        let (advertisements, e) = spawn_reflector(Api::all(client.clone()), changed.clone());
        (
            Stores {
                services,
                slices,
                nodes,
                pools,
                advertisements,
            },
            vec![a, b, c, d, e],
        )
    }

    /// Waits until every store has its initial list.
    ///
    /// # Errors
    /// A reflector stopped before its first list.
    pub async fn wait_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        self.services.wait_until_ready().await?;
        self.slices.wait_until_ready().await?;
        self.nodes.wait_until_ready().await?;
        self.pools.wait_until_ready().await?;
        self.advertisements.wait_until_ready().await
    }

    /// The current [`View`].
    pub fn view(&self, settings: &ViewSettings) -> View {
        let services = self.services.state();
        let slices = self.slices.state();
        let nodes = self.nodes.state();
        let pools = self.pools.state();
        let advertisements = self.advertisements.state();
        build(
            settings,
            &services.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &slices.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &nodes.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &pools.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
            &advertisements.iter().map(AsRef::as_ref).collect::<Vec<_>>(),
        )
    }

    /// A Service by `namespace/name`.
    pub fn service(&self, key: &str) -> Option<Arc<Service>> {
        let (ns, name) = key.split_once('/')?;
        self.services
            .get(&reflector::ObjectRef::new(name).within(ns))
    }
}
