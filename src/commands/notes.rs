//! `tidewatch notes list|export|import|withdraw`: the site notes of a
//! config's state_dir, for people (list) and for other vessels (JSON lines).
//!
//! What a note may hold is `notes::Note::check`'s; how the journal is kept
//! is `notes::store`'s. Here: which notes an import takes, and as whose.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::CommandError;
use crate::cli::NotesCommand;
use crate::notes::store::{Appended, Store};
use crate::notes::{Note, NoteCause};

pub fn run(cmd: NotesCommand) -> Result<(), CommandError> {
    match cmd {
        NotesCommand::List { config, counting } => list(&store(&config)?, counting),
        NotesCommand::Export {
            config,
            out,
            counting,
        } => export(&store(&config)?, out.as_deref(), counting),
        NotesCommand::Import {
            config,
            vessel,
            ours,
            files,
        } => {
            let whose = match (vessel, ours) {
                (Some(v), _) => Whose::Vessel(v),
                (None, true) => Whose::Ours,
                (None, false) => Whose::Unsaid,
            };
            import(&store(&config)?, &whose, &files)
        }
        NotesCommand::Withdraw { config, id, by } => {
            let ts = crate::diagnosis::now_rfc3339();
            store(&config)?.withdraw(&id, &by, &ts)?;
            writeln!(
                std::io::stdout().lock(),
                "withdrew note {id} (by {by} at {ts}); it no longer counts"
            )?;
            Ok(())
        }
    }
}

fn store(config: &Path) -> Result<Store, CommandError> {
    let cfg = super::load_config(config)?;
    Ok(Store::open(&cfg.state_dir)?)
}

/// Reads the journal, saying on stderr what a power cut or damage cost.
fn notes(store: &Store, counting: bool) -> Result<Vec<Note>, CommandError> {
    let loaded = store.load_all()?;
    if loaded.torn_bytes > 0 {
        eprintln!(
            "tidewatch: {}: a torn last line ({} bytes, a write cut short) was left out",
            store.path().display(),
            loaded.torn_bytes
        );
    }
    if loaded.damaged_lines > 0 {
        eprintln!(
            "tidewatch: {}: {} damaged lines were skipped",
            store.path().display(),
            loaded.damaged_lines
        );
    }
    let mut notes = loaded.notes;
    if counting {
        notes.retain(Note::counts);
    }
    Ok(notes)
}

/// The widest a cause is shown in `list`: the rest is in `export`.
const CAUSE_CHARS: usize = 48;

fn list(store: &Store, counting: bool) -> Result<(), CommandError> {
    let notes = notes(store, counting)?;
    let mut out = std::io::stdout().lock();
    if notes.is_empty() {
        writeln!(out, "no notes in {}", store.path().display())?;
        return Ok(());
    }
    let header = [
        "id",
        "equipment",
        "code",
        "verdict",
        "cause",
        "by",
        "date",
        "vessel",
        "withdrawn",
    ]
    .map(String::from);
    let rows: Vec<[String; 9]> = std::iter::once(header)
        .chain(notes.iter().map(row))
        .collect();
    let mut width = [0usize; 9];
    for r in &rows {
        for (w, c) in width.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    for r in &rows {
        let mut line = String::new();
        for (i, (c, w)) in r.iter().zip(width).enumerate() {
            if i + 1 == r.len() {
                line.push_str(c);
            } else {
                line.push_str(&format!("{c:<w$}  "));
            }
        }
        writeln!(out, "{}", line.trim_end())?;
    }
    Ok(())
}

/// One note as `list` prints it.
fn row(n: &Note) -> [String; 9] {
    let cause = match &n.cause {
        NoteCause::Source(s) => s.clone(),
        NoteCause::Text(t) => format!("crew: {t}"),
    };
    [
        n.id.clone(),
        n.alarm.equipment.clone(),
        n.alarm.code.clone(),
        n.verdict.as_str().into(),
        one_line(&cause, CAUSE_CHARS),
        n.by.clone(),
        date(&n.ts).into(),
        n.vessel.clone().unwrap_or_else(|| "-".into()),
        n.withdrawn
            .as_ref()
            .map_or_else(|| "-".into(), |w| format!("{} {}", w.by, date(&w.ts))),
    ]
}

/// `text` on one line (a cause may hold newlines), cut to `max` chars.
fn one_line(text: &str, max: usize) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_whitespace() { ' ' } else { c })
        .collect();
    if flat.chars().count() <= max {
        flat
    } else {
        let mut cut: String = flat.chars().take(max - 1).collect();
        cut.push('…');
        cut
    }
}

