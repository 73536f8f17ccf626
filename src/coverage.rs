//! Coverage: whether the manuals have a section for an alarm's fault, decided
//! from what retrieval found, before the model runs.
//!
//! `covered`: a section is about this fault (its alarm code is the alarm's,
//! or its own alarm text says what the alarm's message says); `related`: no
//! section is, and an answer can only draw on sections for other faults
//! (the alarm's equipment has a manual, or the passages share its words);
//! `none`: nothing relevant was found. Each causes section opens with its
//! alarm as the manual names it, with the short forms plants use ("Ballast
//! pump discharge pressure low or lost suction (ballast pump press low)"):
//! that sentence is compared with the message, so an alarm that shares only
//! the equipment's words with a section (a ballast pump that will not
//! start, against that pump's low pressure) is not taken for it. A message
//! in the plant's own words may share few of them; then retrieval's
//! ranking speaks: the equipment's section far ahead of every other
//! fault's is the alarm's. A long message may name a section's alarm in
//! full among much else; then the share is taken the other way round, of
//! the section's name for its alarm that the message holds (`named`).
//!
//! `judge` is pure: an alarm and its passages in, a `Judgement` out;
//! `judge_in` only looks up which manuals are the alarm's equipment's. It
//! never runs the model; the pipeline applies it after retrieval.
//!
//! This file owns the judgement (`Equipment`, `Judgement`) and the entry
//! points (its three words, `Coverage`, are `crate::verdict`'s); the room
//! is laid out as: `reading` (the alarm read
//! once), `terms` (words and characters, weighed), `ranking` (retrieval's
//! lead), `named` (a section's alarm named in full), `examples` (other
//! plants' wordings), `site` (the crew's notes: this vessel's own wordings
//! and causes) and `rules` (the ordered table `judge` walks).

use crate::alarm::Alarm;
use crate::retrieval::kinds::By;
use crate::retrieval::{Hit, Index, SectionRef};

pub mod examples;
mod named;
mod ranking;
mod reading;
pub mod rules;
pub mod site;
mod terms;

#[cfg(test)]
mod fixtures;

pub use crate::verdict::Coverage;
pub use examples::Examples;
pub use named::NAMED_AT;
pub use ranking::{AHEAD_AT, SCORE_AT};
pub use reading::{own_alarm, Reading};
pub use rules::{COVERED_AT, RELATED_AT, UNNAMED_COVERED_AT, WHOLE_AT};
pub use terms::Terms;

/// The alarm's equipment as the manuals know it.
#[derive(Debug, Clone, Copy)]
pub enum Equipment<'a> {
    /// The alarm's kind or message names the equipment of these documents
    /// (`retrieval::kinds`): sections of other documents are other
    /// equipment's, and the equipment has a manual.
    Known(&'a [String]),
    /// Neither names a manual's equipment: the text alone decides.
    Unknown,
    /// The kind and the message name a machine no manual names: the
    /// equipment has no manual, so no section is about its fault, however
    /// many of its words another equipment's section holds (an
    /// incinerator's flame failure against the boiler's). Only a section
    /// under the alarm's own code covers it.
    Unlisted,
}

/// A coverage and what it was decided on.
#[derive(Debug, Clone, PartialEq)]
pub struct Judgement {
    pub coverage: Coverage,
    /// The best share of the message (its words and characters, weighed by
    /// `Terms::weighted`) that one causes section's own alarm text holds (1
    /// for the alarm's own code; 0 without a message). A fault covered by
    /// retrieval's ranking keeps its share, under `COVERED_AT`.
    pub best: f32,
    /// That section.
    pub section: Option<SectionRef>,
    /// The rule of `rules::RULES` that decided (its stable name).
    pub rule: &'static str,
    /// The id of the site note the verdict rests on (rule `site_note`).
    pub note: Option<String>,
}

/// A confirmed site note about the alarm's fault (`site::covering`) and
/// the causes section of the manual item it confirmed: what rule
/// `site_note` covers the alarm by.
#[derive(Debug, Clone)]
pub struct SiteCover {
    pub note: String,
    pub section: Hit,
}

/// Judges `alarm` against the passages retrieval chose for it, every word
/// of its message weighing the same.
pub fn judge(alarm: &Alarm, hits: &[Hit], equipment: Equipment) -> Judgement {
    judge_with(alarm, hits, equipment, &[])
}

/// `judge`, the message weighed against the own alarms of `sections`, its
/// equipment's causes sections (`Terms::weighted`), each of which it may
/// also name in its own words (`named`).
pub fn judge_with(
    alarm: &Alarm,
    hits: &[Hit],
    equipment: Equipment,
    sections: &[Hit],
) -> Judgement {
    judge_like(alarm, hits, equipment, sections, None)
}

/// Example alarms to judge by.
#[derive(Clone, Copy)]
pub struct Likeness<'a> {
    pub examples: &'a Examples,
}

