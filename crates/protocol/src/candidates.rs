//! `candidates.*`: learning candidates (AceClaw's `CandidateStore`), short lessons and rules
//! observed in sessions that earn their way into the system prompt through a lifecycle
//! (`shadow` → `promoted` → `in_use`, `demoted` with a cooldown, `archived`). The lifecycle
//! itself is `satchel_core::candidates`; these are the wire types.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Method;

/// Longest `text` of an observation, in characters. A candidate is a short lesson or rule that,
/// once promoted, goes whole into the system prompt of every request of the workspace: a
/// compaction's lessons are at most 300 characters and the constraints it observes 600, so
/// this leaves a client room for a paragraph and refuses a document.
pub const MAX_OBSERVE_TEXT_CHARS: usize = 2_000;
/// Longest `evidence.failure`, `evidence.fix` and `evidence.note`, in characters. The prompt
/// shows 120 characters of each; the store keeps the last 10 observations' evidence whole.
pub const MAX_OBSERVE_EVIDENCE_CHARS: usize = 2_000;
/// Most items of each of `tags`, `files` and `symbols`, in one observation and in a candidate
/// (a merge keeps the newest). Each is a label, a path or a name that the request focus
/// matches; a candidate applies to a few of them, not to a whole tree.
pub const MAX_OBSERVE_LIST_ITEMS: usize = 64;
/// Longest item of `tags`, `files` and `symbols`, in characters: a path or a name.
pub const MAX_OBSERVE_ITEM_CHARS: usize = 512;

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

/// A stored entry that was not loaded (bad signature, unparsable). It stays in the store:
/// writes keep such lines, verbatim, at the top of the file.
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

/// `candidates.evaluate`: run the lifecycle gates now. They also run on their own: after each
/// compaction that observed candidates, at the daemon's start and every hour.
pub enum CandidatesEvaluate {}

impl Method for CandidatesEvaluate {
    const NAME: &'static str = "candidates.evaluate";
    const SUMMARY: &'static str = "Run the promotion, demotion, archive and retention gates now (they also run after a \
         compaction that observed candidates, at start-up and hourly); returns the transitions and removals.";
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
    /// The failure (a command and its error, a rejected answer). At most 2,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBSERVE_EVIDENCE_CHARS))]
    pub failure: Option<String>,
    /// What fixed it. A failure and its fix add to the score, but no single observation is
    /// promoted: a lesson needs observations from two sessions. At most 2,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBSERVE_EVIDENCE_CHARS))]
    pub fix: Option<String>,
    /// Any other note. At most 2,000 characters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_OBSERVE_EVIDENCE_CHARS))]
    pub note: Option<String>,
}

/// Params of `candidates.observe`. What is over a limit (`maxLength`, `maxItems`) is refused
/// with -32602 naming the field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ObserveParams {
    /// The lesson or rule, short and imperative. At most 2,000 characters.
    #[schemars(length(max = MAX_OBSERVE_TEXT_CHARS))]
    pub text: String,
    /// What it is.
    pub kind: CandidateKind,
    /// Free tags. At most 64, of at most 512 characters each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_OBSERVE_LIST_ITEMS), inner(length(max = MAX_OBSERVE_ITEM_CHARS)))]
    pub tags: Vec<String>,
    /// Files it applies to. At most 64, of at most 512 characters each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_OBSERVE_LIST_ITEMS), inner(length(max = MAX_OBSERVE_ITEM_CHARS)))]
    pub files: Vec<String>,
    /// Symbols it applies to. At most 64, of at most 512 characters each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = MAX_OBSERVE_LIST_ITEMS), inner(length(max = MAX_OBSERVE_ITEM_CHARS)))]
    pub symbols: Vec<String>,
    /// The evidence: the failure and its fix, or a note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub evidence: Option<ObserveEvidence>,
    /// The session it was observed in (a session id: at most 128 letters, digits, `.`, `_`,
    /// `-`). A lesson is promoted once observed in two sessions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_id: Option<String>,
}

