//! The checks behind ferrolb's `cargo fuzz` targets (issue #27 item 13), as plain functions so
//! that the fuzz targets (`fuzz/fuzz_targets/*.rs`, nightly, libFuzzer) and the stable unit
//! tests that replay the kept corpus (`fuzz/corpus/<target>/`) run the same code.
//!
//! Each function takes the fuzzer's bytes, runs one parser of untrusted input on them and
//! asserts what must hold whatever the bytes: no panic, and the round trips and invariants
//! listed on each function. A failed assertion is a bug (the fuzzer reports it as a crash).
//!
//! | target | input | what is fed | source of the bytes in production |
//! |---|---|---|---|
//! | [`arp`] | one Ethernet frame | `wire::arp::parse_arp`, `wire::claim_proof::from_arp` | any LAN host (`AF_PACKET`) |
//! | [`ndp`] | one Ethernet frame | `wire::ndp::parse_ndp`, `wire::claim_proof::from_na` | any LAN host (`AF_PACKET`) |
//! | [`membership`] | a script of datagrams ([`membership`] documents its format) | `membership::envelope::Opener::open`, `MembershipCore::handle_datagram` | any host that reaches the membership port; the sealed kind only a key holder |
//! | [`pool`] | a flag byte and `spec.addresses` lines | `addresses::PoolAddresses::parse` | a user's `IPAddressPool` (a pool stored before a CEL rule existed skips admission) |
//!
//! How to run them, the figures of the long runs and the corpus are in `docs/testing.md`
//! ("Fuzzing").

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use ferrolb_crds::addresses::{AddressEntry, Family, PoolAddresses};
use ferrolb_l2::membership::envelope::{Opener, Sealer};
use ferrolb_l2::membership::{
    Clock, Counters, Key, KeyRing, MembershipConfig, MembershipCore, SpeakerId,
};
use ferrolb_l2::wire::arp::{build_arp, parse_arp};
use ferrolb_l2::wire::claim_proof::{self, ClaimKeys};
use ferrolb_l2::wire::ndp::{
    NdpMessage, build_neighbor_advertisement, build_neighbor_solicitation, parse_ndp,
};
use rand::SeedableRng;
use rand::rngs::StdRng;

/// The fixed wall clock of the fuzzed membership, milliseconds since the Unix epoch
/// (2027-01-15): every sealed datagram carries it, so none is stale.
pub const WALL_MS: u64 = 1_800_000_000_000;

/// The membership key of the fuzz targets and their seed corpus (never a real cluster's: it is
/// in the repository). Bytes `i * 47 + 5`, which pass the weak-key checks.
pub fn fuzz_key() -> Key {
    let mut bytes = [0u8; 32];
    for (i, b) in (0u8..).zip(bytes.iter_mut()) {
        *b = i.wrapping_mul(47).wrapping_add(5);
    }
    Key::new(bytes).expect("the fuzz key passes the weak-key checks")
}

/// The key ring of [`fuzz_key`] alone.
pub fn fuzz_ring() -> KeyRing {
    KeyRing::single(fuzz_key())
}

/// The identity of the fuzzed speaker (`node-a` at 192.0.2.1:7946, generation 1).
pub fn local_identity() -> SpeakerId {
    SpeakerId::with_generation("node-a", peer_addr(1), 1).expect("a valid identity")
}

/// The identity of the peer whose datagrams the seed corpus holds (`node-b` at 192.0.2.2:7946).
pub fn peer_identity() -> SpeakerId {
    SpeakerId::with_generation("node-b", peer_addr(2), 1).expect("a valid identity")
}

/// `192.0.2.<last>:7946` (TEST-NET-1, RFC 5737: the fuzzed machine is sans-IO, nothing is sent).
pub fn peer_addr(last: u8) -> SocketAddr {
    SocketAddr::from(([192, 0, 2, last], 7946))
}

