//! The delivery protocol as a pure state machine: which alarm receipts are
//! new work and which join work already under way, when a stored diagnosis is
//! handed to the MQTT client, which PUBACK delivers it, and when an alarm may
//! be acknowledged to the broker: once it is durable (see below).
//!
//! No I/O, clocks or async here, the way rumqtt keeps `MqttState` apart from
//! its event loop: the daemon feeds in what happened (alarm received,
//! diagnosis stored, connected, disconnected, publish sent or dropped by the
//! client, PUBACK, tick) and carries out the `Output`s (publish, ack).
//!
//! # Matching PUBACKs
//! rumqttc assigns packet ids itself and only reports `Outgoing::Publish(pkid)`
//! as it writes each QoS 1 publish, in the order the requests were queued.
//! Outbox entries (diagnoses, and site notes made from feedback) are
//! tidewatch's only QoS 1 publishes, so the n-th publish handed
//! to the client (its *ordinal*) is the n-th one the client sends or drops.
//! The poller reports both; a PUBACK then names an ordinal, and the ordinal
//! names the outbox entry. A copy queued just before a disconnect and sent
//! after the reconnect still maps to its own entry, so a PUBACK is never
//! credited to another diagnosis. On a ConnAck without a session the client
//! drops what it held without a word, and `connected` takes those ordinals.
//!
//! # Acknowledging alarms
//! An alarm is acknowledged as soon as it is durable: when the daemon has
//! journaled it in the inbox (`journaled`), or else once its diagnosis was
//! delivered. The first is what takes a storm off the broker at disk speed;
//! the second is the fallback when the inbox is full or its disk fails.
//! A feedback on a diagnosis is one more receipt here: its answer is the
//! site note the hub kept of it, stored like a diagnosis, so it is
//! acknowledged once that is on disk and a redelivery joins it.
//!
//! # A broker that says no
//! An MQTT 5 PUBACK with a failure reason (mosquitto: 0x87 when its ACL
//! denies the topic) means the broker does not have the diagnosis. It stays
//! undelivered (in the outbox, its alarm unacknowledged unless journaled),
//! out of the window, and is offered again after a delay that doubles with
//! each refusal up to a cap, or at once on the next connection: fixing the
//! ACL and reloading the broker keeps the connection, so only the timer
//! would ever send it again.
//!
//! An alarm's ack handle is only good on the connection it arrived on: after a
//! reconnect the broker redelivers every unacknowledged alarm (same packet id
//! on a resumed session), and an ack from the old connection could otherwise
//! acknowledge whatever the broker numbered with that id since. So handles are
//! dropped on disconnect and the redelivered copies bring fresh ones.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};

use serde::{Deserialize, Serialize};

/// What makes a redelivery a redelivery: the topic and the exact payload.
/// A sensor that restarts its counter sends a new time and reading under an
/// old id, and two sensors that both number 1, 2, 3 publish on different
/// topics, so neither is taken for an alarm already answered.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Key(pub [u8; 16]);

impl Key {
    pub fn of(topic: &str, payload: &[u8]) -> Key {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update((topic.len() as u64).to_le_bytes());
        h.update(topic.as_bytes());
        h.update(payload);
        let d = h.finalize();
        let mut k = [0u8; 16];
        k.copy_from_slice(&d[..16]);
        Key(k)
    }
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for b in &self.0[..6] {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

/// What the daemon must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output<T> {
    /// Acknowledge this alarm receipt to the broker.
    Ack(T),
    /// Hand outbox entry `seq` to the MQTT client as QoS 1, then report
    /// `handed` (or `refused` if the client would not take it).
    Publish(u64),
    /// The broker has entry `seq`: record that in the outbox.
    Delivered(u64),
}

/// What a receipt turned out to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Receipt {
    /// New work: diagnose it, then report `stored`.
    Diagnose,
    /// A redelivery of an alarm still being diagnosed or delivered; it is
    /// acknowledged with that one.
    Joined,
    /// A redelivery of an alarm whose diagnosis was delivered: acknowledged
    /// now (see the outputs), not answered again.
    Delivered,
}

/// Tunables. `window` diagnoses may await their PUBACK at once.
#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub window: usize,
    /// A publish not acknowledged by then on a live connection is sent again.
    pub puback_timeout_ms: u64,
    /// Delivered alarms remembered, so their redeliveries are acked at once.
    pub remembered: usize,
    /// A diagnosis the broker refused is offered again after this, doubled
    /// for each further refusal up to `denied_retry_max_ms`.
    pub denied_retry_ms: u64,
    pub denied_retry_max_ms: u64,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            window: 8,
            puback_timeout_ms: 20_000,
            remembered: 4096,
            denied_retry_ms: 5_000,
            denied_retry_max_ms: 300_000,
        }
    }
}

#[derive(Debug)]
struct Accepted<T> {
    handles: Vec<T>,
    /// The outbox entry holding its diagnosis, once stored.
    entry: Option<u64>,
    /// Durable in the inbox: its receipts are acknowledged at once.
    journaled: bool,
}

impl<T> Accepted<T> {
    fn new(handles: Vec<T>) -> Self {
        Self {
            handles,
            entry: None,
            journaled: false,
        }
    }
}

