//! Where the test cluster's binaries come from.
//!
//! - Kubernetes and etcd: built by `tests/cluster/build.sh` from the versions pinned in
//!   `tests/cluster/go/go.mod`, cached outside the repository (`$FERROLB_CACHE`, default
//!   `~/.cache/ferrolb`). `FERROLB_K8S_BIN` overrides the directory. The first call runs the build
//!   script (a no-op once cached).
//! - `helm` (the chart test): built by `tests/cluster/build-helm.sh` from the version pinned in
//!   `tests/cluster/helm/go.mod`, cached the same way; `FERROLB_HELM_BIN` overrides the directory.
//! - ferrolb's own binaries: the workspace's target directory (`CARGO_TARGET_DIR` or `target/`),
//!   built on demand with `cargo build` when missing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use anyhow::{Context, bail};

/// The repository root (parent of the `tests/` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Path of a Kubernetes/etcd binary: `etcd`, `kube-apiserver`, `kube-proxy` or `kubectl`.
///
/// # Errors
/// The build script failed or did not produce the binary.
pub fn k8s_bin(name: &str) -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| k8s_bin_dir().map_err(|e| format!("{e:#}")))
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let path = dir.join(name);
    if !path.is_file() {
        bail!("{} is missing; run tests/cluster/build.sh", path.display());
    }
    Ok(path)
}

/// Path of `helm`, from `$FERROLB_HELM_BIN` or built (once, then cached) by
/// `tests/cluster/build-helm.sh`.
///
/// # Errors
/// The build script failed or did not produce the binary.
pub fn helm_bin() -> anyhow::Result<PathBuf> {
    static DIR: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    let dir = DIR
        .get_or_init(|| {
            cached_bin_dir("FERROLB_HELM_BIN", "tests/cluster/build-helm.sh")
                .map_err(|e| format!("{e:#}"))
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let path = dir.join("helm");
    if !path.is_file() {
        bail!(
            "{} is missing; run tests/cluster/build-helm.sh",
            path.display()
        );
    }
    Ok(path)
}

fn k8s_bin_dir() -> anyhow::Result<PathBuf> {
    cached_bin_dir("FERROLB_K8S_BIN", "tests/cluster/build.sh")
}

/// The directory in `$env`, else the one `script` (a path from the repository root, e.g.
/// `tests/cluster/build.sh`) builds, or finds cached, and prints on its last line.
///
/// # Errors
/// The script cannot be run or fails (its stderr is in the error).
pub fn cached_bin_dir(env: &str, script: &str) -> anyhow::Result<PathBuf> {
    if let Some(dir) = std::env::var_os(env) {
        return Ok(PathBuf::from(dir));
    }
    let script = repo_root().join(script);
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed: {}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    let dir = stdout.lines().last().unwrap_or_default().trim();
    Ok(PathBuf::from(dir))
}

/// The workspace target directory.
pub fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"))
}

/// Path of one of ferrolb's binaries (`ferrolb-controller`, `ferrolb-speaker`, …) in the debug
/// profile, building its package first if it is missing.
///
/// # Errors
/// `cargo build` failed.
pub fn workspace_bin(name: &str) -> anyhow::Result<PathBuf> {
    let path = target_dir().join("debug").join(name);
    if !path.is_file() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let status = Command::new(cargo)
            .args(["build", "--bin", name])
            .current_dir(repo_root())
            .status()
            .context("running cargo build")?;
        if !status.success() || !path.is_file() {
            bail!("could not build {name}");
        }
    }
    Ok(path)
}
