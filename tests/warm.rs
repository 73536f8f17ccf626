//! `tidewatch warm`: the passage blocks the manuals' own alarms retrieve are
//! computed into the disk tier, with a progress line, skipped when there,
//! never past the tier's bound; afterwards an alarm seen for the first time,
//! raised under the plant's own code, reads only its alarm block. Real
//! llama.cpp with the test model.

mod common;

use std::path::Path;
use std::process::Command;

use common::{config, diagnose_cli, free_port};

fn warm(cfg: &Path, extra: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .arg("warm")
        .args(extra)
        .arg("--config")
        .arg(cfg)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn blocks(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir.join("state/kv/prompts"))
        .map(|r| r.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    v.retain(|p: &std::path::PathBuf| p.extension().is_some_and(|e| e == "kv"));
    v.sort();
    v
}

/// ADCP no data under a plant's code: the manual's own ADCP-NO-DATA
/// section covers it. The ADCP manual is among the first the index holds, so
/// a small tier warms it.
fn plant_alarm(id: &str) -> String {
    serde_json::json!({
        "id": id, "ts": "2026-12-03T04:00:00Z", "equipment": "ADCP2", "code": "PLANT-0042",
        "severity": "major", "kind": "adcp", "message": "ADCP no data",
    })
    .to_string()
}

fn uncached(d: &serde_json::Value) -> u64 {
    let t = &d["timings"];
    t["prompt_tokens"].as_u64().unwrap() - t["cached_tokens"].as_u64().unwrap()
}

/// The MiB more the disk-full line says the alarms not warmed need.
fn more_mib(err: &str) -> u64 {
    let line = err
        .lines()
        .find(|l| l.contains("the disk tier is full"))
        .unwrap_or_else(|| panic!("no disk-full line: {err}"));
    let before = line
        .split(" MiB more")
        .next()
        .unwrap_or_else(|| panic!("no `MiB more` in {line}"));
    before
        .rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure before `MiB more` in {line}"))
}

#[test]
fn warm_fills_the_disk_tier_resumes_and_serves_a_first_alarm_under_a_plant_code() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        free_port(),
        "warm",
        "prompt_cache_disk_mib = 96",
        "",
    );

    // Cold: without warm, the first alarm reads its passages.
    let cold_dir = tempfile::tempdir().unwrap();
    let cold_cfg = config(
        cold_dir.path(),
        free_port(),
        "warm",
        "prompt_cache_disk_mib = 96",
        "",
    );
    let cold = diagnose_cli(cold_dir.path(), &cold_cfg, &plant_alarm("w-0"));

    let (ok, out, err) = warm(&cfg, &[]);
    assert!(ok, "warm failed:\n{out}\n{err}");
    assert!(err.contains("warm 1/"), "no progress line: {err}");
    assert!(err.contains("the disk tier is full"), "{err}");
    let saved = blocks(dir.path());
    assert!(saved.len() >= 2, "{saved:?}\n{out}");
    let total: u64 = saved
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(
        total <= 96 << 20,
        "warm went past the tier's bound: {total}"
    );
    {
        use std::os::unix::fs::PermissionsExt;
        for p in &saved {
            let mode = std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{p:?}");
        }
    }

    // Again: everything there is skipped, nothing is rewritten or evicted.
    let mtimes: Vec<_> = saved
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .collect();
    let (ok, out2, err2) = warm(&cfg, &[]);
    assert!(ok, "{out2}\n{err2}");
    // What is left still needs room, though this run computed nothing.
    for err in [&err, &err2] {
        let need = more_mib(err);
        assert!(need >= 1, "disk tier full, yet {need} MiB more: {err}");
    }
    assert!(
        out2.contains(" 0 passage blocks computed")
            && out2.contains(&format!("{} already on disk", saved.len())),
        "{out2}"
    );
    assert_eq!(blocks(dir.path()), saved);
    let again: Vec<_> = saved
        .iter()
        .map(|p| std::fs::metadata(p).unwrap().modified().unwrap())
        .collect();
    assert_eq!(mtimes, again, "a second warm rewrote states");

    // The first alarm of the fault, under the plant's code, after warm.
    let first = diagnose_cli(dir.path(), &cfg, &plant_alarm("w-1"));
    assert_eq!(first["coverage"], "covered", "{first}");
    assert!(
        uncached(&first) <= 80,
        "after warm the first alarm read {} prompt tokens (cold {}): {first}",
        uncached(&first),
        uncached(&cold)
    );
    assert!(uncached(&cold) > 2 * uncached(&first), "cold {cold}");
}