/// The date of an RFC 3339 time.
fn date(ts: &str) -> &str {
    ts.get(..10).unwrap_or(ts)
}

fn export(store: &Store, out: Option<&Path>, counting: bool) -> Result<(), CommandError> {
    let notes = notes(store, counting)?;
    let mut text = Vec::new();
    for n in &notes {
        serde_json::to_writer(&mut text, n).map_err(std::io::Error::other)?;
        text.push(b'\n');
    }
    match out {
        Some(p) => {
            crate::durable::write_atomic(p, &text, crate::durable::Access::Umask).map_err(|e| {
                CommandError::NotesFile {
                    at: p.display().to_string(),
                    reason: e.to_string(),
                }
            })?;
            eprintln!("exported {} notes to {}", notes.len(), p.display());
        }
        None => std::io::stdout().lock().write_all(&text)?,
    }
    Ok(())
}

/// As whose notes an import takes notes that name no vessel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Whose {
    /// Another vessel's: marked as that vessel's.
    Vessel(String),
    /// This vessel's own (a restore of its own export).
    Ours,
    /// Not said: such a note is refused, never silently taken as ours.
    Unsaid,
}

/// The notes of one import file's text, each checked and marked as whose
/// it is; the first bad line is named by its number, and nothing is taken.
pub fn prepare(text: &str, whose: &Whose) -> Result<Vec<Note>, (usize, String)> {
    if let Whose::Vessel(v) = whose {
        crate::notes::required("vessel", v, crate::notes::MAX_VESSEL)
            .map_err(|e| (0, format!("--vessel: {e}")))?;
        if v == "here" {
            return Err((
                0,
                "--vessel: \"here\" names this vessel in note ids; give the other vessel's name, or --ours".into(),
            ));
        }
    }
    let mut notes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let at = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut n: Note =
            serde_json::from_str(line).map_err(|e| (at, format!("not a note: {e}")))?;
        if n.vessel.is_none() {
            match whose {
                Whose::Vessel(v) => {
                    n.vessel = Some(v.clone());
                    n.id = n.make_id();
                }
                Whose::Ours => {}
                Whose::Unsaid => {
                    return Err((
                        at,
                        format!("note {} names no vessel: give --vessel NAME (the vessel it comes from) or --ours (this vessel's own notes)", n.id),
                    ))
                }
            }
        }
        n.check().map_err(|e| (at, format!("note {}: {e}", n.id)))?;
        notes.push(n);
    }
    Ok(notes)
}

fn import(store: &Store, whose: &Whose, files: &[PathBuf]) -> Result<(), CommandError> {
    let mut all = Vec::new();
    for f in files {
        let text = read_capped(f)?;
        let notes = prepare(&text, whose).map_err(|(line, reason)| CommandError::NotesFile {
            at: if line == 0 {
                f.display().to_string()
            } else {
                format!("{}:{line}", f.display())
            },
            reason,
        })?;
        all.extend(notes);
    }
    let (mut written, mut present) = (0, 0);
    for n in &all {
        match store.append(n) {
            Ok(Appended::Written) => written += 1,
            Ok(Appended::Present) => present += 1,
            Err(e) => {
                eprintln!("tidewatch: imported {written} notes before this error");
                return Err(e.into());
            }
        }
    }
    writeln!(
        std::io::stdout().lock(),
        "imported {written} notes ({present} already here) into {}",
        store.path().display()
    )?;
    Ok(())
}

