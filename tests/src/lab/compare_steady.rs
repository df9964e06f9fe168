//! ferrolb and MetalLB at rest, side by side (issue #11): the steady-state rows of
//! `ferrolb-bench-lab compare-steady`.
//!
//! One run per implementation, each in a fresh lab of N nodes and one client: the
//! implementation's controller and a speaker per node, pool `198.51.100.0/24` in its own CRDs,
//! [`CLUSTER_IP_SERVICES`] ClusterIP Services and [`LB_SERVICES`] LoadBalancer Services (each with
//! one ready endpoint, so MetalLB announces them too). Once every LoadBalancer Service has an
//! address and exactly one node answers ARP for each, and a quiet period has passed, the window
//! starts; over it the harness only sleeps, and the figures are:
//!
//! - the API server's requests by verb and resource (`apiserver_request_total` before and after,
//!   resource requests only), per minute — everything the implementation's controller (ferrolb's
//!   with its default lease: 15 s, renewed 5 s before expiry) and speakers asked of the API
//!   server at rest, plus the API server's own lease renewals (`PUT leases`, 12 per minute here,
//!   the same in both labs);
//! - the speakers' CPU time (`utime + stime`), mean per speaker, ms per minute;
//! - resident memory of the controller and of the largest speaker at the end.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::bail;

use super::bench::{clock_ticks_per_second, cpu_sample, proc_status_kib};
use super::compare_controller::{self, requests_by_verb};
use super::{Implementation, Lab};
use crate::objects::{apply_endpoints, create_service, ingress_v4, lb_service};

/// ClusterIP Services present during the window (they are noise both implementations see).
pub const CLUSTER_IP_SERVICES: usize = 50;

/// LoadBalancer Services present during the window.
pub const LB_SERVICES: usize = 5;

/// What to run.
#[derive(Debug, Clone)]
pub struct SteadySetup {
    /// Nodes (each runs a speaker).
    pub nodes: usize,
    /// The measured window.
    pub window: Duration,
    /// Quiet time between "every IP answered by one node" and the window.
    pub settle: Duration,
    /// ferrolb's speaker binary (`None`: the debug build) and its extra arguments.
    pub ferrolb_speaker: Option<PathBuf>,
    /// Extra arguments for ferrolb's speaker (e.g. `--timing-profile fast`).
    pub ferrolb_args: Vec<String>,
    /// ferrolb's controller binary (`None`: the debug build).
    pub ferrolb_controller: Option<PathBuf>,
}

/// The figures of one implementation's window.
#[derive(Debug, Clone, Default)]
pub struct SteadyFigures {
    /// Requests in the window by verb and resource.
    pub requests: BTreeMap<String, u64>,
    /// The window's length.
    pub window: Duration,
    /// Speaker CPU time over the window, mean per speaker, ms per minute.
    pub speaker_cpu_ms_per_min: f64,
    /// The largest speaker's resident memory at the end, KiB.
    pub speaker_rss_kib: Option<u64>,
    /// The controller's resident memory at the end, KiB.
    pub controller_rss_kib: Option<u64>,
}

impl SteadyFigures {
    /// All requests of the window, per minute.
    pub fn requests_per_min(&self) -> f64 {
        let minutes = self.window.as_secs_f64() / 60.0;
        if minutes > 0.0 {
            self.requests.values().sum::<u64>() as f64 / minutes
        } else {
            0.0
        }
    }
}

