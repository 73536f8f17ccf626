//! The knowledge base on disk: Markdown documents with a small front matter,
//! chunked at headings into short passages.
//!
//! Owns the document format (docs/manuals.md). Reads files; writes nothing.

use std::path::{Path, PathBuf};

use super::tokenize::estimate_tokens;
use super::IndexError;

/// Passages longer than this are split at paragraph, then sentence, boundaries.
pub const MAX_PASSAGE_TOKENS: usize = 120;

/// One source document.
#[derive(Debug, Clone, PartialEq)]
pub struct Document {
    /// File stem, e.g. `main_engine_cooling-en`; what diagnoses cite.
    pub id: String,
    pub title: String,
    pub classes: Vec<String>,
    /// Other names the trade uses for this equipment, in any language
    /// (`DG`, `genset`, `副机` for the diesel generators): a plant's `kind`
    /// or message that names one is this manual's equipment.
    pub aliases: Vec<String>,
    pub codes: Vec<String>,
    pub lang: String,
    pub sections: Vec<(String, String)>,
}

/// One chunk of a document: the unit that retrieval ranks and the prompt carries.
#[derive(Debug, Clone, PartialEq)]
pub struct Chunk {
    pub section: String,
    pub text: String,
}

/// What kind of numbered list a section holds, by its heading: a manual
/// gives each alarm code a causes section and a checks section (in English
/// "causes" and "checks" or "actions", in Chinese 原因 and 检查 or 处理).
/// Retrieval pairs the two, answers from passages quote them, and a chosen
/// answer picks its causes and actions from them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ListKind {
    Causes,
    Checks,
}

impl ListKind {
    /// The kind of list under `section`; a heading that names both counts as
    /// causes.
    pub fn of(section: &str) -> Option<Self> {
        [ListKind::Causes, ListKind::Checks]
            .into_iter()
            .find(|k| k.heads(section))
    }

    /// Whether `section` names a list of this kind (whatever else it names).
    pub fn heads(self, section: &str) -> bool {
        let l = section.to_lowercase();
        match self {
            ListKind::Causes => l.contains("cause") || section.contains("原因"),
            ListKind::Checks => {
                l.contains("check")
                    || l.contains("action")
                    || section.contains("检查")
                    || section.contains("处理")
            }
        }
    }
}

/// Loads every `*.md` under `dir` (recursively, sorted, skipping README.md and
/// dot-folders) as a knowledge document.
pub fn load_dir(dir: &Path) -> Result<Vec<Document>, IndexError> {
    let mut files = Vec::new();
    collect_manuals(dir, &mut files)?;
    files.sort();
    let mut docs = Vec::with_capacity(files.len());
    for f in &files {
        let text = std::fs::read_to_string(f).map_err(|source| IndexError::Io {
            path: f.clone(),
            source,
        })?;
        let id = f
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default()
            .to_string();
        docs.push(
            parse_document(&id, &text).map_err(|problem| IndexError::Document {
                path: f.clone(),
                problem,
            })?,
        );
    }
    // `files` is in the same order as `docs`: name both files of a shared id.
    let mut seen = std::collections::HashMap::new();
    for (d, f) in docs.iter().zip(&files) {
        if let Some(first) = seen.insert(d.id.clone(), f.clone()) {
            return Err(IndexError::Document {
                path: f.clone(),
                problem: format!(
                    "the document id {:?} (the file name) is also {}'s; rename one of the two",
                    d.id,
                    first.display()
                ),
            });
        }
    }
    if docs.is_empty() {
        return Err(IndexError::NoManuals(dir.to_owned()));
    }
    Ok(docs)
}

/// The manuals under `dir`, as `load_dir` and the linter read them:
/// `*.md` but README.md, recursively, without dot-folders.
pub fn collect_manuals(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), IndexError> {
    let rd = std::fs::read_dir(dir).map_err(|source| IndexError::Io {
        path: dir.to_owned(),
        source,
    })?;
    for e in rd {
        let e = e.map_err(|source| IndexError::Io {
            path: dir.to_owned(),
            source,
        })?;
        let p = e.path();
        let name = e.file_name().to_string_lossy().to_string();
        if name.starts_with('.') {
            continue;
        }
        if p.is_dir() {
            collect_manuals(&p, out)?;
        } else if name.ends_with(".md") && !name.eq_ignore_ascii_case("README.md") {
            out.push(p);
        }
    }
    Ok(())
}

fn parse_list(v: &str) -> Vec<String> {
    v.trim()
        .trim_start_matches('[')
        .trim_end_matches(']')
        .split(',')
        .map(|s| s.trim().trim_matches(['"', '\'']).to_string())
        .filter(|s| !s.is_empty())
        .collect()
}

