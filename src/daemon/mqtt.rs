//! MQTT: client options and the task that owns the event loop.
//!
//! The daemon speaks MQTT 5 (rumqttc's `v5` client): under 3.1.1 a broker
//! answers a publish its ACL denies with an ordinary PUBACK, so a diagnosis
//! topic the ACL does not grant would swallow every diagnosis unseen. MQTT 5
//! PUBACKs carry a reason code, and CONNECT announces the largest packet the
//! daemon reads, so the broker discards a larger alarm instead of sending it.
//!
//! The poller only polls: it forwards inbound alarms and connection changes
//! over a channel and never publishes (a publish from the polling task can
//! deadlock against its own request queue). On errors it backs off with
//! exponential delay and jitter, then polls again, which reconnects.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rumqttc::v5::mqttbytes::v5::{LastWill, Packet, PubAckReason, Publish, SubscribeReasonCode};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions, Request};
use rumqttc::{Outgoing, Transport};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::alarm::Topics;
use crate::config::MqttConfig;

#[derive(Debug, thiserror::Error)]
pub enum MqttError {
    #[error("mqtt.tls file {path}: {reason}")]
    Tls { path: String, reason: String },
    #[error("cannot reach the MQTT broker at {addr}: {reason}")]
    Connect { addr: String, reason: String },
    /// rumqttc's error carries the whole request back (224 bytes and more);
    /// nothing here resends it, so only the topic is kept.
    #[error("mqtt client queue is full or closed; publish to {topic} not queued")]
    ClientQueue { topic: String },
}

/// Largest packet the daemon reads, announced to the broker in CONNECT
/// (MQTT 5 maximum packet size); see `options`.
pub const MAX_INBOUND: usize = 16 * 1024 * 1024;

/// How long the broker keeps the session while tidewatch is away: for ever
/// (MQTT 5's 0xFFFFFFFF), as a 3.1.1 persistent session did. Without it an
/// MQTT 5 session ends at the disconnect, and with it the alarms queued for
/// a daemon that is restarting.
const SESSION_EXPIRY_NEVER: u32 = u32::MAX;

/// How to reach the config's broker as `client_id` with `login` (user,
/// password): address, keepalive, TLS. What the daemon and the tools that
/// publish for the crew (`tidewatch feedback`) share.
pub fn connection(
    cfg: &MqttConfig,
    client_id: &str,
    login: Option<(String, String)>,
) -> Result<MqttOptions, MqttError> {
    let mut o = MqttOptions::new(client_id, cfg.host.clone(), cfg.port);
    o.set_keep_alive(cfg.keep_alive);
    if let Some((u, p)) = login {
        o.set_credentials(u, p);
    }
    if let Some(tls) = &cfg.tls {
        o.set_transport(tls_transport(tls)?);
    }
    Ok(o)
}

/// The daemon's connection: `connection` with its own login, a session
/// that outlives it, manual acks and its last will.
pub fn options(cfg: &MqttConfig) -> Result<MqttOptions, MqttError> {
    let topics = Topics {
        prefix: cfg.topic_prefix.clone(),
    };
    let login = cfg
        .username
        .clone()
        .map(|u| (u, cfg.password.clone().unwrap_or_default()));
    let mut o = connection(cfg, &cfg.client_id, login)?;
    // A persistent session is what makes the broker keep and redeliver alarms
    // that arrived while tidewatch was down or had not acknowledged them yet.
    o.set_clean_start(false);
    o.set_session_expiry_interval(Some(SESSION_EXPIRY_NEVER));
    o.set_manual_acks(true);
    // Packets are read well past `max_alarm_bytes`, so an oversized alarm is
    // rejected (reported and acknowledged) by `alarm::parse`. Past this
    // size rumqttc would drop the whole connection, and the broker redeliver
    // the poison message on every reconnect, forever: announced in CONNECT,
    // it makes the broker discard such an alarm for us instead (mosquitto:
    // "Dropping too large outgoing PUBLISH"). rumqttc reads up to the same
    // size, so nothing the broker sends can exceed it.
    o.set_max_packet_size(Some(MAX_INBOUND as u32));
    // rumqttc sizes its table of unacknowledged publishes by this (65,536
    // slots by default); `delivery` keeps at most 8 diagnoses in flight.
    o.set_outgoing_inflight_upper_limit(32);
    // Without it mosquitto sends a subscriber 20 QoS 1 messages
    // (max_inflight_messages) and holds the rest until they are acked, and
    // the hub acks only once they are on disk: a pause of a second in the
    // hub (a slow fsync, a starved core) then filled a stock broker's queue
    // of 1,000 and it dropped the newest alarms without a word. mosquitto
    // takes an MQTT 5 client's receive maximum in place of its own limit,
    // so the poller reads on while the hub is stopped (memory bounded by
    // `INBOUND_BUDGET`), and one group commit covers up to this many.
    o.set_receive_maximum(Some(RECEIVE_MAXIMUM));
    o.set_last_will(LastWill::new(
        topics.status(),
        r#"{"state":"offline"}"#,
        QoS::AtLeastOnce,
        true,
        None,
    ));
    Ok(o)
}

