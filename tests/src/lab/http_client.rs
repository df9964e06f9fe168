//! HTTP requests as a client on the lab's LAN sends them: `GET /hostname` over a new TCP
//! connection each time (so kube-proxy's per-connection random DNAT picks a backend anew), plus the
//! client's own neighbor (ARP) table entry, which says which node's MAC the connection went to.
//!
//! The functions here are blocking and act in the calling thread's network namespace; call them
//! inside [`super::within_netns`].

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{Context, bail};

/// Wall-clock microseconds since the Unix epoch (comparable with
/// [`super::Seen`]'s `unix_us`).
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// `GET /hostname` on `addr` over a fresh connection; returns the body (the backend's name).
/// `timeout` bounds the connect and each read/write.
///
/// # Errors
/// Connect/read/write failed or timed out, or the status was not 200.
pub fn get_hostname(addr: SocketAddr, timeout: Duration) -> anyhow::Result<String> {
    get(addr, "/hostname", timeout)
}

/// `GET path` on `addr` (IPv4 or IPv6) over a fresh connection; returns the trimmed body.
/// `timeout` bounds the connect and each read/write.
///
/// # Errors
/// Connect/read/write failed or timed out, or the status was not 200.
pub fn get(addr: SocketAddr, path: &str, timeout: Duration) -> anyhow::Result<String> {
    let mut conn = TcpStream::connect_timeout(&addr, timeout)
        .with_context(|| format!("connecting to {addr}"))?;
    conn.set_read_timeout(Some(timeout))?;
    conn.set_write_timeout(Some(timeout))?;
    let host = match addr.ip() {
        std::net::IpAddr::V4(ip) => ip.to_string(),
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
    };
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = Vec::new();
    conn.read_to_end(&mut response)
        .context("reading the response")?;
    parse_response(&response)
}

/// The body of a `200` HTTP/1.x response, trimmed.
///
/// # Errors
/// Not an HTTP response, or a status other than 200.
pub fn parse_response(response: &[u8]) -> anyhow::Result<String> {
    let text = String::from_utf8_lossy(response);
    let Some((head, body)) = text.split_once("\r\n\r\n") else {
        bail!(
            "not an HTTP response: {:?}",
            text.chars().take(80).collect::<String>()
        );
    };
    let status = head.lines().next().unwrap_or_default();
    if status.split_whitespace().nth(1) != Some("200") {
        bail!("HTTP status {status:?}");
    }
    Ok(body.trim().to_owned())
}

/// The MAC of a complete entry for `ip` in this thread's neighbor table (`/proc/thread-self/net/arp`,
/// which follows the thread's network namespace), lowercase.
pub fn neighbor_mac(ip: Ipv4Addr) -> Option<String> {
    let table = std::fs::read_to_string("/proc/thread-self/net/arp").ok()?;
    parse_arp_table(&table, ip)
}

/// Parses `/proc/net/arp` (`IP address  HW type  Flags  HW address  Mask  Device`) for a complete
/// (`ATF_COM`, flag `0x2`) entry of `ip`.
pub fn parse_arp_table(table: &str, ip: Ipv4Addr) -> Option<String> {
    table.lines().skip(1).find_map(|line| {
        let cols: Vec<&str> = line.split_whitespace().collect();
        let flags = u32::from_str_radix(cols.get(2)?.trim_start_matches("0x"), 16).ok()?;
        (cols.first()?.parse::<Ipv4Addr>().ok()? == ip && flags & 0x2 != 0)
            .then(|| cols.get(3).map(|m| m.to_lowercase()))?
    })
}

/// The outcome of `n` requests: answers per backend name, and the errors.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Backend name → number of requests it answered.
    pub per_backend: BTreeMap<String, usize>,
    /// One message per failed request.
    pub errors: Vec<String>,
}

/// Sends `n` requests one after another, each on a new connection.
pub fn tally(addr: SocketAddr, n: usize, timeout: Duration) -> Tally {
    let mut t = Tally::default();
    for _ in 0..n {
        match get_hostname(addr, timeout) {
            Ok(name) => *t.per_backend.entry(name).or_default() += 1,
            Err(e) => t.errors.push(format!("{e:#}")),
        }
    }
    t
}

/// One request of [`until_moved`] or [`until_answered_elsewhere`] ([`attempt`]).
#[derive(Debug, Clone)]
pub struct Attempt {
    /// When it was sent (wall clock, µs since the epoch).
    pub unix_us: u64,
    /// The MAC the client's neighbor table held for the address when it was sent.
    pub via_mac: Option<String>,
    /// The MAC the client's neighbor table held for the address when it completed.
    pub via_mac_after: Option<String>,
    /// When it completed (wall clock, µs since the epoch).
    pub done_unix_us: u64,
    /// The backend that answered, or the error.
    pub outcome: Result<String, String>,
}

impl Attempt {
    /// The MAC an answered request's connection surely went to: the client's neighbor entry
    /// named it when the request completed, and before it named the same MAC or none (then the
    /// connection itself resolved the address, to that MAC). `None` for a failed request, or
    /// when the entry changed from one MAC to another during the request (which MAC carried the
    /// connection is then unknown).
    pub fn answered_via(&self) -> Option<&str> {
        let after = self.via_mac_after.as_deref()?;
        let same = self
            .via_mac
            .as_deref()
            .is_none_or(|before| before.eq_ignore_ascii_case(after));
        (self.outcome.is_ok() && same).then_some(after)
    }
}

