//! Learning candidates (AceClaw's `CandidateStore`): the pure lifecycle.
//!
//! ```text
//! SHADOW ──promote──▶ PROMOTED ──mark_injected──▶ IN_USE
//!   ▲                    │                          │
//!   └─cooldown─ DEMOTED ◀┴────────demote────────────┘
//! any state ──score under the archive floor──▶ ARCHIVED ──matched by upsert──▶ SHADOW
//! any state ──idle REMOVE_AFTER_IDLE_DAYS──▶ removed
//! ```
//!
//! Every function takes `now`; nothing here reads the clock. Timestamps are RFC 3339 strings
//! on the wire ([`satchel_protocol::Candidate`]); one that does not parse counts as `now` (no
//! decay, no removal) and [`validate`] reports it so the store can reject the entry.
//!
//! # Score
//!
//! `base = observations + LESSON_BONUS (when some evidence has a failure and its fix)
//!         + SUCCESS_WEIGHT × successes − FAILURE_WEIGHT × failures`
//!
//! `effective = base × 0.5^((idle − GRACE_DAYS) / HALF_LIFE_DAYS)` once the candidate has been
//! idle (since `last_seen_at`) longer than the grace; a base ≤ 0 is not decayed (decay only
//! forgets, it never rehabilitates). With the constants below: two observations score 2.0 (3.0
//! with a failure and its fix) and are promoted; idle 37 days they score 1.0, under 1.0 they
//! are demoted, at 67 idle days (0.5) archived, at 90 removed.
//!
//! # Gates ([`evaluate`]), at most one transition per candidate per call, first match wins
//!
//! 1. idle ≥ `REMOVE_AFTER_IDLE_DAYS` → removed (any state);
//! 2. PROMOTED / IN_USE → DEMOTED when `failures ≥ successes + DEMOTE_FAILURE_MARGIN` or
//!    effective < `DEMOTE_SCORE_FLOOR`; `cooldown_until = now + COOLDOWN_DAYS`;
//! 3. any state but ARCHIVED → ARCHIVED when effective < `ARCHIVE_SCORE_FLOOR`;
//! 4. SHADOW → PROMOTED when observations ≥ `PROMOTE_MIN_OBSERVATIONS` (a lesson's from at
//!    least `PROMOTE_MIN_LESSON_SOURCES` sessions) and effective ≥ `PROMOTE_MIN_SCORE` and
//!    failures ≤ successes. No single observation is ever promoted, whatever its evidence;
//! 5. DEMOTED → SHADOW once `now ≥ cooldown_until`.
//!
//! PROMOTED → IN_USE is [`mark_injected`], called by the engine when it injects one.

mod prompt;
#[cfg(test)]
mod prop_tests;
#[cfg(test)]
mod tests;
mod text;

use chrono::{DateTime, Duration, SecondsFormat, Utc};
use satchel_protocol::{
    Candidate, CandidateEvidence, CandidateKind, CandidateState, FeedbackOutcome, MAX_OBSERVE_LIST_ITEMS,
    ObserveParams, StateChange,
};

pub use prompt::section_text;
pub use text::{jaccard, tokens};

/// Source type of the candidates' sections (the focus boost's `candidates` row: +6 when an
/// active symbol is in the text).
pub const SOURCE_TYPE: &str = "candidates";
/// A candidate's section key is this prefix and its id (`candidate:k3`).
pub const SECTION_KEY_PREFIX: &str = "candidate:";
/// Their priority (AceClaw's base priority for `candidates`).
pub const SECTION_PRIORITY: i64 = 54;

/// Token Jaccard similarity at or above which an observation merges into a candidate.
pub const MERGE_MIN_JACCARD: f64 = 0.50;
/// A candidate last seen longer ago than this does not take merges.
pub const MERGE_WINDOW_DAYS: i64 = 30;
/// Evidence entries kept per candidate (the most recent).
pub const MAX_EVIDENCE: usize = 10;

/// Weight of one reported success in the base score.
pub const SUCCESS_WEIGHT: f64 = 2.0;
/// Weight of one reported failure in the base score.
pub const FAILURE_WEIGHT: f64 = 3.0;
/// Bonus when some evidence has both a failure and its fix.
pub const LESSON_BONUS: f64 = 1.0;
/// Idle days before the score decays.
pub const GRACE_DAYS: i64 = 7;
/// Half-life of the decay, in days.
pub const HALF_LIFE_DAYS: f64 = 30.0;

