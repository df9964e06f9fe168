//! The one-command demo (issue 5; `demo.sh`, `ferrolb-demo`, `docs/demo.md`): a real API server,
//! three node namespaces each running a real kube-proxy (nftables mode, or iptables with
//! [`DemoOptions::proxy_mode`]) and a speaker, one
//! controller, three backend pods, a client on the LAN — then a LoadBalancer Service is created,
//! ARP shows which node answers for its IP, 300 HTTP requests spread over the pods through
//! kube-proxy's DNAT, and the owning speaker is killed to show the failover.
//!
//! The same story runs with MetalLB instead ([`DemoOptions::implementation`], issue #11:
//! `./demo.sh --implementation metallb`): its controller and speakers on the same nodes, the pool
//! in its own `metallb.io` CRDs, and its own owner choice predicted and checked
//! ([`super::owner_choice`]).
//!
//! [`run`] prints what a person would look at, step by step, to the given writer and returns a
//! [`DemoReport`] for tests to assert on. Every step that does not reach its goal returns an error
//! (after printing the relevant log tails); everything is torn down on return, also after an error.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Service;
use kube::Api;

use super::http_client;
use super::kube_proxy::{KubeProxy, ProxyMode};
use super::owner_choice;
use super::pods::{POD_CIDR, POD_PORT, Pods};
use super::{Implementation, Lab, Seen, metallb, within_netns};
use crate::controller::{ControllerOptions, ControllerProcess};
use crate::objects::{EndpointSpec, apply_endpoints};

/// Node namespaces in the demo.
pub const NODES: usize = 3;
/// The demo's IPAddressPool range (issue 5).
pub const POOL_RANGE: &str = "198.51.100.200-198.51.100.220";
/// The Service's namespace and name.
pub const SERVICE: (&str, &str) = ("default", "web");
/// The Service port (its `targetPort` is [`POD_PORT`]).
pub const SERVICE_PORT: u16 = 80;
/// How long the demo waits for anything to settle (allocation, rules, ownership).
const SETTLE: Duration = Duration::from_secs(30);

/// How to run the demo.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Also print kube-proxy's rules (nftables table or iptables `nat` chains) for the external
    /// IP from the owner node, and where the logs are.
    pub verbose: bool,
    /// HTTP requests in step 5 (issue 5: 300).
    pub requests: usize,
    /// kube-proxy's mode on every node (issue #13: `./demo.sh --proxy-mode iptables`).
    pub proxy_mode: ProxyMode,
    /// Whose controller and speakers run (issue #11: `./demo.sh --implementation metallb`).
    pub implementation: Implementation,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            verbose: false,
            requests: 300,
            proxy_mode: ProxyMode::Nftables,
            implementation: Implementation::Ferrolb,
        }
    }
}

/// What the ARP request of step 4 showed.
#[derive(Debug, Clone)]
pub struct ArpOutcome {
    /// Every MAC that answered, with the lab node it belongs to (if any).
    pub responders: Vec<(String, Option<String>)>,
    /// The node whose MAC answered.
    pub owner: String,
    /// That node's MAC.
    pub owner_mac: String,
    /// The owner the implementation's rule predicts for the IP over all nodes
    /// ([`owner_choice::expected_owner`]: for ferrolb the rendezvous hash of DESIGN S2).
    pub expected_owner: String,
}

pub use super::failover::FailoverOutcome;

/// The outcome of a demo run.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// The Service's allocated external IP.
    pub external_ip: Ipv4Addr,
    /// `kubectl get svc web` as printed.
    pub kubectl_get_svc: String,
    /// The pods: `(name, node, address)`.
    pub pods: Vec<(String, String, Ipv4Addr)>,
    /// Step 4.
    pub arp: ArpOutcome,
    /// Step 5: answers per backend name.
    pub per_backend: BTreeMap<String, usize>,
    /// Step 5: failed requests.
    pub http_errors: usize,
    /// Step 5: conntrack entries with original destination = the external IP, per node (`None`
    /// when the `conntrack` command is missing).
    pub conntrack: Option<BTreeMap<String, usize>>,
    /// Step 6.
    pub failover: FailoverOutcome,
}

