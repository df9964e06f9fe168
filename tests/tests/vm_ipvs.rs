//! kube-proxy in IPVS mode on real frames (issue #30), in the VM lab (`ferrolb_tests::vm`): this
//! machine's kernel has no IPVS, the guest's Debian kernel loads `ip_vs`, `ip_set`, `xt_set` and
//! the dummy driver on demand. Each test boots the guest and runs there: a test cluster, three
//! node namespaces each running kube-proxy `--proxy-mode ipvs` and a speaker (`--timing-profile
//! safe`, [`GUEST_TIMING`]), a LAN client.
//!
//! In IPVS mode kube-proxy puts every Service IP, LoadBalancer IPs included, on the `kube-ipvs0`
//! dummy interface of **every** node. Without `strictARP` (`arp_ignore` 0) every node's kernel
//! then answers ARP for the LoadBalancer IP with its own MAC beside the owner's speaker: the
//! first test shows the fault on the wire and that ferrolb reports it (the `KernelAnswersARP`
//! Warning Event per node, the gauge `kernel_arp_conflicts`). With `strictARP` (kube-proxy sets
//! `arp_ignore=1`, `arp_announce=2`) only the owner answers, traffic flows through IPVS with
//! either `externalTrafficPolicy`, and a crashed owner is replaced by one MAC again: the second
//! test. Failover times come from an emulated guest and the `safe` profile: they are bounded by
//! that profile's crash bound, never compared with the native lab's figures.
//!
//! The order of the first test is deliberate: the speakers start (and their `AnnouncingIP` Event
//! is seen) before kube-proxy. Under emulation the API server is slowest while processes start,
//! and a speaker gives an Event write 5 s; a `KernelAnswersARP` Warning (one per IP) whose write
//! times out is counted (`events_total{outcome="failed"}`) and tried again, up to 3 writes
//! (`event_sink::WRITE_ATTEMPTS`). Started after the speakers, as on a cluster switched to IPVS
//! mode, the fault is found when the API server is quiet. Guest times: docs/testing.md, "The VM lab".
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::{Duration, Instant};

use ferrolb_speaker::membership::TimingProfile;
use ferrolb_tests::lab::datapath::{self, Answers, LOCAL_V4_PODS, PODS, Policy, SERVICE_PORT};
use ferrolb_tests::lab::failover::{REQUEST_TIMEOUT, kill_owner_within};
use ferrolb_tests::lab::kube_proxy::{IPVS_DEVICE, KubeProxy, ProxyMode};
use ferrolb_tests::lab::pods::{POD_PORT, Pods};
use ferrolb_tests::lab::scenario::{has_event, metric_value, typed_events_for};
use ferrolb_tests::lab::{Lab, Seen, in_netns};
use ferrolb_tests::objects::{EndpointSpec, apply_endpoints, apply_l2, create_pool, set_ingress};
use ferrolb_tests::poll::until_every;
use ferrolb_tests::vm::{GUEST_TIMING, run_in_guest};

const NODES: [&str; 3] = ["node-1", "node-2", "node-3"];
/// The pool (off the node subnet and the pod range; clients route it on-link).
const POOL: &str = "198.51.100.192/28";
/// `web-cluster`'s IP (`externalTrafficPolicy: Cluster`, every pod).
const VIP_CLUSTER: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 200);
/// `web-local`'s IP (`Local`, the pods of node-2 and node-3).
const VIP_LOCAL: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 201);
/// Requests through each IP.
const REQUESTS: usize = 20;
/// How long the guest may take to get a condition (kube-proxy's first sync, the speakers'
/// membership on the safe profile, an Event): emulation is slow, these are safety limits.
const SETTLE: Duration = Duration::from_secs(120);
/// A whole test in the guest, boot included.
const GUEST_TIMEOUT: Duration = Duration::from_secs(600);
const GAUGE: &str = "ferrolb_speaker_kernel_arp_conflicts";

/// The crash-failover bound of the speakers' profile at three nodes: the simulator's
/// `t_failover`, `probe_period × (N + 1) + suspect_timeout + 2 ticks` (docs/speaker.md,
/// I-failover): 9.2 s with `safe`.
fn crash_bound() -> Duration {
    assert_eq!(GUEST_TIMING, "safe");
    let (probe_period, _, suspect_timeout) = TimingProfile::Safe.timings();
    probe_period * (NODES.len() as u32 + 1) + suspect_timeout + Duration::from_millis(200)
}

