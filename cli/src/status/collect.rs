//! The I/O edge of `ferrolb status`: reads (never writes) what [`super::report`] needs with the
//! kube client. A read that is refused (403) or whose kind is not installed (404) leaves its part
//! empty or unknown rather than failing the whole report, since a user with partial rights
//! still wants the rest; any other failure (the API server unreachable) is an error.

use anyhow::Context;
use ferrolb_crds::service::ClassFilter;
use ferrolb_crds::{IPAddressPool, L2Advertisement, L2Announcement};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Secret, Service};
use kube::api::{Api, ListParams};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

use super::{Collected, ServerVersion};

/// Where ferrolb and MetalLB live, and which Services are ours.
#[derive(Clone, Debug)]
pub struct Options {
    /// ferrolb's namespace.
    pub namespace: String,
    /// The membership-key Secret in it.
    pub key_secret: String,
    /// The speakers' DaemonSet in it.
    pub speaker_daemonset: String,
    /// MetalLB's namespace.
    pub metallb_namespace: String,
    /// Which Services are ours.
    pub class: ClassFilter,
}

/// 403 or 404: the part is reported empty or unknown.
fn tolerated(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 403 || s.code == 404)
}

async fn list<K>(api: Api<K>, what: &str, params: &ListParams) -> anyhow::Result<Vec<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.list(params).await {
        Ok(list) => Ok(list.items),
        Err(e) if tolerated(&e) => Ok(Vec::new()),
        Err(e) => Err(e).with_context(|| format!("listing {what}")),
    }
}

async fn get<K>(api: Api<K>, name: &str, what: &str) -> anyhow::Result<Option<K>>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.get_opt(name).await {
        Ok(v) => Ok(v),
        Err(e) if tolerated(&e) => Ok(None),
        Err(e) => Err(e).with_context(|| format!("reading {what}")),
    }
}

/// Reads everything [`super::report`] needs.
///
/// # Errors
/// The API server is unreachable or answers a read with an error other than 403 or 404; the
/// error names what was being read.
pub async fn read(client: &Client, opts: &Options) -> anyhow::Result<Collected> {
    let version = client
        .apiserver_version()
        .await
        .ok()
        .map(|v| ServerVersion {
            git_version: v.git_version,
            major: v.major,
            minor: v.minor,
            emulation: v.emulation_major.zip(v.emulation_minor),
        });
    let all = ListParams::default();
    let ns = opts.namespace.as_str();
    let mns = opts.metallb_namespace.as_str();
    let namespace = get(Api::<Namespace>::all(client.clone()), ns, "the namespace").await?;
    // Existence only: a metadata read, so no Secret content is ever fetched.
    let key_exists = match Api::<Secret>::namespaced(client.clone(), ns)
        .get_metadata_opt(&opts.key_secret)
        .await
    {
        Ok(v) => v.is_some(),
        Err(e) if tolerated(&e) => false,
        Err(e) => return Err(e).context("reading the membership key Secret's metadata"),
    };
    let service_events = list(
        Api::<Event>::all(client.clone()),
        "Events",
        &ListParams::default().fields("involvedObject.kind=Service,type=Warning"),
    )
    .await?;
    Ok(Collected {
        version,
        namespace_name: ns.to_owned(),
        namespace,
        key_secret: (opts.key_secret.clone(), key_exists),
        pools: list(
            Api::<IPAddressPool>::all(client.clone()),
            "IPAddressPools",
            &all,
        )
        .await?,
        advertisements: list(
            Api::<L2Advertisement>::all(client.clone()),
            "L2Advertisements",
            &all,
        )
        .await?,
        announcements: list(
            Api::<L2Announcement>::namespaced(client.clone(), ns),
            "L2Announcements",
            &all,
        )
        .await?,
        services: list(Api::<Service>::all(client.clone()), "Services", &all).await?,
        service_events,
        nodes: list(Api::<Node>::all(client.clone()), "Nodes", &all).await?,
        speaker_daemonset: get(
            Api::<DaemonSet>::namespaced(client.clone(), ns),
            &opts.speaker_daemonset,
            "the speakers' DaemonSet",
        )
        .await?,
        kube_proxy: get(
            Api::<ConfigMap>::namespaced(client.clone(), "kube-system"),
            "kube-proxy",
            "kube-system/kube-proxy",
        )
        .await?,
        metallb_namespace_name: mns.to_owned(),
        metallb_namespace: get(
            Api::<Namespace>::all(client.clone()),
            mns,
            "MetalLB's namespace",
        )
        .await?,
        metallb_deployments: list(
            Api::<Deployment>::namespaced(client.clone(), mns),
            "MetalLB's Deployments",
            &all,
        )
        .await?,
        metallb_daemonsets: list(
            Api::<DaemonSet>::namespaced(client.clone(), mns),
            "MetalLB's DaemonSets",
            &all,
        )
        .await?,
        class: opts.class.clone(),
    })
}
