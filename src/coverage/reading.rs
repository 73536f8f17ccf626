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
    pub medium: Option<Medium>,
    /// The quantity the reading's unit measures: a reading in a unit of one
    /// quantity measures it, so a leak alarm is a leak detector's, whatever
    /// its pipe's pressure (`high-pressure fuel pipe leakage`).
    pub unit_quantity: Option<Quantity>,
    /// `faulty` with what it says without the words for it (`implied`):
    /// what the named path reads.
    pub faulty_said: String,
    /// The equipment's section alarms, read once for the message and for
    /// every name.
    pub(super) alarms: Alarms,
    /// The message's terms weighed against `alarms`.
    pub(super) terms: Terms,
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
        let medium = Medium::of_message(&faulty);
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
        let faulty_quantity = Quantity::of_alarm(alarm, &faulty);
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
