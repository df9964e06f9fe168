//! A real kube-proxy inside a lab node namespace (DESIGN §6), built from
//! `k8s.io/kubernetes/cmd/kube-proxy` by `tests/cluster/build.sh`, in **nftables**, **iptables**
//! or **IPVS** mode ([`ProxyMode`], issues #13 and #30). IPVS mode needs the kernel's `ip_vs`
//! modules, which this machine's kernel does not have: there [`ipvs_unavailable`] says why, the
//! lab refuses the mode with that reason and the datapath tests say they skip it; the VM lab's
//! guest kernel has them (`ferrolb_tests::vm`, `tests/tests/vm_ipvs.rs`).
//!
//! It reaches the API server through the node's relay ([`Lab::node_kubeconfig`]), names itself
//! after the Node object (`--hostname-override`), treats the node's LAN address as its primary IP
//! (`--bind-address`, NodePorts only on the node's LAN addresses), and binds its metrics and
//! healthz servers to the namespace's own loopback. In a dual-stack lab
//! ([`Lab::start_dual_stack`]) it runs both families: the Node object carries both InternalIPs,
//! and `--cluster-cidr`/`--nodeport-addresses` name both. `--conntrack-max-per-core=0` leaves
//! `nf_conntrack_max` alone: that sysctl is global and read-only outside the initial network
//! namespace. The per-namespace TCP conntrack timeouts it does set are writable by root inside
//! the namespace.
//!
//! nftables mode drives the `nft` command (Debian package `nftables`); iptables mode drives
//! `iptables-restore`/`ip6tables-restore` (Debian package `iptables`, either backend); IPVS mode
//! programs IPVS over netlink and drives `ipset` (Debian package `ipset`) and `iptables-restore`
//! for its masquerade and filter rules. The lab reads IPVS state with `ipvsadm` (package
//! `ipvsadm`). In IPVS mode kube-proxy puts every Service IP, LoadBalancer IPs included, on the
//! `kube-ipvs0` dummy interface of the node ([`IPVS_DEVICE`]).

use std::collections::BTreeSet;
use std::fmt;
use std::net::IpAddr;
use std::process::Command;
use std::str::FromStr;
use std::time::Duration;

use anyhow::{Context, bail};

use super::pods::{POD_CIDR, POD_CIDR_V6};
use super::{Lab, in_netns};
use crate::cluster::{Supervised, k8s_bin};

/// kube-proxy's metrics address inside a node namespace.
pub const METRICS_ADDRESS: &str = "127.0.0.1:10249";
/// kube-proxy's healthz address inside a node namespace.
pub const HEALTHZ_ADDRESS: &str = "127.0.0.1:10256";
/// The nftables table kube-proxy owns (in family `ip` for IPv4, `ip6` for IPv6).
pub const TABLE: &str = "kube-proxy";

/// The dummy interface kube-proxy's IPVS mode puts every Service IP on.
pub const IPVS_DEVICE: &str = "kube-ipvs0";

/// kube-proxy's `--proxy-mode`. IPVS only where the kernel has it: see [`ipvs_unavailable`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ProxyMode {
    /// `iptables`: the default of kubeadm, minikube and kind (KUBE-SERVICES → KUBE-EXT/KUBE-FW →
    /// KUBE-SVC → KUBE-SEP chains in the `nat` table).
    Iptables,
    /// `nftables`: one `kube-proxy` table per family with Service-IP verdict maps.
    Nftables,
    /// `ipvs`: one IPVS virtual server per Service IP and port, its endpoints as real servers
    /// (NAT forwarding), every Service IP on [`IPVS_DEVICE`]; `strict_arp` is
    /// `--ipvs-strict-arp` (`KubeProxyConfiguration.ipvs.strictARP`): kube-proxy then sets
    /// `net.ipv4.conf.all.arp_ignore=1` and `arp_announce=2`, so the node's kernel no longer
    /// answers ARP on `eth0` for the addresses of `kube-ipvs0`.
    Ipvs {
        /// `--ipvs-strict-arp`.
        strict_arp: bool,
    },
}

impl ProxyMode {
    /// The modes every kernel of these machines runs, in the order the tests run them (IPVS
    /// needs the VM lab's kernel: [`ipvs_unavailable`]).
    pub const ALL: [ProxyMode; 2] = [ProxyMode::Iptables, ProxyMode::Nftables];

