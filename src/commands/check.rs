//! `tidewatch check-config`: validates a config and reports the broker,
//! the index and the model it names (with the llama.cpp build).

use std::io::Write;

use super::CommandError;
use crate::alarm::Topics;
use crate::config::Config;
use crate::retrieval::Index;

fn check_config(cfg: &Config, offline: bool) -> Result<(), CommandError> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "config {}", cfg.path.display())?;
    let topics = Topics {
        prefix: cfg.mqtt.topic_prefix.clone(),
    };
    writeln!(
        out,
        "  broker {}:{} client_id {} topics {} -> {}, {} -> {}",
        cfg.mqtt.host,
        cfg.mqtt.port,
        cfg.mqtt.client_id,
        topics.alarms(),
        topics.diagnosis("<equipment>"),
        topics.feedback(),
        topics.notes("<equipment>")
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
    let ok = |mut out: std::io::StdoutLock<'_>, also: &str| {
        writeln!(out, "config {}: ok{also}", cfg.path.display())
    };
    if offline {
        ok(
            out,
            " (offline: the files, the index and the model were not opened)",
        )?;
        return Ok(());
    }
    crate::config::check_files(cfg)?;
    writeln!(out, "  state_dir {}: writable", cfg.state_dir.display())?;
    let idx = Index::open(&cfg.knowledge.index)?;
    crate::load::check_plant_codes(cfg, &idx)?;
    crate::load::check_kind_aliases(cfg, &idx)?;
    writeln!(
        out,
        "  index {}: {} documents, {} passages, {} bytes",
        cfg.knowledge.index.display(),
        idx.n_docs(),
        idx.n_passages(),
        idx.byte_len()
    )?;
    match crate::load::examples(cfg)? {
        Some(e) => writeln!(out, "  example alarms for coverage: {}", e.len())?,
        None => writeln!(
            out,
            "  example alarms for coverage: none found (words and ranking alone)"
        )?,
    }
    let model =
        crate::llm::Model::load(&cfg.llm.model, &cfg.llm).map_err(crate::load::LoadError::from)?;
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
        "  tidewatch {}, llama.cpp from llama-cpp-sys-2 {}: {}",
        env!("CARGO_PKG_VERSION"),
        crate::llm::LLAMA_CPP_SYS,
        i.llama_cpp
    )?;
    // Said last, after every check: an operator skims for it.
    ok(out, "")?;
    Ok(())
}

/// Loads the config (its errors name the key) and checks what it names.
pub fn run(config: &std::path::Path, offline: bool) -> Result<(), CommandError> {
    let cfg = super::load_config(config)?;
    check_config(&cfg, offline)
}
