//! Measurement: what `tidewatch eval` and `tidewatch bench` run, on the
//! daemon's own components (loaded by `load`, never through the daemon).
//!
//! `eval` scores answers on labeled alarms, `speculation` compares
//! generation speed with lookup decoding off and on, `tiers` what the
//! prompt cache's RAM and disk tiers and `warm` save an alarm, `bench` measures speed
//! and memory per model configuration, `ttft` summarises first-token
//! probes, `coverage` tables what coverage was said against the truth, and `stats` holds the statistics they all report with.

pub(crate) mod bench;
pub(crate) mod coverage;
pub(crate) mod eval;
pub(crate) mod notes;
pub(crate) mod speculation;
mod stats;
pub(crate) mod tiers;
mod ttft;
