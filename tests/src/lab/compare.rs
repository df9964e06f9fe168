//! ferrolb and MetalLB side by side (issue #11): the failover rows of `ferrolb-bench-lab compare`.
//!
//! One trial ([`compare_trial::trial`]) is one fresh lab of one [`Implementation`], wired as the
//! demo is (backend pods, a real kube-proxy per node, one LoadBalancer Service holding [`IP`]);
//! the owner's speaker gets a signal and the trial yields two figures, both timed from right
//! before the signal: the first gratuitous ARP from another node
//! ([`takeover::signal_and_time`](super::takeover::signal_and_time)'s figure) and the first HTTP
//! answer through that node ([`super::takeover_http`]). The rows alternate the implementations
//! trial by trial, so machine noise hits both alike.

use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::time::Duration;

use super::bench::percentile;
use super::takeover_http::Figures;
use super::{Implementation, compare_trial};

/// The Service IP of the comparison (documentation range, on-link from the client).
pub const IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 77);

/// How to run one trial.
#[derive(Debug, Clone)]
pub struct TrialSetup {
    /// Nodes of the lab (each runs a speaker).
    pub nodes: usize,
    /// `"KILL"` (crash) or `"TERM"` (graceful).
    pub signal: &'static str,
    /// No gratuitous ARP from another node within this long after the signal: an ARP failure;
    /// no HTTP answer through it within this long: an HTTP failure.
    pub timeout: Duration,
    /// Quiet time after the lab reached one owner, before the signal (startup announcements
    /// done).
    pub settle: Duration,
    /// ferrolb's speaker binary (`None`: the workspace's debug build) and its arguments.
    pub ferrolb_speaker: Option<PathBuf>,
    /// Extra arguments for ferrolb's speaker (e.g. `--timing-profile fast`).
    pub ferrolb_args: Vec<String>,
}

/// The failover rows: for SIGKILL then SIGTERM (`setup.signal` is ignored), `trials` trials per
/// implementation, alternating (ferrolb first in odd trials, MetalLB first in even ones), each a
/// fresh lab ([`compare_trial::trial`]) that fills two rows ([`row_names`]): signal → first
/// gratuitous ARP, then signal → first HTTP answer through the new owner; so the rows are
/// crash ARP, crash HTTP, graceful ARP, graceful HTTP. `report` gets one line per trial as it
/// ends ([`trial_line`]). A failed trial or figure is counted in its cell (a trial that failed
/// before the signal in both of its cells), never an error of the whole run.
pub async fn failover_rows(
    setup: &TrialSetup,
    trials: usize,
    mut report: impl FnMut(String),
) -> Vec<Row> {
    let mut rows = Vec::new();
    for signal in ["KILL", "TERM"] {
        let setup = TrialSetup {
            signal,
            ..setup.clone()
        };
        let (arp_what, http_what) = row_names(signal, setup.nodes);
        let mut arp = Row::new(arp_what);
        let mut http = Row::new(http_what);
        for n in 1..=trials {
            let order = if n % 2 == 1 {
                [Implementation::Ferrolb, Implementation::MetalLb]
            } else {
                [Implementation::MetalLb, Implementation::Ferrolb]
            };
            for implementation in order {
                let result = compare_trial::trial(implementation, &setup).await;
                report(trial_line(signal, n, implementation, &result));
                let (arp_after, http_after) = match &result {
                    Ok(f) => (
                        f.arp.as_ref().ok().map(|t| t.after),
                        f.http.as_ref().ok().map(|h| h.after),
                    ),
                    Err(_) => (None, None),
                };
                arp.column(implementation).record(arp_after);
                http.column(implementation).record(http_after);
            }
        }
        rows.extend([arp, http]);
    }
    rows
}

