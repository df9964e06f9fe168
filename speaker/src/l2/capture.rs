//! The client side: send an ARP request or a Neighbor Solicitation and record what comes back
//! (replies, gratuitous ARP, Neighbor Advertisements). Blocking, no Tokio: used by the
//! `ferrolb-l2probe` binary, the lab and the integration tests, run inside a client namespace.
//!
//! The sockets are the same kernel-filtered packet sockets as the responder's ([`Filter::AllArp`],
//! [`Filter::AllIcmpv6`]): only frames addressed to this host (unicast to our MAC, broadcast,
//! joined multicast such as `ff02::1`) and never our own.

use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::AsFd;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use crate::wire::MacAddr;
use crate::wire::arp::{ArpOp, GratuitousForm, build_arp_request, build_gratuitous_arp, parse_arp};
use crate::wire::ndp::{
    NdpMessage, NeighborSolicitation, build_neighbor_solicitation, multicast_mac, parse_ndp,
    solicited_node_multicast,
};

use super::interfaces::{InterfaceInfo, scan};
use super::socket::{Filter, PacketSocket};

/// One observed frame. Serialised as a JSON object with a `kind` tag (the probe's output lines).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Seen {
    /// A non-gratuitous ARP reply: `ip` is at `mac`.
    ArpReply {
        /// Milliseconds since the listen started.
        t_ms: f64,
        /// Wall-clock time, microseconds since the Unix epoch.
        unix_us: u64,
        /// Sender IP of the reply.
        ip: Ipv4Addr,
        /// Sender MAC of the reply.
        mac: String,
        /// Ethernet source of the frame.
        eth_src: String,
    },
    /// A gratuitous ARP (sender IP = target IP), either form.
    GratuitousArp {
        /// Milliseconds since the listen started.
        t_ms: f64,
        /// Wall-clock time, microseconds since the Unix epoch.
        unix_us: u64,
        /// The announced IP.
        ip: Ipv4Addr,
        /// The announced MAC (sender hardware address).
        mac: String,
        /// `request` (RFC 5227 announcement) or `reply` (RFC 2002 form).
        form: &'static str,
    },
    /// A Neighbor Advertisement (solicited or not).
    NeighborAdvertisement {
        /// Milliseconds since the listen started.
        t_ms: f64,
        /// Wall-clock time, microseconds since the Unix epoch.
        unix_us: u64,
        /// The advertised target.
        ip: Ipv6Addr,
        /// The Target Link-Layer Address option, if any.
        mac: Option<String>,
        /// Ethernet source of the frame.
        eth_src: String,
        /// IPv6 destination.
        ip_dst: Ipv6Addr,
        /// S flag.
        solicited: bool,
        /// O flag.
        override_flag: bool,
    },
    /// An address probe: an ARP request with sender IP 0.0.0.0 (RFC 5227 §2.1.1) or a Duplicate
    /// Address Detection Neighbor Solicitation (RFC 4862 §5.4.2). Recorded only by a client
    /// opened with [`Client::recording_probes`].
    Probe {
        /// Milliseconds since the listen started.
        t_ms: f64,
        /// Wall-clock time, microseconds since the Unix epoch.
        unix_us: u64,
        /// The probed address.
        ip: IpAddr,
        /// The prober's MAC (Ethernet source).
        mac: String,
    },
}

impl Seen {
    /// The IP the frame is about.
    pub fn ip(&self) -> IpAddr {
        match self {
            Seen::ArpReply { ip, .. } | Seen::GratuitousArp { ip, .. } => IpAddr::V4(*ip),
            Seen::NeighborAdvertisement { ip, .. } => IpAddr::V6(*ip),
            Seen::Probe { ip, .. } => *ip,
        }
    }

    /// The MAC the frame says the IP is at (for an NA without TLLA: its Ethernet source; for a
    /// probe: the prober's, which claims nothing).
    pub fn mac(&self) -> &str {
        match self {
            Seen::ArpReply { mac, .. } | Seen::GratuitousArp { mac, .. } => mac,
            Seen::NeighborAdvertisement { mac, eth_src, .. } => mac.as_deref().unwrap_or(eth_src),
            Seen::Probe { mac, .. } => mac,
        }
    }

    /// When it was seen, microseconds since the Unix epoch.
    pub fn unix_us(&self) -> u64 {
        match self {
            Seen::ArpReply { unix_us, .. }
            | Seen::GratuitousArp { unix_us, .. }
            | Seen::NeighborAdvertisement { unix_us, .. }
            | Seen::Probe { unix_us, .. } => *unix_us,
        }
    }
}

/// A client on one interface.
#[derive(Debug)]
pub struct Client {
    info: InterfaceInfo,
    mac: MacAddr,
    arp: PacketSocket,
    icmp6: PacketSocket,
    probes: bool,
}

