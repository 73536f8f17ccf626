//! Fault injection for the tests (cargo feature `fault-injection`): the one
//! place that reads `TIDEWATCH_FAULT`. What each value means belongs to the
//! code it breaks: panics (`crash`), a stalled slot (`llm::fault`), a slow
//! intake (`daemon::hub`). Without the feature there is never a fault.
//! Unit tests, which have no process to set a variable for, make disk
//! operations fail on their own thread through `disk` (the outbox's).

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

/// Disk operations a unit test makes fail on its own thread, with the error
/// a bad disk gives; the code under test asks `check` before each.
#[cfg(test)]
pub mod disk {
    use std::cell::RefCell;
    use std::collections::HashMap;

    thread_local! {
        static FAIL: RefCell<HashMap<&'static str, nix::errno::Errno>> =
            RefCell::new(HashMap::new());
    }

    /// Makes `op` fail with `errno` on this thread from now on.
    pub fn fail(op: &'static str, errno: nix::errno::Errno) {
        FAIL.with(|f| f.borrow_mut().insert(op, errno));
    }

    /// The disk works again.
    pub fn heal() {
        FAIL.with(|f| f.borrow_mut().clear());
    }

    /// The error `op` fails with on this thread, if it was made to.
    pub fn check(op: &'static str) -> std::io::Result<()> {
        match FAIL.with(|f| f.borrow().get(op).copied()) {
            Some(errno) => Err(std::io::Error::from(errno)),
            None => Ok(()),
        }
    }
}
