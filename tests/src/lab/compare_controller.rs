//! ferrolb's and MetalLB's controllers side by side (issue #11): the allocation and restart rows of
//! `ferrolb-bench-controller compare`.
//!
//! One run per implementation, each in a fresh lab of one node (the API server, the node's
//! namespace for the speaker and, for MetalLB, its controller's own namespace with the API relay):
//!
//! 1. pool `2001:db8:1::/112` in the implementation's own CRDs, its controller started;
//! 2. N LoadBalancer Services created at once ([`bulk_service`]: IPv6 single-stack, no
//!    NodePorts — the test cluster's IPv4 Service range is a /26 and its NodePort range holds
//!    2,768 ports), timed until a watch has seen every one with an ingress in its status;
//! 3. the controller's resident memory then (`VmRSS`, `VmHWM` of `/proc/<pid>/status`);
//!    then the lab's one node starts its speaker, which reads every one of those Services (and
//!    announces what it owns), and its resident memory is read once it has settled
//!    ([`settled_rss`]); the speaker is stopped before the restart, so its requests are not
//!    counted there;
//! 4. the controller restarted (SIGTERM, then a new process) with every Service assigned, and
//!    watched until it settles — no API request other than on `leases` (leader election renews
//!    its lease forever) for [`QUIET`], at most [`RESTART_LIMIT`]: the time that took from the
//!    new process's start, how many Services changed (their `resourceVersion`), and the API
//!    server's requests by verb and resource in that time (its own `apiserver_request_total`,
//!    resource requests only — nothing else talks to this API server then).
//!
//! The harness writes nothing during the restart window; the watch of step 2 is closed before it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};

use super::bench::proc_status_kib;
use super::{Implementation, Lab};
use crate::controller::{ControllerOptions, ControllerProcess};
use crate::objects::{create_service, lb_service};

/// The pool both controllers allocate from (documentation range; 65,536 addresses).
pub const POOL: &str = "2001:db8:1::/112";

/// A restarted controller has settled after this long without an API request (leases aside).
pub const QUIET: Duration = Duration::from_secs(5);

/// The restart is watched at most this long.
pub const RESTART_LIMIT: Duration = Duration::from_secs(300);

/// What to run.
#[derive(Debug, Clone)]
pub struct ControllerSetup {
    /// LoadBalancer Services created at once.
    pub services: usize,
    /// Concurrent create calls.
    pub concurrency: usize,
    /// ferrolb's controller binary (`None`: the workspace's debug build).
    pub ferrolb_controller: Option<PathBuf>,
    /// No full status within this long after the first create: the run fails.
    pub timeout: Duration,
    /// ferrolb's speaker binary (`None`: the workspace's debug build).
    pub ferrolb_speaker: Option<PathBuf>,
    /// Extra arguments for ferrolb's speaker (e.g. `--timing-profile fast`).
    pub ferrolb_args: Vec<String>,
}

/// The figures of one implementation's run.
#[derive(Debug, Clone, Default)]
pub struct ControllerFigures {
    /// First create call → last create call answered (the API server's create rate).
    pub created: Duration,
    /// First create call → every Service seen with an ingress in its status.
    pub all_status: Duration,
    /// Controller resident memory once every Service had status, KiB (`VmRSS`).
    pub rss_kib: Option<u64>,
    /// Its peak resident memory until then, KiB (`VmHWM`).
    pub peak_kib: Option<u64>,
    /// Restarted process started → settled (see the module docs); `None`: not within
    /// [`RESTART_LIMIT`].
    pub restart_settled: Option<Duration>,
    /// Services whose `resourceVersion` changed between the restart and its settling.
    pub restart_changed: usize,
    /// API requests (resource requests, by verb and resource) between the restart and its
    /// settling.
    pub restart_requests: BTreeMap<String, u64>,
    /// The restarted controller's resident memory at the end of the window, KiB.
    pub restart_rss_kib: Option<u64>,
    /// The speaker's resident memory once settled with every Service present, KiB (`VmRSS`).
    pub speaker_rss_kib: Option<u64>,
    /// The speaker's peak resident memory until then, KiB (`VmHWM`).
    pub speaker_peak_kib: Option<u64>,
}

