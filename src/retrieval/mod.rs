//! Retrieval: the knowledge index and the ranking that picks passages for an alarm.
//!
//! The interface is narrow on purpose: `build_file` writes an index from a
//! knowledge folder, `Index::open` maps one, `Index::search` ranks passages for a
//! `Query`, and `LiveIndex` holds the one in use so a reload can swap it.
//! Ranking is BM25 over Latin words and CJK bigrams, plus boosts for an exact
//! alarm-code match, an equipment-class match and the query's language.
//! This module never talks to the model or the network.

pub mod glossary;
pub mod index;
pub mod kinds;
pub mod knowledge;
mod live;
pub mod section;
pub mod tokenize;

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::alarm::Alarm;
use crate::language::Language;
use index::RawIndex;
use knowledge::ListKind;
pub use live::LiveIndex;
pub use section::{Section, SectionRef};
use tokenize::terms;

/// Why an index could not be built, opened or read.
#[derive(Debug, thiserror::Error)]
pub enum IndexError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("knowledge document {path}: {problem}")]
    Document { path: PathBuf, problem: String },
    #[error("knowledge folder {0}: no manuals (*.md but README.md, outside dot-folders) found")]
    NoManuals(PathBuf),
    #[error("cannot build index: {0}")]
    Build(String),
    #[error("index is corrupt: {0}")]
    Corrupt(String),
    #[error("index format version {found} is not supported (this tidewatch reads version {supported}); rebuild it with `tidewatch index build`")]
    Version { found: u32, supported: u32 },
    #[error("index {path}: {inner}")]
    At {
        path: PathBuf,
        inner: Box<IndexError>,
    },
}

impl IndexError {
    fn with_path(self, path: &Path) -> Self {
        IndexError::At {
            path: path.to_owned(),
            inner: Box::new(self),
        }
    }
}

const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Boosts are additive on top of BM25, whose scores here run ~5–30 for a
/// typical alarm query. An exact code in the section heading must beat a vague
/// lexical match; a class or language match only breaks near-ties.
const BOOST_CODE_SECTION: f32 = 12.0;
const BOOST_CODE_DOC: f32 = 4.0;
const BOOST_CLASS: f32 = 4.0;
const BOOST_LANG: f32 = 3.0;

/// What to search for. `code` and `kind` come from the alarm's fields.
#[derive(Debug, Clone, Default)]
pub struct Query {
    pub text: String,
    pub code: Option<String>,
    pub kind: Option<String>,
    /// The plant's tag for the machine (`FWG-FT-01`), read for a manual's
    /// alias when neither the kind nor the text names the machine.
    pub tag: Option<String>,
    /// The answer's language: its manuals' passages are raised.
    pub lang: Language,
}

impl Query {
    /// The query an alarm makes: its code, its kind and its message (the
    /// code again for the code boosts). The daemon, `eval` and `bench` all
    /// build it here, so what they measure is what the daemon searches.
    pub fn of_alarm(a: &Alarm) -> Self {
        Query {
            text: a.query_text(),
            code: Some(a.code.clone()),
            kind: a.kind.clone(),
            tag: Some(a.equipment.clone()),
            lang: a.language(),
        }
    }

    /// A query from free text: words that look like alarm codes become the code.
    pub fn from_text(text: &str) -> Self {
        let code = text
            .split(|c: char| c.is_whitespace() || c == ',' || c == ':')
            .find(|w| {
                w.len() >= 4
                    && w.contains('-')
                    && w.chars().all(|c| {
                        c.is_ascii_uppercase() || c.is_ascii_digit() || c == '-' || c == '_'
                    })
            })
            .map(str::to_string);
        Query {
            text: text.to_string(),
            code,
            kind: None,
            tag: None,
            lang: Language::of_text(text),
        }
    }
}

/// One ranked passage.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Hit {
    /// Stable passage number within this index.
    pub passage: u32,
    pub doc: String,
    /// Its section's heading, read once where the index is read.
    pub section: Section,
    pub score: f32,
    pub text: String,
    pub lang: String,
    pub title: String,
}

impl Hit {
    /// Its section of its manual, for a judgement to name.
    pub fn reference(&self) -> SectionRef {
        SectionRef {
            doc: self.doc.clone(),
            section: self.section.clone(),
        }
    }
}

/// An opened index.
pub struct Index {
    raw: RawIndex,
}