/// What steps 2–5 observed (the report without the failover).
struct Observed {
    external_ip: Ipv4Addr,
    kubectl_get_svc: String,
    pods: Vec<(String, String, Ipv4Addr)>,
    arp: ArpOutcome,
    per_backend: BTreeMap<String, usize>,
    http_errors: usize,
    conntrack: Option<BTreeMap<String, usize>>,
}

/// Everything the demo runs. Field order is drop order: processes and pods go before the lab.
struct Running {
    proxies: Vec<KubeProxy>,
    /// ferrolb's controller; `None` for MetalLB, whose controller the lab runs.
    controller: Option<ControllerProcess>,
    pods: Pods,
    lab: Lab,
}

impl Running {
    /// Why the controller is gone, with its log's tail, if it exited.
    fn controller_exited(&self) -> Option<String> {
        match &self.controller {
            Some(c) => c
                .process()
                .exit_status()
                .map(|status| format!("ferrolb-controller exited ({status}):\n{}", c.log_tail(30))),
            None => self.lab.metallb_controller_exit().map(|status| {
                format!(
                    "MetalLB's controller exited ({status}):\n{}",
                    self.lab.metallb_controller_log(30)
                )
            }),
        }
    }

    /// The tail of the controller's log.
    fn controller_log(&self, lines: usize) -> String {
        match &self.controller {
            Some(c) => c.log_tail(lines),
            None => self.lab.metallb_controller_log(lines),
        }
    }
}

/// Runs the demo, printing each step to `out`. See the module docs.
///
/// # Errors
/// A step failed (the message says which and why); the lab is torn down before returning.
pub async fn run(opts: &DemoOptions, out: &mut (dyn Write + Send)) -> anyhow::Result<DemoReport> {
    let started = Instant::now();
    writeln!(
        out,
        "[1/7] Starting the test cluster (etcd + kube-apiserver) and a lab of {NODES} node namespaces"
    )?;
    let mut running = start(opts.proxy_mode, opts.implementation, out).await?;
    if opts.verbose {
        writeln!(
            out,
            "  logs in {} (FERROLB_KEEP_LAB_LOGS=1 keeps them)",
            running.lab.dir().display()
        )?;
    }
    let lab_id = running.lab.id().to_owned();
    let result = steps(&running, opts, out).await;
    let seen = match result {
        Ok(seen) => seen,
        Err(e) => {
            let _ = writeln!(out, "\nFAILED: {e:#}");
            let _ = print_logs(&running, out);
            return Err(e);
        }
    };
    let failover = match failover(&mut running, &seen, out).await {
        Ok(f) => f,
        Err(e) => {
            let _ = writeln!(out, "\nFAILED: {e:#}");
            let _ = print_logs(&running, out);
            return Err(e);
        }
    };

    writeln!(out, "\n[7/7] Cleaning up")?;
    drop(running);
    let prefix = format!("flb{lab_id}-");
    let leftover: Vec<String> = super::sh("ip", &["netns", "list"])?
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|n| n.starts_with(&prefix))
        .map(str::to_owned)
        .collect();
    if !leftover.is_empty() {
        bail!("namespaces left behind: {leftover:?}");
    }
    writeln!(
        out,
        "  processes stopped, namespaces {prefix}* deleted, cluster state removed"
    )?;
    writeln!(out, "\ndemo OK in {:.1} s", started.elapsed().as_secs_f64())?;
    Ok(DemoReport {
        external_ip: seen.external_ip,
        kubectl_get_svc: seen.kubectl_get_svc,
        pods: seen.pods,
        arp: seen.arp,
        per_backend: seen.per_backend,
        http_errors: seen.http_errors,
        conntrack: seen.conntrack,
        failover,
    })
}

