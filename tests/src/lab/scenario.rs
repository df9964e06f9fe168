//! Helpers shared by the lab scenarios (`tests/tests/speaker_lab.rs`, `speaker_faults.rs`):
//! expected owners, captures around a change, ARP answer timelines and Events.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use ferrolb_crds::L2AdvertisementSpec;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::ListParams;

use super::{Lab, Seen};
use crate::objects::{apply_l2, create_pool, create_service, lb_service, set_ingress};

/// How long [`wait_owners`] waits for each IP.
pub const SETTLE: Duration = Duration::from_secs(20);

/// A lab with `nodes` nodes and one client, pool `198.51.100.0/24` advertised everywhere and one
/// Service per IP (`default/svc-0`, `svc-1`, …, TCP 80, ETP Cluster) holding it. Speakers are
/// not started.
///
/// # Errors
/// The lab could not start or an object was refused.
pub async fn lab_with_ips(nodes: usize, ips: &[Ipv4Addr]) -> anyhow::Result<(Lab, kube::Client)> {
    let lab = Lab::start(nodes, 1).await?;
    let client = lab.client().await?;
    create_pool(&client, "pool", &["198.51.100.0/24"]).await?;
    apply_l2(&client, "all", L2AdvertisementSpec::default()).await?;
    for (i, ip) in ips.iter().enumerate() {
        let name = format!("svc-{i}");
        create_service(
            &client,
            &lb_service("default", &name, &[("TCP", 80)], "Cluster"),
        )
        .await?;
        set_ingress(&client, "default", &name, &[&ip.to_string()]).await?;
    }
    Ok((lab, client))
}

/// `count` IPs from `198.51.100.60` on whose owner among `all` (by [`expected_owner`])
/// satisfies `keep`.
pub fn ips_where(all: &[&str], count: usize, keep: impl Fn(&str) -> bool) -> Vec<Ipv4Addr> {
    (60u8..250)
        .map(|i| Ipv4Addr::new(198, 51, 100, i))
        .filter(|ip| keep(&expected_owner(*ip, all)))
        .take(count)
        .collect()
}

/// Waits (up to [`SETTLE`] each) until every IP of `ips` is answered by exactly its owner among
/// `members`.
///
/// # Errors
/// An IP did not settle on its owner alone; the message carries the owner's log.
pub async fn wait_owners(lab: &Lab, ips: &[Ipv4Addr], members: &[&str]) -> anyhow::Result<()> {
    for ip in ips {
        let owner = expected_owner(*ip, members);
        let answers = lab.wait_for_owner(0, *ip, Some(&owner), SETTLE).await?;
        if answers != BTreeSet::from([lab.node(&owner).mac.clone()]) {
            anyhow::bail!(
                "{ip}: expected {owner} alone, got {answers:?}\n{}",
                lab.speaker_log(&owner, 30)
            );
        }
    }
    Ok(())
}

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

/// Whether an Event with `reason` about `default/<name>` has a note containing every one of
/// `words` (false when the list fails, so it can be polled).
pub async fn has_event(client: &kube::Client, name: &str, reason: &str, words: &[&str]) -> bool {
    events_for(client, "default", name)
        .await
        .is_ok_and(|events| {
            events
                .iter()
                .any(|(r, note)| r == reason && words.iter().all(|w| note.contains(w)))
        })
}

/// Events in `namespace` about object `name` (events.k8s.io/v1, which also serves core/v1
/// Events with `regarding` = `involvedObject`), as `(type, reason, note)`.
///
/// # Errors
/// The API server refused the list.
pub async fn typed_events_for(
    client: &kube::Client,
    namespace: &str,
    name: &str,
) -> anyhow::Result<Vec<(String, String, String)>> {
    let api: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
        .map(|e| {
            (
                e.type_.unwrap_or_default(),
                e.reason.unwrap_or_default(),
                e.note.unwrap_or_default(),
            )
        })
        .collect())
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
    Ok(typed_events_for(client, namespace, name)
        .await?
        .into_iter()
        .map(|(_, reason, note)| (reason, note))
        .collect())
}

/// The interfaces of case C-12 (`shared/cases.md`) on `node`, each a link to a new client: `eth1`
/// with only `2001:db8:0:7::10/64`, `eth2` without an address, a pod veth `veth0pod` (the client
/// end `198.51.100.250/32`) and `eth3` with `203.0.113.10/24` (a second client on IPv4). Returns
/// the client indexes on `eth1` and `eth3`.
///
/// # Errors
/// `ip` failed.
pub fn c12_links(lab: &mut Lab, node: &str) -> anyhow::Result<(usize, usize)> {
    let eth1 = lab.add_client_link(
        node,
        "eth1",
        Some("2001:db8:0:7::10/64"),
        Some("2001:db8:0:7::20/64"),
    )?;
    lab.add_client_link(node, "eth2", None, None)?;
    lab.add_client_link(node, "veth0pod", None, Some("198.51.100.250/32"))?;
    let eth3 = lab.add_client_link(
        node,
        "eth3",
        Some("203.0.113.10/24"),
        Some("203.0.113.20/24"),
    )?;
    Ok((eth1, eth3))
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