impl Client {
    /// Open the client sockets on `interface` (in the calling thread's network namespace).
    ///
    /// Errors: no such interface / no MAC, or no `CAP_NET_RAW`.
    pub fn open(interface: &str) -> io::Result<Client> {
        let info = scan()?
            .into_iter()
            .find(|i| i.name == interface)
            .ok_or_else(|| {
                io::Error::new(io::ErrorKind::NotFound, format!("no interface {interface}"))
            })?;
        let mac = info.mac.ok_or_else(|| {
            io::Error::new(io::ErrorKind::NotFound, format!("{interface} has no MAC"))
        })?;
        let arp = PacketSocket::open(interface, Filter::AllArp, true)?;
        let icmp6 = PacketSocket::open(interface, Filter::AllIcmpv6, true)?;
        Ok(Client {
            info,
            mac,
            arp,
            icmp6,
            probes: false,
        })
    }

    /// Also record address probes ([`Seen::Probe`]) when listening.
    pub fn recording_probes(mut self) -> Client {
        self.probes = true;
        self
    }

    /// The interface's MAC.
    pub fn mac(&self) -> MacAddr {
        self.mac
    }

    /// The interface as scanned when opened.
    pub fn info(&self) -> &InterfaceInfo {
        &self.info
    }

    /// Broadcast an ARP request for `target` from `sender` (default: the interface's first IPv4,
    /// else 0.0.0.0, i.e. an RFC 5227 probe).
    pub fn send_arp_request(&self, target: Ipv4Addr, sender: Option<Ipv4Addr>) -> io::Result<()> {
        let sender = sender
            .or_else(|| self.info.ipv4.first().copied())
            .unwrap_or(Ipv4Addr::UNSPECIFIED);
        self.arp
            .send(&build_arp_request(self.mac, sender, target))
            .map(drop)
    }

    /// Broadcast a gratuitous ARP saying `ip` is at this interface's MAC, in `form` (RFC 5227 §3
    /// announcement or RFC 2002 §4.6 reply form): what a host that has `ip` configured sends. For
    /// tests of conflict detection (issue #10 item 5).
    pub fn send_gratuitous_arp(&self, ip: Ipv4Addr, form: GratuitousForm) -> io::Result<()> {
        self.arp
            .send(&build_gratuitous_arp(self.mac, ip, form))
            .map(drop)
    }