impl Index {
    pub fn open(path: &Path) -> Result<Self, IndexError> {
        Ok(Self {
            raw: RawIndex::open(path)?,
        })
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, IndexError> {
        Ok(Self {
            raw: RawIndex::from_bytes(bytes)?,
        })
    }

    pub fn n_passages(&self) -> u32 {
        self.raw.n_passages
    }

    pub fn n_docs(&self) -> usize {
        self.raw.docs.len()
    }

    pub fn byte_len(&self) -> usize {
        self.raw.byte_len()
    }

    /// The documents whose front matter names `class` (an alarm's `kind`),
    /// in index order; empty when no manual is for that equipment.
    /// True when a manual of this index lists `code` (its front matter's
    /// `codes:`), case ignored.
    pub fn has_code(&self, code: &str) -> bool {
        self.raw
            .docs
            .iter()
            .any(|d| d.codes.iter().any(|c| c.eq_ignore_ascii_case(code)))
    }

    /// The documents' table: ids, classes, aliases and titles.
    pub fn docs(&self) -> &[index::DocMeta] {
        &self.raw.docs
    }

    /// The documents of any of `classes`.
    pub fn docs_of_classes(&self, classes: &[String]) -> Vec<String> {
        self.raw
            .docs
            .iter()
            .filter(|d| {
                d.classes
                    .iter()
                    .any(|c| classes.iter().any(|k| c.eq_ignore_ascii_case(k)))
            })
            .map(|d| d.id.clone())
            .collect()
    }

    pub fn docs_of_class(&self, class: &str) -> Vec<String> {
        self.raw
            .docs
            .iter()
            .filter(|d| d.classes.iter().any(|c| c.eq_ignore_ascii_case(class)))
            .map(|d| d.id.clone())
            .collect()
    }

    /// The `k` best passages for a query, best first.
    pub fn search(&self, q: &Query, k: usize) -> Result<Vec<Hit>, IndexError> {
        let n = self.raw.n_passages as usize;
        if n == 0 || k == 0 {
            return Ok(Vec::new());
        }
        // The trade's short forms read as the manuals' words too (`DG` as
        // `diesel generator`), so a plant's AMS text finds the sections
        // that name its alarm in full.
        // What the watchkeeper found normal is no part of the fault: `sump
        // level normal, No.2 DG running normally` names other sections.
        let faulty = crate::reading::not_normal(&q.text);
        let text = match faulty.trim().is_empty() {
            true => &q.text,
            false => &faulty,
        };
        let mut qterms = terms(&glossary::expand(text));
        if let Some(kind) = &q.kind {
            qterms.extend(terms(&kind.replace('_', " ")));
        }
        qterms.sort_unstable();
        qterms.dedup();
        let mut scores = self.bm25(&qterms)?;
        let code = q.code.as_ref().map(|c| c.to_ascii_uppercase());
        self.boost_documents(&mut scores, code.as_deref(), q);
        let candidates = shortlist(&scores, k);
        let mut hits = self.hits_of(candidates, &scores, code.as_deref())?;
        hits.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.passage.cmp(&b.passage)));
        hits.truncate(k);
        Ok(hits)
    }

    /// Every passage's BM25 score for the query terms.
    fn bm25(&self, qterms: &[String]) -> Result<Vec<f32>, IndexError> {
        let n = self.raw.n_passages as usize;
        let mut scores = vec![0f32; n];
        let avgdl = self.raw.avgdl.max(1.0);
        for t in qterms {
            let Some((df, list)) = self.raw.postings(t)? else {
                continue;
            };
            let idf = ((n as f32 - df as f32 + 0.5) / (df as f32 + 0.5) + 1.0).ln();
            for (pid, tf) in list {
                let (dl, _) = self.raw.passage_meta(pid);
                let tf = f32::from(tf);
                let norm = K1 * (1.0 - B + B * f32::from(dl) / avgdl);
                scores[pid as usize] += idf * tf * (K1 + 1.0) / (tf + norm);
            }
        }
        Ok(scores)
    }

    /// Raises the passages of documents that name the alarm's code or class,
    /// or are in its language: those that matched a term, and every passage
    /// of a document that names the code or class.
    fn boost_documents(&self, scores: &mut [f32], code: Option<&str>, q: &Query) {
        let want = q.lang.code();
        // The kind as the manuals know it (`No.2 DG` is the generators'),
        // else the machine the message names first: a plant that leaves
        // the kind out or writes a group there (`ENGINE` / `S/T AFT BRG
        // TEMP H`) names its machine in the text.
        let kind_classes = q
            .kind
            .as_deref()
            .and_then(|k| kinds::of_kind(&self.raw.docs, k))
            .map(|r| r.classes)
            .or_else(|| kinds::of_message(&self.raw.docs, &q.text))
            .or_else(|| {
                q.tag
                    .as_deref()
                    .and_then(|t| kinds::of_tag(&self.raw.docs, t))
            })
            .unwrap_or_default();
        for (di, d) in self.raw.docs.iter().enumerate() {
            let mut boost = 0.0;
            if let Some(c) = code {
                if d.codes.iter().any(|dc| dc.eq_ignore_ascii_case(c)) {
                    boost += BOOST_CODE_DOC;
                }
            }
            if kind_classes
                .iter()
                .any(|k| d.classes.iter().any(|dc| dc.eq_ignore_ascii_case(k)))
            {
                boost += BOOST_CLASS;
            }
            if d.lang == want {
                boost += BOOST_LANG;
            }
            let range = d.first_passage..d.first_passage + d.n_passages;
            let strong = boost > BOOST_LANG;
            for pid in range {
                let s = &mut scores[pid as usize];
                if *s > 0.0 || strong {
                    *s += boost;
                }
                debug_assert!(self.raw.passage_meta(pid).1 as usize == di);
            }
        }
    }

    /// The shortlisted passages as hits, with the code-in-heading boost
    /// (which needs the passage's text).
    fn hits_of(
        &self,
        candidates: Vec<u32>,
        scores: &[f32],
        code: Option<&str>,
    ) -> Result<Vec<Hit>, IndexError> {
        let mut hits = Vec::with_capacity(candidates.len());
        for pid in candidates {
            let p = self.raw.passage(pid)?;
            let (_, di) = self.raw.passage_meta(pid);
            let d = self.raw.docs.get(usize::from(di)).ok_or_else(|| {
                IndexError::Corrupt(format!("passage {pid} names a missing document"))
            })?;
            let mut score = scores[pid as usize];
            let section = Section::from(p.section);
            if let Some(c) = code {
                if section.heading().to_ascii_uppercase().contains(c) {
                    score += BOOST_CODE_SECTION;
                    // The causes section is what a diagnosis needs first.
                    if section.is_causes() {
                        score += 1.0;
                    }
                }
            }
            hits.push(Hit {
                passage: pid,
                doc: d.id.clone(),
                section,
                score,
                text: p.text,
                lang: d.lang.clone(),
                title: d.title.clone(),
            });
        }
        Ok(hits)
    }
}

