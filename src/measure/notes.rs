//! `eval --notes`: a vessel's history replayed. Each case's first alarm is
//! diagnosed, the crew's verdict on it becomes a site note, and each later
//! occurrence is diagnosed without notes and with all of the history's
//! notes: is its coverage right, is the confirmed cause ranked first, is
//! the crew's own cause offered for a fault the manuals lack, and does a
//! note leak onto an alarm of another fault.
//!
//! Owns the history format (one case per line: `kind` confirm, crew or
//! other; `first`, `truth`, `by`, `feedback_ts`, `next`), the making of a
//! note from a verdict (`feedback`) and the scores (`Tally`), all pure;
//! `run` drives a real slot.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::alarm::Alarm;
use crate::coverage::Coverage;
use crate::diagnosis::site::is_site_source;
use crate::diagnosis::{Diagnosis, Item, ItemRef};
use crate::notes::{Answered, Note, NoteCause, NotedAlarm, SiteNotes, Verdict};
use crate::retrieval::{Index, Query};

#[derive(Debug, thiserror::Error)]
pub enum NotesEvalError {
    #[error("history file {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("history file {path} line {line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
}

/// One case of a history set.
#[derive(Debug, Clone, Deserialize)]
pub struct HistoryCase {
    pub id: String,
    pub writer: String,
    pub kind: Kind,
    #[serde(default)]
    pub first: Option<serde_json::Value>,
    #[serde(default)]
    pub truth: Option<Truth>,
    #[serde(default)]
    pub by: Option<String>,
    #[serde(default)]
    pub feedback_ts: Option<String>,
    pub next: serde_json::Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// The crew confirmed a manual item as the cause.
    Confirm,
    /// The crew wrote the cause: a fault no manual covers.
    Crew,
    /// Another fault of equipment that has notes: only `next` is judged.
    Other,
}

/// The real cause of a case's fault.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Truth {
    Item {
        doc: String,
        section: String,
        item: u32,
    },
    Text {
        text: String,
        #[serde(default)]
        remedy: Option<String>,
    },
}

/// A history file's cases, with its part (the file's stem: `tune`, `held`).
pub fn load(path: &Path) -> Result<(String, Vec<HistoryCase>), NotesEvalError> {
    let name = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|error| NotesEvalError::Read {
        path: name.clone(),
        error,
    })?;
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let c: HistoryCase = serde_json::from_str(line).map_err(|e| NotesEvalError::Line {
            path: name.clone(),
            line: i + 1,
            reason: e.to_string(),
        })?;
        cases.push(c);
    }
    let part = path
        .file_stem()
        .map_or("history".into(), |s| s.to_string_lossy().into_owned());
    Ok((part, cases))
}

/// An alarm of a case as the daemon reads it off the wire. An equipment
/// name is a topic level there, so a plant's `M/E` or `NO.2 G/E` is
/// published as `M-E`: the characters MQTT gives a meaning in a topic
/// (`/`, `+`, `#`) become `-`, the same for every alarm of the history.
pub fn alarm_of(v: &serde_json::Value) -> Result<Alarm, String> {
    let mut v = v.clone();
    if let Some(e) = v.get("equipment").and_then(|e| e.as_str()) {
        v["equipment"] = serde_json::Value::String(topic_safe(e));
    }
    let bytes = serde_json::to_vec(&v).map_err(|e| e.to_string())?;
    crate::alarm::parse(&bytes, None, usize::MAX).map_err(|e| e.to_string())
}

/// `equipment` with `/`, `+` and `#` as `-`.
pub fn topic_safe(equipment: &str) -> String {
    equipment.replace(['/', '+', '#'], "-")
}

