//! The on-disk index file: its layout, its writer and its reader (the
//! whole file is read into memory and validated before it is used).
//!
//! Layout (little-endian):
//! - header, 64 bytes: magic, format version, header length, counts (docs,
//!   passages, terms), average passage length, body length, body CRC-32, and the
//!   length of each body section (the CRC covers the header too);
//! - body sections, in order:
//!   1. docs: postcard `Vec<DocMeta>` (small; decoded at open);
//!   2. terms: fixed 8-byte rows `(hash u32, value u32)`, sorted by hash and
//!      binary-searched in place; the value is either a postings offset or,
//!      with the top bit set, the term's single posting (passage, tf) inline;
//!   3. passage table: fixed 8-byte rows `(offset u32, length in terms u16, doc u16)`;
//!      a passage's bytes end where the next one's begin;
//!   4. postings: one postcard `Vec<u32>` per term, each entry
//!      `passage delta << 3 | min(tf, 7)`, so most entries take one byte;
//!   5. passages: one LZ4 block (size-prefixed) of a postcard `StoredPassage`
//!      per passage.
//!
//! Opening checks magic, version, lengths and the CRC before anything is read,
//! so a damaged file is an error, never a panic or a wrong answer. Queries decode
//! only the postings and passages they touch.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::knowledge::{chunk, Document};
use super::tokenize::{term_hash, terms};
use super::IndexError;

/// The on-disk term key: FNV-1a folded to 32 bits. A collision (rare at the
/// sizes a board carries) merges two terms' postings: ranking noise, not an error.
fn disk_hash(term: &str) -> u32 {
    let h = term_hash(term);
    (h ^ (h >> 32)) as u32
}

pub const MAGIC: [u8; 8] = *b"TWIDX\r\n\x1a";
pub const VERSION: u32 = 4;
pub const HEADER_LEN: usize = 64;
const TERM_ROW: usize = 8;
/// Marks a term row whose only posting is stored in the row itself: most CJK
/// bigrams occur in one passage, and a separate postings entry would cost more
/// than the row.
const INLINE: u32 = 1 << 31;
const MAX_TF: u32 = 7;
const PASSAGE_ROW: usize = 8;

/// A term's document frequency and its `(passage, tf)` list.
pub type Postings = (u32, Vec<(u32, u16)>);

/// Per-document facts kept in the index.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DocMeta {
    pub id: String,
    pub title: String,
    pub classes: Vec<String>,
    /// The trade's other names for the manual's equipment (`aliases` in its
    /// front matter): how a plant's `kind` is mapped to a class.
    pub aliases: Vec<String>,
    pub codes: Vec<String>,
    pub lang: String,
    pub first_passage: u32,
    pub n_passages: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StoredPassage {
    pub section: String,
    pub text: String,
}

struct Header {
    n_docs: u32,
    n_passages: u32,
    n_terms: u32,
    avgdl: f32,
    body_len: u64,
    crc: u32,
    lens: [u32; 5],
}

impl Header {
    fn encode(&self) -> [u8; HEADER_LEN] {
        let mut h = [0u8; HEADER_LEN];
        h[0..8].copy_from_slice(&MAGIC);
        h[8..12].copy_from_slice(&VERSION.to_le_bytes());
        h[12..16].copy_from_slice(&(HEADER_LEN as u32).to_le_bytes());
        h[16..20].copy_from_slice(&self.n_docs.to_le_bytes());
        h[20..24].copy_from_slice(&self.n_passages.to_le_bytes());
        h[24..28].copy_from_slice(&self.n_terms.to_le_bytes());
        h[28..32].copy_from_slice(&self.avgdl.to_le_bytes());
        h[32..40].copy_from_slice(&self.body_len.to_le_bytes());
        h[40..44].copy_from_slice(&self.crc.to_le_bytes());
        for (i, l) in self.lens.iter().enumerate() {
            h[44 + i * 4..48 + i * 4].copy_from_slice(&l.to_le_bytes());
        }
        h
    }

