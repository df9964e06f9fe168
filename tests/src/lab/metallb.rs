//! MetalLB in the lab (issue #11): the same nodes, bridge and API server, with MetalLB's own
//! controller and speakers instead of ferrolb's.
//!
//! - **Binaries and CRDs**: `tests/metallb/build.sh` builds MetalLB's `speaker` and `controller`
//!   from the Go module proxy at the version pinned in `tests/metallb/build/go.mod`, and copies the
//!   module's `config/crd/bases` next to them (`crd/`) with the version in `version`; the directory
//!   is `FERROLB_METALLB_BIN` (`tests/run.sh` exports it), else the script is run.
//! - **Install** ([`install`]): the CRDs server-side (they are large), namespace
//!   [`NAMESPACE`] and its `default` ServiceAccount (no controller-manager creates it here).
//! - **Controller** ([`start_controller`]): webhooks and certificate rotation off, metrics on
//!   [`CONTROLLER_PORT`] inside a namespace of its own that only has loopback and the API relay —
//!   never a listener in the root namespace. [`webhook::start_controller_with_webhook`] runs it
//!   with its validating webhook instead (field case C-08).
//! - **Speakers** ([`start_speaker`]): one per node namespace, configured through the environment
//!   MetalLB's DaemonSet sets (`METALLB_NODE_NAME`, `METALLB_POD_NAME`, `METALLB_HOST`,
//!   `METALLB_ML_BIND_ADDR`, `METALLB_ML_LABELS`, `METALLB_ML_SECRET_KEY_PATH`, …). MetalLB finds
//!   its memberlist peers by listing speaker Pods and reads its own Pod, so each speaker gets a Pod
//!   object (labels [`SPEAKER_LABELS`], `hostNetwork`, `nodeName`) whose status is written as a
//!   kubelet would: `Running`, `podIP` = `hostIP` = the node's address, `Ready`.
//! - **Configuration** ([`advertise_pool`]): `metallb.io/v1beta1` `IPAddressPool` and
//!   `L2Advertisement` in [`NAMESPACE`].

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::bail;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, ObjectMeta, Patch, PatchParams, PostParams};

use super::{Lab, LabNode, in_netns, sh};
use crate::cluster::{Supervised, kubectl};

pub mod webhook;

/// MetalLB's namespace in the lab (where its configuration, Pods and ServiceAccount live).
pub const NAMESPACE: &str = "metallb-system";

/// The labels of the speaker Pods, as MetalLB's manifests set them; also `METALLB_ML_LABELS`.
pub const SPEAKER_LABELS: &str = "app=metallb,component=speaker";

/// The speaker's metrics port inside its node namespace (MetalLB's default).
pub const SPEAKER_PORT: u16 = 7472;

/// The controller's metrics port inside its own namespace.
pub const CONTROLLER_PORT: u16 = 7472;

/// The process name the kernel reports for MetalLB's speaker (`/proc/<pid>/comm`).
pub const SPEAKER_COMM: &str = "speaker";

/// The directory `tests/metallb/build.sh` filled: `speaker`, `controller`, `crd/`, `version`.
#[derive(Debug, Clone)]
pub struct Binaries {
    dir: PathBuf,
}

impl Binaries {
    /// `FERROLB_METALLB_BIN`, else the directory `tests/metallb/build.sh` prints (it builds
    /// MetalLB the first time, a couple of minutes on two cores).
    ///
    /// # Errors
    /// The script failed, or the directory lacks a binary or the CRDs.
    pub fn locate() -> anyhow::Result<Binaries> {
        static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let dir = DIR
            .get_or_init(|| build_dir().map_err(|e| format!("{e:#}")))
            .as_ref()
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .clone();
        for needed in ["speaker", "controller", "crd", "version"] {
            if !dir.join(needed).exists() {
                bail!(
                    "{} is missing; run tests/metallb/build.sh",
                    dir.join(needed).display()
                );
            }
        }
        Ok(Binaries { dir })
    }