impl ObserveParams {
    /// The first field over its limit, as a dotted path (`tags.3`, `evidence.note`), and what
    /// is wrong with it; `None` when everything fits. The limits are the `MAX_OBSERVE_*`
    /// constants, which the schema states as `maxLength` and `maxItems`.
    pub fn over_limit(&self) -> Option<(String, String)> {
        let too_long = |field: String, text: &str, max: usize| {
            let chars = text.chars().count();
            (chars > max).then(|| (field, format!("is {chars} characters long; at most {max} are accepted")))
        };
        if let Some(over) = too_long("text".into(), &self.text, MAX_OBSERVE_TEXT_CHARS) {
            return Some(over);
        }
        for (name, list) in [("tags", &self.tags), ("files", &self.files), ("symbols", &self.symbols)] {
            if list.len() > MAX_OBSERVE_LIST_ITEMS {
                let why = format!(
                    "has {} items; at most {MAX_OBSERVE_LIST_ITEMS} are accepted",
                    list.len()
                );
                return Some((name.into(), why));
            }
            let over = list
                .iter()
                .enumerate()
                .find_map(|(i, item)| too_long(format!("{name}.{i}"), item, MAX_OBSERVE_ITEM_CHARS));
            if over.is_some() {
                return over;
            }
        }
        let evidence = self.evidence.as_ref()?;
        [
            ("failure", &evidence.failure),
            ("fix", &evidence.fix),
            ("note", &evidence.note),
        ]
        .into_iter()
        .find_map(|(name, part)| too_long(format!("evidence.{name}"), part.as_deref()?, MAX_OBSERVE_EVIDENCE_CHARS))
    }
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
    /// Store entries skipped on load (tampered, unsigned, unparsable, signed with a lost key);
    /// never used, never deleted.
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

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    fn observe(extra: Value) -> ObserveParams {
        let mut params = json!({"text": "Run cargo fmt first", "kind": "rule"});
        params
            .as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(params).unwrap()
    }

    #[test]
    fn what_is_over_a_limit_is_named_by_its_field() {
        let long = |n: usize| "x".repeat(n);
        let many = |n: usize| vec!["t"; n];
        let cases = [
            (json!({}), None),
            (json!({"text": long(MAX_OBSERVE_TEXT_CHARS)}), None),
            // Characters, not bytes: 2,000 of `é` are 4,000 bytes and fit.
            (json!({"text": "é".repeat(MAX_OBSERVE_TEXT_CHARS)}), None),
            (json!({"text": long(MAX_OBSERVE_TEXT_CHARS + 1)}), Some("text")),
            (json!({"tags": many(MAX_OBSERVE_LIST_ITEMS)}), None),
            (json!({"tags": many(100_000)}), Some("tags")),
            (json!({"files": many(MAX_OBSERVE_LIST_ITEMS + 1)}), Some("files")),
            (
                json!({"symbols": ["a", long(MAX_OBSERVE_ITEM_CHARS + 1)]}),
                Some("symbols.1"),
            ),
            (json!({"evidence": {"fix": long(MAX_OBSERVE_EVIDENCE_CHARS)}}), None),
            (
                json!({"evidence": {"note": long(MAX_OBSERVE_EVIDENCE_CHARS + 1)}}),
                Some("evidence.note"),
            ),
        ];
        for (extra, field) in cases {
            let over = observe(extra.clone()).over_limit();
            assert_eq!(over.as_ref().map(|(f, _)| f.as_str()), field, "{extra} {over:?}");
        }
        let (_, why) = observe(json!({"tags": many(100_000)})).over_limit().unwrap();
        assert_eq!(why, "has 100000 items; at most 64 are accepted");
    }

    #[test]
    fn the_schema_states_each_limit_and_its_description_the_same_number() {
        let schema = serde_json::to_value(schemars::schema_for!(ObserveParams)).unwrap();
        let grouped = |n: usize| {
            let digits = n.to_string();
            match digits.len() {
                4.. => format!("{},{}", &digits[..digits.len() - 3], &digits[digits.len() - 3..]),
                _ => digits,
            }
        };
        let field = |path: &str| schema.pointer(path).unwrap_or_else(|| panic!("{path} in {schema}"));
        let check = |path: &str, key: &str, max: usize| {
            let field = field(path);
            assert_eq!(field[key], json!(max), "{path}: {field}");
            let description = field["description"].as_str().unwrap_or_default();
            assert!(description.contains(&grouped(max)), "{path}: {description}");
        };
        check("/properties/text", "maxLength", MAX_OBSERVE_TEXT_CHARS);
        for list in ["tags", "files", "symbols"] {
            check(&format!("/properties/{list}"), "maxItems", MAX_OBSERVE_LIST_ITEMS);
            let item = field(&format!("/properties/{list}/items"));
            assert_eq!(item["maxLength"], json!(MAX_OBSERVE_ITEM_CHARS), "{list}");
            let description = field(&format!("/properties/{list}"))["description"].as_str().unwrap();
            assert!(description.contains(&grouped(MAX_OBSERVE_ITEM_CHARS)), "{description}");
        }
        for part in ["failure", "fix", "note"] {
            check(
                &format!("/$defs/ObserveEvidence/properties/{part}"),
                "maxLength",
                MAX_OBSERVE_EVIDENCE_CHARS,
            );
        }
    }
}
