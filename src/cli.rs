//! The command line: clap definitions and the one-shot commands (diagnose,
//! index build, query, check-config). The daemon itself is `daemon::run`.
//!
//! Commands print results on stdout and return typed errors; `main` maps
//! them to exit codes.

use std::io::Write;
use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Config;
use crate::retrieval::{Index, Query};

#[derive(Debug, Parser)]
#[command(
    name = "tidewatch",
    version,
    about = "Offline diagnosis daemon for marine equipment alarms",
    long_about = "tidewatch reads equipment alarms from MQTT ({prefix}/alarm/{equipment}), finds the \
relevant passages in an on-disk index of maintenance manuals, asks a small local LLM (llama.cpp, CPU) \
for a diagnosis and publishes it on {prefix}/diagnosis/{equipment}. Everything runs offline.",
    after_help = "Start with: tidewatch check-config --config /etc/tidewatch/tidewatch.toml\n\
The example config deploy/tidewatch.toml documents every key."
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the daemon: MQTT in, diagnoses out (systemd Type=notify aware)
    Run {
        /// Config file (TOML)
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Diagnose one alarm from a JSON file and print the diagnosis JSON; no MQTT
    Diagnose {
        #[arg(long, short)]
        config: PathBuf,
        /// Alarm JSON file, as it would arrive on {prefix}/alarm/{equipment}
        #[arg(long, short)]
        alarm: PathBuf,
    },
    /// Build or inspect the retrieval index
    Index {
        #[command(subcommand)]
        command: IndexCommand,
    },
    /// Search the index and print the best passages
    Query {
        /// Index file built by `tidewatch index build`
        #[arg(long, short)]
        index: PathBuf,
        /// How many passages to print
        #[arg(long, short = 'k', default_value_t = 3)]
        top_k: usize,
        /// Print a JSON array of hits (doc, section, score, text)
        #[arg(long)]
        json: bool,
        /// Query text: an alarm code, words, or an operator's message in any language
        #[arg(required = true, num_args = 1..)]
        text: Vec<String>,
    },
    /// Measure accuracy on labeled alarms (knowledge/eval/alarms.jsonl)
    ///
    /// With --retrieval: retrieval only (hit@1, hit@3, misses per class), needs --index.
    /// Otherwise: the whole pipeline with the config's model (JSON validity, cause-keyword
    /// hit rate, degraded rate, TTFT and latency distribution), needs --config.
    Eval {
        #[arg(long, short)]
        config: Option<PathBuf>,
        /// Labeled cases, one JSON object per line
        #[arg(long)]
        cases: PathBuf,
        /// Retrieval only: no model
        #[arg(long)]
        retrieval: bool,
        /// Prompts only: token counts of every case's prompt (prefix, per-alarm
        /// suffix, passages kept); loads the model but generates nothing
        #[arg(long, conflicts_with = "retrieval")]
        prompts: bool,
        /// Index for --retrieval (default: the config's knowledge.index)
        #[arg(long, short)]
        index: Option<PathBuf>,
        /// Only the first N cases
        #[arg(long, value_parser = usize_in(1, usize::MAX as u64))]
        limit: Option<usize>,
        /// Output style: schema (fixed JSON parts batched, values sampled) or
        /// grammar (the whole JSON sampled under a GBNF grammar; the reference)
        #[arg(long, default_value = "schema", value_parser = ["schema", "grammar"])]
        style: String,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
        /// Use this model instead of the config's llm.model
        #[arg(long)]
        model: Option<PathBuf>,
        /// Generation speed instead of accuracy: every 3rd case diagnosed with
        /// speculative decoding off, then on (the config's draft settings, or
        /// the defaults when llm.speculative is off), from the same cache
        #[arg(long, conflicts_with_all = ["retrieval", "prompts", "interleaved"])]
        speculation: bool,
        /// Prompt cache instead of accuracy: TTFT of N alarms cold, then the
        /// same alarms repeated with a new reading after 11 others
        #[arg(long, value_name = "N", value_parser = usize_in(1, 1000), conflicts_with_all = ["retrieval", "prompts"])]
        interleaved: Option<usize>,
    },
    /// Measure speed and memory on this machine (and accuracy with --decide)
    ///
    /// Every combination of --model x --threads x --batch x --ctx runs in its own
    /// process: pp/tg throughput as llama-bench measures them, TTFT on real RAG prompts
    /// (cold and on a prefix hit), alarm-to-diagnosis latency and peak RSS (anonymous and
    /// file-backed). With --retrieval: the index at 10k passages instead.
    Bench(BenchArgs),
    /// Validate a config file, and report the model and index it names
    CheckConfig {
        #[arg(long, short)]
        config: PathBuf,
        /// Only check the file itself; do not open the model or the index
        #[arg(long)]
        offline: bool,
    },
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Config file; its [llm] values are the defaults for every list below
    #[arg(long, short)]
    pub config: Option<PathBuf>,
    /// Models to compare (default: the config's llm.model)
    #[arg(long, num_args = 1.., value_delimiter = ',')]
    pub model: Vec<PathBuf>,
    /// Thread counts, e.g. 2,4 (1..=64, as llm.threads)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=64))]
    pub threads: Vec<u32>,
    /// Batch sizes (n_batch; n_ubatch is min(batch, 512) as in llama-bench; 16..=8192, as llm.batch)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(16..=8192))]
    pub batch: Vec<u32>,
    /// Context sizes (512..=32768, as llm.ctx)
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(512..=32768))]
    pub ctx: Vec<u32>,
    /// Prompt tokens per throughput run (llama-bench -p)
    #[arg(long, default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=32768))]
    pub pp: u32,
    /// Generated tokens per throughput run (llama-bench -n)
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub tg: u32,
    /// Timed repetitions after one warm-up (llama-bench -r)
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=100))]
    pub reps: u32,
    /// Eval alarms used as real RAG prompts for TTFT and latency (0 to skip)
    #[arg(long, default_value_t = 3, value_parser = usize_in(0, 10_000))]
    pub rag_cases: usize,
    /// Labeled alarms for RAG prompts and --decide
    #[arg(long, default_value = "knowledge/eval/alarms.jsonl")]
    pub cases: PathBuf,
    /// Device memory, e.g. 4G
    #[arg(long, default_value = "4G")]
    pub memory_budget: String,
    /// Memory kept for the OS, broker and page cache
    #[arg(long, default_value = "1G")]
    pub os_reserve: String,
    /// Also measure accuracy per model and recommend a configuration
    #[arg(long)]
    pub decide: bool,
    /// Eval alarms per model for --decide
    #[arg(long, default_value_t = 12, value_parser = usize_in(1, 10_000))]
    pub eval_cases: usize,
    /// Accuracy margin for --decide: keep configurations within this of the best (0..=1)
    #[arg(long, default_value_t = 0.05, value_parser = fraction, allow_negative_numbers = true)]
    pub margin: f64,
    /// Fail (exit 1) if a daemon job's wall time exceeds llama.cpp's own
    /// decode time (llama_perf) by more than this many percent: the CI
    /// regression check on tidewatch's own per-token work
    #[arg(long, value_name = "PERCENT", value_parser = percent, allow_negative_numbers = true)]
    pub max_overhead: Option<f64>,
    /// Retrieval benchmark instead of the model
    #[arg(long)]
    pub retrieval: bool,
    /// Passages in the generated index for --retrieval
    #[arg(long, default_value_t = 10_000, value_parser = usize_in(1, 1_000_000))]
    pub passages: usize,
    /// Knowledge folder for --retrieval
    #[arg(long, default_value = "knowledge")]
    pub knowledge: PathBuf,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
    /// Internal: run one combination (JSON) and print its result
    #[arg(long, hide = true)]
    pub worker: Option<String>,
}

