//! Alarms: the inbound wire format, its validation, and the topic names:
//! where alarms arrive and where their diagnoses, errors and status go.
//!
//! Everything here is pure: bytes and a topic in, a checked `Alarm` or a precise
//! `AlarmError` out. Alarm text is data, never instructions; this module only
//! bounds it. It never touches MQTT or the model.

use serde::{Deserialize, Serialize};

use crate::language::Language;

pub const MAX_ID: usize = 64;
pub const MAX_EQUIPMENT: usize = 64;
pub const MAX_CODE: usize = 32;
pub const MAX_KIND: usize = 48;
pub const MAX_UNIT: usize = 16;
pub const MAX_MESSAGE_BYTES: usize = 1024;
/// Readings beyond this are not physical for any sensor we carry; they are
/// usually a PLC's uninitialised register and would only confuse the model.
pub const MAX_ABS_VALUE: f64 = 1e9;

/// Why a payload was rejected. Each message names the field.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum AlarmError {
    #[error("payload is {size} bytes, over the {limit}-byte limit")]
    TooLarge { size: usize, limit: usize },
    #[error("payload is not valid UTF-8 (byte {0})")]
    NotUtf8(usize),
    #[error("payload is not a valid alarm JSON object: {0}")]
    Json(String),
    #[error("field {field} is required")]
    Missing { field: &'static str },
    #[error("field {field} must be at most {limit} characters, got {got}")]
    TooLong {
        field: &'static str,
        limit: usize,
        got: usize,
    },
    #[error("field {field} must not be empty")]
    Empty { field: &'static str },
    #[error("field {field} contains a control character")]
    ControlChar { field: &'static str },
    #[error("field {field} contains {ch:?}, which is not allowed in it")]
    BadChar { field: &'static str, ch: char },
    #[error("field severity must be critical, major, minor or warning (or an alert priority: emergency, alarm, caution; urgent, high, medium, low), got {0:?}")]
    BadSeverity(String),
    #[error("field severity is a number, {0}, and mqtt.numeric_severity is not set: set it to \"opc-ua\" (1 to 1000, 1000 the highest) or \"priority\" (1 to 4, 1 the highest)")]
    NumericSeverity(String),
    #[error("field severity must be {range} under mqtt.numeric_severity = {scale:?}, got {got}")]
    SeverityOutOfScale {
        scale: &'static str,
        range: &'static str,
        got: String,
    },
    #[error("field ts must be an RFC 3339 time, got {0:?}")]
    BadTime(String),
    #[error("field {field} must be a finite number within ±1e9, got {got}")]
    BadNumber { field: &'static str, got: String },
    #[error("field equipment is {field:?} but the topic says {topic:?}")]
    EquipmentMismatch { field: String, topic: String },
    #[error("topic {0:?} is not {{prefix}}/alarm/{{equipment}}")]
    BadTopic(String),
}

/// How urgent an alarm is. Declaration order is priority order (critical first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Critical,
    Major,
    Minor,
    Warning,
}

impl Severity {
    /// A severity as the wire writes it, in any case. Alert management
    /// panels (IEC 62923) grade their alerts emergency alarm, alarm,
    /// warning and caution, and alarm systems managed to ISA-18.2 (IEC
    /// 62682) give them a priority, urgent, high, medium or low: plants
    /// forward those words.
    pub fn of_wire(s: &str) -> Option<Severity> {
        match s.trim().to_lowercase().as_str() {
            "critical" | "emergency" | "emergency alarm" | "urgent" => Some(Severity::Critical),
            "major" | "alarm" | "high" => Some(Severity::Major),
            "minor" | "caution" | "medium" => Some(Severity::Minor),
            "warning" | "low" => Some(Severity::Warning),
            _ => None,
        }
    }

    /// A severity as the payload holds it: a word in any case, or a
    /// number (bare or as a string) read on the plant's `scale`.
    fn of_json(v: &serde_json::Value, scale: NumericSeverity) -> Result<Severity, AlarmError> {
        let number = match v {
            serde_json::Value::String(s) => match Severity::of_wire(s) {
                Some(sev) => return Ok(sev),
                None if s.trim().parse::<f64>().is_ok() => s.trim().to_string(),
                None => return Err(AlarmError::BadSeverity(s.chars().take(40).collect())),
            },
            serde_json::Value::Number(n) => n.to_string(),
            v => return Err(AlarmError::BadSeverity(v.to_string())),
        };
        let number: String = number.chars().take(40).collect();
        let n = number.parse::<u64>().ok();
        let graded = match scale {
            NumericSeverity::Refused => return Err(AlarmError::NumericSeverity(number)),
            NumericSeverity::OpcUa => n.and_then(NumericSeverity::of_opc_ua),
            NumericSeverity::Priority => n.and_then(NumericSeverity::of_priority),
        };
        graded.ok_or(AlarmError::SeverityOutOfScale {
            scale: scale.name(),
            range: scale.range(),
            got: number,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Critical => "critical",
            Severity::Major => "major",
            Severity::Minor => "minor",
            Severity::Warning => "warning",
        }
    }
}

/// What a plant's numeric severities mean (`mqtt.numeric_severity`).
/// Scales run both ways: an OPC UA event's severity is highest at 1000,
/// a priority highest at 1, so a number is read only on a declared scale:
/// read on the wrong one, a plant's most urgent alarm would be graded its
/// least, and nothing would say so.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum NumericSeverity {
    /// Numbers are refused, with an error that names the setting.
    #[default]
    Refused,
    /// OPC UA alarms and conditions' severity, 1 to 1000, as gateways from
    /// OPC UA to MQTT forward it.
    OpcUa,
    /// An alarm system's priority, 1 (the highest) to 4.
    Priority,
}

impl NumericSeverity {
    /// The setting's value as a config writes it.
    pub fn of_setting(s: &str) -> Option<Self> {
        match s {
            "opc-ua" => Some(NumericSeverity::OpcUa),
            "priority" => Some(NumericSeverity::Priority),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            NumericSeverity::Refused => "",
            NumericSeverity::OpcUa => "opc-ua",
            NumericSeverity::Priority => "priority",
        }
    }

    fn range(self) -> &'static str {
        match self {
            NumericSeverity::Refused => "a word",
            NumericSeverity::OpcUa => "a whole number from 1 to 1000",
            NumericSeverity::Priority => "a whole number from 1 to 4",
        }
    }

    /// The ranges OPC UA companion specifications grade severities by
    /// (OPC 40250-1, table 10): high from 801, medium high from 601,
    /// medium from 401; medium low and low are warnings.
    fn of_opc_ua(n: u64) -> Option<Severity> {
        match n {
            801..=1000 => Some(Severity::Critical),
            601..=800 => Some(Severity::Major),
            401..=600 => Some(Severity::Minor),
            1..=400 => Some(Severity::Warning),
            _ => None,
        }
    }

    fn of_priority(n: u64) -> Option<Severity> {
        match n {
            1 => Some(Severity::Critical),
            2 => Some(Severity::Major),
            3 => Some(Severity::Minor),
            4 => Some(Severity::Warning),
            _ => None,
        }
    }
}

/// A checked alarm. Field rules are the README's wire contract.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Alarm {
    pub id: String,
    pub ts: String,
    pub equipment: String,
    pub code: String,
    pub severity: Severity,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threshold: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The payload as sent. Numbers arrive as raw JSON so that out-of-range values
/// are reported by name rather than as a generic serde error.
#[derive(Deserialize)]
struct Wire {
    id: Option<String>,
    ts: Option<String>,
    equipment: Option<String>,
    code: Option<String>,
    severity: Option<serde_json::Value>,
    kind: Option<String>,
    value: Option<serde_json::Number>,
    unit: Option<String>,
    threshold: Option<serde_json::Number>,
    message: Option<String>,
}

/// The topic names under `mqtt.topic_prefix`: the daemon subscribes and
/// publishes to them, and `check-config` shows them.
#[derive(Debug, Clone)]
pub struct Topics {
    pub prefix: String,
}

impl Topics {
    /// Wider than `{prefix}/alarm/+`: an alarm one level off
    /// (`{prefix}/alarm`, `{prefix}/alarm/vessel1/ME1`) is taken in to be
    /// rejected with a report naming the form, not dropped by the broker.
    pub fn alarms(&self) -> String {
        format!("{}/alarm/#", self.prefix)
    }
    pub fn diagnosis(&self, equipment: &str) -> String {
        format!("{}/diagnosis/{equipment}", self.prefix)
    }
    pub fn error(&self) -> String {
        format!("{}/error", self.prefix)
    }
    /// Where watchkeepers answer diagnoses (`feedback`): one level, the
    /// equipment, as for alarms.
    pub fn feedback(&self) -> String {
        format!("{}/feedback/+", self.prefix)
    }
    pub fn feedback_on(&self, equipment: &str) -> String {
        format!("{}/feedback/{equipment}", self.prefix)
    }
    /// Where a site note made from feedback is published (and bridged ashore).
    pub fn notes(&self, equipment: &str) -> String {
        format!("{}/notes/{equipment}", self.prefix)
    }
    pub fn status(&self) -> String {
        format!("{}/status", self.prefix)
    }
}

/// Extracts the equipment from `{prefix}/alarm/{equipment}`.
pub fn equipment_from_topic<'a>(prefix: &str, topic: &'a str) -> Result<&'a str, AlarmError> {
    let bad = || AlarmError::BadTopic(topic.chars().take(200).collect());
    let rest = topic
        .strip_prefix(prefix)
        .and_then(|r| r.strip_prefix("/alarm/"))
        .ok_or_else(bad)?;
    if rest.is_empty() || rest.contains('/') {
        return Err(bad());
    }
    Ok(rest)
}

