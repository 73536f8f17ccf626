//! Crash-only on panic: the daemon's panic hook, and the fault hooks that
//! panic on purpose in the tests.
//!
//! A panic inside a tokio task ends only that task (tokio catches it): a dead
//! worker leaves its alarm unacknowledged and its slot idle, a dead poller
//! leaves the hub waiting for events that never come, while the process and
//! its watchdog pings go on. Half alive is worse than dead, so `tidewatch
//! run` installs `abort_on_panic`: the panic is logged (to journald under
//! systemd) and the process aborts. systemd restarts it (`Restart=on-failure`),
//! the inbox replays the alarms it held, and the broker redelivers those
//! not yet acknowledged to the persistent session. Nothing in tidewatch catches a panic to carry on.
//!
//! Before it aborts, the hook runs the daemon's last words (`before_abort`):
//! the one moment a panic can still say which alarm's handling raised it,
//! judged by what the panicking thread or task serves (`serving_slot`).
//!
//! Owns only the hook, what a thread serves and the injected panics; it must
//! never decide what to do with an alarm.

use std::any::Any;
use std::cell::Cell;
use std::panic::PanicHookInfo;
use std::sync::Mutex;

#[derive(Debug, thiserror::Error)]
pub enum CrashError {
    #[error(
        "TIDEWATCH_FAULT={0:?} names no injected panic (panic-worker, panic-slot, panic-hub or panic-poller, each optionally -on:TEXT)"
    )]
    UnknownFault(String),
}

/// Where a panic can be injected (cargo feature `fault-injection`,
/// `TIDEWATCH_FAULT=panic-{place}` or `panic-{place}-on:TEXT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// A worker that has just taken an alarm off the queue.
    Worker,
    /// A slot's llama.cpp thread, handed a job's prompt.
    Slot,
    /// The hub, taking in an alarm.
    Hub,
    /// The MQTT poller, having read an alarm.
    Poller,
}

impl Place {
    fn name(self) -> &'static str {
        match self {
            Place::Worker => "worker",
            Place::Slot => "slot",
            Place::Hub => "hub",
            Place::Poller => "poller",
        }
    }
}

/// An injected panic: where, and, for `panic-{place}-on:TEXT`, only for an
/// alarm whose text holds TEXT (a poison alarm).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PanicFault {
    pub place: Place,
    pub on: Option<String>,
}

/// The panic a `TIDEWATCH_FAULT` value asks for; None for a value that is
/// not a panic fault (the slot's and the hub's other faults).
pub fn panic_fault(fault: &str) -> Result<Option<PanicFault>, CrashError> {
    let Some(rest) = fault.strip_prefix("panic-") else {
        return Ok(None);
    };
    let (name, on) = match rest.split_once("-on:") {
        Some((name, text)) if !text.is_empty() => (name, Some(text.to_string())),
        Some(_) => return Err(CrashError::UnknownFault(fault.to_string())),
        None => (rest, None),
    };
    [Place::Worker, Place::Slot, Place::Hub, Place::Poller]
        .into_iter()
        .find(|p| p.name() == name)
        .map(|place| Some(PanicFault { place, on }))
        .ok_or_else(|| CrashError::UnknownFault(fault.to_string()))
}