impl Index {
    /// The same section of the manual's translation in `lang`: the document
    /// of the same equipment ("battery-en" → "battery-zh"), the section about
    /// the same alarm code with the same kind of list (causes or checks) and
    /// the same part of a split section. None when the knowledge base has no
    /// such translation.
    /// Every section that opens a list of causes (a split one's first part
    /// only), in index order, with its manual's first equipment class: each
    /// alarm code of each manual, once per language. What `tidewatch warm`
    /// raises alarms from.
    pub fn causes_sections(&self) -> Vec<(Hit, Option<String>)> {
        self.causes_in(|_| true)
    }

    /// `causes_sections` of the documents `docs` only.
    pub fn causes_of(&self, docs: &[String]) -> Vec<Hit> {
        self.causes_in(|d| docs.contains(d))
            .into_iter()
            .map(|(h, _)| h)
            .collect()
    }

    fn causes_in(&self, keep: impl Fn(&String) -> bool) -> Vec<(Hit, Option<String>)> {
        let mut out = Vec::new();
        for d in self.raw.docs.iter().filter(|d| keep(&d.id)) {
            for pid in d.first_passage..d.first_passage + d.n_passages {
                let Ok(p) = self.raw.passage(pid) else {
                    continue;
                };
                let section = Section::from(p.section);
                if !section.is_causes() {
                    continue;
                }
                let part = section.part();
                if !part.is_empty() && !part.starts_with("(1/") && !part.starts_with("（1/") {
                    continue;
                }
                let hit = Hit {
                    passage: pid,
                    doc: d.id.clone(),
                    section,
                    score: 0.0,
                    text: p.text,
                    lang: d.lang.clone(),
                    title: d.title.clone(),
                };
                out.push((hit, d.classes.first().cloned()));
            }
        }
        out
    }

    /// The same passage in the manual's translation into `lang`: a list
    /// by its alarm code, kind and part; a passage without a list (the
    /// safety notes) by its place among such passages, as a translation
    /// keeps its sections' order, and only when both manuals have as many.
    pub fn twin(&self, hit: &Hit, lang: &str) -> Option<Hit> {
        let (stem, _) = hit.doc.rsplit_once('-')?;
        let other = format!("{stem}-{lang}");
        if let Some(kind) = hit.section.list() {
            return self.section_of(&other, hit, kind, Some(hit.section.part()));
        }
        let mine: Vec<Hit> = self.unlisted(&hit.doc, hit.score).collect();
        let place = mine.iter().position(|h| h.passage == hit.passage)?;
        let theirs: Vec<Hit> = self.unlisted(&other, hit.score).collect();
        (theirs.len() == mine.len()).then(|| theirs.into_iter().nth(place))?
    }

    /// The passages of document `doc` that hold no list, in index order.
    fn unlisted(&self, doc: &str, score: f32) -> impl Iterator<Item = Hit> + '_ {
        self.passages_of(doc, score)
            .filter(|h| h.section.list().is_none())
    }

    /// Every passage of document `doc` as a hit scored `score`, in index
    /// order.
    fn passages_of(&self, doc: &str, score: f32) -> impl Iterator<Item = Hit> + '_ {
        let d = self.raw.docs.iter().find(|d| d.id == doc);
        let pids = d.map_or(0..0, |d| d.first_passage..d.first_passage + d.n_passages);
        pids.filter_map(move |pid| {
            let d = d?;
            let p = self.raw.passage(pid).ok()?;
            Some(Hit {
                passage: pid,
                doc: d.id.clone(),
                section: Section::from(p.section),
                score,
                text: p.text,
                lang: d.lang.clone(),
                title: d.title.clone(),
            })
        })
    }

    /// The other list of the same alarm code in the same manual: the checks
    /// of a causes section, or the causes of a checks section (its first
    /// part when it is split).
    pub fn sibling(&self, hit: &Hit, kind: ListKind) -> Option<Hit> {
        self.section_of(&hit.doc, hit, kind, None)
    }

    /// Every part of the section `hit` is a part of (the section itself when
    /// it is whole), in index order.
    pub fn parts(&self, hit: &Hit) -> Vec<Hit> {
        match hit.section.list() {
            Some(kind) => self.sections_of(&hit.doc, hit, kind).collect(),
            None => vec![hit.clone()],
        }
    }

    /// The passage of document `doc` about `like`'s alarm code holding a
    /// list of `kind`, of the given part (None: the first that exists).
    fn section_of(&self, doc: &str, like: &Hit, kind: ListKind, part: Option<&str>) -> Option<Hit> {
        self.sections_of(doc, like, kind)
            .find(|h| part.is_none_or(|part| h.section.part() == part))
    }

    /// The passages of document `doc` about `like`'s alarm code holding a
    /// list of `kind`: every part of it, in index order.
    fn sections_of<'s>(
        &'s self,
        doc: &str,
        like: &'s Hit,
        kind: ListKind,
    ) -> impl Iterator<Item = Hit> + 's {
        let code = like.section.code();
        self.passages_of(doc, like.score).filter(move |h| {
            !h.section.heading().trim().is_empty()
                && h.section.code() == code
                && h.section.list() == Some(kind)
        })
    }
}

