//! The real-node story (issue #14), shared by `tests/tests/real_nodes.rs` and
//! `./demo.sh --real-nodes`: install ferrolb the way docs/install.md says, serve a LoadBalancer
//! Service from an automatic pool, lose the owner's speaker pod and the controller's leader pod,
//! do the day-two work of issue #29 (a controller roll-out, a speaker roll-out and a drain with
//! every IP probed throughout, a node's hard stop, the whole cluster powered off and on), and
//! uninstall with `ferrolb uninstall`. Each step fails (with what was seen) when it does not
//! reach its goal; what happened is returned in a [`Report`] for the caller to assert on, and
//! narrated to `out`.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::http_load::{HttpCounts, HttpLoad};
use super::{RealNodes, image_archives};
use crate::cluster::{repo_root, workspace_bin};
use crate::lab::scenario::typed_events_for;
use crate::lab::{Seen, http_client, sh, within_netns};
use crate::objects::ingress_v4;
use crate::poll::{until, until_some};

/// The install namespace of `deploy/`.
pub const NS: &str = "ferrolb-system";
/// The pool: automatic (issue #28), 4 addresses from the top of the node network the speakers
/// report (the lab's LAN, `192.0.2.0/24`), each probed before it is handed out — no numbers.
pub const POOL: &str = "autoAddresses: {size: 4}";
/// The backend image (`tests/image/build.sh`).
pub const BACKEND_IMAGE: &str = "ferrolb-test-backend:0.1.0";
/// The images every node must hold after the import (containerd's normalised names).
pub const IMAGES: [&str; 4] = [
    "docker.io/library/ferrolb:0.1.0",
    "registry.k8s.io/pause:3.10",
    "docker.io/library/ferrolb-test-backend:0.1.0",
    AGNHOST_IMAGE,
];
/// The second tag of the ferrolb image the speaker roll-out changes to (issue #29 O1: "a second
/// image tag built offline"): the same image, tagged on every node by `ctr images tag`, as a
/// user's `minikube image load` of a new build would leave it.
pub const SECOND_TAG: &str = "ferrolb:0.1.1";
/// [`SECOND_TAG`] as containerd names it.
const SECOND_TAG_FULL: &str = "docker.io/library/ferrolb:0.1.1";
/// The lab's stand-in for the e2e image the README quickstart runs (`tests/image/build.sh`).
pub const AGNHOST_IMAGE: &str = "registry.k8s.io/e2e-test-images/agnhost:2.53";
/// `CAP_NET_RAW` alone, as `/proc/<pid>/status` prints `CapEff`.
pub const NET_RAW_ONLY: &str = "0000000000002000";

/// The crash-failover bound at 3 nodes with the `fast` profile: the simulator's `t_failover`
/// (`probe_period × (N + 1) + suspect_timeout + 2 ticks`, docs/speaker.md "The cluster
/// simulator"), 800 ms — what a hard stop of an owner may leave its IP unanswered for.
pub const CRASH_BOUND_3_NODES: Duration = Duration::from_millis(800);

/// How much a speaker's restart spell is widened on each side when the roll-out's moves are
/// matched to it: the pod list is polled every 200 ms (the hand-over at SIGTERM can come before
/// the list shows the deletion) and the pod is reported Ready at its next readiness probe.
pub const RESTART_SLACK: (Duration, Duration) = (Duration::from_secs(1), Duration::from_secs(1));

/// How long the client records every frame after the whole cluster's power-on (step 6).
pub const RESTART_CAPTURE: Duration = Duration::from_secs(10);

const SPEAKERS: &str = "app.kubernetes.io/component=speaker";
const CONTROLLERS: &str = "app.kubernetes.io/component=controller";

const POOL_YAML: &str = r#"apiVersion: ferrolb.io/v1beta1
kind: IPAddressPool
metadata: {name: lab}
spec:
  autoAddresses: {size: 4}
---
apiVersion: ferrolb.io/v1beta1
kind: L2Advertisement
metadata: {name: lab}
spec:
  ipAddressPools: [lab]
"#;

/// What the story observed.
#[derive(Debug, Default)]
pub struct Report {
    /// Images found in each node's containerd after the import, per node.
    pub images: Vec<Vec<String>>,
    /// `CapEff` of the speaker process on each node.
    pub speaker_caps: Vec<String>,
    /// The controller replicas after the install.
    pub controllers: BTreeSet<String>,
    /// The Lease holder after the install.
    pub first_leader: String,
    /// The Lease holder after the first leader's pod was deleted.
    pub second_leader: String,
    /// The `managed-by` labels of the first Service's EndpointSlices.
    pub slice_managers: BTreeSet<String>,
    /// The first Service's external IP.
    pub ip: Option<Ipv4Addr>,
    /// The node answering ARP for it before the speaker pod deletion.
    pub owner: String,
    /// `spec.node` of the `L2Announcement` of the first IP once it named the owner: written by
    /// the owner's speaker with the token its kubelet mounted, through the admission policy that
    /// admits only reports naming the token's node (issue #27 item 5).
    pub owner_report_node: String,
    /// The backend pod that answered HTTP through the external IP.
    pub answered_by: String,
    /// The names of the backend pods.
    pub backends: BTreeSet<String>,
    /// The node that answered while the owner's speaker pod was being replaced.
    pub interim_owner: String,
    /// The owner once the replacement speaker was Ready.
    pub final_owner: String,
    /// Every answerer set seen in 10 probes after that convergence.
    pub answers_after: Vec<BTreeSet<String>>,
    /// The backend pod that answered HTTP after the failover.
    pub answered_after: String,
    /// The second Service's external IP (assigned by the second leader).
    pub ip2: Option<Ipv4Addr>,
    /// The third Service's external IP, created during the controller's roll-out (issue #29 O2)
    /// once the leader's pod was being stopped.
    pub ip3: Option<Ipv4Addr>,
    /// ARP probes sent during the speakers' roll-out (issue #29 O1).
    pub rollout_probes: usize,
    /// The probes of the roll-out that two MACs answered.
    pub rollout_two_answers: Vec<String>,
    /// Per IP: the owner before the roll-out, the nodes that claimed it in turn during it
    /// (gratuitous ARPs and probe replies, consecutive repeats merged), and the owner after.
    pub rollout_owners: Vec<(Ipv4Addr, String, Vec<String>, String)>,
    /// Per IP, client 0's HTTP requests through it during the roll-out ([`HttpLoad`]).
    pub rollout_http: Vec<HttpCounts>,
    /// Moves of an IP during the roll-outs (`ip: Unix µs`) that fell outside every spell in
    /// which its owner's speaker was restarting ([`super::speaker_restarts`]), widened by
    /// [`RESTART_SLACK`].
    pub rollout_moves_outside: Vec<String>,
    /// The drain of the first IP's owner and its uncordon (issue #29 O3).
    pub drain: DrainReport,
    /// The graceful shutdown of the third IP's owner (issue #29 O4).
    pub graceful: GracefulShutdownReport,
    /// The hard stop of the second IP's owner (issue #29 O4).
    pub hard_stop: HardStopReport,
    /// ARP answers for the first IP while the whole cluster was off (issue #29 O5).
    pub answers_while_off: usize,
    /// `(IP, owner, seconds after the power-on)`: when each IP was answered by one node again.
    pub answered_after_power_on: Vec<(Ipv4Addr, String, f64)>,
    /// The nodes (or MACs) that claimed each IP — gratuitous ARP or ARP reply — in the first
    /// [`RESTART_CAPTURE`] after the power-on, as the client saw them.
    pub claimants_after_power_on: Vec<(Ipv4Addr, BTreeSet<String>)>,
    /// Services whose resourceVersion or address changed across the power cycle.
    pub restart_changed: Vec<String>,
    /// The first IP's owner replaced under the same name with a new MAC (issue #29 O6).
    pub replaced: super::replaced::ReplacedReport,
    /// The whole cluster restarted again with its nodes back one by one (issue #29 O5).
    pub one_by_one: super::one_by_one::OneByOneReport,
    /// The Lease holder when web3's address was first seen.
    pub ip3_assigned_by: String,
    /// The Lease holder once the roll-out finished.
    pub rollout_leader: String,
    /// Whether one of the roll-out's new pods held the Lease within 60 s of the roll-out's end
    /// (`rollout_leader` is then that pod).
    pub rollout_leader_is_new: bool,
    /// Services `web` and `web2` whose resourceVersion or address changed across the roll-out
    /// (any status write changes the resourceVersion), with before and after.
    pub rollout_changed: Vec<String>,
    /// `namespace/name ip` of the story's Services still holding an address after the uninstall.
    pub statuses_left: Vec<String>,
    /// `service: type note` of the `IPReleased` Events on the story's Services.
    pub released_events: Vec<String>,
    /// Whether the `ferrolb-system` namespace still existed after the uninstall.
    pub namespace_left: bool,
    /// ClusterRoles, ClusterRoleBindings, ValidatingAdmissionPolicies and their bindings labelled
    /// `app.kubernetes.io/part-of=ferrolb` left.
    pub cluster_rbac_left: Vec<String>,
    /// ferrolb CRDs left after the uninstall.
    pub crds_left: Vec<String>,
    /// Answerer sets for the first IP after the uninstall.
    pub answers_after_uninstall: Vec<BTreeSet<String>>,
}

