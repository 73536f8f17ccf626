//! What an alarm's text says of its fault, read the same way by retrieval
//! and by coverage: its clauses, the clauses a watchkeeper found normal
//! (`not_normal`), which way a reading left its range (`Deviation`), what
//! it measures (`Quantity`) and which medium (`Medium`), from the message,
//! the reading's unit or an alarm code's parts.
//!
//! Pure text reading: no index, no examples, no decisions.

use crate::alarm::Alarm;

/// The first clause of `text` that says what `read` reads.
pub(crate) fn clause_first<T>(text: &str, read: impl Fn(&str) -> Option<T>) -> Option<T> {
    clauses(text).find_map(read)
}

/// A message's clauses: split at commas, semicolons, full stops (`.` before
/// a space, not a decimal point) and line ends.
pub(crate) fn clauses(text: &str) -> impl Iterator<Item = &str> {
    let mut out = Vec::new();
    let mut start = 0;
    let chars: Vec<(usize, char)> = text.char_indices().collect();
    for (k, &(i, c)) in chars.iter().enumerate() {
        let stop = match c {
            ',' | '，' | '。' | ';' | '；' | '\n' | '！' | '？' => true,
            '.' => chars.get(k + 1).is_none_or(|&(_, n)| n.is_whitespace()),
            _ => false,
        };
        if stop {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
        }
    }
    out.push(&text[start..]);
    out.into_iter().filter(|c| !c.trim().is_empty())
}

/// The message without its clauses that say something is normal, not so,
/// or still as it was ("艉管后轴承42℃正常，推力块温度正常",
/// "自清滤器前后压差不大", "GNSS still inside the watch circle"): a
/// watchkeeper lists what he checked, and a section named there is the one
/// fault ruled out.
pub(crate) const RULED_OUT_ZH: &[&str] = &["正常", "不大", "不高", "未见"];

pub fn not_normal(message: &str) -> String {
    message
        .split([',', '，', '。', ';', '；'])
        .filter(|clause| {
            let lower = clause.to_lowercase();
            // `still` without a change is a state as it was: `LO inlet
            // pressure still 2.7 bar`, `GNSS位置仍在监控圈内`.
            let unchanged = (lower
                .split(|c: char| !c.is_ascii_alphanumeric())
                .any(|w| w == "still")
                || clause.contains('仍'))
                && Deviation::of_trend(clause).is_none();
            // `normal` before a number is the value the reading usually has
            // (`hyd press dropped to 9 MPa (normal 16)`, `正常3.5bar`), not
            // a reading found fine.
            let fine_zh = RULED_OUT_ZH.iter().any(|w| {
                clause.match_indices(w).any(|(i, _)| {
                    !(*w == "正常" && reference(&clause[i + w.len()..]) && unnamed(&clause[..i]))
                })
            });
            let words: Vec<&str> = lower
                .split(|c: char| !c.is_ascii_alphanumeric() && c != '.')
                .filter(|w| !w.is_empty())
                .collect();
            let number =
                |w: Option<&&str>| w.is_some_and(|w| w.starts_with(|c: char| c.is_ascii_digit()));
            let fine = words.iter().enumerate().any(|(i, w)| {
                matches!(w.trim_end_matches('.'), "normal" | "normally" | "ok")
                    && !((number(words.get(i + 1))
                        || (words.get(i + 1).is_some_and(|n| {
                            matches!(*n, "is" | "was" | "at" | "about" | "approx")
                        }) && number(words.get(i + 2))))
                        && (i == 0 || words[..i].iter().any(|w| number(Some(w)))))
            });
            !unchanged && !fine_zh && !fine && !denied_change(clause)
        })
        .collect::<Vec<_>>()
        .join("，")
}

/// Whether the text before `正常` in its clause names no reading of its
/// own: nothing (`，正常3.5bar`, after the reading) or a number
/// (`降到9MPa（正常16）`), so that a value after it is the usual one. After
/// a name only (`工作水压力正常0.3 MPa`) the reading was found normal at it.
fn unnamed(before: &str) -> bool {
    let before = before.trim();
    before.is_empty() || before.chars().any(|c| c.is_ascii_digit())
}

