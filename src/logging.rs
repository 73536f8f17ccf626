//! Log setup: journald with structured fields when systemd started us
//! (JOURNAL_STREAM is set), readable text on stderr otherwise.
//!
//! Field names in tracing events (`alarm_id`, `equipment`, `code`, `slot`,
//! `mode`, timings) become journal fields ALARM_ID, EQUIPMENT, ... so operators
//! can filter with `journalctl -u tidewatch ALARM_ID=...`.

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `level` is the default filter; RUST_LOG
/// overrides it. Returns which sink was chosen.
pub fn init(level: &str) -> &'static str {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| {
        EnvFilter::new(format!(
            "{level},llama-cpp-2=warn,llama_cpp_2=warn,rumqttc=warn"
        ))
    });
    if std::env::var_os("JOURNAL_STREAM").is_some() {
        if let Ok(layer) = tracing_journald::layer() {
            let layer = layer
                .with_syslog_identifier("tidewatch".into())
                .with_field_prefix(None);
            if tracing_subscriber::registry()
                .with(filter)
                .with(layer)
                .try_init()
                .is_ok()
            {
                return "journald";
            }
            return "none";
        }
    }
    // Colour only for a person at a terminal: a log redirected to a file
    // or a pipe would carry the escape codes (NO_COLOR turns it off too).
    let colour = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(colour)
        .with_target(false);
    let _ = tracing_subscriber::registry()
        .with(filter)
        .with(fmt)
        .try_init();
    "stderr"
}
