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

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::Publish;
use rumqttc::v5::AsyncClient;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::delivery::{self, Delivery, Key, Output, Receipt, Settings};
use super::inbox::{self, Inbox};
use super::mqtt::{self, Inbound};
use super::outbox::{self, Outbox};
use super::queue::Offer;
use super::systemd::Notifier;
use super::{Done, Shared};
use crate::alarm::{self, Alarm, Topics};
use crate::diagnosis::Diagnosis;

/// The serving loop's state: the delivery machine, the inbox, the outbox
/// and the MQTT client. Owned by one task, so none of it needs a lock.
pub(super) struct Hub {
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
    pub(super) fn new(
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
    pub(super) fn replay(&mut self) {
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
        if matches!(offer, Offer::Queued | Offer::Merged | Offer::Evicted(_)) {
            self.s.preempt_if_needed();
        }
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
