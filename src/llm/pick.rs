//! Picking among fixed alternatives by the model's logits: the walk over
//! token sequences where only the points where they part cost a model step
//! (`choose_tokens`), and the text-level picks the decoders use (`choose`,
//! `choose_or`: a likelihood, whether a list goes on, a source).

use llama_cpp_2::token::LlamaToken;

use super::error::LlmError;
use super::kv::Kv;
use super::tally::Tally;

/// Logits decoded ahead for the next item's first choice (`goes_on_ahead`):
/// their row, and how many tokens the cache holds before it that every item
/// still to choose from starts with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ready {
    pub(super) row: i32,
    pub(super) depth: usize,
}

/// Picks one of `alts` by the model's logits, feeding shared tokens as
/// fixed text. `pending` holds tokens not yet decoded; returns the choice.
pub(super) fn choose(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    alts: &[&str],
    pending: &mut Vec<LlamaToken>,
) -> Result<usize, LlmError> {
    choose_or(kv, job, alts, alts.len() - 1, u32::MAX, pending)
}

/// Like `choose`, but once `budget` is spent the model is not consulted:
/// `default` is taken, so the output closes without another model step.
pub(super) fn choose_or(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    alts: &[&str],
    default: usize,
    budget: u32,
    pending: &mut Vec<LlamaToken>,
) -> Result<usize, LlmError> {
    let seqs: Vec<Vec<LlamaToken>> = alts.iter().map(|a| kv.tokenize(a, false)).collect();
    let (k, depth) = choose_tokens(
        kv,
        job,
        &seqs,
        (0..seqs.len()).collect(),
        default,
        budget,
        pending,
        None,
    )?;
    job.feed(pending, &seqs[k][depth.min(seqs[k].len())..]);
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
/// is cached (`goes_on_ahead`), where the cache already holds the first
/// `ready.depth` tokens of every live sequence: the walk starts there,
/// and its first branch point uses the row if nothing was fed before it.
pub(super) fn choose_tokens(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    seqs: &[Vec<LlamaToken>],
    mut live: Vec<usize>,
    default: usize,
    budget: u32,
    pending: &mut Vec<LlamaToken>,
    ready: Option<Ready>,
) -> Result<(usize, usize), LlmError> {
    let mut depth = ready.map_or(0, |r| r.depth);
    let mut ready = ready.map(|r| r.row);
    loop {
        let spent = job.generated() >= budget;
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
            job.feed(pending, &[firsts[0].expect("checked")]);
            depth += 1;
            continue;
        }
        let idx = match ready.take() {
            Some(idx) if pending.is_empty() => idx,
            _ => kv.decode(&std::mem::take(pending))?,
        };
        let logits = kv.logits(idx);
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
                score(seqs[*a].get(depth).copied()).total_cmp(&score(seqs[*b].get(depth).copied()))
            })
            .expect("at least two alternatives");
        let tok = seqs[best].get(depth).copied();
        if let Some(t) = tok {
            job.record(kv, idx, t);
        }
        live.retain(|&k| seqs[k].get(depth).copied() == tok);
        job.note_generated(kv, 1)?;
        if let Some(t) = tok {
            pending.push(t);
        }
        depth += 1;
    }
}
