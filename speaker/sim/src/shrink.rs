//! Shrinking a failing scenario to a minimal fault list: greedily drops faults (one at a time,
//! then pairs of neighbours, e.g. a crash with its restart) while the scenario still fails the
//! same way, then shortens its end to what the invariants need.

use crate::invariants::t_converge;
use crate::scenario::Scenario;

/// The smallest scenario found that still satisfies `fails` (which must hold for `s`).
pub fn shrink(s: &Scenario, mut fails: impl FnMut(&Scenario) -> bool) -> Scenario {
    let mut best = s.clone();
    loop {
        let mut smaller = None;
        'search: for width in [1usize, 2] {
            for i in 0..best.faults.len() {
                if i + width > best.faults.len() {
                    break;
                }
                let mut c = best.clone();
                c.faults.drain(i..i + width);
                c.end_ms = end_for(&c).min(best.end_ms);
                if fails(&c) {
                    smaller = Some(c);
                    break 'search;
                }
            }
        }
        match smaller {
            Some(c) => best = c,
            None => break,
        }
    }
    let mut c = best.clone();
    c.end_ms = end_for(&c).min(best.end_ms);
    if c != best && fails(&c) {
        best = c;
    }
    best
}

/// The shortest end at which every invariant of `s` is checked.
fn end_for(s: &Scenario) -> u64 {
    let settle = u64::try_from(t_converge(s).as_millis()).unwrap_or(u64::MAX);
    s.last_fault_ms().max(4_000) + settle + 1_000
}
