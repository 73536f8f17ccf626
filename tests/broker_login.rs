//! The board's loopback listener as shipped (deploy/mosquitto/local.conf and
//! tidewatch.acl) with the login that deploy/mosquitto/login.sh writes for
//! install.sh, the real daemon and the real test model. The daemon gets in with
//! that login and answers alarms; a local client logged in as somebody else
//! that asks for the daemon's client id with a clean session cannot make the
//! broker discard the daemon's session and the alarm queued in it.
//! (deploy/mosquitto/selftest.sh checks the same broker rules with
//! mosquitto_sub alone, also for anonymous and LAN clients.)

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(240);
/// tidewatch.acl grants rights under this prefix only.
const PREFIX: &str = "tidewatch";

/// A mosquitto running the deploy loopback config on a free port, with the
/// daemon's config and login made by login.sh, and logins for two sensors
/// (named for their equipment, as tidewatch.acl wants), an operator, an
/// intruder (a user the ACL grants nothing) and a watcher that reads alarms
/// in the daemon's place.
struct Board {
    broker: Broker,
    cfg: PathBuf,
}

impl Board {
    fn start() -> Self {
        let passwd_bin = require_tool("mosquitto_passwd", "mosquitto");
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        let port = free_port();
        let cfg = config(d, port, PREFIX, "", "");
        let passwd = d.join("passwd");
        let out = Command::new(repo().join("deploy/mosquitto/login.sh"))
            .arg(&cfg)
            .arg(&passwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "login.sh failed: {}", text(&out));
        for (user, pass) in [
            ("ME1", "sensor-secret"),
            ("ME2", "sensor-secret"),
            ("operator", "operator-secret"),
            ("intruder", "intruder-secret"),
            ("watcher", "watcher-secret"),
        ] {
            let out = Command::new(&passwd_bin)
                .arg("-b")
                .arg(&passwd)
                .args([user, pass])
                .output()
                .unwrap();
            assert!(out.status.success(), "mosquitto_passwd: {}", text(&out));
        }
        let conf = deploy_conf(d, port, &passwd);
        // mosquitto drops root to its own user, which must read these.
        for (p, mode) in [(d, 0o755), (&passwd, 0o644), (&conf, 0o644)] {
            std::fs::set_permissions(p, std::os::unix::fs::PermissionsExt::from_mode(mode))
                .unwrap();
        }
        Board {
            broker: Broker::start_conf(dir, port, &conf),
            cfg,
        }
    }

    fn log(&self) -> String {
        self.broker.log()
    }

    /// mosquitto_sub or mosquitto_pub on the loopback listener as `user`.
    fn tool(&self, tool: &str, user: &str, pass: &str) -> Command {
        let mut c = Command::new(tool);
        c.args([
            "-h",
            "127.0.0.1",
            "-p",
            &self.broker.port.to_string(),
            "-u",
            user,
            "-P",
            pass,
        ]);
        c
    }

