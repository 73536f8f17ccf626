//! Prompt-lookup speculation inside a sampled value: drafting the tokens
//! that followed the last match in the context, verifying a draft in one
//! batch so that every token kept is one the model would have produced, and
//! the verify-cost table (what a k-row verification costs on this machine)
//! that decides whether a draft is padded to a cheaper batch shape.

use std::time::Instant;

use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;

use super::error::LlmError;
use super::json_text::{classify, Piece};
use super::kv::Kv;
use super::lookup::{self, Lookup};
use super::tally::Tally;
use super::value::Value;

/// Rows a verify-cost table spans for drafts of up to `draft_max` tokens:
/// the verification itself, rounded up to the next multiple of 4 (the
/// widest tile llama.cpp's CPU kernels use), so padding has a choice.
pub fn verify_rows(draft_max: usize) -> usize {
    (draft_max + 1).div_ceil(4) * 4
}

/// Draft tokens for the value being sampled, `t` just chosen: what
/// followed the last match in the context, cut at the first token that
/// would end or break the JSON string (drafts stop at the value's end).
pub(super) fn lookup_draft(
    kv: &Kv<'_>,
    t: LlamaToken,
    spec: &Lookup,
    room: usize,
) -> Vec<LlamaToken> {
    let mut history = Vec::with_capacity(kv.len() + 1);
    history.extend_from_slice(kv.tokens());
    history.push(t);
    let spec = Lookup {
        draft_max: spec.draft_max.min(room).min(kv.n_batch().saturating_sub(1)),
        ..*spec
    };
    let r = lookup::draft(&history, &spec);
    history[r]
        .iter()
        .copied()
        .take_while(|d| matches!(classify(&kv.piece(*d)), Piece::Body))
        .collect()
}

/// Decodes `t` with its `draft` in one batch, then checks the draft
/// position by position by sampling from the batch's own logits rows
/// with the same sampler, so every token kept is the token the model
/// would have produced at that point (greedy: the same; with
/// temperature: the same distribution, sample-then-compare). Cached
/// tokens after the first mismatch are dropped.
///
/// Returns the logits row for what follows the kept tokens, and the
/// model's own token where it parted from the draft (sampled, not yet
/// decoded).
pub(super) fn verify_draft(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    sampler: &mut LlamaSampler,
    t: LlamaToken,
    draft: &[LlamaToken],
    spec: &Lookup,
    budget: u32,
    v: &mut Value,
) -> Result<(i32, Option<LlamaToken>), LlmError> {
    if kv.verify_ms().is_none() {
        measure_verify(kv, verify_rows(spec.draft_max));
    }
    let base = kv.len();
    let batch = verify_batch(kv, t, draft);
    let tt = Instant::now();
    kv.decode_rows_with_logits(&batch, draft.len() + 1)?;
    // What a verification costs against a single step decides
    // whether lookup pays on a machine (docs/design.md, speculative decoding).
    tracing::trace!(
        rows = batch.len(),
        ms = tt.elapsed().as_secs_f64() * 1e3,
        "draft verified"
    );
    let mut kept = 0;
    let mut next = None;
    for (i, d) in draft.iter().enumerate() {
        // The value holds `t` already: only its cap, the budget, a
        // repetition or the end of its sentence stop it here.
        if v.full(job.generated(), budget) || v.ended() {
            break;
        }
        let s = job.sample(kv, sampler, i as i32);
        if s != *d {
            next = Some(s);
            break;
        }
        job.note_generated(kv, 1)?;
        let piece = kv.piece(s);
        v.push(s, &piece);
        kept += 1;
    }
    job.drafted(draft.len(), kept);
    kv.truncate(base + 1 + kept)?;
    // All kept: the last row predicts what follows them.
    Ok((kept as i32, next))
}

/// `t` and its draft, padded to the row count the verify-cost table
/// finds cheapest. Filler rows repeat the last draft token; their logits
/// are not computed and the cache drops them with the rejected drafts.
fn verify_batch(kv: &Kv<'_>, t: LlamaToken, draft: &[LlamaToken]) -> Vec<LlamaToken> {
    let mut batch = Vec::with_capacity(draft.len() + 4);
    batch.push(t);
    batch.extend_from_slice(draft);
    let rows = lookup::padded_rows(batch.len(), kv.verify_ms().unwrap_or(&[]));
    let real = batch.len();
    let room = kv.n_ctx().saturating_sub(kv.len() + 1);
    batch.resize(
        rows.min(kv.n_batch()).min(room).max(real),
        *batch.last().unwrap_or(&t),
    );
    batch
}

/// Median milliseconds of one `decode_rows` of k = 1..=`rows` tokens
/// (index k-1), each followed by dropping them again. The tokens are the
/// cache's own, so the rows read like text.
pub(super) fn verify_cost(kv: &mut Kv<'_>, rows: usize, reps: usize) -> Result<Vec<f64>, LlmError> {
    let base = kv.len();
    if base < rows {
        return Err(LlmError::Decode(format!(
            "verify cost needs {rows} cached tokens, the cache has {base}"
        )));
    }
    let sample: Vec<LlamaToken> = kv.tokens()[base - rows..].to_vec();
    let mut out = Vec::with_capacity(rows);
    for k in 1..=rows {
        let mut ms = Vec::with_capacity(reps);
        // One untimed pass: the first decode of a new batch shape pays
        // for graph allocation.
        for rep in 0..=reps {
            let t = Instant::now();
            kv.decode_rows(&sample[..k])?;
            if rep > 0 {
                ms.push(t.elapsed().as_secs_f64() * 1e3);
            }
            kv.truncate(base)?;
        }
        ms.sort_by(f64::total_cmp);
        out.push(ms[ms.len() / 2]);
    }
    Ok(out)
}

/// Measures what verifications of 1..=`rows` rows cost on this machine,
/// so drafts are padded to a batch shape only where that is cheaper.
/// Needs `rows` tokens in the cache (the prefix or the prompt).
pub(super) fn measure_verify(kv: &mut Kv<'_>, rows: usize) {
    let slot = kv.slot();
    let rows = rows.min(kv.n_batch()).min(kv.len());
    if rows == 0 {
        return;
    }
    match verify_cost(kv, rows, 3) {
        Ok(ms) => {
            let pads: Vec<usize> = (1..=rows).map(|r| lookup::padded_rows(r, &ms)).collect();
            tracing::info!(
                slot,
                ?ms,
                ?pads,
                "draft verification cost measured (ms by rows; rows padded to)"
            );
            kv.set_verify_ms(ms);
        }
        Err(e) => {
            tracing::warn!(slot, error = %e, "cannot measure draft verification cost; drafts are not padded");
            kv.set_verify_ms(Vec::new());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verify_rows_cover_the_draft_and_round_up_to_a_tile() {
        assert_eq!(verify_rows(1), 4);
        assert_eq!(verify_rows(3), 4);
        assert_eq!(verify_rows(4), 8);
        assert_eq!(verify_rows(7), 8);
    }
}
