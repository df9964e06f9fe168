//! Helpers shared by the lab scenarios (`tests/tests/speaker_lab.rs`, `speaker_faults.rs`):
//! expected owners, captures around a change, ARP answer timelines and Events.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

use super::{Lab, Seen};

/// `node-1 … node-n`.
pub fn node_names(n: usize) -> Vec<String> {
    (1..=n).map(|i| format!("node-{i}")).collect()
}

/// The owner of `ip` among `nodes` by the speakers' own election (rendezvous hash, S2).
///
/// # Panics
/// `nodes` is empty.
#[allow(clippy::expect_used)]
pub fn expected_owner(ip: Ipv4Addr, nodes: &[&str]) -> String {
    ferrolb_speaker::election::owner(IpAddr::V4(ip), nodes.iter().copied())
        .expect("at least one node")
        .to_owned()
}

/// Gratuitous ARP senders (MACs) for `ip` in a capture.
pub fn gratuitous_macs(seen: &[Seen], ip: Ipv4Addr) -> BTreeSet<String> {
    seen.iter()
        .filter(|s| matches!(s, Seen::GratuitousArp { .. }) && s.ip() == IpAddr::V4(ip))
        .map(|s| s.mac().to_owned())
        .collect()
}

/// Runs `change`, capturing on client 0 from just before it for `window`; returns the capture.
///
/// # Errors
/// The capture could not be opened.
pub async fn capture_around<F: std::future::Future<Output = ()>>(
    lab: &Lab,
    window: Duration,
    change: F,
) -> anyhow::Result<Vec<Seen>> {
    let capture = lab.capture(0, window);
    let (seen, ()) = tokio::join!(capture, async {
        tokio::time::sleep(Duration::from_millis(150)).await;
        change.await;
    });
    seen
}

/// One ARP probe of a timeline: when it was sent (from the timeline's start) and which MACs
/// answered.
#[derive(Clone, Debug)]
pub struct Sample {
    /// Offset of the probe from the start of the timeline.
    pub at: Duration,
    /// Distinct MACs that answered within the listen window.
    pub macs: BTreeSet<String>,
}

/// Probes `ip` from client `client` back to back (each probe listens `listen`) for `duration`.
///
/// # Errors
/// A probe failed.
pub async fn answer_timeline(
    lab: &Lab,
    client: usize,
    ip: Ipv4Addr,
    duration: Duration,
    listen: Duration,
) -> anyhow::Result<Vec<Sample>> {
    let start = tokio::time::Instant::now();
    let mut out = Vec::new();
    while start.elapsed() < duration {
        let at = start.elapsed();
        let seen = lab.arp_probe(client, ip, listen).await?;
        let macs = seen
            .iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == IpAddr::V4(ip))
            .map(|s| s.mac().to_owned())
            .collect();
        out.push(Sample { at, macs });
    }
    Ok(out)
}

/// The span of a timeline during which more than one MAC answered: from the first such probe
/// to the end of the last one (`listen` after it), or zero.
pub fn dual_answer_window(samples: &[Sample], listen: Duration) -> Duration {
    let dual: Vec<&Sample> = samples.iter().filter(|s| s.macs.len() > 1).collect();
    match (dual.first(), dual.last()) {
        (Some(first), Some(last)) => (last.at + listen).saturating_sub(first.at),
        _ => Duration::ZERO,
    }
}

/// The value of one series (`name` or `name{labels}`, spelled as exposed) in a Prometheus text
/// exposition, or `None` if it is absent or not a number.
pub fn metric_value(body: &str, series: &str) -> Option<f64> {
    body.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' '))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

/// Events in `namespace` about object `name`, as `(reason, note)`.
///
/// # Errors
/// The API server refused the list.
pub async fn events_for(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<(String, String)>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::metric_value;

    #[test]
    fn metric_values_by_exact_series() {
        let body = "# HELP x\nferrolb_speaker_stalls_total 3\n\
                    ferrolb_speaker_membership_transitions_total{direction=\"down\"} 2\n\
                    ferrolb_speaker_membership_transitions_total{direction=\"up\"} 5\n";
        assert_eq!(
            metric_value(body, "ferrolb_speaker_stalls_total"),
            Some(3.0)
        );
        assert_eq!(
            metric_value(
                body,
                "ferrolb_speaker_membership_transitions_total{direction=\"up\"}"
            ),
            Some(5.0)
        );
        assert_eq!(metric_value(body, "ferrolb_speaker_stalls"), None);
    }
}
