//! Diagnoses: the outbound wire format, and the answers built from retrieval
//! alone when the model cannot (mode "degraded"), should not (mode "triage"),
//! answered with nothing the passages support (mode "passages") or the
//! manuals hold nothing for the alarm (mode "unmatched"); and what an
//! answer says when no section is about its fault (`with_coverage`).
//!
//! Pure: passages and an alarm in, a `Diagnosis` out. The model-driven path lives
//! in `llm`; the pipeline that chooses between them lives in `pipeline`.

use serde::{Deserialize, Serialize};

use crate::alarm::Alarm;
use crate::language::Language;
use crate::retrieval::knowledge::ListKind;
use crate::retrieval::Hit;
use crate::verdict::Coverage;

pub mod site;

/// How a diagnosis was produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// The LLM answered.
    Full,
    /// The LLM failed (hung, cancelled, unusable output); built from retrieval.
    Degraded,
    /// The queue was full during a storm; built from retrieval straight away.
    Triage,
    /// The LLM answered, but none of its causes was text the passages or the
    /// alarm support (`grounding::guard`); built from retrieval.
    Passages,
    /// Nothing in the manuals matched the alarm (coverage "none"): answered
    /// at once, without the model, saying so.
    Unmatched,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Full => "full",
            Mode::Degraded => "degraded",
            Mode::Triage => "triage",
            Mode::Passages => "passages",
            Mode::Unmatched => "unmatched",
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Cause {
    pub cause: String,
    pub likelihood: String,
    /// Where the cause is in the manuals, when it is a manual item word for
    /// word (`Item::source`); absent for a model-written cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// What this vessel's crew said of this cause for this equipment and
    /// fault (`site`); absent when no site note speaks of it, so consumers
    /// that predate site notes read the same causes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site: Option<site::Tally>,
}

/// One numbered item of a manual passage: its text exactly as the manual
/// has it, and where it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    pub text: String,
    /// "main_engine_crankcase-zh § ME-CC-OMD-HI 检查与处理 #2": document,
    /// section and the item's number, so the engineer can open the page.
    pub source: String,
}

impl Item {
    /// The numbered items of a passage, in the manual's order, each with
    /// the number the manual gives it (a section split into parts goes on
    /// counting: its second part may start at "5）").
    pub fn of(hit: &Hit) -> Vec<Item> {
        let mut from = 0;
        list_items(&hit.text)
            .into_iter()
            .enumerate()
            .map(|(i, text)| {
                let at = hit.text[from..].find(&text).map(|k| from + k);
                let n = at.and_then(|at| marker_number(&hit.text[..at]));
                if let Some(at) = at {
                    from = at + text.len();
                }
                Item {
                    source: format!(
                        "{} § {} #{}",
                        hit.doc,
                        hit.section,
                        n.unwrap_or(i as u32 + 1)
                    ),
                    text,
                }
            })
            .collect()
    }
}

/// Where a manual item is, read back from its `Item::source`: a crew's
/// feedback names the cause it confirms by the source the diagnosis
/// published, and the next alarm's items are told apart by it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ItemRef {
    pub doc: String,
    pub section: crate::retrieval::Section,
    pub n: u32,
}

impl ItemRef {
    /// Reads "doc § section #n"; None for anything else (a site note's
    /// source, a model-written cause's).
    pub fn parse(source: &str) -> Option<Self> {
        let (doc, rest) = source.split_once(" § ")?;
        let (heading, n) = rest.rsplit_once(" #")?;
        let n = n.trim().parse().ok()?;
        let doc = doc.trim();
        (!doc.is_empty() && !heading.trim().is_empty()).then(|| ItemRef {
            doc: doc.to_string(),
            section: crate::retrieval::Section::new(heading.trim().to_string()),
            n,
        })
    }

    /// The same item of the same manual in either language (its
    /// translation keeps the code, the list and the numbering), whichever
    /// part of a split section holds it.
    pub fn same(&self, other: &ItemRef) -> bool {
        let stem = |d: &str| d.rsplit_once('-').map_or(d, |(s, _)| s).to_string();
        stem(&self.doc) == stem(&other.doc)
            && self
                .section
                .code()
                .eq_ignore_ascii_case(other.section.code())
            && self.section.list() == other.section.list()
            && self.n == other.n
    }
}