/// One fixed monotonic origin per process, so that a crash replays the same way.
fn origin() -> Instant {
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    *ORIGIN.get_or_init(Instant::now)
}

/// The membership's clock `ms` milliseconds after [`origin`] (wall clock [`WALL_MS`] + `ms`).
pub fn clock_at(ms: u64) -> Clock {
    Clock {
        mono: origin() + Duration::from_millis(ms),
        wall_ms: WALL_MS + ms,
    }
}

/// ARP: [`parse_arp`] never panics; a frame it accepts rebuilds ([`build_arp`]) into a frame
/// that parses to the same message; [`claim_proof::from_arp`] never panics and a proof it finds
/// re-encodes to the bytes it was read from, and verifying it never panics.
pub fn arp(data: &[u8]) {
    if let Ok(msg) = parse_arp(data) {
        let rebuilt = build_arp(&msg);
        assert_eq!(parse_arp(&rebuilt), Ok(msg), "ARP round trip");
        if let Some(proof) = claim_proof::from_arp(data) {
            let at = claim_proof::ARP_PROOF_OFFSET;
            assert_eq!(
                &proof.to_bytes()[..],
                &data[at..at + claim_proof::PROOF_LEN]
            );
            let _ = claim_keys().verify(&proof, msg.sender_mac, IpAddr::V4(msg.sender_ip), WALL_MS);
        }
    } else {
        let _ = claim_proof::from_arp(data);
    }
}

/// NDP: [`parse_ndp`] never panics; a Neighbor Solicitation or Advertisement it accepts rebuilds
/// (`build_neighbor_solicitation` / `build_neighbor_advertisement`) into a frame that parses to
/// the same message; [`claim_proof::from_na`] never panics, and verifying what it finds never
/// panics.
pub fn ndp(data: &[u8]) {
    let parsed = parse_ndp(data);
    if let Ok(msg) = parsed {
        let rebuilt = match &msg {
            NdpMessage::Solicitation(ns) => build_neighbor_solicitation(ns),
            NdpMessage::Advertisement(na) => build_neighbor_advertisement(na),
        };
        assert_eq!(parse_ndp(&rebuilt), Ok(msg), "NDP round trip");
    }
    let proof = claim_proof::from_na(data);
    if let (Some(proof), Ok(NdpMessage::Advertisement(na))) = (proof, parsed) {
        let mac = na.target_link_layer.unwrap_or(na.eth_src);
        let _ = claim_keys().verify(&proof, mac, IpAddr::V6(na.target), WALL_MS);
    }
}

fn claim_keys() -> &'static ClaimKeys {
    static KEYS: OnceLock<ClaimKeys> = OnceLock::new();
    KEYS.get_or_init(|| ClaimKeys::from_ring(&fuzz_ring()))
}

/// Record kinds of a [`membership`] script.
pub mod step {
    /// The record's bytes are a datagram as received from the network (framing and tag as
    /// they come: almost every one fails to open, as it must).
    pub const RAW: u8 = 0;
    /// The record's bytes are the *plaintext* of a datagram (kind byte, then the SWIM or lease
    /// message): it is sealed with the fuzz key first, as a key holder would, so the fuzzer
    /// reaches everything behind authentication.
    pub const SEALED: u8 = 1;
    /// No bytes: the clock advances by the record's length field, in milliseconds, and the
    /// speaker's timers run.
    pub const TICK: u8 = 2;
}

/// The membership's receive path: one fresh speaker (`node-a`, [`local_identity`], key
/// [`fuzz_key`], `node-b` configured as its peer) is fed a script of records, each
/// `kind: u8, len: u16 big-endian, bytes[len]` (a short last record takes what is left). The kind
/// (taken modulo 3) is one of [`step`]: a raw datagram, a plaintext sealed with the fuzz key
/// first, or a clock tick. Every datagram comes from `node-b`'s address.
///
/// Asserts: opening never panics and a raw datagram opens only if its tag is right (here: never
/// for bytes the fuzzer made up without the key); sealing then opening gives back the plaintext,
/// the timestamp and the nonce; [`MembershipCore::handle_datagram`] and
/// [`MembershipCore::handle_timers`] never panic; the speaker always counts itself alive and
/// never lists more members than the script could have introduced.
pub fn membership(data: &[u8]) {
    let _ = run_membership(data);
}

