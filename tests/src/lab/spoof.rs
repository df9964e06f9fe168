//! A keyless attacker on the lab's LAN that floods the speakers' membership port with datagrams
//! whose IPv4 source it chooses (issue #32 G4, DESIGN S15): spoofed as a member's own `IP:port`,
//! or from its own address. Raw IPv4 with `IPPROTO_RAW` (the kernel fills the header checksum,
//! the ID and the total length, raw(7)); the UDP checksum is 0 (none, RFC 768), which Linux
//! accepts for IPv4.
//!
//! The payload passes the speakers' framing check (magic `FLBm`, version 1, at least 53 bytes)
//! so that every datagram reaches authentication, the most expensive thing a keyless sender can
//! make a speaker do; its tag never verifies.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::time::{Duration, Instant};

use anyhow::Context;

/// One flow of the flood: the source the datagrams claim and their destination.
#[derive(Clone, Copy, Debug)]
pub struct Flow {
    /// The (possibly spoofed) IPv4 source and UDP source port.
    pub from: SocketAddrV4,
    /// The destination: a speaker's membership address.
    pub to: SocketAddrV4,
}

/// What [`flood`] sent.
#[derive(Clone, Copy, Debug)]
pub struct FloodReport {
    /// Datagrams the kernel accepted.
    pub sent: u64,
    /// Send calls that failed (ENOBUFS when the interface queue is full).
    pub failed: u64,
    /// How long the flood ran.
    pub elapsed: Duration,
}

impl FloodReport {
    /// Datagrams accepted per second.
    pub fn rate(&self) -> f64 {
        self.sent as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// The UDP payload of a forged membership datagram: magic, version, a timestamp, a nonce, a
/// body and a tag, all but the magic and version made up (`variant` varies them).
pub fn forged_payload(variant: u8) -> Vec<u8> {
    let mut p = b"FLBm\x01".to_vec();
    p.extend((0..8 + 24 + 96 + 16).map(|i: u32| (i as u8).wrapping_mul(151) ^ variant));
    p
}

fn packet(flow: &Flow, payload: &[u8]) -> Vec<u8> {
    let udp_len = 8 + payload.len();
    let total = 20 + udp_len;
    let mut p = Vec::with_capacity(total);
    p.extend_from_slice(&[0x45, 0]);
    p.extend_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0, 0x40, 0, 64, 17, 0, 0]);
    p.extend_from_slice(&flow.from.ip().octets());
    p.extend_from_slice(&flow.to.ip().octets());
    p.extend_from_slice(&flow.from.port().to_be_bytes());
    p.extend_from_slice(&flow.to.port().to_be_bytes());
    p.extend_from_slice(&(udp_len as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]);
    p.extend_from_slice(payload);
    p
}

/// Sends forged membership datagrams round-robin over `flows`, as fast as one thread can, for
/// `duration`, from the calling thread's network namespace. `nice` lowers the sending thread's
/// scheduling priority (renice(1) of the thread), so that on this two-CPU machine the
/// speakers under attack are not starved by the attacker itself, as on a real LAN where the
/// attacker has a CPU of its own.
///
/// # Errors
/// The raw socket could not be opened (no `CAP_NET_RAW`) or `flows` is empty.
pub fn flood(flows: &[Flow], duration: Duration, nice: i32) -> anyhow::Result<FloodReport> {
    anyhow::ensure!(!flows.is_empty(), "no flows");
    // renice(1) of this thread's ID changes this thread only (setpriority(2) on a TID).
    let tid = nix::unistd::gettid().to_string();
    super::sh("renice", &["-n", &nice.to_string(), "-p", &tid])?;
    let socket = socket2::Socket::new(
        socket2::Domain::IPV4,
        socket2::Type::RAW,
        Some(socket2::Protocol::from(nix::libc::IPPROTO_RAW)),
    )
    .context("raw IPv4 socket (needs CAP_NET_RAW)")?;
    let packets: Vec<(Vec<u8>, socket2::SockAddr)> = flows
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let to = socket2::SockAddr::from(SocketAddrV4::new(*f.to.ip(), 0));
            (packet(f, &forged_payload(i as u8)), to)
        })
        .collect();
    let start = Instant::now();
    let (mut sent, mut failed) = (0u64, 0u64);
    while start.elapsed() < duration {
        for _ in 0..64 {
            for (p, to) in &packets {
                match socket.send_to(p, to) {
                    Ok(_) => sent += 1,
                    Err(_) => failed += 1,
                }
            }
        }
    }
    Ok(FloodReport {
        sent,
        failed,
        elapsed: start.elapsed(),
    })
}

/// Every flow of the attack of issue #32 G4 on `members` (their membership addresses): to each
/// member, from every other member's own `IP:port` (spoofed), and from `attacker` (unspoofed).
pub fn member_flows(members: &[SocketAddrV4], attacker: Ipv4Addr) -> Vec<Flow> {
    let mut flows = Vec::new();
    for to in members {
        for from in members.iter().filter(|m| *m != to) {
            flows.push(Flow {
                from: *from,
                to: *to,
            });
        }
        flows.push(Flow {
            from: SocketAddrV4::new(attacker, 40_000),
            to: *to,
        });
    }
    flows
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packets_have_the_lengths_and_addresses_of_the_flow() {
        let flow = Flow {
            from: "192.0.2.12:7947".parse().unwrap(),
            to: "192.0.2.11:7947".parse().unwrap(),
        };
        let payload = forged_payload(3);
        let p = packet(&flow, &payload);
        assert_eq!(p.len(), 28 + payload.len());
        assert_eq!(u16::from_be_bytes([p[2], p[3]]) as usize, p.len());
        assert_eq!(&p[12..16], &[192, 0, 2, 12]);
        assert_eq!(&p[16..20], &[192, 0, 2, 11]);
        assert_eq!(u16::from_be_bytes([p[20], p[21]]), 7947);
        assert_eq!(&p[28..33], b"FLBm\x01");
        assert!(payload.len() >= 53);
    }

    #[test]
    fn every_member_is_flooded_from_every_other_and_the_attacker() {
        let m: Vec<SocketAddrV4> = (11..14)
            .map(|i| SocketAddrV4::new(Ipv4Addr::new(192, 0, 2, i), 7947))
            .collect();
        let flows = member_flows(&m, Ipv4Addr::new(192, 0, 2, 100));
        assert_eq!(flows.len(), 3 * 3);
        assert!(flows.iter().all(|f| f.from != f.to));
    }
}