    /// The operator's persistent subscription to diagnoses, made before any
    /// alarm so that none can be missed; `operator_reads` collects from it.
    fn operator_subscribes(&self) {
        let out = self
            .tool("mosquitto_sub", "operator", "operator-secret")
            .args([
                "-c",
                "-i",
                "operator-console",
                "-q",
                "1",
                "-t",
                "tidewatch/diagnosis/#",
                "-E",
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "operator cannot subscribe: {}\n{}",
            text(&out),
            self.log()
        );
    }

    /// The first diagnosis queued for the operator, within `T`.
    fn operator_reads(&self) -> serde_json::Value {
        let out = self
            .tool("mosquitto_sub", "operator", "operator-secret")
            .args([
                "-c",
                "-i",
                "operator-console",
                "-q",
                "1",
                "-t",
                "tidewatch/diagnosis/#",
                "-C",
                "1",
            ])
            .args(["-W", &T.as_secs().to_string()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "no diagnosis within {T:?}: {}\nbroker:\n{}",
            text(&out),
            self.log()
        );
        serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| panic!("diagnosis is not JSON ({e}): {}", text(&out)))
    }

    /// The `n` diagnoses queued for the operator next, within `within`; on a
    /// timeout, the ones that came.
    fn operator_reads_n(
        &self,
        n: usize,
        within: Duration,
    ) -> Result<Vec<serde_json::Value>, String> {
        let out = self
            .tool("mosquitto_sub", "operator", "operator-secret")
            .args(["-c", "-i", "operator-console", "-q", "1"])
            .args(["-t", "tidewatch/diagnosis/#", "-C", &n.to_string()])
            .args(["-W", &within.as_secs().to_string()])
            .output()
            .unwrap();
        let got: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
            .collect();
        if out.status.success() {
            Ok(got)
        } else {
            Err(format!(
                "{} of {n} diagnoses within {within:?} ({}): {:?}",
                got.len(),
                String::from_utf8_lossy(&out.stderr).trim(),
                got.iter()
                    .map(|d| d["alarm_id"].clone())
                    .collect::<Vec<_>>()
            ))
        }
    }

    fn sensor_raises(&self, id: &str) {
        let body = alarm(
            id,
            "ME1",
            "ME-LO-PRES-LO",
            "critical",
            "main_engine_lube_oil",
            "main engine lube oil inlet pressure low, standby pump started",
        );
        let out = self
            .tool("mosquitto_pub", "ME1", "sensor-secret")
            .args(["-q", "1", "-t", "tidewatch/alarm/ME1", "-m", &body])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "sensor cannot publish: {}",
            text(&out)
        );
    }
}

