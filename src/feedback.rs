//! Feedback on a diagnosis: a watchkeeper's word on
//! `{prefix}/feedback/{equipment}`, checked against what tidewatch
//! published, and `Published`, the bounded record of published diagnoses it
//! is checked against.
//!
//! The checks are pure (`parse`, `note`): bytes and the record in, a
//! `notes::Note` or a `FeedbackError` naming the field out. `Published` does
//! its own small file I/O in `state_dir`. Never touches MQTT (the daemon's
//! hub and `tidewatch feedback` do) nor the notes journal (`notes::store`).
//! Feedback text is data: it is bounded here, and never read as instructions.

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{BufRead, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::alarm::Alarm;
use crate::diagnosis::Diagnosis;
use crate::notes::{self, Answered, Note, NoteCause, NotedAlarm, Verdict};

/// Published diagnoses remembered for feedback: about a month of alarms on
/// a busy plant. Feedback on an older one is refused as unknown, which an
/// operator can tell from a typo by the error's wording.
pub const MAX_PUBLISHED: usize = 2_000;

/// The record's file in state_dir: one JSON `Record` a line.
const FILE: &str = "published.jsonl";

#[derive(Debug, thiserror::Error)]
pub enum FeedbackError {
    #[error("feedback is {size} bytes, over the {limit}-byte limit")]
    TooLarge { size: usize, limit: usize },
    #[error("feedback is not valid UTF-8 (byte {0})")]
    NotUtf8(usize),
    #[error("feedback is not a valid JSON object: {0}")]
    Json(String),
    #[error("field {field} is required")]
    Missing { field: &'static str },
    #[error("field verdict must be \"confirmed\" or \"rejected\", got {0:?}")]
    Verdict(String),
    #[error("field cause must hold exactly one of source and text, got {0}")]
    Cause(&'static str),
    #[error("field alarm_id: tidewatch published no diagnosis of alarm {alarm_id:?} on {equipment:?} (feedback answers a diagnosis tidewatch published, among its last {MAX_PUBLISHED})")]
    UnknownAlarm { alarm_id: String, equipment: String },
    #[error("field cause.source: {named:?} is not one of the causes the diagnosis of alarm {alarm_id:?} published ({published})")]
    NotPublished {
        named: String,
        alarm_id: String,
        published: String,
    },
    /// A bound of the note it would make (`notes::Note::check`).
    #[error(transparent)]
    Note(#[from] notes::Error),
    #[error("topic {0:?} is not {{prefix}}/feedback/{{equipment}}")]
    BadTopic(String),
    #[error("published-diagnoses record {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
}

/// Feedback as it goes on the wire: what `tidewatch feedback` sends and
/// what `parse` reads. The equipment is the topic's.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Feedback {
    pub alarm_id: String,
    pub verdict: Verdict,
    /// `{"source": "doc § section #n"}` (a cause the diagnosis published)
    /// or `{"text": "..."}` (the crew's own words).
    pub cause: NoteCause,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    pub by: String,
    /// RFC 3339, the crew's time.
    pub ts: String,
}

/// The payload as sent: every field optional, so a missing one is reported
/// by name rather than as serde's generic error.
#[derive(Deserialize)]
struct Wire {
    alarm_id: Option<String>,
    verdict: Option<String>,
    cause: Option<WireCause>,
    remedy: Option<String>,
    by: Option<String>,
    ts: Option<String>,
}

#[derive(Deserialize)]
struct WireCause {
    source: Option<String>,
    text: Option<String>,
}

/// Reads a feedback payload: size, UTF-8, JSON, each field present and of
/// its kind. Bounds are the note's (`note`).
pub fn parse(payload: &[u8], max_bytes: usize) -> Result<Feedback, FeedbackError> {
    if payload.len() > max_bytes {
        return Err(FeedbackError::TooLarge {
            size: payload.len(),
            limit: max_bytes,
        });
    }
    let text = std::str::from_utf8(payload).map_err(|e| FeedbackError::NotUtf8(e.valid_up_to()))?;
    let mut de = serde_json::Deserializer::from_str(text);
    let wire: Wire = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        // Cut by characters: serde quotes the input, which may be anything.
        let msg: String = e.into_inner().to_string().chars().take(200).collect();
        FeedbackError::Json(if path.is_empty() || path == "." {
            msg
        } else {
            format!("field {path}: {msg}")
        })
    })?;
    let need = |field, v: Option<String>| v.ok_or(FeedbackError::Missing { field });
    let verdict = match need("verdict", wire.verdict)?.as_str() {
        "confirmed" => Verdict::Confirmed,
        "rejected" => Verdict::Rejected,
        other => {
            return Err(FeedbackError::Verdict(other.chars().take(40).collect()));
        }
    };
    let cause = match wire
        .cause
        .ok_or(FeedbackError::Missing { field: "cause" })?
    {
        WireCause {
            source: Some(s),
            text: None,
        } => NoteCause::Source(s),
        WireCause {
            source: None,
            text: Some(t),
        } => NoteCause::Text(t.trim().to_string()),
        WireCause {
            source: Some(_),
            text: Some(_),
        } => return Err(FeedbackError::Cause("both")),
        WireCause {
            source: None,
            text: None,
        } => return Err(FeedbackError::Cause("neither")),
    };
    Ok(Feedback {
        alarm_id: need("alarm_id", wire.alarm_id)?,
        verdict,
        cause,
        remedy: wire
            .remedy
            .map(|r| r.trim().to_string())
            .filter(|r| !r.is_empty()),
        by: need("by", wire.by)?.trim().to_string(),
        ts: need("ts", wire.ts)?,
    })
}

/// The note feedback `fb`, received on `equipment`'s topic, makes: only on a
/// diagnosis tidewatch published (`published`), naming one of its causes
/// or the crew's own words, within the note's bounds.
pub fn note(fb: Feedback, equipment: &str, published: &Published) -> Result<Note, FeedbackError> {
    let Some(rec) = published.get(&fb.alarm_id, equipment) else {
        return Err(FeedbackError::UnknownAlarm {
            alarm_id: fb.alarm_id.chars().take(crate::alarm::MAX_ID).collect(),
            equipment: equipment
                .chars()
                .take(crate::alarm::MAX_EQUIPMENT)
                .collect(),
        });
    };
    if let NoteCause::Source(s) = &fb.cause {
        if !rec.published_sources().any(|p| p == s) {
            let list: Vec<&str> = rec.published_sources().collect();
            return Err(FeedbackError::NotPublished {
                named: s.chars().take(notes::MAX_SOURCE).collect(),
                alarm_id: fb.alarm_id,
                published: if list.is_empty() {
                    "it published none with a source: name the cause in the crew's words (cause.text)".into()
                } else {
                    format!("it published {}", list.join("; "))
                },
            });
        }
    }
    let mut n = Note {
        id: String::new(),
        alarm: rec.alarm.clone(),
        verdict: fb.verdict,
        cause: fb.cause,
        remedy: fb.remedy,
        by: fb.by,
        ts: fb.ts,
        answered: rec.answered.clone(),
        vessel: None,
        withdrawn: None,
    };
    n.id = n.make_id();
    n.check()?;
    Ok(n)
}

/// Feedback's equipment, from `{prefix}/feedback/{equipment}`.
pub fn equipment_from_topic<'a>(prefix: &str, topic: &'a str) -> Result<&'a str, FeedbackError> {
    topic
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix("/feedback/"))
        .filter(|e| !e.is_empty() && !e.contains('/'))
        .ok_or_else(|| FeedbackError::BadTopic(topic.chars().take(200).collect()))
}

