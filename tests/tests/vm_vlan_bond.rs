//! Speakers on 802.1Q VLAN sub-interfaces and bonds, real frames on a real distribution kernel
//! (issue #30; issue #10 item 1, "frame identity"): this machine's kernel has no 802.1Q or bonding
//! driver, so each test runs in the VM lab (`ferrolb_tests::vm`, Debian's kernel under qemu), the
//! whole lab — cluster, node and client namespaces, speakers — inside the guest. Speakers there run
//! the `safe` timing profile ([`GUEST_TIMING`]).
//!
//! What is checked is what crosses the wire: `ferrolb_tests::lab::frames` reads each ARP frame's
//! 802.1Q tag (from the kernel, through a socket filter: a receiving kernel takes the tag out of
//! the frame before any packet socket sees it) on the clients' parent interfaces and on the switch
//! ends of the nodes' cables, so a reply or a gratuitous ARP is known by VLAN, by Ethernet source,
//! by claimed MAC and by the cable it came down.
//!
//! The LAN bridge has no `vlan_filtering`: every VLAN shares the wire (all ports are trunks), so a
//! frame on the wrong VLAN, or untagged, would reach every client.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr};
use std::time::{Duration, Instant};

use ferrolb_crds::{L2Announcement, announcement_name};
use ferrolb_tests::lab::bonds::{BondMode, BondedNode, SwitchSide};
use ferrolb_tests::lab::frames::{WireArp, WireCaptures, probe_on_the_wire};
use ferrolb_tests::lab::scenario::{expected_owner, metric_value};
use ferrolb_tests::lab::{Lab, Seen, in_netns};
use ferrolb_tests::objects::announced_service;
use ferrolb_tests::poll::{until, until_some};
use ferrolb_tests::vm::{GUEST_TIMING, run_in_guest};
use kube::Api;

const VIP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 70);
const NODES: [&str; 2] = ["node-1", "node-2"];
const SPEAKER_ARGS: [&str; 2] = ["--timing-profile", GUEST_TIMING];
/// The VLAN the nodes are on, and another one.
const VID: u16 = 100;
const OTHER_VID: u16 = 200;
/// Every VLAN of the lab, and untagged: what the wire captures sort frames by.
const VLANS: [Option<u16>; 3] = [None, Some(VID), Some(OTHER_VID)];
/// How long a guest run may take, boot included.
const GUEST_TIMEOUT: Duration = Duration::from_secs(420);
/// How long the guest's speakers get to elect and answer (the emulated guest is slow).
const SETTLE: Duration = Duration::from_secs(90);
/// How long a probe listens for replies.
const LISTEN: Duration = Duration::from_millis(800);

/// The MACs of the ARP replies for `ip` a probe client saw, each checked against the frame's
/// Ethernet source.
fn replies(seen: &[Seen], ip: Ipv4Addr) -> BTreeSet<String> {
    seen.iter()
        .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == IpAddr::V4(ip))
        .map(|s| {
            if let Seen::ArpReply { mac, eth_src, .. } = s {
                assert!(mac.eq_ignore_ascii_case(eth_src), "{s:?}");
            }
            s.mac().to_lowercase()
        })
        .collect()
}

/// The frames on a wire that claim `ip` (replies and gratuitous ARPs).
fn claims(frames: &[WireArp], ip: Ipv4Addr) -> Vec<&WireArp> {
    frames.iter().filter(|w| w.claims(ip)).collect()
}

/// The L2Announcement of `ip`: (node, interfaces), once written.
async fn announcement(lab: &Lab, ip: Ipv4Addr) -> Option<(String, Vec<String>)> {
    let api: Api<L2Announcement> = Api::namespaced(lab.client().await.ok()?, "ferrolb-system");
    let a = api.get_opt(&announcement_name(ip.into())).await.ok()??;
    Some((a.spec.node, a.spec.interfaces))
}

fn dropped_other_interface(metrics: &str) -> f64 {
    metric_value(
        metrics,
        "ferrolb_speaker_frames_dropped_total{reason=\"other_interface\"}",
    )
    .unwrap_or(0.0)
}

