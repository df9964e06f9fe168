//! A simulation as data: the cluster, the network and the timed faults. A scenario prints as a
//! Rust literal ([`Scenario::literal`]) so a failing one can be pasted into a regression test.

use std::collections::BTreeSet;

use ferrolb_l2::membership::TimingProfile;

/// One simulated cluster run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// Every random choice (latencies, losses, SWIM's probe order, nonces, scheduling after a
    /// SIGCONT) is drawn from this seed.
    pub seed: u64,
    /// Speakers (`node-0` … `node-{n-1}`), all started at time 0.
    pub nodes: usize,
    /// External IPs (`198.51.100.1` …), each one Service, assigned before the start.
    pub ips: usize,
    /// The membership's timing profile (the claim gate derives from it).
    pub profile: Profile,
    /// One-way latency of a membership datagram, drawn uniformly from this range (µs).
    pub latency_us: (u64, u64),
    /// Loss of every membership datagram, in parts per million.
    pub loss_ppm: u32,
    /// Duplication of membership datagrams, in parts per million: the copy takes its own
    /// latency (so it may arrive first).
    pub dup_ppm: u32,
    /// Delay of each hop between the speaker's tasks (µs, uniform in the range): the daemon
    /// waking on a membership change, the responder applying a new owned set, the signal
    /// handler acting on SIGTERM. `(0, 0)` runs every task at once; CPU starvation is a large
    /// range.
    pub task_delay_us: (u64, u64),
    /// The CPUs the speakers share, or `None` for a CPU per task (the default). With `Some`,
    /// every task hop above also queues for one of [`Cpus::count`] CPUs and holds it for a
    /// run drawn from [`Cpus::run_us`], first come first served: what makes a graceful
    /// failover slower when ten speakers wake on two CPUs at once (validation against the lab,
    /// `ferrolb-sim failover --cpus`).
    pub cpus: Option<Cpus>,
    /// NICs per node, NIC `k` of every node on L2 segment `k`; the clients are on segment 0.
    /// The speaker's default interface set serves every segment (one interface per segment),
    /// and its carrier check passes while any of them has carrier.
    pub nics: usize,
    /// Faults, in time order.
    pub faults: Vec<Timed>,
    /// Simulated time, ms from the start.
    pub end_ms: u64,
}

/// A shared machine: `count` CPUs, each task run holding one for a time uniform in `run_us`
/// (µs). A simple first-come-first-served model of the kernel's scheduler: no preemption, no
/// priorities, no per-datagram cost (only the hops of [`Scenario::task_delay_us`] queue).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cpus {
    /// CPUs shared by every speaker (at least 1).
    pub count: usize,
    /// CPU time of one task run, uniform in this range (µs).
    pub run_us: (u64, u64),
}

/// `--timing-profile`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// 100 ms / 40 ms / 200 ms.
    Fast,
    /// 1 s / 500 ms / 5 s.
    Safe,
}

impl Profile {
    /// The membership's profile.
    pub fn timing(self) -> TimingProfile {
        match self {
            Profile::Fast => TimingProfile::Fast,
            Profile::Safe => TimingProfile::Safe,
        }
    }
}

/// A fault at a time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Timed {
    /// When, ms from the start.
    pub at_ms: u64,
    /// What.
    pub fault: Fault,
}

