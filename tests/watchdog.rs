//! Slots, the watchdog and systemd notifications: a stalled slot is cancelled
//! and restarted and a wedged one replaced, with the alarm still answered;
//! watchdog pings stop once a slot is lost; READY, STATUS and STOPPING arrive
//! in order; generation stops at its token budget; SIGTERM joins the slot
//! threads, or gives up on a wedged one after the hard timeout. With the real
//! model, a real broker and injected faults (cargo feature `fault-injection`).

mod common;

use std::time::{Duration, Instant};

use common::*;

const T: Duration = Duration::from_secs(90);

fn fast_watchdog(stall: f64, deadline: f64, hard: f64) -> String {
    format!(
        "[watchdog]\nstall_timeout_s = {stall}\ndeadline_s = {deadline}\nhard_timeout_s = {hard}\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn injected_stall_is_cancelled_restarted_and_still_answered() {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let deadline = 40.0;
    let cfg = config(
        dir.path(),
        broker.port,
        "stall",
        "",
        &fast_watchdog(4.0, deadline, 5.0),
    );
    let mut c = Client::connect(broker.port, "stall", "stall-client").await;
    let d = Daemon::launch(&cfg)
        .fault("stall-after:5")
        .within(T)
        .ready();

    let sent = Instant::now();
    let first = c
        .ask(
            "stall",
            "s-1",
            "DG1",
            "DG-REV-PWR",
            "critical",
            "generator",
            "DG1 reverse power trip",
        )
        .await;
    let took = sent.elapsed();
    assert!(
        took < Duration::from_secs_f64(deadline + 5.0),
        "answer took {took:?}"
    );
    assert_full_diagnosis_shape(&first);
    assert!(d.log().contains("slot hung"), "{}", d.log());

    let second = c
        .ask(
            "stall",
            "s-2",
            "DG1",
            "DG-OVERSPEED",
            "major",
            "generator",
            "DG1 overspeed trip",
        )
        .await;
    assert_model_answered(&second);
    let st = c
        .expect("stall/status", Duration::from_secs(30), |v| {
            v["diagnosed"].as_u64() >= Some(2)
        })
        .await;
    assert_eq!(st["slot_restarts"], 1, "{st}");
    assert_eq!(st["slots_lost"], 0, "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_stall_stops_watchdog_pings_but_the_alarm_is_answered() {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        broker.port,
        "wedge",
        "",
        &fast_watchdog(2.0, 20.0, 3.0),
    );
    let mut n = notify_socket(dir.path());
    let mut c = Client::connect(broker.port, "wedge", "wedge-client").await;
    let d = Daemon::launch(&cfg)
        .fault("native-stall")
        .notify(&mut n)
        .env("WATCHDOG_USEC", "1000000")
        .within(T)
        .ready();
    n.drain(Duration::from_secs(2), |_| false);
    let pings_before = n.got.iter().filter(|m| *m == "WATCHDOG=1").count();
    assert!(
        pings_before >= 2,
        "healthy daemon must ping at half WATCHDOG_USEC: {:?}",
        n.got
    );

    c.publish(
        "wedge/alarm/ME1",
        alarm(
            "w-1",
            "ME1",
            "ME-JCW-TEMP-HI",
            "major",
            "main_engine_cooling",
            "JCW temp high",
        ),
    )
    .await;
    // The wedged slot is replaced and the alarm still gets an answer...
    let dgn = c
        .expect("wedge/diagnosis/ME1", T, |v| v["alarm_id"] == "w-1")
        .await;
    assert_full_diagnosis_shape(&dgn);
    assert!(d.log().contains("replacing it"), "{}", d.log());
    // ...but the process is no longer trusted: the pings stop, so systemd restarts it.
    n.drain(Duration::from_millis(300), |_| false);
    let from = n.got.len();
    n.drain(Duration::from_secs(3), |_| false);
    let quiet = &n.got[from..];
    assert!(
        !quiet.iter().any(|m| m == "WATCHDOG=1"),
        "WATCHDOG=1 must stop once a slot is lost: {quiet:?}"
    );
    let st = c
        .expect("wedge/status", Duration::from_secs(30), |v| {
            v["slots_lost"].as_u64() >= Some(1)
        })
        .await;
    assert_eq!(st["slots_lost"], 1, "{st}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notifications_arrive_ready_then_status_then_stopping() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "notify", "", "");
    let mut n = notify_socket(dir.path());
    let mut c = Client::connect(broker.port, "notify", "notify-client").await;
    let mut d = Daemon::launch(&cfg).notify(&mut n).within(T).ready();
    // READY means subscribed: an alarm published now must be answered.
    c.publish(
        "notify/alarm/AIS",
        alarm("n-1", "AIS", "AIS-GPS-LOST", "minor", "ais", "AIS lost GPS"),
    )
    .await;
    c.expect("notify/diagnosis/AIS", T, |v| v["alarm_id"] == "n-1")
        .await;
    // Status goes out every 10 s on a 1 s tick: 12 s holds one that follows
    // the diagnosis's PUBACK.
    n.drain(Duration::from_secs(12), |_| false);
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d
        .wait_exit(Duration::from_secs(20))
        .expect("daemon did not exit on SIGTERM");
    assert!(status.success(), "{status:?}\n{}", d.log());
    n.drain(Duration::from_millis(300), |_| false);
    let got = &n.got;
    let pos = |pred: &dyn Fn(&str) -> bool| got.iter().position(|m| pred(m));
    let ready = pos(&|m| m == "READY=1").unwrap();
    let status_after = got.iter().skip(ready).position(|m| {
        // One answer, delivered: nothing waits for a PUBACK or in the outbox.
        m.starts_with("STATUS=")
            && m.contains("diagnosed 1 (passages ")
            && m.ends_with("unacked 0 outbox 0 denied 0")
    });
    let stopping = pos(&|m| m == "STOPPING=1").unwrap_or_else(|| panic!("no STOPPING=1: {got:?}"));
    let status_after = status_after
        .map(|i| i + ready)
        .unwrap_or_else(|| panic!("no STATUS after READY: {got:?}"));
    assert!(
        ready < status_after && status_after < stopping,
        "order: {got:?}"
    );
    // The daemon's own offline status (it has a `ts`), not the broker's last
    // will (`{"state":"offline"}`), which a clean DISCONNECT cancels.
    let mut offline = Vec::new();
    let quiet_until = tokio::time::Instant::now() + Duration::from_secs(3);
    while let Ok(Some((t, p))) = tokio::time::timeout_at(quiet_until, c.rx.recv()).await {
        if t == "notify/status" {
            let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
            if v["state"] == "offline" {
                offline.push(v);
            }
        }
    }
    assert!(
        offline.len() == 1 && offline[0]["ts"].is_string(),
        "want exactly one offline status, the daemon's own with a ts, and no last will: {offline:?}\n{}",
        d.log()
    );
    // What a client connecting later is told: the retained status is still
    // the daemon's own.
    let mut later = Client::connect(broker.port, "notify", "notify-later").await;
    let retained = later
        .expect("notify/status", Duration::from_secs(10), |_| true)
        .await;
    assert!(
        retained["state"] == "offline" && retained["ts"].is_string(),
        "retained status after a clean stop: {retained}"
    );
}

#[test]
fn runaway_generation_is_cut_off_at_its_budget() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "budget", "max_tokens = 16", "");
    let d = diagnose_cli(
        dir.path(),
        &cfg,
        &alarm(
            "b-1",
            "ME1",
            "ME-JCW-TEMP-HI",
            "major",
            "main_engine_cooling",
            "JCW temp high",
        ),
    );
    assert_full_diagnosis_shape(&d);
    assert_model_answered(&d);
    let n = d["timings"]["generated_tokens"].as_u64().unwrap();
    assert!(
        (1..=16).contains(&n),
        "generated {n} tokens with a budget of 16: {d}"
    );
}

