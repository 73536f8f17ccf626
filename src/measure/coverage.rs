//! Coverage measured: what `coverage::judge` said against what the eval
//! cases say is true, as a confusion table for each part of the set (the
//! part the thresholds were tuned on, and the part held out), with the two
//! rates the targets name: uncovered faults answered related or none with
//! no cause rated high, and covered faults under plant codes answered
//! covered. The same figures, with the section's hit, again per writer and
//! per kind style (`Breakdown`): a set written by one prompt shares that
//! prompt's habits, and a rule tuned on it learns them.
//!
//! Pure: judged cases in, tables out.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;

use crate::cases::Case;
use crate::coverage::Coverage;
use crate::retrieval::section::code_of;
use crate::retrieval::SectionRef;

/// One case as coverage was said for it.
#[derive(Debug, Clone)]
pub struct Judged {
    pub case: String,
    /// Who wrote the case, and how its alarm's kind is written.
    pub writer: String,
    pub kind_style: String,
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
    /// With a gold section: where it was among the passages looked at
    /// (`ranked`); None for a case without one.
    pub gold: Option<Option<usize>>,
    /// An expected cause was named in the answer (`named`); None when no
    /// answer was read for causes.
    pub cause: Option<bool>,
    /// The coverage rule that decided (`coverage::rules::RULES`); None when
    /// the coverage was read off a published diagnosis.
    pub rule: Option<&'static str>,
    /// How the alarm's equipment was found (`retrieval::kinds::By`), for
    /// the misjudged list; None when not read.
    pub equipment: Option<&'static str>,
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
            writer: c.writer().to_string(),
            kind_style: c.kind_style().to_string(),
            truth: c.coverage,
            said,
            held_out: c.held_out,
            plant_code: c.coverage == Coverage::Covered && plant_code,
            high,
            best,
            section,
            elsewhere,
            gold: None,
            cause: None,
            rule: None,
            equipment: None,
        }
    }

    /// With the gold section at `rank` among the passages (None: not
    /// among them), for a case that has one.
    pub fn ranked(mut self, c: &Case, rank: Option<usize>) -> Self {
        self.gold = c.gold.as_ref().map(|_| rank);
        self
    }

    /// With whether the answer named an expected cause.
    pub fn named(mut self, found: bool) -> Self {
        self.cause = Some(found);
        self
    }

    /// The same case, decided by coverage rule `rule`.
    /// The same, with how its equipment was found.
    pub fn seen_as(self, by: crate::retrieval::kinds::By) -> Self {
        Judged {
            equipment: Some(by.as_str()),
            ..self
        }
    }

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

/// The counts of a confusion table and the rates the targets name.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Tally {
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
    /// Each coverage rule that decided a case, in the table's order.
    pub rules: Vec<RuleCount>,
}

impl Tally {
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
}

/// One part of the eval set.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Part {
    #[serde(flatten)]
    pub tally: Tally,
    /// Covered faults said covered by another fault's section, held out
    /// or not.
    pub elsewhere_count: usize,
    /// "case: truth -> said (best 0.50 at doc § section, rule related)",
    /// of tuning cases only.
    pub misjudged: Vec<String>,
    /// Covered faults said covered by another fault's section ("case:
    /// covered by doc § section"), of tuning cases only.
    pub elsewhere: Vec<String>,
    /// Held-out cases misjudged or covered elsewhere: counted, never named,
    /// since a held-out case whose miss was read is held out no longer.
    pub unnamed: usize,
}

impl Part {
    fn add(&mut self, j: &Judged) {
        self.tally.add(j);
        self.elsewhere_count += usize::from(j.elsewhere);
        let misjudged = (j.truth == Coverage::Covered) != (j.said == Coverage::Covered);
        if j.held_out {
            self.unnamed += usize::from(misjudged || j.elsewhere);
            return;
        }
        if j.elsewhere {
            self.elsewhere
                .push(format!("{}: covered by {}", j.case, said_at(j)));
        }
        if misjudged {
            self.misjudged.push(format!(
                "{}: {} -> {} (best {:.2} at {}{})",
                j.case,
                j.truth.as_str(),
                j.said.as_str(),
                j.best,
                said_at(j),
                j.rule.map(|r| format!(", rule {r}")).unwrap_or_default()
                    + &j.equipment
                        .map(|e| format!(", equipment by {e}"))
                        .unwrap_or_default()
            ));
        }
    }