/// Step 1: the lab, pods, controller, kube-proxies and speakers.
async fn start(
    mode: ProxyMode,
    implementation: Implementation,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Running> {
    let mut lab = Lab::start_implementation(implementation, NODES, 1).await?;
    let node_names: Vec<String> = lab.nodes.iter().map(|n| n.name.clone()).collect();
    let pod_specs: Vec<(String, String)> = node_names
        .iter()
        .enumerate()
        .map(|(i, n)| (format!("web-{}", i + 1), n.clone()))
        .collect();
    let pod_refs: Vec<(&str, &str)> = pod_specs
        .iter()
        .map(|(p, n)| (p.as_str(), n.as_str()))
        .collect();
    let pods = lab.add_pods(&pod_refs)?;
    let controller = match implementation {
        Implementation::Ferrolb => Some(start_controller(&lab)?),
        Implementation::MetalLb => {
            lab.start_metallb_controller()?;
            None
        }
    };
    let mut proxies = Vec::new();
    for name in &node_names {
        proxies.push(lab.start_kube_proxy(name, mode)?);
        lab.start_speaker(name, &[])?;
    }
    writeln!(
        out,
        "  API server       https://127.0.0.1:{} (kubeconfig {})",
        lab.cluster().port(),
        lab.cluster().kubeconfig().display()
    )?;
    let speaker = match implementation {
        Implementation::Ferrolb => {
            writeln!(
                out,
                "  controller       ferrolb-controller (one replica, holds the Lease)"
            )?;
            "ferrolb-speaker".to_owned()
        }
        Implementation::MetalLb => {
            let version = metallb::Binaries::locate()?.version()?;
            writeln!(
                out,
                "  controller       MetalLB {version} controller (one replica, webhooks off)"
            )?;
            format!("MetalLB {version} speaker (memberlist)")
        }
    };
    for node in &lab.nodes {
        writeln!(
            out,
            "  {:<16} {:<14} MAC {}  runs kube-proxy ({mode}) + {speaker}",
            node.name, node.ip, node.mac
        )?;
    }
    for pod in &pods.pods {
        writeln!(
            out,
            "  pod {:<12} {:<14} on {}, answers GET /hostname on :{POD_PORT}",
            pod.name, pod.ip, pod.node
        )?;
    }
    for client in &lab.clients {
        writeln!(out, "  client           {:<14} on the LAN", client.ip)?;
    }
    Ok(Running {
        proxies,
        controller,
        pods,
        lab,
    })
}

fn start_controller(lab: &Lab) -> anyhow::Result<ControllerProcess> {
    ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("demo-controller"),
    )
}