/// Nodes whose addresses are on `eth0.100` (their `eth0` carries none), two clients on VLAN 100
/// and 200 (`eth0.100`, `eth0.200`) and one untagged. A request tagged 100 is answered tagged 100
/// by the owner's MAC, and every frame claiming the IP anywhere on the LAN — gain announcements
/// included — is tagged 100; the untagged client and the client on VLAN 200 get no answer.
///
/// Then each node's parent `eth0` gets an untagged address of its own (another subnet): the default
/// interface set now serves the IP untagged there too (the untagged client is answered, by the same
/// MAC), but a request tagged 100 — which the kernel also hands to the parent's socket, with
/// `sll_ifindex` naming `eth0.100` — is still answered tagged only, never a second time untagged
/// from the parent (`Received::arrived_on`; the parent counts it under `other_interface`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vlan_sub_interface_answers_tagged_on_its_own_vlan_only() {
    if !run_in_guest(
        "a_vlan_sub_interface_answers_tagged_on_its_own_vlan_only",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    let started = Instant::now();
    let mut lab = Lab::start(NODES.len(), 3).await.expect("lab");
    for node in NODES {
        lab.move_node_to_vlan(node, "eth0", VID).unwrap();
    }
    let on_vlan = lab.move_client_to_vlan(0, VID).unwrap();
    let on_other = lab.move_client_to_vlan(1, OTHER_VID).unwrap();
    let (c_vlan, c_other, c_untagged) = (
        lab.client_netns(0).unwrap(),
        lab.client_netns(1).unwrap(),
        lab.client_netns(2).unwrap(),
    );
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.70"],
    )
    .await
    .unwrap();
    // Every client's wire, from before the speakers start: their gain announcements are in it.
    let watch = WireCaptures::start(
        &[(&c_vlan, "eth0"), (&c_other, "eth0"), (&c_untagged, "eth0")],
        &VLANS,
        Duration::from_secs(600),
    )
    .await
    .unwrap();
    for node in NODES {
        lab.start_speaker(node, &SPEAKER_ARGS).unwrap();
    }
    let owner = expected_owner(VIP, &NODES);
    let owner_mac = lab.node(&owner).mac.clone();
    println!("lab ready, speakers started: {:?}", started.elapsed());

    until(
        "the VLAN 100 client answered by the owner",
        SETTLE,
        || async {
            let (seen, _) = probe_on_the_wire(&c_vlan, &on_vlan, "eth0", &VLANS, VIP, LISTEN)
                .await
                .unwrap();
            replies(&seen, VIP) == BTreeSet::from([owner_mac.clone()])
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.speaker_log(&owner, 30)));
    println!("answered on VLAN {VID}: {:?}", started.elapsed());

    for _ in 0..3 {
        // Tagged 100: answered tagged 100, by the owner's MAC, on the client's sub-interface.
        let (seen, wire) = probe_on_the_wire(&c_vlan, &on_vlan, "eth0", &VLANS, VIP, LISTEN)
            .await
            .unwrap();
        assert_eq!(replies(&seen, VIP), BTreeSet::from([owner_mac.clone()]));
        let answers: Vec<&WireArp> = claims(&wire, VIP)
            .into_iter()
            .filter(|w| !w.gratuitous())
            .collect();
        assert!(!answers.is_empty(), "no reply on the wire: {wire:?}");
        for w in answers {
            assert_eq!(w.vlan, Some(VID), "{w:?}");
            assert_eq!(
                (&w.sender_mac, &w.eth_src),
                (&owner_mac, &owner_mac),
                "{w:?}"
            );
        }
        // Untagged, and on VLAN 200: no answer at all.
        for (netns, interface) in [(&c_untagged, "eth0"), (&c_other, on_other.as_str())] {
            let (seen, wire) = probe_on_the_wire(netns, interface, "eth0", &VLANS, VIP, LISTEN)
                .await
                .unwrap();
            assert!(replies(&seen, VIP).is_empty(), "{interface}: {seen:?}");
            let answers: Vec<&WireArp> = claims(&wire, VIP)
                .into_iter()
                .filter(|w| !w.gratuitous())
                .collect();
            assert!(answers.is_empty(), "{interface}: {answers:?}");
        }
    }
    let named = until_some("the L2Announcement", SETTLE, || async {
        announcement(&lab, VIP).await
    })
    .await
    .unwrap();
    assert_eq!(named, (owner.clone(), vec![format!("eth0.{VID}")]));

    // Every frame claiming the IP on any client's wire, from the speakers' start on: tagged 100,
    // the owner's MAC. The untagged and VLAN 200 clients' wires carry them too (the bridge
    // floods VLAN 100's broadcasts to every port): the tag is what keeps them off those VLANs.
    for (wire, frames) in watch.finish().await.unwrap() {
        let claimed = claims(&frames, VIP);
        let mut by_vlan: BTreeMap<Option<u16>, usize> = BTreeMap::new();
        for w in &claimed {
            *by_vlan.entry(w.vlan).or_default() += 1;
        }
        println!("{wire}: frames claiming {VIP} by VLAN {by_vlan:?}");
        assert!(
            claimed.iter().any(|w| w.gratuitous()),
            "{wire}: no gratuitous ARP for {VIP} seen: {frames:?}"
        );
        for w in claimed {
            assert_eq!(w.vlan, Some(VID), "{wire}: {w:?}");
            assert_eq!(
                (&w.sender_mac, &w.eth_src),
                (&owner_mac, &owner_mac),
                "{wire}: {w:?}"
            );
        }
    }
    println!(
        "phase 1 (address on eth0.{VID} only) done: {:?}",
        started.elapsed()
    );

    // The parent gets an untagged address of its own: it serves the IP untagged too.
    for (k, node) in NODES.iter().enumerate() {
        in_netns(
            &lab.node(node).netns,
            "ip",
            &[
                "addr",
                "add",
                &format!("10.0.0.{}/24", 11 + k),
                "dev",
                "eth0",
            ],
        )
        .unwrap();
    }
    until(
        "the untagged client answered from the parent",
        SETTLE,
        || async {
            let (seen, _) = probe_on_the_wire(&c_untagged, "eth0", "eth0", &VLANS, VIP, LISTEN)
                .await
                .unwrap();
            replies(&seen, VIP) == BTreeSet::from([owner_mac.clone()])
        },
    )
    .await
    .unwrap();
    let (_, metrics) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    let dropped_before = dropped_other_interface(&metrics);
    for _ in 0..3 {
        let (seen, wire) = probe_on_the_wire(&c_vlan, &on_vlan, "eth0", &VLANS, VIP, LISTEN)
            .await
            .unwrap();
        assert_eq!(replies(&seen, VIP), BTreeSet::from([owner_mac.clone()]));
        let answers: Vec<&WireArp> = claims(&wire, VIP)
            .into_iter()
            .filter(|w| !w.gratuitous())
            .collect();
        assert!(!answers.is_empty(), "no reply on the wire: {wire:?}");
        for w in answers {
            assert_eq!(
                w.vlan,
                Some(VID),
                "a tagged request answered untagged: {w:?}\n{}",
                lab.speaker_log(&owner, 20)
            );
        }
    }
    let (_, metrics) = lab.speaker_http(&owner, "/metrics").await.unwrap();
    let dropped_after = dropped_other_interface(&metrics);
    assert!(
        dropped_after >= dropped_before + 3.0,
        "the parent's socket did not see the tagged requests: {dropped_before} -> {dropped_after}"
    );
    println!(
        "phase 2 (untagged address on eth0 too) done, other_interface drops \
         {dropped_before} -> {dropped_after}: {:?}",
        started.elapsed()
    );
}

