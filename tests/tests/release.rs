//! The release artefacts (issue #28 item 3), made by the one script `release/build.sh`:
//!
//! - its `manifest` and `chart` steps, with the image the release workflow passes (a registry
//!   repository and the index digest), write `ferrolb.yaml`, `ferrolb-VERSION.tgz` and
//!   `SHA256SUMS` (which verify);
//! - `ferrolb.yaml` holds exactly the objects of `kubectl kustomize deploy/`, field for field, but
//!   for the workloads' image (`REPO:VERSION@DIGEST`); without an image it is the base itself.
//!   The real API server takes it (`kubectl apply --server-side`, no warning; every object read
//!   back, the CRDs Established);
//! - the namespace's Pod Security labels are the ones the workloads need, as docs/install.md
//!   says: under `enforce=baseline` the API server refuses a Pod of the speaker's template
//!   (hostNetwork, `NET_RAW`), under the manifest's `privileged` it admits it, and the
//!   controller's Pod passes `restricted`;
//! - the chart package lints (`helm lint --strict` on the .tgz), has the workspace version as
//!   version and appVersion, carries every file of `deploy/helm/ferrolb/` with only the image
//!   repository changed in `values.yaml`, and renders the workloads with that image;
//! - the script refuses a tagged image, a malformed digest and an unknown step, and writes nothing;
//! - `.github/workflows/` passes actionlint v1.7.12 (built from the Go module proxy by
//!   `tests/cluster/build-actionlint.sh`), with shellcheck for its `run:` scripts; every action is
//!   pinned by commit with its version in a comment, and the inputs of the actions actionlint
//!   knows are checked at those versions (a misspelt input fails the lint: asserted);
//! - (extended tier) the `binaries` step builds static linux/amd64 binaries: `ldd` says so, each
//!   prints the workspace version, the archive holds them with LICENSE, README and CHANGELOG.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

#[allow(dead_code)]
// The examples, RBAC and workload checks of deploy_manifests.rs are not used here.
mod deploy;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use ferrolb_tests::chart::{CHART_DIR, CHART_VERSION};
use ferrolb_tests::cluster::{cached_bin_dir, helm_bin, k8s_bin, repo_root};
use serde_json::{Value, json};

use deploy::NS;
use deploy::kubectl::Kubectl;
use deploy::objects::{ObjKey, find, key_of, parse_docs};

/// The workspace version: the chart's, the image tag's, the release's.
const VERSION: &str = CHART_VERSION;
const IMAGE: &str = "registry.example/acme/ferrolb";
const DIGEST: &str = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
const CRDS: [&str; 3] = [
    "ipaddresspools.ferrolb.io",
    "l2advertisements.ferrolb.io",
    "l2announcements.ferrolb.io",
];

/// Runs `release/build.sh STEPS` into `dist` with the tools the tests use.
fn release(dist: &Path, steps: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new("bash")
        .arg(repo_root().join("release/build.sh"))
        .args(steps)
        .env("FERROLB_DIST", dist)
        .env("KUBECTL", k8s_bin("kubectl").unwrap())
        .env("HELM", helm_bin().unwrap())
        .env_remove("FERROLB_IMAGE")
        .env_remove("FERROLB_IMAGE_DIGEST")
        .env_remove("FERROLB_TARGET")
        .envs(env.iter().copied())
        .output()
        .expect("running release/build.sh")
}

fn ok(out: &Output, what: &str) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{stderr}",
        out.status
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn helm(args: &[&str], home: &Path) -> String {
    let out = Command::new(helm_bin().unwrap())
        .args(args)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .output()
        .expect("running helm");
    ok(&out, &format!("helm {args:?}"))
}

