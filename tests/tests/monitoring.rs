//! The monitoring files (`deploy/monitoring/`: Grafana dashboard, PrometheusRule, PodMonitor) and
//! `docs/metrics.md` against the real binaries (issue #12 part 4):
//!
//! - the dashboard JSON and the rule YAML parse and have the structure Grafana and the Prometheus
//!   Operator need (every panel has targets with an expression; every rule has `alert`, `expr`,
//!   `for`, `labels.severity`, `annotations.summary`), and every expression parses as PromQL
//!   (`promql-parser`) and selects its metrics by name;
//! - `kubectl kustomize deploy/monitoring/` renders them, the dashboard as a ConfigMap with the
//!   file's exact content, and the PodMonitor selects the pods of `deploy/` by their port name;
//! - every `ferrolb_…` name in an expression is a sample the real controller or speaker exports
//!   (a counter only with `_total`, a histogram only as `_bucket`/`_sum`/`_count`), and every metric
//!   they export is a row of `docs/metrics.md` with its type and labels, and nothing else is —
//!   so none of the three can drift from the binaries; renaming a metric in any of them (done to
//!   copies of the files in the test) fails these checks. The binaries run in the network-namespace
//!   lab against the test cluster with a pending Service and an IP no node may announce, which
//!   also checks the two gauges the alerts rely on (`services_pending`, `no_eligible_node_ips`).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use ferrolb_crds::v1beta1::LabelSelector;
use ferrolb_crds::{IPAddressPool, IPAddressPoolSpec, L2AdvertisementSpec};
use ferrolb_tests::cluster::{k8s_bin, repo_root};
use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
use ferrolb_tests::lab::Lab;
use ferrolb_tests::lab::scenario::metric_value;
use ferrolb_tests::objects::{apply_l2, create_service, lb_service};
use ferrolb_tests::poll::until;
use k8s_openapi::api::core::v1::Service;
use kube::Api;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use promql_parser::label::MatchOp;
use promql_parser::parser::{Expr, VectorSelector};
use serde_json::Value;

const SETTLE: Duration = Duration::from_secs(30);

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

fn dashboard() -> Value {
    serde_json::from_str(&read("deploy/monitoring/ferrolb-dashboard.json"))
        .expect("the dashboard is JSON")
}

fn rule_file() -> Value {
    serde_saphyr::from_str(&read("deploy/monitoring/ferrolb-alerts.yaml"))
        .expect("the PrometheusRule is YAML")
}

fn str_at<'a>(v: &'a Value, key: &str, what: &str) -> &'a str {
    v.get(key)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| panic!("{what}: no {key}: {v}"))
}

/// Every PromQL expression of the dashboard: `(where, expr)`.
fn dashboard_exprs(d: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for p in d["panels"].as_array().expect("panels") {
        let title = str_at(p, "title", "panel");
        for t in p["targets"].as_array().into_iter().flatten() {
            out.push((
                format!("panel {title:?}"),
                str_at(t, "expr", title).to_owned(),
            ));
        }
    }
    out
}

/// Every rule of the PrometheusRule.
fn rules(r: &Value) -> Vec<&Value> {
    r["spec"]["groups"]
        .as_array()
        .expect("spec.groups")
        .iter()
        .flat_map(|g| g["rules"].as_array().expect("group rules"))
        .collect()
}

fn rule_exprs(r: &Value) -> Vec<(String, String)> {
    rules(r)
        .into_iter()
        .map(|rule| {
            let alert = str_at(rule, "alert", "rule");
            (
                format!("alert {alert}"),
                str_at(rule, "expr", alert).to_owned(),
            )
        })
        .collect()
}

/// The `ferrolb_…` names in `text` (whole identifiers; a name cut short by `…` in prose, ending
/// in `_`, is not one).
fn ferrolb_names(text: &str) -> BTreeSet<String> {
    let is_ident = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == ':';
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("ferrolb_") {
        let before = rest[..i].chars().next_back();
        let tail = &rest[i..];
        let len = tail.find(|c: char| !is_ident(c)).unwrap_or(tail.len());
        let name = &tail[..len];
        if before.is_none_or(|c| !is_ident(c)) && !name.ends_with('_') {
            out.insert(name.to_owned());
        }
        rest = &tail[len..];
    }
    out
}

