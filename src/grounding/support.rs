//! The support rules: whether a cause shares enough content with the
//! passages retrieved for the alarm (never with the alarm's own text, which
//! is the sender's); and, by the same content terms, which values of a list
//! only repeat an earlier one.
//!
//! Content terms are retrieval's own terms, stemmed a little further, so a
//! cause is compared with the passages as retrieval matched them.

use std::collections::HashSet;

use super::text::code_parts;
use crate::alarm::Alarm;
use crate::retrieval::tokenize::terms;
use crate::retrieval::Hit;

/// Share of a cause's content terms that must occur in the passages. One in
/// three lets a paraphrase through ("filter blocked" for
/// "clogged filter" shares "filter") and stops a long invention that shares
/// one generic word ("engine") with the passage.
const MIN_SHARE: f64 = 1.0 / 3.0;

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

/// True if `cause` shares enough content with the passages. The alarm's
/// message and kind do not count: they are whatever the sender wrote, and the
/// queue merges alarms of one equipment and code, so a cause built from them
/// would publish one sensor's words as the diagnosis of another's alarm.
/// The alarm code's own parts do not count either: echoing
/// "JCW TEMP" back is not a cause.
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
        known.extend(content_terms(h.section.heading()));
        known.extend(content_terms(&h.title));
    }
    let shared = mine.iter().filter(|t| known.contains(*t)).count();
    shared > 0 && shared as f64 >= MIN_SHARE * mine.len() as f64
}

/// Which of `causes` a summary names: the one whose content terms it holds
/// the largest share of, at least half (None: it names none). For the
/// eval's comparison of model and composed summaries.
pub fn named_cause(summary: &str, causes: &[&str]) -> Option<usize> {
    let said = content_terms(summary);
    causes
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let mine = content_terms(c);
            let shared = mine.iter().filter(|t| said.contains(*t)).count();
            (!mine.is_empty() && shared * 2 >= mine.len())
                .then_some((i, shared as f64 / mine.len() as f64))
        })
        // The first on a tie: the list's rank decides.
        .fold(None, |best: Option<(usize, f64)>, (i, s)| match best {
            Some((_, b)) if b >= s => best,
            _ => Some((i, s)),
        })
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::grounding::tests::{battery_zh, lube};

    #[test]
    fn a_summary_names_the_cause_it_holds_most_of() {
        let causes = [
            "JCW cooler fouled on the sea water or LT side",
            "thermostatic valve stuck or controller fault",
        ];
        assert_eq!(
            named_cause("likely due to a stuck thermostatic valve", &causes),
            Some(1)
        );
        assert_eq!(
            named_cause("the JCW cooler is fouled on its sea water side", &causes),
            Some(0)
        );
        assert_eq!(
            named_cause("temperature high, check the engine", &causes),
            None
        );
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
    fn a_cause_sharing_the_passages_words_is_supported() {
        let (a, hits) = lube();
        assert!(support("Clogged lube oil filter", &hits, &a));
        assert!(support("the filter is blocked", &hits, &a));
        assert!(support("pumps worn out", &hits, &a));
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
}
