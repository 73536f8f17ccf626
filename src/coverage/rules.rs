//! The coverage judgement as an ordered table of rules (`RULES`): each piece
//! of evidence for a coverage and each veto that stops one is a named
//! function with its threshold beside it, and `judge` walks the table, first
//! rule first, returning the first verdict no veto of its rule stops, with
//! the rule's name.
//!
//! Owns the order of the paths and which veto stops which; the facts every
//! rule reads (`Ground`: the alarm's one `Reading`, its passages, its
//! equipment, its examples) are computed once per judgement, lazily.

use std::cell::OnceCell;

use crate::alarm::Alarm;
use crate::reading::{Deviation, Medium, Quantity};
use crate::retrieval::Hit;

use super::examples::{self, Nearest};
use super::named::named;
use super::ranking::{ahead, AHEAD_AT, SCORE_AT};
use super::terms::text_terms;
use super::{own_alarm, Coverage, Equipment, Judgement, Likeness, Reading, SiteCover};

/// One piece of evidence: what it looks for (`decide`, None when it finds
/// nothing) and the vetoes that stop it, in the order they are asked.
/// When one holds, the next rule of the table speaks.
pub struct Rule {
    /// A stable name: the journal logs it, the eval counts it.
    pub name: &'static str,
    decide: for<'a, 'g> fn(&'g Ground<'a>) -> Option<Verdict<'a>>,
    pub vetoes: &'static [Veto],
}

/// Evidence that stops a rule's verdict.
pub struct Veto {
    pub name: &'static str,
    holds: fn(&Ground) -> bool,
}

/// The rules, in the order they speak. The last always decides.
pub const RULES: &[Rule] = &[
    Rule {
        name: "own_code",
        decide: own_code,
        vetoes: &[],
    },
    Rule {
        name: "site_note",
        decide: site_note,
        vetoes: &[],
    },
    Rule {
        name: "ranked",
        decide: ranked,
        vetoes: &[SHARE_DECIDES, UNCOVERED_EXAMPLE_NEARER],
    },
    Rule {
        name: "named",
        decide: named_in_full,
        vetoes: &[SHARE_DECIDES, UNCOVERED_EXAMPLE_NEARER],
    },
    Rule {
        name: "example",
        decide: example,
        vetoes: &[SHARE_DECIDES],
    },
    Rule {
        name: "example_unnamed",
        decide: example_unnamed,
        vetoes: &[SHARE_DECIDES],
    },
    Rule {
        name: "whole",
        decide: whole,
        vetoes: &[],
    },
    Rule {
        name: "word_share",
        decide: word_share,
        vetoes: &[UNCOVERED_EXAMPLE_NEARER],
    },
    Rule {
        name: "related",
        decide: related,
        vetoes: &[],
    },
    Rule {
        name: "nothing_found",
        decide: nothing_found,
        vetoes: &[],
    },
];

/// The message's words already hold `COVERED_AT` of a section's own alarm
/// text: the word share decides (`whole`, `word_share`), and neither the
/// ranking, a name nor an example speaks over it.
pub const SHARE_DECIDES: Veto = Veto {
    name: "share_decides",
    holds: share_decides,
};

/// Other plants' wordings of a fault the manuals do not cover, near this
/// message and nearer than any covered one (`examples::UNLIKE_AT`,
/// `examples::UNLIKE_LEAD`): words and ranking that say covered are taken
/// in by a neighbouring fault.
pub const UNCOVERED_EXAMPLE_NEARER: Veto = Veto {
    name: "uncovered_example_nearer",
    holds: uncovered_example_nearer,
};

/// Judges the facts `g` by the table: the first rule that finds evidence
/// and that no veto of its own stops decides.
pub(super) fn judge(g: &Ground) -> Judgement {
    for rule in RULES {
        let Some(v) = (rule.decide)(g) else {
            continue;
        };
        if rule.vetoes.iter().any(|veto| (veto.holds)(g)) {
            continue;
        }
        return v.judgement(rule.name);
    }
    // The last rule always decides; this is its verdict.
    let last = &RULES[RULES.len() - 1];
    let v = nothing_found(g).unwrap_or(Verdict {
        coverage: Coverage::None,
        best: 0.0,
        section: None,
        note: None,
    });
    v.judgement(last.name)
}

/// What a rule says: a coverage, the best word share and the section.
pub(super) struct Verdict<'a> {
    coverage: Coverage,
    best: f32,
    section: Option<&'a Hit>,
    /// The site note it rests on.
    note: Option<&'a str>,
}

impl Verdict<'_> {
    fn judgement(self, rule: &'static str) -> Judgement {
        Judgement {
            coverage: self.coverage,
            best: self.best,
            section: self.section.map(Hit::reference),
            rule,
            note: self.note.map(str::to_string),
        }
    }
}

/// The best share of the message that one of its equipment's causes
/// sections holds (its own alarm, its code's words and its manual's
/// title), that section, and the best share any passage holds (of its
/// manual's title for passages without an own alarm).
#[derive(Clone, Copy)]
struct Share<'a> {
    best: f32,
    at: Option<&'a Hit>,
    near: f32,
}

/// What every rule reads, computed once per judgement and only when a rule
/// asks: the alarm's `Reading`, the word share, the examples' veto.
pub(super) struct Ground<'a> {
    alarm: &'a Alarm,
    hits: &'a [Hit],
    equipment: Equipment<'a>,
    /// The alarm's equipment as manual classes (`retrieval::kinds`), what
    /// the examples are read of.
    classes: &'a [String],
    /// The equipment's causes sections.
    sections: &'a [Hit],
    likeness: Option<Likeness<'a>>,
    /// A confirmed site note about the fault, and its item's section.
    site: Option<&'a SiteCover>,
    reading: OnceCell<Reading>,
    share: OnceCell<Share<'a>>,
    unlike: OnceCell<bool>,
}

impl<'a> Ground<'a> {
    pub(super) fn new(
        alarm: &'a Alarm,
        hits: &'a [Hit],
        equipment: Equipment<'a>,
        classes: &'a [String],
        sections: &'a [Hit],
        likeness: Option<Likeness<'a>>,
        site: Option<&'a SiteCover>,
    ) -> Self {
        Ground {
            alarm,
            hits,
            equipment,
            classes,
            sections,
            likeness,
            site,
            reading: OnceCell::new(),
            share: OnceCell::new(),
            unlike: OnceCell::new(),
        }
    }

    fn reading(&self) -> &Reading {
        self.reading
            .get_or_init(|| Reading::of(self.alarm, self.sections))
    }

    fn known(&self) -> bool {
        matches!(self.equipment, Equipment::Known(_))
    }

