//! Seeded random scenarios: from one seed, a cluster size and a fault class, a scenario with a
//! few faults spread over time, each leaving a majority running (the invariants assume one).

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{RngExt, SeedableRng};

use crate::invariants::t_converge;
use crate::scenario::{Fault, Scenario};

/// Which faults a generated scenario draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultClass {
    /// Crash, restart, SIGTERM, SIGSTOP: one process at a time, always restarted/resumed.
    Process,
    /// Isolating one node's membership, a partition that leaves a majority, or the paths
    /// between two nodes only (non-transitive), then a heal.
    Partition,
    /// One-way loss, then a heal: one directed path, or everything a node sends, or
    /// everything it receives.
    OneWay,
    /// Loss of carrier on one node, then carrier back.
    Carrier,
    /// An outsider without the key: forged ARP claims for an IP, or a spoofed membership flood.
    Adversary,
    /// The API: a Node NotReady, labelled excluded or cordoned, deleted and recreated; an
    /// endpoint of an `externalTrafficPolicy: Local` Service moving (the Service stays `Local`);
    /// the L2Advertisement edited to leave one node out and back; a Service's IP changed to a
    /// fresh one; one node's watch late (up to 500 ms) or cut off while objects change.
    Api,
    /// Steady membership loss (0.5–5 % of every datagram, for the whole run) and no other fault.
    Loss,
    /// The process faults, with every hop between a speaker's tasks delayed by up to 1–100 ms
    /// (CPU starvation as late wake-ups).
    Starved,
    /// Two NICs per node on two segments (clients on the first): one NIC of a node loses
    /// carrier, then gets it back; the other keeps it.
    TwoNics,
    /// A key rotation as rolling restarts of every speaker, one at a time: the documented three
    /// steps (old+new, new+old, new) or, one time in three, a wrong order (a step skipped).
    Rotation,
    /// One node's wall clock steps (0.5–3 s, or 5–120 s, either direction), then steps back: an
    /// NTP step and its correction.
    Clock,
    /// Two faults of other classes at once (not in [`FaultClass::ALL`]: run with `--class
    /// combined`): a speaker down while another restarts; a split with a restart on either side;
    /// carrier loss on a client-facing NIC behind a one-way cut; a split during which a Node of
    /// the majority side is deleted and a minority speaker restarts; a split that also cuts the
    /// majority side off the API server while the minority sees a Node excluded. Half of the
    /// scenarios run one node's wall clock 2.5–25 s off from the start (inside the membership's
    /// replay window, outside the claim proof's skew allowance).
    Combined,
}

impl FaultClass {
    /// Every class.
    pub const ALL: [FaultClass; 11] = [
        FaultClass::Process,
        FaultClass::Partition,
        FaultClass::OneWay,
        FaultClass::Carrier,
        FaultClass::Adversary,
        FaultClass::Api,
        FaultClass::Loss,
        FaultClass::Starved,
        FaultClass::Clock,
        FaultClass::TwoNics,
        FaultClass::Rotation,
    ];

    /// Classes that only `ferrolb-sim` runs (by name), not the test sweep.
    pub const EXTRA: [FaultClass; 1] = [FaultClass::Combined];

    /// A short name.
    pub fn label(self) -> &'static str {
        match self {
            FaultClass::Process => "process",
            FaultClass::Partition => "partition",
            FaultClass::OneWay => "one-way",
            FaultClass::Carrier => "carrier",
            FaultClass::Adversary => "adversary",
            FaultClass::Api => "api",
            FaultClass::Loss => "loss",
            FaultClass::Starved => "starved",
            FaultClass::Clock => "clock",
            FaultClass::Combined => "combined",
            FaultClass::TwoNics => "two-nics",
            FaultClass::Rotation => "rotation",
        }
    }
}

