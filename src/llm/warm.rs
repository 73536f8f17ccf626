//! A slot's warm-up: the static prompt prefix put into the KV cache at
//! start, restored from its saved state in `state_dir` when there is one
//! for this model, llama.cpp build, context shape and prompt, else decoded
//! and saved for the next start (the file format is `prefix`'s).

use std::path::Path;
use std::time::Instant;

use llama_cpp_2::token::LlamaToken;

use super::kv::Kv;
use super::prefix::{self, PrefixSpec, StateKey};

/// How a slot got its prefix into the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmed {
    Restored,
    Computed,
    Failed,
}

/// Puts the static prefix into the KV cache: restored from its saved
/// state when there is one for this model, llama.cpp build, context shape
/// and prompt, else decoded and saved. A state that does not load is
/// removed and recomputed.
pub(super) fn warm(kv: &mut Kv<'_>, spec: &PrefixSpec) -> Warmed {
    let slot = kv.slot();
    let t0 = Instant::now();
    let tokens = super::tokens::head_tokens(kv.model(), &spec.text);
    if tokens.is_empty() || tokens.len() + 1 >= kv.n_ctx() {
        return Warmed::Failed;
    }
    // What llama.cpp made of the settings, not the settings: it sizes the
    // buffers the state is read into.
    let shape = kv.shape();
    let key = StateKey::new(&spec.model_key, super::model::llama_cpp_build(), shape);
    let path = spec.dir.as_ref().map(|d| d.join(key.file_name(&tokens)));
    if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
        match restore_prefix(kv, path, &key, &tokens) {
            Ok(()) => {
                prefix::remove_stale(path);
                tracing::info!(slot, tokens = tokens.len(), ms = t0.elapsed().as_millis() as u64, file = %path.display(), "prompt prefix restored from state_dir");
                return Warmed::Restored;
            }
            Err(reason) => {
                tracing::warn!(slot, file = %path.display(), %reason, "saved prompt prefix does not load; recomputing it");
                let _ = std::fs::remove_file(path);
            }
        }
    }
    kv.clear();
    if let Err(e) = kv.decode(&tokens) {
        tracing::warn!(slot, error = %e, "prompt prefix could not be decoded; jobs read it themselves");
        kv.clear();
        return Warmed::Failed;
    }
    let ms = t0.elapsed().as_millis() as u64;
    match &path {
        Some(path) => match save_prefix(kv, path, &key) {
            Ok(bytes) => {
                tracing::info!(slot, tokens = tokens.len(), ms, bytes, file = %path.display(), "prompt prefix computed and saved")
            }
            Err(e) => {
                tracing::warn!(slot, file = %path.display(), error = %e, "prompt prefix computed but cannot be saved")
            }
        },
        None => tracing::info!(slot, tokens = tokens.len(), ms, "prompt prefix computed"),
    }
    Warmed::Computed
}

fn restore_prefix(
    kv: &mut Kv<'_>,
    path: &Path,
    key: &StateKey,
    tokens: &[LlamaToken],
) -> Result<(), String> {
    let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
    let (saved, state) = prefix::decode(&bytes, key).map_err(|e| e.to_string())?;
    if saved != tokens {
        return Err("its tokens differ from the prompt's".into());
    }
    // SAFETY: the bytes are what `state_seq_get_data_ext` wrote for this
    // model, llama.cpp build and context shape (the header says so and
    // `decode` checked it, with the length and CRC).
    if !unsafe { kv.set_state(state, saved) } {
        return Err("llama.cpp rejected the state".into());
    }
    Ok(())
}

fn save_prefix(kv: &Kv<'_>, path: &Path, key: &StateKey) -> std::io::Result<usize> {
    let state = kv.read_state(usize::MAX)?.unwrap_or_default();
    let bytes = prefix::encode(key, kv.tokens(), &state);
    prefix::save(path, &bytes, kv.slot())?;
    prefix::remove_stale(path);
    Ok(bytes.len())
}