/// Observations needed for promotion, whatever the evidence says. A promoted candidate is in
/// the system prompt of every session of the workspace, and one observation is one witness: a
/// compaction's lesson is a pairing its extractor inferred (this failure, then that success),
/// and one such pairing can be wrong, as a failure and its "fix" stated once by a client can.
/// So a failure and its fix earn a bonus in the score, never promotion on their own.
pub const PROMOTE_MIN_OBSERVATIONS: u32 = 2;
/// Sessions a lesson's observations must come from. A session may pair the same failure and
/// success again (a repeated run, its summary merged again) without that being new evidence;
/// another session hitting the same failure and the same fix is. An observation that names
/// no session (a client's own) counts as a source of its own. User corrections need no
/// second session: a user repeating a correction is evidence in itself.
pub const PROMOTE_MIN_LESSON_SOURCES: usize = 2;
/// Effective score needed for promotion.
pub const PROMOTE_MIN_SCORE: f64 = 2.0;
/// A promoted candidate is demoted when its failures exceed its successes by this much.
pub const DEMOTE_FAILURE_MARGIN: u32 = 2;
/// … or when its effective score falls under this.
pub const DEMOTE_SCORE_FLOOR: f64 = 1.0;
/// Days a demoted candidate cools down before it goes back to shadow.
pub const COOLDOWN_DAYS: i64 = 7;
/// Any candidate whose effective score is under this is archived.
pub const ARCHIVE_SCORE_FLOOR: f64 = 0.5;
/// Idle days (since `last_seen_at`) after which a candidate is removed.
pub const REMOVE_AFTER_IDLE_DAYS: i64 = 90;

/// `now` as stored: RFC 3339, UTC, whole seconds.
pub fn timestamp(now: DateTime<Utc>) -> String {
    now.to_rfc3339_opts(SecondsFormat::Secs, true)
}

fn parse(ts: &str) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(ts).ok().map(|t| t.with_timezone(&Utc))
}

fn parse_or(ts: &str, now: DateTime<Utc>) -> DateTime<Utc> {
    parse(ts).unwrap_or(now)
}

/// Why an entry cannot be used: a timestamp that does not parse, a demoted candidate without a
/// cooldown (or another with one), an empty id or text.
pub fn validate(c: &Candidate) -> Result<(), String> {
    if c.id.is_empty() {
        return Err("empty id".into());
    }
    if c.text.trim().is_empty() {
        return Err("empty text".into());
    }
    for (name, ts) in [
        ("created_at", &c.created_at),
        ("last_seen_at", &c.last_seen_at),
        ("state_since", &c.state_since),
    ]
    .into_iter()
    .chain(c.cooldown_until.iter().map(|t| ("cooldown_until", t)))
    .chain(c.evidence.iter().map(|e| ("evidence.at", &e.at)))
    {
        if parse(ts).is_none() {
            return Err(format!("{name} is not RFC 3339: {ts:?}"));
        }
    }
    if (c.state == CandidateState::Demoted) != c.cooldown_until.is_some() {
        return Err("cooldown_until must be set exactly when demoted".into());
    }
    Ok(())
}

/// Days (fractional) since `last_seen_at`, never negative.
pub fn idle_days(c: &Candidate, now: DateTime<Utc>) -> f64 {
    let idle = now - parse_or(&c.last_seen_at, now);
    (idle.num_milliseconds().max(0) as f64) / 86_400_000.0
}

/// True when some evidence has both a failure and its fix.
pub fn has_lesson_evidence(c: &Candidate) -> bool {
    c.evidence.iter().any(|e| e.failure.is_some() && e.fix.is_some())
}

/// How many independent sources a candidate's kept evidence has: its distinct sessions, and
/// each observation that names none.
pub fn evidence_sources(c: &Candidate) -> usize {
    let mut sessions: Vec<&str> = c.evidence.iter().filter_map(|e| e.session_id.as_deref()).collect();
    sessions.sort_unstable();
    sessions.dedup();
    sessions.len() + c.evidence.iter().filter(|e| e.session_id.is_none()).count()
}

/// Why a SHADOW candidate has the evidence to be promoted, or `None` (see
/// [`PROMOTE_MIN_OBSERVATIONS`] and [`PROMOTE_MIN_LESSON_SOURCES`]).
fn promotion_evidence(c: &Candidate) -> Option<String> {
    if c.observations < PROMOTE_MIN_OBSERVATIONS {
        return None;
    }
    if c.kind != CandidateKind::Lesson {
        return Some(format!("{} observations", c.observations));
    }
    let sources = evidence_sources(c);
    (sources >= PROMOTE_MIN_LESSON_SOURCES).then(|| format!("{} observations from {sources} sources", c.observations))
}