/// The faults the simulator injects. Node indices are `0..nodes`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The speaker process dies (SIGKILL, OOM): no leave, the responder stops at once.
    Crash(usize),
    /// SIGTERM: the daemon withdraws every IP and leaves the membership explicitly, then exits.
    Terminate(usize),
    /// A crashed or terminated speaker starts again (a new membership generation).
    Restart(usize),
    /// SIGSTOP, then SIGCONT `for_ms` later: nothing of the process runs meanwhile (its
    /// datagrams queue in the socket).
    Stop {
        /// The node.
        node: usize,
        /// How long.
        for_ms: u64,
    },
    /// Cut every membership path to and from this node (its L2 segment stays: clients and the
    /// other nodes still hear its ARP).
    Isolate(usize),
    /// Cut the membership between these nodes and the rest, both ways.
    Partition(Vec<usize>),
    /// Cut the membership path from one node to another only.
    CutOneWay {
        /// Sender.
        from: usize,
        /// Receiver.
        to: usize,
    },
    /// Every membership cut is healed.
    Heal,
    /// A host on the LAN without the key sends a gratuitous ARP claiming IP number `ip` (any
    /// sender MAC, e.g. a peer Node's; no valid claim proof) to every node, every `every_ms`
    /// for `for_ms` (the lab attack A15).
    ForgedClaims {
        /// Index of the IP.
        ip: usize,
        /// Period.
        every_ms: u64,
        /// Duration.
        for_ms: u64,
    },
    /// A host without the key on the clients' segment replays, every `every_ms` for `for_ms`,
    /// to each node the latest gratuitous ARP for IP number `ip` that another speaker sent
    /// there, as captured (nothing if none was sent yet): its proof verifies while within the claim proof's
    /// clock-skew allowance of 2 s (`speaker/core/src/wire/claim_proof.rs`).
    ReplayedClaims {
        /// Index of the IP.
        ip: usize,
        /// Period.
        every_ms: u64,
        /// Duration.
        for_ms: u64,
    },
    /// A host without the key floods every node's membership port with datagrams whose source
    /// address is another member's (`per_ms` per millisecond in all, spread over every ordered
    /// pair), for `for_ms` (the lab attack A16).
    SpoofFlood {
        /// Datagrams per millisecond.
        per_ms: u32,
        /// Duration.
        for_ms: u64,
    },
    /// The Node's `Ready` condition turns `False` (or back to `True`) in the API.
    NodeReady {
        /// The node.
        node: usize,
        /// `Ready`.
        ready: bool,
    },
    /// The Node gets (or loses) the `node.kubernetes.io/exclude-from-external-load-balancers`
    /// label in the API.
    ExcludeLabel {
        /// The node.
        node: usize,
        /// Labelled.
        on: bool,
    },
    /// The Node is cordoned (`spec.unschedulable: true`, `kubectl cordon` or the first step of
    /// `kubectl drain`) or uncordoned in the API (issue #29 O3).
    Cordon {
        /// The node.
        node: usize,
        /// Cordoned.
        on: bool,
    },
    /// The Node object is deleted (its speaker may keep running).
    DeleteNode(usize),
    /// The speaker Pod bound to the node is deleted for good (a DaemonSet narrowed by its
    /// `nodeSelector`): gone from the API view. Its process is stopped by a separate fault
    /// (`Terminate`), as the kubelet would.
    RemovePod(usize),
    /// The Node object is created again (Ready, no labels).
    RecreateNode(usize),
    /// The Service of IP number `ip` becomes `externalTrafficPolicy: Local` with its only ready
    /// endpoint on `node` (an endpoint moving between nodes).
    EndpointOn {
        /// Index of the IP.
        ip: usize,
        /// The node with the endpoint.
        node: usize,
    },
    /// From now on, the node's watches deliver every API change `ms` late.
    WatchDelay {
        /// The node.
        node: usize,
        /// Delay.
        ms: u64,
    },
    /// The node's watches deliver nothing for `for_ms` (API server unreachable from it), then
    /// relist: the speaker keeps its last view meanwhile (F2: the API server is not on the data
    /// path).
    ApiOutage {
        /// The node.
        node: usize,
        /// Duration.
        for_ms: u64,
    },
    /// The membership paths between two nodes are cut both ways; both still reach every other
    /// node (a non-transitive partition: SWIM's indirect probes route around it).
    CutPair(usize, usize),
    /// NIC `nic` of the node loses (`false`) or regains carrier; its other NICs keep theirs.
    NicCarrier {
        /// The node.
        node: usize,
        /// The NIC (= the segment).
        nic: usize,
        /// Carrier state.
        up: bool,
    },
    /// Every NIC of the node loses (`false`) or regains carrier.
    Carrier {
        /// The node.
        node: usize,
        /// Carrier state.
        up: bool,
    },
    /// The L2Advertisement is edited to select only these nodes by hostname (`nodeSelectors`
    /// with `kubernetes.io/hostname In [...]`); empty: every node again.
    AdvertiseOn(Vec<usize>),
    /// Service number `ip` moves to a new address no Service had (the controller re-assigned
    /// it: a pool edit, a `loadBalancerIP` change): the old IP is announced by nobody any more,
    /// the new one is fresh (probed before its first announcement).
    ChangeIp {
        /// Index of the Service.
        ip: usize,
    },
    /// The node's key Secret changes to the key ring `ring` (key numbers; the first seals, all
    /// open; key 0 is the cluster's key at the start). Today's speaker reads it at its next
    /// start: a rotation is a rolling restart (`docs/membership.md`, "Rotating the key").
    SetKeys {
        /// The node.
        node: usize,
        /// Key numbers.
        ring: Vec<u8>,
    },
    /// The node's speaker is configured with another timing profile (a DaemonSet edit rolled
    /// out to this node, or one node's flags differing): read at its next start. The others
    /// refuse it (issue #32 G5.4), so the oracle counts only speakers on the scenario's profile
    /// as eligible.
    SetProfile {
        /// The node.
        node: usize,
        /// Its profile from its next start.
        profile: Profile,
    },
    /// The node's wall clock steps by `ms` (positive: ahead), as an NTP step or a VM resumed
    /// from a snapshot does; its monotonic clock does not. The wall clock stamps and checks the
    /// membership's replay window and the claim proofs (2 s skew), and seeds the voter memory.
    ClockStep {
        /// The node.
        node: usize,
        /// The step, in ms.
        ms: i64,
    },
}