fn tls_transport(tls: &crate::config::TlsConfig) -> Result<Transport, MqttError> {
    let read = |p: &std::path::Path| {
        std::fs::read(p).map_err(|e| MqttError::Tls {
            path: p.display().to_string(),
            reason: e.to_string(),
        })
    };
    let ca = read(&tls.ca)?;
    let client_auth = match &tls.client_auth {
        Some((c, k)) => Some((read(c)?, read(k)?)),
        None => None,
    };
    let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
    Ok(Transport::tls_with_config(
        rumqttc::TlsConfiguration::Simple {
            ca,
            alpn: None,
            client_auth,
        },
    ))
}

/// What the poller tells the rest of the daemon. These go over an unbounded
/// channel and are never dropped: each is bounded by the network (the
/// broker's inflight window bounds QoS 1 alarms). QoS 0 alarms, which a
/// flood can bring in any number, go over a bounded channel instead
/// (`Qos0`). Alarms of both kinds hold their bytes' share of
/// `INBOUND_BUDGET` until the hub drops them.
///
/// `epoch` numbers the connections: an alarm carries the connection it was
/// read on, so the hub can tell one read before a loss it has already seen
/// (rumqttc can hand back a PUBLISH read together with the EOF after
/// reporting the error) and never acknowledge it on a later connection.
#[derive(Debug)]
pub enum Inbound {
    Connected {
        session_present: bool,
        epoch: u64,
    },
    /// A QoS 1 (or 2) alarm: the broker waits for its ack. `room` is its
    /// share of `INBOUND_BUDGET`, given back when the hub drops it.
    Alarm {
        publish: Box<Publish>,
        epoch: u64,
        room: OwnedSemaphorePermit,
    },
    /// The client wrote a QoS 1 publish with this packet id.
    Sent(u16),
    /// The broker has the publish with this packet id.
    PubAck(u16),
    /// The broker answered the publish with this packet id with a failure
    /// reason (MQTT 5: not authorized, topic name invalid, quota exceeded):
    /// it does not have it.
    Denied {
        pkid: u16,
        reason: String,
    },
    SubAck,
    /// The connection last reported up is gone (the poller logs why);
    /// `dropped` QoS 1 publishes queued in the client were discarded unsent
    /// (see `delivery`). The hub answers on
    /// `seen` once it has dropped that connection's ack handles: until then
    /// the poller does not reconnect, and after it the poller discards the
    /// acks the hub queued meanwhile, which would otherwise go out on the
    /// next connection under packet ids that mean other messages there.
    Disconnected {
        dropped: u64,
        seen: tokio::sync::oneshot::Sender<()>,
    },
}

/// Requests the client holds before `try_publish` refuses one. Error reports
/// for a flood of bad payloads wait here: while the socket is full rumqttc
/// sends about one request per ten packets it reads, so a 10,000-payload flood
/// can leave thousands queued (~250 bytes each, 4 MiB at most).
pub const CLIENT_QUEUE: usize = 16_384;

