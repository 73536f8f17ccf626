//! tidewatch: an offline diagnosis daemon for marine equipment alarms.
//!
//! # Layout
//! Three parts, and imports only run downwards: the core diagnoses one
//! alarm; `daemon` is the service around it; `measure` measures the core.
//! `commands` (the one-shot commands) use the core and `measure`; only
//! `main` enters the daemon.
//!
//! **The core.** `alarm` checks an alarm and names the topics;
//! `pipeline` takes it to a diagnosis: `reading` reads what its text says
//! of the fault, `retrieval` finds the passages (and, in `retrieval::kinds`,
//! which manuals' equipment the alarm names: a plant's `kind` is a hint),
//! `coverage` judges whether one is about the alarm's fault (an alarm
//! retrieval found nothing for is answered at once), `prompt` builds a short prompt, `llm` runs it on a slot thread under the
//! `watchdog`, and the output becomes a `diagnosis` (or a degraded one from
//! retrieval if the model fails). `grounding` drops what of the model's
//! answer is not text or not supported by the passages, and answers from the
//! passages when nothing is left. `load` loads the index, the model and the
//! slots for everyone who runs the pipeline; `warm` computes the manuals'
//! passage blocks into the disk tier before their first alarm; `durable`
//! replaces files so a power cut leaves the old or the new one whole.
//! `language` says which of the manuals' two languages a text, and so
//! an alarm's answer, is in; `verdict` holds coverage's three words, which
//! a diagnosis carries and labelled alarms are written in. `config` is read once at start; `logging` picks journald or stderr;
//! `crash` turns a panic anywhere in the daemon into a logged abort, so
//! systemd restarts it rather than leave it half alive. `cli` is the
//! command line's shape; `render` turns published diagnoses into text for
//! people (`tidewatch show`).
//!
//! **The daemon**, how an alarm flows through it:
//! 1. `daemon::mqtt` polls the broker and hands each publish on
//!    `{prefix}/alarm/#` to the hub.
//! 2. `alarm` checks the payload (size, UTF-8, fields); rejects go to the
//!    error topic. Accepted alarms are kept in `daemon::inbox`, and
//!    acknowledged to the broker once journaled there (fsync'd); one the
//!    inbox cannot take, once its diagnosis is on disk (`daemon::delivery`
//!    decides when).
//! 3. `daemon::queue` orders accepted alarms by severity, merges duplicates
//!    and decides who is triaged when full.
//! 4. A worker per slot takes a job to the `pipeline`.
//! 5. The hub keeps the diagnosis in `daemon::outbox` and publishes it from
//!    there until the broker has it.
//!    `daemon::systemd` reports readiness, status and liveness throughout;
//!    `daemon::reload` swaps in a rebuilt index on SIGHUP, between jobs.
//! 6. A watchkeeper's answer on `{prefix}/feedback/{equipment}` is checked
//!    by `feedback` against the record of published diagnoses, kept as a
//!    site note (`notes`), published on `{prefix}/notes/{equipment}`, and
//!    read by the next jobs (`daemon::feedback` holds the live notes).
//!
//! `cases` reads labelled alarms, the one format of the example alarms
//! coverage judges by (`knowledge/examples`) and of the eval set
//! (`knowledge/eval`), which only `measure` reads.
//!
//! `notes` is the crew's word on diagnoses: what a site note holds and its
//! bounds, and `SiteNotes`, the notes that count (none withdrawn), as the
//! pipeline reads them; `notes::store` keeps them in a journal in
//! `state_dir/notes` that the daemon and `tidewatch notes` both append to.
//!
//! **The measurements**: `measure::eval` (accuracy on labeled alarms),
//! `measure::speculation` (generation speed with lookup decoding),
//! `measure::tiers` (what the prompt cache's tiers and `warm` save an
//! alarm), `measure::bench` (speed and memory per model configuration).

pub mod alarm;
pub(crate) mod cases;
pub mod cli;
pub mod commands;
pub mod config;
pub mod coverage;
pub mod crash;
pub mod daemon;
pub mod diagnosis;
mod durable;
pub(crate) mod fault;
pub mod feedback;
pub mod grounding;
pub mod language;
pub mod llm;
pub(crate) mod load;
pub mod logging;
pub(crate) mod measure;
pub mod notes;
pub(crate) mod pipeline;
pub mod prompt;
pub mod reading;
pub(crate) mod render;
pub mod retrieval;
pub mod verdict;
pub(crate) mod warm;
pub(crate) mod watchdog;

#[cfg(test)]
mod test_support;