/// A speaker's memory has settled when `VmRSS` moved less than 1 % over this long.
pub const SPEAKER_SETTLE: Duration = Duration::from_secs(5);

/// The speaker's memory is read at most this long after its start, settled or not.
pub const SPEAKER_LIMIT: Duration = Duration::from_secs(120);

/// Whether resident memory `samples` (KiB, one per second, oldest first) have settled: the last
/// `window` samples lie within 1 % of the newest one. Pure.
pub fn rss_settled(samples: &[u64], window: usize) -> bool {
    let Some(&last) = samples.last() else {
        return false;
    };
    samples.len() >= window
        && samples[samples.len() - window..]
            .iter()
            .all(|&s| s.abs_diff(last) * 100 <= last)
}

/// Polls process `pid`'s `VmRSS` every second until it has settled ([`rss_settled`] over
/// [`SPEAKER_SETTLE`]) or [`SPEAKER_LIMIT`] passed; returns `(VmRSS, VmHWM)` in KiB then.
pub async fn settled_rss(pid: u32) -> (Option<u64>, Option<u64>) {
    let started = Instant::now();
    let window = usize::try_from(SPEAKER_SETTLE.as_secs()).unwrap_or(5) + 1;
    let mut samples = Vec::new();
    while started.elapsed() < SPEAKER_LIMIT {
        match proc_status_kib(pid, "VmRSS:") {
            Some(kib) => samples.push(kib),
            None => return (None, None),
        }
        if rss_settled(&samples, window) {
            break;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    (
        proc_status_kib(pid, "VmRSS:"),
        proc_status_kib(pid, "VmHWM:"),
    )
}

/// A LoadBalancer Service for bulk runs: TCP 80, `externalTrafficPolicy: Cluster`, IPv6
/// single-stack, `allocateLoadBalancerNodePorts: false` (see the module docs).
pub fn bulk_service(namespace: &str, name: &str) -> Service {
    let mut svc = lb_service(namespace, name, &[("TCP", 80)], "Cluster");
    if let Some(spec) = svc.spec.as_mut() {
        spec.ip_families = Some(vec!["IPv6".into()]);
        spec.ip_family_policy = Some("SingleStack".into());
        spec.allocate_load_balancer_node_ports = Some(false);
    }
    svc
}

/// Whether the Service's status holds at least one ingress.
pub fn has_status(s: &Service) -> bool {
    s.status
        .as_ref()
        .and_then(|st| st.load_balancer.as_ref())
        .and_then(|lb| lb.ingress.as_ref())
        .is_some_and(|i| !i.is_empty())
}

/// Watches `api` until `total` distinct Services have been seen with status; the task's result is
/// that instant (or the instant the watch ended early).
pub fn when_all_have_status(api: Api<Service>, total: usize) -> tokio::task::JoinHandle<Instant> {
    tokio::spawn(async move {
        let mut with_status = BTreeSet::new();
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()).applied_objects());
        while let Ok(Some(s)) = stream.try_next().await {
            if has_status(&s) {
                with_status.insert(s.name_any());
                if with_status.len() >= total {
                    return Instant::now();
                }
            }
        }
        Instant::now()
    })
}

/// Creates `count` [`bulk_service`]s `svc-00000`… in `namespace`, `concurrency` at a time.
///
/// # Errors
/// The API server refused one.
pub async fn create_services(
    client: &Client,
    namespace: &str,
    count: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    futures::stream::iter(0..count)
        .map(|i| {
            let client = client.clone();
            async move {
                create_service(&client, &bulk_service(namespace, &format!("svc-{i:05}"))).await
            }
        })
        .buffer_unordered(concurrency.max(1))
        .try_collect::<Vec<()>>()
        .await?;
    Ok(())
}

