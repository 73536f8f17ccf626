//! The outbox: diagnoses that must reach the broker, kept on disk until it
//! acknowledges them, and the alarms already delivered, so that a redelivered
//! alarm is acknowledged without being diagnosed again.
//!
//! One append-only file in state_dir: an 8-byte header, then frames
//! `[marker u32][len u32][crc32 u32][postcard record]`. A record is an
//! `Entry` (a diagnosis to deliver, with the key of the alarm it answers), an
//! `Ack` (the broker has it) or an `Answered` key (written by compaction in
//! place of a delivered entry, so the payload's bytes are freed). Every entry
//! is fsync'd before it is published. On open, a frame that does not check out
//! is skipped by scanning for the next marker: one damaged record mid-file
//! loses that record only; damage with nothing valid after it is a torn tail
//! (power lost mid-write) and is cut off. The file is compacted when it would
//! outgrow `outbox.max_bytes` and that frees a real share of it
//! (`journal::worth_compacting`), and whenever nothing is undelivered; delivered
//! answers never take the room new diagnoses need (at most a quarter of it).
//!
//! A bad disk (full, read-only, failing) never makes the outbox fail to open
//! or lose what it holds: what can be read is delivered, new diagnoses are
//! kept in memory and reported not durable with the reason, and each store
//! first tries a rewrite into a fresh file. Entries count as durable only
//! once `sync` has fsync'd them into the file at the outbox's path and that
//! file's rename into the directory. The file is created 0600.
//!
//! `Book` is the bookkeeping (what is pending, what was delivered, what a
//! compaction keeps), pure and unit-tested; `Outbox` adds the file I/O.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::delivery::Key;
use super::journal::{self, u32_at};

/// Delivered alarms remembered across restarts, at most (see
/// `remembered_within`).
pub const CACHE_ENTRIES: usize = 4096;

/// The delivered alarms' keys get at most this fraction (1/N) of
/// `outbox.max_bytes`, so that the rest is always there for undelivered
/// diagnoses.
const ANSWERED_SHARE: u64 = 4;

const FILE_MAGIC: &[u8; 4] = b"TWOB";
const FILE_VERSION: u32 = 2;
const FILE_HEADER: usize = journal::FILE_HEADER;
/// Starts every frame (see `journal`); the inbox's differs.
const MARKER: [u8; 4] = [0xF7, b'T', b'W', b'R'];

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("outbox {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("outbox directory {path} cannot be synced, so the outbox's last rewrite may not survive a power cut: {source}")]
    DirSync {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("outbox {path} is full: {pending} undelivered diagnoses and the delivered alarms' keys take {size} of outbox.max_bytes {max} bytes; diagnosis kept in memory only")]
    Full {
        path: PathBuf,
        pending: usize,
        size: u64,
        max: u64,
    },
    #[error("outbox {path} could not be read in full and is left as it is; diagnosis kept in memory only")]
    Unread { path: PathBuf },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Rec {
    /// Format 1 (no alarm key); read from old files only.
    Put {
        seq: u64,
        alarm_id: String,
        topic: String,
        payload: Vec<u8>,
    },
    Ack {
        seq: u64,
    },
    Entry {
        seq: u64,
        key: Key,
        alarm_id: String,
        topic: String,
        payload: Vec<u8>,
    },
    Answered {
        key: Key,
    },
}

/// A diagnosis waiting for delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub seq: u64,
    pub key: Key,
    pub alarm_id: String,
    pub topic: String,
    pub payload: Vec<u8>,
    /// On disk; false when the outbox was full or could not be written.
    pub durable: bool,
    /// Its record's size, framed: what a compaction keeps of it.
    pub bytes: u64,
}

impl Entry {
    fn record(&self) -> Rec {
        Rec::Entry {
            seq: self.seq,
            key: self.key,
            alarm_id: self.alarm_id.clone(),
            topic: self.topic.clone(),
            payload: self.payload.clone(),
        }
    }
}

/// What opening found.
#[derive(Debug, Default)]
pub struct OpenReport {
    pub records: usize,
    pub pending: usize,
    /// A partial record at the end (power lost mid-write) was cut off.
    pub torn_bytes: u64,
    /// Bytes of damaged records skipped mid-file (the records after them kept).
    pub damaged_bytes: u64,
    /// The file was in the previous format (rewritten, unless
    /// `not_writable` says why not).
    pub upgraded: bool,
    /// Why new diagnoses cannot go to disk (a read-only, full or failing
    /// disk, an unreadable file): what the outbox held is still delivered,
    /// and every store tries to write again.
    pub not_writable: Option<OutboxError>,
    /// Why damaged records could not be rewritten away (a full disk): the
    /// file is still appended to, and the damage is skipped again at the
    /// next start.
    pub not_rewritten: Option<OutboxError>,
    /// Delivered alarms remembered across restarts (see `remembered_within`).
    pub remembered: usize,
}

/// How many delivered alarms an outbox of `max_bytes` remembers across
/// restarts: the newest whose keys fit in their share of it. All 4096 keys
/// take about 116 KiB; remembering them in a smaller outbox left no room for
/// diagnoses, so every one was kept in memory only.
pub fn remembered_within(max_bytes: u64) -> usize {
    let one = frame(&Rec::Answered { key: Key([0; 16]) }).len() as u64;
    let n = max_bytes.saturating_sub(FILE_HEADER as u64) / ANSWERED_SHARE / one;
    usize::try_from(n).map_or(CACHE_ENTRIES, |n| n.min(CACHE_ENTRIES))
}

/// The outbox's bookkeeping, without I/O.
#[derive(Debug)]
pub struct Book {
    next_seq: u64,
    pending: BTreeMap<u64, Entry>,
    delivered: HashSet<Key>,
    delivered_order: VecDeque<Key>,
    /// How many delivered keys are kept, the newest: see `remembered_within`.
    remembered: usize,
}