/// A diagnosis the broker refused (see the module doc).
#[derive(Debug, Clone, Copy)]
struct Denial {
    /// Refusals so far.
    times: u32,
    /// Held back until then; None once it is offered again.
    until: Option<u64>,
}

/// What `denied` did with a refused diagnosis.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refusal {
    /// The outbox entry.
    pub seq: u64,
    /// How often the broker has refused it.
    pub times: u32,
    /// When it is offered again, unless a reconnect comes first.
    pub retry_in_ms: u64,
}

#[derive(Debug)]
pub struct Delivery<T> {
    settings: Settings,
    connected: bool,
    alarms: HashMap<Key, Accepted<T>>,
    /// Stored, undelivered diagnoses and the alarm each answers.
    entries: BTreeMap<u64, Key>,
    /// Entries waiting to be (re)published, oldest first.
    ready: BTreeSet<u64>,
    /// Entries handed to the client, with when the client sent them (None
    /// while still queued in the client: a PUBACK cannot be late before the
    /// publish has left, however long a flood of other requests holds it).
    in_flight: BTreeMap<u64, Option<u64>>,
    /// Ordinal of a publish handed to the client → its entry.
    ords: HashMap<u64, u64>,
    next_ord: u64,
    /// Ordinals the client has sent or dropped so far.
    taken: u64,
    /// Packet id of a publish sent on this connection → its ordinal.
    pkids: HashMap<u16, u64>,
    delivered: HashSet<Key>,
    delivered_order: VecDeque<Key>,
    /// Undelivered entries the broker refused, by entry.
    denials: BTreeMap<u64, Denial>,
}

impl<T> Delivery<T> {
    pub fn new(settings: Settings) -> Self {
        Self {
            settings,
            connected: false,
            alarms: HashMap::new(),
            entries: BTreeMap::new(),
            ready: BTreeSet::new(),
            in_flight: BTreeMap::new(),
            ords: HashMap::new(),
            next_ord: 0,
            taken: 0,
            pkids: HashMap::new(),
            delivered: HashSet::new(),
            delivered_order: VecDeque::new(),
            denials: BTreeMap::new(),
        }
    }

    /// Seeds the machine with what the outbox kept across a restart:
    /// undelivered entries (published once connected, and joined by their
    /// alarms' redeliveries) and the alarms already delivered.
    pub fn restore(
        &mut self,
        pending: impl IntoIterator<Item = (u64, Key)>,
        delivered: impl IntoIterator<Item = Key>,
    ) {
        for k in delivered {
            self.remember(k);
        }
        for (seq, key) in pending {
            let mut a = Accepted::new(Vec::new());
            a.entry = Some(seq);
            self.alarms.insert(key, a);
            self.entries.insert(seq, key);
            self.ready.insert(seq);
        }
    }

    /// An alarm the inbox kept across a restart, to be diagnosed again. It
    /// was acknowledged before (or will be on its redelivery, at once).
    /// Returns false when it needs no diagnosis: its answer is in the outbox
    /// or was delivered.
    pub fn restore_journaled(&mut self, key: Key) -> bool {
        if self.delivered.contains(&key) || self.alarms.contains_key(&key) {
            return false;
        }
        let mut a = Accepted::new(Vec::new());
        a.journaled = true;
        self.alarms.insert(key, a);
        true
    }

    pub fn is_connected(&self) -> bool {
        self.connected
    }

    /// Alarms accepted and not yet delivered.
    pub fn open_alarms(&self) -> usize {
        self.alarms.len()
    }

    /// Diagnoses stored and not yet delivered.
    #[cfg(test)]
    pub fn undelivered(&self) -> usize {
        self.entries.len()
    }

    /// Undelivered diagnoses the broker has refused at least once.
    pub fn denied_count(&self) -> usize {
        self.denials.len()
    }

    #[cfg(test)]
    pub fn is_delivered(&self, key: &Key) -> bool {
        self.delivered.contains(key)
    }

    /// A valid alarm arrived with ack handle `handle` (None when it came on
    /// a connection already lost: it is answered, but its receipt can only be
    /// acknowledged on the redelivery, which brings a live handle).
    pub fn received(&mut self, key: Key, handle: Option<T>) -> (Receipt, Vec<Output<T>>) {
        if self.delivered.contains(&key) {
            return (
                Receipt::Delivered,
                handle.map(Output::Ack).into_iter().collect(),
            );
        }
        if let Some(a) = self.alarms.get_mut(&key) {
            if a.journaled {
                return (
                    Receipt::Joined,
                    handle.map(Output::Ack).into_iter().collect(),
                );
            }
            a.handles.extend(handle);
            return (Receipt::Joined, Vec::new());
        }
        self.alarms
            .insert(key, Accepted::new(handle.into_iter().collect()));
        (Receipt::Diagnose, Vec::new())
    }

    /// The alarm is durable in the inbox: acknowledge its receipts now, and
    /// any redelivery at once.
    pub fn journaled(&mut self, key: &Key) -> Vec<Output<T>> {
        match self.alarms.get_mut(key) {
            Some(a) => {
                a.journaled = true;
                a.handles.drain(..).map(Output::Ack).collect()
            }
            None => Vec::new(),
        }
    }

