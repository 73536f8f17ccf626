//! The grounding guard: which of the model's values may be published.
//!
//! Owns two judgements on a model's answer: whether a value is text at all
//! (not JSON punctuation, list numbering, the bare alarm code or a fragment),
//! and whether a cause shares content with the passages retrieved for the
//! alarm or with the alarm itself. `guard` applies both to a draft diagnosis
//! and, when no cause survives, replaces the answer with the passages' own
//! items (`diagnosis::from_passages`, mode "passages").
//!
//! Pure: a draft, passages and an alarm in, a diagnosis and a verdict out. It
//! never runs the model and never writes text of its own beyond the summaries
//! `diagnosis` already knows how to build.

use std::collections::HashSet;

use crate::alarm::Alarm;
use crate::diagnosis::{self, Diagnosis, Mode};
use crate::retrieval::tokenize::{is_cjk, terms};
use crate::retrieval::Hit;

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

/// Share of a cause's content terms that must occur in the passages or the
/// alarm. One in three lets a paraphrase through ("filter blocked" for
/// "clogged filter" shares "filter") and stops a long invention that shares
/// one generic word ("engine") with the passage.
const MIN_SHARE: f64 = 1.0 / 3.0;

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
fn code_parts(code: &str) -> Vec<String> {
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

/// Near-repeats in a list of values: the later of two whose content terms
/// are mostly the same (Jaccard at least `NEAR_REPEAT`) goes. The model
/// writes one check twice with a word changed ("Compare inlet..." and
/// "Check inlet..."), and the engineer should not read it twice.
pub fn without_near_repeats<T>(items: Vec<T>, text: impl Fn(&T) -> &str) -> Vec<T> {
    let mut kept: Vec<(HashSet<String>, T)> = Vec::with_capacity(items.len());
    for it in items {
        let terms = content_terms(text(&it));
        let repeat = kept.iter().any(|(k, _)| {
            let union = k.union(&terms).count();
            union > 0 && k.intersection(&terms).count() as f64 >= NEAR_REPEAT * union as f64
        });
        if !repeat {
            kept.push((terms, it));
        }
    }
    kept.into_iter().map(|(_, it)| it).collect()
}

/// Share of shared content terms that makes two values one (see
/// `without_near_repeats`).
const NEAR_REPEAT: f64 = 0.75;

/// A cheap suffix fold on top of `terms`' plural fold, so "leaking",
/// "leaked" and "leak" meet. Applied to both sides, so a wrong stem still
/// compares equal to itself.
fn stem(t: String) -> String {
    if !t.bytes().all(|b| b.is_ascii_alphabetic()) {
        return t;
    }
    for (suffix, min) in [("ing", 6), ("ed", 5), ("es", 5)] {
        if t.len() >= min && t.ends_with(suffix) {
            return t[..t.len() - suffix.len()].to_string();
        }
    }
    t
}

/// Content terms: words (lowercased, stopwords out, stemmed) and CJK
/// character bigrams, as retrieval sees them.
fn content_terms(text: &str) -> HashSet<String> {
    terms(text)
        .into_iter()
        .filter(|t| !t.starts_with('#'))
        .map(stem)
        .collect()
}

/// True if `cause` shares enough content with the passages or the alarm. The
/// alarm code's own parts do not count: echoing "JCW TEMP" back is not a cause.
pub fn support(cause: &str, passages: &[Hit], alarm: &Alarm) -> bool {
    let parts: HashSet<String> = code_parts(&alarm.code).into_iter().map(stem).collect();
    let mine: HashSet<String> = content_terms(cause)
        .into_iter()
        .filter(|t| !parts.contains(t))
        .collect();
    if mine.is_empty() {
        return false;
    }
    let mut known = HashSet::new();
    for h in passages {
        known.extend(content_terms(&h.text));
        known.extend(content_terms(&h.section));
        known.extend(content_terms(&h.title));
    }
    for field in [alarm.message.as_deref(), alarm.kind.as_deref()]
        .into_iter()
        .flatten()
    {
        known.extend(content_terms(field));
    }
    let shared = mine.iter().filter(|t| known.contains(*t)).count();
    shared > 0 && shared as f64 >= MIN_SHARE * mine.len() as f64
}

/// What the guard did to one answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Share of the model's causes that were text and supported, 0..1.
    pub grounded: f64,
    /// The model's causes the guard removed.
    pub dropped: usize,
    /// No cause survived: the answer is the passages' own (mode "passages").
    pub fell_back: bool,
}

