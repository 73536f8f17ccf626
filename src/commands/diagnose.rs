//! `tidewatch diagnose`: one alarm from a file through the daemon's own
//! pipeline, no MQTT; the diagnosis JSON on stdout.

use super::{print_json, CommandError};
use crate::config::Config;

/// The alarm's bytes from `path` ("-": stdin). A line of the eval set
/// (`{"case": .., "alarm": {..}, "gold": ..}`) gives its `alarm`, so a case
/// can be tried as it is: `head -1 alarms.jsonl | tidewatch diagnose -a -`.
fn alarm_bytes(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let bytes = if path.as_os_str() == "-" {
        let mut b = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin().lock(), &mut b)
            .map_err(|e| e.to_string())?;
        b
    } else {
        std::fs::read(path).map_err(|e| e.to_string())?
    };
    match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(v) if v.get("case").is_some() && v.get("alarm").is_some_and(|a| a.is_object()) => {
            serde_json::to_vec(&v["alarm"]).map_err(|e| e.to_string())
        }
        _ => Ok(bytes),
    }
}

/// Site notes from JSON lines, one note per line (`notes export`); blank
/// lines are skipped, a bad line is an error naming it.
pub fn notes_file(path: &std::path::Path) -> Result<crate::notes::SiteNotes, CommandError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CommandError::Usage(format!("notes file {}: {e}", path.display())))?;
    let mut notes = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let note: crate::notes::Note = serde_json::from_str(line).map_err(|e| {
            CommandError::Usage(format!(
                "{} line {}: not a note: {e}",
                path.display(),
                i + 1
            ))
        })?;
        note.check()
            .map_err(|e| CommandError::Usage(format!("{} line {}: {e}", path.display(), i + 1)))?;
        notes.push(note);
    }
    Ok(crate::notes::SiteNotes::from_notes(notes))
}

/// The site notes the daemon of `state_dir` counts; none when it has kept
/// none (a one-shot run makes no state folder).
fn state_notes(state_dir: &std::path::Path) -> Result<crate::notes::SiteNotes, CommandError> {
    if !state_dir.join("notes").is_dir() {
        return Ok(crate::notes::SiteNotes::empty());
    }
    crate::notes::store::Store::open(state_dir)
        .and_then(|s| s.load())
        .map_err(|e| CommandError::Usage(format!("site notes of {}: {e}", state_dir.display())))
}

async fn diagnose(
    cfg: Config,
    alarm_path: &std::path::Path,
    notes: crate::notes::SiteNotes,
) -> Result<(), CommandError> {
    let bad = |reason: String| CommandError::Alarm {
        path: alarm_path.to_owned(),
        reason,
    };
    let bytes = alarm_bytes(alarm_path).map_err(bad)?;
    let alarm = crate::alarm::parse_on(
        &bytes,
        None,
        cfg.mqtt.max_alarm_bytes,
        cfg.mqtt.numeric_severity,
    )
    .map_err(|e| bad(e.to_string()))?;
    let (pipeline, mut slots) = crate::load::pipeline(cfg, true).await?;
    let d = pipeline.diagnose(&mut slots[0], &alarm, &notes).await;
    print_json(&mut std::io::stdout().lock(), &d)?;
    // The slot saves the prompt's state for the next run after the answer
    // (the disk tier): let it finish before the process ends.
    for slot in slots {
        slot.stop(std::time::Duration::from_secs(60)).await;
    }
    Ok(())
}

/// Loads the config and runs `diagnose` on the command runtime.
pub fn run(
    config: &std::path::Path,
    alarm: &std::path::Path,
    notes: Option<&std::path::Path>,
) -> Result<(), CommandError> {
    let cfg = super::load_config(config)?;
    crate::config::check_files(&cfg)?;
    let notes = match notes {
        Some(p) => notes_file(p)?,
        None => state_notes(&cfg.state_dir)?,
    };
    super::runtime()?.block_on(diagnose(cfg, alarm, notes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_eval_set_line_gives_its_alarm_and_a_bare_alarm_is_itself() {
        let dir = tempfile::tempdir().unwrap();
        let line = dir.path().join("case.json");
        std::fs::write(
            &line,
            r#"{"case": "ship-001", "lang": "en", "alarm": {"id": "ship-001", "code": "X"}, "gold": {}}"#,
        )
        .unwrap();
        let got: serde_json::Value = serde_json::from_slice(&alarm_bytes(&line).unwrap()).unwrap();
        assert_eq!(got, serde_json::json!({"id": "ship-001", "code": "X"}));
        let bare = dir.path().join("alarm.json");
        std::fs::write(&bare, r#"{"id": "a"}"#).unwrap();
        assert_eq!(alarm_bytes(&bare).unwrap(), br#"{"id": "a"}"#.to_vec());
    }
}
