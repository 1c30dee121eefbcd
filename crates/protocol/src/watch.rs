//! Observing sessions: `context.sessions` lists them, `context.watch` subscribes a connection
//! to one, and the `context.event` notification tells watchers what each call did.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[cfg(doc)]
use crate::Action;
use crate::{DroppedIdentifier, Method, Pressure, TokenUsage};

/// `context.sessions`: the sessions this daemon knows, for tools that attach to it.
pub enum ContextSessions {}

impl Method for ContextSessions {
    const NAME: &'static str = "context.sessions";
    const SUMMARY: &'static str = "The sessions of this workspace, with live numbers for those in use.";
    type Params = SessionsParams;
    type Result = SessionsResult;
}

/// Params of `context.sessions` (none).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SessionsParams {}

/// One session in `context.sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SessionSummary {
    /// The session id.
    pub session_id: String,
    /// Loaded in this daemon (driven since it started); only those have live numbers.
    pub live: bool,
    /// Messages in the session now (live sessions).
    pub messages: Option<usize>,
    /// Tokens of its last request (live sessions that prepared one).
    pub tokens: Option<u64>,
    /// Pressure of its last request.
    pub pressure: Option<Pressure>,
    /// Compactions so far (live sessions).
    pub compactions: Option<usize>,
}

/// Result of `context.sessions`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SessionsResult {
    /// Every stored session, sorted by id.
    pub sessions: Vec<SessionSummary>,
}

/// `context.watch`: subscribe this connection to a session's events (`context.event`
/// notifications after each prepare and compaction), for live views.
pub enum ContextWatch {}

impl Method for ContextWatch {
    const NAME: &'static str = "context.watch";
    const SUMMARY: &'static str =
        "Subscribe this connection to `context.event` notifications of a session (after each prepare and compaction).";
    type Params = WatchParams;
    type Result = WatchResult;
}

/// Params of `context.watch`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct WatchParams {
    /// The session to follow.
    pub session_id: String,
}

/// Result of `context.watch`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WatchResult {
    /// Always true: events follow as `context.event` notifications on this connection.
    pub watching: bool,
}

/// The `context.event` notification sent to watchers.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ContextEvent {
    /// The session.
    pub session_id: String,
    /// The call that changed the session.
    pub kind: EventKind,
    /// Tokens per zone of the session's request now.
    pub tokens: TokenUsage,
    /// Pressure now.
    pub pressure: Pressure,
    /// Messages in the session.
    pub messages: usize,
    /// Compactions so far.
    pub compactions: usize,
    /// Kinds of the actions the call took, in order.
    pub actions: Vec<ActionKind>,
    /// The compaction this event starts or reports (`compaction_started`, or a call that
    /// compacted): its numbers, and what its summary no longer names.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compaction: Option<CompactionEvent>,
}

/// A compaction as `context.event` reports it: when it starts (tokens before, the threshold,
/// the messages it takes), and when the call that ran it ends (its id, tokens after, what its
/// summary dropped, which `context.expand {compaction_id}` brings back).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionEvent {
    /// Its id, once it is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// Asked for by `context.compact`.
    pub manual: bool,
    /// Messages it summarises.
    pub messages: usize,
    /// Request tokens before.
    pub tokens_before: u64,
    /// Request tokens after, once it is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens_after: Option<u64>,
    /// The compaction threshold of the call.
    pub threshold: u64,
    /// The most important identifiers its summary no longer names (at most 5; the whole
    /// list is in the `compacted` action and in inspect).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedIdentifier>,
}

/// Which call a [`ContextEvent`] reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// `context.prepare`.
    Prepare,
    /// `context.compact`.
    Compact,
    /// A compaction is starting, inside a `context.prepare` or `context.compact` still
    /// running (sent before its summary is written); the call's own event follows.
    CompactionStarted,
}

/// The kind of an [`Action`], as listed in events.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ActionKind {
    /// [`Action::Offloaded`].
    Offloaded,
    /// [`Action::Compacted`].
    Compacted,
    /// [`Action::CompactionFailed`].
    CompactionFailed,
    /// [`Action::Repaired`].
    Repaired,
    /// [`Action::Truncated`].
    Truncated,
    /// [`Action::Pruned`].
    Pruned,
    /// [`Action::PromptOverBudget`].
    PromptOverBudget,
}
