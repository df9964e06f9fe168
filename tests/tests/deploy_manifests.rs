//! The install manifests (`deploy/`, issue #5) on a real kube-apiserver, with the real `kubectl`
//! a user runs:
//!
//! - `kubectl kustomize deploy/` renders exactly the expected objects and no Secret (no key is
//!   ever committed);
//! - the render is accepted by server-side dry-run (which creates nothing), then applied for real
//!   without a single warning, and every object can be read back;
//! - the workloads carry the promised hardening: the controller has 2 replicas, runs as non-root
//!   with no capabilities; the speaker has hostNetwork, only `NET_RAW`, the SWIM key Secret mounted
//!   read-only, and tolerates control-plane taints;
//! - RBAC is least-privilege: `kubectl auth can-i` answers yes and no where it must, and the full
//!   `can-i --list` of each ServiceAccount, minus what every authenticated user may do, is exactly
//!   the granted set — nothing more;
//! - the minikube and kind examples pass server-side dry-run, as committed (placeholder ranges)
//!   and after the substitution `docs/install.md` tells the user to make;
//! - the environment the manifests set is what `ferrolb-controller` and `ferrolb-speaker` read,
//!   and it satisfies every required flag (the binaries are run with it);
//! - a kustomize `images:` override reaches both workloads.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Component, Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use ferrolb_tests::cluster::{ClusterOptions, TestCluster, repo_root, workspace_bin};
use serde_json::Value;

const NS: &str = "ferrolb-system";
const SPEAKER_SA: &str = "system:serviceaccount:ferrolb-system:ferrolb-speaker";
const CONTROLLER_SA: &str = "system:serviceaccount:ferrolb-system:ferrolb-controller";
/// A ServiceAccount with no bindings: what it may do, every authenticated identity may do.
const NOBODY_SA: &str = "system:serviceaccount:ferrolb-system:nobody";

/// The real `kubectl`, pointed at the test cluster.
struct Kubectl {
    kubeconfig: PathBuf,
}

impl Kubectl {
    fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        ferrolb_tests::cluster::kubectl(&self.kubeconfig, args, stdin).expect("running kubectl")
    }

    /// Runs and asserts success; returns (stdout, stderr).
    fn ok(&self, args: &[&str], stdin: Option<&str>) -> (String, String) {
        let out = self.run(args, stdin);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "kubectl {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        (stdout, stderr)
    }

    /// `kubectl auth can-i VERB RESOURCE [extra…] --as=SA`: true for "yes", false for "no".
    /// Anything else, or a warning that the resource type or verb is unknown (a typo here would
    /// make a "no" assertion pass vacuously), fails the test.
    fn can_i(&self, who: &str, verb: &str, resource: &str, extra: &[&str]) -> bool {
        let as_flag = format!("--as={who}");
        let mut args = vec!["auth", "can-i", verb, resource, as_flag.as_str()];
        args.extend_from_slice(extra);
        let out = self.run(&args, None);
        let stdout = String::from_utf8_lossy(&out.stdout).trim().to_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            !stderr.contains("doesn't have a resource type")
                && !stderr.contains("not a known verb"),
            "kubectl {args:?}: {stderr}"
        );
        match stdout.as_str() {
            "yes" => true,
            "no" => false,
            other => panic!("kubectl {args:?}: unexpected answer {other:?} ({stderr})"),
        }
    }

    /// The resource rules of `kubectl auth can-i --list` for `who` in namespace `ns`, as
    /// (resource, sorted resource names, sorted verbs). Non-resource URLs are left out.
    fn rules(&self, who: &str, ns: &str) -> BTreeSet<Rule> {
        let as_flag = format!("--as={who}");
        let (stdout, _) = self.ok(&["auth", "can-i", "--list", "-n", ns, &as_flag], None);
        let mut rules = BTreeSet::new();
        for line in stdout.lines().skip(1) {
            if line.starts_with(char::is_whitespace) || line.trim().is_empty() {
                continue; // a non-resource URL row
            }
            let resource = line.split_whitespace().next().unwrap().to_owned();
            let groups: Vec<Vec<String>> = line
                .split('[')
                .skip(1)
                .map(|g| {
                    let inner = g.split(']').next().unwrap();
                    let mut words: Vec<String> =
                        inner.split_whitespace().map(str::to_owned).collect();
                    words.sort();
                    words
                })
                .collect();
            assert_eq!(groups.len(), 3, "unexpected can-i --list row: {line:?}");
            rules.insert(Rule {
                resource,
                names: groups[1].clone(),
                verbs: groups[2].clone(),
            });
        }
        assert!(!rules.is_empty(), "no rules parsed from:\n{stdout}");
        rules
    }
}