    /// The header at the start of `b`, once its magic, length, version and
    /// header length say it is one this build reads.
    fn decode(b: &[u8]) -> Result<Self, IndexError> {
        if b.len() < 8 || b[0..8] != MAGIC {
            return Err(IndexError::Corrupt(
                "bad magic: not a tidewatch index".into(),
            ));
        }
        if b.len() < HEADER_LEN {
            return Err(IndexError::Corrupt(format!(
                "truncated: {} bytes, shorter than the {HEADER_LEN}-byte header",
                b.len()
            )));
        }
        let version = u32_at(b, 8);
        if version != VERSION {
            return Err(IndexError::Version {
                found: version,
                supported: VERSION,
            });
        }
        if u32_at(b, 12) as usize != HEADER_LEN {
            return Err(IndexError::Corrupt("header length field is wrong".into()));
        }
        let mut lens = [0u32; 5];
        for (i, l) in lens.iter_mut().enumerate() {
            *l = u32_at(b, 44 + i * 4);
        }
        Ok(Self {
            n_docs: u32_at(b, 16),
            n_passages: u32_at(b, 20),
            n_terms: u32_at(b, 24),
            avgdl: f32::from_le_bytes([b[28], b[29], b[30], b[31]]),
            body_len: u64_at(b, 32),
            crc: u32_at(b, 40),
            lens,
        })
    }

    /// Checks the header against the file `b` it opens: the body's length
    /// and sections, the CRC, the table sizes and the average.
    fn check(&self, b: &[u8]) -> Result<(), IndexError> {
        let actual = (b.len() - HEADER_LEN) as u64;
        if actual != self.body_len {
            return Err(IndexError::Corrupt(format!(
                "truncated or padded: body is {actual} bytes, header says {}",
                self.body_len
            )));
        }
        let lens = self.lens.map(|l| l as usize);
        if lens.iter().sum::<usize>() as u64 != self.body_len {
            return Err(IndexError::Corrupt(
                "section lengths do not add up to the body".into(),
            ));
        }
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&b[..HEADER_LEN]);
        if checksum(&head, &b[HEADER_LEN..]) != self.crc {
            return Err(IndexError::Corrupt(
                "checksum mismatch: the file is damaged".into(),
            ));
        }
        if lens[1] != self.n_terms as usize * TERM_ROW
            || lens[2] != self.n_passages as usize * PASSAGE_ROW
        {
            return Err(IndexError::Corrupt(
                "table sizes disagree with the counts".into(),
            ));
        }
        if !self.avgdl.is_finite() || self.avgdl < 0.0 {
            return Err(IndexError::Corrupt(
                "average passage length is not a number".into(),
            ));
        }
        Ok(())
    }

    /// Byte ranges of the body sections in the file, in order.
    fn sections(&self) -> [(usize, usize); 5] {
        let mut at = HEADER_LEN;
        self.lens.map(|len| {
            let r = (at, at + len as usize);
            at += len as usize;
            r
        })
    }
}

/// CRC-32 over the header (with its own CRC field zeroed) and the body, so a
/// damaged count or average in the header is caught like damaged data.
fn checksum(header: &[u8; HEADER_LEN], body: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&header[..40]);
    h.update(&[0u8; 4]);
    h.update(&header[44..]);
    h.update(body);
    h.finalize()
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

fn too_big(what: &str) -> IndexError {
    IndexError::Build(format!("{what} exceeds the format's limit"))
}

fn build_error(e: postcard::Error) -> IndexError {
    IndexError::Build(e.to_string())
}

/// A passage as `build` gathers it: its text, its length in terms and its
/// document.
type Gathered = (StoredPassage, u16, u16);

