//! The main path: an alarm over MQTT in, a diagnosis over MQTT out — with a
//! real mosquitto, the real test model and the real daemon binary; bad alarms
//! answered on the error topic, a missing model named, `tidewatch diagnose`
//! without a broker, and the prompt savings (passage items, the prompt cache,
//! speculation) seen in the diagnoses' timings.

mod common;

use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn english_and_chinese_alarms_get_full_diagnoses_and_status_is_online() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "e2e", "", "");
    let mut c = Client::connect(broker.port, "e2e", "e2e-client").await;
    let _d = Daemon::launch(&cfg).within(T).ready();

    let en = c
        .ask(
            "e2e",
            "en-1",
            "ME1",
            "ME-JCW-TEMP-HI",
            "major",
            "main_engine_cooling",
            "JCW outlet temp high cyl 3",
        )
        .await;
    assert_full_diagnosis_shape(&en);
    assert_eq!(en["equipment"], "ME1");
    assert_eq!(en["code"], "ME-JCW-TEMP-HI");
    assert_model_answered(&en);
    assert_eq!(en["model"], "smollm2-135m-instruct-q4_1.gguf");
    assert!(en["timings"]["prompt_tokens"].as_u64().unwrap() > 50);
    // Sources must be passages retrieval returned for this alarm.
    for s in en["sources"].as_array().unwrap() {
        assert!(s["doc"].as_str().unwrap().starts_with("main_engine"), "{s}");
    }

    let zh = c
        .ask(
            "e2e",
            "zh-1",
            "ME1",
            "ME-LO-PRES-LO",
            "critical",
            "main_engine_lube_oil",
            "主机滑油进口压力低，备用泵已启动",
        )
        .await;
    assert_full_diagnosis_shape(&zh);
    assert_eq!(zh["code"], "ME-LO-PRES-LO");
    assert!(
        zh["sources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["doc"] == "main_engine_lube_oil-zh"),
        "chinese alarm should cite the chinese lube oil manual: {zh}"
    );

    let st = c
        .expect("e2e/status", T, |v| {
            v["state"] == "online" && v["diagnosed"].as_u64() >= Some(2)
        })
        .await;
    for k in [
        "diagnosed",
        "degraded",
        "slot_restarts",
        "slots_lost",
        "queue_depth",
    ] {
        assert!(st[k].is_u64(), "status lacks {k}: {st}");
    }
    drop(broker);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_alarms_each_get_an_error_and_the_next_valid_alarm_is_diagnosed() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "bad", "", "");
    let mut c = Client::connect(broker.port, "bad", "bad-client").await;
    let mut d = Daemon::launch(&cfg).within(T).ready();

    c.publish("bad/alarm/P1", "this is not json").await;
    let e = c.expect("bad/error", T, |_| true).await;
    assert_eq!(e["topic"], "bad/alarm/P1");
    assert!(
        e["reason"]
            .as_str()
            .unwrap()
            .contains("not a valid alarm JSON"),
        "{e}"
    );

    let no_id = serde_json::json!({"ts":"2026-11-30T04:12:00Z","equipment":"P1","code":"X","severity":"minor"}).to_string();
    c.publish("bad/alarm/P1", no_id).await;
    let e = c.expect("bad/error", T, |_| true).await;
    assert!(
        e["reason"]
            .as_str()
            .unwrap()
            .contains("field id is required"),
        "{e}"
    );

    let huge = alarm("big", "P1", "X", "minor", "bilge", &"x".repeat(20_000));
    c.publish("bad/alarm/P1", huge).await;
    let e = c.expect("bad/error", T, |_| true).await;
    assert!(
        e["reason"]
            .as_str()
            .unwrap()
            .contains("over the 8192-byte limit"),
        "{e}"
    );

    let ok = c
        .ask(
            "bad",
            "ok-1",
            "BLG",
            "BLG-WELL-LVL-HI",
            "major",
            "bilge",
            "engine room bilge level high",
        )
        .await;
    assert_full_diagnosis_shape(&ok);
    d.assert_alive();
}

#[test]
fn missing_model_fails_with_a_message_naming_the_file() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "nomodel", "", "");
    let text = std::fs::read_to_string(&cfg).unwrap();
    let missing = dir.path().join("absent.gguf");
    let text = text.replace(
        &test_model().display().to_string(),
        &missing.display().to_string(),
    );
    std::fs::write(&cfg, text).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    // Tried before anything starts, naming the key.
    assert!(
        err.contains("config key llm.model: ") && err.contains("absent.gguf: no such file"),
        "{err}"
    );
}

#[test]
fn diagnose_command_prints_a_diagnosis_without_mqtt() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "cli", "", "");
    let d = diagnose_cli(
        dir.path(),
        &cfg,
        &alarm(
            "cli-1",
            "DG2",
            "DG-REV-PWR",
            "critical",
            "generator",
            "DG2 reverse power trip",
        ),
    );
    assert_full_diagnosis_shape(&d);
    assert_eq!(d["alarm_id"], "cli-1");
}

