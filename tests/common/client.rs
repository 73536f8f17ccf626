//! The MQTT client tests talk to the broker with: one subscription, every
//! message it delivers on a channel, and the waits tests need on top of that.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;

use super::{alarm, TlsLogin};

/// What a test client's poll task has seen: a SUBACK yet, and the last
/// connection error.
#[derive(Default)]
pub struct PollState {
    pub subscribed: bool,
    pub last_error: String,
}

/// Runs a test client's event loop: publishes go to `tx`; errors are kept in
/// the returned state and retried after 200 ms, which reconnects.
fn poll(
    mut ev: rumqttc::EventLoop,
    tx: mpsc::UnboundedSender<(String, Vec<u8>)>,
) -> Arc<Mutex<PollState>> {
    let state = Arc::new(Mutex::new(PollState::default()));
    let s = state.clone();
    tokio::spawn(async move {
        loop {
            match ev.poll().await {
                Ok(Event::Incoming(Packet::Publish(p))) => {
                    if tx.send((p.topic.clone(), p.payload.to_vec())).is_err() {
                        return;
                    }
                }
                Ok(Event::Incoming(Packet::SubAck(_))) => s.lock().unwrap().subscribed = true,
                Ok(_) => {}
                Err(e) => {
                    s.lock().unwrap().last_error = e.to_string();
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
            }
        }
    });
    state
}

/// A plain MQTT client for tests: everything under `{prefix}/#` arrives on `rx`.
pub struct Client {
    pub client: AsyncClient,
    pub rx: mpsc::UnboundedReceiver<(String, Vec<u8>)>,
}

impl Client {
    pub async fn connect(port: u16, prefix: &str, id: &str) -> Self {
        Self::connect_with(port, prefix, id, true).await
    }

    /// `clean = false` keeps a persistent session, so QoS 1 messages published
    /// while the broker restarts still reach this client afterwards.
    pub async fn connect_with(port: u16, prefix: &str, id: &str, clean: bool) -> Self {
        let mut o = MqttOptions::new(id, "127.0.0.1", port);
        o.set_clean_session(clean);
        o.set_keep_alive(Duration::from_secs(5));
        o.set_max_packet_size(1 << 20, 1 << 20);
        let (client, ev) = AsyncClient::new(o, 1024);
        let (tx, rx) = mpsc::unbounded_channel();
        client
            .subscribe(format!("{prefix}/#"), QoS::AtLeastOnce)
            .await
            .unwrap();
        poll(ev, tx);
        Client { client, rx }
    }

    /// Connects over TLS with `login` and subscribes to `filter`; returns once
    /// the broker has answered the subscription, or panics with the last
    /// connection error.
    pub async fn connect_tls(port: u16, id: &str, login: &TlsLogin, filter: &str) -> Self {
        let _ = tokio_rustls::rustls::crypto::ring::default_provider().install_default();
        let read = |p: &Path| std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let mut o = MqttOptions::new(id, "127.0.0.1", port);
        o.set_keep_alive(Duration::from_secs(5));
        o.set_max_packet_size(1 << 20, 1 << 20);
        o.set_credentials(login.username.clone(), login.password.clone());
        o.set_transport(rumqttc::Transport::tls_with_config(
            rumqttc::TlsConfiguration::Simple {
                ca: read(&login.ca),
                alpn: None,
                client_auth: login.client.as_ref().map(|(c, k)| (read(c), read(k))),
            },
        ));
        let (client, ev) = AsyncClient::new(o, 1024);
        client.subscribe(filter, QoS::AtLeastOnce).await.unwrap();
        let (tx, rx) = mpsc::unbounded_channel();
        let state = poll(ev, tx);
        let t = Instant::now();
        while !state.lock().unwrap().subscribed {
            assert!(
                t.elapsed() < Duration::from_secs(15),
                "{id} could not subscribe over TLS on 127.0.0.1:{port}: {}",
                state.lock().unwrap().last_error
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Client { client, rx }
    }

    pub async fn publish(&self, topic: &str, payload: impl Into<Vec<u8>>) {
        self.client
            .publish(topic, QoS::AtLeastOnce, false, payload.into())
            .await
            .unwrap();
    }

    /// Waits for a message whose topic matches and for which `pred` holds.
    pub async fn expect(
        &mut self,
        topic: &str,
        timeout: Duration,
        pred: impl Fn(&serde_json::Value) -> bool,
    ) -> serde_json::Value {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let m = tokio::time::timeout_at(deadline, self.rx.recv()).await;
            match m {
                Ok(Some((t, p))) if t == topic => {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&p) {
                        if pred(&v) {
                            return v;
                        }
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => panic!("no matching message on {topic} within {timeout:?}"),
            }
        }
    }

    /// Every message that has arrived and not been read yet, without waiting.
    pub fn drain(&mut self) -> Vec<(String, Vec<u8>)> {
        let mut got = Vec::new();
        while let Ok(m) = self.rx.try_recv() {
            got.push(m);
        }
        got
    }

    /// Publishes an alarm on `{prefix}/alarm/{equipment}` and waits for its
    /// diagnosis on `{prefix}/diagnosis/{equipment}`.
    #[allow(clippy::too_many_arguments)]
    pub async fn ask(
        &mut self,
        prefix: &str,
        id: &str,
        equipment: &str,
        code: &str,
        severity: &str,
        kind: &str,
        message: &str,
    ) -> serde_json::Value {
        let body = alarm(id, equipment, code, severity, kind, message);
        self.publish(&format!("{prefix}/alarm/{equipment}"), body)
            .await;
        let topic = format!("{prefix}/diagnosis/{equipment}");
        self.expect(&topic, Duration::from_secs(90), |v| v["alarm_id"] == id)
            .await
    }

    /// Collects diagnoses until every id in `want` has one (or time runs out);
    /// returns alarm_id -> diagnosis.
    pub async fn collect(
        &mut self,
        prefix: &str,
        want: &std::collections::HashSet<String>,
        timeout: Duration,
    ) -> std::collections::HashMap<String, serde_json::Value> {
        let mut got = std::collections::HashMap::new();
        let deadline = tokio::time::Instant::now() + timeout;
        let dtopic = format!("{prefix}/diagnosis/");
        while got.len() < want.len() {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((t, p))) if t.starts_with(&dtopic) => {
                    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&p) {
                        if let Some(id) = v["alarm_id"].as_str() {
                            if want.contains(id) {
                                got.insert(id.to_string(), v);
                            }
                        }
                    }
                }
                Ok(Some(_)) => {}
                _ => break,
            }
        }
        got
    }

    /// Every diagnosis per alarm id in `want`: alarm_id -> the `ts` of each
    /// copy received (in arrival order), until every id has one and 5 s more
    /// have passed (to catch late duplicates), or `timeout` runs out.
    pub async fn diagnosis_copies(
        &mut self,
        prefix: &str,
        want: &std::collections::HashSet<String>,
        timeout: Duration,
    ) -> std::collections::HashMap<String, Vec<time::OffsetDateTime>> {
        let mut seen: std::collections::HashMap<String, Vec<time::OffsetDateTime>> =
            std::collections::HashMap::new();
        let mut deadline = tokio::time::Instant::now() + timeout;
        let dtopic = format!("{prefix}/diagnosis/");
        loop {
            match tokio::time::timeout_at(deadline, self.rx.recv()).await {
                Ok(Some((t, p))) if t.starts_with(&dtopic) => {
                    let v: serde_json::Value = serde_json::from_slice(&p).unwrap_or_default();
                    if let Some(id) = v["alarm_id"].as_str().filter(|i| want.contains(*i)) {
                        let ts = v["ts"]
                            .as_str()
                            .and_then(|t| {
                                time::OffsetDateTime::parse(
                                    t,
                                    &time::format_description::well_known::Rfc3339,
                                )
                                .ok()
                            })
                            .unwrap_or_else(|| panic!("diagnosis without an RFC 3339 ts: {v}"));
                        seen.entry(id.to_string()).or_default().push(ts);
                        if seen.len() == want.len() {
                            let quiet = tokio::time::Instant::now() + Duration::from_secs(5);
                            deadline = deadline.min(quiet);
                        }
                    }
                }
                Ok(Some(_)) => {}
                _ => return seen,
            }
        }
    }
}
