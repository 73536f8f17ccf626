//! The notes journal, `state_dir/notes/notes.jsonl`: one JSON record a
//! line, `{"note": {...}}` or `{"withdraw": {"id","by","ts"}}`, only ever
//! appended to, each line fsync'd before `append` or `withdraw` returns.
//! The daemon and the CLI (`tidewatch notes`) both write it, so every
//! write holds an exclusive flock on the file, and reads a shared one.
//!
//! A power cut mid-write leaves a torn last line: reading drops it, and the
//! next write cuts it off first, so the line it writes starts on a line of
//! its own. A damaged line elsewhere costs that line only. The journal is
//! bounded ([`MAX_NOTES`], [`MAX_BYTES`]); a full one refuses new notes,
//! saying which bound it hit, and still takes withdrawals.
//!
//! Owns the file's format and its locking; what a note is and its bounds
//! belong to `notes`.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};

use super::{Note, SiteNotes, Withdrawn};
use crate::durable;

/// The most notes (withdrawn ones included: they are history) a journal
/// keeps. At a few confirmations a day, years of a vessel's notes.
pub const MAX_NOTES: usize = 5_000;
/// The most bytes of notes a journal keeps: a note is about 1 KiB, so the
/// count is the bound met first; this one holds if notes are large.
pub const MAX_BYTES: u64 = 16 << 20;
/// Bytes past [`MAX_BYTES`] kept for withdrawals only (a withdrawal line is
/// about 150 bytes): a wrong note can be withdrawn from a full journal.
pub const WITHDRAW_RESERVE: u64 = 256 << 10;

/// The journal's file name in `state_dir/notes/`.
pub const FILE_NAME: &str = "notes.jsonl";

/// One line of the journal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
enum Record {
    // Boxed: a note is ten times a withdrawal.
    Note(Box<Note>),
    Withdraw(Withdrawal),
}

/// A withdrawal as the journal keeps it: the note it withdraws, who, when.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Withdrawal {
    pub id: String,
    pub by: String,
    pub ts: String,
}

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("notes journal {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("note {id}: {source}")]
    Note { id: String, source: super::Error },
    #[error("notes journal {path} is full: it holds {count} notes, the most it keeps (MAX_NOTES = {max}); export them (tidewatch notes export) and move the journal aside to start a new one")]
    TooMany {
        path: PathBuf,
        count: usize,
        max: usize,
    },
    #[error("notes journal {path} is full: {bytes} bytes, and a note of {line} more would pass the most it keeps (MAX_BYTES = {max}); export the notes (tidewatch notes export) and move the journal aside to start a new one")]
    TooBig {
        path: PathBuf,
        bytes: u64,
        line: u64,
        max: u64,
    },
    #[error("no note has the id {id:?} (tidewatch notes list shows the ids)")]
    UnknownId { id: String },
    #[error("note {id} was already withdrawn by {by} at {ts}")]
    AlreadyWithdrawn { id: String, by: String, ts: String },
}

/// What the journal looked like when it was read: `changed_since` tells
/// whether it has been written since. Appends always grow the file, and a
/// journal moved aside for a new one has another inode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stamp {
    ino: u64,
    len: u64,
    mtime_ns: i128,
}

impl Stamp {
    fn of(m: &std::fs::Metadata) -> Self {
        Stamp {
            ino: m.ino(),
            len: m.len(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
        }
    }
}

/// Every note of the journal, withdrawn ones included, and what reading it
/// found.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    /// In the order they were written; a withdrawn note carries its
    /// withdrawal.
    pub notes: Vec<Note>,
    pub stamp: Stamp,
    /// A torn last line (a power cut mid-write), dropped.
    pub torn_bytes: u64,
    /// Lines elsewhere that are not a record, skipped.
    pub damaged_lines: usize,
}

/// Whether `append` wrote the note.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Appended {
    Written,
    /// A note with its id is in the journal already (feedback delivered
    /// twice, an import run twice): nothing was written.
    Present,
}

