//! The schema-driven decoder: the JSON's keys and punctuation are fed as
//! batched tokens and only the values are the model's. Owns the sampling of
//! one string value (with prompt-lookup drafts when asked), the choices
//! between fixed alternatives (a likelihood, whether a list goes on), the
//! budget's shares, and the written answer (`generate_schema`), plus the
//! opening and closing every schema answer shares with the chosen one.

use std::time::Instant;

use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::context::SlotState;
use super::grammar::{self, Draft, DraftCause};
use super::job::{GenOutput, GenRequest};
use super::json_text::{
    classify, ends_sentence, render_raw, to_last_clause, to_whole_clause, valid_utf8_prefix, Piece,
};
use super::lookup::Lookup;
use super::LlmError;
use crate::watchdog::is_looping;

/// Where an answer starts: the cache position after the prompt, the
/// prompt's length with the answer's opening, and its last logits row.
pub(super) struct Answer {
    start: usize,
    prompt_len: usize,
    pub(super) idx: i32,
}

/// A JSON string value while it is sampled.
pub(super) struct Value {
    pub(super) bytes: Vec<u8>,
    pub(super) toks: Vec<LlamaToken>,
    /// Tokens the value may take.
    cap: usize,
    /// The value is one sentence: it ends where the sentence does.
    sentence: bool,
}

impl Value {
    fn new(cap: usize) -> Self {
        Self {
            bytes: Vec::new(),
            toks: Vec::new(),
            cap,
            sentence: false,
        }
    }

    /// A summary of at most `cap` tokens; one that ends the answer (`last`)
    /// is one sentence (see `summary_value`).
    pub(super) fn summary(cap: usize, last: bool) -> Self {
        Self {
            sentence: last,
            ..Self::new(cap)
        }
    }

    /// Whether a one-sentence value has its sentence whole: what the model
    /// writes after it is a second sentence, which the published value would
    /// not keep whole anyway once the cap cuts it.
    pub(super) fn ended(&self) -> bool {
        self.sentence && ends_sentence(&self.bytes)
    }

    /// Whether the value must close now: at its cap, past the budget or
    /// repeating itself. A value with nothing yet may take one token past
    /// the budget, so a required field is never empty; the shares keep that
    /// to a token.
    pub(super) fn full(&self, generated: u32, budget: u32) -> bool {
        let over = generated >= budget && !self.toks.is_empty();
        self.toks.len() >= self.cap || over || is_looping(&self.toks)
    }

    /// Tokens the value may still take.
    pub(super) fn room(&self) -> usize {
        self.cap.saturating_sub(self.toks.len())
    }

    pub(super) fn push(&mut self, t: LlamaToken, piece: &[u8]) {
        self.bytes.extend_from_slice(piece);
        self.toks.push(t);
    }
}

/// A sampled value's text, and whether we closed it (cap, budget,
/// repetition) rather than the model.
struct Sampled {
    text: String,
    cut: bool,
}

/// What is left of `budget` after `generated`, split in `parts`, at most
/// `cap`: every required value (summary, one cause, one action) gets a share
/// of the budget, so a tight budget shortens values instead of emptying them.
fn share(budget: u32, generated: u32, parts: u32, cap: usize) -> usize {
    let left = budget.saturating_sub(generated) / parts;
    (left as usize).clamp(1, cap)
}