#[test]
fn passage_items_shortens_the_prompt_to_the_alarms_own_sections() {
    let _serial = common::serial();
    let a = alarm(
        "items-1",
        "ME1",
        "ME-LO-PRES-LO",
        "major",
        "main_engine_lube_oil",
        "ME LO inlet press low",
    );
    let mut tokens = Vec::new();
    for items in [0, 3] {
        let dir = tempfile::tempdir().unwrap();
        let extra = format!("passage_items = {items}");
        let cfg = config(dir.path(), free_port(), "items", &extra, "");
        let d = diagnose_cli(dir.path(), &cfg, &a);
        assert_full_diagnosis_shape(&d);
        // Only the alarm's own code's sections are offered, so only they can be cited.
        for s in d["sources"].as_array().unwrap() {
            let section = s["section"].as_str().unwrap();
            assert!(section.starts_with("ME-LO-PRES-LO "), "{d}");
        }
        tokens.push(d["timings"]["prompt_tokens"].as_u64().unwrap());
    }
    // The two ME-LO-PRES-LO sections list 6 causes and 7 checks; keeping 3
    // of each must cut tokens.
    assert!(
        tokens[1] + 20 < tokens[0],
        "prompt tokens with passage_items 0 and 3: {tokens:?}"
    );
}

/// The prompt cache: an alarm that repeats with a new reading after 11 other
/// alarms still finds its prompt in the slot's cache of recent prompts and
/// reads only its alarm block; without the cache it reads everything past the
/// static prefix again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_repeated_after_eleven_others_resumes_its_saved_prompt() {
    let _serial = common::serial();
    let broker = Broker::start();
    let mut shares = Vec::new();
    for cache_mib in [192, 0] {
        let dir = tempfile::tempdir().unwrap();
        let prefix = format!("pc{cache_mib}");
        let cfg = config(
            dir.path(),
            broker.port,
            &prefix,
            // Off means both tiers: the disk one would serve the repeat's
            // passage block (tests/prompt_disk.rs).
            &format!(
                "max_tokens = 24\nprompt_cache_mib = {cache_mib}\nprompt_cache_disk_mib = {}",
                cache_mib * 4
            ),
            "[queue]\ndedup_window_s = 0\n",
        );
        let mut c = Client::connect(broker.port, &prefix, &format!("{prefix}-client")).await;
        let _d = Daemon::launch(&cfg).within(T).ready();
        let kinds = [
            (
                "ME1",
                "ME-JCW-TEMP-HI",
                "main_engine_cooling",
                "JCW outlet temp high",
            ),
            ("DG2", "DG-REV-PWR", "generator", "reverse power trip"),
            ("BUOY-07", "BAT-VOLT-LO", "battery", "battery voltage low"),
            ("AIS", "AIS-GPS-LOST", "ais", "AIS lost GPS"),
        ];
        let mut last = serde_json::Value::Null;
        for i in 0..13 {
            // The first and the last are the same ME1 alarm (new id and reading).
            let (eq, code, kind, msg) = if i == 0 || i == 12 {
                kinds[0]
            } else {
                kinds[1 + i % 3]
            };
            let eq = if i == 0 || i == 12 {
                eq.to_string()
            } else {
                format!("{eq}-{i}")
            };
            let body = serde_json::json!({
                "id": format!("pc-{i}"), "ts": "2026-11-30T04:12:00Z", "equipment": eq,
                "code": code, "severity": "major", "kind": kind, "message": msg,
                "value": 90.0 + i as f64,
            });
            c.publish(&format!("{prefix}/alarm/{eq}"), body.to_string())
                .await;
            last = c
                .expect(&format!("{prefix}/diagnosis/{eq}"), T, |v| {
                    v["alarm_id"] == format!("pc-{i}")
                })
                .await;
        }
        let t = &last["timings"];
        let share = t["cached_tokens"].as_f64().unwrap() / t["prompt_tokens"].as_f64().unwrap();
        shares.push(share);
        eprintln!(
            "prompt_cache_mib {cache_mib}: repeat read {} of {} prompt tokens from cache",
            t["cached_tokens"], t["prompt_tokens"]
        );
    }
    assert!(
        shares[0] > 0.8,
        "with the cache the repeat should reuse most of its prompt: {shares:?}"
    );
    assert!(
        shares[1] < 0.7,
        "without the cache only the static prefix is shared: {shares:?}"
    );
}

/// Speculation on: drafts are proposed and verified, and the answer is a
/// whole diagnosis.
#[test]
fn lookup_speculation_drafts_and_verifies_and_the_answer_is_whole() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        free_port(),
        "spec",
        // Lookup drafts sampled text: a chosen answer's only sampled value
        // is the model's summary (a composed one samples nothing).
        "speculative = \"lookup\"\ntemperature = 0.0\nsummary = \"last\"",
        "",
    );
    let d = diagnose_cli(
        dir.path(),
        &cfg,
        &alarm(
            "sp-1",
            "ME1",
            "ME-LO-PRES-LO",
            "critical",
            "main_engine_lube_oil",
            "main engine lube oil inlet pressure low, standby pump started",
        ),
    );
    assert_full_diagnosis_shape(&d);
    let t = &d["timings"];
    let (drafted, accepted) = (
        t["draft_tokens"].as_u64().unwrap(),
        t["accepted_tokens"].as_u64().unwrap(),
    );
    assert!(drafted > 0, "no drafts proposed: {d}");
    assert!(accepted <= drafted, "{d}");
}
