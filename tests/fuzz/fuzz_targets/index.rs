//! Fuzzes the index reader and queries on it; see `tidewatch_fuzz::index`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidewatch_fuzz::index(data));
