//! The traffic-path matrix of issue #13 ({iptables, nftables} × {Cluster, Local} × {IPv4, IPv6}):
//! real kube-proxy in each mode, real speakers, a LAN client. One dual-stack lab per mode (see
//! `ferrolb_tests::lab::datapath`). IPVS mode cannot run on this machine's kernel: the skip is
//! printed with where it runs instead (the VM lab, `tests/tests/vm_ipvs.rs`), never silent.
//! Asserts on what was observed, never on timing (the failover times are printed).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::IpAddr;

use ferrolb_tests::lab::datapath::{self, CaseReport, ModeReport, PODS, Policy, REQUESTS};
use ferrolb_tests::lab::kube_proxy::{ProxyMode, ipvs_unavailable};

async fn run(mode: ProxyMode) -> ModeReport {
    let mut out: Vec<u8> = Vec::new();
    let result = datapath::run(mode, &mut out).await;
    let printed = String::from_utf8_lossy(&out).into_owned();
    eprintln!("{printed}");
    match result {
        Ok(r) => r,
        Err(e) => panic!("datapath matrix in {mode} mode failed: {e:#}\n{printed}"),
    }
}

fn pods_on(nodes: &BTreeSet<String>) -> BTreeSet<String> {
    PODS.iter()
        .filter(|(_, n)| nodes.contains(*n))
        .map(|(p, _)| (*p).to_owned())
        .collect()
}

fn check_case(mode: ProxyMode, c: &CaseReport) {
    let what = format!("{mode} {:?} {}", c.policy, c.external_ip);
    // Exactly one node answers ARP/NDP, and it is eligible.
    assert_eq!(c.responders.len(), 1, "{what}: {:?}", c.responders);
    let owner = c.responders.first().unwrap().clone();
    assert!(
        c.eligible.contains(&owner),
        "{what}: owner {owner} not eligible {:?}",
        c.eligible
    );
    // Every request through the external IP answered, by endpoints of the Service.
    assert!(
        c.external.errors.is_empty(),
        "{what}: {:?}",
        c.external.errors
    );
    assert_eq!(
        c.external.per_pod.values().sum::<usize>(),
        REQUESTS,
        "{what}"
    );
    let answered: BTreeSet<String> = c.external.per_pod.keys().cloned().collect();
    assert!(answered.is_subset(&c.endpoints), "{what}: {answered:?}");
    // The ClusterIP from inside a node reaches the same endpoints (internalTrafficPolicy Cluster).
    assert!(
        c.cluster_ip.errors.is_empty(),
        "{what}: ClusterIP {:?}",
        c.cluster_ip.errors
    );
    let via_cluster_ip: BTreeSet<String> = c.cluster_ip.per_pod.keys().cloned().collect();
    assert!(
        via_cluster_ip.is_subset(&c.endpoints),
        "{what}: {via_cluster_ip:?}"
    );
    match c.policy {
        Policy::Cluster => {
            // Spread over every ready pod on every node; the pod never sees the client (SNAT).
            assert_eq!(answered, c.endpoints, "{what}: not every pod answered");
            assert!(
                !c.external.sources.contains(&c.client_ip),
                "{what}: {:?}",
                c.external.sources
            );
            // Every node's NodePort answers, from the Service's pods.
            for (node, a) in &c.node_ports {
                assert!(
                    a.errors.is_empty(),
                    "{what}: NodePort on {node}: {:?}",
                    a.errors
                );
                let pods: BTreeSet<String> = a.per_pod.keys().cloned().collect();
                assert!(
                    !pods.is_empty() && pods.is_subset(&c.endpoints),
                    "{what}: {node}"
                );
            }
        }
        Policy::Local => {
            // Every request lands on a pod on the owner node, and the pod sees the client.
            let on_owner = pods_on(&BTreeSet::from([owner.clone()]));
            assert!(
                answered.is_subset(&on_owner),
                "{what}: {answered:?} not all on {owner}"
            );
            assert_eq!(
                c.external.sources,
                BTreeSet::from([c.client_ip]),
                "{what}: the source was not kept"
            );
            // A node's NodePort reaches only its own pods, keeping the source; a node without
            // a local endpoint drops the traffic (that is why it must not announce).
            for (node, a) in &c.node_ports {
                let local: BTreeSet<String> = pods_on(&BTreeSet::from([node.clone()]))
                    .intersection(&c.endpoints)
                    .cloned()
                    .collect();
                if local.is_empty() {
                    assert!(
                        a.per_pod.is_empty(),
                        "{what}: NodePort on {node} answered: {a:?}"
                    );
                } else {
                    assert!(
                        a.errors.is_empty(),
                        "{what}: NodePort on {node}: {:?}",
                        a.errors
                    );
                    let pods: BTreeSet<String> = a.per_pod.keys().cloned().collect();
                    assert!(
                        pods.is_subset(&local),
                        "{what}: NodePort on {node}: {pods:?}"
                    );
                    assert_eq!(a.sources, BTreeSet::from([c.client_ip]), "{what}: {node}");
                }
            }
        }
    }
}

