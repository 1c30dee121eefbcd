//! The satchel wire protocol: every method, its params and result, and satchel's own error codes.
//!
//! This crate is the single source of truth for the protocol. It has no I/O; the daemon
//! implements it and `protocol/openrpc.json` is generated from it (see `openrpc`), so the
//! language-neutral spec can never drift from the code.
//!
//! Wire conventions: method names are dotted (`context.prepare`), field names are
//! `snake_case` (the spec's configuration keys are snake_case, so everything is).

pub mod aliases;
pub mod assembly;
pub mod candidates;
pub mod config;
pub mod errors;
pub mod expand;
pub mod inspect;
pub mod memory;
pub mod memory_config;
pub mod method;
pub mod methods;
pub mod openrpc;
pub mod pins;
pub mod summary;
pub mod watch;

pub use assembly::{
    Calibration, CalibrationSample, PromptAssembly, PromptBudget, PromptSection, ProviderUsage, PruneReport,
    RequestFocus, SectionReport, UsageParams,
};
pub use candidates::{
    Candidate, CandidateEvidence, CandidateKind, CandidateState, CandidatesEvaluate, CandidatesFeedback,
    CandidatesList, CandidatesObserve, CandidatesRemove, EvaluateParams, EvaluateResult, FeedbackOutcome,
    FeedbackParams, FeedbackResult, ListParams, ListResult, MAX_OBSERVE_EVIDENCE_CHARS, MAX_OBSERVE_ITEM_CHARS,
    MAX_OBSERVE_LIST_ITEMS, MAX_OBSERVE_TEXT_CHARS, ObserveEvidence, ObserveParams, ObserveResult, RejectedEntry,
    RemoveParams, RemoveResult, StateChange,
};
pub use config::{Config, ConfigError, ContextMode, DaemonConfig, OffloadNoticePath, RenderConfig, TokenConfig};
pub use errors::ErrorCode;
pub use expand::{ContextExpand, ExpandParams, ExpandRange, ExpandResult};
pub use method::Method;
pub use methods::*;
pub use pins::{
    ContextPin, ContextPurge, ContextUnpin, MAX_PIN_TEXT_CHARS, PINNED_WINDOW_SHARE_DIVISOR, PinInfo, PinKind,
    PinParams, PinsResult, PurgeParams, PurgeResult, UnpinParams,
};

pub use summary::{
    ArchiveLine, ArchiveRange, CompactSummary, CriticalContext, DroppedIdentifier, DroppedKind, IdentifierList,
    ItemGroup, OmittedItems, UserRequest,
};

/// Version of the wire protocol, bumped on incompatible changes; `initialize` reports it.
pub const PROTOCOL_VERSION: &str = "0.1.0";