impl Fault {
    /// Whether the fault is *benign* in the sense of the invariant I-safe: a process fault, or a
    /// partition that leaves a majority connected (`nodes` in all). One-way cuts and carrier
    /// loss are not (they are I-bounded's fault models).
    pub fn is_benign(&self, nodes: usize) -> bool {
        match self {
            Fault::Crash(_)
            | Fault::Terminate(_)
            | Fault::Restart(_)
            | Fault::Stop { .. }
            | Fault::Heal => true,
            Fault::Isolate(_) => nodes >= 3,
            // Every node still reaches a majority, directly or through one other node.
            Fault::CutPair(..) => nodes >= 3,
            Fault::Partition(side) => {
                let a = side.len();
                let b = nodes.saturating_sub(a);
                a.max(b) * 2 > nodes
            }
            Fault::CutOneWay { .. }
            | Fault::Carrier { .. }
            | Fault::NicCarrier { .. }
            | Fault::ClockStep { .. } => false,
            // An operator's change: a wrong order splits the membership by key.
            Fault::SetKeys { .. } | Fault::SetProfile { .. } => false,
            Fault::ForgedClaims { .. }
            | Fault::SpoofFlood { .. }
            | Fault::ReplayedClaims { .. } => true,
            // A slow or absent API server alone changes nobody's view.
            Fault::WatchDelay { .. } | Fault::ApiOutage { .. } => true,
            // Object changes reach the nodes at different times (per-node views decide).
            Fault::NodeReady { .. }
            | Fault::ExcludeLabel { .. }
            | Fault::Cordon { .. }
            | Fault::DeleteNode(_)
            | Fault::RemovePod(_)
            | Fault::RecreateNode(_)
            | Fault::EndpointOn { .. }
            | Fault::AdvertiseOn(_)
            | Fault::ChangeIp { .. } => false,
        }
    }

    /// Whether the fault is an outsider's (no key): the invariant I-auth says it changes
    /// nothing about who answers.
    pub fn is_adversary(&self) -> bool {
        matches!(
            self,
            Fault::ForgedClaims { .. } | Fault::SpoofFlood { .. } | Fault::ReplayedClaims { .. }
        )
    }
}

impl Scenario {
    /// A quiet cluster of `nodes` speakers and `ips` IPs with the fast profile, 30 s long.
    pub fn quiet(seed: u64, nodes: usize, ips: usize) -> Self {
        Scenario {
            seed,
            nodes,
            ips,
            profile: Profile::Fast,
            latency_us: (100, 600),
            loss_ppm: 0,
            dup_ppm: 0,
            task_delay_us: (0, 0),
            cpus: None,
            nics: 1,
            faults: Vec::new(),
            end_ms: 30_000,
        }
    }

    /// Adds a fault at `at_ms`.
    pub fn with(mut self, at_ms: u64, fault: Fault) -> Self {
        self.faults.push(Timed { at_ms, fault });
        self.faults.sort_by_key(|t| t.at_ms);
        self
    }

