//! A multicast querier the test controls (issue #10 item 2): MLDv2 general queries (RFC 3810
//! §5.1) sent from the LAN bridge's own interface, so an MLD-snooping bridge keeps refreshing the
//! memberships its ports report. The bridge's built-in querier was not seen querying reliably in
//! this lab; queries sent from `br0` itself are forwarded to every port even with `mcast_flood`
//! off (the bridge exempts its own frames), which keeps the snooping strict.
//!
//! The frame is built here by hand (test tooling; `pnet_packet` has no MLD builder):
//! Ethernet to `33:33:00:00:00:01`, IPv6 from the bridge's link-local address to `ff02::1` with
//! hop limit 1 and a Hop-by-Hop Router Alert option (RFC 2711, required by RFC 3810 §5), ICMPv6
//! type 130 with a 100 ms Maximum Response Code ([`MAX_RESPONSE`]), no sources.
//!
//! The Maximum Response Delay must stay well below the query interval: Linux answers a general
//! query after a random delay below it and *restarts* that delay on every new query
//! (`mld_gq_start_work` uses `mod_delayed_work`), so with a 1 s delay and queries every 500 ms a
//! host's report was postponed again and again, and a port's memberships expired with the host
//! still joined (seen once in CI: every group of one port gone at once).

use std::net::Ipv6Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ferrolb_speaker::wire::MacAddr;
use ferrolb_speaker::wire::ndp::{ALL_NODES, icmpv6_checksum, multicast_mac};

/// The Maximum Response Delay every query carries (RFC 3810 §5.1.3; below 32768 ms the code is
/// the delay in milliseconds).
pub const MAX_RESPONSE: Duration = Duration::from_millis(100);

/// An MLDv2 general query from (`mac`, `source`) — `source` must be link-local (RFC 3810 §5).
pub fn general_query(mac: MacAddr, source: Ipv6Addr) -> Vec<u8> {
    let mut icmp = vec![130u8, 0, 0, 0];
    let code = u16::try_from(MAX_RESPONSE.as_millis()).unwrap_or(u16::MAX);
    icmp.extend_from_slice(&code.to_be_bytes()); // Maximum Response Code
    icmp.extend_from_slice(&[0, 0]); // reserved
    icmp.extend_from_slice(&Ipv6Addr::UNSPECIFIED.octets()); // general query
    icmp.extend_from_slice(&[2, 1, 0, 0]); // S=0 QRV=2, QQIC=1 s, no sources
    let checksum = icmpv6_checksum(source, ALL_NODES, &icmp);
    icmp[2..4].copy_from_slice(&checksum.to_be_bytes());
    // Hop-by-Hop: next header ICMPv6, length 0, Router Alert (MLD), PadN(0).
    let mut payload = vec![58u8, 0, 5, 2, 0, 0, 1, 0];
    payload.extend_from_slice(&icmp);
    let mut frame = Vec::with_capacity(14 + 40 + payload.len());
    frame.extend_from_slice(&multicast_mac(ALL_NODES).octets());
    frame.extend_from_slice(&mac.octets());
    frame.extend_from_slice(&[0x86, 0xdd]);
    frame.extend_from_slice(&[0x60, 0, 0, 0]);
    frame.extend_from_slice(&u16::try_from(payload.len()).unwrap_or(0).to_be_bytes());
    frame.extend_from_slice(&[0, 1]); // next header Hop-by-Hop, hop limit 1
    frame.extend_from_slice(&source.octets());
    frame.extend_from_slice(&ALL_NODES.octets());
    frame.extend_from_slice(&payload);
    frame
}

/// Sends general queries from `interface` of `netns` every `every` until dropped.
pub struct Querier {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<anyhow::Result<u64>>>,
}

impl Querier {
    /// Starts querying from `interface` (it needs a MAC and a link-local address) in `netns`.
    ///
    /// # Panics
    /// `every` is not at least twice [`MAX_RESPONSE`] (hosts would keep postponing their
    /// reports; see the module docs).
    pub fn start(netns: &str, interface: &str, every: Duration) -> Querier {
        assert!(
            every >= 2 * MAX_RESPONSE,
            "query interval {every:?} too short for a {MAX_RESPONSE:?} response delay"
        );
        let stop = Arc::new(AtomicBool::new(false));
        let (netns, interface, flag) = (netns.to_owned(), interface.to_owned(), stop.clone());
        let thread = std::thread::spawn(move || {
            super::within_netns(&netns, move || {
                let c = ferrolb_speaker::l2::capture::Client::open(&interface)?;
                let source = c
                    .info()
                    .link_local
                    .ok_or_else(|| anyhow::anyhow!("{interface} has no link-local address"))?;
                let frame = general_query(c.mac(), source);
                let mut sent = 0u64;
                while !flag.load(Ordering::Relaxed) {
                    c.send_frame(&frame)?;
                    sent += 1;
                    std::thread::sleep(every);
                }
                Ok(sent)
            })
        });
        Querier {
            stop,
            thread: Some(thread),
        }
    }

    /// Stops querying; returns how many queries were sent.
    ///
    /// # Errors
    /// The querier could not open its socket or send.
    pub fn stop(mut self) -> anyhow::Result<u64> {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(result)) => result,
            Some(Err(_)) => Err(anyhow::anyhow!("querier thread panicked")),
            None => Ok(0),
        }
    }
}

impl Drop for Querier {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_query_is_well_formed() {
        let src: Ipv6Addr = "fe80::1".parse().unwrap_or(Ipv6Addr::UNSPECIFIED);
        let frame = general_query(MacAddr(2, 0, 0, 0, 0, 1), src);
        assert_eq!(frame.len(), 14 + 40 + 8 + 28);
        assert_eq!(&frame[0..6], &[0x33, 0x33, 0, 0, 0, 1]);
        assert_eq!(&frame[12..14], &[0x86, 0xdd]);
        assert_eq!((frame[20], frame[21]), (0, 1), "Hop-by-Hop, hop limit 1");
        assert_eq!(&frame[38..54], &ALL_NODES.octets());
        assert_eq!(&frame[54..62], &[58, 0, 5, 2, 0, 0, 1, 0], "Router Alert");
        let icmp = &frame[62..];
        assert_eq!(icmp[0], 130);
        assert_eq!(
            u16::from_be_bytes([icmp[4], icmp[5]]),
            100,
            "Maximum Response Code"
        );
        // The checksum (which skips its own field) matches the stored one.
        let stored = u16::from_be_bytes([icmp[2], icmp[3]]);
        assert_eq!(icmpv6_checksum(src, ALL_NODES, icmp), stored);
        assert_ne!(stored, 0);
    }
}
