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
    let zh = crate::retrieval::tokenize::has_cjk(message);
    let mut best: (f32, Option<&Hit>) = (0.0, None);
    for h in sections {
        let Some(lead) = own_alarm(h) else { continue };
        if crate::retrieval::tokenize::has_cjk(lead) != zh {
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
