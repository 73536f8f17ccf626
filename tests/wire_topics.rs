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
