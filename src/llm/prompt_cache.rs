//! Saved prompts' KV states, so that an alarm reads only what is new to it:
//! whole recent prompts in RAM (lost at a restart, within their byte
//! budget), and on disk in `state_dir/kv/prompts` prompt prefixes up to a
//! cut (`tokens::Cuts`: the end of the passage block, the start of the
//! alarm's reading), kept across restarts, least recently used first out,
//! within `[llm] prompt_cache_disk_mib`.
//!
//! Owns which saved state best serves a prompt (`best`), and keeping,
//! touching and dropping states in both tiers. Knows nothing about
//! sampling; the KV side (`kv`) makes the llama.cpp calls. A disk state is
//! read into memory, never mapped: a mapped file that is truncated, or whose
//! pages the disk fails to read, raises SIGBUS when touched, which kills the
//! daemon before the file can be removed, on every alarm that reaches it. A
//! read returns the error (or the short length) instead. Nothing reaches
//! llama.cpp unless the container's length, CRC and key check out
//! (`prefix::decode`), since llama.cpp aborts on a state it cannot read. A
//! full or failing disk never fails an alarm: RAM and reading the prompt
//! still work, and the journal says why once.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use llama_cpp_2::token::LlamaToken;

use super::lookup;
use super::prefix::{self, StateKey};
use super::tokens::Cuts;

/// Restoring a saved state copies megabytes; a gain of a few tokens is read
/// faster than that.
const MIN_RESTORE_GAIN: usize = 32;

/// Bytes of prompt states the disk tier may write for alarms in a day, so
/// that the board's eMMC outlives ten years of service. An 8 GB MLC eMMC
/// rated ~3,000 P/E cycles takes ~24 TB of flash writes; at a write
/// amplification of 4 (ext4 journal, the eMMC's own mapping) that is ~6 TB
/// from the host, 1.6 GB a day over ten years for everything the board
/// writes. Prompt states get a quarter: the OS, the journal, the broker's
/// database and the inbox and outbox the rest. One state of a 1.7B-class
/// model (~112 KiB a token at f16) is ~40 MiB: about ten a day. Beyond the
/// budget the alarm is still answered, by reading its prompt.
/// deploy/bench-flash.sh measures what an answered alarm writes.
pub const FLASH_BUDGET_PER_DAY: u64 = 384 << 20;

/// A cut's state is written on its second sight only: most alarms' passage
/// blocks are never seen again, and a state written for one sight is 40 MiB
/// of flash for nothing. The first sight leaves an empty marker (a directory
/// entry, no data) that counts for this long.
const SIGHTING_TTL: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// The disk tier's writes for alarms within `FLASH_BUDGET_PER_DAY`, over
/// days that start at the first write after the last one ended. In memory:
/// a restart starts a new day, and restarts are rare.
#[derive(Debug)]
struct WriteBudget {
    per_day: u64,
    day_started: Option<std::time::Instant>,
    used: u64,
    /// The journal said this day's budget is spent.
    warned: bool,
}

impl WriteBudget {
    const DAY: std::time::Duration = std::time::Duration::from_secs(24 * 3600);

    fn new(per_day: u64) -> Self {
        Self {
            per_day,
            day_started: None,
            used: 0,
            warned: false,
        }
    }

    /// Whether `bytes` more fit today's budget at `now`; if so they count.
    fn take(&mut self, now: std::time::Instant, bytes: u64) -> bool {
        if self
            .day_started
            .is_none_or(|t| now.saturating_duration_since(t) >= Self::DAY)
        {
            self.day_started = Some(now);
            self.used = 0;
            self.warned = false;
        }
        if self.used + bytes > self.per_day {
            return false;
        }
        self.used += bytes;
        true
    }
}

/// A finished job's prompt and the KV state that holds it.
struct SavedPrompt {
    tokens: Vec<LlamaToken>,
    state: Vec<u8>,
}

/// Where a disk tier lives and what it may use.
#[derive(Debug, Clone)]
pub struct DiskSpec {
    /// `state_dir/kv/prompts`.
    pub dir: PathBuf,
    /// Bytes of disk for every slot's states together (0: no disk tier).
    pub limit: u64,
    /// `ModelInfo::key`: the model file and tidewatch release.
    pub model_key: String,
    /// The KV cache's element types, which the state's layout depends on.
    pub kv_type: String,
}

