//! `tidewatch eval`: accuracy on labeled alarms (retrieval only, or the
//! whole pipeline), prompt sizes, the generation-speed comparisons and the
//! prompt cache's tiers.

use std::io::Write;
use std::path::PathBuf;

use super::{print_json, print_report, CommandError};
use crate::cli::EvalArgs;
use crate::config::Config;
use crate::retrieval::Index;

/// The examples each case is judged by, from the labelled alarms at `path`
/// (`OwnSetOut`: a case they hold is judged without its own set).
fn own_set_out(
    path: &std::path::Path,
    cases: &[crate::cases::Case],
) -> Result<crate::measure::eval::OwnSetOut, CommandError> {
    let rows = crate::cases::load(path).map_err(crate::coverage::examples::ExamplesError::from)?;
    let e = crate::measure::eval::OwnSetOut::new(&rows, cases);
    if e.sets_left_out() > 0 {
        eprintln!(
            "{}: holds cases being measured; each is judged without its own set's examples ({} sets left out in turn)",
            path.display(),
            e.sets_left_out()
        );
    }
    Ok(e)
}

fn eval_retrieval(
    index: &std::path::Path,
    cases: &std::path::Path,
    limit: Option<usize>,
    examples: Option<&std::path::Path>,
    json: bool,
) -> Result<(), CommandError> {
    let idx = Index::open(index)?;
    let mut cs = crate::measure::eval::load_cases(cases)?;
    cs.truncate(limit.unwrap_or(usize::MAX));
    let examples = examples.map(|p| own_set_out(p, &cs)).transpose()?;
    let r = crate::measure::eval::run_retrieval(&idx, &cs, examples.as_ref())?;
    let mut out = std::io::stdout().lock();
    if json {
        print_json(&mut out, &r)?;
        return Ok(());
    }
    writeln!(
        out,
        "retrieval on {} cases ({} with a gold section): ranking hit@1 {:.3}  hit@3 {:.3}  in the prompt (all passes, top 3) {:.3}  query p50 {:.0} us  p99 {:.0} us",
        r.cases, r.with_gold, r.hit_at_1, r.hit_at_3, r.prompt_hit_at_3, r.p50_us, r.p99_us
    )?;
    writeln!(
        out,
        "{:<28} {:>5} {:>6} {:>6}",
        "class", "cases", "hit@1", "hit@3"
    )?;
    for (class, s) in &r.per_class {
        writeln!(
            out,
            "{:<28} {:>5} {:>6} {:>6}",
            class, s.cases, s.hit1, s.hit3
        )?;
    }
    for (class, s) in &r.per_class {
        for m in &s.misses {
            writeln!(out, "miss [{class}] {m}")?;
        }
    }
    for m in &r.prompt_misses {
        writeln!(out, "not in the prompt: {m}")?;
    }
    if r.unnamed_misses > 0 {
        writeln!(
            out,
            "held-out cases missed by the ranking or the prompt: {}, not named (a held-out case read is tuning)",
            r.unnamed_misses
        )?;
    }
    writeln!(
        out,
        "all retrieval passes p50 {:.0} us; coverage judgement p50 {:.0} us p99 {:.0} us (no model step)",
        r.passages_p50_us, r.coverage_p50_us, r.coverage_p99_us
    )?;
    write!(out, "{}", r.coverage.text())?;
    writeln!(out, "every covered case again, raised under a plant code:")?;
    write!(out, "{}", r.under_plant_codes.text())?;
    write!(out, "{}", r.breakdown.text())?;
    Ok(())
}

