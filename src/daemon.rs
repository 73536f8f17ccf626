//! The daemon: wires MQTT intake, the queue, one worker per slot, status
//! reporting and systemd notifications, and shuts them down in order.
//!
//! Each long-lived piece is an async fn taking a `CancellationToken`; only
//! `main` listens for signals. On cancel, unfinished alarms are left
//! unacknowledged so the broker redelivers them to the next start.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Publish};
use tokio::sync::{mpsc, Notify};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::alarm::{self, Alarm};
use crate::config::Config;
use crate::diagnosis::Diagnosis;
use crate::llm::{Model, Slot, SlotSettings};
use crate::mqtt::{self, Inbound, Topics};
use crate::outbox::Outbox;
use crate::pipeline::{Counters, Pipeline};
use crate::queue::{Offer, Scheduler};
use crate::retrieval::Index;
use crate::systemd::{self, Notifier};

#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    #[error(transparent)]
    Index(#[from] crate::retrieval::IndexError),
    #[error(transparent)]
    Llm(#[from] crate::llm::LlmError),
    #[error(transparent)]
    Mqtt(#[from] mqtt::MqttError),
    #[error(transparent)]
    Outbox(#[from] crate::outbox::OutboxError),
    #[error("state_dir {path}: {source}")]
    StateDir {
        path: String,
        source: std::io::Error,
    },
}

/// Everything the tasks share.
struct Shared {
    pipeline: Pipeline,
    client: AsyncClient,
    topics: Topics,
    sched: Mutex<Scheduler<Publish>>,
    work: Notify,
    epoch: Instant,
    mqtt_turned: Arc<AtomicU64>,
    notifier: Arc<Notifier>,
    keep_alive: Duration,
    outbox: Mutex<Outbox>,
    /// Wakes the publisher: a new outbox entry, or a (re)connection.
    outbox_ready: Notify,
    connected: AtomicBool,
    /// Bumped on every disconnect, so the publisher stops waiting for a PUBACK
    /// that can no longer come.
    conn_epoch: AtomicU64,
    pubacks: tokio::sync::Mutex<mpsc::Receiver<()>>,
    puback_tx: mpsc::Sender<()>,
}

/// Loads the index and the model and starts `n` slots. Shared by `run`,
/// `diagnose` and `eval`. With `warm`, each slot starts with the static
/// prompt prefix in its KV cache, restored from (or saved to) `state_dir/kv`;
/// `eval` goes without, to measure a cold start.
pub async fn load(
    cfg: &Config,
    warm: bool,
) -> Result<(Arc<Index>, Arc<Model>, Vec<Slot>, Arc<Counters>), DaemonError> {
    let index = Arc::new(Index::open(&cfg.knowledge.index)?);
    let model_path = cfg.llm.model.clone();
    let llm_cfg = cfg.llm.clone();
    let model = tokio::task::spawn_blocking(move || Model::load(&model_path, &llm_cfg))
        .await
        .map_err(|e| crate::llm::LlmError::Load {
            path: cfg.llm.model.display().to_string(),
            reason: e.to_string(),
        })??;
    let model = Arc::new(model);
    let counters = Arc::new(Counters::default());
    let settings = SlotSettings {
        ctx: cfg.llm.ctx,
        batch: cfg.llm.batch,
        threads: cfg.llm.threads,
        cpus: cfg.llm.cpus.clone(),
        prefix: if warm {
            Some(crate::llm::PrefixSpec {
                text: model.static_prefix()?,
                dir: Some(cfg.state_dir.join("kv")),
                model_key: model.info.key.clone(),
            })
        } else {
            None
        },
    };
    let mut slots = Vec::new();
    for i in 0..cfg.llm.slots as usize {
        slots.push(
            Slot::start(
                i,
                model.model.clone(),
                settings.clone(),
                counters.slots.clone(),
            )
            .await?,
        );
    }
    Ok((index, model, slots, counters))
}

/// `load`, assembled into a pipeline: what the one-shot commands need.
pub async fn load_pipeline(cfg: Config, warm: bool) -> Result<(Pipeline, Vec<Slot>), DaemonError> {
    let (index, model, slots, counters) = load(&cfg, warm).await?;
    let pipeline = Pipeline {
        index,
        model,
        cfg: Arc::new(cfg),
        counters,
    };
    Ok((pipeline, slots))
}

/// Runs the daemon until `cancel` fires.
pub async fn run(cfg: Config, cancel: CancellationToken) -> Result<(), DaemonError> {
    let notifier = Arc::new(Notifier::from_env());
    std::fs::create_dir_all(&cfg.state_dir).map_err(|source| DaemonError::StateDir {
        path: cfg.state_dir.display().to_string(),
        source,
    })?;
    // Everything that can fail on a bad config or state dir is checked before
    // the model loads: it is quicker to report, and an error returned while a
    // slot thread is still decoding its warm-up raced llama.cpp's teardown at
    // exit (killed by a signal instead of exiting 78, seen in CI).
    let mqtt_options = mqtt::options(&cfg.mqtt)?;
    let (outbox, report) = Outbox::open(&cfg.state_dir, cfg.outbox.max_bytes)?;
    if report.torn_bytes > 0 {
        tracing::warn!(
            bytes = report.torn_bytes,
            "outbox ended in a torn record (power loss?); it was cut off"
        );
    }
    if report.pending > 0 {
        tracing::info!(
            pending = report.pending,
            "undelivered diagnoses in the outbox will be replayed"
        );
    }
    notifier.status("loading model and index");
    let (index, model, slots, counters) = load(&cfg, true).await?;
    tracing::info!(
        model = %model.info.name,
        arch = %model.info.architecture,
        template = model.family().name(),
        passages = index.n_passages(),
        slots = slots.len(),
        "model and index loaded"
    );
    let cfg = Arc::new(cfg);
    let topics = Topics {
        prefix: cfg.mqtt.topic_prefix.clone(),
    };
    let (client, eventloop) = AsyncClient::new(mqtt_options, 256);
    let (puback_tx, pubacks) = mpsc::channel(64);
    let epoch = Instant::now();
    let shared = Arc::new(Shared {
        pipeline: Pipeline {
            index,
            model,
            cfg: cfg.clone(),
            counters,
        },
        client,
        topics,
        sched: Mutex::new(Scheduler::new(
            cfg.queue.capacity,
            cfg.queue.dedup_window.as_millis() as u64,
        )),
        work: Notify::new(),
        epoch,
        mqtt_turned: Arc::new(AtomicU64::new(0)),
        notifier: notifier.clone(),
        keep_alive: cfg.mqtt.keep_alive,
        outbox: Mutex::new(outbox),
        outbox_ready: Notify::new(),
        connected: AtomicBool::new(false),
        conn_epoch: AtomicU64::new(0),
        pubacks: tokio::sync::Mutex::new(pubacks),
        puback_tx,
    });
    let tracker = TaskTracker::new();
    let (tx, mut rx) = mpsc::channel(1024);
    tracker.spawn(mqtt::run_poller(
        eventloop,
        tx,
        shared.mqtt_turned.clone(),
        epoch,
        cancel.clone(),
    ));

    // READY only once the broker has accepted us: before that we cannot serve.
    let addr = format!("{}:{}", cfg.mqtt.host, cfg.mqtt.port);
    let first = tokio::select! {
        _ = cancel.cancelled() => None,
        m = wait_connected(&mut rx) => m,
    };
    let Some(session_present) = first else {
        tracker.close();
        tracker.wait().await;
        return Ok(());
    };
    on_connected(&shared, session_present).await;
    let mut early = Vec::new();
    tokio::select! {
        _ = cancel.cancelled() => {}
        _ = wait_subscribed(&mut rx, &mut early) => {}
    }
    notifier.ready();
    tracing::info!(broker = %addr, "tidewatch ready");

    for slot in slots {
        tracker.spawn(worker(shared.clone(), slot, cancel.clone()));
    }
    tracker.spawn(status_loop(shared.clone(), cancel.clone()));
    tracker.spawn(publisher(shared.clone(), cancel.clone()));
    {
        let s = shared.clone();
        let healthy = move || {
            let limit = (s.keep_alive * 3).max(Duration::from_secs(30));
            crate::watchdog::process_alive(
                s.mqtt_turned.load(Ordering::Relaxed),
                s.epoch.elapsed().as_millis() as u64,
                limit,
                s.pipeline.counters.slots.lost.load(Ordering::Relaxed),
            )
        };
        tracker.spawn(systemd::run_watchdog(
            notifier.clone(),
            healthy,
            cancel.clone(),
        ));
    }

    let mut early = early.into_iter();
    loop {
        let m = match early.next() {
            Some(m) => Some(m),
            None => tokio::select! {
                _ = cancel.cancelled() => break,
                m = rx.recv() => m,
            },
        };
        match m {
            Some(Inbound::Alarm(p)) => intake(&shared, p).await,
            Some(Inbound::Connected { session_present }) => {
                on_connected(&shared, session_present).await
            }
            Some(Inbound::PubAck(_)) => {
                let _ = shared.puback_tx.try_send(());
            }
            Some(Inbound::Disconnected(_)) => {
                if shared.connected.swap(false, Ordering::SeqCst) {
                    shared.conn_epoch.fetch_add(1, Ordering::SeqCst);
                    shared.outbox_ready.notify_one();
                }
            }
            Some(Inbound::SubAck) => {}
            None => break,
        }
    }

    notifier.stopping();
    tracing::info!("shutting down; unfinished alarms stay unacknowledged for redelivery");
    let offline = serde_json::json!({"state": "offline", "ts": crate::diagnosis::now_rfc3339()});
    let _ = tokio::time::timeout(
        Duration::from_secs(2),
        mqtt::publish_info(
            &shared.client,
            shared.topics.status(),
            offline.to_string().into_bytes(),
            true,
        ),
    )
    .await;
    let _ = tokio::time::timeout(Duration::from_secs(1), shared.client.disconnect()).await;
    tracker.close();
    // The poller exits on cancel; give the disconnect a moment to flush first.
    tokio::time::sleep(Duration::from_millis(200)).await;
    tracker.wait().await;
    Ok(())
}

async fn wait_connected(rx: &mut mpsc::Receiver<Inbound>) -> Option<bool> {
    while let Some(m) = rx.recv().await {
        if let Inbound::Connected { session_present } = m {
            return Some(session_present);
        }
    }
    None
}

/// Waits for the broker to confirm the alarm subscription: until then an
/// alarm published by a sensor would have no subscriber and be dropped.
async fn wait_subscribed(rx: &mut mpsc::Receiver<Inbound>, early: &mut Vec<Inbound>) {
    while let Some(m) = rx.recv().await {
        match m {
            Inbound::SubAck => return,
            other => early.push(other),
        }
    }
}

async fn on_connected(s: &Shared, session_present: bool) {
    // Subscribe on every connection: a broker that lost our session (restart
    // without persistence, first contact) lost the subscription too, and one
    // that kept it treats the repeat as a no-op.
    tracing::info!(session_present, "connected to the broker");
    if let Err(e) = s
        .client
        .subscribe(s.topics.alarms(), rumqttc::QoS::AtLeastOnce)
        .await
    {
        tracing::error!(error = %e, "cannot subscribe to alarms");
    }
    s.connected.store(true, Ordering::SeqCst);
    s.outbox_ready.notify_one();
    publish_status(s).await;
}

fn outbox(s: &Shared) -> std::sync::MutexGuard<'_, Outbox> {
    s.outbox.lock().unwrap_or_else(|e| e.into_inner())
}

/// Delivers outbox entries one at a time: publish, wait for its PUBACK, mark
/// it delivered. One in flight makes every PUBACK unambiguous (rumqttc does not
/// say which publish a PUBACK answers); a diagnosis takes seconds to make, so
/// one round trip each costs nothing.
async fn publisher(s: Arc<Shared>, cancel: CancellationToken) {
    let mut acks = s.pubacks.lock().await;
    loop {
        let next = if s.connected.load(Ordering::SeqCst) {
            outbox(&s).first_pending()
        } else {
            None
        };
        let Some(e) = next else {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = s.outbox_ready.notified() => {}
                _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            }
            continue;
        };
        while acks.try_recv().is_ok() {}
        let epoch = s.conn_epoch.load(Ordering::SeqCst);
        if let Err(err) =
            mqtt::publish_diagnosis(&s.client, e.topic.clone(), e.payload.clone()).await
        {
            tracing::warn!(error = %err, "cannot hand a diagnosis to the MQTT client");
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        }
        loop {
            tokio::select! {
                _ = cancel.cancelled() => return,
                a = acks.recv() => {
                    if a.is_some() {
                        if let Err(err) = tokio::task::block_in_place(|| outbox(&s).ack(e.seq)) {
                            tracing::error!(error = %err, "cannot record a delivered diagnosis");
                        }
                    }
                    break;
                }
                _ = tokio::time::sleep(Duration::from_millis(250)) => {
                    // The PUBACK cannot come on a connection that is gone; the
                    // entry is republished after the reconnect.
                    if s.conn_epoch.load(Ordering::SeqCst) != epoch {
                        break;
                    }
                }
            }
        }
    }
}

fn status_json(s: &Shared) -> serde_json::Value {
    let mut v = serde_json::json!({
        "state": "online",
        "model": s.pipeline.model.info.name,
        "architecture": s.pipeline.model.info.architecture,
        "slots": s.pipeline.cfg.llm.slots,
        "ts": crate::diagnosis::now_rfc3339(),
    });
    if let (Some(obj), serde_json::Value::Object(c)) =
        (v.as_object_mut(), s.pipeline.counters.to_json())
    {
        obj.extend(c);
        obj.insert("outbox_pending".into(), outbox(s).pending_len().into());
    }
    v
}

async fn publish_status(s: &Shared) {
    let v = status_json(s);
    s.notifier.status(&format!(
        "queue {} diagnosed {} degraded {} triage {} restarts {} lost {}",
        v["queue_depth"],
        v["diagnosed"],
        v["degraded"],
        v["triage"],
        v["slot_restarts"],
        v["slots_lost"]
    ));
    if let Err(e) = mqtt::publish_info(
        &s.client,
        s.topics.status(),
        v.to_string().into_bytes(),
        true,
    )
    .await
    {
        tracing::warn!(error = %e, "cannot publish status");
    }
}

async fn status_loop(s: Arc<Shared>, cancel: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_secs(10));
    tick.tick().await;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => publish_status(&s).await,
        }
    }
}

