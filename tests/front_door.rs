//! The repository's front door stays a product's: README.md fits a user's
//! first screen, no tracked file names a build machine's paths or speaks of
//! how the project was made, no `--help` text or printed string names an
//! internal issue, and docs/design.md's module map is src/ as it is.
//!
//! Each check is a pure function over text, unit-tested at the bottom with a
//! planted violation of each kind (and the product words it must let
//! through); the tests at the top run them over `git ls-files`, src/ and the
//! built binary. Every failure names file:line and what to write instead.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

use regex::Regex;

/// README.md is the user's page: what tidewatch is, the two commands, the
/// wire contract, install, delivery, figures and links. History, design
/// notes and measurements go to docs/ and CHANGELOG.md; past this many
/// lines a README has started to hold them again.
const README_MAX_LINES: usize = 320;

/// Absolute paths under these roots belong to the machine a file was written
/// on (a checkout, a home directory, a scratch file), not to the product:
/// a reader cannot open them. Everything else absolute is the board's or
/// the system's and allowed: /etc/tidewatch, /var/lib/tidewatch,
/// /usr/share/tidewatch, /usr/bin, /opt, /run, /proc, /sys, /dev, systemd's.
const BUILD_MACHINE_ROOTS: &[&str] = &["/work/", "/root/", "/home/", "/Users/", "/tmp/"];

/// Documented examples under those roots, and why each is not a build
/// machine's: a path starting with one of these is allowed.
const ALLOWED_PATHS: &[(&str, &str)] = &[
    // README's walk-through folder (/tmp/tw), the cross build's target dir
    // (/tmp/tw-aarch64) and other example scratch paths a reader creates.
    ("/tmp/tw", "an example folder the reader creates"),
    // mktemp templates in the scripts: created and removed by the script.
    ("/tmp/tidewatch-", "a script's own mktemp template"),
    ("/tmp/llama-bench.", "deploy/bench.sh's own mktemp template"),
    // The README's fresh-clone timing recipe.
    ("/tmp/fresh", "an example folder the reader creates"),
    // Inside the CI box's container (.ci/box-test.sh), not the host.
    ("/root/twbox", "a path inside the CI container"),
];

/// Words that speak of how the project was made rather than of the product,
/// each precise enough to leave the product's own uses alone: MQTT's and a
/// modem's "session" ("the session", "its session", "a persistent
/// session"), "stop" as a verb or a ship's stop ("stop the winch", "at the
/// next stop"), a "helper" function or process, an engine-room "round".
/// (name, pattern, what to write instead)
const WORKFLOW_PATTERNS: &[(&str, &str, &str)] = &[
    (
        "an internal issue",
        r"\b[Ii]ssues? ([0-9]+|[A-Z])\b",
        "say what the code or test protects, not which tracker item asked for it",
    ),
    (
        "a helper (who wrote something)",
        r"(?i)\b(by|its|their|each|two|three|four|five|six|seven|eight|nine|ten|more) helpers?\b|\bhelpers? (that|who|was|were|told|wrote|started|read)\b|\bhelper's\b",
        "say what wrote it (a language model given the manuals, an engineer) in docs/eval.md",
    ),
    (
        "a work session",
        r"(?i)\b(this|last|previous|earlier) session\b|\bsession could end\b",
        "give the date, machine and commit instead",
    ),
    (
        "a stop (a unit of work)",
        r"(?i)\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|thirteenth|fourteenth|fifteenth|[0-9]+(st|nd|rd|th)) stop('s)?\b|\bthis stop\b|\bthe stop before\b|\bstop [0-9]+\b",
        "give the date, the rule's name or the commit instead",
    ),
    (
        "an eval round",
        r"(?i)\beval rounds?\b|\brounds? of (work|evaluation)\b",
        "give the date, the rule's name or the commit instead",
    ),
    (
        "a closing note",
        r"(?i)\bclosing notes?\b",
        "history goes to CHANGELOG.md",
    ),
    (
        "a branch not in the repository",
        r"(?i)\bbranch(es)? `",
        "say what was tried and that it was not merged",
    ),
    (
        "a worktree",
        r"(?i)\bworktrees?\b",
        "describe the experiment, not where it ran",
    ),
];

/// An internal issue named in what a user reads (`--help`, printed output).
const ISSUE_PATTERN: &str = r"\b[Ii]ssues?\s+([0-9]+|[A-Z])\b";

