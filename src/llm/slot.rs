//! The async handle of one slot: a job run under the watchdog (cancel,
//! reset or replace a slot that hangs), the measurement hooks, and stopping
//! the slot for good. The slot's OS thread is `thread`; this side never
//! touches llama.cpp itself.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use llama_cpp_2::model::LlamaModel;

use super::error::LlmError;
use super::job::{GenOutput, GenRequest, SlotSettings};
use super::kv::BlockWarm;
use super::thread;
use crate::config::WatchdogConfig;
use crate::watchdog::{judge, Limits, Progress, Verdict};

/// Counters the slots share with the status reporter.
#[derive(Debug, Default)]
pub struct SlotCounters {
    pub restarts: AtomicU64,
    pub lost: AtomicU64,
    /// Jobs stopped for a more severe alarm (and run again after it).
    pub preempted: AtomicU64,
}

/// Why a slot job did not produce output.
#[derive(Debug, Clone)]
pub enum SlotFailure {
    /// The watchdog found it hung; the job was cancelled and the context rebuilt.
    Hung(Verdict),
    /// Hung and did not return from the cancel: the thread was abandoned and
    /// replaced by a fresh slot.
    Lost(Verdict),
    /// The job failed by itself (decode error, unusable output).
    Failed(LlmError),
    /// The job stopped at a model call to make way for a more severe alarm
    /// (`request_preempt`); what it read of its prompt is kept.
    Preempted,
}

