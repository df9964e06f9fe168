//! The network-namespace lab (DESIGN §6): a bridge ("the LAN") inside its own network namespace,
//! one network namespace per node running a real `ferrolb-speaker`, and client namespaces — all on
//! `192.0.2.0/24`, with a real API server.
//!
//! **Nothing of the lab is in the root namespace.** DESIGN §6 suggests putting the bridge's address
//! `192.0.2.1` in the root namespace so node processes reach the API server there; on machines
//! whose own network is `192.0.2.0/24` (this project's CI machine has `eth0 192.0.2.2/24` with its
//! gateway at `192.0.2.1`) that would shadow the real gateway and could leak lab traffic onto the
//! real network. Instead the bridge lives in a `…-lan` namespace with no address, and each node
//! namespace gets an in-process relay: a listener on the node's own `127.0.0.1:6443`, created
//! inside that namespace, whose connections the test process forwards to the API server's loopback
//! port. Node processes use [`Lab::node_kubeconfig`] (`https://127.0.0.1:6443`).
//!
//! Everything is created by the lab and torn down when the [`Lab`] is dropped (also after a
//! failure): processes are stopped, namespaces deleted (their veths and the bridge go with them).
//! Only one lab runs at a time per test process (they share names and addresses); test binaries
//! run one after another.
//!
//! Nodes are `node-1…node-N` at `192.0.2.11…`, clients at `192.0.2.100…`. The lab creates the
//! Node objects (InternalIP = the namespace's address, `Ready=True`) since there is no kubelet.
//!
//! A **dual-stack** lab ([`Lab::start_dual_stack`], issue #13) also puts the LAN
//! [`LAN_V6`] on every `eth0` (nodes `2001:db8:1a::b…` = `::11…` in decimal, clients
//! `2001:db8:1a::64…` = `::100…`, no DAD), routes the IPv6 Service range on the nodes' `eth0`
//! (the IPv4 one lies in the node subnet), and gives each Node object both InternalIPs, as a
//! dual-stack kubelet reports them.
//!
//! A lab runs either [`Implementation`] on identical nodes ([`Lab::start_implementation`]):
//! ferrolb (the default) or MetalLB, built from its Go module (see [`metallb`], issue #11).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::{Node, NodeAddress, NodeCondition, NodeStatus};
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::cluster::{Supervised, TestCluster, workspace_bin};

pub mod bench;
/// Bonded nodes (VM lab): `bond0` over two slaves, the switch side as ports or a bond.
pub mod bonds;
pub mod case_c03;
pub mod compare;
pub mod compare_controller;
pub mod compare_cpu;
pub mod compare_report;
pub mod compare_steady;
pub mod compare_trial;
pub mod cpu_quota;
pub mod datapath;
pub mod demo;
pub mod failover;
/// Raw ARP frames on one interface with their 802.1Q tags (VM lab).
pub mod frames;
pub mod http_client;
pub mod kube_proxy;
pub mod metallb;
pub mod mld;
pub mod owner_choice;
pub mod pods;
pub mod real_nodes;
mod relay;
pub mod scenario;
pub mod spoof;
pub mod starvation;
pub mod takeover;
pub mod takeover_http;
pub mod topology;
/// 802.1Q VLAN sub-interfaces on nodes and clients (VM lab).
pub mod vlans;

/// Where node processes reach the API server, inside their own namespace (see the module docs).
pub const NODE_API_PORT: u16 = 6443;

/// The IPv6 LAN of a dual-stack lab (documentation range, RFC 3849).
pub const LAN_V6: &str = "2001:db8:1a::/64";

/// Address `host` (the same number as the IPv4 address's last octet) on [`LAN_V6`].
pub fn lan_v6(host: u8) -> Ipv6Addr {
    Ipv6Addr::new(0x2001, 0xdb8, 0x1a, 0, 0, 0, 0, u16::from(host))
}

static LAB_LOCK: LazyLock<Arc<tokio::sync::Mutex<()>>> =
    LazyLock::new(|| Arc::new(tokio::sync::Mutex::new(())));

/// Runs `ip …` (or any command) and fails with its stderr.
///
/// # Errors
/// The command could not start or exited non-zero.
pub fn sh(program: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command inside network namespace `netns`.
///
/// # Errors
/// As [`sh`].
pub fn in_netns(netns: &str, program: &str, args: &[&str]) -> anyhow::Result<String> {
    let mut full = vec!["netns", "exec", netns, program];
    full.extend_from_slice(args);
    sh("ip", &full)
}

/// Which load balancer a lab's speakers (and controller) are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Implementation {
    /// ferrolb's own speaker (`ferrolb-speaker`) and CRDs (`ferrolb.io`).
    Ferrolb,
    /// MetalLB's speaker and controller in layer-2 mode, with its `metallb.io` CRDs
    /// ([`metallb`]).
    MetalLb,
}

impl std::str::FromStr for Implementation {
    type Err = String;

    /// `ferrolb` or `metallb` (any case), as command-line flags spell them.
    fn from_str(s: &str) -> Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "ferrolb" => Ok(Implementation::Ferrolb),
            "metallb" => Ok(Implementation::MetalLb),
            other => Err(format!(
                "unknown implementation {other:?}: expected ferrolb or metallb"
            )),
        }
    }
}

impl Implementation {
    /// `ferrolb` or `MetalLB`, for reports.
    pub fn name(self) -> &'static str {
        match self {
            Implementation::Ferrolb => "ferrolb",
            Implementation::MetalLb => "MetalLB",
        }
    }
}

/// What a MetalLB lab runs besides the speakers.
struct MetalLbRun {
    bins: metallb::Binaries,
    /// The namespace of MetalLB's controller (loopback and the API relay only).
    controller_netns: String,
    controller: Option<Supervised>,
}

