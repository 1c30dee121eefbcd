//! `candidates.*`: learning candidates kept in the workspace's signed store, and the sections
//! a request carries for the promoted ones.
//!
//! The lifecycle is `satchel_core::candidates` (pure, with `now` passed in); this module loads
//! the store once (entries whose signature fails are skipped and reported, never used), runs
//! each call under one lock in arrival order, and writes the whole store back atomically after
//! a change, with the lines it skipped kept verbatim at the top (a lost key or a forged line
//! never costs a line of the file). A write that fails leaves the store as it was on disk and
//! the next call reloads it, so a failed call has no effect.
//!
//! The gates run when a client asks (`candidates.evaluate`), after a compaction that observed
//! candidates, and on the daemon's schedule ([`Engine::candidates_evaluate_scheduled`]).

use std::sync::{Mutex, MutexGuard};

use satchel_core::candidates::{
    SECTION_KEY_PREFIX, SECTION_PRIORITY, SOURCE_TYPE, effective_score, evaluate, feedback, injectable, mark_injected,
    section_text, upsert, validate,
};
use satchel_protocol::{
    Candidate, CandidateKind, EvaluateParams, EvaluateResult, FeedbackParams, FeedbackResult, ListParams, ListResult,
    ObserveEvidence, ObserveParams, ObserveResult, PromptSection, RejectedEntry, RemoveParams, RemoveResult,
};
use satchel_storage::{Rejected, SessionStore, SignedStore};
use serde::Deserialize;
use serde_json::Value;
use serde_json::value::RawValue;

use crate::engine::Engine;
use crate::error::EngineError;

/// The candidates in memory, loaded from the store on first use.
#[derive(Debug, Default)]
pub struct Candidates {
    /// The store and what was loaded from it; `None` until first use (the signing key is
    /// created then) and again after a failed write, so the next call reloads the file.
    loaded: Mutex<Option<Book>>,
}

/// The loaded store.
#[derive(Debug)]
struct Book {
    store: SignedStore,
    candidates: Vec<Candidate>,
    /// Lines skipped on load (a bad or missing signature, a malformed entry), in file order,
    /// each with its text: every write keeps them, first, and renumbers them.
    rejected: Vec<Rejected>,
}

impl Book {
    /// What inspect and `candidates.list` report of the skipped lines.
    fn rejected_report(&self) -> Vec<RejectedEntry> {
        self.rejected
            .iter()
            .map(|r| RejectedEntry {
                line: r.line,
                reason: r.reason.clone(),
            })
            .collect()
    }
}

impl Engine {
    /// Runs `body` on the loaded candidates, under the store's lock; when it reports a
    /// change, writes the store back before returning.
    fn with_candidates<T>(
        &self,
        body: impl FnOnce(&mut Book) -> Result<(T, bool), EngineError>,
    ) -> Result<T, EngineError> {
        let mut slot = lock(&self.candidates.loaded);
        if slot.is_none() {
            *slot = Some(self.load_candidates()?);
        }
        let book = slot.as_mut().expect("loaded above");
        let outcome = body(book);
        let (value, changed) = match outcome {
            Ok(done) => done,
            Err(e) => {
                *slot = None;
                return Err(e);
            }
        };
        if changed {
            let entries: Vec<Value> = book
                .candidates
                .iter()
                .map(|c| serde_json::to_value(c).expect("a candidate serialises"))
                .collect();
            if let Err(e) = book.store.save_all(&book.rejected, &entries) {
                // Memory is ahead of the file: forget it, so the next call reads the file.
                *slot = None;
                return Err(e.into());
            }
            // The skipped lines are the file's first ones now.
            for (i, kept) in book.rejected.iter_mut().enumerate() {
                kept.line = i + 1;
            }
        }
        Ok(value)
    }

    /// Opens the store (creating its key on first use) and reads it: entries that fail their
    /// signature or are not valid candidates are reported, never used.
    fn load_candidates(&self) -> Result<Book, EngineError> {
        let store = SignedStore::open(&self.workspace)?;
        let loaded = store.load()?;
        let mut rejected = loaded.rejected;
        let mut candidates = Vec::with_capacity(loaded.entries.len());
        for (entry, line) in loaded.entries.into_iter().zip(loaded.entry_lines) {
            match Candidate::deserialize(&entry)
                .map_err(|e| e.to_string())
                .and_then(|c| validate(&c).map(|()| c))
            {
                Ok(candidate) => candidates.push(candidate),
                Err(reason) => rejected.push(Rejected {
                    line,
                    reason: format!("signed but not a valid candidate: {reason}"),
                    text: store.signed_line(&entry),
                }),
            }
        }
        rejected.sort_by_key(|r| r.line);
        if !rejected.is_empty() {
            tracing::warn!(
                lines = ?rejected.iter().map(|r| r.line).collect::<Vec<_>>(),
                "candidate store entries were skipped (tampered, unsigned or malformed); they are never used"
            );
        }
        Ok(Book {
            store,
            candidates,
            rejected,
        })
    }