fn check(report: &ModeReport) {
    let mode = report.mode;
    let kinds: Vec<(Policy, bool)> = report
        .cases
        .iter()
        .map(|c| (c.policy, c.external_ip.is_ipv6()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (Policy::Cluster, false),
            (Policy::Cluster, true),
            (Policy::Local, false),
            (Policy::Local, true)
        ]
    );
    for c in &report.cases {
        check_case(mode, c);
    }
    // Local: node-1 has no endpoint, so it never answers; the IPv6 IP is answered where the
    // IPv6 endpoints are, not where the IPv4 ones are (S1 clause 7 per family).
    let local_v6 = &report.cases[3];
    assert!(matches!(local_v6.external_ip, IpAddr::V6(_)));
    assert_eq!(local_v6.eligible.len(), 1, "{:?}", local_v6.eligible);
    assert_eq!(local_v6.responders, local_v6.eligible);

    // The failover story with Local: another eligible node took over and served.
    let f = &report.failover;
    assert_ne!(f.new_owner, f.old_owner);
    assert_eq!(f.new_owner, f.expected_new_owner);
    assert_eq!(f.arp_after.len(), 1, "{:?}", f.arp_after);
    assert!(f.requests_after_kill > 0);
    eprintln!(
        "[{mode}] failover (Local, IPv4): gratuitous ARP +{:.1} ms, first HTTP answer via {} +{:.1} ms, {}/{} requests failed; matrix took {:.1} s",
        f.gratuitous_arp_after.as_secs_f64() * 1e3,
        f.new_owner,
        f.http_via_new_owner_after.as_secs_f64() * 1e3,
        f.failed_after_kill,
        f.requests_after_kill,
        report.took.as_secs_f64()
    );
    eprintln!(
        "[{mode}] kube-proxy's rules for {} (web-local, IPv4) on its owner {}:\n{}",
        report.cases[2].external_ip, f.old_owner, report.evidence
    );
    // The rules kube-proxy wrote for the IP lead to a DNAT to a pod (POD_CIDR 198.51.100.224/28).
    let dnat = match mode {
        ProxyMode::Iptables => "-j DNAT --to-destination",
        ProxyMode::Nftables => "dnat ",
        ProxyMode::Ipvs { .. } => " Masq ",
    };
    assert!(
        report
            .evidence
            .lines()
            .any(|l| l.contains(dnat) && l.contains("198.51.100.2")),
        "{}",
        report.evidence
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn iptables_mode_cluster_and_local_ipv4_and_ipv6() {
    check(&run(ProxyMode::Iptables).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nftables_mode_cluster_and_local_ipv4_and_ipv6() {
    check(&run(ProxyMode::Nftables).await);
}

/// IPVS mode is part of the matrix users run, but needs the `ip_vs` kernel modules this
/// machine's kernel lacks: it runs in the VM lab instead, on the guest's Debian kernel
/// (`tests/tests/vm_ipvs.rs`: every node answering ARP without `strictARP` and the speakers'
/// report of it; one answerer, HTTP with `Cluster` and `Local` and a crash failover with
/// `strictARP`). Here the skip is printed with its reason and where IPVS is tested, and asking
/// the lab for the mode is refused with that reason rather than silently running another mode.
#[test]
fn ipvs_mode_is_skipped_with_the_reason() {
    const VM_TESTS: [&str; 2] = [
        "without_strict_arp_every_node_answers_arp_for_the_ip_and_each_speaker_reports_its_node",
        "with_strict_arp_only_the_owner_answers_and_http_goes_through_ipvs_before_and_after_a_crash",
    ];
    // Where IPVS is tested must exist, under these names.
    let vm = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm_ipvs.rs"),
    )
    .unwrap();
    for name in VM_TESTS {
        assert!(vm.contains(&format!("fn {name}()")), "{name}");
    }
    match ipvs_unavailable() {
        Some(why) => {
            eprintln!(
                "SKIPPED kube-proxy ipvs mode in this matrix: {why}; IPVS runs in the VM lab: \
                 tests/tests/vm_ipvs.rs ({})",
                VM_TESTS.join(", ")
            );
            let refused = "ipvs".parse::<ProxyMode>().unwrap_err();
            assert!(refused.contains("ipvs mode cannot run here"), "{refused}");
            assert!(refused.contains("tests/tests/vm_ipvs.rs"), "{refused}");
        }
        None => {
            eprintln!(
                "this kernel has IPVS; the IPVS tests are tests/tests/vm_ipvs.rs ({})",
                VM_TESTS.join(", ")
            );
            assert_eq!(
                "ipvs".parse::<ProxyMode>(),
                Ok(ProxyMode::Ipvs { strict_arp: true })
            );
        }
    }
}
