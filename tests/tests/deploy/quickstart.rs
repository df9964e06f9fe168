//! The README's quickstart (issue #28 item 4): the objects its `kubectl apply -f - <<EOF` heredocs
//! create — an automatic pool (no numbers to fill in), its advertisement and the Service — are
//! accepted by the real API server with the CRDs installed (server-side dry run); and the CRDs its
//! `kubectl wait` names are the three the base installs. The whole block runs verbatim on real
//! nodes in `tests/tests/real_nodes.rs`.

use std::collections::BTreeSet;
use std::path::Path;

use ferrolb_tests::readme::{heredocs, quickstart_block};

use super::kubectl::Kubectl;
use super::objects::parse_docs;

/// Checks the README's quickstart against the real API server (module docs). The CRDs must be
/// installed and Established.
pub fn check_readme_quickstart(k: &Kubectl, root: &Path) {
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block = quickstart_block(&readme).unwrap();
    let docs = heredocs(block).unwrap();
    assert_eq!(docs.len(), 2, "the pool and the Service:\n{block}");
    let yaml = docs.join("\n---\n");
    assert!(!yaml.contains('$'), "nothing to fill in: {yaml}");
    let parsed = parse_docs(&yaml);
    let kinds: Vec<&str> = parsed
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["IPAddressPool", "L2Advertisement", "Service"]);
    assert!(
        parsed[0]["spec"]["autoAddresses"]["size"]
            .as_u64()
            .is_some()
            && parsed[0]["spec"].get("addresses").is_none(),
        "the quickstart's pool is automatic: {yaml}"
    );
    let (dry, _) = k.ok(
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&yaml),
    );
    assert_eq!(
        dry.lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count(),
        3,
        "{dry}"
    );
    let waited: BTreeSet<&str> = block
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("crd/"))
        .collect();
    let ours: BTreeSet<&str> = [
        "ipaddresspools.ferrolb.io",
        "l2advertisements.ferrolb.io",
        "l2announcements.ferrolb.io",
    ]
    .into();
    assert_eq!(waited, ours, "the CRDs the quickstart waits for");
    assert!(
        block.contains("--for condition=established"),
        "the quickstart waits until the CRDs are Established"
    );
}
