//! The CPU-starvation scenario of issue #8 F4, shared by the lab test
//! (`tests/tests/speaker_faults.rs`) and `ferrolb-bench-lab starve`: one node's speaker is put
//! under a CFS quota (optionally shared with a busy loop) while a client records every frame on
//! the LAN and probes each IP; the outcome counts what a false failover leaves behind.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use super::cpu_quota::Throttling;
use super::scenario::{
    expected_owner, gratuitous_macs, ips_where, lab_with_ips, metric_value, wait_owners,
};
use super::{Lab, Seen, bench};

/// How the speaker is starved.
#[derive(Clone, Copy, Debug)]
pub struct Starve {
    /// CPU quota of its cgroup, % of one CPU per 100 ms period.
    pub percent: u32,
    /// A busy loop shares the cgroup, so the quota runs out every period; with `shares`, busy
    /// loops on every CPU in a neighbour group instead.
    pub hog: bool,
    /// Instead of the quota: `cpu.shares` of the speaker's group and no quota, a CPU request
    /// without a limit as the manifests set it ([`super::cpu_quota::CpuQuota::share`]).
    pub shares: Option<u32>,
    /// How long.
    pub duration: Duration,
    /// Listen window of each ARP probe (a throttled owner answers late, not never).
    pub listen: Duration,
}

/// Per node: members it declared down, stalls it detected (counters from its `/metrics`).
pub type Signals = Vec<(String, f64, f64)>;

/// What happened while a speaker was starved.
#[derive(Clone, Debug)]
pub struct Starvation {
    /// The cgroup's throttling over the run (the premise: was it starved at all?).
    pub throttling: Throttling,
    /// CPU the starved speaker used, ms per second.
    pub cpu_ms_per_s: f64,
    /// Counters before the run.
    pub before: Signals,
    /// Counters after the run.
    pub after: Signals,
    /// IPs for which a MAC other than the owner's sent gratuitous ARP, with those MACs.
    pub foreign_announcements: Vec<(Ipv4Addr, BTreeSet<String>)>,
    /// Probes answered by anything but the owner alone: IP and the MACs that answered.
    pub wrong_answers: Vec<(Ipv4Addr, BTreeSet<String>)>,
    /// Probes sent.
    pub probes: usize,
    /// Time to the first ARP reply for the starved owner's IPs, ms, sorted.
    pub starved_reply_ms: Vec<f64>,
    /// Length of the run.
    pub duration: Duration,
}

impl Starvation {
    /// Members declared down by any node, plus stalls detected, during the run: each is a
    /// (false) failover of some IP.
    pub fn failovers(&self) -> f64 {
        self.before
            .iter()
            .zip(&self.after)
            .map(|(b, a)| (a.1 - b.1) + (a.2 - b.2))
            .sum()
    }

    /// [`Starvation::failovers`] scaled to one hour.
    pub fn failovers_per_hour(&self) -> f64 {
        self.failovers() * 3600.0 / self.duration.as_secs_f64().max(f64::EPSILON)
    }

    /// Nearest-rank percentile `p` of [`Starvation::starved_reply_ms`].
    pub fn reply_percentile(&self, p: u32) -> Option<f64> {
        let us: Vec<u64> = self
            .starved_reply_ms
            .iter()
            .map(|ms| (ms * 1000.0) as u64)
            .collect();
        bench::percentile(&us, p).map(|us| us as f64 / 1000.0)
    }

    /// One line for the test output and the benchmark table.
    pub fn summary(&self) -> String {
        format!(
            "{} of {} periods throttled; speaker used {:.1} ms CPU/s; {} failovers in {} s ({:.0}/hour: members declared down + stalls, per node before {:?} after {:?}); {} wrong answers of {} probes ({} unanswered within the listen window, {} by two or more MACs: {:?}); gratuitous ARP from a non-owner: {:?}; starved owner's ARP reply p50 {:.1} ms p99 {:.1} ms",
            self.throttling.throttled_periods,
            self.throttling.periods,
            self.cpu_ms_per_s,
            self.failovers(),
            self.duration.as_secs(),
            self.failovers_per_hour(),
            self.before,
            self.after,
            self.wrong_answers.len(),
            self.probes,
            self.wrong_answers
                .iter()
                .filter(|(_, m)| m.is_empty())
                .count(),
            self.wrong_answers
                .iter()
                .filter(|(_, m)| m.len() > 1)
                .count(),
            self.wrong_answers,
            self.foreign_announcements,
            self.reply_percentile(50).unwrap_or(f64::NAN),
            self.reply_percentile(99).unwrap_or(f64::NAN),
        )
    }
}

