//! `ferrolb migrate` (issue #12 part 1) against the real API server, with the real `kubectl`:
//!
//! 1. **Files.** Every MetalLB v0.16.2 sample configuration (`configsamples/`), every legacy
//!    ConfigMap input of MetalLB's own converter (`configmaptocrs/testdata/`) and ferrolb's own
//!    inputs (`cli/tests/inputs/`: the minikube addon's ConfigMap, one of each finding) are
//!    converted; the output is applied with `kubectl apply --server-side` and admitted by ferrolb's
//!    CRDs without a warning; the objects read back have the same pool addresses and flags as the
//!    input, read independently here from MetalLB's documented fields (below, [`expected`]).
//! 2. **`--from-cluster`.** MetalLB's CRDs (from its module), some of its samples, the minikube
//!    ConfigMap and Services as MetalLB leaves them are put into the cluster; `ferrolb migrate
//!    --from-cluster` changes nothing there (every object keeps its resourceVersion), outputs the
//!    same objects as the file conversion of the same inputs, reports the BGP object and each
//!    Service; then the output is applied, the real `ferrolb-controller` is started, and every
//!    Service ends up with exactly the addresses the dry report predicted — the ones it keeps
//!    without a single write.
//! 3. **The handover overlay** of the recipe's step 4, as written in
//!    `docs/migration-from-metallb.md`, puts `FERROLB_DEFAULT_CLASS=false` into the controller and
//!    the speakers, and step 6's `kubectl apply -k deploy/` takes it out again.
//!
//! MetalLB's files are read from the Go module cache (`ferrolb_tests::metallb`), never copied.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use ferrolb_crds::addresses::AddressEntry;
use ferrolb_crds::{IPAddressPool, L2Advertisement};
use ferrolb_tests::cluster::{TestCluster, kubectl, repo_root, workspace_bin};
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::objects::set_ingress;
use ferrolb_tests::{metallb, poll};
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

