//! `tidewatch diagnose`: one alarm from a file through the daemon's own
//! pipeline, no MQTT; the diagnosis JSON on stdout.

use super::{print_json, CommandError};
use crate::config::Config;

async fn diagnose(cfg: Config, alarm_path: &std::path::Path) -> Result<(), CommandError> {
    let bytes = std::fs::read(alarm_path).map_err(|e| CommandError::Alarm {
        path: alarm_path.to_owned(),
        reason: e.to_string(),
    })?;
    let alarm = crate::alarm::parse(&bytes, None, cfg.mqtt.max_alarm_bytes).map_err(|e| {
        CommandError::Alarm {
            path: alarm_path.to_owned(),
            reason: e.to_string(),
        }
    })?;
    let (pipeline, mut slots) = crate::load::pipeline(cfg, true).await?;
    let d = pipeline.diagnose(&mut slots[0], &alarm).await;
    let mut out = std::io::stdout().lock();
    print_json(&mut out, &d)?;
    Ok(())
}

/// Loads the config and runs `diagnose` on the command runtime.
pub fn run(config: &std::path::Path, alarm: &std::path::Path) -> Result<(), CommandError> {
    let cfg = super::load_config(config)?;
    crate::config::check_files(&cfg)?;
    super::runtime()?.block_on(diagnose(cfg, alarm))
}