/// Reads [`Signals`] from every node's speaker.
///
/// # Errors
/// A speaker's `/metrics` could not be read or lacks the counters.
pub async fn signals(lab: &Lab, nodes: &[&str]) -> anyhow::Result<Signals> {
    let mut out = Vec::new();
    for n in nodes {
        let body = lab.speaker_http(n, "/metrics").await?.1;
        let series = |s: &str| {
            metric_value(&body, s).ok_or_else(|| anyhow::anyhow!("{n}: no {s} in /metrics"))
        };
        let down = series("ferrolb_speaker_membership_transitions_total{direction=\"down\"}")?;
        let stalls = series("ferrolb_speaker_stalls_total")?;
        out.push(((*n).to_owned(), down, stalls));
    }
    Ok(out)
}

/// The node that is starved in [`run`].
pub const STARVED: &str = "node-1";

/// The whole scenario: a lab of three nodes and one client ([`lab_with_ips`]) with two IPs owned
/// by [`STARVED`] and two owned by the others, speakers (`bin`, or the workspace's debug build)
/// started with `args`; once every IP is answered by its owner alone, [`STARVED`] is starved as
/// `how` says.
///
/// # Errors
/// The lab could not be set up or did not settle, or [`starve`] failed.
pub async fn run(bin: Option<PathBuf>, args: &[&str], how: Starve) -> anyhow::Result<Starvation> {
    let nodes = ["node-1", "node-2", "node-3"];
    let mut ips = ips_where(&nodes, 2, |o| o == STARVED);
    ips.extend(ips_where(&nodes, 2, |o| o != STARVED));
    let (mut lab, _client) = lab_with_ips(3, &ips).await?;
    if let Some(bin) = bin {
        lab.set_speaker_bin(bin);
    }
    for n in nodes {
        lab.start_speaker(n, args)?;
    }
    wait_owners(&lab, &ips, &nodes).await?;
    starve(&lab, &nodes, &ips, STARVED, how).await
}

/// Starves node `starved`'s speaker as `how` says while client 0 captures the LAN and probes
/// every IP of `ips` round after round; `nodes` are all lab nodes (the owners are computed
/// among them). The speakers must be running and settled.
///
/// # Errors
/// The cgroup could not be set up, or a probe, capture or metrics read failed.
pub async fn starve(
    lab: &Lab,
    nodes: &[&str],
    ips: &[Ipv4Addr],
    starved: &str,
    how: Starve,
) -> anyhow::Result<Starvation> {
    let before = signals(lab, nodes).await?;
    let pid = lab.speaker_pid(starved)?;
    let cpu_before = bench::cpu_sample(pid)?;
    let quota = match how.shares {
        Some(shares) => lab.share_speaker(starved, shares, how.hog)?,
        None => lab.starve_speaker(starved, how.percent, how.hog)?,
    };
    let probes = async {
        let start = tokio::time::Instant::now();
        let mut samples = Vec::new();
        while start.elapsed() < how.duration {
            for ip in ips {
                let seen = lab.arp_probe(0, *ip, how.listen).await?;
                let replies: Vec<&Seen> = seen
                    .iter()
                    .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == IpAddr::V4(*ip))
                    .collect();
                let first_ms = replies.iter().find_map(|s| match s {
                    Seen::ArpReply { t_ms, .. } => Some(*t_ms),
                    _ => None,
                });
                let macs: BTreeSet<String> = replies.iter().map(|s| s.mac().to_owned()).collect();
                samples.push((*ip, macs, first_ms));
            }
        }
        anyhow::Ok(samples)
    };
    let (seen, samples) = tokio::join!(lab.capture(0, how.duration), probes);
    let throttling = quota.throttling()?;
    let cpu_after = bench::cpu_sample(pid)?;
    drop(quota);
    let (seen, samples) = (seen?, samples?);
    let after = signals(lab, nodes).await?;

    let tck = bench::clock_ticks_per_second()?;
    let cpu_ms_per_s = cpu_after.ticks.saturating_sub(cpu_before.ticks) as f64 * 1000.0
        / tck as f64
        / how.duration.as_secs_f64();
    let owner_mac = |ip: Ipv4Addr| lab.node(&expected_owner(ip, nodes)).mac.clone();
    let foreign_announcements = ips
        .iter()
        .filter_map(|ip| {
            let g: BTreeSet<String> = gratuitous_macs(&seen, *ip)
                .into_iter()
                .filter(|m| *m != owner_mac(*ip))
                .collect();
            (!g.is_empty()).then_some((*ip, g))
        })
        .collect();
    let wrong_answers = samples
        .iter()
        .filter(|(ip, macs, _)| *macs != BTreeSet::from([owner_mac(*ip)]))
        .map(|(ip, macs, _)| (*ip, macs.clone()))
        .collect();
    let mut starved_reply_ms: Vec<f64> = samples
        .iter()
        .filter(|(ip, _, _)| expected_owner(*ip, nodes) == starved)
        .filter_map(|(_, _, ms)| *ms)
        .collect();
    starved_reply_ms.sort_by(f64::total_cmp);
    Ok(Starvation {
        throttling,
        cpu_ms_per_s,
        before,
        after,
        foreign_announcements,
        wrong_answers,
        probes: samples.len(),
        starved_reply_ms,
        duration: how.duration,
    })
}
