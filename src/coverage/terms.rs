//! An alarm's and a section's terms as coverage weighs them: words (less
//! the `NOISE` every alarm says), Chinese characters in runs (less the
//! joiners and the pairs that name no fault), shortened words matched to
//! their full forms (`same_word`), each weighed by how little it names the
//! equipment (`Terms::weighted`).

use crate::language::is_cjk;
use crate::reading::plain_degree;

/// Words that say nothing about which fault it is: every alarm is one, and
/// the units and filler of a reading.
pub(super) const NOISE: &[&str] = &[
    "a", "an", "the", "and", "or", "of", "to", "in", "on", "at", "for", "is", "are", "be", "by",
    "with", "from", "as", "it", "its", "this", "that", "vs", "alarm", "alm", "warning", "bar",
    "rpm", "kn", "mm", "ppm", "hz", "kw", "degc", "pct", "cst", "ntu", "dbar", "mg", "ma", "dbm",
    "kpa", "mpa", "pa", "lel", "no",
    // Where on board: a location says which sensor, not which fault.
    "aft", "fwd", "stbd", "port", "ps", "sb", "er",
];

/// Chinese characters that join words but name nothing ("1号泵", "的").
pub(super) const CJK_JOINERS: &[char] = &[
    '号', '的', '了', '与', '和', '及', '或', '在', '时', '后', '已',
];

/// CJK pairs that say nothing about which fault it is.
pub(super) const CJK_NOISE: &[&str] = &["报警", "告警", "警报"];

/// An alarm message as coverage weighs it: its words, and its Chinese
/// characters in runs. A Chinese message has no spaces, so its terms are
/// character pairs, and a pair across two words ("炉汽" in "锅炉汽包") is
/// in no section: counted as a term it would hold every message of several
/// words under the bar. So the share counts characters, each found when a
/// pair it is part of is found (or it is a run of its own that is).
#[derive(Debug, Clone, Default)]
pub struct Terms {
    words: Vec<String>,
    runs: Vec<Vec<char>>,
    /// Each word's, then each character's, weight (`weighted`); empty: 1.
    weights: Vec<f32>,
}

impl Terms {
    pub fn of(text: &str) -> Self {
        let text = &plain_degree(&cjk_units_out(text));
        let mut words = words(text);
        words.sort();
        words.dedup();
        let runs = cjk_runs(text)
            .into_iter()
            .flat_map(|run| split_noise(&run))
            .collect();
        Terms {
            words,
            runs,
            weights: Vec::new(),
        }
    }

    /// Its words and Chinese characters.
    pub(super) fn units(&self) -> usize {
        self.words.len() + self.runs.iter().map(Vec::len).sum::<usize>()
    }

    /// The share of the message that `said` (a section's `text_terms`)
    /// holds: words and Chinese characters alike, a word counting when the
    /// section writes it in full or shortened the way alarm texts shorten
    /// words ("press" for "pressure", "rcvr" for "receiver").
    pub(super) fn share(&self, said: &[String]) -> f32 {
        self.share_of(&self.found(said))
    }

    /// `share` over what `found` (or `found_by`) found.
    pub(super) fn share_of(&self, found: &[bool]) -> f32 {
        let weight = |i: usize| self.weights.get(i).copied().unwrap_or(1.0);
        let total: f32 = (0..found.len()).map(weight).sum();
        if total <= 0.0 {
            return 0.0;
        }
        let held: f32 = (0..found.len()).filter(|&i| found[i]).map(weight).sum();
        held / total
    }

    /// Which of the message's words, then characters, `said` holds.
    pub(super) fn found(&self, said: &[String]) -> Vec<bool> {
        self.found_by(said, same_word)
    }

