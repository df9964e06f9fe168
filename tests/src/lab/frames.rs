//! Raw ARP frames as they cross one interface, with their 802.1Q tag (issue #30, the VM lab's
//! VLAN and bond tests).
//!
//! A receiving kernel takes the 802.1Q header out of a frame before any packet socket sees it
//! (`skb_vlan_untag` in `__netif_receive_skb_core`): the VLAN ID travels beside the data, not in
//! it. Reading it from user space takes `PACKET_AUXDATA` (a socket option neither `nix` nor
//! `socket2` offers without `unsafe`) — or a socket filter: classic BPF can load the tag's
//! ancillary fields (`SKF_AD_VLAN_TAG_PRESENT`, `SKF_AD_VLAN_TAG`). A [`WireCapture`] opens one
//! `ETH_P_ALL` socket per VLAN it is asked about, each with a filter that passes only ARP frames
//! of that VLAN (or only untagged ones), so which socket a frame came from says how it was
//! tagged on the wire.
//!
//! The sockets see every frame that arrives on the interface — addressed to this host or not
//! (`PACKET_OTHERHOST`: a bridge port sees unicast frames for other hosts) — but not the frames
//! the interface sends (`PACKET_OUTGOING`), and only frames of the interface itself: a frame the
//! kernel later hands to a VLAN sub-interface or a bond stacked on it is recorded once, here, as
//! it came in (`ETH_P_ALL` taps run before the kernel moves it up).

use std::io;
use std::net::Ipv4Addr;
use std::os::fd::{AsFd, AsRawFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context;
use ferrolb_speaker::wire::arp::{ArpOp, parse_arp};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::socket::LinkAddr;
use socket2::{Domain, Protocol, SockFilter, Socket, Type};

use super::within_netns;

/// One ARP frame seen on the wire.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WireArp {
    /// When it was seen, since the capture opened.
    pub at: Duration,
    /// When it was seen.
    pub seen_at: Instant,
    /// Its 802.1Q VLAN ID, `None` when it came untagged.
    pub vlan: Option<u16>,
    /// Ethernet source (lowercase).
    pub eth_src: String,
    /// Ethernet destination (lowercase).
    pub eth_dst: String,
    /// A reply (else a request).
    pub reply: bool,
    /// `ar$sha` (lowercase).
    pub sender_mac: String,
    /// `ar$spa`.
    pub sender_ip: Ipv4Addr,
    /// `ar$tpa`.
    pub target_ip: Ipv4Addr,
}

impl WireArp {
    /// Whether the frame says `ip` is at its sender MAC: a reply from `ip` or a gratuitous ARP
    /// (either form) for it.
    pub fn claims(&self, ip: Ipv4Addr) -> bool {
        self.sender_ip == ip && (self.reply || self.target_ip == ip)
    }

    /// Whether it is a gratuitous ARP (sender IP = target IP).
    pub fn gratuitous(&self) -> bool {
        self.sender_ip == self.target_ip && !self.sender_ip.is_unspecified()
    }
}

// Classic BPF (linux/filter.h).
const LD_W_ABS: u16 = 0x20;
const LD_H_ABS: u16 = 0x28;
const LD_B_ABS: u16 = 0x30;
const AND_K: u16 = 0x54;
const JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
const SKF_AD_OFF: u32 = 0xffff_f000;
const AD_PKTTYPE: u32 = SKF_AD_OFF + 4;
const AD_VLAN_TAG: u32 = SKF_AD_OFF + 44;
const AD_VLAN_TAG_PRESENT: u32 = SKF_AD_OFF + 48;
const PACKET_OUTGOING: u32 = 4;
const ETH_P_ALL: u16 = 0x0003;
const ETHERTYPE_ARP: u32 = 0x0806;
const ACCEPT: u32 = 0xffff;

/// One classic BPF instruction: `(code, jt, jf, k)`.
type Insn = (u16, u8, u8, u32);

