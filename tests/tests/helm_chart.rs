//! The Helm chart `deploy/helm/ferrolb/` (issue #12 part 3), with the real `helm` (v3.22.0, built
//! from the Go module proxy by `tests/cluster/build-helm.sh`) and the real `kubectl`:
//!
//! - `helm lint --strict` passes, with the default values and with every value changed, and
//!   fails on misspelt or mistyped values (values.schema.json); `helm template` fails on
//!   `namespace.create` without a `namespace.name` (the chart would create the release namespace);
//! - `helm template` with the default values renders the objects of `kubectl kustomize deploy/`,
//!   field for field, but for the differences docs/install.md ("Helm") documents, each asserted
//!   here: no Namespace object (the release namespace, made by `--create-namespace`; issue #28),
//!   Helm's four standard labels on every object's metadata, the image tag (the chart's
//!   appVersion instead of `latest`), the speaker's `priorityClassName: system-node-critical` and
//!   `helm.sh/resource-policy: keep` on the CRDs. Like the base, the chart renders **no** Secret:
//!   the controller creates the membership key (issue #27), so two `helm template` runs (what
//!   Argo CD and Flux do on every sync) render byte-identical output — with the old `randBytes`
//!   Secret every render drew a new key;
//! - every value reaches the fields it promises; the environment the values set is what
//!   `ferrolb-controller` and `ferrolb-speaker` read and accept; the metrics Services select the
//!   workloads' pods and their `monitoring` ports, and the ServiceMonitor selects both Services;
//!   that render passes the API server's server-side dry run;
//! - on the test cluster: `helm install -n ferrolb-system --create-namespace --dry-run=server`
//!   passes and creates nothing; `helm install -n ferrolb-system --create-namespace` (the
//!   convention MetalLB, Cilium and PureLB document, which failed while the chart made the
//!   Namespace itself: issue #28) creates every object without a warning; the deploy test's RBAC checks (`kubectl auth can-i`,
//!   yes and no, and the full `can-i --list`) hold; `helm upgrade` applies a changed value and
//!   leaves the key the controller created alone; `helm uninstall` removes the workloads and RBAC
//!   but keeps the CRDs (resource-policy keep) and never touches that key, nor the namespace
//!   `--create-namespace` made (Helm never deletes it; `ferrolb uninstall` deletes the key).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[allow(dead_code)]
// The examples and workload checks of deploy_manifests.rs are not all used here.
mod deploy;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Output};

use ferrolb_tests::chart::{CHART_DIR, CHART_VERSION};
use ferrolb_tests::cluster::{helm_bin, repo_root};
use serde_json::{Value, json};

use deploy::NS;
use deploy::kubectl::Kubectl;
use deploy::objects::{ObjKey, env_value, find, key, key_of, parse_docs, strings};
use deploy::rbac;
use deploy::workloads::check_cli_contract;

