//! The index in use, replaceable while the daemon runs (`systemctl reload`).
//!
//! Readers take the current `Arc<Index>` once per job and keep it: a swap in
//! the meantime does not change what a running job reads, and the old index
//! is freed when its last job drops it. This module only holds
//! and swaps; opening and judging a new index is the caller's business.

use std::sync::{Arc, RwLock};

use super::Index;

/// A shared, swappable `Arc<Index>`.
pub struct LiveIndex {
    /// A std lock, not a tokio one: it is held only to clone or replace an
    /// `Arc`, never across an await, so readers never wait on a reload's I/O.
    current: RwLock<Arc<Index>>,
}

impl LiveIndex {
    pub fn new(index: Arc<Index>) -> Self {
        Self {
            current: RwLock::new(index),
        }
    }

    /// The index to use for one whole job.
    pub fn current(&self) -> Arc<Index> {
        // A panic while holding the lock can only have happened between two
        // whole `Arc`s, so the value inside is still a valid index.
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Puts `index` in place for the jobs that start from now on; returns the
    /// one it replaces.
    pub fn replace(&self, index: Arc<Index>) -> Arc<Index> {
        let mut g = self.current.write().unwrap_or_else(|e| e.into_inner());
        std::mem::replace(&mut *g, index)
    }
}

#[cfg(test)]
mod tests {
    use super::super::index::build;
    use super::super::knowledge::parse_document;
    use super::super::Query;
    use super::*;

    fn index_of(id: &str, code: &str) -> Arc<Index> {
        let doc = parse_document(
            id,
            &format!("---\ntitle: {id}\nclasses: [main_engine_lube_oil]\ncodes: [{code}]\nlang: en\n---\n# {id}\n## {code} causes\nLube oil pressure low: clogged filter, worn pump.\n"),
        )
        .unwrap();
        Arc::new(Index::from_bytes(build(&[doc]).unwrap()).unwrap())
    }

    fn docs(index: &Index) -> Vec<String> {
        index
            .search(&Query::from_text("lube oil pressure low"), 5)
            .unwrap()
            .into_iter()
            .map(|h| h.doc)
            .collect()
    }

    #[test]
    fn a_job_keeps_the_index_it_started_with_when_a_reload_replaces_it() {
        let live = LiveIndex::new(index_of("old-manual", "ME-LO-PRES-LO"));
        let running_job = live.current();
        let old = live.replace(index_of("new-manual", "ME-LO-PRES-LO"));
        assert_eq!(docs(&old), ["old-manual"]);
        // The job that started before the reload still reads the old index...
        assert_eq!(docs(&running_job), ["old-manual"]);
        // ...and the next one gets the new.
        assert_eq!(docs(&live.current()), ["new-manual"]);
    }

    #[test]
    fn a_replaced_index_is_freed_once_its_last_job_ends() {
        let live = LiveIndex::new(index_of("old-manual", "ME-LO-PRES-LO"));
        let running_job = live.current();
        let weak = Arc::downgrade(&running_job);
        drop(live.replace(index_of("new-manual", "ME-LO-PRES-LO")));
        assert!(weak.upgrade().is_some(), "freed under a running job");
        drop(running_job);
        assert!(weak.upgrade().is_none(), "kept after its last job");
    }
}