/// Parses and checks an alarm payload received on `topic_equipment`'s
/// topic, numeric severities refused.
pub fn parse(
    payload: &[u8],
    topic_equipment: Option<&str>,
    max_bytes: usize,
) -> Result<Alarm, AlarmError> {
    parse_on(
        payload,
        topic_equipment,
        max_bytes,
        NumericSeverity::Refused,
    )
}

/// `parse`, a numeric severity read on `scale`.
pub fn parse_on(
    payload: &[u8],
    topic_equipment: Option<&str>,
    max_bytes: usize,
    scale: NumericSeverity,
) -> Result<Alarm, AlarmError> {
    if payload.len() > max_bytes {
        return Err(AlarmError::TooLarge {
            size: payload.len(),
            limit: max_bytes,
        });
    }
    let text = std::str::from_utf8(payload).map_err(|e| AlarmError::NotUtf8(e.valid_up_to()))?;
    let wire: Wire = serde_json::from_str(text).map_err(|e| {
        // Cut by characters, not bytes: serde_json quotes the offending input
        // in its message (`invalid type: string "…"`, `unknown variant `…``),
        // and `String::truncate` at a byte inside a multi-byte character
        // panics. That panic killed the daemon on one alarm and again on every
        // redelivery of it (found by the fuzz target, tests/fuzz).
        AlarmError::Json(e.to_string().chars().take(200).collect())
    })?;
    let id = ident("id", wire.id, MAX_ID)?;
    let equipment = equipment(wire.equipment, topic_equipment)?;
    let code = ident("code", wire.code, MAX_CODE)?;
    let ts = timestamp(wire.ts)?;
    let severity = wire
        .severity
        .filter(|v| !v.is_null())
        .ok_or(AlarmError::Missing { field: "severity" })?;
    let severity = Severity::of_json(&severity, scale)?;
    let kind = wire
        .kind
        .map(|k| short_text("kind", k, MAX_KIND))
        .transpose()?;
    let unit = wire
        .unit
        .map(|u| short_text("unit", u, MAX_UNIT))
        .transpose()?;
    let value = wire.value.map(|n| number("value", n)).transpose()?;
    let threshold = wire.threshold.map(|n| number("threshold", n)).transpose()?;
    let message = message(wire.message)?;
    Ok(Alarm {
        id,
        ts,
        equipment,
        code,
        severity,
        kind,
        value,
        unit,
        threshold,
        message,
    })
}

