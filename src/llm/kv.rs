//! The KV side of a slot: its llama.cpp context, the batch, which tokens the
//! cache holds, and the prompt states kept to resume later prompts
//! (`PromptCache`, RAM and disk). Owns decoding after the cache (in chunks,
//! or one batch with logits for the rows asked), dropping tokens from a
//! position on, and bringing the cache to a new prompt with as much of what
//! it holds, or of a saved state, reused as possible. Every decode reports
//! progress to the watchdog and stops on its cancel flag.
//!
//! It knows nothing of a job's answer: the decoders (`decode_json`,
//! `choose`, `speculate`) take a `Kv` and the job's `Tally` as arguments.

use std::sync::Arc;

use llama_cpp_2::context::session::LlamaStateSeqFlags;
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;

use super::error::LlmError;
use super::fault;
use super::job::SlotSettings;
use super::lookup;
use super::prefix::{self, StateShape};
use super::prompt_cache::{PromptCache, Restore};
use super::tokens::{Cuts, PromptTokens};
use crate::watchdog::Progress;

/// A slot's context and its KV bookkeeping.
pub(super) struct Kv<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    /// Tokens whose keys/values are in the cache, at positions 0..len.
    tokens: Vec<LlamaToken>,
    n_batch: usize,
    n_ctx: usize,
    /// Tokens per prompt decode: small enough that a pre-emption request is
    /// seen within seconds on the board, where one 256-token batch takes
    /// ~25 s (`[llm] prompt_chunk`).
    chunk: usize,
    progress: &'m Progress,
    /// The slot's number: its temp files, its log lines.
    slot: usize,
    /// What a saved state's layout depends on besides the model, the
    /// llama.cpp build and the shape: the KV cache's element type.
    kv_type: &'static str,
    /// Saved prompts' KV states, to resume a prompt that shares them.
    prompts: PromptCache,
    /// Measured ms of a k-row verification (index k-1), once per context.
    verify_ms: Option<Vec<f64>>,
    /// The last answer's prompt, whose state is still to be saved
    /// (`save_unsaved`): its length, and where its passage block ends.
    unsaved: Option<(usize, Cuts)>,
    /// The last answer's prompt, kept in RAM, whose disk states wait for the
    /// answer to be published (`save_published`); the next job drops them.
    disk_pending: Option<(usize, Cuts)>,
}

impl<'m> Kv<'m> {
    pub(super) fn new(
        model: &'m LlamaModel,
        ctx: LlamaContext<'m>,
        s: &SlotSettings,
        progress: &'m Arc<Progress>,
        slot: usize,
    ) -> Self {
        let shape = StateShape {
            n_ctx: ctx.n_ctx(),
            n_batch: ctx.n_batch(),
            n_ubatch: ctx.n_ubatch(),
        };
        let prompts = PromptCache::new(
            s.prompt_cache_bytes,
            s.prompt_disk.as_ref().map(|d| (d, shape)),
        );
        Self {
            model,
            ctx,
            batch: LlamaBatch::new(s.batch as usize, 1),
            tokens: Vec::new(),
            n_batch: s.batch as usize,
            n_ctx: s.ctx as usize,
            chunk: s.prompt_chunk.clamp(1, s.batch.max(1) as usize),
            progress,
            slot,
            kv_type: s.kv_type.name(),
            prompts,
            verify_ms: None,
            unsaved: None,
            disk_pending: None,
        }
    }

