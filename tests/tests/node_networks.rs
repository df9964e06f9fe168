//! Speakers on node networks other than one plain `eth0` (issue #10 item 1, "frame identity"):
//! for any external IP, every ARP/NDP frame on the LAN that claims it carries one MAC — the
//! owner's — and it is the Ethernet source of the frame too. Real speakers, real frames.
//!
//! This machine's kernel has no 802.1Q, bonding or dummy drivers, so the VLAN sub-interface and
//! bond topologies of the issue run in the VM lab instead (Debian's kernel under qemu, issue #30):
//! `tests/tests/vm_vlan_bond.rs`, real frames with their 802.1Q tags read off the wire — a VLAN
//! sub-interface, `active-backup`, `balance-xor` and `802.3ad` bonds, a VLAN on a bond, a bond
//! failover. Their rules are unit-tested in the speaker as well (`l2::interfaces`,
//! `l2::socket::Received::arrived_on`). Here a bridge device stands in for a dummy one (below).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::time::Duration;

use ferrolb_tests::lab::{Lab, Seen};
use ferrolb_tests::objects::announced_service;
use ferrolb_tests::poll::until;

const VIP4: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 70);
const VIP6: Ipv6Addr = Ipv6Addr::new(0x2001, 0xdb8, 0x1a, 0, 0, 0, 0, 0x270);
const SETTLE: Duration = Duration::from_secs(30);

/// The MACs claiming `ip` in `seen`, checking each frame's claimed MAC against its Ethernet
/// source where the capture records it.
fn claimed_macs(seen: &[Seen], ip: IpAddr) -> BTreeSet<String> {
    let mut macs = BTreeSet::new();
    for s in seen.iter().filter(|s| s.ip() == ip) {
        match s {
            Seen::ArpReply { mac, eth_src, .. } => {
                assert!(mac.eq_ignore_ascii_case(eth_src), "{s:?}");
            }
            Seen::NeighborAdvertisement {
                mac: Some(mac),
                eth_src,
                ..
            } => assert!(mac.eq_ignore_ascii_case(eth_src), "{s:?}"),
            _ => {}
        }
        macs.insert(s.mac().to_lowercase());
    }
    macs
}

/// The node's address on a bridge with `eth0` as a port, the bridge with its own MAC: only the
/// bridge answers and announces; the port (which keeps an IPv6 link-local address, so it looked
/// like an NDP interface) never sends a frame claiming the IP.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bridge_port_never_claims_an_ip_only_the_bridge_does() {
    let mut lab = Lab::start_dual_stack(2, 1).await.expect("lab");
    lab.bridge_node("node-1", "02:00:5e:10:00:01").unwrap();
    lab.bridge_node("node-2", "02:00:5e:10:00:02").unwrap();
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/28", "2001:db8:1a::200/120"],
        "svc",
        "Cluster",
        &["198.51.100.70", "2001:db8:1a::270"],
    )
    .await
    .unwrap();

    // Capture from before the speakers start: the announcements on gaining ownership are in it.
    let capture = lab.start_capture(0, Duration::from_secs(12));
    tokio::time::sleep(Duration::from_millis(200)).await;
    for node in ["node-1", "node-2"] {
        lab.start_speaker(node, &[]).unwrap();
    }
    let bridge_macs: BTreeSet<String> = lab.nodes.iter().map(|n| n.mac.clone()).collect();

    // Both IPs get answered, each by one bridge MAC.
    until(
        "ARP for the IPv4 IP answered by one bridge",
        SETTLE,
        || async {
            let a = lab.arp_answers(0, VIP4).await.unwrap();
            a.len() == 1 && a.is_subset(&bridge_macs)
        },
    )
    .await
    .unwrap();
    until(
        "NDP for the IPv6 IP answered by one bridge",
        SETTLE,
        || async {
            let seen = lab
                .ndp_probe(0, VIP6, None, None, Duration::from_millis(300))
                .await
                .unwrap();
            let m = claimed_macs(&seen, IpAddr::V6(VIP6));
            m.len() == 1 && m.is_subset(&bridge_macs)
        },
    )
    .await
    .unwrap();
    let mut seen = capture.await.unwrap().unwrap();
    seen.extend(
        lab.ndp_probe(0, VIP6, None, None, Duration::from_millis(300))
            .await
            .unwrap(),
    );
    seen.extend(
        lab.arp_probe(0, VIP4, Duration::from_millis(300))
            .await
            .unwrap(),
    );

    for ip in [IpAddr::V4(VIP4), IpAddr::V6(VIP6)] {
        let macs = claimed_macs(&seen, ip);
        assert_eq!(
            macs.len(),
            1,
            "{ip} claimed by {macs:?} (bridges {bridge_macs:?}):\n{}\n{}",
            lab.speaker_log("node-1", 15),
            lab.speaker_log("node-2", 15)
        );
        assert!(macs.is_subset(&bridge_macs), "{ip}: {macs:?}");
    }
    // The announcements on the gain were captured (the test saw the frames it is about).
    assert!(
        seen.iter()
            .any(|s| matches!(s, Seen::NeighborAdvertisement { .. }) && s.ip() == IpAddr::V6(VIP6)),
        "no Neighbor Advertisement for {VIP6} captured"
    );
}

