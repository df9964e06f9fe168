//! The README quickstart run verbatim on real nodes (issue #28 item 5 and its "Done when"): the
//! "Then, on either" command block ([`crate::readme::quickstart_block`]) runs unchanged in
//! `bash -euxo pipefail` from the repository root, against a real-node lab standing in for the
//! minikube or kind cluster. What cannot run here is replaced by a shim:
//!
//! | README line (not run) | lab equivalent |
//! |---|---|
//! | `minikube start` / `kind create cluster` | [`RealNodes::start`]: kubelet + containerd nodes, kube-proxy (nftables) |
//! | kubeadm labelling the single node `node.kubernetes.io/exclude-from-external-load-balancers` | `kubectl label node` before the block runs, when the lab has one node |
//! | `minikube image build …` / `docker build … && kind load docker-image …` | `tests/image/build.sh`'s `ferrolb.tar` imported into every node's containerd |
//! | the registry pull of `registry.k8s.io/e2e-test-images/agnhost:2.53` | the image of that name from `tests/image/build.sh` (the lab's backend as `/agnhost`, serving `netexec --http-port=N`'s `GET /hostname`), imported likewise |
//!
//! Inside the block, two commands go through wrappers first in `PATH`: `kubectl` (the lab's
//! kubectl with the test cluster's admin kubeconfig, as `~/.kube/config` would be) and `curl`
//! (the machine's curl run in the lab's first client namespace, a host on the node network as
//! the Linux host is on minikube's Docker network). Every other line runs as written.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::Context;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::ResourceExt;
use kube::api::Api;

use super::story::{NS, diagnostics, http_from_client, one_answerer};
use super::{RealNodes, image_archives};
use crate::cluster::{k8s_bin, repo_root};
use crate::lab::scenario::typed_events_for;
use crate::objects::ingress_v4;
use crate::poll::until_some;

/// The label kubeadm (and so minikube and kind) puts on a control-plane node.
pub const EXCLUDE_LABEL: &str = "node.kubernetes.io/exclude-from-external-load-balancers";

/// The longest the block may run (its `kubectl wait`s carry their own timeouts; `rollout
/// status` has none).
pub const BLOCK_TIMEOUT: Duration = Duration::from_secs(300);

/// What running the quickstart showed.
#[derive(Debug, Default)]
pub struct Report {
    /// The nodes of the lab.
    pub nodes: Vec<String>,
    /// The nodes carrying [`EXCLUDE_LABEL`] when the block ran.
    pub labelled: Vec<String>,
    /// The block's exit status (`bash -euxo pipefail`).
    pub exit_code: Option<i32>,
    /// The block's standard output (`kubectl`'s lines, then `curl`'s answer last).
    pub stdout: String,
    /// The block's trace and error output.
    pub stderr: String,
    /// The Service `web`'s external IP after the block.
    pub ip: Option<Ipv4Addr>,
    /// The addresses of the quickstart's pool, `status.autoAddresses.addresses`.
    pub pool_addresses: Vec<String>,
    /// The chosen prefix, `status.autoAddresses.prefix`.
    pub pool_prefix: String,
    /// The node answering ARP for the IP from the client, alone.
    pub owner: String,
    /// `type reason` of the Events on Service `web`.
    pub events: BTreeSet<String>,
    /// Who made the membership key Secret: its `app.kubernetes.io/managed-by` label.
    pub key_managed_by: Option<String>,
    /// After the whole cluster was powered off and on (`minikube stop && minikube start`, issue
    /// #29 O5): what changed on Service `web` (resourceVersion or address), if anything.
    pub restart_changed: Option<String>,
    /// ARP answers for the IP while the cluster was off.
    pub answers_while_off: usize,
    /// Whether the speaker processes after the power-on are all new ones (none of the PIDs
    /// seen before the power-off).
    pub speakers_restarted: bool,
    /// The node answering ARP for the IP, alone, after the power cycle.
    pub owner_after_restart: String,
    /// The pod that answered HTTP through the IP after the power cycle.
    pub answered_after_restart: String,
    /// Seconds from the power-on (kubelets started) to the first ARP answer, and to the first
    /// HTTP answer.
    pub answered_after_power_on: (f64, f64),
}

