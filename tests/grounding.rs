//! The grounding guard: what the real test model says is published only when
//! it is text, and every diagnosis reports how much of it was grounded.

mod common;

use common::*;
use tidewatch::grounding::is_text;

/// The demo's three alarms (deploy/demo.sh), on which the 135M test model
/// published `"cause": "1. 5BAT-VOLT-LO},{"` on a fresh machine.
fn demo_alarms() -> Vec<serde_json::Value> {
    let ts = "2026-11-30T04:12:00Z";
    vec![
        serde_json::json!({
            "id": "g-1", "ts": ts, "equipment": "ME1", "code": "ME-JCW-TEMP-HI",
            "severity": "major", "kind": "main_engine_cooling", "value": 93.5,
            "unit": "degC", "threshold": 90, "message": "JCW outlet temp high cyl 3"
        }),
        serde_json::json!({
            "id": "g-2", "ts": ts, "equipment": "ME1", "code": "ME-LO-PRES-LO",
            "severity": "critical", "kind": "main_engine_lube_oil", "value": 1.9,
            "unit": "bar", "threshold": 2.5, "message": "主机滑油进口压力低，备用泵已启动"
        }),
        serde_json::json!({
            "id": "g-3", "ts": ts, "equipment": "BUOY-07", "code": "BAT-VOLT-LO",
            "severity": "minor", "kind": "battery", "value": 11.2, "unit": "V",
            "message": "夜间蓄电池电压低"
        }),
    ]
}

#[test]
fn no_published_cause_or_action_of_the_test_model_is_anything_but_text() {
    let _serial = common::serial();
    let mut bad = Vec::new();
    for a in demo_alarms() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config(dir.path(), free_port(), "ground", "", "");
        let d = diagnose_cli(dir.path(), &cfg, &a.to_string());
        assert_full_diagnosis_shape(&d);
        let code = a["code"].as_str().unwrap();
        let causes = d["probable_causes"].as_array().unwrap();
        let values = causes
            .iter()
            .map(|c| ("cause", c["cause"].as_str().unwrap()))
            .chain(
                d["actions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|v| ("action", v.as_str().unwrap())),
            )
            .chain([("summary", d["summary"].as_str().unwrap())]);
        for (what, v) in values {
            if !is_text(v, code) {
                bad.push(format!("{code}: {what} {v:?} is not text"));
            }
        }
        let g = d["grounded"].as_f64();
        if !g.is_some_and(|g| (0.0..=1.0).contains(&g)) {
            bad.push(format!(
                "{code}: grounded is {}, not in 0..=1",
                d["grounded"]
            ));
        }
        let mode = d["mode"].as_str().unwrap_or_default();
        if !["full", "degraded", "triage", "passages"].contains(&mode) {
            bad.push(format!("{code}: mode {mode:?} is not a documented value"));
        }
        if mode == "full" && causes.is_empty() {
            bad.push(format!("{code}: a full answer without a cause"));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}
