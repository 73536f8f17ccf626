//! The hub's durable side: the delivery machine, the inbox and the outbox,
//! the record of published diagnoses feedback is checked against, and the
//! batch written since the last group commit. Part of the hub's task, so no
//! locks.
//!
//! Disk writes are grouped: alarms and diagnoses are appended without fsync,
//! and `flush` fsyncs the outbox and the inbox once each, then acknowledges
//! the batch's alarms and publishes its diagnoses. What to acknowledge and
//! publish, and when, is `delivery`'s to decide; this carries it out through
//! the hub's `Link`. Never reads an alarm's content, nor decides how it is
//! answered.

use rumqttc::v5::mqttbytes::v5::Publish;

use super::delivery::{self, Delivery, Key, Output, Receipt, Settings};
use super::inbox::{self, Inbox, InboxError};
use super::link::Link;
use super::mqtt;
use super::outbox::{self, Outbox};
use crate::feedback::{Published, Record};

/// A diagnosis written to the outbox since the last flush.
struct Staged {
    key: Key,
    seq: u64,
    /// Written to the outbox file, not only kept in memory.
    written: bool,
}

pub(super) struct Store {
    delivery: Delivery<Publish>,
    outbox: Outbox,
    inbox: Option<Inbox>,
    /// What was published, for feedback to be checked against; None when
    /// it cannot be opened (then every feedback is refused as unknown).
    record: Option<Published>,
    /// Alarms appended to the inbox since the last flush: acknowledged once
    /// the flush has fsync'd them.
    unsynced: Vec<Key>,
    /// Diagnoses written to the outbox since the last flush: published once
    /// the flush has fsync'd them.
    staged: Vec<Staged>,
    /// Workers waiting for their staged diagnoses to be published: a slot
    /// writes its prompt's disk states only then (never ahead of an answer).
    published: Vec<tokio::sync::oneshot::Sender<()>>,
}

impl Store {
    pub(super) fn new(outbox: Outbox, inbox: Option<Inbox>, record: Option<Published>) -> Self {
        Store {
            delivery: delivery_for(&outbox),
            outbox,
            inbox,
            record,
            unsynced: Vec::new(),
            staged: Vec::new(),
            published: Vec::new(),
        }
    }

    /// `tx` is told once the next flush has published what was staged.
    pub(super) fn on_published(&mut self, tx: tokio::sync::oneshot::Sender<()>) {
        self.published.push(tx);
    }

    /// Alarms and diagnoses written and waiting for the next flush.
    pub(super) fn unflushed(&self) -> usize {
        self.unsynced.len() + self.staged.len()
    }

    pub(super) fn is_connected(&self) -> bool {
        self.delivery.is_connected()
    }

    /// A valid alarm arrived, with its ack handle when it came on the
    /// connection that is up.
    pub(super) fn received(
        &mut self,
        key: Key,
        handle: Option<Publish>,
        link: &mut Link,
    ) -> Receipt {
        let (receipt, out) = self.delivery.received(key, handle);
        self.carry_out(out, link);
        receipt
    }

    /// Journals a new alarm in the inbox, durable at the next flush. None
    /// without an inbox.
    pub(super) fn journal(
        &mut self,
        key: Key,
        topic: &str,
        payload: &[u8],
    ) -> Option<Result<(), InboxError>> {
        let r = self.inbox.as_mut()?.append(key, topic, payload);
        if r.is_ok() {
            self.unsynced.push(key);
        }
        Some(r)
    }

    /// The published diagnoses feedback may answer.
    pub(super) fn published(&self) -> Option<&Published> {
        self.record.as_ref()
    }

    /// Stores a diagnosis (or a site note): written now, fsync'd by the next
    /// flush (with the rest of the burst) before it is published. `record`:
    /// what feedback on a diagnosis is checked against, on disk by then too.
    pub(super) fn put(
        &mut self,
        key: Key,
        alarm_id: &str,
        topic: &str,
        payload: &[u8],
        record: Option<Record>,
    ) {
        if let (Some(r), Some(p)) = (record, self.record.as_mut()) {
            if let Err(e) = p.add(r) {
                tracing::warn!(alarm_id = %alarm_id, error = %e, "diagnosis not recorded for feedback; feedback on it will be refused as unknown");
            }
        }
        let stored = tokio::task::block_in_place(|| self.outbox.put(key, alarm_id, topic, payload));
        if let Some(e) = &stored.not_durable {
            tracing::warn!(alarm_id = %alarm_id, error = %e, "diagnosis not on disk; it is delivered from memory, and its alarm stays in the inbox (or unacknowledged) until then");
        }
        self.staged.push(Staged {
            key,
            seq: stored.seq,
            written: stored.not_durable.is_none(),
        });
    }

    /// An alarm that will not be answered: its redelivery is new work.
    pub(super) fn abandoned(&mut self, key: &Key) {
        self.delivery.abandoned(key);
    }

    /// The alarms the inbox kept across a restart, sorted (see `sort_held`).
    pub(super) fn replay(&mut self) -> Option<Sorted> {
        let inbox = self.inbox.as_ref()?;
        Some(sort_held(
            inbox.held().cloned(),
            &mut self.delivery,
            &self.outbox,
        ))
    }

    /// Drops answered alarms from the inbox.
    pub(super) fn release(&mut self, keys: &[Key]) {
        if let Some(inbox) = &mut self.inbox {
            for k in keys {
                if let Err(e) = inbox.done(k) {
                    tracing::warn!(error = %e, "cannot update the inbox");
                }
            }
        }
    }

