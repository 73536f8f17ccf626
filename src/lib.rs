//! tidewatch: an offline diagnosis daemon for marine equipment alarms.
//!
//! # Layout: how an alarm flows
//! 1. `mqtt` polls the broker and hands each publish on `{prefix}/alarm/+`
//!    to the `daemon`.
//! 2. `alarm` checks the payload (size, UTF-8, fields); rejects go to the
//!    error topic.
//! 3. `queue` orders accepted alarms by severity, merges duplicates and
//!    decides who is triaged when full.
//! 4. A worker per slot takes a job to the `pipeline`: `retrieval` finds the
//!    passages, `prompt` builds a short prompt, `llm` runs it on a slot thread
//!    under the `watchdog`, and the output becomes a `diagnosis` (or a
//!    degraded one from retrieval if the model fails). `grounding` drops
//!    what of the model's answer is not text or not supported by the
//!    passages, and answers from the passages when nothing is left.
//! 5. The daemon publishes the diagnosis and only then acknowledges the alarm.
//!    `systemd` reports readiness, status and liveness throughout.
//!
//! `config` is read once at start; `logging` picks journald or stderr;
//! `crash` turns a panic anywhere in `run` into a logged abort, so systemd
//! restarts the daemon rather than leave it half alive.
//! `cli` is the command line's shape; `commands` the one-shot commands.
//! `reload` swaps in a rebuilt index on SIGHUP, between jobs. `render` turns
//! published diagnoses into text for people (`tidewatch show`).

pub mod alarm;
pub mod cli;
pub mod commands;
pub mod config;
pub mod crash;
pub mod daemon;
pub mod diagnosis;
pub mod durable;
pub mod grounding;
pub mod llm;
pub mod load;
pub mod logging;
pub mod measure;
pub mod pipeline;
pub mod prompt;
pub mod render;
pub mod retrieval;
pub mod watchdog;

// config checks `[queue] capacity` against the queue's ceiling by this path;
// it goes once config owns the ceiling.
use daemon::queue;