/// The labels Helm charts put on every object, with the values this chart gives them for the
/// release `ferrolb`.
fn helm_labels() -> [(&'static str, String); 4] {
    [
        ("helm.sh/chart", format!("ferrolb-{CHART_VERSION}")),
        ("app.kubernetes.io/managed-by", "Helm".to_owned()),
        ("app.kubernetes.io/instance", "ferrolb".to_owned()),
        ("app.kubernetes.io/version", CHART_VERSION.to_owned()),
    ]
}

const SECRET: &str = "ferrolb-memberlist";
const CRDS: [&str; 3] = [
    "ipaddresspools.ferrolb.io",
    "l2advertisements.ferrolb.io",
    "l2announcements.ferrolb.io",
];

/// The real `helm`, with its own cache/config/data directories, pointed at the test cluster.
struct Helm {
    bin: PathBuf,
    home: tempfile::TempDir,
    kubeconfig: PathBuf,
}

impl Helm {
    fn run(&self, args: &[&str]) -> Output {
        let home = self.home.path();
        Command::new(&self.bin)
            .args(args)
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env("KUBECONFIG", &self.kubeconfig)
            .output()
            .expect("running helm")
    }

    /// Runs and asserts success; returns (stdout, stderr).
    fn ok(&self, args: &[&str]) -> (String, String) {
        let out = self.run(args);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(
            out.status.success(),
            "helm {args:?} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
            out.status
        );
        (stdout, stderr)
    }
}

/// Values that change every default, the namespace included.
const CUSTOM_VALUES: &str = r#"
namespace: {name: lb-system, create: true}
crds: {create: false}
image: {repository: registry.example/ferrolb, tag: v9.9.9, pullPolicy: Always}
imagePullSecrets: [{name: regcred}]
lbClass: example.com/l2
defaultClass: false
excludeLbLabel: honour
memberlist: {existingSecret: my-key}
controller:
  resources: {requests: {cpu: 50m, memory: 100Mi}, limits: {memory: 1Gi}}
  tolerations: [{key: dedicated, operator: Equal, value: lb, effect: NoSchedule}]
  priorityClassName: system-cluster-critical
  extraEnv: [{name: FERROLB_LOG_FORMAT, value: json}]
speaker:
  timingProfile: safe
  interfaces: [eth1, bond0.100]
  excludeInterfaces: [default, "br-*"]
  resources: {requests: {cpu: 30m, memory: 40Mi}, limits: {memory: 200Mi}}
  tolerations: [{operator: Exists}]
  priorityClassName: ferrolb-speaker
  extraEnv: [{name: FERROLB_LOG_FORMAT, value: json}]
serviceMonitor: {enabled: true, interval: 15s, labels: {release: prom}}
"#;

#[tokio::test]
async fn helm_chart() {
    let (cluster, k) = deploy::cluster_without_crds().await;
    let helm = Helm {
        bin: helm_bin().expect("helm"),
        home: tempfile::tempdir().unwrap(),
        kubeconfig: cluster.kubeconfig().to_path_buf(),
    };
    let root = repo_root();
    let chart = root.join(CHART_DIR);
    let chart = chart.to_str().unwrap();
    let custom = cluster.dir().join("custom-values.yaml");
    std::fs::write(&custom, CUSTOM_VALUES).unwrap();
    let custom = custom.to_str().unwrap();

    // --- lint ---
    let (version, _) = helm.ok(&["version", "--short"]);
    assert!(version.starts_with("v3.22.0"), "helm version {version}");
    helm.ok(&["lint", "--strict", chart]);
    helm.ok(&["lint", "--strict", chart, "-f", custom]);
    // values.schema.json refuses misspelt and mistyped values instead of rendering them silently.
    for (set, error) in [
        (
            "ignoreExcludeLB=true",
            "additional properties 'ignoreExcludeLB' not allowed",
        ),
        ("speaker.timingProfile=bogus", "/speaker/timingProfile"),
        ("defaultClass=maybe", "/defaultClass"),
        (
            "speaker.interfaces={eth0,a-name-longer-than-15}",
            "/speaker/interfaces/1",
        ),
        ("speaker.interfaces={eth0:1}", "/speaker/interfaces/0"),
        (
            "speaker.excludeInterfaces={veth*,*}",
            "/speaker/excludeInterfaces/1",
        ),
        (
            "speaker.excludeInterfaces={eth0:1}",
            "/speaker/excludeInterfaces/0",
        ),
        ("image.pullPolicy=Sometimes", "/image/pullPolicy"),
        (
            "controller.resource.limits.memory=1Gi",
            "'resource' not allowed",
        ),
    ] {
        let out = helm.run(&["lint", "--strict", chart, "--set", set]);
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && text.contains(error),
            "helm lint --set {set}: {}\n{text}",
            out.status
        );
    }
    // Creating the release namespace itself, which `--create-namespace` (or any existing
    // namespace) would refuse at install time: refused at render time with the way out (`helm
    // lint` reports a template's `fail` only as INFO, so `helm template` is what is checked).
    let out = helm.run(&[
        "template",
        "ferrolb",
        chart,
        "--set",
        "namespace.create=true",
    ]);
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && text.contains("namespace.create: true needs namespace.name"),
        "helm template --set namespace.create=true: {}\n{text}",
        out.status
    );

    // --- defaults: the kustomize base, but for the documented differences ---
    let (rendered, _) = helm.ok(&["template", "ferrolb", chart, "--namespace", NS]);
    let (kustomized, _) = k.ok(&["kustomize", root.join("deploy").to_str().unwrap()], None);
    // Both parsed by kubectl, i.e. as the API server gets them: the templates keep the base's
    // YAML 1.1 octal `defaultMode: 0400`, which a YAML 1.2 parser would read as 400.
    let base = as_kubectl_reads(&k, &kustomized);
    // No key in the chart, so a second render (every GitOps sync renders again) is the same.
    let (again, _) = helm.ok(&["template", "ferrolb", chart, "--namespace", NS]);
    assert!(
        again == rendered,
        "two `helm template` runs differ: every Argo CD / Flux sync would apply new objects"
    );
    let chart_objs = without_documented_differences(as_kubectl_reads(&k, &rendered), &base);
    // The base's Namespace is the one object the chart leaves to `--create-namespace`.
    let base: Vec<Value> = base
        .into_iter()
        .filter(|o| o["kind"] != "Namespace")
        .collect();
    let by_key = |objs: Vec<Value>| -> BTreeMap<ObjKey, Value> {
        let map: BTreeMap<ObjKey, Value> = objs.into_iter().map(|o| (key_of(&o), o)).collect();
        map
    };
    let chart_map = by_key(chart_objs);
    let base_map = by_key(base.clone());
    assert_eq!(
        chart_map.keys().collect::<Vec<_>>(),
        base_map.keys().collect::<Vec<_>>(),
        "the chart renders other objects than the kustomize base"
    );
    for (id, chart_obj) in &chart_map {
        let mut differences = Vec::new();
        diff("", chart_obj, &base_map[id], &mut differences);
        assert!(
            differences.is_empty(),
            "{id:?} differs between `helm template` and `kubectl kustomize deploy/`:\n{}",
            differences.join("\n")
        );
    }

    // --- every value reaches its fields ---
    let (rendered, _) = helm.ok(&["template", "ferrolb", chart, "-f", custom]);
    let custom_objs = parse_docs(&rendered);
    check_custom_values(&custom_objs, &base);
    for kind in ["Deployment", "DaemonSet"] {
        check_cli_contract(
            &find(&custom_objs, kind)[0]["spec"]["template"]["spec"]["containers"][0],
            cluster.dir(),
        );
    }
    // Accepted by the API server (the ServiceMonitor aside: its CRD is not installed here). The
    // namespace first, as `helm install` would create it first.
    let namespace = serde_json::to_string(find(&custom_objs, "Namespace")[0]).unwrap();
    k.ok(&["apply", "--server-side", "-f", "-"], Some(&namespace));
    let others: Vec<&str> = rendered
        .split("\n---\n")
        .filter(|doc| !doc.contains("\nkind: ServiceMonitor\n"))
        .collect();
    assert_eq!(others.len(), custom_objs.len() - 1);
    let (dry, _) = k.ok(
        &["apply", "--server-side", "--dry-run=server", "-f", "-"],
        Some(&others.join("\n---\n")),
    );
    assert_eq!(
        dry.lines()
            .filter(|l| l.ends_with("(server dry run)"))
            .count(),
        others.len(),
        "server dry run of the custom render:\n{dry}"
    );

    // --- install: server-side dry run, then for real ---
    let (dry, _) = helm.ok(&[
        "install",
        "ferrolb",
        chart,
        "--namespace",
        NS,
        "--create-namespace",
        "--dry-run=server",
    ]);
    assert!(dry.contains("kind: DaemonSet"), "helm dry run:\n{dry}");
    let probe = k.run(&["get", "namespace", NS], None);
    assert!(
        !probe.status.success() && String::from_utf8_lossy(&probe.stderr).contains("NotFound"),
        "the dry run created the namespace"
    );
    let (installed, warnings) = helm.ok(&[
        "install",
        "ferrolb",
        chart,
        "--namespace",
        NS,
        "--create-namespace",
    ]);
    assert!(
        installed.contains("STATUS: deployed"),
        "helm install:\n{installed}"
    );
    // The namespace is not the chart's, so its notes say which Pod Security label it needs.
    assert!(
        installed.contains(&format!(
            "kubectl label namespace {NS} pod-security.kubernetes.io/enforce=privileged"
        )),
        "helm install's notes do not give the Pod Security label:\n{installed}"
    );
    assert!(
        !warnings.to_lowercase().contains("warning"),
        "helm install warned:\n{warnings}"
    );
    let (manifest, _) = helm.ok(&["get", "manifest", "ferrolb", "--namespace", NS]);
    let manifest_objs = parse_docs(&manifest);
    let manifest_file = cluster.dir().join("helm-manifest.yaml");
    std::fs::write(&manifest_file, &manifest).unwrap();
    let (live, _) = k.ok(
        &["get", "-f", manifest_file.to_str().unwrap(), "-o", "json"],
        None,
    );
    let live: Value = serde_json::from_str(&live).unwrap();
    let live_keys: BTreeSet<ObjKey> = live["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(key_of)
        .collect();
    let expected: BTreeSet<ObjKey> = base.iter().map(key_of).collect();
    assert_eq!(live_keys, expected, "objects installed");
    assert_eq!(
        manifest_objs.iter().map(key_of).collect::<BTreeSet<_>>(),
        expected
    );
    let crd_args: Vec<String> = CRDS.iter().map(|c| format!("crd/{c}")).collect();
    let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    wait.extend(crd_args.iter().map(String::as_str));
    k.ok(&wait, None);
    rbac::check(&k);

    // --- the key the controller creates (the test cluster runs no pods: made here as the
    // controller makes it) is not Helm's: an upgrade and the uninstall leave it alone ---
    let probe = k.run(&["get", "secret", SECRET, "-n", NS], None);
    assert!(
        !probe.status.success() && String::from_utf8_lossy(&probe.stderr).contains("NotFound"),
        "helm install created a Secret"
    );
    let controller_key = format!("--from-literal=key={}\n", deploy::objects::random_key_hex());
    k.ok(
        &[
            "create",
            "secret",
            "generic",
            SECRET,
            "-n",
            NS,
            &controller_key,
        ],
        None,
    );
    k.ok(
        &[
            "label",
            "secret",
            SECRET,
            "-n",
            NS,
            "app.kubernetes.io/managed-by=ferrolb-controller",
        ],
        None,
    );
    let installed_key = secret_key(&k);
    let (upgraded, _) = helm.ok(&[
        "upgrade",
        "ferrolb",
        chart,
        "--namespace",
        NS,
        "--set",
        "ignoreExcludeLb=true",
    ]);
    assert!(
        upgraded.contains("REVISION: 2"),
        "helm upgrade:\n{upgraded}"
    );
    assert_eq!(
        secret_key(&k),
        installed_key,
        "helm upgrade changed the key"
    );
    let (ds, _) = k.ok(
        &[
            "get",
            "daemonset",
            "ferrolb-speaker",
            "-n",
            NS,
            "-o",
            "json",
        ],
        None,
    );
    let ds: Value = serde_json::from_str(&ds).unwrap();
    let base_ds = find(&base, "DaemonSet")[0];
    assert_eq!(
        ds["spec"]["template"]["spec"]["volumes"], base_ds["spec"]["template"]["spec"]["volumes"],
        "the speaker mounts nothing, as in the base"
    );
    let speaker = &ds["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        env_value(speaker, "FERROLB_EXCLUDE_LB_LABEL").map(|e| &e["value"]),
        Some(&json!("ignore")),
        "the upgrade's value (the deprecated ignoreExcludeLb) did not reach the DaemonSet"
    );

    // --- uninstall: everything goes but the CRDs (resource-policy keep); the controller's key is
    // not Helm's ---
    let (uninstalled, _) = helm.ok(&["uninstall", "ferrolb", "--namespace", NS]);
    assert!(
        uninstalled.contains("These resources were kept due to the resource policy:"),
        "helm uninstall:\n{uninstalled}"
    );
    assert!(!uninstalled.contains("[Secret]"), "{uninstalled}");
    for kept in CRDS
        .iter()
        .map(|c| format!("[CustomResourceDefinition] {c}"))
    {
        assert!(
            uninstalled.contains(&kept),
            "{kept} not kept:\n{uninstalled}"
        );
    }
    for gone in [
        vec!["deployment", "ferrolb-controller", "-n", NS],
        vec!["daemonset", "ferrolb-speaker", "-n", NS],
        vec!["clusterrole", "ferrolb-speaker"],
        vec!["clusterrolebinding", "ferrolb-controller"],
        vec!["validatingadmissionpolicy", "ferrolb-speaker-own-node"],
        vec![
            "validatingadmissionpolicybinding",
            "ferrolb-speaker-own-node",
        ],
    ] {
        let mut args = vec!["get"];
        args.extend(gone.iter().copied());
        let out = k.run(&args, None);
        assert!(
            !out.status.success() && String::from_utf8_lossy(&out.stderr).contains("NotFound"),
            "{gone:?} survived helm uninstall"
        );
    }
    assert_eq!(
        secret_key(&k),
        installed_key,
        "helm uninstall touched the key"
    );
    let mut get_crds = vec!["get"];
    get_crds.extend(crd_args.iter().map(String::as_str));
    k.ok(&get_crds, None);
}

