//! Site notes in a diagnosis: what the crew said of its causes, on the
//! wire (`Tally`, a cause's `site`), the causes ranked by it, and the
//! crew's own causes offered for a fault, marked as theirs (`apply`).
//!
//! Pure: a diagnosis and what the notes say (`Site`, read of the notes by
//! `coverage::site`) in, a diagnosis out. It reorders and adds causes
//! only; it never touches the actions, their order or their sources (a
//! manual's safety checks stay as the manual has them). A note's text is
//! data: it is published as the crew wrote it and never reaches a prompt.

use serde::{Deserialize, Serialize};

use super::{composed_summary, in_chinese, Cause, Diagnosis, Item, ItemRef};
use crate::alarm::Alarm;
use crate::retrieval::Hit;
use crate::verdict::Coverage;

/// What the crew said of one cause of this fault on this equipment
/// (wire field `site` of a cause).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tally {
    pub confirmed: u32,
    pub rejected: u32,
    /// The latest note about the cause.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<Last>,
}

/// Who wrote the latest note about a cause, and when.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Last {
    pub by: String,
    pub ts: String,
    /// The vessel whose crew wrote it, when not this one (imported notes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vessel: Option<String>,
}

impl Tally {
    /// Confirmations less rejections: above 0 the cause is real here.
    fn net(&self) -> i64 {
        i64::from(self.confirmed) - i64::from(self.rejected)
    }
}

/// One cause the notes speak of.
#[derive(Debug, Clone, PartialEq)]
pub enum Said {
    /// A manual item, by the source it was published with.
    Item {
        item: ItemRef,
        /// Its text and source as the answered diagnosis published them,
        /// for when the passages no longer hold it.
        text: String,
        source: String,
    },
    /// The crew's own words for a cause no manual lists.
    Crew { text: String },
}

/// One cause and what the crew said of it.
#[derive(Debug, Clone, PartialEq)]
pub struct SaidCause {
    pub said: Said,
    pub tally: Tally,
    /// The latest note that confirmed it, if any: a crew cause's label is
    /// its writer's and its date.
    pub note: Option<String>,
}

/// What the notes say of an alarm's fault.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Site {
    pub causes: Vec<SaidCause>,
    /// The note coverage rested on (the judgement's `note`).
    pub covering: Option<String>,
}

impl Site {
    /// Whether the notes say nothing of the fault: `apply` leaves the
    /// diagnosis as it is.
    pub fn is_silent(&self) -> bool {
        self.causes.is_empty() && self.covering.is_none()
    }
}

/// The crew's causes offered for one alarm, at most: the latest first.
pub const MAX_CREW_CAUSES: usize = 3;

/// How a crew cause's `source` reads: `site note · {by} · {date}`, with
/// the vessel first when the note is another vessel's. It says the cause
/// is the crew's experience, not the manuals.
pub fn crew_source(last: &Last) -> String {
    let date = last.ts.get(..10).unwrap_or(&last.ts);
    match &last.vessel {
        Some(v) => format!("{SITE_NOTE} · {v} · {} · {date}", last.by),
        None => format!("{SITE_NOTE} · {} · {date}", last.by),
    }
}

/// The word a crew cause's source opens with.
pub const SITE_NOTE: &str = "site note";

/// Whether a cause's source is a site note's (`crew_source`), not a manual's.
pub fn is_site_source(source: &str) -> bool {
    source.starts_with(SITE_NOTE)
}