/// Cleans a model's draft diagnosis: values that are not text go, causes the
/// passages and the alarm do not support go, a summary that is not text is
/// replaced by the passage-built one, and with no cause left the whole answer
/// is built from the passages (mode "passages"). `grounded` is set on the
/// result, rounded to two decimals.
pub fn guard(draft: Diagnosis, passages: &[Hit], alarm: &Alarm) -> (Diagnosis, Verdict) {
    let code = alarm.code.as_str();
    let mut d = draft;
    // Each numbered item the model ran together counts as one of its causes.
    d.probable_causes = std::mem::take(&mut d.probable_causes)
        .into_iter()
        .flat_map(|c| {
            split_items(&strip_echo(&c.cause, alarm))
                .into_iter()
                .map(move |cause| diagnosis::Cause {
                    cause: strip_rating(&cause),
                    likelihood: c.likelihood.clone(),
                    source: None,
                })
        })
        .collect();
    let total = d.probable_causes.len();
    d.probable_causes
        .retain(|c| is_text(&c.cause, code) && support(&c.cause, passages, alarm));
    d.probable_causes = without_near_repeats(d.probable_causes, |c| c.cause.as_str());
    let kept = d.probable_causes.len();
    let grounded = if total == 0 {
        0.0
    } else {
        kept as f64 / total as f64
    };
    let verdict = Verdict {
        grounded,
        dropped: total - kept,
        fell_back: kept == 0,
    };
    if verdict.fell_back {
        let mut p =
            diagnosis::from_passages(alarm, passages, Mode::Passages, &d.model, d.timings.clone());
        p.grounded = 0.0;
        return (p, verdict);
    }
    let actions = d
        .actions
        .iter()
        .flat_map(|a| split_items(&strip_echo(a, alarm)));
    let actions: Vec<String> = actions.filter(|a| is_text(a, code)).collect();
    d.actions = without_near_repeats(actions, |a| a.as_str());
    d.summary = summary(&d.summary, passages, alarm);
    d.grounded = round2(grounded);
    (d, verdict)
}

/// The model's summary as published: the alarm's echo and clutter taken
/// out; a summary that is no text gives way to one naming the manual.
pub fn summary(text: &str, passages: &[Hit], alarm: &Alarm) -> String {
    let s = tidy(&strip_echo(text, alarm));
    if is_text(&s, &alarm.code) {
        s
    } else {
        diagnosis::passages_summary(alarm, passages, Mode::Full)
    }
}

