//! The real-node lab (issue #14): the network-namespace lab's nodes, each running its own
//! containerd and kubelet, so ferrolb is installed the way users install it — images imported
//! into the nodes' runtimes, `kubectl apply -k deploy/`, a DaemonSet and a Deployment whose pods
//! run with the security context the manifests declare.
//!
//! What runs where:
//! - the test cluster's etcd and kube-apiserver, plus kube-controller-manager and kube-scheduler
//!   ([`control_plane`]), on the machine's loopback;
//! - per node namespace: containerd ([`runtime`]), kubelet ([`kubelet`]) and kube-proxy
//!   (nftables), in a cgroup tree of their own ([`host`]);
//! - pods: host-network ones (the speaker) in the node namespace; the others in namespaces the
//!   bridge CNI creates behind the node's `cni0`, addressed from node `k`'s `/28` of [`POD_CIDR`]
//!   (routed between nodes over the LAN, no overlay, no masquerading).
//!
//! **Reaching the API server from pods.** In-cluster clients connect to the `kubernetes` Service
//! (`KUBERNETES_SERVICE_HOST` = [`crate::cluster::KUBERNETES_SERVICE_IP`]). The lab's API server runs with no
//! endpoint reconciler and listens on the machine's loopback, which no node namespace reaches; so
//! the lab writes the `default/kubernetes` EndpointSlice itself with [`API_ENDPOINT`], an address
//! every node holds on its loopback with a relay listening there (like the node relays of
//! [`super::Lab`]). kube-proxy DNATs the Service to it; each node answers for itself.
//!
//! Nodes register themselves (the lab writes no Node object). Teardown (drop) stops the kubelets,
//! kills everything in each node's cgroup tree (containerd, shims, containers), detaches every
//! mount under the node directories, removes the cgroups, puts back the sysctls kubelet changed,
//! and then tears the network lab down as usual.

pub mod control_plane;
pub mod host;
pub mod http_load;
pub mod kubelet;
pub mod one_by_one;
pub mod quickstart;
pub mod replaced;
pub mod runtime;
pub mod speaker_restarts;
pub mod story;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use kube::Client;
use kube::api::{Api, ListParams, ObjectMeta, PostParams};

use super::kube_proxy::{KubeProxy, ProxyMode};
use super::{Implementation, Lab, in_netns, relay};
use crate::cluster::{cached_bin_dir, k8s_bin, kubectl};
use control_plane::ControlPlane;
use host::{CgroupRoot, SavedSysctls};
use kubelet::Kubelet;
use runtime::Runtime;

/// The pods' addresses: node `k` (1-based) owns the `/28` starting at `128 + 16·(k−1)`.
pub const POD_CIDR: &str = "198.51.100.128/26";
/// Where pods reach the API server: the endpoint of the `kubernetes` Service, held by every node.
pub const API_ENDPOINT: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 254);
/// The port of [`API_ENDPOINT`].
pub const API_ENDPOINT_PORT: u16 = 6443;
/// The most nodes [`POD_CIDR`] has subnets for.
pub const MAX_NODES: usize = 4;

/// Node `k`'s (1-based) pod subnet.
pub fn node_subnet(k: usize) -> String {
    format!("198.51.100.{}/28", 128 + 16 * (k - 1))
}

/// The image archives the lab imports into every node, built by `tests/image/build.sh` (cached;
/// `FERROLB_IMAGES` overrides the directory): `ferrolb.tar` (the product image), `pause.tar`
/// ([`runtime::SANDBOX_IMAGE`]), `backend.tar` (the test HTTP backend) and `agnhost.tar` (the same
/// backend as `registry.k8s.io/e2e-test-images/agnhost:2.53`, the image the README quickstart
/// runs; see the script).
///
/// # Errors
/// The build script failed or an archive is missing.
pub fn image_archives() -> anyhow::Result<Vec<PathBuf>> {
    let dir = cached_bin_dir("FERROLB_IMAGES", "tests/image/build.sh")?;
    ["ferrolb.tar", "pause.tar", "backend.tar", "agnhost.tar"]
        .iter()
        .map(|name| {
            let path = dir.join(name);
            anyhow::ensure!(
                path.is_file(),
                "{} is missing; run tests/image/build.sh",
                path.display()
            );
            Ok(path)
        })
        .collect()
}

