//! Events from a dead connection: rumqttc can hand back a PUBLISH it read
//! together with the connection's end after reporting the error, as if it
//! came on the next connection. Its ack handle must never be used there: on
//! the new connection that packet id names whatever the broker sent under it.
//! A proxy between the daemon and a real mosquitto writes a QoS 1 PUBLISH
//! and the FIN together, and checks every later PUBACK against what the
//! broker sent on that connection.

mod common;

use std::time::Duration;

use common::proxy::CutAfterPublish;
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_read_with_the_fin_is_answered_and_never_acked_on_the_next_connection() {
    let _serial = serial();
    let broker = Broker::start();
    let proxy = CutAfterPublish::start(broker.port, "alarm/CUT").await;
    let dir = tempfile::tempdir().unwrap();
    let p = "epoch";
    let cfg = config(dir.path(), proxy.port, p, "max_tokens = 48", "");
    let mut c = Client::connect(broker.port, p, "epoch-client").await;
    let d = Daemon::launch(&cfg).ready();
    let body = alarm("cut-1", "CUT1", "DG-REV-PWR", "major", "generator", "cut");
    c.publish(&format!("{p}/alarm/CUT1"), body).await;
    let v = c
        .expect(
            &format!("{p}/diagnosis/CUT1"),
            Duration::from_secs(90),
            |v| v["alarm_id"] == "cut-1",
        )
        .await;
    assert_ne!(v["mode"], "triage", "{v}");
    assert!(proxy.cut(), "the proxy never cut the connection");
    // Later alarms still flow, and every receipt is acknowledged.
    let body = alarm(
        "after-1",
        "ME1",
        "ME-JCW-TEMP-HI",
        "minor",
        "main_engine_cooling",
        "after",
    );
    c.publish(&format!("{p}/alarm/ME1"), body).await;
    c.expect(
        &format!("{p}/diagnosis/ME1"),
        Duration::from_secs(90),
        |v| v["alarm_id"] == "after-1",
    )
    .await;
    c.expect(&format!("{p}/status"), Duration::from_secs(30), |v| {
        v["awaiting_ack"] == 0
            && v["outbox_pending"] == 0
            && v["inbox_pending"].as_u64().unwrap_or(0) == 0
    })
    .await;
    assert!(
        d.log().contains("mqtt connection lost"),
        "the daemon never saw the cut: {}",
        d.log()
    );
    let stray = proxy.stray_acks();
    assert!(
        stray.is_empty(),
        "acks from a lost connection were sent on a later one: {stray:?}"
    );
}

/// A broker that breaks the protocol costs a reconnect, not the connection.
/// On a PUBLISH with an empty topic and a topic alias never set, rumqttc
/// reports an outgoing DISCONNECT (reason: protocol error) without sending
/// one; the poller once took it for the DISCONNECT of its own shutdown and
/// ended, and MQTT stayed dead until the systemd watchdog restarted the
/// daemon.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_publish_that_breaks_the_protocol_costs_a_reconnect_and_alarms_still_flow() {
    let _serial = serial();
    let broker = Broker::start();
    let proxy = common::proxy::Injector::start(broker.port).await;
    let dir = tempfile::tempdir().unwrap();
    let p = "alias";
    let cfg = config(dir.path(), proxy.port, p, "max_tokens = 48", "");
    let mut c = Client::connect(broker.port, p, "alias-client").await;
    let mut d = Daemon::launch(&cfg).ready();
    proxy.inject(&common::proxy::PUBLISH_WITH_UNKNOWN_ALIAS);
    assert!(
        d.wait_log("broke the MQTT protocol", Duration::from_secs(10)),
        "the daemon did not see the protocol error:\n{}",
        d.log()
    );
    let body = alarm(
        "alias-1",
        "ME1",
        "ME-JCW-TEMP-HI",
        "minor",
        "main_engine_cooling",
        "after",
    );
    c.publish(&format!("{p}/alarm/ME1"), body).await;
    c.expect(
        &format!("{p}/diagnosis/ME1"),
        Duration::from_secs(90),
        |v| v["alarm_id"] == "alias-1",
    )
    .await;
    d.assert_alive();
}