    /// The `--proxy-mode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            ProxyMode::Iptables => "iptables",
            ProxyMode::Nftables => "nftables",
            ProxyMode::Ipvs { .. } => "ipvs",
        }
    }
}

impl fmt::Display for ProxyMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProxyMode::Ipvs { strict_arp: true } => f.write_str("ipvs, strictARP"),
            ProxyMode::Ipvs { strict_arp: false } => f.write_str("ipvs, no strictARP"),
            _ => f.write_str(self.as_str()),
        }
    }
}

impl FromStr for ProxyMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "iptables" => Ok(ProxyMode::Iptables),
            "nftables" => Ok(ProxyMode::Nftables),
            // With strictARP, as docs/install.md requires of IPVS users.
            "ipvs" => match ipvs_unavailable() {
                None => Ok(ProxyMode::Ipvs { strict_arp: true }),
                Some(why) => Err(format!(
                    "ipvs mode cannot run here: {why} (it runs in the VM lab: tests/tests/vm_ipvs.rs)"
                )),
            },
            other => Err(format!(
                "unknown proxy mode {other:?} (iptables, nftables or ipvs)"
            )),
        }
    }
}

/// Why kube-proxy's IPVS mode cannot run on this machine, `None` when it can. IPVS needs the
/// `ip_vs` kernel modules (`CONFIG_IP_VS`), visible as `/proc/net/ip_vs` once loaded; when it is
/// missing, `modprobe ip_vs` is tried first (the VM lab's kernel loads it on demand; on this
/// machine's kernel the module does not exist and the reason is returned).
pub fn ipvs_unavailable() -> Option<String> {
    let present = || std::path::Path::new("/proc/net/ip_vs").exists();
    if !present() {
        let _ = Command::new("modprobe")
            .arg("ip_vs")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
    (!present()).then(|| {
        "the kernel has no IPVS (/proc/net/ip_vs is missing and `modprobe ip_vs` did not load \
         it: CONFIG_IP_VS off)"
            .to_owned()
    })
}

/// One running kube-proxy. Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct KubeProxy {
    /// The node it serves.
    pub node: String,
    /// The node's network namespace.
    pub netns: String,
    /// Its mode.
    pub mode: ProxyMode,
    process: Supervised,
}

impl Lab {
    /// Starts kube-proxy in `mode` in node `name`'s namespace, logging to
    /// `kube-proxy-<name>.log` in the lab directory. Dual-stack when the lab is.
    ///
    /// # Errors
    /// No such node, the mode's command (`nft`, `iptables-restore`) is not installed, the binary
    /// could not be built, or it did not start.
    pub fn start_kube_proxy(&self, name: &str, mode: ProxyMode) -> anyhow::Result<KubeProxy> {
        self.start_kube_proxy_for(name, mode, POD_CIDR, POD_CIDR_V6)
    }

