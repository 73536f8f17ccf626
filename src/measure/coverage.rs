//! Coverage measured: what `coverage::judge` said against what the eval
//! cases say is true, as a confusion table for each part of the set (the
//! part the thresholds were tuned on, and the part held out), with the two
//! rates the targets name: uncovered faults answered related or none with
//! no cause rated high, and covered faults under plant codes answered
//! covered.
//!
//! Pure: judged cases in, tables out.

use std::fmt::Write as _;

use serde::Serialize;

use crate::coverage::Coverage;
use crate::measure::eval::Case;
use crate::retrieval::section::code_of;
use crate::retrieval::SectionRef;

/// One case as coverage was said for it.
#[derive(Debug, Clone)]
pub struct Judged {
    pub case: String,
    pub truth: Coverage,
    pub said: Coverage,
    pub held_out: bool,
    /// A covered fault raised under a code that is not its section's.
    pub plant_code: bool,
    /// A published cause was rated high.
    pub high: bool,
    /// The judgement's best match and section (for the misjudged list).
    pub best: f32,
    pub section: Option<SectionRef>,
    /// A covered fault said covered by another fault's section (its code
    /// not the gold section's): a confident answer from the wrong page.
    pub elsewhere: bool,
    /// The coverage rule that decided (`coverage::rules::RULES`); None when
    /// the coverage was read off a published diagnosis.
    pub rule: Option<&'static str>,
}

impl Judged {
    pub fn of(
        c: &Case,
        said: Coverage,
        high: bool,
        best: f32,
        section: Option<SectionRef>,
    ) -> Self {
        let gold = c.gold.as_ref().map(|g| code_of(&g.section).unwrap_or(""));
        let plant_code = gold.is_some_and(|g| !g.eq_ignore_ascii_case(c.alarm.code.trim()));
        let elsewhere = said == Coverage::Covered
            && c.coverage == Coverage::Covered
            && gold
                .zip(section.as_ref())
                .is_some_and(|(g, s)| !s.section.code().eq_ignore_ascii_case(g));
        Judged {
            case: c.case.clone(),
            truth: c.coverage,
            said,
            held_out: c.held_out,
            plant_code: c.coverage == Coverage::Covered && plant_code,
            high,
            best,
            section,
            elsewhere,
            rule: None,
        }
    }

    /// The same case, decided by coverage rule `rule`.
    pub fn decided_by(self, rule: &'static str) -> Self {
        Judged {
            rule: Some(rule),
            ..self
        }
    }

    /// Whether the rule that decided was wrong: it said another coverage
    /// than the case's truth, or covered a covered fault by another fault's
    /// section.
    fn wrong(&self) -> bool {
        self.said != self.truth || self.elsewhere
    }
}

/// How often one coverage rule decided, and how often it was wrong
/// (`Judged::wrong`).
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct RuleCount {
    pub rule: &'static str,
    pub fired: usize,
    pub wrong: usize,
}

/// The section a judgement named, for people: "doc § section", or "-".
fn said_at(j: &Judged) -> String {
    j.section.as_ref().map_or("-".into(), ToString::to_string)
}

const ORDER: [Coverage; 3] = [Coverage::Covered, Coverage::Related, Coverage::None];

fn at(c: Coverage) -> usize {
    ORDER.iter().position(|&o| o == c).unwrap_or(0)
}

/// One part of the eval set.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Part {
    pub cases: usize,
    /// `table[truth][said]`, in the order covered, related, none.
    pub table: [[usize; 3]; 3],
    /// Faults no section is about (truth related or none), and those of
    /// them answered related or none with no cause rated high.
    pub uncovered: usize,
    pub uncovered_ok: usize,
    /// Covered faults under plant codes, and those answered covered.
    pub plant_code: usize,
    pub plant_code_covered: usize,
    /// All covered faults, and those answered covered.
    pub covered: usize,
    pub covered_said_covered: usize,
    /// "case: truth -> said (best 0.50 at doc § section)".
    pub misjudged: Vec<String>,
    /// Covered faults said covered by another fault's section
    /// ("case: covered by doc § section").
    pub elsewhere: Vec<String>,
    /// Each coverage rule that decided a case, in the table's order.
    pub rules: Vec<RuleCount>,
}

