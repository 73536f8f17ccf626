//! Index reload (`systemctl reload`): on each trigger, reopen
//! `[knowledge] index` and put it in the `LiveIndex` for the jobs that start
//! from then on, or refuse it, naming the file and the reason, and keep the
//! index in use.
//!
//! It never listens for signals (`main` does and pulls the trigger) and never
//! touches a job in progress: a job holds the `Arc<Index>` it started with.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::systemd::Notifier;
use crate::retrieval::{Index, IndexError, LiveIndex};

/// What a reload needs.
pub struct Reloader {
    /// Reread by path on every reload: the daemon holds a copy of the index,
    /// so the file can be replaced (by rename or in place) at any time.
    pub path: PathBuf,
    pub index: Arc<LiveIndex>,
    pub notifier: Arc<Notifier>,
    /// `knowledge.plant_codes`: checked at start against the index; a reload
    /// whose manuals lack a mapped code says so (the alarms under it are then
    /// judged by their words).
    pub plant_codes: std::collections::BTreeMap<String, String>,
    /// `knowledge.kind_aliases`: checked at start against the index; a
    /// reload whose manuals lack an aliased class says so (the kinds under
    /// it are then read as the plant wrote them).
    pub kind_aliases: std::collections::BTreeMap<String, String>,
}

/// What a reload did.
#[derive(Debug)]
pub enum Outcome {
    Applied {
        passages: u32,
        docs: usize,
    },
    /// The index in use stays: a bad file must not take retrieval down.
    Refused(IndexError),
}

/// Opens `path` and, only if it is a sound index, makes it the current one.
/// Blocking: opening checks the whole file's checksum.
pub fn reload(path: &Path, live: &LiveIndex) -> Outcome {
    match Index::open(path) {
        Ok(index) => {
            let (passages, docs) = (index.n_passages(), index.n_docs());
            live.replace(Arc::new(index));
            Outcome::Applied { passages, docs }
        }
        Err(e) => Outcome::Refused(e),
    }
}

/// Reloads on every `trigger` until `cancel`. Triggers that arrive during a
/// reload coalesce into one more reload, which then sees the latest file.
pub async fn run(r: Reloader, trigger: Arc<Notify>, cancel: CancellationToken) {
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = trigger.notified() => {}
        }
        let shown = r.path.display().to_string();
        r.notifier.reloading();
        r.notifier.status(&format!("reloading index {shown}"));
        let (path, live) = (r.path.clone(), r.index.clone());
        let outcome = tokio::select! {
            // Shutting down: STOPPING=1 has been or is about to be sent, and
            // no READY=1 may follow it.
            _ = cancel.cancelled() => return,
            o = tokio::task::spawn_blocking(move || reload(&path, &live)) => o,
        };
        match outcome {
            Ok(Outcome::Applied { passages, docs }) => {
                tracing::info!(index = %shown, passages, docs, "index reloaded; new jobs use it");
                let index = r.index.current();
                for (plant, manual) in r.plant_codes.iter().filter(|(_, m)| !index.has_code(m)) {
                    tracing::warn!(plant = %plant, manual = %manual, "config key knowledge.plant_codes: {plant} = {manual}: the reloaded manuals have no such code; alarms under {plant} are judged by their words until it is mapped again");
                }
                for (kind, class) in r
                    .kind_aliases
                    .iter()
                    .filter(|(_, c)| index.docs_of_class(c).is_empty())
                {
                    tracing::warn!(kind = %kind, class = %class, "config key knowledge.kind_aliases: {kind:?} = {class}: the reloaded manuals have no such class; alarms of kind {kind:?} are read as the plant wrote them until it is mapped again");
                }
                r.notifier
                    .status(&format!("index reloaded: {passages} passages from {shown}"));
            }
            Ok(Outcome::Refused(e)) => {
                tracing::error!(index = %shown, error = %e, "index reload refused; the previous index stays in use");
                r.notifier
                    .status(&format!("index reload refused, previous index kept: {e}"));
            }
            Err(e) => {
                tracing::error!(index = %shown, error = %e, "index reload refused (the check did not finish); the previous index stays in use");
                r.notifier
                    .status(&format!("index reload refused, previous index kept: {e}"));
            }
        }
        // Refused or not, the reload is over: without READY=1 systemd would
        // show the unit "reloading" until its timeout.
        r.notifier.reloaded();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live_index(dir: &Path) -> (PathBuf, LiveIndex) {
        let knowledge = dir.join("knowledge");
        std::fs::create_dir_all(&knowledge).unwrap();
        std::fs::write(
            knowledge.join("lube-en.md"),
            "---\ntitle: lube\nclasses: [main_engine_lube_oil]\ncodes: [ME-LO-PRES-LO]\nlang: en\n---\n# lube\n## ME-LO-PRES-LO causes\nLube oil pressure low: clogged filter.\n",
        )
        .unwrap();
        let path = dir.join("knowledge.twx");
        crate::retrieval::build_file(&knowledge, &path).unwrap();
        let live = LiveIndex::new(Arc::new(Index::open(&path).unwrap()));
        (path, live)
    }

    fn refusal(o: Outcome) -> String {
        match o {
            Outcome::Refused(e) => e.to_string(),
            Outcome::Applied { .. } => panic!("a bad index was applied"),
        }
    }

    #[test]
    fn a_damaged_index_is_refused_by_name_and_the_old_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (path, live) = live_index(dir.path());
        let before = live.current();
        std::fs::write(dir.path().join("bad"), b"garbage, not an index").unwrap();
        std::fs::rename(dir.path().join("bad"), &path).unwrap();
        let why = refusal(reload(&path, &live));
        assert!(why.contains(&path.display().to_string()), "{why}");
        assert!(why.contains("not a tidewatch index"), "{why}");
        assert!(Arc::ptr_eq(&before, &live.current()));
    }

    #[test]
    fn a_missing_index_is_refused_by_name_and_the_old_one_kept() {
        let dir = tempfile::tempdir().unwrap();
        let (path, live) = live_index(dir.path());
        let before = live.current();
        std::fs::remove_file(&path).unwrap();
        let why = refusal(reload(&path, &live));
        assert!(why.contains(&path.display().to_string()), "{why}");
        assert!(Arc::ptr_eq(&before, &live.current()));
        // The old index outlives its file.
        assert_eq!(before.n_passages(), live.current().n_passages());
    }

    #[test]
    fn a_sound_index_replaces_the_one_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (path, live) = live_index(dir.path());
        let before = live.current();
        crate::retrieval::build_file(&dir.path().join("knowledge"), &path).unwrap();
        match reload(&path, &live) {
            Outcome::Applied { docs, .. } => assert_eq!(docs, 1),
            Outcome::Refused(e) => panic!("{e}"),
        }
        assert!(!Arc::ptr_eq(&before, &live.current()));
    }
}
