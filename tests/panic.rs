//! A panic never leaves the daemon half alive. A panic injected (cargo feature
//! `fault-injection`) in a worker, in the hub or in the MQTT poller must end
//! the process with SIGABRT and a log line naming the panic; the daemon started
//! again, as systemd would, answers the alarm the dead one never acknowledged.

mod common;

use std::os::unix::process::ExitStatusExt;
use std::time::{Duration, Instant};

use common::*;

/// Time for a loaded daemon to notice the alarm and die. Generous on a
/// shared 2-core machine; a half-alive daemon never dies at all.
const DIE_WITHIN: Duration = Duration::from_secs(15);

async fn a_panic_aborts_and_the_restarted_daemon_answers(place: &str) {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let prefix = format!("panic-{place}");
    let cfg = config(dir.path(), broker.port, &prefix, "", "");
    let mut c = Client::connect(broker.port, &prefix, &format!("{prefix}-client")).await;
    let fault = format!("panic-{place}");
    let mut d = Daemon::launch(&cfg)
        .fault(&fault)
        .within(Duration::from_secs(90))
        .ready();

    let id = format!("{place}-1");
    let body = alarm(
        &id,
        "ME1",
        "ME-LO-PRES-LO",
        "critical",
        "main_engine_lube_oil",
        "ME1 lube oil inlet pressure low",
    );
    let sent = Instant::now();
    c.publish(&format!("{prefix}/alarm/ME1"), body).await;
    let status = d.wait_exit(DIE_WITHIN).unwrap_or_else(|| {
        panic!(
            "the daemon still runs {DIE_WITHIN:?} after the injected {fault} (half alive):\n{}",
            d.log()
        )
    });
    let died_after = sent.elapsed();
    // The stderr reader may still be draining the last lines.
    let said = d.wait_log("aborting so that systemd restarts", Duration::from_secs(2));
    let log = d.log();
    assert_eq!(
        status.signal(),
        Some(nix::sys::signal::Signal::SIGABRT as i32),
        "the daemon ended with {status:?}, not an abort:\n{log}"
    );
    assert!(said, "no panic report in the log:\n{log}");
    assert!(
        log.contains(&format!("fault injection: {fault}")),
        "the panic report does not carry the panic's message:\n{log}"
    );
    eprintln!("{fault}: the daemon aborted {died_after:?} after the alarm was published");

    // What systemd does next: the same unit, without the fault.
    let d = Daemon::start(&cfg, &[]);
    let t = Instant::now();
    let got = c
        .expect(
            &format!("{prefix}/diagnosis/ME1"),
            Duration::from_secs(120),
            |v| v["alarm_id"] == id.as_str(),
        )
        .await;
    assert_full_diagnosis_shape(&got);
    eprintln!(
        "{fault}: the restarted daemon answered {id} in {:?}",
        t.elapsed()
    );
    drop(d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_a_worker_aborts_and_its_alarm_is_answered_after_the_restart() {
    a_panic_aborts_and_the_restarted_daemon_answers("worker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_hub_aborts_and_its_alarm_is_answered_after_the_restart() {
    a_panic_aborts_and_the_restarted_daemon_answers("hub").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panic_in_the_poller_aborts_and_its_alarm_is_answered_after_the_restart() {
    a_panic_aborts_and_the_restarted_daemon_answers("poller").await;
}
