//! The daemon: the service around the pipeline. It wires MQTT intake, the
//! queue, one worker per slot, delivery, status reporting and systemd
//! notifications, and shuts them down in order.
//!
//! `run` is load → connect → spawn → serve → shutdown. The serving loop
//! (`hub`) is a thin I/O shell: what to publish and when an alarm may be
//! acknowledged is decided by `delivery::Delivery`, what is kept on disk by
//! `inbox` (alarms) and `outbox` (diagnoses), who is diagnosed first by
//! `queue`; `worker` runs the pipeline on a slot.
//!
//! Each long-lived task is an async fn taking a `CancellationToken`; only
//! `main` listens for signals, and asks for an index reload through a
//! `Notify` (see `reload`). An alarm is acknowledged once it is journaled
//! in the inbox (or, when the inbox cannot take it, once its diagnosis is on
//! disk). On cancel, unfinished alarms stay in the inbox for the next start
//! (those it could not take stay unacknowledged, and the broker redelivers
//! them), and the slot threads are cancelled and joined before exit.
//!
//! Only `main` enters the daemon: the one-shot commands and the
//! measurements load the same components through `load`.

mod blame;
mod delivery;
mod feedback;
mod hub;
mod inbox;
mod journal;
mod link;
mod mqtt;
mod outbox;
// Crate-visible for config's check of the queue's ceiling, until config owns
// it. Scheduler::is_empty has no caller; it is left for a change to the
// queue itself.
mod queue;
mod reload;
mod store;
mod systemd;
mod worker;

// What the integration tests drive without a broker: the outbox on a bad
// disk, and the largest alarm the broker is told the daemon reads.
pub use delivery::Key;
pub use mqtt::{connection, MqttError, MAX_INBOUND};
pub use outbox::Outbox;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::v5::{AsyncClient, EventLoop};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alarm::Alarm;
use crate::config::Config;
use crate::diagnosis::Diagnosis;
use crate::llm::Slot;
use crate::load::{self, LoadError};
use crate::pipeline::Pipeline;
use crate::retrieval::LiveIndex;
use hub::Hub;
use inbox::Inbox;
use mqtt::{Inbound, PollerTx};
use queue::Scheduler;
use systemd::Notifier;

/// Why the daemon could not start.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Load(#[from] LoadError),
    #[error(transparent)]
    Mqtt(#[from] mqtt::MqttError),
    #[error("state_dir {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
}

impl DaemonError {
    /// True when a restart cannot fix it: what `LoadError::is_config` says,
    /// or unreadable TLS files (exit status 78).
    pub fn is_config(&self) -> bool {
        match self {
            DaemonError::Load(e) => e.is_config(),
            DaemonError::Mqtt(e) => matches!(e, mqtt::MqttError::Tls { .. }),
            DaemonError::StateDir { .. } => false,
        }
    }
}

/// What the workers and the serving loop share.
struct Shared {
    pipeline: Pipeline,
    sched: Mutex<Scheduler<Key>>,
    work: Notify,
    epoch: Instant,
    /// What each slot works on now (index: slot id), for pre-emption.
    running: Mutex<Vec<Option<Busy>>>,
    /// What a panic would be blamed on; shared with the panic hook.
    blame: Arc<blame::Blame>,
    /// The site notes that count now: the hub swaps in a new list when
    /// feedback adds a note or `tidewatch notes` changes the journal. A
    /// job reads it once, at its start (`borrow().clone()`, cheap).
    site_notes: tokio::sync::watch::Receiver<crate::notes::SiteNotes>,
}

