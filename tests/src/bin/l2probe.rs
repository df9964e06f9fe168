//! `ferrolb-l2probe`: a layer-2 client for the lab and the failover benchmark.
//!
//! Run it inside a client network namespace (`ip netns exec client ferrolb-l2probe …`). It sends
//! ARP requests and/or Neighbor Solicitations on one interface, listens, and prints one JSON
//! object per line on stdout:
//!
//! - `{"kind":"sent","what":"arp_request"|"neighbor_solicitation","ip":…,"unix_us":…}` per frame sent;
//! - `{"kind":"arp_reply","ip":…,"mac":…,"eth_src":…,"t_ms":…,"unix_us":…}`;
//! - `{"kind":"gratuitous_arp","ip":…,"mac":…,"form":"request"|"reply","t_ms":…,"unix_us":…}`;
//! - `{"kind":"neighbor_advertisement","ip":…,"mac":…,"eth_src":…,"ip_dst":…,"solicited":…,"override_flag":…,"t_ms":…,"unix_us":…}`.
//!
//! `t_ms` counts from the start of listening; `unix_us` is wall-clock time for correlating with
//! events in other processes (e.g. the moment an owner was killed).
//!
//! Examples:
//! ```text
//! ferrolb-l2probe -i eth0 --arp 198.51.100.10                       # one request, wait for a reply
//! ferrolb-l2probe -i eth0 --ns 2001:db8:0:8::100 --unicast-mac 02:00:00:00:00:01
//! ferrolb-l2probe -i eth0 --ns 2001:db8:0:8::100 --source 2001:db8:0:8::20
//! ferrolb-l2probe -i eth0 --listen-ms 10000 --ip 198.51.100.10        # watch gratuitous ARP only
//! ferrolb-l2probe -i eth0 --arp 198.51.100.10 --repeat 50 --interval-ms 100 --listen-ms 0
//! ```
//! Exit status: 0, or 2 when `--expect-reply` was given and no answer arrived.

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result};
use clap::Parser;
use ferrolb_speaker::l2::capture::{Client, Seen};
use ferrolb_speaker::wire::MacAddr;

/// Send ARP requests / Neighbor Solicitations and print what comes back as JSON lines.
#[derive(Parser, Debug)]
#[command(name = "ferrolb-l2probe", version)]
struct Args {
    /// Interface to send and listen on (in the current network namespace).
    #[arg(short, long)]
    interface: String,
    /// Send an ARP request for this IPv4 address (repeatable).
    #[arg(long)]
    arp: Vec<Ipv4Addr>,
    /// Send a Neighbor Solicitation for this IPv6 address (repeatable).
    #[arg(long)]
    ns: Vec<Ipv6Addr>,
    /// Send NS unicast to the target address at this MAC (a router's reachability probe) instead
    /// of to the solicited-node multicast group.
    #[arg(long)]
    unicast_mac: Option<MacAddr>,
    /// Source address: IPv4 sender of ARP requests (default: the interface's first IPv4; 0.0.0.0
    /// makes an RFC 5227 probe) or IPv6 source of NS (default: the interface's link-local; `::`
    /// makes a DAD probe).
    #[arg(long)]
    source: Option<IpAddr>,
    /// Send the requests this many times (default 1).
    #[arg(long, default_value_t = 1)]
    repeat: u32,
    /// Pause between repeats, milliseconds; replies arriving meanwhile are printed.
    #[arg(long, default_value_t = 100)]
    interval_ms: u64,
    /// Listen this long after the last request, milliseconds (0 = don't).
    #[arg(long, default_value_t = 1000)]
    listen_ms: u64,
    /// Only print frames about this IP.
    #[arg(long)]
    ip: Option<IpAddr>,
    /// Stop listening at the first answer (ARP reply or solicited NA) and exit 2 if none came.
    #[arg(long)]
    expect_reply: bool,
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

fn is_answer(s: &Seen) -> bool {
    matches!(
        s,
        Seen::ArpReply { .. }
            | Seen::NeighborAdvertisement {
                solicited: true,
                ..
            }
    )
}

fn main() -> Result<()> {
    let args = Args::parse();
    let client =
        Client::open(&args.interface).with_context(|| format!("opening {}", args.interface))?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut answered = false;
    let mut print = |seen: Vec<Seen>, out: &mut std::io::StdoutLock<'_>| -> Result<()> {
        for s in seen
            .into_iter()
            .filter(|s| args.ip.is_none_or(|ip| s.ip() == ip))
        {
            answered |= is_answer(&s);
            writeln!(out, "{}", serde_json::to_string(&s)?)?;
        }
        out.flush()?;
        Ok(())
    };
    let (v4_source, v6_source) = match args.source {
        Some(IpAddr::V4(v4)) => (Some(v4), None),
        Some(IpAddr::V6(v6)) => (None, Some(v6)),
        None => (None, None),
    };
    let sends = !args.arp.is_empty() || !args.ns.is_empty();
    for round in 0..if sends { args.repeat.max(1) } else { 0 } {
        for ip in &args.arp {
            client
                .send_arp_request(*ip, v4_source)
                .with_context(|| format!("sending ARP request for {ip}"))?;
            let line = serde_json::json!({"kind": "sent", "what": "arp_request", "ip": ip, "unix_us": unix_us()});
            writeln!(out, "{line}")?;
        }
        for ip in &args.ns {
            client
                .send_neighbor_solicitation(*ip, args.unicast_mac, v6_source)
                .with_context(|| format!("sending Neighbor Solicitation for {ip}"))?;
            let line = serde_json::json!({"kind": "sent", "what": "neighbor_solicitation", "ip": ip, "unix_us": unix_us()});
            writeln!(out, "{line}")?;
        }
        if round + 1 < args.repeat {
            let seen = client.listen(Duration::from_millis(args.interval_ms), |_| false)?;
            print(seen, &mut out)?;
        }
    }
    let expect = args.expect_reply;
    let seen = client.listen(Duration::from_millis(args.listen_ms), |s| {
        expect && s.iter().any(is_answer)
    })?;
    print(seen, &mut out)?;
    if expect && !answered {
        std::process::exit(2);
    }
    Ok(())
}
