//! What can go wrong in the LLM layer: one error type every part of a slot
//! returns, so the daemon and the commands see a single enum.

#[derive(Debug, Clone, thiserror::Error)]
pub enum LlmError {
    #[error("model file {path} cannot be loaded: {reason}")]
    Load { path: String, reason: String },
    #[error("cannot create a llama.cpp context: {0}")]
    Context(String),
    #[error("decode failed: {0}")]
    Decode(String),
    #[error("prompt needs {need} tokens of context, llm.ctx is {have}")]
    ContextFull { need: usize, have: usize },
    #[error("grammar rejected by llama.cpp: {0}")]
    Grammar(String),
    #[error("generation was cancelled")]
    Cancelled,
    /// A more severe alarm asked for the slot; the job runs again after it.
    #[error("generation was pre-empted by a more severe alarm")]
    Preempted,
    #[error("model output is unusable: {0}")]
    Unusable(String),
    #[error("chat template cannot be applied: {0}")]
    Template(String),
    #[error("slot {0} thread is gone")]
    SlotGone(usize),
    #[error("slot {0} thread is still busy with its last job past this one's deadline")]
    SlotBusy(usize),
}
