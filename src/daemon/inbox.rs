//! The inbox: alarms taken off the broker and not yet answered, kept on disk
//! so that tidewatch can acknowledge an alarm as soon as it is durable here,
//! long before its diagnosis exists. That is what lets a storm larger than
//! the broker's queue be taken off the broker at disk speed: the broker only
//! hands a subscriber a small window of unacknowledged messages and silently
//! drops what overflows its queue behind them.
//!
//! One append-only file, `state_dir/inbox.log`, in the `journal` framing. A
//! record is an `Alarm` (topic and exact payload, replayed at start) or a
//! `Done` key (its diagnosis is durable in the outbox), or an `Attempt` key
//! (the alarm's handling aborted the daemon, written fsync'd as it did, so
//! that an alarm that aborts it every time is known at the next start: see
//! `POISON_AFTER` and `AbortLog`); files written before that counted
//! attempts ahead, and may hold `Interrupted` keys (a clean stop took one
//! back). Appends are not
//! fsync'd one by one: the caller appends a burst, calls `sync` once (group
//! commit) and only then acknowledges the burst's alarms. `Done` records are
//! never fsync'd: the outbox fsync'd the diagnosis first, and a lost `Done`
//! only means the alarm is looked up in the outbox at the next start. The
//! file is bounded by `inbox.max_bytes`; when it is full it is rewritten
//! with the held alarms only if that frees a real share of it
//! (`journal::worth_compacting`), else the append is refused and the caller
//! answers that alarm at once instead (triage).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};

use super::delivery::Key;
use super::journal;
use crate::durable::{self, Access};

const FILE_MAGIC: &[u8; 4] = b"TWIB";
const FILE_VERSION: u32 = 1;
const MARKER: [u8; 4] = [0xF7, b'T', b'W', b'J'];

#[derive(Debug, thiserror::Error)]
pub enum InboxError {
    #[error("inbox {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("inbox {path} is full ({size} of inbox.max_bytes {max} bytes of unanswered alarms)")]
    Full { path: PathBuf, size: u64, max: u64 },
}

/// Aborts after which an alarm is poison: its handling aborted the daemon
/// (crash-only) that many times, so it is answered without the model from
/// then on.
pub const POISON_AFTER: u32 = 2;

// New variants go last: postcard numbers them in order, and files written
// before them must still read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Rec {
    Alarm {
        key: Key,
        topic: String,
        payload: Vec<u8>,
    },
    Done {
        key: Key,
    },
    Attempt {
        key: Key,
    },
    Interrupted {
        key: Key,
    },
}

/// An alarm in the inbox, not yet answered.
#[derive(Debug, Clone, PartialEq)]
pub struct Held {
    pub key: Key,
    pub topic: String,
    pub payload: Vec<u8>,
    /// Times its handling aborted the daemon (a panic on it, or a slot the
    /// watchdog gave up on while on it). A kill or a power cut counts for no
    /// alarm.
    pub aborts: u32,
}

/// What opening found.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OpenReport {
    /// Alarms not yet answered, to be replayed.
    pub pending: usize,
    /// A partial record at the end (power lost mid-write) was cut off.
    pub torn_bytes: u64,
    /// Bytes of damaged records skipped mid-file (a damaged file header too).
    pub damaged_bytes: u64,
    /// Why the file could not be rewritten clean at open (a full disk, say):
    /// the inbox still works, appending after what it read.
    pub not_compacted: Option<String>,
}

/// The inbox's bookkeeping, without I/O: which alarms are held, in arrival
/// order, and how many bytes their records take.
#[derive(Debug, Default)]
struct Book {
    next: u64,
    order: BTreeMap<u64, Key>,
    held: HashMap<Key, (u64, Held, u64)>,
    /// Bytes of the held alarms' records (and their attempts): what a
    /// compaction keeps.
    live_bytes: u64,
}

/// The size of one `Attempt` record, framed.
fn attempt_bytes() -> u64 {
    journal::frame(&MARKER, &Rec::Attempt { key: Key([0; 16]) }).len() as u64
}

