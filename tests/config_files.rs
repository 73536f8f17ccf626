//! What a config names is tried at start, each problem named by its key and
//! said once, with exit status 78; relative paths are read from the config
//! file's folder.

mod common;

use std::path::Path;
use std::process::{Command, Output};

fn tidewatch(args: &[&str], config: &Path, cwd: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args(args)
        .arg("--config")
        .arg(config)
        .current_dir(cwd)
        .output()
        .unwrap()
}

/// A config every check passes: a state_dir in `dir`, the test index and
/// the test model.
fn good_config(dir: &Path) -> std::path::PathBuf {
    write_config(
        dir,
        &dir.join("state").display().to_string(),
        &common::index().display().to_string(),
        &common::test_model().display().to_string(),
    )
}

fn write_config(dir: &Path, state: &str, index: &str, model: &str) -> std::path::PathBuf {
    let p = dir.join("tidewatch.toml");
    std::fs::write(
        &p,
        format!("state_dir = \"{state}\"\n[knowledge]\nindex = \"{index}\"\n[llm]\nmodel = \"{model}\"\nthreads = 2\n"),
    )
    .unwrap();
    p
}

// `tidewatch: /nonexistent.idx: No such file or directory
// (os error 2): No such file or directory (os error 2)` from run and
// check-config alike, without the key.
#[test]
fn a_missing_index_is_said_once_naming_its_key_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let model = common::test_model();
    let cfg = write_config(
        dir.path(),
        &dir.path().join("state").display().to_string(),
        "/nonexistent.idx",
        &model.display().to_string(),
    );
    for cmd in [&["run"][..], &["check-config"][..]] {
        let out = tidewatch(cmd, &cfg, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd:?}: {err}");
        assert!(
            err.contains("config key knowledge.index: /nonexistent.idx: no such file or directory"),
            "{cmd:?}: {err}"
        );
        assert_eq!(
            err.to_lowercase().matches("no such file").count(),
            1,
            "{cmd:?}: said once: {err}"
        );
    }
}

// Check-config printed `config ...: ok` as its first line, then failed on
// the index it names: an operator skimming the output read "ok".
#[test]
fn check_config_says_ok_only_after_every_check_passed() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state").display().to_string();
    let model = common::test_model().display().to_string();
    let cfg = write_config(dir.path(), &state, "/nonexistent.idx", &model);
    let out = tidewatch(&["check-config"], &cfg, dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(78));
    assert!(!text.contains(": ok"), "said ok before failing: {text}");

    let cfg = good_config(dir.path());
    let out = tidewatch(&["check-config"], &cfg, dir.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    assert_eq!(
        text.lines().last(),
        Some(format!("config {}: ok", cfg.display()).as_str()),
        "{text}"
    );
}

// Check-config said ok for state_dir = "/proc/nope", then run
// exited 1 there.
#[test]
fn a_state_dir_that_cannot_be_written_fails_check_config_and_run_with_78() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = write_config(
        dir.path(),
        "/proc/nope",
        &common::index().display().to_string(),
        &common::test_model().display().to_string(),
    );
    for cmd in [&["check-config"][..], &["run"][..]] {
        let out = tidewatch(cmd, &cfg, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd:?}: {err}");
        assert!(
            err.contains("config key state_dir: /proc/nope: cannot be created"),
            "{cmd:?}: {err}"
        );
    }
}

// Relative paths were taken from the working directory.
#[test]
fn relative_paths_are_read_from_the_config_files_folder_whatever_the_working_directory() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("conf");
    std::fs::create_dir(&conf).unwrap();
    std::fs::copy(common::index(), conf.join("knowledge.twx")).unwrap();
    std::os::unix::fs::symlink(common::test_model(), conf.join("model.gguf")).unwrap();
    let cfg = write_config(&conf, "state", "knowledge.twx", "model.gguf");
    let elsewhere = tempfile::tempdir().unwrap();
    let out = tidewatch(&["check-config"], &cfg, elsewhere.path());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        text.contains(&format!("index {}", conf.join("knowledge.twx").display())),
        "{text}"
    );
    assert!(
        conf.join("state").is_dir(),
        "state_dir made beside the config"
    );
    assert!(!elsewhere.path().join("state").exists());
}

