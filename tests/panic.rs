//! A panic never leaves the daemon half alive. A panic injected (cargo feature
//! `fault-injection`) in a worker, in the hub or in the MQTT poller must end
//! the process with SIGABRT and a log line naming the panic; the daemon started
//! again, as systemd would, answers the alarm the dead one never acknowledged.
//!
//! An abort counts against the alarm whose handling panicked, and only that
//! one: an alarm that panics every time ends as poison after two rounds,
//! and one on the model when the daemon is killed is not blamed at all.

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

/// A poison alarm: one whose handling panics every time. The daemon aborts
/// (crash-only), and systemd restarts it; the inbox replays the alarm, and
/// without a count of its aborts the daemon aborted again, for ever, and no
/// alarm behind the poison one was answered. Here the test restarts the
/// daemon as systemd would, with the fault still armed: the loop must end
/// after two aborts, the poison alarm answered from the manuals (mode
/// triage) with an error report naming it, and the alarms behind it
/// answered by the model. The count is written by the panicking thread as
/// the process ends: were it lost, or the alarm not on record as the
/// slot's job before its text is read, the loop would not end.
async fn a_poison_alarm_aborts_twice_then_is_triaged(place: &str) {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let p = format!("poison-{place}");
    let p = p.as_str();
    let cfg = config(dir.path(), broker.port, p, "max_tokens = 48", "");
    let mut c = Client::connect(broker.port, p, &format!("{p}-client")).await;
    let fault = format!("panic-{place}-on:POISON");
    let fault = fault.as_str();
    let mut d = Daemon::launch(&cfg)
        .fault(fault)
        .within(Duration::from_secs(90))
        .ready();
    // Critical, so it is taken first again after every restart; the two
    // warnings wait behind it.
    let poison = alarm(
        "poison-1",
        "ME1",
        "ME-LO-PRES-LO",
        "critical",
        "main_engine_lube_oil",
        "POISON lube oil pressure low",
    );
    c.publish(&format!("{p}/alarm/ME1"), poison).await;
    for (id, eq) in [("behind-1", "DG2"), ("behind-2", "DG3")] {
        let body = alarm(
            id,
            eq,
            "DG-REV-PWR",
            "warning",
            "generator",
            "reverse power trip",
        );
        c.publish(&format!("{p}/alarm/{eq}"), body).await;
    }
    let mut aborts = 0;
    let mut logs = String::new();
    // The time a restarted daemon takes to load, replay and reach the
    // poison alarm again; one that lives past it has stopped aborting.
    let round = Duration::from_secs(40);
    while let Some(status) = d.wait_exit(round) {
        let said = d.wait_log("aborting so that systemd restarts", Duration::from_secs(2));
        let log = d.log();
        assert!(
            said && status.signal() == Some(nix::sys::signal::Signal::SIGABRT as i32),
            "round {aborts}: the daemon ended with {status:?}, not the injected abort:\n{log}"
        );
        aborts += 1;
        logs.push_str(&format!("--- round {aborts}\n{log}"));
        assert!(
            aborts <= 2,
            "the daemon aborted on the poison alarm {aborts} times and goes on:\n{logs}"
        );
        d = Daemon::start(&cfg, &[("TIDEWATCH_FAULT", fault)]);
    }
    assert_eq!(
        aborts, 2,
        "the poison alarm must abort exactly twice:\n{logs}"
    );

    let want = ["poison-1", "behind-1", "behind-2"];
    let mut got = std::collections::HashMap::new();
    let mut report = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(180);
    while got.len() < want.len() || report.is_none() {
        let Ok(Some((t, body))) = tokio::time::timeout_at(deadline, c.rx.recv()).await else {
            break;
        };
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        if t.starts_with(&format!("{p}/diagnosis/")) {
            if let Some(id) = v["alarm_id"].as_str().filter(|i| want.contains(i)) {
                got.insert(id.to_string(), v);
            }
        } else if t == format!("{p}/error") && v["alarm_id"] == "poison-1" {
            report = Some(v);
        }
    }
    let log = d.log();
    for id in want {
        assert!(
            got.contains_key(id),
            "{id} never answered:\n{logs}--- now\n{log}"
        );
    }
    assert_eq!(got["poison-1"]["mode"], "triage", "{}", got["poison-1"]);
    assert_model_answered(&got["behind-1"]);
    assert_model_answered(&got["behind-2"]);
    let report = report.expect("no error report names the poison alarm");
    assert_eq!(report["topic"], format!("{p}/alarm/ME1"), "{report}");
    assert!(
        report["reason"].as_str().unwrap().contains("aborted"),
        "{report}"
    );
    let st = c
        .expect(&format!("{p}/status"), Duration::from_secs(30), |v| {
            v["poisoned"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(st["poisoned"], 1, "{st}");
    d.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_alarm_panicking_its_worker_aborts_twice_then_is_triaged() {
    a_poison_alarm_aborts_twice_then_is_triaged("worker").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_alarm_panicking_its_slot_thread_aborts_twice_then_is_triaged() {
    a_poison_alarm_aborts_twice_then_is_triaged("slot").await;
}

/// A kill (SIGKILL, the OOM killer, a power cut, systemd's watchdog) runs no
/// code of the daemon's and says nothing about the alarm on the model at
/// the time. Killed twice during the same alarm's generation, the daemon
/// answers it with the model on the third start and calls nothing poison;
/// counting every alarm handed to the model as an attempt answered it by
/// triage, as poison.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alarm_killed_twice_mid_generation_is_answered_by_the_model_and_not_poisoned() {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let p = "killed";
    let cfg = config(dir.path(), broker.port, p, "max_tokens = 48", "");
    let mut c = Client::connect(broker.port, p, "killed-client").await;
    // Slowed, so that the kill lands while the model reads and writes.
    let slow = [("TIDEWATCH_FAULT", "slow-decode:150")];
    let mut d = Daemon::launch(&cfg)
        .fault(slow[0].1)
        .within(Duration::from_secs(90))
        .ready();
    let id = "killed-1";
    let body = alarm(
        id,
        "ME1",
        "ME-LO-PRES-LO",
        "critical",
        "main_engine_lube_oil",
        "ME1 lube oil inlet pressure low",
    );
    c.publish(&format!("{p}/alarm/ME1"), body).await;
    let diagnosis_topic = format!("{p}/diagnosis/ME1");
    for round in 1..=2 {
        assert!(
            d.wait_log(&format!("alarm_id={id}"), Duration::from_secs(90))
                && d.wait_log("diagnosing", Duration::from_secs(1)),
            "round {round}: the alarm never reached a slot:\n{}",
            d.log()
        );
        tokio::time::sleep(Duration::from_secs(2)).await;
        d.signal(nix::sys::signal::Signal::SIGKILL);
        let status = d.wait_exit(Duration::from_secs(10));
        assert_eq!(
            status.and_then(|s| s.signal()),
            Some(nix::sys::signal::Signal::SIGKILL as i32),
            "round {round}: not killed:\n{}",
            d.log()
        );
        let early = c.drain().into_iter().any(|(t, _)| t == diagnosis_topic);
        assert!(
            !early,
            "round {round}: answered before the kill; the test proves nothing:\n{}",
            d.log()
        );
        let restarted = if round == 1 { &slow[..] } else { &[] };
        d = Daemon::start(&cfg, restarted);
    }
    let got = c
        .expect(&diagnosis_topic, Duration::from_secs(180), |v| {
            v["alarm_id"] == id
        })
        .await;
    assert_model_answered(&got);
    let st = c
        .expect(&format!("{p}/status"), Duration::from_secs(30), |v| {
            v["diagnosed"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(st["poisoned"], 0, "{st}");
    d.assert_alive();
}
