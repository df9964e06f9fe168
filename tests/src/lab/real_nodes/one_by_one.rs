//! The whole cluster restarted with its nodes coming back one by one, minutes apart (issue #29
//! O5, the extended tier): everything powered off, the control plane started, then one node
//! every [`GAP`]. Client 0 probes every IP over ARP throughout; what each phase (one node on,
//! two, …) saw is returned for the caller to assert on.

use std::collections::BTreeSet;
use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::RealNodes;
use super::story::{node_of, service_states, services_changed};

/// The time between two nodes' power-ons: minutes, as a rack's machines come back after a power
/// cut when each waits for its own checks, and well inside the 5-minute voter memory (a
/// speaker not heard from keeps its vote that long: docs/speaker.md, G3), so every phase before
/// the last still counts every node as a voter.
pub const GAP: Duration = Duration::from_secs(120);

/// What one IP showed while a given number of nodes were on.
#[derive(Debug, Clone, Default)]
pub struct IpInPhase {
    /// The IP.
    pub ip: Option<Ipv4Addr>,
    /// Seconds from this phase's power-on to the first probe one node answered, if any did.
    pub first_answered_s: Option<f64>,
    /// The nodes that answered its probes during the phase.
    pub answerers: BTreeSet<String>,
    /// Probes sent.
    pub probes: usize,
    /// Probes nobody answered.
    pub unanswered: usize,
}

/// One phase: the node just powered on, and every IP until the next one.
#[derive(Debug, Clone, Default)]
pub struct Phase {
    /// The node powered on at the start of the phase.
    pub node: String,
    /// How many nodes were on.
    pub nodes_on: usize,
    /// Per IP, in the order given.
    pub ips: Vec<IpInPhase>,
}

/// What the one-by-one restart showed.
#[derive(Debug, Default)]
pub struct OneByOneReport {
    /// The phases, in power-on order.
    pub phases: Vec<Phase>,
    /// Probes two nodes answered (`ip: nodes at s`).
    pub two_answers: Vec<String>,
    /// Services whose resourceVersion or address changed across the restart.
    pub changed: Vec<String>,
    /// The node answering each IP at the end.
    pub owners_after: Vec<String>,
}

/// Powers the whole cluster off and on again node by node, [`GAP`] apart (the last phase ends
/// once every IP has been answered by one node for 10 s, or after [`GAP`]), probing `ips` from
/// client 0 throughout. Narrates to `out`.
///
/// # Errors
/// A process could not be started again, or the API server was not reachable after the restart.
pub async fn restart_one_by_one(
    lab_mut: &mut RealNodes,
    ips: &[Ipv4Addr],
    out: &mut dyn Write,
) -> anyhow::Result<OneByOneReport> {
    let names = ["web", "web2", "web3"];
    let client = lab_mut.lab.client().await?;
    let before = service_states(&client, &names).await?;
    let mut report = OneByOneReport::default();
    lab_mut.power_off();
    tokio::time::sleep(Duration::from_secs(2)).await;
    lab_mut.power_on_control_plane().await?;
    let n = lab_mut.nodes.len();
    for k in 0..n {
        lab_mut.power_on_node(k)?;
        let on = Instant::now();
        let lab: &RealNodes = lab_mut;
        let mut phase = Phase {
            node: lab.nodes[k].name.clone(),
            nodes_on: k + 1,
            ips: ips
                .iter()
                .map(|ip| IpInPhase {
                    ip: Some(*ip),
                    ..IpInPhase::default()
                })
                .collect(),
        };
        let last = k + 1 == n;
        let mut all_answered_since: Option<Instant> = None;
        while on.elapsed() < GAP {
            let mut all = true;
            for seen in &mut phase.ips {
                let Some(ip) = seen.ip else { continue };
                let macs = lab.lab.arp_answers(0, ip).await?;
                let nodes: BTreeSet<String> = macs
                    .iter()
                    .map(|m| node_of(lab, m).unwrap_or_else(|_| m.clone()))
                    .collect();
                seen.probes += 1;
                if nodes.len() > 1 {
                    report.two_answers.push(format!(
                        "{ip}: {nodes:?} at {:.1} s after {} was powered on",
                        on.elapsed().as_secs_f64(),
                        phase.node
                    ));
                }
                if nodes.is_empty() {
                    seen.unanswered += 1;
                    all = false;
                } else {
                    seen.first_answered_s
                        .get_or_insert(on.elapsed().as_secs_f64());
                }
                seen.answerers.extend(nodes);
            }
            if !all {
                all_answered_since = None;
            } else if last
                && all_answered_since
                    .get_or_insert_with(Instant::now)
                    .elapsed()
                    >= Duration::from_secs(10)
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        writeln!(out, "   {phase:?}")?;
        report.phases.push(phase);
    }
    let lab: &RealNodes = lab_mut;
    for ip in ips {
        let macs = lab.lab.arp_answers(0, *ip).await?;
        report.owners_after.push(
            macs.iter()
                .map(|m| node_of(lab, m).unwrap_or_else(|_| m.clone()))
                .collect::<Vec<_>>()
                .join(","),
        );
    }
    let client = lab.lab.client().await?;
    report.changed = services_changed(&client, &before).await?;
    Ok(report)
}