/// The program of one VLAN's socket: not sent by us, tagged with `vlan` (or untagged for
/// `None`), ARP (the ethertype at offset 12 once the tag is out of the data). Every test that
/// fails jumps to the final reject.
pub fn vlan_arp_program(vlan: Option<u16>) -> Vec<Insn> {
    // `None` in a jump: "to the reject at the end", resolved below.
    let mut p: Vec<(u16, Option<u8>, Option<u8>, u32)> = vec![
        (LD_B_ABS, Some(0), Some(0), AD_PKTTYPE),
        (JEQ_K, None, Some(0), PACKET_OUTGOING),
        (LD_W_ABS, Some(0), Some(0), AD_VLAN_TAG_PRESENT),
    ];
    match vlan {
        None => p.push((JEQ_K, Some(0), None, 0)),
        Some(vid) => {
            p.push((JEQ_K, Some(0), None, 1));
            p.push((LD_W_ABS, Some(0), Some(0), AD_VLAN_TAG));
            p.push((AND_K, Some(0), Some(0), 0x0fff));
            p.push((JEQ_K, Some(0), None, u32::from(vid)));
        }
    }
    p.push((LD_H_ABS, Some(0), Some(0), 12));
    p.push((JEQ_K, Some(0), None, ETHERTYPE_ARP));
    p.push((RET_K, Some(0), Some(0), ACCEPT));
    p.push((RET_K, Some(0), Some(0), 0));
    let reject = p.len() - 1;
    p.iter()
        .enumerate()
        .map(|(i, (code, jt, jf, k))| {
            let to_reject = u8::try_from(reject.saturating_sub(i + 1)).unwrap_or(u8::MAX);
            (*code, jt.unwrap_or(to_reject), jf.unwrap_or(to_reject), *k)
        })
        .collect()
}

fn vlan_arp_filter(vlan: Option<u16>) -> Vec<SockFilter> {
    vlan_arp_program(vlan)
        .into_iter()
        .map(|(code, jt, jf, k)| SockFilter::new(code, jt, jf, k))
        .collect()
}

/// Raw sockets on one interface, one per VLAN asked about (see the module docs).
pub struct WireCapture {
    ifindex: usize,
    sockets: Vec<(Option<u16>, Socket)>,
    opened: Instant,
}

impl WireCapture {
    /// Opens the sockets on `interface` of the calling thread's network namespace, one per entry
    /// of `vlans` (`None` = untagged frames).
    ///
    /// # Errors
    /// No such interface, no `CAP_NET_RAW`, or the kernel refused a filter.
    pub fn open(interface: &str, vlans: &[Option<u16>]) -> anyhow::Result<WireCapture> {
        let link = ferrolb_speaker::l2::socket::link_addr(interface)?;
        let mut sockets = Vec::new();
        for vlan in vlans {
            let protocol = Protocol::from(i32::from(ETH_P_ALL.to_be()));
            let socket = Socket::new(Domain::PACKET, Type::RAW, Some(protocol))?;
            socket
                .attach_filter(&vlan_arp_filter(*vlan))
                .with_context(|| format!("the filter of VLAN {vlan:?}"))?;
            nix::sys::socket::bind(socket.as_raw_fd(), &link)?;
            socket.set_nonblocking(true)?;
            sockets.push((*vlan, socket));
        }
        let capture = WireCapture {
            ifindex: link.ifindex(),
            sockets,
            opened: Instant::now(),
        };
        // Frames of other interfaces queued between socket() and bind().
        capture.read_queued();
        Ok(capture)
    }

    /// The ARP frames queued now, without waiting.
    pub fn read_queued(&self) -> Vec<WireArp> {
        let mut out = Vec::new();
        let mut buf = [0u8; 1600];
        for (vlan, socket) in &self.sockets {
            while let Ok((n, from)) =
                nix::sys::socket::recvfrom::<LinkAddr>(socket.as_raw_fd(), &mut buf)
            {
                if from.is_some_and(|a| a.ifindex() != self.ifindex) {
                    continue;
                }
                let Ok(m) = parse_arp(buf.get(..n).unwrap_or_default()) else {
                    continue;
                };
                out.push(WireArp {
                    at: self.opened.elapsed(),
                    seen_at: Instant::now(),
                    vlan: *vlan,
                    eth_src: m.eth_src.to_string(),
                    eth_dst: m.eth_dst.to_string(),
                    reply: m.op == ArpOp::Reply,
                    sender_mac: m.sender_mac.to_string(),
                    sender_ip: m.sender_ip,
                    target_ip: m.target_ip,
                });
            }
        }
        out
    }