/// The number of the list marker that `before` ends with: "…；5）" → 5,
/// "（2）" → 2, "3. " → 3.
fn marker_number(before: &str) -> Option<u32> {
    let t = before.trim_end();
    let t = t.strip_suffix([')', '）', '、', '.'])?;
    let digits = t.len() - t.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    t[t.len() - digits..].parse().ok()
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Source {
    pub doc: String,
    pub section: String,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Timings {
    pub retrieval_ms: f64,
    pub prompt_tokens: u32,
    /// Prompt tokens found in the slot's KV cache (static prefix, or the
    /// part shared with the previous alarm) and not read again.
    #[serde(default)]
    pub cached_tokens: u32,
    pub ttft_ms: f64,
    pub generated_tokens: u32,
    pub generation_ms: f64,
    pub tokens_per_s: f64,
    /// Speculative decoding: tokens drafted by prompt lookup, and how many of
    /// them the model confirmed (each confirmed one saved a decode step).
    #[serde(default)]
    pub draft_tokens: u32,
    #[serde(default)]
    pub accepted_tokens: u32,
    /// Answer tokens the model did not choose but read in batches like a
    /// prompt: the JSON skeleton, and in a chosen answer the rest of each
    /// manual item after the tokens that told the candidates apart.
    #[serde(default)]
    pub fed_tokens: u32,
}

/// The diagnosis published on `{prefix}/diagnosis/{equipment}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Diagnosis {
    pub alarm_id: String,
    pub equipment: String,
    pub code: String,
    /// The alarm's own `ts` and `severity`, copied, so that `alarm_id` +
    /// `equipment` + `alarm_ts` identify the alarm a diagnosis answers
    /// (`ts` below is the diagnosis's own time).
    #[serde(default)]
    pub alarm_ts: String,
    #[serde(default)]
    pub severity: String,
    pub summary: String,
    pub probable_causes: Vec<Cause>,
    pub actions: Vec<String>,
    /// Where each action is in the manuals, in the order of `actions`, when
    /// every action is a manual item word for word; empty otherwise. A list
    /// beside `actions`, not objects in it, so consumers that read `actions`
    /// as strings keep working.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub action_sources: Vec<String>,
    pub sources: Vec<Source>,
    pub mode: Mode,
    /// Whether a section of the manuals is about this alarm's fault
    /// (`coverage::judge`); absent in a diagnosis journaled before it
    /// existed, which reads as covered.
    #[serde(default)]
    pub coverage: Coverage,
    /// The coverage rule that decided (`coverage::rules::RULES`), for the
    /// journal's line on the alarm; never on the wire, None when coverage
    /// was not judged (triage, a journaled diagnosis).
    #[serde(skip)]
    pub coverage_rule: Option<&'static str>,
    /// The id of the site note the answer rests on beside the manuals: a
    /// confirmed one that judged the fault covered by its section, or the
    /// crew's own cause offered for a fault the manuals lack. Absent when
    /// no note speaks of the fault.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coverage_note: Option<String>,
    /// Share (0..1, two decimals) of the model's causes that were text and
    /// supported by the passages (the alarm's own text is no support); what
    /// was not is not published.
    /// 0 in mode "passages"; 1 in "degraded" and "triage", whose causes are
    /// all the manuals' own.
    pub grounded: f64,
    pub model: String,
    pub timings: Timings,
    pub ts: String,
}

/// The bytes published for a diagnosis. The daemon publishes exactly these and
/// `eval` judges exactly these, so a measured validity is the wire's.
pub fn payload(d: &Diagnosis) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(d)
}

/// The current time as RFC 3339 (UTC).
pub fn now_rfc3339() -> String {
    time::OffsetDateTime::now_utc()
        .format(&time::format_description::well_known::Rfc3339)
        .unwrap_or_else(|_| "1970-01-01T00:00:00Z".into())
}