    /// Send a Neighbor Solicitation for `target`.
    /// - `unicast_to`: `None` sends to the solicited-node group (multicast); `Some(mac)` sends to
    ///   the target address itself at that MAC (a router's reachability probe).
    /// - `source`: the IPv6 source (default: the interface's link-local); `::` makes a DAD probe
    ///   (no Source Link-Layer Address option, always multicast).
    pub fn send_neighbor_solicitation(
        &self,
        target: Ipv6Addr,
        unicast_to: Option<MacAddr>,
        source: Option<Ipv6Addr>,
    ) -> io::Result<()> {
        let ip_src = source.or(self.info.link_local).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                "no link-local address; pass a source",
            )
        })?;
        let dad = ip_src.is_unspecified();
        let group = solicited_node_multicast(target);
        let (eth_dst, ip_dst) = match unicast_to {
            Some(mac) if !dad => (mac, target),
            _ => (multicast_mac(group), group),
        };
        let ns = NeighborSolicitation {
            eth_dst,
            eth_src: self.mac,
            ip_src,
            ip_dst,
            target,
            source_link_layer: (!dad).then_some(self.mac),
        };
        self.icmp6.send(&build_neighbor_solicitation(&ns)).map(drop)
    }

    /// Send `frame` as it is (Ethernet header included) on the interface: for tests that need a
    /// frame no builder makes (e.g. an 802.1Q-tagged ARP request).
    pub fn send_frame(&self, frame: &[u8]) -> io::Result<()> {
        self.arp.send(frame).map(drop)
    }

    /// Discard everything received so far.
    pub fn drain(&self) {
        let mut buf = [0u8; 1600];
        while self.arp.recv(&mut buf).is_ok() {}
        while self.icmp6.recv(&mut buf).is_ok() {}
    }

    /// Record ARP replies, gratuitous ARPs and Neighbor Advertisements for `duration`.
    /// `stop` ends early when it returns true for the frames seen so far.
    pub fn listen(
        &self,
        duration: Duration,
        stop: impl Fn(&[Seen]) -> bool,
    ) -> io::Result<Vec<Seen>> {
        let start = Instant::now();
        let deadline = start + duration;
        let mut seen = Vec::new();
        let mut buf = [0u8; 1600];
        loop {
            let now = Instant::now();
            if now >= deadline || stop(&seen) {
                return Ok(seen);
            }
            let wait = u16::try_from((deadline - now).as_millis().max(1)).unwrap_or(u16::MAX);
            let mut fds = [
                PollFd::new(self.arp.as_fd(), PollFlags::POLLIN),
                PollFd::new(self.icmp6.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::from(wait)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            for socket in [&self.arp, &self.icmp6] {
                while let Ok(got) = socket.recv(&mut buf) {
                    // Only what crossed this interface's own link: not frames the kernel moved
                    // on to a VLAN sub-interface or bond master stacked on it.
                    if !got.arrived_on(usize::try_from(self.info.index).unwrap_or(usize::MAX)) {
                        continue;
                    }
                    let n = got.len;
                    let t_ms = start.elapsed().as_secs_f64() * 1000.0;
                    let frame = buf.get(..n).unwrap_or_default();
                    if let Some(s) = classify(frame, t_ms, self.mac) {
                        seen.push(s);
                    } else if self.probes
                        && let Some(s) = classify_probe(frame, t_ms, self.mac)
                    {
                        seen.push(s);
                    }
                }
            }
        }
    }
}

impl Client {
    /// Hands every ARP frame that crosses the interface during `duration` to `on` as
    /// `Some(frame)`, and calls `on(self, None)` at least every 50 ms besides, so that `on` can
    /// also send ([`Client::send_frame`]) on its own schedule — for a test that replays what it
    /// captures, as a keyless host on the LAN would (the lab attack A17).
    ///
    /// # Errors
    /// `poll` failed.
    pub fn each_arp_frame(
        &self,
        duration: Duration,
        on: impl FnMut(&Client, Option<&[u8]>),
    ) -> io::Result<()> {
        self.each_frame_of(&self.arp, duration, on)
    }

    /// [`Client::each_arp_frame`] for ICMPv6 frames (Neighbor Solicitations and Advertisements
    /// among them): the lab attack A17 on IPv6.
    ///
    /// # Errors
    /// `poll` failed.
    pub fn each_icmp6_frame(
        &self,
        duration: Duration,
        on: impl FnMut(&Client, Option<&[u8]>),
    ) -> io::Result<()> {
        self.each_frame_of(&self.icmp6, duration, on)
    }

    fn each_frame_of(
        &self,
        socket: &PacketSocket,
        duration: Duration,
        mut on: impl FnMut(&Client, Option<&[u8]>),
    ) -> io::Result<()> {
        let deadline = Instant::now() + duration;
        let mut buf = [0u8; 1600];
        while Instant::now() < deadline {
            let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLIN)];
            match poll(&mut fds, PollTimeout::from(50u16)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            while let Ok(got) = socket.recv(&mut buf) {
                if got.arrived_on(usize::try_from(self.info.index).unwrap_or(usize::MAX)) {
                    on(self, buf.get(..got.len));
                }
            }
            on(self, None);
        }
        Ok(())
    }
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// Turn a received frame into a [`Seen`], or `None` for anything else (requests, our own, junk).
pub fn classify(frame: &[u8], t_ms: f64, ours: MacAddr) -> Option<Seen> {
    let unix_us = unix_us();
    if let Ok(m) = parse_arp(frame) {
        if m.sender_mac == ours {
            return None;
        }
        if m.is_gratuitous() {
            let form = if m.op == ArpOp::Request {
                "request"
            } else {
                "reply"
            };
            return Some(Seen::GratuitousArp {
                t_ms,
                unix_us,
                ip: m.sender_ip,
                mac: m.sender_mac.to_string(),
                form,
            });
        }
        if m.op == ArpOp::Reply {
            return Some(Seen::ArpReply {
                t_ms,
                unix_us,
                ip: m.sender_ip,
                mac: m.sender_mac.to_string(),
                eth_src: m.eth_src.to_string(),
            });
        }
        return None;
    }
    match parse_ndp(frame) {
        Ok(NdpMessage::Advertisement(na)) if na.eth_src != ours => {
            Some(Seen::NeighborAdvertisement {
                t_ms,
                unix_us,
                ip: na.target,
                mac: na.target_link_layer.map(|m| m.to_string()),
                eth_src: na.eth_src.to_string(),
                ip_dst: na.ip_dst,
                solicited: na.solicited,
                override_flag: na.override_flag,
            })
        }
        _ => None,
    }
}

/// A [`Seen::Probe`] for an ARP probe or a DAD Neighbor Solicitation not sent from `ours`, else
/// `None`.
pub fn classify_probe(frame: &[u8], t_ms: f64, ours: MacAddr) -> Option<Seen> {
    let unix_us = unix_us();
    if let Ok(m) = parse_arp(frame) {
        return (m.is_probe() && m.eth_src != ours).then(|| Seen::Probe {
            t_ms,
            unix_us,
            ip: IpAddr::V4(m.target_ip),
            mac: m.eth_src.to_string(),
        });
    }
    match parse_ndp(frame) {
        Ok(NdpMessage::Solicitation(ns)) if ns.is_dad() && ns.eth_src != ours => {
            Some(Seen::Probe {
                t_ms,
                unix_us,
                ip: IpAddr::V6(ns.target),
                mac: ns.eth_src.to_string(),
            })
        }
        _ => None,
    }
}
