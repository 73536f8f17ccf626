//! A slot's llama.cpp context and its KV bookkeeping: which tokens the cache
//! holds, decoding after them (in chunks, or one batch with logits for the
//! rows asked), dropping them from a position on, and bringing the cache to
//! a new prompt with as much of what it holds reused as possible. Every
//! decode reports progress to the watchdog and stops on its cancel flag.

use std::sync::Arc;

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::fault;
use super::generate::Tally;
use super::job::SlotSettings;
use super::lookup;
use super::prompt_cache::PromptCache;
use super::LlmError;
use crate::watchdog::Progress;

/// A slot's context and its KV bookkeeping.
pub(super) struct SlotState<'m> {
    pub(super) model: &'m LlamaModel,
    pub(super) ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Tokens whose keys/values are in the cache, at positions 0..len.
    pub(super) kv: Vec<LlamaToken>,
    pub(super) n_batch: usize,
    pub(super) n_ctx: usize,
    pub(super) progress: &'m Progress,
    /// What the running job has chosen, fed and drafted so far.
    pub(super) tally: Tally,
    /// Recent prompts' KV states, to resume a prompt that shares them.
    pub(super) prompts: PromptCache,
    /// Measured ms of a k-row verification (index k-1), once per context.
    pub(super) verify_ms: Option<Vec<f64>>,
    /// The length of the last answer's prompt, whose state is still to be
    /// saved (`save_unsaved`).
    pub(super) unsaved: Option<usize>,
}

impl<'m> SlotState<'m> {
    pub(super) fn new(
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
            tally: Tally::default(),
            prompts: PromptCache::new(s.prompt_cache_bytes),
            verify_ms: None,
            unsaved: None,
        }
    }

    pub(super) fn tokenize(&self, text: &str, special: bool) -> Vec<LlamaToken> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), special, special)
    }

    pub(super) fn piece(&self, t: LlamaToken) -> Vec<u8> {
        self.model.vocab().token_to_piece(t, false, None)
    }

    /// Decodes `tokens` after the cache, in chunks; logits for the last one.
    /// Returns the batch index of that logit row.
    pub(super) fn decode(&mut self, tokens: &[LlamaToken]) -> Result<i32, LlmError> {
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
            fault::native_stall();
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
    pub(super) fn decode_rows(&mut self, tokens: &[LlamaToken]) -> Result<(), LlmError> {
        self.decode_rows_with_logits(tokens, tokens.len())
    }

    /// `decode_rows` with logits for the first `with_logits` rows only.
    pub(super) fn decode_rows_with_logits(
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
    pub(super) fn decode_batch(
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
        let t0 = std::time::Instant::now();
        self.ctx.decode(&mut self.batch).map_err(|e| {
            if self.progress.cancelled() {
                LlmError::Cancelled
            } else {
                LlmError::Decode(e.to_string())
            }
        })?;
        // Where a generation's time goes, call by call (`RUST_LOG=tidewatch=trace`).
        tracing::trace!(
            rows = tokens.len(),
            us = t0.elapsed().as_micros() as u64,
            "decode"
        );
        self.kv.extend_from_slice(tokens);
        self.progress.tick(self.tally.generated);
        Ok(())
    }

    /// Drops cached tokens from position `n` on (rejected draft tokens).
    pub(super) fn truncate(&mut self, n: usize) -> Result<(), LlmError> {
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

    /// Keeps only the first `n` cached tokens (0: none), for a measurement
    /// that starts cold or from the static prefix.
    pub(super) fn keep(&mut self, n: usize) {
        self.save_unsaved();
        // A measurement that asks for a cold or prefix-only cache must not be
        // served from a saved prompt either.
        self.prompts.clear();
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

    /// Brings the cache to `prompt`, reusing the longest common prefix, and
    /// returns the logits index plus how many tokens were reused.
    pub(super) fn prefill(&mut self, prompt: &[LlamaToken]) -> Result<(i32, usize), LlmError> {
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

    /// The cache's sequence state as llama.cpp writes it, unless that is
    /// more than `max` bytes (then None, and nothing is copied).
    pub(super) fn read_state(&self, max: usize) -> std::io::Result<Option<Vec<u8>>> {
        let flags = LlamaStateSeqFlags::empty();
        let size = self.ctx.state_seq_get_size_ext(0, flags);
        if size > max {
            return Ok(None);
        }
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
        Ok(Some(state))
    }
}