// A plant code mapped to a code no manual has would never be covered: said
// at start, naming the key and the entry.
#[test]
fn a_plant_code_mapped_to_no_manuals_code_fails_with_78_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = good_config(dir.path());
    let mut text = std::fs::read_to_string(&cfg).unwrap();
    text.push_str("[knowledge.plant_codes]\n\"AMS-77\" = \"ME-LO-PRES-XX\"\n");
    std::fs::write(&cfg, text).unwrap();
    for cmd in [&["check-config"][..], &["run"][..]] {
        let out = tidewatch(cmd, &cfg, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd:?}: {err}");
        assert!(
            err.contains(
                "config key knowledge.plant_codes: AMS-77 = ME-LO-PRES-XX: no manual has this code"
            ),
            "{cmd:?}: {err}"
        );
    }
}

// With knowledge.examples unset, a bad examples file the
// daemon found by itself exited 78, naming a key nobody set. Found by
// itself (beside the index), it only warns and coverage goes without;
// configured, it stops the start naming the key, the file and the line.
#[test]
fn a_bad_examples_file_stops_the_start_only_when_configured() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(common::index(), dir.path().join("knowledge.twx")).unwrap();
    let bad = dir.path().join("examples/alarms.jsonl");
    std::fs::create_dir_all(bad.parent().unwrap()).unwrap();
    std::fs::write(&bad, "{\"case\": \"plant-1\"}\n").unwrap();
    let cfg = write_config(
        dir.path(),
        &dir.path().join("state").display().to_string(),
        "knowledge.twx",
        &common::test_model().display().to_string(),
    );
    let out = tidewatch(&["check-config"], &cfg, dir.path());
    let (text, err) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{text}{err}");
    assert!(
        text.contains("example alarms for coverage: none found"),
        "{text}"
    );
    assert!(
        err.contains(&bad.display().to_string()) && err.contains("line 1"),
        "{err}"
    );

    let mut conf = std::fs::read_to_string(&cfg).unwrap();
    conf = conf.replace(
        "index = \"knowledge.twx\"\n",
        "index = \"knowledge.twx\"\nexamples = \"examples/alarms.jsonl\"\n",
    );
    std::fs::write(&cfg, conf).unwrap();
    for cmd in [&["check-config"][..], &["run"][..]] {
        let out = tidewatch(cmd, &cfg, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd:?}: {err}");
        assert!(
            err.contains(&format!(
                "config key knowledge.examples: example alarms {}, line 1",
                bad.display()
            )),
            "{cmd:?}: {err}"
        );
    }
}

// `config key knowledge.examples: example alarms /x: No such file or
// directory (os error 2)`, where every other file key says it lowercase.
#[test]
fn missing_examples_are_said_as_every_missing_file_is() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = good_config(dir.path());
    let conf = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace("[llm]", "examples = \"none.jsonl\"\n[llm]");
    std::fs::write(&cfg, conf).unwrap();
    let out = tidewatch(&["check-config"], &cfg, dir.path());
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(78), "{err}");
    let want = format!(
        "config key knowledge.examples: example alarms {}: no such file or directory\n",
        dir.path().join("none.jsonl").display()
    );
    assert!(err.ends_with(&want), "{err}");
}

// An error whose message already carries its cause, as most of tidewatch's
// do (`{path}: {source}`), and whose cause is also its `source()`: main
// prints each cause of the chain once, so the io error is not said twice.
#[test]
fn an_unreadable_config_file_is_said_once_with_its_cause_and_exits_78() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("absent.toml");
    for cmd in [&["run"][..], &["check-config"][..]] {
        let out = tidewatch(cmd, &cfg, dir.path());
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(78), "{cmd:?}: {err}");
        // Said as every other file error is: lowercase, without "(os error 2)".
        assert!(
            err.contains(&format!(
                "cannot read config file {}: no such file or directory\n",
                cfg.display()
            )),
            "{cmd:?}: {err}"
        );
        assert_eq!(
            err.to_lowercase().matches("no such file").count(),
            1,
            "{cmd:?}: said once: {err}"
        );
    }
}
