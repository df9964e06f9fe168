//! The traffic-path matrix of issue #13: {kube-proxy iptables, nftables} × {externalTrafficPolicy
//! Cluster, Local} × {IPv4, IPv6}, observed from a LAN client on real frames and real kube-proxy
//! rules. One dual-stack lab per proxy mode ([`run`]) serves all four (policy, family) cases:
//!
//! - three nodes, each running kube-proxy in the mode under test and a speaker; one controller;
//! - four dual-stack backend pods ([`PODS`]): `web-1`@node-1, `web-2`@node-2, `web-3`@node-3,
//!   `web-4`@node-2, each answering `GET /source` with its name and the source address it saw;
//! - one pool with an IPv4 and an IPv6 range on the LAN, one L2Advertisement;
//! - Service `web-cluster` (`externalTrafficPolicy: Cluster`, `RequireDualStack`) with every pod
//!   as endpoint in both families;
//! - Service `web-local` (`Local`, `RequireDualStack`): IPv4 endpoints `web-2`, `web-3`, `web-4`
//!   (node-2 and node-3; node-1 has none), and an IPv6 slice with only the pods of **one** of
//!   those nodes: the one the rendezvous hash does *not* pick among node-2 and node-3 for the IPv6
//!   external IP. A speaker that judged IPv6 eligibility from the IPv4 endpoints would announce
//!   the IPv6 IP from a node whose kube-proxy has no local IPv6 endpoint and drops the traffic —
//!   the per-family rule of S1 clause 7 that this matrix found missing.
//!
//! For each case [`run`] records who answers ARP/NDP for the external IP, which pods answered
//! [`REQUESTS`] HTTP requests through it and which source addresses they saw, what each node's
//! NodePort and the ClusterIP (from inside a node) reach, and, for `Local` over IPv4, the demo's
//! failover story. The test (`tests/tests/datapath.rs`) asserts on the [`ModeReport`]; the
//! runner only fails when the lab cannot be set up or an address never appears.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{Patch, PatchParams};

use super::failover::{FailoverOutcome, kill_owner};
use super::http_client;
use super::kube_proxy::{KubeProxy, ProxyMode};
use super::pods::{POD_PORT, Pods, parse_source};
use super::{Lab, Seen, within_netns};
use crate::controller::{ControllerOptions, ControllerProcess};
use crate::objects::{EndpointSpec, apply_endpoints_of};

/// The backend pods: `(name, node)`.
pub const PODS: [(&str, &str); 4] = [
    ("web-1", "node-1"),
    ("web-2", "node-2"),
    ("web-3", "node-3"),
    ("web-4", "node-2"),
];
/// The pods behind `web-local` over IPv4 (node-2 and node-3 host them, node-1 none).
pub const LOCAL_V4_PODS: [&str; 3] = ["web-2", "web-3", "web-4"];
/// The pool's ranges: IPv4 off the node subnet (clients route it on-link), IPv6 inside the LAN.
pub const POOL: [&str; 2] = [
    "198.51.100.200-198.51.100.220",
    "2001:db8:1a::200-2001:db8:1a::220",
];
/// Requests through each external IP.
pub const REQUESTS: usize = 40;
/// Requests to each NodePort and to each ClusterIP.
const PROBES: usize = 8;
/// Requests to a NodePort that is expected to drop them (`Local`, no local endpoint): each costs
/// a full [`REQUEST_TIMEOUT`].
const DROP_PROBES: usize = 2;
/// How long one request may take. Above TCP's initial SYN retransmission timeout (1 s, RFC 6298):
/// in the lab the first IPv6 packet a node forwards to a neighbour it has not resolved yet is
/// sometimes lost (seen on the bridge: Neighbor Solicitation and Advertisement go through, the
/// queued SYN does not), and the client's retransmission is what a real client would rely on.
/// This asserts correctness, not latency (the benchmarks measure that).
const REQUEST_TIMEOUT: Duration = Duration::from_millis(2500);
/// The Service port (its `targetPort` is [`POD_PORT`]).
pub const SERVICE_PORT: u16 = 80;
const SETTLE: Duration = Duration::from_secs(30);

