//! Coverage over MQTT: an alarm whose fault no section of the
//! manuals is about is answered `related`, with no cause rated high and a
//! summary that says so first; one that nothing in the manuals matches is
//! answered `none` at once, without the model; a fault the manuals cover,
//! raised under the plant's own code, stays `covered`. Every one is answered.
//! Real mosquitto, the real test model, the daemon binary.

mod common;

use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uncovered_faults_are_said_related_or_none_with_no_cause_rated_high() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "cov", "", "");
    let mut c = Client::connect(broker.port, "cov", "cov-client").await;
    let _d = Daemon::launch(&cfg).within(T).ready();

    // A ballast pump that will not start: the ballast manual has sections
    // for the pump's pressure and the valves, none for a start failure.
    let related = c
        .ask(
            "cov",
            "rel-1",
            "BP2",
            "AL-5102",
            "major",
            "ballast",
            "压载泵启动失败",
        )
        .await;
    assert_eq!(related["coverage"], "related", "{related}");
    let causes = related["probable_causes"].as_array().unwrap();
    assert!(!causes.is_empty(), "{related}");
    for cause in causes {
        assert_ne!(cause["likelihood"], "high", "{related}");
        assert!(
            cause["source"].is_string(),
            "every cause keeps its source: {related}"
        );
    }
    let summary = related["summary"].as_str().unwrap();
    assert!(
        summary.starts_with(
            "手册中未找到按此报警措辞所写的故障章节。本回答参照最接近的章节，可能属于其他故障："
        ),
        "{summary}"
    );
    assert!(summary.contains("ballast-zh"), "{summary}");
    // The composed summary rates its cause as the list does (it said
    // "（高）" beside a list rated medium).
    assert!(
        !summary.contains("（高）") && !summary.contains("(high)"),
        "{summary}"
    );
    assert!(
        related["timings"]["generated_tokens"].as_u64() > Some(0),
        "{related}"
    );

    // An X-band radar: no manual is for it, and the plant's kind names it
    // as the message does.
    let none = c
        .ask(
            "cov",
            "none-1",
            "RADAR",
            "RAD-2",
            "minor",
            "雷达",
            "X波段雷达磁控管寿命到期",
        )
        .await;
    assert_eq!(none["coverage"], "none", "{none}");
    assert_eq!(none["mode"], "unmatched", "{none}");
    assert!(
        none["probable_causes"].as_array().unwrap().is_empty(),
        "{none}"
    );
    assert_eq!(
        none["timings"]["generated_tokens"], 0,
        "no model run: {none}"
    );
    assert_eq!(none["timings"]["prompt_tokens"], 0, "no model run: {none}");
    assert!(
        none["summary"]
            .as_str()
            .unwrap()
            .starts_with("手册中没有与告警 RAD-2 相关的内容"),
        "{none}"
    );

    // A fault the manuals cover, under the plant's code, not the manual's.
    let covered = c
        .ask(
            "cov",
            "cov-1",
            "ME1",
            "AL-1204",
            "major",
            "main_engine_cooling",
            "HT cooling water inlet press low 1.9 bar",
        )
        .await;
    assert_eq!(covered["coverage"], "covered", "{covered}");
    assert!(
        !covered["summary"]
            .as_str()
            .unwrap()
            .starts_with("Not found in the manuals"),
        "{covered}"
    );

    let st = c
        .expect("cov/status", T, |v| v["unmatched"].as_u64() >= Some(1))
        .await;
    assert!(st["diagnosed"].as_u64() >= Some(2), "{st}");
}

// A plant's integrator maps its own alarm codes to the manuals' once
// (`[knowledge.plant_codes]`): a mapped alarm is covered by that code's
// section whatever its message says, and is published under its own code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mapped_plant_code_is_covered_by_its_manual_code() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let map = "[knowledge.plant_codes]\n\"ams-77\" = \"ME-LO-PRES-LO\"\n";
    let cfg = config(dir.path(), broker.port, "map", "", map);
    let mut c = Client::connect(broker.port, "map", "map-client").await;
    let _d = Daemon::launch(&cfg).within(T).ready();

    // Nothing in the message names the fault: unmapped, the same words
    // under another plant code are only related.
    let msg = "AMS point 77 active";
    let unmapped = c
        .ask(
            "map",
            "map-0",
            "ME1",
            "AMS-78",
            "major",
            "main_engine_lube_oil",
            msg,
        )
        .await;
    assert_eq!(unmapped["coverage"], "related", "{unmapped}");

    let mapped = c
        .ask(
            "map",
            "map-1",
            "ME1",
            "AMS-77",
            "major",
            "main_engine_lube_oil",
            msg,
        )
        .await;
    assert_eq!(mapped["coverage"], "covered", "{mapped}");
    assert_eq!(
        mapped["code"], "AMS-77",
        "published under its own code: {mapped}"
    );
    let causes = mapped["probable_causes"].as_array().unwrap();
    assert!(!causes.is_empty(), "{mapped}");
    for cause in causes {
        let source = cause["source"].as_str().unwrap_or_default();
        assert!(
            source.contains("ME-LO-PRES-LO"),
            "every cause from the mapped code's section: {mapped}"
        );
    }
}
