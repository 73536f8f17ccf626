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
//! outgrow `outbox.max_bytes` and whenever nothing is undelivered; delivered
//! answers never take the room new diagnoses need.
//!
//! `Book` is the bookkeeping (what is pending, what was delivered, what a
//! compaction keeps), pure and unit-tested; `Outbox` adds the file I/O.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::delivery::Key;

/// Delivered alarms remembered across restarts.
pub const CACHE_ENTRIES: usize = 4096;

const FILE_MAGIC: &[u8; 4] = b"TWOB";
const FILE_VERSION: u32 = 2;
const FILE_HEADER: usize = 8;
/// Starts every frame. 0xF7 never occurs in UTF-8, so JSON payloads and
/// topics cannot contain it; a false match elsewhere fails its CRC.
const MARKER: [u8; 4] = [0xF7, b'T', b'W', b'R'];
const FRAME_HEADER: usize = 12;
/// Diagnoses are a few KiB; anything claiming more is damage.
const MAX_RECORD: usize = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("outbox {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("outbox {path} is full ({size} of outbox.max_bytes {max} undelivered); diagnosis kept in memory only")]
    Full { path: PathBuf, size: u64, max: u64 },
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
#[derive(Debug, Default, Clone, PartialEq)]
pub struct OpenReport {
    pub records: usize,
    pub pending: usize,
    /// A partial record at the end (power lost mid-write) was cut off.
    pub torn_bytes: u64,
    /// Bytes of damaged records skipped mid-file (the records after them kept).
    pub damaged_bytes: u64,
    /// The file was in the previous format and was rewritten.
    pub upgraded: bool,
}

/// The outbox's bookkeeping, without I/O.
#[derive(Debug, Default)]
pub struct Book {
    next_seq: u64,
    pending: BTreeMap<u64, Entry>,
    delivered: HashSet<Key>,
    delivered_order: VecDeque<Key>,
}

impl Book {
    fn apply(&mut self, r: Rec) {
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
        while self.delivered_order.len() > CACHE_ENTRIES {
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
    file: File,
    size: u64,
    max_bytes: u64,
    book: Book,
}

fn frame(rec: &Rec) -> Vec<u8> {
    let body = postcard::to_allocvec(rec).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + FRAME_HEADER);
    out.extend_from_slice(&MARKER);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The record framed at `at`, and its length, if the frame checks out.
fn frame_at(bytes: &[u8], at: usize) -> Option<(Rec, usize)> {
    if bytes.len() < at + FRAME_HEADER || bytes[at..at + 4] != MARKER {
        return None;
    }
    let len = u32_at(bytes, at + 4) as usize;
    if len > MAX_RECORD {
        return None;
    }
    let body = bytes.get(at + FRAME_HEADER..at + FRAME_HEADER + len)?;
    if crc32fast::hash(body) != u32_at(bytes, at + 8) {
        return None;
    }
    let rec = postcard::from_bytes::<Rec>(body).ok()?;
    Some((rec, FRAME_HEADER + len))
}

/// Frames after the file header. Returns the records, where the last good
/// frame ends (what follows is a torn tail), and the damaged bytes skipped.
fn parse(bytes: &[u8], start: usize) -> (Vec<Rec>, usize, u64) {
    let mut out = Vec::new();
    let mut at = start;
    let mut end = start;
    let mut damaged = 0u64;
    while at < bytes.len() {
        if let Some((rec, n)) = frame_at(bytes, at) {
            out.push(rec);
            at += n;
            end = at;
            continue;
        }
        // Resynchronise on the next frame that checks out.
        let next =
            (at + 1..bytes.len()).find(|&i| bytes[i] == MARKER[0] && frame_at(bytes, i).is_some());
        match next {
            Some(i) => {
                damaged += (i - at) as u64;
                at = i;
            }
            None => break,
        }
    }
    (out, end, damaged)
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
    let mut h = [0u8; FILE_HEADER];
    h[..4].copy_from_slice(FILE_MAGIC);
    h[4..].copy_from_slice(&FILE_VERSION.to_le_bytes());
    h
}

/// Makes a rename or a new file in `dir` survive a power cut: without it the
/// directory entry may still name the old file after a crash.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(test)]
    tests::DIR_SYNCS.with(|s| s.borrow_mut().push(dir.to_path_buf()));
    File::open(dir)?.sync_all()
}

/// How a `put` went: the entry number, and why it is not on disk if it is not.
#[derive(Debug)]
pub struct Stored {
    pub seq: u64,
    pub not_durable: Option<OutboxError>,
}

impl Outbox {
    pub fn open(dir: &Path, max_bytes: u64) -> Result<(Self, OpenReport), OutboxError> {
        let path = dir.join("outbox.log");
        let io = |source| OutboxError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let existed = path.exists();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if !existed {
            sync_dir(dir).map_err(io)?;
        }
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let mut report = OpenReport::default();
        let (recs, rewrite) = if bytes.is_empty() {
            file.write_all(&header()).map_err(io)?;
            file.sync_data().map_err(io)?;
            bytes.extend_from_slice(&header());
            (Vec::new(), false)
        } else if bytes.starts_with(FILE_MAGIC) && bytes.len() >= FILE_HEADER {
            let (recs, end, damaged) = parse(&bytes, FILE_HEADER);
            report.torn_bytes = (bytes.len() - end) as u64;
            report.damaged_bytes = damaged;
            if report.torn_bytes > 0 {
                // Cut the torn tail so new records follow a clean one.
                file.set_len(end as u64).map_err(io)?;
                file.sync_all().map_err(io)?;
                bytes.truncate(end);
            }
            (recs, damaged > 0)
        } else {
            // A damaged file header must not cost the records behind it: a
            // format-1 file has no frame markers, so frames that check out
            // mean format 2.
            let (recs, _, _) = parse(&bytes, 0);
            if recs.is_empty() {
                report.upgraded = true;
                (parse_v1(&bytes), true)
            } else {
                report.damaged_bytes = FILE_HEADER as u64;
                (recs, true)
            }
        };
        file.seek(SeekFrom::End(0)).map_err(io)?;
        let mut ob = Outbox {
            path: path.clone(),
            file,
            size: bytes.len() as u64,
            max_bytes,
            book: Book::default(),
        };
        report.records = recs.len();
        for r in recs {
            ob.book.apply(r);
        }
        report.pending = ob.book.pending.len();
        if rewrite {
            ob.compact()?;
        }
        Ok((ob, report))
    }

    fn append(&mut self, rec: &Rec, sync: bool) -> Result<(), OutboxError> {
        let io = |source| OutboxError::Io {
            path: self.path.clone(),
            source,
        };
        let b = frame(rec);
        self.file.write_all(&b).map_err(io)?;
        if sync {
            self.file.sync_data().map_err(io)?;
        }
        self.size += b.len() as u64;
        Ok(())
    }

    /// Writes a diagnosis and returns its entry number; it is durable once
    /// `sync` returns, which the caller must wait for before publishing it
    /// (one fsync covers a burst of entries: see the daemon's flush). When
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
        };
        let rec = e.record();
        let need = frame(&rec).len() as u64;
        let mut not_durable = None;
        if self.size + need > self.max_bytes {
            if let Err(err) = self.compact() {
                not_durable = Some(err);
            }
        }
        if not_durable.is_none() {
            if self.size + need > self.max_bytes {
                not_durable = Some(OutboxError::Full {
                    path: self.path.clone(),
                    size: self.size,
                    max: self.max_bytes,
                });
            } else if let Err(err) = self.append(&rec, false) {
                not_durable = Some(err);
            } else {
                e.durable = true;
            }
        }
        let seq = e.seq;
        self.book.pending.insert(seq, e);
        Stored { seq, not_durable }
    }

    /// Makes every entry written so far durable.
    pub fn sync(&mut self) -> Result<(), OutboxError> {
        self.file.sync_data().map_err(|source| OutboxError::Io {
            path: self.path.clone(),
            source,
        })
    }

    /// Marks a diagnosis as accepted by the broker. Not fsync'd: losing this
    /// record only means one more delivery of it after a crash.
    pub fn ack(&mut self, seq: u64) -> Result<(), OutboxError> {
        let Some(e) = self.book.pending.get(&seq) else {
            return Ok(());
        };
        let durable = e.durable;
        self.book.apply(Rec::Ack { seq });
        if durable {
            self.append(&Rec::Ack { seq }, false)?;
        }
        if self.book.pending.is_empty() && self.size > self.max_bytes / 2 {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the file with the delivered keys and the undelivered entries.
    pub fn compact(&mut self) -> Result<(), OutboxError> {
        let io = |source| OutboxError::Io {
            path: self.path.clone(),
            source,
        };
        let tmp = self.path.with_extension("tmp");
        let mut out = header().to_vec();
        for r in self.book.compacted() {
            out.extend_from_slice(&frame(&r));
        }
        {
            let mut f = File::create(&tmp).map_err(io)?;
            f.write_all(&out).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        if let Some(dir) = self.path.parent() {
            sync_dir(dir).map_err(io)?;
        }
        self.file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(io)?;
        self.size = out.len() as u64;
        Ok(())
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

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::cell::RefCell;

    thread_local! {
        pub(crate) static DIR_SYNCS: RefCell<Vec<PathBuf>> = const { RefCell::new(Vec::new()) };
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
        let (mut ob, _) = Outbox::open(dir, 1 << 20).unwrap();
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
        let (mut ob, _) = Outbox::open(d.path(), 1 << 20).unwrap();
        let a = put(&mut ob, 1, b"one");
        let b = put(&mut ob, 2, b"two");
        ob.ack(a).unwrap();
        drop(ob);
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
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
        let (mut ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert!(r.torn_bytes > 0);
        assert_eq!(r.damaged_bytes, 0);
        assert_eq!(pending_ids(&ob), vec!["a1", "a2"]);
        // New records append cleanly after the cut.
        put(&mut ob, 4, b"four");
        drop(ob);
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
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
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert!(r.damaged_bytes > 0, "{r:?}");
        assert_eq!(r.torn_bytes, 0, "{r:?}");
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
        drop(ob);
        // The damage was rewritten away.
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
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
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
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
            if let Ok((ob, _)) = Outbox::open(d.path(), 1 << 20) {
                for e in ob.pending() {
                    let i = e.alarm_id.trim_start_matches('a');
                    assert_eq!(e.payload, format!("payload {i}").as_bytes());
                }
            }
        }
    }

    #[test]
    fn delivered_answers_never_fill_the_outbox() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 4096).unwrap();
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
        // And the answers are still remembered, by key, without their payloads.
        assert_eq!(ob.delivered().count(), 50);
    }

    #[test]
    fn undelivered_diagnoses_past_the_bound_are_kept_in_memory_and_still_delivered() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 4096).unwrap();
        let big = vec![b'x'; 1500];
        put(&mut ob, 1, &big);
        put(&mut ob, 2, &big);
        let s = ob.put(key(3), "a3", "t", &big);
        assert!(matches!(s.not_durable, Some(OutboxError::Full { .. })));
        assert_eq!(ob.pending_len(), 3);
        assert!(!ob.get(s.seq).unwrap().durable);
        ob.ack(s.seq).unwrap();
        drop(ob);
        let (ob, _) = Outbox::open(d.path(), 4096).unwrap();
        assert_eq!(pending_ids(&ob), vec!["a1", "a2"]);
    }

    #[test]
    fn compaction_syncs_the_directory_after_the_rename() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 1 << 20).unwrap();
        put(&mut ob, 1, b"x");
        DIR_SYNCS.with(|s| s.borrow_mut().clear());
        ob.compact().unwrap();
        let synced = DIR_SYNCS.with(|s| s.borrow().clone());
        assert_eq!(synced, vec![d.path().to_path_buf()]);
    }

    #[test]
    fn a_format_1_file_is_read_and_rewritten() {
        let d = tempfile::tempdir().unwrap();
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
        std::fs::write(d.path().join("outbox.log"), old).unwrap();
        let (mut ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert!(r.upgraded);
        assert_eq!(pending_ids(&ob), vec!["a2"]);
        assert!(put(&mut ob, 3, b"three") > 2, "sequence numbers continue");
        drop(ob);
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert!(!r.upgraded);
        assert_eq!(pending_ids(&ob), vec!["a2", "a3"]);
    }
}