async fn reject(s: &Shared, p: &Publish, reason: String) {
    s.pipeline.counters.rejected.fetch_add(1, Ordering::Relaxed);
    let topic: String = p.topic.chars().take(256).collect();
    tracing::warn!(topic = %topic, reason = %reason, bytes = p.payload.len(), "alarm rejected");
    let err = serde_json::json!({
        "topic": topic,
        "reason": reason,
        "bytes": p.payload.len(),
        "ts": crate::diagnosis::now_rfc3339(),
    });
    if let Err(e) = mqtt::publish_info(
        &s.client,
        s.topics.error(),
        err.to_string().into_bytes(),
        false,
    )
    .await
    {
        tracing::warn!(error = %e, "cannot publish error");
    }
    ack(s, p).await;
}

async fn ack(s: &Shared, p: &Publish) {
    if let Err(e) = s.client.ack(p).await {
        tracing::warn!(error = %e, "cannot acknowledge alarm");
    }
}

async fn intake(s: &Shared, p: Publish) {
    let equipment = match alarm::equipment_from_topic(&s.topics.prefix, &p.topic) {
        Ok(e) => e.to_string(),
        Err(e) => return reject(s, &p, e.to_string()).await,
    };
    let a = match alarm::parse(
        &p.payload,
        Some(&equipment),
        s.pipeline.cfg.mqtt.max_alarm_bytes,
    ) {
        Ok(a) => a,
        Err(e) => return reject(s, &p, e.to_string()).await,
    };
    // A redelivered alarm (broker restart, our crash before its ack) is
    // answered again from the outbox's cache, not by the model.
    let cached = outbox(s).answered(&a.id).cloned();
    if let Some(e) = cached {
        s.pipeline.counters.replayed.fetch_add(1, Ordering::Relaxed);
        tracing::info!(alarm_id = %a.id, "alarm already answered; replaying the cached diagnosis");
        match tokio::task::block_in_place(|| outbox(s).put(&a.id, &e.topic, &e.payload)) {
            Ok(_) => {
                ack(s, &p).await;
                s.outbox_ready.notify_one();
            }
            Err(err) => {
                tracing::error!(alarm_id = %a.id, error = %err, "cannot store the replayed diagnosis; alarm left for redelivery")
            }
        }
        return;
    }
    let now = s.epoch.elapsed().as_millis() as u64;
    let offer = {
        let mut q = s.sched.lock().unwrap_or_else(|e| e.into_inner());
        let o = q.offer(a, p, now);
        s.pipeline
            .counters
            .queue_depth
            .store(q.len() as u64, Ordering::Relaxed);
        o
    };
    match offer {
        Offer::Queued => s.work.notify_one(),
        Offer::Merged => {
            s.pipeline.counters.merged.fetch_add(1, Ordering::Relaxed);
        }
        Offer::Triage(a, p) => {
            let d = s.pipeline.triage(&a);
            deliver(s, &[(a, p)], d, None).await;
        }
        Offer::Evicted(job) => {
            s.work.notify_one();
            let d = s.pipeline.triage(job.primary());
            deliver(s, &job.alarms, d, None).await;
        }
    }
}

