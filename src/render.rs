//! Diagnoses as a person reads them (`tidewatch show`): one input line, a
//! diagnosis JSON or a `topic payload` line as `mosquitto_sub -v` prints it,
//! becomes summary, causes, actions, sources, mode and timings as text.
//!
//! Pure: a string in, a string or an error naming the line out; the command
//! that reads and writes is `commands::show`. The reader is lenient where the wire type (`diagnosis::Diagnosis`) is strict:
//! an operator's terminal may see diagnoses from an older or newer tidewatch
//! on the same broker, so unknown fields and modes are shown, never refused.
//! It must never panic on what arrives: a bad line is an error naming it.

use std::fmt::Write as _;

use serde::Deserialize;

#[derive(Debug, thiserror::Error)]
pub enum RenderError {
    #[error("line {line}: not JSON ({reason}): {start}")]
    NotJson {
        line: usize,
        reason: String,
        start: String,
    },
    #[error("line {line}: not a diagnosis ({reason}): {start}")]
    NotDiagnosis {
        line: usize,
        reason: String,
        start: String,
    },
}

/// What `tidewatch show` understands of a diagnosis. Everything but `summary` has a
/// default, so a diagnosis missing a field still renders with what it has.
#[derive(Debug, Deserialize)]
struct View {
    #[serde(default)]
    alarm_id: String,
    #[serde(default)]
    equipment: String,
    #[serde(default)]
    code: String,
    #[serde(default)]
    severity: String,
    /// Required: it is what tells a diagnosis apart from a status or an
    /// error message that was piped in by a wider subscription.
    summary: String,
    #[serde(default)]
    probable_causes: Vec<CauseView>,
    #[serde(default)]
    actions: Vec<String>,
    #[serde(default)]
    action_sources: Vec<String>,
    #[serde(default)]
    sources: Vec<SourceView>,
    /// A string and not `diagnosis::Mode`, so a mode this build does not
    /// know is printed instead of failing the line.
    #[serde(default)]
    mode: String,
    /// A string for the same reason; absent from older diagnoses.
    #[serde(default)]
    coverage: String,
    /// The site note the answer rests on beside the manuals.
    #[serde(default)]
    coverage_note: Option<String>,
    #[serde(default)]
    model: String,
    #[serde(default)]
    grounded: Option<serde_json::Value>,
    #[serde(default)]
    timings: Option<TimingsView>,
    #[serde(default)]
    ts: String,
}

