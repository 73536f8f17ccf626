//! A TCP proxy between the daemon and a real mosquitto that forwards MQTT
//! packets verbatim except one: the broker's PUBACK for the first QoS 1
//! PUBLISH the client sends on a topic containing `needle`. The broker has
//! the message (subscribers get it); only the acknowledgement is lost, as on
//! a flaky link that drops one packet without breaking the connection.

use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Target {
    /// Packet id of the PUBLISH whose PUBACK is to be dropped.
    pkid: Option<u16>,
    /// Set once that PUBACK was dropped; later ones pass.
    dropped: bool,
}

pub struct PubackDropper {
    pub port: u16,
    target: Arc<Mutex<Target>>,
}

impl PubackDropper {
    pub async fn start(broker_port: u16, needle: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let target = Arc::new(Mutex::new(Target::default()));
        let t = target.clone();
        let needle = needle.to_string();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(("127.0.0.1", broker_port)).await else {
                    continue;
                };
                let (cr, cw) = client.into_split();
                let (br, bw) = broker.into_split();
                let (t1, t2, n) = (t.clone(), t.clone(), needle.clone());
                tokio::spawn(pump(cr, bw, move |p| {
                    let mut t = t1.lock().unwrap();
                    if t.pkid.is_none() {
                        if let Some(id) = qos1_publish_to(p, &n) {
                            t.pkid = Some(id);
                        }
                    }
                    true
                }));
                tokio::spawn(pump(br, cw, move |p| {
                    let mut t = t2.lock().unwrap();
                    // The id follows the one-byte length: an MQTT 5 PUBACK
                    // may carry a reason code and properties after it.
                    let is_target = p[0] >> 4 == 4
                        && p.len() >= 4
                        && t.pkid == Some(u16::from_be_bytes([p[2], p[3]]));
                    if is_target && !t.dropped {
                        t.dropped = true;
                        return false;
                    }
                    true
                }));
            }
        });
        PubackDropper { port, target }
    }

    /// Whether the PUBACK was seen and dropped.
    pub fn dropped(&self) -> bool {
        self.target.lock().unwrap().dropped
    }
}