/// The passages worth a closer look: those scored above 0, at most
/// `max(8k, 24)` of them. The code-in-heading boost needs the passage text,
/// so it is applied to this shortlist only; it reorders the top, it cannot
/// rescue the bottom.
fn shortlist(scores: &[f32], k: usize) -> Vec<u32> {
    let mut candidates: Vec<u32> = Vec::new();
    for (pid, s) in scores.iter().enumerate() {
        if *s > 0.0 {
            candidates.push(pid as u32);
        }
    }
    let keep = (k * 8).max(24);
    if candidates.len() > keep {
        // Partial selection: a full sort of every matching passage is most
        // of the query time at 10k passages.
        candidates.select_nth_unstable_by(keep - 1, |a, b| {
            scores[*b as usize].total_cmp(&scores[*a as usize])
        });
        candidates.truncate(keep);
    }
    candidates
}

/// The prompt's passages with both lists a diagnosis needs: when they hold
/// an alarm code's causes but no checks at all (or checks but no causes),
/// the manual's other list for the best such passage's code is added after
/// them. An alarm whose code no manual names gets the passages of the
/// nearest code; without that code's checks its answer could name causes
/// and no action to take.
pub fn with_both_lists(index: &Index, mut hits: Vec<Hit>) -> Vec<Hit> {
    let kinds: Vec<Option<ListKind>> = hits.iter().map(|h| h.section.list()).collect();
    for (have, want) in [
        (ListKind::Causes, ListKind::Checks),
        (ListKind::Checks, ListKind::Causes),
    ] {
        if kinds.contains(&Some(want)) {
            continue;
        }
        let Some(i) = kinds.iter().position(|k| *k == Some(have)) else {
            continue;
        };
        if let Some(mut other) = index.sibling(&hits[i], want) {
            other.score = hits.last().map_or(other.score, |h| h.score);
            hits.push(other);
        }
    }
    hits
}

/// `hits` with the parts they lack of each causes section they hold a part
/// of: a confirmed item (`diagnosis::site`) may be in a part retrieval did
/// not rank, and its text and source are the manual's only there. Not for
/// a prompt: every passage costs the model its tokens.
pub fn with_every_part(index: &Index, hits: &[Hit]) -> Vec<Hit> {
    let mut out = hits.to_vec();
    for h in hits
        .iter()
        .filter(|h| h.section.is_causes() && !h.section.part().is_empty())
    {
        for p in index.parts(h) {
            if !out.iter().any(|o| o.passage == p.passage) {
                out.push(p);
            }
        }
    }
    out
}

/// The prompt's passages in the alarm's language: a passage of the other
/// language is replaced by its translation's same section where the
/// knowledge base has one, so that what the model reads, and the manual
/// items a chosen answer publishes, are in the language of the alarm.
pub fn in_language(index: &Index, hits: Vec<Hit>, lang: Language) -> Vec<Hit> {
    let want = lang.code();
    let mut out: Vec<Hit> = Vec::with_capacity(hits.len());
    for h in hits {
        let h = match h.lang != want {
            true => index.twin(&h, want).unwrap_or(h),
            false => h,
        };
        if !out.iter().any(|o| o.passage == h.passage) {
            out.push(h);
        }
    }
    out
}

/// Builds an index from a knowledge folder and writes it atomically to `out`.
/// Returns `(documents, passages, bytes)`.
pub fn build_file(knowledge: &Path, out: &Path) -> Result<(usize, u32, usize), IndexError> {
    let docs = knowledge::load_dir(knowledge)?;
    let bytes = index::build(&docs)?;
    let probe = Index::from_bytes(bytes.clone())?;
    write_index(out, &bytes)?;
    Ok((docs.len(), probe.n_passages(), bytes.len()))
}

/// Writes an index file, making its folder: whole or not at all, so a
/// daemon reloading it never maps half of one. Its mode is the umask's, as
/// the daemon's user reads an index another user built.
pub fn write_index(out: &Path, bytes: &[u8]) -> Result<(), IndexError> {
    let io = |source| IndexError::Io {
        path: out.to_owned(),
        source,
    };
    if let Some(dir) = out.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(io)?;
    }
    crate::durable::write_atomic(out, bytes, crate::durable::Access::Umask).map_err(io)
}

/// Passages scoring under this share of the best one stay out of the prompt:
/// on the eval set they were other equipment's sections, and each costs
/// ~100 prompt tokens (~5 s on the board).
pub const PROMPT_FLOOR: f32 = 0.5;

/// The passages worth a place in a prompt, best first, at most `k`. Of a
/// passage and its translation (same alarm code, the other language's manual
/// of the same equipment) only one is kept, in the language of the query
/// text, at the better one's rank: the knowledge base carries each manual in
/// English and Chinese, and a translation adds nothing. Passages scoring
/// under `floor` times the best are dropped. On the board each passage costs
/// several seconds of prompt reading.
pub fn for_prompt(hits: Vec<Hit>, k: usize, floor: f32, lang: Language) -> Vec<Hit> {
    let want = lang.code();
    let best = hits.first().map_or(0.0, |h| h.score);
    let code = |h: &Hit| section_code(h).to_string();
    let stem = |h: &Hit| {
        h.doc
            .rsplit_once('-')
            .map_or(h.doc.clone(), |(s, _)| s.to_string())
    };
    let mut out: Vec<Hit> = Vec::with_capacity(k);
    for h in hits {
        if h.score < best * floor {
            break;
        }
        let twin = out
            .iter()
            .position(|o| o.lang != h.lang && stem(o) == stem(&h) && code(o) == code(&h));
        match twin {
            Some(i) if h.lang == want && out[i].lang != want => out[i] = h,
            Some(_) => {}
            None if out.len() < k => out.push(h),
            None => {}
        }
    }
    out
}