impl Book {
    fn new(remembered: usize) -> Self {
        Book {
            next_seq: 0,
            pending: BTreeMap::new(),
            delivered: HashSet::new(),
            delivered_order: VecDeque::new(),
            remembered,
        }
    }

    fn apply(&mut self, r: Rec) {
        let bytes = match &r {
            Rec::Entry { .. } => frame(&r).len() as u64,
            _ => 0,
        };
        match r {
            Rec::Put {
                seq,
                alarm_id,
                topic,
                payload,
            } => {
                // No key was kept in format 1; this one matches no receipt,
                // so its alarm, if redelivered, is answered again.
                let key = Key::of(&topic, alarm_id.as_bytes());
                self.apply(Rec::Entry {
                    seq,
                    key,
                    alarm_id,
                    topic,
                    payload,
                })
            }
            Rec::Entry {
                seq,
                key,
                alarm_id,
                topic,
                payload,
            } => {
                self.next_seq = self.next_seq.max(seq + 1);
                self.pending.insert(
                    seq,
                    Entry {
                        seq,
                        key,
                        alarm_id,
                        topic,
                        payload,
                        durable: true,
                        bytes,
                    },
                );
            }
            Rec::Ack { seq } => {
                if let Some(e) = self.pending.remove(&seq) {
                    self.remember(e.key);
                }
            }
            Rec::Answered { key } => self.remember(key),
        }
    }

    fn remember(&mut self, key: Key) {
        if self.delivered.insert(key) {
            self.delivered_order.push_back(key);
        }
        while self.delivered_order.len() > self.remembered {
            if let Some(old) = self.delivered_order.pop_front() {
                self.delivered.remove(&old);
            }
        }
    }

    fn next_seq(&mut self) -> u64 {
        let s = self.next_seq.max(1);
        self.next_seq = s + 1;
        s
    }

    /// The size of the file `compacted` would write.
    fn compacted_bytes(&self) -> u64 {
        let one = frame(&Rec::Answered { key: Key([0; 16]) }).len() as u64;
        let pending: u64 = self
            .pending
            .values()
            .filter(|e| e.durable)
            .map(|e| e.bytes)
            .sum();
        FILE_HEADER as u64 + one * self.delivered_order.len() as u64 + pending
    }

    /// What a compacted file holds: the delivered keys (small), then the
    /// undelivered entries that are on disk. Memory-only entries stay so.
    fn compacted(&self) -> Vec<Rec> {
        let answered = self
            .delivered_order
            .iter()
            .map(|k| Rec::Answered { key: *k });
        let pending = self
            .pending
            .values()
            .filter(|e| e.durable)
            .map(Entry::record);
        answered.chain(pending).collect()
    }
}

pub struct Outbox {
    path: PathBuf,
    /// Where records are appended: the file at `path`, open for writing.
    /// None while there is no such file this process can trust (a read-only
    /// or full disk, a failed write): stores are then kept in memory, and
    /// each first tries a compaction, which is what makes a fresh file once
    /// the disk takes writes again.
    file: Option<File>,
    /// The last compaction's rename has not been fsync'd into its directory:
    /// a crash may still bring back the old file, so nothing appended to the
    /// new one counts as durable until a directory fsync succeeds.
    unsynced_rename: bool,
    /// Entries were appended since the last fsync: `sync` owes one.
    unsynced_entries: bool,
    /// The file at `path` could not be read in full. It is never replaced,
    /// so records that could not be read stay there for the operator.
    unread: bool,
    /// What opening read is known to be on disk (fsync'd or rewritten at
    /// open): only then may it stand in for the alarms it answers.
    settled: bool,
    size: u64,
    max_bytes: u64,
    book: Book,
}

fn frame(rec: &Rec) -> Vec<u8> {
    journal::frame(&MARKER, rec)
}

/// Format 1: `[len u32][crc32 u32][postcard]` frames from offset 0, no
/// header and no markers; read up to the first bad frame.
fn parse_v1(bytes: &[u8]) -> Vec<Rec> {
    let mut at = 0;
    let mut out = Vec::new();
    while at + 8 <= bytes.len() {
        let len = u32_at(bytes, at) as usize;
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != u32_at(bytes, at + 4) {
            break;
        }
        match postcard::from_bytes::<Rec>(body) {
            Ok(r) => out.push(r),
            Err(_) => break,
        }
        at += 8 + len;
    }
    out
}

fn header() -> [u8; FILE_HEADER] {
    journal::header(FILE_MAGIC, FILE_VERSION)
}

/// Makes a rename or a new file in `dir` survive a power cut: without it the
/// directory entry may still name the old file after a crash.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(test)]
    tests::DIR_SYNCS.with(|s| s.borrow_mut().push(dir.to_path_buf()));
    fault(Step::DirSync)?;
    crate::durable::sync_dir(dir)
}

/// Fsyncs the outbox file's data (a failure counts as a failed write).
fn sync_file(f: &File) -> std::io::Result<()> {
    #[cfg(test)]
    tests::FILE_SYNCS.with(|n| *n.borrow_mut() += 1);
    fault(Step::Write)?;
    f.sync_data()
}

/// The disk operations a unit test can make fail, as a failing disk would
/// (`crate::fault::disk`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Step {
    /// Opening the outbox for writing (a read-only file system).
    Open,
    /// Writing records or a compacted file (a full disk).
    Write,
    /// Renaming a compacted file into place.
    Rename,
    /// Fsyncing the directory after a rename.
    DirSync,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Open => "outbox open",
            Step::Write => "outbox write",
            Step::Rename => "outbox rename",
            Step::DirSync => "outbox dir sync",
        }
    }
}

