//! MetalLB's Go module source, for the `ferrolb migrate` tests: its sample configurations and
//! CRDs, read at test time and never copied into this repository.
//!
//! `tests/metallb/fetch.sh` downloads the module into the Go module cache (`tests/run.sh` runs it
//! and exports the directory as `FERROLB_METALLB_DIR`); without that variable, the directory is
//! looked up under `$(go env GOMODCACHE)`.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, bail};

/// The module and version, as the Go module cache names its directory.
pub const MODULE: &str = "go.universe.tf/metallb@v0.16.2";

/// The module directory: `FERROLB_METALLB_DIR`, else `$(go env GOMODCACHE)/`[`MODULE`].
///
/// # Errors
/// `go` could not be run, or the directory has no `configsamples/` (the module was not
/// downloaded: run `tests/metallb/fetch.sh`).
pub fn module_dir() -> anyhow::Result<PathBuf> {
    let dir = match std::env::var_os("FERROLB_METALLB_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            let out = Command::new("go")
                .args(["env", "GOMODCACHE"])
                .output()
                .context("running `go env GOMODCACHE` (or set FERROLB_METALLB_DIR)")?;
            let cache = String::from_utf8_lossy(&out.stdout);
            Path::new(cache.trim()).join(MODULE)
        }
    };
    if !dir.join("configsamples").is_dir() {
        bail!(
            "{} has no configsamples/: run tests/metallb/fetch.sh (tests/run.sh does)",
            dir.display()
        );
    }
    Ok(dir)
}
