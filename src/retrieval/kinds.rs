//! Which manuals' equipment an alarm is about. A plant's `kind` is a hint,
//! never a gate: plants name their machines in their own words (`No.2 DG`,
//! `PURIFIER 1`, `副机`, `ENGINE`), so a kind is mapped to the manuals'
//! classes by the class itself, by the aliases a manual declares in its
//! front matter, or by words it shares with one class or manual title. The
//! config's aliases (`knowledge.kind_aliases`) are applied before, by the
//! pipeline, as the kind's class. A kind that maps to nothing is unknown,
//! and the message decides: a message that names a manual's equipment in
//! its first clause that names any is that equipment's. When neither names
//! one, the plant's tag for the machine (`FWG-FT-01`) may, by an alias
//! written whole in it.
//!
//! Pure: the index's table of documents and the alarm in, a `Resolution`
//! out. Owns the matching of names in text; never reads a file.

use crate::alarm::Alarm;
use crate::language::is_cjk;
use crate::retrieval::index::DocMeta;

/// How the alarm's equipment was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum By {
    /// The kind is a manual's class.
    Class,
    /// The kind holds an alias a manual declares.
    Alias,
    /// The kind shares words with one class or manual title only.
    Words,
    /// No kind mapped; the message names a manual's equipment.
    Message,
    /// Neither the kind nor the message names one; the equipment's tag
    /// holds a manual's alias (`FWG-FT-01`, `BUOY-07-GNSS`).
    Tag,
    /// The kind names a machine no manual names, and the message names it
    /// too: the text's evidence that the equipment has no manual.
    Unlisted,
    /// Neither the kind nor the message names a manual's equipment.
    Unknown,
}

impl By {
    pub fn as_str(self) -> &'static str {
        match self {
            By::Class => "class",
            By::Alias => "alias",
            By::Words => "words",
            By::Message => "message",
            By::Tag => "tag",
            By::Unlisted => "unlisted",
            By::Unknown => "unknown",
        }
    }
}

/// The manual classes an alarm is about, and how they were found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    /// Empty when `by` is `Unknown`.
    pub classes: Vec<String>,
    pub by: By,
    /// Whether the alarm carried a kind that mapped to nothing (counted in
    /// status, so an operator can map it with `knowledge.kind_aliases`).
    pub kind_unmapped: bool,
}

/// A word shared with a class name or title is evidence for that class
/// only when few classes hold it: `buoy`, `main`, `system` and `浮标` name
/// many manuals' equipment and say nothing of which.
pub const WORD_CLASSES_AT_MOST: usize = 2;

/// Words that name where a machine is or what group it belongs to, never
/// which machine: an AMS's group field (`ENGINE ROOM`, `AUX`, `机舱`) shares
/// them with a manual's title by chance.
pub const GROUP_WORDS: &[&str] = &[
    "engine",
    "room",
    "system",
    "plant",
    "unit",
    "main",
    "aux",
    "auxiliary",
    "station",
    "deck",
    "control",
    "panel",
    "shipboard",
    "buoy",
    "provision",
    "equipment",
    "machinery",
    "alarm",
    "报警",
    "机舱",
    "系统",
    "浮标",
    "装置",
    "设备",
    "船载",
    "主机",
    "辅机",
];

/// A kind maps by its words only when it shares this many telling words
/// with one class, or all of its own words: one shared word (`provision
/// crane` and the provision refrigeration plant) is chance.
pub const WORDS_SHARED_AT: usize = 2;