/// A job on a slot: what the pre-emption rule weighs, and how to stop it.
struct Busy {
    job: queue::Running,
    alarm_id: String,
    progress: Arc<crate::watchdog::Progress>,
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Scheduler<Key>> {
        self.sched.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn running(&self) -> std::sync::MutexGuard<'_, Vec<Option<Busy>>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the least severe job on a slot when a more severe one waits
    /// and no slot is free (`queue::preemption`). The stopped job is put
    /// back by its worker and runs right after.
    fn preempt_if_needed(&self) {
        let waiting = self.queue().peek().map(|(s, id)| (s, id.to_string()));
        let mut running = self.running();
        let jobs: Vec<Option<queue::Running>> =
            running.iter().map(|b| b.as_ref().map(|b| b.job)).collect();
        let Some(i) = queue::preemption(&jobs, waiting.as_ref().map(|w| w.0)) else {
            return;
        };
        if let (Some(busy), Some((severity, id))) = (running[i].as_mut(), waiting) {
            // Marked here, so a second arrival does not stop it again.
            busy.job.preempted = true;
            busy.progress.request_preempt();
            tracing::info!(
                slot = i,
                alarm_id = %busy.alarm_id,
                severity = busy.job.severity.as_str(),
                by_alarm_id = %id,
                by_severity = severity.as_str(),
                "pre-empting a job for a more severe alarm"
            );
        }
    }
}

/// A finished diagnosis and the alarms it answers.
struct Done {
    alarms: Vec<(Alarm, Key)>,
    diagnosis: Diagnosis,
    slot: Option<usize>,
    /// Told once the diagnosis is published: the slot writes its prompt's
    /// disk states after that, never before (`Slot::published`).
    published: Option<tokio::sync::oneshot::Sender<()>>,
}

/// What a worker tells the hub.
enum FromWorker {
    /// The watchdog gave up on the slot's thread while it ran this alarm:
    /// the hub counts an abort against it (see `blame`).
    SlotLost(blame::Culprit),
    /// Boxed: a diagnosis is large, and most messages are diagnoses anyway.
    Done(Box<Done>),
}

/// Runs the daemon until `cancel` fires; each `reload` notification reopens
/// the index.
pub async fn run(
    cfg: Config,
    reload: Arc<Notify>,
    cancel: CancellationToken,
) -> Result<(), DaemonError> {
    let notifier = Arc::new(Notifier::from_env());
    // Everything that can fail on a bad config or state dir is checked before
    // the model loads: it is quicker to report, and nothing is decoding yet.
    std::fs::create_dir_all(&cfg.state_dir).map_err(|source| DaemonError::StateDir {
        path: cfg.state_dir.display().to_string(),
        source,
    })?;
    let mqtt_options = mqtt::options(&cfg.mqtt)?;
    let outbox = open_outbox(&cfg);
    let inbox = open_inbox(&cfg);
    let record = open_record(&cfg);
    let (notes, site_notes) = feedback::Notes::open(&cfg.state_dir);
    notifier.status("loading model and index");
    let (index, model, slots, counters) = load::model_and_index(&cfg, true).await?;
    let examples = load::examples(&cfg)?;
    tracing::info!(
        model = %model.info.name,
        arch = %model.info.architecture,
        template = model.family().name(),
        passages = index.n_passages(),
        slots = slots.len(),
        "model and index loaded"
    );
    let hard = cfg.watchdog.hard_timeout;
    let cfg = Arc::new(cfg);
    let shared = Arc::new(Shared {
        pipeline: Pipeline {
            index: Arc::new(LiveIndex::new(index)),
            model,
            cfg: cfg.clone(),
            counters,
            examples,
        },
        sched: Mutex::new(Scheduler::new(
            cfg.queue.capacity,
            cfg.queue.dedup_window.as_millis() as u64,
        )),
        work: Notify::new(),
        epoch: Instant::now(),
        // One entry per slot from the start: a slot that has not run a job
        // yet is free, not unknown.
        running: Mutex::new((0..cfg.llm.slots).map(|_| None).collect()),
        blame: Arc::default(),
        site_notes,
    });
    if let Some(inbox) = &inbox {
        shared.blame.on_panic(inbox.abort_log());
    }
    let (client, eventloop) = AsyncClient::new(mqtt_options, mqtt::CLIENT_QUEUE);
    let tracker = TaskTracker::new();
    let mqtt_turned = Arc::new(AtomicU64::new(0));
    let (events, qos0, poller) = connect(&tracker, eventloop, &shared, &mqtt_turned);
    let (done_tx, done_rx) = mpsc::unbounded_channel();
    let workers = spawn(
        &tracker,
        &shared,
        slots,
        done_tx,
        Liveness {
            notifier: &notifier,
            turned: &mqtt_turned,
            keep_alive: cfg.mqtt.keep_alive,
        },
        &cancel,
    );
    tracker.spawn(reload::run(
        reload::Reloader {
            path: cfg.knowledge.index.clone(),
            index: shared.pipeline.index.clone(),
            notifier: notifier.clone(),
            plant_codes: cfg.knowledge.plant_codes.clone(),
            kind_aliases: cfg.knowledge.kind_aliases.clone(),
        },
        reload,
        cancel.clone(),
    ));
    let mut hub = Hub::new(
        shared,
        cfg.mqtt.clone(),
        client,
        (outbox, inbox, record),
        notes,
        notifier.clone(),
    );
    hub.replay();
    hub.serve(events, qos0, done_rx, &cancel).await;
    shutdown(hub, tracker, workers, poller, hard).await;
    Ok(())
}

/// Says in the journal what opening a journal file (`outbox`, `inbox`)
/// recovered from: a torn last record, damaged records skipped.
fn warn_recovered(journal: &str, torn_bytes: u64, damaged_bytes: u64) {
    if torn_bytes > 0 {
        tracing::warn!(
            bytes = torn_bytes,
            "{journal} ended in a torn record (power loss?); it was cut off"
        );
    }
    if damaged_bytes > 0 {
        tracing::warn!(
            bytes = damaged_bytes,
            "{journal} had damaged records; they were skipped and the rest kept"
        );
    }
}

/// Opens the outbox and says in the journal what it found. Never fails: on a
/// read-only, full or failing disk the daemon still answers alarms, from
/// memory, and says why its diagnoses are not on disk.
fn open_outbox(cfg: &Config) -> Outbox {
    let (outbox, report) = Outbox::open(&cfg.state_dir, cfg.outbox.max_bytes);
    warn_recovered("outbox", report.torn_bytes, report.damaged_bytes);
    if let Some(err) = &report.not_rewritten {
        tracing::warn!(
            error = %err,
            "outbox damage could not be rewritten away; new diagnoses are still stored after it, and it is skipped again at the next start"
        );
    }
    if let Some(err) = &report.not_writable {
        tracing::error!(
            error = %err,
            "outbox cannot be written: what it held is delivered, new diagnoses are kept in memory and delivered from there (their alarms acknowledged only after that), and every diagnosis tries to write it again"
        );
    } else if report.upgraded {
        tracing::info!("outbox rewritten in the current format");
    }
    if report.remembered < outbox::CACHE_ENTRIES {
        tracing::info!(
            remembered = report.remembered,
            max_bytes = cfg.outbox.max_bytes,
            "outbox.max_bytes keeps only the newest delivered alarms across restarts (a quarter of it holds their keys)"
        );
    }
    if report.pending > 0 {
        tracing::info!(
            pending = report.pending,
            "undelivered diagnoses in the outbox will be delivered"
        );
    }
    outbox
}

/// The inbox, or None when it cannot be opened at all (an unwritable state
/// dir): the daemon still runs, and acknowledges each alarm only once its
/// diagnosis is delivered, as before there was an inbox. A crash loop over a
/// bad disk would answer nothing.
fn open_inbox(cfg: &Config) -> Option<Inbox> {
    match Inbox::open(&cfg.state_dir, cfg.inbox.max_bytes) {
        Ok((inbox, report)) => {
            warn_recovered("inbox", report.torn_bytes, report.damaged_bytes);
            if let Some(e) = &report.not_compacted {
                tracing::warn!(error = %e, "inbox could not be rewritten clean; appending to it as it is");
            }
            Some(inbox)
        }
        Err(e) => {
            tracing::error!(error = %e, "inbox unavailable; each alarm is acknowledged only after its diagnosis is delivered, and a storm is answered in the broker's window");
            None
        }
    }
}

/// The record of published diagnoses feedback is checked against, or None
/// when it cannot be opened: alarms are still answered, and feedback is
/// refused as on an unknown alarm.
fn open_record(cfg: &Config) -> Option<crate::feedback::Published> {
    match crate::feedback::Published::open(&cfg.state_dir) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::error!(error = %e, "record of published diagnoses unavailable; feedback is refused until it can be opened");
            None
        }
    }
}

