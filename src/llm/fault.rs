//! Fault injection for the watchdog's tests (cargo feature
//! `fault-injection`, env `TIDEWATCH_FAULT`): a slot that stops reporting
//! progress after k tokens (`stall-after:k`), or a decode that never returns
//! from native code (`native-stall`). Each fires once per process, except
//! `slow-decode:ms`, which makes every decode call take `ms` longer (a board
//! that reads prompts slowly, for the pre-emption tests).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::watchdog::Progress;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Fault {
    None,
    StallAfter(u32),
    NativeStall,
    SlowDecode(u64),
}

static FIRED: AtomicBool = AtomicBool::new(false);

fn active() -> Fault {
    if FIRED.load(Ordering::SeqCst) {
        return Fault::None;
    }
    match crate::fault::spec() {
        Some("native-stall") => Fault::NativeStall,
        Some(s) if s.starts_with("slow-decode:") => s
            .strip_prefix("slow-decode:")
            .and_then(|n| n.parse().ok())
            .map_or(Fault::None, Fault::SlowDecode),
        Some(s) => s
            .strip_prefix("stall-after:")
            .and_then(|n| n.parse().ok())
            .map_or(Fault::None, Fault::StallAfter),
        None => Fault::None,
    }
}

/// Marks the fault as used; true for the one caller that fires it.
fn fire() -> bool {
    !FIRED.swap(true, Ordering::SeqCst)
}

/// `slow-decode:ms`: every decode call takes `ms` longer, as on a board
/// that reads ~10 prompt tokens a second. Reports progress while it waits.
pub(super) fn slow_decode(progress: &Progress) {
    if let Fault::SlowDecode(ms) = active() {
        std::thread::sleep(Duration::from_millis(ms));
        progress.heartbeat();
    }
}

/// `native-stall`: the decode about to start never returns, as one wedged
/// in llama.cpp would not; only replacing the thread gets the slot back.
pub(super) fn native_stall() {
    if active() == Fault::NativeStall && fire() {
        tracing::warn!("fault injection: native-stall, this decode never returns");
        loop {
            std::thread::sleep(Duration::from_secs(3600));
        }
    }
}

/// `stall-after:k`: once `generated` reaches k, no more progress is
/// reported until the watchdog cancels the job. True when it fired: the job
/// is then cancelled.
pub(super) fn stall_after(generated: u32, progress: &Progress) -> bool {
    let Fault::StallAfter(k) = active() else {
        return false;
    };
    if generated < k || !fire() {
        return false;
    }
    tracing::warn!(after = k, "fault injection: stall-after, no more progress");
    while !progress.cancelled() {
        std::thread::sleep(Duration::from_millis(20));
    }
    true
}
