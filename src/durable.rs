//! Replacing a file so that a crash or a power cut leaves either the old
//! file or the new one whole under its name, never half of one: write a
//! temp file beside it, fsync, rename over it, fsync the directory (without
//! the last step the directory entry may still name the old file after a
//! power cut). The inbox's compactions, the index and the slots' saved
//! prompt-prefix states are written this way; the outbox takes the same
//! steps one by one (it keeps the new file open to append to and can fail
//! each step in its tests) and shares `sync_dir`.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// Who may read a file written here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// The owner only (0600), whatever the umask: alarms, diagnoses and
    /// prompt states are the vessel's business.
    Private,
    /// What the umask allows: a file another user reads, as the daemon's
    /// user reads an index that a package build or an operator wrote.
    Umask,
}

impl Access {
    fn mode(self) -> u32 {
        match self {
            Access::Private => 0o600,
            Access::Umask => 0o666,
        }
    }
}

/// Replaces `path` with `bytes`, durably: `path` with the extension `tmp`
/// is written, fsync'd and renamed over `path`, then the directory is
/// fsync'd. On an error `path` is untouched (or already whole and new, if
/// only the directory fsync failed).
pub fn write_atomic(path: &Path, bytes: &[u8], access: Access) -> std::io::Result<()> {
    write_through(&path.with_extension("tmp"), path, bytes, access)
}

/// `write_atomic` for a file that several writers, in one process or more,
/// may replace at once (prompt states: the slots of one model, the daemon
/// and `tidewatch warm` beside it): writer `writer` of this process goes
/// through a temp file of its own, `path` with the extension
/// `{pid}-{writer}.tmp`, so none removes or renames another's half-written
/// one. A crash leaves `*.tmp` behind; the owner of the directory removes
/// old ones (`remove_stale_temps`).
pub fn write_atomic_shared(
    path: &Path,
    bytes: &[u8],
    access: Access,
    writer: usize,
) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("{}-{writer}.tmp", std::process::id()));
    write_through(&tmp, path, bytes, access)
}

/// Removes `*.tmp` files in `dir` untouched for `age`: what a crash
/// mid-write left (a live writer touches its own within seconds).
pub fn remove_stale_temps(dir: &Path, age: std::time::Duration) {
    remove_by_age(dir, "tmp", |a| a.is_some_and(|a| a > age));
}

/// Removes the files of `dir` named `*.{ext}` whose age since their last
/// change (None when it cannot be read) `stale` calls past.
pub fn remove_by_age(dir: &Path, ext: &str, stale: impl Fn(Option<std::time::Duration>) -> bool) {
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.extension().is_none_or(|x| x != ext) {
            continue;
        }
        let age = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok());
        if stale(age) {
            let _ = std::fs::remove_file(p);
        }
    }
}

fn write_through(tmp: &Path, path: &Path, bytes: &[u8], access: Access) -> std::io::Result<()> {
    // A stale one (a crash mid-write) would keep its mode.
    let _ = std::fs::remove_file(tmp);
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(access.mode())
        .open(tmp)
        .and_then(|mut f| {
            f.write_all(bytes)?;
            f.sync_all()
        })
        .and_then(|()| std::fs::rename(tmp, path));
    if written.is_err() {
        // Half a file on a full disk would hold the space that the inbox
        // and outbox need until the next write of the same file.
        let _ = std::fs::remove_file(tmp);
    }
    written?;
    sync_dir(dir_of(path))
}

/// The share of a filesystem that caches (prompt states) leave free, and
/// the least they leave: the inbox and outbox share the disk, and an alarm's
/// answer matters more than a faster next one.
const CACHE_RESERVE_SHARE: u64 = 10;
const CACHE_RESERVE_MIN: u64 = 64 << 20;

/// Whether a cache file of `len` bytes may be written into `dir`: it must
/// leave [`CACHE_RESERVE_MIN`] and a tenth of the filesystem free.
pub fn cache_room(dir: &Path, len: u64) -> std::io::Result<()> {
    let st = nix::sys::statvfs::statvfs(dir).map_err(std::io::Error::from)?;
    let unit = st.fragment_size() as u64;
    let free = st.blocks_available() as u64 * unit;
    let total = st.blocks() as u64 * unit;
    if leaves_reserve(free, total, len) {
        Ok(())
    } else {
        Err(std::io::Error::other(format!(
            "{} has {} MiB free; a {} MiB cache file would leave less than the reserve kept for the inbox and outbox ({} MiB)",
            dir.display(),
            free >> 20,
            len.div_ceil(1 << 20),
            reserve(total) >> 20
        )))
    }
}