/// One node of the lab.
pub struct LabNode {
    /// Node name (`node-1`, …) — also the speaker's `--node-name`.
    pub name: String,
    /// Network namespace name.
    pub netns: String,
    /// Address of `eth0` in the namespace.
    pub ip: Ipv4Addr,
    /// IPv6 address of `eth0` in a dual-stack lab.
    pub ip6: Option<Ipv6Addr>,
    /// MAC address of `eth0` (lowercase, colon-separated).
    pub mac: String,
    speaker: Option<Supervised>,
}

/// A client namespace on the LAN.
pub struct LabClient {
    /// Network namespace name.
    pub netns: String,
    /// Address of `eth0`.
    pub ip: Ipv4Addr,
    /// IPv6 address of `eth0` in a dual-stack lab.
    pub ip6: Option<Ipv6Addr>,
}

/// A running lab. See the module docs.
pub struct Lab {
    id: String,
    /// The namespace holding the bridge `br0`.
    pub lan: String,
    /// The nodes.
    pub nodes: Vec<LabNode>,
    /// The clients.
    pub clients: Vec<LabClient>,
    dir: tempfile::TempDir,
    key_file: PathBuf,
    node_kubeconfig: PathBuf,
    /// The speaker binary [`Lab::start_speaker`] runs; `None` = the workspace's debug build.
    speaker_bin: Option<PathBuf>,
    implementation: Implementation,
    metallb: Option<MetalLbRun>,
    relays: Vec<tokio::task::JoinHandle<()>>,
    // Field order matters for Drop: processes stop (nodes) before the cluster.
    cluster: TestCluster,
    _lock: tokio::sync::OwnedMutexGuard<()>,
}

/// The last `lines` lines of the file at `path` (empty when it cannot be read).
fn file_tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

fn mac_of(netns: &str, ifname: &str) -> anyhow::Result<String> {
    let out = in_netns(netns, "cat", &[&format!("/sys/class/net/{ifname}/address")])?;
    Ok(out.trim().to_owned())
}

impl Lab {
    /// Builds a lab with `nodes` node namespaces and `clients` client namespaces, starts a test
    /// cluster with a relay into every node namespace, and creates the Node objects. Speakers are not started:
    /// call [`Lab::start_speaker`].
    ///
    /// # Errors
    /// Not root, `ip` missing, or the cluster failed to start.
    pub async fn start(nodes: usize, clients: usize) -> anyhow::Result<Lab> {
        Lab::start_with(Implementation::Ferrolb, nodes, clients, false, true).await
    }

    /// Like [`Lab::start`], for either implementation. For MetalLB it also installs MetalLB's
    /// CRDs, namespace and ServiceAccount, and creates a speaker Pod object per node with its
    /// status written as a kubelet would ([`metallb`]); its controller is started by
    /// [`Lab::start_metallb_controller`], its speakers by [`Lab::start_speaker`].
    ///
    /// # Errors
    /// As [`Lab::start`]; for MetalLB also: its binaries are missing or could not be built, or
    /// the API server refused its objects.
    pub async fn start_implementation(
        implementation: Implementation,
        nodes: usize,
        clients: usize,
    ) -> anyhow::Result<Lab> {
        Lab::start_with(implementation, nodes, clients, false, true).await
    }

    /// Like [`Lab::start`], with IPv6 as well: every `eth0` also gets an address on [`LAN_V6`]
    /// and every Node object both InternalIPs (see the module docs).
    ///
    /// # Errors
    /// As [`Lab::start`].
    pub async fn start_dual_stack(nodes: usize, clients: usize) -> anyhow::Result<Lab> {
        Lab::start_with(Implementation::Ferrolb, nodes, clients, true, true).await
    }

