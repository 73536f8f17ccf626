//! `tidewatch eval --tiers N`: what the prompt cache's tiers save an alarm,
//! three ways side by side in one run, on the first N eval cases that have a
//! manual section (one per fault) and that coverage takes for covered when
//! raised under a plant code:
//! 1. cold: nothing of the alarm's passage block cached, in RAM or on disk
//!    (the static prefix is, as in the daemon after its start);
//! 2. repeat after restart: the same alarm with a new id and reading, on new
//!    slots (RAM tier empty) that keep the disk tier of 1 (where the cold
//!    alarm, answered twice, left its states: the tier writes on a second
//!    sight), after `OTHERS` other alarms;
//! 3. warm: in a fresh state dir, after `tidewatch warm`'s own code path over
//!    the cases' codes and a restart, the fault's first alarm, raised under a
//!    plant code that coverage maps to the manual's section.
//!
//! Owns the procedure (which alarm runs where, in which state dir, after
//! which restart) and, as plain functions, the choice of cases, the repeat's
//! reading, the figures and their table. It runs only in state dirs of its
//! own under the system's temp dir, removed at the end: what it writes must
//! never change what the daemon finds in the config's `state_dir`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use crate::alarm::Alarm;
use crate::config::Config;
use crate::coverage::Coverage;
use crate::llm::{GenOutput, Model, Slot, Style};
use crate::load::LoadError;
use crate::measure::eval::{a72_projected_s, first_token, Case};
use crate::measure::stats::median;
use crate::pipeline::{Counters, Pipeline};
use crate::retrieval::{Index, LiveIndex};

/// Alarms of other faults between the restart and the repeats: enough to
/// leave nothing of the repeated alarm in the slot's context or RAM tier.
pub const OTHERS: usize = 20;

/// The tiers' targets, checked against their medians: what the prompt
/// cache must save an alarm for the board's A72 to answer in time.
pub const REPEAT_UNCACHED_MAX: f64 = 60.0;
pub const REPEAT_TTFT_OVER_COLD_MAX: f64 = 0.3;
pub const WARM_UNCACHED_MAX: f64 = 80.0;
pub const A72_S_MAX: f64 = 12.0;

pub const COLD: &str = "cold";
pub const REPEAT: &str = "repeat after restart";
pub const WARM: &str = "warm";

#[derive(Debug, thiserror::Error)]
pub enum TiersError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Warm(#[from] crate::warm::WarmError),
    #[error("cannot make a temporary state dir {path}: {source}")]
    StateDir {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no slot started")]
    NoSlot,
    #[error("no eval case has a manual section (a \"gold\" section), so there is no fault to measure the tiers on")]
    NoCases,
}

/// The heading code of the manual section about a case's fault (its gold
/// section), whatever code the case's alarm is raised under.
pub fn manual_code(c: &Case) -> Option<&str> {
    crate::retrieval::section::code_of(&c.gold.as_ref()?.section)
}

/// The first `n` cases with a manual section, one per fault (manual code),
/// that `covered` holds (coverage takes the alarm raised under a plant code
/// for its fault: a related one gets every passage, a block warm does not
/// compute): two alarms of one fault share a passage block, so the second
/// could not be cold.
pub fn pick_cases<'a>(
    cases: &'a [Case],
    n: usize,
    covered: &dyn Fn(&Case) -> bool,
) -> Vec<&'a Case> {
    let mut codes: Vec<&str> = Vec::new();
    let mut out = Vec::new();
    for c in cases {
        if out.len() == n {
            break;
        }
        let Some(code) = manual_code(c) else {
            continue;
        };
        if !covered(c) {
            continue;
        }
        if !codes.iter().any(|k| k.eq_ignore_ascii_case(code)) {
            codes.push(code);
            out.push(c);
        }
    }
    out
}

/// Up to `count` cases of faults other than `picked`'s that have a manual
/// section, in the eval set's order: their prompts share no passage block
/// with a picked one, so they cannot serve its repeat from RAM.
pub fn other_cases<'a>(cases: &'a [Case], picked: &[&Case], count: usize) -> Vec<&'a Case> {
    let taken: Vec<&str> = picked.iter().filter_map(|c| manual_code(c)).collect();
    cases
        .iter()
        .filter(|c| {
            manual_code(c).is_some_and(|k| !taken.iter().any(|t| t.eq_ignore_ascii_case(k)))
        })
        .take(count)
        .collect()
}

/// A reading one unit up in its last shown digit: 93.5 → 93.6, 48 → 49.
pub fn next_reading(v: f64) -> f64 {
    let shown = format!("{v}");
    let decimals = shown.split_once('.').map_or(0, |(_, d)| d.len()).min(6);
    let scale = 10f64.powi(decimals as i32);
    ((v * scale).round() + 1.0) / scale
}