/// Splits a passage's "1) a 2) b" or "1. a; 2. b" or "（1）甲（2）乙" lists into items.
pub fn list_items(text: &str) -> Vec<String> {
    let body = match text.find([':', '：']) {
        Some(i) if text[..i].chars().count() < 80 && text[i..].contains(['1', '１']) => {
            &text[i + text[i..].chars().next().map_or(1, char::len_utf8)..]
        }
        _ => text,
    };
    let mut items = Vec::new();
    let mut cur = String::new();
    let mut marked = false;
    let chars: Vec<char> = body.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        // A list marker: a digit followed by ')', '.', '、' or '）', or '(' / '（' digit.
        // An item number is one or two digits (a list of ten or more goes
        // on at "10)"), never "0" first.
        let number = |j: usize| -> usize {
            let d = chars[j.min(chars.len())..]
                .iter()
                .take_while(|c| c.is_ascii_digit())
                .count();
            match d {
                1 => 1,
                2 if chars[j] != '0' => 2,
                _ => 0,
            }
        };
        let is_marker = |j: usize| -> Option<usize> {
            let c = *chars.get(j)?;
            if c == '(' || c == '（' {
                let d = number(j + 1);
                let e = *chars.get(j + 1 + d)?;
                if d > 0 && (e == ')' || e == '）') {
                    return Some(d + 2);
                }
                return None;
            }
            if c.is_ascii_digit() {
                let prev_ok =
                    j == 0 || !chars[j - 1].is_ascii_alphanumeric() && chars[j - 1] != '.';
                let d = number(j);
                let n = *chars.get(j + d)?;
                if prev_ok && d > 0 && matches!(n, ')' | '）' | '、') {
                    return Some(d + 1);
                }
                if prev_ok
                    && d > 0
                    && n == '.'
                    && chars.get(j + d + 1).is_some_and(|c| c.is_whitespace())
                {
                    return Some(d + 1);
                }
            }
            None
        };
        if let Some(len) = is_marker(i) {
            let t = clean_item(&cur);
            // Text before the first marker is the lead-in sentence, not an
            // item (even when it starts with a digit: "4G signal weak …").
            if !t.is_empty() && marked {
                items.push(t);
            }
            marked = true;
            cur.clear();
            i += len;
            continue;
        }
        cur.push(chars[i]);
        i += 1;
    }
    let t = clean_item(&cur);
    if !t.is_empty() {
        items.push(t);
    }
    items
}

fn clean_item(s: &str) -> String {
    s.trim()
        .trim_end_matches([';', '；', ',', '，', '.', '。'])
        .trim()
        .to_string()
}

/// A diagnosis from retrieved passages alone. Causes come from the best
/// "causes" passage (in the manual's order, most likely first), actions from
/// the best "checks" passage.
pub fn from_passages(
    alarm: &Alarm,
    hits: &[Hit],
    mode: Mode,
    model: &str,
    timings: Timings,
) -> Diagnosis {
    let causes_hit = hits
        .iter()
        .find(|h| ListKind::Causes.heads(h.section.heading()));
    let checks_hit = hits
        .iter()
        .find(|h| ListKind::Checks.heads(h.section.heading()));
    let likelihood = ["high", "medium", "low"];
    let probable_causes: Vec<Cause> = causes_hit
        .map(Item::of)
        .unwrap_or_default()
        .into_iter()
        .take(4)
        .enumerate()
        .map(|(i, c)| Cause {
            cause: c.text,
            likelihood: likelihood[i.min(2)].into(),
            source: Some(c.source),
            site: None,
        })
        .collect();
    let (actions, action_sources): (Vec<String>, Vec<String>) = checks_hit
        .map(Item::of)
        .unwrap_or_default()
        .into_iter()
        .take(5)
        .map(|i| (i.text, i.source))
        .unzip();
    let sources = dedup_sources(
        causes_hit
            .into_iter()
            .chain(checks_hit)
            .chain(hits.first())
            .map(|h| Source {
                doc: h.doc.clone(),
                section: h.section.heading().to_string(),
            }),
    );
    Diagnosis {
        alarm_id: alarm.id.clone(),
        equipment: alarm.equipment.clone(),
        code: alarm.code.clone(),
        alarm_ts: alarm.ts.clone(),
        severity: alarm.severity.as_str().into(),
        summary: passages_summary(alarm, hits, mode),
        probable_causes,
        actions,
        action_sources,
        sources,
        mode,
        coverage: Coverage::Covered,
        coverage_rule: None,
        coverage_note: None,
        // Every cause is the manuals' own; in mode "passages" the model's
        // were all dropped, and `grounding::guard` says so with 0.
        grounded: 1.0,
        model: model.to_string(),
        timings,
        ts: now_rfc3339(),
    }
}

