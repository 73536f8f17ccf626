//! The loaded model: llama.cpp's process-global backend, loading a GGUF,
//! rendering prompts (the GGUF template or the hand-written family
//! template), the model's identity for status and logs (`ModelInfo`) and the
//! llama.cpp build that saved states are keyed by. Never runs a generation.

use std::path::Path;
use std::sync::{Arc, OnceLock};

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};

use super::error::LlmError;
use super::tokens;
use crate::config::{LlmConfig, TemplateChoice};
use crate::prompt::{self, Family, Prompt};

static BACKEND: OnceLock<LlamaBackend> = OnceLock::new();

/// llama.cpp's backend is process-global and may be initialised only once.
pub fn backend() -> &'static LlamaBackend {
    BACKEND.get_or_init(|| {
        llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
        #[allow(clippy::expect_used)]
        LlamaBackend::init().expect("llama.cpp backend initialises once per process")
    })
}

/// What the model is, for status messages, `check-config` and logs.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ModelInfo {
    /// File name of the GGUF: what diagnoses name as their `model`.
    pub name: String,
    pub architecture: String,
    pub description: String,
    pub params: u64,
    pub file_bytes: u64,
    pub template_family: Option<&'static str>,
    pub thinking_template: bool,
    pub llama_cpp: String,
    /// Hex SHA-256 of the file's size and its first and last MiB, plus this
    /// build's version: names the saved prompt-prefix states of this model.
    pub key: String,
}

/// The loaded model and how to talk to it.
pub struct Model {
    pub model: Arc<LlamaModel>,
    pub info: ModelInfo,
    gguf_template: Option<String>,
    family: Family,
    choice: TemplateChoice,
    thinking: bool,
}

impl Model {
    pub fn load(path: &Path, cfg: &LlmConfig) -> Result<Self, LlmError> {
        let err = |reason: String| LlmError::Load {
            path: path.display().to_string(),
            reason,
        };
        let meta = std::fs::metadata(path).map_err(|e| err(e.to_string()))?;
        let mut magic = [0u8; 4];
        use std::io::Read;
        std::fs::File::open(path)
            .and_then(|mut f| f.read_exact(&mut magic))
            .map_err(|e| err(e.to_string()))?;
        if &magic != b"GGUF" {
            return Err(err("not a GGUF file (bad magic)".into()));
        }
        let model = LlamaModel::load_from_file(backend(), path, &LlamaModelParams::default())
            .map_err(|e| err(format!("{e} (is the llama.cpp build newer than the model architecture? see the log above)")))?;
        let gguf_template = model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok());
        let family = match cfg.template {
            TemplateChoice::ChatMl => Family::ChatMl,
            TemplateChoice::Llama3 => Family::Llama3,
            TemplateChoice::Gemma => Family::Gemma,
            TemplateChoice::SmolLm => Family::SmolLm,
            TemplateChoice::Auto => gguf_template
                .as_deref()
                .and_then(Family::detect)
                .unwrap_or(Family::ChatMl),
        };
        let thinking_template = gguf_template
            .as_deref()
            .is_some_and(prompt::template_thinks);
        let info = ModelInfo {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            architecture: model
                .meta_val_str("general.architecture")
                .unwrap_or_default(),
            description: model.meta_val_str("general.name").unwrap_or_default(),
            params: model.n_params(),
            file_bytes: meta.len(),
            template_family: gguf_template
                .as_deref()
                .and_then(Family::detect)
                .map(Family::name),
            thinking_template,
            llama_cpp: llama_cpp_info(),
            key: file_key(path, meta.len()).map_err(|e| err(e.to_string()))?,
        };
        Ok(Self {
            model: Arc::new(model),
            info,
            gguf_template,
            family,
            choice: cfg.template,
            thinking: cfg.thinking,
        })
    }

    pub fn family(&self) -> Family {
        self.family
    }

    /// Token count of a text as data: how the passages and the alarm are
    /// read (see `tokens`).
    pub fn count_tokens(&self, text: &str) -> usize {
        tokens::data_tokens(&self.model, text).len()
    }

    /// The text every prompt starts with: template, system prompt and the
    /// fixed head of the user turn. Slots keep it in their KV cache.
    pub fn static_prefix(&self) -> Result<String, LlmError> {
        self.prompt(prompt::USER_HEAD, false)
            .map(|p| p.head().to_string())
    }

    /// Tokens of `static_prefix` as a slot holds them (0 when the template
    /// cannot give one): how much of the cache a measurement keeps to start
    /// the way every daemon job starts.
    pub fn static_prefix_tokens(&self) -> usize {
        self.static_prefix()
            .map(|p| tokens::head_tokens(&self.model, &p).len())
            .unwrap_or(0)
    }

    /// Tokens of a prompt as a slot reads it.
    pub fn prompt_tokens(&self, p: &Prompt) -> usize {
        tokens::prompt_tokens(&self.model, p).len()
    }

    /// The prompt for a user turn: `render` around it, the turn marked as
    /// data. The template never sees the turn, so nothing in it can steer
    /// the template either.
    pub fn prompt(&self, user: &str, fallback: bool) -> Result<Prompt, LlmError> {
        let rendered = self.render(prompt::SYSTEM_PROMPT, prompt::USER_MARK, fallback)?;
        prompt::fill(&rendered, user).ok_or_else(|| {
            LlmError::Template("the chat template drops or repeats the user text".into())
        })
    }

    /// Renders system + user with the assistant turn opened. `fallback` forces
    /// the hand-written family template (the retry path after a hang).
    pub fn render(&self, system: &str, user: &str, fallback: bool) -> Result<String, LlmError> {
        let mut text = match (&self.gguf_template, self.choice, fallback) {
            (Some(t), TemplateChoice::Auto, false) => {
                let tmpl = llama_cpp_2::model::LlamaChatTemplate::new(t)
                    .map_err(|e| LlmError::Template(e.to_string()))?;
                let msgs = [
                    LlamaChatMessage::new("system".into(), system.into()),
                    LlamaChatMessage::new("user".into(), user.into()),
                ]
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| LlmError::Template(e.to_string()))?;
                match self.model.apply_chat_template(&tmpl, &msgs, true) {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(error = %e, "gguf template not supported by llama.cpp; using the family template");
                        self.family.render(system, user)
                    }
                }
            }
            _ => self.family.render(system, user),
        };
        if self.info.thinking_template && !self.thinking && !text.ends_with("</think>\n\n") {
            text.push_str(prompt::EMPTY_THINK);
        }
        Ok(text)
    }
}

