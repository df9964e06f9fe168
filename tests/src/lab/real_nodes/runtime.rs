//! A node's container runtime: containerd 2 with the runc shim and the bridge CNI, every path
//! private to the node (root, state, sockets, CNI configuration and IPAM state), running in the
//! node's network namespace so host-network pods share it and the bridge CNI builds `cni0` there.
//!
//! Settings that this machine needs (measured, issue #14):
//! - `restrict_oom_score_adj = true`: root here lacks `CAP_SYS_RESOURCE`, so no process may lower
//!   an `oom_score_adj` (containerd gives every pod sandbox -998; runc then fails every sandbox
//!   with "failed to update /proc/self/oom_score_adj: Permission denied").
//! - runc built from its Go module (`tests/nodes/build.sh`), not Debian 12's 1.1.5, which fails
//!   every container containerd 2.4 asks for ("can't get final child's PID from pipe").
//! - `netns_mounts_under_state_dir = true`: pod network namespaces are bind-mounted under the
//!   node's state directory instead of the machine's `/var/run/netns`, so teardown finds them.
//! - NRI is disabled (its socket is a fixed machine-wide path); runc keeps its state under the
//!   node directory (`Root`), not in `/run/containerd/runc`. The shims' sockets are a fixed path
//!   (`/run/containerd/s`); teardown removes the dead ones ([`super::host::remove_dead_shim_sockets`]).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::cluster::Supervised;

/// The sandbox ("pause") image every pod starts with; containerd is told to use this tag and the
/// lab imports an image of that name (`tests/image/build.sh`), so nothing is pulled.
pub const SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";

/// A running containerd for one node.
pub struct Runtime {
    dir: PathBuf,
    bin: PathBuf,
    process: Supervised,
}

/// The containerd configuration (TOML, config version 3) of a node whose private directory is
/// `dir`, with CNI plugins in `cni_bin` and runc at `runc`.
pub fn config(dir: &Path, cni_bin: &Path, runc: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 3
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.nri.v1.nri"]

[grpc]
  address = "{d}/containerd/containerd.sock"

[ttrpc]
  address = "{d}/containerd/containerd.sock.ttrpc"

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[plugins."io.containerd.cri.v1.images"]
  snapshotter = "overlayfs"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = "{SANDBOX_IMAGE}"

[plugins."io.containerd.cri.v1.runtime"]
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = ["{cni}"]
  conf_dir = "{d}/cni/net.d"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  SystemdCgroup = false
  BinaryName = "{runc}"
  Root = "{d}/runc"
"#,
        cni = cni_bin.display(),
        runc = runc.display(),
    )
}

/// The CNI network of a node: a `cni0` bridge that is the pods' gateway, addresses from `subnet`
/// (host-local IPAM with its state under `dir`), no masquerading (routes between nodes carry pod
/// traffic, as on a flat routed network), and port mappings.
pub fn cni_conflist(dir: &Path, subnet: &str) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "ferrolb-lab",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": true,
                "ipMasq": false,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": subnet }]],
                    "routes": [{ "dst": "0.0.0.0/0" }],
                    "dataDir": dir.join("cni/ipam"),
                }
            },
            { "type": "portmap", "capabilities": { "portMappings": true } }
        ]
    })
    .to_string()
}

/// The gateway address (`.1`) of a pod subnet `a.b.c.d/len`.
///
/// # Errors
/// `subnet` is not an IPv4 CIDR.
pub fn gateway(subnet: &str) -> anyhow::Result<Ipv4Addr> {
    let net: ipnetwork::Ipv4Network = subnet.parse().with_context(|| subnet.to_owned())?;
    Ok(Ipv4Addr::from(u32::from(net.network()) + 1))
}

