//! The fuzz targets' logic (tests/fuzz/src/lib.rs) under a plain `cargo test`:
//! every saved crash in tests/fuzz/regressions/ must stay fixed, and a small
//! deterministic sweep over a real index exercises the body decoders that the
//! CRC otherwise shields. No libFuzzer, no nightly, no model.

#[path = "fuzz/src/lib.rs"]
mod fuzz;

use std::path::{Path, PathBuf};

use tidewatch::retrieval::{index, knowledge};

/// Every target's saved inputs. A folder that is missing or empty fails the
/// test: otherwise a renamed target or a lost folder replays nothing and
/// passes.
fn regressions(target: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz/regressions")
        .join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("fuzz regressions folder {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "fuzz regressions folder {} holds no input to replay",
        dir.display()
    );
    files
}

fn real_index() -> Vec<u8> {
    let docs =
        knowledge::load_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("knowledge")).unwrap();
    index::build(&docs).unwrap()
}

/// An alarm target input: topic length, topic, payload.
fn alarm_input(topic: &str, payload: &str) -> Vec<u8> {
    let mut v = vec![u8::try_from(topic.len()).unwrap()];
    v.extend_from_slice(topic.as_bytes());
    v.extend_from_slice(payload.as_bytes());
    v
}

#[test]
fn saved_fuzz_crashes_stay_fixed() {
    let replayed = ["alarm", "index"];
    let mut targets: Vec<String> =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz/fuzz_targets"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
            .collect();
    targets.sort();
    assert_eq!(
        targets, replayed,
        "every fuzz target's regressions are replayed here"
    );
    for (target, run) in [("alarm", fuzz::alarm as fn(&[u8])), ("index", fuzz::index)] {
        for f in regressions(target) {
            eprintln!("replaying {}", f.display());
            run(&std::fs::read(&f).unwrap());
        }
    }
}

#[test]
fn the_alarm_target_accepts_valid_alarms_and_checks_their_invariants() {
    let ok = r#"{"id":"a1","ts":"2026-11-30T04:12:00Z","equipment":"ME1","code":"ME-JCW-TEMP-HI","severity":"major","kind":"main_engine_cooling","value":93,"unit":"degC","threshold":90,"message":" 主机缸套水出口温度高\n"}"#;
    fuzz::alarm(&alarm_input("tidewatch/alarm/ME1", ok));
    fuzz::alarm(&alarm_input("tidewatch/alarm/DG2", ok));
    fuzz::alarm(&alarm_input("", "{}"));
    fuzz::alarm(&[]);
}

#[test]
fn reseal_computes_the_same_crc_as_the_index_writer() {
    let real = real_index();
    let mut b = real.clone();
    b[40..44].fill(0);
    fuzz::reseal(&mut b);
    assert_eq!(
        b, real,
        "tests/fuzz/src/lib.rs reseal() no longer matches index.rs"
    );
    let mut b = real.clone();
    b.extend_from_slice(b"tail");
    fuzz::fix_lengths(&mut b);
    fuzz::reseal(&mut b);
    assert!(tidewatch::retrieval::Index::from_bytes(b).is_ok());
}

/// What libFuzzer does in RESEAL mode, on a fixed grid: single-byte changes
/// all over a real index, each resealed so that it gets past the CRC.
#[test]
fn resealed_byte_changes_across_a_real_index_are_errors_not_panics() {
    let real = real_index();
    let step = (real.len() / 1500).max(1);
    for at in (index::HEADER_LEN..real.len()).step_by(step) {
        for x in [0x01u8, 0x80, 0xff] {
            let mut input = Vec::with_capacity(real.len() + 1);
            input.push(fuzz::RESEAL_CRC);
            input.extend_from_slice(&real);
            input[1 + at] ^= x;
            fuzz::index(&input);
        }
    }
    let mut raw = vec![0u8];
    raw.extend_from_slice(&real);
    fuzz::index(&raw);
}
