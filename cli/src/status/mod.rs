//! `ferrolb status`: one screen on the state of an install (issue #28 item 2). Pure — no `kube`,
//! no `tokio`, no I/O: [`Collected`] (the objects [`collect::read`] fetched) in, a [`Report`] out,
//! rendered as text by [`render`] or as JSON by serde (the field names are a stable interface,
//! documented in `docs/troubleshooting.md`, "ferrolb status").
//!
//! Sections, each from the objects named:
//! - **kubernetes**: the API server's `/version` against [`MIN_KUBERNETES`] (the floor of the
//!   speakers' admission policy, docs/install.md);
//! - **namespace**: ferrolb's namespace and its Pod Security labels (`pod-security.kubernetes.io/*`;
//!   the speaker needs `privileged`);
//! - **key**: whether the membership-key Secret exists (its content is never read);
//! - **pools**: per `IPAddressPool`, used and free addresses per family and its conditions;
//! - **addresses**: per IP in a Service status of our class: its Services, and from its
//!   `L2Announcement` the node and interfaces that answer for it (or the host holding it);
//! - **pending**: Services of our class with no address, and why: the newest Warning Event on
//!   the Service, else a condition of its status that is not `True`;
//! - **nodes**: per Node, why it may not announce (the exclusion label, unless the speakers ignore
//!   it; `NetworkUnavailable`; no L2Advertisement selects it) and the member count its speaker
//!   reports (`L2Announcement` `node-<node>`, docs/design.md "Membership reports");
//! - **membership**: whether every reported count is the same;
//! - **kubeProxy**: `mode` and `ipvs.strictARP` from `kube-system/kube-proxy`'s `config.conf`
//!   (`unknown` when the ConfigMap or the field is missing);
//! - **metallb**: whether MetalLB (or minikube's `metallb` addon) still runs: its namespace, its
//!   Deployments and DaemonSets.
//!
//! [`Report::attention`] lists what needs a look; `ferrolb status` exits 2 when it is not empty.

pub mod collect;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use ferrolb_crds::selector::any_matches;
use ferrolb_crds::service::{ClassFilter, ingress_ips, key};
use ferrolb_crds::version::min_kubernetes_text;
use ferrolb_crds::{IPAddressPool, L2Advertisement, L2Announcement};
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment};
use k8s_openapi::api::core::v1::{ConfigMap, Event, Namespace, Node, Service};
use serde::Serialize;

/// The Kubernetes version floor (one place: `ferrolb_crds::version`, which the controller checks
/// at start-up too).
pub use ferrolb_crds::version::MIN_KUBERNETES;

pub use ferrolb_crds::exclude_lb::EXCLUDE_LB_LABEL;
use ferrolb_crds::exclude_lb::ExcludeLbLabel;

/// The label minikube puts on the objects of its addons (`kubernetes.io/minikube-addons: metallb`).
pub const MINIKUBE_ADDON_LABEL: &str = "kubernetes.io/minikube-addons";

/// Everything `ferrolb status` reads, as fetched (see [`collect::read`]).
#[derive(Clone, Debug, Default)]
pub struct Collected {
    /// The API server's `gitVersion` (e.g. `v1.34.1`) and its `major`/`minor` strings.
    pub version: Option<ServerVersion>,
    /// ferrolb's namespace name.
    pub namespace_name: String,
    /// ferrolb's namespace, if it exists.
    pub namespace: Option<Namespace>,
    /// The membership-key Secret's name, and whether it exists.
    pub key_secret: (String, bool),
    /// Every `IPAddressPool`.
    pub pools: Vec<IPAddressPool>,
    /// Every `L2Advertisement`.
    pub advertisements: Vec<L2Advertisement>,
    /// Every `L2Announcement` in ferrolb's namespace.
    pub announcements: Vec<L2Announcement>,
    /// Every Service (all classes; [`Collected::class`] decides which are ours).
    pub services: Vec<Service>,
    /// Warning Events about Services (core/v1 view).
    pub service_events: Vec<Event>,
    /// Every Node.
    pub nodes: Vec<Node>,
    /// The speakers' DaemonSet, if found.
    pub speaker_daemonset: Option<DaemonSet>,
    /// `kube-system/kube-proxy`, if readable.
    pub kube_proxy: Option<ConfigMap>,
    /// MetalLB's namespace name.
    pub metallb_namespace_name: String,
    /// MetalLB's namespace, if it exists.
    pub metallb_namespace: Option<Namespace>,
    /// Deployments in MetalLB's namespace.
    pub metallb_deployments: Vec<Deployment>,
    /// DaemonSets in MetalLB's namespace.
    pub metallb_daemonsets: Vec<DaemonSet>,
    /// Which Services are ours.
    pub class: ClassFilter,
}

