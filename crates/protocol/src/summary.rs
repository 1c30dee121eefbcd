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
    /// What that instruction changed, e.g. "kept only: goal, constraints, key decisions", so a
    /// reader of `context.inspect` can see it was understood.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction_effect: Option<String>,
    /// Every user message compacted so far, oldest first: the request itself (whole when short,
    /// its opening otherwise) and where the whole message is archived. Rendered under Goal;
    /// demonstrations (examples of how to work) are listed apart and never count as the goal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<UserRequest>,
    /// Try-error lessons, oldest first: a failure and what fixed it ("`cargo build` failed:
    /// error[E0432]: … → fixed: edited `Cargo.toml`, then `cargo build` succeeded"), the
    /// newest few of every compaction so far. Kept for the daily memory note, which writes
    /// only the lessons the previous summary did not have; not rendered for the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    // `error[E0432]` above is a compiler message quoted, not a link.
    #[allow(rustdoc::broken_intra_doc_links)]
    pub lessons: Vec<String>,
    /// Sentences of an agent framework's template found in the user's messages (a block that
    /// every request repeats, a demonstration's instructions): left out of the constraints, as
    /// they are not the user's words and the framework sends them again anyway; kept here so
    /// a later request that repeats them is recognised. Not rendered for the model.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub template: Vec<String>,
}

impl CompactSummary {
    /// Appends the archive range of a compaction that archived the messages `indices` (in
    /// order) and records, for this compaction's requests, the line that holds each one. The
    /// lines are known only when the range is one run of consecutive lines, one per message
    /// (always, since a compaction records each run of its lines apart: see
    /// [`Self::add_archive_ranges`]; not in a range an older satchel recorded for a compaction
    /// finished after a crash); otherwise requests keep only their index.
    pub fn add_archive_range(&mut self, range: ArchiveRange, indices: &[usize]) {
        let consecutive = range.end_line + 1 >= range.start_line
            && range.end_line + 1 - range.start_line == indices.len()
            && range.messages == indices.len();
        if consecutive {
            for request in self.requests.iter_mut().filter(|r| r.archived.is_none()) {
                if let Some(k) = indices.iter().position(|&i| i == request.index) {
                    request.archived = Some(ArchiveLine {
                        file: range.file.clone(),
                        line: range.start_line + k,
                    });
                }
            }
        }
        self.archive.push(range);
    }

    /// Appends the archive ranges of a compaction that archived the messages `indices` (in
    /// order) in one run of lines, or more: each range with the messages it holds (those from
    /// its first to its last index), so the path guide and the requests' lines stay exact.
    /// A compaction is in more than one run only when a crash interrupted it mid-archive and
    /// other sessions archived before it was finished.
    pub fn add_archive_ranges(&mut self, ranges: &[ArchiveRange], indices: &[usize]) {
        for range in ranges {
            let held: Vec<usize> = indices
                .iter()
                .copied()
                .filter(|i| (range.first_index..=range.last_index).contains(i))
                .collect();
            self.add_archive_range(range.clone(), &held);
        }
    }
}

/// A user message kept in the summary: the user's own words, never paraphrased.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UserRequest {
    /// The request with whitespace collapsed: whole when short, its opening (ending in `…`)
    /// when long or when the budget is tight.
    pub text: String,
    /// Length of the whole request in chars (whitespace collapsed), so a reader sees how much
    /// the excerpt leaves out.
    pub chars: usize,
    /// Original index of the message in its session.
    pub index: usize,
    /// Where the whole message is archived, once it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub archived: Option<ArchiveLine>,
    /// An example of how to work ("Here is a demonstration…"), not a task of this session.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub demonstration: bool,
}

/// One line of the dialog archive.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ArchiveLine {
    /// Workspace-relative archive file, `dialog/YYYY-MM-DD.jsonl`.
    pub file: String,
    /// 1-based line.
    pub line: usize,
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
    /// Values the agent found in a tool's output and used afterwards (a seed, a port, an
    /// offset, a version, a flag, a failing test's name), each with where it was found.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// Items left out of the lists above for want of room, counted and grouped (paths by
    /// directory, commands by program), so the lists never push out the goal.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub omitted: Vec<OmittedItems>,
}

/// The identifier lists of [`CriticalContext`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IdentifierList {
    /// `constraints` (only counted when even their openings no longer fit).
    Constraints,
    /// `files_read`.
    FilesRead,
    /// `files_modified`.
    FilesModified,
    /// `commands`.
    Commands,
    /// `errors`.
    Errors,
    /// `notes`.
    Notes,
}

/// What one list left out.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OmittedItems {
    /// The list.
    pub list: IdentifierList,
    /// How many items were left out in all.
    pub count: usize,
    /// The largest groups of them: a directory for paths, a program for commands; the rest
    /// are counted in `count` only.
    pub groups: Vec<ItemGroup>,
}

/// A group of omitted items.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct ItemGroup {
    /// Directory (ending in `/`) or program name.
    pub name: String,
    /// Items of the group left out.
    pub count: usize,
}

/// What kind of identifier a compaction dropped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DroppedKind {
    /// A user request the summary no longer quotes.
    Request,
    /// A constraint or preference the user stated.
    Constraint,
    /// A failure line of a tool result.
    Error,
    /// A file written or edited.
    FileModified,
    /// A shell command run.
    Command,
    /// A file read or listed.
    FileRead,
}

/// An identifier of a compacted span that the summary in force does not name: what the model
/// lost sight of, and where to get it back (`context.expand` with the compaction's id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct DroppedIdentifier {
    /// What it is.
    pub kind: DroppedKind,
    /// The identifier (a request's opening, an error line, a path, a command).
    pub text: String,
    /// Original index of the first message that has it.
    pub index: usize,
    /// Messages of the span that mention it (the ranking within a kind).
    pub mentions: usize,
}
