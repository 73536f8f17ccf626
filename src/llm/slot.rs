//! One generation slot: an OS thread that owns a llama.cpp context and runs
//! generation jobs sent over a channel.
//!
//! Owns the decode loop: KV-prefix reuse, the static prefix (computed once,
//! saved in state_dir, restored at start), schema-driven generation (fixed JSON parts batched, only values
//! sampled), the reference whole-grammar path, and the fault-injection hooks.
//! It reports progress after every decode step and stops when its cancel flag
//! is raised; it never decides on its own that it is hung (that is `watchdog`).

use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::grammar::{self, Draft, DraftCause};
use super::lookup::{self, Lookup};
use super::prefix::{self, PrefixSpec, StateKey, StateShape};
use super::LlmError;
use crate::watchdog::{is_looping, Progress};

/// How the output is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Keys and punctuation fed as batched tokens; only values sampled.
    Schema,
    /// Everything sampled under the whole-diagnosis GBNF grammar (reference).
    FullGrammar,
}

/// A generation job.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// The rendered prompt, ending where the assistant's answer starts.
    pub prompt: crate::prompt::Prompt,
    pub n_passages: usize,
    pub max_tokens: u32,
    pub style: Style,
    pub seed: u32,
    pub temperature: f32,
    /// Prompt-lookup speculative decoding of the values; None decodes one
    /// token per step.
    pub lookup: Option<Lookup>,
    /// Record every model choice with its top logits (`GenOutput::steps`),
    /// so two runs can be compared where they part (eval only).
    pub trace_steps: bool,
    /// A chosen answer: the manual items the causes and actions are picked
    /// from. None: the model writes them (schema path) or the whole output
    /// (grammar path).
    pub choices: Option<grammar::Choices>,
    /// Cap on the summary's sampled tokens.
    pub summary_tokens: usize,
    /// A chosen answer writes its summary after the causes and actions, so
    /// that it is conditioned on them; the published field order is the same.
    pub summary_last: bool,
    /// Tokens of a chosen item the model is shown back in its answer (0:
    /// the whole item); the published item is whole either way.
    pub item_tokens: usize,
}

/// One token the model chose, with the highest raw logits of the row it was
/// chosen from (before penalties and grammar).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub token: i32,
    pub top: Vec<(i32, f32)>,
}

/// Logits kept per step: enough to find both runs' tokens at a divergence.
const STEP_TOP: usize = 8;

/// The `k` highest logits of a row, highest first.
pub fn top_logits(logits: &[f32], k: usize) -> Vec<(i32, f32)> {
    let mut v: Vec<(i32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as i32, l))
        .collect();
    let k = k.min(v.len());
    if k == 0 {
        return Vec::new();
    }
    v.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    v.truncate(k);
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// What a finished job produced, with its measurements.
#[derive(Debug, Clone, Default)]
pub struct GenOutput {
    pub draft: Draft,
    /// The JSON text as the model saw it (fixed parts and values).
    pub raw: String,
    pub prompt_tokens: u32,
    /// Prompt tokens found already in the KV cache and not decoded again.
    pub reused_tokens: u32,
    pub ttft_ms: f64,
    /// Tokens chosen by the model (sampled values plus structural decisions).
    pub generated_tokens: u32,
    /// Answer tokens the model did not choose, read in batches: the JSON
    /// skeleton and the rest of a chosen item after its last branch point.
    pub fed_tokens: u32,
    pub generation_ms: f64,
    pub prompt_ms: f64,
    /// Wall time of the whole job.
    pub total_ms: f64,
    /// llama.cpp's own decode time for the job (llama_perf: prompt + eval).
    pub llama_decode_ms: f64,
    /// Draft tokens proposed by prompt lookup, and how many the model agreed with.
    pub draft_tokens: u32,
    pub accepted_tokens: u32,
    /// Every model choice in order, when the request asked for it.
    pub steps: Vec<Step>,
    /// The answer as the model read it back (the cache after the prompt and
    /// what was left pending): the context of its every choice. A chosen
    /// item appears as its head (`llm.item_tokens`); `raw` has it whole.
    pub seen: String,
}

pub(crate) enum SlotMsg {
    Run(
        GenRequest,
        tokio::sync::oneshot::Sender<Result<GenOutput, LlmError>>,
    ),
    /// Drop the context and build a fresh one (after a cancelled job).
    Reset(tokio::sync::oneshot::Sender<Result<(), LlmError>>),
    /// Keep only the first n cached tokens (0: cold). For measurements.
    Keep(usize, tokio::sync::oneshot::Sender<()>),
    /// Time one decode of 1..=n rows with logits for every row (what a draft
    /// verification costs), `reps` times each, after the cached prefix.
    VerifyCost(
        usize,
        usize,
        tokio::sync::oneshot::Sender<Result<Vec<f64>, LlmError>>,
    ),
}

/// Context settings shared by every slot.
#[derive(Debug, Clone)]
pub struct SlotSettings {
    pub ctx: u32,
    pub batch: u32,
    pub threads: u32,
    pub cpus: Option<Vec<usize>>,
    /// The prompt text every job starts with (template + system prompt + the
    /// fixed head of the user turn), decoded when the slot starts.
    pub prefix: Option<PrefixSpec>,
    /// Bytes of RAM for this slot's saved prompt states (0: none).
    pub prompt_cache_bytes: usize,
    /// Rows up to which draft verifications may be padded, measured at the
    /// warm-up (0: no speculation configured; measured at the first draft
    /// if a job asks for one anyway).
    pub verify_rows: usize,
}

/// A finished job's prompt and the KV state that holds it.
struct SavedPrompt {
    tokens: Vec<LlamaToken>,
    state: Vec<u8>,
}

/// Restoring a saved state copies megabytes; a gain of a few tokens is read
/// faster than that.
const MIN_RESTORE_GAIN: usize = 32;

/// How a slot got its prefix into the KV cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Warmed {
    Restored,
    Computed,
    Failed,
}

/// llama.cpp contexts must not be created concurrently from one model
/// (llama-cpp-2 documents the race), so slot threads take turns.
static CONTEXT_BUILD: Mutex<()> = Mutex::new(());

extern "C" fn abort_callback(data: *mut std::ffi::c_void) -> bool {
    // SAFETY: `data` is `Arc::as_ptr` of the slot's Progress, which the slot
    // thread keeps alive for as long as the context exists.
    let p = unsafe { &*(data as *const Progress) };
    p.heartbeat();
    p.cancelled()
}

/// Context params with llama.cpp's abort callback set. llama-cpp-2 0.1.160
/// does not wrap `abort_callback`, and `LlamaContextParams` is a single-field
/// wrapper of `llama_context_params`; `transmute` checks the sizes, and
/// `abort_params_keep_settings` tests that the round trip keeps the fields.
pub(crate) fn with_abort(
    params: LlamaContextParams,
    progress: &Arc<Progress>,
) -> LlamaContextParams {
    // SAFETY: same size (checked by transmute) and a single-field struct.
    let mut raw: llama_cpp_sys_2::llama_context_params = unsafe { std::mem::transmute(params) };
    raw.abort_callback = Some(abort_callback);
    raw.abort_callback_data = Arc::as_ptr(progress) as *mut std::ffi::c_void;
    // SAFETY: as above.
    unsafe { std::mem::transmute(raw) }
}

pub(crate) fn context_params(s: &SlotSettings, progress: &Arc<Progress>) -> LlamaContextParams {
    let p = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(s.ctx))
        .with_n_batch(s.batch)
        .with_n_ubatch(s.batch.min(512))
        .with_n_threads(s.threads as i32)
        .with_n_threads_batch(s.threads as i32)
        // llama_perf timings feed the overhead check against llama.cpp's own figures.
        .with_no_perf(false);
    with_abort(p, progress)
}

/// Fault injection (cargo feature `fault-injection`, env `TIDEWATCH_FAULT`).
mod fault {
    use super::*;

    #[derive(Debug, Clone, Copy, PartialEq)]
    pub enum Fault {
        None,
        StallAfter(u32),
        NativeStall,
    }

    static FIRED: AtomicBool = AtomicBool::new(false);