/// This file plants every violation in its own unit tests.
const SELF: &str = "tests/front_door.rs";

const MAP_BEGIN: &str = "<!-- module map: begin -->";
const MAP_END: &str = "<!-- module map: end -->";

// ---------------------------------------------------------------------------
// The checks over the tree

#[test]
fn readme_fits_its_bound() {
    let text = read(&root().join("README.md"));
    if let Some(v) = readme_too_long("README.md", &text) {
        panic!("{v}");
    }
}

#[test]
fn no_tracked_file_names_a_build_machines_path() {
    let mut found = Vec::new();
    for (file, text) in tracked_texts() {
        if file != SELF {
            found.extend(path_violations(&file, &text));
        }
    }
    fail_on(
        "tracked files name absolute paths of a build machine",
        found,
    );
}

#[test]
fn no_tracked_file_speaks_of_workflow() {
    let mut found = Vec::new();
    for (file, text) in tracked_texts() {
        if file != SELF {
            found.extend(workflow_violations(&file, &text));
        }
    }
    fail_on("tracked files speak of workflow rather than product", found);
}

#[test]
fn no_help_text_names_an_internal_issue() {
    let bin = env!("CARGO_BIN_EXE_tidewatch");
    let mut found = Vec::new();
    let mut todo = vec![Vec::<String>::new()];
    let mut seen = 0;
    while let Some(path) = todo.pop() {
        let mut args = path.clone();
        args.push("--help".into());
        let out = Command::new(bin)
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("cannot run {bin} {}: {e}", args.join(" ")));
        let help = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success() && !help.is_empty(),
            "tidewatch {} gave no help (status {}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        seen += 1;
        let name = format!("`tidewatch {}`", args.join(" "));
        found.extend(issue_mentions(&name, &help));
        for sub in subcommands(&help) {
            let mut p = path.clone();
            p.push(sub);
            todo.push(p);
        }
    }
    // run, diagnose, warm, index (build, check), query, eval, bench, show,
    // check-config and the top level: a parse that found none is broken.
    assert!(
        seen >= 10,
        "only {seen} help texts found: is the `Commands:` list still parsed?"
    );
    fail_on("--help names an internal issue", found);
}

// `warm`'s line in the command list was its whole five-sentence
// paragraph: its doc comment had no summary line of its own.
#[test]
fn each_command_in_the_list_is_summed_up_in_one_line() {
    let bin = env!("CARGO_BIN_EXE_tidewatch");
    let out = Command::new(bin).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&out.stdout);
    let long = long_summaries(&help);
    assert!(subcommands(&help).len() >= 10, "{help}");
    assert!(
        long.is_empty(),
        "summaries of more than one sentence: {long:#?}"
    );
}

/// The `Commands:` entries whose summary runs past one sentence.
fn long_summaries(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter(|l| {
            let summary = l.trim().split_once(' ').map_or("", |(_, s)| s.trim());
            summary.contains(". ") || summary.ends_with('.') || summary.len() > 160
        })
        .map(str::to_string)
        .collect()
}

#[test]
fn a_summary_of_several_sentences_is_found() {
    let help =
        "Commands:\n  warm   Do it. Then more\n  run    Run the daemon: MQTT in\n\nOptions:\n";
    assert_eq!(long_summaries(help), vec!["  warm   Do it. Then more"]);
}

// The example config sent operators to README sections "How it answers",
// "Finding the big cores" and "Chosen answers", which README does not have.
#[test]
fn every_section_a_config_or_unit_points_to_exists() {
    let mut found = Vec::new();
    for (file, text) in tracked_texts() {
        let pointing = file.starts_with("deploy/") || file.starts_with("systemd/");
        if pointing && !file.ends_with(".md") {
            // A README.md may be the folder's own or the project's.
            let dir = root().join(&file).parent().unwrap().to_owned();
            found.extend(dangling_section_refs(&file, &text, &|doc| {
                let both = [dir.join(doc), root().join(doc)];
                let texts: Vec<String> = both
                    .iter()
                    .filter_map(|p| std::fs::read_to_string(p).ok())
                    .collect();
                (!texts.is_empty()).then(|| texts.join("\n"))
            }));
        }
    }
    fail_on("a pointer to a section that does not exist", found);
}