/// A count within `lo..=hi`; clap names the option in the error.
fn usize_in(lo: u64, hi: u64) -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(lo..=hi)
}

/// A finite number in 0..=1.
fn fraction(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=1.0).contains(&v) {
        Ok(v)
    } else {
        Err(format!("must be 0..=1, got {s}"))
    }
}

/// A finite percentage, 0 or more.
fn percent(s: &str) -> Result<f64, String> {
    let v: f64 = s.parse().map_err(|e| format!("{e}"))?;
    if v.is_finite() && v >= 0.0 {
        Ok(v)
    } else {
        Err(format!(
            "must be a finite number of percent, 0 or more, got {s}"
        ))
    }
}

#[derive(Debug, Subcommand)]
pub enum IndexCommand {
    /// Chunk a knowledge folder of Markdown documents and write the index file
    Build {
        /// Folder of knowledge documents (*.md with front matter)
        #[arg(long, short)]
        knowledge: PathBuf,
        /// Output index file
        #[arg(long, short)]
        out: PathBuf,
    },
}

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Index(#[from] crate::retrieval::IndexError),
    #[error(transparent)]
    Daemon(#[from] crate::daemon::DaemonError),
    #[error("alarm file {path}: {reason}")]
    Alarm { path: PathBuf, reason: String },
    #[error(transparent)]
    Eval(#[from] crate::eval::EvalError),
    #[error(transparent)]
    Bench(#[from] crate::bench::BenchError),
    #[error("{0}")]
    Usage(String),
    #[error("{model}: daemon jobs take {overhead:.1}% longer than llama.cpp's own decode time (llama_perf), over the --max-overhead {max}%")]
    Overhead {
        model: String,
        overhead: f64,
        max: f64,
    },
    #[error("--top-k must be 1..=50, got {0}")]
    TopK(usize),
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
}

impl CliError {
    /// True when retrying cannot help: config, model or index problems.
    pub fn is_config(&self) -> bool {
        use crate::daemon::DaemonError;
        use crate::llm::LlmError;
        matches!(
            self,
            CliError::Config(_)
                | CliError::Index(_)
                | CliError::Daemon(DaemonError::Index(_))
                | CliError::Daemon(DaemonError::Llm(LlmError::Load { .. }))
                | CliError::Daemon(DaemonError::Mqtt(crate::mqtt::MqttError::Tls { .. }))
        )
    }
}

pub fn index_build(knowledge: &std::path::Path, out: &std::path::Path) -> Result<(), CliError> {
    let t = std::time::Instant::now();
    let (docs, passages, bytes) = crate::retrieval::build_file(knowledge, out)?;
    eprintln!(
        "indexed {docs} documents into {passages} passages: {} ({bytes} bytes, {:.0} ms)",
        out.display(),
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

pub fn query(
    index: &std::path::Path,
    top_k: usize,
    json: bool,
    text: &[String],
) -> Result<(), CliError> {
    if !(1..=50).contains(&top_k) {
        return Err(CliError::TopK(top_k));
    }
    let idx = Index::open(index)?;
    let hits = idx.search(&Query::from_text(&text.join(" ")), top_k)?;
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<serde_json::Value> = hits
            .iter()
            .map(|h| serde_json::json!({"doc": h.doc, "section": h.section, "score": h.score, "text": h.text}))
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(v))?;
    } else {
        for (i, h) in hits.iter().enumerate() {
            writeln!(
                out,
                "{}. {} / {}  (score {:.2})\n   {}\n",
                i + 1,
                h.doc,
                h.section,
                h.score,
                h.text.replace('\n', "\n   ")
            )?;
        }
        if hits.is_empty() {
            writeln!(out, "no passage matches")?;
        }
    }
    Ok(())
}

pub async fn diagnose(cfg: Config, alarm_path: &std::path::Path) -> Result<(), CliError> {
    let bytes = std::fs::read(alarm_path).map_err(|e| CliError::Alarm {
        path: alarm_path.to_owned(),
        reason: e.to_string(),
    })?;
    let alarm = crate::alarm::parse(&bytes, None, cfg.mqtt.max_alarm_bytes).map_err(|e| {
        CliError::Alarm {
            path: alarm_path.to_owned(),
            reason: e.to_string(),
        }
    })?;
    let (pipeline, mut slots) = crate::daemon::load_pipeline(cfg, true).await?;
    let d = pipeline.diagnose(&mut slots[0], &alarm).await;
    let mut out = std::io::stdout().lock();
    print_json(&mut out, &d)?;
    Ok(())
}

pub fn check_config(cfg: &Config, offline: bool) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "config {}: ok", cfg.path.display())?;
    writeln!(
        out,
        "  broker {}:{} client_id {} topics {}/alarm/+ -> {}/diagnosis/<equipment>",
        cfg.mqtt.host,
        cfg.mqtt.port,
        cfg.mqtt.client_id,
        cfg.mqtt.topic_prefix,
        cfg.mqtt.topic_prefix
    )?;
    writeln!(
        out,
        "  llm threads {} ctx {} batch {} max_tokens {} prompt_budget {} passage_items {} slots {}",
        cfg.llm.threads,
        cfg.llm.ctx,
        cfg.llm.batch,
        cfg.llm.max_tokens,
        cfg.llm.prompt_budget,
        cfg.llm.passage_items,
        cfg.llm.slots
    )?;
    if offline {
        return Ok(());
    }
    let idx = Index::open(&cfg.knowledge.index)?;
    writeln!(
        out,
        "  index {}: {} documents, {} passages, {} bytes",
        cfg.knowledge.index.display(),
        idx.n_docs(),
        idx.n_passages(),
        idx.byte_len()
    )?;
    let model = crate::llm::Model::load(&cfg.llm.model, &cfg.llm)
        .map_err(crate::daemon::DaemonError::from)?;
    let i = &model.info;
    writeln!(
        out,
        "  model {}: architecture {} ({}), {:.2}B params, {} MiB, chat template {}{}",
        cfg.llm.model.display(),
        i.architecture,
        i.description,
        i.params as f64 / 1e9,
        i.file_bytes >> 20,
        i.template_family
            .unwrap_or("unknown (hand-written chatml used)"),
        if i.thinking_template {
            ", thinking mode (disabled)"
        } else {
            ""
        }
    )?;
    writeln!(
        out,
        "  tidewatch {}, llama.cpp from llama-cpp-sys-2 0.1.160: {}",
        env!("CARGO_PKG_VERSION"),
        i.llama_cpp
    )?;
    Ok(())
}

pub fn eval_retrieval(
    index: &std::path::Path,
    cases: &std::path::Path,
    limit: Option<usize>,
    json: bool,
) -> Result<(), CliError> {
    let idx = Index::open(index)?;
    let mut cs = crate::eval::load_cases(cases)?;
    cs.truncate(limit.unwrap_or(usize::MAX));
    let r = crate::eval::run_retrieval(&idx, &cs)?;
    let mut out = std::io::stdout().lock();
    if json {
        print_json(&mut out, &r)?;
        return Ok(());
    }
    writeln!(
        out,
        "retrieval on {} cases: hit@1 {:.3}  hit@3 {:.3}  query p50 {:.0} us  p99 {:.0} us",
        r.cases, r.hit_at_1, r.hit_at_3, r.p50_us, r.p99_us
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
    Ok(())
}

/// What `eval_full` measures.
pub struct EvalRun<'a> {
    pub model: Option<PathBuf>,
    pub cases: &'a std::path::Path,
    pub limit: Option<usize>,
    pub style: &'a str,
    pub json: bool,
    /// Prompt token counts only; no generation.
    pub prompts: bool,
    pub speculation: bool,
    pub interleaved: Option<usize>,
}

pub async fn eval_full(mut cfg: Config, run: EvalRun<'_>) -> Result<(), CliError> {
    let EvalRun {
        model,
        cases,
        limit,
        style,
        json,
        prompts,
        speculation,
        interleaved,
    } = run;
    let mut cs = crate::eval::load_cases(cases)?;
    cs.truncate(limit.unwrap_or(usize::MAX));
    if let Some(m) = model {
        cfg.llm.model = m;
    }
    let (pipeline, mut slots) = crate::daemon::load_pipeline(cfg, false).await?;
    if prompts {
        let r = crate::eval::run_prompts(&pipeline, &cs);
        return print_report(&r, json);
    }
    let style = if style == "grammar" {
        crate::llm::Style::FullGrammar
    } else {
        crate::llm::Style::Schema
    };
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    if speculation {
        let lookup = pipeline.cfg.llm.lookup.unwrap_or(DEFAULT_LOOKUP);
        let r = crate::eval_speed::run_spec(
            &pipeline,
            &mut slots[0],
            &cs,
            crate::eval::TTFT_EVERY,
            lookup,
            progress,
        )
        .await;
        return print_report(&r, json);
    }
    if let Some(n) = interleaved {
        let r = crate::eval_speed::run_interleaved(&pipeline, &mut slots[0], &cs, n, 11, progress)
            .await;
        return print_report(&r, json);
    }
    let r = crate::eval::run_full(&pipeline, &mut slots[0], &cs, style, progress).await;
    print_report(&r, json)
}

/// What `eval --speculation` compares against when the config has it off.
const DEFAULT_LOOKUP: crate::llm::lookup::Lookup = crate::llm::lookup::Lookup {
    draft_max: 4,
    ngram_min: 2,
    ngram_max: 4,
};

/// A report as JSON, or as one `key value` line per field.
fn print_report<T: serde::Serialize>(r: &T, json: bool) -> Result<(), CliError> {
    let mut out = std::io::stdout().lock();
    if json {
        print_json(&mut out, r)?;
    } else {
        let v = serde_json::to_value(r).unwrap_or_default();
        if let Some(m) = v.as_object() {
            for (k, v) in m {
                writeln!(out, "{k:<24} {v}")?;
            }
        }
    }
    Ok(())
}

pub fn bench_retrieval(a: &BenchArgs) -> Result<(), CliError> {
    let cases = crate::eval::load_cases(&a.cases)?;
    let work = std::env::temp_dir().join(format!("tidewatch-bench-{}", std::process::id()));
    let r = crate::bench::retrieval(&a.knowledge, &cases, a.passages, &work);
    let _ = std::fs::remove_dir_all(&work);
    let r = r?;
    let mut out = std::io::stdout().lock();
    if a.json {
        print_json(&mut out, &r)?;
    } else {
        writeln!(
            out,
            "retrieval at {} passages: build {:.0} ms, file {} bytes ({:.0} B/passage, {:.2}x raw text), open {:.2} ms, query p50 {:.0} us p99 {:.0} us ({} queries)",
            r.passages, r.build_ms, r.file_bytes, r.bytes_per_passage, r.size_over_raw, r.open_ms, r.query_p50_us, r.query_p99_us, r.queries
        )?;
    }
    Ok(())
}

fn cartesian(a: &BenchArgs, cfg: &Config) -> Vec<crate::bench::Combo> {
    let or = |v: &Vec<u32>, d: u32| if v.is_empty() { vec![d] } else { v.clone() };
    let models = if a.model.is_empty() {
        vec![cfg.llm.model.clone()]
    } else {
        a.model.clone()
    };
    let mut out = Vec::new();
    for m in &models {
        for t in or(&a.threads, cfg.llm.threads) {
            for b in or(&a.batch, cfg.llm.batch) {
                for c in or(&a.ctx, cfg.llm.ctx) {
                    out.push(crate::bench::Combo {
                        model: m.clone(),
                        threads: t,
                        batch: b,
                        ctx: c,
                        pp: a.pp,
                        tg: a.tg,
                        reps: a.reps,
                        rag_cases: a.rag_cases,
                    });
                }
            }
        }
    }
    out
}

fn budget_mib(a: &BenchArgs) -> Result<f64, CliError> {
    let total = crate::bench::parse_mib(&a.memory_budget).ok_or_else(|| {
        CliError::Usage(format!(
            "--memory-budget must look like 4G or 3500M, got {:?}",
            a.memory_budget
        ))
    })?;
    let reserve = crate::bench::parse_mib(&a.os_reserve).ok_or_else(|| {
        CliError::Usage(format!(
            "--os-reserve must look like 1G or 800M, got {:?}",
            a.os_reserve
        ))
    })?;
    Ok(total - reserve)
}

/// The child side: one combination, JSON on stdout.
pub async fn bench_worker(cfg: Config, a: &BenchArgs, spec: &str) -> Result<(), CliError> {
    let combo: crate::bench::Combo = serde_json::from_str(spec)
        .map_err(|e| CliError::Usage(format!("bad --worker spec: {e}")))?;
    let cases = if combo.rag_cases > 0 {
        crate::eval::load_cases(&a.cases)?
    } else {
        Vec::new()
    };
    let r = crate::bench::worker(&cfg, &combo, &cases, budget_mib(a)?).await?;
    writeln!(
        std::io::stdout().lock(),
        "{}",
        serde_json::to_string(&r).unwrap_or_default()
    )?;
    Ok(())
}

pub fn bench_models(
    cfg_path: &std::path::Path,
    cfg: &Config,
    a: &BenchArgs,
) -> Result<(), CliError> {
    let combos = cartesian(a, cfg);
    // Before any run: a combination the daemon would refuse is an error
    // here, not a measurement (and never a recommendation).
    let cfg_text = std::fs::read_to_string(cfg_path)
        .map_err(|e| CliError::Usage(format!("config {}: {e}", cfg_path.display())))?;
    for c in &combos {
        crate::bench::check_configurable(&cfg_text, cfg_path, c)?;
    }
    let exe = std::env::current_exe()?;
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut results = Vec::new();
    for (i, c) in combos.iter().enumerate() {
        let what = format!(
            "{} threads={} batch={} ctx={}",
            c.model.display(),
            c.threads,
            c.batch,
            c.ctx
        );
        if tty {
            eprint!("\r\x1b[2K[{}/{}] {what}", i + 1, combos.len());
        } else {
            eprintln!("bench [{}/{}] {what}", i + 1, combos.len());
        }
        let spec = serde_json::to_string(c).unwrap_or_default();
        let out = std::process::Command::new(&exe)
            .arg("bench")
            .arg("--config")
            .arg(cfg_path)
            .arg("--cases")
            .arg(&a.cases)
            .arg("--memory-budget")
            .arg(&a.memory_budget)
            .arg("--os-reserve")
            .arg(&a.os_reserve)
            .arg("--worker")
            .arg(&spec)
            .stderr(std::process::Stdio::piped())
            .output()?;
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            let last = err
                .lines()
                .rev()
                .find(|l| !l.trim().is_empty())
                .unwrap_or("")
                .to_string();
            return Err(crate::bench::BenchError::Worker { what, reason: last }.into());
        }
        let r: crate::bench::ComboResult =
            serde_json::from_slice(&out.stdout).map_err(|e| crate::bench::BenchError::Worker {
                what: what.clone(),
                reason: e.to_string(),
            })?;
        results.push(r);
    }
    if tty {
        eprintln!();
    }
    let mut decision = None;
    if a.decide {
        let mut acc: std::collections::HashMap<PathBuf, f64> = std::collections::HashMap::new();
        for c in &combos {
            if acc.contains_key(&c.model) {
                continue;
            }
            eprintln!(
                "bench: accuracy of {} on {} eval alarms",
                c.model.display(),
                a.eval_cases
            );
            let out = std::process::Command::new(&exe)
                .args(["eval", "--json", "--config"])
                .arg(cfg_path)
                .arg("--cases")
                .arg(&a.cases)
                .arg("--limit")
                .arg(a.eval_cases.to_string())
                .arg("--model")
                .arg(&c.model)
                .stderr(std::process::Stdio::inherit())
                .output()?;
            let v: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| {
                crate::bench::BenchError::Worker {
                    what: format!("eval of {}", c.model.display()),
                    reason: e.to_string(),
                }
            })?;
            // Accuracy: the share of alarms answered in full, validly, naming
            // an expected cause (degraded answers are the manuals' text).
            let a = v["accuracy"]
                .as_f64()
                .ok_or_else(|| crate::bench::BenchError::Worker {
                    what: format!("eval of {}", c.model.display()),
                    reason: "its report has no accuracy".into(),
                })?;
            acc.insert(c.model.clone(), a);
        }
        for r in &mut results {
            r.accuracy = combos
                .iter()
                .find(|c| {
                    c.model
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        == Some(r.model.clone())
                })
                .and_then(|c| acc.get(&c.model).copied());
        }
        decision = Some(crate::bench::decide(&results, a.margin));
    }
    let mut out = std::io::stdout().lock();
    if a.json {
        if let Some(d) = decision {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"results": results, "decision": d})
                )
                .unwrap_or_default()
            )?;
        } else {
            print_json(&mut out, &results)?;
        }
        return check_overhead(&results, a.max_overhead);
    }
    write!(out, "{}", crate::bench::table(&results))?;
    for r in &results {
        writeln!(
            out,
            "overhead over llama_perf in daemon jobs ({}): {:+.1}%",
            r.model,
            r.gen_overhead * 100.0
        )?;
    }
    if let Some(d) = decision {
        writeln!(out)?;
        for r in &d.reasons {
            writeln!(out, "{r}")?;
        }
    }
    check_overhead(&results, a.max_overhead)
}