/// Issue #10 item 4: kube-proxy in IPVS mode puts every Service IP on `kube-ipvs0`; with
/// `strictARP` off every node's kernel then answers ARP for it beside the owner's speaker. The
/// speaker of such a node says so (Warning Event `KernelAnswersARP` on the Service, gauge
/// `kernel_arp_conflicts`); with strictARP's sysctls the second MAC and the gauge go away. The
/// lab's `kube-ipvs0` is a bridge device: this kernel has no dummy driver, and the kernel's ARP
/// answer depends only on the address being local, not on the device type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_kernel_answering_arp_for_an_lb_ip_is_reported_until_strict_arp() {
    use ferrolb_tests::lab::scenario::{expected_owner, has_event, metric_value};
    const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 80);
    let mut lab = Lab::start(3, 1).await.expect("lab");
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.80"],
    )
    .await
    .unwrap();
    let owner = expected_owner(VIP, &["node-1", "node-2", "node-3"]);
    let ipvs_node = ["node-1", "node-2", "node-3"]
        .into_iter()
        .find(|n| *n != owner)
        .unwrap()
        .to_owned();
    let ns = lab.node(&ipvs_node).netns.clone();
    for args in [
        &["link", "add", "kube-ipvs0", "type", "bridge"][..],
        &["addr", "add", "198.51.100.80/32", "dev", "kube-ipvs0"],
        &["link", "set", "kube-ipvs0", "up"],
    ] {
        lab.exec(&ns, "ip", args).unwrap();
    }
    for node in ["node-1", "node-2", "node-3"] {
        lab.start_speaker(node, &[]).unwrap();
    }
    let owner_mac = lab.node(&owner).mac.clone();
    let ipvs_mac = lab.node(&ipvs_node).mac.clone();

    // The fault, on the wire: two MACs answer for the IP.
    until(
        "the owner and the IPVS node's kernel both answer",
        SETTLE,
        || async {
            lab.arp_answers(0, VIP).await.unwrap()
                == BTreeSet::from([owner_mac.clone(), ipvs_mac.clone()])
        },
    )
    .await
    .unwrap();
    // The speaker of that node says so, on the Service and in its metrics.
    let words = [ipvs_node.as_str(), "kube-ipvs0", "strictARP"];
    until("a KernelAnswersARP Warning naming the node", SETTLE, || {
        has_event(&client, "svc", "KernelAnswersARP", &words)
    })
    .await
    .unwrap();
    let gauge = |body: &str| metric_value(body, "ferrolb_speaker_kernel_arp_conflicts");
    let (_, body) = lab.speaker_http(&ipvs_node, "/metrics").await.unwrap();
    assert_eq!(gauge(&body), Some(1.0), "{body}");
    let (_, body) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    assert_eq!(gauge(&body), Some(0.0));

    // strictARP: true, as kube-proxy would set it.
    for (key, value) in [("arp_ignore", "1"), ("arp_announce", "2")] {
        lab.exec(
            &ns,
            "sh",
            &[
                "-c",
                &format!("echo {value} > /proc/sys/net/ipv4/conf/all/{key}"),
            ],
        )
        .unwrap();
    }
    until("only the owner answers", SETTLE, || async {
        lab.arp_answers(0, VIP).await.unwrap() == BTreeSet::from([owner_mac.clone()])
    })
    .await
    .unwrap();
    until("the gauge drops to 0", SETTLE, || async {
        let (_, body) = lab.speaker_http(&ipvs_node, "/metrics").await.unwrap();
        gauge(&body) == Some(0.0)
    })
    .await
    .unwrap();
}

