//! The daemon: wires MQTT intake, the queue, one worker per slot, delivery,
//! status reporting and systemd notifications, and shuts them down in order.
//!
//! `run` is load → connect → spawn → serve → shutdown. The serving loop is a
//! thin I/O shell: what to publish and when an alarm may be acknowledged is
//! decided by `delivery::Delivery`, what is kept on disk by `inbox` (alarms)
//! and `outbox` (diagnoses), who is diagnosed first by `queue`.
//!
//! Disk writes are grouped: the hub appends the alarms and diagnoses of a
//! burst without fsync, and when no more input is waiting (or a batch is
//! full) `flush` fsyncs the outbox and the inbox once each, then
//! acknowledges the burst's alarms and publishes its diagnoses. That is what
//! takes a storm off the broker faster than the model answers it. Each long-lived task is an async fn taking a
//! `CancellationToken`; only `main` listens for signals, and asks for an index
//! reload through a `Notify` (see `reload`). On cancel, unfinished
//! alarms are left unacknowledged so the broker redelivers them to the next
//! start, and the slot threads are cancelled and joined before exit.

pub mod delivery;
pub mod inbox;
pub mod journal;
pub mod mqtt;
pub mod outbox;
pub mod queue;
pub mod reload;
pub mod systemd;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::v5::mqttbytes::v5::Publish;
use rumqttc::v5::{AsyncClient, EventLoop};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alarm::{self, Alarm, Topics};
use crate::config::Config;
use crate::diagnosis::Diagnosis;
use crate::llm::Slot;
use crate::load::{self, LoadError};
use crate::pipeline::Pipeline;
use crate::retrieval::LiveIndex;
use delivery::{Delivery, Key, Output, Receipt, Settings};
use inbox::Inbox;
use mqtt::{Inbound, PollerTx};
use outbox::Outbox;
use queue::{Offer, Scheduler};
use systemd::Notifier;

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
}

impl Shared {
    fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    fn queue(&self) -> std::sync::MutexGuard<'_, Scheduler<Key>> {
        self.sched.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A finished diagnosis and the alarms it answers.
struct Done {
    alarms: Vec<(Alarm, Key)>,
    diagnosis: Diagnosis,
    slot: Option<usize>,
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
    notifier.status("loading model and index");
    let (index, model, slots, counters) = load::model_and_index(&cfg, true).await?;
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
        },
        sched: Mutex::new(Scheduler::new(
            cfg.queue.capacity,
            cfg.queue.dedup_window.as_millis() as u64,
        )),
        work: Notify::new(),
        epoch: Instant::now(),
    });
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
        &notifier,
        &mqtt_turned,
        &cancel,
    );
    tracker.spawn(reload::run(
        reload::Reloader {
            path: cfg.knowledge.index.clone(),
            index: shared.pipeline.index.clone(),
            notifier: notifier.clone(),
        },
        reload,
        cancel.clone(),
    ));
    let mut hub = Hub::new(shared, client, outbox, inbox, notifier.clone());
    hub.replay();
    hub.serve(events, qos0, done_rx, &cancel).await;
    shutdown(hub, tracker, workers, poller, hard).await;
    Ok(())
}

