//! `tidewatch warm`: precomputes the prompt states of the passage blocks
//! the manuals' own alarms retrieve (each alarm code, in each language, as
//! retrieval assembles it for that code's alarm) into the disk tier of the
//! prompt cache, so a fault's first alarm reads only its alarm block. Skips
//! what is there, so it can be stopped and run again.

use std::io::Write;
use std::time::Instant;

use super::CommandError;
use crate::alarm::{Alarm, Severity};
use crate::config::Config;
use crate::llm::{BlockWarm, Style};

/// The alarm a manual's own causes section describes: its code, the
/// equipment class of its manual, and the section's own alarm sentence as
/// the message (in the manual's language).
fn manual_alarm(hit: &crate::retrieval::Hit, class: Option<String>, n: usize) -> Option<Alarm> {
    let code = hit.section.split_whitespace().next()?.to_string();
    let message = crate::coverage::own_alarm(hit).unwrap_or(&hit.section);
    Some(Alarm {
        id: format!("warm-{n}"),
        ts: crate::diagnosis::now_rfc3339(),
        equipment: "WARM".into(),
        code,
        severity: Severity::Major,
        kind: class,
        value: None,
        unit: None,
        threshold: None,
        message: Some(message.to_string()),
    })
}

/// What one run did, for its last line.
#[derive(Debug, Default)]
struct Tally {
    computed: usize,
    existed: usize,
    failed: usize,
    bytes: u64,
    tokens: usize,
    /// The disk tier's bound was reached at this alarm.
    full_at: Option<usize>,
}

async fn warm(cfg: Config, codes: &[String]) -> Result<(), CommandError> {
    let t0 = Instant::now();
    let (pipeline, slots) = crate::load::pipeline(cfg, true).await?;
    let index = pipeline.index.current();
    let alarms: Vec<Alarm> = index
        .causes_sections()
        .into_iter()
        .enumerate()
        .filter_map(|(n, (hit, class))| manual_alarm(&hit, class, n))
        .filter(|a| codes.is_empty() || codes.iter().any(|c| c.eq_ignore_ascii_case(&a.code)))
        .collect();
    if alarms.is_empty() {
        return Err(CommandError::Usage(format!(
            "no alarm code of the manuals is among --codes {}",
            codes.join(",")
        )));
    }
    let mut t = Tally::default();
    let mut err = std::io::stderr().lock();
    for (i, a) in alarms.iter().enumerate() {
        let (hits, _) = pipeline.retrieve(a);
        let prepared = pipeline.prepare(a, hits, false, Style::Schema);
        match slots[0].warm_block(prepared.request.prompt).await {
            Ok(BlockWarm::Saved { tokens, bytes }) => {
                t.computed += 1;
                t.tokens += tokens;
                t.bytes += bytes as u64;
            }
            Ok(BlockWarm::Exists) => t.existed += 1,
            Ok(BlockWarm::Full) => {
                t.full_at = Some(i);
                break;
            }
            Ok(BlockWarm::NoDisk) => {
                return Err(CommandError::Usage(
                    "llm.prompt_cache_disk_mib is 0: there is no disk tier to warm".into(),
                ))
            }
            Ok(BlockWarm::NotSaved | BlockWarm::NoBlock) | Err(_) => t.failed += 1,
        }
        let _ = write!(
            err,
            "\rwarm {}/{} {:<24} computed {} already there {} failed {}",
            i + 1,
            alarms.len(),
            a.code,
            t.computed,
            t.existed,
            t.failed
        );
    }
    let _ = writeln!(err);
    if let Some(i) = t.full_at {
        let per_block = t.bytes / t.computed.max(1) as u64;
        let _ = writeln!(
            err,
            "the disk tier is full (llm.prompt_cache_disk_mib = {}) after {i} of {} alarms; all of them need about {} MiB more",
            pipeline.cfg.llm.prompt_cache_disk_mib,
            alarms.len(),
            ((alarms.len() - i) as u64 * per_block) >> 20
        );
    }
    for slot in slots {
        slot.stop(std::time::Duration::from_secs(60)).await;
    }
    println!(
        "warm: {} alarms of the manuals, {} passage blocks computed ({} tokens, {:.1} MiB written), {} already on disk, {} not kept, {:.1} s",
        alarms.len(),
        t.computed,
        t.tokens,
        t.bytes as f64 / (1024.0 * 1024.0),
        t.existed,
        t.failed,
        t0.elapsed().as_secs_f64()
    );
    Ok(())
}

/// Loads the config and runs `warm` on the command runtime.
pub fn run(config: &std::path::Path, codes: &[String]) -> Result<(), CommandError> {
    let cfg = super::load_config(config)?;
    if cfg.llm.prompt_cache_disk_mib == 0 {
        return Err(CommandError::Usage(format!(
            "{}: llm.prompt_cache_disk_mib is 0, so there is no disk tier to warm",
            config.display()
        )));
    }
    super::runtime()?.block_on(warm(cfg, codes))
}