    pub fn active() -> Fault {
        if !cfg!(feature = "fault-injection") || FIRED.load(Ordering::SeqCst) {
            return Fault::None;
        }
        match std::env::var("TIDEWATCH_FAULT").ok().as_deref() {
            Some("native-stall") => Fault::NativeStall,
            Some(s) => s
                .strip_prefix("stall-after:")
                .and_then(|n| n.parse().ok())
                .map_or(Fault::None, Fault::StallAfter),
            None => Fault::None,
        }
    }

    /// Marks the fault as used; true for the one caller that fires it.
    pub fn fire() -> bool {
        !FIRED.swap(true, Ordering::SeqCst)
    }
}

/// The slot thread's body. Runs until the channel closes.
pub(crate) fn run(
    model: Arc<LlamaModel>,
    settings: SlotSettings,
    progress: Arc<Progress>,
    rx: mpsc::Receiver<SlotMsg>,
    ready: std::sync::mpsc::Sender<Result<(), LlmError>>,
    slot: usize,
) {
    if let Some(cpus) = &settings.cpus {
        if let Err(e) = pin_to(cpus) {
            tracing::warn!(slot, error = %e, "cannot pin slot thread to llm.cpus");
        }
    }
    let backend = super::backend();
    let build = || -> Result<LlamaContext<'_>, LlmError> {
        let _g = CONTEXT_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        model
            .new_context(backend, context_params(&settings, &progress))
            .map_err(|e| LlmError::Context(e.to_string()))
    };
    let mut state = match build() {
        Ok(ctx) => {
            let _ = ready.send(Ok(()));
            SlotState::new(&model, ctx, &settings, &progress)
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // After `ready`, so the daemon connects meanwhile; the first job simply
    // queues behind the prefix on this thread.
    warm(&mut state, &settings, &progress, slot);
    while let Ok(msg) = rx.recv() {
        match msg {
            SlotMsg::Run(req, reply) => {
                // The watchdog's bound sits a little above the generation's own:
                // exceeding it means the loop lost its bound, not a long answer.
                progress.start_job(req.max_tokens + 16);
                let r = state.generate(&req);
                progress.finish_job();
                let _ = reply.send(r);
            }
            SlotMsg::Keep(n, reply) => {
                state.keep(n);
                let _ = reply.send(());
            }
            SlotMsg::VerifyCost(rows, reps, reply) => {
                let _ = reply.send(state.verify_cost(rows, reps));
            }
            SlotMsg::Reset(reply) => {
                drop(state);
                match build() {
                    Ok(ctx) => {
                        state = SlotState::new(&model, ctx, &settings, &progress);
                        warm(&mut state, &settings, &progress, slot);
                        let _ = reply.send(Ok(()));
                    }
                    Err(e) => {
                        let _ = reply.send(Err(e));
                        return;
                    }
                }
            }
        }
    }
}

/// Runs the prefix warm-up as a job the watchdog can see: a job waiting
/// behind a warm-up that hangs in native code must find the slot hung and
/// have it replaced, not wait forever for a thread that never reads it.
fn warm(state: &mut SlotState<'_>, settings: &SlotSettings, progress: &Progress, slot: usize) {
    if let Some(p) = &settings.prefix {
        progress.start_job(0);
        state.warm(p, slot);
        progress.finish_job();
    }
    if settings.verify_rows > 0 {
        progress.start_job(0);
        state.measure_verify(settings.verify_rows, slot);
        progress.finish_job();
    }
}

/// Rows a verify-cost table spans for drafts of up to `draft_max` tokens:
/// the verification itself, rounded up to the next multiple of 4 (the
/// widest tile llama.cpp's CPU kernels use), so padding has a choice.
pub fn verify_rows(draft_max: usize) -> usize {
    (draft_max + 1).div_ceil(4) * 4
}

fn pin_to(cpus: &[usize]) -> nix::Result<()> {
    let mut set = nix::sched::CpuSet::new();
    for c in cpus {
        set.set(*c)?;
    }
    // Pinning the slot thread before llama.cpp starts its worker threads makes
    // them inherit the mask, so the whole slot stays on the chosen cores.
    nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set)
}

/// A slot's context and its KV bookkeeping.
pub(crate) struct SlotState<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Tokens whose keys/values are in the cache, at positions 0..len.
    kv: Vec<LlamaToken>,
    n_batch: usize,
    n_ctx: usize,
    progress: &'m Progress,
    /// Structural choices and sampled values, for the budget and the heartbeat.
    generated: u32,
    /// Answer tokens put in the cache without a model choice.
    fed: u32,
    /// The last `string_value` was closed by us (cap, budget, repetition).
    cut: bool,
    first_token_at: Option<Instant>,
    drafted: u32,
    accepted: u32,
    /// Recent prompts' KV states, oldest first, so an alarm that repeats
    /// after others came in between still reads only what is new to it.
    saved: std::collections::VecDeque<SavedPrompt>,
    saved_bytes: usize,
    cache_limit: usize,
    /// Measured ms of a k-row verification (index k-1), once per context.
    verify_ms: Option<Vec<f64>>,
    /// The job's model choices, when its request traces them.
    steps: Option<Vec<Step>>,
}