    /// `candidates.observe`: refuses what is over the protocol's limits, so a stored candidate
    /// always fits the prompt it may go into.
    pub fn candidates_observe(&self, params: ObserveParams) -> Result<ObserveResult, EngineError> {
        if params.text.trim().is_empty() {
            return Err(EngineError::invalid_params("text", "is empty"));
        }
        if let Some((field, why)) = params.over_limit() {
            return Err(EngineError::invalid_params(&field, why));
        }
        if let Some(id) = &params.session_id {
            SessionStore::validate_id(id).map_err(|e| EngineError::invalid_params("session_id", e))?;
        }
        let now = self.clock.now();
        self.with_candidates(|book| {
            let (index, merged) = upsert(&mut book.candidates, &params, now, || self.ids.next_id());
            let candidate = book.candidates[index].clone();
            Ok((ObserveResult { candidate, merged }, true))
        })
    }

    /// `candidates.feedback`.
    pub fn candidates_feedback(&self, params: FeedbackParams) -> Result<FeedbackResult, EngineError> {
        let now = self.clock.now();
        self.with_candidates(|book| {
            let candidate = find(&mut book.candidates, &params.id)?;
            feedback(candidate, params.outcome, now);
            Ok((
                FeedbackResult {
                    candidate: candidate.clone(),
                },
                true,
            ))
        })
    }

    /// `candidates.list`: every candidate (of `state`), with its effective score now, and the
    /// store lines that were skipped.
    pub fn candidates_list(&self, params: ListParams) -> Result<ListResult, EngineError> {
        let now = self.clock.now();
        self.with_candidates(|book| {
            let candidates = book
                .candidates
                .iter()
                .filter(|c| params.state.is_none_or(|s| c.state == s))
                .map(|c| Candidate {
                    score: effective_score(c, now),
                    ..c.clone()
                })
                .collect();
            let result = ListResult {
                candidates,
                rejected: book.rejected_report(),
            };
            Ok((result, false))
        })
    }

    /// The gates on the daemon's schedule, with their transitions logged: `None` when
    /// candidates are off or the workspace has no store (a schedule never creates one, nor its
    /// signing key).
    pub fn candidates_evaluate_scheduled(&self) -> Result<Option<EvaluateResult>, EngineError> {
        if !self.config().candidates.candidates_enabled || !self.has_candidate_store() {
            return Ok(None);
        }
        let result = self.candidates_evaluate(EvaluateParams {})?;
        log_evaluation("on schedule", &result);
        Ok(Some(result))
    }

    /// Whether candidates are loaded or there is a store to load them from.
    fn has_candidate_store(&self) -> bool {
        lock(&self.candidates.loaded).is_some() || self.workspace.layout().candidates_file().exists()
    }

    /// `candidates.evaluate`: runs the gates now.
    pub fn candidates_evaluate(&self, _: EvaluateParams) -> Result<EvaluateResult, EngineError> {
        let now = self.clock.now();
        self.with_candidates(|book| {
            let (changes, removed) = evaluate(&mut book.candidates, now);
            let changed = !changes.is_empty() || !removed.is_empty();
            Ok((EvaluateResult { changes, removed }, changed))
        })
    }

    /// `candidates.remove`.
    pub fn candidates_remove(&self, params: RemoveParams) -> Result<RemoveResult, EngineError> {
        self.with_candidates(|book| {
            let before = book.candidates.len();
            book.candidates.retain(|c| c.id != params.id);
            let removed = book.candidates.len() < before;
            Ok((RemoveResult { removed }, removed))
        })
    }

    /// The store lines skipped when it was loaded, for inspect (nothing before first use:
    /// inspecting never creates the signing key).
    pub(crate) fn rejected_candidates(&self) -> Vec<RejectedEntry> {
        lock(&self.candidates.loaded)
            .as_ref()
            .map_or_else(Vec::new, Book::rejected_report)
    }

