//! Measurement: what `tidewatch eval` and `tidewatch bench` run.

pub mod bench;
pub mod eval;
pub mod speculation;
pub mod ttft;
