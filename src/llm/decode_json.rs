//! The schema-driven decoder: the JSON's keys and punctuation are fed as
//! batched tokens and only the values are the model's. Owns the sampling of
//! one string value (with prompt-lookup drafts when asked), the choices
//! between fixed alternatives (a likelihood, whether a list goes on), the
//! budget's shares, and the written answer (`generate_schema`), plus the
//! opening and closing every schema answer shares with the chosen one.

use std::time::Instant;

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::error::LlmError;
use super::grammar::{self, Draft, DraftCause};
use super::job::{GenOutput, GenRequest};
use super::json_text::{
    classify, render_raw, to_last_clause, to_whole_clause, valid_utf8_prefix, Piece,
};
use super::kv::Kv;
use super::lookup::Lookup;
use super::pick;
use super::speculate;
use super::tally::Tally;
use super::tokens::{Cuts, PromptTokens};
use super::value::Value;
use crate::watchdog::is_looping;

/// Where an answer starts: the cache position after the prompt, the
/// prompt's length with the answer's opening, and its last logits row.
pub(super) struct Answer {
    start: usize,
    prompt_len: usize,
    /// Where the prompt may be cut for the disk tier.
    cuts: Cuts,
    pub(super) idx: i32,
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

/// The sampler chain for values under `grammar`.
pub(super) fn sampler(
    model: &LlamaModel,
    grammar: &str,
    req: &GenRequest,
) -> Result<LlamaSampler, LlmError> {
    let g = LlamaSampler::grammar(model, grammar, "root")
        .map_err(|e| LlmError::Grammar(e.to_string()))?;
    let n_vocab = model.n_vocab();
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

/// Appends `open` (the JSON up to the first value) to the prompt and
/// brings the cache to it.
pub(super) fn open_answer(
    kv: &mut Kv<'_>,
    prompt: PromptTokens,
    open: &str,
    out: &mut GenOutput,
    t0: Instant,
) -> Result<Answer, LlmError> {
    let PromptTokens {
        tokens: mut prompt,
        cuts,
    } = prompt;
    let start = prompt.len();
    prompt.extend(kv.tokenize(open, false));
    let (idx, reused) = kv.prefill(&prompt, cuts)?;
    out.reused_tokens = reused as u32;
    out.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    Ok(Answer {
        start,
        prompt_len: prompt.len(),
        cuts,
        idx,
    })
}

/// Ends an answer. The closing tokens stay pending: they would only be
/// decoded to be thrown away, and the next job's prefix match stops
/// before them anyway. Not decoded, so not counted as fed.
pub(super) fn close_answer(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    answer: &Answer,
    draft: Draft,
    pending: &[LlamaToken],
    out: &mut GenOutput,
) {
    job.unfeed(pending.len());
    out.seen = kv.text(answer.start, pending);
    out.raw = render_raw(&draft);
    out.draft = draft;
    // Saved once the answer is out (`save_unsaved`), not before.
    kv.mark_unsaved(answer.prompt_len, answer.cuts);
}

/// Samples one JSON string value (its closing quote included) starting
/// with logits at `idx`. Returns the value and the new logits index. The
/// closing token is left pending in `pending`.
///
/// With `spec`, each sampled body token brings a draft (see
/// `lookup_draft`) that is decoded and checked with it (`verify_draft`).
pub(super) fn string_value(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    sampler: &mut LlamaSampler,
    idx: i32,
    cap: usize,
    budget: u32,
    spec: Option<&Lookup>,
    pending: &mut Vec<LlamaToken>,
) -> Result<String, LlmError> {
    Ok(sample_value(
        kv,
        job,
        sampler,
        idx,
        Value::new(cap),
        budget,
        spec,
        pending,
    )?
    .text)
}

/// `string_value` for the summary: one the cap or the budget cut off
/// ends at its last whole clause (`to_whole_clause`), never mid-phrase.
/// A summary that ends the answer (`Value::summary`, `last`) ends with its first
/// sentence, the one sentence the system prompt asks for: a second one
/// only ran into the cap. One that comes first keeps what the model
/// writes, as the causes it writes next are read after it (closing it at
/// its first sentence changed them: docs/measurements.md, "Chosen answers, measured").
pub(super) fn summary_value(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    sampler: &mut LlamaSampler,
    idx: i32,
    value: Value,
    budget: u32,
    spec: Option<&Lookup>,
    pending: &mut Vec<LlamaToken>,
) -> Result<String, LlmError> {
    let v = sample_value(kv, job, sampler, idx, value, budget, spec, pending)?;
    Ok(if v.cut {
        to_whole_clause(&v.text).to_string()
    } else {
        v.text
    })
}

/// `string_value`, telling too whether the value was cut.
fn sample_value(
    kv: &mut Kv<'_>,
    job: &mut Tally,
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
            job.feed_text(kv, pending, "\"");
            break;
        }
        if v.full(job.generated(), budget) {
            if is_looping(&v.toks) {
                tracing::debug!("repetition guard closed a value");
            }
            job.feed_text(kv, pending, "\"");
            cut = true;
            break;
        }
        let t = match next.take() {
            Some(t) => t,
            None => job.sample(kv, sampler, idx),
        };
        if !take_token(kv, job, t, &mut v, pending)? {
            break;
        }
        if v.ended() {
            // Left for the next decode, with the quote that closes it.
            pending.push(t);
            job.feed_text(kv, pending, "\"");
            break;
        }
        let draft = match spec {
            Some(spec) if v.room() > 0 && job.generated() < budget => {
                speculate::lookup_draft(kv, t, spec, v.room())
            }
            _ => Vec::new(),
        };
        match spec {
            Some(spec) if !draft.is_empty() => {
                (idx, next) =
                    speculate::verify_draft(kv, job, sampler, t, &draft, spec, budget, &mut v)?;
            }
            _ => idx = kv.decode(&[t])?,
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
    kv: &mut Kv<'_>,
    job: &mut Tally,
    t: LlamaToken,
    v: &mut Value,
    pending: &mut Vec<LlamaToken>,
) -> Result<bool, LlmError> {
    let piece = kv.piece(t);
    job.note_generated(kv, 1)?;
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
            job.feed_text(kv, pending, "\"");
            Ok(false)
        }
    }
}