    /// One prompt section per promoted (or in use) candidate, as JSON texts for the request's
    /// sections; the focus boosts those whose symbols the newest user message names.
    pub(crate) fn candidate_sections(&self) -> Result<Vec<Box<RawValue>>, EngineError> {
        // A workspace that never observed a candidate has no store: a request does not create
        // one (nor its signing key).
        if !self.has_candidate_store() {
            return Ok(Vec::new());
        }
        let now = self.clock.now();
        self.with_candidates(|book| {
            let sections = injectable(&book.candidates)
                .into_iter()
                .map(|c| {
                    let section = PromptSection {
                        key: format!("{SECTION_KEY_PREFIX}{}", c.id),
                        content: section_text(c),
                        priority: SECTION_PRIORITY,
                        protected: false,
                        source_type: Some(SOURCE_TYPE.into()),
                        scope: None,
                        reason: Some(format!(
                            "learned candidate ({:?}, {} observations, {} successes, score {:.1})",
                            c.state,
                            c.observations,
                            c.successes,
                            effective_score(c, now)
                        )),
                        paths: Vec::new(),
                    };
                    serde_json::value::to_raw_value(&section).expect("a section serialises")
                })
                .collect();
            Ok((sections, false))
        })
    }

    /// The candidates the prompt of a request included: PROMOTED ones become IN_USE.
    pub(crate) fn candidates_injected(&self, ids: &[String]) -> Result<(), EngineError> {
        if ids.is_empty() {
            return Ok(());
        }
        let now = self.clock.now();
        self.with_candidates(|book| {
            let mut changed = false;
            for c in book.candidates.iter_mut().filter(|c| ids.contains(&c.id)) {
                changed |= mark_injected(c, now).is_some();
            }
            Ok(((), changed))
        })
    }

    /// What a compaction newly found, observed as candidates: its lessons (a failure and what
    /// fixed it) and the constraints the user stated; then the gates run, so what earned
    /// promotion is in the next request. A constraint stated once stays a `shadow` candidate;
    /// one the user repeats (in other words too: the store merges similar texts) gains
    /// observations and can be promoted, which is how repeated corrections earn their way
    /// into the prompt. A lesson needs two sessions that learned it (see
    /// `satchel_core::candidates::PROMOTE_MIN_LESSON_SOURCES`).
    pub(crate) fn observe_compaction(&self, session_id: &str, lessons: &[String], constraints: &[String]) {
        let lessons = lessons.iter().map(|lesson| {
            let (failure, fix) = match lesson.split_once(" → fixed: ") {
                Some((failure, fix)) => (Some(failure.to_owned()), Some(fix.to_owned())),
                None => (None, None),
            };
            (
                lesson,
                CandidateKind::Lesson,
                ObserveEvidence {
                    failure,
                    fix,
                    note: None,
                },
            )
        });
        let corrections = constraints.iter().map(|constraint| {
            let note = Some("stated by the user".to_owned());
            (
                constraint,
                CandidateKind::Correction,
                ObserveEvidence {
                    failure: None,
                    fix: None,
                    note,
                },
            )
        });
        let mut observed = false;
        for (text, kind, evidence) in lessons.chain(corrections) {
            let observation = ObserveParams {
                text: text.clone(),
                kind,
                tags: vec!["compaction".into()],
                files: Vec::new(),
                symbols: Vec::new(),
                evidence: Some(evidence),
                session_id: Some(session_id.to_owned()),
            };
            // Derived data, like the memory note: a failure is logged, never the call's.
            match self.candidates_observe(observation) {
                Ok(_) => observed = true,
                Err(e) => tracing::warn!(
                    session = session_id,
                    "a compaction's finding was not observed as a candidate: {e}"
                ),
            }
        }
        if observed {
            match self.candidates_evaluate(EvaluateParams {}) {
                Ok(result) => log_evaluation("after a compaction", &result),
                Err(e) => tracing::warn!(session = session_id, "the candidate gates did not run: {e}"),
            }
        }
    }
}

/// Logs the transitions of gates that ran without a client to tell (`when`).
fn log_evaluation(when: &str, result: &EvaluateResult) {
    for change in &result.changes {
        tracing::info!(
            id = change.id,
            from = ?change.from,
            to = ?change.to,
            "candidate gates {when}: {}",
            change.reason
        );
    }
    if !result.removed.is_empty() {
        tracing::info!(ids = ?result.removed, "candidate gates {when}: removed after the idle days");
    }
}

/// The candidate with `id`, or a clear error.
fn find<'a>(candidates: &'a mut [Candidate], id: &str) -> Result<&'a mut Candidate, EngineError> {
    candidates
        .iter_mut()
        .find(|c| c.id == id)
        .ok_or_else(|| EngineError::invalid_params("id", format!("no candidate {id}")))
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|p| p.into_inner())
}
