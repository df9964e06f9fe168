//! Builders for the objects the end-to-end tests create: pools, advertisements, LoadBalancer
//! Services, their status (as a controller would write it) and EndpointSlices (as the
//! EndpointSlice controller would — there is none in the test cluster).

use std::collections::BTreeMap;

use ferrolb_crds::{IPAddressPool, IPAddressPoolSpec, L2Advertisement, L2AdvertisementSpec};
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

/// Creates an IPAddressPool with default options.
///
/// # Errors
/// The API server refused it.
pub async fn create_pool(client: &Client, name: &str, addresses: &[&str]) -> anyhow::Result<()> {
    let pool = IPAddressPool::new(
        name,
        IPAddressPoolSpec {
            addresses: addresses.iter().map(|a| (*a).into()).collect(),
            auto_assign: true,
            avoid_buggy_ips: false,
            allow_sharing_across_namespaces: false,
            service_allocation: None,
            auto_addresses: None,
        },
    );
    Api::<IPAddressPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await?;
    Ok(())
}

/// Creates (or replaces, server-side apply) an L2Advertisement.
///
/// # Errors
/// The API server refused it.
pub async fn apply_l2(
    client: &Client,
    name: &str,
    spec: L2AdvertisementSpec,
) -> anyhow::Result<()> {
    let adv = L2Advertisement::new(name, spec);
    Api::<L2Advertisement>::all(client.clone())
        .patch(
            name,
            &PatchParams::apply("ferrolb-tests").force(),
            &Patch::Apply(&adv),
        )
        .await?;
    Ok(())
}

/// A LoadBalancer Service selecting `app=<name>` with the given `(protocol, port)` list.
pub fn lb_service(namespace: &str, name: &str, ports: &[(&str, i32)], etp: &str) -> Service {
    Service {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.into()),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            external_traffic_policy: Some(etp.into()),
            selector: Some(BTreeMap::from([("app".to_string(), name.to_string())])),
            ports: Some(
                ports
                    .iter()
                    .map(|(proto, port)| ServicePort {
                        name: Some(format!("{}-{port}", proto.to_lowercase())),
                        protocol: Some((*proto).into()),
                        port: *port,
                        ..Default::default()
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Creates a Service.
///
/// # Errors
/// The API server refused it.
pub async fn create_service(client: &Client, svc: &Service) -> anyhow::Result<()> {
    let ns = svc.metadata.namespace.as_deref().unwrap_or("default");
    Api::<Service>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), svc)
        .await?;
    Ok(())
}

/// Every `status.loadBalancer.ingress[].ip` of `svc`, in order (empty without a status).
pub fn ingress_ips(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .map(|i| i.iter().filter_map(|e| e.ip.clone()).collect())
        .unwrap_or_default()
}

/// The first IPv4 ingress in `namespace/name`'s status, once a controller wrote one; `None` before
/// (or when the Service is missing or its first ingress is not IPv4).
pub async fn ingress_v4(
    client: &Client,
    namespace: &str,
    name: &str,
) -> Option<std::net::Ipv4Addr> {
    let svc = Api::<Service>::namespaced(client.clone(), namespace)
        .get(name)
        .await
        .ok()?;
    svc.status?
        .load_balancer?
        .ingress?
        .first()?
        .ip
        .as_deref()?
        .parse()
        .ok()
}

/// Writes `status.loadBalancer.ingress` as a controller would (field manager `ferrolb-tests`).
///
/// # Errors
/// The API server refused the patch.
pub async fn set_ingress(
    client: &Client,
    namespace: &str,
    name: &str,
    ips: &[&str],
) -> anyhow::Result<()> {
    let ingress: Vec<_> = ips
        .iter()
        .map(|ip| serde_json::json!({ "ip": ip, "ipMode": "VIP" }))
        .collect();
    let patch = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "status": { "loadBalancer": { "ingress": ingress } }
    });
    Api::<Service>::namespaced(client.clone(), namespace)
        .patch_status(
            name,
            &PatchParams::apply("ferrolb-tests").force(),
            &Patch::Apply(&patch),
        )
        .await?;
    Ok(())
}

/// One endpoint for [`apply_endpoints`]: `(address, nodeName, ready, serving, terminating)`.
pub type EndpointSpec<'a> = (&'a str, Option<&'a str>, bool, bool, bool);