/// Builds the index bytes for a set of documents.
pub fn build(docs: &[Document]) -> Result<Vec<u8>, IndexError> {
    if docs.len() > usize::from(u16::MAX) {
        return Err(too_big("document count"));
    }
    let (metas, passages, postings) = gather(docs)?;
    let docs_bytes = postcard::to_allocvec(&metas).map_err(build_error)?;
    if passages.len() >= 1 << 28 {
        return Err(too_big("passage count"));
    }
    let n_terms = postings.len() as u32;
    let (terms_bytes, postings_bytes) = term_sections(postings)?;
    let (pmeta, pbytes, total_dl) = passage_sections(&passages)?;
    let header = Header {
        n_docs: metas.len() as u32,
        n_passages: passages.len() as u32,
        n_terms,
        avgdl: if passages.is_empty() {
            0.0
        } else {
            total_dl as f32 / passages.len() as f32
        },
        body_len: 0,
        crc: 0,
        lens: [0; 5],
    };
    seal(
        header,
        [&docs_bytes, &terms_bytes, &pmeta, &postings_bytes, &pbytes],
    )
}

/// The documents' table, their passages, and each term's `(passage, tf)`
/// list, keyed by the term's disk hash.
#[allow(clippy::type_complexity)]
fn gather(
    docs: &[Document],
) -> Result<(Vec<DocMeta>, Vec<Gathered>, HashMap<u32, Vec<(u32, u16)>>), IndexError> {
    let mut metas = Vec::with_capacity(docs.len());
    let mut passages: Vec<Gathered> = Vec::new();
    let mut postings: HashMap<u32, Vec<(u32, u16)>> = HashMap::new();
    for (di, d) in docs.iter().enumerate() {
        let first = passages.len() as u32;
        for c in chunk(d) {
            let pid = u32::try_from(passages.len()).map_err(|_| too_big("passage count"))?;
            let (dl, tf) = term_counts(&c.section, &c.text);
            for (h, f) in tf {
                postings.entry(h).or_default().push((pid, f));
            }
            passages.push((
                StoredPassage {
                    section: c.section,
                    text: c.text,
                },
                dl,
                di as u16,
            ));
        }
        metas.push(DocMeta {
            id: d.id.clone(),
            title: d.title.clone(),
            classes: d.classes.clone(),
            aliases: d.aliases.clone(),
            codes: d.codes.clone(),
            lang: d.lang.clone(),
            first_passage: first,
            n_passages: passages.len() as u32 - first,
        });
    }
    Ok((metas, passages, postings))
}

/// A passage's length in terms and how often each term (by disk hash)
/// occurs in it.
fn term_counts(section: &str, text: &str) -> (u16, HashMap<u32, u16>) {
    // The title and heading are indexed with the text: operators' words
    // often match the heading ("jacket water", "滑油压力") better than the body.
    let indexed = format!("{section} {text}");
    let ts = terms(&indexed);
    let dl = ts.len().min(usize::from(u16::MAX)) as u16;
    let mut tf: HashMap<u32, u16> = HashMap::new();
    for t in &ts {
        let e = tf.entry(disk_hash(t)).or_default();
        *e = e.saturating_add(1);
    }
    (dl, tf)
}

/// The term table (rows sorted by hash) and the postings section.
fn term_sections(
    postings: HashMap<u32, Vec<(u32, u16)>>,
) -> Result<(Vec<u8>, Vec<u8>), IndexError> {
    let mut term_rows: Vec<(u32, Vec<(u32, u16)>)> = postings.into_iter().collect();
    term_rows.sort_unstable_by_key(|(h, _)| *h);
    let mut terms_bytes = Vec::with_capacity(term_rows.len() * TERM_ROW);
    let mut postings_bytes = Vec::new();
    for (h, mut list) in term_rows {
        list.sort_unstable_by_key(|(p, _)| *p);
        let value = if let [(pid, tf)] = list[..] {
            INLINE | (u32::from(tf).min(MAX_TF) << 28) | pid
        } else {
            append_postings(&list, &mut postings_bytes)?
        };
        terms_bytes.extend_from_slice(&h.to_le_bytes());
        terms_bytes.extend_from_slice(&value.to_le_bytes());
    }
    Ok((terms_bytes, postings_bytes))
}