/// One real node: its runtime, kubelet and cgroup tree.
pub struct RealNode {
    /// The Node name (`node-1`, …), as in [`super::LabNode::name`].
    pub name: String,
    /// The node's private directory (runtime state, logs, kubelet root).
    pub dir: PathBuf,
    runtime: Runtime,
    kubelet: Kubelet,
    cgroup: CgroupRoot,
}

impl RealNode {
    /// Its containerd.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// Its kubelet.
    pub fn kubelet(&self) -> &Kubelet {
        &self.kubelet
    }
}

/// A running real-node lab. See the module docs.
pub struct RealNodes {
    /// The nodes, in the order of [`Lab::nodes`].
    pub nodes: Vec<RealNode>,
    proxies: Vec<KubeProxy>,
    control: ControlPlane,
    sysctls: SavedSysctls,
    /// The network lab underneath (namespaces, clients, the test cluster).
    pub lab: Lab,
}

impl RealNodes {
    /// Starts a lab of `nodes` real nodes (at most [`MAX_NODES`]) and `clients` LAN clients,
    /// imports `images` into every node, and returns once every Node is Ready and every
    /// kube-proxy runs.
    ///
    /// # Errors
    /// Not root, a binary missing or failing to build, a process failing to start, or a Node not
    /// Ready within 120 s (the kubelet's log is in the error).
    pub async fn start(nodes: usize, clients: usize, images: &[PathBuf]) -> anyhow::Result<Self> {
        anyhow::ensure!(
            (1..=MAX_NODES).contains(&nodes),
            "1 to {MAX_NODES} real nodes"
        );
        let node_bin = cached_bin_dir("FERROLB_NODE_BIN", "tests/nodes/build.sh")?;
        let kubelet_bin = k8s_bin("kubelet")?;
        let mut lab =
            Lab::start_with(Implementation::Ferrolb, nodes, clients, false, false).await?;
        for (k, node) in lab.nodes.iter().enumerate() {
            in_netns(&node.netns, "sysctl", &["-qw", "net.ipv4.ip_forward=1"])?;
            in_netns(
                &node.netns,
                "ip",
                &["addr", "add", &format!("{API_ENDPOINT}/32"), "dev", "lo"],
            )?;
            for (j, other) in lab.nodes.iter().enumerate() {
                if j != k {
                    in_netns(
                        &node.netns,
                        "ip",
                        &[
                            "route",
                            "add",
                            &node_subnet(j + 1),
                            "via",
                            &other.ip.to_string(),
                        ],
                    )?;
                }
            }
        }
        let endpoint = SocketAddr::from((API_ENDPOINT, API_ENDPOINT_PORT));
        let port = lab.cluster().port();
        let relays: Vec<_> = lab
            .nodes
            .iter()
            .map(|n| relay::start_at(&n.netns, endpoint, port))
            .collect::<anyhow::Result<_>>()?;
        lab.relays.extend(relays);
        let client = lab.client().await?;
        write_kubernetes_endpoints(&client).await?;

        let sysctls = SavedSysctls::save();
        let control = ControlPlane::start(lab.cluster(), lab.dir())?;
        let bins = NodeBins {
            node_bin,
            kubelet_bin,
            ca: lab.cluster().dir().join("ca.crt"),
        };
        let mut real = Vec::new();
        for (k, node) in lab.nodes.iter().enumerate() {
            let dir = lab.dir().join(&node.name);
            std::fs::create_dir_all(&dir)?;
            let cgroup = CgroupRoot::create(&format!("flb{}-n{}", lab.id(), k + 1))?;
            let (runtime, kubelet) = boot(&lab, k, &dir, &cgroup, &bins, images)?;
            real.push(RealNode {
                name: node.name.clone(),
                dir,
                runtime,
                kubelet,
                cgroup,
            });
        }
        let mut this = RealNodes {
            nodes: real,
            proxies: Vec::new(),
            control,
            sysctls,
            lab,
        };
        this.wait_ready(&client, Duration::from_secs(120)).await?;
        for k in 0..this.nodes.len() {
            let proxy = this.kube_proxy(k)?;
            this.proxies.push(proxy);
        }
        Ok(this)
    }