/// `README "Heading"`, `(docs/design.md, "Heading")`: a pointer into a
/// document by a heading's words, kept only if a heading of that document
/// starts with them.
fn dangling_section_refs(
    file: &str,
    text: &str,
    doc: &dyn Fn(&str) -> Option<String>,
) -> Vec<Violation> {
    let re = regex::Regex::new(r#"(README(?:\.md)?|docs/[A-Za-z_-]+\.md),? "([^"]+)""#).unwrap();
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for c in re.captures_iter(line) {
            let name = if c[1].starts_with("README") {
                "README.md"
            } else {
                &c[1]
            };
            let heading = c[2].trim();
            let exists = doc(name).is_some_and(|d| {
                d.lines()
                    .filter(|l| l.starts_with('#'))
                    .any(|l| l.trim_start_matches('#').trim().starts_with(heading))
            });
            if !exists {
                found.push(Violation {
                    file: file.into(),
                    line: i + 1,
                    what: format!("points to {name} \"{heading}\", which has no such heading"),
                    fix: "name a heading the document has, or write the point here".into(),
                });
            }
        }
    }
    found
}

#[test]
fn a_pointer_to_a_missing_heading_is_found() {
    let doc = |name: &str| (name == "README.md").then(|| "# t\n## Logs\n".to_string());
    let text = "# see README \"Logs\"\n# see README, \"Finding the big cores\"\n";
    let found = dangling_section_refs("deploy/x.toml", text, &doc);
    assert_eq!(found.len(), 1, "{found:?}");
    assert_eq!(found[0].line, 2);
}

#[test]
fn no_printed_string_names_an_internal_issue() {
    let mut found = Vec::new();
    for (file, text) in rust_sources() {
        found.extend(printed_issue_violations(&file, &text));
    }
    fail_on(
        "string literals (printed output) name an internal issue",
        found,
    );
}

#[test]
fn design_module_map_matches_src() {
    let path = root().join("docs/design.md");
    let doc = read(&path);
    let expected = module_map(&rust_sources());
    if std::env::var_os("UPDATE_DOCS").is_some() {
        let updated = with_map(&doc, &expected).unwrap_or_else(|e| panic!("docs/design.md: {e}"));
        std::fs::write(&path, updated).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        return;
    }
    let problems = map_differences(&doc, &expected);
    assert!(
        problems.is_empty(),
        "docs/design.md's module map does not match src/:\n{}\n\
         Run `UPDATE_DOCS=1 cargo test --release --features fault-injection --test front_door \
         design_module_map_matches_src` to regenerate it from each file's `//!` header.",
        problems.join("\n")
    );
}

// ---------------------------------------------------------------------------
// The checks as pure functions

#[derive(Debug, PartialEq)]
struct Violation {
    file: String,
    line: usize,
    what: String,
    fix: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}: {}; {}",
            self.file, self.line, self.what, self.fix
        )
    }
}

fn readme_too_long(file: &str, text: &str) -> Option<Violation> {
    let lines = text.lines().count();
    (lines > README_MAX_LINES).then(|| Violation {
        file: file.into(),
        line: README_MAX_LINES + 1,
        what: format!("README.md is {lines} lines, over its bound of {README_MAX_LINES}"),
        fix: "move history, design and measurements to docs/ or CHANGELOG.md and link them".into(),
    })
}

fn path_violations(file: &str, text: &str) -> Vec<Violation> {
    static RE: OnceLock<Regex> = OnceLock::new();
    let re = RE.get_or_init(|| {
        let roots: Vec<String> = BUILD_MACHINE_ROOTS
            .iter()
            .map(|r| regex::escape(r))
            .collect();
        // Not inside a longer path or a URL: `knowledge/tmp/...`, `http://x/home/`.
        Regex::new(&format!(
            r#"(?:^|[^A-Za-z0-9_.~/$}}-])((?:{})[^\s"'`)\]>,;]*)"#,
            roots.join("|")
        ))
        .expect("path pattern")
    });
    let mut out = Vec::new();
    for (n, line) in text.lines().enumerate() {
        for c in re.captures_iter(line) {
            let path = &c[1];
            if ALLOWED_PATHS.iter().any(|(p, _)| path.starts_with(p)) {
                continue;
            }
            out.push(Violation {
                file: file.into(),
                line: n + 1,
                what: format!("names {path}, a build machine's path"),
                fix: "use a path relative to the repository, or a documented example \
                      (ALLOWED_PATHS in tests/front_door.rs)"
                    .into(),
            });
        }
    }
    out
}

