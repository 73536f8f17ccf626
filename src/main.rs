//! tidewatch's entry point: parse the CLI, load the config, set up logging,
//! run the chosen command, map the outcome to an exit code. Nothing else.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use clap::Parser;
use tidewatch::cli::{self, Cli, Command, IndexCommand};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

/// EX_CONFIG from sysexits.h: the unit file's RestartPreventExitStatus=78
/// stops systemd from restarting into the same bad config every few seconds.
const EX_CONFIG: u8 = 78;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tidewatch: {e:#}");
            if is_config_error(&e) {
                ExitCode::from(EX_CONFIG)
            } else {
                ExitCode::FAILURE
            }
        }
    }
}

/// Errors that a restart cannot fix: a bad config file, a missing or
/// unloadable model, a missing or damaged index, unreadable TLS files.
fn is_config_error(e: &anyhow::Error) -> bool {
    use tidewatch::daemon::DaemonError;
    use tidewatch::llm::LlmError;
    e.chain().any(|c| {
        c.downcast_ref::<cli::CliError>()
            .is_some_and(cli::CliError::is_config)
            || c.is::<tidewatch::config::ConfigError>()
            || c.is::<tidewatch::retrieval::IndexError>()
            || matches!(c.downcast_ref::<LlmError>(), Some(LlmError::Load { .. }))
            || matches!(
                c.downcast_ref::<DaemonError>(),
                Some(DaemonError::Index(_))
                    | Some(DaemonError::Llm(LlmError::Load { .. }))
                    | Some(DaemonError::Mqtt(tidewatch::mqtt::MqttError::Tls { .. }))
            )
    })
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Index {
            command: IndexCommand::Build { knowledge, out },
        } => Ok(cli::index_build(&knowledge, &out)?),
        Command::Query {
            index,
            top_k,
            json,
            text,
        } => Ok(cli::query(&index, top_k, json, &text)?),
        Command::Eval {
            config,
            cases,
            retrieval,
            prompts,
            index,
            limit,
            style,
            json,
            model,
            speculation,
            interleaved,
        } => {
            if retrieval {
                let index = match (index, &config) {
                    (Some(i), _) => i,
                    (None, Some(c)) => tidewatch::config::load(c)?.knowledge.index,
                    (None, None) => {
                        anyhow::bail!("eval --retrieval needs --index FILE or --config FILE")
                    }
                };
                return Ok(cli::eval_retrieval(&index, &cases, limit, json)?);
            }
            let Some(config) = config else {
                anyhow::bail!("eval needs --config FILE (or --retrieval --index FILE)");
            };
            let cfg = tidewatch::config::load(&config)?;
            tidewatch::logging::init("warn");
            let run = cli::EvalRun {
                model,
                cases: &cases,
                limit,
                style: &style,
                json,
                prompts,
                speculation,
                interleaved,
            };
            runtime()?.block_on(cli::eval_full(cfg, run))?;
            Ok(())
        }
        Command::Bench(a) => {
            if a.retrieval {
                return Ok(cli::bench_retrieval(&a)?);
            }
            let Some(path) = a.config.clone() else {
                anyhow::bail!("bench needs --config FILE (or --retrieval)");
            };
            let cfg = tidewatch::config::load(&path)?;
            tidewatch::logging::init("warn");
            match &a.worker {
                Some(spec) => runtime()?.block_on(cli::bench_worker(cfg, &a, spec))?,
                None => cli::bench_models(&path, &cfg, &a)?,
            }
            Ok(())
        }
        Command::CheckConfig { config, offline } => {
            let cfg = tidewatch::config::load(&config)?;
            tidewatch::logging::init("warn");
            Ok(cli::check_config(&cfg, offline)?)
        }
        Command::Diagnose { config, alarm } => {
            let cfg = tidewatch::config::load(&config)?;
            tidewatch::logging::init(if cfg.log_level == "info" {
                "warn"
            } else {
                &cfg.log_level
            });
            runtime()?.block_on(cli::diagnose(cfg, &alarm))?;
            Ok(())
        }
        Command::Run { config } => {
            let cfg = tidewatch::config::load(&config)?;
            let sink = tidewatch::logging::init(&cfg.log_level);
            tracing::info!(config = %config.display(), log = sink, version = env!("CARGO_PKG_VERSION"), "starting");
            runtime()?.block_on(async move {
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
            })?;
            Ok(())
        }
    }
}

fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    // Two workers are plenty: heavy work runs on slot threads, not on tokio.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
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
