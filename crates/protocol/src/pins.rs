//! `context.pin`, `context.unpin`, `context.purge`: what a client keeps verbatim across
//! compactions, and what it drops from the requests, by stable ids.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::Method;

/// `context.pin`: keep a message, a text or a tool result verbatim in every request, across
/// compactions and restarts.
pub enum ContextPin {}

impl Method for ContextPin {
    const NAME: &'static str = "context.pin";
    const SUMMARY: &'static str = "Pin a message, a text or a tool result: never cut, re-emitted verbatim after the summary after every compaction.";
    type Params = PinParams;
    type Result = PinsResult;
}

/// `context.unpin`: remove a pin.
pub enum ContextUnpin {}

impl Method for ContextUnpin {
    const NAME: &'static str = "context.unpin";
    const SUMMARY: &'static str = "Remove a pin by its id.";
    type Params = UnpinParams;
    type Result = PinsResult;
}

/// `context.purge`: replace one offloaded tool result by a one-line stub in every later request.
pub enum ContextPurge {}

impl Method for ContextPurge {
    const NAME: &'static str = "context.purge";
    const SUMMARY: &'static str =
        "Replace one tool result (by its id) with a one-line stub in later requests; its file and the archive keep it.";
    type Params = PurgeParams;
    type Result = PurgeResult;
}

/// Most characters a `context.pin` text may have: pinned texts are sent in every request, so
/// a pin is a rule or a finding, not a document (put those in memory files).
pub const MAX_PIN_TEXT_CHARS: usize = 20_000;
/// Pinned content (every pin of a session together) may take at most this share of the
/// session's window (`1/N`), estimated at 4 bytes a token: more and every later request would
/// be over the limit, which no compaction can fix.
pub const PINNED_WINDOW_SHARE_DIVISOR: u64 = 4;

/// Params of `context.pin`: exactly one of `message_index`, `text` and `result_id`. A pin that
/// would make the session's pinned content take more than a quarter of its window
/// ([`PINNED_WINDOW_SHARE_DIVISOR`]) is refused, naming the field and the numbers; so is a
/// pin of a purged result (a purge is final for requests).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PinParams {
    /// The session.
    pub session_id: String,
    /// A message of the session, by its original index (`reconciliation` counts and the
    /// `index` of actions use the same numbering); live or already compacted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_index: Option<usize>,
    /// A text of the client's own (a rule, a finding) to keep in every request; at most
    /// 20,000 characters ([`MAX_PIN_TEXT_CHARS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = MAX_PIN_TEXT_CHARS))]
    pub text: Option<String>,
    /// An offloaded tool result, by the id its truncation notice and `context.inspect` show
    /// (`r12`): it is kept whole.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_id: Option<String>,
    /// A short name shown with the pin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Params of `context.unpin`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UnpinParams {
    /// The session.
    pub session_id: String,
    /// The pin (`p1`).
    pub pin_id: String,
}

/// Result of `context.pin` and `context.unpin`: the session's pins after the call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PinsResult {
    /// Echo of the session id.
    pub session_id: String,
    /// The pin the call made or removed.
    pub pin_id: String,
    /// Every pin of the session, oldest first.
    pub pins: Vec<PinInfo>,
}

/// What a pin keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum PinKind {
    /// A message of the session.
    Message,
    /// A text of the client's.
    Text,
    /// An offloaded tool result.
    Result,
}

/// One pin.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PinInfo {
    /// Its id (`p1`), for `context.unpin`.
    pub id: String,
    /// What it keeps.
    pub kind: PinKind,
    /// The client's label, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
    /// The pinned message (`message` and `result` pins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_index: Option<usize>,
    /// The pinned result (`result` pins).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_id: Option<String>,
    /// Whether the request shows it in the pinned block after the summary (its message was
    /// compacted, or it is a text); otherwise it is in the live messages, whole.
    pub in_block: bool,
    /// Characters of the verbatim text in the pinned block (0 while it is live).
    pub chars: usize,
}

/// Params of `context.purge`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PurgeParams {
    /// The session.
    pub session_id: String,
    /// The result, by the id its truncation notice and `context.inspect` show (`r12`).
    pub result_id: String,
}

/// Result of `context.purge`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PurgeResult {
    /// Echo of the session id.
    pub session_id: String,
    /// The result purged.
    pub result_id: String,
    /// The offload file that still holds it (`context.read` reads it).
    pub file: String,
    /// Its size.
    pub total_bytes: usize,
}
