//! The hub's side of site notes: the notes journal (`notes::store`) and
//! the live `SiteNotes` the workers read. Part of the hub's task.
//!
//! A feedback checked by `crate::feedback` becomes a note here, appended
//! (fsync'd) before the hub stores it for publishing; only after both is
//! the feedback acknowledged (`delivery` decides when, as for an alarm).
//! After a kill between the two, the broker redelivers the feedback and the
//! note, already in the journal, is not appended twice. Never decides
//! whether a feedback is valid, nor publishes.

use tokio::sync::watch;

use crate::notes::store::{Stamp, Store, StoreError};
use crate::notes::{Note, SiteNotes};

/// Why a note was not kept.
#[derive(Debug, thiserror::Error)]
pub enum NotesError {
    #[error("notes journal unavailable: {0}")]
    Unavailable(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("field ts: note {id:?} already exists with other content (one note per alarm, person and time): send it with its own ts")]
    Clash { id: String },
}

impl NotesError {
    /// Whether sending the same feedback again would meet the same refusal.
    pub fn is_final(&self) -> bool {
        match self {
            NotesError::Unavailable(_) => false,
            NotesError::Clash { .. } => true,
            NotesError::Store(e) => !matches!(e, StoreError::Io { .. }),
        }
    }
}

pub(super) struct Notes {
    /// None when the journal cannot be opened: the daemon still answers
    /// alarms, and refuses feedback with the reason.
    store: Option<Store>,
    /// Why the journal could not be opened, for the refusals.
    unavailable: String,
    /// What the workers read: swapped whole when the journal changes.
    live: watch::Sender<SiteNotes>,
    /// The journal as last read, to notice what `tidewatch notes` changed.
    stamp: Stamp,
}

impl Notes {
    /// Opens the journal in `state_dir` and reads the notes that count;
    /// the receiver is what the pipeline reads them through.
    pub(super) fn open(state_dir: &std::path::Path) -> (Notes, watch::Receiver<SiteNotes>) {
        let (store, site, unavailable) = match Store::open(state_dir) {
            Ok(s) => match s.load() {
                Ok(site) => (Some(s), site, String::new()),
                Err(e) => {
                    tracing::error!(error = %e, "notes journal cannot be read; alarms are answered without site notes, and feedback is refused");
                    (None, SiteNotes::empty(), e.to_string())
                }
            },
            Err(e) => {
                tracing::error!(error = %e, "notes journal cannot be opened; alarms are answered without site notes, and feedback is refused");
                (None, SiteNotes::empty(), e.to_string())
            }
        };
        if !site.is_empty() {
            tracing::info!(notes = site.len(), "site notes loaded");
        }
        let stamp = store.as_ref().map(Store::stamp).unwrap_or_default();
        let (live, rx) = watch::channel(site);
        (
            Notes {
                store,
                unavailable,
                live,
                stamp,
            },
            rx,
        )
    }

    /// Keeps `note`: appended to the journal (fsync'd) unless it is there
    /// already (a feedback redelivered after a kill), and counted at once by
    /// the next alarm.
    pub(super) fn keep(&mut self, note: &Note) -> Result<(), NotesError> {
        let Some(store) = self.store.as_mut() else {
            return Err(NotesError::Unavailable(self.unavailable.clone()));
        };
        // The live notes are the journal as of the last append or tick.
        match self.live.borrow().all().iter().find(|n| n.id == note.id) {
            Some(n) if n == note => return Ok(()),
            Some(_) => {
                return Err(NotesError::Clash {
                    id: note.id.clone(),
                })
            }
            None => {}
        }
        // Present: a feedback redelivered after a kill that came between
        // the append and the acknowledgement, or a note withdrawn since.
        tokio::task::block_in_place(|| store.append(note))?;
        self.reread();
        Ok(())
    }

    /// On the hub's tick: rereads the journal when `tidewatch notes` changed
    /// it (a withdrawal stops counting at once, an import starts).
    pub(super) fn refresh(&mut self) {
        if self
            .store
            .as_ref()
            .is_some_and(|s| s.changed_since(&self.stamp))
        {
            self.reread();
        }
    }

    fn reread(&mut self) {
        let Some(store) = self.store.as_ref() else {
            return;
        };
        self.stamp = store.stamp();
        match tokio::task::block_in_place(|| store.load()) {
            Ok(site) => {
                tracing::info!(notes = site.len(), "site notes reread");
                self.live.send_replace(site);
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot reread the notes journal; the notes read before still count")
            }
        }
    }
}