/// A file to import ("-": stdin), refused whole if it is larger than a
/// journal may be: a notes file that size is not one.
fn read_capped(f: &Path) -> Result<String, CommandError> {
    let max = crate::notes::store::MAX_BYTES;
    let bad = |reason: String| CommandError::NotesFile {
        at: f.display().to_string(),
        reason,
    };
    let mut bytes = Vec::new();
    let read = if f == Path::new("-") {
        std::io::stdin()
            .lock()
            .take(max + 1)
            .read_to_end(&mut bytes)
    } else {
        std::fs::File::open(f).and_then(|h| h.take(max + 1).read_to_end(&mut bytes))
    };
    read.map_err(|e| bad(e.to_string()))?;
    if bytes.len() as u64 > max {
        return Err(bad(format!(
            "more than {max} bytes, more than a notes journal holds (MAX_BYTES)"
        )));
    }
    String::from_utf8(bytes).map_err(|e| bad(format!("not UTF-8: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notes::tests::note;

    fn lines(notes: &[Note]) -> String {
        notes
            .iter()
            .map(|n| serde_json::to_string(n).unwrap() + "\n")
            .collect()
    }

    #[test]
    fn an_import_with_a_vessel_marks_its_own_notes_as_that_vessels() {
        let mut third = note("ME1", "a2", "2026-11-30T06:00:00Z");
        third.vessel = Some("Polar Tern".into());
        third.id = third.make_id();
        let text = lines(&[note("ME1", "a1", "2026-11-30T05:00:00Z"), third]);
        let got = prepare(&text, &Whose::Vessel("Nordic Star".into())).unwrap();
        assert_eq!(got[0].vessel.as_deref(), Some("Nordic Star"));
        assert_eq!(got[0].id, "Nordic Star:a1:2026-11-30T05:00:00Z");
        // A note the exporter had imported stays the third vessel's.
        assert_eq!(got[1].vessel.as_deref(), Some("Polar Tern"));
        assert_eq!(got[1].id, "Polar Tern:a2:2026-11-30T06:00:00Z");
    }

    #[test]
    fn a_note_without_a_vessel_is_never_silently_taken_as_ours() {
        let text = lines(&[note("ME1", "a1", "2026-11-30T05:00:00Z")]);
        let (line, why) = prepare(&text, &Whose::Unsaid).unwrap_err();
        assert_eq!(line, 1);
        assert!(
            why.contains("--vessel NAME") && why.contains("--ours"),
            "{why}"
        );
        let ours = prepare(&text, &Whose::Ours).unwrap();
        assert_eq!(ours[0].vessel, None);
        assert_eq!(ours[0].id, "here:a1:2026-11-30T05:00:00Z");
    }

    #[test]
    fn a_bad_line_is_named_by_its_number_and_nothing_is_taken() {
        let mut long = note("ME1", "a2", "2026-11-30T06:00:00Z");
        long.by = "x".repeat(65);
        let text = lines(&[note("ME1", "a1", "2026-11-30T05:00:00Z")]) + "\n" + &lines(&[long]);
        let (line, why) = prepare(&text, &Whose::Ours).unwrap_err();
        assert_eq!(line, 3);
        assert!(why.contains("note field by is 65 bytes"), "{why}");
        let (line, why) = prepare("{\"id\": 3}\n", &Whose::Ours).unwrap_err();
        assert_eq!(line, 1);
        assert!(why.starts_with("not a note"), "{why}");
        assert!(prepare("", &Whose::Vessel("here".into())).is_err());
    }

    #[test]
    fn a_listed_cause_is_one_line_and_says_whose_words_it_is() {
        let mut n = note("ME1", "a1", "2026-11-30T05:00:00Z");
        n.cause = NoteCause::Text(format!("seawater pump\nimpeller worn {}", "x".repeat(60)));
        let r = row(&n);
        assert!(
            r[4].starts_with("crew: seawater pump impeller worn"),
            "{}",
            r[4]
        );
        assert_eq!(r[4].chars().count(), CAUSE_CHARS);
        assert_eq!(
            (r[6].as_str(), r[7].as_str(), r[8].as_str()),
            ("2026-11-30", "-", "-")
        );
    }
}
