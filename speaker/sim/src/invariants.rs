//! The invariants, checked on a [`Report`]. Each states its fault model; the bounds derive from
//! the timing profile, never from a measurement.
//!
//! - **I-safe** — under benign faults only ([`Scenario::is_benign`]: crash, SIGTERM, restart,
//!   SIGSTOP of any length, partitions that leave a majority, heal), no IP ever has two
//!   answerers, for any length of time.
//! - **I-bounded** — under the other fault models (one-way loss, loss of carrier), every interval
//!   with two answerers is at most [`w_bounded`]: one stall threshold, the lease a speaker
//!   holds after it last knew it may claim.
//! - **I-auth** — when every fault is an outsider's (no key: forged ARP claims, a spoofed
//!   membership flood), nothing changes about who answers: after an IP was first answered, it
//!   is never unanswered and its sole answerer never changes.
//! - **I-failover** — after an IP was first answered, every interval with nobody answering it is
//!   at most [`t_failover`], while a majority of the speakers runs (the scenarios never take the
//!   majority down).
//! - **I-flap** — per IP, the sole answerer changes at most twice per fault (failover and
//!   failback), counting changes between two different nodes (a window with none or two between
//!   them does not count as a change of its own).
//! - **I-agree** — at the end, every running speaker whose gate is open names the same owner
//!   for each IP in its plan.
//! - **I-announce** — under every fault model, a node sends a gratuitous ARP or unsolicited NA
//!   for an IP only at an instant at which it answers that IP itself (process running, owned on
//!   the interface, lease valid, not probing, not yielded to a peer, carrier up): an announcement
//!   never leads clients to a node that would not answer them.
//! - **I-converge** — at the end, at least [`t_converge`] after the last fault, each IP is
//!   answered by exactly its rendezvous owner over the running speakers, and its sole answerer
//!   has not changed since `last fault + t_converge`.

use std::net::IpAddr;
use std::time::Duration;

use crate::observer::Report;
use crate::scenario::Scenario;

/// One broken invariant.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Violation {
    /// `I-safe`, `I-bounded`, `I-auth`, `I-failover`, `I-flap`, `I-announce`, `I-agree` or
    /// `I-converge`.
    pub invariant: &'static str,
    /// The IP.
    pub ip: IpAddr,
    /// When it started, since the scenario's start.
    pub at: Duration,
    /// How long it lasted (zero for I-converge).
    pub window: Duration,
    /// Who answered, or what was expected.
    pub detail: String,
}

/// The step period of the daemon (the core's `tick`).
const TICK: Duration = Duration::from_millis(100);

/// The longest time an IP may stay unanswered after its owner fails: SWIM probes each member
/// once per round of `nodes` probe periods (foca shuffles the order), the failed probe takes a
/// probe period, the suspicion `suspect_timeout`, and the survivors act at their next step
/// (two ticks, one for the gossip to arrive).
pub fn t_failover(s: &Scenario) -> Duration {
    let (probe_period, _, suspect_timeout) = s.profile.timing().timings();
    let nodes = u32::try_from(s.nodes).unwrap_or(u32::MAX);
    probe_period
        .saturating_mul(nodes.saturating_add(1))
        .saturating_add(suspect_timeout)
        .saturating_add(TICK * 2)
}

/// The longest two-answerer window allowed under the non-benign fault models: the claim gate's
/// stall threshold (`probe_period + suspect_timeout`, 300 ms with `fast`), the lease of the
/// responder — what a speaker that cannot know it was replaced may go on answering for.
pub fn w_bounded(s: &Scenario) -> Duration {
    let (probe_period, _, suspect_timeout) = s.profile.timing().timings();
    probe_period + suspect_timeout
}

/// How long after the last fault the cluster must have settled: the longest hold-off of a node
/// declared down repeatedly (32 resync periods, `ClaimGate::declared_down`), the convergence
/// timeout (3 s) and one peer announcement round (1 s).
pub fn t_converge(s: &Scenario) -> Duration {
    let (probe_period, _, suspect_timeout) = s.profile.timing().timings();
    (probe_period + suspect_timeout) * 32 + Duration::from_secs(4)
}

