//! Site notes: the crew's word on a diagnosis (confirmed or rejected, the
//! cause as a published manual item or in their own words, the remedy, who
//! and when), and `SiteNotes`, the notes that count, as the pipeline reads
//! them.
//!
//! Owns the note's shape (it is the journal's, the export's and the wire's)
//! and its bounds, checked wherever a note is made (`Note::check`). Never
//! does I/O: `store` keeps notes on disk.

pub mod store;

use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::diagnosis::{Cause, Source};

/// Longest `by` (and a withdrawal's `by`), in bytes: a name or a login.
pub const MAX_BY: usize = 64;
/// Longest crew-written cause, in bytes.
pub const MAX_CAUSE_TEXT: usize = 500;
/// Longest remedy, in bytes.
pub const MAX_REMEDY: usize = 500;
/// Longest cause source ("doc § section #n"), in bytes.
pub const MAX_SOURCE: usize = 200;
/// Longest vessel name, in bytes: it goes into note ids.
pub const MAX_VESSEL: usize = 64;
/// Longest note as one JSON line, in bytes. The fields above and the
/// alarm's own bounds keep a note far below it; the diagnosis it answered
/// (causes, sources) is what could grow, and a journal line must stay
/// small enough to read whole.
pub const MAX_NOTE_BYTES: usize = 16 << 10;

/// The crew's verdict on a diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Confirmed,
    Rejected,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Confirmed => "confirmed",
            Verdict::Rejected => "rejected",
        }
    }
}

/// What the crew named as the cause: one the diagnosis published (its
/// source, "doc § section #n", as published), or their own words for a
/// cause no manual lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NoteCause {
    Source(String),
    Text(String),
}

/// The alarm a note is about, as it was raised: what the next alarm of the
/// same fault is compared with.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NotedAlarm {
    pub equipment: String,
    pub code: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
}

/// The diagnosis a note answered, as it was published: a note is judged
/// against what the crew saw, not against what tidewatch would say now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Answered {
    pub alarm_id: String,
    pub alarm_ts: String,
    pub diagnosis_ts: String,
    pub mode: String,
    pub coverage: String,
    #[serde(default)]
    pub sources: Vec<Source>,
    #[serde(default)]
    pub causes: Vec<Cause>,
}

/// Who withdrew a note, and when: a withdrawn note is kept (it is history)
/// but no longer counts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withdrawn {
    pub by: String,
    pub ts: String,
}

/// One note: the crew's word on one diagnosis.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Note {
    /// Unique and stable (`Note::make_id`): withdrawals name it.
    pub id: String,
    pub alarm: NotedAlarm,
    pub verdict: Verdict,
    pub cause: NoteCause,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    pub by: String,
    /// RFC 3339, the crew's time.
    pub ts: String,
    pub answered: Answered,
    /// None: this vessel's own; Some(name): imported from that vessel, and
    /// kept marked as theirs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vessel: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withdrawn: Option<Withdrawn>,
}

