//! A JSON string value while the model samples it: its bytes and tokens,
//! its cap, and when it must close (cap, budget, repetition, the end of its
//! one sentence). Pure: the decoders (`decode_json`, `speculate`) drive it.

use llama_cpp_2::token::LlamaToken;

use super::json_text::ends_sentence;
use crate::watchdog::is_looping;

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
    pub(super) fn new(cap: usize) -> Self {
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
