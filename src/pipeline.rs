//! The diagnosis pipeline: alarm → retrieval → prompt → slot → diagnosis, with
//! the retry-on-fallback and degrade steps that make sure every alarm gets an
//! answer.
//!
//! Owns the choice between modes and the shared counters; every model answer
//! passes `grounding::guard` before it becomes a diagnosis. It does not know
//! about MQTT, queues or systemd; the daemon and the one-shot `diagnose`
//! command both call it.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::alarm::Alarm;
use crate::config::{Answer, Config};
use crate::coverage::{self, Coverage, SiteCover};
use crate::diagnosis::{
    self, dedup_sources, round2, Cause, Diagnosis, Item, Mode, Source, Timings,
};
use crate::grounding::{self, Verdict};
use crate::llm::grammar::{passage_index, Choices};
use crate::llm::{GenOutput, GenRequest, LlmError, Model, Slot, SlotCounters, SlotFailure, Style};
use crate::notes::{Note, SiteNotes};
use crate::prompt::{self, strip_think};
use crate::retrieval::knowledge::ListKind;
use crate::retrieval::{with_every_part, Hit, Index, LiveIndex};

/// The pipeline's counters, published on the status topic: answers by kind
/// and the slots' health. What the daemon counts of its intake is the
/// hub's (`daemon::hub::Intake`).
#[derive(Debug, Default)]
pub struct Counters {
    pub diagnosed: AtomicU64,
    pub degraded: AtomicU64,
    pub triage: AtomicU64,
    /// Of `diagnosed`, the answers the grounding guard replaced with the
    /// passages' items (mode "passages"): the model did answer, so they stay
    /// in `diagnosed`, which says how often the model ran to the end.
    pub passages: AtomicU64,
    /// Alarms the manuals hold nothing for (coverage "none"), answered at
    /// once without the model.
    pub unmatched: AtomicU64,
    /// Chosen answers whose causes or actions were not the passages' items:
    /// a defect of the choice code (`grounding::guard_chosen`), never a
    /// model error. Tests hold it at 0.
    pub choice_defects: AtomicU64,
    /// Alarms whose `kind` mapped to no manual's class (the text decided
    /// their equipment): each such kind is logged once, with the config
    /// key that maps it (`knowledge.kind_aliases`).
    pub unmapped_kinds: AtomicU64,
    /// The unmapped kinds logged so far, bounded: a plant with a thousand
    /// names is told of the first `UNMAPPED_KINDS_LOGGED`.
    pub kinds_logged: std::sync::Mutex<std::collections::BTreeSet<String>>,
    pub slots: Arc<SlotCounters>,
}

/// How many distinct unmapped kinds are named in the log.
pub const UNMAPPED_KINDS_LOGGED: usize = 256;

impl Counters {
    pub fn to_json(&self) -> serde_json::Value {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        serde_json::json!({
            "diagnosed": g(&self.diagnosed),
            "degraded": g(&self.degraded),
            "triage": g(&self.triage),
            "passages": g(&self.passages),
            "unmatched": g(&self.unmatched),
            "choice_defects": g(&self.choice_defects),
            "unmapped_kinds": g(&self.unmapped_kinds),
            "slot_restarts": g(&self.slots.restarts),
            "slots_lost": g(&self.slots.lost),
            "preempted": g(&self.slots.preempted),
        })
    }
}

pub struct Pipeline {
    /// Swappable, so `systemctl reload` can bring in updated manuals; each
    /// job reads it once, in `retrieve`.
    pub index: Arc<LiveIndex>,
    pub model: Arc<Model>,
    pub cfg: Arc<Config>,
    pub counters: Arc<Counters>,
    /// Labelled example alarms coverage also judges by (`load::examples`).
    pub examples: Option<Arc<crate::coverage::Examples>>,
}

/// A diagnosis with what produced it.
pub struct Trace {
    pub diagnosis: Diagnosis,
    /// The first attempt's output, if the slot produced any.
    pub first: Option<GenOutput>,
    /// The passages retrieval returned.
    pub hits: Vec<Hit>,
    /// What the grounding guard did to the model's answer that was
    /// published; None when no model answer was (degraded).
    pub verdict: Option<Verdict>,
}