/// [`membership`], returning the speaker after the script (for the tests).
fn run_membership(data: &[u8]) -> MembershipCore {
    let opener = Opener::new(&fuzz_ring());
    let sealer = Sealer::new(&fuzz_key());
    let mut nonces = StdRng::seed_from_u64(0x5eed);
    let config = MembershipConfig {
        admit_only_peers: true,
        ..MembershipConfig::default()
    };
    let Ok(mut core) = MembershipCore::with_seed(
        local_identity(),
        config,
        &fuzz_ring(),
        Arc::new(Counters::default()),
        7,
    ) else {
        panic!("the default membership configuration is valid");
    };
    let mut now_ms = 0u64;
    core.set_peers([peer_addr(2)], clock_at(now_ms));
    let from = peer_addr(2);
    let mut rest = data;
    let mut datagrams = 0usize;
    while let [kind, hi, lo, tail @ ..] = rest {
        let len = usize::from(u16::from_be_bytes([*hi, *lo]));
        let (bytes, next) = tail.split_at(len.min(tail.len()));
        rest = next;
        match kind % 3 {
            step::RAW => {
                datagrams += 1;
                let opened = opener.open(bytes);
                assert!(opened.is_err(), "a made-up datagram opened: {bytes:02x?}");
                let _ = core.handle_datagram(bytes, from, clock_at(now_ms));
            }
            step::SEALED => {
                datagrams += 1;
                let wall = clock_at(now_ms).wall_ms;
                let Some(sealed) = sealer.seal(bytes, wall, &mut nonces) else {
                    panic!("sealing {} bytes failed", bytes.len());
                };
                let opened = opener.open(&sealed);
                let Ok(opened) = opened else {
                    panic!("a sealed datagram did not open: {opened:?}");
                };
                assert_eq!(opened.payload, bytes, "plaintext round trip");
                assert_eq!(opened.sent_at_ms, wall, "timestamp round trip");
                assert_eq!(&opened.nonce[..], &sealed[13..37], "nonce round trip");
                let _ = core.handle_datagram(&sealed, from, clock_at(now_ms));
            }
            _ => {
                now_ms += len as u64;
                core.handle_timers(clock_at(now_ms));
            }
        }
        let alive = core.alive();
        assert!(
            core.has_left() || alive.contains("node-a"),
            "the speaker lost itself: {alive:?}"
        );
        // Each datagram can introduce a handful of members (foca's updates); a bound, not a
        // count, so the assertion holds whatever foca's packing.
        assert!(alive.len() <= 1 + datagrams * 64, "{} members", alive.len());
        let _ = core.take_outgoing();
        let _ = core.take_events();
    }
    core
}

