//! The install manifests (`deploy/`, issue #5) on a real kube-apiserver, with the real `kubectl`
//! a user runs:
//!
//! - `kubectl kustomize deploy/` renders exactly the expected objects and no Secret (no key is
//!   ever committed);
//! - the render is accepted by server-side dry-run (which creates nothing), then applied for real
//!   without a single warning, and every object can be read back;
//! - the workloads carry the promised hardening: the controller has 2 replicas, runs as non-root
//!   with no capabilities; the speaker has hostNetwork, only `NET_RAW`, mounts nothing (it reads
//!   the SWIM key Secret the controller creates through the API, issue #27), and tolerates
//!   control-plane taints;
//! - RBAC is least-privilege: `kubectl auth can-i` answers yes and no where it must, and the full
//!   `can-i --list` of each ServiceAccount, minus what every authenticated user may do, is exactly
//!   the granted set — nothing more;
//! - the minikube and kind examples pass server-side dry-run, as committed (placeholder ranges)
//!   and after the substitution `docs/install.md` tells the user to make;
//! - the environment the manifests set is what `ferrolb-controller` and `ferrolb-speaker` read,
//!   and it satisfies every required flag (the binaries are run with it);
//! - a kustomize `images:` override reaches both workloads;
//! - the README's quickstart: its pool, advertisement and Service pass server-side dry-run with
//!   the `NET` of minikube and of kind, and it waits for exactly the three CRDs
//!   ([`deploy::quickstart`], issue #28 item 4);
//! - the admission policy holds a speaker to reports naming its own Node: Pod-bound tokens of
//!   speaker Pods on two Nodes, and a token bound to no Pod, on the real API server (issue #27
//!   item 5, [`deploy::admission`]).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod deploy;

use std::collections::BTreeSet;

use ferrolb_tests::cluster::repo_root;

use deploy::NS;
use deploy::examples::{check_examples, check_image_override};
use deploy::objects::{ObjKey, find, key, key_of, parse_docs};
use deploy::quickstart::check_readme_quickstart;
use deploy::workloads::{check_cli_contract, check_controller, check_speaker};
use deploy::{admission, rbac};

#[tokio::test]
async fn deploy_manifests() {
    let (cluster, k) = deploy::cluster_without_crds().await;
    let root = repo_root();
    let deploy = root.join("deploy");

    // --- render: exactly the expected objects, and never a Secret ---
    let (rendered, _) = k.ok(&["kustomize", deploy.to_str().unwrap()], None);
    let objs = parse_docs(&rendered);
    let got: BTreeSet<ObjKey> = objs.iter().map(key_of).collect();
    assert_eq!(got.len(), objs.len(), "duplicate objects in the render");
    let expected: BTreeSet<ObjKey> = [
        key("Namespace", "", NS),
        key("CustomResourceDefinition", "", "ipaddresspools.ferrolb.io"),
        key(
            "CustomResourceDefinition",
            "",
            "l2advertisements.ferrolb.io",
        ),
        key("CustomResourceDefinition", "", "l2announcements.ferrolb.io"),
        key("ServiceAccount", NS, "ferrolb-controller"),
        key("ServiceAccount", NS, "ferrolb-speaker"),
        key("ClusterRole", "", "ferrolb-controller"),
        key("ClusterRole", "", "ferrolb-speaker"),
        key("ClusterRoleBinding", "", "ferrolb-controller"),
        key("ClusterRoleBinding", "", "ferrolb-speaker"),
        key("Role", NS, "ferrolb-controller"),
        key("Role", NS, "ferrolb-speaker"),
        key("RoleBinding", NS, "ferrolb-controller"),
        key("RoleBinding", NS, "ferrolb-speaker"),
        key("Deployment", NS, "ferrolb-controller"),
        key("DaemonSet", NS, "ferrolb-speaker"),
        key("ValidatingAdmissionPolicy", "", "ferrolb-speaker-own-node"),
        key(
            "ValidatingAdmissionPolicyBinding",
            "",
            "ferrolb-speaker-own-node",
        ),
    ]
    .into_iter()
    .collect();
    assert!(
        find(&objs, "Secret").is_empty(),
        "the base must not carry a Secret (no key is committed)"
    );
    assert_eq!(got, expected, "rendered objects");
    // The CRDs in the base are the generated files, unchanged by kustomize (same spec).
    for file in [
        "ferrolb.io_ipaddresspools.yaml",
        "ferrolb.io_l2advertisements.yaml",
        "ferrolb.io_l2announcements.yaml",
    ] {
        let text = std::fs::read_to_string(deploy.join("crds").join(file)).unwrap();
        let crd = parse_docs(&text).remove(0);
        let name = crd["metadata"]["name"].as_str().unwrap();
        let in_render = objs
            .iter()
            .find(|o| o["kind"] == "CustomResourceDefinition" && o["metadata"]["name"] == name)
            .unwrap();
        assert_eq!(
            in_render["spec"], crd["spec"],
            "{file} changed by kustomize"
        );
    }
    let rendered_file = cluster.dir().join("deploy-rendered.yaml");
    std::fs::write(&rendered_file, &rendered).unwrap();
    let rendered_path = rendered_file.to_str().unwrap();

    // --- the namespace first (a server-side dry run of namespaced objects needs it; there is no
    // manual key step, issue #27), then dry-run ---
    let namespace_doc = serde_json::to_string(find(&objs, "Namespace")[0]).unwrap();
    k.ok(&["apply", "--server-side", "-f", "-"], Some(&namespace_doc));

    let (dry, _) = k.ok(
        &[
            "apply",
            "--server-side",
            "--dry-run=server",
            "-f",
            rendered_path,
        ],
        None,
    );
    let dry_lines = dry
        .lines()
        .filter(|l| l.ends_with("(server dry run)"))
        .count();
    assert_eq!(dry_lines, objs.len(), "server dry run output:\n{dry}");
    // A dry run persists nothing.
    let probe = k.run(&["get", "deployment", "ferrolb-controller", "-n", NS], None);
    assert!(
        !probe.status.success() && String::from_utf8_lossy(&probe.stderr).contains("NotFound"),
        "dry run created the Deployment"
    );

    // --- for real: accepted without any warning (deprecated API, Pod Security, …) ---
    let live_items = k.apply_cleanly(rendered_path, objs.len());
    let live_keys: BTreeSet<ObjKey> = live_items.iter().map(key_of).collect();
    assert_eq!(live_keys, expected, "objects read back");
    k.ok(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/ipaddresspools.ferrolb.io",
            "crd/l2advertisements.ferrolb.io",
            "crd/l2announcements.ferrolb.io",
        ],
        None,
    );

    check_controller(find(&live_items, "Deployment")[0]);
    check_speaker(find(&live_items, "DaemonSet")[0]);

    // --- the manifests' environment is what the binaries read ---
    check_cli_contract(
        &find(&live_items, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0],
        cluster.dir(),
    );
    check_cli_contract(
        &find(&live_items, "DaemonSet")[0]["spec"]["template"]["spec"]["containers"][0],
        cluster.dir(),
    );

    rbac::check(&k);
    admission::check(&cluster.client().await.expect("admin client"), &cluster)
        .await
        .expect("admission policy");

    check_examples(&k, &deploy);
    check_image_override(&k, &deploy);
    check_readme_quickstart(&k, &root);
}