    /// The table and rates as text, one row per truth.
    pub fn text(&self, name: &str) -> String {
        let t = &self.tally;
        let mut o = String::new();
        let _ = writeln!(
            o,
            "coverage, {name} ({} cases): truth \\ said   covered  related     none",
            t.cases
        );
        for (i, truth) in ORDER.iter().enumerate() {
            let r = t.table[i];
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
            t.uncovered_ok,
            t.uncovered,
            t.plant_code_covered,
            t.plant_code,
            t.covered_said_covered,
            t.covered
        );
        let _ = writeln!(
            o,
            "  covered faults said covered by another fault's section: {}",
            self.elsewhere_count
        );
        if !t.rules.is_empty() {
            let fired: Vec<String> = t
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
        if self.unnamed > 0 {
            let _ = writeln!(
                o,
                "  held-out cases misjudged or covered elsewhere: {}, not named (a held-out case read is tuning)",
                self.unnamed
            );
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

/// Every figure of one part of one group of cases.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Figures {
    #[serde(flatten)]
    pub tally: Tally,
    /// Covered faults said covered by another fault's section.
    pub elsewhere: usize,
    /// Cases with a gold section, and those with it first, and among the
    /// first three, of the passages looked at.
    pub with_gold: usize,
    pub hit_at_1: usize,
    pub hit_at_3: usize,
    /// Covered faults raised again under a code no manual uses (`PLANT-n`),
    /// and those answered covered.
    pub under_plant_codes: usize,
    pub under_plant_codes_covered: usize,
    /// Covered faults whose answer was read for causes, and those naming
    /// an expected one.
    pub cause_read: usize,
    pub cause_named: usize,
}

impl Figures {
    fn add(&mut self, j: &Judged) {
        self.tally.add(j);
        self.elsewhere += usize::from(j.elsewhere);
        if let Some(rank) = j.gold {
            self.with_gold += 1;
            self.hit_at_1 += usize::from(rank == Some(0));
            self.hit_at_3 += usize::from(rank.is_some_and(|r| r < 3));
        }
        if let (Some(named), Coverage::Covered) = (j.cause, j.truth) {
            self.cause_read += 1;
            self.cause_named += usize::from(named);
        }
    }

    fn add_plant(&mut self, j: &Judged) {
        self.under_plant_codes += 1;
        self.under_plant_codes_covered += usize::from(j.said == Coverage::Covered);
    }
}

/// A group's tuning part and held-out part.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Group {
    pub tuning: Figures,
    pub held_out: Figures,
}

impl Group {
    fn part(&mut self, j: &Judged) -> &mut Figures {
        match j.held_out {
            true => &mut self.held_out,
            false => &mut self.tuning,
        }
    }
}

/// Every figure per writer and per kind style, each split tuning / held out.
#[derive(Debug, Default, Clone, PartialEq, Serialize)]
pub struct Breakdown {
    pub by_writer: BTreeMap<String, Group>,
    pub by_kind_style: BTreeMap<String, Group>,
}

impl Breakdown {
    /// From the cases as judged, and (when measured) every covered one
    /// judged again under a plant code.
    pub fn of(judged: &[Judged], under_plant_codes: &[Judged]) -> Self {
        let mut b = Breakdown::default();
        for j in judged {
            for g in b.groups(j) {
                g.part(j).add(j);
            }
        }
        for j in under_plant_codes {
            for g in b.groups(j) {
                g.part(j).add_plant(j);
            }
        }
        b
    }

    fn groups(&mut self, j: &Judged) -> [&mut Group; 2] {
        [
            self.by_writer.entry(j.writer.clone()).or_default(),
            self.by_kind_style.entry(j.kind_style.clone()).or_default(),
        ]
    }

    /// One row per group and part: the confusion table (truth covered,
    /// related, none, each as said covered/related/none), the section's hit,
    /// and the rates, each as found/of.
    pub fn text(&self) -> String {
        let mut o = String::new();
        let _ = writeln!(
            o,
            "per writer and kind style: truth covered/related/none, each said c/r/n; rates found/of"
        );
        let _ = writeln!(
            o,
            "  {:<34} {:<8} {:>5}  {:<11} {:<11} {:<11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "group",
            "part",
            "cases",
            "covered",
            "related",
            "none",
            "hit@1",
            "hit@3",
            "plantcode",
            "PLANT-n",
            "uncov ok",
            "elsewhere",
            "cause"
        );
        let groups = self
            .by_writer
            .iter()
            .map(|(k, g)| (format!("writer {k}"), g))
            .chain(
                self.by_kind_style
                    .iter()
                    .map(|(k, g)| (format!("kind_style {k}"), g)),
            );
        for (name, g) in groups {
            for (part, f) in [("tuning", &g.tuning), ("held-out", &g.held_out)] {
                if f.tally.cases == 0 {
                    continue;
                }
                let t = &f.tally;
                let row =
                    |i: usize| format!("{}/{}/{}", t.table[i][0], t.table[i][1], t.table[i][2]);
                let of = |a: usize, b: usize| format!("{a}/{b}");
                let _ = writeln!(
                    o,
                    "  {:<34} {:<8} {:>5}  {:<11} {:<11} {:<11} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9}",
                    name,
                    part,
                    t.cases,
                    row(0),
                    row(1),
                    row(2),
                    of(f.hit_at_1, f.with_gold),
                    of(f.hit_at_3, f.with_gold),
                    of(t.plant_code_covered, t.plant_code),
                    of(f.under_plant_codes_covered, f.under_plant_codes),
                    of(t.uncovered_ok, t.uncovered),
                    f.elsewhere,
                    of(f.cause_named, f.cause_read)
                );
            }
        }
        o
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
            writer: "w".into(),
            kind_style: "class".into(),
            gold: None,
            cause: None,
            rule: None,
            equipment: None,
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
            .tally
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
    fn a_held_out_miss_is_counted_but_never_named() {
        use Coverage::*;
        let mut held = j(Covered, Related, true, true, false);
        held.case = "held-7".into();
        let mut elsewhere = j(Covered, Covered, true, true, false);
        elsewhere.case = "held-8".into();
        elsewhere.elsewhere = true;
        let mut tuning = j(Covered, Related, false, true, false);
        tuning.case = "tune-3".into();
        let r = CoverageReport::of(&[held, elsewhere, tuning]);
        assert_eq!(r.held_out.tally.table[0], [1, 1, 0]);
        assert_eq!((r.held_out.unnamed, r.held_out.elsewhere_count), (2, 1));
        assert!(r.held_out.misjudged.is_empty() && r.held_out.elsewhere.is_empty());
        let text = r.text();
        assert!(text.contains("misjudged tune-3"), "{text}");
        assert!(
            !text.contains("held-7") && !text.contains("held-8"),
            "{text}"
        );
        assert!(
            text.contains("said covered by another fault's section: 1"),
            "{text}"
        );
        assert!(text.contains("covered elsewhere: 2, not named"), "{text}");
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
        let t = &r.tuning.tally;
        assert_eq!(t.cases, 6);
        assert_eq!(t.table, [[2, 1, 0], [0, 2, 0], [1, 0, 0]]);
        assert_eq!((t.uncovered_ok, t.uncovered), (1, 3));
        assert_eq!((t.plant_code_covered, t.plant_code), (1, 2));
        assert_eq!((t.covered_said_covered, t.covered), (2, 3));
        assert_eq!(r.tuning.misjudged.len(), 2);
        let h = &r.held_out.tally;
        assert_eq!(r.held_out.unnamed, 0);
        assert_eq!(h.table, [[0, 0, 0], [0, 0, 0], [0, 0, 1]]);
        assert_eq!((h.uncovered_ok, h.uncovered), (1, 1));
        assert!(r
            .text()
            .contains("uncovered answered related/none, no cause high: 1/3"));
    }

    /// Every figure per writer and per kind style, tuning and held out
    /// apart; the JSON of a part keeps its flat fields.
    #[test]
    fn figures_are_split_per_writer_and_kind_style_and_part() {
        use Coverage::*;
        let mut a = j(Covered, Covered, false, true, false);
        a.gold = Some(Some(0));
        a.cause = Some(true);
        let mut b = j(Covered, Related, true, true, false);
        b.writer = "watch-log".into();
        b.kind_style = "chinese".into();
        b.gold = Some(Some(2));
        b.cause = Some(false);
        let mut c = j(Related, None, true, false, false);
        c.writer = "watch-log".into();
        c.kind_style = "absent".into();
        let mut plant = b.clone();
        plant.said = Covered;
        let r = Breakdown::of(&[a, b, c], &[plant]);
        let w = &r.by_writer["watch-log"];
        assert_eq!(w.tuning, Figures::default());
        let h = &w.held_out;
        assert_eq!(h.tally.cases, 2);
        assert_eq!(h.tally.table, [[0, 1, 0], [0, 0, 1], [0, 0, 0]]);
        assert_eq!((h.hit_at_1, h.hit_at_3, h.with_gold), (0, 1, 1));
        assert_eq!((h.under_plant_codes_covered, h.under_plant_codes), (1, 1));
        assert_eq!((h.cause_named, h.cause_read), (0, 1));
        assert_eq!((h.tally.uncovered_ok, h.tally.uncovered), (1, 1));
        let t = &r.by_writer["w"].tuning;
        assert_eq!(
            (t.hit_at_1, t.cause_named, t.tally.plant_code_covered),
            (1, 1, 1)
        );
        assert_eq!(r.by_kind_style["chinese"].held_out.tally.cases, 1);
        assert_eq!(r.by_kind_style["absent"].held_out.tally.uncovered, 1);
        let text = r.text();
        assert!(text.contains("writer watch-log"), "{text}");
        assert!(text.contains("kind_style chinese"), "{text}");
        let v = serde_json::to_value(&r).unwrap();
        assert_eq!(v["by_writer"]["watch-log"]["held_out"]["hit_at_3"], 1);
        assert_eq!(v["by_writer"]["watch-log"]["held_out"]["cases"], 2);
        let part = serde_json::to_value(CoverageReport::default()).unwrap();
        assert!(part["tuning"]["uncovered_ok"].is_number(), "{part}");
    }
}