/// The notes journal of one state dir.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
    path: PathBuf,
}

impl Store {
    /// The journal in `state_dir/notes/`, whose folder is made if missing
    /// (the file itself on the first write).
    pub fn open(state_dir: &Path) -> Result<Store, StoreError> {
        let dir = state_dir.join("notes");
        let path = dir.join(FILE_NAME);
        if !dir.is_dir() {
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                path: dir.clone(),
                source,
            })?;
            give_to_owner_of(state_dir, &dir);
            let _ = durable::sync_dir(state_dir);
        }
        Ok(Store { dir, path })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn io(&self) -> impl Fn(std::io::Error) -> StoreError + '_ {
        |source| StoreError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The notes that count, as the pipeline reads them.
    pub fn load(&self) -> Result<SiteNotes, StoreError> {
        Ok(SiteNotes::from_notes(self.load_all()?.notes))
    }

    /// Every note, withdrawn ones included, and the journal's stamp.
    pub fn load_all(&self) -> Result<Loaded, StoreError> {
        let file = match File::open(&self.path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded::default()),
            Err(e) => return Err(self.io()(e)),
        };
        let mut file = lock(file, FlockArg::LockShared).map_err(self.io())?;
        let stamp = Stamp::of(&file.metadata().map_err(self.io())?);
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(self.io())?;
        let parsed = parse(&bytes);
        Ok(Loaded {
            notes: replay(parsed.records),
            stamp,
            torn_bytes: (bytes.len() - parsed.end) as u64,
            damaged_lines: parsed.damaged_lines,
        })
    }

    /// The journal's stamp now (the default one when there is no journal).
    pub fn stamp(&self) -> Stamp {
        std::fs::metadata(&self.path)
            .map(|m| Stamp::of(&m))
            .unwrap_or_default()
    }

    /// Whether the journal was written (by anyone) since `stamp` was taken:
    /// one stat, cheap enough to ask before every alarm.
    pub fn changed_since(&self, stamp: &Stamp) -> bool {
        self.stamp() != *stamp
    }

    /// Appends `note`, on disk when this returns; refused if it breaks a
    /// bound, or if the journal is full.
    pub fn append(&self, note: &Note) -> Result<Appended, StoreError> {
        note.check().map_err(|source| StoreError::Note {
            id: note.id.chars().take(200).collect(),
            source,
        })?;
        let line = line(&Record::Note(Box::new(note.clone())));
        self.write(|j| {
            if j.notes.iter().any(|n| n.id == note.id) {
                return Ok(None);
            }
            if j.notes.len() >= MAX_NOTES {
                return Err(StoreError::TooMany {
                    path: self.path.clone(),
                    count: j.notes.len(),
                    max: MAX_NOTES,
                });
            }
            if j.bytes + line.len() as u64 > MAX_BYTES {
                return Err(StoreError::TooBig {
                    path: self.path.clone(),
                    bytes: j.bytes,
                    line: line.len() as u64,
                    max: MAX_BYTES,
                });
            }
            Ok(Some(line.clone()))
        })
        .map(|w| {
            if w {
                Appended::Written
            } else {
                Appended::Present
            }
        })
    }

    /// Withdraws note `id`: from when this returns, `load` leaves it out.
    pub fn withdraw(&self, id: &str, by: &str, ts: &str) -> Result<(), StoreError> {
        let bad = |source| StoreError::Note {
            id: id.chars().take(200).collect(),
            source,
        };
        super::required("withdrawn.by", by, super::MAX_BY).map_err(bad)?;
        super::rfc3339("withdrawn.ts", ts).map_err(bad)?;
        let w = Withdrawal {
            id: id.into(),
            by: by.into(),
            ts: ts.into(),
        };
        let line = line(&Record::Withdraw(w));
        self.write(|j| {
            let Some(n) = j.notes.iter().find(|n| n.id == id) else {
                return Err(StoreError::UnknownId {
                    id: id.chars().take(200).collect(),
                });
            };
            if let Some(Withdrawn { by, ts }) = &n.withdrawn {
                return Err(StoreError::AlreadyWithdrawn {
                    id: id.into(),
                    by: by.clone(),
                    ts: ts.clone(),
                });
            }
            if j.bytes + line.len() as u64 > MAX_BYTES + WITHDRAW_RESERVE {
                return Err(StoreError::TooBig {
                    path: self.path.clone(),
                    bytes: j.bytes,
                    line: line.len() as u64,
                    max: MAX_BYTES + WITHDRAW_RESERVE,
                });
            }
            Ok(Some(line.clone()))
        })
        .map(|_| ())
    }

    /// Under the exclusive lock: reads the journal, cuts a torn tail, asks
    /// `decide` what line to write (None: nothing), writes and fsyncs it.
    /// True when a line was written.
    fn write(
        &self,
        decide: impl FnOnce(&Journal) -> Result<Option<Vec<u8>>, StoreError>,
    ) -> Result<bool, StoreError> {
        let created = !self.path.exists();
        let file = OpenOptions::new()
            .read(true)
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&self.path)
            .map_err(self.io())?;
        if created {
            give_to_owner_of(&self.dir, &self.path);
            durable::sync_dir(&self.dir).map_err(self.io())?;
        }
        let mut file = lock(file, FlockArg::LockExclusive).map_err(self.io())?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(self.io())?;
        let parsed = parse(&bytes);
        let journal = Journal {
            bytes: parsed.end as u64,
            notes: replay(parsed.records),
        };
        let Some(line) = decide(&journal)? else {
            return Ok(false);
        };
        let mut out = Vec::with_capacity(line.len() + 1);
        if parsed.end < bytes.len() {
            // A torn tail: the new line must not be glued to it, or both
            // are lost.
            file.set_len(parsed.end as u64).map_err(self.io())?;
        } else if parsed.unterminated {
            // The last write reached its last byte but not its newline.
            out.push(b'\n');
        }
        out.extend_from_slice(&line);
        #[cfg(feature = "fault-injection")]
        if crate::fault::spec() == Some("notes-torn-write") {
            // A power cut mid-write: half the line reaches the disk.
            let _ = file.write_all(&out[..out.len() / 2]);
            let _ = file.sync_data();
            std::process::abort();
        }
        file.write_all(&out).map_err(self.io())?;
        file.sync_data().map_err(self.io())?;
        Ok(true)
    }
}