/// `objs` with the image of every container of the two workloads set to `image`.
fn with_image(mut objs: Vec<Value>, image: &str) -> Vec<Value> {
    let mut set = 0;
    for obj in &mut objs {
        if obj["kind"] == "Deployment" || obj["kind"] == "DaemonSet" {
            for c in obj["spec"]["template"]["spec"]["containers"]
                .as_array_mut()
                .unwrap()
            {
                c["image"] = json!(image);
                set += 1;
            }
        }
    }
    assert_eq!(set, 2, "one container in each workload");
    objs
}

fn by_key(objs: Vec<Value>) -> BTreeMap<ObjKey, Value> {
    let n = objs.len();
    let map: BTreeMap<ObjKey, Value> = objs.into_iter().map(|o| (key_of(&o), o)).collect();
    assert_eq!(map.len(), n, "duplicate objects");
    map
}

#[tokio::test]
async fn release_manifest_and_chart() {
    let (_cluster, k) = deploy::cluster_without_crds().await;
    let root = repo_root();
    let work = tempfile::tempdir().unwrap();
    let dist = work.path().join("dist");

    // --- the steps, as the release workflow runs them ---
    let out = release(
        &dist,
        &["manifest", "chart"],
        &[("FERROLB_IMAGE", IMAGE), ("FERROLB_IMAGE_DIGEST", DIGEST)],
    );
    let stdout = ok(&out, "release/build.sh manifest chart");
    assert_eq!(
        stdout.lines().last().map(PathBuf::from),
        Some(dist.clone()),
        "the script's last line is the output directory"
    );
    let mut written: Vec<String> = std::fs::read_dir(&dist)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    written.sort();
    let chart_file = format!("ferrolb-{VERSION}.tgz");
    assert_eq!(
        written,
        ["SHA256SUMS", "ferrolb-0.1.0.tgz", "ferrolb.yaml"].map(|f| f.replace("0.1.0", VERSION)),
        "what the steps wrote"
    );
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    let summed: BTreeSet<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    assert_eq!(
        summed,
        BTreeSet::from(["ferrolb.yaml", chart_file.as_str()])
    );
    let check = Command::new("sha256sum")
        .args(["--check", "--strict", "SHA256SUMS"])
        .current_dir(&dist)
        .output()
        .unwrap();
    ok(&check, "sha256sum --check SHA256SUMS");

    // --- ferrolb.yaml: the base, field for field, but for the image ---
    let manifest_path = dist.join("ferrolb.yaml");
    let manifest = std::fs::read_to_string(&manifest_path).unwrap();
    assert!(
        manifest.starts_with(&format!(
            "# ferrolb {VERSION}: the whole install in one file"
        )) && manifest.contains("#   kubectl apply --server-side -f ferrolb.yaml\n"),
        "the header says what it is and how to apply it:\n{}",
        &manifest[..manifest.len().min(600)]
    );
    let (kustomized, _) = k.ok(&["kustomize", root.join("deploy").to_str().unwrap()], None);
    let base = parse_docs(&kustomized);
    let pinned = format!("{IMAGE}:{VERSION}@{DIGEST}");
    assert_eq!(
        by_key(parse_docs(&manifest)),
        by_key(with_image(base.clone(), &pinned)),
        "ferrolb.yaml differs from `kubectl kustomize deploy/` beyond the image"
    );

    // --- applied to the real API server: every object, no warning ---
    let manifest_arg = manifest_path.to_str().unwrap();
    let live = k.apply_cleanly(manifest_arg, base.len());
    assert_eq!(
        live.iter().map(key_of).collect::<BTreeSet<_>>(),
        base.iter().map(key_of).collect::<BTreeSet<_>>(),
        "objects read back"
    );
    for kind in ["Deployment", "DaemonSet"] {
        assert_eq!(
            find(&live, kind)[0]["spec"]["template"]["spec"]["containers"][0]["image"],
            json!(pinned),
            "{kind}"
        );
    }
    let mut wait = vec!["wait", "--for=condition=Established", "--timeout=60s"];
    let crd_args: Vec<String> = CRDS.iter().map(|c| format!("crd/{c}")).collect();
    wait.extend(crd_args.iter().map(String::as_str));
    k.ok(&wait, None);

    check_pod_security(&k, &live, work.path());

    // --- the chart package ---
    let package = dist.join(&chart_file);
    let package_arg = package.to_str().unwrap();
    let home = work.path().join("helm");
    helm(&["lint", "--strict", package_arg], &home);
    let chart: Value =
        serde_saphyr::from_str(&helm(&["show", "chart", package_arg], &home)).unwrap();
    assert_eq!(chart["version"], VERSION);
    assert_eq!(chart["appVersion"], VERSION);
    let values: Value =
        serde_saphyr::from_str(&helm(&["show", "values", package_arg], &home)).unwrap();
    assert_eq!(values["image"]["repository"], IMAGE);
    let rendered = helm(&["template", "ferrolb", package_arg, "-n", NS], &home);
    let rendered = parse_docs(&rendered);
    for kind in ["Deployment", "DaemonSet"] {
        assert_eq!(
            find(&rendered, kind)[0]["spec"]["template"]["spec"]["containers"][0]["image"],
            json!(format!("{IMAGE}:{VERSION}")),
            "{kind} in the packaged chart"
        );
    }
    check_package_files(&package, &root.join(CHART_DIR), work.path());

    // --- without an image: the manifest is the base itself ---
    let plain = work.path().join("plain");
    ok(
        &release(&plain, &["manifest"], &[]),
        "release/build.sh manifest",
    );
    let plain = std::fs::read_to_string(plain.join("ferrolb.yaml")).unwrap();
    assert_eq!(
        by_key(parse_docs(&plain)),
        by_key(base),
        "the default manifest is not `kubectl kustomize deploy/`"
    );

    // --- bad input: a clear refusal, nothing written ---
    for (steps, env, says) in [
        (
            vec!["manifest"],
            vec![("FERROLB_IMAGE", "registry.example/ferrolb:1.0")],
            "FERROLB_IMAGE must be a repository without tag or digest",
        ),
        (
            vec!["manifest"],
            vec![("FERROLB_IMAGE_DIGEST", "sha256:abc")],
            "FERROLB_IMAGE_DIGEST must be sha256:<64 lowercase hex digits>",
        ),
        (vec!["manifests"], vec![], "unknown step 'manifests'"),
    ] {
        let dir = work.path().join("refused");
        let out = release(&dir, &steps, &env);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(says),
            "{steps:?} {env:?}: {}\n{stderr}",
            out.status
        );
        assert!(
            std::fs::read_dir(&dir).map_or(true, |mut d| d.next().is_none()),
            "{steps:?} {env:?} wrote into {}",
            dir.display()
        );
    }
}