/// The disk tier, once the context's shape is known.
struct Disk {
    dir: PathBuf,
    limit: u64,
    key: StateKey,
    /// The journal said once that the disk fails; later failures go to debug.
    warned: bool,
    /// What alarms' saves may still write today.
    budget: WriteBudget,
}

/// A disk state opened for restoring: the file read, its container
/// checked, the state a slice of what was read.
pub(super) struct DiskFile {
    path: PathBuf,
    bytes: Vec<u8>,
    tokens: Vec<LlamaToken>,
    /// Where llama.cpp's state starts in `bytes`.
    state_at: usize,
}

impl DiskFile {
    pub(super) fn tokens(&self) -> &[LlamaToken] {
        &self.tokens
    }

    /// llama.cpp's sequence state, as read and checked.
    pub(super) fn state(&self) -> Option<&[u8]> {
        self.bytes.get(self.state_at..)
    }
}

/// The state that best serves a prompt, and from where.
pub(super) enum Restore {
    /// The RAM tier's entry at this index.
    Ram(usize),
    Disk(DiskFile),
}

impl Restore {
    pub(super) fn tier(&self) -> &'static str {
        match self {
            Restore::Ram(_) => "ram",
            Restore::Disk(_) => "disk",
        }
    }
}

/// Saved prompt states: RAM oldest first within `limit` bytes, and the disk
/// tier when there is one.
pub(super) struct PromptCache {
    saved: VecDeque<SavedPrompt>,
    bytes: usize,
    limit: usize,
    disk: Option<Disk>,
}

impl PromptCache {
    /// A cache of at most `limit` bytes of states in RAM (0: none is kept)
    /// and, with `disk`, the disk tier for states of contexts of `key`'s
    /// shape.
    pub(super) fn new(limit: usize, disk: Option<(&DiskSpec, prefix::StateShape)>) -> Self {
        let disk = disk.filter(|(d, _)| d.limit > 0).map(|(d, shape)| {
            crate::durable::remove_stale_temps(&d.dir, std::time::Duration::from_secs(3600));
            remove_old_sightings(&d.dir, SIGHTING_TTL);
            Disk {
                dir: d.dir.clone(),
                limit: d.limit,
                key: StateKey::new(&d.model_key, &prefix::state_build(&d.kv_type), shape),
                warned: false,
                budget: WriteBudget::new(FLASH_BUDGET_PER_DAY),
            }
        });
        Self {
            saved: VecDeque::new(),
            bytes: 0,
            limit,
            disk,
        }
    }

    pub(super) fn ram_enabled(&self) -> bool {
        self.limit > 0
    }

    /// The RAM byte budget: a state larger than this is not kept.
    pub(super) fn ram_limit(&self) -> usize {
        self.limit
    }

    /// Empties the RAM tier, and the disk tier's files with `disk_too`.
    pub(super) fn clear(&mut self, disk_too: bool) {
        self.saved.clear();
        self.bytes = 0;
        if let (true, Some(d)) = (disk_too, &self.disk) {
            for (path, _, _) in d.files() {
                let _ = std::fs::remove_file(path);
            }
            remove_old_sightings(&d.dir, std::time::Duration::ZERO);
        }
    }

    /// The saved state sharing the most with `prompt`, when it shares
    /// clearly more than the `current` tokens the cache holds of it. The disk
    /// tier is asked for the prompt up to each of its `cuts` (the alarm's
    /// reading, the passage block), longest first: the prefixes it keeps.
    pub(super) fn best(
        &mut self,
        prompt: &[LlamaToken],
        cuts: Cuts,
        current: usize,
    ) -> Option<Restore> {
        let saved: Vec<&[LlamaToken]> = self.saved.iter().map(|s| s.tokens.as_slice()).collect();
        let ram = lookup::best_saved(prompt, &saved, current, MIN_RESTORE_GAIN);
        let floor = ram.map_or(current + MIN_RESTORE_GAIN, |(_, n)| n + 1);
        let disk = self.disk.as_mut().and_then(|d| {
            cuts.within(prompt.len())
                .filter(|&c| c >= floor)
                .find_map(|c| d.open(&prompt[..c]))
        });
        match (disk, ram) {
            (Some(f), _) => Some(Restore::Disk(f)),
            (None, Some((i, _))) => Some(Restore::Ram(i)),
            (None, None) => None,
        }
    }