/// A prepared generation: the request and the passages its P-labels refer to.
pub struct Prepared {
    pub request: GenRequest,
    pub hits: Vec<Hit>,
    /// A chosen answer's candidates, whose order the request's choices keep.
    pub candidates: Option<Candidates>,
}

/// The manual items a chosen answer picks from: those the prompt shows in
/// full, causes from "causes" passages and actions from "checks" passages,
/// in the passages' order and then the manual's.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Candidates {
    pub causes: Vec<Candidate>,
    pub actions: Vec<Candidate>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    pub item: Item,
    /// Index into the prepared passages.
    pub hit: usize,
}

impl Candidates {
    /// The items of `hits` that `shown` (the prompt's user turn) holds, each
    /// passage's first `items` (0: all). None when either list would be
    /// empty: the model then writes the answer (there is nothing to choose).
    pub fn of(hits: &[Hit], shown: &str, items: usize) -> Option<Self> {
        let mut c = Candidates::default();
        for (i, h) in hits.iter().enumerate() {
            let list = match h.section.list() {
                Some(ListKind::Causes) => &mut c.causes,
                Some(ListKind::Checks) => &mut c.actions,
                None => continue,
            };
            let limit = if items == 0 { usize::MAX } else { items };
            for item in Item::of(h).into_iter().take(limit) {
                let known = list.iter().any(|o: &Candidate| o.item.text == item.text);
                if shown.contains(&item.text) && !known {
                    list.push(Candidate { item, hit: i });
                }
            }
        }
        (!c.causes.is_empty() && !c.actions.is_empty()).then_some(c)
    }

    pub fn choices(&self) -> Choices {
        let texts = |v: &[Candidate]| v.iter().map(|c| c.item.text.clone()).collect();
        Choices {
            causes: texts(&self.causes),
            actions: texts(&self.actions),
        }
    }
}

impl Pipeline {
    /// The passages for an alarm, from the index in use now. Called once per
    /// job (the retry reuses its hits), so a reload while a job runs leaves
    /// that job's passages, and the P-labels its prompt cites, untouched.
    pub fn retrieve(&self, alarm: &Alarm) -> (Vec<Hit>, f64) {
        self.retrieve_in(&self.index.current(), alarm)
    }

    /// Coverage of `alarm` (its `lookup`), judged on `hits` from `index`,
    /// by the example alarms and by a confirmed site note (`site`).
    fn judge(
        &self,
        index: &Index,
        alarm: &Alarm,
        hits: &[Hit],
        site: Option<&SiteCover>,
    ) -> coverage::Judgement {
        let like = self
            .examples
            .as_deref()
            .map(|examples| coverage::Likeness { examples });
        coverage::judge_in_noted(index, alarm, hits, like, site)
    }

    /// What the site notes say of `alarm` (as raised: the crew noted it so)
    /// and the confirmed item whose section covers it, found in `hits` or
    /// else in its manual; then the judgement on both, and the notes' say
    /// with the note it rested on.
    fn judge_noted(
        &self,
        index: &Index,
        (alarm, lookup): (&Alarm, &Alarm),
        hits: &[Hit],
        notes: &SiteNotes,
    ) -> (
        coverage::Judgement,
        Option<SiteCover>,
        crate::diagnosis::site::Site,
    ) {
        if notes.is_empty() {
            let j = self.judge(index, lookup, hits, None);
            return (j, None, Default::default());
        }
        let none = coverage::Examples::default();
        let examples = self.examples.as_deref().unwrap_or(&none);
        let noted = coverage::site::about(notes, alarm, examples);
        let cover = coverage::site::covering(&noted)
            .and_then(|(note, item)| site_cover(index, hits, note, &item));
        let j = self.judge(index, lookup, hits, cover.as_ref());
        let mut site = coverage::site::said(&noted, j.note.clone());
        if site
            .causes
            .iter()
            .any(|c| matches!(c.said, crate::diagnosis::site::Said::Crew { .. }))
        {
            // A crew cause in a manual's own words, in either language.
            let sections: Vec<Hit> = index
                .causes_sections()
                .into_iter()
                .map(|(h, _)| h)
                .collect();
            site = coverage::site::as_items(site, &sections);
        }
        if !noted.is_empty() {
            tracing::debug!(alarm_id = %alarm.id, notes = noted.len(), note = ?j.note, "site notes about the fault");
        }
        (j, cover, site)
    }

