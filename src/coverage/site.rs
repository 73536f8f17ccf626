//! Site notes as coverage reads them: which of the crew's notes are about
//! an alarm's fault (`about`), the confirmed manual item whose section
//! then covers it (`covering`), and what the notes say of each cause
//! (`said`), for `diagnosis::site` to rank by.
//!
//! A note is about an alarm's fault when it is of the same equipment, its
//! alarm does not say another way, quantity or medium, and it was raised
//! under the same code or in words alike by the examples' measure
//! (`NOTE_NEAR_AT`). Pure: notes and an alarm in; no I/O, no model.

use crate::alarm::{Alarm, Severity};
use crate::diagnosis::site::{Last, Said, SaidCause, Site, Tally};
use crate::diagnosis::ItemRef;
use crate::notes::{Note, NoteCause, SiteNotes, Verdict};

use super::{Examples, Reading};

/// A note raised under another code than the alarm's is about the same
/// fault when its message is at least this alike to the alarm's (cosine
/// of TF-IDF vectors, `Examples::likeness`): nearly the same words. On the
/// history sets' tuning parts every later occurrence kept its code, and at
/// 0.45 six alarms of other faults on the same equipment took a note
/// (`GEN BRG TEMP HIGH` against `GEN WINDING TEMP HIGH`, `1号燃油分油机跑油`
/// against `1号燃油分油机排渣失败`: short messages that are mostly the
/// machine's name); at 0.7 none did.
pub const NOTE_NEAR_AT: f32 = 0.7;

/// A term held by at least this share of a vessel's notes' messages, once
/// it has `FORM_NOTES_AT` notes, is its forms' words (`NOTIF`, `DAMAGE:`,
/// `通知单`, `损坏代码`), not a fault's: no example holds such a word, so
/// it weighs as the rarest and would make any two of the vessel's alarms
/// alike. It is left out of the likeness of a note's alarm and a new one.
/// On the history sets' tuning parts any share from 0.1 to 0.2 keeps every
/// note off other faults and finds every later occurrence; at 0.25 a
/// battery's hydrogen alarm took a cell-imbalance note, both raised as
/// `通知单 …，损坏代码：…` among a vessel's mostly English notifications.
pub const FORM_SHARE_AT: f32 = 0.15;
pub const FORM_NOTES_AT: usize = 8;

/// A note about an alarm's fault, and how it was matched.
#[derive(Debug, Clone)]
pub struct Noted<'n> {
    pub note: &'n Note,
    /// Raised under the alarm's own code.
    pub same_code: bool,
    /// Its message's likeness to the alarm's.
    pub likeness: f32,
}

/// The notes of `notes` about `alarm`'s fault, nearest first: same
/// equipment, no other way, quantity or medium, and the same code or
/// `NOTE_NEAR_AT` alike.
pub fn about<'n>(notes: &'n SiteNotes, alarm: &Alarm, examples: &Examples) -> Vec<Noted<'n>> {
    let mut out = Vec::new();
    let mine = Reading::of(alarm, &[]);
    let form = form_words(notes);
    let skip = |t: &str| form.contains(t);
    for note in notes.for_equipment(&alarm.equipment) {
        let theirs = noted_alarm(note);
        if apart(&mine, &Reading::of(&theirs, &[])) {
            continue;
        }
        let same_code = note
            .alarm
            .code
            .trim()
            .eq_ignore_ascii_case(alarm.code.trim());
        let likeness = examples.likeness_but(&mine.message, &message(&theirs), &skip);
        if same_code || likeness >= NOTE_NEAR_AT {
            out.push(Noted {
                note,
                same_code,
                likeness,
            });
        }
    }
    out.sort_by(|a, b| {
        b.same_code
            .cmp(&a.same_code)
            .then(b.likeness.total_cmp(&a.likeness))
    });
    out
}