/// Fault injection: panics when `TIDEWATCH_FAULT=panic-{place}`, or
/// `panic-{place}-on:TEXT` and `subject` (the alarm in hand) holds TEXT.
/// Compiled to nothing without the `fault-injection` feature. The report
/// names the caller's line, as a real panic there would.
#[track_caller]
pub fn injected_panic(place: Place, subject: &[u8]) {
    let Some(fault) = crate::fault::spec() else {
        return;
    };
    match panic_fault(fault) {
        Ok(Some(f)) if f.place == place => match &f.on {
            None => panic!("fault injection: panic-{}", place.name()),
            Some(text) if contains(subject, text.as_bytes()) => {
                panic!("fault injection: panic-{}-on:{text}", place.name())
            }
            Some(_) => {}
        },
        Ok(_) => {}
        // A misspelt fault would otherwise make a test pass for the wrong reason.
        Err(e) => panic!("{e}"),
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

thread_local! {
    /// The slot whose job this llama.cpp thread is running, if any.
    static SLOT_THREAD: Cell<Option<usize>> = const { Cell::new(None) };
}

tokio::task_local! {
    /// The slot whose worker task this is: a task moves between the
    /// runtime's threads, so a thread-local cannot say it.
    static SLOT_TASK: usize;
}

/// The calling OS thread now runs slot `id`'s job (None: no job, as while
/// it saves a prompt state for a job already answered, when the slot's
/// worker may already hold the next one).
pub fn running_slot_job(id: Option<usize>) {
    SLOT_THREAD.with(|s| s.set(id));
}

/// Runs `task` as slot `id`'s worker: a panic while it is polled serves
/// that slot.
pub async fn for_slot<F: std::future::Future>(id: usize, task: F) -> F::Output {
    SLOT_TASK.scope(id, task).await
}

/// The slot the calling thread or task serves, if any: read by the last
/// words, on the panicking thread, while the panicking task is still polled.
pub fn serving_slot() -> Option<usize> {
    SLOT_TASK
        .try_with(|id| *id)
        .ok()
        .or_else(|| SLOT_THREAD.with(Cell::get))
}

type LastWords = Box<dyn Fn() + Send + Sync>;

static LAST_WORDS: Mutex<Option<LastWords>> = Mutex::new(None);

/// What the panic hook does after its report and before the abort: the
/// daemon counts the abort against the alarm the panicking thread handled.
/// Runs on the panicking thread; it must not panic, and must not wait for
/// anything the panicking thread may hold.
pub fn before_abort(words: impl Fn() + Send + Sync + 'static) {
    *LAST_WORDS.lock().unwrap_or_else(|e| e.into_inner()) = Some(Box::new(words));
}

fn last_words() {
    // A second thread panicking meanwhile aborts without them: the first
    // is already saying them, and the process ends either way.
    if let Ok(words) = LAST_WORDS.try_lock() {
        if let Some(w) = words.as_ref() {
            w();
        }
    }
}

/// How every panic report begins: what the tests look for in a daemon's log
/// to tell that nothing panicked.
pub const PANIC_REPORT: &str = "panic in thread";

/// Makes every later panic, on any thread, log itself and abort the process.
/// Only for `tidewatch run`: a one-shot command keeps Rust's default (the
/// message on stderr, exit status 101).
pub fn abort_on_panic() {
    std::panic::set_hook(Box::new(|info| {
        let thread = std::thread::current();
        let report = Report::of(thread.name(), info);
        // Only when RUST_BACKTRACE asks for one, as Rust's own hook does.
        let backtrace = std::backtrace::Backtrace::capture();
        let backtrace = (backtrace.status() == std::backtrace::BacktraceStatus::Captured)
            .then(|| backtrace.to_string());
        // The details go into the message itself: `journalctl -u tidewatch`
        // shows MESSAGE only, not the structured fields.
        tracing::error!(
            thread = %report.thread,
            location = %report.location,
            backtrace = backtrace.as_deref(),
            "{}",
            report.line()
        );
        last_words();
        // Not exit(): exit runs destructors and atexit handlers while other
        // threads (llama.cpp slots) still run. SIGABRT is what systemd's
        // `Restart=on-failure` and the journal both call a crash.
        std::process::abort();
    }));
}

/// What the hook says about one panic.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Report {
    thread: String,
    location: String,
    message: String,
}

impl Report {
    fn of(thread: Option<&str>, info: &PanicHookInfo<'_>) -> Self {
        Report {
            thread: thread.unwrap_or("unnamed").to_string(),
            location: info
                .location()
                .map_or_else(|| "an unknown place".to_string(), |l| l.to_string()),
            message: payload_text(info.payload()).to_string(),
        }
    }

    fn line(&self) -> String {
        format!(
            "{PANIC_REPORT} '{}' at {}: {}; aborting so that systemd restarts tidewatch and unacknowledged alarms are redelivered",
            self.thread, self.location, self.message
        )
    }
}

/// The text a panic was raised with: `panic!("literal")` carries a `&str`,
/// a formatted `panic!` a `String`, `panic_any` anything else.
fn payload_text(payload: &(dyn Any + Send)) -> &str {
    payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-text payload")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_panic_text_is_read_from_literal_and_formatted_payloads() {
        let literal: Box<dyn Any + Send> = Box::new("index out of range");
        assert_eq!(payload_text(literal.as_ref()), "index out of range");
        let formatted: Box<dyn Any + Send> =
            Box::new(format!("byte index {} is not a char boundary", 5));
        assert_eq!(
            payload_text(formatted.as_ref()),
            "byte index 5 is not a char boundary"
        );
        let other: Box<dyn Any + Send> = Box::new(42u32);
        assert_eq!(payload_text(other.as_ref()), "a non-text payload");
    }

    #[test]
    fn the_report_names_thread_place_and_message_and_says_what_follows() {
        let r = Report {
            thread: "tokio-rt-worker".into(),
            location: "src/grounding.rs:338:32".into(),
            message: "byte index 5 is not a char boundary".into(),
        };
        assert_eq!(
            r.line(),
            "panic in thread 'tokio-rt-worker' at src/grounding.rs:338:32: byte index 5 is not a char boundary; aborting so that systemd restarts tidewatch and unacknowledged alarms are redelivered"
        );
        assert!(
            r.line().starts_with(PANIC_REPORT),
            "what the tests look for"
        );
    }

    #[test]
    fn fault_values_name_a_panic_place_or_none() {
        let at = |place| Some(PanicFault { place, on: None });
        assert_eq!(panic_fault("panic-worker").unwrap(), at(Place::Worker));
        assert_eq!(panic_fault("panic-slot").unwrap(), at(Place::Slot));
        assert_eq!(panic_fault("panic-hub").unwrap(), at(Place::Hub));
        assert_eq!(panic_fault("panic-poller").unwrap(), at(Place::Poller));
        assert_eq!(
            panic_fault("panic-worker-on:POISON").unwrap(),
            Some(PanicFault {
                place: Place::Worker,
                on: Some("POISON".into())
            })
        );
        assert_eq!(panic_fault("stall-after:5").unwrap(), None);
        assert_eq!(panic_fault("slow-intake:3").unwrap(), None);
        let e = panic_fault("panic-model").unwrap_err();
        assert_eq!(
            e.to_string(),
            "TIDEWATCH_FAULT=\"panic-model\" names no injected panic (panic-worker, panic-slot, panic-hub or panic-poller, each optionally -on:TEXT)"
        );
        assert!(panic_fault("panic-worker-on:").is_err(), "no text to match");
    }
}