/// The bond MACs of the lab's nodes (`02:00:5e:30:00:0<k>`), distinct from every slave's own.
fn bond_mac(k: usize) -> String {
    format!("02:00:5e:30:00:{:02x}", k + 1)
}

/// Bonds every node of `lab` in `mode`, the switch side as `switch`.
fn bond_every_node(lab: &mut Lab, mode: BondMode, switch: SwitchSide) -> Vec<BondedNode> {
    NODES
        .iter()
        .enumerate()
        .map(|(k, node)| lab.bond_node(node, mode, &bond_mac(k), switch).unwrap())
        .collect()
}

/// Creates the Service of [`VIP`], starts capturing on the switch end of every node's cable (for
/// `vlans`), then starts the speakers: returns the capture and the owner's node name.
async fn serve_on_bonds(
    lab: &mut Lab,
    bonds: &[BondedNode],
    vlans: &[Option<u16>],
) -> (WireCaptures, String) {
    let client = lab.client().await.unwrap();
    announced_service(
        &client,
        &["198.51.100.64/27"],
        "svc",
        "Cluster",
        &["198.51.100.70"],
    )
    .await
    .unwrap();
    let watch = WireCaptures::start(&switch_ends(lab, bonds), vlans, Duration::from_secs(600))
        .await
        .unwrap();
    for node in NODES {
        lab.start_speaker(node, &SPEAKER_ARGS).unwrap();
    }
    (watch, expected_owner(VIP, &NODES))
}

