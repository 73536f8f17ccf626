//! The hub: the one task that owns the broker connection (`link`) and the
//! durable side (`store`: the delivery machine, the inbox and the outbox),
//! so none of them needs a lock. It takes alarms in (checks them, journals
//! them, queues or triages them), stores the diagnoses the workers hand
//! back, and reports the status and its counters.
//!
//! Feedback on a diagnosis comes in on the same connection and session. A
//! valid one becomes a site note (`feedback::Notes`), kept in the journal,
//! then stored in the outbox for `{prefix}/notes/{equipment}`; to `delivery`
//! it is an alarm whose answer is that note, so it is acknowledged once the
//! note is on disk, and a redelivery after a kill or a broker restart is
//! recognised as an alarm's is.
//!
//! Disk writes are grouped: the hub appends the alarms and diagnoses of a
//! burst without fsync, and when no more input is waiting (or a batch is
//! full) the store's `flush` fsyncs the outbox and the inbox once each, then
//! acknowledges the burst's alarms and publishes its diagnoses. That is what
//! takes a storm off the broker faster than the model answers it.

use std::sync::Arc;
use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::Publish;
use rumqttc::v5::AsyncClient;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::blame::{self, Culprit};
use super::delivery::{Key, Receipt};
use super::feedback::Notes;
use super::inbox::{self, Inbox};
use super::link::Link;
use super::mqtt::Inbound;
use super::outbox::Outbox;
use super::queue::Offer;
use super::store::{Sorted, Store};
use super::systemd::Notifier;
use super::{FromWorker, Shared};
use crate::alarm::{self, Alarm, Topics};
use crate::config::MqttConfig;
use crate::diagnosis::Diagnosis;

/// What the hub counts, for the status: written by the hub alone, so
/// plain numbers.
#[derive(Debug, Default)]
struct Counts {
    /// Alarms that failed the checks, reported on the error topic.
    rejected: u64,
    /// Of the error reports, those that found the mqtt client's queue full.
    error_reports_dropped: u64,
    /// Redeliveries acknowledged without a new diagnosis.
    replayed: u64,
    /// Alarms merged into a queued job for the same equipment and code.
    merged: u64,
    /// Alarms triaged at once because the inbox was full or failing.
    inbox_refused: u64,
    /// Alarms answered without the model because their handling aborted
    /// the daemon `inbox::POISON_AFTER` times.
    poisoned: u64,
    /// Feedback that failed the checks, reported on the error topic.
    feedback_rejected: u64,
}

/// Test hooks that slow the intake (cargo feature `fault-injection`).
#[derive(Debug, Default)]
struct IntakeFaults {
    /// Extra time every inbound alarm costs (see `intake_delay`).
    delay: Option<Duration>,
    /// How long the first inbound alarm stops the hub (see `intake_stall`).
    stall: Option<Duration>,
}

impl IntakeFaults {
    fn from_env() -> Self {
        IntakeFaults {
            delay: intake_delay(),
            stall: intake_stall(),
        }
    }

    async fn before_intake(&mut self) {
        if let Some(d) = self.delay {
            tokio::time::sleep(d).await;
        }
        if let Some(d) = self.stall.take() {
            tracing::warn!(
                ms = d.as_millis() as u64,
                "fault injection: the hub stopped for {} ms",
                d.as_millis()
            );
            tokio::task::block_in_place(|| std::thread::sleep(d));
        }
    }
}

