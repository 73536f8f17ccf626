//! Validation: turns the raw file into the checked `Config`, one section at a
//! time, and says which key is wrong and why. Also the syntax of a CPU list
//! (`llm.cpus`).
//!
//! Paths are checked for shape only, never opened (relative ones are made
//! relative to the config file's folder); the only thing read from the
//! system is the hostname, for the default MQTT client id.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::checked::{
    Answer, InboxConfig, KnowledgeConfig, KvType, LlmConfig, Lookup, MqttConfig, OutboxConfig,
    QueueConfig, Summary, TemplateChoice, TlsConfig, WatchdogConfig, INBOX_RECORD_ROOM,
    MAX_JOURNAL_BYTES, MAX_QUEUE_CAPACITY, STOP_OVERHEAD_S, UNIT_STOP_TIMEOUT_S,
};
use super::raw::{RawConfig, RawKnowledge, RawLlm, RawMqtt, RawQueue, RawWatchdog};
use super::{Config, ConfigError};

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
/// `into_checked`, which is the only place that knows it).
type Bad = (&'static str, String);

fn in_range<T: PartialOrd + std::fmt::Display + Copy>(
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

/// The whole file, checked: the first rejected value ends the check, and its
/// error names the file as well as the key.
pub(super) fn into_checked(raw: RawConfig, path: &Path) -> Result<Config, ConfigError> {
    let RawConfig {
        state_dir,
        mqtt: mut m,
        knowledge: mut k,
        llm: mut l,
        watchdog: w,
        queue: q,
        outbox: o,
        inbox: i,
        log,
    } = raw;
    // A config written next to its index and model (`index = "k.twx"`)
    // must mean the same file whichever directory tidewatch starts in.
    let dir = path.parent().unwrap_or(Path::new(""));
    let state_dir = beside(dir, state_dir);
    k.index = beside(dir, k.index);
    k.examples = k.examples.map(|e| beside(dir, e));
    l.model = beside(dir, l.model);
    if let Some(t) = m.tls.as_mut() {
        t.ca = beside(dir, std::mem::take(&mut t.ca));
        t.cert = t.cert.take().map(|c| beside(dir, c));
        t.key = t.key.take().map(|c| beside(dir, c));
    }
    let sections = || -> Result<Config, Bad> {
        if state_dir.as_os_str().is_empty() {
            return Err(("state_dir", "must not be empty".into()));
        }
        let mqtt = broker_connection(m)?;
        let llm = llm_settings(l)?;
        Ok(Config {
            path: path.to_owned(),
            state_dir,
            knowledge: retrieval_settings(k)?,
            watchdog: watchdog_timeouts(&w, llm.slots)?,
            queue: queue_bounds(&q)?,
            outbox: OutboxConfig {
                max_bytes: in_range("outbox.max_bytes", o.max_bytes, 4096, MAX_JOURNAL_BYTES)?,
            },
            inbox: inbox_bound(i.max_bytes, mqtt.max_alarm_bytes)?,
            mqtt,
            llm,
            log_level: known_log_level(&log.level)?,
        })
    };
    sections().map_err(|(key, problem)| ConfigError::Invalid {
        key,
        problem,
        path: path.to_owned(),
    })
}

/// `p` as seen from the config file's folder `dir`; an absolute or empty
/// path stays as it is (empty is refused by its own check).
fn beside(dir: &Path, p: PathBuf) -> PathBuf {
    if p.is_absolute() || p.as_os_str().is_empty() {
        p
    } else {
        dir.join(p)
    }
}

/// The broker's host as the connection needs it: a name or an address
/// alone. A port or a scheme written into it would only show at run time,
/// as a name lookup retried for ever.
fn broker_host(host: &str) -> Result<(), Bad> {
    let bad = |why: &str| Err(("mqtt.host", format!("{why}, got {host:?}")));
    if host.trim().is_empty() {
        return Err(("mqtt.host", "must not be empty".into()));
    }
    if host.contains(char::is_whitespace) {
        return bad("must not hold spaces");
    }
    if host.contains("://") {
        return bad("must be a host name or address without a scheme (tls is [mqtt.tls])");
    }
    if host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err() {
        return bad("must be a host name or address without a port (the port is mqtt.port)");
    }
    Ok(())
}

fn broker_connection(m: RawMqtt) -> Result<MqttConfig, Bad> {
    broker_host(&m.host)?;
    if m.port == 0 {
        return Err(("mqtt.port", "must be 1..=65535, got 0".into()));
    }
    let prefix = m.topic_prefix.trim_end_matches('/').to_string();
    // A NUL is refused by the broker; a `$` topic is the broker's own and
    // is not matched by a client's `#`; a prefix of spaces is a typo.
    if prefix.trim().is_empty()
        || prefix.contains(['#', '+', '\0'])
        || prefix.starts_with(['/', '$'])
    {
        return Err((
            "mqtt.topic_prefix",
            format!(
                "must be a non-empty topic without wildcards, NUL or a leading '/' or '$', got {:?}",
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
    in_range("mqtt.keep_alive_s", m.keep_alive_s, 5, 600)?;
    in_range("mqtt.max_alarm_bytes", m.max_alarm_bytes, 256, 1 << 20)?;
    let numeric_severity = match m.numeric_severity.as_deref() {
        None => crate::alarm::NumericSeverity::Refused,
        Some(s) => crate::alarm::NumericSeverity::of_setting(s).ok_or_else(|| {
            (
                "mqtt.numeric_severity",
                format!("must be \"opc-ua\" (1 to 1000, 1000 the highest) or \"priority\" (1 to 4, 1 the highest), got {s:?}"),
            )
        })?,
    };
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
        numeric_severity,
        tls,
    })
}

fn retrieval_settings(k: RawKnowledge) -> Result<KnowledgeConfig, Bad> {
    const KEY: &str = "knowledge.plant_codes";
    let mut plant_codes = std::collections::BTreeMap::new();
    for (plant, manual) in k.plant_codes {
        let (p, m) = (
            plant.trim().to_ascii_uppercase(),
            manual.trim().to_ascii_uppercase(),
        );
        if p.is_empty() || m.is_empty() {
            return Err((KEY, format!("{plant:?} = {manual:?}: a code is empty")));
        }
        if p == m {
            return Err((KEY, format!("{p} = {m}: a manual code needs no mapping")));
        }
        if let Some(before) = plant_codes.insert(p.clone(), m.clone()) {
            return Err((
                KEY,
                format!(
                    "{p} is mapped twice (to {before} and to {m}; codes are compared without case)"
                ),
            ));
        }
    }
    let kind_aliases = kind_aliases(k.kind_aliases)?;
    Ok(KnowledgeConfig {
        top_k: in_range("knowledge.top_k", k.top_k, 1, 20)?,
        index: k.index,
        plant_codes,
        kind_aliases,
        examples: k.examples,
    })
}

/// `knowledge.kind_aliases`, each kind trimmed and lower case (a plant's
/// kinds are compared without case), each class trimmed.
fn kind_aliases(
    raw: std::collections::BTreeMap<String, String>,
) -> Result<std::collections::BTreeMap<String, String>, Bad> {
    const KEY: &str = "knowledge.kind_aliases";
    let mut out = std::collections::BTreeMap::new();
    for (kind, class) in raw {
        let (k, c) = (kind.trim().to_lowercase(), class.trim().to_string());
        if k.is_empty() || c.is_empty() {
            return Err((KEY, format!("{kind:?} = {class:?}: a name is empty")));
        }
        if let Some(before) = out.insert(k.clone(), c.clone()) {
            return Err((
                KEY,
                format!("{k:?} is mapped twice (to {before} and to {c}; kinds are compared without case)"),
            ));
        }
    }
    Ok(out)
}

fn llm_settings(l: RawLlm) -> Result<LlmConfig, Bad> {
    in_range("llm.threads", l.threads, 1, 64)?;
    in_range("llm.ctx", l.ctx, 512, 32768)?;
    in_range("llm.batch", l.batch, 16, 8192)?;
    in_range("llm.max_tokens", l.max_tokens, 16, 4096)?;
    in_range("llm.prompt_budget", l.prompt_budget, 128, 16384)?;
    in_range("llm.passage_items", l.passage_items, 0, 50)?;
    in_range("llm.slots", l.slots, 1, 8)?;
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
    let lookup = lookup_settings(&l)?;
    in_range("llm.prompt_cache_mib", l.prompt_cache_mib, 0, 65_536)?;
    in_range(
        "llm.prompt_cache_disk_mib",
        l.prompt_cache_disk_mib,
        0,
        1 << 20,
    )?;
    in_range("llm.prompt_chunk", l.prompt_chunk, 1, l.batch.max(1))?;
    let kv_type = match l.kv_type.as_str() {
        "f16" => KvType::F16,
        "q8_0" => KvType::Q8_0,
        other => {
            return Err((
                "llm.kv_type",
                format!("must be \"f16\" or \"q8_0\", got {other:?}"),
            ))
        }
    };
    let (answer, summary) = answer_settings(&l)?;
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
        prompt_cache_disk_mib: l.prompt_cache_disk_mib,
        prompt_chunk: l.prompt_chunk,
        kv_type,
        answer,
        summary_tokens: l.summary_tokens,
        summary,
        item_tokens: l.item_tokens,
    })
}

/// The speculative-decoding keys: the draft sizes, and `speculative` itself
/// (None when off).
fn lookup_settings(l: &RawLlm) -> Result<Option<Lookup>, Bad> {
    in_range("llm.draft_max", l.draft_max, 1, 32)?;
    in_range("llm.draft_ngram_min", l.draft_ngram_min, 1, 8)?;
    in_range("llm.draft_ngram_max", l.draft_ngram_max, 1, 8)?;
    if l.draft_ngram_min > l.draft_ngram_max {
        return Err((
            "llm.draft_ngram_min",
            format!(
                "must not exceed llm.draft_ngram_max ({}), got {}",
                l.draft_ngram_max, l.draft_ngram_min
            ),
        ));
    }
    match l.speculative.as_str() {
        "off" => Ok(None),
        "lookup" => Ok(Some(Lookup {
            draft_max: l.draft_max as usize,
            ngram_min: l.draft_ngram_min as usize,
            ngram_max: l.draft_ngram_max as usize,
        })),
        other => Err((
            "llm.speculative",
            format!("must be \"off\" or \"lookup\", got {other:?}"),
        )),
    }
}

/// How a chosen or written answer is made: `answer`, the summary's cap and
/// place, and how much of a chosen item the model reads back.
fn answer_settings(l: &RawLlm) -> Result<(Answer, Summary), Bad> {
    let answer = Answer::parse(&l.answer).ok_or_else(|| {
        (
            "llm.answer",
            format!("must be \"chosen\" or \"written\", got {:?}", l.answer),
        )
    })?;
    in_range("llm.summary_tokens", l.summary_tokens, 8, 256)?;
    in_range("llm.item_tokens", l.item_tokens, 0, 256)?;
    let summary = Summary::parse(&l.summary).ok_or_else(|| {
        (
            "llm.summary",
            format!(
                "must be \"first\", \"last\" or \"composed\", got {:?}",
                l.summary
            ),
        )
    })?;
    Ok((answer, summary))
}

/// The inbox's bound: what the board can read whole at start, and room
/// for at least one alarm of the largest size.
fn inbox_bound(max_bytes: u64, max_alarm_bytes: usize) -> Result<InboxConfig, Bad> {
    const KEY: &str = "inbox.max_bytes";
    in_range(KEY, max_bytes, 4096, MAX_JOURNAL_BYTES)?;
    let one = max_alarm_bytes as u64 + INBOX_RECORD_ROOM;
    if max_bytes < one {
        return Err((
            KEY,
            format!(
                "must hold one alarm of mqtt.max_alarm_bytes ({max_alarm_bytes}) with its record, {one} bytes, got {max_bytes}"
            ),
        ));
    }
    Ok(InboxConfig { max_bytes })
}

/// Longest `watchdog.hard_timeout_s` for `slots` slots: a stop joins them
/// one after another, each for up to the hard timeout, and must be done
/// within the unit's stop timeout.
fn longest_hard_timeout(slots: u32) -> f64 {
    // Tenths, so the error names a value that can be written back.
    ((UNIT_STOP_TIMEOUT_S - STOP_OVERHEAD_S) * 10.0 / f64::from(slots.max(1))).floor() / 10.0
}

fn watchdog_timeouts(w: &RawWatchdog, slots: u32) -> Result<WatchdogConfig, Bad> {
    for (key, v) in [
        ("watchdog.stall_timeout_s", w.stall_timeout_s),
        ("watchdog.deadline_s", w.deadline_s),
        ("watchdog.hard_timeout_s", w.hard_timeout_s),
    ] {
        if !v.is_finite() || !(0.1..=86_400.0).contains(&v) {
            return Err((key, format!("must be 0.1..=86400 seconds, got {v}")));
        }
    }
    let longest = longest_hard_timeout(slots);
    if w.hard_timeout_s > longest {
        return Err((
            "watchdog.hard_timeout_s",
            format!(
                "must be at most {longest} s, got {}: a stop joins llm.slots {slots} slot(s) one after another, each for up to this long, and must end {STOP_OVERHEAD_S} s before the unit's TimeoutStopSec={UNIT_STOP_TIMEOUT_S} (systemd/tidewatch.service), when systemd kills it",
                w.hard_timeout_s
            ),
        ));
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

fn queue_bounds(q: &RawQueue) -> Result<QueueConfig, Bad> {
    in_range("queue.capacity", q.capacity, 1, MAX_QUEUE_CAPACITY)?;
    in_range("queue.dedup_window_s", q.dedup_window_s, 0, 86_400)?;
    Ok(QueueConfig {
        capacity: q.capacity,
        dedup_window: Duration::from_secs(q.dedup_window_s),
    })
}

fn known_log_level(level: &str) -> Result<String, Bad> {
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
    use super::parse_cpu_list;
    use crate::config::tests::{p, MINIMAL};
    use crate::config::{parse, Answer};

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
    fn cpu_lists_parse() {
        assert_eq!(parse_cpu_list("4-7"), Some(vec![4, 5, 6, 7]));
        assert_eq!(parse_cpu_list("0, 2,4-5"), Some(vec![0, 2, 4, 5]));
        assert_eq!(parse_cpu_list("7-4"), None);
        assert_eq!(parse_cpu_list("x"), None);
    }

    fn with(extra: &str) -> String {
        format!("{MINIMAL}{extra}")
    }

    // Both journals are read whole into memory at start, yet up
    // to 16 GiB of each was accepted.
    #[test]
    fn journal_bounds_are_what_the_board_can_read_at_start() {
        for key in ["inbox", "outbox"] {
            let big = with(&format!("[{key}]\nmax_bytes = 17179869184\n"));
            let e = parse(&big, p()).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "{key}.max_bytes must be 4096..=67108864, got 17179869184"
                )),
                "{e}"
            );
            let most = with(&format!("[{key}]\nmax_bytes = 67108864\n"));
            assert!(parse(&most, p()).is_ok());
        }
    }

    #[test]
    fn a_plants_numeric_severity_scale_is_declared_by_name() {
        use crate::alarm::NumericSeverity;
        let on = |v: &str| MINIMAL.replace("port = 1883", &format!("port = 1883\n{v}"));
        assert_eq!(
            parse(MINIMAL, p()).unwrap().mqtt.numeric_severity,
            NumericSeverity::Refused
        );
        for (v, want) in [
            ("opc-ua", NumericSeverity::OpcUa),
            ("priority", NumericSeverity::Priority),
        ] {
            let c = parse(&on(&format!("numeric_severity = {v:?}")), p()).unwrap();
            assert_eq!(c.mqtt.numeric_severity, want);
        }
        let e = parse(&on("numeric_severity = \"opcua\""), p())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("mqtt.numeric_severity must be \"opc-ua\""),
            "{e}"
        );
        assert!(e.contains("got \"opcua\""), "{e}");
    }

    // `host = "127.0.0.1:1883"`, `"mqtt://broker"` and `" broker "` passed
    // check-config; the daemon then retried a name lookup for ever and never
    // told systemd it was ready.
    #[test]
    fn a_broker_host_is_a_bare_name_or_address() {
        let host = |h: &str| MINIMAL.replace("host = \"127.0.0.1\"", &format!("host = {h:?}"));
        for (h, want) in [
            ("127.0.0.1:1883", "mqtt.host must be a host name or address without a port (the port is mqtt.port), got \"127.0.0.1:1883\""),
            ("mqtt://broker.local", "mqtt.host must be a host name or address without a scheme (tls is [mqtt.tls]), got \"mqtt://broker.local\""),
            (" broker.local ", "mqtt.host must not hold spaces, got \" broker.local \""),
        ] {
            let e = parse(&host(h), p()).unwrap_err().to_string();
            assert!(e.contains(want), "{h}: {e}");
        }
        for h in ["broker.local", "10.0.0.5", "::1", "mqtt-1"] {
            assert_eq!(parse(&host(h), p()).unwrap().mqtt.host, h);
        }
    }

    // A NUL, a prefix of spaces and `$SYS/...` passed; the broker refuses
    // the first, and clients never see `$` topics under `#`.
    #[test]
    fn a_topic_prefix_is_one_the_broker_takes_and_clients_see() {
        let prefix = |t: &str| {
            let quoted = toml::Value::String(t.into()).to_string();
            MINIMAL.replace(
                "topic_prefix = \"tidewatch\"",
                &format!("topic_prefix = {quoted}"),
            )
        };
        for t in ["tw\u{0}x", "   ", "$SYS/tw", "tw/+", "#", "/tw", ""] {
            let e = parse(&prefix(t), p()).unwrap_err().to_string();
            assert!(e.contains("mqtt.topic_prefix must be"), "{t:?}: {e}");
            assert!(e.contains(&format!("got {t:?}")), "{t:?}: {e}");
        }
        for t in ["ship", "fleet/rv-1", "船/1", "ship/"] {
            assert!(parse(&prefix(t), p()).is_ok(), "{t:?}");
        }
    }

    #[test]
    fn the_inbox_holds_one_alarm_of_the_largest_size() {
        let text = MINIMAL.replace("port = 1883", "port = 1883\nmax_alarm_bytes = 1048576");
        let small = format!("{text}[inbox]\nmax_bytes = 1048576\n");
        let e = parse(&small, p()).unwrap_err().to_string();
        assert!(
            e.contains("inbox.max_bytes must hold one alarm of mqtt.max_alarm_bytes (1048576)")
                && e.contains("got 1048576"),
            "{e}"
        );
        let room = 1048576 + crate::config::INBOX_RECORD_ROOM;
        let enough = format!("{text}[inbox]\nmax_bytes = {room}\n");
        assert!(parse(&enough, p()).is_ok());
        // The default holds the default.
        assert!(parse(MINIMAL, p()).is_ok());
    }

    // A hard timeout past the unit's stop timeout let systemd
    // SIGKILL a daemon still waiting for its slots, before it had published
    // its offline status.
    #[test]
    fn slots_must_stop_within_the_units_stop_timeout() {
        let long = with("[watchdog]\nhard_timeout_s = 81\n");
        let e = parse(&long, p()).unwrap_err().to_string();
        assert!(
            e.contains("watchdog.hard_timeout_s must be at most 80 s")
                && e.contains("TimeoutStopSec=90"),
            "{e}"
        );
        assert!(parse(&with("[watchdog]\nhard_timeout_s = 80\n"), p()).is_ok());
        // Slots are stopped one after another.
        let four = MINIMAL.replace("threads = 2", "threads = 2\nslots = 4");
        let e = parse(&format!("{four}[watchdog]\nhard_timeout_s = 21\n"), p())
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("watchdog.hard_timeout_s must be at most 20 s") && e.contains("llm.slots 4"),
            "{e}"
        );
    }

    #[test]
    fn the_stop_timeout_checked_is_the_units() {
        let unit = include_str!("../../systemd/tidewatch.service");
        let set: Vec<&str> = unit
            .lines()
            .filter_map(|l| l.trim().strip_prefix("TimeoutStopSec="))
            .collect();
        assert_eq!(
            set,
            vec![format!("{}", crate::config::UNIT_STOP_TIMEOUT_S as u64)],
            "systemd/tidewatch.service and UNIT_STOP_TIMEOUT_S disagree"
        );
    }
}