/// Issue #10 item 5: a foreign host on the LAN has a LoadBalancer IP configured and announces it
/// (50 gratuitous ARPs, 100 ms apart, both forms). The owner says so — a Warning Event
/// `IPConflict` on the Service naming the foreign MAC and the interface, the gauge
/// `ip_conflicts`, the frames counted — logs it once, not once per frame, defends the IP with a
/// single announcement (RFC 5227 §2.4, at most one per 10 s: no ARP war), and keeps answering
/// each request exactly once, as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_claiming_an_lb_ip_is_reported_and_defended_once() {
    use ferrolb_speaker::wire::arp::GratuitousForm;
    use ferrolb_tests::lab::scenario::{expected_owner, has_event, metric_value};
    const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 90);
    const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
    let mut lab = Lab::start(3, 2).await.expect("lab");
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.90"],
    )
    .await
    .unwrap();
    for node in NODES {
        lab.start_speaker(node, &[]).unwrap();
    }
    let owner = expected_owner(VIP, &NODES);
    let owner_mac = lab.node(&owner).mac.clone();
    let answers = lab
        .wait_for_owner(0, VIP, Some(&owner), SETTLE)
        .await
        .unwrap();
    assert_eq!(answers, BTreeSet::from([owner_mac.clone()]));
    // The owner's announcements on gaining the IP (0, 0.5, 2, 5 s) are over.
    until("the owner's announcements are over", SETTLE, || async {
        let seen = lab.capture(0, Duration::from_millis(3500)).await.unwrap();
        !seen
            .iter()
            .any(|s| matches!(s, Seen::GratuitousArp { .. }) && s.mac() == owner_mac)
    })
    .await
    .unwrap();

    // The foreign host: client 1, with the IP configured on its eth0.
    let foreign_ns = lab.clients[1].netns.clone();
    lab.exec(
        &foreign_ns,
        "ip",
        &["addr", "add", "198.51.100.90/32", "dev", "eth0"],
    )
    .unwrap();
    let foreign_mac = lab
        .exec(&foreign_ns, "cat", &["/sys/class/net/eth0/address"])
        .unwrap()
        .trim()
        .to_lowercase();
    let capture = lab.start_capture(0, Duration::from_secs(8));
    tokio::time::sleep(Duration::from_millis(200)).await;
    tokio::task::spawn_blocking(move || {
        ferrolb_tests::lab::within_netns(&foreign_ns, move || {
            let c = ferrolb_speaker::l2::capture::Client::open("eth0")?;
            for i in 0..50 {
                let form = if i % 2 == 0 {
                    GratuitousForm::Request
                } else {
                    GratuitousForm::Reply
                };
                c.send_gratuitous_arp(VIP, form)?;
                std::thread::sleep(Duration::from_millis(100));
            }
            Ok(())
        })
    })
    .await
    .unwrap()
    .unwrap();
    let seen = capture.await.unwrap().unwrap();
    let log = lab.speaker_log(&owner, 100_000);
    let foreign_frames = seen
        .iter()
        .filter(|s| matches!(s, Seen::GratuitousArp { .. }) && s.mac() == foreign_mac)
        .count();
    assert_eq!(foreign_frames, 50, "the watcher saw the claims");
    // One defence in 8 s (both forms of one announcement), not one per conflicting frame.
    let defences: Vec<&Seen> = seen
        .iter()
        .filter(|s| matches!(s, Seen::GratuitousArp { .. }) && s.mac() == owner_mac)
        .collect();
    assert_eq!(
        defences
            .iter()
            .map(|s| match s {
                Seen::GratuitousArp { form, .. } => *form,
                _ => unreachable!(),
            })
            .collect::<Vec<_>>(),
        ["request", "reply"],
        "{defences:?}\n{log}"
    );

    // The Warning on the Service names the foreign MAC and the interface.
    let words = [foreign_mac.as_str(), "on eth0 of", owner.as_str()];
    until(
        "an IPConflict Warning naming the foreign MAC",
        SETTLE,
        || has_event(&client, "svc", "IPConflict", &words),
    )
    .await
    .unwrap();
    let (_, body) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    assert_eq!(
        metric_value(&body, "ferrolb_speaker_ip_conflicts"),
        Some(1.0),
        "{body}"
    );
    assert_eq!(
        metric_value(
            &body,
            "ferrolb_speaker_ip_conflict_frames_total{kind=\"arp\"}"
        ),
        Some(50.0)
    );
    assert_eq!(
        metric_value(&body, "ferrolb_speaker_conflict_defenses_total"),
        Some(1.0)
    );
    for other in NODES.iter().filter(|n| **n != owner) {
        let (_, body) = lab.speaker_http(other, "/metrics").await.unwrap();
        assert_eq!(
            metric_value(&body, "ferrolb_speaker_ip_conflicts"),
            Some(0.0)
        );
    }
    // Logged once for 50 frames.
    let lines = log.lines().filter(|l| l.contains("IP conflict:")).count();
    assert_eq!(lines, 1, "{log}");

    // The owner keeps answering, once per request; the conflict adds no answers (the foreign
    // host's own kernel answers too: that is the conflict being reported).
    for _ in 0..5 {
        let seen = lab
            .arp_probe(0, VIP, Duration::from_millis(300))
            .await
            .unwrap();
        let from_owner = seen
            .iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.mac() == owner_mac)
            .count();
        assert_eq!(from_owner, 1, "{seen:?}");
    }
}