/// `message` with its last standalone `old` number (not part of a longer
/// number) replaced by `new`; unchanged when it shows no such number.
pub fn replace_reading(message: &str, old: &str, new: &str) -> String {
    match crate::prompt::reading_at(message, old) {
        Some(i) => format!("{}{new}{}", &message[..i], &message[i + old.len()..]),
        None => message.to_string(),
    }
}

/// The alarm again as its sensor repeats it: same equipment and code, a new
/// id, and the next reading (`next_reading`) in `value` and in the message
/// where the message shows the reading. An alarm without a reading repeats
/// with its message as it was.
pub fn repeat_of(a: &Alarm) -> Alarm {
    let mut r = a.clone();
    r.id = format!("{}-again", a.id);
    if let Some(v) = a.value {
        let next = next_reading(v);
        r.value = Some(next);
        r.message = a
            .message
            .as_deref()
            .map(|m| replace_reading(m, &format!("{v}"), &format!("{next}")));
    }
    r
}

/// The plant's own code for the `n`-th case: no manual uses it.
pub fn plant_code(n: usize) -> String {
    format!("PLANT-{:04}", 42 + n)
}

/// The alarm raised by a plant that numbers its own alarms: its fault and
/// words, the plant's code, a new id (never seen before in its state dir).
pub fn under_plant_code(a: &Alarm, n: usize) -> Alarm {
    Alarm {
        id: format!("{}-plant", a.id),
        code: plant_code(n),
        ..a.clone()
    }
}

/// One alarm's figures, from its first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Sample {
    pub prompt_tokens: f64,
    /// Prompt tokens not found in the KV cache or a saved state: read.
    pub uncached_prompt_tokens: f64,
    pub fed_tokens: f64,
    pub chosen_tokens: f64,
    pub ttft_ms: f64,
    /// `eval::a72_projected_s` of the counts above.
    pub a72_projected_s: f64,
    /// More than the static prefix came from the cache: a saved state served it.
    pub resumed: bool,
}

impl Sample {
    pub fn of(out: &GenOutput, prefix_tokens: usize) -> Self {
        let uncached = f64::from(out.prompt_tokens.saturating_sub(out.reused_tokens));
        let (fed, chosen) = (f64::from(out.fed_tokens), f64::from(out.generated_tokens));
        Sample {
            prompt_tokens: f64::from(out.prompt_tokens),
            uncached_prompt_tokens: uncached,
            fed_tokens: fed,
            chosen_tokens: chosen,
            ttft_ms: out.ttft_ms,
            a72_projected_s: a72_projected_s(uncached, fed, chosen),
            resumed: out.reused_tokens as usize > prefix_tokens,
        }
    }
}

/// Median and range of some samples.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Spread {
    pub p50: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// None without samples: a tier that measured nothing shows "-", not 0.
    pub fn of(v: Vec<f64>) -> Option<Spread> {
        let min = v.iter().copied().reduce(f64::min)?;
        let max = v.iter().copied().reduce(f64::max)?;
        Some(Spread {
            p50: median(v)?,
            min,
            max,
        })
    }
}

/// One tier's figures over the cases.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierStats {
    pub tier: String,
    pub alarms: usize,
    /// Alarms the model answered (the others have no figures).
    pub answered: usize,
    /// Alarms served by a saved state beyond the static prefix (0 cold).
    pub resumed: usize,
    pub uncached_prompt_tokens: Option<Spread>,
    pub fed_tokens: Option<Spread>,
    pub chosen_tokens: Option<Spread>,
    pub ttft_ms: Option<Spread>,
    /// Per-case TTFT over the same case's cold TTFT; None for cold.
    pub ttft_over_cold: Option<Spread>,
    pub a72_projected_s: Option<Spread>,
}

impl TierStats {
    /// `samples[i]` is case i in this tier, `cold[i]` the same case cold
    /// (None for the cold tier itself).
    pub fn of(tier: &str, samples: &[Option<Sample>], cold: Option<&[Option<Sample>]>) -> Self {
        let got: Vec<&Sample> = samples.iter().flatten().collect();
        let field = |f: fn(&Sample) -> f64| Spread::of(got.iter().map(|s| f(s)).collect());
        let ratios = cold.map(|cold| {
            samples
                .iter()
                .zip(cold)
                .filter_map(|p| match p {
                    (Some(s), Some(c)) if c.ttft_ms > 0.0 => Some(s.ttft_ms / c.ttft_ms),
                    _ => None,
                })
                .collect()
        });
        TierStats {
            tier: tier.to_string(),
            alarms: samples.len(),
            answered: got.len(),
            resumed: got.iter().filter(|s| s.resumed).count(),
            uncached_prompt_tokens: field(|s| s.uncached_prompt_tokens),
            fed_tokens: field(|s| s.fed_tokens),
            chosen_tokens: field(|s| s.chosen_tokens),
            ttft_ms: field(|s| s.ttft_ms),
            ttft_over_cold: ratios.and_then(Spread::of),
            a72_projected_s: field(|s| s.a72_projected_s),
        }
    }
}

