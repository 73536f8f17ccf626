//! Fault injection for the tests (cargo feature `fault-injection`): the one
//! place that reads `TIDEWATCH_FAULT`. What each value means belongs to the
//! code it breaks: panics (`crash`), a stalled slot (`llm::fault`), a slow
//! intake (`daemon::hub`). Without the feature there is never a fault.

use std::sync::OnceLock;

/// The `TIDEWATCH_FAULT` value this process runs with, read once; None
/// without the feature or the variable.
pub fn spec() -> Option<&'static str> {
    if !cfg!(feature = "fault-injection") {
        return None;
    }
    static SPEC: OnceLock<Option<String>> = OnceLock::new();
    SPEC.get_or_init(|| std::env::var("TIDEWATCH_FAULT").ok())
        .as_deref()
}