/// The manifest's namespace labels are the ones the workloads need (docs/install.md, "Pod
/// Security"): the speaker's Pod is refused under `baseline` and admitted under the manifest's
/// `privileged`; the controller's passes `restricted`.
fn check_pod_security(k: &Kubectl, live: &[Value], dir: &Path) {
    let namespace = find(live, "Namespace")[0];
    for mode in ["enforce", "audit", "warn"] {
        assert_eq!(
            namespace["metadata"]["labels"][format!("pod-security.kubernetes.io/{mode}")],
            "privileged",
            "{mode}"
        );
    }
    let pod_of = |kind: &str, name: &str| -> PathBuf {
        let template = &find(live, kind)[0]["spec"]["template"];
        let pod = json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "labels": template["metadata"]["labels"]},
            "spec": template["spec"],
        });
        let path = dir.join(format!("{name}.json"));
        std::fs::write(&path, pod.to_string()).unwrap();
        path
    };
    let speaker = pod_of("DaemonSet", "psa-speaker");
    let controller = pod_of("Deployment", "psa-controller");
    let enforce = |level: &str| {
        k.ok(
            &[
                "label",
                "namespace",
                NS,
                "--overwrite",
                &format!("pod-security.kubernetes.io/enforce={level}"),
            ],
            None,
        );
    };
    let dry_create = |pod: &Path| {
        k.run(
            &["create", "--dry-run=server", "-f", pod.to_str().unwrap()],
            None,
        )
    };

    enforce("baseline");
    let refused = dry_create(&speaker);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(
        !refused.status.success()
            && stderr.contains("violates PodSecurity \"baseline")
            && stderr.contains("hostNetwork")
            && stderr.contains("NET_RAW"),
        "the speaker's Pod under enforce=baseline: {}\n{stderr}",
        refused.status
    );
    enforce("restricted");
    let admitted = dry_create(&controller);
    ok(&admitted, "the controller's Pod under enforce=restricted");
    enforce("privileged");
    let admitted = dry_create(&speaker);
    ok(&admitted, "the speaker's Pod under enforce=privileged");
}