/// `name → (resourceVersion, has status)` of every Service in `namespace`.
///
/// # Errors
/// The list failed.
pub async fn versions(
    client: &Client,
    namespace: &str,
) -> anyhow::Result<BTreeMap<String, (Option<String>, bool)>> {
    let list = Api::<Service>::namespaced(client.clone(), namespace)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .map(|s| (s.name_any(), (s.resource_version(), has_status(s))))
        .collect())
}

/// The API server's `apiserver_request_total` summed by verb and resource (keys like
/// `PUT services/status`, `LIST services`), over resource requests only (samples with an empty
/// `resource` label — `/metrics`, `/readyz`, … — are left out).
///
/// # Errors
/// `/metrics` could not be read.
pub async fn requests_by_verb(client: &Client) -> anyhow::Result<BTreeMap<String, u64>> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    Ok(parse_requests_by_verb(&client.request_text(req).await?))
}

/// [`requests_by_verb`] on a Prometheus text exposition.
pub fn parse_requests_by_verb(metrics: &str) -> BTreeMap<String, u64> {
    let mut by_verb = BTreeMap::new();
    for line in metrics.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some((labels, value)) = rest.rsplit_once("} ") else {
            continue;
        };
        let label = |name: &str| {
            labels
                .split(',')
                .find_map(|kv| kv.strip_prefix(name)?.strip_prefix("=\""))
                .map(|v| v.trim_end_matches('"'))
        };
        let (Some(verb), Some(resource)) = (label("verb"), label("resource")) else {
            continue;
        };
        if resource.is_empty() {
            continue;
        }
        let key = match label("subresource") {
            Some(sub) if !sub.is_empty() => format!("{verb} {resource}/{sub}"),
            _ => format!("{verb} {resource}"),
        };
        let count = value.trim().parse::<f64>().unwrap_or(0.0);
        *by_verb.entry(key).or_insert(0) += count as u64;
    }
    by_verb
}

