//! Example alarms: plants' own wordings of faults whose coverage is known,
//! each labelled with its section (covered) or with none (a fault the
//! manuals do not cover), and the nearest of them to a new alarm's message.
//!
//! A plant names a fault in words a section's alarm may share few of
//! (`ejection not detected after sludge cycle`), and the rules over words
//! in `coverage` cannot tell such a message from a neighbouring fault's.
//! Another plant's wording of the same fault usually shares more of them.
//! So an alarm whose nearest example of its equipment is a covered one, near
//! enough and nearer than every uncovered one, is taken for that example's
//! fault. The examples are the eval set's alarms (`knowledge/eval`), which
//! the eval reads with each alarm's own set left out.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::retrieval::tokenize::{is_cjk, terms};

/// The nearest covered example's similarity (cosine of TF-IDF vectors) at
/// which it speaks for the alarm.
pub const NEAR_AT: f32 = 0.55;
/// The same, when its section is the one retrieval ranks first among the
/// alarm's own: two witnesses that read different things (other plants'
/// wordings, the manual's words) agreeing need less from each.
pub const AGREED_AT: f32 = 0.2;
/// How far the nearest covered example must be ahead of the nearest
/// uncovered one of the same equipment.
pub const LEAD_AT: f32 = 0.1;
/// The same, for the less near example that agrees with retrieval: the
/// agreement is itself the evidence against the uncovered neighbour.
pub const AGREED_LEAD_AT: f32 = 0.05;
/// The nearest covered example's similarity when its section is one of the
/// alarm's own that retrieval found, but not the one it ranks first: a
/// plant's words for a hatch left open (`hatch switch says OPEN`) share the
/// hull's words with its leak, which retrieval may rank first.
pub const RANKED_AT: f32 = 0.3;
/// How much nearer than every example of retrieval's first section that
/// example must be: other plants' wordings of retrieval's pick, less like
/// this message, speak against the pick.
pub const OVER_FIRST_AT: f32 = 0.1;

#[derive(Debug, thiserror::Error)]
pub enum ExamplesError {
    #[error("cannot read example alarms {path}: {reason}")]
    Read { path: String, reason: String },
    #[error("example alarms {path}, line {line}: {reason}")]
    Line {
        path: String,
        line: usize,
        reason: String,
    },
}

/// One labelled alarm, as the eval set stores it.
#[derive(Debug, Deserialize)]
struct Row {
    case: String,
    alarm: RowAlarm,
    #[serde(default)]
    gold: Option<RowGold>,
}

#[derive(Debug, Deserialize)]
struct RowAlarm {
    #[serde(default)]
    kind: Option<String>,
    #[serde(default)]
    message: Option<String>,
}

#[derive(Debug, Deserialize)]
struct RowGold {
    section: String,
}

struct Example {
    /// The set it was written in (`set_of`), left out when its own alarms are judged.
    set: String,
    kind: String,
    /// The section code of its fault; None for a fault no section is about.
    section: Option<String>,
    /// Unit-length TF-IDF weights, by term.
    weights: Vec<(u32, f32)>,
}

/// The labelled example alarms, by equipment kind.
#[derive(Default)]
pub struct Examples {
    terms: HashMap<String, u32>,
    /// Inverse document frequency, by term id.
    idf: Vec<f32>,
    all: Vec<Example>,
}

/// The nearest uncovered example's similarity at which it speaks against
/// words and ranking that say covered, and its lead over the nearest
/// covered example.
pub const UNLIKE_AT: f32 = 0.25;
pub const UNLIKE_LEAD: f32 = 0.05;

/// The nearest covered example of an alarm's equipment.
#[derive(Debug, Clone, PartialEq)]
pub struct Nearest {
    pub section: String,
    pub similarity: f32,
    /// Its similarity less the nearest uncovered example's.
    pub lead: f32,
    /// The nearest uncovered example's similarity (0 without one).
    pub uncovered: f32,
    /// The nearest example of the rival section's similarity
    /// (`nearest_beside`; 0 without one or without a rival).
    pub rival: f32,
}

/// The set an eval case was written in, from its id: `plant-2304` and
/// `uncov-2311` are set 23, `plant-604` set 6, `ship-012` the first cases.
pub fn set_of(case: &str) -> String {
    if case.starts_with("ship") {
        return "ship".into();
    }
    let digits: String = case.chars().filter(char::is_ascii_digit).collect();
    match digits.len() {
        4 => digits[..2].to_string(),
        3 => digits[..1].to_string(),
        _ => format!("x{digits}"),
    }
}

