//! Alarms on a topic one level off `{prefix}/alarm/{equipment}` get an error
//! report naming the form, and rejection reports name the alarm's id when
//! it can be read: with a real
//! mosquitto, the test model and the daemon binary.

mod common;

use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_on_a_wrong_topic_gets_an_error_report_naming_the_expected_form() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "wt", "", "");
    let mut c = Client::connect(broker.port, "wt", "wt-client").await;
    let _d = Daemon::launch(&cfg).within(T).ready();

    for topic in ["wt/alarm/vessel1/ME1", "wt/alarm"] {
        let a = alarm("deep-1", "ME1", "ME-JCW-TEMP-HI", "major", "", "hot");
        c.publish(topic, a).await;
        let e = c.expect("wt/error", T, |e| e["topic"] == topic).await;
        assert_eq!(
            e["reason"],
            format!("topic \"{topic}\" is not wt/alarm/{{equipment}}: one topic level after alarm/, the equipment id"),
            "{e}"
        );
        assert_eq!(e["alarm_id"], "deep-1", "{e}");
    }

    // A size rejection names the alarm too, and one without a readable id
    // has no alarm_id.
    let huge = alarm("big-1", "ME1", "X", "minor", "", &"x".repeat(20_000));
    c.publish("wt/alarm/ME1", huge).await;
    let e = c.expect("wt/error", T, |_| true).await;
    assert_eq!(e["alarm_id"], "big-1", "{e}");
    c.publish("wt/alarm/ME1", "not json").await;
    let e = c.expect("wt/error", T, |_| true).await;
    assert!(e.get("alarm_id").is_none(), "{e}");

    // The daemon goes on: a good alarm is still answered.
    let ok = c
        .ask(
            "wt",
            "ok-1",
            "ME1",
            "ME-JCW-TEMP-HI",
            "major",
            "main_engine_cooling",
            "jacket water high",
        )
        .await;
    assert_eq!(ok["alarm_id"], "ok-1");
}

/// A numeric severity is refused until the plant declares its scale, with
/// an error naming the setting, and then graded on it: an OPC UA gateway's
/// 900 is critical (a priority scale's 900 would be no alarm at all).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_numeric_severity_is_refused_until_its_scale_is_declared_and_then_graded() {
    let _serial = common::serial();
    let broker = Broker::start();
    let numbered = |id: &str| {
        serde_json::json!({"id": id, "ts": "2026-11-30T04:12:00Z", "equipment": "ME1",
            "code": "ME-JCW-TEMP-HI", "severity": 900, "kind": "main_engine_cooling",
            "message": "jacket water high"})
        .to_string()
    };

    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "ns", "", "");
    let mut c = Client::connect(broker.port, "ns", "ns-client").await;
    let d = Daemon::launch(&cfg).within(T).ready();
    c.publish("ns/alarm/ME1", numbered("num-1")).await;
    let e = c.expect("ns/error", T, |_| true).await;
    assert_eq!(e["alarm_id"], "num-1", "{e}");
    let reason = e["reason"].as_str().unwrap();
    assert!(reason.contains("field severity is a number, 900"), "{e}");
    assert!(reason.contains("mqtt.numeric_severity"), "{e}");
    drop(d);

    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "ns", "", "");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace(
            "keep_alive_s = 5\n",
            "keep_alive_s = 5\nnumeric_severity = \"opc-ua\"\n",
        ),
    )
    .unwrap();
    let _d = Daemon::launch(&cfg).within(T).ready();
    c.publish("ns/alarm/ME1", numbered("num-2")).await;
    let d = c
        .expect("ns/diagnosis/ME1", T, |d| d["alarm_id"] == "num-2")
        .await;
    assert_eq!(d["severity"], "critical", "{d}");
}