    /// MetalLB's `speaker` binary.
    pub fn speaker(&self) -> PathBuf {
        self.dir.join("speaker")
    }

    /// MetalLB's `controller` binary.
    pub fn controller(&self) -> PathBuf {
        self.dir.join("controller")
    }

    /// MetalLB's CRDs (`config/crd/bases` of the module the binaries were built from).
    pub fn crd_dir(&self) -> PathBuf {
        self.dir.join("crd")
    }

    /// The module version the binaries were built from (e.g. `v0.15.2`).
    ///
    /// # Errors
    /// The `version` file cannot be read.
    pub fn version(&self) -> anyhow::Result<String> {
        Ok(std::fs::read_to_string(self.dir.join("version"))?
            .trim()
            .to_owned())
    }
}

fn build_dir() -> anyhow::Result<PathBuf> {
    crate::cluster::cached_bin_dir("FERROLB_METALLB_BIN", "tests/metallb/build.sh")
}

/// Installs MetalLB's CRDs (server-side apply, then waits until they are established), namespace
/// [`NAMESPACE`] and its `default` ServiceAccount.
///
/// # Errors
/// kubectl or the API server failed.
pub async fn install(kubeconfig: &Path, client: &Client, bins: &Binaries) -> anyhow::Result<()> {
    let crds = bins.crd_dir();
    let crds = crds.to_string_lossy();
    for args in [
        vec!["apply", "--server-side", "-f", &crds],
        vec![
            "wait",
            "--for",
            "condition=established",
            "--timeout=60s",
            "-f",
            &crds,
        ],
    ] {
        let out = kubectl(kubeconfig, &args, None)?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            );
        }
    }
    let meta = |name: &str, namespace: Option<&str>| ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(Into::into),
        ..Default::default()
    };
    Api::<Namespace>::all(client.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(NAMESPACE, None),
                ..Default::default()
            },
        )
        .await?;
    Api::<ServiceAccount>::namespaced(client.clone(), NAMESPACE)
        .create(
            &PostParams::default(),
            &ServiceAccount {
                metadata: meta("default", Some(NAMESPACE)),
                ..Default::default()
            },
        )
        .await?;
    Ok(())
}

/// Starts MetalLB's controller in namespace `netns` (which has the API relay on loopback),
/// logging to `<lab dir>/metallb-controller.log`: webhooks and certificate rotation off, as
/// nothing in the lab calls a webhook — unless [`webhook::start_controller_with_webhook`] has
/// written the lab's webhook certificate: then with its webhook on (rotation still off; see
/// [`webhook`]).
///
/// # Errors
/// The process could not be started.
pub fn start_controller(lab: &Lab, bins: &Binaries, netns: &str) -> anyhow::Result<Supervised> {
    let log = lab.dir().join("metallb-controller.log");
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns])
        .arg(bins.controller())
        .arg("--kubeconfig")
        .arg(lab.node_kubeconfig())
        .args(["--namespace", NAMESPACE])
        .args(["--port", &CONTROLLER_PORT.to_string()]);
    match webhook::serving_dirs(lab) {
        None => cmd.args(["--webhook-mode", "disabled", "--disable-cert-rotation"]),
        Some(dirs) => cmd
            .args(["--webhook-mode", "enabled", "--disable-cert-rotation"])
            .arg("--cert-dir")
            .arg(&dirs.cert_dir)
            .env("TMPDIR", &dirs.tmp_dir),
    };
    cmd.args(["--log-level", "info"]);
    Supervised::spawn_command("metallb controller", &mut cmd, &log, false)
}

/// The name of node `node`'s speaker Pod.
pub fn speaker_pod_name(node: &str) -> String {
    format!("speaker-{node}")
}