/// Runs `ferrolb migrate <args>` in `dir`: (exit status, stdout, stderr).
fn migrate(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let out = Command::new(workspace_bin("ferrolb").expect("ferrolb binary"))
        .current_dir(dir)
        .arg("migrate")
        .args(args)
        .env_remove("FERROLB_LB_CLASS")
        .env_remove("FERROLB_DEFAULT_CLASS")
        .output()
        .expect("running ferrolb");
    (
        out.status.code().expect("ferrolb exited"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// `kubectl <args>` with `stdin`, asserting success and no warning; returns stdout.
fn kubectl_ok(kubeconfig: &Path, args: &[&str], stdin: Option<&str>) -> String {
    let out = kubectl(kubeconfig, args, stdin).expect("running kubectl");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success() && !stderr.contains("Warning"),
        "kubectl {args:?} ({}):\nstdout: {stdout}\nstderr: {stderr}\nstdin:\n{}",
        out.status,
        stdin.unwrap_or_default()
    );
    stdout
}

/// `kubectl apply -k <dir>` as the recipe runs it (client-side), asserting success. The only
/// warnings allowed are about the CRDs and the `ferrolb-system` namespace lacking kubectl's
/// last-applied annotation: the test cluster created them server-side, the recipe with
/// `kubectl apply -f deploy/crds/`.
fn kubectl_apply_k(kubeconfig: &Path, dir: &Path) {
    let dir = dir.to_str().unwrap();
    let out = kubectl(kubeconfig, &["apply", "-k", dir], None).expect("running kubectl");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let unexpected: Vec<&str> = stderr
        .lines()
        .filter(|l| {
            !((l.contains("customresourcedefinitions/")
                || l.contains("namespaces/ferrolb-system "))
                && l.contains("kubectl.kubernetes.io/last-applied-configuration"))
        })
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert!(
        out.status.success() && unexpected.is_empty(),
        "kubectl apply -k {dir} ({}): {stderr}",
        out.status
    );
}

// --- what the output must hold, read from the input independently of the converter ---

/// The ferrolb objects an input must give: name → spec (as JSON), pools and advertisements.
#[derive(Debug, Default, PartialEq)]
struct Expected {
    pools: BTreeMap<String, Value>,
    advertisements: BTreeMap<String, Value>,
    /// While reading an input: its Services' current IPs, sorted (empty otherwise).
    held: Vec<std::net::IpAddr>,
}

/// Reads MetalLB's documented fields (docs/migration-from-metallb.md, "Resources: field by
/// field"): a metallb.io `IPAddressPool` keeps its addresses (those ferrolb's API server accepts),
/// `autoAssign` (default true), `avoidBuggyIPs` (default false), `allowSharingAcrossNamespaces`
/// false (MetalLB has no such field) and `serviceAllocation` (a
/// priority only when above 0; listed namespaces next to namespace selectors become a selector on
/// `kubernetes.io/metadata.name`); an `L2Advertisement` keeps its spec but `serviceSelectors`
/// and `preferredNodeSelectors`; a legacy `protocol: layer2` pool gives a pool and an
/// advertisement of its name (lower case, `_` as `-`); the first object of a name wins.
fn expected(text: &str) -> Expected {
    let mut out = Expected::default();
    let docs = serde_saphyr::from_multiple::<Value>(text).unwrap();
    let mut held = Vec::new();
    for doc in &docs {
        service_ips(doc, &mut held);
    }
    held.sort_unstable();
    held.dedup();
    out.held = held;
    for doc in &docs {
        walk(doc, &mut out);
    }
    out.held.clear();
    out
}

/// The status IPs of the LoadBalancer Services without a `loadBalancerClass` in `doc` (a List's
/// items too): what `ferrolb migrate` proposes for the minikube addon's unconfigured ConfigMap.
fn service_ips(doc: &Value, out: &mut Vec<std::net::IpAddr>) {
    if doc["kind"].as_str().is_some_and(|k| k.ends_with("List")) {
        for item in doc["items"].as_array().into_iter().flatten() {
            service_ips(item, out);
        }
        return;
    }
    if doc["kind"] != "Service"
        || doc["spec"]["type"] != "LoadBalancer"
        || !doc["spec"]["loadBalancerClass"].is_null()
    {
        return;
    }
    for ingress in doc["status"]["loadBalancer"]["ingress"]
        .as_array()
        .into_iter()
        .flatten()
    {
        if let Some(ip) = ingress["ip"].as_str().and_then(|t| t.parse().ok()) {
            out.push(ip);
        }
    }
}

/// `ips` (sorted) as pool entries: consecutive addresses merged into `a-b`, a lone one `a/32`
/// (`/128`).
fn merged_entries(ips: &[std::net::IpAddr]) -> Vec<String> {
    let num = |ip: &std::net::IpAddr| match ip {
        std::net::IpAddr::V4(v4) => (4, u128::from(u32::from(*v4))),
        std::net::IpAddr::V6(v6) => (6, u128::from(*v6)),
    };
    let mut runs: Vec<(std::net::IpAddr, std::net::IpAddr)> = Vec::new();
    for ip in ips {
        match runs.last_mut() {
            Some((_, last)) if num(last).0 == num(ip).0 && num(last).1 + 1 == num(ip).1 => {
                *last = *ip;
            }
            _ => runs.push((*ip, *ip)),
        }
    }
    runs.into_iter()
        .map(|(a, b)| match (a == b, a.is_ipv4()) {
            (true, true) => format!("{a}/32"),
            (true, false) => format!("{a}/128"),
            (false, _) => format!("{a}-{b}"),
        })
        .collect()
}

fn walk(doc: &Value, out: &mut Expected) {
    let kind = doc["kind"].as_str().unwrap_or_default();
    let api = doc["apiVersion"].as_str().unwrap_or_default();
    if kind.ends_with("List") {
        for item in doc["items"].as_array().into_iter().flatten() {
            walk(item, out);
        }
        return;
    }
    let name = doc["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    match (api.starts_with("metallb.io/"), kind) {
        (true, "IPAddressPool") => {
            let spec = &doc["spec"];
            let addresses = accepted(&spec["addresses"]);
            if addresses.is_empty() || out.pools.contains_key(&name) {
                return;
            }
            let mut want = json!({
                "addresses": addresses,
                "autoAssign": spec["autoAssign"].as_bool().unwrap_or(true),
                "avoidBuggyIPs": spec["avoidBuggyIPs"].as_bool().unwrap_or(false),
                // MetalLB has no such switch; the conversion never opens it (issue #27 item 6).
                "allowSharingAcrossNamespaces": false,
            });
            if let Some(sa) = spec["serviceAllocation"].as_object() {
                let mut a = serde_json::Map::new();
                if let Some(p) = sa
                    .get("priority")
                    .and_then(Value::as_i64)
                    .filter(|p| *p > 0)
                {
                    a.insert("priority".into(), json!(p));
                }
                let listed = sa.get("namespaces").cloned().unwrap_or(json!([]));
                let mut selectors = sa.get("namespaceSelectors").cloned().unwrap_or(json!([]));
                let both = !listed.as_array().unwrap().is_empty()
                    && !selectors.as_array().unwrap().is_empty();
                if both {
                    selectors.as_array_mut().unwrap().push(json!({"matchExpressions": [
                        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": listed}
                    ]}));
                } else if !listed.as_array().unwrap().is_empty() {
                    a.insert("namespaces".into(), listed);
                }
                if !selectors.as_array().unwrap().is_empty() {
                    a.insert("namespaceSelectors".into(), selectors);
                }
                if let Some(s) = sa.get("serviceSelectors") {
                    a.insert("serviceSelectors".into(), s.clone());
                }
                if !a.is_empty() {
                    want["serviceAllocation"] = Value::Object(a);
                }
            }
            out.pools.insert(name, want);
        }
        (true, "L2Advertisement") => {
            let mut spec = doc["spec"].as_object().cloned().unwrap_or_default();
            spec.remove("serviceSelectors");
            spec.remove("preferredNodeSelectors");
            out.advertisements
                .entry(name)
                .or_insert(Value::Object(spec));
        }
        (false, "ConfigMap") => {
            if let Some(config) = doc["data"]["config"].as_str() {
                legacy(&serde_saphyr::from_str(config).unwrap(), out);
            }
        }
        (false, "") if doc.get("address-pools").is_some() => legacy(doc, out),
        _ => {}
    }
}

fn legacy(config: &Value, out: &mut Expected) {
    for pool in config["address-pools"].as_array().into_iter().flatten() {
        if pool["protocol"].as_str() != Some("layer2") {
            continue;
        }
        // The minikube addon's unconfigured ConfigMap (`- -`, a list holding a list holding
        // null): the Services' current IPs.
        let addresses = if pool["addresses"] == json!([[null]]) || pool["addresses"] == json!(["-"])
        {
            merged_entries(&out.held)
        } else {
            accepted(&pool["addresses"])
        };
        if addresses.is_empty() {
            continue;
        }
        let name = pool["name"]
            .as_str()
            .unwrap()
            .to_lowercase()
            .replace('_', "-");
        out.pools.entry(name.clone()).or_insert(json!({
            "addresses": addresses,
            "autoAssign": pool["auto-assign"].as_bool().unwrap_or(true),
            "avoidBuggyIPs": pool["avoid-buggy-ips"].as_bool().unwrap_or(false),
            "allowSharingAcrossNamespaces": false,
        }));
        out.advertisements
            .entry(name.clone())
            .or_insert(json!({"ipAddressPools": [name]}));
    }
}

/// The entries ferrolb's API server accepts (syntax, and no block that is never a LoadBalancer
/// IP): `crds_admission` checks this parser agrees with the API server.
fn accepted(addresses: &Value) -> Vec<String> {
    addresses
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|e| AddressEntry::parse(e).is_ok_and(|p| p.forbidden().is_none()))
        .map(str::to_owned)
        .collect()
}

/// The ferrolb objects in the cluster, as [`Expected`].
async fn stored(client: &Client) -> Expected {
    let mut out = Expected::default();
    for p in Api::<IPAddressPool>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.pools
            .insert(p.name_any(), serde_json::to_value(&p.spec).unwrap());
    }
    for a in Api::<L2Advertisement>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap()
    {
        out.advertisements
            .insert(a.name_any(), serde_json::to_value(&a.spec).unwrap());
    }
    out
}

