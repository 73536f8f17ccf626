//! Builders the coverage room's unit tests share: alarms, causes sections
//! of a few manuals, and example sets, as `judge_in` would pass them.

use crate::alarm::Alarm;
use crate::retrieval::Hit;

use super::examples::Examples;
use super::named::named;
use super::terms::Alarms;
use super::*;
use crate::reading::not_normal;

pub(super) fn causes(doc: &str, code: &str, text: &str) -> Hit {
    let (section, lang) = match crate::language::has_cjk(text) {
        true => (format!("{code} 原因"), "zh"),
        false => (format!("{code} causes"), "en"),
    };
    Hit {
        doc: doc.into(),
        lang: lang.into(),
        title: match lang {
            "zh" => "压载水系统与压载水处理装置".into(),
            _ => "Ballast system and ballast water treatment".into(),
        },
        ..crate::test_support::hit(&section, text)
    }
}

pub(super) fn alarm(code: &str, message: &str) -> Alarm {
    Alarm {
        message: Some(message.into()),
        ..crate::test_support::alarm(code)
    }
}

pub(super) fn ballast() -> Vec<Hit> {
    vec![
        causes(
            "ballast-en",
            "BAL-PUMP-PRES-LO",
            "Ballast pump discharge pressure low or lost suction (ballast pump press low). Probable causes, most likely first: 1) tank almost empty; 2) air leak on suction.",
        ),
        causes(
            "ballast-en",
            "BAL-VLV-FAIL",
            "Ballast remote valve failure (valve fail to open or close, position fail). Probable causes, most likely first: 1) low hydraulic power pack pressure.",
        ),
    ]
}

pub(super) fn ballast_zh() -> Vec<Hit> {
    vec![
        causes(
            "ballast-zh",
            "BAL-PUMP-PRES-LO",
            "压载泵排出压力低或吸不上水。可能原因：1）舱内水已接近抽空；2）吸入管漏气。",
        ),
        causes(
            "ballast-zh",
            "BAL-VLV-FAIL",
            "压载遥控阀故障（阀门开关失败、阀位故障）。可能原因：1）液压站压力低或电磁阀故障。",
        ),
    ]
}

pub(super) fn docs(ids: &[&str]) -> Vec<String> {
    ids.iter().map(|s| s.to_string()).collect()
}

pub(super) fn lube_oil() -> Vec<Hit> {
    let doc = "main_engine_lube_oil-en";
    vec![
        causes(doc, "ME-LO-PRES-LO", "Main engine lube oil inlet pressure low (LO press low, main bearing oil pressure low). Probable causes, most likely first: 1) clogged LO automatic filter."),
        causes(doc, "ME-LO-TEMP-HI", "Main engine lube oil inlet temperature high (LO temp high, oil cooler outlet temperature high). Probable causes, most likely first: 1) LO cooler fouled."),
        causes(doc, "ME-LO-FILT-DP-HI", "Main engine lube oil filter differential pressure high (LO filter DP high, autofilter clogged). Probable causes, most likely first: 1) automatic back-flushing not working."),
    ]
}

pub(super) fn starting_air() -> Vec<Hit> {
    let doc = "main_engine_starting_air-en";
    vec![
        causes(doc, "ME-SA-PRES-LO", "Main engine starting air receiver pressure low (start air press low, air bottle pressure low, normally 25–30 bar). Probable causes, most likely first: 1) compressor not running."),
        causes(doc, "ME-SA-START-FAIL", "Main engine start failure (failed to start, no start air, engine does not fire). Probable causes, most likely first: 1) main starting valve stuck."),
        causes(doc, "ME-SA-PIPE-TEMP-HI", "Main engine starting air pipe temperature high on a cylinder branch (start air line hot). Probable causes, most likely first: 1) cylinder starting valve leaking."),
    ]
}

pub(super) fn generator_zh() -> Vec<Hit> {
    let doc = "generator-zh";
    vec![
        causes(doc, "DG-REV-PWR", "柴油发电机逆功率跳闸（发电机变电动机运行）。可能原因，按可能性排序：1）原动机燃油供给中断。"),
        causes(doc, "DG-OVERSPEED", "柴油发电机超速停车（转速过高）。可能原因，按可能性排序：1）调速器故障。"),
        causes(doc, "DG-FREQ-LO", "发电机频率低（电网频率低，转速下降）。可能原因，按可能性排序：1）负载过大。"),
        causes(doc, "DG-LO-PRES-LO", "柴油发电机滑油压力低。可能原因，按可能性排序：1）油底壳油位低。"),
    ]
}

/// `sections` scored as retrieval would rank them: the first far ahead.
pub(super) fn ranked(doc: &str, sections: &[(&str, &str)]) -> Vec<Hit> {
    sections
        .iter()
        .enumerate()
        .map(|(i, (code, lead))| Hit {
            score: if i == 0 { 30.0 } else { 5.0 },
            ..causes(
                doc,
                code,
                &format!("{lead} Probable causes, most likely first: 1) a cause."),
            )
        })
        .collect()
}

/// Whether `message` names one of `sections`' alarms (`named`).
pub(super) fn names_one(message: &str, sections: &[Hit]) -> bool {
    let alarms: Vec<String> = sections
        .iter()
        .filter_map(|h| own_alarm(h).map(str::to_string))
        .collect();
    named(
        message,
        &not_normal(message),
        sections,
        &[],
        &Alarms::of(&alarms),
        &|_| true,
    )
    .is_some()
}

pub(super) fn reading(message: &str, value: f64, unit: &str, threshold: f64) -> Alarm {
    Alarm {
        value: Some(value),
        unit: Some(unit.into()),
        threshold: Some(threshold),
        ..alarm("T-1", message)
    }
}