impl<'m> SlotState<'m> {
    pub(crate) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        s: &SlotSettings,
        progress: &'m Arc<Progress>,
    ) -> Self {
        Self {
            model,
            ctx,
            batch: LlamaBatch::new(s.batch as usize, 1),
            kv: Vec::new(),
            n_batch: s.batch as usize,
            n_ctx: s.ctx as usize,
            progress,
            generated: 0,
            fed: 0,
            cut: false,
            first_token_at: None,
            drafted: 0,
            accepted: 0,
            saved: std::collections::VecDeque::new(),
            saved_bytes: 0,
            cache_limit: s.prompt_cache_bytes,
            verify_ms: None,
            steps: None,
        }
    }

    /// Notes that the model chose `token` from the logits row `idx`.
    fn record(&mut self, idx: i32, token: LlamaToken) {
        if let Some(steps) = self.steps.as_mut() {
            steps.push(Step {
                token: token.0,
                top: top_logits(self.ctx.get_logits_ith(idx), STEP_TOP),
            });
        }
    }

    /// Queues answer tokens the model did not choose, to be decoded in one
    /// batch with the next choice.
    fn feed(&mut self, pending: &mut Vec<LlamaToken>, tokens: &[LlamaToken]) {
        self.fed += tokens.len() as u32;
        pending.extend_from_slice(tokens);
    }

    fn feed_text(&mut self, pending: &mut Vec<LlamaToken>, text: &str) {
        let t = self.tokenize(text, false);
        self.feed(pending, &t);
    }

    /// The text of the cache from `start` on, then of `pending`.
    fn seen(&self, start: usize, pending: &[LlamaToken]) -> String {
        let bytes: Vec<u8> = self.kv[start.min(self.kv.len())..]
            .iter()
            .chain(pending)
            .flat_map(|&t| self.piece(t))
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    fn tokenize(&self, text: &str, special: bool) -> Vec<LlamaToken> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), special, special)
    }

    fn piece(&self, t: LlamaToken) -> Vec<u8> {
        self.model.vocab().token_to_piece(t, false, None)
    }

    /// Decodes `tokens` after the cache, in chunks; logits for the last one.
    /// Returns the batch index of that logit row.
    fn decode(&mut self, tokens: &[LlamaToken]) -> Result<i32, LlmError> {
        if tokens.is_empty() {
            return Err(LlmError::Decode("nothing to decode".into()));
        }
        if self.kv.len() + tokens.len() >= self.n_ctx {
            return Err(LlmError::ContextFull {
                need: self.kv.len() + tokens.len(),
                have: self.n_ctx,
            });
        }
        let mut last_idx = 0;
        let mut i = 0;
        while i < tokens.len() {
            if self.progress.cancelled() {
                return Err(LlmError::Cancelled);
            }
            if fault::active() == fault::Fault::NativeStall && fault::fire() {
                tracing::warn!("fault injection: native-stall, this decode never returns");
                loop {
                    std::thread::sleep(Duration::from_secs(3600));
                }
            }
            // Whole batches: the abort callback reports progress from inside
            // a decode, so prompt reading needs no small chunks for the
            // watchdog's sake (small chunks cost prompt throughput).
            let end = (i + self.n_batch).min(tokens.len());
            let n = tokens.len();
            self.decode_batch(&tokens[i..end], |j| i + j + 1 == n)?;
            last_idx = (end - i - 1) as i32;
            i = end;
        }
        Ok(last_idx)
    }

    /// Decodes `tokens` after the cache in one batch with logits for every
    /// one of them: row i predicts the token after `tokens[i]`.
    fn decode_rows(&mut self, tokens: &[LlamaToken]) -> Result<(), LlmError> {
        self.decode_rows_with_logits(tokens, tokens.len())
    }

    /// `decode_rows` with logits for the first `with_logits` rows only.
    fn decode_rows_with_logits(
        &mut self,
        tokens: &[LlamaToken],
        with_logits: usize,
    ) -> Result<(), LlmError> {
        if tokens.is_empty() || tokens.len() > self.n_batch {
            return Err(LlmError::Decode(format!(
                "cannot verify {} tokens in a batch of {}",
                tokens.len(),
                self.n_batch
            )));
        }
        if self.kv.len() + tokens.len() >= self.n_ctx {
            return Err(LlmError::ContextFull {
                need: self.kv.len() + tokens.len(),
                have: self.n_ctx,
            });
        }
        if self.progress.cancelled() {
            return Err(LlmError::Cancelled);
        }
        self.decode_batch(tokens, |j| j < with_logits)
    }

    /// One llama_decode of `tokens` after the cache; `logits(j)` says which
    /// rows get logits.
    fn decode_batch(
        &mut self,
        tokens: &[LlamaToken],
        logits: impl Fn(usize) -> bool,
    ) -> Result<(), LlmError> {
        self.batch.clear();
        for (j, t) in tokens.iter().enumerate() {
            self.batch
                .add(*t, (self.kv.len() + j) as i32, &[0], logits(j))
                .map_err(|e| LlmError::Decode(e.to_string()))?;
        }
        self.ctx.decode(&mut self.batch).map_err(|e| {
            if self.progress.cancelled() {
                LlmError::Cancelled
            } else {
                LlmError::Decode(e.to_string())
            }
        })?;
        self.kv.extend_from_slice(tokens);
        self.progress.tick(self.generated);
        Ok(())
    }

    /// Drops cached tokens from position `n` on (rejected draft tokens).
    fn truncate(&mut self, n: usize) -> Result<(), LlmError> {
        if n >= self.kv.len() {
            return Ok(());
        }
        let ok = self
            .ctx
            .clear_kv_cache_seq(Some(0), Some(n as u32), None)
            .map_err(|e| LlmError::Decode(e.to_string()))?;
        if !ok {
            return Err(LlmError::Decode(format!(
                "llama.cpp could not drop cached tokens from position {n}"
            )));
        }
        self.kv.truncate(n);
        Ok(())
    }

    /// Draft tokens for the value being sampled, `t` just chosen: what
    /// followed the last match in the context, cut at the first token that
    /// would end or break the JSON string (drafts stop at the value's end).
    fn lookup_draft(&self, t: LlamaToken, spec: &Lookup, room: usize) -> Vec<LlamaToken> {
        let mut history = Vec::with_capacity(self.kv.len() + 1);
        history.extend_from_slice(&self.kv);
        history.push(t);
        let spec = Lookup {
            draft_max: spec.draft_max.min(room).min(self.n_batch.saturating_sub(1)),
            ..*spec
        };
        let r = lookup::draft(&history, &spec);
        history[r]
            .iter()
            .copied()
            .take_while(|d| matches!(classify(&self.piece(*d)), Piece::Body))
            .collect()
    }

    /// Puts the static prefix into the KV cache: restored from its saved
    /// state when there is one for this model, llama.cpp build, context shape
    /// and prompt, else decoded and saved. A state that does not load is
    /// removed and recomputed.
    pub(crate) fn warm(&mut self, spec: &PrefixSpec, slot: usize) -> Warmed {
        let t0 = Instant::now();
        let tokens = super::tokens::head_tokens(self.model, &spec.text);
        if tokens.is_empty() || tokens.len() + 1 >= self.n_ctx {
            return Warmed::Failed;
        }
        // What llama.cpp made of the settings, not the settings: it sizes the
        // buffers the state is read into.
        let shape = StateShape {
            n_ctx: self.ctx.n_ctx(),
            n_batch: self.ctx.n_batch(),
            n_ubatch: self.ctx.n_ubatch(),
        };
        let key = StateKey::new(&spec.model_key, super::llama_cpp_build(), shape);
        let path = spec.dir.as_ref().map(|d| d.join(key.file_name(&tokens)));
        if let Some(path) = path.as_ref().filter(|p| p.is_file()) {
            match self.restore_prefix(path, &key, &tokens) {
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
        self.kv.clear();
        self.ctx.clear_kv_cache();
        if let Err(e) = self.decode(&tokens) {
            tracing::warn!(slot, error = %e, "prompt prefix could not be decoded; jobs read it themselves");
            self.kv.clear();
            self.ctx.clear_kv_cache();
            return Warmed::Failed;
        }
        let ms = t0.elapsed().as_millis() as u64;
        match &path {
            Some(path) => match self.save_prefix(path, &key, slot) {
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
        &mut self,
        path: &std::path::Path,
        key: &StateKey,
        tokens: &[LlamaToken],
    ) -> Result<(), String> {
        let bytes = std::fs::read(path).map_err(|e| e.to_string())?;
        let (saved, state) = prefix::decode(&bytes, key).map_err(|e| e.to_string())?;
        if saved != tokens {
            return Err("its tokens differ from the prompt's".into());
        }
        self.kv.clear();
        self.ctx.clear_kv_cache();
        // SAFETY: the bytes are what `state_seq_get_data_ext` wrote for this
        // model, llama.cpp build and context shape (the header says so and
        // `decode` checked it, with the length and CRC).
        let ok = unsafe {
            self.ctx
                .state_seq_set_data_ext(state, 0, LlamaStateSeqFlags::empty())
        };
        if !ok {
            self.ctx.clear_kv_cache();
            return Err("llama.cpp rejected the state".into());
        }
        self.kv = saved;
        Ok(())
    }

    fn save_prefix(
        &self,
        path: &std::path::Path,
        key: &StateKey,
        slot: usize,
    ) -> std::io::Result<usize> {
        let flags = LlamaStateSeqFlags::empty();
        let size = self.ctx.state_seq_get_size_ext(0, flags);
        let mut state = vec![0u8; size];
        // SAFETY: the buffer has the size llama.cpp just reported.
        let n = unsafe {
            self.ctx
                .state_seq_get_data_ext(state.as_mut_ptr(), 0, flags)
        };
        if n != size {
            return Err(std::io::Error::other(format!(
                "llama.cpp wrote {n} of {size} state bytes"
            )));
        }
        let bytes = prefix::encode(key, &self.kv, &state);
        prefix::write_atomic(path, &bytes, slot)?;
        prefix::remove_stale(path);
        Ok(bytes.len())
    }

    /// Median milliseconds of one `decode_rows` of k = 1..=`rows` tokens
    /// (index k-1), each followed by dropping them again. The tokens are the
    /// cache's own, so the rows read like text.
    fn verify_cost(&mut self, rows: usize, reps: usize) -> Result<Vec<f64>, LlmError> {
        let base = self.kv.len();
        if base < rows {
            return Err(LlmError::Decode(format!(
                "verify cost needs {rows} cached tokens, the cache has {base}"
            )));
        }
        let sample: Vec<LlamaToken> = self.kv[base - rows..].to_vec();
        let mut out = Vec::with_capacity(rows);
        for k in 1..=rows {
            let mut ms = Vec::with_capacity(reps);
            // One untimed pass: the first decode of a new batch shape pays
            // for graph allocation.
            for rep in 0..=reps {
                let t = Instant::now();
                self.decode_rows(&sample[..k])?;
                if rep > 0 {
                    ms.push(t.elapsed().as_secs_f64() * 1e3);
                }
                self.truncate(base)?;
            }
            ms.sort_by(f64::total_cmp);
            out.push(ms[ms.len() / 2]);
        }
        Ok(out)
    }

    /// Measures what verifications of 1..=`rows` rows cost on this machine,
    /// so drafts are padded to a batch shape only where that is cheaper.
    /// Needs `rows` tokens in the cache (the prefix or the prompt).
    fn measure_verify(&mut self, rows: usize, slot: usize) {
        let rows = rows.min(self.n_batch).min(self.kv.len());
        if rows == 0 {
            return;
        }
        match self.verify_cost(rows, 3) {
            Ok(ms) => {
                let pads: Vec<usize> = (1..=rows).map(|r| lookup::padded_rows(r, &ms)).collect();
                tracing::info!(
                    slot,
                    ?ms,
                    ?pads,
                    "draft verification cost measured (ms by rows; rows padded to)"
                );
                self.verify_ms = Some(ms);
            }
            Err(e) => {
                tracing::warn!(slot, error = %e, "cannot measure draft verification cost; drafts are not padded");
                self.verify_ms = Some(Vec::new());
            }
        }
    }

    fn keep(&mut self, n: usize) {
        // A measurement that asks for a cold or prefix-only cache must not be
        // served from a saved prompt either.
        self.saved.clear();
        self.saved_bytes = 0;
        if n >= self.kv.len() {
            return;
        }
        let ok = n > 0
            && self
                .ctx
                .clear_kv_cache_seq(Some(0), Some(n as u32), None)
                .unwrap_or(false);
        if ok {
            self.kv.truncate(n);
        } else {
            self.ctx.clear_kv_cache();
            self.kv.clear();
        }
    }

    /// Restores the saved prompt state sharing the most with `prompt`, when
    /// it shares clearly more than the cache holds now.
    fn resume_saved(&mut self, prompt: &[LlamaToken]) {
        let current = lookup::common_prefix(&self.kv, prompt);
        let saved: Vec<&[LlamaToken]> = self.saved.iter().map(|s| s.tokens.as_slice()).collect();
        let Some((i, _)) = lookup::best_saved(prompt, &saved, current, MIN_RESTORE_GAIN) else {
            return;
        };
        self.ctx.clear_kv_cache();
        self.kv.clear();
        let entry = &self.saved[i];
        // SAFETY: the bytes are what `state_seq_get_data_ext` of this very
        // context wrote (same model, build and shape).
        let ok = unsafe {
            self.ctx
                .state_seq_set_data_ext(&entry.state, 0, LlamaStateSeqFlags::empty())
        };
        if ok {
            self.kv = entry.tokens.clone();
        } else {
            self.ctx.clear_kv_cache();
            tracing::warn!("saved prompt state did not restore; reading the prompt");
        }
    }

    /// Keeps this job's prompt state for later alarms that share it. The
    /// generated tokens are dropped first: no later prompt contains them.
    fn save_prompt(&mut self, prompt_len: usize) {
        if self.cache_limit == 0 || prompt_len == 0 || self.truncate(prompt_len).is_err() {
            return;
        }
        if self.kv.len() != prompt_len {
            return;
        }
        let flags = LlamaStateSeqFlags::empty();
        let size = self.ctx.state_seq_get_size_ext(0, flags);
        if size > self.cache_limit {
            return;
        }
        let mut state = vec![0u8; size];
        // SAFETY: the buffer has the size llama.cpp just reported.
        let n = unsafe {
            self.ctx
                .state_seq_get_data_ext(state.as_mut_ptr(), 0, flags)
        };
        if n != size {
            return;
        }
        if let Some(i) = self.saved.iter().position(|s| s.tokens == self.kv) {
            if let Some(old) = self.saved.remove(i) {
                self.saved_bytes -= old.state.len();
            }
        }
        while self.saved_bytes + size > self.cache_limit {
            match self.saved.pop_front() {
                Some(old) => self.saved_bytes -= old.state.len(),
                None => break,
            }
        }
        self.saved_bytes += size;
        self.saved.push_back(SavedPrompt {
            tokens: self.kv.clone(),
            state,
        });
    }

    /// Brings the cache to `prompt`, reusing the longest common prefix, and
    /// returns the logits index plus how many tokens were reused.
    fn prefill(&mut self, prompt: &[LlamaToken]) -> Result<(i32, usize), LlmError> {
        self.resume_saved(prompt);
        let mut lcp = lookup::common_prefix(&self.kv, prompt);
        // At least one token must be decoded to get fresh logits.
        if lcp == prompt.len() {
            lcp -= 1;
        }
        if lcp < self.kv.len() {
            let ok = self
                .ctx
                .clear_kv_cache_seq(Some(0), Some(lcp as u32), None)
                .map_err(|e| LlmError::Decode(e.to_string()))?;
            if !ok {
                self.ctx.clear_kv_cache();
                lcp = 0;
            }
            self.kv.truncate(lcp);
        }
        let idx = self.decode(&prompt[lcp..])?;
        Ok((idx, lcp))
    }

    pub(crate) fn generate(&mut self, req: &GenRequest) -> Result<GenOutput, LlmError> {
        self.generated = 0;
        self.fed = 0;
        self.first_token_at = None;
        self.drafted = 0;
        self.accepted = 0;
        self.steps = req.trace_steps.then(Vec::new);
        // llama.cpp starts a decode's clock at the decode and stops it at the
        // next synchronize; a decode whose logits nobody read (a cancelled
        // job) would otherwise bill the gap before this job to this job.
        self.ctx.synchronize();
        self.ctx.reset_timings();
        let t0 = Instant::now();
        let bos = super::tokens::prompt_tokens(self.model, &req.prompt);
        let prompt_tokens = bos.len() as u32;
        let mut out = GenOutput {
            prompt_tokens,
            ..Default::default()
        };
        let res = match (req.style, &req.choices) {
            (Style::Schema, Some(c)) => self.generate_chosen(req, c, bos, &mut out, t0),
            (Style::Schema, None) => self.generate_schema(req, bos, &mut out, t0),
            (Style::FullGrammar, _) => self.generate_full(req, bos, &mut out, t0),
        };
        if res.is_err() {
            // A cancelled or failed decode leaves the cache in an unknown state.
            self.kv.clear();
            self.ctx.clear_kv_cache();
        }
        res?;
        out.generated_tokens = self.generated;
        out.fed_tokens = self.fed;
        out.draft_tokens = self.drafted;
        out.accepted_tokens = self.accepted;
        out.steps = self.steps.take().unwrap_or_default();
        let first = self.first_token_at.unwrap_or_else(Instant::now);
        out.ttft_ms = (first - t0).as_secs_f64() * 1e3;
        out.generation_ms = first.elapsed().as_secs_f64() * 1e3;
        out.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t = self.ctx.timings();
        out.llama_decode_ms = t.t_p_eval_ms() + t.t_eval_ms();
        tracing::debug!(seen = %out.seen, "the answer as the model read it");
        Ok(out)
    }

    fn sampler(&self, grammar: &str, req: &GenRequest) -> Result<LlamaSampler, LlmError> {
        let g = LlamaSampler::grammar(self.model, grammar, "root")
            .map_err(|e| LlmError::Grammar(e.to_string()))?;
        let n_vocab = self.model.n_vocab();
        // top_k first keeps the grammar check to 40 candidates per step instead
        // of the whole vocabulary (151k for Qwen): that is most of the cost of
        // constrained sampling on a small CPU.
        let mut chain = vec![
            LlamaSampler::top_k(40),
            LlamaSampler::penalties(n_vocab, 64, 1.15, 0.0, 0.0),
            g,
        ];
        if req.temperature <= 0.0 {
            chain.push(LlamaSampler::greedy());
        } else {
            chain.push(LlamaSampler::temp(req.temperature));
            chain.push(LlamaSampler::dist(req.seed));
        }
        Ok(LlamaSampler::chain_simple(chain))
    }

    fn note_generated(&mut self, n: u32) -> Result<(), LlmError> {
        if self.first_token_at.is_none() {
            self.first_token_at = Some(Instant::now());
        }
        self.generated += n;
        self.progress.tick(self.generated);
        if let fault::Fault::StallAfter(k) = fault::active() {
            if self.generated >= k && fault::fire() {
                tracing::warn!(after = k, "fault injection: stall-after, no more progress");
                while !self.progress.cancelled() {
                    std::thread::sleep(Duration::from_millis(20));
                }
                return Err(LlmError::Cancelled);
            }
        }
        if self.progress.cancelled() {
            return Err(LlmError::Cancelled);
        }
        Ok(())
    }

    /// Samples one JSON string value (its closing quote included) starting
    /// with logits at `idx`. Returns the value and the new logits index. The
    /// closing token is left pending in `pending`.
    ///
    /// With `spec`, each sampled body token brings a draft (see
    /// `lookup_draft`) that is decoded with it in one batch; the draft is
    /// then checked position by position by sampling from the batch's own
    /// logits rows with the same sampler, so every token kept is the token
    /// the model would have produced at that point (greedy: the same; with
    /// temperature: the same distribution, sample-then-compare). Cached
    /// tokens after the first mismatch are dropped.
    fn string_value(
        &mut self,
        sampler: &mut LlamaSampler,
        mut idx: i32,
        cap: usize,
        budget: u32,
        spec: Option<&Lookup>,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        sampler.reset();
        let mut bytes: Vec<u8> = Vec::new();
        let mut toks: Vec<LlamaToken> = Vec::new();
        // A token already sampled (from a verification row) but not decoded.
        let mut next: Option<LlamaToken> = None;
        let mut cut = false;
        loop {
            // A value with nothing yet may take one token past the budget, so a
            // required field is never empty; the shares keep that to a token.
            let over = self.generated >= budget && !toks.is_empty();
            if toks.len() >= cap || over || is_looping(&toks) {
                if is_looping(&toks) {
                    tracing::debug!("repetition guard closed a value");
                }
                self.feed_text(pending, "\"");
                cut = true;
                break;
            }
            let t = match next.take() {
                Some(t) => t,
                None => {
                    let t = sampler.sample(&self.ctx, idx);
                    self.record(idx, t);
                    t
                }
            };
            let piece = self.piece(t);
            self.note_generated(1)?;
            match classify(&piece) {
                Piece::Body => {
                    bytes.extend_from_slice(&piece);
                    toks.push(t);
                }
                Piece::Close(n) => {
                    bytes.extend_from_slice(&piece[..n]);
                    pending.push(t);
                    break;
                }
                Piece::Invalid => {
                    // Every candidate was refused (possible with top_k before the
                    // grammar); close the value rather than emit broken JSON.
                    self.feed_text(pending, "\"");
                    break;
                }
            }
            let room = cap.saturating_sub(toks.len());
            let draft = match spec {
                Some(spec) if room > 0 && self.generated < budget => {
                    self.lookup_draft(t, spec, room)
                }
                _ => Vec::new(),
            };
            if draft.is_empty() {
                idx = self.decode(&[t])?;
                continue;
            }
            if self.verify_ms.is_none() {
                self.measure_verify(verify_rows(spec.map_or(1, |s| s.draft_max)), 0);
            }
            let base = self.kv.len();
            let mut batch = Vec::with_capacity(draft.len() + 4);
            batch.push(t);
            batch.extend_from_slice(&draft);
            let rows = lookup::padded_rows(batch.len(), self.verify_ms.as_deref().unwrap_or(&[]));
            let real = batch.len();
            // Filler rows repeat the last draft token; their logits are not
            // computed and the cache drops them with the rejected drafts.
            let room = self.n_ctx.saturating_sub(self.kv.len() + 1);
            batch.resize(
                rows.min(self.n_batch).min(room).max(real),
                *batch.last().unwrap_or(&t),
            );
            let tt = Instant::now();
            self.decode_rows_with_logits(&batch, real)?;
            // What a verification costs against a single step decides
            // whether lookup pays on a machine (README, speculative decoding).
            tracing::trace!(
                rows = batch.len(),
                ms = tt.elapsed().as_secs_f64() * 1e3,
                "draft verified"
            );
            self.drafted += draft.len() as u32;
            let mut kept = 0;
            for (i, d) in draft.iter().enumerate() {
                let over = self.generated >= budget;
                if toks.len() >= cap || over || is_looping(&toks) {
                    break;
                }
                let s = sampler.sample(&self.ctx, i as i32);
                self.record(i as i32, s);
                if s != *d {
                    next = Some(s);
                    break;
                }
                self.note_generated(1)?;
                bytes.extend_from_slice(&self.piece(s));
                toks.push(s);
                kept += 1;
            }
            self.accepted += kept as u32;
            self.truncate(base + 1 + kept)?;
            // All kept: the last row predicts what follows them.
            idx = kept as i32;
        }
        let s = valid_utf8_prefix(bytes);
        self.cut = cut;
        let s = if cut { to_last_clause(&s) } else { &s };
        Ok(s.trim().to_string())
    }

    /// A cause's likelihood, chosen from `LIKELIHOODS` (the middle one once
    /// the budget is spent).
    fn likelihood(
        &mut self,
        budget: u32,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        self.feed_text(pending, &grammar::CAUSE_TO_LIKELIHOOD[1..]);
        let l = self.choose_or(&grammar::LIKELIHOODS, 1, budget, pending)?;
        Ok(grammar::LIKELIHOODS[l].to_string())
    }

    /// Whether a list goes on: the model chooses between `next` and `end`
    /// when `more` allows another item; otherwise `end` is fed. True if
    /// another item follows.
    fn goes_on(
        &mut self,
        more: bool,
        next: &str,
        end: &str,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<bool, LlmError> {
        if more {
            return Ok(self.choose(&[next, end], pending)? == 0);
        }
        self.feed_text(pending, end);
        Ok(false)
    }

    /// Moves the end of an item's head on until the head is whole text: no
    /// character cut between tokens and no escape cut after its backslash
    /// (the model would read a broken character or `\"` as text). None when
    /// that leaves nothing worth cutting.
    fn whole_head(&self, item: &[LlamaToken], mut end: usize) -> Option<usize> {
        let mut bytes: Vec<u8> = item[..end].iter().flat_map(|&t| self.piece(t)).collect();
        while end + 2 <= item.len() {
            if head_is_whole(&bytes) {
                return Some(end);
            }
            bytes.extend(self.piece(item[end]));
            end += 1;
        }
        None
    }

    /// `goes_on` where the list's next item is chosen right after `next`:
    /// the decode that decides between `next` and `end` reads `next` too, on
    /// the bet that the list goes on (it does more often than it ends), so
    /// the next item's first choice has its logits without a decode of its
    /// own. When the list ends instead, the bet's tokens leave the cache.
    /// Returns None when the list ends, else the logits row for what follows
    /// `next` (None inside Some when the bet could not be placed).
    fn goes_on_ahead(
        &mut self,
        more: bool,
        next: &str,
        end: &str,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<Option<Option<i32>>, LlmError> {
        if !more {
            self.feed_text(pending, end);
            return Ok(None);
        }
        let next_t = self.tokenize(next, false);
        let end_t = self.tokenize(end, false);
        let shared = next_t
            .iter()
            .zip(&end_t)
            .take_while(|(a, b)| a == b)
            .count();
        let parts = shared < next_t.len() && shared < end_t.len();
        let fits = pending.len() + next_t.len() <= self.n_batch;
        if !parts || !fits || pending.len() + shared == 0 {
            return Ok(self.goes_on(more, next, end, pending)?.then_some(None));
        }
        // The branch token is the model's choice, not fed.
        self.fed += (next_t.len() - 1) as u32;
        let mut batch = std::mem::take(pending);
        let branch = batch.len() + shared - 1;
        batch.extend_from_slice(&next_t);
        let last = batch.len() - 1;
        let base = self.kv.len();
        if base + batch.len() >= self.n_ctx {
            return Err(LlmError::ContextFull {
                need: base + batch.len(),
                have: self.n_ctx,
            });
        }
        self.decode_batch(&batch, |j| j == branch || j == last)?;
        let logits = self.ctx.get_logits_ith(branch as i32);
        let score = |t: LlamaToken| {
            logits
                .get(t.0 as usize)
                .copied()
                .unwrap_or(f32::NEG_INFINITY)
        };
        let (go, end_tok) = (next_t[shared], end_t[shared]);
        let goes = score(go) >= score(end_tok);
        self.record(branch as i32, if goes { go } else { end_tok });
        self.note_generated(1)?;
        if goes {
            return Ok(Some(Some(last as i32)));
        }
        // The bet's tokens from the branch on were never the answer's.
        self.fed -= (next_t.len() - shared - 1) as u32;
        self.truncate(base + branch + 1)?;
        pending.push(end_tok);
        self.feed(pending, &end_t[shared + 1..]);
        Ok(None)
    }

    /// `string_value` for the summary: one the cap or the budget cut off ends
    /// at its last whole clause (`to_whole_clause`), never mid-phrase.
    fn summary_value(
        &mut self,
        sampler: &mut LlamaSampler,
        idx: i32,
        cap: usize,
        budget: u32,
        spec: Option<&Lookup>,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        let s = self.string_value(sampler, idx, cap, budget, spec, pending)?;
        Ok(if self.cut {
            to_whole_clause(&s).to_string()
        } else {
            s
        })
    }

    /// Picks one of `alts` by the model's logits, feeding shared tokens as
    /// fixed text. `pending` holds tokens not yet decoded; returns the choice.
    fn choose(&mut self, alts: &[&str], pending: &mut Vec<LlamaToken>) -> Result<usize, LlmError> {
        self.choose_or(alts, alts.len() - 1, u32::MAX, pending)
    }

    /// Like `choose`, but once `budget` is spent the model is not consulted:
    /// `default` is taken, so the output closes without another model step.
    fn choose_or(
        &mut self,
        alts: &[&str],
        default: usize,
        budget: u32,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<usize, LlmError> {
        let seqs: Vec<Vec<LlamaToken>> = alts.iter().map(|a| self.tokenize(a, false)).collect();
        let (k, depth) = self.choose_tokens(
            &seqs,
            (0..seqs.len()).collect(),
            default,
            budget,
            pending,
            None,
        )?;
        self.feed(pending, &seqs[k][depth.min(seqs[k].len())..]);
        Ok(k)
    }

    /// Picks one of the token sequences `live` names, walking them together:
    /// where they all go on with the same token it is fed, not chosen; where
    /// they part, the model's logits pick the branch (one model step), and
    /// the sequences off that branch drop out. Only branch points cost a
    /// model step, and the tokens between them go to the model in one batch.
    /// Once `budget` is spent the walk takes `default` (or the first live
    /// sequence) without the model. Returns the choice and how many of its
    /// tokens are in `pending`; the caller feeds the rest (or not).
    ///
    /// `ready` is a logits row already decoded for the position after what
    /// is cached (`goes_on_ahead`): the first branch point uses it if nothing
    /// was fed before it.
    fn choose_tokens(
        &mut self,
        seqs: &[Vec<LlamaToken>],
        mut live: Vec<usize>,
        default: usize,
        budget: u32,
        pending: &mut Vec<LlamaToken>,
        mut ready: Option<i32>,
    ) -> Result<(usize, usize), LlmError> {
        let mut depth = 0;
        loop {
            let spent = self.generated >= budget;
            if live.len() == 1 || spent {
                let k = match live.contains(&default) {
                    true if spent => default,
                    _ => live[0],
                };
                return Ok((k, depth));
            }
            let firsts: Vec<Option<LlamaToken>> =
                live.iter().map(|&k| seqs[k].get(depth).copied()).collect();
            if firsts.iter().all(|t| *t == firsts[0] && t.is_some()) {
                self.feed(pending, &[firsts[0].expect("checked")]);
                depth += 1;
                continue;
            }
            let idx = match ready.take() {
                Some(idx) if pending.is_empty() => idx,
                _ => self.decode(&std::mem::take(pending))?,
            };
            let logits = self.ctx.get_logits_ith(idx);
            let score = |t: Option<LlamaToken>| {
                t.map_or(f32::NEG_INFINITY, |t| {
                    logits
                        .get(t.0 as usize)
                        .copied()
                        .unwrap_or(f32::NEG_INFINITY)
                })
            };
            let best = live
                .iter()
                .copied()
                .max_by(|a, b| {
                    score(seqs[*a].get(depth).copied())
                        .total_cmp(&score(seqs[*b].get(depth).copied()))
                })
                .expect("at least two alternatives");
            let tok = seqs[best].get(depth).copied();
            if let Some(t) = tok {
                self.record(idx, t);
            }
            live.retain(|&k| seqs[k].get(depth).copied() == tok);
            self.note_generated(1)?;
            if let Some(t) = tok {
                pending.push(t);
            }
            depth += 1;
        }
    }

    /// Picks one of the manual items not taken yet, by `choose_tokens` over
    /// each item's JSON string body and its closing quote. Returns the item's
    /// index; the tokens the model is shown of it are left in `pending`.
    ///
    /// The model is shown the item's first `shown` tokens (at least those up
    /// to where it parted from the others) and the closing quote, not the
    /// whole item: it has read every item in the prompt, the head names it,
    /// and each fed token costs time on the board (0: the whole item).
    fn choose_item(
        &mut self,
        items: &[Vec<LlamaToken>],
        taken: &[bool],
        budget: u32,
        shown: usize,
        pending: &mut Vec<LlamaToken>,
        ready: Option<i32>,
    ) -> Result<usize, LlmError> {
        let live: Vec<usize> = (0..items.len()).filter(|&k| !taken[k]).collect();
        // The manuals list causes most likely first and checks in the order
        // to do them: with the budget spent, the first untaken item is taken.
        let default = live.first().copied().unwrap_or(0);
        let (k, depth) = self.choose_tokens(items, live, default, budget, pending, ready)?;
        let item = &items[k];
        let depth = depth.min(item.len());
        match shown_end(item.len(), depth, shown).and_then(|e| self.whole_head(item, e)) {
            None => self.feed(pending, &item[depth..]),
            Some(end) => {
                self.feed(pending, &item[depth..end]);
                let quote = self.tokenize("\"", false);
                self.feed(pending, &quote);
            }
        }
        Ok(k)
    }

    /// A chosen answer: the summary sampled (first or, with `summary_last`,
    /// after the lists), each cause and each action picked from the manual
    /// items in `choices` (`choose_item`), no item twice; the likelihoods and
    /// the ends of the lists are choices as in `generate_schema`.
    fn generate_chosen(
        &mut self,
        req: &GenRequest,
        choices: &grammar::Choices,
        mut prompt: Vec<LlamaToken>,
        out: &mut GenOutput,
        t0: Instant,
    ) -> Result<(), LlmError> {
        let budget = req.max_tokens;
        let answer_start = prompt.len();
        let open = if req.summary_last {
            grammar::OPEN_CAUSES
        } else {
            grammar::OPEN
        };
        prompt.extend(self.tokenize(open, false));
        let mut pending: Vec<LlamaToken> = Vec::new();
        let prompt_len = prompt.len();
        let (idx, reused) = self.prefill(&prompt)?;
        out.reused_tokens = reused as u32;
        out.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut sampler = self.sampler(grammar::STRING_BODY_GBNF, req)?;
        let mut draft = Draft::default();
        // The summary's share is kept from the lists (as `generate_schema`
        // shares out the budget): a tight `max_tokens` shortens the lists,
        // never empties the summary, and the job stays within it.
        let summary_cap = req.summary_tokens.max(1).min((budget / 2).max(1) as usize);
        let lists = match req.summary_last {
            true => budget.saturating_sub(summary_cap as u32),
            false => budget,
        };
        if !req.summary_last {
            draft.summary = self.summary_value(
                &mut sampler,
                idx,
                summary_cap,
                budget,
                req.lookup.as_ref(),
                &mut pending,
            )?;
            self.feed_text(&mut pending, &grammar::SUMMARY_TO_CAUSES[1..]);
        }
        let item_tokens = |s: &Self, items: &[String]| -> Vec<Vec<LlamaToken>> {
            items
                .iter()
                .map(|t| s.tokenize(&format!("{}\"", grammar::json_body(t)), false))
                .collect()
        };
        let causes = item_tokens(self, &choices.causes);
        let mut taken = vec![false; causes.len()];
        // The prompt's last row is the first cause's first choice.
        let mut ready = req.summary_last.then_some(idx);
        while !causes.is_empty() {
            let k =
                self.choose_item(&causes, &taken, lists, req.item_tokens, &mut pending, ready)?;
            taken[k] = true;
            draft.probable_causes.push(DraftCause {
                cause: choices.causes[k].clone(),
                likelihood: self.likelihood(lists, &mut pending)?,
                item: Some(k),
            });
            let more = draft.probable_causes.len() < grammar::MAX_CAUSES
                && taken.contains(&false)
                && self.generated < lists;
            match self.goes_on_ahead(
                more,
                grammar::NEXT_CAUSE,
                grammar::CAUSES_TO_ACTIONS,
                &mut pending,
            )? {
                Some(row) => ready = row,
                None => break,
            }
        }
        let actions = item_tokens(self, &choices.actions);
        let mut taken = vec![false; actions.len()];
        let mut ready = None;
        while !actions.is_empty() {
            let k = self.choose_item(
                &actions,
                &taken,
                lists,
                req.item_tokens,
                &mut pending,
                ready,
            )?;
            taken[k] = true;
            draft.actions.push(choices.actions[k].clone());
            draft.action_items.push(k);
            let more = draft.actions.len() < grammar::MAX_ACTIONS
                && taken.contains(&false)
                && self.generated < lists;
            let end = if req.summary_last {
                grammar::ACTIONS_TO_SUMMARY
            } else {
                grammar::ACTIONS_TO_SOURCES
            };
            // The item's closing quote is already in: the fixed parts after it
            // go without theirs (the model read `""` here before).
            match self.goes_on_ahead(more, &grammar::NEXT_ITEM[1..], &end[1..], &mut pending)? {
                Some(row) => ready = row,
                None => break,
            }
        }
        if req.summary_last {
            let idx = self.decode(&std::mem::take(&mut pending))?;
            draft.summary = self.summary_value(
                &mut sampler,
                idx,
                summary_cap,
                budget,
                req.lookup.as_ref(),
                &mut pending,
            )?;
        }
        if req.summary_last {
            self.feed_text(&mut pending, "}");
        }
        // The closing tokens stay pending, as in `generate_schema`; they are
        // never decoded, so they are not counted as fed.
        self.fed = self.fed.saturating_sub(pending.len() as u32);
        out.seen = self.seen(answer_start, &pending);
        out.raw = render_raw(&draft);
        out.draft = draft;
        self.save_prompt(prompt_len);
        Ok(())
    }

    fn generate_schema(
        &mut self,
        req: &GenRequest,
        mut prompt: Vec<LlamaToken>,
        out: &mut GenOutput,
        t0: Instant,
    ) -> Result<(), LlmError> {
        let budget = req.max_tokens;
        let answer_start = prompt.len();
        prompt.extend(self.tokenize(grammar::OPEN, false));
        let prompt_len = prompt.len();
        let (mut idx, reused) = self.prefill(&prompt)?;
        out.reused_tokens = reused as u32;
        out.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut sampler = self.sampler(grammar::STRING_BODY_GBNF, req)?;
        let mut pending: Vec<LlamaToken> = Vec::new();
        // Every required value (summary, one cause, one action) gets a share of
        // the budget, so a tight budget shortens values instead of emptying them.
        let share = |gen: u32, parts: u32, cap: usize| -> usize {
            let left = budget.saturating_sub(gen) / parts;
            (left as usize).clamp(1, cap)
        };
        let cap = share(self.generated, 3, req.summary_tokens.max(1));
        let mut draft = Draft {
            summary: self.summary_value(
                &mut sampler,
                idx,
                cap,
                budget,
                req.lookup.as_ref(),
                &mut pending,
            )?,
            ..Default::default()
        };
        self.feed_text(&mut pending, &grammar::SUMMARY_TO_CAUSES[1..]);
        loop {
            idx = self.decode(&std::mem::take(&mut pending))?;
            let parts = if draft.probable_causes.is_empty() {
                2
            } else {
                1
            };
            let cap = share(self.generated, parts, grammar::ITEM_TOKENS);
            let cause = self.string_value(
                &mut sampler,
                idx,
                cap,
                budget,
                req.lookup.as_ref(),
                &mut pending,
            )?;
            draft.probable_causes.push(DraftCause {
                cause,
                likelihood: self.likelihood(budget, &mut pending)?,
                item: None,
            });
            // Another cause only if the actions still get their share.
            let more =
                draft.probable_causes.len() < grammar::MAX_CAUSES && self.generated + 6 < budget;
            if !self.goes_on(
                more,
                grammar::NEXT_CAUSE,
                grammar::CAUSES_TO_ACTIONS,
                &mut pending,
            )? {
                break;
            }
        }
        loop {
            idx = self.decode(&std::mem::take(&mut pending))?;
            let cap = share(self.generated, 1, grammar::ITEM_TOKENS);
            let action = self.string_value(
                &mut sampler,
                idx,
                cap,
                budget,
                req.lookup.as_ref(),
                &mut pending,
            )?;
            draft.actions.push(action);
            let more = draft.actions.len() < grammar::MAX_ACTIONS && self.generated + 2 < budget;
            // The value's closing token is pending: the fixed parts after it
            // go without their leading quote.
            let end = &grammar::ACTIONS_TO_SOURCES[1..];
            if !self.goes_on(more, &grammar::NEXT_ITEM[1..], end, &mut pending)? {
                break;
            }
        }
        let labels: Vec<String> = (1..=req.n_passages.max(1))
            .map(|i| format!("P{i}\""))
            .collect();
        let label_refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        loop {
            let s = self.choose_or(&label_refs, 0, budget, &mut pending)?;
            if !draft.sources.contains(&format!("P{}", s + 1)) {
                draft.sources.push(format!("P{}", s + 1));
            }
            let more = draft.sources.len() < req.n_passages && self.generated < budget;
            if !self.goes_on(more, ",\"", "]}", &mut pending)? {
                break;
            }
        }
        // The closing tokens stay pending: they would only be decoded to be
        // thrown away, and the next job's prefix match stops before them
        // anyway. Not decoded, so not counted as fed.
        self.fed = self.fed.saturating_sub(pending.len() as u32);
        out.seen = self.seen(answer_start, &pending);
        out.raw = render_raw(&draft);
        out.draft = draft;
        self.save_prompt(prompt_len);
        Ok(())
    }

    fn generate_full(
        &mut self,
        req: &GenRequest,
        prompt: Vec<LlamaToken>,
        out: &mut GenOutput,
        t0: Instant,
    ) -> Result<(), LlmError> {
        let (mut idx, reused) = self.prefill(&prompt)?;
        out.reused_tokens = reused as u32;
        out.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
        let grammar = grammar::full_gbnf(req.n_passages);
        let g = LlamaSampler::grammar(self.model, &grammar, "root")
            .map_err(|e| LlmError::Grammar(e.to_string()))?;
        // The grammar sees the whole vocabulary here: this is the reference path.
        let mut sampler = LlamaSampler::chain_simple([
            g,
            LlamaSampler::penalties(self.model.n_vocab(), 64, 1.15, 0.0, 0.0),
            LlamaSampler::temp(req.temperature.max(0.01)),
            LlamaSampler::dist(req.seed),
        ]);
        let mut bytes = Vec::new();
        let vocab = self.model.vocab();
        while self.generated < req.max_tokens {
            let t = sampler.sample(&self.ctx, idx);
            self.note_generated(1)?;
            if vocab.is_eog(t) {
                break;
            }
            bytes.extend_from_slice(&self.piece(t));
            if let Ok(d) = serde_json::from_slice::<Draft>(&bytes) {
                out.draft = d;
                out.raw = String::from_utf8_lossy(&bytes).into_owned();
                out.seen = out.raw.clone();
                return Ok(());
            }
            idx = self.decode(&[t])?;
        }
        out.raw = String::from_utf8_lossy(&bytes).into_owned();
        Err(LlmError::Unusable(format!(
            "output did not complete the schema within {} tokens",
            req.max_tokens
        )))
    }
}

enum Piece {
    Body,
    /// Ends the string; the value bytes are the first `n`.
    Close(usize),
    Invalid,
}

/// Where the model's view of a chosen item ends: None when it is shown
/// whole (its tokens end with the closing quote), else the end of its head,
/// after which the caller feeds a closing quote. `depth` tokens are already
/// fed; `shown` 0 means whole.
fn shown_end(len: usize, depth: usize, shown: usize) -> Option<usize> {
    // Cutting off only the closing quote, or a token before it, saves
    // nothing: the quote is fed either way.
    if shown == 0 || shown.max(depth) + 2 > len {
        return None;
    }
    Some(shown.max(depth))
}

/// True if `bytes` (the head of a JSON string body) ends on a character
/// boundary and not inside an escape.
fn head_is_whole(bytes: &[u8]) -> bool {
    let slashes = bytes.iter().rev().take_while(|&&b| b == b'\\').count();
    std::str::from_utf8(bytes).is_ok() && slashes % 2 == 0
}

fn classify(piece: &[u8]) -> Piece {
    for (i, b) in piece.iter().enumerate() {
        match b {
            b'"' => {
                return if i + 1 == piece.len() {
                    Piece::Close(i)
                } else {
                    Piece::Invalid
                }
            }
            b'\\' | 0x00..=0x1f | 0x7f => return Piece::Invalid,
            _ => {}
        }
    }
    if piece.is_empty() {
        Piece::Invalid
    } else {
        Piece::Body
    }
}

/// A value the cap or the budget cut off, back to the end of its last whole
/// sentence or clause, when that keeps at least a third of it: a summary that
/// ran past its share ends "…切换并清洗。主引擎lube_oil" otherwise. A point
/// inside a number ("2.5") is not an end.
fn to_last_clause(s: &str) -> &str {
    let chars: Vec<(usize, char)> = s.char_indices().collect();
    for k in (0..chars.len()).rev() {
        let (at, c) = chars[k];
        let after = chars.get(k + 1).map(|x| x.1);
        let end = match c {
            '。' | '！' | '？' | '；' => true,
            '.' | '!' | '?' | ';' => after.is_none_or(|a| a.is_whitespace() || !a.is_ascii()),
            _ => false,
        };
        if !end {
            continue;
        }
        if at * 3 < s.len() {
            break;
        }
        let cut = at + c.len_utf8();
        return s[..cut].trim_end_matches([';', '；']);
    }
    s
}

/// A cut summary back to its last whole clause: the end of its last
/// sentence, or else of its last clause (a comma, a colon), or else the
/// whole text when it has neither. A summary cut at "…或面板" says less than
/// one that stops at the comma before it, and says nothing false.
fn to_whole_clause(s: &str) -> &str {
    let s = to_last_clause(s);
    let sentence = |c: char| matches!(c, '。' | '！' | '？' | '.' | '!' | '?' | ';' | '；');
    if s.ends_with(sentence) {
        return s;
    }
    let clause = s
        .char_indices()
        .rev()
        .find(|&(at, c)| {
            let next = s[at + c.len_utf8()..].chars().next();
            match c {
                '，' | '、' | '：' => true,
                ',' | ':' => next.is_none_or(|n| n.is_whitespace()),
                _ => false,
            }
        })
        .map(|(at, _)| at);
    match clause {
        Some(at) if at > 0 => s[..at].trim_end(),
        _ => s,
    }
}

fn valid_utf8_prefix(mut bytes: Vec<u8>) -> String {
    match String::from_utf8(bytes.clone()) {
        Ok(s) => s,
        Err(e) => {
            bytes.truncate(e.utf8_error().valid_up_to());
            String::from_utf8(bytes).unwrap_or_default()
        }
    }
}

/// The JSON the schema path produced, for logs and validity checks.
pub fn render_raw(d: &Draft) -> String {
    let causes: Vec<serde_json::Value> = d
        .probable_causes
        .iter()
        .map(|c| serde_json::json!({"cause": c.cause, "likelihood": c.likelihood}))
        .collect();
    serde_json::json!({
        "summary": d.summary,
        "probable_causes": causes,
        "actions": d.actions,
        "sources": d.sources,
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_chosen_item_is_shown_by_its_head_and_never_less_than_its_branch() {
        // 12 tokens, the last one holding the closing quote.
        assert_eq!(shown_end(12, 1, 6), Some(6));
        // It parted from the others late: shown up to there.
        assert_eq!(shown_end(12, 8, 6), Some(8));
        // Cutting would drop only the quote token or one before it.
        assert_eq!(shown_end(12, 11, 6), None);
        assert_eq!(shown_end(7, 1, 6), None);
        assert_eq!(shown_end(8, 1, 6), Some(6));
        // 0: the whole item.
        assert_eq!(shown_end(40, 1, 0), None);
    }

    #[test]
    fn a_head_is_whole_on_a_character_boundary_outside_an_escape() {
        assert!(head_is_whole("运行泵".as_bytes()));
        assert!(!head_is_whole(&"运行泵".as_bytes()[..8]));
        assert!(!head_is_whole(br"say \"));
        assert!(!head_is_whole(br"a\\\"));
        assert!(head_is_whole(br"a\\"));
        assert!(head_is_whole(b""));
    }

    #[test]
    fn a_cut_summary_ends_at_its_last_whole_clause() {
        assert_eq!(
            to_whole_clause("蓄电池电压低，可能是太阳能输入不足，或面板"),
            "蓄电池电压低，可能是太阳能输入不足"
        );
        assert_eq!(
            to_whole_clause("Battery low: solar input weak, or the panels"),
            "Battery low: solar input weak"
        );
        assert_eq!(
            to_whole_clause("蓄电池电压低。可能是太阳能"),
            "蓄电池电压低。"
        );
        assert_eq!(to_whole_clause("no clause at all"), "no clause at all");
        // A decimal comma-less number is no clause end.
        assert_eq!(
            to_whole_clause("pressure 2,5 bar low"),
            "pressure 2,5 bar low"
        );
    }

    #[test]
    fn a_cut_off_value_ends_at_its_last_clause() {
        assert_eq!(
            to_last_clause(
                "核对现场压力表，压力持续下降应降速；查滤器压差，切换并清洗。主引擎lube_oil"
            ),
            "核对现场压力表，压力持续下降应降速；查滤器压差，切换并清洗。"
        );
        assert_eq!(
            to_last_clause("Check the cooler. Reduce load if rising; check the valve posi"),
            "Check the cooler. Reduce load if rising"
        );
        // A decimal point is not an end, and nothing short is kept.
        assert_eq!(
            to_last_clause("pressure fell to 1.6 bar and keeps"),
            "pressure fell to 1.6 bar and keeps"
        );
        assert_eq!(
            to_last_clause("Low. and then a long trailing fragment"),
            "Low. and then a long trailing fragment"
        );
    }

    #[test]
    fn top_logits_are_the_highest_first() {
        let l = [0.5, 3.0, -1.0, 2.0, 3.5];
        assert_eq!(top_logits(&l, 3), vec![(4, 3.5), (1, 3.0), (3, 2.0)]);
        assert_eq!(top_logits(&l, 9).len(), 5);
        assert!(top_logits(&[], 4).is_empty());
    }

    #[test]
    fn pieces_are_classified_for_json_strings() {
        assert!(matches!(classify(b"oil"), Piece::Body));
        assert!(matches!(classify(b"\""), Piece::Close(0)));
        assert!(matches!(classify(b"ing\""), Piece::Close(3)));
        assert!(matches!(classify(b"\","), Piece::Invalid));
        assert!(matches!(classify(b"a\\n"), Piece::Invalid));
        assert!(matches!(classify(b"\n"), Piece::Invalid));
    }

    #[test]
    fn split_utf8_is_cut_back_to_a_char_boundary() {
        let mut b = "滑油".as_bytes().to_vec();
        b.pop();
        assert_eq!(valid_utf8_prefix(b), "滑");
    }

    #[test]
    fn abort_params_keep_settings() {
        let p = Arc::new(Progress::new());
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(1234))
            .with_n_batch(77)
            .with_n_threads(3);
        let q = with_abort(params, &p);
        assert_eq!(q.n_ctx(), NonZeroU32::new(1234));
        assert_eq!(q.n_batch(), 77);
        assert_eq!(q.n_threads(), 3);
        let raw: llama_cpp_sys_2::llama_context_params = unsafe { std::mem::transmute(q) };
        assert!(raw.abort_callback.is_some());
        assert_eq!(raw.abort_callback_data as *const Progress, Arc::as_ptr(&p));
    }
}
