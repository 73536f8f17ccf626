//! MQTT over TLS (rustls) with a CA, a client certificate and key, and a
//! username and password, against a real mosquitto that requires all of them
//! and enforces deploy/mosquitto/tidewatch.acl; with the real test model and
//! the real daemon binary. Certificates are made fresh with openssl.

mod common;

use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(90);
/// The ACL file is the deployed one, so the daemon runs under the deployed
/// prefix and user names.
const PREFIX: &str = "tidewatch";
const USERS: &[(&str, &str)] = &[
    ("tidewatch", "tw-secret"),
    ("ME1", "sensor-secret"),
    ("operator", "operator-secret"),
];

/// A ship CA with a broker certificate and client certificates for the
/// daemon, a sensor and an operator; and a second CA nobody here trusts.
struct Setup {
    pki: Pki,
    broker: Broker,
}

impl Setup {
    fn start() -> Self {
        require_tool("mosquitto_passwd", "mosquitto");
        mosquitto_bin();
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::new(&dir.path().join("certs"));
        pki.ca("ca", "tidewatch test ship CA");
        pki.cert("ca", "broker", "vessel01-broker", "serverAuth");
        pki.cert("ca", "tidewatch", "tidewatch", "clientAuth");
        // A sensor is named for its equipment (tidewatch.acl).
        pki.cert("ca", "sensor", "ME1", "clientAuth");
        pki.cert("ca", "operator", "operator", "clientAuth");
        pki.ca("rogue-ca", "somebody else's CA");
        pki.share();
        let broker = Broker::start_tls(
            dir,
            &pki.crt("ca"),
            (&pki.crt("broker"), &pki.key("broker")),
            USERS,
            &repo().join("deploy/mosquitto/tidewatch.acl"),
        );
        Setup { pki, broker }
    }

    /// `user`'s login with its own certificate, trusting the ship CA.
    fn login(&self, cert: &str, user: &str) -> TlsLogin {
        let password = USERS.iter().find(|(u, _)| *u == user).unwrap().1;
        TlsLogin {
            ca: self.pki.crt("ca"),
            client: Some((self.pki.crt(cert), self.pki.key(cert))),
            username: user.into(),
            password: password.into(),
        }
    }

    /// Starts the daemon with `login` and asserts that it never reports ready
    /// but keeps retrying with a log line naming `problem`. Returns its log.
    fn daemon_is_refused(&self, login: &TlsLogin, problem: &[&str]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let cfg = tls_config(dir.path(), self.broker.port, PREFIX, login);
        let mut d = Daemon::start(&cfg, &[]);
        let attempts = |log: &str| {
            log.lines()
                .filter(|l| {
                    l.contains("mqtt cannot connect") && problem.iter().all(|p| l.contains(p))
                })
                .count()
        };
        // Backoff is 250 ms doubling: a third attempt comes ~2 s after the first.
        let t = std::time::Instant::now();
        while attempts(&d.log()) < 3 && t.elapsed() < T {
            assert!(
                d.child.try_wait().unwrap().is_none(),
                "daemon exited:\n{}",
                d.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        let log = d.log();
        assert!(
            attempts(&log) >= 3,
            "expected repeated `mqtt cannot connect` lines naming {problem:?}:\n{log}\nbroker:\n{}",
            self.broker.log()
        );
        assert!(!log.contains("tidewatch ready"), "{log}");
        assert!(!log.contains("connected to the broker"), "{log}");
        // Still up and retrying: a broker fixed later is picked up without a restart.
        assert!(
            d.child.try_wait().unwrap().is_none(),
            "daemon exited:\n{log}"
        );
        log
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarm_over_tls_with_password_gets_a_full_diagnosis_and_the_sensor_reads_nothing() {
    let _serial = common::serial();
    let s = Setup::start();
    let port = s.broker.port;
    let mut operator = Client::connect_tls(
        port,
        "tls-operator",
        &s.login("operator", "operator"),
        "tidewatch/diagnosis/#",
    )
    .await;
    // The sensor asks for everything; the ACL lets it write its own alarms, read nothing.
    let mut sensor =
        Client::connect_tls(port, "tls-sensor", &s.login("sensor", "ME1"), "tidewatch/#").await;

    let dir = tempfile::tempdir().unwrap();
    let cfg = tls_config(dir.path(), port, PREFIX, &s.login("tidewatch", "tidewatch"));
    let d = Daemon::launch(&cfg)
        .within(T)
        .note(|| format!("broker:\n{}", s.broker.log()))
        .ready();

    let alarm = alarm(
        "tls-1",
        "ME1",
        "ME-LO-PRES-LO",
        "critical",
        "main_engine_lube_oil",
        "main engine lube oil inlet pressure low, standby pump started",
    );
    sensor.publish("tidewatch/alarm/ME1", alarm).await;
    let diag = operator
        .expect("tidewatch/diagnosis/ME1", T, |v| v["alarm_id"] == "tls-1")
        .await;
    assert_full_diagnosis_shape(&diag);
    assert_model_answered(&diag);
    assert_eq!(diag["code"], "ME-LO-PRES-LO");

    // By now the broker has routed the diagnosis and the retained status;
    // a sensor allowed to read would have had both (and its own alarm).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let leaked: Vec<String> = sensor.drain().into_iter().map(|(topic, _)| topic).collect();
    assert!(leaked.is_empty(), "the sensor read {leaked:?}");
    assert!(
        !d.log().contains("mqtt connection lost") && !d.log().contains("mqtt cannot connect"),
        "the TLS session dropped or never came up:\n{}",
        d.log()
    );
}

#[test]
fn wrong_password_is_logged_as_not_authorized_and_the_daemon_never_reports_ready() {
    let _serial = common::serial();
    let s = Setup::start();
    let mut login = s.login("tidewatch", "tidewatch");
    login.password = "not-the-password".into();
    s.daemon_is_refused(
        &login,
        &[
            "Connection refused",
            "NotAuthorized",
            "username and password",
        ],
    );
}

#[test]
fn broker_certificate_from_an_untrusted_ca_is_logged_and_the_daemon_never_reports_ready() {
    let _serial = common::serial();
    let s = Setup::start();
    let mut login = s.login("tidewatch", "tidewatch");
    login.ca = s.pki.crt("rogue-ca");
    s.daemon_is_refused(
        &login,
        &["invalid peer certificate", "UnknownIssuer", "[mqtt.tls]"],
    );
}

#[test]
fn without_a_client_certificate_the_daemon_is_refused_and_never_reports_ready() {
    let _serial = common::serial();
    let s = Setup::start();
    let mut login = s.login("tidewatch", "tidewatch");
    login.client = None;
    // TLS 1.3: the handshake completes from the client's side, then mosquitto
    // (OpenSSL) sends the certificate_required alert, which rustls reports when
    // the daemon reads the CONNACK.
    s.daemon_is_refused(&login, &["CertificateRequired", "[mqtt.tls]"]);
}

#[test]
fn unreadable_ca_file_exits_78_naming_the_file_so_systemd_does_not_restart_into_it() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-ca.pem");
    let cfg = config(
        dir.path(),
        free_port(),
        "tlsfile",
        "",
        &format!("[mqtt.tls]\nca = \"{}\"\n", missing.display()),
    );
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    assert!(err.contains("no-such-ca.pem"), "{err}");
    // Checked before the model loads: quicker, and no slot thread is mid-decode
    // when the process exits (that once ended in a signal instead of 78).
    assert!(!err.contains("model and index loaded"), "{err}");
}