/// After a slot restart, a later alarm for the same equipment and code (a
/// new id) must get its own answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alarm_after_a_slot_restart_with_the_same_equipment_and_code_is_answered() {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        broker.port,
        "again",
        "",
        &fast_watchdog(3.0, 30.0, 5.0),
    );
    let mut c = Client::connect(broker.port, "again", "again-client").await;
    let d = Daemon::launch(&cfg)
        .fault("stall-after:4")
        .within(T)
        .ready();
    let first = c
        .ask(
            "again",
            "r-1",
            "DG1",
            "DG-REV-PWR",
            "critical",
            "generator",
            "DG1 reverse power trip",
        )
        .await;
    assert_full_diagnosis_shape(&first);
    assert!(d.log().contains("slot hung"), "{}", d.log());
    c.publish(
        "again/alarm/DG1",
        alarm(
            "r-2",
            "DG1",
            "DG-REV-PWR",
            "critical",
            "generator",
            "DG1 reverse power trip again",
        ),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    loop {
        match tokio::time::timeout_at(deadline, c.rx.recv()).await {
            Ok(Some((t, p))) if t == "again/diagnosis/DG1" => {
                let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
                if v["alarm_id"] == "r-2" {
                    assert_full_diagnosis_shape(&v);
                    break;
                }
            }
            Ok(Some(_)) => {}
            _ => panic!(
                "the second DG1 alarm got no answer within 40 s\n{}",
                d.log()
            ),
        }
    }
}

