//! Error codes on the wire.
//!
//! JSON-RPC reserves -32768..-32000 for the protocol; satchel's own codes sit in the
//! implementation-defined -32000..-32099 band. Every code here is listed in
//! `protocol/errors.md` and generated into `protocol/openrpc.json`, and the client shims map
//! each to an exception class.

use serde::{Deserialize, Serialize};

/// Every error code satchel may answer with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ErrorCode {
    /// -32700: the message is not valid JSON.
    ParseError,
    /// -32600: valid JSON but not a JSON-RPC request.
    InvalidRequest,
    /// -32601: no such method.
    MethodNotFound,
    /// -32602: params do not match the method; the message names the field.
    InvalidParams,
    /// -32603: a bug or an unexpected failure inside satchel; the daemon keeps running.
    InternalError,
    /// -32800: the client cancelled the request with `$/cancelRequest`.
    RequestCancelled,
    /// -32001: `append` (or another method) named a session satchel does not hold.
    UnknownSession,
    /// -32002: a client-supplied path resolves outside the workspace.
    PathOutsideWorkspace,
    /// -32003: a client-supplied path does not exist in the workspace.
    FileNotFound,
    /// -32004: the disk refused a write; nothing was changed.
    StorageFailure,
    /// -32005: the summariser failed; nothing was compacted and the session is unchanged.
    SummarizeFailed,
    /// -32009: `append` with `expect_messages` found another message count; nothing was appended.
    StaleSession,
    /// -32007: the request exceeds the size limit (jsonrpsee's own code, kept as is).
    PayloadTooLarge,
    /// -32008: the reply would exceed the size limit (jsonrpsee's own code, kept as is).
    ResponseTooLarge,
    /// -32010: memory search is not available: the index is turned off
    /// (`memory_index_enabled`), or the daemon was built without the `memory` feature.
    MemoryUnavailable,
}

impl ErrorCode {
    /// Every code, in table order (used to generate the documentation).
    pub const ALL: [ErrorCode; 15] = [
        ErrorCode::ParseError,
        ErrorCode::InvalidRequest,
        ErrorCode::MethodNotFound,
        ErrorCode::InvalidParams,
        ErrorCode::InternalError,
        ErrorCode::RequestCancelled,
        ErrorCode::UnknownSession,
        ErrorCode::PathOutsideWorkspace,
        ErrorCode::FileNotFound,
        ErrorCode::StorageFailure,
        ErrorCode::SummarizeFailed,
        ErrorCode::StaleSession,
        ErrorCode::PayloadTooLarge,
        ErrorCode::ResponseTooLarge,
        ErrorCode::MemoryUnavailable,
    ];

    /// The numeric code sent on the wire.
    pub const fn code(self) -> i32 {
        match self {
            ErrorCode::ParseError => -32700,
            ErrorCode::InvalidRequest => -32600,
            ErrorCode::MethodNotFound => -32601,
            ErrorCode::InvalidParams => -32602,
            ErrorCode::InternalError => -32603,
            ErrorCode::RequestCancelled => -32800,
            ErrorCode::UnknownSession => -32001,
            ErrorCode::PathOutsideWorkspace => -32002,
            ErrorCode::FileNotFound => -32003,
            ErrorCode::StorageFailure => -32004,
            ErrorCode::SummarizeFailed => -32005,
            ErrorCode::StaleSession => -32009,
            ErrorCode::PayloadTooLarge => -32007,
            ErrorCode::ResponseTooLarge => -32008,
            ErrorCode::MemoryUnavailable => -32010,
        }
    }

    /// Stable name used by the client shims for their exception classes.
    pub const fn name(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "ParseError",
            ErrorCode::InvalidRequest => "InvalidRequest",
            ErrorCode::MethodNotFound => "MethodNotFound",
            ErrorCode::InvalidParams => "InvalidParams",
            ErrorCode::InternalError => "InternalError",
            ErrorCode::RequestCancelled => "RequestCancelled",
            ErrorCode::UnknownSession => "UnknownSession",
            ErrorCode::PathOutsideWorkspace => "PathOutsideWorkspace",
            ErrorCode::FileNotFound => "FileNotFound",
            ErrorCode::StorageFailure => "StorageFailure",
            ErrorCode::SummarizeFailed => "SummarizeFailed",
            ErrorCode::StaleSession => "StaleSession",
            ErrorCode::PayloadTooLarge => "PayloadTooLarge",
            ErrorCode::ResponseTooLarge => "ResponseTooLarge",
            ErrorCode::MemoryUnavailable => "MemoryUnavailable",
        }
    }

    /// When a client sees it.
    pub const fn meaning(self) -> &'static str {
        match self {
            ErrorCode::ParseError => "The message is not valid JSON.",
            ErrorCode::InvalidRequest => "Valid JSON, but not a JSON-RPC 2.0 request object.",
            ErrorCode::MethodNotFound => "No method of that name.",
            ErrorCode::InvalidParams => "Params do not match the method; the message and `data` name the field.",
            ErrorCode::InternalError => "Unexpected failure inside satchel; the daemon keeps serving.",
            ErrorCode::RequestCancelled => {
                "The request was cancelled by `$/cancelRequest` before it took effect: the session is exactly as before."
            }
            ErrorCode::UnknownSession => "The session id is not known (e.g. `append` before any `messages`).",
            ErrorCode::PathOutsideWorkspace => {
                "A path is absolute, contains `..`, or resolves (through a symlink) outside the workspace."
            }
            ErrorCode::FileNotFound => "The path is inside the workspace but no such file exists.",
            ErrorCode::StorageFailure => {
                "Writing to the workspace failed; the session is unchanged and the request can be retried."
            }
            ErrorCode::SummarizeFailed => {
                "The summariser failed (`context.compact`); nothing was compacted and the session is unchanged."
            }
            ErrorCode::StaleSession => {
                "`append` carried `expect_messages` and the session holds another count (a reply was lost, or another client appended); nothing was appended."
            }
            ErrorCode::PayloadTooLarge => "The request is larger than the transport's size limit.",
            ErrorCode::ResponseTooLarge => {
                "The reply would be larger than the transport's size limit (`--max-message-bytes`)."
            }
            ErrorCode::MemoryUnavailable => {
                "Memory search is off (`memory_index_enabled` is false) or not built in (the `memory` feature); the memory files still work."
            }
        }
    }
}