fn fault(step: Step) -> std::io::Result<()> {
    #[cfg(test)]
    crate::fault::disk::check(step.name())?;
    let _ = step.name();
    Ok(())
}

/// How a `put` went: the entry number, and why it is not on disk if it is not.
#[derive(Debug)]
pub struct Stored {
    pub seq: u64,
    pub not_durable: Option<OutboxError>,
}

impl Outbox {
    /// Opens the outbox in `dir`, creating it if needed. Never fails: a disk
    /// that cannot be written (read-only, full, failing) must not stop the
    /// daemon, or systemd restarts it in a loop and no alarm is answered.
    /// What can be read is kept and delivered; `OpenReport` says what could
    /// not be done and why, and stores are kept in memory until a write
    /// succeeds (each store tries a rewrite first).
    pub fn open(dir: &Path, max_bytes: u64) -> (Self, OpenReport) {
        let remembered = remembered_within(max_bytes);
        let mut ob = Outbox {
            path: dir.join("outbox.log"),
            file: None,
            unsynced_rename: false,
            unsynced_entries: false,
            unread: false,
            settled: false,
            size: 0,
            max_bytes,
            book: Book::new(remembered),
        };
        let mut report = OpenReport {
            remembered,
            ..OpenReport::default()
        };
        let mut bytes = ob.read_existing(dir, &mut report);
        let (recs, rewrite) = ob.records_of(&mut bytes, &mut report);
        ob.size = bytes.len() as u64;
        if let Some(f) = ob.file.as_mut() {
            if let Err(source) = f.seek(SeekFrom::End(0)) {
                ob.file = None;
                report.not_writable = Some(ob.io(source));
            }
        }
        report.records = recs.len();
        for r in recs {
            ob.book.apply(r);
        }
        report.pending = ob.book.pending.len();
        if rewrite || ob.file.is_none() {
            match ob.compact() {
                // The rewrite is fsync'd, and so is its rename.
                Ok(()) => {
                    report.not_writable = None;
                    ob.settled = true;
                }
                Err(err) if ob.writable() => report.not_rewritten = Some(err),
                Err(err) => {
                    report.not_writable.get_or_insert(err);
                }
            }
        }
        if !ob.settled {
            if let Some(f) = ob.file.as_ref() {
                // A crash between `put` and the flush leaves entries in the
                // page cache only; replay must not drop their alarms from
                // the inbox on the strength of them until they are on disk.
                match sync_file(f) {
                    Ok(()) => ob.settled = true,
                    Err(source) => {
                        ob.file = None;
                        report.not_writable = Some(ob.io(source));
                    }
                }
            }
        }
        (ob, report)
    }

