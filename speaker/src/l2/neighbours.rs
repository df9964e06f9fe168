//! The kernel's neighbour table (ARP cache and IPv6 neighbour cache), read with one rtnetlink
//! `RTM_GETNEIGH` dump (`netlink-packet-route` for the wire format, `netlink-sys` for the
//! socket). Used to tell which MAC belongs to which peer Node ([`super::peers`]): the speakers
//! exchange membership datagrams with every peer's InternalIP all the time, so the entries of
//! peers on the same segment are kept `REACHABLE`/`STALE` by the kernel itself.
//!
//! Blocking (one request, a few replies); call it from `spawn_blocking` in async code.

use std::io;
use std::net::IpAddr;

use netlink_packet_core::{
    NLM_F_DUMP, NLM_F_REQUEST, NetlinkHeader, NetlinkMessage, NetlinkPayload,
};
use netlink_packet_route::RouteNetlinkMessage;
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourMessage, NeighbourState,
};
use netlink_sys::{Socket, SocketAddr, protocols::NETLINK_ROUTE};

use crate::wire::MacAddr;

/// Longest dump read, in messages, before giving up (a table of this size is not a node's).
const MAX_MESSAGES: usize = 1 << 16;

/// A `recv` that waits longer than this ends the dump with an error (the kernel answers a dump
/// at once; a hung socket must not stop the refreshes for good).
const RECV_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// Every neighbour entry of the calling thread's network namespace, both families, all
/// interfaces, with a 6-byte link-layer address and a state that names a host that answered
/// (`REACHABLE`, `STALE`, `DELAY`, `PROBE`, `PERMANENT`); `INCOMPLETE`, `FAILED` and `NOARP`
/// entries are left out. Shape: `(IP, MAC)`, in the kernel's order, possibly several IPs per MAC.
///
/// A message that does not parse is skipped (counted nowhere: the entries of the others are
/// still good).
///
/// # Errors
/// The netlink socket could not be opened, the kernel answered with an error, or nothing came
/// within 2 s.
pub fn dump() -> io::Result<Vec<(IpAddr, MacAddr)>> {
    let mut socket = Socket::new(NETLINK_ROUTE)?;
    nix::sys::socket::setsockopt(
        &socket,
        nix::sys::socket::sockopt::ReceiveTimeout,
        &nix::sys::time::TimeVal::new(i64::try_from(RECV_TIMEOUT.as_secs()).unwrap_or(2), 0),
    )
    .map_err(io::Error::from)?;
    socket.bind_auto()?;
    socket.connect(&SocketAddr::new(0, 0))?;
    let mut header = NetlinkHeader::default();
    header.flags = NLM_F_DUMP | NLM_F_REQUEST;
    let mut request = NetlinkMessage::new(
        header,
        NetlinkPayload::from(RouteNetlinkMessage::GetNeighbour(
            NeighbourMessage::default(),
        )),
    );
    request.finalize();
    let mut buf = vec![0; request.buffer_len()];
    request.serialize(&mut buf);
    socket.send(&buf, 0)?;

    let mut out = Vec::new();
    let mut receive = vec![0u8; 64 * 1024];
    let mut messages = 0usize;
    loop {
        let size = socket.recv(&mut &mut receive[..], 0)?;
        let mut offset = 0;
        while offset < size {
            let bytes = receive.get(offset..size).unwrap_or_default();
            // The header's length field (first 4 bytes, host order) says where the next one
            // starts, parsed or not; messages are 4-byte aligned (NLMSG_ALIGN).
            let length = bytes
                .get(..4)
                .and_then(|b| <[u8; 4]>::try_from(b).ok())
                .map_or(0, |b| usize::try_from(u32::from_ne_bytes(b)).unwrap_or(0));
            messages += 1;
            if length == 0 || messages > MAX_MESSAGES {
                return Ok(out);
            }
            offset += length.next_multiple_of(4);
            let Ok(message) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) else {
                continue;
            };
            match message.payload {
                NetlinkPayload::Done(_) => return Ok(out),
                NetlinkPayload::Error(e) => {
                    return Err(io::Error::other(format!("RTM_GETNEIGH: {e:?}")));
                }
                NetlinkPayload::InnerMessage(RouteNetlinkMessage::NewNeighbour(entry)) => {
                    out.extend(entry_of(&entry));
                }
                _ => {}
            }
        }
    }
}

/// The `(IP, MAC)` of one entry, if it names a host that answered.
fn entry_of(entry: &NeighbourMessage) -> Option<(IpAddr, MacAddr)> {
    let usable = matches!(
        entry.header.state,
        NeighbourState::Reachable
            | NeighbourState::Stale
            | NeighbourState::Delay
            | NeighbourState::Probe
            | NeighbourState::Permanent
    );
    if !usable {
        return None;
    }
    let ip = entry.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => Some(IpAddr::V4(*v4)),
        NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => Some(IpAddr::V6(*v6)),
        _ => None,
    })?;
    let mac = entry.attributes.iter().find_map(|a| match a {
        NeighbourAttribute::LinkLayerAddress(b) => match b.as_slice() {
            [a, b, c, d, e, f] => Some(MacAddr(*a, *b, *c, *d, *e, *f)),
            _ => None,
        },
        _ => None,
    })?;
    Some((ip, mac))
}
