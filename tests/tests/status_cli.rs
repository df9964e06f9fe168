//! `kubectl ferrolb status` against the lab (issue #28 item 2): real speakers, real controller,
//! real API server, and the real `kubectl` finding the `ferrolb` binary as its plugin
//! `kubectl-ferrolb` on `PATH` (the link the release ships).
//!
//! Three nodes, node-3 labelled `node.kubernetes.io/exclude-from-external-load-balancers`; one
//! Service holding an IP, one asking for an address in no pool. `--output json` must name: the
//! node and interface answering for the IP (the one the lab sees answer ARP), the pending Service
//! with the controller's reason, node-3 as excluded by the label, and every speaker reporting 3
//! members in agreement; after a speaker is killed, the live ones report 2 while the dead one's
//! report still says 3, and the counts disagree.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use ferrolb_tests::cluster::{k8s_bin, workspace_bin};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::lab::scenario::expected_owner;
use ferrolb_tests::objects::{announced_service, create_service, lb_service};
use ferrolb_tests::poll::until;
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 70);
const EXCLUDE: &str = "node.kubernetes.io/exclude-from-external-load-balancers";
const SETTLE: Duration = Duration::from_secs(60);

/// `kubectl ferrolb status ARGS` with the lab's kubeconfig; (exit code, stdout, stderr).
fn kubectl_ferrolb(plugins: &Path, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    let path = format!(
        "{}:{}",
        plugins.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = Command::new(k8s_bin("kubectl").unwrap())
        .args(["ferrolb", "status"])
        .args(args)
        .env("PATH", path)
        .env("KUBECONFIG", kubeconfig)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_status(plugins: &Path, kubeconfig: &Path) -> Value {
    let (code, stdout, stderr) = kubectl_ferrolb(plugins, kubeconfig, &["--output", "json"]);
    assert!(code == 0 || code == 2, "exit {code}: {stderr}");
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

fn member_counts(report: &Value) -> Vec<(String, Option<u64>)> {
    report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["name"].as_str().unwrap().to_owned(),
                n["members"].as_u64(),
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_ferrolb_status_names_owner_pending_reason_exclusion_and_membership() {
    let started = Instant::now();
    let mut lab = Lab::start(3, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    let kubeconfig = lab.cluster().kubeconfig().to_owned();
    let plugins = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(
        workspace_bin("ferrolb").unwrap(),
        plugins.path().join("kubectl-ferrolb"),
    )
    .unwrap();

    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch(
            "node-3",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {EXCLUDE: ""}}})),
        )
        .await
        .unwrap();
    // The key Secret's existence only is read (the lab's speakers use the lab's key file).
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "ferrolb-memberlist"},
        "data": {"keys": "AA=="},
    }))
    .unwrap();
    Api::<Secret>::namespaced(client.clone(), "ferrolb-system")
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.70"],
    )
    .await
    .unwrap();
    let mut wants_other = lb_service("default", "wants-other", &[("TCP", 80)], "Cluster");
    wants_other.metadata.annotations = Some(
        [(
            "ferrolb.io/loadBalancerIPs".to_owned(),
            "203.0.113.9".to_owned(),
        )]
        .into(),
    );
    create_service(&client, &wants_other).await.unwrap();
    let controller = ferrolb_tests::controller::ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ferrolb_tests::controller::ControllerOptions::new("status"),
    )
    .unwrap();
    let all = ["node-1", "node-2", "node-3"];
    for node in all {
        lab.start_speaker(node, &[]).unwrap();
    }
    let owner = expected_owner(VIP, &["node-1", "node-2"]);
    lab.wait_for_owner(0, VIP, Some(&owner), SETTLE)
        .await
        .unwrap();

    // Poll the CLI itself until every part has settled (the reports lag the ARP answers).
    let settled = |r: &Value| {
        let owner_named = r["addresses"]
            .as_array()
            .unwrap()
            .iter()
            .any(|a| a["ip"] == VIP.to_string() && a["node"] == owner.as_str());
        let pending_why = r["pending"].as_array().unwrap().iter().any(|p| {
            p["service"] == "default/wants-other"
                && p["reason"]
                    .as_str()
                    .is_some_and(|r| r.starts_with("AllocationFailed"))
        });
        let agreed = member_counts(r).iter().all(|(_, m)| *m == Some(3));
        owner_named && pending_why && agreed
    };
    let mut report = Value::Null;
    until("ferrolb status shows the settled lab", SETTLE, || {
        report = json_status(plugins.path(), &kubeconfig);
        let ok = settled(&report);
        async move { ok }
    })
    .await
    .unwrap_or_else(|e| {
        panic!(
            "{e}\nlast report: {report:#}\ncontroller: {}",
            controller.log_tail(30)
        )
    });
    println!("settled report after {:?}: {report:#}", started.elapsed());

    let address = report["addresses"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["ip"] == VIP.to_string())
        .unwrap();
    assert_eq!(address["node"], owner.as_str());
    assert_eq!(address["interfaces"], json!(["eth0"]));
    assert_eq!(address["services"], json!(["default/svc"]));
    let pending = report["pending"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["service"] == "default/wants-other")
        .unwrap();
    assert!(
        pending["reason"]
            .as_str()
            .unwrap()
            .contains("requested IP 203.0.113.9 is in no pool"),
        "{pending}"
    );
    let node3 = report["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["name"] == "node-3")
        .unwrap();
    assert_eq!(node3["excluded"], json!([format!("label {EXCLUDE}=")]));
    for n in ["node-1", "node-2"] {
        let node = report["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|x| x["name"] == n)
            .unwrap();
        assert_eq!(node["excluded"], json!([]), "{n}");
    }
    assert_eq!(report["membership"]["agree"], true);
    assert_eq!(report["membership"]["reporting"], 3);
    assert_eq!(report["key"]["exists"], true);
    assert_eq!(report["kubernetes"]["supported"], true);
    assert_eq!(report["metallb"]["active"], false);
    // The test cluster has no kube-proxy ConfigMap.
    assert_eq!(report["kubeProxy"]["mode"], "unknown");
    // Exit status 2: the pending Service and the excluded node need attention.
    let (code, text, stderr) = kubectl_ferrolb(plugins.path(), &kubeconfig, &[]);
    assert_eq!(code, 2, "{stderr}");
    assert!(text.contains("default/wants-other"), "{text}");
    assert!(text.contains(&format!("{VIP}")), "{text}");
    println!("{text}");

    // A speaker dies: the others count 2, its own last report still says 3.
    let victim = all.iter().copied().find(|n| *n != owner).unwrap();
    lab.signal_speaker(victim, "KILL").unwrap();
    until("the counts disagree", SETTLE, || {
        report = json_status(plugins.path(), &kubeconfig);
        let counts = member_counts(&report);
        let ok = report["membership"]["agree"] == false
            && counts
                .iter()
                .all(|(n, m)| *m == Some(if n == victim { 3 } else { 2 }));
        async move { ok }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\nlast report: {report:#}"));
    assert!(
        report["attention"].as_array().unwrap().iter().any(|a| a
            .as_str()
            .unwrap()
            .contains("the speakers disagree on the membership")),
        "{report:#}"
    );
    println!("whole test: {:?}", started.elapsed());
}