fn block_on<F: std::future::Future<Output = ()>>(body: F) {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(body);
}

struct Clock(Instant);

impl Clock {
    fn say(&self, what: &str) {
        eprintln!("[{:>6.1} s] {what}", self.0.elapsed().as_secs_f64());
    }
}

/// A three-node lab in the guest: the pool, Services `web-cluster` and `web-local` with their IPs
/// in their status (as the controller writes it) and, with pods, the datapath lab's pods as their
/// endpoints; kube-proxy in IPVS mode and the speakers on every node, started by the test.
struct IpvsLab {
    lab: Lab,
    client: kube::Client,
    proxies: Vec<KubeProxy>,
    _pods: Option<Pods>,
}

fn vip(policy: Policy) -> Ipv4Addr {
    match policy {
        Policy::Cluster => VIP_CLUSTER,
        Policy::Local => VIP_LOCAL,
    }
}

/// The pods behind `policy`'s Service.
fn endpoints_of(policy: Policy) -> Vec<&'static str> {
    match policy {
        Policy::Cluster => PODS.iter().map(|(p, _)| *p).collect(),
        Policy::Local => LOCAL_V4_PODS.to_vec(),
    }
}

fn node_of(pod: &str) -> &'static str {
    PODS.iter().find(|(p, _)| *p == pod).unwrap().1
}

/// The nodes that may announce `policy`'s IP.
fn eligible(policy: Policy) -> Vec<String> {
    let nodes: BTreeSet<&str> = match policy {
        Policy::Cluster => NODES.into_iter().collect(),
        Policy::Local => endpoints_of(policy).into_iter().map(node_of).collect(),
    };
    nodes.into_iter().map(str::to_owned).collect()
}

fn owner_of(policy: Policy) -> String {
    let eligible = eligible(policy);
    ferrolb_speaker::election::owner(IpAddr::V4(vip(policy)), eligible.iter().map(String::as_str))
        .unwrap()
        .to_owned()
}

impl IpvsLab {
    /// The lab, `with_pods` the pods, the pool and both Services with their IPs (and, with pods,
    /// their endpoints). Neither kube-proxy nor the speakers run yet.
    async fn new(with_pods: bool, clock: &Clock) -> IpvsLab {
        let lab = Lab::start(3, 1).await.expect("lab");
        let pods = with_pods.then(|| lab.add_pods(&PODS).unwrap());
        let client = lab.client().await.unwrap();
        create_pool(&client, "pool", &[POOL]).await.unwrap();
        apply_l2(&client, "all", ferrolb_crds::L2AdvertisementSpec::default())
            .await
            .unwrap();
        for policy in [Policy::Cluster, Policy::Local] {
            datapath::apply_service(&client, policy, false)
                .await
                .unwrap();
            set_ingress(
                &client,
                "default",
                policy.service(),
                &[&vip(policy).to_string()],
            )
            .await
            .unwrap();
            if let Some(pods) = &pods {
                let addrs: Vec<(String, &str)> = endpoints_of(policy)
                    .into_iter()
                    .map(|name| {
                        let pod = pods.pods.iter().find(|p| p.name == name).unwrap();
                        (pod.ip.to_string(), node_of(name))
                    })
                    .collect();
                let eps: Vec<EndpointSpec<'_>> = addrs
                    .iter()
                    .map(|(a, n)| (a.as_str(), Some(*n), true, true, false))
                    .collect();
                apply_endpoints(
                    &client,
                    "default",
                    policy.service(),
                    i32::from(POD_PORT),
                    &eps,
                )
                .await
                .unwrap();
            }
        }
        clock.say("lab, Services and endpoints up");
        IpvsLab {
            lab,
            client,
            proxies: Vec::new(),
            _pods: pods,
        }
    }

    /// Starts kube-proxy `--proxy-mode ipvs` on every node.
    fn start_kube_proxies(&mut self, strict_arp: bool, clock: &Clock) {
        let mode = ProxyMode::Ipvs { strict_arp };
        clock.say(&format!("starting kube-proxy ({mode}) on every node"));
        self.proxies = NODES
            .iter()
            .map(|n| self.lab.start_kube_proxy(n, mode).unwrap())
            .collect();
    }

