//! The memory index: the memory files brought into the store (incrementally, by chunk hash) and
//! searched by BM25, by vector similarity, or both fused.
//!
//! # Layout
//!
//! - this file: the public types and [`MemoryIndex`]'s state, `open`, `stats`, `watch_roots`;
//! - `paths`: which files are memory files, and their workspace-relative names; `walk`: finding
//!   them, symbolic links followed only inside the workspace, each directory and file once;
//! - `sync`: files → store (`sync_all`, `sync_paths`) and the embedding of new chunks; `tails`:
//!   a file that only grew chunked from its last block;
//! - `search`: mode selection, BM25, vectors, fusion, snippets;
//! - `keyword`: the keyword side's score, BM25 on an absolute 0..1 scale;
//! - `vectors`: the in-memory matrix of the current chunks' vectors, searched by brute force.
//!
//! # Concurrency
//!
//! Syncs take the writer connection's mutex, so they run one at a time; searches use a second
//! connection, which in WAL mode reads the last committed state, and the vector matrix under
//! an `RwLock` held only to copy scores out or to apply a sync's changes. So a search never
//! waits for a sync's file reading, chunking or embedding.

mod keyword;
mod paths;
mod search;
mod sync;
mod tails;
mod vectors;
mod walk;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::MemoryError;
use crate::embed::Embedder;
use crate::store::{Store, Which, sibling};
use paths::Roots;
/// One search result, a chunk of a memory file: the wire's type, so the daemon hands it on as
/// it is.
pub use satchel_protocol::memory::MemoryHit as Hit;
pub use satchel_protocol::memory::{HitSource, SearchMode};
use vectors::VectorMatrix;

/// How the index is built and searched (the daemon's `memory` configuration).
#[derive(Debug, Clone, PartialEq)]
pub struct IndexOptions {
    /// Whether BM25 search is available. The full-text index is maintained either way, so
    /// turning it on needs no rebuild.
    pub fts_enabled: bool,
    /// Weight of vector similarity in hybrid search, 0..1 (BM25 gets the rest).
    pub vector_weight: f64,
    /// Each side of a hybrid search returns `max_results × candidate_multiplier` candidates
    /// (at most [`crate::fusion::MAX_CANDIDATES`]).
    pub candidate_multiplier: f64,
    /// More Markdown to index besides `MEMORY.md` and `memory/`: files, or directories of
    /// `.md` files; relative to the workspace root unless absolute.
    pub extra_paths: Vec<PathBuf>,
}

impl Default for IndexOptions {
    fn default() -> Self {
        IndexOptions {
            fts_enabled: true,
            vector_weight: 0.5,
            candidate_multiplier: 3.0,
            extra_paths: Vec::new(),
        }
    }
}

/// What a sync did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct SyncReport {
    /// Files (re)chunked because they are new or their content changed.
    pub files_indexed: usize,
    /// Files removed from the index because they no longer exist.
    pub files_removed: usize,
    /// Chunks inserted (new or changed text or context).
    pub chunks_added: usize,
    /// Chunks deleted (gone, or changed).
    pub chunks_removed: usize,
    /// Chunks sent to the embedding backend (cached vectors are not counted).
    pub chunks_embedded: usize,
    /// What went wrong without failing the sync: an unreadable file, a failed embedding.
    pub warnings: Vec<String>,
}

/// A search's parameters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SearchOptions {
    /// Hits returned at most.
    pub max_results: usize,
    /// Hits scoring below this (0..1) are dropped.
    pub min_score: f64,
    /// How to search.
    pub mode: SearchMode,
}

impl Default for SearchOptions {
    fn default() -> Self {
        SearchOptions {
            max_results: 5,
            min_score: 0.1,
            mode: SearchMode::Auto,
        }
    }
}

/// A search's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SearchOutcome {
    /// Best first.
    pub hits: Vec<Hit>,
    /// The mode actually used (`auto` resolved; `bm25` after a failed query embedding).
    pub mode: SearchMode,
    /// What degraded the search without failing it.
    pub warnings: Vec<String>,
}

