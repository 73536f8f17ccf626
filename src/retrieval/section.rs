//! A section of a manual as the code speaks of it: its heading read once,
//! where the index is read, into the alarm code it is about, the kind of
//! list it holds and which part of a split section it is.
//!
//! Owns the reading of a section heading ("ME-JCW-TEMP-HI causes (2/3)").
//! Nothing else parses a heading; a `"doc § section"` string is for people
//! (the wire, `show`, logs) and is never read back.

use std::fmt;

use serde::{Serialize, Serializer};

use super::knowledge::ListKind;

/// A section heading and what it says: the alarm code (its first word),
/// its list (causes or checks, `ListKind::of`) and its part ("(1/2)").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Section {
    heading: String,
    /// Byte length of the code: the heading's first word.
    code: std::ops::Range<usize>,
    list: Option<ListKind>,
    /// Byte range of the part ("(1/2)") at the heading's end, empty when
    /// the section is whole.
    part: std::ops::Range<usize>,
}

impl Section {
    /// Reads `heading` once.
    pub fn new(heading: String) -> Self {
        let code = match code_of(&heading) {
            Some(w) => {
                let start = w.as_ptr() as usize - heading.as_ptr() as usize;
                start..start + w.len()
            }
            None => 0..0,
        };
        let list = ListKind::of(&heading);
        let part = match heading.rfind(" (") {
            Some(i) if heading.ends_with(')') && heading[i..].contains('/') => i + 1..heading.len(),
            _ => heading.len()..heading.len(),
        };
        Section {
            heading,
            code,
            list,
            part,
        }
    }

    /// The heading as the manual writes it: for people, never parsed back.
    pub fn heading(&self) -> &str {
        &self.heading
    }

    /// The alarm code the section is about: the first word of its heading
    /// ("" for an empty heading).
    pub fn code(&self) -> &str {
        &self.heading[self.code.clone()]
    }

    /// The kind of list the section holds, None for other sections
    /// ("Safety").
    pub fn list(&self) -> Option<ListKind> {
        self.list
    }

    /// Whether the section holds a list of causes.
    pub fn is_causes(&self) -> bool {
        self.list == Some(ListKind::Causes)
    }

    /// "(1/2)" of a section split into parts, or "".
    pub fn part(&self) -> &str {
        &self.heading[self.part.clone()]
    }
}

/// The alarm code a heading is about: its first word. None for a blank
/// heading. The one reading of a heading's code, for `Section` and for the
/// headings an eval case names as its fault's.
pub fn code_of(heading: &str) -> Option<&str> {
    heading.split_whitespace().next()
}

impl From<String> for Section {
    fn from(heading: String) -> Self {
        Section::new(heading)
    }
}

impl From<&str> for Section {
    fn from(heading: &str) -> Self {
        Section::new(heading.to_string())
    }
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.heading)
    }
}

impl PartialEq<str> for Section {
    fn eq(&self, other: &str) -> bool {
        self.heading == other
    }
}

impl PartialEq<&str> for Section {
    fn eq(&self, other: &&str) -> bool {
        self.heading == *other
    }
}

/// A section is published as its heading: what a reader sees.
impl Serialize for Section {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.heading)
    }
}

/// A section of one manual: what a judgement names as the fault's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SectionRef {
    pub doc: String,
    pub section: Section,
}

/// "doc § section": for people, never parsed back.
impl fmt::Display for SectionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} § {}", self.doc, self.section)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heading_is_read_into_its_code_list_and_part() {
        let s = Section::from("ME-JCW-TEMP-HI causes (2/3)");
        assert_eq!(s.code(), "ME-JCW-TEMP-HI");
        assert_eq!(s.list(), Some(ListKind::Causes));
        assert_eq!(s.part(), "(2/3)");
        assert_eq!(s.heading(), "ME-JCW-TEMP-HI causes (2/3)");

        let s = Section::from("WIN-TENSION-HI 检查与处理");
        assert_eq!(s.code(), "WIN-TENSION-HI");
        assert_eq!(s.list(), Some(ListKind::Checks));
        assert_eq!(s.part(), "");

        let s = Section::from("Safety");
        assert_eq!(s.code(), "Safety");
        assert_eq!(s.list(), None);

        assert_eq!(Section::from("").code(), "");
        assert_eq!(Section::from("  X causes").code(), "X");
    }

    #[test]
    fn a_reference_reads_as_doc_and_heading() {
        let r = SectionRef {
            doc: "ballast-en".into(),
            section: "BAL-PRES-LO causes".into(),
        };
        assert_eq!(r.to_string(), "ballast-en § BAL-PRES-LO causes");
    }
}
