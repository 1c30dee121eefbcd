//! The daemon's typed errors and their one conversion to JSON-RPC error objects.

use jsonrpsee::types::ErrorObjectOwned;
use satchel_engine::EngineError;
use satchel_protocol::ErrorCode;
use satchel_storage::StorageError;
use serde_json::json;

/// Why a method failed.
#[derive(Debug, thiserror::Error)]
pub enum RpcError {
    /// The params are wrong; `field` names the culprit.
    #[error("invalid params: {field}: {message}")]
    InvalidParams {
        /// The offending field (dotted path).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The engine refused or failed the call; it had no effect.
    #[error(transparent)]
    Engine(#[from] EngineError),
    /// Memory search is off or not built in.
    #[error("memory search is not available: {0}")]
    MemoryUnavailable(String),
    /// The memory index could not be read or written.
    #[error("memory index: {0}")]
    MemoryIndex(String),
    /// The handler of the method named failed unexpectedly (it panicked); the daemon's log
    /// says how. Nothing else is said: a panic's message may quote the client's input.
    #[error("internal error: {0} failed unexpectedly (the daemon's log says why); the daemon keeps serving")]
    Internal(String),
}

impl RpcError {
    /// An invalid-params error about `field`.
    pub fn invalid_params(field: &str, message: impl std::fmt::Display) -> Self {
        RpcError::InvalidParams {
            field: field.to_owned(),
            message: message.to_string(),
        }
    }

    fn code(&self) -> ErrorCode {
        let engine = match self {
            RpcError::InvalidParams { .. } => return ErrorCode::InvalidParams,
            RpcError::MemoryUnavailable(_) => return ErrorCode::MemoryUnavailable,
            RpcError::MemoryIndex(_) => return ErrorCode::StorageFailure,
            RpcError::Internal(_) => return ErrorCode::InternalError,
            RpcError::Engine(e) => e,
        };
        match engine {
            EngineError::InvalidParams { .. } => ErrorCode::InvalidParams,
            EngineError::UnknownSession(_) => ErrorCode::UnknownSession,
            EngineError::StaleSession { .. } => ErrorCode::StaleSession,
            EngineError::SummarizeFailed(_) => ErrorCode::SummarizeFailed,
            EngineError::Cancelled => ErrorCode::RequestCancelled,
            EngineError::ResultTooLarge { .. } => ErrorCode::ResponseTooLarge,
            EngineError::Storage(StorageError::OutsideWorkspace(_) | StorageError::Private(_)) => {
                ErrorCode::PathOutsideWorkspace
            }
            EngineError::Storage(StorageError::NotFound(_)) => ErrorCode::FileNotFound,
            EngineError::Storage(
                StorageError::InvalidSessionId(_) | StorageError::NotText(_) | StorageError::NotMemoryFile(_),
            ) => ErrorCode::InvalidParams,
            EngineError::Storage(StorageError::Io { .. } | StorageError::Corrupt { .. }) => ErrorCode::StorageFailure,
        }
    }

    /// What the error's `data.details` says, beyond its message.
    fn details(&self) -> Option<serde_json::Value> {
        match self {
            RpcError::InvalidParams { field, .. } | RpcError::Engine(EngineError::InvalidParams { field, .. }) => {
                Some(json!({ "field": shorten(field) }))
            }
            RpcError::Engine(EngineError::StaleSession { expected, held, .. }) => {
                Some(json!({ "expected": expected, "session_messages": held }))
            }
            _ => None,
        }
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(error: RpcError) -> Self {
        let code = error.code();
        let message = shorten(&error.to_string());
        if code == ErrorCode::StorageFailure {
            tracing::error!("{message}");
        }
        ErrorObjectOwned::owned(
            code.code(),
            message,
            error.details().map(|d| json!({ "name": code.name(), "details": d })),
        )
    }
}

/// Most characters of one word of an error message: a client input (a session id, a path, a
/// field name or value that serde quotes) is never longer in a reply.
const MAX_WORD_CHARS: usize = 200;
/// Most characters of an error message; room for serde's longest list of expected keys.
const MAX_MESSAGE_CHARS: usize = 2_000;

/// `text` with every word (a run between whitespace, `` ` `` and `"`) of more than
/// [`MAX_WORD_CHARS`] cut there, and the whole cut at [`MAX_MESSAGE_CHARS`], each cut marked
/// `…`. Whatever a client sent, a message quotes at most a few hundred characters of it;
/// messages made of the daemon's own words are left as they are.
fn shorten(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_MESSAGE_CHARS + 8));
    let mut word = 0;
    let mut total = 0;
    for c in text.chars() {
        if total == MAX_MESSAGE_CHARS {
            out.push('…');
            break;
        }
        word = if c.is_whitespace() || c == '`' || c == '"' {
            0
        } else {
            word + 1
        };
        match word.cmp(&(MAX_WORD_CHARS + 1)) {
            std::cmp::Ordering::Less => out.push(c),
            std::cmp::Ordering::Equal => out.push('…'),
            std::cmp::Ordering::Greater => continue,
        }
        total += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_quote_a_few_hundred_characters_of_any_input() {
        let id = "s".repeat(100_000);
        let unknown = RpcError::Engine(EngineError::UnknownSession(id.clone()));
        let object = ErrorObjectOwned::from(unknown);
        let head = "s".repeat(MAX_WORD_CHARS);
        assert_eq!(
            object.message(),
            format!("unknown session \"{head}…\": send `messages` to create it")
        );
        let field = RpcError::invalid_params(&format!("config.{id}"), format!("unknown field `{id}`"));
        let object = ErrorObjectOwned::from(field);
        assert!(
            object.message().chars().count() < 3 * MAX_WORD_CHARS,
            "{}",
            object.message()
        );
        let data = object.data().unwrap().get();
        assert!(data.len() < 2 * MAX_WORD_CHARS, "{data}");
        // Words of any size, many of them: the whole message is capped too.
        let spaced = "ab ".repeat(50_000);
        let message = shorten(&format!("bad value {spaced}"));
        assert_eq!(message.chars().count(), MAX_MESSAGE_CHARS + 1);
        assert!(message.ends_with('…'));
        // Multi-byte characters are cut at a character boundary.
        assert_eq!(shorten(&"é".repeat(300)), format!("{}…", "é".repeat(MAX_WORD_CHARS)));
    }

    #[test]
    fn the_daemons_own_words_are_kept() {
        let keys: Vec<String> = (0..40).map(|i| format!("`some_config_key_{i}`")).collect();
        let message = format!("unknown field `x`, expected one of {}", keys.join(", "));
        assert_eq!(shorten(&message), message);
        let exact = "w".repeat(MAX_WORD_CHARS);
        assert_eq!(shorten(&exact), exact);
    }
}