    /// `found`, a word matching when `same` says so.
    pub(super) fn found_by(&self, said: &[String], same: fn(&str, &str) -> bool) -> Vec<bool> {
        let mut out: Vec<bool> = self
            .words
            .iter()
            .map(|t| said.iter().any(|s| same(t, s)))
            .collect();
        let has = |t: &str| said.iter().any(|s| s == t);
        for run in &self.runs {
            if run.len() == 1 {
                out.push(has(&run[0].to_string()));
                continue;
            }
            let mut hit = vec![false; run.len()];
            for (i, p) in run.windows(2).enumerate() {
                if has(&p.iter().collect::<String>()) {
                    hit[i] = true;
                    hit[i + 1] = true;
                }
            }
            out.extend(hit);
        }
        out
    }

    /// The message weighed against its equipment's alarms (each causes
    /// section's own alarm, `own_alarm`): a word or character that most of
    /// them hold names the equipment ("溶解氧", "main engine"), not the
    /// fault, and weighs little; one none holds weighs 1. A word is weighed
    /// against the alarms written in Latin script, a character against the
    /// Chinese ones. Without alarms every unit weighs 1.
    pub(super) fn weighted(mut self, alarms: &Alarms) -> Self {
        let df = |lines: &[Vec<String>]| -> Vec<f32> {
            let mut n =
                vec![0usize; self.words.len() + self.runs.iter().map(Vec::len).sum::<usize>()];
            for l in lines {
                for (i, f) in self.found(l).into_iter().enumerate() {
                    n[i] += usize::from(f);
                }
            }
            n.into_iter()
                .map(|c| c as f32 / lines.len().max(1) as f32)
                .collect()
        };
        let (en, zh) = (&alarms.en, &alarms.zh);
        let (en_df, zh_df) = (df(en), df(zh));
        self.weights = (0..en_df.len())
            .map(|i| match i < self.words.len() {
                true => 1.0 - en_df[i],
                false => 1.0 - zh_df[i],
            })
            .collect();
        self
    }
}

/// An equipment's section alarms as `Terms::weighted` reads them: each
/// one's `text_terms`, Latin-script and Chinese apart.
pub(super) struct Alarms {
    en: Vec<Vec<String>>,
    zh: Vec<Vec<String>>,
}

impl Alarms {
    pub(super) fn of(alarms: &[String]) -> Self {
        let (zh, en): (Vec<&String>, Vec<&String>) =
            alarms.iter().partition(|a| crate::language::has_cjk(a));
        let terms = |v: Vec<&String>| v.into_iter().map(|a| text_terms(a)).collect();
        Alarms {
            en: terms(en),
            zh: terms(zh),
        }
    }
}

/// A Chinese unit right after a number is the reading's ("12吨", "6小时"):
/// it is left out as Latin units are.
pub(super) fn cjk_units_out(text: &str) -> String {
    const CJK_UNITS: &[char] = &[
        '吨', '度', '米', '秒', '分', '钟', '小', '时', '天', '周', '次', '个', '转', '伏', '安',
        '瓦', '升', '克', '帕', '圈', '条', '台',
    ];
    let mut out = String::with_capacity(text.len());
    let mut after_digit = false;
    for c in text.chars() {
        if after_digit && CJK_UNITS.contains(&c) {
            continue;
        }
        after_digit = c.is_ascii_digit() || (after_digit && matches!(c, '.' | ' '));
        out.push(c);
    }
    out
}