/// The measurements of the two rows one signal fills, for a lab of `nodes` nodes:
/// `("crash failover (SIGKILL) → first gratuitous ARP, 3 nodes", "crash failover (SIGKILL) →
/// first HTTP response through the new owner, 3 nodes")`, "graceful" for any signal but `KILL`.
pub fn row_names(signal: &str, nodes: usize) -> (String, String) {
    let what = if signal == "KILL" {
        "crash"
    } else {
        "graceful"
    };
    (
        format!("{what} failover (SIG{signal}) → first gratuitous ARP, {nodes} nodes"),
        format!(
            "{what} failover (SIG{signal}) → first HTTP response through the new owner, {nodes} nodes"
        ),
    )
}

/// One line for trial `n` (1-based) of `implementation` with `signal`:
/// `SIGKILL trial  1 ferrolb  ARP 372.0 ms node-2 → node-1 · HTTP 380.4 ms via node-1 (web-3; 2
/// of 41 requests failed)`, where either figure may read `ARP FAILED: <first line>` or `HTTP
/// FAILED: <first line>`, and a trial that failed before its signal reads `… FAILED: <first
/// line>` alone.
pub fn trial_line(
    signal: &str,
    n: usize,
    implementation: Implementation,
    result: &anyhow::Result<Figures>,
) -> String {
    let head = format!("SIG{signal} trial {n:>2} {:<8}", implementation.name());
    let first_line = |e: &anyhow::Error| {
        format!("{e:#}")
            .lines()
            .next()
            .unwrap_or_default()
            .to_owned()
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let f = match result {
        Ok(f) => f,
        Err(e) => return format!("{head} FAILED: {}", first_line(e)),
    };
    let arp = match &f.arp {
        Ok(t) => format!("ARP {:>9.1} ms {} → {}", ms(t.after), t.victim, t.new_owner),
        Err(e) => format!("ARP FAILED: {}", first_line(e)),
    };
    let http = match &f.http {
        Ok(h) => format!(
            "HTTP {:>9.1} ms via {} ({}; {} of {} requests failed)",
            ms(h.after),
            h.via,
            h.backend,
            h.failed,
            h.requests
        ),
        Err(e) => format!("HTTP FAILED: {}", first_line(e)),
    };
    format!("{head} {arp} · {http}")
}

/// The figures of one row for one implementation: successful trials' times and failures.
#[derive(Debug, Clone, Default)]
pub struct Column {
    /// Signal → the row's event, of each successful trial, µs.
    pub micros: Vec<u64>,
    /// Trials without the event in time (or whose lab failed).
    pub failures: usize,
}

impl Column {
    /// Adds a trial: its time (`Some`), or a failure (`None`).
    pub fn record(&mut self, after: Option<Duration>) {
        match after {
            Some(d) => self
                .micros
                .push(u64::try_from(d.as_micros()).unwrap_or(u64::MAX)),
            None => self.failures += 1,
        }
    }

    fn sorted(&self) -> Vec<u64> {
        let mut v = self.micros.clone();
        v.sort_unstable();
        v
    }

    /// `p50 / p90 / p99 / max ms (n ok, f failed)` (nearest rank, whole ms), `-` for each figure
    /// without successful trials.
    pub fn cell(&self) -> String {
        let v = self.sorted();
        let ms = |p: u32| percentile(&v, p).map_or_else(|| "-".into(), fmt_ms);
        format!(
            "{} / {} / {} / {} ({} ok, {} failed)",
            ms(50),
            ms(90),
            ms(99),
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

impl Row {
    /// A row measuring `what`, without trials yet.
    pub fn new(what: String) -> Row {
        Row {
            what,
            ferrolb: Column::default(),
            metallb: Column::default(),
        }
    }

    /// The column of `implementation`.
    pub fn column(&mut self, implementation: Implementation) -> &mut Column {
        match implementation {
            Implementation::Ferrolb => &mut self.ferrolb,
            Implementation::MetalLb => &mut self.metallb,
        }
    }
}

/// The markdown table: one row per measurement, each implementation's `p50 / p90 / p99 / max`
/// in ms ([`Column::cell`]) with its trial counts, and the ratio of the medians (MetalLB ÷ ferrolb; `-`
/// when either has no successful trial).
pub fn table(rows: &[Row]) -> String {
    let mut out = String::from(
        "| measurement | ferrolb p50 / p90 / p99 / max ms | MetalLB p50 / p90 / p99 / max ms | ratio of p50 (MetalLB ÷ ferrolb) |\n\
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
    use crate::lab::takeover::Takeover;
    use crate::lab::takeover_http::HttpTakeover;

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
            "| crash failover (SIGKILL), 3 nodes | 1000 / 1100 / 1100 / 1100 (3 ok, 0 failed) | 5000 / 6000 / 6000 / 6000 (2 ok, 1 failed) | 5.0× |"
        );
        assert_eq!(
            lines[3],
            "| graceful | - / - / - / - (0 ok, 0 failed) | - / - / - / - (0 ok, 3 failed) | - |"
        );
    }

    #[test]
    fn p99_differs_from_the_maximum_from_a_hundred_trials_on() {
        let mut column = Column::default();
        for ms in 1..=100u64 {
            column.record(Some(Duration::from_millis(ms)));
        }
        column.record(None);
        assert_eq!(column.cell(), "50 / 90 / 99 / 100 (100 ok, 1 failed)");
    }

    #[test]
    fn each_signal_names_an_arp_row_and_an_http_row() {
        assert_eq!(
            row_names("KILL", 3),
            (
                "crash failover (SIGKILL) → first gratuitous ARP, 3 nodes".to_owned(),
                "crash failover (SIGKILL) → first HTTP response through the new owner, 3 nodes"
                    .to_owned()
            )
        );
        let (arp, http) = row_names("TERM", 10);
        assert_eq!(
            arp,
            "graceful failover (SIGTERM) → first gratuitous ARP, 10 nodes"
        );
        assert_eq!(
            http,
            "graceful failover (SIGTERM) → first HTTP response through the new owner, 10 nodes"
        );
    }

    #[test]
    fn a_row_records_each_implementation_in_its_own_column() {
        let mut row = Row::new("x".into());
        row.column(Implementation::Ferrolb)
            .record(Some(Duration::from_micros(1500)));
        row.column(Implementation::MetalLb).record(None);
        assert_eq!(
            (row.ferrolb.micros.as_slice(), row.ferrolb.failures),
            (&[1500][..], 0)
        );
        assert_eq!((row.metallb.micros.len(), row.metallb.failures), (0, 1));
    }

    #[test]
    fn a_trial_line_shows_both_figures_or_what_failed() {
        let arp = Takeover {
            victim: "node-2".into(),
            new_owner: "node-1".into(),
            after: Duration::from_micros(372_040),
        };
        let http = HttpTakeover {
            via: "node-1".into(),
            after: Duration::from_micros(380_450),
            backend: "web-3".into(),
            requests: 41,
            failed: 2,
        };
        let both = Ok(Figures {
            arp: Ok(arp.clone()),
            http: Ok(http),
        });
        assert_eq!(
            trial_line("KILL", 1, Implementation::Ferrolb, &both),
            "SIGKILL trial  1 ferrolb  ARP     372.0 ms node-2 → node-1 · HTTP     380.4 ms via node-1 (web-3; 2 of 41 requests failed)"
        );
        let no_http = Ok(Figures {
            arp: Ok(arp),
            http: Err(anyhow::anyhow!("no HTTP answer through another node\nmore")),
        });
        assert!(
            trial_line("TERM", 12, Implementation::MetalLb, &no_http)
                .ends_with("· HTTP FAILED: no HTTP answer through another node"),
        );
        let no_arp = Ok(Figures {
            arp: Err(anyhow::anyhow!("no gratuitous ARP")),
            http: Err(anyhow::anyhow!("no HTTP answer")),
        });
        assert!(
            trial_line("KILL", 2, Implementation::MetalLb, &no_arp).starts_with(
                "SIGKILL trial  2 MetalLB  ARP FAILED: no gratuitous ARP · HTTP FAILED"
            ),
        );
        let lab: anyhow::Result<Figures> = Err(anyhow::anyhow!("lab did not start\ndetails"));
        assert_eq!(
            trial_line("KILL", 3, Implementation::Ferrolb, &lab),
            "SIGKILL trial  3 ferrolb  FAILED: lab did not start"
        );
    }
}
