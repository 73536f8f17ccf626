//! `tidewatch bench`: speed and memory of every combination of the model
//! options, each in its own process (`--worker` is the child side), or the
//! index at scale with --retrieval.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::{print_json, CommandError};
use crate::cli::BenchArgs;
use crate::config::Config;
use crate::measure::bench;

fn bench_retrieval(a: &BenchArgs) -> Result<(), CommandError> {
    let cases = crate::measure::eval::load_cases(&super::cases_file(a.cases.clone(), None)?)?;
    let knowledge = super::knowledge_dir(a.knowledge.clone())?;
    let work = std::env::temp_dir().join(format!("tidewatch-bench-{}", std::process::id()));
    let r = bench::retrieval(&knowledge, &cases, a.passages, &work);
    let _ = std::fs::remove_dir_all(&work);
    let r = r?;
    let mut out = std::io::stdout().lock();
    if a.json {
        print_json(&mut out, &r)?;
    } else {
        writeln!(
            out,
            "retrieval at {} passages: build {:.0} ms, file {} bytes ({:.0} B/passage, {:.2}x raw text), open {:.2} ms, query p50 {:.0} us p99 {:.0} us ({} queries)",
            r.passages, r.build_ms, r.file_bytes, r.bytes_per_passage, r.size_over_raw, r.open_ms, r.query_p50_us, r.query_p99_us, r.queries
        )?;
    }
    Ok(())
}

/// The KV types to measure: those asked for, else the config's.
fn kv_types(a: &BenchArgs, cfg: &Config) -> Vec<String> {
    if a.kv_type.is_empty() {
        vec![cfg.llm.kv_type.name().to_string()]
    } else {
        a.kv_type.clone()
    }
}

fn cartesian(a: &BenchArgs, cfg: &Config) -> Vec<bench::Combo> {
    let or = |v: &Vec<u32>, d: u32| if v.is_empty() { vec![d] } else { v.clone() };
    let models = if a.model.is_empty() {
        vec![cfg.llm.model.clone()]
    } else {
        a.model.clone()
    };
    let mut out = Vec::new();
    for m in &models {
        for t in or(&a.threads, cfg.llm.threads) {
            for b in or(&a.batch, cfg.llm.batch) {
                for c in or(&a.ctx, cfg.llm.ctx) {
                    for kv in kv_types(a, cfg) {
                        out.push(bench::Combo {
                            model: m.clone(),
                            threads: t,
                            batch: b,
                            ctx: c,
                            kv_type: kv,
                            pp: a.pp,
                            tg: a.tg,
                            reps: a.reps,
                            rag_cases: a.rag_cases,
                            speculation: a.speculation,
                        });
                    }
                }
            }
        }
    }
    out
}

fn budget_mib(a: &BenchArgs) -> Result<f64, CommandError> {
    let total = bench::parse_mib(&a.memory_budget).ok_or_else(|| {
        CommandError::Usage(format!(
            "--memory-budget must look like 4G or 3500M, got {:?}",
            a.memory_budget
        ))
    })?;
    let reserve = bench::parse_mib(&a.os_reserve).ok_or_else(|| {
        CommandError::Usage(format!(
            "--os-reserve must look like 1G or 800M, got {:?}",
            a.os_reserve
        ))
    })?;
    Ok(total - reserve)
}

/// The child side: one combination, JSON on stdout.
async fn bench_worker(cfg: Config, a: &BenchArgs, spec: &str) -> Result<(), CommandError> {
    let combo: bench::Combo = serde_json::from_str(spec)
        .map_err(|e| CommandError::Usage(format!("bad --worker spec: {e}")))?;
    let cases = if combo.rag_cases > 0 {
        crate::measure::eval::load_cases(a.cases.as_deref().unwrap_or(Path::new("")))?
    } else {
        Vec::new()
    };
    let r = bench::worker(&cfg, &combo, &cases, budget_mib(a)?).await?;
    writeln!(
        std::io::stdout().lock(),
        "{}",
        serde_json::to_string(&r).unwrap_or_default()
    )?;
    Ok(())
}