/// The index's state, for `inspect` and `memory.status`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct IndexStats {
    /// The index file.
    pub index_file: PathBuf,
    /// Files indexed.
    pub files: usize,
    /// Chunks indexed.
    pub chunks: usize,
    /// Chunks with a vector of the current embedding model.
    pub vectors: usize,
    /// Chunks still waiting for one (their embedding failed; retried on the next sync or search).
    pub chunks_without_vector: usize,
    /// Size of the index file and its write-ahead log, in bytes.
    pub index_bytes: u64,
    /// When a sync last finished, in milliseconds since the Unix epoch (before the first sync
    /// of this process: when a file was last read into the index).
    pub last_indexed_ms: Option<u64>,
    /// The embedding model's id, if a backend is configured.
    pub embedder: Option<String>,
    /// Embedding calls that failed since the index was opened.
    pub embedding_failures: u64,
    /// The last of those failures.
    pub last_embedding_error: Option<String>,
    /// Whether BM25 search is enabled.
    pub fts_enabled: bool,
    /// Lines of changed files read by the chunker since the index was opened: a file that
    /// only grew is chunked from its last block, so an append adds about its own lines.
    pub lines_chunked: u64,
}

/// The memory index of one workspace. `Send + Sync`: searches run while a sync writes.
pub struct MemoryIndex {
    /// The workspace root and the extra paths: which files are memory files.
    roots: Roots,
    /// The SQLite file, for `stats`.
    index_file: PathBuf,
    /// The embedding backend; `None` leaves the index BM25 only.
    embedder: Option<Arc<dyn Embedder>>,
    options: IndexOptions,
    /// The connection syncs write with. Its mutex serialises syncs (two would compute the
    /// same changes) and is held for a whole sync, embedding included; searches never take
    /// it, except to embed a few waiting chunks when it is free (`try_lock`).
    writer: Mutex<Store>,
    /// The connection searches read with; held for one query at a time.
    reader: Mutex<Store>,
    /// Vectors of the current chunks for the current model, loaded at open and updated after
    /// each sync's commit. Read by every vector search, written only to apply a sync.
    vectors: RwLock<VectorMatrix>,
    /// Files and chunks in the index, refreshed after each change: `stats` and the "are
    /// vectors missing" test need no query.
    files: AtomicUsize,
    chunks: AtomicUsize,
    /// Terms of all chunks, for the keyword score's average chunk length.
    terms: AtomicU64,
    /// Where the chunking of the files synced lately can resume after an append.
    tails: tails::Tails,
    /// Unix milliseconds of the last sync (0: none yet).
    last_indexed_ms: AtomicU64,
    embedding_failures: AtomicU64,
    last_embedding_error: Mutex<Option<String>>,
}

impl MemoryIndex {
    /// Opens (creating or rebuilding) the index at `index_file` for the memory files of
    /// `workspace_root`; returns warnings (e.g. "the index was corrupt and is rebuilt"). The
    /// index is not synced: call [`MemoryIndex::sync_all`].
    pub fn open(
        workspace_root: &Path,
        index_file: &Path,
        embedder: Option<Arc<dyn Embedder>>,
        options: IndexOptions,
    ) -> Result<(MemoryIndex, Vec<String>), MemoryError> {
        let (writer, warnings) = Store::open(index_file)?;
        let reader = Store::open_reader(index_file)?;
        let counts = writer.counts()?;
        let last_read_ms = writer
            .last_read_at_ns()?
            .map(|ns| u64::try_from(ns / 1_000_000).unwrap_or(0));
        let mut matrix = VectorMatrix::default();
        if let Some(embedder) = &embedder {
            for row in writer.vectors(embedder.model_id(), Which::All)? {
                matrix.insert(row);
            }
        }
        let index = MemoryIndex {
            roots: Roots::new(workspace_root, &options.extra_paths),
            index_file: index_file.to_owned(),
            embedder,
            options,
            writer: Mutex::new(writer),
            reader: Mutex::new(reader),
            vectors: RwLock::new(matrix),
            files: AtomicUsize::new(counts.files),
            chunks: AtomicUsize::new(counts.chunks),
            terms: AtomicU64::new(counts.terms),
            tails: tails::Tails::default(),
            last_indexed_ms: AtomicU64::new(last_read_ms.unwrap_or(0)),
            embedding_failures: AtomicU64::new(0),
            last_embedding_error: Mutex::new(None),
        };
        Ok((index, warnings))
    }

