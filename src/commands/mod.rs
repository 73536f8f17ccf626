//! The one-shot commands' bodies (everything but `run`, the daemon), one
//! module each, and what they share: their error type, which of its cases
//! a restart cannot fix (exit status 78), and how reports are printed.

pub mod bench;
pub mod check;
pub mod diagnose;
pub mod eval;
pub mod index;
pub mod lint;
pub mod show;

use std::io::Write;
use std::path::PathBuf;

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
    #[error("{0}")]
    Usage(String),
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
    #[error("--top-k must be 1..=50, got {0}")]
    TopK(usize),
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

/// A report as JSON, or as one `key value` line per field.
fn print_report<T: serde::Serialize>(r: &T, json: bool) -> Result<(), CommandError> {
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

fn print_json(out: &mut impl Write, v: &impl serde::Serialize) -> std::io::Result<()> {
    writeln!(
        out,
        "{}",
        serde_json::to_string_pretty(v).unwrap_or_default()
    )
}
