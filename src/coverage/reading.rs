//! What coverage reads of an alarm, once per judgement (`Reading`): its
//! message, the clauses a watchkeeper did not find normal, the way,
//! quantity and medium of its fault, its reading unit's quantity and its
//! weighted terms; and what it reads of a causes section, its own alarm
//! (`own_alarm`). The text-reading functions it uses are `crate::reading`'s.

use crate::alarm::Alarm;
use crate::reading::{clause_first, not_normal, Deviation, Medium, Quantity};
use crate::retrieval::Hit;

use super::named::{differential, implied};
use super::terms::{Alarms, Terms};

/// What an alarm says of its fault, read once for every rule: its message,
/// the clauses a watchkeeper did not find normal, the way, quantity and
/// medium of the fault, the quantity its reading's unit measures, and its
/// terms weighed against its equipment's alarms.
pub struct Reading {
    /// The message, or the code when there is none.
    pub message: String,
    /// The message less what the watchkeeper found fine (`not_normal`):
    /// that says nothing of the way, the quantity or the medium of the
    /// fault.
    pub faulty: String,
    /// The way the reading left its range. The alarm's own reading says it
    /// first: a watch-log message states the alarm, then lists other
    /// readings (`滑油压力3.1bar报警（设定3.5bar），油温82℃，略偏高` is a
    /// low pressure); else the first clause that says a way in words, else
    /// by a trend.
    pub way: Option<Deviation>,
    pub quantity: Option<Quantity>,
    /// The medium of the clause that states the fault (`fault_clause`): a
    /// watch log's other readings name other media (`fuel rack at max, LO
    /// 4.1 bar` after a frequency alarm).
    pub medium: Option<Medium>,
    /// The quantity the reading's unit measures: a reading in a unit of one
    /// quantity measures it, so a leak alarm is a leak detector's, whatever
    /// its pipe's pressure (`high-pressure fuel pipe leakage`).
    pub unit_quantity: Option<Quantity>,
    /// The way and the quantity `faulty` says: the fault's, without the
    /// readings a log found fine; the quantity of the clause that states
    /// the fault (`medium`), not of another reading the log lists.
    pub faulty_way: Option<Deviation>,
    pub faulty_quantity: Option<Quantity>,
    /// The way the alarm's own value left its threshold, whatever its
    /// unit: a fact of the alarm, where its words may say none (`TENSION
    /// NEAR ZERO` at 0.1 kN, set 2 kN).
    pub own_way: Option<Deviation>,
    /// `faulty` with what it says without the words for it (`implied`):
    /// what the named path reads.
    pub faulty_said: String,
    /// The equipment's section alarms, read once for the message and for
    /// every name.
    pub(super) alarms: Alarms,
    /// The message's terms weighed against `alarms`.
    pub(super) terms: Terms,
}

/// The clause of `faulty` that states the fault: the first that says a
/// way in words, else the first, which states the alarm. A watch log then
/// lists other readings, of other quantities and media.
fn fault_clause(faulty: &str) -> Option<&str> {
    let mut clauses = crate::reading::clauses(faulty);
    crate::reading::clauses(faulty)
        .find(|c| Deviation::of_message(c).is_some())
        .or_else(|| clauses.next())
}

impl Reading {
    /// Reads `alarm` against `sections`, its equipment's causes sections.
    pub fn of(alarm: &Alarm, sections: &[Hit]) -> Self {
        let message = alarm
            .message
            .as_deref()
            .filter(|m| !m.trim().is_empty())
            .unwrap_or(&alarm.code)
            .to_string();
        let texts: Vec<String> = sections
            .iter()
            .filter_map(|h| own_alarm(h).map(str::to_string))
            .collect();
        let alarms = Alarms::of(&texts);
        let terms = Terms::of(&message).weighted(&alarms);
        let faulty = not_normal(&message);
        let way = Deviation::of_reading(alarm)
            .or_else(|| clause_first(&message, Deviation::of_message))
            .or_else(|| clause_first(&faulty, Deviation::of_trend));
        let quantity = Quantity::of_alarm(alarm, &message);
        let stated = fault_clause(&faulty);
        let medium = stated.and_then(Medium::of_message);
        let unit_quantity = alarm.unit.as_deref().and_then(Quantity::of_unit);
        // Read in what was not found fine only: `discharge pressure low …
        // checked: normal` implies nothing. A reading in a unit of no one
        // quantity (`0.3 m/min`, `%`) gives no way to a quantity the words
        // name (`oil temp 45 C`).
        let unit_known = alarm
            .unit
            .as_deref()
            .is_none_or(|u| u.trim().is_empty() || Quantity::of_unit(u).is_some());
        let faulty_way = Deviation::of_reading(alarm)
            .filter(|_| unit_known)
            .or_else(|| clause_first(&faulty, Deviation::of_message))
            .or_else(|| clause_first(&faulty, Deviation::of_trend));
        let faulty_quantity = Quantity::of_alarm(alarm, stated.unwrap_or_default());
        let faulty_said = format!(
            "{faulty} {}",
            implied(faulty_quantity, faulty_way, differential(&faulty))
        );
        Reading {
            message,
            faulty,
            way,
            quantity,
            medium,
            unit_quantity,
            faulty_way,
            faulty_quantity,
            own_way: Deviation::of_reading(alarm),
            faulty_said,
            alarms,
            terms,
        }
    }
}