    /// Whether the scenario is benign: no membership loss, every fault benign
    /// ([`Fault::is_benign`]), and at every moment a strict majority of the nodes still
    /// connected both ways (two partitions that are each benign can together leave none).
    pub fn is_benign(&self) -> bool {
        if self.loss_ppm > 0 || !self.faults.iter().all(|t| t.fault.is_benign(self.nodes)) {
            return false;
        }
        let n = self.nodes;
        let mut cut: BTreeSet<(usize, usize)> = BTreeSet::new();
        for t in &self.faults {
            match &t.fault {
                Fault::Isolate(i) => {
                    for j in (0..n).filter(|j| j != i) {
                        cut.insert((*i, j));
                        cut.insert((j, *i));
                    }
                }
                Fault::Partition(side) => {
                    for a in 0..n {
                        for b in (0..n).filter(|b| side.contains(&a) != side.contains(b)) {
                            cut.insert((a, b));
                        }
                    }
                }
                Fault::CutPair(a, b) => {
                    cut.insert((*a, *b));
                    cut.insert((*b, *a));
                }
                Fault::Heal => cut.clear(),
                _ => continue,
            }
            if largest_component(n, &cut) * 2 <= n {
                return false;
            }
        }
        true
    }

    /// When the last fault happens (ms; 0 without faults). A `Stop` lasts until its SIGCONT.
    pub fn last_fault_ms(&self) -> u64 {
        self.faults
            .iter()
            .map(|t| match t.fault {
                Fault::Stop { for_ms, .. }
                | Fault::ApiOutage { for_ms, .. }
                | Fault::ForgedClaims { for_ms, .. }
                | Fault::ReplayedClaims { for_ms, .. }
                | Fault::SpoofFlood { for_ms, .. } => t.at_ms.saturating_add(for_ms),
                _ => t.at_ms,
            })
            .max()
            .unwrap_or(0)
    }

    /// The scenario as a Rust expression, for a regression test.
    pub fn literal(&self) -> String {
        let faults: Vec<String> = self
            .faults
            .iter()
            .map(|t| {
                format!(
                    "Timed {{ at_ms: {}, fault: Fault::{:?} }}",
                    t.at_ms, t.fault
                )
                .replace("Fault::Partition([", "Fault::Partition(vec![")
                .replace("Fault::AdvertiseOn([", "Fault::AdvertiseOn(vec![")
                .replace("ring: [", "ring: vec![")
                .replace("profile: Fast", "profile: Profile::Fast")
                .replace("profile: Safe", "profile: Profile::Safe")
            })
            .collect();
        format!(
            "Scenario {{ seed: {}, nodes: {}, ips: {}, profile: Profile::{:?}, latency_us: {:?}, loss_ppm: {}, dup_ppm: {}, task_delay_us: {:?}, cpus: {:?}, nics: {}, faults: vec![{}], end_ms: {} }}",
            self.seed,
            self.nodes,
            self.ips,
            self.profile,
            self.latency_us,
            self.loss_ppm,
            self.dup_ppm,
            self.task_delay_us,
            self.cpus,
            self.nics,
            faults.join(", "),
            self.end_ms
        )
    }
}

/// The size of the largest set of the `n` nodes connected (directly or through others) by paths
/// that are open both ways (`cut` holds the closed directed paths).
fn largest_component(n: usize, cut: &BTreeSet<(usize, usize)>) -> usize {
    let mut seen: BTreeSet<usize> = BTreeSet::new();
    let mut best = 0;
    for start in 0..n {
        if !seen.insert(start) {
            continue;
        }
        let mut stack = vec![start];
        let mut size = 0;
        while let Some(a) = stack.pop() {
            size += 1;
            for b in 0..n {
                if !cut.contains(&(a, b)) && !cut.contains(&(b, a)) && seen.insert(b) {
                    stack.push(b);
                }
            }
        }
        best = best.max(size);
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_partitions_that_leave_no_majority_are_not_benign() {
        let one = Scenario::quiet(1, 5, 1).with(5_000, Fault::Partition(vec![0, 1]));
        assert!(one.is_benign());
        let two = one.with(5_000, Fault::Partition(vec![2, 3]));
        assert!(!two.is_benign());
        let healed = Scenario::quiet(1, 5, 1)
            .with(5_000, Fault::Partition(vec![0, 1]))
            .with(6_000, Fault::Heal)
            .with(7_000, Fault::Partition(vec![2, 3]));
        assert!(healed.is_benign());
        let lossy = Scenario {
            loss_ppm: 1,
            ..Scenario::quiet(1, 5, 1)
        };
        assert!(!lossy.is_benign());
    }
}