/// Words that deny a change (`没有`, `not`) and the changes they deny, read
/// within `DENIED_WITHIN` characters or words before it: `转速没有明显下降`
/// and `speed did not drop` say what did not happen, no way of the fault.
const DENIALS_ZH: &[&str] = &["没有", "没", "未", "不"];
const CHANGES_ZH: &[&str] = &["下降", "降低", "上升", "升高", "变化"];
const DENIALS: &[&str] = &["not", "no", "never", "didn", "without"];
const CHANGES: &[&str] = &[
    "drop",
    "dropped",
    "drops",
    "fall",
    "fell",
    "falling",
    "rise",
    "rose",
    "rising",
    "change",
    "changed",
    "increase",
    "increased",
    "decrease",
    "decreased",
];
const DENIED_WITHIN: usize = 4;

/// Whether `clause` denies a change (`DENIALS_ZH`, `DENIALS`).
fn denied_change(clause: &str) -> bool {
    let zh = CHANGES_ZH.iter().any(|c| {
        clause.match_indices(c).any(|(i, _)| {
            let before: String = clause[..i].chars().rev().take(DENIED_WITHIN).collect();
            let before: String = before.chars().rev().collect();
            DENIALS_ZH.iter().any(|d| before.contains(d))
        })
    });
    let lower = clause.to_lowercase();
    let words: Vec<&str> = lower
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|w| !w.is_empty())
        .collect();
    zh || words.iter().enumerate().any(|(i, w)| {
        CHANGES.contains(w)
            && words[i.saturating_sub(DENIED_WITHIN)..i]
                .iter()
                .any(|d| DENIALS.contains(d))
    })
}

/// Whether what follows `正常` is the value a reading normally has
/// (`正常3.5bar`, `正常值80%`, `正常是16MPa`): a reference, not a
/// reading found fine.
pub(crate) fn reference(after: &str) -> bool {
    let after = after.trim_start_matches(['值', '是', '为', '在', '约', ' ', ':', '：']);
    after.starts_with(|c: char| c.is_ascii_digit())
}

/// Which way a reading left its range, as a message or an alarm code says
/// it: a section for one way is no section for the other (a boiler's water
/// level high-high is not its low level, though every other word is the
/// same).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Deviation {
    High,
    Low,
}

impl Deviation {
    /// The way a message says the reading is going (`rising`, `creeping
    /// up`, `降到`), when it says one way only.
    pub fn of_trend(message: &str) -> Option<Self> {
        const UP: &[&str] = &[
            "rising",
            "rises",
            "risen",
            "climbing",
            "climbs",
            "climbed",
            "increasing",
            "going up",
            "creeping up",
            "went up",
            "gone up",
            "上升",
            "升高",
            "升到",
            "升至",
            "涨",
        ];
        const DOWN: &[&str] = &[
            "falling",
            "fell",
            "dropping",
            "dropped",
            "decreasing",
            "going down",
            "went down",
            "sliding",
            "下降",
            "降到",
            "降至",
            "降低",
            "下跌",
        ];
        let lower = message.to_lowercase();
        let has = |w: &str| match w.is_ascii() {
            true => lower
                .match_indices(w)
                .any(|(i, _)| !lower[..i].ends_with(|c: char| c.is_ascii_alphanumeric())),
            false => message.contains(w),
        };
        only(
            UP.iter()
                .filter(|w| has(w))
                .map(|_| Deviation::High)
                .chain(DOWN.iter().filter(|w| has(w)).map(|_| Deviation::Low)),
        )
    }

    /// The reading's: its value above its threshold, or under it. None
    /// when either is missing or under zero, where a vacuum's `-78 kPa`
    /// above `-85` is a low vacuum, and for an alarm about a vacuum
    /// (`vacuum`), whose reading may be an absolute pressure (`18 kPa`
    /// over `15`, a vacuum too low).
    pub fn of_reading(alarm: &Alarm) -> Option<Self> {
        if vacuum(alarm) {
            return None;
        }
        match (alarm.value, alarm.threshold) {
            (Some(v), Some(t)) if v < 0.0 || t < 0.0 => None,
            (Some(v), Some(t)) if v > t => Some(Deviation::High),
            (Some(v), Some(t)) if v < t => Some(Deviation::Low),
            _ => None,
        }
    }

    /// The code's own: a `HI`/`HH` or `LO`/`LL` part (`BLR-WL-LO`). `LO`
    /// before the last part is lube oil (`ME-LO-TEMP-HI`), as
    /// `Medium::of_code` reads it.
    pub fn of_code(code: &str) -> Option<Self> {
        only(code_parts(code).filter_map(|(p, last)| match p.as_str() {
            "HI" | "HH" | "HIGH" => Some(Deviation::High),
            "LO" if !last => None,
            "LO" | "LL" | "LOW" => Some(Deviation::Low),
            _ => None,
        }))
    }