/// A published diagnosis as feedback needs it: the alarm it answered and
/// what it said.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub alarm: NotedAlarm,
    pub answered: Answered,
}

impl Record {
    /// The record of diagnosis `d` of alarm `a`.
    pub fn of(a: &Alarm, d: &Diagnosis) -> Record {
        Record {
            alarm: NotedAlarm {
                equipment: a.equipment.clone(),
                code: a.code.clone(),
                kind: a.kind.clone(),
                message: a.message.clone(),
                value: a.value,
                unit: a.unit.clone(),
                threshold: a.threshold,
            },
            answered: Answered {
                alarm_id: a.id.clone(),
                alarm_ts: a.ts.clone(),
                diagnosis_ts: d.ts.clone(),
                mode: d.mode.as_str().into(),
                coverage: d.coverage.as_str().into(),
                sources: d.sources.clone(),
                causes: d.probable_causes.clone(),
            },
        }
    }

    /// The sources of the causes it published, in its order: what
    /// `cause.source` may name, and what `--confirm N` counts.
    pub fn published_sources(&self) -> impl Iterator<Item = &str> {
        self.answered
            .causes
            .iter()
            .filter_map(|c| c.source.as_deref())
    }

    fn key(&self) -> (String, String) {
        (self.answered.alarm_id.clone(), self.alarm.equipment.clone())
    }
}