impl Book {
    fn apply(&mut self, r: Rec, bytes: u64) {
        match r {
            Rec::Alarm {
                key,
                topic,
                payload,
            } => {
                if self.held.contains_key(&key) {
                    return;
                }
                let n = self.next;
                self.next += 1;
                self.order.insert(n, key);
                self.live_bytes += bytes;
                self.held.insert(
                    key,
                    (
                        n,
                        Held {
                            key,
                            topic,
                            payload,
                            aborts: 0,
                        },
                        bytes,
                    ),
                );
            }
            Rec::Done { key } => {
                if let Some((n, _, b)) = self.held.remove(&key) {
                    self.order.remove(&n);
                    self.live_bytes -= b;
                }
            }
            Rec::Attempt { key } => {
                if let Some((_, h, b)) = self.held.get_mut(&key) {
                    h.aborts += 1;
                    *b += attempt_bytes();
                    self.live_bytes += attempt_bytes();
                }
            }
            Rec::Interrupted { key } => {
                if let Some((_, h, b)) = self.held.get_mut(&key) {
                    if h.aborts > 0 {
                        h.aborts -= 1;
                        *b -= attempt_bytes();
                        self.live_bytes -= attempt_bytes();
                    }
                }
            }
        }
    }
}

pub struct Inbox {
    path: PathBuf,
    /// What appends go to: the file `path` names. None after a compaction
    /// renamed a new file into place and opening it failed: the old handle
    /// then names an unlinked file, and anything written through it would
    /// be lost while reported durable. Each write opens the path again
    /// first, and fails (so the alarm is triaged, not acknowledged from
    /// here) while it cannot.
    file: Option<File>,
    size: u64,
    max_bytes: u64,
    /// Appended since the last `sync`.
    dirty: bool,
    book: Book,
    /// Held while the file is rewritten: an `AbortLog` writing then would
    /// write to the file the rename replaces.
    rewriting: Arc<Mutex<()>>,
}

/// Counts an abort against a held alarm from outside the hub that owns the
/// inbox: the panic hook, on whichever thread panicked, as the process
/// ends. It appends the record itself, fsync'd, beside the hub's appends
/// (both open the file to append, so each record lands whole), and never
/// while a compaction rewrites the file.
#[derive(Debug, Clone)]
pub struct AbortLog {
    path: PathBuf,
    rewriting: Arc<Mutex<()>>,
}

impl AbortLog {
    /// One more abort against `key`, on disk when this returns. The hub's
    /// own view is not updated: the process is about to end.
    pub fn count(&self, key: &Key) -> Result<(), InboxError> {
        let io = |source| InboxError::Io {
            path: self.path.clone(),
            source,
        };
        let _rewrite = self.rewriting.lock().unwrap_or_else(|e| e.into_inner());
        let mut f = journal::open_rw(&self.path).map_err(io)?;
        f.write_all(&journal::frame(&MARKER, &Rec::Attempt { key: *key }))
            .map_err(io)?;
        f.sync_data().map_err(io)
    }
}

impl Inbox {
    /// Opens `dir/inbox.log`, cutting a torn tail and skipping damaged
    /// records, and rewrites it with only the alarms still held.
    pub fn open(dir: &Path, max_bytes: u64) -> Result<(Self, OpenReport), InboxError> {
        let path = dir.join("inbox.log");
        let io = |source| InboxError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = journal::open_rw(&path).map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let mut report = OpenReport::default();
        let mut book = Book::default();
        if !bytes.is_empty() {
            // A damaged header must not cost the alarms behind it: frames
            // carry their own markers.
            let start = if bytes.starts_with(FILE_MAGIC) && bytes.len() >= journal::FILE_HEADER {
                journal::FILE_HEADER
            } else {
                0
            };
            let p = journal::parse::<Rec>(&MARKER, &bytes, start);
            report.torn_bytes = (bytes.len() - p.end) as u64;
            // From 0, the damaged header is among the bytes skipped.
            report.damaged_bytes = p.damaged;
            for r in p.records {
                let n = journal::frame(&MARKER, &r).len() as u64;
                book.apply(r, n);
            }
        }
        report.pending = book.held.len();
        let mut inbox = Inbox {
            path,
            file: Some(file),
            size: bytes.len() as u64,
            max_bytes,
            dirty: false,
            book,
            rewriting: Arc::new(Mutex::new(())),
        };
        // Start from a clean file: the torn tail and the answered alarms go.
        // Failing that (a full disk), appending after a torn tail is still
        // safe, since reading resynchronises on the next good frame; refusing
        // to start would crash-loop the daemon and answer nothing.
        if let Err(e) = inbox.compact() {
            report.not_compacted = Some(e.to_string());
        }
        Ok((inbox, report))
    }