/// Every switch end of every bond's cables, as `(LAN namespace, port)`.
fn switch_ends<'a>(lab: &'a Lab, bonds: &'a [BondedNode]) -> Vec<(&'a str, &'a str)> {
    bonds
        .iter()
        .flat_map(|b| b.slaves.iter())
        .map(|s| (lab.lan.as_str(), s.switch_port.as_str()))
        .collect()
}

/// Checks what came down the nodes' cables (`captured`: per switch end, named `lan/port`): every
/// frame claiming `ip` says `owner`'s bond MAC, from that MAC (never a slave's own MAC, of any
/// bond), tagged `vlan`, and came down one of `allowed_ports`. Returns how many frames claimed it
/// per port.
fn check_bond_claims(
    captured: &[(String, Vec<WireArp>)],
    bonds: &[BondedNode],
    owner: &BondedNode,
    vlan: Option<u16>,
    allowed_ports: &[&str],
    ip: Ipv4Addr,
) -> BTreeMap<String, usize> {
    let slave_macs: BTreeSet<&str> = bonds
        .iter()
        .flat_map(|b| b.slaves.iter())
        .map(|s| s.permanent_mac.as_str())
        .collect();
    let mut counts = BTreeMap::new();
    for (wire, frames) in captured {
        let port = wire.rsplit('/').next().unwrap_or_default();
        let claimed = claims(frames, ip);
        for w in &claimed {
            assert!(
                !slave_macs.contains(w.sender_mac.as_str())
                    && !slave_macs.contains(w.eth_src.as_str()),
                "{wire}: a slave's own MAC claims {ip}: {w:?}"
            );
            assert_eq!(
                (&w.sender_mac, &w.eth_src),
                (&owner.mac, &owner.mac),
                "{wire}: {w:?}"
            );
            assert_eq!(w.vlan, vlan, "{wire}: {w:?}");
        }
        assert!(
            claimed.is_empty() || allowed_ports.contains(&port),
            "{ip} claimed down the cable of {port} (allowed: {allowed_ports:?}): {claimed:?}"
        );
        *counts.entry(port.to_owned()).or_default() += claimed.len();
    }
    counts
}

/// How long the owner may take to announce the IP again after its bond failed over to the other
/// slave: the `safe` profile's suspect timeout (5 s) — a local failover must not leave the
/// switch's view of the IP stale for longer than a dead node's IP waits for another owner.
const REANNOUNCE_BOUND: Duration = Duration::from_secs(5);

