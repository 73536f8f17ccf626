//! A mosquitto owned by one test: plain, with mosquitto's stock limits, or
//! with TLS, passwords and an ACL; and the throwaway certificates for it.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::{free_port, require_tool};

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

    /// SIGKILL, as a power cut would end it: no save on the way out. Returns
    /// its port and directory (persistence, config) for `start_conf`.
    pub fn kill(mut self) -> (u16, tempfile::TempDir) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let dir = std::mem::replace(&mut self.dir, tempfile::tempdir().unwrap());
        (self.port, dir)
    }

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
        Self::start_conf(dir, port, &conf)
    }

    /// A mosquitto on the config file `conf`, which listens on `port`, with
    /// its stderr in `dir/mosquitto.log`; panics with that log if it exits or
    /// does not listen within 10 s. The files it reads must be readable by
    /// the user mosquitto drops root to.
    pub fn start_conf(dir: tempfile::TempDir, port: u16, conf: &Path) -> Self {
        let log = dir.path().join("mosquitto.log");
        let mut child = Command::new(mosquitto_bin())
            .arg("-c")
            .arg(conf)
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

    /// The broker's log so far: brokers from `start_tls` or `start_conf`, or
    /// from `start_with` told to `log_dest file` there.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("mosquitto.log")).unwrap_or_default()
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
