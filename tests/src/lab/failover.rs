//! The failover story of the demo, reusable (issue #13 repeats it per kube-proxy mode and
//! traffic policy): SIGKILL the owner's speaker while a LAN client captures frames and keeps
//! sending HTTP requests to the external IP, then report signal → first gratuitous ARP from the
//! new owner, signal → first HTTP answer through the new owner's MAC, and the failed requests.
//! IPv4 only: the client's route to the new owner is read from its ARP table.

use std::io::Write;
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use anyhow::{Context, bail};

use super::http_client::{self, Attempt};
use super::{Implementation, Lab, Seen, owner_choice, takeover, within_netns};

/// What the failover showed.
#[derive(Debug, Clone)]
pub struct FailoverOutcome {
    /// The node whose speaker was killed.
    pub old_owner: String,
    /// The node that announced next (gratuitous ARP sender).
    pub new_owner: String,
    /// The owner the lab implementation's rule predicts over the remaining eligible nodes
    /// ([`owner_choice::expected_owner`]).
    pub expected_new_owner: String,
    /// SIGKILL → first gratuitous ARP from the new owner.
    pub gratuitous_arp_after: Duration,
    /// SIGKILL → first HTTP answer received through the new owner's MAC.
    pub http_via_new_owner_after: Duration,
    /// HTTP requests sent after the kill (until traffic had moved).
    pub requests_after_kill: usize,
    /// How many of those failed.
    pub failed_after_kill: usize,
    /// The MACs answering ARP for the IP after the failover.
    pub arp_after: Vec<String>,
}

/// Kills node `old_owner`'s speaker (SIGKILL) while client `client` captures and sends requests
/// to `addr` (an IPv4 external IP and port), printing what it sees to `out`. `eligible` are the
/// nodes eligible for the IP before the kill (the old owner among them): the new owner must be
/// the choice of the lab's implementation among the others (ferrolb: the rendezvous hash).
///
/// How long it waits depends on the implementation: ferrolb 10 s for the gratuitous ARP and 15 s
/// for the HTTP answer; MetalLB 60 s and 65 s: its memberlist takes 5–8 s to declare a node dead
/// on an idle machine (docs/comparison.md), and `DefaultLANConfig`'s awareness multiplier (up to
/// 8×) stretches its probe interval on a starved one. These are safety limits, not
/// measurements: the printed times are.
///
/// # Errors
/// `addr` is IPv6, no gratuitous ARP from another node or no HTTP answer through the new owner in
/// time, the wrong node took over, or more than one node answers ARP afterwards.
pub async fn kill_owner(
    lab: &mut Lab,
    client: usize,
    addr: SocketAddr,
    old_owner: &str,
    eligible: &[String],
    out: &mut (dyn Write + Send),
) -> anyhow::Result<FailoverOutcome> {
    let within = match lab.implementation() {
        Implementation::Ferrolb => (Duration::from_secs(10), Duration::from_secs(15)),
        Implementation::MetalLb => (Duration::from_secs(60), Duration::from_secs(65)),
    };
    kill_owner_within(lab, client, addr, old_owner, eligible, within, out).await
}