    /// Whether `h` may be the alarm's fault's section: of its equipment's
    /// manuals (any, when the equipment is not known) and not another
    /// fault's (`other_fault`).
    fn mine(&self, h: &Hit) -> bool {
        !other_fault(self.reading(), h)
            && match self.equipment {
                Equipment::Known(docs) => docs.contains(&h.doc),
                Equipment::Unknown | Equipment::Unlisted => true,
            }
    }

    fn share(&self) -> Share<'a> {
        *self.share.get_or_init(|| {
            let terms = &self.reading().terms;
            let mut s = Share {
                best: 0.0,
                at: None,
                near: 0.0,
            };
            for h in self.hits {
                let Some(lead) = own_alarm(h) else {
                    s.near = s.near.max(terms.share(&text_terms(&h.title)));
                    continue;
                };
                let code = h.section.code().replace(['-', '_'], " ");
                let said = text_terms(&format!("{lead} {code} {}", h.title));
                let share = terms.share(&said);
                s.near = s.near.max(share);
                if self.mine(h) && share > s.best {
                    s.best = share;
                    s.at = Some(h);
                }
            }
            s
        })
    }

    /// A verdict of `coverage` at `section`, with the word share's best.
    fn verdict(&self, coverage: Coverage, section: Option<&'a Hit>) -> Verdict<'a> {
        Verdict {
            coverage,
            best: self.share().best,
            section,
            note: None,
        }
    }
}

/// A section for the other way, for another quantity its own alarm does not
/// name, or for another medium of the same machine (its sea water pump,
/// against the jacket water's pressure), is not this alarm's, however alike
/// the rest of its words. Nor is a leak detector's for a reading in a unit
/// of one quantity, unless the message says something leaks.
fn other_fault(r: &Reading, h: &Hit) -> bool {
    let code = h.section.code();
    let lead = own_alarm(h).unwrap_or("");
    matches!((r.way, Deviation::of_code(code)), (Some(a), Some(b)) if a != b)
        || matches!((r.quantity, Quantity::of_code(code)),
            (Some(a), Some(b)) if a != b && !Quantity::named_in(lead).contains(&a))
        || matches!((r.medium, Medium::of_code(code)), (Some(a), Some(b)) if a != b)
        || (leak_code(code) && r.unit_quantity.is_some() && !says_leak(&r.faulty))
}

/// Whether a section's code is a leak detector's (`ME-FO-LEAK-HI`,
/// `HULL-LEAK`).
pub(super) fn leak_code(code: &str) -> bool {
    code.split(['-', '_'])
        .any(|p| p.eq_ignore_ascii_case("LEAK"))
}

/// Whether a message says something leaks (`leak`, `leakage`, `漏`).
pub(super) fn says_leak(message: &str) -> bool {
    message.to_ascii_lowercase().contains("leak") || message.contains('漏')
}
/// A section under the alarm's own code (whatever its case) covers it.
fn own_code<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    g.hits
        .iter()
        .find(|h| h.section.code().eq_ignore_ascii_case(g.alarm.code.trim()))
        .map(|h| Verdict {
            coverage: Coverage::Covered,
            best: 1.0,
            section: Some(h),
            note: None,
        })
}

/// The crew confirmed a manual item as the cause of this fault on this
/// equipment (`site::about`: the same code, or words `site::NOTE_NEAR_AT`
/// alike): its section covers the alarm, unless the alarm's reading says
/// the section is another fault's (`other_fault`).
fn site_note<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    let s = g.site.filter(|s| !other_fault(g.reading(), &s.section))?;
    Some(Verdict {
        note: Some(s.note.as_str()),
        ..g.verdict(Coverage::Covered, Some(&s.section))
    })
}

/// Retrieval's own confidence, for a message in the plant's own words: the
/// equipment's best causes section scored at least `SCORE_AT`, ahead of
/// any other fault's by `AHEAD_AT` of its score.
fn ranked<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    if !g.known() {
        return None;
    }
    let (h, _) = ahead(g.hits, &|h| g.mine(h))
        .filter(|&(h, margin)| h.score >= SCORE_AT && margin >= AHEAD_AT)?;
    Some(g.verdict(Coverage::Covered, Some(h)))
}

/// The message naming one of its equipment's sections' alarms in full
/// (`named`, `NAMED_AT`), read in what was not found fine only.
fn named_in_full<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    let r = g.reading();
    let h = named(
        &r.message,
        &r.faulty_said,
        g.sections,
        g.hits,
        &r.alarms,
        &|h| !other_fault(r, h) && g.known(),
    )?;
    Some(g.verdict(Coverage::Covered, Some(h)))
}

/// Another plant's wording of the fault, near this one and nearer than any
/// of a fault the manuals do not cover (`example_vouches`): the section of
/// its code, in the message's script when the equipment has one.
fn example<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    let like = g.likeness.filter(|_| g.known())?;
    if g.classes.is_empty() {
        return None;
    }
    let r = g.reading();
    let first = g
        .hits
        .iter()
        .find(|h| own_alarm(h).is_some() && g.mine(h))
        .map(|h| h.section.code());
    let near = like
        .examples
        .nearest_beside(g.classes, &r.message, first)
        .filter(|n| example_vouches(g, r, n, first))?;
    let h = in_script(g.sections.iter(), &near.section, r)?;
    Some(g.verdict(Coverage::Covered, Some(h)))
}

/// The section of `code` among `candidates` that is not another fault's
/// (`other_fault`), in the message's script when there is one in it.
fn in_script<'a>(
    candidates: impl Iterator<Item = &'a Hit> + Clone,
    code: &str,
    r: &Reading,
) -> Option<&'a Hit> {
    let zh = crate::language::has_cjk(&r.message);
    let of_code = |h: &&Hit| h.section.code() == code && !other_fault(r, h);
    let lang = |h: &&Hit| own_alarm(h).is_some_and(|l| crate::language::has_cjk(l) == zh);
    candidates
        .clone()
        .filter(of_code)
        .find(lang)
        .or_else(|| candidates.clone().find(of_code))
}

/// The nearest covered example of any equipment's at which it speaks for
/// an alarm whose text names no manual's equipment, and how far ahead of
/// the nearest uncovered one of any equipment it must be: a maker's panel
/// text (`FAULT LOOP 2 OPEN CIRCUIT`) names no machine, but other plants
/// word the same fault alike.
pub const UNNAMED_NEAR_AT: f32 = 0.55;
pub const UNNAMED_LEAD_AT: f32 = 0.1;

