//! Saved prompt-prefix states: what a slot restores at start instead of
//! reading the static prefix again (about 200 tokens, ~10 s on the board).
//!
//! Owns the file naming (keyed by the model file and a hash of the prefix
//! tokens), the checksummed container around llama.cpp's sequence state, and
//! the removal of stale states. llama.cpp aborts the process on a truncated
//! state (`GGML_ASSERT(nread <= state_size)`), so nothing reaches it unless
//! the length and CRC check out. Pure bytes; the slot does the llama.cpp calls.

use std::path::{Path, PathBuf};

use llama_cpp_2::token::LlamaToken;

/// The static prompt prefix and where its KV state is kept between runs.
#[derive(Debug, Clone)]
pub struct PrefixSpec {
    pub text: String,
    /// `state_dir/kv`; None computes the prefix at start without saving it.
    pub dir: Option<PathBuf>,
    /// Identifies the model file and this build (see `ModelInfo::key`).
    pub model_key: String,
}

impl PrefixSpec {
    /// `prefix-{model}-{prompt}.kv`: a new model file or a changed prompt or
    /// template gives a new name, so a stale state is never loaded.
    pub fn file_name(&self, tokens: &[LlamaToken]) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        for t in tokens {
            h.update(t.0.to_le_bytes());
        }
        let prompt = h.finalize();
        let hex: String = prompt[..8].iter().map(|b| format!("{b:02x}")).collect();
        let model = &self.model_key[..16.min(self.model_key.len())];
        format!("prefix-{model}-{hex}.kv")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrefixFileError {
    #[error("not a tidewatch prefix state (bad magic)")]
    Magic,
    #[error("prefix state format {0} is not supported")]
    Version(u32),
    #[error("prefix state is truncated: {have} of {need} bytes")]
    Truncated { have: usize, need: usize },
    #[error("prefix state checksum mismatch")]
    Checksum,
}

const MAGIC: &[u8; 4] = b"TWKV";
const VERSION: u32 = 1;
const HEADER: usize = 4 + 4 + 4 + 8 + 4;

/// `TWKV | version u32 | n_tokens u32 | state_len u64 | crc32 u32 | tokens
/// (i32 LE) | llama.cpp sequence state`, little-endian; the CRC covers the
/// tokens and the state.
pub fn encode(tokens: &[LlamaToken], state: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(tokens.len() * 4 + state.len());
    for t in tokens {
        body.extend_from_slice(&t.0.to_le_bytes());
    }
    body.extend_from_slice(state);
    let mut out = Vec::with_capacity(HEADER + body.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// The tokens and the llama.cpp state, if the container is whole.
pub fn decode(bytes: &[u8]) -> Result<(Vec<LlamaToken>, &[u8]), PrefixFileError> {
    let truncated = |need: usize| PrefixFileError::Truncated {
        have: bytes.len(),
        need,
    };
    if bytes.len() < HEADER {
        return Err(if bytes.len() >= 4 && &bytes[..4] != MAGIC {
            PrefixFileError::Magic
        } else {
            truncated(HEADER)
        });
    }
    if &bytes[..4] != MAGIC {
        return Err(PrefixFileError::Magic);
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    let version = u32_at(4);
    if version != VERSION {
        return Err(PrefixFileError::Version(version));
    }
    let n_tokens = u32_at(8) as usize;
    let mut len = [0u8; 8];
    len.copy_from_slice(&bytes[12..20]);
    let state_len = u64::from_le_bytes(len);
    let need = n_tokens
        .checked_mul(4)
        .and_then(|t| usize::try_from(state_len).ok()?.checked_add(t))
        .and_then(|b| b.checked_add(HEADER))
        .ok_or(truncated(usize::MAX))?;
    if bytes.len() != need {
        return Err(truncated(need));
    }
    let body = &bytes[HEADER..];
    if crc32fast::hash(body) != u32_at(20) {
        return Err(PrefixFileError::Checksum);
    }
    let tokens = body[..n_tokens * 4]
        .chunks_exact(4)
        .map(|c| LlamaToken(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    Ok((tokens, &body[n_tokens * 4..]))
}

/// Writes beside the final name, fsyncs and renames into place, so a crash
/// never leaves a half-written state under the real name.
pub fn write_atomic(path: &Path, bytes: &[u8], tag: usize) -> std::io::Result<()> {
    use std::io::Write;
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    let tmp = path.with_extension(format!("{tag}.tmp"));
    let mut f = std::fs::File::create(&tmp)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Removes saved prefix states other than `keep` (older prompts or models):
/// only one is ever loaded, and each is megabytes.
pub fn remove_stale(keep: &Path) {
    let (Some(dir), Some(name)) = (keep.parent(), keep.file_name()) else {
        return;
    };
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let n = e.file_name();
        let s = n.to_string_lossy();
        if n != name && s.starts_with("prefix-") && s.ends_with(".kv") {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(v: &[i32]) -> Vec<LlamaToken> {
        v.iter().map(|&t| LlamaToken(t)).collect()
    }

    #[test]
    fn round_trip_keeps_tokens_and_state() {
        let t = toks(&[1, 151644, 8948, -1]);
        let bytes = encode(&t, b"llama state");
        let (t2, state) = decode(&bytes).unwrap();
        assert_eq!(t2, t);
        assert_eq!(state, b"llama state");
    }

    #[test]
    fn every_truncation_and_every_flipped_bit_is_rejected() {
        let bytes = encode(&toks(&[5, 6, 7]), &[9u8; 40]);
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n]).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(decode(&b).is_err(), "bit {bit} of byte {i}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
    }

    #[test]
    fn names_depend_on_model_and_prompt() {
        let spec = |k: &str| PrefixSpec {
            text: String::new(),
            dir: None,
            model_key: k.into(),
        };
        let a = spec("aaaaaaaaaaaaaaaaaaaa").file_name(&toks(&[1, 2]));
        assert_eq!(a, spec("aaaaaaaaaaaaaaaaaaaa").file_name(&toks(&[1, 2])));
        assert_ne!(a, spec("bbbbbbbbbbbbbbbbbbbb").file_name(&toks(&[1, 2])));
        assert_ne!(a, spec("aaaaaaaaaaaaaaaaaaaa").file_name(&toks(&[1, 3])));
        assert!(a.starts_with("prefix-aaaaaaaaaaaaaaaa-") && a.ends_with(".kv"));
    }

    #[test]
    fn stale_states_are_removed_and_the_kept_one_stays() {
        let d = tempfile::tempdir().unwrap();
        let keep = d.path().join("prefix-a-b.kv");
        for n in ["prefix-a-b.kv", "prefix-c-d.kv", "other.txt"] {
            std::fs::write(d.path().join(n), b"x").unwrap();
        }
        remove_stale(&keep);
        let mut left: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["other.txt", "prefix-a-b.kv"]);
    }
}