    /// The diagnosis for `key` is in the outbox as entry `seq`.
    pub fn stored(&mut self, key: Key, seq: u64) -> Vec<Output<T>> {
        let a = self
            .alarms
            .entry(key)
            .or_insert_with(|| Accepted::new(Vec::new()));
        if let Some(old) = a.entry.replace(seq) {
            // Answered twice (cannot happen through `received`): deliver
            // the newer one only.
            self.entries.remove(&old);
            self.ready.remove(&old);
            self.in_flight.remove(&old);
            self.denials.remove(&old);
        }
        self.entries.insert(seq, key);
        self.ready.insert(seq);
        self.pump()
    }

    /// An alarm that will not be answered (a shutdown dropped its job): forget
    /// it, unacknowledged, so its redelivery is new work.
    pub fn abandoned(&mut self, key: &Key) {
        if self.alarms.get(key).is_some_and(|a| a.entry.is_none()) {
            self.alarms.remove(key);
        }
    }

    /// Connected; `session_present` is the broker's ConnAck flag. Without a
    /// session, rumqttc (0.25, v5) silently clears the requests it still
    /// held for the old one, publishes handed to it included: they will
    /// never be sent nor reported dropped, so every ordinal not yet taken is
    /// taken now, or the next `sent` would name the wrong entry (and its
    /// PUBACK deliver a diagnosis the broker never got). Their entries are
    /// back in `ready` since the disconnect.
    pub fn connected(&mut self, session_present: bool) -> Vec<Output<T>> {
        if !session_present {
            self.taken = self.next_ord;
            self.ords.clear();
            self.pkids.clear();
            let back: Vec<u64> = std::mem::take(&mut self.in_flight).into_keys().collect();
            self.ready.extend(back);
        }
        self.connected = true;
        // A new connection may be a fixed broker (or other credentials):
        // refused diagnoses are tried again at once.
        self.release_denied(u64::MAX);
        self.pump()
    }

    /// The connection is gone. `dropped` is how many QoS 1 publishes the
    /// client discarded without sending (see the module doc).
    pub fn disconnected(&mut self, dropped: u64) {
        self.connected = false;
        self.taken += dropped;
        self.pkids.clear();
        // Ordinals already sent or dropped can no longer be acknowledged;
        // later ones are still queued in the client and may go out after
        // the reconnect.
        let taken = self.taken;
        self.ords.retain(|ord, _| *ord >= taken);
        let back: Vec<u64> = std::mem::take(&mut self.in_flight).into_keys().collect();
        self.ready.extend(back);
        for a in self.alarms.values_mut() {
            a.handles.clear();
        }
    }

    /// The client took publish `seq` (see `Output::Publish`).
    pub fn handed(&mut self, seq: u64) {
        self.ords.insert(self.next_ord, seq);
        self.next_ord += 1;
    }

    /// The client would not take publish `seq` (its queue was full or
    /// closed); it is offered again on the next tick.
    pub fn refused(&mut self, seq: u64) {
        if self.in_flight.remove(&seq).is_some() && self.entries.contains_key(&seq) {
            self.ready.insert(seq);
        }
    }

    /// The client sent a QoS 1 publish with packet id `pkid`.
    pub fn sent(&mut self, pkid: u16, now_ms: u64) {
        let ord = self.taken;
        self.taken += 1;
        if let Some(seq) = self.ords.get(&ord) {
            self.pkids.insert(pkid, ord);
            if let Some(since) = self.in_flight.get_mut(seq) {
                *since = Some(now_ms);
            }
        }
    }

    /// The broker acknowledged packet id `pkid`.
    pub fn puback(&mut self, pkid: u16) -> Vec<Output<T>> {
        let Some(ord) = self.pkids.remove(&pkid) else {
            return Vec::new();
        };
        let Some(seq) = self.ords.remove(&ord) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if let Some(key) = self.entries.remove(&seq) {
            self.ready.remove(&seq);
            self.in_flight.remove(&seq);
            self.denials.remove(&seq);
            out.push(Output::Delivered(seq));
            if let Some(a) = self.alarms.remove(&key) {
                out.extend(a.handles.into_iter().map(Output::Ack));
            }
            self.remember(key);
        }
        out.extend(self.pump());
        out
    }

    /// The broker answered packet id `pkid` with a failure reason: it does
    /// not have that diagnosis. Returns what became of it (None for an id
    /// not sent on this connection, or an entry already delivered) and the
    /// publishes its place in the window lets out.
    pub fn denied(&mut self, pkid: u16, now_ms: u64) -> (Option<Refusal>, Vec<Output<T>>) {
        let Some(ord) = self.pkids.remove(&pkid) else {
            return (None, Vec::new());
        };
        let Some(seq) = self.ords.remove(&ord) else {
            return (None, Vec::new());
        };
        if !self.entries.contains_key(&seq) {
            return (None, Vec::new());
        }
        // Out of the window and out of `ready`: retried by `tick` or
        // `connected`, not by the pump that is about to fill the window.
        self.in_flight.remove(&seq);
        self.ready.remove(&seq);
        let d = self.denials.entry(seq).or_insert(Denial {
            times: 0,
            until: None,
        });
        d.times = d.times.saturating_add(1);
        let retry_in_ms = self
            .settings
            .denied_retry_ms
            .saturating_mul(1u64 << (d.times - 1).min(32))
            .min(self.settings.denied_retry_max_ms);
        d.until = Some(now_ms.saturating_add(retry_in_ms));
        let r = Refusal {
            seq,
            times: d.times,
            retry_in_ms,
        };
        (Some(r), self.pump())
    }

