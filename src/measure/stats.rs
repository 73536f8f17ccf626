//! The statistics every measurement reports with: percentiles and medians
//! of samples, the mean and spread of repeated runs, and this process's
//! resident memory. One definition each, so `eval` and `bench` figures that
//! share a name were computed alike.

/// The sample at fraction `p` (0.0..=1.0) of `sorted`, rounding to the
/// nearest rank: always one of the samples, never an interpolation. 0.0
/// without samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

/// The median of some samples (the upper one of an even count); None
/// without any, never 0, so a measurement that produced nothing cannot read
/// as the fastest.
pub fn median(mut v: Vec<f64>) -> Option<f64> {
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| percentile(&v, 0.5))
}

/// The mean of some samples; None without any.
pub fn mean(v: &[f64]) -> Option<f64> {
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// Mean and (population) standard deviation of repeated runs.
pub type MeanSd = (f64, f64);

/// `MeanSd` of `v`; (0, 0) without runs.
pub fn mean_sd(v: &[f64]) -> MeanSd {
    let m = mean(v).unwrap_or(0.0);
    let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len().max(1) as f64;
    (m, var.sqrt())
}

/// This process's resident memory now, in KiB, as /proc/self/status gives
/// it; a field it does not show reads 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rss {
    /// RssAnon: the heap, the KV caches, what the model was copied into.
    pub anon_kib: u64,
    /// RssFile: file pages in memory: the mapped model (the index is read
    /// into the heap).
    pub file_kib: u64,
    /// VmHWM: the peak of their sum so far, as the kernel saw it.
    pub peak_kib: u64,
}

/// Reads `Rss` from /proc/self/status.
pub fn rss() -> Rss {
    rss_of(&std::fs::read_to_string("/proc/self/status").unwrap_or_default())
}

fn rss_of(status: &str) -> Rss {
    let field = |k: &str| {
        status
            .lines()
            .find(|l| l.starts_with(k))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    Rss {
        anon_kib: field("RssAnon:"),
        file_kib: field("RssFile:"),
        peak_kib: field("VmHWM:"),
    }
}

/// KiB as MiB, the unit reports use.
pub fn mib(kib: u64) -> f64 {
    kib as f64 / 1024.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_pick_from_sorted_samples() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 51.0);
        assert_eq!(percentile(&v, 0.99), 99.0);
    }

    #[test]
    fn a_median_of_nothing_is_none_and_of_an_even_count_the_upper_one() {
        assert_eq!(median(vec![]), None);
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![0.75, 0.5]), Some(0.75));
    }

    #[test]
    fn repeated_runs_give_their_mean_and_spread() {
        assert_eq!(mean(&[]), None);
        assert_eq!(mean_sd(&[]), (0.0, 0.0));
        assert_eq!(
            mean_sd(&[2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0]),
            (5.0, 2.0)
        );
    }

    #[test]
    fn resident_memory_is_read_by_field_name() {
        let s = "Name:\ttidewatch\nVmHWM:\t  4096 kB\nRssAnon:\t  1024 kB\nRssFile:\t   512 kB\n";
        let r = rss_of(s);
        assert_eq!((r.anon_kib, r.file_kib, r.peak_kib), (1024, 512, 4096));
        assert_eq!(rss_of("").anon_kib, 0);
        assert!(rss().anon_kib > 0);
    }
}
