//! The chosen-answer decoder: the model picks among fixed alternatives by
//! its logits at the points where they part, and the tokens between those
//! points are fed in batches. Owns the walk over alternatives
//! (`choose_tokens`), the pick of a manual item shown back by its head
//! (`choose_item`), the bet that a list goes on (`goes_on_ahead`), and the
//! chosen answer itself (`generate_chosen`).

use std::time::Instant;

use llama_cpp_2::token::LlamaToken;

use super::decode_json;
use super::error::LlmError;
use super::grammar::{self, Draft, DraftCause};
use super::job::{GenOutput, GenRequest};
use super::json_text::head_is_whole;
use super::kv::Kv;
use super::pick::{self, Ready};
use super::tally::Tally;
use super::tokens::PromptTokens;
use super::value::Value;

/// Where the model's view of a chosen item ends: None when it is shown
/// whole (its tokens end with the closing quote), else the end of its head,
/// after which the caller feeds a closing quote. `depth` tokens are already
/// fed; `shown` 0 means whole.
fn shown_end(len: usize, depth: usize, shown: usize) -> Option<usize> {
    // Cutting off only the closing quote, or a token before it, saves
    // nothing: the quote is fed either way.
    if shown == 0 || shown.max(depth) + 2 > len {
        return None;
    }
    Some(shown.max(depth))
}

/// What of a chosen item's JSON string is still to be fed after the tokens
/// `choose_item` left pending.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owed {
    /// The item went in whole, its closing quote included.
    Nothing,
    /// Only its head went in: the closing quote is owed.
    Quote,
}

impl Owed {
    /// The fixed text that follows the item, `after` (which opens with the
    /// item's closing quote), from where the item left off: whole when the
    /// quote is owed, else without its quote (the model read `""` once).
    fn of(self, after: &str) -> &str {
        match self {
            Owed::Quote => after,
            Owed::Nothing => &after[1..],
        }
    }
}

/// The tokens every item not taken yet starts with, short of where they
/// part (and never a whole item): what the next item's choice would feed
/// before consulting the model, so it can go into the batch before it.
/// Empty when fewer than two items are left.
fn shared_head(items: &[Vec<LlamaToken>], taken: &[bool]) -> Vec<LlamaToken> {
    let live: Vec<&Vec<LlamaToken>> = items
        .iter()
        .zip(taken)
        .filter(|(_, &t)| !t)
        .map(|(i, _)| i)
        .collect();
    let Some((first, rest)) = live.split_first() else {
        return Vec::new();
    };
    if rest.is_empty() {
        return Vec::new();
    }
    let shortest = live.iter().map(|i| i.len()).min().unwrap_or(0);
    let n = (0..shortest.saturating_sub(1))
        .take_while(|&d| rest.iter().all(|i| i[d] == first[d]))
        .count();
    first[..n].to_vec()
}

/// Picks one of the manual items not taken yet, by `choose_tokens` over
/// each item's JSON string body and its closing quote. Returns the item's
/// index, and whether its closing quote is still owed; the tokens the
/// model is shown of it are left in `pending`.
///
/// The model is shown the item's first `shown` tokens (at least those up
/// to where it parted from the others) and the closing quote, not the
/// whole item: it has read every item in the prompt, the head names it,
/// and each fed token costs time on the board (0: the whole item).
fn choose_item(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    items: &[Vec<LlamaToken>],
    taken: &[bool],
    budget: u32,
    shown: usize,
    pending: &mut Vec<LlamaToken>,
    ready: Option<Ready>,
) -> Result<(usize, Owed), LlmError> {
    let live: Vec<usize> = (0..items.len()).filter(|&k| !taken[k]).collect();
    // The manuals list causes most likely first and checks in the order
    // to do them: with the budget spent, the first untaken item is taken.
    let default = live.first().copied().unwrap_or(0);
    let (k, depth) = pick::choose_tokens(kv, job, items, live, default, budget, pending, ready)?;
    let item = &items[k];
    let depth = depth.min(item.len());
    let (end, owed) = shown_of(kv, item, depth, shown);
    job.feed(pending, &item[depth..end]);
    Ok((k, owed))
}

/// How much of a chosen item the model is shown (`choose_item`), given
/// that `depth` of its tokens are in: the end of what is shown, and
/// whether its closing quote is still owed.
fn shown_of(kv: &Kv<'_>, item: &[LlamaToken], depth: usize, shown: usize) -> (usize, Owed) {
    match shown_end(item.len(), depth, shown).and_then(|e| whole_head(kv, item, e)) {
        None => (item.len(), Owed::Nothing),
        // The quote goes with the fixed text after it: tokenized
        // together they are the tokens the model would write (`","`
        // is one token, `"` then `,"` two, and an unusual pair).
        Some(end) => (end, Owed::Quote),
    }
}