#[derive(Debug, Deserialize)]
struct CauseView {
    cause: String,
    #[serde(default)]
    likelihood: String,
    #[serde(default)]
    source: Option<String>,
    /// What the crew said of it here; lenient, as from a newer tidewatch.
    #[serde(default)]
    site: Option<SiteView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct SiteView {
    confirmed: u64,
    rejected: u64,
    last: Option<LastView>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct LastView {
    by: String,
    ts: String,
    vessel: Option<String>,
}

#[derive(Debug, Deserialize)]
struct SourceView {
    #[serde(default)]
    doc: String,
    #[serde(default)]
    section: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct TimingsView {
    retrieval_ms: f64,
    prompt_tokens: u64,
    cached_tokens: u64,
    ttft_ms: f64,
    generated_tokens: u64,
    generation_ms: f64,
    tokens_per_s: f64,
    draft_tokens: u64,
    accepted_tokens: u64,
    fed_tokens: u64,
}

/// A rejection published on `{prefix}/error`.
#[derive(Debug, Deserialize)]
struct ErrorView {
    #[serde(default)]
    topic: String,
    reason: String,
    #[serde(default)]
    bytes: Option<u64>,
    /// The rejected alarm's id, when it could be read.
    #[serde(default)]
    alarm_id: Option<String>,
}

/// Renders one input line (1-based `line_no`, for errors). `Ok(None)` for a
/// blank line. The text ends with a newline.
pub fn render_line(line_no: usize, line: &str) -> Result<Option<String>, RenderError> {
    let line = line.trim();
    if line.is_empty() {
        return Ok(None);
    }
    // `mosquitto_sub -v` puts the topic first; topics never start with `{`
    // in tidewatch's contract, so a leading brace means a bare payload.
    let (topic, payload) = match line.starts_with('{') {
        true => (None, line),
        false => match line.split_once(' ') {
            Some((t, p)) => (Some(t), p.trim_start()),
            None => (None, line),
        },
    };
    let value: serde_json::Value =
        serde_json::from_str(payload).map_err(|e| RenderError::NotJson {
            line: line_no,
            reason: json_reason(&e, line_no, line.len() - payload.len()),
            start: excerpt(line),
        })?;
    let not_diagnosis = |reason: String| RenderError::NotDiagnosis {
        line: line_no,
        reason,
        start: excerpt(line),
    };
    let Some(obj) = value.as_object() else {
        return Err(not_diagnosis("a JSON object is expected".into()));
    };
    // `mosquitto_sub -v -t 'tidewatch/#'` brings status, errors and the
    // alarms themselves too: each is one line, never a failure.
    let on = |suffix: &str| topic.is_some_and(|t| t.ends_with(suffix));
    let has = |k: &str| obj.contains_key(k);
    if !has("summary") {
        if on("/status") || has("state") {
            return Ok(Some(render_status(topic, obj)));
        }
        if on("/error") || has("reason") {
            if let Ok(e) = serde_json::from_value::<ErrorView>(value.clone()) {
                return Ok(Some(render_error(topic, &e)));
            }
        }
        if topic.is_some_and(|t| t.contains("/alarm")) || (has("id") && has("code")) {
            return Ok(Some(render_alarm(topic, obj)));
        }
        return Ok(Some(format!(
            "-- {}: {}\n",
            topic.unwrap_or("message"),
            excerpt(payload)
        )));
    }
    let v: View = serde_json::from_value(value).map_err(|e| not_diagnosis(e.to_string()))?;
    Ok(Some(render(&v)))
}

/// A field as text: a string as it is, anything else as JSON, "-" when absent.
fn field(obj: &serde_json::Map<String, serde_json::Value>, k: &str) -> String {
    match obj.get(k) {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(v) => v.to_string(),
        None => "-".into(),
    }
}

/// `{prefix}/status` in one line: the state and the counters an operator
/// watches (the rest are in the JSON, README "Status").
fn render_status(topic: Option<&str>, obj: &serde_json::Map<String, serde_json::Value>) -> String {
    let on = topic.unwrap_or("status");
    let state = field(obj, "state");
    if state != "online" {
        return match obj.get("ts") {
            Some(_) => format!("-- {on}: {state} at {}\n", field(obj, "ts")),
            // The MQTT last will carries no time: the connection ended
            // without a clean shutdown.
            None => format!("-- {on}: {state} (last will: the daemon's connection ended without a clean shutdown)\n"),
        };
    }
    let mut o = format!("-- {on}: {state}");
    for (k, label) in [
        ("diagnosed", "diagnosed"),
        ("degraded", "degraded"),
        ("triage", "triage"),
        ("rejected", "rejected"),
        ("replayed", "replayed"),
        ("queue_depth", "queued"),
        ("awaiting_ack", "awaiting ack"),
    ] {
        if obj.contains_key(k) {
            let _ = write!(o, " · {label} {}", field(obj, k));
        }
    }
    if obj.contains_key("ts") {
        let _ = write!(o, " · at {}", field(obj, "ts"));
    }
    o.push('\n');
    o
}

/// An alarm seen on the wire (a subscription to `{prefix}/#` sees them).
fn render_alarm(topic: Option<&str>, obj: &serde_json::Map<String, serde_json::Value>) -> String {
    let mut o = format!(
        "-- alarm {} on {}: {} {}",
        field(obj, "id"),
        topic.unwrap_or("-"),
        field(obj, "code"),
        field(obj, "severity")
    );
    if let Some(serde_json::Value::String(m)) = obj.get("message") {
        let m: String = m.chars().take(80).collect();
        let _ = write!(o, " · {}", m.replace('\n', " "));
    }
    o.push('\n');
    o
}

/// serde's message, its position counted from the start of the input line
/// (serde counts from the payload, after the topic): in bytes on one line,
/// as line and column of the input when the object spans lines.
fn json_reason(e: &serde_json::Error, line_no: usize, payload_offset: usize) -> String {
    let msg = e.to_string();
    let msg = msg.rfind(" at line ").map_or(msg.as_str(), |i| &msg[..i]);
    if e.line() > 1 {
        format!(
            "{msg} at line {} column {}",
            line_no + e.line() - 1,
            e.column()
        )
    } else {
        format!("{msg} at byte {}", payload_offset + e.column())
    }
}

/// The first 60 characters of a bad line, so the error shows what it was.
fn excerpt(line: &str) -> String {
    let mut s: String = line.chars().take(60).collect();
    let cut = s.len() < line.len();
    s = s.replace('\n', " ");
    if cut {
        s.push('…');
    }
    format!("`{s}`")
}

fn render(v: &View) -> String {
    let mut o = String::new();
    let id = if v.alarm_id.is_empty() {
        String::new()
    } else {
        format!(" · alarm {}", v.alarm_id)
    };
    let severity = if v.severity.is_empty() {
        String::new()
    } else {
        format!(" · {}", v.severity)
    };
    let head = format!(
        "== {} · {}{}{} ",
        or_dash(&v.equipment),
        or_dash(&v.code),
        id,
        severity
    );
    let _ = writeln!(
        o,
        "{head}{}",
        "=".repeat(72usize.saturating_sub(head.chars().count()))
    );
    // An answer no section of the manuals was found about says so before
    // anything else: its summary opens with it, and it leads the text. A
    // related one was not found by its words (its fault may still be
    // there); nothing at all was found for one with none.
    match v.coverage.as_str() {
        "related" => {
            let _ = writeln!(o, "NOT FOUND IN THE MANUALS (related): {}", v.summary);
        }
        "none" => {
            let _ = writeln!(o, "NOT IN THE MANUALS (none): {}", v.summary);
        }
        _ => {
            let _ = writeln!(o, "Summary: {}", v.summary);
        }
    }
    // The crew's own causes are printed apart from the manual's items,
    // under a heading that says whose they are.
    let crew = |c: &&CauseView| {
        c.source
            .as_deref()
            .is_some_and(crate::diagnosis::site::is_site_source)
    };
    // Each cause keeps its number in the published list, which is what
    // `tidewatch feedback --confirm N` counts, wherever it is printed.
    let numbered: Vec<(usize, &CauseView)> = v.probable_causes.iter().enumerate().collect();
    let manual: Vec<(usize, &CauseView)> =
        numbered.iter().copied().filter(|(_, c)| !crew(c)).collect();
    let site: Vec<(usize, &CauseView)> =
        numbered.iter().copied().filter(|(_, c)| crew(c)).collect();
    if !manual.is_empty() {
        let _ = writeln!(o, "Probable causes:");
        for (i, c) in manual {
            cause_lines(&mut o, i + 1, c);
        }
    }
    if !site.is_empty() {
        let _ = writeln!(
            o,
            "Site notes (the crew's experience on board, not the manuals):"
        );
        for (i, c) in site {
            cause_lines(&mut o, i + 1, c);
        }
    }
    if !v.alarm_id.is_empty() {
        let _ = writeln!(o, "{}", feedback_hint(v));
    }
    if !v.actions.is_empty() {
        let _ = writeln!(o, "Actions:");
        for (i, a) in v.actions.iter().enumerate() {
            let _ = writeln!(o, "  {}. {}", i + 1, a);
            if let Some(src) = v.action_sources.get(i) {
                let _ = writeln!(o, "     ↳ {src}");
            }
        }
    }
    if !v.sources.is_empty() {
        let _ = writeln!(o, "Sources:");
        for s in &v.sources {
            let _ = writeln!(o, "  {} § {}", or_dash(&s.doc), or_dash(&s.section));
        }
    }
    let _ = write!(o, "Mode: {}", mode_text(&v.mode));
    if !v.coverage.is_empty() {
        let _ = write!(o, " · coverage: {}", v.coverage);
    }
    if let Some(n) = &v.coverage_note {
        let _ = write!(o, " (rests on site note {n})");
    }
    if let Some(g) = &v.grounded {
        let g = match g {
            serde_json::Value::Bool(true) => "yes".to_string(),
            serde_json::Value::Bool(false) => "no".to_string(),
            other => other.to_string(),
        };
        let _ = write!(o, " · grounded: {g}");
    }
    if !v.model.is_empty() {
        let _ = write!(o, " · model {}", v.model);
    }
    o.push('\n');
    if let Some(t) = &v.timings {
        let _ = writeln!(o, "Timings: {}", timings_text(t));
    }
    if !v.ts.is_empty() {
        let _ = writeln!(o, "At: {}", v.ts);
    }
    o
}

/// How to answer this diagnosis (`tidewatch feedback`): the alarm id and
/// equipment to give, and what `--confirm N` counts.
fn feedback_hint(v: &View) -> String {
    let which = if v.probable_causes.is_empty() {
        String::new()
    } else {
        format!(
            "--confirm N | --reject N (N: a cause's number above, 1..{}) | ",
            v.probable_causes.len()
        )
    };
    format!(
        "Feedback: tidewatch feedback {} --equipment {} {which}--text \"...\" --by NAME",
        v.alarm_id,
        or_dash(&v.equipment)
    )
}

/// Cause number `n`, its source and what the crew said of it here.
fn cause_lines(o: &mut String, n: usize, c: &CauseView) {
    let l = if c.likelihood.is_empty() {
        "?"
    } else {
        &c.likelihood
    };
    let _ = writeln!(o, "  {n}. {:<8} {}", format!("[{l}]"), c.cause);
    if let Some(src) = &c.source {
        let _ = writeln!(o, "              ↳ {src}");
    }
    if let Some(s) = &c.site {
        let mut line = format!(
            "              ↳ on board: confirmed {} · rejected {}",
            s.confirmed, s.rejected
        );
        if let Some(last) = &s.last {
            let _ = write!(line, " · last {} {}", last.by, last.ts);
            if let Some(vessel) = &last.vessel {
                let _ = write!(line, " ({vessel})");
            }
        }
        let _ = writeln!(o, "{line}");
    }
}

/// A rejection in one line: which alarm (when its id could be read), on
/// which topic, and why.
fn render_error(topic: Option<&str>, e: &ErrorView) -> String {
    let on = if e.topic.is_empty() {
        topic.unwrap_or("-")
    } else {
        &e.topic
    };
    let id = match &e.alarm_id {
        Some(id) => format!(" {id}"),
        None => String::new(),
    };
    let mut o = format!("!! rejected alarm{id} on {on}: {}", e.reason);
    // Size rejections already say the size.
    if let Some(b) = e.bytes.filter(|_| !e.reason.contains("bytes")) {
        let _ = write!(o, " ({b} bytes)");
    }
    o.push('\n');
    o
}

fn or_dash(s: &str) -> &str {
    if s.is_empty() {
        "-"
    } else {
        s
    }
}

/// The mode, with what it means for how far to trust the answer.
fn mode_text(mode: &str) -> String {
    match mode {
        "full" => "full (the model answered from the retrieved passages)".into(),
        "degraded" => {
            "degraded (the model did not answer; causes and actions are the manuals' own text)"
                .into()
        }
        "triage" => "triage (alarm storm: answered from the manuals at once, no model run)".into(),
        "unmatched" => {
            "unmatched (nothing in the manuals matched: answered at once, no model run)".into()
        }
        "" => "-".into(),
        other => other.into(),
    }
}

fn timings_text(t: &TimingsView) -> String {
    let mut s = format!("retrieval {}", duration(t.retrieval_ms));
    if t.prompt_tokens > 0 {
        let _ = write!(s, " · prompt {} tokens", t.prompt_tokens);
        if t.cached_tokens > 0 {
            let _ = write!(s, " ({} cached)", t.cached_tokens);
        }
    }
    if t.generated_tokens == 0 {
        s.push_str(" · no generation");
        return s;
    }
    let _ = write!(
        s,
        " · TTFT {} · {} tokens in {} ({:.1} tok/s)",
        duration(t.ttft_ms),
        t.generated_tokens,
        duration(t.generation_ms),
        t.tokens_per_s
    );
    if t.fed_tokens > 0 {
        let _ = write!(s, " · {} fed", t.fed_tokens);
    }
    if t.draft_tokens > 0 {
        let _ = write!(
            s,
            " · drafts {}/{} accepted",
            t.accepted_tokens, t.draft_tokens
        );
    }
    s
}

fn duration(ms: f64) -> String {
    if !ms.is_finite() || ms < 0.0 {
        "-".into()
    } else if ms < 10.0 {
        // Retrieval takes well under a millisecond; "0 ms" would read as unmeasured.
        format!("{ms:.1} ms")
    } else if ms < 1000.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn full_en() -> String {
        r#"{"alarm_id":"demo-1","equipment":"ME1","code":"ME-JCW-TEMP-HI","summary":"Jacket water outlet temperature high on cylinder 3",
"probable_causes":[{"cause":"Thermostatic valve stuck","likelihood":"high"},{"cause":"Cooler fouled","likelihood":"medium"}],
"actions":["Check the thermostatic valve","Clean the cooler"],"sources":[{"doc":"main-engine-cooling.en","section":"ME-JCW-TEMP-HI: causes"}],
"mode":"full","model":"qwen.gguf","timings":{"retrieval_ms":2.4,"prompt_tokens":380,"cached_tokens":209,"ttft_ms":1210.0,
"generated_tokens":160,"generation_ms":5100.0,"tokens_per_s":31.4,"draft_tokens":0,"accepted_tokens":0},"ts":"2026-12-01T10:00:00Z"}"#
            .replace('\n', "")
    }

    #[test]
    fn a_full_english_diagnosis_shows_every_part() {
        let text = render_line(1, &full_en()).unwrap().unwrap();
        assert!(
            text.starts_with("== ME1 · ME-JCW-TEMP-HI · alarm demo-1 ="),
            "{text}"
        );
        assert!(text.contains("Summary: Jacket water outlet temperature high on cylinder 3\n"));
        assert!(
            text.contains("  1. [high]   Thermostatic valve stuck\n"),
            "{text}"
        );
        assert!(text.contains("  2. [medium] Cooler fouled\n"), "{text}");
        assert!(
            text.contains("Feedback: tidewatch feedback demo-1 --equipment ME1 --confirm N | --reject N (N: a cause's number above, 1..2) | --text \"...\" --by NAME\n"),
            "{text}"
        );
        assert!(text.contains("  1. Check the thermostatic valve\n  2. Clean the cooler\n"));
        assert!(text.contains("  main-engine-cooling.en § ME-JCW-TEMP-HI: causes\n"));
        assert!(text.contains("Mode: full (the model answered"), "{text}");
        assert!(text.contains("model qwen.gguf"));
        assert!(
            text.contains("retrieval 2.4 ms · prompt 380 tokens (209 cached) · TTFT 1.2 s · 160 tokens in 5.1 s (31.4 tok/s)"),
            "{text}"
        );
        assert!(text.ends_with("At: 2026-12-01T10:00:00Z\n"));
    }

    // An answer no section is about must not read like one that is.
    #[test]
    fn an_answer_the_manuals_do_not_cover_says_so_on_its_first_line() {
        let mut v: serde_json::Value = serde_json::from_str(&full_en()).unwrap();
        v["summary"] = serde_json::json!("手册中未找到按此报警措辞所写的故障章节。本回答参照最接近的章节，可能属于其他故障：BAL-PUMP-PRES-LO 原因 (ballast-zh)。 压载泵无法启动。");
        v["coverage"] = serde_json::json!("related");
        let text = render_line(1, &v.to_string()).unwrap().unwrap();
        let first = text.lines().nth(1).unwrap();
        assert_eq!(
            first,
            "NOT FOUND IN THE MANUALS (related): 手册中未找到按此报警措辞所写的故障章节。本回答参照最接近的章节，可能属于其他故障：BAL-PUMP-PRES-LO 原因 (ballast-zh)。 压载泵无法启动。"
        );
        assert!(!text.contains("Summary:"), "{text}");
        assert!(text.contains("· coverage: related"), "{text}");
        v["coverage"] = serde_json::json!("none");
        v["mode"] = serde_json::json!("unmatched");
        let text = render_line(1, &v.to_string()).unwrap().unwrap();
        assert!(text
            .lines()
            .nth(1)
            .unwrap()
            .starts_with("NOT IN THE MANUALS (none): "));
        assert!(
            text.contains("Mode: unmatched (nothing in the manuals matched"),
            "{text}"
        );
        // Covered, or from a tidewatch before coverage: the summary as before.
        v["coverage"] = serde_json::json!("covered");
        let text = render_line(1, &v.to_string()).unwrap().unwrap();
        assert!(
            text.lines().nth(1).unwrap().starts_with("Summary: 手册"),
            "{text}"
        );
    }

    #[test]
    fn a_mosquitto_sub_line_is_read_after_its_topic() {
        let line = format!("tidewatch/diagnosis/ME1 {}", full_en());
        let text = render_line(1, &line).unwrap().unwrap();
        assert_eq!(text, render_line(1, &full_en()).unwrap().unwrap());
    }

    #[test]
    fn a_chinese_diagnosis_keeps_its_text() {
        let line = r#"tidewatch/diagnosis/BUOY-07 {"alarm_id":"demo-3","equipment":"BUOY-07","code":"BAT-VOLT-LO","summary":"夜间蓄电池电压低","probable_causes":[{"cause":"太阳能板积污","likelihood":"high"}],"actions":["清洁太阳能板"],"sources":[{"doc":"buoy-power.zh","section":"BAT-VOLT-LO 原因"}],"mode":"full","model":"m.gguf","timings":{"retrieval_ms":1,"prompt_tokens":300,"cached_tokens":0,"ttft_ms":900,"generated_tokens":80,"generation_ms":2000,"tokens_per_s":40,"draft_tokens":0,"accepted_tokens":0},"ts":"t"}"#;
        let text = render_line(7, line).unwrap().unwrap();
        assert!(text.starts_with("== BUOY-07 · BAT-VOLT-LO · alarm demo-3 "));
        assert!(text.contains("Summary: 夜间蓄电池电压低\n"));
        assert!(text.contains("  1. [high]   太阳能板积污\n"));
        assert!(text.contains("  1. 清洁太阳能板\n"));
        assert!(text.contains("  buoy-power.zh § BAT-VOLT-LO 原因\n"));
        assert!(text.contains("TTFT 900 ms"));
    }

    #[test]
    fn a_chosen_answer_shows_where_each_item_is_in_the_manuals() {
        let line = r#"{"alarm_id":"demo-3","equipment":"BUOY-07","code":"BAT-VOLT-LO","summary":"蓄电池电压低。","probable_causes":[{"cause":"充电控制器或MPPT故障，不充电","likelihood":"high","source":"battery-zh § BAT-VOLT-LO 原因 (1/2) #2"}],"actions":["读取充电控制器状态"],"action_sources":["battery-zh § BAT-VOLT-LO 检查与处理 #3"],"sources":[],"mode":"full","model":"m.gguf","timings":{"retrieval_ms":1,"prompt_tokens":300,"cached_tokens":200,"ttft_ms":900,"generated_tokens":40,"generation_ms":2000,"tokens_per_s":20,"draft_tokens":0,"accepted_tokens":0,"fed_tokens":70},"ts":"t"}"#;
        let text = render_line(1, line).unwrap().unwrap();
        assert!(
            text.contains("  1. [high]   充电控制器或MPPT故障，不充电\n              ↳ battery-zh § BAT-VOLT-LO 原因 (1/2) #2\n"),
            "{text}"
        );
        assert!(
            text.contains(
                "  1. 读取充电控制器状态\n     ↳ battery-zh § BAT-VOLT-LO 检查与处理 #3\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("40 tokens in 2.0 s (20.0 tok/s) · 70 fed"),
            "{text}"
        );
    }

    #[test]
    fn site_notes_are_printed_apart_from_the_manuals_items() {
        let line = r#"{"alarm_id":"a-9","equipment":"S/G","code":"SG-9","summary":"s","coverage":"related","coverage_note":"here:a-1:2026-11-02T10:00:00Z","probable_causes":[{"cause":"feedback link loose","likelihood":"medium","source":"site note · C/E Volkov · 2026-11-02","site":{"confirmed":1,"rejected":0,"last":{"by":"C/E Volkov","ts":"2026-11-02T10:00:00Z"}}},{"cause":"pump worn","likelihood":"medium","source":"sg-en § SG-PRES-LO causes #2","site":{"confirmed":0,"rejected":2,"last":{"by":"2/E","ts":"2026-11-03T10:00:00Z","vessel":"RV Tern"}}}],"actions":["Check the link"],"sources":[],"mode":"full","model":"m","ts":"t"}"#;
        let text = render_line(1, line).unwrap().unwrap();
        let manual = text
            .find("Probable causes:\n  2. [medium] pump worn\n")
            .expect(&text);
        let site = text
            .find("Site notes (the crew's experience on board, not the manuals):\n  1. [medium] feedback link loose\n              ↳ site note · C/E Volkov · 2026-11-02\n              ↳ on board: confirmed 1 · rejected 0 · last C/E Volkov 2026-11-02T10:00:00Z\n")
            .expect(&text);
        assert!(manual < site, "{text}");
        assert!(
            text.contains(
                "↳ on board: confirmed 0 · rejected 2 · last 2/E 2026-11-03T10:00:00Z (RV Tern)\n"
            ),
            "{text}"
        );
        assert!(
            text.contains("coverage: related (rests on site note here:a-1:2026-11-02T10:00:00Z)"),
            "{text}"
        );
    }

    #[test]
    fn a_degraded_diagnosis_says_the_model_did_not_answer() {
        let line = r#"{"alarm_id":"a","equipment":"ME1","code":"X","summary":"Degraded: manual text","probable_causes":[{"cause":"c","likelihood":"medium"}],"actions":["a"],"sources":[],"mode":"degraded","model":"m","timings":{"retrieval_ms":3,"prompt_tokens":0,"cached_tokens":0,"ttft_ms":0,"generated_tokens":0,"generation_ms":0,"tokens_per_s":0,"draft_tokens":0,"accepted_tokens":0},"ts":"t"}"#;
        let text = render_line(1, line).unwrap().unwrap();
        assert!(text.contains("Mode: degraded (the model did not answer; causes and actions are the manuals' own text)"), "{text}");
        assert!(
            text.contains("Timings: retrieval 3.0 ms · no generation\n"),
            "{text}"
        );
        assert!(!text.contains("Sources:"));
    }

    // Another change adds `grounded` and a `passages` mode; diagnoses from
    // either side of it must render.
    #[test]
    fn unknown_fields_and_modes_render_and_grounded_is_shown() {
        let mut v: serde_json::Value = serde_json::from_str(&full_en()).unwrap();
        v["grounded"] = serde_json::json!(false);
        v["mode"] = serde_json::json!("passages");
        v["something_new"] = serde_json::json!({"x": 1});
        let text = render_line(1, &v.to_string()).unwrap().unwrap();
        assert!(
            text.contains("Mode: passages · grounded: no · model qwen.gguf"),
            "{text}"
        );
    }

    #[test]
    fn a_diagnosis_missing_optional_parts_still_renders() {
        let text = render_line(1, r#"{"summary":"only this"}"#)
            .unwrap()
            .unwrap();
        assert!(text.starts_with("== - · - "));
        assert!(text.contains("Summary: only this\nMode: -\n"), "{text}");
    }

    #[test]
    fn a_bad_json_line_is_an_error_naming_the_line() {
        let e = render_line(12, "tidewatch/diagnosis/ME1 {\"summary\": ").unwrap_err();
        let msg = e.to_string();
        assert_eq!(
            msg,
            "line 12: not JSON (EOF while parsing a value at byte 35): `tidewatch/diagnosis/ME1 {\"summary\":`"
        );
        let e = render_line(3, "hello").unwrap_err().to_string();
        assert!(e.starts_with("line 3: not JSON"), "{e}");
    }

    // `mosquitto_sub -v -t 'tidewatch/#' | tidewatch show` once failed
    // every status message with "not a diagnosis (missing field `summary`)".
    #[test]
    fn status_messages_are_one_line_each() {
        let t = render_line(4, r#"tidewatch/status {"state":"online","slots":1,"diagnosed":3,"degraded":0,"rejected":1,"replayed":2,"queue_depth":0,"ts":"2026-12-02T10:00:00Z"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t, "-- tidewatch/status: online · diagnosed 3 · degraded 0 · rejected 1 · replayed 2 · queued 0 · at 2026-12-02T10:00:00Z\n");
        let t = render_line(5, r#"tidewatch/status {"state":"offline"}"#)
            .unwrap()
            .unwrap();
        assert!(
            t.starts_with("-- tidewatch/status: offline (last will"),
            "{t}"
        );
        let t = render_line(5, r#"tidewatch/status {"state":"offline","ts":"t"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(t, "-- tidewatch/status: offline at t\n");
    }

    #[test]
    fn alarms_and_other_objects_on_a_wide_subscription_are_one_line_each() {
        let t = render_line(1, r#"tidewatch/alarm/ME1 {"id":"a-1","ts":"t","equipment":"ME1","code":"ME-JCW-TEMP-HI","severity":"major","message":"jacket\nwater hot"}"#)
            .unwrap()
            .unwrap();
        assert_eq!(
            t,
            "-- alarm a-1 on tidewatch/alarm/ME1: ME-JCW-TEMP-HI major · jacket water hot\n"
        );
        let t = render_line(2, r#"other/topic {"x":1}"#).unwrap().unwrap();
        assert_eq!(t, "-- other/topic: `{\"x\":1}`\n");
    }

    #[test]
    fn json_that_is_not_a_diagnosis_is_an_error_naming_the_line() {
        let e = render_line(5, "[1,2]").unwrap_err().to_string();
        assert!(
            e.starts_with("line 5: not a diagnosis (a JSON object"),
            "{e}"
        );
        let e = render_line(6, r#"{"summary":"s","probable_causes":"oops"}"#)
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("line 6: not a diagnosis (invalid type"),
            "{e}"
        );
    }

    #[test]
    fn a_long_bad_line_is_cut_in_the_error() {
        let long = format!("x{}", "y".repeat(500));
        let e = render_line(1, &long).unwrap_err().to_string();
        assert!(e.len() < 200, "{e}");
        assert!(e.contains("…`"));
    }

    #[test]
    fn a_rejection_from_the_error_topic_is_shown() {
        let line = r#"tidewatch/error {"topic":"tidewatch/alarm/ME1","reason":"field id is required","bytes":42,"ts":"t"}"#;
        let text = render_line(1, line).unwrap().unwrap();
        assert_eq!(
            text,
            "!! rejected alarm on tidewatch/alarm/ME1: field id is required (42 bytes)\n"
        );
    }

    // Once: "payload is 20128 bytes, over the 8192-byte limit (20128 bytes)".
    #[test]
    fn a_rejection_says_its_size_once_and_names_the_alarm_when_known() {
        let line = r#"tidewatch/error {"topic":"tidewatch/alarm/ME1","reason":"payload is 20128 bytes, over the 8192-byte limit","bytes":20128,"alarm_id":"a-7","ts":"t"}"#;
        let text = render_line(1, line).unwrap().unwrap();
        assert_eq!(
            text,
            "!! rejected alarm a-7 on tidewatch/alarm/ME1: payload is 20128 bytes, over the 8192-byte limit\n"
        );
    }
}
