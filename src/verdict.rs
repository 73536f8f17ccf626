//! The three words coverage answers with (wire field `coverage`), apart
//! from the judgement (`coverage`): a diagnosis carries them and the
//! labelled alarms (`cases`) are written in them, and neither reads more
//! of coverage than the words.

use serde::{Deserialize, Serialize};

/// What the manuals hold for an alarm's fault (wire field `coverage`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Coverage {
    /// A section is about this fault, whatever code the plant uses.
    /// The default, so a diagnosis journaled before coverage existed reads
    /// as it was published: as an answer from the fault's own section.
    #[default]
    Covered,
    /// No section is about this fault; what is published comes from
    /// sections for other faults.
    Related,
    /// Nothing relevant was found.
    None,
}

impl Coverage {
    pub fn as_str(self) -> &'static str {
        match self {
            Coverage::Covered => "covered",
            Coverage::Related => "related",
            Coverage::None => "none",
        }
    }
}