/// Issue #27 item 4: a host on the LAN claims 24 owned IPs with gratuitous ARPs, every frame from
/// a random MAC never seen before (480 MACs in about 20 s). Whatever the number of MACs, the owner
/// writes at most `MAX_REPORTS_PER_SPEAKER` `IPConflict` Events in all and at most
/// `MAX_REPORTS_PER_IP` about each IP, as the API server counts them (series included); the pool
/// condition `AddressConflict` names at most 8 addresses, each with at most 3 MACs, and counts the
/// rest; the refused reports are counted, and the gauge still counts every IP in conflict. Without
/// the bound: one Event per IP per 10 s (about 50 here) and a condition naming every address
/// and MAC.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gratuitous_arps_from_hundreds_of_random_macs_make_a_bounded_number_of_events() {
    use ferrolb_speaker::l2::capture::Client;
    use ferrolb_speaker::l2::conflict::{MAX_REPORTS_PER_IP, MAX_REPORTS_PER_SPEAKER};
    use ferrolb_speaker::wire::MacAddr;
    use ferrolb_speaker::wire::arp::{GratuitousForm, build_gratuitous_arp};
    use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
    use ferrolb_tests::lab::scenario::{lab_with_ips, metric_value};
    use k8s_openapi::api::events::v1::Event;
    use kube::api::{Api, ListParams};
    const MACS: u32 = 480;
    let ips: Vec<Ipv4Addr> = (100..124).map(|i| Ipv4Addr::new(198, 51, 100, i)).collect();
    let (mut lab, client) = lab_with_ips(1, &ips).await.expect("lab");
    lab.start_speaker("node-1", &[]).unwrap();
    let _controller = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("lab-controller"),
    )
    .unwrap();
    for ip in &ips {
        lab.wait_for_owner(0, *ip, Some("node-1"), SETTLE)
            .await
            .unwrap();
    }

    // The flood: client 0 sends each frame from a fresh random (locally administered, unicast)
    // MAC, cycling over the owned IPs, both forms, 40 ms apart.
    let netns = lab.clients[0].netns.clone();
    let targets = ips.clone();
    let sent = tokio::task::spawn_blocking(move || {
        ferrolb_tests::lab::within_netns(&netns, move || {
            let c = Client::open("eth0")?;
            let mut state = 0x9e37_79b9_7f4a_7c15_u64;
            let mut macs = BTreeSet::new();
            for i in 0..MACS {
                // xorshift64*: random bytes; the frame number keeps every MAC distinct.
                state ^= state >> 12;
                state ^= state << 25;
                state ^= state >> 27;
                let r = state.wrapping_mul(0x2545_f491_4f6c_dd1d).to_be_bytes();
                let [_, _, hi, lo] = i.to_be_bytes();
                let mac = MacAddr((r[0] & 0xfc) | 0x02, r[1], r[2], r[3], hi, lo);
                macs.insert(mac);
                let form = if i % 2 == 0 {
                    GratuitousForm::Request
                } else {
                    GratuitousForm::Reply
                };
                let ip = targets[i as usize % targets.len()];
                c.send_frame(&build_gratuitous_arp(mac, ip, form))?;
                std::thread::sleep(Duration::from_millis(40));
            }
            Ok(macs.len())
        })
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(sent, MACS as usize);
    // Every report that could be due has been tried (retries come 10 s apart) and written.
    tokio::time::sleep(Duration::from_secs(12)).await;

    let events: Vec<Event> = Api::<Event>::namespaced(client.clone(), "default")
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("IPConflict"))
        .collect();
    let mut per_service: std::collections::BTreeMap<String, usize> = Default::default();
    for e in &events {
        let writes = e.series.as_ref().map_or(1, |s| s.count.max(1)) as usize;
        let name = e.regarding.as_ref().and_then(|r| r.name.clone());
        *per_service.entry(name.unwrap_or_default()).or_default() += writes;
    }
    let total: usize = per_service.values().sum();
    let log = lab.speaker_log("node-1", 30);
    assert!(total >= 1, "no IPConflict Event at all:\n{log}");
    assert!(
        total <= MAX_REPORTS_PER_SPEAKER,
        "{total} IPConflict Events for {MACS} MACs: {per_service:?}\n{log}"
    );
    assert!(
        per_service.values().all(|n| *n <= MAX_REPORTS_PER_IP),
        "{per_service:?}"
    );
    let (_, body) = lab.speaker_http("node-1", "/metrics").await.unwrap();
    assert!(
        metric_value(&body, "ferrolb_speaker_ip_conflict_reports_withheld_total")
            .is_some_and(|n| n >= 1.0),
        "{body}"
    );
    assert_eq!(
        metric_value(&body, "ferrolb_speaker_ip_conflicts"),
        Some(ips.len() as f64),
        "the gauge still counts every IP in conflict"
    );

    // The pool condition: a few addresses and MACs named, the rest counted.
    let pools: kube::Api<ferrolb_crds::IPAddressPool> = kube::Api::all(client.clone());
    let conflict = || async {
        pools.get("pool").await.ok().and_then(|p| {
            p.status?
                .conditions
                .into_iter()
                .find(|c| c.type_ == "AddressConflict" && c.status == "True")
        })
    };
    until("the pool condition AddressConflict", SETTLE, || async {
        conflict().await.is_some()
    })
    .await
    .unwrap();
    let message = conflict().await.unwrap().message;
    let named = message.matches(" (by ").count();
    assert!((1..=8).contains(&named), "{message}");
    assert!(message.len() < 1024, "{} bytes: {message}", message.len());
    if per_service.len() > 8 {
        assert!(message.contains("more addresses"), "{message}");
    }
}

