//! The manuals' passage blocks computed before their first alarm: each
//! alarm code of the manuals, in each language, raised as its own causes
//! section words it, through retrieval and the prompt exactly as the daemon
//! would, and its passage block's state kept in the disk tier. One code
//! path for `tidewatch warm` and for the warm tier of `eval --tiers`, so
//! what the eval measures is what the command leaves on disk.
//!
//! Owns which alarms stand for the manuals and the loop over them, and what
//! the run may cost beside the daemon (one slot, no RAM tier, first in line
//! for the OOM killer, never root's files in the daemon's state dir); the
//! slot reads and saves (`Slot::warm_block`). Never evicts a state to make
//! room, and never prints: the caller reports progress.

use crate::alarm::{Alarm, Severity};
use crate::llm::{BlockWarm, Slot, Style};
use crate::pipeline::Pipeline;
use crate::retrieval::Index;

/// Why nothing can be warmed.
#[derive(Debug, thiserror::Error)]
pub enum WarmError {
    #[error("llm.prompt_cache_disk_mib is 0: there is no disk tier to warm")]
    NoDisk,
    #[error("state_dir {dir} belongs to uid {owner}, and warm runs as root: the daemon could neither read nor replace the states root would write there; run it as the owner (sudo -u '#{owner}' tidewatch warm ...), as tidewatch-warm.service does")]
    RootInOthersDir { dir: String, owner: u32 },
    #[error("state_dir {dir}: {source}")]
    StateDir { dir: String, source: std::io::Error },
}

/// What warm asks of the OOM killer (`/proc/self/oom_score_adj`, also
/// `OOMScoreAdjust=` in tidewatch-warm.service): the most, so that when
/// memory runs out beside the daemon the kernel kills warm, which loses
/// nothing but time, and never the daemon or the broker. Raising it needs
/// no privilege, so a run by hand gets it too.
pub const OOM_SCORE_ADJ: i32 = 1000;

/// The settings warm runs under: the daemon's model, context shape and disk
/// tier (so the states it writes are the ones the daemon reads), but one
/// slot, since it reads one block at a time, and no RAM tier, since no
/// block is read twice: a second context and a RAM cache beside the
/// daemon's would only take the board's memory.
pub fn settings(mut cfg: crate::config::Config) -> crate::config::Config {
    cfg.llm.slots = 1;
    cfg.llm.prompt_cache_mib = 0;
    cfg
}

/// Whether root may write states into a state dir owned by `owner`: only
/// its own. Root-owned states in the daemon's dir are states the daemon
/// can neither read (0600) nor replace.
pub fn root_may_write(euid: u32, owner: u32) -> bool {
    euid != 0 || owner == 0
}

