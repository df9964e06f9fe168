//! Fuzz target `ndp`: the NDP parser (`ferrolb_l2::wire::ndp::parse_ndp`) and the claim proof a Neighbor Advertisement carries.
//! The checks are [`ferrolb_fuzz::ndp`]; run with `cargo +nightly fuzz run ndp` (docs/testing.md,
//! "Fuzzing").
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferrolb_fuzz::ndp(data));
