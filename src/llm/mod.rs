//! The LLM: one loaded model shared by generation slots, each slot an OS
//! thread with its own context, driven from async code under the watchdog.
//!
//! Owns model loading, prompt rendering (GGUF template or the hand-written
//! family template), slot lifecycles (start, cancel, reset, replace) and the
//! model's identity for status and logs. It never talks to MQTT and never
//! builds a diagnosis: `pipeline` does that from a `GenOutput`.
//!
//! A slot: `job` is what it is asked and answers; `thread` is its OS thread;
//! inside it `context` keeps the KV cache, `warm` puts the static prefix in
//! (`prefix` is the saved state's file), `prompt_cache` keeps recent
//! prompts' states, and `generate` runs a job. The answer is written by
//! `decode_json` (values sampled, the JSON fed) and `choose` (items picked),
//! with `speculate` drafting values and `json_text` the text rules both
//! follow; `fault` injects the watchdog tests' faults.

pub mod grammar;
pub mod lookup;
pub mod prefix;
pub mod tokens;

mod choose;
mod context;
mod decode_json;
mod fault;
mod generate;
mod job;
mod json_text;
mod prompt_cache;
mod speculate;
mod thread;
mod warm;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, OnceLock};
use std::time::Duration;

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::model::{LlamaChatMessage, LlamaModel};

use crate::config::{LlmConfig, TemplateChoice, WatchdogConfig};
use crate::prompt::{self, Family, Prompt};
use crate::watchdog::{judge, Limits, Progress, Verdict};
pub use job::{top_logits, GenOutput, GenRequest, SlotSettings, Step, Style};
pub use prefix::PrefixSpec;
pub use speculate::verify_rows;
pub use warm::Warmed;

#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("model file {path} cannot be loaded: {reason}")]
    Load { path: String, reason: String },
    #[error("cannot create a llama.cpp context: {0}")]
    Context(String),
    #[error("decode failed: {0}")]
    Decode(String),
    #[error("prompt needs {need} tokens of context, llm.ctx is {have}")]
    ContextFull { need: usize, have: usize },
    #[error("grammar rejected by llama.cpp: {0}")]
    Grammar(String),
    #[error("generation was cancelled")]
    Cancelled,
    #[error("model output is unusable: {0}")]
    Unusable(String),
    #[error("chat template cannot be applied: {0}")]
    Template(String),
    #[error("slot {0} thread is gone")]
    SlotGone(usize),
}

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

/// Counters the slots share with the status reporter.
#[derive(Debug, Default)]
pub struct SlotCounters {
    pub restarts: AtomicU64,
    pub lost: AtomicU64,
}

/// Why a slot job did not produce output.
#[derive(Debug, Clone)]
pub enum SlotFailure {
    /// The watchdog found it hung; the job was cancelled and the context rebuilt.
    Hung(Verdict),
    /// Hung and did not return from the cancel: the thread was abandoned and
    /// replaced by a fresh slot.
    Lost(Verdict),
    /// The job failed by itself (decode error, unusable output).
    Failed(LlmError),
}