/// Publishes a diagnosis to every alarm it answers, then acknowledges them.
async fn deliver(s: &Shared, alarms: &[(Alarm, Publish)], d: Diagnosis, slot: Option<usize>) {
    for (a, p) in alarms {
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
        let payload = match serde_json::to_vec(&d) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode diagnosis");
                continue;
            }
        };
        let topic = s.topics.diagnosis(&a.equipment);
        // Durable first, then acknowledge: once the outbox has the diagnosis,
        // the alarm cannot be lost, whatever happens to the broker or to us.
        match tokio::task::block_in_place(|| outbox(s).put(&a.id, &topic, &payload)) {
            Ok(_) => {
                ack(s, p).await;
                s.outbox_ready.notify_one();
            }
            Err(e) => {
                tracing::error!(alarm_id = %a.id, error = %e, "diagnosis not stored; publishing directly and leaving the alarm unacknowledged for redelivery");
                let _ = mqtt::publish_diagnosis(&s.client, topic, payload).await;
            }
        }
    }
}

async fn worker(s: Arc<Shared>, mut slot: Slot, cancel: CancellationToken) {
    loop {
        let job = {
            let mut q = s.sched.lock().unwrap_or_else(|e| e.into_inner());
            let j = q.pop();
            s.pipeline
                .counters
                .queue_depth
                .store(q.len() as u64, Ordering::Relaxed);
            j
        };
        let Some(job) = job else {
            tokio::select! {
                _ = cancel.cancelled() => return,
                _ = s.work.notified() => {}
                // Belt and braces against a lost wake-up.
                _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            }
            continue;
        };
        tracing::info!(
            alarm_id = %job.primary().id,
            equipment = %job.primary().equipment,
            code = %job.primary().code,
            slot = slot.id,
            merged = job.alarms.len() - 1,
            "diagnosing"
        );
        let d = tokio::select! {
            // Dropping the job here leaves its alarms unacknowledged.
            _ = cancel.cancelled() => return,
            d = s.pipeline.diagnose(&mut slot, job.primary()) => d,
        };
        deliver(&s, &job.alarms, d, Some(slot.id)).await;
    }
}
