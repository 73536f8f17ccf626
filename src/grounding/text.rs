//! The text rules: whether a model's value says anything at all (not JSON
//! punctuation, list numbering, the bare alarm code or a fragment), and the
//! clean-up a value gets before it is judged and published: list markers,
//! the alarm block read back, a rating written into a cause, several items
//! run together.
//!
//! One value at a time, against the alarm at most; the passages are the
//! concern of `support`.

use crate::alarm::Alarm;
use crate::language::is_cjk;

/// Fewest content words a value needs. Two, because the manuals' short
/// causes and checks ("worn pump", "Reduce speed") have two.
const MIN_WORDS: usize = 2;

/// A single word of at least this many letters is still text: the manuals
/// name two causes in one word ("icing", "blackout"), and their own items
/// must pass, or the answer built from them would break the rule it backs.
const MIN_LONE_WORD: usize = 5;

/// Fewest CJK characters: the manuals' shortest Chinese items ("结冰",
/// "降速") have two.
const MIN_CJK: usize = 2;

/// Words that do not make a value text on their own. "alarm" is here because
/// "ALARM BAT-VOLT-LO" is the bare code dressed up.
const FILLER: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "is", "are", "be", "by",
    "with", "from", "as", "it", "its", "this", "that", "if", "then", "than", "not", "no", "do",
    "alarm",
];

/// The answer's JSON vocabulary: keys (split at '_' as words are) and
/// likelihoods. A value made of them only ("likelihood:", "high") is the
/// skeleton leaking into a string.
const SCHEMA_WORDS: &[&str] = &[
    "summary",
    "probable",
    "causes",
    "cause",
    "likelihood",
    "high",
    "medium",
    "low",
    "actions",
    "sources",
];

