//! The structured `compact_summary` (F1) that replaces compacted messages.
//!
//! It is a protocol type because clients receive it (`context.prepare`, `context.compact`,
//! `context.inspect`) and because summarisers — the built-in extractive one, and the LLM
//! backends of a later issue — all produce this one shape.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where a compaction put the raw messages it removed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveRange {
    /// Workspace-relative archive file, `dialog/YYYY-MM-DD.jsonl`.
    pub file: String,
    /// First line (1-based) holding a message of this compaction.
    pub start_line: usize,
    /// Last line (inclusive).
    pub end_line: usize,
    /// Original indices of the first and last message archived.
    pub first_index: usize,
    /// See `first_index`.
    pub last_index: usize,
    /// Number of messages archived.
    pub messages: usize,
}

/// A structured summary of everything compacted so far.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactSummary {
    /// What the user wants to accomplish, in their words.
    pub goal: Vec<String>,
    /// Requirements and preferences the user stated, in their words.
    pub constraints: Vec<String>,
    /// Completed work.
    pub done: Vec<String>,
    /// Work under way when the span ended.
    pub in_progress: Vec<String>,
    /// Failures not yet resolved.
    pub blocked: Vec<String>,
    /// Decisions and their rationale, as stated.
    pub key_decisions: Vec<String>,
    /// What comes next.
    pub next_steps: Vec<String>,
    /// Data needed to continue: files read and modified, commands run, errors seen.
    pub critical_context: CriticalContext,
    /// Every archive range compacted into this summary, oldest first (the path guide).
    pub archive: Vec<ArchiveRange>,
    /// Extra instruction that steered the latest compaction, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
}

/// Exact identifiers that must survive compaction.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CriticalContext {
    /// Files read or referenced.
    pub files_read: Vec<String>,
    /// Files created or modified.
    pub files_modified: Vec<String>,
    /// Commands run (tool-call command strings).
    pub commands: Vec<String>,
    /// First error line of each failing tool result.
    pub errors: Vec<String>,
    /// Other facts worth keeping verbatim.
    pub notes: Vec<String>,
}