    /// The message's, when it says one way only: `high`, `hi`, `hh`, `low`,
    /// `lo`, `ll`, and `高`/`低` (grading words read as one, `过低` → `低`),
    /// except where they name a circuit (`高温`淡水, `低压`空气). None when
    /// it says neither, or both.
    pub fn of_message(message: &str) -> Option<Self> {
        let text = plain_degree(message);
        let all: Vec<String> = text
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(str::to_ascii_lowercase)
            .collect();
        let words = all
            .iter()
            .enumerate()
            .filter_map(|(i, w)| match w.as_str() {
                // A burner's `low fire` is its firing rate, not a reading.
                "high" | "low" if firing(all.get(i + 1)) => None,
                "high" | "hi" | "hh" | "hihi" => Some(Deviation::High),
                // `LO` before a word is lube oil (`ME LO filter dP`); a
                // deviation ends the alarm or comes before its reading.
                "lo" if lube_oil(all.get(i + 1)) => None,
                "low" | "lo" | "ll" | "lolo" => Some(Deviation::Low),
                _ => None,
            });
        let chars: Vec<char> = text.chars().collect();
        let cjk = (0..chars.len()).filter_map(|i| {
            let circuit = matches!(chars.get(i + 1), Some('温' | '压' | '火'));
            match chars[i] {
                '高' if !circuit => Some(Deviation::High),
                '低' if !circuit => Some(Deviation::Low),
                _ => None,
            }
        });
        only(words.chain(cjk))
    }
}

/// Whether an alarm is about a vacuum, whose reading may be an absolute
/// pressure (`壳体绝压18kPa` over 15 is a vacuum too low) or a gauge one.
pub(crate) fn vacuum(alarm: &Alarm) -> bool {
    // Only the alarm's own clause: `Shell vacuum 93%` later in a salinity
    // alarm's message is another reading.
    let said = |t: &str| t.to_ascii_lowercase().contains("vac") || t.contains("真空");
    said(&alarm.code)
        || alarm
            .message
            .as_deref()
            .and_then(|m| clauses(m).next())
            .is_some_and(said)
}

/// Whether `high` or `low` followed by `next` is a burner's firing rate
/// (`low fire`, `high flame`).
pub(crate) fn firing(next: Option<&String>) -> bool {
    next.is_some_and(|n| matches!(n.as_str(), "fire" | "firing" | "flame"))
}

/// Whether `lo` followed by `next` is lube oil: a word follows it that is
/// not a reading or an alarm's state.
pub(crate) fn lube_oil(next: Option<&String>) -> bool {
    next.is_some_and(|n| {
        !n.starts_with(|c: char| c.is_ascii_digit())
            && !matches!(
                n.as_str(),
                "alarm" | "alm" | "trip" | "sd" | "shutdown" | "lo" | "ll" | "limit" | "set"
            )
    })
}

/// What a reading measures, as a message or an alarm code names it: a
/// section about one quantity is no section for another of the same machine
/// (a turbocharger's vibration is not its speed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    Temperature,
    Pressure,
    Level,
    Vibration,
    Speed,
    Voltage,
    Current,
    Flow,
    Viscosity,
}

impl Quantity {
    /// The code's own part (`ME-TC-RPM-HI`), when it names one.
    pub fn of_code(code: &str) -> Option<Self> {
        let parts = code.split(['-', '_']).map(|p| p.to_ascii_uppercase());
        only(parts.filter_map(|p| match p.as_str() {
            "TEMP" => Some(Quantity::Temperature),
            "PRES" | "PRESS" => Some(Quantity::Pressure),
            "LVL" | "LEV" | "LEVEL" | "WL" => Some(Quantity::Level),
            "VIB" => Some(Quantity::Vibration),
            // A generator's frequency is its speed.
            "RPM" | "SPEED" | "OVERSPEED" | "FREQ" => Some(Quantity::Speed),
            "VOLT" => Some(Quantity::Voltage),
            "CURR" | "AMP" => Some(Quantity::Current),
            "FLOW" => Some(Quantity::Flow),
            "VISC" => Some(Quantity::Viscosity),
            // A barometer reads air pressure.
            "BARO" => Some(Quantity::Pressure),
            _ => None,
        }))
    }