/// A scenario with 1–3 fault episodes of `class`, each starting 4–8 s after the previous one
/// ended (so the cluster settles in between), drawn from `seed`; it ends
/// [`t_converge`] + 1 s after the last fault.
pub fn scenario(seed: u64, nodes: usize, ips: usize, class: FaultClass) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x005e_ed0f_fa17);
    let mut s = Scenario::quiet(seed, nodes, ips);
    let episodes = rng.random_range(1..=3u32);
    let mut t: u64 = rng.random_range(4_000..8_000);
    if class == FaultClass::Loss {
        s.loss_ppm = rng.random_range(5_000..50_000);
        s.end_ms = 60_000;
        return s;
    }
    if class == FaultClass::Starved {
        s.task_delay_us = (0, rng.random_range(1_000..100_000));
    }
    if class == FaultClass::Rotation {
        let steps: Vec<Vec<u8>> = match rng.random_range(0..6u32) {
            // A step skipped: the new key seals before every node opens it, or the old key is
            // dropped before every node seals with the new one.
            0 => vec![vec![1, 0], vec![1]],
            1 => vec![vec![0, 1], vec![1]],
            _ => vec![vec![0, 1], vec![1, 0], vec![1]],
        };
        for ring in steps {
            let mut order: Vec<usize> = (0..nodes).collect();
            order.shuffle(&mut rng);
            for node in order {
                let down: u64 = rng.random_range(300..1_500);
                s = s
                    .with(t, Fault::Terminate(node))
                    .with(
                        t,
                        Fault::SetKeys {
                            node,
                            ring: ring.clone(),
                        },
                    )
                    .with(t + down, Fault::Restart(node));
                t += down + rng.random_range(2_000..4_000);
            }
            t += 4_000;
        }
        let settle = u64::try_from(t_converge(&s).as_millis()).unwrap_or(u64::MAX);
        s.end_ms = s.last_fault_ms() + settle + 1_000;
        return s;
    }
    if class == FaultClass::TwoNics || class == FaultClass::Combined {
        s.nics = 2;
    }
    if class == FaultClass::Combined && rng.random_bool(0.5) {
        let skew: i64 = rng.random_range(2_500..25_000);
        let skew = if rng.random_bool(0.5) { skew } else { -skew };
        s = s.with(
            500,
            Fault::ClockStep {
                node: rng.random_range(0..nodes),
                ms: skew,
            },
        );
    }
    if class == FaultClass::Api && nodes > 1 {
        // One node's watch is late from the start.
        let node = rng.random_range(0..nodes);
        s = s.with(
            1_000,
            Fault::WatchDelay {
                node,
                ms: rng.random_range(1..500),
            },
        );
    }
    for _ in 0..episodes {
        let victim = rng.random_range(0..nodes);
        let other = (victim + rng.random_range(1..nodes.max(2))) % nodes.max(1);
        let lasts: u64 = rng.random_range(50..3_000);
        match class {
            FaultClass::Process | FaultClass::Starved => match rng.random_range(0..4u32) {
                0 => {
                    s = s
                        .with(t, Fault::Crash(victim))
                        .with(t + lasts, Fault::Restart(victim));
                }
                1 => {
                    s = s
                        .with(t, Fault::Terminate(victim))
                        .with(t + lasts, Fault::Restart(victim));
                }
                _ => {
                    s = s.with(
                        t,
                        Fault::Stop {
                            node: victim,
                            for_ms: lasts,
                        },
                    );
                }
            },
            FaultClass::Partition => {
                let fault = if nodes >= 3 && rng.random_bool(0.2) {
                    Fault::CutPair(victim, other)
                } else if rng.random_bool(0.5) || nodes < 4 {
                    Fault::Isolate(victim)
                } else {
                    let minority = rng.random_range(1..=(nodes - 1) / 2);
                    Fault::Partition((0..minority).map(|k| (victim + k) % nodes).collect())
                };
                s = s.with(t, fault).with(t + lasts, Fault::Heal);
            }
            FaultClass::OneWay => {
                let cuts: Vec<(usize, usize)> = match rng.random_range(0..3u32) {
                    0 => vec![(victim, other)],
                    1 => (0..nodes)
                        .filter(|j| *j != victim)
                        .map(|j| (victim, j))
                        .collect(),
                    _ => (0..nodes)
                        .filter(|j| *j != victim)
                        .map(|j| (j, victim))
                        .collect(),
                };
                for (from, to) in cuts {
                    s = s.with(t, Fault::CutOneWay { from, to });
                }
                s = s.with(t + lasts, Fault::Heal);
            }
            FaultClass::Adversary => {
                let fault = if rng.random_bool(0.1) {
                    // Across a failback, where a replay can hurt: the victim crashes and
                    // restarts, and an interim owner's announcements are there to capture.
                    s = s
                        .with(t.saturating_sub(1_000), Fault::Crash(victim))
                        .with(t, Fault::Restart(victim));
                    Fault::ReplayedClaims {
                        ip: rng.random_range(0..ips.max(1)),
                        every_ms: rng.random_range(10..1_000),
                        for_ms: lasts,
                    }
                } else if rng.random_bool(0.5) {
                    Fault::ForgedClaims {
                        ip: rng.random_range(0..ips.max(1)),
                        every_ms: rng.random_range(10..1_000),
                        for_ms: lasts,
                    }
                } else {
                    Fault::SpoofFlood {
                        per_ms: rng.random_range(1..150),
                        for_ms: lasts.min(1_000),
                    }
                };
                s = s.with(t, fault);
            }
            // Returned above: steady loss, and the rotation, are the whole scenario.
            FaultClass::Loss | FaultClass::Rotation => {}
            FaultClass::Api => {
                let k = rng.random_range(0..ips.max(1));
                s = match rng.random_range(0..7u32) {
                    0 => s
                        .with(
                            t,
                            Fault::NodeReady {
                                node: victim,
                                ready: false,
                            },
                        )
                        .with(
                            t + lasts,
                            Fault::NodeReady {
                                node: victim,
                                ready: true,
                            },
                        ),
                    1 => {
                        // Labelled excluded or, one time in two, cordoned (issue #29 O3): the
                        // choice comes from a generator of its own, so that every other draw
                        // of the class is what it was before cordon joined it.
                        let cordon = StdRng::seed_from_u64(seed ^ 0x0c0d_0029 ^ t).random_bool(0.5);
                        let fault = |on| {
                            if cordon {
                                Fault::Cordon { node: victim, on }
                            } else {
                                Fault::ExcludeLabel { node: victim, on }
                            }
                        };
                        s.with(t, fault(true)).with(t + lasts, fault(false))
                    }
                    2 => s
                        .with(
                            t,
                            Fault::EndpointOn {
                                ip: k,
                                node: victim,
                            },
                        )
                        .with(t + lasts, Fault::EndpointOn { ip: k, node: other }),
                    3 => s
                        .with(
                            t,
                            Fault::ApiOutage {
                                node: victim,
                                for_ms: lasts,
                            },
                        )
                        .with(t + lasts / 2, Fault::EndpointOn { ip: k, node: other }),
                    4 => s
                        .with(t, Fault::DeleteNode(victim))
                        .with(t + lasts, Fault::RecreateNode(victim)),
                    5 => {
                        let keep: Vec<usize> = (0..nodes).filter(|n| *n != victim).collect();
                        s.with(t, Fault::AdvertiseOn(keep))
                            .with(t + lasts, Fault::AdvertiseOn(Vec::new()))
                    }
                    _ => s.with(t, Fault::ChangeIp { ip: k }),
                };
            }
            FaultClass::Clock => {
                let size: i64 = if rng.random_bool(0.5) {
                    rng.random_range(500..3_000)
                } else {
                    rng.random_range(5_000..120_000)
                };
                let ms = if rng.random_bool(0.5) { size } else { -size };
                s = s.with(t, Fault::ClockStep { node: victim, ms }).with(
                    t + lasts,
                    Fault::ClockStep {
                        node: victim,
                        ms: -ms,
                    },
                );
            }
            FaultClass::TwoNics => {
                let nic = usize::from(rng.random_bool(0.3));
                s = s
                    .with(
                        t,
                        Fault::NicCarrier {
                            node: victim,
                            nic,
                            up: false,
                        },
                    )
                    .with(
                        t + lasts,
                        Fault::NicCarrier {
                            node: victim,
                            nic,
                            up: true,
                        },
                    );
            }
            FaultClass::Combined if nodes >= 3 => {
                // A minority side that holds `victim` (one node, or up to (n-1)/2 from it).
                let size = rng.random_range(1..=((nodes - 1) / 2).max(1));
                let minority: Vec<usize> = (0..size).map(|k| (victim + k) % nodes).collect();
                let majority: Vec<usize> = (0..nodes).filter(|n| !minority.contains(n)).collect();
                let far = majority[rng.random_range(0..majority.len())];
                let near = minority[rng.random_range(0..minority.len())];
                let gap: u64 = rng.random_range(200..2_000);
                let down: u64 = rng.random_range(100..1_000);
                // Two speakers down at once leave no majority running at 3 nodes.
                let first = if nodes >= 5 { 0 } else { 1 };
                s = match rng.random_range(first..5u32) {
                    // A speaker down while another restarts.
                    0 => s
                        .with(t, Fault::Crash(victim))
                        .with(t + gap, Fault::Terminate(other))
                        .with(t + gap + down, Fault::Restart(other))
                        .with(t + lasts.max(gap + down + 3_500), Fault::Restart(victim)),
                    // A split with a restart on either side.
                    1 => {
                        let who = if rng.random_bool(0.5) { far } else { near };
                        s.with(t, Fault::Partition(minority))
                            .with(t + gap, Fault::Terminate(who))
                            .with(t + gap + down, Fault::Restart(who))
                            .with(t + gap + down + lasts, Fault::Heal)
                    }
                    // Carrier loss on a client NIC behind a one-way cut from that node.
                    2 => {
                        let (cut, carrier) = if rng.random_bool(0.5) {
                            (t, t + gap)
                        } else {
                            (t + gap, t)
                        };
                        s.with(
                            cut,
                            Fault::CutOneWay {
                                from: victim,
                                to: other,
                            },
                        )
                        .with(
                            carrier,
                            Fault::NicCarrier {
                                node: victim,
                                nic: 0,
                                up: false,
                            },
                        )
                        .with(t + gap + lasts, Fault::Heal)
                        .with(
                            t + gap + lasts + 2_000,
                            Fault::NicCarrier {
                                node: victim,
                                nic: 0,
                                up: true,
                            },
                        )
                    }
                    // A split; a majority-side Node deleted; a minority speaker restarts.
                    3 => s
                        .with(t, Fault::Partition(minority))
                        .with(t + gap, Fault::DeleteNode(far))
                        .with(t + gap + down, Fault::Crash(near))
                        .with(t + gap + 2 * down, Fault::Restart(near))
                        .with(t + gap + 2 * down + lasts, Fault::Heal)
                        .with(t + gap + 2 * down + lasts + 1_000, Fault::RecreateNode(far)),
                    // A split that cuts the majority off the API server too; the minority sees
                    // a majority-side Node excluded.
                    _ => {
                        let until = gap + lasts + 1_000;
                        let mut s = s.with(t, Fault::Partition(minority));
                        for n in &majority {
                            s = s.with(
                                t,
                                Fault::ApiOutage {
                                    node: *n,
                                    for_ms: until,
                                },
                            );
                        }
                        s.with(
                            t + gap,
                            Fault::ExcludeLabel {
                                node: far,
                                on: true,
                            },
                        )
                        .with(t + until, Fault::Heal)
                        .with(
                            t + until + 1_000,
                            Fault::ExcludeLabel {
                                node: far,
                                on: false,
                            },
                        )
                    }
                };
            }
            FaultClass::Combined => {}
            FaultClass::Carrier => {
                s = s
                    .with(
                        t,
                        Fault::Carrier {
                            node: victim,
                            up: false,
                        },
                    )
                    .with(
                        t + lasts,
                        Fault::Carrier {
                            node: victim,
                            up: true,
                        },
                    );
            }
        }
        t += lasts + rng.random_range(4_000..8_000);
        if class == FaultClass::Combined {
            // Its episodes last up to `lasts` + 5 s.
            t += 5_000;
        }
    }
    let settle = u64::try_from(t_converge(&s).as_millis()).unwrap_or(u64::MAX);
    s.end_ms = s.last_fault_ms() + settle + 1_000;
    s
}
