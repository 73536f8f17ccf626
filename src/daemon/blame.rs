//! Who is to blame when tidewatch aborts. An alarm whose handling aborts the
//! daemon every time (a poison alarm) must not go to the model for ever, but
//! an abort says nothing about an alarm that merely happened to be on a slot
//! at the time. So an abort counts only against the alarm whose handling
//! raised it:
//! - a panic: the job of the slot whose thread or worker task panicked, or
//!   the alarm the hub was triaging (`triaging`);
//! - a slot the watchdog gave up on: the job it was running (the worker
//!   reports it, see `FromWorker::SlotLost`).
//!
//! The panic hook writes the count, fsync'd, before the process ends
//! (`crash::before_abort`); nothing is counted ahead of time. A SIGKILL, the
//! OOM killer, a power cut or systemd's watchdog runs no code of ours, and
//! so blames no alarm: another slot's job, or a job merged with the one that
//! panicked, keeps its count.
//!
//! Owns the table of what each slot works on; never decides what becomes of
//! a blamed alarm (`hub::replay` does).

use std::cell::RefCell;
use std::sync::{Arc, Mutex};

use super::delivery::Key;
use super::inbox::AbortLog;

thread_local! {
    /// The alarm the hub is triaging on this thread, if any.
    static TRIAGING: RefCell<Option<Culprit>> = const { RefCell::new(None) };
}

/// An alarm whose handling may abort the daemon.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Culprit {
    pub key: Key,
    /// For the log only.
    pub alarm_id: String,
}

impl std::fmt::Debug for Culprit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.alarm_id)
    }
}

/// What each slot works on: the alarm whose text its job holds.
#[derive(Debug, Default)]
pub(super) struct Blame {
    /// Index: slot id. Set before the job's text is read, so a panic on it
    /// finds it here.
    busy: Mutex<Vec<Option<Culprit>>>,
}

impl Blame {
    /// Slot `slot` now works on this alarm (None: on nothing).
    pub(super) fn working(&self, slot: usize, alarm: Option<Culprit>) {
        let mut busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        if busy.len() <= slot {
            busy.resize(slot + 1, None);
        }
        busy[slot] = alarm;
    }

    /// The alarm whose handling the calling thread (or task) is in, if any.
    fn culprit(&self) -> Option<Culprit> {
        // try_borrow: the hook must not panic, even in `triaging` itself.
        if let Some(c) = TRIAGING.with(|t| t.try_borrow().ok().and_then(|c| c.clone())) {
            return Some(c);
        }
        let slot = crate::crash::serving_slot()?;
        let busy = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        busy.get(slot).cloned().flatten()
    }

    /// Makes every later panic count an abort against its culprit in the
    /// inbox before the process ends.
    pub(super) fn on_panic(self: &Arc<Self>, log: AbortLog) {
        let blame = self.clone();
        crate::crash::before_abort(move || {
            let Some(c) = blame.culprit() else {
                tracing::error!("the panic was in no alarm's handling; no alarm is blamed");
                return;
            };
            match log.count(&c.key) {
                Ok(()) => {
                    tracing::error!(alarm_id = %c.alarm_id, "the panic is counted against the alarm whose handling raised it")
                }
                Err(e) => {
                    tracing::error!(alarm_id = %c.alarm_id, error = %e, "cannot count the panic against its alarm; if it is a poison alarm it may abort the daemon again")
                }
            }
        });
    }
}

/// Runs `f`, the hub's triage of `key`'s alarm: a panic in it is that
/// alarm's.
pub(super) fn triaging<R>(alarm: Culprit, f: impl FnOnce() -> R) -> R {
    let before = TRIAGING.with(|t| t.replace(Some(alarm)));
    let r = f();
    TRIAGING.with(|t| *t.borrow_mut() = before);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Culprit {
        Culprit {
            key: Key([i; 16]),
            alarm_id: format!("a{i}"),
        }
    }

    #[test]
    fn a_panic_is_blamed_on_the_job_of_the_slot_it_serves_and_on_nothing_else() {
        let b = Blame::default();
        b.working(0, Some(k(1)));
        b.working(1, Some(k(2)));
        assert_eq!(b.culprit(), None, "a thread that serves no slot");
        std::thread::scope(|s| {
            s.spawn(|| {
                crate::crash::running_slot_job(Some(1));
                assert_eq!(b.culprit(), Some(k(2)));
                b.working(1, None);
                assert_eq!(b.culprit(), None, "a slot between jobs");
                b.working(1, Some(k(3)));
                crate::crash::running_slot_job(None);
                assert_eq!(
                    b.culprit(),
                    None,
                    "the thread saving the last job's state, its worker on the next"
                );
            });
        });
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let in_task = rt.block_on(crate::crash::for_slot(0, async { b.culprit() }));
        assert_eq!(in_task, Some(k(1)), "a worker task");
        assert_eq!(
            triaging(k(7), || b.culprit()),
            Some(k(7)),
            "the hub's triage"
        );
        assert_eq!(b.culprit(), None, "after the triage");
    }
}