/// Asserts `a`'s coverage judged against one causes section that
/// retrieval ranks far ahead of any other, so that the ranking rule
/// would take it for covered but for a veto.
pub(super) fn says(doc: &str, code: &str, text: &str, a: &Alarm, want: Coverage) {
    let hit = Hit {
        score: 30.0,
        ..causes(doc, code, text)
    };
    let j = judge(a, &[hit], Equipment::Known(&docs(&[doc])));
    assert_eq!(j.coverage, want, "{a:?}: {j:?}");
}

pub(super) fn scored(mut hits: Vec<Hit>, scores: &[f32]) -> Vec<Hit> {
    for (h, s) in hits.iter_mut().zip(scores) {
        h.score = *s;
    }
    hits
}

/// The dissolved-oxygen manual's own alarms (zh), as `judge_in` reads
/// them from the index.
pub(super) fn do_alarms() -> Vec<String> {
    [
        "溶解氧读数偏低或持续下降（DO低、溶氧下降）。",
        "溶解氧超量程（数值不合理、过饱和尖峰、出现负值）。",
        "溶解氧光极错误：无读数或相位、振幅错误（传感器故障、无信号）。",
    ]
    .map(String::from)
    .to_vec()
}

/// The DO manual's causes sections, as `judge_in` passes them.
pub(super) fn do_sections() -> Vec<Hit> {
    let codes = ["DO-READ-LO", "DO-OUT-RANGE", "DO-OPTODE-ERR"];
    do_alarms()
        .iter()
        .zip(codes)
        .map(|(lead, code)| {
            causes(
                "dissolved_oxygen-zh",
                code,
                &format!("{lead}可能原因：1）x。"),
            )
        })
        .collect()
}

pub(super) fn optode() -> Hit {
    Hit {
        doc: "dissolved_oxygen-zh".into(),
        title: "溶解氧传感器".into(),
        ..causes(
            "dissolved_oxygen-zh",
            "DO-OPTODE-ERR",
            "溶解氧光极错误：无读数或相位、振幅错误（传感器故障、无信号）。可能原因：1）光极膜损坏。",
        )
    }
}

pub(super) fn purifier() -> (Vec<Hit>, Vec<String>) {
    let doc = "purifier-en";
    let sections = vec![
        causes(doc, "PUR-DISCH-FAIL", "Purifier sludge discharge failure (no discharge, bowl does not open). Probable causes, most likely first: 1) operating water solenoid valve not opening."),
        causes(doc, "PUR-OIL-LOSS", "Purifier oil loss through the sludge port (oil loss, bowl not closing). Probable causes, most likely first: 1) worn bowl seal ring."),
    ];
    (sections, docs(&[doc]))
}

/// One example alarm row, as `Examples::of` takes it.
pub(super) fn example(set: &str, kind: &str, message: &str, section: Option<&str>) -> Row4 {
    (
        set.to_string(),
        kind.to_string(),
        message.to_string(),
        section.map(str::to_string),
    )
}

pub(super) type Row4 = (String, String, String, Option<String>);

/// Another plant's wording of the sludge discharge failure and the given
/// uncovered faults of the separator as examples, this plant's alarm of
/// the same fault in other words, and its nearest example.
pub(super) fn sludge_discharge(uncovered: &[&str]) -> (Examples, Alarm, examples::Nearest) {
    sludge_discharge_among(uncovered, &[])
}

/// `sludge_discharge`, with wordings of other covered faults too
/// (message, section).
pub(super) fn sludge_discharge_among(
    uncovered: &[&str],
    covered: &[(&str, &str)],
) -> (Examples, Alarm, examples::Nearest) {
    let mut rows = vec![example(
        "10",
        "purifier",
        "HFO SEP No.1 ejection not confirmed, feed stopped",
        Some("PUR-DISCH-FAIL"),
    )];
    rows.extend(
        uncovered
            .iter()
            .enumerate()
            .map(|(i, m)| example(&format!("1{}", i + 1), "purifier", m, None)),
    );
    rows.extend(
        covered
            .iter()
            .enumerate()
            .map(|(i, (m, code))| example(&format!("2{}", i + 1), "purifier", m, Some(code))),
    );
    let ex = Examples::of(rows);
    let mut a = alarm(
        "XA-8021",
        "HFO separator ejection missing after sludge cycle",
    );
    a.kind = Some("purifier".into());
    let n = ex
        .nearest(&["purifier".into()], a.message.as_deref().unwrap())
        .unwrap();
    (ex, a, n)
}

/// The test's example can name another of the alarm's own sections
/// (`RANKED_AT`) but is not near enough to speak alone (`NEAR_AT`).
pub(super) fn assert_near_enough_for_another_own_section(n: &examples::Nearest) {
    assert!(
        n.similarity >= examples::RANKED_AT
            && n.similarity < examples::NEAR_AT
            && n.lead >= examples::AGREED_LEAD_AT,
        "the example must be near enough for another own section, not NEAR_AT: {n:?}"
    );
}

pub(super) fn fresh_water_generator() -> Vec<Hit> {
    let doc = "fresh_water_generator-en";
    vec![
        causes(doc, "FWG-SALINITY-HI", "Fresh water generator distillate salinity high (salinometer alarm, FWG high ppm). Probable causes, most likely first: 1) violent boiling carrying brine over."),
        causes(doc, "FWG-VACUUM-LO", "Fresh water generator vacuum low (shell vacuum low, FWG vacuum lost). Probable causes, most likely first: 1) ejector pump pressure low."),
    ]
}