/// Issue #10: a node with two NICs on the LAN's segment answers ARP for its IP with one MAC —
/// the NIC holding the Node's InternalIP — not one per NIC (each reply would move the clients'
/// neighbour entry to another MAC).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_nics_on_one_segment_answer_with_one_mac() {
    use ferrolb_tests::lab::scenario::expected_owner;
    const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 90);
    let mut lab = Lab::start(2, 1).await.expect("lab");
    let second: BTreeSet<String> = [
        lab.add_lan_nic("node-1", "eth1", "192.0.2.51/24").unwrap(),
        lab.add_lan_nic("node-2", "eth1", "192.0.2.52/24").unwrap(),
    ]
    .into();
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.90"],
    )
    .await
    .unwrap();
    for node in ["node-1", "node-2"] {
        lab.start_speaker(node, &[]).unwrap();
    }
    let owner = expected_owner(VIP, &["node-1", "node-2"]);
    let owner_eth0 = lab.node(&owner).mac.clone();
    until("the owner answers", SETTLE, || async {
        !lab.arp_answers(0, VIP).await.unwrap().is_empty()
    })
    .await
    .unwrap();
    // Past a rescan (5 s), every probe is answered by eth0's MAC alone.
    tokio::time::sleep(Duration::from_secs(6)).await;
    for _ in 0..5 {
        let seen = lab
            .arp_probe(0, VIP, Duration::from_millis(300))
            .await
            .unwrap();
        let macs = claimed_macs(&seen, IpAddr::V4(VIP));
        assert_eq!(
            macs,
            BTreeSet::from([owner_eth0.clone()]),
            "second NICs {second:?}:\n{}",
            lab.speaker_log(&owner, 15)
        );
    }
}