#[test]
fn warm_without_a_disk_tier_or_with_unknown_codes_says_why() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        free_port(),
        "warm",
        "prompt_cache_disk_mib = 0",
        "",
    );
    let (ok, out, err) = warm(&cfg, &[]);
    assert!(!ok, "{out}");
    assert!(err.contains("llm.prompt_cache_disk_mib is 0"), "{err}");
    let cfg = config(
        dir.path(),
        free_port(),
        "warm",
        "prompt_cache_disk_mib = 96",
        "",
    );
    let (ok, out, err) = warm(&cfg, &["--codes", "NO-SUCH-CODE"]);
    assert!(!ok, "{out}");
    assert!(err.contains("--codes NO-SUCH-CODE"), "{err}");
}

// Warm started every configured slot, a context each, but used
// one; beside the daemon on a 4 GB board the OOM killer then picked the
// daemon.
#[test]
fn warm_starts_one_slot_and_is_the_oom_killers_first_pick() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        free_port(),
        "warm",
        "prompt_cache_disk_mib = 24\nslots = 3",
        "",
    );
    // A file, not a pipe: nothing reads the log until warm has exited.
    let log = dir.path().join("warm.log");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(["warm", "--codes", "ADCP-NO-DATA", "--config"])
        .arg(&cfg)
        .env("RUST_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Read while it runs: it sets its own score before it loads the model.
    let adj = format!("/proc/{}/oom_score_adj", child.id());
    let mut most = i32::MIN;
    // Not a speed check: a warm that logs from its slot thread once hung
    // for good (stderr locked across the wait for that thread).
    let hung = std::time::Instant::now() + std::time::Duration::from_secs(900);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > hung {
            let _ = child.kill();
            panic!(
                "warm hung:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        if let Some(v) = std::fs::read_to_string(&adj)
            .ok()
            .and_then(|s| s.trim().parse().ok())
        {
            most = most.max(v);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let status = child.wait().unwrap();
    let err = std::fs::read_to_string(&log).unwrap();
    assert!(status.success(), "{err}");
    assert_eq!(most, 1000, "warm's oom_score_adj");
    // Each slot puts the static prefix in its context at start, and says so.
    let slots: std::collections::BTreeSet<&str> = err
        .lines()
        .filter(|l| l.contains("prompt prefix"))
        .filter_map(|l| l.split("slot=").nth(1)?.split_whitespace().next())
        .collect();
    assert_eq!(
        slots.into_iter().collect::<Vec<_>>(),
        vec!["0"],
        "slots started:\n{err}"
    );
}

// Run with sudo, warm wrote root-owned states into the daemon's
// state dir, which the daemon could neither read nor replace.
#[test]
fn warm_as_root_leaves_the_daemons_state_dir_alone() {
    if !nix::unistd::geteuid().is_root() {
        panic!(
            "this test checks what warm does as root: run it as root (the box and CI run as root)"
        );
    }
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        free_port(),
        "warm",
        "prompt_cache_disk_mib = 24",
        "",
    );
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let daemon = nix::unistd::Uid::from_raw(64_999);
    nix::unistd::chown(&state, Some(daemon), None).unwrap();
    let (ok, out, err) = warm(&cfg, &["--codes", "ADCP-NO-DATA"]);
    assert!(
        !ok,
        "warm ran as root in uid 64999's state dir:\n{out}\n{err}"
    );
    assert!(
        err.contains("state_dir") && err.contains("uid 64999") && err.contains("sudo -u '#64999'"),
        "{err}"
    );
    let mut root_owned = Vec::new();
    let mut todo = vec![state.clone()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            use std::os::unix::fs::MetadataExt;
            let m = e.metadata().unwrap();
            if m.uid() == 0 {
                root_owned.push(e.path());
            }
            if m.is_dir() {
                todo.push(e.path());
            }
        }
    }
    assert!(
        root_owned.is_empty(),
        "root's files in the daemon's state dir: {root_owned:?}"
    );
}