/// Steps 2–5.
async fn steps(
    r: &Running,
    opts: &DemoOptions,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<Observed> {
    let kubeconfig = r.lab.cluster().kubeconfig().to_path_buf();
    let client = r.lab.client().await?;

    writeln!(
        out,
        "\n[2/7] Creating an IPAddressPool and an L2Advertisement"
    )?;
    let implementation = r.lab.implementation();
    let pool_yaml = pool_yaml(implementation);
    print_indented(out, &pool_yaml, "    ")?;
    writeln!(out, "  $ kubectl apply -f -")?;
    print_indented(
        out,
        &kubectl(&kubeconfig, &["apply", "-f", "-"], Some(&pool_yaml))?,
        "    ",
    )?;

    writeln!(
        out,
        "\n[3/7] Creating the backends' EndpointSlice and Service {}/{} (port {SERVICE_PORT} -> {POD_PORT}, type LoadBalancer)",
        SERVICE.0, SERVICE.1
    )?;
    let addresses: Vec<String> = r.pods.pods.iter().map(|p| p.ip.to_string()).collect();
    let endpoints: Vec<EndpointSpec<'_>> = r
        .pods
        .pods
        .iter()
        .zip(&addresses)
        .map(|(p, a)| (a.as_str(), Some(p.node.as_str()), true, true, false))
        .collect();
    apply_endpoints(
        &client,
        SERVICE.0,
        SERVICE.1,
        i32::from(POD_PORT),
        &endpoints,
    )
    .await?;
    writeln!(
        out,
        "  EndpointSlice {}-lab: {} (ready, with nodeName; written by the lab: there is no kubelet)",
        SERVICE.1,
        {
            let list: Vec<String> = r
                .pods
                .pods
                .iter()
                .map(|p| format!("{}:{POD_PORT}@{}", p.ip, p.node))
                .collect();
            list.join(", ")
        }
    )?;
    let svc_yaml = format!(
        "apiVersion: v1\nkind: Service\nmetadata:\n  name: {}\n  namespace: {}\nspec:\n  type: LoadBalancer\n  selector:\n    app: web\n  ports:\n  - protocol: TCP\n    port: {SERVICE_PORT}\n    targetPort: {POD_PORT}\n",
        SERVICE.1, SERVICE.0
    );
    print_indented(out, &svc_yaml, "    ")?;
    writeln!(out, "  $ kubectl apply -f -")?;
    print_indented(
        out,
        &kubectl(&kubeconfig, &["apply", "-f", "-"], Some(&svc_yaml))?,
        "    ",
    )?;
    let external_ip = wait_for_external_ip(r, &client).await?;
    writeln!(out, "  $ kubectl get svc {}", SERVICE.1)?;
    let kubectl_get_svc = kubectl(
        &kubeconfig,
        &["get", "svc", SERVICE.1, "-n", SERVICE.0],
        None,
    )?;
    print_indented(out, &kubectl_get_svc, "    ")?;
    if !kubectl_get_svc.contains(&external_ip.to_string()) {
        bail!("kubectl get svc does not show the external IP {external_ip}");
    }
    let get_pools: &[&str] = match implementation {
        Implementation::Ferrolb => &["get", "ipaddresspools"],
        Implementation::MetalLb => &["get", "ipaddresspools.metallb.io", "-n", metallb::NAMESPACE],
    };
    writeln!(out, "  $ kubectl {}", get_pools.join(" "))?;
    print_indented(out, &kubectl(&kubeconfig, get_pools, None)?, "    ")?;
    for proxy in &r.proxies {
        proxy
            .wait_for_rules(IpAddr::V4(external_ip), SETTLE)
            .await?;
    }
    writeln!(
        out,
        "  kube-proxy on every node has {} rules for {external_ip}",
        opts.proxy_mode
    )?;

    writeln!(
        out,
        "\n[4/7] ARP: who has {external_ip}? (broadcast from the client)"
    )?;
    let arp = step_arp(r, external_ip, out).await?;
    if opts.verbose {
        let proxy = r
            .proxies
            .iter()
            .find(|p| p.node == arp.owner)
            .context("no kube-proxy on the owner")?;
        let source = match opts.proxy_mode {
            ProxyMode::Nftables => "nft list table ip kube-proxy",
            ProxyMode::Iptables => "iptables-save -t nat",
            ProxyMode::Ipvs { .. } => "ip addr show dev kube-ipvs0, ipvsadm -Ln, ipset list",
        };
        writeln!(
            out,
            "  kube-proxy's rules for {external_ip} on {} ({source}, followed chains):",
            arp.owner
        )?;
        print_indented(out, &proxy.evidence_for(IpAddr::V4(external_ip))?, "  ")?;
    }

    writeln!(
        out,
        "\n[5/7] {} HTTP requests from the client to http://{external_ip}/hostname (a new connection each)",
        opts.requests
    )?;
    let addr = SocketAddr::from((external_ip, SERVICE_PORT));
    let netns = r.lab.clients.first().context("no client")?.netns.clone();
    let n = opts.requests;
    let tally = tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            Ok(http_client::tally(addr, n, Duration::from_secs(2)))
        })
    })
    .await??;
    let width = r.pods.pods.iter().map(|p| p.name.len()).max().unwrap_or(0);
    for pod in &r.pods.pods {
        let count = tally.per_backend.get(&pod.name).copied().unwrap_or(0);
        writeln!(
            out,
            "  {:<width$} ({}) {count:>4}  {}",
            pod.name,
            pod.node,
            "#".repeat(count.div_ceil(5))
        )?;
    }
    for (name, count) in &tally.per_backend {
        if !r.pods.pods.iter().any(|p| &p.name == name) {
            writeln!(out, "  unexpected answer {name:?}: {count}")?;
        }
    }
    if !tally.errors.is_empty() {
        writeln!(
            out,
            "  {} requests failed, first: {}",
            tally.errors.len(),
            tally.errors.first().map_or("", String::as_str)
        )?;
    }
    let conntrack = conntrack_counts(r, external_ip)?;
    match &conntrack {
        Some(counts) => {
            let list: Vec<String> = counts.iter().map(|(n, c)| format!("{n}: {c}")).collect();
            writeln!(
                out,
                "  conntrack entries to {external_ip} per node (DNAT happens on the owner): {}",
                list.join(", ")
            )?;
        }
        None => writeln!(
            out,
            "  (conntrack command not installed; skipping the per-node connection count)"
        )?,
    }
    if !tally.errors.is_empty() {
        bail!(
            "{} of {} HTTP requests failed",
            tally.errors.len(),
            opts.requests
        );
    }
    let silent: Vec<&str> = r
        .pods
        .pods
        .iter()
        .filter(|p| !tally.per_backend.contains_key(&p.name))
        .map(|p| p.name.as_str())
        .collect();
    if !silent.is_empty() {
        bail!("backends that never answered: {silent:?}");
    }
    Ok(Observed {
        external_ip,
        kubectl_get_svc,
        pods: r
            .pods
            .pods
            .iter()
            .map(|p| (p.name.clone(), p.node.clone(), p.ip))
            .collect(),
        arp,
        per_backend: tally.per_backend,
        http_errors: tally.errors.len(),
        conntrack,
    })
}

