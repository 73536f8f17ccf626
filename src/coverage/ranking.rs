//! The ranking rule's evidence: how far retrieval ranks the alarm's
//! equipment's best causes section ahead of every other fault's (`ahead`),
//! and the bars it must clear (`SCORE_AT`, `AHEAD_AT`).

use crate::retrieval::Hit;

/// A plant writes its alarm in its own words ("ejection not detected after
/// sludge cycle"), which a section's alarm text may share few of; retrieval
/// still ranks the fault's section first, well ahead of every other fault's.
/// The alarm's equipment's best causes section is taken for covered when
/// its score is at least `SCORE_AT` and its lead over the best section of
/// any other fault is at least `AHEAD_AT` of its score. Set on the eval
/// set's tuning part: any score bar from 16 to 22 with a lead of 0.3 takes
/// 7 more covered alarms under plant codes than the word share alone (40 of
/// 52 instead of 33) and no uncovered fault; a lead of 0.25 takes 3 more
/// covered and 3 more uncovered, 0.2 another 2 and 1. Scores are the
/// index's BM25 (`retrieval`): other manuals keep their scale, not their
/// values.
pub const SCORE_AT: f32 = 20.0;
pub const AHEAD_AT: f32 = 0.3;
/// The alarm's equipment's best-scored causes section, and how far its
/// fault is ahead of the best section (causes or checks) of any other fault,
/// as a share of the fault's score (1 when no other fault's section was
/// retrieved). The fault scores as its best section, causes or checks: a
/// device's status text (`weak signal strength, below weak signal limit`)
/// may read like what to check more than like the causes, and either is
/// retrieval saying which fault it is.
pub(super) fn ahead<'h>(hits: &'h [Hit], mine: &dyn Fn(&Hit) -> bool) -> Option<(&'h Hit, f32)> {
    let causes = || hits.iter().filter(|h| h.section.is_causes());
    let top = causes()
        .filter(|h| mine(h))
        .max_by(|a, b| a.score.total_cmp(&b.score))?;
    let code = top.section.code();
    let (fault, other) = hits.iter().fold((0.0, 0.0), |(fault, other), h| {
        match h.section.code().eq_ignore_ascii_case(code) {
            true => (h.score.max(fault), other),
            false => (fault, h.score.max(other)),
        }
    });
    (fault > 0.0).then(|| (top, (fault - other) / fault))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coverage::fixtures::*;
    use crate::coverage::{judge, Coverage, Equipment, COVERED_AT};
    use crate::retrieval::Hit;

    #[test]
    fn a_section_retrieval_ranks_far_ahead_is_the_fault_of_a_plant_worded_alarm() {
        let d = docs(&["ballast-en", "ballast-zh"]);
        // Two words of five are the valve section's: the word share alone
        // says related.
        let a = alarm("AL-77", "BV12 stays shut after open command");
        let far = scored(ballast(), &[12.0, 30.0]);
        let j = judge(&a, &far, Equipment::Known(&d));
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("ballast-en § BAL-VLV-FAIL causes")
        );
        assert!(j.best < COVERED_AT, "{j:?}");
        // The same fault's section in the other language is not another fault.
        let mut both = far.clone();
        both.push(Hit {
            score: 29.0,
            ..ballast_zh()[1].clone()
        });
        assert_eq!(
            judge(&a, &both, Equipment::Known(&d)).coverage,
            Coverage::Covered
        );
        // Without a known equipment the ranking does not speak.
        assert_ne!(
            judge(&a, &far, Equipment::Unknown).coverage,
            Coverage::Covered
        );
    }

    /// The fault's checks section ranked first speaks for it as its causes
    /// section would: a device's status text reads like what to check.
    #[test]
    fn a_fault_ranked_ahead_by_its_checks_section_is_the_fault() {
        let d = docs(&["ballast-en", "ballast-zh"]);
        let a = alarm("AL-77", "BV12 stays shut after open command");
        let checks = |code: &str, score: f32| Hit {
            score,
            ..crate::test_support::hit(&format!("{code} checks"), "1) Check the valve.")
        };
        // Its causes section alone leads by 20%: not enough.
        let mut hits = scored(ballast(), &[20.0, 25.0]);
        assert_eq!(
            judge(&a, &hits, Equipment::Known(&d)).coverage,
            Coverage::Related
        );
        // Its checks section at 30 leads by a third.
        hits.push(Hit {
            doc: "ballast-en".into(),
            ..checks("BAL-VLV-FAIL", 30.0)
        });
        let j = judge(&a, &hits, Equipment::Known(&d));
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("ballast-en § BAL-VLV-FAIL causes")
        );
        // Another fault's checks section as high takes the lead away.
        hits.push(Hit {
            doc: "ballast-en".into(),
            ..checks("BAL-PUMP-PRES-LO", 28.0)
        });
        assert_eq!(
            judge(&a, &hits, Equipment::Known(&d)).coverage,
            Coverage::Related
        );
    }

    #[test]
    fn a_section_only_a_little_ahead_or_weakly_scored_is_not_taken_for_the_fault() {
        let d = docs(&["ballast-en", "ballast-zh"]);
        let a = alarm("AL-77", "No.2 ballast pump motor overload trip");
        for scores in [
            [24.0, SCORE_AT + 1.0],            // 4% ahead
            [5.0, SCORE_AT - 1.0],             // far ahead, but a weak match
            [SCORE_AT * 0.8, SCORE_AT * 1.05], // ahead by 24%
        ] {
            let j = judge(&a, &scored(ballast(), &scores), Equipment::Known(&d));
            assert_eq!(j.coverage, Coverage::Related, "{scores:?}: {j:?}");
        }
        // Another equipment's section far ahead is not this equipment's.
        let gen = docs(&["generator-en"]);
        let j = judge(&a, &scored(ballast(), &[5.0, 40.0]), Equipment::Known(&gen));
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
    }
}