/// Pulls the cable of `owner`'s active slave and checks the failover: the bond switches to the
/// other slave, and within [`REANNOUNCE_BOUND`] a gratuitous ARP for `ip` (tagged `vlan`, the
/// bond's MAC) comes down the new active slave's cable; the frames claiming `ip` then all come
/// down that cable. Returns (how long the bond took to fail over, the first gratuitous ARP after
/// the pull).
async fn fail_over(
    lab: &Lab,
    bonds: &[BondedNode],
    owner: &BondedNode,
    vlan: Option<u16>,
    ip: Ipv4Addr,
) -> (Duration, Duration) {
    let active = lab
        .active_slave(&owner.node)
        .unwrap()
        .expect("an active slave");
    let old = owner.slave(&active).clone();
    let new = owner
        .slaves
        .iter()
        .find(|s| s.name != active)
        .unwrap()
        .clone();
    let vlans: Vec<Option<u16>> = vec![vlan];
    let quiet = quiet_announcements(lab, &owner.node).await;
    let watch = WireCaptures::start(&switch_ends(lab, bonds), &vlans, Duration::from_secs(600))
        .await
        .unwrap();
    let pulled = Instant::now();
    lab.set_bond_cable(&old, false).unwrap();
    let failed_over = until_some("the bond to fail over", SETTLE, || async {
        (lab.active_slave(&owner.node).unwrap().as_deref() == Some(new.name.as_str()))
            .then(|| pulled.elapsed())
    })
    .await
    .unwrap();
    tokio::time::sleep_until((pulled + REANNOUNCE_BOUND).into()).await;
    let captured = watch.finish().await.unwrap();
    let counts = check_bond_claims(&captured, bonds, owner, vlan, &[&new.switch_port], ip);
    let first_gratuitous = captured
        .iter()
        .filter(|(wire, _)| wire.ends_with(&format!("/{}", new.switch_port)))
        .flat_map(|(_, frames)| frames.iter())
        .filter(|w| w.claims(ip) && w.gratuitous() && w.seen_at > pulled)
        .map(|w| w.seen_at - pulled)
        .min();
    println!(
        "announcements quiet after {quiet:?}; cable of {} pulled: bond on {} after \
         {failed_over:?}; claims per cable {counts:?}; first gratuitous ARP down {}'s cable \
         after {first_gratuitous:?}",
        old.name, new.name, new.name
    );
    let first_gratuitous = first_gratuitous.unwrap_or_else(|| {
        panic!(
            "no gratuitous ARP for {ip} down the new active slave's cable within \
             {REANNOUNCE_BOUND:?} of the failover:\n{}",
            lab.speaker_log(&owner.node, 30)
        )
    });
    (failed_over, first_gratuitous)
}

/// How long the owner's gratuitous ARP count must stay still before a failover is staged: longer
/// than the largest gap of the default announcement schedule (0, 0.5, 2, 5 s: 3 s), so the burst
/// that followed the gain is over and a gratuitous ARP after the failover is the failover's.
const QUIET: Duration = Duration::from_secs(4);

/// Waits until node `node`'s speaker has sent no gratuitous ARP for [`QUIET`]; returns how long
/// that took.
async fn quiet_announcements(lab: &Lab, node: &str) -> Duration {
    let started = Instant::now();
    let sent = || async {
        let (_, body) = lab.speaker_http(node, "/metrics").await.unwrap();
        metric_value(&body, "ferrolb_speaker_gratuitous_arp_sent_total").unwrap_or(0.0)
    };
    let mut last = (sent().await, Instant::now());
    loop {
        assert!(
            started.elapsed() < SETTLE,
            "{node} kept announcing for {SETTLE:?}"
        );
        tokio::time::sleep(ferrolb_tests::poll::INTERVAL).await;
        let now = sent().await;
        if now != last.0 {
            last = (now, Instant::now());
        }
        if last.1.elapsed() >= QUIET {
            return started.elapsed();
        }
    }
}

/// `until` the client answers for `ip` with exactly `mac`.
async fn wait_for_answer(lab: &Lab, client: usize, ip: Ipv4Addr, mac: &str, node: &str) {
    until("the owner's bond answers", SETTLE, || async {
        lab.arp_answers(client, ip).await.unwrap() == BTreeSet::from([mac.to_owned()])
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.speaker_log(node, 30)));
}

/// Probes `ip` from client `client` through `probe_interface` three times, checking each answer
/// is `mac` alone; captures the cables meanwhile and returns them.
async fn probe_through_cables(
    lab: &Lab,
    bonds: &[BondedNode],
    client: usize,
    probe_interface: &str,
    vlans: &[Option<u16>],
    ip: Ipv4Addr,
    mac: &str,
) -> Vec<(String, Vec<WireArp>)> {
    let watch = WireCaptures::start(&switch_ends(lab, bonds), vlans, Duration::from_secs(600))
        .await
        .unwrap();
    let netns = lab.client_netns(client).unwrap();
    for _ in 0..3 {
        let (seen, _) = probe_on_the_wire(&netns, probe_interface, "eth0", vlans, ip, LISTEN)
            .await
            .unwrap();
        assert_eq!(replies(&seen, ip), BTreeSet::from([mac.to_owned()]));
    }
    watch.finish().await.unwrap()
}