    /// The alarm's: its reading's unit's, which says what it measures,
    /// else the message's (a message may name other quantities beside it:
    /// `主电池11.4V…充电电流只有0.6A`).
    pub fn of_alarm(alarm: &Alarm, message: &str) -> Option<Self> {
        match alarm.unit.as_deref().map(Quantity::of_unit) {
            Some(Some(q)) => Some(q),
            _ => Quantity::of_message(message),
        }
    }

    /// The unit's, when it is one of a single quantity (`V`, `bar`, `°C`,
    /// `mm/s`); None for units of several (`%`, `m`) or none of these.
    pub fn of_unit(unit: &str) -> Option<Self> {
        let u = unit.trim().to_ascii_lowercase();
        match u.as_str() {
            "degc" | "°c" | "℃" | "c" | "degf" | "°f" | "k" => Some(Quantity::Temperature),
            "bar" | "barg" | "mbar" | "kpa" | "mpa" | "pa" | "psi" | "hpa" => {
                Some(Quantity::Pressure)
            }
            "mm/s" => Some(Quantity::Vibration),
            "rpm" | "r/min" | "hz" => Some(Quantity::Speed),
            "cst" | "mm2/s" | "mm²/s" => Some(Quantity::Viscosity),
            "v" | "vdc" | "vac" | "kv" | "mv" => Some(Quantity::Voltage),
            "a" | "ma" | "ka" => Some(Quantity::Current),
            "m3/h" | "m³/h" | "l/h" | "l/min" | "t/h" => Some(Quantity::Flow),
            _ => None,
        }
    }

    /// The message's, when it names one quantity only (None for none or
    /// several: `高温淡水压力低` names a temperature circuit and a pressure).
    pub fn of_message(message: &str) -> Option<Self> {
        only(Self::mentioned(message).into_iter())
    }

    /// Every quantity a text names (a section's own alarm may name two:
    /// `bus voltage or frequency abnormal`).
    pub fn named_in(text: &str) -> Vec<Self> {
        // `高温淡水` is the jacket water's circuit, not a temperature.
        let text = text.replace("高温", "").replace("低温", "");
        let mut all = Self::mentioned(&text);
        all.dedup();
        all
    }

    fn mentioned(message: &str) -> Vec<Self> {
        let words = message
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter_map(|w| match w.to_ascii_lowercase().as_str() {
                "temp" | "temperature" | "temperatures" => Some(Quantity::Temperature),
                "press" | "pressure" | "pres" => Some(Quantity::Pressure),
                "level" | "lvl" | "lev" => Some(Quantity::Level),
                "vib" | "vibration" | "vibrations" => Some(Quantity::Vibration),
                "rpm" | "speed" | "overspeed" | "freq" | "frequency" | "hz" => {
                    Some(Quantity::Speed)
                }
                "visc" | "visco" | "viscosity" => Some(Quantity::Viscosity),
                "voltage" | "volt" | "volts" => Some(Quantity::Voltage),
                "current" | "amps" => Some(Quantity::Current),
                "flow" => Some(Quantity::Flow),
                _ => None,
            });
        const CJK: &[(&str, Quantity)] = &[
            ("温", Quantity::Temperature),
            ("压力", Quantity::Pressure),
            ("压差", Quantity::Pressure),
            ("水位", Quantity::Level),
            ("液位", Quantity::Level),
            ("油位", Quantity::Level),
            ("振动", Quantity::Vibration),
            ("转速", Quantity::Speed),
            ("超速", Quantity::Speed),
            ("电压", Quantity::Voltage),
            ("电流", Quantity::Current),
            ("流量", Quantity::Flow),
            ("频率", Quantity::Speed),
            ("粘度", Quantity::Viscosity),
            ("黏度", Quantity::Viscosity),
        ];
        let cjk = CJK
            .iter()
            .filter(|(w, _)| message.contains(w))
            .map(|&(_, q)| q);
        let mut all: Vec<Self> = words.chain(cjk).collect();
        all.sort_by_key(|q| *q as u8);
        all
    }
}

/// What flows where the fault is, when a message or a section's code says
/// it: a machine's sea water pump is not its jacket water, its fuel oil not
/// its lube oil, though both are pressures of the same engine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    SeaWater,
    JacketWater,
    LubeOil,
    FuelOil,
}

