//! Saved prompt-prefix states: what a slot restores at start instead of
//! reading the static prefix again (about 200 tokens, ~10 s on the board).
//!
//! Owns the file naming (keyed by the model file, the llama.cpp build, the
//! context shape and a hash of the prefix tokens), the checksummed container
//! around llama.cpp's sequence state, and the removal of stale states.
//! llama.cpp aborts the process on a state it cannot read (`GGML_ASSERT`s in
//! its state loading), which under systemd is a crash loop, so nothing
//! reaches it unless the length, the CRC and the key in the header check out.
//! Bytes and files only; the slot's warm-up (`warm`) does the llama.cpp calls.

use std::path::{Path, PathBuf};

use llama_cpp_2::token::LlamaToken;

/// The static prompt prefix and where its KV state is kept between runs.
#[derive(Debug, Clone)]
pub struct PrefixSpec {
    pub text: String,
    /// `state_dir/kv`; None computes the prefix at start without saving it.
    pub dir: Option<PathBuf>,
    /// Identifies the model file and the tidewatch release (see
    /// `ModelInfo::key`); `StateKey` adds llama.cpp and the context shape.
    pub model_key: String,
}

/// The context settings a saved sequence state depends on: the context it
/// is read back into is sized by them. Threads are left out: they change the
/// speed, not the state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateShape {
    pub n_ctx: u32,
    pub n_batch: u32,
    pub n_ubatch: u32,
}

impl std::fmt::Display for StateShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "n_ctx {}, n_batch {}, n_ubatch {}",
            self.n_ctx, self.n_batch, self.n_ubatch
        )
    }
}

/// The build string saved states are keyed by: llama.cpp's build and the
/// KV cache's element type, either of which changes a state's layout.
pub fn state_build(kv_type: &str) -> String {
    format!("{}; kv {kv_type}", super::model::llama_cpp_build())
}

/// What a saved state must match, besides its tokens, to be handed to
/// llama.cpp: the model file, the llama.cpp build and the context shape.
/// The KV cache type goes in with the build (`state_build`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateKey {
    /// Kept readable in file names so states group by model in `state_dir`.
    model: String,
    /// Stored in plain in the header, so a refusal can say which value moved.
    shape: StateShape,
    /// SHA-256 of the model key, the llama.cpp build and the shape.
    digest: [u8; 32],
}

impl StateKey {
    /// `model_key` is `ModelInfo::key`; `llama_build` is
    /// `llm::llama_cpp_build()` in the daemon, any string in tests.
    pub fn new(model_key: &str, llama_build: &str, shape: StateShape) -> Self {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        // Length prefixes: without them ("ab", "c") and ("a", "bc") collide.
        for part in [model_key, llama_build] {
            h.update((part.len() as u64).to_le_bytes());
            h.update(part.as_bytes());
        }
        for n in [shape.n_ctx, shape.n_batch, shape.n_ubatch] {
            h.update(n.to_le_bytes());
        }
        Self {
            model: model_key.to_string(),
            shape,
            digest: h.finalize().into(),
        }
    }

    /// `prefix-{model}-{key and prompt}.kv`: a new model file, llama.cpp
    /// build, context shape, prompt or template gives a new name, so a state
    /// that llama.cpp could abort on is never even opened.
    pub fn file_name(&self, tokens: &[LlamaToken]) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(self.digest);
        for t in tokens {
            h.update(t.0.to_le_bytes());
        }
        let hash = h.finalize();
        let hex: String = hash[..8].iter().map(|b| format!("{b:02x}")).collect();
        let model = &self.model[..16.min(self.model.len())];
        format!("prefix-{model}-{hex}.kv")
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrefixFileError {
    #[error("not a tidewatch prefix state (bad magic)")]
    Magic,
    #[error("prefix state format {0} is not supported (this build reads {VERSION})")]
    Version(u32),
    #[error("prefix state is truncated: {have} of {need} bytes")]
    Truncated { have: usize, need: usize },
    #[error("prefix state checksum mismatch")]
    Checksum,
    #[error("prefix state was saved for {saved}, this context has {want}")]
    Shape { saved: StateShape, want: StateShape },
    #[error("prefix state was saved for another model file or llama.cpp build")]
    Origin,
}

const MAGIC: &[u8; 4] = b"TWKV";
/// 2: the header carries the context shape and the key digest. Format 1 had
/// neither, so it is refused: nothing in it says it fits this llama.cpp.
const VERSION: u32 = 2;
/// Where the CRC-covered part of the header starts (the shape).
const KEYED: usize = 4 + 4 + 4 + 8;
const CRC: usize = KEYED + 3 * 4 + 32;
const HEADER: usize = CRC + 4;

/// `TWKV | version u32 | n_tokens u32 | state_len u64 | n_ctx u32 | n_batch
/// u32 | n_ubatch u32 | key digest [32] | crc32 u32 | tokens (i32 LE) |
/// llama.cpp sequence state`, little-endian; the CRC covers the shape, the
/// digest, the tokens and the state, so damage is told apart from a mismatch.
/// The size of `encode`'s file for `tokens` tokens and `state` bytes.
pub fn encoded_len(tokens: usize, state: usize) -> usize {
    HEADER + tokens * 4 + state
}

pub fn encode(key: &StateKey, tokens: &[LlamaToken], state: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + tokens.len() * 4 + state.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    out.extend_from_slice(&(tokens.len() as u32).to_le_bytes());
    out.extend_from_slice(&(state.len() as u64).to_le_bytes());
    let s = key.shape;
    for n in [s.n_ctx, s.n_batch, s.n_ubatch] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.extend_from_slice(&key.digest);
    out.extend_from_slice(&[0; 4]);
    for t in tokens {
        out.extend_from_slice(&t.0.to_le_bytes());
    }
    out.extend_from_slice(state);
    let crc = crc32_skipping(&out[KEYED..], CRC - KEYED);
    out[CRC..HEADER].copy_from_slice(&crc.to_le_bytes());
    out
}

/// CRC of `bytes` without the 4-byte CRC field at `at`.
fn crc32_skipping(bytes: &[u8], at: usize) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&bytes[..at]);
    h.update(&bytes[at + 4..]);
    h.finalize()
}