/// Appends a term's `(passage, tf)` list, sorted by passage, to the
/// postings section; returns its offset there.
fn append_postings(list: &[(u32, u16)], section: &mut Vec<u8>) -> Result<u32, IndexError> {
    let mut prev = 0u32;
    let entries: Vec<u32> = list
        .iter()
        .map(|(p, f)| {
            let d = p - prev;
            prev = *p;
            (d << 3) | u32::from(*f).min(MAX_TF)
        })
        .collect();
    let off = u32::try_from(section.len())
        .ok()
        .filter(|o| *o < INLINE)
        .ok_or_else(|| too_big("postings"))?;
    let enc = postcard::to_allocvec(&entries).map_err(build_error)?;
    section.extend_from_slice(&enc);
    Ok(off)
}

/// The passage table and the passages section, with the passages' total
/// length in terms.
fn passage_sections(passages: &[Gathered]) -> Result<(Vec<u8>, Vec<u8>, u64), IndexError> {
    let mut pmeta = Vec::with_capacity(passages.len() * PASSAGE_ROW);
    let mut pbytes = Vec::new();
    let mut total_dl = 0u64;
    for (p, dl, doc) in passages {
        let plain = postcard::to_allocvec(p).map_err(build_error)?;
        // Passage text is most of the file; LZ4 (fast to decode, per passage so
        // a query touches only its hits) keeps the index near the raw text size.
        let enc = lz4_flex::block::compress_prepend_size(&plain);
        let off = u32::try_from(pbytes.len()).map_err(|_| too_big("passage text"))?;
        pmeta.extend_from_slice(&off.to_le_bytes());
        pmeta.extend_from_slice(&dl.to_le_bytes());
        pmeta.extend_from_slice(&doc.to_le_bytes());
        pbytes.extend_from_slice(&enc);
        total_dl += u64::from(*dl);
    }
    Ok((pmeta, pbytes, total_dl))
}

/// The file: `header`, with the section lengths, the body length and the
/// CRC filled in, then the sections.
fn seal(mut header: Header, sections: [&[u8]; 5]) -> Result<Vec<u8>, IndexError> {
    let mut body = Vec::with_capacity(sections.iter().map(|s| s.len()).sum());
    for (i, s) in sections.iter().enumerate() {
        header.lens[i] = u32::try_from(s.len()).map_err(|_| too_big("a section"))?;
        body.extend_from_slice(s);
    }
    header.body_len = body.len() as u64;
    let mut head = header.encode();
    let crc = checksum(&head, &body);
    head[40..44].copy_from_slice(&crc.to_le_bytes());
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(&body);
    Ok(out)
}

/// A validated, opened index. Cheap to share behind an `Arc`.
pub struct RawIndex {
    bytes: Vec<u8>,
    pub docs: Vec<DocMeta>,
    pub n_passages: u32,
    pub n_terms: u32,
    pub avgdl: f32,
    /// Byte ranges of the body sections within `bytes`.
    terms: (usize, usize),
    pmeta: (usize, usize),
    postings: (usize, usize),
    passages: (usize, usize),
}

