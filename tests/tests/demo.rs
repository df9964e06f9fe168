//! The README's demo, run non-interactively (issue 5, "CI"): real kube-proxy (nftables mode, and
//! iptables mode for issue #13) and
//! speakers in lab namespaces, the real controller, a LoadBalancer Service, ARP, HTTP through
//! kube-proxy's DNAT, and a SIGKILL failover. Asserts on the demo's outcome, not on its timing
//! (speed is measured by the benchmarks).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::net::Ipv4Addr;

use ferrolb_tests::lab::Implementation;
use ferrolb_tests::lab::demo::{self, DemoOptions};
use ferrolb_tests::lab::kube_proxy::ProxyMode;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_to_a_successful_end() {
    demo_in(ProxyMode::Nftables, Implementation::Ferrolb).await;
}

/// `./demo.sh --implementation metallb` (issue #11): the same story, the same assertions, with
/// MetalLB v0.15.2's controller and speakers (its own owner choice predicted). So the comparison's
/// MetalLB lab is exercised end to end, through kube-proxy. Extended tier (`tests/run.sh
/// --extended`, docs/testing.md): it needs MetalLB built from its Go module.
#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier (tests/run.sh --extended): needs MetalLB built from its Go module"
)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_with_metallb() {
    demo_in(ProxyMode::Nftables, Implementation::MetalLb).await;
}

/// `./demo.sh --proxy-mode iptables` (issue #13): the same story with kube-proxy's iptables mode,
/// the default of minikube and kind.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn demo_runs_with_kube_proxy_in_iptables_mode() {
    demo_in(ProxyMode::Iptables, Implementation::Ferrolb).await;
}

async fn demo_in(proxy_mode: ProxyMode, implementation: Implementation) {
    let mut out: Vec<u8> = Vec::new();
    let result = demo::run(
        &DemoOptions {
            verbose: true,
            requests: 300,
            proxy_mode,
            implementation,
        },
        &mut out,
    )
    .await;
    let printed = String::from_utf8_lossy(&out).into_owned();
    let report = match result {
        Ok(r) => r,
        Err(e) => panic!("demo failed: {e:#}\n{printed}"),
    };

    // Step 3: an address from the demo pool, shown by the real kubectl.
    let first = Ipv4Addr::new(198, 51, 100, 200);
    let last = Ipv4Addr::new(198, 51, 100, 220);
    assert!(
        (first..=last).contains(&report.external_ip),
        "{}",
        report.external_ip
    );
    assert!(
        report
            .kubectl_get_svc
            .contains(&report.external_ip.to_string()),
        "{}",
        report.kubectl_get_svc
    );
    assert!(
        report.kubectl_get_svc.contains("LoadBalancer"),
        "{}",
        report.kubectl_get_svc
    );

    // Step 4: exactly one MAC answered ARP, the owner's, and the owner is the implementation's
    // choice (ferrolb: the rendezvous hash; MetalLB: its sha256 order).
    assert_eq!(
        report.arp.responders.len(),
        1,
        "{:?}",
        report.arp.responders
    );
    assert_eq!(
        report.arp.responders[0],
        (report.arp.owner_mac.clone(), Some(report.arp.owner.clone()))
    );
    assert_eq!(report.arp.owner, report.arp.expected_owner);
    // The verbose evidence: kube-proxy's rules for the IP on the owner node, down to the DNAT
    // that picks one of the three pods at random.
    match proxy_mode {
        ProxyMode::Nftables => {
            assert!(
                printed.contains(&format!(
                    "{} . tcp . 80 : goto external-",
                    report.external_ip
                )),
                "{printed}"
            );
            assert!(
                printed.contains("dnat ip to numgen random mod 3"),
                "{printed}"
            );
        }
        ProxyMode::Iptables => {
            assert!(
                printed.contains(&format!(
                    "-A KUBE-SERVICES -d {}/32 -p tcp",
                    report.external_ip
                )),
                "{printed}"
            );
            assert!(printed.contains("-m statistic --mode random"), "{printed}");
            assert_eq!(
                printed
                    .matches("-j DNAT --to-destination 198.51.100.2")
                    .count(),
                3,
                "{printed}"
            );
        }
        // Not run by these tests (IPVS needs the VM lab's kernel): a virtual server for the IP
        // with the three pods as real servers.
        ProxyMode::Ipvs { .. } => {
            assert!(
                printed.contains(&format!("TCP  {}:80 rr", report.external_ip)),
                "{printed}"
            );
            assert_eq!(printed.matches("-> 198.51.100.2").count(), 3, "{printed}");
        }
    }

    // Step 5: every request answered, every backend answered (kube-proxy's random DNAT), and the
    // connections were DNATed on the owner node only.
    assert_eq!(report.http_errors, 0);
    assert_eq!(
        report.per_backend.values().sum::<usize>(),
        300,
        "{:?}",
        report.per_backend
    );
    for (pod, _, _) in &report.pods {
        assert!(
            report.per_backend.get(pod).copied().unwrap_or(0) > 0,
            "{pod} never answered: {:?}",
            report.per_backend
        );
    }
    assert_eq!(
        report.per_backend.len(),
        report.pods.len(),
        "only the pods answer: {:?}",
        report.per_backend
    );
    if let Some(conntrack) = &report.conntrack {
        for (node, count) in conntrack {
            if *node == report.arp.owner {
                assert!(*count >= 300, "{node}: {count} conntrack entries");
            } else {
                assert_eq!(
                    *count, 0,
                    "{node} DNATed traffic for the IP it does not own"
                );
            }
        }
    }

    // Step 6: another node took over, announced with gratuitous ARP, answers ARP alone, and
    // HTTP went through it.
    let f = &report.failover;
    assert_eq!(f.old_owner, report.arp.owner);
    assert_ne!(f.new_owner, f.old_owner);
    assert_eq!(f.new_owner, f.expected_new_owner);
    assert_eq!(f.arp_after.len(), 1, "{:?}", f.arp_after);
    assert!(f.requests_after_kill > 0);

    // Step 7 (the demo itself fails if a namespace is left behind).
    assert!(printed.contains("demo OK"), "{printed}");
}