/// Copies whole MQTT packets from `r` to `w`, skipping those `keep` refuses.
async fn pump(
    mut r: tokio::net::tcp::OwnedReadHalf,
    mut w: tokio::net::tcp::OwnedWriteHalf,
    mut keep: impl FnMut(&[u8]) -> bool + Send + 'static,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        while let Some(len) = packet_len(&buf) {
            let p: Vec<u8> = buf.drain(..len).collect();
            if keep(&p) && w.write_all(&p).await.is_err() {
                return;
            }
        }
        match r.read(&mut chunk).await {
            Ok(0) | Err(_) => {
                let _ = w.shutdown().await;
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Length of the first whole packet in `b` (fixed header + remaining length).
fn packet_len(b: &[u8]) -> Option<usize> {
    let mut rem = 0usize;
    for i in 0..4 {
        let byte = *b.get(1 + i)?;
        rem |= ((byte & 0x7f) as usize) << (7 * i);
        if byte & 0x80 == 0 {
            let total = 2 + i + rem;
            return (b.len() >= total).then_some(total);
        }
    }
    None
}

/// The packet id of a QoS 1 PUBLISH whose topic contains `needle`.
fn qos1_publish_to(p: &[u8], needle: &str) -> Option<u16> {
    if p[0] >> 4 != 3 || (p[0] >> 1) & 3 != 1 {
        return None;
    }
    let mut i = 1;
    while p.get(i)? & 0x80 != 0 {
        i += 1;
    }
    let body = &p[i + 1..];
    let tlen = u16::from_be_bytes([*body.first()?, *body.get(1)?]) as usize;
    let topic = std::str::from_utf8(body.get(2..2 + tlen)?).ok()?;
    let id = body.get(2 + tlen..4 + tlen)?;
    topic
        .contains(needle)
        .then(|| u16::from_be_bytes([id[0], id[1]]))
}

/// A proxy that, on the first QoS 1 PUBLISH to a topic containing `needle`
/// that the broker sends, writes it to the client together with the end of
/// the connection (FIN right behind it, so the client reads both at once)
/// and drops the broker side too; later connections pass through. On every
/// connection it checks the client's PUBACKs against the QoS 1 publishes
/// the broker sent on that same connection: a PUBACK for a packet id not
/// outstanding there is an ack handle carried over from a lost connection.
pub struct CutAfterPublish {
    pub port: u16,
    state: Arc<Mutex<CutState>>,
}

#[derive(Default)]
struct CutState {
    cut: bool,
    /// "connection N: PUBACK for packet id P, not outstanding" for each.
    stray_acks: Vec<String>,
}

impl CutAfterPublish {
    pub async fn start(broker_port: u16, needle: &str) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(CutState::default()));
        let st = state.clone();
        let needle = needle.to_string();
        tokio::spawn(async move {
            let mut conn = 0u32;
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(("127.0.0.1", broker_port)).await else {
                    continue;
                };
                conn += 1;
                let outstanding = Arc::new(Mutex::new(std::collections::HashSet::<u16>::new()));
                let (mut cr, cw) = client.into_split();
                let (br, mut bw) = broker.into_split();
                let (o1, s1) = (outstanding.clone(), st.clone());
                // Client → broker: check each PUBACK against this connection.
                tokio::spawn(async move {
                    let mut buf: Vec<u8> = Vec::new();
                    let mut chunk = [0u8; 16 * 1024];
                    loop {
                        while let Some(len) = packet_len(&buf) {
                            let p: Vec<u8> = buf.drain(..len).collect();
                            if p[0] >> 4 == 4 && p.len() >= 4 {
                                let id = u16::from_be_bytes([p[2], p[3]]);
                                if !o1.lock().unwrap().remove(&id) {
                                    s1.lock().unwrap().stray_acks.push(format!(
                                        "connection {conn}: PUBACK for packet id {id}, not outstanding"
                                    ));
                                }
                            }
                            if bw.write_all(&p).await.is_err() {
                                return;
                            }
                        }
                        match cr.read(&mut chunk).await {
                            Ok(0) | Err(_) => {
                                let _ = bw.shutdown().await;
                                return;
                            }
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
                // Broker → client: note QoS 1 publishes; cut after the target.
                let (o2, s2, n) = (outstanding, st.clone(), needle.clone());
                tokio::spawn(async move {
                    let (mut br, mut cw) = (br, cw);
                    let mut buf: Vec<u8> = Vec::new();
                    let mut chunk = [0u8; 16 * 1024];
                    loop {
                        while let Some(len) = packet_len(&buf) {
                            let p: Vec<u8> = buf.drain(..len).collect();
                            let target = qos1_publish_to(&p, &n);
                            if let Some(id) = qos1_publish_to(&p, "") {
                                o2.lock().unwrap().insert(id);
                            }
                            let cut = target.is_some() && !s2.lock().unwrap().cut;
                            if cut {
                                s2.lock().unwrap().cut = true;
                                // The publish and the FIN in one segment
                                // (corked), so the client's read that finds
                                // the publish finds the end right behind it.
                                cork(&cw, true);
                                let _ = cw.write_all(&p).await;
                                let _ = cw.shutdown().await;
                                cork(&cw, false);
                                return;
                            }
                            if cw.write_all(&p).await.is_err() {
                                return;
                            }
                        }
                        match br.read(&mut chunk).await {
                            Ok(0) | Err(_) => {
                                let _ = cw.shutdown().await;
                                return;
                            }
                            Ok(n) => buf.extend_from_slice(&chunk[..n]),
                        }
                    }
                });
            }
        });
        CutAfterPublish { port, state }
    }

    pub fn cut(&self) -> bool {
        self.state.lock().unwrap().cut
    }

    pub fn stray_acks(&self) -> Vec<String> {
        self.state.lock().unwrap().stray_acks.clone()
    }
}

/// TCP_CORK on a socket: hold partial segments until uncorked or closed.
fn cork(w: &tokio::net::tcp::OwnedWriteHalf, on: bool) {
    use std::os::fd::AsRawFd;
    let fd = w.as_ref().as_raw_fd();
    let v: nix::libc::c_int = on.into();
    // SAFETY: a valid socket fd and a c_int option value of the right size.
    let r = unsafe {
        nix::libc::setsockopt(
            fd,
            nix::libc::IPPROTO_TCP,
            nix::libc::TCP_CORK,
            (&v as *const nix::libc::c_int).cast(),
            std::mem::size_of::<nix::libc::c_int>() as nix::libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "setsockopt TCP_CORK");
}

/// A proxy that passes everything through and writes, on demand, packets
/// of the test's own to the client on the connection that is up: what a
/// broker that breaks the protocol would send.
pub struct Injector {
    pub port: u16,
    current: Arc<Mutex<Option<tokio::sync::mpsc::UnboundedSender<Vec<u8>>>>>,
}

impl Injector {
    pub async fn start(broker_port: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let current = Arc::new(Mutex::new(None));
        let cur = current.clone();
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(broker) = TcpStream::connect(("127.0.0.1", broker_port)).await else {
                    continue;
                };
                let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
                *cur.lock().unwrap() = Some(tx);
                let (cr, mut cw) = client.into_split();
                let (mut br, bw) = broker.into_split();
                tokio::spawn(pump(cr, bw, |_| true));
                // Broker → client, with the injected packets between whole
                // ones.
                tokio::spawn(async move {
                    let mut buf: Vec<u8> = Vec::new();
                    let mut chunk = [0u8; 16 * 1024];
                    loop {
                        while let Some(len) = packet_len(&buf) {
                            let p: Vec<u8> = buf.drain(..len).collect();
                            if cw.write_all(&p).await.is_err() {
                                return;
                            }
                        }
                        tokio::select! {
                            r = br.read(&mut chunk) => match r {
                                Ok(0) | Err(_) => {
                                    let _ = cw.shutdown().await;
                                    return;
                                }
                                Ok(n) => buf.extend_from_slice(&chunk[..n]),
                            },
                            Some(p) = rx.recv() => {
                                if cw.write_all(&p).await.is_err() {
                                    return;
                                }
                            }
                        }
                    }
                });
            }
        });
        Injector { port, current }
    }

    /// Writes `packet` to the client on the connection that is up.
    pub fn inject(&self, packet: &[u8]) {
        let g = self.current.lock().unwrap();
        let tx = g.as_ref().expect("no connection through the proxy yet");
        tx.send(packet.to_vec()).expect("the connection is gone");
    }
}

/// An MQTT 5 QoS 0 PUBLISH with an empty topic and topic alias 7, which
/// was never set on the connection: a protocol error (MQTT 5, 3.3.2.3.4).
pub const PUBLISH_WITH_UNKNOWN_ALIAS: [u8; 9] = [
    0x30, 0x07, // PUBLISH, QoS 0; 7 bytes follow
    0x00, 0x00, // topic name: empty
    0x03, 0x23, 0x00, 0x07, // properties (3 bytes): topic alias 7
    b'x', // payload
];
