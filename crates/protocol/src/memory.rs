//! Long-term memory methods (F17–F19): the files `MEMORY.md` and `memory/**/*.md` are the
//! truth; `memory.write`, `memory.append` and `memory.get` edit and read them, `memory.search`
//! ranks their chunks, `memory.merge` folds the daily logs into `MEMORY.md`, and
//! `memory.status` shows the index, the watcher and the embedding backend.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::Method;

/// `memory.write`: replaces a memory file's content (atomically) and indexes it.
pub enum MemoryWrite {}

impl Method for MemoryWrite {
    const NAME: &'static str = "memory.write";
    const SUMMARY: &'static str =
        "Write a memory file (MEMORY.md or memory/**/*.md) atomically and index it; searchable on return.";
    type Params = MemoryWriteParams;
    type Result = MemoryFileChange;
}

/// Params of `memory.write`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryWriteParams {
    /// Workspace-relative: `MEMORY.md`, or a Markdown file under `memory/`
    /// (`memory/2026-11-24.md`, `memory/projects/satchel.md`), at most 1,024 bytes, each name at
    /// most 255, at most 16 directories under `memory/`.
    pub path: String,
    /// The whole new content.
    pub content: String,
}

/// `memory.append`: appends to a memory file (created if missing) and indexes it.
pub enum MemoryAppend {}

impl Method for MemoryAppend {
    const NAME: &'static str = "memory.append";
    const SUMMARY: &'static str =
        "Append text to a memory file (created if missing), durably, and index it; searchable on return.";
    type Params = MemoryAppendParams;
    type Result = MemoryFileChange;
}

/// Params of `memory.append`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryAppendParams {
    /// Workspace-relative: `MEMORY.md`, or a Markdown file under `memory/`, with the limits of
    /// `memory.write`'s `path`.
    pub path: String,
    /// Appended as it is; a newline is added first when the file does not end with one.
    pub text: String,
}

/// Result of `memory.write` and `memory.append`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MemoryFileChange {
    /// The file, workspace-relative.
    pub path: String,
    /// Its size in bytes after the call.
    pub bytes: u64,
    /// Its number of lines after the call.
    pub lines: u32,
    /// Chunks of the file (re)indexed by this call.
    pub chunks_indexed: usize,
    /// What did not go as it should but did not fail the call: an embedding endpoint down
    /// (the file is searchable by BM25 until its vectors are made), or the index unable to
    /// take the change (its file locked by another process, a full disk). The file is written
    /// either way, so the call must not be retried; the index is derived from the files and
    /// catches up in the background, and searches miss the change until it has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `memory.get`: reads a memory file, or some of its lines.
pub enum MemoryGet {}

impl Method for MemoryGet {
    const NAME: &'static str = "memory.get";
    const SUMMARY: &'static str = "Read a memory file, or the lines start_line..=end_line of it (1-based).";
    type Params = MemoryGetParams;
    type Result = MemoryGetResult;
}

/// Params of `memory.get`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryGetParams {
    /// Workspace-relative: `MEMORY.md`, a Markdown file under `memory/`, or a file of a
    /// configured `memory_extra_paths` entry (as `memory.search` names it).
    pub path: String,
    /// First line, 1-based (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<u32>,
    /// Last line, inclusive (default the last line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_line: Option<u32>,
}

/// Result of `memory.get`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MemoryGetResult {
    /// The file, as named in the call.
    pub path: String,
    /// The first line returned (1-based).
    pub start_line: u32,
    /// The last line returned; less than `start_line` when nothing was.
    pub end_line: u32,
    /// Lines in the whole file.
    pub total_lines: u32,
    /// The lines, each with its newline.
    pub text: String,
}

/// `memory.search`: the memory chunks that best answer a query.
pub enum MemorySearch {}

impl Method for MemorySearch {
    const NAME: &'static str = "memory.search";
    const SUMMARY: &'static str =
        "Rank memory chunks for a query: BM25 (FTS5), vectors, or both fused (memory_vector_weight, 0.5 by default).";
    type Params = MemorySearchParams;
    type Result = MemorySearchResult;
}

/// Params of `memory.search`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemorySearchParams {
    /// What to look for, in any language.
    pub query: String,
    /// At most this many results, 1–100 (default `memory_max_results`, 5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<usize>,
    /// Results scoring under this are dropped, 0–1 (default `memory_min_score`, 0.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// Which ranking (default `auto`: hybrid when both are on, else the one that is).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<SearchMode>,
}