/// The undecayed score (see the module docs).
pub fn base_score(c: &Candidate) -> f64 {
    let bonus = if has_lesson_evidence(c) { LESSON_BONUS } else { 0.0 };
    f64::from(c.observations) + bonus + SUCCESS_WEIGHT * f64::from(c.successes) - FAILURE_WEIGHT * f64::from(c.failures)
}

/// The base score decayed by the idle time past the grace (see the module docs).
pub fn effective_score(c: &Candidate, now: DateTime<Utc>) -> f64 {
    let base = base_score(c);
    let past_grace = idle_days(c, now) - GRACE_DAYS as f64;
    if base <= 0.0 || past_grace <= 0.0 {
        return base;
    }
    base * 0.5f64.powf(past_grace / HALF_LIFE_DAYS)
}

/// True for the states whose candidates are injected (PROMOTED, IN_USE).
pub fn is_injectable(state: CandidateState) -> bool {
    matches!(state, CandidateState::Promoted | CandidateState::InUse)
}

/// The candidates to inject, in store order.
pub fn injectable(candidates: &[Candidate]) -> Vec<&Candidate> {
    candidates.iter().filter(|c| is_injectable(c.state)).collect()
}

/// Adds `from`'s new items to `into`, keeping the last [`MAX_OBSERVE_LIST_ITEMS`]: merges must
/// not grow a candidate past what one observation may carry.
fn union(into: &mut Vec<String>, from: &[String]) {
    for s in from {
        if !into.contains(s) {
            into.push(s.clone());
        }
    }
    if into.len() > MAX_OBSERVE_LIST_ITEMS {
        into.drain(..into.len() - MAX_OBSERVE_LIST_ITEMS);
    }
}

fn set_state(c: &mut Candidate, to: CandidateState, now: DateTime<Utc>) {
    c.state = to;
    c.state_since = timestamp(now);
    c.cooldown_until = (to == CandidateState::Demoted).then(|| timestamp(now + Duration::days(COOLDOWN_DAYS)));
}

/// Records an observation: merges it into the most similar candidate of the same kind (token
/// Jaccard ≥ [`MERGE_MIN_JACCARD`], last seen within [`MERGE_WINDOW_DAYS`]; the first on a tie)
/// or appends a new SHADOW candidate with the id `new_id` gives. A merge adds the evidence,
/// unions tags, files and symbols, bumps `observations` and `last_seen_at`, and brings an
/// ARCHIVED candidate back to SHADOW. Returns the candidate's index and whether it merged.
pub fn upsert(
    candidates: &mut Vec<Candidate>,
    obs: &ObserveParams,
    now: DateTime<Utc>,
    new_id: impl FnOnce() -> String,
) -> (usize, bool) {
    let at = timestamp(now);
    let ev = obs.evidence.clone().unwrap_or_default();
    let evidence = CandidateEvidence {
        at: at.clone(),
        session_id: obs.session_id.clone(),
        failure: ev.failure,
        fix: ev.fix,
        note: ev.note,
    };
    let obs_tokens = tokens(&obs.text);
    let best = candidates
        .iter()
        .enumerate()
        .filter(|(_, c)| c.kind == obs.kind && idle_days(c, now) <= MERGE_WINDOW_DAYS as f64)
        .map(|(i, c)| (i, jaccard(&obs_tokens, &tokens(&c.text))))
        .filter(|&(_, j)| j >= MERGE_MIN_JACCARD)
        .fold(None, |best: Option<(usize, f64)>, (i, j)| match best {
            Some((_, bj)) if bj >= j => best,
            _ => Some((i, j)),
        });
    if let Some((i, _)) = best {
        let c = &mut candidates[i];
        c.evidence.push(evidence);
        if c.evidence.len() > MAX_EVIDENCE {
            c.evidence.drain(..c.evidence.len() - MAX_EVIDENCE);
        }
        union(&mut c.tags, &obs.tags);
        union(&mut c.files, &obs.files);
        union(&mut c.symbols, &obs.symbols);
        c.observations = c.observations.saturating_add(1);
        c.last_seen_at = at;
        if c.state == CandidateState::Archived {
            set_state(c, CandidateState::Shadow, now);
        }
        c.score = effective_score(c, now);
        return (i, true);
    }
    let mut c = Candidate {
        id: new_id(),
        text: obs.text.trim().to_owned(),
        kind: obs.kind,
        tags: Vec::new(),
        files: Vec::new(),
        symbols: Vec::new(),
        source_session: obs.session_id.clone(),
        evidence: vec![evidence],
        state: CandidateState::Shadow,
        score: 0.0,
        observations: 1,
        successes: 0,
        failures: 0,
        created_at: at.clone(),
        last_seen_at: at.clone(),
        state_since: at,
        cooldown_until: None,
    };
    union(&mut c.tags, &obs.tags);
    union(&mut c.files, &obs.files);
    union(&mut c.symbols, &obs.symbols);
    c.score = effective_score(&c, now);
    candidates.push(c);
    (candidates.len() - 1, false)
}

