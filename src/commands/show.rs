//! `tidewatch show`: reads diagnoses from stdin or files and prints each as
//! `render` formats it, as it arrives (a live `mosquitto_sub` never ends).
//! A bad input is reported on stderr by its line and the rest still shown.

use std::io::{BufRead, Write};
use std::path::PathBuf;

use crate::cli::ShowArgs;
use crate::render::render_line;

#[derive(Debug, thiserror::Error)]
pub enum ShowError {
    // `error` and not `source`: main prints the error chain, and the
    // message already carries the reason once.
    #[error("cannot read {path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("cannot write output: {0}")]
    Write(std::io::Error),
    #[error("{bad} of {total} inputs could not be shown (each is named above by its line)")]
    BadLines { bad: usize, total: usize },
}

/// Renders every input to stdout, bad ones to stderr; exit status 1 after
/// all were read if any was bad.
pub fn run(args: &ShowArgs) -> Result<(), ShowError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut counts = (0usize, 0usize);
    let inputs: Vec<Option<&PathBuf>> = if args.files.is_empty() {
        vec![None]
    } else {
        args.files
            .iter()
            .map(|p| (p.as_os_str() != "-").then_some(p))
            .collect()
    };
    for input in inputs {
        let name = input.map_or("stdin".to_string(), |p| p.display().to_string());
        let read_err = |error| ShowError::Read {
            path: name.clone(),
            error,
        };
        let reader: Box<dyn BufRead> = match input {
            None => Box::new(std::io::stdin().lock()),
            Some(p) => Box::new(std::io::BufReader::new(
                std::fs::File::open(p).map_err(read_err)?,
            )),
        };
        match show_lines(reader, &mut out, &mut std::io::stderr(), &mut counts) {
            Ok(()) => {}
            // `tidewatch show | head` closing the pipe is a normal end.
            Err(ShowError::Write(e)) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(()),
            Err(ShowError::Read { error, .. }) => return Err(read_err(error)),
            Err(e) => return Err(e),
        }
    }
    match counts {
        (0, _) => Ok(()),
        (bad, total) => Err(ShowError::BadLines { bad, total }),
    }
}

/// A pretty-printed diagnosis (`tidewatch diagnose` prints one) spans lines;
/// this bounds how much is gathered before it is reported as bad.
const MAX_RECORD_BYTES: usize = 256 * 1024;

/// Renders each line of `input`; `counts` is (bad, non-blank) records so far.
/// A bare JSON object may span lines: its lines are gathered until it parses.
fn show_lines(
    input: impl BufRead,
    out: &mut impl Write,
    err: &mut impl Write,
    counts: &mut (usize, usize),
) -> Result<(), ShowError> {
    let mut first = counts.1 == 0;
    let mut lines = input.lines().enumerate().peekable();
    while let Some((i, line)) = lines.next() {
        let mut record = line.map_err(|error| ShowError::Read {
            path: String::new(),
            error,
        })?;
        while payload_of(&record).starts_with('{')
            && record.len() < MAX_RECORD_BYTES
            && lines.peek().is_some()
            && serde_json::from_str::<serde::de::IgnoredAny>(payload_of(&record))
                .is_err_and(|e| e.is_eof())
        {
            let Some((_, next)) = lines.next() else { break };
            let next = next.map_err(|error| ShowError::Read {
                path: String::new(),
                error,
            })?;
            record.push('\n');
            record.push_str(&next);
        }
        match render_line(i + 1, &record) {
            Ok(None) => continue,
            Ok(Some(text)) => {
                counts.1 += 1;
                if !first {
                    writeln!(out).map_err(ShowError::Write)?;
                }
                first = false;
                out.write_all(text.as_bytes()).map_err(ShowError::Write)?;
                out.flush().map_err(ShowError::Write)?;
            }
            Err(e) => {
                counts.0 += 1;
                counts.1 += 1;
                writeln!(err, "tidewatch show: {e}").map_err(ShowError::Write)?;
            }
        }
    }
    Ok(())
}