/// One window of `implementation` (see the module docs).
///
/// # Errors
/// The lab, the controller or a speaker did not start; a LoadBalancer Service got no address or
/// not exactly one ARP answer within 120 s; a process's `/proc` entry could not be read.
pub async fn run(
    implementation: Implementation,
    setup: &SteadySetup,
) -> anyhow::Result<SteadyFigures> {
    let mut lab = Lab::start_implementation(implementation, setup.nodes, 1).await?;
    if let Some(bin) = &setup.ferrolb_speaker {
        lab.set_speaker_bin(bin.clone());
    }
    let client = lab.client().await?;
    lab.advertise_pool("steady", &["198.51.100.0/24"]).await?;
    for i in 0..CLUSTER_IP_SERVICES {
        let mut svc = lb_service(
            "default",
            &format!("internal-{i:02}"),
            &[("TCP", 80)],
            "Cluster",
        );
        if let Some(spec) = svc.spec.as_mut() {
            spec.type_ = Some("ClusterIP".into());
            spec.external_traffic_policy = None;
        }
        create_service(&client, &svc).await?;
    }
    let lb_names: Vec<String> = (0..LB_SERVICES).map(|i| format!("web-{i}")).collect();
    for name in &lb_names {
        create_service(
            &client,
            &lb_service("default", name, &[("TCP", 80)], "Cluster"),
        )
        .await?;
        apply_endpoints(
            &client,
            "default",
            name,
            80,
            &[("192.0.2.11", Some("node-1"), true, true, false)],
        )
        .await?;
    }
    let controller =
        compare_controller::start(&mut lab, setup.ferrolb_controller.as_ref(), "steady", &[])?;
    let names = lab.start_every_speaker(&setup.ferrolb_args)?;
    let deadline = Instant::now() + Duration::from_secs(120);
    'ready: loop {
        let mut all = true;
        for name in &lb_names {
            let answered = match ingress_v4(&client, "default", name).await {
                Some(ip) => lab.arp_answers(0, ip).await?.len() == 1,
                None => false,
            };
            all &= answered;
        }
        if all {
            break 'ready;
        }
        if Instant::now() >= deadline {
            bail!(
                "{}: not every LoadBalancer Service got an address answered by one node within 120 s",
                implementation.name()
            );
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    tokio::time::sleep(setup.settle).await;
    let speaker_pids = names
        .iter()
        .map(|n| lab.speaker_pid(n))
        .collect::<anyhow::Result<Vec<u32>>>()?;
    let cpu_before = speaker_pids
        .iter()
        .map(|p| cpu_sample(*p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let requests_before = requests_by_verb(&client).await?;
    let started = Instant::now();
    tokio::time::sleep(setup.window).await;
    let requests_after = requests_by_verb(&client).await?;
    let window = started.elapsed();
    let cpu_after = speaker_pids
        .iter()
        .map(|p| cpu_sample(*p))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let ticks: u64 = cpu_before
        .iter()
        .zip(&cpu_after)
        .map(|(b, a)| a.ticks.saturating_sub(b.ticks))
        .sum();
    let ms = ticks as f64 * 1000.0 / clock_ticks_per_second()? as f64;
    let per_speaker_per_min = ms / speaker_pids.len().max(1) as f64 / (window.as_secs_f64() / 60.0);
    let figures = SteadyFigures {
        requests: compare_controller::delta(&requests_before, &requests_after),
        window,
        speaker_cpu_ms_per_min: per_speaker_per_min,
        speaker_rss_kib: speaker_pids
            .iter()
            .filter_map(|p| proc_status_kib(*p, "VmRSS:"))
            .max(),
        controller_rss_kib: compare_controller::pid(&lab, &controller)
            .and_then(|p| proc_status_kib(p, "VmRSS:")),
    };
    compare_controller::stop(&mut lab, controller);
    Ok(figures)
}

/// The table rows of one window per implementation.
pub fn value_rows(
    ferrolb: Option<&SteadyFigures>,
    metallb: Option<&SteadyFigures>,
) -> Vec<compare_controller::ValueRow> {
    type Get = fn(&SteadyFigures) -> Option<f64>;
    let rows: [(String, Get); 4] = [
        (
            format!(
                "at rest ({CLUSTER_IP_SERVICES} ClusterIP + {LB_SERVICES} LoadBalancer Services): API requests per minute"
            ),
            |f| Some(f.requests_per_min()),
        ),
        (
            "at rest: speaker CPU, ms per minute (mean per speaker)".into(),
            |f| Some(f.speaker_cpu_ms_per_min),
        ),
        (
            "at rest: speaker resident memory, MiB (largest)".into(),
            |f| f.speaker_rss_kib.map(|k| k as f64 / 1024.0),
        ),
        ("at rest: controller resident memory, MiB".into(), |f| {
            f.controller_rss_kib.map(|k| k as f64 / 1024.0)
        }),
    ];
    rows.into_iter()
        .map(|(what, get)| compare_controller::ValueRow {
            what,
            ferrolb: ferrolb.and_then(get),
            metallb: metallb.and_then(get),
        })
        .collect()
}
