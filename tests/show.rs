//! `tidewatch show` prints diagnoses readably and goes on past a bad line: the
//! binary as the demo and operators run it, on a diagnosis the 1.5B stand-in
//! published in `deploy/demo.sh` (captured with `mosquitto_sub -v`), the same
//! diagnosis pretty-printed as `tidewatch diagnose` prints it, and a bad line
//! in between.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn fixture() -> String {
    let p =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/show/standin-demo-3.txt");
    std::fs::read_to_string(p).unwrap()
}

fn show(stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .arg("show")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn show_prints_a_published_diagnosis_readably() {
    let out = show(&fixture());
    assert!(out.status.success(), "{out:?}");
    assert!(out.stderr.is_empty(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.starts_with("== BUOY-07 · BAT-VOLT-LO · alarm demo-3 "),
        "{text}"
    );
    for part in [
        "Summary: The alarm indicates a low battery voltage on buoy BUOY-07",
        "  1. [high]   insufficient solar input or increased load during the night\n",
        "  1. check battery voltage trend over the past few days",
        "  2. verify the charging controller status\n",
        "  battery-zh § BAT-VOLT-LO 原因 (1/2)\n",
        // The alarm id and equipment `tidewatch feedback` wants.
        "Feedback: tidewatch feedback demo-3 --equipment BUOY-07 --confirm N",
        "Mode: full (the model answered from the retrieved passages) · model qwen2.5-coder-1.5b-instruct-q4_k_m.gguf\n",
        "Timings: retrieval 0.3 ms · prompt 433 tokens (216 cached) · TTFT 10.8 s · 133 tokens in 87.3 s (1.5 tok/s)\n",
    ] {
        assert!(text.contains(part), "missing {part:?} in:\n{text}");
    }
}

#[test]
fn show_goes_on_after_a_bad_line_and_exits_1_naming_it() {
    let line = fixture();
    let payload = line.split_once(' ').unwrap().1;
    let v: serde_json::Value = serde_json::from_str(payload).unwrap();
    let pretty = serde_json::to_string_pretty(&v).unwrap();
    let input = format!("{line}tidewatch-demo/diagnosis/ME1 {{\"summary\": oops}}\n{pretty}\n");
    let out = show(&input);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        text.matches("== BUOY-07 · BAT-VOLT-LO · alarm demo-3")
            .count(),
        2,
        "{text}"
    );
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(
        err.starts_with("tidewatch show: line 2: not JSON (expected value at byte 42)"),
        "{err}"
    );
    assert!(
        err.contains("tidewatch: 1 of 3 inputs could not be shown"),
        "{err}"
    );
}

// The obvious pipe, `mosquitto_sub -v -t 'tidewatch/#' | tidewatch
// show`, printed "not a diagnosis (missing field `summary`)" for every status
// message and exited 1.
#[test]
fn the_whole_prefix_piped_in_shows_status_and_errors_one_line_each_and_exits_0() {
    let input = format!(
        "{}{}\n{}\n{}\n{}",
        r#"tidewatch-demo/status {"state":"online","model":"m.gguf","slots":1,"diagnosed":0,"degraded":0,"rejected":0,"replayed":0,"queue_depth":0,"ts":"2026-12-02T10:00:00Z"}"#,
        "",
        r#"tidewatch-demo/alarm/BUOY-07 {"id":"demo-3","ts":"2026-12-02T10:00:01Z","equipment":"BUOY-07","code":"BAT-VOLT-LO","severity":"major"}"#,
        r#"tidewatch-demo/error {"topic":"tidewatch-demo/alarm/BUOY-07","reason":"field ts is required","bytes":40,"alarm_id":"demo-4","ts":"2026-12-02T10:00:02Z"}"#,
        fixture()
    );
    let out = show(&input);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.is_empty(), "{err}");
    let text = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = text.lines().filter(|l| !l.is_empty()).collect();
    assert_eq!(
        lines[0],
        "-- tidewatch-demo/status: online · diagnosed 0 · degraded 0 · rejected 0 · replayed 0 · queued 0 · at 2026-12-02T10:00:00Z"
    );
    assert_eq!(
        lines[1],
        "-- alarm demo-3 on tidewatch-demo/alarm/BUOY-07: BAT-VOLT-LO major"
    );
    assert_eq!(
        lines[2],
        "!! rejected alarm demo-4 on tidewatch-demo/alarm/BUOY-07: field ts is required (40 bytes)"
    );
    assert!(
        lines[3].starts_with("== BUOY-07 · BAT-VOLT-LO · alarm demo-3 "),
        "{text}"
    );
}