impl RawIndex {
    /// Reads the whole file: the daemon keeps its own copy, so an operator
    /// rewriting the file in place (`cp` over it) cannot change or truncate
    /// pages under a running query, as it could under a mapping (SIGBUS).
    /// Indexes are small (544 passages: 288 KB).
    pub fn open(path: &Path) -> Result<Self, IndexError> {
        let bytes = std::fs::read(path).map_err(|source| IndexError::Io {
            path: path.to_owned(),
            source,
        })?;
        Self::from_bytes(bytes).map_err(|e| e.with_path(path))
    }

    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, IndexError> {
        let header = Header::decode(&bytes)?;
        header.check(&bytes)?;
        let [docs_r, terms, pmeta, postings, passages] = header.sections();
        let docs: Vec<DocMeta> = postcard::from_bytes(&bytes[docs_r.0..docs_r.1])
            .map_err(|e| IndexError::Corrupt(format!("document table: {e}")))?;
        if docs.len() != header.n_docs as usize {
            return Err(IndexError::Corrupt(
                "document count disagrees with the header".into(),
            ));
        }
        check_passage_ranges(&docs, &bytes[pmeta.0..pmeta.1], header.n_passages)?;
        Ok(Self {
            bytes,
            docs,
            n_passages: header.n_passages,
            n_terms: header.n_terms,
            avgdl: header.avgdl,
            terms,
            pmeta,
            postings,
            passages,
        })
    }

    /// Total size of the index in bytes.
    pub fn byte_len(&self) -> usize {
        self.bytes.len()
    }

