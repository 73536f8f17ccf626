//! The outbox: diagnoses that must reach the broker, kept on disk until it
//! acknowledges them, and the cache of recent answers that makes a redelivered
//! alarm cheap.
//!
//! One append-only file in state_dir: records `[len u32][crc32 u32][postcard]`,
//! each either `Put` (a diagnosis to deliver) or `Ack` (the broker has it).
//! Every `Put` is fsync'd before the alarm it answers is acknowledged, so a
//! power cut loses nothing; a torn last record is detected by length/CRC,
//! skipped and cut off. The file is compacted when it holds nothing undelivered.
//! Pure file I/O; no MQTT here.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

/// Answers remembered for redelivered alarms.
pub const CACHE_ENTRIES: usize = 512;

#[derive(Debug, thiserror::Error)]
pub enum OutboxError {
    #[error("outbox {path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "outbox {path} is full ({size} of outbox.max_bytes {max}); diagnosis kept in memory only"
    )]
    Full { path: PathBuf, size: u64, max: u64 },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum Rec {
    Put {
        seq: u64,
        alarm_id: String,
        topic: String,
        payload: Vec<u8>,
    },
    Ack {
        seq: u64,
    },
}

/// A diagnosis waiting for (or already given) delivery.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub seq: u64,
    pub alarm_id: String,
    pub topic: String,
    pub payload: Vec<u8>,
}

impl Entry {
    fn record(&self) -> Rec {
        Rec::Put {
            seq: self.seq,
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
}

pub struct Outbox {
    path: PathBuf,
    file: File,
    size: u64,
    max_bytes: u64,
    next_seq: u64,
    pending: BTreeMap<u64, Entry>,
    answered: HashMap<String, Entry>,
    answered_order: VecDeque<String>,
}

fn frame(rec: &Rec) -> Vec<u8> {
    let body = postcard::to_allocvec(rec).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + 8);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

/// Decodes records from `bytes`; returns them and where the valid prefix ends.
fn parse(bytes: &[u8]) -> (Vec<Rec>, usize) {
    let mut at = 0;
    let mut out = Vec::new();
    while at + 8 <= bytes.len() {
        let len =
            u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]]) as usize;
        let crc = u32::from_le_bytes([bytes[at + 4], bytes[at + 5], bytes[at + 6], bytes[at + 7]]);
        let Some(body) = bytes.get(at + 8..at + 8 + len) else {
            break;
        };
        if crc32fast::hash(body) != crc {
            break;
        }
        match postcard::from_bytes::<Rec>(body) {
            Ok(r) => out.push(r),
            Err(_) => break,
        }
        at += 8 + len;
    }
    (out, at)
}

