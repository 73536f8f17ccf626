//! The job side of a slot: what the running job has chosen, fed and
//! drafted so far (the budget, the heartbeat and `GenOutput`'s figures read
//! it), and the model choices it traces. A new `Tally` per job; the KV side
//! (`kv`) outlives jobs and knows nothing of it.

use std::time::Instant;

use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::error::LlmError;
use super::fault;
use super::job::{top_logits, GenOutput, Step, STEP_TOP};
use super::kv::Kv;

/// What the running job has done so far.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Structural choices and sampled values, for the budget and the heartbeat.
    generated: u32,
    /// Answer tokens put in the cache without a model choice.
    fed: u32,
    first_token_at: Option<Instant>,
    drafted: u32,
    accepted: u32,
    /// The job's model choices, when its request traces them.
    steps: Option<Vec<Step>>,
}

impl Tally {
    pub(super) fn new(trace_steps: bool) -> Self {
        Self {
            steps: trace_steps.then(Vec::new),
            ..Self::default()
        }
    }

    /// Model choices so far: what the budget counts.
    pub(super) fn generated(&self) -> u32 {
        self.generated
    }

    /// Counts `n` model choices: the heartbeat, the budget and the
    /// `stall-after` fault read the count. Fails once the job is cancelled.
    pub(super) fn note_generated(&mut self, kv: &Kv<'_>, n: u32) -> Result<(), LlmError> {
        if self.first_token_at.is_none() {
            self.first_token_at = Some(Instant::now());
        }
        self.generated += n;
        let progress = kv.progress();
        progress.tick(self.generated);
        if fault::stall_after(self.generated, progress) {
            return Err(LlmError::Cancelled);
        }
        if progress.cancelled() {
            return Err(LlmError::Cancelled);
        }
        Ok(())
    }

    /// Notes that the model chose `token` from the logits row `idx`.
    pub(super) fn record(&mut self, kv: &Kv<'_>, idx: i32, token: LlamaToken) {
        if let Some(steps) = self.steps.as_mut() {
            steps.push(Step {
                token: token.0,
                top: top_logits(kv.logits(idx), STEP_TOP),
            });
        }
    }

    /// Samples from the logits row `idx` and records the choice.
    pub(super) fn sample(
        &mut self,
        kv: &Kv<'_>,
        sampler: &mut LlamaSampler,
        idx: i32,
    ) -> LlamaToken {
        let t = sampler.sample(kv.ctx(), idx);
        self.record(kv, idx, t);
        t
    }

    /// Queues answer tokens the model did not choose, to be decoded in one
    /// batch with the next choice.
    pub(super) fn feed(&mut self, pending: &mut Vec<LlamaToken>, tokens: &[LlamaToken]) {
        self.fed += tokens.len() as u32;
        pending.extend_from_slice(tokens);
    }

    pub(super) fn feed_text(&mut self, kv: &Kv<'_>, pending: &mut Vec<LlamaToken>, text: &str) {
        let t = kv.tokenize(text, false);
        self.feed(pending, &t);
    }

    /// Counts `n` tokens as fed that went into the cache by another way
    /// (a batch decoded ahead).
    pub(super) fn fed_ahead(&mut self, n: usize) {
        self.fed += n as u32;
    }

    /// Takes back `n` tokens counted as fed that never were (a lost bet,
    /// the closing tokens left pending).
    pub(super) fn unfeed(&mut self, n: usize) {
        self.fed = self.fed.saturating_sub(n as u32);
    }

    /// A draft of `n` tokens was verified, and `kept` of them kept.
    pub(super) fn drafted(&mut self, n: usize, kept: usize) {
        self.drafted += n as u32;
        self.accepted += kept as u32;
    }

    /// Writes the job's counts and timings into `out` (the job started at
    /// `t0`).
    pub(super) fn finish(&mut self, out: &mut GenOutput, t0: Instant) {
        out.generated_tokens = self.generated;
        out.fed_tokens = self.fed;
        out.draft_tokens = self.drafted;
        out.accepted_tokens = self.accepted;
        out.steps = self.steps.take().unwrap_or_default();
        let first = self.first_token_at.unwrap_or_else(Instant::now);
        out.ttft_ms = (first - t0).as_secs_f64() * 1e3;
        out.generation_ms = first.elapsed().as_secs_f64() * 1e3;
        out.total_ms = t0.elapsed().as_secs_f64() * 1e3;
    }
}
