//! Shared helpers of the `l2_*` integration tests: network namespaces with RAII cleanup, veth links
//! to a bridge in a "lan" namespace, and threads that enter a namespace with `setns(2)`.
//!
//! Addresses are documentation ranges only (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24,
//! 2001:db8::/32); traffic stays between namespaces these helpers created. The tests need root
//! (CI runs as root) and fail — never skip — without it.

#![allow(clippy::unwrap_used, clippy::expect_used, dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::net::IpAddr;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use ferrolb_speaker::eligibility::Interfaces;
use ferrolb_speaker::l2::exclusions::NameExclusions;
use ferrolb_speaker::l2::probe::ProbeSettings;
use ferrolb_speaker::l2::{AnnounceSchedule, Counters, InterfaceStatus, L2Config, Responder};
use nix::sched::{CloneFlags, setns};

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Panic with a clear message unless we are root.
pub fn require_root() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "the l2_* tests create network namespaces and need root (CI runs as root)"
    );
}

/// Run `ip` with `args`; panic with its stderr on failure.
pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().expect("run ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// A network namespace, deleted on drop (also when the test panics).
pub struct Netns {
    /// `ip netns` name.
    pub name: String,
}

impl Netns {
    /// Create `ferrolb-l2-<pid>-<n>-<tag>` with `lo` up and IPv6 DAD off (so link-local addresses
    /// are usable at once).
    pub fn new(tag: &str) -> Netns {
        require_root();
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let name = format!("fl2-{}-{n}-{tag}", std::process::id());
        ip(&["netns", "add", &name]);
        let ns = Netns { name };
        for key in [
            "net.ipv6.conf.default.accept_dad=0",
            "net.ipv6.conf.all.accept_dad=0",
        ] {
            ns.exec(&["sysctl", "-qw", key]);
        }
        ip(&["-n", &ns.name, "link", "set", "lo", "up"]);
        ns
    }

    /// Run a command inside the namespace (`ip netns exec`); panic on failure.
    pub fn exec(&self, args: &[&str]) {
        let out = Command::new("ip")
            .args(["netns", "exec", &self.name])
            .args(args)
            .output()
            .expect("run ip netns exec");
        assert!(
            out.status.success(),
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// `ip -n <ns> …`.
    pub fn ip(&self, args: &[&str]) {
        let mut all = vec!["-n", &self.name];
        all.extend_from_slice(args);
        ip(&all);
    }

    /// Wait (up to 5 s) until `dev` has a link-local address and none is tentative: even with DAD
    /// off the kernel clears the tentative flag from a work queue, a moment after link-up.
    pub fn wait_no_tentative(&self, dev: &str) {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let show = |extra: &[&str]| {
                let mut args = vec!["-n", &self.name, "-6", "addr", "show", "dev", dev];
                args.extend_from_slice(extra);
                let out = Command::new("ip").args(&args).output().expect("run ip");
                String::from_utf8_lossy(&out.stdout).into_owned()
            };
            if show(&["tentative"]).trim().is_empty() && show(&["scope", "link"]).contains("fe80::")
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{dev} in {} keeps tentative addresses",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Run `f` on a fresh thread that has entered this namespace.
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        let path = format!("/var/run/netns/{}", self.name);
        std::thread::spawn(move || {
            enter(&path);
            f()
        })
        .join()
        .expect("namespace thread panicked")
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip")
            .args(["netns", "del", &self.name])
            .status();
    }
}

fn enter(path: &str) {
    let file = File::open(path).expect("open netns");
    setns(file, CloneFlags::CLONE_NEWNET).expect("setns");
}

/// A "LAN": a namespace holding bridge `br0`. Interfaces of other namespaces are plugged into it.
pub struct Lan {
    /// The namespace of the bridge.
    pub ns: Netns,
    ports: AtomicUsize,
}

impl Lan {
    /// A new LAN namespace with an up bridge (STP off, so ports forward at once).
    pub fn new(tag: &str) -> Lan {
        let ns = Netns::new(tag);
        ns.ip(&[
            "link",
            "add",
            "br0",
            "type",
            "bridge",
            "stp_state",
            "0",
            "forward_delay",
            "0",
        ]);
        ns.ip(&["link", "set", "br0", "up"]);
        Lan {
            ns,
            ports: AtomicUsize::new(0),
        }
    }

    /// Create interface `name` in `ns`, cabled to this LAN's bridge, up, with `addrs` (CIDRs).
    pub fn plug(&self, ns: &Netns, name: &str, addrs: &[&str]) {
        let port = format!("p{}", self.ports.fetch_add(1, Ordering::Relaxed));
        ns.ip(&[
            "link",
            "add",
            name,
            "type",
            "veth",
            "peer",
            "name",
            &port,
            "netns",
            &self.ns.name,
        ]);
        self.ns.ip(&["link", "set", &port, "master", "br0", "up"]);
        for a in addrs {
            ns.ip(&["addr", "add", a, "dev", name, "nodad"]);
        }
        ns.ip(&["link", "set", name, "up"]);
        ns.wait_no_tentative(name);
    }
}

type Command_ = Box<dyn FnOnce(&Responder) + Send>;

/// A [`Responder`] running on a current-thread Tokio runtime in a thread inside a namespace.
pub struct Node {
    tx: Option<tokio::sync::mpsc::UnboundedSender<Command_>>,
    thread: Option<JoinHandle<()>>,
    /// The responder's counters.
    pub counters: Arc<Counters>,
}

/// Test timing: a fast burst and fast re-scans.
pub fn fast_config() -> L2Config {
    L2Config {
        schedule: AnnounceSchedule {
            offsets: vec![
                Duration::ZERO,
                Duration::from_millis(150),
                Duration::from_millis(400),
            ],
            refresh: None,
            // RFC 4861's 1 s RetransTimer between unsolicited NAs, scaled down like the burst.
            na_spacing: Duration::from_millis(100),
        },
        // Probing of new IPs as in production, a held IP probed again every second.
        probe: ProbeSettings {
            retry: Duration::from_secs(1),
            ..ProbeSettings::default()
        },
        rescan_interval: Duration::from_millis(200),
        retry_min: Duration::from_millis(100),
        retry_max: Duration::from_millis(400),
        default_interfaces: None,
        excluded_interfaces: NameExclusions::default(),
    }
}

impl Node {
    /// Start a responder inside `ns`.
    pub fn start(ns: &Netns, config: L2Config) -> Node {
        let path = format!("/var/run/netns/{}", ns.name);
        let counters = Arc::new(Counters::default());
        let c = counters.clone();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Command_>();
        let (ready_tx, ready_rx) = mpsc::channel();
        let thread = std::thread::spawn(move || {
            enter(&path);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let responder = Responder::start(config, c).unwrap();
                ready_tx.send(()).unwrap();
                while let Some(cmd) = rx.recv().await {
                    cmd(&responder);
                }
            });
        });
        ready_rx
            .recv_timeout(Duration::from_secs(10))
            .expect("responder started");
        Node {
            tx: Some(tx),
            thread: Some(thread),
            counters,
        }
    }

    /// Run `f` with the responder, on its runtime thread, and return the result.
    pub fn call<T: Send + 'static>(&self, f: impl FnOnce(&Responder) -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        self.tx
            .as_ref()
            .unwrap()
            .send(Box::new(move |r| tx.send(f(r)).unwrap()))
            .ok()
            .unwrap();
        rx.recv_timeout(Duration::from_secs(10))
            .expect("responder answered")
    }

    /// Replace the owned set.
    pub fn own(&self, owned: &[(&str, Interfaces)]) {
        let owned: BTreeMap<IpAddr, Interfaces> = owned
            .iter()
            .map(|(ip, i)| (ip.parse().unwrap(), i.clone()))
            .collect();
        self.call(move |r| r.set_owned(owned));
    }

    /// Replace the owned set, `fresh` IPs (newly assigned: probed before their first
    /// announcement) marked first.
    pub fn own_fresh(&self, owned: &[(&str, Interfaces)], fresh: &[&str]) {
        let fresh: std::collections::BTreeSet<IpAddr> =
            fresh.iter().map(|ip| ip.parse().unwrap()).collect();
        self.call(move |r| r.set_fresh(fresh));
        self.own(owned);
    }

    /// Interface statuses.
    pub fn status(&self) -> Vec<InterfaceStatus> {
        self.call(|r| r.interfaces())
    }

    /// Wait until interface `name` runs with the given protocols (panics after 10 s).
    pub fn wait_running(&self, name: &str, arp: bool, ndp: bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let st = self.status();
            if st
                .iter()
                .any(|s| s.name == name && s.running && s.arp == arp && s.ndp == ndp)
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{name} not running with arp={arp} ndp={ndp}: {st:?}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Wait until no task serves `name` (panics after 10 s).
    pub fn wait_gone(&self, name: &str) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while self.status().iter().any(|s| s.name == name) {
            assert!(Instant::now() < deadline, "{name} still served");
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The MAC of `name` in `ns`.
pub fn mac_of(ns: &Netns, name: &str) -> String {
    let name = name.to_owned();
    ns.run(move || {
        let all = ferrolb_speaker::l2::interfaces::scan().unwrap();
        all.into_iter()
            .find(|i| i.name == name)
            .and_then(|i| i.mac)
            .unwrap()
            .to_string()
    })
}