/// The async handle of one slot thread.
pub struct Slot {
    pub id: usize,
    model: Arc<LlamaModel>,
    settings: SlotSettings,
    tx: mpsc::SyncSender<thread::SlotMsg>,
    pub progress: Arc<Progress>,
    counters: Arc<SlotCounters>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Slot {
    /// Starts a slot thread and waits until its context exists.
    pub async fn start(
        id: usize,
        model: Arc<LlamaModel>,
        settings: SlotSettings,
        counters: Arc<SlotCounters>,
    ) -> Result<Self, LlmError> {
        let (tx, progress, thread) = spawn_thread(id, model.clone(), settings.clone()).await?;
        Ok(Self {
            id,
            model,
            settings,
            tx,
            progress,
            counters,
            thread: Some(thread),
        })
    }

    /// Runs a job under the watchdog.
    pub async fn run(
        &mut self,
        req: GenRequest,
        wd: &WatchdogConfig,
        deadline: Duration,
    ) -> Result<GenOutput, SlotFailure> {
        let limits = Limits {
            stall: wd.stall_timeout,
            deadline,
        };
        let (reply, mut rx) = tokio::sync::oneshot::channel();
        match send_within(&self.tx, thread::SlotMsg::Run(req, reply), deadline).await {
            Ok(()) => {}
            Err(mpsc::TrySendError::Full(_)) => {
                return Err(SlotFailure::Failed(LlmError::SlotBusy(self.id)))
            }
            Err(mpsc::TrySendError::Disconnected(_)) => {
                return Err(SlotFailure::Failed(LlmError::SlotGone(self.id)))
            }
        }
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                r = &mut rx => {
                    return match r {
                        Ok(Ok(out)) => Ok(out),
                        Ok(Err(LlmError::Preempted)) => {
                            self.counters.preempted.fetch_add(1, Ordering::Relaxed);
                            Err(SlotFailure::Preempted)
                        }
                        Ok(Err(e)) => Err(SlotFailure::Failed(e)),
                        Err(_) => Err(SlotFailure::Failed(LlmError::SlotGone(self.id))),
                    };
                }
                _ = tick.tick() => {
                    let p = &self.progress;
                    let verdict = judge(&p.snapshot(), p.now_ms(), &limits);
                    if !verdict.is_hung() {
                        continue;
                    }
                    tracing::warn!(slot = self.id, reason = verdict.reason(), ?verdict, "slot hung; cancelling its job");
                    p.cancel();
                    return match tokio::time::timeout(wd.hard_timeout, &mut rx).await {
                        Ok(Ok(_)) => {
                            self.reset(wd.hard_timeout).await;
                            Err(SlotFailure::Hung(verdict))
                        }
                        _ => {
                            self.replace().await;
                            Err(SlotFailure::Lost(verdict))
                        }
                    };
                }
            }
        }
    }

    /// The answer of the slot's last job is published: its prompt's disk
    /// states may be written now (`GenRequest::save_on_publish`). Never
    /// waits: a slot busy with another job has dropped them.
    pub fn published(&self) {
        let _ = self.tx.try_send(thread::SlotMsg::Published);
    }

    /// Keeps only the first `n` tokens of the slot's KV cache (0: all gone)
    /// and no saved prompt state in RAM (nor on disk, with `disk_too`), so a
    /// measurement can start cold or from the static prefix alone.
    pub async fn keep_cache(&self, n: usize, disk_too: bool) {
        let (reply, rx) = tokio::sync::oneshot::channel();
        if self
            .tx
            .try_send(thread::SlotMsg::Keep(n, disk_too, reply))
            .is_ok()
        {
            let _ = rx.await;
        }
    }

    /// Reads `prompt`'s passage block and keeps its state on disk, unless
    /// the disk tier has it (`tidewatch warm`).
    pub async fn warm_block(&self, prompt: crate::prompt::Prompt) -> Result<BlockWarm, LlmError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx
            .try_send(thread::SlotMsg::WarmBlock(prompt, reply))
            .map_err(|_| LlmError::SlotGone(self.id))?;
        rx.await.map_err(|_| LlmError::SlotGone(self.id))?
    }

    /// Median ms of one verification decode of 1..=`rows` rows (index k-1),
    /// after the cached prefix: what a draft costs against a single step.
    pub async fn verify_cost(&self, rows: usize, reps: usize) -> Result<Vec<f64>, LlmError> {
        let (reply, rx) = tokio::sync::oneshot::channel();
        self.tx
            .try_send(thread::SlotMsg::VerifyCost(rows, reps, reply))
            .map_err(|_| LlmError::Decode("slot is busy or gone".into()))?;
        rx.await
            .map_err(|_| LlmError::Decode("slot thread ended".into()))?
    }

    /// Drops and rebuilds the context; replaces the thread if it does not answer.
    async fn reset(&mut self, hard: Duration) {
        self.counters.restarts.fetch_add(1, Ordering::Relaxed);
        let (reply, rx) = tokio::sync::oneshot::channel();
        if send_within(&self.tx, thread::SlotMsg::Reset(reply), hard)
            .await
            .is_ok()
        {
            if let Ok(Ok(Ok(()))) = tokio::time::timeout(hard, rx).await {
                tracing::info!(slot = self.id, "slot context rebuilt");
                return;
            }
        }
        self.replace().await;
    }

    /// Abandons the current thread (it may be wedged in native code) and starts
    /// a fresh one. Counted as lost: the process heartbeat stops, so systemd
    /// restarts tidewatch to reclaim the thread; the new slot serves until then.
    async fn replace(&mut self) {
        self.counters.lost.fetch_add(1, Ordering::Relaxed);
        tracing::error!(
            slot = self.id,
            "slot thread did not return from cancel; replacing it"
        );
        match spawn_thread(self.id, self.model.clone(), self.settings.clone()).await {
            Ok((tx, progress, thread)) => {
                self.tx = tx;
                self.progress = progress;
                // The old thread is abandoned, not joined: it may never return.
                self.thread = Some(thread);
            }
            Err(e) => {
                tracing::error!(slot = self.id, error = %e, "replacement slot failed to start")
            }
        }
    }
}

