//! Loading what a diagnosis needs (the index, the model and its slot
//! threads) and stopping the slots again: one loader for the daemon and for
//! every command that runs the model, so what `eval` and `bench` measure is
//! what `run` starts.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::config::Config;
use crate::coverage::Examples;
use crate::llm::{LlmError, Model, Slot, SlotSettings};
use crate::pipeline::{Counters, Pipeline};
use crate::retrieval::{Index, IndexError, LiveIndex};

/// Why the index, the model or a slot could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Index(#[from] IndexError),
    #[error(transparent)]
    Llm(#[from] LlmError),
    #[error("config key knowledge.examples: {0}")]
    Examples(crate::coverage::examples::ExamplesError),
    #[error("config key knowledge.kind_aliases: {kind:?} = {class}: no manual has this class in {index} (a manual's classes are its front matter's `classes:`)")]
    KindAlias {
        kind: String,
        class: String,
        index: String,
    },
    #[error("config key knowledge.plant_codes: {plant} = {manual}: no manual has this code in {index} (a manual's codes are its front matter's `codes:`)")]
    PlantCode {
        plant: String,
        manual: String,
        index: String,
    },
}

impl LoadError {
    /// True when a restart cannot fix it: a missing or damaged index, or a
    /// model that does not load (exit status 78).
    pub fn is_config(&self) -> bool {
        matches!(
            self,
            LoadError::Index(_)
                | LoadError::Llm(LlmError::Load { .. })
                | LoadError::PlantCode { .. }
                | LoadError::KindAlias { .. }
                | LoadError::Examples(_)
        )
    }
}

/// What `model_and_index` loaded.
pub type Loaded = (Arc<Index>, Arc<Model>, Vec<Slot>, Arc<Counters>);

/// Loads the index and the model and starts `llm.slots` slots. With `warm`,
/// each slot starts with the static prompt prefix in its KV cache, restored
/// from (or saved to) `state_dir/kv`; `eval` goes without, to measure a cold
/// start.
pub async fn model_and_index(cfg: &Config, warm: bool) -> Result<Loaded, LoadError> {
    let (index, model) = index_and_model(cfg).await?;
    let counters = Arc::new(Counters::default());
    let slots = start_slots(cfg, &model, &counters, warm).await?;
    Ok((index, model, slots, counters))
}

/// Loads the index and the model, no slot yet.
pub async fn index_and_model(cfg: &Config) -> Result<(Arc<Index>, Arc<Model>), LoadError> {
    let index = Arc::new(Index::open(&cfg.knowledge.index)?);
    check_plant_codes(cfg, &index)?;
    check_kind_aliases(cfg, &index)?;
    let model_path = cfg.llm.model.clone();
    let llm_cfg = cfg.llm.clone();
    let model = tokio::task::spawn_blocking(move || Model::load(&model_path, &llm_cfg))
        .await
        .map_err(|e| LlmError::Load {
            path: cfg.llm.model.display().to_string(),
            reason: e.to_string(),
        })??;
    let vocab = crate::logging::take_vocab_warnings();
    if vocab > 0 {
        tracing::debug!(count = vocab, "model vocabulary: llama.cpp warned about {vocab} tokens that look like control tokens (the model file's own metadata, not a tidewatch problem)");
    }
    Ok((index, Arc::new(model)))
}

/// Every mapped plant code names a code of `index`: one that does not would
/// never be covered, and the mistake would show only in the answers.
pub fn check_plant_codes(cfg: &Config, index: &Index) -> Result<(), LoadError> {
    match cfg
        .knowledge
        .plant_codes
        .iter()
        .find(|(_, manual)| !index.has_code(manual))
    {
        Some((plant, manual)) => Err(LoadError::PlantCode {
            plant: plant.clone(),
            manual: manual.clone(),
            index: cfg.knowledge.index.display().to_string(),
        }),
        None => Ok(()),
    }
}