async fn delete_all(client: &Client) {
    let dp = DeleteParams::default();
    let lp = ListParams::default();
    Api::<IPAddressPool>::all(client.clone())
        .delete_collection(&dp, &lp)
        .await
        .unwrap();
    Api::<L2Advertisement>::all(client.clone())
        .delete_collection(&dp, &lp)
        .await
        .unwrap();
    poll::until(
        "ferrolb objects deleted",
        Duration::from_secs(20),
        || async { stored(client).await == Expected::default() },
    )
    .await
    .unwrap();
}

/// `(directory, file)` of every input of part 1.
fn inputs(module: &Path) -> Vec<(PathBuf, String)> {
    let dirs = [
        module.join("configsamples"),
        module.join("configmaptocrs/testdata/configmap-yaml"),
        module.join("configmaptocrs/testdata/configmap-data"),
        repo_root().join("cli/tests/inputs"),
    ];
    let mut out = Vec::new();
    for dir in dirs {
        let mut files: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".yaml"))
            .collect();
        files.sort();
        assert!(!files.is_empty(), "no inputs in {}", dir.display());
        out.extend(files.into_iter().map(|f| (dir.clone(), f)));
    }
    out
}

/// The `kustomization.yaml` of step 4 of the recipe: the heredoc after the `<!-- handover overlay`
/// marker in docs/migration-from-metallb.md, without the list indentation.
fn handover_overlay() -> String {
    let doc = std::fs::read_to_string(repo_root().join("docs/migration-from-metallb.md")).unwrap();
    let block = &doc[doc.find("<!-- handover overlay").expect("the marker")..];
    let start = block.find("<<'EOF'\n").expect("the heredoc") + "<<'EOF'\n".len();
    let end = block.find("\n   EOF\n").expect("the heredoc's end");
    block[start..end]
        .lines()
        .map(|l| format!("{}\n", l.strip_prefix("   ").unwrap_or(l)))
        .collect()
}

