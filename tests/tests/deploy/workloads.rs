//! The controller Deployment and the speaker DaemonSet as applied, and the contract between their
//! environment and the binaries.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ferrolb_tests::cluster::workspace_bin;
use serde_json::Value;

use super::objects::{container_env, env_value, strings};

/// The image kustomization.yaml gives both workloads: tagged with the workspace version, like the
/// one tests/image/build.sh builds.
const IMAGE: &str = concat!("ferrolb:", env!("CARGO_PKG_VERSION"));

/// The controller Deployment: replicas, hardening, ports, probes, resources, env, spreading.
pub fn check_controller(deployment: &Value) {
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ferrolb-controller");
    assert_ne!(pod["hostNetwork"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], IMAGE);
    assert_eq!(c["imagePullPolicy"], "IfNotPresent");
    assert_eq!(strings(&c["command"]), ["ferrolb-controller"]);
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert!(strings(&sc["capabilities"]["add"]).is_empty());
    assert_ne!(sc["privileged"], true);
    assert_ne!(sc["runAsUser"], 0);
    let monitoring = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "monitoring")
        .expect("monitoring port");
    assert_eq!(monitoring["containerPort"], 7472);
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["livenessProbe"]["httpGet"]["port"], "monitoring");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert_eq!(c["readinessProbe"]["httpGet"]["port"], "monitoring");
    assert!(c["resources"]["requests"]["cpu"].is_string());
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());
    for (var, path) in [
        ("FERROLB_LEASE_NAMESPACE", "metadata.namespace"),
        ("FERROLB_IDENTITY", "metadata.name"),
    ] {
        let e = env_value(c, var).unwrap_or_else(|| panic!("controller env {var}"));
        assert_eq!(e["valueFrom"]["fieldRef"]["fieldPath"], path);
    }
    // The speakers' membership key, which it creates when absent (issue #27): the speakers' name.
    let secret = env_value(c, "FERROLB_MEMBERLIST_SECRET").expect("controller env");
    assert_eq!(secret["value"], "ferrolb-memberlist");
    assert!(env_value(c, "FERROLB_CREATE_MEMBERLIST_SECRET").is_none());
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object()
            || pod["topologySpreadConstraints"].is_array(),
        "controller replicas are not spread over nodes"
    );
}

/// The speaker DaemonSet: host network, `NET_RAW` only, ports, probes, the SWIM key read through
/// the API (nothing mounted), control-plane tolerations.
pub fn check_speaker(daemonset: &Value) {
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ferrolb-speaker");
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    assert!(pod["initContainers"].is_null(), "no init containers");
    let c = &containers[0];
    assert_eq!(c["image"], IMAGE);
    assert_eq!(strings(&c["command"]), ["ferrolb-speaker"]);
    let sc = &c["securityContext"];
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(strings(&sc["capabilities"]["add"]), ["NET_RAW"]);
    assert_ne!(sc["privileged"], true);
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
    let node_name = env_value(c, "FERROLB_NODE_NAME").expect("speaker env FERROLB_NODE_NAME");
    assert_eq!(
        node_name["valueFrom"]["fieldRef"]["fieldPath"],
        "spec.nodeName"
    );
    let ports: BTreeSet<(i64, String)> = c["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["containerPort"].as_i64().unwrap(),
                p["protocol"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        ports,
        [(7473, "TCP".to_owned()), (7947, "UDP".to_owned())]
            .into_iter()
            .collect()
    );
    assert_eq!(c["livenessProbe"]["httpGet"]["path"], "/livez");
    assert_eq!(c["readinessProbe"]["httpGet"]["path"], "/readyz");
    assert!(c["resources"]["requests"]["memory"].is_string());
    assert!(c["resources"]["limits"]["memory"].is_string());
    // Issue #32 G5.11: a CPU request (CFS shares protect the speaker on a busy node) and no CPU
    // limit (a quota throttles it past the stall threshold, and the quorum lease then fails it
    // over by design; docs/speaker.md F4).
    assert!(c["resources"]["requests"]["cpu"].is_string(), "{c}");
    assert!(c["resources"]["limits"]["cpu"].is_null(), "{c}");
    // The SWIM key (issue #27): read through the API from the Secret the controller creates, so
    // nothing is mounted — no pod waits in ContainerCreating for a Secret that does not exist.
    let secret = env_value(c, "FERROLB_MEMBERLIST_SECRET").expect("speaker env");
    assert_eq!(secret["value"], "ferrolb-memberlist");
    assert!(
        env_value(c, "FERROLB_MEMBERLIST_KEY_FILE").is_none(),
        "the speaker reads its key through the API, not from a file"
    );
    assert!(pod["volumes"].is_null(), "the speaker mounts nothing");
    assert!(c["volumeMounts"].is_null(), "the speaker mounts nothing");
    let tolerations = pod["tolerations"].as_array().unwrap();
    for taint in [
        "node-role.kubernetes.io/control-plane",
        "node-role.kubernetes.io/master",
    ] {
        assert!(
            tolerations.iter().any(|t| t["key"] == taint
                && t["operator"] == "Exists"
                && t["effect"] == "NoSchedule"),
            "no toleration for {taint}: {tolerations:?}"
        );
    }
}

/// The manifest and the binary agree. Every `FERROLB_…` variable the container sets is one the
/// binary reads (its `--help` lists `[env: NAME=]`), and the manifest supplies every required
/// flag: started with exactly the manifest's environment (plus an unreadable kubeconfig), the
/// binary gets past argument parsing (clap exits 2 on a usage error) and fails on the kubeconfig.
pub fn check_cli_contract(container: &Value, scratch: &Path) {
    let name = strings(&container["command"])[0].clone();
    let bin = workspace_bin(&name).unwrap_or_else(|e| panic!("building {name}: {e:#}"));
    let help = Command::new(&bin)
        .arg("--help")
        .env_clear()
        .output()
        .unwrap();
    assert!(help.status.success(), "{name} --help failed");
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let env = container_env(container);
    for (var, _) in &env {
        if var.starts_with("FERROLB_") {
            assert!(
                help.contains(&format!("[env: {var}=")),
                "the manifest sets {var}, which {name} does not read; --help:\n{help}"
            );
        }
    }
    let missing = scratch.join(format!("{name}-no-such-kubeconfig"));
    let mut child = Command::new(&bin)
        .env_clear()
        .envs(env)
        .env("FERROLB_KUBECONFIG", &missing)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{name} kept running with an unreadable kubeconfig");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(
        out.status.code(),
        Some(2),
        "{name} refused the manifest's arguments/environment:\n{stderr}"
    );
    assert!(
        !out.status.success() && stderr.contains(missing.to_str().unwrap()),
        "{name} did not stop at the kubeconfig ({}):\n{stderr}",
        out.status
    );
}