    fn io(&self) -> impl Fn(std::io::Error) -> InboxError + '_ {
        |source| InboxError::Io {
            path: self.path.clone(),
            source,
        }
    }

    /// The file appends go to, opened again if a compaction could not (see
    /// `file`).
    fn writer(&mut self) -> Result<&mut File, InboxError> {
        let f = match self.file.take() {
            Some(f) => f,
            None => reopen(&self.path).map_err(self.io())?,
        };
        Ok(self.file.insert(f))
    }

    /// Writes framed records at the end of the file.
    fn write(&mut self, b: &[u8]) -> Result<(), InboxError> {
        let written = self.writer()?.write_all(b);
        written.map_err(self.io())
    }

    /// Holds an alarm; durable only after the next `sync`. An alarm already
    /// held is not written again.
    pub fn append(&mut self, key: Key, topic: &str, payload: &[u8]) -> Result<(), InboxError> {
        if self.book.held.contains_key(&key) {
            return Ok(());
        }
        let rec = Rec::Alarm {
            key,
            topic: topic.to_string(),
            payload: payload.to_vec(),
        };
        let b = journal::frame(&MARKER, &rec);
        let need = b.len() as u64;
        let live = journal::FILE_HEADER as u64 + self.book.live_bytes;
        if journal::worth_compacting(self.size, live, need, self.max_bytes) {
            self.compact()?;
        }
        if self.size + need > self.max_bytes {
            return Err(InboxError::Full {
                path: self.path.clone(),
                size: self.size,
                max: self.max_bytes,
            });
        }
        self.write(&b)?;
        self.size += need;
        self.dirty = true;
        self.book.apply(rec, need);
        Ok(())
    }

    /// Counts an abort against the alarm (see `Held::aborts`) from the hub
    /// itself; durable after the next `sync`. Returns the aborts so far, or
    /// None for an alarm not held. Not bounded by `max_bytes`: a few small
    /// records per held alarm, and refusing one would hand a poison alarm
    /// to the model uncounted.
    pub fn count_abort(&mut self, key: &Key) -> Result<Option<u32>, InboxError> {
        let key = *key;
        if !self.book.held.contains_key(&key) {
            return Ok(None);
        }
        let rec = Rec::Attempt { key };
        let b = journal::frame(&MARKER, &rec);
        self.write(&b)?;
        self.size += b.len() as u64;
        self.dirty = true;
        self.book.apply(rec, 0);
        Ok(self.book.held.get(&key).map(|(_, h, _)| h.aborts))
    }

    /// What the panic hook counts aborts with.
    pub fn abort_log(&self) -> AbortLog {
        AbortLog {
            path: self.path.clone(),
            rewriting: self.rewriting.clone(),
        }
    }

    /// Makes every alarm appended so far durable (one fsync for the burst).
    pub fn sync(&mut self) -> Result<(), InboxError> {
        if self.dirty {
            // Dirty means a write went to the handle there is; a compaction
            // since wrote everything again, fsync'd, and cleared it.
            if let Some(f) = &self.file {
                f.sync_data().map_err(self.io())?;
            }
            self.dirty = false;
        }
        Ok(())
    }

    /// The alarm's diagnosis is durable elsewhere: it need not be replayed.
    /// Not fsync'd (see the module doc). When nothing is held any more the
    /// file is cut back to its header, so a quiet inbox costs no disk.
    pub fn done(&mut self, key: &Key) -> Result<(), InboxError> {
        if !self.book.held.contains_key(key) {
            return Ok(());
        }
        let rec = Rec::Done { key: *key };
        let b = journal::frame(&MARKER, &rec);
        self.book.apply(rec, 0);
        if self.book.held.is_empty() {
            return self.compact();
        }
        self.write(&b)?;
        self.size += b.len() as u64;
        Ok(())
    }

    /// Rewrites the file with the held alarms only.
    fn compact(&mut self) -> Result<(), InboxError> {
        let mut out = journal::header(FILE_MAGIC, FILE_VERSION).to_vec();
        for key in self.book.order.values() {
            let (_, h, _) = &self.book.held[key];
            out.extend_from_slice(&journal::frame(
                &MARKER,
                &Rec::Alarm {
                    key: h.key,
                    topic: h.topic.clone(),
                    payload: h.payload.clone(),
                },
            ));
            for _ in 0..h.aborts {
                out.extend_from_slice(&journal::frame(&MARKER, &Rec::Attempt { key: h.key }));
            }
        }
        let rewriting = self.rewriting.clone();
        let _rewrite = rewriting.lock().unwrap_or_else(|e| e.into_inner());
        durable::write_atomic(&self.path, &out, Access::Private).map_err(self.io())?;
        // The path names the new file now, which holds everything written
        // so far, fsync'd. The old handle names the replaced file: never
        // write through it again, even if the new one does not open.
        self.file = None;
        self.size = out.len() as u64;
        self.dirty = false;
        self.writer()?;
        Ok(())
    }

    /// The held alarms, oldest first: what a restart replays.
    pub fn held(&self) -> impl Iterator<Item = &Held> {
        self.book.order.values().map(|k| &self.book.held[k].1)
    }

    #[cfg(test)]
    pub fn is_held(&self, key: &Key) -> bool {
        self.book.held.contains_key(key)
    }

    pub fn len(&self) -> usize {
        self.book.held.len()
    }

    #[cfg(test)]
    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Opens the inbox file for appending; a unit test can make it fail