fn workflow_violations(file: &str, text: &str) -> Vec<Violation> {
    static RES: OnceLock<Vec<(&str, Regex, &str)>> = OnceLock::new();
    let res = RES.get_or_init(|| {
        WORKFLOW_PATTERNS
            .iter()
            .map(|(name, p, fix)| (*name, Regex::new(p).expect("workflow pattern"), *fix))
            .collect()
    });
    let lines: Vec<&str> = text.lines().collect();
    let mut out = Vec::new();
    for (n, line) in lines.iter().enumerate() {
        // A phrase wrapped onto the next line (`one of issue` / `/// 30's
        // own`) counts where it starts.
        let joined = match lines.get(n + 1) {
            Some(next) => format!("{line} {}", without_comment_marker(next)),
            None => line.to_string(),
        };
        for (name, re, fix) in res {
            let hit = re
                .find_iter(&joined)
                .find(|m| m.start() < line.len())
                .map(|m| m.as_str().split_whitespace().collect::<Vec<_>>().join(" "));
            if let Some(words) = hit {
                out.push(Violation {
                    file: file.into(),
                    line: n + 1,
                    what: format!("\"{words}\" speaks of {name}"),
                    fix: (*fix).into(),
                });
            }
        }
    }
    out
}

/// A line without its indentation and the comment or quote marker it
/// continues (`///`, `//!`, `//`, `#`, `>`, `*`, `--`).
fn without_comment_marker(line: &str) -> &str {
    let l = line.trim_start();
    ["//!", "///", "//", "#", ">", "*", "--"]
        .iter()
        .find_map(|m| l.strip_prefix(m))
        .unwrap_or(l)
        .trim_start()
}

/// Where a text a user reads (a help text) names an internal issue, also
/// across a line break where clap wrapped the text.
fn issue_mentions(source: &str, text: &str) -> Vec<Violation> {
    issue_re()
        .find_iter(text)
        .map(|m| Violation {
            file: source.into(),
            line: text[..m.start()].matches('\n').count() + 1,
            what: format!(
                "\"{}\" names an internal issue",
                m.as_str().split_whitespace().collect::<Vec<_>>().join(" ")
            ),
            fix: "say what the option or figure is, not which tracker item asked for it".into(),
        })
        .collect()
}

/// Rust code outside comments that names an internal issue: in practice a
/// string literal, which is what the program prints.
fn printed_issue_violations(file: &str, src: &str) -> Vec<Violation> {
    let re = issue_re();
    src.lines()
        .enumerate()
        .filter_map(|(n, line)| {
            let code = code_part(line);
            re.find(code).map(|m| Violation {
                file: file.into(),
                line: n + 1,
                what: format!("a string literal says \"{}\"", m.as_str()),
                fix: "say what is printed (the targets, the figure), not which tracker item \
                      asked for it"
                    .into(),
            })
        })
        .collect()
}

fn issue_re() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(ISSUE_PATTERN).expect("issue pattern"))
}

/// A line of Rust without its comment: nothing of a `//` line, and the code
/// before a `//` that is not inside a string literal.
fn code_part(line: &str) -> &str {
    if line.trim_start().starts_with("//") {
        return "";
    }
    let bytes = line.as_bytes();
    let mut in_str = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_str => i += 1,
            b'"' => in_str = !in_str,
            b'/' if !in_str && bytes.get(i + 1) == Some(&b'/') => return &line[..i],
            _ => {}
        }
        i += 1;
    }
    line
}

/// The subcommands a clap help text lists under `Commands:`.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| l.trim() != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The first sentence of a file's `//!` header: its description in the map.
fn first_sentence(src: &str) -> Option<String> {
    let para: Vec<&str> = src
        .lines()
        .take_while(|l| l.starts_with("//!"))
        .map(|l| l.trim_start_matches("//!").trim())
        .take_while(|l| !l.is_empty() && !starts_a_list(l))
        .collect();
    if para.is_empty() {
        return None;
    }
    let text = para.join(" ");
    let mut end = text.len();
    for (i, _) in text.match_indices(". ") {
        let before = &text[..i];
        if !(before.ends_with("e.g") || before.ends_with("i.e") || before.ends_with("etc")) {
            end = i + 1;
            break;
        }
    }
    let s = text[..end].trim().trim_end_matches(':').to_string();
    Some(if s.ends_with('.') { s } else { format!("{s}.") })
}