/// What `eval_full` measures.
struct EvalRun<'a> {
    pub model: Option<PathBuf>,
    pub cases: &'a std::path::Path,
    pub limit: Option<usize>,
    pub style: &'a str,
    pub json: bool,
    /// Prompt token counts only; no generation.
    pub prompts: bool,
    pub speculation: bool,
    pub interleaved: Option<usize>,
    /// `--tiers N`: the prompt cache's tiers on N cases.
    pub tiers: Option<usize>,
    /// Answer modes to compare side by side (`--answer`).
    pub answers: Vec<crate::measure::eval::AnswerMode>,
    pub summary_tokens: Option<u32>,
    /// Write each case's published diagnosis here (JSON lines).
    pub diagnoses: Option<PathBuf>,
    /// `--no-examples`: coverage without example alarms.
    pub no_examples: bool,
}

async fn eval_full(mut cfg: Config, run: EvalRun<'_>) -> Result<(), CommandError> {
    let EvalRun {
        model,
        cases,
        limit,
        style,
        json,
        prompts,
        speculation,
        interleaved,
        tiers,
        answers,
        summary_tokens,
        diagnoses,
        no_examples,
    } = run;
    let mut cs = crate::measure::eval::load_cases(cases)?;
    cs.truncate(limit.unwrap_or(usize::MAX));
    if let Some(m) = model {
        cfg.llm.model = m;
    }
    if let Some(n) = summary_tokens {
        cfg.llm.summary_tokens = n;
    }
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    if let Some(n) = tiers {
        // Its own slots, restarted between the tiers, in its own state dirs.
        let (index, model) = crate::load::index_and_model(&cfg).await?;
        let r = crate::measure::tiers::run_tiers(&cfg, index, model, &cs, n, progress).await?;
        let mut out = std::io::stdout().lock();
        if json {
            print_json(&mut out, &r)?;
        } else {
            write!(out, "{}", crate::measure::tiers::table(&r))?;
        }
        return Ok(());
    }
    let examples = match crate::load::examples_file(&cfg) {
        Some((path, _)) if !no_examples => Some(own_set_out(&path, &cs)?),
        _ => None,
    };
    let (mut pipeline, mut slots) = crate::load::pipeline(cfg, false).await?;
    if no_examples {
        pipeline.examples = None;
    }
    if prompts {
        let r = crate::measure::eval::run_prompts(&pipeline, &cs);
        return print_report(&r, json);
    }
    let style = if style == "grammar" {
        crate::llm::Style::FullGrammar
    } else {
        crate::llm::Style::Schema
    };
    if speculation {
        let lookup = pipeline
            .cfg
            .llm
            .lookup
            .unwrap_or(crate::measure::speculation::DEFAULT_LOOKUP);
        let r = crate::measure::speculation::run_spec(
            &pipeline,
            &mut slots[0],
            &cs,
            crate::measure::eval::TTFT_EVERY,
            lookup,
            progress,
        )
        .await;
        return print_report(&r, json);
    }
    if !answers.is_empty() {
        let r = crate::measure::eval::run_answers(
            &pipeline,
            &mut slots[0],
            &cs,
            &answers,
            progress,
            examples.as_ref(),
        )
        .await;
        return print_report(&r, json);
    }
    if let Some(n) = interleaved {
        let r = crate::measure::speculation::run_interleaved(
            &pipeline,
            &mut slots[0],
            &cs,
            n,
            11,
            progress,
        )
        .await;
        return print_report(&r, json);
    }
    let mut record = match &diagnoses {
        Some(p) => Some(std::io::BufWriter::new(std::fs::File::create(p)?)),
        None => None,
    };
    let r = crate::measure::eval::run_full(
        &pipeline,
        &mut slots[0],
        &cs,
        style,
        progress,
        record.as_mut().map(|w| w as &mut dyn std::io::Write),
        examples.as_ref(),
    )
    .await;
    if let Some(mut w) = record {
        std::io::Write::flush(&mut w)?;
    }
    print_report(&r, json)
}

/// What `eval --notes` replays, and how.
struct NotesRun<'a> {
    files: &'a [PathBuf],
    limit: Option<usize>,
    json: bool,
    /// The model answers; else retrieval alone (`--retrieval`).
    model: bool,
}