    pub(super) fn model(&self) -> &'m LlamaModel {
        self.model
    }

    /// The context, for samplers and llama.cpp's timings.
    pub(super) fn ctx(&self) -> &LlamaContext<'m> {
        &self.ctx
    }

    pub(super) fn progress(&self) -> &'m Progress {
        self.progress
    }

    /// The tokens the cache holds.
    pub(super) fn tokens(&self) -> &[LlamaToken] {
        &self.tokens
    }

    pub(super) fn len(&self) -> usize {
        self.tokens.len()
    }

    pub(super) fn n_batch(&self) -> usize {
        self.n_batch
    }

    pub(super) fn n_ctx(&self) -> usize {
        self.n_ctx
    }

    /// What llama.cpp made of the settings, not the settings: it sizes the
    /// buffers a saved state is read into.
    pub(super) fn shape(&self) -> StateShape {
        StateShape {
            n_ctx: self.ctx.n_ctx(),
            n_batch: self.ctx.n_batch(),
            n_ubatch: self.ctx.n_ubatch(),
        }
    }

    pub(super) fn slot(&self) -> usize {
        self.slot
    }

    /// The llama.cpp build and KV type a saved state of this context is
    /// keyed by (`prefix::StateKey`).
    pub(super) fn state_build(&self) -> String {
        prefix::state_build(self.kv_type)
    }

    pub(super) fn verify_ms(&self) -> Option<&[f64]> {
        self.verify_ms.as_deref()
    }

    pub(super) fn set_verify_ms(&mut self, ms: Vec<f64>) {
        self.verify_ms = Some(ms);
    }

    /// The logits row `idx` of the last decode.
    pub(super) fn logits(&self, idx: i32) -> &[f32] {
        self.ctx.get_logits_ith(idx)
    }

    pub(super) fn tokenize(&self, text: &str, special: bool) -> Vec<LlamaToken> {
        self.model
            .vocab()
            .tokenize(text.as_bytes(), special, special)
    }

    pub(super) fn piece(&self, t: LlamaToken) -> Vec<u8> {
        self.model.vocab().token_to_piece(t, false, None)
    }

    /// The text of the cache from `start` on, then of `pending`.
    pub(super) fn text(&self, start: usize, pending: &[LlamaToken]) -> String {
        let bytes: Vec<u8> = self.tokens[start.min(self.tokens.len())..]
            .iter()
            .chain(pending)
            .flat_map(|&t| self.piece(t))
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// Starts a job's clock: llama.cpp starts a decode's clock at the decode
    /// and stops it at the next synchronize; a decode whose logits nobody
    /// read (a cancelled job) would otherwise bill the gap before this job
    /// to this job.
    pub(super) fn start_timings(&mut self) {
        self.ctx.synchronize();
        self.ctx.reset_timings();
    }

    /// llama.cpp's own decode time since `start_timings` (prompt + eval).
    pub(super) fn decode_ms(&mut self) -> f64 {
        let t = self.ctx.timings();
        t.t_p_eval_ms() + t.t_eval_ms()
    }

    /// Forgets every cached token (a failed decode leaves the cache in an
    /// unknown state).
    pub(super) fn clear(&mut self) {
        self.ctx.clear_kv_cache();
        self.tokens.clear();
    }

    /// Decodes `tokens` after the cache, `chunk` tokens a call (fewer than
    /// a batch where pre-emption needs it); logits for the last one.
    /// Returns the batch index of that logit row.
    pub(super) fn decode(&mut self, tokens: &[LlamaToken]) -> Result<i32, LlmError> {
        if tokens.is_empty() {
            return Err(LlmError::Decode("nothing to decode".into()));
        }
        self.fits(tokens.len())?;
        let mut last_idx = 0;
        let mut i = 0;
        while i < tokens.len() {
            self.check_stop()?;
            fault::native_stall();
            let end = (i + self.chunk).min(tokens.len());
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
        self.fits(tokens.len())?;
        self.check_stop()?;
        self.decode_batch(tokens, |j| j < with_logits)
    }

    /// Fails when `n` more tokens would not fit the context.
    pub(super) fn fits(&self, n: usize) -> Result<(), LlmError> {
        if self.tokens.len() + n >= self.n_ctx {
            return Err(LlmError::ContextFull {
                need: self.tokens.len() + n,
                have: self.n_ctx,
            });
        }
        Ok(())
    }

    /// Cancelled (watchdog, shutdown) or asked to make way for a more
    /// urgent alarm: either way the next model call does not start.
    fn check_stop(&self) -> Result<(), LlmError> {
        if self.progress.cancelled() {
            return Err(LlmError::Cancelled);
        }
        if self.progress.preempt_requested() {
            return Err(LlmError::Preempted);
        }
        Ok(())
    }

    /// One llama_decode of `tokens` after the cache; `logits(j)` says which
    /// rows get logits.
    pub(super) fn decode_batch(
        &mut self,
        tokens: &[LlamaToken],
        logits: impl Fn(usize) -> bool,
    ) -> Result<(), LlmError> {
        fault::slow_decode(self.progress);
        self.batch.clear();
        for (j, t) in tokens.iter().enumerate() {
            self.batch
                .add(*t, (self.tokens.len() + j) as i32, &[0], logits(j))
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
        self.tokens.extend_from_slice(tokens);
        self.progress.heartbeat();
        Ok(())
    }

    /// Drops cached tokens from position `n` on (rejected draft tokens).
    pub(super) fn truncate(&mut self, n: usize) -> Result<(), LlmError> {
        if n >= self.tokens.len() {
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
        self.tokens.truncate(n);
        Ok(())
    }

    /// Keeps only the first `n` cached tokens (0: none), for a measurement
    /// that starts cold or from the static prefix. A measurement that asks
    /// for a cold or prefix-only cache must not be served from a saved
    /// prompt either, so `tiers` (RAM, and disk when asked) are emptied.
    pub(super) fn keep(&mut self, n: usize, disk_too: bool) {
        self.save_unsaved();
        self.prompts.clear(disk_too);
        if n >= self.tokens.len() {
            return;
        }
        let ok = n > 0
            && self
                .ctx
                .clear_kv_cache_seq(Some(0), Some(n as u32), None)
                .unwrap_or(false);
        if ok {
            self.tokens.truncate(n);
        } else {
            self.clear();
        }
    }

    /// Brings the cache to `prompt`, reusing the longest common prefix of
    /// what it holds or of a saved state (`cuts`: where the prompt may be cut
    /// for the disk tier), and returns the
    /// logits index plus how many tokens were reused. A prompt read only in
    /// part (pre-empted, cancelled) keeps what was read in the cache.
    pub(super) fn prefill(
        &mut self,
        prompt: &[LlamaToken],
        cuts: Cuts,
    ) -> Result<(i32, usize), LlmError> {
        self.save_unsaved();
        self.resume_saved(prompt, cuts);
        let mut lcp = lookup::common_prefix(&self.tokens, prompt);
        // At least one token must be decoded to get fresh logits.
        if lcp == prompt.len() {
            lcp -= 1;
        }
        if lcp < self.tokens.len() {
            let ok = self
                .ctx
                .clear_kv_cache_seq(Some(0), Some(lcp as u32), None)
                .map_err(|e| LlmError::Decode(e.to_string()))?;
            if !ok {
                self.ctx.clear_kv_cache();
                lcp = 0;
            }
            self.tokens.truncate(lcp);
        }
        let idx = self.decode(&prompt[lcp..])?;
        Ok((idx, lcp))
    }

    /// Restores the saved prompt state sharing the most with `prompt`, when
    /// it shares clearly more than the cache holds now.
    fn resume_saved(&mut self, prompt: &[LlamaToken], cuts: Cuts) {
        let current = lookup::common_prefix(&self.tokens, prompt);
        // From the lookup on: a disk state is mapped and checksummed there,
        // which is most of its cost from a cold page cache.
        let t0 = std::time::Instant::now();
        let Some(found) = self.prompts.best(prompt, cuts, current) else {
            return;
        };
        let ok = match &found {
            Restore::Ram(i) => {
                let (tokens, state) = self.prompts.ram_entry(*i);
                // SAFETY: the bytes are what `state_seq_get_data_ext` of this
                // very context wrote (same model, build and shape).
                let ok = unsafe { set_seq_state(&mut self.ctx, state) };
                self.tokens = if ok { tokens.to_vec() } else { Vec::new() };
                ok
            }
            Restore::Disk(file) => match file.state() {
                // SAFETY: `PromptCache::best` opened the file under this
                // model, build and shape, and checked its length and CRC.
                Some(state) => unsafe { self.set_state(state, file.tokens().to_vec()) },
                None => false,
            },
        };
        let tier = found.tier();
        if ok {
            tracing::debug!(
                tier,
                tokens = self.tokens.len(),
                ms = (t0.elapsed().as_secs_f64() * 1e3 * 10.0).round() / 10.0,
                "prompt state restored"
            );
            self.prompts.used(&found);
        } else {
            tracing::warn!(
                tier,
                "saved prompt state did not restore; reading the prompt"
            );
            self.prompts.forget(found);
        }
    }

    /// Replaces the cache with a saved sequence state holding `tokens`.
    /// False (and an empty cache) when llama.cpp refuses it.
    ///
    /// # Safety
    /// `state` must be what `state_seq_get_data_ext` wrote for this model,
    /// llama.cpp build and context shape: llama.cpp aborts the process on a
    /// state it cannot read.
    pub(super) unsafe fn set_state(&mut self, state: &[u8], tokens: Vec<LlamaToken>) -> bool {
        let ok = set_seq_state(&mut self.ctx, state);
        self.tokens = if ok { tokens } else { Vec::new() };
        ok
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

    /// Marks the prompt of the answer just written (`prompt_len` tokens, cut
    /// for the disk tier at `cuts`) to be saved once the answer is out.
    pub(super) fn mark_unsaved(&mut self, prompt_len: usize, cuts: Cuts) {
        self.unsaved = Some((prompt_len, cuts));
    }

    /// Saves the state of the last answer's prompt (`unsaved`), if any, in
    /// RAM and on disk. One-shot commands call it once the answer is sent:
    /// copying the state out takes ~120 ms with the 1.5B stand-in here,
    /// writing it to disk more, which an answer need not wait for. A job
    /// that comes first saves it before it starts. Disk states the daemon
    /// left for after the publication (`save_unsaved_ram`) are dropped: a
    /// job that comes first never waits for flash writes.
    pub(super) fn save_unsaved(&mut self) {
        if self.disk_pending.take().is_some() {
            tracing::debug!(
                slot = self.slot,
                "a job came before the last answer's disk states: not written"
            );
        }
        if let Some((n, cuts)) = self.unsaved.take() {
            if self.save_ram(n) {
                self.save_disk(n, cuts);
            }
        }
    }

    /// The daemon's half of `save_unsaved`, once the answer is sent: the
    /// state in RAM now (a copy in memory, which the next job may restore),
    /// the disk states only when the answer is published (`save_published`).
    pub(super) fn save_unsaved_ram(&mut self) {
        if let Some((n, cuts)) = self.unsaved.take() {
            if self.save_ram(n) {
                self.disk_pending = Some((n, cuts));
            }
        }
    }

    /// Writes the disk states `save_unsaved_ram` left, if no job came since.
    pub(super) fn save_published(&mut self) {
        if let Some((n, cuts)) = self.disk_pending.take() {
            if self.tokens.len() == n {
                self.save_disk(n, cuts);
            }
        }
    }

    /// Brings the cache back to the prompt of `prompt_len` tokens (the
    /// generated tokens dropped: no later prompt contains them) and keeps
    /// its whole state in RAM; false when the cache no longer holds it.
    fn save_ram(&mut self, prompt_len: usize) -> bool {
        if prompt_len == 0 || self.truncate(prompt_len).is_err() || self.tokens.len() != prompt_len
        {
            return false;
        }
        if self.prompts.ram_enabled() {
            if let Ok(Some(state)) = self.read_state(self.prompts.ram_limit()) {
                self.prompts.insert_ram(self.tokens.clone(), state);
            }
        }
        true
    }

    /// Keeps on disk, across restarts, the prompt up to the alarm's reading
    /// (what the same alarm raised again shares) and up to its passage
    /// block (what alarms of the same sections share), each on its second
    /// sight and within the day's flash budget (`prompt_cache`).
    fn save_disk(&mut self, prompt_len: usize, cuts: Cuts) {
        // Longest first: each is the cache cut back to it, and the next job
        // reads what follows the cut it restores either way.
        for cut in cuts.within(prompt_len) {
            if !self.prompts.disk_wants_again(&self.tokens[..cut]) {
                continue;
            }
            if self.truncate(cut).is_err() {
                return;
            }
            self.save_block();
        }
    }

    /// Writes the cache's state (a passage block) to the disk tier; the
    /// file's size when it was written.
    fn save_block(&mut self) -> Option<usize> {
        match self.read_state(usize::MAX) {
            Ok(Some(state)) if !self.prompts.disk_budget_takes(&self.tokens, state.len()) => None,
            Ok(Some(state)) => self.prompts.insert_disk(&self.tokens, &state, self.slot),
            Ok(None) => None,
            Err(e) => {
                self.prompts.disk_failed(&e);
                None
            }
        }
    }

    /// `tidewatch warm`: reads a prompt's passage block and saves its state
    /// to the disk tier, unless the tier has it already.
    pub(super) fn warm_block(&mut self, prompt: &PromptTokens) -> Result<BlockWarm, LlmError> {
        let Some(block) = prompt.cuts.block.filter(|&b| b > 0) else {
            return Ok(BlockWarm::NoBlock);
        };
        let tokens = &prompt.tokens[..block];
        if !self.prompts.disk_enabled() {
            return Ok(BlockWarm::NoDisk);
        }
        if !self.prompts.disk_wants(tokens) {
            return Ok(BlockWarm::Exists);
        }
        self.save_unsaved();
        self.prefill(
            tokens,
            Cuts {
                block: Some(block),
                alarm: None,
            },
        )?;
        let state = match self.read_state(usize::MAX) {
            Ok(Some(state)) => state,
            Ok(None) => return Ok(BlockWarm::NotSaved),
            Err(e) => {
                self.prompts.disk_failed(&e);
                return Ok(BlockWarm::NotSaved);
            }
        };
        // Warming never evicts: what it would push out is as likely to be
        // needed as what it would write.
        if !self.prompts.disk_fits(&self.tokens, state.len()) {
            return Ok(BlockWarm::Full { bytes: state.len() });
        }
        match self.prompts.insert_disk(&self.tokens, &state, self.slot) {
            Some(bytes) => Ok(BlockWarm::Saved {
                tokens: block,
                bytes,
            }),
            None => Ok(BlockWarm::NotSaved),
        }
    }
}

/// What `tidewatch warm` did with one prompt's passage block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockWarm {
    /// Read and saved: its length in tokens and its file's size.
    Saved { tokens: usize, bytes: usize },
    /// The disk tier has it already.
    Exists,
    /// Read, but the disk tier could not keep it (the journal says why).
    NotSaved,
    /// The prompt has no alarm block, so no passage block to keep.
    NoBlock,
    /// `llm.prompt_cache_disk_mib` is 0.
    NoDisk,
    /// Read, but the tier's bound is reached: nothing was evicted for it.
    /// The size its file would have had.
    Full { bytes: usize },
}

/// Replaces the context's sequence with a saved state; an empty cache when
/// llama.cpp refuses it.
///
/// # Safety
/// As `Kv::set_state`.
unsafe fn set_seq_state(ctx: &mut LlamaContext<'_>, state: &[u8]) -> bool {
    ctx.clear_kv_cache();
    let ok = ctx.state_seq_set_data_ext(state, 0, LlamaStateSeqFlags::empty());
    if !ok {
        ctx.clear_kv_cache();
    }
    ok
}