    /// `node_objects`: create the Node objects (false when real kubelets register them,
    /// [`real_nodes`]).
    async fn start_with(
        implementation: Implementation,
        nodes: usize,
        clients: usize,
        ipv6: bool,
        node_objects: bool,
    ) -> anyhow::Result<Lab> {
        let bins = match implementation {
            Implementation::Ferrolb => None,
            Implementation::MetalLb => Some(metallb::Binaries::locate()?),
        };
        let lock = LAB_LOCK.clone().lock_owned().await;
        let id = format!("{:04x}", std::process::id() & 0xffff);
        let lan = format!("flb{id}-lan");
        let mut pending = PendingLab {
            netns: vec![lan.clone()],
        };
        let _ = sh("ip", &["netns", "del", &lan]);
        sh("ip", &["netns", "add", &lan])?;
        in_netns(&lan, "ip", &["link", "add", "br0", "type", "bridge"])?;
        // Frames are forwarded at once (no STP learning delay) and multicast is flooded.
        in_netns(
            &lan,
            "ip",
            &[
                "link",
                "set",
                "br0",
                "type",
                "bridge",
                "forward_delay",
                "0",
                "mcast_snooping",
                "0",
            ],
        )?;
        in_netns(&lan, "ip", &["link", "set", "br0", "up"])?;
        let dir = tempfile::Builder::new().prefix("ferrolb-lab-").tempdir()?;
        let mut lab_nodes = Vec::new();
        let mut lab_clients = Vec::new();
        for i in 1..=nodes {
            let netns = format!("flb{id}-n{i}");
            let ip = Ipv4Addr::new(192, 0, 2, 10 + i as u8);
            pending.netns.push(netns.clone());
            attach_netns(&lan, &netns, &format!("n{i}"), ip)?;
            let ip6 = ipv6.then(|| lan_v6(10 + i as u8));
            if let Some(ip6) = ip6 {
                add_v6(&netns, ip6)?;
                // The IPv4 Service range lies inside the node subnet; the IPv6 one needs a route
                // (a real node's default route) or connecting to a ClusterIP from the node fails
                // with "network unreachable" before kube-proxy's OUTPUT DNAT sees the packet.
                in_netns(
                    &netns,
                    "ip",
                    &[
                        "-6",
                        "route",
                        "add",
                        crate::cluster::SERVICE_CIDR_V6,
                        "dev",
                        "eth0",
                    ],
                )?;
            }
            let mac = mac_of(&netns, "eth0")?;
            lab_nodes.push(LabNode {
                name: format!("node-{i}"),
                netns,
                ip,
                ip6,
                mac,
                speaker: None,
            });
        }
        for i in 1..=clients {
            let netns = format!("flb{id}-c{i}");
            let ip = Ipv4Addr::new(192, 0, 2, 99 + i as u8);
            pending.netns.push(netns.clone());
            attach_netns(&lan, &netns, &format!("c{i}"), ip)?;
            let ip6 = ipv6.then(|| lan_v6(99 + i as u8));
            if let Some(ip6) = ip6 {
                add_v6(&netns, ip6)?;
            }
            // Pool addresses are on the LAN: clients reach them on-link, as on a flat L2 network.
            for pool_range in ["198.51.100.0/24", "203.0.113.0/24"] {
                in_netns(&netns, "ip", &["route", "add", pool_range, "dev", "eth0"])?;
            }
            lab_clients.push(LabClient { netns, ip, ip6 });
        }
        let controller_netns = format!("flb{id}-ctl");
        if bins.is_some() {
            pending.netns.push(controller_netns.clone());
            metallb::create_isolated_netns(&controller_netns)?;
        }
        // The `kubernetes` Service's ClusterIP is a SAN too: pods of real nodes reach the API
        // server there (in-cluster configuration).
        let cluster = TestCluster::start_with(crate::cluster::ClusterOptions {
            extra_server_ips: vec![IpAddr::V4(crate::cluster::KUBERNETES_SERVICE_IP)],
            // Real nodes install ferrolb as users do (`kubectl apply -k deploy/`), CRDs included.
            install_crds: node_objects,
            ..crate::cluster::ClusterOptions::default()
        })
        .await?;
        let node_kubeconfig = cluster.kubeconfig_at(
            &format!("https://127.0.0.1:{NODE_API_PORT}"),
            "kubeconfig-node",
        )?;
        let mut relays = Vec::new();
        for node in &lab_nodes {
            relays.push(relay::start(&node.netns, NODE_API_PORT, cluster.port())?);
        }
        if bins.is_some() {
            relays.push(relay::start(
                &controller_netns,
                NODE_API_PORT,
                cluster.port(),
            )?);
        }
        let key_file = dir.path().join("memberlist.key");
        std::fs::write(&key_file, random_hex_key()?)?;
        std::mem::forget(pending); // the Lab owns the teardown from here on
        let lab = Lab {
            id,
            lan,
            nodes: lab_nodes,
            clients: lab_clients,
            dir,
            key_file,
            node_kubeconfig,
            speaker_bin: None,
            implementation,
            metallb: bins.map(|bins| MetalLbRun {
                bins,
                controller_netns,
                controller: None,
            }),
            relays,
            cluster,
            _lock: lock,
        };
        let client = lab.client().await?;
        for node in lab.nodes.iter().filter(|_| node_objects) {
            let mut addresses = vec![IpAddr::V4(node.ip)];
            addresses.extend(node.ip6.map(IpAddr::V6));
            create_node_with_addresses(&client, &node.name, &addresses).await?;
        }
        if let Some(run) = &lab.metallb {
            metallb::install(lab.cluster.kubeconfig(), &client, &run.bins).await?;
            for node in &lab.nodes {
                metallb::ensure_speaker_pod(&client, node).await?;
            }
        }
        Ok(lab)
    }

    /// Which implementation this lab runs.
    pub fn implementation(&self) -> Implementation {
        self.implementation
    }

    /// Starts (or restarts) MetalLB's controller (webhooks and certificate rotation off, in a
    /// namespace of its own; log `metallb-controller.log` in [`Lab::dir`]).
    ///
    /// # Errors
    /// Not a MetalLB lab, or the process could not be started.
    pub fn start_metallb_controller(&mut self) -> anyhow::Result<()> {
        let Some(run) = &self.metallb else {
            bail!(
                "start_metallb_controller in a {} lab",
                self.implementation.name()
            );
        };
        let controller = metallb::start_controller(self, &run.bins, &run.controller_netns)?;
        if let Some(old) = self
            .metallb
            .as_mut()
            .and_then(|r| r.controller.replace(controller))
        {
            old.stop(Duration::from_secs(5));
        }
        Ok(())
    }

    /// Stops MetalLB's controller (SIGTERM, SIGKILL after 5 s) if it runs; nothing otherwise.
    pub fn stop_metallb_controller(&mut self) {
        if let Some(old) = self.metallb.as_mut().and_then(|r| r.controller.take()) {
            old.stop(Duration::from_secs(5));
        }
    }

    /// `Some(status)` once MetalLB's controller has exited by itself; `None` while it runs, or
    /// when none was started (also in a ferrolb lab).
    pub fn metallb_controller_exit(&self) -> Option<std::process::ExitStatus> {
        self.metallb.as_ref()?.controller.as_ref()?.exit_status()
    }

    /// The last `lines` lines of MetalLB's controller log (empty when there is none).
    pub fn metallb_controller_log(&self, lines: usize) -> String {
        file_tail(&self.dir.path().join("metallb-controller.log"), lines)
    }

    /// The pid of MetalLB's controller process (`ip netns exec` runs it in place), if it runs.
    ///
    /// # Errors
    /// Not a MetalLB lab, the controller is not running, or its process was not found.
    pub fn metallb_controller_pid(&self) -> anyhow::Result<u32> {
        let Some(run) = &self.metallb else {
            bail!("no MetalLB in a {} lab", self.implementation.name());
        };
        let launched = run
            .controller
            .as_ref()
            .and_then(Supervised::pid)
            .ok_or_else(|| anyhow::anyhow!("MetalLB's controller is not running"))?;
        bench::process_pid(launched, &run.controller_netns, "controller")
    }

