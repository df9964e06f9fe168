//! The rest of a control plane for real nodes: kube-controller-manager and kube-scheduler, next to
//! the test cluster's API server (machine loopback, admin kubeconfig, no leader election).
//!
//! The controllers are the ones the install needs and nothing more (issue #14): Deployments,
//! ReplicaSets, DaemonSets, EndpointSlices (from the real controller, not the lab), the garbage
//! collector (owner references), namespace deletion (`kubectl delete -k deploy/`), ServiceAccounts
//! and the `kube-root-ca.crt` ConfigMap every projected service-account volume mounts, node
//! lifecycle (it lifts the `node.kubernetes.io/not-ready` taint kubelet registers with), and the
//! pod garbage collector (it deletes the pods evicted from a node given the
//! `node.kubernetes.io/out-of-service` taint, whose kubelet cannot confirm: issue #29 O4).

use std::path::Path;

use crate::cluster::{Supervised, TestCluster, k8s_bin};

/// The kube-controller-manager controllers the lab runs (`--controllers`).
pub const CONTROLLERS: &str = "nodelifecycle,endpointslice,endpointslicemirroring,daemonset,deployment,replicaset,garbagecollector,namespace,serviceaccount,serviceaccount-token,root-ca-cert-publisher,podgc";

/// Running kube-controller-manager and kube-scheduler.
pub struct ControlPlane {
    controller_manager: Supervised,
    scheduler: Supervised,
}

impl ControlPlane {
    /// Starts both against `cluster`, logging into `dir`.
    ///
    /// # Errors
    /// A binary is missing or a process could not be started.
    pub fn start(cluster: &TestCluster, dir: &Path) -> anyhow::Result<ControlPlane> {
        let kubeconfig = cluster.kubeconfig().display().to_string();
        let auth = [
            format!("--kubeconfig={kubeconfig}"),
            format!("--authentication-kubeconfig={kubeconfig}"),
            format!("--authorization-kubeconfig={kubeconfig}"),
            "--leader-elect=false".to_owned(),
            "--bind-address=127.0.0.1".to_owned(),
            "--v=1".to_owned(),
        ];
        let mut kcm_args = auth.to_vec();
        kcm_args.extend([
            format!("--controllers={CONTROLLERS}"),
            format!("--root-ca-file={}", cluster.dir().join("ca.crt").display()),
            format!(
                "--service-account-private-key-file={}",
                cluster.dir().join("sa.key").display()
            ),
            "--use-service-account-credentials=false".to_owned(),
            // Ports 0: no serving port, so two labs (or a developer's cluster) never collide.
            "--secure-port=0".to_owned(),
            // Kubelets report every 2 s; a node silent for 20 s is NotReady.
            "--node-monitor-grace-period=20s".to_owned(),
        ]);
        let controller_manager = Supervised::spawn(
            "kube-controller-manager",
            &k8s_bin("kube-controller-manager")?,
            &kcm_args,
            &dir.join("kube-controller-manager.log"),
            false,
        )?;
        let mut sched_args = auth.to_vec();
        sched_args.push("--secure-port=0".to_owned());
        let scheduler = Supervised::spawn(
            "kube-scheduler",
            &k8s_bin("kube-scheduler")?,
            &sched_args,
            &dir.join("kube-scheduler.log"),
            false,
        )?;
        Ok(ControlPlane {
            controller_manager,
            scheduler,
        })
    }

    /// The exit status of whichever has exited, with its log tail.
    pub fn exited(&self) -> Option<String> {
        for p in [&self.controller_manager, &self.scheduler] {
            if let Some(status) = p.exit_status() {
                return Some(format!("{status}:\n{}", p.log_tail(30)));
            }
        }
        None
    }

    /// Stops both.
    pub fn stop(&self) {
        self.controller_manager
            .stop(std::time::Duration::from_secs(3));
        self.scheduler.stop(std::time::Duration::from_secs(3));
    }
}