/// `after − before` per verb (verbs without requests in between left out).
pub fn delta(
    before: &BTreeMap<String, u64>,
    after: &BTreeMap<String, u64>,
) -> BTreeMap<String, u64> {
    after
        .iter()
        .map(|(verb, n)| {
            (
                verb.clone(),
                n.saturating_sub(*before.get(verb).unwrap_or(&0)),
            )
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// The running controller of either implementation (MetalLB's is held by the lab).
pub(super) enum Running {
    Ferrolb(ControllerProcess),
    MetalLb,
}

/// ferrolb controller arguments of the allocation runs: a 5 s lease, so a restarted controller
/// waits at most that long if the old one did not release it (the bench's, as in
/// `ferrolb-bench-controller`).
pub const BENCH_LEASE: &[&str] = &["--lease-duration=5s", "--lease-grace=2s"];

/// Starts the lab implementation's controller; ferrolb's from `ferrolb_bin` (`None`: the debug
/// build) as `identity` with `ferrolb_args` (MetalLB's takes none: it runs without leader
/// election, as its single-replica Deployment does).
pub(super) fn start(
    lab: &mut Lab,
    ferrolb_bin: Option<&PathBuf>,
    identity: &str,
    ferrolb_args: &[&str],
) -> anyhow::Result<Running> {
    match lab.implementation() {
        Implementation::Ferrolb => {
            let mut opts = ControllerOptions::new(identity)
                .args(&["--log-format=json"])
                .args(ferrolb_args);
            opts.binary = ferrolb_bin.cloned();
            Ok(Running::Ferrolb(ControllerProcess::start(
                lab.cluster().kubeconfig(),
                lab.dir(),
                &opts,
            )?))
        }
        Implementation::MetalLb => {
            lab.start_metallb_controller()?;
            Ok(Running::MetalLb)
        }
    }
}

/// The controller's pid, if it runs.
pub(super) fn pid(lab: &Lab, running: &Running) -> Option<u32> {
    match running {
        Running::Ferrolb(p) => p.process().pid(),
        Running::MetalLb => lab.metallb_controller_pid().ok(),
    }
}

/// Stops the controller (SIGTERM, SIGKILL after 5 s).
pub(super) fn stop(lab: &mut Lab, running: Running) {
    match running {
        Running::Ferrolb(p) => p.stop(Duration::from_secs(5)),
        Running::MetalLb => lab.stop_metallb_controller(),
    }
}

/// One run of `implementation`'s controller (see the module docs).
///
/// # Errors
/// The lab or the controller did not start, a create failed, not every Service had status within
/// the timeout, or the API server's metrics could not be read.
pub async fn run(
    implementation: Implementation,
    setup: &ControllerSetup,
) -> anyhow::Result<ControllerFigures> {
    let mut lab = Lab::start_implementation(implementation, 1, 0).await?;
    if let Some(bin) = &setup.ferrolb_speaker {
        lab.set_speaker_bin(bin.clone());
    }
    let client = lab.client().await?;
    lab.advertise_pool("bench", &[POOL]).await?;
    let ns = crate::namespace::fresh(&client, "bench").await?;
    let first = start(
        &mut lab,
        setup.ferrolb_controller.as_ref(),
        "bench-1",
        BENCH_LEASE,
    )?;
    let api = Api::<Service>::namespaced(client.clone(), &ns);
    let done = when_all_have_status(api, setup.services);
    let started = Instant::now();
    create_services(&client, &ns, setup.services, setup.concurrency).await?;
    let created = started.elapsed();
    let Ok(finished) = tokio::time::timeout(setup.timeout.saturating_sub(created), done).await
    else {
        let missing = versions(&client, &ns)
            .await?
            .values()
            .filter(|(_, s)| !*s)
            .count();
        bail!(
            "{}: {missing} of {} Services without status after {:?}",
            implementation.name(),
            setup.services,
            setup.timeout
        );
    };
    let all_status = finished.context("status watch")?.duration_since(started);
    let first_pid = pid(&lab, &first);
    let rss_kib = first_pid.and_then(|p| proc_status_kib(p, "VmRSS:"));
    let peak_kib = first_pid.and_then(|p| proc_status_kib(p, "VmHWM:"));

    let speakers = lab.start_every_speaker(&setup.ferrolb_args)?;
    let (speaker_rss_kib, speaker_peak_kib) = match lab.speaker_pid(&speakers[0]) {
        Ok(pid) => settled_rss(pid).await,
        Err(_) => (None, None),
    };
    lab.signal_speaker(&speakers[0], "TERM")?;

    let before = versions(&client, &ns).await?;
    let unassigned = before.values().filter(|(_, s)| !*s).count();
    if unassigned != 0 {
        bail!("{unassigned} Services lost their status before the restart");
    }
    stop(&mut lab, first);
    let requests_before = requests_by_verb(&client).await?;
    let second = start(
        &mut lab,
        setup.ferrolb_controller.as_ref(),
        "bench-2",
        BENCH_LEASE,
    )?;
    let restarted = Instant::now();
    if let Running::Ferrolb(p) = &second {
        // Quiet while waiting for the lease is not settled: wait until it leads.
        while p.metric("ferrolb_controller_leader").await != Some(1.0) {
            if restarted.elapsed() > Duration::from_secs(60) {
                bail!("restarted controller did not lead: {}", p.log_tail(20));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let (requests_after, restart_settled) = settle(&client, restarted).await?;
    let after = versions(&client, &ns).await?;
    let restart_rss_kib = pid(&lab, &second).and_then(|p| proc_status_kib(p, "VmRSS:"));
    stop(&mut lab, second);
    let restart_changed = before
        .iter()
        .filter(|(name, v)| after.get(*name) != Some(v))
        .count();
    Ok(ControllerFigures {
        created,
        all_status,
        rss_kib,
        peak_kib,
        restart_settled,
        restart_changed,
        restart_requests: delta(&requests_before, &requests_after),
        restart_rss_kib,
        speaker_rss_kib,
        speaker_peak_kib,
    })
}

/// Polls the API server's request counters every 250 ms until nothing but `leases` changed for
/// [`QUIET`]: the last counters and the time from `since` to the last non-lease change (`None`
/// if still busy after [`RESTART_LIMIT`]).
async fn settle(
    client: &Client,
    since: Instant,
) -> anyhow::Result<(BTreeMap<String, u64>, Option<Duration>)> {
    let busy = |by: &BTreeMap<String, u64>| -> u64 {
        by.iter()
            .filter(|(k, _)| !k.ends_with(" leases"))
            .map(|(_, n)| n)
            .sum()
    };
    let mut last = requests_by_verb(client).await?;
    let mut last_change = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let now = requests_by_verb(client).await?;
        if busy(&now) != busy(&last) {
            last_change = Instant::now();
        }
        last = now;
        if last_change.elapsed() >= QUIET {
            return Ok((last, Some(last_change.duration_since(since))));
        }
        if since.elapsed() >= RESTART_LIMIT {
            return Ok((last, None));
        }
    }
}

/// One line of the controller table: a value per implementation and their ratio.
#[derive(Debug, Clone)]
pub struct ValueRow {
    /// What was measured, with its unit.
    pub what: String,
    /// ferrolb's value.
    pub ferrolb: Option<f64>,
    /// MetalLB's value.
    pub metallb: Option<f64>,
}

/// The rows of one run of each implementation with `services` Services.
pub fn value_rows(
    services: usize,
    ferrolb: Option<&ControllerFigures>,
    metallb: Option<&ControllerFigures>,
) -> Vec<ValueRow> {
    type Get = fn(&ControllerFigures) -> Option<f64>;
    let rows: [(String, Get); 9] = [
        (
            format!("{services} Services created at once → all have status, s"),
            |f| Some(f.all_status.as_secs_f64()),
        ),
        (
            format!("controller resident memory with {services} Services, MiB"),
            |f| f.rss_kib.map(|k| k as f64 / 1024.0),
        ),
        (
            format!("controller peak resident memory with {services} Services, MiB"),
            |f| f.peak_kib.map(|k| k as f64 / 1024.0),
        ),
        (
            format!("controller restart with {services} Services: new process → settled, s"),
            |f| f.restart_settled.map(|d| d.as_secs_f64()),
        ),
        (
            format!("controller restart with {services} Services: Services written"),
            |f| Some(f.restart_changed as f64),
        ),
        (
            format!("controller restart with {services} Services: API requests until settled"),
            |f| Some(f.restart_requests.values().sum::<u64>() as f64),
        ),
        (
            format!("restarted controller resident memory ({services} Services), MiB"),
            |f| f.restart_rss_kib.map(|k| k as f64 / 1024.0),
        ),
        (
            format!("speaker resident memory with {services} Services, MiB"),
            |f| f.speaker_rss_kib.map(|k| k as f64 / 1024.0),
        ),
        (
            format!("speaker peak resident memory with {services} Services, MiB"),
            |f| f.speaker_peak_kib.map(|k| k as f64 / 1024.0),
        ),
    ];
    rows.into_iter()
        .map(|(what, get)| ValueRow {
            what,
            ferrolb: ferrolb.and_then(get),
            metallb: metallb.and_then(get),
        })
        .collect()
}

/// The markdown table of [`ValueRow`]s: both values and the ratio MetalLB ÷ ferrolb (`-` when
/// either is missing or ferrolb's is 0).
pub fn value_table(rows: &[ValueRow]) -> String {
    let mut out = String::from(
        "| measurement | ferrolb | MetalLB | ratio (MetalLB ÷ ferrolb) |\n|---|---|---|---|\n",
    );
    let cell = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), fmt_value);
    for row in rows {
        let ratio = match (row.ferrolb, row.metallb) {
            (Some(f), Some(m)) if f > 0.0 => format!("{:.1}×", m / f),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {ratio} |\n",
            row.what,
            cell(row.ferrolb),
            cell(row.metallb)
        ));
    }
    out
}

fn fmt_value(v: f64) -> String {
    if v.fract() == 0.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// `key n, key n, …` of a by-verb map (`none` when empty).
pub fn by_verb_line(by_verb: &BTreeMap<String, u64>) -> String {
    if by_verb.is_empty() {
        return "none".into();
    }
    by_verb
        .iter()
        .map(|(verb, n)| format!("{verb} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn requests_are_summed_by_verb_over_resource_requests_only() {
        let text = r#"# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="namespace",subresource="status",verb="PATCH",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",dry_run="",group="",resource="services",scope="namespace",subresource="status",verb="PATCH",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="services",scope="cluster",subresource="",verb="LIST",version="v1"} 3
apiserver_request_total{code="200",component="",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 40
apiserver_request_duration_seconds_count{verb="GET",resource="services"} 99
"#;
        let by_verb = parse_requests_by_verb(text);
        assert_eq!(
            by_verb,
            BTreeMap::from([
                ("LIST services".to_owned(), 3),
                ("PATCH services/status".to_owned(), 9)
            ])
        );
        let later = BTreeMap::from([
            ("LIST services".to_owned(), 3),
            ("PATCH services/status".to_owned(), 12),
            ("WATCH services".to_owned(), 1),
        ]);
        assert_eq!(
            delta(&by_verb, &later),
            BTreeMap::from([
                ("PATCH services/status".to_owned(), 3),
                ("WATCH services".to_owned(), 1)
            ])
        );
        assert_eq!(by_verb_line(&delta(&later, &later)), "none");
        assert_eq!(
            by_verb_line(&later),
            "LIST services 3, PATCH services/status 12, WATCH services 1"
        );
    }

    #[test]
    fn the_value_table_gives_both_values_and_the_ratio() {
        let rows = [
            ValueRow {
                what: "a, s".into(),
                ferrolb: Some(2.0),
                metallb: Some(5.5),
            },
            ValueRow {
                what: "b".into(),
                ferrolb: Some(0.0),
                metallb: None,
            },
        ];
        let t = value_table(&rows);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[2], "| a, s | 2 | 5.50 | 2.8× |");
        assert_eq!(lines[3], "| b | 0 | - | - |");
    }

    #[test]
    fn memory_has_settled_when_the_last_samples_stay_within_one_percent() {
        assert!(!rss_settled(&[], 3));
        assert!(!rss_settled(&[1000, 1000], 3), "too few samples");
        assert!(rss_settled(&[500, 1000, 1005, 1010], 3));
        assert!(!rss_settled(&[1000, 1000, 1100], 3), "still growing");
        assert!(!rss_settled(&[1000, 1020, 1000], 3), "2 % apart");
        assert!(rss_settled(&[1000, 1010, 1000], 3));
    }

    #[test]
    fn the_speaker_rows_are_in_mib() {
        let f = ControllerFigures {
            speaker_rss_kib: Some(2048),
            speaker_peak_kib: Some(3072),
            ..ControllerFigures::default()
        };
        let rows = value_rows(10, Some(&f), None);
        let speaker: Vec<_> = rows
            .iter()
            .filter(|r| r.what.starts_with("speaker"))
            .map(|r| (r.what.as_str(), r.ferrolb, r.metallb))
            .collect();
        assert_eq!(
            speaker,
            [
                (
                    "speaker resident memory with 10 Services, MiB",
                    Some(2.0),
                    None
                ),
                (
                    "speaker peak resident memory with 10 Services, MiB",
                    Some(3.0),
                    None
                ),
            ]
        );
    }
}
