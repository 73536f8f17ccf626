//! The checked configuration's sections: what the rest of the daemon reads,
//! every value already range-checked, durations as `Duration`, choices as
//! enums.
//!
//! The queue's capacity ceiling and the prompt-lookup draft settings are
//! defined here too, and used from `queue` and `llm::lookup`, so that the
//! config, which every module reads, depends on neither.

use std::path::PathBuf;
use std::time::Duration;

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
    /// The scale a numeric `severity` is read on.
    pub numeric_severity: crate::alarm::NumericSeverity,
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
    /// Plant alarm code -> manual code, both trimmed and upper case: an
    /// alarm raised under a mapped code is judged and retrieved as if raised
    /// under its manual code (`pipeline`), and published under its own.
    pub plant_codes: std::collections::BTreeMap<String, String>,
    /// A plant's kind, trimmed and lower case, -> a manual class: the kind
    /// is read as that class (`pipeline`), before the manuals' own aliases.
    pub kind_aliases: std::collections::BTreeMap<String, String>,
    /// Example alarms for coverage (`coverage::examples`); None: the
    /// shipped examples where the daemon finds them (`load::examples`).
    pub examples: Option<PathBuf>,
}

impl KnowledgeConfig {
    /// The manual code `code` is mapped to, if any (case and surrounding
    /// space ignored).
    pub fn manual_code(&self, code: &str) -> Option<&str> {
        self.plant_codes
            .get(&code.trim().to_ascii_uppercase())
            .map(String::as_str)
    }

    /// The class `kind` is mapped to by `knowledge.kind_aliases`, if any
    /// (case and surrounding space ignored).
    pub fn kind_class(&self, kind: &str) -> Option<&str> {
        self.kind_aliases
            .get(&kind.trim().to_lowercase())
            .map(String::as_str)
    }
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
    pub lookup: Option<Lookup>,
    /// RAM for saved prompt states that later alarms can resume from.
    pub prompt_cache_mib: u32,
    /// Disk for saved passage-block states in `state_dir/kv/prompts`,
    /// kept across restarts (0: none).
    pub prompt_cache_disk_mib: u32,
    /// Prompt tokens per decode call: bounds how long a pre-emption waits.
    pub prompt_chunk: u32,
    /// The KV cache's element type, for keys and values alike.
    pub kv_type: KvType,
    /// How causes and actions are produced (`answer = "chosen" | "written"`).
    pub answer: Answer,
    /// Cap on the summary's model tokens.
    pub summary_tokens: u32,
    /// Where a chosen answer's summary comes from: the model, before or
    /// after the lists, or composed from them with no model tokens.
    pub summary: Summary,
    /// Tokens of each chosen item the model is shown back in its answer
    /// (0: whole items); what is published is whole either way.
    pub item_tokens: u32,
}

/// `[llm] kv_type`: the KV cache's element type. q8_0 halves the cache
/// and its saved states against f16.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KvType {
    F16,
    Q8_0,
}

impl KvType {
    pub fn name(self) -> &'static str {
        match self {
            KvType::F16 => "f16",
            KvType::Q8_0 => "q8_0",
        }
    }
}

/// Prompt-lookup draft settings: `[llm] speculative`, `draft_max`,
/// `draft_ngram_min/max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lookup {
    pub draft_max: usize,
    pub ngram_min: usize,
    pub ngram_max: usize,
}

/// Where a chosen answer's summary comes from (`llm.summary`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Summary {
    /// Sampled before the lists.
    First,
    /// Sampled after the lists, so it follows what was chosen.
    Last,
    /// One line built from the alarm and the chosen top cause and first
    /// check: no model tokens, and it cannot name another cause.
    Composed,
}

impl Summary {
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "first" => Some(Summary::First),
            "last" => Some(Summary::Last),
            "composed" => Some(Summary::Composed),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Summary::First => "first",
            Summary::Last => "last",
            Summary::Composed => "composed",
        }
    }

    /// The lists come first (the model's summary after them, or none).
    pub fn after_lists(self) -> bool {
        self != Summary::First
    }
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

/// Hard ceiling on `[queue] capacity`; the queue keeps its ordering in a
/// heapless vector of this size, so queue memory is fixed whatever the
/// arrival rate.
pub const MAX_QUEUE_CAPACITY: usize = 1024;

#[derive(Debug, Clone, Copy)]
pub struct QueueConfig {
    pub capacity: usize,
    pub dedup_window: Duration,
}

/// The unit's stop timeout (`TimeoutStopSec` in systemd/tidewatch.service;
/// a test keeps the two equal): past it systemd SIGKILLs the daemon, before
/// it has published its offline status or joined its slots.
pub const UNIT_STOP_TIMEOUT_S: f64 = 90.0;

/// What a stop takes besides joining the slots: the hub's last flush, the
/// offline status and the DISCONNECT (up to 2 s), with room to spare on a
/// busy eMMC. The slots are joined one after another, each waited for at
/// most `watchdog.hard_timeout_s`, in what is left.
pub const STOP_OVERHEAD_S: f64 = 10.0;

/// Largest `inbox.max_bytes` and `outbox.max_bytes`. Each file is read
/// whole at start and held twice while it is parsed (its bytes and its
/// records), so the two together can take four times this: 256 MiB at
/// 64 MiB, inside the ~600 MiB between the daemon's working set (~1.6 GB
/// with a 1.7B model) and the unit's MemoryHigh (2200M).
pub const MAX_JOURNAL_BYTES: u64 = 64 << 20;

/// Longest alarm topic the inbox is sized for (`INBOX_RECORD_ROOM`):
/// `{topic_prefix}/alarm/{equipment}`. A longer one only takes more room.
pub const ALARM_TOPIC_ROOM: usize = 256;

/// Bytes an inbox needs besides an alarm's payload to hold it: the file
/// header, the record's frame and key, a topic of `ALARM_TOPIC_ROOM` bytes,
/// and the attempt records counted against it. `inbox.max_bytes` must
/// hold one alarm of `mqtt.max_alarm_bytes` with this, or the largest
/// alarm could never be journaled.
pub const INBOX_RECORD_ROOM: u64 = 512;

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