/// deploy/mosquitto/local.conf with this test's port and files in place of the
/// board's, after the persistence lines of Debian's mosquitto.conf (the
/// database in `dir/db`); and the ACL as shipped with one block added:
/// `watcher` reads alarms, so a test can see what reaches the daemon without
/// being it.
fn deploy_conf(dir: &Path, port: u16, passwd: &Path) -> PathBuf {
    let acl = dir.join("tidewatch.acl");
    let shipped = std::fs::read_to_string(repo().join("deploy/mosquitto/tidewatch.acl")).unwrap();
    std::fs::write(
        &acl,
        format!("{shipped}\nuser watcher\ntopic read tidewatch/alarm/#\n"),
    )
    .unwrap();
    std::fs::set_permissions(&acl, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let shipped = std::fs::read_to_string(repo().join("deploy/mosquitto/local.conf")).unwrap();
    // mosquitto drops root to its own user, which must write the database.
    let db = dir.join("db");
    std::fs::create_dir(&db).unwrap();
    std::fs::set_permissions(&db, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let mut conf = format!(
        "log_dest stderr\nlog_type all\npersistence true\npersistence_location {}/\n{shipped}",
        db.display()
    );
    for (from, to) in [
        (
            "listener 1883 127.0.0.1",
            format!("listener {port} 127.0.0.1"),
        ),
        (
            "/etc/mosquitto/tidewatch.passwd",
            passwd.display().to_string(),
        ),
        ("/etc/mosquitto/tidewatch.acl", acl.display().to_string()),
    ] {
        assert!(
            conf.contains(from),
            "local.conf no longer says {from:?}; update this test"
        );
        conf = conf.replace(from, &to);
    }
    let p = dir.join("mosquitto.conf");
    std::fs::write(&p, conf).unwrap();
    p
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[test]
fn daemon_with_the_login_install_writes_answers_alarms_on_the_deploy_loopback_listener() {
    let _serial = common::serial();
    let b = Board::start();
    let cfg = std::fs::read_to_string(&b.cfg).unwrap();
    assert!(
        cfg.contains("username = \"tidewatch\""),
        "login.sh wrote no username:\n{cfg}"
    );
    b.operator_subscribes();

    let _d = Daemon::launch(&b.cfg)
        .within(T)
        .note(|| format!("with its login; broker:\n{}", b.log()))
        .ready();
    b.sensor_raises("login-1");
    let diag = b.operator_reads();
    assert_eq!(diag["alarm_id"], "login-1", "{diag}");
    assert_full_diagnosis_shape(&diag);
    assert_model_answered(&diag);
    // The broker took the daemon as user tidewatch, under that name as its id.
    assert!(b.log().contains("u'tidewatch'"), "{}", b.log());
}

#[test]
fn clean_session_under_the_daemons_client_id_from_another_login_keeps_its_queued_alarm() {
    let _serial = common::serial();
    let b = Board::start();
    b.operator_subscribes();
    let mut d = Daemon::launch(&b.cfg)
        .within(T)
        .note(|| format!("broker:\n{}", b.log()))
        .ready();
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        d.wait_exit(Duration::from_secs(30)).is_some(),
        "daemon did not stop:\n{}",
        d.log()
    );

    // The daemon is away; the broker holds this alarm in its persistent session.
    b.sensor_raises("hijack-1");
    // The daemon's client id is in its config, and predictable anyway.
    let out = b
        .tool("mosquitto_sub", "intruder", "intruder-secret")
        .args(["-i", &format!("tidewatch-test-{PREFIX}"), "-t", "x", "-E"])
        .output()
        .unwrap();
    // Whether the intruder is then let in does not matter, only what its
    // connection did to the daemon's session.
    eprintln!("intruder: {}", text(&out));

    let d = Daemon::start(&b.cfg, &[]);
    let diag = b.operator_reads();
    assert_eq!(
        diag["alarm_id"], "hijack-1",
        "the alarm queued for the daemon was not the first one answered after the intruder:\n{diag}\n{}",
        d.log()
    );
}

/// Login.sh gave the new password to awk as `-v lines=...`,
/// where every local user can read it in /proc/PID/cmdline. Every program
/// login.sh starts goes through a PATH of shims that log their arguments,
/// and /proc/*/cmdline is sampled meanwhile for programs started otherwise.
#[test]
fn login_sh_never_puts_the_password_on_a_command_line() {
    require_tool("mosquitto_passwd", "mosquitto");
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let cfg = config(d, free_port(), PREFIX, "", "");
    let toml = std::fs::read_to_string(&cfg).unwrap();
    assert!(!toml.contains("password"), "{toml}");

    // shims/NAME -> log.sh for every program on PATH: log.sh appends its
    // arguments to args.log and runs the real NAME.
    let shims = d.join("shims");
    std::fs::create_dir(&shims).unwrap();
    let log = d.join("args.log");
    let path = std::env::var("PATH").unwrap();
    let recorder = d.join("log.sh");
    std::fs::write(
        &recorder,
        format!(
            "#!/bin/bash\nprintf '%q ' \"${{0##*/}}\" \"$@\" >>'{log}'\necho >>'{log}'\n\
             real=$(PATH='{path}' command -v \"${{0##*/}}\") || exit 127\nexec \"$real\" \"$@\"\n",
            log = log.display(),
        ),
    )
    .unwrap();
    std::fs::set_permissions(
        &recorder,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    for p in std::env::split_paths(&path) {
        for e in std::fs::read_dir(&p).into_iter().flatten().flatten() {
            let _ = std::os::unix::fs::symlink(&recorder, shims.join(e.file_name()));
        }
    }

    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let done = done.clone();
        std::thread::spawn(move || {
            let mut seen = std::collections::HashSet::new();
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                for e in std::fs::read_dir("/proc").unwrap().flatten() {
                    if let Ok(c) = std::fs::read(e.path().join("cmdline")) {
                        seen.insert(String::from_utf8_lossy(&c).replace('\0', " "));
                    }
                }
            }
            seen
        })
    };
    let out = Command::new(repo().join("deploy/mosquitto/login.sh"))
        .arg(&cfg)
        .arg(d.join("passwd"))
        .env("PATH", format!("{}:{path}", shims.display()))
        .output()
        .unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    let sampled = sampler.join().unwrap();
    assert!(out.status.success(), "login.sh failed: {}", text(&out));

    let toml = std::fs::read_to_string(&cfg).unwrap();
    let password = toml
        .lines()
        .find_map(|l| l.strip_prefix("password = \""))
        .and_then(|l| l.strip_suffix('"'))
        .unwrap_or_else(|| panic!("login.sh wrote no password:\n{toml}"));
    assert_eq!(password.len(), 32, "{toml}");
    let started = std::fs::read_to_string(&log).unwrap_or_default();
    // The shims did see login.sh's programs, or this test proves nothing.
    assert!(
        started.lines().any(|l| l.starts_with("mosquitto_passwd ")),
        "the shims saw no mosquitto_passwd:\n{started}"
    );
    for line in started.lines() {
        assert!(
            !line.contains(password),
            "login.sh put the password on a command line: {line}"
        );
    }
    // The sampler did look while login.sh ran.
    assert!(
        sampled.iter().any(|c| c.contains("login.sh")),
        "the sampler never saw login.sh"
    );
    for cmdline in &sampled {
        assert!(
            !cmdline.contains(password),
            "a process had the password in its arguments: {cmdline}"
        );
    }
}

/// The queue merges alarms by equipment and code, and the
/// shipped ACL let every sensor write every alarm topic, so one sensor's text
/// went into the diagnosis of another's genuine alarm. Now a sensor's login is
/// its equipment's name and writes that equipment's topic only; people write
/// none, even one named like equipment.
#[test]
fn a_sensor_login_raises_alarms_for_its_own_equipment_only() {
    let _serial = common::serial();
    let b = Board::start();
    let watch = |extra: &[&str]| {
        let out = b
            .tool("mosquitto_sub", "watcher", "watcher-secret")
            .args([
                "-c",
                "-i",
                "watcher",
                "-q",
                "1",
                "-v",
                "-t",
                "tidewatch/alarm/#",
            ])
            .args(extra)
            .output()
            .unwrap();
        assert!(out.status.success(), "watcher: {}\n{}", text(&out), b.log());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    // The watcher's persistent session, so nothing published below is missed.
    watch(&["-E"]);
    let body = |id: &str, equipment: &str| {
        alarm(
            id,
            equipment,
            "ME-LO-PRES-LO",
            "critical",
            "main_engine_lube_oil",
            "lube oil pressure low",
        )
    };
    // Forgeries first: had one got through, the watcher would read it first.
    for (user, pass, equipment, id) in [
        ("ME2", "sensor-secret", "ME1", "forged-by-ME2"),
        (
            "operator",
            "operator-secret",
            "operator",
            "forged-by-operator",
        ),
        ("ME1", "sensor-secret", "ME1", "own-ME1"),
        ("ME2", "sensor-secret", "ME2", "own-ME2"),
    ] {
        let out = b
            .tool("mosquitto_pub", user, pass)
            .args(["-q", "1", "-t", &format!("tidewatch/alarm/{equipment}")])
            .args(["-m", &body(id, equipment)])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{user} cannot connect: {}",
            text(&out)
        );
    }
    let got = watch(&["-C", "2", "-W", "10"]);
    let topics_ids: Vec<(String, String)> = got
        .lines()
        .map(|l| {
            let (topic, payload) = l.split_once(' ').unwrap();
            let v: serde_json::Value = serde_json::from_str(payload).unwrap();
            (topic.to_string(), v["id"].as_str().unwrap().to_string())
        })
        .collect();
    assert_eq!(
        topics_ids,
        [
            ("tidewatch/alarm/ME1".to_string(), "own-ME1".to_string()),
            ("tidewatch/alarm/ME2".to_string(), "own-ME2".to_string()),
        ],
        "broker:\n{}",
        b.log()
    );
    let log = b.log();
    for denied in ["Denied PUBLISH from ME2", "Denied PUBLISH from operator"] {
        assert!(
            log.contains(denied),
            "no {denied:?} in the broker log:\n{log}"
        );
    }
}

/// Mosquitto writes its queues to disk only at a clean exit
/// and every `autosave_interval` (1,800 s by default), so a power cut lost
/// every alarm queued for a daemon that was away. SIGKILL is the power cut
/// here (nothing is saved on the way out; what the kernel already has is
/// kept, so this checks the broker's side only). With the shipped local.conf
/// the queue is saved within about 2 s.
#[test]
fn alarms_queued_for_the_stopped_daemon_survive_the_broker_killed_3_s_later() {
    let _serial = common::serial();
    let b = Board::start();
    // The daemon's persistent session: it runs once, then stops.
    let mut d = Daemon::launch(&b.cfg)
        .within(T)
        .note(|| format!("broker:\n{}", b.log()))
        .ready();
    d.signal(nix::sys::signal::Signal::SIGTERM);
    assert!(
        d.wait_exit(Duration::from_secs(30)).is_some(),
        "daemon did not stop:\n{}",
        d.log()
    );

    let ids: Vec<String> = (0..40).map(|i| format!("cut-{i}")).collect();
    let lines: String = ids
        .iter()
        .map(|id| {
            let body = alarm(
                id,
                "ME1",
                "ME-LO-PRES-LO",
                "major",
                "main_engine_lube_oil",
                "main engine lube oil inlet pressure low",
            );
            format!("{body}\n")
        })
        .collect();
    let mut publish = b
        .tool("mosquitto_pub", "ME1", "sensor-secret")
        .args(["-q", "1", "-t", "tidewatch/alarm/ME1", "-l"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::io::Write::write_all(&mut publish.stdin.take().unwrap(), lines.as_bytes()).unwrap();
    let out = publish.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "sensor cannot publish: {}",
        text(&out)
    );

    std::thread::sleep(Duration::from_secs(3));
    let Board { broker, cfg } = b;
    let (port, dir) = broker.kill();
    let conf = dir.path().join("mosquitto.conf");
    let b = Board {
        broker: Broker::start_conf(dir, port, &conf),
        cfg,
    };
    // Only the daemon's session is under test: the operator subscribes anew.
    b.operator_subscribes();
    let d = Daemon::start(&b.cfg, &[]);
    let got = b
        .operator_reads_n(ids.len(), Duration::from_secs(180))
        .unwrap_or_else(|e| {
            panic!(
                "the alarms queued before the broker was killed were not all answered: {e}\ndaemon:\n{}\nbroker:\n{}",
                d.log(),
                b.log()
            )
        });
    let mut answered: Vec<String> = got
        .iter()
        .map(|d| d["alarm_id"].as_str().unwrap().to_string())
        .collect();
    answered.sort();
    let mut want = ids.clone();
    want.sort();
    assert_eq!(answered, want);
}

/// Feedback is a person's word: a note made of it shapes later diagnoses,
/// so the shipped ACL lets the operator write it (and read the note
/// tidewatch publishes of it), and a sensor not.
#[test]
fn an_operator_answers_a_diagnosis_through_the_acl_and_a_sensor_cannot() {
    let _serial = common::serial();
    let b = Board::start();
    b.operator_subscribes();
    let d = Daemon::launch(&b.cfg)
        .within(T)
        .note(|| format!("broker:\n{}", b.log()))
        .ready();
    b.sensor_raises("acl-fb-1");
    let diag = b.operator_reads();
    assert_eq!(diag["alarm_id"], "acl-fb-1", "{diag}");

    // The sensor first: had it got through, its note would be kept too.
    let forged = serde_json::json!({
        "alarm_id": "acl-fb-1", "verdict": "confirmed", "cause": {"text": "forged by the sensor"},
        "by": "ME1", "ts": "2026-11-30T05:00:00Z",
    });
    let out = b
        .tool("mosquitto_pub", "ME1", "sensor-secret")
        .args([
            "-q",
            "1",
            "-t",
            "tidewatch/feedback/ME1",
            "-m",
            &forged.to_string(),
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "ME1 cannot connect: {}", text(&out));
    let (ok, stdout, stderr) = feedback_cli(
        &b.cfg,
        &[
            "acl-fb-1",
            "--text",
            "sea chest strainer blocked",
            "--by",
            "chief",
            "--username",
            "operator",
        ],
        &[("TIDEWATCH_MQTT_PASSWORD", "operator-secret")],
    );
    assert!(
        ok && stdout.contains("tidewatch kept site note here:acl-fb-1:"),
        "the operator's feedback was not kept: {stdout}{stderr}\ndaemon:\n{}\nbroker:\n{}",
        d.log(),
        b.log()
    );
    let log = b.log();
    assert!(
        log.contains("Denied PUBLISH from ME1"),
        "no denial of the sensor's feedback in the broker log:\n{log}"
    );
    let journal = b.cfg.parent().unwrap().join("state/notes/notes.jsonl");
    let notes = std::fs::read_to_string(&journal).unwrap();
    assert_eq!(notes.lines().count(), 1, "{notes}");
    assert!(
        notes.contains("sea chest strainer blocked") && !notes.contains("forged"),
        "{notes}"
    );
}
