//! The responders against real Linux neighbour tables: a client whose *kernel* resolves the VIP
//! (ARP and NDP) learns the owner's MAC, follows gratuitous ARP / unsolicited NA to a new owner
//! (S4, C-11), and solicited-node groups are joined and left with refcounts (S7).
//! Needs root: `cargo test -p ferrolb-speaker --test l2_kernel`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod l2_common;

use std::process::Command;
use std::time::{Duration, Instant};

use ferrolb_speaker::eligibility::Interfaces;
use ferrolb_speaker::l2::capture::{Client, Seen};
use l2_common::{Lan, Netns, Node, fast_config, mac_of};

const VIP4: &str = "192.0.2.200";
const VIP6: &str = "2001:db8:0:8::100";

/// The link-layer address the kernel of `ns` has for `ip` on eth0, if any (any state but FAILED
/// and INCOMPLETE).
fn neighbour(ns: &Netns, ip: &str) -> Option<String> {
    let out = Command::new("ip")
        .args(["-n", &ns.name, "neigh", "show", ip, "dev", "eth0"])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let words: Vec<&str> = text.split_whitespace().collect();
    let i = words.iter().position(|w| *w == "lladdr")?;
    words.get(i + 1).map(|s| s.to_string())
}

/// Make the kernel of `ns` resolve `ip` by sending it a UDP datagram, then wait for the entry.
fn resolve(ns: &Netns, ip: &str, want: &str) {
    let target = format!(
        "{}:9",
        if ip.contains(':') {
            format!("[{ip}]")
        } else {
            ip.to_owned()
        }
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let t = target.clone();
        ns.run(move || {
            let bind = if t.starts_with('[') {
                "[::]:0"
            } else {
                "0.0.0.0:0"
            };
            let s = std::net::UdpSocket::bind(bind).unwrap();
            let _ = s.send_to(b"x", t.as_str());
        });
        if neighbour(ns, ip).as_deref() == Some(want) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{ip} resolved to {:?}, want {want}",
            neighbour(ns, ip)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Wait until the kernel of `ns` maps `ip` to `want` (without prompting it).
fn wait_neighbour(ns: &Netns, ip: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while neighbour(ns, ip).as_deref() != Some(want) {
        assert!(
            Instant::now() < deadline,
            "{ip} is at {:?}, want {want}",
            neighbour(ns, ip)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

struct Three {
    nodes: Vec<Node>,
    macs: Vec<String>,
    client: Netns,
    _node_ns: Vec<Netns>,
    _lan: Lan,
}

fn three_nodes() -> Three {
    let lan = Lan::new("lan");
    let client = Netns::new("client");
    lan.plug(&client, "eth0", &["192.0.2.20/24", "2001:db8:0:8::20/64"]);
    let mut node_ns = Vec::new();
    let mut nodes = Vec::new();
    let mut macs = Vec::new();
    for i in 1..=3 {
        let ns = Netns::new(&format!("node{i}"));
        lan.plug(
            &ns,
            "eth0",
            &[
                &format!("192.0.2.1{i}/24"),
                &format!("2001:db8:0:8::1{i}/64"),
            ],
        );
        let node = Node::start(&ns, fast_config());
        node.wait_running("eth0", true, true);
        macs.push(mac_of(&ns, "eth0"));
        nodes.push(node);
        node_ns.push(ns);
    }
    Three {
        nodes,
        macs,
        client,
        _node_ns: node_ns,
        _lan: lan,
    }
}

/// Count the distinct MACs answering one ARP request for `ip`.
fn answering_macs(client: &Netns, ip: &str) -> Vec<String> {
    let ip = ip.parse().unwrap();
    client.run(move || {
        let c = Client::open("eth0").unwrap();
        c.drain();
        c.send_arp_request(ip, None).unwrap();
        let seen = c.listen(Duration::from_millis(400), |_| false).unwrap();
        let mut macs: Vec<String> = seen
            .iter()
            .filter(|s| matches!(s, Seen::ArpReply { .. }))
            .map(|s| s.mac().to_owned())
            .collect();
        macs.sort();
        macs
    })
}

/// C-11 at the responder level: the owner changes three times; after each change exactly one MAC
/// answers, and the client kernel's neighbour entry follows the new owner's gratuitous ARP /
/// unsolicited NA without being asked.
#[test]
fn c11_owner_changes_one_mac_answers_and_neighbours_follow() {
    let t = three_nodes();
    t.nodes[0].own(&[(VIP4, Interfaces::All), (VIP6, Interfaces::All)]);
    std::thread::sleep(Duration::from_millis(500));
    resolve(&t.client, VIP4, &t.macs[0]);
    resolve(&t.client, VIP6, &t.macs[0]);
    assert_eq!(answering_macs(&t.client, VIP4), vec![t.macs[0].clone()]);

    let mut owner = 0;
    for next in [1usize, 2, 0] {
        // The glue withdraws from the old owner and hands the IP to the new one.
        t.nodes[owner].own(&[]);
        t.nodes[next].own(&[(VIP4, Interfaces::All), (VIP6, Interfaces::All)]);
        wait_neighbour(&t.client, VIP4, &t.macs[next]);
        wait_neighbour(&t.client, VIP6, &t.macs[next]);
        assert_eq!(
            answering_macs(&t.client, VIP4),
            vec![t.macs[next].clone()],
            "after moving to node {next}"
        );
        owner = next;
        std::thread::sleep(Duration::from_secs(1));
    }
    let grat: u64 = t
        .nodes
        .iter()
        .map(|n| n.counters.snapshot().gratuitous_arp_sent)
        .sum();
    // Four gains × a burst of 3 × 2 forms.
    assert_eq!(grat, 24);
}

/// The multicast address list of eth0 in `ns` (`ip maddr`).
fn maddrs(ns: &Netns) -> String {
    let out = Command::new("ip")
        .args(["-n", &ns.name, "maddr", "show", "dev", "eth0"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// S7: solicited-node groups are joined for owned IPv6 addresses, shared by addresses with the
/// same low 24 bits (refcounted), and left when the last one goes.
#[test]
fn solicited_node_groups_are_refcounted() {
    let lan = Lan::new("lan");
    let ns = Netns::new("node");
    lan.plug(&ns, "eth0", &["2001:db8:0:8::10/64"]);
    let node = Node::start(&ns, fast_config());
    node.wait_running("eth0", false, true);
    let group = "ff02::1:ff00:100";
    let mac = "33:33:ff:00:01:00";
    assert!(!maddrs(&ns).contains(group));
    // Two owned addresses, one group.
    node.own(&[
        (VIP6, Interfaces::All),
        ("2001:db8:0:9::100", Interfaces::All),
    ]);
    wait_for("join", || maddrs(&ns).contains(group));
    assert!(maddrs(&ns).contains(mac), "{}", maddrs(&ns));
    node.own(&[("2001:db8:0:9::100", Interfaces::All)]);
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        maddrs(&ns).contains(group),
        "left while still used: {}",
        maddrs(&ns)
    );
    node.own(&[]);
    wait_for("leave", || !maddrs(&ns).contains(group));
}

/// Issue #10: a solicited-node join the kernel refuses (here: no socket option memory, ENOBUFS)
/// is retried by itself, with backoff, until it succeeds — not only when the owned set changes.
#[test]
fn failed_solicited_node_joins_are_retried() {
    if !kernel_at_least(6, 9) {
        eprintln!("SKIPPED: net.core.optmem_max is per network namespace only since Linux 6.9");
        return;
    }
    let lan = Lan::new("lan");
    let ns = Netns::new("node");
    lan.plug(&ns, "eth0", &["2001:db8:0:8::10/64"]);
    let node = Node::start(&ns, fast_config());
    node.wait_running("eth0", false, true);
    // After the packet sockets have their filters: only the join runs out of option memory.
    ns.exec(&["sysctl", "-qw", "net.core.optmem_max=0"]);
    let group = "ff02::1:ff00:100";
    node.own(&[(VIP6, Interfaces::All)]);
    wait_for("a refused join", || {
        node.counters.snapshot().multicast_errors >= 2
    });
    assert!(!maddrs(&ns).contains(group), "{}", maddrs(&ns));
    // Memory back: the group is joined with no change of the owned set.
    ns.exec(&["sysctl", "-qw", "net.core.optmem_max=20480"]);
    wait_for("the retried join", || maddrs(&ns).contains(group));
}

/// Many owned IPv6 addresses: the joins are spread over several membership sockets, so the
/// per-socket option memory limit never caps the number of groups; all are left afterwards.
#[test]
fn hundreds_of_solicited_node_groups() {
    let lan = Lan::new("lan");
    let ns = Netns::new("node");
    // Older kernels' default socket option memory (20 KiB ≈ 300 groups per socket). The sysctl is
    // per network namespace since Linux 6.9; on older kernels it is left alone (it would be global).
    if kernel_at_least(6, 9) {
        ns.exec(&["sysctl", "-qw", "net.core.optmem_max=20480"]);
    }
    lan.plug(&ns, "eth0", &["2001:db8:0:8::10/64"]);
    let node = Node::start(&ns, fast_config());
    node.wait_running("eth0", false, true);
    let n = 600;
    // 2001:db8:0:8::a:<i>: distinct low 24 bits, so one group each (ff02::1:ff0a:<i>).
    let ips: Vec<String> = (0..n).map(|i| format!("2001:db8:0:8::a:{i:x}")).collect();
    let owned: Vec<(&str, Interfaces)> = ips
        .iter()
        .map(|ip| (ip.as_str(), Interfaces::All))
        .collect();
    node.own(&owned);
    let count = |ns: &Netns| {
        maddrs(ns)
            .lines()
            .filter(|l| l.contains("ff02::1:ff0a:"))
            .count()
    };
    wait_for("600 joins", || count(&ns) == n);
    assert_eq!(node.counters.snapshot().multicast_errors, 0);
    node.own(&[]);
    wait_for("600 leaves", || count(&ns) == 0);
}

fn kernel_at_least(major: u32, minor: u32) -> bool {
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut parts = release
        .trim()
        .split(['.', '-'])
        .map(|p| p.parse::<u32>().unwrap_or(0));
    let (a, b) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (a, b) >= (major, minor)
}

/// `l2::neighbours::dump` reads the kernel's neighbour table of the calling namespace, both
/// families, with the peers' MACs — what `l2::peers` joins with the Nodes' addresses.
#[test]
fn the_neighbour_table_dump_lists_peers_of_both_families() {
    let lan = Lan::new("lan");
    let a = Netns::new("a");
    let b = Netns::new("b");
    lan.plug(&a, "eth0", &["192.0.2.11/24", "2001:db8:0:8::11/64"]);
    lan.plug(&b, "eth0", &["192.0.2.12/24", "2001:db8:0:8::12/64"]);
    a.wait_no_tentative("eth0");
    b.wait_no_tentative("eth0");
    let b_mac = mac_of(&b, "eth0");
    resolve(&a, "192.0.2.12", &b_mac);
    resolve(&a, "2001:db8:0:8::12", &b_mac);
    let entries = a.run(|| ferrolb_speaker::l2::neighbours::dump().unwrap());
    let of_b: Vec<String> = entries
        .iter()
        .filter(|(_, mac)| mac.to_string() == b_mac)
        .map(|(ip, _)| ip.to_string())
        .collect();
    assert!(of_b.contains(&"192.0.2.12".to_owned()), "{entries:?}");
    assert!(of_b.contains(&"2001:db8:0:8::12".to_owned()), "{entries:?}");
}
