//! `ferrolb migrate --from-cluster`: the I/O edge that reads the cluster. Read-only — it only
//! gets and lists:
//!
//! - every kind of the `metallb.io` API group (found by discovery, each at its most stable served
//!   version — the group's preferred version, v1beta2, has only `BGPPeer` — with the dynamic API,
//!   since ferrolb has no Rust types for MetalLB's kinds) in MetalLB's namespace — the
//!   only namespace MetalLB reads — except the kinds in which MetalLB records state
//!   ([`STATE_KINDS`]); no `metallb.io` group (MetalLB ≤ 0.12, or none) is not an error;
//! - the legacy ConfigMap (`metallb-system/config` by default), if present;
//! - every Service, Node and Namespace (for the dry report, [`crate::migrate::services`]).
//!
//! The objects become [`Document`]s with source `cluster`, in that order (MetalLB's
//! `IPAddressPool`s, then `L2Advertisement`s, then its other kinds by name).

use anyhow::Context;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Service};
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::discovery::Discovery;
use serde_json::Value;

use crate::migrate::{Document, STATE_KINDS};

/// The API group of MetalLB's kinds.
pub const METALLB_GROUP: &str = "metallb.io";

/// The source name of everything read from the cluster.
pub const SOURCE: &str = "cluster";

/// What `--from-cluster` read.
#[derive(Clone, Debug, Default)]
pub struct ClusterInput {
    /// MetalLB's objects, its legacy ConfigMap and every Service.
    pub documents: Vec<Document>,
    /// Every Node.
    pub nodes: Vec<Node>,
    /// Every Namespace.
    pub namespaces: Vec<Namespace>,
}

/// Reads MetalLB's configuration from `metallb_namespace` (its kinds and the ConfigMap
/// `config_map`), and every Service, Node and Namespace.
///
/// # Errors
/// A request failed (unreachable API server, no permission to get or list one of them); the
/// error names what was being read.
pub async fn read(
    client: &Client,
    metallb_namespace: &str,
    config_map: &str,
) -> anyhow::Result<ClusterInput> {
    let mut values: Vec<Value> = Vec::new();

    let discovery = Discovery::new(client.clone())
        .filter(&[METALLB_GROUP])
        .run()
        .await
        .context("discovering the metallb.io API group")?;
    if let Some(group) = discovery.get(METALLB_GROUP) {
        let mut resources = group.resources_by_stability();
        let rank = |kind: &str| match kind {
            "IPAddressPool" => 0,
            "L2Advertisement" => 1,
            _ => 2,
        };
        resources.sort_by(|(a, _), (b, _)| (rank(&a.kind), &a.kind).cmp(&(rank(&b.kind), &b.kind)));
        for (ar, _) in resources {
            if STATE_KINDS.contains(&ar.kind.as_str()) {
                continue;
            }
            let api: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), metallb_namespace, &ar);
            let list = api.list(&ListParams::default()).await.with_context(|| {
                format!("listing {}.{} in {metallb_namespace}", ar.plural, ar.group)
            })?;
            for obj in list {
                let mut value = serde_json::to_value(&obj)?;
                if let Some(map) = value.as_object_mut() {
                    map.insert("apiVersion".into(), Value::String(ar.api_version.clone()));
                    map.insert("kind".into(), Value::String(ar.kind.clone()));
                }
                values.push(value);
            }
        }
    }

    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), metallb_namespace);
    if let Some(cm) = cms
        .get_opt(config_map)
        .await
        .with_context(|| format!("reading ConfigMap {metallb_namespace}/{config_map}"))?
    {
        values.push(serde_json::to_value(&cm)?);
    }

    let services: Api<Service> = Api::all(client.clone());
    for svc in services
        .list(&ListParams::default())
        .await
        .context("listing Services")?
    {
        values.push(serde_json::to_value(&svc)?);
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Nodes")?
        .items;
    let namespaces = Api::<Namespace>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing Namespaces")?
        .items;

    let documents = values
        .into_iter()
        .enumerate()
        .map(|(i, value)| Document {
            source: SOURCE.to_owned(),
            index: i + 1,
            value,
        })
        .collect();
    Ok(ClusterInput {
        documents,
        nodes,
        namespaces,
    })
}