/// Grafana's interval variables, which Grafana replaces before it sends a query: the values given
/// here only have to be valid PromQL durations.
const GRAFANA_INTERVALS: [(&str, &str); 3] = [
    ("$__rate_interval", "1m"),
    ("$__interval", "30s"),
    ("$__range", "1h"),
];

/// Parses `expr` as PromQL (with Grafana's interval variables replaced, no other `$` allowed) and
/// returns the metric names its selectors read. A selector without a literal metric name (e.g.
/// `{__name__=~"ferrolb_.*"}`) is refused: its metrics could not be checked against the binaries.
fn promql_metrics(what: &str, expr: &str) -> Result<BTreeSet<String>, String> {
    let mut query = expr.to_owned();
    for (var, value) in GRAFANA_INTERVALS {
        query = query.replace(var, value);
    }
    if query.contains('$') {
        return Err(format!("{what}: a variable PromQL does not know in {expr}"));
    }
    let ast = promql_parser::parser::parse(&query)
        .map_err(|e| format!("{what}: not PromQL ({e}): {expr}"))?;
    let mut names = BTreeSet::new();
    selected_metrics(&ast, &mut names).map_err(|e| format!("{what}: {e} in {expr}"))?;
    Ok(names)
}

/// The metric names of every vector and range selector in `expr`.
fn selected_metrics(expr: &Expr, out: &mut BTreeSet<String>) -> Result<(), String> {
    let selector = |vs: &VectorSelector, out: &mut BTreeSet<String>| {
        let by_matcher = vs
            .matchers
            .matchers
            .iter()
            .find(|m| m.name == "__name__" && m.op == MatchOp::Equal)
            .map(|m| m.value.clone());
        match vs.name.clone().or(by_matcher) {
            Some(name) => {
                out.insert(name);
                Ok(())
            }
            None => Err(format!("a selector without a metric name: {vs}")),
        }
    };
    match expr {
        Expr::VectorSelector(vs) => selector(vs, out),
        Expr::MatrixSelector(ms) => selector(&ms.vs, out),
        Expr::Aggregate(a) => {
            if let Some(param) = &a.param {
                selected_metrics(param, out)?;
            }
            selected_metrics(&a.expr, out)
        }
        Expr::Unary(u) => selected_metrics(&u.expr, out),
        Expr::Paren(p) => selected_metrics(&p.expr, out),
        Expr::Subquery(s) => selected_metrics(&s.expr, out),
        Expr::Binary(b) => {
            selected_metrics(&b.lhs, out)?;
            selected_metrics(&b.rhs, out)
        }
        Expr::Call(c) => c
            .args
            .args
            .iter()
            .try_for_each(|arg| selected_metrics(arg, out)),
        Expr::NumberLiteral(_) | Expr::StringLiteral(_) => Ok(()),
        Expr::Extension(_) => Err("an extension node".to_owned()),
    }
}

/// What is wrong with the expressions `(where, expr)` given the sample names the binaries export:
/// an expression that does not parse, or reads a metric that is not exported (or not ferrolb's).
/// Empty when all is well. Also returns every metric read.
fn check_exprs(
    exprs: &[(String, String)],
    exported: &BTreeSet<String>,
) -> (Vec<String>, BTreeSet<String>) {
    let mut problems = Vec::new();
    let mut used = BTreeSet::new();
    for (what, expr) in exprs {
        match promql_metrics(what, expr) {
            Err(e) => problems.push(e),
            Ok(names) => {
                for name in names {
                    if !exported.contains(&name) {
                        problems.push(format!(
                            "{what} reads {name}, which neither binary exports: {expr}"
                        ));
                    }
                    used.insert(name);
                }
            }
        }
    }
    (problems, used)
}

