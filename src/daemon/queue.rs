//! The alarm queue policy: a bounded priority queue (severity, then arrival),
//! duplicate merging, and who gets triaged when it is full.
//!
//! Pure and synchronous; time is passed in. The daemon owns one `Scheduler`
//! behind a std mutex (never held across an await). `T` is whatever the caller
//! needs to acknowledge an alarm later (an MQTT publish, in the daemon).

use std::collections::HashMap;

use crate::alarm::{Alarm, Severity};

/// Hard ceiling on `[queue] capacity`; the ordering lives in a heapless vector
/// of this size, so queue memory is fixed whatever the arrival rate.
pub const MAX_CAPACITY: usize = crate::config::MAX_QUEUE_CAPACITY;
/// Most alarms merged into one job; past this, duplicates are triaged at once
/// so a chattering sensor cannot grow a job without bound.
pub const MAX_MERGED: usize = 64;

/// Priority key: lower sorts first (critical before warning, older first).
type Key = (Severity, u64);

/// Alarms answered by one generation: the first, plus duplicates merged into it.
#[derive(Debug)]
pub struct Job<T> {
    pub seq: u64,
    pub severity: Severity,
    pub first_ms: u64,
    pub alarms: Vec<(Alarm, T)>,
    /// Stopped once for a more severe alarm; never stopped again.
    pub preempted: bool,
}

impl<T> Job<T> {
    pub fn primary(&self) -> &Alarm {
        &self.alarms[0].0
    }
}

/// What happened to an offered alarm.
#[derive(Debug)]
pub enum Offer<T> {
    Queued,
    /// Merged into a queued job for the same equipment and code.
    Merged,
    /// The queue is full and this alarm ranks no higher than the lowest queued
    /// one: answer it now from retrieval alone.
    Triage(Alarm, T),
    /// Queued, and to make room the lowest-ranked job was pushed out: answer
    /// its alarms now from retrieval alone.
    Evicted(Job<T>),
}

#[derive(Debug)]
pub struct Scheduler<T> {
    capacity: usize,
    dedup_window_ms: u64,
    /// Keys sorted best first.
    order: heapless::Vec<Key, MAX_CAPACITY>,
    jobs: HashMap<u64, Job<T>>,
    next_seq: u64,
}

impl<T> Scheduler<T> {
    pub fn new(capacity: usize, dedup_window_ms: u64) -> Self {
        Self {
            capacity: capacity.clamp(1, MAX_CAPACITY),
            dedup_window_ms,
            order: heapless::Vec::new(),
            jobs: HashMap::new(),
            next_seq: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.order.len()
    }

    fn insert_key(&mut self, key: Key) {
        let at = self.order.binary_search(&key).unwrap_or_else(|i| i);
        // Capacity was checked by the caller, so this cannot overflow.
        let _ = self.order.insert(at, key);
    }

    pub fn offer(&mut self, alarm: Alarm, token: T, now_ms: u64) -> Offer<T> {
        if self.dedup_window_ms > 0 {
            let dup = self.jobs.values().find(|j| {
                let p = j.primary();
                p.equipment == alarm.equipment
                    && p.code == alarm.code
                    && now_ms.saturating_sub(j.first_ms) <= self.dedup_window_ms
            });
            if let Some(seq) = dup.map(|j| j.seq) {
                let job = self.jobs.get_mut(&seq).expect("found above");
                if job.alarms.len() >= MAX_MERGED {
                    return Offer::Triage(alarm, token);
                }
                // A duplicate that is more severe lifts the whole job.
                if alarm.severity < job.severity {
                    let old = (job.severity, seq);
                    job.severity = alarm.severity;
                    let new = (job.severity, seq);
                    if let Ok(i) = self.order.binary_search(&old) {
                        self.order.remove(i);
                    }
                    job.alarms.push((alarm, token));
                    self.insert_key(new);
                } else {
                    job.alarms.push((alarm, token));
                }
                return Offer::Merged;
            }
        }
        let seq = self.next_seq;
        self.next_seq += 1;
        let key = (alarm.severity, seq);
        let mut evicted = None;
        if self.order.len() >= self.capacity {
            let worst = *self.order.last().expect("full queue is not empty");
            // Only a strictly more severe alarm displaces a queued one: among
            // equals, the one that arrived first keeps its place.
            if alarm.severity >= worst.0 {
                return Offer::Triage(alarm, token);
            }
            self.order.pop();
            evicted = self.jobs.remove(&worst.1);
        }
        self.insert_key(key);
        self.jobs.insert(
            seq,
            Job {
                seq,
                severity: alarm.severity,
                first_ms: now_ms,
                alarms: vec![(alarm, token)],
                preempted: false,
            },
        );
        match evicted {
            Some(j) => Offer::Evicted(j),
            None => Offer::Queued,
        }
    }

    /// The severity and primary alarm id of the job `pop` would give next.
    pub fn peek(&self) -> Option<(Severity, &str)> {
        let (sev, seq) = self.order.first()?;
        Some((*sev, self.jobs.get(seq)?.primary().id.as_str()))
    }

    /// Puts back a job that was stopped for a more severe alarm: it keeps
    /// its place (its sequence number), so it runs again before anything of
    /// its severity that came after it. It was admitted already, so it goes
    /// in over `capacity`; only at the hard ceiling does the lowest-ranked
    /// job make room, and it is returned for triage.
    pub fn requeue(&mut self, mut job: Job<T>) -> Option<Job<T>> {
        job.preempted = true;
        let key = (job.severity, job.seq);
        let mut evicted = None;
        if self.order.is_full() {
            let worst = self.order.pop().expect("full queue is not empty");
            evicted = self.jobs.remove(&worst.1);
        }
        self.insert_key(key);
        self.jobs.insert(job.seq, job);
        evicted
    }

    /// The highest-priority job, if any.
    pub fn pop(&mut self) -> Option<Job<T>> {
        if self.order.is_empty() {
            return None;
        }
        let (_, seq) = self.order.remove(0);
        self.jobs.remove(&seq)
    }
}

/// What a slot is working on, for the pre-emption rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Running {
    pub severity: Severity,
    /// Already stopped once: a job is pre-empted at most once.
    pub preempted: bool,
}

