//! systemd integration: the sd_notify protocol over NOTIFY_SOCKET, without
//! libsystemd. Every notification tidewatch sends goes through this module.
//!
//! READY=1 only once the model, the index and the broker are up; WATCHDOG=1 at
//! half of WATCHDOG_USEC while the process is healthy; STATUS= with counters;
//! STOPPING=1 on shutdown. Outside systemd (no NOTIFY_SOCKET) all are no-ops.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    sock: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    /// Reads NOTIFY_SOCKET, WATCHDOG_USEC and WATCHDOG_PID from the environment.
    pub fn from_env() -> Self {
        let sock = std::env::var_os("NOTIFY_SOCKET").and_then(|path| {
            let path = path.to_string_lossy().into_owned();
            let addr = if let Some(name) = path.strip_prefix('@') {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes()).ok()?
            } else {
                std::os::unix::net::SocketAddr::from_pathname(&path).ok()?
            };
            Some((UnixDatagram::unbound().ok()?, addr))
        });
        let pid_ok = std::env::var("WATCHDOG_PID")
            .ok()
            .and_then(|p| p.parse::<u32>().ok())
            .is_none_or(|p| p == std::process::id());
        let watchdog = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.parse::<u64>().ok())
            .filter(|u| *u > 0 && pid_ok)
            .map(Duration::from_micros);
        Self { sock, watchdog }
    }

    pub fn enabled(&self) -> bool {
        self.sock.is_some()
    }

    /// The watchdog period systemd expects, if it set one.
    pub fn watchdog_period(&self) -> Option<Duration> {
        self.watchdog
    }

    fn send(&self, msg: &str) {
        if let Some((s, addr)) = &self.sock {
            if let Err(e) = s.send_to_addr(msg.as_bytes(), addr) {
                tracing::debug!(error = %e, "sd_notify failed");
            }
        }
    }

    pub fn ready(&self) {
        self.send("READY=1");
    }

    pub fn stopping(&self) {
        self.send("STOPPING=1");
    }

    pub fn status(&self, text: &str) {
        // A newline would start a new assignment in the protocol.
        self.send(&format!("STATUS={}", text.replace('\n', " ")));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
}

/// Pings the watchdog at half its period while `healthy()` holds; when it
/// stops holding, the pings stop and systemd restarts the service.
pub async fn run_watchdog(
    notifier: std::sync::Arc<Notifier>,
    healthy: impl Fn() -> bool,
    cancel: CancellationToken,
) {
    let Some(period) = notifier.watchdog_period() else {
        return;
    };
    let mut tick = tokio::time::interval(period / 2);
    let mut was_healthy = true;
    loop {
        tokio::select! {
            _ = cancel.cancelled() => return,
            _ = tick.tick() => {
                let ok = healthy();
                if ok {
                    notifier.watchdog();
                } else if was_healthy {
                    tracing::error!("process unhealthy (slot lost or MQTT loop stuck); withholding watchdog pings so systemd restarts tidewatch");
                }
                was_healthy = ok;
            }
        }
    }
}
