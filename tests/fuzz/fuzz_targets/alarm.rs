//! Fuzzes `alarm::parse` the way the daemon calls it; see `tidewatch_fuzz::alarm`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| tidewatch_fuzz::alarm(data));
