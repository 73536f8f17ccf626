//! The hub: the one task that owns the MQTT client, the delivery machine,
//! the inbox and the outbox, so none of them needs a lock. It takes alarms
//! in (checks them, journals them, queues or triages them), stores the
//! diagnoses the workers hand back, acknowledges and publishes in group
//! commits, and reports the status and its counters.
//!
//! Disk writes are grouped: the hub appends the alarms and diagnoses of a
//! burst without fsync, and when no more input is waiting (or a batch is
//! full) `flush` fsyncs the outbox and the inbox once each, then
//! acknowledges the burst's alarms and publishes its diagnoses. That is what
//! takes a storm off the broker faster than the model answers it.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::Publish;
use rumqttc::v5::AsyncClient;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::blame::{self, Culprit};
use super::delivery::{self, Delivery, Key, Output, Receipt, Settings};
use super::inbox::{self, Inbox};
use super::mqtt::{self, Inbound};
use super::outbox::{self, Outbox};
use super::queue::Offer;
use super::systemd::Notifier;
use super::{FromWorker, Shared};
use crate::alarm::{self, Alarm, Topics};
use crate::config::MqttConfig;
use crate::diagnosis::Diagnosis;

/// What the hub counts of its intake, for the status: written by the hub
/// alone, so plain numbers.
#[derive(Debug, Default)]
struct Intake {
    /// Alarms that failed the checks, reported on the error topic.
    rejected: u64,
    /// Of the error reports, those that found the mqtt client's queue full.
    error_reports_dropped: u64,
    /// Redeliveries acknowledged without a new diagnosis.
    replayed: u64,
    /// Alarms merged into a queued job for the same equipment and code.
    merged: u64,
}

/// The serving loop's state: the delivery machine, the inbox, the outbox
/// and the MQTT client. Owned by one task, so none of it needs a lock.
pub(super) struct Hub {
    s: Arc<Shared>,
    /// The daemon's MQTT settings: topics, the alarm size limit, the broker
    /// named in the journal.
    mqtt: MqttConfig,
    intake: Intake,
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
    /// Workers waiting for their staged diagnoses to be published.
    published: Vec<tokio::sync::oneshot::Sender<()>>,
    /// The connection the poller last reported up; None while it is down.
    live: Option<u64>,
    /// Alarms to answer from retrieval alone (the queue was full), taken
    /// when no input is waiting: triage costs a retrieval each, and must not
    /// slow the intake that acknowledges a storm.
    backlog: std::collections::VecDeque<Vec<(Alarm, Key)>>,
    /// Alarms triaged at once because the inbox was full or failing.
    inbox_refused: u64,
    /// Alarms answered without the model because their handling aborted
    /// the daemon `inbox::POISON_AFTER` times.
    poisoned: u64,
    /// Acks the client's queue refused; retried on the next tick.
    unsent_acks: Vec<Publish>,
    /// Connected and the alarm subscription not yet confirmed.
    subscribe_pending: bool,
    subscribed_ms: u64,
    ready: bool,
    last_status_ms: u64,
    /// Test hook: extra time every inbound alarm costs (see `intake_delay`).
    intake_delay: Option<Duration>,
    /// Test hook: how long the first inbound alarm stops the hub (see
    /// `intake_stall`).
    intake_stall: Option<Duration>,
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
    fault_ms("slow-intake:")
}

/// Fault injection: `TIDEWATCH_FAULT=stall-intake:MS` stops the hub's thread
/// for MS at the first inbound alarm, once, as an fsync on a busy eMMC or a
/// starved core does.
fn intake_stall() -> Option<Duration> {
    fault_ms("stall-intake:")
}

fn fault_ms(prefix: &str) -> Option<Duration> {
    crate::fault::spec()?
        .strip_prefix(prefix)?
        .parse()
        .ok()
        .map(Duration::from_millis)
}