/// The crew's verdict on `d` (the diagnosis of `first`) as a note: the
/// published cause that is the truth's item, by its source; else the item
/// in the crew's words (`item_text`, the manual's); a crew truth in its
/// own words.
pub fn feedback(
    c: &HistoryCase,
    first: &Alarm,
    d: &Diagnosis,
    item_text: Option<&str>,
) -> Option<Note> {
    let truth = c.truth.as_ref()?;
    let (cause, remedy) = match truth {
        Truth::Item { doc, section, item } => {
            let want = ItemRef {
                doc: doc.clone(),
                section: crate::retrieval::Section::new(section.clone()),
                n: *item,
            };
            let published = d
                .probable_causes
                .iter()
                .filter_map(|c| c.source.as_deref())
                .find(|s| ItemRef::parse(s).is_some_and(|r| r.same(&want)));
            match (published, item_text) {
                (Some(s), _) => (NoteCause::Source(s.to_string()), None),
                (None, Some(t)) => (NoteCause::Text(t.to_string()), None),
                (None, None) => return None,
            }
        }
        Truth::Text { text, remedy } => (NoteCause::Text(text.clone()), remedy.clone()),
    };
    let ts = c.feedback_ts.clone()?;
    let mut note = Note {
        id: String::new(),
        alarm: NotedAlarm {
            equipment: first.equipment.clone(),
            code: first.code.clone(),
            kind: first.kind.clone(),
            message: first.message.clone(),
            value: first.value,
            unit: first.unit.clone(),
            threshold: first.threshold,
        },
        verdict: Verdict::Confirmed,
        cause,
        remedy,
        by: c.by.clone().unwrap_or_else(|| "crew".into()),
        ts,
        answered: Answered {
            alarm_id: first.id.clone(),
            alarm_ts: first.ts.clone(),
            diagnosis_ts: d.ts.clone(),
            mode: d.mode.as_str().into(),
            coverage: d.coverage.as_str().into(),
            sources: d.sources.clone(),
            causes: d.probable_causes.clone(),
        },
        vessel: None,
        withdrawn: None,
    };
    note.id = note.make_id();
    Some(note)
}

/// The text of item `n` of `section` in manual `doc`, from the index.
pub fn item_text(index: &Index, doc: &str, section: &str, n: u32) -> Option<String> {
    let want = ItemRef {
        doc: doc.into(),
        section: crate::retrieval::Section::new(section.into()),
        n,
    };
    let code = crate::retrieval::section::code_of(section)?;
    let hits = index.search(&Query::from_text(code), 40).ok()?;
    let mut hits: Vec<_> = hits.into_iter().filter(|h| h.doc == doc).collect();
    hits.extend(index.causes_of(&[doc.to_string()]));
    hits.iter()
        .flat_map(Item::of)
        .find(|i| ItemRef::parse(&i.source).is_some_and(|r| r.same(&want)))
        .map(|i| i.text)
}

/// How one `next` diagnosis fared.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Judged {
    /// Confirm: covered, with the truth's section among the sources.
    /// Crew: not covered (the manuals lack the fault).
    pub coverage_right: bool,
    /// Confirm: the truth's item is the first cause.
    pub confirmed_first: bool,
    /// Crew: the crew's cause is offered, marked as a site note.
    pub crew_offered: bool,
    /// Any site note shows: a cause with `site`, or a `coverage_note`.
    pub note_shown: bool,
    pub latency_ms: f64,
    pub model_steps: u32,
    /// What the diagnosis said first, for a miss's line: its coverage and
    /// first cause's source (the crew's words for a site note's).
    pub said: String,
}