impl Part {
    fn add(&mut self, j: &Judged) {
        self.count_rule(j);
        self.cases += 1;
        self.table[at(j.truth)][at(j.said)] += 1;
        if j.truth == Coverage::Covered {
            self.covered += 1;
            self.covered_said_covered += usize::from(j.said == Coverage::Covered);
            if j.plant_code {
                self.plant_code += 1;
                self.plant_code_covered += usize::from(j.said == Coverage::Covered);
            }
        } else {
            self.uncovered += 1;
            self.uncovered_ok += usize::from(j.said != Coverage::Covered && !j.high);
        }
        if j.elsewhere {
            self.elsewhere
                .push(format!("{}: covered by {}", j.case, said_at(j)));
        }
        if (j.truth == Coverage::Covered) != (j.said == Coverage::Covered) {
            self.misjudged.push(format!(
                "{}: {} -> {} (best {:.2} at {})",
                j.case,
                j.truth.as_str(),
                j.said.as_str(),
                j.best,
                said_at(j)
            ));
        }
    }

    fn count_rule(&mut self, j: &Judged) {
        let Some(rule) = j.rule else { return };
        let i = match self.rules.iter().position(|r| r.rule == rule) {
            Some(i) => i,
            None => {
                self.rules.push(RuleCount {
                    rule,
                    ..RuleCount::default()
                });
                let order = |r: &RuleCount| {
                    crate::coverage::rules::RULES
                        .iter()
                        .position(|t| t.name == r.rule)
                };
                self.rules.sort_by_key(order);
                self.rules.iter().position(|r| r.rule == rule).unwrap_or(0)
            }
        };
        self.rules[i].fired += 1;
        self.rules[i].wrong += usize::from(j.wrong());
    }

    /// The table and rates as text, one row per truth.
    pub fn text(&self, name: &str) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "coverage, {name} ({} cases): truth \\ said   covered  related     none",
            self.cases
        );
        for (i, truth) in ORDER.iter().enumerate() {
            let r = self.table[i];
            let _ = writeln!(
                o,
                "  {:<28} {:>8} {:>8} {:>8}",
                truth.as_str(),
                r[0],
                r[1],
                r[2]
            );
        }
        let _ = writeln!(
            o,
            "  uncovered answered related/none, no cause high: {}/{}; covered under plant codes answered covered: {}/{}; all covered: {}/{}",
            self.uncovered_ok,
            self.uncovered,
            self.plant_code_covered,
            self.plant_code,
            self.covered_said_covered,
            self.covered
        );
        let _ = writeln!(
            o,
            "  covered faults said covered by another fault's section: {}",
            self.elsewhere.len()
        );
        if !self.rules.is_empty() {
            let fired: Vec<String> = self
                .rules
                .iter()
                .map(|r| format!("{} {}/{}", r.rule, r.fired, r.wrong))
                .collect();
            let _ = writeln!(o, "  rules decided/wrong: {}", fired.join(", "));
        }
        for m in &self.misjudged {
            let _ = writeln!(o, "  misjudged {m}");
        }
        for m in &self.elsewhere {
            let _ = writeln!(o, "  elsewhere {m}");
        }
        o
    }
}

/// The tuning part and the held-out part.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct CoverageReport {
    pub tuning: Part,
    pub held_out: Part,
}

impl CoverageReport {
    pub fn of(judged: &[Judged]) -> Self {
        let mut r = CoverageReport::default();
        for j in judged {
            match j.held_out {
                true => r.held_out.add(j),
                false => r.tuning.add(j),
            }
        }
        r
    }