/// Where the eval set is looked for when `--cases` is not given, best
/// first: `eval/alarms.jsonl` beside the index (an installed index), the
/// installed package's copy (`/usr/share/tidewatch` beside `/usr/bin`), and
/// the source tree's when this binary is a build in `target/*/`. Never the
/// working directory: a command must mean the same thing from anywhere.
pub fn eval_set_candidates(index: Option<&Path>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = index.and_then(Path::parent) {
        out.push(dir.join("eval/alarms.jsonl"));
    }
    if let Some(bin) = std::env::current_exe()
        .ok()
        .and_then(|e| e.parent().map(Path::to_owned))
    {
        out.push(bin.join("../share/tidewatch/eval/alarms.jsonl"));
        out.push(bin.join("../../knowledge/eval/alarms.jsonl"));
    }
    out
}

/// A message's terms for likeness: its words (`tokenize::terms`), each
/// Chinese character alone as well as in pairs, and no numbers or codes:
/// a reading or a tag is the plant's, not the fault's.
fn likeness_terms(text: &str) -> Vec<String> {
    let mut out: Vec<String> = terms(text)
        .into_iter()
        .filter(|t| !t.starts_with('#') && !t.chars().any(|c| c.is_ascii_digit()))
        .collect();
    out.extend(text.chars().filter(|&c| is_cjk(c)).map(String::from));
    out
}

impl std::fmt::Debug for Examples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Examples({} alarms, {} terms)",
            self.all.len(),
            self.idf.len()
        )
    }
}

impl Examples {
    /// Reads the eval set's JSON Lines (`tidewatch eval --cases`' format).
    pub fn load(path: &Path) -> Result<Self, ExamplesError> {
        let text = std::fs::read_to_string(path).map_err(|e| ExamplesError::Read {
            path: path.display().to_string(),
            reason: e.to_string(),
        })?;
        let mut rows = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let row: Row = serde_json::from_str(line).map_err(|e| ExamplesError::Line {
                path: path.display().to_string(),
                line: i + 1,
                reason: e.to_string(),
            })?;
            let (Some(kind), Some(message)) = (row.alarm.kind, row.alarm.message) else {
                continue;
            };
            let section = row
                .gold
                .and_then(|g| crate::retrieval::section::code_of(&g.section).map(str::to_string));
            rows.push((set_of(&row.case), kind, message, section));
        }
        Ok(Self::of(rows))
    }

    /// Examples from `(set, kind, message, section)` rows.
    pub fn of(rows: Vec<(String, String, String, Option<String>)>) -> Self {
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut df: Vec<u32> = Vec::new();
        let mut counted = Vec::with_capacity(rows.len());
        for (set, kind, message, section) in rows {
            let mut tf: HashMap<u32, u32> = HashMap::new();
            for t in likeness_terms(&message) {
                let next = ids.len() as u32;
                let id = *ids.entry(t).or_insert(next);
                if id as usize == df.len() {
                    df.push(0);
                }
                *tf.entry(id).or_default() += 1;
            }
            for id in tf.keys() {
                df[*id as usize] += 1;
            }
            counted.push((set, kind, section, tf));
        }
        let n = counted.len().max(1) as f32;
        let idf: Vec<f32> = df.iter().map(|&d| (n / d as f32).ln()).collect();
        let all = counted
            .into_iter()
            .map(|(set, kind, section, tf)| Example {
                set,
                kind,
                section,
                weights: unit(
                    tf.into_iter()
                        .map(|(id, c)| (id, weight(c, idf[id as usize]))),
                ),
            })
            .collect();
        Self {
            terms: ids,
            idf,
            all,
        }
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The nearest covered example of `kind` to `message`, and its lead
    /// over the nearest uncovered one; examples of set `except` are left
    /// out (the eval's own alarms). None without a covered example.
    pub fn nearest(
        &self,
        kinds: &[String],
        message: &str,
        except: Option<&str>,
    ) -> Option<Nearest> {
        self.nearest_beside(kinds, message, except, None)
    }

    /// `nearest`, and how near the nearest example of section `rival` is,
    /// read in the same pass.
    pub fn nearest_beside(
        &self,
        kinds: &[String],
        message: &str,
        except: Option<&str>,
        rival: Option<&str>,
    ) -> Option<Nearest> {
        self.nearest_any(kinds, message, except, rival)
            .filter(|n| !n.section.is_empty())
    }

    /// `nearest_beside`, also when no covered example is near (its section empty,
    /// its similarity 0), for the nearest uncovered one.
    pub fn nearest_any(
        &self,
        kinds: &[String],
        message: &str,
        except: Option<&str>,
        rival: Option<&str>,
    ) -> Option<Nearest> {
        let query = self.query(message)?;
        let (mut covered, mut uncovered): (Option<(f32, &str)>, f32) = (None, 0.0);
        let mut near_rival = 0.0f32;
        for e in self.of_kinds(kinds, except) {
            let s = e.similarity(&query);
            if rival.is_some() && e.section.as_deref() == rival {
                near_rival = near_rival.max(s);
            }
            match &e.section {
                Some(code) if covered.is_none_or(|(b, _)| s > b) => covered = Some((s, code)),
                Some(_) => {}
                None => uncovered = uncovered.max(s),
            }
        }
        let (s, code) = covered.unwrap_or((0.0, ""));
        Some(Nearest {
            section: code.to_string(),
            similarity: s,
            lead: s - uncovered,
            uncovered,
            rival: near_rival,
        })
    }

    /// The examples of `kind`, but those of set `except`.
    fn of_kinds<'e>(
        &'e self,
        kinds: &'e [String],
        except: Option<&'e str>,
    ) -> impl Iterator<Item = &'e Example> {
        self.all
            .iter()
            .filter(move |e| kinds.contains(&e.kind) && Some(e.set.as_str()) != except)
    }

    /// A message's unit-length TF-IDF weights, by term id; None when it
    /// holds no term.
    fn query(&self, message: &str) -> Option<HashMap<u32, f32>> {
        let mut tf: HashMap<u32, u32> = HashMap::new();
        // Terms no example holds weigh as much as the rarest, so a message
        // that says mostly what no example says is near none of them.
        let mut unseen = 0.0f32;
        for t in likeness_terms(message) {
            match self.terms.get(&t) {
                Some(&id) => *tf.entry(id).or_default() += 1,
                None => unseen += 1.0,
            }
        }
        let rare = (self.all.len().max(1) as f32).ln();
        let known: Vec<(u32, f32)> = tf
            .into_iter()
            .map(|(id, c)| (id, weight(c, self.idf[id as usize])))
            .collect();
        let norm = (known.iter().map(|(_, w)| w * w).sum::<f32>() + unseen * rare * rare).sqrt();
        if norm == 0.0 {
            return None;
        }
        Some(known.into_iter().map(|(id, w)| (id, w / norm)).collect())
    }
}