/// A note that breaks a bound, naming the field.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("note field {field} is missing or empty")]
    Missing { field: &'static str },
    #[error("note field {field} is {len} bytes, more than the {max} allowed")]
    TooLong {
        field: &'static str,
        len: usize,
        max: usize,
    },
    #[error("note field {field} holds a control character")]
    Control { field: &'static str },
    #[error("note field {field} must be an RFC 3339 time, got {value:?}")]
    Time { field: &'static str, value: String },
}

/// The id of the note `by` made on alarm `alarm_id` at `ts`, on `vessel`
/// (None: this one). The crew answers an alarm once per verdict, at one
/// time, so this is unique without a counter; and it reads for people.
pub fn make_id(vessel: Option<&str>, alarm_id: &str, ts: &str) -> String {
    format!("{}:{alarm_id}:{ts}", vessel.unwrap_or("here"))
}

impl Note {
    /// `make_id` for this note.
    pub fn make_id(&self) -> String {
        make_id(self.vessel.as_deref(), &self.answered.alarm_id, &self.ts)
    }

    /// Checks every bound of the note; the error names the field.
    pub fn check(&self) -> Result<(), Error> {
        required("id", &self.id, crate::alarm::MAX_ID * 2 + MAX_VESSEL + 40)?;
        required(
            "alarm.equipment",
            &self.alarm.equipment,
            crate::alarm::MAX_EQUIPMENT,
        )?;
        required("alarm.code", &self.alarm.code, crate::alarm::MAX_CODE)?;
        optional("alarm.kind", &self.alarm.kind, crate::alarm::MAX_KIND)?;
        optional("alarm.unit", &self.alarm.unit, crate::alarm::MAX_UNIT)?;
        if let Some(m) = &self.alarm.message {
            bounded("alarm.message", m, crate::alarm::MAX_MESSAGE_BYTES)?;
        }
        match &self.cause {
            NoteCause::Source(s) => required("cause.source", s, MAX_SOURCE)?,
            NoteCause::Text(t) => required("cause.text", t, MAX_CAUSE_TEXT)?,
        }
        if let Some(r) = &self.remedy {
            bounded("remedy", r, MAX_REMEDY)?;
        }
        required("by", &self.by, MAX_BY)?;
        rfc3339("ts", &self.ts)?;
        required(
            "answered.alarm_id",
            &self.answered.alarm_id,
            crate::alarm::MAX_ID,
        )?;
        optional("vessel", &self.vessel, MAX_VESSEL)?;
        if let Some(w) = &self.withdrawn {
            required("withdrawn.by", &w.by, MAX_BY)?;
            rfc3339("withdrawn.ts", &w.ts)?;
        }
        let len = serde_json::to_vec(self).map_or(usize::MAX, |b| b.len());
        if len > MAX_NOTE_BYTES {
            return Err(Error::TooLong {
                field: "note",
                len,
                max: MAX_NOTE_BYTES,
            });
        }
        Ok(())
    }

    /// Whether the note counts (it was not withdrawn).
    pub fn counts(&self) -> bool {
        self.withdrawn.is_none()
    }
}

/// Checks `value` as a free text field: at most `max` bytes. Newlines are
/// allowed (a remedy may list steps); other control characters are not,
/// as they would reach a terminal through `notes list`.
pub fn bounded(field: &'static str, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        return Err(Error::TooLong {
            field,
            len: value.len(),
            max,
        });
    }
    if value
        .chars()
        .any(|c| c.is_control() && c != '\n' && c != '\t')
    {
        return Err(Error::Control { field });
    }
    Ok(())
}

/// `bounded`, and not empty (blank counts as empty).
pub fn required(field: &'static str, value: &str, max: usize) -> Result<(), Error> {
    if value.trim().is_empty() {
        return Err(Error::Missing { field });
    }
    bounded(field, value, max)
}

fn optional(field: &'static str, value: &Option<String>, max: usize) -> Result<(), Error> {
    value.as_deref().map_or(Ok(()), |v| required(field, v, max))
}

/// Checks `value` is an RFC 3339 time.
pub fn rfc3339(field: &'static str, value: &str) -> Result<(), Error> {
    use time::format_description::well_known::Rfc3339;
    match time::OffsetDateTime::parse(value, &Rfc3339) {
        Ok(_) => Ok(()),
        Err(_) => Err(Error::Time {
            field,
            value: value.chars().take(40).collect(),
        }),
    }
}

/// The notes that count (none withdrawn), as the pipeline reads them.
/// Cheap to clone: the daemon hands the same list to every worker and
/// swaps in a new one when the journal changes.
#[derive(Debug, Clone, Default)]
pub struct SiteNotes {
    notes: Arc<[Note]>,
}

impl SiteNotes {
    pub fn empty() -> Self {
        Self::default()
    }

    /// The notes of `notes` that count, in their order; withdrawn ones are
    /// dropped here, so no reader can count one by mistake.
    pub fn from_notes(notes: Vec<Note>) -> Self {
        Self {
            notes: notes.into_iter().filter(Note::counts).collect(),
        }
    }

    pub fn all(&self) -> &[Note] {
        &self.notes
    }