/// The alarm code's parts ("me", "lo", "pres"), lowercased.
pub(super) fn code_parts(code: &str) -> Vec<String> {
    code.split(|c: char| !c.is_alphanumeric())
        .filter(|p| !p.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// `s` with every occurrence of `code` (ASCII case ignored) replaced by a
/// space, so "5BAT-VOLT-LO" leaves only the stray "5".
fn without_code(s: &str, code: &str) -> String {
    let code = code.trim();
    if code.is_empty() {
        return s.to_string();
    }
    // ASCII lowering keeps byte offsets, so matches index the original.
    let hay = s.to_ascii_lowercase();
    let needle = code.to_ascii_lowercase();
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for (i, _) in hay.match_indices(&needle) {
        out.push_str(&s[last..i]);
        out.push(' ');
        last = i + needle.len();
    }
    out.push_str(&s[last..]);
    out
}

/// JSON structure inside a value: the model wrote the skeleton into a string
/// ("1. 5BAT-VOLT-LO},{" seen with the 135M test model). The manuals never
/// use braces, and a quote next to a colon or bracket is a key or a list.
fn has_json_structure(s: &str) -> bool {
    s.contains(['{', '}'])
        || ["\":", "\",\"", "[\"", "\"]", ":["]
            .iter()
            .any(|p| s.contains(p))
        || s.trim_end().ends_with('[')
}

/// True if `value` says something: not JSON punctuation, not list numbering,
/// not the bare alarm code (alone or numbered), and at least two content
/// words (one long one) or two CJK characters once the code is taken out.
pub fn is_text(value: &str, alarm_code: &str) -> bool {
    if has_json_structure(value) {
        return false;
    }
    let rest = without_code(value, alarm_code);
    let parts = code_parts(alarm_code);
    let cjk = rest.chars().filter(|c| is_cjk(*c)).count();
    let words: Vec<&str> = rest
        .split(|c: char| !c.is_alphanumeric() || is_cjk(c))
        .filter(|w| w.chars().filter(|c| c.is_alphabetic()).count() >= 2)
        .filter(|w| !FILLER.contains(&w.to_lowercase().as_str()))
        .collect();
    // The code spelled out ("BAT VOLT LO") is still the code, and a key
    // ("likelihood:") is still JSON; one code part beside another word is
    // text ("poor vacuum" for FWG-VACUUM-LO).
    if cjk == 0
        && words.iter().all(|w| {
            let l = w.to_lowercase();
            let singular = l.strip_suffix('s').unwrap_or(&l);
            parts.contains(&l)
                || SCHEMA_WORDS.contains(&l.as_str())
                || SCHEMA_WORDS.contains(&singular)
        })
    {
        return false;
    }
    let words: Vec<usize> = words
        .iter()
        .map(|w| w.chars().filter(|c| c.is_alphabetic()).count())
        .collect();
    cjk >= MIN_CJK || words.len() >= MIN_WORDS || words.first().is_some_and(|&l| l >= MIN_LONE_WORD)
}

/// `value` without a leading list marker ("1. ", "2) ", "（3）", "- ") and
/// trailing separators: the model numbers its values as the passages do,
/// and "1. clogged filter" is published as "clogged filter".
pub fn tidy(value: &str) -> String {
    let v = value.trim();
    let chars: Vec<char> = v.chars().collect();
    let digits = chars
        .iter()
        .skip_while(|c| matches!(c, '(' | '（'))
        .take_while(|c| c.is_ascii_digit())
        .count();
    let open = usize::from(matches!(chars.first(), Some('(' | '（')));
    let skip = if matches!(chars.first(), Some('-' | '•' | '*'))
        && chars.get(1).is_some_and(|c| c.is_whitespace())
    {
        1
    } else if (1..=2).contains(&digits) {
        let after = open + digits;
        match (chars.get(after), chars.get(after + 1)) {
            (Some(')' | '）' | '、'), _) => after + 1,
            (Some('.'), Some(c)) if c.is_whitespace() => after + 1,
            (Some('.'), None) => after + 1,
            _ => 0,
        }
    } else {
        0
    };
    chars[skip..]
        .iter()
        .collect::<String>()
        .trim()
        .trim_end_matches([',', ';', '，', '；'])
        .trim()
        .to_string()
}

/// Consecutive words copied from the alarm's own fields that make an echo:
/// "ME1 critical main_engine_lube_oil MELO-PRES-LO 2.5 bar 1" is the alarm
/// block read back, while "below 2.5 bar" (two) is a reading in a sentence.
const ECHO_RUN: usize = 3;

/// The alarm block's own keys (prompt::alarm_block): "severity: minor, kind:
/// battery" read back is the block, not a diagnosis.
const ALARM_KEYS: &[&str] = &[
    "code",
    "equipment",
    "severity",
    "kind",
    "message",
    "threshold",
    "value",
    "unit",
];

/// Whether a word may belong to an echo of the alarm block: Some(true) for a
/// field (equipment, code, severity, kind, unit, or a code with its parts run
/// together, "MELO-PRES-LO"), Some(false) for a bare number or punctuation,
/// None for anything else.
fn echo_word(word: &str, alarm: &Alarm, parts: &[String]) -> Option<bool> {
    let w = word.trim_matches(|c: char| !c.is_alphanumeric() && c != '_' && c != '-');
    if w.is_empty() || w.parse::<f64>().is_ok() {
        return Some(false);
    }
    let l = w.to_lowercase();
    if ALARM_KEYS.contains(&l.as_str()) {
        return Some(true);
    }
    let fields = [
        Some(alarm.equipment.as_str()),
        Some(alarm.code.as_str()),
        Some(alarm.severity.as_str()),
        alarm.kind.as_deref(),
        alarm.unit.as_deref(),
    ];
    let dashed: Vec<&str> = l.split('-').collect();
    let code_like = dashed.len() >= 2
        && dashed
            .iter()
            .filter(|p| parts.iter().any(|c| c == *p))
            .count()
            >= 2;
    (fields.iter().flatten().any(|f| f.to_lowercase() == l) || code_like).then_some(true)
}

/// `value` without runs of the alarm's fields read back (see `ECHO_RUN`); a
/// run must hold at least one field besides numbers.
pub fn strip_echo(value: &str, alarm: &Alarm) -> String {
    let parts = code_parts(&alarm.code);
    let words: Vec<&str> = value.split_whitespace().collect();
    let echo: Vec<Option<bool>> = words.iter().map(|w| echo_word(w, alarm, &parts)).collect();
    let mut keep = vec![true; words.len()];
    let mut i = 0;
    while i < words.len() {
        let j = (i..words.len())
            .find(|&j| echo[j].is_none())
            .unwrap_or(words.len());
        if j - i >= ECHO_RUN && echo[i..j].contains(&Some(true)) {
            keep[i..j].iter_mut().for_each(|k| *k = false);
        }
        i = j + 1;
    }
    let kept: Vec<&str> = words
        .iter()
        .zip(&keep)
        .filter(|(_, k)| **k)
        .map(|(w, _)| *w)
        .collect();
    let joined = if keep.iter().all(|k| *k) {
        value.to_string()
    } else {
        kept.join(" ")
    };
    without_identifier_clauses(&joined)
}

/// `value` without the clauses that hold a snake_case identifier: the alarm's
/// `kind` ("main_engine_lube_oil") half translated into the answer
/// ("切换并清洗。主引擎lube_oil"). The manuals never write one.
fn without_identifier_clauses(value: &str) -> String {
    let identifier = |clause: &str| {
        clause
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .any(|w| w.trim_matches('_').contains('_'))
    };
    if !identifier(value) {
        return value.to_string();
    }
    let mut out = String::new();
    let mut clause = String::new();
    for c in value.chars() {
        clause.push(c);
        if matches!(c, '。' | '；' | '！' | '？' | ';') {
            if !identifier(&clause) {
                out.push_str(&clause);
            }
            clause.clear();
        }
    }
    if !identifier(&clause) {
        out.push_str(&clause);
    }
    out.trim().to_string()
}

/// One value holding several numbered items ("滤器脏堵；2）滑油泵磨损",
/// "clogged filter; 2) worn pump"), split where a separator is followed by
/// the next item's number. A decimal ("1.6 bar") is not a marker: a number
/// ends an item only before ")", "）", "、", or "." and a space.
pub fn split_items(value: &str) -> Vec<String> {
    let chars: Vec<char> = value.chars().collect();
    let mut cuts = Vec::new();
    for i in 0..chars.len() {
        if !matches!(chars[i], ';' | '；' | ',' | '，' | '。') {
            continue;
        }
        let mut j = i + 1;
        while chars.get(j).is_some_and(|c| c.is_whitespace()) {
            j += 1;
        }
        let open = usize::from(matches!(chars.get(j), Some('(' | '（')));
        let digits = chars[(j + open).min(chars.len())..]
            .iter()
            .take_while(|c| c.is_ascii_digit())
            .count();
        let end = j + open + digits;
        let marker = (1..=2).contains(&digits)
            && match (chars.get(end), chars.get(end + 1)) {
                (Some(')' | '）' | '、'), _) => true,
                (Some('.'), Some(c)) => c.is_whitespace() || is_cjk(*c),
                _ => false,
            };
        if marker {
            cuts.push((i + 1, j));
        }
    }
    let mut out = Vec::new();
    let mut from = 0;
    for (end, next) in cuts {
        out.push(chars[from..end].iter().collect::<String>());
        from = next;
    }
    out.push(chars[from..].iter().collect::<String>());
    out.into_iter()
        .map(|p| tidy(&p))
        .filter(|p| !p.is_empty())
        .collect()
}

/// `cause` without the rating the model wrote into it as well as into
/// `likelihood` ("stuck thermostatic valve, rated high"). Only after "rated"
/// or "likelihood": "pressure low" is a cause, not a rating.
pub fn strip_rating(cause: &str) -> String {
    for lead in ["rated", "likelihood:", "likelihood"] {
        for level in ["high", "medium", "low"] {
            for close in ["", ")"] {
                let tail = format!("{lead} {level}{close}");
                if let Some(head) = strip_suffix_ascii_ci(cause, &tail) {
                    let head = head.trim_end();
                    let head = head.strip_suffix('(').unwrap_or(head);
                    return head
                        .trim_end()
                        .trim_end_matches([',', ';', '-', '—'])
                        .trim_end()
                        .to_string();
                }
            }
        }
    }
    cause.to_string()
}

/// `s` without `tail` at its end, ASCII case ignored. Compared in place, not
/// on `s.to_lowercase()`: lowercasing changes the length of some letters
/// (the Kelvin sign, "İ"), and a cut measured on the copy falls elsewhere, or
/// inside a character, in `s`. `tail` is ASCII, so bytes that match it are
/// ASCII and the cut is on a character boundary.
fn strip_suffix_ascii_ci<'a>(s: &'a str, tail: &str) -> Option<&'a str> {
    let cut = s.len().checked_sub(tail.len())?;
    let (head, end) = (s.get(..cut)?, s.get(cut..)?);
    end.eq_ignore_ascii_case(tail).then_some(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis;
    use crate::grounding::tests::lube_zh;

    #[test]
    fn the_alarm_block_read_back_is_cut_from_a_value() {
        let (a, _) = lube_zh();
        // The stand-in's summary on the demo (2026-12-01).
        assert_eq!(
            strip_echo(
                "主机滑油进口压力低，备用泵已启动 ME1 critical main_engine_lube_oil MELO-PRES-LO 2.5 bar 1",
                &a
            ),
            "主机滑油进口压力低，备用泵已启动"
        );
        // A reading inside a sentence stays; so does a lone code part.
        let keep = "Inlet pressure below 2.5 bar on ME1";
        assert_eq!(strip_echo(keep, &a), keep);
        assert_eq!(
            strip_echo("1 2 3 clogged filter", &a),
            "1 2 3 clogged filter"
        );
        // An action that is only the echo leaves nothing.
        assert_eq!(strip_echo("ME1 critical ME-LO-PRES-LO", &a), "");
        // The kind half translated, after the last whole clause.
        assert_eq!(
            strip_echo("查滤器压差，切换并清洗。主引擎lube_oil", &a),
            "查滤器压差，切换并清洗。"
        );
        assert_eq!(strip_echo("Check the lube_oil filter", &a), "");
        // The block's keys read back with their values.
        assert_eq!(
            strip_echo(
                "读取充电控制器状态。 severity: critical, kind: main_engine_lube_oil, message",
                &a
            ),
            "读取充电控制器状态。"
        );
    }

    #[test]
    fn a_schema_key_opening_a_list_is_not_text() {
        // The stand-in's second action on the demo's lube-oil alarm (2026-12-01).
        assert!(!is_text("likelihoods:[", "ME-LO-PRES-LO"));
        assert!(!is_text("probable_causes", "ME-LO-PRES-LO"));
        assert!(!is_text("actions:", "ME-LO-PRES-LO"));
        assert!(is_text(
            "Check the actions of the relief valve",
            "ME-LO-PRES-LO"
        ));
    }

    #[test]
    fn the_rating_written_into_a_cause_goes() {
        assert_eq!(
            strip_rating("Stuck thermostatic valve or controller fault, rated high"),
            "Stuck thermostatic valve or controller fault"
        );
        assert_eq!(strip_rating("Worn pump (rated medium)"), "Worn pump");
        assert_eq!(
            strip_rating("Lube oil pressure low"),
            "Lube oil pressure low"
        );
        assert_eq!(
            strip_rating("Low sea water flow, rated low"),
            "Low sea water flow"
        );
    }

    // Lowercasing changes a string's length in bytes (the
    // Kelvin sign U+212A is 3 bytes, its lowercase "k" one; "İ" 2, its
    // lowercase 3), so a cut measured on the lowercase fell inside a
    // character (a panic that ended the worker) or inside the cause.
    #[test]
    fn a_rating_after_letters_whose_lowercase_is_longer_or_shorter_is_cut_at_the_right_place() {
        assert_eq!(strip_rating("\u{212A}中 rated high"), "\u{212A}中");
        assert_eq!(strip_rating("İ valve stuck, rated high"), "İ valve stuck");
        assert_eq!(strip_rating("Pump İ, Rated HIGH"), "Pump İ");
        assert_eq!(strip_rating("\u{212A}中"), "\u{212A}中");
        assert_eq!(strip_rating("中 likelihood: low)"), "中");
    }

    #[test]
    fn items_run_together_are_split_at_the_next_number() {
        assert_eq!(
            split_items("1）滑油滤器脏堵；2）滑油泵磨损或跳闸"),
            vec!["滑油滤器脏堵", "滑油泵磨损或跳闸"]
        );
        assert_eq!(
            split_items("clogged filter; 2) worn pump, 3. low sump level"),
            vec!["clogged filter", "worn pump", "low sump level"]
        );
        // Decimals and plain commas are not item markers.
        assert_eq!(
            split_items("pressure 1.6 bar, 2.5 bar limit"),
            vec!["pressure 1.6 bar, 2.5 bar limit"]
        );
        assert_eq!(split_items("Check the filter"), vec!["Check the filter"]);
    }

    // Seen on a fresh machine with the 135M test model.
    #[test]
    fn a_list_fragment_with_json_punctuation_is_not_text() {
        assert!(!is_text("1. 5BAT-VOLT-LO},{", "BAT-VOLT-LO"));
        assert!(!is_text("\"},{\"cause\":\"", "BAT-VOLT-LO"));
        assert!(!is_text("filter\",\"likelihood\":\"high", "X"));
        assert!(!is_text("[\"P1\"]", "X"));
    }

    #[test]
    fn the_answers_own_keys_and_likelihoods_are_not_text() {
        for v in [
            "likelihood:",
            "high",
            "Likelihood: medium",
            "cause",
            "actions, sources",
        ] {
            assert!(!is_text(v, "BAT-VOLT-LO"), "{v:?}");
        }
        assert!(is_text("low sump level", "BAT-VOLT-LO"));
    }

    #[test]
    fn leading_list_markers_and_trailing_separators_are_tidied_away() {
        assert_eq!(tidy("1. clogged filter"), "clogged filter");
        assert_eq!(tidy(" 2) worn pump;"), "worn pump");
        assert_eq!(tidy("（3）滤器堵塞；"), "滤器堵塞");
        assert_eq!(tidy("(4) valve shut"), "valve shut");
        assert_eq!(tidy("1、油位低，"), "油位低");
        assert_eq!(tidy("- read gauge"), "read gauge");
        assert_eq!(tidy("1. 5BAT-VOLT-LO,"), "5BAT-VOLT-LO");
        assert_eq!(tidy("2."), "");
        // Not markers: a decimal, a year, a hyphenated word.
        assert_eq!(tidy("2.5 bar at the inlet"), "2.5 bar at the inlet");
        assert_eq!(tidy("2026 survey overdue"), "2026 survey overdue");
        assert_eq!(tidy("-40 degC ambient"), "-40 degC ambient");
    }

    #[test]
    fn list_numbering_alone_is_not_text() {
        for v in [
            "1.", "2)", " 3） ", "（1）", "(2)", "-", "•", "1、", "", "  ",
        ] {
            assert!(!is_text(v, "ME-LO-PRES-LO"), "{v:?}");
        }
    }

    #[test]
    fn the_bare_alarm_code_is_not_text_alone_numbered_or_punctuated() {
        for v in [
            "BAT-VOLT-LO",
            "bat-volt-lo",
            "1. BAT-VOLT-LO",
            "5BAT-VOLT-LO",
            "BAT-VOLT-LO.",
            "\"BAT-VOLT-LO\"",
            "BAT VOLT LO",
            "Alarm BAT-VOLT-LO",
            "BAT-VOLT-LO: P1",
        ] {
            assert!(!is_text(v, "BAT-VOLT-LO"), "{v:?}");
        }
    }

    #[test]
    fn fragments_shorter_than_two_words_are_not_text() {
        for v in ["the", "of the", "oil", "P1", "P1, P2", "a pump", "LO"] {
            assert!(!is_text(v, "ME-LO-PRES-LO"), "{v:?}");
        }
        assert!(!is_text("泵", "ME-LO-PRES-LO"));
        assert!(!is_text("1）泵", "ME-LO-PRES-LO"));
    }

    #[test]
    fn short_causes_the_manuals_use_are_text() {
        for v in [
            "worn pump",
            "Reduce speed",
            "icing",
            "blackout",
            "1) clogged filter",
            "结冰",
            "油位低",
            "BAT-VOLT-LO：蓄电池老化",
            "LO filter clogged",
        ] {
            assert!(is_text(v, "ME-LO-PRES-LO"), "{v:?}");
        }
    }

    #[test]
    fn every_item_in_the_manuals_is_text() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge");
        let docs = crate::retrieval::knowledge::load_dir(&dir).unwrap();
        let mut n = 0;
        for doc in &docs {
            for ch in crate::retrieval::knowledge::chunk(doc) {
                for item in diagnosis::list_items(&ch.text) {
                    n += 1;
                    // Under any of the document's codes, since its sections
                    // answer alarms with those codes.
                    for code in &doc.codes {
                        assert!(is_text(&item, code), "{}: {item:?} ({code})", doc.id);
                    }
                }
            }
        }
        assert!(n > 1000, "only {n} items read from {}", dir.display());
    }
}