fn file_key(path: &Path, len: u64) -> std::io::Result<String> {
    use sha2::Digest;
    use std::io::{Read, Seek, SeekFrom};
    const MIB: u64 = 1 << 20;
    let mut f = std::fs::File::open(path)?;
    let mut h = sha2::Sha256::new();
    h.update(len.to_le_bytes());
    h.update(env!("CARGO_PKG_VERSION").as_bytes());
    let mut buf = vec![0u8; MIB.min(len) as usize];
    f.read_exact(&mut buf)?;
    h.update(&buf);
    f.seek(SeekFrom::Start(len.saturating_sub(MIB)))?;
    f.read_exact(&mut buf)?;
    h.update(&buf);
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

fn llama_cpp_info() -> String {
    system_info().to_string()
}

/// `llama_print_system_info` rebuilds one static string on every call, so
/// slots starting together must not call it each; read it once.
fn system_info() -> &'static str {
    static INFO: OnceLock<String> = OnceLock::new();
    INFO.get_or_init(|| {
        // SAFETY: returns a static NUL-terminated string owned by llama.cpp,
        // copied out before anything else can call it (the OnceLock).
        let p = unsafe { llama_cpp_sys_2::llama_print_system_info() };
        if p.is_null() {
            return String::new();
        }
        let s = unsafe { std::ffi::CStr::from_ptr(p) };
        s.to_string_lossy().trim().to_string()
    })
}

/// The llama-cpp-sys-2 release Cargo.toml pins with `=`: it fixes the
/// bundled llama.cpp sources. Not readable from the dependency at build time;
/// `llama_cpp_sys_pin_matches_cargo_toml` keeps the two together.
pub const LLAMA_CPP_SYS: &str = "0.1.160";

/// Identifies the linked llama.cpp for saved prompt-prefix states, whose
/// layout only that build promises to read back. The crate release names
/// the sources (the bundled tree has no git commit: ggml reports "unknown");
/// ggml's version and the system info add what the build compiled in.
pub fn llama_cpp_build() -> &'static str {
    static BUILD: OnceLock<String> = OnceLock::new();
    BUILD.get_or_init(|| {
        let c = |p: *const std::ffi::c_char| {
            if p.is_null() {
                return String::new();
            }
            // SAFETY: ggml returns static NUL-terminated strings.
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        };
        // SAFETY: both return pointers to static strings, no arguments.
        let (version, commit) = unsafe {
            (
                c(llama_cpp_sys_2::ggml_version()),
                c(llama_cpp_sys_2::ggml_commit()),
            )
        };
        format!(
            "llama-cpp-sys-2 {LLAMA_CPP_SYS}; ggml {version} {commit}; {}",
            system_info()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llama_cpp_sys_pin_matches_cargo_toml() {
        let pin = format!("llama-cpp-sys-2 = {{ version = \"={LLAMA_CPP_SYS}\"");
        assert!(
            include_str!("../../Cargo.toml").contains(&pin),
            "Cargo.toml does not pin {pin}: update LLAMA_CPP_SYS with the dependency"
        );
    }

    #[test]
    fn llama_cpp_build_names_the_crate_release() {
        let _ = backend();
        let b = llama_cpp_build();
        assert!(
            b.starts_with(&format!("llama-cpp-sys-2 {LLAMA_CPP_SYS}; ggml ")),
            "{b}"
        );
    }
}