/// What the drain step saw (issue #29 O3); per IP in the order web, web2, web3.
#[derive(Debug, Default)]
pub struct DrainReport {
    /// The drained node (the first IP's owner).
    pub node: String,
    /// The owners before the drain.
    pub owners_before: Vec<String>,
    /// The owners once drained.
    pub owners_drained: Vec<String>,
    /// The owners after the uncordon.
    pub owners_after: Vec<String>,
    /// ARP probes sent during the drain and the uncordon.
    pub probes: usize,
    /// Those answered by two MACs.
    pub two_answers: Vec<String>,
    /// The nodes that claimed each IP in turn during the drain.
    pub sequences_drain: Vec<Vec<String>>,
    /// The same during the uncordon.
    pub sequences_uncordon: Vec<Vec<String>>,
    /// The pod that answered HTTP through the first IP while its owner was drained.
    pub http_drained: String,
    /// Per IP, client 0's HTTP requests through it during the drain ([`HttpLoad`]).
    pub http_drain: Vec<HttpCounts>,
    /// The same during the uncordon.
    pub http_uncordon: Vec<HttpCounts>,
}

/// What the emulated graceful shutdown of a node showed (issue #29 O4).
#[derive(Debug, Default)]
pub struct GracefulShutdownReport {
    /// The node shut down (the third IP's owner).
    pub node: String,
    /// `namespace/name` of its ordinary pods, terminated first.
    pub ordinary: Vec<String>,
    /// `namespace/name` of its critical pods (`system-node-critical`,
    /// `system-cluster-critical`), terminated last.
    pub critical: Vec<String>,
    /// ARP probes and HTTP requests through every IP from one round before the first
    /// termination until 2 s after the last pod was gone.
    pub during: ProbeLog,
    /// Per IP, client 0's HTTP requests through it from the power-off until every IP was seen
    /// answered by one node and 2 s more.
    pub http_power_off: Vec<HttpCounts>,
    /// The owner of each IP once the node was powered off.
    pub owners_while_off: Vec<String>,
    /// Seconds from the power-on (and the taint's removal) to its IP answered by it again.
    pub back_s: f64,
}

/// The taint the emulated graceful shutdown puts on the node first: a shutting-down kubelet
/// reports the node not Ready, and the node lifecycle controller's `node.kubernetes.io/not-ready`
/// taint keeps new pods (and the DaemonSet's replacement speaker) off it; the lab's kubelet is
/// not shutting down, so a taint of the test's own stands for that one (the controller would
/// take `not-ready` off a Ready node).
const SHUTTING_DOWN_TAINT: &str = "ferrolb.test/shutting-down=true:NoSchedule";

/// What the hard stop of a node showed (issue #29 O4).
#[derive(Debug, Default)]
pub struct HardStopReport {
    /// The node stopped (the second IP's owner).
    pub node: String,
    /// The node answering its IP afterwards.
    pub successor: String,
    /// Seconds from the kill to that node answering alone (ARP probes of 300 ms included).
    pub failover_s: f64,
    /// Milliseconds from the kill to another node's first claim of the IP (gratuitous ARP or
    /// probe reply) on the wire, if one came within 3 s.
    pub claimed_after_ms: Option<f64>,
    /// The owner of each IP (web, web2, web3) while the node was down.
    pub owners_while_down: Vec<String>,
    /// Seconds from the kill to the Node controller marking the Node not Ready, the
    /// `node.kubernetes.io/out-of-service` taint added, and the node's speaker pod deleted
    /// (the taint manager evicts it, the pod GC deletes it: its kubelet is gone).
    pub out_of_service_s: f64,
    /// ARP probes of every IP from one round before the wait for NotReady until 2 s after the
    /// speaker pod was gone.
    pub probes_out_of_service: usize,
    /// Those answered by two nodes.
    pub two_answers_out_of_service: Vec<String>,
    /// Those nobody answered.
    pub unanswered_out_of_service: Vec<String>,
    /// Per IP, the nodes that claimed it in turn during those probes.
    pub sequences_out_of_service: Vec<Vec<String>>,
    /// The Services whose status changed from before the stop to after the taint.
    pub changed_out_of_service: Vec<String>,
    /// Per IP, client 0's HTTP requests through it over those probes ([`HttpLoad`]; requests
    /// kube-proxy sends to the stopped node's backends fail until their endpoints are removed).
    pub http_out_of_service: Vec<HttpCounts>,
    /// Seconds from the power-on (containerd, kubelet, kube-proxy started) to the IP answered
    /// by the node again.
    pub back_s: f64,
}