    /// Records every ARP frame for `duration`, or until `stop` is set (checked every 200 ms).
    ///
    /// # Errors
    /// `poll` failed.
    pub fn listen(&self, duration: Duration, stop: &AtomicBool) -> io::Result<Vec<WireArp>> {
        let deadline = Instant::now() + duration;
        let mut seen = self.read_queued();
        loop {
            let now = Instant::now();
            if now >= deadline || stop.load(Ordering::Relaxed) {
                seen.extend(self.read_queued());
                seen.sort_by_key(|w| w.at);
                return Ok(seen);
            }
            let wait = u16::try_from((deadline - now).as_millis().clamp(1, 200)).unwrap_or(200);
            let mut fds: Vec<PollFd<'_>> = self
                .sockets
                .iter()
                .map(|(_, s)| PollFd::new(s.as_fd(), PollFlags::POLLIN))
                .collect();
            match poll(&mut fds, PollTimeout::from(wait)) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(e.into()),
            }
            seen.extend(self.read_queued());
        }
    }
}

/// A background capture started by [`WireCaptures::start`], named for reports.
struct NamedCapture {
    name: String,
    handle: tokio::task::JoinHandle<anyhow::Result<Vec<WireArp>>>,
}

/// Captures on several interfaces (of any namespaces) that run in the background together,
/// until [`WireCaptures::finish`] or at most the duration they were started with.
pub struct WireCaptures {
    captures: Vec<NamedCapture>,
    stop: Arc<AtomicBool>,
}

impl WireCaptures {
    /// Starts a [`WireCapture`] for `vlans` on each `(netns, interface)` of `at`, for at most
    /// `duration`, and returns once every one is open.
    ///
    /// # Errors
    /// A capture could not be opened.
    pub async fn start(
        at: &[(&str, &str)],
        vlans: &[Option<u16>],
        duration: Duration,
    ) -> anyhow::Result<WireCaptures> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut captures = Vec::new();
        for (netns, interface) in at {
            let (opened_tx, opened) = tokio::sync::oneshot::channel();
            let (netns, interface, vlans, stop) = (
                (*netns).to_owned(),
                (*interface).to_owned(),
                vlans.to_vec(),
                stop.clone(),
            );
            let name = format!("{netns}/{interface}");
            let handle = tokio::task::spawn_blocking(move || {
                within_netns(&netns, move || {
                    let capture = WireCapture::open(&interface, &vlans)?;
                    let _ = opened_tx.send(());
                    Ok(capture.listen(duration, &stop)?)
                })
            });
            if opened.await.is_err() {
                // The thread ended before opening: its error is in the handle.
                handle.await??;
                anyhow::bail!("the capture on {name} ended before it opened");
            }
            captures.push(NamedCapture { name, handle });
        }
        Ok(WireCaptures { captures, stop })
    }

    /// Stops every capture and returns each one's frames with its name (`netns/interface`), in
    /// the order they were started.
    ///
    /// # Errors
    /// A capture failed.
    pub async fn finish(mut self) -> anyhow::Result<Vec<(String, Vec<WireArp>)>> {
        self.stop.store(true, Ordering::Relaxed);
        let mut out = Vec::new();
        for c in std::mem::take(&mut self.captures) {
            out.push((c.name, c.handle.await??));
        }
        Ok(out)
    }
}

