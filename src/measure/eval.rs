//! Evaluation on labeled alarms: retrieval hit@k alone, or the whole pipeline
//! (JSON validity, cause-keyword hits, grounding, degraded rate, latency).
//!
//! Owns the metrics, and the leaving out of a case's own set when the
//! cases are also the examples (`OwnSetOut`); the case format is `cases`'.
//! Scoring functions are pure; `run_full` drives real slots.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::sync::Arc;

use serde::Serialize;

use crate::alarm::Alarm;
use crate::measure::stats::percentile;
use crate::retrieval::{Hit, Index, Query};

#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    #[error("cases file {0}")]
    Cases(#[from] crate::cases::CasesError),
    #[error(transparent)]
    Index(#[from] crate::retrieval::IndexError),
}

pub use crate::cases::{Case, Gold};
use crate::coverage::Examples;

pub fn load_cases(path: &Path) -> Result<Vec<Case>, EvalError> {
    Ok(crate::cases::load(path)?)
}

/// The set a case was written in, from its id: `plant-2304` and
/// `uncov-2311` are set 23, `plant-604` set 6, `plant-012` set 0; the
/// curated cases (`ship-012`, `buoy-007`) are each a set of their own.
pub fn set_of(case: &str) -> String {
    for curated in ["ship", "buoy"] {
        if case.starts_with(curated) {
            return curated.into();
        }
    }
    let digits: String = case.chars().filter(char::is_ascii_digit).collect();
    match digits.len() {
        4 => digits[..2].to_string(),
        3 => digits[..1].to_string(),
        _ => format!("x{digits}"),
    }
}

/// The examples each case is judged by: all of them, but for a case the
/// examples hold (`eval --cases` of the examples file itself), the examples
/// built again without the case's own set, so that no case is judged by its
/// own words or its writer's sibling wordings of the same fault.
pub struct OwnSetOut {
    all: Arc<Examples>,
    /// By set, the examples without it; only for sets of cases the
    /// examples hold.
    without: HashMap<String, Arc<Examples>>,
}

impl OwnSetOut {
    /// For `cases`, from the labelled alarms `examples` are built of.
    pub fn new(examples: &[Case], cases: &[Case]) -> Self {
        let all = Arc::new(Examples::of_cases(examples));
        let mut without = HashMap::new();
        for c in cases.iter().filter(|c| all.holds(&c.case)) {
            let set = set_of(&c.case);
            without.entry(set.clone()).or_insert_with(|| {
                Arc::new(Examples::of_cases(
                    examples.iter().filter(|e| set_of(&e.case) != set),
                ))
            });
        }
        Self { all, without }
    }

    /// The examples to judge `case` by.
    pub fn of(&self, case: &Case) -> &Arc<Examples> {
        match self.all.holds(&case.case) {
            true => &self.without[&set_of(&case.case)],
            false => &self.all,
        }
    }

    /// How many sets are left out for some case.
    pub fn sets_left_out(&self) -> usize {
        self.without.len()
    }
}

/// `pipeline` judging by `examples` instead of its own.
pub fn with_examples(
    pipeline: &crate::pipeline::Pipeline,
    examples: Option<Arc<Examples>>,
) -> crate::pipeline::Pipeline {
    crate::pipeline::Pipeline {
        index: pipeline.index.clone(),
        model: pipeline.model.clone(),
        cfg: pipeline.cfg.clone(),
        counters: pipeline.counters.clone(),
        examples,
    }
}

/// True if a hit is the gold passage. A section split into parts ("… (1/2)")
/// still counts as its section.
pub fn is_gold(h: &Hit, g: &Gold) -> bool {
    h.doc == g.doc
        && (h.section.heading() == g.section
            || h.section.heading().starts_with(&format!("{} (", g.section)))
}

/// Position (0-based) of the gold passage among the hits.
pub fn gold_rank(hits: &[Hit], g: &Option<Gold>) -> Option<usize> {
    let g = g.as_ref()?;
    hits.iter().position(|h| is_gold(h, g))
}

/// True if any keyword group (alternatives split by '|') occurs in `text`.
pub fn keyword_hits(text: &str, keywords: &[String]) -> usize {
    let t = text.to_lowercase();
    keywords
        .iter()
        .filter(|k| {
            k.split('|')
                .map(|a| a.trim().to_lowercase())
                .any(|a| !a.is_empty() && t.contains(&a))
        })
        .count()
}

#[derive(Debug, Default, Serialize)]
pub struct ClassStats {
    pub cases: usize,
    pub hit1: usize,
    pub hit3: usize,
    /// Tuning cases' misses only: a held-out case whose miss was read is
    /// held out no longer (`RetrievalReport::unnamed_misses` counts them).
    pub misses: Vec<String>,
}

#[derive(Debug, Serialize)]
pub struct RetrievalReport {
    pub cases: usize,
    /// Cases with a gold section (the rest are faults no section is about);
    /// the hit rates are over these.
    pub with_gold: usize,
    /// Gold among the first 1 and 3 of the ranking alone (`Index::search`).
    pub hit_at_1: f64,
    pub hit_at_3: f64,
    /// Gold among the passages the prompt gets, all passes applied as in
    /// the daemon (`retrieval::passages_for`, top 3).
    pub prompt_hit_at_3: f64,
    /// Tuning cases' gold sections the prompt lacks.
    pub prompt_misses: Vec<String>,
    /// Held-out cases missed by the ranking's top 3 or the prompt: counted,
    /// never named.
    pub unnamed_misses: usize,
    pub p50_us: f64,
    pub p99_us: f64,
    /// The whole of the daemon's retrieval (`passages_for`), and the
    /// coverage judgement after it: no model step.
    pub passages_p50_us: f64,
    pub coverage_p50_us: f64,
    pub coverage_p99_us: f64,
    pub per_class: BTreeMap<String, ClassStats>,
    /// Coverage judged on those passages, against the cases' truth.
    pub coverage: crate::measure::coverage::CoverageReport,
    /// The same for every covered case raised under a code no manual uses
    /// (`PLANT-n`), as a plant that numbers its own alarms raises them.
    pub under_plant_codes: crate::measure::coverage::CoverageReport,
    /// Every figure per writer and per kind style (hits by the ranking
    /// alone, as `hit_at_1` and `hit_at_3`).
    pub breakdown: crate::measure::coverage::Breakdown,
}

/// Retrieval and coverage on `cases`, each judged by its examples
/// (`OwnSetOut`), or without any.
pub fn run_retrieval(
    index: &Index,
    cases: &[Case],
    examples: Option<&OwnSetOut>,
) -> Result<RetrievalReport, EvalError> {
    use crate::measure::coverage::{Breakdown, CoverageReport, Judged};
    let mut per_class: BTreeMap<String, ClassStats> = BTreeMap::new();
    let (mut h1, mut h3, mut p3, mut with_gold) = (0, 0, 0, 0);
    let mut prompt_misses = Vec::new();
    let mut unnamed_misses = 0;
    let mut lat = Vec::with_capacity(cases.len());
    let (mut judged, mut plant_judged) = (Vec::new(), Vec::new());
    let (mut passes_lat, mut coverage_lat) = (Vec::new(), Vec::new());
    for c in cases {
        let t = std::time::Instant::now();
        let hits = index.search(&Query::of_alarm(&c.alarm), 3)?;
        lat.push(t.elapsed().as_secs_f64() * 1e6);
        let t = std::time::Instant::now();
        let prompt = crate::retrieval::passages_for(index, &c.alarm, 3)?;
        passes_lat.push(t.elapsed().as_secs_f64() * 1e6);
        let t = std::time::Instant::now();
        let like = examples.map(|e| crate::coverage::Likeness {
            examples: e.of(c).as_ref(),
        });
        let j = crate::coverage::judge_in_like(index, &c.alarm, &prompt, like);
        coverage_lat.push(t.elapsed().as_secs_f64() * 1e6);
        let rank = gold_rank(&hits, &c.gold);
        judged.push(
            Judged::of(c, j.coverage, false, j.best, j.section)
                .ranked(c, rank)
                .decided_by(j.rule)
                .seen_as(crate::coverage::equipment_of(index, &c.alarm).by),
        );
        let Some(gold) = &c.gold else { continue };
        let mut plant = c.clone();
        plant.alarm.code = format!("PLANT-{}", plant_judged.len() + 1);
        let passages = crate::retrieval::passages_for(index, &plant.alarm, 3)?;
        let j = crate::coverage::judge_in_like(index, &plant.alarm, &passages, like);
        plant_judged
            .push(Judged::of(&plant, j.coverage, false, j.best, j.section).decided_by(j.rule));
        with_gold += 1;
        let in_prompt = gold_rank(&prompt, &c.gold).is_some();
        if c.held_out && (!in_prompt || rank.is_none()) {
            unnamed_misses += 1;
        }
        if in_prompt {
            p3 += 1;
        } else if !c.held_out {
            let got: Vec<String> = prompt
                .iter()
                .map(|h| format!("{}#{} ({:.1})", h.doc, h.section, h.score))
                .collect();
            prompt_misses.push(format!(
                "{}: want {}#{}, prompt has {}",
                c.case,
                gold.doc,
                gold.section,
                got.join(", ")
            ));
        }
        let s = per_class.entry(c.class.clone()).or_default();
        s.cases += 1;
        if rank == Some(0) {
            h1 += 1;
            s.hit1 += 1;
        }
        if rank.is_some() {
            h3 += 1;
            s.hit3 += 1;
        } else if !c.held_out {
            let got: Vec<String> = hits
                .iter()
                .map(|h| format!("{}#{}", h.doc, h.section))
                .collect();
            s.misses.push(format!(
                "{} ({}): want {}#{}, got {}",
                c.case,
                c.alarm.code,
                gold.doc,
                gold.section,
                got.join(", ")
            ));
        }
    }
    for v in [&mut lat, &mut passes_lat, &mut coverage_lat] {
        v.sort_by(f64::total_cmp);
    }
    let n = with_gold.max(1) as f64;
    Ok(RetrievalReport {
        cases: cases.len(),
        with_gold,
        hit_at_1: h1 as f64 / n,
        hit_at_3: h3 as f64 / n,
        prompt_hit_at_3: p3 as f64 / n,
        prompt_misses,
        unnamed_misses,
        p50_us: percentile(&lat, 0.5),
        p99_us: percentile(&lat, 0.99),
        passages_p50_us: percentile(&passes_lat, 0.5),
        coverage_p50_us: percentile(&coverage_lat, 0.5),
        coverage_p99_us: percentile(&coverage_lat, 0.99),
        per_class,
        coverage: CoverageReport::of(&judged),
        under_plant_codes: CoverageReport::of(&plant_judged),
        breakdown: Breakdown::of(&judged, &plant_judged),
    })
}

/// The published diagnosis, if `payload` holds to the wire contract: it parses
/// into a diagnosis with a summary, likelihoods from the fixed set, and, for
/// a model's answer, at least one cause.
pub fn published(payload: &[u8]) -> Option<crate::diagnosis::Diagnosis> {
    let d: crate::diagnosis::Diagnosis = serde_json::from_slice(payload).ok()?;
    let likely = d
        .probable_causes
        .iter()
        .all(|c| crate::llm::grammar::LIKELIHOODS.contains(&c.likelihood.as_str()));
    let causes = d.mode != crate::diagnosis::Mode::Full || !d.probable_causes.is_empty();
    (!d.summary.trim().is_empty() && likely && causes).then_some(d)
}

/// True if an answer as the model read it back is one JSON object: its
/// every choice was made in the context of well-formed JSON.
fn seen_is_json(seen: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(seen).is_ok_and(|v| v.is_object())
}

/// Scores one case's answer: its published bytes, its mode and the expected
/// cause keywords in its summary, causes and actions. Validity is judged on
/// the bytes the daemon would publish, not on the model's draft: on the
/// schema path that is rendered by serde and parses by construction.
pub fn outcome(tr: &crate::pipeline::Trace, keywords: &[String]) -> Outcome {
    let wire = crate::diagnosis::payload(&tr.diagnosis)
        .ok()
        .and_then(|b| published(&b));
    // Keywords are read from what subscribers get when it parses.
    let d = wire.as_ref().unwrap_or(&tr.diagnosis);
    let mut text = d.summary.clone();
    for pc in &d.probable_causes {
        text.push(' ');
        text.push_str(&pc.cause);
    }
    for a in &d.actions {
        text.push(' ');
        text.push_str(a);
    }
    Outcome {
        mode: tr.diagnosis.mode,
        valid: wire.is_some(),
        found: keyword_hits(&text, keywords),
        expected: keywords.len(),
        verdict: tr.verdict,
    }
}

/// What one case's answer scored.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub mode: crate::diagnosis::Mode,
    /// The published bytes parsed into the wire contract.
    pub valid: bool,
    /// Expected-cause keyword groups found, and how many the case has.
    pub found: usize,
    pub expected: usize,
    /// The grounding guard's verdict on the model's answer; None when the
    /// model did not answer (degraded, triage).
    pub verdict: Option<crate::grounding::Verdict>,
}