    /// Creates address pool `name` with `addresses` and a layer-2 advertisement of it on every
    /// node, in the lab implementation's own CRDs: ferrolb's `IPAddressPool` + `L2Advertisement`
    /// (`ferrolb.io`), or MetalLB's (`metallb.io`, in [`metallb::NAMESPACE`]).
    ///
    /// # Errors
    /// The API server refused an object.
    pub async fn advertise_pool(&self, name: &str, addresses: &[&str]) -> anyhow::Result<()> {
        let client = self.client().await?;
        match self.implementation {
            Implementation::Ferrolb => {
                crate::objects::create_pool(&client, name, addresses).await?;
                crate::objects::apply_l2(
                    &client,
                    name,
                    ferrolb_crds::L2AdvertisementSpec::default(),
                )
                .await
            }
            Implementation::MetalLb => metallb::advertise_pool(&client, name, addresses).await,
        }
    }

    /// Deletes address pool `name` (not its advertisement) in the lab implementation's own CRDs.
    ///
    /// # Errors
    /// The API server refused the deletion (or the pool does not exist).
    pub async fn delete_pool(&self, name: &str) -> anyhow::Result<()> {
        let client = self.client().await?;
        match self.implementation {
            Implementation::Ferrolb => {
                Api::<ferrolb_crds::IPAddressPool>::all(client)
                    .delete(name, &Default::default())
                    .await?;
                Ok(())
            }
            Implementation::MetalLb => metallb::delete_pool(&client, name).await,
        }
    }

    /// An admin client of the lab's cluster.
    ///
    /// # Errors
    /// The kubeconfig could not be read.
    pub async fn client(&self) -> anyhow::Result<Client> {
        self.cluster.client().await
    }

    /// The lab's cluster.
    pub fn cluster(&self) -> &TestCluster {
        &self.cluster
    }

    /// The lab's state directory (logs).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Kubeconfig for processes inside node namespaces (server `https://127.0.0.1:6443`, relayed).
    pub fn node_kubeconfig(&self) -> &Path {
        &self.node_kubeconfig
    }

    /// The membership key file shared by the lab's speakers.
    pub fn key_file(&self) -> &Path {
        &self.key_file
    }

    /// The node named `name`.
    ///
    /// # Panics
    /// No such node (a test bug).
    pub fn node(&self, name: &str) -> &LabNode {
        self.nodes
            .iter()
            .find(|n| n.name == name)
            .unwrap_or_else(|| panic!("no lab node {name}"))
    }

    fn node_mut(&mut self, name: &str) -> anyhow::Result<&mut LabNode> {
        self.nodes
            .iter_mut()
            .find(|n| n.name == name)
            .with_context(|| format!("no lab node {name}"))
    }

    /// The node owning MAC `mac`, if any.
    pub fn node_by_mac(&self, mac: &str) -> Option<&LabNode> {
        self.nodes.iter().find(|n| n.mac.eq_ignore_ascii_case(mac))
    }

    /// Starts (or restarts) the speaker of node `name` with extra arguments.
    ///
    /// # Errors
    /// The binary could not be built or started.
    pub fn start_speaker(&mut self, name: &str, extra_args: &[&str]) -> anyhow::Result<()> {
        if let Some(old) = self.node_mut(name)?.speaker.take() {
            old.stop(Duration::from_secs(5));
        }
        let speaker = match &self.metallb {
            Some(run) => metallb::start_speaker(self, &run.bins, self.node(name), extra_args)?,
            None => {
                let bin = match &self.speaker_bin {
                    Some(bin) => bin.clone(),
                    None => workspace_bin("ferrolb-speaker")?,
                };
                bench::start_speaker_with(self, &bin, name, extra_args)?
            }
        };
        self.node_mut(name)?.speaker = Some(speaker);
        Ok(())
    }

    /// Starts (or restarts) ferrolb's speaker of node `name` like [`Lab::start_speaker`], but
    /// without the lab's key file: it reads its key ring through the API from the Secret
    /// `--memberlist-secret` in `--namespace` (pass them in `extra_args`), and waits, not ready,
    /// until it exists (issue #27).
    ///
    /// # Errors
    /// The binary could not be built or started.
    pub fn start_speaker_key_from_secret(
        &mut self,
        name: &str,
        extra_args: &[&str],
    ) -> anyhow::Result<()> {
        if let Some(old) = self.node_mut(name)?.speaker.take() {
            old.stop(Duration::from_secs(5));
        }
        let bin = match &self.speaker_bin {
            Some(bin) => bin.clone(),
            None => workspace_bin("ferrolb-speaker")?,
        };
        let speaker = bench::start_speaker_key_from_secret(self, &bin, name, extra_args)?;
        self.node_mut(name)?.speaker = Some(speaker);
        Ok(())
    }

    /// Makes [`Lab::start_speaker`] run `bin` (e.g. a release build for benchmarks) instead of
    /// the workspace's debug build.
    pub fn set_speaker_bin(&mut self, bin: PathBuf) {
        self.speaker_bin = Some(bin);
    }

    /// Starts every node's speaker, ferrolb's with `ferrolb_args` (MetalLB's with none: it is
    /// configured through its environment); returns the node names in order.
    ///
    /// # Errors
    /// As [`Lab::start_speaker`].
    pub fn start_every_speaker(&mut self, ferrolb_args: &[String]) -> anyhow::Result<Vec<String>> {
        let args: Vec<&str> = match self.implementation {
            Implementation::Ferrolb => ferrolb_args.iter().map(String::as_str).collect(),
            Implementation::MetalLb => Vec::new(),
        };
        let names: Vec<String> = self.nodes.iter().map(|n| n.name.clone()).collect();
        for name in &names {
            self.start_speaker(name, &args)?;
        }
        Ok(names)
    }