/// The terms `FORM_SHARE_AT` of the vessel's notes' messages hold, once it
/// has `FORM_NOTES_AT` notes; none before.
fn form_words(notes: &SiteNotes) -> std::collections::HashSet<String> {
    let all = notes.all();
    if all.len() < FORM_NOTES_AT {
        return Default::default();
    }
    let mut held: std::collections::HashMap<String, usize> = Default::default();
    for n in all {
        let mut terms = super::examples::likeness_terms(&message(&noted_alarm(n)));
        terms.sort();
        terms.dedup();
        for t in terms {
            *held.entry(t).or_default() += 1;
        }
    }
    let at = FORM_SHARE_AT * all.len() as f32;
    held.into_iter()
        .filter(|&(_, k)| k as f32 >= at)
        .map(|(t, _)| t)
        .collect()
}

/// The message coverage reads: the code when there is none.
fn message(a: &Alarm) -> String {
    a.message
        .as_deref()
        .filter(|m| !m.trim().is_empty())
        .unwrap_or(&a.code)
        .to_string()
}

/// A note's alarm as coverage reads alarms.
fn noted_alarm(n: &Note) -> Alarm {
    Alarm {
        id: n.answered.alarm_id.clone(),
        ts: n.answered.alarm_ts.clone(),
        equipment: n.alarm.equipment.clone(),
        code: n.alarm.code.clone(),
        severity: Severity::Major,
        kind: n.alarm.kind.clone(),
        value: n.alarm.value,
        unit: n.alarm.unit.clone(),
        threshold: n.alarm.threshold,
        message: n.alarm.message.clone(),
    }
}

/// Two alarms that say another way (high, low), quantity or medium are
/// two faults, however alike their other words; read in what each did not
/// find fine (`Reading::faulty`), since a log names the readings it
/// checked, else, for the way, in its own value against its threshold.
fn apart(a: &Reading, b: &Reading) -> bool {
    fn differ<T: PartialEq>(a: Option<T>, b: Option<T>) -> bool {
        matches!((a, b), (Some(x), Some(y)) if x != y)
    }
    differ(a.faulty_way.or(a.own_way), b.faulty_way.or(b.own_way))
        || differ(a.faulty_quantity, b.faulty_quantity)
        || differ(a.medium, b.medium)
}

/// The confirmed manual item a note names, whose section covers the
/// alarm: of the notes about it, the first (same code, then most alike)
/// confirming an item the crew has not rejected as often here.
pub fn covering<'n>(noted: &[Noted<'n>]) -> Option<(&'n Note, ItemRef)> {
    let site = said(noted, None);
    noted.iter().find_map(|n| {
        let NoteCause::Source(s) = &n.note.cause else {
            return None;
        };
        let item = ItemRef::parse(s).filter(|_| n.note.verdict == Verdict::Confirmed)?;
        let real = site.causes.iter().any(|c| match &c.said {
            Said::Item { item: i, .. } => i.same(&item) && c.tally.confirmed > c.tally.rejected,
            Said::Crew { .. } => false,
        });
        real.then_some((n.note, item))
    })
}

/// What the notes about a fault say of each cause: one tally per manual
/// item (in either language) and per crew-written cause (the same words up
/// to case and spacing), the latest note last; crew causes latest first.
/// `covering` is the note coverage rested on.
pub fn said(noted: &[Noted], covering: Option<String>) -> Site {
    let mut causes: Vec<SaidCause> = Vec::new();
    let mut by_time: Vec<&Note> = noted.iter().map(|n| n.note).collect();
    by_time.sort_by_key(|n| when(&n.ts));
    for note in by_time {
        let said = match &note.cause {
            NoteCause::Source(s) => {
                let Some(item) = ItemRef::parse(s) else {
                    continue;
                };
                let text = note
                    .answered
                    .causes
                    .iter()
                    .find(|c| c.source.as_deref() == Some(s))
                    .map_or_else(|| s.clone(), |c| c.cause.clone());
                Said::Item {
                    item,
                    text,
                    source: s.clone(),
                }
            }
            NoteCause::Text(t) => Said::Crew { text: t.clone() },
        };
        let at = causes.iter().position(|c| same(&c.said, &said));
        let i = at.unwrap_or_else(|| {
            causes.push(SaidCause {
                said,
                tally: Tally::default(),
                note: None,
            });
            causes.len() - 1
        });
        let c = &mut causes[i];
        match note.verdict {
            Verdict::Confirmed => {
                c.tally.confirmed += 1;
                c.note = Some(note.id.clone());
            }
            Verdict::Rejected => c.tally.rejected += 1,
        }
        c.tally.last = Some(Last {
            by: note.by.clone(),
            ts: note.ts.clone(),
            vessel: note.vessel.clone(),
        });
    }
    // Items in the order first noted; crew causes after them, latest
    // first, as only a few are offered.
    let (mut causes, mut crew): (Vec<SaidCause>, Vec<SaidCause>) = causes
        .into_iter()
        .partition(|c| matches!(c.said, Said::Item { .. }));
    let ts = |c: &SaidCause| c.tally.last.as_ref().map(|l| when(&l.ts));
    crew.sort_by_key(|c| std::cmp::Reverse(ts(c)));
    causes.append(&mut crew);
    Site { causes, covering }
}