/// One `GET /hostname` to `addr` over a fresh connection (`timeout` bounds the connect and each
/// read/write), with the client's neighbor entry for the address read right before and right
/// after.
pub fn attempt(addr: SocketAddrV4, timeout: Duration) -> Attempt {
    let via_mac = neighbor_mac(*addr.ip());
    let sent_us = unix_us();
    let outcome = get_hostname(SocketAddr::V4(addr), timeout).map_err(|e| format!("{e:#}"));
    let done_unix_us = unix_us();
    Attempt {
        unix_us: sent_us,
        via_mac,
        via_mac_after: neighbor_mac(*addr.ip()),
        done_unix_us,
        outcome,
    }
}

/// Sends requests to `addr` back to back (a pause of `gap` between them) until `confirm`
/// consecutive requests succeeded through a MAC other than `old_mac`, or `max` has passed.
pub fn until_moved(
    addr: SocketAddr,
    old_mac: &str,
    confirm: usize,
    gap: Duration,
    timeout: Duration,
    max: Duration,
) -> Vec<Attempt> {
    let SocketAddr::V4(v4) = addr else {
        return Vec::new();
    };
    let start = Instant::now();
    let mut attempts: Vec<Attempt> = Vec::new();
    let mut moved = 0;
    while start.elapsed() < max && moved < confirm {
        let a = attempt(v4, timeout);
        let new_mac = a
            .via_mac
            .as_deref()
            .is_some_and(|m| !m.eq_ignore_ascii_case(old_mac));
        moved = if a.outcome.is_ok() && new_mac {
            moved + 1
        } else {
            0
        };
        attempts.push(a);
        std::thread::sleep(gap);
    }
    attempts
}

/// Sends [`attempt`]s to `addr` one after another (a pause of `gap` after each) until one is
/// answered through a MAC other than `old_mac` ([`Attempt::answered_via`]), or `max` has passed
/// since the call; returns them all, in order (the last is the one answered elsewhere, if any).
/// `started` is called once, in this thread, right before the first request.
pub fn until_answered_elsewhere(
    addr: SocketAddrV4,
    old_mac: &str,
    gap: Duration,
    timeout: Duration,
    max: Duration,
    started: impl FnOnce(),
) -> Vec<Attempt> {
    let start = Instant::now();
    let mut attempts: Vec<Attempt> = Vec::new();
    started();
    while start.elapsed() < max {
        let a = attempt(addr, timeout);
        let elsewhere = a
            .answered_via()
            .is_some_and(|m| !m.eq_ignore_ascii_case(old_mac));
        attempts.push(a);
        if elsewhere {
            break;
        }
        std::thread::sleep(gap);
    }
    attempts
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn parses_responses() {
        assert_eq!(
            parse_response(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nweb-1").unwrap(),
            "web-1"
        );
        assert!(parse_response(b"HTTP/1.1 404 Not Found\r\n\r\nnope").is_err());
        assert!(parse_response(b"garbage").is_err());
        assert!(parse_response(b"").is_err());
    }

    #[test]
    fn parses_the_arp_table() {
        let table = "IP address       HW type     Flags       HW address            Mask     Device\n\
                     198.51.100.200   0x1         0x2         AA:bb:cc:00:00:01     *        eth0\n\
                     198.51.100.201   0x1         0x0         00:00:00:00:00:00     *        eth0\n";
        assert_eq!(
            parse_arp_table(table, Ipv4Addr::new(198, 51, 100, 200)).as_deref(),
            Some("aa:bb:cc:00:00:01")
        );
        assert_eq!(
            parse_arp_table(table, Ipv4Addr::new(198, 51, 100, 201)),
            None,
            "incomplete entry"
        );
        assert_eq!(
            parse_arp_table(table, Ipv4Addr::new(198, 51, 100, 202)),
            None
        );
        assert_eq!(parse_arp_table("", Ipv4Addr::new(198, 51, 100, 202)), None);
    }

    fn answered(before: Option<&str>, after: Option<&str>, ok: bool) -> Attempt {
        Attempt {
            unix_us: 1,
            via_mac: before.map(str::to_owned),
            via_mac_after: after.map(str::to_owned),
            done_unix_us: 2,
            outcome: if ok {
                Ok("web-1".into())
            } else {
                Err("connecting: timed out".into())
            },
        }
    }

    #[test]
    fn an_answer_counts_for_the_mac_it_surely_went_through() {
        let (a, b) = ("aa:00:00:00:00:01", "aa:00:00:00:00:02");
        assert_eq!(answered(Some(a), Some(a), true).answered_via(), Some(a));
        assert_eq!(
            answered(Some("AA:00:00:00:00:01"), Some(a), true).answered_via(),
            Some(a),
            "MACs compare case-insensitively"
        );
        assert_eq!(
            answered(None, Some(b), true).answered_via(),
            Some(b),
            "the request resolved the address itself"
        );
        assert_eq!(
            answered(Some(a), Some(b), true).answered_via(),
            None,
            "the entry moved during the request"
        );
        assert_eq!(answered(Some(a), None, true).answered_via(), None);
        assert_eq!(answered(Some(b), Some(b), false).answered_via(), None);
    }
}
