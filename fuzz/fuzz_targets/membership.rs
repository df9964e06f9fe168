//! Fuzz target `membership`: the membership envelope's opening path and the speaker's receive path behind it (`MembershipCore::handle_datagram`), with plaintexts sealed under a fixed key.
//! The checks are [`ferrolb_fuzz::membership`]; run with `cargo +nightly fuzz run membership` (docs/testing.md,
//! "Fuzzing").
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferrolb_fuzz::membership(data));