/// Every kind alias names a class of `index`: one that does not would map
/// the plant's kind to no manual, and say so only in the answers.
pub fn check_kind_aliases(cfg: &Config, index: &Index) -> Result<(), LoadError> {
    match cfg
        .knowledge
        .kind_aliases
        .iter()
        .find(|(_, class)| index.docs_of_class(class).is_empty())
    {
        Some((kind, class)) => Err(LoadError::KindAlias {
            kind: kind.clone(),
            class: class.clone(),
            index: cfg.knowledge.index.display().to_string(),
        }),
        None => Ok(()),
    }
}

/// Starts `llm.slots` slots of a loaded model, as `model_and_index` does: a
/// restart of the slots without loading the model again (`eval --tiers`).
pub async fn start_slots(
    cfg: &Config,
    model: &Model,
    counters: &Counters,
    warm: bool,
) -> Result<Vec<Slot>, LoadError> {
    let settings = SlotSettings {
        ctx: cfg.llm.ctx,
        batch: cfg.llm.batch,
        threads: cfg.llm.threads,
        cpus: cfg.llm.cpus.clone(),
        prefix: if warm {
            Some(crate::llm::PrefixSpec {
                text: model.static_prefix()?,
                dir: Some(cfg.state_dir.join("kv")),
                model_key: model.info.key.clone(),
            })
        } else {
            None
        },
        // The budget is for the process; each slot keeps its own share.
        prompt_cache_bytes: (cfg.llm.prompt_cache_mib as usize) * (1 << 20)
            / cfg.llm.slots.max(1) as usize,
        // The disk tier serves the daemon across restarts; a measurement
        // starts from what it asks for (`eval --tiers` asks for it, in
        // state dirs of its own).
        prompt_disk: (warm && cfg.llm.prompt_cache_disk_mib > 0).then(|| crate::llm::DiskSpec {
            dir: cfg.state_dir.join("kv").join("prompts"),
            limit: u64::from(cfg.llm.prompt_cache_disk_mib) << 20,
            model_key: model.info.key.clone(),
            kv_type: cfg.llm.kv_type.name().to_string(),
        }),
        prompt_chunk: cfg.llm.prompt_chunk as usize,
        kv_type: cfg.llm.kv_type,
        verify_rows: cfg
            .llm
            .lookup
            .map_or(0, |l| crate::llm::verify_rows(l.draft_max)),
    };
    let mut slots = Vec::new();
    for i in 0..cfg.llm.slots as usize {
        match Slot::start(
            i,
            model.model.clone(),
            settings.clone(),
            counters.slots.clone(),
        )
        .await
        {
            Ok(s) => slots.push(s),
            Err(e) => {
                stop_slots(slots, cfg.watchdog.hard_timeout).await;
                return Err(e.into());
            }
        }
    }
    Ok(slots)
}

/// Where the example alarms coverage judges by are: `knowledge.examples`
/// (configured), else the shipped file found beside the index, installed,
/// or in the source tree (`cases::examples_candidates`), never the eval set.
/// None when not configured and none is found.
pub fn examples_file(cfg: &Config) -> Option<(PathBuf, Found)> {
    if let Some(p) = &cfg.knowledge.examples {
        return Some((p.clone(), Found::Configured));
    }
    crate::cases::examples_candidates(Some(&cfg.knowledge.index))
        .into_iter()
        .find(|p| p.is_file())
        .map(|p| (p, Found::Shipped))
}

/// How `examples_file` came by its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// `knowledge.examples` names it: the operator asked for this file.
    Configured,
    /// Found by itself where the package ships it: nobody asked for it.
    Shipped,
}

