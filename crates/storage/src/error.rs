//! Typed storage errors, mapped to wire codes in one place by the daemon.
//!
//! A message quotes what the client sent (a path, a session id) in at most
//! [`MAX_QUOTED_CHARS`] characters, so an error about a huge input stays small.

use std::path::PathBuf;

/// Most characters of a client input that an error message quotes.
pub const MAX_QUOTED_CHARS: usize = 200;

/// Why a storage operation failed.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// A client path is absolute, has `..`, or resolves outside the workspace.
    #[error("path {} is outside the workspace", quoted(.0))]
    OutsideWorkspace(String),
    /// A client path names no file in the workspace, or cannot name one (a name too long, a
    /// symlink loop, a file where the path needs a directory).
    #[error("no file {} in the workspace", quoted(.0))]
    NotFound(String),
    /// A client path that is not a memory file (`MEMORY.md` or `memory/**/*.md`).
    #[error("path {} is not a memory file: use MEMORY.md or a .md file under memory/", quoted(.0))]
    NotMemoryFile(String),
    /// A client path names a file private to satchel (a secret key under `keys/`), which no
    /// client call may read.
    #[error("path {} is private to satchel (a secret key) and cannot be read", quoted(.0))]
    Private(String),
    /// A file is not valid UTF-8 text.
    #[error("file {} is not UTF-8 text", quoted(.0))]
    NotText(String),
    /// A session id that cannot be a file name.
    #[error(
        "invalid session id {}: use 1-128 characters of [A-Za-z0-9._-], not starting with '.'",
        quoted(.0)
    )]
    InvalidSessionId(String),
    /// The operating system refused an operation.
    #[error("{op} {}: {source}", shortened(&.path.to_string_lossy()))]
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
    #[error("session log {path}: {message}", path = .path.display())]
    Corrupt {
        /// The log.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// `input` as a quoted string (`"…"`, escaped like `{:?}`) of at most [`MAX_QUOTED_CHARS`]
/// characters; a longer one is cut, followed by `…` and its full length.
pub(crate) fn quoted(input: &str) -> String {
    match cut(input) {
        None => format!("{input:?}"),
        Some(head) => format!("{head:?}… ({} bytes)", input.len()),
    }
}

/// `input` as is when short, else cut like [`quoted`].
fn shortened(input: &str) -> String {
    match cut(input) {
        None => input.to_owned(),
        Some(head) => format!("{head}… ({} bytes)", input.len()),
    }
}

/// The first [`MAX_QUOTED_CHARS`] characters of `input`, when it has more.
fn cut(input: &str) -> Option<&str> {
    input.char_indices().nth(MAX_QUOTED_CHARS).map(|(end, _)| &input[..end])
}

/// Attaches the operation and path to an I/O error.
pub(crate) fn io(op: &'static str, path: &std::path::Path) -> impl FnOnce(std::io::Error) -> StorageError + use<> {
    let path = path.to_path_buf();
    move |source| StorageError::Io { op, path, source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_quote_at_most_the_limit_of_an_input() {
        let huge = "é".repeat(100_000);
        for error in [
            StorageError::OutsideWorkspace(huge.clone()),
            StorageError::NotFound(huge.clone()),
            StorageError::Private(huge.clone()),
            StorageError::NotText(huge.clone()),
            StorageError::InvalidSessionId(huge.clone()),
            StorageError::Io {
                op: "canonicalize",
                path: huge.clone().into(),
                source: std::io::Error::other("boom"),
            },
        ] {
            let message = error.to_string();
            assert!(message.chars().count() < MAX_QUOTED_CHARS + 150, "{message}");
            assert!(message.contains(&"é".repeat(MAX_QUOTED_CHARS)), "{message}");
            assert!(message.contains("… (200000 bytes)"), "{message}");
        }
        let short = StorageError::InvalidSessionId("a b".into()).to_string();
        assert!(short.starts_with(r#"invalid session id "a b": "#), "{short}");
        let exact = "x".repeat(MAX_QUOTED_CHARS);
        assert_eq!(quoted(&exact), format!("{exact:?}"));
    }
}