    /// The alarm as retrieval and coverage read it: under its manual code
    /// when `knowledge.plant_codes` maps its code, and of the class
    /// `knowledge.kind_aliases` maps its kind to; else as raised. A kind
    /// that maps to no manual's class by either the config or the manuals'
    /// aliases is counted, and named in the log once. The prompt and the
    /// published diagnosis keep the alarm as raised.
    fn lookup<'a>(&self, index: &Index, alarm: &'a Alarm) -> Cow<'a, Alarm> {
        let k = &self.cfg.knowledge;
        let code = k.manual_code(&alarm.code);
        let class = alarm.kind.as_deref().and_then(|kind| k.kind_class(kind));
        let looked = match (code, class) {
            (None, None) => Cow::Borrowed(alarm),
            _ => Cow::Owned(Alarm {
                code: code.unwrap_or(&alarm.code).to_string(),
                kind: class.map(str::to_string).or_else(|| alarm.kind.clone()),
                ..alarm.clone()
            }),
        };
        if class.is_none() {
            self.note_unmapped(index, &looked);
        }
        looked
    }

    fn note_unmapped(&self, index: &Index, alarm: &Alarm) {
        let Some(kind) = alarm
            .kind
            .as_deref()
            .map(str::trim)
            .filter(|k| !k.is_empty())
        else {
            return;
        };
        if crate::retrieval::kinds::of_kind(index.docs(), kind).is_some() {
            return;
        }
        self.counters.unmapped_kinds.fetch_add(1, Ordering::Relaxed);
        let Ok(mut logged) = self.counters.kinds_logged.lock() else {
            return;
        };
        if logged.len() < UNMAPPED_KINDS_LOGGED && logged.insert(kind.to_string()) {
            tracing::warn!(
                kind = %kind,
                alarm_id = %alarm.id,
                "kind {kind:?} names no manual's equipment: the alarm's text decides which manual it is about; map it in the config with [knowledge.kind_aliases] {kind:?} = \"<class>\""
            );
        }
    }

    /// `retrieve` from `index`: a job that also judges coverage and looks
    /// up the covering section does all three in the one index it took.
    fn retrieve_in(&self, index: &Index, alarm: &Alarm) -> (Vec<Hit>, f64) {
        let t = Instant::now();
        let hits = crate::retrieval::passages_for(index, alarm, self.cfg.knowledge.top_k)
            .unwrap_or_else(|e| {
                tracing::error!(error = %e, "retrieval failed; answering without passages");
                Vec::new()
            });
        (hits, t.elapsed().as_secs_f64() * 1e3)
    }

    /// Builds the prompt for an alarm. `fallback` selects the hand-written
    /// template and the shorter budget used on the retry path.
    pub fn prepare(&self, alarm: &Alarm, hits: Vec<Hit>, fallback: bool, style: Style) -> Prepared {
        let llm = &self.cfg.llm;
        let overhead = self
            .model
            .count_tokens(&self.model.family().render(prompt::SYSTEM_PROMPT, ""))
            + 8;
        let budget = (llm.prompt_budget as usize).saturating_sub(overhead);
        let count = |s: &str| self.model.count_tokens(s);
        let (user, used) =
            prompt::user_turn(alarm, &hits, budget, llm.passage_items as usize, &count);
        let used: Vec<Hit> = used.into_iter().cloned().collect();
        let candidates = match (llm.answer, style) {
            (Answer::Chosen, Style::Schema) => {
                Candidates::of(&used, &user, llm.passage_items as usize)
            }
            _ => None,
        };
        let text = match self.model.prompt(&user, fallback) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "template failed; using the family template");
                self.model.family().prompt(prompt::SYSTEM_PROMPT, &user)
            }
        };
        let max_tokens = if fallback {
            (llm.max_tokens / 2).max(48)
        } else {
            llm.max_tokens
        };
        Prepared {
            request: GenRequest {
                prompt: text,
                n_passages: used.len(),
                max_tokens,
                style,
                seed: llm.seed,
                temperature: llm.temperature,
                // The retry after a hang takes the plainest path.
                lookup: if fallback { None } else { llm.lookup },
                trace_steps: false,
                choices: candidates.as_ref().map(Candidates::choices),
                summary_tokens: llm.summary_tokens as usize,
                summary_last: llm.summary.after_lists(),
                summary_composed: llm.summary == crate::config::Summary::Composed,
                item_tokens: llm.item_tokens as usize,
                save_on_publish: false,
            },
            hits: used,
            candidates,
        }
    }

    /// Diagnoses one alarm on `slot`, with what the site notes say of its
    /// fault. Never fails: the worst case is "degraded".
    pub async fn diagnose(&self, slot: &mut Slot, alarm: &Alarm, notes: &SiteNotes) -> Diagnosis {
        self.diagnose_noted(slot, alarm, Style::Schema, notes)
            .await
            .diagnosis
    }

    /// `diagnose` from the manuals alone, also returning the first
    /// attempt's raw model output (for evaluation: JSON validity is judged
    /// on what the model produced).
    pub async fn diagnose_traced(&self, slot: &mut Slot, alarm: &Alarm, style: Style) -> Trace {
        self.traced(slot, alarm, style, false, &SiteNotes::empty())
            .await
    }

    /// `diagnose_traced` with the site notes.
    pub async fn diagnose_noted(
        &self,
        slot: &mut Slot,
        alarm: &Alarm,
        style: Style,
        notes: &SiteNotes,
    ) -> Trace {
        self.traced(slot, alarm, style, false, notes).await
    }

    /// `diagnose_traced` whose first attempt also records every model choice
    /// with its top logits (`GenOutput::steps`).
    pub async fn diagnose_stepped(&self, slot: &mut Slot, alarm: &Alarm, style: Style) -> Trace {
        self.traced(slot, alarm, style, true, &SiteNotes::empty())
            .await
    }

    /// `diagnose` for the daemon's workers: None when the job was stopped
    /// for a more severe alarm before it finished (the worker runs it again
    /// after that one; what it read of its prompt stays cached).
    pub async fn diagnose_preemptible(
        &self,
        slot: &mut Slot,
        alarm: &Alarm,
        notes: &SiteNotes,
    ) -> Option<Diagnosis> {
        self.attempt(slot, alarm, Style::Schema, false, true, notes)
            .await
            .map(|t| t.diagnosis)
    }

    /// The answer for an alarm whose coverage is none, from retrieval alone.
    fn unmatched(&self, alarm: &Alarm, retrieval_ms: f64) -> Diagnosis {
        let t = Timings {
            retrieval_ms: round2(retrieval_ms),
            ..Default::default()
        };
        self.count(diagnosis::unmatched(alarm, &self.model.info.name, t))
    }

    async fn traced(
        &self,
        slot: &mut Slot,
        alarm: &Alarm,
        style: Style,
        steps: bool,
        notes: &SiteNotes,
    ) -> Trace {
        match self.attempt(slot, alarm, style, steps, false, notes).await {
            Some(t) => t,
            // Not asked to yield, a job never ends pre-empted; were it to,
            // the alarm is still answered, from retrieval.
            None => Trace {
                diagnosis: self.triage(alarm, notes),
                first: None,
                hits: Vec::new(),
                verdict: None,
            },
        }
    }

    /// Retrieval, coverage, then the model unless nothing matched; the
    /// answer is shaped by its coverage whichever way it was made.
    async fn attempt(
        &self,
        slot: &mut Slot,
        alarm: &Alarm,
        style: Style,
        steps: bool,
        preemptible: bool,
        notes: &SiteNotes,
    ) -> Option<Trace> {
        // One index for the whole job: a reload between its retrieval, its
        // judgement and its covering checks would mix two sets of manuals.
        let index = self.index.current();
        let lookup = self.lookup(&index, alarm);
        let (hits, retrieval_ms) = self.retrieve_in(&index, &lookup);
        let (judged, cover, site) = self.judge_noted(&index, (alarm, &lookup), &hits, notes);
        let cov = judged.coverage;
        // A fault covered under a plant's own code: the covering section's
        // code stands for the alarm's, so the prompt holds that fault's
        // sections only, as for an alarm raised under the manual's code, and
        // its passage block is the one `tidewatch warm` computed.
        let hits = match (cov, &judged.section) {
            (Coverage::Covered, Some(s)) => {
                let noted = cover.as_ref().filter(|_| judged.note.is_some());
                let hits = with_noted_section(&index, hits, noted, alarm);
                crate::retrieval::covering_passages(&index, hits, s.section.code())
            }
            _ => hits,
        };
        if cov == Coverage::None {
            let mut diagnosis = self.unmatched(alarm, retrieval_ms);
            diagnosis.coverage_rule = Some(judged.rule);
            let diagnosis = with_site(diagnosis, &site, alarm, &index, &hits);
            return Some(Trace {
                diagnosis,
                first: None,
                hits,
                verdict: None,
            });
        }
        let run = (style, steps, preemptible);
        let mut tr = self.answer(slot, alarm, run, hits, retrieval_ms).await?;
        tr.diagnosis = diagnosis::with_coverage(tr.diagnosis, cov, alarm, &tr.hits);
        tr.diagnosis.coverage_rule = Some(judged.rule);
        tr.diagnosis = with_site(tr.diagnosis, &site, alarm, &index, &tr.hits);
        Some(tr)
    }

    async fn answer(
        &self,
        slot: &mut Slot,
        alarm: &Alarm,
        (style, steps, preemptible): (Style, bool, bool),
        hits: Vec<Hit>,
        retrieval_ms: f64,
    ) -> Option<Trace> {
        let wd = self.cfg.watchdog;
        let mut first = self.prepare(alarm, hits.clone(), false, style);
        first.request.trace_steps = steps;
        // The daemon's worker says when the answer is published.
        first.request.save_on_publish = preemptible;
        let prepared_hits = first.hits.clone();
        let candidates = first.candidates.clone();
        let mut first_output = None;
        let failure = match slot.run(first.request, &wd, wd.deadline).await {
            Ok(out) => {
                first_output = Some(out.clone());
                match self.finish(
                    alarm,
                    &prepared_hits,
                    candidates.as_ref(),
                    retrieval_ms,
                    out,
                ) {
                    Ok((d, v)) => {
                        return Some(Trace {
                            diagnosis: self.count(d),
                            first: first_output,
                            hits,
                            verdict: Some(v),
                        })
                    }
                    Err(why) => why,
                }
            }
            Err(SlotFailure::Preempted) if preemptible => return None,
            Err(f) => describe(&f),
        };
        let (diagnosis, verdict) = self.retry(slot, alarm, &hits, retrieval_ms, failure).await;
        Some(Trace {
            diagnosis,
            first: first_output,
            hits,
            verdict,
        })
    }

    async fn retry(
        &self,
        slot: &mut Slot,
        alarm: &Alarm,
        hits: &[Hit],
        retrieval_ms: f64,
        failure: String,
    ) -> (Diagnosis, Option<Verdict>) {
        let wd = self.cfg.watchdog;
        let hits = hits.to_vec();
        tracing::warn!(alarm_id = %alarm.id, reason = %failure, "retrying on the fallback path");
        let retry = self.prepare(alarm, hits.clone(), true, Style::Schema);
        let retry_hits = retry.hits.clone();
        let candidates = retry.candidates.clone();
        let deadline = (wd.deadline / 2).max(Duration::from_secs(1));
        match slot.run(retry.request, &wd, deadline).await {
            Ok(out) => {
                match self.finish(alarm, &retry_hits, candidates.as_ref(), retrieval_ms, out) {
                    Ok((d, v)) => return (self.count(d), Some(v)),
                    Err(why) => {
                        tracing::warn!(alarm_id = %alarm.id, reason = %why, "fallback output unusable")
                    }
                }
            }
            Err(f) => {
                tracing::warn!(alarm_id = %alarm.id, reason = %describe(&f), "fallback failed")
            }
        }
        let t = Timings {
            retrieval_ms,
            ..Default::default()
        };
        let d = self.count(diagnosis::from_passages(
            alarm,
            &hits,
            Mode::Degraded,
            &self.model.info.name,
            t,
        ));
        (d, None)
    }

    /// A retrieval-only answer for an alarm that must not wait (alarm
    /// storms), with what the site notes say of its fault.
    pub fn triage(&self, alarm: &Alarm, notes: &SiteNotes) -> Diagnosis {
        let index = self.index.current();
        let lookup = self.lookup(&index, alarm);
        let (hits, retrieval_ms) = self.retrieve_in(&index, &lookup);
        let (judged, cover, site) = self.judge_noted(&index, (alarm, &lookup), &hits, notes);
        let cov = judged.coverage;
        if cov == Coverage::None {
            let d = self.unmatched(alarm, retrieval_ms);
            return with_site(d, &site, alarm, &index, &hits);
        }
        let hits = match (cov, &judged.section, &judged.note) {
            (Coverage::Covered, Some(s), Some(_)) => {
                let hits = with_noted_section(&index, hits, cover.as_ref(), alarm);
                crate::retrieval::covering_passages(&index, hits, s.section.code())
            }
            _ => hits,
        };
        let t = Timings {
            retrieval_ms,
            ..Default::default()
        };
        let d = diagnosis::from_passages(alarm, &hits, Mode::Triage, &self.model.info.name, t);
        let d = diagnosis::with_coverage(d, cov, alarm, &hits);
        self.count(with_site(d, &site, alarm, &index, &hits))
    }

    fn count(&self, d: Diagnosis) -> Diagnosis {
        let c = match d.mode {
            Mode::Full => &self.counters.diagnosed,
            Mode::Degraded => &self.counters.degraded,
            Mode::Triage => &self.counters.triage,
            Mode::Unmatched => &self.counters.unmatched,
            Mode::Passages => {
                self.counters.passages.fetch_add(1, Ordering::Relaxed);
                &self.counters.diagnosed
            }
        };
        c.fetch_add(1, Ordering::Relaxed);
        d
    }

    /// Turns model output into a diagnosis, or says why it is unusable. A
    /// written answer's values pass the grounding guard; an answer with no
    /// grounded cause comes back built from `hits` in mode "passages", not as
    /// an error, because the model did run and a retry on the same passages
    /// would most likely say the same. A chosen answer (`candidates`) is
    /// published in the manuals' words with their sources; one that is not
    /// is a defect, counted and logged as an error.
    pub fn finish(
        &self,
        alarm: &Alarm,
        hits: &[Hit],
        candidates: Option<&Candidates>,
        retrieval_ms: f64,
        out: GenOutput,
    ) -> Result<(Diagnosis, Verdict), String> {
        let summary = strip_think(&out.draft.summary);
        let composed =
            candidates.is_some() && self.cfg.llm.summary == crate::config::Summary::Composed;
        if summary.is_empty() && !composed {
            return Err("empty summary".into());
        }
        let timings = timings(retrieval_ms, &out);
        let mut d = Diagnosis {
            alarm_id: alarm.id.clone(),
            equipment: alarm.equipment.clone(),
            code: alarm.code.clone(),
            alarm_ts: alarm.ts.clone(),
            severity: alarm.severity.as_str().into(),
            summary,
            probable_causes: Vec::new(),
            actions: Vec::new(),
            action_sources: Vec::new(),
            sources: Vec::new(),
            mode: Mode::Full,
            coverage: Coverage::Covered,
            coverage_rule: None,
            coverage_note: None,
            grounded: 1.0,
            model: self.model.info.name.clone(),
            timings,
            ts: diagnosis::now_rfc3339(),
        };
        if let Some(c) = candidates {
            return self.finish_chosen(alarm, hits, c, out, d);
        }
        let draft = out.draft;
        let probable_causes: Vec<Cause> = draft
            .probable_causes
            .into_iter()
            .map(|c| Cause {
                cause: strip_think(&c.cause),
                likelihood: c.likelihood,
                source: None,
                site: None,
            })
            .filter(|c| !c.cause.is_empty())
            .collect();
        d.probable_causes = diagnosis::distinct_texts(probable_causes, |c| c.cause.as_str());
        if d.probable_causes.is_empty() {
            return Err("no probable causes".into());
        }
        let actions: Vec<String> = draft
            .actions
            .iter()
            .map(|a| strip_think(a))
            .filter(|a| !a.is_empty())
            .collect();
        d.actions = diagnosis::distinct_texts(actions, |a| a.as_str());
        // Only passages we actually retrieved may be cited; anything else is dropped.
        d.sources = dedup_sources(
            draft
                .sources
                .iter()
                .filter_map(|l| passage_index(l, hits.len()))
                .map(|i| source_of(&hits[i])),
        );
        let proposed: Vec<String> = d.probable_causes.iter().map(|c| c.cause.clone()).collect();
        let (d, v) = grounding::guard(d, hits, alarm);
        if v.dropped > 0 {
            tracing::debug!(
                alarm_id = %alarm.id,
                dropped = v.dropped,
                grounded = d.grounded,
                mode = d.mode.as_str(),
                proposed = ?proposed,
                "model causes that were not text or not in the passages were dropped"
            );
        }
        Ok((d, v))
    }

    fn finish_chosen(
        &self,
        alarm: &Alarm,
        hits: &[Hit],
        c: &Candidates,
        out: GenOutput,
        mut d: Diagnosis,
    ) -> Result<(Diagnosis, Verdict), String> {
        let defect = |why: String| {
            self.counters.choice_defects.fetch_add(1, Ordering::Relaxed);
            tracing::error!(alarm_id = %alarm.id, defect = %why, "chosen answer is not the manuals' items; this is a bug in tidewatch");
            format!("choice defect: {why}")
        };
        let mut used: Vec<usize> = Vec::new();
        for dc in out.draft.probable_causes {
            let Some(k) = dc.item.filter(|&k| k < c.causes.len()) else {
                return Err(defect(format!("cause {:?} names no candidate", dc.cause)));
            };
            let cand = &c.causes[k];
            if dc.cause != cand.item.text {
                return Err(defect(format!("cause {:?} is not candidate {k}", dc.cause)));
            }
            used.push(cand.hit);
            d.probable_causes.push(Cause {
                cause: cand.item.text.clone(),
                likelihood: dc.likelihood,
                source: Some(cand.item.source.clone()),
                site: None,
            });
        }
        for (a, &k) in out.draft.actions.iter().zip(&out.draft.action_items) {
            let Some(cand) = c.actions.get(k).filter(|cand| &cand.item.text == a) else {
                return Err(defect(format!("action {a:?} is not candidate {k}")));
            };
            used.push(cand.hit);
            d.actions.push(cand.item.text.clone());
            d.action_sources.push(cand.item.source.clone());
        }
        d.sources = dedup_sources(used.iter().map(|&i| source_of(&hits[i])));
        if self.cfg.llm.summary == crate::config::Summary::Composed {
            d.summary = diagnosis::composed_summary(alarm, &d.probable_causes, &d.actions);
        }
        grounding::guard_chosen(d, hits, alarm).map_err(defect)
    }
}