/// Issue #10 item 2: on a LAN whose bridge snoops MLD (a querier sending general queries every
/// 500 ms, memberships expiring after 3 s without a report), the owner's solicited-node group stays
/// joined — the kernel answers the queries because the speaker joins with `IPV6_JOIN_GROUP` —
/// so multicast Neighbor Solicitations keep reaching it long after the membership timeout.
///
/// The querier is the test's own (`ferrolb_tests::lab::mld::Querier`, MLDv2 general queries sent
/// from `br0` every 500 ms): the Linux bridge's built-in querier was not seen querying reliably
/// here. Negative control: once the queries stop, the group leaves the bridge's table within a
/// few membership intervals — so its staying there before was the queries' and the reports'
/// doing, not a timer the test never reached.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn solicited_node_membership_survives_an_mld_snooping_bridge() {
    use ferrolb_tests::lab::mld::Querier;
    const GROUP: &str = "ff02::1:ff00:270";
    let mut lab = Lab::start_dual_stack(2, 1).await.expect("lab");
    let lan = lab.lan.clone();
    // Snooping on, membership timeout 3 s, no built-in querier: the test's querier below.
    // Multicast to unregistered groups is still flooded (queries sent from `br0` do not make the
    // bridge see a querier, and without one it floods): the NSs below would reach the owner
    // anyway, so it is the bridge's table — the group registered on the owner's report, kept
    // through the queries, expiring without them — that shows the membership.
    lab.exec(
        &lan,
        "ip",
        &[
            "link",
            "set",
            "br0",
            "type",
            "bridge",
            "mcast_snooping",
            "1",
            "mcast_querier",
            "0",
            "mcast_query_interval",
            "100",
            "mcast_query_response_interval",
            "50",
            "mcast_membership_interval",
            "300",
        ],
    )
    .unwrap();
    let querier = Querier::start(&lan, "br0", Duration::from_millis(500));
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["2001:db8:1a::200/120"],
        "svc",
        "Cluster",
        &["2001:db8:1a::270"],
    )
    .await
    .unwrap();
    for node in ["node-1", "node-2"] {
        lab.start_speaker(node, &[]).unwrap();
    }
    let answered_by_one = || async {
        let seen = lab
            .ndp_probe(0, VIP6, None, None, Duration::from_millis(300))
            .await
            .unwrap();
        claimed_macs(&seen, IpAddr::V6(VIP6)).len() == 1
    };
    until("the IPv6 IP answered", SETTLE, answered_by_one)
        .await
        .unwrap();
    let mdb = || lab.exec(&lan, "bridge", &["mdb", "show"]).unwrap();
    // The bridge learnt the group from the owner's MLD reports (the kernel sends them because
    // the speaker joins with IPV6_JOIN_GROUP).
    assert!(mdb().contains(GROUP), "{}", mdb());
    // Four membership intervals later, with queries in between: still registered, and every
    // multicast NS still answered by one MAC.
    for _ in 0..6 {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let seen = lab
            .ndp_probe(0, VIP6, None, None, Duration::from_millis(500))
            .await
            .unwrap();
        let table = mdb();
        assert!(table.contains(GROUP), "membership lost: {table}");
        assert_eq!(
            claimed_macs(&seen, IpAddr::V6(VIP6)).len(),
            1,
            "{seen:?}\nmdb: {table}"
        );
    }
    // Negative control: without queries nobody refreshes it and it expires.
    assert!(querier.stop().unwrap() >= 20);
    until("the group expires without queries", SETTLE, || async {
        !mdb().contains(GROUP)
    })
    .await
    .unwrap();
}

