//! The minikube and kind examples, and a kustomize `images:` overlay.

use std::path::Path;

use super::kubectl::Kubectl;
use super::objects::{find, parse_docs, relative_path, strings};

/// Each example: one pool, an L2Advertisement covering it, a LoadBalancer Service; placeholder
/// ranges from the documentation ranges; server-side dry-run as committed and after the
/// substitution `docs/install.md` tells the user to make.
pub fn check_examples(k: &Kubectl, deploy: &Path) {
    // --- the examples: a pool, an advertisement covering it, a demo LoadBalancer Service ---
    for (example, placeholder, substitute) in [
        ("minikube", "192.0.2.", "192.168.49."),
        ("kind", "198.51.100.", "172.18.255."),
    ] {
        let dir = deploy.join("examples").join(example);
        let dir = dir.to_str().unwrap();
        let (text, _) = k.ok(&["kustomize", dir], None);
        let docs = parse_docs(&text);
        let pools = find(&docs, "IPAddressPool");
        let l2s = find(&docs, "L2Advertisement");
        assert_eq!((pools.len(), l2s.len()), (1, 1), "{example}: {docs:?}");
        let pool_name = pools[0]["metadata"]["name"].as_str().unwrap();
        assert!(
            strings(&l2s[0]["spec"]["ipAddressPools"]).contains(&pool_name.to_owned()),
            "{example}: the L2Advertisement does not cover pool {pool_name}"
        );
        let addresses = strings(&pools[0]["spec"]["addresses"]);
        assert!(
            !addresses.is_empty() && addresses.iter().all(|a| a.starts_with(placeholder)),
            "{example}: committed addresses must be documentation-range placeholders: {addresses:?}"
        );
        let services = find(&docs, "Service");
        assert!(
            services.iter().any(|s| s["spec"]["type"] == "LoadBalancer"),
            "{example}: no LoadBalancer Service"
        );
        let (dry, _) = k.ok(
            &["apply", "--server-side", "--dry-run=server", "-k", dir],
            None,
        );
        assert_eq!(
            dry.lines()
                .filter(|l| l.ends_with("(server dry run)"))
                .count(),
            docs.len(),
            "{example}: {dry}"
        );
        // What docs/install.md's `sed` produces is valid too.
        let substituted = text.replace(placeholder, substitute);
        assert_ne!(substituted, text);
        k.ok(
            &["apply", "--server-side", "--dry-run=server", "-f", "-"],
            Some(&substituted),
        );
    }
}

/// An `images:` override in an overlay reaches both workloads.
pub fn check_image_override(k: &Kubectl, deploy: &Path) {
    // --- an `images:` override in an overlay reaches both workloads ---
    let overlay = tempfile::tempdir().unwrap();
    let base = relative_path(overlay.path(), deploy);
    std::fs::write(
        overlay.path().join("kustomization.yaml"),
        format!(
            "resources:\n- {}\nimages:\n- name: ferrolb\n  newName: registry.example/ferrolb\n  newTag: v9.9.9\n",
            base.display()
        ),
    )
    .unwrap();
    let (text, _) = k.ok(&["kustomize", overlay.path().to_str().unwrap()], None);
    let docs = parse_docs(&text);
    for kind in ["Deployment", "DaemonSet"] {
        let image = &find(&docs, kind)[0]["spec"]["template"]["spec"]["containers"][0]["image"];
        assert_eq!(image, "registry.example/ferrolb:v9.9.9", "{kind}");
    }
}
