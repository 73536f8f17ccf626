//! Prompt states on disk: the KV state of a prompt up to the end of its
//! passage block, and up to its alarm's reading, is saved in
//! `state_dir/kv/prompts` after the answer, on its second sight (flash is
//! written for what comes again, not for every alarm), so an alarm that repeats after a
//! restart (same equipment and code, new id and reading) reads only its
//! reading and the turn's end, and another alarm of the same fault only its
//! own alarm block. A damaged file is removed and the alarm answered, also
//! one cut short while it is being restored; a disk that cannot be written
//! fails no alarm.
//! Real llama.cpp with the test model, through `tidewatch diagnose` (one
//! process each: every call is a restart).

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{
    alarm, assert_full_diagnosis_shape, config, diagnose_cli_logged as diagnose, free_port, Broker,
    Client, Daemon,
};

/// What another alarm of the same fault may read after a restart: its alarm
/// block (about 66 test model tokens for the alarm below; the passages
/// before it are ~200 more). The stand-in's figures are measured in the
/// eval (`--tiers`), not here.
const REPEAT_UNCACHED_MAX: u64 = 80;

/// What the same alarm raised again may read after a restart: its reading,
/// the end of the turn and the answer's opening.
const SAME_ALARM_UNCACHED_MAX: u64 = 30;

fn block_states(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir.join("state/kv/prompts"))
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p| p.extension().is_some_and(|e| e == "kv"));
    v.sort();
    v
}

fn uncached(d: &serde_json::Value) -> u64 {
    let t = &d["timings"];
    t["prompt_tokens"].as_u64().unwrap() - t["cached_tokens"].as_u64().unwrap()
}

fn cooling(id: &str, reading: f64) -> String {
    cooling_on(id, "ME1", reading)
}

fn cooling_on(id: &str, equipment: &str, reading: f64) -> String {
    let mut a: serde_json::Value = serde_json::from_str(&alarm(
        id,
        equipment,
        "ME-JCW-TEMP-HI",
        "major",
        "main_engine_cooling",
        "jacket cooling water outlet temperature high",
    ))
    .unwrap();
    a["value"] = serde_json::json!(reading);
    a["unit"] = serde_json::json!("degC");
    a.to_string()
}

#[test]
fn a_repeat_after_a_restart_reads_only_its_reading_and_another_alarm_of_the_fault_its_alarm_block()
{
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "pd", "", "");

    let (d1, _) = diagnose(dir.path(), &cfg, &cooling("pd-1", 93.5));
    assert_full_diagnosis_shape(&d1);
    let first = uncached(&d1);
    // Flash is written for what is seen again: not on a first sight.
    let saved = block_states(dir.path());
    assert!(saved.is_empty(), "a first sight wrote {saved:?}");
    let (d1b, _) = diagnose(dir.path(), &cfg, &cooling("pd-1b", 93.9));
    assert_full_diagnosis_shape(&d1b);
    let saved = block_states(dir.path());
    assert_eq!(
        saved.len(),
        2,
        "on the second sight two states expected, the passage block and the alarm up to its reading: {saved:?}"
    );
    for f in &saved {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{f:?} is {mode:o}");
    }

    // A new process (a restart), the same fault with a new id and reading.
    let (d2, _) = diagnose(dir.path(), &cfg, &cooling("pd-2", 95.1));
    assert_full_diagnosis_shape(&d2);
    assert_eq!(d2["alarm_id"], "pd-2");
    let repeat = uncached(&d2);
    assert!(
        repeat <= SAME_ALARM_UNCACHED_MAX,
        "the repeat read {repeat} prompt tokens (first time {first}), at most {SAME_ALARM_UNCACHED_MAX} expected: {d2}"
    );
    assert!(first > repeat * 6, "first {first}, repeat {repeat}");

    // Another restart, the same fault on other equipment: the passage
    // block's state serves it, and it reads its own alarm block.
    let (d4, _) = diagnose(dir.path(), &cfg, &cooling_on("pd-4", "ME2", 94.0));
    assert_full_diagnosis_shape(&d4);
    let other = uncached(&d4);
    assert!(
        other <= REPEAT_UNCACHED_MAX && other > repeat,
        "the fault on other equipment read {other} prompt tokens (the repeat {repeat}, first time {first}): {d4}"
    );

    // The same repeat without the disk tier reads the passages again: what
    // the tier saves, measured in one run.
    let cfg_off = config(
        dir.path(),
        free_port(),
        "pd",
        "prompt_cache_disk_mib = 0",
        "",
    );
    let (d3, _) = diagnose(dir.path(), &cfg_off, &cooling("pd-3", 96.0));
    assert!(uncached(&d3) > REPEAT_UNCACHED_MAX * 2, "{d3}");
}