/// The example alarms coverage judges by (`examples_file`). Without any,
/// coverage judges by words and ranking alone, and says so once. A
/// configured file that cannot be read stops the start (a restart cannot
/// fix it, and the operator asked for it); a file found by itself that
/// cannot be read only warns: nobody set a key that could be named, and
/// the daemon answers as well without it as with none installed.
pub fn examples(cfg: &Config) -> Result<Option<Arc<Examples>>, LoadError> {
    let Some((path, found)) = examples_file(cfg) else {
        let tried = crate::cases::examples_candidates(Some(&cfg.knowledge.index));
        tracing::warn!(
            tried = %tried.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
            "no example alarms (knowledge.examples, or the shipped examples/alarms.jsonl): coverage judges by the manuals' words and retrieval's ranking alone"
        );
        return Ok(None);
    };
    let examples = match (Examples::load(&path), found) {
        (Ok(e), _) => e,
        (Err(e), Found::Configured) => return Err(LoadError::Examples(e)),
        (Err(e), Found::Shipped) => {
            tracing::warn!(
                path = %path.display(),
                "{e}: coverage judges by the manuals' words and retrieval's ranking alone (knowledge.examples names a file to use instead)"
            );
            return Ok(None);
        }
    };
    tracing::info!(path = %path.display(), examples = examples.len(), "example alarms for coverage");
    Ok(Some(Arc::new(examples)))
}

/// `model_and_index`, assembled into a pipeline: what the one-shot commands
/// need.
pub async fn pipeline(cfg: Config, warm: bool) -> Result<(Pipeline, Vec<Slot>), LoadError> {
    let (index, model, slots, counters) = model_and_index(&cfg, warm).await?;
    let examples = examples(&cfg)?;
    let pipeline = Pipeline {
        index: Arc::new(LiveIndex::new(index)),
        model,
        cfg: Arc::new(cfg),
        counters,
        examples,
    };
    Ok((pipeline, slots))
}