/// A header line that starts a list (`1. cold: …`, `- header, 64 bytes`,
/// `# Layout`): the paragraph before it is the description.
fn starts_a_list(line: &str) -> bool {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    (digits > 0 && line[digits..].starts_with(". "))
        || line.starts_with("- ")
        || line.starts_with("* ")
        || line.starts_with('#')
}

/// The module map: every Rust file of src/, sorted, with its description.
fn module_map(sources: &[(String, String)]) -> String {
    let mut out = String::new();
    for (file, text) in sources {
        let what = first_sentence(text).unwrap_or_else(|| "(no `//!` header)".into());
        out.push_str(&format!("- `{file}`: {what}\n"));
    }
    out
}

fn map_block(doc: &str) -> Result<&str, String> {
    let b = doc
        .find(MAP_BEGIN)
        .ok_or(format!("no `{MAP_BEGIN}` line"))?;
    let e = doc.find(MAP_END).ok_or(format!("no `{MAP_END}` line"))?;
    if e < b {
        return Err(format!("`{MAP_END}` comes before `{MAP_BEGIN}`"));
    }
    Ok(doc[b + MAP_BEGIN.len()..e].trim_matches('\n'))
}

fn with_map(doc: &str, map: &str) -> Result<String, String> {
    map_block(doc)?;
    let b = doc.find(MAP_BEGIN).unwrap_or(0) + MAP_BEGIN.len();
    let e = doc.find(MAP_END).unwrap_or(doc.len());
    Ok(format!("{}\n{}\n{}", &doc[..b], map.trim_end(), &doc[e..]))
}

/// What differs between the map in `doc` and the expected one: files of src/
/// missing from it, files it lists that src/ lacks, and stale descriptions.
fn map_differences(doc: &str, expected: &str) -> Vec<String> {
    let actual = match map_block(doc) {
        Ok(a) => a,
        Err(e) => return vec![format!("docs/design.md: {e}")],
    };
    let entries = |s: &str| -> Vec<(String, String)> {
        s.lines()
            .filter_map(|l| l.strip_prefix("- `"))
            .filter_map(|l| l.split_once("`: "))
            .map(|(f, d)| (f.to_string(), d.to_string()))
            .collect()
    };
    let (want, have) = (entries(expected), entries(actual));
    let line_of = |file: &str| {
        let start = doc.find(MAP_BEGIN).unwrap_or(0);
        let needle = format!("- `{file}`");
        doc[start..]
            .find(&needle)
            .map(|i| doc[..start + i].lines().count() + 1)
            .unwrap_or(0)
    };
    let mut out = Vec::new();
    for (f, d) in &want {
        match have.iter().find(|(g, _)| g == f) {
            None => out.push(format!(
                "docs/design.md: {f} is missing from the module map"
            )),
            Some((_, e)) if e != d => out.push(format!(
                "docs/design.md:{}: {f}'s description is stale: its header now says \"{d}\"",
                line_of(f)
            )),
            _ => {}
        }
    }
    for (g, _) in &have {
        if !want.iter().any(|(f, _)| f == g) {
            out.push(format!(
                "docs/design.md:{}: {g} is listed but is not a file of src/",
                line_of(g)
            ));
        }
    }
    out
}

// ---------------------------------------------------------------------------
// The tree

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every tracked text file (path, content); binary files are skipped.
fn tracked_texts() -> Vec<(String, String)> {
    let out = Command::new("git")
        .args(["ls-files", "-z"])
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| {
            panic!("these checks need git and a checkout of the repository (git ls-files): {e}")
        });
    assert!(
        out.status.success(),
        "git ls-files failed in {}: {}; these checks need a git checkout of the repository",
        root().display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .split('\0')
        .filter(|f| !f.is_empty())
        .filter_map(|f| {
            // A tracked file deleted in the work tree is not there to check.
            let bytes = std::fs::read(root().join(f)).ok()?;
            String::from_utf8(bytes).ok().map(|t| (f.to_string(), t))
        })
        .collect()
}

