//! Running one generation job on a slot: a new `Tally` for it, the
//! dispatch by style (chosen, written, whole grammar), the measurements in
//! `GenOutput`, and the whole-grammar reference path.

use std::time::Instant;

use llama_cpp_2::sampling::LlamaSampler;

use super::choose;
use super::decode_json;
use super::error::LlmError;
use super::grammar::{self, Draft};
use super::job::{GenOutput, GenRequest, Style};
use super::kv::Kv;
use super::tally::Tally;
use super::tokens::{self, PromptTokens};

/// Runs `req` on the slot's cache. A failed decode leaves the cache
/// emptied; a pre-empted one keeps what it read of the prompt.
pub(super) fn generate(kv: &mut Kv<'_>, req: &GenRequest) -> Result<GenOutput, LlmError> {
    kv.save_unsaved();
    let mut job = Tally::new(req.trace_steps);
    kv.start_timings();
    let t0 = Instant::now();
    let prompt = tokens::prompt_tokens_block(kv.model(), &req.prompt);
    let (n_prompt, cuts) = (prompt.tokens.len(), prompt.cuts);
    let mut out = GenOutput {
        prompt_tokens: prompt.tokens.len() as u32,
        ..Default::default()
    };
    let res = match (req.style, &req.choices) {
        (Style::Schema, Some(c)) => {
            choose::generate_chosen(kv, &mut job, req, c, prompt, &mut out, t0)
        }
        (Style::Schema, None) => {
            decode_json::generate_schema(kv, &mut job, req, prompt, &mut out, t0)
        }
        (Style::FullGrammar, _) => generate_full(kv, &mut job, req, prompt, &mut out, t0),
    };
    match &res {
        // What was read of the prompt stays: the job runs again right
        // after the alarm that pre-empted it, and reads only the rest.
        Err(LlmError::Preempted) => {
            let read = kv.len().min(n_prompt);
            kv.mark_unsaved(read, cuts.read(read));
        }
        // A cancelled or failed decode leaves the cache in an unknown state.
        Err(_) => kv.clear(),
        Ok(()) => {}
    }
    res?;
    job.finish(&mut out, t0);
    out.llama_decode_ms = kv.decode_ms();
    tracing::debug!(seen = %out.seen, "the answer as the model read it");
    Ok(out)
}

/// The reference path: everything sampled under the whole-diagnosis
/// grammar until the text parses as a draft.
fn generate_full(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    req: &GenRequest,
    prompt: PromptTokens,
    out: &mut GenOutput,
    t0: Instant,
) -> Result<(), LlmError> {
    let (mut idx, reused) = kv.prefill(&prompt.tokens, prompt.cuts)?;
    out.reused_tokens = reused as u32;
    out.prompt_ms = t0.elapsed().as_secs_f64() * 1e3;
    let grammar = grammar::full_gbnf(req.n_passages);
    let g = LlamaSampler::grammar(kv.model(), &grammar, "root")
        .map_err(|e| LlmError::Grammar(e.to_string()))?;
    // The grammar sees the whole vocabulary here: this is the reference path.
    let mut sampler = LlamaSampler::chain_simple([
        g,
        LlamaSampler::penalties(kv.model().n_vocab(), 64, 1.15, 0.0, 0.0),
        LlamaSampler::temp(req.temperature.max(0.01)),
        LlamaSampler::dist(req.seed),
    ]);
    let mut bytes = Vec::new();
    let vocab = kv.model().vocab();
    while job.generated() < req.max_tokens {
        let t = sampler.sample(kv.ctx(), idx);
        job.note_generated(kv, 1)?;
        if vocab.is_eog(t) {
            break;
        }
        bytes.extend_from_slice(&kv.piece(t));
        if let Ok(d) = serde_json::from_slice::<Draft>(&bytes) {
            out.draft = d;
            out.raw = String::from_utf8_lossy(&bytes).into_owned();
            out.seen = out.raw.clone();
            return Ok(());
        }
        idx = kv.decode(&[t])?;
    }
    out.raw = String::from_utf8_lossy(&bytes).into_owned();
    Err(LlmError::Unusable(format!(
        "output did not complete the schema within {} tokens",
        req.max_tokens
    )))
}
