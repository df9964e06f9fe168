//! Purity is a boundary: the crates that hold ferrolb's rules (API types, address logic, IPAM,
//! layer-2 core) must not depend on the Kubernetes client, an async runtime or an HTTP stack, so
//! that they stay deterministic, fast to test and usable from both binaries. This test asks Cargo
//! for each pure crate's normal (non-dev, non-build) dependency tree and fails on any forbidden
//! crate, naming it.

use std::path::Path;
use std::process::Command;

/// The pure crates of the workspace (package names).
const PURE: &[&str] = &["ferrolb-crds", "ferrolb-ipam", "ferrolb-l2", "ferrolb-sim"];

/// Whether a dependency (crate name) is forbidden in a pure crate: the `kube` facade, its client
/// and runtime (`kube-core` and `kube-derive` are allowed: types and derive only), and anything of
/// tokio, hyper or tower.
fn forbidden(name: &str) -> bool {
    matches!(name, "kube" | "kube-client" | "kube-runtime")
        || ["tokio", "hyper", "tower"]
            .iter()
            .any(|p| name == *p || name.starts_with(&format!("{p}-")))
}

/// `cargo tree -e normal -p <krate> --prefix none`: one `name vX.Y.Z …` line per dependency.
fn tree(krate: &str) -> String {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("crds/ has a parent");
    let out = Command::new(env!("CARGO"))
        .current_dir(workspace)
        .args(["tree", "-e", "normal", "-p", krate, "--prefix", "none"])
        .output()
        .expect("cargo tree runs");
    assert!(
        out.status.success(),
        "cargo tree -p {krate} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("cargo tree prints UTF-8")
}

#[test]
fn pure_crates_depend_on_no_client_runtime_or_http_stack() {
    let mut bad = Vec::new();
    for krate in PURE {
        let tree = tree(krate);
        let names: Vec<&str> = tree
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        assert!(
            names.first() == Some(krate),
            "cargo tree -p {krate} printed an unexpected first line: {tree}"
        );
        for name in names.iter().filter(|n| forbidden(n)) {
            bad.push(format!("{krate} depends on {name}"));
        }
    }
    bad.sort();
    bad.dedup();
    assert!(bad.is_empty(), "impure dependencies:\n{}", bad.join("\n"));
}

#[test]
fn the_filter_catches_what_it_should() {
    for name in ["kube", "kube-client", "kube-runtime", "tokio", "tokio-util"] {
        assert!(forbidden(name), "{name}");
    }
    for name in ["hyper", "hyper-util", "tower", "tower-http"] {
        assert!(forbidden(name), "{name}");
    }
    for name in [
        "kube-core",
        "kube-derive",
        "k8s-openapi",
        "serde",
        "towering",
    ] {
        assert!(!forbidden(name), "{name}");
    }
}
