//! Allocator benchmarks (R12): allocate/release 100k addresses in a /16 and in a /64, and the
//! start-up rebuild of 10k existing assignments.
#![allow(missing_docs, clippy::unwrap_used)]

use std::hint::black_box;
use std::net::IpAddr;

use criterion::{BatchSize, Criterion, criterion_group, criterion_main};
use ferrolb_controller::ipam::free_set::FreeSet;
use ferrolb_controller::ipam::{Ipam, ObservedStatus, PoolConfig, ServiceKey, ServiceRequest};
use ferrolb_crds::addresses::{AddressEntry, Family};

fn free_set(cidr: &str) -> FreeSet {
    let e = AddressEntry::parse(cidr).unwrap();
    let mut f = FreeSet::new(e.range.family(), false);
    f.insert_range(e.usable());
    f
}

/// 100k allocations then 100k releases (in allocation order, so intervals split and merge).
fn alloc_release(c: &mut Criterion) {
    let mut g = c.benchmark_group("alloc_release_100k");
    g.sample_size(10);
    // A /16 holds 65,534 usable addresses: allocate 50k, then 50k rounds of release-one +
    // allocate-lowest (100k allocations, 50k releases), then release the rest.
    g.bench_function("ipv4_slash16", |b| {
        b.iter_batched(
            || free_set("198.51.0.0/16"),
            |mut f| {
                let mut held: Vec<u128> = (0..50_000).map(|_| f.take_lowest().unwrap()).collect();
                for i in 0..50_000usize {
                    let idx = (i * 7919) % held.len();
                    f.insert(held[idx]);
                    held[idx] = f.take_lowest().unwrap();
                }
                for o in held {
                    f.insert(o);
                }
                black_box(f.interval_count())
            },
            BatchSize::SmallInput,
        )
    });
    g.bench_function("ipv6_slash64", |b| {
        b.iter_batched(
            || free_set("2001:db8:0:3::/64"),
            |mut f| {
                let held: Vec<u128> = (0..100_000).map(|_| f.take_lowest().unwrap()).collect();
                for o in held.iter().step_by(2).chain(held.iter().skip(1).step_by(2)) {
                    f.insert(*o);
                }
                black_box(f.interval_count())
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

fn service(i: u32, status: Option<IpAddr>) -> ServiceRequest {
    ServiceRequest {
        key: ServiceKey::new(format!("ns{}", i % 50), format!("svc-{i}")),
        created: i64::from(i),
        families: vec![Family::V4],
        ports: [("TCP".to_string(), 80)].into(),
        observed: status
            .map(|ip| ObservedStatus::of(&[ip]))
            .unwrap_or_default(),
        ..Default::default()
    }
}

/// Start-up: 10k Services carrying their status are adopted (R1), and 10k fresh ones allocated.
fn rebuild(c: &mut Criterion) {
    let base = u32::from(std::net::Ipv4Addr::new(198, 51, 0, 1));
    let with_status: Vec<ServiceRequest> = (0..10_000u32)
        .map(|i| service(i, Some(IpAddr::V4(std::net::Ipv4Addr::from(base + i)))))
        .collect();
    let fresh: Vec<ServiceRequest> = (0..10_000u32).map(|i| service(i, None)).collect();
    let mut g = c.benchmark_group("ipam_10k");
    g.sample_size(10);
    for (name, svcs) in [
        ("rebuild_existing", &with_status),
        ("allocate_fresh", &fresh),
    ] {
        g.bench_function(name, |b| {
            b.iter_batched(
                || svcs.clone(),
                |svcs| {
                    let mut ipam = Ipam::new();
                    ipam.upsert_pool(PoolConfig::simple("p", 0, &["198.51.0.0/16"], false));
                    for s in svcs {
                        ipam.upsert_service(s);
                    }
                    let notes = ipam.reconcile();
                    black_box(notes.len())
                },
                BatchSize::LargeInput,
            )
        });
    }
    // A pass over 10k allocated Services where nothing changed (the cost of each wake-up).
    g.bench_function("steady_pass", |b| {
        let mut ipam = Ipam::new();
        ipam.upsert_pool(PoolConfig::simple("p", 0, &["198.51.0.0/16"], false));
        for s in &with_status {
            ipam.upsert_service(s.clone());
        }
        ipam.reconcile();
        b.iter(|| black_box(ipam.reconcile().len()))
    });
    g.finish();
}

criterion_group!(benches, alloc_release, rebuild);
criterion_main!(benches);
