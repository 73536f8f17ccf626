//! `tidewatch index build`, `index check` and `tidewatch query`: the
//! manuals and their index from the command line.

use std::io::Write;
use std::path::Path;

use super::lint::{self, Severity};
use super::CommandError;
use crate::retrieval::{Index, Query};

/// Lints the manuals in `knowledge` and prints every problem on stderr;
/// an error (or, with `strict`, a warning) fails the command.
fn check_manuals(knowledge: &Path, strict: bool) -> Result<lint::Report, CommandError> {
    let report = lint::lint_dir(knowledge)?;
    let mut err = std::io::stderr().lock();
    for p in &report.problems {
        writeln!(err, "{p}")?;
    }
    let (errors, warnings) = (
        report.count(Severity::Error),
        report.count(Severity::Warning),
    );
    if errors > 0 || (strict && warnings > 0) {
        return Err(CommandError::Manuals {
            dir: knowledge.to_owned(),
            errors,
            warnings,
        });
    }
    Ok(report)
}

/// `index check DIR`: lints, writes nothing.
pub fn check(knowledge: &Path, strict: bool) -> Result<(), CommandError> {
    let r = check_manuals(knowledge, strict)?;
    eprintln!(
        "{}: {} manuals, {} alarm codes, {} lists of causes or checks ({} items): {} warnings",
        knowledge.display(),
        r.manuals,
        r.codes,
        r.lists,
        r.items,
        r.count(Severity::Warning)
    );
    Ok(())
}

/// `index build`: lints (failing as `check` does, before anything is
/// written), then builds the index and replaces `out` whole.
pub fn build(knowledge: &Path, out: &Path, strict: bool) -> Result<(), CommandError> {
    let t = std::time::Instant::now();
    let r = check_manuals(knowledge, strict)?;
    let (docs, passages, bytes) = crate::retrieval::build_file(knowledge, out)?;
    eprintln!(
        "indexed {docs} manuals ({} alarm codes, {} lists of causes or checks, {} items; {} warnings) into {passages} passages: {} ({bytes} bytes, {:.0} ms)",
        r.codes,
        r.lists,
        r.items,
        r.count(Severity::Warning),
        out.display(),
        t.elapsed().as_secs_f64() * 1e3
    );
    Ok(())
}

pub fn query(
    index: &std::path::Path,
    top_k: usize,
    json: bool,
    text: &[String],
) -> Result<(), CommandError> {
    let idx = Index::open(index)?;
    let hits = idx.search(&Query::from_text(&text.join(" ")), top_k)?;
    let mut out = std::io::stdout().lock();
    if json {
        let v: Vec<serde_json::Value> = hits
            .iter()
            .map(|h| serde_json::json!({"doc": h.doc, "section": h.section, "score": h.score, "text": h.text}))
            .collect();
        writeln!(out, "{}", serde_json::Value::Array(v))?;
    } else {
        for (i, h) in hits.iter().enumerate() {
            writeln!(
                out,
                "{}. {} / {}  (score {:.2})\n   {}\n",
                i + 1,
                h.doc,
                h.section,
                h.score,
                h.text.replace('\n', "\n   ")
            )?;
        }
        if hits.is_empty() {
            writeln!(out, "no passage matches")?;
        }
    }
    Ok(())
}
