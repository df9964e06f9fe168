//! The real `kubectl` (built with the cluster binaries), run against a kubeconfig.

use std::io::Write;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use anyhow::Context;

use super::k8s_bin;

/// Runs `kubectl --kubeconfig <kubeconfig> <args…>` with `stdin` piped in if given, and returns its
/// output whatever the exit status. kubectl runs in its own process group, so a Ctrl-C at the
/// terminal reaches the caller (which cleans up) rather than kubectl in the middle of a step.
///
/// # Errors
/// kubectl could not be built, started, fed or waited for.
pub fn kubectl(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> anyhow::Result<Output> {
    let mut child = Command::new(k8s_bin("kubectl")?)
        .process_group(0)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting kubectl")?;
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes())?;
    }
    Ok(child.wait_with_output()?)
}