/// Issue #10 item 5: the controller hands out an address that a foreign host on the LAN already
/// uses. Before its first announcement the owner probes for it (RFC 5227 §2.1.1 ARP probes), the
/// foreign host's kernel answers, and the owner holds the address instead of stealing it: no node
/// sends a frame claiming it, the clients keep resolving it to the foreign host (no flapping), a
/// Warning Event `IPConflict` on the Service names the foreign MAC, and the pool's condition
/// `AddressConflict` names the address, and so does the L2Announcement report (`heldBy`). When
/// the owner's speaker crashes, the next owner does not steal it either (reviewer finding F2).
/// When the foreign host lets the address go, the owner announces it by itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pool_address_already_used_on_the_lan_is_probed_and_not_stolen() {
    use ferrolb_tests::controller::{ControllerOptions, ControllerProcess};
    use ferrolb_tests::lab::scenario::{expected_owner, has_event, metric_value};
    use ferrolb_tests::objects::{apply_l2, create_pool, create_service, lb_service};
    const TAKEN: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 91);
    const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
    let mut lab = Lab::start(3, 2).await.expect("lab");
    let client = lab.client().await.unwrap();
    create_pool(&client, "pool", &["198.51.100.91/32"])
        .await
        .unwrap();
    apply_l2(&client, "all", ferrolb_crds::L2AdvertisementSpec::default())
        .await
        .unwrap();
    for node in NODES {
        lab.start_speaker(node, &[]).unwrap();
    }
    let _controller = ControllerProcess::start(
        lab.cluster().kubeconfig(),
        lab.dir(),
        &ControllerOptions::new("lab-controller"),
    )
    .unwrap();
    // The speakers run (their first view is taken) before the address is handed out.
    for node in NODES {
        until("speaker ready", SETTLE, || async {
            lab.speaker_http(node, "/readyz")
                .await
                .is_ok_and(|(code, _)| code == 200)
        })
        .await
        .unwrap();
    }
    let owner = expected_owner(TAKEN, &NODES);
    let node_macs: BTreeSet<String> = NODES.iter().map(|n| lab.node(n).mac.clone()).collect();

    // The foreign host: client 1, with the address configured; its kernel answers for it.
    let foreign_ns = lab.clients[1].netns.clone();
    lab.exec(
        &foreign_ns,
        "ip",
        &["addr", "add", "198.51.100.91/32", "dev", "eth0"],
    )
    .unwrap();
    let foreign_mac = lab
        .exec(&foreign_ns, "cat", &["/sys/class/net/eth0/address"])
        .unwrap()
        .trim()
        .to_lowercase();

    let capture = lab.start_capture(0, Duration::from_secs(10));
    tokio::time::sleep(Duration::from_millis(200)).await;
    create_service(
        &client,
        &lb_service("default", "svc", &[("TCP", 80)], "Cluster"),
    )
    .await
    .unwrap();
    let words = [foreign_mac.as_str(), "does not announce", owner.as_str()];
    until(
        "an IPConflict Warning naming the foreign MAC",
        SETTLE,
        || has_event(&client, "svc", "IPConflict", &words),
    )
    .await
    .unwrap();
    let pools: kube::Api<ferrolb_crds::IPAddressPool> = kube::Api::all(client.clone());
    let want = format!("198.51.100.91 (by {foreign_mac})");
    until("the pool condition AddressConflict", SETTLE, || async {
        pools.get("pool").await.is_ok_and(|p| {
            p.status.is_some_and(|s| {
                s.conditions.iter().any(|c| {
                    c.type_ == "AddressConflict" && c.status == "True" && c.message.contains(&want)
                })
            })
        })
    })
    .await
    .unwrap();
    // Clients keep resolving the address to the foreign host, and only to it.
    for _ in 0..5 {
        let answers = lab.arp_answers(0, TAKEN).await.unwrap();
        assert_eq!(answers, BTreeSet::from([foreign_mac.clone()]));
    }
    let seen = capture.await.unwrap().unwrap();
    let claims: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.ip() == IpAddr::V4(TAKEN) && node_macs.contains(&s.mac().to_lowercase()))
        .collect();
    assert!(claims.is_empty(), "a node claimed the address: {claims:?}");
    let (_, body) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    assert_eq!(
        metric_value(&body, "ferrolb_speaker_held_ips"),
        Some(1.0),
        "{body}"
    );
    assert!(
        metric_value(&body, "ferrolb_speaker_address_probes_sent_total").unwrap_or(0.0) >= 3.0,
        "{body}"
    );

    // The report says who holds it (kubectl -n ferrolb-system get l2announcements).
    let reports: kube::Api<ferrolb_crds::L2Announcement> =
        kube::Api::namespaced(client.clone(), "ferrolb-system");
    let name = ferrolb_crds::announcement_name(TAKEN.into());
    until("the report names the foreign host", SETTLE, || async {
        reports.get_opt(&name).await.unwrap().is_some_and(|r| {
            r.spec.node == owner
                && r.spec.interfaces.is_empty()
                && r.spec.held_by.as_deref() == Some(foreign_mac.as_str())
        })
    })
    .await
    .unwrap();

    // The owner's speaker crashes: the next owner must not steal the address either (it is no
    // longer newly assigned; the report tells it to probe first).
    let rest: Vec<&str> = NODES.iter().copied().filter(|n| *n != owner).collect();
    let owner = expected_owner(TAKEN, &rest);
    let capture = lab.start_capture(0, Duration::from_secs(6));
    tokio::time::sleep(Duration::from_millis(200)).await;
    lab.signal_speaker(&expected_owner(TAKEN, &NODES), "KILL")
        .unwrap();
    until("the new owner holds it", SETTLE, || async {
        lab.speaker_http(&owner, "/metrics")
            .await
            .is_ok_and(|(_, body)| metric_value(&body, "ferrolb_speaker_held_ips") == Some(1.0))
    })
    .await
    .unwrap();
    let seen = capture.await.unwrap().unwrap();
    let claims: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.ip() == IpAddr::V4(TAKEN) && node_macs.contains(&s.mac().to_lowercase()))
        .collect();
    assert!(
        claims.is_empty(),
        "the new owner claimed the address: {claims:?}"
    );
    let answers = lab.arp_answers(0, TAKEN).await.unwrap();
    assert_eq!(answers, BTreeSet::from([foreign_mac.clone()]));

    // The foreign host lets the address go: the owner announces it on its own.
    lab.exec(
        &foreign_ns,
        "ip",
        &["addr", "del", "198.51.100.91/32", "dev", "eth0"],
    )
    .unwrap();
    let owner_mac = lab.node(&owner).mac.clone();
    let answers = lab
        .wait_for_owner(0, TAKEN, Some(&owner), SETTLE)
        .await
        .unwrap();
    assert_eq!(answers, BTreeSet::from([owner_mac]));
    let (_, body) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    assert_eq!(metric_value(&body, "ferrolb_speaker_held_ips"), Some(0.0));
}