/// The alarm's equipment: its kind's classes, else the classes its message
/// names, else unknown.
pub fn resolve(docs: &[DocMeta], alarm: &Alarm) -> Resolution {
    let kind = alarm
        .kind
        .as_deref()
        .map(str::trim)
        .filter(|k| !k.is_empty());
    if let Some(found) = kind.and_then(|k| of_kind(docs, k)) {
        return found;
    }
    let kind_unmapped = kind.is_some();
    let message = alarm.message.as_deref().unwrap_or("");
    // A machine no manual names, named by both, is the alarm's before any
    // machine of a manual the message names (an incinerator's burner is
    // not the boiler's).
    let (classes, by) = if kind.is_some_and(|k| names_no_manual(docs, k, message)) {
        (Vec::new(), By::Unlisted)
    } else {
        match of_message(docs, message) {
            Some(classes) => (classes, By::Message),
            None => match of_tag(docs, &alarm.equipment) {
                Some(classes) => (classes, By::Tag),
                None => (Vec::new(), By::Unknown),
            },
        }
    };
    Resolution {
        classes,
        by,
        kind_unmapped,
    }
}

/// Whether `kind` names a machine that no manual names, by any word of its
/// class, title or aliases (an incinerator, a sewage plant), and `message`
/// names it too. A coarse group (`ENGINE`, `POWER`, `机舱`) shares words
/// with the manuals and is no such evidence; nor is a channel or a tag the
/// message does not repeat (`SER2`, `CH3`).
fn names_no_manual(docs: &[DocMeta], kind: &str, message: &str) -> bool {
    let said = name_words(kind);
    if said.is_empty() || Tokens::of(message).find(kind).is_none() {
        return false;
    }
    let known = |w: &String| {
        docs.iter().any(|d| {
            let names = d
                .classes
                .iter()
                .map(|c| c.replace('_', " "))
                .chain([d.title.clone()])
                .chain(d.aliases.iter().cloned())
                .collect::<Vec<_>>()
                .join(" ");
            name_words(&names).contains(w)
        })
    };
    !said.iter().any(known)
}

/// The classes a kind names: the class itself, the manuals' aliases it
/// holds (the longest wins: `fresh water generator` over `generator`), or
/// the one class whose name or title shares the most telling words with it.
pub fn of_kind(docs: &[DocMeta], kind: &str) -> Option<Resolution> {
    let norm = |s: &str| s.trim().to_lowercase().replace(['_', '-'], " ");
    let k = norm(kind);
    let exact: Vec<String> = classes_where(docs, |d| d.classes.iter().any(|c| norm(c) == k));
    if !exact.is_empty() {
        return Some(found(exact, By::Class));
    }
    if let Some(classes) = by_alias(docs, kind) {
        return Some(found(classes, By::Alias));
    }
    by_words(docs, kind).map(|c| found(vec![c], By::Words))
}

/// The classes the first clause of `message` that names any manual's
/// equipment (by alias, class name or title) names: a watch log states its
/// alarm first, then other machines' readings (`No.2 DG LO press low …; ME
/// on 85% load`).
pub fn of_message(docs: &[DocMeta], message: &str) -> Option<Vec<String>> {
    clauses(message).find_map(|clause| {
        by_alias(docs, clause).or_else(|| by_words(docs, clause).map(|c| vec![c]))
    })
}

/// The classes a plant's equipment tag names by a manual's alias, matched
/// whole and as written (`FWG-FT-01`, `DG1-CTRL`, `BUOY-03-LTE`): a tag is
/// the plant's own short name for the machine, the last word a text that
/// names none can be read by. Never by shared words: a tag's parts are
/// codes, not words.
pub fn of_tag(docs: &[DocMeta], tag: &str) -> Option<Vec<String>> {
    by_alias(docs, tag)
}

fn found(classes: Vec<String>, by: By) -> Resolution {
    Resolution {
        classes,
        by,
        kind_unmapped: false,
    }
}

fn classes_where(docs: &[DocMeta], keep: impl Fn(&DocMeta) -> bool) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for d in docs.iter().filter(|d| keep(d)) {
        for c in &d.classes {
            if !out.contains(c) {
                out.push(c.clone());
            }
        }
    }
    out
}