    /// Sends `signal` (`"KILL"`, `"TERM"`) to node `name`'s speaker and forgets it.
    ///
    /// # Errors
    /// The node has no running speaker.
    pub fn signal_speaker(&mut self, name: &str, signal: &str) -> anyhow::Result<()> {
        let node = self.node_mut(name)?;
        let speaker = node
            .speaker
            .take()
            .with_context(|| format!("{name} has no speaker"))?;
        speaker.signal(signal);
        // Reap it (the signal above ends it; stop() only waits).
        speaker.stop(Duration::from_secs(5));
        Ok(())
    }

    /// `Some(status)` once node `name`'s speaker has exited by itself.
    pub fn speaker_exit(&self, name: &str) -> Option<std::process::ExitStatus> {
        self.node(name).speaker.as_ref()?.exit_status()
    }

    /// The process id of node `name`'s running speaker (after `ip netns exec` has exec'd it).
    ///
    /// # Errors
    /// The node has no speaker, or its process cannot be found.
    pub fn speaker_pid(&self, name: &str) -> anyhow::Result<u32> {
        let node = self.node(name);
        let launched = node
            .speaker
            .as_ref()
            .and_then(|s| s.pid())
            .with_context(|| format!("{name} has no speaker"))?;
        let comm = match self.implementation {
            Implementation::Ferrolb => bench::SPEAKER_COMM,
            Implementation::MetalLb => metallb::SPEAKER_COMM,
        };
        bench::process_pid(launched, &node.netns, comm)
    }

    /// Stops node `name`'s speaker with SIGSTOP for `pause`, then resumes it with SIGCONT: a
    /// stall, not a crash (issue #8 F4). Runs on a blocking thread, so probes on the test's
    /// runtime go on meanwhile.
    ///
    /// # Errors
    /// The process cannot be found or signalled.
    pub async fn pause_speaker(&self, name: &str, pause: Duration) -> anyhow::Result<()> {
        let pid = self.speaker_pid(name)?;
        tokio::task::spawn_blocking(move || pause_process(pid, pause)).await?
    }

    /// Confines node `name`'s speaker to `percent` % of one CPU (cgroup v1 CFS quota, 100 ms
    /// period), sharing the group with a busy loop when `hog`: a speaker at its Pod's CPU limit
    /// (issue #8 F4). Undone when the returned guard is dropped.
    ///
    /// # Errors
    /// The speaker cannot be found, or the cgroup cannot be set up (see [`cpu_quota::CpuQuota`]).
    pub fn starve_speaker(
        &self,
        name: &str,
        percent: u32,
        hog: bool,
    ) -> anyhow::Result<cpu_quota::CpuQuota> {
        let pid = self.speaker_pid(name)?;
        cpu_quota::CpuQuota::confine(&format!("{}-{name}", self.id), pid, percent, hog)
    }

    /// Gives node `name`'s speaker `cpu.shares` = `shares` and no quota, with `hog` next to busy
    /// loops on every CPU ([`cpu_quota::CpuQuota::share`]); undone when the result is dropped.
    ///
    /// # Errors
    /// No speaker is running on the node, or the cgroup could not be set up.
    pub fn share_speaker(
        &self,
        name: &str,
        shares: u32,
        hog: bool,
    ) -> anyhow::Result<cpu_quota::CpuQuota> {
        let pid = self.speaker_pid(name)?;
        cpu_quota::CpuQuota::share(&format!("{}-{name}", self.id), pid, shares, hog)
    }

    /// Blocks (`block = true`) or restores the membership port `port` (UDP, both directions) in
    /// node `name`'s namespace with nftables, for the packets exchanged with `peers` (node
    /// names; empty = every peer). A partition on the membership only: ARP and the API relay
    /// keep working (issue #8 F3).
    ///
    /// # Errors
    /// `nft` failed.
    pub fn partition_membership(
        &self,
        name: &str,
        peers: &[&str],
        port: u16,
        block: bool,
    ) -> anyhow::Result<()> {
        let netns = self.node(name).netns.clone();
        let _ = in_netns(
            &netns,
            "nft",
            &["delete", "table", "inet", "ferrolb_lab_partition"],
        );
        if !block {
            return Ok(());
        }
        let addrs: Vec<String> = peers.iter().map(|p| self.node(p).ip.to_string()).collect();
        let (from, to) = if addrs.is_empty() {
            (String::new(), String::new())
        } else {
            let set = format!("{{ {} }}", addrs.join(", "));
            (format!("ip saddr {set} "), format!("ip daddr {set} "))
        };
        let script = format!(
            "table inet ferrolb_lab_partition {{\n\
             chain input {{ type filter hook input priority -10; {from}udp dport {port} drop; {from}udp sport {port} drop; }}\n\
             chain output {{ type filter hook output priority -10; {to}udp dport {port} drop; {to}udp sport {port} drop; }}\n\
             }}\n"
        );
        let file = self.dir.path().join(format!("partition-{name}.nft"));
        std::fs::write(&file, script)?;
        in_netns(&netns, "nft", &["-f", &file.to_string_lossy()])?;
        Ok(())
    }

    /// The last lines of node `name`'s speaker log.
    pub fn speaker_log(&self, name: &str, lines: usize) -> String {
        file_tail(&self.dir.path().join(format!("speaker-{name}.log")), lines)
    }

    /// Runs a command in node `name`'s namespace.
    ///
    /// # Errors
    /// As [`in_netns`].
    pub fn exec(&self, netns: &str, program: &str, args: &[&str]) -> anyhow::Result<String> {
        in_netns(netns, program, args)
    }