/// Alarms the broker may send before tidewatch acknowledges them (MQTT 5
/// receive maximum; see `options`).
pub const RECEIVE_MAXIMUM: u16 = 1024;

/// Bytes of alarms the poller has read and the hub not yet taken: past it
/// the poller stops reading, and the socket and the broker hold the rest.
/// It bounds what `RECEIVE_MAXIMUM` alarms of up to `MAX_INBOUND` bytes
/// could otherwise hold in memory while the hub is stopped, and as much as
/// QoS 0 alarms, which no receive maximum bounds.
pub const INBOUND_BUDGET: usize = 32 * 1024 * 1024;

/// A QoS 0 alarm: the broker does not wait for an ack, and a flood can
/// bring any number. `room` is its share of `INBOUND_BUDGET`, as for a
/// QoS 1 alarm: the channel's depth alone would let 1,024 alarms of up to
/// `MAX_INBOUND` bytes (16 GiB) wait for the hub.
#[derive(Debug)]
pub struct Qos0 {
    pub publish: Publish,
    pub room: OwnedSemaphorePermit,
}

/// Where the poller sends what it reads.
pub struct PollerTx {
    pub events: mpsc::UnboundedSender<Inbound>,
    /// QoS 0 alarms; when full, or the budget spent, the poller waits
    /// (bounded memory, nothing dropped), so the hub must never wait on the
    /// poller.
    pub qos0: mpsc::Sender<Qos0>,
}

/// Delay before the n-th consecutive reconnect attempt: 250 ms doubling to a
/// cap of 8 s, with up to 25% jitter so a fleet of boards does not reconnect
/// in lockstep after a shore broker restart. `jitter` is in 0.0..1.0.
pub fn backoff(attempt: u32, jitter: f64) -> Duration {
    let base = 250u64.saturating_mul(1u64 << attempt.min(5)).min(8_000);
    let j = (base as f64 * 0.25 * jitter.clamp(0.0, 1.0)) as u64;
    Duration::from_millis(base + j)
}

/// A session the broker closes sooner than this after accepting it counts
/// toward the takeover hint and the growing delay.
const SHORT_SESSION: Duration = Duration::from_secs(10);

/// Whether a connection ended because another client took the session
/// over (MQTT 5 DISCONNECT reason 0x8E, rumqttc's `SessionTakenOver`).
pub fn taken_over(error: &str) -> bool {
    error.contains("SessionTakenOver")
}

/// Takeovers in a row, which set the reconnect delay: one more for a
/// takeover of a session that held under a minute, a new run of one for a
/// later one, none once a connection ends otherwise.
pub fn next_takeovers(before: u32, taken_over: bool, held: Duration) -> u32 {
    match (taken_over, held < Duration::from_secs(60)) {
        (false, _) => 0,
        (true, true) => before.saturating_add(1),
        (true, false) => 1,
    }
}

/// What to look at when the broker refused a diagnosis with MQTT 5 reason
/// `reason` (rumqttc's name for it).
pub fn denial_hint(reason: &str, prefix: &str) -> String {
    match reason {
        "NotAuthorized" => format!(
            "the broker's ACL must let tidewatch's user write {prefix}/diagnosis/#: check the acl_file (and its user line) against [mqtt] username and topic_prefix, then reload the broker"
        ),
        "TopicNameInvalid" => {
            format!("the broker refuses the topic: check [mqtt] topic_prefix ({prefix})")
        }
        "QuotaExceeded" => "the broker is over a quota for this client; check its limits".into(),
        _ => format!(
            "check the broker's log and its ACL for {prefix}/diagnosis/#"
        ),
    }
}