/// The API server's version as `/version` gives it (`ferrolb_crds::version::VersionInfo`).
pub use ferrolb_crds::version::VersionInfo as ServerVersion;

/// The whole report (`--output json`: this struct, camelCase field names).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The Kubernetes version against the floor.
    pub kubernetes: KubernetesReport,
    /// ferrolb's namespace.
    pub namespace: NamespaceReport,
    /// The membership key.
    pub key: KeyReport,
    /// Pools by name.
    pub pools: Vec<PoolReport>,
    /// Assigned IPs, in address order.
    pub addresses: Vec<AddressReport>,
    /// Services of our class without an address, by `namespace/name`.
    pub pending: Vec<PendingReport>,
    /// Nodes by name.
    pub nodes: Vec<NodeReport>,
    /// Agreement of the member counts.
    pub membership: MembershipReport,
    /// kube-proxy's mode and `strictARP`.
    pub kube_proxy: KubeProxyReport,
    /// MetalLB still running.
    pub metallb: MetallbReport,
    /// One line per thing that needs attention (exit status 2 when any).
    pub attention: Vec<String>,
}

/// The Kubernetes version.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubernetesReport {
    /// `gitVersion` (`unknown` when `/version` could not be read).
    pub version: String,
    /// The floor, `1.32`.
    pub minimum: String,
    /// Whether the version is at least the floor (`None`: could not tell).
    pub supported: Option<bool>,
}

/// ferrolb's namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NamespaceReport {
    /// Its name.
    pub name: String,
    /// Whether it exists.
    pub exists: bool,
    /// Its `pod-security.kubernetes.io/*` labels (e.g. `enforce` → `privileged`), by the part
    /// after the `/`.
    pub pod_security: BTreeMap<String, String>,
}

/// The membership key.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KeyReport {
    /// The Secret's name.
    pub secret: String,
    /// Whether it exists.
    pub exists: bool,
}

/// Used and free addresses of one family (the pool status; saturating at `i64::MAX`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Addresses handed out.
    pub used: i64,
    /// Addresses still free.
    pub free: i64,
}