/// Which busy slot to stop for the `waiting` job, if any: only when no slot
/// is free, and only a job strictly less severe than the waiting one that
/// was never stopped before; the least severe such job (on a tie, the
/// lowest slot).
pub fn preemption(slots: &[Option<Running>], waiting: Option<Severity>) -> Option<usize> {
    let waiting = waiting?;
    if slots.iter().any(Option::is_none) {
        return None;
    }
    slots
        .iter()
        .enumerate()
        .filter_map(|(i, r)| r.map(|r| (i, r)))
        .filter(|(_, r)| !r.preempted && r.severity > waiting)
        .max_by_key(|(i, r)| (r.severity, std::cmp::Reverse(*i)))
        .map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alarm(id: &str, eq: &str, code: &str, sev: Severity) -> Alarm {
        Alarm {
            id: id.into(),
            equipment: eq.into(),
            severity: sev,
            ..crate::test_support::alarm(code)
        }
    }

    #[test]
    fn jobs_come_out_by_severity_then_arrival() {
        let mut s = Scheduler::new(8, 0);
        s.offer(alarm("w", "A", "1", Severity::Warning), (), 0);
        s.offer(alarm("m1", "B", "2", Severity::Major), (), 1);
        s.offer(alarm("c", "C", "3", Severity::Critical), (), 2);
        s.offer(alarm("m2", "D", "4", Severity::Major), (), 3);
        let ids: Vec<String> = std::iter::from_fn(|| s.pop())
            .map(|j| j.primary().id.clone())
            .collect();
        assert_eq!(ids, vec!["c", "m1", "m2", "w"]);
    }

    #[test]
    fn duplicate_within_window_is_merged_and_answered_with_the_job() {
        let mut s = Scheduler::new(8, 60_000);
        assert!(matches!(
            s.offer(alarm("a", "P1", "X", Severity::Minor), (), 0),
            Offer::Queued
        ));
        assert!(matches!(
            s.offer(alarm("b", "P1", "X", Severity::Minor), (), 5_000),
            Offer::Merged
        ));
        assert!(matches!(
            s.offer(alarm("c", "P1", "X", Severity::Minor), (), 70_000),
            Offer::Queued
        ));
        let j = s.pop().unwrap();
        assert_eq!(j.alarms.len(), 2);
        assert_eq!(s.len(), 1);
    }

    #[test]
    fn more_severe_duplicate_lifts_its_job() {
        let mut s = Scheduler::new(8, 60_000);
        s.offer(alarm("a", "P1", "X", Severity::Warning), (), 0);
        s.offer(alarm("b", "P2", "Y", Severity::Major), (), 1);
        s.offer(alarm("c", "P1", "X", Severity::Critical), (), 2);
        assert_eq!(s.pop().unwrap().primary().id, "a");
    }

    #[test]
    fn full_queue_triages_the_newcomer_unless_it_is_more_severe() {
        let mut s = Scheduler::new(2, 0);
        s.offer(alarm("a", "A", "1", Severity::Major), (), 0);
        s.offer(alarm("b", "B", "2", Severity::Minor), (), 1);
        assert!(
            matches!(s.offer(alarm("c", "C", "3", Severity::Minor), (), 2), Offer::Triage(a, ()) if a.id == "c")
        );
        match s.offer(alarm("d", "D", "4", Severity::Critical), (), 3) {
            Offer::Evicted(j) => assert_eq!(j.primary().id, "b"),
            other => panic!("expected eviction, got {other:?}"),
        }
        assert_eq!(s.len(), 2);
        assert_eq!(s.pop().unwrap().primary().id, "d");
    }

    #[test]
    fn merged_alarms_are_bounded() {
        let mut s = Scheduler::new(4, 60_000);
        for i in 0..MAX_MERGED {
            s.offer(alarm(&i.to_string(), "P", "X", Severity::Minor), (), 0);
        }
        assert!(matches!(
            s.offer(alarm("x", "P", "X", Severity::Minor), (), 0),
            Offer::Triage(..)
        ));
    }

    #[test]
    fn storm_keeps_queue_bounded() {
        let mut s = Scheduler::new(16, 0);
        let mut triaged = 0;
        for i in 0..10_000u64 {
            match s.offer(
                alarm(&i.to_string(), &format!("E{i}"), "X", Severity::Minor),
                (),
                i,
            ) {
                Offer::Triage(..) => triaged += 1,
                Offer::Evicted(j) => triaged += j.alarms.len(),
                _ => {}
            }
            assert!(s.len() <= 16);
        }
        assert_eq!(triaged, 10_000 - 16);
    }

    fn busy(severity: Severity, preempted: bool) -> Option<Running> {
        Some(Running {
            severity,
            preempted,
        })
    }

    #[test]
    fn a_more_severe_alarm_stops_the_least_severe_busy_slot() {
        use Severity::*;
        let slots = [busy(Major, false), busy(Warning, false)];
        assert_eq!(preemption(&slots, Some(Critical)), Some(1));
        assert_eq!(preemption(&slots, Some(Major)), Some(1));
        // Nothing strictly less severe than the waiting job: no stop.
        assert_eq!(preemption(&slots, Some(Warning)), None);
        assert_eq!(preemption(&slots, None), None);
    }

    #[test]
    fn a_free_slot_or_a_job_stopped_once_is_never_preempted() {
        use Severity::*;
        assert_eq!(
            preemption(&[None, busy(Warning, false)], Some(Critical)),
            None
        );
        assert_eq!(preemption(&[busy(Warning, true)], Some(Critical)), None);
        assert_eq!(
            preemption(&[busy(Warning, true), busy(Minor, false)], Some(Critical)),
            Some(1)
        );
    }

    #[test]
    fn a_stopped_job_runs_again_before_later_jobs_of_its_severity() {
        let mut s = Scheduler::new(2, 0);
        s.offer(alarm("w1", "A", "1", Severity::Warning), (), 0);
        let w1 = s.pop().unwrap();
        s.offer(alarm("w2", "B", "2", Severity::Warning), (), 1);
        s.offer(alarm("c", "C", "3", Severity::Critical), (), 2);
        assert!(s.requeue(w1).is_none(), "a full queue took the job back");
        let order: Vec<(String, bool)> = std::iter::from_fn(|| s.pop())
            .map(|j| (j.primary().id.clone(), j.preempted))
            .collect();
        assert_eq!(
            order,
            vec![
                ("c".to_string(), false),
                ("w1".to_string(), true),
                ("w2".to_string(), false)
            ]
        );
    }

    #[test]
    fn peek_names_the_next_job() {
        let mut s = Scheduler::new(4, 0);
        assert!(s.peek().is_none());
        s.offer(alarm("w", "A", "1", Severity::Warning), (), 0);
        s.offer(alarm("c", "C", "3", Severity::Critical), (), 1);
        assert_eq!(s.peek(), Some((Severity::Critical, "c")));
    }
}