/// The equipment field: an identifier without MQTT wildcards or level
/// separators, and the one the topic names.
fn equipment(v: Option<String>, topic_equipment: Option<&str>) -> Result<String, AlarmError> {
    let equipment = ident("equipment", v, MAX_EQUIPMENT)?;
    for ch in ['/', '+', '#'] {
        if equipment.contains(ch) {
            return Err(AlarmError::BadChar {
                field: "equipment",
                ch,
            });
        }
    }
    if let Some(t) = topic_equipment {
        if t != equipment {
            // The topic is the sender's too: quote no more of it than a
            // valid equipment name could be.
            return Err(AlarmError::EquipmentMismatch {
                field: equipment,
                topic: t.chars().take(MAX_EQUIPMENT + 1).collect(),
            });
        }
    }
    Ok(equipment)
}

/// The timestamp field: RFC 3339, quoted back at most 64 characters.
fn timestamp(v: Option<String>) -> Result<String, AlarmError> {
    let ts = v.ok_or(AlarmError::Missing { field: "ts" })?;
    if ts.len() > 64
        || time::OffsetDateTime::parse(&ts, &time::format_description::well_known::Rfc3339).is_err()
    {
        return Err(AlarmError::BadTime(ts.chars().take(64).collect()));
    }
    Ok(ts)
}