/// For a message that names no manual's equipment: the nearest covered
/// example of all (`UNNAMED_NEAR_AT`, `UNNAMED_LEAD_AT` ahead of every
/// uncovered one), when retrieval found a section of its code as well,
/// two witnesses that read different things: that section, in the
/// message's script when retrieval found both.
fn example_unnamed<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    if !matches!(g.equipment, Equipment::Unknown) {
        return None;
    }
    let like = g.likeness?;
    let r = g.reading();
    let near = like
        .examples
        .nearest_of_all(&r.message)
        .filter(|n| n.similarity >= UNNAMED_NEAR_AT && n.lead >= UNNAMED_LEAD_AT)?;
    let found = g.hits.iter().filter(|h| own_alarm(h).is_some());
    let h = in_script(found, &near.section, r)?;
    Some(g.verdict(Coverage::Covered, Some(h)))
}

/// Whether the nearest covered example `n` is near enough to speak: at
/// `examples::NEAR_AT` and `examples::LEAD_AT` ahead of any uncovered one;
/// or `examples::AGREED_LEAD_AT` ahead and affirming the way or quantity
/// its code says (`affirms`), and either naming the section retrieval ranks
/// first (`first`, in the pipeline's order) at `examples::AGREED_AT`, or
/// another of the alarm's own sections retrieval found (its causes or its
/// checks: a watch log that says what was seen and tried,
/// `离锚位820m，超出500m警戒圈`, may read like what to check) at
/// `examples::RANKED_AT`, `examples::OVER_FIRST_AT` nearer than any
/// wording of the first.
fn example_vouches(g: &Ground, r: &Reading, n: &Nearest, first: Option<&str>) -> bool {
    let found = |code: &str| g.hits.iter().any(|h| g.mine(h) && h.section.code() == code);
    let agreed = first == Some(n.section.as_str());
    let ranked = || {
        n.similarity >= examples::RANKED_AT
            && found(&n.section)
            // No causes section of the equipment found: retrieval picked
            // none to overrule.
            && (first.is_none() || n.similarity - n.rival >= examples::OVER_FIRST_AT)
    };
    (n.similarity >= examples::NEAR_AT && n.lead >= examples::LEAD_AT)
        || (n.lead >= examples::AGREED_LEAD_AT
            && affirms(&n.section, r.way, r.quantity)
            && ((agreed && n.similarity >= examples::AGREED_AT) || (!agreed && ranked())))
}

/// Whether a message says what a section's code says of its fault: the
/// code's way (`LO`) or its quantity (`PRES`), when it names either. A less
/// near example is trusted with retrieval only then: `压载泵启动失败` shares
/// the pump's words with another plant's `2号压载泵压力低`, and retrieval
/// ranks the pump's pressure section first, but it says neither pressure nor
/// low (an uncovered fault).
pub(super) fn affirms(code: &str, way: Option<Deviation>, quantity: Option<Quantity>) -> bool {
    let (w, q) = (Deviation::of_code(code), Quantity::of_code(code));
    (w.is_none() && q.is_none()) || (w.is_some() && w == way) || (q.is_some() && q == quantity)
}

/// A section's own alarm text holding this share of the message (its
/// words and Chinese characters, each weighed by how little it names the
/// equipment, `Terms::weighted`) is about the alarm's fault. Set on the
/// eval set's tuning part (docs/coverage.md) with the ranking rule below:
/// from 0.58 to 0.6 it keeps 53 of 55 uncovered faults from being taken
/// for covered and takes 40 of 52 covered ones raised under plant codes;
/// at 0.55 a DO sensor's drift (溶解氧传感器读数漂移) passes for the
/// optode's error; at 0.66, 5 covered ones fail.
/// An uncovered fault taken for covered is the confident wrong answer
/// coverage exists to stop.
pub const COVERED_AT: f32 = 0.6;

/// A message that names no manual's equipment shares with a section only
/// the fault's words (`WATER LVL HIGH`, `OUT OF RANGE`), which many
/// machines' sections hold: it is that section's fault only when it says
/// nearly all of what the section's own alarm text says.
pub const UNNAMED_COVERED_AT: f32 = 0.8;

/// A message holding all of a section's own alarm text (every term the
/// share counts) is covered by it whatever the examples say.
pub const WHOLE_AT: f32 = 1.0;

/// The word share a section must reach to cover the alarm: `COVERED_AT` of
/// a known equipment's, `UNNAMED_COVERED_AT` when the text names no
/// manual's equipment, never for an equipment no manual is for.
fn covered_at(equipment: Equipment) -> f32 {
    match equipment {
        Equipment::Known(_) => COVERED_AT,
        Equipment::Unknown => UNNAMED_COVERED_AT,
        Equipment::Unlisted => f32::INFINITY,
    }
}

/// The message holds all of a section's own alarm text (`WHOLE_AT`) at a
/// share that covers: no example speaks against it, since examples written
/// in one plant's words are near another's by chance.
fn whole<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    let s = g.share();
    (s.best >= covered_at(g.equipment) && s.best >= WHOLE_AT)
        .then(|| g.verdict(Coverage::Covered, s.at))
}

/// A section's own alarm text holds `covered_at` of the message's weighed
/// terms.
fn word_share<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    let s = g.share();
    (s.best >= covered_at(g.equipment)).then(|| g.verdict(Coverage::Covered, s.at))
}

/// For an equipment the text says no manual is for, passages holding this
/// share of the message's terms (their alarm text or their manual's title)
/// are related; under it nothing relevant was found. Alarms on equipment without a manual scored
/// 0.25 at most on the tuning part; a pump of a manual's equipment that
/// will not start, 0.33.
pub const RELATED_AT: f32 = 0.3;

/// Whether retrieval found anything of the alarm's equipment, so that the
/// model answers from it; `none` (answered without the model) only when it
/// did not. Of a manual's equipment it found that manual's sections or
/// others': the model judges them. Of an equipment the text does not name,
/// whatever it found may be of it: a score or a word share tells nothing
/// here (a watch log in the plant's words scores as low as an unrelated
/// machine's alarm), so only finding nothing is nothing. Of an equipment
/// the text says no manual is for, only passages holding `RELATED_AT` of
/// its words are of it.
pub(super) fn found_of_equipment(equipment: Equipment, hits: &[Hit], near: f32) -> bool {
    match equipment {
        Equipment::Known(_) => true,
        Equipment::Unknown => !hits.is_empty(),
        Equipment::Unlisted => near >= RELATED_AT,
    }
}

/// Nothing covers the fault, but retrieval found something of the alarm's
/// equipment (`found_of_equipment`): the model answers from it.
fn related<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    let s = g.share();
    found_of_equipment(g.equipment, g.hits, s.near).then(|| g.verdict(Coverage::Related, s.at))
}

/// Nothing relevant was found.
fn nothing_found<'a>(g: &Ground<'a>) -> Option<Verdict<'a>> {
    Some(g.verdict(Coverage::None, g.share().at))
}