/// The causes section of the item a confirmed note names: the passage
/// retrieval found of it (either language), else its manual's.
fn site_cover(
    index: &Index,
    hits: &[Hit],
    note: &Note,
    item: &crate::diagnosis::ItemRef,
) -> Option<SiteCover> {
    let of_item = |h: &Hit| {
        h.section.is_causes()
            && crate::diagnosis::ItemRef {
                doc: h.doc.clone(),
                section: h.section.clone(),
                n: item.n,
            }
            .same(item)
    };
    let section = hits.iter().find(|h| of_item(h)).cloned().or_else(|| {
        index
            .causes_of(std::slice::from_ref(&item.doc))
            .into_iter()
            .find(|h| of_item(h))
    })?;
    Some(SiteCover {
        note: note.id.clone(),
        section,
    })
}

/// `hits` with the section of the item a site note confirmed, first and
/// in the alarm's language, when retrieval missed it: the confirmed cause
/// is then among the items the answer is made of.
fn with_noted_section(
    index: &Index,
    mut hits: Vec<Hit>,
    cover: Option<&SiteCover>,
    alarm: &Alarm,
) -> Vec<Hit> {
    let Some(c) = cover else { return hits };
    let code = c.section.section.code();
    let found = hits
        .iter()
        .any(|h| h.section.is_causes() && h.section.code().eq_ignore_ascii_case(code));
    if !found {
        hits.insert(0, c.section.clone());
    }
    crate::retrieval::in_language(index, hits, alarm.language())
}

