//! The static prompt prefix (template + system prompt + the user turn's fixed
//! head) is decoded once, saved in `state_dir/kv` keyed by the model file, the
//! llama.cpp build, the context settings and the prompt, and restored by the
//! next process, which then reads only the alarm-specific part of its prompt. A
//! damaged state file is detected, removed and recomputed; so is a state of
//! other context settings.

mod common;

use std::path::{Path, PathBuf};

use common::{
    alarm, assert_full_diagnosis_shape, config, diagnose_cli_logged as diagnose, free_port,
};

fn states(dir: &Path) -> Vec<PathBuf> {
    let kv = dir.join("state/kv");
    // The prefix's own files: the passage-block states live in kv/prompts.
    let mut v: Vec<PathBuf> = std::fs::read_dir(&kv)
        .map(|r| {
            r.flatten()
                .map(|e| e.path())
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// The model's answer, without what legitimately differs between runs.
fn answer(d: &serde_json::Value) -> serde_json::Value {
    serde_json::json!([
        d["summary"],
        d["probable_causes"],
        d["actions"],
        d["sources"]
    ])
}

#[test]
fn prefix_state_is_saved_restored_and_recomputed_when_damaged() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    // The static prefix alone: the passage-block tier (tests/prompt_disk.rs)
    // would serve the repeats below from their blocks.
    let cfg = config(
        dir.path(),
        free_port(),
        "kv",
        "prompt_cache_disk_mib = 0",
        "",
    );
    let a = alarm(
        "kv-1",
        "ME1",
        "ME-JCW-TEMP-HI",
        "major",
        "main_engine_cooling",
        "jacket cooling water outlet temperature high",
    );

    // First process: nothing saved yet, so the prefix is decoded and saved.
    let (d1, log1) = diagnose(dir.path(), &cfg, &a);
    assert_full_diagnosis_shape(&d1);
    assert!(log1.contains("prompt prefix computed and saved"), "{log1}");
    let saved = states(dir.path());
    assert_eq!(saved.len(), 1, "one state file expected: {saved:?}");
    let name = saved[0].file_name().unwrap().to_string_lossy().into_owned();
    assert!(
        name.starts_with("prefix-") && name.ends_with(".kv"),
        "{name}"
    );
    let size = std::fs::metadata(&saved[0]).unwrap().len();
    assert!(size > 0);
    let prefix_tokens = d1["timings"]["cached_tokens"].as_u64().unwrap();
    assert!(
        prefix_tokens >= 40,
        "the job should find the static prefix in the cache: {d1}"
    );

    // Second process: restored, not recomputed, and the same answer.
    let (d2, log2) = diagnose(dir.path(), &cfg, &a);
    assert!(
        log2.contains("prompt prefix restored from state_dir"),
        "{log2}"
    );
    assert!(!log2.contains("prompt prefix computed"), "{log2}");
    assert_eq!(
        d2["timings"]["cached_tokens"].as_u64().unwrap(),
        prefix_tokens
    );
    assert_eq!(
        d2["timings"]["prompt_tokens"],
        d1["timings"]["prompt_tokens"]
    );
    assert_eq!(answer(&d2), answer(&d1));

    // A torn state (power loss while an older build wrote it, a full disk):
    // detected, removed, recomputed, and the alarm is still answered.
    let bytes = std::fs::read(&saved[0]).unwrap();
    std::fs::write(&saved[0], &bytes[..bytes.len() / 3]).unwrap();
    let (d3, log3) = diagnose(dir.path(), &cfg, &a);
    assert!(
        log3.contains("saved prompt prefix does not load; recomputing it"),
        "{log3}"
    );
    assert!(log3.contains("prompt prefix computed and saved"), "{log3}");
    assert_eq!(answer(&d3), answer(&d1));
    assert_eq!(std::fs::metadata(&saved[0]).unwrap().len(), size);

    // States of another prompt or model (an upgrade) are removed at start.
    std::fs::write(
        saved[0].with_file_name("prefix-0000000000000000-0000000000000000.kv"),
        b"stale",
    )
    .unwrap();
    let _ = diagnose(dir.path(), &cfg, &a);
    assert_eq!(states(dir.path()), saved, "stale state files are removed");

    // Another `[llm] ctx` sizes the context the state would be read into, so
    // the state is computed again under a new name, not restored.
    let cfg = config(
        dir.path(),
        free_port(),
        "kv",
        "ctx = 4096\nprompt_cache_disk_mib = 0",
        "",
    );
    let (d5, log5) = diagnose(dir.path(), &cfg, &a);
    assert_full_diagnosis_shape(&d5);
    assert!(!log5.contains("prompt prefix restored"), "{log5}");
    assert!(log5.contains("prompt prefix computed and saved"), "{log5}");
    let resaved = states(dir.path());
    assert_eq!(resaved.len(), 1, "one state file expected: {resaved:?}");
    assert_ne!(
        resaved, saved,
        "a state of ctx 2048 kept its name at ctx 4096"
    );
}