/// The JSON part of a record: all of it, or what follows the topic of a
/// `mosquitto_sub -v` line (a payload with newlines spans lines there too).
fn payload_of(record: &str) -> &str {
    let r = record.trim_start();
    if r.starts_with('{') {
        return r;
    }
    r.split_once(' ').map_or("", |(_, p)| p.trim_start())
}

#[cfg(test)]
mod tests {
    use super::*;

    const FULL: &str = r#"{"alarm_id":"demo-1","equipment":"ME1","code":"ME-JCW-TEMP-HI","summary":"s","probable_causes":[{"cause":"c","likelihood":"high"}],"actions":["a"],"sources":[],"mode":"full","model":"m","timings":{"retrieval_ms":1,"prompt_tokens":1,"cached_tokens":0,"ttft_ms":1,"generated_tokens":1,"generation_ms":1,"tokens_per_s":1,"draft_tokens":0,"accepted_tokens":0},"ts":"t"}"#;

    fn full_en() -> String {
        FULL.to_string()
    }

    #[test]
    fn a_pretty_printed_diagnosis_spanning_lines_is_shown() {
        let v: serde_json::Value = serde_json::from_str(&full_en()).unwrap();
        let pretty = serde_json::to_string_pretty(&v).unwrap();
        let input = format!("{pretty}\n{}\n", full_en());
        let (mut out, mut err, mut counts) = (Vec::new(), Vec::new(), (0, 0));
        show_lines(input.as_bytes(), &mut out, &mut err, &mut counts).unwrap();
        assert_eq!(counts, (0, 2), "{}", String::from_utf8_lossy(&err));
        assert_eq!(String::from_utf8(out).unwrap().matches("== ME1").count(), 2);
    }

    // `mosquitto_pub -m` with a payload written over
    // three lines arrives from `mosquitto_sub -v` as three lines.
    #[test]
    fn a_topic_line_whose_payload_spans_lines_is_one_record() {
        let input = "tw/alarm/ME1 {\"id\":\"a-1\",\"ts\":\"t\",\n  \"code\":\"X\",\"severity\":\"major\"}\n";
        let (mut out, mut err, mut counts) = (Vec::new(), Vec::new(), (0, 0));
        show_lines(input.as_bytes(), &mut out, &mut err, &mut counts).unwrap();
        assert_eq!(counts, (0, 1), "{}", String::from_utf8_lossy(&err));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "-- alarm a-1 on tw/alarm/ME1: X major\n"
        );
    }

    #[test]
    fn a_truncated_object_at_the_end_is_an_error_naming_its_first_line() {
        let input = format!("{}\n{{\n  \"summary\": \"cut", full_en());
        let (mut out, mut err, mut counts) = (Vec::new(), Vec::new(), (0, 0));
        show_lines(input.as_bytes(), &mut out, &mut err, &mut counts).unwrap();
        assert_eq!(counts, (1, 2));
        let err = String::from_utf8(err).unwrap();
        assert!(
            err.starts_with("tidewatch show: line 2: not JSON (EOF while parsing a string at line 3 column 17): `{   \"summary\": \"cut`"),
            "{err}"
        );
    }

    #[test]
    fn blank_lines_are_skipped_and_bad_lines_counted_without_stopping() {
        let input = format!("\n{}\nnot json\n\n{}\n", full_en(), full_en());
        let (mut out, mut err, mut counts) = (Vec::new(), Vec::new(), (0, 0));
        show_lines(input.as_bytes(), &mut out, &mut err, &mut counts).unwrap();
        assert_eq!(counts, (1, 3));
        let out = String::from_utf8(out).unwrap();
        assert_eq!(out.matches("== ME1").count(), 2);
        assert!(
            out.contains("\n\n== ME1"),
            "diagnoses are separated by a blank line"
        );
        let err = String::from_utf8(err).unwrap();
        assert_eq!(
            err,
            "tidewatch show: line 3: not JSON (expected value at byte 5): `not json`\n"
        );
    }
}