fn source_of(h: &Hit) -> Source {
    Source {
        doc: h.doc.clone(),
        section: h.section.heading().to_string(),
    }
}

fn timings(retrieval_ms: f64, out: &GenOutput) -> Timings {
    let gen_s = out.generation_ms / 1e3;
    Timings {
        retrieval_ms: round2(retrieval_ms),
        prompt_tokens: out.prompt_tokens,
        cached_tokens: out.reused_tokens,
        ttft_ms: round2(out.ttft_ms),
        generated_tokens: out.generated_tokens,
        generation_ms: round2(out.generation_ms),
        tokens_per_s: if gen_s > 0.0 {
            round2(f64::from(out.generated_tokens) / gen_s)
        } else {
            0.0
        },
        draft_tokens: out.draft_tokens,
        accepted_tokens: out.accepted_tokens,
        fed_tokens: out.fed_tokens,
    }
}

fn describe(f: &SlotFailure) -> String {
    match f {
        SlotFailure::Hung(v) => format!("slot hung ({})", v.reason()),
        SlotFailure::Lost(v) => format!("slot lost ({})", v.reason()),
        SlotFailure::Failed(e) => e.to_string(),
        SlotFailure::Preempted => LlmError::Preempted.to_string(),
    }
}

/// What the site notes say of the fault, applied to `d` over every part of
/// the passages' causes sections (`retrieval::with_every_part`: a
/// confirmed item may be in a part retrieval did not rank), which is looked
/// up only when the notes say something.
fn with_site(
    d: Diagnosis,
    site: &crate::diagnosis::site::Site,
    alarm: &Alarm,
    index: &Index,
    hits: &[Hit],
) -> Diagnosis {
    if site.is_silent() {
        return d;
    }
    crate::diagnosis::site::apply(d, site, alarm, &with_every_part(index, hits))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hit(section: &str, text: &str) -> Hit {
        Hit {
            doc: "lube-en".into(),
            title: "Lube oil".into(),
            ..crate::test_support::hit(section, text)
        }
    }

    #[test]
    fn candidates_are_the_items_the_prompt_shows() {
        let hits = [
            hit(
                "LO causes",
                "Causes: 1) filter choked; 2) pump worn; 3) sump low; 4) relief valve open.",
            ),
            hit("Safety", "1) Stop the engine."),
            hit("LO checks", "1) Read the gauge. 2) Change the filter."),
        ];
        let shown = "[P1] causes: 1) filter choked; 2) pump worn; 3) sump low\n[P3] checks: 1) Read the gauge. 2) Change the filter.";
        let c = Candidates::of(&hits, shown, 3).unwrap();
        let texts = |v: &[Candidate]| v.iter().map(|c| c.item.text.clone()).collect::<Vec<_>>();
        assert_eq!(texts(&c.causes), ["filter choked", "pump worn", "sump low"]);
        assert_eq!(texts(&c.actions), ["Read the gauge", "Change the filter"]);
        assert_eq!(c.actions[1].hit, 2);
        assert_eq!(c.actions[1].item.source, "lube-en § LO checks #2");
        assert_eq!(c.choices().causes, texts(&c.causes));
        // An item the prompt cut off is no candidate.
        let cut = "[P1] causes: 1) filter choked; 2) pump wo\n[P3] checks: 1) Read the gauge.";
        let c = Candidates::of(&hits, cut, 3).unwrap();
        assert_eq!(texts(&c.causes), ["filter choked"]);
        assert_eq!(texts(&c.actions), ["Read the gauge"]);
        // Nothing to choose a cause or an action from: no chosen answer.
        assert_eq!(Candidates::of(&hits[..2], shown, 3), None);
        assert_eq!(Candidates::of(&hits[1..], shown, 3), None);
        // 0 items per passage: every item shown is a candidate.
        let all =
            "1) filter choked; 2) pump worn; 3) sump low; 4) relief valve open. 1) Read the gauge.";
        assert_eq!(Candidates::of(&hits, all, 0).unwrap().causes.len(), 4);
    }
}