impl Hub {
    pub(super) fn new(
        s: Arc<Shared>,
        mqtt: MqttConfig,
        client: AsyncClient,
        outbox: Outbox,
        inbox: Option<Inbox>,
        notifier: Arc<Notifier>,
    ) -> Self {
        let delivery = delivery_for(&outbox);
        let topics = Topics {
            prefix: mqtt.topic_prefix.clone(),
        };
        Hub {
            s,
            mqtt,
            intake: Intake::default(),
            client,
            topics,
            notifier,
            delivery,
            outbox,
            inbox,
            unsent_acks: Vec::new(),
            unsynced: Vec::new(),
            staged: Vec::new(),
            published: Vec::new(),
            live: None,
            backlog: std::collections::VecDeque::new(),
            inbox_refused: 0,
            poisoned: 0,
            subscribe_pending: false,
            subscribed_ms: 0,
            ready: false,
            last_status_ms: 0,
            intake_delay: intake_delay(),
            intake_stall: intake_stall(),
        }
    }

    /// Says goodbye: STOPPING to systemd, then the offline status and the
    /// DISCONNECT to the client. True when both are queued on a connection
    /// that is up, so the poller will write them.
    pub(super) fn sign_off(&self) -> bool {
        self.notifier.stopping();
        tracing::info!("shutting down; alarms not yet answered stay in the inbox (or unacknowledged) for the next start");
        let offline =
            serde_json::json!({"state": "offline", "ts": crate::diagnosis::now_rfc3339()});
        let queued = mqtt::publish_info(
            &self.client,
            self.topics.status(),
            offline.to_string().into_bytes(),
            true,
        )
        .is_ok()
            && self.client.try_disconnect().is_ok();
        queued && self.delivery.is_connected()
    }