/// One target against its figure (a tier's median).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Check {
    pub tier: String,
    pub figure: String,
    pub value: Option<f64>,
    /// The figure must be at most this.
    pub max: f64,
    pub met: bool,
}

/// The targets against the tiers' medians; a figure not measured
/// does not meet its target.
pub fn checks(tiers: &[TierStats]) -> Vec<Check> {
    let p50 = |tier: &str, f: fn(&TierStats) -> Option<Spread>| {
        tiers
            .iter()
            .find(|t| t.tier == tier)
            .and_then(f)
            .map(|s| s.p50)
    };
    let check = |tier: &str, figure: &str, value: Option<f64>, max: f64| Check {
        tier: tier.to_string(),
        figure: figure.to_string(),
        value,
        max,
        met: value.is_some_and(|v| v <= max),
    };
    vec![
        check(
            REPEAT,
            "uncached prompt tokens",
            p50(REPEAT, |t| t.uncached_prompt_tokens),
            REPEAT_UNCACHED_MAX,
        ),
        check(
            REPEAT,
            "TTFT / cold",
            p50(REPEAT, |t| t.ttft_over_cold),
            REPEAT_TTFT_OVER_COLD_MAX,
        ),
        check(
            REPEAT,
            "A72 projection s",
            p50(REPEAT, |t| t.a72_projected_s),
            A72_S_MAX,
        ),
        check(
            WARM,
            "uncached prompt tokens",
            p50(WARM, |t| t.uncached_prompt_tokens),
            WARM_UNCACHED_MAX,
        ),
        check(
            WARM,
            "A72 projection s",
            p50(WARM, |t| t.a72_projected_s),
            A72_S_MAX,
        ),
    ]
}

/// One case in every tier.
#[derive(Debug, Clone, Serialize)]
pub struct TierCase {
    pub case: String,
    /// The case's own alarm code, and the manual's code for its fault.
    pub code: String,
    pub manual_code: String,
    /// The code the warm tier raised it under.
    pub plant_code: String,
    pub cold: Option<Sample>,
    pub repeat: Option<Sample>,
    pub warm: Option<Sample>,
    /// What coverage judged the plant-code alarm (covered: it got the
    /// manual code's passage block, the one warm computed).
    pub warm_coverage: Coverage,
}

/// What the warm tier's `tidewatch warm` did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct WarmRun {
    /// The codes it was restricted to (`warm --codes`).
    pub codes: Vec<String>,
    /// Alarms of the manuals for those codes (each code in each language).
    pub alarms: usize,
    pub blocks_computed: usize,
    pub tokens: usize,
    pub seconds: f64,
    /// The disk tier's bound stopped it early.
    pub full: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct TiersReport {
    pub model: String,
    /// Tokens of the static prefix, in the KV cache in every tier (saved in
    /// and restored from each tier's own state dir, as the daemon's is).
    pub static_prefix_tokens: usize,
    pub static_prefix_cached: bool,
    /// Other alarms between the restart and the repeats.
    pub others: usize,
    pub warm: WarmRun,
    pub tiers: Vec<TierStats>,
    pub targets: Vec<Check>,
    pub cases: Vec<TierCase>,
}

impl TiersReport {
    /// The figures of the three tiers and their targets from each case's
    /// samples.
    pub fn of(
        model: String,
        prefix: usize,
        others: usize,
        warm: WarmRun,
        cases: Vec<TierCase>,
    ) -> Self {
        let col = |f: fn(&TierCase) -> Option<Sample>| cases.iter().map(f).collect::<Vec<_>>();
        let cold = col(|c| c.cold);
        let tiers = vec![
            TierStats::of(COLD, &cold, None),
            TierStats::of(REPEAT, &col(|c| c.repeat), Some(&cold)),
            TierStats::of(WARM, &col(|c| c.warm), Some(&cold)),
        ];
        TiersReport {
            model,
            static_prefix_tokens: prefix,
            static_prefix_cached: true,
            others,
            warm,
            targets: checks(&tiers),
            tiers,
            cases,
        }
    }
}

fn num(v: f64, decimals: usize) -> String {
    format!("{v:.decimals$}")
}

fn spread_cell(s: Option<Spread>, decimals: usize) -> String {
    match s {
        Some(s) => format!(
            "{} ({}-{})",
            num(s.p50, decimals),
            num(s.min, decimals),
            num(s.max, decimals)
        ),
        None => "-".into(),
    }
}

/// Decimals a figure is shown with: tokens whole, seconds to 0.1, ratios
/// to 0.01.
fn decimals(figure: &str) -> usize {
    if figure.contains("tokens") {
        0
    } else if figure.contains(" / ") {
        2
    } else {
        1
    }
}

