//! Log setup: journald with structured fields when systemd started us
//! (JOURNAL_STREAM is set), readable text on stderr otherwise.
//!
//! Field names in tracing events (`alarm_id`, `equipment`, `code`, `slot`,
//! `mode`, timings) become journal fields ALARM_ID, EQUIPMENT, ... so operators
//! can filter with `journalctl -u tidewatch ALARM_ID=...`.
//!
//! llama.cpp's warnings about the model's own vocabulary (a token that looks
//! like a control token but is not marked so) are the model file's, not
//! tidewatch's, and come at every start: they are counted here, not logged,
//! and the loader logs the count once at debug (`take_vocab_warnings`).

use std::sync::atomic::{AtomicUsize, Ordering};

use tracing_subscriber::layer::{Context, SubscriberExt};
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
                .with(VocabNoise)
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
        .with(VocabNoise)
        .with(filter)
        .with(fmt)
        .try_init();
    "stderr"
}

/// Vocabulary warnings taken out of the log since the last call.
static VOCAB_WARNINGS: AtomicUsize = AtomicUsize::new(0);

/// How many of llama.cpp's vocabulary warnings were counted instead of
/// logged since the last call (the loader logs them once at debug).
pub fn take_vocab_warnings() -> usize {
    VOCAB_WARNINGS.swap(0, Ordering::Relaxed)
}

/// Whether a llama.cpp log line is one of its warnings about the model's
/// own vocabulary.
fn is_vocab_warning(message: &str) -> bool {
    message.contains("probably a bug in the model")
        || message.contains("the tokenizer config may be incorrect")
}

/// The layer that counts llama.cpp's vocabulary warnings and keeps them
/// out of every sink.
struct VocabNoise;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for VocabNoise {
    fn event_enabled(&self, event: &tracing::Event<'_>, _: Context<'_, S>) -> bool {
        if !event.metadata().target().starts_with("llama") {
            return true;
        }
        struct Message(bool);
        impl tracing::field::Visit for Message {
            fn record_str(&mut self, f: &tracing::field::Field, v: &str) {
                self.0 |= f.name() == "message" && is_vocab_warning(v);
            }
            fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                self.0 |= f.name() == "message" && is_vocab_warning(&format!("{v:?}"));
            }
        }
        let mut m = Message(false);
        event.record(&mut m);
        if m.0 {
            VOCAB_WARNINGS.fetch_add(1, Ordering::Relaxed);
        }
        !m.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Every start with the stand-in once warned `control-looking token:
    // 128247 '</s>' … probably a bug in the model`, filling
    // `journalctl -p warning` with noise that is not tidewatch's.
    #[test]
    fn vocabulary_warnings_are_counted_not_logged_and_the_rest_pass() {
        #[derive(Clone, Default)]
        struct Sink(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let sink = Sink::default();
        let w = sink.clone();
        let sub = tracing_subscriber::registry().with(VocabNoise).with(
            tracing_subscriber::fmt::layer()
                .with_ansi(false)
                .with_writer(move || w.clone()),
        );
        take_vocab_warnings();
        tracing::subscriber::with_default(sub, || {
            for id in [128247, 128248] {
                tracing::warn!(target: "llama-cpp-2", "load: control-looking token: {id} '</s>' was not control-type; this is probably a bug in the model. its type will be overridden");
            }
            tracing::warn!(target: "llama-cpp-2", "llama_context: n_ctx_per_seq (2048) < n_ctx_train");
            tracing::warn!("a warning of tidewatch's own");
        });
        let text = String::from_utf8(sink.0.lock().unwrap().clone()).unwrap();
        assert!(!text.contains("control-looking"), "{text}");
        assert!(text.contains("n_ctx_per_seq"), "{text}");
        assert!(text.contains("of tidewatch's own"), "{text}");
        assert_eq!(take_vocab_warnings(), 2);
    }
}