    /// One abort against a held alarm, fsync'd.
    pub(super) fn count_abort(&mut self, key: &Key) -> Option<Result<(), InboxError>> {
        let inbox = self.inbox.as_mut()?;
        Some(
            inbox
                .count_abort(key)
                .and_then(|_| tokio::task::block_in_place(|| inbox.sync())),
        )
    }

    /// Group commit: one fsync for the outbox and one for the inbox covers
    /// every diagnosis and alarm written since the last flush; only then are
    /// those alarms acknowledged and those diagnoses published.
    pub(super) fn flush(&mut self, link: &mut Link) {
        let staged = std::mem::take(&mut self.staged);
        let unsynced = std::mem::take(&mut self.unsynced);
        // Before anything is published: feedback on a diagnosis the crew has
        // seen must find it after a power cut.
        if let Some(Err(e)) = self.record.as_mut().map(Published::sync) {
            tracing::warn!(error = %e, "cannot fsync the record of published diagnoses; feedback on the newest may be refused as unknown after a power cut");
        }
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
                for s in staged.iter().filter(|s| s.written) {
                    if let Err(e) = inbox.done(&s.key) {
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
                self.carry_out(out, link);
            }
        }
        for s in staged {
            if outbox_ok && s.written {
                // Its answer is on disk and will be delivered whatever
                // happens: the alarm is as safe as if journaled (this is
                // what acks alarms the inbox had no room for).
                let out = self.delivery.journaled(&s.key);
                acked += acks(&out);
                self.carry_out(out, link);
            }
            let out = self.delivery.stored(s.key, s.seq);
            self.carry_out(out, link);
        }
        for p in self.published.drain(..) {
            let _ = p.send(());
        }
        tracing::debug!(alarms, diagnoses, acked, "flushed");
    }

    /// Connected, with the broker's session flag.
    pub(super) fn connected(&mut self, session_present: bool, link: &mut Link) {
        let out = self.delivery.connected(session_present);
        self.carry_out(out, link);
    }

    /// The connection went; `dropped` publishes the client discarded.
    pub(super) fn disconnected(&mut self, dropped: u64) {
        self.delivery.disconnected(dropped);
    }

    pub(super) fn sent(&mut self, pkid: u16, now_ms: u64) {
        self.delivery.sent(pkid, now_ms);
    }

    pub(super) fn puback(&mut self, pkid: u16, link: &mut Link) {
        let out = self.delivery.puback(pkid);
        self.carry_out(out, link);
    }

    /// The broker refused publish `pkid` with `reason`.
    pub(super) fn denied(&mut self, pkid: u16, reason: &str, now_ms: u64, link: &mut Link) {
        let (refusal, out) = self.delivery.denied(pkid, now_ms);
        if let Some(r) = refusal {
            self.log_refusal(r, reason, &link.topics().prefix);
        }
        self.carry_out(out, link);
    }

    pub(super) fn tick(&mut self, now_ms: u64, link: &mut Link) {
        let out = self.delivery.tick(now_ms);
        self.carry_out(out, link);
    }

    /// A diagnosis the broker refused stays in the outbox and is sent again
    /// (see `delivery`). At error level on the first refusal and then at
    /// doubling counts, so a long-standing ACL mistake does not flood the
    /// journal; the status counts them all along.
    fn log_refusal(&self, r: delivery::Refusal, reason: &str, prefix: &str) {
        let (topic, alarm_id) = self
            .outbox
            .get(r.seq)
            .map(|e| (e.topic.clone(), e.alarm_id.clone()))
            .unwrap_or_default();
        let hint = mqtt::denial_hint(reason, prefix);
        let retry_in_s = r.retry_in_ms / 1000;
        if r.times.is_power_of_two() {
            tracing::error!(topic = %topic, alarm_id = %alarm_id, reason, times = r.times, retry_in_s, hint = %hint, "the broker refused a diagnosis; it stays in the outbox and is sent again");
        } else {
            tracing::debug!(topic = %topic, alarm_id = %alarm_id, reason, times = r.times, retry_in_s, "the broker refused a diagnosis again");
        }
    }

    fn carry_out(&mut self, out: Vec<Output<Publish>>, link: &mut Link) {
        for o in out {
            match o {
                Output::Publish(seq) => {
                    let Some(e) = self.outbox.get(seq) else {
                        continue;
                    };
                    if link.publish_diagnosis(&e.topic, &e.payload) {
                        self.delivery.handed(seq);
                    } else {
                        self.delivery.refused(seq);
                    }
                }
                Output::Ack(p) => link.ack(p),
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

    /// The store's part of the status document.
    pub(super) fn status(&self, obj: &mut serde_json::Map<String, serde_json::Value>) {
        obj.insert("outbox_pending".into(), self.outbox.pending_len().into());
        obj.insert("outbox_writable".into(), self.outbox.writable().into());
        obj.insert(
            "inbox_pending".into(),
            self.inbox.as_ref().map_or(0, Inbox::len).into(),
        );
        obj.insert("awaiting_ack".into(), self.delivery.open_alarms().into());
        obj.insert("denied".into(), self.delivery.denied_count().into());
    }
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
pub(super) struct Sorted {
    /// Not answered yet: to answer again.
    pub unanswered: Vec<inbox::Held>,
    /// Answered, and safe to drop from the inbox.
    pub release: Vec<Key>,
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
}