/// A causes section's own alarm: the sentence before its list ("Jacket
/// water inlet pressure low (JCW press low, HT pump pressure low)."). None
/// for other sections and for the later parts of a split one, which have
/// no such sentence.
pub fn own_alarm(h: &Hit) -> Option<&str> {
    if !h.section.is_causes() {
        return None;
    }
    let marker = h.text.char_indices().find_map(|(i, c)| {
        let next = h.text[i + c.len_utf8()..].chars().next();
        (c.is_ascii_digit() && matches!(next, Some(')' | '）'))).then_some(i)
    });
    let end = ["Probable causes", "可能原因", "Causes:", "（1）"]
        .iter()
        .filter_map(|m| h.text.find(m))
        .chain(marker)
        .min()
        .unwrap_or(h.text.len());
    let lead = h.text[..end].trim();
    (!lead.is_empty()).then_some(lead)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarm::Alarm;
    use crate::coverage::fixtures::*;
    use crate::coverage::{judge_with, Coverage, Equipment};
    use crate::reading::*;
    use crate::retrieval::Hit;

    #[test]
    fn the_readings_unit_says_its_quantity_whatever_else_the_message_names() {
        let msg = "3号浮标主电池11.4V，夜间最低值逐日下降，白天充电电流只有0.6A";
        let volts = Alarm {
            unit: Some("V".into()),
            ..alarm("V_BATT_L", msg)
        };
        assert_eq!(Quantity::of_alarm(&volts, msg), Some(Quantity::Voltage));
        // Without a unit the message's one quantity word decides, and would
        // veto the battery voltage section.
        assert_eq!(
            Quantity::of_alarm(&alarm("V_BATT_L", msg), msg),
            Some(Quantity::Current)
        );
        let pct = Alarm {
            unit: Some("%".into()),
            ..alarm("V_BATT_L", msg)
        };
        assert_eq!(Quantity::of_alarm(&pct, msg), Some(Quantity::Current));
        assert_eq!(Quantity::of_unit("℃"), Some(Quantity::Temperature));
        assert_eq!(Quantity::of_unit("MPa"), Some(Quantity::Pressure));
    }

    #[test]
    fn the_faults_medium_is_its_own_clauses_not_a_reading_logged_after_it() {
        let read = |m: &str| Reading::of(&alarm("X", m), &[]).medium;
        // The clause that says the way names the medium.
        assert_eq!(read("NO.2 DG LO PRESS LOW"), Some(Medium::LubeOil));
        assert_eq!(
            read("Running alone at 300 kW, fuel rack at max, LO pressure low at 2.1 bar"),
            Some(Medium::LubeOil)
        );
        // None says a way: the first clause states the alarm.
        assert_eq!(
            read("滑油压力3.1bar报警，海水温度32℃"),
            Some(Medium::LubeOil)
        );
        // The alarm's clause names no medium: another reading's is not the
        // fault's.
        assert_eq!(
            read("Bus frequency 58.1 Hz alarm at 300 kW. Fuel rack at max, LO 4.1 bar"),
            None
        );
    }

    #[test]
    fn a_sections_own_alarm_is_the_sentence_before_its_list() {
        let h = &ballast()[0];
        assert_eq!(
            own_alarm(h),
            Some("Ballast pump discharge pressure low or lost suction (ballast pump press low).")
        );
        assert_eq!(
            own_alarm(&ballast_zh()[0]),
            Some("压载泵排出压力低或吸不上水。")
        );
        let checks = Hit {
            section: "BAL-VLV-FAIL checks".into(),
            ..h.clone()
        };
        assert_eq!(own_alarm(&checks), None);
        let part2 = causes("battery-zh", "BAT-VOLT-LO", "5）端子松动；6）BMS保护切断。");
        assert_eq!(own_alarm(&part2), None);
    }

    #[test]
    fn panel_grading_words_say_high_and_low_as_the_manuals_do() {
        for (panel, plain) in [
            ("冻肉库温度偏高", "冻肉库温度高"),
            ("汽包水位低低", "汽包水位低"),
            ("壳体真空度不足", "壳体真空度低"),
            ("排气温度过高", "排气温度高"),
        ] {
            assert_eq!(plain_degree(panel), plain);
        }
    }

    #[test]
    fn a_word_that_only_holds_a_grading_pair_is_left_whole() {
        // "通过高压管" is "through the high-pressure pipe": its "过高" is
        // no grading, and "通高压管" would lose the word "通过".
        for text in [
            "燃油通过高压管供油",
            "经过低温区",
            "超过高限",
            "不过低速时正常",
        ] {
            assert_eq!(plain_degree(text), text);
        }
        assert_eq!(plain_degree("通过后温度过高"), "通过后温度高");
        assert_eq!(plain_degree("温度偏高高"), "温度高");
    }

    #[test]
    fn the_alarms_own_reading_says_its_way_before_the_other_readings_it_lists() {
        // A watch log: the message's `略偏高` is the oil
        // temperature's; the alarm's 3.1 bar under its 3.5 is a low pressure.
        let d = docs(&["generator-zh"]);
        let a = reading(
            "2号副机滑油压力3.1bar报警（设定3.5bar），油温82℃，略偏高。已启动1号副机转移负荷。",
            3.1,
            "bar",
            3.5,
        );
        let j = judge_with(&a, &generator_zh(), Equipment::Known(&d), &generator_zh());
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("generator-zh § DG-LO-PRES-LO 原因")
        );
    }

    #[test]
    fn a_vacuum_reading_gives_no_way_only_when_the_alarm_is_the_vacuums() {
        let d = docs(&["fresh_water_generator-en"]);
        let fwg = fresh_water_generator();
        // An absolute pressure over its limit is a vacuum too low.
        let a = reading("FWG vacuum low, shell abs press 18 kPa", 18.0, "kPa", 15.0);
        let j = judge_with(&a, &fwg, Equipment::Known(&d), &fwg);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("fresh_water_generator-en § FWG-VACUUM-LO causes")
        );
        // Set 29's plant-2926: a salinity alarm that lists the shell vacuum
        // among its other readings is no vacuum's alarm.
        let a = reading(
            "FWG salinometer alarm 0340, distillate 13 ppm, dump valve open. Shell vacuum 93%, ejector pump 3.6 bar. Reduced feed water a little.",
            13.0,
            "ppm",
            10.0,
        );
        let j = judge_with(&a, &fwg, Equipment::Known(&d), &fwg);
        assert_ne!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("fresh_water_generator-en § FWG-VACUUM-LO causes"),
            "{j:?}"
        );
    }

    #[test]
    fn normal_before_a_number_is_the_usual_value_not_a_reading_found_fine() {
        // `normally 80%` dropped the clause that says
        // the oil, and the alarm was related.
        let doc = "steering_gear-en";
        let d = docs(&[doc]);
        let stg = vec![
            causes(doc, "STG-OIL-LVL-LO", "Steering gear hydraulic oil tank level low (steering oil low level). Probable causes, most likely first: 1) external leak at pipe fittings."),
            causes(doc, "STG-HYD-LOCK", "Steering gear hydraulic lock (rudder does not move, both pumps running). Probable causes, most likely first: 1) solenoid valve stuck."),
        ];
        let a = alarm(
            "LAL-402",
            "Steering gear No.2 hydraulic tank low level alarm at 15:05. Local sight glass 38%, normally 80%. Found oil under stbd ram gland",
        );
        let j = judge_with(&a, &stg, Equipment::Known(&d), &stg);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("steering_gear-en § STG-OIL-LVL-LO causes")
        );
        assert!(not_normal("hyd press dropped to 9 MPa (normal 16)").contains("hyd press"));
        assert!(not_normal("油压降到2.1bar，正常3.5bar").contains("正常3.5bar"));
        // Found fine is still ruled out.
        assert!(!not_normal("LO temp 54 degC normal").contains("LO temp"));
        assert!(!not_normal("油温正常").contains("油温"));
        // A reading named, then found normal at its value.
        assert!(!not_normal("工作水压力正常0.3 MPa").contains("压力"));
        assert!(!not_normal("LO press normal 0.3 MPa").contains("LO press"));
        // What did not happen says no way.
        assert!(!not_normal("排渣时转速没有明显下降，排渣口没有东西出来").contains("转速"));
        assert!(!not_normal("speed did not drop during discharge").contains("speed"));
        assert!(not_normal("转速明显下降").contains("转速"));
    }
}
