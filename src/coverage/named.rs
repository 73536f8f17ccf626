//! The named path: a long message that names one of its equipment's
//! sections' alarms in full among much else. Owns a section's names for its
//! alarm (`names`), what a message says without the words for it
//! (`implied`), and the share of a name the message holds (`named`).

use crate::reading::{plain_degree, Deviation, Quantity};
use crate::retrieval::Hit;

use super::own_alarm;
use super::terms::{cjk_units_out, same_word, text_terms, Alarms, Terms};

/// A long message says much besides the fault (where, since when, what
/// else was seen), so the share of it a section's alarm holds stays low
/// even when it names that alarm in full. The other way round: the message
/// holding this share of one of a section's names for its alarm (the
/// sentence before its bracket, or one of the short forms in it), each word
/// and Chinese character weighed as `Terms::weighted` weighs the message's,
/// so that what every alarm of the equipment says counts for little and
/// what only this one says decides.
pub const NAMED_AT: f32 = 0.8;

/// A name of fewer words and characters than this (`bilge alarm`, `火警`,
/// `no output`) is held by messages about other faults too.
pub(super) const NAMED_UNITS: usize = 3;

/// The names a section's own alarm gives it: the sentence before its
/// bracket (and each side of a `:` or an `or` in it), and each short form
/// in the bracket ("Ballast pump discharge pressure low or lost suction (ballast
/// pump press low)").
pub(super) fn names(lead: &str) -> Vec<&str> {
    let lead = lead.trim_end_matches(['.', '。']);
    let (main, bracket) = match lead.find(['(', '（']) {
        Some(i) => (&lead[..i], &lead[i..]),
        None => (lead, ""),
    };
    let mut out = vec![main];
    out.extend(main.split([':', '：']));
    // "A or B" names the alarm by either.
    out.extend(main.split(" or ").flat_map(|n| n.split('或')));
    out.extend(
        bracket
            .trim_matches(['(', ')', '（', '）'])
            .split([',', '，', '、', ';', '；']),
    );
    out.retain(|n| !n.trim().is_empty());
    out.dedup();
    out
}

/// What a message says without the words for it: the quantity its
/// reading's unit names (`93 degC`), the way its trend or its reading
/// against its threshold goes (`and rising`, `1.9 bar` under `2.2`), in the
/// words a section's own alarm says them with, so that `ME JW outlet 93
/// degC and rising` names `jacket water outlet temperature high`.
pub(super) fn implied(
    quantity: Option<Quantity>,
    way: Option<Deviation>,
    differential: bool,
) -> String {
    // A way alone may be another reading's (`level still rising` beside
    // `steam press`), a quantity alone says no fault.
    let (Some(quantity), Some(way)) = (quantity, way) else {
        return String::new();
    };
    // A difference of two pressures (`oil diff press`, `油压差`) reads in
    // bar too, but a section for the pressure is not one for it.
    if differential {
        return String::new();
    }
    let (q_en, q_zh) = match quantity {
        Quantity::Temperature => ("temperature", "温度"),
        Quantity::Pressure => ("pressure", "压力"),
        Quantity::Level => ("level", "液位"),
        Quantity::Vibration => ("vibration", "振动"),
        Quantity::Speed => ("speed", "转速"),
        Quantity::Voltage => ("voltage", "电压"),
        Quantity::Current => ("current", "电流"),
        Quantity::Flow => ("flow", "流量"),
        Quantity::Viscosity => ("viscosity", "粘度"),
    };
    let (w_en, w_zh) = match way {
        Deviation::High => ("high", "高"),
        Deviation::Low => ("low", "低"),
    };
    // Chinese is read in pairs: the way is found beside its quantity.
    format!("{q_en} {w_en} {q_zh}{w_zh}")
}

/// Whether a message names a differential pressure (`diff press`, `dP`,
/// `压差`).
pub(super) fn differential(message: &str) -> bool {
    let lower = message.to_ascii_lowercase();
    lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .any(|w| matches!(w, "diff" | "differential" | "dp" | "dpi" | "delta"))
        || message.contains("压差")
}

