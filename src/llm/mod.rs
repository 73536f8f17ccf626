//! The LLM: one loaded model shared by generation slots, each slot an OS
//! thread with its own context, driven from async code under the watchdog.
//! It never talks to MQTT and never builds a diagnosis: `pipeline` does
//! that from a `GenOutput`.
//!
//! Who owns what (imports run only downwards, and nothing imports this file):
//! - `model` is the loaded model: backend, templates, identity; `error` the
//!   one error type.
//! - `slot` is a slot's async handle (watchdog, reset, replace); `thread`
//!   its OS thread; `job` what it is asked and answers.
//! - The KV side, `kv`: the context, the batch, the cached tokens and the
//!   saved prompt states (`prompt_cache`: RAM, and disk in `state_dir`);
//!   `warm` puts the static prefix in at start (`prefix` is its file).
//! - The job side, `tally`: what the running job chose, fed and drafted.
//! - The decoders take both as arguments: `generate` dispatches a job;
//!   `decode_json` writes values with the JSON fed, `choose` picks manual
//!   items, `pick` walks fixed alternatives, `speculate` drafts values,
//!   `value` is a value being sampled and `json_text` the text rules.
//! - `tokens` is how a prompt becomes tokens; `fault` injects the watchdog
//!   tests' faults.

// Every decoder takes the KV side and the job side as two arguments (their
// owners stay apart), which puts several past clippy's count of seven.
#![allow(clippy::too_many_arguments)]

pub mod grammar;
pub mod lookup;
pub mod prefix;
pub mod tokens;

mod choose;
mod decode_json;
mod error;
mod fault;
mod generate;
mod job;
mod json_text;
mod kv;
mod model;
mod pick;
mod prompt_cache;
mod slot;
mod speculate;
mod tally;
mod thread;
mod value;
mod warm;

pub use error::LlmError;
pub use job::{top_logits, GenOutput, GenRequest, SlotSettings, Step, Style};
pub use kv::BlockWarm;
pub use model::{backend, llama_cpp_build, Model, ModelInfo, LLAMA_CPP_SYS};
pub use prefix::PrefixSpec;
pub use prompt_cache::DiskSpec;
pub use slot::{Slot, SlotCounters, SlotFailure};
pub use speculate::verify_rows;
pub use warm::Warmed;
