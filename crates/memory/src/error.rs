//! Errors of the memory index.

use std::path::PathBuf;

/// Why a memory operation failed.
#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    /// The SQLite index could not be read or written. The message names SQLite, not the
    /// index: callers say which index it was (the daemon's reply starts "memory index:").
    #[error("SQLite: {0}")]
    Index(#[from] rusqlite::Error),
    /// The index file or its directory could not be created, opened or moved aside.
    #[error("memory index file {path}: {source}")]
    IndexFile {
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// A memory file could not be read.
    #[error("memory file {path}: {source}")]
    File {
        /// Workspace-relative path.
        path: String,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The search mode asked for cannot run: `vector` or `hybrid` without an embedding
    /// backend, `bm25` with full-text search disabled, or (`auto`) neither is on. The message
    /// says which and what to configure.
    #[error("{0}")]
    ModeUnavailable(String),
}

impl MemoryError {
    /// Whether SQLite found the index file damaged (or not a database at all): the index is
    /// derived, so it is rebuilt from the memory files rather than failing every later call.
    pub fn is_damage(&self) -> bool {
        matches!(
            self,
            MemoryError::Index(e) if matches!(
                e.sqlite_error_code(),
                Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
            )
        )
    }
}