/// What [`probe_throughout`] saw.
#[derive(Debug, Default)]
pub struct ProbeLog {
    /// ARP probes sent.
    pub probes: usize,
    /// Those answered by two nodes.
    pub two_answers: Vec<String>,
    /// Probes no node answered (a planned hand-over leaves some: break before make).
    pub unanswered: Vec<String>,
    /// Per IP, the nodes that claimed it in turn (gratuitous ARPs and probe replies, in time
    /// order, consecutive repeats merged).
    pub sequences: Vec<Vec<String>>,
    /// Per IP, when (Unix µs) each change in `sequences` was first seen.
    pub moves: Vec<Vec<u64>>,
    /// Per IP, client 0's HTTP requests over the same time ([`HttpLoad`]).
    pub http: Vec<HttpCounts>,
}

/// Runs the kubectl `commands` one after the other while client 0 probes every IP of `ips` in
/// turn (300 ms each, every frame recorded) and sends HTTP requests through each of them
/// ([`HttpLoad`]: a new one every few milliseconds per IP), from one round before the first
/// command until 2 s after the last finished; fails if a command fails.
async fn probe_throughout(
    lab: &RealNodes,
    ips: &[Ipv4Addr],
    commands: &[&[&str]],
) -> anyhow::Result<ProbeLog> {
    let kubeconfig = lab.lab.cluster().kubeconfig().to_path_buf();
    let owned: Vec<Vec<String>> = commands
        .iter()
        .map(|c| c.iter().map(|a| (*a).to_owned()).collect())
        .collect();
    let described = owned
        .iter()
        .map(|c| c.join(" "))
        .collect::<Vec<_>>()
        .join("; ");
    let t = Instant::now();
    let mut frames = Vec::new();
    let mut log = ProbeLog::default();
    let load = HttpLoad::start(&lab.lab.clients[0].netns, ips);
    let mut task = None;
    let mut done: Option<Instant> = None;
    while done.is_none_or(|d| d.elapsed() < Duration::from_secs(2)) {
        // The first round of probes runs before the commands start: the owners before.
        if log.probes >= ips.len() && task.is_none() {
            let kubeconfig = kubeconfig.clone();
            let owned = owned.clone();
            task = Some(tokio::task::spawn_blocking(move || {
                for command in &owned {
                    let args: Vec<&str> = command.iter().map(String::as_str).collect();
                    let run = crate::cluster::kubectl(&kubeconfig, &args, None)?;
                    anyhow::ensure!(
                        run.status.success(),
                        "kubectl {}: {}",
                        args.join(" "),
                        String::from_utf8_lossy(&run.stderr)
                    );
                }
                anyhow::Ok(())
            }));
        }
        for &ip in ips {
            let seen = lab.lab.arp_probe(0, ip, Duration::from_millis(300)).await?;
            let macs: BTreeSet<&str> = seen
                .iter()
                .filter(|s| {
                    matches!(s, Seen::ArpReply { .. }) && s.ip() == std::net::IpAddr::V4(ip)
                })
                .map(Seen::mac)
                .collect();
            log.probes += 1;
            if macs.len() > 1 {
                log.two_answers.push(format!(
                    "{ip}: {macs:?} at {:.1} s",
                    t.elapsed().as_secs_f64()
                ));
            }
            if macs.is_empty() {
                log.unanswered
                    .push(format!("{ip} at {:.1} s", t.elapsed().as_secs_f64()));
            }
            frames.extend(seen);
        }
        if done.is_none()
            && let Some(running) = task.as_mut()
            && running.is_finished()
        {
            running.await??;
            done = Some(Instant::now());
        }
        anyhow::ensure!(
            t.elapsed() < Duration::from_secs(200),
            "{described} did not finish"
        );
    }
    log.http = load.finish().await?;
    frames.sort_by_key(Seen::unix_us);
    for ip in ips {
        let mut sequence: Vec<String> = Vec::new();
        let mut moves = Vec::new();
        for f in &frames {
            if let Seen::GratuitousArp { ip: i, mac, .. } | Seen::ArpReply { ip: i, mac, .. } = f
                && i == ip
            {
                let node = node_of(lab, mac).unwrap_or_else(|_| mac.clone());
                if sequence.last() != Some(&node) {
                    if !sequence.is_empty() {
                        moves.push(f.unix_us());
                    }
                    sequence.push(node);
                }
            }
        }
        log.sequences.push(sequence);
        log.moves.push(moves);
    }
    Ok(log)
}

fn workload(name: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata: {{name: {name}, namespace: default}}
spec:
  replicas: 3
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:
      containers:
      - name: backend
        image: {BACKEND_IMAGE}
        imagePullPolicy: IfNotPresent
        env:
        - name: POD_NAME
          valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}
        ports: [{{containerPort: 8080}}]
        readinessProbe:
          httpGet: {{path: /hostname, port: 8080}}
          periodSeconds: 1
        # The backend exits at SIGTERM: without a pause kube-proxy keeps sending it new
        # connections until its endpoint is removed, and they are refused (~1.5 s of failed
        # requests through every IP at a drain, docs/operations.md) — the usual fix.
        lifecycle:
          preStop: {{sleep: {{seconds: 2}}}}
---
apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  type: LoadBalancer
  selector: {{app: {name}}}
  ports: [{{port: 80, targetPort: 8080}}]
"#
    )
}

/// A LoadBalancer Service for the `web` pods, with no Deployment of its own.
fn bare_service(name: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Service
metadata: {{name: {name}, namespace: default}}
spec:
  type: LoadBalancer
  selector: {{app: web}}
  ports: [{{port: 80, targetPort: 8080}}]
"#
    )
}

/// The resourceVersion and IPv4 ingress of each named Service in `default`.
pub(super) async fn service_states<'a>(
    client: &kube::Client,
    names: &[&'a str],
) -> anyhow::Result<BTreeMap<&'a str, (Option<String>, Option<std::net::Ipv4Addr>)>> {
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let mut states = BTreeMap::new();
    for name in names {
        let svc = services.get(name).await?;
        states.insert(
            *name,
            (
                svc.resource_version(),
                ingress_v4(client, "default", name).await,
            ),
        );
    }
    Ok(states)
}

/// The Services whose resourceVersion or ingress differ from `before`, one line each.
pub(super) async fn services_changed(
    client: &kube::Client,
    before: &BTreeMap<&str, (Option<String>, Option<std::net::Ipv4Addr>)>,
) -> anyhow::Result<Vec<String>> {
    let names: Vec<&str> = before.keys().copied().collect();
    let now = service_states(client, &names).await?;
    Ok(before
        .iter()
        .filter(|(name, was)| now.get(*name) != Some(*was))
        .map(|(name, (rv, ip))| {
            let (now_rv, now_ip) = now.get(name).cloned().unwrap_or_default();
            format!("{name}: resourceVersion {rv:?} -> {now_rv:?}, {ip:?} -> {now_ip:?}")
        })
        .collect())
}

fn is_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn ready_pods(pods: &Api<Pod>, selector: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(selector))
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|p| is_ready(p) && p.metadata.deletion_timestamp.is_none())
                .collect()
        })
        .unwrap_or_default()
}

fn names(pods: &[Pod]) -> BTreeSet<String> {
    pods.iter()
        .filter_map(|p| p.metadata.name.clone())
        .collect()
}