/// Refuses a run as root in a state dir another user owns (see
/// `root_may_write`). A state dir not made yet is root's to make.
pub fn check_owner(state_dir: &std::path::Path) -> Result<(), WarmError> {
    use std::os::unix::fs::MetadataExt;
    let owner = match std::fs::metadata(state_dir) {
        Ok(m) => m.uid(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(source) => {
            return Err(WarmError::StateDir {
                dir: state_dir.display().to_string(),
                source,
            })
        }
    };
    if root_may_write(nix::unistd::geteuid().as_raw(), owner) {
        Ok(())
    } else {
        Err(WarmError::RootInOthersDir {
            dir: state_dir.display().to_string(),
            owner,
        })
    }
}

/// Puts warm first in line for the OOM killer (`OOM_SCORE_ADJ`). Best
/// effort: a kernel without the file still warms.
pub fn be_the_oom_victim() {
    if let Err(e) = std::fs::write("/proc/self/oom_score_adj", OOM_SCORE_ADJ.to_string()) {
        tracing::warn!(error = %e, "cannot raise warm's oom_score_adj; out of memory, the kernel may pick the daemon");
    }
}

/// The alarm a manual's own causes section describes: its code, the
/// equipment class of its manual, and the section's own alarm sentence as
/// the message (in the manual's language).
fn manual_alarm(hit: &crate::retrieval::Hit, class: Option<String>, n: usize) -> Option<Alarm> {
    let code = Some(hit.section.code())
        .filter(|c| !c.is_empty())?
        .to_string();
    let message = crate::coverage::own_alarm(hit).unwrap_or(hit.section.heading());
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

/// One alarm per causes section of the manuals (each code in each of its
/// languages), only `codes` when any are given (ASCII case ignored).
pub fn manual_alarms(index: &Index, codes: &[String]) -> Vec<Alarm> {
    index
        .causes_sections()
        .into_iter()
        .enumerate()
        .filter_map(|(n, (hit, class))| manual_alarm(&hit, class, n))
        .filter(|a| codes.is_empty() || codes.iter().any(|c| c.eq_ignore_ascii_case(&a.code)))
        .collect()
}

/// What one run did.
#[derive(Debug, Default, Clone)]
pub struct Tally {
    pub computed: usize,
    pub existed: usize,
    pub failed: usize,
    pub bytes: u64,
    pub tokens: usize,
    /// The disk tier's bound was reached at this alarm (and the run stopped).
    pub full_at: Option<usize>,
    /// The size of the state that did not fit.
    pub full_bytes: u64,
}

impl Tally {
    /// About how many bytes the `left` alarms not warmed would need: each
    /// the size of the blocks this run wrote, or, when it wrote none (all
    /// were there already), of the one that did not fit.
    pub fn bytes_for(&self, left: usize) -> u64 {
        let per_block = match self.computed {
            0 => self.full_bytes,
            n => self.bytes / n as u64,
        };
        left as u64 * per_block
    }
}

/// Computes the passage block of each alarm into the disk tier on `slot`,
/// skipping what is there, until the tier's bound. `progress` is called
/// after each alarm with its position and the tally so far.
pub async fn warm_blocks(
    pipeline: &Pipeline,
    slot: &Slot,
    alarms: &[Alarm],
    mut progress: impl FnMut(usize, &Alarm, &Tally),
) -> Result<Tally, WarmError> {
    let mut t = Tally::default();
    for (i, a) in alarms.iter().enumerate() {
        let (hits, _) = pipeline.retrieve(a);
        let prepared = pipeline.prepare(a, hits, false, Style::Schema);
        match slot.warm_block(prepared.request.prompt).await {
            Ok(BlockWarm::Saved { tokens, bytes }) => {
                t.computed += 1;
                t.tokens += tokens;
                t.bytes += bytes as u64;
            }
            Ok(BlockWarm::Exists) => t.existed += 1,
            Ok(BlockWarm::Full { bytes }) => {
                t.full_at = Some(i);
                t.full_bytes = bytes as u64;
                break;
            }
            Ok(BlockWarm::NoDisk) => return Err(WarmError::NoDisk),
            Ok(BlockWarm::NotSaved | BlockWarm::NoBlock) | Err(_) => t.failed += 1,
        }
        progress(i, a, &t);
    }
    Ok(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_writes_only_into_its_own_state_dir() {
        assert!(!root_may_write(0, 998), "the daemon's dir");
        assert!(root_may_write(0, 0));
        assert!(root_may_write(998, 998));
        assert!(
            root_may_write(1000, 998),
            "the file system refuses it anyway"
        );
    }

    #[test]
    fn warm_runs_one_slot_without_a_ram_tier_in_the_daemons_shape() {
        let text = "state_dir = \"/tmp/tw\"\n[knowledge]\nindex = \"k.twx\"\n[llm]\nmodel = \"m.gguf\"\nslots = 4\nctx = 4096\nprompt_cache_mib = 512\n";
        let daemon = crate::config::parse(text, std::path::Path::new("/tmp/tw.toml")).unwrap();
        let w = settings(crate::config::parse(text, std::path::Path::new("/tmp/tw.toml")).unwrap());
        assert_eq!((w.llm.slots, w.llm.prompt_cache_mib), (1, 0));
        assert_eq!(w.llm.ctx, daemon.llm.ctx);
        assert_eq!(w.llm.kv_type, daemon.llm.kv_type);
        assert_eq!(
            w.llm.prompt_cache_disk_mib,
            daemon.llm.prompt_cache_disk_mib
        );
    }

    #[test]
    fn what_is_left_needs_the_size_of_a_block_even_when_none_was_written() {
        let wrote = Tally {
            computed: 4,
            bytes: 40,
            full_bytes: 12,
            ..Tally::default()
        };
        assert_eq!(wrote.bytes_for(3), 30);
        // A second run finds everything there and writes nothing.
        let again = Tally {
            existed: 4,
            full_bytes: 12,
            ..Tally::default()
        };
        assert_eq!(again.bytes_for(3), 36);
    }
}