#[test]
fn promql_checks_reject_broken_and_unchecked_queries() {
    let ok = promql_metrics(
        "t",
        "sum by (le) (rate(ferrolb_a_seconds_bucket[$__rate_interval])) / on() group_left \
         max(ferrolb_b{x=\"1\"}) > 0.9 or vector(0)",
    )
    .unwrap();
    assert_eq!(
        ok,
        ["ferrolb_a_seconds_bucket", "ferrolb_b"]
            .map(String::from)
            .into()
    );
    assert_eq!(
        promql_metrics("t", "{__name__=\"ferrolb_c\", node=\"n\"}").unwrap(),
        ["ferrolb_c".to_owned()].into()
    );
    for broken in [
        "sum by (reason) (ferrolb_a > 0",
        "rate(ferrolb_a)",
        "ferrolb_a{x=\"1}",
        "ferrolb_a / by (x) ferrolb_b",
        "rate(ferrolb_a[$node])",
        "count({__name__=~\"ferrolb_.*\"})",
    ] {
        assert!(promql_metrics("t", broken).is_err(), "accepted: {broken}");
    }
}

#[test]
fn the_dashboard_has_panels_with_queries_on_a_grid() {
    let d = dashboard();
    str_at(&d, "title", "dashboard");
    str_at(&d, "uid", "dashboard");
    let vars = d["templating"]["list"].as_array().expect("templating.list");
    assert!(
        vars.iter().any(|v| v["name"] == "datasource"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus data source variable: {vars:?}"
    );
    let panels = d["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "{} panels", panels.len());
    let mut ids = BTreeSet::new();
    let mut cells: BTreeMap<(u64, u64), String> = BTreeMap::new();
    for p in panels {
        let title = str_at(p, "title", "panel");
        str_at(p, "description", title);
        assert!(
            ["timeseries", "stat", "state-timeline", "table"].contains(&str_at(p, "type", title)),
            "{title}: {}",
            p["type"]
        );
        assert!(
            ids.insert(p["id"].as_u64().expect("numeric panel id")),
            "{title}: duplicate id"
        );
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{title}");
        let g = &p["gridPos"];
        let [x, y, w, h] = ["x", "y", "w", "h"].map(|k| {
            g[k].as_u64()
                .unwrap_or_else(|| panic!("{title}: gridPos.{k}"))
        });
        assert!(w > 0 && h > 0 && x + w <= 24, "{title}: gridPos {g}");
        for cx in x..x + w {
            for cy in y..y + h {
                if let Some(other) = cells.insert((cx, cy), title.to_owned()) {
                    panic!("{title} overlaps {other} at ({cx}, {cy})");
                }
            }
        }
        let targets = p["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title}: no targets");
        let mut refs = BTreeSet::new();
        for t in targets {
            assert!(
                refs.insert(str_at(t, "refId", title)),
                "{title}: duplicate refId"
            );
            let expr = str_at(t, "expr", title);
            let names = promql_metrics(title, expr).unwrap_or_else(|e| panic!("{e}"));
            assert!(
                !names.is_empty() && names.iter().all(|n| n.starts_with("ferrolb_")),
                "{title}: {expr} reads {names:?}, not ferrolb metrics"
            );
        }
    }
}

#[test]
fn the_prometheus_rule_has_the_promised_alerts_each_complete() {
    let r = rule_file();
    assert_eq!(r["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(r["kind"], "PrometheusRule");
    str_at(&r["metadata"], "name", "metadata");
    let mut alerts = BTreeMap::new();
    for rule in rules(&r) {
        let alert = str_at(rule, "alert", "rule");
        let expr = str_at(rule, "expr", alert);
        assert!(!expr.contains('$'), "{alert}: Grafana variable in {expr}");
        promql_metrics(alert, expr).unwrap_or_else(|e| panic!("{e}"));
        let dur = str_at(rule, "for", alert);
        let (n, unit) = dur.split_at(dur.len() - 1);
        assert!(
            !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && "smhdwy".contains(unit),
            "{alert}: for {dur:?} is not a Prometheus duration"
        );
        let severity = str_at(&rule["labels"], "severity", alert);
        assert!(
            ["critical", "warning", "info"].contains(&severity),
            "{alert}: severity {severity}"
        );
        str_at(&rule["annotations"], "summary", alert);
        assert!(
            alerts
                .insert(alert.to_owned(), (expr.to_owned(), dur.to_owned()))
                .is_none(),
            "{alert} twice"
        );
    }
    // The alerts, on the metrics that say so.
    for (alert, metrics) in [
        (
            "FerrolbPoolNearlyFull",
            &[
                "ferrolb_controller_pool_assigned",
                "ferrolb_controller_pool_available",
            ][..],
        ),
        (
            "FerrolbServicePending",
            &["ferrolb_controller_services_pending"],
        ),
        (
            "FerrolbNoEligibleNode",
            &["ferrolb_speaker_no_eligible_node_ips"],
        ),
        (
            "FerrolbIPConflict",
            &["ferrolb_speaker_ip_conflicts", "ferrolb_speaker_held_ips"],
        ),
        (
            "FerrolbSpeakerNotInMajority",
            &["ferrolb_speaker_claim_standing"],
        ),
    ] {
        let (expr, _) = alerts
            .get(alert)
            .unwrap_or_else(|| panic!("no alert {alert}"));
        let names = promql_metrics(alert, expr).unwrap();
        for m in metrics {
            assert!(names.contains(*m), "{alert} reads {m}: {expr}");
        }
    }
    assert!(alerts["FerrolbPoolNearlyFull"].0.contains("> 0.9"));
    assert_eq!(alerts["FerrolbServicePending"].1, "5m");
}

/// `kubectl kustomize deploy/monitoring/`: the PodMonitor, the PrometheusRule as committed, and
/// the dashboard ConfigMap holding the file byte for byte; the PodMonitor selects the pods of the
/// install base by their `monitoring` port. The install base itself does not include them.
#[test]
fn the_monitoring_kustomization_renders_the_files_and_selects_the_pods() {
    let dir = repo_root().join("deploy/monitoring");
    let out = std::process::Command::new(k8s_bin("kubectl").unwrap())
        .args(["kustomize"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let docs: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&out.stdout)).unwrap();
    let by_kind: BTreeMap<&str, &Value> = docs
        .iter()
        .map(|d| (d["kind"].as_str().unwrap(), d))
        .collect();
    assert_eq!(
        by_kind.keys().copied().collect::<Vec<_>>(),
        ["ConfigMap", "PodMonitor", "PrometheusRule"],
        "{docs:?}"
    );
    for d in &docs {
        assert_eq!(d["metadata"]["namespace"], "ferrolb-system", "{d}");
    }
    let cm = by_kind["ConfigMap"];
    assert_eq!(cm["metadata"]["name"], "ferrolb-dashboard");
    assert_eq!(cm["metadata"]["labels"]["grafana_dashboard"], "1");
    assert_eq!(
        cm["data"]["ferrolb-dashboard.json"].as_str(),
        Some(read("deploy/monitoring/ferrolb-dashboard.json").as_str())
    );
    let mut rule = rule_file();
    rule["metadata"]["namespace"] = "ferrolb-system".into();
    assert_eq!(by_kind["PrometheusRule"]["spec"], rule["spec"]);

    let pm = by_kind["PodMonitor"];
    let selector = pm["spec"]["selector"]["matchLabels"]
        .as_object()
        .expect("matchLabels");
    let endpoints = pm["spec"]["podMetricsEndpoints"].as_array().unwrap();
    assert!(
        endpoints.iter().all(|e| e["port"] == "monitoring"
            && e["relabelings"]
                .as_array()
                .is_some_and(|r| r.iter().any(|r| r["targetLabel"] == "node"))),
        "{endpoints:?}"
    );
    for file in ["deploy/controller.yaml", "deploy/speaker.yaml"] {
        let objs: Vec<Value> = serde_saphyr::from_multiple(&read(file)).unwrap();
        let pod = objs
            .iter()
            .find(|o| ["Deployment", "DaemonSet"].contains(&o["kind"].as_str().unwrap_or("")))
            .unwrap_or_else(|| panic!("{file}: no workload"))["spec"]["template"]
            .clone();
        for (k, v) in selector {
            assert_eq!(&pod["metadata"]["labels"][k], v, "{file}: label {k}");
        }
        assert!(
            pod["spec"]["containers"]
                .as_array()
                .unwrap()
                .iter()
                .flat_map(|c| c["ports"].as_array().into_iter().flatten())
                .any(|p| p["name"] == "monitoring"),
            "{file}: no port named monitoring"
        );
    }
    assert!(
        !read("deploy/kustomization.yaml").contains("monitoring"),
        "the install base must not need the Prometheus Operator's CRDs"
    );
}

// ---- against the real binaries -----------------------------------------------------------

/// One binary's `/metrics`: family → (type, label names seen on its samples).
#[derive(Debug, Default)]
struct Exposition {
    families: BTreeMap<String, (String, BTreeSet<String>)>,
}

/// The sample names a family of `kind` is queried by.
fn sample_names(family: &str, kind: &str) -> Vec<String> {
    let suffixes: &[&str] = match kind {
        "counter" => &["_total"],
        "histogram" => &["_bucket", "_sum", "_count"],
        "summary" => &["", "_sum", "_count"],
        "info" => &["_info"],
        _ => &[""],
    };
    suffixes.iter().map(|s| format!("{family}{s}")).collect()
}

impl Exposition {
    /// Parses OpenMetrics text, checking that every sample belongs to a `# TYPE`d family and that
    /// the text ends with `# EOF`.
    fn parse(who: &str, body: &str) -> Exposition {
        assert!(body.ends_with("# EOF\n"), "{who}: no # EOF:\n{body}");
        let mut e = Exposition::default();
        let mut by_sample: BTreeMap<String, String> = BTreeMap::new();
        for line in body.lines() {
            if let Some(t) = line.strip_prefix("# TYPE ") {
                let (name, kind) = t.split_once(' ').expect("# TYPE name type");
                e.families
                    .insert(name.to_owned(), (kind.to_owned(), BTreeSet::new()));
                for s in sample_names(name, kind) {
                    by_sample.insert(s, name.to_owned());
                }
                continue;
            }
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let end = line.find(['{', ' ']).expect("sample value");
            let sample = &line[..end];
            let family = by_sample
                .get(sample)
                .unwrap_or_else(|| panic!("{who}: sample {sample} of no # TYPE family"));
            if let Some(labels) = line[end..].strip_prefix('{') {
                let labels = &labels[..labels.find('}').expect("closing brace")];
                let names = labels
                    .split(',')
                    .filter_map(|kv| kv.split_once('=').map(|(k, _)| k.trim().to_owned()))
                    .filter(|k| k != "le");
                if let Some((_, seen)) = e.families.get_mut(family) {
                    seen.extend(names);
                }
            }
        }
        e
    }

    fn samples(&self) -> BTreeSet<String> {
        self.families
            .iter()
            .flat_map(|(f, (kind, _))| sample_names(f, kind))
            .collect()
    }
}

/// A metric as `docs/metrics.md` lists it and as the binaries export it: the name PromQL queries
/// it by (counters with `_total`) → (type, label names).
type MetricTable = BTreeMap<String, (String, BTreeSet<String>)>;

/// The rows `| \`name\` | type | labels | … |` of the text of `docs/metrics.md`.
fn documented(doc: &str) -> Result<MetricTable, String> {
    let mut rows = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        let Some(name) = cells
            .get(1)
            .and_then(|c| c.strip_prefix("`ferrolb_"))
            .and_then(|c| c.strip_suffix('`'))
        else {
            continue;
        };
        let labels = cells
            .get(3)
            .into_iter()
            .flat_map(|c| c.split(','))
            .map(|l| l.trim().trim_matches('`').to_owned())
            .filter(|l| !l.is_empty())
            .collect();
        let old = rows.insert(
            format!("ferrolb_{name}"),
            (cells.get(2).copied().unwrap_or("").to_owned(), labels),
        );
        if old.is_some() {
            return Err(format!("docs/metrics.md lists ferrolb_{name} twice"));
        }
    }
    Ok(rows)
}

/// What is wrong with `doc` (the text of `docs/metrics.md`) given what the binaries export
/// (`expected`, and `samples`: every sample name) and the alerts shipped: a metric without its
/// row, a row of no exported metric, a wrong type or label set, a `ferrolb_…` name in the prose
/// that is not exported, an alert not explained. Empty when all is well.
fn check_docs(
    doc: &str,
    expected: &MetricTable,
    samples: &BTreeSet<String>,
    alerts: &[String],
) -> Vec<String> {
    let rows = match documented(doc) {
        Ok(rows) => rows,
        Err(e) => return vec![e],
    };
    let mut problems = Vec::new();
    for (name, (kind, labels)) in expected {
        let Some((doc_kind, doc_labels)) = rows.get(name) else {
            problems.push(format!("docs/metrics.md has no row for {name}"));
            continue;
        };
        if doc_kind != kind {
            problems.push(format!(
                "docs/metrics.md: {name} is a {kind}, not a {doc_kind}"
            ));
        }
        // A family without samples yet shows no labels to compare.
        if !labels.is_empty() && doc_labels != labels {
            problems.push(format!(
                "docs/metrics.md: {name} has labels {labels:?}, not {doc_labels:?}"
            ));
        }
    }
    for name in rows.keys().filter(|n| !expected.contains_key(*n)) {
        problems.push(format!(
            "docs/metrics.md has a row for {name}, not exported"
        ));
    }
    for name in ferrolb_names(doc) {
        if !samples.contains(&name) && !expected.contains_key(&name) {
            problems.push(format!(
                "docs/metrics.md mentions {name}, which is not exported"
            ));
        }
    }
    for alert in alerts {
        if !doc.contains(&format!("`{alert}`")) {
            problems.push(format!("docs/metrics.md does not explain {alert}"));
        }
    }
    problems
}

/// The dashboard's and the rules' expressions, from the files' text.
fn all_exprs(dashboard_json: &str, rules_yaml: &str) -> Vec<(String, String)> {
    let mut exprs = dashboard_exprs(&serde_json::from_str(dashboard_json).unwrap());
    exprs.extend(rule_exprs(&serde_saphyr::from_str(rules_yaml).unwrap()));
    exprs
}

async fn pool(client: &kube::Client, name: &str, addresses: &[&str], auto_assign: bool) {
    let pool = IPAddressPool::new(
        name,
        IPAddressPoolSpec {
            addresses: addresses.iter().map(|a| (*a).into()).collect(),
            auto_assign,
            avoid_buggy_ips: false,
            allow_sharing_across_namespaces: false,
            service_allocation: None,
            auto_addresses: None,
        },
    );
    Api::<IPAddressPool>::all(client.clone())
        .create(&PostParams::default(), &pool)
        .await
        .unwrap();
}

fn annotated(mut svc: Service, key: &str, value: &str) -> Service {
    svc.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(key.into(), value.into());
    svc
}

/// Polls `/metrics` through `get` until `series` has `value`; returns that body.
async fn wait_metric<F, Fut>(who: &str, series: &str, value: f64, get: F) -> String
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Option<String>>,
{
    let last = std::cell::RefCell::new(String::new());
    let (last_ref, get) = (&last, &get);
    let reached = until(
        &format!("{who}: {series} = {value}"),
        SETTLE,
        move || async move {
            let body = get().await.unwrap_or_default();
            let done = metric_value(&body, series) == Some(value);
            *last_ref.borrow_mut() = body;
            done
        },
    )
    .await;
    let body = last.into_inner();
    if let Err(e) = reached {
        panic!("{e}:\n{body}");
    }
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_metric_of_the_dashboard_alerts_and_docs_is_exported_by_the_binaries() {
    let mut lab = Lab::start(1, 0).await.expect("lab");
    let client = lab.client().await.unwrap();
    // "main" is announced by every node; "dark" only by nodes of a rack that does not exist.
    pool(&client, "main", &["198.51.100.88/29"], true).await;
    pool(&client, "dark", &["198.51.100.96/30"], false).await;
    apply_l2(
        &client,
        "main",
        L2AdvertisementSpec {
            ip_address_pools: vec!["main".into()],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    apply_l2(
        &client,
        "rack-9",
        L2AdvertisementSpec {
            ip_address_pools: vec!["dark".into()],
            node_selectors: vec![LabelSelector {
                match_labels: [("rack".to_owned(), "9".to_owned())].into(),
                ..Default::default()
            }],
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let svc = |name: &str| lb_service("default", name, &[("TCP", 80)], "Cluster");
    create_service(&client, &svc("web")).await.unwrap();
    create_service(
        &client,
        &annotated(svc("dark"), "ferrolb.io/address-pool", "dark"),
    )
    .await
    .unwrap();
    create_service(
        &client,
        &annotated(svc("stray"), "ferrolb.io/loadBalancerIPs", "203.0.113.7"),
    )
    .await
    .unwrap();
    lab.start_speaker("node-1", &[]).unwrap();
    let controller = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("monitoring"),
    )
    .unwrap();
    let ctl = &controller;
    let controller_metrics = move || async move { ctl.get("/metrics").await.map(|(_, b)| b) };
    let lab_ref = &lab;
    let speaker_metrics = move || async move {
        lab_ref
            .speaker_http("node-1", "/metrics")
            .await
            .ok()
            .map(|(_, b)| b)
    };

    // The gauges the alerts rely on say what happened: one Service pending (its requested IP is
    // in no pool), one IP nobody may announce, one IP owned by the only node.
    let pending = "ferrolb_controller_services_pending{reason=\"requested_in_no_pool\"}";
    wait_metric("controller", pending, 1.0, controller_metrics).await;
    let ctl_first = wait_metric(
        "controller",
        "ferrolb_controller_pool_assigned{pool=\"dark\",family=\"IPv4\"}",
        1.0,
        controller_metrics,
    )
    .await;
    assert_eq!(
        metric_value(
            &ctl_first,
            "ferrolb_controller_services_pending{reason=\"exhausted\"}"
        ),
        Some(0.0),
        "every reason is exported"
    );
    wait_metric(
        "speaker",
        "ferrolb_speaker_no_eligible_node_ips",
        1.0,
        speaker_metrics,
    )
    .await;
    let spk_body = wait_metric("speaker", "ferrolb_speaker_owned_ips", 1.0, speaker_metrics).await;
    assert!(
        spk_body.contains("\nferrolb_speaker_members "),
        "membership joined:\n{spk_body}"
    );

    // A write war (another field manager forcing the status of a Service, R8) makes the last
    // controller metric appear: its label is the other manager's name, so it has no series before.
    create_service(&client, &svc("contested")).await.unwrap();
    let api = Api::<Service>::namespaced(client.clone(), "default");
    let conflicts = "ferrolb_controller_status_write_conflicts_total{manager=\"other-lb\"}";
    let rounds = std::cell::Cell::new(0_usize);
    let last = std::cell::RefCell::new(String::new());
    let (rounds_ref, last_ref, api_ref) = (&rounds, &last, &api);
    let war = until("a write war", SETTLE, move || async move {
        let body = controller_metrics().await.unwrap_or_default();
        let seen = metric_value(&body, conflicts) == Some(1.0);
        *last_ref.borrow_mut() = body;
        if !seen {
            // Outside every pool and the lab's networks: nobody announces it.
            let ip = ["203.0.113.77", "203.0.113.78"][rounds_ref.get() % 2];
            rounds_ref.set(rounds_ref.get() + 1);
            let patch = serde_json::json!({"apiVersion": "v1", "kind": "Service",
                "status": {"loadBalancer": {"ingress": [{"ip": ip}]}}});
            api_ref
                .patch_status(
                    "contested",
                    &PatchParams::apply("other-lb").force(),
                    &Patch::Apply(&patch),
                )
                .await
                .unwrap();
        }
        seen
    })
    .await;
    let ctl_body = last.into_inner();
    if let Err(e) = war {
        panic!("{e}:\n{ctl_body}");
    }
    assert_eq!(
        metric_value(&ctl_body, "ferrolb_controller_status_contested"),
        Some(1.0)
    );

    let controller_exp = Exposition::parse("controller", &ctl_body);
    let speaker_exp = Exposition::parse("speaker", &spk_body);
    for (who, exp, prefix) in [
        ("controller", &controller_exp, "ferrolb_controller_"),
        ("speaker", &speaker_exp, "ferrolb_speaker_"),
    ] {
        for f in exp.families.keys() {
            assert!(f.starts_with(prefix), "{who} exports {f}");
        }
        assert_eq!(
            exp.families
                .get(&format!("{prefix}build_info"))
                .map(|(kind, labels)| (kind.as_str(), labels.clone())),
            Some(("gauge", ["commit", "version"].map(String::from).into())),
            "{who}: build_info"
        );
    }

    // Every metric named by the dashboard and the alerts is exported, as the sample name PromQL
    // sees (counters with `_total`, histograms as `_bucket`/`_sum`/`_count`).
    let exported: BTreeSet<String> = controller_exp
        .samples()
        .into_iter()
        .chain(speaker_exp.samples())
        .collect();
    let dashboard_json = read("deploy/monitoring/ferrolb-dashboard.json");
    let rules_yaml = read("deploy/monitoring/ferrolb-alerts.yaml");
    let (problems, used) = check_exprs(&all_exprs(&dashboard_json, &rules_yaml), &exported);
    assert!(problems.is_empty(), "{problems:#?}\nexported: {exported:?}");
    assert!(
        used.len() >= 30,
        "the dashboard covers the metrics: {used:?}"
    );

    // docs/metrics.md has exactly one row per exported metric, with its type and labels, and
    // explains every alert; every ferrolb name it mentions anywhere is exported.
    let mut expected = MetricTable::new();
    for exp in [&controller_exp, &speaker_exp] {
        for (family, (kind, labels)) in &exp.families {
            let name = match kind.as_str() {
                "counter" => format!("{family}_total"),
                _ => family.clone(),
            };
            expected.insert(name, (kind.clone(), labels.clone()));
        }
    }
    let alerts: Vec<String> = rules(&rule_file())
        .iter()
        .map(|r| r["alert"].as_str().unwrap().to_owned())
        .collect();
    let doc_text = read("docs/metrics.md");
    let problems = check_docs(&doc_text, &expected, &exported, &alerts);
    assert!(problems.is_empty(), "{problems:#?}");

    // The checks catch drift: a metric renamed in the dashboard, in a rule or in the docs (or a
    // counter queried without `_total`), a row dropped from the docs, a metric the docs do not
    // know of (as if a binary exported one more).
    let mutated_exprs = [
        (
            "dashboard",
            "ferrolb_speaker_owned_ips",
            "ferrolb_speaker_owned_ip",
        ),
        (
            "dashboard",
            "ferrolb_controller_releases_total",
            "ferrolb_controller_releases",
        ),
        (
            "rules",
            "ferrolb_speaker_no_eligible_node_ips",
            "ferrolb_speaker_no_eligible_nodes",
        ),
        (
            "rules",
            "ferrolb_controller_pool_available",
            "ferrolb_controller_pool_free",
        ),
    ];
    for (file, from, to) in mutated_exprs {
        let (d, r) = match file {
            "dashboard" => (dashboard_json.replace(from, to), rules_yaml.clone()),
            _ => (dashboard_json.clone(), rules_yaml.replace(from, to)),
        };
        assert!(
            d != dashboard_json || r != rules_yaml,
            "{from} is not in the {file}"
        );
        let (problems, _) = check_exprs(&all_exprs(&d, &r), &exported);
        assert!(
            !problems.is_empty() && problems.iter().all(|p| p.contains(to)),
            "renaming {from} to {to} in the {file}: {problems:#?}"
        );
    }
    let row = "| `ferrolb_speaker_held_ips` |";
    assert!(doc_text.contains(row));
    let row_renamed = doc_text.replace(row, "| `ferrolb_speaker_held_ip` |");
    let row_dropped: String = doc_text
        .lines()
        .filter(|l| !l.starts_with(row))
        .map(|l| format!("{l}\n"))
        .collect();
    let mut one_more = expected.clone();
    one_more.insert(
        "ferrolb_speaker_unknown_total".into(),
        ("counter".into(), BTreeSet::new()),
    );
    for (what, doc, expected) in [
        ("a row renamed", &row_renamed, &expected),
        ("a row dropped", &row_dropped, &expected),
        ("an undocumented metric", &doc_text, &one_more),
        (
            "a label renamed",
            &doc_text.replace("| `pool`, `family` |", "| `pool`, `af` |"),
            &expected,
        ),
    ] {
        assert!(
            !check_docs(doc, expected, &exported, &alerts).is_empty(),
            "docs/metrics.md with {what} passes"
        );
    }

    // The gauge is a level: the pending Service gone, it drops to 0.
    Api::<Service>::namespaced(client.clone(), "default")
        .delete("stray", &DeleteParams::default())
        .await
        .unwrap();
    wait_metric("controller", pending, 0.0, controller_metrics).await;
}