    /// Offers again the refused diagnoses held until `now_ms` or before.
    fn release_denied(&mut self, now_ms: u64) {
        for (seq, d) in self.denials.iter_mut() {
            if d.until.is_some_and(|t| t <= now_ms) {
                d.until = None;
                self.ready.insert(*seq);
            }
        }
    }

    /// Time passes: publishes that got no PUBACK in time go out again, and
    /// refused ones whose delay is over.
    pub fn tick(&mut self, now_ms: u64) -> Vec<Output<T>> {
        self.release_denied(now_ms);
        if self.connected {
            let late: Vec<u64> = self
                .in_flight
                .iter()
                .filter(|(_, since)| {
                    since.is_some_and(|t| {
                        now_ms.saturating_sub(t) >= self.settings.puback_timeout_ms
                    })
                })
                .map(|(seq, _)| *seq)
                .collect();
            for seq in late {
                self.in_flight.remove(&seq);
                self.ready.insert(seq);
            }
        }
        self.pump()
    }

    fn remember(&mut self, key: Key) {
        if self.delivered.insert(key) {
            self.delivered_order.push_back(key);
        }
        while self.delivered_order.len() > self.settings.remembered {
            if let Some(old) = self.delivered_order.pop_front() {
                self.delivered.remove(&old);
            }
        }
    }

    fn pump(&mut self) -> Vec<Output<T>> {
        let mut out = Vec::new();
        while self.connected && self.in_flight.len() < self.settings.window {
            let Some(seq) = self.ready.pop_first() else {
                break;
            };
            self.in_flight.insert(seq, None);
            out.push(Output::Publish(seq));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn k(i: u8) -> Key {
        Key([i; 16])
    }

    fn sm() -> Delivery<&'static str> {
        Delivery::new(Settings {
            window: 2,
            puback_timeout_ms: 1_000,
            remembered: 4,
            denied_retry_ms: 100,
            denied_retry_max_ms: 400,
        })
    }

    /// Carries out publishes the way the daemon does when the client takes them.
    fn hand(d: &mut Delivery<&'static str>, out: &[Output<&'static str>]) -> Vec<u64> {
        let mut seqs = Vec::new();
        for o in out {
            if let Output::Publish(s) = o {
                d.handed(*s);
                seqs.push(*s);
            }
        }
        seqs
    }

