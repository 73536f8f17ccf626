//! Generation-speed measurements for `tidewatch eval --speculation` and
//! `--interleaved`: speculative decoding off and on over the same prompts,
//! and the prompt cache with other alarms in between.
//!
//! Owns the procedures (which probe runs when, on which cache) and the pure
//! statistics over their results. Medians are over per-case measurements
//! taken in one run, so they compare like with like on a busy machine too.

use serde::Serialize;

use crate::llm::lookup::Lookup;
use crate::llm::Step;
use crate::measure::eval::{first_token as probe, keyword_hits, Case};
use crate::measure::stats::{self, median};
use crate::pipeline::{Pipeline, Trace};

/// What `eval --speculation` and `bench --speculation` compare against when
/// the config has speculation off.
pub const DEFAULT_LOOKUP: Lookup = Lookup {
    draft_max: 4,
    ngram_min: 2,
    ngram_max: 4,
};

/// One case diagnosed with speculation off, then on.
#[derive(Debug, Clone, Default)]
pub struct SpecCase {
    pub off_gen_ms: f64,
    pub on_gen_ms: f64,
    pub off_tokens: u32,
    pub on_tokens: u32,
    pub drafted: u32,
    pub accepted: u32,
    /// Summary, causes, actions and sources the same.
    pub identical: bool,
    pub off_keyword_hit: bool,
    pub on_keyword_hit: bool,
    /// Both answers came from the model (not degraded).
    pub both_full: bool,
    /// Where the two runs' model choices first part, when they do.
    pub divergence: Option<Divergence>,
}

/// The first model choice two runs of the same prompt made differently.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Divergence {
    /// Index of the choice (0 = the first model-chosen token).
    pub step: usize,
    /// How far the two runs' logits for the two chosen tokens lie apart
    /// (the larger of the two tokens' |off - on|); None when a token is not
    /// among either run's top logits, which batched rounding cannot explain.
    pub logit_shift: Option<f32>,
}

/// Largest logit shift still read as batched rounding: llama.cpp's CPU
/// kernels are not batch-invariant (a 4-row repacked matmul, and flash
/// attention splitting a single row's cache over the threads once it holds
/// 512 cells, shift logits by up to ~1.1 against a single-row decode: docs/design.md);
/// a verification that read the wrong row or history moves them by far more.
pub const NUMERICS_LOGITS: f32 = 1.5;

/// Where `on` first chose differently from `off`, and by how much the logits
/// of the two tokens moved between the runs there.
pub fn first_divergence(off: &[Step], on: &[Step]) -> Option<Divergence> {
    let step = off
        .iter()
        .zip(on)
        .position(|(a, b)| a.token != b.token)
        .or((off.len() != on.len()).then(|| off.len().min(on.len())))?;
    let (a, b) = match (off.get(step), on.get(step)) {
        (Some(a), Some(b)) => (a, b),
        _ => {
            return Some(Divergence {
                step,
                logit_shift: None,
            })
        }
    };
    let logit = |s: &Step, t: i32| s.top.iter().find(|(k, _)| *k == t).map(|(_, l)| *l);
    let shift = |t: i32| Some((logit(a, t)? - logit(b, t)?).abs());
    let logit_shift = match (shift(a.token), shift(b.token)) {
        (Some(x), Some(y)) => Some(x.max(y)),
        _ => None,
    };
    Some(Divergence { step, logit_shift })
}