/// The optional message: bounded, no control characters but newlines and
/// tabs, trimmed (an empty one is none).
fn message(v: Option<String>) -> Result<Option<String>, AlarmError> {
    Ok(match v {
        None => None,
        Some(m) => {
            if m.len() > MAX_MESSAGE_BYTES {
                return Err(AlarmError::TooLong {
                    field: "message",
                    limit: MAX_MESSAGE_BYTES,
                    got: m.len(),
                });
            }
            // Newlines and tabs are ordinary in operator notes; other control
            // characters only ever come from binary garbage or terminal tricks.
            if m.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
                return Err(AlarmError::ControlChar { field: "message" });
            }
            let m = m.trim().to_string();
            (!m.is_empty()).then_some(m)
        }
    })
}

fn ident(field: &'static str, v: Option<String>, limit: usize) -> Result<String, AlarmError> {
    let v = v.ok_or(AlarmError::Missing { field })?;
    let v = short_text(field, v, limit)?;
    if v.is_empty() {
        return Err(AlarmError::Empty { field });
    }
    Ok(v)
}

fn short_text(field: &'static str, v: String, limit: usize) -> Result<String, AlarmError> {
    let got = v.chars().count();
    if got > limit {
        return Err(AlarmError::TooLong { field, limit, got });
    }
    if v.chars().any(char::is_control) {
        return Err(AlarmError::ControlChar { field });
    }
    Ok(v.trim().to_string())
}

fn number(field: &'static str, n: serde_json::Number) -> Result<f64, AlarmError> {
    match n.as_f64() {
        Some(f) if f.is_finite() && f.abs() <= MAX_ABS_VALUE => Ok(f),
        _ => Err(AlarmError::BadNumber {
            field,
            got: n.to_string().chars().take(40).collect(),
        }),
    }
}

impl Alarm {
    /// The text retrieval searches with: what an operator wrote, not a manual.
    pub fn query_text(&self) -> String {
        let mut q = String::with_capacity(128);
        q.push_str(&self.code);
        if let Some(k) = &self.kind {
            q.push(' ');
            q.push_str(&k.replace('_', " "));
        }
        if let Some(m) = &self.message {
            q.push(' ');
            q.push_str(m);
        }
        q
    }