/// The classes of the manuals whose alias `text` names first (the longest
/// of those that start there: `fresh water generator` over `generator`);
/// None when `text` holds none. First, because a plant names the machine
/// that raised the alarm before what it runs on (`UPS-LAB1 ON BATTERY`).
fn by_alias(docs: &[DocMeta], text: &str) -> Option<Vec<String>> {
    let tokens = Tokens::of(text);
    let mut best: Option<Place> = None;
    let mut places = Vec::with_capacity(docs.len());
    for d in docs {
        let place = d.aliases.iter().filter_map(|a| tokens.find(a)).min();
        if let Some(p) = place {
            best = Some(best.map_or(p, |b| b.min(p)));
            places.push((d, p));
        }
    }
    let best = best?;
    let ids: Vec<&str> = places
        .iter()
        .filter(|(_, p)| *p == best)
        .map(|(d, _)| d.id.as_str())
        .collect();
    Some(classes_where(docs, |d| ids.contains(&d.id.as_str())))
}

/// Where a name was found: its start (in characters), then its length
/// negated, so that the least place is the first and, of those, the longest.
type Place = (usize, std::cmp::Reverse<usize>);

/// The one class whose name and titles share the most telling words (or
/// Chinese character pairs) with `text`, when they share `WORDS_SHARED_AT`
/// or all of `text`'s words; None on a tie or when none shares enough.
/// Aliases are matched whole (`by_alias`), never word by word: a trade's
/// phrase cut into pieces lends them to kinds that name another machine
/// (the switchboard's `电站管理系统` gave `电站`, a plant's group for its
/// generators, to the switchboard).
fn by_words(docs: &[DocMeta], text: &str) -> Option<String> {
    let mut classes: Vec<(String, Vec<String>)> = Vec::new();
    for d in docs {
        for c in &d.classes {
            let names = format!("{} {}", c.replace('_', " "), d.title);
            let words = name_words(&names);
            match classes.iter_mut().find(|(k, _)| k == c) {
                Some((_, w)) => w.extend(words),
                None => classes.push((c.clone(), words)),
            }
        }
    }
    for (_, w) in &mut classes {
        w.sort();
        w.dedup();
    }
    let telling = |w: &String| {
        classes.iter().filter(|(_, ws)| ws.contains(w)).count() <= WORD_CLASSES_AT_MOST
    };
    // A Chinese group word is cut out before the text is read in pairs,
    // so that its characters lend no pair to the words around it
    // (`报警系统`: not `警系` either).
    let cut = GROUP_WORDS
        .iter()
        .filter(|g| g.chars().any(is_cjk))
        .fold(text.to_string(), |t, g| t.replace(g, " "));
    let said: Vec<String> = name_words(&cut)
        .into_iter()
        .filter(|w| {
            !GROUP_WORDS
                .iter()
                .any(|g| g == w || (g.chars().any(is_cjk) && w.contains(g)))
        })
        .collect();
    let enough = WORDS_SHARED_AT.min(said.len()).max(1);
    let mut scored: Vec<(usize, &String)> = classes
        .iter()
        .map(|(c, ws)| {
            let n = said.iter().filter(|w| ws.contains(w) && telling(w)).count();
            (n, c)
        })
        .filter(|(n, _)| *n >= enough)
        .collect();
    scored.sort_by_key(|s| std::cmp::Reverse(s.0));
    match scored.as_slice() {
        [(n, c), rest @ ..] if rest.first().is_none_or(|(m, _)| m < n) => Some((*c).clone()),
        _ => None,
    }
}