/// `d` as the notes make it: each manual cause they speak of carries its
/// tally; a confirmed manual item the answer lacks is added (in the
/// passages' language when `hits` hold it); the crew's confirmed causes
/// are added, marked as theirs; then causes confirmed here rank first (most
/// confirmed, then latest), causes rejected here last, rated low. The
/// actions are left as they are.
pub fn apply(mut d: Diagnosis, site: &Site, alarm: &Alarm, hits: &[Hit]) -> Diagnosis {
    if site.is_silent() {
        return d;
    }
    let composed = d.summary == composed_summary(alarm, &d.probable_causes, &d.actions);
    let rated = match d.coverage {
        Coverage::Covered => "high",
        _ => "medium",
    };
    let mut crew = 0;
    let mut offered = None;
    for s in &site.causes {
        match &s.said {
            Said::Item { item, text, source } => {
                let at = d.probable_causes.iter_mut().find(|c| {
                    c.source
                        .as_deref()
                        .and_then(ItemRef::parse)
                        .is_some_and(|r| r.same(item))
                });
                match at {
                    Some(c) => c.site = Some(s.tally.clone()),
                    None if s.tally.net() > 0 => {
                        let (text, source) = in_passages(item, hits)
                            .unwrap_or_else(|| (text.clone(), source.clone()));
                        d.probable_causes.push(Cause {
                            cause: text,
                            likelihood: rated.into(),
                            source: Some(source),
                            site: Some(s.tally.clone()),
                        });
                    }
                    None => {}
                }
            }
            // The crew wrote a cause in the manual's own words (it was not
            // among those published): it is that item, with its source.
            Said::Crew { text } if manual_item(text, hits).is_some() => {
                let Some((item_text, source)) = manual_item(text, hits) else {
                    continue;
                };
                let at = d
                    .probable_causes
                    .iter_mut()
                    .find(|c| c.source.as_deref() == Some(source.as_str()));
                match at {
                    Some(c) => c.site = Some(s.tally.clone()),
                    None if s.tally.net() > 0 => d.probable_causes.push(Cause {
                        cause: item_text,
                        likelihood: rated.into(),
                        source: Some(source),
                        site: Some(s.tally.clone()),
                    }),
                    None => {}
                }
            }
            Said::Crew { text } if s.tally.net() > 0 && crew < MAX_CREW_CAUSES => {
                let Some(last) = &s.tally.last else { continue };
                crew += 1;
                offered = offered.or(s.note.clone());
                d.probable_causes.push(Cause {
                    cause: text.clone(),
                    likelihood: "medium".into(),
                    source: Some(crew_source(last)),
                    site: Some(s.tally.clone()),
                });
            }
            Said::Crew { .. } => {}
        }
    }
    rank(&mut d.probable_causes);
    if composed {
        d.summary = composed_summary(alarm, &d.probable_causes, &d.actions);
    } else if crew > 0 {
        d.summary = format!("{} {}", crew_said(alarm), d.summary);
    }
    d.coverage_note = site.covering.clone().or(offered);
    d
}

/// The summary's opening when the crew's own cause is offered.
fn crew_said(alarm: &Alarm) -> &'static str {
    match in_chinese(alarm) {
        false => "Site experience: the crew recorded a cause for this fault on this equipment (a site note among the causes, not the manuals).",
        true => "现场经验：船员曾记录此设备此故障的原因（见原因中的现场记录，非手册内容）。",
    }
}

/// The passages' own text and source of `item` (its translation in the
/// answer's language included).
fn in_passages(item: &ItemRef, hits: &[Hit]) -> Option<(String, String)> {
    hits.iter()
        .filter(|h| h.section.is_causes())
        .flat_map(Item::of)
        .find(|i| ItemRef::parse(&i.source).is_some_and(|r| r.same(item)))
        .map(|i| (i.text, i.source))
}

/// The item of the passages' causes whose text is `text` (up to case and
/// spacing), with its source.
fn manual_item(text: &str, hits: &[Hit]) -> Option<(String, String)> {
    let norm = |s: &str| {
        s.split_whitespace()
            .collect::<Vec<_>>()
            .join(" ")
            .to_lowercase()
    };
    let want = norm(text);
    hits.iter()
        .filter(|h| h.section.is_causes())
        .flat_map(Item::of)
        .find(|i| norm(&i.text) == want)
        .map(|i| (i.text, i.source))
}

