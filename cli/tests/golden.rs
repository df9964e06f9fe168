//! Golden tests of the `ferrolb migrate` binary: each input is converted, and stdout, stderr and
//! the exit status are compared exactly with `tests/golden/<group>/<input>.golden`.
//!
//! Inputs:
//! - `configsamples`: every file of MetalLB v0.16.2's `configsamples/` (its own sample
//!   configurations: pools, advertisements, BGP objects, sample apps);
//! - `configmaptocrs`: every input of MetalLB's converter from the legacy ConfigMap
//!   (`configmaptocrs/testdata/configmap-{yaml,data}/*.yaml`: whole ConfigMaps and bare
//!   `config` text);
//! - `inputs`: ferrolb's own inputs under `tests/inputs/` (the minikube addon's ConfigMap, filled
//!   in and unconfigured — `- -`, with and without Services holding IPs — and one of each finding).
//!
//! MetalLB's files are read from the Go module cache at test time, never copied into this
//! repository: `FERROLB_METALLB_DIR` (exported by `tests/run.sh`, from `tests/metallb/fetch.sh`),
//! else `$(go env GOMODCACHE)/go.universe.tf/metallb@v0.16.2` (`tests/src/metallb.rs`). Each input is run from its own
//! directory under its bare file name, so the output does not depend on where the cache is.
//!
//! `FERROLB_UPDATE_GOLDEN=1 cargo test -p ferrolb-cli --test golden` rewrites the golden files;
//! review the diff.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The lookup of MetalLB's module directory, shared with the cluster tests.
#[path = "../../tests/src/metallb.rs"]
mod metallb;

/// The environment variables the binary reads besides its arguments: cleared, so the caller's
/// environment cannot change the output.
const BINARY_ENV: [&str; 7] = [
    "FERROLB_MIGRATE_FROM_CLUSTER",
    "FERROLB_KUBECONFIG",
    "FERROLB_METALLB_NAMESPACE",
    "FERROLB_METALLB_CONFIG_MAP",
    "FERROLB_LB_CLASS",
    "FERROLB_DEFAULT_CLASS",
    "KUBECONFIG",
];

fn metallb_dir() -> PathBuf {
    metallb::module_dir().expect("MetalLB's module source")
}

/// One input: the directory to run in, the file name, and its golden file.
struct Case {
    dir: PathBuf,
    file: String,
    golden: PathBuf,
}

fn yaml_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml"))
        .collect();
    names.sort();
    names
}

fn golden_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// `(group, directory)` of every input group.
fn groups() -> Vec<(&'static str, PathBuf)> {
    let metallb = metallb_dir();
    vec![
        ("configsamples", metallb.join("configsamples")),
        (
            "configmaptocrs",
            metallb.join("configmaptocrs/testdata/configmap-yaml"),
        ),
        (
            "configmaptocrs",
            metallb.join("configmaptocrs/testdata/configmap-data"),
        ),
        (
            "inputs",
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs"),
        ),
    ]
}

fn cases() -> Vec<Case> {
    let mut out = Vec::new();
    for (group, dir) in groups() {
        let files = yaml_files(&dir);
        assert!(!files.is_empty(), "no inputs in {}", dir.display());
        for file in files {
            out.push(Case {
                golden: golden_root().join(group).join(format!("{file}.golden")),
                dir: dir.clone(),
                file,
            });
        }
    }
    out
}

/// Runs `ferrolb migrate <args>` in `dir`: (exit status, stdout, stderr).
fn migrate(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferrolb"));
    cmd.current_dir(dir).arg("migrate").args(args);
    for var in BINARY_ENV {
        cmd.env_remove(var);
    }
    let out = cmd.output().expect("running ferrolb");
    (
        out.status.code().expect("ferrolb exited"),
        String::from_utf8(out.stdout).unwrap(),
        String::from_utf8(out.stderr).unwrap(),
    )
}

/// The golden text of one run: a header with the command, the exit status and stderr as
/// comments, then stdout.
fn golden_text(case: &Case) -> String {
    let (code, stdout, stderr) = migrate(&case.dir, &[&case.file]);
    let mut text = format!(
        "# ferrolb migrate {}\n# exit status: {code}\n# stderr:\n",
        case.file
    );
    for line in stderr.lines() {
        text.push_str(&format!("#   {line}\n"));
    }
    text.push_str("# stdout:\n");
    text.push_str(&stdout);
    text
}

