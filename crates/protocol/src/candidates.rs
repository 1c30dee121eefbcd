//! `candidates.*`: learning candidates (AceClaw's `CandidateStore`), short lessons and rules
//! observed in sessions that earn their way into the system prompt through a lifecycle
//! (`shadow` → `promoted` → `in_use`, `demoted` with a cooldown, `archived`). The lifecycle
//! itself is `satchel_core::candidates`; these are the wire types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Method;

/// Where a candidate is in its lifecycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CandidateState {
    /// Newly observed, accumulating evidence; never injected.
    Shadow,
    /// Passed the promotion gates; injected into the system prompt from the next request on.
    Promoted,
    /// Promoted and injected at least once.
    InUse,
    /// Its score decayed under the archive floor; never injected, removed after the idle days.
    Archived,
    /// Failed or regressed; cooling down (`cooldown_until`) before it goes back to `shadow`.
    Demoted,
}

/// What a candidate is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CandidateKind {
    /// A failure followed by its fix.
    Lesson,
    /// A rule of the project or of the user's workflow.
    Rule,
    /// A preference of the user.
    Preference,
    /// A correction the user repeated.
    Correction,
}

/// One observation's evidence.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CandidateEvidence {
    /// When it was observed (RFC 3339).
    pub at: String,
    /// The session it was observed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
    /// The failure (a command and its error, a rejected answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// What fixed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Any other note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// A learning candidate: a short lesson or rule with its evidence, counts and lifecycle state.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Candidate {
    /// Stable id (`c1`), used by `candidates.feedback` and `candidates.remove` and shown in the
    /// prompt.
    pub id: String,
    /// The lesson or rule, as it is injected.
    pub text: String,
    /// What it is.
    pub kind: CandidateKind,
    /// Free tags.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Files it applies to (request focus boosts it when one is active).
    #[serde(default)]
    pub files: Vec<String>,
    /// Symbols it applies to (request focus boosts it when one is active).
    #[serde(default)]
    pub symbols: Vec<String>,
    /// The session of its first observation.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_session: Option<String>,
    /// The evidence of its observations, oldest first (the most recent ones are kept).
    #[serde(default)]
    pub evidence: Vec<CandidateEvidence>,
    /// Where it is in its lifecycle.
    pub state: CandidateState,
    /// Effective score (base score from the counts, decayed after the grace period) as of the
    /// last observe, feedback or evaluate.
    pub score: f64,
    /// How many times it was observed (merged observations included).
    pub observations: u32,
    /// Successes reported by `candidates.feedback`.
    pub successes: u32,
    /// Failures reported by `candidates.feedback`.
    pub failures: u32,
    /// First observation (RFC 3339).
    pub created_at: String,
    /// Last observation or feedback (RFC 3339); decay and retention count from it.
    pub last_seen_at: String,
    /// When it entered its current state (RFC 3339).
    pub state_since: String,
    /// End of the cooldown of a `demoted` candidate (RFC 3339); set exactly when demoted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cooldown_until: Option<String>,
}

/// A stored entry that was not loaded (bad signature, unparsable).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RejectedEntry {
    /// Its line in the store file (1-based).
    pub line: usize,
    /// Why it was rejected, e.g. `signature mismatch`.
    pub reason: String,
}

/// One lifecycle transition.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct StateChange {
    /// The candidate.
    pub id: String,
    /// Its state before.
    pub from: CandidateState,
    /// Its state after.
    pub to: CandidateState,
    /// Why, with the numbers, e.g. `2 observations, score 2.00 >= 2.00`.
    pub reason: String,
}

/// `candidates.observe`: record an observation; merged into a similar candidate of the same
/// kind seen within 30 days, else a new `shadow` candidate.
pub enum CandidatesObserve {}

impl Method for CandidatesObserve {
    const NAME: &'static str = "candidates.observe";
    const SUMMARY: &'static str =
        "Observe a lesson or rule: merged into a similar recent candidate of the same kind, or a new shadow candidate.";
    type Params = ObserveParams;
    type Result = ObserveResult;
}

/// `candidates.feedback`: report that a candidate helped or did not.
pub enum CandidatesFeedback {}

impl Method for CandidatesFeedback {
    const NAME: &'static str = "candidates.feedback";
    const SUMMARY: &'static str = "Report the outcome (success or failure) of following a candidate.";
    type Params = FeedbackParams;
    type Result = FeedbackResult;
}

/// `candidates.list`: the candidates, and the stored entries that were rejected.
pub enum CandidatesList {}

impl Method for CandidatesList {
    const NAME: &'static str = "candidates.list";
    const SUMMARY: &'static str = "List the candidates (optionally of one state) and the rejected store entries.";
    type Params = ListParams;
    type Result = ListResult;
}

/// `candidates.evaluate`: run the lifecycle gates now.
pub enum CandidatesEvaluate {}

impl Method for CandidatesEvaluate {
    const NAME: &'static str = "candidates.evaluate";
    const SUMMARY: &'static str =
        "Run the promotion, demotion, archive and retention gates now; returns the transitions and removals.";
    type Params = EvaluateParams;
    type Result = EvaluateResult;
}

/// `candidates.remove`: delete a candidate.
pub enum CandidatesRemove {}

impl Method for CandidatesRemove {
    const NAME: &'static str = "candidates.remove";
    const SUMMARY: &'static str = "Remove a candidate by its id.";
    type Params = RemoveParams;
    type Result = RemoveResult;
}

/// The evidence an observation carries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveEvidence {
    /// The failure (a command and its error, a rejected answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// What fixed it. A failure and its fix make a single observation promotable.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    /// Any other note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

/// Params of `candidates.observe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveParams {
    /// The lesson or rule, short and imperative.
    pub text: String,
    /// What it is.
    pub kind: CandidateKind,
    /// Free tags.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Files it applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<String>,
    /// Symbols it applies to.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub symbols: Vec<String>,
    /// The evidence: the failure and its fix, or a note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ObserveEvidence>,
    /// The session it was observed in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

/// Result of `candidates.observe`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ObserveResult {
    /// The candidate after the observation.
    pub candidate: Candidate,
    /// True when the observation was merged into an existing candidate.
    pub merged: bool,
}

/// The outcome of following a candidate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FeedbackOutcome {
    /// It helped.
    Success,
    /// It did not help or was wrong.
    Failure,
}

/// Params of `candidates.feedback`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FeedbackParams {
    /// The candidate.
    pub id: String,
    /// Whether following it helped.
    pub outcome: FeedbackOutcome,
}

/// Result of `candidates.feedback`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FeedbackResult {
    /// The candidate after the feedback.
    pub candidate: Candidate,
}

/// Params of `candidates.list`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListParams {
    /// Only the candidates in this state; all when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state: Option<CandidateState>,
}

/// Result of `candidates.list`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListResult {
    /// The candidates, in store order.
    pub candidates: Vec<Candidate>,
    /// Store entries skipped on load (tampered, unsigned, unparsable); never used.
    pub rejected: Vec<RejectedEntry>,
}

/// Params of `candidates.evaluate` (none).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EvaluateParams {}

/// Result of `candidates.evaluate`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct EvaluateResult {
    /// The transitions, in store order.
    pub changes: Vec<StateChange>,
    /// Ids of the candidates removed after the idle days.
    pub removed: Vec<String>,
}

/// Params of `candidates.remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RemoveParams {
    /// The candidate.
    pub id: String,
}

/// Result of `candidates.remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct RemoveResult {
    /// False when no candidate had that id.
    pub removed: bool,
}
