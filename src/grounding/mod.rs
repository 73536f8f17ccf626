//! The grounding guard: which of the model's values may be published.
//!
//! `guard` cleans a written answer: values that are not text go (the rules
//! are in `text`), causes the passages do not support go (`support`; the
//! alarm's own text is no support), and when no cause survives the answer is replaced with the
//! passages' own items (`diagnosis::from_passages`, mode "passages").
//! `guard_chosen` checks a chosen answer, whose causes and actions must be
//! the manuals' own items. `summary` is the rule both apply to the summary.
//!
//! Pure: a draft, passages and an alarm in, a diagnosis and a verdict out. It
//! never runs the model and never writes text of its own beyond the summaries
//! `diagnosis` already knows how to build.

mod support;
mod text;

use crate::alarm::Alarm;
use crate::diagnosis::{self, round2, Diagnosis, Mode};
use crate::retrieval::Hit;

pub use support::{named_cause, support, without_near_repeats};
pub use text::{is_text, split_items, strip_echo, strip_rating, tidy};

/// What the guard did to one answer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Verdict {
    /// Share of the model's causes that were text and supported, 0..1.
    pub grounded: f64,
    /// The model's causes the guard removed.
    pub dropped: usize,
    /// No cause survived: the answer is the passages' own (mode "passages").
    pub fell_back: bool,
}

/// Cleans a model's draft diagnosis: values that are not text go, causes the
/// passages do not support go, a summary that is not text is
/// replaced by the passage-built one, and with no cause left the whole answer
/// is built from the passages (mode "passages"). `grounded` is set on the
/// result, rounded to two decimals.
pub fn guard(draft: Diagnosis, passages: &[Hit], alarm: &Alarm) -> (Diagnosis, Verdict) {
    let code = alarm.code.as_str();
    let mut d = draft;
    // Each numbered item the model ran together counts as one of its causes.
    d.probable_causes = std::mem::take(&mut d.probable_causes)
        .into_iter()
        .flat_map(|c| {
            split_items(&strip_echo(&c.cause, alarm))
                .into_iter()
                .map(move |cause| diagnosis::Cause {
                    cause: strip_rating(&cause),
                    likelihood: c.likelihood.clone(),
                    source: None,
                    site: None,
                })
        })
        .collect();
    let total = d.probable_causes.len();
    d.probable_causes
        .retain(|c| is_text(&c.cause, code) && support(&c.cause, passages, alarm));
    d.probable_causes = without_near_repeats(d.probable_causes, |c| c.cause.as_str());
    let kept = d.probable_causes.len();
    let grounded = if total == 0 {
        0.0
    } else {
        kept as f64 / total as f64
    };
    let verdict = Verdict {
        grounded,
        dropped: total - kept,
        fell_back: kept == 0,
    };
    if verdict.fell_back {
        let mut p =
            diagnosis::from_passages(alarm, passages, Mode::Passages, &d.model, d.timings.clone());
        p.grounded = 0.0;
        return (p, verdict);
    }
    let actions = d
        .actions
        .iter()
        .flat_map(|a| split_items(&strip_echo(a, alarm)));
    let actions: Vec<String> = actions.filter(|a| is_text(a, code)).collect();
    d.actions = without_near_repeats(actions, |a| a.as_str());
    d.summary = summary(&d.summary, passages, alarm);
    d.grounded = round2(grounded);
    (d, verdict)
}

/// The model's summary as published: the alarm's echo and clutter taken
/// out; a summary that is no text gives way to one naming the manual.
pub fn summary(text: &str, passages: &[Hit], alarm: &Alarm) -> String {
    let s = tidy(&strip_echo(text, alarm));
    if is_text(&s, &alarm.code) {
        s
    } else {
        diagnosis::passages_summary(alarm, passages, Mode::Full)
    }
}