/// A name's words for sharing: lowercased, a plural's `s` dropped, three
/// letters at least; and each pair of adjacent Chinese characters.
pub(crate) fn name_words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut word = String::new();
    let mut cjk: Vec<char> = Vec::new();
    let flush = |word: &mut String, cjk: &mut Vec<char>, out: &mut Vec<String>| {
        if word.chars().count() >= 3 && word.chars().any(|c| c.is_alphabetic()) {
            let w = word.to_lowercase();
            let w = match w.strip_suffix('s') {
                Some(stem) if stem.len() >= 3 && !stem.ends_with('s') => stem.to_string(),
                _ => w,
            };
            out.push(w);
        }
        word.clear();
        out.extend(cjk.windows(2).map(|p| p.iter().collect::<String>()));
        cjk.clear();
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                let mut none = Vec::new();
                flush(&mut word, &mut none, &mut out);
            }
            cjk.push(c);
        } else if c.is_alphanumeric() {
            if !cjk.is_empty() {
                let mut none = String::new();
                flush(&mut none, &mut cjk, &mut out);
            }
            word.push(c);
        } else {
            flush(&mut word, &mut cjk, &mut out);
        }
    }
    flush(&mut word, &mut cjk, &mut out);
    out
}

/// A message's clauses, in order: split where a watch log moves on to the
/// next thing it says.
fn clauses(text: &str) -> impl Iterator<Item = &str> {
    text.split([',', ';', '.', '，', '；', '。', '、', '\n'])
        .filter(|c| !c.trim().is_empty())
}

/// A text cut into words for finding names in it: runs of letters and runs
/// of digits apart (`DG2` is `DG` `2`, `T/C` is `T` `C`), as written.
struct Tokens {
    raw: String,
    /// Each word with where it starts, in characters.
    words: Vec<(usize, String)>,
}

impl Tokens {
    fn of(text: &str) -> Self {
        Tokens {
            raw: text.to_string(),
            words: split_words(text),
        }
    }

    /// Where the text first holds `name` whole: Chinese anywhere; other
    /// names as whole words, a name written in capitals only as written
    /// (`ME`, not `me`), others in any case.
    fn find(&self, name: &str) -> Option<Place> {
        let len = std::cmp::Reverse(name.chars().count());
        if name.chars().any(is_cjk) {
            let at = self.raw.find(name)?;
            return Some((self.raw[..at].chars().count(), len));
        }
        let want = split_words(name);
        if want.is_empty() || want.len() > self.words.len() {
            return None;
        }
        let caps = name.chars().any(|c| c.is_ascii_uppercase())
            && (!name.chars().any(|c| c.is_ascii_lowercase())
                || name.chars().count() <= SYMBOL_AT_MOST);
        let same = |a: &(usize, String), b: &(usize, String)| match caps {
            true => a.1 == b.1,
            false => a.1.eq_ignore_ascii_case(&b.1),
        };
        self.words
            .windows(want.len())
            .find(|w| {
                w.iter().zip(&want).all(|(a, b)| same(a, b))
                    && (1..want.len()).all(|i| !glued(&want, i) || glued(w, i))
            })
            .map(|w| (w[0].0, len))
    }
}

/// A name this short that mixes cases is a symbol (`pH`) whose case is its
/// meaning: found only as written, since `PH` in an AMS text is a phase.
const SYMBOL_AT_MOST: usize = 3;

/// Whether word `i` follows word `i - 1` with nothing between them: a name
/// written as one (`4G`) is found only written as one, never in `No.4 G/E`.
fn glued(words: &[(usize, String)], i: usize) -> bool {
    let (start, word) = &words[i - 1];
    start + word.chars().count() == words[i].0
}

