//! Probing an automatic pool's candidates (issue #28; the pure schedule is
//! [`ferrolb_l2::networks::CandidateProbes`]): RFC 5227 §2.1.1 ARP probes — requests with sender
//! IP 0.0.0.0, so no host learns anything from them — sent on one interface, then every ARP frame
//! to this host read for a short wait; a host whose frame has a probed address as its sender IP
//! uses that address. Blocking (one packet socket, a short wait); call it from `spawn_blocking`.

use std::collections::BTreeMap;
use std::io;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use crate::wire::MacAddr;
use crate::wire::arp::{build_arp_request, parse_arp};

use super::socket::{Filter, PacketSocket, link_addr};

/// How long answers are awaited after the probes (RFC 5227's `ANNOUNCE_WAIT` is 2 s; a host on
/// the LAN answers within milliseconds).
pub const WAIT: Duration = Duration::from_millis(500);

/// Probes `ips` on `interface` and returns, per address, the MAC of a host that claimed it (the
/// first seen), or `None`. Frames from our own MAC are ignored.
///
/// # Errors
/// The interface has no link-layer address, or the packet socket could not be opened or used
/// (no `CAP_NET_RAW`).
pub fn probe(interface: &str, ips: &[Ipv4Addr]) -> io::Result<Vec<(Ipv4Addr, Option<MacAddr>)>> {
    let link = link_addr(interface)?;
    let o = link
        .addr()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no MAC"))?;
    let mac = MacAddr(o[0], o[1], o[2], o[3], o[4], o[5]);
    let socket = PacketSocket::open(interface, Filter::AllArp, false)?;
    socket.set_read_timeout(Some(Duration::from_millis(50)))?;
    for ip in ips {
        socket.send(&build_arp_request(mac, Ipv4Addr::UNSPECIFIED, *ip))?;
    }
    let mut answers: BTreeMap<Ipv4Addr, Option<MacAddr>> =
        ips.iter().map(|ip| (*ip, None)).collect();
    let deadline = Instant::now() + WAIT;
    let mut buf = [0u8; 1600];
    while Instant::now() < deadline {
        let len = match socket.recv(&mut buf) {
            Ok(r) => r.len,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                continue;
            }
            Err(e) => return Err(e),
        };
        let Ok(msg) = parse_arp(&buf[..len.min(buf.len())]) else {
            continue;
        };
        if msg.sender_mac == mac {
            continue;
        }
        if let Some(slot) = answers.get_mut(&msg.sender_ip)
            && slot.is_none()
        {
            *slot = Some(msg.sender_mac);
        }
    }
    Ok(answers.into_iter().collect())
}