/// The summary of an answer the model did not write: why, then the manual
/// and section the passages come from, in the alarm's language. Mode "full"
/// is a model answer whose own summary was not text.
pub fn passages_summary(alarm: &Alarm, hits: &[Hit], mode: Mode) -> String {
    let zh = in_chinese(alarm);
    let why = match (mode, zh) {
        (Mode::Triage, false) => "Triage during an alarm storm (no model run)",
        (Mode::Triage, true) => "告警风暴期间的快速分诊（未运行模型）",
        (Mode::Passages, false) => {
            "Model answer not supported by the manuals; guidance from the manuals"
        }
        (Mode::Passages, true) => "模型回答缺乏手册依据；以下为手册中的指导",
        (Mode::Full, false) => "Model summary unusable; see the manuals",
        (Mode::Full, true) => "模型摘要不可用；参见手册",
        (Mode::Degraded, false) => "Model diagnosis unavailable; guidance from the manuals",
        (Mode::Degraded, true) => "模型诊断不可用；以下为手册中的指导",
        (Mode::Unmatched, _) => return unmatched_summary(alarm, zh),
    };
    match hits.first() {
        Some(h) => format!("{why}: {} — {}.", h.title, h.section),
        None => match zh {
            false => format!(
                "{why}: the knowledge base has no passage for alarm {}.",
                alarm.code
            ),
            true => format!("{why}：知识库中没有告警 {} 的相关内容。", alarm.code),
        },
    }
}

/// True if the alarm's answer is in Chinese (`Alarm::language`).
fn in_chinese(alarm: &Alarm) -> bool {
    alarm.language() == Language::Chinese
}

/// A chosen answer's summary with no model tokens (`llm.summary =
/// "composed"`): the alarm, then the top-ranked cause and the first check in
/// the manual's words, in the alarm's language. It names the cause the list
/// ranks first, never another.
pub fn composed_summary(alarm: &Alarm, causes: &[Cause], actions: &[String]) -> String {
    let zh = in_chinese(alarm);
    let bare = |t: &str| {
        t.trim()
            .trim_end_matches(['.', '。', ';', '；', ',', '，'])
            .to_string()
    };
    let mut s = match zh {
        false => format!("{} on {}", alarm.code, alarm.equipment),
        true => format!("{} {}", alarm.equipment, alarm.code),
    };
    if let Some(c) = causes.first() {
        match zh {
            false => s.push_str(&format!(
                ": most likely ({}) {}",
                c.likelihood,
                bare(&c.cause)
            )),
            true => {
                let l = match c.likelihood.as_str() {
                    "high" => "高",
                    "medium" => "中",
                    _ => "低",
                };
                s.push_str(&format!("：最可能的原因（{l}）：{}", bare(&c.cause)));
            }
        }
    }
    match (actions.first(), zh) {
        (Some(a), false) => s.push_str(&format!("; first check: {}.", bare(a))),
        (Some(a), true) => s.push_str(&format!("；首先检查：{}。", bare(a))),
        (None, false) => s.push('.'),
        (None, true) => s.push('。'),
    }
    s
}

fn unmatched_summary(alarm: &Alarm, zh: bool) -> String {
    match zh {
        false => format!(
            "Not in the manuals: nothing in them matches alarm {}, so there is no diagnosis from them and the model was not run. Refer to the equipment maker's documentation.",
            alarm.code
        ),
        true => format!(
            "手册中没有与告警 {} 相关的内容，无法依据手册诊断，未运行模型。请查阅设备厂家资料。",
            alarm.code
        ),
    }
}