/// [`kill_owner`] with its two waits given: `(gratuitous ARP, HTTP answer through the new
/// owner)`, both from the kill — for speakers on slower timings (the VM lab's `safe` profile),
/// whose tests bound the printed times themselves.
///
/// # Errors
/// As [`kill_owner`].
pub async fn kill_owner_within(
    lab: &mut Lab,
    client: usize,
    addr: SocketAddr,
    old_owner: &str,
    eligible: &[String],
    (garp_within, http_within): (Duration, Duration),
    out: &mut (dyn Write + Send),
) -> anyhow::Result<FailoverOutcome> {
    let IpAddr::V4(ip) = addr.ip() else {
        bail!("the failover story reads the client's ARP table: IPv4 only, got {addr}");
    };
    let old_owner = old_owner.to_owned();
    let old_mac = lab.node(&old_owner).mac.clone();
    let netns = lab.client_netns(client)?;

    // The capture is open before the kill: it records the new owner's gratuitous ARP.
    let capture =
        takeover::capture_takeover(netns.clone(), ip, old_mac.clone(), garp_within).await?;
    let http_old = old_mac.clone();
    let http_ns = netns.clone();
    let http = tokio::task::spawn_blocking(move || {
        within_netns(&http_ns, move || {
            Ok(http_client::until_moved(
                addr,
                &http_old,
                5,
                Duration::from_millis(10),
                REQUEST_TIMEOUT,
                http_within,
            ))
        })
    });
    // Let a few requests go through the old owner first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let killed_us = http_client::unix_us();
    lab.signal_speaker(&old_owner, "KILL")?;
    let seen = capture.await??;
    let attempts = http.await??;

    let garp = seen.iter().find(|s| takeover::is_takeover(s, ip, &old_mac));
    let Some(Seen::GratuitousArp {
        unix_us, mac, form, ..
    }) = garp
    else {
        bail!("no gratuitous ARP for {ip} from another node within {garp_within:?} of the kill");
    };
    let new_owner = lab
        .node_by_mac(mac)
        .map(|n| n.name.clone())
        .with_context(|| format!("gratuitous ARP from {mac}, not a lab node"))?;
    let gratuitous_arp_after = micros_between(killed_us, *unix_us);
    writeln!(
        out,
        "  +{:>6.1} ms  gratuitous ARP ({form} form): {ip} is-at {mac} ({new_owner})",
        ms(gratuitous_arp_after)
    )?;

    let after: Vec<&Attempt> = attempts.iter().filter(|a| a.unix_us >= killed_us).collect();
    let failed_after_kill = after.iter().filter(|a| a.outcome.is_err()).count();
    let first_new = after.iter().find(|a| {
        a.outcome.is_ok()
            && a.via_mac
                .as_deref()
                .is_some_and(|m| m.eq_ignore_ascii_case(mac))
    });
    let Some(first_new) = first_new else {
        bail!(
            "no HTTP request succeeded through {new_owner} within {http_within:?} ({} sent after the kill, {failed_after_kill} failed)",
            after.len()
        );
    };
    let http_via_new_owner_after = micros_between(killed_us, first_new.done_unix_us);
    writeln!(
        out,
        "  +{:>6.1} ms  first HTTP answer through {new_owner}'s MAC ({})",
        ms(http_via_new_owner_after),
        first_new.outcome.as_deref().unwrap_or_default()
    )?;
    writeln!(
        out,
        "  {} requests sent after the kill, {failed_after_kill} failed (until the client's ARP entry moved, {old_owner}'s kube-proxy still forwarded: only its speaker died)",
        after.len()
    )?;
    let remaining: Vec<&str> = eligible
        .iter()
        .map(String::as_str)
        .filter(|n| *n != old_owner)
        .collect();
    let expected_new_owner =
        owner_choice::expected_owner(lab.implementation(), IpAddr::V4(ip), remaining)
            .context("no nodes left")?;
    // A probe nobody answered within its 300 ms is asked again, up to ARP_AFTER_PROBES times (a
    // responder slowed down, e.g. in the VM lab's emulated guest on a loaded machine); any answer
    // is judged as it comes.
    let mut arp_after: Vec<String> = Vec::new();
    for _ in 0..ARP_AFTER_PROBES {
        arp_after = lab.arp_answers(0, ip).await?.into_iter().collect();
        if !arp_after.is_empty() {
            break;
        }
    }
    let names: Vec<String> = arp_after
        .iter()
        .map(|m| {
            lab.node_by_mac(m)
                .map_or_else(|| m.clone(), |n| n.name.clone())
        })
        .collect();
    writeln!(
        out,
        "  ARP for {ip} is now answered by: {}",
        names.join(", ")
    )?;
    if new_owner != expected_new_owner {
        bail!(
            "{new_owner} took over, but {} over the remaining nodes picks {expected_new_owner}",
            owner_choice::rule_name(lab.implementation())
        );
    }
    if arp_after != [lab.node(&new_owner).mac.clone()] {
        bail!("after the failover ARP should be answered by {new_owner} alone, got {names:?}");
    }
    Ok(FailoverOutcome {
        old_owner,
        new_owner,
        expected_new_owner,
        gratuitous_arp_after,
        http_via_new_owner_after,
        requests_after_kill: after.len(),
        failed_after_kill,
        arp_after,
    })
}

/// The timeout of each of the client's HTTP requests during the failover.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// At most this many ARP probes after the failover while none is answered.
const ARP_AFTER_PROBES: usize = 5;

fn micros_between(from_us: u64, to_us: u64) -> Duration {
    Duration::from_micros(to_us.saturating_sub(from_us))
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}