/// Creates node `node`'s speaker Pod object if it does not exist yet and writes its status as a
/// kubelet would (`Running`, `podIP` = `hostIP` = the node's address, `Ready`).
///
/// # Errors
/// The API server refused the Pod or its status.
pub async fn ensure_speaker_pod(client: &Client, node: &LabNode) -> anyhow::Result<()> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let name = speaker_pod_name(&node.name);
    if api.get_opt(&name).await?.is_none() {
        let labels: serde_json::Map<String, serde_json::Value> = SPEAKER_LABELS
            .split(',')
            .filter_map(|kv| kv.split_once('='))
            .map(|(k, v)| (k.to_owned(), v.into()))
            .collect();
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": { "name": name, "namespace": NAMESPACE, "labels": labels },
            "spec": {
                "nodeName": node.name,
                "hostNetwork": true,
                "automountServiceAccountToken": false,
                "containers": [{ "name": "speaker", "image": "quay.io/metallb/speaker" }],
            },
        }))?;
        api.create(&PostParams::default(), &pod).await?;
    }
    let now = serde_json::to_value(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ))?;
    let ip = node.ip.to_string();
    let condition = |type_: &str| serde_json::json!({ "type": type_, "status": "True", "lastTransitionTime": now });
    let status = serde_json::json!({ "status": {
        "phase": "Running",
        "hostIP": ip, "hostIPs": [{ "ip": ip }],
        "podIP": ip, "podIPs": [{ "ip": ip }],
        "startTime": now,
        "conditions": [
            condition("PodScheduled"), condition("Initialized"),
            condition("ContainersReady"), condition("Ready"),
        ],
    }});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

/// Starts MetalLB's speaker for `node` inside its namespace, with the environment MetalLB's
/// DaemonSet gives it (the module docs), the lab's relayed kubeconfig, and the memberlist key in
/// `<lab dir>/metallb-memberlist/secretkey`. Output goes to the lab's `speaker-<node>.log` (so
/// [`Lab::speaker_log`] shows it). `extra_args` follow the lab's own.
///
/// # Errors
/// The key could not be written or the process not started.
pub fn start_speaker(
    lab: &Lab,
    bins: &Binaries,
    node: &LabNode,
    extra_args: &[&str],
) -> anyhow::Result<Supervised> {
    let key_dir = lab.dir().join("metallb-memberlist");
    if !key_dir.join("secretkey").is_file() {
        std::fs::create_dir_all(&key_dir)?;
        // MetalLB hashes whatever the file holds into its 32-byte key.
        std::fs::copy(lab.key_file(), key_dir.join("secretkey"))?;
    }
    let log = lab.dir().join(format!("speaker-{}.log", node.name));
    let ip = node.ip.to_string();
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &node.netns])
        .arg(bins.speaker())
        .arg("--kubeconfig")
        .arg(lab.node_kubeconfig())
        .args(["--port", &SPEAKER_PORT.to_string()])
        .args(["--log-level", "info"])
        .args(extra_args)
        .env("METALLB_NODE_NAME", &node.name)
        .env("METALLB_POD_NAME", speaker_pod_name(&node.name))
        .env("METALLB_NAMESPACE", NAMESPACE)
        .env("METALLB_HOST", &ip)
        .env("METALLB_ML_BIND_ADDR", &ip)
        .env("METALLB_ML_LABELS", SPEAKER_LABELS)
        .env("METALLB_ML_SECRET_KEY_PATH", &key_dir);
    Supervised::spawn_command(
        &format!("metallb speaker {}", node.name),
        &mut cmd,
        &log,
        false,
    )
}

fn resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: "metallb.io".into(),
        version: "v1beta1".into(),
        api_version: "metallb.io/v1beta1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// Creates (server-side apply) `IPAddressPool` `name` with `addresses` and an `L2Advertisement`
/// of the same name for that pool on every node, in [`NAMESPACE`].
///
/// # Errors
/// The API server refused an object.
pub async fn advertise_pool(client: &Client, name: &str, addresses: &[&str]) -> anyhow::Result<()> {
    create_pool(client, name, addresses).await?;
    apply_l2(
        client,
        name,
        serde_json::json!({ "ipAddressPools": [name] }),
    )
    .await
}