    /// Moves the index file aside as damaged (`reason`) and starts a new, empty one, keeping
    /// this `MemoryIndex` (its callers hold it). The caller syncs it again: until then
    /// searches find less. Returns the user's warnings.
    pub fn rebuild(&self, reason: &str) -> Result<Vec<String>, MemoryError> {
        // The writer before the reader, as nowhere else waits for both.
        let mut writer = lock(&self.writer);
        let mut reader = lock(&self.reader);
        // Two calls that met the damage at once: the second finds the first's new index.
        if writer.is_sound() {
            return Ok(Vec::new());
        }
        writer.close()?;
        reader.close()?;
        let (fresh, warnings) = Store::rebuild(&self.index_file, reason)?;
        *reader = Store::open_reader(&self.index_file)?;
        *writer = fresh;
        *self.vectors.write().unwrap_or_else(PoisonError::into_inner) = VectorMatrix::default();
        self.files.store(0, Ordering::Relaxed);
        self.chunks.store(0, Ordering::Relaxed);
        self.terms.store(0, Ordering::Relaxed);
        Ok(warnings)
    }

    /// The index's state now.
    pub fn stats(&self) -> IndexStats {
        let chunks = self.chunks.load(Ordering::Relaxed);
        let vectors = self.vectors.read().unwrap_or_else(PoisonError::into_inner).len();
        let size = |path: &Path| std::fs::metadata(path).map_or(0, |m| m.len());
        let last = self.last_indexed_ms.load(Ordering::Relaxed);
        IndexStats {
            index_file: self.index_file.clone(),
            files: self.files.load(Ordering::Relaxed),
            chunks,
            vectors,
            chunks_without_vector: if self.embedder.is_some() {
                chunks.saturating_sub(vectors)
            } else {
                0
            },
            index_bytes: size(&self.index_file) + size(&sibling(&self.index_file, "-wal")),
            last_indexed_ms: (last > 0).then_some(last),
            embedder: self.embedder.as_ref().map(|e| e.model_id().to_owned()),
            embedding_failures: self.embedding_failures.load(Ordering::Relaxed),
            last_embedding_error: lock(&self.last_embedding_error).clone(),
            fts_enabled: self.options.fts_enabled,
            lines_chunked: self.tails.lines_chunked(),
        }
    }

    /// What a watcher should watch (absolute): `<root>/MEMORY.md`, `<root>/memory` and the
    /// extra paths. Some may not exist yet.
    pub fn watch_roots(&self) -> Vec<PathBuf> {
        self.roots.watch_roots()
    }

    /// Records an embedding failure for `stats`.
    fn embedding_failed(&self, message: &str) {
        self.embedding_failures.fetch_add(1, Ordering::Relaxed);
        *lock(&self.last_embedding_error) = Some(message.to_owned());
    }

    /// Chunks without a vector of the current model (0 without an embedder).
    fn chunks_without_vector(&self) -> usize {
        match self.embedder {
            Some(_) => {
                let with = self.vectors.read().unwrap_or_else(PoisonError::into_inner).len();
                self.chunks.load(Ordering::Relaxed).saturating_sub(with)
            }
            None => 0,
        }
    }
}

/// Locks `mutex`, going on after a panic elsewhere: the connection inside rolled its
/// transaction back when the panic dropped it, and the counters are plain values.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Now, in nanoseconds since the Unix epoch.
fn now_ns() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_index_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        assert_send_sync::<MemoryIndex>();
    }

    #[test]
    fn options_have_the_documented_defaults() {
        let options = SearchOptions::default();
        assert_eq!(
            (options.max_results, options.min_score, options.mode),
            (5, 0.1, SearchMode::Auto)
        );
        let parsed: SearchOptions = serde_json::from_str(r#"{"mode": "hybrid"}"#).unwrap();
        assert_eq!(parsed.mode, SearchMode::Hybrid);
        assert_eq!(serde_json::to_string(&HitSource::Bm25).unwrap(), r#""bm25""#);
        let index = IndexOptions::default();
        assert_eq!(
            (index.fts_enabled, index.vector_weight, index.candidate_multiplier),
            (true, 0.5, 3.0)
        );
    }
}
