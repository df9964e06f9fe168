//! Criterion benchmarks of the speaker's pure core: ARP/NDP parse and build, the per-frame
//! decision, and rendezvous election (10,000 IPs × 10 nodes).
//! Run: `cargo bench -p ferrolb-speaker --bench l2_core`.

#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use criterion::{Criterion, criterion_group, criterion_main};
use ferrolb_speaker::election::owner;
use ferrolb_speaker::l2::decide::{decide_arp, decide_ndp};
use ferrolb_speaker::wire::MacAddr;
use ferrolb_speaker::wire::arp::{build_arp_reply, build_arp_request, parse_arp};
use ferrolb_speaker::wire::ndp::{
    NeighborSolicitation, build_advertisement_for, build_neighbor_solicitation, multicast_mac,
    parse_ndp, solicited_node_multicast,
};

const OURS: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x01);
const CLIENT: MacAddr = MacAddr(0x02, 0, 0, 0, 0, 0x02);

fn wire(c: &mut Criterion) {
    let vip4 = Ipv4Addr::new(198, 51, 100, 10);
    let req = build_arp_request(CLIENT, Ipv4Addr::new(192, 0, 2, 20), vip4);
    let parsed = parse_arp(&req).unwrap();
    c.bench_function("arp/parse_request", |b| {
        b.iter(|| parse_arp(black_box(&req)))
    });
    c.bench_function("arp/build_reply", |b| {
        b.iter(|| build_arp_reply(OURS, vip4, black_box(&parsed)))
    });
    c.bench_function("arp/decide_owned", |b| {
        b.iter(|| decide_arp(black_box(&req), OURS, |ip| ip == vip4))
    });

    let vip6: Ipv6Addr = "2001:db8:0:8::100".parse().unwrap();
    let group = solicited_node_multicast(vip6);
    let ns = NeighborSolicitation {
        eth_dst: multicast_mac(group),
        eth_src: CLIENT,
        ip_src: "fe80::2".parse().unwrap(),
        ip_dst: group,
        target: vip6,
        source_link_layer: Some(CLIENT),
    };
    let frame = build_neighbor_solicitation(&ns);
    let ll: Ipv6Addr = "fe80::1".parse().unwrap();
    c.bench_function("ndp/parse_ns", |b| b.iter(|| parse_ndp(black_box(&frame))));
    c.bench_function("ndp/build_na", |b| {
        b.iter(|| build_advertisement_for(OURS, ll, black_box(&ns)))
    });
    c.bench_function("ndp/decide_owned", |b| {
        b.iter(|| decide_ndp(black_box(&frame), OURS, ll, |ip| ip == vip6))
    });
}

fn election(c: &mut Criterion) {
    let nodes: Vec<String> = (0..10).map(|i| format!("node-{i}")).collect();
    // 2001:db8::/32 (documentation range) + i.
    let ips: Vec<IpAddr> = (0..10_000u128)
        .map(|i| IpAddr::V6(Ipv6Addr::from(0x2001_0db8_u128 << 96 | i)))
        .collect();
    c.bench_function("election/10k_ips_x_10_nodes", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for ip in &ips {
                n += owner(*ip, nodes.iter().map(String::as_str)).map_or(0, str::len);
            }
            n
        })
    });
}

criterion_group!(benches, wire, election);
criterion_main!(benches);
