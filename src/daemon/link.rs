//! The hub's side of the broker connection: the MQTT client handle, the
//! topics, which connection is up, the alarm and feedback subscription and
//! the acks and reports it sends. Part of the hub's task, so no locks.
//!
//! Never waits for the client: the poller may itself be waiting for the hub
//! to take an alarm, so every request is a `try_` that a full client queue
//! refuses, and what must go out (acks, the subscription) is retried on the
//! hub's tick. Never decides when an alarm may be acknowledged or a
//! diagnosis published (`delivery` does).

use rumqttc::v5::mqttbytes::v5::Publish;
use rumqttc::v5::AsyncClient;

use super::mqtt;
use crate::alarm::Topics;

/// How long a subscription request may go unanswered before it is asked again.
const SUBSCRIBE_RETRY_MS: u64 = 5_000;

pub(super) struct Link {
    client: AsyncClient,
    topics: Topics,
    /// The connection the poller last reported up; None while it is down.
    live: Option<u64>,
    /// Acks the client's queue refused; retried on the next tick.
    unsent_acks: Vec<Publish>,
    /// Connected and the alarm subscription not yet confirmed.
    subscribe_pending: bool,
    /// When the subscription was last asked for.
    subscribed_ms: u64,
    /// READY was sent to systemd: once, at the first SUBACK.
    ready: bool,
}

impl Link {
    pub(super) fn new(client: AsyncClient, topics: Topics) -> Self {
        Link {
            client,
            topics,
            live: None,
            unsent_acks: Vec::new(),
            subscribe_pending: false,
            subscribed_ms: 0,
            ready: false,
        }
    }

    pub(super) fn topics(&self) -> &Topics {
        &self.topics
    }

    /// Whether an alarm read on connection `epoch` came on the one that is
    /// up, so its ack handle is good.
    pub(super) fn is_live(&self, epoch: u64) -> bool {
        self.live == Some(epoch)
    }

    /// Connection `epoch` is up: the alarms are subscribed to again on it,
    /// since a broker that lost the session lost the subscription too, and
    /// one that kept it treats the repeat as a no-op.
    pub(super) fn connected(&mut self, epoch: u64, now_ms: u64) {
        self.live = Some(epoch);
        self.subscribe_pending = true;
        self.subscribe(now_ms);
    }

    /// The SUBACK came. True the first time: the daemon is ready, as an
    /// alarm published before it would have had no subscriber.
    pub(super) fn subscribed(&mut self) -> bool {
        self.subscribe_pending = false;
        !std::mem::replace(&mut self.ready, true)
    }

    /// The connection went: its ack handles mean nothing on the next one.
    pub(super) fn disconnected(&mut self) {
        self.live = None;
        self.subscribe_pending = false;
        self.unsent_acks.clear();
    }

    /// Asks for the alarm and feedback subscriptions, in one request (so one
    /// SUBACK answers both, and READY waits for both); retried on ticks until
    /// the SUBACK, since a full client queue refuses the request rather than
    /// wait. Feedback rides the alarms' persistent session and QoS 1, so
    /// feedback sent while tidewatch is away is kept for it as alarms are.
    fn subscribe(&mut self, now_ms: u64) {
        use rumqttc::v5::mqttbytes::{v5::Filter, QoS};
        self.subscribed_ms = now_ms;
        let filters = [
            Filter::new(self.topics.alarms(), QoS::AtLeastOnce),
            Filter::new(self.topics.feedback(), QoS::AtLeastOnce),
        ];
        if let Err(e) = self.client.try_subscribe_many(filters) {
            tracing::warn!(error = %e, "cannot subscribe to alarms and feedback yet; retrying");
        }
    }

    /// On the hub's tick, while connected: the acks and the subscription
    /// the client's queue refused, again.
    pub(super) fn retry(&mut self, now_ms: u64) {
        for p in std::mem::take(&mut self.unsent_acks) {
            self.ack(p);
        }
        if self.subscribe_pending && now_ms.saturating_sub(self.subscribed_ms) >= SUBSCRIBE_RETRY_MS
        {
            self.subscribe(now_ms);
        }
    }

    pub(super) fn ack(&mut self, p: Publish) {
        if let Err(e) = self.client.try_ack(&p) {
            tracing::debug!(error = %e, "mqtt client queue full; alarm ack retried shortly");
            self.unsent_acks.push(p);
        }
    }

    /// Hands a stored diagnosis to the client; false when its queue is full.
    pub(super) fn publish_diagnosis(&self, topic: &str, payload: &[u8]) -> bool {
        match mqtt::publish_diagnosis(&self.client, topic, payload) {
            Ok(()) => true,
            Err(err) => {
                tracing::debug!(error = %err, "mqtt client queue full; diagnosis offered again shortly");
                false
            }
        }
    }

    /// Publishes a report on the error topic; false when the client's queue
    /// was full (the report is advisory, and dropped).
    pub(super) fn publish_error(&self, report: &serde_json::Value) -> bool {
        let sent = mqtt::publish_info(
            &self.client,
            self.topics.error(),
            report.to_string().into_bytes(),
            false,
        );
        if let Err(e) = &sent {
            tracing::warn!(error = %e, "cannot publish error report: the mqtt client queue is full");
        }
        sent.is_ok()
    }

    /// Publishes the retained status document.
    pub(super) fn publish_status(&self, status: &serde_json::Value) {
        if let Err(e) = mqtt::publish_info(
            &self.client,
            self.topics.status(),
            status.to_string().into_bytes(),
            true,
        ) {
            tracing::warn!(error = %e, "cannot publish status");
        }
    }

    /// Queues the offline status and the DISCONNECT; true when both were
    /// taken by the client.
    pub(super) fn sign_off(&self) -> bool {
        let offline =
            serde_json::json!({"state": "offline", "ts": crate::diagnosis::now_rfc3339()});
        mqtt::publish_info(
            &self.client,
            self.topics.status(),
            offline.to_string().into_bytes(),
            true,
        )
        .is_ok()
            && self.client.try_disconnect().is_ok()
    }
}