/// The journal as a write finds it.
struct Journal {
    /// Bytes of whole lines.
    bytes: u64,
    notes: Vec<Note>,
}

/// `file` once it holds `how`; waits for other writers.
fn lock(file: File, how: FlockArg) -> std::io::Result<Flock<File>> {
    Flock::lock(file, how).map_err(|(_, e)| std::io::Error::from(e))
}

/// A record as one journal line, with its newline.
fn line(r: &Record) -> Vec<u8> {
    let mut b = serde_json::to_vec(r).unwrap_or_default();
    b.push(b'\n');
    b
}

/// What the journal's bytes hold.
#[derive(Debug, Default)]
struct Parsed {
    records: Vec<Record>,
    /// Where the last whole line ends: what follows is a torn tail.
    end: usize,
    /// The last line is whole but its newline was not written.
    unterminated: bool,
    damaged_lines: usize,
}

fn parse(bytes: &[u8]) -> Parsed {
    let mut p = Parsed::default();
    let mut at = 0;
    while at < bytes.len() {
        let (text, next, terminated) = match bytes[at..].iter().position(|&b| b == b'\n') {
            Some(i) => (&bytes[at..at + i], at + i + 1, true),
            None => (&bytes[at..], bytes.len(), false),
        };
        match serde_json::from_slice::<Record>(text) {
            Ok(r) => {
                p.records.push(r);
                p.end = next;
                p.unterminated = !terminated;
            }
            // An empty line (a newline written after a torn tail was cut
            // by hand) is no damage.
            Err(_) if terminated && text.iter().all(u8::is_ascii_whitespace) => p.end = next,
            Err(_) if terminated => {
                p.damaged_lines += 1;
                p.end = next;
            }
            Err(_) => {}
        }
        at = next;
    }
    p
}