    fn acks(out: &[Output<&'static str>]) -> Vec<&'static str> {
        out.iter()
            .filter_map(|o| match o {
                Output::Ack(h) => Some(*h),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn an_alarm_is_acknowledged_only_after_the_broker_acknowledged_its_diagnosis() {
        let mut d = sm();
        d.connected(true);
        assert_eq!(d.received(k(1), Some("h1")), (Receipt::Diagnose, vec![]));
        let out = d.stored(k(1), 7);
        assert_eq!(out, vec![Output::Publish(7)]);
        hand(&mut d, &out);
        d.sent(41, 0);
        assert!(
            d.puback(99).is_empty(),
            "an unknown PUBACK delivers nothing"
        );
        let out = d.puback(41);
        assert_eq!(out, vec![Output::Delivered(7), Output::Ack("h1")]);
        assert_eq!(d.open_alarms(), 0);
    }

    #[test]
    fn a_redelivery_while_the_alarm_is_diagnosed_joins_it_and_is_acked_with_it() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("first"));
        assert_eq!(d.received(k(1), Some("again")).0, Receipt::Joined);
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(1, 0);
        assert_eq!(acks(&d.puback(1)), vec!["first", "again"]);
    }

    #[test]
    fn a_redelivery_of_a_delivered_alarm_is_acked_at_once_and_not_answered_again() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("h"));
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(1, 0);
        d.puback(1);
        let (r, out) = d.received(k(1), Some("redelivered"));
        assert_eq!(r, Receipt::Delivered);
        assert_eq!(out, vec![Output::Ack("redelivered")]);
    }

    #[test]
    fn a_reused_id_with_a_new_reading_or_on_another_topic_is_new_work() {
        let a = br#"{"id":"1","ts":"2026-11-30T00:00:00Z","value":3}"#;
        let b = br#"{"id":"1","ts":"2026-11-30T01:00:00Z","value":4}"#;
        assert_eq!(Key::of("tw/alarm/P1", a), Key::of("tw/alarm/P1", a));
        assert_ne!(Key::of("tw/alarm/P1", a), Key::of("tw/alarm/P1", b));
        assert_ne!(Key::of("tw/alarm/P1", a), Key::of("tw/alarm/P2", a));
        // The topic length is hashed too, so moving bytes across the border
        // between topic and payload does not give the same key.
        assert_ne!(Key::of("tw/a", b"b{}"), Key::of("tw/ab", b"{}"));
        let mut d = sm();
        d.connected(true);
        d.received(Key::of("tw/alarm/P1", a), Some("a"));
        let out = d.stored(Key::of("tw/alarm/P1", a), 1);
        hand(&mut d, &out);
        d.sent(1, 0);
        d.puback(1);
        assert_eq!(
            d.received(Key::of("tw/alarm/P1", b), Some("b")).0,
            Receipt::Diagnose
        );
        assert_eq!(
            d.received(Key::of("tw/alarm/P2", a), Some("c")).0,
            Receipt::Diagnose
        );
    }

    #[test]
    fn ack_handles_from_a_lost_connection_are_never_used() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("old-connection"));
        d.disconnected(0);
        d.connected(true);
        // The broker redelivers on the resumed session.
        assert_eq!(d.received(k(1), Some("new-connection")).0, Receipt::Joined);
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(5, 0);
        assert_eq!(acks(&d.puback(5)), vec!["new-connection"]);
    }

    #[test]
    fn nothing_is_published_while_disconnected_and_everything_after_connecting() {
        let mut d = sm();
        d.received(k(1), Some("a"));
        assert!(d.stored(k(1), 1).is_empty());
        assert_eq!(d.connected(true), vec![Output::Publish(1)]);
    }

    #[test]
    fn a_publish_lost_with_the_connection_goes_out_again_after_the_reconnect() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(3, 0);
        d.disconnected(0);
        assert!(d.puback(3).is_empty(), "PUBACKs do not cross connections");
        let out = d.connected(true);
        assert_eq!(out, vec![Output::Publish(1)]);
    }

    #[test]
    fn a_copy_queued_before_a_disconnect_and_sent_after_it_is_credited_to_its_own_entry() {
        let mut d = sm();
        d.connected(true);
        for i in 1..=2 {
            d.received(k(i), Some("h"));
        }
        // Entry 1 is handed to the client; the client has already dropped its
        // queue for the broken connection, so this copy stays queued (late).
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.disconnected(0);
        d.received(k(1), Some("h1"));
        d.received(k(2), Some("h2"));
        let out = d.connected(true);
        assert_eq!(out, vec![Output::Publish(1)]);
        hand(&mut d, &out);
        let out = d.stored(k(2), 2);
        assert_eq!(out, vec![Output::Publish(2)]);
        hand(&mut d, &out);
        // The client sends: the late copy of 1, then 1 again, then 2.
        d.sent(10, 0);
        d.sent(11, 0);
        d.sent(12, 0);
        // The late copy's PUBACK delivers entry 1 and only entry 1.
        let out = d.puback(10);
        assert_eq!(out, vec![Output::Delivered(1), Output::Ack("h1")]);
        assert!(
            d.puback(11).is_empty(),
            "second copy of 1: already delivered"
        );
        assert_eq!(acks(&d.puback(12)), vec!["h2"]);
    }

    #[test]
    fn publishes_the_client_dropped_unsent_are_counted_so_later_pubacks_still_match() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        d.received(k(2), Some("b"));
        let mut out = d.stored(k(1), 1);
        out.extend(d.stored(k(2), 2));
        hand(&mut d, &out);
        // Both were dropped unsent with the connection.
        d.disconnected(2);
        d.received(k(1), Some("a2"));
        d.received(k(2), Some("b2"));
        let out = d.connected(true);
        assert_eq!(out, vec![Output::Publish(1), Output::Publish(2)]);
        hand(&mut d, &out);
        d.sent(1, 0);
        d.sent(2, 0);
        assert_eq!(acks(&d.puback(2)), vec!["b2"]);
        assert_eq!(acks(&d.puback(1)), vec!["a2"]);
    }

    #[test]
    fn publishes_the_client_dropped_unreported_on_a_new_session_are_not_credited_with_later_pubacks(
    ) {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        d.received(k(2), Some("b"));
        let mut out = d.stored(k(1), 1);
        out.extend(d.stored(k(2), 2));
        hand(&mut d, &out);
        // 1 went out; 2 was still queued in the client when the connection
        // went, and nothing was reported dropped.
        d.sent(5, 0);
        d.disconnected(0);
        // The broker lost the session; the client cleared its queue, the
        // old copy of 2 with it, without a word.
        let out = d.connected(false);
        assert_eq!(out, vec![Output::Publish(1), Output::Publish(2)]);
        hand(&mut d, &out);
        // So the first publish on the new session is 1's new copy: counted
        // as the old copy of 2, its PUBACK would deliver 2, which the broker
        // never got.
        d.sent(7, 0);
        d.sent(8, 0);
        assert_eq!(d.puback(7), vec![Output::Delivered(1)]);
        assert_eq!(d.puback(8), vec![Output::Delivered(2)]);
    }

    #[test]
    fn a_publish_without_a_puback_is_sent_again_after_the_timeout() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(1, 0);
        assert!(d.tick(999).is_empty());
        let out = d.tick(1_000);
        assert_eq!(out, vec![Output::Publish(1)]);
        hand(&mut d, &out);
        d.sent(2, 0);
        // Either copy's PUBACK delivers it.
        assert_eq!(acks(&d.puback(1)), vec!["a"]);
        assert!(d.puback(2).is_empty());
    }

    #[test]
    fn the_puback_timeout_counts_from_when_the_publish_left_the_client() {
        // A flood of error reports ahead of it in the client's queue held
        // the publish for 5 s: it has not been waiting for a PUBACK at all.
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        assert!(d.tick(4_000).is_empty(), "queued in the client, not late");
        d.sent(1, 5_000);
        assert!(d.tick(5_999).is_empty(), "sent 999 ms ago");
        assert_eq!(d.tick(6_000), vec![Output::Publish(1)]);
    }

    #[test]
    fn a_journaled_alarm_is_acknowledged_at_once_and_so_are_its_redeliveries() {
        let mut d = sm();
        d.connected(true);
        assert_eq!(d.received(k(1), Some("a")).0, Receipt::Diagnose);
        assert_eq!(d.journaled(&k(1)), vec![Output::Ack("a")]);
        assert_eq!(
            d.received(k(1), Some("again")),
            (Receipt::Joined, vec![Output::Ack("again")])
        );
        // Still open until its diagnosis is delivered, then remembered.
        assert_eq!(d.open_alarms(), 1);
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(7, 0);
        assert_eq!(d.puback(7), vec![Output::Delivered(1)]);
        assert_eq!(d.open_alarms(), 0);
        assert!(d.is_delivered(&k(1)));
    }

    #[test]
    fn a_receipt_from_a_lost_connection_is_answered_but_never_acknowledged() {
        let mut d = sm();
        d.connected(true);
        assert_eq!(d.received(k(1), None), (Receipt::Diagnose, vec![]));
        assert!(d.journaled(&k(1)).is_empty(), "no handle to acknowledge");
        let (r, out) = d.received(k(2), None);
        assert_eq!(r, Receipt::Diagnose);
        assert!(out.is_empty());
        let out = d.stored(k(2), 1);
        hand(&mut d, &out);
        d.sent(3, 0);
        assert_eq!(d.puback(3), vec![Output::Delivered(1)]);
        // The redelivery on the live connection is acknowledged at once.
        assert_eq!(d.received(k(2), Some("live")).1, vec![Output::Ack("live")]);
    }

    #[test]
    fn alarms_the_inbox_kept_are_diagnosed_again_unless_already_answered() {
        let mut d = sm();
        d.restore([(4, k(2))], [k(3)]);
        assert!(d.restore_journaled(k(1)));
        assert!(!d.restore_journaled(k(2)), "its answer is in the outbox");
        assert!(!d.restore_journaled(k(3)), "its answer was delivered");
        d.connected(true);
        assert_eq!(d.received(k(1), Some("r")).1, vec![Output::Ack("r")]);
    }

    #[test]
    fn a_publish_the_client_refused_is_offered_again_on_the_next_tick() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        assert_eq!(d.stored(k(1), 1), vec![Output::Publish(1)]);
        d.refused(1);
        assert_eq!(d.tick(10), vec![Output::Publish(1)]);
    }

    #[test]
    fn the_window_bounds_publishes_awaiting_a_puback() {
        let mut d = sm();
        d.connected(true);
        let mut published = Vec::new();
        for i in 1..=4u8 {
            d.received(k(i), Some("h"));
            let out = d.stored(k(i), u64::from(i));
            published.extend(hand(&mut d, &out));
        }
        assert_eq!(published, vec![1, 2], "window is 2");
        d.sent(1, 0);
        let out = d.puback(1);
        assert_eq!(hand(&mut d, &out), vec![3]);
    }

    #[test]
    fn entries_restored_from_the_outbox_are_published_and_joined_by_redeliveries() {
        let mut d = sm();
        d.restore([(5, k(1))], [k(2)]);
        let out = d.connected(true);
        assert_eq!(out, vec![Output::Publish(5)]);
        hand(&mut d, &out);
        assert_eq!(d.received(k(1), Some("r1")).0, Receipt::Joined);
        assert_eq!(d.received(k(2), Some("r2")).1, vec![Output::Ack("r2")]);
        d.sent(1, 0);
        assert_eq!(acks(&d.puback(1)), vec!["r1"]);
    }

    #[test]
    fn a_diagnosis_the_broker_refuses_is_kept_unacked_and_sent_again_after_a_growing_delay() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(1, 0);
        let (r, out) = d.denied(1, 0);
        let first = Refusal {
            seq: 1,
            times: 1,
            retry_in_ms: 100,
        };
        assert_eq!(r, Some(first));
        assert!(out.is_empty(), "neither delivered nor acknowledged");
        assert_eq!(
            (d.undelivered(), d.denied_count(), d.open_alarms()),
            (1, 1, 1)
        );
        assert!(d.tick(99).is_empty(), "held back");
        let out = d.tick(100);
        assert_eq!(out, vec![Output::Publish(1)]);
        hand(&mut d, &out);
        d.sent(2, 100);
        assert_eq!(d.denied(2, 100).0.map(|r| r.retry_in_ms), Some(200));
        assert!(d.tick(299).is_empty());
        let out = d.tick(300);
        hand(&mut d, &out);
        d.sent(3, 300);
        // The ACL was fixed: the broker takes it.
        assert_eq!(d.puback(3), vec![Output::Delivered(1), Output::Ack("a")]);
        assert_eq!((d.undelivered(), d.denied_count()), (0, 0));
    }

    #[test]
    fn the_delay_after_refusals_stops_growing_at_its_cap() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        let mut out = d.stored(k(1), 1);
        let mut delays = Vec::new();
        for pkid in 1..=5u16 {
            hand(&mut d, &out);
            d.sent(pkid, 0);
            delays.push(d.denied(pkid, 0).0.unwrap().retry_in_ms);
            out = d.tick(1_000);
        }
        assert_eq!(delays, vec![100, 200, 400, 400, 400]);
    }

    #[test]
    fn a_refused_diagnosis_is_sent_again_at_once_on_a_new_connection() {
        let mut d = sm();
        d.connected(true);
        d.received(k(1), Some("a"));
        let out = d.stored(k(1), 1);
        hand(&mut d, &out);
        d.sent(1, 0);
        d.denied(1, 0);
        d.disconnected(0);
        assert!(d.tick(50).is_empty());
        assert_eq!(d.connected(true), vec![Output::Publish(1)]);
    }

    #[test]
    fn a_refusal_frees_its_place_in_the_window() {
        let mut d = sm();
        d.connected(true);
        let mut out = Vec::new();
        for i in 1..=3u8 {
            d.received(k(i), Some("h"));
            out.extend(d.stored(k(i), u64::from(i)));
        }
        assert_eq!(hand(&mut d, &out), vec![1, 2], "window is 2");
        d.sent(1, 0);
        let (_, out) = d.denied(1, 0);
        assert_eq!(out, vec![Output::Publish(3)]);
        assert!(d.denied(1, 0).0.is_none(), "an id answered once is gone");
    }

    #[test]
    fn delivered_alarms_are_remembered_up_to_the_bound() {
        let mut d = sm();
        d.restore([], (0..10).map(k));
        assert!(!d.is_delivered(&k(5)));
        assert!(d.is_delivered(&k(6)) && d.is_delivered(&k(9)));
    }

    #[test]
    fn an_abandoned_alarm_is_new_work_when_redelivered() {
        let mut d = sm();
        d.received(k(1), Some("a"));
        d.abandoned(&k(1));
        assert_eq!(d.received(k(1), Some("b")).0, Receipt::Diagnose);
    }

    /// For any interleaving of receipts, redeliveries, finished diagnoses,
    /// client sends and drops (reported, or unreported on a reconnect that
    /// finds no session), PUBACKs, refusals by a broker whose ACL comes and
    /// goes, disconnects, reconnects and ticks:
    /// no alarm is acknowledged before the broker has its diagnosis, no ack
    /// uses a handle from a lost connection, and once the chaos stops every
    /// accepted alarm is acknowledged.
    #[test]
    fn every_interleaving_acks_each_alarm_once_durable_and_answers_every_one() {
        use rand::{Rng, SeedableRng};

        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        struct Handle {
            alarm: u8,
            conn: u32,
        }

        struct World {
            d: Delivery<Handle>,
            conn: u32,
            up: bool,
            /// Requests queued in the client: entry seq.
            queue: VecDeque<u64>,
            /// Sent on this connection, not yet acknowledged: (pkid, seq).
            wire: Vec<(u16, u64)>,
            next_pkid: u16,
            /// Entries the broker has received.
            broker_has: HashSet<u64>,
            /// Entry seq → alarm.
            answers: HashMap<u64, u8>,
            /// Alarms the broker still waits an ack for.
            unacked: BTreeSet<u8>,
            /// Alarms accepted for diagnosis and not yet stored.
            diagnosing: Vec<u8>,
            /// Alarms the inbox made durable: they may be acked before
            /// their diagnosis reaches the broker.
            journaled: HashSet<u8>,
            /// Every alarm ever received: each must end with an answer at
            /// the broker.
            received: BTreeSet<u8>,
            /// While false the broker refuses diagnoses of every third alarm.
            acl_ok: bool,
            next_seq: u64,
            now: u64,
        }

        impl World {
            fn run(&mut self, out: Vec<Output<Handle>>, rng: &mut impl Rng) {
                for o in out {
                    match o {
                        Output::Publish(seq) => {
                            if rng.gen_bool(0.05) {
                                self.d.refused(seq);
                            } else {
                                self.queue.push_back(seq);
                                self.d.handed(seq);
                            }
                        }
                        Output::Ack(h) => {
                            assert_eq!(
                                h.conn, self.conn,
                                "ack with a handle from a lost connection"
                            );
                            assert!(self.up, "ack while disconnected");
                            let delivered = self
                                .answers
                                .iter()
                                .any(|(s, a)| *a == h.alarm && self.broker_has.contains(s));
                            assert!(
                                delivered || self.journaled.contains(&h.alarm),
                                "alarm {} acked before it was durable (journaled or delivered)",
                                h.alarm
                            );
                            self.unacked.remove(&h.alarm);
                        }
                        Output::Delivered(seq) => {
                            assert!(
                                self.broker_has.contains(&seq),
                                "entry {seq} marked delivered but never received"
                            );
                        }
                    }
                }
            }

            fn receive(&mut self, alarm: u8, rng: &mut impl Rng) {
                let h = Handle {
                    alarm,
                    conn: self.conn,
                };
                self.received.insert(alarm);
                let (r, out) = self.d.received(k(alarm), Some(h));
                if r == Receipt::Diagnose {
                    self.diagnosing.push(alarm);
                }
                self.run(out, rng);
                // The inbox takes most alarms; a full one refuses some.
                if r == Receipt::Diagnose && rng.gen_bool(0.6) {
                    self.journaled.insert(alarm);
                    let out = self.d.journaled(&k(alarm));
                    self.run(out, rng);
                }
            }

            fn broker_takes(&self, seq: u64) -> bool {
                self.acl_ok || self.answers[&seq] % 3 != 0
            }

            fn send_one(&mut self) {
                if let Some(seq) = self.queue.pop_front() {
                    self.next_pkid = self.next_pkid % 32 + 1;
                    self.d.sent(self.next_pkid, self.now);
                    self.wire.push((self.next_pkid, seq));
                }
            }

            fn connect(&mut self, rng: &mut impl Rng) {
                // A broker that lost the session (restarted without
                // persistence, or expired it) says so in its ConnAck; the
                // client then drops what it still held for the old session
                // without reporting it (rumqttc 0.25 clears its pending
                // requests), and the broker no longer waits for any ack.
                let session = self.conn == 0 || rng.gen_bool(0.7);
                if !session {
                    self.queue.clear();
                    self.unacked.clear();
                }
                self.up = true;
                self.conn += 1;
                let out = self.d.connected(session);
                self.run(out, rng);
                // A resumed session redelivers every unacknowledged alarm.
                for a in self.unacked.clone() {
                    self.receive(a, rng);
                }
            }
        }

        for seed in 0..1500u64 {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            let mut w = World {
                d: Delivery::new(Settings {
                    window: rng.gen_range(1..4),
                    puback_timeout_ms: 50,
                    remembered: 64,
                    denied_retry_ms: rng.gen_range(1..50),
                    denied_retry_max_ms: 200,
                }),
                conn: 0,
                up: false,
                queue: VecDeque::new(),
                wire: Vec::new(),
                next_pkid: 0,
                broker_has: HashSet::new(),
                answers: HashMap::new(),
                unacked: BTreeSet::new(),
                diagnosing: Vec::new(),
                journaled: HashSet::new(),
                received: BTreeSet::new(),
                acl_ok: rng.gen_bool(0.5),
                next_seq: 1,
                now: 0,
            };
            w.connect(&mut rng);
            let mut next_alarm = 0u8;
            for _ in 0..rng.gen_range(20..200) {
                w.now += rng.gen_range(0..20);
                match rng.gen_range(0..10) {
                    0 | 1 if w.up && next_alarm < 40 => {
                        w.unacked.insert(next_alarm);
                        w.receive(next_alarm, &mut rng);
                        next_alarm += 1;
                    }
                    2 if !w.diagnosing.is_empty() => {
                        let i = rng.gen_range(0..w.diagnosing.len());
                        let a = w.diagnosing.swap_remove(i);
                        let seq = w.next_seq;
                        w.next_seq += 1;
                        w.answers.insert(seq, a);
                        let out = w.d.stored(k(a), seq);
                        w.run(out, &mut rng);
                    }
                    3 | 4 if w.up => w.send_one(),
                    5 | 6 if w.up && !w.wire.is_empty() => {
                        let i = rng.gen_range(0..w.wire.len());
                        let (pkid, seq) = w.wire.remove(i);
                        if w.broker_takes(seq) {
                            w.broker_has.insert(seq);
                            let out = w.d.puback(pkid);
                            w.run(out, &mut rng);
                        } else {
                            let (_, out) = w.d.denied(pkid, w.now);
                            w.run(out, &mut rng);
                        }
                    }
                    7 if w.up => {
                        // The connection breaks: some sent publishes reached
                        // the broker, their PUBACKs did not; the client drops
                        // a prefix of its queue, the rest is sent later.
                        for (_, seq) in std::mem::take(&mut w.wire) {
                            if rng.gen_bool(0.5) && w.broker_takes(seq) {
                                w.broker_has.insert(seq);
                            }
                        }
                        let n = rng.gen_range(0..=w.queue.len());
                        w.queue.drain(..n);
                        w.up = false;
                        w.d.disconnected(n as u64);
                    }
                    8 if !w.up => w.connect(&mut rng),
                    9 if rng.gen_bool(0.1) => w.acl_ok = !w.acl_ok,
                    _ => {
                        let out = w.d.tick(w.now);
                        w.run(out, &mut rng);
                    }
                }
            }
            // The chaos stops: the ACL is fixed, connected, every diagnosis
            // finishes, the client sends and the broker acks everything.
            w.acl_ok = true;
            if !w.up {
                w.connect(&mut rng);
            }
            for _ in 0..10_000 {
                if w.unacked.is_empty() && w.diagnosing.is_empty() && w.d.undelivered() == 0 {
                    break;
                }
                w.now += 10;
                if let Some(a) = w.diagnosing.pop() {
                    let seq = w.next_seq;
                    w.next_seq += 1;
                    w.answers.insert(seq, a);
                    let out = w.d.stored(k(a), seq);
                    w.run(out, &mut rng);
                }
                w.send_one();
                if let Some((pkid, seq)) = w.wire.pop() {
                    w.broker_has.insert(seq);
                    let out = w.d.puback(pkid);
                    w.run(out, &mut rng);
                }
                let out = w.d.tick(w.now);
                w.run(out, &mut rng);
            }
            assert!(
                w.unacked.is_empty(),
                "seed {seed}: alarms never acknowledged: {:?}",
                w.unacked
            );
            assert_eq!(w.d.open_alarms(), 0, "seed {seed}");
            for a in &w.received {
                assert!(
                    w.answers
                        .iter()
                        .any(|(s, x)| x == a && w.broker_has.contains(s)),
                    "seed {seed}: alarm {a} was acknowledged but its answer never reached the broker"
                );
            }
        }
    }
}