impl Slot {
    /// Stops the slot for good: cancels whatever it decodes (a job or the
    /// warm-up), closes its channel and joins its thread, waiting at most
    /// `hard`. Returns whether the thread ended.
    pub async fn stop(self, hard: Duration) -> bool {
        let Slot {
            id,
            tx,
            progress,
            thread,
            ..
        } = self;
        progress.stop();
        drop(tx);
        let Some(thread) = thread else {
            return true;
        };
        // A plain thread, not spawn_blocking: the runtime waits for its
        // blocking tasks at exit, and a wedged slot would hold it forever.
        let (tx, joined) = tokio::sync::oneshot::channel();
        let _ = std::thread::Builder::new()
            .name(format!("tidewatch-join-{id}"))
            .spawn(move || {
                let _ = tx.send(thread.join().is_ok());
            });
        match tokio::time::timeout(hard, joined).await {
            Ok(_) => {
                tracing::info!(slot = id, "slot stopped");
                true
            }
            Err(_) => {
                tracing::error!(
                    slot = id,
                    "slot thread did not stop within watchdog.hard_timeout_s; exiting without it"
                );
                false
            }
        }
    }
}

type Spawned = (
    mpsc::SyncSender<thread::SlotMsg>,
    Arc<Progress>,
    std::thread::JoinHandle<()>,
);

async fn spawn_thread(
    id: usize,
    model: Arc<LlamaModel>,
    settings: SlotSettings,
) -> Result<Spawned, LlmError> {
    let progress = Arc::new(Progress::new());
    let (tx, rx) = mpsc::sync_channel(1);
    let (ready_tx, ready_rx) = mpsc::channel();
    let p = progress.clone();
    let thread = std::thread::Builder::new()
        .name(format!("tidewatch-slot-{id}"))
        .spawn(move || thread::run(model, settings, p, rx, ready_tx, id))
        .map_err(|e| LlmError::Context(format!("cannot spawn slot thread: {e}")))?;
    let ready = tokio::task::spawn_blocking(move || ready_rx.recv())
        .await
        .map_err(|e| LlmError::Context(e.to_string()))?;
    match ready {
        Ok(Ok(())) => Ok((tx, progress, thread)),
        Ok(Err(e)) => Err(e),
        Err(_) => Err(LlmError::SlotGone(id)),
    }
}

/// Sends `msg` to a slot thread, waiting up to `within` for room: the
/// channel holds one message, and the thread may still be saving the last
/// job's prompt state with that job's `Published` waiting behind it. Only a
/// thread that is gone, or still busy past `within`, refuses the message.
async fn send_within<T>(
    tx: &mpsc::SyncSender<T>,
    mut msg: T,
    within: Duration,
) -> Result<(), mpsc::TrySendError<T>> {
    let since = std::time::Instant::now();
    loop {
        match tx.try_send(msg) {
            Err(mpsc::TrySendError::Full(m)) if since.elapsed() < within => {
                msg = m;
                tokio::time::sleep(SEND_POLL).await;
            }
            r => return r,
        }
    }
}

/// How often a job waiting for its slot's channel looks again.
const SEND_POLL: Duration = Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_job_waits_for_a_slot_still_busy_with_the_last_one() {
        let (tx, rx) = mpsc::sync_channel(1);
        // The last job's `Published` waits while the thread saves its state.
        tx.try_send(0).unwrap();
        let thread = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            (rx.recv().unwrap(), rx.recv().unwrap())
        });
        send_within(&tx, 1, Duration::from_secs(10)).await.unwrap();
        assert_eq!(thread.join().unwrap(), (0, 1));
    }

    #[tokio::test]
    async fn a_thread_busy_past_the_bound_or_gone_refuses_the_job() {
        let (tx, rx) = mpsc::sync_channel(1);
        tx.try_send(0).unwrap();
        let r = send_within(&tx, 1, Duration::from_millis(50)).await;
        assert!(matches!(r, Err(mpsc::TrySendError::Full(1))), "{r:?}");
        drop(rx);
        let r = send_within(&tx, 2, Duration::from_secs(10)).await;
        assert!(
            matches!(r, Err(mpsc::TrySendError::Disconnected(2))),
            "{r:?}"
        );
    }
}