    /// Like [`Lab::start_kube_proxy`], for pods addressed from `pod_cidr` (and `pod_cidr_v6` in a
    /// dual-stack lab) — the real-node lab's CNI ranges ([`super::real_nodes`]).
    ///
    /// # Errors
    /// As [`Lab::start_kube_proxy`].
    pub fn start_kube_proxy_for(
        &self,
        name: &str,
        mode: ProxyMode,
        pod_cidr: &str,
        pod_cidr_v6: &str,
    ) -> anyhow::Result<KubeProxy> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .with_context(|| format!("no lab node {name}"))?;
        let tools: &[(&str, &str)] = match mode {
            ProxyMode::Nftables => &[("nft", "nftables")],
            ProxyMode::Iptables => &[("iptables-restore", "iptables")],
            ProxyMode::Ipvs { .. } => {
                if let Some(why) = ipvs_unavailable() {
                    bail!("kube-proxy in ipvs mode cannot run here: {why}");
                }
                &[
                    ("iptables-restore", "iptables"),
                    ("ipset", "ipset"),
                    ("ipvsadm", "ipvsadm"),
                ]
            }
        };
        for (tool, package) in tools {
            if Command::new(tool).arg("--version").output().is_err() {
                bail!(
                    "kube-proxy in {mode} mode needs the `{tool}` command: apt-get install {package}"
                );
            }
        }
        let bin = k8s_bin("kube-proxy")?;
        let log = self.dir().join(format!("kube-proxy-{name}.log"));
        let (cluster_cidr, nodeport_addresses) = match node.ip6 {
            Some(ip6) => (
                format!("{pod_cidr},{pod_cidr_v6}"),
                format!("{}/32,{ip6}/128", node.ip),
            ),
            None => (pod_cidr.to_owned(), format!("{}/32", node.ip)),
        };
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &node.netns])
            .arg(&bin)
            .arg("--kubeconfig")
            .arg(self.node_kubeconfig())
            .args(["--proxy-mode", mode.as_str()])
            .args(["--hostname-override", &node.name])
            .args(["--bind-address", &node.ip.to_string()])
            .args(["--nodeport-addresses", &nodeport_addresses])
            .args(["--cluster-cidr", &cluster_cidr])
            .args(["--metrics-bind-address", METRICS_ADDRESS])
            .args(["--healthz-bind-address", HEALTHZ_ADDRESS])
            .args(["--conntrack-max-per-core", "0"])
            .args(["--oom-score-adj", "0"])
            .args(["--v", "2"]);
        if let ProxyMode::Ipvs { strict_arp } = mode {
            cmd.arg(format!("--ipvs-strict-arp={strict_arp}"));
        }
        let process = Supervised::spawn_command(
            &format!("kube-proxy ({mode}) {name}"),
            &mut cmd,
            &log,
            false,
        )?;
        Ok(KubeProxy {
            node: node.name.clone(),
            netns: node.netns.clone(),
            mode,
            process,
        })
    }
}

impl KubeProxy {
    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Stops it (SIGTERM, SIGKILL after 2 s); its rules stay in the namespace.
    pub fn stop(&self) {
        self.process.stop(std::time::Duration::from_secs(2));
    }

    /// Its rules as text: `nft list ruleset`, `iptables-save -t nat` followed by
    /// `ip6tables-save -t nat`, or the IPVS table (`ipvsadm -Ln`), in the node's namespace.
    ///
    /// # Errors
    /// The command failed.
    pub fn ruleset(&self) -> anyhow::Result<String> {
        match self.mode {
            ProxyMode::Nftables => in_netns(&self.netns, "nft", &["list", "ruleset"]),
            ProxyMode::Iptables => Ok(format!(
                "{}{}",
                in_netns(&self.netns, "iptables-save", &["-t", "nat"])?,
                in_netns(&self.netns, "ip6tables-save", &["-t", "nat"])?
            )),
            ProxyMode::Ipvs { .. } => in_netns(&self.netns, "ipvsadm", &["-Ln"]),
        }
    }

    /// The addresses on [`IPVS_DEVICE`] in the node's namespace (empty when there is no such
    /// interface: another mode, or kube-proxy has not created it yet).
    ///
    /// # Errors
    /// `ip` failed for another reason than a missing device.
    pub fn ipvs_device_addresses(&self) -> anyhow::Result<BTreeSet<IpAddr>> {
        let dev = format!("/sys/class/net/{IPVS_DEVICE}");
        let exists = in_netns(&self.netns, "test", &["-e", &dev]).is_ok();
        if !exists {
            return Ok(BTreeSet::new());
        }
        let out = in_netns(
            &self.netns,
            "ip",
            &["-o", "addr", "show", "dev", IPVS_DEVICE],
        )?;
        Ok(device_addresses(&out))
    }

    /// Whether kube-proxy's rules already mention `ip` (an nftables Service-IP map entry, an
    /// iptables rule matching `-d <ip>/32` or `/128`, or an IPVS virtual server `<ip>:<port>`).
    ///
    /// # Errors
    /// kube-proxy exited (its log is in the error) or the rule listing failed.
    pub fn has_rules_for(&self, ip: IpAddr) -> anyhow::Result<bool> {
        if let Some(status) = self.process.exit_status() {
            bail!(
                "kube-proxy on {} exited ({status}):\n{}",
                self.node,
                self.log_tail(30)
            );
        }
        let ruleset = self.ruleset()?;
        Ok(match self.mode {
            ProxyMode::Ipvs { .. } => ipvs_services(&ruleset)
                .iter()
                .any(|(service, _)| service.contains(&needle(self.mode, ip))),
            _ => ruleset.contains(&needle(self.mode, ip)),
        })
    }