/// Moves the end of an item's head on until the head is whole text: no
/// character cut between tokens and no escape cut after its backslash
/// (the model would read a broken character or `\"` as text). None when
/// that leaves nothing worth cutting.
fn whole_head(kv: &Kv<'_>, item: &[LlamaToken], mut end: usize) -> Option<usize> {
    let mut bytes: Vec<u8> = item[..end].iter().flat_map(|&t| kv.piece(t)).collect();
    while end + 2 <= item.len() {
        if head_is_whole(&bytes) {
            return Some(end);
        }
        bytes.extend(kv.piece(item[end]));
        end += 1;
    }
    None
}

/// `goes_on` where the list's next item is chosen right after `next`:
/// the decode that decides between `next` and `end` reads `next` too,
/// and `ahead` after it (what the next item's choice would feed before
/// it consults the model), on the bet that the list goes on (it does
/// more often than it ends), so the next item's first choice has its
/// logits without a decode of its own. When the list ends instead, the
/// bet's tokens leave the cache. Returns None when the list ends, else
/// the logits row for what follows `ahead` (None inside Some when the
/// bet could not be placed, and `ahead` is not in).
fn goes_on_ahead(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    more: bool,
    next: &str,
    end: &str,
    ahead: &[LlamaToken],
    pending: &mut Vec<LlamaToken>,
) -> Result<Option<Option<i32>>, LlmError> {
    if !more {
        job.feed_text(kv, pending, end);
        return Ok(None);
    }
    let next_t = kv.tokenize(next, false);
    let end_t = kv.tokenize(end, false);
    let shared = next_t
        .iter()
        .zip(&end_t)
        .take_while(|(a, b)| a == b)
        .count();
    let parts = shared < next_t.len() && shared < end_t.len();
    let fits = pending.len() + next_t.len() + ahead.len() <= kv.n_batch();
    if !parts || !fits || pending.len() + shared == 0 {
        return Ok(decode_json::goes_on(kv, job, more, next, end, pending)?.then_some(None));
    }
    // The branch token is the model's choice, not fed.
    job.fed_ahead(next_t.len() - 1 + ahead.len());
    let mut batch = std::mem::take(pending);
    let branch = batch.len() + shared - 1;
    batch.extend_from_slice(&next_t);
    batch.extend_from_slice(ahead);
    let last = batch.len() - 1;
    let base = kv.len();
    if base + batch.len() >= kv.n_ctx() {
        return Err(LlmError::ContextFull {
            need: base + batch.len(),
            have: kv.n_ctx(),
        });
    }
    kv.decode_batch(&batch, |j| j == branch || j == last)?;
    let logits = kv.logits(branch as i32);
    let score = |t: LlamaToken| {
        logits
            .get(t.0 as usize)
            .copied()
            .unwrap_or(f32::NEG_INFINITY)
    };
    let (go, end_tok) = (next_t[shared], end_t[shared]);
    let goes = score(go) >= score(end_tok);
    job.record(kv, branch as i32, if goes { go } else { end_tok });
    job.note_generated(kv, 1)?;
    if goes {
        return Ok(Some(Some(last as i32)));
    }
    // The bet's tokens from the branch on were never the answer's.
    job.unfeed(next_t.len() - shared - 1 + ahead.len());
    kv.truncate(base + branch + 1)?;
    pending.push(end_tok);
    job.feed(pending, &end_t[shared + 1..]);
    Ok(None)
}

