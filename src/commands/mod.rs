//! The one-shot commands' bodies (everything but `run`, the daemon), one
//! module each, and what they share: their error type, which of its cases
//! a restart cannot fix (exit status 78), and how reports are printed.

pub mod bench;
pub mod check;
pub mod diagnose;
pub mod eval;
pub mod feedback;
pub mod index;
pub mod lint;
pub mod notes;
pub mod show;
pub mod warm;

use std::io::Write;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    #[error(transparent)]
    Index(#[from] crate::retrieval::IndexError),
    #[error(transparent)]
    Load(#[from] crate::load::LoadError),
    #[error("alarm file {path}: {reason}")]
    Alarm { path: PathBuf, reason: String },
    #[error(transparent)]
    Eval(#[from] crate::measure::eval::EvalError),
    #[error(transparent)]
    Bench(#[from] crate::measure::bench::BenchError),
    #[error(transparent)]
    Warm(#[from] crate::warm::WarmError),
    #[error(transparent)]
    Tiers(#[from] crate::measure::tiers::TiersError),
    #[error(transparent)]
    Examples(#[from] crate::coverage::examples::ExamplesError),
    #[error(transparent)]
    Notes(#[from] crate::notes::store::StoreError),
    /// A notes file to import, at a line when one is to blame.
    #[error("{at}: {reason}")]
    NotesFile { at: String, reason: String },
    #[error("{0}")]
    Usage(String),
    #[error(transparent)]
    Feedback(#[from] crate::feedback::FeedbackError),
    #[error("broker {broker}: {reason}")]
    Broker { broker: String, reason: String },
    #[error("{model}: daemon jobs take {overhead:.1}% longer than llama.cpp's own decode time (llama_perf), over the --max-overhead {max}%")]
    Overhead {
        model: String,
        overhead: f64,
        max: f64,
    },
    #[error("{model}: no daemon job was timed by llama_perf, so --max-overhead cannot be checked (bench needs --rag-cases > 0 and a job that answers)")]
    OverheadUnmeasured { model: String },
    #[error("{model}: llama_perf counted {shortfall:.1}% more decode time than the daemon's jobs took, beyond the --max-overhead {max}%: its timing leaks in from outside the job")]
    OverheadLeak {
        model: String,
        shortfall: f64,
        max: f64,
    },
    #[error("{dir}: {errors} errors and {warnings} warnings in the manuals (each named above as file:line; docs/manuals.md is the format)")]
    Manuals {
        dir: PathBuf,
        errors: usize,
        warnings: usize,
    },
    #[error("cannot write output: {0}")]
    Output(#[from] std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
}

impl CommandError {
    /// True when retrying cannot help: config, model or index problems.
    pub fn is_config(&self) -> bool {
        match self {
            CommandError::Config(_) | CommandError::Index(_) => true,
            CommandError::Load(e) => e.is_config(),
            CommandError::Tiers(crate::measure::tiers::TiersError::Load(e)) => e.is_config(),
            _ => false,
        }
    }
}

/// Whether an error in a command's chain is one a restart cannot fix (a bad
/// config file, a missing or unloadable model or index): `main` exits 78
/// (EX_CONFIG) so systemd does not restart into it.
pub fn is_config_error(e: &(dyn std::error::Error + 'static)) -> bool {
    use crate::llm::LlmError;
    use crate::load::LoadError;
    e.downcast_ref::<CommandError>()
        .is_some_and(CommandError::is_config)
        || e.is::<crate::config::ConfigError>()
        || e.is::<crate::retrieval::IndexError>()
        || matches!(e.downcast_ref::<LlmError>(), Some(LlmError::Load { .. }))
        || e.downcast_ref::<LoadError>()
            .is_some_and(LoadError::is_config)
}

pub use crate::cases::eval_set_candidates;

/// `--cases` as given, or the first eval set of `eval_set_candidates`.
pub fn cases_file(given: Option<PathBuf>, index: Option<&Path>) -> Result<PathBuf, CommandError> {
    if let Some(p) = given {
        return Ok(p);
    }
    let tried = eval_set_candidates(index);
    tried
        .iter()
        .find(|p| p.is_file())
        .cloned()
        .ok_or_else(|| {
            CommandError::Usage(format!(
                "no --cases FILE given, and no eval set at {}; give --cases (the source tree has knowledge/eval/alarms.jsonl)",
                tried
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
}

/// `bench --retrieval`'s manuals: `--knowledge` as given, or the source
/// tree's `knowledge/` when this binary is a build in `target/*/`.
pub fn knowledge_dir(given: Option<PathBuf>) -> Result<PathBuf, CommandError> {
    if let Some(p) = given {
        return Ok(p);
    }
    let tree = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(|b| b.join("../../knowledge")));
    tree.filter(|p| p.is_dir()).ok_or_else(|| {
        CommandError::Usage(
            "no --knowledge DIR given, and this binary is not a build in a source tree; give --knowledge".into(),
        )
    })
}

/// The async runtime every command that loads the model runs on. Two
/// workers are plenty: heavy work runs on slot threads, not on tokio.
pub fn runtime() -> Result<tokio::runtime::Runtime, CommandError> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(CommandError::Runtime)
}

/// Loads a config for a one-shot command, then sets up its logging (quiet
/// unless the config asks for more than `info`).
fn load_config(path: &std::path::Path) -> Result<crate::config::Config, CommandError> {
    let cfg = crate::config::load(path)?;
    crate::logging::init(if cfg.log_level == "info" {
        "warn"
    } else {
        &cfg.log_level
    });
    Ok(cfg)
}

/// A report as JSON, or as a table a person reads: one row per figure,
/// nested parts under dotted names, numbers rounded to what they can tell.
fn print_report<T: serde::Serialize>(r: &T, json: bool) -> Result<(), CommandError> {
    let mut out = std::io::stdout().lock();
    if json {
        print_json(&mut out, r)?;
    } else {
        let v = serde_json::to_value(r).unwrap_or_default();
        let mut rows = Vec::new();
        table_rows("", &v, &mut rows);
        let width = rows
            .iter()
            .map(|(k, _)| k.chars().count())
            .max()
            .unwrap_or(0);
        for (k, v) in rows {
            writeln!(out, "{k:<width$}  {v}")?;
        }
    }
    Ok(())
}

/// Flattens a report into (name, value) rows.
fn table_rows(key: &str, v: &serde_json::Value, rows: &mut Vec<(String, String)>) {
    use serde_json::Value;
    let name = |k: &str| {
        if key.is_empty() {
            k.to_string()
        } else {
            format!("{key}.{k}")
        }
    };
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                table_rows(&name(k), v, rows);
            }
        }
        Value::Array(a) if a.iter().any(|x| x.is_object() || x.is_array()) => {
            for (i, x) in a.iter().enumerate() {
                table_rows(&format!("{key}[{i}]"), x, rows);
            }
        }
        Value::Array(a) => rows.push((
            key.to_string(),
            a.iter().map(cell).collect::<Vec<_>>().join(", "),
        )),
        other => rows.push((key.to_string(), cell(other))),
    }
}

/// One value as a table cell: a string without quotes, a float to three
/// significant places (the runs vary more than that), null as "-".
fn cell(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "-".into(),
        serde_json::Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or_default();
            match f.abs() {
                a if a >= 100.0 || a == 0.0 => format!("{f:.0}"),
                a if a >= 10.0 => format!("{f:.1}"),
                a if a >= 1.0 => format!("{f:.2}"),
                _ => format!("{f:.3}"),
            }
        }
        other => other.to_string(),
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

    // `eval` without --json printed a raw key dump
    // (`gen_tokens_per_s_p50 82.43366099942428`, `style "Schema"`).
    #[test]
    fn a_report_reads_as_a_table() {
        let v = serde_json::json!({
            "style": "Schema",
            "gen_tokens_per_s_p50": 82.43366099942428,
            "accuracy": 0.9411764705882353,
            "cases": 118,
            "ttft": null,
            "modes": [{"mode": "chosen", "latency_ms_p50": 5231.7}],
            "langs": ["en", "zh"],
        });
        let mut rows = Vec::new();
        table_rows("", &v, &mut rows);
        let rows: Vec<String> = rows.iter().map(|(k, v)| format!("{k} {v}")).collect();
        for want in [
            "style Schema",
            "gen_tokens_per_s_p50 82.4",
            "accuracy 0.941",
            "cases 118",
            "ttft -",
            "modes[0].mode chosen",
            "modes[0].latency_ms_p50 5232",
            "langs en, zh",
        ] {
            assert!(rows.iter().any(|r| r == want), "{want:?} not in {rows:#?}");
        }
    }

    // `bench` worked only from the repository root ("cases file
    // knowledge/eval/alarms.jsonl: No such file or directory").
    #[test]
    fn the_eval_set_is_found_beside_the_index_not_in_the_working_directory() {
        let dir = tempfile::tempdir().unwrap();
        let index = dir.path().join("knowledge.twx");
        assert_eq!(
            eval_set_candidates(Some(&index))[0],
            dir.path().join("eval/alarms.jsonl")
        );
        std::fs::create_dir(dir.path().join("eval")).unwrap();
        std::fs::write(dir.path().join("eval/alarms.jsonl"), "{}").unwrap();
        assert_eq!(
            cases_file(None, Some(&index)).unwrap(),
            dir.path().join("eval/alarms.jsonl")
        );
        let given = PathBuf::from("mine.jsonl");
        assert_eq!(
            cases_file(Some(given.clone()), Some(&index)).unwrap(),
            given
        );
        assert!(eval_set_candidates(None).iter().all(|p| p.is_absolute()));
    }
}
