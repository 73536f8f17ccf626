//! Chosen answers (`llm.answer = "chosen"`, the default): every cause and
//! action published is a numbered item of the manuals, byte for byte, with a
//! source that names the manual, the section and the item's number; and an
//! item holding a prohibition is published with it.
//!
//! Checked against the knowledge files themselves, not against the code that
//! splits them into items, so a defect there fails these tests too.

mod common;

use std::path::{Path, PathBuf};

use common::*;

/// The knowledge file of a document id ("battery-zh").
fn manual_file(root: &Path, doc: &str) -> Option<PathBuf> {
    for sub in ["ship", "buoy", ""] {
        let p = root.join(sub).join(format!("{doc}.md"));
        if p.is_file() {
            return Some(p);
        }
    }
    None
}

/// Why `text` with `source` is not an item of the manuals under `root`, if
/// it is not: the source must name a document, a section heading in it and
/// a number, and the document must hold "N）text" or "N) text" under that
/// heading.
fn not_an_item(root: &Path, text: &str, source: Option<&str>) -> Option<String> {
    let Some(source) = source else {
        return Some(format!("{text:?} has no source"));
    };
    let parsed = source
        .split_once(" § ")
        .and_then(|(doc, rest)| rest.rsplit_once(" #").map(|(s, n)| (doc, s, n)));
    let Some((doc, section, n)) = parsed else {
        return Some(format!("source {source:?} is not \"doc § section #n\""));
    };
    let Some(file) = manual_file(root, doc) else {
        return Some(format!("source {source:?} names no manual file"));
    };
    let md = std::fs::read_to_string(&file).unwrap();
    // A section split into parts is named "… (1/2)"; the heading is the whole.
    let heading = match section.rsplit_once(" (") {
        Some((h, part)) if part.ends_with(')') && part.contains('/') => h,
        _ => section,
    };
    let Some(start) = md.find(&format!("## {heading}\n")) else {
        return Some(format!("{} has no section {heading:?}", file.display()));
    };
    let body = &md[start..];
    let body = &body[..body[3..].find("\n## ").map_or(body.len(), |e| e + 3)];
    let marked = [
        format!("{n}）{text}"),
        format!("{n}) {text}"),
        format!("{n}){text}"),
    ];
    if marked.iter().any(|m| body.contains(m.as_str())) {
        None
    } else {
        Some(format!(
            "{text:?} is not item {n} of {} § {heading}",
            file.display()
        ))
    }
}

/// Every published cause and action of `d` that is not a manual item.
fn non_items(root: &Path, d: &serde_json::Value) -> Vec<String> {
    let mut bad = Vec::new();
    for c in d["probable_causes"].as_array().unwrap() {
        let text = c["cause"].as_str().unwrap();
        bad.extend(not_an_item(root, text, c["source"].as_str()));
    }
    let actions = d["actions"].as_array().unwrap();
    let sources = d["action_sources"].as_array().cloned().unwrap_or_default();
    if actions.len() != sources.len() {
        bad.push(format!(
            "{} actions but {} action_sources",
            actions.len(),
            sources.len()
        ));
    }
    for (i, a) in actions.iter().enumerate() {
        let src = sources.get(i).and_then(|s| s.as_str());
        bad.extend(not_an_item(root, a.as_str().unwrap(), src));
    }
    bad
}

/// What follows the first sentence of `text`, if anything does: the
/// summary that ends a chosen answer is the one sentence the system prompt
/// asks for. A point in a number ("2.5") or an abbreviation ("e.g.") is not
/// a sentence's end.
fn second_sentence(text: &str) -> Option<&str> {
    for (at, c) in text.char_indices() {
        let rest = text[at + c.len_utf8()..].trim();
        if rest.is_empty() {
            return None;
        }
        let before = text[..at].split_whitespace().last().unwrap_or("");
        let stop = match c {
            '。' | '！' | '？' => true,
            '.' | '!' | '?' => {
                text[at + 1..].starts_with(char::is_whitespace)
                    && !before.ends_with(|c: char| c.is_ascii_digit())
                    && before.chars().filter(|c| c.is_alphabetic()).count() > 1
                    && !before.contains('.')
            }
            _ => false,
        };
        if stop {
            return Some(rest);
        }
    }
    None
}