/// A chosen answer: the summary sampled (first or, with `summary_last`,
/// after the lists), each cause and each action picked from the manual
/// items in `choices` (`choose_item`), no item twice; the likelihoods and
/// the ends of the lists are choices as in `generate_schema`.
pub(super) fn generate_chosen(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    req: &GenRequest,
    choices: &grammar::Choices,
    prompt: PromptTokens,
    out: &mut GenOutput,
    t0: Instant,
) -> Result<(), LlmError> {
    let budget = req.max_tokens;
    let open = if req.summary_last {
        grammar::OPEN_CAUSES
    } else {
        grammar::OPEN
    };
    let answer = decode_json::open_answer(kv, prompt, open, out, t0)?;
    let mut sampler = decode_json::sampler(kv.model(), grammar::STRING_BODY_GBNF, req)?;
    let mut pending: Vec<LlamaToken> = Vec::new();
    let mut draft = Draft::default();
    // The summary's share is kept from the lists (as `generate_schema`
    // shares out the budget): a tight `max_tokens` shortens the lists,
    // never empties the summary, and the job stays within it.
    let summary_cap = req.summary_tokens.max(1).min((budget / 2).max(1) as usize);
    let lists = Lists {
        budget: match req.summary_last && !req.summary_composed {
            true => budget.saturating_sub(summary_cap as u32),
            false => budget,
        },
        shown: req.item_tokens,
        causes: item_tokens(kv, &choices.causes),
        actions: item_tokens(kv, &choices.actions),
    };
    let mut summary =
        |kv: &mut Kv<'_>, job: &mut Tally, idx: i32, pending: &mut Vec<LlamaToken>| {
            decode_json::summary_value(
                kv,
                job,
                &mut sampler,
                idx,
                Value::summary(summary_cap, req.summary_last),
                budget,
                req.lookup.as_ref(),
                pending,
            )
        };
    if !req.summary_last {
        draft.summary = summary(kv, job, answer.idx, &mut pending)?;
        job.feed_text(kv, &mut pending, &grammar::SUMMARY_TO_CAUSES[1..]);
    }
    // The prompt's last row is the first cause's first choice.
    let ready = req.summary_last.then_some(Ready {
        row: answer.idx,
        depth: 0,
    });
    chosen_causes(
        kv,
        job,
        &lists,
        &choices.causes,
        ready,
        &mut draft,
        &mut pending,
    )?;
    let summary_row = chosen_actions(
        kv,
        job,
        &lists,
        &choices.actions,
        req.summary_last,
        &mut draft,
        &mut pending,
    )?;
    // A composed summary is built from the lists after the job: the
    // skeleton's `,"summary":"` read ahead with the last action stays
    // unread, and no model call follows the lists.
    if req.summary_last && !req.summary_composed {
        let idx = match summary_row {
            Some(row) => row,
            None => kv.decode(&std::mem::take(&mut pending))?,
        };
        draft.summary = summary(kv, job, idx, &mut pending)?;
        job.feed_text(kv, &mut pending, "}");
    }
    if req.summary_composed {
        // Left pending, never read: the answer as read back is whole JSON
        // with an empty summary, which the pipeline composes.
        job.feed_text(kv, &mut pending, "\"}");
    }
    decode_json::close_answer(kv, job, &answer, draft, &pending, out);
    Ok(())
}

/// The tokens `choose_item` walks for each item: its JSON string body
/// and the closing quote.
fn item_tokens(kv: &Kv<'_>, items: &[String]) -> Vec<Vec<LlamaToken>> {
    items
        .iter()
        .map(|t| kv.tokenize(&format!("{}\"", grammar::json_body(t)), false))
        .collect()
}

/// The causes picked from the manual's items, each with its likelihood,
/// no item twice, while the model goes on and items and the lists'
/// budget are left. `ready`: as for `choose_tokens`.
fn chosen_causes(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    lists: &Lists,
    items: &[String],
    mut ready: Option<Ready>,
    draft: &mut Draft,
    pending: &mut Vec<LlamaToken>,
) -> Result<(), LlmError> {
    let causes = &lists.causes;
    let mut taken = vec![false; causes.len()];
    while !causes.is_empty() {
        let (k, owed) = choose_item(
            kv,
            job,
            causes,
            &taken,
            lists.budget,
            lists.shown,
            pending,
            ready,
        )?;
        taken[k] = true;
        draft.probable_causes.push(DraftCause {
            cause: items[k].clone(),
            likelihood: decode_json::likelihood(
                kv,
                job,
                owed.of(grammar::CAUSE_TO_LIKELIHOOD),
                lists.budget,
                pending,
            )?,
            item: Some(k),
        });
        let more = draft.probable_causes.len() < grammar::MAX_CAUSES
            && taken.contains(&false)
            && job.generated() < lists.budget;
        let ahead = match more {
            true => shared_head(causes, &taken),
            false => Vec::new(),
        };
        match goes_on_ahead(
            kv,
            job,
            more,
            grammar::NEXT_CAUSE,
            grammar::CAUSES_TO_ACTIONS,
            &ahead,
            pending,
        )? {
            Some(row) => {
                ready = row.map(|row| Ready {
                    row,
                    depth: ahead.len(),
                })
            }
            None => break,
        }
    }
    Ok(())
}