#[test]
fn a_damaged_block_state_is_removed_and_the_alarm_still_answered() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "pd", "", "");
    let (d1, _) = diagnose(dir.path(), &cfg, &cooling("pd-1", 93.5));
    diagnose(dir.path(), &cfg, &cooling("pd-1b", 93.9));
    let saved = block_states(dir.path());
    assert_eq!(saved.len(), 2, "{saved:?}");
    let sizes: Vec<u64> = saved
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect();
    for f in &saved {
        let mut bytes = std::fs::read(f).unwrap();
        let at = bytes.len() - 100;
        bytes[at] ^= 0x55;
        std::fs::write(f, bytes).unwrap();
    }

    let (d2, log) = diagnose(dir.path(), &cfg, &cooling("pd-2", 95.1));
    assert_full_diagnosis_shape(&d2);
    assert!(
        log.contains("saved prompt state does not load; removing it"),
        "{log}"
    );
    assert!(
        uncached(&d2) >= uncached(&d1) - 10,
        "the damaged state was used: {d2}"
    );
    // Computed again after the answer, whole.
    assert_eq!(block_states(dir.path()), saved);
    for (f, size) in saved.iter().zip(&sizes) {
        assert_eq!(std::fs::metadata(f).unwrap().len(), *size);
    }
    let (d3, _) = diagnose(dir.path(), &cfg, &cooling("pd-3", 96.0));
    assert!(uncached(&d3) <= SAME_ALARM_UNCACHED_MAX, "{d3}");
}

#[test]
fn a_disk_that_cannot_keep_states_fails_no_alarm_and_says_why_once() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "pd", "", "");
    // A file where the tier's directory should be: every save fails.
    std::fs::create_dir_all(dir.path().join("state/kv")).unwrap();
    std::fs::write(dir.path().join("state/kv/prompts"), b"not a directory").unwrap();
    let (d1, log) = diagnose(dir.path(), &cfg, &cooling("pd-1", 93.5));
    assert_full_diagnosis_shape(&d1);
    assert_eq!(
        log.matches("prompt states cannot be kept on disk").count(),
        1,
        "{log}"
    );
}

/// `tidewatch diagnose` with `TIDEWATCH_FAULT=fault`: the diagnosis, if the
/// process printed one, and its log with how it ended.
fn diagnose_faulted(
    dir: &Path,
    cfg: &Path,
    alarm_json: &str,
    fault: &str,
) -> (Option<serde_json::Value>, String) {
    let a = dir.join("alarm.json");
    std::fs::write(&a, alarm_json).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(["diagnose", "--config"])
        .arg(cfg)
        .arg("--alarm")
        .arg(&a)
        .env("RUST_LOG", "info")
        .env("TIDEWATCH_FAULT", fault)
        .env_remove("JOURNAL_STREAM")
        .output()
        .unwrap();
    let log = format!(
        "{}\n(exit: {})",
        String::from_utf8_lossy(&out.stderr),
        out.status
    );
    let d = out
        .status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten();
    (d, log)
}

