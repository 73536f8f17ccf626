//! The slot watchdog: when a generation counts as hung, decided from progress
//! records with time passed in.
//!
//! Owns `Progress` (what a slot thread publishes after every decode step) and
//! `judge` (the pure rule). The async driver in `llm` polls `judge` and acts on
//! its verdict; this module never cancels, sleeps or reads a clock itself except
//! through `Progress::now_ms`, so tests control time.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Progress a slot thread publishes; read by the watchdog and by llama.cpp's
/// abort callback. Atomics only: the slot thread must never wait on the watcher.
#[derive(Debug)]
pub struct Progress {
    epoch: Instant,
    busy: AtomicBool,
    job_started_ms: AtomicU64,
    last_progress_ms: AtomicU64,
    tokens: AtomicU32,
    budget: AtomicU32,
    /// Set by the watchdog; checked between decode steps and inside decode by
    /// the abort callback, so even a long prompt chunk stops promptly.
    cancel: AtomicBool,
    /// Set once when the process shuts down; unlike `cancel`, a new job does
    /// not clear it, so a warm-up or a queued job cannot outlive the stop.
    stop: AtomicBool,
    /// Set when a more severe alarm waits for this slot: the job stops at
    /// its next model call (`LlmError::Preempted`); a new job clears it.
    preempt: AtomicBool,
}

impl Default for Progress {
    fn default() -> Self {
        Self::new()
    }
}

impl Progress {
    pub fn new() -> Self {
        Self {
            epoch: Instant::now(),
            busy: AtomicBool::new(false),
            job_started_ms: AtomicU64::new(0),
            last_progress_ms: AtomicU64::new(0),
            tokens: AtomicU32::new(0),
            budget: AtomicU32::new(0),
            cancel: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            preempt: AtomicBool::new(false),
        }
    }

    pub fn now_ms(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn start_job(&self, budget: u32) {
        let now = self.now_ms();
        self.cancel.store(false, Ordering::SeqCst);
        self.preempt.store(false, Ordering::SeqCst);
        self.tokens.store(0, Ordering::Relaxed);
        self.budget.store(budget, Ordering::Relaxed);
        self.job_started_ms.store(now, Ordering::Relaxed);
        self.last_progress_ms.store(now, Ordering::Relaxed);
        self.busy.store(true, Ordering::SeqCst);
    }

    pub fn finish_job(&self) {
        self.busy.store(false, Ordering::SeqCst);
    }

    /// Called after every decode step (prompt chunk or generated token).
    pub fn tick(&self, generated: u32) {
        self.tokens.store(generated, Ordering::Relaxed);
        self.last_progress_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    /// Called by llama.cpp's abort callback between graph nodes, i.e. many
    /// times a second while a decode computes: a long prompt batch counts as
    /// progress, and only a decode stuck inside one kernel goes quiet.
    pub fn heartbeat(&self) {
        self.last_progress_ms
            .store(self.now_ms(), Ordering::Relaxed);
    }

    pub fn cancel(&self) {
        self.cancel.store(true, Ordering::SeqCst);
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
    }

    /// Asks the running job to make way for a more severe alarm.
    pub fn request_preempt(&self) {
        self.preempt.store(true, Ordering::SeqCst);
    }

    pub fn preempt_requested(&self) -> bool {
        self.preempt.load(Ordering::Relaxed)
    }

    pub fn cancelled(&self) -> bool {
        self.cancel.load(Ordering::Relaxed) || self.stop.load(Ordering::Relaxed)
    }

    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            busy: self.busy.load(Ordering::SeqCst),
            job_started_ms: self.job_started_ms.load(Ordering::Relaxed),
            last_progress_ms: self.last_progress_ms.load(Ordering::Relaxed),
            tokens: self.tokens.load(Ordering::Relaxed),
            budget: self.budget.load(Ordering::Relaxed),
        }
    }
}

/// A consistent-enough copy of a slot's progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Snapshot {
    pub busy: bool,
    pub job_started_ms: u64,
    pub last_progress_ms: u64,
    pub tokens: u32,
    pub budget: u32,
}

/// Limits from `[watchdog]`, with the job's deadline possibly shortened.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub stall: Duration,
    pub deadline: Duration,
}

/// Why a slot counts as hung.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Healthy,
    /// No decode step finished for `stall_timeout_s`.
    Stalled {
        idle_ms: u64,
    },
    /// The job has run past `deadline_s`.
    PastDeadline {
        elapsed_ms: u64,
    },
    /// More tokens than the job's budget: the generation loop lost its bound.
    OverBudget {
        tokens: u32,
        budget: u32,
    },
}

impl Verdict {
    pub fn is_hung(self) -> bool {
        self != Verdict::Healthy
    }