/// One condition, as in the object's status.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConditionReport {
    /// `type`.
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False`, `Unknown`.
    pub status: String,
    /// `reason`.
    pub reason: String,
    /// `message`.
    pub message: String,
}

/// One pool.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PoolReport {
    /// Its name.
    pub name: String,
    /// IPv4 addresses.
    pub ipv4: Usage,
    /// IPv6 addresses.
    pub ipv6: Usage,
    /// Its conditions (none before the controller wrote a status).
    pub conditions: Vec<ConditionReport>,
}

/// One assigned IP.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AddressReport {
    /// The IP.
    pub ip: String,
    /// `namespace/name` of the Services holding it.
    pub services: Vec<String>,
    /// The node answering for it (its `L2Announcement`); `None`: no node reports it.
    pub node: Option<String>,
    /// The interfaces it is answered on.
    pub interfaces: Vec<String>,
    /// Set when the node holds it back because another host (this MAC) answered its probe.
    pub held_by: Option<String>,
}

/// One Service without an address.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingReport {
    /// `namespace/name`.
    pub service: String,
    /// Why, in words: the newest Warning Event's `reason: message`, a condition, or that
    /// nothing says why.
    pub reason: String,
}

/// One Node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeReport {
    /// Its name.
    pub name: String,
    /// Why it may announce no IP (empty: it may).
    pub excluded: Vec<String>,
    /// The member count its speaker reports; `None`: no report (no speaker there, or one older
    /// than this report).
    pub members: Option<u32>,
    /// When the speaker saw that count (RFC 3339).
    pub members_observed: Option<String>,
}

/// Whether the speakers agree on the membership.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MembershipReport {
    /// Speakers that report a count.
    pub reporting: usize,
    /// Every count reported, by node.
    pub counts: BTreeMap<String, u32>,
    /// Every reported count is the same (`None`: no report). A dead speaker's report keeps its
    /// last count, so it disagrees with the live ones once they see it gone.
    pub agree: Option<bool>,
}

/// kube-proxy's configuration.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct KubeProxyReport {
    /// `iptables`, `ipvs`, `nftables`, … (an empty `mode` is kube-proxy's Linux default,
    /// `iptables`); `unknown` without the ConfigMap.
    pub mode: String,
    /// `ipvs.strictARP`: `true`, `false`, or `unknown`.
    pub strict_arp: String,
}

/// One MetalLB workload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadReport {
    /// `Deployment` or `DaemonSet`.
    pub kind: String,
    /// Its name.
    pub name: String,
    /// Pods wanted (replicas, or desired scheduled).
    pub desired: i32,
    /// Pods ready.
    pub ready: i32,
}

/// MetalLB still installed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MetallbReport {
    /// Its namespace name.
    pub namespace: String,
    /// Whether that namespace exists.
    pub namespace_exists: bool,
    /// Its Deployments and DaemonSets.
    pub workloads: Vec<WorkloadReport>,
    /// Some workload wants Pods (then it still answers ARP beside ferrolb).
    pub active: bool,
    /// The namespace or a workload carries minikube's addon label (`minikube addons disable
    /// metallb`, or a restart deploys it again).
    pub minikube_addon: bool,
}

