//! Pre-emption: a critical alarm that arrives while the only slot reads or
//! writes a warning's answer stops that work at its next model call, is
//! answered first, and the warning is answered after it; status counts the
//! stop and the journal names both alarms. Real mosquitto, real daemon, the
//! test model slowed down (`slow-decode`) so that one alarm takes seconds,
//! as on the board.

mod common;

use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(120);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_alarm_is_answered_before_the_warning_it_interrupts() {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    // No prompt cache: the warning must read its passages, slowly.
    let cfg = config(
        dir.path(),
        broker.port,
        "pre",
        // The model's summary keeps the warning busy long enough to be
        // caught while generating, whatever the machine.
        "prompt_cache_mib = 0\nprompt_cache_disk_mib = 0\nsummary = \"last\"",
        "",
    );
    let mut c = Client::connect(broker.port, "pre", "pre-client").await;
    let d = Daemon::launch(&cfg)
        .fault("slow-decode:150")
        .within(T)
        .ready();

    c.publish(
        "pre/alarm/DG2",
        alarm(
            "warn-1",
            "DG2",
            "DG-REV-PWR",
            "warning",
            "generator",
            "reverse power trip",
        ),
    )
    .await;
    assert!(
        d.wait_log("warn-1", Duration::from_secs(30)),
        "the warning was not started:\n{}",
        d.log()
    );
    tokio::time::sleep(Duration::from_millis(1500)).await;
    c.publish(
        "pre/alarm/ME1",
        alarm(
            "crit-1",
            "ME1",
            "ME-LO-PRES-LO",
            "critical",
            "main_engine_lube_oil",
            "main engine lube oil inlet pressure low",
        ),
    )
    .await;

    // In the order they arrive over MQTT.
    let mut order: Vec<String> = Vec::new();
    let mut stamps = Vec::new();
    let deadline = tokio::time::Instant::now() + T;
    while order.len() < 2 {
        match tokio::time::timeout_at(deadline, c.rx.recv()).await {
            Ok(Some((t, p))) if t.starts_with("pre/diagnosis/") => {
                let v: serde_json::Value = serde_json::from_slice(&p).unwrap();
                let id = v["alarm_id"].as_str().unwrap_or_default().to_string();
                if (id == "warn-1" || id == "crit-1") && !order.contains(&id) {
                    stamps.push(v["ts"].clone());
                    order.push(id);
                }
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    assert_eq!(
        order,
        vec!["crit-1".to_string(), "warn-1".to_string()],
        "the critical alarm must come first and the warning still be answered ({stamps:?}):\n{}",
        d.log()
    );
    let log = d.log();
    let line = log
        .lines()
        .find(|l| l.contains("pre-empting"))
        .unwrap_or_else(|| panic!("the journal does not say what was stopped:\n{log}"));
    assert!(
        line.contains("warn-1") && line.contains("crit-1"),
        "the journal line must name both alarms: {line}"
    );
    let st = c
        .expect("pre/status", T, |v| v["diagnosed"].as_u64() >= Some(2))
        .await;
    assert_eq!(st["preempted"], 1, "{st}");
}