/// Judges `d`, the diagnosis of case `c`'s `next`.
pub fn judge(c: &HistoryCase, d: &Diagnosis) -> Judged {
    let note_shown =
        d.coverage_note.is_some() || d.probable_causes.iter().any(|c| c.site.is_some());
    let mut j = Judged {
        note_shown,
        latency_ms: d.timings.retrieval_ms + d.timings.ttft_ms + d.timings.generation_ms,
        model_steps: d.timings.generated_tokens,
        said: format!(
            "{}, first cause {}",
            d.coverage.as_str(),
            d.probable_causes
                .first()
                .map_or("none", |c| c.source.as_deref().unwrap_or(&c.cause))
        ),
        ..Default::default()
    };
    match (c.kind, &c.truth) {
        (Kind::Confirm, Some(Truth::Item { doc, section, item })) => {
            let want = ItemRef {
                doc: doc.clone(),
                section: crate::retrieval::Section::new(section.clone()),
                n: *item,
            };
            let stem = |d: &str| d.rsplit_once('-').map_or(d, |(s, _)| s).to_string();
            let code = want.section.code().to_string();
            j.coverage_right = d.coverage == Coverage::Covered
                && d.sources.iter().any(|s| {
                    stem(&s.doc) == stem(doc)
                        && crate::retrieval::section::code_of(&s.section)
                            .is_some_and(|c| c.eq_ignore_ascii_case(&code))
                });
            j.confirmed_first = d
                .probable_causes
                .first()
                .and_then(|c| c.source.as_deref())
                .and_then(ItemRef::parse)
                .is_some_and(|r| r.same(&want));
        }
        (Kind::Crew, Some(Truth::Text { text, .. })) => {
            j.coverage_right = d.coverage != Coverage::Covered;
            j.crew_offered = d
                .probable_causes
                .iter()
                .any(|c| c.cause == *text && c.source.as_deref().is_some_and(is_site_source));
        }
        _ => {}
    }
    j
}

/// Counts over the cases of one writer and part, without or with notes.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Tally {
    pub confirm: usize,
    pub crew: usize,
    pub other: usize,
    /// Of confirm and crew cases.
    pub coverage_right: usize,
    pub confirmed_first: usize,
    pub crew_offered: usize,
    /// Of other cases: a note shown on another fault.
    pub leaked: usize,
    pub mean_latency_ms: f64,
    pub mean_model_steps: f64,
    #[serde(skip)]
    sum_latency: f64,
    #[serde(skip)]
    sum_steps: u64,
    #[serde(skip)]
    n: usize,
    /// Case ids that missed: confirmed cause not first, crew cause not
    /// offered, a note on another fault.
    pub misses: Vec<String>,
}

impl Tally {
    pub fn add(&mut self, c: &HistoryCase, j: &Judged) {
        match c.kind {
            Kind::Confirm => self.confirm += 1,
            Kind::Crew => self.crew += 1,
            Kind::Other => self.other += 1,
        }
        self.coverage_right += usize::from(j.coverage_right);
        self.confirmed_first += usize::from(j.confirmed_first);
        self.crew_offered += usize::from(j.crew_offered);
        let leaked = c.kind == Kind::Other && j.note_shown;
        self.leaked += usize::from(leaked);
        let missed = match c.kind {
            Kind::Confirm => !j.confirmed_first,
            Kind::Crew => !j.crew_offered,
            Kind::Other => leaked,
        };
        if missed {
            self.misses.push(format!("{} ({})", c.id, j.said));
        }
        self.n += 1;
        self.sum_latency += j.latency_ms;
        self.sum_steps += u64::from(j.model_steps);
        self.mean_latency_ms = crate::diagnosis::round2(self.sum_latency / self.n as f64);
        self.mean_model_steps = crate::diagnosis::round2(self.sum_steps as f64 / self.n as f64);
    }
}

/// Without and with notes, for one writer and part.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Row {
    pub without: Tally,
    pub with: Tally,
}

/// The report: by "writer/part".
#[derive(Debug, Clone, Default, Serialize)]
pub struct NotesReport {
    pub notes_made: usize,
    /// Alarms the wire refuses even so, left out (each named).
    pub unreadable: Vec<String>,
    /// Confirmations whose item the first diagnosis had not published,
    /// noted in the crew's words instead (the manual's text).
    pub confirmed_as_text: usize,
    pub rows: BTreeMap<String, Row>,
}