    /// Waits until each node's `kube-ipvs0` holds both IPs and IPVS has a virtual server for each
    /// (with real servers where the node may forward: a Local IP's stays empty on a node without
    /// a local pod): kube-proxy's first sync.
    async fn wait_kube_proxies_synced(&self, clock: &Clock) {
        let with_pods = self._pods.is_some();
        for proxy in &self.proxies {
            let synced = until_every(
                &format!("{IPVS_DEVICE} on {} holding both IPs", proxy.node),
                SETTLE,
                Duration::from_secs(1),
                || async {
                    let held = proxy.ipvs_device_addresses().unwrap();
                    [VIP_CLUSTER, VIP_LOCAL]
                        .iter()
                        .all(|v| held.contains(&IpAddr::V4(*v)))
                },
            )
            .await;
            if let Err(e) = synced {
                panic!("{e:#}\n{}", proxy.log_tail(30));
            }
            for policy in [Policy::Cluster, Policy::Local] {
                let ip = IpAddr::V4(vip(policy));
                if with_pods && eligible(policy).contains(&proxy.node) {
                    proxy.wait_for_rules(ip, SETTLE).await.unwrap();
                } else {
                    assert!(proxy.has_rules_for(ip).unwrap(), "{}", proxy.node);
                }
            }
        }
        clock.say("kube-proxy synced on every node");
    }

    fn start_speakers(&mut self, clock: &Clock) {
        for node in NODES {
            self.lab
                .start_speaker(node, &["--timing-profile", GUEST_TIMING])
                .unwrap();
        }
        clock.say("speakers started");
    }

    /// Waits for the `AnnouncingIP` Event on `policy`'s Service: the speakers are up and their
    /// Event writes reach the API server.
    async fn wait_announced(&self, policy: Policy, clock: &Clock) {
        let owner = owner_of(policy);
        let words = [owner.as_str()];
        let announced = until_every(
            &format!("AnnouncingIP on {} from {owner}", policy.service()),
            SETTLE,
            Duration::from_secs(1),
            || has_event(&self.client, policy.service(), "AnnouncingIP", &words),
        )
        .await;
        if let Err(e) = announced {
            self.dump();
            panic!("{e:#}");
        }
        clock.say(&format!("{} announced by {owner}", policy.service()));
    }

    fn sysctl(&self, node: &str, key: &str) -> String {
        in_netns(
            &self.lab.node(node).netns,
            "cat",
            &[&format!("/proc/sys/net/ipv4/conf/{key}")],
        )
        .unwrap()
        .trim()
        .to_owned()
    }

    async fn gauge(&self, node: &str) -> Option<f64> {
        let (_, body) = self.lab.speaker_http(node, "/metrics").await.ok()?;
        metric_value(&body, GAUGE)
    }

    fn macs(&self, nodes: &[&str]) -> BTreeSet<String> {
        nodes.iter().map(|n| self.lab.node(n).mac.clone()).collect()
    }

    fn names(&self, macs: &BTreeSet<String>) -> Vec<String> {
        macs.iter()
            .map(|m| {
                self.lab
                    .node_by_mac(m)
                    .map_or_else(|| m.clone(), |n| n.name.clone())
            })
            .collect()
    }

    /// `probes` ARP requests for `ip` from the client: the MACs answering each within 1 s (the
    /// lab's usual 300 ms is short for a responder in the emulated guest on a loaded machine).
    async fn arp_rounds(&self, ip: Ipv4Addr, probes: usize) -> Vec<BTreeSet<String>> {
        let mut rounds = Vec::new();
        for _ in 0..probes {
            let seen = self
                .lab
                .arp_probe(0, ip, Duration::from_secs(1))
                .await
                .unwrap();
            rounds.push(
                seen.iter()
                    .filter(|s| matches!(s, Seen::ArpReply { .. }) && s.ip() == IpAddr::V4(ip))
                    .map(|s| s.mac().to_owned())
                    .collect(),
            );
        }
        rounds
    }

    async fn requests(&self, ip: Ipv4Addr) -> Answers {
        datapath::requests(
            &self.lab.clients[0].netns,
            SocketAddr::new(IpAddr::V4(ip), SERVICE_PORT),
            REQUESTS,
        )
        .await
        .unwrap()
    }