/// `externalTrafficPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Policy {
    /// `Cluster`: any node forwards, the source is masqueraded.
    Cluster,
    /// `Local`: only nodes with a local endpoint forward, the source is kept.
    Local,
}

impl Policy {
    /// The Service of this policy.
    pub fn service(self) -> &'static str {
        match self {
            Policy::Cluster => "web-cluster",
            Policy::Local => "web-local",
        }
    }

    /// The spelling in `spec.externalTrafficPolicy`.
    pub fn as_str(self) -> &'static str {
        match self {
            Policy::Cluster => "Cluster",
            Policy::Local => "Local",
        }
    }
}

/// Answers to a series of `GET /source` requests.
#[derive(Debug, Clone, Default)]
pub struct Answers {
    /// Pod name → answers.
    pub per_pod: BTreeMap<String, usize>,
    /// Every source address the pods reported.
    pub sources: BTreeSet<IpAddr>,
    /// One message per failed request.
    pub errors: Vec<String>,
}

impl Answers {
    /// The nodes of the pods that answered (per [`PODS`]).
    pub fn nodes(&self) -> BTreeSet<&'static str> {
        self.per_pod
            .keys()
            .filter_map(|p| PODS.iter().find(|(name, _)| name == p).map(|(_, n)| *n))
            .collect()
    }
}

/// One (policy, family) case.
#[derive(Debug, Clone)]
pub struct CaseReport {
    /// The traffic policy.
    pub policy: Policy,
    /// The external IP of the case's family.
    pub external_ip: IpAddr,
    /// The client's own address of that family.
    pub client_ip: IpAddr,
    /// The nodes with an endpoint of the family (`Local`), or every node (`Cluster`).
    pub eligible: BTreeSet<String>,
    /// The pods that are endpoints of the family.
    pub endpoints: BTreeSet<String>,
    /// The nodes whose MAC answered ARP/NDP for the external IP (after waiting for one).
    pub responders: BTreeSet<String>,
    /// Requests through the external IP.
    pub external: Answers,
    /// Per node: requests to its address of the family on the Service's NodePort.
    pub node_ports: BTreeMap<String, Answers>,
    /// Requests to the ClusterIP of the family from inside node-1.
    pub cluster_ip: Answers,
}

/// Everything observed in one proxy mode.
#[derive(Debug)]
pub struct ModeReport {
    /// The kube-proxy mode.
    pub mode: ProxyMode,
    /// The four cases, in the order Cluster v4, Cluster v6, Local v4, Local v6.
    pub cases: Vec<CaseReport>,
    /// The failover of `web-local`'s IPv4 address (its owner's speaker killed under load).
    pub failover: FailoverOutcome,
    /// kube-proxy's rules for `web-local`'s IPv4 address on its owner (for docs/datapath.md).
    pub evidence: String,
    /// Wall-clock time of the whole run.
    pub took: Duration,
}

struct Running {
    proxies: Vec<KubeProxy>,
    _controller: ControllerProcess,
    pods: Pods,
    lab: Lab,
}

/// Runs the matrix for one kube-proxy mode, printing progress to `out`.
///
/// # Errors
/// The lab could not be set up, or a Service never got its addresses or rules.
pub async fn run(mode: ProxyMode, out: &mut (dyn Write + Send)) -> anyhow::Result<ModeReport> {
    let started = Instant::now();
    let mut lab = Lab::start_dual_stack(3, 1).await?;
    let pods = lab.add_pods(&PODS)?;
    let controller = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("datapath-controller"),
    )?;
    let names: Vec<String> = lab.nodes.iter().map(|n| n.name.clone()).collect();
    let mut proxies = Vec::new();
    for name in &names {
        proxies.push(lab.start_kube_proxy(name, mode)?);
        lab.start_speaker(name, &[])?;
    }
    let mut r = Running {
        proxies,
        _controller: controller,
        pods,
        lab,
    };
    writeln!(
        out,
        "[{mode}] lab up in {:.1} s",
        started.elapsed().as_secs_f64()
    )?;
    let result = cases(&mut r, mode, out).await;
    if result.is_err() {
        for proxy in &r.proxies {
            let _ = writeln!(
                out,
                "--- kube-proxy {} ---\n{}",
                proxy.node,
                proxy.log_tail(15)
            );
        }
        for node in &r.lab.nodes {
            let _ = writeln!(
                out,
                "--- speaker {} ---\n{}",
                node.name,
                r.lab.speaker_log(&node.name, 15)
            );
        }
    }
    let (cases, failover, evidence) = result?;
    Ok(ModeReport {
        mode,
        cases,
        failover,
        evidence,
        took: started.elapsed(),
    })
}