    /// The language the alarm's answer is in: its message's, never its
    /// kind's or code's (a plant may name its machines in Chinese and
    /// raise English texts). An alarm without a message is answered in
    /// English.
    pub fn language(&self) -> Language {
        Language::of_text(self.message.as_deref().unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OK: &str = r#"{"id":"a1","ts":"2026-11-30T04:12:00Z","equipment":"ME1","code":"ME-JCW-TEMP-HI","severity":"major","kind":"main_engine_cooling","value":93.5,"unit":"degC","threshold":90,"message":"主机缸套水出口温度高"}"#;

    #[test]
    fn alert_panels_and_alarm_priorities_in_any_case_are_severities() {
        for (wire, want) in [
            ("alarm", Severity::Major),
            ("ALARM", Severity::Major),
            ("Emergency alarm", Severity::Critical),
            ("caution", Severity::Minor),
            (" Warning ", Severity::Warning),
            ("CRITICAL", Severity::Critical),
            ("URGENT", Severity::Critical),
            ("HIGH", Severity::Major),
            ("Medium", Severity::Minor),
            ("low", Severity::Warning),
        ] {
            let p = OK.replace(r#""severity":"major""#, &format!(r#""severity":{wire:?}"#));
            let a = parse(p.as_bytes(), None, 8192).unwrap();
            assert_eq!(a.severity, want, "{wire}");
            // The diagnosis copies the severity in the contract's words.
            assert_eq!(serde_json::to_value(a.severity).unwrap(), want.as_str());
        }
        let p = OK.replace(r#""severity":"major""#, r#""severity":"severe""#);
        let e = parse(p.as_bytes(), None, 8192).unwrap_err();
        assert!(e.to_string().contains("field severity"), "{e}");
    }

    #[test]
    fn a_numeric_severity_is_read_only_on_the_plants_declared_scale() {
        let on = |wire: &str, scale| {
            let p = OK.replace(r#""severity":"major""#, &format!(r#""severity":{wire}"#));
            parse_on(p.as_bytes(), None, 8192, scale)
        };
        for (wire, want) in [
            ("1000", Severity::Critical),
            ("801", Severity::Critical),
            ("800", Severity::Major),
            ("601", Severity::Major),
            ("600", Severity::Minor),
            ("401", Severity::Minor),
            ("400", Severity::Warning),
            ("1", Severity::Warning),
            (r#""700""#, Severity::Major),
        ] {
            assert_eq!(
                on(wire, NumericSeverity::OpcUa).unwrap().severity,
                want,
                "{wire}"
            );
        }
        for (wire, want) in [
            ("1", Severity::Critical),
            (r#"" 2 ""#, Severity::Major),
            ("3", Severity::Minor),
            ("4", Severity::Warning),
        ] {
            assert_eq!(
                on(wire, NumericSeverity::Priority).unwrap().severity,
                want,
                "{wire}"
            );
        }
        // Words keep their meaning on any scale.
        assert_eq!(
            on(r#""HIGH""#, NumericSeverity::Priority).unwrap().severity,
            Severity::Major
        );
        // Out of the scale: refused, naming the field, the setting and the range.
        for (wire, scale, range) in [
            ("0", NumericSeverity::OpcUa, "1 to 1000"),
            ("1001", NumericSeverity::OpcUa, "1 to 1000"),
            ("-5", NumericSeverity::OpcUa, "1 to 1000"),
            ("700.5", NumericSeverity::OpcUa, "1 to 1000"),
            (r#""0""#, NumericSeverity::OpcUa, "1 to 1000"),
            ("5", NumericSeverity::Priority, "1 to 4"),
            ("0", NumericSeverity::Priority, "1 to 4"),
        ] {
            let e = on(wire, scale).unwrap_err().to_string();
            assert!(e.contains("field severity"), "{wire}: {e}");
            assert!(e.contains("mqtt.numeric_severity"), "{wire}: {e}");
            assert!(e.contains(range), "{wire}: {e}");
        }
        // With no scale declared a number is refused, and the error says
        // how to declare one: 1 is the highest priority or the lowest
        // OPC UA severity, and guessing would grade one of them wrong.
        for wire in ["1", "700", r#""700""#] {
            let e = on(wire, NumericSeverity::Refused).unwrap_err().to_string();
            assert!(e.contains("field severity is a number"), "{wire}: {e}");
            assert!(e.contains("mqtt.numeric_severity"), "{wire}: {e}");
        }
        let e = on("true", NumericSeverity::OpcUa).unwrap_err().to_string();
        assert!(e.contains("field severity must be critical"), "{e}");
    }

    #[test]
    fn valid_alarm_parses() {
        let a = parse(OK.as_bytes(), Some("ME1"), 8192).unwrap();
        assert_eq!(a.severity, Severity::Major);
        assert_eq!(a.value, Some(93.5));
        assert_eq!(a.message.as_deref(), Some("主机缸套水出口温度高"));
    }

    #[test]
    fn missing_id_is_named() {
        let p = OK.replace(r#""id":"a1","#, "");
        assert_eq!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::Missing { field: "id" })
        );
    }

    #[test]
    fn oversized_payload_is_rejected_before_parsing() {
        let big = vec![b' '; 9000];
        assert!(matches!(
            parse(&big, None, 8192),
            Err(AlarmError::TooLarge { size: 9000, .. })
        ));
    }

    #[test]
    fn invalid_utf8_is_rejected() {
        assert!(matches!(
            parse(b"{\"id\":\"\xff\"}", None, 8192),
            Err(AlarmError::NotUtf8(7))
        ));
    }

    #[test]
    fn wrong_types_and_bad_numbers_are_rejected() {
        let p = OK.replace(r#""value":93.5"#, r#""value":"hot""#);
        assert!(matches!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::Json(_))
        ));
        let p = OK.replace(r#""value":93.5"#, r#""value":1e300"#);
        assert!(matches!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::BadNumber { field: "value", .. })
        ));
        let p = OK.replace(r#""severity":"major""#, r#""severity":"panic""#);
        assert!(matches!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::BadSeverity(s)) if s == "panic"
        ));
    }

    #[test]
    fn overlong_and_control_fields_are_rejected() {
        let p = OK.replace(
            r#""code":"ME-JCW-TEMP-HI""#,
            &format!(r#""code":"{}""#, "X".repeat(33)),
        );
        assert!(matches!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::TooLong {
                field: "code",
                limit: 32,
                got: 33
            })
        ));
        let p = OK.replace(r#""id":"a1""#, r#""id":"a\u001b[31m""#);
        assert_eq!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::ControlChar { field: "id" })
        );
    }

    #[test]
    fn deeply_nested_json_is_an_error_not_a_crash() {
        let p = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(matches!(
            parse(p.as_bytes(), None, 1 << 20),
            Err(AlarmError::Json(_))
        ));
    }

    /// Found by the `alarm` fuzz target: a JSON error quoting non-ASCII input
    /// used to panic at the 200-byte cut.
    #[test]
    fn json_error_quoting_non_ascii_input_is_cut_at_a_character_not_a_panic() {
        // Three paddings put byte 200 inside a character whatever the prefix.
        for pad in ["", "x", "xy"] {
            let long = format!("{pad}{}", "主".repeat(300));
            let as_string = format!("{long:?}");
            let as_value = OK.replace(r#""value":93.5"#, &format!(r#""value":{long:?}"#));
            for p in [as_string, as_value] {
                match parse(p.as_bytes(), None, 8192) {
                    Err(AlarmError::Json(m)) => {
                        assert_eq!(m.chars().count(), 200, "{m}");
                        assert!(m.contains("主主"), "{m}");
                    }
                    other => panic!("{other:?}"),
                }
            }
        }
    }

    #[test]
    fn topics_follow_the_prefix() {
        let t = Topics {
            prefix: "tw".into(),
        };
        assert_eq!(t.alarms(), "tw/alarm/#");
        assert_eq!(t.diagnosis("ME1"), "tw/diagnosis/ME1");
        assert_eq!(t.status(), "tw/status");
    }

    #[test]
    fn topic_gives_equipment() {
        assert_eq!(equipment_from_topic("tw", "tw/alarm/ME1"), Ok("ME1"));
        assert!(equipment_from_topic("tw", "tw/alarm/ME1/x").is_err());
        assert!(equipment_from_topic("tw", "tw/alarm/").is_err());
        assert!(equipment_from_topic("tw", "other/alarm/ME1").is_err());
    }

    #[test]
    fn equipment_must_match_topic() {
        assert!(matches!(
            parse(OK.as_bytes(), Some("DG2"), 8192),
            Err(AlarmError::EquipmentMismatch { .. })
        ));
        let long = "设".repeat(10_000);
        match parse(OK.as_bytes(), Some(&long), 8192) {
            Err(AlarmError::EquipmentMismatch { topic, .. }) => {
                assert_eq!(topic.chars().count(), MAX_EQUIPMENT + 1)
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn bad_timestamp_is_named() {
        let p = OK.replace("2026-11-30T04:12:00Z", "yesterday");
        assert!(matches!(
            parse(p.as_bytes(), None, 8192),
            Err(AlarmError::BadTime(_))
        ));
    }
}