/// A differing pair the batched numerics explain: the runs parted at a token
/// whose logits moved no more than rounding moves them.
pub fn is_numerics(d: &Option<Divergence>) -> bool {
    matches!(d, Some(Divergence { logit_shift: Some(x), .. }) if *x <= NUMERICS_LOGITS)
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct SpecReport {
    pub model: String,
    pub draft_max: usize,
    pub ngram_min: usize,
    pub ngram_max: usize,
    pub cases: usize,
    /// Medians of generation time (first token to last) per diagnosis.
    pub gen_ms_off_p50: f64,
    pub gen_ms_on_p50: f64,
    /// Median of the per-case ratios on / off.
    pub gen_on_over_off_p50: f64,
    /// Model-chosen tokens per second of generation, medians.
    pub tokens_per_s_off_p50: f64,
    pub tokens_per_s_on_p50: f64,
    /// Accepted draft tokens over drafted ones, all cases together.
    pub acceptance_rate: f64,
    pub drafted_per_diagnosis: f64,
    pub accepted_per_diagnosis: f64,
    /// Diagnoses the same with and without speculation.
    pub identical: usize,
    /// Different diagnoses whose runs parted at a token where the logits
    /// moved by rounding only (<= NUMERICS_LOGITS): a near-tie broken
    /// differently by the batched numerics (temperature 0).
    pub differ_by_numerics: usize,
    /// Different diagnoses the numerics do not explain (at temperature 0,
    /// a defect in the verification).
    pub differ_otherwise: usize,
    /// The largest logit shift at a first divergence.
    pub divergence_shift_max: Option<f32>,
    pub temperature: f32,
    pub keyword_hit_off: f64,
    pub keyword_hit_on: f64,
    pub both_full: usize,
    /// Median ms of one verification decode of k rows, k = 1.. (index k-1),
    /// measured after the cases on the same slot.
    pub verify_ms: Vec<f64>,
    /// What this machine's verification costs: k-row decode over a single
    /// step, minus one, per extra row (1/R in the cost model below).
    pub extra_row_cost: Option<f64>,
    /// Generation time on / off the cost model predicts here, from the
    /// drafted and accepted counts and `extra_row_cost` (checks the model
    /// against the measured ratio).
    pub model_on_over_off_here: Option<f64>,
    /// The same prediction with an extra row costing a quarter of a step
    /// (prompt reading 4x faster per token than generation, as on the
    /// Cortex-A72 without dot-product instructions).
    pub model_on_over_off_pp_tg_4: f64,
}

/// Generation time with lookup over without, in decode-step units: every
/// step emits one sampled token plus the drafts it confirmed, so there are
/// `tokens_on - accepted` steps, and a verification with d drafts costs
/// `1 + d * extra` steps. Off, every token is one step.
pub fn modelled_ratio(
    tokens_off: u64,
    tokens_on: u64,
    drafted: u64,
    accepted: u64,
    extra: f64,
) -> f64 {
    if tokens_off == 0 {
        return 1.0;
    }
    let steps = tokens_on.saturating_sub(accepted) as f64;
    (steps + drafted as f64 * extra) / tokens_off as f64
}

/// The per-extra-row cost from a verify-cost table (`verify_ms[k-1]` for k
/// rows), over the batches a verification of up to `rows` rows uses: the
/// median over k = 2..=rows of (c(k)/c(1) - 1) / (k - 1). A median, because
/// one batch shape can be far off the others (8 rows cost 1.6-3.9x what 7
/// did on the x86 development machine).
pub fn extra_row_cost(verify_ms: &[f64], rows: usize) -> Option<f64> {
    let one = *verify_ms.first().filter(|v| **v > 0.0)?;
    let slopes: Vec<f64> = (2..=rows.min(verify_ms.len()))
        .map(|k| (verify_ms[k - 1] / one - 1.0) / (k - 1) as f64)
        .collect();
    median(slopes)
}

pub fn spec_report(cases: &[SpecCase]) -> SpecReport {
    let med = |v: Vec<f64>| median(v).unwrap_or(0.0);
    let tps = |tok: u32, ms: f64| {
        if ms > 0.0 {
            f64::from(tok) / (ms / 1e3)
        } else {
            0.0
        }
    };
    let n = cases.len().max(1) as f64;
    let drafted: u64 = cases.iter().map(|c| u64::from(c.drafted)).sum();
    let accepted: u64 = cases.iter().map(|c| u64::from(c.accepted)).sum();
    let off: u64 = cases.iter().map(|c| u64::from(c.off_tokens)).sum();
    let on: u64 = cases.iter().map(|c| u64::from(c.on_tokens)).sum();
    let modelled = |extra| modelled_ratio(off, on, drafted, accepted, extra);
    SpecReport {
        cases: cases.len(),
        gen_ms_off_p50: med(cases.iter().map(|c| c.off_gen_ms).collect()),
        gen_ms_on_p50: med(cases.iter().map(|c| c.on_gen_ms).collect()),
        gen_on_over_off_p50: med(cases
            .iter()
            .filter(|c| c.off_gen_ms > 0.0)
            .map(|c| c.on_gen_ms / c.off_gen_ms)
            .collect()),
        tokens_per_s_off_p50: med(cases
            .iter()
            .map(|c| tps(c.off_tokens, c.off_gen_ms))
            .collect()),
        tokens_per_s_on_p50: med(cases
            .iter()
            .map(|c| tps(c.on_tokens, c.on_gen_ms))
            .collect()),
        acceptance_rate: if drafted > 0 {
            accepted as f64 / drafted as f64
        } else {
            0.0
        },
        drafted_per_diagnosis: drafted as f64 / n,
        accepted_per_diagnosis: accepted as f64 / n,
        identical: cases.iter().filter(|c| c.identical).count(),
        differ_by_numerics: cases
            .iter()
            .filter(|c| !c.identical && is_numerics(&c.divergence))
            .count(),
        differ_otherwise: cases
            .iter()
            .filter(|c| !c.identical && !is_numerics(&c.divergence))
            .count(),
        divergence_shift_max: cases
            .iter()
            .filter_map(|c| c.divergence.and_then(|d| d.logit_shift))
            .reduce(f32::max),
        keyword_hit_off: cases.iter().filter(|c| c.off_keyword_hit).count() as f64 / n,
        keyword_hit_on: cases.iter().filter(|c| c.on_keyword_hit).count() as f64 / n,
        both_full: cases.iter().filter(|c| c.both_full).count(),
        model_on_over_off_pp_tg_4: modelled(0.25),
        ..Default::default()
    }
}

fn answer(t: &Trace) -> serde_json::Value {
    let d = &t.diagnosis;
    serde_json::json!([
        d.summary,
        d.probable_causes,
        d.actions,
        d.sources,
        d.mode.as_str()
    ])
}

fn keyword_hit(t: &Trace, keywords: &[String]) -> bool {
    let d = &t.diagnosis;
    d.mode == crate::diagnosis::Mode::Full
        && d.probable_causes
            .iter()
            .any(|c| keyword_hits(&c.cause, keywords) > 0)
}

/// The same pipeline with speculation set to `lookup`.
fn with_lookup(p: &Pipeline, lookup: Option<Lookup>) -> Pipeline {
    let mut cfg = (*p.cfg).clone();
    cfg.llm.lookup = lookup;
    Pipeline {
        index: p.index.clone(),
        model: p.model.clone(),
        cfg: std::sync::Arc::new(cfg),
        counters: p.counters.clone(),
        examples: p.examples.clone(),
    }
}

/// Every `every`-th case diagnosed with speculation off, then with `lookup`,
/// each from the static prefix alone.
pub async fn run_spec(
    pipeline: &Pipeline,
    slot: &mut crate::llm::Slot,
    cases: &[Case],
    every: usize,
    lookup: Lookup,
    progress: bool,
) -> SpecReport {
    let off = with_lookup(pipeline, None);
    let on = with_lookup(pipeline, Some(lookup));
    let prefix = pipeline.model.static_prefix_tokens();
    let mut out = Vec::new();
    let picked: Vec<&Case> = cases.iter().step_by(every.max(1)).collect();
    for (i, c) in picked.iter().enumerate() {
        slot.keep_cache(prefix, false).await;
        let a = off
            .diagnose_stepped(slot, &c.alarm, crate::llm::Style::Schema)
            .await;
        slot.keep_cache(prefix, false).await;
        let b = on
            .diagnose_stepped(slot, &c.alarm, crate::llm::Style::Schema)
            .await;
        let (ga, gb) = (
            a.first.clone().unwrap_or_default(),
            b.first.clone().unwrap_or_default(),
        );
        let full = |t: &Trace| t.diagnosis.mode == crate::diagnosis::Mode::Full;
        out.push(SpecCase {
            off_gen_ms: ga.generation_ms,
            on_gen_ms: gb.generation_ms,
            off_tokens: ga.generated_tokens,
            on_tokens: gb.generated_tokens,
            drafted: gb.draft_tokens,
            accepted: gb.accepted_tokens,
            identical: answer(&a) == answer(&b),
            off_keyword_hit: keyword_hit(&a, &c.keywords),
            on_keyword_hit: keyword_hit(&b, &c.keywords),
            both_full: full(&a) && full(&b),
            divergence: first_divergence(&ga.steps, &gb.steps),
        });
        if !answer(&a).eq(&answer(&b)) {
            let d = out.last().and_then(|c| c.divergence);
            tracing::info!(case = %c.case, divergence = ?d, off = %answer(&a), on = %answer(&b), "speculation changed the answer");
        }
        if progress {
            eprint!("\rspeculation {}/{} {:<40}", i + 1, picked.len(), c.case);
        }
    }
    if progress {
        eprintln!();
    }
    slot.keep_cache(prefix, false).await;
    let rows = (lookup.draft_max + 1).max(8);
    let verify_ms = slot.verify_cost(rows, 5).await.unwrap_or_else(|e| {
        tracing::warn!(error = %e, "cannot measure what a verification costs");
        Vec::new()
    });
    let r = spec_report(&out);
    let extra = extra_row_cost(&verify_ms, lookup.draft_max + 1);
    let (off, on, drafted, accepted) = out.iter().fold((0, 0, 0, 0), |a, c| {
        (
            a.0 + u64::from(c.off_tokens),
            a.1 + u64::from(c.on_tokens),
            a.2 + u64::from(c.drafted),
            a.3 + u64::from(c.accepted),
        )
    });
    SpecReport {
        model_on_over_off_here: extra.map(|x| modelled_ratio(off, on, drafted, accepted, x)),
        extra_row_cost: extra,
        verify_ms,
        model: pipeline.model.info.name.clone(),
        draft_max: lookup.draft_max,
        ngram_min: lookup.ngram_min,
        ngram_max: lookup.ngram_max,
        temperature: pipeline.cfg.llm.temperature,
        ..r
    }
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct InterleavedReport {
    pub model: String,
    /// Alarms between an alarm and its repeat.
    pub gap: usize,
    pub repeats: usize,
    pub prompt_cache_mib: u32,
    /// Median TTFT from an empty cache (the repeated cases' prompts).
    pub ttft_cold_ms: Option<f64>,
    /// Median TTFT of the repeats, with `gap` other alarms in between.
    pub ttft_repeat_ms: Option<f64>,
    /// Median of the per-case ratios repeat / cold.
    pub repeat_over_cold: Option<f64>,
    /// Repeats that read less than a quarter of their prompt.
    pub resumed: usize,
    pub failed: usize,
    /// Anonymous RSS of this process before the run and after the cache filled.
    pub rss_anon_mib_before: f64,
    pub rss_anon_mib_after: f64,
}

/// Per-case ratio medians over cases where both probes succeeded.
pub fn ratio_p50(pairs: &[(Option<f64>, Option<f64>)]) -> Option<f64> {
    median(
        pairs
            .iter()
            .filter_map(|p| match p {
                (Some(c), Some(x)) if *c > 0.0 => Some(x / c),
                _ => None,
            })
            .collect(),
    )
}

/// Cold TTFT of `n` cases; then the cases in groups of `gap + 1`, each group
/// probed in order and then repeated in the same order (new id, new
/// reading), so every repeat comes after exactly `gap` other prompts, on the
/// slot's prompt cache.
pub async fn run_interleaved(
    pipeline: &Pipeline,
    slot: &mut crate::llm::Slot,
    cases: &[Case],
    n: usize,
    gap: usize,
    progress: bool,
) -> InterleavedReport {
    let before = stats::mib(stats::rss().anon_kib);
    let cases: Vec<&Case> = cases.iter().take(n).collect();
    let mut cold = Vec::new();
    for c in &cases {
        slot.keep_cache(0, false).await;
        cold.push(probe(pipeline, slot, &c.alarm).await.map(|o| o.ttft_ms));
    }
    // An empty cache, saved prompts included; from here on nothing is cleared.
    slot.keep_cache(0, false).await;
    let mut repeat = vec![None; cold.len()];
    let (mut resumed, mut failed) = (0, 0);
    let group = gap + 1;
    for (g, chunk) in cases.chunks(group).enumerate() {
        for c in chunk {
            if probe(pipeline, slot, &c.alarm).await.is_none() {
                failed += 1;
            }
        }
        for (k, c) in chunk.iter().enumerate() {
            let mut again = c.alarm.clone();
            again.id.push_str("-again");
            again.value = Some(again.value.unwrap_or(1.0) + 0.1);
            match probe(pipeline, slot, &again).await {
                Some(o) => {
                    if (o.prompt_tokens.saturating_sub(o.reused_tokens)) * 4 < o.prompt_tokens {
                        resumed += 1;
                    }
                    repeat[g * group + k] = Some(o.ttft_ms).filter(|t| *t > 0.0);
                }
                None => failed += 1,
            }
        }
        if progress {
            eprint!("\rinterleaved {}/{}", (g + 1) * group, cases.len());
        }
    }
    if progress {
        eprintln!();
    }
    let med = |v: &[Option<f64>]| median(v.iter().flatten().copied().collect());
    let pairs: Vec<(Option<f64>, Option<f64>)> =
        cold.iter().copied().zip(repeat.iter().copied()).collect();
    InterleavedReport {
        model: pipeline.model.info.name.clone(),
        gap,
        repeats: cold.len(),
        prompt_cache_mib: pipeline.cfg.llm.prompt_cache_mib,
        ttft_cold_ms: med(&cold),
        ttft_repeat_ms: med(&repeat),
        repeat_over_cold: ratio_p50(&pairs),
        resumed,
        failed,
        rss_anon_mib_before: before,
        rss_anon_mib_after: stats::mib(stats::rss().anon_kib),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(token: i32, top: &[(i32, f32)]) -> Step {
        Step {
            token,
            top: top.to_vec(),
        }
    }

    #[test]
    fn runs_that_choose_alike_have_no_divergence() {
        let a = [step(5, &[(5, 30.0), (7, 29.0)]), step(9, &[(9, 20.0)])];
        assert_eq!(first_divergence(&a, &a), None);
    }

    #[test]
    fn a_near_tie_flipped_by_rounding_is_numerics() {
        let off = [
            step(5, &[(5, 30.0)]),
            step(219, &[(219, 29.01), (233, 28.96), (136, 28.07)]),
        ];
        let on = [
            step(5, &[(5, 30.0)]),
            step(233, &[(233, 28.87), (219, 28.77), (136, 28.25)]),
        ];
        let d = first_divergence(&off, &on).unwrap();
        assert_eq!(d.step, 1);
        assert!((d.logit_shift.unwrap() - 0.24).abs() < 1e-4, "{d:?}");
        assert!(is_numerics(&Some(d)));
    }

    #[test]
    fn a_choice_from_another_distribution_is_not_numerics() {
        // The wrong logits row: the other run's token is not even among the
        // top logits, or the logits moved by several units.
        let off = [step(219, &[(219, 29.0), (233, 28.9)])];
        let far = [step(11, &[(11, 35.0), (12, 30.0)])];
        assert_eq!(first_divergence(&off, &far).unwrap().logit_shift, None);
        assert!(!is_numerics(&first_divergence(&off, &far)));
        let moved = [step(233, &[(233, 31.0), (219, 26.0)])];
        let d = first_divergence(&off, &moved);
        assert_eq!(d.unwrap().logit_shift, Some(3.0));
        assert!(!is_numerics(&d));
        // One run stopping early is a divergence no rounding explains.
        assert_eq!(
            first_divergence(&off, &[]),
            Some(Divergence {
                step: 0,
                logit_shift: None
            })
        );
        assert!(!is_numerics(&None));
    }

    #[test]
    fn speculation_stats_compare_the_same_cases() {
        let cases = [
            SpecCase {
                off_gen_ms: 1000.0,
                on_gen_ms: 500.0,
                off_tokens: 100,
                on_tokens: 100,
                drafted: 60,
                accepted: 45,
                identical: true,
                off_keyword_hit: true,
                on_keyword_hit: true,
                both_full: true,
                divergence: None,
            },
            SpecCase {
                off_gen_ms: 2000.0,
                on_gen_ms: 1500.0,
                off_tokens: 100,
                on_tokens: 110,
                drafted: 40,
                accepted: 5,
                identical: false,
                off_keyword_hit: true,
                on_keyword_hit: false,
                both_full: true,
                divergence: Some(Divergence {
                    step: 17,
                    logit_shift: Some(0.4),
                }),
            },
        ];
        let r = spec_report(&cases);
        assert_eq!(r.cases, 2);
        assert_eq!(r.identical, 1);
        assert_eq!((r.differ_by_numerics, r.differ_otherwise), (1, 0));
        assert_eq!(r.divergence_shift_max, Some(0.4));
        assert!((r.acceptance_rate - 0.5).abs() < 1e-9);
        assert!((r.keyword_hit_off - 1.0).abs() < 1e-9);
        assert!((r.keyword_hit_on - 0.5).abs() < 1e-9);
        // Per-case ratios 0.5 and 0.75: the median of two is the upper one.
        assert!(r.gen_on_over_off_p50 <= 0.75 && r.gen_on_over_off_p50 >= 0.5);
    }

    #[test]
    fn the_cost_model_counts_steps_and_extra_rows() {
        // 100 tokens off = 100 steps. On: 100 tokens, 60 of them confirmed
        // drafts, so 40 steps, plus 80 drafted rows at a quarter step each.
        let r = modelled_ratio(100, 100, 80, 60, 0.25);
        assert!((r - 0.6).abs() < 1e-9, "{r}");
        // Rows as dear as steps: drafting cannot pay.
        assert!(modelled_ratio(100, 100, 80, 60, 1.0) > 1.0);
        assert!((modelled_ratio(0, 5, 1, 1, 0.5) - 1.0).abs() < 1e-9);
    }

    #[test]
    fn extra_row_cost_is_the_median_slope_over_the_batches_used() {
        // 1 row 40 ms, each further row 10 ms: a quarter step per row.
        let ms = [40.0, 50.0, 60.0, 70.0, 80.0, 90.0];
        assert!((extra_row_cost(&ms, 5).unwrap() - 0.25).abs() < 1e-9);
        // One pathological shape does not move it.
        let odd = [40.0, 50.0, 60.0, 400.0, 80.0];
        assert!((extra_row_cost(&odd, 5).unwrap() - 0.25).abs() < 1e-9);
        // Beyond the table: the rows measured.
        assert!((extra_row_cost(&ms, 99).unwrap() - 0.25).abs() < 1e-9);
        assert_eq!(extra_row_cost(&ms[..1], 5), None);
        assert_eq!(extra_row_cost(&[], 5), None);
        assert_eq!(extra_row_cost(&[0.0, 1.0], 2), None);
    }

    #[test]
    fn ratios_skip_cases_where_a_probe_failed() {
        let pairs = [
            (Some(1000.0), Some(100.0)),
            (None, Some(5.0)),
            (Some(800.0), None),
        ];
        assert_eq!(ratio_p50(&pairs), Some(0.1));
        assert_eq!(ratio_p50(&[(None, None)]), None);
    }
}