/// The causes section among `sections` (the message's script's, `mine`)
/// whose alarm the message names best, when `faulty` (the message less
/// what it rules out, `not_normal`) holds `NAMED_AT` of one of its names;
/// of equals, the one retrieval ranks first.
pub(super) fn named<'s>(
    message: &str,
    faulty: &str,
    sections: &'s [Hit],
    hits: &[Hit],
    alarms: &Alarms,
    mine: &dyn Fn(&Hit) -> bool,
) -> Option<&'s Hit> {
    // Of sections named as well, the one retrieval ranks first.
    let rank = |h: &Hit| {
        hits.iter()
            .filter(|r| r.doc == h.doc && r.section.code() == h.section.code())
            .map(|r| r.score)
            .fold(0.0, f32::max)
    };
    let mut sections: Vec<&Hit> = sections.iter().filter(|h| mine(h)).collect();
    sections.sort_by(|a, b| rank(b).total_cmp(&rank(a)));
    let mut said = text_terms(&plain_degree(&cjk_units_out(
        &crate::retrieval::glossary::expand(faulty),
    )));
    // A reading high or low is out of its range: it names a section's
    // alarm for its quantity abnormal (`viscosity low`, "fuel oil viscosity
    // abnormal"; `粘度低`, "燃油粘度异常"). Added after the glossary, which
    // reads `异常` as a failure.
    if said.iter().any(|w| matches!(w.as_str(), "high" | "low")) {
        let zh: Vec<String> = said
            .iter()
            .filter_map(|w| w.strip_suffix(['高', '低']))
            .filter(|q| q.chars().count() == 1)
            .map(|q| format!("{q}异"))
            .collect();
        said.extend(zh);
        said.extend(["abnormal", "range", "异常"].map(String::from));
    }
    let zh = crate::language::has_cjk(message);
    let mut best: (f32, Option<&Hit>) = (0.0, None);
    for h in sections {
        let Some(lead) = own_alarm(h) else { continue };
        if crate::language::has_cjk(lead) != zh {
            continue;
        }
        for name in names(lead) {
            let terms = Terms::of(name).weighted(alarms);
            if terms.units() < NAMED_UNITS {
                continue;
            }
            let s = terms.share_of(&terms.found_by(&said, |a, b| same_word(b, a)));
            if s > best.0 {
                best = (s, Some(h));
            }
        }
    }
    best.1.filter(|_| best.0 >= NAMED_AT)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarm::Alarm;
    use crate::coverage::fixtures::lube_oil;
    use crate::coverage::fixtures::*;
    use crate::coverage::{judge_with, Coverage, Equipment, COVERED_AT};

    #[test]
    fn a_section_named_in_the_trades_words_covers_the_alarm() {
        // `will not start` is the manual's `start failure`; `跳开` its
        // `跳闸`. Without the trade's words both were related.
        let d = docs(&["main_engine_starting_air-en"]);
        let a = alarm("XA-3301", "Main engine will not start from bridge control");
        let j = judge_with(&a, &starting_air(), Equipment::Known(&d), &starting_air());
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("main_engine_starting_air-en § ME-SA-START-FAIL causes")
        );
        let d = docs(&["generator-zh"]);
        let a = alarm(
            "AL-2207",
            "2号发电机并联运行时主开关突然跳开，保护继电器显示功率倒送",
        );
        let j = judge_with(&a, &generator_zh(), Equipment::Known(&d), &generator_zh());
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("generator-zh § DG-REV-PWR 原因")
        );
        // The same machine's fault no section names stays related.
        let d = docs(&["main_engine_starting_air-en"]);
        let a = alarm("XA-3302", "Main engine turning gear engaged interlock");
        let j = judge_with(&a, &starting_air(), Equipment::Known(&d), &starting_air());
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
    }

    #[test]
    fn of_two_sections_named_alike_the_one_retrieval_ranks_first_is_taken() {
        let d = docs(&["main_engine_lube_oil-en"]);
        // Names both the low inlet pressure and the filter's dP; retrieval
        // ranks the filter first.
        let msg = "Watch log: ME LO filter DP high on the autofilter, counter unchanged; LO inlet pressure LO 2.2 bar";
        let mut hits = lube_oil();
        hits[0].score = 10.0;
        hits[2].score = 12.0;
        let a = alarm("XA-1", msg);
        let j = judge_with(&a, &hits, Equipment::Known(&d), &lube_oil());
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("main_engine_lube_oil-en § ME-LO-FILT-DP-HI causes"),
            "{j:?}"
        );
        // `still` with no change is as it was: not the fault.
        let still = alarm(
            "XA-1",
            "Autofilter flushing every minute; LO inlet pressure still 2.2 bar",
        );
        assert_eq!(
            judge_with(&still, &lube_oil(), Equipment::Known(&d), &lube_oil()).coverage,
            Coverage::Related
        );
    }

    #[test]
    fn a_long_message_that_names_a_sections_alarm_is_covered() {
        // A watchkeeper's sentence holds far more than the alarm, so the
        // section's alarm holds little of it; it still names that alarm.
        let en = docs(&["ballast-en"]);
        let a = alarm(
            "PT-4411-L",
            "No.2 ballast pump discharge pressure low, 0.8 bar during deballasting of \
             No.3 P WBT, suction vacuum unstable, eductor line-up checked twice by the duty AB",
        );
        let j = judge_with(&a, &ballast(), Equipment::Known(&en), &ballast());
        assert!(j.best < COVERED_AT, "{j:?}");
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("ballast-en § BAL-PUMP-PRES-LO causes")
        );
        let zh = docs(&["ballast-zh"]);
        let a = alarm(
            "PT-4411-L",
            "2号压载泵排出压力低 0.8bar，吸口真空不稳，已改用扫舱泵，值班水手已检查过阀门线路",
        );
        let j = judge_with(&a, &ballast_zh(), Equipment::Known(&zh), &ballast_zh());
        assert!(j.best < COVERED_AT, "{j:?}");
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("ballast-zh § BAL-PUMP-PRES-LO 原因")
        );
    }

    #[test]
    fn a_message_that_says_its_quantity_and_way_by_its_reading_names_the_alarm() {
        let en = docs(&["main_engine_lube_oil-en"]);
        let reading = |message: &str, v: Option<f64>, t: Option<f64>| Alarm {
            value: v,
            threshold: t,
            unit: Some("bar".into()),
            ..alarm("PT-2001-L", message)
        };
        let judged = |a: &Alarm| judge_with(a, &lube_oil(), Equipment::Known(&en), &lube_oil());
        // `bar` is a pressure, 1.9 under 2.2 a low one: the lube oil
        // inlet pressure low, which the message never says in words.
        let message = "ME LO inlet 1.9 bar, main bearings following it down";
        let j = judged(&reading(message, Some(1.9), Some(2.2)));
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("main_engine_lube_oil-en § ME-LO-PRES-LO causes")
        );
        // Without its threshold the reading says no way, and the message
        // names no alarm.
        let j = judged(&reading(message, Some(1.9), None));
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // A trend says the way as well as a threshold does.
        let j = judged(&reading("ME LO inlet 1.9 bar and falling", None, None));
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
    }

    #[test]
    fn a_reading_of_another_quantity_gives_no_way_to_the_one_the_words_name() {
        // An uncovered fault: the drum paying out 0.3 m/min past a
        // limit of 0.1 says nothing of the oil temperature the log names.
        let doc = "winch-en";
        let winch = vec![
            causes(doc, "WIN-HYD-TEMP-HI", "Winch hydraulic oil temperature high (oil hot, hydraulic overheat). Probable causes, most likely first: 1) oil cooler fouled or cooling water off."),
            causes(doc, "WIN-HYD-PRES-LO", "Winch hydraulic pressure low (low pressure, no power to drum). Probable causes, most likely first: 1) low oil level from a leak."),
        ];
        let en = docs(&[doc]);
        let creep = |unit: &str| Alarm {
            value: Some(0.3),
            threshold: Some(0.1),
            unit: Some(unit.into()),
            ..alarm(
                "WN-22",
                "CTD winch drum paying out with the brake applied. Hyd press 180 bar normal, \
                 hydraulic oil temp 45 C.",
            )
        };
        let j = judge_with(&creep("m/min"), &winch, Equipment::Known(&en), &winch);
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // The same reading in degrees is the oil's temperature over its limit.
        let j = judge_with(&creep("degC"), &winch, Equipment::Known(&en), &winch);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
    }

    #[test]
    fn a_differential_pressure_is_not_the_pressure_its_reading_implies() {
        // An uncovered fault: a compressor's oil differential
        // pressure, 0.4 bar under 0.7, is not its suction pressure low.
        let doc = "refrigeration-en";
        let refrigeration = vec![
            causes(doc, "REF-COMP-HP-TRIP", "Refrigeration compressor high pressure cutout (HP trip, discharge pressure high). Probable causes, most likely first: 1) low condenser cooling water flow."),
            causes(doc, "REF-COMP-LP-TRIP", "Refrigeration compressor low pressure cutout (LP trip, suction pressure low). Probable causes, most likely first: 1) refrigerant shortage from a leak."),
        ];
        let en = docs(&[doc]);
        let trip = |message: &str| Alarm {
            value: Some(0.4),
            threshold: Some(0.7),
            unit: Some("bar".into()),
            ..alarm("XA-7301", message)
        };
        let judged =
            |a: &Alarm| judge_with(a, &refrigeration, Equipment::Known(&en), &refrigeration);
        let j = judged(&trip("PROV REF COMP No.1 OIL DIFF PRESS TRIP"));
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        let j = judged(&trip("伙食冷库1号压缩机油压差低停机"));
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // The same reading of the compressor's own pressure is its cutout.
        let j = judged(&trip("PROV REF COMP No.1 PRESS TRIP"));
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("refrigeration-en § REF-COMP-LP-TRIP causes")
        );
    }

    #[test]
    fn naming_only_the_equipment_or_a_fault_ruled_out_is_not_naming_the_alarm() {
        let en = docs(&["ballast-en"]);
        // A pump that will not start has no section.
        let a = alarm(
            "XA-17",
            "Ballast pump will not start from the console, no running feedback",
        );
        let j = judge_with(&a, &ballast(), Equipment::Known(&en), &ballast());
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        // What was checked and found normal is the fault it is not.
        let a = alarm(
            "XA-17",
            "Ballast pump trips on start, motor overload relay; pump discharge pressure low \
             or lost suction checked: normal",
        );
        let j = judge_with(&a, &ballast(), Equipment::Known(&en), &ballast());
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        let zh = docs(&["ballast-zh"]);
        let a = alarm(
            "XA-17",
            "1号压载泵启动失败，控制箱无运行反馈，排出压力低未见",
        );
        let j = judge_with(&a, &ballast_zh(), Equipment::Known(&zh), &ballast_zh());
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
        assert!(names_one(
            "1号压载泵启动失败，控制箱无运行反馈，排出压力低",
            &ballast_zh()
        ));
        assert!(names_one(
            "pump discharge pressure low or lost suction",
            &ballast()
        ));
        // A short form of under three words and characters names nothing
        // on its own: `position fail` is half of every valve message.
        assert_eq!(
            names("Ballast remote valve failure (valve fail to open or close, position fail)."),
            vec![
                "Ballast remote valve failure ",
                "valve fail to open or close",
                " position fail"
            ]
        );
        assert!(!names_one("valve position fail", &ballast()));
    }

    #[test]
    fn a_reading_high_or_low_names_its_quantity_abnormal() {
        // A plant's `viscosity low` is
        // the manual's `fuel oil viscosity abnormal`.
        let doc = "main_engine_fuel-en";
        let d = docs(&[doc]);
        let fuel = vec![
            causes(doc, "ME-FO-VISC-ABN", "Main engine fuel oil viscosity abnormal at engine inlet (visco high or low, viscosity controller alarm). Probable causes, most likely first: 1) fuel heater steam control valve fault."),
            causes(doc, "ME-FO-PRES-LO", "Main engine fuel oil inlet pressure low (FO press low, booster or circulating pressure low). Probable causes, most likely first: 1) fuel oil fine filter clogged."),
        ];
        let a = reading(
            "ME FO viscosity low at engine inlet 1.6 cSt, set 2.0. Running on new MGO delivered yesterday.",
            1.6,
            "cSt",
            2.0,
        );
        let j = judge_with(&a, &fuel, Equipment::Known(&d), &fuel);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("main_engine_fuel-en § ME-FO-VISC-ABN causes")
        );
        let doc = "main_engine_fuel-zh";
        let d = docs(&[doc]);
        let fuel = vec![
            causes(doc, "ME-FO-VISC-ABN", "主机进机燃油粘度异常（粘度高或低）。可能原因：1）燃油加热器蒸汽调节阀或粘度控制器故障。"),
            causes(doc, "ME-FO-PRES-LO", "主机燃油进机压力低（供油泵、循环泵压力低）。可能原因：1）燃油细滤器或自清滤器堵塞。"),
        ];
        let a = alarm("AL-5521", "主机进机燃油粘度偏低，刚换轻油");
        let j = judge_with(&a, &fuel, Equipment::Known(&d), &fuel);
        assert_eq!(j.coverage, Coverage::Covered, "{j:?}");
        assert_eq!(
            j.section.as_ref().map(ToString::to_string).as_deref(),
            Some("main_engine_fuel-zh § ME-FO-VISC-ABN 原因")
        );
        // `异常` added here is no failure: an uncovered start air
        // pressure high, is not the engine's start failure.
        let d = docs(&["main_engine_starting_air-en"]);
        let a = reading(
            "No.1 main air receiver START AIR PRESS HIGH",
            31.5,
            "bar",
            31.0,
        );
        let j = judge_with(&a, &starting_air(), Equipment::Known(&d), &starting_air());
        assert_eq!(j.coverage, Coverage::Related, "{j:?}");
    }
}
