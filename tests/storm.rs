//! Alarm storms larger than the broker's queue, on a broker with mosquitto's
//! stock limits (20 messages in flight to a subscriber, 1000 queued behind
//! them, silent drops past that): every alarm is answered, none is dropped
//! at the broker, and a critical alarm published at the storm's end is
//! answered within 30 s. This holds because the daemon journals alarms in
//! its inbox and acknowledges them at disk speed, so the broker's window
//! keeps moving while the model works. Real mosquitto, the real test model.

mod common;

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use common::*;

struct Outcome {
    answered: HashMap<String, serde_json::Value>,
    /// From the critical alarm's publish to its diagnosis.
    critical_after: Option<Duration>,
    published_in: Duration,
    all_in: Duration,
}

/// Publishes `warnings` warnings on distinct equipment, then one critical
/// alarm, at `per_s` alarms a second (None: as fast as a QoS 1 publisher
/// goes), and collects every diagnosis.
async fn storm(
    prefix: &str,
    warnings: usize,
    per_s: Option<u64>,
    extra_llm: &str,
    extra: &str,
    fault: Option<&str>,
) -> (Outcome, Daemon) {
    let broker = Broker::start_stock();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, prefix, extra_llm, extra);
    let mut sub = Client::connect(broker.port, prefix, &format!("{prefix}-sub")).await;
    let publisher = Client::connect(
        broker.port,
        &format!("{prefix}-unused"),
        &format!("{prefix}-pub"),
    )
    .await;
    let launch = Daemon::launch(&cfg);
    let d = match fault {
        Some(f) => launch.fault(f),
        None => launch,
    }
    .ready();
    let mut want: HashSet<String> = HashSet::new();
    let t0 = Instant::now();
    for i in 0..warnings {
        let id = format!("w-{i}");
        let eq = format!("PUMP-{i}");
        let body = alarm(
            &id,
            &eq,
            "ME-JCW-TEMP-HI",
            "warning",
            "main_engine_cooling",
            "storm",
        );
        publisher
            .publish(&format!("{prefix}/alarm/{eq}"), body)
            .await;
        want.insert(id);
        if let Some(r) = per_s {
            let due = Duration::from_micros(i as u64 * 1_000_000 / r);
            // One reading of the clock: two could straddle `due`.
            tokio::time::sleep(due.saturating_sub(t0.elapsed())).await;
        }
    }
    let critical = alarm(
        "critical-1",
        "ME1",
        "MELO-PRES-LO",
        "critical",
        "main_engine_lube_oil",
        "lube oil pressure low at the end of a storm",
    );
    publisher
        .publish(&format!("{prefix}/alarm/ME1"), critical)
        .await;
    let t_critical = Instant::now();
    let published_in = t0.elapsed();
    want.insert("critical-1".into());

    let mut answered = HashMap::new();
    let mut critical_after = None;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(420);
    let dtopic = format!("{prefix}/diagnosis/");
    // A run that stopped answering ends after a minute of silence rather
    // than at the deadline: what it answered by then is the finding.
    let quiet = Duration::from_secs(60);
    let mut last_answer = tokio::time::Instant::now();
    while answered.len() < want.len() {
        let until = deadline.min(last_answer + quiet);
        match tokio::time::timeout_at(until, sub.rx.recv()).await {
            Ok(Some((t, p))) if t.starts_with(&dtopic) => {
                let v: serde_json::Value = serde_json::from_slice(&p).unwrap_or_default();
                let Some(id) = v["alarm_id"].as_str().filter(|i| want.contains(*i)) else {
                    continue;
                };
                if id == "critical-1" && critical_after.is_none() {
                    critical_after = Some(t_critical.elapsed());
                }
                answered.insert(id.to_string(), v);
                last_answer = tokio::time::Instant::now();
            }
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    let all_in = t0.elapsed();
    drop(broker);
    (
        Outcome {
            answered,
            critical_after,
            published_in,
            all_in,
        },
        d,
    )
}

fn report(name: &str, o: &Outcome, total: usize) {
    let count = |m: &str| o.answered.values().filter(|v| v["mode"] == m).count();
    eprintln!(
        "{name}: published {total} in {:?}; answered {} of {total} in {:?} (full {}, passages {}, triage {}, degraded {}); critical answered {:?} after its publish",
        o.published_in,
        o.answered.len(),
        o.all_in,
        count("full"),
        count("passages"),
        count("triage"),
        count("degraded"),
        o.critical_after,
    );
}

fn assert_storm_held(o: &Outcome, total: usize, d: &mut Daemon) {
    let missing: Vec<String> = (0..total - 1)
        .map(|i| format!("w-{i}"))
        .filter(|id| !o.answered.contains_key(id))
        .collect();
    assert!(
        o.answered.len() == total,
        "{} of {total} alarms answered ({} warnings never answered, dropped at the broker?, first {:?}); critical answered: {}",
        o.answered.len(),
        missing.len(),
        &missing[..missing.len().min(5)],
        o.answered.contains_key("critical-1")
    );
    let after = o
        .critical_after
        .expect("the critical alarm was never answered");
    assert!(
        after <= Duration::from_secs(30),
        "the critical alarm was answered {after:?} after its publish, over 30 s"
    );
    let c = &o.answered["critical-1"];
    assert_ne!(
        c["mode"], "triage",
        "the critical alarm must go to the model, not be triaged: {c}"
    );
    d.assert_alive();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_critical_alarm_behind_1200_warnings_is_answered_within_30_s_and_none_is_dropped() {
    let _serial = serial();
    let (o, mut d) = storm("storm1k", 1200, None, "", "", None).await;
    report("storm of 1,200 + 1", &o, 1201);
    assert_storm_held(&o, 1201, &mut d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hub_that_stops_for_5_s_under_a_burst_loses_none_of_1200_alarms() {
    let _serial = serial();
    // A slow fsync or a starved core stops the hub for a while. A stock
    // broker holds 20 unacknowledged alarms and 1,000 queued behind them and
    // drops the rest without a word; a burst of 1,200 inside the pause then
    // lost the last ~180 (seen in the 10,000 storm after a 1.2 s pause).
    let (o, mut d) = storm("stall", 1200, None, "", "", Some("stall-intake:5000")).await;
    report("1,200 + 1 while the hub stops for 5 s", &o, 1201);
    assert!(
        d.log().contains("stopped for 5000 ms"),
        "the fault never stopped the hub, so this test does not test it"
    );
    assert_storm_held(&o, 1201, &mut d);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_warnings_past_the_inbox_budget_are_all_answered_and_none_dropped() {
    let _serial = serial();
    // The least inbox that holds one alarm of the default 8 KiB
    // (8192 + 512 bytes) holds about 30 alarms, fewer than the queue's 32: most of the
    // storm finds the inbox full and is triaged at once (acknowledged when
    // that answer is on disk), and the critical alarm still goes to the model.
    // Published at 500 a second for 20 s: no subscriber survives a
    // publisher faster than its intake for long enough to overflow the
    // broker's queue (docs/design.md, Delivery). A full inbox's intake
    // (each alarm triaged and written) shares the two cores with the model
    // and, in CI, with a cross build and a debootstrap: at 1,000/s one CI
    // run lost the storm's last 416 warnings at the broker while the
    // publisher itself slowed to 780/s.
    let (o, mut d) = storm(
        "storm10k",
        10_000,
        Some(500),
        "max_tokens = 48",
        "[inbox]\nmax_bytes = 8704\n",
        None,
    )
    .await;
    report("storm of 10,000 + 1", &o, 10_001);
    assert_storm_held(&o, 10_001, &mut d);
    assert!(
        d.log().contains("inbox cannot take the alarm"),
        "the inbox budget was never reached, so this test does not test it"
    );
}