/// Every violation in `report` of the invariants that apply to `scenario`.
pub fn check(scenario: &Scenario, report: &Report) -> Vec<Violation> {
    let mut out = Vec::new();
    let benign = scenario.is_benign();
    let w = w_bounded(scenario);
    for (ip, r) in &report.ips {
        for d in &r.dual {
            if benign || d.len() > w {
                out.push(Violation {
                    invariant: if benign { "I-safe" } else { "I-bounded" },
                    ip: *ip,
                    at: d.start,
                    window: d.len(),
                    detail: format!("answered by nodes {:?}", d.nodes),
                });
            }
        }
    }
    if !scenario.faults.is_empty() && scenario.faults.iter().all(|t| t.fault.is_adversary()) {
        for (ip, r) in &report.ips {
            for w in &r.none {
                out.push(Violation {
                    invariant: "I-auth",
                    ip: *ip,
                    at: w.start,
                    window: w.len(),
                    detail: "unanswered during an outsider's attack".into(),
                });
            }
            for (at, who) in r.owners.iter().skip(2) {
                out.push(Violation {
                    invariant: "I-auth",
                    ip: *ip,
                    at: *at,
                    window: Duration::ZERO,
                    detail: format!("sole answerer changed to {who:?} during an outsider's attack"),
                });
            }
        }
    }
    for (at, node, ip) in &report.stray_announcements {
        out.push(Violation {
            invariant: "I-announce",
            ip: *ip,
            at: *at,
            window: Duration::ZERO,
            detail: format!("node {node} announced an IP it does not answer"),
        });
    }
    let t_fo = t_failover(scenario);
    for (ip, r) in &report.ips {
        for w in &r.none {
            if w.len() > t_fo {
                out.push(Violation {
                    invariant: "I-failover",
                    ip: *ip,
                    at: w.start,
                    window: w.len(),
                    detail: format!("unanswered longer than {t_fo:?}"),
                });
            }
        }
    }
    let faults = scenario.faults.len();
    for (ip, r) in &report.ips {
        let mut sole: Vec<usize> = r.owners.iter().filter_map(|(_, o)| *o).collect();
        sole.dedup();
        let changes = sole.len().saturating_sub(1);
        if changes > 2 * faults {
            out.push(Violation {
                invariant: "I-flap",
                ip: *ip,
                at: r.owners.last().map_or(Duration::ZERO, |(t, _)| *t),
                window: Duration::ZERO,
                detail: format!("{changes} owner changes for {faults} faults: {sole:?}"),
            });
        }
    }
    let settled = Duration::from_millis(scenario.last_fault_ms()) + t_converge(scenario);
    // Membership loss never heals: there is no quiet to converge in.
    if report.end >= settled && scenario.loss_ppm == 0 {
        for (ip, owners) in &report.final_plans {
            if owners.len() > 1 {
                out.push(Violation {
                    invariant: "I-agree",
                    ip: *ip,
                    at: report.end,
                    window: Duration::ZERO,
                    detail: format!("the speakers' plans name {owners:?}"),
                });
            }
        }
        for (ip, r) in &report.ips {
            let want = report.final_oracle.get(ip).copied().flatten();
            let have = report.final_answerers.get(ip).cloned().unwrap_or_default();
            let last_change = r.owners.last().map_or(Duration::ZERO, |(t, _)| *t);
            // Nobody may announce the IP: nobody answers it.
            let right = match want {
                Some(w) => have.len() == 1 && have.contains(&w),
                None => have.is_empty(),
            };
            if !right || last_change > settled {
                out.push(Violation {
                    invariant: "I-converge",
                    ip: *ip,
                    at: last_change,
                    window: Duration::ZERO,
                    detail: format!(
                        "answered by {have:?} at the end, rendezvous owner {want:?}, last change at {last_change:?}"
                    ),
                });
            }
        }
    }
    out
}