type Outcome = (Vec<CaseReport>, FailoverOutcome, String);

async fn cases(
    r: &mut Running,
    mode: ProxyMode,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Outcome> {
    let client = r.lab.client().await?;
    apply_pool(&client).await?;
    for policy in [Policy::Cluster, Policy::Local] {
        apply_service(&client, policy, true).await?;
    }
    let pod_addr = |name: &str, v6: bool| -> anyhow::Result<String> {
        let pod = r
            .pods
            .pods
            .iter()
            .find(|p| p.name == name)
            .with_context(|| format!("no pod {name}"))?;
        Ok(if v6 {
            pod.ip6.context("pod without IPv6")?.to_string()
        } else {
            pod.ip.to_string()
        })
    };
    let svcs: Api<Service> = Api::namespaced(client.clone(), "default");
    let mut status = BTreeMap::new();
    for policy in [Policy::Cluster, Policy::Local] {
        status.insert(policy, wait_for_addresses(&svcs, policy.service()).await?);
    }

    // Endpoints. web-cluster: every pod in both families. web-local: see the module docs.
    let all: Vec<&str> = PODS.iter().map(|(p, _)| *p).collect();
    let local_v6 = local_v6_pods(&status[&Policy::Local])?;
    let plan: [(Policy, &str, Vec<&str>); 4] = [
        (Policy::Cluster, "IPv4", all.clone()),
        (Policy::Cluster, "IPv6", all.clone()),
        (Policy::Local, "IPv4", LOCAL_V4_PODS.to_vec()),
        (Policy::Local, "IPv6", local_v6.clone()),
    ];
    for (policy, family, pods) in &plan {
        let v6 = *family == "IPv6";
        let addrs: Vec<(String, &str)> = pods
            .iter()
            .map(|p| Ok((pod_addr(p, v6)?, node_of(p))))
            .collect::<anyhow::Result<_>>()?;
        let eps: Vec<EndpointSpec<'_>> = addrs
            .iter()
            .map(|(a, n)| (a.as_str(), Some(*n), true, true, false))
            .collect();
        apply_endpoints_of(
            &client,
            "default",
            policy.service(),
            family,
            i32::from(POD_PORT),
            &eps,
        )
        .await?;
    }

    let mut reports = Vec::new();
    for (policy, family, pods) in &plan {
        let s = &status[policy];
        let v6 = *family == "IPv6";
        let external_ip = s.external(v6)?;
        for proxy in &r.proxies {
            proxy.wait_for_rules(external_ip, SETTLE).await?;
        }
        let endpoints: BTreeSet<String> = pods.iter().map(|p| (*p).to_owned()).collect();
        let eligible: BTreeSet<String> = match policy {
            Policy::Cluster => r.lab.nodes.iter().map(|n| n.name.clone()).collect(),
            Policy::Local => pods.iter().map(|p| node_of(p).to_owned()).collect(),
        };
        let responders = wait_for_one_responder(&r.lab, external_ip).await?;
        let client_ns = r.lab.clients[0].netns.clone();
        let client_ip = if v6 {
            IpAddr::V6(r.lab.clients[0].ip6.context("client without IPv6")?)
        } else {
            IpAddr::V4(r.lab.clients[0].ip)
        };
        let external = requests(
            &client_ns,
            SocketAddr::new(external_ip, SERVICE_PORT),
            REQUESTS,
        )
        .await?;
        let mut node_ports = BTreeMap::new();
        for node in &r.lab.nodes {
            let node_ip = if v6 {
                IpAddr::V6(node.ip6.context("node without IPv6")?)
            } else {
                IpAddr::V4(node.ip)
            };
            let expect_drop =
                *policy == Policy::Local && !pods.iter().any(|p| node_of(p) == node.name.as_str());
            let n = if expect_drop { DROP_PROBES } else { PROBES };
            let answers = requests(&client_ns, SocketAddr::new(node_ip, s.node_port), n).await?;
            node_ports.insert(node.name.clone(), answers);
        }
        let cluster_ip = requests(
            &r.lab.node("node-1").netns,
            SocketAddr::new(s.cluster_ip(v6)?, SERVICE_PORT),
            PROBES,
        )
        .await?;
        writeln!(
            out,
            "[{mode}] {} {family} {external_ip}: answered by {responders:?} (eligible {eligible:?}); pods {:?}; sources {:?}; {} errors",
            policy.as_str(),
            external.per_pod,
            external.sources,
            external.errors.len()
        )?;
        reports.push(CaseReport {
            policy: *policy,
            external_ip,
            client_ip,
            eligible,
            endpoints,
            responders,
            external,
            node_ports,
            cluster_ip,
        });
    }

    // Evidence and the failover story for web-local over IPv4.
    let local_v4 = reports
        .iter()
        .find(|c| c.policy == Policy::Local && c.external_ip.is_ipv4())
        .context("no Local IPv4 case")?;
    let owner = local_v4
        .responders
        .first()
        .cloned()
        .context("nobody answers for web-local's IPv4 address")?;
    let evidence = r
        .proxies
        .iter()
        .find(|p| p.node == owner)
        .context("no kube-proxy on the owner")?
        .evidence_for(local_v4.external_ip)?;
    let eligible: Vec<String> = local_v4.eligible.iter().cloned().collect();
    let addr = SocketAddr::new(local_v4.external_ip, SERVICE_PORT);
    writeln!(
        out,
        "[{mode}] failover: SIGKILL the speaker of {owner}, the owner of {addr}"
    )?;
    let failover = kill_owner(&mut r.lab, 0, addr, &owner, &eligible, out).await?;
    Ok((reports, failover, evidence))
}

fn node_of(pod: &str) -> &'static str {
    PODS.iter().find(|(p, _)| *p == pod).map_or("", |(_, n)| *n)
}

