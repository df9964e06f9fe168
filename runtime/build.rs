//! Records the git commit the binaries are built from (`FERROLB_GIT_COMMIT`, `unknown` outside a
//! checkout or without git), for the startup line and the `build_info` metric.
//!
//! Cargo re-runs this script when `HEAD` moves: the `HEAD` file itself (a checkout), the branch
//! ref it points to (a commit on that branch) and `packed-refs`, all found through git so that
//! linked worktrees work too.
use std::path::PathBuf;
use std::process::Command;

/// `git <args>`'s trimmed stdout, `None` if git is missing or fails.
fn git(args: &[&str]) -> Option<String> {
    Command::new("git")
        .args(args)
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .map(|s| s.trim().to_owned())
}

fn main() {
    let commit = std::env::var("FERROLB_GIT_COMMIT")
        .ok()
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]));
    println!(
        "cargo:rustc-env=FERROLB_GIT_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
    println!("cargo:rerun-if-env-changed=FERROLB_GIT_COMMIT");
    let git_dir = git(&["rev-parse", "--absolute-git-dir"]).map(PathBuf::from);
    let common =
        git(&["rev-parse", "--path-format=absolute", "--git-common-dir"]).map(PathBuf::from);
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    let mut watched = Vec::new();
    if let Some(dir) = &git_dir {
        watched.push(dir.join("HEAD"));
    }
    if let Some(dir) = common.as_ref().or(git_dir.as_ref()) {
        if let Some(branch) = &branch {
            watched.push(dir.join(branch));
        }
        watched.push(dir.join("packed-refs"));
    }
    for path in watched.into_iter().filter(|p| p.exists()) {
        println!("cargo:rerun-if-changed={}", path.display());
    }
}