/// Cause-keyword scores of the answers of one mode.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct KeywordStats {
    pub cases: usize,
    /// Share of these answers naming at least one expected cause; None without answers.
    pub keyword_hit_rate: Option<f64>,
    /// Share of these answers' expected keywords found.
    pub keyword_recall: Option<f64>,
}

/// Validity and keyword scores over every case.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Scores {
    pub json_valid_rate: f64,
    pub full: KeywordStats,
    pub degraded: KeywordStats,
    pub triage: KeywordStats,
    /// Model answers the grounding guard replaced with the passages' items:
    /// the manuals' text, so apart from `full` like `degraded`.
    pub passages: KeywordStats,
    /// Share of all cases answered in full, validly, naming an expected cause:
    /// what `bench --decide` compares.
    pub accuracy: f64,
    /// Mean share of the model's causes that were grounded, over the
    /// answers the model gave (full and passages); None without any.
    pub grounded_mean: Option<f64>,
    /// Model causes the guard dropped, over all cases.
    pub causes_dropped: usize,
}

/// Scores every case. Keyword rates are per mode: a degraded, triage or
/// passages answer is the manuals' own text, so its hits say nothing of the
/// model's. Grounding is averaged over the answers the model gave.
pub fn score(outcomes: &[Outcome]) -> Scores {
    use crate::diagnosis::Mode;
    let of = |mode: Mode| {
        let m: Vec<&Outcome> = outcomes.iter().filter(|o| o.mode == mode).collect();
        let hits = m.iter().filter(|o| o.found > 0).count();
        let found: usize = m.iter().map(|o| o.found).sum();
        let expected: usize = m.iter().map(|o| o.expected).sum();
        KeywordStats {
            cases: m.len(),
            keyword_hit_rate: (!m.is_empty()).then(|| hits as f64 / m.len() as f64),
            keyword_recall: (expected > 0).then(|| found as f64 / expected as f64),
        }
    };
    let n = outcomes.len().max(1) as f64;
    let valid = outcomes.iter().filter(|o| o.valid).count();
    let accurate = outcomes
        .iter()
        .filter(|o| o.mode == Mode::Full && o.valid && o.found > 0)
        .count();
    let verdicts: Vec<&crate::grounding::Verdict> =
        outcomes.iter().filter_map(|o| o.verdict.as_ref()).collect();
    Scores {
        json_valid_rate: valid as f64 / n,
        full: of(Mode::Full),
        degraded: of(Mode::Degraded),
        triage: of(Mode::Triage),
        passages: of(Mode::Passages),
        accuracy: accurate as f64 / n,
        grounded_mean: (!verdicts.is_empty())
            .then(|| verdicts.iter().map(|v| v.grounded).sum::<f64>() / verdicts.len() as f64),
        causes_dropped: verdicts.iter().map(|v| v.dropped).sum(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trace(d: crate::diagnosis::Diagnosis, raw: Option<&str>) -> crate::pipeline::Trace {
        crate::pipeline::Trace {
            diagnosis: d,
            first: raw.map(|r| crate::llm::GenOutput {
                draft: serde_json::from_str(r).unwrap_or_default(),
                raw: r.to_string(),
                ..Default::default()
            }),
            hits: Vec::new(),
            verdict: None,
        }
    }

    fn answer(mode: crate::diagnosis::Mode) -> crate::diagnosis::Diagnosis {
        crate::diagnosis::Diagnosis {
            alarm_id: "a1".into(),
            equipment: "ME1".into(),
            code: "LO-PRESS-LO".into(),
            alarm_ts: "2026-01-01T00:00:00Z".into(),
            severity: "major".into(),
            summary: "low lube oil pressure".into(),
            probable_causes: vec![crate::diagnosis::Cause {
                cause: "clogged filter".into(),
                likelihood: "high".into(),
                source: None,
                site: None,
            }],
            actions: vec!["check the filter".into()],
            action_sources: vec![],
            sources: vec![],
            mode,
            coverage: Default::default(),
            coverage_rule: None,
            coverage_note: None,
            grounded: 1.0,
            model: "m.gguf".into(),
            timings: Default::default(),
            ts: "2026-01-01T00:00:00Z".into(),
        }
    }

    const DRAFT: &str = r#"{"summary":"low oil","probable_causes":[{"cause":"filter","likelihood":"high"}],"actions":[],"sources":[]}"#;

    // Validity is judged on the published bytes, not on a
    // rendering of the model's draft (which the schema path makes valid by
    // construction).
    #[test]
    fn json_validity_is_judged_on_the_published_bytes() {
        use crate::diagnosis::Mode;
        // A clean draft, but a timing serde writes as null: subscribers get
        // a payload that does not parse into the contract.
        let mut d = answer(Mode::Full);
        d.timings.ttft_ms = f64::NAN;
        assert!(!outcome(&trace(d, Some(DRAFT)), &[]).valid);
        // An empty summary on the wire breaks the contract whatever the draft said.
        let mut d = answer(Mode::Full);
        d.summary.clear();
        assert!(!outcome(&trace(d, Some(DRAFT)), &[]).valid);
        // The slot produced nothing, and the degraded answer published is valid JSON.
        assert!(outcome(&trace(answer(Mode::Degraded), None), &[]).valid);
        assert!(outcome(&trace(answer(Mode::Full), Some(DRAFT)), &[]).valid);
    }

    // Keyword hits of degraded answers (built from the
    // manuals' own text) must not count as the model's.
    #[test]
    fn keyword_hit_rate_counts_full_answers_only() {
        use crate::diagnosis::Mode;
        let o = |mode, valid, found| Outcome {
            mode,
            valid,
            found,
            expected: 2,
            verdict: None,
        };
        let s = score(&[
            o(Mode::Full, true, 0),
            o(Mode::Full, true, 2),
            o(Mode::Degraded, true, 2),
            o(Mode::Degraded, true, 1),
            o(Mode::Full, false, 1),
        ]);
        assert_eq!(s.full.cases, 3);
        assert_eq!(s.full.keyword_hit_rate, Some(2.0 / 3.0));
        assert_eq!(s.full.keyword_recall, Some(0.5));
        assert_eq!(s.degraded.cases, 2);
        assert_eq!(s.degraded.keyword_hit_rate, Some(1.0));
        assert_eq!(s.degraded.keyword_recall, Some(0.75));
        assert_eq!(s.triage, KeywordStats::default());
        assert_eq!(s.json_valid_rate, 0.8);
        // Only the valid full answer with a hit is accurate: 1 of 5.
        assert_eq!(s.accuracy, 0.2);
    }

    #[test]
    fn no_answers_of_a_mode_leave_its_rates_empty() {
        let s = score(&[]);
        assert_eq!(s.full.keyword_hit_rate, None);
        assert_eq!(s.accuracy, 0.0);
        assert_eq!(s.grounded_mean, None);
    }

    // An answer the guard rebuilt from the passages is the
    // manuals' text; its keywords are counted apart, and its zero grounded
    // share and dropped causes are the model's.
    #[test]
    fn passages_answers_count_apart_and_their_grounding_is_the_models() {
        use crate::diagnosis::Mode;
        use crate::grounding::Verdict;
        let o = |mode, found, verdict| Outcome {
            mode,
            valid: true,
            found,
            expected: 1,
            verdict,
        };
        let v = |grounded, dropped, fell_back| {
            Some(Verdict {
                grounded,
                dropped,
                fell_back,
            })
        };
        let s = score(&[
            o(Mode::Full, 1, v(1.0, 0, false)),
            o(Mode::Full, 0, v(0.5, 1, false)),
            o(Mode::Passages, 1, v(0.0, 3, true)),
            o(Mode::Degraded, 1, None),
        ]);
        assert_eq!(s.full.cases, 2);
        assert_eq!(s.full.keyword_hit_rate, Some(0.5));
        assert_eq!(s.passages.cases, 1);
        assert_eq!(s.passages.keyword_hit_rate, Some(1.0));
        assert_eq!(s.grounded_mean, Some(0.5));
        assert_eq!(s.causes_dropped, 4);
        assert_eq!(s.accuracy, 0.25);
    }

    #[test]
    fn keyword_alternatives_match_either_language() {
        let k = vec![
            "thermostat|恒温阀".to_string(),
            "cooler|冷却器".to_string(),
            "pump|泵".to_string(),
        ];
        assert_eq!(keyword_hits("检查恒温阀和冷却器", &k), 2);
        assert_eq!(keyword_hits("Thermostat stuck", &k), 1);
        assert_eq!(keyword_hits("nothing relevant", &k), 0);
    }

    /// A held-out case read is held out no longer: its misses are counted,
    /// a tuning case's named.
    #[test]
    fn a_held_out_cases_misses_are_counted_and_never_named() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge");
        let manuals = crate::retrieval::knowledge::load_dir(&dir).unwrap();
        let index = Index::from_bytes(crate::retrieval::index::build(&manuals).unwrap()).unwrap();
        // A ballast pump's words, but the gold is the winch's: the ranking
        // misses it and so does the prompt.
        let line = |case: &str, held: bool| {
            format!(
                r#"{{"case": "{case}", "lang": "en", "class": "winch", "coverage": "covered", "held_out": {held}, "alarm": {{"id": "{case}", "ts": "2026-12-01T00:00:00Z", "equipment": "BP-2", "code": "PT-1", "severity": "major", "kind": "ballast", "message": "ballast pump discharge pressure low"}}, "gold": {{"doc": "winch-en", "section": "WIN-LVLWIND-FAULT causes"}}}}"#
            )
        };
        let text = format!("{}\n{}\n", line("held-9", true), line("tune-9", false));
        let cases = crate::cases::parse(&text, std::path::Path::new("c.jsonl")).unwrap();
        let r = run_retrieval(&index, &cases, None).unwrap();
        let named: Vec<&String> = r
            .per_class
            .values()
            .flat_map(|s| &s.misses)
            .chain(&r.prompt_misses)
            .collect();
        assert_eq!(named.len(), 2, "{named:?}");
        assert!(named.iter().all(|m| m.starts_with("tune-9")), "{named:?}");
        assert_eq!(r.unnamed_misses, 1);
        assert_eq!(r.coverage.held_out.unnamed, 1);
        assert!(!r.coverage.text().contains("held-9"));
    }

    #[test]
    fn split_sections_count_as_gold() {
        let h = Hit {
            doc: "d".into(),
            lang: "zh".into(),
            title: String::new(),
            ..crate::test_support::hit("BAT-VOLT-LO 原因 (1/2)", "")
        };
        assert!(is_gold(
            &h,
            &Gold {
                doc: "d".into(),
                section: "BAT-VOLT-LO 原因".into()
            }
        ));
        assert!(!is_gold(
            &h,
            &Gold {
                doc: "d".into(),
                section: "BAT-VOLT-LO".into()
            }
        ));
    }

    #[test]
    fn answer_modes_are_listed_once_each_and_only_chosen_ones_split_by_summary() {
        use crate::config::Answer;
        use crate::config::Summary::{Composed, First, Last};
        let m = |a, s| AnswerMode {
            answer: a,
            summary: s,
        };
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert_eq!(
            AnswerMode::list(&s(&["chosen", "written"]), &[]),
            [m(Answer::Chosen, None), m(Answer::Written, None)]
        );
        assert_eq!(
            AnswerMode::list(
                &s(&["chosen", "written", "chosen"]),
                &s(&["first", "last", "composed"])
            ),
            [
                m(Answer::Chosen, Some(First)),
                m(Answer::Chosen, Some(Last)),
                m(Answer::Chosen, Some(Composed)),
                m(Answer::Written, None)
            ]
        );
        assert_eq!(m(Answer::Chosen, Some(Last)).name(), "chosen, summary last");
    }

    #[test]
    fn sets_are_read_from_case_ids() {
        assert_eq!(set_of("plant-2304"), "23");
        assert_eq!(set_of("uncov-611"), "6");
        assert_eq!(set_of("plant-012"), "0");
        assert_eq!(set_of("ship-012"), "ship");
        assert_eq!(set_of("buoy-007"), "buoy");
    }

    fn labelled(case: &str, class: &str, message: &str, section: Option<&str>) -> Case {
        let mut v = serde_json::json!({
            "case": case, "class": class,
            "alarm": {"id": case, "ts": "2026-12-01T00:00:00Z", "equipment": "E",
                      "code": "X-1", "severity": "major", "kind": class, "message": message},
        });
        if let Some(s) = section {
            v["gold"] = serde_json::json!({"doc": "d", "section": format!("{s} causes")});
        } else {
            v["coverage"] = "related".into();
        }
        serde_json::from_value(v).unwrap()
    }

    /// A case the examples hold is judged without its own set (its own
    /// words, and its writer's sibling wording); a case they do not hold,
    /// by all of them.
    #[test]
    fn a_case_the_examples_hold_is_judged_without_its_own_set() {
        let examples = vec![
            labelled(
                "plant-1201",
                "purifier",
                "sludge ejection not detected",
                Some("PUR-DISCH-FAIL"),
            ),
            labelled(
                "plant-1202",
                "purifier",
                "ejection not detected after sludge cycle",
                Some("PUR-DISCH-FAIL"),
            ),
            labelled(
                "uncov-1301",
                "purifier",
                "feed pump motor overload trip",
                None,
            ),
            labelled(
                "plant-1401",
                "boiler",
                "burner flame failure",
                Some("BLR-FLAME-FAIL"),
            ),
        ];
        let own = labelled(
            "plant-1201",
            "purifier",
            "sludge ejection not detected",
            None,
        );
        let new = labelled(
            "plant-4701",
            "purifier",
            "sludge ejection not detected",
            None,
        );
        let e = OwnSetOut::new(&examples, &[own.clone(), new.clone()]);
        assert_eq!(e.sets_left_out(), 1);
        let message = "sludge ejection not detected";
        let all = e.of(&new).nearest(&["purifier".into()], message).unwrap();
        assert!(all.similarity > 0.99, "{all:?}");
        // Set 12 (both wordings of the fault) is not read for its own case.
        let left = e
            .of(&own)
            .nearest_any(&["purifier".into()], message, None)
            .unwrap();
        assert_eq!(left.section, "", "{left:?}");
        assert!(!e.of(&own).holds("plant-1202") && e.of(&own).holds("uncov-1301"));
    }

    #[test]
    fn filler_is_found_in_either_language() {
        assert!(has_filler("检查滤器。如果问题持续存在，请联系技术支持团队"));
        assert!(has_filler(
            "Check the filter. If the problem persists, contact technical support."
        ));
        assert!(!has_filler(
            "Lube oil pressure low: filter choked or pump worn."
        ));
    }
}

/// The accuracy dimension, measured through the real pipeline.
#[derive(Debug, Serialize)]
pub struct FullReport {
    pub model: String,
    pub style: String,
    pub cases: usize,
    pub retrieval_hit_at_3: f64,
    /// Share of cases whose published payload (the bytes the daemon sends)
    /// parses into the diagnosis contract.
    pub json_valid_rate: f64,
    pub empty_summaries: usize,
    pub full_rate: f64,
    /// Share of cases the model did not answer (degraded, triage).
    pub degraded_rate: f64,
    /// Share of cases whose model answer had no grounded cause and was
    /// replaced by the passages' items (mode "passages").
    pub passages_rate: f64,
    /// Answers that fell back to the passages, as a count.
    pub fell_back_to_passages: usize,
    /// Mean share of the model's causes that were text and supported by the
    /// passages, over the answers the model gave.
    pub grounded_mean: Option<f64>,
    /// Model causes the grounding guard dropped, over all cases.
    pub causes_dropped: usize,
    /// Share of full answers with at least one expected-cause keyword.
    pub keyword_hit_rate: Option<f64>,
    /// Share of the expected keywords found in full answers.
    pub keyword_recall: Option<f64>,
    /// The same for degraded answers (the manuals' own text), kept apart.
    pub degraded: KeywordStats,
    /// The same for passages answers (also the manuals' own text).
    pub passages: KeywordStats,
    /// The same for triage answers; eval has no queue, so normally none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub triage: Option<KeywordStats>,
    /// Share of all cases answered in full, validly, with an expected cause.
    pub accuracy: f64,
    /// Coverage said in the published diagnoses against the cases' truth.
    pub coverage: crate::measure::coverage::CoverageReport,
    /// Every figure per writer and per kind style (hits: the gold section
    /// among the published answer's passages).
    pub breakdown: crate::measure::coverage::Breakdown,
    /// Cause-keyword hit of the full answers, and accuracy, over the cases
    /// a section is about (the uncovered ones have no expected causes).
    pub covered_keyword_hit_rate: Option<f64>,
    pub covered_accuracy: f64,
    pub prompt_tokens_p50: f64,
    pub prompt_tokens_max: f64,
    pub generated_tokens_mean: f64,
    /// Tokens of the static prefix (template + system prompt + user head).
    pub prefix_tokens: usize,
    /// TTFT cold (every `TTFT_EVERY`-th case, from an empty cache), on a
    /// prefix hit (every case) and repeated at once with a new value; medians
    /// over the probes that succeeded, and how many failed.
    #[serde(flatten)]
    pub ttft: crate::measure::ttft::TtftStats,
    pub latency_ms_p50: f64,
    pub latency_ms_p90: f64,
    pub latency_ms_p99: f64,
    pub latency_ms_max: f64,
    pub gen_tokens_per_s_p50: f64,
}

/// Prompt sizes without generation: what every case would send to the model.
#[derive(Debug, Clone, Serialize)]
pub struct PromptReport {
    pub model: String,
    pub cases: usize,
    /// Tokens of the system prompt text alone (the issue allows 200).
    pub system_prompt_tokens: usize,
    /// Tokens of the static prefix (kept in every slot's KV cache).
    pub prefix_tokens: usize,
    pub prompt_tokens_p50: f64,
    pub prompt_tokens_max: f64,
    /// Tokens read per alarm on a prefix hit (prompt minus prefix).
    pub suffix_tokens_p50: f64,
    /// Median suffix / prompt: the token-count floor of TTFT prefix-hit / cold.
    pub suffix_share_p50: f64,
    pub passages_mean: f64,
    /// Share of cases whose gold passage made it into the prompt.
    pub gold_in_prompt: f64,
    /// Cases whose prompt shows no cause item or no check item to choose
    /// from, so that a chosen answer is written instead (llm.answer chosen).
    pub without_candidates: Vec<String>,
    /// Median candidates a chosen answer picks its causes and actions from.
    pub cause_candidates_p50: f64,
    pub action_candidates_p50: f64,
}

/// Builds every case's prompt as the daemon would and counts its tokens.
pub fn run_prompts(pipeline: &crate::pipeline::Pipeline, cases: &[Case]) -> PromptReport {
    let prefix_tokens = pipeline.model.static_prefix_tokens();
    let (mut prompt, mut suffix, mut share) = (vec![], vec![], vec![]);
    let (mut passages, mut gold) = (0usize, 0usize);
    let (mut without, mut nc, mut na) = (Vec::new(), Vec::new(), Vec::new());
    for c in cases {
        let (hits, _) = pipeline.retrieve(&c.alarm);
        let p = pipeline.prepare(&c.alarm, hits, false, crate::llm::Style::Schema);
        match &p.candidates {
            Some(k) => {
                nc.push(k.causes.len() as f64);
                na.push(k.actions.len() as f64);
            }
            None => without.push(format!(
                "{} ({}): {}",
                c.case,
                c.alarm.code,
                p.hits
                    .iter()
                    .map(|h| format!("{} § {}", h.doc, h.section))
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }
        let n = pipeline.model.prompt_tokens(&p.request.prompt);
        let s = n.saturating_sub(prefix_tokens);
        prompt.push(n as f64);
        suffix.push(s as f64);
        share.push(s as f64 / n.max(1) as f64);
        passages += p.hits.len();
        if gold_rank(&p.hits, &c.gold).is_some() {
            gold += 1;
        }
    }
    for v in [&mut prompt, &mut suffix, &mut share, &mut nc, &mut na] {
        v.sort_by(f64::total_cmp);
    }
    let n = cases.len().max(1) as f64;
    PromptReport {
        model: pipeline.model.info.name.clone(),
        cases: cases.len(),
        system_prompt_tokens: pipeline.model.count_tokens(crate::prompt::SYSTEM_PROMPT),
        prefix_tokens,
        prompt_tokens_p50: percentile(&prompt, 0.5),
        prompt_tokens_max: prompt.last().copied().unwrap_or(0.0),
        suffix_tokens_p50: percentile(&suffix, 0.5),
        suffix_share_p50: percentile(&share, 0.5),
        passages_mean: passages as f64 / n,
        gold_in_prompt: gold as f64 / n,
        without_candidates: without,
        cause_candidates_p50: percentile(&nc, 0.5),
        action_candidates_p50: percentile(&na, 0.5),
    }
}

/// Every this many cases (from the first), TTFT is also measured cold and
/// repeated: 40 of the 118 eval cases, English and Chinese alternating.
pub const TTFT_EVERY: usize = 3;

/// TTFT of the prompt the daemon builds for `alarm`, on the slot's cache as
/// it is. On the schema path a one-token budget closes every value at once,
/// so this costs the prompt and a few steps, not a whole diagnosis. The
/// grammar path cannot close early (a cut-off output fails, and a failed job
/// drops the cache), so it runs the whole diagnosis.
pub async fn probe_ttft(
    pipeline: &crate::pipeline::Pipeline,
    slot: &mut crate::llm::Slot,
    alarm: &Alarm,
    style: crate::llm::Style,
) -> crate::measure::ttft::Probe {
    use crate::measure::ttft::Probe;
    if !matches!(style, crate::llm::Style::Schema) {
        let tr = pipeline.diagnose_traced(slot, alarm, style).await;
        return Probe::of(tr.first.as_ref().map(|o| o.ttft_ms));
    }
    Probe::of(first_token(pipeline, slot, alarm).await.map(|o| o.ttft_ms))
}

/// The schema-path probe itself: the prompt the daemon builds for `alarm`,
/// run with a one-token budget; None when the job failed.
pub async fn first_token(
    pipeline: &crate::pipeline::Pipeline,
    slot: &mut crate::llm::Slot,
    alarm: &Alarm,
) -> Option<crate::llm::GenOutput> {
    let style = crate::llm::Style::Schema;
    let (hits, _) = pipeline.retrieve(alarm);
    let mut p = pipeline.prepare(alarm, hits, false, style);
    p.request.max_tokens = 1;
    let wd = pipeline.cfg.watchdog;
    slot.run(p.request, &wd, wd.deadline).await.ok()
}

/// Runs every case through `pipeline` on `slot`, each with only the static
/// prefix in the cache (as in the daemon). Every `TTFT_EVERY`-th case is
/// also run from an empty cache and then repeated with a new value, so cold,
/// prefix-hit and repeat TTFT compare the same prompts.
pub async fn run_full(
    pipeline: &crate::pipeline::Pipeline,
    slot: &mut crate::llm::Slot,
    cases: &[Case],
    style: crate::llm::Style,
    progress: bool,
    mut record: Option<&mut dyn std::io::Write>,
    examples: Option<&OwnSetOut>,
) -> FullReport {
    use crate::measure::ttft::{CaseProbes, Probe};
    let n = cases.len().max(1) as f64;
    let (mut empty, mut hit3) = (0, 0);
    let (mut prompt, mut gen, mut lat, mut tps) = (vec![], vec![], vec![], vec![]);
    let (mut outcomes, mut probes) = (vec![], vec![]);
    let (mut judged, mut covered) = (vec![], vec![]);
    let prefix_tokens = pipeline.model.static_prefix_tokens();
    for (i, c) in cases.iter().enumerate() {
        let probed = i % TTFT_EVERY == 0;
        let mut cold = Probe::Skipped;
        if probed {
            slot.keep_cache(0, false).await;
            cold = probe_ttft(pipeline, slot, &c.alarm, style).await;
        }
        slot.keep_cache(prefix_tokens, false).await;
        let own = examples.map(|e| with_examples(pipeline, Some(e.of(c).clone())));
        let t = std::time::Instant::now();
        let tr = own
            .as_ref()
            .unwrap_or(pipeline)
            .diagnose_traced(slot, &c.alarm, style)
            .await;
        lat.push(t.elapsed().as_secs_f64() * 1e3);
        if gold_rank(&tr.hits, &c.gold).is_some() {
            hit3 += 1;
        }
        if let Some(out) = &tr.first {
            prompt.push(f64::from(out.prompt_tokens));
            gen.push(f64::from(out.generated_tokens));
            if out.generation_ms > 0.0 {
                tps.push(f64::from(out.generated_tokens) / (out.generation_ms / 1e3));
            }
        }
        if tr.diagnosis.summary.trim().is_empty() {
            empty += 1;
        }
        if let Some(w) = record.as_mut() {
            let line = serde_json::json!({"case": c.case, "diagnosis": tr.diagnosis});
            let _ = writeln!(w, "{line}");
        }
        let scored = outcome(&tr, &c.keywords);
        outcomes.push(scored);
        let d = &tr.diagnosis;
        let high = d.probable_causes.iter().any(|p| p.likelihood == "high");
        judged.push(
            crate::measure::coverage::Judged::of(c, d.coverage, high, 0.0, None)
                .ranked(c, gold_rank(&tr.hits, &c.gold))
                .named(scored.found > 0),
        );
        if c.coverage == crate::coverage::Coverage::Covered {
            covered.push(outcome(&tr, &c.keywords));
        }
        let mut repeat = Probe::Skipped;
        if probed {
            // The same alarm again at once, as a sensor repeats it: new id,
            // new reading. Its passages are still cached.
            let mut again = c.alarm.clone();
            again.id.push_str("-again");
            again.value = again.value.map(|v| v + 0.1);
            repeat = probe_ttft(pipeline, slot, &again, style).await;
        }
        probes.push(CaseProbes {
            cold,
            prefix: Probe::of(tr.first.as_ref().map(|o| o.ttft_ms)),
            repeat,
        });
        if progress {
            eprint!("\reval {}/{} {:<40}", i + 1, cases.len(), c.case);
        }
    }
    if progress {
        eprintln!();
    }
    for v in [&mut prompt, &mut gen, &mut lat, &mut tps] {
        v.sort_by(f64::total_cmp);
    }
    let scores = score(&outcomes);
    let covered = score(&covered);
    FullReport {
        model: pipeline.model.info.name.clone(),
        style: format!("{style:?}"),
        cases: cases.len(),
        retrieval_hit_at_3: hit3 as f64 / n,
        json_valid_rate: scores.json_valid_rate,
        empty_summaries: empty,
        full_rate: scores.full.cases as f64 / n,
        degraded_rate: (scores.degraded.cases + scores.triage.cases) as f64 / n,
        passages_rate: scores.passages.cases as f64 / n,
        fell_back_to_passages: scores.passages.cases,
        grounded_mean: scores.grounded_mean,
        causes_dropped: scores.causes_dropped,
        keyword_hit_rate: scores.full.keyword_hit_rate,
        keyword_recall: scores.full.keyword_recall,
        degraded: scores.degraded,
        passages: scores.passages,
        triage: (scores.triage.cases > 0).then_some(scores.triage),
        accuracy: scores.accuracy,
        coverage: crate::measure::coverage::CoverageReport::of(&judged),
        breakdown: crate::measure::coverage::Breakdown::of(&judged, &[]),
        covered_keyword_hit_rate: covered.full.keyword_hit_rate,
        covered_accuracy: covered.accuracy,
        prompt_tokens_p50: percentile(&prompt, 0.5),
        prompt_tokens_max: prompt.last().copied().unwrap_or(0.0),
        generated_tokens_mean: gen.iter().sum::<f64>() / gen.len().max(1) as f64,
        prefix_tokens,
        ttft: crate::measure::ttft::stats(&probes),
        latency_ms_p50: percentile(&lat, 0.5),
        latency_ms_p90: percentile(&lat, 0.9),
        latency_ms_p99: percentile(&lat, 0.99),
        latency_ms_max: lat.last().copied().unwrap_or(0.0),
        gen_tokens_per_s_p50: percentile(&tps, 0.5),
    }
}

/// One answer mode of a side-by-side run (`eval --answer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnswerMode {
    pub answer: crate::config::Answer,
    /// Where a chosen answer's summary comes from; None: as the config says.
    pub summary: Option<crate::config::Summary>,
}

impl AnswerMode {
    /// The modes `--answer` and `--summary` name: each answer, and a chosen
    /// one once per summary place (a written answer always writes its
    /// summary first).
    pub fn list(answers: &[String], summary: &[String]) -> Vec<AnswerMode> {
        let mut out = Vec::new();
        for a in answers {
            let Some(answer) = crate::config::Answer::parse(a) else {
                continue;
            };
            let places: Vec<Option<crate::config::Summary>> = match (answer, summary.is_empty()) {
                (crate::config::Answer::Chosen, false) => summary
                    .iter()
                    .filter_map(|s| crate::config::Summary::parse(s))
                    .map(Some)
                    .collect(),
                _ => vec![None],
            };
            for summary in places {
                let m = AnswerMode { answer, summary };
                if !out.contains(&m) {
                    out.push(m);
                }
            }
        }
        out
    }

    pub fn name(&self) -> String {
        match self.summary {
            Some(s) => format!("{}, summary {}", self.answer.as_str(), s.as_str()),
            None => self.answer.as_str().to_string(),
        }
    }
}

/// Phrases of filler a summary should not spend the board's time on: they
/// tell the engineer nothing about this alarm.
pub const FILLER: [&str; 8] = [
    "联系技术支持",
    "如果问题持续",
    "如问题持续",
    "请联系",
    "contact technical support",
    "contact the manufacturer",
    "if the problem persists",
    "if the issue persists",
];

/// True if a summary holds one of `FILLER`.
pub fn has_filler(summary: &str) -> bool {
    let s = summary.to_lowercase();
    FILLER.iter().any(|f| s.contains(f))
}

/// What one mode of a side-by-side run measured, medians over the cases.
#[derive(Debug, Clone, Serialize)]
pub struct AnswerStats {
    pub mode: String,
    /// Tokens the model chose per diagnosis (sampled or at a branch point).
    pub chosen_tokens_p50: f64,
    /// Answer tokens fed in batches, not chosen.
    pub fed_tokens_p50: f64,
    /// Prompt tokens read per alarm (not found in the KV cache).
    pub prompt_read_tokens_p50: f64,
    pub generation_ms_p50: f64,
    pub ttft_ms_p50: f64,
    pub latency_ms_p50: f64,
    pub latency_ms_p90: f64,
    /// Share of model answers (mode full) naming an expected cause.
    pub keyword_hit_rate: Option<f64>,
    pub keyword_recall: Option<f64>,
    /// Share of all cases answered in full, validly, naming an expected cause.
    pub accuracy: f64,
    pub grounded_mean: Option<f64>,
    /// Answers replaced by the passages' items (mode "passages").
    pub passages_fallbacks: usize,
    pub degraded: usize,
    pub json_valid_rate: f64,
    /// Share of answers whose text as the model read it back (the context
    /// of its choices, `GenOutput::seen`) is one JSON object.
    pub seen_json_valid_rate: f64,
    /// Chosen answers that were not the manuals' items (must be 0).
    pub choice_defects: u64,
    /// Of the published causes and actions, the share that are manual items
    /// with a source.
    pub items_with_source: f64,
    /// The summary: its tokens, the share naming an expected cause, and the
    /// share with filler (`FILLER`).
    pub summary_tokens_p50: f64,
    pub summary_keyword_rate: f64,
    pub summary_filler_rate: f64,
    /// Of the full answers with causes, the share whose summary names the
    /// top-ranked cause, and the share naming another one instead
    /// (`grounding::named_cause`).
    pub summary_names_top_rate: f64,
    pub summary_names_other_rate: f64,
    /// Per-alarm latency on a Cortex-A72 projected from this run's token
    /// counts: (prompt read + fed) / 6 + chosen / 3.5 seconds, the A72's
    /// prompt and generation rates for a 1.5B Q4_K_M model (docs/measurements.md).
    pub a72_projected_s_p50: f64,
}

/// Modes side by side, and the first mode's figures over the last's.
#[derive(Debug, Serialize)]
pub struct AnswersReport {
    pub model: String,
    pub cases: usize,
    pub modes: Vec<AnswerStats>,
    /// First mode / last mode (e.g. chosen / written).
    pub chosen_tokens_ratio: f64,
    pub generation_ms_ratio: f64,
    pub latency_ms_ratio: f64,
    pub a72_projected_ratio: f64,
}

/// The A72's rates for the projection. The A72 has no dot-product
/// instructions, which llama.cpp's fast ARM kernels need, so plan for about
/// 6 prompt and 3.5 generated tokens/s for a 1.5-1.7B Q4_K_M; a Raspberry
/// Pi 4's (4x A72 at 1.5-1.8 GHz) published figures put the best case near
/// 10 and 4 (docs/measurements.md, "The current figures in detail").
pub const A72_PROMPT_TPS: f64 = 6.0;
pub const A72_GEN_TPS: f64 = 3.5;

/// Seconds one alarm takes on the A72 at those rates: the prompt tokens it
/// reads and the answer tokens fed in batches at the prompt rate, the
/// tokens the model chooses at the generation rate.
pub fn a72_projected_s(read: f64, fed: f64, chosen: f64) -> f64 {
    (read + fed) / A72_PROMPT_TPS + chosen / A72_GEN_TPS
}

#[derive(Default)]
struct ModeSamples {
    chosen: Vec<f64>,
    fed: Vec<f64>,
    read: Vec<f64>,
    gen_ms: Vec<f64>,
    ttft: Vec<f64>,
    lat: Vec<f64>,
    a72: Vec<f64>,
    summary_tokens: Vec<f64>,
    summary_kw: usize,
    filler: usize,
    ranked: usize,
    names_top: usize,
    names_other: usize,
    items: usize,
    sourced: usize,
    answers: usize,
    seen_valid: usize,
    outcomes: Vec<Outcome>,
}

/// Runs every case through every mode, in turn (the order rotating from
/// case to case), each from the static prefix alone (as in the daemon).
pub async fn run_answers(
    pipeline: &crate::pipeline::Pipeline,
    slot: &mut crate::llm::Slot,
    cases: &[Case],
    modes: &[AnswerMode],
    progress: bool,
    examples: Option<&OwnSetOut>,
) -> AnswersReport {
    let pipes: Vec<crate::pipeline::Pipeline> = modes
        .iter()
        .map(|m| {
            let mut c = (*pipeline.cfg).clone();
            c.llm.answer = m.answer;
            if let Some(s) = m.summary {
                c.llm.summary = s;
            }
            crate::pipeline::Pipeline {
                cfg: Arc::new(c),
                index: pipeline.index.clone(),
                model: pipeline.model.clone(),
                counters: Arc::new(crate::pipeline::Counters::default()),
                examples: pipeline.examples.clone(),
            }
        })
        .collect();
    let prefix_tokens = pipeline.model.static_prefix_tokens();
    let mut acc: Vec<ModeSamples> = modes.iter().map(|_| ModeSamples::default()).collect();
    for (i, c) in cases.iter().enumerate() {
        for j in 0..modes.len() {
            let k = (i + j) % modes.len();
            slot.keep_cache(prefix_tokens, false).await;
            let own = examples.map(|e| with_examples(&pipes[k], Some(e.of(c).clone())));
            let t = std::time::Instant::now();
            let tr = own
                .as_ref()
                .unwrap_or(&pipes[k])
                .diagnose_traced(slot, &c.alarm, crate::llm::Style::Schema)
                .await;
            let s = &mut acc[k];
            s.lat.push(t.elapsed().as_secs_f64() * 1e3);
            if let Some(out) = &tr.first {
                let read = f64::from(out.prompt_tokens.saturating_sub(out.reused_tokens));
                s.chosen.push(f64::from(out.generated_tokens));
                s.fed.push(f64::from(out.fed_tokens));
                s.read.push(read);
                s.gen_ms.push(out.generation_ms);
                s.ttft.push(out.ttft_ms);
                s.answers += 1;
                if seen_is_json(&out.seen) {
                    s.seen_valid += 1;
                }
                s.a72.push(a72_projected_s(
                    read,
                    f64::from(out.fed_tokens),
                    f64::from(out.generated_tokens),
                ));
            }
            let d = &tr.diagnosis;
            if d.mode == crate::diagnosis::Mode::Full {
                s.summary_tokens
                    .push(pipeline.model.count_tokens(&d.summary) as f64);
                if keyword_hits(&d.summary, &c.keywords) > 0 {
                    s.summary_kw += 1;
                }
                if has_filler(&d.summary) {
                    s.filler += 1;
                }
                if !d.probable_causes.is_empty() {
                    let causes: Vec<&str> =
                        d.probable_causes.iter().map(|c| c.cause.as_str()).collect();
                    s.ranked += 1;
                    match crate::grounding::named_cause(&d.summary, &causes) {
                        Some(0) => s.names_top += 1,
                        Some(_) => s.names_other += 1,
                        None => {}
                    }
                }
            }
            s.items += d.probable_causes.len() + d.actions.len();
            s.sourced += d
                .probable_causes
                .iter()
                .filter(|c| c.source.is_some())
                .count()
                + d.action_sources.len();
            s.outcomes.push(outcome(&tr, &c.keywords));
        }
        if progress {
            eprint!("\reval {}/{} {:<40}", i + 1, cases.len(), c.case);
        }
    }
    if progress {
        eprintln!();
    }
    let stats: Vec<AnswerStats> = acc
        .iter_mut()
        .zip(modes)
        .zip(&pipes)
        .map(|((s, m), p)| {
            for v in [
                &mut s.chosen,
                &mut s.fed,
                &mut s.read,
                &mut s.gen_ms,
                &mut s.ttft,
                &mut s.lat,
                &mut s.a72,
                &mut s.summary_tokens,
            ] {
                v.sort_by(f64::total_cmp);
            }
            let sc = score(&s.outcomes);
            let full = sc.full.cases.max(1) as f64;
            AnswerStats {
                mode: m.name(),
                chosen_tokens_p50: percentile(&s.chosen, 0.5),
                fed_tokens_p50: percentile(&s.fed, 0.5),
                prompt_read_tokens_p50: percentile(&s.read, 0.5),
                generation_ms_p50: percentile(&s.gen_ms, 0.5),
                ttft_ms_p50: percentile(&s.ttft, 0.5),
                latency_ms_p50: percentile(&s.lat, 0.5),
                latency_ms_p90: percentile(&s.lat, 0.9),
                keyword_hit_rate: sc.full.keyword_hit_rate,
                keyword_recall: sc.full.keyword_recall,
                accuracy: sc.accuracy,
                grounded_mean: sc.grounded_mean,
                passages_fallbacks: sc.passages.cases,
                degraded: sc.degraded.cases,
                json_valid_rate: sc.json_valid_rate,
                seen_json_valid_rate: s.seen_valid as f64 / s.answers.max(1) as f64,
                choice_defects: p
                    .counters
                    .choice_defects
                    .load(std::sync::atomic::Ordering::Relaxed),
                items_with_source: s.sourced as f64 / s.items.max(1) as f64,
                summary_tokens_p50: percentile(&s.summary_tokens, 0.5),
                summary_keyword_rate: s.summary_kw as f64 / full,
                summary_filler_rate: s.filler as f64 / full,
                summary_names_top_rate: s.names_top as f64 / s.ranked.max(1) as f64,
                summary_names_other_rate: s.names_other as f64 / s.ranked.max(1) as f64,
                a72_projected_s_p50: percentile(&s.a72, 0.5),
            }
        })
        .collect();
    let ratio = |f: fn(&AnswerStats) -> f64| match (stats.first(), stats.last()) {
        (Some(a), Some(b)) if f(b) > 0.0 => (f(a) / f(b) * 1000.0).round() / 1000.0,
        _ => 0.0,
    };
    AnswersReport {
        model: pipeline.model.info.name.clone(),
        cases: cases.len(),
        chosen_tokens_ratio: ratio(|s| s.chosen_tokens_p50),
        generation_ms_ratio: ratio(|s| s.generation_ms_p50),
        latency_ms_ratio: ratio(|s| s.latency_ms_p50),
        a72_projected_ratio: ratio(|s| s.a72_projected_s_p50),
        modes: stats,
    }
}
