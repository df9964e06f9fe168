//! Fuzz target `arp`: the ARP parser (`ferrolb_l2::wire::arp::parse_arp`) and the claim proof an ARP frame carries.
//! The checks are [`ferrolb_fuzz::arp`]; run with `cargo +nightly fuzz run arp` (docs/testing.md,
//! "Fuzzing").
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferrolb_fuzz::arp(data));
