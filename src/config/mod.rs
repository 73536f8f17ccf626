//! Configuration: the TOML file, its defaults, and its validation into a checked form.
//!
//! The entry points (`load`, `parse`), the checked `Config` and `ConfigError`
//! live here; the file's serde shape and defaults are in `raw`, the checked
//! sections in `checked`, and the checks themselves in `validate`. Every error
//! names the offending key and the file. Nothing here touches the network,
//! the model or the index; paths are checked for shape only, not opened.

mod checked;
mod raw;
mod validate;

use std::path::{Path, PathBuf};

pub use checked::{
    Answer, InboxConfig, KnowledgeConfig, KvType, LlmConfig, Lookup, MqttConfig, OutboxConfig,
    QueueConfig, TemplateChoice, TlsConfig, WatchdogConfig, MAX_QUEUE_CAPACITY,
};
pub use raw::{
    RawConfig, RawInbox, RawKnowledge, RawLlm, RawLog, RawMqtt, RawOutbox, RawQueue, RawTls,
    RawWatchdog,
};
pub use validate::parse_cpu_list;

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("config file {path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("config key {key} {problem} ({path})")]
    Invalid {
        key: &'static str,
        problem: String,
        path: PathBuf,
    },
}

/// Validated configuration: every value has been range-checked once, at start.
#[derive(Debug, Clone)]
pub struct Config {
    pub path: PathBuf,
    pub state_dir: PathBuf,
    pub mqtt: MqttConfig,
    pub knowledge: KnowledgeConfig,
    pub llm: LlmConfig,
    pub watchdog: WatchdogConfig,
    pub queue: QueueConfig,
    pub outbox: OutboxConfig,
    pub inbox: InboxConfig,
    pub log_level: String,
}

/// Reads and validates a config file.
pub fn load(path: &Path) -> Result<Config, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    parse(&text, path)
}

/// Parses and validates config text; `path` is only used in messages.
pub fn parse(text: &str, path: &Path) -> Result<Config, ConfigError> {
    let de = toml::Deserializer::new(text);
    let raw: RawConfig = serde_path_to_error::deserialize(de).map_err(|e| {
        let key = e.path().to_string();
        let inner = e.into_inner();
        let msg = inner.message().to_string();
        let location = inner
            .span()
            .map(|s| {
                let line = text[..s.start.min(text.len())].matches('\n').count() + 1;
                format!(" (line {line})")
            })
            .unwrap_or_default();
        let message = if key.is_empty() || key == "." {
            format!("{msg}{location}")
        } else {
            format!("key {key}: {msg}{location}")
        };
        ConfigError::Parse {
            path: path.to_owned(),
            message,
        }
    })?;
    validate::into_checked(raw, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Shared with the tests of `raw` and `validate`, which parse it too.
    pub(super) const MINIMAL: &str = r#"
state_dir = "/tmp/tw"
[mqtt]
host = "127.0.0.1"
port = 1883
topic_prefix = "tidewatch"
[knowledge]
index = "k.twx"
top_k = 3
[llm]
model = "m.gguf"
threads = 2
"#;

    pub(super) fn p() -> &'static Path {
        Path::new("/etc/tidewatch/tidewatch.toml")
    }

    #[test]
    fn unknown_key_names_key_and_file() {
        let text = MINIMAL.replace("threads = 2", "threads = 2\nthreadz = 4");
        let e = parse(&text, p()).unwrap_err().to_string();
        assert!(e.contains("threadz"), "{e}");
        assert!(e.contains("llm"), "{e}");
        assert!(e.contains("/etc/tidewatch/tidewatch.toml"), "{e}");
    }

    #[test]
    fn wrong_type_names_key() {
        let text = MINIMAL.replace("port = 1883", "port = \"x\"");
        let e = parse(&text, p()).unwrap_err().to_string();
        assert!(e.contains("mqtt.port"), "{e}");
    }

    #[test]
    fn missing_required_value_names_it() {
        let text = MINIMAL.replace("model = \"m.gguf\"", "");
        let e = parse(&text, p()).unwrap_err().to_string();
        assert!(e.contains("model"), "{e}");
    }

    #[test]
    fn example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/tidewatch.toml");
        load(&path).unwrap();
    }
}