    /// A unique-per-lab prefix for names (e.g. extra interfaces).
    pub fn id(&self) -> &str {
        &self.id
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            if let Some(s) = node.speaker.take() {
                s.stop(Duration::from_secs(3));
            }
        }
        let mut extra_netns = Vec::new();
        if let Some(run) = &mut self.metallb {
            if let Some(c) = run.controller.take() {
                c.stop(Duration::from_secs(3));
            }
            extra_netns.push(run.controller_netns.clone());
        }
        let netns: Vec<String> = self
            .nodes
            .iter()
            .map(|n| n.netns.clone())
            .chain(self.clients.iter().map(|c| c.netns.clone()))
            .chain([self.lan.clone()])
            .chain(extra_netns)
            .collect();
        for relay in &self.relays {
            relay.abort();
        }
        teardown(&netns);
        if std::env::var_os("FERROLB_KEEP_LAB_LOGS").is_some() {
            let dir = std::mem::replace(
                &mut self.dir,
                tempfile::TempDir::new().unwrap_or_else(|_| unreachable_dir()),
            );
            eprintln!("lab logs kept in {}", dir.keep().display());
        }
    }
}

fn unreachable_dir() -> tempfile::TempDir {
    // Only reached if /tmp is not writable, in which case nothing can be kept anyway.
    std::process::abort()
}

/// Tears down a half-built lab when [`Lab::start`] fails.
struct PendingLab {
    netns: Vec<String>,
}

impl Drop for PendingLab {
    fn drop(&mut self) {
        teardown(&self.netns);
    }
}

fn teardown(netns: &[String]) {
    for ns in netns {
        // Kill anything left in the namespace, then delete it (its veth end goes with it).
        if let Ok(pids) = sh("ip", &["netns", "pids", ns]) {
            for pid in pids.split_whitespace() {
                let _ = sh("kill", &["-KILL", pid]);
            }
        }
        let _ = sh("ip", &["netns", "del", ns]);
    }
}

/// Creates namespace `netns` with `eth0` (`ip`/24) on a veth whose other end `port` is a port of
/// `br0` in namespace `lan`, plus `lo` up. Nothing is created in the root namespace.
fn attach_netns(lan: &str, netns: &str, port: &str, ip: Ipv4Addr) -> anyhow::Result<()> {
    let _ = sh("ip", &["netns", "del", netns]);
    sh("ip", &["netns", "add", netns])?;
    sh(
        "ip",
        &[
            "link", "add", "name", port, "netns", lan, "type", "veth", "peer", "name", "eth0",
            "netns", netns,
        ],
    )?;
    in_netns(lan, "ip", &["link", "set", port, "master", "br0", "up"])?;
    in_netns(
        netns,
        "ip",
        &["addr", "add", &format!("{ip}/24"), "dev", "eth0"],
    )?;
    in_netns(netns, "ip", &["link", "set", "eth0", "up"])?;
    in_netns(netns, "ip", &["link", "set", "lo", "up"])?;
    Ok(())
}

/// Adds `ip`/64 to `eth0` of `netns` without duplicate address detection (the lab's addresses are
/// unique by construction; DAD would only delay the first packets by a second).
fn add_v6(netns: &str, ip: Ipv6Addr) -> anyhow::Result<()> {
    in_netns(
        netns,
        "ip",
        &["addr", "add", &format!("{ip}/64"), "dev", "eth0", "nodad"],
    )?;
    Ok(())
}

fn random_hex_key() -> anyhow::Result<String> {
    use std::io::Read;
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect::<String>() + "\n")
}

/// Creates Node `name` with InternalIP `ip` and `Ready=True` (the lab has no kubelet).
///
/// # Errors
/// The API server refused it.
pub async fn create_node(client: &Client, name: &str, ip: Ipv4Addr) -> anyhow::Result<()> {
    create_node_with_addresses(client, name, &[IpAddr::V4(ip)]).await
}

/// Creates Node `name` with one InternalIP per entry of `addresses` (a dual-stack node lists one
/// per family, primary first) and `Ready=True`.
///
/// # Errors
/// The API server refused it.
pub async fn create_node_with_addresses(
    client: &Client,
    name: &str,
    addresses: &[IpAddr],
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &node).await?;
    write_node_status(client, name, addresses, "True", false).await
}

/// Writes Node `name`'s status: InternalIP `ip`, `Ready=True`, and `NetworkUnavailable` as given.
///
/// # Errors
/// The API server refused the patch.
pub async fn set_node_status(
    client: &Client,
    name: &str,
    ip: Ipv4Addr,
    network_unavailable: bool,
) -> anyhow::Result<()> {
    set_node_conditions(client, name, ip, "True", network_unavailable).await
}

/// Writes Node `name`'s status as the kubelet and node controller would: InternalIP `ip`,
/// `Ready` = `ready` (`"True"`, `"False"`, `"Unknown"`), `NetworkUnavailable` as given.
///
/// # Errors
/// The API server refused the patch.
pub async fn set_node_conditions(
    client: &Client,
    name: &str,
    ip: Ipv4Addr,
    ready: &str,
    network_unavailable: bool,
) -> anyhow::Result<()> {
    write_node_status(client, name, &[IpAddr::V4(ip)], ready, network_unavailable).await
}