#[test]
fn every_published_cause_and_action_of_a_chosen_answer_is_a_manual_item() {
    let _serial = common::serial();
    // The curated cases of the eval set, then the shipped examples: the
    // order the single eval set had before the two were split, so the same
    // 53 alarms run.
    let curated = std::fs::read_to_string(repo().join("knowledge/eval/alarms.jsonl"))
        .unwrap()
        .lines()
        .filter(|l| l.contains("\"writer\": \"curated\""))
        .map(|l| format!("{l}\n"))
        .collect::<String>();
    let cases =
        curated + &std::fs::read_to_string(repo().join("knowledge/examples/alarms.jsonl")).unwrap();
    // Every 6th case a section covers (the others are answered related, or
    // at once without the model): both languages, ship and buoy, 53
    // alarms, a third of them under plant codes (a covered one coverage
    // takes for related is answered all the same, its summary opening
    // with the note on what the manuals lack). The first 53 only, so that a
    // blind set added to the eval set changes neither what this test runs
    // nor how long CI takes. (The test model reads Chinese a few tokens a
    // character: on some later Chinese alarms, plant-619 among them, its
    // prompt budget holds two causes passages and no checks, and with no
    // action to choose from the answer is written, as `Candidates::of`
    // says.)
    let alarms: Vec<serde_json::Value> = cases
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|c| c.get("coverage").is_none_or(|v| v == "covered"))
        .step_by(6)
        .take(53)
        .map(|c| c["alarm"].clone())
        .collect();
    assert_eq!(alarms.len(), 53, "{} alarms", alarms.len());
    let root = repo().join("knowledge");
    let mut bad = Vec::new();
    let mut published = 0;
    // One state directory for all, as on a board: a passage or system
    // prompt read for one alarm is restored from the disk tier for the next,
    // not read again.
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "chosen", "", "");
    for a in &alarms {
        let (d, log) = diagnose_cli_logged(dir.path(), &cfg, &a.to_string());
        assert_full_diagnosis_shape(&d);
        let id = a["id"].as_str().unwrap();
        assert_eq!(d["mode"], "full", "{id}: not a model answer: {d}\n{log}");
        assert_eq!(d["grounded"], 1.0, "{id}: {d}");
        assert!(
            !log.contains("chosen answer is not the manuals' items"),
            "{id}: {log}"
        );
        assert!(d["timings"]["fed_tokens"].as_u64() > Some(0), "{id}: {d}");
        let summary = d["summary"].as_str().unwrap();
        // A related answer's summary opens with the note on what the
        // manuals lack, a sentence of its own before the answer's.
        let covered = d["coverage"] == "covered";
        if let Some(rest) = second_sentence(summary).filter(|_| covered) {
            bad.push(format!(
                "{id}: the summary goes on after its sentence: {rest:?} in {summary:?}"
            ));
        }
        published +=
            d["probable_causes"].as_array().unwrap().len() + d["actions"].as_array().unwrap().len();
        bad.extend(
            non_items(&root, &d)
                .into_iter()
                .map(|b| format!("{id}: {b}")),
        );
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
    assert!(published >= 2 * alarms.len(), "{published} items published");
}

/// The check of this file finds what it must: a cause that lost its "严禁",
/// a wrong number, a source naming another section.
#[test]
fn the_item_check_catches_a_cut_word_a_wrong_number_and_a_wrong_section() {
    let root = tempfile::tempdir().unwrap();
    let md = "---\ntitle: t\nclasses: [x]\ncodes: [CC-1]\nlang: zh\n---\n# t\n\n## CC-1 原因\n1）轴承过热；2）活塞环漏气。\n\n## CC-1 检查与处理\n1）严禁在停车后10分钟内打开曲轴箱道门；2）查明原因。\n";
    std::fs::write(root.path().join("cc-zh.md"), md).unwrap();
    let r = root.path();
    let ok = "cc-zh § CC-1 检查与处理 #1";
    assert_eq!(
        not_an_item(r, "严禁在停车后10分钟内打开曲轴箱道门", Some(ok)),
        None
    );
    for (text, src) in [
        ("在停车后10分钟内打开曲轴箱道门", ok),
        ("打开曲轴箱道门", ok),
        (
            "严禁在停车后10分钟内打开曲轴箱道门",
            "cc-zh § CC-1 检查与处理 #2",
        ),
        ("严禁在停车后10分钟内打开曲轴箱道门", "cc-zh § CC-1 原因 #1"),
        ("轴承过热", "cc-en § CC-1 causes #1"),
    ] {
        assert!(not_an_item(r, text, Some(src)).is_some(), "{text} {src}");
    }
    assert!(not_an_item(r, "轴承过热", None).is_some());
}