async fn lease_holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("ferrolb-controller")
        .await
        .ok()
        .flatten()
        .and_then(|l| l.spec?.holder_identity)
        .filter(|h| !h.is_empty())
}

/// GET /hostname on `ip:80` from client 0.
pub(super) async fn http_from_client(lab: &RealNodes, ip: Ipv4Addr) -> anyhow::Result<String> {
    let netns = lab.lab.clients[0].netns.clone();
    tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            http_client::get_hostname(SocketAddr::from((ip, 80)), Duration::from_secs(2))
        })
    })
    .await?
}

/// Waits until exactly one MAC answers ARP for `ip` from client 0 and `accept`s it; returns the
/// node that MAC belongs to.
pub(super) async fn one_answerer(
    lab: &RealNodes,
    ip: Ipv4Addr,
    accept: impl Fn(&str) -> bool,
    what: &str,
) -> anyhow::Result<String> {
    let mac = until_some(what, Duration::from_secs(60), || async {
        let answers = lab.lab.arp_answers(0, ip).await.ok()?;
        let mac = answers.first()?.clone();
        (answers.len() == 1 && accept(&mac)).then_some(mac)
    })
    .await?;
    node_of(lab, &mac)
}

pub(super) fn node_of(lab: &RealNodes, mac: &str) -> anyhow::Result<String> {
    Ok(lab
        .lab
        .node_by_mac(mac)
        .with_context(|| format!("{mac} is no node's"))?
        .name
        .clone())
}

async fn answer_sets(
    lab: &RealNodes,
    ip: Ipv4Addr,
    times: usize,
) -> anyhow::Result<Vec<BTreeSet<String>>> {
    let mut sets = Vec::new();
    for _ in 0..times {
        let macs = lab.lab.arp_answers(0, ip).await?;
        sets.push(
            macs.iter()
                .map(|m| node_of(lab, m).unwrap_or_else(|_| m.clone()))
                .collect(),
        );
    }
    Ok(sets)
}

/// `CapEff` of the `ferrolb-speaker` process in node `k`'s namespace (a host-network pod's
/// process lives there).
fn speaker_cap_eff(lab: &RealNodes, k: usize) -> Option<String> {
    let pids = sh("ip", &["netns", "pids", &lab.lab.nodes[k].netns]).ok()?;
    pids.split_whitespace().find_map(|pid| {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).ok()?;
        if comm.trim() != "ferrolb-speaker" {
            return None;
        }
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("CapEff:"))
            .map(|v| v.trim().to_owned())
    })
}

/// Starts a real-node lab of `nodes` nodes and one client, and runs the story on it; with
/// `day_two`, also steps 5–9 (issue #29: roll-outs, a drain, a hard stop, a power cycle).
///
/// # Errors
/// The lab did not start, or a step did not reach its goal (the error says which, with what was
/// seen and the relevant pod descriptions and logs).
pub async fn run(nodes: usize, day_two: bool, out: &mut dyn Write) -> anyhow::Result<Report> {
    let images = image_archives()?;
    let started = Instant::now();
    writeln!(
        out,
        "starting {nodes} real nodes (containerd + kubelet each), kube-controller-manager, kube-scheduler ..."
    )?;
    let mut lab = RealNodes::start(nodes, 1, &images).await?;
    writeln!(
        out,
        "  Nodes Ready after {:.1} s; images imported into every node",
        started.elapsed().as_secs_f64()
    )?;
    let result = story(&mut lab, nodes, day_two, out).await;
    if let Err(e) = &result {
        return Err(anyhow::anyhow!("{e:#}\n{}", diagnostics(&lab)));
    }
    result
}

/// What to print when a step failed: every pod with its node, and the last lines of the
/// speakers' and controllers' logs.
pub(super) fn diagnostics(lab: &RealNodes) -> String {
    let pods = lab
        .kubectl(&["get", "pods", "-A", "-o", "wide"], None)
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    format!(
        "{pods}\n{}\n{}",
        lab.container_logs(NS, "ferrolb-speaker", 15),
        lab.container_logs(NS, "ferrolb-controller", 15)
    )
}