impl Runtime {
    /// Writes the configuration under `dir` and starts containerd in network namespace `netns`,
    /// moved into the node's cgroup by `adopt`; returns once its socket answers (at most 30 s).
    ///
    /// # Errors
    /// A file could not be written, containerd did not start, or exited (its log is in the error).
    pub fn start(
        netns: &str,
        dir: &Path,
        bin: &Path,
        subnet: &str,
        adopt: impl Fn(u32) -> anyhow::Result<()>,
    ) -> anyhow::Result<Runtime> {
        let cni_bin = dir.join("cni/bin");
        for sub in ["containerd", "cni/net.d", "cni/ipam", "cni/bin"] {
            std::fs::create_dir_all(dir.join(sub))?;
        }
        for plugin in ["bridge", "host-local", "loopback", "portmap"] {
            let link = cni_bin.join(plugin);
            if !link.exists() {
                std::os::unix::fs::symlink(bin.join(plugin), &link)?;
            }
        }
        std::fs::write(
            dir.join("cni/net.d/10-ferrolb-lab.conflist"),
            cni_conflist(dir, subnet),
        )?;
        let config_path = dir.join("containerd/config.toml");
        std::fs::write(&config_path, config(dir, &cni_bin, &bin.join("runc")))?;
        let path = format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        );
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/var/run/netns/{netns}"))
            .arg(bin.join("containerd"))
            .arg("--config")
            .arg(&config_path)
            .env("PATH", path);
        let process = Supervised::spawn_command(
            &format!("containerd {netns}"),
            &mut cmd,
            &dir.join("containerd.log"),
            false,
        )?;
        if let Some(pid) = process.pid() {
            adopt(pid)?;
        }
        let runtime = Runtime {
            dir: dir.to_path_buf(),
            bin: bin.to_path_buf(),
            process,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = runtime.process.exit_status() {
                bail!(
                    "containerd exited ({status}):\n{}",
                    runtime.process.log_tail(30)
                );
            }
            if runtime.ctr(&["version"]).is_ok() {
                return Ok(runtime);
            }
            if Instant::now() > deadline {
                bail!(
                    "containerd did not answer within 30 s:\n{}",
                    runtime.process.log_tail(30)
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// The CRI socket, as kubelet's `containerRuntimeEndpoint` wants it (`unix://…`).
    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    /// Runs `ctr -n k8s.io <args>` against this containerd.
    ///
    /// # Errors
    /// ctr failed (its stderr is in the error).
    pub fn ctr(&self, args: &[&str]) -> anyhow::Result<String> {
        let out = Command::new(self.bin.join("ctr"))
            .arg("--address")
            .arg(self.socket())
            .args(["--namespace", "k8s.io"])
            .args(args)
            .output()
            .context("running ctr")?;
        if !out.status.success() {
            bail!(
                "ctr {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// Imports an image archive (`docker save`/OCI layout tarball) into the `k8s.io` namespace,
    /// where the CRI plugin (and so kubelet) sees it — what `minikube image load` does.
    ///
    /// # Errors
    /// ctr refused the archive.
    pub fn import(&self, archive: &Path) -> anyhow::Result<()> {
        let archive = archive.to_string_lossy();
        self.ctr(&["images", "import", archive.as_ref()])?;
        Ok(())
    }

    /// The names of the images it holds.
    ///
    /// # Errors
    /// ctr failed.
    pub fn images(&self) -> anyhow::Result<Vec<String>> {
        Ok(self
            .ctr(&["images", "list", "--quiet"])?
            .lines()
            .map(str::to_owned)
            .collect())
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// Stops containerd (SIGTERM, then SIGKILL after `grace`). Its shims and containers keep
    /// running: the node's cgroup teardown kills them.
    pub fn stop(&self, grace: Duration) {
        self.process.stop(grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_keeps_every_path_under_the_node_directory() {
        let text = config(
            Path::new("/lab/n1"),
            Path::new("/lab/n1/cni/bin"),
            Path::new("/cache/runc"),
        );
        let value: toml_edit::DocumentMut = text.parse().expect("valid TOML");
        assert_eq!(value["root"].as_str(), Some("/lab/n1/containerd/root"));
        assert_eq!(value["state"].as_str(), Some("/lab/n1/containerd/state"));
        let runtime = &value["plugins"]["io.containerd.cri.v1.runtime"];
        assert_eq!(runtime["restrict_oom_score_adj"].as_bool(), Some(true));
        assert_eq!(
            runtime["netns_mounts_under_state_dir"].as_bool(),
            Some(true)
        );
        assert_eq!(
            runtime["containerd"]["runtimes"]["runc"]["options"]["BinaryName"].as_str(),
            Some("/cache/runc")
        );
        assert_eq!(
            runtime["containerd"]["runtimes"]["runc"]["options"]["Root"].as_str(),
            Some("/lab/n1/runc")
        );
        assert_eq!(
            value["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"].as_str(),
            Some(SANDBOX_IMAGE)
        );
    }

    #[test]
    fn cni_network_is_a_gateway_bridge_on_the_node_subnet() {
        let v: serde_json::Value =
            serde_json::from_str(&cni_conflist(Path::new("/lab/n2"), "198.51.100.144/28"))
                .expect("JSON");
        let bridge = &v["plugins"][0];
        assert_eq!(bridge["type"], "bridge");
        assert_eq!(bridge["isGateway"], true);
        assert_eq!(bridge["ipMasq"], false);
        assert_eq!(
            bridge["ipam"]["ranges"][0][0]["subnet"],
            "198.51.100.144/28"
        );
        assert_eq!(bridge["ipam"]["dataDir"], "/lab/n2/cni/ipam");
        assert_eq!(
            gateway("198.51.100.144/28").expect("CIDR"),
            Ipv4Addr::new(198, 51, 100, 145)
        );
        assert!(gateway("not a cidr").is_err());
    }
}
