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
        /// Index for --retrieval (default: the config's knowledge.index)
        #[arg(long, short)]
        index: Option<PathBuf>,
        /// Only the first N cases
        #[arg(long)]
        limit: Option<usize>,
        /// Output style: schema (fixed JSON parts batched, values sampled) or
        /// grammar (the whole JSON sampled under a GBNF grammar; the reference)
        #[arg(long, default_value = "schema", value_parser = ["schema", "grammar"])]
        style: String,
        /// Print the report as JSON
        #[arg(long)]
        json: bool,
    },
    /// Validate a config file, and report the model and index it names
    CheckConfig {
        #[arg(long, short)]
        config: PathBuf,
        /// Only check the file itself; do not open the model or the index
        #[arg(long)]
        offline: bool,
    },
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
    #[error("{0}")]
    Usage(String),
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
    let (index, model, mut slots, counters) = crate::daemon::load(&cfg).await?;
    let pipeline = crate::pipeline::Pipeline {
        index,
        model,
        cfg: std::sync::Arc::new(cfg),
        counters,
    };
    let d = pipeline.diagnose(&mut slots[0], &alarm).await;
    let mut out = std::io::stdout().lock();
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(&d).unwrap_or_default()
    )?;
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
        "  llm threads {} ctx {} batch {} max_tokens {} prompt_budget {} slots {}",
        cfg.llm.threads,
        cfg.llm.ctx,
        cfg.llm.batch,
        cfg.llm.max_tokens,
        cfg.llm.prompt_budget,
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
        "  llama.cpp {} | {}",
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
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&r).unwrap_or_default()
        )?;
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

pub async fn eval_full(
    cfg: Config,
    cases: &std::path::Path,
    limit: Option<usize>,
    style: &str,
    json: bool,
) -> Result<(), CliError> {
    let mut cs = crate::eval::load_cases(cases)?;
    cs.truncate(limit.unwrap_or(usize::MAX));
    let (index, model, mut slots, counters) = crate::daemon::load(&cfg).await?;
    let pipeline = crate::pipeline::Pipeline {
        index,
        model,
        cfg: std::sync::Arc::new(cfg),
        counters,
    };
    let style = if style == "grammar" {
        crate::llm::Style::FullGrammar
    } else {
        crate::llm::Style::Schema
    };
    let progress = !json && std::io::IsTerminal::is_terminal(&std::io::stderr());
    let r = crate::eval::run_full(&pipeline, &mut slots[0], &cs, style, progress).await;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&r).unwrap_or_default()
        )?;
    } else {
        let v = serde_json::to_value(&r).unwrap_or_default();
        if let Some(m) = v.as_object() {
            for (k, v) in m {
                writeln!(out, "{k:<24} {v}")?;
            }
        }
    }
    Ok(())
}
