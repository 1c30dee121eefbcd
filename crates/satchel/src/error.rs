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
            RpcError::Engine(e) => e,
        };
        match engine {
            EngineError::InvalidParams { .. } => ErrorCode::InvalidParams,
            EngineError::UnknownSession(_) => ErrorCode::UnknownSession,
            EngineError::StaleSession { .. } => ErrorCode::StaleSession,
            EngineError::SummarizeFailed(_) => ErrorCode::SummarizeFailed,
            EngineError::Cancelled => ErrorCode::RequestCancelled,
            EngineError::ResultTooLarge { .. } => ErrorCode::ResponseTooLarge,
            EngineError::Storage(StorageError::OutsideWorkspace(_)) => ErrorCode::PathOutsideWorkspace,
            EngineError::Storage(StorageError::NotFound(_)) => ErrorCode::FileNotFound,
            EngineError::Storage(StorageError::InvalidSessionId(_) | StorageError::NotText(_)) => {
                ErrorCode::InvalidParams
            }
            EngineError::Storage(StorageError::Io { .. } | StorageError::Corrupt { .. }) => ErrorCode::StorageFailure,
        }
    }

    /// What the error's `data.details` says, beyond its message.
    fn details(&self) -> Option<serde_json::Value> {
        match self {
            RpcError::InvalidParams { field, .. } | RpcError::Engine(EngineError::InvalidParams { field, .. }) => {
                Some(json!({ "field": field }))
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
        if code == ErrorCode::StorageFailure {
            tracing::error!("{error}");
        }
        ErrorObjectOwned::owned(
            code.code(),
            error.to_string(),
            error.details().map(|d| json!({ "name": code.name(), "details": d })),
        )
    }
}