impl NotesReport {
    pub fn text(&self) -> String {
        use std::fmt::Write as _;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "{} notes made from the histories' verdicts ({} confirmations of an item the first diagnosis had not published, noted in the manual's words)",
            self.notes_made, self.confirmed_as_text
        );
        let _ = writeln!(
            o,
            "{:<24} {:<7} {:>14} {:>16} {:>13} {:>10} {:>11} {:>7}",
            "writer/part",
            "notes",
            "coverage right",
            "confirmed first",
            "crew offered",
            "leaked",
            "latency ms",
            "steps"
        );
        for u in &self.unreadable {
            let _ = writeln!(o, "left out, the wire refuses it: {u}");
        }
        for (k, r) in &self.rows {
            for (label, t) in [("without", &r.without), ("with", &r.with)] {
                let _ = writeln!(
                    o,
                    "{:<24} {:<7} {:>14} {:>16} {:>13} {:>10} {:>11.0} {:>7.1}",
                    k,
                    label,
                    format!("{}/{}", t.coverage_right, t.confirm + t.crew),
                    format!("{}/{}", t.confirmed_first, t.confirm),
                    format!("{}/{}", t.crew_offered, t.crew),
                    format!("{}/{}", t.leaked, t.other),
                    t.mean_latency_ms,
                    t.mean_model_steps
                );
            }
            let misses = &r.with.misses;
            match (misses.is_empty(), held_out(k)) {
                (true, _) => {}
                (false, false) => {
                    let _ = writeln!(o, "  missed with notes: {}", misses.join("; "));
                }
                (false, true) => {
                    let _ = writeln!(
                        o,
                        "  missed with notes: {}, not named (a held-out history read is tuning)",
                        misses.len()
                    );
                }
            }
        }
        o
    }
}

/// Whether a report row ("writer/part", the part a history file's stem)
/// is a held-out file's (`ams-crew-held`): its misses are counted, never
/// named, since a held-out history whose miss was read is held out no
/// longer.
fn held_out(row: &str) -> bool {
    let part = row.rsplit('/').next().unwrap_or(row);
    part == "held" || part.ends_with("-held")
}

/// How `run` answers an alarm: with the model, or from retrieval alone.
struct Answer<'p> {
    pipeline: &'p crate::pipeline::Pipeline,
    model: bool,
    style: crate::llm::Style,
}

impl Answer<'_> {
    async fn of(&self, slot: &mut crate::llm::Slot, a: &Alarm, notes: &SiteNotes) -> Diagnosis {
        match self.model {
            true => {
                let tr = self.pipeline.diagnose_noted(slot, a, self.style, notes);
                tr.await.diagnosis
            }
            false => self.pipeline.triage(a, notes),
        }
    }
}