/// Cancels and joins slot threads, each within `hard`: a thread still inside
/// llama_decode when the process exits races llama.cpp's teardown.
pub async fn stop_slots(slots: Vec<Slot>, hard: Duration) {
    for slot in slots {
        slot.stop(hard).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(examples: Option<&std::path::Path>) -> Config {
        config_in(std::path::Path::new("/nonexistent"), examples)
    }

    /// A config whose index is `dir/k.twx`.
    fn config_in(dir: &std::path::Path, examples: Option<&std::path::Path>) -> Config {
        let mut text = format!(
            "state_dir = \"/tmp/tw\"\n[knowledge]\nindex = {:?}\n[llm]\nmodel = \"m.gguf\"\n",
            dir.join("k.twx").display().to_string()
        );
        if let Some(e) = examples {
            text = text.replace(
                "[llm]",
                &format!("examples = {:?}\n[llm]", e.display().to_string()),
            );
        }
        crate::config::parse(&text, std::path::Path::new("/tmp/tw.toml")).unwrap()
    }

    #[test]
    fn example_alarms_that_cannot_be_read_stop_the_start_naming_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("none.jsonl");
        let e = examples(&config(Some(&missing))).unwrap_err();
        assert!(e.is_config(), "a restart cannot fix it: {e}");
        let text = e.to_string();
        assert!(
            text.contains("knowledge.examples") && text.contains("none.jsonl"),
            "{text}"
        );
        let bad = dir.path().join("bad.jsonl");
        std::fs::write(&bad, "{\"case\": \"plant-1\"}\n").unwrap();
        let text = examples(&config(Some(&bad))).unwrap_err().to_string();
        assert!(
            text.contains("knowledge.examples")
                && text.contains(&bad.display().to_string())
                && text.contains("line 1"),
            "{text}"
        );
        let good = dir.path().join("good.jsonl");
        std::fs::write(
            &good,
            "{\"case\": \"plant-101\", \"class\": \"purifier\", \"alarm\": {\"id\": \"plant-101\", \"ts\": \"2026-12-01T00:00:00Z\", \"equipment\": \"SEP1\", \"code\": \"XA-1\", \"severity\": \"major\", \"kind\": \"purifier\", \"message\": \"bowl did not open\"}, \"gold\": {\"doc\": \"purifier-en\", \"section\": \"PUR-DISCH-FAIL causes\"}}\n",
        )
        .unwrap();
        assert_eq!(examples(&config(Some(&good))).unwrap().unwrap().len(), 1);
    }

    // With knowledge.examples unset, a bad file the daemon
    // found by itself exited 78 after the model had loaded, naming a key
    // the operator never set, and RestartPreventExitStatus kept it down.
    #[test]
    fn a_bad_examples_file_found_by_itself_warns_and_runs_without_examples() {
        let dir = tempfile::tempdir().unwrap();
        let beside = dir.path().join("examples/alarms.jsonl");
        std::fs::create_dir_all(beside.parent().unwrap()).unwrap();
        std::fs::write(&beside, "{\"case\": \"plant-1\"}\n").unwrap();
        let cfg = config_in(dir.path(), None);
        assert_eq!(examples_file(&cfg), Some((beside.clone(), Found::Shipped)));
        assert!(examples(&cfg).unwrap().is_none());
        // A read error alike: a directory where the file should be.
        std::fs::remove_file(&beside).unwrap();
        std::fs::create_dir(&beside).unwrap();
        assert!(examples(&config_in(dir.path(), None)).unwrap().is_none());
        // The same file configured stops the start, naming key, path and line.
        std::fs::remove_dir(&beside).unwrap();
        std::fs::write(&beside, "{\"case\": \"plant-1\"}\n").unwrap();
        let e = examples(&config_in(dir.path(), Some(&beside))).unwrap_err();
        assert!(e.is_config());
        let text = e.to_string();
        assert!(
            text.contains("config key knowledge.examples")
                && text.contains(&beside.display().to_string())
                && text.contains("line 1"),
            "{text}"
        );
    }

    /// The daemon's own search never reaches the eval set, wherever the
    /// index is: the test set is not the classifier's training data.
    #[test]
    fn the_daemon_never_looks_for_examples_in_the_eval_set() {
        for index in ["/nonexistent/k.twx", "/usr/share/tidewatch/knowledge.twx"] {
            let cfg = config_in(std::path::Path::new(index).parent().unwrap(), None);
            let tried = crate::cases::examples_candidates(Some(&cfg.knowledge.index));
            assert!(!tried.is_empty());
            for p in &tried {
                let p = p.display().to_string();
                assert!(!p.contains("eval"), "{p}");
            }
            let eval = crate::cases::eval_set_candidates(Some(&cfg.knowledge.index));
            assert!(tried.iter().all(|p| !eval.contains(p)));
        }
    }

    /// The package ships the examples, and no eval file.
    #[test]
    fn the_package_ships_the_examples_and_no_eval_set() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
        let toml: toml::Value =
            toml::from_str(&std::fs::read_to_string(root.join("Cargo.toml")).unwrap()).unwrap();
        let assets = toml["package"]["metadata"]["deb"]["assets"]
            .as_array()
            .unwrap();
        let pairs: Vec<(&str, &str)> = assets
            .iter()
            .map(|a| (a[0].as_str().unwrap(), a[1].as_str().unwrap()))
            .collect();
        assert!(
            pairs.contains(&(
                "knowledge/examples/alarms.jsonl",
                "usr/share/tidewatch/examples/alarms.jsonl"
            )),
            "{pairs:?}"
        );
        for (from, to) in &pairs {
            assert!(
                !from.contains("eval") && !to.contains("eval"),
                "{from} -> {to}"
            );
        }
        let install = std::fs::read_to_string(root.join("deploy/install.sh")).unwrap();
        assert!(
            install.contains("knowledge/examples/alarms.jsonl")
                && !install.contains("eval/alarms.jsonl"),
            "deploy/install.sh ships the examples and no eval set"
        );
    }
}