    /// The file's bytes: opened for appending (kept as `self.file`), or
    /// read-only when it cannot be written, or none when it does not exist;
    /// why it could not be written or read goes to the report.
    fn read_existing(&mut self, dir: &Path, report: &mut OpenReport) -> Vec<u8> {
        let mut bytes = Vec::new();
        match self.open_writable(dir) {
            Ok(mut f) => match f.read_to_end(&mut bytes) {
                Ok(_) => self.file = Some(f),
                Err(source) => {
                    self.unread = true;
                    report.not_writable = Some(self.io(source));
                }
            },
            Err(err) => {
                report.not_writable = Some(err);
                match File::open(&self.path) {
                    Ok(mut f) => {
                        if let Err(source) = f.read_to_end(&mut bytes) {
                            self.unread = true;
                            report.not_writable = Some(self.io(source));
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(source) => {
                        self.unread = true;
                        report.not_writable = Some(self.io(source));
                    }
                }
            }
        }
        bytes
    }

    /// The records in `bytes` by the file's format, and whether the file
    /// must be rewritten (damage, or another format); a torn tail is cut off
    /// the file and `bytes`, a missing header written.
    fn records_of(&mut self, bytes: &mut Vec<u8>, report: &mut OpenReport) -> (Vec<Rec>, bool) {
        let mut rewrite = false;
        let recs = if bytes.len() < FILE_HEADER {
            // New, or left by a start that could not finish writing its
            // header: no record fits in fewer bytes.
            if let Some(f) = self.file.as_mut() {
                match fresh_header(f) {
                    Ok(()) => *bytes = header().to_vec(),
                    Err(source) => {
                        self.file = None;
                        report.not_writable = Some(self.io(source));
                    }
                }
            }
            Vec::new()
        } else if bytes.starts_with(FILE_MAGIC) {
            let journal::Parsed {
                records: recs,
                end,
                damaged,
            } = journal::parse(&MARKER, bytes, FILE_HEADER);
            report.torn_bytes = (bytes.len() - end) as u64;
            report.damaged_bytes = damaged;
            if report.torn_bytes > 0 {
                // Cut the torn tail so new records follow a clean one.
                if let Some(f) = self.file.as_mut() {
                    if let Err(source) = f.set_len(end as u64).and_then(|()| f.sync_all()) {
                        self.file = None;
                        report.not_writable = Some(self.io(source));
                    }
                }
                bytes.truncate(end);
            }
            rewrite = damaged > 0;
            recs
        } else {
            // Frames appended to a file in another format, or behind a
            // damaged header, would be misread at the next start: only a
            // rewrite makes this file writable.
            self.file = None;
            rewrite = true;
            // A damaged file header must not cost the records behind it: a
            // format-1 file has no frame markers, so frames that check out
            // mean format 2.
            let recs = journal::parse::<Rec>(&MARKER, bytes, 0).records;
            if recs.is_empty() {
                report.upgraded = true;
                parse_v1(bytes)
            } else {
                report.damaged_bytes = FILE_HEADER as u64;
                recs
            }
        };
        (recs, rewrite)
    }

    /// The outbox file, opened (or created) for reading and appending, and
    /// made private: diagnoses name the fleet's equipment and its faults.
    fn open_writable(&self, dir: &Path) -> Result<File, OutboxError> {
        let io = |source| self.io(source);
        std::fs::create_dir_all(dir).map_err(io)?;
        let existed = self.path.exists();
        fault(Step::Open).map_err(io)?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(&self.path)
            .map_err(io)?;
        if existed {
            // One written by an older tidewatch was created 0644; a file
            // system that refuses the change still has a usable outbox.
            if file.metadata().is_ok_and(|m| m.mode() & 0o077 != 0) {
                let _ = file.set_permissions(std::fs::Permissions::from_mode(0o600));
            }
        } else {
            sync_dir(dir).map_err(|source| OutboxError::DirSync {
                path: dir.to_path_buf(),
                source,
            })?;
        }
        Ok(file)
    }

    fn io(&self, source: std::io::Error) -> OutboxError {
        OutboxError::Io {
            path: self.path.clone(),
            source,
        }
    }

    fn append(&mut self, rec: &Rec, sync: bool) -> Result<(), OutboxError> {
        let b = frame(rec);
        let Some(file) = self.file.as_mut() else {
            return Err(self.io(std::io::ErrorKind::NotFound.into()));
        };
        let written = fault(Step::Write)
            .and_then(|()| file.write_all(&b))
            .and_then(|()| if sync { file.sync_data() } else { Ok(()) });
        if let Err(source) = written {
            // After a failed write or fsync, what reached the disk is
            // unknown, and a later fsync may succeed for pages the kernel
            // has dropped: nothing more goes into this file. The next store
            // rewrites the outbox from memory into a fresh one.
            self.file = None;
            return Err(self.io(source));
        }
        self.size += b.len() as u64;
        Ok(())
    }

    /// Writes a diagnosis and returns its entry number; it is durable once
    /// `sync` returns, which the caller must wait for before publishing it
    /// (one fsync covers a burst of entries: see the hub's flush). When
    /// the undelivered diagnoses fill `max_bytes` or the disk fails, the entry
    /// is kept in memory only and `not_durable` says why: it is still
    /// delivered, and its alarm is still only acknowledged after that, so a
    /// crash in between means the broker redelivers the alarm.
    pub fn put(&mut self, key: Key, alarm_id: &str, topic: &str, payload: &[u8]) -> Stored {
        let mut e = Entry {
            seq: self.book.next_seq(),
            key,
            alarm_id: alarm_id.to_string(),
            topic: topic.to_string(),
            payload: payload.to_vec(),
            durable: false,
            bytes: 0,
        };
        let rec = e.record();
        e.bytes = frame(&rec).len() as u64;
        let not_durable = self.store(&rec).err();
        e.durable = not_durable.is_none();
        let seq = e.seq;
        self.book.pending.insert(seq, e);
        Stored { seq, not_durable }
    }

    /// Appends `rec` (fsync'd by the next `sync`), or says why it is not
    /// written.
    fn store(&mut self, rec: &Rec) -> Result<(), OutboxError> {
        self.forget_a_file_not_at_the_path();
        let need = frame(rec).len() as u64;
        // A rewrite that frees little would be done again at the next store:
        // a long ACL denial filling the outbox cost a whole rewrite per
        // diagnosis, and still ended in `Full`.
        let live = self.book.compacted_bytes();
        if self.file.is_none() || journal::worth_compacting(self.size, live, need, self.max_bytes) {
            self.compact()?;
        }
        if self.size + need > self.max_bytes {
            return Err(OutboxError::Full {
                path: self.path.clone(),
                pending: self.book.pending.values().filter(|e| e.durable).count(),
                size: self.size,
                max: self.max_bytes,
            });
        }
        if self.unsynced_rename {
            self.sync_rename()?;
        }
        self.append(rec, false)?;
        self.unsynced_entries = true;
        Ok(())
    }

    /// A write to a file that is no longer at the outbox's path (removed, or
    /// replaced by a rename this process lost track of) would be found by no
    /// later start: such a file is dropped, and the next write rewrites the
    /// outbox from memory.
    fn forget_a_file_not_at_the_path(&mut self) {
        if self
            .file
            .as_ref()
            .is_some_and(|f| !same_file(f, &self.path))
        {
            self.file = None;
        }
    }

    /// Makes every entry written so far durable, or says why they are not.
    pub fn sync(&mut self) -> Result<(), OutboxError> {
        if !self.unsynced_entries && !self.unsynced_rename {
            return Ok(());
        }
        self.forget_a_file_not_at_the_path();
        match self.file.as_mut() {
            Some(f) => {
                if let Err(source) = sync_file(f) {
                    // As after a failed write: what reached the disk is
                    // unknown, and a second fsync may lie.
                    self.file = None;
                    return Err(self.io(source));
                }
            }
            // The file those entries went to failed or is gone; they are
            // still in memory, and a rewrite puts them on disk.
            None => self.compact()?,
        }
        if self.unsynced_rename {
            self.sync_rename()?;
        }
        self.unsynced_entries = false;
        Ok(())
    }

    /// Marks a diagnosis as accepted by the broker. Not fsync'd: losing this
    /// record only means one more delivery of it after a crash.
    pub fn ack(&mut self, seq: u64) -> Result<(), OutboxError> {
        let Some(e) = self.book.pending.get(&seq) else {
            return Ok(());
        };
        let durable = e.durable;
        self.book.apply(Rec::Ack { seq });
        // With no file to append to, the rewrite that makes one records
        // this delivery: it writes what the book holds.
        if self.file.is_none() {
            return Ok(());
        }
        if durable {
            self.append(&Rec::Ack { seq }, false)?;
        }
        if self.book.pending.is_empty() && self.size > self.max_bytes / 2 {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the file with the delivered keys and the undelivered entries
    /// that were on disk, and appends to the new file from then on.
    pub fn compact(&mut self) -> Result<(), OutboxError> {
        if self.unread {
            return Err(OutboxError::Unread {
                path: self.path.clone(),
            });
        }
        let tmp = self.path.with_extension("tmp");
        let mut out = header().to_vec();
        for r in self.book.compacted() {
            out.extend_from_slice(&frame(&r));
        }
        let new = match write_new(&tmp, &out) {
            Ok(f) => f,
            Err(source) => {
                // On a full disk, a partial copy holds the room the next
                // attempt needs.
                let _ = std::fs::remove_file(&tmp);
                return Err(OutboxError::Io { path: tmp, source });
            }
        };
        if let Err(source) = fault(Step::Rename).and_then(|()| std::fs::rename(&tmp, &self.path)) {
            let _ = std::fs::remove_file(&tmp);
            // A failed rename normally changes nothing; if the old file is
            // nevertheless gone from the path, take whichever is there.
            if !self.file.as_ref().is_some_and(|f| same_file(f, &self.path)) {
                self.file = None;
                if same_file(&new, &self.path) {
                    self.adopt(new, out.len() as u64);
                }
            }
            return Err(self.io(source));
        }
        // The path names the new file now: appending to the old handle would
        // write to an unlinked file, and report it durable.
        self.adopt(new, out.len() as u64);
        // Every entry written so far is in the new file, fsync'd.
        self.unsynced_entries = false;
        self.sync_rename()
    }

    /// Appends go to `file`, just renamed into place, from now on.
    fn adopt(&mut self, file: File, size: u64) {
        self.file = Some(file);
        self.size = size;
        self.unsynced_rename = true;
    }

    /// Makes the last rename survive a power cut. Until this succeeds, a
    /// crash may bring back the old file, so no store counts as durable.
    fn sync_rename(&mut self) -> Result<(), OutboxError> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        sync_dir(dir).map_err(|source| OutboxError::DirSync {
            path: dir.to_path_buf(),
            source,
        })?;
        self.unsynced_rename = false;
        Ok(())
    }

    /// Whether the entries read at open are on disk (see `settled`): until
    /// then an alarm they answer stays in the inbox until delivered.
    pub fn settled(&self) -> bool {
        self.settled
    }

    /// False while new diagnoses cannot go to disk for a reason other than
    /// the bound (the disk is read-only, full or failing); each store tries
    /// again.
    pub fn writable(&self) -> bool {
        self.file.is_some() && !self.unsynced_rename
    }

    /// Undelivered entries, oldest first.
    pub fn pending(&self) -> impl Iterator<Item = &Entry> {
        self.book.pending.values()
    }

    pub fn get(&self, seq: u64) -> Option<&Entry> {
        self.book.pending.get(&seq)
    }

    pub fn pending_len(&self) -> usize {
        self.book.pending.len()
    }

    /// Alarms whose diagnosis was delivered, oldest first.
    pub fn delivered(&self) -> impl Iterator<Item = &Key> {
        self.book.delivered_order.iter()
    }

    pub fn size(&self) -> u64 {
        self.size
    }
}

/// Writes a new private file at `path` holding `bytes`, fsync'd, and returns
/// it open for appending.
fn write_new(path: &Path, bytes: &[u8]) -> std::io::Result<File> {
    // A stale one (a crash mid-compaction) would keep its mode and its room.
    let _ = std::fs::remove_file(path);
    fault(Step::Open)?;
    let mut f = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    fault(Step::Write)?;
    f.write_all(bytes)?;
    f.sync_all()?;
    Ok(f)
}

/// Starts an outbox file afresh: just the header, fsync'd.
fn fresh_header(f: &mut File) -> std::io::Result<()> {
    f.set_len(0)?;
    f.seek(SeekFrom::Start(0))?;
    fault(Step::Write)?;
    f.write_all(&header())?;
    f.sync_data()
}

/// Whether `f` is the file `path` names.
fn same_file(f: &File, path: &Path) -> bool {
    match (f.metadata(), std::fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::durable::tests::with_umask;
    use std::cell::RefCell;

    thread_local! {
        pub(super) static DIR_SYNCS: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
        pub(super) static FILE_SYNCS: RefCell<u32> = const { RefCell::new(0) };
    }

    /// Makes `step` fail from now on, with the error a bad disk gives.
    fn fail(step: Step) {
        use nix::errno::Errno;
        let errno = match step {
            Step::Open => Errno::EROFS,
            Step::Write => Errno::ENOSPC,
            Step::Rename | Step::DirSync => Errno::EIO,
        };
        crate::fault::disk::fail(step.name(), errno);
    }

    /// The disk works again.
    fn heal() {
        crate::fault::disk::heal();
    }

    fn open(dir: &Path, max_bytes: u64) -> (Outbox, OpenReport) {
        Outbox::open(dir, max_bytes)
    }

    fn key_n(i: u32) -> Key {
        let mut k = [0u8; 16];
        k[..4].copy_from_slice(&i.to_le_bytes());
        Key(k)
    }

    fn key(i: u8) -> Key {
        Key([i; 16])
    }

    fn put(ob: &mut Outbox, i: u8, payload: &[u8]) -> u64 {
        let s = ob.put(key(i), &format!("a{i}"), "t/diagnosis/X", payload);
        assert!(s.not_durable.is_none(), "{:?}", s.not_durable);
        s.seq
    }

    /// An outbox file holding three undelivered entries, a1 a2 a3.
    fn three_entries(dir: &Path) -> PathBuf {
        let (mut ob, _) = open(dir, 1 << 20);
        for i in 1..=3 {
            put(&mut ob, i, format!("payload {i}").as_bytes());
        }
        dir.join("outbox.log")
    }

    fn pending_ids(ob: &Outbox) -> Vec<String> {
        ob.pending().map(|e| e.alarm_id.clone()).collect()
    }

    #[test]
    fn entries_survive_reopen_until_acked_and_acked_alarms_are_remembered() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 1 << 20);
        let a = put(&mut ob, 1, b"one");
        let b = put(&mut ob, 2, b"two");
        ob.ack(a).unwrap();
        drop(ob);
        let (ob, r) = open(d.path(), 1 << 20);
        assert_eq!(r.pending, 1);
        let p: Vec<&Entry> = ob.pending().collect();
        assert_eq!(
            (p[0].seq, &p[0].payload[..], p[0].key),
            (b, &b"two"[..], key(2))
        );
        assert_eq!(ob.delivered().copied().collect::<Vec<_>>(), vec![key(1)]);
    }

    #[test]
    fn torn_last_record_is_cut_off_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let p = three_entries(d.path());
        let len = std::fs::metadata(&p).unwrap().len();
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f);
        let (mut ob, r) = open(d.path(), 1 << 20);
        assert!(r.torn_bytes > 0);
        assert_eq!(r.damaged_bytes, 0);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2"]);
        // New records append cleanly after the cut.
        put(&mut ob, 4, b"four");
        drop(ob);
        let (ob, r) = open(d.path(), 1 << 20);
        assert_eq!(r.torn_bytes, 0);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2", "a4"]);
    }