/// The owner's bond in `active-backup` over two bridge ports, with a MAC of its own: every frame
/// claiming the IP — gain announcements, replies — says the bond's MAC, from the bond's MAC, and
/// comes down the active slave's cable only; the L2Announcement names `bond0`, never a slave.
/// Then the active slave's cable is pulled: the bond fails over, the owner announces the IP again
/// down the new active slave's cable within [`REANNOUNCE_BOUND`], and ARP is still answered —
/// by the same node, the same MAC, down the new cable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_active_backup_bond_claims_with_its_own_mac_and_reannounces_after_failover() {
    if !run_in_guest(
        "an_active_backup_bond_claims_with_its_own_mac_and_reannounces_after_failover",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    let started = Instant::now();
    let mut lab = Lab::start(NODES.len(), 1).await.expect("lab");
    let bonds = bond_every_node(&mut lab, BondMode::ActiveBackup, SwitchSide::Ports);
    let (watch, owner_name) = serve_on_bonds(&mut lab, &bonds, &[None]).await;
    let owner = bonds.iter().find(|b| b.node == owner_name).unwrap();
    println!("lab ready, speakers started: {:?}", started.elapsed());
    wait_for_answer(&lab, 0, VIP, &owner.mac, &owner.node).await;
    println!("answered: {:?}", started.elapsed());
    let active = lab
        .active_slave(&owner.node)
        .unwrap()
        .expect("an active slave");
    let active_port = owner.slave(&active).switch_port.clone();
    let mut captured = watch.finish().await.unwrap();
    captured.extend(probe_through_cables(&lab, &bonds, 0, "eth0", &[None], VIP, &owner.mac).await);
    let counts = check_bond_claims(&captured, &bonds, owner, None, &[&active_port], VIP);
    println!("claims per cable (active {active} at {active_port}): {counts:?}");
    assert!(
        captured
            .iter()
            .filter(|(wire, _)| wire.ends_with(&format!("/{active_port}")))
            .flat_map(|(_, frames)| frames.iter())
            .any(|w| w.claims(VIP) && w.gratuitous()),
        "no gain announcement down the active cable"
    );
    // What the speaker reports: the bond, never a slave.
    let named = until_some("the L2Announcement", SETTLE, || async {
        announcement(&lab, VIP).await
    })
    .await
    .unwrap();
    assert_eq!(named, (owner.node.clone(), vec!["bond0".to_owned()]));

    fail_over(&lab, &bonds, owner, None, VIP).await;
    let new_active = lab
        .active_slave(&owner.node)
        .unwrap()
        .expect("an active slave");
    let new_port = owner.slave(&new_active).switch_port.clone();
    let captured = probe_through_cables(&lab, &bonds, 0, "eth0", &[None], VIP, &owner.mac).await;
    let counts = check_bond_claims(&captured, &bonds, owner, None, &[&new_port], VIP);
    assert!(counts.get(&new_port).is_some_and(|n| *n > 0), "{counts:?}");
    assert_eq!(
        announcement(&lab, VIP).await,
        Some((owner.node.clone(), vec!["bond0".to_owned()]))
    );
    println!("done: {:?}", started.elapsed());
}

