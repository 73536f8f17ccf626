//! The on-disk framing shared by tidewatch's append-only journals (the inbox
//! today): a file header naming the format, then CRC-checked frames, and the
//! recovery rules that make a power cut or a bad sector cost the least.
//!
//! A file is `[magic 4][version u32]`, then frames
//! `[marker u32][len u32][crc32 u32][postcard record]`; each journal has its
//! own marker (the inbox's and the outbox's differ), whose first byte, 0xF7,
//! never occurs in UTF-8, so JSON payloads and topics cannot contain it and a
//! false match elsewhere fails its CRC. Reading skips a frame
//! that does not check out by scanning for the next marker, so one damaged
//! record mid-file loses that record only; damage with nothing valid after it
//! is a torn tail (power lost mid-write), which the caller cuts off. Nothing
//! here decides what the records mean.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

pub const FILE_HEADER: usize = 8;
pub const FRAME_HEADER: usize = 12;
/// Records are alarms and diagnoses of a few KiB; anything claiming more is damage.
const MAX_RECORD: usize = 16 << 20;

/// The 8-byte header of a journal with `magic` at `version`.
pub fn header(magic: &[u8; 4], version: u32) -> [u8; FILE_HEADER] {
    let mut h = [0u8; FILE_HEADER];
    h[..4].copy_from_slice(magic);
    h[4..].copy_from_slice(&version.to_le_bytes());
    h
}

/// One record, framed for appending.
pub fn frame<T: Serialize>(marker: &[u8; 4], rec: &T) -> Vec<u8> {
    let body = postcard::to_allocvec(rec).unwrap_or_default();
    let mut out = Vec::with_capacity(body.len() + FRAME_HEADER);
    out.extend_from_slice(marker);
    out.extend_from_slice(&(body.len() as u32).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
    out.extend_from_slice(&body);
    out
}

pub fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// The record framed at `at`, and its length, if the frame checks out.
fn frame_at<T: DeserializeOwned>(marker: &[u8; 4], bytes: &[u8], at: usize) -> Option<(T, usize)> {
    if bytes.len() < at + FRAME_HEADER || bytes[at..at + 4] != *marker {
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
    let rec = postcard::from_bytes::<T>(body).ok()?;
    Some((rec, FRAME_HEADER + len))
}

/// What reading a journal found.
#[derive(Debug)]
pub struct Parsed<T> {
    pub records: Vec<T>,
    /// Where the last good frame ends: what follows is a torn tail.
    pub end: usize,
    /// Bytes of damaged frames skipped between good ones.
    pub damaged: u64,
}

/// Frames with `marker` from `start` on.
pub fn parse<T: DeserializeOwned>(marker: &[u8; 4], bytes: &[u8], start: usize) -> Parsed<T> {
    let mut records = Vec::new();
    let mut at = start;
    let mut end = start;
    let mut damaged = 0u64;
    while at < bytes.len() {
        if let Some((rec, n)) = frame_at(marker, bytes, at) {
            records.push(rec);
            at += n;
            end = at;
            continue;
        }
        // Resynchronise on the next frame that checks out.
        let next = (at + 1..bytes.len())
            .find(|&i| bytes[i] == marker[0] && frame_at::<T>(marker, bytes, i).is_some());
        match next {
            Some(i) => {
                damaged += (i - at) as u64;
                at = i;
            }
            None => break,
        }
    }
    Parsed {
        records,
        end,
        damaged,
    }
}

/// The share of its bound (1/N) a compaction must free to be worth it.
const COMPACT_SHARE: u64 = 4;

/// Whether to rewrite a journal of `size` bytes, `live` of which a rewrite
/// keeps, for an append of `need` bytes that would take it past `max`: only
/// when that frees a real share of the bound (and room for the append).
/// Freeing less would rewrite the whole file again a few appends later: a
/// full journal would rewrite itself on nearly every write, megabytes of
/// flash per alarm, in the task that takes alarms in.
pub fn worth_compacting(size: u64, live: u64, need: u64, max: u64) -> bool {
    let freed = size.saturating_sub(live);
    size + need > max && freed >= need.max(max / COMPACT_SHARE)
}

/// Opens (creating, 0600: alarms and diagnoses are the vessel's business)
/// a journal file for reading and appending.
pub fn open_rw(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .read(true)
        .append(true)
        .create(true)
        .mode(0o600)
        .open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
    struct R(u32, String);

    const M: [u8; 4] = [0xF7, b'T', b'S', b'T'];

    fn file(recs: &[R]) -> Vec<u8> {
        let mut b = header(b"TEST", 1).to_vec();
        for r in recs {
            b.extend_from_slice(&frame(&M, r));
        }
        b
    }

    #[test]
    fn a_damaged_frame_mid_file_costs_that_record_only() {
        let mut b = file(&[R(1, "a".into()), R(2, "b".into()), R(3, "c".into())]);
        let second = FILE_HEADER + frame(&M, &R(1, "a".into())).len();
        b[second + FRAME_HEADER] ^= 0xff;
        let p: Parsed<R> = parse(&M, &b, FILE_HEADER);
        assert_eq!(p.records, vec![R(1, "a".into()), R(3, "c".into())]);
        assert!(p.damaged > 0);
        assert_eq!(p.end, b.len());
    }

    #[test]
    fn a_torn_tail_ends_the_records_where_the_last_good_frame_ends() {
        let b = file(&[R(1, "a".into()), R(2, "b".into())]);
        let cut = &b[..b.len() - 2];
        let p: Parsed<R> = parse(&M, cut, FILE_HEADER);
        assert_eq!(p.records, vec![R(1, "a".into())]);
        assert_eq!(p.end, FILE_HEADER + frame(&M, &R(1, "a".into())).len());
        assert_eq!(p.damaged, 0);
    }

    #[test]
    fn a_journal_is_compacted_only_when_that_frees_a_real_share_of_it() {
        let max = 1000;
        assert!(!worth_compacting(500, 100, 50, max), "not full");
        assert!(!worth_compacting(990, 900, 50, max), "frees 90 of 1000");
        assert!(worth_compacting(990, 740, 50, max), "frees a quarter");
        assert!(
            !worth_compacting(990, 740, 300, max),
            "frees less than the append needs"
        );
        assert!(worth_compacting(1000, 8, 50, max), "all dead");
    }

    #[test]
    fn files_are_created_private_whatever_the_umask() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("j.log");
        drop(open_rw(&p).unwrap());
        let q = d.path().join("k.log");
        // How a journal is rewritten whole (the inbox's compaction).
        crate::durable::write_atomic(&q, b"x", crate::durable::Access::Private).unwrap();
        for f in [p, q] {
            let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}", f.display());
        }
    }
}
