//! The engine's typed errors; the binary maps each to a JSON-RPC error code.

use satchel_storage::StorageError;

/// Why a call on the engine failed. Whatever the reason, the call changed nothing: a
/// refusal is decided before any change, and a failure's writes are rolled back and the
/// session is reloaded from its log on the next call.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The params are wrong; `field` names the culprit.
    #[error("invalid params: {field}: {message}")]
    InvalidParams {
        /// The offending field (dotted path).
        field: String,
        /// What is wrong with it.
        message: String,
    },
    /// The session is not known.
    #[error("unknown session {0:?}: send `messages` to create it")]
    UnknownSession(String),
    /// `append` carried `expect_messages` and the session holds another count: the client's
    /// view is stale (a reply was lost, or another client appended), so nothing was appended.
    #[error(
        "session {session_id:?} holds {held} messages, the client expected {expected}: nothing was appended; resend the full history with `messages` or append from message {held}"
    )]
    StaleSession {
        /// The session.
        session_id: String,
        /// The count the client sent.
        expected: usize,
        /// The count the session holds.
        held: usize,
    },
    /// The summariser failed; nothing changed.
    #[error("{0}")]
    SummarizeFailed(String),
    /// The result would be larger than the caller can deliver; the call had no effect.
    #[error(
        "the result would be {bytes} bytes, over the transport's limit of {limit}: nothing was changed; raise the limit (--max-message-bytes) or send fewer messages at once"
    )]
    ResultTooLarge {
        /// The result's size (an upper bound when a compaction was due).
        bytes: usize,
        /// The limit.
        limit: usize,
    },
    /// The call was cancelled before its commit point; it had no effect.
    #[error("the call was cancelled before it took effect")]
    Cancelled,
    /// Storage refused or the client named a bad path.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

impl EngineError {
    /// Whether the call was refused for what it asked (bad params, an unknown or stale
    /// session) rather than failed while doing it: a refusal is decided before the call
    /// changes anything.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            EngineError::InvalidParams { .. } | EngineError::UnknownSession(_) | EngineError::StaleSession { .. }
        )
    }

    /// An invalid-params error about `field`.
    pub fn invalid_params(field: &str, message: impl std::fmt::Display) -> Self {
        EngineError::InvalidParams {
            field: field.to_owned(),
            message: message.to_string(),
        }
    }
}