/// `eval --notes`: the histories in `files` replayed (`measure::notes`).
async fn eval_notes(cfg: Config, run: NotesRun<'_>) -> Result<(), CommandError> {
    let NotesRun {
        files,
        limit,
        json,
        model,
    } = run;
    let mut histories = Vec::new();
    for f in files {
        let (part, mut cases) =
            crate::measure::notes::load(f).map_err(|e| CommandError::Usage(e.to_string()))?;
        cases.truncate(limit.unwrap_or(usize::MAX));
        histories.push((part, cases));
    }
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let (pipeline, mut slots) = crate::load::pipeline(cfg, false).await?;
    let r = crate::measure::notes::run(&pipeline, &mut slots[0], &histories, model, progress).await;
    let mut out = std::io::stdout().lock();
    if json {
        print_json(&mut out, &r)?;
    } else {
        write!(out, "{}", r.text())?;
    }
    Ok(())
}

/// The shipped example alarms, found as the daemon finds them
/// (`cases::examples_candidates`).
fn shipped_examples(index: &std::path::Path) -> Result<PathBuf, CommandError> {
    let tried = crate::cases::examples_candidates(Some(index));
    tried.iter().find(|p| p.is_file()).cloned().ok_or_else(|| {
        CommandError::Usage(format!(
            "no --examples FILE given, and no example alarms at {}; give --examples or --no-examples (the source tree has knowledge/examples/alarms.jsonl)",
            tried
                .iter()
                .map(|p| p.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    })
}

/// Dispatches `eval` by its options: --retrieval needs an index (from
/// --index or the config), everything else a config.
pub fn run(a: EvalArgs) -> Result<(), CommandError> {
    if a.retrieval && a.notes.is_empty() {
        let index = match (a.index, &a.config) {
            (Some(i), _) => i,
            (None, Some(c)) => crate::config::load(c)?.knowledge.index,
            (None, None) => {
                return Err(CommandError::Usage(
                    "eval --retrieval needs --index FILE or --config FILE".into(),
                ))
            }
        };
        let cases = super::cases_file(a.cases, Some(&index))?;
        let examples = match (a.no_examples, a.examples) {
            (true, _) => None,
            (false, Some(e)) => Some(e),
            (false, None) => Some(shipped_examples(&index)?),
        };
        return eval_retrieval(&index, &cases, a.limit, examples.as_deref(), a.json);
    }
    let Some(config) = a.config else {
        return Err(CommandError::Usage(
            "eval needs --config FILE (or --retrieval --index FILE)".into(),
        ));
    };
    let mut cfg = crate::config::load(&config)?;
    if let Some(e) = a.examples {
        cfg.knowledge.examples = Some(e);
    }
    if a.tiers.is_some() && cfg.llm.prompt_cache_disk_mib == 0 {
        return Err(CommandError::Usage(format!(
            "{}: llm.prompt_cache_disk_mib is 0, so eval --tiers has no disk tier to measure",
            config.display()
        )));
    }
    crate::logging::init("warn");
    if !a.notes.is_empty() {
        let run = NotesRun {
            files: &a.notes,
            limit: a.limit,
            json: a.json,
            model: !a.retrieval,
        };
        return super::runtime()?.block_on(eval_notes(cfg, run));
    }
    let cases = super::cases_file(a.cases, Some(&cfg.knowledge.index))?;
    let run = EvalRun {
        model: a.model,
        cases: &cases,
        limit: a.limit,
        style: &a.style,
        json: a.json,
        prompts: a.prompts,
        speculation: a.speculation,
        interleaved: a.interleaved,
        tiers: a.tiers,
        answers: crate::measure::eval::AnswerMode::list(&a.answer, &a.summary),
        summary_tokens: a.summary_tokens,
        diagnoses: a.diagnoses,
        no_examples: a.no_examples,
    };
    super::runtime()?.block_on(eval_full(cfg, run))
}