    #[test]
    fn a_damaged_record_mid_file_is_skipped_and_the_entries_after_it_are_kept() {
        let d = tempfile::tempdir().unwrap();
        let p = three_entries(d.path());
        let mut b = std::fs::read(&p).unwrap();
        // A byte inside the first entry's payload.
        let at = b.windows(9).position(|w| w == b"payload 1").unwrap();
        b[at] ^= 0xff;
        std::fs::write(&p, b).unwrap();
        let (ob, r) = open(d.path(), 1 << 20);
        assert!(r.damaged_bytes > 0, "{r:?}");
        assert_eq!(r.torn_bytes, 0, "{r:?}");
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
        drop(ob);
        // The damage was rewritten away.
        let (ob, r) = open(d.path(), 1 << 20);
        assert_eq!((r.damaged_bytes, r.torn_bytes), (0, 0));
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
    }

    #[test]
    fn a_damaged_frame_length_does_not_hide_the_records_after_it() {
        let d = tempfile::tempdir().unwrap();
        let p = three_entries(d.path());
        let mut b = std::fs::read(&p).unwrap();
        // The first frame's length field claims far more than the file has.
        b[FILE_HEADER + 7] = 0x7f;
        std::fs::write(&p, b).unwrap();
        let (ob, r) = open(d.path(), 1 << 20);
        assert!(r.damaged_bytes > 0, "{r:?}");
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
    }