/// Every Rust file under src/ (path from the repository root, content),
/// sorted by path.
fn rust_sources() -> Vec<(String, String)> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let entries = std::fs::read_dir(dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for e in entries {
            let p = e
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut files = Vec::new();
    walk(&root().join("src"), &mut files);
    let mut out: Vec<(String, String)> = files
        .into_iter()
        .map(|p| {
            let rel = p
                .strip_prefix(root())
                .expect("under the root")
                .to_string_lossy()
                .replace('\\', "/");
            (rel, read(&p))
        })
        .collect();
    out.sort();
    out
}

fn fail_on(what: &str, found: Vec<Violation>) {
    if !found.is_empty() {
        let list: Vec<String> = found.iter().map(ToString::to_string).collect();
        panic!("{what} ({}):\n{}", found.len(), list.join("\n"));
    }
}

// ---------------------------------------------------------------------------
// Each check catches a planted violation of its kind, and lets the product's
// own words through.

#[test]
fn a_readme_past_its_bound_is_caught() {
    let long = "line\n".repeat(README_MAX_LINES + 1);
    let v = readme_too_long("README.md", &long).expect("caught");
    assert_eq!(v.line, README_MAX_LINES + 1);
    assert!(v.to_string().contains("README.md:321"), "{v}");
    assert!(readme_too_long("README.md", &"line\n".repeat(README_MAX_LINES)).is_none());
}

#[test]
fn a_build_machines_path_is_caught() {
    let planted = "Read ONLY /work/main/knowledge/ship/*.md\nsee /tmp/s13/prereg7.md\n\
                   model at /root/.cache/tidewatch/m.gguf\n~ is /home/alice/tw\n";
    let v = path_violations("docs/x.md", planted);
    let lines: Vec<usize> = v.iter().map(|v| v.line).collect();
    assert_eq!(lines, [1, 2, 3, 4], "{v:?}");
    assert!(v[0]
        .to_string()
        .starts_with("docs/x.md:1: names /work/main/knowledge/ship/*.md"));
}

#[test]
fn documented_and_system_paths_are_not_caught() {
    let fine = "mkdir -p /tmp/tw; cp x /tmp/tw/knowledge.twx\n\
                CARGO_TARGET_DIR=/tmp/tw-aarch64 cargo build\n\
                work=$(mktemp -d /tmp/tidewatch-coverage.XXXXXX)\n\
                /etc/tidewatch/tidewatch.toml /var/lib/tidewatch/models /usr/share/tidewatch\n\
                /opt/tw/deploy/install.sh /run/systemd /proc/self /sys/devices /dev/null\n\
                knowledge/tmp/a.md https://example.org/home/x $HOME/.cache ~/work/x\n";
    assert_eq!(path_violations("x", fine), []);
}

#[test]
fn workflow_words_are_caught() {
    let planted = [
        "// Issue 31: `--config` had no help text",
        "targets (issue N) as promised",
        "written by helpers that read only the manuals",
        "its helper told not to reuse the manual's wording",
        "a faster machine (this session's)",
        "so that the session could end after CI",
        "the twelfth stop's rule",
        "on this stop's machine",
        "the stop before's rule",
        "## Results of stop 7",
        "the eval round of Tuesday",
        "see the closing note",
        "a broader glossary (branch `o-glossary`)",
        "knobs in an experiment worktree",
    ];
    for p in planted {
        let v = workflow_violations("docs/x.md", p);
        assert_eq!(v.len(), 1, "not caught once: {p:?} -> {v:?}");
        assert!(v[0].to_string().starts_with("docs/x.md:1: "), "{}", v[0]);
    }
    // Wrapped across a comment's lines, it counts once, where it starts.
    let wrapped = "/// at 0.55 a DO sensor's drift (one of issue\n/// 30's own) passes\n";
    let v = workflow_violations("src/coverage.rs", wrapped);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(
        v[0].to_string()
            .starts_with("src/coverage.rs:1: \"issue 30\""),
        "{}",
        v[0]
    );
    let wrapped = "- the set was written by\n  helpers of the project\n";
    let v = workflow_violations("docs/x.md", wrapped);
    assert_eq!(v.len(), 1, "{v:?}");
    assert_eq!(v[0].line, 1);
}

#[test]
fn product_words_are_not_caught() {
    let fine = [
        "tidewatch delivers at least once, on a persistent MQTT 5 session",
        "a client that connects with a clean session makes the broker discard the session",
        "Nobody else can take tidewatch's session; the modem's session stuck",
        "Stop the winch and check the drum spooling; inspect pads at the next stop",
        "slow down and stop before the shutdown level",
        "Pure text helpers for the JSON the slot writes; a forked helper must not",
        "0600 round: freezer room -9 degC; the other way round",
        "this issue of the manual; an issue with the pump",
        "the lead-acid battery; 0.05 ahead, the wire lead",
        "branch of the pipe",
    ];
    for f in fine {
        assert_eq!(workflow_violations("x", f), [], "{f:?}");
    }
}

#[test]
fn an_issue_in_help_or_a_printed_string_is_caught() {
    let help = "Options:\n  --tiers <N>  the A72 projection per tier, against issue N's targets\n";
    let v = issue_mentions("`tidewatch eval --help`", help);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].to_string().starts_with("`tidewatch eval --help`:2: "),
        "{}",
        v[0]
    );
    // clap wraps long help: the issue and its letter on two lines.
    let wrapped = "Options:\n  --tiers <N>  per tier, against issue\n          N's targets\n";
    let v = issue_mentions("`tidewatch eval --help`", wrapped);
    assert_eq!(v.len(), 1, "{v:?}");
    assert!(v[0].to_string().contains(":2: \"issue N\""), "{}", v[0]);

    let src = "fn f(out: &mut String) {\n    out.push_str(\"\\ntargets (issue N):\\n\");\n}\n";
    let v = printed_issue_violations("src/measure/tiers.rs", src);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].to_string().starts_with("src/measure/tiers.rs:2: "),
        "{}",
        v[0]
    );
}

