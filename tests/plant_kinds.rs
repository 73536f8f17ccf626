//! Alarms as plants write them, over MQTT: a plant names its machine in its
//! own words (`No.2 DG`, `ENGINE ROOM`, no kind at all), and the fault the
//! manuals cover is still answered `covered` from its own section. A kind
//! that maps to no manual is counted in status and named once in the log,
//! with the config key that maps it; `[knowledge.kind_aliases]` maps it,
//! and an alias to a class no manual has stops the start, naming the key.
//! Real mosquitto, the real test model, the daemon binary.

mod common;

use std::process::Command;
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(90);

/// Publishes an alarm without a `kind` and waits for its diagnosis.
async fn ask_kindless(
    c: &mut Client,
    prefix: &str,
    id: &str,
    code: &str,
    message: &str,
) -> serde_json::Value {
    let body = serde_json::json!({
        "id": id, "ts": "2026-12-01T04:12:00Z", "equipment": "ME1", "code": code,
        "severity": "major", "message": message,
    });
    c.publish(&format!("{prefix}/alarm/ME1"), body.to_string())
        .await;
    c.expect(&format!("{prefix}/diagnosis/ME1"), T, |v| {
        v["alarm_id"] == id
    })
    .await
}

fn cites(d: &serde_json::Value, section: &str) -> bool {
    d["sources"].as_array().is_some_and(|s| {
        s.iter()
            .any(|s| s["section"].as_str().is_some_and(|x| x.contains(section)))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_covered_fault_in_the_plants_words_is_covered_by_its_own_section() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "pk", "", "");
    let mut c = Client::connect(broker.port, "pk", "pk-client").await;
    let d = Daemon::launch(&cfg).within(T).ready();

    // A component's name for a kind, an AMS short text, a plant code.
    let dg = c
        .ask(
            "pk",
            "pk-1",
            "DG2",
            "AL-2231",
            "major",
            "No.2 DG",
            "NO.2 DG LO PRESS LOW 2.1 BAR",
        )
        .await;
    assert_eq!(dg["coverage"], "covered", "{dg}");
    assert!(
        cites(&dg, "DG-LO-PRES-LO"),
        "the generators' own section: {dg}"
    );

    // No kind at all: the message names the machine.
    let me = ask_kindless(
        &mut c,
        "pk",
        "pk-2",
        "AL-1204",
        "主机缸套水进口压力低 1.9bar",
    )
    .await;
    assert_eq!(me["coverage"], "covered", "{me}");
    assert!(cites(&me, "ME-JCW-PRES-LO"), "{me}");

    // An AMS group for a kind, twice, and a watch log that lists what was
    // found normal after the fault.
    for id in ["pk-3", "pk-4"] {
        let pur = c
            .ask(
                "pk",
                id,
                "PUR1",
                "AL-0457",
                "minor",
                "ENGINE ROOM",
                "No.1 HFO purifier: sludge discharge not confirmed after the 0400 desludge, bowl re-closed, feed pump normal, water in oil sensor normal",
            )
            .await;
        assert_eq!(pur["coverage"], "covered", "{pur}");
        assert!(cites(&pur, "PUR-DISCH-FAIL"), "{pur}");
    }

    // The unmapped group is counted each time, and named once, with the
    // key that maps it.
    let st = c
        .expect("pk/status", T, |v| v["unmapped_kinds"].as_u64() >= Some(2))
        .await;
    assert_eq!(
        st["unmapped_kinds"], 2,
        "No.2 DG maps by the manuals' aliases: {st}"
    );
    let log = d.log();
    let named = log
        .lines()
        .filter(|l| l.contains("\"ENGINE ROOM\"") && l.contains("knowledge.kind_aliases"))
        .count();
    assert_eq!(named, 1, "named once with its key:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_config_maps_is_that_class_and_not_counted() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let map = "[knowledge.kind_aliases]\n\"Aux Set 3\" = \"generator\"\n";
    let cfg = config(dir.path(), broker.port, "pka", "", map);
    let mut c = Client::connect(broker.port, "pka", "pka-client").await;
    let d = Daemon::launch(&cfg).within(T).ready();

    let dg = c
        .ask(
            "pka",
            "pka-1",
            "G3",
            "AL-77",
            "major",
            "AUX SET 3",
            "L.O. PRESS LOW 2.0 BAR",
        )
        .await;
    assert_eq!(dg["coverage"], "covered", "{dg}");
    assert!(
        cites(&dg, "DG-LO-PRES-LO"),
        "the class the config names: {dg}"
    );
    let st = c
        .expect("pka/status", T, |v| v["diagnosed"].as_u64() >= Some(1))
        .await;
    assert_eq!(st["unmapped_kinds"], 0, "{st}");
    assert!(!d.log().contains("knowledge.kind_aliases"), "{}", d.log());
}

#[test]
fn an_alias_to_a_class_no_manual_has_exits_78_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let map = "[knowledge.kind_aliases]\n\"AUX 3\" = \"gyro\"\n";
    let cfg = config(dir.path(), 1, "pkx", "", map);
    for cmd in ["run", "check-config"] {
        let out = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
            .args([cmd, "--config"])
            .arg(&cfg)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd}: {err}");
        assert!(
            err.contains("config key knowledge.kind_aliases") && err.contains("gyro"),
            "{cmd}: {err}"
        );
    }
}