/// Creates or replaces the EndpointSlice `<service>-lab` (`addressType: IPv4`) of a Service.
///
/// # Errors
/// The API server refused it.
pub async fn apply_endpoints(
    client: &Client,
    namespace: &str,
    service: &str,
    port: i32,
    endpoints: &[EndpointSpec<'_>],
) -> anyhow::Result<()> {
    apply_endpoints_of(client, namespace, service, "IPv4", port, endpoints).await
}

/// Creates or replaces an EndpointSlice of a Service with `addressType` `address_type`
/// (`"IPv4"` or `"IPv6"`): named `<service>-lab` for IPv4, `<service>-lab-ipv6` for IPv6 — one
/// slice per family, as the EndpointSlice controller writes them for a dual-stack Service.
///
/// # Errors
/// The API server refused it.
pub async fn apply_endpoints_of(
    client: &Client,
    namespace: &str,
    service: &str,
    address_type: &str,
    port: i32,
    endpoints: &[EndpointSpec<'_>],
) -> anyhow::Result<()> {
    let name = if address_type == "IPv4" {
        format!("{service}-lab")
    } else {
        format!("{service}-lab-{}", address_type.to_lowercase())
    };
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            namespace: Some(namespace.into()),
            name: Some(name.clone()),
            labels: Some(BTreeMap::from([
                (
                    "kubernetes.io/service-name".to_string(),
                    service.to_string(),
                ),
                (
                    "endpointslice.kubernetes.io/managed-by".to_string(),
                    "ferrolb-lab".to_string(),
                ),
            ])),
            ..Default::default()
        },
        address_type: address_type.into(),
        endpoints: Some(
            endpoints
                .iter()
                .map(|(addr, node, ready, serving, terminating)| Endpoint {
                    addresses: vec![(*addr).into()],
                    node_name: node.map(Into::into),
                    conditions: Some(EndpointConditions {
                        ready: Some(*ready),
                        serving: Some(*serving),
                        terminating: Some(*terminating),
                    }),
                    ..Default::default()
                })
                .collect(),
        ),
        ports: Some(vec![EndpointPort {
            port: Some(port),
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
    };
    Api::<EndpointSlice>::namespaced(client.clone(), namespace)
        .patch(
            &name,
            &PatchParams::apply("ferrolb-tests").force(),
            &Patch::Apply(&slice),
        )
        .await?;
    Ok(())
}

/// The usual speaker scenario in one call: pool `pool` with `addresses`, an L2Advertisement
/// `all` for every pool and node, and LoadBalancer Service `default/<service>` (TCP 80,
/// `externalTrafficPolicy` `etp`) whose status already holds `ips` — as the controller would
/// write it, so the speakers' behaviour is tested without one.
///
/// # Errors
/// The API server refused an object.
pub async fn announced_service(
    client: &Client,
    addresses: &[&str],
    service: &str,
    etp: &str,
    ips: &[&str],
) -> anyhow::Result<()> {
    create_pool(client, "pool", addresses).await?;
    apply_l2(client, "all", ferrolb_crds::L2AdvertisementSpec::default()).await?;
    create_service(client, &lb_service("default", service, &[("TCP", 80)], etp)).await?;
    set_ingress(client, "default", service, ips).await
}

/// Creates, if absent, namespace `namespace` and in it a speaker Pod bound to `node`
/// (`spec.nodeName` set, the labels of `deploy/speaker.yaml`): what the DaemonSet makes on a real
/// cluster, so the lab's speakers see which Nodes run a speaker (issue #32 G3). No kubelet runs
/// it: the lab's speakers are processes, the Pod stays Pending.
///
/// # Errors
/// The API server refused it.
pub async fn create_speaker_pod(
    client: &Client,
    namespace: &str,
    node: &str,
) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
    let exists = |r: Result<_, kube::Error>| match r {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e),
    };
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "metadata": { "name": namespace }
    }))?;
    exists(
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .map(|_| ()),
    )?;
    // No controller-manager makes the namespace's `default` ServiceAccount in the test cluster.
    let sa: ServiceAccount = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "default" }
    }))?;
    exists(
        Api::<ServiceAccount>::namespaced(client.clone(), namespace)
            .create(&PostParams::default(), &sa)
            .await
            .map(|_| ()),
    )?;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("ferrolb-speaker-{node}"),
            "labels": {
                "app.kubernetes.io/name": "ferrolb",
                "app.kubernetes.io/component": "speaker",
            },
        },
        "spec": {
            "nodeName": node,
            "hostNetwork": true,
            "automountServiceAccountToken": false,
            "containers": [{ "name": "speaker", "image": "ferrolb:lab" }],
        },
    }))?;
    Api::<Pod>::namespaced(client.clone(), namespace)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}