    /// Polls until kube-proxy's rules for `ip` lead to at least one endpoint: the IP is in its
    /// rules ([`KubeProxy::has_rules_for`]) *and* the chains reached from it end in a DNAT
    /// ([`KubeProxy::evidence_for`]; in IPVS mode: the virtual server has a real server). The IP
    /// alone is not enough: kube-proxy lists a Service without endpoints too (to reject its
    /// traffic), and syncs the endpoints a moment later. For at most `timeout`. In IPVS mode the
    /// virtual server of an `externalTrafficPolicy: Local` IP stays empty on a node without a
    /// local endpoint: wait for [`KubeProxy::has_rules_for`] there.
    ///
    /// # Errors
    /// Timed out (with the log tail), kube-proxy exited, or the rule listing failed.
    pub async fn wait_for_rules(&self, ip: IpAddr, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !(self.has_rules_for(ip)? && has_dnat(&self.evidence_for(ip)?)) {
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "kube-proxy on {} has no rules for {ip} after {timeout:?}:\n{}",
                    self.node,
                    self.log_tail(30)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(())
    }

    /// The evidence of what kube-proxy does with packets for `ip`: the rules that mention `ip`,
    /// then every chain reached from them (transitively: external → service → endpoint chains,
    /// ending in the DNAT to `<pod>:<port>`). nftables: `nft list table ip|ip6 kube-proxy` and
    /// `jump`/`goto` targets; iptables: the `nat` table of `iptables-save`/`ip6tables-save` and
    /// `-j KUBE-…` targets.
    ///
    /// # Errors
    /// The rule listing failed.
    ///
    /// IPVS: the line of [`IPVS_DEVICE`] holding `ip`, the virtual servers of `ip` with their
    /// real servers (`ipvsadm -Ln`), and the `ipset` members naming `ip` (the sets kube-proxy's
    /// iptables rules match: `KUBE-LOAD-BALANCER` is masqueraded, `KUBE-LOAD-BALANCER-LOCAL`
    /// is not).
    pub fn evidence_for(&self, ip: IpAddr) -> anyhow::Result<String> {
        match self.mode {
            ProxyMode::Nftables => self.nft_evidence_for(ip),
            ProxyMode::Ipvs { .. } => self.ipvs_evidence_for(ip),
            ProxyMode::Iptables => {
                let save = if ip.is_ipv4() {
                    "iptables-save"
                } else {
                    "ip6tables-save"
                };
                let nat = in_netns(&self.netns, save, &["-t", "nat"])?;
                Ok(iptables_evidence(&nat, &needle(self.mode, ip)))
            }
        }
    }

    fn ipvs_evidence_for(&self, ip: IpAddr) -> anyhow::Result<String> {
        let mut out = Vec::new();
        if self.ipvs_device_addresses()?.contains(&ip) {
            out.push(format!("  {IPVS_DEVICE} holds {ip}"));
        }
        let table = in_netns(&self.netns, "ipvsadm", &["-Ln"])?;
        for (service, reals) in ipvs_services(&table) {
            if service.contains(&needle(self.mode, ip)) {
                out.push(format!("  {service}"));
                out.extend(reals.iter().map(|r| format!("    {r}")));
            }
        }
        let sets = in_netns(&self.netns, "ipset", &["list"])?;
        out.extend(
            ipset_members_naming(&sets, ip)
                .into_iter()
                .map(|(set, member)| format!("  ipset {set}: {member}")),
        );
        Ok(out.join("\n"))
    }

    fn nft_evidence_for(&self, ip: IpAddr) -> anyhow::Result<String> {
        let family = if ip.is_ipv4() { "ip" } else { "ip6" };
        let table = in_netns(&self.netns, "nft", &["list", "table", family, TABLE])?;
        let mut out: Vec<String> = lines_mentioning(&table, &needle(self.mode, ip))
            .into_iter()
            .map(|(container, line)| format!("  in {container}: {line}"))
            .collect();
        let mut todo: Vec<String> = out.iter().flat_map(|l| chain_targets(l)).collect();
        let mut done = BTreeSet::new();
        while let Some(chain) = todo.pop() {
            if !done.insert(chain.clone()) {
                continue;
            }
            let listing = in_netns(
                &self.netns,
                "nft",
                &["list", "chain", family, TABLE, &chain],
            )?;
            let body = chain_body(&listing);
            todo.extend(body.iter().flat_map(|l| chain_targets(l)));
            out.push(format!("  chain {chain}:"));
            out.extend(body.into_iter().map(|l| format!("    {l}")));
        }
        Ok(out.join("\n"))
    }
}

/// Whether rule evidence ([`KubeProxy::evidence_for`]) contains a DNAT to an endpoint, in any
/// mode (`dnat … to …` in nftables, `-j DNAT --to-destination` in iptables, a real server
/// `-> <pod>:<port>` with `Masq` forwarding in IPVS).
fn has_dnat(evidence: &str) -> bool {
    evidence.lines().any(|l| {
        l.contains("-j DNAT --to-destination")
            || (l.contains("dnat ") && l.contains(" to "))
            || (l.trim_start().starts_with("-> ") && l.contains(" Masq "))
    })
}

/// How `ip` appears in a mode's listing: `"<ip> "` in an nftables map element
/// (`198.51.100.200 . tcp . 80 : goto …`), `"-d <ip>/32 "` (or `/128`) in an `iptables-save` rule,
/// `" <ip>:"` (or `" [<ip>]:"`) in an IPVS virtual server line (`TCP  198.51.100.200:80 rr`).
fn needle(mode: ProxyMode, ip: IpAddr) -> String {
    match (mode, ip) {
        (ProxyMode::Nftables, _) => format!("{ip} "),
        (ProxyMode::Iptables, IpAddr::V4(_)) => format!("-d {ip}/32 "),
        (ProxyMode::Iptables, IpAddr::V6(_)) => format!("-d {ip}/128 "),
        (ProxyMode::Ipvs { .. }, IpAddr::V4(_)) => format!(" {ip}:"),
        (ProxyMode::Ipvs { .. }, IpAddr::V6(_)) => format!(" [{ip}]:"),
    }
}

/// The virtual servers of an `ipvsadm -Ln` listing, each with its real-server lines (trimmed):
/// `("TCP  198.51.100.200:80 rr", ["-> 198.51.100.226:8080 Masq 1 0 0", …])`.
fn ipvs_services(listing: &str) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in listing.lines() {
        let trimmed = line.trim();
        if ["TCP ", "UDP ", "SCTP ", "FWM "]
            .iter()
            .any(|p| line.starts_with(p))
        {
            out.push((trimmed.to_owned(), Vec::new()));
        } else if trimmed.starts_with("-> ")
            && !trimmed.contains("RemoteAddress")
            && let Some((_, reals)) = out.last_mut()
        {
            reals.push(trimmed.split_whitespace().collect::<Vec<_>>().join(" "));
        }
    }
    out
}