/// The owner's bond in `balance-xor` (or `802.3ad`) over a bond of the same mode on the switch
/// side, a static LAG (or the LACP partner) as the bond expects: every frame claiming the IP says
/// the bond's MAC, from the bond's MAC, whichever cable it comes down; the L2Announcement names
/// `bond0`; with one cable pulled the IP is still answered, by the same MAC.
async fn aggregated_bond(mode: BondMode) {
    let started = Instant::now();
    let mut lab = Lab::start(NODES.len(), 1).await.expect("lab");
    let bonds = bond_every_node(&mut lab, mode, SwitchSide::Bond);
    if mode == BondMode::Lacp {
        // Both ends of each node's LAG agree on one aggregator of both cables.
        for b in &bonds {
            let netns = lab.node(&b.node).netns.clone();
            let switch = b.switch_bond.clone().unwrap();
            let lan = lab.lan.clone();
            until_some("LACP to aggregate both cables", SETTLE, || async {
                let node_side = lab.bond_report(&netns, "bond0").unwrap();
                let switch_side = lab.bond_report(&lan, &switch).unwrap();
                [&node_side, &switch_side]
                    .iter()
                    .all(|r| lacp_up(r))
                    .then_some(())
            })
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "{e}\n{}\n{}",
                    lab.bond_report(&netns, "bond0").unwrap_or_default(),
                    lab.bond_report(&lan, &switch).unwrap_or_default()
                )
            });
        }
        println!("LACP up on every node: {:?}", started.elapsed());
    }
    let (watch, owner_name) = serve_on_bonds(&mut lab, &bonds, &[None]).await;
    let owner = bonds.iter().find(|b| b.node == owner_name).unwrap();
    println!("lab ready, speakers started: {:?}", started.elapsed());
    wait_for_answer(&lab, 0, VIP, &owner.mac, &owner.node).await;
    println!("answered: {:?}", started.elapsed());
    let mut captured = watch.finish().await.unwrap();
    captured.extend(probe_through_cables(&lab, &bonds, 0, "eth0", &[None], VIP, &owner.mac).await);
    let owner_ports: Vec<&str> = owner
        .slaves
        .iter()
        .map(|s| s.switch_port.as_str())
        .collect();
    let counts = check_bond_claims(&captured, &bonds, owner, None, &owner_ports, VIP);
    println!("claims per cable: {counts:?}");
    assert!(
        counts.iter().any(|(_, n)| *n > 0),
        "no frame claiming {VIP} came down the owner's cables"
    );
    // What the speaker reports: the bond, never a slave.
    let named = until_some("the L2Announcement", SETTLE, || async {
        announcement(&lab, VIP).await
    })
    .await
    .unwrap();
    assert_eq!(named, (owner.node.clone(), vec!["bond0".to_owned()]));

    // One cable pulled (the one the replies came down, if any): still answered, the same MAC.
    let busiest = counts
        .iter()
        .filter(|(port, _)| owner_ports.contains(&port.as_str()))
        .max_by_key(|(_, n)| *n)
        .map(|(port, _)| port.clone())
        .unwrap();
    let slave = owner.slave_at_port(&busiest).unwrap().clone();
    let pulled = Instant::now();
    lab.set_bond_cable(&slave, false).unwrap();
    let remaining: Vec<&str> = owner_ports
        .iter()
        .copied()
        .filter(|p| *p != busiest)
        .collect();
    wait_for_answer(&lab, 0, VIP, &owner.mac, &owner.node).await;
    let answered = pulled.elapsed();
    let captured = probe_through_cables(&lab, &bonds, 0, "eth0", &[None], VIP, &owner.mac).await;
    let counts = check_bond_claims(&captured, &bonds, owner, None, &remaining, VIP);
    println!(
        "cable of {} pulled: answered {answered:?} after, claims per cable {counts:?}; done: {:?}",
        slave.name,
        started.elapsed()
    );
}

