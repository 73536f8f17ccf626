//! The daemon under test: `tidewatch run` started and waited for, a fake
//! NOTIFY_SOCKET to watch what it tells systemd, and `tidewatch diagnose`.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The daemon under test, with its stderr captured for assertions.
pub struct Daemon {
    pub child: Child,
    pub log: Arc<Mutex<String>>,
}

impl Daemon {
    /// Starts `tidewatch run` on `config` with `env` added to a clean
    /// environment, and does not wait for it: for a restart whose readiness
    /// the test does not need, or a daemon that must never become ready.
    /// [`Daemon::launch`] starts one and waits until it is ready.
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

    /// A daemon on `config` to start and wait for: by default with no extra
    /// environment, ready once it logs "tidewatch ready", within 60 s.
    pub fn launch(config: &Path) -> Launch<'_> {
        Launch {
            config,
            env: Vec::new(),
            within: Duration::from_secs(60),
            first: None,
            notify: None,
            note: None,
        }
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

    /// Panics unless the daemon still runs and has logged no panic: a test
    /// that ends with this proves the daemon took what it was given.
    pub fn assert_alive(&mut self) {
        let exited = self.child.try_wait().ok().flatten();
        let log = self.log();
        assert!(exited.is_none(), "the daemon exited ({exited:?}):\n{log}");
        assert!(
            !log.contains(tidewatch::crash::PANIC_REPORT),
            "the daemon panicked:\n{log}"
        );
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

/// How a daemon is started and what tells the test it is ready; built by
/// [`Daemon::launch`], started by [`Launch::ready`].
pub struct Launch<'a> {
    config: &'a Path,
    env: Vec<(&'a str, String)>,
    within: Duration,
    first: Option<&'a str>,
    notify: Option<&'a mut NotifySocket>,
    note: Option<Box<dyn Fn() -> String + 'a>>,
}

impl<'a> Launch<'a> {
    /// Sets `key` in the daemon's environment.
    pub fn env(mut self, key: &'a str, value: impl Into<String>) -> Self {
        self.env.push((key, value.into()));
        self
    }

    /// Injects `spec` (TIDEWATCH_FAULT; needs the `fault-injection` build).
    pub fn fault(self, spec: &str) -> Self {
        self.env("TIDEWATCH_FAULT", spec)
    }

    /// How long each wait may take (default 60 s).
    pub fn within(mut self, t: Duration) -> Self {
        self.within = t;
        self
    }

    /// Waits for `needle` in the log first, then for ready.
    pub fn first_log(mut self, needle: &'a str) -> Self {
        self.first = Some(needle);
        self
    }

    /// Gives the daemon `n` as its NOTIFY_SOCKET; ready is then READY=1 there
    /// (not the log line), and what arrived until then stays in `n.got`.
    pub fn notify(mut self, n: &'a mut NotifySocket) -> Self {
        self.notify = Some(n);
        self
    }

    /// Adds `note()` (say, the broker's log) to the message when a wait fails.
    pub fn note(mut self, note: impl Fn() -> String + 'a) -> Self {
        self.note = Some(Box::new(note));
        self
    }

    /// Starts the daemon and returns it once ready, or panics with its log.
    pub fn ready(self) -> Daemon {
        let Launch {
            config,
            mut env,
            within,
            first,
            mut notify,
            note,
        } = self;
        if let Some(n) = &notify {
            env.push(("NOTIFY_SOCKET", n.path.display().to_string()));
        }
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let d = Daemon::start(config, &env);
        let note = || {
            note.as_ref()
                .map(|f| format!("\n{}", f()))
                .unwrap_or_default()
        };
        if let Some(needle) = first {
            assert!(
                d.wait_log(needle, within),
                "the daemon did not log {needle:?} within {within:?}:\n{}{}",
                d.log(),
                note()
            );
        }
        match &mut notify {
            Some(n) => assert!(
                n.drain(within, |got| got.iter().any(|m| m == "READY=1")),
                "no READY=1 within {within:?}: {:?}\n{}{}",
                n.got,
                d.log(),
                note()
            ),
            None => assert!(
                d.wait_log("tidewatch ready", within),
                "the daemon never became ready within {within:?}:\n{}{}",
                d.log(),
                note()
            ),
        }
        d
    }
}

/// A fake NOTIFY_SOCKET: the sd_notify datagrams the daemon sends, which
/// systemd would read.
pub struct NotifySocket {
    sock: UnixDatagram,
    pub path: PathBuf,
    /// Every datagram read so far, in arrival order.
    pub got: Vec<String>,
}

/// Binds a NOTIFY_SOCKET at `dir/notify.sock`.
pub fn notify_socket(dir: &Path) -> NotifySocket {
    let path = dir.join("notify.sock");
    let sock = UnixDatagram::bind(&path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(100)))
        .unwrap();
    NotifySocket {
        sock,
        path,
        got: Vec::new(),
    }
}

impl NotifySocket {
    /// Reads datagrams into `got` until `until` holds for them or `timeout`
    /// has passed, and returns whether it held. `|_| false` reads for the
    /// whole of `timeout`.
    pub fn drain(&mut self, timeout: Duration, until: impl Fn(&[String]) -> bool) -> bool {
        let t = Instant::now();
        let mut buf = [0u8; 4096];
        while t.elapsed() < timeout {
            if until(&self.got) {
                return true;
            }
            if let Ok(n) = self.sock.recv(&mut buf) {
                self.got
                    .push(String::from_utf8_lossy(&buf[..n]).into_owned());
            }
        }
        until(&self.got)
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

/// Runs `tidewatch feedback --config CFG ARGS...` with `env` added, and
/// returns what it printed (stdout, stderr) and whether it succeeded.
pub fn feedback_cli(cfg: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tidewatch"));
    c.arg("feedback").arg("--config").arg(cfg).args(args);
    c.env_remove("JOURNAL_STREAM")
        .env_remove("TIDEWATCH_MQTT_PASSWORD");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