/// How `memory.search` ranks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum SearchMode {
    /// Hybrid when BM25 and vectors are both on, else whichever is.
    #[default]
    Auto,
    /// BM25 over the FTS5 index only.
    Bm25,
    /// Cosine similarity of embeddings only.
    Vector,
    /// Both, fused.
    Hybrid,
}

impl SearchMode {
    /// The wire name.
    pub const fn name(self) -> &'static str {
        match self {
            SearchMode::Auto => "auto",
            SearchMode::Bm25 => "bm25",
            SearchMode::Vector => "vector",
            SearchMode::Hybrid => "hybrid",
        }
    }
}

/// Which ranking found a result.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum HitSource {
    /// BM25 only.
    Bm25,
    /// Vectors only.
    Vector,
    /// Both.
    Hybrid,
}

/// One `memory.search` result: a chunk of a memory file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MemoryHit {
    /// The file, workspace-relative (`memory.get` reads it).
    pub path: String,
    /// First line of the chunk, 1-based.
    pub start_line: u32,
    /// Last line of the chunk, inclusive.
    pub end_line: u32,
    /// 0–1, higher is better.
    pub score: f64,
    /// The chunk's text (its head, when long).
    pub snippet: String,
    /// Which ranking found it.
    pub source: HitSource,
}

/// Result of `memory.search`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MemorySearchResult {
    /// Best first.
    pub results: Vec<MemoryHit>,
    /// The ranking used (`auto` resolved, or `bm25` when the embedding backend failed).
    pub mode: SearchMode,
    /// Why the search was less than asked for, e.g. the embedding endpoint failing (BM25 ran
    /// instead).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `memory.merge`: folds the daily logs into `MEMORY.md` now (it also runs daily).
pub enum MemoryMerge {}

impl Method for MemoryMerge {
    const NAME: &'static str = "memory.merge";
    const SUMMARY: &'static str =
        "Fold recent daily logs into MEMORY.md, deduplicated, keeping a backup of the previous MEMORY.md.";
    type Params = MemoryMergeParams;
    type Result = MemoryMergeResult;
}

/// Params of `memory.merge`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryMergeParams {
    /// Merge the logs of the days up to and including this one (`YYYY-MM-DD`, default today,
    /// local time).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub through: Option<String>,
}

/// Result of `memory.merge`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MemoryMergeResult {
    /// Daily logs read (workspace-relative).
    pub merged: Vec<String>,
    /// New entries taken into `MEMORY.md` (as written, or rewritten by the model, which may
    /// fold several into one bullet or into an entry `MEMORY.md` had).
    pub added: usize,
    /// Entries skipped because `MEMORY.md` already had them.
    pub duplicates: usize,
    /// The copy of the previous `MEMORY.md` (workspace-relative), when it existed and changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<String>,
    /// Which summariser wrote the merged entries: `extractive`, or the configured model
    /// backend (`openai`, `client`) when it consolidated them. The model is asked only when
    /// there are new entries; the scheduled merge has no client, so with `client` it is
    /// extractive.
    pub summarizer: String,
    /// Why the configured model did not write the entries (unreachable, HTTP error, timeout,
    /// a reply that does not follow the format or leaves an entry out): the extractive merge
    /// was used instead.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

/// `memory.status`: what the memory index holds and how it is kept.
pub enum MemoryStatus {}

impl Method for MemoryStatus {
    const NAME: &'static str = "memory.status";
    const SUMMARY: &'static str =
        "The memory index (files, chunks, size, last indexed), the watcher, the embedding backend and its cache.";
    type Params = MemoryStatusParams;
    type Result = MemoryStatusResult;
}

/// Params of `memory.status` (none).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryStatusParams {}

/// Result of `memory.status`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MemoryStatusResult {
    /// The index file, workspace-relative.
    pub index_path: String,
    /// The search modes that are on: `bm25`, `vector`.
    pub modes: Vec<SearchMode>,
    /// Files, chunks, vectors, bytes, when last indexed.
    pub index: Value,
    /// The file watcher: backend, roots, events seen, last error.
    pub watcher: Value,
    /// The embedding backend and its cache (hits, misses, failures); `null` when none.
    pub embedding: Value,
    /// When the next daily merge runs (RFC 3339, local), `null` when it is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_merge: Option<String>,
}

/// Asks `context.prepare` to put the top memory hits for the newest user message into the
/// prompt as a section (source type `memory`), for agents without their own memory tool.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MemoryRecall {
    /// At most this many hits (default 3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_results: Option<usize>,
    /// Hits scoring under this are left out (default 0.3, higher than `memory.search`'s
    /// because nobody asked for these).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_score: Option<f64>,
    /// The section's priority, 0–100 (default 60).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i64>,
}