fn split_words(text: &str) -> Vec<(usize, String)> {
    let mut out: Vec<(usize, String)> = Vec::new();
    let mut cur = String::new();
    let (mut start, mut digits) = (0, false);
    for (i, c) in text.chars().enumerate() {
        if c.is_ascii_alphanumeric() || (c.is_alphabetic() && !is_cjk(c)) {
            let d = c.is_ascii_digit();
            if !cur.is_empty() && d != digits {
                out.push((start, std::mem::take(&mut cur)));
            }
            if cur.is_empty() {
                start = i;
            }
            digits = d;
            cur.push(c);
        } else if !cur.is_empty() {
            out.push((start, std::mem::take(&mut cur)));
        }
    }
    if !cur.is_empty() {
        out.push((start, cur));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, class: &str, title: &str, aliases: &[&str]) -> DocMeta {
        DocMeta {
            id: id.into(),
            title: title.into(),
            classes: vec![class.into()],
            aliases: aliases.iter().map(|s| s.to_string()).collect(),
            codes: Vec::new(),
            lang: "en".into(),
            first_passage: 0,
            n_passages: 0,
        }
    }

    fn docs() -> Vec<DocMeta> {
        vec![
            doc(
                "generator-en",
                "generator",
                "Diesel generators",
                &["DG", "D/G", "G/E", "genset", "generator", "副机", "发电机"],
            ),
            doc(
                "fresh_water_generator-en",
                "fresh_water_generator",
                "Fresh water generator (evaporator)",
                &["FWG", "fresh water generator", "造水机"],
            ),
            doc(
                "main_engine_cooling-en",
                "main_engine_cooling",
                "Main engine jacket cooling water",
                &["ME", "main engine", "JCW", "主机"],
            ),
            doc(
                "main_engine_fuel-en",
                "main_engine_fuel",
                "Main engine fuel oil system",
                &["ME", "main engine", "主机"],
            ),
            doc(
                "purifier-en",
                "purifier",
                "Fuel and lube oil purifiers (separators)",
                &["separator", "分油机"],
            ),
            doc(
                "ctd-en",
                "ctd",
                "CTD (conductivity, temperature, depth)",
                &["CTD"],
            ),
            doc("battery-en", "battery", "Buoy battery bank", &["battery"]),
            doc("solar-en", "solar", "Buoy solar panels", &["solar panel"]),
            doc("gnss-en", "gnss", "Buoy GNSS positioning", &["GPS"]),
            doc(
                "cellular_4g-en",
                "cellular_4g",
                "Buoy 4G modem",
                &["4G", "LTE"],
            ),
            doc("ph_sensor-en", "ph_sensor", "Buoy pH sensor", &["pH"]),
        ]
    }

    fn kind(k: &str) -> Option<(Vec<String>, By)> {
        of_kind(&docs(), k).map(|r| (r.classes, r.by))
    }

    fn classes(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_kind_that_is_a_class_maps_to_it() {
        assert_eq!(
            kind("generator"),
            Some((classes(&["generator"]), By::Class))
        );
        assert_eq!(
            kind("Main-Engine_Cooling"),
            Some((classes(&["main_engine_cooling"]), By::Class))
        );
    }

    /// An alias counts whole: its pieces are no words of the machine's
    /// name, or a plant's group for its generators (`电站`) would be the
    /// switchboard's by the pair it shares with `电站管理系统`.
    #[test]
    fn a_piece_of_an_alias_does_not_name_its_machine() {
        let d = vec![
            doc(
                "switchboard-zh",
                "switchboard",
                "主配电板",
                &["电站管理系统", "PMS"],
            ),
            doc("generator-zh", "generator", "柴油发电机", &["副机"]),
        ];
        assert_eq!(of_kind(&d, "电站"), None);
        assert_eq!(
            of_kind(&d, "电站管理系统").map(|r| (r.classes, r.by)),
            Some((vec!["switchboard".to_string()], By::Alias))
        );
        // The name and title still share words.
        assert_eq!(of_kind(&d, "配电板").map(|r| r.by), Some(By::Words));
    }

    #[test]
    fn a_plants_name_for_a_machine_maps_by_the_manuals_aliases() {
        assert_eq!(kind("No.2 DG"), Some((classes(&["generator"]), By::Alias)));
        assert_eq!(kind("DG2"), Some((classes(&["generator"]), By::Alias)));
        assert_eq!(kind("2号副机"), Some((classes(&["generator"]), By::Alias)));
        // The longest alias wins: the evaporator is no diesel generator.
        assert_eq!(
            kind("NO.1 FRESH WATER GENERATOR"),
            Some((classes(&["fresh_water_generator"]), By::Alias))
        );
        // A name several manuals declare maps to all of them.
        assert_eq!(
            kind("ME"),
            Some((
                classes(&["main_engine_cooling", "main_engine_fuel"]),
                By::Alias
            ))
        );
    }

    /// `4G` is one word as written: `No.4 G/E` is the fourth generator,
    /// not the modem.
    #[test]
    fn a_name_written_as_one_word_is_found_only_written_as_one() {
        assert_eq!(kind("No.4 G/E"), Some((classes(&["generator"]), By::Alias)));
        assert_eq!(
            kind("4G router"),
            Some((classes(&["cellular_4g"]), By::Alias))
        );
        assert_eq!(kind("DG2"), Some((classes(&["generator"]), By::Alias)));
    }

    #[test]
    fn a_name_in_capitals_matches_only_as_written() {
        assert_eq!(kind("call me"), None);
        assert_eq!(kind("sdg"), None);
        // A short symbol's case is its meaning: PH is a phase.
        assert_eq!(kind("STG PUMP PH FAIL"), None);
        assert_eq!(kind("pH probe"), Some((classes(&["ph_sensor"]), By::Alias)));
    }

    #[test]
    fn a_kind_that_shares_telling_words_with_one_class_maps_to_it() {
        assert_eq!(
            kind("lube oil purifiers"),
            Some((classes(&["purifier"]), By::Words))
        );
        // A group's words name no machine, and one shared word is chance.
        assert_eq!(kind("buoy"), None);
        assert_eq!(kind("ENGINE ROOM"), None);
        assert_eq!(kind("机舱"), None);
        assert_eq!(kind("solar crane"), None);
    }

    #[test]
    fn a_kind_that_names_no_manuals_equipment_is_unknown_and_the_message_decides() {
        let d = docs();
        let alarm = |kind: Option<&str>, message: &str| Alarm {
            kind: kind.map(str::to_string),
            message: Some(message.into()),
            ..crate::test_support::alarm("X-1")
        };
        let r = resolve(&d, &alarm(Some("ENGINE ROOM"), "NO.2 DG LO PRESS LOW"));
        assert_eq!(
            (r.classes, r.by, r.kind_unmapped),
            (classes(&["generator"]), By::Message, true)
        );
        // The first clause that names a machine is the alarm's; the log's
        // other machines come after it.
        let r = resolve(
            &d,
            &alarm(
                None,
                "readings checked, CTD conductivity stuck at 0.02, battery 12.6 V fine",
            ),
        );
        assert_eq!((r.classes, r.by), (classes(&["ctd"]), By::Message));
        let r = resolve(&d, &alarm(Some("SER2"), "sewage plant blower tripped"));
        assert_eq!(
            (r.classes, r.by, r.kind_unmapped),
            (vec![], By::Unknown, true)
        );
        // The first machine named is the alarm's: a UPS on battery.
        let ups = {
            let mut d = d.clone();
            d.push(doc(
                "ups-en",
                "ups",
                "UPS for shipboard equipment",
                &["UPS"],
            ));
            d
        };
        let r = resolve(&ups, &alarm(Some("POWER"), "UPS-LAB1 ON BATTERY"));
        assert_eq!((r.classes, r.by), (classes(&["ups"]), By::Message));
        // A machine no manual names, named by the kind and the message, has
        // no manual; a coarse group the manuals share words with is no
        // such evidence, nor a kind the message does not repeat.
        let r = resolve(&d, &alarm(Some("INCINERATOR"), "INCINERATOR FLAME FAIL"));
        assert_eq!(r.by, By::Unlisted);
        let r = resolve(&d, &alarm(Some("焚烧炉"), "焚烧炉熄火报警"));
        assert_eq!(r.by, By::Unlisted);
        let r = resolve(&d, &alarm(Some("INCINERATOR"), "FLAME FAIL"));
        assert_eq!(r.by, By::Unknown);
        let r = resolve(&d, &alarm(Some("ENGINE"), "ENGINE ROOM FLAME FAIL"));
        assert_eq!(r.by, By::Unknown);
        // A kind that maps is taken over the message.
        let r = resolve(&d, &alarm(Some("GPS"), "battery voltage low, no fix"));
        assert_eq!((r.classes, r.by), (classes(&["gnss"]), By::Alias));
    }

    /// An alarm system is what every alarm comes through, not the fire
    /// alarm system: `alarm` and `报警` are no machine's words, and a
    /// Chinese group word lends its characters to no pair (`警系`).
    #[test]
    fn an_alarm_system_is_no_fire_detection_system() {
        let mut d = docs();
        d.push(doc(
            "fire_detection-en",
            "fire_detection",
            "Fire detection and alarm system",
            &["fire alarm"],
        ));
        d.push(doc(
            "fire_detection-zh",
            "fire_detection",
            "火灾探测与报警系统",
            &["火灾报警"],
        ));
        for k in ["ALARM SYSTEM", "报警系统", "AMS alarm"] {
            assert_eq!(of_kind(&d, k).map(|r| r.by), None, "{k}");
        }
        assert_eq!(of_message(&d, "报警系统正常电源的故障"), None);
        // Its own names still find it.
        assert_eq!(
            of_kind(&d, "火灾报警系统").map(|r| r.classes),
            Some(classes(&["fire_detection"]))
        );
        assert_eq!(
            of_kind(&d, "fire alarm panel").map(|r| r.classes),
            Some(classes(&["fire_detection"]))
        );
    }

    /// A device's own status text names no machine (`+CME ERROR: 10`), but
    /// the plant's tag for it does: the tag decides when the kind and the
    /// message name none, and never over them.
    /// A buoy's data channels are named by what they measure.
    #[test]
    fn a_met_channel_named_by_what_it_measures_is_the_met_sensors() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge");
        let manuals = crate::retrieval::knowledge::load_dir(&dir).unwrap();
        let bytes = crate::retrieval::index::build(&manuals).unwrap();
        let index = crate::retrieval::Index::from_bytes(bytes).unwrap();
        let class = |kind: &str| of_kind(index.docs(), kind).map(|r| r.classes);
        for kind in [
            "wind speed",
            "Wind Direction",
            "relative humidity",
            "风速",
            "相对湿度",
        ] {
            assert_eq!(class(kind), Some(classes(&["met_sensors"])), "{kind}");
        }
        // A ship's air is no weather's.
        for kind in ["starting air pressure", "control air", "启动空气压力"] {
            assert_ne!(class(kind), Some(classes(&["met_sensors"])), "{kind}");
        }
    }

    #[test]
    fn the_equipment_tag_names_the_machine_when_kind_and_message_do_not() {
        let d = docs();
        let alarm = |equipment: &str, kind: Option<&str>, message: &str| Alarm {
            equipment: equipment.into(),
            kind: kind.map(str::to_string),
            message: Some(message.into()),
            ..crate::test_support::alarm("X-1")
        };
        let r = resolve(&d, &alarm("BUOY-03-LTE", None, "+CME ERROR: 10"));
        assert_eq!((r.classes, r.by), (classes(&["cellular_4g"]), By::Tag));
        let r = resolve(&d, &alarm("DG1-CTRL", Some("DSE7320"), "LOW OIL PRESSURE"));
        assert_eq!(
            (r.classes, r.by, r.kind_unmapped),
            (classes(&["generator"]), By::Tag, true)
        );
        // The message names its machine: the tag is not asked.
        let r = resolve(&d, &alarm("BUOY-03-LTE", None, "GPS no fix"));
        assert_eq!((r.classes, r.by), (classes(&["gnss"]), By::Message));
        // Matched whole and as written: a tag's letters are not words.
        for tag in ["LEGACY-1", "dg-ctrl", "PH-1", "E1"] {
            let r = resolve(&d, &alarm(tag, None, "FAULT 12"));
            assert_eq!(r.by, By::Unknown, "{tag}");
        }
    }
}
