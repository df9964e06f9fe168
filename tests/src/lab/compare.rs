//! ferrolb and MetalLB side by side (issue #11): the failover rows of `ferrolb-bench-lab compare`.
//!
//! One trial is one fresh lab of one [`Implementation`]: pool `198.51.100.0/24` advertised in the
//! implementation's own CRDs, Service `default/bench` (TCP 80, `externalTrafficPolicy: Cluster`,
//! one ready endpoint) holding [`IP`] in its status as a controller would write it (both speakers
//! find the pool from the IP), every node's speaker started, then — once exactly one node
//! answers ARP and a quiet period has passed — the owner's speaker gets the signal and
//! [`takeover::signal_and_time`] measures signal → first gratuitous ARP from another node. The
//! caller alternates the implementations trial by trial, so machine noise hits both alike.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use super::bench::percentile;
use super::{Implementation, Lab, takeover};
use crate::objects::{apply_endpoints, create_service, lb_service, set_ingress};

/// The Service IP of the comparison (documentation range, on-link from the client).
pub const IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 77);

/// How to run one trial.
#[derive(Debug, Clone)]
pub struct TrialSetup {
    /// Nodes of the lab (each runs a speaker).
    pub nodes: usize,
    /// `"KILL"` (crash) or `"TERM"` (graceful).
    pub signal: &'static str,
    /// No gratuitous ARP from another node within this long after the signal: a failed trial.
    pub timeout: Duration,
    /// Quiet time after the lab reached one owner, before the signal (startup announcements
    /// done).
    pub settle: Duration,
    /// ferrolb's speaker binary (`None`: the workspace's debug build) and its arguments.
    pub ferrolb_speaker: Option<PathBuf>,
    /// Extra arguments for ferrolb's speaker (e.g. `--timing-profile fast`).
    pub ferrolb_args: Vec<String>,
}

/// Runs one trial of `implementation` in a fresh lab (see the module docs) and returns signal →
/// first gratuitous ARP from the new owner.
///
/// # Errors
/// The lab did not come up, did not reach exactly one owner within 60 s, or no other node took
/// over within the timeout.
pub async fn trial(
    implementation: Implementation,
    setup: &TrialSetup,
) -> anyhow::Result<takeover::Takeover> {
    let mut lab = Lab::start_implementation(implementation, setup.nodes, 1).await?;
    if let Some(bin) = &setup.ferrolb_speaker {
        lab.set_speaker_bin(bin.clone());
    }
    let client = lab.client().await?;
    lab.advertise_pool("bench", &["198.51.100.0/24"]).await?;
    create_service(
        &client,
        &lb_service("default", "bench", &[("TCP", 80)], "Cluster"),
    )
    .await?;
    // MetalLB announces only Services with a ready endpoint; ferrolb's Cluster policy needs none,
    // but both get the same objects.
    apply_endpoints(
        &client,
        "default",
        "bench",
        80,
        &[("192.0.2.11", Some("node-1"), true, true, false)],
    )
    .await?;
    set_ingress(&client, "default", "bench", &[&IP.to_string()]).await?;
    lab.start_every_speaker(&setup.ferrolb_args)?;
    let deadline = Instant::now() + Duration::from_secs(60);
    let owner = loop {
        let answers = lab.arp_answers(0, IP).await?;
        if let [mac] = answers.iter().collect::<Vec<_>>()[..] {
            break lab
                .node_by_mac(mac)
                .with_context(|| format!("{mac} answers for {IP}, no node's MAC"))?
                .name
                .clone();
        }
        if Instant::now() >= deadline {
            bail!(
                "{}: not exactly one ARP answer for {IP} within 60 s: {answers:?}",
                implementation.name()
            );
        }
        tokio::time::sleep(crate::poll::INTERVAL).await;
    };
    tokio::time::sleep(setup.settle).await;
    let answers = lab.arp_answers(0, IP).await?;
    if answers.len() != 1 || !answers.contains(&lab.node(&owner).mac) {
        bail!(
            "{}: after the quiet period ARP answers for {IP} are {answers:?}, not {owner}'s alone",
            implementation.name()
        );
    }
    takeover::signal_and_time(&mut lab, 0, IP, &owner, setup.signal, setup.timeout).await
}