/// Starts a real-node lab of `nodes` nodes and one client, labels a single node like kubeadm
/// does, and runs the README's quickstart block in it (module docs).
///
/// # Errors
/// The lab did not start, the README has no quickstart block, or a wrapper could not be written.
/// A failing block is not an error: its exit status and output are in the [`Report`].
pub async fn run(nodes: usize, out: &mut dyn Write) -> anyhow::Result<Report> {
    let images = image_archives()?;
    let started = Instant::now();
    writeln!(
        out,
        "starting {nodes} real node(s) for the README quickstart ..."
    )?;
    let mut lab = RealNodes::start(nodes, 1, &images).await?;
    writeln!(
        out,
        "  Nodes Ready after {:.1} s",
        started.elapsed().as_secs_f64()
    )?;
    let mut result = quickstart(&lab, out).await;
    if let Ok(report) = &mut result
        && report.exit_code == Some(0)
        && let Err(e) = power_cycle(&mut lab, report, out).await
    {
        result = Err(e);
    }
    if let Ok(r) = &result
        && r.exit_code != Some(0)
    {
        writeln!(out, "{}", diagnostics(&lab))?;
    }
    result
}

async fn quickstart(lab: &RealNodes, out: &mut dyn Write) -> anyhow::Result<Report> {
    let mut report = Report {
        nodes: lab.nodes.iter().map(|n| n.name.clone()).collect(),
        ..Report::default()
    };
    if let [only] = report.nodes.as_slice() {
        lab.kubectl_ok(&["label", "node", only, &format!("{EXCLUDE_LABEL}=")], None)?;
    }
    let labelled = lab.kubectl_ok(&["get", "nodes", "-l", EXCLUDE_LABEL, "-o", "name"], None)?;
    report.labelled = labelled
        .lines()
        .map(|l| l.trim_start_matches("node/").to_owned())
        .collect();

    let root = repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).context("reading README.md")?;
    let block = crate::readme::quickstart_block(&readme)?.to_owned();
    let shim = tempfile::Builder::new()
        .prefix("ferrolb-quickstart-shim-")
        .tempdir()?;
    write_wrappers(shim.path(), lab)?;
    writeln!(
        out,
        "running the README quickstart block ({} lines) with the kubectl and curl wrappers ...",
        block.lines().count()
    )?;
    let t = Instant::now();
    let path = format!(
        "{}:{}",
        shim.path().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let output = tokio::task::spawn_blocking(move || {
        Command::new("timeout")
            .args(["--kill-after=5", &BLOCK_TIMEOUT.as_secs().to_string()])
            .args(["bash", "-euxo", "pipefail", "-c", &block])
            .current_dir(&root)
            .env("PATH", path)
            .env_remove("KUBECONFIG")
            .output()
    })
    .await?
    .context("running bash")?;
    report.exit_code = output.status.code();
    report.stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    report.stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    writeln!(
        out,
        "  exit {:?} after {:.1} s; its output:\n{}",
        report.exit_code,
        t.elapsed().as_secs_f64(),
        report.stdout
    )?;
    if report.exit_code != Some(0) {
        writeln!(out, "  its trace:\n{}", report.stderr)?;
        return Ok(report);
    }

    let client = lab.lab.client().await?;
    let ip = ingress_v4(&client, "default", "web")
        .await
        .context("the Service web has no IPv4 address")?;
    report.ip = Some(ip);
    let pool = lab.kubectl_ok(
        &[
            "get",
            "ipaddresspool",
            "quickstart",
            "-o",
            "jsonpath={.status.autoAddresses.prefix} {.status.autoAddresses.addresses[*]}",
        ],
        None,
    )?;
    let mut words = pool.split_whitespace();
    report.pool_prefix = words.next().unwrap_or_default().to_owned();
    report.pool_addresses = words.map(str::to_owned).collect();
    report.owner = one_answerer(lab, ip, |_| true, "one ARP answerer for web's IP").await?;
    report.events = typed_events_for(&client, "default", "web")
        .await?
        .into_iter()
        .map(|(kind, reason, _)| format!("{kind} {reason}"))
        .collect();
    let secrets: Api<Secret> = Api::namespaced(client, NS);
    report.key_managed_by = secrets.get_opt("ferrolb-memberlist").await?.and_then(|s| {
        s.metadata
            .labels?
            .get("app.kubernetes.io/managed-by")
            .cloned()
    });
    writeln!(
        out,
        "  web has {ip} from pool {} {:?}; {} answers ARP for it alone; Events {:?}",
        report.pool_prefix, report.pool_addresses, report.owner, report.events
    )?;
    Ok(report)
}

