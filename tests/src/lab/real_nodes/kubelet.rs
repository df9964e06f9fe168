//! A node's kubelet: registers the Node object, runs the pods the scheduler binds to it through
//! the node's containerd, reports their status.
//!
//! It runs in the node's network namespace but in the machine's mount namespace (`nsenter --net`
//! only, not `ip netns exec`, which would give it a private mount namespace): containerd must see
//! the secret and projected volumes kubelet mounts, so both share one. Settings this machine needs
//! (issue #14; cgroup v1, no systemd, no swap, a disk over 85 % full):
//! - `cgroupDriver: cgroupfs`, `failCgroupV1: false` (still accepted by Kubernetes 1.37), and a
//!   `cgroupRoot` per node so several kubelets share the machine;
//! - eviction thresholds and image garbage collection effectively off: the lab's disk is what it
//!   is, and an evicted speaker would be a lab fault, not a product one;
//! - no cluster DNS (the lab runs none; pods fall back to the node's resolv.conf, with a
//!   `MissingClusterDNS` Warning Event);
//! - `podLogsDir` under the node directory (container logs are read from there: the API server
//!   cannot reach kubelets, so `kubectl logs`/`exec` do not work in the lab).

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::cluster::Supervised;

/// A running kubelet.
pub struct Kubelet {
    process: Supervised,
    pod_logs: PathBuf,
}

/// The KubeletConfiguration (YAML) of node at `ip` whose private directory is `dir`.
pub fn config(
    dir: &Path,
    ip: Ipv4Addr,
    cgroup_root: &str,
    runtime_endpoint: &str,
    ca: &Path,
) -> String {
    let d = dir.display();
    format!(
        r#"apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
cgroupDriver: cgroupfs
failCgroupV1: false
cgroupRoot: {cgroup_root}
containerRuntimeEndpoint: {runtime_endpoint}
podLogsDir: {d}/pod-logs
address: {ip}
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {{enabled: false}}
  webhook: {{enabled: false}}
  x509: {{clientCAFile: {ca}}}
authorization: {{mode: AlwaysAllow}}
evictionHard: {{memory.available: "1Mi", nodefs.available: "1%", imagefs.available: "1%", nodefs.inodesFree: "1%"}}
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
failSwapOn: false
resolvConf: /etc/resolv.conf
serializeImagePulls: false
maxPods: 14
nodeStatusUpdateFrequency: 2s
"#,
        ca = ca.display(),
    )
}

impl Kubelet {
    /// Writes its configuration under `dir` and starts kubelet for Node `name` at `ip` in network
    /// namespace `netns`, reaching the API server with `kubeconfig`, moved into the node's cgroup
    /// by `adopt`.
    ///
    /// # Errors
    /// A file could not be written or kubelet not started.
    #[allow(clippy::too_many_arguments)]
    pub fn start(
        name: &str,
        netns: &str,
        ip: Ipv4Addr,
        dir: &Path,
        bin: &Path,
        kubeconfig: &Path,
        ca: &Path,
        cgroup_root: &str,
        runtime_endpoint: &str,
        adopt: impl Fn(u32) -> anyhow::Result<()>,
    ) -> anyhow::Result<Kubelet> {
        let pod_logs = dir.join("pod-logs");
        std::fs::create_dir_all(&pod_logs)?;
        let config_path = dir.join("kubelet.yaml");
        std::fs::write(
            &config_path,
            config(dir, ip, cgroup_root, runtime_endpoint, ca),
        )?;
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/var/run/netns/{netns}"))
            .arg(bin)
            .arg("--config")
            .arg(&config_path)
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .arg("--root-dir")
            .arg(dir.join("kubelet"))
            .arg("--cert-dir")
            .arg(dir.join("kubelet-pki"))
            .args(["--hostname-override", name])
            .args(["--node-ip", &ip.to_string()])
            .args(["--v", "1"]);
        let process = Supervised::spawn_command(
            &format!("kubelet {name}"),
            &mut cmd,
            &dir.join("kubelet.log"),
            false,
        )?;
        if let Some(pid) = process.pid() {
            adopt(pid)?;
        }
        Ok(Kubelet { process, pod_logs })
    }

    /// `Some(status)` once kubelet has exited.
    pub fn exit_status(&self) -> Option<std::process::ExitStatus> {
        self.process.exit_status()
    }

    /// The last `lines` lines of its log.
    pub fn log_tail(&self, lines: usize) -> String {
        self.process.log_tail(lines)
    }

    /// The directory of container logs (`<namespace>_<pod>_<uid>/<container>/<n>.log`).
    pub fn pod_logs(&self) -> &Path {
        &self.pod_logs
    }

    /// Stops kubelet (SIGTERM, SIGKILL after `grace`); its pods keep running.
    pub fn stop(&self, grace: std::time::Duration) {
        self.process.stop(grace);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_is_cgroupfs_on_v1_with_the_node_paths() {
        let text = config(
            Path::new("/lab/n1"),
            Ipv4Addr::new(192, 0, 2, 11),
            "/flb-n1",
            "unix:///lab/n1/containerd/containerd.sock",
            Path::new("/lab/ca.crt"),
        );
        let v: serde_json::Value = serde_saphyr::from_str(&text).expect("YAML");
        assert_eq!(v["kind"], "KubeletConfiguration");
        assert_eq!(v["cgroupDriver"], "cgroupfs");
        assert_eq!(v["failCgroupV1"], false);
        assert_eq!(v["cgroupRoot"], "/flb-n1");
        assert_eq!(v["address"], "192.0.2.11");
        assert_eq!(v["podLogsDir"], "/lab/n1/pod-logs");
        assert_eq!(v["authentication"]["x509"]["clientCAFile"], "/lab/ca.crt");
        assert_eq!(v["evictionHard"]["nodefs.available"], "1%");
    }
}
