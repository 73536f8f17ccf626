//! Labelled alarms: the one JSON Lines format that both the shipped example
//! alarms (`knowledge/examples`, which coverage judges by) and the eval set
//! (`knowledge/eval`, which `tidewatch eval` measures on) are written in,
//! and where each file is looked for.
//!
//! One line is one alarm as a plant raised it, with what is true of it: the
//! manual class of its equipment, whether a section covers its fault and
//! which. This module only reads; it never judges, and it never decides
//! which file a caller should read.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::alarm::Alarm;
use crate::verdict::Coverage;

#[derive(Debug, thiserror::Error)]
pub enum CasesError {
    #[error("{path}: {reason}")]
    Read { path: String, reason: String },
    #[error("{path}, line {line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
}

/// The section a covered fault is about.
#[derive(Debug, Clone, Deserialize)]
pub struct Gold {
    pub doc: String,
    pub section: String,
}

impl Gold {
    /// The section's code (`ME-LO-PRES-LO` of `ME-LO-PRES-LO causes`).
    pub fn code(&self) -> &str {
        self.section.split_whitespace().next().unwrap_or("")
    }
}

/// One labelled alarm.
#[derive(Debug, Clone, Deserialize)]
pub struct Case {
    pub case: String,
    #[serde(default)]
    pub lang: Option<String>,
    /// The manual class of the alarm's equipment: the truth, whatever the
    /// alarm's own `kind` says (a plant writes kinds in its own words).
    pub class: String,
    /// Who or what wrote the case (`curated`, `blind-set-prompt`): a
    /// writer's habits are shared by all its cases, so figures are read per
    /// writer.
    #[serde(default)]
    pub writer: Option<String>,
    /// How the alarm's `kind` is written (`KIND_STYLES`).
    #[serde(default)]
    pub kind_style: Option<String>,
    pub alarm: Alarm,
    /// The section about the alarm's fault; absent when no section is.
    #[serde(default)]
    pub gold: Option<Gold>,
    /// What the manuals hold for the alarm's fault, by reading: covered (the
    /// default), related (no section, other faults' sections of the same
    /// equipment) or none (equipment without a manual).
    #[serde(default)]
    pub coverage: Coverage,
    /// Kept apart from tuning: no rule, test, threshold or example was
    /// written after reading it. Reported as its own part.
    #[serde(default)]
    pub held_out: bool,
    /// Expected-cause keywords; each may list alternatives as "english|中文".
    #[serde(default)]
    pub keywords: Vec<String>,
}

/// The ways an alarm's `kind` is written: the manual class itself, none,
/// a coarse machine name, a component's name, Chinese, anything else.
pub const KIND_STYLES: [&str; 6] = ["class", "absent", "coarse", "component", "chinese", "other"];

impl Case {
    /// Its writer as reported (`unknown` when the line names none).
    pub fn writer(&self) -> &str {
        self.writer.as_deref().unwrap_or("unknown")
    }

    /// Its kind style as reported (`unknown` when the line names none).
    pub fn kind_style(&self) -> &str {
        self.kind_style.as_deref().unwrap_or("unknown")
    }
}

/// Reads a labelled-alarm file: every non-blank line one case.
pub fn load(path: &Path) -> Result<Vec<Case>, CasesError> {
    let text = std::fs::read_to_string(path).map_err(|e| CasesError::Read {
        path: path.display().to_string(),
        reason: crate::config::io_problem(&e),
    })?;
    parse(&text, path)
}

/// `load` of text already read from `path`.
pub fn parse(text: &str, path: &Path) -> Result<Vec<Case>, CasesError> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| {
            let case: Case = serde_json::from_str(l).map_err(|e| CasesError::Line {
                path: path.display().to_string(),
                line: i + 1,
                reason: e.to_string(),
            })?;
            match case.kind_style.as_deref() {
                Some(s) if !KIND_STYLES.contains(&s) => Err(CasesError::Line {
                    path: path.display().to_string(),
                    line: i + 1,
                    reason: format!("kind_style {s:?} is none of {}", KIND_STYLES.join(", ")),
                }),
                _ => Ok(case),
            }
        })
        .collect()
}

/// Where a labelled-alarm file named `rel` (`examples/alarms.jsonl`) is
/// looked for, best first: beside the index (an installed index), the
/// installed package's copy (`/usr/share/tidewatch` beside `/usr/bin`), and
/// the source tree's `knowledge/` when this binary is a build in
/// `target/*/`. Never the working directory: a command must mean the same
/// thing from anywhere.
fn candidates(index: Option<&Path>, rel: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = index.and_then(Path::parent) {
        out.push(dir.join(rel));
    }
    if let Some(bin) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
    {
        out.push(bin.join("../share/tidewatch").join(rel));
        out.push(bin.join("../../knowledge").join(rel));
    }
    out
}