impl Medium {
    /// The code's own part (`ME-JCW-PRES-LO`, `DG-LO-PRES-LO`): `LO`
    /// before the last part is lube oil, as the last it is low.
    pub fn of_code(code: &str) -> Option<Self> {
        only(code_parts(code).filter_map(|(p, last)| match p.as_str() {
            "SW" => Some(Medium::SeaWater),
            "JCW" | "JW" => Some(Medium::JacketWater),
            "LO" if !last => Some(Medium::LubeOil),
            "FO" => Some(Medium::FuelOil),
            _ => None,
        }))
    }

    /// The message's, when it names one medium only.
    pub fn of_message(message: &str) -> Option<Self> {
        let lower = message.to_ascii_lowercase();
        let all: Vec<&str> = lower
            .split(|c: char| !c.is_ascii_alphanumeric())
            .filter(|w| !w.is_empty())
            .collect();
        let words = all.iter().enumerate().filter_map(|(i, w)| match *w {
            "sw" | "seawater" => Some(Medium::SeaWater),
            "sea" if all.get(i + 1) == Some(&"water") => Some(Medium::SeaWater),
            "jcw" | "jw" | "jacket" => Some(Medium::JacketWater),
            "ht" if matches!(all.get(i + 1), Some(&("water" | "fw" | "cw" | "cooling"))) => {
                Some(Medium::JacketWater)
            }
            "lo" if lube_oil(all.get(i + 1).map(|n| n.to_string()).as_ref()) => {
                Some(Medium::LubeOil)
            }
            "lube" | "lub" | "lubricating" => Some(Medium::LubeOil),
            "fo" | "fuel" | "hfo" | "mgo" | "mdo" => Some(Medium::FuelOil),
            _ => None,
        });
        const CJK: &[(&str, Medium)] = &[
            ("海水", Medium::SeaWater),
            ("缸套", Medium::JacketWater),
            ("高温淡水", Medium::JacketWater),
            ("高温水", Medium::JacketWater),
            ("滑油", Medium::LubeOil),
            ("润滑油", Medium::LubeOil),
            ("燃油", Medium::FuelOil),
            ("重油", Medium::FuelOil),
        ];
        let cjk = CJK
            .iter()
            .filter(|(w, _)| message.contains(w))
            .map(|&(_, m)| m);
        only(words.chain(cjk))
    }
}

/// A code's parts, upper case, each with whether it is the last: `LO` is
/// low as the last part and lube oil before it (`DG-LO-PRES-LO`).
pub(crate) fn code_parts(code: &str) -> impl Iterator<Item = (String, bool)> + '_ {
    let n = code.split(['-', '_']).count();
    code.split(['-', '_'])
        .enumerate()
        .map(move |(i, p)| (p.to_ascii_uppercase(), i + 1 == n))
}

/// The one thing all of `said` say (a deviation, a quantity); None when
/// they say nothing or more than one.
pub(crate) fn only<T: PartialEq + Copy>(said: impl Iterator<Item = T>) -> Option<T> {
    let mut seen = None;
    for w in said {
        match seen {
            None => seen = Some(w),
            Some(s) if s != w => return None,
            _ => {}
        }
    }
    seen
}

/// Panel wording that grades a reading ("偏低", "过高", "低低", "不足")
/// says what the manuals say with one character ("低", "高").
pub(crate) const CJK_DEGREE: &[(&str, &str)] = &[
    ("偏低", "低"),
    ("偏高", "高"),
    ("过低", "低"),
    ("过高", "高"),
    ("太低", "低"),
    ("太高", "高"),
    ("较低", "低"),
    ("较高", "高"),
    ("低低", "低"),
    ("高高", "高"),
    ("不足", "低"),
];

/// Characters that make a word with a following "过" ("通过", "超过"):
/// there "过高" is that word's end and the next word's start, no grading.
pub(crate) const CJK_PASS: &[char] = &['通', '经', '超', '越', '穿', '不', '错'];

pub(crate) fn plain_degree(text: &str) -> String {
    // Again until nothing changes: "偏高高" grades twice.
    let mut t = text.to_string();
    loop {
        let next = plain_degree_once(&t);
        if next == t {
            return t;
        }
        t = next;
    }
}

pub(crate) fn plain_degree_once(text: &str) -> String {
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        let pair: String = chars[i..chars.len().min(i + 2)].iter().collect();
        let word = chars[i] == '过' && i > 0 && CJK_PASS.contains(&chars[i - 1]);
        match CJK_DEGREE.iter().find(|(from, _)| *from == pair) {
            Some((_, to)) if !word => {
                out.push_str(to);
                i += 2;
            }
            _ => {
                out.push(chars[i]);
                i += 1;
            }
        }
    }
    out
}
