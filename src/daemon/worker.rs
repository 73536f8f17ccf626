//! A worker: one per slot. It takes the most urgent job off the queue,
//! diagnoses it on its slot and hands the diagnosis to the hub; on cancel it
//! hands its slot back, so shutdown can join the slot's thread.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{Done, FromWorker, Shared};
use crate::llm::Slot;

/// Diagnoses jobs until `cancel` fires, then returns its slot.
pub(super) async fn run(
    s: Arc<Shared>,
    mut slot: Slot,
    done: mpsc::UnboundedSender<FromWorker>,
    cancel: CancellationToken,
) -> Slot {
    loop {
        let job = s.queue().pop();
        let Some(job) = job else {
            tokio::select! {
                _ = cancel.cancelled() => return slot,
                _ = s.work.notified() => {}
                // Belt and braces against a lost wake-up.
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        };
        // The attempt is on disk before the model sees the alarm.
        let (go, went) = tokio::sync::oneshot::channel();
        let keys = job.alarms.iter().map(|(_, k)| *k).collect();
        if done.send(FromWorker::Taking { keys, go }).is_err() {
            return slot;
        }
        tokio::select! {
            _ = cancel.cancelled() => return slot,
            r = went => if r.is_err() { return slot },
        }
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
        let d = tokio::select! {
            // Dropping the job leaves its alarms in the inbox (or, those it
            // could not take, unacknowledged) for the next start; `stop`
            // cancels the generation still running on the slot thread.
            _ = cancel.cancelled() => return slot,
            d = s.pipeline.diagnose(&mut slot, job.primary()) => d,
        };
        let _ = done.send(FromWorker::Done(Box::new(Done {
            alarms: job.alarms,
            diagnosis: d,
            slot: Some(slot.id),
        })));
    }
}