/// `judge_with`, and when neither words nor ranking cover the alarm, its
/// nearest example alarms (`examples`).
pub fn judge_like(
    alarm: &Alarm,
    hits: &[Hit],
    equipment: Equipment,
    sections: &[Hit],
    likeness: Option<Likeness>,
) -> Judgement {
    let kind: Vec<String> = alarm.kind.iter().cloned().collect();
    judge_like_in(alarm, hits, equipment, &kind, sections, likeness, None)
}

/// `judge_like`, the example alarms read of the manual classes `classes`
/// (the alarm's equipment as the manuals know it, `retrieval::kinds`).
pub fn judge_like_in(
    alarm: &Alarm,
    hits: &[Hit],
    equipment: Equipment,
    classes: &[String],
    sections: &[Hit],
    likeness: Option<Likeness>,
    site: Option<&SiteCover>,
) -> Judgement {
    let ground = rules::Ground::new(alarm, hits, equipment, classes, sections, likeness, site);
    rules::judge(&ground)
}

/// `judge`, the alarm's equipment being the documents of the index whose
/// class is the alarm's `kind` (unknown without a `kind`, unlisted when
/// no manual is for it).
pub fn judge_in(index: &Index, alarm: &Alarm, hits: &[Hit]) -> Judgement {
    judge_in_like(index, alarm, hits, None)
}

/// `judge_in`, with example alarms to judge by (`judge_like`).
pub fn judge_in_like(
    index: &Index,
    alarm: &Alarm,
    hits: &[Hit],
    likeness: Option<Likeness>,
) -> Judgement {
    judge_in_noted(index, alarm, hits, likeness, None)
}

/// `judge_in_like`, and by a confirmed site note about the fault.
pub fn judge_in_noted(
    index: &Index,
    alarm: &Alarm,
    hits: &[Hit],
    likeness: Option<Likeness>,
    site: Option<&SiteCover>,
) -> Judgement {
    let resolved = equipment_of(index, alarm);
    let docs = index.docs_of_classes(&resolved.classes);
    let equipment = match (docs.is_empty(), resolved.by) {
        (false, _) => Equipment::Known(&docs),
        (true, By::Unlisted) => Equipment::Unlisted,
        (true, _) => Equipment::Unknown,
    };
    judge_like_in(
        alarm,
        hits,
        equipment,
        &resolved.classes,
        &index.causes_of(&docs),
        likeness,
        site,
    )
}

/// The alarm's equipment as coverage reads it (`kinds::resolve`), except
/// that a kind made only of words the manuals' own alarms use is no
/// evidence of a machine without a manual: a quantity (`频率`, `pressure`)
/// or a part (`burner`) of a manual's machine. The text decides then, as
/// for a kind that maps to nothing.
pub fn equipment_of(index: &Index, alarm: &Alarm) -> crate::retrieval::kinds::Resolution {
    use crate::retrieval::kinds::{resolve, Resolution};
    let resolved = resolve(index.docs(), alarm);
    let kind = alarm.kind.as_deref().unwrap_or_default();
    if resolved.by != By::Unlisted || !said_in_the_manuals_alarms(index, kind) {
        return resolved;
    }
    let bare = Alarm {
        kind: None,
        ..alarm.clone()
    };
    Resolution {
        kind_unmapped: true,
        ..resolve(index.docs(), &bare)
    }
}