/// Whether a `/proc/net/bonding` report of an `802.3ad` bond shows an aggregator with both cables
/// and a partner.
fn lacp_up(report: &str) -> bool {
    let active = report
        .split("Active Aggregator Info:")
        .nth(1)
        .unwrap_or_default();
    active.contains("Number of ports: 2")
        && !active.contains("Partner Mac Address: 00:00:00:00:00:00")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_balance_xor_bond_claims_with_its_own_mac_down_either_cable() {
    if !run_in_guest(
        "a_balance_xor_bond_claims_with_its_own_mac_down_either_cable",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    aggregated_bond(BondMode::BalanceXor).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_lacp_bond_claims_with_its_own_mac_down_either_cable() {
    if !run_in_guest(
        "an_lacp_bond_claims_with_its_own_mac_down_either_cable",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    aggregated_bond(BondMode::Lacp).await;
}

/// The node's address on `bond0.100`, a VLAN on an `active-backup` bond: a request tagged 100 is
/// answered tagged 100 by the bond's MAC, down the active slave's cable; every frame claiming the
/// IP is tagged 100 and says the bond's MAC; an untagged request gets nothing; the L2Announcement
/// names `bond0.100`. After a failover the owner announces the IP again, tagged 100, down the new
/// active slave's cable (the bond's peer notification reaches the VLAN on top of it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vlan_on_a_bond_answers_tagged_with_the_bond_mac() {
    if !run_in_guest(
        "a_vlan_on_a_bond_answers_tagged_with_the_bond_mac",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    let started = Instant::now();
    let mut lab = Lab::start(NODES.len(), 2).await.expect("lab");
    let bonds = bond_every_node(&mut lab, BondMode::ActiveBackup, SwitchSide::Ports);
    for node in NODES {
        lab.move_node_to_vlan(node, "bond0", VID).unwrap();
    }
    let on_vlan = lab.move_client_to_vlan(0, VID).unwrap();
    let c_untagged = lab.client_netns(1).unwrap();
    let (watch, owner_name) = serve_on_bonds(&mut lab, &bonds, &VLANS).await;
    let owner = bonds.iter().find(|b| b.node == owner_name).unwrap();
    println!("lab ready, speakers started: {:?}", started.elapsed());
    let c_vlan = lab.client_netns(0).unwrap();
    until(
        "the VLAN 100 client answered by the owner's bond",
        SETTLE,
        || async {
            let (seen, _) = probe_on_the_wire(&c_vlan, &on_vlan, "eth0", &VLANS, VIP, LISTEN)
                .await
                .unwrap();
            replies(&seen, VIP) == BTreeSet::from([owner.mac.clone()])
        },
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", lab.speaker_log(&owner.node, 30)));
    println!("answered on VLAN {VID}: {:?}", started.elapsed());
    let active = lab
        .active_slave(&owner.node)
        .unwrap()
        .expect("an active slave");
    let active_port = owner.slave(&active).switch_port.clone();
    for _ in 0..3 {
        let (seen, wire) = probe_on_the_wire(&c_untagged, "eth0", "eth0", &VLANS, VIP, LISTEN)
            .await
            .unwrap();
        assert!(replies(&seen, VIP).is_empty(), "untagged: {seen:?}");
        assert!(
            claims(&wire, VIP).iter().all(|w| w.gratuitous()),
            "untagged: {wire:?}"
        );
    }
    let mut captured = watch.finish().await.unwrap();
    captured.extend(probe_through_cables(&lab, &bonds, 0, &on_vlan, &VLANS, VIP, &owner.mac).await);
    let counts = check_bond_claims(&captured, &bonds, owner, Some(VID), &[&active_port], VIP);
    println!("claims per cable (active {active} at {active_port}): {counts:?}");
    assert!(
        captured
            .iter()
            .filter(|(wire, _)| wire.ends_with(&format!("/{active_port}")))
            .flat_map(|(_, frames)| frames.iter())
            .any(|w| w.claims(VIP) && !w.gratuitous()),
        "no reply down the active cable"
    );
    // What the speaker reports: the VLAN on the bond, nothing else.
    let named = until_some("the L2Announcement", SETTLE, || async {
        announcement(&lab, VIP).await
    })
    .await
    .unwrap();
    assert_eq!(named, (owner.node.clone(), vec![format!("bond0.{VID}")]));

    fail_over(&lab, &bonds, owner, Some(VID), VIP).await;
    let new_active = lab
        .active_slave(&owner.node)
        .unwrap()
        .expect("an active slave");
    let new_port = owner.slave(&new_active).switch_port.clone();
    let captured = probe_through_cables(&lab, &bonds, 0, &on_vlan, &VLANS, VIP, &owner.mac).await;
    let counts = check_bond_claims(&captured, &bonds, owner, Some(VID), &[&new_port], VIP);
    assert!(counts.get(&new_port).is_some_and(|n| *n > 0), "{counts:?}");
    println!("done: {:?}", started.elapsed());
}