/// (`crate::fault::disk`, as "inbox reopen").
fn reopen(path: &Path) -> std::io::Result<File> {
    #[cfg(test)]
    crate::fault::disk::check("inbox reopen")?;
    journal::open_rw(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Key {
        Key([i; 16])
    }

    fn hold(ib: &mut Inbox, i: u8) {
        ib.append(
            k(i),
            &format!("t/alarm/E{i}"),
            format!("{{\"n\":{i}}}").as_bytes(),
        )
        .unwrap();
    }

    fn keys(ib: &Inbox) -> Vec<Key> {
        ib.held().map(|h| h.key).collect()
    }

    #[test]
    fn held_alarms_survive_a_restart_in_arrival_order_until_done() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, r) = Inbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(r.pending, 0);
        for i in [3, 1, 2] {
            hold(&mut ib, i);
        }
        ib.sync().unwrap();
        ib.done(&k(1)).unwrap();
        drop(ib);
        let (ib, r) = Inbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(r.pending, 2);
        assert_eq!(keys(&ib), vec![k(3), k(2)]);
        let h = ib.held().next().unwrap();
        assert_eq!(
            (h.topic.as_str(), &h.payload[..]),
            ("t/alarm/E3", &b"{\"n\":3}"[..])
        );
    }

    #[test]
    fn a_held_alarm_received_again_is_not_written_twice() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        hold(&mut ib, 1);
        let size = ib.size();
        hold(&mut ib, 1);
        assert_eq!(ib.size(), size);
        assert_eq!(ib.len(), 1);
    }

    #[test]
    fn when_nothing_is_held_the_file_is_cut_back_to_its_header() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        for i in 0..50 {
            hold(&mut ib, i);
        }
        for i in 0..50 {
            ib.done(&k(i)).unwrap();
        }
        assert_eq!(ib.size(), journal::FILE_HEADER as u64);
        let on_disk = std::fs::metadata(d.path().join("inbox.log")).unwrap().len();
        assert_eq!(on_disk, journal::FILE_HEADER as u64);
    }

    #[test]
    fn a_full_inbox_refuses_the_alarm_and_takes_more_once_answered_ones_are_compacted_away() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 300).unwrap();
        let mut n = 0u8;
        let err = loop {
            match ib.append(k(n), "t/alarm/E", &[b'x'; 40]) {
                Ok(()) => n += 1,
                Err(e) => break e,
            }
        };
        assert!(matches!(err, InboxError::Full { .. }), "{err}");
        assert!(err.to_string().contains("inbox.max_bytes 300"), "{err}");
        assert!(n >= 2 && ib.size() <= 300);
        // Answering the first frees room (the `Done` record is only kept
        // until a compaction needs the space).
        ib.done(&k(0)).unwrap();
        ib.done(&k(1)).unwrap();
        ib.append(k(200), "t/alarm/E", &[b'x'; 40]).unwrap();
        assert!(ib.size() <= 300);
        assert!(ib.is_held(&k(200)) && !ib.is_held(&k(0)));
    }

    #[test]
    fn a_full_inbox_does_not_rewrite_itself_for_every_alarm_answered() {
        let d = tempfile::tempdir().unwrap();
        let max = 8192;
        let (mut ib, _) = Inbox::open(d.path(), max).unwrap();
        let mut n = 0u8;
        while ib.append(k(n), "t/alarm/E", &[b'x'; 40]).is_ok() {
            n += 1;
        }
        let ino = || {
            use std::os::unix::fs::MetadataExt;
            std::fs::metadata(d.path().join("inbox.log")).unwrap().ino()
        };
        // A storm goes on while the oldest alarms are answered one by one.
        let (mut rewrites, mut before) = (0, ino());
        for i in 0..20u8 {
            ib.done(&k(i)).unwrap();
            let _ = ib.append(k(100 + i), "t/alarm/E", &[b'x'; 40]);
            if ino() != before {
                rewrites += 1;
                before = ino();
            }
        }
        assert!(
            rewrites <= 2,
            "{rewrites} rewrites of a {max}-byte inbox for 20 alarms answered"
        );
    }

    #[test]
    fn a_torn_tail_is_cut_and_damage_mid_file_costs_one_alarm() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        for i in 1..=3 {
            hold(&mut ib, i);
        }
        ib.sync().unwrap();
        drop(ib);
        let p = d.path().join("inbox.log");
        let mut b = std::fs::read(&p).unwrap();
        let first = journal::FILE_HEADER + 12;
        b[first + 2] ^= 0xff; // inside the first record's body
        b.extend_from_slice(&[0xF7, b'T', b'W']); // a torn frame
        std::fs::write(&p, &b).unwrap();
        let (ib, r) = Inbox::open(d.path(), 1 << 20).unwrap();
        assert!(r.torn_bytes > 0 && r.damaged_bytes > 0, "{r:?}");
        assert_eq!(keys(&ib), vec![k(2), k(3)]);
    }

    #[test]
    fn aborts_survive_restarts_and_compaction_whoever_counts_them() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        hold(&mut ib, 1);
        hold(&mut ib, 2);
        assert_eq!(ib.count_abort(&k(1)).unwrap(), Some(1));
        assert_eq!(ib.count_abort(&k(9)).unwrap(), None, "not held");
        ib.sync().unwrap();
        // The panic hook's count, written beside the open inbox as the
        // process ends.
        ib.abort_log().count(&k(2)).unwrap();
        drop(ib);
        // Opening compacts: the counts are written again with the alarms.
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(ib.count_abort(&k(1)).unwrap(), Some(2));
        ib.sync().unwrap();
        ib.abort_log().count(&k(9)).unwrap();
        drop(ib);
        let (ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        let aborts: Vec<(Key, u32)> = ib.held().map(|h| (h.key, h.aborts)).collect();
        assert_eq!(aborts, vec![(k(1), POISON_AFTER), (k(2), 1)]);
        // A compaction keeps exactly what the held alarms need.
        assert_eq!(ib.book.live_bytes, ib.size() - journal::FILE_HEADER as u64);
    }

    #[test]
    fn a_damaged_header_costs_no_alarm() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        hold(&mut ib, 1);
        ib.sync().unwrap();
        drop(ib);
        let p = d.path().join("inbox.log");
        let mut b = std::fs::read(&p).unwrap();
        b[..4].copy_from_slice(b"XXXX");
        std::fs::write(&p, &b).unwrap();
        let (ib, r) = Inbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!((r.pending, r.damaged_bytes), (1, 8));
        assert_eq!(keys(&ib), vec![k(1)]);
        assert!(
            std::fs::read(&p).unwrap().starts_with(FILE_MAGIC),
            "rewritten clean"
        );
    }

    // A reopen that failed right after a compaction's rename left
    // the inbox appending to the replaced, unlinked file, and the alarms
    // written there were acknowledged and lost.
    #[test]
    fn an_alarm_accepted_after_a_failed_reopen_is_on_disk_or_refused() {
        let d = tempfile::tempdir().unwrap();
        let (mut ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        for i in 1..=3 {
            hold(&mut ib, i);
        }
        ib.sync().unwrap();
        ib.done(&k(1)).unwrap();
        crate::fault::disk::fail("inbox reopen", nix::errno::Errno::EIO);
        assert!(ib.compact().is_err(), "the reopen failed");
        let mut accepted = vec![k(2), k(3)];
        for i in 4..=5 {
            if ib.append(k(i), "t/alarm/E", b"{}").is_ok() {
                accepted.push(k(i));
            }
        }
        let _ = ib.count_abort(&k(2));
        crate::fault::disk::heal();
        // The disk works again: the next alarm opens the file anew.
        hold(&mut ib, 6);
        accepted.push(k(6));
        ib.sync().unwrap();
        drop(ib);
        let (ib, _) = Inbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(keys(&ib), accepted, "an accepted alarm was lost");
    }

    // The bound config validation puts on `inbox.max_bytes`: the largest
    // alarm, with the longest topic it is sized for, fits with its attempts.
    #[test]
    fn an_inbox_of_the_least_size_allowed_holds_one_alarm_of_the_largest_size() {
        let d = tempfile::tempdir().unwrap();
        let largest = 1 << 20;
        let least = largest as u64 + crate::config::INBOX_RECORD_ROOM;
        let (mut ib, _) = Inbox::open(d.path(), least).unwrap();
        let topic = "t".repeat(crate::config::ALARM_TOPIC_ROOM);
        ib.append(k(1), &topic, &vec![b'x'; largest]).unwrap();
        for n in 1..=POISON_AFTER + 1 {
            assert_eq!(ib.count_abort(&k(1)).unwrap(), Some(n));
        }
        ib.sync().unwrap();
        assert!(ib.size() <= least, "{} > {least}", ib.size());
    }
}
