//! The speaker's view of the cluster: Kubernetes objects reduced to the inputs of
//! [`crate::eligibility`], per announced IP. Pure: no `kube`, no `tokio` (it reads `k8s-openapi`
//! structs handed over by the watch glue).
//!
//! What gets announced (DESIGN §1 data flow, §4 R9/R10, §5 S1):
//! - the IPs in `status.loadBalancer.ingress` of LoadBalancer Services of our class — the Service
//!   status is the single source of truth, the speaker never allocates;
//! - only when the IP is owned by an IPAddressPool (a pool deleted or shrunk stops its IPs being
//!   announced at once, case C-03). Ownership is the shared rule [`ferrolb_crds::ownership`], the
//!   very code the controller allocates with: the pool the Service's `address-pool` annotation
//!   names when it contains the IP, else the owner — with overlapping pools the older one
//!   (creationTimestamp, then name, R9) — and that pool's L2Advertisements apply
//!   ([`Layout::pool_for`]); two Services sharing an IP may so be served from two pools, and the
//!   eligible nodes are the intersection (S1, case C-10);
//! - never a Node's InternalIP/ExternalIP (R10, [`ferrolb_crds::node`]), even if a Service status
//!   names one (R8: that is foreign status the controller will replace);
//! - never an address in a block that is never a LoadBalancer IP (loopback, link-local incl.
//!   169.254.169.254, multicast, unspecified, reserved and broadcast, IPv4-mapped:
//!   [`ferrolb_crds::addresses::FORBIDDEN_BLOCKS`], issue 10 item 6), whoever wrote it into a
//!   Service status and whatever the pools say; such IPs are listed in [`View::forbidden`].
//!
//! Status IPs are read with [`ferrolb_crds::service::ingress_ips`] and the class with
//! [`ClassFilter`], both shared with the controller.

use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

use ferrolb_crds::addresses::{Family, forbidden_block};
use ferrolb_crds::annotations::address_pool;
use ferrolb_crds::node::address_map;
use ferrolb_crds::ownership::Layout;
use ferrolb_crds::service::{ClassFilter, ingress_ips, key};
use ferrolb_crds::{IPAddressPool, L2Advertisement};
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::eligibility::{Cluster, EndpointFacts, NodeFacts, PoolRef, ServiceFacts, TrafficPolicy};

/// The label EndpointSlices carry with their Service's name (Kubernetes API reference).
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";

/// The labels every speaker Pod of ours carries (`deploy/speaker.yaml`, the Helm chart): a Pod
/// in the speakers' namespace with both is a speaker Pod ([`speaker_nodes`]).
pub const SPEAKER_POD_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/name", "ferrolb"),
    ("app.kubernetes.io/component", "speaker"),
];