    pub(super) async fn serve(
        &mut self,
        mut events: mpsc::UnboundedReceiver<Inbound>,
        mut qos0: mpsc::Receiver<mqtt::Qos0>,
        mut done: mpsc::UnboundedReceiver<FromWorker>,
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
                Some(m) = done.recv() => match m {
                    FromWorker::SlotLost(c) => self.slot_lost(&c),
                    FromWorker::Done(d) => {
                        self.published.extend(d.published);
                        self.finish(d.alarms, d.diagnosis, d.slot)
                    }
                },
                Some(ev) = events.recv() => self.on_event(ev).await,
                Some(mqtt::Qos0 { publish, room }) = qos0.recv() => {
                    self.intake(publish, true).await;
                    // Taken: the poller may read as much again.
                    drop(room);
                }
                _ = tick.tick() => self.on_tick(),
                _ = std::future::ready(()), if idle_work => {
                    self.idle();
                    // An always-ready branch never hands the thread back on
                    // its own: the receivers above, whose coop budget only
                    // refills at a yield, and a worker this task woke (held
                    // in this thread's LIFO slot) would wait behind a long
                    // backlog of triage.
                    tokio::task::yield_now().await;
                }
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
            let d = self.triage(&alarms[0].0, alarms[0].1);
            self.finish(alarms, d, None);
        }
    }

    /// Alarms the inbox kept across a restart (a crash, a SIGTERM mid-work):
    /// diagnosed again, unless the outbox shows they were answered. Their
    /// receipts were acknowledged, or will be at once on redelivery. One
    /// whose handling aborted the daemon `POISON_AFTER` times is answered
    /// without the model (see `poisoned`). Every one is answered.
    pub(super) fn replay(&mut self) {
        let Some(inbox) = &self.inbox else {
            return;
        };
        let held = inbox.held().cloned();
        let Sorted {
            unanswered,
            release: mut answered,
        } = sort_held(held, &mut self.delivery, &self.outbox);
        let mut again = 0usize;
        for h in unanswered {
            match self.read_alarm(&h.topic, &h.payload) {
                Ok(a) if h.aborts >= inbox::POISON_AFTER => self.poisoned(a, &h),
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

    /// A poison alarm: its handling aborted the daemon `POISON_AFTER` times.
    /// It is never given to the model again, and an error report names it.
    /// It is answered from the manuals (triage); if that aborted too, with
    /// an answer that reads neither (see `unread_answer`). Either way it is
    /// answered: the error report alone is neither retained nor carried by
    /// a bridge.
    fn poisoned(&mut self, a: Alarm, h: &inbox::Held) {
        self.poisoned += 1;
        let triage = h.aborts == inbox::POISON_AFTER;
        let reason = if triage {
            format!("this alarm aborted tidewatch {} times while it was diagnosed; it is answered from the manuals without the model (mode triage) and never given to the model again", h.aborts)
        } else {
            format!("this alarm aborted tidewatch {} times, its answer from the manuals included; it is answered without the model or the manuals", h.aborts)
        };
        tracing::error!(alarm_id = %a.id, topic = %h.topic, aborts = h.aborts, "poison alarm: {reason}");
        self.publish_error(serde_json::json!({
            "topic": h.topic,
            "alarm_id": a.id,
            "reason": reason,
            "bytes": h.payload.len(),
            "ts": crate::diagnosis::now_rfc3339(),
        }));
        let d = if triage {
            self.triage(&a, h.key)
        } else {
            unread_answer(&a, &self.s.pipeline.model.info.name)
        };
        self.finish(vec![(a, h.key)], d, None);
    }

    /// The answer from the manuals alone: a panic in it is counted against
    /// the alarm (see `blame`).
    fn triage(&self, a: &Alarm, key: Key) -> Diagnosis {
        let culprit = Culprit {
            key,
            alarm_id: a.id.clone(),
        };
        blame::triaging(culprit, || self.s.pipeline.triage(a))
    }

    /// The watchdog gave up on a slot while it ran this alarm: one abort
    /// against it, on disk before the answer the worker hands in next.
    fn slot_lost(&mut self, c: &Culprit) {
        let Some(inbox) = &mut self.inbox else {
            return;
        };
        let counted = inbox
            .count_abort(&c.key)
            .and_then(|_| tokio::task::block_in_place(|| inbox.sync()));
        match counted {
            Ok(()) => {
                tracing::warn!(alarm_id = %c.alarm_id, "a slot was lost on this alarm; counted against it")
            }
            Err(e) => {
                tracing::warn!(alarm_id = %c.alarm_id, error = %e, "cannot count a lost slot against its alarm in the inbox")
            }
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
        let (alarms, diagnoses) = (unsynced.len(), staged.len());
        // Receipts acknowledged by this flush: what deploy/bench-intake.sh
        // counts, journaled alarms and those answered at once alike.
        let mut acked = 0;
        let acks =
            |out: &[Output<Publish>]| out.iter().filter(|o| matches!(o, Output::Ack(_))).count();
        if inbox_ok {
            for key in &unsynced {
                let out = self.delivery.journaled(key);
                acked += acks(&out);
                self.carry_out(out);
            }
        }
        for (key, seq, durable) in staged {
            if outbox_ok && durable {
                // Its answer is on disk and will be delivered whatever
                // happens: the alarm is as safe as if journaled (this is
                // what acks alarms the inbox had no room for).
                let out = self.delivery.journaled(&key);
                acked += acks(&out);
                self.carry_out(out);
            }
            let out = self.delivery.stored(key, seq);
            self.carry_out(out);
        }
        for p in self.published.drain(..) {
            let _ = p.send(());
        }
        tracing::debug!(alarms, diagnoses, acked, "flushed");
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
                let out = self.delivery.connected(session_present);
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
                    let cfg = &self.mqtt;
                    tracing::info!(broker = %format!("{}:{}", cfg.host, cfg.port), "tidewatch ready");
                }
            }
            Inbound::Alarm {
                publish,
                epoch,
                room,
            } => {
                // Read on a connection already lost: answered, but its ack
                // handle means nothing now; the broker redelivers it.
                let live = self.live == Some(epoch);
                self.intake(*publish, live).await;
                // Taken: the poller may read as much again.
                drop(room);
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
            Inbound::Disconnected { dropped, seen } => {
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
                    let key = self.outbox.get(seq).map(|e| e.key);
                    let r = tokio::task::block_in_place(|| self.outbox.ack(seq));
                    if let Err(err) = r {
                        tracing::error!(error = %err, "cannot record a delivered diagnosis");
                    }
                    // The broker has the answer: its alarm need not be
                    // replayed. A diagnosis on disk released it at the
                    // flush already; one kept in memory (the outbox full
                    // or failing) releases it only now.
                    if let (Some(key), Some(inbox)) = (key, &mut self.inbox) {
                        if let Err(e) = inbox.done(&key) {
                            tracing::warn!(error = %e, "cannot update the inbox; the alarm may be answered again after a restart");
                        }
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
        self.intake.rejected += 1;
        let topic: String = String::from_utf8_lossy(&p.topic)
            .chars()
            .take(256)
            .collect();
        let alarm_id = readable_id(&p.payload);
        tracing::warn!(topic = %topic, reason = %reason, bytes = p.payload.len(), alarm_id = alarm_id.as_deref().unwrap_or("-"), "alarm rejected");
        let mut err = serde_json::json!({
            "topic": topic,
            "reason": reason,
            "bytes": p.payload.len(),
            "ts": crate::diagnosis::now_rfc3339(),
        });
        if let Some(id) = alarm_id {
            err["alarm_id"] = id.into();
        }
        self.publish_error(err);
        // A reject read on a lost connection is reported again when the
        // broker redelivers it; its handle must not ack on the new one.
        if live {
            self.ack(p);
        }
    }

    /// Publishes a report on the error topic. Never waits for the client:
    /// the poller may itself be waiting for the hub to take a QoS 0 alarm,
    /// and the report is advisory.
    fn publish_error(&mut self, report: serde_json::Value) {
        if let Err(e) = mqtt::publish_info(
            &self.client,
            self.topics.error(),
            report.to_string().into_bytes(),
            false,
        ) {
            self.intake.error_reports_dropped += 1;
            tracing::warn!(error = %e, "cannot publish error report: the mqtt client queue is full");
        }
    }

    /// The alarm a publish on `topic` carries, or why it is not one: the one
    /// check for what comes in and what the inbox replays.
    fn read_alarm(&self, topic: &str, payload: &[u8]) -> Result<Alarm, String> {
        let equipment = alarm::equipment_from_topic(&self.topics.prefix, topic).map_err(|_| {
            format!(
                "topic {topic:?} is not {}/alarm/{{equipment}}: one topic level after alarm/, the equipment id",
                self.topics.prefix
            )
        })?;
        alarm::parse(payload, Some(equipment), self.mqtt.max_alarm_bytes).map_err(|e| e.to_string())
    }

    /// Takes one alarm. `live`: it came on the connection that is up, so
    /// its receipt can be acknowledged.
    async fn intake(&mut self, p: Publish, live: bool) {
        crate::crash::injected_panic(crate::crash::Place::Hub, &p.payload);
        if let Some(d) = self.intake_delay {
            tokio::time::sleep(d).await;
        }
        if let Some(d) = self.intake_stall.take() {
            tracing::warn!(
                ms = d.as_millis() as u64,
                "fault injection: the hub stopped for {} ms",
                d.as_millis()
            );
            tokio::task::block_in_place(|| std::thread::sleep(d));
        }
        // MQTT 5 hands topics over as bytes; brokers check they are UTF-8.
        let Ok(topic) = std::str::from_utf8(&p.topic).map(str::to_string) else {
            return self.reject(p, "topic is not UTF-8".into(), live);
        };
        let a = match self.read_alarm(&topic, &p.payload) {
            Ok(a) => a,
            Err(reason) => return self.reject(p, reason, live),
        };
        let key = Key::of(&topic, &p.payload);
        let payload = p.payload.clone();
        // The ack needs only the packet id: a handle that kept the payload
        // would hold up to `RECEIVE_MAXIMUM` alarms' bytes until their acks,
        // outside the poller's budget.
        let handle = Publish {
            payload: Default::default(),
            topic: Default::default(),
            ..p
        };
        let (receipt, out) = self.delivery.received(key, live.then_some(handle));
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
        let offer = self.s.queue().offer(a, key, self.s.now_ms());
        if matches!(offer, Offer::Queued | Offer::Merged | Offer::Evicted(_)) {
            self.s.preempt_if_needed();
        }
        match offer {
            Offer::Queued => self.s.work.notify_one(),
            Offer::Merged => self.intake.merged += 1,
            Offer::Triage(a, k) if journaled => self.backlog.push_back(vec![(a, k)]),
            Offer::Triage(a, k) => {
                let d = self.triage(&a, k);
                self.finish(vec![(a, k)], d, None);
            }
            Offer::Evicted(job) => {
                self.s.work.notify_one();
                self.backlog.push_back(job.alarms);
            }
        }
    }

    fn count_replayed(&mut self) {
        self.intake.replayed += 1;
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
                coverage = d.coverage.as_str(),
                rule = d.coverage_rule.unwrap_or("-"),
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
            obj.insert("poisoned".into(), self.poisoned.into());
            let i = &self.intake;
            obj.insert("rejected".into(), i.rejected.into());
            obj.insert(
                "error_reports_dropped".into(),
                i.error_reports_dropped.into(),
            );
            obj.insert("replayed".into(), i.replayed.into());
            obj.insert("merged".into(), i.merged.into());
            obj.insert("queue_depth".into(), self.s.queue().len().into());
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

/// The answer for a poison alarm whose answer from the manuals aborted the
/// daemon too: built from the alarm's own fields, reading nothing else, and
/// saying why.
fn unread_answer(a: &Alarm, model: &str) -> Diagnosis {
    let mut d = crate::diagnosis::unmatched(a, model, Default::default());
    d.mode = crate::diagnosis::Mode::Triage;
    d.summary = format!(
        "No diagnosis: handling this alarm ({} on {}) aborted tidewatch repeatedly, so neither the model nor the manuals were consulted. Check the equipment by hand.",
        a.code, a.equipment
    );
    d
}

/// The delivery machine as the outbox left it: what it holds to deliver,
/// and the alarms it remembers delivered.
fn delivery_for<T>(outbox: &Outbox) -> Delivery<T> {
    let mut delivery = Delivery::new(Settings {
        remembered: outbox::CACHE_ENTRIES,
        ..Settings::default()
    });
    delivery.restore(
        outbox.pending().map(|e| (e.seq, e.key)),
        outbox.delivered().copied(),
    );
    delivery
}

/// The inbox's alarms as replay sorts them.
#[derive(Debug, Default)]
struct Sorted {
    /// Not answered yet: to answer again.
    unanswered: Vec<inbox::Held>,
    /// Answered, and safe to drop from the inbox.
    release: Vec<Key>,
}

/// Sorts the alarms the inbox held across a restart. Those answered
/// (delivered, or in the outbox to deliver) are not answered again; an
/// outbox entry stands in for its alarm only once it is known to be on disk,
/// and until then the alarm stays held, leaving when its diagnosis is
/// delivered.
fn sort_held<T>(
    held: impl Iterator<Item = inbox::Held>,
    delivery: &mut Delivery<T>,
    outbox: &Outbox,
) -> Sorted {
    let in_outbox: std::collections::HashSet<Key> = outbox.pending().map(|e| e.key).collect();
    let mut sorted = Sorted::default();
    for h in held {
        if delivery.restore_journaled(h.key) {
            sorted.unanswered.push(h);
        } else if release_answered(in_outbox.contains(&h.key), outbox.settled()) {
            sorted.release.push(h.key);
        }
    }
    sorted
}

/// Whether replay may drop from the inbox an alarm already answered: one
/// delivered may go; one whose diagnosis waits in the outbox only when what
/// the outbox read at start is on disk (a crash between a store and its
/// fsync leaves it in the page cache, and a power cut then would lose both
/// the alarm and its answer).
fn release_answered(waiting_in_outbox: bool, outbox_settled: bool) -> bool {
    !waiting_in_outbox || outbox_settled
}

/// The one-line form of the status document for `systemctl status`: what an
/// operator checks first — work waiting, answers by kind (passages answers are
/// among the diagnosed), restarts, poison alarms, diagnoses not yet acknowledged, and those
/// the broker refused (its ACL, most likely).
fn status_line(v: &serde_json::Value) -> String {
    format!(
        "queue {} diagnosed {} (passages {}) degraded {} triage {} restarts {} lost {} poisoned {} inbox {} unacked {} outbox {} denied {}",
        v["queue_depth"],
        v["diagnosed"],
        v["passages"],
        v["degraded"],
        v["triage"],
        v["slot_restarts"],
        v["slots_lost"],
        v["poisoned"],
        v["inbox_pending"],
        v["awaiting_ack"],
        v["outbox_pending"],
        v["denied"]
    )
}

/// The `id` of a rejected alarm, when its payload is JSON with a string id:
/// the report then names the alarm its sender knows. Payloads past 1 MiB are
/// not parsed for it.
fn readable_id(payload: &[u8]) -> Option<String> {
    if payload.len() > 1 << 20 {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Id {
        id: String,
    }
    let id = serde_json::from_slice::<Id>(payload).ok()?.id;
    Some(id.chars().take(64).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replay_keeps_an_alarm_whose_answer_in_the_outbox_may_not_be_on_disk() {
        let k = |i: u8| Key([i; 16]);
        let held = |i: u8| inbox::Held {
            key: k(i),
            topic: format!("t/alarm/E{i}"),
            payload: b"{}".to_vec(),
            aborts: 0,
        };
        let d = tempfile::tempdir().unwrap();
        let (mut ob, _) = Outbox::open(d.path(), 1 << 20);
        ob.put(k(1), "waiting", "t/diagnosis/E1", b"{}");
        let delivered = ob.put(k(2), "delivered", "t/diagnosis/E2", b"{}").seq;
        ob.sync().unwrap();
        ob.ack(delivered).unwrap();
        drop(ob);
        let sort = |ob: &Outbox| {
            let s = sort_held(
                [held(1), held(2), held(3)].into_iter(),
                &mut delivery_for::<()>(ob),
                ob,
            );
            let unanswered: Vec<Key> = s.unanswered.iter().map(|h| h.key).collect();
            (unanswered, s.release)
        };
        // What the outbox read at start could not be fsync'd: it may be in
        // the page cache only, and a power cut would lose the alarm with it.
        crate::fault::disk::fail("outbox write", nix::errno::Errno::EIO);
        let (ob, r) = Outbox::open(d.path(), 1 << 20);
        crate::fault::disk::heal();
        assert!(!ob.settled(), "{r:?}");
        let (unanswered, release) = sort(&ob);
        assert_eq!(
            unanswered,
            vec![k(3)],
            "answered ones are not answered again"
        );
        assert_eq!(
            release,
            vec![k(2)],
            "only the delivered one leaves the inbox"
        );
        drop(ob);
        let (ob, _) = Outbox::open(d.path(), 1 << 20);
        assert!(ob.settled());
        let (unanswered, release) = sort(&ob);
        assert_eq!(unanswered, vec![k(3)]);
        assert_eq!(release, vec![k(1), k(2)], "its answer is on disk");
    }

    #[test]
    fn status_line_shows_passages_answers_and_undelivered_and_refused_diagnoses() {
        let v = serde_json::json!({
            "queue_depth": 2, "diagnosed": 7, "passages": 3, "degraded": 1, "triage": 0,
            "slot_restarts": 1, "slots_lost": 0, "awaiting_ack": 4, "outbox_pending": 5,
            "inbox_pending": 6, "denied": 2, "poisoned": 1,
        });
        assert_eq!(
            status_line(&v),
            "queue 2 diagnosed 7 (passages 3) degraded 1 triage 0 restarts 1 lost 0 poisoned 1 inbox 6 unacked 4 outbox 5 denied 2"
        );
    }
}