impl Outbox {
    pub fn open(dir: &Path, max_bytes: u64) -> Result<(Self, OpenReport), OutboxError> {
        let path = dir.join("outbox.log");
        let io = |source| OutboxError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes).map_err(io)?;
        let (recs, valid) = parse(&bytes);
        let torn = (bytes.len() - valid) as u64;
        if torn > 0 {
            // Cut the torn tail so new records follow a clean one.
            file.set_len(valid as u64).map_err(io)?;
            file.sync_all().map_err(io)?;
        }
        file.seek(SeekFrom::End(0)).map_err(io)?;
        let mut ob = Outbox {
            path: path.clone(),
            file,
            size: valid as u64,
            max_bytes,
            next_seq: 1,
            pending: BTreeMap::new(),
            answered: HashMap::new(),
            answered_order: VecDeque::new(),
        };
        let n = recs.len();
        for r in recs {
            ob.apply(r);
        }
        let report = OpenReport {
            records: n,
            pending: ob.pending.len(),
            torn_bytes: torn,
        };
        Ok((ob, report))
    }

    fn apply(&mut self, r: Rec) {
        match r {
            Rec::Put {
                seq,
                alarm_id,
                topic,
                payload,
            } => {
                self.next_seq = self.next_seq.max(seq + 1);
                let e = Entry {
                    seq,
                    alarm_id,
                    topic,
                    payload,
                };
                self.remember(e.clone());
                self.pending.insert(seq, e);
            }
            Rec::Ack { seq } => {
                self.pending.remove(&seq);
            }
        }
    }

    fn remember(&mut self, e: Entry) {
        if self
            .answered
            .insert(e.alarm_id.clone(), e.clone())
            .is_none()
        {
            self.answered_order.push_back(e.alarm_id);
        }
        while self.answered_order.len() > CACHE_ENTRIES {
            if let Some(old) = self.answered_order.pop_front() {
                self.answered.remove(&old);
            }
        }
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

    /// Stores a diagnosis durably (fsync) and returns its sequence number.
    pub fn put(&mut self, alarm_id: &str, topic: &str, payload: &[u8]) -> Result<u64, OutboxError> {
        let seq = self.next_seq;
        let rec = Rec::Put {
            seq,
            alarm_id: alarm_id.to_string(),
            topic: topic.to_string(),
            payload: payload.to_vec(),
        };
        let need = frame(&rec).len() as u64;
        if self.size + need > self.max_bytes {
            self.compact()?;
            if self.size + need > self.max_bytes {
                return Err(OutboxError::Full {
                    path: self.path.clone(),
                    size: self.size,
                    max: self.max_bytes,
                });
            }
        }
        self.append(&rec, true)?;
        self.next_seq += 1;
        self.apply(rec);
        Ok(seq)
    }

    /// Marks a diagnosis as accepted by the broker. Not fsync'd: losing an ack
    /// only means one duplicate delivery after a crash.
    pub fn ack(&mut self, seq: u64) -> Result<(), OutboxError> {
        if self.pending.remove(&seq).is_none() {
            return Ok(());
        }
        self.append(&Rec::Ack { seq }, false)?;
        if self.pending.is_empty() && self.size > self.max_bytes / 2 {
            self.compact()?;
        }
        Ok(())
    }

    /// Rewrites the file with only the undelivered entries and the answer cache.
    pub fn compact(&mut self) -> Result<(), OutboxError> {
        let io = |source| OutboxError::Io {
            path: self.path.clone(),
            source,
        };
        let tmp = self.path.with_extension("tmp");
        let mut out = Vec::new();
        let mut kept: Vec<&Entry> = self
            .answered_order
            .iter()
            .filter_map(|id| self.answered.get(id))
            .collect();
        kept.sort_by_key(|e| e.seq);
        for e in kept {
            out.extend_from_slice(&frame(&e.record()));
            if !self.pending.contains_key(&e.seq) {
                out.extend_from_slice(&frame(&Rec::Ack { seq: e.seq }));
            }
        }
        // Undelivered entries that fell out of the cache must survive too.
        for e in self.pending.values() {
            if self.answered.get(&e.alarm_id).map(|a| a.seq) != Some(e.seq) {
                out.extend_from_slice(&frame(&e.record()));
            }
        }
        {
            let mut f = File::create(&tmp).map_err(io)?;
            f.write_all(&out).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &self.path).map_err(io)?;
        self.file = OpenOptions::new()
            .append(true)
            .read(true)
            .open(&self.path)
            .map_err(io)?;
        self.size = out.len() as u64;
        Ok(())
    }

    /// Undelivered entries, oldest first.
    pub fn pending(&self) -> Vec<Entry> {
        self.pending.values().cloned().collect()
    }

    pub fn first_pending(&self) -> Option<Entry> {
        self.pending.values().next().cloned()
    }

    pub fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The answer already given to an alarm, if it is still remembered.
    pub fn answered(&self, alarm_id: &str) -> Option<&Entry> {
        self.answered.get(alarm_id)
    }

    pub fn size(&self) -> u64 {
        self.size
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An outbox file holding two undelivered entries, a1 then a2.
    fn two_entries(dir: &Path) -> PathBuf {
        let (mut ob, _) = Outbox::open(dir, 1 << 20).unwrap();
        ob.put("a1", "t", b"one").unwrap();
        ob.put("a2", "t", b"two").unwrap();
        dir.join("outbox.log")
    }

    #[test]
    fn entries_survive_reopen_until_acked() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 1 << 20).unwrap();
        let a = ob.put("a1", "t/diagnosis/X", b"one").unwrap();
        let b = ob.put("a2", "t/diagnosis/X", b"two").unwrap();
        ob.ack(a).unwrap();
        drop(ob);
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(r.pending, 1);
        assert_eq!(ob.pending()[0].seq, b);
        assert_eq!(ob.pending()[0].payload, b"two");
        assert_eq!(ob.answered("a1").unwrap().payload, b"one");
    }

    #[test]
    fn torn_last_record_is_cut_off_not_fatal() {
        let d = tempfile::tempdir().unwrap();
        let p = two_entries(d.path());
        let len = std::fs::metadata(&p).unwrap().len();
        let f = OpenOptions::new().write(true).open(&p).unwrap();
        f.set_len(len - 3).unwrap();
        drop(f);
        let (mut ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert!(r.torn_bytes > 0);
        assert_eq!(r.pending, 1);
        assert_eq!(ob.pending()[0].alarm_id, "a1");
        // New records append cleanly after the cut.
        ob.put("a3", "t", b"three").unwrap();
        drop(ob);
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(r.torn_bytes, 0);
        assert_eq!(ob.pending_len(), 2);
    }

    #[test]
    fn flipped_byte_stops_at_the_damaged_record() {
        let d = tempfile::tempdir().unwrap();
        let p = two_entries(d.path());
        let mut b = std::fs::read(&p).unwrap();
        let n = b.len();
        b[n - 2] ^= 0xff;
        std::fs::write(&p, b).unwrap();
        let (ob, r) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert_eq!(r.pending, 1);
        assert!(r.torn_bytes > 0);
        assert_eq!(ob.first_pending().unwrap().alarm_id, "a1");
    }

    #[test]
    fn bound_is_enforced_and_compaction_frees_space() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 4096).unwrap();
        let big = vec![b'x'; 1500];
        let a = ob.put("a1", "t", &big).unwrap();
        ob.put("a2", "t", &big).unwrap();
        assert!(matches!(
            ob.put("a3", "t", &big),
            Err(OutboxError::Full { .. })
        ));
        ob.ack(a).unwrap();
        // a1 is delivered but still cached; the cache is what must give way.
        assert!(ob.size() <= 4096);
    }

    #[test]
    fn sequence_numbers_continue_after_reopen() {
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 1 << 20).unwrap();
        let a = ob.put("a1", "t", b"x").unwrap();
        drop(ob);
        let (mut ob, _) = Outbox::open(d.path(), 1 << 20).unwrap();
        assert!(ob.put("a2", "t", b"y").unwrap() > a);
    }
}