fn conditions(
    list: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> Vec<ConditionReport> {
    list.iter()
        .map(|c| ConditionReport {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect()
}

/// The time an Event last happened (series, then `lastTimestamp`, `eventTime`, `firstTimestamp`,
/// creation), as seconds since the epoch, for "newest".
fn event_time(e: &Event) -> i64 {
    let micro = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime| t.0.as_second();
    let time = |t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time| t.0.as_second();
    e.series
        .as_ref()
        .and_then(|s| s.last_observed_time.as_ref().map(micro))
        .or_else(|| e.last_timestamp.as_ref().map(time))
        .or_else(|| e.event_time.as_ref().map(micro))
        .or_else(|| e.first_timestamp.as_ref().map(time))
        .or_else(|| e.metadata.creation_timestamp.as_ref().map(time))
        .unwrap_or(0)
}

/// The report of `c` (see the module docs for each section's rule).
pub fn report(c: &Collected) -> Report {
    let mut attention = Vec::new();

    // Kubernetes version.
    let kubernetes = match &c.version {
        Some(v) => KubernetesReport {
            version: v.git_version.clone(),
            minimum: min_kubernetes_text(),
            supported: ferrolb_crds::version::parse(v).map(|mm| mm >= MIN_KUBERNETES),
        },
        None => KubernetesReport {
            version: "unknown".into(),
            minimum: min_kubernetes_text(),
            supported: None,
        },
    };
    if kubernetes.supported == Some(false) {
        attention.push(format!(
            "Kubernetes {} is older than the supported {} (the speakers' admission policy needs it)",
            kubernetes.version, kubernetes.minimum
        ));
    }

    // Namespace and Pod Security.
    let pod_security: BTreeMap<String, String> = c
        .namespace
        .as_ref()
        .and_then(|n| n.metadata.labels.as_ref())
        .map(|labels| {
            labels
                .iter()
                .filter_map(|(k, v)| {
                    k.strip_prefix("pod-security.kubernetes.io/")
                        .map(|m| (m.to_owned(), v.clone()))
                })
                .collect()
        })
        .unwrap_or_default();
    let namespace = NamespaceReport {
        name: c.namespace_name.clone(),
        exists: c.namespace.is_some(),
        pod_security,
    };
    if !namespace.exists {
        attention.push(format!("namespace {} does not exist", namespace.name));
    } else if namespace
        .pod_security
        .get("enforce")
        .is_some_and(|level| level != "privileged")
    {
        attention.push(format!(
            "namespace {} enforces Pod Security level {}: the speaker (host network, NET_RAW) needs privileged",
            namespace.name, namespace.pod_security["enforce"]
        ));
    }

    // Key.
    let key_report = KeyReport {
        secret: c.key_secret.0.clone(),
        exists: c.key_secret.1,
    };
    if namespace.exists && !key_report.exists {
        attention.push(format!(
            "the membership key Secret {}/{} does not exist (the controller creates it; speakers stay not ready without it)",
            namespace.name, key_report.secret
        ));
    }

    // Pools.
    let mut pools: Vec<PoolReport> = c
        .pools
        .iter()
        .map(|p| {
            let st = p.status.clone().unwrap_or_default();
            PoolReport {
                name: p.metadata.name.clone().unwrap_or_default(),
                ipv4: Usage {
                    used: st.assigned_ipv4,
                    free: st.available_ipv4,
                },
                ipv6: Usage {
                    used: st.assigned_ipv6,
                    free: st.available_ipv6,
                },
                conditions: conditions(&st.conditions),
            }
        })
        .collect();
    pools.sort_by(|a, b| a.name.cmp(&b.name));
    for p in &pools {
        for cond in &p.conditions {
            let bad = if cond.type_ == "Ready" {
                cond.status != "True"
            } else {
                cond.status == "True"
            };
            if bad {
                attention.push(format!(
                    "pool {}: {}={} {}: {}",
                    p.name, cond.type_, cond.status, cond.reason, cond.message
                ));
            }
        }
    }

    // Addresses and pending Services.
    let ours: Vec<&Service> = c.services.iter().filter(|s| c.class.handles(s)).collect();
    let mut by_ip: BTreeMap<std::net::IpAddr, Vec<String>> = BTreeMap::new();
    let mut pending = Vec::new();
    for svc in &ours {
        let ips = ingress_ips(svc);
        let name = key(&svc.metadata);
        if ips.is_empty() {
            pending.push(PendingReport {
                reason: pending_reason(svc, &c.service_events),
                service: name,
            });
            continue;
        }
        for ip in ips {
            by_ip.entry(ip).or_default().push(name.clone());
        }
    }
    pending.sort_by(|a, b| a.service.cmp(&b.service));
    for p in &pending {
        attention.push(format!("Service {} is pending: {}", p.service, p.reason));
    }
    let by_announced: BTreeMap<std::net::IpAddr, &L2Announcement> = c
        .announcements
        .iter()
        .filter_map(|a| Some((a.spec.ip.parse().ok()?, a)))
        .collect();
    let addresses: Vec<AddressReport> = by_ip
        .into_iter()
        .map(|(ip, mut services)| {
            services.sort();
            let ann = by_announced.get(&ip);
            AddressReport {
                ip: ip.to_string(),
                services,
                node: ann.map(|a| a.spec.node.clone()),
                interfaces: ann.map(|a| a.spec.interfaces.clone()).unwrap_or_default(),
                held_by: ann.and_then(|a| a.spec.held_by.clone()),
            }
        })
        .collect();
    for a in &addresses {
        match (&a.node, &a.held_by) {
            (None, _) => attention.push(format!(
                "{} ({}) has no L2Announcement: no node reports answering for it (kubectl describe svc says why)",
                a.ip,
                a.services.join(", ")
            )),
            (Some(node), Some(mac)) => attention.push(format!(
                "{} is held back by {node}: another host ({mac}) answered its probe",
                a.ip
            )),
            _ => {}
        }
    }

    // Nodes, exclusions, member counts.
    let exclude_lb_label = c
        .speaker_daemonset
        .as_ref()
        .map_or(ExcludeLbLabel::Auto, speakers_exclude_lb_label);
    let no_labels = BTreeMap::new();
    let node_labels = || {
        c.nodes
            .iter()
            .map(|n| n.metadata.labels.as_ref().unwrap_or(&no_labels))
    };
    let label_in_force = exclude_lb_label.in_force(node_labels());
    if exclude_lb_label == ExcludeLbLabel::Auto && !c.nodes.is_empty() && !label_in_force {
        attention.push(format!(
            "every Node carries {EXCLUDE_LB_LABEL}: the speakers set it aside \
             (--exclude-lb-label=auto) and announce from them; --exclude-lb-label=honour keeps them out"
        ));
    }
    let reports: BTreeMap<&str, &L2Announcement> = c
        .announcements
        .iter()
        .filter(|a| a.spec.ip.is_empty() && a.spec.membership.is_some())
        .filter(|a| {
            a.metadata.name.as_deref()
                == Some(ferrolb_crds::announcement::member_report_name(&a.spec.node).as_str())
        })
        .map(|a| (a.spec.node.as_str(), a))
        .collect();
    let mut nodes: Vec<NodeReport> = c
        .nodes
        .iter()
        .map(|n| {
            let name = n.metadata.name.clone().unwrap_or_default();
            let empty = BTreeMap::new();
            let labels = n.metadata.labels.as_ref().unwrap_or(&empty);
            let mut excluded = Vec::new();
            if let Some(v) = labels.get(EXCLUDE_LB_LABEL).filter(|v| *v != "false") {
                if !label_in_force {
                    // Not an exclusion: the speakers ignore it or set it aside.
                } else {
                    excluded.push(format!("label {EXCLUDE_LB_LABEL}={v}"));
                }
            }
            let unavailable = n
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "NetworkUnavailable" && c.status == "True")
                });
            if unavailable {
                excluded.push("condition NetworkUnavailable=True".into());
            }
            let selected = c.advertisements.is_empty()
                || c.advertisements
                    .iter()
                    .any(|a| any_matches(&a.spec.node_selectors, labels));
            if !selected {
                excluded.push("no L2Advertisement's nodeSelectors select it".into());
            }
            let report = reports.get(name.as_str());
            let membership = report.and_then(|a| a.spec.membership.as_ref());
            if membership.is_some_and(|m| m.members == 0) {
                excluded.push("its speaker is out of the membership".into());
            }
            NodeReport {
                excluded,
                members: membership.map(|m| m.members),
                members_observed: membership.map(|m| m.observed.0.to_string()),
                name,
            }
        })
        .collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    for n in &nodes {
        if !n.excluded.is_empty() {
            attention.push(format!(
                "node {} announces nothing: {}",
                n.name,
                n.excluded.join("; ")
            ));
        }
    }
    if !nodes.is_empty() && nodes.iter().all(|n| !n.excluded.is_empty()) {
        attention.push("no node may announce any IP".into());
    }

    // Membership agreement (reports of existing nodes only).
    let counts: BTreeMap<String, u32> = nodes
        .iter()
        .filter_map(|n| Some((n.name.clone(), n.members?)))
        .collect();
    let distinct: BTreeSet<u32> = counts.values().copied().collect();
    let agree = (!distinct.is_empty()).then_some(distinct.len() == 1);
    if agree == Some(false) {
        attention.push(format!(
            "the speakers disagree on the membership ({}): a partition, a key mismatch or a blocked UDP port (docs/membership.md)",
            counts
                .iter()
                .map(|(n, c)| format!("{n} sees {c}"))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let membership = MembershipReport {
        reporting: counts.len(),
        counts,
        agree,
    };

    // kube-proxy.
    let kube_proxy = kube_proxy_report(c.kube_proxy.as_ref());
    if kube_proxy.mode == "ipvs" && kube_proxy.strict_arp != "true" {
        attention.push(format!(
            "kube-proxy runs in IPVS mode with strictARP {}: every node's kernel may answer ARP for the IPs (docs/install.md)",
            kube_proxy.strict_arp
        ));
    }

    // MetalLB.
    let mut workloads: Vec<WorkloadReport> = c
        .metallb_deployments
        .iter()
        .map(|d| WorkloadReport {
            kind: "Deployment".into(),
            name: d.metadata.name.clone().unwrap_or_default(),
            desired: d.spec.replicas.unwrap_or(1),
            ready: d
                .status
                .as_ref()
                .and_then(|s| s.ready_replicas)
                .unwrap_or(0),
        })
        .chain(c.metallb_daemonsets.iter().map(|d| WorkloadReport {
            kind: "DaemonSet".into(),
            name: d.metadata.name.clone().unwrap_or_default(),
            desired: d.status.as_ref().map_or(0, |s| s.desired_number_scheduled),
            ready: d.status.as_ref().map_or(0, |s| s.number_ready),
        }))
        .collect();
    workloads.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    let addon_label = |m: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta| {
        m.labels
            .as_ref()
            .is_some_and(|l| l.get(MINIKUBE_ADDON_LABEL).is_some_and(|v| v == "metallb"))
    };
    let minikube_addon = c
        .metallb_namespace
        .as_ref()
        .is_some_and(|n| addon_label(&n.metadata))
        || c.metallb_deployments
            .iter()
            .any(|d| addon_label(&d.metadata))
        || c.metallb_daemonsets
            .iter()
            .any(|d| addon_label(&d.metadata));
    let metallb = MetallbReport {
        namespace: c.metallb_namespace_name.clone(),
        namespace_exists: c.metallb_namespace.is_some(),
        active: workloads.iter().any(|w| w.desired > 0 || w.ready > 0),
        workloads,
        minikube_addon,
    };
    if metallb.active {
        attention.push(format!(
            "MetalLB still runs in {}{}: two implementations answer for the same IPs (docs/migration-from-metallb.md)",
            metallb.namespace,
            if metallb.minikube_addon {
                " (minikube's addon: `minikube addons disable metallb` first, or a restart deploys it again)"
            } else {
                ""
            }
        ));
    }

    Report {
        kubernetes,
        namespace,
        key: key_report,
        pools,
        addresses,
        pending,
        nodes,
        membership,
        kube_proxy,
        metallb,
        attention,
    }
}

/// Why a pending Service has no address: its newest Warning Event, else a condition of its
/// status that is not `True`, else that nothing says why.
fn pending_reason(svc: &Service, events: &[Event]) -> String {
    let uid = svc.metadata.uid.as_deref();
    let newest = events
        .iter()
        .filter(|e| e.type_.as_deref() == Some("Warning"))
        .filter(|e| {
            let o = &e.involved_object;
            o.kind.as_deref() == Some("Service")
                && o.namespace == svc.metadata.namespace
                && o.name == svc.metadata.name
                && (uid.is_none() || o.uid.is_none() || o.uid.as_deref() == uid)
        })
        .max_by_key(|e| event_time(e));
    if let Some(e) = newest {
        return format!(
            "{}: {}",
            e.reason.as_deref().unwrap_or("Warning"),
            e.message.as_deref().unwrap_or("").trim()
        );
    }
    let condition = svc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.status != "True"));
    if let Some(cond) = condition {
        return format!(
            "{}={} {}: {}",
            cond.type_, cond.status, cond.reason, cond.message
        );
    }
    "no Warning Event or condition says why (is the controller running? kubectl -n <namespace> get pods)"
        .into()
}

/// The speakers' `--exclude-lb-label` as their DaemonSet sets it, read as the speaker reads
/// it: a flag (`--exclude-lb-label=V`, `--exclude-lb-label V`, or the older
/// `--ignore-exclude-lb`, which is `ignore`) before its environment variable
/// (`FERROLB_EXCLUDE_LB_LABEL`, or `FERROLB_IGNORE_EXCLUDE_LB` set to a value the speaker reads
/// as true: [`env_flag_is_set`]); `auto` when none is set. A value the speaker would refuse
/// reads as `auto` (that speaker does not start).
fn speakers_exclude_lb_label(ds: &DaemonSet) -> ExcludeLbLabel {
    let containers = ds
        .spec
        .template
        .spec
        .as_ref()
        .map(|p| p.containers.as_slice())
        .unwrap_or_default();
    let of_container = |c: &k8s_openapi::api::core::v1::Container| {
        let args: Vec<&str> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(String::as_str)
            .collect();
        if args
            .iter()
            .any(|a| *a == "--ignore-exclude-lb" || *a == "--ignore-exclude-lb=true")
        {
            return Some(ExcludeLbLabel::Ignore);
        }
        let flag = args.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix("--exclude-lb-label=").or_else(|| {
                (*a == "--exclude-lb-label")
                    .then(|| args.get(i + 1).copied())
                    .flatten()
            })
        });
        if let Some(value) = flag {
            return value.parse().ok();
        }
        let env = |name: &str| {
            c.env
                .iter()
                .flatten()
                .find(|e| e.name == name)
                .and_then(|e| e.value.as_deref())
        };
        if env("FERROLB_IGNORE_EXCLUDE_LB").is_some_and(env_flag_is_set) {
            return Some(ExcludeLbLabel::Ignore);
        }
        env("FERROLB_EXCLUDE_LB_LABEL").and_then(|v| v.parse().ok())
    };
    containers
        .iter()
        .find_map(of_container)
        .unwrap_or(ExcludeLbLabel::Auto)
}

