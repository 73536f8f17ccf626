//! Running one generation job on a slot: the job's tally (what the model
//! chose, what was fed, what was drafted; the budget and the heartbeat read
//! it), the dispatch by style, the measurements in `GenOutput`, the sampler
//! chain, and the whole-grammar reference path.

use std::time::Instant;

use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::context::SlotState;
use super::grammar::{self, Draft};
use super::job::{top_logits, GenOutput, GenRequest, Step, Style, STEP_TOP};
use super::{fault, LlmError};

/// What the running job has done so far.
#[derive(Debug, Default)]
pub(super) struct Tally {
    /// Structural choices and sampled values, for the budget and the heartbeat.
    pub(super) generated: u32,
    /// Answer tokens put in the cache without a model choice.
    pub(super) fed: u32,
    pub(super) first_token_at: Option<Instant>,
    pub(super) drafted: u32,
    pub(super) accepted: u32,
    /// The job's model choices, when its request traces them.
    pub(super) steps: Option<Vec<Step>>,
}

impl Tally {
    fn new(trace_steps: bool) -> Self {
        Self {
            steps: trace_steps.then(Vec::new),
            ..Self::default()
        }
    }
}

impl SlotState<'_> {
    pub(super) fn generate(&mut self, req: &GenRequest) -> Result<GenOutput, LlmError> {
        self.save_unsaved();
        self.tally = Tally::new(req.trace_steps);
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
        out.generated_tokens = self.tally.generated;
        out.fed_tokens = self.tally.fed;
        out.draft_tokens = self.tally.drafted;
        out.accepted_tokens = self.tally.accepted;
        out.steps = self.tally.steps.take().unwrap_or_default();
        let first = self.tally.first_token_at.unwrap_or_else(Instant::now);
        out.ttft_ms = (first - t0).as_secs_f64() * 1e3;
        out.generation_ms = first.elapsed().as_secs_f64() * 1e3;
        out.total_ms = t0.elapsed().as_secs_f64() * 1e3;
        let t = self.ctx.timings();
        out.llama_decode_ms = t.t_p_eval_ms() + t.t_eval_ms();
        tracing::debug!(seen = %out.seen, "the answer as the model read it");
        Ok(out)
    }

    pub(super) fn sampler(
        &self,
        grammar: &str,
        req: &GenRequest,
    ) -> Result<LlamaSampler, LlmError> {
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

    /// Counts `n` model choices: the heartbeat, the budget and the
    /// `stall-after` fault read the count. Fails once the job is cancelled.
    pub(super) fn note_generated(&mut self, n: u32) -> Result<(), LlmError> {
        if self.tally.first_token_at.is_none() {
            self.tally.first_token_at = Some(Instant::now());
        }
        self.tally.generated += n;
        self.progress.tick(self.tally.generated);
        if fault::stall_after(self.tally.generated, self.progress) {
            return Err(LlmError::Cancelled);
        }
        if self.progress.cancelled() {
            return Err(LlmError::Cancelled);
        }
        Ok(())
    }

    /// Notes that the model chose `token` from the logits row `idx`.
    pub(super) fn record(&mut self, idx: i32, token: LlamaToken) {
        if let Some(steps) = self.tally.steps.as_mut() {
            steps.push(Step {
                token: token.0,
                top: top_logits(self.ctx.get_logits_ith(idx), STEP_TOP),
            });
        }
    }

    /// Samples from the logits row `idx` and records the choice.
    pub(super) fn sample(&mut self, sampler: &mut LlamaSampler, idx: i32) -> LlamaToken {
        let t = sampler.sample(&self.ctx, idx);
        self.record(idx, t);
        t
    }

    /// Queues answer tokens the model did not choose, to be decoded in one
    /// batch with the next choice.
    pub(super) fn feed(&mut self, pending: &mut Vec<LlamaToken>, tokens: &[LlamaToken]) {
        self.tally.fed += tokens.len() as u32;
        pending.extend_from_slice(tokens);
    }

    pub(super) fn feed_text(&mut self, pending: &mut Vec<LlamaToken>, text: &str) {
        let t = self.tokenize(text, false);
        self.feed(pending, &t);
    }

    /// The text of the cache from `start` on, then of `pending`.
    pub(super) fn seen(&self, start: usize, pending: &[LlamaToken]) -> String {
        let bytes: Vec<u8> = self.kv[start.min(self.kv.len())..]
            .iter()
            .chain(pending)
            .flat_map(|&t| self.piece(t))
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    }

    /// The reference path: everything sampled under the whole-diagnosis
    /// grammar until the text parses as a draft.
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
        while self.tally.generated < req.max_tokens {
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