impl Drop for WireCaptures {
    /// Stops the captures that were not finished (a test that failed before it read them): their
    /// threads end within one poll instead of holding the runtime's shutdown for their whole
    /// duration.
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

/// From a thread inside namespace `netns`: opens a [`WireCapture`] on `wire_interface` (for
/// `vlans`) and the lab's probe client on `probe_interface`, broadcasts an ARP request for `ip`
/// from the latter (with its first IPv4 address as sender), and listens on both for `listen`.
/// Returns what the probe client saw (on its own interface) and the frames on the wire.
///
/// # Errors
/// The sockets could not be opened or the request not sent.
pub async fn probe_on_the_wire(
    netns: &str,
    probe_interface: &str,
    wire_interface: &str,
    vlans: &[Option<u16>],
    ip: Ipv4Addr,
    listen: Duration,
) -> anyhow::Result<(Vec<super::Seen>, Vec<WireArp>)> {
    let (netns, probe_interface, wire_interface, vlans) = (
        netns.to_owned(),
        probe_interface.to_owned(),
        wire_interface.to_owned(),
        vlans.to_vec(),
    );
    tokio::task::spawn_blocking(move || {
        within_netns(&netns, move || {
            let wire = WireCapture::open(&wire_interface, &vlans)?;
            let client = ferrolb_speaker::l2::capture::Client::open(&probe_interface)?;
            client.drain();
            client.send_arp_request(ip, None)?;
            let seen = client.listen(listen, |_| false)?;
            let mut frames = wire.read_queued();
            frames.sort_by_key(|w| w.at);
            Ok((seen, frames))
        })
    })
    .await?
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A classic-BPF interpreter for the opcodes above (as the speaker's socket tests have one):
    /// `tag` is the frame's VLAN tag as the kernel holds it beside the data.
    fn run(program: &[Insn], frame: &[u8], pkttype: u8, tag: Option<u16>) -> bool {
        let (mut pc, mut a) = (0usize, 0u32);
        loop {
            let (code, jt, jf, k) = program[pc];
            match (code, k) {
                (LD_B_ABS, AD_PKTTYPE) => a = u32::from(pkttype),
                (LD_W_ABS, AD_VLAN_TAG_PRESENT) => a = u32::from(tag.is_some()),
                (LD_W_ABS, AD_VLAN_TAG) => a = u32::from(tag.unwrap_or(0)),
                (LD_H_ABS, k) => match frame.get(k as usize..k as usize + 2) {
                    Some(b) => a = u32::from(u16::from_be_bytes([b[0], b[1]])),
                    None => return false,
                },
                (AND_K, k) => a &= k,
                (JEQ_K, k) => pc += usize::from(if a == k { jt } else { jf }),
                (RET_K, k) => return k != 0,
                other => panic!("instruction {other:?}"),
            }
            pc += 1;
        }
    }

    #[test]
    fn each_socket_takes_the_arp_frames_of_its_own_vlan_only() {
        let arp = ferrolb_speaker::wire::arp::build_arp_request(
            ferrolb_speaker::wire::MacAddr(2, 0, 0, 0, 0, 2),
            Ipv4Addr::new(192, 0, 2, 100),
            Ipv4Addr::new(198, 51, 100, 70),
        );
        let mut ipv4 = arp.clone();
        ipv4[12..14].copy_from_slice(&[0x08, 0x00]);
        let untagged = vlan_arp_program(None);
        let vlan100 = vlan_arp_program(Some(100));
        assert!(run(&untagged, &arp, 1, None));
        assert!(!run(&untagged, &arp, 1, Some(100)));
        assert!(!run(&untagged, &arp, PACKET_OUTGOING as u8, None));
        assert!(!run(&untagged, &ipv4, 1, None));
        assert!(run(&vlan100, &arp, 0, Some(100)));
        // Priority bits do not matter, another VID does.
        assert!(run(&vlan100, &arp, 3, Some(0x6000 | 100)));
        assert!(!run(&vlan100, &arp, 1, Some(200)));
        assert!(!run(&vlan100, &arp, 1, None));
        assert!(!run(&vlan100, &arp, PACKET_OUTGOING as u8, Some(100)));
        assert!(!run(&vlan100, &ipv4, 1, Some(100)));
    }
}