/// Which published diagnoses are remembered: the newest `MAX_PUBLISHED`, by
/// alarm id and equipment (alarm ids are the sensors', and two sensors may
/// both number 1, 2, 3). A newer diagnosis of the same alarm replaces the
/// older one. No I/O.
#[derive(Debug, Default)]
struct Book {
    order: VecDeque<(String, String)>,
    records: HashMap<(String, String), Record>,
}

impl Book {
    fn add(&mut self, rec: Record) {
        let key = rec.key();
        if self.records.insert(key.clone(), rec).is_some() {
            self.order.retain(|k| *k != key);
        }
        self.order.push_back(key);
        while self.order.len() > MAX_PUBLISHED {
            if let Some(old) = self.order.pop_front() {
                self.records.remove(&old);
            }
        }
    }

    fn in_order(&self) -> impl Iterator<Item = &Record> {
        self.order.iter().filter_map(|k| self.records.get(k))
    }
}

/// The record of published diagnoses, `state_dir/published.jsonl`: one
/// JSON line per diagnosis, appended as the daemon stores it and fsync'd
/// before it is published (`sync`), so feedback on any diagnosis the crew
/// can have seen finds it after a kill or a power cut. A torn last line is
/// dropped on open. Rewritten with the newest `MAX_PUBLISHED` when it holds
/// twice that.
pub struct Published {
    path: PathBuf,
    /// Open for appends in the daemon; None for a reader (the CLI).
    file: Option<File>,
    book: Book,
    /// Lines in the file, replaced ones included.
    lines: usize,
    unsynced: bool,
}

impl Published {
    /// The record in `state_dir`, for the daemon to add to. Rewritten at
    /// once when it held a damaged line or more than it keeps.
    pub fn open(state_dir: &Path) -> Result<Published, FeedbackError> {
        let mut p = Self::read(state_dir)?;
        if p.lines > p.book.records.len() {
            p.rewrite()?;
        }
        p.file = Some(p.append_handle()?);
        Ok(p)
    }