/// The parent side: every combination measured in its own child, then with
/// --decide each model's accuracy and the recommendation; the report on
/// stdout, and an error if a model's jobs cost more than --max-overhead.
fn bench_models(
    cfg_path: &std::path::Path,
    cfg: &Config,
    a: &BenchArgs,
) -> Result<(), CommandError> {
    let combos = cartesian(a, cfg);
    refuse_unconfigurable(cfg_path, &combos)?;
    let exe = std::env::current_exe()?;
    let mut results = measure_each(&exe, cfg_path, a, &combos)?;
    let mut decision = None;
    if a.decide {
        let acc = accuracies(&exe, cfg_path, a, &combos)?;
        for r in &mut results {
            r.accuracy = combos
                .iter()
                .find(|c| {
                    c.model
                        .file_name()
                        .map(|n| n.to_string_lossy().into_owned())
                        == Some(r.model.clone())
                })
                .and_then(|c| acc.get(&c.model).copied());
        }
        decision = Some(bench::decide(&results, a.margin));
    }
    if let Some(path) = &a.json_to {
        let text = serde_json::to_string_pretty(&results).unwrap_or_default();
        std::fs::write(path, text + "\n")
            .map_err(|e| CommandError::Usage(format!("--json-to {}: {e}", path.display())))?;
    }
    report(&results, decision, a.json)?;
    check_overhead(&results, a.max_overhead)
}

/// Before any run: a combination the daemon would refuse is an error here,
/// not a measurement (and never a recommendation).
fn refuse_unconfigurable(
    cfg_path: &std::path::Path,
    combos: &[bench::Combo],
) -> Result<(), CommandError> {
    let cfg_text = std::fs::read_to_string(cfg_path)
        .map_err(|e| CommandError::Usage(format!("config {}: {e}", cfg_path.display())))?;
    for c in combos {
        bench::check_configurable(&cfg_text, cfg_path, c)?;
    }
    Ok(())
}

/// Runs each combination in a child process of its own (`--worker`), so
/// its peak memory is its own, showing progress on stderr.
fn measure_each(
    exe: &std::path::Path,
    cfg_path: &std::path::Path,
    a: &BenchArgs,
    combos: &[bench::Combo],
) -> Result<Vec<bench::ComboResult>, CommandError> {
    let tty = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut results = Vec::new();
    for (i, c) in combos.iter().enumerate() {
        let what = format!(
            "{} threads={} batch={} ctx={}",
            c.model.display(),
            c.threads,
            c.batch,
            c.ctx
        );
        if tty {
            eprint!("\r\x1b[2K[{}/{}] {what}", i + 1, combos.len());
        } else {
            eprintln!("bench [{}/{}] {what}", i + 1, combos.len());
        }
        results.push(measure_in_child(exe, cfg_path, a, c, what)?);
    }
    if tty {
        eprintln!();
    }
    Ok(results)
}

/// One combination in a child process; its last stderr line is the reason
/// if it fails.
fn measure_in_child(
    exe: &std::path::Path,
    cfg_path: &std::path::Path,
    a: &BenchArgs,
    c: &bench::Combo,
    what: String,
) -> Result<bench::ComboResult, CommandError> {
    let spec = serde_json::to_string(c).unwrap_or_default();
    let mut cmd = std::process::Command::new(exe);
    cmd.arg("bench").arg("--config").arg(cfg_path);
    if let Some(cases) = &a.cases {
        cmd.arg("--cases").arg(cases);
    }
    let out = cmd
        .arg("--memory-budget")
        .arg(&a.memory_budget)
        .arg("--os-reserve")
        .arg(&a.os_reserve)
        .arg("--worker")
        .arg(&spec)
        .stderr(std::process::Stdio::piped())
        .output()?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .unwrap_or("")
            .to_string();
        return Err(bench::BenchError::Worker { what, reason: last }.into());
    }
    let r = serde_json::from_slice(&out.stdout).map_err(|e| bench::BenchError::Worker {
        what: what.clone(),
        reason: e.to_string(),
    })?;
    Ok(r)
}