/// The alarm code a passage is about: the first word of its section heading
/// ("ME-JCW-TEMP-HI causes").
fn section_code(h: &Hit) -> &str {
    h.section.code()
}

/// When the manuals have sections for the alarm's own code, only those go
/// into the prompt: they are what the diagnosis is about, and a neighbouring
/// code's section (same equipment, shared words) costs ~70 prompt tokens,
/// ~3.5 s on the board, for text the model should not use. Alarms whose code
/// no section names keep every passage `for_prompt` chose.
pub fn own_code_only(hits: Vec<Hit>, code: &str) -> Vec<Hit> {
    let own = |h: &Hit| !code.is_empty() && section_code(h).eq_ignore_ascii_case(code);
    if hits.iter().any(own) {
        hits.into_iter().filter(own).collect()
    } else {
        hits
    }
}

/// The passages of a fault covered under a plant's own code (`coverage`):
/// the covering section's code's only, as `own_code_only` keeps an alarm's
/// own code's, with both its lists. `with_both_lists` adds a list only when
/// no passage holds one, so the hits may hold another code's checks and
/// not this code's: without them the answer had causes and no check to do.
pub fn covering_passages(index: &Index, hits: Vec<Hit>, code: &str) -> Vec<Hit> {
    with_both_lists(index, own_code_only(hits, code))
}

/// The passages an alarm's prompt gets, from a search with a few spare hits:
/// `for_prompt` at `PROMPT_FLOOR`, then `own_code_only`. The daemon and the
/// retrieval eval both call this, so the eval measures what the model sees.
pub fn prompt_passages(hits: Vec<Hit>, k: usize, lang: Language, code: &str) -> Vec<Hit> {
    own_code_only(for_prompt(hits, k, PROMPT_FLOOR, lang), code)
}

/// Hits searched beyond `k`: `for_prompt` drops a passage's translation,
/// and the prompt should still get `k` passages.
const SPARE_HITS: usize = 3;

/// The passages an alarm's prompt gets, ranked as the daemon ranks them: a
/// search with a few spare hits, then `prompt_passages` (the floor, one of
/// each translation, the alarm's own code), `with_both_lists` (a causes
/// section's checks, or the other way round) and `in_language` (the
/// alarm's language). The daemon and `eval` both call this, so the eval's
/// retrieval figure is what the model reads.
pub fn passages_for(index: &Index, alarm: &Alarm, k: usize) -> Result<Vec<Hit>, IndexError> {
    let q = Query::of_alarm(alarm);
    let hits = index.search(&q, k + SPARE_HITS)?;
    // The manual items an answer quotes are in the answer's language.
    let lang = alarm.language();
    let hits = prompt_passages(hits, k, lang, &alarm.code);
    let hits = with_both_lists(index, hits);
    Ok(in_language(index, hits, lang))
}

#[cfg(test)]
mod tests {
    use super::knowledge::parse_document;
    use super::*;

    fn h(doc: &str, section: &str, lang: &str, score: f32) -> Hit {
        Hit {
            doc: doc.into(),
            score,
            lang: lang.into(),
            title: String::new(),
            ..crate::test_support::hit(section, "")
        }
    }

    #[test]
    fn only_the_alarms_own_code_sections_when_there_are_any() {
        let hits = vec![
            h("lube-en", "ME-LO-PRES-LO causes", "en", 60.0),
            h("lube-en", "ME-TC-LO-PRES-LO causes", "en", 40.0),
            h("lube-en", "ME-LO-PRES-LO checks", "en", 38.0),
        ];
        let sections = |v: Vec<Hit>| v.into_iter().map(|h| h.section).collect::<Vec<_>>();
        assert_eq!(
            sections(own_code_only(hits.clone(), "me-lo-pres-lo")),
            ["ME-LO-PRES-LO causes", "ME-LO-PRES-LO checks"]
        );
        // An unknown code (or none) keeps what retrieval chose.
        assert_eq!(own_code_only(hits.clone(), "XX-UNKNOWN").len(), 3);
        assert_eq!(own_code_only(hits.clone(), "").len(), 3);
        // A prefix of a code is not the code.
        assert_eq!(own_code_only(hits, "ME-LO").len(), 3);
    }