/// The default render minus the documented differences from the base, each asserted on the way;
/// returns the remaining objects.
fn without_documented_differences(mut objs: Vec<Value>, base: &[Value]) -> Vec<Value> {
    // No key Secret: the controller creates it (issue #27).
    assert!(
        find(&objs, "Secret").is_empty(),
        "the chart renders a Secret"
    );
    // No Namespace by default: `helm install -n NS --create-namespace` makes it, and Helm refuses
    // to install over a Namespace it did not make (issue #28).
    assert!(
        find(&objs, "Namespace").is_empty(),
        "the chart renders a Namespace by default"
    );

    for obj in &mut objs {
        // Helm's labels on every object, and nowhere else than metadata.
        let id = key_of(obj);
        let labels = obj["metadata"]["labels"]
            .as_object_mut()
            .unwrap_or_else(|| panic!("{id:?} has no labels"));
        for (label, value) in helm_labels() {
            assert_eq!(
                labels.remove(label),
                Some(Value::String(value)),
                "{id:?}: label {label}"
            );
        }
        let (kind, _, name) = key_of(obj);
        match kind.as_str() {
            "CustomResourceDefinition" => {
                let annotations = obj["metadata"]
                    .as_object_mut()
                    .unwrap()
                    .remove("annotations");
                assert_eq!(
                    annotations,
                    Some(json!({"helm.sh/resource-policy": "keep"})),
                    "{name}"
                );
            }
            "Deployment" | "DaemonSet" => {
                let base_obj = base.iter().find(|b| key_of(b) == key_of(obj)).unwrap();
                let base_image = base_obj["spec"]["template"]["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap();
                let repository = base_image.rsplit_once(':').unwrap().0;
                let pod = &mut obj["spec"]["template"]["spec"];
                let image = &mut pod["containers"][0]["image"];
                assert_eq!(
                    *image,
                    format!("{repository}:{CHART_VERSION}"),
                    "{name} image"
                );
                *image = json!(base_image);
                let priority = pod.as_object_mut().unwrap().remove("priorityClassName");
                if kind == "DaemonSet" {
                    assert_eq!(priority, Some(json!("system-node-critical")));
                } else {
                    assert_eq!(priority, None, "the controller has no priority class");
                }
            }
            _ => {}
        }
    }
    objs
}

/// Where two JSON values differ, one line per path: `path: chart … != base …`.
fn diff(path: &str, chart: &Value, base: &Value, out: &mut Vec<String>) {
    match (chart, base) {
        (Value::Object(a), Value::Object(b)) => {
            let keys: BTreeSet<&String> = a.keys().chain(b.keys()).collect();
            for key in keys {
                let (x, y) = (
                    a.get(key).unwrap_or(&Value::Null),
                    b.get(key).unwrap_or(&Value::Null),
                );
                diff(&format!("{path}.{key}"), x, y, out);
            }
        }
        (Value::Array(a), Value::Array(b)) if a.len() == b.len() => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                diff(&format!("{path}[{i}]"), x, y, out);
            }
        }
        _ if chart != base => out.push(format!("{path}: chart {chart} != base {base}")),
        _ => {}
    }
}