    /// The last `n` lines of `node`'s speaker log without its DEBUG lines.
    fn speaker_lines(&self, node: &str, n: usize) -> String {
        let log = std::fs::read_to_string(self.lab.dir().join(format!("speaker-{node}.log")))
            .unwrap_or_default();
        let lines: Vec<&str> = log.lines().filter(|l| !l.contains(" DEBUG ")).collect();
        lines[lines.len().saturating_sub(n)..].join("\n")
    }

    /// The logs' tails: kube-proxy's, and the speakers' without their debug lines.
    fn dump(&self) {
        for proxy in &self.proxies {
            eprintln!("--- kube-proxy {} ---\n{}", proxy.node, proxy.log_tail(15));
        }
        for node in NODES {
            eprintln!(
                "--- speaker {node} (no DEBUG lines) ---\n{}",
                self.speaker_lines(node, 25)
            );
        }
    }
}

/// Without `strictARP` the fault is real and ferrolb says so: kube-proxy has put the
/// LoadBalancer IP on every node's `kube-ipvs0` and left `arp_ignore` at 0, so an ARP request from
/// the client is answered by every node's MAC (the owner's speaker and three kernels); each
/// node's speaker reports its own node — a `KernelAnswersARP` Warning Event on the Service naming
/// the node, `kube-ipvs0` and the fix, and its gauge `kernel_arp_conflicts` above 0 (2: both
/// Services' IPs are on `kube-ipvs0`).
#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier (tests/run.sh --extended): 2-4 minutes in the VM lab each, docs/testing.md"
)]
#[test]
fn without_strict_arp_every_node_answers_arp_for_the_ip_and_each_speaker_reports_its_node() {
    if !run_in_guest(
        "without_strict_arp_every_node_answers_arp_for_the_ip_and_each_speaker_reports_its_node",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    let clock = Clock(Instant::now());
    block_on(async {
        let mut l = IpvsLab::new(false, &clock).await;
        // The speakers first, as on a cluster switched to IPVS mode: one MAC answers, and the
        // speakers' Event writes reach the API server (the guest's API server is slow while
        // processes start; an Event whose write times out is dropped, see the module docs).
        l.start_speakers(&clock);
        l.wait_announced(Policy::Cluster, &clock).await;
        let owner = owner_of(Policy::Cluster);
        let before = l
            .lab
            .wait_for_owner(0, VIP_CLUSTER, Some(&owner), SETTLE)
            .await
            .unwrap();
        assert_eq!(before, l.macs(&[owner.as_str()]), "before kube-proxy");
        clock.say(&format!(
            "before kube-proxy: ARP for {VIP_CLUSTER} answered by {owner} alone"
        ));

        l.start_kube_proxies(false, &clock);
        l.wait_kube_proxies_synced(&clock).await;
        for node in NODES {
            assert_eq!(l.sysctl(node, "all/arp_ignore"), "0", "{node}");
            assert_eq!(l.sysctl(node, "eth0/arp_ignore"), "0", "{node}");
        }
        let all = l.macs(&NODES);
        let deadline = Instant::now() + SETTLE;
        let last = loop {
            let answers = l.lab.arp_answers(0, VIP_CLUSTER).await.unwrap();
            if answers == all || Instant::now() >= deadline {
                break answers;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        clock.say(&format!(
            "ARP for {VIP_CLUSTER} answered by {:?}",
            l.names(&last)
        ));
        if last != all {
            l.dump();
            panic!(
                "after {SETTLE:?} ARP for {VIP_CLUSTER} is answered by {:?}, not by every node",
                l.names(&last)
            );
        }
        assert!(last.len() > 1);

        for node in NODES {
            let note = format!("of node {node}");
            let words = [
                VIP_CLUSTER.to_string(),
                note,
                IPVS_DEVICE.to_owned(),
                "strictARP: true".to_owned(),
            ];
            let words: Vec<&str> = words.iter().map(String::as_str).collect();
            let reported = until_every(
                &format!("a KernelAnswersARP Warning naming {node}"),
                SETTLE,
                Duration::from_secs(1),
                || {
                    has_event(
                        &l.client,
                        Policy::Cluster.service(),
                        "KernelAnswersARP",
                        &words,
                    )
                },
            )
            .await;
            if let Err(e) = reported {
                l.dump();
                let (_, metrics) = l.lab.speaker_http(node, "/metrics").await.unwrap();
                let events: Vec<&str> = metrics
                    .lines()
                    .filter(|m| m.contains("events_total"))
                    .collect();
                panic!("{e:#}; {node}'s Event counters: {events:?}");
            }
        }
        let events = typed_events_for(&l.client, "default", Policy::Cluster.service())
            .await
            .unwrap();
        for (kind, reason, note) in &events {
            if reason == "KernelAnswersARP" {
                assert_eq!(kind, "Warning", "{note}");
                eprintln!("Event {kind} {reason}: {note}");
            }
        }
        clock.say("a KernelAnswersARP Warning from every node's speaker");
        for node in NODES {
            let gauge = l.gauge(node).await;
            eprintln!("{node}: {GAUGE} {gauge:?}");
            // Two IPs are on kube-ipvs0 (web-local's too): both are answered by the kernel.
            assert!(gauge.is_some_and(|g| g > 0.0), "{node}: {gauge:?}");
        }
        clock.say("done");
    });
}

/// With `strictARP` kube-proxy sets `arp_ignore=1` and `arp_announce=2`: the IPs are still on
/// every node's `kube-ipvs0`, but only the owner's speaker answers ARP, with the owner's MAC, for
/// `web-cluster` (any node) and `web-local` (node-2 or node-3, where its pods are). HTTP through
/// both IPs goes through IPVS: `Cluster` spread over every pod with the client masqueraded,
/// `Local` only to the owner's pods with the client's address kept. Then the owner of
/// `web-local` crashes (its speaker SIGKILLed under client load): the other eligible node answers
/// alone, within the safe profile's crash bound, and HTTP through the IP works again, from its
/// pods. No speaker reports a kernel answering ARP.
#[cfg_attr(
    not(feature = "extended"),
    ignore = "extended tier (tests/run.sh --extended): 2-4 minutes in the VM lab each, docs/testing.md"
)]
#[test]
fn with_strict_arp_only_the_owner_answers_and_http_goes_through_ipvs_before_and_after_a_crash() {
    if !run_in_guest(
        "with_strict_arp_only_the_owner_answers_and_http_goes_through_ipvs_before_and_after_a_crash",
        GUEST_TIMEOUT,
    ) {
        return;
    }
    let clock = Clock(Instant::now());
    block_on(async {
        let mut l = IpvsLab::new(true, &clock).await;
        // kube-proxy sets strictARP's sysctls when it starts, before its first sync puts the IPs
        // on kube-ipvs0: the speakers start meanwhile.
        l.start_kube_proxies(true, &clock);
        l.start_speakers(&clock);
        l.wait_kube_proxies_synced(&clock).await;
        let client_ip = IpAddr::V4(l.lab.clients[0].ip);
        for policy in [Policy::Cluster, Policy::Local] {
            let ip = vip(policy);
            let owner = owner_of(policy);
            let mac = l.lab.node(&owner).mac.clone();
            let answers = l
                .lab
                .wait_for_owner(0, ip, Some(&owner), SETTLE)
                .await
                .unwrap();
            if answers != BTreeSet::from([mac.clone()]) {
                l.dump();
                panic!(
                    "{ip}: answered by {:?}, not {owner} alone",
                    l.names(&answers)
                );
            }
            // Although every node's kube-ipvs0 holds it: strictARP's sysctls silence the kernels.
            for node in NODES {
                let ipvs = l.proxies.iter().find(|p| p.node == node).unwrap();
                assert!(
                    ipvs.ipvs_device_addresses()
                        .unwrap()
                        .contains(&IpAddr::V4(ip)),
                    "{node}"
                );
                assert_eq!(l.sysctl(node, "all/arp_ignore"), "1", "{node}");
                assert_eq!(l.sysctl(node, "all/arp_announce"), "2", "{node}");
            }
            // Not once, every time.
            for round in l.arp_rounds(ip, 5).await {
                assert_eq!(round, BTreeSet::from([mac.clone()]), "{ip}");
            }
            clock.say(&format!(
                "{} {ip}: ARP answered by {owner} alone (5 of 5 probes)",
                policy.as_str()
            ));
            let evidence = l
                .proxies
                .iter()
                .find(|p| p.node == owner)
                .unwrap()
                .evidence_for(IpAddr::V4(ip))
                .unwrap();
            eprintln!("kube-proxy's IPVS state for {ip} on {owner}:\n{evidence}");
            let a = l.requests(ip).await;
            clock.say(&format!(
                "{} {ip}: pods {:?}, sources {:?}, {} errors",
                policy.as_str(),
                a.per_pod,
                a.sources,
                a.errors.len()
            ));
            assert!(a.errors.is_empty(), "{ip}: {:?}", a.errors);
            assert_eq!(a.per_pod.values().sum::<usize>(), REQUESTS);
            let answered: BTreeSet<&str> = a.per_pod.keys().map(String::as_str).collect();
            match policy {
                Policy::Cluster => {
                    // Round robin over every pod on every node; the pod sees a node, not the
                    // client (masquerade).
                    let all: BTreeSet<&str> = endpoints_of(policy).into_iter().collect();
                    assert_eq!(answered, all);
                    assert!(!a.sources.contains(&client_ip), "{:?}", a.sources);
                }
                Policy::Local => {
                    assert!(answered.iter().all(|p| node_of(p) == owner), "{answered:?}");
                    assert_eq!(a.sources, BTreeSet::from([client_ip]));
                }
            }
        }

        // The crash: web-local's owner's speaker is SIGKILLed while the client sends requests.
        let policy = Policy::Local;
        let ip = vip(policy);
        let old_owner = owner_of(policy);
        let bound = crash_bound();
        let mut printed: Vec<u8> = Vec::new();
        clock.say(&format!(
            "killing {old_owner}'s speaker at unix {:.3} s",
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs_f64()
        ));
        let outcome = kill_owner_within(
            &mut l.lab,
            0,
            SocketAddr::new(IpAddr::V4(ip), SERVICE_PORT),
            &old_owner,
            &eligible(policy),
            (bound * 2, bound * 2),
            &mut printed,
        )
        .await;
        eprintln!("{}", String::from_utf8_lossy(&printed));
        for node in NODES.iter().filter(|n| **n != old_owner) {
            eprintln!(
                "--- speaker {node}, last lines without DEBUG ---\n{}",
                l.speaker_lines(node, 12)
            );
        }
        let f = outcome.unwrap_or_else(|e| {
            l.dump();
            panic!("{e:#}")
        });
        clock.say(&format!(
            "failover {} -> {}: gratuitous ARP +{:.0} ms, first HTTP answer through it +{:.0} ms \
             ({} of {} requests failed), bound {:.1} s",
            f.old_owner,
            f.new_owner,
            f.gratuitous_arp_after.as_secs_f64() * 1e3,
            f.http_via_new_owner_after.as_secs_f64() * 1e3,
            f.failed_after_kill,
            f.requests_after_kill,
            bound.as_secs_f64()
        ));
        assert_ne!(f.new_owner, f.old_owner);
        // The IP is answered again within the crash bound; the first HTTP answer through the new
        // owner within it plus two of the client's request timeouts (the request in flight when
        // its neighbour entry moves, then the first one sent to the new owner).
        assert!(f.gratuitous_arp_after <= bound, "{f:?}");
        assert!(
            f.http_via_new_owner_after <= bound + 2 * REQUEST_TIMEOUT,
            "{f:?}"
        );
        // The new owner alone, every time (the old owner's kernel stays silent: strictARP).
        let new_mac = l.lab.node(&f.new_owner).mac.clone();
        for round in l.arp_rounds(ip, 5).await {
            assert_eq!(round, BTreeSet::from([new_mac.clone()]), "{ip}");
        }
        let a = l.requests(ip).await;
        clock.say(&format!(
            "after the crash {ip}: pods {:?}, sources {:?}, {} errors",
            a.per_pod,
            a.sources,
            a.errors.len()
        ));
        assert!(a.errors.is_empty(), "{:?}", a.errors);
        assert!(
            a.per_pod.keys().all(|p| node_of(p) == f.new_owner),
            "{:?}",
            a.per_pod
        );
        assert_eq!(a.sources, BTreeSet::from([client_ip]));

        // Nobody's kernel answered, so no speaker said so (the preflight runs every 5 s; the
        // speakers have run for longer than that).
        for node in NODES.iter().filter(|n| **n != f.old_owner) {
            assert_eq!(l.gauge(node).await, Some(0.0), "{node}");
        }
        for policy in [Policy::Cluster, Policy::Local] {
            let events = typed_events_for(&l.client, "default", policy.service())
                .await
                .unwrap();
            assert!(
                !events.iter().any(|(_, r, _)| r == "KernelAnswersARP"),
                "{events:?}"
            );
        }
        clock.say("done");
    });
}