/// The members of an `ipset list` listing that name `ip` (`198.51.100.200,tcp:80`), each with
/// its set.
fn ipset_members_naming(listing: &str, ip: IpAddr) -> Vec<(String, String)> {
    let prefix = format!("{ip},");
    let mut set = String::new();
    let mut members = false;
    let mut out = Vec::new();
    for line in listing.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("Name: ") {
            set = name.to_owned();
            members = false;
        } else if line == "Members:" {
            members = true;
        } else if members && line.starts_with(&prefix) {
            out.push((set.clone(), line.to_owned()));
        }
    }
    out
}

/// The addresses of an `ip -o addr show dev …` listing.
fn device_addresses(listing: &str) -> BTreeSet<IpAddr> {
    listing
        .lines()
        .filter_map(|l| {
            let words: Vec<&str> = l.split_whitespace().collect();
            let at = words.iter().position(|w| *w == "inet" || *w == "inet6")?;
            words.get(at + 1)?.split('/').next()?.parse().ok()
        })
        .collect()
}

/// From an `iptables-save -t nat` listing: the rules containing `needle`, then (transitively)
/// every `-A` rule of the `KUBE-…` chains they jump to, in the order first reached.
fn iptables_evidence(nat: &str, needle: &str) -> String {
    let rules: Vec<&str> = nat.lines().filter(|l| l.starts_with("-A ")).collect();
    let mut out: Vec<String> = rules
        .iter()
        .filter(|l| l.contains(needle))
        .map(|l| format!("  {l}"))
        .collect();
    let mut todo: Vec<String> = out.iter().rev().filter_map(|l| jump_target(l)).collect();
    let mut done = BTreeSet::new();
    while let Some(chain) = todo.pop() {
        if !done.insert(chain.clone()) {
            continue;
        }
        let prefix = format!("-A {chain} ");
        let body: Vec<&&str> = rules.iter().filter(|l| l.starts_with(&prefix)).collect();
        out.push(format!("  chain {chain}:"));
        out.extend(body.iter().map(|l| format!("    {l}")));
        let mut next: Vec<String> = body.iter().filter_map(|l| jump_target(l)).collect();
        next.reverse();
        todo.extend(next);
    }
    out.join("\n")
}

