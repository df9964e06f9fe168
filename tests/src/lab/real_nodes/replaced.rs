//! A node replaced under the same name on real nodes (issue #29 O6, the extended tier): the
//! machine dies (every process killed), its Node is deleted, and a new machine — a new NIC, so
//! a new MAC, with the same address — boots under the same name: kubelet registers the Node
//! again, the DaemonSet starts a speaker pod on it, and that speaker takes its IPs back. Client
//! 0 sends HTTP requests through every IP throughout ([`HttpLoad`]) and its neighbour entry for
//! the IP must move to the new MAC by the speaker's gratuitous ARPs.

use std::io::Write;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::RealNodes;
use super::http_load::{HttpCounts, HttpLoad};
use super::story::one_answerer;
use crate::lab::{http_client, within_netns};

/// What the replacement showed.
#[derive(Debug, Default)]
pub struct ReplacedReport {
    /// The node replaced (the owner of the IP).
    pub node: String,
    /// Its MAC before, and its replacement's.
    pub old_mac: String,
    /// The replacement's MAC.
    pub new_mac: String,
    /// The node answering the IP while the machine was gone.
    pub successor: String,
    /// Seconds from the replacement's power-on to the IP answered by the new MAC alone.
    pub back_s: f64,
    /// Seconds from then to client 0's neighbour entry for the IP showing the new MAC, if it
    /// did within 10 s.
    pub neighbour_moved_s: Option<f64>,
    /// Probes, after the replacement took the IP, that the old MAC answered.
    pub old_mac_answers: usize,
    /// Per IP, client 0's HTTP requests from the crash until the neighbour entry moved.
    pub http: Vec<HttpCounts>,
}

/// The replacement's MAC for node index `k`: locally administered, never a lab node's.
fn new_mac(k: usize) -> String {
    format!("02:f6:00:00:00:{:02x}", k + 1)
}

/// Replaces `node` (the owner of `ip`) as the module docs say; `ips` are every IP of the story.
///
/// # Errors
/// A step did not reach its goal within its timeout, or a command failed.
pub async fn replace_node(
    lab_mut: &mut RealNodes,
    node: &str,
    ip: Ipv4Addr,
    ips: &[Ipv4Addr],
    out: &mut dyn Write,
) -> anyhow::Result<ReplacedReport> {
    let k = lab_mut.index_of(node)?;
    let old_mac = lab_mut.lab.node(node).mac.clone();
    let netns = lab_mut.lab.node(node).netns.clone();
    let client_netns = lab_mut.lab.clients[0].netns.clone();
    let load = HttpLoad::start(&client_netns, ips);
    lab_mut.power_off_node(k);
    lab_mut.kubectl_ok(&["delete", "node", node, "--wait=true"], None)?;
    let lab: &RealNodes = lab_mut;
    let successor = one_answerer(
        lab,
        ip,
        |m| m != old_mac,
        "another node answering while the machine is gone",
    )
    .await?;
    // The new machine: a new NIC (MAC), the same name and address.
    let mac = new_mac(k);
    lab.lab.exec(
        &netns,
        "ip",
        &["link", "set", "dev", "eth0", "address", &mac],
    )?;
    lab_mut.lab.nodes[k].mac.clone_from(&mac);
    lab_mut.power_on_node(k)?;
    let on = Instant::now();
    let lab: &RealNodes = lab_mut;
    one_answerer(
        lab,
        ip,
        |m| m == mac,
        "the replacement answering its IP alone",
    )
    .await?;
    let back = on.elapsed();
    let mut old_mac_answers = 0;
    for _ in 0..5 {
        if lab.lab.arp_answers(0, ip).await?.contains(&old_mac) {
            old_mac_answers += 1;
        }
    }
    let answered = Instant::now();
    let mut neighbour_moved = None;
    while answered.elapsed() < Duration::from_secs(10) {
        let netns = client_netns.clone();
        let seen = tokio::task::spawn_blocking(move || {
            within_netns(&netns, move || Ok(http_client::neighbor_mac(ip)))
        })
        .await??;
        if seen.as_deref() == Some(mac.as_str()) {
            neighbour_moved = Some(answered.elapsed().as_secs_f64());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let report = ReplacedReport {
        node: node.to_owned(),
        old_mac,
        new_mac: mac,
        successor,
        back_s: back.as_secs_f64(),
        neighbour_moved_s: neighbour_moved,
        old_mac_answers,
        http: load.finish().await?,
    };
    writeln!(out, "   {report:?}")?;
    Ok(report)
}