/// The answer for an alarm the manuals hold nothing for (coverage "none"):
/// a summary saying so, in the alarm's language, and no causes, actions or
/// sources, because none of the passages found is about it.
pub fn unmatched(alarm: &Alarm, model: &str, timings: Timings) -> Diagnosis {
    Diagnosis {
        alarm_id: alarm.id.clone(),
        equipment: alarm.equipment.clone(),
        code: alarm.code.clone(),
        alarm_ts: alarm.ts.clone(),
        severity: alarm.severity.as_str().into(),
        summary: unmatched_summary(alarm, in_chinese(alarm)),
        probable_causes: Vec::new(),
        actions: Vec::new(),
        action_sources: Vec::new(),
        sources: Vec::new(),
        mode: Mode::Unmatched,
        coverage: Coverage::None,
        coverage_rule: None,
        coverage_note: None,
        grounded: 1.0,
        model: model.to_string(),
        timings,
        ts: now_rfc3339(),
    }
}

/// A diagnosis as its coverage makes it. A "related" answer rates no cause
/// `high` (it may be another fault's cause) and its summary opens by saying,
/// in the alarm's language, that no section names this fault as the alarm
/// words it and which sections it draws on (its sources, or the passages
/// when it cites none); each cause keeps its `source`. A covered one is
/// unchanged.
///
/// The note says what the judgement found, never that the manuals lack the
/// fault: coverage reads words, and a fault the manuals cover, raised in a
/// device's or a plant's own words, can be judged related. Told that the
/// manuals have no section for it, the crew would not read the section the
/// answer cites.
pub fn with_coverage(
    mut d: Diagnosis,
    coverage: Coverage,
    alarm: &Alarm,
    hits: &[Hit],
) -> Diagnosis {
    d.coverage = coverage;
    if coverage != Coverage::Related {
        return d;
    }
    // A composed summary names the top cause's rating: composed again from
    // the lowered list, it says what the list says.
    let composed = d.summary == composed_summary(alarm, &d.probable_causes, &d.actions);
    for c in &mut d.probable_causes {
        if c.likelihood == "high" {
            c.likelihood = "medium".into();
        }
    }
    if composed {
        d.summary = composed_summary(alarm, &d.probable_causes, &d.actions);
    }
    let mut drawn: Vec<String> = d
        .sources
        .iter()
        .map(|s| format!("{} ({})", s.section, s.doc))
        .collect();
    if drawn.is_empty() {
        drawn = hits
            .iter()
            .map(|h| format!("{} ({})", h.section, h.doc))
            .collect();
        drawn.dedup();
    }
    let note = match (in_chinese(alarm), drawn.is_empty()) {
        (false, false) => format!(
            "Not found in the manuals: no section names this fault as the alarm words it. This answer draws on the nearest sections, which may be other faults': {}.",
            drawn.join("; ")
        ),
        (false, true) => {
            "Not found in the manuals: no section names this fault as the alarm words it."
                .to_string()
        }
        (true, false) => format!(
            "手册中未找到按此报警措辞所写的故障章节。本回答参照最接近的章节，可能属于其他故障：{}。",
            drawn.join("；")
        ),
        (true, true) => "手册中未找到按此报警措辞所写的故障章节。".to_string(),
    };
    d.summary = format!("{note} {}", d.summary);
    d
}

