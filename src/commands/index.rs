//! `tidewatch index build` and `tidewatch query`: the knowledge index from
//! the command line.

use std::io::Write;

use super::CommandError;
use crate::retrieval::{Index, Query};

pub fn build(knowledge: &std::path::Path, out: &std::path::Path) -> Result<(), CommandError> {
    let t = std::time::Instant::now();
    let (docs, passages, bytes) = crate::retrieval::build_file(knowledge, out)?;
    eprintln!(
        "indexed {docs} documents into {passages} passages: {} ({bytes} bytes, {:.0} ms)",
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
    if !(1..=50).contains(&top_k) {
        return Err(CommandError::TopK(top_k));
    }
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
