//! Writes the seed inputs of the fuzz targets (issue #27 item 13) into `fuzz/corpus/<target>/`:
//! valid frames, datagrams and pools built with ferrolb's own builders, so that the fuzzer
//! starts from inputs that pass the first checks instead of discovering the formats byte by
//! byte. File names are `seed-<what>`; existing files are overwritten, others left alone.
//!
//! ```text
//! cargo run --manifest-path fuzz/Cargo.toml --example seeds
//! ```

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;
use std::sync::Arc;

use ferrolb_fuzz::{WALL_MS, clock_at, fuzz_ring, local_identity, peer_addr, peer_identity, step};
use ferrolb_l2::membership::envelope::{MAGIC, OVERHEAD, Opener, VERSION};
use ferrolb_l2::membership::{Counters, MembershipConfig, MembershipCore};
use ferrolb_l2::wire::MacAddr;
use ferrolb_l2::wire::arp::{
    GratuitousForm, build_arp_reply, build_arp_request, build_gratuitous_arp, parse_arp,
};
use ferrolb_l2::wire::claim_proof::{ClaimKeys, append_to_arp, ndp_option};
use ferrolb_l2::wire::ndp::{
    NeighborSolicitation, append_option, build_advertisement_for, build_dad_probe,
    build_neighbor_solicitation, build_unsolicited_advertisement, multicast_mac,
    solicited_node_multicast,
};

const MAC: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x0a);
const OTHER: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x0b);

