//! Text to index terms: Latin words and Chinese character bigrams.
//!
//! Pure functions shared by the index builder and the query side, so both see
//! exactly the same terms. Bigrams let "主机滑油压力低" find "滑油压力" without a
//! Chinese word segmenter.

const STOPWORDS: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "is", "are", "be", "by",
    "with", "from", "as", "it", "its", "this", "that", "if", "then", "than", "not", "no", "do",
    "check", "checks", "causes", "cause", "probable", "likely", "most", "first",
];

use crate::language::is_cjk;

fn normalize_word(w: &str) -> Option<String> {
    let w = w.to_lowercase();
    if w.is_empty() || STOPWORDS.contains(&w.as_str()) {
        return None;
    }
    // "1)", "2." list markers put one- and two-digit numbers in nearly every
    // passage: no ranking value, and a posting in every list.
    if w.len() <= 2 && w.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // A light plural fold: "pumps" and "pump" must meet; anything smarter
    // belongs to a real stemmer and is not worth its weight here.
    let w = if w.len() > 4
        && w.ends_with('s')
        && !w.ends_with("ss")
        && w.chars().all(|c| c.is_ascii_alphabetic())
    {
        w[..w.len() - 1].to_string()
    } else {
        w
    };
    Some(w)
}

/// Index terms for a text, in order, with repeats (callers count frequencies).
pub fn terms(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut code = String::new();
    let mut cjk_run: Vec<char> = Vec::new();
    let flush_cjk = |run: &mut Vec<char>, out: &mut Vec<String>| {
        if run.len() == 1 {
            out.push(run[0].to_string());
        }
        for pair in run.windows(2) {
            out.push(pair.iter().collect());
        }
        run.clear();
    };
    let flush_word = |word: &mut String, out: &mut Vec<String>| {
        if let Some(w) = normalize_word(word) {
            out.push(w);
        }
        word.clear();
    };
    // Alarm codes such as "ME-JCW-TEMP-HI" are also indexed whole, so an exact
    // code outranks a passage that merely shares its parts.
    let flush_code = |code: &mut String, out: &mut Vec<String>| {
        let c = code.trim_matches(|c| c == '-' || c == '_');
        if c.contains(['-', '_']) && c.len() >= 4 {
            out.push(format!("#{}", c.to_ascii_lowercase()));
        }
        code.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            flush_word(&mut word, &mut out);
            flush_code(&mut code, &mut out);
            cjk_run.push(c);
            continue;
        }
        if !cjk_run.is_empty() {
            flush_cjk(&mut cjk_run, &mut out);
        }
        if c.is_alphanumeric() && c.is_ascii() {
            word.push(c);
            code.push(c);
        } else if c == '-' || c == '_' {
            flush_word(&mut word, &mut out);
            code.push(c);
        } else {
            flush_word(&mut word, &mut out);
            flush_code(&mut code, &mut out);
        }
    }
    flush_word(&mut word, &mut out);
    flush_code(&mut code, &mut out);
    if !cjk_run.is_empty() {
        flush_cjk(&mut cjk_run, &mut out);
    }
    out
}

/// FNV-1a, 64-bit: the on-disk term key. Stable across builds and platforms,
/// which `std`'s hasher does not promise.
pub fn term_hash(term: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in term.as_bytes() {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// A rough token count for budgeting passages before the model's tokenizer is
/// at hand: about 1.3 tokens per English word and one per CJK character.
pub fn estimate_tokens(text: &str) -> usize {
    let cjk = text.chars().filter(|c| is_cjk(*c)).count();
    let words = text
        .split(|c: char| c.is_whitespace() || is_cjk(c))
        .filter(|w| !w.is_empty())
        .count();
    cjk + words * 13 / 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chinese_bigrams_make_substrings_meet() {
        let q = terms("主机滑油压力低");
        let d = terms("滑油压力");
        assert!(d.iter().all(|t| q.contains(t)), "{q:?} vs {d:?}");
        assert!(q.contains(&"滑油".to_string()));
        assert!(q.contains(&"压力".to_string()));
    }

    #[test]
    fn latin_words_are_lowercased_and_codes_kept_whole() {
        let t = terms("ME-JCW-TEMP-HI: Pumps failed");
        assert!(t.contains(&"#me-jcw-temp-hi".to_string()));
        assert!(t.contains(&"jcw".to_string()));
        assert!(t.contains(&"pump".to_string()));
        assert!(!t.contains(&"ME".to_string()));
    }

    #[test]
    fn mixed_scripts_split_cleanly() {
        let t = terms("CTD电导率异常 conductivity");
        assert!(t.contains(&"ctd".to_string()));
        assert!(t.contains(&"电导".to_string()));
        assert!(t.contains(&"conductivity".to_string()));
    }

    #[test]
    fn single_cjk_char_is_kept() {
        assert_eq!(terms("a 油 b"), vec!["油".to_string(), "b".to_string()]);
    }

    #[test]
    fn hash_is_stable() {
        assert_eq!(term_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_ne!(term_hash("滑油"), term_hash("油滑"));
    }
}