    /// Powers the whole cluster off, as `minikube stop` or a rack losing power does (issue #29
    /// O5): every process of every node killed at once (kubelet, containerd, shims, every
    /// container), the mounts and the runtime's volatile state (what lives in `/run` on a real
    /// node: containerd's state directory, runc's root) gone; kube-proxy,
    /// kube-controller-manager, kube-scheduler, kube-apiserver and etcd stopped. The disks stay:
    /// etcd's data, containerd's content and metadata (the images stay imported), kubelet's
    /// root, the CNI IPAM state. [`RealNodes::power_on`] starts it all again.
    pub fn power_off(&mut self) {
        for k in 0..self.nodes.len() {
            self.power_off_node(k);
        }
        self.control.stop();
        self.lab.cluster().stop();
    }

    /// Powers node `k` (0-based) off: a hard stop (issue #29 O4) — every process of the node
    /// killed at once (kubelet, containerd, shims, every container, the speaker with them, so
    /// no graceful hand-over), its kube-proxy stopped, its mounts and its runtime's volatile
    /// state gone; its network namespace and link stay, as a machine's NIC stays cabled.
    /// [`RealNodes::power_on_node`] starts it again.
    pub fn power_off_node(&mut self, k: usize) {
        let node = &self.nodes[k];
        node.cgroup.kill_all(Duration::from_secs(10));
        node.kubelet.stop(Duration::ZERO);
        node.runtime.stop(Duration::ZERO);
        host::unmount_under(&node.dir);
        for volatile in ["containerd/state", "runc"] {
            let _ = std::fs::remove_dir_all(node.dir.join(volatile));
        }
        host::remove_dead_shim_sockets();
        if let Some(proxy) = self.proxies.get_mut(k) {
            proxy.stop();
        }
    }

    /// Starts node `k` again after [`RealNodes::power_off_node`]: its containerd, kubelet and
    /// kube-proxy, from the same disks.
    ///
    /// # Errors
    /// A process could not be started again.
    pub fn power_on_node(&mut self, k: usize) -> anyhow::Result<()> {
        let bins = NodeBins {
            node_bin: cached_bin_dir("FERROLB_NODE_BIN", "tests/nodes/build.sh")?,
            kubelet_bin: k8s_bin("kubelet")?,
            ca: self.lab.cluster().dir().join("ca.crt"),
        };
        let real = &mut self.nodes[k];
        (real.runtime, real.kubelet) = boot(&self.lab, k, &real.dir, &real.cgroup, &bins, &[])?;
        let proxy = self.kube_proxy(k)?;
        match self.proxies.get_mut(k) {
            Some(slot) => *slot = proxy,
            None => self.proxies.push(proxy),
        }
        Ok(())
    }

    /// Starts a cluster [`RealNodes::power_off`] stopped, from the same disks, as `minikube
    /// start` does: etcd and the API server, the control plane, then every node's containerd,
    /// kubelet and kube-proxy. Returns once the API server is ready and every kubelet runs; the
    /// pods come back as kubelet restarts them.
    ///
    /// # Errors
    /// A process could not be started again, or the API server was not ready within 90 s.
    pub async fn power_on(&mut self) -> anyhow::Result<()> {
        self.power_on_control_plane().await?;
        for k in 0..self.nodes.len() {
            self.power_on_node(k)?;
        }
        Ok(())
    }

    /// The index of the node named `name` (for [`RealNodes::power_off_node`] and
    /// [`RealNodes::power_on_node`]).
    ///
    /// # Errors
    /// No node has that name.
    pub fn index_of(&self, name: &str) -> anyhow::Result<usize> {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .with_context(|| format!("no node named {name}"))
    }