fn reserve(total: u64) -> u64 {
    (total / CACHE_RESERVE_SHARE).max(CACHE_RESERVE_MIN)
}

/// The reserve rule of [`cache_room`], apart from the filesystem.
fn leaves_reserve(free: u64, total: u64, len: u64) -> bool {
    free.checked_sub(len)
        .is_some_and(|left| left >= reserve(total))
}

/// Makes a rename or a new file in `dir` survive a power cut.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// The directory `path` is in; a bare file name is in the current one.
fn dir_of(path: &Path) -> &Path {
    path.parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_cache_file_never_eats_the_reserve() {
        const MIB: u64 = 1 << 20;
        // A 32 GiB card keeps a tenth free; a small one keeps 64 MiB.
        assert!(leaves_reserve(4000 * MIB, 32768 * MIB, 100 * MIB));
        assert!(!leaves_reserve(3300 * MIB, 32768 * MIB, 100 * MIB));
        assert!(leaves_reserve(80 * MIB, 256 * MIB, 10 * MIB));
        assert!(!leaves_reserve(70 * MIB, 256 * MIB, 10 * MIB));
        assert!(!leaves_reserve(5 * MIB, 256 * MIB, 10 * MIB));
    }

    #[test]
    fn a_failed_write_leaves_no_half_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.kv");
        // A directory where the file should go makes the rename fail after
        // the temp file was written.
        std::fs::create_dir(&path).unwrap();
        std::fs::write(path.join("inside"), b"x").unwrap();
        assert!(write_atomic_shared(&path, b"state", Access::Private, 3).is_err());
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            left,
            vec![std::ffi::OsString::from("x.kv")],
            "a temp file was left behind"
        );
    }

    /// Runs `f` with the process umask set to `mask`. The umask is
    /// process-wide, so tests that set it take turns.
    pub(crate) fn with_umask<T>(mask: u32, f: impl FnOnce() -> T) -> T {
        use nix::sys::stat::{umask, Mode};
        static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = TURN.lock().unwrap_or_else(|e| e.into_inner());
        let old = umask(Mode::from_bits_truncate(mask));
        let out = f();
        umask(old);
        out
    }

    fn mode(p: &Path) -> u32 {
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_file_is_replaced_whole_and_no_temp_file_is_left() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f.log");
        write_atomic(&p, b"old", Access::Private).unwrap();
        write_atomic(&p, b"new", Access::Private).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert!(!d.path().join("f.tmp").exists());
    }

    #[test]
    fn private_files_are_private_whatever_the_umask_and_others_follow_it() {
        with_umask(0o022, || {
            let d = tempfile::tempdir().unwrap();
            let (private, shared) = (d.path().join("a.log"), d.path().join("b.twx"));
            // A stale temp file of a wider mode does not lend it its mode.
            std::fs::write(d.path().join("a.tmp"), b"stale").unwrap();
            std::fs::set_permissions(
                d.path().join("a.tmp"),
                std::fs::Permissions::from_mode(0o644),
            )
            .unwrap();
            write_atomic(&private, b"x", Access::Private).unwrap();
            write_atomic(&shared, b"x", Access::Umask).unwrap();
            assert_eq!(mode(&private), 0o600);
            assert_eq!(mode(&shared), 0o644);
        });
    }

    #[test]
    fn writers_of_one_file_go_through_temp_files_of_their_own() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("prefix-a-b.kv");
        // Another writer's half-written temp file is neither used nor removed.
        let other = format!("prefix-a-b.{}-1.tmp", std::process::id());
        std::fs::write(d.path().join(&other), b"half").unwrap();
        write_atomic_shared(&p, b"whole", Access::Private, 0).unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"whole");
        let own = format!("prefix-a-b.{}-0.tmp", std::process::id());
        assert!(!d.path().join(own).exists());
        assert_eq!(std::fs::read(d.path().join(&other)).unwrap(), b"half");
        assert_eq!(mode(&p), 0o600);
    }

    #[test]
    fn a_bare_file_name_is_in_the_current_directory() {
        assert_eq!(dir_of(Path::new("index.twx")), Path::new("."));
        assert_eq!(
            dir_of(Path::new("/var/lib/x/inbox.log")),
            Path::new("/var/lib/x")
        );
    }
}