/// The async handle of one slot thread.
pub struct Slot {
    pub id: usize,
    model: Arc<LlamaModel>,
    settings: SlotSettings,
    tx: mpsc::SyncSender<thread::SlotMsg>,
    pub progress: Arc<Progress>,
    counters: Arc<SlotCounters>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Slot {
    /// Starts a slot thread and waits until its context exists.
    pub async fn start(
        id: usize,
        model: Arc<LlamaModel>,
        settings: SlotSettings,
        counters: Arc<SlotCounters>,
    ) -> Result<Self, LlmError> {
        let (tx, progress, thread) = spawn_thread(id, model.clone(), settings.clone()).await?;
        Ok(Self {
            id,
            model,
            settings,
            tx,
            progress,
            counters,
            thread: Some(thread),
        })
    }

    /// Runs a job under the watchdog.
    pub async fn run(
        &mut self,
        req: GenRequest,
        wd: &WatchdogConfig,
        deadline: Duration,
    ) -> Result<GenOutput, SlotFailure> {
        let limits = Limits {
            stall: wd.stall_timeout,
            deadline,
        };
        let (reply, mut rx) = tokio::sync::oneshot::channel();
        if self.tx.try_send(thread::SlotMsg::Run(req, reply)).is_err() {
            return Err(SlotFailure::Failed(LlmError::SlotGone(self.id)));
        }
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = &mut rx => {
                    return match r {
                        Ok(Ok(out)) => Ok(out),
                        Ok(Err(e)) => Err(SlotFailure::Failed(e)),
                        Err(_) => Err(SlotFailure::Failed(LlmError::SlotGone(self.id))),
                    };
                }
                _ = tick.tick() => {
                    let p = &self.progress;
                    let verdict = judge(&p.snapshot(), p.now_ms(), &limits);
                    if !verdict.is_hung() {
                        continue;
                    }
                    tracing::warn!(slot = self.id, reason = verdict.reason(), ?verdict, "slot hung; cancelling its job");
                    p.cancel();
                    return match tokio::time::timeout(wd.hard_timeout, &mut rx).await {
                        Ok(Ok(_)) => {
                            self.reset(wd.hard_timeout).await;
                            Err(SlotFailure::Hung(verdict))
                        }
                        _ => {
                            self.replace().await;
                            Err(SlotFailure::Lost(verdict))
                        }
                    };
                }
            }
        }
    }

    /// Keeps only the first `n` tokens of the slot's KV cache (0: all gone),
    /// so a measurement can start cold or from the static prefix alone.
    pub async fn keep_cache(&self, n: usize) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if self.tx.try_send(thread::SlotMsg::Keep(n, reply)).is_ok() {
            let _ = rx.await;
        }
    }

    /// Median ms of one verification decode of 1..=`rows` rows (index k-1),
    /// after the cached prefix: what a draft costs against a single step.
    pub async fn verify_cost(&self, rows: usize, reps: usize) -> Result<Vec<f64>, LlmError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx
            .try_send(thread::SlotMsg::VerifyCost(rows, reps, reply))
            .map_err(|_| LlmError::Decode("slot is busy or gone".into()))?;
        rx.await
            .map_err(|_| LlmError::Decode("slot thread ended".into()))?
    }

    /// Drops and rebuilds the context; replaces the thread if it does not answer.
    async fn reset(&mut self, hard: Duration) {
        self.counters.restarts.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = tokio::sync::oneshot::channel();
        if self.tx.try_send(thread::SlotMsg::Reset(reply)).is_ok() {
            if let Ok(Ok(Ok(()))) = tokio::time::timeout(hard, rx).await {
                tracing::info!(slot = self.id, "slot context rebuilt");
                return;
            }
        }
        self.replace().await;
    }

    /// Abandons the current thread (it may be wedged in native code) and starts
    /// a fresh one. Counted as lost: the process heartbeat stops, so systemd
    /// restarts tidewatch to reclaim the thread; the new slot serves until then.
    async fn replace(&mut self) {
        self.counters.lost.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            slot = self.id,
            "slot thread did not return from cancel; replacing it"
        );
        match spawn_thread(self.id, self.model.clone(), self.settings.clone()).await {
            Ok((tx, progress, thread)) => {
                self.tx = tx;
                self.progress = progress;
                // The old thread is abandoned, not joined: it may never return.
                self.thread = Some(thread);
            }
            Err(e) => {
                tracing::error!(slot = self.id, error = %e, "replacement slot failed to start")
            }
        }
    }
}

impl Slot {
    /// Stops the slot for good: cancels whatever it decodes (a job or the
    /// warm-up), closes its channel and joins its thread, waiting at most
    /// `hard`. Returns whether the thread ended.
    pub async fn stop(self, hard: Duration) -> bool {
        let Slot {
            id,
            tx,
            progress,
            thread,
            ..
        } = self;
        progress.stop();
        drop(tx);
        let Some(thread) = thread else {
            return true;
        };
        // A plain thread, not spawn_blocking: the runtime waits for its
        // blocking tasks at exit, and a wedged slot would hold it forever.
        let (tx, joined) = tokio::sync::oneshot::channel();
        let _ = std::thread::Builder::new()
            .name(format!("tidewatch-join-{id}"))
            .spawn(move || {
                let _ = tx.send(thread.join().is_ok());
            });
        match tokio::time::timeout(hard, joined).await {
            Ok(_) => {
                tracing::info!(slot = id, "slot stopped");
                true
            }
            Err(_) => {
                tracing::error!(
                    slot = id,
                    "slot thread did not stop within watchdog.hard_timeout_s; exiting without it"
                );
                false
            }
        }
    }
}

type Spawned = (
    mpsc::SyncSender<thread::SlotMsg>,
    Arc<Progress>,
    std::thread::JoinHandle<()>,
);

async fn spawn_thread(
    id: usize,
    model: Arc<LlamaModel>,
    settings: SlotSettings,
) -> Result<Spawned, LlmError> {
    let progress = Arc::new(Progress::new());
    let (tx, rx) = mpsc::sync_channel(1);
    let (ready_tx, ready_rx) = mpsc::channel();
    let p = progress.clone();
    let thread = std::thread::Builder::new()
        .name(format!("tidewatch-slot-{id}"))
        .spawn(move || thread::run(model, settings, p, rx, ready_tx, id))
        .map_err(|e| LlmError::Context(format!("cannot spawn slot thread: {e}")))?;
    let ready = tokio::task::spawn_blocking(move || ready_rx.recv())
        .await
        .map_err(|e| LlmError::Context(e.to_string()))?;
    match ready {
        Ok(Ok(())) => Ok((tx, progress, thread)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(LlmError::SlotGone(id)),
    }
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
