//! Typed storage errors, mapped to wire codes in one place by the daemon.

use std::path::PathBuf;

/// Why a storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A client path is absolute, has `..`, or resolves outside the workspace.
    #[error("path {0:?} is outside the workspace")]
    OutsideWorkspace(String),
    /// A client path names nothing in the workspace.
    #[error("no file {0:?} in the workspace")]
    NotFound(String),
    /// A file is not valid UTF-8 text.
    #[error("file {0:?} is not UTF-8 text")]
    NotText(String),
    /// A session id that cannot be a file name.
    #[error("invalid session id {0:?}: use 1-128 characters of [A-Za-z0-9._-], not starting with '.'")]
    InvalidSessionId(String),
    /// The operating system refused an operation.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was attempted.
        op: &'static str,
        /// On which path.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A stored line could not be encoded or decoded.
    #[error("session log {path}: {message}")]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// Attaches the operation and path to an I/O error.
pub(crate) fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StorageError + use<> {
    let path = path.to_path_buf();
    move |source| StorageError::Io { op, path, source }
}
