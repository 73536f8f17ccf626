//! Feedback on a diagnosis over MQTT: a watchkeeper's confirmation becomes a
//! site note, kept in state_dir and published on `{prefix}/notes/{equipment}`;
//! a bad feedback gets an error report naming the field; feedback sent
//! while the daemon is killed, or queued across a broker restart, is
//! handled when the daemon is back. Real mosquitto, the test model and the
//! daemon and CLI binaries.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const T: Duration = Duration::from_secs(120);
/// Short answers: the feedback path is under test, not the model.
const FAST: &str = "max_tokens = 48";

/// How many times the notes journal in `state_dir` holds note `id`.
fn kept(state_dir: &Path, id: &str) -> usize {
    let dir = state_dir.join("notes");
    let needle = format!("\"id\":{}", serde_json::to_string(id).unwrap());
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("no notes journal in {}: {e}", dir.display()))
        .flatten()
        .map(|e| {
            std::fs::read_to_string(e.path())
                .unwrap_or_default()
                .matches(&needle)
                .count()
        })
        .sum()
}

/// The place (from 1) and source of the first published cause with a
/// manual source.
fn sourced_cause(d: &serde_json::Value) -> (usize, String) {
    d["probable_causes"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .find_map(|(i, c)| c["source"].as_str().map(|s| (i + 1, s.to_string())))
        .unwrap_or_else(|| panic!("no published cause with a manual source: {d}"))
}

/// The diagnosis of a jacket water alarm `id` on ME1: its causes are the
/// manual's items, with sources. Waited for longer than `Client::ask` does,
/// as the first one computes the prompt's prefix on a busy machine.
async fn diagnosed(c: &mut Client, prefix: &str, id: &str) -> serde_json::Value {
    let body = alarm(
        id,
        "ME1",
        "ME-JCW-TEMP-HI",
        "major",
        "main_engine_cooling",
        "jacket water outlet temperature high",
    );
    c.publish(&format!("{prefix}/alarm/ME1"), body).await;
    let topic = format!("{prefix}/diagnosis/ME1");
    c.expect(&topic, Duration::from_secs(300), |v| v["alarm_id"] == id)
        .await
}

fn feedback(alarm_id: &str, cause: serde_json::Value, by: &str, ts: &str) -> String {
    serde_json::json!({
        "alarm_id": alarm_id, "verdict": "confirmed", "cause": cause, "by": by, "ts": ts,
    })
    .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmation_becomes_a_kept_and_published_site_note_and_each_bad_feedback_is_refused_naming_its_field(
) {
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "fb", FAST, "");
    let mut c = Client::connect(broker.port, "fb", "fb-client").await;
    let d = Daemon::launch(&cfg).within(T).ready();
    let diag = diagnosed(&mut c, "fb", "fb-1").await;
    let (n, source) = sourced_cause(&diag);

    // At the console: the Nth cause as the operator sees it listed.
    let c2 = cfg.clone();
    let (ok, out, err) = tokio::task::spawn_blocking(move || {
        feedback_cli(
            &c2,
            &[
                "fb-1",
                "--confirm",
                &n.to_string(),
                "--remedy",
                "cleaned the cooler",
                "--by",
                "2nd engineer",
            ],
            &[],
        )
    })
    .await
    .unwrap();
    assert!(ok, "feedback failed: {out}{err}\n{}", d.log());
    assert!(
        out.contains("tidewatch kept site note here:fb-1:"),
        "{out}{err}"
    );
    let note = c
        .expect("fb/notes/ME1", T, |v| v["answered"]["alarm_id"] == "fb-1")
        .await;
    assert_eq!(note["verdict"], "confirmed", "{note}");
    assert_eq!(note["cause"]["source"], source.as_str(), "{note}");
    assert_eq!(note["remedy"], "cleaned the cooler", "{note}");
    assert_eq!(note["by"], "2nd engineer", "{note}");
    assert_eq!(note["alarm"]["code"], "ME-JCW-TEMP-HI", "{note}");
    assert_eq!(
        note["answered"]["causes"], diag["probable_causes"],
        "{note}"
    );
    assert_eq!(note["answered"]["diagnosis_ts"], diag["ts"], "{note}");
    let id = note["id"].as_str().unwrap();
    assert_eq!(kept(&dir.path().join("state"), id), 1, "{note}");

    // Each bad one: an error report naming the field, and nothing kept.
    let ts = "2026-11-30T06:00:00Z";
    let src = serde_json::json!({ "source": source });
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "fb/feedback/ME1",
            feedback("never-diagnosed", src.clone(), "chief", ts),
            "field alarm_id:",
        ),
        (
            "fb/feedback/ME2",
            feedback("fb-1", src.clone(), "chief", ts),
            "field alarm_id:",
        ),
        (
            "fb/feedback/ME1",
            feedback("fb-1", serde_json::json!({"source": "made-up § X #9"}), "chief", ts),
            "field cause.source:",
        ),
        (
            "fb/feedback/ME1",
            feedback("fb-1", src.clone(), &"x".repeat(65), ts),
            "note field by ",
        ),
        (
            "fb/feedback/ME1",
            feedback("fb-1", serde_json::json!({"text": "y".repeat(501)}), "chief", ts),
            "note field cause.text ",
        ),
        (
            "fb/feedback/ME1",
            r#"{"alarm_id":"fb-1","verdict":"confirmed","cause":{"text":"t"},"ts":"2026-11-30T06:00:00Z"}"#.into(),
            "field by is required",
        ),
        (
            "fb/feedback/ME1",
            feedback("fb-1", src.clone(), "chief", "yesterday"),
            "note field ts ",
        ),
        (
            "fb/feedback/ME1",
            feedback("fb-1", serde_json::json!({"source": source, "text": "t"}), "chief", ts),
            "field cause must hold exactly one of source and text",
        ),
    ];
    for (topic, payload, reason) in cases {
        c.publish(topic, payload.clone()).await;
        let e = c.expect("fb/error", T, |_| true).await;
        assert_eq!(e["topic"], topic, "{payload}: {e}");
        assert!(
            e["reason"].as_str().unwrap().starts_with(reason),
            "{payload}: want a reason starting {reason:?}, got {e}"
        );
    }
    assert_eq!(kept(&dir.path().join("state"), id), 1);
    let notes: Vec<_> = c
        .drain()
        .into_iter()
        .filter(|(t, _)| t.starts_with("fb/notes/"))
        .collect();
    assert!(notes.is_empty(), "a bad feedback made a note: {notes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feedback_sent_while_the_daemon_is_killed_or_queued_across_a_broker_restart_is_kept_after()
{
    let _serial = common::serial();
    let broker = Broker::start();
    let port = broker.port;
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let cfg = config(dir.path(), port, "fk", FAST, "");
    // A persistent session, so notes published after the broker restart
    // still reach it.
    let mut c = Client::connect_with(port, "fk", "fk-client", false).await;
    let mut d = Daemon::launch(&cfg).within(T).ready();
    let diag = diagnosed(&mut c, "fk", "fk-1").await;
    let (_, source) = sourced_cause(&diag);

    // Killed: nothing is saved on the way out.
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    c.publish(
        "fk/feedback/ME1",
        feedback(
            "fk-1",
            serde_json::json!({ "source": source }),
            "chief",
            "2026-11-30T06:00:00Z",
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let d = Daemon::start(&cfg, &[]);
    let note = c
        .expect("fk/notes/ME1", T, |v| v["ts"] == "2026-11-30T06:00:00Z")
        .await;
    assert_eq!(
        note["cause"]["source"],
        source.as_str(),
        "{note}\n{}",
        d.log()
    );
    assert_eq!(kept(&state, note["id"].as_str().unwrap()), 1);

    // Away again, and the broker restarts while it holds the feedback.
    let mut d = d;
    d.child.kill().unwrap();
    d.child.wait().unwrap();
    c.publish(
        "fk/feedback/ME1",
        feedback(
            "fk-1",
            serde_json::json!({"text": "sea chest strainer blocked"}),
            "3rd engineer",
            "2026-11-30T07:00:00Z",
        ),
    )
    .await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (port, pdir) = broker.stop();
    let _broker = Broker::start_on(port, pdir);
    let d = Daemon::start(&cfg, &[]);
    let note = c
        .expect("fk/notes/ME1", T, |v| v["ts"] == "2026-11-30T07:00:00Z")
        .await;
    assert_eq!(
        note["cause"]["text"],
        "sea chest strainer blocked",
        "{note}\n{}",
        d.log()
    );
    assert_eq!(kept(&state, note["id"].as_str().unwrap()), 1);
}

/// Where the published causes of `d` put `source` (from 1), and its tally.
fn placed(d: &serde_json::Value, source: &str) -> Option<(usize, serde_json::Value)> {
    d["probable_causes"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .find(|(_, c)| c["source"] == source)
        .map(|(i, c)| (i + 1, c["site"].clone()))
}

/// The whole loop over MQTT, in the running daemon: a watchkeeper confirms
/// the last of the published manual causes, and the next alarm of that
/// fault on that equipment ranks it first, with its tally; once the note
/// is withdrawn at the console,
/// the alarm after that is answered as before the note.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_confirmed_cause_ranks_first_on_the_next_alarm_of_its_fault_until_the_note_is_withdrawn()
{
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "fn", FAST, "");
    let mut c = Client::connect(broker.port, "fn", "fn-client").await;
    let d = Daemon::launch(&cfg).within(T).ready();
    let first = diagnosed(&mut c, "fn", "fn-1").await;
    let sourced: Vec<String> = first["probable_causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|c| c["source"].as_str().map(String::from))
        .collect();
    let source = sourced
        .last()
        .unwrap_or_else(|| panic!("no manual cause published: {first}"))
        .clone();
    c.publish(
        "fn/feedback/ME1",
        feedback(
            "fn-1",
            serde_json::json!({ "source": source }),
            "2nd engineer",
            "2026-11-30T06:00:00Z",
        ),
    )
    .await;
    let note = c
        .expect("fn/notes/ME1", T, |v| v["answered"]["alarm_id"] == "fn-1")
        .await;
    let note_id = note["id"].as_str().unwrap().to_string();

    let next = diagnosed(&mut c, "fn", "fn-2").await;
    let (at, site) = placed(&next, &source).unwrap_or_else(|| {
        panic!(
            "the confirmed cause {source} is missing: {next}\n{}",
            d.log()
        )
    });
    assert_eq!(at, 1, "the confirmed cause is not first: {next}");
    assert_eq!(site["confirmed"], 1, "{next}");
    assert_eq!(site["last"]["by"], "2nd engineer", "{next}");
    // Raised under the manual's own code, its coverage rests on the manual,
    // not on the note.
    assert_eq!(next["coverage"], "covered", "{next}");

    let (ok, out, err) = {
        let id = note_id.clone();
        let c2 = cfg.clone();
        tokio::task::spawn_blocking(move || {
            let o = std::process::Command::new(env!("CARGO_BIN_EXE_tidewatch"))
                .args(["notes", "withdraw", &id, "--by", "chief", "--config"])
                .arg(&c2)
                .env_remove("JOURNAL_STREAM")
                .output()
                .unwrap();
            (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            )
        })
        .await
        .unwrap()
    };
    assert!(ok, "withdraw failed: {out}{err}");
    // The daemon rereads the journal on its one-second tick when the
    // console has changed it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = diagnosed(&mut c, "fn", "fn-3").await;
    assert!(
        after["probable_causes"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c.get("site").is_none()),
        "a withdrawn note still counts: {after}"
    );
    assert!(after.get("coverage_note").is_none(), "{after}");
}