/// A multi-document YAML text as kubectl (and Helm, and the API server) read it: YAML 1.1, so
/// `0400` is octal.
fn as_kubectl_reads(k: &Kubectl, yaml: &str) -> Vec<Value> {
    let (json, _) = k.ok(
        &["create", "--dry-run=client", "-o", "json", "-f", "-"],
        Some(yaml),
    );
    // One JSON object per document, one after the other.
    serde_json::Deserializer::from_str(&json)
        .into_iter::<Value>()
        .map(Result::unwrap)
        .collect()
}

/// The installed Secret's key, decoded.
fn secret_key(k: &Kubectl) -> Vec<u8> {
    let (data, _) = k.ok(
        &[
            "get",
            "secret",
            SECRET,
            "-n",
            NS,
            "-o",
            "jsonpath={.data.key}",
        ],
        None,
    );
    base64_decode(data.trim())
}

fn base64_decode(text: &str) -> Vec<u8> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|&c| c != b'=') {
        let v = ALPHABET.iter().position(|&a| a == c).expect("base64") as u32;
        acc = (acc << 6) | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    out
}

/// The render of [`CUSTOM_VALUES`]: every value where it belongs.
fn check_custom_values(objs: &[Value], base: &[Value]) {
    let ns = "lb-system";
    // No CRDs (crds.create: false), no Secret, the namespace everywhere.
    assert!(find(objs, "CustomResourceDefinition").is_empty());
    assert!(find(objs, "Secret").is_empty());
    let namespaces = find(objs, "Namespace");
    assert_eq!(namespaces.len(), 1);
    assert_eq!(namespaces[0]["metadata"]["name"], ns);
    assert_eq!(
        namespaces[0]["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "privileged"
    );
    let namespaced = [
        "ServiceAccount",
        "Role",
        "RoleBinding",
        "Deployment",
        "DaemonSet",
        "Service",
    ];
    for obj in objs {
        let kind = obj["kind"].as_str().unwrap();
        if namespaced.contains(&kind) || kind == "ServiceMonitor" {
            assert_eq!(obj["metadata"]["namespace"], ns, "{:?}", key_of(obj));
        }
        for subject in obj["subjects"].as_array().into_iter().flatten() {
            assert_eq!(subject["namespace"], ns, "{:?}", key_of(obj));
        }
    }
    let speaker_role = objs
        .iter()
        .find(|o| key_of(o) == key("Role", ns, "ferrolb-speaker"))
        .unwrap();
    let secret_rule = speaker_role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| strings(&r["resources"]) == ["secrets"])
        .unwrap();
    assert_eq!(strings(&secret_rule["resourceNames"]), ["my-key"]);
    // With the user's key the controller neither creates nor reads one (issue #27).
    let controller_role = objs
        .iter()
        .find(|o| key_of(o) == key("Role", ns, "ferrolb-controller"))
        .unwrap();
    assert!(
        !controller_role["rules"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| strings(&r["resources"]) == ["secrets"]),
        "{controller_role}"
    );

    for (kind, component) in [("Deployment", "controller"), ("DaemonSet", "speaker")] {
        let workload = find(objs, kind)[0];
        let pod = &workload["spec"]["template"]["spec"];
        let c = &pod["containers"][0];
        assert_eq!(c["image"], "registry.example/ferrolb:v9.9.9", "{kind}");
        assert_eq!(c["imagePullPolicy"], "Always", "{kind}");
        assert_eq!(
            pod["imagePullSecrets"],
            json!([{"name": "regcred"}]),
            "{kind}"
        );
        let env = |name: &str| env_value(c, name).map(|e| e["value"].clone());
        assert_eq!(
            env("FERROLB_LB_CLASS"),
            Some(json!("example.com/l2")),
            "{kind}"
        );
        assert_eq!(env("FERROLB_DEFAULT_CLASS"), Some(json!("false")), "{kind}");
        assert_eq!(env("FERROLB_LOG_FORMAT"), Some(json!("json")), "{kind}");
        let base_pod = &find(base, kind)[0]["spec"]["template"]["spec"];
        let base_env = base_pod["containers"][0]["env"].as_array().unwrap();
        let env_names: Vec<&str> = c["env"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            env_names[..base_env.len()],
            base_env
                .iter()
                .map(|e| e["name"].as_str().unwrap())
                .collect::<Vec<_>>()[..],
            "{kind}: the base's environment comes first"
        );
        if component == "speaker" {
            assert_eq!(env("FERROLB_EXCLUDE_LB_LABEL"), Some(json!("honour")));
            assert_eq!(env("FERROLB_TIMING_PROFILE"), Some(json!("safe")));
            assert_eq!(env("FERROLB_INTERFACES"), Some(json!("eth1,bond0.100")));
            assert_eq!(
                env("FERROLB_EXCLUDE_INTERFACES"),
                Some(json!("default,br-*"))
            );
            assert_eq!(
                env("FERROLB_MEMBERLIST_SECRET"),
                Some(json!("my-key")),
                "the speaker reads the existing Secret"
            );
            assert!(pod["volumes"].is_null(), "the speaker mounts nothing");
            assert_eq!(pod["priorityClassName"], "ferrolb-speaker");
            assert_eq!(pod["tolerations"], json!([{"operator": "Exists"}]));
            assert_eq!(
                c["resources"],
                json!({"requests": {"cpu": "30m", "memory": "40Mi"}, "limits": {"memory": "200Mi"}})
            );
        } else {
            assert_eq!(env("FERROLB_MEMBERLIST_SECRET"), Some(json!("my-key")));
            assert_eq!(
                env("FERROLB_CREATE_MEMBERLIST_SECRET"),
                Some(json!("false")),
                "the controller must not create a key beside the user's"
            );
            assert_eq!(env("FERROLB_EXCLUDE_LB_LABEL"), None);
            assert_eq!(pod["priorityClassName"], "system-cluster-critical");
            assert_eq!(
                pod["tolerations"],
                json!([{"key": "dedicated", "operator": "Equal", "value": "lb", "effect": "NoSchedule"}])
            );
            assert_eq!(
                c["resources"],
                json!({"requests": {"cpu": "50m", "memory": "100Mi"}, "limits": {"memory": "1Gi"}})
            );
        }

        // The metrics Service of this component selects its pods and their monitoring port.
        let service = objs
            .iter()
            .find(|o| key_of(o) == key("Service", ns, &format!("ferrolb-{component}-monitoring")))
            .unwrap_or_else(|| panic!("no metrics Service for the {component}"));
        let pod_labels = workload["spec"]["template"]["metadata"]["labels"]
            .as_object()
            .unwrap();
        let selector = service["spec"]["selector"].as_object().unwrap();
        assert!(!selector.is_empty());
        for (label, value) in selector {
            assert_eq!(
                pod_labels.get(label),
                Some(value),
                "{component} selector {label}"
            );
        }
        let monitoring = c["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "monitoring")
            .unwrap();
        let port = &service["spec"]["ports"][0];
        assert_eq!(
            port["port"], monitoring["containerPort"],
            "{component} port"
        );
        assert_eq!(port["targetPort"], "monitoring");
        assert_eq!(port["name"], "monitoring");
        assert_eq!(service["spec"]["clusterIP"], "None");
        let monitor = find(objs, "ServiceMonitor")[0];
        for (label, value) in monitor["spec"]["selector"]["matchLabels"]
            .as_object()
            .unwrap()
        {
            assert_eq!(
                service["metadata"]["labels"].get(label),
                Some(value),
                "the ServiceMonitor does not select {component}'s Service ({label})"
            );
        }
    }
    let monitors = find(objs, "ServiceMonitor");
    assert_eq!(monitors.len(), 1);
    let monitor = monitors[0];
    assert_eq!(monitor["metadata"]["labels"]["release"], "prom");
    assert_eq!(
        monitor["spec"]["namespaceSelector"]["matchNames"],
        json!([ns])
    );
    let endpoints = monitor["spec"]["endpoints"].as_array().unwrap();
    assert_eq!(endpoints.len(), 1);
    assert_eq!(endpoints[0]["port"], "monitoring");
    assert_eq!(endpoints[0]["path"], "/metrics");
    assert_eq!(endpoints[0]["interval"], "15s");
    // The same `node` and `component` labels as deploy/monitoring's PodMonitor, which its
    // dashboard and alerts group by.
    let podmonitor = std::fs::read_to_string(repo_root().join("deploy/monitoring/podmonitor.yaml"))
        .expect("reading deploy/monitoring/podmonitor.yaml");
    let podmonitor = &parse_docs(&podmonitor)[0];
    let wanted = &podmonitor["spec"]["podMetricsEndpoints"][0]["relabelings"];
    assert!(wanted.as_array().is_some_and(|r| r.len() >= 2), "{wanted}");
    assert_eq!(&endpoints[0]["relabelings"], wanted);
    // Only the two metrics Services select pods of the release.
    assert_eq!(find(objs, "Service").len(), 2);
}
