//! Signal → first HTTP answer through the new owner, measured in the same trial as signal →
//! first gratuitous ARP (issue #11's HTTP rows of `ferrolb-bench-lab compare`).
//!
//! While a client captures frames ([`takeover::capture_takeover`]), a second thread in the same
//! client namespace sends `GET /hostname` to the Service address, a fresh connection each time
//! ([`http_client::until_answered_elsewhere`]: [`REQUEST_TIMEOUT`] for the connect and each
//! read/write, [`GAP`] after each request), and then the owner's speaker gets the signal. Both
//! figures are timed from one wall-clock timestamp taken right before the signal. The HTTP figure
//! ends when the first request answered through the node that sent the gratuitous ARP has
//! read its whole response; "through" means the client's neighbor entry for the address named
//! that node's MAC when the request completed, and before it the same MAC or none
//! ([`Attempt::answered_via`]). Only the speaker dies: the old owner's kube-proxy keeps
//! forwarding, so requests keep succeeding through the old owner until the client's neighbor
//! entry moves.

use std::net::SocketAddrV4;
use std::time::Duration;

use anyhow::bail;

use super::http_client::{self, Attempt, unix_us};
use super::takeover::{self, Takeover};
use super::{Lab, within_netns};

/// Timeout of each request's connect and of each read and write.
pub const REQUEST_TIMEOUT: Duration = Duration::from_millis(250);
/// Pause after each request (keeps the client loop from competing with the speakers for CPU).
pub const GAP: Duration = Duration::from_millis(5);

/// What the HTTP client saw after the signal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTakeover {
    /// The node whose MAC the first answer elsewhere came through (the gratuitous ARP's sender).
    pub via: String,
    /// Signal → that answer read completely.
    pub after: Duration,
    /// The backend pod that answered (`GET /hostname`'s body).
    pub backend: String,
    /// Requests sent after the signal, up to and including that one.
    pub requests: usize,
    /// How many of those failed (refused, timed out, not 200).
    pub failed: usize,
}

/// Both figures of one signal. Each is an error of its own when it did not happen in time.
#[derive(Debug)]
pub struct Figures {
    /// Signal → first gratuitous ARP from another node.
    pub arp: anyhow::Result<Takeover>,
    /// Signal → first HTTP answer through the node that sent it.
    pub http: anyhow::Result<HttpTakeover>,
}

/// From client `client` (index), captures frames and sends HTTP requests to `addr` (the Service
/// address and port) while sending `signal` (`"KILL"`, `"TERM"`) to node `victim`'s speaker; the
/// capture stops at the first gratuitous ARP for the address from another node, the requests at
/// the first answer through another node, each at the latest `timeout` after it started (just
/// before the signal). See the module docs.
///
/// # Errors
/// No such client, the capture or the client thread could not start or failed, or the victim
/// has no speaker. A figure that did not come in time is not an error here but in [`Figures`].
pub async fn signal_and_time(
    lab: &mut Lab,
    client: usize,
    addr: SocketAddrV4,
    victim: &str,
    signal: &str,
    timeout: Duration,
) -> anyhow::Result<Figures> {
    let ip = *addr.ip();
    let victim_mac = lab.node(victim).mac.clone();
    let netns = lab.client_netns(client)?;
    let capture =
        takeover::capture_takeover(netns.clone(), ip, victim_mac.clone(), timeout).await?;
    let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<()>();
    let old_mac = victim_mac.clone();
    let http = tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            Ok(http_client::until_answered_elsewhere(
                addr,
                &old_mac,
                GAP,
                REQUEST_TIMEOUT,
                timeout,
                || {
                    let _ = ready_tx.send(());
                },
            ))
        })
    });
    if ready_rx.await.is_err() {
        http.await??;
        bail!("the HTTP client ended before it started");
    }
    let signalled_us = unix_us();
    lab.signal_speaker(victim, signal)?;
    let seen = capture.await??;
    let attempts = http.await??;
    let arp = takeover::from_capture(lab, &seen, ip, victim, signal, timeout, signalled_us);
    let new_owner_mac = arp
        .as_ref()
        .ok()
        .map(|t| lab.node(&t.new_owner).mac.clone());
    let http = first_answer_elsewhere(
        &attempts,
        signalled_us,
        &victim_mac,
        new_owner_mac.as_deref(),
        |mac| lab.node_by_mac(mac).map(|n| n.name.clone()),
    )
    .map_err(|e| anyhow::anyhow!("{e} (SIG{signal} to {victim}, timeout {timeout:?})"));
    Ok(Figures { arp, http })
}