/// Rows of cells in columns as wide as their widest cell, `gap` apart.
fn aligned(rows: &[Vec<String>], gap: &str) -> String {
    let cols = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..cols)
        .map(|i| {
            rows.iter()
                .filter_map(|r| r.get(i))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (cell, w) in r.iter().zip(&widths) {
            line.push_str(cell);
            line.push_str(&" ".repeat(w - cell.chars().count()));
            line.push_str(gap);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// The report for a person: what each tier means, the figures side by side
/// with their targets, and each target met or missed.
pub fn table(r: &TiersReport) -> String {
    let mut out = String::new();
    let n = r.cases.len();
    let names: Vec<&str> = r.cases.iter().map(|c| c.case.as_str()).collect();
    out.push_str(&format!(
        "prompt cache tiers, {} ({n} alarms with a manual section, one per fault: {})\n",
        r.model,
        names.join(" ")
    ));
    out.push_str(&format!(
        "  every tier: the static prefix ({} tokens) is cached, as after the daemon's start; temporary state dirs, not the config's\n",
        r.static_prefix_tokens
    ));
    out.push_str(
        "  cold: nothing of the alarm's passages cached (RAM and disk tiers without it)\n",
    );
    out.push_str(&format!(
        "  repeat after restart: same equipment and code, new id and reading; new slots (RAM tier empty), the disk tier of cold kept, after {} other alarms\n",
        r.others
    ));
    let covered = r
        .cases
        .iter()
        .filter(|c| c.warm_coverage == Coverage::Covered)
        .count();
    out.push_str(&format!(
        "  warm: fresh state dir, `tidewatch warm --codes {}` ({} blocks, {} tokens, {:.1} s{}), new slots, then the fault's first alarm under a plant code ({}..., {covered} of {n} judged covered)\n\n",
        r.warm.codes.join(","),
        r.warm.blocks_computed,
        r.warm.tokens,
        r.warm.seconds,
        if r.warm.full { ", stopped: disk tier full" } else { "" },
        plant_code(0),
    ));
    let tier = |name: &str| r.tiers.iter().find(|t| t.tier == name);
    let cells = |f: &dyn Fn(&TierStats) -> String| -> Vec<String> {
        [COLD, REPEAT, WARM]
            .iter()
            .map(|t| tier(t).map_or("-".into(), f))
            .collect()
    };
    let row = |label: &str, f: &dyn Fn(&TierStats) -> String, target: &str| {
        let mut v = vec![label.to_string()];
        v.extend(cells(f));
        v.push(target.to_string());
        v
    };
    let rows: Vec<Vec<String>> = vec![
        ["median (min-max)", COLD, REPEAT, WARM, "target (median)"]
            .iter()
            .map(|s| s.to_string())
            .collect(),
        row(
            "uncached prompt tokens",
            &|t| spread_cell(t.uncached_prompt_tokens, 0),
            &format!("repeat ≤ {REPEAT_UNCACHED_MAX}, warm ≤ {WARM_UNCACHED_MAX}"),
        ),
        row("fed tokens", &|t| spread_cell(t.fed_tokens, 0), ""),
        row(
            "model-chosen tokens",
            &|t| spread_cell(t.chosen_tokens, 0),
            "",
        ),
        row("TTFT ms", &|t| spread_cell(t.ttft_ms, 0), ""),
        row(
            "TTFT / cold",
            &|t| spread_cell(t.ttft_over_cold, 2),
            &format!("repeat ≤ {REPEAT_TTFT_OVER_COLD_MAX}"),
        ),
        row(
            "A72 projection s",
            &|t| spread_cell(t.a72_projected_s, 1),
            &format!("repeat and warm ≤ {A72_S_MAX}"),
        ),
        row("answered", &|t| format!("{}/{}", t.answered, t.alarms), ""),
        row(
            "served from a saved state",
            &|t| format!("{}/{}", t.resumed, t.alarms),
            "cold 0",
        ),
    ];
    out.push_str(&aligned(&rows, "   "));
    out.push_str("\nper alarm: uncached prompt tokens and TTFT ms, cold / repeat / warm\n");
    let per_case: Vec<Vec<String>> = r
        .cases
        .iter()
        .map(|c| {
            let fig = |f: fn(&Sample) -> f64| {
                [c.cold, c.repeat, c.warm]
                    .iter()
                    .map(|s| s.map_or("-".into(), |s| num(f(&s), 0)))
                    .collect::<Vec<_>>()
                    .join(" / ")
            };
            vec![
                format!("  {}", c.case),
                fig(|s| s.uncached_prompt_tokens),
                fig(|s| s.ttft_ms),
                c.manual_code.clone(),
                format!("warm as {} ({})", c.plant_code, c.warm_coverage.as_str()),
            ]
        })
        .collect();
    out.push_str(&aligned(&per_case, "  "));
    out.push_str("\ntargets:\n");
    for c in &r.targets {
        let value = c.value.map_or("-".into(), |v| num(v, decimals(&c.figure)));
        out.push_str(&format!(
            "  {:<6}  {}: {} {value} ≤ {}\n",
            if c.met { "met" } else { "MISSED" },
            c.tier,
            c.figure,
            c.max
        ));
    }
    out
}

/// A state dir of the run's own under the system's temp dir, new (never one
/// that exists) and removed when dropped.
struct TempStateDir(PathBuf);

impl TempStateDir {
    fn new(tag: &str) -> Result<Self, TiersError> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let path = std::env::temp_dir().join(format!(
            "tidewatch-tiers-{}-{tag}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir(&path).map_err(|source| TiersError::StateDir {
            path: path.clone(),
            source,
        })?;
        Ok(TempStateDir(path))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempStateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The model and index loaded once; slots started and restarted on them.
struct Rig {
    index: Arc<LiveIndex>,
    model: Arc<Model>,
    progress: bool,
}

impl Rig {
    /// A pipeline and one slot on `cfg` with `state_dir` as the daemon
    /// starts them: the static prefix restored or computed, the disk tier on.
    async fn start(&self, cfg: &Config, state_dir: &Path) -> Result<(Pipeline, Slot), TiersError> {
        let mut cfg = cfg.clone();
        cfg.state_dir = state_dir.to_path_buf();
        // One slot, with the whole RAM budget: the figures are per alarm.
        cfg.llm.slots = 1;
        let counters = Arc::new(Counters::default());
        let mut slots = crate::load::start_slots(&cfg, &self.model, &counters, true).await?;
        let Some(slot) = slots.pop() else {
            return Err(TiersError::NoSlot);
        };
        let p = Pipeline {
            index: self.index.clone(),
            model: self.model.clone(),
            cfg: Arc::new(cfg),
            counters,
            examples: None,
        };
        Ok((p, slot))
    }

    /// Stops the slot once the last answer's states are saved.
    async fn stop(&self, p: &Pipeline, slot: Slot) {
        // Keeping everything still saves the last answer's prompt first:
        // the disk tier has it before the "restart".
        slot.keep_cache(usize::MAX, false).await;
        slot.stop(p.cfg.watchdog.hard_timeout).await;
    }

    fn say(&self, what: &str, i: usize, n: usize, case: &str) {
        if self.progress {
            eprint!("\rtiers: {what} {}/{n} {case:<40}", i + 1);
        }
    }

    async fn diagnose(
        &self,
        p: &Pipeline,
        slot: &mut Slot,
        a: &Alarm,
    ) -> (Option<Sample>, Coverage) {
        let tr = p.diagnose_traced(slot, a, Style::Schema).await;
        let prefix = self.model.static_prefix_tokens();
        (
            tr.first.as_ref().map(|o| Sample::of(o, prefix)),
            tr.diagnosis.coverage,
        )
    }
}

/// Runs the three tiers on the first `n` cases with a manual section (one
/// per fault); `cfg`'s model and settings, one slot, state dirs of its own.
pub async fn run_tiers(
    cfg: &Config,
    index: Arc<Index>,
    model: Arc<Model>,
    cases: &[Case],
    n: usize,
    progress: bool,
) -> Result<TiersReport, TiersError> {
    let covered = |c: &Case| {
        let a = under_plant_code(&c.alarm, 0);
        let hits =
            crate::retrieval::passages_for(&index, &a, cfg.knowledge.top_k).unwrap_or_default();
        crate::coverage::judge_in(&index, &a, &hits).coverage == Coverage::Covered
    };
    let picked = pick_cases(cases, n, &covered);
    if picked.is_empty() {
        return Err(TiersError::NoCases);
    }
    let others = other_cases(cases, &picked, OTHERS);
    let codes: Vec<String> = picked
        .iter()
        .filter_map(|c| manual_code(c))
        .map(str::to_string)
        .collect();
    let b = Rig {
        index: Arc::new(LiveIndex::new(index)),
        model,
        progress,
    };
    let prefix = b.model.static_prefix_tokens();
    let mut rows: Vec<TierCase> = picked
        .iter()
        .enumerate()
        .map(|(i, c)| TierCase {
            case: c.case.clone(),
            code: c.alarm.code.clone(),
            manual_code: manual_code(c).unwrap_or_default().to_string(),
            plant_code: plant_code(i),
            cold: None,
            repeat: None,
            warm: None,
            warm_coverage: Coverage::None,
        })
        .collect();

    // 1 and 2 share a state dir: the repeat finds what cold left on disk.
    let dir = TempStateDir::new("restart")?;
    let (p, mut slot) = b.start(cfg, dir.path()).await?;
    for (i, c) in picked.iter().enumerate() {
        b.say(COLD, i, picked.len(), &c.case);
        // The context back to the static prefix and the RAM tier empty; the
        // disk holds only other faults' blocks (one case per fault).
        slot.keep_cache(prefix, false).await;
        rows[i].cold = b.diagnose(&p, &mut slot, &c.alarm).await.0;
        // The disk tier writes a fault's states on their second sight: the
        // same alarm again, its prompt all in the context, is that sight.
        let _ = b.diagnose(&p, &mut slot, &c.alarm).await;
    }
    b.stop(&p, slot).await;
    let (p, mut slot) = b.start(cfg, dir.path()).await?;
    for (i, o) in others.iter().enumerate() {
        b.say("other alarms", i, others.len(), &o.case);
        // Each reads its whole prompt and leaves its state in both tiers,
        // as an alarm does; one answer token is enough for that.
        let _ = first_token(&p, &mut slot, &o.alarm).await;
    }
    for (i, c) in picked.iter().enumerate() {
        b.say(REPEAT, i, picked.len(), &c.case);
        rows[i].repeat = b.diagnose(&p, &mut slot, &repeat_of(&c.alarm)).await.0;
    }
    b.stop(&p, slot).await;
    drop(dir);

    // 3: a state dir of its own, warmed as `tidewatch warm --codes` warms.
    let dir = TempStateDir::new("warm")?;
    let (p, slot) = b.start(cfg, dir.path()).await?;
    let alarms = crate::warm::manual_alarms(&p.index.current(), &codes);
    let t0 = Instant::now();
    let tally = crate::warm::warm_blocks(&p, &slot, &alarms, |i, a, _| {
        b.say("warm", i, alarms.len(), &a.code)
    })
    .await?;
    let warm = WarmRun {
        codes,
        alarms: alarms.len(),
        blocks_computed: tally.computed,
        tokens: tally.tokens,
        seconds: t0.elapsed().as_secs_f64(),
        full: tally.full_at.is_some(),
    };
    b.stop(&p, slot).await;
    let (p, mut slot) = b.start(cfg, dir.path()).await?;
    for (i, c) in picked.iter().enumerate() {
        b.say(WARM, i, picked.len(), &c.case);
        let (s, cov) = b
            .diagnose(&p, &mut slot, &under_plant_code(&c.alarm, i))
            .await;
        rows[i].warm = s;
        rows[i].warm_coverage = cov;
    }
    b.stop(&p, slot).await;
    if progress {
        eprintln!();
    }
    Ok(TiersReport::of(
        b.model.info.name.clone(),
        prefix,
        others.len(),
        warm,
        rows,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn case(name: &str, code: &str, gold: Option<&str>) -> Case {
        let gold = gold.map(|g| format!(r#","gold":{{"doc":"d-en","section":"{g} causes"}}"#));
        serde_json::from_str(&format!(
            r#"{{"case":"{name}","class":"c","alarm":{{"id":"{name}","ts":"2026-01-01T00:00:00Z","equipment":"ME1","code":"{code}","severity":"major","message":"m"}}{}}}"#,
            gold.unwrap_or_default()
        ))
        .unwrap()
    }

    fn names(v: &[&Case]) -> Vec<String> {
        v.iter().map(|c| c.case.clone()).collect()
    }

    #[test]
    fn cases_are_picked_with_a_manual_section_and_one_per_fault() {
        let cases = [
            case("a", "ME-A", Some("ME-A")),
            case("related", "ME-X", None),
            case("a-zh", "ME-A", Some("ME-A")),
            // Raised under a plant code: the gold section names the fault.
            case("plant-a", "AL-1", Some("ME-A")),
            case("b", "AL-2", Some("ME-B")),
            case("c", "ME-C", Some("ME-C")),
        ];
        let all = |_: &Case| true;
        assert_eq!(names(&pick_cases(&cases, 2, &all)), ["a", "b"]);
        assert_eq!(names(&pick_cases(&cases, 9, &all)), ["a", "b", "c"]);
        // A fault coverage does not take for covered under a plant code is
        // passed over for the next.
        let not_a = |c: &Case| c.case != "a";
        assert_eq!(names(&pick_cases(&cases, 2, &not_a)), ["a-zh", "b"]);
        assert_eq!(manual_code(&cases[3]), Some("ME-A"));
        assert_eq!(manual_code(&cases[1]), None);
    }

    #[test]
    fn other_alarms_are_of_other_faults_with_a_section() {
        let cases = [
            case("a", "ME-A", Some("ME-A")),
            case("related", "ME-X", None),
            case("plant-a", "AL-1", Some("me-a")),
            case("d", "ME-D", Some("ME-D")),
            case("e", "ME-E", Some("ME-E")),
            case("f", "ME-F", Some("ME-F")),
        ];
        let picked = pick_cases(&cases, 1, &|_| true);
        assert_eq!(names(&other_cases(&cases, &picked, 2)), ["d", "e"]);
        assert_eq!(names(&other_cases(&cases, &picked, 20)).len(), 3);
    }

    #[test]
    fn a_repeat_has_a_new_id_and_the_next_reading_in_value_and_message() {
        let mut a = crate::test_support::alarm("ME-JCW-PRES-LO");
        a.id = "ship-002".into();
        a.value = Some(2.1);
        a.message = Some("主机高温淡水进机压力低 2.1bar".into());
        let r = repeat_of(&a);
        assert_eq!(r.id, "ship-002-again");
        assert_eq!(
            (r.code.as_str(), r.equipment.as_str()),
            (a.code.as_str(), a.equipment.as_str())
        );
        assert_eq!(r.value, Some(2.2));
        assert_eq!(r.message.as_deref(), Some("主机高温淡水进机压力低 2.2bar"));
        // Whole readings, and a number in the message that is not the reading.
        a.value = Some(48.0);
        a.message = Some("Cyl 5 exh gas temp dev +48, was 148".into());
        let r = repeat_of(&a);
        assert_eq!(r.value, Some(49.0));
        assert_eq!(
            r.message.as_deref(),
            Some("Cyl 5 exh gas temp dev +49, was 148")
        );
        // A message without the reading keeps its words; the value moves.
        a.value = Some(93.5);
        a.message = Some("JCW outlet T high cyl 3".into());
        let r = repeat_of(&a);
        assert_eq!(
            (r.value, r.message.as_deref()),
            (Some(93.6), a.message.as_deref())
        );
        // No reading at all: only the id is new.
        a.value = None;
        let r = repeat_of(&a);
        assert_eq!((r.value, r.message), (None, a.message.clone()));
    }

    #[test]
    fn the_next_reading_moves_the_last_shown_digit() {
        assert_eq!(next_reading(93.5), 93.6);
        assert_eq!(next_reading(2.1), 2.2);
        assert_eq!(next_reading(15800.0), 15801.0);
        assert_eq!(next_reading(0.95), 0.96);
        assert_eq!(format!("{}", next_reading(2.1)), "2.2");
        assert_eq!(
            replace_reading("12.5 and 2.5", "2.5", "2.6"),
            "12.5 and 2.6"
        );
        assert_eq!(replace_reading("no reading", "2.5", "2.6"), "no reading");
    }

    #[test]
    fn a_plant_alarm_keeps_the_fault_under_a_code_no_manual_uses() {
        let a = crate::test_support::alarm("ME-JCW-TEMP-HI");
        let p = under_plant_code(&a, 0);
        assert_eq!(p.code, "PLANT-0042");
        assert_eq!(under_plant_code(&a, 3).code, "PLANT-0045");
        assert_ne!(p.id, a.id);
        assert_eq!((p.message, p.kind), (a.message, a.kind));
    }

    fn sample(uncached: f64, ttft: f64) -> Sample {
        Sample {
            prompt_tokens: 250.0,
            uncached_prompt_tokens: uncached,
            fed_tokens: 20.0,
            chosen_tokens: 12.0,
            ttft_ms: ttft,
            a72_projected_s: a72_projected_s(uncached, 20.0, 12.0),
            resumed: uncached < 100.0,
        }
    }

    #[test]
    fn the_a72_projection_reads_prompt_and_fed_at_6_and_chosen_at_3_5_per_s() {
        let out = GenOutput {
            prompt_tokens: 250,
            reused_tokens: 190,
            fed_tokens: 20,
            generated_tokens: 12,
            ttft_ms: 400.0,
            ..Default::default()
        };
        let s = Sample::of(&out, 130);
        assert_eq!(s.uncached_prompt_tokens, 60.0);
        // (60 + 20) / 6 + 12 / 3.5
        assert!(
            (s.a72_projected_s - (80.0 / 6.0 + 12.0 / 3.5)).abs() < 1e-9,
            "{s:?}"
        );
        assert!(s.resumed);
        assert!(
            !Sample::of(
                &GenOutput {
                    reused_tokens: 130,
                    ..out
                },
                130
            )
            .resumed
        );
    }

    #[test]
    fn tiers_report_medians_ranges_and_ratios_to_the_same_cases_cold() {
        let cold = [
            Some(sample(200.0, 1000.0)),
            Some(sample(180.0, 800.0)),
            None,
        ];
        let repeat = [
            Some(sample(50.0, 200.0)),
            Some(sample(60.0, 400.0)),
            Some(sample(55.0, 1.0)),
        ];
        let t = TierStats::of(REPEAT, &repeat, Some(&cold));
        assert_eq!((t.alarms, t.answered, t.resumed), (3, 3, 3));
        let u = t.uncached_prompt_tokens.unwrap();
        assert_eq!((u.p50, u.min, u.max), (55.0, 50.0, 60.0));
        // Case 3 has no cold figure: its ratio is left out, not counted 0.
        let r = t.ttft_over_cold.unwrap();
        assert_eq!((r.min, r.max), (0.2, 0.5));
        let c = TierStats::of(COLD, &cold, None);
        assert_eq!((c.answered, c.resumed, c.ttft_over_cold), (2, 0, None));
        let none = TierStats::of(WARM, &[None], Some(&cold));
        assert_eq!((none.uncached_prompt_tokens, none.ttft_ms), (None, None));
    }

    fn report() -> TiersReport {
        let row = |name: &str, cold, repeat, warm| TierCase {
            case: name.into(),
            code: "ME-A".into(),
            manual_code: "ME-A".into(),
            plant_code: plant_code(0),
            cold: Some(sample(cold, 1000.0)),
            repeat: Some(sample(repeat, 250.0)),
            warm: Some(sample(warm, 350.0)),
            warm_coverage: Coverage::Covered,
        };
        TiersReport::of(
            "m.gguf".into(),
            130,
            OTHERS,
            WarmRun {
                codes: vec!["ME-A".into(), "ME-B".into()],
                alarms: 4,
                blocks_computed: 4,
                tokens: 800,
                seconds: 12.5,
                full: false,
            },
            vec![row("a", 200.0, 50.0, 70.0), row("b", 180.0, 64.0, 90.0)],
        )
    }

    #[test]
    fn targets_are_checked_on_the_medians() {
        let r = report();
        let got: Vec<(String, String, bool)> = r
            .targets
            .iter()
            .map(|c| (c.tier.clone(), c.figure.clone(), c.met))
            .collect();
        let want = |t: &str, f: &str, met| (t.to_string(), f.to_string(), met);
        assert_eq!(
            got,
            [
                // Medians are the upper of two: 64 repeat, 90 warm, which
                // project to (64 + 20) / 6 + 12 / 3.5 = 17.4 s and
                // (90 + 20) / 6 + 12 / 3.5 = 21.8 s.
                want(REPEAT, "uncached prompt tokens", false),
                want(REPEAT, "TTFT / cold", true),
                want(REPEAT, "A72 projection s", false),
                want(WARM, "uncached prompt tokens", false),
                want(WARM, "A72 projection s", false),
            ]
        );
        let unmeasured = checks(&[]);
        assert!(unmeasured.iter().all(|c| !c.met && c.value.is_none()));
    }

    #[test]
    fn the_table_shows_the_tiers_side_by_side_with_their_targets() {
        let t = table(&report());
        let line = |start: &str| {
            t.lines()
                .find(|l| l.starts_with(start))
                .unwrap_or_else(|| panic!("no {start:?} line in\n{t}"))
                .to_string()
        };
        let head = line("median (min-max)");
        let (c, r, w) = (
            head.find(COLD).unwrap(),
            head.find(REPEAT).unwrap(),
            head.find(WARM).unwrap(),
        );
        assert!(c < r && r < w, "{head}");
        let uncached = line("uncached prompt tokens");
        // The columns line up with their headings.
        assert_eq!(uncached.find("200 (180-200)"), Some(c), "{t}");
        assert_eq!(uncached.find("64 (50-64)"), Some(r), "{t}");
        assert!(uncached.ends_with("repeat ≤ 60, warm ≤ 80"), "{uncached}");
        assert!(line("TTFT / cold").contains("0.25 (0.25-0.25)"), "{t}");
        assert!(
            line("TTFT / cold").contains(" - "),
            "cold has no ratio: {t}"
        );
        assert!(line("answered").contains("2/2"), "{t}");
        assert_eq!(
            line("served from a saved state")
                .split_whitespace()
                .collect::<Vec<_>>(),
            ["served", "from", "a", "saved", "state", "0/2", "2/2", "2/2", "cold", "0"],
        );
        assert!(
            line("  a ").contains("200 / 50 / 70") && line("  a ").contains("1000 / 250 / 350"),
            "{t}"
        );
        assert!(
            line("  b ").ends_with("warm as PLANT-0042 (covered)"),
            "{t}"
        );
        assert!(t.contains("static prefix (130 tokens) is cached"), "{t}");
        assert!(t.contains("--codes ME-A,ME-B"), "{t}");
        assert!(
            t.contains("MISSED  repeat after restart: uncached prompt tokens 64 ≤ 60"),
            "{t}"
        );
        assert!(
            t.contains("met     repeat after restart: TTFT / cold 0.25 ≤ 0.3"),
            "{t}"
        );
        // Nothing measured reads as "-", never as 0.
        let mut empty = report();
        empty.tiers[2] = TierStats::of(WARM, &[None, None], None);
        let t = table(&empty);
        let ttft = t.lines().find(|l| l.starts_with("TTFT ms")).unwrap();
        assert!(ttft.ends_with(" -"), "{t}");
    }
}