    /// The RAM entry `i` (from `best`): its tokens and state.
    pub(super) fn ram_entry(&self, i: usize) -> (&[LlamaToken], &[u8]) {
        let s = &self.saved[i];
        (&s.tokens, &s.state)
    }

    /// A restored state was used: a disk file becomes the most recent.
    pub(super) fn used(&self, r: &Restore) {
        if let Restore::Disk(f) = r {
            touch(&f.path);
        }
    }

    /// A state llama.cpp refused: it is not offered again.
    pub(super) fn forget(&mut self, r: Restore) {
        match r {
            Restore::Ram(i) => {
                if let Some(old) = self.saved.remove(i) {
                    self.bytes -= old.state.len();
                }
            }
            Restore::Disk(f) => {
                let _ = std::fs::remove_file(&f.path);
            }
        }
    }

    /// Keeps `state` for `tokens` as the newest, in place of an older state
    /// of the same tokens, dropping the oldest ones until the budget holds
    /// it. The caller keeps states over the budget out (`ram_limit`).
    pub(super) fn insert_ram(&mut self, tokens: Vec<LlamaToken>, state: Vec<u8>) {
        let size = state.len();
        if let Some(i) = self.saved.iter().position(|s| s.tokens == tokens) {
            if let Some(old) = self.saved.remove(i) {
                self.bytes -= old.state.len();
            }
        }
        while self.bytes + size > self.limit {
            match self.saved.pop_front() {
                Some(old) => self.bytes -= old.state.len(),
                None => break,
            }
        }
        self.bytes += size;
        self.saved.push_back(SavedPrompt { tokens, state });
    }

    /// Whether the disk tier would keep a state of `tokens`: it has one and
    /// has no file of them yet.
    pub(super) fn disk_wants(&self, tokens: &[LlamaToken]) -> bool {
        self.disk
            .as_ref()
            .is_some_and(|d| !d.path_of(tokens).exists())
    }

    /// Whether an alarm's save should write the state of `tokens` now: the
    /// tier has no file of them and they were seen before (their second
    /// sight); a first sight is only noted.
    pub(super) fn disk_wants_again(&mut self, tokens: &[LlamaToken]) -> bool {
        let Some(d) = self.disk.as_mut() else {
            return false;
        };
        let path = d.path_of(tokens);
        if path.exists() {
            return false;
        }
        if sighting(&path).exists() {
            return true;
        }
        if let Err(e) = std::fs::create_dir_all(&d.dir).and_then(|()| note_sighting(&path)) {
            d.failed(&e);
        }
        false
    }

    /// Whether an alarm's save of `tokens` (`state` bytes) fits today's
    /// flash budget; if so it counts against it.
    pub(super) fn disk_budget_takes(&mut self, tokens: &[LlamaToken], state: usize) -> bool {
        let Some(d) = self.disk.as_mut() else {
            return false;
        };
        let bytes = prefix::encoded_len(tokens.len(), state) as u64;
        if d.budget.take(std::time::Instant::now(), bytes) {
            return true;
        }
        if !std::mem::replace(&mut d.budget.warned, true) {
            tracing::info!(
                budget_mib = FLASH_BUDGET_PER_DAY >> 20,
                "the day's flash budget for prompt states is spent; states are kept in RAM only until it renews"
            );
        }
        false
    }

    /// Whether there is a disk tier.
    pub(super) fn disk_enabled(&self) -> bool {
        self.disk.is_some()
    }

    /// Whether a state of `tokens` (`state` bytes) fits the disk tier's
    /// bound beside what it holds, without evicting anything.
    pub(super) fn disk_fits(&self, tokens: &[LlamaToken], state: usize) -> bool {
        self.disk.as_ref().is_some_and(|d| {
            let used: u64 = d.files().iter().map(|f| f.1).sum();
            let need = prefix::encoded_len(tokens.len(), state) as u64;
            used + need <= d.limit
        })
    }

