//! `AF_PACKET` sockets with kernel-side filtering (DESIGN S6, S7), and the solicited-node
//! multicast memberships.
//!
//! - ARP: `socket(AF_PACKET, SOCK_RAW, ETH_P_ARP)` bound to one interface, with a classic BPF filter
//!   ([`arp_filter`]) passing only ARP requests and replies addressed to this host (packet type
//!   host, broadcast or multicast — never our own outgoing frames, never other hosts' frames seen
//!   in promiscuous mode). Replies are never answered; they are read to see another host claim an
//!   owned IP (issue #10 item 5, RFC 5227 §2.4). Never `ETH_P_ALL`, never promiscuous mode.
//! - NDP: `socket(AF_PACKET, SOCK_RAW, ETH_P_IPV6)` bound to one interface with [`ns_filter`],
//!   which passes only ICMPv6 types 135 and 136 (Neighbor Solicitation and Advertisement, the
//!   latter for conflict detection only) directly after the IPv6 header, so no other IPv6 traffic
//!   is ever copied to user space.
//! - Binding uses the interface's own `sockaddr_ll` as reported by `getifaddrs` (its protocol field
//!   is 0, so the socket's protocol is kept): this keeps the crate free of `unsafe`.
//! - Solicited-node groups ([`Memberships`]) are joined with `IPV6_JOIN_GROUP` on one unbound UDP
//!   socket per interface. The kernel then programs the NIC's multicast filter *and* sends MLD
//!   reports, so MLD-snooping switches forward the solicitations to us (`PACKET_ADD_MEMBERSHIP`
//!   would do the former only). The UDP socket is never read. Joins are refcounted per group
//!   because several owned IPs can share a group (same low 24 bits).

use std::collections::BTreeMap;
use std::io;
use std::net::Ipv6Addr;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

use nix::sys::socket::{LinkAddr, MsgFlags};
use socket2::{Domain, Protocol, SockFilter, Socket, Type};

use crate::wire::ndp::{
    NEXT_HEADER_ICMPV6, OFFSET_ICMPV6_TYPE, OFFSET_NEXT_HEADER, TYPE_NEIGHBOR_ADVERTISEMENT,
    TYPE_NEIGHBOR_SOLICITATION,
};
use crate::wire::{ETHERTYPE_ARP, ETHERTYPE_IPV6};

/// `sll_pkttype` of frames we sent ourselves (`PACKET_OUTGOING`).
pub const PACKET_OUTGOING: u8 = 4;
/// Highest accepted `sll_pkttype`: `PACKET_HOST` (0), `PACKET_BROADCAST` (1), `PACKET_MULTICAST` (2).
pub const PACKET_MULTICAST: u8 = 2;