/// A state file cut short after the daemon opened it (a full disk, another
/// hand, a read error on its pages): a mapped file raised SIGBUS there and
/// the process died before the file could be removed, at every alarm that
/// reached it.
#[test]
fn a_state_cut_short_while_it_is_restored_is_removed_written_again_and_the_alarm_answered() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "pd", "", "");
    // The fault seen twice: its states are on disk after the second.
    for (id, reading) in [("pd-1", 93.5), ("pd-2", 95.1)] {
        let (d, _) = diagnose(dir.path(), &cfg, &cooling(id, reading));
        assert_full_diagnosis_shape(&d);
    }
    let saved = block_states(dir.path());
    assert_eq!(saved.len(), 2, "{saved:?}");
    let sizes: Vec<u64> = saved
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .collect();

    let (d3, log) = diagnose_faulted(
        dir.path(),
        &cfg,
        &cooling("pd-3", 96.0),
        "truncate-prompt-state",
    );
    assert!(
        log.contains("fault injection: truncate-prompt-state"),
        "no state was cut short: {log}"
    );
    let d3 = d3.unwrap_or_else(|| panic!("no answer: the process died on the cut state: {log}"));
    assert_full_diagnosis_shape(&d3);
    assert_eq!(d3["alarm_id"], "pd-3");
    assert!(
        log.contains("saved prompt state does not load; removing it"),
        "{log}"
    );
    // Computed again after the answer, whole.
    assert_eq!(block_states(dir.path()), saved, "{log}");
    for (f, size) in saved.iter().zip(&sizes) {
        assert_eq!(std::fs::metadata(f).unwrap().len(), *size, "{f:?}: {log}");
    }
    let (d4, _) = diagnose(dir.path(), &cfg, &cooling("pd-4", 96.5));
    assert!(uncached(&d4) <= SAME_ALARM_UNCACHED_MAX, "{d4}");
}

/// The daemon writes a prompt's states once its answer is published, and
/// never ahead of an alarm waiting for the slot: the next job drops them
/// (they are written at a later sight), so flash writes and their fsyncs
/// never delay an answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_daemon_writes_states_after_the_answer_never_ahead_of_a_waiting_alarm() {
    const T: std::time::Duration = std::time::Duration::from_secs(120);
    let _serial = common::serial();
    let broker = Broker::start();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), broker.port, "pdd", "", "");
    // The fault's first sight, in a one-shot process: nothing written.
    let (d1, _) = diagnose(dir.path(), &cfg, &cooling("pdd-1", 93.5));
    assert_full_diagnosis_shape(&d1);
    assert!(block_states(dir.path()).is_empty());

    let mut c = Client::connect(broker.port, "pdd", "pdd-client").await;
    let d = Daemon::launch(&cfg).within(T).ready();
    // Its second sight, with another alarm right behind it.
    c.publish("pdd/alarm/ME1", cooling("pdd-2", 94.0)).await;
    let other = alarm(
        "pdd-dg",
        "DG2",
        "DG-REV-PWR",
        "major",
        "generator",
        "reverse power trip",
    );
    c.publish("pdd/alarm/DG2", other).await;
    c.expect("pdd/diagnosis/ME1", T, |v| v["alarm_id"] == "pdd-2")
        .await;
    c.expect("pdd/diagnosis/DG2", T, |v| v["alarm_id"] == "pdd-dg")
        .await;
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let written = block_states(dir.path());
    assert!(
        written.is_empty(),
        "states written while an alarm waited for the slot: {written:?}\n{}",
        d.log()
    );

    // Alone: written once its answer is out.
    c.publish("pdd/alarm/ME1", cooling("pdd-3", 95.0)).await;
    c.expect("pdd/diagnosis/ME1", T, |v| v["alarm_id"] == "pdd-3")
        .await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while block_states(dir.path()).len() < 2 && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    assert_eq!(
        block_states(dir.path()).len(),
        2,
        "the states were not written after the answer: {}",
        d.log()
    );
}
