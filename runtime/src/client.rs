//! The Kubernetes API client, built the same way by both binaries.

use std::path::Path;

use anyhow::Context;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// A client from `kubeconfig` if given, else the in-cluster configuration, else `$KUBECONFIG` /
/// `~/.kube/config` (`kube::Config::infer`).
///
/// # Errors
/// The file cannot be read or parsed, or no configuration is found.
pub async fn client(kubeconfig: Option<&Path>) -> anyhow::Result<kube::Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .context("loading kubeconfig")?
        }
        None => kube::Config::infer()
            .await
            .context("no in-cluster configuration and no kubeconfig")?,
    };
    kube::Client::try_from(config).context("building the API client")
}