/// The package holds every file of the chart directory, each unchanged but `values.yaml`, whose
/// one change is the image repository (and `Chart.yaml`, which `helm package` re-serialises).
fn check_package_files(package: &Path, chart_dir: &Path, work: &Path) {
    let unpacked = work.join("unpacked");
    std::fs::create_dir_all(&unpacked).unwrap();
    let out = Command::new("tar")
        .arg("-xzf")
        .arg(package)
        .arg("-C")
        .arg(&unpacked)
        .output()
        .unwrap();
    ok(&out, "tar -xzf the chart package");
    let files = |dir: &Path| -> BTreeSet<PathBuf> {
        let mut out = BTreeSet::new();
        let mut stack = vec![dir.to_path_buf()];
        while let Some(d) = stack.pop() {
            for e in std::fs::read_dir(&d).unwrap() {
                let p = e.unwrap().path();
                if p.is_dir() {
                    stack.push(p);
                } else {
                    out.insert(p.strip_prefix(dir).unwrap().to_path_buf());
                }
            }
        }
        out
    };
    let packaged_dir = unpacked.join("ferrolb");
    let packaged = files(&packaged_dir);
    let expected = files(chart_dir);
    assert_eq!(packaged, expected, "files of the chart package");
    for file in &expected {
        let committed = std::fs::read_to_string(chart_dir.join(file)).unwrap();
        let in_package = std::fs::read_to_string(packaged_dir.join(file)).unwrap();
        if file == Path::new("values.yaml") {
            let changed: Vec<(&str, &str)> = committed
                .lines()
                .zip(in_package.lines())
                .filter(|(a, b)| a != b)
                .collect();
            assert_eq!(
                changed,
                [(
                    "  repository: ferrolb",
                    format!("  repository: {IMAGE}").as_str()
                )],
                "values.yaml in the package"
            );
            assert_eq!(committed.lines().count(), in_package.lines().count());
        } else if file == Path::new("Chart.yaml") {
            // `helm package` writes Chart.yaml anew from what it read: the same fields.
            let parse = |text: &str| -> Value { serde_saphyr::from_str(text).unwrap() };
            assert_eq!(
                parse(&in_package),
                parse(&committed),
                "Chart.yaml in the package"
            );
        } else {
            assert_eq!(in_package, committed, "{} in the package", file.display());
        }
    }
}

/// `owner/repo@<40 hex> # vX.Y.Z` (or a local `./action`); returns the major version tag (`v7`).
fn pinned_major(uses: &str) -> Option<String> {
    if uses.starts_with("./") {
        return None;
    }
    let (reference, comment) = uses.split_once(" # ")?;
    let (action, sha) = reference.split_once('@')?;
    let pinned = action.split('/').count() >= 2
        && sha.len() == 40
        && sha
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let version = comment.trim();
    let major = version.split('.').next()?;
    let is_version = version.starts_with('v')
        && version[1..]
            .split('.')
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (pinned && is_version).then(|| format!("{action}@{major}"))
}