/// How the speaker reads the environment variable of a boolean flag (clap's `SetTrue` action
/// with `env`, parsed by clap's `FalseyValueParser`): false for the empty string and for `n`,
/// `no`, `f`, `false`, `off`, `0` in any case; true for every other value (`1`, `yes`, `on`,
/// `True`, …). The status report must agree with the speaker, or it would call a node
/// excluded that the speakers serve.
fn env_flag_is_set(value: &str) -> bool {
    const FALSEY: [&str; 6] = ["n", "no", "f", "false", "off", "0"];
    !value.is_empty() && !FALSEY.iter().any(|f| value.eq_ignore_ascii_case(f))
}

/// kube-proxy's `mode` and `ipvs.strictARP` from its ConfigMap's `config.conf` (a
/// `KubeProxyConfiguration` in YAML, as kubeadm, minikube and kind write it).
fn kube_proxy_report(cm: Option<&ConfigMap>) -> KubeProxyReport {
    let unknown = KubeProxyReport {
        mode: "unknown".into(),
        strict_arp: "unknown".into(),
    };
    let Some(text) = cm
        .and_then(|cm| cm.data.as_ref())
        .and_then(|d| d.get("config.conf"))
    else {
        return unknown;
    };
    let Ok(value) = serde_saphyr::from_str::<serde_json::Value>(text) else {
        return unknown;
    };
    let mode = match value.get("mode") {
        Some(serde_json::Value::String(m)) if m.is_empty() => "iptables".to_owned(),
        Some(serde_json::Value::String(m)) => m.clone(),
        Some(serde_json::Value::Null) => "iptables".to_owned(),
        _ => "unknown".to_owned(),
    };
    let strict_arp = match value.get("ipvs").and_then(|i| i.get("strictARP")) {
        Some(serde_json::Value::Bool(b)) => b.to_string(),
        _ => "unknown".to_owned(),
    };
    KubeProxyReport { mode, strict_arp }
}

