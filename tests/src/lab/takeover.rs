//! A takeover measured the same way for either [`Implementation`](super::Implementation): a client
//! captures frames, node `victim`'s speaker gets a signal, and the result is the time from the
//! signal to the first gratuitous ARP for the IP from another MAC (issue #11's failover row).

use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::Context;

use super::http_client::unix_us;
use super::{Lab, Seen, within_netns};

/// What a takeover showed.
#[derive(Debug, Clone)]
pub struct Takeover {
    /// The node whose speaker got the signal.
    pub victim: String,
    /// The node that sent the first gratuitous ARP for the IP afterwards.
    pub new_owner: String,
    /// Signal → that gratuitous ARP.
    pub after: Duration,
}

/// From client `client`, captures frames while sending `signal` (`"KILL"`, `"TERM"`) to node
/// `victim`'s speaker, until a gratuitous ARP for `ip` arrives from another lab node's MAC or
/// `timeout` passes.
///
/// # Errors
/// The victim has no speaker, the capture failed, or no gratuitous ARP from another node came
/// within `timeout` (the message carries every node's log tail).
pub async fn signal_and_time(
    lab: &mut Lab,
    client: usize,
    ip: Ipv4Addr,
    victim: &str,
    signal: &str,
    timeout: Duration,
) -> anyhow::Result<Takeover> {
    let victim_mac = lab.node(victim).mac.clone();
    let netns = lab.client_netns(client)?;
    let capture = capture_takeover(netns, ip, victim_mac, timeout).await?;
    let signalled_us = unix_us();
    lab.signal_speaker(victim, signal)?;
    let seen = capture.await??;
    from_capture(lab, &seen, ip, victim, signal, timeout, signalled_us)
}

/// The [`Takeover`] a capture shows: the first gratuitous ARP for `ip` in `seen` from a MAC
/// other than node `victim`'s, timed from `signalled_us` (µs since the epoch, taken right before
/// `signal` was sent). Shared by [`signal_and_time`] and [`super::takeover_http`].
///
/// # Errors
/// No such gratuitous ARP in `seen` (the message names `timeout` and carries every node's log
/// tail), or it came from a MAC that is no lab node's.
pub(crate) fn from_capture(
    lab: &Lab,
    seen: &[Seen],
    ip: Ipv4Addr,
    victim: &str,
    signal: &str,
    timeout: Duration,
    signalled_us: u64,
) -> anyhow::Result<Takeover> {
    let victim_mac = &lab.node(victim).mac;
    let Some(first) = seen.iter().find(|s| is_takeover(s, ip, victim_mac)) else {
        let logs: Vec<String> = lab
            .nodes
            .iter()
            .map(|n| format!("--- {}:\n{}", n.name, lab.speaker_log(&n.name, 15)))
            .collect();
        anyhow::bail!(
            "no gratuitous ARP for {ip} from another node within {timeout:?} of SIG{signal} to {victim}\n{}",
            logs.join("\n")
        );
    };
    let new_owner = lab
        .node_by_mac(first.mac())
        .map(|n| n.name.clone())
        .with_context(|| format!("gratuitous ARP from {}, not a lab node", first.mac()))?;
    Ok(Takeover {
        victim: victim.to_owned(),
        new_owner,
        after: Duration::from_micros(first.unix_us().saturating_sub(signalled_us)),
    })
}

/// Opens a capture on `eth0` of client namespace `netns` and returns once it listens: it ends
/// at the first gratuitous ARP for `ip` from a MAC other than `old_mac` ([`is_takeover`]), or
/// after `timeout`, with every frame seen. Shared by [`signal_and_time`] and the demo's failover
/// story (`super::failover`).
///
/// # Errors
/// The capture could not be opened (then the capture's own error is returned).
pub(crate) async fn capture_takeover(
    netns: String,
    ip: Ipv4Addr,
    old_mac: String,
    timeout: Duration,
) -> anyhow::Result<tokio::task::JoinHandle<anyhow::Result<Vec<Seen>>>> {
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let capture = tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
            c.drain();
            let _ = ready_tx.send(());
            Ok(c.listen(timeout, |seen| {
                seen.iter().any(|s| is_takeover(s, ip, &old_mac))
            })?)
        })
    });
    if ready_rx.await.is_err() {
        capture.await??;
        anyhow::bail!("the capture on the client ended before it started");
    }
    Ok(capture)
}

/// Whether `s` is a gratuitous ARP for `ip` from a MAC other than `old_mac` (a new owner's
/// takeover announcement).
pub(crate) fn is_takeover(s: &Seen, ip: Ipv4Addr, old_mac: &str) -> bool {
    matches!(s, Seen::GratuitousArp { .. })
        && s.ip() == IpAddr::V4(ip)
        && !s.mac().eq_ignore_ascii_case(old_mac)
}