/// `FERROLB_DEFAULT_CLASS` of the first container of `kind/name` in ferrolb-system, if set.
fn default_class_env(kubeconfig: &Path, kind: &str, name: &str) -> Option<String> {
    let out = kubectl_ok(
        kubeconfig,
        &["-n", "ferrolb-system", "get", kind, name, "-o", "json"],
        None,
    );
    let obj: Value = serde_json::from_str(&out).unwrap();
    obj["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "FERROLB_DEFAULT_CLASS")
        .map(|e| e["value"].as_str().unwrap().to_owned())
}

#[tokio::test]
async fn migrate_metallb() {
    let module = metallb::module_dir().expect("MetalLB's module source");
    let cluster = TestCluster::start().await.expect("test cluster");
    let client = cluster.client().await.unwrap();
    let kc = cluster.kubeconfig().to_path_buf();

    // --- 1. files: admitted, same addresses and flags ---
    let mut converted_pools = 0;
    for (dir, file) in inputs(&module) {
        let text = std::fs::read_to_string(dir.join(&file)).unwrap();
        let (code, stdout, stderr) = migrate(&dir, &[&file]);
        assert!(
            code == 0 || code == 2,
            "{file}: exit status {code}: {stderr}"
        );
        let want = expected(&text);
        if !stdout.is_empty() {
            kubectl_ok(
                &kc,
                &[
                    "apply",
                    "--server-side",
                    "--field-manager=migrate-test",
                    "-f",
                    "-",
                ],
                Some(&stdout),
            );
        }
        let got = stored(&client).await;
        assert_eq!(
            got, want,
            "{file}: stored objects differ from the input\n{stderr}"
        );
        converted_pools += got.pools.len();
        delete_all(&client).await;
    }
    // 6 in configsamples, 4 in configmaptocrs (the others are BGP or invalid for MetalLB), 4 of
    // ferrolb's own inputs (one the minikube addon's unconfigured ConfigMap, whose pool holds
    // the Services' IPs): the comparison above was not vacuous.
    assert_eq!(converted_pools, 14, "pools converted in all");

    // --- 2. --from-cluster ---
    kubectl_ok(
        &kc,
        &[
            "apply",
            "--server-side",
            "-f",
            module.join("config/crd/bases").to_str().unwrap(),
        ],
        None,
    );
    for ns in ["metallb-system", "shop", "tenant"] {
        Api::<Namespace>::all(client.clone())
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(ns.into()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .unwrap();
    }
    let samples = module.join("configsamples");
    let minikube = repo_root().join("cli/tests/inputs/minikube-addon.yaml");
    let in_cluster: Vec<PathBuf> = [
        "simple_pool_adv_l2.yaml",
        "ipaddresspool_with_selector.yaml",
        "bgppeer_simple.yaml",
    ]
    .iter()
    .map(|f| samples.join(f))
    .chain([minikube.clone()])
    .collect();
    for f in &in_cluster {
        // The MetalLB CRDs were just created: retry until they are served.
        let f = f.to_str().unwrap();
        poll::until(
            &format!("applying {f}"),
            Duration::from_secs(30),
            || async {
                kubectl(&kc, &["apply", "--server-side", "-f", f], None)
                    .unwrap()
                    .status
                    .success()
            },
        )
        .await
        .unwrap();
    }
    // Services as MetalLB leaves them: its controller's status (set_ingress adds ipMode VIP, as
    // the API server defaults it), MetalLB's annotations, one of MetalLB's class.
    let services = [
        (
            "keep",
            Some("192.168.10.7"),
            json!({"metallb.universe.tf/address-pool": "example"}),
            None,
        ),
        ("network", Some("192.168.10.0"), json!({}), None),
        (
            "minikube",
            Some("192.168.49.101"),
            json!({"metallb.io/ip-allocated-from-pool": "default"}),
            None,
        ),
        (
            "other-class",
            Some("192.168.10.9"),
            json!({}),
            Some("metallb.io/metallb"),
        ),
        ("fresh", None, json!({}), None),
    ];
    let svc_api = Api::<Service>::namespaced(client.clone(), "shop");
    for (name, ip, annotations, class) in services {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "shop", "annotations": annotations},
            "spec": {"type": "LoadBalancer", "loadBalancerClass": class,
                     "ports": [{"port": 80, "protocol": "TCP"}]}
        }))
        .unwrap();
        svc_api.create(&PostParams::default(), &svc).await.unwrap();
        if let Some(ip) = ip {
            set_ingress(&client, "shop", name, &[ip]).await.unwrap();
        }
    }
    // One address shared by key across namespaces, as MetalLB allows (issue #27 item 6): ferrolb
    // keeps it for shop/shared (older, or first by namespace within the same second) and moves
    // tenant/twin, as the report must say.
    for (ns, name, port) in [("shop", "shared", 80), ("tenant", "twin", 8080)] {
        let svc: Service = serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": ns,
                         "annotations": {"metallb.universe.tf/allow-shared-ip": "k"}},
            "spec": {"type": "LoadBalancer", "ports": [{"port": port, "protocol": "TCP"}]}
        }))
        .unwrap();
        Api::<Service>::namespaced(client.clone(), ns)
            .create(&PostParams::default(), &svc)
            .await
            .unwrap();
        set_ingress(&client, ns, name, &["192.168.49.110"])
            .await
            .unwrap();
    }
    let versions = |objs: &str| {
        kubectl_ok(
            &kc,
            &[
                "get",
                objs,
                "-A",
                "-o",
                "jsonpath={range .items[*]}{.kind}/{.metadata.namespace}/{.metadata.name}={.metadata.resourceVersion}{\"\\n\"}{end}",
            ],
            None,
        )
    };
    let watched = "services,configmaps,namespaces,ipaddresspools.metallb.io,l2advertisements.metallb.io,bgppeers.metallb.io";
    let before = versions(watched);

    let kc_arg = format!("--kubeconfig={}", kc.display());
    let tmp = std::env::temp_dir();
    let (code, stdout, stderr) = migrate(&tmp, &["--from-cluster", &kc_arg]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(
        versions(watched),
        before,
        "--from-cluster wrote to the cluster"
    );

    // The same objects as converting the same inputs from files.
    let parse = |yaml: &str| -> BTreeSet<String> {
        serde_saphyr::from_multiple::<Value>(yaml)
            .unwrap()
            .iter()
            .map(ToString::to_string)
            .collect()
    };
    let mut from_files = BTreeSet::new();
    for f in &in_cluster {
        let (_, out, _) = migrate(
            f.parent().unwrap(),
            &[f.file_name().unwrap().to_str().unwrap()],
        );
        from_files.extend(parse(&out));
    }
    assert_eq!(parse(&stdout), from_files, "{stdout}\n{stderr}");

    let line = |prefix: &str| -> String {
        stderr
            .lines()
            .find(|l| l.starts_with(prefix))
            .unwrap_or_else(|| panic!("no line starting {prefix:?} in:\n{stderr}"))
            .to_owned()
    };
    line("cluster: omitted: BGPPeer.metallb.io metallb-system/peer: ferrolb has no BGP mode");
    line(
        "cluster: info: Service shop/keep: keeps 192.168.10.7 (valid in the converted pools: adopted without a status write)",
    );
    line(
        "cluster: info: Service shop/keep: metallb.universe.tf/address-pool=\"example\": read as ferrolb.io/address-pool",
    );
    line(
        "cluster: info: Service shop/minikube: keeps 192.168.49.101 (valid in the converted pools: adopted without a status write)",
    );
    line(
        "cluster: info: Service shop/minikube: metallb.io/ip-allocated-from-pool: MetalLB's record of the pool",
    );
    line(
        "cluster: warning: Service shop/other-class: spec.loadBalancerClass \"metallb.io/metallb\" is not ferrolb's",
    );
    let network = line("cluster: warning: Service shop/network: changes 192.168.10.0 to ");
    assert!(
        network.contains(
            "192.168.10.0 is the network or broadcast address of 192.168.10.0/24 in pool example"
        ),
        "{network}"
    );
    let fresh = line("cluster: info: Service shop/fresh: gets ");
    line(
        "cluster: warning: ConfigMap metallb-system/config data.config: address-pools[0]: spec.allowSharingAcrossNamespaces: Services of different namespaces share 192.168.49.110 (shop/shared, tenant/twin; key \"k\") by a sharing key",
    );
    line(
        "cluster: info: Service shop/shared: keeps 192.168.49.110 (valid in the converted pools: adopted without a status write)",
    );
    let twin = line("cluster: warning: Service tenant/twin: changes 192.168.49.110 to ");
    assert!(twin.contains("are in different namespaces"), "{twin}");
    // The addresses the report predicts.
    let predicted = |l: &str, after: &str| -> String {
        l.split(after)
            .nth(1)
            .unwrap()
            .split([' ', ';'])
            .next()
            .unwrap()
            .to_owned()
    };
    let want: BTreeMap<&str, String> = [
        ("keep", "192.168.10.7".to_owned()),
        ("minikube", "192.168.49.101".to_owned()),
        ("other-class", "192.168.10.9".to_owned()),
        ("network", predicted(&network, " to ")),
        ("fresh", predicted(&fresh, "gets ")),
        ("shared", "192.168.49.110".to_owned()),
    ]
    .into_iter()
    .collect();

    // Apply the output, run the real controller: it does what the report said.
    kubectl_ok(
        &kc,
        &[
            "apply",
            "--server-side",
            "--field-manager=migrate-test",
            "-f",
            "-",
        ],
        Some(&stdout),
    );
    let mut rv: BTreeMap<&str, String> = BTreeMap::new();
    for name in ["keep", "minikube", "other-class", "shared"] {
        let version = svc_api.get(name).await.unwrap().resource_version().unwrap();
        rv.insert(name, version);
    }
    let ctl = ControllerProcess::start(&kc, cluster.dir(), &ControllerOptions::new("migrate"))
        .expect("start controller");
    let ips = |svc: &Service| -> Vec<String> {
        svc.status
            .iter()
            .filter_map(|s| s.load_balancer.as_ref())
            .flat_map(|lb| lb.ingress.iter().flatten())
            .filter_map(|i| i.ip.clone())
            .collect()
    };
    let settled = poll::until("Services as predicted", Duration::from_secs(60), || async {
        let mut all = true;
        for (name, ip) in &want {
            let svc = svc_api.get(name).await.unwrap();
            all &= ips(&svc) == [ip.clone()];
        }
        all
    })
    .await;
    if let Err(e) = settled {
        let mut now = Vec::new();
        for name in want.keys() {
            now.push(format!(
                "{name}: {:?}",
                ips(&svc_api.get(name).await.unwrap())
            ));
        }
        panic!("{e}: want {want:?}, have {now:?}\n{}", ctl.log_tail(40));
    }
    let tenant_api = Api::<Service>::namespaced(client.clone(), "tenant");
    let twin_to = predicted(&twin, " to ");
    poll::until(
        "tenant/twin as predicted",
        Duration::from_secs(30),
        || async { ips(&tenant_api.get("twin").await.unwrap()) == [twin_to.clone()] },
    )
    .await
    .unwrap();
    // Three status writes (network, fresh, twin) and none for the Services it adopted.
    poll::until(
        "the three status writes counted",
        Duration::from_secs(10),
        || async { ctl.metric("ferrolb_controller_status_writes_total").await == Some(3.0) },
    )
    .await
    .unwrap();
    for (name, version) in &rv {
        let svc = svc_api.get(name).await.unwrap();
        assert_eq!(
            svc.resource_version().as_ref(),
            Some(version),
            "{name} was written: {:?}",
            svc.metadata.managed_fields
        );
    }
    assert_eq!(
        ctl.metric("ferrolb_controller_status_writes_total").await,
        Some(3.0)
    );
    drop(ctl);

    // --- 3. the handover overlay, as the recipe writes it next to deploy/ ---
    let work = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(repo_root().join("deploy"), work.path().join("deploy")).unwrap();
    let overlay = work.path().join("handover");
    std::fs::create_dir(&overlay).unwrap();
    std::fs::write(overlay.join("kustomization.yaml"), handover_overlay()).unwrap();
    kubectl_apply_k(&kc, &overlay);
    for (kind, name) in [
        ("deployment", "ferrolb-controller"),
        ("daemonset", "ferrolb-speaker"),
    ] {
        assert_eq!(
            default_class_env(&kc, kind, name).as_deref(),
            Some("false"),
            "{kind}/{name} after step 4"
        );
    }
    kubectl_apply_k(&kc, &repo_root().join("deploy"));
    for (kind, name) in [
        ("deployment", "ferrolb-controller"),
        ("daemonset", "ferrolb-speaker"),
    ] {
        assert_eq!(
            default_class_env(&kc, kind, name),
            None,
            "{kind}/{name} after step 6"
        );
    }
}