/// The serving loop's state, in parts that each own their data: the broker
/// connection, the durable side, the triage backlog, the counters and the
/// test hooks. Owned by one task, so none of it needs a lock.
pub(super) struct Hub {
    s: Arc<Shared>,
    /// The daemon's MQTT settings: the alarm size limit, the broker named
    /// in the journal.
    mqtt: MqttConfig,
    notifier: Arc<Notifier>,
    /// The broker connection: the client, the subscription, the acks.
    link: Link,
    /// The durable side: delivery, inbox, outbox and the unflushed batch.
    store: Store,
    /// The site notes: the journal feedback is kept in, and the live ones.
    notes: Notes,
    /// Alarms to answer from retrieval alone (the queue was full), taken
    /// when no input is waiting: triage costs a retrieval each, and must not
    /// slow the intake that acknowledges a storm.
    backlog: std::collections::VecDeque<Vec<(Alarm, Key)>>,
    counts: Counts,
    faults: IntakeFaults,
    /// When the status was last published: it is refreshed every 10 s.
    last_status_ms: u64,
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
        durable: (Outbox, Option<Inbox>, Option<crate::feedback::Published>),
        notes: Notes,
        notifier: Arc<Notifier>,
    ) -> Self {
        let (outbox, inbox, record) = durable;
        let topics = Topics {
            prefix: mqtt.topic_prefix.clone(),
        };
        Hub {
            s,
            mqtt,
            notifier,
            link: Link::new(client, topics),
            store: Store::new(outbox, inbox, record),
            notes,
            backlog: std::collections::VecDeque::new(),
            counts: Counts::default(),
            faults: IntakeFaults::from_env(),
            last_status_ms: 0,
        }
    }

    /// Says goodbye: STOPPING to systemd, then the offline status and the
    /// DISCONNECT to the client. True when both are queued on a connection
    /// that is up, so the poller will write them.
    pub(super) fn sign_off(&self) -> bool {
        self.notifier.stopping();
        tracing::info!("shutting down; alarms not yet answered stay in the inbox (or unacknowledged) for the next start");
        self.link.sign_off() && self.store.is_connected()
    }

    pub(super) async fn serve(
        &mut self,
        mut events: mpsc::UnboundedReceiver<Inbound>,
        mut qos0: mpsc::Receiver<super::mqtt::Qos0>,
        mut done: mpsc::UnboundedReceiver<FromWorker>,
        cancel: &CancellationToken,
    ) {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let idle_work = self.store.unflushed() > 0 || !self.backlog.is_empty();
            // Biased: input first, so a burst is taken (and its acks grouped
            // into one flush) before the idle work; a finished diagnosis
            // before everything, as it is rare and someone waits for it.
            tokio::select! {
                biased;
                _ = cancel.cancelled() => {
                    // What is journaled is kept; acks may still go out
                    // while the client says goodbye.
                    self.store.flush(&mut self.link);
                    return;
                }
                Some(m) = done.recv() => match m {
                    FromWorker::SlotLost(c) => self.slot_lost(&c),
                    FromWorker::Done(d) => {
                        if let Some(p) = d.published {
                            self.store.on_published(p);
                        }
                        self.finish(d.alarms, d.diagnosis, d.slot)
                    }
                },
                Some(ev) = events.recv() => self.on_event(ev).await,
                Some(super::mqtt::Qos0 { publish, room }) = qos0.recv() => {
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
            if self.store.unflushed() >= MAX_BATCH {
                self.store.flush(&mut self.link);
            }
        }
    }

    /// Nothing is waiting: flush what was written, else answer some of the
    /// triage backlog.
    fn idle(&mut self) {
        if self.store.unflushed() > 0 {
            return self.store.flush(&mut self.link);
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
        let Some(Sorted {
            unanswered,
            release: mut answered,
        }) = self.store.replay()
        else {
            return;
        };
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
                    self.store.abandoned(&h.key);
                    answered.push(h.key);
                }
            }
        }
        self.store.release(&answered);
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
        self.counts.poisoned += 1;
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
        blame::triaging(culprit, || {
            let notes = self.s.site_notes.borrow().clone();
            self.s.pipeline.triage(a, &notes)
        })
    }

    /// The watchdog gave up on a slot while it ran this alarm: one abort
    /// against it, on disk before the answer the worker hands in next.
    fn slot_lost(&mut self, c: &Culprit) {
        match self.store.count_abort(&c.key) {
            None => {}
            Some(Ok(())) => {
                tracing::warn!(alarm_id = %c.alarm_id, "a slot was lost on this alarm; counted against it")
            }
            Some(Err(e)) => {
                tracing::warn!(alarm_id = %c.alarm_id, error = %e, "cannot count a lost slot against its alarm in the inbox")
            }
        }
    }

    async fn on_event(&mut self, ev: Inbound) {
        let now = self.s.now_ms();
        match ev {
            Inbound::Connected {
                session_present,
                epoch,
            } => {
                tracing::info!(session_present, "connected to the broker");
                self.link.connected(epoch, now);
                self.store.connected(session_present, &mut self.link);
                self.publish_status();
            }
            Inbound::SubAck => {
                // READY only once subscribed: before that an alarm published
                // by a sensor would have no subscriber and be dropped.
                if self.link.subscribed() {
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
                let live = self.link.is_live(epoch);
                self.intake(*publish, live).await;
                // Taken: the poller may read as much again.
                drop(room);
            }
            Inbound::Sent(pkid) => self.store.sent(pkid, now),
            Inbound::PubAck(pkid) => self.store.puback(pkid, &mut self.link),
            Inbound::Denied { pkid, reason } => {
                self.store.denied(pkid, &reason, now, &mut self.link);
            }
            Inbound::Disconnected { dropped, seen } => {
                self.link.disconnected();
                self.store.disconnected(dropped);
                let _ = seen.send(());
            }
        }
    }

    fn on_tick(&mut self) {
        let now = self.s.now_ms();
        if self.store.is_connected() {
            self.link.retry(now);
        }
        self.store.tick(now, &mut self.link);
        self.notes.refresh();
        if now.saturating_sub(self.last_status_ms) >= 10_000 {
            self.publish_status();
        }
    }

    /// Reports a rejected alarm on the error topic and acknowledges it. The
    /// client's queue (`mqtt::CLIENT_QUEUE`) holds a flood's reports; one
    /// that finds it full is counted in `error_reports_dropped`.
    fn reject(&mut self, p: Publish, reason: String, live: bool) {
        self.counts.rejected += 1;
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
            self.link.ack(p);
        }
    }

    /// Publishes a report on the error topic. Never waits for the client:
    /// the poller may itself be waiting for the hub to take a QoS 0 alarm,
    /// and the report is advisory.
    fn publish_error(&mut self, report: serde_json::Value) {
        if !self.link.publish_error(&report) {
            self.counts.error_reports_dropped += 1;
        }
    }

    /// The alarm a publish on `topic` carries, or why it is not one: the one
    /// check for what comes in and what the inbox replays.
    fn read_alarm(&self, topic: &str, payload: &[u8]) -> Result<Alarm, String> {
        let prefix = &self.link.topics().prefix;
        let equipment = alarm::equipment_from_topic(prefix, topic).map_err(|_| {
            format!(
                "topic {topic:?} is not {prefix}/alarm/{{equipment}}: one topic level after alarm/, the equipment id"
            )
        })?;
        alarm::parse_on(
            payload,
            Some(equipment),
            self.mqtt.max_alarm_bytes,
            self.mqtt.numeric_severity,
        )
        .map_err(|e| e.to_string())
    }

    /// Takes one alarm. `live`: it came on the connection that is up, so
    /// its receipt can be acknowledged.
    async fn intake(&mut self, p: Publish, live: bool) {
        crate::crash::injected_panic(crate::crash::Place::Hub, &p.payload);
        self.faults.before_intake().await;
        // MQTT 5 hands topics over as bytes; brokers check they are UTF-8.
        let Ok(topic) = std::str::from_utf8(&p.topic).map(str::to_string) else {
            return self.reject(p, "topic is not UTF-8".into(), live);
        };
        if self.is_feedback(&topic) {
            return self.take_feedback(p, &topic, live);
        }
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
        let receipt = self
            .store
            .received(key, live.then_some(handle), &mut self.link);
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
        match self.store.journal(key, &topic, &payload) {
            Some(Ok(())) => self.offer(a, key, true),
            Some(Err(e)) => {
                self.counts.inbox_refused += 1;
                if self.counts.inbox_refused.is_power_of_two() {
                    tracing::warn!(error = %e, refused = self.counts.inbox_refused, "inbox cannot take the alarm; unless it outranks a queued one it is triaged at once, and it is acknowledged once its answer is on disk");
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
            Offer::Merged => self.counts.merged += 1,
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

    /// Whether `topic` is under `{prefix}/feedback/`: the subscription
    /// brings only `{prefix}/feedback/+` there, the rest is alarms'.
    fn is_feedback(&self, topic: &str) -> bool {
        topic
            .strip_prefix(self.link.topics().prefix.as_str())
            .is_some_and(|r| r.starts_with("/feedback/"))
    }

    /// Takes one feedback: checked against what was published, kept as a
    /// site note, stored to be published on `{prefix}/notes/{equipment}`.
    /// Acknowledged (by `delivery`, at the flush) once the note is on disk;
    /// a bad one is reported on the error topic and acknowledged.
    fn take_feedback(&mut self, p: Publish, topic: &str, live: bool) {
        let prefix = &self.link.topics().prefix;
        let checked = crate::feedback::equipment_from_topic(prefix, topic).and_then(|eq| {
            let fb = crate::feedback::parse(&p.payload, self.mqtt.max_alarm_bytes)?;
            // Without the record (its file could not be opened) nothing is
            // known to have been published.
            let published = self.store.published().ok_or_else(|| {
                crate::feedback::FeedbackError::UnknownAlarm {
                    alarm_id: fb.alarm_id.chars().take(crate::alarm::MAX_ID).collect(),
                    equipment: eq.to_string(),
                }
            })?;
            crate::feedback::note(fb, eq, published)
        });
        let note = match checked {
            Ok(n) => n,
            Err(e) => return self.reject_feedback(p, topic, e.to_string(), live),
        };
        let key = Key::of(topic, &p.payload);
        let handle = Publish {
            payload: Default::default(),
            topic: Default::default(),
            ..p
        };
        // A redelivery joins the note already under way, or is acknowledged
        // at once if that was delivered: either way nothing more to do.
        // Kept to acknowledge a feedback the journal refuses for good.
        let ack = live.then(|| handle.clone());
        if self
            .store
            .received(key, live.then_some(handle), &mut self.link)
            != Receipt::Diagnose
        {
            tracing::info!(alarm_id = %note.answered.alarm_id, note = %note.id, "feedback redelivered; acknowledged with its note");
            return;
        }
        if let Err(e) = self.notes.keep(&note) {
            self.store.abandoned(&key);
            tracing::error!(alarm_id = %note.answered.alarm_id, error = %e, "feedback not kept");
            self.report_feedback(&p.payload, topic, e.to_string());
            // A refusal that a resend would meet again (a full journal, a
            // clash) is acknowledged, as a bad feedback is; a failing disk
            // is not, and the broker redelivers it on the next connection.
            if e.is_final() {
                self.counts.feedback_rejected += 1;
                if let Some(h) = ack {
                    self.link.ack(h);
                }
            }
            return;
        }
        let payload = match serde_json::to_vec(&note) {
            Ok(b) => b,
            Err(e) => {
                tracing::error!(error = %e, "cannot encode a site note");
                self.store.abandoned(&key);
                return;
            }
        };
        tracing::info!(
            alarm_id = %note.answered.alarm_id,
            equipment = %note.alarm.equipment,
            verdict = note.verdict.as_str(),
            by = %note.by,
            note = %note.id,
            "site note kept from feedback"
        );
        let notes_topic = self.link.topics().notes(&note.alarm.equipment);
        self.store
            .put(key, &note.answered.alarm_id, &notes_topic, &payload, None);
    }

    /// Reports a bad feedback on the error topic and acknowledges it: a
    /// resend of the same bytes would fail the same way.
    fn reject_feedback(&mut self, p: Publish, topic: &str, reason: String, live: bool) {
        self.counts.feedback_rejected += 1;
        self.report_feedback(&p.payload, topic, reason);
        if live {
            self.link.ack(p);
        }
    }

    fn report_feedback(&mut self, payload: &[u8], topic: &str, reason: String) {
        let topic: String = topic.chars().take(256).collect();
        let alarm_id = readable_alarm_id(payload);
        tracing::warn!(topic = %topic, reason = %reason, alarm_id = alarm_id.as_deref().unwrap_or("-"), "feedback refused");
        let mut err = serde_json::json!({
            "topic": topic,
            "reason": reason,
            "bytes": payload.len(),
            "ts": crate::diagnosis::now_rfc3339(),
        });
        if let Some(id) = alarm_id {
            err["alarm_id"] = id.into();
        }
        self.publish_error(err);
    }

    fn count_replayed(&mut self) {
        self.counts.replayed += 1;
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
                    self.store.abandoned(&key);
                    continue;
                }
            };
            let topic = self.link.topics().diagnosis(&a.equipment);
            let record = crate::feedback::Record::of(&a, &d);
            self.store.put(key, &a.id, &topic, &payload, Some(record));
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
            self.store.status(obj);
            let i = &self.counts;
            obj.insert("inbox_refused".into(), i.inbox_refused.into());
            obj.insert("poisoned".into(), i.poisoned.into());
            obj.insert("feedback_rejected".into(), i.feedback_rejected.into());
            obj.insert("site_notes".into(), self.s.site_notes.borrow().len().into());
            obj.insert("rejected".into(), i.rejected.into());
            obj.insert(
                "error_reports_dropped".into(),
                i.error_reports_dropped.into(),
            );
            obj.insert("replayed".into(), i.replayed.into());
            obj.insert("merged".into(), i.merged.into());
            obj.insert("queue_depth".into(), self.s.queue().len().into());
            obj.insert("triage_backlog".into(), self.backlog.len().into());
        }
        v
    }

    fn publish_status(&mut self) {
        self.last_status_ms = self.s.now_ms();
        let v = self.status_json();
        self.notifier.status(&status_line(&v));
        self.link.publish_status(&v);
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

/// The `alarm_id` of a refused feedback, as `readable_id` reads an alarm's.
fn readable_alarm_id(payload: &[u8]) -> Option<String> {
    if payload.len() > 1 << 20 {
        return None;
    }
    #[derive(serde::Deserialize)]
    struct Id {
        alarm_id: String,
    }
    let id = serde_json::from_slice::<Id>(payload).ok()?.alarm_id;
    Some(id.chars().take(64).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

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