async fn story(
    lab_mut: &mut RealNodes,
    nodes: usize,
    day_two: bool,
    out: &mut dyn Write,
) -> anyhow::Result<Report> {
    let lab: &RealNodes = lab_mut;
    let mut report = Report::default();
    let client = lab.lab.client().await?;
    for node in &lab.nodes {
        report.images.push(node.runtime().images()?);
    }

    // 1. Install exactly as docs/install.md says.
    let deploy = repo_root().join("deploy");
    let deploy = deploy.to_str().context("repository path")?;
    // No key step (issue #27): the controller creates the membership-key Secret, the speakers
    // wait for it, not ready, and read it through the API.
    writeln!(
        out,
        "1. kubectl apply -k deploy/ (no key step: the controller creates the membership key)"
    )?;
    lab.kubectl_ok(&["apply", "-k", deploy], None)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), NS);
    let t = Instant::now();
    until(
        &format!("{nodes} speaker pods and 2 controller pods Ready"),
        Duration::from_secs(180),
        || async {
            ready_pods(&pods, SPEAKERS).await.len() == nodes
                && ready_pods(&pods, CONTROLLERS).await.len() == 2
        },
    )
    .await?;
    for k in 0..nodes {
        report
            .speaker_caps
            .push(speaker_cap_eff(lab, k).unwrap_or_default());
    }
    report.controllers = names(&ready_pods(&pods, CONTROLLERS).await);
    let leases: Api<Lease> = Api::namespaced(client.clone(), NS);
    report.first_leader = until_some("a Lease holder", Duration::from_secs(60), || async {
        lease_holder(&leases)
            .await
            .filter(|h| report.controllers.contains(h))
    })
    .await?;
    writeln!(
        out,
        "   {nodes} speaker pods (effective capabilities {:?}) and 2 controller pods Ready after {:.1} s; Lease held by {}",
        report.speaker_caps,
        t.elapsed().as_secs_f64(),
        report.first_leader
    )?;

    // 2. A pool, a backend Deployment and a LoadBalancer Service.
    writeln!(
        out,
        "2. pool {{{POOL}}}, Deployment web (3 × {BACKEND_IMAGE}), Service web type LoadBalancer"
    )?;
    lab.kubectl_ok(&["apply", "-f", "-"], Some(POOL_YAML))?;
    lab.kubectl_ok(&["apply", "-f", "-"], Some(&workload("web")))?;
    let ip = until_some("an IP for web", Duration::from_secs(60), || {
        ingress_v4(&client, "default", "web")
    })
    .await?;
    report.ip = Some(ip);
    let backends: Api<Pod> = Api::namespaced(client.clone(), "default");
    until("3 web backends Ready", Duration::from_secs(120), || async {
        ready_pods(&backends, "app=web").await.len() == 3
    })
    .await?;
    report.backends = names(&ready_pods(&backends, "app=web").await);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    report.slice_managers = slices
        .list(&ListParams::default().labels("kubernetes.io/service-name=web"))
        .await?
        .items
        .iter()
        .filter_map(|s| {
            s.metadata
                .labels
                .as_ref()?
                .get("endpointslice.kubernetes.io/managed-by")
                .cloned()
        })
        .collect();
    report.owner = one_answerer(lab, ip, |_| true, "one ARP answerer").await?;
    let owner_mac = lab.lab.node(&report.owner).mac.clone();
    // The owner's speaker reports it (its Pod-bound token passes the admission policy).
    let announcement = ferrolb_crds::announcement::announcement_name(ip.into());
    let owner = report.owner.clone();
    report.owner_report_node = until_some(
        "the owner's L2Announcement",
        Duration::from_secs(30),
        || {
            let announcement = announcement.clone();
            let owner = owner.clone();
            async move {
                let node = lab
                    .kubectl_ok(
                        &[
                            "-n",
                            NS,
                            "get",
                            "l2announcements",
                            &announcement,
                            "-o",
                            "jsonpath={.spec.node}",
                        ],
                        None,
                    )
                    .ok()?;
                (node.trim() == owner).then(|| node.trim().to_owned())
            }
        },
    )
    .await?;
    report.answered_by = until_some(
        "HTTP through the external IP",
        Duration::from_secs(30),
        || async {
            http_from_client(lab, ip)
                .await
                .ok()
                .filter(|a| report.backends.contains(a))
        },
    )
    .await?;
    writeln!(
        out,
        "   web got {ip}; {} answers ARP for it alone; GET http://{ip}/hostname from the client → {}",
        report.owner, report.answered_by
    )?;

    // 3. Delete the owner node's speaker pod.
    let owner_speaker = ready_pods(&pods, SPEAKERS)
        .await
        .into_iter()
        .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&report.owner))
        .and_then(|p| p.metadata.name)
        .context("no speaker pod on the owner")?;
    writeln!(
        out,
        "3. kubectl delete pod {owner_speaker} (the speaker on {})",
        report.owner
    )?;
    let t = Instant::now();
    lab.kubectl_ok(
        &["-n", NS, "delete", "pod", &owner_speaker, "--wait=false"],
        None,
    )?;
    report.interim_owner = one_answerer(
        lab,
        ip,
        |mac| mac != owner_mac,
        "another node answering after the owner's speaker pod was deleted",
    )
    .await?;
    let took_over = t.elapsed();
    until(
        "the DaemonSet's new speaker pod Ready on the old owner",
        Duration::from_secs(120),
        || async {
            ready_pods(&pods, SPEAKERS).await.iter().any(|p| {
                p.metadata.name.as_deref() != Some(owner_speaker.as_str())
                    && p.spec.as_ref().and_then(|s| s.node_name.as_deref())
                        == Some(report.owner.as_str())
            })
        },
    )
    .await?;
    let recreated = t.elapsed();
    report.final_owner = one_answerer(lab, ip, |_| true, "one answerer after the restart").await?;
    report.answers_after = answer_sets(lab, ip, 10).await?;
    report.answered_after = http_from_client(lab, ip).await?;
    writeln!(
        out,
        "   {} answered for {ip} after {:.1} s; the DaemonSet's new pod was Ready after {:.1} s; now {} answers (10 probes: {:?}); HTTP → {}",
        report.interim_owner,
        took_over.as_secs_f64(),
        recreated.as_secs_f64(),
        report.final_owner,
        report
            .answers_after
            .iter()
            .map(BTreeSet::len)
            .collect::<Vec<_>>(),
        report.answered_after
    )?;

    // 4. Delete the controller's leader pod.
    writeln!(
        out,
        "4. kubectl delete pod {} (the controller's Lease holder)",
        report.first_leader
    )?;
    let t = Instant::now();
    lab.kubectl_ok(
        &[
            "-n",
            NS,
            "delete",
            "pod",
            &report.first_leader,
            "--wait=false",
        ],
        None,
    )?;
    report.second_leader = until_some(
        "another replica holding the Lease",
        Duration::from_secs(60),
        || async {
            lease_holder(&leases)
                .await
                .filter(|h| *h != report.first_leader)
        },
    )
    .await?;
    let took_lease = t.elapsed();
    lab.kubectl_ok(&["apply", "-f", "-"], Some(&workload("web2")))?;
    let ip2 = until_some("an IP for web2", Duration::from_secs(60), || {
        ingress_v4(&client, "default", "web2")
    })
    .await?;
    report.ip2 = Some(ip2);
    writeln!(
        out,
        "   {} holds the Lease after {:.1} s and assigned {ip2} to the new Service web2",
        report.second_leader,
        took_lease.as_secs_f64()
    )?;

    // 5–9: the day-two work of issue #29 (docs/operations.md), when asked for: the extended
    // tier and the demo (about 75 s; the fast tier's budget, docs/testing.md).
    if day_two {
        // 5. Roll the controller out (issue #29 O2): no Service status written, no address changed,
        // and a Service created during the roll-out gets its address.
        writeln!(
            out,
            "5. kubectl rollout restart deployment/ferrolb-controller, Service web3 created during it"
        )?;
        let before = service_states(&client, &["web", "web2"]).await?;
        let t = Instant::now();
        let leader = lease_holder(&leases).await.unwrap_or_default();
        let old_replicas = names(
            &pods
                .list(&ListParams::default().labels(CONTROLLERS))
                .await?
                .items,
        );
        lab.kubectl_ok(
            &[
                "-n",
                NS,
                "rollout",
                "restart",
                "deployment/ferrolb-controller",
            ],
            None,
        )?;
        // Created once the leader's pod is being stopped: the address comes from whoever leads next.
        until(
            "the leader's pod terminating",
            Duration::from_secs(120),
            || async {
                pods.get_opt(&leader)
                    .await
                    .ok()
                    .is_none_or(|p| p.is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
            },
        )
        .await?;
        let leader_stopping = t.elapsed();
        lab.kubectl_ok(&["apply", "-f", "-"], Some(&bare_service("web3")))?;
        let created = Instant::now();
        let ip3 = until_some("an IP for web3", Duration::from_secs(120), || {
            ingress_v4(&client, "default", "web3")
        })
        .await?;
        let ip3_after = created.elapsed();
        report.ip3_assigned_by = lease_holder(&leases).await.unwrap_or_default();
        lab.kubectl_ok(
            &[
                "-n",
                NS,
                "rollout",
                "status",
                "deployment/ferrolb-controller",
                "--timeout=180s",
            ],
            None,
        )?;
        let rolled_out = t.elapsed();
        // `rollout status` returns once the new pods are available; an old replica may still hold
        // the Lease while it terminates. Once the old pods are gone a new one leads.
        let new_leader = until_some(
            "a pod of the roll-out holding the Lease",
            Duration::from_secs(60),
            || async {
                let holder = lease_holder(&leases).await?;
                let current = names(&ready_pods(&pods, CONTROLLERS).await);
                (current.contains(&holder) && !old_replicas.contains(&holder)).then_some(holder)
            },
        )
        .await;
        report.rollout_leader_is_new = new_leader.is_ok();
        report.rollout_leader = match new_leader {
            Ok(holder) => holder,
            Err(_) => lease_holder(&leases).await.unwrap_or_default(),
        };
        report.rollout_changed = services_changed(&client, &before).await?;
        report.ip3 = Some(ip3);
        writeln!(
            out,
            "   {leader} (leader) terminating {:.1} s after the restart; web3, created then, got {ip3} {:.1} s later (Lease held by {}); rolled out after {:.1} s, Lease held by {} (new: {}); Services changed during it: {:?}",
            leader_stopping.as_secs_f64(),
            ip3_after.as_secs_f64(),
            report.ip3_assigned_by,
            rolled_out.as_secs_f64(),
            report.rollout_leader,
            report.rollout_leader_is_new,
            report.rollout_changed
        )?;

        // 6. Roll the speakers out twice (issue #29 O1): `kubectl rollout restart` of the
        // DaemonSet (maxUnavailable 1), then an image change to a second tag of the image
        // ([`SECOND_TAG`], tagged offline on every node). The client probes every IP in turn the
        // whole time, recording every frame (its probes' replies and the speakers' gratuitous
        // ARPs), and sends HTTP requests through every IP: no probe answered twice, each IP moves
        // at most away and back per roll-out (when its owner's speaker restarts), and the owners
        // at the end are the owners before.
        writeln!(
            out,
            "6. kubectl rollout restart daemonset/ferrolb-speaker, then kubectl set image {SECOND_TAG}; every IP probed and requested throughout"
        )?;
        for node in &lab.nodes {
            node.runtime()
                .ctr(&["images", "tag", "--force", IMAGES[0], SECOND_TAG_FULL])?;
        }
        let set_image = format!("speaker={SECOND_TAG}");
        let ips = [ip, ip2, ip3];
        let mut owners_before = Vec::new();
        for ip in ips {
            owners_before.push(
                one_answerer(lab, ip, |_| true, "one ARP answerer before the roll-out").await?,
            );
        }
        let t = Instant::now();
        let node_names: Vec<String> = lab.nodes.iter().map(|n| n.name.clone()).collect();
        let restarts = super::speaker_restarts::SpeakerRestarts::start(
            client.clone(),
            NS,
            SPEAKERS,
            &node_names,
        );
        let log = probe_throughout(
            lab,
            &ips,
            &[
                &["-n", NS, "rollout", "restart", "daemonset/ferrolb-speaker"],
                &[
                    "-n",
                    NS,
                    "rollout",
                    "status",
                    "daemonset/ferrolb-speaker",
                    "--timeout=180s",
                ],
                &[
                    "-n",
                    NS,
                    "set",
                    "image",
                    "daemonset/ferrolb-speaker",
                    &set_image,
                ],
                &[
                    "-n",
                    NS,
                    "rollout",
                    "status",
                    "daemonset/ferrolb-speaker",
                    "--timeout=180s",
                ],
            ],
        )
        .await?;
        let took = t.elapsed();
        let windows = restarts.finish();
        for ((ip, owner), moves) in ips.iter().zip(&owners_before).zip(&log.moves) {
            for at in super::speaker_restarts::outside(moves, &windows, owner, RESTART_SLACK) {
                report
                    .rollout_moves_outside
                    .push(format!("{ip} (owner {owner}): {at}"));
            }
        }
        writeln!(
            out,
            "   speaker restart spells (Unix µs): {windows:?}; moves (Unix µs): {:?}",
            log.moves
        )?;
        report.rollout_probes = log.probes;
        report.rollout_two_answers = log.two_answers;
        report.rollout_http = log.http;
        for ((ip, before), sequence) in ips.iter().zip(&owners_before).zip(log.sequences) {
            let after =
                one_answerer(lab, *ip, |_| true, "one ARP answerer after the roll-out").await?;
            report
                .rollout_owners
                .push((*ip, before.clone(), sequence, after));
        }
        writeln!(
            out,
            "   rolled out twice in {:.1} s; {} probes, two answers in {:?}; (IP, owner before, who claimed it in turn, owner after): {:?}; HTTP: {:?}",
            took.as_secs_f64(),
            report.rollout_probes,
            report.rollout_two_answers,
            report.rollout_owners,
            report.rollout_http
        )?;

        // 7. Drain the owner of the first IP (issue #29 O3, docs/operations.md): its IPs move to
        // uncordoned nodes, no other IP moves, no probe is answered twice; uncordon gives them back.
        let drained = owners_before[0].clone();
        writeln!(
            out,
            "7. kubectl drain {drained} (the owner of {ip}), then kubectl uncordon, every IP probed throughout"
        )?;
        let t = Instant::now();
        let log = probe_throughout(
            lab,
            &ips,
            &[&[
                "drain",
                &drained,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                "--timeout=120s",
            ]],
        )
        .await?;
        let drain_took = t.elapsed();
        let mut during = Vec::new();
        for ip in ips {
            during.push(one_answerer(lab, ip, |_| true, "one ARP answerer while drained").await?);
        }
        let http = until_some(
            "HTTP through the first IP while drained",
            Duration::from_secs(30),
            || async { http_from_client(lab, ip).await.ok() },
        )
        .await?;
        let t = Instant::now();
        let back = probe_throughout(lab, &ips, &[&["uncordon", &drained]]).await?;
        let mut after = Vec::new();
        for (ip, before) in ips.iter().zip(&owners_before) {
            let mac = lab.lab.node(before).mac.clone();
            after.push(
                one_answerer(lab, *ip, |m| m == mac, "the owners back after the uncordon").await?,
            );
        }
        let uncordon_took = t.elapsed();
        report.drain = DrainReport {
            node: drained,
            owners_before: owners_before.clone(),
            owners_drained: during,
            owners_after: after,
            probes: log.probes + back.probes,
            two_answers: [log.two_answers, back.two_answers].concat(),
            sequences_drain: log.sequences,
            sequences_uncordon: back.sequences,
            http_drained: http,
            http_drain: log.http,
            http_uncordon: back.http,
        };
        writeln!(
            out,
            "   drained in {:.1} s, owners back {:.1} s after the uncordon: {:?}",
            drain_took.as_secs_f64(),
            uncordon_took.as_secs_f64(),
            report.drain
        )?;

        // 8. A graceful shutdown of the third IP's owner (issue #29 O4), emulating kubelet's
        // (this machine has no systemd-logind for kubelet to take the shutdown from): the node
        // takes no new pods ([`SHUTTING_DOWN_TAINT`]), its pods are terminated the way kubelet
        // does — ordinary pods first, critical ones last, each with its grace period — and the
        // node is powered off. The speaker is an ordinary pod (no priority class, as MetalLB's):
        // its SIGTERM hands its IPs over while the node still routes. Every probe answered by
        // one node, the client's HTTP requests counted; powered on and untainted, the IP goes
        // back.
        let shut = owners_before[2].clone();
        let ks = lab.index_of(&shut)?;
        writeln!(
            out,
            "8. graceful shutdown of {shut} (the owner of {ip3}): no new pods, ordinary pods terminated, then critical ones, then powered off"
        )?;
        let shut_mac = lab.lab.node(&shut).mac.clone();
        lab.kubectl_ok(&["taint", "node", &shut, SHUTTING_DOWN_TAINT], None)?;
        let all_pods: Api<Pod> = Api::all(client.clone());
        let on_node = all_pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={shut}")))
            .await?
            .items;
        let critical = |p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.priority_class_name.as_deref())
                .is_some_and(|c| c == "system-node-critical" || c == "system-cluster-critical")
        };
        // Per group, one `kubectl delete pod --wait` per namespace: kubelet stops a group's pods
        // together, each with its own grace period, and the next group once they are gone.
        let mut deletions: Vec<Vec<String>> = Vec::new();
        let mut graceful = GracefulShutdownReport {
            node: shut.clone(),
            ..GracefulShutdownReport::default()
        };
        for last in [false, true] {
            let mut by_ns: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for p in on_node.iter().filter(|p| critical(p) == last) {
                let ns = p.namespace().unwrap_or_default();
                let name = p.name_any();
                let listed = format!("{ns}/{name}");
                if last {
                    graceful.critical.push(listed);
                } else {
                    graceful.ordinary.push(listed);
                }
                by_ns.entry(ns).or_default().push(name);
            }
            for (ns, names) in by_ns {
                let mut command = vec![
                    "-n".to_owned(),
                    ns,
                    "delete".to_owned(),
                    "pod".to_owned(),
                    "--wait=true".to_owned(),
                    "--timeout=120s".to_owned(),
                ];
                command.extend(names);
                deletions.push(command);
            }
        }
        let deletions: Vec<Vec<&str>> = deletions
            .iter()
            .map(|c| c.iter().map(String::as_str).collect())
            .collect();
        let deletions: Vec<&[&str]> = deletions.iter().map(Vec::as_slice).collect();
        let log = probe_throughout(lab, &ips, &deletions).await?;
        let load = HttpLoad::start(&lab.lab.clients[0].netns, &ips);
        lab_mut.power_off_node(ks);
        let lab: &RealNodes = lab_mut;
        for ip in ips {
            graceful.owners_while_off.push(
                one_answerer(
                    lab,
                    ip,
                    |m| m != shut_mac,
                    "one answerer for every IP once the node is off",
                )
                .await?,
            );
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
        graceful.http_power_off = load.finish().await?;
        graceful.during = log;
        lab_mut.power_on_node(ks)?;
        let lab: &RealNodes = lab_mut;
        lab.kubectl_ok(
            &["taint", "node", &shut, &format!("{SHUTTING_DOWN_TAINT}-")],
            None,
        )?;
        let t = Instant::now();
        one_answerer(
            lab,
            ip3,
            |m| m == shut_mac,
            "the IP back on the node powered on",
        )
        .await?;
        graceful.back_s = t.elapsed().as_secs_f64();
        writeln!(out, "   {graceful:?}")?;
        report.graceful = graceful;

        // 8 (continued). A hard stop of the second IP's owner (issue #29 O4): every process of the node killed
        // at once, no graceful hand-over. Another node answers its IP; while it is down every IP
        // has one answerer; powered on again, the IP goes back.
        let stopped = owners_before[1].clone();
        let k = lab.index_of(&stopped)?;
        writeln!(
            out,
            "8 (continued). hard stop of {stopped} (the owner of {ip2}): every process of the node killed at once"
        )?;
        let stopped_mac = lab.lab.node(&stopped).mac.clone();
        let states_before_stop = service_states(&client, &["web", "web2", "web3"]).await?;
        // Every frame for 3 s from the kill: the successor's first claim, to the microsecond.
        let capture = lab_mut.lab.start_capture(0, Duration::from_secs(3));
        tokio::time::sleep(Duration::from_millis(100)).await;
        let killed_us = http_client::unix_us();
        lab_mut.power_off_node(k);
        let t = Instant::now();
        let killed = t;
        let lab: &RealNodes = lab_mut;
        let successor = one_answerer(
            lab,
            ip2,
            |m| m != stopped_mac,
            "another node answering after the hard stop",
        )
        .await?;
        let failover = t.elapsed();
        let first_claim_us = capture
            .await??
            .iter()
            .filter(|f| {
                matches!(f, Seen::GratuitousArp { .. } | Seen::ArpReply { .. })
                    && f.ip() == std::net::IpAddr::V4(ip2)
                    && f.mac() != stopped_mac
                    && f.unix_us() >= killed_us
            })
            .map(Seen::unix_us)
            .min();
        let mut while_down = Vec::new();
        for ip in ips {
            while_down.push(
                one_answerer(
                    lab,
                    ip,
                    |m| m != stopped_mac,
                    "one answerer for every IP while the node is down",
                )
                .await?,
            );
        }
        // The node does not come back: the Node controller marks it not Ready (the lab's
        // `--node-monitor-grace-period` is 20 s), and the operator declares it out of service
        // (`node.kubernetes.io/out-of-service`, Kubernetes' non-graceful node shutdown): its pods
        // are evicted and, with no kubelet to confirm, deleted — our speaker pod too. No IP may
        // be left unanswered or move while that happens (the survivors hold every IP already).
        let speaker_pod = pods
            .list(&ListParams::default().labels(SPEAKERS))
            .await?
            .items
            .into_iter()
            .find(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&stopped))
            .and_then(|p| p.metadata.name)
            .context("the stopped node's speaker pod")?;
        let taint = "node.kubernetes.io/out-of-service=nodeshutdown:NoExecute";
        let node_ref = format!("node/{stopped}");
        let pod_ref = format!("pod/{speaker_pod}");
        let oos = probe_throughout(
            lab,
            &ips,
            &[
                &[
                    "wait",
                    "--for=condition=Ready=Unknown",
                    &node_ref,
                    "--timeout=120s",
                ],
                &["taint", "node", &stopped, taint],
                &["-n", NS, "wait", "--for=delete", &pod_ref, "--timeout=120s"],
            ],
        )
        .await?;
        let out_of_service = killed.elapsed();
        let changed_out_of_service = services_changed(&client, &states_before_stop).await?;
        writeln!(
            out,
            "   not Ready, tainted out-of-service and its speaker pod {speaker_pod} deleted {:.1} s after the kill",
            out_of_service.as_secs_f64()
        )?;
        lab.kubectl_ok(&["taint", "node", &stopped, &format!("{taint}-")], None)?;
        lab_mut.power_on_node(k)?;
        let t = Instant::now();
        let lab: &RealNodes = lab_mut;
        one_answerer(
            lab,
            ip2,
            |m| m == stopped_mac,
            "the IP back on the node powered on",
        )
        .await?;
        report.hard_stop = HardStopReport {
            node: stopped,
            successor,
            failover_s: failover.as_secs_f64(),
            claimed_after_ms: first_claim_us.map(|us| us.saturating_sub(killed_us) as f64 / 1000.0),
            owners_while_down: while_down,
            out_of_service_s: out_of_service.as_secs_f64(),
            probes_out_of_service: oos.probes,
            two_answers_out_of_service: oos.two_answers,
            unanswered_out_of_service: oos.unanswered,
            sequences_out_of_service: oos.sequences,
            changed_out_of_service,
            http_out_of_service: oos.http,
            back_s: t.elapsed().as_secs_f64(),
        };
        writeln!(out, "   {:?}", report.hard_stop)?;

        // 8 (continued). The first IP's owner replaced under the same name (issue #29 O6): the
        // machine dies, its Node is deleted, a new machine with a new MAC boots as that node.
        writeln!(
            out,
            "8 (continued). {} replaced under the same name: killed, Node deleted, back with a new MAC",
            owners_before[0]
        )?;
        report.replaced =
            super::replaced::replace_node(lab_mut, &owners_before[0], ip, &ips, out).await?;

        // 9. Power the whole cluster off and on (issue #29 O5): every Service keeps its address
        // with no write, and each address is claimed again by one node only — none announced
        // before the speakers converged.
        writeln!(
            out,
            "9. the whole cluster powered off (every node, the control plane, etcd) and on"
        )?;
        let before = service_states(&client, &["web", "web2", "web3"]).await?;
        lab_mut.power_off();
        report.answers_while_off = lab_mut.lab.arp_answers(0, ip).await?.len();
        tokio::time::sleep(Duration::from_secs(2)).await;
        lab_mut.power_on().await?;
        let on = Instant::now();
        let ips = [ip, ip2, ip3];
        let lab: &RealNodes = lab_mut;
        let (frames, answered) = tokio::join!(lab.lab.capture(0, RESTART_CAPTURE), async {
            let mut answered = Vec::new();
            for ip in ips {
                let owner =
                    one_answerer(lab, ip, |_| true, "one ARP answerer after the power-on").await?;
                answered.push((ip, owner, on.elapsed().as_secs_f64()));
            }
            anyhow::Ok(answered)
        });
        report.answered_after_power_on = answered?;
        let frames = frames?;
        for ip in ips {
            let claimants: BTreeSet<String> = frames
                .iter()
                .filter_map(|f| match f {
                    Seen::GratuitousArp { ip: i, mac, .. } | Seen::ArpReply { ip: i, mac, .. }
                        if *i == ip =>
                    {
                        Some(node_of(lab, mac).unwrap_or_else(|_| mac.clone()))
                    }
                    _ => None,
                })
                .collect();
            report.claimants_after_power_on.push((ip, claimants));
        }
        let client = lab.lab.client().await?;
        report.restart_changed = services_changed(&client, &before).await?;
        writeln!(
            out,
            "   nothing answered while off ({} answers); after the power-on, (IP, owner, s): {:?}; nodes that claimed each IP in the first {} s: {:?}; Services changed: {:?}",
            report.answers_while_off,
            report.answered_after_power_on,
            RESTART_CAPTURE.as_secs(),
            report.claimants_after_power_on,
            report.restart_changed
        )?;

        // 9 (continued). The same with the nodes coming back one by one, minutes apart (issue #29
        // O5): every Service keeps its address, no probe is answered by two nodes, the IPs are
        // answered once a majority of the speakers is back, and each ends on its owner.
        writeln!(
            out,
            "9 (continued). powered off again, then on node by node, {} s apart, every IP probed throughout",
            super::one_by_one::GAP.as_secs()
        )?;
        report.one_by_one = super::one_by_one::restart_one_by_one(lab_mut, &ips, out).await?;
        writeln!(
            out,
            "   two answers: {:?}; owners at the end: {:?}; Services changed: {:?}",
            report.one_by_one.two_answers,
            report.one_by_one.owners_after,
            report.one_by_one.changed
        )?;
    }
    let lab: &RealNodes = lab_mut;

    // 10. Uninstall in one command, as docs/install.md says: `ferrolb uninstall` stops the
    // controller, releases every status it wrote with the admin's credentials, then deletes the
    // namespace, the cluster RBAC and the CRDs. (`kubectl delete -k deploy/` alone revokes the
    // controller's RBAC in the same command, before any pod stops: docs/install.md.)
    writeln!(
        out,
        "{}. uninstall: ferrolb uninstall",
        if day_two { 10 } else { 5 }
    )?;
    let t = Instant::now();
    let run = std::process::Command::new(workspace_bin("ferrolb")?)
        .arg("uninstall")
        .arg("--kubeconfig")
        .arg(lab.lab.cluster().kubeconfig())
        .output()
        .context("running ferrolb uninstall")?;
    let said = String::from_utf8_lossy(&run.stderr);
    for line in said.lines() {
        writeln!(out, "   {line}")?;
    }
    if !run.status.success() {
        anyhow::bail!("ferrolb uninstall: {}", run.status);
    }
    writeln!(out, "   done after {:.1} s", t.elapsed().as_secs_f64())?;
    for name in ["web", "web2", "web3"] {
        if let Some(ip) = ingress_v4(&client, "default", name).await {
            report.statuses_left.push(format!("default/{name} {ip}"));
        }
        report.released_events.extend(
            typed_events_for(&client, "default", name)
                .await?
                .into_iter()
                .filter(|(_, reason, _)| reason == "IPReleased")
                .map(|(type_, _, note)| format!("{name}: {type_} {note}")),
        );
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    report.namespace_left = namespaces.get_opt(NS).await?.is_some();
    let part_of = ListParams::default().labels("app.kubernetes.io/part-of=ferrolb");
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let bindings: Api<ClusterRoleBinding> = Api::all(client.clone());
    report.cluster_rbac_left = roles
        .list(&part_of)
        .await?
        .items
        .iter()
        .map(|r| format!("clusterrole/{}", r.name_any()))
        .chain(
            bindings
                .list(&part_of)
                .await?
                .items
                .iter()
                .map(|b| format!("clusterrolebinding/{}", b.name_any())),
        )
        .chain(
            Api::<ValidatingAdmissionPolicy>::all(client.clone())
                .list(&part_of)
                .await?
                .items
                .iter()
                .map(|p| format!("validatingadmissionpolicy/{}", p.name_any())),
        )
        .chain(
            Api::<ValidatingAdmissionPolicyBinding>::all(client.clone())
                .list(&part_of)
                .await?
                .items
                .iter()
                .map(|b| format!("validatingadmissionpolicybinding/{}", b.name_any())),
        )
        .collect();
    report.crds_left = lab
        .kubectl_ok(&["get", "crd", "-o", "name"], None)?
        .lines()
        .filter(|l| l.contains("ferrolb.io"))
        .map(str::to_owned)
        .collect();
    report.answers_after_uninstall = answer_sets(lab, ip, 3).await?;
    writeln!(
        out,
        "   statuses left: {:?}; namespace left: {}; cluster RBAC left: {:?}; ferrolb CRDs left: {:?}; ARP answers for {ip}: {:?}",
        report.statuses_left,
        report.namespace_left,
        report.cluster_rbac_left,
        report.crds_left,
        report
            .answers_after_uninstall
            .iter()
            .map(BTreeSet::len)
            .collect::<Vec<_>>()
    )?;
    Ok(report)
}