/// [`set_node_conditions`] with any InternalIPs.
async fn write_node_status(
    client: &Client,
    name: &str,
    addresses: &[IpAddr],
    ready: &str,
    network_unavailable: bool,
) -> anyhow::Result<()> {
    let api: Api<Node> = Api::all(client.clone());
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let cond = |type_: &str, status: &str| NodeCondition {
        type_: type_.into(),
        status: status.into(),
        last_transition_time: Some(now.clone()),
        reason: Some("FerrolbLab".into()),
        ..Default::default()
    };
    let status = NodeStatus {
        addresses: Some(
            addresses
                .iter()
                .map(|ip| NodeAddress {
                    type_: "InternalIP".into(),
                    address: ip.to_string(),
                })
                .collect(),
        ),
        conditions: Some(vec![
            cond("Ready", ready),
            cond(
                "NetworkUnavailable",
                if network_unavailable { "True" } else { "False" },
            ),
        ]),
        ..Default::default()
    };
    // A JSON merge patch replaces both lists whole. Server-side apply cannot write a
    // dual-stack Node's addresses: the list is keyed by `type`, and two InternalIPs are
    // "duplicate entries" to it (as the kubelet, we use a plain patch).
    let patch = serde_json::json!({ "status": status });
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// SIGSTOP `pid`, sleep `pause`, SIGCONT it.
///
/// # Errors
/// The process cannot be signalled.
pub fn pause_process(pid: u32, pause: Duration) -> anyhow::Result<()> {
    use nix::sys::signal::{Signal, kill};
    let pid = nix::unistd::Pid::from_raw(i32::try_from(pid)?);
    kill(pid, Signal::SIGSTOP)?;
    std::thread::sleep(pause);
    kill(pid, Signal::SIGCONT)?;
    Ok(())
}

/// Runs `f` on a fresh thread that has entered network namespace `netns` (only that thread moves;
/// the test process stays where it is), and returns its result.
///
/// # Errors
/// The namespace cannot be entered, or `f` failed.
pub fn within_netns<T: Send + 'static>(
    netns: &str,
    f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
) -> anyhow::Result<T> {
    use std::os::fd::AsFd;
    let path = format!("/var/run/netns/{netns}");
    std::thread::spawn(move || {
        let file = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
        nix::sched::setns(file.as_fd(), nix::sched::CloneFlags::CLONE_NEWNET).context("setns")?;
        f()
    })
    .join()
    .map_err(|_| anyhow::anyhow!("thread in {netns} panicked"))?
}

/// What a client saw on the LAN (ARP replies, gratuitous ARP, Neighbor Advertisements).
pub use ferrolb_speaker::l2::capture::Seen;

impl Lab {
    /// From client `client` (index), broadcasts an ARP request for `ip` and records every frame
    /// seen on `eth0` for `listen` (replies from any number of MACs, plus gratuitous ARP).
    ///
    /// # Errors
    /// The client sockets could not be opened.
    pub async fn arp_probe(
        &self,
        client: usize,
        ip: Ipv4Addr,
        listen: Duration,
    ) -> anyhow::Result<Vec<Seen>> {
        let netns = self.clients[client].netns.clone();
        tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || {
                let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
                c.drain();
                c.send_arp_request(ip, None)?;
                Ok(c.listen(listen, |_| false)?)
            })
        })
        .await?
    }

    /// The distinct MACs that answered an ARP request for `ip` from client `client`.
    ///
    /// # Errors
    /// As [`Lab::arp_probe`].
    pub async fn arp_answers(
        &self,
        client: usize,
        ip: Ipv4Addr,
    ) -> anyhow::Result<std::collections::BTreeSet<String>> {
        let seen = self
            .arp_probe(client, ip, Duration::from_millis(300))
            .await?;
        Ok(seen
            .iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == IpAddr::V4(ip))
            .map(|s| s.mac().to_owned())
            .collect())
    }

    /// Records every frame client `client` sees for `duration` without sending anything.
    ///
    /// # Errors
    /// The client sockets could not be opened.
    pub async fn capture(&self, client: usize, duration: Duration) -> anyhow::Result<Vec<Seen>> {
        let netns = self.clients[client].netns.clone();
        tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || {
                let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
                Ok(c.listen(duration, |_| false)?)
            })
        })
        .await?
    }

    /// Starts recording every frame client `client` sees for `duration` in the background and
    /// returns at once; await the handle for the frames. Give the socket a moment (≈ 200 ms) to
    /// open before sending what it should see.
    pub fn start_capture(
        &self,
        client: usize,
        duration: Duration,
    ) -> tokio::task::JoinHandle<anyhow::Result<Vec<Seen>>> {
        let netns = self.clients[client].netns.clone();
        tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || {
                let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
                Ok(c.listen(duration, |_| false)?)
            })
        })
    }

    /// Polls (every [`crate::poll::INTERVAL`], at most `timeout`) until exactly one MAC answers
    /// ARP for `ip` from client `client`; returns the node it belongs to, or `None` when the
    /// answers never came down to one within `timeout`.
    ///
    /// # Errors
    /// Probing failed, or the one MAC answering is no lab node's.
    pub async fn wait_for_sole_answerer(
        &self,
        client: usize,
        ip: Ipv4Addr,
        timeout: Duration,
    ) -> anyhow::Result<Option<String>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let answers = self.arp_answers(client, ip).await?;
            if let [mac] = answers.iter().collect::<Vec<_>>()[..] {
                let node = self
                    .node_by_mac(mac)
                    .with_context(|| format!("{mac} answers for {ip}, no node's MAC"))?;
                return Ok(Some(node.name.clone()));
            }
            if tokio::time::Instant::now() >= deadline {
                return Ok(None);
            }
            tokio::time::sleep(crate::poll::INTERVAL).await;
        }
    }

    /// Polls until exactly one MAC answers ARP for `ip` and it is node `want`'s (or, with `want`
    /// `None`, until nobody answers), for at most `timeout`. Returns the last answer set, also on
    /// timeout: callers check it.
    ///
    /// # Errors
    /// Probing failed.
    pub async fn wait_for_owner(
        &self,
        client: usize,
        ip: Ipv4Addr,
        want: Option<&str>,
        timeout: Duration,
    ) -> anyhow::Result<std::collections::BTreeSet<String>> {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let answers = self.arp_answers(client, ip).await?;
            let ok = match want {
                Some(name) => answers.len() == 1 && answers.contains(&self.node(name).mac),
                None => answers.is_empty(),
            };
            if ok || tokio::time::Instant::now() >= deadline {
                return Ok(answers);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

impl Lab {
    /// From client `client`, sends a Neighbor Solicitation for `target` — to the solicited-node
    /// group, or unicast to `unicast_to` (a MAC) — from `source` (default: the client's
    /// link-local), and records what comes back for `listen`.
    ///
    /// # Errors
    /// The client sockets could not be opened or the frame not sent.
    pub async fn ndp_probe(
        &self,
        client: usize,
        target: std::net::Ipv6Addr,
        unicast_to: Option<&str>,
        source: Option<std::net::Ipv6Addr>,
        listen: Duration,
    ) -> anyhow::Result<Vec<Seen>> {
        let netns = self.clients[client].netns.clone();
        let unicast_to = match unicast_to {
            Some(mac) => Some(
                mac.parse::<ferrolb_speaker::wire::MacAddr>()
                    .map_err(|e| anyhow::anyhow!("bad MAC {mac}: {e:?}"))?,
            ),
            None => None,
        };
        tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || {
                let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
                c.drain();
                c.send_neighbor_solicitation(target, unicast_to, source)?;
                Ok(c.listen(listen, |_| false)?)
            })
        })
        .await?
    }

    /// Sets a label on Node `node` (`None` removes it).
    ///
    /// # Errors
    /// The API server refused the patch.
    pub async fn label_node(
        &self,
        node: &str,
        key: &str,
        value: Option<&str>,
    ) -> anyhow::Result<()> {
        let api: Api<Node> = Api::all(self.client().await?);
        let patch = serde_json::json!({ "metadata": { "labels": { key: value } } });
        api.patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(())
    }

    /// Sets interface `ifname` of node `node` up or down (carrier loss as seen by the speaker).
    ///
    /// # Errors
    /// `ip link` failed.
    pub fn set_link(&self, node: &str, ifname: &str, up: bool) -> anyhow::Result<()> {
        in_netns(
            &self.node(node).netns,
            "ip",
            &["link", "set", ifname, if up { "up" } else { "down" }],
        )?;
        Ok(())
    }

    /// Adds `addr` (with prefix, e.g. `2001:db8:0:8::1/64`) to `eth0` of namespace `netns`
    /// without duplicate address detection.
    ///
    /// # Errors
    /// `ip addr` failed.
    pub fn add_address(&self, netns: &str, addr: &str) -> anyhow::Result<()> {
        in_netns(netns, "ip", &["addr", "add", addr, "dev", "eth0", "nodad"])?;
        Ok(())
    }
}