    /// Writes the state of `tokens` to the disk tier and makes room for it;
    /// the file's size when it was written.
    pub(super) fn insert_disk(
        &mut self,
        tokens: &[LlamaToken],
        state: &[u8],
        slot: usize,
    ) -> Option<usize> {
        let d = self.disk.as_mut()?;
        let bytes = prefix::encode(&d.key, tokens, state);
        if bytes.len() as u64 > d.limit {
            return None;
        }
        let path = d.path_of(tokens);
        let t0 = std::time::Instant::now();
        match std::fs::create_dir_all(&d.dir)
            .and_then(|()| crate::durable::cache_room(&d.dir, bytes.len() as u64))
            .and_then(|()| {
                crate::durable::write_atomic_shared(
                    &path,
                    &bytes,
                    crate::durable::Access::Private,
                    slot,
                )
            }) {
            Ok(()) => {
                tracing::debug!(tokens = tokens.len(), bytes = bytes.len(), ms = t0.elapsed().as_millis() as u64, file = %path.display(), "prompt state saved to disk");
                let _ = std::fs::remove_file(sighting(&path));
                d.evict(&path);
                Some(bytes.len())
            }
            Err(e) => {
                d.failed(&e);
                None
            }
        }
    }

    /// Reading a state for the disk tier failed.
    pub(super) fn disk_failed(&mut self, e: &std::io::Error) {
        if let Some(d) = self.disk.as_mut() {
            d.failed(e);
        }
    }
}

impl Disk {
    /// `block-{model}-{key and tokens}.kv`: a new model file, llama.cpp
    /// build, KV type, context shape or prompt gives a new name.
    fn path_of(&self, tokens: &[LlamaToken]) -> PathBuf {
        let name = self.key.file_name(tokens);
        let name = name.strip_prefix("prefix-").unwrap_or(&name);
        self.dir.join(format!("block-{name}"))
    }

    /// The file of `tokens`, read and checked; a damaged, unreadable or
    /// stale one is removed (it is computed again after this job).
    fn open(&mut self, tokens: &[LlamaToken]) -> Option<DiskFile> {
        use std::io::Read;
        let path = self.path_of(tokens);
        let mut file = std::fs::File::open(&path).ok()?;
        truncate_fault(&path);
        let mut bytes = Vec::new();
        if let Err(e) = file.read_to_end(&mut bytes) {
            // A bad block: written again, the state goes elsewhere.
            tracing::warn!(file = %path.display(), error = %e, "saved prompt state cannot be read; removing it");
            let _ = std::fs::remove_file(&path);
            let _ = note_sighting(&path);
            self.failed(&e);
            return None;
        }
        match prefix::decode(&bytes, &self.key) {
            Ok((saved, state)) if saved == tokens => {
                let state_at = bytes.len() - state.len();
                Some(DiskFile {
                    path,
                    bytes,
                    tokens: saved,
                    state_at,
                })
            }
            Ok(_) => {
                tracing::warn!(file = %path.display(), "saved prompt state holds other tokens; removing it");
                let _ = std::fs::remove_file(&path);
                None
            }
            Err(reason) => {
                tracing::warn!(file = %path.display(), %reason, "saved prompt state does not load; removing it");
                let _ = std::fs::remove_file(&path);
                // It was wanted: this job's save writes it again.
                let _ = note_sighting(&path);
                None
            }
        }
    }

    /// The tier's files with their size and last use.
    fn files(&self) -> Vec<(PathBuf, u64, SystemTime)> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.flatten()
            .filter(|e| {
                let n = e.file_name();
                let n = n.to_string_lossy();
                n.starts_with("block-") && n.ends_with(".kv")
            })
            .filter_map(|e| {
                let m = e.metadata().ok()?;
                Some((e.path(), m.len(), m.modified().ok()?))
            })
            .collect()
    }

    /// Drops the least recently used files until the tier is within its
    /// limit, never `keep` (the state just written).
    fn evict(&mut self, keep: &Path) {
        let mut files = self.files();
        let mut total: u64 = files.iter().map(|f| f.1).sum();
        files.sort_by_key(|f| f.2);
        for (path, size, _) in files {
            if total <= self.limit {
                break;
            }
            if path == keep {
                continue;
            }
            if std::fs::remove_file(&path).is_ok() {
                total -= size;
                tracing::debug!(file = %path.display(), "prompt state evicted from disk");
            }
        }
    }

    fn failed(&mut self, e: &std::io::Error) {
        if self.warned {
            tracing::debug!(dir = %self.dir.display(), error = %e, "prompt state disk tier failed again");
            return;
        }
        self.warned = true;
        tracing::warn!(dir = %self.dir.display(), error = %e, "prompt states cannot be kept on disk; alarms are still answered (from RAM or by reading the prompt)");
    }
}