/// The tokens and the llama.cpp state, if the container is whole and was
/// written under `want`.
pub fn decode<'b>(
    bytes: &'b [u8],
    want: &StateKey,
) -> Result<(Vec<LlamaToken>, &'b [u8]), PrefixFileError> {
    let truncated = |need: usize| PrefixFileError::Truncated {
        have: bytes.len(),
        need,
    };
    if bytes.len() >= 4 && &bytes[..4] != MAGIC {
        return Err(PrefixFileError::Magic);
    }
    let u32_at =
        |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
    // The version before the length: another format has another header size.
    if bytes.len() < 8 {
        return Err(truncated(HEADER));
    }
    let version = u32_at(4);
    if version != VERSION {
        return Err(PrefixFileError::Version(version));
    }
    if bytes.len() < HEADER {
        return Err(truncated(HEADER));
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
    if crc32_skipping(&bytes[KEYED..], CRC - KEYED) != u32_at(CRC) {
        return Err(PrefixFileError::Checksum);
    }
    let saved = StateShape {
        n_ctx: u32_at(KEYED),
        n_batch: u32_at(KEYED + 4),
        n_ubatch: u32_at(KEYED + 8),
    };
    if saved != want.shape {
        return Err(PrefixFileError::Shape {
            saved,
            want: want.shape,
        });
    }
    if bytes[KEYED + 12..CRC] != want.digest {
        return Err(PrefixFileError::Origin);
    }
    let body = &bytes[HEADER..];
    let tokens = body[..n_tokens * 4]
        .chunks_exact(4)
        .map(|c| LlamaToken(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        .collect();
    Ok((tokens, &body[n_tokens * 4..]))
}

/// Saves a state file (`crate::durable`: a crash never leaves half a state
/// under the real name), creating `state_dir/kv` if need be. Private
/// whatever the umask: the state is the prompt's cache, and the prompt holds
/// the fleet's manuals. Slots starting together may save the same file, and
/// so may the daemon and `tidewatch warm` beside it (each with its slot 0),
/// so each writes through a temp file named by its process and slot: a name
/// shared by two processes let one remove the other's half-written file and
/// rename its own, or the other's half, into place.
pub fn save(path: &Path, bytes: &[u8], slot: usize) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir)?;
    // What a crash mid-write left; a live writer's is seconds old.
    crate::durable::remove_stale_temps(dir, std::time::Duration::from_secs(3600));
    crate::durable::cache_room(dir, bytes.len() as u64)?;
    crate::durable::write_atomic_shared(path, bytes, crate::durable::Access::Private, slot)
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

    const SHAPE: StateShape = StateShape {
        n_ctx: 2048,
        n_batch: 512,
        n_ubatch: 512,
    };

    fn key(model: &str, build: &str, shape: StateShape) -> StateKey {
        StateKey::new(model, build, shape)
    }

    /// The build string of the pinned llama.cpp release, and of another.
    fn this_build() -> String {
        format!("llama-cpp-sys-2 {}", crate::llm::LLAMA_CPP_SYS)
    }

    fn other_build() -> String {
        format!("llama-cpp-sys-2 {}-next", crate::llm::LLAMA_CPP_SYS)
    }

    fn k() -> StateKey {
        key("aaaaaaaaaaaaaaaaaaaa", &this_build(), SHAPE)
    }

    #[test]
    fn round_trip_keeps_tokens_and_state() {
        let t = toks(&[1, 151644, 8948, -1]);
        let bytes = encode(&k(), &t, b"llama state");
        let (t2, state) = decode(&bytes, &k()).unwrap();
        assert_eq!(t2, t);
        assert_eq!(state, b"llama state");
    }

    #[test]
    fn every_truncation_and_every_flipped_bit_is_rejected() {
        let bytes = encode(&k(), &toks(&[5, 6, 7]), &[9u8; 40]);
        for n in 0..bytes.len() {
            assert!(decode(&bytes[..n], &k()).is_err(), "truncated to {n}");
        }
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut b = bytes.clone();
                b[i] ^= 1 << bit;
                assert!(decode(&b, &k()).is_err(), "bit {bit} of byte {i}");
            }
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode(&longer, &k()).is_err());
    }

    #[test]
    fn names_depend_on_model_and_prompt() {
        let a = key("aaaaaaaaaaaaaaaaaaaa", "b1", SHAPE).file_name(&toks(&[1, 2]));
        assert_eq!(
            a,
            key("aaaaaaaaaaaaaaaaaaaa", "b1", SHAPE).file_name(&toks(&[1, 2]))
        );
        assert_ne!(
            a,
            key("bbbbbbbbbbbbbbbbbbbb", "b1", SHAPE).file_name(&toks(&[1, 2]))
        );
        assert_ne!(
            a,
            key("aaaaaaaaaaaaaaaaaaaa", "b1", SHAPE).file_name(&toks(&[1, 3]))
        );
        assert!(a.starts_with("prefix-aaaaaaaaaaaaaaaa-") && a.ends_with(".kv"));
    }

    /// A state written by another llama.cpp can abort the process
    /// inside llama.cpp when it is read, at every start.
    #[test]
    fn names_differ_for_another_llama_cpp_build() {
        let t = toks(&[1, 2]);
        let a = key("aaaaaaaaaaaaaaaaaaaa", &this_build(), SHAPE).file_name(&t);
        let b = key("aaaaaaaaaaaaaaaaaaaa", &other_build(), SHAPE).file_name(&t);
        assert_ne!(a, b, "same name for two llama.cpp builds");
    }

    /// `[llm] ctx` and `batch` size the context the state is read into.
    #[test]
    fn names_differ_for_other_context_settings() {
        let t = toks(&[1, 2]);
        let name = |shape| key("aaaaaaaaaaaaaaaaaaaa", "b1", shape).file_name(&t);
        let a = name(SHAPE);
        for other in [
            StateShape {
                n_ctx: 4096,
                ..SHAPE
            },
            StateShape {
                n_batch: 256,
                ..SHAPE
            },
            StateShape {
                n_ubatch: 256,
                ..SHAPE
            },
        ] {
            assert_ne!(a, name(other), "same name for {other:?} and {SHAPE:?}");
        }
    }

    /// A name that collides anyway (a file copied between machines,
    /// a hand-renamed file) must not reach llama.cpp either.
    #[test]
    fn a_state_saved_under_other_settings_is_refused() {
        let bytes = encode(&k(), &toks(&[5, 6]), b"llama state");
        let ctx = key(
            "aaaaaaaaaaaaaaaaaaaa",
            &this_build(),
            StateShape {
                n_ctx: 4096,
                ..SHAPE
            },
        );
        let build = key("aaaaaaaaaaaaaaaaaaaa", &other_build(), SHAPE);
        let model = key("bbbbbbbbbbbbbbbbbbbb", &this_build(), SHAPE);
        for other in [ctx, build, model] {
            assert!(
                decode(&bytes, &other).is_err(),
                "state of {:?} accepted for {other:?}",
                k()
            );
        }
    }

    /// Format 1 carried no llama.cpp build nor context settings, so nothing
    /// says it fits this build: it is refused before llama.cpp sees it.
    #[test]
    fn a_state_of_format_1_is_refused() {
        let mut body = Vec::new();
        for t in [5i32, 6] {
            body.extend_from_slice(&t.to_le_bytes());
        }
        body.extend_from_slice(&[9u8; 40]);
        let mut v1 = Vec::new();
        v1.extend_from_slice(b"TWKV");
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&2u32.to_le_bytes());
        v1.extend_from_slice(&40u64.to_le_bytes());
        v1.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        v1.extend_from_slice(&body);
        assert_eq!(
            decode(&v1, &k()).map(|(t, s)| (t, s.len())),
            Err(PrefixFileError::Version(1))
        );
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

    #[test]
    fn a_saved_state_is_readable_by_its_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        crate::durable::tests::with_umask(0, || {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("kv").join("prefix-a-b.kv");
            save(&p, b"state", 0).unwrap();
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "saved prefix state is {mode:o}");
        });
    }
}