async fn wait_for_external_ip(r: &Running, client: &kube::Client) -> anyhow::Result<Ipv4Addr> {
    let api: Api<Service> = Api::namespaced(client.clone(), SERVICE.0);
    let deadline = tokio::time::Instant::now() + SETTLE;
    loop {
        if let Some(why) = r.controller_exited() {
            bail!("{why}");
        }
        let svc = api.get(SERVICE.1).await?;
        let ip = svc
            .status
            .and_then(|s| s.load_balancer)
            .and_then(|lb| lb.ingress)
            .and_then(|i| i.into_iter().find_map(|i| i.ip))
            .and_then(|ip| ip.parse::<Ipv4Addr>().ok());
        if let Some(ip) = ip {
            return Ok(ip);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "the controller gave {}/{} no external IP within {SETTLE:?}",
                SERVICE.0,
                SERVICE.1
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Step 4: wait for the predicted owner to answer alone, then show one probe's answers.
async fn step_arp(
    r: &Running,
    ip: Ipv4Addr,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<ArpOutcome> {
    let implementation = r.lab.implementation();
    let names: Vec<&str> = r.lab.nodes.iter().map(|n| n.name.as_str()).collect();
    let expected_owner =
        owner_choice::expected_owner(implementation, IpAddr::V4(ip), names.iter().copied())
            .context("no nodes")?;
    r.lab
        .wait_for_owner(0, ip, Some(&expected_owner), SETTLE)
        .await?;
    let seen = r.lab.arp_probe(0, ip, Duration::from_millis(300)).await?;
    let mut responders: Vec<(String, Option<String>)> = Vec::new();
    for s in &seen {
        if let Seen::ArpReply { ip: sip, mac, .. } = s
            && *sip == ip
        {
            let node = r.lab.node_by_mac(mac).map(|n| n.name.clone());
            writeln!(
                out,
                "  reply: {ip} is-at {mac}  ({})",
                node.as_deref().unwrap_or("not a lab node")
            )?;
            if !responders.iter().any(|(m, _)| m == mac) {
                responders.push((mac.clone(), node));
            }
        }
    }
    let [(owner_mac, Some(owner))] = responders.as_slice() else {
        bail!("expected exactly one lab node to answer ARP for {ip}, got {responders:?}");
    };
    writeln!(
        out,
        "  {owner} answers for {ip} ({} over node-1..node-{NODES} picks {expected_owner}); the other nodes stay silent",
        owner_choice::rule_name(implementation)
    )?;
    if *owner != expected_owner {
        bail!(
            "{owner} answered, but {} picks {expected_owner}",
            owner_choice::rule_name(implementation)
        );
    }
    Ok(ArpOutcome {
        owner: owner.clone(),
        owner_mac: owner_mac.clone(),
        responders,
        expected_owner,
    })
}

/// Conntrack entries whose original destination is `ip`, per node; `None` without `conntrack`.
fn conntrack_counts(r: &Running, ip: Ipv4Addr) -> anyhow::Result<Option<BTreeMap<String, usize>>> {
    if Command::new("conntrack").arg("--version").output().is_err() {
        return Ok(None);
    }
    let mut counts = BTreeMap::new();
    for node in &r.lab.nodes {
        let listing = super::in_netns(
            &node.netns,
            "conntrack",
            &["-L", "-p", "tcp", "--orig-dst", &ip.to_string()],
        )?;
        counts.insert(
            node.name.clone(),
            listing.lines().filter(|l| !l.trim().is_empty()).count(),
        );
    }
    Ok(Some(counts))
}

/// Step 6: SIGKILL the owner's speaker while capturing on the client and sending HTTP requests.
async fn failover(
    r: &mut Running,
    report: &Observed,
    out: &mut (dyn Write + Send),
) -> anyhow::Result<FailoverOutcome> {
    let old_owner = report.arp.owner.clone();
    writeln!(
        out,
        "\n[6/7] Failover: SIGKILL the speaker on {old_owner} (the owner) while the client keeps sending requests"
    )?;
    let all: Vec<String> = r.lab.nodes.iter().map(|n| n.name.clone()).collect();
    super::failover::kill_owner(
        &mut r.lab,
        0,
        SocketAddr::from((report.external_ip, SERVICE_PORT)),
        &old_owner,
        &all,
        out,
    )
    .await
}

/// Step 2's objects in the implementation's own CRDs: pool `demo` with [`POOL_RANGE`] and an
/// L2Advertisement of every pool on every node (MetalLB's in its namespace).
fn pool_yaml(implementation: Implementation) -> String {
    let (group, namespace) = match implementation {
        Implementation::Ferrolb => ("ferrolb.io", String::new()),
        Implementation::MetalLb => (
            "metallb.io",
            format!("\n  namespace: {}", metallb::NAMESPACE),
        ),
    };
    format!(
        "apiVersion: {group}/v1beta1\nkind: IPAddressPool\nmetadata:\n  name: demo{namespace}\nspec:\n  addresses:\n  - {POOL_RANGE}\n---\n\
         apiVersion: {group}/v1beta1\nkind: L2Advertisement\nmetadata:\n  name: demo{namespace}\nspec: {{}}\n"
    )
}

/// Runs the real `kubectl` against `kubeconfig`, with `stdin` piped in if given; returns stdout.
fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let output = crate::cluster::kubectl(kubeconfig, args, stdin)?;
    if !output.status.success() {
        bail!(
            "kubectl {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&output.stdout).into_owned())
}

fn print_indented(out: &mut (dyn Write + Send), text: &str, indent: &str) -> std::io::Result<()> {
    for line in text.lines() {
        writeln!(out, "{indent}{line}")?;
    }
    Ok(())
}

/// After a failure: the tails of the controller's, kube-proxies' and speakers' logs.
fn print_logs(r: &Running, out: &mut (dyn Write + Send)) -> std::io::Result<()> {
    writeln!(
        out,
        "\n--- {} controller log (last 20 lines) ---\n{}",
        r.lab.implementation().name(),
        r.controller_log(20)
    )?;
    for proxy in &r.proxies {
        writeln!(
            out,
            "--- kube-proxy {} log (last 10 lines) ---\n{}",
            proxy.node,
            proxy.log_tail(10)
        )?;
    }
    for node in &r.lab.nodes {
        writeln!(
            out,
            "--- speaker {} log (last 10 lines) ---\n{}",
            node.name,
            r.lab.speaker_log(&node.name, 10)
        )?;
    }
    writeln!(
        out,
        "(all logs: {}; set FERROLB_KEEP_LAB_LOGS=1 to keep them; pod range {POD_CIDR})",
        r.lab.dir().display()
    )
}
