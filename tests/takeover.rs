//! Two clients with one MQTT client id: the daemon says plainly that its
//! session was taken over, with the id, and waits longer each time (two
//! daemons with the default id threw each other off about 3 times
//! a second, forever, with nothing to hint at the cause).

mod common;

use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(90);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_taken_over_by_the_same_client_id_is_said_with_the_id_and_backs_off() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "to", "", "");
    let d = Daemon::launch(&cfg).within(T).ready();
    // A second client under the daemon's own id (config() names it
    // tidewatch-test-{prefix}); its event loop reconnects at once whenever
    // the daemon takes the session back.
    let _twin = Client::connect(broker.port, "to", "tidewatch-test-to").await;
    assert!(
        d.wait_log(
            "give each its own [mqtt] client_id",
            Duration::from_secs(30)
        ),
        "{}",
        d.log()
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let log = d.log();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("give each its own [mqtt] client_id"))
        .collect();
    assert!(
        lines[0].contains("client id \"tidewatch-test-to\"")
            && lines[0].contains(&format!("127.0.0.1:{}", broker.port)),
        "{log}"
    );
    // A log redirected to a file carried colour escapes.
    assert!(
        !log.contains('\u{1b}'),
        "stderr is a pipe here: no ANSI colour\n{log}"
    );
    let delays: Vec<u64> = lines
        .iter()
        .filter_map(|l| {
            let v = l.split("retry_in_ms=").nth(1)?;
            v.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
        })
        .collect();
    assert!(delays.len() >= 2, "{log}");
    assert!(
        delays.last() > delays.first(),
        "the delay grows: {delays:?}\n{log}"
    );
}