    /// The record in `state_dir`, read only; empty when there is none.
    pub fn read(state_dir: &Path) -> Result<Published, FeedbackError> {
        let path = state_dir.join(FILE);
        let io = |source| FeedbackError::Io {
            path: path.clone(),
            source,
        };
        let mut book = Book::default();
        let mut lines = 0;
        match File::open(&path) {
            Ok(f) => {
                for line in std::io::BufReader::new(f).split(b'\n') {
                    lines += 1;
                    // A line that does not read (torn by a power cut) is
                    // dropped; it counts, so `open` rewrites it away.
                    if let Ok(rec) = serde_json::from_slice::<Record>(&line.map_err(io)?) {
                        book.add(rec);
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(e)),
        }
        Ok(Published {
            path,
            file: None,
            book,
            lines,
            unsynced: false,
        })
    }

    /// The published diagnosis of alarm `alarm_id` on `equipment`.
    pub fn get(&self, alarm_id: &str, equipment: &str) -> Option<&Record> {
        self.book
            .records
            .get(&(alarm_id.to_string(), equipment.to_string()))
    }

    /// Every remembered diagnosis of an alarm numbered `alarm_id`, on any
    /// equipment.
    pub fn find<'a>(&'a self, alarm_id: &'a str) -> impl Iterator<Item = &'a Record> + 'a {
        self.book
            .in_order()
            .filter(move |r| r.answered.alarm_id == alarm_id)
    }

    /// Adds a diagnosis about to be published; on disk at the next `sync`.
    pub fn add(&mut self, rec: Record) -> Result<(), FeedbackError> {
        let mut line = serde_json::to_vec(&rec).map_err(|e| self.io(std::io::Error::other(e)))?;
        line.push(b'\n');
        self.book.add(rec);
        if self.lines >= 2 * MAX_PUBLISHED {
            return self.rewrite();
        }
        let Some(f) = self.file.as_mut() else {
            return Ok(());
        };
        f.write_all(&line).map_err(|e| FeedbackError::Io {
            path: self.path.clone(),
            source: e,
        })?;
        self.lines += 1;
        self.unsynced = true;
        Ok(())
    }

    /// Makes what was added durable.
    pub fn sync(&mut self) -> Result<(), FeedbackError> {
        if let (true, Some(f)) = (self.unsynced, &self.file) {
            f.sync_data().map_err(|e| self.io(e))?;
        }
        self.unsynced = false;
        Ok(())
    }

    fn io(&self, source: std::io::Error) -> FeedbackError {
        FeedbackError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn append_handle(&self) -> Result<File, FeedbackError> {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(|e| self.io(e))
    }

    /// Replaces the file with the records kept, durably.
    fn rewrite(&mut self) -> Result<(), FeedbackError> {
        let mut out = Vec::new();
        for r in self.book.in_order() {
            serde_json::to_writer(&mut out, r).map_err(|e| self.io(std::io::Error::other(e)))?;
            out.push(b'\n');
        }
        crate::durable::write_atomic(&self.path, &out, crate::durable::Access::Private)
            .map_err(|e| self.io(e))?;
        self.lines = self.book.records.len();
        self.unsynced = false;
        if self.file.is_some() {
            self.file = Some(self.append_handle()?);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnosis::Cause;

    const SRC: &str = "main_engine_cooling-en § ME-JCW-TEMP-HI #2";

    fn record(alarm_id: &str, equipment: &str) -> Record {
        Record {
            alarm: NotedAlarm {
                equipment: equipment.into(),
                code: "ME-JCW-TEMP-HI".into(),
                kind: Some("main_engine_cooling".into()),
                message: Some("jacket water outlet temperature high".into()),
                value: Some(93.5),
                unit: Some("degC".into()),
                threshold: Some(90.0),
            },
            answered: Answered {
                alarm_id: alarm_id.into(),
                alarm_ts: "2026-11-30T04:12:00Z".into(),
                diagnosis_ts: "2026-11-30T04:12:03Z".into(),
                mode: "full".into(),
                coverage: "covered".into(),
                sources: vec![],
                causes: vec![
                    Cause {
                        cause: "thermostatic valve stuck".into(),
                        likelihood: "high".into(),
                        source: Some("main_engine_cooling-en § ME-JCW-TEMP-HI #1".into()),
                        ..Cause::default()
                    },
                    Cause {
                        cause: "cooler fouled".into(),
                        likelihood: "medium".into(),
                        source: Some(SRC.into()),
                        ..Cause::default()
                    },
                    Cause {
                        cause: "a cause in the model's words".into(),
                        likelihood: "low".into(),
                        source: None,
                        ..Cause::default()
                    },
                ],
            },
        }
    }

    fn published() -> Published {
        let mut book = Book::default();
        book.add(record("a-1", "ME1"));
        Published {
            path: PathBuf::from("/nonexistent"),
            file: None,
            book,
            lines: 1,
            unsynced: false,
        }
    }

    fn payload(edit: impl FnOnce(&mut serde_json::Value)) -> Vec<u8> {
        let mut v = serde_json::json!({
            "alarm_id": "a-1", "verdict": "confirmed", "cause": {"source": SRC},
            "remedy": "cleaned the cooler", "by": "2nd engineer", "ts": "2026-11-30T06:00:00Z",
        });
        edit(&mut v);
        serde_json::to_vec(&v).unwrap()
    }

    fn check(edit: impl FnOnce(&mut serde_json::Value)) -> Result<Note, String> {
        parse(&payload(edit), 8192)
            .and_then(|f| note(f, "ME1", &published()))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_confirmation_of_a_published_cause_becomes_a_note_with_the_alarm_and_the_diagnosis() {
        let n = check(|_| {}).unwrap();
        assert_eq!(n.id, "here:a-1:2026-11-30T06:00:00Z");
        assert_eq!(n.verdict, Verdict::Confirmed);
        assert_eq!(n.cause, NoteCause::Source(SRC.into()));
        assert_eq!(n.alarm.equipment, "ME1");
        assert_eq!(n.alarm.value, Some(93.5));
        assert_eq!(n.answered.causes.len(), 3);
        assert_eq!(n.remedy.as_deref(), Some("cleaned the cooler"));
        let crew =
            check(|v| v["cause"] = serde_json::json!({"text": " sea chest blocked "})).unwrap();
        assert_eq!(crew.cause, NoteCause::Text("sea chest blocked".into()));
        let rejected = check(|v| v["verdict"] = "rejected".into()).unwrap();
        assert_eq!(rejected.verdict, Verdict::Rejected);
        let bare = check(|v| v.as_object_mut().unwrap().retain(|k, _| k != "remedy")).unwrap();
        assert_eq!(bare.remedy, None);
    }

    #[test]
    fn each_bad_feedback_is_refused_with_an_error_naming_its_field() {
        let err = |edit: fn(&mut serde_json::Value)| check(edit).unwrap_err();
        let unknown = err(|v| v["alarm_id"] = "a-404".into());
        assert!(unknown.starts_with("field alarm_id:"), "{unknown}");
        assert!(unknown.contains("a-404"), "{unknown}");
        let other_equipment = parse(&payload(|_| {}), 8192)
            .and_then(|f| note(f, "ME2", &published()))
            .unwrap_err()
            .to_string();
        assert!(
            other_equipment.starts_with("field alarm_id:"),
            "{other_equipment}"
        );
        let not_published = err(|v| v["cause"]["source"] = "some-doc § X #9".into());
        assert!(
            not_published.starts_with("field cause.source:") && not_published.contains(SRC),
            "{not_published}"
        );
        assert_eq!(
            err(|v| v["by"] = serde_json::Value::Null),
            "field by is required"
        );
        assert!(err(|v| v["by"] = "  ".into()).contains("field by"));
        let long_by = err(|v| v["by"] = "x".repeat(notes::MAX_BY + 1).into());
        assert!(
            long_by.contains("field by") && long_by.contains("64"),
            "{long_by}"
        );
        let long_text = err(|v| v["cause"] = serde_json::json!({"text": "x".repeat(501)}));
        assert!(long_text.contains("field cause.text"), "{long_text}");
        let long_remedy = err(|v| v["remedy"] = "x".repeat(501).into());
        assert!(long_remedy.contains("field remedy"), "{long_remedy}");
        let long_source = err(|v| v["cause"]["source"] = "x".repeat(300).into());
        assert!(
            long_source.starts_with("field cause.source:"),
            "{long_source}"
        );
        assert!(err(|v| v["ts"] = "yesterday".into()).contains("field ts"));
        assert_eq!(
            err(|v| v["ts"] = serde_json::Value::Null),
            "field ts is required"
        );
        assert!(err(|v| v["verdict"] = "maybe".into()).starts_with("field verdict"));
        assert!(
            err(|v| v["cause"] = serde_json::json!({"source": SRC, "text": "t"}))
                .starts_with("field cause must hold exactly one")
        );
        assert!(err(|v| v["cause"] = serde_json::json!({})).starts_with("field cause must hold"));
        assert!(err(|v| v["by"] = 7.into())
            .starts_with("feedback is not a valid JSON object: field by:"));
        assert!(err(|v| v["by"] = "chief\u{1b}[2J".into()).contains("field by"));
    }

    #[test]
    fn oversized_or_garbled_payloads_are_refused_before_reading() {
        let big = payload(|v| v["remedy"] = "x".repeat(9000).into());
        assert!(matches!(
            parse(&big, 8192),
            Err(FeedbackError::TooLarge { .. })
        ));
        assert!(matches!(
            parse(b"\xff{}", 8192),
            Err(FeedbackError::NotUtf8(0))
        ));
        assert!(matches!(parse(b"[1]", 8192), Err(FeedbackError::Json(_))));
    }

    #[test]
    fn the_topic_names_the_equipment() {
        assert_eq!(
            equipment_from_topic("tw", "tw/feedback/ME1").unwrap(),
            "ME1"
        );
        for bad in [
            "tw/feedback/",
            "tw/feedback/a/b",
            "tw/alarm/ME1",
            "x/feedback/ME1",
        ] {
            assert!(equipment_from_topic("tw", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_record_keeps_the_newest_diagnoses_and_a_newer_one_replaces_an_older() {
        let mut b = Book::default();
        for i in 0..MAX_PUBLISHED + 5 {
            b.add(record(&format!("a-{i}"), "ME1"));
        }
        assert_eq!(b.records.len(), MAX_PUBLISHED);
        assert!(!b.records.contains_key(&("a-4".into(), "ME1".into())));
        assert!(b.records.contains_key(&("a-5".into(), "ME1".into())));
        let mut again = record("a-5", "ME1");
        again.answered.mode = "degraded".into();
        b.add(again);
        assert_eq!(b.order.len(), MAX_PUBLISHED);
        assert_eq!(b.in_order().last().unwrap().answered.mode, "degraded");
        b.add(record("a-5", "ME2"));
        assert_eq!(
            b.in_order()
                .filter(|r| r.answered.alarm_id == "a-5")
                .count(),
            2,
            "the same alarm id on two equipments is two alarms"
        );
    }

    #[test]
    fn the_record_survives_a_reopen_drops_a_torn_line_and_stays_bounded_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let mut p = Published::open(d.path()).unwrap();
        p.add(record("a-1", "ME1")).unwrap();
        p.add(record("a-2", "ME1")).unwrap();
        p.sync().unwrap();
        drop(p);
        // A power cut mid-append.
        let path = d.path().join(FILE);
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"alarm":{"equipment":"ME1","co"#).unwrap();
        drop(f);
        let p = Published::open(d.path()).unwrap();
        assert!(p.get("a-2", "ME1").is_some());
        assert_eq!(p.find("a-1").count(), 1);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 2);
        let mut p = p;
        p.add(record("a-3", "ME1")).unwrap();
        p.sync().unwrap();
        assert!(Published::read(d.path())
            .unwrap()
            .get("a-3", "ME1")
            .is_some());
        for i in 0..3 * MAX_PUBLISHED {
            p.add(record(&format!("b-{i}"), "ME1")).unwrap();
        }
        p.sync().unwrap();
        let lines = std::fs::read_to_string(&path).unwrap().lines().count();
        assert!(lines <= 2 * MAX_PUBLISHED, "{lines} lines");
        let back = Published::read(d.path()).unwrap();
        assert_eq!(back.book.records.len(), MAX_PUBLISHED);
        assert!(back
            .get(&format!("b-{}", 3 * MAX_PUBLISHED - 1), "ME1")
            .is_some());
    }
}