/// Whether every word of `kind` is a word of some manual's own alarm texts.
fn said_in_the_manuals_alarms(index: &Index, kind: &str) -> bool {
    use crate::retrieval::kinds::name_words;
    let words = name_words(kind);
    if words.is_empty() {
        return false;
    }
    let sections = index.causes_sections();
    let alarms: Vec<&str> = sections.iter().filter_map(|(h, _)| own_alarm(h)).collect();
    let said = name_words(&alarms.join(" "));
    words.iter().all(|w| said.contains(w))
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;

    #[test]
    fn a_kind_that_is_a_quantity_or_part_of_a_manuals_machine_is_no_machine_without_one() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge");
        let manuals = crate::retrieval::knowledge::load_dir(&dir).unwrap();
        let index = Index::from_bytes(crate::retrieval::index::build(&manuals).unwrap()).unwrap();
        let raised = |kind: &str, message: &str| Alarm {
            kind: Some(kind.into()),
            message: Some(message.into()),
            ..crate::test_support::alarm("DG1-HZ-LOW")
        };
        // A watchkeeper files a generator's frequency alarm under `频率`.
        let a = raised(
            "频率",
            "1号发电机单机运行，频率掉到57.6Hz报警，负荷280kW，调速器设定没动过。",
        );
        let r = equipment_of(&index, &a);
        assert_eq!(
            (r.classes, r.by),
            (vec!["generator".to_string()], By::Message)
        );
        let hits = index
            .search(&crate::retrieval::Query::of_alarm(&a), 6)
            .unwrap();
        assert_ne!(judge_in(&index, &a, &hits).coverage, Coverage::None);
        let burner = raised("burner", "Burner flame failure");
        assert_ne!(equipment_of(&index, &burner).by, By::Unlisted);
        // A machine no manual speaks of is still one.
        for (kind, message) in [
            ("焚烧炉", "焚烧炉熄火报警"),
            ("INCINERATOR", "INCINERATOR FLAME FAIL"),
        ] {
            assert_eq!(
                equipment_of(&index, &raised(kind, message)).by,
                By::Unlisted,
                "{kind}"
            );
        }
    }

    #[test]
    fn the_alarms_own_code_is_covered_whatever_the_message() {
        let j = judge(
            &alarm("bal-vlv-fail", "something else entirely"),
            &ballast(),
            Equipment::Unknown,
        );
        assert_eq!(j.coverage, Coverage::Covered);
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("ballast-en § BAL-VLV-FAIL causes")
        );
    }

    #[test]
    fn a_plant_code_is_covered_when_a_sections_own_alarm_says_the_message() {
        let d = docs(&["ballast-en", "ballast-zh"]);
        for (msg, hits) in [
            ("No.1 ballast pp disch press low", ballast()),
            ("Ballast valve BV12 fail to open", ballast()),
            ("1号压载泵排压低 吸不上水", ballast_zh()),
        ] {
            for eq in [Equipment::Known(&d), Equipment::Unknown] {
                let j = judge(&alarm("AL-2041", msg), &hits, eq);
                assert_eq!(j.coverage, Coverage::Covered, "{msg}: {j:?}");
            }
        }
    }

    #[test]
    fn another_fault_of_the_same_equipment_is_related() {
        let d = docs(&["ballast-en", "ballast-zh"]);
        for (msg, hits) in [
            ("ballast pump will not start", ballast()),
            ("No.2 ballast pump motor overload trip", ballast()),
            ("压载泵启动失败", ballast_zh()),
        ] {
            for eq in [Equipment::Known(&d), Equipment::Unknown] {
                let j = judge(&alarm("AL-2041", msg), &hits, eq);
                assert_eq!(j.coverage, Coverage::Related, "{msg}: {j:?}");
                assert!(j.best < COVERED_AT, "{msg}: {j:?}");
            }
        }
    }

    #[test]
    fn another_equipments_section_is_not_the_fault_of_a_known_equipment() {
        // The words match, but the section is the main engine's: a
        // generator's jacket water has no section of its own.
        let hits = vec![causes(
            "main_engine_cooling-en",
            "ME-JCW-TEMP-HI",
            "Main engine jacket cooling water (JCW, HT fresh water) outlet temperature high. Probable causes, most likely first: 1) thermostatic valve stuck.",
        )];
        let a = alarm("PMS-310", "DG1 jacket cooling water temp high");
        let gen = docs(&["generator-en", "generator-zh"]);
        assert_eq!(
            judge(&a, &hits, Equipment::Known(&gen)).coverage,
            Coverage::Related
        );
        assert_eq!(
            judge(&a, &hits, Equipment::Unknown).coverage,
            Coverage::Covered
        );
    }

    #[test]
    fn equipment_no_manual_is_for_has_no_section_about_its_fault() {
        // An incinerator's flame failure is not the boiler's, though it
        // holds every word of that section's alarm but the machine's.
        let boiler = vec![causes(
            "boiler-en",
            "BLR-FLAME-FAIL",
            "Boiler burner flame failure (flame failure, burner trip). Probable causes, most likely first: 1) flame scanner dirty.",
        )];
        let a = alarm("INC-07", "INCINERATOR BURNER FLAME FAILURE");
        // Not named by the text, the equipment might be any: the fault's
        // words alone, under UNNAMED_COVERED_AT of the message, relate.
        assert_eq!(
            judge(&a, &boiler, Equipment::Unknown).coverage,
            Coverage::Related
        );
        let all = alarm("INC-07", "BURNER FLAME FAILURE");
        assert_eq!(
            judge(&all, &boiler, Equipment::Unknown).coverage,
            Coverage::Covered
        );
        assert_eq!(
            judge(&all, &boiler, Equipment::Unlisted).coverage,
            Coverage::Related
        );
        let j = judge(&a, &boiler, Equipment::Unlisted);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // The section's own code still is the alarm's, whatever its kind.
        let own = alarm("BLR-FLAME-FAIL", "INCINERATOR BURNER FLAME FAILURE");
        assert_eq!(
            judge(&own, &boiler, Equipment::Unlisted).coverage,
            Coverage::Covered
        );
    }

    #[test]
    fn only_finding_nothing_of_the_alarms_equipment_is_none() {
        // A watch log in the plant's words may share few words with the
        // section that is its fault's: with the equipment unnamed, what
        // retrieval found may be of it, and the model answers from it.
        let a = alarm("GY-1", "gyro follow-up failure");
        let j = judge(&a, &ballast(), Equipment::Unknown);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // No passages at all.
        assert_eq!(judge(&a, &[], Equipment::Unknown).coverage, Coverage::None);
        // The text says no manual is for the equipment, and the passages
        // share under RELATED_AT of its words: nothing of it was found.
        let j = judge(&a, &ballast(), Equipment::Unlisted);
        assert_eq!(j.coverage, Coverage::None, "{j:?}");
        // A known equipment always has its manual to draw on.
        let d = docs(&["gyro-en"]);
        assert_eq!(
            judge(&a, &[], Equipment::Known(&d)).coverage,
            Coverage::Related
        );
    }
}