/// Each model's accuracy on --eval-cases alarms, from `tidewatch eval` in a
/// child process (once per model, whatever its combinations).
fn accuracies(
    exe: &std::path::Path,
    cfg_path: &std::path::Path,
    a: &BenchArgs,
    combos: &[bench::Combo],
) -> Result<HashMap<PathBuf, f64>, CommandError> {
    let mut acc: HashMap<PathBuf, f64> = HashMap::new();
    for c in combos {
        if acc.contains_key(&c.model) {
            continue;
        }
        eprintln!(
            "bench: accuracy of {} on {} eval alarms",
            c.model.display(),
            a.eval_cases
        );
        let out = std::process::Command::new(exe)
            .args(["eval", "--json", "--config"])
            .arg(cfg_path)
            .arg("--cases")
            .arg(a.cases.as_deref().unwrap_or(Path::new("")))
            .arg("--limit")
            .arg(a.eval_cases.to_string())
            .arg("--model")
            .arg(&c.model)
            .stderr(std::process::Stdio::inherit())
            .output()?;
        let v: serde_json::Value =
            serde_json::from_slice(&out.stdout).map_err(|e| bench::BenchError::Worker {
                what: format!("eval of {}", c.model.display()),
                reason: e.to_string(),
            })?;
        // Accuracy: the share of alarms answered in full, validly, naming
        // an expected cause (degraded answers are the manuals' text).
        let accuracy = v["accuracy"]
            .as_f64()
            .ok_or_else(|| bench::BenchError::Worker {
                what: format!("eval of {}", c.model.display()),
                reason: "its report has no accuracy".into(),
            })?;
        acc.insert(c.model.clone(), accuracy);
    }
    Ok(acc)
}

/// The results (and the decision) as JSON, or as a table with each
/// model's overhead over llama_perf and the decision's reasons.
fn report(
    results: &[bench::ComboResult],
    decision: Option<bench::Decision>,
    json: bool,
) -> Result<(), CommandError> {
    let mut out = std::io::stdout().lock();
    if json {
        if let Some(d) = decision {
            writeln!(
                out,
                "{}",
                serde_json::to_string_pretty(
                    &serde_json::json!({"results": results, "decision": d})
                )
                .unwrap_or_default()
            )?;
        } else {
            print_json(&mut out, &results)?;
        }
        return Ok(());
    }
    write!(out, "{}", bench::table(results))?;
    for r in results {
        match r.gen_overhead {
            Some(o) => writeln!(
                out,
                "overhead over llama_perf in daemon jobs ({}): {:+.1}%",
                r.model,
                o * 100.0
            )?,
            None => writeln!(
                out,
                "overhead over llama_perf in daemon jobs ({}): not measured (no RAG job timed)",
                r.model
            )?,
        }
    }
    if let Some(d) = decision {
        writeln!(out)?;
        for r in &d.reasons {
            writeln!(out, "{r}")?;
        }
    }
    Ok(())
}

fn check_overhead(results: &[bench::ComboResult], max: Option<f64>) -> Result<(), CommandError> {
    use bench::OverheadFault;
    let Some(max) = max else { return Ok(()) };
    let Some((r, fault)) = bench::over_overhead(results, max) else {
        return Ok(());
    };
    let model = r.model.clone();
    Err(match fault {
        OverheadFault::Unmeasured => CommandError::OverheadUnmeasured { model },
        OverheadFault::Over(o) => CommandError::Overhead {
            model,
            overhead: o * 100.0,
            max,
        },
        OverheadFault::Under(o) => CommandError::OverheadLeak {
            model,
            shortfall: -o * 100.0,
            max,
        },
    })
}

/// Dispatches `bench`: --retrieval, the parent over all combinations, or
/// the `--worker` child measuring one.
pub fn run(mut a: BenchArgs) -> Result<(), CommandError> {
    if a.retrieval {
        return bench_retrieval(&a);
    }
    let Some(path) = a.config.clone() else {
        return Err(CommandError::Usage(
            "bench needs --config FILE (or --retrieval)".into(),
        ));
    };
    let cfg = crate::config::load(&path)?;
    crate::logging::init("warn");
    // Resolved once, here: the children get the same file by --cases.
    if a.worker.is_none() && (a.rag_cases > 0 || a.decide) {
        a.cases = Some(super::cases_file(
            a.cases.take(),
            Some(&cfg.knowledge.index),
        )?);
    }
    match &a.worker {
        Some(spec) => super::runtime()?.block_on(bench_worker(cfg, &a, spec)),
        None => bench_models(&path, &cfg, &a),
    }
}
