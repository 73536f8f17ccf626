//! A worker: one per slot. It takes the most urgent job off the queue,
//! diagnoses it on its slot and hands the diagnosis to the hub; on cancel it
//! hands its slot back, so shutdown can join the slot's thread.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::queue::{Job, Running};
use super::{Busy, Done, Key, Shared};
use crate::llm::Slot;

/// Diagnoses jobs until `cancel` fires, then returns its slot.
pub(super) async fn run(
    s: Arc<Shared>,
    mut slot: Slot,
    done: mpsc::UnboundedSender<Done>,
    cancel: CancellationToken,
) -> Slot {
    loop {
        let job = {
            let mut q = s.queue();
            let j = q.pop();
            s.pipeline
                .counters
                .queue_depth
                .store(q.len() as u64, Ordering::Relaxed);
            j
        };
        let Some(job) = job else {
            tokio::select! {
                _ = cancel.cancelled() => return slot,
                _ = s.work.notified() => {}
                // Belt and braces against a lost wake-up.
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        };
        crate::crash::injected_panic(crate::crash::Place::Worker);
        tracing::info!(
            alarm_id = %job.primary().id,
            equipment = %job.primary().equipment,
            code = %job.primary().code,
            slot = slot.id,
            merged = job.alarms.len() - 1,
            "diagnosing"
        );
        set_running(&s, &slot, Some(&job));
        let d = tokio::select! {
            // Dropping the job leaves its alarms unacknowledged; `stop`
            // cancels the generation still running on the slot thread.
            _ = cancel.cancelled() => return slot,
            d = s.pipeline.diagnose_preemptible(&mut slot, job.primary()) => d,
        };
        set_running(&s, &slot, None);
        let Some(d) = d else {
            tracing::info!(
                alarm_id = %job.primary().id,
                slot = slot.id,
                "pre-empted; it runs again after the more severe alarm"
            );
            let evicted = s.queue().requeue(job);
            if let Some(j) = evicted {
                let d = s.pipeline.triage(j.primary());
                let _ = done.send(Done {
                    alarms: j.alarms,
                    diagnosis: d,
                    slot: None,
                });
            }
            continue;
        };
        let _ = done.send(Done {
            alarms: job.alarms,
            diagnosis: d,
            slot: Some(slot.id),
        });
    }
}

/// Tells the hub what `slot` works on (None: it is free), so a more severe
/// alarm can stop it.
fn set_running(s: &Shared, slot: &Slot, job: Option<&Job<Key>>) {
    let mut running = s.running();
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