    pub fn reason(self) -> &'static str {
        match self {
            Verdict::Healthy => "healthy",
            Verdict::Stalled { .. } => "stalled",
            Verdict::PastDeadline { .. } => "past deadline",
            Verdict::OverBudget { .. } => "over token budget",
        }
    }
}

/// The rule. An idle slot is always healthy.
pub fn judge(s: &Snapshot, now_ms: u64, limits: &Limits) -> Verdict {
    if !s.busy {
        return Verdict::Healthy;
    }
    let idle = now_ms.saturating_sub(s.last_progress_ms);
    let elapsed = now_ms.saturating_sub(s.job_started_ms);
    if s.budget > 0 && s.tokens > s.budget {
        return Verdict::OverBudget {
            tokens: s.tokens,
            budget: s.budget,
        };
    }
    if elapsed > limits.deadline.as_millis() as u64 {
        return Verdict::PastDeadline {
            elapsed_ms: elapsed,
        };
    }
    if idle > limits.stall.as_millis() as u64 {
        return Verdict::Stalled { idle_ms: idle };
    }
    Verdict::Healthy
}

/// True if the tail of `tokens` is one short n-gram repeated: the signature of
/// a small model stuck in a loop. Pure, so the slot and tests share it.
pub fn is_looping<T: PartialEq>(tokens: &[T]) -> bool {
    const MIN_REPEATS: usize = 4;
    for n in 1..=8usize {
        let need = n * MIN_REPEATS;
        if tokens.len() < need.max(8) {
            continue;
        }
        let tail = &tokens[tokens.len() - need..];
        let unit = &tail[..n];
        if tail.chunks(n).all(|c| c == unit) {
            return true;
        }
    }
    false
}

/// Whether the process as a whole may tell systemd it is alive: the MQTT loop
/// has turned recently and no slot has been lost.
pub fn process_alive(
    mqtt_last_turn_ms: u64,
    now_ms: u64,
    mqtt_limit: Duration,
    slots_lost: u64,
) -> bool {
    slots_lost == 0 && now_ms.saturating_sub(mqtt_last_turn_ms) <= mqtt_limit.as_millis() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        stall: Duration::from_secs(5),
        deadline: Duration::from_secs(60),
    };

    fn busy(started: u64, last: u64, tokens: u32) -> Snapshot {
        Snapshot {
            busy: true,
            job_started_ms: started,
            last_progress_ms: last,
            tokens,
            budget: 100,
        }
    }

    #[test]
    fn idle_slot_is_healthy_however_old() {
        let s = Snapshot {
            busy: false,
            ..busy(0, 0, 0)
        };
        assert_eq!(judge(&s, 10_000_000, &L), Verdict::Healthy);
    }

    #[test]
    fn slot_without_progress_for_stall_timeout_is_stalled() {
        let s = busy(0, 1_000, 3);
        assert_eq!(judge(&s, 6_000, &L), Verdict::Healthy);
        assert_eq!(judge(&s, 6_001, &L), Verdict::Stalled { idle_ms: 5_001 });
    }

    #[test]
    fn steady_progress_past_deadline_is_hung() {
        let s = busy(0, 60_500, 50);
        assert_eq!(
            judge(&s, 60_600, &L),
            Verdict::PastDeadline { elapsed_ms: 60_600 }
        );
    }

    #[test]
    fn over_budget_is_hung_even_when_progressing() {
        let s = busy(0, 100, 101);
        assert_eq!(
            judge(&s, 200, &L),
            Verdict::OverBudget {
                tokens: 101,
                budget: 100
            }
        );
    }

    #[test]
    fn repeated_ngrams_are_loops_and_prose_is_not() {
        assert!(is_looping(&[1, 2, 1, 2, 1, 2, 1, 2]));
        assert!(is_looping(&[9, 9, 9, 9, 9, 9, 9, 9]));
        assert!(is_looping(&[5, 1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3]));
        assert!(!is_looping(&[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]));
        assert!(!is_looping(&[1, 1, 1]));
    }

    #[test]
    fn progress_clock_drives_judgement() {
        let p = Progress::new();
        p.start_job(10);
        let s = p.snapshot();
        assert!(s.busy);
        assert_eq!(judge(&s, s.last_progress_ms + 4_999, &L), Verdict::Healthy);
        assert!(judge(&s, s.last_progress_ms + 5_001, &L).is_hung());
        p.finish_job();
        assert_eq!(judge(&p.snapshot(), u64::MAX, &L), Verdict::Healthy);
    }

    #[test]
    fn lost_slot_or_stuck_mqtt_stops_the_process_heartbeat() {
        let lim = Duration::from_secs(30);
        assert!(process_alive(1_000, 20_000, lim, 0));
        assert!(!process_alive(1_000, 40_000, lim, 0));
        assert!(!process_alive(1_000, 2_000, lim, 1));
    }
}