/// The guard of a chosen answer. Its causes and actions were picked from
/// the passages' items and are published as they are (the text rules of
/// `guard` could cut a manual's words); each must be, byte for byte, a
/// numbered item of the passage its source names. One that is not is a
/// defect of the choice code, not a model error: the error names it.
/// The summary passes the same rules as in `guard`.
pub fn guard_chosen(
    draft: Diagnosis,
    passages: &[Hit],
    alarm: &Alarm,
) -> Result<(Diagnosis, Verdict), String> {
    let items: Vec<diagnosis::Item> = passages.iter().flat_map(diagnosis::Item::of).collect();
    let is_item = |text: &str, source: Option<&String>| {
        items
            .iter()
            .any(|i| i.text == text && Some(&i.source) == source)
    };
    for c in &draft.probable_causes {
        if !is_item(&c.cause, c.source.as_ref()) {
            return Err(format!(
                "chosen cause {:?} (source {:?}) is not an item of the passages",
                c.cause, c.source
            ));
        }
    }
    if draft.actions.len() != draft.action_sources.len() {
        return Err(format!(
            "{} chosen actions but {} action sources",
            draft.actions.len(),
            draft.action_sources.len()
        ));
    }
    for (a, src) in draft.actions.iter().zip(&draft.action_sources) {
        if !is_item(a, Some(src)) {
            return Err(format!(
                "chosen action {a:?} (source {src:?}) is not an item of the passages"
            ));
        }
    }
    if draft.probable_causes.is_empty() {
        return Err("a chosen answer without a cause".into());
    }
    let mut d = draft;
    d.summary = summary(&d.summary, passages, alarm);
    d.grounded = 1.0;
    let verdict = Verdict {
        grounded: 1.0,
        dropped: 0,
        fell_back: false,
    };
    Ok((d, verdict))
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarm::Severity;
    use crate::diagnosis::{Cause, Timings};

    fn alarm(code: &str, kind: &str, message: &str) -> Alarm {
        Alarm {
            id: "a1".into(),
            ts: "2026-11-30T00:00:00Z".into(),
            equipment: "E1".into(),
            code: code.into(),
            severity: Severity::Major,
            kind: Some(kind.into()),
            value: None,
            unit: None,
            threshold: None,
            message: Some(message.into()),
        }
    }

    fn hit(section: &str, text: &str) -> Hit {
        Hit {
            passage: 0,
            doc: "doc".into(),
            section: section.into(),
            score: 1.0,
            text: text.into(),
            lang: "en".into(),
            title: "Manual".into(),
        }
    }

    fn lube() -> (Alarm, Vec<Hit>) {
        (
            alarm("ME-LO-PRES-LO", "main_engine_lube_oil", "ME LO inlet press low"),
            vec![
                hit(
                    "ME-LO-PRES-LO causes",
                    "Lube oil pressure low. Probable causes, most likely first: 1) clogged filter; 2) worn pump; 3) low sump level.",
                ),
                hit(
                    "ME-LO-PRES-LO checks",
                    "Checks: 1) read the gauge at the inlet; 2) change over the duplex filter.",
                ),
            ],
        )
    }

    fn battery_zh() -> (Alarm, Vec<Hit>) {
        (
            alarm("BAT-VOLT-LO", "battery", "夜间蓄电池电压低"),
            vec![
                hit(
                    "BAT-VOLT-LO 原因",
                    "蓄电池电压低。可能原因：1）太阳能板被鸟粪覆盖；2）充电控制器故障；3）蓄电池老化。",
                ),
                hit(
                    "BAT-VOLT-LO 检查",
                    "检查与处理：1）测量充电电流；2）清洁太阳能板。",
                ),
            ],
        )
    }

    /// The demo's Chinese lube-oil alarm as the stand-in saw it.
    fn lube_zh() -> (Alarm, Vec<Hit>) {
        let mut a = alarm(
            "ME-LO-PRES-LO",
            "main_engine_lube_oil",
            "主机滑油进口压力低，备用泵已启动",
        );
        a.equipment = "ME1".into();
        a.severity = Severity::Critical;
        a.unit = Some("bar".into());
        a.value = Some(1.9);
        a.threshold = Some(2.5);
        (
            a,
            vec![hit(
                "ME-LO-PRES-LO 原因",
                "滑油压力低。可能原因：1）滑油滤器脏堵；2）滑油泵磨损或跳闸；3）油底壳油位低。",
            )],
        )
    }

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

    // Issue L item 2: lowercasing changes a string's length in bytes (the
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
    fn a_check_written_twice_with_a_word_changed_is_kept_once() {
        let actions = vec![
            "Compare inlet, outlet and cylinder outlet temperatures with the log; reduce load if rising; check thermostatic valve position and controller manually if stuck",
            "Measure temperatures across the cooler on both sides",
            "Check inlet, outlet and cylinder outlet temperatures with the log; reduce load if rising; check thermostatic valve position and controller manually if stuck",
        ];
        let kept = without_near_repeats(actions.clone(), |a| a);
        assert_eq!(kept, actions[..2]);
        // Two different checks on the same part are both kept.
        let two = vec![
            "Check the filter differential pressure",
            "Change over the duplex filter",
        ];
        assert_eq!(without_near_repeats(two.clone(), |a| a), two);
        let zh = vec!["滑油滤器脏堵", "滑油泵磨损或跳闸", "滑油滤器脏堵了"];
        assert_eq!(without_near_repeats(zh.clone(), |a| a), zh[..2]);
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

    #[test]
    fn the_demo_answer_is_published_without_the_echo_and_with_one_item_per_cause() {
        let (a, p) = lube_zh();
        let d = draft(
            "主机滑油进口压力低，备用泵已启动 ME1 critical main_engine_lube_oil MELO-PRES-LO 2.5 bar 1",
            &["滑油滤器脏堵；2）滑油泵磨损或跳闸", "油底壳油位低"],
            &["检查滑油滤器压差", "ME1 critical main_engine_lube_oil MELO-PRES-LO 2.5 bar 1"],
        );
        let (g, v) = guard(d, &p, &a);
        assert_eq!(g.summary, "主机滑油进口压力低，备用泵已启动");
        let causes: Vec<&str> = g.probable_causes.iter().map(|c| c.cause.as_str()).collect();
        assert_eq!(causes, ["滑油滤器脏堵", "滑油泵磨损或跳闸", "油底壳油位低"]);
        assert_eq!(g.actions, ["检查滑油滤器压差"]);
        assert_eq!((v.dropped, v.fell_back), (0, false));
    }

    fn draft(summary: &str, causes: &[&str], actions: &[&str]) -> Diagnosis {
        Diagnosis {
            alarm_id: "a1".into(),
            equipment: "E1".into(),
            code: "X".into(),
            summary: summary.into(),
            probable_causes: causes
                .iter()
                .map(|c| Cause {
                    cause: (*c).into(),
                    likelihood: "high".into(),
                    source: None,
                })
                .collect(),
            actions: actions.iter().map(|a| (*a).into()).collect(),
            action_sources: vec![],
            sources: vec![],
            mode: Mode::Full,
            grounded: 1.0,
            model: "m.gguf".into(),
            timings: Timings {
                prompt_tokens: 321,
                ..Default::default()
            },
            ts: "2026-11-30T00:00:00Z".into(),
        }
    }

    /// A chosen answer is published as it is, or it is a defect: a cause
    /// that lost its "严禁" shares every content word with the manual's item,
    /// so `support` would pass it; `guard_chosen` does not.
    #[test]
    fn a_chosen_item_that_is_not_the_manuals_words_is_a_defect() {
        let checks = hit(
            "ME-CC 检查与处理",
            "1）严禁在停车后10分钟内打开曲轴箱道门；2）查明原因。",
        );
        let causes = hit("ME-CC 原因", "可能原因：1）轴承过热；2）活塞环漏气。");
        let passages = [causes, checks];
        let a = alarm("ME-CC", "main_engine_crankcase", "油雾浓度高");
        let chosen = |cause: &str, src: &str, action: &str, asrc: &str| {
            let mut d = draft("曲轴箱油雾浓度高。", &[cause], &[action]);
            d.probable_causes[0].source = Some(src.into());
            d.action_sources = vec![asrc.into()];
            d
        };
        let (d, v) = guard_chosen(
            chosen(
                "轴承过热",
                "doc § ME-CC 原因 #1",
                "严禁在停车后10分钟内打开曲轴箱道门",
                "doc § ME-CC 检查与处理 #1",
            ),
            &passages,
            &a,
        )
        .unwrap();
        assert_eq!(d.actions, ["严禁在停车后10分钟内打开曲轴箱道门"]);
        assert_eq!((v.grounded, v.dropped, v.fell_back), (1.0, 0, false));
        assert!(support("在停车后10分钟内打开曲轴箱道门", &passages, &a));
        for (cause, src, action, asrc) in [
            (
                "轴承过热",
                "doc § ME-CC 原因 #1",
                "在停车后10分钟内打开曲轴箱道门",
                "doc § ME-CC 检查与处理 #1",
            ),
            (
                "轴承过热",
                "doc § ME-CC 原因 #2",
                "查明原因",
                "doc § ME-CC 检查与处理 #2",
            ),
            (
                "轴承过热或",
                "doc § ME-CC 原因 #1",
                "查明原因",
                "doc § ME-CC 检查与处理 #2",
            ),
        ] {
            let e = guard_chosen(chosen(cause, src, action, asrc), &passages, &a).unwrap_err();
            assert!(e.contains("is not an item of the passages"), "{e}");
        }
        let mut d = chosen(
            "轴承过热",
            "doc § ME-CC 原因 #1",
            "查明原因",
            "doc § ME-CC 检查与处理 #2",
        );
        d.action_sources.clear();
        assert!(guard_chosen(d, &passages, &a).is_err());
    }

    // Issue J item 2: seen on a fresh machine with the 135M test model.
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

    #[test]
    fn a_cause_sharing_the_passages_words_is_supported() {
        let (a, hits) = lube();
        assert!(support("Clogged lube oil filter", &hits, &a));
        assert!(support("the filter is blocked", &hits, &a));
        assert!(support("pumps worn out", &hits, &a));
        // The alarm's own message counts too.
        assert!(support("inlet pressure dropped", &hits, &a));
    }

    #[test]
    fn a_cause_sharing_nothing_or_only_the_code_is_not_supported() {
        let (a, hits) = lube();
        assert!(!support("solar panel covered by bird droppings", &hits, &a));
        assert!(!support("ME LO PRES LO", &hits, &a));
        assert!(!support("", &hits, &a));
        // One generic shared word in a long invention is not enough.
        assert!(!support(
            "gearbox coupling misaligned after dry docking and hull survey in oil",
            &hits,
            &a
        ));
    }

    #[test]
    fn chinese_causes_are_checked_by_character_bigrams() {
        let (a, hits) = battery_zh();
        assert!(support("充电控制器故障", &hits, &a));
        assert!(support("太阳能板被覆盖", &hits, &a));
        assert!(support("电池老化严重", &hits, &a));
        assert!(!support("滑油泵磨损", &hits, &a));
        assert!(!support("主机冷却水温度高", &hits, &a));
    }

    #[test]
    fn ungrounded_causes_are_dropped_and_the_share_reported() {
        let (a, hits) = lube();
        let d = draft(
            "Lube oil pressure low at the inlet",
            &[
                "clogged filter",
                "1. ME-LO-PRES-LO},{",
                "solar panel shaded",
            ],
            &[
                "1. change over the duplex filter",
                "2.",
                "ME-LO-PRES-LO",
                "likelihood:",
            ],
        );
        let (g, v) = guard(d, &hits, &a);
        assert_eq!(g.mode, Mode::Full);
        assert_eq!(g.probable_causes.len(), 1);
        assert_eq!(g.probable_causes[0].cause, "clogged filter");
        assert_eq!(g.actions, vec!["change over the duplex filter"]);
        assert_eq!(g.summary, "Lube oil pressure low at the inlet");
        assert_eq!(g.grounded, 0.33);
        assert_eq!(v.dropped, 2);
        assert!(!v.fell_back);
    }

    #[test]
    fn a_summary_that_is_not_text_is_replaced_from_the_passages() {
        let (a, hits) = lube();
        let (g, _) = guard(draft("1. ME-LO-PRES-LO},{", &["worn pump"], &[]), &hits, &a);
        assert!(is_text(&g.summary, &a.code), "{}", g.summary);
        assert!(g.summary.contains("ME-LO-PRES-LO causes"), "{}", g.summary);
        assert_eq!(g.mode, Mode::Full);
        assert_eq!(g.grounded, 1.0);
    }

    #[test]
    fn with_no_cause_left_the_passages_items_answer_and_mode_says_so() {
        let (a, hits) = battery_zh();
        let d = draft(
            "1. 5BAT-VOLT-LO},{",
            &["1. 5BAT-VOLT-LO},{", "滑油泵磨损"],
            &["BAT-VOLT-LO"],
        );
        let (g, v) = guard(d, &hits, &a);
        assert_eq!(g.mode, Mode::Passages);
        assert_eq!(g.grounded, 0.0);
        assert!(v.fell_back);
        assert_eq!(v.dropped, 2);
        assert_eq!(g.probable_causes[0].cause, "太阳能板被鸟粪覆盖");
        assert_eq!(g.actions, vec!["测量充电电流", "清洁太阳能板"]);
        assert!(g.summary.contains("手册"), "{}", g.summary);
        // The model's timings stay: it did run.
        assert_eq!(g.timings.prompt_tokens, 321);
        for c in &g.probable_causes {
            assert!(is_text(&c.cause, &a.code));
        }
    }

    #[test]
    fn without_passages_only_the_alarm_can_support_a_cause() {
        let a = alarm(
            "ME-JCW-TEMP-HI",
            "main_engine_cooling",
            "JCW outlet temp high cyl 3",
        );
        assert!(support("outlet temperature high on cylinder 3", &[], &a));
        let (g, v) = guard(
            draft("Cooling water hot", &["fuel filter clogged"], &[]),
            &[],
            &a,
        );
        assert!(v.fell_back);
        assert_eq!(g.mode, Mode::Passages);
        assert!(g.probable_causes.is_empty());
        assert!(!g.summary.is_empty());
    }
}