fn check_overhead(results: &[crate::bench::ComboResult], max: Option<f64>) -> Result<(), CliError> {
    match max.and_then(|m| crate::bench::over_overhead(results, m).map(|r| (r, m))) {
        Some((r, max)) => Err(CliError::Overhead {
            model: r.model.clone(),
            overhead: r.gen_overhead * 100.0,
            max,
        }),
        None => Ok(()),
    }
}

fn print_json(out: &mut impl Write, v: &impl serde::Serialize) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_default()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, String> {
        Cli::try_parse_from(std::iter::once("tidewatch").chain(args.iter().copied()))
            .map_err(|e| e.to_string())
    }

    // Issue J item 4: `bench --batch 0` panicked in `chunks(0)`; every number
    // bench and eval take is checked where it is parsed, naming the option.
    #[test]
    fn invalid_numbers_are_errors_naming_the_option() {
        let bad: &[(&[&str], &str)] = &[
            (&["bench", "--batch", "0"], "--batch"),
            (&["bench", "--batch", "512,0"], "--batch"),
            (&["bench", "--threads", "0"], "--threads"),
            (&["bench", "--threads", "65"], "--threads"),
            (&["bench", "--ctx", "0"], "--ctx"),
            (&["bench", "--pp", "0"], "--pp"),
            (&["bench", "--tg", "0"], "--tg"),
            (&["bench", "--reps", "0"], "--reps"),
            (&["bench", "--eval-cases", "0"], "--eval-cases"),
            (&["bench", "--passages", "0"], "--passages"),
            (&["bench", "--margin", "-0.1"], "--margin"),
            (&["bench", "--margin", "NaN"], "--margin"),
            (&["bench", "--max-overhead", "-1"], "--max-overhead"),
            (&["eval", "--cases", "c.jsonl", "--limit", "0"], "--limit"),
        ];
        for (args, option) in bad {
            match parse(args) {
                Ok(_) => panic!("{args:?} was accepted"),
                Err(e) => assert!(e.contains(option), "{args:?}: {e}"),
            }
        }
        assert!(parse(&[
            "bench",
            "--batch",
            "16,8192",
            "--ctx",
            "2048",
            "--rag-cases",
            "0"
        ])
        .is_ok());
        assert!(parse(&["bench", "--margin", "0", "--max-overhead", "3"]).is_ok());
    }
}