/// `TIDEWATCH_FAULT=truncate-prompt-state` (tests): the first disk state
/// opened is cut to half its length by another hand, after it was opened and
/// before it is read, as a full disk's or a careless admin's would be.
fn truncate_fault(path: &Path) {
    use std::sync::atomic::{AtomicBool, Ordering};
    static FIRED: AtomicBool = AtomicBool::new(false);
    if crate::fault::spec() != Some("truncate-prompt-state") || FIRED.swap(true, Ordering::SeqCst) {
        return;
    }
    let len = std::fs::metadata(path).map_or(0, |m| m.len());
    let cut = std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|f| f.set_len(len / 2));
    tracing::warn!(file = %path.display(), ok = cut.is_ok(), "fault injection: truncate-prompt-state");
}

/// The marker of a state's first sight: its file's name, `.seen`.
fn sighting(state: &Path) -> PathBuf {
    state.with_extension("seen")
}

/// Notes a first sight of `state`'s tokens. Not fsync'd: a marker lost to a
/// power cut only puts the save off to a later sight.
fn note_sighting(state: &Path) -> std::io::Result<()> {
    std::fs::File::options()
        .write(true)
        .create(true)
        .truncate(false)
        .open(sighting(state))
        .map(drop)
}

/// Removes first-sight markers older than `age` (ZERO: all).
fn remove_old_sightings(dir: &Path, age: std::time::Duration) {
    crate::durable::remove_by_age(dir, "seen", |a| a.is_none_or(|a| a >= age));
}

/// Marks a file as just used: the disk tier evicts by modification time.
fn touch(path: &Path) {
    if let Ok(f) = std::fs::File::options().append(true).open(path) {
        let _ = f.set_modified(SystemTime::now());
    }
}