/// Parses one document: `---` front matter (title, classes, aliases, codes,
/// lang), a `#`
/// title line, then `##` sections.
pub fn parse_document(id: &str, text: &str) -> Result<Document, String> {
    let text = text.strip_prefix('\u{feff}').unwrap_or(text);
    let rest = text
        .strip_prefix("---\n")
        .ok_or("front matter must open the file with a '---' line")?;
    let end = rest
        .find("\n---\n")
        .ok_or("front matter is not closed by a '---' line")?;
    let (front, body) = (&rest[..end], &rest[end + 5..]);
    let (mut title, mut classes, mut codes, mut lang) = (None, None, None, None);
    let mut aliases = Vec::new();
    for line in front.lines().filter(|l| !l.trim().is_empty()) {
        let (k, v) = line
            .split_once(':')
            .ok_or_else(|| format!("front matter line {line:?} is not 'key: value'"))?;
        match k.trim() {
            "title" => title = Some(v.trim().trim_matches('"').to_string()),
            "classes" => classes = Some(parse_list(v)),
            "codes" => codes = Some(parse_list(v)),
            "aliases" => aliases = parse_list(v),
            "lang" => lang = Some(v.trim().to_string()),
            other => return Err(format!("front matter key {other:?} is unknown")),
        }
    }
    let classes = classes.ok_or("front matter key classes is missing")?;
    if classes.is_empty() {
        return Err("front matter key classes is empty".into());
    }
    let lang = lang.ok_or("front matter key lang is missing")?;
    let mut sections: Vec<(String, String)> = Vec::new();
    let mut heading_title = None;
    for line in body.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            sections.push((h.trim().to_string(), String::new()));
        } else if let Some(h) = line.strip_prefix("# ") {
            heading_title.get_or_insert_with(|| h.trim().to_string());
        } else if let Some((_, t)) = sections.last_mut() {
            if !t.is_empty() || !line.trim().is_empty() {
                t.push_str(line);
                t.push('\n');
            }
        }
    }
    for (_, t) in &mut sections {
        *t = t.trim().to_string();
    }
    sections.retain(|(_, t)| !t.is_empty());
    if sections.is_empty() {
        return Err("document has no non-empty '## ' sections".into());
    }
    Ok(Document {
        id: id.to_string(),
        title: title
            .or(heading_title)
            .ok_or("front matter key title is missing")?,
        classes,
        aliases,
        codes: codes.unwrap_or_default(),
        lang,
        sections,
    })
}

/// Splits a document into passages of at most `MAX_PASSAGE_TOKENS` (estimated).
pub fn chunk(doc: &Document) -> Vec<Chunk> {
    let mut out = Vec::new();
    for (section, text) in &doc.sections {
        let mut parts = Vec::new();
        split_to_fit(text, &mut parts);
        let n = parts.len();
        for (i, p) in parts.into_iter().enumerate() {
            let section = if n == 1 {
                section.clone()
            } else {
                format!("{section} ({}/{n})", i + 1)
            };
            out.push(Chunk { section, text: p });
        }
    }
    out
}

fn split_to_fit(text: &str, out: &mut Vec<String>) {
    if estimate_tokens(text) <= MAX_PASSAGE_TOKENS {
        out.push(text.to_string());
        return;
    }
    // Sentence ends in either script; the split keeps the terminator.
    let mut pieces: Vec<String> = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        cur.push(c);
        if matches!(c, '。' | '；' | '\n') || (c == '.' || c == ';') && cur.len() > 1 {
            pieces.push(std::mem::take(&mut cur));
        }
    }
    if !cur.trim().is_empty() {
        pieces.push(cur);
    }
    let mut acc = String::new();
    for p in pieces {
        if !acc.is_empty() && estimate_tokens(&acc) + estimate_tokens(&p) > MAX_PASSAGE_TOKENS {
            out.push(acc.trim().to_string());
            acc.clear();
        }
        acc.push_str(&p);
    }
    if !acc.trim().is_empty() {
        out.push(acc.trim().to_string());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heading_tells_a_causes_list_from_a_checks_list_in_either_language() {
        assert_eq!(
            ListKind::of("WIN-TENSION-HI causes"),
            Some(ListKind::Causes)
        );
        assert_eq!(ListKind::of("WIN-TENSION-HI 原因"), Some(ListKind::Causes));
        assert_eq!(
            ListKind::of("WIN-TENSION-HI checks"),
            Some(ListKind::Checks)
        );
        assert_eq!(
            ListKind::of("WIN-TENSION-HI 检查与处理"),
            Some(ListKind::Checks)
        );
        assert_eq!(ListKind::of("Safety"), None);
        assert_eq!(ListKind::of("Causes and actions"), Some(ListKind::Causes));
        assert!(ListKind::Checks.heads("Causes and actions"));
    }

    const DOC: &str = "---\ntitle: Main engine cooling\nclasses: [main_engine_cooling]\ncodes: [ME-JCW-TEMP-HI]\nlang: en\n---\n# Main engine cooling\n\n## ME-JCW-TEMP-HI causes\nThermostat stuck.\n\n## Safety\nHot surfaces.\n";

    #[test]
    fn document_parses_front_matter_and_sections() {
        let d = parse_document("me-en", DOC).unwrap();
        assert_eq!(d.classes, vec!["main_engine_cooling"]);
        assert_eq!(d.codes, vec!["ME-JCW-TEMP-HI"]);
        assert_eq!(d.sections.len(), 2);
        assert_eq!(d.sections[0].0, "ME-JCW-TEMP-HI causes");
    }

    #[test]
    fn missing_front_matter_is_an_error() {
        assert!(parse_document("x", "# t\n## a\nb\n").is_err());
    }

    #[test]
    fn long_sections_are_split_under_the_budget() {
        let long = "The pump impeller is worn and delivers low flow. ".repeat(40);
        let text = DOC.replace("Thermostat stuck.", &long);
        let d = parse_document("me-en", &text).unwrap();
        let chunks = chunk(&d);
        assert!(chunks.len() > 2);
        for c in &chunks {
            assert!(estimate_tokens(&c.text) <= MAX_PASSAGE_TOKENS, "{}", c.text);
        }
        assert!(chunks[0].section.starts_with("ME-JCW-TEMP-HI causes (1/"));
    }
}