fn main() -> std::io::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let write = |target: &str, name: &str, bytes: &[u8]| -> std::io::Result<()> {
        let dir = root.join(target);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(format!("seed-{name}")), bytes)
    };
    let keys = ClaimKeys::from_ring(&fuzz_ring());

    // ARP: requests, replies, probes, both gratuitous forms, with and without a claim proof,
    // padded to Ethernet's 60 bytes as received.
    let ip = Ipv4Addr::new(198, 51, 100, 10);
    let request = build_arp_request(OTHER, Ipv4Addr::new(198, 51, 100, 1), ip);
    let parsed = parse_arp(&request).map_err(std::io::Error::other)?;
    write("arp", "request", &request)?;
    write("arp", "reply", &build_arp_reply(MAC, ip, &parsed))?;
    write(
        "arp",
        "probe",
        &build_arp_request(OTHER, Ipv4Addr::UNSPECIFIED, ip),
    )?;
    for (name, form) in [
        ("garp-request", GratuitousForm::Request),
        ("garp-reply", GratuitousForm::Reply),
    ] {
        let mut frame = build_gratuitous_arp(MAC, ip, form);
        write("arp", name, &frame)?;
        append_to_arp(&mut frame, &keys.sign(MAC, IpAddr::V4(ip), WALL_MS));
        write("arp", &format!("{name}-proof"), &frame)?;
    }
    let mut padded = request.clone();
    padded.resize(60, 0);
    write("arp", "request-padded", &padded)?;

    // NDP: a DAD probe, multicast and unicast solicitations, solicited and unsolicited
    // advertisements, one with a claim proof option.
    let target: Ipv6Addr = "2001:db8::10".parse().map_err(std::io::Error::other)?;
    let link_local: Ipv6Addr = "fe80::2".parse().map_err(std::io::Error::other)?;
    let solicitor: Ipv6Addr = "fe80::3".parse().map_err(std::io::Error::other)?;
    write("ndp", "dad", &build_dad_probe(OTHER, target))?;
    let group = solicited_node_multicast(target);
    let multicast_ns = NeighborSolicitation {
        eth_dst: multicast_mac(group),
        eth_src: OTHER,
        ip_src: solicitor,
        ip_dst: group,
        target,
        source_link_layer: Some(OTHER),
    };
    write(
        "ndp",
        "ns-multicast",
        &build_neighbor_solicitation(&multicast_ns),
    )?;
    let unicast_ns = NeighborSolicitation {
        eth_dst: MAC,
        ip_dst: target,
        source_link_layer: None,
        ..multicast_ns
    };
    write(
        "ndp",
        "ns-unicast",
        &build_neighbor_solicitation(&unicast_ns),
    )?;
    write(
        "ndp",
        "na-solicited",
        &build_advertisement_for(MAC, link_local, &multicast_ns),
    )?;
    let mut unsolicited = build_unsolicited_advertisement(MAC, link_local, target);
    write("ndp", "na-unsolicited", &unsolicited)?;
    let proof = keys.sign(MAC, IpAddr::V6(target), WALL_MS);
    if append_option(&mut unsolicited, &ndp_option(&proof)) {
        write("ndp", "na-unsolicited-proof", &unsolicited)?;
    }

    // Membership: what node-b sends node-a while they meet and run for a few seconds, as
    // plaintexts (sealed again by the target), with the ticks between them; and raw datagrams
    // that pass the framing check without the key.
    let mut script = Vec::new();
    let record = |script: &mut Vec<u8>, kind: u8, bytes: &[u8], len: u16| {
        script.push(kind);
        script.extend_from_slice(&len.to_be_bytes());
        script.extend_from_slice(bytes);
    };
    let config = MembershipConfig::default();
    let counters = || Arc::new(Counters::default());
    let new =
        |id, seed| MembershipCore::with_seed(id, config.clone(), &fuzz_ring(), counters(), seed);
    let mut a = new(local_identity(), 7).map_err(std::io::Error::other)?;
    let mut b = new(peer_identity(), 8).map_err(std::io::Error::other)?;
    let opener = Opener::new(&fuzz_ring());
    let mut now = 0u64;
    a.set_peers([peer_addr(2)], clock_at(now));
    b.set_peers([peer_addr(1)], clock_at(now));
    for round in 0..40 {
        for _ in 0..10 {
            let (from_a, from_b) = (a.take_outgoing(), b.take_outgoing());
            if from_a.is_empty() && from_b.is_empty() {
                break;
            }
            for out in from_a.into_iter().filter(|o| o.to == peer_addr(2)) {
                let _ = b.handle_datagram(&out.datagram, peer_addr(1), clock_at(now));
            }
            for out in from_b.into_iter().filter(|o| o.to == peer_addr(1)) {
                if let Ok(opened) = opener.open(&out.datagram) {
                    let len = u16::try_from(opened.payload.len()).map_err(std::io::Error::other)?;
                    record(&mut script, step::SEALED, &opened.payload, len);
                }
                let _ = a.handle_datagram(&out.datagram, peer_addr(2), clock_at(now));
            }
        }
        if round == 3 {
            write("membership", "meet", &script)?;
        }
        now += 100;
        record(&mut script, step::TICK, &[], 100);
        a.handle_timers(clock_at(now));
        b.handle_timers(clock_at(now));
    }
    write("membership", "meet-and-run", &script)?;
    let mut keyless = vec![0u8; OVERHEAD + 40];
    keyless[..4].copy_from_slice(&MAGIC);
    keyless[4] = VERSION;
    let mut raw = Vec::new();
    let len = u16::try_from(keyless.len()).map_err(std::io::Error::other)?;
    record(&mut raw, step::RAW, &keyless, len);
    write("membership", "keyless", &raw)?;

    // Pools: the shapes of docs/configuration.md and the edge cases of the parser.
    let pools: [(&str, u8, &str); 8] = [
        ("v4-cidr", 0, "198.51.100.0/24"),
        ("v4-range-buggy", 1, "198.51.100.250-198.51.101.5"),
        ("dual", 0, "198.51.100.0/30\n2001:db8::/120"),
        ("v6-huge", 1, "2001:db8::/32\n2001:db8::/64"),
        (
            "overlap",
            1,
            "198.51.100.0/24\n198.51.100.128/25\n198.51.101.0-198.51.101.0",
        ),
        ("slash32", 0, "203.0.113.7/32\n203.0.113.8/31"),
        ("forbidden", 0, "127.0.0.1/32\n198.51.100.0/24"),
        (
            "malformed",
            0,
            "198.51.100.0/24\n198.51.100.20-198.51.100.10",
        ),
    ];
    for (name, flags, text) in pools {
        let mut bytes = vec![flags];
        bytes.extend_from_slice(text.as_bytes());
        write("pool", name, &bytes)?;
    }
    Ok(())
}