/// Issue #32 G5.5 on real frames: every node has `eth0` on the LAN (its InternalIP, the
/// membership) and `eth1` on a second segment, the clients' (the pool's subnet is on `eth1`).
/// The owner's `eth1` loses carrier (its LAN end goes down; `eth1` stays administratively up and
/// `eth0` keeps carrier): another node answers the client on that segment within T_fo, and no
/// probe is ever answered by two nodes. Before G5.5 the owner stayed eligible (one interface
/// had carrier) and the client's probes went unanswered for as long as the link was down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn g5_5_carrier_loss_on_the_client_facing_nic_hands_the_ip_over() {
    use ferrolb_tests::lab::scenario::expected_owner;
    const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 90);
    /// The fast profile's failover bound the simulator checks (I-failover at 3 nodes).
    const T_FO: Duration = Duration::from_millis(1_500);
    let nodes = ["node-1", "node-2", "node-3"];
    let mut lab = Lab::start(3, 1).await.expect("lab");
    lab.move_client_to_segment(0, "br1").unwrap();
    let mut eth1 = std::collections::BTreeMap::new();
    for (i, node) in nodes.iter().enumerate() {
        let addr = format!("198.51.100.{}/24", 11 + i);
        let mac = lab.add_segment_nic(node, "eth1", &addr, "br1").unwrap();
        eth1.insert(mac.to_lowercase(), node.to_string());
    }
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.90"],
    )
    .await
    .unwrap();
    for node in nodes {
        lab.start_speaker(node, &[]).unwrap();
    }
    let owner = expected_owner(VIP, &nodes);
    let answerers = |seen: &[Seen]| -> BTreeSet<String> {
        seen.iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == IpAddr::V4(VIP))
            .map(|s| {
                eth1.get(&s.mac().to_lowercase())
                    .cloned()
                    .unwrap_or(s.mac().into())
            })
            .collect()
    };
    until(
        "the owner answers on the clients' segment",
        SETTLE,
        || async {
            answerers(
                &lab.arp_probe(0, VIP, Duration::from_millis(200))
                    .await
                    .unwrap(),
            ) == BTreeSet::from([owner.clone()])
        },
    )
    .await
    .unwrap();
    lab.set_segment_port(&owner, "eth1", false).unwrap();
    let cut = std::time::Instant::now();
    let mut first_other = None;
    let mut probes = 0;
    while cut.elapsed() < Duration::from_secs(6) {
        let seen = lab
            .arp_probe(0, VIP, Duration::from_millis(50))
            .await
            .unwrap();
        probes += 1;
        let who = answerers(&seen);
        assert!(
            who.len() <= 1,
            "two answerers {who:?} {:?} after the cut",
            cut.elapsed()
        );
        assert!(
            !who.contains(&owner),
            "the owner's eth1 has no carrier: {who:?}"
        );
        if first_other.is_none() && !who.is_empty() {
            first_other = Some(cut.elapsed());
        }
    }
    let took = first_other.unwrap_or_else(|| {
        panic!(
            "nobody answered within 6 s of the owner's client link losing carrier:\n{}",
            lab.speaker_log(&owner, 20)
        )
    });
    eprintln!(
        "G5.5: another node answered {took:?} after the cut; {probes} probes, none answered twice"
    );
    assert!(took <= T_FO, "{took:?}");
}