/// Keeps the first of each (doc, section).
pub fn dedup_sources(it: impl IntoIterator<Item = Source>) -> Vec<Source> {
    let mut out: Vec<Source> = Vec::new();
    for s in it {
        if !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Keeps the first of items whose text is the same up to case and spacing.
/// A small model can write one cause twice (seen with the 135M test model);
/// the engineer on watch should not read it twice.
pub fn distinct_texts<T>(items: Vec<T>, text: impl Fn(&T) -> &str) -> Vec<T> {
    let norm = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    let mut seen: Vec<String> = Vec::new();
    let mut out = Vec::with_capacity(items.len());
    for it in items {
        let k = norm(text(&it));
        if !seen.contains(&k) {
            seen.push(k);
            out.push(it);
        }
    }
    out
}

/// A figure as the wire carries it: two decimals (ms, shares).
pub(crate) fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cause(text: &str, likelihood: &str) -> Cause {
        Cause {
            cause: text.into(),
            likelihood: likelihood.into(),
            source: Some("d § s #1".into()),
            site: None,
        }
    }

    #[test]
    fn a_composed_summary_names_the_top_cause_and_first_check_in_the_manuals_words() {
        let a = Alarm {
            equipment: "ME1".into(),
            message: Some("JCW outlet temp high".into()),
            ..crate::test_support::alarm("ME-JCW-TEMP-HI")
        };
        let causes = [
            cause("JCW cooler fouled on the sea water or LT side", "high"),
            cause("thermostatic valve stuck", "medium"),
        ];
        let actions = ["Never open the expansion tank cap while hot.".to_string()];
        assert_eq!(
            composed_summary(&a, &causes, &actions),
            "ME-JCW-TEMP-HI on ME1: most likely (high) JCW cooler fouled on the sea water or LT side; first check: Never open the expansion tank cap while hot."
        );
        let z = Alarm {
            message: Some("主机滑油进口压力低".into()),
            ..a.clone()
        };
        let causes = [cause("滤器堵塞；", "medium")];
        assert_eq!(
            composed_summary(&z, &causes, &["检查滤器压差。".to_string()]),
            "ME1 ME-JCW-TEMP-HI：最可能的原因（中）：滤器堵塞；首先检查：检查滤器压差。"
        );
        assert_eq!(composed_summary(&a, &[], &[]), "ME-JCW-TEMP-HI on ME1.");
    }

    #[test]
    fn repeated_texts_are_kept_once_in_first_place() {
        let v = vec![
            "Filter choked",
            "pump worn",
            "filter  CHOKED ",
            "Pump worn",
            "valve shut",
        ];
        assert_eq!(
            distinct_texts(v, |s| s),
            ["Filter choked", "pump worn", "valve shut"]
        );
        assert!(distinct_texts(Vec::<String>::new(), |s| s.as_str()).is_empty());
    }

    #[test]
    fn numbered_lists_split_into_items() {
        let t = "Lube oil pressure low. Probable causes, most likely first: 1) clogged filter; 2) worn pump; 3) low sump level.";
        assert_eq!(
            list_items(t),
            vec!["clogged filter", "worn pump", "low sump level"]
        );
        let z = "主机滑油压力低。可能原因：1）滤器堵塞；2）滑油泵磨损；3）油位低。";
        assert_eq!(list_items(z), vec!["滤器堵塞", "滑油泵磨损", "油位低"]);
        // A lead-in that starts with a digit is still no item.
        let g = "4G signal weak (low RSSI, RSRP or SINR, poor signal). Probable causes, most likely first: 1) antenna cable; 2) coverage.";
        assert_eq!(list_items(g), vec!["antenna cable", "coverage"]);
        assert_eq!(
            list_items("Worn impeller, clogged strainer."),
            vec!["Worn impeller, clogged strainer"]
        );
    }

    #[test]
    fn a_list_of_ten_or_more_splits_at_every_item() {
        let items: Vec<String> = (1..=11).map(|n| format!("check {n}")).collect();
        let en: Vec<String> = (1..=11).map(|n| format!("{n}) check {n}")).collect();
        let en = format!("Checks and corrective actions: {}.", en.join("; "));
        assert_eq!(list_items(&en), items);
        let zh: Vec<String> = (1..=11).map(|n| format!("（{n}）check {n}")).collect();
        let zh = format!("检查：{}。", zh.join("；"));
        assert_eq!(list_items(&zh), items);
        // A reading is not a marker: "at 12.5 bar" and "after 15 min" stay.
        assert_eq!(
            list_items("Checks: 1) vent at 12.5 bar; 2) wait 15 min, then restart."),
            vec!["vent at 12.5 bar", "wait 15 min, then restart"]
        );
    }

    #[test]
    fn items_keep_the_manuals_numbers_and_words() {
        let h = |section: &str, text: &str| Hit {
            doc: "battery-zh".into(),
            lang: "zh".into(),
            title: "t".into(),
            ..crate::test_support::hit(section, text)
        };
        let part2 = h(
            "BAT-VOLT-LO 原因 (2/2)",
            "5）端子松动、接线腐蚀或保险丝熔断；6）锂电池BMS保护切断。",
        );
        let items = Item::of(&part2);
        assert_eq!(
            items,
            [
                Item {
                    text: "端子松动、接线腐蚀或保险丝熔断".into(),
                    source: "battery-zh § BAT-VOLT-LO 原因 (2/2) #5".into()
                },
                Item {
                    text: "锂电池BMS保护切断".into(),
                    source: "battery-zh § BAT-VOLT-LO 原因 (2/2) #6".into()
                }
            ]
        );
        let en = h(
            "X checks",
            "Checks: 1) Never open the crankcase doors within 10 minutes of a stop. 2) Do not restart before the cause is found.",
        );
        let items = Item::of(&en);
        assert_eq!(
            items[0].text,
            "Never open the crankcase doors within 10 minutes of a stop"
        );
        assert!(items[0].source.ends_with("X checks #1"));
        assert_eq!(items[1].text, "Do not restart before the cause is found");
        assert!(items[1].source.ends_with("#2"));
        let paren = h("Y 原因", "（1）滤器堵塞（2）严禁打开曲轴箱道门");
        let items = Item::of(&paren);
        assert_eq!(items[1].text, "严禁打开曲轴箱道门");
        assert!(items[1].source.ends_with("#2"), "{:?}", items[1]);
    }

    // A related answer rates no cause high, keeps every source and
    // opens by saying, in the alarm's language, what it draws on.
    #[test]
    fn a_related_answer_rates_no_cause_high_and_says_what_it_draws_on() {
        let hits = vec![Hit {
            doc: "ballast-zh".into(),
            ..crate::test_support::hit(
                "BAL-VLV-FAIL 原因",
                "压载遥控阀故障。可能原因：1）液压站压力低或电磁阀故障；2）阀门执行器漏油。",
            )
        }];
        let zh = Alarm {
            message: Some("压载泵启动失败".into()),
            ..crate::test_support::alarm("AL-2041")
        };
        let d = from_passages(&zh, &hits, Mode::Triage, "m", Timings::default());
        assert_eq!(d.probable_causes[0].likelihood, "high");
        let r = with_coverage(d.clone(), Coverage::Related, &zh, &hits);
        assert_eq!(r.coverage, Coverage::Related);
        assert!(
            r.probable_causes.iter().all(|c| c.likelihood != "high"),
            "{r:?}"
        );
        assert_eq!(r.probable_causes[0].likelihood, "medium");
        assert_eq!(r.probable_causes[0].source, d.probable_causes[0].source);
        assert!(
            r.summary.starts_with("手册中未找到按此报警措辞所写的故障章节。本回答参照最接近的章节，可能属于其他故障：BAL-VLV-FAIL 原因 (ballast-zh)。"),
            "{}",
            r.summary
        );
        assert!(r.summary.ends_with(&d.summary));
        let en = Alarm {
            message: Some("ballast pump will not start".into()),
            ..zh.clone()
        };
        let r = with_coverage(d.clone(), Coverage::Related, &en, &hits);
        assert!(r.summary.starts_with("Not found in the manuals: no section names this fault as the alarm words it. This answer draws on the nearest sections, which may be other faults': BAL-VLV-FAIL 原因 (ballast-zh)."), "{}", r.summary);
        // Covered: only the field changes.
        let c = with_coverage(d.clone(), Coverage::Covered, &en, &hits);
        assert_eq!(c, d);
    }

    // Found over MQTT with the stand-in: 45 related answers' composed
    // summaries still read "most likely (high)" / "最可能的原因（高）" once
    // their causes were rated medium.
    #[test]
    fn a_related_answers_composed_summary_rates_its_cause_as_the_list_does() {
        let hits = vec![crate::test_support::hit("BAL-VLV-FAIL causes", "x")];
        for message in ["ballast pump will not start", "压载泵启动失败"] {
            let a = Alarm {
                message: Some(message.into()),
                ..crate::test_support::alarm("AL-2041")
            };
            let causes = vec![Cause {
                cause: "low hydraulic power pack pressure".into(),
                likelihood: "high".into(),
                source: Some("ballast-en § BAL-VLV-FAIL causes #1".into()),
                site: None,
            }];
            let actions = vec!["Check the power pack.".to_string()];
            let mut d = from_passages(&a, &hits, Mode::Full, "m", Timings::default());
            d.summary = composed_summary(&a, &causes, &actions);
            d.probable_causes = causes;
            d.actions = actions;
            let r = with_coverage(d, Coverage::Related, &a, &hits);
            assert!(
                !r.summary.contains("(high)") && !r.summary.contains("（高）"),
                "{}",
                r.summary
            );
            assert!(
                r.summary.contains("most likely (medium)")
                    || r.summary.contains("最可能的原因（中）"),
                "{}",
                r.summary
            );
        }
    }

    #[test]
    fn an_unmatched_answer_says_so_without_causes() {
        let a = Alarm {
            message: Some("X波段雷达磁控管寿命到期".into()),
            ..crate::test_support::alarm("RAD-2")
        };
        let d = unmatched(&a, "m", Timings::default());
        assert_eq!((d.mode, d.coverage), (Mode::Unmatched, Coverage::None));
        assert!(
            d.summary.starts_with("手册中没有与告警 RAD-2 相关的内容"),
            "{}",
            d.summary
        );
        assert!(d.probable_causes.is_empty() && d.actions.is_empty() && d.sources.is_empty());
        let v: serde_json::Value = serde_json::from_slice(&payload(&d).unwrap()).unwrap();
        assert_eq!(v["coverage"], "none");
        assert_eq!(v["mode"], "unmatched");
    }

    #[test]
    fn an_items_source_reads_back_and_its_translation_is_the_same_item() {
        let en = ItemRef::parse("lube-en § ME-LO-PRES-LO causes (2/2) #5").unwrap();
        assert_eq!(
            (en.doc.as_str(), en.section.code(), en.n),
            ("lube-en", "ME-LO-PRES-LO", 5)
        );
        let zh = ItemRef::parse("lube-zh § ME-LO-PRES-LO 原因 #5").unwrap();
        assert!(en.same(&zh) && zh.same(&en));
        for other in [
            "lube-en § ME-LO-PRES-LO causes #4",
            "lube-en § ME-LO-PRES-LO checks #5",
            "lube-en § ME-LO-TEMP-HI causes #5",
            "fuel-en § ME-LO-PRES-LO causes #5",
        ] {
            assert!(!en.same(&ItemRef::parse(other).unwrap()), "{other}");
        }
        for not_an_item in [
            "site note · j.smith · 2026-11-02",
            "lube-en § causes",
            "x § y #z",
        ] {
            assert_eq!(ItemRef::parse(not_an_item), None, "{not_an_item}");
        }
    }

    #[test]
    fn decimals_are_not_list_markers() {
        let t = "Checks: 1) confirm 2.5 bar at the inlet; 2) change filter.";
        assert_eq!(
            list_items(t),
            vec!["confirm 2.5 bar at the inlet", "change filter"]
        );
    }

    #[test]
    fn degraded_diagnosis_uses_passages_in_order() {
        let a = Alarm {
            id: "a".into(),
            equipment: "ME1".into(),
            ..crate::test_support::alarm("ME-LO-PRES-LO")
        };
        let hit = |section: &str, text: &str| Hit {
            doc: "lube-en".into(),
            title: "Lube oil".into(),
            ..crate::test_support::hit(section, text)
        };
        let hits = vec![
            hit("ME-LO-PRES-LO causes", "Causes: 1) filter; 2) pump."),
            hit(
                "ME-LO-PRES-LO checks",
                "Checks: 1) read gauge; 2) change filter.",
            ),
        ];
        let d = from_passages(&a, &hits, Mode::Degraded, "m", Timings::default());
        assert_eq!(d.mode, Mode::Degraded);
        assert_eq!(d.probable_causes[0].cause, "filter");
        assert_eq!(d.probable_causes[0].likelihood, "high");
        assert_eq!(d.actions, vec!["read gauge", "change filter"]);
        assert_eq!(d.sources.len(), 2);
        assert!(!d.summary.is_empty());
        // The alarm's ts and severity were once not in the payload, so
        // alarm_id + equipment + ts could not identify the alarm answered.
        let v: serde_json::Value = serde_json::from_slice(&payload(&d).unwrap()).unwrap();
        assert_eq!(v["alarm_ts"], "2026-11-30T00:00:00Z");
        assert_eq!(v["severity"], "major");
    }
}
