//! A worker: one per slot. It takes the most urgent job off the queue,
//! diagnoses it on its slot and hands the diagnosis to the hub; on cancel it
//! hands its slot back, so shutdown can join the slot's thread. What it
//! works on is on record (`blame`) before it reads the job's text, so a
//! panic in the job counts against that alarm and no other.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::blame::Culprit;
use super::queue::{Job, Running};
use super::{Busy, Done, FromWorker, Key, Shared};
use crate::llm::Slot;

/// Diagnoses jobs until `cancel` fires, then returns its slot.
pub(super) async fn run(
    s: Arc<Shared>,
    slot: Slot,
    done: mpsc::UnboundedSender<FromWorker>,
    cancel: CancellationToken,
) -> Slot {
    crate::crash::for_slot(slot.id, serve(s, slot, done, cancel)).await
}

async fn serve(
    s: Arc<Shared>,
    mut slot: Slot,
    done: mpsc::UnboundedSender<FromWorker>,
    cancel: CancellationToken,
) -> Slot {
    // The last answer's publication, after which its slot writes the
    // prompt's disk states; a job that comes first drops them.
    let mut published: Option<tokio::sync::oneshot::Receiver<()>> = None;
    loop {
        let job = s.queue().pop();
        let Some(job) = job else {
            tokio::select! {
                _ = cancel.cancelled() => return slot,
                _ = s.work.notified() => {}
                r = async {
                    match published.as_mut() {
                        Some(rx) => rx.await,
                        None => std::future::pending().await,
                    }
                } => {
                    published = None;
                    if r.is_ok() {
                        slot.published();
                    }
                }
                // Belt and braces against a lost wake-up.
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        };
        published = None;
        // Only the primary's text reaches the model: the alarms merged
        // into its job are not to blame for what it does.
        let culprit = Culprit {
            key: job.alarms[0].1,
            alarm_id: job.primary().id.clone(),
        };
        s.blame.working(slot.id, Some(culprit.clone()));
        let text = job.primary().message.as_deref().unwrap_or_default();
        crate::crash::injected_panic(crate::crash::Place::Worker, text.as_bytes());
        tracing::info!(
            alarm_id = %job.primary().id,
            equipment = %job.primary().equipment,
            code = %job.primary().code,
            slot = slot.id,
            merged = job.alarms.len() - 1,
            "diagnosing"
        );
        set_running(&s, &slot, Some(&job));
        // Replaced when the watchdog gives up on the thread.
        let thread = slot.progress.clone();
        // The notes as they stand when the job starts: a note kept or
        // withdrawn while it runs counts from the next alarm.
        let notes = s.site_notes.borrow().clone();
        let d = tokio::select! {
            // Dropping the job leaves its alarms in the inbox (or, those it
            // could not take, unacknowledged) for the next start; `stop`
            // cancels the generation still running on the slot thread.
            _ = cancel.cancelled() => return slot,
            d = s.pipeline.diagnose_preemptible(&mut slot, job.primary(), &notes) => d,
        };
        set_running(&s, &slot, None);
        s.blame.working(slot.id, None);
        if !Arc::ptr_eq(&thread, &slot.progress) {
            // Counted before the answer is stored: systemd restarts a
            // daemon that lost a slot, maybe before that.
            let _ = done.send(FromWorker::SlotLost(culprit));
        }
        let Some(d) = d else {
            tracing::info!(
                alarm_id = %job.primary().id,
                slot = slot.id,
                "pre-empted; it runs again after the more severe alarm"
            );
            let evicted = s.queue().requeue(job);
            if let Some(j) = evicted {
                let d = s.pipeline.triage(j.primary(), &notes);
                let _ = done.send(FromWorker::Done(Box::new(Done {
                    alarms: j.alarms,
                    diagnosis: d,
                    slot: None,
                    published: None,
                })));
            }
            continue;
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        published = Some(rx);
        let _ = done.send(FromWorker::Done(Box::new(Done {
            alarms: job.alarms,
            diagnosis: d,
            slot: Some(slot.id),
            published: Some(tx),
        })));
    }
}

/// Tells the hub what `slot` works on (None: it is free), so a more severe
/// alarm can stop it.
fn set_running(s: &Shared, slot: &Slot, job: Option<&Job<Key>>) {
    let mut running = s.running();
    // Under the registry's lock, where the hub asks: a request made for the
    // job before never reaches this one.
    slot.progress.clear_preempt();
    if running.len() <= slot.id {
        running.resize_with(slot.id + 1, || None);
    }
    running[slot.id] = job.map(|j| Busy {
        job: Running {
            severity: j.severity,
            preempted: j.preempted,
        },
        alarm_id: j.primary().id.clone(),
        progress: slot.progress.clone(),
    });
}
