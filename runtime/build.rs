//! Records the git commit the binaries are built from (`FERROLB_GIT_COMMIT`, `unknown` outside a
//! checkout or without git), for the startup line and the `build_info` metric.
use std::process::Command;

fn main() {
    let commit = std::env::var("FERROLB_GIT_COMMIT").ok().or_else(|| {
        Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .output()
            .ok()
            .filter(|o| o.status.success())
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .map(|s| s.trim().to_owned())
    });
    println!(
        "cargo:rustc-env=FERROLB_GIT_COMMIT={}",
        commit.unwrap_or_else(|| "unknown".into())
    );
    println!("cargo:rerun-if-env-changed=FERROLB_GIT_COMMIT");
    println!("cargo:rerun-if-changed=../.git/HEAD");
}
