//! The controller and the speaker must agree on every shared rule (issue 9). For random pools
//! (overlapping ranges, equal and missing creation times, an invalid one now and then), Nodes and
//! Services (address-pool annotations in every spelling, naming any pool; requested addresses;
//! status IPs including IPv4-mapped, zoned and leading-zero spellings), this checks that
//!
//! - every address the controller allocates is announced by the speaker under the pool the
//!   controller allocated it from (R9, `Layout::pool_for`), and is never a Node address (R10);
//! - for any status IP, foreign ones included, the speaker announces it exactly when the
//!   controller reads it as an IP and the layout its allocator uses gives the Service a pool
//!   there (`Layout::pool_for`: the named pool when it contains the IP, else the owner), and
//!   then under that pool;
//! - Node addresses are excluded by both.
#![allow(clippy::unwrap_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};

use ferrolb_controller::ipam::layout::Layout;
use ferrolb_controller::ipam::{Ipam, PoolConfig};
use ferrolb_controller::service::{ClassConfig, Classified, classify, ingress_of, observed_of};
use ferrolb_crds::annotations::address_pool;
use ferrolb_crds::ownership::creation_seconds;
use ferrolb_crds::{IPAddressPool, IPAddressPoolSpec};
use ferrolb_l2::view::{ViewSettings, build};
use k8s_openapi::api::core::v1::{
    LoadBalancerIngress, LoadBalancerStatus, Node, NodeAddress, NodeStatus, Service, ServiceSpec,
    ServiceStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use proptest::prelude::*;

/// Every address the test uses is in 10.0.0.0/26, so pools, Nodes and statuses collide often.
fn addr(i: u8) -> String {
    format!("10.0.0.{}", i % 64)
}

fn time(second: i64) -> Time {
    Time(k8s_openapi::jiff::Timestamp::from_second(second).unwrap())
}

#[derive(Debug, Clone)]
struct PoolGen {
    /// (start, size, CIDR or range)
    entries: Vec<(u8, u8, bool)>,
    created: Option<i64>,
    avoid_buggy: bool,
    invalid: bool,
}

fn pool_gen() -> impl Strategy<Value = PoolGen> {
    (
        prop::collection::vec((0u8..64, 0u8..6, any::<bool>()), 1..3),
        prop::option::weighted(0.9, 0i64..4),
        any::<bool>(),
        prop::bool::weighted(0.1),
    )
        .prop_map(|(entries, created, avoid_buggy, invalid)| PoolGen {
            entries,
            created,
            avoid_buggy,
            invalid,
        })
}

fn pool_object(i: usize, g: &PoolGen) -> IPAddressPool {
    let mut addresses: Vec<String> = g
        .entries
        .iter()
        .map(|&(start, size, cidr)| {
            if cidr {
                let prefix = 27 + size.min(5);
                let mask = !((1u16 << (32 - prefix)) - 1) as u8;
                format!("{}/{prefix}", addr(start & mask))
            } else {
                let end = (start % 64).saturating_add(size * 3).min(63);
                format!("{}-{}", addr(start), addr(end))
            }
        })
        .collect();
    if g.invalid {
        addresses.push("10.0.0.9-10.0.0.3".into());
    }
    let mut p = IPAddressPool::new(
        &format!("pool-{i}"),
        IPAddressPoolSpec {
            addresses: addresses.iter().map(|a| a.as_str().into()).collect(),
            auto_assign: true,
            avoid_buggy_ips: g.avoid_buggy,
            allow_sharing_across_namespaces: false,
            service_allocation: None,
            auto_addresses: None,
        },
    );
    p.metadata.creation_timestamp = g.created.map(time);
    p
}

/// A status or Node address as text: mostly plain, sometimes a spelling only a lenient parser
/// accepts, sometimes outside every pool.
fn ip_text() -> impl Strategy<Value = String> {
    prop_oneof![
        8 => (0u8..64).prop_map(addr),
        1 => (0u8..64).prop_map(|i| format!("::ffff:{}", addr(i))),
        1 => Just("fe80::1%eth0".to_string()),
        1 => (0u8..10).prop_map(|i| format!("10.0.0.0{i}")),
        1 => Just("192.0.2.1".to_string()),
    ]
}

fn node_object(i: usize, addrs: &[(bool, String)]) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(format!("node-{i}")),
            ..Default::default()
        },
        status: Some(NodeStatus {
            addresses: Some(
                addrs
                    .iter()
                    .map(|(internal, a)| NodeAddress {
                        type_: if *internal {
                            "InternalIP"
                        } else {
                            "ExternalIP"
                        }
                        .into(),
                        address: a.clone(),
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    }
}

const POOL_SPELLINGS: [&str; 3] = [
    "ferrolb.io/address-pool",
    "metallb.io/address-pool",
    "metallb.universe.tf/address-pool",
];

#[derive(Debug, Clone)]
struct ServiceGen {
    /// (spelling, pool index — 9 names a pool that does not exist —, trailing whitespace that
    /// makes the raw value longer than any object name)
    pools: Vec<(usize, usize, bool)>,
    requested: Option<u8>,
    status: Vec<String>,
    created: i64,
}

fn service_gen() -> impl Strategy<Value = ServiceGen> {
    (
        prop::collection::vec(
            (0usize..3, prop_oneof![0usize..5, Just(9)], any::<bool>()),
            0..3,
        ),
        prop::option::weighted(0.2, 0u8..64),
        prop::collection::vec(ip_text(), 0..3),
        0i64..100,
    )
        .prop_map(|(pools, requested, status, created)| ServiceGen {
            pools,
            requested,
            status,
            created,
        })
}

fn service_object(i: usize, g: &ServiceGen, status: &[String]) -> Service {
    let mut annotations: BTreeMap<String, String> = g
        .pools
        .iter()
        .map(|(spelling, pool, padded)| {
            let pad = if *padded {
                " ".repeat(300)
            } else {
                String::new()
            };
            (
                POOL_SPELLINGS[*spelling].to_string(),
                format!("pool-{pool}{pad}"),
            )
        })
        .collect();
    if let Some(r) = g.requested {
        annotations.insert("ferrolb.io/loadBalancerIPs".into(), addr(r));
    }
    Service {
        metadata: ObjectMeta {
            namespace: Some("default".into()),
            name: Some(format!("svc-{i}")),
            annotations: Some(annotations),
            creation_timestamp: Some(time(g.created)),
            ..Default::default()
        },
        spec: Some(ServiceSpec {
            type_: Some("LoadBalancer".into()),
            ip_families: Some(vec!["IPv4".into()]),
            ip_family_policy: Some("SingleStack".into()),
            ..Default::default()
        }),
        status: Some(ServiceStatus {
            load_balancer: Some(LoadBalancerStatus {
                ingress: Some(
                    status
                        .iter()
                        .map(|ip| LoadBalancerIngress {
                            ip: Some(ip.clone()),
                            ..Default::default()
                        })
                        .collect(),
                ),
            }),
            ..Default::default()
        }),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn controller_and_speaker_agree_on_ownership_and_exclusions(
        pool_gens in prop::collection::vec(pool_gen(), 1..5),
        node_gens in prop::collection::vec(
            prop::collection::vec((any::<bool>(), ip_text()), 1..3), 0..3),
        svc_gens in prop::collection::vec(service_gen(), 1..8),
    ) {
        let pools: Vec<IPAddressPool> =
            pool_gens.iter().enumerate().map(|(i, g)| pool_object(i, g)).collect();
        let nodes: Vec<Node> =
            node_gens.iter().enumerate().map(|(i, a)| node_object(i, a)).collect();
        let services: Vec<Service> = svc_gens
            .iter()
            .enumerate()
            .map(|(i, g)| service_object(i, g, &g.status))
            .collect();
        let pool_refs: Vec<&IPAddressPool> = pools.iter().collect();
        let node_refs: Vec<&Node> = nodes.iter().collect();
        let settings = ViewSettings::default();

        // The controller: its allocator, fed the way the control loop feeds it.
        let node_map = ferrolb_crds::node::address_map(nodes.iter());
        let configs: Vec<PoolConfig> = pools
            .iter()
            .map(|p| {
                PoolConfig::from_spec(
                    p.metadata.name.as_deref().unwrap(),
                    creation_seconds(&p.metadata),
                    &p.spec,
                )
            })
            .collect();
        let mut ipam = Ipam::new();
        for c in &configs {
            ipam.upsert_pool(c.clone());
        }
        ipam.set_nodes(node_map.clone());
        let class = ClassConfig::default();
        let mut keys = Vec::new();
        for svc in &services {
            let Classified::Ours(req, _) = classify(svc, &class) else {
                panic!("every generated Service is ours");
            };
            keys.push(req.key.clone());
            ipam.upsert_service(*req);
        }
        ipam.reconcile();
        let layout = Layout::build(configs.iter().map(PoolConfig::claim), &node_map);

        // 1. The speaker on the status the controller writes.
        let written: Vec<Service> = svc_gens
            .iter()
            .zip(&keys)
            .enumerate()
            .map(|(i, (g, key))| {
                let text: Vec<String> = ingress_of(&ipam.desired_ips(key))
                    .into_iter()
                    .filter_map(|e| e.ip)
                    .collect();
                service_object(i, g, &text)
            })
            .collect();
        // The speaker reads Services through its watch trim (S13), as in production.
        let trimmed = |list: &[Service]| -> Vec<Service> {
            list.iter()
                .cloned()
                .map(|mut s| {
                    ferrolb_l2::trim::service(&mut s);
                    s
                })
                .collect()
        };
        let view = build(
            &settings,
            &trimmed(&written).iter().collect::<Vec<_>>(),
            &[],
            &node_refs,
            &pool_refs,
            &[],
        );
        for (i, key) in keys.iter().enumerate() {
            let Some(a) = ipam.assignment(key) else { continue };
            let named = address_pool(written[i].metadata.annotations.as_ref());
            let name = ferrolb_crds::service::key(&written[i].metadata);
            for ip in &a.ips {
                prop_assert!(!node_map.contains_key(ip), "controller allocated node address {}", ip);
                prop_assert_eq!(layout.pool_for(named.as_deref(), *ip), Some(a.pool.as_str()));
                let facts = view.ips.get(ip);
                prop_assert!(
                    facts.is_some(),
                    "allocated {} not announced: {:?}", ip, view.skipped.get(ip)
                );
                for f in facts.into_iter().flatten().filter(|f| f.name == name) {
                    prop_assert_eq!(&f.pool.name, &a.pool, "pool of {} for {}", ip, name);
                }
            }
        }

        // 2. The speaker on the random, partly foreign, status.
        let view = build(
            &settings,
            &trimmed(&services).iter().collect::<Vec<_>>(),
            &[],
            &node_refs,
            &pool_refs,
            &[],
        );
        let mut read_by_controller = BTreeSet::new();
        for svc in &services {
            let named = address_pool(svc.metadata.annotations.as_ref());
            let name = ferrolb_crds::service::key(&svc.metadata);
            for ip in observed_of(svc).ips {
                read_by_controller.insert(ip);
                let announced = view.ips.get(&ip);
                if node_map.contains_key(&ip) {
                    prop_assert!(announced.is_none(), "node address {} announced", ip);
                    continue;
                }
                match layout.pool_for(named.as_deref(), ip) {
                    Some(pool) => {
                        let mine: Vec<_> =
                            announced.into_iter().flatten().filter(|f| f.name == name).collect();
                        prop_assert!(!mine.is_empty(), "{} of {} in {} but not announced", ip, name, pool);
                        for f in mine {
                            prop_assert_eq!(f.pool.name.as_str(), pool, "pool of {} for {}", ip, name);
                        }
                    }
                    None => prop_assert!(
                        announced.into_iter().flatten().all(|f| f.name != name),
                        "{} of {} has no pool but is announced", ip, name
                    ),
                }
            }
        }
        for ip in view.ips.keys() {
            prop_assert!(
                read_by_controller.contains(ip),
                "{} announced, but no status holds it as the controller reads it", ip
            );
        }
        for ip in node_map.keys() {
            prop_assert_eq!(layout.owner_of(*ip), None);
        }
    }
}