/// Server-side applies the `metallb.io/v1beta1` object `kind` (`plural`) `name` with `spec` in
/// [`NAMESPACE`].
async fn apply(
    client: &Client,
    kind: &str,
    plural: &str,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    let object = serde_json::json!({
        "apiVersion": "metallb.io/v1beta1", "kind": kind,
        "metadata": { "name": name, "namespace": NAMESPACE },
        "spec": spec,
    });
    Api::<DynamicObject>::namespaced_with(client.clone(), NAMESPACE, &resource(kind, plural))
        .patch(
            name,
            &PatchParams::apply("ferrolb-tests").force(),
            &Patch::Apply(&object),
        )
        .await?;
    Ok(())
}

/// The `IPAddressPool`s of [`NAMESPACE`] (`metallb.io/v1beta1`), e.g. for a plain or dry-run
/// create whose refusal is to be read.
pub fn pools(client: &Client) -> Api<DynamicObject> {
    Api::namespaced_with(
        client.clone(),
        NAMESPACE,
        &resource("IPAddressPool", "ipaddresspools"),
    )
}

/// Creates (server-side apply) `IPAddressPool` `name` with `addresses`, without an
/// advertisement, in [`NAMESPACE`].
///
/// # Errors
/// The API server refused it.
pub async fn create_pool(client: &Client, name: &str, addresses: &[&str]) -> anyhow::Result<()> {
    apply_pool(client, name, serde_json::json!({ "addresses": addresses })).await
}

/// Creates or replaces (server-side apply) `IPAddressPool` `name` with `spec` (metallb.io v1beta1
/// fields: `addresses`, `serviceAllocation`, `avoidBuggyIPs`, …), in [`NAMESPACE`].
///
/// # Errors
/// The API server refused it.
pub async fn apply_pool(
    client: &Client,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    apply(client, "IPAddressPool", "ipaddresspools", name, spec).await
}

/// Deletes `IPAddressPool` `name` from [`NAMESPACE`].
///
/// # Errors
/// The API server refused it (also when it does not exist).
pub async fn delete_pool(client: &Client, name: &str) -> anyhow::Result<()> {
    Api::<DynamicObject>::namespaced_with(
        client.clone(),
        NAMESPACE,
        &resource("IPAddressPool", "ipaddresspools"),
    )
    .delete(name, &Default::default())
    .await?;
    Ok(())
}

/// Creates or replaces (server-side apply) `L2Advertisement` `name` with `spec` (metallb.io
/// v1beta1 fields: `ipAddressPools`, `nodeSelectors`, `interfaces`, …), in [`NAMESPACE`].
///
/// # Errors
/// The API server refused it.
pub async fn apply_l2(client: &Client, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
    apply(client, "L2Advertisement", "l2advertisements", name, spec).await
}

/// Creates (server-side apply) `L2Advertisement` `name` announcing pool `pool` from the node
/// whose `kubernetes.io/hostname` label is `node` only (`nodeSelectors`), in [`NAMESPACE`].
///
/// # Errors
/// The API server refused it.
pub async fn advertise_pool_on(
    client: &Client,
    name: &str,
    pool: &str,
    node: &str,
) -> anyhow::Result<()> {
    apply_l2(
        client,
        name,
        serde_json::json!({
            "ipAddressPools": [pool],
            "nodeSelectors": [{ "matchLabels": { "kubernetes.io/hostname": node } }],
        }),
    )
    .await
}

/// Creates namespace `netns` with only `lo` up (no link to the LAN), for the controller.
///
/// # Errors
/// `ip` failed.
pub(super) fn create_isolated_netns(netns: &str) -> anyhow::Result<()> {
    let _ = sh("ip", &["netns", "del", netns]);
    sh("ip", &["netns", "add", netns])?;
    in_netns(netns, "ip", &["link", "set", "lo", "up"])?;
    Ok(())
}
