//! Pieces of `deploy_manifests.rs`, one concern per file: the `kubectl` driver and RBAC rows
//! ([`kubectl`]), manifest objects as JSON ([`objects`]), the two workloads and their CLI contract
//! ([`workloads`]), RBAC both ways ([`rbac`]), the speaker's admission policy ([`admission`]),
//! the examples and overlays ([`examples`]), and the README's quickstart ([`quickstart`]).

pub mod admission;
pub mod examples;
pub mod kubectl;
pub mod objects;
pub mod quickstart;
pub mod rbac;
pub mod workloads;

use ferrolb_tests::cluster::{ClusterOptions, TestCluster};

use kubectl::Kubectl;

/// The install namespace.
pub const NS: &str = "ferrolb-system";
/// The speaker's ServiceAccount, as `--as` takes it.
pub const SPEAKER_SA: &str = "system:serviceaccount:ferrolb-system:ferrolb-speaker";
/// The controller's ServiceAccount, as `--as` takes it.
pub const CONTROLLER_SA: &str = "system:serviceaccount:ferrolb-system:ferrolb-controller";
/// A ServiceAccount with no bindings: what it may do, every authenticated identity may do.
pub const NOBODY_SA: &str = "system:serviceaccount:ferrolb-system:nobody";

/// A real API server without our CRDs (the manifests under test install them), and `kubectl`
/// pointed at it. Keep the cluster alive as long as the `Kubectl` is used.
///
/// # Panics
/// The test cluster could not start.
pub async fn cluster_without_crds() -> (TestCluster, Kubectl) {
    let cluster = TestCluster::start_with(ClusterOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .expect("test cluster");
    let k = Kubectl {
        kubeconfig: cluster.kubeconfig().to_path_buf(),
    };
    (cluster, k)
}