/// Replays the histories `files` on `slot`: per file, every `first`
/// diagnosed and its verdict noted, then every `next` diagnosed without
/// notes and with all of the file's notes. Without `model`, every alarm is
/// answered from retrieval alone (`Pipeline::triage`).
pub async fn run(
    pipeline: &crate::pipeline::Pipeline,
    slot: &mut crate::llm::Slot,
    files: &[(String, Vec<HistoryCase>)],
    model: bool,
    progress: bool,
) -> NotesReport {
    let style = crate::llm::Style::Schema;
    let answer = Answer {
        pipeline,
        model,
        style,
    };
    let mut r = NotesReport::default();
    let none = SiteNotes::empty();
    for (part, cases) in files {
        let index = pipeline.index.current();
        let mut notes = Vec::new();
        for c in cases {
            let Some(first) = c.first.as_ref() else {
                continue;
            };
            let first = match alarm_of(first) {
                Ok(a) => a,
                Err(e) => {
                    r.unreadable.push(format!("{} first: {e}", c.id));
                    continue;
                }
            };
            let d = answer.of(slot, &first, &none).await;
            let text = match &c.truth {
                Some(Truth::Item { doc, section, item }) => item_text(&index, doc, section, *item),
                _ => None,
            };
            if let Some(n) = feedback(c, &first, &d, text.as_deref()) {
                if c.kind == Kind::Confirm && matches!(n.cause, NoteCause::Text(_)) {
                    r.confirmed_as_text += 1;
                }
                notes.push(n);
            }
        }
        r.notes_made += notes.len();
        let site = SiteNotes::from_notes(notes);
        for (i, c) in cases.iter().enumerate() {
            let next = match alarm_of(&c.next) {
                Ok(a) => a,
                Err(e) => {
                    r.unreadable.push(format!("{} next: {e}", c.id));
                    continue;
                }
            };
            let row = r.rows.entry(format!("{}/{part}", c.writer)).or_default();
            // The second run of an alarm finds its prompt cached: each
            // way goes first for every other case, so neither gains.
            if i % 2 == 0 {
                let d = answer.of(slot, &next, &none).await;
                row.without.add(c, &judge(c, &d));
                let d = answer.of(slot, &next, &site).await;
                row.with.add(c, &judge(c, &d));
            } else {
                let d = answer.of(slot, &next, &site).await;
                row.with.add(c, &judge(c, &d));
                let d = answer.of(slot, &next, &none).await;
                row.without.add(c, &judge(c, &d));
            }
            if progress {
                eprint!("\r{part}: {}/{}", i + 1, cases.len());
            }
        }
        if progress {
            eprintln!();
        }
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const CONFIRM: &str = r#"{"id": "h-x-001", "writer": "x", "kind": "confirm", "first": {"id": "A1", "ts": "2026-09-12T02:41:17Z", "equipment": "NO.2 G/E", "code": "AL 2231", "severity": "major", "message": "NO.2 G/E L.O. INLET PRESS LOW"}, "truth": {"doc": "generator-en", "section": "DG-LO-PRES-LO causes", "item": 3}, "by": "2/E", "feedback_ts": "2026-09-12T04:10:00Z", "next": {"id": "A2", "ts": "2026-09-29T15:03:48Z", "equipment": "NO.2 G/E", "code": "AL 2231", "severity": "major", "message": "NO.2 G/E LO INLET PRESS LOW"}}"#;
    const CREW: &str = r#"{"id": "h-x-002", "writer": "x", "kind": "crew", "first": {"id": "B1", "ts": "2026-09-12T02:41:17Z", "equipment": "S/G", "code": "SG-9", "severity": "minor", "message": "S/G hunting"}, "truth": {"text": "feedback link loose", "remedy": "tightened"}, "by": "C/E", "feedback_ts": "2026-09-12T04:10:00Z", "next": {"id": "B2", "ts": "2026-09-29T15:03:48Z", "equipment": "S/G", "code": "SG-9", "severity": "minor", "message": "S/G hunting again"}}"#;

    fn case(line: &str) -> HistoryCase {
        serde_json::from_str(line).unwrap()
    }

    fn diag(alarm: &Alarm, causes: &[(&str, &str)]) -> Diagnosis {
        let mut d = crate::diagnosis::unmatched(alarm, "m", Default::default());
        d.probable_causes = causes
            .iter()
            .map(|(t, s)| crate::diagnosis::Cause {
                cause: (*t).into(),
                likelihood: "high".into(),
                source: Some((*s).into()),
                site: None,
            })
            .collect();
        d
    }

    #[test]
    fn a_confirmation_names_the_published_item_else_the_manuals_words() {
        let c = case(CONFIRM);
        let first = alarm_of(c.first.as_ref().unwrap()).unwrap();
        let d = diag(
            &first,
            &[
                ("filter", "generator-en § DG-LO-PRES-LO causes #1"),
                ("pump", "generator-en § DG-LO-PRES-LO causes #3"),
            ],
        );
        let n = feedback(&c, &first, &d, Some("pump")).unwrap();
        assert_eq!(
            n.cause,
            NoteCause::Source("generator-en § DG-LO-PRES-LO causes #3".into())
        );
        assert_eq!(n.check(), Ok(()));
        let d = diag(
            &first,
            &[("filter", "generator-en § DG-LO-PRES-LO causes #1")],
        );
        let n = feedback(&c, &first, &d, Some("pump worn")).unwrap();
        assert_eq!(n.cause, NoteCause::Text("pump worn".into()));
        let c = case(CREW);
        let first = alarm_of(c.first.as_ref().unwrap()).unwrap();
        let n = feedback(&c, &first, &diag(&first, &[]), None).unwrap();
        assert_eq!(n.cause, NoteCause::Text("feedback link loose".into()));
        assert_eq!(n.remedy.as_deref(), Some("tightened"));
    }

    #[test]
    fn a_next_is_judged_by_its_first_cause_its_crew_cause_and_any_note_shown() {
        let c = case(CONFIRM);
        let next = alarm_of(&c.next).unwrap();
        let mut d = diag(
            &next,
            &[
                ("pump", "generator-en § DG-LO-PRES-LO causes #3"),
                ("filter", "generator-en § DG-LO-PRES-LO causes #1"),
            ],
        );
        d.coverage = Coverage::Covered;
        d.sources = vec![crate::diagnosis::Source {
            doc: "generator-en".into(),
            section: "DG-LO-PRES-LO causes".into(),
        }];
        let j = judge(&c, &d);
        assert!(
            j.coverage_right && j.confirmed_first && !j.note_shown,
            "{j:?}"
        );
        d.probable_causes.swap(0, 1);
        assert!(!judge(&c, &d).confirmed_first);
        let c = case(CREW);
        let next = alarm_of(&c.next).unwrap();
        let mut d = diag(
            &next,
            &[("feedback link loose", "site note · C/E · 2026-09-12")],
        );
        d.coverage_note = Some("n".into());
        let j = judge(&c, &d);
        assert!(j.crew_offered && j.coverage_right && j.note_shown, "{j:?}");
        // The crew's words with a manual's source are not the note offered.
        let d = diag(&next, &[("feedback link loose", "x § y #1")]);
        assert!(!judge(&c, &d).crew_offered);
    }

    #[test]
    fn a_held_out_files_misses_are_counted_and_never_named() {
        let other: HistoryCase = serde_json::from_str(
            r#"{"id": "h-x-h004", "writer": "x", "kind": "other", "first": null, "truth": null, "next": {"id": "C2", "ts": "2026-09-29T15:03:48Z", "equipment": "S/G", "code": "SG-1", "severity": "minor", "message": "S/G motor overload"}}"#,
        )
        .unwrap();
        let leaked = Judged {
            note_shown: true,
            ..Default::default()
        };
        let mut r = NotesReport::default();
        for part in ["x/x-held", "x/x-tune"] {
            let row = r.rows.entry(part.into()).or_default();
            row.with.add(&other, &leaked);
        }
        let text = r.text();
        assert_eq!(text.matches("h-x-h004").count(), 1, "{text}");
        assert!(text.contains("missed with notes: 1, not named"), "{text}");
        assert!(held_out("ams-crew/ams-crew-held") && !held_out("ams-crew/ams-crew-tune"));
    }

    #[test]
    fn a_note_on_another_fault_is_a_leak_and_a_miss() {
        let other: HistoryCase = serde_json::from_str(
            r#"{"id": "h-x-003", "writer": "x", "kind": "other", "first": null, "truth": null, "next": {"id": "C2", "ts": "2026-09-29T15:03:48Z", "equipment": "S/G", "code": "SG-1", "severity": "minor", "message": "S/G motor overload"}}"#,
        )
        .unwrap();
        let mut t = Tally::default();
        t.add(
            &other,
            &Judged {
                note_shown: true,
                ..Default::default()
            },
        );
        t.add(&other, &Judged::default());
        assert_eq!((t.other, t.leaked), (2, 1));
        assert_eq!(t.misses.len(), 1);
        assert!(t.misses[0].starts_with("h-x-003 ("), "{:?}", t.misses);
    }
}