/// Opens the outbox and says in the journal what it found. Never fails: on a
/// read-only, full or failing disk the daemon still answers alarms, from
/// memory, and says why its diagnoses are not on disk.
fn open_outbox(cfg: &Config) -> Outbox {
    let (outbox, report) = Outbox::open(&cfg.state_dir, cfg.outbox.max_bytes);
    if report.torn_bytes > 0 {
        tracing::warn!(
            bytes = report.torn_bytes,
            "outbox ended in a torn record (power loss?); it was cut off"
        );
    }
    if report.damaged_bytes > 0 {
        tracing::warn!(
            bytes = report.damaged_bytes,
            "outbox had damaged records; they were skipped and the rest kept"
        );
    }
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
            if report.torn_bytes > 0 {
                tracing::warn!(
                    bytes = report.torn_bytes,
                    "inbox ended in a torn record (power loss?); it was cut off"
                );
            }
            if report.damaged_bytes > 0 {
                tracing::warn!(
                    bytes = report.damaged_bytes,
                    "inbox had damaged records; they were skipped and the rest kept"
                );
            }
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

type Events = (
    mpsc::UnboundedReceiver<Inbound>,
    mpsc::Receiver<Publish>,
    Poller,
);

/// The task that owns the MQTT event loop, for shutdown.
struct Poller {
    /// Its own token, not the daemon's cancel: it must outlive the cancel
    /// until the offline status and the DISCONNECT are on the wire.
    stop: CancellationToken,
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
    let task = tracker.spawn(mqtt::run_poller(
        eventloop,
        PollerTx {
            events: events_tx,
            qos0: qos0_tx,
        },
        turned.clone(),
        shared.epoch,
        stop.clone(),
    ));
    (events, qos0, Poller { stop, task })
}

/// Starts one worker per slot and the systemd watchdog. Workers hand their
/// slot back when they end, so shutdown can join the slot threads.
fn spawn(
    tracker: &TaskTracker,
    shared: &Arc<Shared>,
    slots: Vec<Slot>,
    done: mpsc::UnboundedSender<Done>,
    notifier: &Arc<Notifier>,
    turned: &Arc<AtomicU64>,
    cancel: &CancellationToken,
) -> Vec<tokio::task::JoinHandle<Slot>> {
    let workers = slots
        .into_iter()
        .map(|slot| tracker.spawn(worker(shared.clone(), slot, done.clone(), cancel.clone())))
        .collect();
    let s = shared.clone();
    let turned = turned.clone();
    let keep_alive = shared.pipeline.cfg.mqtt.keep_alive;
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

async fn shutdown(
    hub: Hub,
    tracker: TaskTracker,
    workers: Vec<tokio::task::JoinHandle<Slot>>,
    mut poller: Poller,
    hard: Duration,
) {
    hub.notifier.stopping();
    tracing::info!("shutting down; alarms not yet answered stay in the inbox (or unacknowledged) for the next start");
    let offline = serde_json::json!({"state": "offline", "ts": crate::diagnosis::now_rfc3339()});
    let queued = mqtt::publish_info(
        &hub.client,
        hub.topics.status(),
        offline.to_string().into_bytes(),
        true,
    )
    .is_ok()
        && hub.client.try_disconnect().is_ok();
    // The poller writes both, in order, and ends on the DISCONNECT; without a
    // connection there is nothing to wait for.
    if queued && hub.delivery.is_connected() {
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

/// The serving loop's state: the delivery machine, the inbox, the outbox
/// and the MQTT client. Owned by one task, so none of it needs a lock.
struct Hub {
    s: Arc<Shared>,
    client: AsyncClient,
    topics: Topics,
    notifier: Arc<Notifier>,
    delivery: Delivery<Publish>,
    outbox: Outbox,
    inbox: Option<Inbox>,
    /// Alarms appended to the inbox since the last flush: acknowledged once
    /// the flush has fsync'd them.
    unsynced: Vec<Key>,
    /// Diagnoses written to the outbox since the last flush, with their
    /// entry: published once the flush has fsync'd them.
    staged: Vec<(Key, u64, bool)>,
    /// The connection the poller last reported up; None while it is down.
    live: Option<u64>,
    /// Alarms to answer from retrieval alone (the queue was full), taken
    /// when no input is waiting: triage costs a retrieval each, and must not
    /// slow the intake that acknowledges a storm.
    backlog: std::collections::VecDeque<Vec<(Alarm, Key)>>,
    /// Alarms triaged at once because the inbox was full or failing.
    inbox_refused: u64,
    /// Acks the client's queue refused; retried on the next tick.
    unsent_acks: Vec<Publish>,
    /// Connected and the alarm subscription not yet confirmed.
    subscribe_pending: bool,
    subscribed_ms: u64,
    ready: bool,
    last_status_ms: u64,
    /// Test hook: extra time every inbound alarm costs (see `intake_delay`).
    intake_delay: Option<Duration>,
}

/// Most alarms and diagnoses a flush waits to group: bounds how long an
/// alarm waits for its ack while a storm keeps the input busy.
const MAX_BATCH: usize = 256;
/// Backlogged triage answers made per idle turn, so input that arrives
/// meanwhile waits at most a few milliseconds.
const TRIAGE_CHUNK: usize = 2;

/// Fault injection (cargo feature `fault-injection`):
/// `TIDEWATCH_FAULT=slow-intake:MS` makes every inbound alarm cost the hub MS
/// more, as on a board whose cores the model's threads have.
fn intake_delay() -> Option<Duration> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    let v = std::env::var("TIDEWATCH_FAULT").ok()?;
    v.strip_prefix("slow-intake:")?
        .parse()
        .ok()
        .map(Duration::from_millis)
}

impl Hub {
    fn new(
        s: Arc<Shared>,
        client: AsyncClient,
        outbox: Outbox,
        inbox: Option<Inbox>,
        notifier: Arc<Notifier>,
    ) -> Self {
        let mut delivery = Delivery::new(Settings {
            remembered: outbox::CACHE_ENTRIES,
            ..Settings::default()
        });
        delivery.restore(
            outbox.pending().map(|e| (e.seq, e.key)),
            outbox.delivered().copied(),
        );
        let topics = Topics {
            prefix: s.pipeline.cfg.mqtt.topic_prefix.clone(),
        };
        Hub {
            s,
            client,
            topics,
            notifier,
            delivery,
            outbox,
            inbox,
            unsent_acks: Vec::new(),
            unsynced: Vec::new(),
            staged: Vec::new(),
            live: None,
            backlog: std::collections::VecDeque::new(),
            inbox_refused: 0,
            subscribe_pending: false,
            subscribed_ms: 0,
            ready: false,
            last_status_ms: 0,
            intake_delay: intake_delay(),
        }
    }

    async fn serve(
        &mut self,
        mut events: mpsc::UnboundedReceiver<Inbound>,
        mut qos0: mpsc::Receiver<Publish>,
        mut done: mpsc::UnboundedReceiver<Done>,
        cancel: &CancellationToken,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let idle_work =
                !self.unsynced.is_empty() || !self.staged.is_empty() || !self.backlog.is_empty();
            // Biased: input first, so a burst is taken (and its acks grouped
            // into one flush) before the idle work; a finished diagnosis
            // before everything, as it is rare and someone waits for it.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    // What is journaled is kept; acks may still go out
                    // while the client says goodbye.
                    self.flush();
                    return;
                }
                Some(d) = done.recv() => self.finish(d.alarms, d.diagnosis, d.slot),
                Some(ev) = events.recv() => self.on_event(ev).await,
                Some(p) = qos0.recv() => self.intake(p, true).await,
                _ = tick.tick() => self.on_tick(),
                _ = std::future::ready(()), if idle_work => self.idle(),
            }
            if self.unsynced.len() + self.staged.len() >= MAX_BATCH {
                self.flush();
            }
        }
    }

    /// Nothing is waiting: flush what was written, else answer some of the
    /// triage backlog.
    fn idle(&mut self) {
        if !self.unsynced.is_empty() || !self.staged.is_empty() {
            return self.flush();
        }
        for _ in 0..TRIAGE_CHUNK {
            let Some(alarms) = self.backlog.pop_front() else {
                break;
            };
            let d = self.s.pipeline.triage(&alarms[0].0);
            self.finish(alarms, d, None);
        }
    }

    /// Alarms the inbox kept across a restart (a crash, a SIGTERM mid-work):
    /// diagnosed again, unless the outbox shows they were answered. Their
    /// receipts were acknowledged, or will be at once on redelivery.
    fn replay(&mut self) {
        let Some(inbox) = &self.inbox else {
            return;
        };
        let held: Vec<inbox::Held> = inbox.held().cloned().collect();
        let (mut again, mut answered) = (0usize, Vec::new());
        for h in held {
            if !self.delivery.restore_journaled(h.key) {
                answered.push(h.key);
                continue;
            }
            let parsed = alarm::equipment_from_topic(&self.topics.prefix, &h.topic)
                .map_err(|e| e.to_string())
                .and_then(|eq| {
                    alarm::parse(
                        &h.payload,
                        Some(eq),
                        self.s.pipeline.cfg.mqtt.max_alarm_bytes,
                    )
                    .map_err(|e| e.to_string())
                });
            match parsed {
                Ok(a) => {
                    again += 1;
                    self.offer(a, h.key, true);
                }
                Err(reason) => {
                    // Only a config change (a new topic prefix or a lower
                    // size limit) gets here: the alarm passed at intake.
                    tracing::error!(topic = %h.topic, reason = %reason, "alarm in the inbox no longer passes; dropped from the inbox");
                    self.delivery.abandoned(&h.key);
                    answered.push(h.key);
                }
            }
        }
        if let Some(inbox) = &mut self.inbox {
            for k in &answered {
                if let Err(e) = inbox.done(k) {
                    tracing::warn!(error = %e, "cannot update the inbox");
                }
            }
        }
        if again > 0 {
            tracing::info!(
                alarms = again,
                "alarms kept in the inbox are diagnosed again"
            );
        }
    }

    /// Group commit: one fsync for the outbox and one for the inbox covers
    /// every diagnosis and alarm written since the last flush; only then are
    /// those alarms acknowledged and those diagnoses published.
    fn flush(&mut self) {
        let staged = std::mem::take(&mut self.staged);
        let unsynced = std::mem::take(&mut self.unsynced);
        let outbox_ok = staged.is_empty()
            || match tokio::task::block_in_place(|| self.outbox.sync()) {
                Ok(()) => true,
                Err(e) => {
                    tracing::error!(error = %e, diagnoses = staged.len(), "cannot fsync the outbox; those alarms stay in the inbox until their diagnoses are delivered");
                    false
                }
            };
        let mut inbox_ok = true;
        if let Some(inbox) = &mut self.inbox {
            if !unsynced.is_empty() {
                if let Err(e) = tokio::task::block_in_place(|| inbox.sync()) {
                    tracing::error!(error = %e, alarms = unsynced.len(), "cannot fsync the inbox; those alarms are acknowledged only after their diagnoses are delivered");
                    inbox_ok = false;
                }
            }
            if outbox_ok {
                // A diagnosis held in memory only answers nothing after a
                // crash: its alarm stays in the inbox.
                for (key, _, _) in staged.iter().filter(|s| s.2) {
                    if let Err(e) = inbox.done(key) {
                        tracing::warn!(error = %e, "cannot update the inbox; the alarm may be answered again after a restart");
                    }
                }
            }
        }
        tracing::debug!(alarms = unsynced.len(), diagnoses = staged.len(), "flushed");
        if inbox_ok {
            for key in &unsynced {
                let out = self.delivery.journaled(key);
                self.carry_out(out);
            }
        }
        for (key, seq, durable) in staged {
            if outbox_ok && durable {
                // Its answer is on disk and will be delivered whatever
                // happens: the alarm is as safe as if journaled (this is
                // what acks alarms the inbox had no room for).
                let out = self.delivery.journaled(&key);
                self.carry_out(out);
            }
            let out = self.delivery.stored(key, seq);
            self.carry_out(out);
        }
    }

    async fn on_event(&mut self, ev: Inbound) {
        let now = self.s.now_ms();
        match ev {
            Inbound::Connected {
                session_present,
                epoch,
            } => {
                self.live = Some(epoch);
                // Subscribe on every connection: a broker that lost our
                // session lost the subscription too, and one that kept it
                // treats the repeat as a no-op.
                tracing::info!(session_present, "connected to the broker");
                self.subscribe_pending = true;
                self.subscribe();
                let out = self.delivery.connected();
                self.carry_out(out);
                self.publish_status();
            }
            Inbound::SubAck => {
                self.subscribe_pending = false;
                // READY only once subscribed: before that an alarm published
                // by a sensor would have no subscriber and be dropped.
                if !self.ready {
                    self.ready = true;
                    self.notifier.ready();
                    let cfg = &self.s.pipeline.cfg.mqtt;
                    tracing::info!(broker = %format!("{}:{}", cfg.host, cfg.port), "tidewatch ready");
                }
            }
            Inbound::Alarm { publish, epoch } => {
                // Read on a connection already lost: answered, but its ack
                // handle means nothing now; the broker redelivers it.
                let live = self.live == Some(epoch);
                self.intake(publish, live).await
            }
            Inbound::Sent(pkid) => self.delivery.sent(pkid, now),
            Inbound::PubAck(pkid) => {
                let out = self.delivery.puback(pkid);
                self.carry_out(out);
            }
            Inbound::Denied { pkid, reason } => {
                let (refusal, out) = self.delivery.denied(pkid, now);
                if let Some(r) = refusal {
                    self.log_refusal(r, &reason);
                }
                self.carry_out(out);
            }
            Inbound::Disconnected { dropped, seen, .. } => {
                self.live = None;
                self.subscribe_pending = false;
                self.delivery.disconnected(dropped);
                self.unsent_acks.clear();
                let _ = seen.send(());
            }
        }
    }

    /// Asks for the alarm subscription; retried on ticks until the SUBACK,
    /// since a full client queue refuses the request rather than wait.
    fn subscribe(&mut self) {
        self.subscribed_ms = self.s.now_ms();
        if let Err(e) = self.client.try_subscribe(
            self.topics.alarms(),
            rumqttc::v5::mqttbytes::QoS::AtLeastOnce,
        ) {
            tracing::warn!(error = %e, "cannot subscribe to alarms yet; retrying");
        }
    }

    fn on_tick(&mut self) {
        let now = self.s.now_ms();
        if self.delivery.is_connected() {
            for p in std::mem::take(&mut self.unsent_acks) {
                self.ack(p);
            }
            if self.subscribe_pending && now.saturating_sub(self.subscribed_ms) >= 5_000 {
                self.subscribe();
            }
        }
        let out = self.delivery.tick(now);
        self.carry_out(out);
        if now.saturating_sub(self.last_status_ms) >= 10_000 {
            self.publish_status();
        }
    }

    fn carry_out(&mut self, out: Vec<Output<Publish>>) {
        for o in out {
            match o {
                Output::Publish(seq) => {
                    let Some(e) = self.outbox.get(seq) else {
                        continue;
                    };
                    match mqtt::publish_diagnosis(&self.client, &e.topic, &e.payload) {
                        Ok(()) => self.delivery.handed(seq),
                        Err(err) => {
                            tracing::debug!(error = %err, "mqtt client queue full; diagnosis offered again shortly");
                            self.delivery.refused(seq);
                        }
                    }
                }
                Output::Ack(p) => self.ack(p),
                Output::Delivered(seq) => {
                    let r = tokio::task::block_in_place(|| self.outbox.ack(seq));
                    if let Err(err) = r {
                        tracing::error!(error = %err, "cannot record a delivered diagnosis");
                    }
                }
            }
        }
    }

    /// A diagnosis the broker refused stays in the outbox and is sent again
    /// (see `delivery`). At error level on the first refusal and then at
    /// doubling counts, so a long-standing ACL mistake does not flood the
    /// journal; the status counts them all along.
    fn log_refusal(&self, r: delivery::Refusal, reason: &str) {
        let (topic, alarm_id) = self
            .outbox
            .get(r.seq)
            .map(|e| (e.topic.clone(), e.alarm_id.clone()))
            .unwrap_or_default();
        let hint = mqtt::denial_hint(reason, &self.topics.prefix);
        let retry_in_s = r.retry_in_ms / 1000;
        if r.times.is_power_of_two() {
            tracing::error!(topic = %topic, alarm_id = %alarm_id, reason, times = r.times, retry_in_s, hint = %hint, "the broker refused a diagnosis; it stays in the outbox and is sent again");
        } else {
            tracing::debug!(topic = %topic, alarm_id = %alarm_id, reason, times = r.times, retry_in_s, "the broker refused a diagnosis again");
        }
    }

    fn ack(&mut self, p: Publish) {
        if let Err(e) = self.client.try_ack(&p) {
            tracing::debug!(error = %e, "mqtt client queue full; alarm ack retried shortly");
            self.unsent_acks.push(p);
        }
    }

    /// Reports a rejected alarm on the error topic and acknowledges it. The
    /// client's queue (`mqtt::CLIENT_QUEUE`) holds a flood's reports; one
    /// that finds it full is counted in `error_reports_dropped`.
    fn reject(&mut self, p: Publish, reason: String, live: bool) {
        self.s
            .pipeline
            .counters
            .rejected
            .fetch_add(1, Ordering::Relaxed);
        let topic: String = String::from_utf8_lossy(&p.topic)
            .chars()
            .take(256)
            .collect();
        tracing::warn!(topic = %topic, reason = %reason, bytes = p.payload.len(), "alarm rejected");
        let err = serde_json::json!({
            "topic": topic,
            "reason": reason,
            "bytes": p.payload.len(),
            "ts": crate::diagnosis::now_rfc3339(),
        });
        // Never wait for the client here: the poller may itself be waiting
        // for the hub to take a QoS 0 alarm, and the report is advisory.
        if let Err(e) = mqtt::publish_info(
            &self.client,
            self.topics.error(),
            err.to_string().into_bytes(),
            false,
        ) {
            self.s
                .pipeline
                .counters
                .error_reports_dropped
                .fetch_add(1, Ordering::Relaxed);
            tracing::warn!(error = %e, "cannot publish error report: the mqtt client queue is full");
        }
        // A reject read on a lost connection is reported again when the
        // broker redelivers it; its handle must not ack on the new one.
        if live {
            self.ack(p);
        }
    }

    /// Takes one alarm. `live`: it came on the connection that is up, so
    /// its receipt can be acknowledged.
    async fn intake(&mut self, p: Publish, live: bool) {
        crate::crash::injected_panic(crate::crash::Place::Hub);
        if let Some(d) = self.intake_delay {
            tokio::time::sleep(d).await;
        }
        // MQTT 5 hands topics over as bytes; brokers check they are UTF-8.
        let Ok(topic) = std::str::from_utf8(&p.topic).map(str::to_string) else {
            return self.reject(p, "topic is not UTF-8".into(), live);
        };
        let equipment = match alarm::equipment_from_topic(&self.topics.prefix, &topic) {
            Ok(e) => e.to_string(),
            Err(e) => return self.reject(p, e.to_string(), live),
        };
        let a = match alarm::parse(
            &p.payload,
            Some(&equipment),
            self.s.pipeline.cfg.mqtt.max_alarm_bytes,
        ) {
            Ok(a) => a,
            Err(e) => return self.reject(p, e.to_string(), live),
        };
        let key = Key::of(&topic, &p.payload);
        let payload = p.payload.clone();
        let (receipt, out) = self.delivery.received(key, live.then_some(p));
        self.carry_out(out);
        match receipt {
            Receipt::Diagnose => {}
            Receipt::Joined => {
                self.count_replayed();
                tracing::info!(alarm_id = %a.id, "alarm redelivered while it is answered; acknowledged once it is durable");
                return;
            }
            Receipt::Delivered => {
                self.count_replayed();
                tracing::info!(alarm_id = %a.id, "alarm redelivered after its diagnosis was delivered; acknowledged");
                return;
            }
        }
        let journal = self
            .inbox
            .as_mut()
            .map(|ib| ib.append(key, &topic, &payload));
        match journal {
            Some(Ok(())) => {
                self.unsynced.push(key);
                self.offer(a, key, true);
            }
            Some(Err(e)) => {
                self.inbox_refused += 1;
                if self.inbox_refused.is_power_of_two() {
                    tracing::warn!(error = %e, refused = self.inbox_refused, "inbox cannot take the alarm; unless it outranks a queued one it is triaged at once, and it is acknowledged once its answer is on disk");
                }
                self.offer(a, key, false);
            }
            None => self.offer(a, key, false),
        }
    }

    /// Queues an alarm for the model, or passes it (or the job it displaces)
    /// to triage when the queue is full. `journaled`: it is on disk, so its
    /// triage can wait for a pause in the input; one that is not (the inbox
    /// was full) holds a slot of the broker's window until its answer is on
    /// disk, so it is triaged at once.
    fn offer(&mut self, a: Alarm, key: Key, journaled: bool) {
        let offer = {
            let mut q = self.s.queue();
            let o = q.offer(a, key, self.s.now_ms());
            self.s
                .pipeline
                .counters
                .queue_depth
                .store(q.len() as u64, Ordering::Relaxed);
            o
        };
        match offer {
            Offer::Queued => self.s.work.notify_one(),
            Offer::Merged => {
                self.s
                    .pipeline
                    .counters
                    .merged
                    .fetch_add(1, Ordering::Relaxed);
            }
            Offer::Triage(a, k) if journaled => self.backlog.push_back(vec![(a, k)]),
            Offer::Triage(a, k) => {
                let d = self.s.pipeline.triage(&a);
                self.finish(vec![(a, k)], d, None);
            }
            Offer::Evicted(job) => {
                self.s.work.notify_one();
                self.backlog.push_back(job.alarms);
            }
        }
    }

    fn count_replayed(&self) {
        self.s
            .pipeline
            .counters
            .replayed
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Stores a diagnosis for every alarm it answers; delivery publishes it.
    fn finish(&mut self, alarms: Vec<(Alarm, Key)>, d: Diagnosis, slot: Option<usize>) {
        for (a, key) in alarms {
            let mut d = d.clone();
            d.alarm_id = a.id.clone();
            d.equipment = a.equipment.clone();
            d.code = a.code.clone();
            let t = &d.timings;
            tracing::info!(
                alarm_id = %a.id,
                equipment = %a.equipment,
                code = %a.code,
                slot = slot.map_or(-1, |s| s as i64),
                mode = d.mode.as_str(),
                retrieval_ms = t.retrieval_ms,
                prompt_tokens = t.prompt_tokens,
                ttft_ms = t.ttft_ms,
                generated_tokens = t.generated_tokens,
                generation_ms = t.generation_ms,
                "diagnosed"
            );
            let payload = match crate::diagnosis::payload(&d) {
                Ok(b) => b,
                Err(e) => {
                    tracing::error!(error = %e, "cannot encode diagnosis");
                    self.delivery.abandoned(&key);
                    continue;
                }
            };
            let topic = self.topics.diagnosis(&a.equipment);
            // Written now, fsync'd by the next flush (with the rest of the
            // burst) before it is published.
            let stored =
                tokio::task::block_in_place(|| self.outbox.put(key, &a.id, &topic, &payload));
            if let Some(e) = &stored.not_durable {
                tracing::warn!(alarm_id = %a.id, error = %e, "diagnosis not on disk; it is delivered from memory, and its alarm stays in the inbox (or unacknowledged) until then");
            }
            self.staged
                .push((key, stored.seq, stored.not_durable.is_none()));
        }
    }

    fn status_json(&self) -> serde_json::Value {
        let p = &self.s.pipeline;
        let mut v = serde_json::json!({
            "state": "online",
            "model": p.model.info.name,
            "architecture": p.model.info.architecture,
            "slots": p.cfg.llm.slots,
            "ts": crate::diagnosis::now_rfc3339(),
        });
        if let (Some(obj), serde_json::Value::Object(c)) = (v.as_object_mut(), p.counters.to_json())
        {
            obj.extend(c);
            obj.insert("outbox_pending".into(), self.outbox.pending_len().into());
            obj.insert("outbox_writable".into(), self.outbox.writable().into());
            obj.insert(
                "inbox_pending".into(),
                self.inbox.as_ref().map_or(0, Inbox::len).into(),
            );
            obj.insert("inbox_refused".into(), self.inbox_refused.into());
            obj.insert("triage_backlog".into(), self.backlog.len().into());
            obj.insert("awaiting_ack".into(), self.delivery.open_alarms().into());
            obj.insert("denied".into(), self.delivery.denied_count().into());
        }
        v
    }

    fn publish_status(&mut self) {
        self.last_status_ms = self.s.now_ms();
        let v = self.status_json();
        self.notifier.status(&status_line(&v));
        if let Err(e) = mqtt::publish_info(
            &self.client,
            self.topics.status(),
            v.to_string().into_bytes(),
            true,
        ) {
            tracing::warn!(error = %e, "cannot publish status");
        }
    }
}

/// The one-line form of the status document for `systemctl status`: what an
/// operator checks first — work waiting, answers by kind (passages answers are
/// among the diagnosed), restarts, diagnoses not yet acknowledged, and those
/// the broker refused (its ACL, most likely).
fn status_line(v: &serde_json::Value) -> String {
    format!(
        "queue {} diagnosed {} (passages {}) degraded {} triage {} restarts {} lost {} inbox {} unacked {} outbox {} denied {}",
        v["queue_depth"],
        v["diagnosed"],
        v["passages"],
        v["degraded"],
        v["triage"],
        v["slot_restarts"],
        v["slots_lost"],
        v["inbox_pending"],
        v["awaiting_ack"],
        v["outbox_pending"],
        v["denied"]
    )
}

async fn worker(
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
        let d = tokio::select! {
            // Dropping the job leaves its alarms unacknowledged; `stop`
            // cancels the generation still running on the slot thread.
            _ = cancel.cancelled() => return slot,
            d = s.pipeline.diagnose(&mut slot, job.primary()) => d,
        };
        let _ = done.send(Done {
            alarms: job.alarms,
            diagnosis: d,
            slot: Some(slot.id),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_line_shows_passages_answers_and_undelivered_and_refused_diagnoses() {
        let v = serde_json::json!({
            "queue_depth": 2, "diagnosed": 7, "passages": 3, "degraded": 1, "triage": 0,
            "slot_restarts": 1, "slots_lost": 0, "awaiting_ack": 4, "outbox_pending": 5,
            "inbox_pending": 6, "denied": 2,
        });
        assert_eq!(
            status_line(&v),
            "queue 2 diagnosed 7 (passages 3) degraded 1 triage 0 restarts 1 lost 0 inbox 6 unacked 4 outbox 5 denied 2"
        );
    }
}
