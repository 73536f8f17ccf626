//! `tidewatch warm`: precomputes the prompt states of the passage blocks
//! the manuals' own alarms retrieve (each alarm code, in each language, as
//! retrieval assembles it for that code's alarm) into the disk tier of the
//! prompt cache, so a fault's first alarm reads only its alarm block. Skips
//! what is there, so it can be stopped and run again.

use std::io::Write;
use std::time::Instant;

use super::CommandError;
use crate::config::Config;

async fn warm(cfg: Config, codes: &[String]) -> Result<(), CommandError> {
    let t0 = Instant::now();
    let (pipeline, slots) = crate::load::pipeline(crate::warm::settings(cfg), true).await?;
    let alarms = crate::warm::manual_alarms(&pipeline.index.current(), codes);
    if alarms.is_empty() {
        return Err(CommandError::Usage(format!(
            "no alarm code of the manuals is among --codes {}",
            codes.join(",")
        )));
    }
    // Locked per line, never across the await: the slot thread logs to
    // stderr too, and would wait for the lock while warm waits for it.
    let t = crate::warm::warm_blocks(&pipeline, &slots[0], &alarms, |i, a, t| {
        let _ = write!(
            std::io::stderr().lock(),
            "\rwarm {}/{} {:<24} computed {} already there {} failed {}",
            i + 1,
            alarms.len(),
            a.code,
            t.computed,
            t.existed,
            t.failed
        );
    })
    .await?;
    let mut err = std::io::stderr().lock();
    let _ = writeln!(err);
    if let Some(i) = t.full_at {
        let left = alarms.len() - i;
        let _ = writeln!(
            err,
            "the disk tier is full (llm.prompt_cache_disk_mib = {}) after {i} of {} alarms; the {left} left need about {} MiB more",
            pipeline.cfg.llm.prompt_cache_disk_mib,
            alarms.len(),
            t.bytes_for(left).div_ceil(1 << 20)
        );
    }
    drop(err);
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
    crate::warm::check_owner(&cfg.state_dir)?;
    crate::warm::be_the_oom_victim();
    super::runtime()?.block_on(warm(cfg, codes))
}
