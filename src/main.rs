//! tidewatch's entry point: parse the command line and dispatch it. The
//! daemon (`run`) is wired here: its runtime, logging and the signals (only
//! main listens for them); every other command's body lives in `commands`.
//! Errors a restart cannot fix exit 78.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tidewatch::cli::{Cli, Command, IndexCommand};
use tidewatch::commands;
use tidewatch::daemon::DaemonError;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// EX_CONFIG from sysexits.h: the unit file's RestartPreventExitStatus=78
/// stops systemd from restarting into the same bad config every few seconds.
const EX_CONFIG: u8 = 78;

fn main() -> ExitCode {
    match dispatch(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidewatch: {}", error_text(&e));
            if e.chain().any(is_config_error) {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// The error and its causes, each said once: an error whose message
/// already carries its source (`{path}: {source}`) would otherwise print
/// the source twice.
fn error_text(e: &anyhow::Error) -> String {
    let mut text = e.to_string();
    for cause in e.chain().skip(1) {
        let c = cause.to_string();
        if !text.contains(&c) {
            text.push_str(": ");
            text.push_str(&c);
        }
    }
    // An I/O cause is said as the file checks say theirs: lowercase,
    // without the "(os error N)" the path already makes redundant.
    for cause in e.chain() {
        if let Some(io) = cause.downcast_ref::<std::io::Error>() {
            text = text.replace(&io.to_string(), &tidewatch::config::io_problem(io));
        }
    }
    text
}

/// Whether an error in the chain is one a restart cannot fix, from a
/// command or from the daemon.
fn is_config_error(e: &(dyn std::error::Error + 'static)) -> bool {
    commands::is_config_error(e)
        || e.downcast_ref::<DaemonError>()
            .is_some_and(DaemonError::is_config)
}

fn dispatch(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Run { config } => run_daemon(&config)?,
        Command::Diagnose {
            config,
            alarm,
            notes,
        } => commands::diagnose::run(&config, &alarm, notes.as_deref())?,
        Command::Warm { config, codes } => commands::warm::run(&config, &codes)?,
        Command::Index {
            command:
                IndexCommand::Build {
                    knowledge,
                    out,
                    strict,
                },
        } => commands::index::build(&knowledge, &out, strict)?,
        Command::Index {
            command: IndexCommand::Check { dir, strict },
        } => commands::index::check(&dir, strict)?,
        Command::Query {
            index,
            config,
            top_k,
            json,
            text,
        } => {
            let index = match (index, config) {
                (Some(i), _) => i,
                (None, Some(c)) => tidewatch::config::load(&c)?.knowledge.index,
                (None, None) => anyhow::bail!("query needs --index FILE or --config FILE"),
            };
            commands::index::query(&index, top_k.into(), json, &text)?
        }
        Command::Eval(a) => commands::eval::run(a)?,
        Command::Bench(a) => commands::bench::run(a)?,
        Command::CheckConfig { config, offline } => commands::check::run(&config, offline)?,
        Command::Show(a) => commands::show::run(&a)?,
        Command::Feedback(a) => commands::feedback::run(&a)?,
        Command::Notes { command } => commands::notes::run(command)?,
    }
    Ok(())
}

fn run_daemon(config: &std::path::Path) -> anyhow::Result<()> {
    let cfg = tidewatch::config::load(config)?;
    // Every path tried before anything starts: a typo in one is a config
    // error naming its key (exit 78), not a failure halfway through start.
    tidewatch::config::check_files(&cfg)?;
    let sink = tidewatch::logging::init(&cfg.log_level);
    tidewatch::crash::abort_on_panic();
    tracing::info!(config = %config.display(), log = sink, version = env!("CARGO_PKG_VERSION"), "starting");
    commands::runtime()?.block_on(async move {
        let cancel = CancellationToken::new();
        let c = cancel.clone();
        tokio::spawn(async move {
            shutdown_signal().await;
            c.cancel();
        });
        let reload = Arc::new(Notify::new());
        // Installed before the model loads: SIGHUP's default action
        // would end the process, and `systemctl reload` may come early.
        reload_signal(reload.clone())?;
        tidewatch::daemon::run(cfg, reload, cancel).await?;
        anyhow::Ok(())
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM received"),
        _ = int.recv() => tracing::info!("SIGINT received"),
    }
}

/// Turns each SIGHUP (`systemctl reload`) into an index reload request.
fn reload_signal(reload: Arc<Notify>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup = signal(SignalKind::hangup()).context("cannot listen for SIGHUP")?;
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP received; reloading the index");
            // A stored permit: a SIGHUP during a reload (or before the daemon
            // waits for one) is not lost, and a burst makes one more reload.
            reload.notify_one();
        }
    });
    Ok(())
}