/// The notes the records leave: in the order written, the first of an id
/// kept, each withdrawal applied to the note it names (one for a note that
/// is not there, whose line was damaged, is dropped).
fn replay(records: Vec<Record>) -> Vec<Note> {
    let mut notes: Vec<Note> = Vec::new();
    let mut at = std::collections::HashMap::new();
    for r in records {
        match r {
            Record::Note(n) => {
                if !at.contains_key(&n.id) {
                    at.insert(n.id.clone(), notes.len());
                    notes.push(*n);
                }
            }
            Record::Withdraw(w) => {
                if let Some(n) = at.get(&w.id).map(|&i| &mut notes[i]) {
                    n.withdrawn.get_or_insert(Withdrawn { by: w.by, ts: w.ts });
                }
            }
        }
    }
    notes
}

/// Who should own a file or folder `euid` makes in a folder `dir_owner`
/// owns: root writing notes for the daemon's user (`sudo tidewatch notes
/// withdraw`) hands them over, or the daemon could not append to a journal
/// root made (0600).
fn new_owner(euid: u32, dir_owner: u32) -> Option<u32> {
    (euid == 0 && dir_owner != 0).then_some(dir_owner)
}

/// `new_owner`, applied to `made` in `parent`. Best effort: a chown that
/// fails leaves a journal the daemon may not write, which it will say.
fn give_to_owner_of(parent: &Path, made: &Path) {
    let Ok(m) = std::fs::metadata(parent) else {
        return;
    };
    if let Some(uid) = new_owner(nix::unistd::geteuid().as_raw(), m.uid()) {
        let gid = nix::unistd::Gid::from_raw(m.gid());
        let uid = nix::unistd::Uid::from_raw(uid);
        if let Err(e) = nix::unistd::chown(made, Some(uid), Some(gid)) {
            tracing::warn!(path = %made.display(), error = %e, "cannot hand the notes journal to the state dir's owner");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::notes::tests::note;
    use crate::notes::{NoteCause, Verdict};

    fn store() -> (tempfile::TempDir, Store) {
        let d = tempfile::tempdir().unwrap();
        let s = Store::open(d.path()).unwrap();
        (d, s)
    }

    fn ids(notes: &[Note]) -> Vec<&str> {
        notes.iter().map(|n| n.answered.alarm_id.as_str()).collect()
    }

    #[test]
    fn appended_notes_survive_a_reopen_in_the_order_written() {
        let (d, s) = store();
        for (i, a) in ["a1", "a2", "a3"].iter().enumerate() {
            let ts = format!("2026-11-30T0{i}:00:00Z");
            assert_eq!(s.append(&note("ME1", a, &ts)).unwrap(), Appended::Written);
        }
        let again = Store::open(d.path()).unwrap();
        assert_eq!(ids(again.load().unwrap().all()), ["a1", "a2", "a3"]);
        let text = std::fs::read_to_string(d.path().join("notes/notes.jsonl")).unwrap();
        assert!(text.starts_with("{\"note\":{\"id\":\"here:a1:"), "{text}");
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn a_note_appended_twice_is_written_once() {
        let (_d, s) = store();
        let n = note("ME1", "a1", "2026-11-30T05:00:00Z");
        assert_eq!(s.append(&n).unwrap(), Appended::Written);
        assert_eq!(s.append(&n).unwrap(), Appended::Present);
        assert_eq!(s.load_all().unwrap().notes.len(), 1);
    }

    #[test]
    fn a_withdrawn_note_stops_counting_at_once_and_stays_listed() {
        let (_d, s) = store();
        let (a, b) = (
            note("ME1", "a1", "2026-11-30T05:00:00Z"),
            note("ME1", "a2", "2026-11-30T06:00:00Z"),
        );
        s.append(&a).unwrap();
        s.append(&b).unwrap();
        s.withdraw(&a.id, "chief", "2026-11-30T07:00:00Z").unwrap();
        assert_eq!(ids(s.load().unwrap().all()), ["a2"]);
        let all = s.load_all().unwrap().notes;
        assert_eq!(ids(&all), ["a1", "a2"]);
        assert_eq!(all[0].withdrawn.as_ref().unwrap().by, "chief");
        assert!(matches!(
            s.withdraw(&a.id, "2nd", "2026-11-30T08:00:00Z"),
            Err(StoreError::AlreadyWithdrawn { ref by, .. }) if by == "chief"
        ));
        assert!(matches!(
            s.withdraw("here:nope", "chief", "2026-11-30T08:00:00Z"),
            Err(StoreError::UnknownId { .. })
        ));
        assert!(matches!(
            s.withdraw(&b.id, "", "2026-11-30T08:00:00Z"),
            Err(StoreError::Note {
                source: crate::notes::Error::Missing {
                    field: "withdrawn.by"
                },
                ..
            })
        ));
    }

    #[test]
    fn a_note_that_breaks_a_bound_is_refused_and_not_written() {
        let (_d, s) = store();
        let mut n = note("ME1", "a1", "2026-11-30T05:00:00Z");
        n.remedy = Some("x".repeat(crate::notes::MAX_REMEDY + 1));
        let e = s.append(&n).unwrap_err();
        assert!(
            e.to_string().contains("note field remedy is 501 bytes"),
            "{e}"
        );
        assert!(s.load_all().unwrap().notes.is_empty());
    }

    #[test]
    fn a_torn_last_line_is_dropped_on_load_and_cut_before_the_next_write() {
        let (_d, s) = store();
        s.append(&note("ME1", "a1", "2026-11-30T05:00:00Z"))
            .unwrap();
        let whole = std::fs::read(s.path()).unwrap();
        let mut torn = whole.clone();
        torn.extend_from_slice(&whole[..whole.len() / 2]);
        std::fs::write(s.path(), &torn).unwrap();
        let l = s.load_all().unwrap();
        assert_eq!(ids(&l.notes), ["a1"]);
        assert_eq!(l.torn_bytes, (whole.len() / 2) as u64);
        s.append(&note("ME1", "a2", "2026-11-30T06:00:00Z"))
            .unwrap();
        let l = s.load_all().unwrap();
        assert_eq!(ids(&l.notes), ["a1", "a2"]);
        assert_eq!((l.torn_bytes, l.damaged_lines), (0, 0));
    }

    #[test]
    fn a_whole_last_line_without_its_newline_is_kept_and_the_next_starts_its_own() {
        let (_d, s) = store();
        s.append(&note("ME1", "a1", "2026-11-30T05:00:00Z"))
            .unwrap();
        let mut b = std::fs::read(s.path()).unwrap();
        b.pop();
        std::fs::write(s.path(), &b).unwrap();
        assert_eq!(ids(&s.load_all().unwrap().notes), ["a1"]);
        s.append(&note("ME1", "a2", "2026-11-30T06:00:00Z"))
            .unwrap();
        let l = s.load_all().unwrap();
        assert_eq!(ids(&l.notes), ["a1", "a2"]);
        assert_eq!(l.damaged_lines, 0);
    }

    #[test]
    fn a_damaged_line_mid_journal_costs_that_line_only() {
        let (_d, s) = store();
        s.append(&note("ME1", "a1", "2026-11-30T05:00:00Z"))
            .unwrap();
        let mut f = OpenOptions::new().append(true).open(s.path()).unwrap();
        f.write_all(b"{\"note\": garbage\n\n").unwrap();
        s.append(&note("ME1", "a2", "2026-11-30T06:00:00Z"))
            .unwrap();
        let l = s.load_all().unwrap();
        assert_eq!(ids(&l.notes), ["a1", "a2"]);
        assert_eq!(l.damaged_lines, 1);
    }

    #[test]
    fn a_full_journal_refuses_notes_naming_the_bound_and_still_takes_withdrawals() {
        let (_d, s) = store();
        let first = note("ME1", "a0", "2026-11-30T05:00:00Z");
        // Written directly: MAX_NOTES fsync'd appends would take minutes.
        let mut text = Vec::new();
        for i in 0..MAX_NOTES {
            let mut n = note("ME1", &format!("a{i}"), "2026-11-30T05:00:00Z");
            n.id = n.make_id();
            text.extend(line(&Record::Note(Box::new(n))));
        }
        std::fs::write(s.path(), &text).unwrap();
        let e = s
            .append(&note("ME1", "b", "2026-11-30T06:00:00Z"))
            .unwrap_err();
        assert!(
            matches!(
                e,
                StoreError::TooMany {
                    count: MAX_NOTES,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("MAX_NOTES = 5000"), "{e}");
        s.withdraw(&first.id, "chief", "2026-11-30T07:00:00Z")
            .unwrap();
        assert_eq!(s.load().unwrap().len(), MAX_NOTES - 1);
    }

    #[test]
    fn a_journal_past_its_byte_bound_refuses_notes_naming_the_bound() {
        let (_d, s) = store();
        let mut big = note("ME1", "big", "2026-11-30T05:00:00Z");
        big.answered.causes = vec![
            crate::diagnosis::Cause {
                cause: "x".repeat(1000),
                likelihood: "high".into(),
                source: None,
                site: None,
            };
            14
        ];
        let mut text = Vec::new();
        let mut i = 0;
        while (text.len() as u64) < MAX_BYTES - 1000 {
            big.id = format!("here:big{i}:2026-11-30T05:00:00Z");
            text.extend(line(&Record::Note(Box::new(big.clone()))));
            i += 1;
        }
        std::fs::write(s.path(), &text).unwrap();
        let e = s
            .append(&note("ME1", "b", "2026-11-30T06:00:00Z"))
            .unwrap_err();
        assert!(
            matches!(e, StoreError::TooBig { max: MAX_BYTES, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("MAX_BYTES = 16777216"), "{e}");
    }

    #[test]
    fn changed_since_sees_every_write_and_nothing_else() {
        let (_d, s) = store();
        let none = s.stamp();
        assert!(!s.changed_since(&none));
        let n = note("ME1", "a1", "2026-11-30T05:00:00Z");
        s.append(&n).unwrap();
        assert!(s.changed_since(&none));
        let l = s.load_all().unwrap();
        assert!(!s.changed_since(&l.stamp));
        // A note already there writes nothing.
        s.append(&n).unwrap();
        assert!(!s.changed_since(&l.stamp));
        s.withdraw(&n.id, "chief", "2026-11-30T07:00:00Z").unwrap();
        assert!(s.changed_since(&l.stamp));
    }

    #[test]
    fn a_withdrawal_of_a_lost_note_and_a_second_note_of_an_id_change_nothing() {
        let a = note("ME1", "a1", "2026-11-30T05:00:00Z");
        let mut other = a.clone();
        other.verdict = Verdict::Rejected;
        other.cause = NoteCause::Text("not it".into());
        let records = vec![
            Record::Withdraw(Withdrawal {
                id: "here:lost".into(),
                by: "chief".into(),
                ts: "2026-11-30T07:00:00Z".into(),
            }),
            Record::Note(Box::new(a.clone())),
            Record::Note(Box::new(other)),
        ];
        assert_eq!(replay(records), vec![a]);
    }

    #[test]
    fn root_hands_what_it_makes_to_the_state_dirs_owner() {
        assert_eq!(new_owner(0, 998), Some(998));
        assert_eq!(new_owner(0, 0), None);
        assert_eq!(new_owner(998, 998), None);
        assert_eq!(new_owner(1000, 998), None);
    }

    #[test]
    fn the_journal_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let (_d, s) = store();
        crate::durable::tests::with_umask(0o022, || {
            s.append(&note("ME1", "a1", "2026-11-30T05:00:00Z"))
                .unwrap();
        });
        let mode = std::fs::metadata(s.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
}
