//! `tidewatch notes` on a real state dir, through the built binary: list,
//! export, import (whose notes they are), withdraw (the daemon's view,
//! `SiteNotes`, loses the note at once), a journal cut short by a power cut,
//! and a full journal.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use tidewatch::notes::store::{Store, MAX_NOTES};
use tidewatch::notes::{Answered, Note, NoteCause, NotedAlarm, Verdict};

struct Vessel {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Vessel {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("tidewatch.toml");
        std::fs::write(
            &config,
            "state_dir = \"state\"\n[knowledge]\nindex = \"k.twx\"\n[llm]\nmodel = \"m.gguf\"\n",
        )
        .unwrap();
        Vessel { dir, config }
    }

    fn state(&self) -> PathBuf {
        self.dir.path().join("state")
    }

    fn journal(&self) -> PathBuf {
        self.state().join("notes/notes.jsonl")
    }

    fn notes(&self, args: &[&str]) -> Output {
        self.notes_env(args, &[])
    }

    fn notes_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tidewatch"));
        c.arg("notes")
            .arg(args[0])
            .arg("--config")
            .arg(&self.config)
            .args(&args[1..])
            .current_dir(self.dir.path());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    }

    /// Runs `notes args` and returns its stdout; fails on an error.
    fn ok(&self, args: &[&str]) -> String {
        let out = self.notes(args);
        assert!(
            out.status.success(),
            "notes {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    }

    /// A file of `notes` as JSON lines, in the vessel's folder.
    fn file(&self, name: &str, notes: &[Note]) -> String {
        let p = self.dir.path().join(name);
        let text: String = notes
            .iter()
            .map(|n| serde_json::to_string(n).unwrap() + "\n")
            .collect();
        std::fs::write(&p, text).unwrap();
        p.display().to_string()
    }
}

fn note(equipment: &str, alarm_id: &str, ts: &str) -> Note {
    let mut n = Note {
        id: String::new(),
        alarm: NotedAlarm {
            equipment: equipment.into(),
            code: "ME-JCW-TEMP-HI".into(),
            kind: Some("main_engine_cooling".into()),
            message: Some("jacket water outlet temp high".into()),
            value: Some(93.5),
            unit: Some("degC".into()),
            threshold: Some(90.0),
        },
        verdict: Verdict::Confirmed,
        cause: NoteCause::Text("seawater strainer choked with jellyfish".into()),
        remedy: Some("cleaned the strainer".into()),
        by: "2nd engineer".into(),
        ts: ts.into(),
        answered: Answered {
            alarm_id: alarm_id.into(),
            alarm_ts: "2026-11-30T04:12:00Z".into(),
            diagnosis_ts: "2026-11-30T04:12:03Z".into(),
            mode: "full".into(),
            coverage: "none".into(),
            sources: vec![],
            causes: vec![],
        },
        vessel: None,
        withdrawn: None,
    };
    n.id = n.make_id();
    n
}

/// The columns of a line of `notes list`.
fn cols(line: &str) -> Vec<&str> {
    line.split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect()
}

/// The journal's lines, each of which must be a whole record.
fn whole_lines(p: &Path) -> usize {
    let text = std::fs::read_to_string(p).unwrap();
    assert!(text.ends_with('\n'), "journal ends mid-line: {text:?}");
    for l in text.lines() {
        serde_json::from_str::<serde_json::Value>(l).unwrap_or_else(|e| panic!("{e}: {l}"));
    }
    text.lines().count()
}

#[test]
fn notes_exported_by_one_vessel_are_listed_as_that_vessels_on_another() {
    let ours = Vessel::new();
    let f = ours.file(
        "backup.jsonl",
        &[
            note("ME1", "a1", "2026-11-30T05:00:00Z"),
            note("GEN2", "a2", "2026-11-30T06:00:00Z"),
        ],
    );
    assert!(ours
        .ok(&["import", "--ours", &f])
        .contains("imported 2 notes"));
    let listed = ours.ok(&["list"]);
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 3, "{listed}");
    for col in [
        "id",
        "equipment",
        "code",
        "verdict",
        "cause",
        "by",
        "date",
        "vessel",
        "withdrawn",
    ] {
        assert!(lines[0].contains(col), "{listed}");
    }
    assert_eq!(
        cols(lines[1]),
        [
            "here:a1:2026-11-30T05:00:00Z",
            "ME1",
            "ME-JCW-TEMP-HI",
            "confirmed",
            "crew: seawater strainer choked with jellyfish",
            "2nd engineer",
            "2026-11-30",
            "-",
            "-"
        ],
        "{listed}"
    );

    let export = ours.dir.path().join("star.jsonl");
    ours.ok(&["export", "--out", export.to_str().unwrap()]);
    let stdout = ours.ok(&["export"]);
    assert_eq!(std::fs::read_to_string(&export).unwrap(), stdout);

    let theirs = Vessel::new();
    let e = export.to_str().unwrap();
    let got = theirs.ok(&["import", "--vessel", "Nordic Star", e]);
    assert!(got.contains("imported 2 notes (0 already here)"), "{got}");
    let again = theirs.ok(&["import", "--vessel", "Nordic Star", e]);
    assert!(
        again.contains("imported 0 notes (2 already here)"),
        "{again}"
    );
    let listed = theirs.ok(&["list"]);
    let rows: Vec<Vec<&str>> = listed.lines().skip(1).map(cols).collect();
    assert_eq!(rows.len(), 2, "{listed}");
    assert_eq!(rows[0][0], "Nordic Star:a1:2026-11-30T05:00:00Z");
    assert!(
        rows.iter().all(|r| r[7] == "Nordic Star" && r[8] == "-"),
        "{listed}"
    );
    // Exported again, they stay the first vessel's: a third vessel needs no flag.
    let relay = theirs.dir.path().join("relay.jsonl");
    theirs.ok(&["export", "--out", relay.to_str().unwrap()]);
    let third = Vessel::new();
    third.ok(&["import", relay.to_str().unwrap()]);
    assert!(third.ok(&["list"]).contains("Nordic Star:a2:"));
}