    /// The notes about alarms of `equipment`.
    pub fn for_equipment<'a>(&'a self, equipment: &str) -> impl Iterator<Item = &'a Note> {
        // Owned so the iterator borrows only the notes, not the caller's
        // string: a worker may hold it past the alarm it read it for.
        let equipment = equipment.to_owned();
        self.notes
            .iter()
            .filter(move |n| n.alarm.equipment == equipment)
    }

    pub fn len(&self) -> usize {
        self.notes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.notes.is_empty()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A valid note on `equipment`, made at `ts`.
    pub(crate) fn note(equipment: &str, alarm_id: &str, ts: &str) -> Note {
        let mut n = Note {
            id: String::new(),
            alarm: NotedAlarm {
                equipment: equipment.into(),
                code: "ME-JCW-TEMP-HI".into(),
                kind: Some("main_engine_cooling".into()),
                message: Some("主机缸套水出口温度高".into()),
                value: Some(93.5),
                unit: Some("degC".into()),
                threshold: Some(90.0),
            },
            verdict: Verdict::Confirmed,
            cause: NoteCause::Source("main_engine_cooling-zh § ME-JCW-TEMP-HI #2".into()),
            remedy: Some("cleaned the cooler".into()),
            by: "2nd engineer".into(),
            ts: ts.into(),
            answered: Answered {
                alarm_id: alarm_id.into(),
                alarm_ts: "2026-11-30T04:12:00Z".into(),
                diagnosis_ts: "2026-11-30T04:12:03Z".into(),
                mode: "full".into(),
                coverage: "covered".into(),
                sources: vec![Source {
                    doc: "main_engine_cooling-zh".into(),
                    section: "ME-JCW-TEMP-HI".into(),
                }],
                causes: vec![Cause {
                    cause: "冷却器脏堵".into(),
                    likelihood: "high".into(),
                    source: Some("main_engine_cooling-zh § ME-JCW-TEMP-HI #2".into()),
                    site: None,
                }],
            },
            vessel: None,
            withdrawn: None,
        };
        n.id = n.make_id();
        n
    }

    #[test]
    fn a_note_reads_back_as_it_was_written_with_the_wire_field_names() {
        let n = note("ME1", "a1", "2026-11-30T05:00:00Z");
        let json = serde_json::to_value(&n).unwrap();
        assert_eq!(json["verdict"], "confirmed");
        assert_eq!(
            json["cause"],
            serde_json::json!({"source": "main_engine_cooling-zh § ME-JCW-TEMP-HI #2"})
        );
        assert_eq!(json["alarm"]["equipment"], "ME1");
        assert_eq!(json["answered"]["alarm_id"], "a1");
        assert_eq!(json["id"], "here:a1:2026-11-30T05:00:00Z");
        // This vessel's own, not withdrawn: the fields are absent, not null.
        assert!(json.get("vessel").is_none() && json.get("withdrawn").is_none());
        let back: Note = serde_json::from_value(json).unwrap();
        assert_eq!(back, n);
    }

    #[test]
    fn a_crew_cause_a_rejection_and_a_withdrawal_read_from_their_wire_form() {
        let text = r#"{"id":"Nordic Star:b7:2026-12-01T10:00:00Z",
            "alarm":{"equipment":"GEN2","code":"GE-LO-PRESS-LO"},
            "verdict":"rejected","cause":{"text":"sensor cable chafed at the frame"},
            "by":"chief","ts":"2026-12-01T10:00:00Z",
            "answered":{"alarm_id":"b7","alarm_ts":"2026-12-01T09:58:00Z",
                        "diagnosis_ts":"2026-12-01T09:58:02Z","mode":"degraded","coverage":"none"},
            "vessel":"Nordic Star","withdrawn":{"by":"chief","ts":"2026-12-02T08:00:00Z"}}"#;
        let n: Note = serde_json::from_str(text).unwrap();
        assert_eq!(n.verdict, Verdict::Rejected);
        assert_eq!(
            n.cause,
            NoteCause::Text("sensor cable chafed at the frame".into())
        );
        assert_eq!(n.vessel.as_deref(), Some("Nordic Star"));
        assert_eq!(n.withdrawn.as_ref().unwrap().by, "chief");
        assert!(n.answered.causes.is_empty() && n.remedy.is_none());
        assert_eq!(n.check(), Ok(()));
        assert!(!n.counts());
    }

    #[test]
    fn an_unknown_verdict_or_cause_kind_is_refused() {
        let n = serde_json::to_string(&note("ME1", "a1", "2026-11-30T05:00:00Z")).unwrap();
        assert!(serde_json::from_str::<Note>(&n.replace("\"confirmed\"", "\"maybe\"")).is_err());
        assert!(serde_json::from_str::<Note>(&n.replace("{\"source\":", "{\"guess\":")).is_err());
    }

    fn broken(f: impl FnOnce(&mut Note)) -> Result<(), Error> {
        let mut n = note("ME1", "a1", "2026-11-30T05:00:00Z");
        f(&mut n);
        n.check()
    }

    #[test]
    fn each_bound_is_checked_and_the_error_names_its_field() {
        assert_eq!(broken(|_| {}), Ok(()));
        let too_long = |field, len, max| Err(Error::TooLong { field, len, max });
        assert_eq!(broken(|n| n.by = "x".repeat(MAX_BY)), Ok(()));
        assert_eq!(
            broken(|n| n.by = "x".repeat(MAX_BY + 1)),
            too_long("by", MAX_BY + 1, MAX_BY)
        );
        assert_eq!(
            broken(|n| n.by = " ".into()),
            Err(Error::Missing { field: "by" })
        );
        assert_eq!(
            broken(|n| n.cause = NoteCause::Text("é".repeat(251))),
            too_long("cause.text", 502, MAX_CAUSE_TEXT)
        );
        assert_eq!(
            broken(|n| n.cause = NoteCause::Text("x".repeat(MAX_CAUSE_TEXT))),
            Ok(())
        );
        assert_eq!(
            broken(|n| n.cause = NoteCause::Source("x".repeat(MAX_SOURCE + 1))),
            too_long("cause.source", MAX_SOURCE + 1, MAX_SOURCE)
        );
        assert_eq!(
            broken(|n| n.remedy = Some("x".repeat(MAX_REMEDY + 1))),
            too_long("remedy", MAX_REMEDY + 1, MAX_REMEDY)
        );
        assert_eq!(
            broken(|n| n.ts = "yesterday".into()),
            Err(Error::Time {
                field: "ts",
                value: "yesterday".into()
            })
        );
        assert_eq!(
            broken(|n| n.by = "chief\u{1b}[2J".into()),
            Err(Error::Control { field: "by" })
        );
        assert_eq!(
            broken(|n| n.withdrawn = Some(Withdrawn {
                by: String::new(),
                ts: n.ts.clone()
            })),
            Err(Error::Missing {
                field: "withdrawn.by"
            })
        );
        let many = Cause {
            cause: "x".repeat(1000),
            likelihood: "high".into(),
            source: None,
            site: None,
        };
        assert!(matches!(
            broken(|n| n.answered.causes = vec![many; 20]),
            Err(Error::TooLong { field: "note", .. })
        ));
    }

    #[test]
    fn the_error_message_names_the_field_and_the_bound() {
        let e = broken(|n| n.remedy = Some("x".repeat(501))).unwrap_err();
        assert_eq!(
            e.to_string(),
            "note field remedy is 501 bytes, more than the 500 allowed"
        );
    }

    #[test]
    fn withdrawn_notes_are_not_site_notes() {
        let mut gone = note("ME1", "a2", "2026-11-30T06:00:00Z");
        gone.withdrawn = Some(Withdrawn {
            by: "chief".into(),
            ts: "2026-11-30T07:00:00Z".into(),
        });
        let site = SiteNotes::from_notes(vec![
            note("ME1", "a1", "2026-11-30T05:00:00Z"),
            gone,
            note("GEN2", "a3", "2026-11-30T08:00:00Z"),
        ]);
        let ids: Vec<_> = site
            .all()
            .iter()
            .map(|n| n.answered.alarm_id.as_str())
            .collect();
        assert_eq!(ids, ["a1", "a3"]);
        let me1: Vec<_> = site.for_equipment("ME1").map(|n| n.id.as_str()).collect();
        assert_eq!(me1, ["here:a1:2026-11-30T05:00:00Z"]);
        assert!(SiteNotes::empty().is_empty());
    }
}