    #[test]
    fn translations_of_taken_passages_and_weak_passages_stay_out_of_the_prompt() {
        let hits = vec![
            h("cooling-zh", "ME-JCW-PRES-LO 原因", "zh", 60.0),
            h("cooling-zh", "ME-JCW-PRES-LO 检查与处理", "zh", 38.0),
            h("cooling-en", "ME-JCW-PRES-LO causes", "en", 34.0),
            h("cooling-en", "ME-JCW-TEMP-HI causes", "en", 33.0),
            h("lube-en", "ME-LO-PRES-LO causes", "en", 20.0),
        ];
        let sections = |v: Vec<Hit>| v.into_iter().map(|h| h.section).collect::<Vec<_>>();
        assert_eq!(
            sections(for_prompt(hits.clone(), 3, 0.5, Language::Chinese)),
            [
                "ME-JCW-PRES-LO 原因",
                "ME-JCW-PRES-LO 检查与处理",
                "ME-JCW-TEMP-HI causes"
            ]
        );
        // An English answer gets the English twin, at the Chinese one's rank.
        assert_eq!(
            sections(for_prompt(hits.clone(), 3, 0.5, Language::English)),
            [
                "ME-JCW-PRES-LO causes",
                "ME-JCW-PRES-LO 检查与处理",
                "ME-JCW-TEMP-HI causes"
            ]
        );
        // Same language, same code: both the causes and the checks stay.
        assert_eq!(for_prompt(hits.clone(), 2, 0.5, Language::English).len(), 2);
        // The floor drops what scores far below the best.
        assert_eq!(for_prompt(hits, 5, 0.9, Language::English).len(), 1);
        assert!(for_prompt(Vec::new(), 3, 0.5, Language::English).is_empty());
    }

    fn doc(id: &str, classes: &str, codes: &str, lang: &str, body: &str) -> knowledge::Document {
        parse_document(
            id,
            &format!("---\ntitle: {id}\nclasses: [{classes}]\ncodes: [{codes}]\nlang: {lang}\n---\n# {id}\n{body}"),
        )
        .unwrap()
    }

    fn sample() -> Vec<u8> {
        let docs = vec![
            doc("lube-en", "main_engine_lube_oil", "ME-LO-PRES-LO", "en",
                "## ME-LO-PRES-LO causes\nLube oil pressure low. Causes: clogged filter, worn pump, low sump level.\n## Safety\nStop the engine.\n"),
            doc("lube-zh", "main_engine_lube_oil", "ME-LO-PRES-LO", "zh",
                "## ME-LO-PRES-LO 原因\n主机滑油压力低。原因：滤器堵塞，滑油泵磨损，油底壳油位低。\n## 安全注意事项\n停车检查。\n"),
            doc("cool-en", "main_engine_cooling", "ME-JCW-TEMP-HI", "en",
                "## ME-JCW-TEMP-HI causes\nJacket water temperature high. Causes: thermostat stuck, cooler fouled, pump worn, low pressure in the expansion tank.\n"),
        ];
        index::build(&docs).unwrap()
    }

    #[test]
    fn round_trip_keeps_every_passage() {
        let idx = Index::from_bytes(sample()).unwrap();
        assert_eq!(idx.n_docs(), 3);
        assert_eq!(idx.n_passages(), 5);
        let hits = idx
            .search(&Query::from_text("lube oil pressure low"), 10)
            .unwrap();
        assert_eq!(hits[0].doc, "lube-en");
        assert_eq!(hits[0].section, "ME-LO-PRES-LO causes");
        assert!(hits[0].text.contains("clogged filter"));
    }

    #[test]
    fn a_passage_in_the_other_language_gives_way_to_its_translation() {
        let idx = Index::from_bytes(sample()).unwrap();
        let en = idx
            .search(&Query::from_text("lube oil pressure low"), 1)
            .unwrap();
        assert_eq!(en[0].section, "ME-LO-PRES-LO causes");
        let zh = in_language(&idx, en.clone(), Language::Chinese);
        assert_eq!(
            (zh[0].doc.as_str(), zh[0].section.heading()),
            ("lube-zh", "ME-LO-PRES-LO 原因")
        );
        assert!(zh[0].text.contains("滤器堵塞"), "{:?}", zh[0].text);
        // Already in the alarm's language: untouched.
        assert_eq!(in_language(&idx, en.clone(), Language::English), en);
        // A manual without a translation keeps its passage.
        let cool = idx
            .search(&Query::from_text("jacket water temperature high"), 1)
            .unwrap();
        assert_eq!(in_language(&idx, cool.clone(), Language::Chinese), cool);
        // A section that is no list (the manual's safety notes) gives way to
        // the translation's section in the same place among such sections.
        let safety = idx.search(&Query::from_text("stop the engine"), 1).unwrap();
        assert_eq!(safety[0].section.heading(), "Safety");
        let zh = in_language(&idx, safety, Language::Chinese);
        assert_eq!(
            (zh[0].doc.as_str(), zh[0].section.heading()),
            ("lube-zh", "安全注意事项")
        );
        assert!(zh[0].text.contains("停车检查"), "{:?}", zh[0].text);
        // A hit that is not the manual's own passage has no twin.
        let mut made_up = en[0].clone();
        made_up.section = "Safety".into();
        assert_eq!(idx.twin(&made_up, "zh"), None);
    }

    #[test]
    fn an_alarms_passages_are_in_its_messages_language_whatever_its_kind() {
        let idx = Index::from_bytes(sample()).unwrap();
        // A plant that names its machines in Chinese and raises English
        // texts: the answer is in English (the message's language), and so
        // must its manual items be.
        let en = crate::alarm::Alarm {
            kind: Some("主机滑油".into()),
            message: Some("lube oil pressure low".into()),
            ..crate::test_support::alarm("AL-17")
        };
        let hits = passages_for(&idx, &en, 3).unwrap();
        assert_eq!(
            hits[0].section.heading(),
            "ME-LO-PRES-LO causes",
            "{hits:?}"
        );
        assert!(
            hits.iter()
                .filter(|h| h.section.is_causes())
                .all(|h| h.lang == "en"),
            "{hits:?}"
        );
        // An English log that names a place in Chinese is English.
        let log = crate::alarm::Alarm {
            message: Some("lube oil pressure low at 0305 in the 机舱, filter changed".into()),
            ..crate::test_support::alarm("AL-17")
        };
        let hits = passages_for(&idx, &log, 3).unwrap();
        assert!(
            hits.iter()
                .filter(|h| h.section.is_causes())
                .all(|h| h.lang == "en"),
            "{hits:?}"
        );
        // A Chinese message keeps Chinese passages, whatever the kind.
        let zh = crate::alarm::Alarm {
            kind: Some("main engine".into()),
            message: Some("主机滑油压力低".into()),
            ..crate::test_support::alarm("AL-17")
        };
        let hits = passages_for(&idx, &zh, 3).unwrap();
        assert_eq!(hits[0].section.heading(), "ME-LO-PRES-LO 原因", "{hits:?}");
    }