/// The failover rows: for SIGKILL then SIGTERM (`setup.signal` is ignored), `trials` trials per
/// implementation, alternating (ferrolb first in odd trials, MetalLB first in even ones), each a
/// fresh lab ([`trial`]). `report` gets one line per trial as it ends (`SIGKILL trial  1 ferrolb
/// 372.0 ms  node-2 → node-1`, or `… FAILED: <first line of the error>`). A failed trial is counted
/// in its cell, never an error of the whole run.
pub async fn failover_rows(
    setup: &TrialSetup,
    trials: usize,
    mut report: impl FnMut(String),
) -> Vec<Row> {
    let mut rows = Vec::new();
    for (signal, what) in [("KILL", "crash"), ("TERM", "graceful")] {
        let setup = TrialSetup {
            signal,
            ..setup.clone()
        };
        let mut row = Row {
            what: format!(
                "{what} failover (SIG{signal}) → first gratuitous ARP, {} nodes",
                setup.nodes
            ),
            ferrolb: Column::default(),
            metallb: Column::default(),
        };
        for n in 1..=trials {
            let order = if n % 2 == 1 {
                [Implementation::Ferrolb, Implementation::MetalLb]
            } else {
                [Implementation::MetalLb, Implementation::Ferrolb]
            };
            for implementation in order {
                let result = trial(implementation, &setup).await;
                report(match &result {
                    Ok(t) => format!(
                        "SIG{signal} trial {n:>2} {:<8} {:>9.1} ms  {} → {}",
                        implementation.name(),
                        t.after.as_secs_f64() * 1000.0,
                        t.victim,
                        t.new_owner
                    ),
                    Err(e) => format!(
                        "SIG{signal} trial {n:>2} {:<8} FAILED: {}",
                        implementation.name(),
                        format!("{e:#}").lines().next().unwrap_or_default()
                    ),
                });
                match implementation {
                    Implementation::Ferrolb => row.ferrolb.push(&result),
                    Implementation::MetalLb => row.metallb.push(&result),
                }
            }
        }
        rows.push(row);
    }
    rows
}

/// The figures of one row for one implementation: successful trials' times and failures.
#[derive(Debug, Clone, Default)]
pub struct Column {
    /// Signal → gratuitous ARP of each successful trial, µs.
    pub micros: Vec<u64>,
    /// Trials without a takeover in time (or whose lab failed).
    pub failures: usize,
}

impl Column {
    /// Adds a trial's result.
    pub fn push(&mut self, result: &anyhow::Result<takeover::Takeover>) {
        match result {
            Ok(t) => self
                .micros
                .push(u64::try_from(t.after.as_micros()).unwrap_or(u64::MAX)),
            Err(_) => self.failures += 1,
        }
    }

    fn sorted(&self) -> Vec<u64> {
        let mut v = self.micros.clone();
        v.sort_unstable();
        v
    }

    /// `p50 / p90 / max ms (n ok, f failed)`, or `-` without successful trials.
    pub fn cell(&self) -> String {
        let v = self.sorted();
        let ms = |p: u32| percentile(&v, p).map_or_else(|| "-".into(), fmt_ms);
        format!(
            "{} / {} / {} ({} ok, {} failed)",
            ms(50),
            ms(90),
            ms(100),
            v.len(),
            self.failures
        )
    }

    /// The median, µs.
    pub fn p50(&self) -> Option<u64> {
        percentile(&self.sorted(), 50)
    }
}

fn fmt_ms(us: u64) -> String {
    format!("{:.0}", us as f64 / 1000.0)
}

/// One row of the comparison table.
#[derive(Debug, Clone)]
pub struct Row {
    /// What was measured (e.g. `crash failover (SIGKILL), 3 nodes`).
    pub what: String,
    /// ferrolb's figures.
    pub ferrolb: Column,
    /// MetalLB's figures.
    pub metallb: Column,
}

/// The markdown table: one row per measurement, each implementation's `p50 / p90 / max` in ms
/// (nearest rank) with its trial counts, and the ratio of the medians (MetalLB ÷ ferrolb; `-`
/// when either has no successful trial).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| measurement | ferrolb p50 / p90 / max ms | MetalLB p50 / p90 / max ms | ratio of p50 (MetalLB ÷ ferrolb) |\n\
         |---|---|---|---|\n",
    );
    for row in rows {
        let ratio = match (row.ferrolb.p50(), row.metallb.p50()) {
            (Some(f), Some(m)) if f > 0 => format!("{:.1}×", m as f64 / f as f64),
            _ => "-".into(),
        };
        out.push_str(&format!(
            "| {} | {} | {} | {ratio} |\n",
            row.what,
            row.ferrolb.cell(),
            row.metallb.cell()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_table_gives_percentiles_counts_and_the_ratio_of_medians() {
        let row = Row {
            what: "crash failover (SIGKILL), 3 nodes".into(),
            ferrolb: Column {
                micros: vec![900_000, 1_100_000, 1_000_000],
                failures: 0,
            },
            metallb: Column {
                micros: vec![5_000_000, 6_000_000],
                failures: 1,
            },
        };
        let empty = Row {
            what: "graceful".into(),
            ferrolb: Column::default(),
            metallb: Column {
                micros: vec![],
                failures: 3,
            },
        };
        let t = table(&[row, empty]);
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 4, "{t}");
        assert_eq!(
            lines[2],
            "| crash failover (SIGKILL), 3 nodes | 1000 / 1100 / 1100 (3 ok, 0 failed) | 5000 / 6000 / 6000 (2 ok, 1 failed) | 5.0× |"
        );
        assert_eq!(
            lines[3],
            "| graceful | - / - / - (0 ok, 0 failed) | - / - / - (0 ok, 3 failed) | - |"
        );
    }
}