/// The pool-address parser: the first byte's low bit is `avoidBuggyIPs`, the rest (UTF-8; other
/// bytes are skipped) is one `spec.addresses` entry per line.
///
/// Asserts: [`PoolAddresses::parse`] never panics; it accepts exactly the lists whose every
/// entry [`AddressEntry::parse`] accepts and no entry overlaps a forbidden block; an accepted
/// pool's ranges are sorted, disjoint and non-adjacent per family; its first usable addresses
/// (up to 64 per family) are ascending, usable and covered, and the first is the one
/// `next_usable` names; `count` never panics and is zero exactly when no address is usable.
pub fn pool(data: &[u8]) {
    let Some((&flags, text)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(text) else {
        return;
    };
    let avoid_buggy = flags & 1 == 1;
    let entries: Vec<&str> = text.split('\n').collect();
    let parsed = PoolAddresses::parse(&entries, avoid_buggy);
    let each: Vec<_> = entries.iter().map(|e| AddressEntry::parse(e)).collect();
    let Ok(pool) = parsed else {
        if let Err(e) = &parsed {
            let _ = e.to_string();
            let index = e.index();
            assert!(
                index < entries.len(),
                "error index {index} of {}",
                entries.len()
            );
        }
        let all_parse = each.iter().all(Result::is_ok);
        let none_forbidden = each
            .iter()
            .flatten()
            .all(|entry| entry.forbidden().is_none());
        assert!(
            !(all_parse && none_forbidden),
            "refused a good list: {parsed:?}"
        );
        return;
    };
    assert!(each.iter().all(Result::is_ok), "accepted a bad entry");
    for pair in pool.ranges().windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        if a.family() == b.family() {
            assert!(
                a.last_offset().saturating_add(1) < b.first_offset(),
                "ranges overlap or touch: {a:?} {b:?}"
            );
        } else {
            assert!(
                a.family() == Family::V4 && b.family() == Family::V6,
                "v4 first"
            );
        }
    }
    for family in [Family::V4, Family::V6] {
        let first: Vec<IpAddr> = pool.iter(family).take(64).collect();
        for ip in &first {
            assert!(pool.is_usable(*ip), "{ip} iterated but not usable");
            assert!(pool.covers(*ip), "{ip} iterated but not covered");
        }
        for pair in first.windows(2) {
            assert!(pair[0] < pair[1], "not ascending: {pair:?}");
        }
        let next = pool.next_usable(family, 0).map(|o| family.addr(o));
        assert_eq!(next, first.first().copied(), "next_usable from 0");
        assert_eq!(
            pool.count(family) == 0,
            first.is_empty(),
            "count of {family:?}"
        );
    }
}

#[cfg(test)]
mod tests {
    //! The kept corpus, replayed on stable (`cargo test --manifest-path fuzz/Cargo.toml`, which
    //! `fuzz/run.sh` runs first in the extended tier): every input the long fuzz runs kept
    //! (`fuzz/corpus/<target>/`) and every crash found (`fuzz/regressions/<target>/`) still
    //! passes its target's checks.

    use std::path::{Path, PathBuf};

    fn inputs(dir: &str, target: &str) -> Vec<PathBuf> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join(target);
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut files: Vec<PathBuf> = entries.flatten().map(|e| e.path()).collect();
        files.sort();
        files
    }

    fn replay(target: &str, check: fn(&[u8])) {
        let corpus = inputs("corpus", target);
        assert!(!corpus.is_empty(), "fuzz/corpus/{target} is empty");
        for file in corpus.iter().chain(&inputs("regressions", target)) {
            let bytes = std::fs::read(file).expect("readable corpus file");
            check(&bytes);
        }
    }

    #[test]
    fn arp_corpus_passes() {
        replay("arp", super::arp);
    }

    #[test]
    fn ndp_corpus_passes() {
        replay("ndp", super::ndp);
    }

    #[test]
    fn membership_corpus_passes() {
        replay("membership", super::membership);
    }

    /// The harness reaches past authentication: the seed script of `node-b` meeting `node-a`,
    /// sealed by the target, makes the fuzzed speaker count `node-b` alive (were the key or the
    /// clock wrong, every datagram would be dropped and the fuzzer would test nothing but the
    /// tag check).
    #[test]
    fn the_sealed_seed_script_gets_past_authentication() {
        let script = std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus/membership/seed-meet"),
        )
        .expect("the seed script is in the repository");
        let core = super::run_membership(&script);
        assert!(core.alive().contains("node-b"), "alive: {:?}", core.alive());
        let counters = core.counters().snapshot();
        assert_eq!(counters.dropped_auth, 0, "{counters:?}");
    }

    #[test]
    fn pool_corpus_passes() {
        replay("pool", super::pool);
    }
}