/// `minikube stop && minikube start` ([`RealNodes::power_cycle`], issue #29 O5): the Service keeps
/// its address with no write, and the address is answered again — by ARP and by a pod.
async fn power_cycle(
    lab: &mut RealNodes,
    report: &mut Report,
    out: &mut dyn Write,
) -> anyhow::Result<()> {
    let client = lab.lab.client().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let before = services.get("web").await?.resource_version();
    writeln!(
        out,
        "powering the cluster off and on (minikube stop && minikube start) ..."
    )?;
    let pids_before = speaker_pids(lab);
    lab.power_off();
    report.answers_while_off = lab
        .lab
        .arp_answers(0, report.ip.context("no IP")?)
        .await?
        .len();
    tokio::time::sleep(Duration::from_secs(2)).await;
    lab.power_on().await?;
    let on = Instant::now();
    let ip = report.ip.context("no IP before the restart")?;
    report.owner_after_restart = one_answerer(
        lab,
        ip,
        |_| true,
        "one ARP answerer for web's IP after the restart",
    )
    .await?;
    let arp = on.elapsed().as_secs_f64();
    report.answered_after_restart = until_some(
        "HTTP through web's IP after the restart",
        Duration::from_secs(120),
        || async { http_from_client(lab, ip).await.ok() },
    )
    .await?;
    report.answered_after_power_on = (arp, on.elapsed().as_secs_f64());
    report.speakers_restarted =
        pids_before.iter().all(|p| !speaker_pids(lab).contains(p)) && !pids_before.is_empty();
    let client = lab.lab.client().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let after = services.get("web").await?.resource_version();
    let ip_after = ingress_v4(&client, "default", "web").await;
    if after != before || ip_after != Some(ip) {
        report.restart_changed = Some(format!(
            "resourceVersion {before:?} -> {after:?}, {ip} -> {ip_after:?}"
        ));
    }
    writeln!(
        out,
        "  after the power-on: {} answers ARP for {ip} at {arp:.1} s, HTTP → {} at {:.1} s; web changed: {:?}",
        report.owner_after_restart,
        report.answered_after_restart,
        report.answered_after_power_on.1,
        report.restart_changed
    )?;
    Ok(())
}

/// The PIDs of the `ferrolb-speaker` processes in the nodes' network namespaces.
fn speaker_pids(lab: &RealNodes) -> BTreeSet<String> {
    lab.lab
        .nodes
        .iter()
        .filter_map(|n| crate::lab::sh("ip", &["netns", "pids", &n.netns]).ok())
        .flat_map(|pids| {
            pids.split_whitespace()
                .filter(|pid| {
                    std::fs::read_to_string(format!("/proc/{pid}/comm"))
                        .is_ok_and(|c| c.trim() == "ferrolb-speaker")
                })
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect()
}

/// Writes the `kubectl` and `curl` wrappers into `dir` (module docs).
fn write_wrappers(dir: &Path, lab: &RealNodes) -> anyhow::Result<()> {
    let kubectl = k8s_bin("kubectl")?;
    let kubeconfig = lab.lab.cluster().kubeconfig();
    let curl = which("curl").context("curl is not installed")?;
    let client = &lab.lab.clients[0].netns;
    for (name, body) in [
        (
            "kubectl",
            format!(
                "exec '{}' --kubeconfig '{}' \"$@\"",
                kubectl.display(),
                kubeconfig.display()
            ),
        ),
        (
            "curl",
            format!("exec ip netns exec '{client}' '{}' \"$@\"", curl.display()),
        ),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, format!("#!/bin/sh\n{body}\n"))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    }
    Ok(())
}

/// The first `name` in `PATH`.
fn which(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    })
}