    /// Postings of a term: `(passage, tf)` pairs, or none if the term is absent.
    pub fn postings(&self, term: &str) -> Result<Option<Postings>, IndexError> {
        let h = disk_hash(term);
        let t = &self.bytes[self.terms.0..self.terms.1];
        let n = self.n_terms as usize;
        let (mut lo, mut hi) = (0usize, n);
        while lo < hi {
            let mid = (lo + hi) / 2;
            if u32_at(t, mid * TERM_ROW) < h {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        if lo >= n || u32_at(t, lo * TERM_ROW) != h {
            return Ok(None);
        }
        let value = u32_at(t, lo * TERM_ROW + 4);
        let past = || IndexError::Corrupt("posting points past the passage table".into());
        if value & INLINE != 0 {
            let pid = value & ((1 << 28) - 1);
            let tf = ((value >> 28) & MAX_TF) as u16;
            if pid >= self.n_passages || tf == 0 {
                return Err(past());
            }
            return Ok(Some((1, vec![(pid, tf)])));
        }
        let p = &self.bytes[self.postings.0..self.postings.1];
        let bytes = p
            .get(value as usize..)
            .ok_or_else(|| IndexError::Corrupt("postings offset out of range".into()))?;
        let (entries, _): (Vec<u32>, _) = postcard::take_from_bytes(bytes)
            .map_err(|e| IndexError::Corrupt(format!("postings: {e}")))?;
        let mut pid = 0u32;
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            pid = pid
                .checked_add(e >> 3)
                .filter(|p| *p < self.n_passages)
                .ok_or_else(past)?;
            out.push((pid, (e & MAX_TF) as u16));
        }
        Ok(Some((out.len() as u32, out)))
    }

    /// `(length in terms, document index)` of a passage.
    pub fn passage_meta(&self, pid: u32) -> (u16, u16) {
        let m = &self.bytes[self.pmeta.0..self.pmeta.1];
        let row = pid as usize * PASSAGE_ROW;
        (u16_at(m, row + 4), u16_at(m, row + 6))
    }

    pub fn passage(&self, pid: u32) -> Result<StoredPassage, IndexError> {
        if pid >= self.n_passages {
            return Err(IndexError::Corrupt(format!("passage {pid} does not exist")));
        }
        let m = &self.bytes[self.pmeta.0..self.pmeta.1];
        let row = pid as usize * PASSAGE_ROW;
        let p = &self.bytes[self.passages.0..self.passages.1];
        // A passage ends where the next begins (or at the end of the section).
        let off = u32_at(m, row) as usize;
        let end = if pid + 1 < self.n_passages {
            u32_at(m, row + PASSAGE_ROW) as usize
        } else {
            p.len()
        };
        let bytes = p
            .get(off..end.max(off))
            .ok_or_else(|| IndexError::Corrupt("passage offset out of range".into()))?;
        // lz4_flex allocates the size prefix before it reads a byte: a bogus
        // prefix in a file whose CRC still matches (crafted, or a writer bug)
        // asked for up to 4 GiB and aborted the process (found by the fuzz
        // target, tests/fuzz). LZ4 cannot expand a block more than 255-fold,
        // so a larger claim is damage, never data.
        let claimed = bytes.get(..4).map_or(0, |s| u32_at(s, 0) as usize);
        if claimed > bytes.len().saturating_mul(255) {
            return Err(IndexError::Corrupt(format!(
                "passage {pid}: size {claimed} is impossible for {} compressed bytes",
                bytes.len()
            )));
        }
        let plain = lz4_flex::block::decompress_size_prepended(bytes)
            .map_err(|e| IndexError::Corrupt(format!("passage {pid}: {e}")))?;
        postcard::from_bytes(&plain).map_err(|e| IndexError::Corrupt(format!("passage {pid}: {e}")))
    }
}

/// Checks that each document's passage range lies in the passage table
/// `pm` and that every passage in it names that document.
fn check_passage_ranges(docs: &[DocMeta], pm: &[u8], n_passages: u32) -> Result<(), IndexError> {
    for (di, d) in docs.iter().enumerate() {
        if u64::from(d.first_passage) + u64::from(d.n_passages) > u64::from(n_passages) {
            return Err(IndexError::Corrupt(format!(
                "document {} points past the passage table",
                d.id
            )));
        }
        // Search boosts a document's passages by this range but labels a
        // hit with the document its passage row names: if they disagree,
        // a passage is scored as one manual and cited as another (debug
        // builds hit search's assertion; found by the fuzz target).
        for pid in d.first_passage..d.first_passage + d.n_passages {
            if usize::from(u16_at(pm, pid as usize * PASSAGE_ROW + 6)) != di {
                return Err(IndexError::Corrupt(format!(
                    "passage {pid} is in document {}'s range but names another",
                    d.id
                )));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::retrieval::knowledge::parse_document;

    fn sample() -> Vec<u8> {
        let doc = |id: &str| {
            parse_document(
                id,
                "---\ntitle: Pump\nclasses: [bilge]\ncodes: [BLG-PUMP]\nlang: en\n---\n# Pump\n## Causes\nWorn impeller, clogged strainer.\n",
            )
            .unwrap()
        };
        build(&[doc("pump-a"), doc("pump-b")]).unwrap()
    }

    /// Re-signs `b` after an edit, as a crafted file would be.
    fn reseal(b: &mut [u8]) {
        let mut head = [0u8; HEADER_LEN];
        head.copy_from_slice(&b[..HEADER_LEN]);
        let crc = checksum(&head, &b[HEADER_LEN..]);
        b[40..44].copy_from_slice(&crc.to_le_bytes());
    }

    /// Found by the `index` fuzz target: a 4 GiB size prefix used to be allocated.
    #[test]
    fn impossible_passage_size_is_an_error_not_an_allocation() {
        let mut b = sample();
        let at = RawIndex::from_bytes(b.clone()).unwrap().passages.0;
        b[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        reseal(&mut b);
        let idx = RawIndex::from_bytes(b).unwrap();
        let e = idx.passage(0).unwrap_err().to_string();
        assert!(e.contains("size 4294967295 is impossible"), "{e}");
    }

    /// Found by the `index` fuzz target: search assumed what open never checked.
    #[test]
    fn passage_row_naming_another_document_is_an_error_at_open() {
        let mut b = sample();
        let at = RawIndex::from_bytes(b.clone()).unwrap().pmeta.0;
        // Passage 0 belongs to document 0; make its row name document 1.
        b[at + 6..at + 8].copy_from_slice(&1u16.to_le_bytes());
        reseal(&mut b);
        let e = RawIndex::from_bytes(b).err().unwrap().to_string();
        assert!(e.contains("passage 0 is in document pump-a's range"), "{e}");
    }
}
