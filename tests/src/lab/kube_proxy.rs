//! A real kube-proxy in nftables mode inside a lab node namespace (DESIGN §6), built from
//! `k8s.io/kubernetes/cmd/kube-proxy` by `tests/cluster/build.sh`.
//!
//! It reaches the API server through the node's relay ([`Lab::node_kubeconfig`]), names itself
//! after the Node object (`--hostname-override`), treats the node's LAN address as its primary IP
//! (`--bind-address`, NodePorts only there), and binds its metrics and healthz servers to the
//! namespace's own loopback. `--conntrack-max-per-core=0` leaves `nf_conntrack_max` alone: that
//! sysctl is global and read-only outside the initial network namespace. The per-namespace TCP
//! conntrack timeouts it does set are writable by root inside the namespace.
//!
//! kube-proxy's nftables mode drives the `nft` command (Debian package `nftables`).

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, bail};

use super::pods::POD_CIDR;
use super::{Lab, in_netns};
use crate::cluster::{Supervised, k8s_bin};

/// kube-proxy's metrics address inside a node namespace.
pub const METRICS_ADDRESS: &str = "127.0.0.1:10249";
/// kube-proxy's healthz address inside a node namespace.
pub const HEALTHZ_ADDRESS: &str = "127.0.0.1:10256";
/// The nftables table kube-proxy owns (family `ip` for IPv4).
pub const TABLE: &str = "kube-proxy";

/// One running kube-proxy. Stopped (SIGTERM, then SIGKILL) when dropped.
pub struct KubeProxy {
    /// The node it serves.
    pub node: String,
    /// The node's network namespace.
    pub netns: String,
    process: Supervised,
}

impl Lab {
    /// Starts kube-proxy (nftables mode) in node `name`'s namespace, logging to
    /// `kube-proxy-<name>.log` in the lab directory.
    ///
    /// # Errors
    /// No such node, `nft` is not installed, the binary could not be built, or it did not start.
    pub fn start_kube_proxy(&self, name: &str) -> anyhow::Result<KubeProxy> {
        let node = self
            .nodes
            .iter()
            .find(|n| n.name == name)
            .with_context(|| format!("no lab node {name}"))?;
        if Command::new("nft").arg("--version").output().is_err() {
            bail!("kube-proxy in nftables mode needs the `nft` command: apt-get install nftables");
        }
        let bin = k8s_bin("kube-proxy")?;
        let log = self.dir().join(format!("kube-proxy-{name}.log"));
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &node.netns])
            .arg(&bin)
            .arg("--kubeconfig")
            .arg(self.node_kubeconfig())
            .args(["--proxy-mode", "nftables"])
            .args(["--hostname-override", &node.name])
            .args(["--bind-address", &node.ip.to_string()])
            .args(["--nodeport-addresses", &format!("{}/32", node.ip)])
            .args(["--cluster-cidr", POD_CIDR])
            .args(["--metrics-bind-address", METRICS_ADDRESS])
            .args(["--healthz-bind-address", HEALTHZ_ADDRESS])
            .args(["--conntrack-max-per-core", "0"])
            .args(["--oom-score-adj", "0"])
            .args(["--v", "2"]);
        let process =
            Supervised::spawn_command(&format!("kube-proxy {name}"), &mut cmd, &log, false)?;
        Ok(KubeProxy {
            node: node.name.clone(),
            netns: node.netns.clone(),
            process,
        })
    }
}

impl KubeProxy {
    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// `nft list ruleset` in the node's namespace.
    ///
    /// # Errors
    /// `nft` failed.
    pub fn ruleset(&self) -> anyhow::Result<String> {
        in_netns(&self.netns, "nft", &["list", "ruleset"])
    }

    /// Whether kube-proxy's rules already mention `ip` (its Service-IP map has an entry for it).
    ///
    /// # Errors
    /// kube-proxy exited (its log is in the error) or `nft` failed.
    pub fn has_rules_for(&self, ip: Ipv4Addr) -> anyhow::Result<bool> {
        if let Some(status) = self.process.exit_status() {
            bail!(
                "kube-proxy on {} exited ({status}):\n{}",
                self.node,
                self.log_tail(30)
            );
        }
        let ruleset = self.ruleset()?;
        Ok(ruleset.contains(&format!("{ip} ")))
    }

    /// Polls until [`KubeProxy::has_rules_for`] holds, for at most `timeout`.
    ///
    /// # Errors
    /// Timed out (with the log tail), kube-proxy exited, or `nft` failed.
    pub async fn wait_for_rules(&self, ip: Ipv4Addr, timeout: Duration) -> anyhow::Result<()> {
        let deadline = tokio::time::Instant::now() + timeout;
        while !self.has_rules_for(ip)? {
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

    /// The evidence that kube-proxy DNATs `ip`: the lines of its table that mention `ip`, then every
    /// chain reached from them by `jump`/`goto` (transitively: external → service → endpoint
    /// chains, ending in the `dnat to <pod>:<port>` rules).
    ///
    /// # Errors
    /// `nft` failed.
    pub fn evidence_for(&self, ip: Ipv4Addr) -> anyhow::Result<String> {
        let table = in_netns(&self.netns, "nft", &["list", "table", "ip", TABLE])?;
        let mut out: Vec<String> = lines_mentioning(&table, &format!("{ip} "))
            .into_iter()
            .map(|(container, line)| format!("  in {container}: {line}"))
            .collect();
        let mut todo: Vec<String> = out.iter().flat_map(|l| chain_targets(l)).collect();
        let mut done = BTreeSet::new();
        while let Some(chain) = todo.pop() {
            if !done.insert(chain.clone()) {
                continue;
            }
            let listing = in_netns(&self.netns, "nft", &["list", "chain", "ip", TABLE, &chain])?;
            let body = chain_body(&listing);
            todo.extend(body.iter().flat_map(|l| chain_targets(l)));
            out.push(format!("  chain {chain}:"));
            out.extend(body.into_iter().map(|l| format!("    {l}")));
        }
        Ok(out.join("\n"))
    }
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
}
