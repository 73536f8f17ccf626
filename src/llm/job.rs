//! What a slot is asked and what it answers: the generation job
//! (`GenRequest`), its result and measurements (`GenOutput`, `Step`), and the
//! context settings every slot of a model shares (`SlotSettings`).

use super::grammar::{self, Draft};
use super::lookup::Lookup;
use super::prefix::PrefixSpec;

/// How the output is produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Keys and punctuation fed as batched tokens; only values sampled.
    Schema,
    /// Everything sampled under the whole-diagnosis GBNF grammar (reference).
    FullGrammar,
}

/// A generation job.
#[derive(Debug, Clone)]
pub struct GenRequest {
    /// The rendered prompt, ending where the assistant's answer starts.
    pub prompt: crate::prompt::Prompt,
    pub n_passages: usize,
    pub max_tokens: u32,
    pub style: Style,
    pub seed: u32,
    pub temperature: f32,
    /// Prompt-lookup speculative decoding of the values; None decodes one
    /// token per step.
    pub lookup: Option<Lookup>,
    /// Record every model choice with its top logits (`GenOutput::steps`),
    /// so two runs can be compared where they part (eval only).
    pub trace_steps: bool,
    /// A chosen answer: the manual items the causes and actions are picked
    /// from. None: the model writes them (schema path) or the whole output
    /// (grammar path).
    pub choices: Option<grammar::Choices>,
    /// Cap on the summary's sampled tokens.
    pub summary_tokens: usize,
    /// A chosen answer writes its summary after the causes and actions, so
    /// that it is conditioned on them; the published field order is the same.
    pub summary_last: bool,
    /// A chosen answer has no model summary (`llm.summary = "composed"`):
    /// the lists are chosen as with `summary_last`, and the summary is built
    /// from them afterwards at no model cost.
    pub summary_composed: bool,
    /// Tokens of a chosen item the model is shown back in its answer (0:
    /// the whole item); the published item is whole either way.
    pub item_tokens: usize,
    /// The daemon: the prompt's disk states are written only once the
    /// answer is published (`Slot::published`), and dropped if another job
    /// comes first, so that neither the answer nor a waiting alarm waits for
    /// flash writes. False: written right after the answer (one-shot
    /// commands, which exit after it).
    pub save_on_publish: bool,
}

/// One token the model chose, with the highest raw logits of the row it was
/// chosen from (before penalties and grammar).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Step {
    pub token: i32,
    pub top: Vec<(i32, f32)>,
}

/// Logits kept per step: enough to find both runs' tokens at a divergence.
pub(super) const STEP_TOP: usize = 8;

/// The `k` highest logits of a row, highest first.
pub fn top_logits(logits: &[f32], k: usize) -> Vec<(i32, f32)> {
    let mut v: Vec<(i32, f32)> = logits
        .iter()
        .enumerate()
        .map(|(i, &l)| (i as i32, l))
        .collect();
    let k = k.min(v.len());
    if k == 0 {
        return Vec::new();
    }
    v.select_nth_unstable_by(k - 1, |a, b| b.1.total_cmp(&a.1));
    v.truncate(k);
    v.sort_by(|a, b| b.1.total_cmp(&a.1));
    v
}

/// What a finished job produced, with its measurements.
#[derive(Debug, Clone, Default)]
pub struct GenOutput {
    pub draft: Draft,
    /// The JSON text as the model saw it (fixed parts and values).
    pub raw: String,
    pub prompt_tokens: u32,
    /// Prompt tokens found already in the KV cache and not decoded again.
    pub reused_tokens: u32,
    pub ttft_ms: f64,
    /// Tokens chosen by the model (sampled values plus structural decisions).
    pub generated_tokens: u32,
    /// Answer tokens the model did not choose, read in batches: the JSON
    /// skeleton and the rest of a chosen item after its last branch point.
    pub fed_tokens: u32,
    pub generation_ms: f64,
    pub prompt_ms: f64,
    /// Wall time of the whole job.
    pub total_ms: f64,
    /// llama.cpp's own decode time for the job (llama_perf: prompt + eval).
    pub llama_decode_ms: f64,
    /// Draft tokens proposed by prompt lookup, and how many the model agreed with.
    pub draft_tokens: u32,
    pub accepted_tokens: u32,
    /// Every model choice in order, when the request asked for it.
    pub steps: Vec<Step>,
    /// The answer as the model read it back (the cache after the prompt and
    /// what was left pending): the context of its every choice. A chosen
    /// item appears as its head (`llm.item_tokens`); `raw` has it whole.
    pub seen: String,
}

/// Context settings shared by every slot.
#[derive(Debug, Clone)]
pub struct SlotSettings {
    pub ctx: u32,
    pub batch: u32,
    pub threads: u32,
    pub cpus: Option<Vec<usize>>,
    /// The prompt text every job starts with (template + system prompt + the
    /// fixed head of the user turn), decoded when the slot starts.
    pub prefix: Option<PrefixSpec>,
    /// Bytes of RAM for this slot's saved prompt states (0: none).
    pub prompt_cache_bytes: usize,
    /// The disk tier of saved prompt states, shared by the slots (None:
    /// RAM only).
    pub prompt_disk: Option<super::prompt_cache::DiskSpec>,
    /// The KV cache's element type (keys and values).
    pub kv_type: crate::config::KvType,
    /// Prompt tokens per decode call: what bounds how long a pre-emption
    /// waits for the call in progress.
    pub prompt_chunk: usize,
    /// Rows up to which draft verifications may be padded, measured at the
    /// warm-up (0: no speculation configured; measured at the first draft
    /// if a job asks for one anyway).
    pub verify_rows: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn top_logits_are_the_highest_first() {
        let l = [0.5, 3.0, -1.0, 2.0, 3.5];
        assert_eq!(top_logits(&l, 3), vec![(4, 3.5), (1, 3.0), (3, 2.0)]);
        assert_eq!(top_logits(&l, 9).len(), 5);
        assert!(top_logits(&[], 4).is_empty());
    }
}