/// SIGTERM during a decode cancels the slot and joins its thread before the
/// process exits (it once exited with the thread still inside llama_decode,
/// racing llama.cpp's teardown); the cancelled alarm stays unacknowledged, so
/// the next start answers it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_mid_generation_cancels_and_joins_the_slot_thread_before_exit() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "term", "max_tokens = 400", "");
    let mut c = Client::connect(broker.port, "term", "term-client").await;
    let mut d = Daemon::launch(&cfg).within(T).ready();
    c.publish(
        "term/alarm/ME1",
        alarm(
            "t-1",
            "ME1",
            "ME-JCW-TEMP-HI",
            "major",
            "main_engine_cooling",
            "JCW outlet temp high",
        ),
    )
    .await;
    assert!(d.wait_log("diagnosing", T), "{}", d.log());
    std::thread::sleep(Duration::from_millis(400));
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d
        .wait_exit(Duration::from_secs(20))
        .expect("daemon did not exit on SIGTERM");
    let log = d.log();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        !log.contains("diagnosed"),
        "the generation finished before SIGTERM; nothing was cancelled:\n{log}"
    );
    assert!(
        log.contains("slot stopped"),
        "slot thread not joined:\n{log}"
    );
    let stopped = log.find("slot stopped").unwrap();
    let shutting = log.find("shutting down").unwrap();
    assert!(shutting < stopped, "{log}");

    let d = Daemon::start(&cfg, &[]);
    let deadline = tokio::time::Instant::now() + T;
    let answer = loop {
        match tokio::time::timeout_at(deadline, c.rx.recv()).await {
            Ok(Some((t, p))) if t == "term/diagnosis/ME1" => {
                let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
                if v["alarm_id"] == "t-1" {
                    break v;
                }
            }
            Ok(Some(_)) => {}
            _ => panic!(
                "the alarm cancelled by SIGTERM got no answer within {T:?} of the restart\n{}",
                d.log()
            ),
        }
    };
    assert_full_diagnosis_shape(&answer);
}

/// A slot thread wedged in native code cannot be joined: shutdown waits
/// `hard_timeout_s` for it and no longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_with_a_wedged_slot_thread_exits_after_the_hard_timeout() {
    let _serial = common::serial();
    require_fault_injection();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        broker.port,
        "wedged",
        "",
        &fast_watchdog(30.0, 60.0, 3.0),
    );
    let mut d = Daemon::launch(&cfg)
        .fault("native-stall")
        .first_log("native-stall")
        .within(T)
        .ready();
    let t = Instant::now();
    d.signal(nix::sys::signal::Signal::SIGTERM);
    let status = d
        .wait_exit(Duration::from_secs(20))
        .expect("daemon did not exit on SIGTERM");
    let took = t.elapsed();
    let log = d.log();
    assert!(status.success(), "{status:?}\n{log}");
    assert!(
        log.contains("slot thread did not stop within watchdog.hard_timeout_s"),
        "{log}"
    );
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_secs(8),
        "exit took {took:?} with hard_timeout_s = 3\n{log}"
    );
}
