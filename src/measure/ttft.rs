//! TTFT probes (cold, prefix hit, repeat) and their statistics, for `eval`
//! and `bench`.
//!
//! Owns what a probe result means and how probes become medians and ratios.
//! Pure: the probes are run by `eval` and `bench`; nothing here touches a slot.

use serde::Serialize;

use crate::measure::stats::median;

/// One TTFT measurement, or why there is none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Probe {
    /// Not measured for this case (only every few cases are probed cold).
    Skipped,
    /// The probe ran and produced no first token.
    Failed,
    Ms(f64),
}

impl Probe {
    /// A probe's outcome from the TTFT of the job it ran, if the job produced one.
    pub fn of(ttft_ms: Option<f64>) -> Probe {
        // A job that failed, or ended before its first token, has no TTFT; a
        // 0 here would read as the fastest probe of all and pull medians down.
        match ttft_ms {
            Some(ms) if ms.is_finite() && ms > 0.0 => Probe::Ms(ms),
            _ => Probe::Failed,
        }
    }
}

/// The probes of one case.
#[derive(Debug, Clone, Copy)]
pub struct CaseProbes {
    /// From an empty cache.
    pub cold: Probe,
    /// With only the static prefix cached, as every daemon job starts.
    pub prefix: Probe,
    /// The same alarm again at once, with a new id and reading.
    pub repeat: Probe,
}

/// Medians and ratios over the probes that succeeded, and how many failed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct TtftStats {
    /// Median cold TTFT; None when no cold probe succeeded.
    pub ttft_cold_ms: Option<f64>,
    /// Median TTFT with only the static prefix cached.
    pub ttft_prefix_ms_p50: Option<f64>,
    /// Median TTFT of the repeated alarms.
    pub ttft_repeat_ms: Option<f64>,
    /// Cases probed cold.
    pub ttft_cases: usize,
    /// Medians of the per-case ratios to cold, over the cases where both
    /// probes succeeded.
    pub prefix_over_cold: Option<f64>,
    pub repeat_over_cold: Option<f64>,
    pub ttft_cold_failed: usize,
    pub ttft_prefix_failed: usize,
    pub ttft_repeat_failed: usize,
}

/// Summarises every case's probes. A failed probe enters no median and no
/// ratio; it is only counted.
pub fn stats(cases: &[CaseProbes]) -> TtftStats {
    let (mut cold, mut prefix, mut repeat, mut r_prefix, mut r_repeat) =
        (vec![], vec![], vec![], vec![], vec![]);
    let mut s = TtftStats::default();
    for c in cases {
        for (p, v, failed) in [
            (c.cold, &mut cold, &mut s.ttft_cold_failed),
            (c.prefix, &mut prefix, &mut s.ttft_prefix_failed),
            (c.repeat, &mut repeat, &mut s.ttft_repeat_failed),
        ] {
            match p {
                Probe::Ms(ms) => v.push(ms),
                Probe::Failed => *failed += 1,
                Probe::Skipped => {}
            }
        }
        if c.cold != Probe::Skipped {
            s.ttft_cases += 1;
        }
        // Ratios pair probes of the same prompt, so both must have succeeded.
        if let Probe::Ms(cold_ms) = c.cold {
            if let Probe::Ms(p) = c.prefix {
                r_prefix.push(p / cold_ms);
            }
            if let Probe::Ms(r) = c.repeat {
                r_repeat.push(r / cold_ms);
            }
        }
    }
    s.ttft_cold_ms = median(cold);
    s.ttft_prefix_ms_p50 = median(prefix);
    s.ttft_repeat_ms = median(repeat);
    s.prefix_over_cold = median(r_prefix);
    s.repeat_over_cold = median(r_repeat);
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use Probe::{Failed, Ms, Skipped};

    fn case(cold: Probe, prefix: Probe, repeat: Probe) -> CaseProbes {
        CaseProbes {
            cold,
            prefix,
            repeat,
        }
    }

    #[test]
    fn a_job_without_a_first_token_is_a_failed_probe() {
        assert_eq!(Probe::of(None), Failed);
        assert_eq!(Probe::of(Some(f64::NAN)), Failed);
        assert_eq!(Probe::of(Some(0.0)), Failed);
        assert_eq!(Probe::of(Some(12.5)), Ms(12.5));
    }

    #[test]
    fn failed_cold_probes_are_counted_and_leave_no_median() {
        let s = stats(&[
            case(Failed, Ms(50.0), Failed),
            case(Failed, Ms(60.0), Ms(5.0)),
        ]);
        assert_eq!(s.ttft_cold_ms, None);
        assert_eq!(s.ttft_cold_failed, 2);
        assert_eq!(s.ttft_repeat_failed, 1);
        assert_eq!(s.ttft_repeat_ms, Some(5.0));
        assert_eq!(s.prefix_over_cold, None);
        assert_eq!(s.repeat_over_cold, None);
    }

    #[test]
    fn a_failed_prefix_probe_does_not_enter_the_ratio_to_cold() {
        let s = stats(&[
            case(Ms(100.0), Failed, Ms(10.0)),
            case(Ms(100.0), Failed, Ms(10.0)),
            case(Ms(100.0), Ms(50.0), Ms(10.0)),
            case(Skipped, Ms(40.0), Skipped),
        ]);
        assert_eq!(s.prefix_over_cold, Some(0.5));
        assert_eq!(s.repeat_over_cold, Some(0.1));
        assert_eq!(s.ttft_prefix_failed, 2);
        // The prefix median is over every case that measured it, probed cold or not.
        assert_eq!(s.ttft_prefix_ms_p50, Some(50.0));
        assert_eq!(s.ttft_cases, 3);
    }
}
