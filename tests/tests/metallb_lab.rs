//! MetalLB in the lab (issue #11), the smoke test that keeps it from rotting: MetalLB's own
//! controller and speakers (built from its Go module by `tests/metallb/build.sh`) on three lab
//! nodes, a real API server and real ARP frames on the bridge. The figure is printed, never
//! asserted: it is a measurement, not a limit.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use ferrolb_tests::lab::{Implementation, Lab, takeover};
use ferrolb_tests::objects::{apply_endpoints, create_service, ingress_v4, lb_service};
use ferrolb_tests::poll;

const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];

/// The last lines of every speaker's log, for failure messages.
fn logs(lab: &Lab) -> String {
    NODES
        .iter()
        .map(|n| format!("--- {n}:\n{}", lab.speaker_log(n, 20)))
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metallb_assigns_announces_from_one_node_and_fails_over_after_sigkill() {
    let mut lab = Lab::start_implementation(Implementation::MetalLb, 3, 1)
        .await
        .expect("MetalLB lab");
    let client = lab.client().await.unwrap();
    lab.advertise_pool("lab", &["198.51.100.0/28"])
        .await
        .unwrap();
    lab.start_metallb_controller().unwrap();
    for n in NODES {
        lab.start_speaker(n, &[]).unwrap();
    }
    create_service(
        &client,
        &lb_service("default", "web", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    // MetalLB announces only Services with a ready endpoint (there is no EndpointSlice
    // controller in the test cluster, so the test writes the slice).
    apply_endpoints(
        &client,
        "default",
        "web",
        80,
        &[("192.0.2.11", Some("node-1"), true, true, false)],
    )
    .await
    .unwrap();

    // 1. MetalLB's controller gives the Service an address from the pool (nobody else writes it).
    let started = Instant::now();
    let controller_log = lab.dir().join("metallb-controller.log");
    let waited = poll::until(
        "MetalLB's controller to assign an IP",
        Duration::from_secs(60),
        || async { ingress_v4(&client, "default", "web").await.is_some() },
    )
    .await;
    if let Err(e) = waited {
        panic!(
            "{e}\ncontroller log:\n{}",
            std::fs::read_to_string(&controller_log).unwrap_or_default()
        );
    }
    let ip = ingress_v4(&client, "default", "web").await.unwrap();
    let pool: Vec<Ipv4Addr> = (0..16).map(|i| Ipv4Addr::new(198, 51, 100, i)).collect();
    assert!(pool.contains(&ip), "{ip} is not in 198.51.100.0/28");
    println!(
        "MetalLB's controller assigned {ip} after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // 2. Exactly one node answers ARP for it, and keeps being the only one.
    let macs: BTreeSet<String> = lab.nodes.iter().map(|n| n.mac.clone()).collect();
    let mut answers = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        answers = lab.arp_answers(0, ip).await.unwrap();
        if answers.len() == 1 {
            break;
        }
        tokio::time::sleep(poll::INTERVAL).await;
    }
    assert_eq!(
        answers.len(),
        1,
        "ARP answers for {ip}: {answers:?}\n{}",
        logs(&lab)
    );
    for _ in 0..3 {
        let again = lab.arp_answers(0, ip).await.unwrap();
        assert_eq!(
            again,
            answers,
            "the announcer of {ip} changed\n{}",
            logs(&lab)
        );
    }
    let owner_mac = answers.first().unwrap().clone();
    assert!(macs.contains(&owner_mac), "{owner_mac} is no node's MAC");
    let owner = lab.node_by_mac(&owner_mac).unwrap().name.clone();
    println!("{owner} ({owner_mac}) alone answers ARP for {ip}");

    // 3. SIGKILL of the owner's speaker: another node announces with a gratuitous ARP.
    let t = takeover::signal_and_time(&mut lab, 0, ip, &owner, "KILL", Duration::from_secs(30))
        .await
        .unwrap();
    assert_ne!(t.new_owner, owner);
    println!(
        "{}: SIGKILL of {owner}'s speaker → gratuitous ARP for {ip} from {} after {:.1} ms",
        lab.implementation().name(),
        t.new_owner,
        t.after.as_secs_f64() * 1000.0
    );
    let after = lab
        .wait_for_owner(0, ip, Some(&t.new_owner), Duration::from_secs(10))
        .await
        .unwrap();
    assert_eq!(
        after,
        BTreeSet::from([lab.node(&t.new_owner).mac.clone()]),
        "after the takeover only {} should answer for {ip}\n{}",
        t.new_owner,
        logs(&lab)
    );
}

/// Issue #11's CI smoke test of `ferrolb-bench-lab compare` itself: 3 nodes, 3 trials per
/// implementation and signal, alternating, one fresh lab per trial (backend pods and a real
/// kube-proxy per node) — the same function the command runs. Asserts that every trial of both
/// sides failed over (a gratuitous ARP from another node), that each side's HTTP answer through
/// the new owner came in at least one trial per signal, and that the table has all four rows
/// with both columns filled; the times are printed, never asserted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_fails_both_implementations_over_and_prints_the_table() {
    use ferrolb_tests::lab::compare::{self, TrialSetup};
    let setup = TrialSetup {
        nodes: 3,
        signal: "KILL",
        timeout: Duration::from_secs(20),
        settle: Duration::from_secs(3),
        ferrolb_speaker: None,
        ferrolb_args: vec!["--timing-profile".into(), "fast".into()],
    };
    let mut lines = Vec::new();
    let rows = compare::failover_rows(&setup, 3, |line| {
        println!("{line}");
        lines.push(line);
    })
    .await;
    assert_eq!(lines.len(), 2 * 2 * 3, "{lines:#?}");
    let table = compare::table(&rows);
    println!("{table}");
    let names: Vec<String> = ["KILL", "TERM"]
        .into_iter()
        .flat_map(|signal| {
            let (arp, http) = compare::row_names(signal, 3);
            [arp, http]
        })
        .collect();
    let whats: Vec<&str> = rows.iter().map(|r| r.what.as_str()).collect();
    assert_eq!(whats, names, "{table}");
    for row in &rows {
        assert!(table.contains(&row.what), "{table}");
        if row.what.contains("gratuitous ARP") {
            assert_eq!(
                (row.ferrolb.micros.len(), row.metallb.micros.len()),
                (3, 3),
                "every trial fails over by ARP\n{lines:#?}\n{table}"
            );
        } else {
            assert!(
                !row.ferrolb.micros.is_empty() && !row.metallb.micros.is_empty(),
                "both sides answer HTTP through the new owner at least once\n{lines:#?}\n{table}"
            );
        }
    }
    let arp_row = table
        .lines()
        .find(|l| l.contains("gratuitous ARP"))
        .unwrap_or_default();
    assert!(
        arp_row.contains("(3 ok, 0 failed) | ") && arp_row.ends_with("× |"),
        "{table}"
    );
}