/// A run without the pairs that say nothing about which fault it is
/// ("报警"): the run is split around them.
pub(super) fn split_noise(run: &[char]) -> Vec<Vec<char>> {
    let mut out = Vec::new();
    let mut cur: Vec<char> = Vec::new();
    let mut i = 0;
    while i < run.len() {
        if i + 1 < run.len() {
            let pair: String = run[i..i + 2].iter().collect();
            if CJK_NOISE.contains(&pair.as_str()) {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
                i += 2;
                continue;
            }
        }
        cur.push(run[i]);
        i += 1;
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A section's terms: its words, its Chinese character pairs and the pairs
/// one character apart, so that a message's "排压" finds "排出压力".
pub(super) fn text_terms(text: &str) -> Vec<String> {
    let mut out = words(text);
    for run in cjk_runs(text) {
        out.extend(run.iter().map(char::to_string));
        out.extend(run.windows(2).map(|p| p.iter().collect::<String>()));
        out.extend(
            run.windows(3)
                .map(|p| [p[0], p[2]].iter().collect::<String>()),
        );
    }
    out.sort();
    out.dedup();
    out
}

/// Runs of Chinese characters, split at everything else and at joiners.
pub(super) fn cjk_runs(text: &str) -> Vec<Vec<char>> {
    let mut runs: Vec<Vec<char>> = Vec::new();
    let mut cur = Vec::new();
    for c in text.chars() {
        if is_cjk(c) && !CJK_JOINERS.contains(&c) {
            cur.push(c);
        } else if !cur.is_empty() {
            runs.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        runs.push(cur);
    }
    runs
}

pub(super) fn words(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_ascii_alphanumeric())
        .map(str::to_ascii_lowercase)
        .filter(|w| w.len() >= 2 && !w.bytes().any(|b| b.is_ascii_digit()))
        .filter(|w| !NOISE.contains(&w.as_str()))
        .collect()
}

/// Words alarm texts use for one sense where the manuals use another
/// (`Tx malfunction` for `transmit failure`, `exceeds` for `above`): the
/// trade's general usage, not any plant's. Only the fault's words: a
/// machine's name is the glossary's (`retrieval::glossary`).
const SENSES: &[&[&str]] = &[
    &[
        "fail",
        "failure",
        "failed",
        "fault",
        "faulty",
        "malfunction",
        "error",
    ],
    &[
        "exceeds",
        "exceeded",
        "exceeding",
        "above",
        "excess",
        "high",
    ],
    &["below", "under", "low"],
    &[
        "tx",
        "transmit",
        "transmitter",
        "transmitting",
        "transmission",
    ],
    &["rx", "receive", "receiver", "receiving", "reception"],
    &["overload", "overloaded", "overloading"],
    &[
        "overheat",
        "overheated",
        "overheating",
        "overtemperature",
        "overtemp",
    ],
    &["stuck", "seized", "jammed", "frozen"],
];

/// Whether two words are one sense of `SENSES`.
fn same_sense(w: &str, s: &str) -> bool {
    SENSES
        .iter()
        .any(|sense| sense.contains(&w) && sense.contains(&s))
}

/// True if the message's `w` is the section's `s`, or one of them is the
/// other's beginning ("temp", "temperature"; "failed", "fail"), or `w` is
/// `s` without its vowels ("brg", "bearing"; "lvl", "level").
pub(super) fn same_word(w: &str, s: &str) -> bool {
    if w == s || same_sense(w, s) {
        return true;
    }
    let latin = |x: &str| x.bytes().all(|b| b.is_ascii_alphanumeric());
    if !latin(w) || !latin(s) {
        return false;
    }
    let (short, long) = if w.len() <= s.len() { (w, s) } else { (s, w) };
    if long.starts_with(short) && (short.len() >= 3 || long.len() <= 4) {
        return true;
    }
    let vowel = |b: u8| b"aeiou".contains(&b);
    let wb = w.as_bytes();
    if wb.len() >= 3 && s.starts_with(&w[..1]) && !wb[1..].iter().any(|&b| vowel(b)) {
        let mut it = s.bytes().skip(1);
        return wb[1..].iter().all(|&b| it.any(|c| c == b));
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::fixtures::*;
    use crate::coverage::{judge, judge_with, Coverage, Equipment};

    #[test]
    fn a_word_is_weighed_against_alarms_in_its_own_script() {
        // The dissolved-oxygen manual's own alarms (zh).
        let do_alarms = [
            "溶解氧读数偏低或持续下降（DO低、溶氧下降）。",
            "溶解氧超量程（数值不合理、过饱和尖峰、出现负值）。",
            "溶解氧光极错误：无读数或相位、振幅错误（传感器故障、无信号）。",
        ]
        .map(String::from);
        let t = Terms::of("DO sensor 读数漂移").weighted(&Alarms::of(&do_alarms));
        // No English alarm: the words weigh 1; 读数 is in two of three
        // Chinese alarms, 漂移 in none.
        assert_eq!(t.weights[..2], [1.0, 1.0]);
        let w = &t.weights[2..];
        assert!(
            (w[0] - 1.0 / 3.0).abs() < 1e-6 && (w[1] - 1.0 / 3.0).abs() < 1e-6,
            "{w:?}"
        );
        assert_eq!(w[2..], [1.0, 1.0]);
    }

    #[test]
    fn message_terms_leave_out_readings_units_locations_and_joiners() {
        let t = Terms::of("No.1 ballast pp aft stbd disch press 1.9 bar alarm");
        assert_eq!(t.words, ["ballast", "disch", "pp", "press"]);
        assert!(t.runs.is_empty());
        let t = Terms::of("3号缸 温度高 95℃ 持续6小时 报警");
        let runs: Vec<String> = t.runs.iter().map(|r| r.iter().collect()).collect();
        assert_eq!(runs, ["缸", "温度高", "持续"]);
    }

    #[test]
    fn shortened_words_are_the_same_word() {
        for (w, s) in [
            ("press", "pressure"),
            ("temp", "temperature"),
            ("failed", "fail"),
            ("rcvr", "receiver"),
            ("brg", "bearing"),
            ("lvl", "level"),
            ("hi", "high"),
            ("lo", "low"),
        ] {
            assert!(same_word(w, s), "{w} {s}");
        }
        // One sense, as alarm texts and manuals write it.
        for (w, s) in [
            ("malfunction", "failure"),
            ("tx", "transmit"),
            ("exceeds", "above"),
            ("overheating", "overtemperature"),
        ] {
            assert!(same_word(w, s), "{w} {s}");
        }
        for (w, s) in [
            ("high", "low"),
            ("tx", "rx"),
            ("flow", "follow"),
            ("start", "stop"),
            ("pp", "pump"),
            ("st", "start"),
        ] {
            assert!(!same_word(w, s), "{w} {s}");
        }
    }

    #[test]
    fn words_every_alarm_of_the_equipment_holds_weigh_nothing() {
        // A drifting DO sensor has no section. Counted
        // alike, its words are 8 of 10 the optode error's (溶解氧, 传感器,
        // 读数); weighed, the equipment's name goes and the drift decides.
        let d = docs(&["dissolved_oxygen-zh"]);
        let a = alarm("DO-9", "溶解氧传感器读数漂移");
        let flat = judge(&a, &[optode()], Equipment::Known(&d));
        assert_eq!(flat.coverage, Coverage::Covered, "{flat:?}");
        let j = judge_with(&a, &[optode()], Equipment::Known(&d), &do_sections());
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        assert!(j.best < flat.best, "{j:?} {flat:?}");
        // The optode's own fault, in the plant's words, stays covered.
        let a = alarm("DO-9", "溶解氧传感器故障 无信号");
        let j = judge_with(&a, &[optode()], Equipment::Known(&d), &do_sections());
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
    }

    #[test]
    fn a_pair_across_two_chinese_words_does_not_hold_a_message_under_the_bar() {
        // "炉汽" and "包水" are in no section: as terms of their own they
        // held this message at 5 of 9 (0.56); as characters, 8 of 10 are
        // the section's.
        let hits = vec![causes(
            "boiler-zh",
            "BLR-WL-LO",
            "辅锅炉水位低（低水位、极低水位停炉）。可能原因：1）给水泵故障。",
        )];
        let j = judge(
            &alarm("BMS-L02", "辅锅炉汽包水位低低 停炉"),
            &hits,
            Equipment::Unknown,
        );
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert!(j.best >= 0.7 && j.best < 1.0, "{j:?}");
    }
}