    /// Starts etcd, the API server and the control plane of a cluster [`RealNodes::power_off`]
    /// stopped, and no node: [`RealNodes::power_on_node`] starts each (issue #29 O5, the nodes
    /// back one by one).
    ///
    /// # Errors
    /// A process could not be started again, or the API server was not ready within 90 s.
    pub async fn power_on_control_plane(&mut self) -> anyhow::Result<()> {
        self.lab.cluster().start_again().await?;
        self.control = ControlPlane::start(self.lab.cluster(), self.lab.dir())?;
        Ok(())
    }

    /// Starts kube-proxy (nftables) for node `k`, for the pods' ranges.
    fn kube_proxy(&self, k: usize) -> anyhow::Result<KubeProxy> {
        self.lab.start_kube_proxy_for(
            &self.lab.nodes[k].name,
            ProxyMode::Nftables,
            POD_CIDR,
            super::pods::POD_CIDR_V6,
        )
    }

    async fn wait_ready(&self, client: &Client, timeout: Duration) -> anyhow::Result<()> {
        let nodes: Api<Node> = Api::all(client.clone());
        let deadline = std::time::Instant::now() + timeout;
        loop {
            for node in &self.nodes {
                if let Some(status) = node.kubelet.exit_status() {
                    bail!(
                        "kubelet {} exited ({status}):\n{}",
                        node.name,
                        node.kubelet.log_tail(30)
                    );
                }
            }
            if let Some(exit) = self.control.exited() {
                bail!("a control-plane process exited: {exit}");
            }
            let list = nodes.list(&ListParams::default()).await?;
            let ready = list.items.iter().filter(|n| is_ready(n)).count();
            if ready == self.nodes.len() {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                let tails: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| format!("--- kubelet {}:\n{}", n.name, n.kubelet.log_tail(15)))
                    .collect();
                bail!(
                    "{ready} of {} Nodes Ready after {timeout:?}\n{}",
                    self.nodes.len(),
                    tails.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// Runs the real `kubectl` with the admin kubeconfig (see [`crate::cluster::kubectl`]).
    ///
    /// # Errors
    /// kubectl could not be started.
    pub fn kubectl(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
        kubectl(self.lab.cluster().kubeconfig(), args, stdin)
    }

    /// Like [`RealNodes::kubectl`], failing with kubectl's stderr unless it exits 0; returns stdout.
    ///
    /// # Errors
    /// kubectl failed.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
        let out = self.kubectl(args, stdin)?;
        if !out.status.success() {
            bail!(
                "kubectl {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The last `lines` lines of every container log of pods whose name starts with `pod_prefix`
    /// in `namespace`, on every node (kubelet's `podLogsDir`; `kubectl logs` cannot reach the
    /// lab's kubelets).
    pub fn container_logs(&self, namespace: &str, pod_prefix: &str, lines: usize) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let Ok(pods) = std::fs::read_dir(node.kubelet.pod_logs()) else {
                continue;
            };
            for pod in pods.flatten() {
                let name = pod.file_name().to_string_lossy().into_owned();
                if !name.starts_with(&format!("{namespace}_{pod_prefix}")) {
                    continue;
                }
                for file in walk(&pod.path()) {
                    let text = std::fs::read_to_string(&file).unwrap_or_default();
                    let all: Vec<&str> = text.lines().collect();
                    let tail = all[all.len().saturating_sub(lines)..].join("\n");
                    out.push_str(&format!("--- {} {}:\n{tail}\n", node.name, file.display()));
                }
            }
        }
        out
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

/// What every node's processes are started from.
struct NodeBins {
    /// containerd, runc and the CNI plugins (`tests/nodes/build.sh`).
    node_bin: PathBuf,
    kubelet_bin: PathBuf,
    /// The cluster CA kubelet trusts.
    ca: PathBuf,
}

/// Starts node `k`'s containerd (importing `images`, once: the content store keeps them) and
/// kubelet, in its namespace and cgroup tree, with its private directory `dir`.
fn boot(
    lab: &Lab,
    k: usize,
    dir: &Path,
    cgroup: &CgroupRoot,
    bins: &NodeBins,
    images: &[PathBuf],
) -> anyhow::Result<(Runtime, Kubelet)> {
    let node = &lab.nodes[k];
    let runtime = Runtime::start(
        &node.netns,
        dir,
        &bins.node_bin,
        &node_subnet(k + 1),
        |pid| cgroup.adopt(pid),
    )?;
    for image in images {
        runtime
            .import(image)
            .with_context(|| format!("importing {} on {}", image.display(), node.name))?;
    }
    let kubelet = Kubelet::start(
        &node.name,
        &node.netns,
        node.ip,
        dir,
        &bins.kubelet_bin,
        lab.node_kubeconfig(),
        &bins.ca,
        &cgroup.path(),
        &runtime.endpoint(),
        |pid| cgroup.adopt(pid),
    )?;
    Ok((runtime, kubelet))
}

/// `Ready=True` in the Node's conditions.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Writes the `default/kubernetes` EndpointSlice: [`API_ENDPOINT`]:[`API_ENDPOINT_PORT`], port
/// name `https` (the Service's), Ready — what the API server's endpoint reconciler writes in a
/// real cluster, where it advertises its own reachable address.
async fn write_kubernetes_endpoints(client: &Client) -> anyhow::Result<()> {
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let slice = EndpointSlice {
        metadata: ObjectMeta {
            name: Some("kubernetes".into()),
            labels: Some(
                [
                    ("kubernetes.io/service-name", "kubernetes"),
                    ("endpointslice.kubernetes.io/managed-by", "ferrolb-lab"),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v.to_owned()))
                .collect(),
            ),
            ..ObjectMeta::default()
        },
        address_type: "IPv4".into(),
        endpoints: Some(vec![Endpoint {
            addresses: vec![IpAddr::V4(API_ENDPOINT).to_string()],
            conditions: Some(EndpointConditions {
                ready: Some(true),
                serving: Some(true),
                terminating: Some(false),
            }),
            ..Endpoint::default()
        }]),
        ports: Some(vec![EndpointPort {
            name: Some("https".into()),
            port: Some(i32::from(API_ENDPOINT_PORT)),
            protocol: Some("TCP".into()),
            ..EndpointPort::default()
        }]),
    };
    slices
        .create(&PostParams::default(), &slice)
        .await
        .context("creating the kubernetes EndpointSlice")?;
    Ok(())
}

impl Drop for RealNodes {
    fn drop(&mut self) {
        for node in &self.nodes {
            node.kubelet.stop(Duration::from_secs(3));
        }
        for node in &self.nodes {
            node.runtime.stop(Duration::from_secs(2));
            node.cgroup.remove();
            let unmounted = host::unmount_under(&node.dir);
            tracing::debug!(node = %node.name, unmounted, "node torn down");
        }
        host::remove_dead_shim_sockets();
        self.control.stop();
        self.proxies.clear();
        self.sysctls.restore();
        remove_container_log_links(self.lab.dir());
    }
}

/// kubelet links every container log into the machine's `/var/log/containers` (a fixed path);
/// removes the links that point into `dir`.
fn remove_container_log_links(dir: &Path) {
    let Ok(entries) = std::fs::read_dir("/var/log/containers") else {
        return;
    };
    for e in entries.flatten() {
        if std::fs::read_link(e.path()).is_ok_and(|target| target.starts_with(dir)) {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_subnets_tile_the_pod_range_without_the_api_endpoint() {
        let range: ipnetwork::Ipv4Network = POD_CIDR.parse().expect("CIDR");
        let mut seen = Vec::new();
        for k in 1..=MAX_NODES {
            let net: ipnetwork::Ipv4Network = node_subnet(k).parse().expect("CIDR");
            assert!(range.contains(net.network()) && range.contains(net.broadcast()));
            assert!(
                seen.iter()
                    .all(|s: &ipnetwork::Ipv4Network| !s.overlaps(net))
            );
            seen.push(net);
        }
        assert!(!range.contains(API_ENDPOINT));
        let lab_pods: ipnetwork::Ipv4Network = super::super::pods::POD_CIDR.parse().expect("CIDR");
        assert!(!range.overlaps(lab_pods));
    }
}