/// What to look at when the broker refuses or cannot be reached, from
/// rumqttc's error text: a refusal for credentials or a certificate the
/// broker does not trust is a configuration problem that retrying will not
/// fix, so the log says which keys to check.
pub fn connect_hint(error: &str) -> Option<&'static str> {
    if error.contains("NotAuthorized") || error.contains("BadUserNamePassword") {
        Some("check [mqtt] username and password, and the broker's password file and ACL")
    } else if error.to_lowercase().contains("certificate") || error.contains("UnknownIssuer") {
        Some("check [mqtt.tls] ca, cert and key against the broker's certificates")
    } else if error.contains("Connection refused") || error.contains("os error 111") {
        Some("check [mqtt] host and port, and that the broker is running")
    } else if error.contains("failed to lookup address") {
        Some("check [mqtt] host: the name does not resolve here (on a vessel without DNS, an address or a name in /etc/hosts)")
    } else {
        None
    }
}

/// What one rumqttc event means for the daemon.
enum Read {
    Tell(Inbound),
    /// A QoS 1 (or 2) alarm, read on connection `epoch`.
    Alarm(Publish, u64),
    Qos0(Publish),
    /// rumqttc reports a DISCONNECT: the one shutdown queued, now on the
    /// wire (the poller's work is done), or its answer to a packet from the
    /// broker that breaks the protocol (a PUBLISH with an empty topic and an
    /// unknown topic alias), which it reports without sending: the poller
    /// tells them apart by whether the daemon is leaving.
    Disconnected,
    Nothing,
}

fn read(ev: Event, epoch: u64) -> Read {
    if let Event::Incoming(Packet::Publish(p)) = &ev {
        crate::crash::injected_panic(crate::crash::Place::Poller, &p.payload);
    }
    match ev {
        Event::Incoming(Packet::Publish(p)) if p.qos == QoS::AtMostOnce => Read::Qos0(p),
        Event::Incoming(Packet::Publish(p)) => Read::Alarm(p, epoch),
        // rumqttc reports it once the packet is flushed to the socket.
        Event::Outgoing(Outgoing::Disconnect) => Read::Disconnected,
        Event::Outgoing(Outgoing::Publish(pkid)) if pkid != 0 => Read::Tell(Inbound::Sent(pkid)),
        Event::Outgoing(Outgoing::AwaitAck(pkid)) => {
            // rumqttc holds back every request until this id is acked.
            tracing::warn!(pkid, "mqtt client waits for a PUBACK before sending more");
            Read::Nothing
        }
        Event::Incoming(Packet::PubAck(a)) => Read::Tell(match a.reason {
            // "No matching subscribers" is a success: the broker took it.
            PubAckReason::Success | PubAckReason::NoMatchingSubscribers => Inbound::PubAck(a.pkid),
            r => Inbound::Denied {
                pkid: a.pkid,
                reason: format!("{r:?}"),
            },
        }),
        Event::Incoming(Packet::SubAck(s)) => {
            refused_filters(&s.return_codes);
            Read::Tell(Inbound::SubAck)
        }
        _ => Read::Nothing,
    }
}

/// Says which subscription the broker refused, in the order `link`
/// asks for them: an ACL written before feedback existed refuses feedback
/// only, and alarms are still answered.
fn refused_filters(codes: &[SubscribeReasonCode]) {
    for (what, code) in [
        "alarms ({prefix}/alarm/#)",
        "feedback ({prefix}/feedback/+)",
    ]
    .iter()
    .zip(codes)
    {
        if !matches!(code, SubscribeReasonCode::Success(_)) {
            tracing::error!(reason = ?code, "the broker refused tidewatch's subscription to {what}: its ACL must let tidewatch's user read it (deploy/mosquitto/tidewatch.acl)");
        }
    }
}