    #[test]
    fn random_damage_never_panics_and_never_invents_an_entry() {
        use rand::{Rng, SeedableRng};
        let d = tempfile::tempdir().unwrap();
        let p = three_entries(d.path());
        let clean = std::fs::read(&p).unwrap();
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..300 {
            let mut b = clean.clone();
            for _ in 0..rng.gen_range(1..4) {
                let i = rng.gen_range(0..b.len());
                b[i] = rng.gen();
            }
            if rng.gen_bool(0.3) {
                b.truncate(rng.gen_range(0..b.len()));
            }
            std::fs::write(&p, &b).unwrap();
            let (ob, _) = open(d.path(), 1 << 20);
            for e in ob.pending() {
                let i = e.alarm_id.trim_start_matches('a');
                assert_eq!(e.payload, format!("payload {i}").as_bytes());
            }
        }
    }

    #[test]
    fn delivered_answers_never_fill_the_outbox() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 4096);
        let big = vec![b'x'; 1500];
        for i in 0..50u8 {
            let s = ob.put(key(i), "a", "t", &big);
            assert!(
                s.not_durable.is_none(),
                "diagnosis {i} not stored: {:?}",
                s.not_durable
            );
            ob.ack(s.seq).unwrap();
            assert!(ob.size() <= 4096);
        }
        // And the newest answers are still remembered, by key, without
        // their payloads, as many as fit in their share of the bound.
        let kept: Vec<Key> = ob.delivered().copied().collect();
        assert_eq!(kept.len(), remembered_within(4096).min(50));
        assert_eq!(kept.last(), Some(&key(49)));
    }

    #[test]
    fn undelivered_diagnoses_past_the_bound_are_kept_in_memory_and_still_delivered() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 4096);
        let big = vec![b'x'; 1500];
        put(&mut ob, 1, &big);
        put(&mut ob, 2, &big);
        let s = ob.put(key(3), "a3", "t", &big);
        assert!(matches!(s.not_durable, Some(OutboxError::Full { .. })));
        assert_eq!(ob.pending_len(), 3);
        assert!(!ob.get(s.seq).unwrap().durable);
        ob.ack(s.seq).unwrap();
        drop(ob);
        let (ob, _) = open(d.path(), 4096);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2"]);
    }

    #[test]
    fn what_opening_read_is_fsynced_before_replay_trusts_it() {
        // Entries written by a process that crashed before its flush: in
        // the page cache, not necessarily on the disk.
        let d = tempfile::tempdir().unwrap();
        three_entries(d.path());
        FILE_SYNCS.with(|n| *n.borrow_mut() = 0);
        let (ob, _) = open(d.path(), 1 << 20);
        assert!(
            FILE_SYNCS.with(|n| *n.borrow()) >= 1,
            "the outbox was read and trusted without an fsync"
        );
        assert_eq!(pending_ids(&ob), vec!["a1", "a2", "a3"]);
        assert!(ob.settled());
        drop(ob);
        // An fsync that fails leaves them unsettled, and still delivered.
        fail(Step::Write);
        let (ob, r) = open(d.path(), 1 << 20);
        heal();
        assert!(!ob.settled(), "{r:?}");
        assert_eq!(pending_ids(&ob), vec!["a1", "a2", "a3"]);
    }

    #[test]
    fn a_full_outbox_with_nothing_to_free_is_not_rewritten_for_every_store() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 4096);
        let big = vec![b'x'; 1500];
        put(&mut ob, 1, &big);
        put(&mut ob, 2, &big);
        DIR_SYNCS.with(|s| s.borrow_mut().clear());
        for i in 3..8 {
            let s = ob.put(key(i), "a", "t/diagnosis/X", &big);
            assert!(matches!(s.not_durable, Some(OutboxError::Full { .. })));
        }
        let rewrites = DIR_SYNCS.with(|s| s.borrow().len());
        assert_eq!(rewrites, 0, "a full outbox rewrote itself for nothing");
    }

    #[test]
    fn compaction_syncs_the_directory_after_the_rename() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 1 << 20);
        put(&mut ob, 1, b"x");
        DIR_SYNCS.with(|s| s.borrow_mut().clear());
        ob.compact().unwrap();
        let synced = DIR_SYNCS.with(|s| s.borrow().clone());
        assert_eq!(synced, vec![d.path().to_path_buf()]);
    }

    /// A format-1 outbox: a1 delivered, a2 not.
    fn format_1_file(dir: &Path) {
        let mut old = Vec::new();
        for r in [
            Rec::Put {
                seq: 1,
                alarm_id: "a1".into(),
                topic: "t".into(),
                payload: b"one".to_vec(),
            },
            Rec::Put {
                seq: 2,
                alarm_id: "a2".into(),
                topic: "t".into(),
                payload: b"two".to_vec(),
            },
            Rec::Ack { seq: 1 },
        ] {
            let body = postcard::to_allocvec(&r).unwrap();
            old.extend_from_slice(&(body.len() as u32).to_le_bytes());
            old.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
            old.extend_from_slice(&body);
        }
        std::fs::write(dir.join("outbox.log"), old).unwrap();
    }

    #[test]
    fn a_format_1_file_is_read_and_rewritten() {
        let d = tempfile::tempdir().unwrap();
        format_1_file(d.path());
        let (mut ob, r) = open(d.path(), 1 << 20);
        assert!(r.upgraded);
        assert_eq!(pending_ids(&ob), vec!["a2"]);
        assert!(put(&mut ob, 3, b"three") > 2, "sequence numbers continue");
        drop(ob);
        let (ob, r) = open(d.path(), 1 << 20);
        assert!(!r.upgraded);
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
    }

    #[test]
    fn a_small_outbox_still_stores_diagnoses_after_thousands_of_deliveries() {
        // Issue L6: the delivered-alarm memory alone outgrew outbox.max_bytes
        // and every later diagnosis was kept in memory only.
        let d = tempfile::tempdir().unwrap();
        let max = 8192;
        let (mut ob, _) = open(d.path(), max);
        let payload = vec![b'x'; 400];
        for i in 0..600u32 {
            let s = ob.put(key_n(i), &format!("a{i}"), "t/diagnosis/X", &payload);
            if let Some(e) = &s.not_durable {
                panic!("diagnosis {i} not stored in a {max}-byte outbox: {e}");
            }
            ob.ack(s.seq).unwrap();
            assert!(ob.size() <= max, "outbox grew to {} bytes", ob.size());
        }
        let remembered: Vec<Key> = ob.delivered().copied().collect();
        assert_eq!(remembered.last(), Some(&key_n(599)), "the newest are kept");
        assert!(
            remembered.len() >= 8,
            "only {} remembered",
            remembered.len()
        );
        drop(ob);
        let (ob, _) = open(d.path(), max);
        assert_eq!(ob.delivered().copied().collect::<Vec<_>>(), remembered);
    }

    #[test]
    fn after_a_failed_directory_fsync_stores_go_to_the_file_at_the_outbox_path() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 1 << 20);
        put(&mut ob, 1, b"one");
        fail(Step::DirSync);
        assert!(ob.compact().is_err());
        heal();
        put(&mut ob, 2, b"two");
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(
            pending_ids(&ob),
            vec!["a1", "a2"],
            "a2 was reported durable"
        );
    }

    #[test]
    fn stores_are_not_durable_while_a_compaction_rename_is_not_synced() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 1 << 20);
        put(&mut ob, 1, b"one");
        fail(Step::DirSync);
        assert!(ob.compact().is_err());
        let s = ob.put(key(2), "a2", "t/diagnosis/X", b"two");
        assert!(
            s.not_durable.is_some(),
            "a store after a rename that may not survive a power cut was reported durable"
        );
        assert!(!ob.get(s.seq).unwrap().durable);
        heal();
        put(&mut ob, 3, b"three");
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a1", "a3"]);
    }

    #[test]
    fn a_failed_compaction_keeps_the_old_file_and_leaves_no_temp_file() {
        for step in [Step::Open, Step::Write, Step::Rename] {
            let d = tempfile::tempdir().unwrap();
            let (mut ob, _) = open(d.path(), 1 << 20);
            put(&mut ob, 1, b"one");
            fail(step);
            assert!(ob.compact().is_err(), "{step:?}");
            assert!(
                !d.path().join("outbox.tmp").exists(),
                "a compaction failing at {step:?} left outbox.tmp behind"
            );
            heal();
            put(&mut ob, 2, b"two");
            drop(ob);
            let (ob, _) = open(d.path(), 1 << 20);
            assert_eq!(pending_ids(&ob), vec!["a1", "a2"], "{step:?}");
        }
    }

    #[test]
    fn a_damaged_outbox_on_a_full_disk_opens_and_delivers_what_it_holds() {
        let d = tempfile::tempdir().unwrap();
        let p = three_entries(d.path());
        let mut b = std::fs::read(&p).unwrap();
        let at = b.windows(9).position(|w| w == b"payload 1").unwrap();
        b[at] ^= 0xff;
        std::fs::write(&p, b).unwrap();
        fail(Step::Write);
        let (mut ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
        let s = ob.put(key(4), "a4", "t/diagnosis/X", b"four");
        let why = s
            .not_durable
            .expect("a store on a full disk was reported durable");
        assert!(why.to_string().contains("No space left on device"), "{why}");
        assert_eq!(pending_ids(&ob), vec!["a2", "a3", "a4"]);
        heal();
        put(&mut ob, 5, b"five");
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a2", "a3", "a5"]);
    }

    #[test]
    fn a_format_1_outbox_on_a_full_disk_is_kept_until_it_can_be_rewritten() {
        let d = tempfile::tempdir().unwrap();
        format_1_file(d.path());
        fail(Step::Write);
        let (mut ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a2"]);
        assert!(ob.put(key(3), "a3", "t", b"three").not_durable.is_some());
        drop(ob);
        heal();
        let (mut ob, r) = open(d.path(), 1 << 20);
        assert!(r.upgraded, "the format-1 file was changed: {r:?}");
        assert_eq!(pending_ids(&ob), vec!["a2"]);
        put(&mut ob, 4, b"four");
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a2", "a4"]);
    }

    #[test]
    fn an_outbox_that_cannot_be_written_is_read_and_written_again_once_it_can() {
        let d = tempfile::tempdir().unwrap();
        three_entries(d.path());
        fail(Step::Open);
        let (mut ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2", "a3"]);
        let s = ob.put(key(4), "a4", "t/diagnosis/X", b"four");
        let why = s
            .not_durable
            .expect("a store on a read-only disk was reported durable");
        assert!(why.to_string().contains("Read-only file system"), "{why}");
        ob.ack(1).unwrap();
        heal();
        put(&mut ob, 5, b"five");
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a2", "a3", "a5"]);
        assert_eq!(ob.delivered().copied().collect::<Vec<_>>(), vec![key(1)]);
    }

    #[test]
    fn the_outbox_and_its_compacted_copies_are_readable_by_their_owner_only() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
        with_umask(0, || {
            let d = tempfile::tempdir().unwrap();
            let p = d.path().join("outbox.log");
            let (mut ob, _) = open(d.path(), 1 << 20);
            assert_eq!(mode(&p), 0o600, "new outbox is {:o}", mode(&p));
            put(&mut ob, 1, b"one");
            ob.compact().unwrap();
            assert_eq!(mode(&p), 0o600, "compacted outbox is {:o}", mode(&p));
            drop(ob);
            // One written by an older tidewatch is made private when opened.
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
            let _ = open(d.path(), 1 << 20);
            assert_eq!(mode(&p), 0o600, "reopened outbox is {:o}", mode(&p));
        });
    }

    #[test]
    fn a_failed_fsync_is_reported_and_the_next_sync_puts_the_entries_on_disk() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 1 << 20);
        put(&mut ob, 1, b"one");
        fail(Step::Write);
        assert!(ob.sync().is_err(), "a failed fsync was reported done");
        heal();
        // Not a second fsync of the same file, which may succeed for pages
        // the kernel dropped: the entries are written again from memory.
        ob.sync().unwrap();
        put(&mut ob, 2, b"two");
        ob.sync().unwrap();
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2"]);
    }

    #[test]
    fn a_removed_outbox_file_is_written_again_with_what_it_held() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = open(d.path(), 1 << 20);
        put(&mut ob, 1, b"one");
        std::fs::remove_file(d.path().join("outbox.log")).unwrap();
        put(&mut ob, 2, b"two");
        drop(ob);
        let (ob, _) = open(d.path(), 1 << 20);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2"]);
    }

    #[test]
    fn the_book_remembers_the_newest_delivered_keys_up_to_its_bound_and_compacts_to_them() {
        let mut b = Book::new(3);
        for i in 1..=5 {
            b.apply(Rec::Answered { key: key(i) });
        }
        let kept: Vec<Key> = b.delivered_order.iter().copied().collect();
        assert_eq!(kept, vec![key(3), key(4), key(5)]);
        assert!(!b.delivered.contains(&key(1)));
        let answered = b
            .compacted()
            .into_iter()
            .filter(|r| matches!(r, Rec::Answered { .. }))
            .count();
        assert_eq!(answered, 3);
    }

    #[test]
    fn delivered_keys_take_at_most_a_quarter_of_any_bound() {
        let one = frame(&Rec::Answered { key: key(0) }).len();
        for max in [4096u64, 8192, 64 << 10, 125 << 10, 1 << 20, 16 << 20] {
            let n = remembered_within(max);
            assert!(n > 0, "{max}");
            assert!((n * one) as u64 <= max / 4, "{n} keys in {max} bytes");
        }
        // The figures README.md gives.
        assert_eq!(one, 29);
        assert_eq!(remembered_within(4096), 35, "the smallest bound");
        assert_eq!(remembered_within(16 << 20), CACHE_ENTRIES, "the default");
    }
}