/// A cause's likelihood, chosen from `LIKELIHOODS` (the middle one once
/// the budget is spent) after the fixed text `before` is fed.
pub(super) fn likelihood(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    before: &str,
    budget: u32,
    pending: &mut Vec<LlamaToken>,
) -> Result<String, LlmError> {
    job.feed_text(kv, pending, before);
    let l = pick::choose_or(kv, job, &grammar::LIKELIHOODS, 1, budget, pending)?;
    Ok(grammar::LIKELIHOODS[l].to_string())
}

/// Whether a list goes on: the model chooses between `next` and `end`
/// when `more` allows another item; otherwise `end` is fed. True if
/// another item follows.
pub(super) fn goes_on(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    more: bool,
    next: &str,
    end: &str,
    pending: &mut Vec<LlamaToken>,
) -> Result<bool, LlmError> {
    if more {
        return Ok(pick::choose(kv, job, &[next, end], pending)? == 0);
    }
    job.feed_text(kv, pending, end);
    Ok(false)
}

/// A written answer: the summary, the causes and the actions sampled as
/// text, the likelihoods, the ends of the lists and the sources chosen.
pub(super) fn generate_schema(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    req: &GenRequest,
    prompt: PromptTokens,
    out: &mut GenOutput,
    t0: Instant,
) -> Result<(), LlmError> {
    let budget = req.max_tokens;
    let answer = open_answer(kv, prompt, grammar::OPEN, out, t0)?;
    let mut sampler = sampler(kv.model(), grammar::STRING_BODY_GBNF, req)?;
    let mut pending: Vec<LlamaToken> = Vec::new();
    let cap = share(budget, job.generated(), 3, req.summary_tokens.max(1));
    let mut draft = Draft {
        summary: summary_value(
            kv,
            job,
            &mut sampler,
            answer.idx,
            Value::summary(cap, false),
            budget,
            req.lookup.as_ref(),
            &mut pending,
        )?,
        ..Default::default()
    };
    job.feed_text(kv, &mut pending, &grammar::SUMMARY_TO_CAUSES[1..]);
    written_causes(kv, job, req, &mut sampler, &mut draft, &mut pending)?;
    written_actions(kv, job, req, &mut sampler, &mut draft, &mut pending)?;
    cited_sources(kv, job, req, &mut draft, &mut pending)?;
    close_answer(kv, job, &answer, draft, &pending, out);
    Ok(())
}

/// The causes the model writes, each with its likelihood, for as long
/// as it goes on and the actions still get their share.
fn written_causes(
    kv: &mut Kv<'_>,
    job: &mut Tally,
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
        let cause = written_item(kv, job, req, sampler, parts, pending)?;
        draft.probable_causes.push(DraftCause {
            cause,
            likelihood: likelihood(kv, job, &grammar::CAUSE_TO_LIKELIHOOD[1..], budget, pending)?,
            item: None,
        });
        // Another cause only if the actions still get their share.
        let more =
            draft.probable_causes.len() < grammar::MAX_CAUSES && job.generated() + 6 < budget;
        if !goes_on(
            kv,
            job,
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
    kv: &mut Kv<'_>,
    job: &mut Tally,
    req: &GenRequest,
    sampler: &mut LlamaSampler,
    draft: &mut Draft,
    pending: &mut Vec<LlamaToken>,
) -> Result<(), LlmError> {
    let budget = req.max_tokens;
    loop {
        let action = written_item(kv, job, req, sampler, 1, pending)?;
        draft.actions.push(action);
        let more = draft.actions.len() < grammar::MAX_ACTIONS && job.generated() + 2 < budget;
        // The value's closing token is pending: the fixed parts after it
        // go without their leading quote.
        let end = &grammar::ACTIONS_TO_SOURCES[1..];
        if !goes_on(kv, job, more, &grammar::NEXT_ITEM[1..], end, pending)? {
            return Ok(());
        }
    }
}

/// One written cause or action: what is pending is decoded, then the
/// value is sampled within its share of what is left of the budget
/// (`parts` shares, at most `ITEM_TOKENS`).
fn written_item(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    req: &GenRequest,
    sampler: &mut LlamaSampler,
    parts: u32,
    pending: &mut Vec<LlamaToken>,
) -> Result<String, LlmError> {
    let budget = req.max_tokens;
    let idx = kv.decode(&std::mem::take(pending))?;
    let cap = share(budget, job.generated(), parts, grammar::ITEM_TOKENS);
    string_value(
        kv,
        job,
        sampler,
        idx,
        cap,
        budget,
        req.lookup.as_ref(),
        pending,
    )
}

/// The passages the answer cites, chosen by their labels, none twice.
fn cited_sources(
    kv: &mut Kv<'_>,
    job: &mut Tally,
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
        let s = pick::choose_or(kv, job, &label_refs, 0, budget, pending)?;
        if !draft.sources.contains(&format!("P{}", s + 1)) {
            draft.sources.push(format!("P{}", s + 1));
        }
        let more = draft.sources.len() < req.n_passages && job.generated() < budget;
        if !goes_on(kv, job, more, ",\"", "]}", pending)? {
            return Ok(());
        }
    }
}