/// From the `attempts` of [`http_client::until_answered_elsewhere`] (in order) after a signal
/// sent at `signalled_us` (µs since the epoch) to the speaker of the node with MAC `victim_mac`:
/// the first request answered through another MAC ([`Attempt::answered_via`]), which must be
/// `new_owner_mac` (the gratuitous ARP's sender) when one is known. `name_of` maps a MAC to its
/// node's name.
///
/// # Errors
/// (A message.) No request was answered through another MAC; the first was answered before the
/// signal, through a MAC of no node, or through a node other than `new_owner_mac`'s.
pub fn first_answer_elsewhere(
    attempts: &[Attempt],
    signalled_us: u64,
    victim_mac: &str,
    new_owner_mac: Option<&str>,
    name_of: impl Fn(&str) -> Option<String>,
) -> Result<HttpTakeover, String> {
    let elsewhere = |a: &Attempt| {
        a.answered_via()
            .filter(|m| !m.eq_ignore_ascii_case(victim_mac))
            .map(str::to_owned)
    };
    let first = attempts.iter().position(|a| elsewhere(a).is_some());
    let counted = attempts
        .get(..first.map_or(attempts.len(), |i| i + 1))
        .unwrap_or_default();
    let after_signal: Vec<&Attempt> = counted
        .iter()
        .filter(|a| a.unix_us >= signalled_us)
        .collect();
    let requests = after_signal.len();
    let failed = after_signal.iter().filter(|a| a.outcome.is_err()).count();
    let Some(answer) = first.and_then(|i| attempts.get(i)) else {
        let last_error = after_signal
            .iter()
            .rev()
            .find_map(|a| a.outcome.as_ref().err())
            .map_or_else(String::new, |e| format!(", last error: {e}"));
        return Err(format!(
            "no HTTP answer through another node ({requests} requests after the signal, {failed} failed{last_error})"
        ));
    };
    let mac = elsewhere(answer).unwrap_or_default();
    let via = name_of(&mac).ok_or_else(|| format!("HTTP answer through {mac}, no node's MAC"))?;
    if answer.unix_us < signalled_us {
        return Err(format!(
            "HTTP answered through {via} before the signal: not the owner's alone"
        ));
    }
    if let Some(owner) = new_owner_mac
        && !owner.eq_ignore_ascii_case(&mac)
    {
        let owner = name_of(owner).unwrap_or_else(|| owner.to_owned());
        return Err(format!(
            "first HTTP answer elsewhere came through {via}, but {owner} sent the gratuitous ARP"
        ));
    }
    Ok(HttpTakeover {
        via,
        after: Duration::from_micros(answer.done_unix_us.saturating_sub(signalled_us)),
        backend: answer.outcome.clone().unwrap_or_default(),
        requests,
        failed,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    const OLD: &str = "aa:00:00:00:00:01";
    const NEW: &str = "aa:00:00:00:00:02";
    const THIRD: &str = "aa:00:00:00:00:03";

    fn at(sent: u64, done: u64, mac: &str, ok: bool) -> Attempt {
        Attempt {
            unix_us: sent,
            via_mac: Some(mac.into()),
            via_mac_after: Some(mac.into()),
            done_unix_us: done,
            outcome: if ok {
                Ok("web-2".into())
            } else {
                Err("connecting: timed out".into())
            },
        }
    }

    fn name_of(mac: &str) -> Option<String> {
        [(OLD, "node-1"), (NEW, "node-2"), (THIRD, "node-3")]
            .iter()
            .find(|(m, _)| *m == mac)
            .map(|(_, n)| (*n).to_owned())
    }

    #[test]
    fn the_figure_is_the_first_answer_through_the_new_owner_from_the_signal() {
        let attempts = [
            at(900, 950, OLD, true), // before the signal at 1000: not counted
            at(1_005, 1_010, OLD, true),
            at(1_015, 1_265, OLD, false),
            at(1_270, 1_400, NEW, true),
        ];
        let t = first_answer_elsewhere(&attempts, 1_000, OLD, Some(NEW), name_of).unwrap();
        assert_eq!(
            t,
            HttpTakeover {
                via: "node-2".into(),
                after: Duration::from_micros(400),
                backend: "web-2".into(),
                requests: 3,
                failed: 1,
            }
        );
        let unknown_owner = first_answer_elsewhere(&attempts, 1_000, OLD, None, name_of).unwrap();
        assert_eq!(unknown_owner.via, "node-2");
    }

    #[test]
    fn answers_that_prove_nothing_are_failures() {
        let none = [at(1_005, 1_010, OLD, true), at(1_015, 1_020, NEW, false)];
        let e = first_answer_elsewhere(&none, 1_000, OLD, Some(NEW), name_of).unwrap_err();
        assert!(e.contains("2 requests after the signal, 1 failed"), "{e}");
        assert!(e.contains("last error: connecting: timed out"), "{e}");

        let wrong = [at(1_005, 1_010, THIRD, true)];
        let e = first_answer_elsewhere(&wrong, 1_000, OLD, Some(NEW), name_of).unwrap_err();
        assert!(
            e.contains("through node-3, but node-2 sent the gratuitous ARP"),
            "{e}"
        );

        let early = [at(990, 1_010, NEW, true)];
        let e = first_answer_elsewhere(&early, 1_000, OLD, Some(NEW), name_of).unwrap_err();
        assert!(e.contains("before the signal"), "{e}");

        let stranger = [at(1_005, 1_010, "aa:00:00:00:00:09", true)];
        let e = first_answer_elsewhere(&stranger, 1_000, OLD, None, name_of).unwrap_err();
        assert!(e.contains("no node's MAC"), "{e}");

        let e = first_answer_elsewhere(&[], 1_000, OLD, None, name_of).unwrap_err();
        assert!(e.contains("0 requests after the signal, 0 failed)"), "{e}");
    }
}
