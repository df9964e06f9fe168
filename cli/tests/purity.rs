//! The conversion is pure: `src/migrate/` uses no kube client, no async runtime and no file,
//! network, process or environment I/O — the binary and `src/cluster.rs` read the input. (The
//! crate itself depends on kube for `--from-cluster`, so `crds/tests/purity.rs`'s dependency-tree
//! check cannot tell; this test reads the module's source instead.)
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

/// Paths a pure module must not name.
const FORBIDDEN: [&str; 9] = [
    "kube::",
    "kube_client",
    "kube_runtime",
    "tokio",
    "std::fs",
    "std::io",
    "std::net::Tcp",
    "std::process",
    "std::env",
];

#[test]
fn the_migrate_module_does_no_io() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/migrate");
    let mut files = 0;
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let text = std::fs::read_to_string(&path).unwrap();
        files += 1;
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or_default();
            for f in FORBIDDEN.iter().filter(|f| code.contains(*f)) {
                bad.push(format!("{}:{}: {f}", path.display(), n + 1));
            }
        }
    }
    assert!(files >= 4, "only {files} files in {}", dir.display());
    assert!(
        bad.is_empty(),
        "I/O in the pure conversion:\n{}",
        bad.join("\n")
    );
}

#[test]
fn the_check_sees_a_use_of_the_client() {
    let line = "use kube::api::Api;";
    assert!(FORBIDDEN.iter().any(|f| line.contains(f)));
}
