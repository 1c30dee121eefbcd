//! The daemon's typed errors and their one conversion to JSON-RPC error objects.

use jsonrpsee::types::ErrorObjectOwned;
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
    /// The session is not known.
    #[error("unknown session {0:?}: send `messages` to create it")]
    UnknownSession(String),
    /// The summariser failed; nothing changed.
    #[error("{0}")]
    SummarizeFailed(String),
    /// Storage refused or the client named a bad path.
    #[error(transparent)]
    Storage(StorageError),
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
        match self {
            RpcError::InvalidParams { .. } => ErrorCode::InvalidParams,
            RpcError::UnknownSession(_) => ErrorCode::UnknownSession,
            RpcError::SummarizeFailed(_) => ErrorCode::SummarizeFailed,
            RpcError::Storage(StorageError::OutsideWorkspace(_)) => ErrorCode::PathOutsideWorkspace,
            RpcError::Storage(StorageError::NotFound(_)) => ErrorCode::FileNotFound,
            RpcError::Storage(StorageError::InvalidSessionId(_) | StorageError::NotText(_)) => ErrorCode::InvalidParams,
            RpcError::Storage(StorageError::Io { .. } | StorageError::Corrupt { .. }) => ErrorCode::StorageFailure,
        }
    }
}

impl From<RpcError> for ErrorObjectOwned {
    fn from(error: RpcError) -> Self {
        let code = error.code();
        let data = match &error {
            RpcError::InvalidParams { field, .. } => Some(json!({ "field": field })),
            _ => None,
        };
        if code == ErrorCode::StorageFailure {
            tracing::error!("{error}");
        }
        ErrorObjectOwned::owned(
            code.code(),
            error.to_string(),
            data.map(|d| json!({ "name": code.name(), "details": d })),
        )
    }
}
