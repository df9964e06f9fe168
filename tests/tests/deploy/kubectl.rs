//! The real `kubectl`, and RBAC rules as `kubectl auth can-i --list` prints them.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::Output;

/// The real `kubectl`, pointed at the test cluster.
pub struct Kubectl {
    pub kubeconfig: PathBuf,
}

impl Kubectl {
    pub fn run(&self, args: &[&str], stdin: Option<&str>) -> Output {
        ferrolb_tests::cluster::kubectl(&self.kubeconfig, args, stdin).expect("running kubectl")
    }

    /// Runs and asserts success; returns (stdout, stderr).
    pub fn ok(&self, args: &[&str], stdin: Option<&str>) -> (String, String) {
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

    /// `kubectl apply --server-side -f FILE`, asserted clean: exactly `expected` objects
    /// applied and no warning from the API server (deprecated API, Pod Security, …). Returns
    /// the objects read back (`kubectl get -f FILE -o json`, its `items`).
    pub fn apply_cleanly(&self, file: &str, expected: usize) -> Vec<serde_json::Value> {
        let (applied, warnings) = self.ok(&["apply", "--server-side", "-f", file], None);
        assert_eq!(
            applied
                .lines()
                .filter(|l| l.ends_with("serverside-applied"))
                .count(),
            expected,
            "apply output:\n{applied}"
        );
        assert!(
            !warnings.to_lowercase().contains("warning"),
            "apply warned:\n{warnings}"
        );
        let (live, _) = self.ok(&["get", "-f", file, "-o", "json"], None);
        let live: serde_json::Value = serde_json::from_str(&live).expect("kubectl get -o json");
        live["items"].as_array().expect("a List").clone()
    }

    /// `kubectl auth can-i VERB RESOURCE [extra…] --as=SA`: true for "yes", false for "no".
    /// Anything else, or a warning that the resource type or verb is unknown (a typo here would
    /// make a "no" assertion pass vacuously), fails the test.
    pub fn can_i(&self, who: &str, verb: &str, resource: &str, extra: &[&str]) -> bool {
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
    pub fn rules(&self, who: &str, ns: &str) -> BTreeSet<Rule> {
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
pub struct Rule {
    pub resource: String,
    pub names: Vec<String>,
    pub verbs: Vec<String>,
}

pub fn rule(resource: &str, names: &[&str], verbs: &[&str]) -> Rule {
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