/// The `KUBE-…` chain an iptables rule jumps to (`-j KUBE-SVC-…`), if any. Built-in targets
/// (`DNAT`, `MASQUERADE`, `RETURN`, …) are not chains.
fn jump_target(rule: &str) -> Option<String> {
    let words: Vec<&str> = rule.split_whitespace().collect();
    words
        .windows(2)
        .find(|w| w.first() == Some(&"-j"))
        .and_then(|w| w.get(1))
        .filter(|t| t.starts_with("KUBE-"))
        .map(|t| (*t).to_owned())
}

/// The lines of an `nft list table` listing that contain `needle`, each with the `chain`, `map` or
/// `set` it sits in (e.g. `("map service-ips", "198.51.100.200 . tcp . 80 : goto external-…")`).
fn lines_mentioning(listing: &str, needle: &str) -> Vec<(String, String)> {
    let mut container = String::from("table");
    let mut found = Vec::new();
    for line in listing.lines().map(str::trim) {
        if let Some(header) = line.strip_suffix('{').map(str::trim)
            && ["chain ", "map ", "set "]
                .iter()
                .any(|k| header.starts_with(k))
        {
            container = header.to_owned();
            continue;
        }
        if line.contains(needle) {
            found.push((container.clone(), line.to_owned()));
        }
    }
    found
}

/// The chain names a rule line sends packets to (`jump X`, `goto X`, and the targets of a verdict
/// map such as `vmap { 0 : goto A, 1 : goto B }`). Chains named like kube-proxy's per-Service and
/// per-endpoint chains (containing a `-`) only; built-in verdicts are not chains.
fn chain_targets(line: &str) -> Vec<String> {
    let words: Vec<&str> = line
        .split(|c: char| c.is_whitespace() || c == ',' || c == '{' || c == '}')
        .filter(|w| !w.is_empty())
        .collect();
    words
        .windows(2)
        .filter(|w| matches!(w.first(), Some(&"jump" | &"goto")))
        .filter_map(|w| w.get(1))
        .filter(|t| t.contains('-'))
        .map(|t| (*t).to_owned())
        .collect()
}