/// Keeps unit tests of the pure parts close to the code.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::llm::prefix::StateShape;

    fn at_block(n: usize) -> Cuts {
        Cuts {
            block: Some(n),
            alarm: None,
        }
    }

    fn toks(v: &[i32]) -> Vec<LlamaToken> {
        v.iter().map(|&t| LlamaToken(t)).collect()
    }

    fn prompt(first: i32, len: i32) -> Vec<LlamaToken> {
        toks(&(first..first + len).collect::<Vec<_>>())
    }

    const SHAPE: StateShape = StateShape {
        n_ctx: 2048,
        n_batch: 512,
        n_ubatch: 512,
    };

    fn ram_best(c: &mut PromptCache, p: &[LlamaToken], current: usize) -> Option<usize> {
        match c.best(p, Cuts::default(), current) {
            Some(Restore::Ram(i)) => Some(i),
            _ => None,
        }
    }

    fn with_disk(dir: &Path, limit: u64) -> PromptCache {
        let spec = DiskSpec {
            dir: dir.to_path_buf(),
            limit,
            model_key: "aaaaaaaaaaaaaaaaaaaa".into(),
            kv_type: "f16".into(),
        };
        PromptCache::new(0, Some((&spec, SHAPE)))
    }

    #[test]
    fn the_oldest_states_make_room_for_a_new_one() {
        let mut c = PromptCache::new(10, None);
        c.insert_ram(prompt(0, 40), vec![0; 4]);
        c.insert_ram(prompt(100, 40), vec![0; 4]);
        c.insert_ram(prompt(200, 40), vec![0; 4]);
        assert!(
            ram_best(&mut c, &prompt(0, 40), 0).is_none(),
            "the oldest stayed"
        );
        assert!(ram_best(&mut c, &prompt(100, 40), 0).is_some());
        assert!(ram_best(&mut c, &prompt(200, 40), 0).is_some());
        assert_eq!(c.bytes, 8);
    }

    #[test]
    fn a_prompt_saved_again_replaces_its_state() {
        let mut c = PromptCache::new(100, None);
        c.insert_ram(prompt(0, 40), vec![1; 4]);
        c.insert_ram(prompt(0, 40), vec![2; 6]);
        assert_eq!(c.saved.len(), 1);
        assert_eq!(c.bytes, 6);
        let i = ram_best(&mut c, &prompt(0, 40), 0).unwrap();
        assert_eq!(c.ram_entry(i).1[0], 2);
    }

    #[test]
    fn a_state_is_restored_only_for_a_clear_gain() {
        let mut c = PromptCache::new(100, None);
        c.insert_ram(prompt(0, 40), vec![0; 4]);
        // The cache already holds 20 of the 40: a gain of 20 is too small.
        assert!(ram_best(&mut c, &prompt(0, 40), 20).is_none());
        assert!(ram_best(&mut c, &prompt(0, 40), 0).is_some());
    }

    #[test]
    fn a_block_on_disk_is_found_again_by_a_new_cache_and_serves_a_longer_prompt() {
        let d = tempfile::tempdir().unwrap();
        let block = prompt(0, 100);
        with_disk(d.path(), 1 << 20).insert_disk(&block, b"the llama state", 0);
        // A restart: a new cache over the same directory.
        let mut c = with_disk(d.path(), 1 << 20);
        let mut alarm = block.clone();
        alarm.extend(prompt(5000, 30));
        match c.best(&alarm, at_block(100), 10) {
            Some(Restore::Disk(f)) => {
                assert_eq!(f.tokens(), &block[..]);
                assert_eq!(f.state(), Some(&b"the llama state"[..]));
            }
            _ => panic!("the block's state was not found on disk"),
        }
        // Not for a prompt whose block differs, nor when the cache holds it.
        let mut other = prompt(0, 99);
        other.extend(prompt(7000, 31));
        assert!(c.best(&other, at_block(100), 0).is_none());
        assert!(c.best(&alarm, at_block(100), 90).is_none());
    }

    #[test]
    fn the_same_alarm_again_restores_its_own_state_before_its_blocks() {
        let d = tempfile::tempdir().unwrap();
        let block = prompt(0, 100);
        let mut upto_reading = block.clone();
        upto_reading.extend(prompt(5000, 40));
        let mut c = with_disk(d.path(), 1 << 20);
        c.insert_disk(&block, b"block", 0);
        c.insert_disk(&upto_reading, b"alarm", 0);
        let cuts = Cuts {
            block: Some(100),
            alarm: Some(140),
        };
        // Raised again: a new reading after the cut.
        let mut again = upto_reading.clone();
        again.extend(prompt(9000, 12));
        match c.best(&again, cuts, 0) {
            Some(Restore::Disk(f)) => assert_eq!(f.state(), Some(&b"alarm"[..])),
            _ => panic!("the alarm's own state was not found"),
        }
        // Another alarm of the same sections: the block.
        let mut other = block.clone();
        other.extend(prompt(7000, 52));
        match c.best(&other, cuts, 0) {
            Some(Restore::Disk(f)) => assert_eq!(f.state(), Some(&b"block"[..])),
            _ => panic!("the block's state was not found"),
        }
    }

    #[test]
    fn a_damaged_state_file_is_removed_and_not_offered() {
        let d = tempfile::tempdir().unwrap();
        let block = prompt(0, 100);
        let mut c = with_disk(d.path(), 1 << 20);
        c.insert_disk(&block, b"the llama state", 0);
        let path = c.disk.as_ref().unwrap().path_of(&block);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        assert!(c.best(&block, at_block(100), 0).is_none());
        assert!(!path.exists(), "the damaged file stayed");
        assert!(c.disk_wants(&block), "it is not computed again");
    }

    #[test]
    fn a_state_of_another_model_or_kv_type_is_never_offered() {
        let d = tempfile::tempdir().unwrap();
        let block = prompt(0, 100);
        with_disk(d.path(), 1 << 20).insert_disk(&block, b"state", 0);
        let spec = DiskSpec {
            dir: d.path().to_path_buf(),
            limit: 1 << 20,
            model_key: "aaaaaaaaaaaaaaaaaaaa".into(),
            kv_type: "q8_0".into(),
        };
        let mut c = PromptCache::new(0, Some((&spec, SHAPE)));
        assert!(c.best(&block, at_block(100), 0).is_none());
    }

    #[test]
    fn the_least_recently_used_state_leaves_the_disk_first() {
        let d = tempfile::tempdir().unwrap();
        let state = vec![7u8; 1000];
        // Room for two states of ~1.4 KB, not three.
        let mut c = with_disk(d.path(), 3000);
        let (a, b, x) = (prompt(0, 100), prompt(1000, 100), prompt(2000, 100));
        c.insert_disk(&a, &state, 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.insert_disk(&b, &state, 0);
        std::thread::sleep(std::time::Duration::from_millis(20));
        // `a` is used again, so `b` is now the least recently used.
        let r = c.best(&a, at_block(100), 0).unwrap();
        c.used(&r);
        std::thread::sleep(std::time::Duration::from_millis(20));
        c.insert_disk(&x, &state, 0);
        assert!(!c.disk_wants(&a), "the recently used state was evicted");
        assert!(c.disk_wants(&b), "the least recently used state stayed");
        assert!(!c.disk_wants(&x), "the new state was not kept");
    }

    #[test]
    fn a_disk_that_cannot_be_written_fails_no_job() {
        let d = tempfile::tempdir().unwrap();
        // A file where the directory should be: every write fails.
        let blocked = d.path().join("prompts");
        std::fs::write(&blocked, b"").unwrap();
        let mut c = with_disk(&blocked, 1 << 20);
        c.insert_disk(&prompt(0, 100), b"state", 0);
        c.insert_disk(&prompt(0, 100), b"state", 0);
        assert!(c.disk.as_ref().unwrap().warned);
        assert!(c.best(&prompt(0, 100), at_block(100), 0).is_none());
    }

    #[test]
    fn a_first_sight_writes_no_state_and_the_second_does() {
        let d = tempfile::tempdir().unwrap();
        let block = prompt(0, 100);
        let mut c = with_disk(d.path(), 1 << 20);
        assert!(!c.disk_wants_again(&block), "written on its first sight");
        // A restart between the sights: the marker is on disk.
        let mut c = with_disk(d.path(), 1 << 20);
        assert!(
            c.disk_wants_again(&block),
            "not written on its second sight"
        );
        c.insert_disk(&block, b"state", 0);
        assert!(!c.disk_wants_again(&block), "written again while on disk");
        let names: Vec<String> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            names.len(),
            1,
            "the marker stayed beside the state: {names:?}"
        );
    }

    #[test]
    fn a_state_removed_as_damaged_is_written_again_at_its_next_save() {
        let d = tempfile::tempdir().unwrap();
        let block = prompt(0, 100);
        let mut c = with_disk(d.path(), 1 << 20);
        c.insert_disk(&block, b"the llama state", 0);
        let path = c.disk.as_ref().unwrap().path_of(&block);
        std::fs::write(&path, b"TWKV").unwrap();
        assert!(c.best(&block, at_block(100), 0).is_none());
        assert!(c.disk_wants_again(&block));
    }

    #[test]
    fn the_days_flash_budget_stops_writes_and_renews_a_day_later() {
        let t0 = std::time::Instant::now();
        let mut b = WriteBudget::new(100);
        assert!(b.take(t0, 60));
        assert!(b.take(t0 + std::time::Duration::from_secs(3600), 40));
        assert!(!b.take(t0 + std::time::Duration::from_secs(7200), 1));
        assert!(b.take(t0 + WriteBudget::DAY, 100));
        assert!(!b.take(t0 + WriteBudget::DAY, 1));
    }

    /// The budget's arithmetic: ten years of it, written four times over by
    /// the eMMC, is a quarter of what 3,000 cycles of 8 GB allow.
    #[test]
    fn ten_years_of_the_flash_budget_is_a_quarter_of_the_emmcs_endurance() {
        let endurance: u64 = 8_000_000_000 * 3000;
        let ten_years = FLASH_BUDGET_PER_DAY * 4 * 3653;
        assert!(ten_years <= endurance / 4, "{ten_years} of {endurance}");
    }

    #[test]
    fn disk_files_are_private() {
        use std::os::unix::fs::PermissionsExt;
        crate::durable::tests::with_umask(0, || {
            let d = tempfile::tempdir().unwrap();
            let mut c = with_disk(d.path(), 1 << 20);
            c.insert_disk(&prompt(0, 100), b"state", 0);
            let path = c.disk.as_ref().unwrap().path_of(&prompt(0, 100));
            let mode = std::fs::metadata(path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        });
    }
}
