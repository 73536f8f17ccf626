//! Measurement: what `tidewatch eval` and `tidewatch bench` run, on the
//! daemon's own components (loaded by `load`, never through the daemon).
//!
//! `eval` scores answers on labeled alarms, `speculation` compares
//! generation speed with lookup decoding off and on, `bench` measures speed
//! and memory per model configuration, `ttft` summarises first-token
//! probes, and `stats` holds the statistics they all report with.

pub mod bench;
pub mod eval;
pub mod speculation;
pub mod stats;
pub mod ttft;
