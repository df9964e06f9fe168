//! Helpers shared by the membership tests on real UDP (`membership_udp.rs`,
//! `membership_flood.rs`) and the F5 measurement (`membership_measure.rs`). Each test binary
//! uses a part of them.
#![allow(dead_code, clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use ferrolb_speaker::membership::envelope::{MAGIC, OVERHEAD, VERSION};
use ferrolb_speaker::membership::{
    KeyRing, Membership, MembershipConfig, MembershipEvent, MembershipSettings,
};
use rand::SeedableRng;
use tokio::sync::broadcast;

pub const GUARD: Duration = Duration::from_secs(20);

pub fn ring(seed: u8) -> KeyRing {
    let hex: String = (0..32u8)
        .map(|i| format!("{:02x}", i.wrapping_mul(53).wrapping_add(seed)))
        .collect();
    KeyRing::parse(hex.as_bytes()).unwrap()
}

pub async fn start_at(
    name: &str,
    bind: SocketAddr,
    keys: &KeyRing,
    config: &MembershipConfig,
) -> Membership {
    Membership::start(MembershipSettings {
        node_name: name.to_owned(),
        bind_addr: bind,
        advertise_addr: None,
        keys: keys.clone(),
        config: config.clone(),
        generation: None,
    })
    .await
    .unwrap()
}

pub fn names(ns: &[&str]) -> BTreeSet<String> {
    ns.iter().map(|s| (*s).to_owned()).collect()
}

pub async fn wait_for_set(m: &Membership, expected: &BTreeSet<String>) {
    let mut rx = m.members();
    let waited = tokio::time::timeout(GUARD, rx.wait_for(|set| set == expected))
        .await
        .is_ok();
    assert!(
        waited,
        "{} never saw {expected:?}; has {:?}",
        m.identity().name,
        *rx.borrow()
    );
}

pub fn drain(rx: &mut broadcast::Receiver<MembershipEvent>) -> Vec<MembershipEvent> {
    let mut out = Vec::new();
    while let Ok(e) = rx.try_recv() {
        out.push(e);
    }
    out
}

/// `count` datagrams, reproducible from `seed`: a quarter random garbage of varying length, the
/// rest with the right magic and version and random bytes after (keyless envelopes, which pass
/// the framing check and so reach the source and budget checks).
pub fn keyless_material(count: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    (0..count)
        .map(|i| {
            let len = OVERHEAD + (i * 131) % 1300;
            let mut d = vec![0u8; len];
            rand::Rng::fill_bytes(&mut rng, &mut d);
            if i % 4 != 0 {
                d[..4].copy_from_slice(&MAGIC);
                d[4] = VERSION;
            }
            d
        })
        .collect()
}