impl Lab {
    /// The network namespace of client `k` (its index in [`Lab::clients`]).
    ///
    /// # Errors
    /// There is no client `k`.
    pub fn client_netns(&self, k: usize) -> anyhow::Result<String> {
        Ok(self
            .clients
            .get(k)
            .with_context(|| format!("no client {k}"))?
            .netns
            .clone())
    }

    /// Adds a point-to-point link from node `node` (interface `node_if`, optional address with
    /// prefix) to a new client namespace (its `eth0`, optional address). Returns the client's
    /// index for [`Lab::arp_probe`] and friends. IPv6 addresses are added without DAD.
    ///
    /// # Errors
    /// `ip` failed.
    pub fn add_client_link(
        &mut self,
        node: &str,
        node_if: &str,
        node_addr: Option<&str>,
        client_addr: Option<&str>,
    ) -> anyhow::Result<usize> {
        let index = self.clients.len();
        let netns = format!("flb{}-x{index}", self.id);
        let node_ns = self.node(node).netns.clone();
        let _ = sh("ip", &["netns", "del", &netns]);
        sh("ip", &["netns", "add", &netns])?;
        self.clients.push(LabClient {
            netns: netns.clone(),
            ip: Ipv4Addr::UNSPECIFIED,
            ip6: None,
        });
        sh(
            "ip",
            &[
                "link", "add", "name", node_if, "netns", &node_ns, "type", "veth", "peer", "name",
                "eth0", "netns", &netns,
            ],
        )?;
        for (ns, ifname, addr) in [
            (&node_ns, node_if, node_addr),
            (&netns, "eth0", client_addr),
        ] {
            if let Some(addr) = addr {
                let mut args = vec!["addr", "add", addr, "dev", ifname];
                if addr.contains(':') {
                    args.push("nodad");
                }
                in_netns(ns, "ip", &args)?;
            }
            in_netns(ns, "ip", &["link", "set", ifname, "up"])?;
        }
        in_netns(&netns, "ip", &["link", "set", "lo", "up"])?;
        if let Some(ip) = client_addr
            .and_then(|a| a.split('/').next())
            .and_then(|a| a.parse().ok())
        {
            self.clients[index].ip = ip;
        }
        // Any pool address is on-link from every client.
        for pool_range in ["198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24"] {
            let _ = in_netns(&netns, "ip", &["route", "add", pool_range, "dev", "eth0"]);
        }
        Ok(index)
    }
}

impl Lab {
    /// `GET path` from the speaker's HTTP endpoint (`127.0.0.1:7473` inside node `node`'s
    /// namespace). Returns `(status code, body)`.
    ///
    /// # Errors
    /// The connection failed or the response was not HTTP.
    pub async fn speaker_http(&self, node: &str, path: &str) -> anyhow::Result<(u16, String)> {
        use std::io::{Read, Write};
        let netns = self.node(node).netns.clone();
        let path = path.to_owned();
        tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", 7473))?;
                s.set_read_timeout(Some(Duration::from_secs(5)))?;
                write!(
                    s,
                    "GET {path} HTTP/1.1\r\nHost: speaker\r\nConnection: close\r\n\r\n"
                )?;
                let mut raw = String::new();
                s.read_to_string(&mut raw)?;
                let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((raw.as_str(), ""));
                let code = head
                    .split_whitespace()
                    .nth(1)
                    .and_then(|c| c.parse().ok())
                    .with_context(|| format!("not an HTTP response: {head}"))?;
                Ok((code, body.to_owned()))
            })
        })
        .await?
    }
}
