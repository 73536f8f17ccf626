//! `tidewatch eval --tiers`: cold, repeat after a restart and warm
//! side by side in one run. The repeat and the warm alarm are served by the
//! disk tier, so each reads fewer prompt tokens than the same case cold; the
//! run never touches the config's state_dir and leaves no state dir behind.
//! Real llama.cpp with the test model; the stand-in's figures are measured
//! with the command itself (docs/measurements.md).

mod common;

use std::process::Command;

use common::{config, free_port, repo};

fn uncached(s: &serde_json::Value) -> f64 {
    s["uncached_prompt_tokens"]
        .as_f64()
        .unwrap_or_else(|| panic!("no uncached_prompt_tokens in {s}"))
}

#[test]
fn eval_tiers_reports_cold_repeat_after_restart_and_warm_side_by_side() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "tiers", "", "");
    let out = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(["eval", "--tiers", "2", "--json", "--config"])
        .arg(&cfg)
        .arg("--cases")
        .arg(repo().join("knowledge/eval/alarms.jsonl"))
        // Where its temporary state dirs go, to see that none is left.
        .env("TMPDIR", tmp.path())
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "eval --tiers failed: {log}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));

    let tiers = r["tiers"].as_array().unwrap();
    let names: Vec<&str> = tiers.iter().map(|t| t["tier"].as_str().unwrap()).collect();
    assert_eq!(names, ["cold", "repeat after restart", "warm"], "{r}");
    for t in tiers {
        assert_eq!(
            (t["alarms"].as_u64(), t["answered"].as_u64()),
            (Some(2), Some(2)),
            "{t}"
        );
        for k in [
            "uncached_prompt_tokens",
            "fed_tokens",
            "chosen_tokens",
            "ttft_ms",
            "a72_projected_s",
        ] {
            let s = &t[k];
            assert!(
                s["p50"].as_f64().is_some() && s["min"].as_f64() <= s["max"].as_f64(),
                "{k}: {t}"
            );
        }
    }
    // Cold means only the static prefix came from the cache; the other two
    // were served by a saved passage block.
    let resumed: Vec<u64> = tiers
        .iter()
        .map(|t| t["resumed"].as_u64().unwrap())
        .collect();
    assert_eq!(resumed, [0, 2, 2], "{r}");
    assert!(
        r["static_prefix_cached"].as_bool().unwrap()
            && r["static_prefix_tokens"].as_u64() > Some(0)
    );
    assert_eq!(r["others"], 20, "{r}");
    assert!(
        tiers[1]["ttft_over_cold"]["p50"].is_number() && tiers[0]["ttft_over_cold"].is_null(),
        "{r}"
    );

    // By construction: the repeat and the warm alarm read their alarm block,
    // the cold one its passages too.
    let cases = r["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 2, "{r}");
    for c in cases {
        let cold = uncached(&c["cold"]);
        assert!(
            uncached(&c["repeat"]) < cold,
            "repeat read no less than cold: {c}"
        );
        assert!(
            uncached(&c["warm"]) < cold,
            "warm read no less than cold: {c}"
        );
        // The repeat shares its alarm block up to the new reading, also
        // where the message shows the reading ("…压力低 2.1bar"); the warm
        // alarm reads its whole alarm block.
        assert!(
            uncached(&c["repeat"]) < uncached(&c["warm"]),
            "repeat read its whole alarm block again: {c}"
        );
        assert_eq!(c["warm_coverage"], "covered", "{c}");
        assert!(
            c["plant_code"].as_str().unwrap().starts_with("PLANT-"),
            "{c}"
        );
    }
    let warm = &r["warm"];
    assert_eq!(warm["codes"].as_array().map(Vec::len), Some(2), "{warm}");
    assert!(warm["blocks_computed"].as_u64() >= Some(2), "{warm}");

    let targets = r["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 5, "{r}");
    assert!(
        targets
            .iter()
            .all(|t| t["met"].is_boolean() && t["max"].is_number()),
        "{r}"
    );

    // Never the config's state_dir, and nothing left in the temp dir.
    assert!(
        !dir.path().join("state").exists(),
        "eval --tiers wrote the config's state_dir"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(left.is_empty(), "state dirs left behind: {left:?}");
}