    #[test]
    fn a_causes_passage_without_its_checks_gets_them_from_the_manual() {
        let docs = vec![doc(
            "lube-en",
            "main_engine_lube_oil",
            "ME-LO-PRES-LO",
            "en",
            "## ME-LO-PRES-LO causes\nCauses: 1) filter; 2) pump.\n## ME-LO-PRES-LO checks\nChecks: 1) Read the gauge. 2) Change the filter.\n## Safety\nStop the engine.\n",
        )];
        let idx = Index::from_bytes(index::build(&docs).unwrap()).unwrap();
        let all = idx
            .search(
                &Query::from_text("lube oil pressure low filter pump gauge engine"),
                5,
            )
            .unwrap();
        let only = |end: &str| -> Vec<Hit> {
            all.iter()
                .filter(|h| h.section.heading().ends_with(end))
                .cloned()
                .collect()
        };
        let both = with_both_lists(&idx, only("causes"));
        let sections: Vec<&str> = both.iter().map(|h| h.section.heading()).collect();
        assert_eq!(sections, ["ME-LO-PRES-LO causes", "ME-LO-PRES-LO checks"]);
        assert!(both[1].text.contains("Read the gauge"));
        // Both lists already there, or no list at all: nothing added.
        assert_eq!(with_both_lists(&idx, both.clone()), both);
        assert_eq!(with_both_lists(&idx, only("Safety")), only("Safety"));
        // Checks without causes get the causes.
        let both = with_both_lists(&idx, only("checks"));
        assert_eq!(both[1].section, "ME-LO-PRES-LO causes");
    }

    #[test]
    fn a_covering_sections_code_keeps_both_its_lists() {
        let docs = vec![doc(
            "lube-en",
            "main_engine_lube_oil",
            "ME-LO-PRES-LO",
            "en",
            "## ME-LO-PRES-LO causes\nCauses: 1) filter; 2) pump.\n## ME-LO-PRES-LO checks\nChecks: 1) Read the gauge.\n## ME-LO-TEMP-HI causes\nCauses: 1) cooler.\n## ME-LO-TEMP-HI checks\nChecks: 1) Check the cooler.\n",
        )];
        let idx = Index::from_bytes(index::build(&docs).unwrap()).unwrap();
        let all = idx
            .search(&Query::from_text("lube oil pressure filter pump cooler"), 8)
            .unwrap();
        // Retrieval kept the pressure's causes and the temperature's checks:
        // a list of each kind, so nothing was added.
        let hits: Vec<Hit> = all
            .iter()
            .filter(|h| h.section == "ME-LO-PRES-LO causes" || h.section == "ME-LO-TEMP-HI checks")
            .cloned()
            .collect();
        assert_eq!(with_both_lists(&idx, hits.clone()), hits);
        let kept = covering_passages(&idx, hits, "ME-LO-PRES-LO");
        let sections: Vec<&str> = kept.iter().map(|h| h.section.heading()).collect();
        assert_eq!(sections, ["ME-LO-PRES-LO causes", "ME-LO-PRES-LO checks"]);
    }

    #[test]
    fn a_split_causes_section_gets_the_parts_retrieval_left_out() {
        let items: Vec<String> = (1..=9)
            .map(|n| format!("{n}) cause number {n}, a worn or fouled part of the lube oil system that the crew must inspect, clean and replace"))
            .collect();
        let text = format!(
            "## ME-LO-PRES-LO causes\nCauses: {}.\n## ME-LO-PRES-LO checks\nChecks: 1) Read the gauge.\n",
            items.join("; ")
        );
        let docs = vec![doc(
            "lube-en",
            "main_engine_lube_oil",
            "ME-LO-PRES-LO",
            "en",
            &text,
        )];
        let idx = Index::from_bytes(index::build(&docs).unwrap()).unwrap();
        let all = idx.search(&Query::from_text("lube oil cause"), 20).unwrap();
        let parts: Vec<&Hit> = all.iter().filter(|h| h.section.is_causes()).collect();
        assert!(parts.len() > 1, "the section is split: {parts:?}");
        let first = vec![parts[0].clone()];
        let every = with_every_part(&idx, &first);
        assert_eq!(every.len(), parts.len(), "{every:?}");
        assert!(every.iter().any(|h| h.text.contains("cause number 9")));
        assert!(every.iter().all(|h| h.section.code() == "ME-LO-PRES-LO"));
        // Checks, and parts already there, are left as they are.
        let checks: Vec<Hit> = all
            .iter()
            .filter(|h| !h.section.is_causes())
            .cloned()
            .collect();
        assert_eq!(with_every_part(&idx, &checks), checks);
        let whole: Vec<Hit> = parts.iter().map(|h| (*h).clone()).collect();
        assert_eq!(with_every_part(&idx, &whole).len(), whole.len());
    }