/// The report as text for a terminal: one section per heading, then what needs attention.
pub fn render(r: &Report) -> String {
    let mut out = String::new();
    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let _ = writeln!(
        out,
        "Kubernetes   {} (minimum {}: {})",
        r.kubernetes.version,
        r.kubernetes.minimum,
        match r.kubernetes.supported {
            Some(true) => "supported",
            Some(false) => "TOO OLD",
            None => "unknown",
        }
    );
    let ps = if r.namespace.pod_security.is_empty() {
        "no Pod Security labels".to_owned()
    } else {
        r.namespace
            .pod_security
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let _ = writeln!(
        out,
        "Namespace    {} ({}; Pod Security: {ps})",
        r.namespace.name,
        if r.namespace.exists {
            "exists"
        } else {
            "MISSING"
        }
    );
    let _ = writeln!(
        out,
        "Key          Secret {}: {}",
        r.key.secret,
        if r.key.exists { "exists" } else { "MISSING" }
    );
    let _ = writeln!(
        out,
        "kube-proxy   mode {}, strictARP {}",
        r.kube_proxy.mode, r.kube_proxy.strict_arp
    );
    let _ = writeln!(
        out,
        "MetalLB      {}",
        if r.metallb.active {
            format!(
                "ACTIVE in {} ({}){}",
                r.metallb.namespace,
                r.metallb
                    .workloads
                    .iter()
                    .map(|w| format!("{} {} {}/{}", w.kind, w.name, w.ready, w.desired))
                    .collect::<Vec<_>>()
                    .join(", "),
                if r.metallb.minikube_addon {
                    ", minikube addon"
                } else {
                    ""
                }
            )
        } else if r.metallb.namespace_exists {
            format!("not running (namespace {} remains)", r.metallb.namespace)
        } else {
            "not installed".to_owned()
        }
    );

    let _ = writeln!(
        out,
        "\nPOOL                 IPv4 USED/FREE       IPv6 USED/FREE       CONDITIONS"
    );
    if r.pools.is_empty() {
        let _ = writeln!(out, "(none)");
    }
    for p in &r.pools {
        let conds = p
            .conditions
            .iter()
            .map(|c| {
                if c.reason.is_empty() {
                    format!("{}={}", c.type_, c.status)
                } else {
                    format!("{}={} ({})", c.type_, c.status, c.reason)
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let _ = writeln!(
            out,
            "{:<20} {:<20} {:<20} {}",
            p.name,
            format!("{}/{}", p.ipv4.used, p.ipv4.free),
            format!("{}/{}", p.ipv6.used, p.ipv6.free),
            if conds.is_empty() { "-".into() } else { conds }
        );
    }

    let _ = writeln!(
        out,
        "\nIP                      NODE                 INTERFACES   SERVICES"
    );
    if r.addresses.is_empty() {
        let _ = writeln!(out, "(none)");
    }
    for a in &r.addresses {
        let node = match (&a.node, &a.held_by) {
            (None, _) => "(nobody)".to_owned(),
            (Some(n), Some(mac)) => format!("{n} (held: {mac})"),
            (Some(n), None) => n.clone(),
        };
        let _ = writeln!(
            out,
            "{:<23} {:<20} {:<12} {}",
            a.ip,
            node,
            if a.interfaces.is_empty() {
                "-".to_owned()
            } else {
                a.interfaces.join(",")
            },
            a.services.join(", ")
        );
    }

    let _ = writeln!(out, "\nPENDING SERVICE           WHY");
    if r.pending.is_empty() {
        let _ = writeln!(out, "(none)");
    }
    for p in &r.pending {
        let _ = writeln!(out, "{:<25} {}", p.service, p.reason);
    }

    let _ = writeln!(out, "\nNODE                 MEMBERS  EXCLUDED");
    for n in &r.nodes {
        let _ = writeln!(
            out,
            "{:<20} {:<8} {}",
            n.name,
            n.members.map_or("-".to_owned(), |m| m.to_string()),
            if n.excluded.is_empty() {
                "no".to_owned()
            } else {
                n.excluded.join("; ")
            }
        );
    }
    let _ = writeln!(
        out,
        "Membership   {} speaker(s) report; agree: {}",
        r.membership.reporting,
        r.membership.agree.map_or("unknown", yes_no)
    );

    if r.attention.is_empty() {
        let _ = writeln!(out, "\nNothing needs attention.");
    } else {
        let _ = writeln!(out, "\nNeeds attention:");
        for line in &r.attention {
            let _ = writeln!(out, "- {line}");
        }
    }
    out
}

#[cfg(test)]
mod tests;