#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Rule {
    resource: String,
    names: Vec<String>,
    verbs: Vec<String>,
}

fn rule(resource: &str, names: &[&str], verbs: &[&str]) -> Rule {
    let mut names: Vec<String> = names.iter().map(|s| (*s).to_owned()).collect();
    names.sort();
    let mut verbs: Vec<String> = verbs.iter().map(|s| (*s).to_owned()).collect();
    verbs.sort();
    Rule {
        resource: resource.to_owned(),
        names,
        verbs,
    }
}

/// Identity of one manifest object: (kind, namespace or "", name).
type ObjKey = (String, String, String);

fn key_of(obj: &Value) -> ObjKey {
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    (
        s(&obj["kind"]),
        s(&obj["metadata"]["namespace"]),
        s(&obj["metadata"]["name"]),
    )
}

fn key(kind: &str, ns: &str, name: &str) -> ObjKey {
    (kind.to_owned(), ns.to_owned(), name.to_owned())
}

fn parse_docs(yaml: &str) -> Vec<Value> {
    let docs: Vec<Value> = serde_saphyr::from_multiple(yaml).expect("rendered YAML parses");
    docs.into_iter().filter(|d| !d.is_null()).collect()
}

fn find<'a>(objs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    objs.iter().filter(|o| o["kind"] == kind).collect()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

fn env_value<'a>(container: &'a Value, name: &str) -> Option<&'a Value> {
    container["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)
}