    pub fn text(&self) -> String {
        format!(
            "{}{}",
            self.tuning.text("tuning part"),
            self.held_out.text("held-out part")
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(truth: Coverage, said: Coverage, held_out: bool, plant: bool, high: bool) -> Judged {
        Judged {
            case: "c".into(),
            truth,
            said,
            held_out,
            plant_code: plant,
            high,
            best: 0.5,
            section: None,
            elsewhere: false,
            rule: None,
        }
    }

    #[test]
    fn each_rule_is_counted_when_it_decides_and_when_it_is_wrong() {
        use Coverage::*;
        let r = CoverageReport::of(&[
            j(Covered, Covered, false, false, false).decided_by("word_share"),
            j(None, Covered, false, false, false).decided_by("word_share"),
            j(Covered, Covered, false, false, false).decided_by("own_code"),
            j(Related, None, false, false, false).decided_by("nothing_found"),
            j(Related, Related, false, false, false),
        ]);
        let counts: Vec<(&str, usize, usize)> = r
            .tuning
            .rules
            .iter()
            .map(|c| (c.rule, c.fired, c.wrong))
            .collect();
        // In the table's order; a case with no rule is not counted.
        assert_eq!(
            counts,
            [
                ("own_code", 1, 0),
                ("word_share", 2, 1),
                ("nothing_found", 1, 1)
            ]
        );
        assert!(r
            .text()
            .contains("rules decided/wrong: own_code 1/0, word_share 2/1, nothing_found 1/1"));
    }

    #[test]
    fn a_covered_fault_said_covered_by_another_faults_section_is_counted() {
        let case = |gold: &str| -> Case {
            serde_json::from_value(serde_json::json!({
                "case": "plant-9", "class": "ballast", "coverage": "covered",
                "alarm": {"id": "plant-9", "ts": "2026-12-01T00:00:00Z", "equipment": "BP-2",
                          "code": "PT-1", "severity": "major", "kind": "ballast"},
                "gold": {"doc": "ballast-zh", "section": gold}
            }))
            .unwrap()
        };
        let said = Some(SectionRef {
            doc: "ballast-en".into(),
            section: "BAL-PUMP-PRES-LO causes".into(),
        });
        let right = Judged::of(
            &case("BAL-PUMP-PRES-LO 原因"),
            Coverage::Covered,
            false,
            0.7,
            said.clone(),
        );
        let wrong = Judged::of(
            &case("BAL-VLV-FAIL 原因"),
            Coverage::Covered,
            false,
            0.7,
            said.clone(),
        );
        let related = Judged::of(
            &case("BAL-VLV-FAIL 原因"),
            Coverage::Related,
            false,
            0.3,
            said,
        );
        assert!(!right.elsewhere && wrong.elsewhere && !related.elsewhere);
        let r = CoverageReport::of(&[right, wrong, related]);
        assert_eq!(
            r.tuning.elsewhere,
            vec!["plant-9: covered by ballast-en § BAL-PUMP-PRES-LO causes"]
        );
        assert!(
            r.text()
                .contains("said covered by another fault's section: 1"),
            "{}",
            r.text()
        );
    }

    #[test]
    fn the_table_counts_truth_against_said_per_part() {
        use Coverage::*;
        let r = CoverageReport::of(&[
            j(Covered, Covered, false, true, true),
            j(Covered, Related, false, true, false),
            j(Covered, Covered, false, false, true),
            j(Related, Related, false, false, false),
            // Said related, but a cause is still rated high: not answered right.
            j(Related, Related, false, false, true),
            j(None, Covered, false, false, true),
            j(None, None, true, false, false),
        ]);
        let t = &r.tuning;
        assert_eq!(t.cases, 6);
        assert_eq!(t.table, [[2, 1, 0], [0, 2, 0], [1, 0, 0]]);
        assert_eq!((t.uncovered_ok, t.uncovered), (1, 3));
        assert_eq!((t.plant_code_covered, t.plant_code), (1, 2));
        assert_eq!((t.covered_said_covered, t.covered), (2, 3));
        assert_eq!(t.misjudged.len(), 2);
        assert_eq!(r.held_out.table, [[0, 0, 0], [0, 0, 0], [0, 0, 1]]);
        assert_eq!((r.held_out.uncovered_ok, r.held_out.uncovered), (1, 1));
        assert!(r
            .text()
            .contains("uncovered answered related/none, no cause high: 1/3"));
    }
}