impl SlotState<'_> {
    /// Appends `open` (the JSON up to the first value) to the prompt and
    /// brings the cache to it.
    pub(super) fn open_answer(
        &mut self,
        mut prompt: Vec<LlamaToken>,
        open: &str,
        out: &mut GenOutput,
        t0: Instant,
    ) -> Result<Answer, LlmError> {
        let start = prompt.len();
        prompt.extend(self.tokenize(open, false));
        let (idx, reused) = self.prefill(&prompt)?;
        out.reused_tokens = reused as u32;
        out.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(Answer {
            start,
            prompt_len: prompt.len(),
            idx,
        })
    }

    /// Ends an answer. The closing tokens stay pending: they would only be
    /// decoded to be thrown away, and the next job's prefix match stops
    /// before them anyway. Not decoded, so not counted as fed.
    pub(super) fn close_answer(
        &mut self,
        answer: &Answer,
        draft: Draft,
        pending: &[LlamaToken],
        out: &mut GenOutput,
    ) {
        self.tally.fed = self.tally.fed.saturating_sub(pending.len() as u32);
        out.seen = self.seen(answer.start, pending);
        out.raw = render_raw(&draft);
        out.draft = draft;
        // Saved once the answer is out (`save_unsaved`), not before.
        self.unsaved = Some(answer.prompt_len);
    }

    /// Samples one JSON string value (its closing quote included) starting
    /// with logits at `idx`. Returns the value and the new logits index. The
    /// closing token is left pending in `pending`.
    ///
    /// With `spec`, each sampled body token brings a draft (see
    /// `lookup_draft`) that is decoded and checked with it (`verify_draft`).
    pub(super) fn string_value(
        &mut self,
        sampler: &mut LlamaSampler,
        idx: i32,
        cap: usize,
        budget: u32,
        spec: Option<&Lookup>,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        Ok(self
            .sample_value(sampler, idx, Value::new(cap), budget, spec, pending)?
            .text)
    }

    /// `string_value` for the summary: one the cap or the budget cut off
    /// ends at its last whole clause (`to_whole_clause`), never mid-phrase.
    /// A summary that ends the answer (`Value::summary`, `last`) ends with its first
    /// sentence, the one sentence the system prompt asks for: a second one
    /// only ran into the cap. One that comes first keeps what the model
    /// writes, as the causes it writes next are read after it (closing it at
    /// its first sentence changed them: README, "Chosen answers, measured").
    pub(super) fn summary_value(
        &mut self,
        sampler: &mut LlamaSampler,
        idx: i32,
        value: Value,
        budget: u32,
        spec: Option<&Lookup>,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        let v = self.sample_value(sampler, idx, value, budget, spec, pending)?;
        Ok(if v.cut {
            to_whole_clause(&v.text).to_string()
        } else {
            v.text
        })
    }

    /// `string_value`, telling too whether the value was cut.
    fn sample_value(
        &mut self,
        sampler: &mut LlamaSampler,
        mut idx: i32,
        mut v: Value,
        budget: u32,
        spec: Option<&Lookup>,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<Sampled, LlmError> {
        sampler.reset();
        // A token already sampled (from a verification row) but not decoded.
        let mut next: Option<LlamaToken> = None;
        let mut cut = false;
        loop {
            // Drafts kept by a verification can end the sentence.
            if v.ended() {
                self.feed_text(pending, "\"");
                break;
            }
            if v.full(self.tally.generated, budget) {
                if is_looping(&v.toks) {
                    tracing::debug!("repetition guard closed a value");
                }
                self.feed_text(pending, "\"");
                cut = true;
                break;
            }
            let t = match next.take() {
                Some(t) => t,
                None => self.sample(sampler, idx),
            };
            if !self.take_token(t, &mut v, pending)? {
                break;
            }
            if v.ended() {
                // Left for the next decode, with the quote that closes it.
                pending.push(t);
                self.feed_text(pending, "\"");
                break;
            }
            let draft = match spec {
                Some(spec) if v.room() > 0 && self.tally.generated < budget => {
                    self.lookup_draft(t, spec, v.room())
                }
                _ => Vec::new(),
            };
            match spec {
                Some(spec) if !draft.is_empty() => {
                    (idx, next) = self.verify_draft(sampler, t, &draft, spec, budget, &mut v)?;
                }
                _ => idx = self.decode(&[t])?,
            }
        }
        let s = valid_utf8_prefix(v.bytes);
        let s = if cut { to_last_clause(&s) } else { &s };
        Ok(Sampled {
            text: s.trim().to_string(),
            cut,
        })
    }

    /// Adds the sampled token `t` to the value. False when it ended the
    /// value: its closing quote (left pending), or a token that cannot be in
    /// a JSON string, for which a quote is fed.
    fn take_token(
        &mut self,
        t: LlamaToken,
        v: &mut Value,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<bool, LlmError> {
        let piece = self.piece(t);
        self.note_generated(1)?;
        match classify(&piece) {
            Piece::Body => {
                v.push(t, &piece);
                Ok(true)
            }
            Piece::Close(n) => {
                v.bytes.extend_from_slice(&piece[..n]);
                pending.push(t);
                Ok(false)
            }
            Piece::Invalid => {
                // Every candidate was refused (possible with top_k before the
                // grammar); close the value rather than emit broken JSON.
                self.feed_text(pending, "\"");
                Ok(false)
            }
        }
    }

    /// A cause's likelihood, chosen from `LIKELIHOODS` (the middle one once
    /// the budget is spent) after the fixed text `before` is fed.
    pub(super) fn likelihood(
        &mut self,
        before: &str,
        budget: u32,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        self.feed_text(pending, before);
        let l = self.choose_or(&grammar::LIKELIHOODS, 1, budget, pending)?;
        Ok(grammar::LIKELIHOODS[l].to_string())
    }

    /// Whether a list goes on: the model chooses between `next` and `end`
    /// when `more` allows another item; otherwise `end` is fed. True if
    /// another item follows.
    pub(super) fn goes_on(
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

    /// A written answer: the summary, the causes and the actions sampled as
    /// text, the likelihoods, the ends of the lists and the sources chosen.
    pub(super) fn generate_schema(
        &mut self,
        req: &GenRequest,
        prompt: Vec<LlamaToken>,
        out: &mut GenOutput,
        t0: Instant,
    ) -> Result<(), LlmError> {
        let budget = req.max_tokens;
        let answer = self.open_answer(prompt, grammar::OPEN, out, t0)?;
        let mut sampler = self.sampler(grammar::STRING_BODY_GBNF, req)?;
        let mut pending: Vec<LlamaToken> = Vec::new();
        let cap = share(budget, self.tally.generated, 3, req.summary_tokens.max(1));
        let mut draft = Draft {
            summary: self.summary_value(
                &mut sampler,
                answer.idx,
                Value::summary(cap, false),
                budget,
                req.lookup.as_ref(),
                &mut pending,
            )?,
            ..Default::default()
        };
        self.feed_text(&mut pending, &grammar::SUMMARY_TO_CAUSES[1..]);
        self.written_causes(req, &mut sampler, &mut draft, &mut pending)?;
        self.written_actions(req, &mut sampler, &mut draft, &mut pending)?;
        self.cited_sources(req, &mut draft, &mut pending)?;
        self.close_answer(&answer, draft, &pending, out);
        Ok(())
    }

    /// The causes the model writes, each with its likelihood, for as long
    /// as it goes on and the actions still get their share.
    fn written_causes(
        &mut self,
        req: &GenRequest,
        sampler: &mut LlamaSampler,
        draft: &mut Draft,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<(), LlmError> {
        let budget = req.max_tokens;
        loop {
            // The first cause leaves the actions half of what is left.
            let parts = if draft.probable_causes.is_empty() {
                2
            } else {
                1
            };
            let cause = self.written_item(req, sampler, parts, pending)?;
            draft.probable_causes.push(DraftCause {
                cause,
                likelihood: self.likelihood(&grammar::CAUSE_TO_LIKELIHOOD[1..], budget, pending)?,
                item: None,
            });
            // Another cause only if the actions still get their share.
            let more = draft.probable_causes.len() < grammar::MAX_CAUSES
                && self.tally.generated + 6 < budget;
            if !self.goes_on(
                more,
                grammar::NEXT_CAUSE,
                grammar::CAUSES_TO_ACTIONS,
                pending,
            )? {
                return Ok(());
            }
        }
    }

    /// The actions the model writes, for as long as it goes on and the
    /// budget allows.
    fn written_actions(
        &mut self,
        req: &GenRequest,
        sampler: &mut LlamaSampler,
        draft: &mut Draft,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<(), LlmError> {
        let budget = req.max_tokens;
        loop {
            let action = self.written_item(req, sampler, 1, pending)?;
            draft.actions.push(action);
            let more =
                draft.actions.len() < grammar::MAX_ACTIONS && self.tally.generated + 2 < budget;
            // The value's closing token is pending: the fixed parts after it
            // go without their leading quote.
            let end = &grammar::ACTIONS_TO_SOURCES[1..];
            if !self.goes_on(more, &grammar::NEXT_ITEM[1..], end, pending)? {
                return Ok(());
            }
        }
    }

    /// One written cause or action: what is pending is decoded, then the
    /// value is sampled within its share of what is left of the budget
    /// (`parts` shares, at most `ITEM_TOKENS`).
    fn written_item(
        &mut self,
        req: &GenRequest,
        sampler: &mut LlamaSampler,
        parts: u32,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<String, LlmError> {
        let budget = req.max_tokens;
        let idx = self.decode(&std::mem::take(pending))?;
        let cap = share(budget, self.tally.generated, parts, grammar::ITEM_TOKENS);
        self.string_value(sampler, idx, cap, budget, req.lookup.as_ref(), pending)
    }

    /// The passages the answer cites, chosen by their labels, none twice.
    fn cited_sources(
        &mut self,
        req: &GenRequest,
        draft: &mut Draft,
        pending: &mut Vec<LlamaToken>,
    ) -> Result<(), LlmError> {
        let budget = req.max_tokens;
        let labels: Vec<String> = (1..=req.n_passages.max(1))
            .map(|i| format!("P{i}\""))
            .collect();
        let label_refs: Vec<&str> = labels.iter().map(String::as_str).collect();
        loop {
            let s = self.choose_or(&label_refs, 0, budget, pending)?;
            if !draft.sources.contains(&format!("P{}", s + 1)) {
                draft.sources.push(format!("P{}", s + 1));
            }
            let more = draft.sources.len() < req.n_passages && self.tally.generated < budget;
            if !self.goes_on(more, ",\"", "]}", pending)? {
                return Ok(());
            }
        }
    }
}
