//! A slot's OS thread: what it is sent (`SlotMsg`), its body (build the
//! context, warm it, serve jobs until the channel closes), and the abort hook
//! through which llama.cpp reports progress from inside a decode and learns
//! that the job was cancelled. The thread reports progress; it never decides
//! on its own that it is hung (that is `watchdog`).

use std::num::NonZeroU32;
use std::sync::{mpsc, Arc, Mutex};

use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::model::LlamaModel;

use super::error::LlmError;
use super::generate::generate;
use super::job::{GenOutput, GenRequest, SlotSettings};
use super::kv::{BlockWarm, Kv};
use super::speculate::{measure_verify, verify_cost};
use super::warm;
use crate::config::KvType;
use crate::prompt::Prompt;
use crate::watchdog::Progress;

pub(super) enum SlotMsg {
    Run(
        GenRequest,
        tokio::sync::oneshot::Sender<Result<GenOutput, LlmError>>,
    ),
    /// Drop the context and build a fresh one (after a cancelled job).
    Reset(tokio::sync::oneshot::Sender<Result<(), LlmError>>),
    /// Keep only the first n cached tokens (0: cold), and no saved prompt
    /// state in RAM, nor on disk when asked. For measurements.
    Keep(usize, bool, tokio::sync::oneshot::Sender<()>),
    /// Time one decode of 1..=n rows with logits for every row (what a draft
    /// verification costs), `reps` times each, after the cached prefix.
    VerifyCost(
        usize,
        usize,
        tokio::sync::oneshot::Sender<Result<Vec<f64>, LlmError>>,
    ),
    /// The last answer is published: write its prompt's disk states, if no
    /// job came since (`GenRequest::save_on_publish`).
    Published,
    /// Read a prompt's passage block and keep its state on disk
    /// (`tidewatch warm`).
    WarmBlock(
        Prompt,
        tokio::sync::oneshot::Sender<Result<BlockWarm, LlmError>>,
    ),
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

/// Context params with llama.cpp's abort callback set. The pinned
/// llama-cpp-2 (`LLAMA_CPP_SYS`) does not wrap `abort_callback`, and
/// `LlamaContextParams` is a single-field wrapper of `llama_context_params`;
/// `transmute` checks the sizes, and `abort_params_keep_settings` tests that
/// the round trip keeps the fields.
fn with_abort(params: LlamaContextParams, progress: &Arc<Progress>) -> LlamaContextParams {
    // SAFETY: same size (checked by transmute) and a single-field struct.
    let mut raw: llama_cpp_sys_2::llama_context_params = unsafe { std::mem::transmute(params) };
    raw.abort_callback = Some(abort_callback);
    raw.abort_callback_data = Arc::as_ptr(progress) as *mut std::ffi::c_void;
    // SAFETY: as above.
    unsafe { std::mem::transmute(raw) }
}

fn context_params(s: &SlotSettings, progress: &Arc<Progress>) -> LlamaContextParams {
    let p = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(s.ctx))
        .with_n_batch(s.batch)
        .with_n_ubatch(s.batch.min(512))
        .with_n_threads(s.threads as i32)
        .with_n_threads_batch(s.threads as i32)
        // llama_perf timings feed the overhead check against llama.cpp's own figures.
        .with_no_perf(false);
    let p = match s.kv_type {
        KvType::F16 => p,
        // A quantized V cache needs flash attention, which llama.cpp turns
        // on by itself where the CPU build supports it.
        KvType::Q8_0 => p
            .with_type_k(KvCacheType::Q8_0)
            .with_type_v(KvCacheType::Q8_0),
    };
    with_abort(p, progress)
}

/// The slot thread's body. Runs until the channel closes.
pub(super) fn run(
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
    let backend = super::model::backend();
    let build = || -> Result<LlamaContext<'_>, LlmError> {
        let _g = CONTEXT_BUILD.lock().unwrap_or_else(|e| e.into_inner());
        model
            .new_context(backend, context_params(&settings, &progress))
            .map_err(|e| LlmError::Context(e.to_string()))
    };
    let mut state = match build() {
        Ok(ctx) => {
            let _ = ready.send(Ok(()));
            Kv::new(&model, ctx, &settings, &progress, slot)
        }
        Err(e) => {
            let _ = ready.send(Err(e));
            return;
        }
    };
    // After `ready`, so the daemon connects meanwhile; the first job simply
    // queues behind the prefix on this thread.
    warm_up(&mut state, &settings, &progress);
    while let Ok(msg) = rx.recv() {
        match msg {
            SlotMsg::Run(req, reply) => {
                // The watchdog's bound sits a little above the generation's own:
                // exceeding it means the loop lost its bound, not a long answer.
                progress.start_job(req.max_tokens + 16);
                // A panic in the job is blamed on the job's alarm.
                crate::crash::running_slot_job(Some(slot));
                crate::crash::injected_panic(crate::crash::Place::Slot, req.prompt.text.as_bytes());
                let r = generate(&mut state, &req);
                crate::crash::running_slot_job(None);
                progress.finish_job();
                let _ = reply.send(r);
                if req.save_on_publish {
                    state.save_unsaved_ram();
                } else {
                    state.save_unsaved();
                }
            }
            SlotMsg::Published => state.save_published(),
            SlotMsg::Keep(n, disk_too, reply) => {
                state.keep(n, disk_too);
                let _ = reply.send(());
            }
            SlotMsg::WarmBlock(prompt, reply) => {
                let p = super::tokens::prompt_tokens_block(&model, &prompt);
                let _ = reply.send(state.warm_block(&p));
            }
            SlotMsg::VerifyCost(rows, reps, reply) => {
                let _ = reply.send(verify_cost(&mut state, rows, reps));
            }
            SlotMsg::Reset(reply) => {
                drop(state);
                match build() {
                    Ok(ctx) => {
                        state = Kv::new(&model, ctx, &settings, &progress, slot);
                        warm_up(&mut state, &settings, &progress);
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
fn warm_up(state: &mut Kv<'_>, settings: &SlotSettings, progress: &Progress) {
    if let Some(p) = &settings.prefix {
        progress.start_job(0);
        warm::warm(state, p);
        progress.finish_job();
    }
    if settings.verify_rows > 0 {
        progress.start_job(0);
        measure_verify(state, settings.verify_rows);
        progress.finish_job();
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