/// A small knowledge base whose checks are all prohibitions, in both
/// languages, so that whatever the model picks holds one.
fn prohibitions(dir: &Path) -> PathBuf {
    let k = dir.join("knowledge");
    std::fs::create_dir_all(&k).unwrap();
    std::fs::write(
        k.join("crankcase-zh.md"),
        "---\ntitle: 主机曲轴箱\nclasses: [main_engine_crankcase]\ncodes: [CC-OMD-HI]\nlang: zh\n---\n# 主机曲轴箱\n\n## CC-OMD-HI 原因\n曲轴箱油雾浓度高。可能原因：1）主轴承或连杆轴承过热；2）活塞环漏气；3）油雾探测器故障。\n\n## CC-OMD-HI 检查与处理\n1）严禁在停车后10分钟内打开曲轴箱道门；2）不得在查明原因前重新起动主机；3）严禁在曲轴箱附近使用明火。\n",
    )
    .unwrap();
    std::fs::write(
        k.join("crankcase-en.md"),
        "---\ntitle: Main engine crankcase\nclasses: [main_engine_crankcase]\ncodes: [CC-OMD-HI]\nlang: en\n---\n# Main engine crankcase\n\n## CC-OMD-HI causes\nCrankcase oil mist high. Probable causes, most likely first: 1) main or crank bearing overheating; 2) piston ring blow-by; 3) oil mist detector fault.\n\n## CC-OMD-HI checks\nChecks and corrective actions: 1) Never open the crankcase doors within 10 minutes of a stop. 2) Do not restart the engine before the cause is found. 3) Never use an open flame near the crankcase.\n",
    )
    .unwrap();
    let idx = dir.join("prohibitions.twx");
    tidewatch::retrieval::build_file(&k, &idx).unwrap();
    idx
}

#[test]
fn an_item_holding_a_prohibition_is_published_with_it() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let idx = prohibitions(dir.path());
    let cfg = config(dir.path(), free_port(), "never", "", "");
    let text = std::fs::read_to_string(&cfg)
        .unwrap()
        .replace(&index().display().to_string(), &idx.display().to_string());
    std::fs::write(&cfg, text).unwrap();
    let root = dir.path().join("knowledge");
    for (message, words) in [
        ("主机曲轴箱油雾浓度高", &["严禁", "不得"][..]),
        ("crankcase oil mist high", &["Never", "Do not"][..]),
    ] {
        let a = alarm(
            "never-1",
            "ME1",
            "CC-OMD-HI",
            "critical",
            "main_engine_crankcase",
            message,
        );
        let d = diagnose_cli(dir.path(), &cfg, &a);
        assert_eq!(d["mode"], "full", "{d}");
        let bad = non_items(&root, &d);
        assert!(bad.is_empty(), "{}", bad.join("\n"));
        let actions = d["actions"].as_array().unwrap();
        assert!(!actions.is_empty(), "{d}");
        for a in actions {
            let a = a.as_str().unwrap();
            assert!(
                words.iter().any(|w| a.starts_with(w)),
                "the prohibition was lost: {a:?} in {d}"
            );
        }
    }
}

/// `eval --answer chosen,written` reports both modes from one run, and the
/// chosen one has no defect, a source on every item and a full grounding.
#[test]
fn eval_puts_chosen_and_written_answers_side_by_side() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let cfg = config(dir.path(), free_port(), "eval", "", "");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tidewatch"))
        .args([
            "eval",
            "--json",
            "--limit",
            "4",
            "--answer",
            "chosen,written",
        ])
        .arg("--config")
        .arg(&cfg)
        .arg("--cases")
        .arg(repo().join("knowledge/eval/alarms.jsonl"))
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    let r: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let modes = r["modes"].as_array().unwrap();
    let names: Vec<&str> = modes.iter().map(|m| m["mode"].as_str().unwrap()).collect();
    assert_eq!(names, ["chosen", "written"], "{r}");
    let (chosen, written) = (&modes[0], &modes[1]);
    assert_eq!(chosen["choice_defects"], 0, "{r}");
    assert_eq!(chosen["items_with_source"], 1.0, "{r}");
    assert_eq!(chosen["grounded_mean"], 1.0, "{r}");
    assert_eq!(chosen["passages_fallbacks"], 0, "{r}");
    assert_eq!(chosen["json_valid_rate"], 1.0, "{r}");
    // Every choice, in either mode, is made reading well-formed JSON.
    for m in modes {
        assert_eq!(m["seen_json_valid_rate"], 1.0, "{}: {r}", m["mode"]);
    }
    for m in modes {
        for k in [
            "chosen_tokens_p50",
            "fed_tokens_p50",
            "generation_ms_p50",
            "ttft_ms_p50",
            "latency_ms_p50",
            "accuracy",
            "a72_projected_s_p50",
        ] {
            assert!(m[k].as_f64().is_some_and(|v| v >= 0.0), "{k}: {r}");
        }
    }
    // A chosen answer's model steps are its summary and the branch points;
    // a written one samples every word of its causes and actions too.
    assert!(
        chosen["chosen_tokens_p50"].as_f64() < written["chosen_tokens_p50"].as_f64(),
        "{r}"
    );
    assert!(
        r["chosen_tokens_ratio"]
            .as_f64()
            .is_some_and(|x| x > 0.0 && x < 1.0),
        "{r}"
    );
}

