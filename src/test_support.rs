//! Builders the unit tests share: an alarm and a retrieval hit with plain
//! defaults, which each test changes by struct update (`Hit { doc: …,
//! ..hit(section, text) }`) so a new field is added in one place.

use crate::alarm::{Alarm, Severity};
use crate::retrieval::Hit;

/// A major alarm `a1` on `E1` with `code` and nothing else.
pub fn alarm(code: &str) -> Alarm {
    Alarm {
        id: "a1".into(),
        ts: "2026-11-30T00:00:00Z".into(),
        equipment: "E1".into(),
        code: code.into(),
        severity: Severity::Major,
        kind: None,
        value: None,
        unit: None,
        threshold: None,
        message: None,
    }
}

/// An English passage of document `doc` (title `Manual`) with `section`
/// and `text`, scored 1.
pub fn hit(section: &str, text: &str) -> Hit {
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