/// Records the outcome of following a candidate: bumps `successes` or `failures` (saturating)
/// and `last_seen_at` (a candidate in use is not idle) and refreshes `score`. The gates run in
/// [`evaluate`].
pub fn feedback(c: &mut Candidate, outcome: FeedbackOutcome, now: DateTime<Utc>) {
    match outcome {
        FeedbackOutcome::Success => c.successes = c.successes.saturating_add(1),
        FeedbackOutcome::Failure => c.failures = c.failures.saturating_add(1),
    }
    c.last_seen_at = timestamp(now);
    c.score = effective_score(c, now);
}

/// PROMOTED → IN_USE, when the engine injected the candidate; `None` in any other state.
pub fn mark_injected(c: &mut Candidate, now: DateTime<Utc>) -> Option<StateChange> {
    if c.state != CandidateState::Promoted {
        return None;
    }
    set_state(c, CandidateState::InUse, now);
    Some(StateChange {
        id: c.id.clone(),
        from: CandidateState::Promoted,
        to: CandidateState::InUse,
        reason: "injected into a request".into(),
    })
}

/// The transition the gates choose for one candidate (see the module docs); `None` when it
/// stays. Does not apply it.
pub fn gate(c: &Candidate, now: DateTime<Utc>) -> Option<(CandidateState, String)> {
    use CandidateState::*;
    let score = effective_score(c, now);
    if is_injectable(c.state) {
        if c.failures >= c.successes.saturating_add(DEMOTE_FAILURE_MARGIN) {
            let reason = format!(
                "{} failures vs {} successes (margin >= {DEMOTE_FAILURE_MARGIN}); cooldown {COOLDOWN_DAYS} days",
                c.failures, c.successes
            );
            return Some((Demoted, reason));
        }
        if score < DEMOTE_SCORE_FLOOR {
            let reason = format!("score {score:.2} < {DEMOTE_SCORE_FLOOR:.2}; cooldown {COOLDOWN_DAYS} days");
            return Some((Demoted, reason));
        }
    }
    if c.state != Archived && score < ARCHIVE_SCORE_FLOOR {
        let reason = format!(
            "score {score:.2} < {ARCHIVE_SCORE_FLOOR:.2} after {:.0} idle days",
            idle_days(c, now).floor()
        );
        return Some((Archived, reason));
    }
    match c.state {
        Shadow => {
            let why = promotion_evidence(c)?;
            if score >= PROMOTE_MIN_SCORE && c.failures <= c.successes {
                let reason = format!(
                    "{why}, score {score:.2} >= {PROMOTE_MIN_SCORE:.2}, {} failures <= {} successes",
                    c.failures, c.successes
                );
                return Some((Promoted, reason));
            }
            None
        }
        Demoted => {
            let until = c.cooldown_until.as_deref().map_or(now, |t| parse_or(t, now));
            (now >= until).then(|| (Shadow, format!("cooldown ended {}", timestamp(until))))
        }
        Promoted | InUse | Archived => None,
    }
}

/// Runs the gates on every candidate: removes those idle [`REMOVE_AFTER_IDLE_DAYS`] days (their
/// ids in `removed`), applies at most one transition to each other one (in `changes`, store
/// order) and refreshes every `score`.
pub fn evaluate(candidates: &mut Vec<Candidate>, now: DateTime<Utc>) -> (Vec<StateChange>, Vec<String>) {
    let mut removed = Vec::new();
    candidates.retain(|c| {
        let keep = idle_days(c, now) < REMOVE_AFTER_IDLE_DAYS as f64;
        if !keep {
            removed.push(c.id.clone());
        }
        keep
    });
    let mut changes = Vec::new();
    for c in candidates.iter_mut() {
        if let Some((to, reason)) = gate(c, now) {
            changes.push(StateChange {
                id: c.id.clone(),
                from: c.state,
                to,
                reason,
            });
            set_state(c, to, now);
        }
        c.score = effective_score(c, now);
    }
    (changes, removed)
}