/// The environment a container gets from its manifest; downward-API fields get sample values.
fn container_env(container: &Value) -> Vec<(String, String)> {
    let Some(env) = container["env"].as_array() else {
        return Vec::new();
    };
    env.iter()
        .map(|e| {
            let name = e["name"].as_str().unwrap().to_owned();
            let value = match (
                e["value"].as_str(),
                e["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
            ) {
                (Some(v), _) => v.to_owned(),
                (None, Some("spec.nodeName")) => "node-1".to_owned(),
                (None, Some("metadata.name")) => "pod-1".to_owned(),
                (None, Some("metadata.namespace")) => NS.to_owned(),
                (None, other) => panic!("env {name}: unexpected source {other:?}"),
            };
            (name, value)
        })
        .collect()
}

/// The manifest and the binary agree. Every `FERROLB_…` variable the container sets is one the
/// binary reads (its `--help` lists `[env: NAME=]`), and the manifest supplies every required
/// flag: started with exactly the manifest's environment (plus an unreadable kubeconfig), the
/// binary gets past argument parsing (clap exits 2 on a usage error) and fails on the kubeconfig.
fn check_cli_contract(container: &Value, scratch: &Path) {
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

/// 64 hex digits from the kernel's random source, like `openssl rand -hex 32`.
fn random_key_hex() -> String {
    let mut bytes = [0u8; 32];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut bytes)
        .unwrap();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `to` relative to the directory `from` (both absolute), for a kustomize resource path
/// (kustomize refuses absolute ones).
fn relative_path(from: &Path, to: &Path) -> PathBuf {
    let depth = from
        .components()
        .filter(|c| matches!(c, Component::Normal(_)))
        .count();
    let mut rel = PathBuf::new();
    for _ in 0..depth {
        rel.push("..");
    }
    rel.join(to.strip_prefix("/").unwrap())
}

#[tokio::test]
async fn deploy_manifests() {
    let cluster = TestCluster::start_with(ClusterOptions {
        install_crds: false,
        ..Default::default()
    })
    .await
    .expect("test cluster");
    let k = Kubectl {
        kubeconfig: cluster.kubeconfig().to_path_buf(),
    };
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

    // --- the namespace and the user's Secret first (docs/install.md), then dry-run ---
    let namespace_doc = serde_json::to_string(find(&objs, "Namespace")[0]).unwrap();
    k.ok(&["apply", "--server-side", "-f", "-"], Some(&namespace_doc));
    let key_literal = format!("--from-literal=key={}", random_key_hex());
    k.ok(
        &[
            "create",
            "secret",
            "generic",
            "ferrolb-memberlist",
            "-n",
            NS,
            &key_literal,
        ],
        None,
    );

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
    let (applied, warnings) = k.ok(&["apply", "--server-side", "-f", rendered_path], None);
    assert_eq!(
        applied
            .lines()
            .filter(|l| l.ends_with("serverside-applied"))
            .count(),
        objs.len(),
        "apply output:\n{applied}"
    );
    assert!(
        !warnings.to_lowercase().contains("warning"),
        "apply warned:\n{warnings}"
    );
    let (live_json, _) = k.ok(&["get", "-f", rendered_path, "-o", "json"], None);
    let live: Value = serde_json::from_str(&live_json).unwrap();
    let live_items = live["items"].as_array().unwrap().clone();
    let live_keys: BTreeSet<ObjKey> = live_items.iter().map(key_of).collect();
    assert_eq!(live_keys, expected, "objects read back");
    k.ok(
        &[
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/ipaddresspools.ferrolb.io",
            "crd/l2advertisements.ferrolb.io",
        ],
        None,
    );

    // --- the controller Deployment ---
    let deployment = find(&live_items, "Deployment")[0];
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ferrolb-controller");
    assert_ne!(pod["hostNetwork"], true);
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(pod["securityContext"]["runAsUser"], 65532);
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    assert_eq!(c["image"], "ferrolb:latest");
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
    assert!(
        pod["affinity"]["podAntiAffinity"].is_object()
            || pod["topologySpreadConstraints"].is_array(),
        "controller replicas are not spread over nodes"
    );

    // --- the speaker DaemonSet ---
    let daemonset = find(&live_items, "DaemonSet")[0];
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], "ferrolb-speaker");
    assert_eq!(pod["hostNetwork"], true);
    assert_eq!(pod["dnsPolicy"], "ClusterFirstWithHostNet");
    let containers = pod["containers"].as_array().unwrap();
    assert_eq!(containers.len(), 1);
    assert!(pod["initContainers"].is_null(), "no init containers");
    let c = &containers[0];
    assert_eq!(c["image"], "ferrolb:latest");
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
    // The SWIM key: Secret ferrolb-memberlist, key `key`, read-only at /etc/ferrolb/memberlist/key.
    let volumes = pod["volumes"].as_array().unwrap();
    let secret_volume = volumes
        .iter()
        .find(|v| v["secret"]["secretName"] == "ferrolb-memberlist")
        .expect("memberlist Secret volume");
    let items = secret_volume["secret"]["items"].as_array().unwrap();
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["key"], "key");
    let mount = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == secret_volume["name"])
        .expect("memberlist Secret mount");
    assert_eq!(mount["readOnly"], true);
    let key_file = format!(
        "{}/{}",
        mount["mountPath"].as_str().unwrap(),
        items[0]["path"].as_str().unwrap()
    );
    assert_eq!(key_file, "/etc/ferrolb/memberlist/key");
    if let Some(e) = env_value(c, "FERROLB_MEMBERLIST_KEY_FILE") {
        assert_eq!(e["value"], key_file.as_str());
    }
    assert_eq!(
        volumes.len(),
        1,
        "the speaker mounts nothing but its key: {volumes:?}"
    );
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

    // --- the manifests' environment is what the binaries read ---
    check_cli_contract(
        &find(&live_items, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0],
        cluster.dir(),
    );
    check_cli_contract(
        &find(&live_items, "DaemonSet")[0]["spec"]["template"]["spec"]["containers"][0],
        cluster.dir(),
    );

    // --- RBAC: yes where it must, no where it must not ---
    let all = ["--all-namespaces"];
    let in_ns = ["-n", NS];
    let in_default = ["-n", "default"];
    for (verb, resource, extra) in [
        ("list", "services", &all[..]),
        ("watch", "services", &all[..]),
        ("watch", "endpointslices.discovery.k8s.io", &all[..]),
        ("list", "nodes", &[][..]),
        ("watch", "ipaddresspools.ferrolb.io", &[][..]),
        ("list", "l2advertisements.ferrolb.io", &[][..]),
        ("create", "events.events.k8s.io", &in_default[..]),
        ("patch", "events.events.k8s.io", &in_default[..]),
        ("create", "events", &in_default[..]),
        ("get", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("watch", "secrets/ferrolb-memberlist", &in_ns[..]),
    ] {
        assert!(
            k.can_i(SPEAKER_SA, verb, resource, extra),
            "speaker cannot {verb} {resource} {extra:?}"
        );
    }
    for (verb, resource, extra) in [
        ("update", "services", &["--subresource=status", "-A"][..]),
        ("patch", "services", &["--subresource=status", "-A"][..]),
        ("patch", "services", &all[..]),
        ("delete", "services", &all[..]),
        ("create", "secrets", &in_ns[..]),
        ("list", "secrets", &in_ns[..]),
        ("list", "secrets", &all[..]),
        ("get", "secrets/other", &in_ns[..]),
        ("get", "secrets/ferrolb-memberlist", &in_default[..]),
        ("update", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("patch", "nodes", &[][..]),
        ("create", "ipaddresspools.ferrolb.io", &[][..]),
        (
            "patch",
            "ipaddresspools.ferrolb.io",
            &["--subresource=status"][..],
        ),
        ("create", "leases.coordination.k8s.io", &in_ns[..]),
        ("list", "pods", &all[..]),
        ("delete", "events", &in_default[..]),
    ] {
        assert!(
            !k.can_i(SPEAKER_SA, verb, resource, extra),
            "speaker can {verb} {resource} {extra:?}"
        );
    }
    for (verb, resource, extra) in [
        ("patch", "services", &["--subresource=status", "-A"][..]),
        ("update", "services", &["--subresource=status", "-A"][..]),
        ("list", "services", &all[..]),
        ("watch", "namespaces", &[][..]),
        ("list", "nodes", &[][..]),
        ("watch", "ipaddresspools.ferrolb.io", &[][..]),
        (
            "patch",
            "ipaddresspools.ferrolb.io",
            &["--subresource=status"][..],
        ),
        ("create", "events.events.k8s.io", &in_default[..]),
        ("create", "events", &in_default[..]),
        ("get", "leases.coordination.k8s.io", &in_ns[..]),
        ("create", "leases.coordination.k8s.io", &in_ns[..]),
        ("update", "leases.coordination.k8s.io", &in_ns[..]),
    ] {
        assert!(
            k.can_i(CONTROLLER_SA, verb, resource, extra),
            "controller cannot {verb} {resource} {extra:?}"
        );
    }
    for (verb, resource, extra) in [
        ("delete", "services", &all[..]),
        ("create", "services", &all[..]),
        ("patch", "services", &all[..]),
        ("list", "secrets", &all[..]),
        ("get", "secrets/ferrolb-memberlist", &in_ns[..]),
        ("create", "leases.coordination.k8s.io", &in_default[..]),
        ("delete", "leases.coordination.k8s.io", &in_ns[..]),
        ("patch", "ipaddresspools.ferrolb.io", &[][..]),
        ("delete", "ipaddresspools.ferrolb.io", &[][..]),
        (
            "patch",
            "l2advertisements.ferrolb.io",
            &["--subresource=status"][..],
        ),
        ("list", "endpointslices.discovery.k8s.io", &all[..]),
        ("patch", "nodes", &[][..]),
        ("list", "pods", &all[..]),
    ] {
        assert!(
            !k.can_i(CONTROLLER_SA, verb, resource, extra),
            "controller can {verb} {resource} {extra:?}"
        );
    }

    // --- RBAC: nothing more. Everything each ServiceAccount may do, minus what any
    // authenticated identity may do, is exactly the granted set. ---
    let read = ["get", "list", "watch"];
    let emit = ["create", "patch"];
    let speaker_everywhere = [
        rule("services", &[], &read),
        rule("nodes", &[], &read),
        rule("endpointslices.discovery.k8s.io", &[], &read),
        rule("ipaddresspools.ferrolb.io", &[], &read),
        rule("l2advertisements.ferrolb.io", &[], &read),
        rule("events", &[], &emit),
        rule("events.events.k8s.io", &[], &emit),
    ];
    let controller_everywhere = [
        rule("services", &[], &read),
        rule("namespaces", &[], &read),
        rule("nodes", &[], &read),
        rule("ipaddresspools.ferrolb.io", &[], &read),
        rule("l2advertisements.ferrolb.io", &[], &read),
        rule("services/status", &[], &["update", "patch"]),
        rule(
            "ipaddresspools.ferrolb.io/status",
            &[],
            &["update", "patch"],
        ),
        rule("events", &[], &emit),
        rule("events.events.k8s.io", &[], &emit),
    ];
    for ns in [NS, "default"] {
        let baseline = k.rules(NOBODY_SA, ns);
        let granted = |who: &str| -> BTreeSet<Rule> {
            k.rules(who, ns).difference(&baseline).cloned().collect()
        };
        let mut speaker: BTreeSet<Rule> = speaker_everywhere.iter().cloned().collect();
        let mut controller: BTreeSet<Rule> = controller_everywhere.iter().cloned().collect();
        if ns == NS {
            speaker.insert(rule("secrets", &["ferrolb-memberlist"], &["get", "watch"]));
            controller.insert(rule(
                "leases.coordination.k8s.io",
                &[],
                &["get", "create", "update", "patch"],
            ));
        }
        assert_eq!(granted(SPEAKER_SA), speaker, "speaker rules in {ns}");
        assert_eq!(
            granted(CONTROLLER_SA),
            controller,
            "controller rules in {ns}"
        );
    }

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

    // --- an `images:` override in an overlay reaches both workloads ---
    let overlay = tempfile::tempdir().unwrap();
    let base = relative_path(overlay.path(), &deploy);
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
