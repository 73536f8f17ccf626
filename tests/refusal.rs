//! A broker that says no. Under MQTT 3.1.1 mosquitto answers a publish its ACL
//! denies with an ordinary PUBACK, so a diagnosis topic the ACL does not grant
//! swallowed every diagnosis while the alarms were acked. And an alarm larger
//! than the daemon reads broke the connection on every redelivery, forever,
//! with nothing after it answered.

mod common;

use std::time::Duration;

use common::*;

/// Everyone (the test client and the daemon connect anonymously) may read
/// everything and write alarms, status and errors, but not diagnoses.
const ACL_NO_DIAGNOSES: &str = "topic read deny/#\n\
     topic write deny/alarm/#\n\
     topic write deny/status\n\
     topic write deny/error\n";

/// Waits for the next status the daemon publishes (not the retained one).
async fn next_status(
    c: &mut Client,
    prefix: &str,
    seen: &mut Vec<(String, Vec<u8>)>,
) -> serde_json::Value {
    seen.extend(c.drain());
    c.expect(&format!("{prefix}/status"), Duration::from_secs(20), |v| {
        v["state"] == "online"
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_diagnosis_the_acl_refuses_stays_in_the_outbox_until_the_acl_lets_it_through() {
    let _serial = serial();
    let p = "deny";
    let bdir = tempfile::tempdir().unwrap();
    let acl = bdir.path().join("acl");
    std::fs::write(&acl, ACL_NO_DIAGNOSES).unwrap();
    std::fs::set_permissions(&acl, std::os::unix::fs::PermissionsExt::from_mode(0o644)).unwrap();
    let conf = format!(
        "acl_file {}\nlog_dest file {}\nlog_type all\n",
        acl.display(),
        bdir.path().join("mosquitto.log").display()
    );
    let broker = Broker::start_with(free_port(), bdir, &conf);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, p, "max_tokens = 48", "");
    let mut c = Client::connect(broker.port, p, "deny-operator").await;
    let d = Daemon::launch(&cfg).ready();
    let body = alarm(
        "deny-1",
        "ME1",
        "ME-JCW-TEMP-HI",
        "minor",
        "main_engine_cooling",
        "refused",
    );
    c.publish(&format!("{p}/alarm/ME1"), body).await;
    assert!(
        d.wait_log("diagnosed", Duration::from_secs(90)),
        "{}",
        d.log()
    );
    // Time for the broker's answer to the diagnosis to come back.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut seen = Vec::new();
    let status = next_status(&mut c, p, &mut seen).await;
    assert_eq!(
        status["outbox_pending"], 1,
        "the refused diagnosis must stay in the outbox: {status}"
    );
    assert_eq!(status["denied"], 1, "status must count it: {status}");
    let line = d
        .log()
        .lines()
        .find(|l| l.contains("refused a diagnosis"))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no error line for the refused diagnosis:\n{}", d.log()));
    assert!(line.contains("ERROR"), "{line}");
    assert!(line.contains("deny/diagnosis/ME1"), "{line}");
    assert!(line.contains("ACL"), "{line}");
    let blog = broker.log();
    assert!(
        blog.contains("Denied PUBLISH from tidewatch-test-deny")
            && blog.contains("'deny/diagnosis/ME1'"),
        "the broker did not deny the diagnosis:\n{blog}"
    );
    // The alarm itself is durable in the inbox, so it was acknowledged.
    assert!(
        blog.contains("Received PUBACK from tidewatch-test-deny"),
        "the alarm was never acknowledged:\n{blog}"
    );
    assert!(
        !seen.iter().any(|(t, _)| t == &format!("{p}/diagnosis/ME1")),
        "a denied diagnosis reached a subscriber"
    );

    // The operator fixes the ACL and reloads the broker (no reconnect).
    std::fs::write(
        &acl,
        format!("{ACL_NO_DIAGNOSES}topic write {p}/diagnosis/#\n"),
    )
    .unwrap();
    broker.reload();
    c.expect(
        &format!("{p}/diagnosis/ME1"),
        Duration::from_secs(120),
        |v| v["alarm_id"] == "deny-1",
    )
    .await;
    c.expect(&format!("{p}/status"), Duration::from_secs(20), |v| {
        v["denied"] == 0 && v["outbox_pending"] == 0
    })
    .await;
    assert!(!d.log().contains("mqtt connection lost"), "{}", d.log());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_too_large_to_read_is_left_at_the_broker_and_later_alarms_are_answered() {
    let _serial = serial();
    let p = "huge";
    // No message_size_limit: the broker takes the alarm and tries to pass it on.
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, p, "max_tokens = 48", "");
    // Subscribed to diagnoses only: a test client would choke on the big
    // alarm itself and, on its clean session, lose its subscription.
    let mut c = Client::connect(broker.port, &format!("{p}/diagnosis"), "huge-operator").await;
    let d = Daemon::launch(&cfg).ready();
    let big = dir.path().join("big");
    std::fs::write(&big, vec![b'x'; tidewatch::daemon::MAX_INBOUND + (1 << 20)]).unwrap();
    let out = std::process::Command::new(require_tool("mosquitto_pub", "mosquitto-clients"))
        .args(["-h", "127.0.0.1", "-p", &broker.port.to_string(), "-q", "1"])
        .args(["-t", &format!("{p}/alarm/BIG1"), "-f"])
        .arg(&big)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let body = alarm(
        "after-big",
        "ME1",
        "ME-JCW-TEMP-HI",
        "minor",
        "main_engine_cooling",
        "after",
    );
    c.publish(&format!("{p}/alarm/ME1"), body).await;
    let answered = tokio::time::timeout(
        Duration::from_secs(90),
        c.expect(
            &format!("{p}/diagnosis/ME1"),
            Duration::from_secs(100),
            |v| v["alarm_id"] == "after-big",
        ),
    )
    .await;
    // Time for a redelivery loop to show itself.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let lost = d.log().matches("mqtt connection lost").count();
    assert!(
        answered.is_ok(),
        "the alarm after the oversized one was not answered in 90 s; the connection broke {lost} times"
    );
    assert_eq!(lost, 0, "the connection broke {lost} times:\n{}", d.log());
}
