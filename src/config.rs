//! Configuration: the TOML file, its defaults, and its validation into a checked form.
//!
//! Owns parsing (`RawConfig`, serde with `deny_unknown_fields`) and validation (`Config`).
//! Every error names the offending key and the file. Nothing here touches the network,
//! the model or the index; paths are checked for shape only, not opened.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

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

/// The file as written, before validation. Field defaults live here so the
/// example config and the code cannot drift: an absent key means the default.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    pub state_dir: PathBuf,
    pub mqtt: RawMqtt,
    pub knowledge: RawKnowledge,
    pub llm: RawLlm,
    #[serde(default)]
    pub watchdog: RawWatchdog,
    #[serde(default)]
    pub queue: RawQueue,
    #[serde(default)]
    pub outbox: RawOutbox,
    #[serde(default)]
    pub inbox: RawInbox,
    #[serde(default)]
    pub log: RawLog,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawMqtt {
    #[serde(default = "default_host")]
    pub host: String,
    #[serde(default = "default_port")]
    pub port: u16,
    pub client_id: Option<String>,
    #[serde(default = "default_prefix")]
    pub topic_prefix: String,
    pub username: Option<String>,
    pub password: Option<String>,
    #[serde(default = "default_keep_alive")]
    pub keep_alive_s: u64,
    #[serde(default = "default_max_alarm_bytes")]
    pub max_alarm_bytes: usize,
    pub tls: Option<RawTls>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawTls {
    pub ca: PathBuf,
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawKnowledge {
    pub index: PathBuf,
    #[serde(default = "default_top_k")]
    pub top_k: usize,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLlm {
    pub model: PathBuf,
    #[serde(default = "default_threads")]
    pub threads: u32,
    #[serde(default = "default_ctx")]
    pub ctx: u32,
    #[serde(default = "default_batch")]
    pub batch: u32,
    #[serde(default = "default_max_tokens")]
    pub max_tokens: u32,
    #[serde(default = "default_prompt_budget")]
    pub prompt_budget: u32,
    #[serde(default = "default_passage_items")]
    pub passage_items: u32,
    #[serde(default = "default_slots")]
    pub slots: u32,
    pub cpus: Option<String>,
    #[serde(default = "default_template")]
    pub template: String,
    #[serde(default = "default_seed")]
    pub seed: u32,
    #[serde(default = "default_temperature")]
    pub temperature: f32,
    #[serde(default)]
    pub thinking: bool,
    #[serde(default = "default_speculative")]
    pub speculative: String,
    #[serde(default = "default_draft_max")]
    pub draft_max: u32,
    #[serde(default = "default_draft_ngram_min")]
    pub draft_ngram_min: u32,
    #[serde(default = "default_draft_ngram_max")]
    pub draft_ngram_max: u32,
    #[serde(default = "default_prompt_cache_mib")]
    pub prompt_cache_mib: u32,
    #[serde(default = "default_answer")]
    pub answer: String,
    #[serde(default = "default_summary_tokens")]
    pub summary_tokens: u32,
    #[serde(default = "default_summary")]
    pub summary: String,
    #[serde(default = "default_item_tokens")]
    pub item_tokens: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawWatchdog {
    #[serde(default = "default_stall")]
    pub stall_timeout_s: f64,
    #[serde(default = "default_deadline")]
    pub deadline_s: f64,
    #[serde(default = "default_hard")]
    pub hard_timeout_s: f64,
}

impl Default for RawWatchdog {
    fn default() -> Self {
        Self {
            stall_timeout_s: default_stall(),
            deadline_s: default_deadline(),
            hard_timeout_s: default_hard(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawQueue {
    #[serde(default = "default_queue_capacity")]
    pub capacity: usize,
    #[serde(default = "default_dedup")]
    pub dedup_window_s: u64,
}

impl Default for RawQueue {
    fn default() -> Self {
        Self {
            capacity: default_queue_capacity(),
            dedup_window_s: default_dedup(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawOutbox {
    #[serde(default = "default_outbox_bytes")]
    pub max_bytes: u64,
}

impl Default for RawOutbox {
    fn default() -> Self {
        Self {
            max_bytes: default_outbox_bytes(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawInbox {
    #[serde(default = "default_inbox_bytes")]
    pub max_bytes: u64,
}

impl Default for RawInbox {
    fn default() -> Self {
        Self {
            max_bytes: default_inbox_bytes(),
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawLog {
    #[serde(default = "default_log_level")]
    pub level: String,
}

impl Default for RawLog {
    fn default() -> Self {
        Self {
            level: default_log_level(),
        }
    }
}

fn default_host() -> String {
    "127.0.0.1".into()
}
fn default_port() -> u16 {
    1883
}
fn default_prefix() -> String {
    "tidewatch".into()
}
fn default_keep_alive() -> u64 {
    10
}
fn default_max_alarm_bytes() -> usize {
    8 * 1024
}
fn default_top_k() -> usize {
    3
}
fn default_threads() -> u32 {
    std::thread::available_parallelism()
        .map(|n| n.get().min(4) as u32)
        .unwrap_or(2)
}
fn default_ctx() -> u32 {
    2048
}
fn default_batch() -> u32 {
    512
}
fn default_max_tokens() -> u32 {
    256
}
fn default_prompt_budget() -> u32 {
    640
}
/// Off until measured on the board: on the x86 development machine a batch
/// of 5 costs 3.9 single steps, so lookup does not pay there (README).
fn default_speculative() -> String {
    "off".into()
}

fn default_draft_max() -> u32 {
    DRAFT_MAX
}

/// The only draft length that did not lose on the stand-in here (README,
/// "Speculative decoding"); longer drafts cost more than they saved.
const DRAFT_MAX: u32 = 4;

fn default_draft_ngram_min() -> u32 {
    2
}

fn default_draft_ngram_max() -> u32 {
    4
}

fn default_prompt_cache_mib() -> u32 {
    192
}

/// Chosen: on the eval set with the stand-in model it took fewer model
/// steps and no fewer expected causes than written (README, "Chosen answers").
fn default_answer() -> String {
    "chosen".into()
}

/// Set by measurement (README, "Chosen answers, measured"): under the
/// 15-word instruction the stand-in's summaries run 24 tokens p50; the cap
/// stops the long ones, and a cap of 24 cut most and named fewer causes.
fn default_summary_tokens() -> u32 {
    32
}

/// Last: on 24 eval alarms with the stand-in, a summary written after the
/// chosen causes named an expected cause in 22 (first: 16), at the same
/// length and speed (README, "Chosen answers").
fn default_summary() -> String {
    "last".into()
}

/// Set by measurement (README, "Chosen answers, measured"): on 24 eval
/// alarms with the stand-in, heads of 2 tokens chose the same causes as
/// heads of 6 (recall 0.967 both) and fed 34 tokens per answer instead of 57.
fn default_item_tokens() -> u32 {
    2
}

fn default_passage_items() -> u32 {
    3
}
fn default_slots() -> u32 {
    1
}
fn default_template() -> String {
    "auto".into()
}
fn default_seed() -> u32 {
    42
}
fn default_temperature() -> f32 {
    0.2
}
fn default_stall() -> f64 {
    20.0
}
fn default_deadline() -> f64 {
    180.0
}
fn default_hard() -> f64 {
    10.0
}
fn default_queue_capacity() -> usize {
    32
}
fn default_dedup() -> u64 {
    60
}
fn default_outbox_bytes() -> u64 {
    16 * 1024 * 1024
}
/// ~50,000 alarms of a typical 300 bytes: far past any storm the queue and
/// triage would not already have answered.
fn default_inbox_bytes() -> u64 {
    16 * 1024 * 1024
}
fn default_log_level() -> String {
    "info".into()
}

/// Which prompt template the LLM side uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TemplateChoice {
    /// The GGUF's own chat template through llama.cpp, with the hand-written
    /// family template as the fallback path.
    Auto,
    ChatMl,
    Llama3,
    Gemma,
    SmolLm,
}

impl TemplateChoice {
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "auto" => Self::Auto,
            "chatml" | "qwen" => Self::ChatMl,
            "llama3" => Self::Llama3,
            "gemma" => Self::Gemma,
            "smollm" => Self::SmolLm,
            _ => return None,
        })
    }
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

#[derive(Debug, Clone)]
pub struct MqttConfig {
    pub host: String,
    pub port: u16,
    pub client_id: String,
    pub topic_prefix: String,
    pub username: Option<String>,
    pub password: Option<String>,
    pub keep_alive: Duration,
    pub max_alarm_bytes: usize,
    pub tls: Option<TlsConfig>,
}

#[derive(Debug, Clone)]
pub struct TlsConfig {
    pub ca: PathBuf,
    pub client_auth: Option<(PathBuf, PathBuf)>,
}

#[derive(Debug, Clone)]
pub struct KnowledgeConfig {
    pub index: PathBuf,
    pub top_k: usize,
}

#[derive(Debug, Clone)]
pub struct LlmConfig {
    pub model: PathBuf,
    pub threads: u32,
    pub ctx: u32,
    pub batch: u32,
    pub max_tokens: u32,
    pub prompt_budget: u32,
    /// Numbered items kept per passage (0 = whole passages).
    pub passage_items: u32,
    pub slots: u32,
    pub cpus: Option<Vec<usize>>,
    pub template: TemplateChoice,
    pub seed: u32,
    pub temperature: f32,
    pub thinking: bool,
    /// Prompt-lookup speculative decoding (`speculative = "lookup"`), or None.
    pub lookup: Option<crate::llm::lookup::Lookup>,
    /// RAM for saved prompt states that later alarms can resume from.
    pub prompt_cache_mib: u32,
    /// How causes and actions are produced (`answer = "chosen" | "written"`).
    pub answer: Answer,
    /// Cap on the summary's model tokens.
    pub summary_tokens: u32,
    /// A chosen answer writes its summary after its causes and actions
    /// (`summary = "last"`) rather than before them (`"first"`).
    pub summary_last: bool,
    /// Tokens of each chosen item the model is shown back in its answer
    /// (0: whole items); what is published is whole either way.
    pub item_tokens: u32,
}

/// How a model answer's causes and actions are produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// Picked by the model from the numbered items of the passages it was
    /// shown, and published as the manual's own words with their origin.
    Chosen,
    /// Written by the model token by token, then checked by the grounding
    /// guard.
    Written,
}

impl Answer {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "chosen" => Some(Answer::Chosen),
            "written" => Some(Answer::Written),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Answer::Chosen => "chosen",
            Answer::Written => "written",
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub struct WatchdogConfig {
    pub stall_timeout: Duration,
    pub deadline: Duration,
    pub hard_timeout: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct QueueConfig {
    pub capacity: usize,
    pub dedup_window: Duration,
}

#[derive(Debug, Clone, Copy)]
pub struct OutboxConfig {
    pub max_bytes: u64,
}

#[derive(Debug, Clone, Copy)]
pub struct InboxConfig {
    /// Disk for alarms taken off the broker and not yet answered; past it,
    /// an alarm is triaged at once.
    pub max_bytes: u64,
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
    validate(raw, path)
}

/// Parses a CPU list such as "4-7" or "0,2,4-5".
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut cpus = Vec::new();
    for part in s.split(',').map(str::trim) {
        if let Some((a, b)) = part.split_once('-') {
            let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
            if a > b || b >= 1024 {
                return None;
            }
            cpus.extend(a..=b);
        } else {
            let c: usize = part.parse().ok()?;
            if c >= 1024 {
                return None;
            }
            cpus.push(c);
        }
    }
    cpus.sort_unstable();
    cpus.dedup();
    (!cpus.is_empty()).then_some(cpus)
}

/// A rejected value: the key and what is wrong with it (the file is added by
/// `validate`, which is the only place that knows it).
type Bad = (&'static str, String);

fn range<T: PartialOrd + std::fmt::Display + Copy>(
    key: &'static str,
    v: T,
    lo: T,
    hi: T,
) -> Result<T, Bad> {
    if v < lo || v > hi {
        Err((key, format!("must be {lo}..={hi}, got {v}")))
    } else {
        Ok(v)
    }
}

fn validate(raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
    let RawConfig {
        state_dir,
        mqtt: m,
        knowledge: k,
        llm: l,
        watchdog: w,
        queue: q,
        outbox: o,
        inbox: i,
        log,
    } = raw;
    let sections = || -> Result<Config, Bad> {
        if state_dir.as_os_str().is_empty() {
            return Err(("state_dir", "must not be empty".into()));
        }
        Ok(Config {
            path: path.to_owned(),
            state_dir,
            mqtt: mqtt(m)?,
            knowledge: knowledge(k)?,
            llm: llm(l)?,
            watchdog: watchdog(&w)?,
            queue: queue(&q)?,
            outbox: OutboxConfig {
                max_bytes: range("outbox.max_bytes", o.max_bytes, 4096, 1 << 34)?,
            },
            inbox: InboxConfig {
                max_bytes: range("inbox.max_bytes", i.max_bytes, 4096, 1 << 34)?,
            },
            log_level: log_level(&log.level)?,
        })
    };
    sections().map_err(|(key, problem)| ConfigError::Invalid {
        key,
        problem,
        path: path.to_owned(),
    })
}

fn mqtt(m: RawMqtt) -> Result<MqttConfig, Bad> {
    if m.host.trim().is_empty() {
        return Err(("mqtt.host", "must not be empty".into()));
    }
    if m.port == 0 {
        return Err(("mqtt.port", "must be 1..=65535, got 0".into()));
    }
    let prefix = m.topic_prefix.trim_end_matches('/').to_string();
    if prefix.is_empty() || prefix.contains(['#', '+']) || prefix.starts_with('/') {
        return Err((
            "mqtt.topic_prefix",
            format!(
                "must be a non-empty topic without wildcards or a leading '/', got {:?}",
                m.topic_prefix
            ),
        ));
    }
    let client_id = match m.client_id {
        Some(id) if id.is_empty() || id.len() > 128 => {
            return Err((
                "mqtt.client_id",
                format!("must be 1..=128 bytes, got {} bytes", id.len()),
            ))
        }
        Some(id) => id,
        // A stable id is what makes the persistent session (and so redelivery) work.
        None => format!("tidewatch-{}", hostname()),
    };
    if m.password.is_some() && m.username.is_none() {
        return Err(("mqtt.password", "is set but mqtt.username is not".into()));
    }
    // rumqttc's MQTT 5 client panics on a keepalive under 5 s.
    range("mqtt.keep_alive_s", m.keep_alive_s, 5, 600)?;
    range("mqtt.max_alarm_bytes", m.max_alarm_bytes, 256, 1 << 20)?;
    let tls = match m.tls {
        None => None,
        Some(t) => {
            let client_auth = match (t.cert, t.key) {
                (Some(c), Some(k)) => Some((c, k)),
                (None, None) => None,
                (Some(_), None) => {
                    return Err((
                        "mqtt.tls.key",
                        "is required when mqtt.tls.cert is set".into(),
                    ))
                }
                (None, Some(_)) => {
                    return Err((
                        "mqtt.tls.cert",
                        "is required when mqtt.tls.key is set".into(),
                    ))
                }
            };
            Some(TlsConfig {
                ca: t.ca,
                client_auth,
            })
        }
    };
    Ok(MqttConfig {
        host: m.host,
        port: m.port,
        client_id,
        topic_prefix: prefix,
        username: m.username,
        password: m.password,
        keep_alive: Duration::from_secs(m.keep_alive_s),
        max_alarm_bytes: m.max_alarm_bytes,
        tls,
    })
}

fn knowledge(k: RawKnowledge) -> Result<KnowledgeConfig, Bad> {
    Ok(KnowledgeConfig {
        top_k: range("knowledge.top_k", k.top_k, 1, 20)?,
        index: k.index,
    })
}

fn llm(l: RawLlm) -> Result<LlmConfig, Bad> {
    range("llm.threads", l.threads, 1, 64)?;
    range("llm.ctx", l.ctx, 512, 32768)?;
    range("llm.batch", l.batch, 16, 8192)?;
    range("llm.max_tokens", l.max_tokens, 16, 4096)?;
    range("llm.prompt_budget", l.prompt_budget, 128, 16384)?;
    range("llm.passage_items", l.passage_items, 0, 50)?;
    range("llm.slots", l.slots, 1, 8)?;
    if l.prompt_budget + l.max_tokens + 64 > l.ctx {
        return Err((
            "llm.ctx",
            format!(
                "must hold llm.prompt_budget + llm.max_tokens + 64 = {}, got {}",
                l.prompt_budget + l.max_tokens + 64,
                l.ctx
            ),
        ));
    }
    if !(0.0..=2.0).contains(&l.temperature) || !l.temperature.is_finite() {
        return Err((
            "llm.temperature",
            format!("must be 0.0..=2.0, got {}", l.temperature),
        ));
    }
    let template = TemplateChoice::parse(&l.template).ok_or_else(|| {
        (
            "llm.template",
            format!(
                "must be one of auto, chatml, llama3, gemma, smollm; got {:?}",
                l.template
            ),
        )
    })?;
    range("llm.draft_max", l.draft_max, 1, 32)?;
    range("llm.draft_ngram_min", l.draft_ngram_min, 1, 8)?;
    range("llm.draft_ngram_max", l.draft_ngram_max, 1, 8)?;
    if l.draft_ngram_min > l.draft_ngram_max {
        return Err((
            "llm.draft_ngram_min",
            format!(
                "must not exceed llm.draft_ngram_max ({}), got {}",
                l.draft_ngram_max, l.draft_ngram_min
            ),
        ));
    }
    range("llm.prompt_cache_mib", l.prompt_cache_mib, 0, 65_536)?;
    let lookup = match l.speculative.as_str() {
        "off" => None,
        "lookup" => Some(crate::llm::lookup::Lookup {
            draft_max: l.draft_max as usize,
            ngram_min: l.draft_ngram_min as usize,
            ngram_max: l.draft_ngram_max as usize,
        }),
        other => {
            return Err((
                "llm.speculative",
                format!("must be \"off\" or \"lookup\", got {other:?}"),
            ))
        }
    };
    let answer = Answer::parse(&l.answer).ok_or_else(|| {
        (
            "llm.answer",
            format!("must be \"chosen\" or \"written\", got {:?}", l.answer),
        )
    })?;
    range("llm.summary_tokens", l.summary_tokens, 8, 256)?;
    range("llm.item_tokens", l.item_tokens, 0, 256)?;
    let summary_last = match l.summary.as_str() {
        "first" => false,
        "last" => true,
        other => {
            return Err((
                "llm.summary",
                format!("must be \"first\" or \"last\", got {other:?}"),
            ))
        }
    };
    let cpus = match l.cpus {
        None => None,
        Some(s) => Some(parse_cpu_list(&s).ok_or_else(|| {
            (
                "llm.cpus",
                format!("must be a CPU list like \"4-7\" or \"0,2,4-5\", got {s:?}"),
            )
        })?),
    };
    Ok(LlmConfig {
        model: l.model,
        threads: l.threads,
        ctx: l.ctx,
        batch: l.batch,
        max_tokens: l.max_tokens,
        prompt_budget: l.prompt_budget,
        passage_items: l.passage_items,
        slots: l.slots,
        cpus,
        template,
        seed: l.seed,
        temperature: l.temperature,
        thinking: l.thinking,
        lookup,
        prompt_cache_mib: l.prompt_cache_mib,
        answer,
        summary_tokens: l.summary_tokens,
        summary_last,
        item_tokens: l.item_tokens,
    })
}

fn watchdog(w: &RawWatchdog) -> Result<WatchdogConfig, Bad> {
    for (key, v) in [
        ("watchdog.stall_timeout_s", w.stall_timeout_s),
        ("watchdog.deadline_s", w.deadline_s),
        ("watchdog.hard_timeout_s", w.hard_timeout_s),
    ] {
        if !v.is_finite() || !(0.1..=86_400.0).contains(&v) {
            return Err((key, format!("must be 0.1..=86400 seconds, got {v}")));
        }
    }
    if w.stall_timeout_s > w.deadline_s {
        return Err((
            "watchdog.stall_timeout_s",
            format!(
                "must not exceed watchdog.deadline_s ({}), got {}",
                w.deadline_s, w.stall_timeout_s
            ),
        ));
    }
    Ok(WatchdogConfig {
        stall_timeout: Duration::from_secs_f64(w.stall_timeout_s),
        deadline: Duration::from_secs_f64(w.deadline_s),
        hard_timeout: Duration::from_secs_f64(w.hard_timeout_s),
    })
}

fn queue(q: &RawQueue) -> Result<QueueConfig, Bad> {
    range("queue.capacity", q.capacity, 1, crate::queue::MAX_CAPACITY)?;
    range("queue.dedup_window_s", q.dedup_window_s, 0, 86_400)?;
    Ok(QueueConfig {
        capacity: q.capacity,
        dedup_window: Duration::from_secs(q.dedup_window_s),
    })
}

fn log_level(level: &str) -> Result<String, Bad> {
    if !["error", "warn", "info", "debug", "trace"].contains(&level) {
        return Err((
            "log.level",
            format!("must be one of error, warn, info, debug, trace; got {level:?}"),
        ));
    }
    Ok(level.to_string())
}

fn hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|h| h.into_string().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "board".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
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

    fn p() -> &'static Path {
        Path::new("/etc/tidewatch/tidewatch.toml")
    }

    #[test]
    fn minimal_config_gets_defaults() {
        let c = parse(MINIMAL, p()).unwrap();
        assert_eq!(c.knowledge.top_k, 3);
        assert_eq!(c.llm.prompt_budget, 640);
        assert_eq!(c.llm.passage_items, 3);
        assert_eq!(c.llm.slots, 1);
        assert_eq!(c.mqtt.topic_prefix, "tidewatch");
        assert!(c.mqtt.client_id.starts_with("tidewatch-"));
        assert_eq!(c.llm.template, TemplateChoice::Auto);
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
    fn out_of_range_value_names_key() {
        let text = MINIMAL.replace("threads = 2", "threads = 0");
        let e = parse(&text, p()).unwrap_err().to_string();
        assert!(e.contains("llm.threads must be 1..=64, got 0"), "{e}");
        let text = MINIMAL.replace("threads = 2", "threads = 2\npassage_items = 99");
        let e = parse(&text, p()).unwrap_err().to_string();
        assert!(
            e.contains("llm.passage_items must be 0..=50, got 99"),
            "{e}"
        );
    }

    #[test]
    fn speculation_keys_are_checked_by_name() {
        let ok = parse(MINIMAL, p()).unwrap();
        assert_eq!(ok.llm.lookup, None, "off by default");
        assert_eq!(ok.llm.answer, Answer::Chosen);
        let w = MINIMAL.replace("threads = 2", "threads = 2\nanswer = \"written\"");
        assert_eq!(parse(&w, p()).unwrap().llm.answer, Answer::Written);
        let free = MINIMAL.replace("threads = 2", "threads = 2\nanswer = \"free\"");
        let e = parse(&free, p()).unwrap_err().to_string();
        assert!(
            e.contains("llm.answer must be \"chosen\" or \"written\", got \"free\""),
            "{e}"
        );
        assert_eq!(ok.llm.prompt_cache_mib, 192);
        let on = MINIMAL.replace("threads = 2", "threads = 2\nspeculative = \"lookup\"");
        let c = parse(&on, p()).unwrap();
        assert_eq!(c.llm.lookup.map(|l| l.draft_max), Some(4));
        for (extra, want) in [
            (
                "speculative = \"ngram\"",
                "llm.speculative must be \"off\" or \"lookup\"",
            ),
            ("draft_max = 0", "llm.draft_max must be 1..=32, got 0"),
            (
                "draft_ngram_min = 5",
                "llm.draft_ngram_min must not exceed llm.draft_ngram_max (4), got 5",
            ),
        ] {
            let text = MINIMAL.replace("threads = 2", &format!("threads = 2\n{extra}"));
            let e = parse(&text, p()).unwrap_err().to_string();
            assert!(e.contains(want), "{extra}: {e}");
        }
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
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("4-7"), Some(vec![4, 5, 6, 7]));
        assert_eq!(parse_cpu_list("0, 2,4-5"), Some(vec![0, 2, 4, 5]));
        assert_eq!(parse_cpu_list("7-4"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    #[test]
    fn example_config_is_valid() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/tidewatch.toml");
        load(&path).unwrap();
    }
}
