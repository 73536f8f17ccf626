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
use super::{own_alarm, Coverage, Equipment, Judgement, Likeness, Reading};

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
    });
    v.judgement(last.name)
}

/// What a rule says: a coverage, the best word share and the section.
pub(super) struct Verdict<'a> {
    coverage: Coverage,
    best: f32,
    section: Option<&'a Hit>,
}

impl Verdict<'_> {
    fn judgement(self, rule: &'static str) -> Judgement {
        Judgement {
            coverage: self.coverage,
            best: self.best,
            section: self.section.map(Hit::reference),
            rule,
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
    ) -> Self {
        Ground {
            alarm,
            hits,
            equipment,
            classes,
            sections,
            likeness,
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
        .nearest_beside(g.classes, &r.message, like.except, first)
        .filter(|n| example_vouches(g, r, n, first))?;
    let zh = crate::retrieval::tokenize::has_cjk(&r.message);
    let of_code = |h: &&Hit| h.section.code() == near.section && !other_fault(r, h);
    let lang =
        |h: &&Hit| own_alarm(h).is_some_and(|l| crate::retrieval::tokenize::has_cjk(l) == zh);
    let h = g
        .sections
        .iter()
        .filter(of_code)
        .find(lang)
        .or_else(|| g.sections.iter().find(of_code))?;
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
            .nearest_any(g.classes, &g.reading().message, like.except, None)
            .is_some_and(|n| {
                n.uncovered >= examples::UNLIKE_AT
                    && n.uncovered - n.similarity >= examples::UNLIKE_LEAD
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
