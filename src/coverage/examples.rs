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
//! fault. The examples are the shipped labelled alarms
//! (`knowledge/examples`, in the `cases` format), never the eval set; they
//! are kept by the manual class of their equipment, because a plant writes
//! an alarm's `kind` in its own words.

use std::collections::HashMap;
use std::path::Path;

use crate::language::is_cjk;
use crate::retrieval::tokenize::terms;

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
    #[error("example alarms {0}")]
    Cases(#[from] crate::cases::CasesError),
}

struct Example {
    /// Its case id: what `holds` answers by.
    case: String,
    /// The manual class of its equipment.
    class: String,
    /// The section code of its fault; None for a fault no section is about.
    section: Option<String>,
    /// Unit-length TF-IDF weights, by term.
    weights: Vec<(u32, f32)>,
}

/// The labelled example alarms, by manual class.
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

/// A message's terms for likeness: its words (`tokenize::terms`), each
/// Chinese character alone as well as in pairs, and no numbers or codes:
/// a reading or a tag is the plant's, not the fault's.
pub(super) fn likeness_terms(text: &str) -> Vec<String> {
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
    /// Reads labelled alarms (the `cases` format); a case without a
    /// message is no example.
    pub fn load(path: &Path) -> Result<Self, ExamplesError> {
        Ok(Self::of_cases(&crate::cases::load(path)?))
    }

    /// Examples of labelled alarms, each kept by its case's class.
    pub fn of_cases<'c>(cases: impl IntoIterator<Item = &'c crate::cases::Case>) -> Self {
        let rows = cases
            .into_iter()
            .filter_map(|c| {
                let message = c.alarm.message.clone()?;
                let section = c.gold.as_ref().map(|g| g.code().to_string());
                Some((c.case.clone(), c.class.clone(), message, section))
            })
            .collect();
        Self::of(rows)
    }

    /// Examples from `(case, class, message, section)` rows.
    pub fn of(rows: Vec<(String, String, String, Option<String>)>) -> Self {
        let mut ids: HashMap<String, u32> = HashMap::new();
        let mut df: Vec<u32> = Vec::new();
        let mut counted = Vec::with_capacity(rows.len());
        for (case, class, message, section) in rows {
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
            counted.push((case, class, section, tf));
        }
        let n = counted.len().max(1) as f32;
        let idf: Vec<f32> = df.iter().map(|&d| (n / d as f32).ln()).collect();
        let all = counted
            .into_iter()
            .map(|(case, class, section, tf)| Example {
                case,
                class,
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

    /// True when case `case` is one of the examples: an alarm measured
    /// against examples that hold it would be judged by its own words.
    pub fn holds(&self, case: &str) -> bool {
        self.all.iter().any(|e| e.case == case)
    }

    /// The nearest covered example of manual class `class` to `message`,
    /// and its lead over the nearest uncovered one. None without a covered
    /// example.
    pub fn nearest(&self, classes: &[String], message: &str) -> Option<Nearest> {
        self.nearest_beside(classes, message, None)
    }

    /// `nearest`, and how near the nearest example of section `rival` is,
    /// read in the same pass.
    pub fn nearest_beside(
        &self,
        classes: &[String],
        message: &str,
        rival: Option<&str>,
    ) -> Option<Nearest> {
        self.nearest_any(classes, message, rival)
            .filter(|n| !n.section.is_empty())
    }

    /// `nearest_beside`, also when no covered example is near (its section empty,
    /// its similarity 0), for the nearest uncovered one.
    pub fn nearest_any(
        &self,
        classes: &[String],
        message: &str,
        rival: Option<&str>,
    ) -> Option<Nearest> {
        self.nearest_among(|e| classes.contains(&e.class), message, rival)
    }

    /// The nearest covered example of any equipment to `message`, and its
    /// lead over the nearest uncovered one of any equipment: for an alarm
    /// whose text names no manual's equipment. None without a covered
    /// example.
    pub fn nearest_of_all(&self, message: &str) -> Option<Nearest> {
        self.nearest_among(|_| true, message, None)
            .filter(|n| !n.section.is_empty())
    }

    fn nearest_among(
        &self,
        pick: impl Fn(&Example) -> bool,
        message: &str,
        rival: Option<&str>,
    ) -> Option<Nearest> {
        let query = self.query(message)?;
        let (mut covered, mut uncovered): (Option<(f32, &str)>, f32) = (None, 0.0);
        let mut near_rival = 0.0f32;
        for e in self.all.iter().filter(|e| pick(e)) {
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

    /// The likeness of two messages by the examples' measure (cosine of
    /// TF-IDF vectors, the examples' IDF): a term no example holds weighs
    /// as the rarest, so two messages sharing a plant's own word (`FWG`)
    /// are alike by it. What a site note's alarm is compared with a new
    /// alarm by (`coverage::site`).
    pub fn likeness(&self, a: &str, b: &str) -> f32 {
        self.likeness_but(a, b, &|_| false)
    }

    /// `likeness`, with the terms `skip` holds left out of both messages.
    pub fn likeness_but(&self, a: &str, b: &str, skip: &dyn Fn(&str) -> bool) -> f32 {
        // Without examples every term weighs the same.
        let rare = (self.all.len().max(1) as f32).ln().max(1.0);
        let vector = |text: &str| {
            let mut tf: HashMap<String, u32> = HashMap::new();
            for t in likeness_terms(text).into_iter().filter(|t| !skip(t)) {
                *tf.entry(t).or_default() += 1;
            }
            let w: Vec<(String, f32)> = tf
                .into_iter()
                .map(|(t, c)| {
                    let idf = self.terms.get(&t).map_or(rare, |&id| self.idf[id as usize]);
                    (t, weight(c, idf))
                })
                .collect();
            let norm = w.iter().map(|(_, x)| x * x).sum::<f32>().sqrt();
            w.into_iter()
                .filter(|_| norm > 0.0)
                .map(|(t, x)| (t, x / norm))
                .collect::<HashMap<String, f32>>()
        };
        let (va, vb) = (vector(a), vector(b));
        va.iter()
            .filter_map(|(t, x)| vb.get(t).map(|y| x * y))
            .sum()
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
        let row = |case: &str, message: &str, section: Option<&str>| {
            (
                case.to_string(),
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
            )
            .unwrap();
        assert_eq!(n.section, "PUR-DISCH-FAIL");
        assert!(n.similarity >= NEAR_AT && n.lead >= LEAD_AT, "{n:?}");
    }

    #[test]
    fn an_uncovered_fault_near_its_own_example_is_not_led() {
        let n = ex()
            .nearest(&["purifier".into()], "purifier feed pump overload tripped")
            .unwrap();
        assert!(n.lead < LEAD_AT, "{n:?}");
    }

    #[test]
    fn other_classes_are_left_out_and_a_case_is_known_by_its_id() {
        let e = ex();
        assert_eq!(
            e.nearest(&["boiler".into()], "sludge ejection not detected"),
            None
        );
        assert!(e.holds("2") && !e.holds("plant-2"));
    }

    #[test]
    fn two_wordings_of_one_fault_are_alike_and_of_two_faults_are_not() {
        for e in [ex(), Examples::default()] {
            let same = e.likeness(
                "No.2 purifier sludge ejection not detected",
                "purifier: no sludge ejection detected after discharge",
            );
            let other = e.likeness(
                "No.2 purifier sludge ejection not detected",
                "purifier feed pump motor overload trip",
            );
            assert!(same > 0.5 && other < 0.3, "{e:?}: {same} {other}");
            // A plant's own word no example holds still counts.
            assert!(e.likeness("FWG salinity high", "FWG salinity high") > 0.99);
            assert_eq!(e.likeness("", "FWG"), 0.0);
        }
    }

    /// Examples are kept by the case's class, the truth, not by the alarm's
    /// own kind: a plant writes `SEP` or `分油机` for the purifier.
    #[test]
    fn examples_are_kept_by_the_cases_class_not_the_alarms_kind() {
        let line = r#"{"case": "plant-901", "class": "purifier", "alarm": {"id": "plant-901", "ts": "2026-12-01T00:00:00Z", "equipment": "SEP1", "code": "XA-1", "severity": "major", "kind": "SEP", "message": "sludge ejection not detected"}, "gold": {"doc": "purifier-en", "section": "PUR-DISCH-FAIL causes"}}"#;
        let other = line
            .replace("plant-901", "plant-902")
            .replace("\"purifier\"", "\"boiler\"")
            .replace("sludge ejection not detected", "burner flame failure");
        let cases = crate::cases::parse(&format!("{line}\n{other}"), Path::new("x")).unwrap();
        let e = Examples::of_cases(&cases);
        let n = e
            .nearest(&["purifier".into()], "sludge ejection not detected")
            .unwrap();
        assert_eq!(n.section, "PUR-DISCH-FAIL");
        assert_eq!(
            e.nearest(&["SEP".into()], "sludge ejection not detected"),
            None
        );
    }
}
