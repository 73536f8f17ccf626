//! How a prompt becomes tokens: the template with its special tokens parsed,
//! the data (passages and the alarm) as plain text only.
//!
//! Owns the one tokenization every prompt goes through, in the slots and in
//! prompt-size accounting alike, so that identical prompts are identical
//! token sequences (KV-prefix reuse, the prompt cache) and the budget counts
//! what is decoded. It must never let data text become a special token.

use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token_type::LlamaTokenAttr;
use llama_cpp_2::vocab::LlamaVocab;

use crate::prompt::Prompt;

/// The tokens a slot decodes for `p`: BOS and the head as the static prefix
/// is tokenized (so the cached prefix is a prefix of every prompt), the data
/// as plain text, the tail with its template tokens.
pub fn prompt_tokens(model: &LlamaModel, p: &Prompt) -> Vec<LlamaToken> {
    prompt_tokens_block(model, p).tokens
}

/// A prompt's tokens, and how many of them end with its passage block:
/// the prefix that alarms retrieving the same sections share, which the
/// disk tier of the prompt cache keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PromptTokens {
    pub tokens: Vec<LlamaToken>,
    pub cuts: Cuts,
}

/// Where a prompt's tokens may be cut for the disk tier of the prompt
/// cache, which keeps the state of a prompt up to a cut: after the passage
/// block (shared by every alarm that retrieves the same sections) and before
/// the alarm's reading (shared by the same alarm raised again with a new
/// reading). None when the prompt has no alarm block.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cuts {
    pub block: Option<usize>,
    pub alarm: Option<usize>,
}

impl Cuts {
    /// The cuts that fall within the first `len` tokens, longest first.
    pub fn within(self, len: usize) -> impl Iterator<Item = usize> {
        [self.alarm, self.block]
            .into_iter()
            .flatten()
            .filter(move |&c| c > 0 && c <= len)
    }

    /// The cuts that fall within what was read of a prompt (`len` tokens).
    pub fn read(self, len: usize) -> Cuts {
        let keep = |c: Option<usize>| c.filter(|&c| c <= len);
        Cuts {
            block: keep(self.block),
            alarm: keep(self.alarm),
        }
    }
}

/// `prompt_tokens`, with where the passage block ends. The block and the
/// alarm after it are tokenized apart, so the block's tokens do not depend
/// on the alarm.
pub fn prompt_tokens_block(model: &LlamaModel, p: &Prompt) -> PromptTokens {
    let vocab = model.vocab();
    let mut out = head_tokens(model, p.head());
    let data = p.data();
    // Each part is tokenized apart, so the tokens before a cut do not
    // depend on what follows it.
    let cuts = match (p.block_len(), p.alarm_len()) {
        (Some(n), Some(m)) => {
            push_data(&vocab, &data[..n], &mut out);
            let block = out.len();
            push_data(&vocab, &data[n..m], &mut out);
            let alarm = out.len();
            push_data(&vocab, &data[m..], &mut out);
            Cuts {
                block: Some(block),
                alarm: Some(alarm),
            }
        }
        _ => {
            push_data(&vocab, data, &mut out);
            Cuts::default()
        }
    };
    out.extend(vocab.tokenize(p.tail().as_bytes(), false, true));
    PromptTokens { tokens: out, cuts }
}

/// Tokens of a prompt's head, the static prefix a slot keeps cached: BOS,
/// and the template's special tokens parsed.
pub fn head_tokens(model: &LlamaModel, head: &str) -> Vec<LlamaToken> {
    model.vocab().tokenize(head.as_bytes(), true, true)
}

/// Tokens of data text: never a special token of the vocabulary.
pub fn data_tokens(model: &LlamaModel, text: &str) -> Vec<LlamaToken> {
    let mut out = Vec::new();
    push_data(&model.vocab(), text, &mut out);
    out
}

/// What llama.cpp's tokenizer matches as a whole before it splits words,
/// and what a chat template gives meaning to.
pub fn is_special(vocab: &LlamaVocab<'_>, t: LlamaToken) -> bool {
    vocab
        .attr(t)
        .intersects(LlamaTokenAttr::Control | LlamaTokenAttr::UserDefined | LlamaTokenAttr::Unknown)
}