type Events = (
    mpsc::UnboundedReceiver<Inbound>,
    mpsc::Receiver<mqtt::Qos0>,
    Poller,
);

/// The task that owns the MQTT event loop, for shutdown.
struct Poller {
    /// Its own token, not the daemon's cancel: it must outlive the cancel
    /// until the offline status and the DISCONNECT are on the wire.
    stop: CancellationToken,
    /// Cancelled before shutdown queues its DISCONNECT: only that one ends
    /// the poller (rumqttc reports another on a broker's protocol error).
    leaving: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

/// How long shutdown waits for the broker to take the offline status and the
/// DISCONNECT: a broker that is gone must not hold up a stop or a restart
/// (its last will then says offline).
const DISCONNECT_WAIT: Duration = Duration::from_secs(2);

/// Starts the task that owns the MQTT event loop.
fn connect(
    tracker: &TaskTracker,
    eventloop: EventLoop,
    shared: &Shared,
    turned: &Arc<AtomicU64>,
) -> Events {
    let (events_tx, events) = mpsc::unbounded_channel();
    let (qos0_tx, qos0) = mpsc::channel(1024);
    let stop = CancellationToken::new();
    let leaving = CancellationToken::new();
    let task = tracker.spawn(mqtt::run_poller(
        eventloop,
        PollerTx {
            events: events_tx,
            qos0: qos0_tx,
        },
        turned.clone(),
        shared.epoch,
        stop.clone(),
        leaving.clone(),
    ));
    (
        events,
        qos0,
        Poller {
            stop,
            leaving,
            task,
        },
    )
}

/// What the systemd watchdog judges the process alive by.
struct Liveness<'a> {
    notifier: &'a Arc<Notifier>,
    /// When the MQTT poller last turned (see `mqtt::run_poller`).
    turned: &'a Arc<AtomicU64>,
    /// The MQTT keepalive: a poller quiet for three of them is stuck.
    keep_alive: Duration,
}