/// Passes one event on. Returns false when the poller should end: stopped.
/// A daemon that no longer listens (the serving loop ends before shutdown
/// queues the DISCONNECT) does not end it: what arrives then is left to the
/// broker, which redelivers it. A DISCONNECT is the caller's to judge.
async fn forward(
    r: Read,
    tx: &PollerTx,
    budget: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> bool {
    match r {
        Read::Tell(m) => {
            let _ = tx.events.send(m);
            true
        }
        // Wait for room instead of dropping: meanwhile the socket and the
        // broker hold the rest (TCP backpressure). The hub never waits on
        // the client, so this cannot deadlock.
        Read::Alarm(publish, epoch) => {
            let Some(room) = room_for(&publish, budget, stop).await else {
                return false;
            };
            let _ = tx.events.send(Inbound::Alarm {
                publish: Box::new(publish),
                epoch,
                room,
            });
            true
        }
        Read::Qos0(publish) => {
            let Some(room) = room_for(&publish, budget, stop).await else {
                return false;
            };
            tokio::select! {
                _ = stop.cancelled() => false,
                _ = tx.qos0.send(Qos0 { publish, room }) => true,
            }
        }
        Read::Disconnected | Read::Nothing => true,
    }
}

/// The alarm's share of `budget`, once there is that much room; None on
/// `stop`.
async fn room_for(
    publish: &Publish,
    budget: &Arc<Semaphore>,
    stop: &CancellationToken,
) -> Option<OwnedSemaphorePermit> {
    let n = publish.payload.len().clamp(1, INBOUND_BUDGET) as u32;
    tokio::select! {
        _ = stop.cancelled() => None,
        room = budget.clone().acquire_many_owned(n) => room.ok(),
    }
}

/// Owns `eventloop.poll()`. `turned` is stamped (ms since `epoch`) after every
/// poll so the systemd watchdog can tell a stuck loop from a quiet one.
///
/// It ends once it has written the DISCONNECT of a daemon that is
/// `leaving`, or on `stop`. Not on the daemon's cancel: the offline status
/// and the DISCONNECT that shutdown queues are written by this loop, and a
/// connection closed without them makes the broker publish the last will
/// instead. A DISCONNECT while not leaving is rumqttc's answer to a broker
/// that broke the protocol: the connection is dropped and made again.
pub async fn run_poller(
    mut eventloop: EventLoop,
    tx: PollerTx,
    turned: Arc<AtomicU64>,
    epoch: std::time::Instant,
    stop: CancellationToken,
    leaving: CancellationToken,
) {
    let mut failures = 0u32;
    // "lost" only for a session that was up; a broker that never accepted us
    // is a different problem for the operator reading the journal.
    let mut connected = false;
    let mut conn = 0u64;
    let (host, port) = eventloop.options.broker_address();
    let broker = format!("{host}:{port}");
    let client_id = eventloop.options.client_id();
    // Two clients with one id throw each other off at every connect; each
    // connect succeeds, so `failures` alone would never grow the delay.
    let (mut takeovers, mut connected_at) = (0u32, std::time::Instant::now());
    let budget = Arc::new(Semaphore::new(INBOUND_BUDGET));
    loop {
        let ev = tokio::select! {
            _ = stop.cancelled() => return,
            ev = eventloop.poll() => ev,
        };
        turned.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
        let e = match ev {
            Ok(Event::Incoming(Packet::ConnAck(ack))) => {
                failures = 0;
                connected = true;
                connected_at = std::time::Instant::now();
                conn += 1;
                let m = Inbound::Connected {
                    session_present: ack.session_present,
                    epoch: conn,
                };
                let _ = tx.events.send(m);
                continue;
            }
            Ok(ev) => match read(ev, conn) {
                Read::Disconnected if leaving.is_cancelled() => return,
                Read::Disconnected => PROTOCOL_BROKEN.to_string(),
                r => {
                    if !forward(r, &tx, &budget, &stop).await {
                        return;
                    }
                    continue;
                }
            },
            Err(e) => e.to_string(),
        };
        // What rumqttc read before the error is still buffered and would be
        // handed out after the reconnect as if it came on the new
        // connection: pass it on now, under the connection it came on.
        for ev in std::mem::take(&mut eventloop.state.events) {
            let r = read(ev, conn);
            if matches!(r, Read::Disconnected) && leaving.is_cancelled() {
                return;
            }
            if !forward(r, &tx, &budget, &stop).await {
                return;
            }
        }
        let dropped = drop_session(&mut eventloop);
        let (seen, hub_saw_it) = tokio::sync::oneshot::channel();
        let _ = tx.events.send(Inbound::Disconnected { dropped, seen });
        let text = e.to_string();
        let held = connected_at.elapsed();
        // mosquitto closes the old connection of a taken-over id, often
        // before its DISCONNECT (reason SessionTakenOver) can be read.
        let like_takeover = taken_over(&text)
            || (connected && held < SHORT_SESSION && text.contains("closed by peer"));
        takeovers = next_takeovers(takeovers, like_takeover, held);
        let d = backoff(failures.max(takeovers), rand::random::<f64>());
        failures = failures.saturating_add(1);
        let retry_in_ms = d.as_millis() as u64;
        if taken_over(&text) {
            tracing::warn!(client_id = %client_id, broker = %broker, retry_in_ms, takeovers,
                "mqtt session taken over: another client connected to {broker} with client id {client_id:?}, so the broker dropped this one; two daemons (or another program) share it: give each its own [mqtt] client_id");
        } else if takeovers >= 2 {
            tracing::warn!(client_id = %client_id, broker = %broker, retry_in_ms, takeovers,
                "mqtt session closed by the broker {takeovers} times in a row within seconds of connecting: most likely another client uses client id {client_id:?} on {broker} (two daemons, or another program); give each its own [mqtt] client_id");
        } else if std::mem::take(&mut connected) {
            tracing::warn!(error = %text, broker = %broker, retry_in_ms, "mqtt connection lost with {broker}");
        } else {
            let hint = connect_hint(&text).unwrap_or("");
            tracing::warn!(error = %text, broker = %broker, retry_in_ms, hint, "mqtt cannot connect to {broker}");
        }
        connected = false;
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = async { tokio::join!(tokio::time::sleep(d), hub_saw_it) } => {}
        }
        // Acks the hub queued before it saw the loss: `clean` drops queued
        // PUBACKs and keeps every other request for the next connection,
        // which sends them if the broker kept the session and silently
        // clears them if not (`delivery::Delivery::connected` counts those).
        eventloop.clean();
        turned.store(epoch.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
}

/// Why the poller drops a connection on which rumqttc reported a DISCONNECT
/// the daemon did not ask for.
const PROTOCOL_BROKEN: &str = "the broker broke the MQTT protocol (rumqttc answered one of its packets, such as a PUBLISH with an empty topic and an unknown topic alias, with a protocol-error DISCONNECT); the connection is dropped and made again";

/// Drops rumqttc's in-memory session after a connection error: publishes it
/// would resend and requests still queued. The daemon's delivery state
/// republishes undelivered diagnoses itself, and alarm acks from the old
/// connection must not be sent on the new one. Returns how many QoS 1
/// publishes were discarded without ever being sent (packet id still 0, or
/// parked on a collision), so the daemon can keep its count of sent
/// publishes exact.
fn drop_session(eventloop: &mut EventLoop) -> u64 {
    // rumqttc cleans up after its own read/write errors, but not after a
    // failed connect, and requests may have been queued since.
    eventloop.clean();
    let dropped = eventloop
        .pending
        .iter()
        .filter(|r| matches!(r, Request::Publish(p) if p.qos != QoS::AtMostOnce && p.pkid == 0))
        .count() as u64;
    eventloop.pending.clear();
    // A publish parked on a packet-id collision (its id still held by one
    // whose PUBACK never came) was never sent, and `clean()` keeps it: while
    // it is parked rumqttc sends no request on any later connection either.
    let parked = eventloop
        .state
        .collision
        .take()
        .is_some_and(|p| p.qos != QoS::AtMostOnce);
    dropped + u64::from(parked)
}

/// Hands a diagnosis to the client as QoS 1 without waiting: a full request
/// queue is reported, not waited out, so the caller's loop never stalls.
/// Only outbox entries (diagnoses and site notes) use QoS 1, which is what
/// lets `delivery` match PUBACKs.
pub fn publish_diagnosis(
    client: &AsyncClient,
    topic: &str,
    payload: &[u8],
) -> Result<(), MqttError> {
    client
        .try_publish(topic, QoS::AtLeastOnce, false, payload.to_vec())
        .map_err(|_| MqttError::ClientQueue {
            topic: topic.to_string(),
        })
}

/// Publishes status (retained) or an error report as QoS 0: the next status
/// replaces a lost one, and errors are advisory.
pub fn publish_info(
    client: &AsyncClient,
    topic: String,
    payload: Vec<u8>,
    retain: bool,
) -> Result<(), MqttError> {
    let queue_full = |_| MqttError::ClientQueue {
        topic: topic.clone(),
    };
    client
        .try_publish(topic.clone(), QoS::AtMostOnce, retain, payload)
        .map_err(queue_full)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_the_keys_to_check() {
        let auth = "Connection refused, return code: `NotAuthorized`";
        assert!(connect_hint(auth)
            .unwrap()
            .contains("username and password"));
        let tls = "TLS error: invalid peer certificate: UnknownIssuer";
        assert!(connect_hint(tls).unwrap().contains("[mqtt.tls]"));
        let down = "I/O: Connection refused (os error 111)";
        assert!(connect_hint(down).unwrap().contains("host and port"));
        let no_cert = "TLS error: received fatal alert: CertificateRequired";
        assert!(connect_hint(no_cert).unwrap().contains("[mqtt.tls]"));
        assert_eq!(connect_hint("Timeout"), None);
        // A host name that does not resolve had no hint: the log said only
        // the resolver's words, for ever, and systemd never heard ready.
        for dns in [
            "I/O: failed to lookup address information: Name or service not known",
            "I/O: failed to lookup address information: Temporary failure in name resolution",
        ] {
            assert!(connect_hint(dns).unwrap().contains("[mqtt] host"), "{dns}");
        }
    }

    #[test]
    fn a_publish_parked_on_a_collision_is_dropped_with_the_session() {
        let (_client, mut eventloop) = AsyncClient::new(MqttOptions::new("t", "127.0.0.1", 1), 10);
        let mut parked = Publish::new("t/diagnosis/x", QoS::AtLeastOnce, b"{}".to_vec(), None);
        parked.pkid = 2;
        eventloop.state.collision = Some(parked);
        assert_eq!(drop_session(&mut eventloop), 1, "never sent, so dropped");
        assert!(eventloop.state.collision.is_none());
        assert_eq!(drop_session(&mut eventloop), 0);
    }

    fn mqtt_config() -> MqttConfig {
        MqttConfig {
            host: "127.0.0.1".into(),
            port: 1883,
            client_id: "tw-1".into(),
            topic_prefix: "tw".into(),
            username: None,
            password: None,
            keep_alive: Duration::from_secs(5),
            max_alarm_bytes: 8192,
            numeric_severity: Default::default(),
            tls: None,
        }
    }

    #[test]
    fn the_session_outlives_the_connection_and_the_largest_packet_is_announced() {
        let o = options(&mqtt_config()).unwrap();
        assert!(!o.clean_start());
        assert_eq!(o.session_expiry_interval(), Some(u32::MAX), "never expires");
        assert_eq!(o.max_packet_size(), Some(MAX_INBOUND as u32));
        assert!(o.manual_acks());
        let will = o.last_will().unwrap();
        assert_eq!(&will.topic[..], b"tw/status");
        assert!(will.retain);
    }

    #[test]
    fn a_puback_with_a_failure_reason_is_a_denial_but_no_subscribers_is_not() {
        let ack = |reason| {
            let mut a = rumqttc::v5::mqttbytes::v5::PubAck::new(7, None);
            a.reason = reason;
            match read(Event::Incoming(Packet::PubAck(a)), 1) {
                Read::Tell(i) => i,
                _ => panic!("a PUBACK must be told to the hub"),
            }
        };
        assert!(matches!(ack(PubAckReason::Success), Inbound::PubAck(7)));
        assert!(matches!(
            ack(PubAckReason::NoMatchingSubscribers),
            Inbound::PubAck(7)
        ));
        match ack(PubAckReason::NotAuthorized) {
            Inbound::Denied { pkid: 7, reason } => assert_eq!(reason, "NotAuthorized"),
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ack(PubAckReason::QuotaExceeded),
            Inbound::Denied { pkid: 7, .. }
        ));
    }

    #[test]
    fn a_denial_names_the_acl_and_the_prefix_to_check() {
        let h = denial_hint("NotAuthorized", "ship");
        assert!(h.contains("ACL") && h.contains("ship/diagnosis/#"), "{h}");
        assert!(denial_hint("TopicNameInvalid", "ship").contains("topic_prefix"));
        assert!(denial_hint("UnspecifiedError", "ship").contains("ship/diagnosis/#"));
    }

    // Two daemons with one client id threw each other off about
    // 3 times a second forever; the delay never grew.
    #[test]
    fn takeovers_in_a_row_grow_the_reconnect_delay_and_a_long_session_starts_over() {
        let quick = Duration::from_millis(300);
        let mut t = 0;
        let mut delays = Vec::new();
        for _ in 0..6 {
            t = next_takeovers(t, true, quick);
            delays.push(backoff(t, 0.0));
        }
        assert!(delays.windows(2).all(|w| w[0] <= w[1]), "{delays:?}");
        assert_eq!(delays[5], Duration::from_millis(8_000));
        assert_eq!(next_takeovers(t, true, Duration::from_secs(600)), 1);
        assert_eq!(next_takeovers(t, false, quick), 0);
        assert!(taken_over(
            "Server sent disconnect with reason `None` and code 'SessionTakenOver' "
        ));
        assert!(!taken_over("I/O: Connection refused (os error 111)"));
    }

    #[test]
    fn backoff_grows_to_a_cap_with_bounded_jitter() {
        assert_eq!(backoff(0, 0.0), Duration::from_millis(250));
        assert_eq!(backoff(1, 0.0), Duration::from_millis(500));
        assert_eq!(backoff(10, 0.0), Duration::from_millis(8_000));
        assert_eq!(backoff(10, 1.0), Duration::from_millis(10_000));
        assert!(backoff(3, 0.5) > backoff(3, 0.0));
    }

    // QoS 0 alarms went around the budget into a 1,024-deep
    // channel, up to 16 MiB each, while the hub was busy.
    #[tokio::test]
    async fn a_burst_of_large_qos0_alarms_stays_within_the_inbound_budget() {
        use std::future::Future;
        use std::task::{Context, Poll, Waker};
        let (events, _events) = mpsc::unbounded_channel();
        let (qos0, mut hub) = mpsc::channel(1024);
        let tx = PollerTx { events, qos0 };
        let budget = Arc::new(Semaphore::new(INBOUND_BUDGET));
        let stop = CancellationToken::new();
        let big = MAX_INBOUND / 2;
        let mut forwarded = 0;
        for _ in 0..16 {
            let p = Publish::new("t/alarm/E", QoS::AtMostOnce, vec![b'x'; big], None);
            let mut f = std::pin::pin!(forward(Read::Qos0(p), &tx, &budget, &stop));
            match f.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
                Poll::Ready(up) => {
                    assert!(up);
                    forwarded += 1;
                }
                // The poller waits here: the socket holds the rest.
                Poll::Pending => break,
            }
        }
        let mut waiting = Vec::new();
        while let Ok(a) = hub.try_recv() {
            waiting.push(a);
        }
        let held: usize = waiting.iter().map(|a| a.publish.payload.len()).sum();
        assert!(
            held <= INBOUND_BUDGET,
            "{forwarded} QoS 0 alarms, {held} bytes, wait for the hub: past the budget of {INBOUND_BUDGET}"
        );
        assert_eq!(forwarded, INBOUND_BUDGET / big, "the budget is used");
        assert_eq!(budget.available_permits(), 0);
        drop(waiting);
        assert_eq!(
            budget.available_permits(),
            INBOUND_BUDGET,
            "the hub gives the room back"
        );
    }
}