/// The Nodes a speaker Pod of ours is bound to (issue #32 G3): the `spec.nodeName` of every Pod
/// of `pods` (the speakers' namespace) that carries [`SPEAKER_POD_LABELS`] and has not ended
/// (`status.phase` neither `Succeeded` nor `Failed`). A Pod being deleted still counts until it
/// is gone: its speaker may still run. Bound is what matters, not Running: a speaker whose Pod
/// is Pending on its node is one a roll-out is about to start, and the speaker itself is heard
/// through the membership ([`crate::claim::Voters`]).
pub fn speaker_nodes(pods: &[&Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter(|p| {
            let labels = p.metadata.labels.as_ref();
            SPEAKER_POD_LABELS
                .iter()
                .all(|(k, v)| labels.and_then(|l| l.get(*k)).is_some_and(|x| x == v))
        })
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect()
}

/// The name of the speaker DaemonSet (`deploy/speaker.yaml`, the Helm chart), in the speakers'
/// namespace: its [`crate::eligibility::DROPPED_VOTERS_ANNOTATION`] is read ([`dropped_voters`]).
pub const SPEAKER_DAEMONSET: &str = "ferrolb-speaker";

/// The Nodes dropped from the voters by the speaker DaemonSet's
/// [`crate::eligibility::DROPPED_VOTERS_ANNOTATION`] (issue #32 G3); empty without the
/// DaemonSet (speakers outside Pods) or the annotation.
pub fn dropped_voters(daemon_sets: &[&DaemonSet]) -> BTreeSet<String> {
    daemon_sets
        .iter()
        .filter(|d| d.metadata.name.as_deref() == Some(SPEAKER_DAEMONSET))
        .filter_map(|d| {
            d.metadata
                .annotations
                .as_ref()?
                .get(crate::eligibility::DROPPED_VOTERS_ANNOTATION)
        })
        .flat_map(|v| crate::eligibility::dropped_voters(v))
        .collect()
}

/// Settings that shape the view.
#[derive(Clone, Debug, Default)]
pub struct ViewSettings {
    /// Which Services are ours.
    pub class: ClassFilter,
    /// `--exclude-lb-label` ([`crate::eligibility::Cluster::exclude_lb_label`]).
    pub exclude_lb_label: crate::eligibility::ExcludeLbLabel,
    /// `--ignore-cordon` ([`crate::eligibility::Cluster::ignore_cordon`]).
    pub ignore_cordon: bool,
}

/// Everything the speaker derives from the API, before membership is applied.
#[derive(Clone, Debug, Default)]
pub struct View {
    /// Nodes and L2Advertisements (with `alive` left empty: the caller fills it in).
    pub cluster: Cluster,
    /// Per announced IP: the Services holding it, with their facts.
    pub ips: BTreeMap<IpAddr, Vec<ServiceFacts>>,
    /// IPs in a Service status that are not announced, with why (for logs).
    pub skipped: BTreeMap<IpAddr, String>,
    /// IPs in a Service status that lie in a forbidden block and are never announced, with the
    /// Service and the block (the daemon logs them and exports their number).
    pub forbidden: BTreeMap<IpAddr, String>,
    /// How far this view has read the API server: the largest `metadata.resourceVersion` seen
    /// on any watch it decides from (deletions included), parsed as an integer; 0 when unknown.
    /// Resource versions compare as integers since Kubernetes 1.35 (KEP-5504, "Comparable
    /// Resource Version", guaranteed within one resource type; with the usual single etcd every
    /// type shares one revision counter). Two speakers whose views each give them the same IP
    /// let the newer view claim it ([`crate::membership::lease::newer_view`], issue #32 G5.8).
    /// Filled in by the caller of [`build`]; the simulator counts its API changes.
    pub revision: u64,
}

impl View {
    /// The names (`namespace/name`) of the Services holding `ip`, sorted; empty when the IP is
    /// not announced. These are the objects an Event about the IP is written on.
    pub fn services_of(&self, ip: IpAddr) -> Vec<String> {
        self.ips
            .get(&ip)
            .map(|facts| facts.iter().map(|f| f.name.clone()).collect())
            .unwrap_or_default()
    }
}

/// Builds the [`View`] from the current contents of the watch stores.
pub fn build(
    settings: &ViewSettings,
    services: &[&Service],
    slices: &[&EndpointSlice],
    nodes: &[&Node],
    pools: &[&IPAddressPool],
    advertisements: &[&L2Advertisement],
) -> View {
    let mut view = View {
        cluster: Cluster {
            exclude_lb_label: settings.exclude_lb_label,
            ignore_cordon: settings.ignore_cordon,
            advertisements: advertisements
                .iter()
                .filter_map(|a| Some((a.metadata.name.clone()?, a.spec.clone())))
                .collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    for node in nodes {
        let Some(name) = node.metadata.name.clone() else {
            continue;
        };
        view.cluster.nodes.insert(
            name,
            NodeFacts {
                labels: node.metadata.labels.clone().unwrap_or_default(),
                network_unavailable: network_unavailable(node),
                carrier: None,
                not_ready: not_ready(node),
                unschedulable: unschedulable(node),
                not_ready_since: not_ready(node).then(|| ready_transition(node)).flatten(),
            },
        );
    }

    let node_ips = address_map(nodes.iter().copied());
    let layout = Layout::of_pools(pools, &node_ips);
    let pool_labels: BTreeMap<&str, BTreeMap<String, String>> = pools
        .iter()
        .filter_map(|p| {
            Some((
                p.metadata.name.as_deref()?,
                p.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect();
    let endpoints = endpoints_by_service(slices);
    for svc in services.iter().filter(|s| settings.class.handles(s)) {
        let name = key(&svc.metadata);
        for ip in ingress_ips(svc) {
            if let Some(block) = forbidden_block(ip) {
                view.forbidden
                    .insert(ip, format!("{ip} of {name} is in {block}"));
                continue;
            }
            if node_ips.contains_key(&ip) {
                view.skipped
                    .insert(ip, format!("{ip} of {name} is a Node address"));
                continue;
            }
            let named = address_pool(svc.metadata.annotations.as_ref());
            let Some(pool) = layout.pool_for(named.as_deref(), ip) else {
                view.skipped
                    .insert(ip, format!("{ip} of {name} is in no IPAddressPool"));
                continue;
            };
            view.ips.entry(ip).or_default().push(ServiceFacts {
                name: name.clone(),
                traffic_policy: traffic_policy(svc),
                pool: PoolRef {
                    name: pool.to_owned(),
                    labels: pool_labels.get(pool).cloned().unwrap_or_default(),
                },
                endpoints: endpoints
                    .get(&(name.clone(), Family::of(ip)))
                    .cloned()
                    .unwrap_or_default(),
            });
        }
    }
    // A deterministic order whatever order the watch store lists Services in (it is a hash map,
    // reseeded on every relist): the plan takes the first Service's pool, and the
    // L2Announcement report compares the list.
    for services in view.ips.values_mut() {
        services.sort_by(|a, b| a.name.cmp(&b.name));
    }
    view
}

/// `InternalIP` and `ExternalIP` addresses of a Node: the shared rule (R10).
pub use ferrolb_crds::node::addresses as node_addresses;

/// The `status` of Node condition `type_`, if the Node reports it.
fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a str> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| c.status.as_str())
}

fn network_unavailable(node: &Node) -> bool {
    condition(node, "NetworkUnavailable") == Some("True")
}

/// `spec.unschedulable` is `true` (cordoned; absent counts as schedulable).
fn unschedulable(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// `Ready` is `False` or `Unknown`; a Node without the condition (just registered) counts as ready.
fn not_ready(node: &Node) -> bool {
    matches!(condition(node, "Ready"), Some("False" | "Unknown"))
}

/// `lastTransitionTime` of the `Ready` condition, in Unix seconds.
fn ready_transition(node: &Node) -> Option<i64> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0.as_second())
}

fn traffic_policy(svc: &Service) -> TrafficPolicy {
    match svc
        .spec
        .as_ref()
        .and_then(|s| s.external_traffic_policy.as_deref())
    {
        Some("Local") => TrafficPolicy::Local,
        _ => TrafficPolicy::Cluster,
    }
}

/// Endpoints of every Service per address family, keyed `(namespace/name, family)`, from the
/// EndpointSlices labelled with [`SERVICE_NAME_LABEL`]. `conditions.ready` nil counts as true;
/// `serving` nil counts as `ready` (EndpointSlice API reference).
///
/// The family is the slice's `addressType` (`IPv4`/`IPv6`); `FQDN` slices and unknown types are
/// left out. kube-proxy programs each family from the slices of that family only, so for the
/// IPv4 external IP of a dual-stack `externalTrafficPolicy: Local` Service only nodes with a
/// ready **IPv4** endpoint can deliver the traffic: a node with only an IPv6 endpoint would drop
/// it. Eligibility (S1 clause 7) is therefore decided per family (issue #13).
fn endpoints_by_service(
    slices: &[&EndpointSlice],
) -> BTreeMap<(String, Family), Vec<EndpointFacts>> {
    let mut out: BTreeMap<(String, Family), Vec<EndpointFacts>> = BTreeMap::new();
    for slice in slices {
        let Some(svc) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(SERVICE_NAME_LABEL))
        else {
            continue;
        };
        let Some(family) = Family::from_k8s(&slice.address_type) else {
            continue;
        };
        let ns = slice.metadata.namespace.as_deref().unwrap_or_default();
        let facts = slice.endpoints.iter().flatten().map(|e| {
            let cond = e.conditions.as_ref();
            let ready = cond.and_then(|c| c.ready).unwrap_or(true);
            EndpointFacts {
                node_name: e.node_name.clone(),
                ready,
                serving: cond.and_then(|c| c.serving).unwrap_or(ready),
            }
        });
        out.entry((format!("{ns}/{svc}"), family))
            .or_default()
            .extend(facts);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, node: Option<&str>, component: &str, phase: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "labels": {
                "app.kubernetes.io/name": "ferrolb",
                "app.kubernetes.io/component": component,
            }},
            "spec": { "nodeName": node, "containers": [] },
            "status": { "phase": phase },
        }))
        .unwrap()
    }

    #[test]
    fn speaker_nodes_are_the_nodes_of_bound_live_speaker_pods() {
        let pods = [
            pod("s-1", Some("node-1"), "speaker", "Running"),
            pod("s-2", Some("node-2"), "speaker", "Pending"),
            pod("s-3", Some("node-3"), "speaker", "Failed"),
            pod("s-4", None, "speaker", "Pending"),
            pod("c-1", Some("node-4"), "controller", "Running"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let nodes: Vec<String> = speaker_nodes(&refs).into_iter().collect();
        assert_eq!(nodes, ["node-1", "node-2"]);
    }
    use ferrolb_crds::IPAddressPoolSpec;
    use k8s_openapi::api::core::v1::{
        LoadBalancerIngress, LoadBalancerStatus, NodeAddress, NodeStatus, ServiceSpec,
        ServiceStatus,
    };
    use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn meta(ns: Option<&str>, name: &str) -> ObjectMeta {
        ObjectMeta {
            namespace: ns.map(Into::into),
            name: Some(name.into()),
            ..Default::default()
        }
    }

    fn lb(name: &str, ips: &[&str], etp: &str) -> Service {
        Service {
            metadata: meta(Some("default"), name),
            spec: Some(ServiceSpec {
                type_: Some("LoadBalancer".into()),
                external_traffic_policy: Some(etp.into()),
                ..Default::default()
            }),
            status: Some(ServiceStatus {
                load_balancer: Some(LoadBalancerStatus {
                    ingress: Some(
                        ips.iter()
                            .map(|ip| LoadBalancerIngress {
                                ip: Some(ip.to_string()),
                                ..Default::default()
                            })
                            .collect(),
                    ),
                }),
                ..Default::default()
            }),
        }
    }

    fn pool(name: &str, addrs: &[&str], created_secs: i64) -> IPAddressPool {
        let mut p = IPAddressPool::new(
            name,
            IPAddressPoolSpec {
                addresses: addrs.iter().map(|a| (*a).into()).collect(),
                auto_assign: true,
                avoid_buggy_ips: false,
                allow_sharing_across_namespaces: false,
                service_allocation: None,
                auto_addresses: None,
            },
        );
        p.metadata.creation_timestamp = Some(Time(
            k8s_openapi::jiff::Timestamp::from_second(created_secs).unwrap(),
        ));
        p
    }

    fn node(name: &str, ip: &str) -> Node {
        Node {
            metadata: meta(None, name),
            status: Some(NodeStatus {
                addresses: Some(vec![NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.into(),
                }]),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn slice(svc: &str, eps: &[(Option<&str>, Option<bool>)]) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some("default".into()),
                name: Some(format!("{svc}-abc")),
                labels: Some([(SERVICE_NAME_LABEL.to_string(), svc.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            endpoints: Some(
                eps.iter()
                    .map(|(n, ready)| Endpoint {
                        node_name: n.map(Into::into),
                        conditions: Some(EndpointConditions {
                            ready: *ready,
                            ..Default::default()
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
            ports: None,
        }
    }

    #[test]
    fn ips_outside_pools_and_node_ips_are_not_announced() {
        let svcs = [
            lb("a", &["198.51.100.10"], "Cluster"),
            lb("b", &["203.0.113.1"], "Cluster"),
            lb("c", &["192.0.2.11"], "Cluster"),
        ];
        let pools = [pool("pool-a", &["198.51.100.0/24", "192.0.2.0/24"], 1)];
        let nodes = [node("node-1", "192.0.2.11")];
        let v = build(
            &ViewSettings::default(),
            &svcs.iter().collect::<Vec<_>>(),
            &[],
            &nodes.iter().collect::<Vec<_>>(),
            &pools.iter().collect::<Vec<_>>(),
            &[],
        );
        assert_eq!(
            v.ips.keys().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["198.51.100.10"]
        );
        assert!(v.skipped[&"203.0.113.1".parse().unwrap()].contains("in no IPAddressPool"));
        assert!(v.skipped[&"192.0.2.11".parse().unwrap()].contains("Node address"));
    }

    #[test]
    fn forbidden_addresses_are_never_announced_whatever_the_status_says() {
        // Another writer put loopback, metadata, multicast and link-local addresses into the
        // status; a pool stored before the CEL rule even "contains" one of them.
        let svcs = [
            lb(
                "a",
                &["127.0.0.1", "169.254.169.254", "224.0.0.5", "198.51.100.10"],
                "Cluster",
            ),
            lb(
                "b",
                &["fe80::1", "ff02::1", "::1", "2001:db8::10"],
                "Cluster",
            ),
        ];
        let pools = [pool(
            "legacy",
            &["198.51.100.0/24", "169.254.169.254/32", "2001:db8::/120"],
            1,
        )];
        let ok = [pool("ok", &["198.51.100.0/24", "2001:db8::/120"], 2)];
        // The legacy pool is refused whole: nothing of it is announced.
        let cases: [(&[IPAddressPool], &[&str]); 2] =
            [(&pools, &[]), (&ok, &["198.51.100.10", "2001:db8::10"])];
        for (pools, want) in cases {
            let v = build(
                &ViewSettings::default(),
                &svcs.iter().collect::<Vec<_>>(),
                &[],
                &[],
                &pools.iter().collect::<Vec<_>>(),
                &[],
            );
            let announced: Vec<String> = v.ips.keys().map(ToString::to_string).collect();
            assert_eq!(announced, want);
            assert_eq!(v.forbidden.len(), 6, "{:?}", v.forbidden);
            let metadata = &v.forbidden[&"169.254.169.254".parse().unwrap()];
            assert!(
                metadata.contains("default/a") && metadata.contains("169.254.0.0/16"),
                "{metadata}"
            );
            assert!(v.forbidden[&"::1".parse().unwrap()].contains("loopback"));
        }
    }

    #[test]
    fn older_pool_owns_overlap_and_endpoints_are_attached() {
        let svcs = [lb("a", &["198.51.100.10"], "Local")];
        let pools = [
            pool("newer", &["198.51.100.0/24"], 200),
            pool("older", &["198.51.100.0/28"], 100),
        ];
        let slices = [slice(
            "a",
            &[
                (Some("node-2"), None),
                (Some("node-3"), Some(false)),
                (None, Some(true)),
            ],
        )];
        let v = build(
            &ViewSettings::default(),
            &svcs.iter().collect::<Vec<_>>(),
            &slices.iter().collect::<Vec<_>>(),
            &[],
            &pools.iter().collect::<Vec<_>>(),
            &[],
        );
        let facts = &v.ips[&"198.51.100.10".parse().unwrap()][0];
        assert_eq!(facts.pool.name, "older");
        assert_eq!(facts.traffic_policy, TrafficPolicy::Local);
        assert_eq!(facts.endpoints.len(), 3);
        assert!(facts.endpoints[0].ready, "nil ready counts as ready");
        assert!(!facts.endpoints[1].ready);
        assert_eq!(facts.endpoints[2].node_name, None);
    }

    /// Issue #13: kube-proxy programs each family from the slices of that family, so under
    /// externalTrafficPolicy Local the IPv4 IP is eligible only where an IPv4 endpoint is, the
    /// IPv6 IP only where an IPv6 endpoint is; FQDN slices count for neither.
    #[test]
    fn local_eligibility_of_a_dual_stack_service_is_per_family() {
        let svcs = [lb("a", &["198.51.100.10", "2001:db8:1c::10"], "Local")];
        let pools = [pool("p", &["198.51.100.0/24", "2001:db8:1c::/120"], 1)];
        let with_type = |name: &str, address_type: &str, node: &str| {
            let mut s = slice("a", &[(Some(node), Some(true))]);
            s.metadata.name = Some(name.into());
            s.address_type = address_type.into();
            s
        };
        let slices = [
            with_type("a-v4", "IPv4", "node-1"),
            with_type("a-v6", "IPv6", "node-2"),
            with_type("a-fqdn", "FQDN", "node-3"),
        ];
        let nodes = [
            node("node-1", "192.0.2.11"),
            node("node-2", "192.0.2.12"),
            node("node-3", "192.0.2.13"),
        ];
        let mut v = build(
            &ViewSettings::default(),
            &svcs.iter().collect::<Vec<_>>(),
            &slices.iter().collect::<Vec<_>>(),
            &nodes.iter().collect::<Vec<_>>(),
            &pools.iter().collect::<Vec<_>>(),
            &[&L2Advertisement::new("all", Default::default())],
        );
        v.cluster.alive = ["node-1", "node-2", "node-3"]
            .into_iter()
            .map(String::from)
            .collect();
        let eligible = |ip: &str| {
            crate::eligibility::eligible_nodes(&v.cluster, &v.ips[&ip.parse().unwrap()])
                .nodes
                .into_iter()
                .collect::<Vec<_>>()
        };
        assert_eq!(eligible("198.51.100.10"), vec!["node-1"]);
        assert_eq!(eligible("2001:db8:1c::10"), vec!["node-2"]);
        let v4 = &v.ips[&"198.51.100.10".parse().unwrap()][0];
        assert_eq!(v4.endpoints.len(), 1, "only the IPv4 slice: {v4:?}");
    }

    #[test]
    fn a_service_naming_the_newer_overlapping_pool_is_served_from_it() {
        let mut s = lb("a", &["198.51.100.10", "::ffff:198.51.100.11"], "Cluster");
        s.metadata.annotations =
            Some([("ferrolb.io/address-pool".to_string(), "newer".to_string())].into());
        let pools = [
            pool("newer", &["198.51.100.0/24"], 200),
            pool("older", &["198.51.100.0/28"], 100),
        ];
        let view_of = |s: &Service| {
            build(
                &ViewSettings::default(),
                &[s],
                &[],
                &[],
                &pools.iter().collect::<Vec<_>>(),
                &[],
            )
        };
        let v = view_of(&s);
        assert_eq!(
            v.ips.keys().map(ToString::to_string).collect::<Vec<_>>(),
            vec!["198.51.100.10"],
            "an IPv4-mapped status IP is not an IP to announce"
        );
        let ip = "198.51.100.10".parse().unwrap();
        assert_eq!(v.ips[&ip][0].pool.name, "newer");
        // Without the annotation, the older pool owns the overlap (R9).
        s.metadata.annotations = None;
        assert_eq!(view_of(&s).ips[&ip][0].pool.name, "older");
    }

    #[test]
    fn foreign_class_is_ignored() {
        let mut s = lb("a", &["198.51.100.10"], "Cluster");
        if let Some(spec) = s.spec.as_mut() {
            spec.load_balancer_class = Some("example.com/other".into());
        }
        let pools = [pool("p", &["198.51.100.0/24"], 1)];
        let v = build(
            &ViewSettings::default(),
            &[&s],
            &[],
            &[],
            &pools.iter().collect::<Vec<_>>(),
            &[],
        );
        assert!(v.ips.is_empty());
    }
}