#[test]
fn comments_are_not_printed_strings() {
    let src = "// Issue 31: why\n/// Issue N's targets\nlet x = \"a//b\"; // issue 30\n";
    assert_eq!(printed_issue_violations("x.rs", src), []);
    assert_eq!(code_part("let x = \"a//b\"; // c"), "let x = \"a//b\"; ");
}

#[test]
fn subcommands_are_read_from_clap_help() {
    let help = "Usage: tidewatch <COMMAND>\n\nCommands:\n  run     Run\n  index   Build\n  \
                help    Print this message\n\nOptions:\n  -h, --help\n";
    assert_eq!(subcommands(help), ["run", "index"]);
    assert_eq!(subcommands("Usage: tidewatch run\n"), Vec::<String>::new());
}

#[test]
fn a_stale_module_map_is_caught() {
    let sources = vec![
        (
            "src/a.rs".to_string(),
            "//! A does a. More.\n//!\n//! Detail.\nfn a() {}\n".to_string(),
        ),
        ("src/b.rs".to_string(), "//! B, e.g. b. Then.\n".to_string()),
        (
            "src/c.rs".to_string(),
            "//! C, three ways:\n//! 1. one;\n//! 2. two.\n".to_string(),
        ),
    ];
    let map = module_map(&sources);
    assert_eq!(
        map,
        "- `src/a.rs`: A does a.\n- `src/b.rs`: B, e.g. b.\n- `src/c.rs`: C, three ways.\n"
    );
    let doc = |m: &str| format!("# Design\n\n{MAP_BEGIN}\n{m}{MAP_END}\n");
    assert_eq!(map_differences(&doc(&map), &map), Vec::<String>::new());

    // A file of src/ missing, a file listed that src/ lacks, a stale line.
    let stale = "- `src/a.rs`: A did a.\n- `src/gone.rs`: Gone.\n- `src/c.rs`: C, three ways.\n";
    let problems = map_differences(&doc(stale), &map);
    assert_eq!(problems.len(), 3, "{problems:?}");
    assert!(problems.iter().any(|p| p.contains("src/b.rs is missing")));
    assert!(problems
        .iter()
        .any(|p| p.starts_with("docs/design.md:5: src/gone.rs is listed")));
    assert!(problems
        .iter()
        .any(|p| p.starts_with("docs/design.md:4: src/a.rs's description is stale")));

    // Regenerating puts the expected map between the markers.
    let fixed = with_map(&doc(stale), &map).expect("markers");
    assert_eq!(map_differences(&fixed, &map), Vec::<String>::new());
    assert!(map_differences("# Design\n", &map)[0].contains("no `<!-- module map: begin -->`"));
}