#[test]
fn golden() {
    let update = std::env::var_os("FERROLB_UPDATE_GOLDEN").is_some();
    let cases = cases();
    let mut mismatches = Vec::new();
    for case in &cases {
        let actual = golden_text(case);
        if update {
            std::fs::create_dir_all(case.golden.parent().unwrap()).unwrap();
            std::fs::write(&case.golden, &actual).unwrap();
            continue;
        }
        let expected = std::fs::read_to_string(&case.golden).unwrap_or_default();
        if actual != expected {
            let line = actual
                .lines()
                .zip(expected.lines().chain(std::iter::repeat("<end of file>")))
                .position(|(a, e)| a != e)
                .map_or(actual.lines().count().min(expected.lines().count()), |i| i);
            mismatches.push(format!(
                "{}: differs from line {}:\n  got:      {}\n  expected: {}",
                case.golden.display(),
                line + 1,
                actual.lines().nth(line).unwrap_or("<end of output>"),
                expected.lines().nth(line).unwrap_or("<end of file>"),
            ));
        }
    }
    assert!(
        mismatches.is_empty(),
        "{} of {} golden files differ (FERROLB_UPDATE_GOLDEN=1 rewrites them):\n{}",
        mismatches.len(),
        cases.len(),
        mismatches.join("\n")
    );

    // No golden file without an input (a sample renamed or removed upstream, a stale file).
    let wanted: BTreeSet<PathBuf> = cases.iter().map(|c| c.golden.clone()).collect();
    let mut on_disk = BTreeSet::new();
    for group in std::fs::read_dir(golden_root()).unwrap() {
        for f in std::fs::read_dir(group.unwrap().path()).unwrap() {
            on_disk.insert(f.unwrap().path());
        }
    }
    let stale: Vec<_> = on_disk.difference(&wanted).collect();
    assert!(stale.is_empty(), "golden files without an input: {stale:?}");
}

/// The minikube addon's ConfigMap converts to one pool with the range it was given and one
/// L2Advertisement for it, with nothing to report.
#[test]
fn minikube_addon_config_map_converts_cleanly() {
    let inputs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs");
    let (code, stdout, stderr) = migrate(&inputs, &["minikube-addon.yaml"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr,
        "ferrolb migrate: converted 1 IPAddressPool and 1 L2Advertisement; nothing needs attention\n"
    );
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&stdout).unwrap();
    assert_eq!(
        docs,
        [
            serde_json::json!({
                "apiVersion": "ferrolb.io/v1beta1", "kind": "IPAddressPool",
                "metadata": {"name": "default"},
                "spec": {"addresses": ["192.168.49.100-192.168.49.120"], "autoAssign": true, "avoidBuggyIPs": false, "allowSharingAcrossNamespaces": false}
            }),
            serde_json::json!({
                "apiVersion": "ferrolb.io/v1beta1", "kind": "L2Advertisement",
                "metadata": {"name": "default"},
                "spec": {"ipAddressPools": ["default"]}
            }),
        ]
    );
}

/// The same input on stdin (`-`, or no file at all) gives the same output under the source `-`.
#[test]
fn stdin_is_read_with_dash_or_no_files() {
    let inputs = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/inputs");
    let text = std::fs::read_to_string(inputs.join("every-finding.yaml")).unwrap();
    let (_, file_out, file_err) = migrate(&inputs, &["every-finding.yaml"]);
    for args in [&["-"][..], &[][..]] {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_ferrolb"));
        cmd.arg("migrate").args(args);
        for var in BINARY_ENV {
            cmd.env_remove(var);
        }
        let child = cmd
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(&mut child.stdin.as_ref().unwrap(), text.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            file_out.replace("# from every-finding.yaml:", "# from -:")
        );
        assert_eq!(
            String::from_utf8(out.stderr).unwrap(),
            file_err.replace("every-finding.yaml: ", "-: ")
        );
    }
}

/// Unreadable input is an error: exit status 1, nothing on stdout.
#[test]
fn errors_exit_1_with_nothing_on_stdout() {
    let tmp = std::env::temp_dir();
    let (code, stdout, stderr) = migrate(&tmp, &["ferrolb-no-such-file.yaml"]);
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert!(
        stderr.starts_with("ferrolb migrate: error: reading ferrolb-no-such-file.yaml:"),
        "{stderr}"
    );
    let bad = tmp.join(format!("ferrolb-migrate-bad-{}.yaml", std::process::id()));
    std::fs::write(&bad, "address-pools: [\n").unwrap();
    let (code, stdout, stderr) = migrate(&tmp, &[bad.to_str().unwrap()]);
    std::fs::remove_file(&bad).unwrap();
    assert_eq!((code, stdout.as_str()), (1, ""));
    assert!(stderr.contains("not YAML"), "{stderr}");
}