impl Example {
    /// Its cosine with a unit-length `query`.
    fn similarity(&self, query: &HashMap<u32, f32>) -> f32 {
        self.weights
            .iter()
            .filter_map(|(id, w)| query.get(id).map(|q| q * w))
            .sum()
    }
}

fn weight(count: u32, idf: f32) -> f32 {
    (1.0 + (count as f32).ln()) * idf
}

fn unit(weights: impl Iterator<Item = (u32, f32)>) -> Vec<(u32, f32)> {
    let w: Vec<(u32, f32)> = weights.collect();
    let norm = w.iter().map(|(_, x)| x * x).sum::<f32>().sqrt();
    if norm == 0.0 {
        return w;
    }
    w.into_iter().map(|(id, x)| (id, x / norm)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ex() -> Examples {
        let row = |set: &str, message: &str, section: Option<&str>| {
            (
                set.to_string(),
                "purifier".to_string(),
                message.to_string(),
                section.map(str::to_string),
            )
        };
        Examples::of(vec![
            row(
                "1",
                "sludge ejection not detected after discharge cycle",
                Some("PUR-DISCH-FAIL"),
            ),
            row(
                "2",
                "purifier bowl failed to open, no ejection seen",
                Some("PUR-DISCH-FAIL"),
            ),
            row("3", "purifier feed pump motor overload trip", None),
            row(
                "4",
                "purifier vibration high at bowl speed",
                Some("PUR-VIB-HI"),
            ),
        ])
    }

    #[test]
    fn another_plants_wording_of_the_same_fault_is_nearest() {
        let n = ex()
            .nearest(
                &["purifier".into()],
                "No.2 purifier: sludge ejection not detected after the discharge",
                None,
            )
            .unwrap();
        assert_eq!(n.section, "PUR-DISCH-FAIL");
        assert!(n.similarity >= NEAR_AT && n.lead >= LEAD_AT, "{n:?}");
    }

    #[test]
    fn an_uncovered_fault_near_its_own_example_is_not_led() {
        let n = ex()
            .nearest(
                &["purifier".into()],
                "purifier feed pump overload tripped",
                None,
            )
            .unwrap();
        assert!(n.lead < LEAD_AT, "{n:?}");
    }

    #[test]
    fn the_own_set_and_other_equipment_are_left_out() {
        let e = ex();
        let n = e
            .nearest(
                &["purifier".into()],
                "sludge ejection not detected",
                Some("1"),
            )
            .unwrap();
        assert!(n.similarity < NEAR_AT, "{n:?}");
        assert_eq!(
            e.nearest(&["boiler".into()], "sludge ejection not detected", None),
            None
        );
    }

    #[test]
    fn sets_are_read_from_case_ids() {
        assert_eq!(set_of("plant-2304"), "23");
        assert_eq!(set_of("uncov-611"), "6");
        assert_eq!(set_of("ship-012"), "ship");
    }
}