fn share_decides(g: &Ground) -> bool {
    g.share().best >= COVERED_AT
}

fn uncovered_example_nearer(g: &Ground) -> bool {
    *g.unlike.get_or_init(|| {
        let Some(like) = g.likeness.filter(|_| g.known()) else {
            return false;
        };
        if g.classes.is_empty() {
            return false;
        }
        like.examples
            .nearest_any(g.classes, &g.reading().message, None)
            .is_some_and(|n| {
                n.uncovered >= examples::UNLIKE_AT
                    && n.uncovered - n.similarity >= examples::UNLIKE_LEAD
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarm::Alarm;
    use crate::coverage::fixtures::lube_oil;
    use crate::coverage::fixtures::*;
    use crate::coverage::fixtures::{example, ranked};
    use crate::coverage::{
        examples, judge, judge_like, judge_with, Coverage, Equipment, Examples, Likeness,
    };
    use crate::reading::*;
    use crate::retrieval::Hit;

    /// A maker's panel text that names no machine is covered by the
    /// section of another plant's alike wording when retrieval found that
    /// section too; not when the example is of a fault no manual covers,
    /// nor when retrieval found only other sections.
    #[test]
    fn an_unnamed_machines_alarm_is_covered_by_an_alike_example_that_retrieval_agrees_with() {
        let (hits, _) = purifier();
        let a = alarm(
            "ALM 12",
            "A12 NO DISCHARGE speed drop not detected after sludge cycle",
        );
        let rows = |section: Option<&str>| {
            vec![
                example(
                    "10",
                    "purifier",
                    "NO DISCHARGE: no speed drop after sludge cycle, retry",
                    section,
                ),
                example(
                    "11",
                    "purifier",
                    "bowl seal water lost, oil at sludge outlet",
                    None,
                ),
            ]
        };
        let judged = |ex: &Examples, hits: &[Hit]| {
            crate::coverage::judge_like_in(
                &a,
                hits,
                Equipment::Unknown,
                &[],
                &[],
                Some(Likeness { examples: ex }),
                None,
            )
        };
        let covered = Examples::of(rows(Some("PUR-DISCH-FAIL")));
        let n = covered
            .nearest_of_all(a.message.as_deref().unwrap())
            .unwrap();
        assert!(
            n.similarity >= UNNAMED_NEAR_AT && n.lead >= UNNAMED_LEAD_AT,
            "{n:?}"
        );
        let j = judged(&covered, &hits);
        assert_eq!(
            (j.coverage, j.rule),
            (Coverage::Covered, "example_unnamed"),
            "{j:?}"
        );
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("purifier-en § PUR-DISCH-FAIL causes")
        );
        // The same wording labelled as a fault no section is about.
        let uncovered = Examples::of(rows(None));
        assert_ne!(judged(&uncovered, &hits).coverage, Coverage::Covered);
        // Retrieval found only the oil loss section.
        let j = judged(&covered, &hits[1..]);
        assert_ne!(j.rule, "example_unnamed", "{j:?}");
        // A known equipment is the `example` rule's.
        let d = docs(&["purifier-en"]);
        let j = crate::coverage::judge_like_in(
            &a,
            &hits,
            Equipment::Known(&d),
            &["purifier".into()],
            &hits,
            Some(Likeness { examples: &covered }),
            None,
        );
        assert_ne!(j.rule, "example_unnamed", "{j:?}");
    }

    /// A plant's wording that neither words nor ranking take for the
    /// valve's fault is covered once the crew confirmed the valve's item
    /// for it, naming the note; a reading that says another way is not.
    #[test]
    fn a_confirmed_site_note_covers_its_fault_by_its_section_and_names_itself() {
        let d = docs(&["ballast-en", "ballast-zh"]);
        let hits = ballast();
        let a = alarm("AL-77", "BV12 no feedback after command");
        let without =
            crate::coverage::judge_like_in(&a, &hits, Equipment::Known(&d), &[], &hits, None, None);
        assert_ne!(without.coverage, Coverage::Covered, "{without:?}");
        let cover = SiteCover {
            note: "here:a1:t".into(),
            section: hits[1].clone(),
        };
        let j = crate::coverage::judge_like_in(
            &a,
            &hits,
            Equipment::Known(&d),
            &[],
            &hits,
            None,
            Some(&cover),
        );
        assert_eq!(
            (j.coverage, j.rule),
            (Coverage::Covered, "site_note"),
            "{j:?}"
        );
        assert_eq!(j.note.as_deref(), Some("here:a1:t"));
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("ballast-en § BAL-VLV-FAIL causes")
        );
        // The pump's low pressure section, for an alarm that says high.
        let pump = SiteCover {
            note: "n".into(),
            section: hits[0].clone(),
        };
        let high = alarm("AL-78", "ballast pump discharge pressure high");
        let j = crate::coverage::judge_like_in(
            &high,
            &hits,
            Equipment::Known(&d),
            &[],
            &hits,
            None,
            Some(&pump),
        );
        assert_ne!(j.rule, "site_note", "{j:?}");
        assert_eq!(j.note, None);
    }

    #[test]
    fn the_table_names_each_rule_once_and_ends_with_one_that_always_decides() {
        let mut names: Vec<&str> = RULES.iter().map(|r| r.name).collect();
        assert_eq!(names.last(), Some(&"nothing_found"));
        assert!(RULES.last().unwrap().vetoes.is_empty());
        names.sort();
        names.dedup();
        assert_eq!(names.len(), RULES.len());
    }

    #[test]
    fn only_the_word_share_stops_the_example_and_the_whole_message_is_never_vetoed() {
        let vetoes = |name: &str| -> Vec<&str> {
            RULES
                .iter()
                .find(|r| r.name == name)
                .unwrap()
                .vetoes
                .iter()
                .map(|v| v.name)
                .collect()
        };
        assert_eq!(vetoes("example"), ["share_decides"]);
        assert!(vetoes("whole").is_empty());
        assert_eq!(vetoes("word_share"), ["uncovered_example_nearer"]);
    }

    #[test]
    fn a_reading_over_its_threshold_is_not_the_low_section() {
        use Deviation::*;
        // `low fire` is the burner's firing rate; the level is over its
        // threshold and rising.
        assert_eq!(Deviation::of_message("burner on low fire"), None);
        assert_eq!(Deviation::of_message("燃烧器低火运行"), None);
        let reading = |v: f64, t: f64| Alarm {
            value: Some(v),
            threshold: Some(t),
            ..alarm("X", "x")
        };
        assert_eq!(Deviation::of_reading(&reading(85.0, 75.0)), Some(High));
        assert_eq!(Deviation::of_reading(&reading(9.0, 14.0)), Some(Low));
        // A vacuum's -78 kPa over -85 is a low vacuum: no way is read.
        assert_eq!(Deviation::of_reading(&reading(-78.0, -85.0)), None);
        let doc = "boiler-en";
        let hits = ranked(
            doc,
            &[
                (
                    "BLR-WL-LO",
                    "Auxiliary boiler water level low (low water level, low-low level trip).",
                ),
                (
                    "BLR-FLAME-FAIL",
                    "Auxiliary boiler flame failure (burner trip, flame out, no flame).",
                ),
                (
                    "BLR-STM-PRES-HI",
                    "Auxiliary boiler steam pressure high (steam press high).",
                ),
            ],
        );
        let d = docs(&[doc]);
        let a = Alarm {
            value: Some(85.0),
            threshold: Some(75.0),
            unit: Some("%".into()),
            ..alarm(
                "LT-3310",
                "Aux boiler gauge glass full, level transmitter 85%, feed pump running continuously, burner on low fire",
            )
        };
        let j = judge_with(&a, &hits, Equipment::Known(&d), &hits);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // The same words with the level under its threshold are the section's.
        let a = Alarm {
            value: Some(30.0),
            threshold: Some(40.0),
            ..a
        };
        let j = judge_with(&a, &hits, Equipment::Known(&d), &hits);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
    }

    #[test]
    fn a_section_for_another_quantity_its_alarm_does_not_name_does_not_cover() {
        use Quantity::*;
        assert_eq!(Quantity::of_code("ME-FO-VISC-ABN"), Some(Viscosity));
        assert_eq!(Quantity::of_code("DG-FREQ-LO"), Some(Speed));
        assert_eq!(Quantity::of_unit("cSt"), Some(Viscosity));
        assert_eq!(
            Quantity::named_in("Main switchboard bus voltage or frequency abnormal"),
            vec![Speed, Voltage]
        );
        // `高温淡水` names the jacket water's circuit, not a temperature.
        assert_eq!(
            Quantity::named_in("主机缸套水（高温淡水）进机压力低，水泵压力低。"),
            vec![Pressure]
        );
        let doc = "main_engine_fuel-en";
        let hits = ranked(
            doc,
            &[
                ("ME-FO-VISC-ABN", "Main engine fuel oil viscosity abnormal at engine inlet (visco high or low, viscosity controller alarm)."),
                ("ME-FO-PRES-LO", "Main engine fuel oil inlet pressure low (FO press low, booster or circulating pressure low)."),
            ],
        );
        let d = docs(&[doc]);
        let j = judge_with(
            &alarm("PT-2201", "ME FO INLET PRESS HIGH"),
            &hits,
            Equipment::Known(&d),
            &hits,
        );
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // A section whose own alarm names the quantity is not vetoed by its
        // code's: the bus's frequency is in SWB-BUS-VOLT-ABN.
        let doc = "switchboard-en";
        let hits = ranked(
            doc,
            &[
                ("SWB-BUS-VOLT-ABN", "Main switchboard bus voltage or frequency abnormal (bus volt high or low, bus frequency out of range)."),
                ("SWB-BLACKOUT", "Blackout, loss of main power (main bus dead, dead ship)."),
                ("SWB-INSUL-LO", "Main switchboard insulation low or earth fault on the 440 V or 230 V system (earth fault, IR low)."),
            ],
        );
        let d = docs(&[doc]);
        let a = Alarm {
            unit: Some("Hz".into()),
            value: Some(62.5),
            threshold: Some(61.8),
            ..alarm("SI-0412", "MSB bus frequency high 62.5 Hz")
        };
        let j = judge_with(&a, &hits, Equipment::Known(&d), &hits);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
    }

    #[test]
    fn a_section_for_another_medium_of_the_machine_does_not_cover() {
        use Medium::*;
        assert_eq!(Medium::of_code("ME-JCW-PRES-LO"), Some(JacketWater));
        assert_eq!(Medium::of_code("DG-LO-PRES-LO"), Some(LubeOil));
        assert_eq!(Medium::of_code("ME-FO-PRES-LO"), Some(FuelOil));
        assert_eq!(Medium::of_code("BLR-WL-LO"), None);
        assert_eq!(Medium::of_message("主海水泵出口压力低"), Some(SeaWater));
        // Two media named: none is read.
        assert_eq!(Medium::of_message("HT water 84 degC, SW 28 degC"), None);
        let doc = "main_engine_cooling-en";
        let hits = ranked(
            doc,
            &[
                ("ME-JCW-PRES-LO", "Jacket water inlet pressure low (JCW press low, HT pump pressure low)."),
                ("ME-JCW-TEMP-HI", "Main engine jacket cooling water (JCW, HT fresh water) outlet temperature high."),
                ("ME-JCW-LVL-LO", "Jacket water expansion tank level low (JCW exp tank low level, HT water make-up)."),
            ],
        );
        let d = docs(&[doc]);
        let j = judge_with(
            &alarm("PT-1131", "ME SW COOLING PUMP No.1 DISCH PRESS LOW"),
            &hits,
            Equipment::Known(&d),
            &hits,
        );
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        let j = judge_with(
            &alarm("PT-1132", "ME JCW PUMP DISCH PRESS LOW"),
            &hits,
            Equipment::Known(&d),
            &hits,
        );
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
    }

    #[test]
    fn lo_before_a_word_is_lube_oil_not_low() {
        use Deviation::*;
        assert_eq!(Deviation::of_message("ME LO autofilter dP 1.1 bar"), None);
        assert_eq!(
            Deviation::of_message("ME LO AUTO FLTR dP 1.4 BAR HI"),
            Some(High)
        );
        assert_eq!(Deviation::of_message("ME FO INLET P LO 5.2 BAR"), Some(Low));
        assert_eq!(Deviation::of_message("GEN LO PRESS LO"), Some(Low));
        assert_eq!(Deviation::of_message("SWB IR LO ALARM"), Some(Low));
        // So a lube oil filter's dP is not taken for a low, and its section
        // for the other way: it was vetoed.
        let d = docs(&["main_engine_lube_oil-en"]);
        let a = alarm(
            "PDT-2203",
            "ME LO filter dP 1.1 bar, flush counter unchanged last 6 h",
        );
        let j = judge_with(&a, &lube_oil(), Equipment::Known(&d), &lube_oil());
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("main_engine_lube_oil-en § ME-LO-FILT-DP-HI causes")
        );
    }

    #[test]
    fn a_section_for_the_opposite_deviation_does_not_cover_the_alarm() {
        let boiler = || {
            vec![causes(
                "boiler-zh",
                "BLR-WL-LO",
                "锅炉水位低（汽包水位低、低水位）。可能原因：1）给水泵故障；2）给水阀卡住。",
            )]
        };
        let d = docs(&["boiler-zh"]);
        // An uncovered fault: high-high water level took the low-level
        // section's causes (retrieval ranked it far ahead).
        let high = judge(
            &alarm("B-1", "辅锅炉汽包水位高高"),
            &boiler(),
            Equipment::Known(&d),
        );
        assert_eq!(high.coverage, Coverage::Related, "{high:?}");
        let low = judge(
            &alarm("B-1", "辅锅炉汽包水位过低"),
            &boiler(),
            Equipment::Known(&d),
        );
        assert_eq!(low.coverage, Coverage::Covered, "{low:?}");
        // 高温/低压 name a circuit, not a deviation; both ways is no veto.
        assert_eq!(
            Deviation::of_message("主机高温淡水进机压力低"),
            Some(Deviation::Low)
        );
        assert_eq!(
            Deviation::of_message("低压空气瓶压力高"),
            Some(Deviation::High)
        );
        assert_eq!(Deviation::of_message("LT water high temp low level"), None);
        assert_eq!(
            Deviation::of_message("ME T/C1 VIB HI 12 MM/S"),
            Some(Deviation::High)
        );
        assert_eq!(Deviation::of_message("oil press LL"), Some(Deviation::Low));
        assert_eq!(Deviation::of_message("no deviation named"), None);
        assert_eq!(
            Deviation::of_code("REF-ROOM-TEMP-HI"),
            Some(Deviation::High)
        );
        assert_eq!(Deviation::of_code("ME-FO-VISC-ABN"), None);
    }

    #[test]
    fn a_barometer_reads_a_pressure() {
        // An uncovered fault: two air temperatures apart took the
        // barometer mismatch section.
        const BARO: &str = "Barometer mismatch (pressure differs from the second barometer or a nearby station). Probable causes, most likely first: 1) pressure port blocked by water, salt or insects.";
        let temp = reading(
            "air temperature sensors differ from the second sensor",
            2.6,
            "degC",
            1.5,
        );
        says(
            "met_sensors-en",
            "MET-BARO-MISMATCH",
            BARO,
            &temp,
            Coverage::Related,
        );
        let baro = reading(
            "barometer pressure differs from the second barometer",
            4.3,
            "hPa",
            2.0,
        );
        says(
            "met_sensors-en",
            "MET-BARO-MISMATCH",
            BARO,
            &baro,
            Coverage::Covered,
        );
    }

    #[test]
    fn a_leak_section_is_not_a_readings_alarm() {
        // A plant's `ME FO INLET PRESS HIGH` took the
        // HP fuel pipe leak section, whose `high-pressure` pipe and `HI`
        // hold the message's pressure and high.
        const LEAK: &str = "Main engine high-pressure fuel pipe leakage alarm (HP pipe leak, fuel leak tank level high). Probable causes, most likely first: 1) cracked double-walled high-pressure fuel pipe or loose union; 2) fuel injection pump plunger leakage.";
        let press = reading("ME FO INLET PRESS HIGH", 10.2, "bar", 9.5);
        says(
            "main_engine_fuel-en",
            "ME-FO-LEAK-HI",
            LEAK,
            &press,
            Coverage::Related,
        );
        // The leak said in words, with or without a reading.
        let said = reading(
            "ME HP fuel pipe leak, leak tank level high",
            10.2,
            "bar",
            9.5,
        );
        says(
            "main_engine_fuel-en",
            "ME-FO-LEAK-HI",
            LEAK,
            &said,
            Coverage::Covered,
        );
        const LEAK_ZH: &str = "主机高压油管泄漏报警（高压油管泄漏、漏油柜液位高）。可能原因（按可能性排序）：（1）双层高压油管破裂。";
        let zh = alarm("T-1", "主机高压油管泄漏报警，漏油柜液位高");
        says(
            "main_engine_fuel-zh",
            "ME-FO-LEAK-HI",
            LEAK_ZH,
            &zh,
            Coverage::Covered,
        );
    }

    #[test]
    fn lube_oil_in_a_code_is_no_way() {
        // Uncovered faults: `ME1 LO INL
        // TEMP LOW` took the lube oil temperature high section at a share of
        // 1, its code's `LO` (lube oil) read as low beside its `HI`.
        assert_eq!(Deviation::of_code("ME-LO-TEMP-HI"), Some(Deviation::High));
        assert_eq!(Deviation::of_code("DG-LO-PRES-LO"), Some(Deviation::Low));
        assert_eq!(Deviation::of_code("ADCP-LOW-CORR"), Some(Deviation::Low));
        const LO: &str = "Main engine lube oil inlet temperature high (ME LO inlet temp high, LO temp high). Probable causes, most likely first: 1) LO cooler fouled; 2) thermostatic valve stuck.";
        let low = reading("ME1 LO INL TEMP LOW", 32.0, "degC", 38.0);
        says(
            "main_engine_lube_oil-en",
            "ME-LO-TEMP-HI",
            LO,
            &low,
            Coverage::Related,
        );
        let high = reading("ME1 LO INL TEMP HIGH", 58.0, "degC", 55.0);
        says(
            "main_engine_lube_oil-en",
            "ME-LO-TEMP-HI",
            LO,
            &high,
            Coverage::Covered,
        );
    }

    #[test]
    fn a_section_for_another_quantity_does_not_cover_the_alarm() {
        let tc = || {
            vec![causes(
                "main_engine_exhaust_turbo-en",
                "ME-TC-RPM-HI",
                "Turbocharger overspeed (T/C speed high, TC rpm high). Probable causes, most likely first: 1) fouled turbine nozzle ring; 2) governor fault.",
            )]
        };
        let d = docs(&["main_engine_exhaust_turbo-en"]);
        // An uncovered fault: a turbocharger's vibration took its
        // overspeed section (0.56 of the words, ranked far ahead).
        let vib = judge(
            &alarm("T-1", "ME T/C1 VIB HI 12 MM/S"),
            &tc(),
            Equipment::Known(&d),
        );
        assert_eq!(vib.coverage, Coverage::Related, "{vib:?}");
        let rpm = judge(
            &alarm("T-1", "ME T/C1 speed high 21500 rpm"),
            &tc(),
            Equipment::Known(&d),
        );
        assert_eq!(rpm.coverage, Coverage::Covered, "{rpm:?}");
        assert_eq!(
            Quantity::of_message("排气总管压力高"),
            Some(Quantity::Pressure)
        );
        assert_eq!(
            Quantity::of_message("主机高温淡水进机压力低"),
            None,
            "a circuit and a pressure"
        );
        assert_eq!(Quantity::of_message("AIS not transmitting"), None);
        assert_eq!(Quantity::of_code("BLR-WL-LO"), Some(Quantity::Level));
        assert_eq!(Quantity::of_code("ME-FLTR-DP"), None);
    }

    #[test]
    fn other_plants_wordings_decide_what_words_and_ranking_cannot() {
        // Plants often raise an intermediate shaft bearing's
        // temperature: the stern tube bearing's section holds most of its
        // words. Other plants write a stern tube bearing in words that
        // section holds few of.
        let doc = "shafting_stern_tube-en";
        let sections = vec![
            causes(
                doc,
                "SFT-STB-TEMP-HI",
                "Stern tube bearing temperature high (stern tube brg temp high, aft bearing temp high). Probable causes, most likely first: 1) low oil level in the gravity tank.",
            ),
            causes(
                doc,
                "SFT-SEAL-LEAK",
                "Stern tube seal leaking (oil loss from the aft seal, sea water in the stern tube oil). Probable causes, most likely first: 1) worn seal rings.",
            ),
        ];
        let d = docs(&[doc]);
        let row = |set: &str, message: &str, section: Option<&str>| {
            example(set, "shafting_stern_tube", message, section)
        };
        let rows = vec![
            row(
                "10",
                "Intermediate shaft bearing No.2 temperature high",
                None,
            ),
            row("12", "INTERMEDIATE SHAFT BRG No.1 TEMP HIGH", None),
            row(
                "13",
                "aftmost shaft bearing in stern tube running hot, white metal",
                Some("SFT-STB-TEMP-HI"),
            ),
            row(
                "14",
                "aft stern tube white metal bearing running hot",
                Some("SFT-STB-TEMP-HI"),
            ),
        ];
        let ex = Examples::of(rows.clone());
        let like = Some(Likeness { examples: &ex });
        let mut a = alarm("SH-411", "INTERMEDIATE SHAFT BRG No.3 TEMP HIGH");
        a.kind = Some("shafting_stern_tube".into());
        let judged =
            |a: &Alarm, like| judge_like(a, &sections, Equipment::Known(&d), &sections, like);
        assert_eq!(
            judged(&a, None).coverage,
            Coverage::Covered,
            "{:?}",
            judged(&a, None)
        );
        assert_eq!(
            judged(&a, like).coverage,
            Coverage::Related,
            "{:?}",
            judged(&a, like)
        );
        let mut b = alarm(
            "SH-412",
            "aft bearing of the stern tube running hot, white metal smell",
        );
        b.kind = Some("shafting_stern_tube".into());
        assert_eq!(judged(&b, None).coverage, Coverage::Related);
        let j = judged(&b, like);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert!(j.section.unwrap().to_string().contains("SFT-STB-TEMP-HI"));
        // Without the one example in this alarm's very words (as the eval
        // judges a case, its own set left out), example 10's wording of the
        // same fault, less near, still speaks against the words.
        let message = a.message.as_deref().unwrap();
        let all = ex
            .nearest_any(&["shafting_stern_tube".into()], message, None)
            .unwrap();
        let without_12 = Examples::of(rows.iter().filter(|r| r.0 != "12").cloned().collect());
        let left_out = without_12
            .nearest_any(&["shafting_stern_tube".into()], message, None)
            .unwrap();
        assert!(left_out.uncovered < all.uncovered, "{left_out:?} {all:?}");
        let own = Some(Likeness {
            examples: &without_12,
        });
        assert_eq!(judged(&a, own).coverage, Coverage::Related);
        let none = Examples::of(Vec::new());
        let own = Some(Likeness { examples: &none });
        assert_eq!(judged(&a, own).coverage, Coverage::Covered);
    }

    #[test]
    fn a_less_near_example_names_the_section_retrieval_ranks_first() {
        // Another plant's wording shares only some words with this one,
        // too few to speak alone, but it names the section retrieval read
        // first: two witnesses that read different things agree.
        let (sections, d) = purifier();
        let (ex, a, n) = sludge_discharge(&["purifier motor overload trip"]);
        let like = Some(Likeness { examples: &ex });
        assert!(
            n.similarity >= examples::AGREED_AT && n.similarity < examples::NEAR_AT,
            "the example must be less near than NEAR_AT for this test: {n:?}"
        );
        let first = judge_like(&a, &sections, Equipment::Known(&d), &sections, like);
        assert_eq!(first.coverage, Coverage::Covered, "{first:?}");
        assert!(first
            .section
            .unwrap()
            .to_string()
            .contains("PUR-DISCH-FAIL"));
    }

    #[test]
    fn an_example_well_nearer_than_any_wording_of_retrievals_first_speaks_against_it() {
        // Retrieval ranks the oil loss first and the discharge failure
        // second. Another plant's wording of the discharge failure is near
        // this message and no plant's wording of the oil loss is: the
        // example names the second (RANKED_AT, OVER_FIRST_AT).
        let (sections, d) = purifier();
        let swapped: Vec<Hit> = sections.iter().rev().cloned().collect();
        let (ex, a, n) = sludge_discharge(&["purifier motor overload trip"]);
        assert_near_enough_for_another_own_section(&n);
        let like = Some(Likeness { examples: &ex });
        let j = judge_like(&a, &swapped, Equipment::Known(&d), &sections, like);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert!(j.section.unwrap().to_string().contains("PUR-DISCH-FAIL"));
        // A wording of the oil loss nearly as near: two plants' wordings
        // disagree, and retrieval's pick is not overruled.
        let (ex, a, n) = sludge_discharge_among(
            &["purifier motor overload trip"],
            &[("separator oil loss", "PUR-OIL-LOSS")],
        );
        let message = a.message.as_deref().unwrap();
        let oil = ex
            .nearest_beside(&["purifier".into()], message, Some("PUR-OIL-LOSS"))
            .unwrap()
            .rival;
        assert!(
            n.section == "PUR-DISCH-FAIL" && n.similarity - oil < examples::OVER_FIRST_AT,
            "the oil loss's wording must be less near, but less than OVER_FIRST_AT: {n:?} {oil}"
        );
        let like = Some(Likeness { examples: &ex });
        let j = judge_like(&a, &swapped, Equipment::Known(&d), &sections, like);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
    }

    #[test]
    fn an_example_names_a_section_retrieval_returned_only_as_its_checks() {
        // A watch log that says what was seen and tried reads like a
        // section's checks: retrieval returned the discharge failure's
        // checks and no causes section of the separator, so there is no
        // first for another plant's wording of that fault to be nearer than.
        let (sections, d) = purifier();
        let (ex, a, n) = sludge_discharge(&["purifier motor overload trip"]);
        assert_near_enough_for_another_own_section(&n);
        let checks = Hit {
            doc: "purifier-en".into(),
            ..crate::test_support::hit(
                "PUR-DISCH-FAIL checks",
                "1) Check the operating water solenoid valve and its supply pressure.",
            )
        };
        let like = Some(Likeness { examples: &ex });
        let j = judge_like(
            &a,
            std::slice::from_ref(&checks),
            Equipment::Known(&d),
            &sections,
            like,
        );
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert!(j.section.unwrap().to_string().contains("PUR-DISCH-FAIL"));
        // The oil loss's causes ranked first, the discharge failure's checks
        // after them: no plant's wording of the oil loss is near, so the
        // example overrules retrieval's pick as for a causes section.
        let hits = vec![sections[1].clone(), checks];
        let j = judge_like(&a, &hits, Equipment::Known(&d), &sections, like);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert!(j.section.unwrap().to_string().contains("PUR-DISCH-FAIL"));
    }

    #[test]
    fn an_agreeing_example_needs_less_lead_over_an_uncovered_one() {
        // An uncovered fault of the same equipment shares the sludge words,
        // nearly as near as the covered example: alone, the example would not
        // speak (less than LEAD_AT ahead); agreeing with retrieval, it does.
        let (sections, d) = purifier();
        let (ex, a, n) = sludge_discharge(&["sludge pump stopped", "purifier motor overload trip"]);
        let like = Some(Likeness { examples: &ex });
        assert!(
            n.similarity >= examples::AGREED_AT
                && n.similarity < examples::NEAR_AT
                && n.lead >= examples::AGREED_LEAD_AT
                && n.lead < examples::LEAD_AT,
            "the example must agree, less near than NEAR_AT and less ahead than LEAD_AT: {n:?}"
        );
        let j = judge_like(&a, &sections, Equipment::Known(&d), &sections, like);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert!(j.section.unwrap().to_string().contains("PUR-DISCH-FAIL"));
    }

    #[test]
    fn a_less_near_example_does_not_cover_what_its_section_code_says_nothing_of() {
        // An uncovered fault: the ballast pump will not start.
        // Another plant's pump pressure low shares the pump's words, and
        // retrieval ranks the pressure section first; the message says
        // neither pressure nor low.
        let sections = vec![
            causes("ballast-zh", "BAL-PUMP-PRES-LO", "压载泵排出压力低或吸空（压载泵压力低）。可能原因（按可能性排序）：（1）液舱将空。"),
            causes("ballast-zh", "BAL-VLV-FAIL", "压载阀动作失败（阀门不动作、无反馈）。可能原因（按可能性排序）：（1）液压站压力低。"),
        ];
        let d = docs(&["ballast-zh"]);
        let ex = Examples::of(vec![
            example(
                "10",
                "ballast",
                "1号压载泵排出压力低",
                Some("BAL-PUMP-PRES-LO"),
            ),
            example("11", "ballast", "紫外灯强度低", None),
        ]);
        let like = Some(Likeness { examples: &ex });
        let mut a = alarm("AL-5102", "压载泵启动失败");
        a.kind = Some("ballast".into());
        let n = ex.nearest(&["ballast".into()], "压载泵启动失败").unwrap();
        assert!(
            n.similarity >= examples::AGREED_AT
                && n.similarity < examples::NEAR_AT
                && n.lead >= examples::LEAD_AT,
            "the example must agree but be less near than NEAR_AT for this test: {n:?}"
        );
        let j = judge_like(&a, &sections, Equipment::Known(&d), &sections, like);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // Saying the way or the quantity is enough; a code that names
        // neither asks nothing (`ejection not detected`, PUR-DISCH-FAIL).
        assert!(affirms("BAL-PUMP-PRES-LO", Some(Deviation::Low), None));
        assert!(affirms("BAL-PUMP-PRES-LO", None, Some(Quantity::Pressure)));
        assert!(!affirms("BAL-PUMP-PRES-LO", None, None));
        assert!(!affirms(
            "BAL-PUMP-PRES-LO",
            Some(Deviation::High),
            Some(Quantity::Temperature)
        ));
        assert!(affirms("PUR-DISCH-FAIL", None, None));
    }

    #[test]
    fn an_uncovered_example_a_little_nearer_speaks_against_the_words() {
        // The message holds every word of the lube oil temperature section's
        // alarm, but other plants wrote this very wording for a fault no
        // section is about (the oil after the turbocharger, not the engine's
        // inlet), and nearer than anything written for the inlet.
        let sections = lube_oil();
        let d = docs(&["main_engine_lube_oil-en"]);
        let row = |set: &str, message: &str, section: Option<&str>| {
            example(set, "main_engine_lube_oil", message, section)
        };
        let ex = Examples::of(vec![
            row(
                "10",
                "turbocharger bearing oil outlet side running warm",
                None,
            ),
            row(
                "11",
                "main engine lube oil inlet hot, cooler fouled",
                Some("ME-LO-TEMP-HI"),
            ),
            row("12", "main bearing oil pressure low", Some("ME-LO-PRES-LO")),
        ]);
        let like = Some(Likeness { examples: &ex });
        let mut a = alarm("TAH-118", "LO temp high, T/C outlet side");
        a.kind = Some("main_engine_lube_oil".into());
        let n = ex
            .nearest_any(
                &["main_engine_lube_oil".into()],
                a.message.as_deref().unwrap(),
                None,
            )
            .unwrap();
        assert!(
            n.uncovered >= examples::UNLIKE_AT && n.uncovered < 0.4,
            "the uncovered example must be nearer than UNLIKE_AT and under the old 0.4: {n:?}"
        );
        assert!(n.uncovered - n.similarity >= examples::UNLIKE_LEAD, "{n:?}");
        let without = judge_like(&a, &sections, Equipment::Known(&d), &sections, None);
        assert_eq!(without.coverage, Coverage::Covered, "{without:?}");
        let j = judge_like(&a, &sections, Equipment::Known(&d), &sections, like);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
    }

    #[test]
    fn a_judgement_names_the_rule_that_decided() {
        let boiler = vec![causes(
            "boiler-en",
            "BLR-FLAME-FAIL",
            "Boiler burner flame failure (flame failure, burner trip). Probable causes, most likely first: 1) flame scanner dirty.",
        )];
        let rule = |code: &str, message: &str, equipment: Equipment| {
            judge(&alarm(code, message), &boiler, equipment).rule
        };
        let flame = "INCINERATOR BURNER FLAME FAILURE";
        assert_eq!(
            rule("BLR-FLAME-FAIL", flame, Equipment::Unlisted),
            "own_code"
        );
        assert_eq!(
            rule("INC-07", "BURNER FLAME FAILURE", Equipment::Unknown),
            "whole"
        );
        assert_eq!(rule("INC-07", flame, Equipment::Unknown), "related");
        assert_eq!(
            rule("INC-07", "gyro drift", Equipment::Unlisted),
            "nothing_found"
        );
    }
}