fn push_data(vocab: &LlamaVocab<'_>, text: &str, out: &mut Vec<LlamaToken>) {
    if text.is_empty() {
        return;
    }
    // Special parsing off keeps control tokens (`<|im_end|>`) out, but
    // llama.cpp still matches user-defined ones (Qwen's `<tool_call>`) in
    // plain text, as Hugging Face's tokenizers do.
    let tokens = vocab.tokenize(text.as_bytes(), false, false);
    let specials: Vec<String> = tokens
        .iter()
        .filter(|&&t| is_special(vocab, t))
        .map(|&t| String::from_utf8_lossy(&vocab.token_to_piece(t, true, None)).into_owned())
        .collect();
    if specials.is_empty() {
        out.extend(tokens);
        return;
    }
    match cut(text, &specials) {
        // Cut inside the special token's text, it cannot form; each side
        // is checked again, as it may hold others.
        Some(at) => {
            push_data(vocab, &text[..at], out);
            push_data(vocab, &text[at..], out);
        }
        // A single character that is itself a special token: left out,
        // rather than read as part of the template.
        None => out.extend(tokens.into_iter().filter(|&t| !is_special(vocab, t))),
    }
}

/// Where to cut `text` so that the earliest of the special tokens `found`
/// in it cannot form: after the first character of its text, or before it
/// when that is the text's last character. A special token whose text is
/// not found (a normalizing vocabulary) cuts after the first character.
/// Always strictly inside `text`, so cutting again ends; None for a single
/// character.
fn cut(text: &str, found: &[String]) -> Option<usize> {
    let after_char = |at: usize| at + text[at..].chars().next().map_or(0, char::len_utf8);
    let earliest = found
        .iter()
        .filter(|s| !s.is_empty())
        .filter_map(|s| text.find(s.as_str()))
        .min();
    let at = match earliest {
        Some(at) if after_char(at) < text.len() => after_char(at),
        Some(at) => at,
        None => after_char(0),
    };
    (at > 0 && at < text.len()).then_some(at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn found(s: &[&str]) -> Vec<String> {
        s.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn cuts_are_offered_longest_first_and_only_within_what_was_read() {
        let c = Cuts {
            block: Some(100),
            alarm: Some(140),
        };
        assert_eq!(c.within(200).collect::<Vec<_>>(), [140, 100]);
        assert_eq!(c.within(120).collect::<Vec<_>>(), [100]);
        assert_eq!(
            c.read(120),
            Cuts {
                block: Some(100),
                alarm: None
            }
        );
        assert_eq!(Cuts::default().within(500).count(), 0);
    }

    #[test]
    fn a_special_token_is_cut_after_its_first_character() {
        let t = "ok <tool_call> x";
        assert_eq!(cut(t, &found(&["<tool_call>"])), Some(4));
        // The earliest of several, wherever it is in the list.
        let t = "a<b>c<tool_call>";
        assert_eq!(cut(t, &found(&["<tool_call>", "<b>"])), Some(2));
        assert_eq!(cut("<tool_call>", &found(&["<tool_call>"])), Some(1));
        assert_eq!(cut("主<x>", &found(&["<x>"])), Some("主<".len()));
    }

    #[test]
    fn a_special_token_at_the_end_is_cut_before_and_one_character_not_at_all() {
        assert_eq!(cut("ab§", &found(&["§"])), Some(2));
        assert_eq!(cut("§", &found(&["§"])), None);
        // Not found as written: shorten by one character.
        assert_eq!(cut("é<x>", &found(&["<X>"])), Some("é".len()));
        assert_eq!(cut("x", &found(&["<X>"])), None);
    }

    #[test]
    fn every_cut_is_strictly_inside_the_text() {
        let texts = ["a", "ab", "<t>", "x<t>", "<t>x", "中文<t>中", "<t><t>"];
        for t in texts {
            for f in [found(&["<t>"]), found(&["t"]), found(&["zz"]), found(&[""])] {
                if let Some(at) = cut(t, &f) {
                    assert!(
                        at > 0 && at < t.len() && t.is_char_boundary(at),
                        "{t:?} {f:?}: {at}"
                    );
                }
            }
        }
    }
}