/// Starts one worker per slot and the systemd watchdog. Workers hand their
/// slot back when they end, so shutdown can join the slot threads.
fn spawn(
    tracker: &TaskTracker,
    shared: &Arc<Shared>,
    slots: Vec<Slot>,
    done: mpsc::UnboundedSender<FromWorker>,
    live: Liveness<'_>,
    cancel: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<Slot>> {
    let Liveness {
        notifier,
        turned,
        keep_alive,
    } = live;
    let workers = slots
        .into_iter()
        .map(|slot| {
            tracker.spawn(worker::run(
                shared.clone(),
                slot,
                done.clone(),
                cancel.clone(),
            ))
        })
        .collect();
    let s = shared.clone();
    let turned = turned.clone();
    let healthy = move || {
        let limit = (keep_alive * 3).max(Duration::from_secs(30));
        crate::watchdog::process_alive(
            turned.load(Ordering::Relaxed),
            s.now_ms(),
            limit,
            s.pipeline.counters.slots.lost.load(Ordering::Relaxed),
        )
    };
    tracker.spawn(systemd::run_watchdog(
        notifier.clone(),
        healthy,
        cancel.clone(),
    ));
    workers
}

/// Stops in order: the broker told, the poller and the other tasks ended,
/// the workers' slots handed back and their threads joined.
async fn shutdown(
    hub: Hub,
    tracker: TaskTracker,
    workers: Vec<tokio::task::JoinHandle<Slot>>,
    mut poller: Poller,
    hard: Duration,
) {
    // The poller writes the offline status and the DISCONNECT, in order, and
    // ends on the DISCONNECT; without a connection there is nothing to wait
    // for.
    poller.leaving.cancel();
    if hub.sign_off() {
        match tokio::time::timeout(DISCONNECT_WAIT, &mut poller.task).await {
            Ok(_) => tracing::info!("offline status published; disconnected from the broker"),
            Err(_) => tracing::warn!(
                wait_s = DISCONNECT_WAIT.as_secs(),
                "the broker did not take the disconnect in time; its last will says offline"
            ),
        }
    }
    poller.stop.cancel();
    tracker.close();
    tracker.wait().await;
    let mut slots = Vec::new();
    for w in workers {
        if let Ok(slot) = w.await {
            slots.push(slot);
        }
    }
    load::stop_slots(slots, hard).await;
    tracing::info!("slot threads stopped");
}
