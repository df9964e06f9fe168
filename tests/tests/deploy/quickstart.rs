//! The README's quickstart (issue #28 item 4): the objects its `kubectl apply -f - <<EOF` heredocs
//! create — the pool, its advertisement and the Service — are accepted by the real API server
//! with the CRDs installed (server-side dry run), after the `NET` each cluster's recipe computes
//! (minikube's `192.168.49`, kind's `172.18.255`); and the CRDs its `kubectl wait` names are the
//! three the base installs.

use std::collections::BTreeSet;
use std::path::Path;

use super::kubectl::Kubectl;
use super::objects::parse_docs;

/// The marker above the README's command block under test.
const MARKER: &str = "<!-- quickstart:";

/// The README's quickstart command block: the first ```` ```sh ```` block after [`MARKER`].
fn block(readme: &str) -> &str {
    let from = &readme[readme
        .find(MARKER)
        .expect("the quickstart marker in README.md")..];
    let start = from
        .find("```sh\n")
        .expect("a ```sh block after the marker")
        + "```sh\n".len();
    let body = &from[start..];
    &body[..body.find("\n```").expect("the block's end")]
}

/// The heredocs of `block` (`… <<EOF` up to a line `EOF`), in order.
fn heredocs(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current: Option<Vec<&str>> = None;
    for line in block.lines() {
        match current.as_mut() {
            None if line.contains("<<EOF") => current = Some(Vec::new()),
            None => {}
            Some(_) if line == "EOF" => out.push(current.take().unwrap().join("\n")),
            Some(lines) => lines.push(line),
        }
    }
    assert!(current.is_none(), "an unterminated heredoc in:\n{block}");
    out
}

/// Checks the README's quickstart against the real API server (module docs). The CRDs must be
/// installed and Established.
pub fn check_readme_quickstart(k: &Kubectl, root: &Path) {
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let block = block(&readme);
    let docs = heredocs(block);
    assert_eq!(docs.len(), 2, "the pool and the Service:\n{block}");
    let yaml = docs.join("\n---\n");
    assert!(yaml.contains("${NET}"), "the pool takes the node network");
    let kinds: Vec<String> = parse_docs(&yaml.replace("${NET}", "192.0.2"))
        .iter()
        .map(|d| d["kind"].as_str().unwrap_or_default().to_owned())
        .collect();
    assert_eq!(kinds, ["IPAddressPool", "L2Advertisement", "Service"]);
    for net in ["192.168.49", "172.18.255"] {
        let (dry, _) = k.ok(
            &["apply", "--server-side", "--dry-run=server", "-f", "-"],
            Some(&yaml.replace("${NET}", net)),
        );
        assert_eq!(
            dry.lines()
                .filter(|l| l.ends_with("(server dry run)"))
                .count(),
            3,
            "NET={net}: {dry}"
        );
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heredocs_are_cut_at_their_eof() {
        let b = "a <<EOF\nx: 1\nEOF\nb\nc <<EOF # note\ny: 2\nz: 3\nEOF\n";
        assert_eq!(heredocs(b), ["x: 1", "y: 2\nz: 3"]);
    }
}