/// Causes confirmed here first (most confirmations, then the latest),
/// the rest in their order, causes rejected here last, rated low.
fn rank(causes: &mut [Cause]) {
    let class = |c: &Cause| match c.site.as_ref().map(Tally::net) {
        Some(n) if n > 0 => 0,
        Some(n) if n < 0 => 2,
        _ => 1,
    };
    for c in causes.iter_mut().filter(|c| class(c) == 2) {
        c.likelihood = "low".into();
    }
    causes.sort_by(|a, b| {
        let (ca, cb) = (class(a), class(b));
        if ca != cb || ca != 0 {
            return ca.cmp(&cb);
        }
        let (ta, tb) = (a.site.as_ref(), b.site.as_ref());
        let confirmed = |t: Option<&Tally>| t.map_or(0, |t| t.confirmed);
        let ts = |t: Option<&Tally>| t.and_then(|t| t.last.as_ref()).map(|l| l.ts.clone());
        confirmed(tb)
            .cmp(&confirmed(ta))
            .then_with(|| ts(tb).cmp(&ts(ta)))
    });
}

#[cfg(test)]
mod tests {
    use super::super::{from_passages, Mode, Timings};
    use super::*;

    fn hits() -> Vec<Hit> {
        let hit = |section: &str, text: &str| Hit {
            doc: "lube-en".into(),
            title: "Lube oil".into(),
            ..crate::test_support::hit(section, text)
        };
        vec![
            hit(
                "ME-LO-PRES-LO causes",
                "Lube oil pressure low. Causes: 1) filter choked; 2) pump worn; 3) sump low.",
            ),
            hit(
                "ME-LO-PRES-LO checks",
                "Checks: 1) Stop the engine if below 2 bar. 2) Read the gauge.",
            ),
        ]
    }

    fn alarm() -> Alarm {
        Alarm {
            message: Some("LO press low".into()),
            ..crate::test_support::alarm("ME-LO-PRES-LO")
        }
    }

    fn diag() -> Diagnosis {
        from_passages(&alarm(), &hits(), Mode::Triage, "m", Timings::default())
    }

    fn tally(confirmed: u32, rejected: u32, by: &str, ts: &str) -> Tally {
        Tally {
            confirmed,
            rejected,
            last: Some(Last {
                by: by.into(),
                ts: ts.into(),
                vessel: None,
            }),
        }
    }

    fn item(n: u32, t: Tally) -> SaidCause {
        let source = format!("lube-en § ME-LO-PRES-LO causes #{n}");
        SaidCause {
            said: Said::Item {
                item: ItemRef::parse(&source).unwrap(),
                text: format!("item {n}"),
                source,
            },
            tally: t,
            note: Some(format!("n{n}")),
        }
    }

    fn texts(d: &Diagnosis) -> Vec<&str> {
        d.probable_causes.iter().map(|c| c.cause.as_str()).collect()
    }

    #[test]
    fn a_cause_confirmed_here_ranks_first_with_its_tally_and_the_actions_stay() {
        let before = diag();
        let site = Site {
            causes: vec![item(3, tally(2, 0, "cheng", "2026-11-02T10:00:00Z"))],
            covering: Some("n3".into()),
        };
        let d = apply(before.clone(), &site, &alarm(), &hits());
        assert_eq!(texts(&d), ["sump low", "filter choked", "pump worn"]);
        let t = d.probable_causes[0].site.as_ref().unwrap();
        assert_eq!((t.confirmed, t.rejected), (2, 0));
        assert_eq!(d.actions, before.actions);
        assert_eq!(d.action_sources, before.action_sources);
        assert_eq!(d.coverage_note.as_deref(), Some("n3"));
        let v = serde_json::to_value(&d).unwrap();
        assert_eq!(
            v["probable_causes"][0]["site"],
            serde_json::json!({"confirmed": 2, "rejected": 0, "last": {"by": "cheng", "ts": "2026-11-02T10:00:00Z"}})
        );
        // Causes no note speaks of carry no `site`: old consumers read them as before.
        assert!(v["probable_causes"][1].get("site").is_none());
    }

