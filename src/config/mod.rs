//! Configuration: the TOML file, its defaults, and its validation into a checked form.
//!
//! The entry points (`load`, `parse`), the checked `Config` and `ConfigError`
//! live here; the file's serde shape and defaults are in `raw`, the checked
//! sections in `checked`, and the checks themselves in `validate`. Every error
//! names the offending key and the file. Relative paths in the file are
//! relative to the file's own folder. Parsing touches nothing else;
//! `check_files` (in `files`) then opens what the paths name, at start.

mod checked;
mod files;
mod raw;
mod validate;

use std::path::{Path, PathBuf};

pub use checked::{
    Answer, InboxConfig, KnowledgeConfig, KvType, LlmConfig, Lookup, MqttConfig, OutboxConfig,
    QueueConfig, Summary, TemplateChoice, TlsConfig, WatchdogConfig, ALARM_TOPIC_ROOM,
    INBOX_RECORD_ROOM, MAX_JOURNAL_BYTES, MAX_QUEUE_CAPACITY, STOP_OVERHEAD_S, UNIT_STOP_TIMEOUT_S,
};
pub use files::{check_files, io_problem};
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
    /// A path the config names cannot be used: `file` is the path, `path`
    /// the config file.
    #[error("config key {key}: {file}: {problem} ({path})")]
    File {
        key: &'static str,
        file: PathBuf,
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

/// Parses and validates config text; `path` is named in messages, and the
/// relative paths in the text are taken from its folder.
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
    fn relative_paths_are_taken_from_the_config_files_folder() {
        let c = parse(MINIMAL, p()).unwrap();
        assert_eq!(c.knowledge.index, Path::new("/etc/tidewatch/k.twx"));
        assert_eq!(c.llm.model, Path::new("/etc/tidewatch/m.gguf"));
        assert_eq!(c.state_dir, Path::new("/tmp/tw"), "absolute stays");
        let c = parse(MINIMAL, Path::new("tidewatch.toml")).unwrap();
        assert_eq!(
            c.knowledge.index,
            Path::new("k.twx"),
            "a bare file name: the working directory"
        );
        let text = MINIMAL.replace(
            "[knowledge]",
            "[mqtt.tls]\nca = \"tls/ca.crt\"\n[knowledge]",
        );
        let c = parse(&text, Path::new("conf/tw.toml")).unwrap();
        assert_eq!(c.mqtt.tls.unwrap().ca, Path::new("conf/tls/ca.crt"));
        assert_eq!(
            c.knowledge.examples, None,
            "default: the eval set (load::examples)"
        );
        let text = MINIMAL.replace("top_k = 3", "top_k = 3\nexamples = \"eval/alarms.jsonl\"");
        let c = parse(&text, p()).unwrap();
        assert_eq!(
            c.knowledge.examples.as_deref(),
            Some(Path::new("/etc/tidewatch/eval/alarms.jsonl"))
        );
    }

    // README said host, port, topic_prefix, top_k and threads were
    // needed, and a file without [mqtt] failed with "missing field `mqtt`".
    #[test]
    fn only_state_dir_the_index_and_the_model_are_required() {
        let c = parse(
            "state_dir = \"s\"\n[knowledge]\nindex = \"k\"\n[llm]\nmodel = \"m\"\n",
            p(),
        )
        .unwrap();
        assert_eq!((c.mqtt.host.as_str(), c.mqtt.port), ("127.0.0.1", 1883));
        for gone in ["state_dir = \"s\"\n", "index = \"k\"\n", "model = \"m\"\n"] {
            let text = "state_dir = \"s\"\n[knowledge]\nindex = \"k\"\n[llm]\nmodel = \"m\"\n"
                .replace(gone, "");
            let e = parse(&text, p()).unwrap_err().to_string();
            let key = gone.split(' ').next().unwrap();
            assert!(e.contains(key), "{e}");
        }
    }

    /// Every key of deploy/tidewatch.toml, set or commented out, with the
    /// value written for it (sections from `[x]` or `# [x]` lines).
    fn example_keys() -> std::collections::BTreeMap<String, toml::Value> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/tidewatch.toml");
        let text = std::fs::read_to_string(path).unwrap();
        let mut section = String::new();
        let mut keys = std::collections::BTreeMap::new();
        for line in text.lines() {
            let l = line.trim_start_matches('#').trim();
            if let Some((name, after)) = l.strip_prefix('[').and_then(|r| r.split_once(']')) {
                let after = after.trim();
                if after.is_empty() || after.starts_with('#') {
                    section = name.to_string();
                    continue;
                }
            }
            let Some((k, v)) = l.split_once('=') else {
                continue;
            };
            let k = k.trim();
            if k.is_empty() || !k.chars().all(|c| c.is_ascii_lowercase() || c == '_') {
                continue;
            }
            // The value up to a trailing comment (no value holds " #").
            let v = v.split(" #").next().unwrap().trim();
            let Ok(t) = toml::from_str::<toml::Table>(&format!("v = {v}")) else {
                continue;
            };
            let full = if section.is_empty() {
                k.to_string()
            } else {
                format!("{section}.{k}")
            };
            keys.insert(full, t["v"].clone());
        }
        keys
    }

    /// Every key the config accepts, with its default (null: none).
    fn accepted_keys() -> Vec<(String, serde_json::Value)> {
        let text = format!("{MINIMAL}[mqtt.tls]\nca = \"c\"\ncert = \"c\"\nkey = \"k\"\n");
        let raw: RawConfig = toml::from_str(&text.replace(
            "[mqtt]\nhost = \"127.0.0.1\"\nport = 1883\ntopic_prefix = \"tidewatch\"\n",
            "",
        ))
        .unwrap();
        fn walk(p: &str, v: &serde_json::Value, out: &mut Vec<(String, serde_json::Value)>) {
            match v.as_object() {
                Some(m) => {
                    for (k, v) in m {
                        let key = if p.is_empty() {
                            k.clone()
                        } else {
                            format!("{p}.{k}")
                        };
                        walk(&key, v, out);
                    }
                }
                None => out.push((p.to_string(), v.clone())),
            }
        }
        let mut out = Vec::new();
        walk("", &serde_json::to_value(&raw).unwrap(), &mut out);
        out
    }

    // deploy/tidewatch.toml is the configuration reference; it must
    // name every key the config accepts, with the default the code uses.
    #[test]
    fn the_example_config_names_every_key_with_its_real_default() {
        let example = example_keys();
        // Required (no default), machine-dependent, or an example value.
        let set_here = ["state_dir", "knowledge.index", "llm.model", "llm.threads"];
        let mut problems = Vec::new();
        for (key, default) in accepted_keys() {
            let Some(written) = example.get(&key) else {
                problems.push(format!("{key} is not in deploy/tidewatch.toml"));
                continue;
            };
            if set_here.contains(&key.as_str()) || key.starts_with("mqtt.tls.") || default.is_null()
            {
                continue;
            }
            let written = serde_json::to_value(written).unwrap();
            let same = match (written.as_f64(), default.as_f64()) {
                (Some(a), Some(b)) => (a - b).abs() < 1e-6,
                _ => written == default,
            };
            if !same {
                problems.push(format!(
                    "{key}: the example says {written}, the default is {default}"
                ));
            }
        }
        let accepted: Vec<String> = accepted_keys().into_iter().map(|(k, _)| k).collect();
        for key in example.keys() {
            if !accepted.contains(key) {
                problems.push(format!(
                    "{key} is in deploy/tidewatch.toml but not accepted"
                ));
            }
        }
        assert!(problems.is_empty(), "{problems:#?}");
    }

    #[test]
    fn plant_codes_are_compared_without_case_and_a_bad_entry_is_named() {
        let with = |map: &str| MINIMAL.to_string() + "[knowledge.plant_codes]\n" + map;
        let c = parse(&with("\" ams-77 \" = \"me-lo-pres-lo\"\n"), p()).unwrap();
        assert_eq!(c.knowledge.manual_code("AMS-77"), Some("ME-LO-PRES-LO"));
        assert_eq!(c.knowledge.manual_code(" Ams-77"), Some("ME-LO-PRES-LO"));
        assert_eq!(c.knowledge.manual_code("AMS-78"), None);
        for (map, says) in [
            ("\"AMS-77\" = \"\"\n", "a code is empty"),
            (
                "\"ME-LO-PRES-LO\" = \"me-lo-pres-lo\"\n",
                "needs no mapping",
            ),
            (
                "\"ams-77\" = \"ME-LO-PRES-LO\"\n\"AMS-77\" = \"ME-LO-TEMP-HI\"\n",
                "AMS-77 is mapped twice",
            ),
        ] {
            let e = parse(&with(map), p()).unwrap_err().to_string();
            assert!(
                e.contains("knowledge.plant_codes") && e.contains(says),
                "{e}"
            );
        }
    }

    #[test]
    fn kind_aliases_are_compared_without_case_and_a_bad_entry_is_named() {
        let with = |map: &str| MINIMAL.to_string() + "[knowledge.kind_aliases]\n" + map;
        let c = parse(&with("\" Engine Room 2 \" = \" generator \"\n"), p()).unwrap();
        assert_eq!(c.knowledge.kind_class("ENGINE ROOM 2"), Some("generator"));
        assert_eq!(c.knowledge.kind_class("engine room 3"), None);
        for (map, says) in [
            ("\"AUX\" = \"\"\n", "a name is empty"),
            (
                "\"aux 3\" = \"generator\"\n\"AUX 3\" = \"boiler\"\n",
                "\"aux 3\" is mapped twice",
            ),
        ] {
            let e = parse(&with(map), p()).unwrap_err().to_string();
            assert!(
                e.contains("knowledge.kind_aliases") && e.contains(says),
                "{e}"
            );
        }
    }

    #[test]
    fn example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/tidewatch.toml");
        load(&path).unwrap();
    }
}