/// The IPv6 endpoints of `web-local`: the pods of the node among `LOCAL_V4_PODS`' nodes that the
/// rendezvous hash does not pick for the IPv6 external IP (module docs).
fn local_v6_pods(s: &ServiceAddresses) -> anyhow::Result<Vec<&'static str>> {
    let v6 = s.external(true)?;
    let v4_nodes: BTreeSet<&str> = LOCAL_V4_PODS.iter().map(|p| node_of(p)).collect();
    let picked = ferrolb_speaker::election::owner(v6, v4_nodes.iter().copied())
        .context("no nodes")?
        .to_owned();
    Ok(LOCAL_V4_PODS
        .iter()
        .copied()
        .filter(|p| node_of(p) != picked)
        .collect())
}

async fn apply_pool(client: &kube::Client) -> anyhow::Result<()> {
    let pool = serde_json::json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
        "metadata": { "name": "datapath" },
        "spec": { "addresses": POOL },
    });
    let adv = serde_json::json!({
        "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
        "metadata": { "name": "datapath" }, "spec": {},
    });
    let pp = PatchParams::apply("ferrolb-datapath").force();
    Api::<ferrolb_crds::IPAddressPool>::all(client.clone())
        .patch("datapath", &pp, &Patch::Apply(&pool))
        .await?;
    Api::<ferrolb_crds::L2Advertisement>::all(client.clone())
        .patch("datapath", &pp, &Patch::Apply(&adv))
        .await?;
    Ok(())
}

/// Applies the Service of `policy` (server-side apply, field manager `ferrolb-datapath`):
/// dual-stack when `dual_stack`, else the cluster's default family (IPv4).
///
/// # Errors
/// The API server refused it.
pub async fn apply_service(
    client: &kube::Client,
    policy: Policy,
    dual_stack: bool,
) -> anyhow::Result<()> {
    let mut svc = serde_json::json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": { "name": policy.service(), "namespace": "default" },
        "spec": {
            "type": "LoadBalancer",
            "externalTrafficPolicy": policy.as_str(),
            "ports": [{ "protocol": "TCP", "port": SERVICE_PORT, "targetPort": POD_PORT }],
        },
    });
    if dual_stack {
        svc["spec"]["ipFamilyPolicy"] = "RequireDualStack".into();
        svc["spec"]["ipFamilies"] = serde_json::json!(["IPv4", "IPv6"]);
    }
    Api::<Service>::namespaced(client.clone(), "default")
        .patch(
            policy.service(),
            &PatchParams::apply("ferrolb-datapath").force(),
            &Patch::Apply(&svc),
        )
        .await?;
    Ok(())
}

