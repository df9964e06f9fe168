//! Properties over generated scenarios (proptest: random fault lists, shrunk to a minimal
//! failing list when a property breaks). The sweep in `invariants.rs` records what today's
//! protocol violates; these are the rules that already hold for every scenario of their fault
//! model, checked on cases the fixed seeds never draw.
#![allow(clippy::unwrap_used)]

use ferrolb_sim::{Fault, Scenario, check, run};
use proptest::prelude::*;

/// An outsider's fault without the key: forged claims (a peer's MAC, no proof), replays of the
/// signed claims speakers really sent, or a spoofed membership flood.
fn outsider(ips: usize) -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0..ips, 10u64..1_000, 50u64..3_000).prop_map(|(ip, every_ms, for_ms)| {
            Fault::ReplayedClaims {
                ip,
                every_ms,
                for_ms,
            }
        }),
        (0..ips, 10u64..1_000, 50u64..3_000).prop_map(|(ip, every_ms, for_ms)| {
            Fault::ForgedClaims {
                ip,
                every_ms,
                for_ms,
            }
        }),
        (1u32..150, 50u64..1_000).prop_map(|(per_ms, for_ms)| Fault::SpoofFlood { per_ms, for_ms }),
    ]
}

/// Any fault of a node's process, its links or the API server, not an outsider's.
fn any_fault(nodes: usize, ips: usize) -> impl Strategy<Value = Fault> {
    prop_oneof![
        (0..nodes).prop_map(Fault::Crash),
        (0..nodes).prop_map(Fault::Terminate),
        (0..nodes).prop_map(Fault::Restart),
        (0..nodes, 10u64..3_000).prop_map(|(node, for_ms)| Fault::Stop { node, for_ms }),
        (0..nodes).prop_map(Fault::Isolate),
        Just(Fault::Heal),
        (0..nodes, 0..nodes).prop_map(|(from, to)| Fault::CutOneWay { from, to }),
        (0..nodes, any::<bool>()).prop_map(|(node, up)| Fault::Carrier { node, up }),
        (0..nodes, any::<bool>()).prop_map(|(node, ready)| Fault::NodeReady { node, ready }),
        (0..ips, 0..nodes).prop_map(|(ip, node)| Fault::EndpointOn { ip, node }),
        (0..nodes, -5_000i64..5_000).prop_map(|(node, ms)| Fault::ClockStep { node, ms }),
    ]
}

fn scenario_with(seed: u64, nodes: usize, ips: usize, faults: Vec<(u64, Fault)>) -> Scenario {
    let mut s = Scenario::quiet(seed, nodes, ips);
    for (at, f) in faults {
        s = s.with(at, f);
    }
    s.end_ms = s.last_fault_ms() + 10_000;
    s
}

proptest! {
    // A fixed seed, as the README's test command runs a fixed list of cases; the long runs are
    // `ferrolb-sim search`'s.
    #![proptest_config(ProptestConfig {
        cases: 24,
        rng_seed: proptest::test_runner::RngSeed::Fixed(0x5eed_f00d),
        ..ProptestConfig::default()
    })]

    /// I-auth, and every other invariant, under any mix of an outsider's forged claims, replayed
    /// claims and spoofed floods.
    #[test]
    fn outsiders_without_the_key_change_nothing(
        seed in any::<u64>(),
        nodes in 3usize..=5,
        faults in prop::collection::vec((4_000u64..15_000, outsider(4)), 1..4),
    ) {
        let s = scenario_with(seed, nodes, 4, faults);
        let v = check(&s, &run(&s));
        prop_assert!(v.is_empty(), "{v:#?}\n{}", s.literal());
    }

    /// I-announce under any fault: no node announces an IP at an instant it does not answer it.
    #[test]
    fn announcements_only_come_from_a_node_that_answers(
        seed in any::<u64>(),
        nodes in 3usize..=5,
        faults in prop::collection::vec((4_000u64..15_000, any_fault(5, 4)), 1..6),
    ) {
        let faults = faults
            .into_iter()
            .filter(|(_, f)| match f {
                Fault::Crash(n) | Fault::Terminate(n) | Fault::Restart(n) | Fault::Isolate(n) => *n < nodes,
                Fault::Stop { node, .. } | Fault::Carrier { node, .. } | Fault::NodeReady { node, .. }
                | Fault::EndpointOn { node, .. } | Fault::ClockStep { node, .. } => *node < nodes,
                Fault::CutOneWay { from, to } => *from < nodes && *to < nodes,
                _ => true,
            })
            .collect();
        let s = scenario_with(seed, nodes, 4, faults);
        let r = run(&s);
        prop_assert!(r.stray_announcements.is_empty(), "{:?}\n{}", r.stray_announcements, s.literal());
    }
}