/// Every numbered item of every passage of the knowledge base, as a chosen
/// answer would publish it, is the manual's text under the manual's number.
#[test]
fn every_item_of_the_knowledge_base_is_the_manuals_text_under_its_number() {
    use tidewatch::retrieval::knowledge;
    let root = repo().join("knowledge");
    let docs = knowledge::load_dir(&root).unwrap();
    let (mut items, mut bad, mut never) = (0, Vec::new(), 0);
    for d in &docs {
        for c in knowledge::chunk(d) {
            let hit = tidewatch::retrieval::Hit {
                passage: 0,
                doc: d.id.clone(),
                section: c.section.clone().into(),
                score: 1.0,
                text: c.text.clone(),
                lang: d.lang.clone(),
                title: d.title.clone(),
            };
            if tidewatch::retrieval::knowledge::ListKind::of(&c.section).is_none() {
                continue;
            }
            for it in tidewatch::diagnosis::Item::of(&hit) {
                items += 1;
                let l = it.text.to_lowercase();
                if ["严禁", "禁止", "不得", "never", "do not"]
                    .iter()
                    .any(|w| l.contains(w))
                {
                    never += 1;
                }
                bad.extend(not_an_item(&root, &it.text, Some(&it.source)));
            }
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {items}:\n{}",
        bad.len(),
        bad.join("\n")
    );
    assert!(items > 1000, "{items} items");
    assert!(never > 0, "no item of the manuals holds a prohibition");
}

/// `llm.summary = "composed"`: the summary is one line built from the alarm
/// and the chosen top cause and first check, in the manuals' words, and the
/// model writes no summary tokens; the lists are the ones "last" chooses.
#[test]
fn a_composed_summary_names_the_top_cause_and_costs_no_model_tokens() {
    let _serial = common::serial();
    let dir = tempfile::tempdir().unwrap();
    let a = alarm(
        "comp-1",
        "ME1",
        "ME-JCW-TEMP-HI",
        "major",
        "main_engine_cooling",
        "jacket cooling water outlet temperature high",
    );
    // Each from a cold state dir, so both read the same prompt the same way.
    let other = tempfile::tempdir().unwrap();
    let last = config(other.path(), free_port(), "comp", "summary = \"last\"", "");
    let model = diagnose_cli(other.path(), &last, &a);
    let cfg = config(
        dir.path(),
        free_port(),
        "comp",
        "summary = \"composed\"",
        "",
    );
    let d = diagnose_cli(dir.path(), &cfg, &a);
    assert_eq!(d["mode"], "full", "{d}");
    assert_eq!(
        d["probable_causes"], model["probable_causes"],
        "{d}\n{model}"
    );
    assert_eq!(d["actions"], model["actions"], "{d}\n{model}");
    let top = &d["probable_causes"][0];
    let first = d["actions"][0].as_str().unwrap();
    let want = format!(
        "ME-JCW-TEMP-HI on ME1: most likely ({}) {}; first check: {}.",
        top["likelihood"].as_str().unwrap(),
        top["cause"].as_str().unwrap().trim_end_matches('.'),
        first.trim_end_matches('.')
    );
    assert_eq!(d["summary"], want.as_str(), "{d}");
    let tokens = |v: &serde_json::Value| v["timings"]["generated_tokens"].as_u64().unwrap();
    assert!(
        tokens(&d) < tokens(&model),
        "composed {} model tokens, last {}: {d}",
        tokens(&d),
        tokens(&model)
    );
}