/// A Service's addresses once both external IPs are assigned.
struct ServiceAddresses {
    external: Vec<IpAddr>,
    cluster: Vec<IpAddr>,
    node_port: u16,
}

impl ServiceAddresses {
    fn external(&self, v6: bool) -> anyhow::Result<IpAddr> {
        self.external
            .iter()
            .copied()
            .find(|ip| ip.is_ipv6() == v6)
            .context("no external IP of that family")
    }

    fn cluster_ip(&self, v6: bool) -> anyhow::Result<IpAddr> {
        self.cluster
            .iter()
            .copied()
            .find(|ip| ip.is_ipv6() == v6)
            .context("no ClusterIP of that family")
    }
}

async fn wait_for_addresses(api: &Api<Service>, name: &str) -> anyhow::Result<ServiceAddresses> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let svc = api.get(name).await?;
        let external: Vec<IpAddr> = svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|i| i.ip.as_deref()?.parse().ok())
            .collect();
        let spec = svc.spec.unwrap_or_default();
        let cluster: Vec<IpAddr> = spec
            .cluster_ips
            .unwrap_or_default()
            .iter()
            .filter_map(|ip| ip.parse().ok())
            .collect();
        let node_port = spec
            .ports
            .unwrap_or_default()
            .first()
            .and_then(|p| p.node_port)
            .and_then(|p| u16::try_from(p).ok());
        let families: BTreeSet<bool> = external.iter().map(IpAddr::is_ipv6).collect();
        if let (2, Some(node_port)) = (families.len(), node_port) {
            return Ok(ServiceAddresses {
                external,
                cluster,
                node_port,
            });
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("{name} has no external IP of each family after {SETTLE:?}: {external:?}");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The lab nodes whose MAC answers ARP (IPv4) or a multicast Neighbor Solicitation (IPv6) for
/// `ip` from client 0, polled until exactly one answers or [`SETTLE`] passes.
async fn wait_for_one_responder(lab: &Lab, ip: IpAddr) -> anyhow::Result<BTreeSet<String>> {
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        let macs: BTreeSet<String> = match ip {
            IpAddr::V4(v4) => lab.arp_answers(0, v4).await?,
            IpAddr::V6(v6) => lab
                .ndp_probe(0, v6, None, None, Duration::from_millis(300))
                .await?
                .iter()
                .filter(|s| matches!(s, Seen::NeighborAdvertisement { .. }) && s.ip() == ip)
                .map(|s| s.mac().to_owned())
                .collect(),
        };
        let nodes: BTreeSet<String> = macs
            .iter()
            .map(|m| {
                lab.node_by_mac(m)
                    .map_or_else(|| m.clone(), |n| n.name.clone())
            })
            .collect();
        if nodes.len() == 1 || tokio::time::Instant::now() >= deadline {
            return Ok(nodes);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `n` `GET /source` requests to `addr` from inside `netns`, each on a new connection.
///
/// # Errors
/// The namespace could not be entered (a failed request is counted in [`Answers::errors`]).
pub async fn requests(netns: &str, addr: SocketAddr, n: usize) -> anyhow::Result<Answers> {
    let netns = netns.to_owned();
    tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            let mut a = Answers::default();
            for i in 0..n {
                match http_client::get(addr, "/source", REQUEST_TIMEOUT)
                    .and_then(|body| parse_source(&body))
                {
                    Ok((pod, source)) => {
                        *a.per_pod.entry(pod).or_default() += 1;
                        a.sources.insert(source);
                    }
                    Err(e) => a.errors.push(format!("request {i}: {e:#}")),
                }
            }
            Ok(a)
        })
    })
    .await?
}