#[test]
fn an_import_of_notes_naming_no_vessel_needs_to_be_told_whose_they_are() {
    let v = Vessel::new();
    let f = v.file("x.jsonl", &[note("ME1", "a1", "2026-11-30T05:00:00Z")]);
    let out = v.notes(&["import", &f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "{f}:1: note here:a1:2026-11-30T05:00:00Z names no vessel: give --vessel NAME"
        )),
        "{err}"
    );
    assert!(v.ok(&["list"]).starts_with("no notes"));
    let help = String::from_utf8(
        Command::new(env!("CARGO_BIN_EXE_tidewatch"))
            .args(["notes", "import", "--help"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    assert!(
        help.contains("refused rather than silently taken as this vessel's"),
        "{help}"
    );
}

#[test]
fn a_bad_note_is_named_by_file_line_and_field_and_nothing_is_imported() {
    let v = Vessel::new();
    let mut long = note("ME1", "a2", "2026-11-30T06:00:00Z");
    long.remedy = Some("x".repeat(501));
    let f = v.file(
        "x.jsonl",
        &[note("ME1", "a1", "2026-11-30T05:00:00Z"), long],
    );
    let out = v.notes(&["import", "--ours", &f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("{f}:2: note here:a2:2026-11-30T06:00:00Z: note field remedy is 501 bytes, more than the 500 allowed")),
        "{err}"
    );
    assert!(v.ok(&["list"]).starts_with("no notes"));
}

#[test]
fn a_note_withdrawn_at_the_console_stops_counting_for_the_daemon_at_once() {
    let v = Vessel::new();
    let (a, b) = (
        note("ME1", "a1", "2026-11-30T05:00:00Z"),
        note("ME1", "a2", "2026-11-30T06:00:00Z"),
    );
    let f = v.file("x.jsonl", &[a.clone(), b.clone()]);
    v.ok(&["import", "--ours", &f]);
    // The daemon's side: the store it reads, and what it last read.
    let store = Store::open(&v.state()).unwrap();
    let seen = store.load_all().unwrap();
    assert_eq!(seen.notes.len(), 2);
    assert!(!store.changed_since(&seen.stamp));

    let said = v.ok(&["withdraw", &a.id, "--by", "chief"]);
    assert!(said.contains(&format!("withdrew note {}", a.id)), "{said}");
    assert!(store.changed_since(&seen.stamp));
    let site = store.load().unwrap();
    let ids: Vec<&str> = site.for_equipment("ME1").map(|n| n.id.as_str()).collect();
    assert_eq!(ids, [b.id.as_str()]);
    let listed = v.ok(&["list"]);
    assert!(
        listed.lines().nth(1).unwrap().contains("  chief "),
        "{listed}"
    );
    assert_eq!(v.ok(&["list", "--counting"]).lines().count(), 2);
    // Exported, a withdrawn note stays withdrawn wherever it goes.
    let other = Vessel::new();
    let e = v.dir.path().join("e.jsonl");
    v.ok(&["export", "--out", e.to_str().unwrap()]);
    other.ok(&["import", "--vessel", "Nordic Star", e.to_str().unwrap()]);
    assert_eq!(
        Store::open(&other.state()).unwrap().load().unwrap().len(),
        1
    );

    let out = v.notes(&["withdraw", &a.id, "--by", "2nd"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!("note {} was already withdrawn by chief", a.id)),
        "{err}"
    );
    let out = v.notes(&["withdraw", "here:nope", "--by", "chief"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("no note has the id \"here:nope\""));
    let out = v.notes(&["withdraw", &b.id, "--by", ""]);
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("note field withdrawn.by is missing"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_torn_last_line_is_left_out_and_cut_before_the_next_note() {
    let v = Vessel::new();
    let f = v.file("x.jsonl", &[note("ME1", "a1", "2026-11-30T05:00:00Z")]);
    v.ok(&["import", "--ours", &f]);
    let whole = std::fs::read(v.journal()).unwrap();
    let mut torn = whole.clone();
    torn.extend_from_slice(&whole[..whole.len() / 3]);
    std::fs::write(v.journal(), torn).unwrap();

    let out = v.notes(&["list"]);
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stdout).lines().count(), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("a torn last line"));
    let g = v.file("y.jsonl", &[note("ME1", "a2", "2026-11-30T06:00:00Z")]);
    v.ok(&["import", "--ours", &g]);
    assert_eq!(whole_lines(&v.journal()), 2);
    assert_eq!(v.ok(&["list"]).lines().count(), 3);
}

#[test]
fn a_power_cut_mid_write_costs_only_the_note_being_written() {
    let v = Vessel::new();
    let f = v.file("x.jsonl", &[note("ME1", "a1", "2026-11-30T05:00:00Z")]);
    v.ok(&["import", "--ours", &f]);
    let g = v.file("y.jsonl", &[note("GEN2", "a2", "2026-11-30T06:00:00Z")]);
    // The process dies with half the line written and fsync'd.
    let out = v.notes_env(
        &["import", "--ours", &g],
        &[("TIDEWATCH_FAULT", "notes-torn-write")],
    );
    assert!(!out.status.success());
    let text = std::fs::read_to_string(v.journal()).unwrap();
    assert!(
        !text.ends_with('\n'),
        "the fault did not tear the write: {text:?}"
    );

    let store = Store::open(&v.state()).unwrap();
    let ids: Vec<String> = store
        .load()
        .unwrap()
        .all()
        .iter()
        .map(|n| n.id.clone())
        .collect();
    assert_eq!(ids, ["here:a1:2026-11-30T05:00:00Z"]);
    // Written again after the restart, it is whole, and so is the journal.
    v.ok(&["import", "--ours", &g]);
    assert_eq!(whole_lines(&v.journal()), 2);
    assert_eq!(store.load().unwrap().len(), 2);
}

#[test]
fn a_full_journal_refuses_a_note_naming_the_bound_and_still_takes_a_withdrawal() {
    let v = Vessel::new();
    std::fs::create_dir_all(v.journal().parent().unwrap()).unwrap();
    // Written directly: MAX_NOTES fsync'd imports would take minutes.
    let mut text = String::new();
    for i in 0..MAX_NOTES {
        let n = note("ME1", &format!("a{i}"), "2026-11-30T05:00:00Z");
        text += &serde_json::to_string(&serde_json::json!({ "note": n })).unwrap();
        text.push('\n');
    }
    std::fs::write(v.journal(), text).unwrap();
    let f = v.file("x.jsonl", &[note("ME1", "b", "2026-11-30T06:00:00Z")]);
    let out = v.notes(&["import", "--ours", &f]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("is full: it holds 5000 notes, the most it keeps (MAX_NOTES = 5000)"),
        "{err}"
    );
    v.ok(&["withdraw", "here:a0:2026-11-30T05:00:00Z", "--by", "chief"]);
    assert_eq!(
        Store::open(&v.state()).unwrap().load().unwrap().len(),
        MAX_NOTES - 1
    );
}