    #[test]
    fn split_sections_keep_their_part() {
        assert_eq!(Section::from("BAT-VOLT-LO 原因 (1/2)").part(), "(1/2)");
        assert_eq!(Section::from("BAT-VOLT-LO causes").part(), "");
        assert_eq!(Section::from("Pump (main)").part(), "");
    }

    #[test]
    fn chinese_query_finds_chinese_passage() {
        let idx = Index::from_bytes(sample()).unwrap();
        let hits = idx.search(&Query::from_text("主机滑油压力低"), 3).unwrap();
        assert_eq!(hits[0].doc, "lube-zh");
        assert_eq!(hits[0].section, "ME-LO-PRES-LO 原因");
    }

    #[test]
    fn exact_code_beats_vague_match() {
        let idx = Index::from_bytes(sample()).unwrap();
        // "pressure low" is lexically closer to the lube oil doc; the code must win.
        let q = Query {
            text: "ME-JCW-TEMP-HI pressure low".into(),
            code: Some("ME-JCW-TEMP-HI".into()),
            kind: None,
            tag: None,
            lang: Language::English,
        };
        let hits = idx.search(&q, 3).unwrap();
        assert_eq!(hits[0].doc, "cool-en");
    }

    #[test]
    fn class_match_breaks_ties() {
        let idx = Index::from_bytes(sample()).unwrap();
        let q = Query {
            text: "pump worn".into(),
            code: None,
            kind: Some("main_engine_lube_oil".into()),
            tag: None,
            lang: Language::English,
        };
        assert_eq!(idx.search(&q, 1).unwrap()[0].doc, "lube-en");
    }

    /// A message that names its machine raises that machine's manuals as
    /// its kind would, when the kind is absent or names no manual's machine.
    #[test]
    fn the_machine_a_message_names_raises_its_manuals_as_a_kind_does() {
        let idx = Index::from_bytes(sample()).unwrap();
        let top = |kind: Option<&str>| {
            let q = Query {
                text: "main engine lube oil: pump worn".into(),
                code: None,
                kind: kind.map(str::to_string),
                tag: None,
                lang: Language::English,
            };
            let h = idx.search(&q, 1).unwrap().remove(0);
            (h.doc, h.score)
        };
        let by_kind = top(Some("main_engine_lube_oil"));
        assert_eq!(by_kind.0, "lube-en");
        assert_eq!(top(None), by_kind);
        assert_eq!(top(Some("ENGINE ROOM")), by_kind);
    }

    /// A device's text names no machine; the plant's tag for it raises the
    /// manual whose alias it holds, as a kind would.
    #[test]
    fn the_machine_a_tag_names_raises_its_manuals_as_a_kind_does() {
        let with_aliases = |id: &str, class: &str, alias: &str, body: &str| {
            parse_document(
                id,
                &format!("---\ntitle: {id}\nclasses: [{class}]\naliases: [{alias}]\nlang: en\n---\n# {id}\n{body}"),
            )
            .unwrap()
        };
        let idx = Index::from_bytes(
            index::build(&[
                with_aliases(
                    "lube-en",
                    "main_engine_lube_oil",
                    "LUB",
                    "## A causes\nPump worn.\n",
                ),
                with_aliases(
                    "cool-en",
                    "main_engine_cooling",
                    "JCW",
                    "## B causes\nPump worn.\n",
                ),
            ])
            .unwrap(),
        )
        .unwrap();
        let top = |tag: Option<&str>| {
            let q = Query {
                text: "pump worn".into(),
                code: None,
                kind: None,
                tag: tag.map(str::to_string),
                lang: Language::English,
            };
            idx.search(&q, 1).unwrap().remove(0).doc
        };
        assert_eq!(top(Some("TE-JCW-3")), "cool-en");
        assert_eq!(top(Some("LUB-1")), "lube-en");
    }

    #[test]
    fn flipped_byte_is_detected() {
        let mut b = sample();
        let i = b.len() / 2;
        b[i] ^= 0x40;
        let e = Index::from_bytes(b).err().unwrap().to_string();
        assert!(e.contains("checksum"), "{e}");
    }

    #[test]
    fn truncated_file_is_detected() {
        let b = sample();
        for cut in [0, 7, 40, b.len() - 1] {
            let e = Index::from_bytes(b[..cut].to_vec())
                .err()
                .unwrap()
                .to_string();
            assert!(e.contains("corrupt"), "cut {cut}: {e}");
        }
    }

    #[test]
    fn wrong_magic_is_detected() {
        let mut b = sample();
        b[0] = b'X';
        let e = Index::from_bytes(b).err().unwrap().to_string();
        assert!(e.contains("bad magic"), "{e}");
    }

    #[test]
    fn future_version_is_detected() {
        let mut b = sample();
        b[8..12].copy_from_slice(&(index::VERSION + 1).to_le_bytes());
        let e = Index::from_bytes(b).err().unwrap().to_string();
        let want = format!("version {} is not supported", index::VERSION + 1);
        assert!(e.contains(&want), "{e}");
    }

    #[test]
    fn every_single_byte_flip_is_an_error_not_a_panic() {
        let b = sample();
        for i in (0..b.len()).step_by(7) {
            let mut c = b.clone();
            c[i] ^= 0x01;
            assert!(Index::from_bytes(c).is_err(), "flip at {i} went unnoticed");
        }
    }
}