/// `site` with each crew cause written in a manual item's own words (up to
/// case and spacing) read as that item of `sections` (causes sections, in
/// any language): its translation in the answer's language is then the
/// same cause, with the manual's source.
pub fn as_items(mut site: Site, sections: &[crate::retrieval::Hit]) -> Site {
    let norm = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    for c in &mut site.causes {
        let Said::Crew { text } = &c.said else {
            continue;
        };
        let want = norm(text);
        let found = sections
            .iter()
            .flat_map(crate::diagnosis::Item::of)
            .find(|i| norm(&i.text) == want);
        if let Some(i) = found.and_then(|i| ItemRef::parse(&i.source).map(|r| (r, i))) {
            c.said = Said::Item {
                item: i.0,
                text: i.1.text,
                source: i.1.source,
            };
        }
    }
    site
}

/// Whether two said causes are one: the same manual item, or the same
/// crew words up to case and spacing.
fn same(a: &Said, b: &Said) -> bool {
    let norm = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    match (a, b) {
        (Said::Item { item: x, .. }, Said::Item { item: y, .. }) => x.same(y),
        (Said::Crew { text: x }, Said::Crew { text: y }) => norm(x) == norm(y),
        _ => false,
    }
}

/// A note's time, for ordering: RFC 3339 times with other offsets compare
/// by the instant; one that does not parse sorts first.
fn when(ts: &str) -> Option<time::OffsetDateTime> {
    time::OffsetDateTime::parse(ts, &time::format_description::well_known::Rfc3339).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notes::{Answered, NotedAlarm};

    pub(crate) fn note(
        id: &str,
        code: &str,
        message: &str,
        verdict: Verdict,
        cause: NoteCause,
        ts: &str,
    ) -> Note {
        Note {
            id: id.into(),
            alarm: NotedAlarm {
                equipment: "ME1".into(),
                code: code.into(),
                kind: None,
                message: Some(message.into()),
                value: None,
                unit: None,
                threshold: None,
            },
            verdict,
            cause,
            remedy: None,
            by: "cheng".into(),
            ts: ts.into(),
            answered: Answered {
                alarm_id: id.into(),
                alarm_ts: ts.into(),
                diagnosis_ts: ts.into(),
                mode: "full".into(),
                coverage: "covered".into(),
                sources: vec![],
                causes: vec![],
            },
            vessel: None,
            withdrawn: None,
        }
    }

    fn alarm(code: &str, message: &str) -> Alarm {
        Alarm {
            equipment: "ME1".into(),
            message: Some(message.into()),
            ..crate::test_support::alarm(code)
        }
    }

    const ITEM: &str = "main_engine_cooling-en § ME-JCW-TEMP-HI causes #2";

    fn confirmed(id: &str, code: &str, message: &str) -> Note {
        note(
            id,
            code,
            message,
            Verdict::Confirmed,
            NoteCause::Source(ITEM.into()),
            "2026-11-02T10:00:00Z",
        )
    }

    fn ids(v: &[Noted]) -> Vec<String> {
        v.iter().map(|n| n.note.id.clone()).collect()
    }

    #[test]
    fn a_note_is_about_the_same_code_or_alike_words_on_the_same_equipment() {
        let notes = SiteNotes::from_notes(vec![
            confirmed("code", "AMS-4411", "JCW outlet temp high"),
            confirmed(
                "words",
                "AMS-9",
                "M/E jacket cooling water outlet temperature high",
            ),
        ]);
        let e = Examples::default();
        let a = alarm(
            "AMS-4411",
            "M/E jacket cooling water outlet temperature high 92 C",
        );
        assert_eq!(ids(&about(&notes, &a, &e)), ["code", "words"]);
        // Under a new code, only words nearly the same are the same fault.
        let reworded = alarm("AMS-77", "M/E JACKET COOLING WATER OUTLET TEMPERATURE HIGH");
        assert_eq!(ids(&about(&notes, &reworded, &e)), ["words"]);
        let loose = alarm("AMS-78", "ME jacket water temp high");
        assert!(about(&notes, &loose, &e).is_empty());
        // Another equipment: none.
        let other = Alarm {
            equipment: "DG2".into(),
            ..a.clone()
        };
        assert!(about(&notes, &other, &e).is_empty());
    }

    #[test]
    fn another_fault_of_the_same_equipment_has_no_note() {
        let notes = SiteNotes::from_notes(vec![confirmed("n", "AMS-4411", "JCW outlet temp high")]);
        let e = Examples::default();
        for a in [
            // Another way of the same quantity and medium, alike in words.
            alarm("AMS-4412", "JCW outlet temp low"),
            // Another quantity.
            alarm("AMS-4413", "JCW outlet pressure high"),
            // Another fault in other words.
            alarm("AMS-5000", "starting air pressure low"),
            // Under the same code, a reading that says another way.
            alarm("AMS-4411", "JCW outlet temp low"),
        ] {
            assert!(about(&notes, &a, &e).is_empty(), "{a:?}");
        }
    }

    /// A handover note lists what was checked and found fine
    /// (`工作水压力正常0.3 MPa`) and what did not happen (`转速没有明显下降`):
    /// neither is the fault's quantity or way, so the same alarm point's
    /// next alarm is still the noted fault.
    #[test]
    fn what_a_log_found_fine_or_not_happening_does_not_part_a_fault_from_its_note() {
        let notes = SiteNotes::from_notes(vec![confirmed(
            "n",
            "PUR1_DSCH_FLT",
            "交班：1号重油分油机03:15排渣失败报警，连续两次不排渣，已停机改用2号分油机。工作水压力正常0.3 MPa，电磁阀动作正常。",
        )]);
        let e = Examples::default();
        let next = alarm(
            "PUR1_DSCH_FLT",
            "交班记录：1号HFO分油机又报排渣失败（14:05），排渣时转速没有明显下降，排渣口没有东西出来。",
        );
        assert_eq!(ids(&about(&notes, &next, &e)), ["n"]);
    }

    /// A maintenance system's notifications share their form's words
    /// (`NOTIF …`, `DAMAGE CODE:`) on every alarm of the vessel: they do
    /// not make another fault of the same equipment the noted one.
    #[test]
    fn a_vessels_form_words_do_not_make_another_fault_the_noted_one() {
        let form = |n: &str, damage: &str, part: &str, what: &str| {
            format!("NOTIF {n} DEFECT REPORT. DAMAGE CODE: {damage}. OBJECT PART: {part}. {what}. REPORTED BY ETO ON ROUNDS")
        };
        let noted = form(
            "20006402",
            "ELECTRICAL",
            "BATTERY BANK",
            "CELL VOLTAGE IMBALANCE",
        );
        let other = form(
            "20006901",
            "ELECTRICAL",
            "BATTERY BANK",
            "HYDROGEN GAS CONCENTRATION DETECTED",
        );
        let mut notes = vec![confirmed("n", "B03.CELL.DV", &noted)];
        let e = Examples::default();
        let a = alarm("B03.H2.H", &other);
        // Alike by the form's words, as a vessel with few notes reads them.
        assert!(e.likeness(&noted, &other) >= NOTE_NEAR_AT);
        assert_eq!(
            ids(&about(&SiteNotes::from_notes(notes.clone()), &a, &e)),
            ["n"]
        );
        // The vessel's other notifications show which words are the form's.
        for (i, m) in [
            "ME LO PUMP NOISE",
            "DG2 LO FILTER CLOGGED",
            "BALLAST VALVE STUCK",
            "FWG SALINITY ALARM",
            "PURIFIER VIBRATION",
            "AC COMPRESSOR TRIP",
            "STEERING GEAR PUMP OVERLOAD",
        ]
        .iter()
        .enumerate()
        {
            let mut n = confirmed(
                &format!("f{i}"),
                &format!("X{i}"),
                &form(&format!("2000{i}"), "MECHANICAL", "PUMP", m),
            );
            n.alarm.equipment = format!("E{i}");
            notes.push(n);
        }
        let notes = SiteNotes::from_notes(notes);
        assert!(about(&notes, &a, &e).is_empty());
        // The same fault, raised again under its code, still takes its note.
        let again = alarm(
            "B03.CELL.DV",
            "WO#5512 defect: battery bank cell imbalance again",
        );
        assert_eq!(ids(&about(&notes, &again, &e)), ["n"]);
    }

    /// A reading's value against its threshold says its way where its
    /// words say none (`NEAR ZERO` at 0.1 kN, set 2 kN).
    #[test]
    fn the_readings_own_way_parts_a_fault_from_its_note() {
        let (zero, high) = (
            "GW MOORING LINE TENSION ALARM LOAD CELL ONE NEAR ZERO",
            "GW MOORING LINE TENSION ALARM LOAD CELL ONE HIGH",
        );
        let mut n = confirmed("n", "MOOR.T.L", zero);
        (n.alarm.value, n.alarm.unit, n.alarm.threshold) =
            (Some(0.1), Some("kN".into()), Some(2.0));
        let notes = SiteNotes::from_notes(vec![n]);
        let e = Examples::default();
        assert!(e.likeness(zero, high) >= NOTE_NEAR_AT);
        let kn = |value: f64, threshold: f64, code: &str, message: &str| Alarm {
            value: Some(value),
            unit: Some("kN".into()),
            threshold: Some(threshold),
            ..alarm(code, message)
        };
        assert!(about(&notes, &kn(48.0, 40.0, "MOOR.T.H", high), &e).is_empty());
        assert_eq!(
            ids(&about(&notes, &kn(0.3, 2.0, "MOOR.T.L", zero), &e)),
            ["n"]
        );
    }

    #[test]
    fn the_media_a_watch_log_lists_in_passing_do_not_part_a_fault_from_its_note() {
        // Two watchkeepers log one salinity alarm, each with the other
        // readings he took: jacket water in one log, sea water in the other.
        let first = "FWG salinity 12 ppm alarm, dump valve opened. Jacket water in 78 C out 70 C, vacuum 93%";
        let again = "Salinity alarm again at 11 ppm, distillate dumped. Sea water temp 30 C, ejector pump 3.9 bar";
        let notes = SiteNotes::from_notes(vec![confirmed("n", "FWG-SAL-H", first)]);
        let e = Examples::default();
        assert_eq!(ids(&about(&notes, &alarm("FWG-SAL-H", again), &e)), ["n"]);
        // Nor do the other quantities it lists: a pump's current after a
        // tank's level.
        let tank = SiteNotes::from_notes(vec![confirmed(
            "t",
            "SG2-TK-LL",
            "Steering oil tank low level alarm, topped up 12 L, pump running 38 A",
        )]);
        let again = "Oiler reported steering hyd tank low again, 10 L added, motor current 37 A";
        assert_eq!(ids(&about(&tank, &alarm("SG2-TK-LL", again), &e)), ["t"]);
        // A medium the fault's own clause names still parts two faults.
        let lo = SiteNotes::from_notes(vec![confirmed(
            "lo",
            "DG-P-LOW",
            "LO pressure low, 2.1 bar",
        )]);
        assert!(about(&lo, &alarm("DG-P-LOW", "FO pressure low, 1.9 bar"), &e).is_empty());
    }

    #[test]
    fn tallies_count_each_item_in_either_language_and_each_crew_cause() {
        let zh = "main_engine_cooling-zh § ME-JCW-TEMP-HI 原因 #2";
        let notes = SiteNotes::from_notes(vec![
            confirmed("a", "X", "m"),
            note(
                "b",
                "X",
                "m",
                Verdict::Confirmed,
                NoteCause::Source(zh.into()),
                "2026-11-05T10:00:00Z",
            ),
            note(
                "c",
                "X",
                "m",
                Verdict::Rejected,
                NoteCause::Source(ITEM.replace("#2", "#1")),
                "2026-11-06T10:00:00Z",
            ),
            note(
                "d",
                "X",
                "m",
                Verdict::Confirmed,
                NoteCause::Text("Air  lock after filter change".into()),
                "2026-11-03T10:00:00Z",
            ),
            note(
                "e",
                "X",
                "m",
                Verdict::Confirmed,
                NoteCause::Text("air lock after filter change".into()),
                "2026-11-07T10:00:00Z",
            ),
        ]);
        let noted = about(&notes, &alarm("X", "m"), &Examples::default());
        let site = said(&noted, None);
        let tallies: Vec<(u32, u32, Option<String>)> = site
            .causes
            .iter()
            .map(|c| (c.tally.confirmed, c.tally.rejected, c.note.clone()))
            .collect();
        assert_eq!(
            tallies,
            [
                (2, 0, Some("b".into())),
                (0, 1, None),
                (2, 0, Some("e".into()))
            ]
        );
        assert_eq!(
            site.causes[0].tally.last.as_ref().unwrap().ts,
            "2026-11-05T10:00:00Z"
        );
        let (n, item) = covering(&noted).unwrap();
        assert_eq!((n.id.as_str(), item.n), ("a", 2));
    }

    #[test]
    fn a_crew_cause_in_a_manuals_words_is_that_item_in_any_language() {
        let zh = crate::retrieval::Hit {
            doc: "battery-zh".into(),
            ..crate::test_support::hit(
                "BAT-VOLT-LO 原因",
                "蓄电池电压低。可能原因：1）充电不足；2）负载异常增大。",
            )
        };
        let site = Site {
            causes: vec![SaidCause {
                said: Said::Crew {
                    text: "负载异常增大".into(),
                },
                tally: Tally::default(),
                note: None,
            }],
            covering: None,
        };
        let site = as_items(site, &[zh]);
        let Said::Item { item, .. } = &site.causes[0].said else {
            panic!("{site:?}");
        };
        let en = ItemRef::parse("battery-en § BAT-VOLT-LO causes #2").unwrap();
        assert!(item.same(&en), "{item:?}");
    }

    #[test]
    fn an_item_rejected_as_often_as_confirmed_covers_nothing() {
        let mut no = confirmed("no", "X", "m");
        no.verdict = Verdict::Rejected;
        no.ts = "2026-11-09T00:00:00Z".into();
        let notes = SiteNotes::from_notes(vec![confirmed("yes", "X", "m"), no]);
        let noted = about(&notes, &alarm("X", "m"), &Examples::default());
        assert!(covering(&noted).is_none());
        // Withdrawn, the rejection no longer counts.
        let mut gone = notes.all()[1].clone();
        gone.withdrawn = Some(crate::notes::Withdrawn {
            by: "chief".into(),
            ts: "2026-11-10T00:00:00Z".into(),
        });
        let notes = SiteNotes::from_notes(vec![confirmed("yes", "X", "m"), gone]);
        let noted = about(&notes, &alarm("X", "m"), &Examples::default());
        assert_eq!(covering(&noted).map(|(n, _)| n.id.as_str()), Some("yes"));
    }
}
