//! Speculative decoding is lossless up to the batched numerics. At temperature
//! 0, a diagnosis with prompt lookup is the one without it, or the two runs
//! part at a token whose logits moved only by rounding (the CPU kernels are not
//! batch-invariant). A verification that read the wrong logits row or kept a
//! rejected token parts them by far more.

mod common;

use std::process::Command;

use common::*;

#[test]
fn speculation_at_temperature_0_changes_nothing_the_numerics_do_not_explain() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(
        dir.path(),
        free_port(),
        "spec",
        // Written answers: lookup drafts sampled values, and a chosen answer
        // samples only its summary, too little to test the verification.
        "temperature = 0.0\nspeculative = \"lookup\"\nanswer = \"written\"",
        "",
    );
    let out = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args([
            "eval",
            "--speculation",
            "--json",
            "--limit",
            "24",
            "--config",
        ])
        .arg(&cfg)
        .arg("--cases")
        .arg(repo().join("knowledge/eval/alarms.jsonl"))
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval --speculation failed: {log}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let n = |k: &str| r[k].as_u64().unwrap_or_else(|| panic!("no {k} in {r}"));
    assert_eq!(n("cases"), 8, "{r}");
    assert!(
        r["drafted_per_diagnosis"].as_f64().unwrap() > 10.0
            && r["acceptance_rate"].as_f64().unwrap() > 0.2,
        "lookup drafted too little to test anything: {r}"
    );
    assert_eq!(
        n("differ_otherwise"),
        0,
        "speculation changed a diagnosis where the logits moved by more than rounding: {r}\n{log}"
    );
    assert_eq!(n("identical") + n("differ_by_numerics"), n("cases"), "{r}");
}