/// The actions picked from the manual's items, no item twice, while
/// the model goes on and items and the lists' budget are left. With
/// `summary_last` (the summary is sampled next), an item left with no
/// other to choose from is decoded ahead with the list's end, and the
/// logits row after them, the summary's first, is returned.
fn chosen_actions(
    kv: &mut Kv<'_>,
    job: &mut Tally,
    lists: &Lists,
    items: &[String],
    summary_last: bool,
    draft: &mut Draft,
    pending: &mut Vec<LlamaToken>,
) -> Result<Option<i32>, LlmError> {
    let actions = &lists.actions;
    let end = match summary_last {
        true => grammar::ACTIONS_TO_SUMMARY,
        false => grammar::ACTIONS_TO_SOURCES,
    };
    let mut taken = vec![false; actions.len()];
    let mut take = |k: usize, taken: &mut [bool]| {
        taken[k] = true;
        draft.actions.push(items[k].clone());
        draft.action_items.push(k);
        draft.actions.len()
    };
    let mut ready = None;
    while !actions.is_empty() {
        let (k, owed) = choose_item(
            kv,
            job,
            actions,
            &taken,
            lists.budget,
            lists.shown,
            pending,
            ready,
        )?;
        let picked = take(k, &mut taken);
        let more = picked < grammar::MAX_ACTIONS
            && taken.contains(&false)
            && job.generated() < lists.budget;
        // The last item left: if the list goes on, it is taken and
        // ends the list, all without a choice. (Nothing goes ahead of a
        // list that ends here.)
        let left: Vec<usize> = (0..taken.len()).filter(|&j| !taken[j]).collect();
        let last = match left[..] {
            [j] if summary_last && more => Some(j),
            _ => None,
        };
        let tail = match last {
            Some(j) => {
                let (e, o) = shown_of(kv, &actions[j], 0, lists.shown);
                [actions[j][..e].to_vec(), kv.tokenize(o.of(end), false)].concat()
            }
            None if more => shared_head(actions, &taken),
            None => Vec::new(),
        };
        let next = owed.of(grammar::NEXT_ITEM);
        match (
            goes_on_ahead(kv, job, more, next, owed.of(end), &tail, pending)?,
            last,
        ) {
            (Some(Some(row)), Some(j)) => {
                take(j, &mut taken);
                return Ok(Some(row));
            }
            (Some(row), _) => {
                ready = row.map(|row| Ready {
                    row,
                    depth: tail.len(),
                })
            }
            (None, _) => break,
        }
    }
    Ok(None)
}

/// The manual's items a chosen answer picks from, as tokens, and how the
/// lists are picked.
struct Lists {
    /// The lists' share of the answer's model steps.
    budget: u32,
    /// `llm.item_tokens`: how many tokens of a picked item the model reads.
    shown: usize,
    causes: Vec<Vec<LlamaToken>>,
    actions: Vec<Vec<LlamaToken>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_after_an_item_brings_its_quote_only_when_the_quote_is_owed() {
        // A head: the quote goes in with what follows (`","` is one token).
        assert_eq!(Owed::Quote.of(grammar::NEXT_ITEM), "\",\"");
        assert_eq!(
            Owed::Quote.of(grammar::CAUSE_TO_LIKELIHOOD),
            "\",\"likelihood\":\""
        );
        // A whole item brought its own quote: never a second one (`""`).
        assert_eq!(Owed::Nothing.of(grammar::NEXT_ITEM), ",\"");
        assert_eq!(
            Owed::Nothing.of(grammar::ACTIONS_TO_SUMMARY),
            "],\"summary\":\""
        );
    }

    fn toks(ids: &[i32]) -> Vec<LlamaToken> {
        ids.iter().map(|&i| LlamaToken(i)).collect()
    }

    #[test]
    fn the_items_left_share_their_opening_up_to_where_they_part() {
        // Three checks that open with the same two tokens (`检查` `电机`).
        let items = vec![toks(&[7, 8, 1, 9]), toks(&[7, 8, 2, 9]), toks(&[7, 3, 9])];
        assert_eq!(shared_head(&items, &[false, false, false]), toks(&[7]));
        // With the third taken, the other two go on together for longer.
        assert_eq!(shared_head(&items, &[false, false, true]), toks(&[7, 8]));
        // One item left: no choice is coming, so nothing to share.
        assert_eq!(shared_head(&items, &[false, true, true]), toks(&[]));
        assert_eq!(shared_head(&items, &[true, true, true]), toks(&[]));
        // Never the whole of an item, even of two that are the same.
        let same = vec![toks(&[4, 5, 9]), toks(&[4, 5, 9])];
        assert_eq!(shared_head(&same, &[false, false]), toks(&[4, 5]));
    }

    #[test]
    fn a_chosen_item_is_shown_by_its_head_and_never_less_than_its_branch() {
        // 12 tokens, the last one holding the closing quote.
        assert_eq!(shown_end(12, 1, 6), Some(6));
        // It parted from the others late: shown up to there.
        assert_eq!(shown_end(12, 8, 6), Some(8));
        // Cutting would drop only the quote token or one before it.
        assert_eq!(shown_end(12, 11, 6), None);
        assert_eq!(shown_end(7, 1, 6), None);
        assert_eq!(shown_end(8, 1, 6), Some(6));
        // 0: the whole item.
        assert_eq!(shown_end(40, 1, 0), None);
    }
}