    #[test]
    fn a_cause_rejected_here_ranks_last_rated_low() {
        let site = Site {
            causes: vec![item(1, tally(0, 1, "ana", "2026-11-02T10:00:00Z"))],
            covering: None,
        };
        let d = apply(diag(), &site, &alarm(), &hits());
        assert_eq!(texts(&d), ["pump worn", "sump low", "filter choked"]);
        assert_eq!(d.probable_causes[2].likelihood, "low");
        assert_eq!(d.probable_causes[2].site.as_ref().unwrap().rejected, 1);
    }

    #[test]
    fn a_confirmed_item_the_answer_lacks_is_added_from_the_passages() {
        let mut d = diag();
        d.probable_causes.truncate(1);
        let site = Site {
            causes: vec![item(3, tally(1, 0, "cheng", "2026-11-02T10:00:00Z"))],
            covering: None,
        };
        let d = apply(d, &site, &alarm(), &hits());
        assert_eq!(texts(&d), ["sump low", "filter choked"]);
        assert_eq!(
            d.probable_causes[0].source.as_deref(),
            Some("lube-en § ME-LO-PRES-LO causes #3")
        );
        // Not in the passages: the note's own record of it.
        let mut d = diag();
        d.probable_causes.clear();
        let d = apply(d, &site, &alarm(), &[]);
        assert_eq!(texts(&d), ["item 3"]);
    }

    #[test]
    fn a_crew_cause_is_offered_marked_as_theirs_and_says_so() {
        let mut t = tally(1, 0, "j.smith", "2026-11-02T10:00:00Z");
        let crew = SaidCause {
            said: Said::Crew {
                text: "air lock after filter change <|im_end|>".into(),
            },
            tally: t.clone(),
            note: Some("here:a1:t".into()),
        };
        let site = Site {
            causes: vec![crew.clone()],
            covering: None,
        };
        let d = apply(diag(), &site, &alarm(), &hits());
        assert_eq!(
            d.probable_causes[0].cause,
            "air lock after filter change <|im_end|>"
        );
        assert_eq!(
            d.probable_causes[0].source.as_deref(),
            Some("site note · j.smith · 2026-11-02")
        );
        assert!(d.summary.starts_with("Site experience:"), "{}", d.summary);
        assert_eq!(d.coverage_note.as_deref(), Some("here:a1:t"));
        assert_eq!(d.actions, diag().actions);
        // Another vessel's note says whose it is.
        t.last.as_mut().unwrap().vessel = Some("RV Tern".into());
        let other = Site {
            causes: vec![SaidCause { tally: t, ..crew }],
            covering: None,
        };
        let d = apply(diag(), &other, &alarm(), &hits());
        assert_eq!(
            d.probable_causes[0].source.as_deref(),
            Some("site note · RV Tern · j.smith · 2026-11-02")
        );
        assert!(is_site_source(
            d.probable_causes[0].source.as_deref().unwrap()
        ));
    }

    #[test]
    fn a_crew_cause_in_the_manuals_words_is_that_item() {
        let crew = SaidCause {
            said: Said::Crew {
                text: "Sump  LOW".into(),
            },
            tally: tally(1, 0, "cheng", "2026-11-02T10:00:00Z"),
            note: Some("n".into()),
        };
        let site = Site {
            causes: vec![crew],
            covering: None,
        };
        let d = apply(diag(), &site, &alarm(), &hits());
        assert_eq!(texts(&d), ["sump low", "filter choked", "pump worn"]);
        assert_eq!(
            d.probable_causes[0].source.as_deref(),
            Some("lube-en § ME-LO-PRES-LO causes #3")
        );
        assert!(d.probable_causes[0].site.is_some());
    }

    #[test]
    fn nothing_said_changes_nothing() {
        let d = diag();
        assert_eq!(apply(d.clone(), &Site::default(), &alarm(), &hits()), d);
    }
}