/// The rule lines of an `nft list chain` listing, without the table and chain framing.
fn chain_body(listing: &str) -> Vec<String> {
    listing
        .lines()
        .map(str::trim)
        .filter(|l| {
            !l.is_empty() && !l.starts_with("table ") && !l.starts_with("chain ") && *l != "}"
        })
        .map(str::to_owned)
        .collect()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn chain_targets_finds_jumps_gotos_and_vmap_targets() {
        assert_eq!(
            chain_targets("ip daddr . meta l4proto . th dport vmap @service-ips"),
            Vec::<String>::new()
        );
        assert_eq!(
            chain_targets("198.51.100.200 . tcp . 80 : goto external-ABCD-default/web/tcp/,"),
            vec!["external-ABCD-default/web/tcp/".to_owned()]
        );
        assert_eq!(
            chain_targets(
                "numgen random mod 3 vmap { 0 : goto endpoint-A, 1 : goto endpoint-B, 2 : goto endpoint-C }"
            ),
            vec![
                "endpoint-A".to_owned(),
                "endpoint-B".to_owned(),
                "endpoint-C".to_owned()
            ]
        );
        assert_eq!(
            chain_targets("jump mark-for-masquerade"),
            vec!["mark-for-masquerade".to_owned()]
        );
        assert_eq!(chain_targets("ct state invalid drop"), Vec::<String>::new());
    }

    #[test]
    fn lines_are_found_with_their_container() {
        let listing = "table ip kube-proxy {\n\tmap service-ips {\n\t\ttype ipv4_addr : verdict\n\t\telements = { 192.0.2.169 . tcp . 80 : goto service-X,\n\t\t\t     198.51.100.200 . tcp . 80 : goto external-X }\n\t}\n\tchain filter-x {\n\t\tip daddr 198.51.100.200 drop\n\t}\n}\n";
        assert_eq!(
            lines_mentioning(listing, "198.51.100.200 "),
            vec![
                (
                    "map service-ips".to_owned(),
                    "198.51.100.200 . tcp . 80 : goto external-X }".to_owned()
                ),
                (
                    "chain filter-x".to_owned(),
                    "ip daddr 198.51.100.200 drop".to_owned()
                ),
            ]
        );
        assert!(lines_mentioning(listing, "203.0.113.1 ").is_empty());
    }

    #[test]
    fn chain_body_drops_the_frame() {
        let listing =
            "table ip kube-proxy {\n\tchain x-y {\n\t\tjump a-b\n\t\tdnat to 1.2.3.4:80\n\t}\n}\n";
        assert_eq!(
            chain_body(listing),
            vec!["jump a-b".to_owned(), "dnat to 1.2.3.4:80".to_owned()]
        );
    }

    #[test]
    fn iptables_evidence_follows_kube_chains_to_the_dnat() {
        let nat = "*nat\n:KUBE-SERVICES - [0:0]\n\
            -A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
            -A KUBE-SERVICES -d 198.51.100.200/32 -p tcp -m comment --comment \"default/web loadbalancer IP\" -m tcp --dport 80 -j KUBE-EXT-ABC\n\
            -A KUBE-SERVICES -d 198.51.100.201/32 -p tcp -m tcp --dport 80 -j KUBE-EXT-OTHER\n\
            -A KUBE-EXT-ABC -j KUBE-MARK-MASQ\n\
            -A KUBE-EXT-ABC -j KUBE-SVC-ABC\n\
            -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
            -A KUBE-SVC-ABC -m statistic --mode random --probability 0.5 -j KUBE-SEP-1\n\
            -A KUBE-SVC-ABC -j KUBE-SEP-2\n\
            -A KUBE-SEP-1 -p tcp -m tcp -j DNAT --to-destination 198.51.100.226:8080\n\
            -A KUBE-SEP-2 -p tcp -m tcp -j DNAT --to-destination 198.51.100.230:8080\n\
            COMMIT\n";
        let ev = iptables_evidence(nat, "-d 198.51.100.200/32 ");
        let chains: Vec<&str> = ev
            .lines()
            .filter_map(|l| l.trim().strip_prefix("chain "))
            .collect();
        assert_eq!(
            chains,
            vec![
                "KUBE-EXT-ABC:",
                "KUBE-MARK-MASQ:",
                "KUBE-SVC-ABC:",
                "KUBE-SEP-1:",
                "KUBE-SEP-2:"
            ]
        );
        assert!(ev.contains("--to-destination 198.51.100.226:8080"), "{ev}");
        assert!(!ev.contains("KUBE-EXT-OTHER"), "{ev}");
        assert_eq!(
            jump_target("-A X -j DNAT --to-destination 1.2.3.4:80"),
            None
        );
    }

    #[test]
    fn dnat_is_recognised_in_both_modes() {
        assert!(has_dnat("    meta l4proto tcp dnat to 198.51.100.234:8080"));
        assert!(has_dnat(
            "    meta l4proto tcp dnat ip to numgen random mod 3 map { 0 : 198.51.100.230 . 8080 }"
        ));
        assert!(has_dnat(
            "    -A KUBE-SEP-X -p tcp -m tcp -j DNAT --to-destination 198.51.100.226:8080"
        ));
        assert!(!has_dnat(
            "  in map service-ips: 198.51.100.200 . tcp . 80 : goto external-X"
        ));
        assert!(!has_dnat(
            "  -A KUBE-SERVICES -d 198.51.100.200/32 -j KUBE-EXT-X"
        ));
    }

    #[test]
    fn ipvs_listings_are_read() {
        let table = "IP Virtual Server version 1.2.1 (size=4096)\n\
            Prot LocalAddress:Port Scheduler Flags\n\
            \x20 -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n\
            TCP  192.0.2.150:80 rr\n\
            \x20 -> 198.51.100.226:8080          Masq    1      0          0\n\
            TCP  198.51.100.200:80 rr\n\
            \x20 -> 198.51.100.226:8080          Masq    1      0          0\n\
            \x20 -> 198.51.100.230:8080          Masq    1      0          0\n\
            TCP  198.51.100.201:80 rr\n\
            TCP  [2001:db8:1a::200]:80 rr\n";
        let services = ipvs_services(table);
        assert_eq!(services.len(), 4);
        assert_eq!(services[1].0, "TCP  198.51.100.200:80 rr");
        assert_eq!(
            services[1].1,
            vec![
                "-> 198.51.100.226:8080 Masq 1 0 0".to_owned(),
                "-> 198.51.100.230:8080 Masq 1 0 0".to_owned()
            ]
        );
        assert!(services[2].1.is_empty());
        let mode = ProxyMode::Ipvs { strict_arp: true };
        let v4: IpAddr = "198.51.100.20".parse().unwrap();
        assert!(!services.iter().any(|(s, _)| s.contains(&needle(mode, v4))));
        let v6: IpAddr = "2001:db8:1a::200".parse().unwrap();
        assert!(services[3].0.contains(&needle(mode, v6)));
        assert!(has_dnat("    -> 198.51.100.226:8080 Masq 1 0 0"));
        assert!(!has_dnat("  TCP  198.51.100.200:80 rr"));

        let sets = "Name: KUBE-LOAD-BALANCER\nType: hash:ip,port\nMembers:\n\
            198.51.100.200,tcp:80\n198.51.100.201,tcp:80\n\n\
            Name: KUBE-LOAD-BALANCER-LOCAL\nType: hash:ip,port\nMembers:\n198.51.100.201,tcp:80\n";
        assert_eq!(
            ipset_members_naming(sets, "198.51.100.201".parse().unwrap()),
            vec![
                (
                    "KUBE-LOAD-BALANCER".to_owned(),
                    "198.51.100.201,tcp:80".to_owned()
                ),
                (
                    "KUBE-LOAD-BALANCER-LOCAL".to_owned(),
                    "198.51.100.201,tcp:80".to_owned()
                ),
            ]
        );
        let dev = "5: kube-ipvs0    inet 192.0.2.150/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever\n\
            5: kube-ipvs0    inet 198.51.100.200/32 scope global kube-ipvs0\\       valid_lft forever preferred_lft forever\n";
        assert_eq!(
            device_addresses(dev),
            BTreeSet::from([
                "192.0.2.150".parse::<IpAddr>().unwrap(),
                "198.51.100.200".parse().unwrap()
            ])
        );
    }

    #[test]
    fn proxy_modes_parse_and_ipvs_only_where_the_kernel_has_it() {
        for mode in ProxyMode::ALL {
            assert_eq!(mode.as_str().parse::<ProxyMode>(), Ok(mode));
        }
        match ipvs_unavailable() {
            Some(_) => {
                let refused = "ipvs".parse::<ProxyMode>().unwrap_err();
                assert!(refused.contains("ipvs mode cannot run here"), "{refused}");
                assert!(refused.contains("vm_ipvs"), "{refused}");
            }
            None => assert_eq!(
                "ipvs".parse::<ProxyMode>(),
                Ok(ProxyMode::Ipvs { strict_arp: true })
            ),
        }
        assert_eq!(
            ProxyMode::Ipvs { strict_arp: false }.to_string(),
            "ipvs, no strictARP"
        );
        assert!("userspace".parse::<ProxyMode>().is_err());
        assert_eq!(
            needle(ProxyMode::Iptables, "2001:db8::1".parse().unwrap()),
            "-d 2001:db8::1/128 "
        );
    }
}
