//! `context.expand`: bring a compacted span back into the next request, raw, once.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Method;
use crate::summary::ArchiveRange;

/// `context.expand`: re-hydrate a compacted span (raw messages from the archive, pairs intact,
/// long tool results as their recent-phase excerpts) into the next `context.prepare`, once,
/// within a token budget.
pub enum ContextExpand {}

impl Method for ContextExpand {
    const NAME: &'static str = "context.expand";
    const SUMMARY: &'static str =
        "Bring a compacted span back from the archive into the next request, once, within a token budget.";
    type Params = ExpandParams;
    type Result = ExpandResult;
}

/// Params of `context.expand`: exactly one of `compaction_id` and `archive`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpandParams {
    /// The session.
    pub session_id: String,
    /// The compaction whose span comes back (its `id` in the `compacted` action or in
    /// `context.inspect`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction_id: Option<String>,
    /// Or a range of the session's archive (lines of one `dialog/` file), e.g. a summary's
    /// archive reference.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archive: Option<ExpandRange>,
    /// Tokens the span may take in the request; default a quarter of the window, and never
    /// more than the room left under the compaction threshold. Older turns that do not fit
    /// are left out, whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens: Option<u64>,
}

/// Lines of an archive file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ExpandRange {
    /// Workspace-relative archive file, `dialog/YYYY-MM-DD.jsonl`.
    pub file: String,
    /// First line (1-based).
    pub start_line: usize,
    /// Last line (inclusive).
    pub end_line: usize,
}

/// Result of `context.expand`: what the next request will carry.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ExpandResult {
    /// Echo of the session id.
    pub session_id: String,
    /// The archive lines the span was read from: the first run of them when they are in more
    /// than one (see `more_archive`).
    pub archive: ArchiveRange,
    /// The further runs of lines of the span, oldest first: the span of a compaction that a
    /// crash interrupted mid-archive is in two runs when other sessions archived before the
    /// restart finished it. Absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_archive: Vec<ArchiveRange>,
    /// Messages the next request carries after the summary.
    pub messages: usize,
    /// Their tokens.
    pub tokens: u64,
    /// The budget they were fitted into.
    pub budget_tokens: u64,
    /// Older messages of the span left out because they did not fit (whole turns).
    pub left_out: usize,
    /// Tool results shown as their recent-phase excerpts (the full text stays in the file).
    pub truncated_results: usize,
}
