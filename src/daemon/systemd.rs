//! systemd integration: the sd_notify protocol over NOTIFY_SOCKET, without
//! libsystemd. Every notification tidewatch sends goes through this module.
//!
//! READY=1 only once the model, the index and the broker are up; WATCHDOG=1 at
//! half of WATCHDOG_USEC while the process is healthy; STATUS= with counters;
//! RELOADING=1 … READY=1 around an index reload; STOPPING=1 on shutdown.
//! Outside systemd (no NOTIFY_SOCKET) all are no-ops.

use std::os::unix::net::UnixDatagram;
use std::sync::Mutex;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

/// Where the service stands as systemd sees it. READY=1 means both "start-up
/// finished" and "reload finished", so what a READY=1 would say depends on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Starting,
    Ready,
    Reloading,
    Stopping,
}

/// A state change the daemon reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    Ready,
    ReloadStarted,
    ReloadFinished,
    Stopping,
}

/// A lifecycle notification to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Message {
    Ready,
    Reloading,
    Stopping,
}

/// The phase after `event`, and what (if anything) to tell systemd. Pure.
pub fn step(phase: Phase, event: Event) -> (Phase, Option<Message>) {
    use Event as E;
    use Phase as P;
    match (phase, event) {
        (P::Stopping, _) => (P::Stopping, None),
        (_, E::Stopping) => (P::Stopping, Some(Message::Stopping)),
        (P::Starting, E::Ready) => (P::Ready, Some(Message::Ready)),
        // Before the first READY=1 systemd is still waiting for start-up: the
        // READY=1 ending this reload would claim start-up finished before the
        // broker subscription is in place. The reload itself still happens.
        (P::Starting, E::ReloadStarted | E::ReloadFinished) => (P::Starting, None),
        (P::Ready, E::ReloadStarted) => (P::Reloading, Some(Message::Reloading)),
        (P::Reloading, E::ReloadFinished) => (P::Ready, Some(Message::Ready)),
        (p @ (P::Ready | P::Reloading), _) => (p, None),
    }
}

/// A connection to the service manager's notification socket.
#[derive(Debug)]
pub struct Notifier {
    sock: Option<(UnixDatagram, std::os::unix::net::SocketAddr)>,
    watchdog: Option<Duration>,
    /// Held while a lifecycle message is sent, so two tasks cannot send them
    /// out of the order the phases changed in (READY=1 overtaking RELOADING=1).
    phase: Mutex<Phase>,
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
        Self {
            sock,
            watchdog,
            phase: Mutex::new(Phase::Starting),
        }
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

    /// Reports a lifecycle event; sends what `step` says, if anything.
    fn lifecycle(&self, event: Event) {
        let mut phase = self.phase.lock().unwrap_or_else(|e| e.into_inner());
        let (next, msg) = step(*phase, event);
        *phase = next;
        match msg {
            Some(Message::Ready) => self.send("READY=1"),
            Some(Message::Stopping) => self.send("STOPPING=1"),
            // With Type=notify-reload (systemd 253+) this timestamp is how
            // systemd tells the RELOADING=1 answering its request from a stale
            // one; without it `systemctl reload` can return before the reload
            // ends. Older versions ignore the field.
            Some(Message::Reloading) => {
                self.send(&format!("RELOADING=1\nMONOTONIC_USEC={}", monotonic_usec()))
            }
            None => {}
        }
    }

    /// Start-up finished: the service can answer alarms.
    pub fn ready(&self) {
        self.lifecycle(Event::Ready);
    }

    /// A reload begins; `reloaded` must follow, whatever its outcome.
    pub fn reloading(&self) {
        self.lifecycle(Event::ReloadStarted);
    }

    /// The reload ended (applied or refused): READY=1 again.
    pub fn reloaded(&self) {
        self.lifecycle(Event::ReloadFinished);
    }

    pub fn stopping(&self) {
        self.lifecycle(Event::Stopping);
    }

    pub fn status(&self, text: &str) {
        // A newline would start a new assignment in the protocol.
        self.send(&format!("STATUS={}", text.replace('\n', " ")));
    }

    pub fn watchdog(&self) {
        self.send("WATCHDOG=1");
    }
}

/// CLOCK_MONOTONIC in microseconds, the clock systemd compares MONOTONIC_USEC with.
fn monotonic_usec() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .map(|t| t.tv_sec() as u64 * 1_000_000 + t.tv_nsec() as u64 / 1_000)
        .unwrap_or(0)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn run(events: &[Event]) -> Vec<Message> {
        let mut phase = Phase::Starting;
        let mut out = Vec::new();
        for e in events {
            let (next, msg) = step(phase, *e);
            phase = next;
            out.extend(msg);
        }
        out
    }

    #[test]
    fn a_reload_after_start_up_is_announced_reloading_then_ready() {
        use Event::*;
        assert_eq!(
            run(&[Ready, ReloadStarted, ReloadFinished, Stopping]),
            [
                Message::Ready,
                Message::Reloading,
                Message::Ready,
                Message::Stopping
            ]
        );
    }

    #[test]
    fn a_reload_before_start_up_finished_sends_nothing_and_ready_still_follows() {
        use Event::*;
        assert_eq!(
            run(&[ReloadStarted, ReloadFinished, Ready]),
            [Message::Ready]
        );
    }

    #[test]
    fn nothing_follows_stopping_not_even_the_end_of_a_reload() {
        use Event::*;
        assert_eq!(
            run(&[Ready, ReloadStarted, Stopping, ReloadFinished, Ready]),
            [Message::Ready, Message::Reloading, Message::Stopping]
        );
    }

    #[test]
    fn monotonic_usec_is_the_monotonic_clock_in_microseconds() {
        let a = monotonic_usec();
        std::thread::sleep(Duration::from_millis(2));
        let b = monotonic_usec();
        assert!(a > 0 && b >= a + 2_000, "{a} {b}");
    }
}