// Classic BPF opcodes (linux/filter.h).
const LD_B_ABS: u16 = 0x30;
const LD_H_ABS: u16 = 0x28;
const JEQ_K: u16 = 0x15;
const JGT_K: u16 = 0x25;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_PKTTYPE`: the ancillary load of the packet type.
const AD_PKTTYPE: u32 = 0xffff_f000 + 4;
const ACCEPT: u32 = 0x0004_0000;

/// One classic BPF instruction (`struct sock_filter`, linux/filter.h).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant operand.
    pub k: u32,
}

const fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    Insn { code, jt, jf, k }
}

/// The BPF program of the ARP responder socket: packet type ≤ multicast, ethertype ARP,
/// operation request (1) or reply (2) (RFC 826; replies only for conflict detection, RFC 5227
/// §2.4).
pub fn arp_filter() -> Vec<Insn> {
    vec![
        insn(LD_B_ABS, 0, 0, AD_PKTTYPE),
        insn(JGT_K, 6, 0, PACKET_MULTICAST as u32),
        insn(LD_H_ABS, 0, 0, 12),
        insn(JEQ_K, 0, 4, ETHERTYPE_ARP as u32),
        insn(LD_H_ABS, 0, 0, 20),
        insn(JEQ_K, 1, 0, 1),
        insn(JEQ_K, 0, 1, 2),
        insn(RET_K, 0, 0, ACCEPT),
        insn(RET_K, 0, 0, 0),
    ]
}

/// The BPF program of the NDP responder socket: packet type ≤ multicast, ethertype IPv6, next
/// header ICMPv6, ICMPv6 type 135 (NS) or 136 (NA, RFC 4861 §4.4; only for conflict detection).
pub fn ns_filter() -> Vec<Insn> {
    vec![
        insn(LD_B_ABS, 0, 0, AD_PKTTYPE),
        insn(JGT_K, 8, 0, PACKET_MULTICAST as u32),
        insn(LD_H_ABS, 0, 0, 12),
        insn(JEQ_K, 0, 6, ETHERTYPE_IPV6 as u32),
        insn(LD_B_ABS, 0, 0, OFFSET_NEXT_HEADER as u32),
        insn(JEQ_K, 0, 4, NEXT_HEADER_ICMPV6 as u32),
        insn(LD_B_ABS, 0, 0, OFFSET_ICMPV6_TYPE as u32),
        insn(JEQ_K, 1, 0, TYPE_NEIGHBOR_SOLICITATION as u32),
        insn(JEQ_K, 0, 1, TYPE_NEIGHBOR_ADVERTISEMENT as u32),
        insn(RET_K, 0, 0, ACCEPT),
        insn(RET_K, 0, 0, 0),
    ]
}

/// Packet type ≤ multicast, and optionally IPv6 next header = `next_header` (for clients).
pub fn host_only_filter(next_header: Option<u8>) -> Vec<Insn> {
    let mut p = vec![insn(LD_B_ABS, 0, 0, AD_PKTTYPE)];
    match next_header {
        None => p.push(insn(JGT_K, 1, 0, PACKET_MULTICAST as u32)),
        Some(nh) => {
            p.push(insn(JGT_K, 3, 0, PACKET_MULTICAST as u32));
            p.push(insn(LD_B_ABS, 0, 0, OFFSET_NEXT_HEADER as u32));
            p.push(insn(JEQ_K, 0, 1, u32::from(nh)));
        }
    }
    p.push(insn(RET_K, 0, 0, ACCEPT));
    p.push(insn(RET_K, 0, 0, 0));
    p
}

fn to_sock_filters(program: &[Insn]) -> Vec<SockFilter> {
    program
        .iter()
        .map(|i| SockFilter::new(i.code, i.jt, i.jf, i.k))
        .collect()
}

/// The link-layer socket address of interface `name` (from `getifaddrs`).
///
/// Errors: `NotFound` when no such interface has a link-layer address.
pub fn link_addr(name: &str) -> io::Result<LinkAddr> {
    nix::ifaddrs::getifaddrs()
        .map_err(io::Error::from)?
        .filter(|i| i.interface_name == name)
        .find_map(|i| i.address.and_then(|a| a.as_link_addr().copied()))
        .ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::NotFound,
                format!("interface {name} has no link-layer address"),
            )
        })
}

/// One frame from [`PacketSocket::recv`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Received {
    /// Bytes written to the buffer.
    pub len: usize,
    /// `sll_pkttype` (`PACKET_HOST` 0, `PACKET_BROADCAST` 1, `PACKET_MULTICAST` 2, …).
    pub pkttype: u8,
    /// `sll_ifindex`: the interface the kernel delivered the frame on (`None` if the kernel gave
    /// no address, which packet sockets always do).
    pub ifindex: Option<usize>,
}

impl Received {
    /// Whether the frame arrived on interface `bound` itself, not on a VLAN sub-interface or a
    /// bond/team master stacked on it (see [`PacketSocket::recv`]). A frame without an index is
    /// taken as ours.
    pub fn arrived_on(&self, bound: usize) -> bool {
        self.ifindex.is_none_or(|i| i == bound)
    }
}

/// A raw packet socket bound to one interface and one ethertype.
#[derive(Debug)]
pub struct PacketSocket {
    socket: Socket,
    ifindex: usize,
}

/// What a socket filter accepts, for [`PacketSocket::open`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Filter {
    /// [`arp_filter`] on an `ETH_P_ARP` socket (the responder: requests and replies).
    ResponderArp,
    /// [`ns_filter`] on an `ETH_P_IPV6` socket (the responder: solicitations and advertisements).
    ResponderNdp,
    /// Every ARP frame to this host (clients and probes).
    AllArp,
    /// ICMPv6 directly after IPv6 (clients and probes).
    AllIcmpv6,
}

impl PacketSocket {
    /// Open a packet socket on interface `name` for `filter`, in the calling thread's network
    /// namespace. `nonblocking` for use under `tokio::io::unix::AsyncFd`.
    ///
    /// Errors: the interface does not exist, no `CAP_NET_RAW`, or the kernel refused the filter.
    pub fn open(name: &str, filter: Filter, nonblocking: bool) -> io::Result<PacketSocket> {
        let link = link_addr(name)?;
        let (ethertype, program) = match filter {
            Filter::ResponderArp => (ETHERTYPE_ARP, arp_filter()),
            Filter::ResponderNdp => (ETHERTYPE_IPV6, ns_filter()),
            Filter::AllArp => (ETHERTYPE_ARP, host_only_filter(None)),
            Filter::AllIcmpv6 => (ETHERTYPE_IPV6, host_only_filter(Some(NEXT_HEADER_ICMPV6))),
        };
        let protocol = Protocol::from(i32::from(ethertype.to_be()));
        let socket = Socket::new(Domain::PACKET, Type::RAW, Some(protocol))?;
        // Filter before bind, so not one unfiltered frame is queued.
        socket.attach_filter(&to_sock_filters(&program))?;
        nix::sys::socket::bind(socket.as_raw_fd(), &link).map_err(io::Error::from)?;
        socket.set_nonblocking(nonblocking)?;
        Ok(PacketSocket {
            socket,
            ifindex: link.ifindex(),
        })
    }

    /// Receive one frame into `buf`: its length, packet type (`sll_pkttype`) and the index of
    /// the interface the kernel received it on (`sll_ifindex`). Frames we sent
    /// (`PACKET_OUTGOING`) are filtered in the kernel already.
    ///
    /// The interface index matters: a socket bound to `eth0` is also handed frames the kernel
    /// has already moved to an upper device — a VLAN sub-interface (`eth0.100`: the tag was
    /// stripped, `sll_ifindex` is the sub-interface's) or the bond `eth0` is a slave of — because
    /// `orig_dev` stays `eth0` (Linux `__netif_receive_skb_core`). Such a frame was not sent to
    /// `eth0`'s own link, and answering it from `eth0` would put an untagged reply, or a second
    /// MAC, on the wire; see [`Received::arrived_on`].
    pub fn recv(&self, buf: &mut [u8]) -> io::Result<Received> {
        let (len, from) = nix::sys::socket::recvfrom::<LinkAddr>(self.socket.as_raw_fd(), buf)
            .map_err(io::Error::from)?;
        Ok(Received {
            len,
            pkttype: from.map_or(0, |a| a.pkttype()),
            ifindex: from.map(|a| a.ifindex()),
        })
    }

    /// Send one whole Ethernet frame out of the bound interface.
    pub fn send(&self, frame: &[u8]) -> io::Result<usize> {
        nix::sys::socket::send(self.socket.as_raw_fd(), frame, MsgFlags::empty())
            .map_err(io::Error::from)
    }

    /// Set a receive timeout (blocking sockets only; `None` blocks forever).
    pub fn set_read_timeout(&self, timeout: Option<std::time::Duration>) -> io::Result<()> {
        self.socket.set_read_timeout(timeout)
    }

    /// The bound interface index.
    pub fn ifindex(&self) -> usize {
        self.ifindex
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.socket.as_raw_fd()
    }
}

impl PacketSocket {
    /// Register the (non-blocking) socket with the current Tokio reactor.
    ///
    /// Errors: no Tokio runtime with I/O enabled, or epoll refused the descriptor.
    pub fn into_async(self) -> io::Result<tokio::io::unix::AsyncFd<PacketSocket>> {
        // The crate's only `unsafe`: Tokio 1.54 deprecated the safe `AsyncFd::new` in favour of
        // the `unsafe fn register`, whose contract is that `as_raw_fd` returns the same open
        // descriptor for the whole life of the `AsyncFd`.
        // SAFETY: `PacketSocket` owns its `socket2::Socket`, never replaces or closes it, and
        // `as_raw_fd` always returns that socket's descriptor; it is closed only when the
        // `AsyncFd` (and with it the `PacketSocket`) is dropped.
        #[allow(unsafe_code)]
        let registered = unsafe { tokio::io::unix::AsyncFd::register(self) };
        registered.map_err(io::Error::from)
    }
}

impl AsFd for PacketSocket {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.socket.as_fd()
    }
}

/// What a refcount change asks of the kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MembershipChange {
    /// First user of the group: join it.
    Join,
    /// Last user gone: leave it.
    Leave,
    /// Refcount changed, nothing to do.
    None,
}

/// Refcounts of multicast groups (pure).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RefCounts {
    counts: BTreeMap<Ipv6Addr, usize>,
}

impl RefCounts {
    /// One more user of `group`.
    pub fn add(&mut self, group: Ipv6Addr) -> MembershipChange {
        let c = self.counts.entry(group).or_default();
        *c += 1;
        if *c == 1 {
            MembershipChange::Join
        } else {
            MembershipChange::None
        }
    }

    /// One user fewer of `group` (no-op if it had none).
    pub fn remove(&mut self, group: Ipv6Addr) -> MembershipChange {
        match self.counts.get_mut(&group) {
            Some(1) => {
                self.counts.remove(&group);
                MembershipChange::Leave
            }
            Some(c) => {
                *c -= 1;
                MembershipChange::None
            }
            None => MembershipChange::None,
        }
    }

    /// Groups with at least one user.
    pub fn groups(&self) -> impl Iterator<Item = &Ipv6Addr> {
        self.counts.keys()
    }
}

/// Groups joined per membership socket. Each join costs the socket option memory
/// (`net.core.optmem_max`, 20 KiB on older kernels ≈ 300 groups), so groups are spread over as
/// many sockets as needed.
pub const GROUPS_PER_SOCKET: usize = 128;

/// Refcounted solicited-node group memberships on one interface (see the module docs).
/// Dropping it leaves every group (the kernel does so when the sockets close).
#[derive(Debug)]
pub struct Memberships {
    ifindex: u32,
    counts: RefCounts,
    /// Membership sockets with the number of groups each has joined.
    sockets: Vec<(Socket, usize)>,
    /// Which socket joined each group.
    joined_on: BTreeMap<Ipv6Addr, usize>,
}

impl Memberships {
    /// Memberships for interface `ifindex` (sockets are opened on demand).
    pub fn new(ifindex: u32) -> Memberships {
        Memberships {
            ifindex,
            counts: RefCounts::default(),
            sockets: Vec::new(),
            joined_on: BTreeMap::new(),
        }
    }

    /// One more owned address in `group`; joins on the first.
    ///
    /// Errors: the kernel refused the join (the refcount is left unchanged, so a later call retries).
    pub fn add(&mut self, group: Ipv6Addr) -> io::Result<()> {
        if self.counts.add(group) != MembershipChange::Join {
            return Ok(());
        }
        let joined = self.join(group);
        if joined.is_err() {
            self.counts.remove(group);
        }
        joined
    }

    fn join(&mut self, group: Ipv6Addr) -> io::Result<()> {
        let index = match self
            .sockets
            .iter()
            .position(|(_, n)| *n < GROUPS_PER_SOCKET)
        {
            Some(i) => i,
            None => {
                self.sockets
                    .push((Socket::new(Domain::IPV6, Type::DGRAM, None)?, 0));
                self.sockets.len() - 1
            }
        };
        let (socket, count) = self
            .sockets
            .get_mut(index)
            .ok_or_else(|| io::Error::other("no membership socket"))?;
        socket.join_multicast_v6(&group, self.ifindex)?;
        *count += 1;
        self.joined_on.insert(group, index);
        Ok(())
    }

    /// One owned address fewer in `group`; leaves after the last.
    pub fn remove(&mut self, group: Ipv6Addr) -> io::Result<()> {
        if self.counts.remove(group) != MembershipChange::Leave {
            return Ok(());
        }
        let Some(index) = self.joined_on.remove(&group) else {
            return Ok(());
        };
        match self.sockets.get_mut(index) {
            Some((socket, count)) => {
                *count = count.saturating_sub(1);
                socket.leave_multicast_v6(&group, self.ifindex)
            }
            None => Ok(()),
        }
    }

    /// Number of groups joined.
    pub fn len(&self) -> usize {
        self.joined_on.len()
    }

    /// Whether no group is joined.
    pub fn is_empty(&self) -> bool {
        self.joined_on.is_empty()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use crate::wire::MacAddr;

    /// A frame the kernel delivered on a VLAN sub-interface or bond master stacked on the bound
    /// interface (another `sll_ifindex`) is not the bound interface's.
    #[test]
    fn frames_from_stacked_interfaces_are_not_ours() {
        let got = |ifindex| Received {
            len: 42,
            pkttype: 1,
            ifindex,
        };
        assert!(got(Some(2)).arrived_on(2));
        assert!(
            !got(Some(7)).arrived_on(2),
            "eth0.100 (7) stacked on eth0 (2)"
        );
        assert!(got(None).arrived_on(2));
    }
    use crate::wire::arp::{GratuitousForm, build_arp_request, build_gratuitous_arp};
    use crate::wire::ndp::{
        NeighborSolicitation, build_neighbor_solicitation, build_unsolicited_advertisement,
    };

    /// A minimal classic-BPF interpreter for the opcodes used above, to check the programs
    /// without a kernel (the integration tests check them with one). Out-of-bounds loads reject,
    /// as in the kernel.
    fn run(program: &[Insn], frame: &[u8], pkttype: u8) -> bool {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let i = program[pc];
            match i.code {
                LD_B_ABS if i.k == AD_PKTTYPE => a = u32::from(pkttype),
                LD_B_ABS => match frame.get(i.k as usize) {
                    Some(b) => a = u32::from(*b),
                    None => return false,
                },
                LD_H_ABS => match frame.get(i.k as usize..i.k as usize + 2) {
                    Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                    None => return false,
                },
                JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
                JGT_K => pc += usize::from(if a > i.k { i.jt } else { i.jf }),
                RET_K => return i.k != 0,
                other => panic!("opcode {other:#x}"),
            }
            pc += 1;
        }
    }

    const OURS: MacAddr = MacAddr(2, 0, 0, 0, 0, 1);
    const CLIENT: MacAddr = MacAddr(2, 0, 0, 0, 0, 2);

    fn ns_frame() -> Vec<u8> {
        let vip: Ipv6Addr = "2001:db8::100".parse().unwrap();
        let group = crate::wire::ndp::solicited_node_multicast(vip);
        build_neighbor_solicitation(&NeighborSolicitation {
            eth_dst: crate::wire::ndp::multicast_mac(group),
            eth_src: CLIENT,
            ip_src: "fe80::2".parse().unwrap(),
            ip_dst: group,
            target: vip,
            source_link_layer: Some(CLIENT),
        })
    }

    #[test]
    fn arp_program_passes_only_incoming_requests_and_replies() {
        let vip = "192.0.2.200".parse().unwrap();
        let req = build_arp_request(CLIENT, "192.0.2.10".parse().unwrap(), vip);
        assert!(run(&arp_filter(), &req, 1));
        assert!(run(&arp_filter(), &req, 0));
        assert!(!run(&arp_filter(), &req, PACKET_OUTGOING));
        assert!(!run(&arp_filter(), &req, 3)); // PACKET_OTHERHOST
        assert!(run(
            &arp_filter(),
            &build_gratuitous_arp(OURS, vip, GratuitousForm::Request),
            1
        ));
        // Replies too (conflict detection, issue #10 item 5), and nothing else.
        assert!(run(
            &arp_filter(),
            &build_gratuitous_arp(OURS, vip, GratuitousForm::Reply),
            1
        ));
        let mut rarp = req.clone();
        rarp[21] = 3;
        assert!(!run(&arp_filter(), &rarp, 1));
        assert!(!run(&arp_filter(), &ns_frame(), 2));
        assert!(!run(&arp_filter(), &req[..16], 1));
    }

    #[test]
    fn ns_program_passes_only_solicitations_and_advertisements() {
        assert!(run(&ns_filter(), &ns_frame(), 2));
        assert!(!run(&ns_filter(), &ns_frame(), PACKET_OUTGOING));
        let na = build_unsolicited_advertisement(
            OURS,
            "fe80::1".parse().unwrap(),
            "2001:db8::100".parse().unwrap(),
        );
        // Advertisements too (conflict detection, issue #10 item 5), not other ICMPv6.
        assert!(run(&ns_filter(), &na, 2));
        assert!(!run(&ns_filter(), &na, PACKET_OUTGOING));
        let mut echo = ns_frame();
        echo[OFFSET_ICMPV6_TYPE] = 128;
        assert!(!run(&ns_filter(), &echo, 2));
        let mut udp = ns_frame();
        udp[OFFSET_NEXT_HEADER] = 17;
        assert!(!run(&ns_filter(), &udp, 0));
        assert!(!run(
            &ns_filter(),
            &build_arp_request(
                CLIENT,
                "192.0.2.10".parse().unwrap(),
                "192.0.2.1".parse().unwrap()
            ),
            1
        ));
        assert!(!run(&ns_filter(), &ns_frame()[..40], 2));
        // The client program sees NAs, not UDP.
        assert!(run(&host_only_filter(Some(58)), &na, 2));
        assert!(!run(&host_only_filter(Some(58)), &udp, 0));
        assert!(run(&host_only_filter(None), &udp, 0));
    }

    #[test]
    fn refcounts_join_once_and_leave_last() {
        let g: Ipv6Addr = "ff02::1:ff00:100".parse().unwrap();
        let mut r = RefCounts::default();
        assert_eq!(r.add(g), MembershipChange::Join);
        assert_eq!(r.add(g), MembershipChange::None);
        assert_eq!(r.remove(g), MembershipChange::None);
        assert_eq!(r.remove(g), MembershipChange::Leave);
        assert_eq!(r.remove(g), MembershipChange::None);
        assert_eq!(r.groups().count(), 0);
    }
}