/// The shipped example alarms, where the daemon looks for them when
/// `knowledge.examples` is not set.
pub const EXAMPLES: &str = "examples/alarms.jsonl";
/// The eval set, where `tidewatch eval` and `bench` look for it when
/// `--cases` is not given. The daemon never reads it.
pub const EVAL_SET: &str = "eval/alarms.jsonl";

/// `candidates` of the shipped example alarms.
pub fn examples_candidates(index: Option<&Path>) -> Vec<PathBuf> {
    candidates(index, EXAMPLES)
}

/// `candidates` of the eval set.
pub fn eval_set_candidates(index: Option<&Path>) -> Vec<PathBuf> {
    candidates(index, EVAL_SET)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"case": "plant-4701", "lang": "en", "class": "ballast", "writer": "blind-set-prompt", "kind_style": "class", "coverage": "covered", "held_out": true, "alarm": {"id": "plant-4701", "ts": "2026-12-01T00:00:00Z", "equipment": "BP-2", "code": "PT-1", "severity": "major", "kind": "ballast", "message": "ballast pump disch press low"}, "gold": {"doc": "ballast-en", "section": "BAL-PUMP-PRES-LO causes"}, "keywords": ["impeller|叶轮"]}"#;

    #[test]
    fn a_line_reads_with_its_writer_and_kind_style_and_a_bad_one_is_named_by_line() {
        let p = Path::new("/x/cases.jsonl");
        let cs = parse(&format!("{LINE}\n\n"), p).unwrap();
        assert_eq!(cs.len(), 1);
        let c = &cs[0];
        assert_eq!((c.writer(), c.kind_style()), ("blind-set-prompt", "class"));
        assert_eq!(c.gold.as_ref().unwrap().code(), "BAL-PUMP-PRES-LO");
        assert!(c.held_out && c.coverage == Coverage::Covered);
        let e = parse(&format!("{LINE}\n\n{{\"case\": 1}}\n"), p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("/x/cases.jsonl, line 3"), "{e}");
        let e = parse(
            &LINE.replace("\"class\", \"coverage", "\"kinds\", \"coverage"),
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("line 1") && e.contains("\"kinds\""), "{e}");
    }

    #[test]
    fn a_line_without_the_new_fields_still_reads() {
        let old = LINE.replace(
            ", \"writer\": \"blind-set-prompt\", \"kind_style\": \"class\"",
            "",
        );
        let c = &parse(&old, Path::new("c")).unwrap()[0];
        assert_eq!((c.writer(), c.kind_style()), ("unknown", "unknown"));
    }

    /// The shipped files: every case names its writer and kind style; the
    /// examples are training data, so none of them is held out, and the
    /// cases tests name as a rule's reason are among them.
    #[test]
    fn the_shipped_examples_and_eval_set_read_and_are_apart() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge");
        let ex = load(&root.join(EXAMPLES)).unwrap();
        let ev = load(&root.join(EVAL_SET)).unwrap();
        for c in ex.iter().chain(&ev) {
            assert!(c.writer.is_some() && c.kind_style.is_some(), "{}", c.case);
        }
        assert!(ex.iter().all(|c| !c.held_out));
        let in_ex = |id: &str| ex.iter().any(|c| c.case == id);
        assert!(ev.iter().all(|c| !in_ex(&c.case)));
        for id in [
            "plant-2834",
            "plant-2608",
            "uncov-2103",
            "uncov-2214",
            "uncov-1815",
            "uncov-1204",
        ] {
            assert!(in_ex(id), "{id}");
        }
        assert!(ev.iter().any(|c| c.held_out) && ev.iter().any(|c| !c.held_out));
    }

    #[test]
    fn the_examples_and_the_eval_set_are_looked_for_in_different_files() {
        let index = Path::new("/srv/k/knowledge.twx");
        let ex = examples_candidates(Some(index));
        let ev = eval_set_candidates(Some(index));
        assert_eq!(ex[0], Path::new("/srv/k/examples/alarms.jsonl"));
        assert_eq!(ev[0], Path::new("/srv/k/eval/alarms.jsonl"));
        assert!(ex.iter().all(|p| !ev.contains(p)));
    }
}
