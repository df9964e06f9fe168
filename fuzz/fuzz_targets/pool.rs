//! Fuzz target `pool`: the pool-address parser (`ferrolb_crds::addresses::PoolAddresses::parse`).
//! The checks are [`ferrolb_fuzz::pool`]; run with `cargo +nightly fuzz run pool` (docs/testing.md,
//! "Fuzzing").
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ferrolb_fuzz::pool(data));