/// The guard of a chosen answer. Its causes and actions were picked from
/// the passages' items and are published as they are (the text rules of
/// `guard` could cut a manual's words); each must be, byte for byte, a
/// numbered item of the passage its source names. One that is not is a
/// defect of the choice code, not a model error: the error names it.
/// The summary passes the same rules as in `guard`.
pub fn guard_chosen(
    draft: Diagnosis,
    passages: &[Hit],
    alarm: &Alarm,
) -> Result<(Diagnosis, Verdict), String> {
    let items: Vec<diagnosis::Item> = passages.iter().flat_map(diagnosis::Item::of).collect();
    let is_item = |text: &str, source: Option<&String>| {
        items
            .iter()
            .any(|i| i.text == text && Some(&i.source) == source)
    };
    for c in &draft.probable_causes {
        if !is_item(&c.cause, c.source.as_ref()) {
            return Err(format!(
                "chosen cause {:?} (source {:?}) is not an item of the passages",
                c.cause, c.source
            ));
        }
    }
    if draft.actions.len() != draft.action_sources.len() {
        return Err(format!(
            "{} chosen actions but {} action sources",
            draft.actions.len(),
            draft.action_sources.len()
        ));
    }
    for (a, src) in draft.actions.iter().zip(&draft.action_sources) {
        if !is_item(a, Some(src)) {
            return Err(format!(
                "chosen action {a:?} (source {src:?}) is not an item of the passages"
            ));
        }
    }
    if draft.probable_causes.is_empty() {
        return Err("a chosen answer without a cause".into());
    }
    let mut d = draft;
    d.summary = summary(&d.summary, passages, alarm);
    d.grounded = 1.0;
    let verdict = Verdict {
        grounded: 1.0,
        dropped: 0,
        fell_back: false,
    };
    Ok((d, verdict))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::alarm::Severity;
    use crate::diagnosis::{Cause, Timings};

    // The fixtures below marked pub(super) serve the tests of `text` and
    // `support` too.
    use crate::test_support::hit;

    fn alarm(code: &str, kind: &str, message: &str) -> Alarm {
        Alarm {
            kind: Some(kind.into()),
            message: Some(message.into()),
            ..crate::test_support::alarm(code)
        }
    }

    pub(super) fn lube() -> (Alarm, Vec<Hit>) {
        (
            alarm("ME-LO-PRES-LO", "main_engine_lube_oil", "ME LO inlet press low"),
            vec![
                hit(
                    "ME-LO-PRES-LO causes",
                    "Lube oil pressure low. Probable causes, most likely first: 1) clogged filter; 2) worn pump; 3) low sump level.",
                ),
                hit(
                    "ME-LO-PRES-LO checks",
                    "Checks: 1) read the gauge at the inlet; 2) change over the duplex filter.",
                ),
            ],
        )
    }

    pub(super) fn battery_zh() -> (Alarm, Vec<Hit>) {
        (
            alarm("BAT-VOLT-LO", "battery", "夜间蓄电池电压低"),
            vec![
                hit(
                    "BAT-VOLT-LO 原因",
                    "蓄电池电压低。可能原因：1）太阳能板被鸟粪覆盖；2）充电控制器故障；3）蓄电池老化。",
                ),
                hit(
                    "BAT-VOLT-LO 检查",
                    "检查与处理：1）测量充电电流；2）清洁太阳能板。",
                ),
            ],
        )
    }

    /// The demo's Chinese lube-oil alarm as the stand-in saw it.
    pub(super) fn lube_zh() -> (Alarm, Vec<Hit>) {
        let mut a = alarm(
            "ME-LO-PRES-LO",
            "main_engine_lube_oil",
            "主机滑油进口压力低，备用泵已启动",
        );
        a.equipment = "ME1".into();
        a.severity = Severity::Critical;
        a.unit = Some("bar".into());
        a.value = Some(1.9);
        a.threshold = Some(2.5);
        (
            a,
            vec![hit(
                "ME-LO-PRES-LO 原因",
                "滑油压力低。可能原因：1）滑油滤器脏堵；2）滑油泵磨损或跳闸；3）油底壳油位低。",
            )],
        )
    }

    #[test]
    fn the_demo_answer_is_published_without_the_echo_and_with_one_item_per_cause() {
        let (a, p) = lube_zh();
        let d = draft(
            "主机滑油进口压力低，备用泵已启动 ME1 critical main_engine_lube_oil MELO-PRES-LO 2.5 bar 1",
            &["滑油滤器脏堵；2）滑油泵磨损或跳闸", "油底壳油位低"],
            &["检查滑油滤器压差", "ME1 critical main_engine_lube_oil MELO-PRES-LO 2.5 bar 1"],
        );
        let (g, v) = guard(d, &p, &a);
        assert_eq!(g.summary, "主机滑油进口压力低，备用泵已启动");
        let causes: Vec<&str> = g.probable_causes.iter().map(|c| c.cause.as_str()).collect();
        assert_eq!(causes, ["滑油滤器脏堵", "滑油泵磨损或跳闸", "油底壳油位低"]);
        assert_eq!(g.actions, ["检查滑油滤器压差"]);
        assert_eq!((v.dropped, v.fell_back), (0, false));
    }

    fn draft(summary: &str, causes: &[&str], actions: &[&str]) -> Diagnosis {
        Diagnosis {
            alarm_id: "a1".into(),
            equipment: "E1".into(),
            code: "X".into(),
            alarm_ts: "2026-01-01T00:00:00Z".into(),
            severity: "major".into(),
            summary: summary.into(),
            probable_causes: causes
                .iter()
                .map(|c| Cause {
                    cause: (*c).into(),
                    likelihood: "high".into(),
                    source: None,
                    site: None,
                })
                .collect(),
            actions: actions.iter().map(|a| (*a).into()).collect(),
            action_sources: vec![],
            sources: vec![],
            mode: Mode::Full,
            coverage: Default::default(),
            coverage_rule: None,
            coverage_note: None,
            grounded: 1.0,
            model: "m.gguf".into(),
            timings: Timings {
                prompt_tokens: 321,
                ..Default::default()
            },
            ts: "2026-11-30T00:00:00Z".into(),
        }
    }

    /// A chosen answer is published as it is, or it is a defect: a cause
    /// that lost its "严禁" shares every content word with the manual's item,
    /// so `support` would pass it; `guard_chosen` does not.
    #[test]
    fn a_chosen_item_that_is_not_the_manuals_words_is_a_defect() {
        let checks = hit(
            "ME-CC 检查与处理",
            "1）严禁在停车后10分钟内打开曲轴箱道门；2）查明原因。",
        );
        let causes = hit("ME-CC 原因", "可能原因：1）轴承过热；2）活塞环漏气。");
        let passages = [causes, checks];
        let a = alarm("ME-CC", "main_engine_crankcase", "油雾浓度高");
        let chosen = |cause: &str, src: &str, action: &str, asrc: &str| {
            let mut d = draft("曲轴箱油雾浓度高。", &[cause], &[action]);
            d.probable_causes[0].source = Some(src.into());
            d.action_sources = vec![asrc.into()];
            d
        };
        let (d, v) = guard_chosen(
            chosen(
                "轴承过热",
                "doc § ME-CC 原因 #1",
                "严禁在停车后10分钟内打开曲轴箱道门",
                "doc § ME-CC 检查与处理 #1",
            ),
            &passages,
            &a,
        )
        .unwrap();
        assert_eq!(d.actions, ["严禁在停车后10分钟内打开曲轴箱道门"]);
        assert_eq!((v.grounded, v.dropped, v.fell_back), (1.0, 0, false));
        assert!(support("在停车后10分钟内打开曲轴箱道门", &passages, &a));
        for (cause, src, action, asrc) in [
            (
                "轴承过热",
                "doc § ME-CC 原因 #1",
                "在停车后10分钟内打开曲轴箱道门",
                "doc § ME-CC 检查与处理 #1",
            ),
            (
                "轴承过热",
                "doc § ME-CC 原因 #2",
                "查明原因",
                "doc § ME-CC 检查与处理 #2",
            ),
            (
                "轴承过热或",
                "doc § ME-CC 原因 #1",
                "查明原因",
                "doc § ME-CC 检查与处理 #2",
            ),
        ] {
            let e = guard_chosen(chosen(cause, src, action, asrc), &passages, &a).unwrap_err();
            assert!(e.contains("is not an item of the passages"), "{e}");
        }
        let mut d = chosen(
            "轴承过热",
            "doc § ME-CC 原因 #1",
            "查明原因",
            "doc § ME-CC 检查与处理 #2",
        );
        d.action_sources.clear();
        assert!(guard_chosen(d, &passages, &a).is_err());
    }

    #[test]
    fn ungrounded_causes_are_dropped_and_the_share_reported() {
        let (a, hits) = lube();
        let d = draft(
            "Lube oil pressure low at the inlet",
            &[
                "clogged filter",
                "1. ME-LO-PRES-LO},{",
                "solar panel shaded",
            ],
            &[
                "1. change over the duplex filter",
                "2.",
                "ME-LO-PRES-LO",
                "likelihood:",
            ],
        );
        let (g, v) = guard(d, &hits, &a);
        assert_eq!(g.mode, Mode::Full);
        assert_eq!(g.probable_causes.len(), 1);
        assert_eq!(g.probable_causes[0].cause, "clogged filter");
        assert_eq!(g.actions, vec!["change over the duplex filter"]);
        assert_eq!(g.summary, "Lube oil pressure low at the inlet");
        assert_eq!(g.grounded, 0.33);
        assert_eq!(v.dropped, 2);
        assert!(!v.fell_back);
    }

    #[test]
    fn a_summary_that_is_not_text_is_replaced_from_the_passages() {
        let (a, hits) = lube();
        let (g, _) = guard(draft("1. ME-LO-PRES-LO},{", &["worn pump"], &[]), &hits, &a);
        assert!(is_text(&g.summary, &a.code), "{}", g.summary);
        assert!(g.summary.contains("ME-LO-PRES-LO causes"), "{}", g.summary);
        assert_eq!(g.mode, Mode::Full);
        assert_eq!(g.grounded, 1.0);
    }

    #[test]
    fn with_no_cause_left_the_passages_items_answer_and_mode_says_so() {
        let (a, hits) = battery_zh();
        let d = draft(
            "1. 5BAT-VOLT-LO},{",
            &["1. 5BAT-VOLT-LO},{", "滑油泵磨损"],
            &["BAT-VOLT-LO"],
        );
        let (g, v) = guard(d, &hits, &a);
        assert_eq!(g.mode, Mode::Passages);
        assert_eq!(g.grounded, 0.0);
        assert!(v.fell_back);
        assert_eq!(v.dropped, 2);
        assert_eq!(g.probable_causes[0].cause, "太阳能板被鸟粪覆盖");
        assert_eq!(g.actions, vec!["测量充电电流", "清洁太阳能板"]);
        assert!(g.summary.contains("手册"), "{}", g.summary);
        // The model's timings stay: it did run.
        assert_eq!(g.timings.prompt_tokens, 321);
        for c in &g.probable_causes {
            assert!(is_text(&c.cause, &a.code));
        }
    }

    /// The alarm's text is the sender's, and the queue
    /// merges alarms of one equipment and code, so a cause whose words come
    /// only from the alarm would publish what a sensor wrote as the
    /// diagnosis. In `written` mode a cause needs the manuals' words.
    #[test]
    fn a_cause_supported_only_by_the_alarms_own_text_is_not_grounded() {
        let (mut a, hits) = lube();
        a.message = Some("ME LO inlet press low, turbocharger bearing seized".into());
        a.kind = Some("turbocharger_bearing".into());
        assert!(!support("turbocharger bearing seized", &hits, &a));
        let (g, v) = guard(
            draft(
                "Lube oil pressure low",
                &["clogged filter", "turbocharger bearing seized"],
                &[],
            ),
            &hits,
            &a,
        );
        let causes: Vec<&str> = g.probable_causes.iter().map(|c| c.cause.as_str()).collect();
        assert_eq!(causes, ["clogged filter"]);
        assert_eq!((v.dropped, g.grounded), (1, 0.5));
    }

    #[test]
    fn without_passages_no_cause_is_supported() {
        let a = alarm(
            "ME-JCW-TEMP-HI",
            "main_engine_cooling",
            "JCW outlet temp high cyl 3",
        );
        assert!(!support("outlet temperature high on cylinder 3", &[], &a));
        let (g, v) = guard(
            draft(
                "Cooling water hot",
                &[
                    "fuel filter clogged",
                    "outlet temperature high on cylinder 3",
                ],
                &[],
            ),
            &[],
            &a,
        );
        assert!(v.fell_back);
        assert_eq!(g.mode, Mode::Passages);
        assert!(g.probable_causes.is_empty());
        assert!(!g.summary.is_empty());
    }
}