fn actionlint(args: &[&str], dir: &Path) -> Output {
    let bin = cached_bin_dir(
        "FERROLB_ACTIONLINT_BIN",
        "tests/cluster/build-actionlint.sh",
    )
    .unwrap()
    .join("actionlint");
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .expect("running actionlint")
}

fn has_shellcheck() -> bool {
    Command::new("shellcheck")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn release_workflow_passes_actionlint() {
    let root = repo_root();
    let out = actionlint(&["-version"], &root);
    let version = ok(&out, "actionlint -version");
    assert_eq!(version.lines().next(), Some("v1.7.12"), "{version}");
    // Without shellcheck actionlint skips the `run:` scripts; CI installs it (.ci/run).
    let shellcheck = has_shellcheck();
    assert!(
        shellcheck || std::env::var_os("CI").is_none(),
        "shellcheck is missing: the workflow's scripts would not be linted"
    );
    if !shellcheck {
        eprintln!("note: no shellcheck on PATH; actionlint skips the `run:` scripts");
    }

    let workflows = root.join(".github/workflows");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&workflows)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    assert!(
        files.iter().any(|f| f.ends_with("release.yml")),
        "{files:?}"
    );
    let names: Vec<String> = files
        .iter()
        .map(|f| {
            format!(
                ".github/workflows/{}",
                f.file_name().unwrap().to_str().unwrap()
            )
        })
        .collect();
    let name_args: Vec<&str> = names.iter().map(String::as_str).collect();

    // As committed.
    let mut args = vec!["-oneline"];
    args.extend(&name_args);
    let out = actionlint(&args, &root);
    assert!(
        out.status.success(),
        "actionlint:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );

    // Every action pinned by commit, its version in the comment; then the same files with each
    // reference as its major version tag, which is how actionlint knows the inputs of popular
    // actions (it cannot look a commit up), so a misspelt input fails there.
    let copy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(copy.path().join(".github/workflows")).unwrap();
    let mut pinned = 0;
    let mut by_tag: Vec<(String, String)> = Vec::new();
    for (file, name) in files.iter().zip(&names) {
        let text = std::fs::read_to_string(file).unwrap();
        let mut rewritten = String::new();
        for line in text.lines() {
            let trimmed = line.trim_start().trim_start_matches("- ");
            if let Some(uses) = trimmed.strip_prefix("uses: ") {
                let major = pinned_major(uses).unwrap_or_else(|| {
                    panic!("{name}: `{uses}` is not owner/repo@<commit> # vX.Y.Z")
                });
                pinned += 1;
                let indent = &line[..line.len() - trimmed.len()];
                rewritten.push_str(&format!("{indent}uses: {major}\n"));
            } else {
                rewritten.push_str(line);
                rewritten.push('\n');
            }
        }
        by_tag.push((name.clone(), rewritten));
    }
    assert!(pinned >= 10, "only {pinned} actions found");
    let lint_copy = |files: &[(String, String)]| -> Output {
        for (name, text) in files {
            std::fs::write(copy.path().join(name), text).unwrap();
        }
        actionlint(&args, copy.path())
    };
    let out = lint_copy(&by_tag);
    assert!(
        out.status.success(),
        "actionlint, actions at their major tags:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    // Control: the check is live — a misspelt input of a known action fails.
    let misspelt: Vec<(String, String)> = by_tag
        .iter()
        .map(|(n, t)| {
            (
                n.clone(),
                t.replacen("if-no-files-found:", "if-no-file-found:", 1),
            )
        })
        .collect();
    assert_ne!(
        misspelt, by_tag,
        "no `if-no-files-found:` input to misspell"
    );
    let out = lint_copy(&misspelt);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        !out.status.success() && said.contains("input \"if-no-file-found\" is not defined"),
        "actionlint accepted a misspelt input:\n{said}"
    );

    // The release script itself.
    if shellcheck {
        let out = Command::new("shellcheck")
            .args([
                "release/build.sh",
                "tests/cluster/build-actionlint.sh",
                "tests/cluster/build.sh",
                "tests/vm/build.sh",
                "tests/vm/guest-init.sh",
                ".ci/run",
            ])
            .current_dir(&root)
            .output()
            .unwrap();
        ok(&out, "shellcheck release/build.sh");
    }
}

#[test]
fn pinned_major_reads_only_commit_pins_with_a_version() {
    let sha = "3d3c42e5aac5ba805825da76410c181273ba90b1";
    assert_eq!(
        pinned_major(&format!("actions/checkout@{sha} # v7.0.1")).as_deref(),
        Some("actions/checkout@v7")
    );
    assert_eq!(
        pinned_major(&format!("anchore/sbom-action@{sha} # v0.24.0")).as_deref(),
        Some("anchore/sbom-action@v0")
    );
    for bad in [
        "actions/checkout@v7".to_owned(),
        format!("actions/checkout@{sha}"),
        format!("actions/checkout@{} # v7.0.1", &sha[1..]),
        format!("actions/checkout@{} # v7.0.1", sha.to_uppercase()),
        format!("actions/checkout@{sha} # main"),
        format!("checkout@{sha} # v7.0.1"),
    ] {
        assert_eq!(pinned_major(&bad), None, "{bad}");
    }
}

/// The `binaries` step: static linux/amd64 binaries (a release build of three binaries, several
/// minutes on two cores: the extended tier; docs/testing.md, "Tiers").
#[test]
#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier: a release build of three binaries (tests/run.sh --extended)"
)]
fn release_binaries_are_static() {
    let work = tempfile::tempdir().unwrap();
    let dist = work.path().join("dist");
    let out = release(&dist, &["binaries"], &[]);
    ok(&out, "release/build.sh binaries");
    let name = format!("ferrolb-{VERSION}-linux-amd64");
    let dir = dist.join(&name);
    for bin in ["ferrolb", "ferrolb-controller", "ferrolb-speaker"] {
        let path = dir.join(bin);
        let ldd = Command::new("ldd").arg(&path).output().unwrap();
        let said = String::from_utf8_lossy(&ldd.stdout).into_owned()
            + &String::from_utf8_lossy(&ldd.stderr);
        assert!(
            said.contains("statically linked") || said.contains("not a dynamic executable"),
            "{bin}: ldd says {said}"
        );
        let version = Command::new(&path).arg("--version").output().unwrap();
        assert_eq!(ok(&version, bin).trim(), format!("{bin} {VERSION}"));
    }
    for doc in ["LICENSE", "README.md", "CHANGELOG.md"] {
        assert!(dir.join(doc).is_file(), "{doc} missing");
    }
    // The kubectl plugin name (`kubectl ferrolb status`): a link to the same binary.
    let plugin = dir.join("kubectl-ferrolb");
    assert_eq!(
        std::fs::read_link(&plugin).unwrap(),
        std::path::Path::new("ferrolb")
    );
    let version = Command::new(&plugin).arg("--version").output().unwrap();
    assert_eq!(
        ok(&version, "kubectl-ferrolb").trim(),
        format!("ferrolb {VERSION}")
    );
    let listing = Command::new("tar")
        .arg("-tzf")
        .arg(dist.join(format!("{name}.tar.gz")))
        .output()
        .unwrap();
    let listing = ok(&listing, "tar -tzf");
    for file in [
        "ferrolb",
        "kubectl-ferrolb",
        "ferrolb-controller",
        "ferrolb-speaker",
        "LICENSE",
        "README.md",
        "CHANGELOG.md",
    ] {
        assert!(
            listing.lines().any(|l| l == format!("{name}/{file}")),
            "{file} not in the archive:\n{listing}"
        );
    }
    let sums = std::fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    assert!(sums.contains(&format!("  {name}.tar.gz")), "{sums}");
}
