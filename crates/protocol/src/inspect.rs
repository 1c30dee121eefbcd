//! `context.inspect`: what satchel holds for a session and what it did, with AceClaw's view of
//! the last system prompt and its `ContextMonitor` numbers.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::assembly::{Calibration, PromptAssembly, SectionReport};
use crate::{
    CompactSummary, CompactionReport, MessageFormat, Method, Phase, PinInfo, Pressure, RejectedEntry, TokenUsage,
};

/// `context.inspect`: what satchel holds for a session and what it did.
pub enum ContextInspect {}

impl Method for ContextInspect {
    const NAME: &'static str = "context.inspect";
    const SUMMARY: &'static str =
        "Tokens per zone, pressure, summary, offloaded results and compaction history of a session.";
    type Params = InspectParams;
    type Result = InspectResult;
}

/// Params of `context.inspect`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct InspectParams {
    /// The session.
    pub session_id: String,
    /// Assemble the last request's sections again as if the newest user message were this
    /// text (what would a question about `X` keep?). The session is not changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query_hint: Option<String>,
    /// Also return this section of the last request in full (`detail`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail_key: Option<String>,
}

/// One section in full, for `context.inspect {detail_key}`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SectionDetail {
    /// Its line of the section table.
    #[serde(flatten)]
    pub report: SectionReport,
    /// The text as it went into the prompt (empty when dropped).
    pub content: String,
    /// The text as the client sent it.
    pub original_content: String,
}

/// The session's request pressure over time, like AceClaw's `ContextMonitor`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ContextMonitor {
    /// Tokens of the last request.
    pub current_tokens: u64,
    /// The last request's `pressure` in AceClaw's words, on the same scale: `normal` under
    /// half the window (`low`), `watch` under the compaction threshold (`medium`), `compact`
    /// over it (`high`), `critical` at the limit. (AceClaw's own fixed 70/85/95 % levels would
    /// disagree with `pressure` whenever the threshold is not 85 %.)
    pub pressure_level: String,
    /// Largest request since the daemon started.
    pub peak_tokens: u64,
    /// Compactions so far.
    pub compaction_count: usize,
    /// Requests that pruning alone brought under the trigger (`aceclaw` mode).
    pub pruned_only_count: usize,
    /// Phases the last request reached: `prune`, `summarize` (empty when it was under its threshold).
    pub phases_reached: Vec<String>,
    /// Tokens pruning and compaction took off the last request.
    pub last_tokens_saved: u64,
    /// Tokens pruning and compaction took off requests since the daemon started.
    pub total_tokens_saved: u64,
}

/// An offloaded tool result of a live message.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct OffloadedResult {
    /// Its stable id (`r12`; `r12.1` for a message's second result), shown in its truncation
    /// notice: what `context.pin` and `context.purge` take.
    pub id: String,
    /// Original index of the message.
    pub index: usize,
    /// JSON pointer of the text.
    pub pointer: String,
    /// Workspace-relative file with the full text.
    pub file: String,
    /// Size of the full text.
    pub total_bytes: usize,
    /// Lines of the full text.
    pub total_lines: usize,
    /// The tool whose result it is, when its call is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The phase the message is rendered in now (recent or old limit); absent while the
    /// session is not `loaded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// Bytes of the text really sent now: the excerpt with its notice, or the whole text when
    /// it fits its phase's limit. `total_bytes - sent_bytes` is the saving. Absent while the
    /// session is not `loaded`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sent_bytes: Option<usize>,
    /// Pinned (`context.pin`): sent whole.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pinned: bool,
    /// Purged (`context.purge`): sent as a one-line stub.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub purged: bool,
}

/// The messages zone (`tokens.messages`) by who wrote each message; the three add up to it.
/// Each message counts as rendered, so offloaded tool results count as their excerpts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct MessageRoleTokens {
    /// User messages (and any other non-system role that is not the assistant's nor a tool's).
    pub user: u64,
    /// Assistant messages, with their tool calls and reasoning.
    pub assistant: u64,
    /// Tool results: OpenAI `tool` messages, Anthropic user messages carrying `tool_result` blocks.
    pub tool_results: u64,
}

/// Result of `context.inspect`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InspectResult {
    /// Echo of the session id.
    pub session_id: String,
    /// Format of the session, once known.
    pub format: Option<MessageFormat>,
    /// A `context.prepare` of this session ran since the daemon loaded it: `tokens`,
    /// `message_tokens`, the monitor and the offloads' `sent_bytes` are its numbers. False for
    /// a session known from its log only: those are zeros (or absent) until its next call.
    pub loaded: bool,
    /// Tokens per zone as of the last `context.prepare` of this daemon (zeros before one).
    pub tokens: TokenUsage,
    /// `tokens.messages` split by role.
    pub message_tokens: MessageRoleTokens,
    /// The per-request `config` overrides of the session's last `context.prepare` (empty
    /// when it sent none), kept in the session log so a restarted daemon shows them too.
    pub config_overrides: Map<String, Value>,
    /// How full the window is.
    pub pressure: Pressure,
    /// Messages in the session now.
    pub messages: usize,
    /// Messages compacted away (archived).
    pub archived_messages: usize,
    /// The summary in force.
    pub summary: Option<CompactSummary>,
    /// The token budget a compaction's summary is fitted to under the session's configuration
    /// (`summary_window_share` of the window, at least 2,500, at most a quarter of the window
    /// and `summary_max_tokens` when set).
    pub summary_budget_tokens: u64,
    /// Offloaded results of live messages.
    pub offloaded: Vec<OffloadedResult>,
    /// The session's pins (`context.pin`), oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pins: Vec<PinInfo>,
    /// Lines of the workspace's candidate store that were skipped (a signature that does not
    /// match: edited by hand, or signed with another key; unsigned or malformed): never used.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rejected_candidates: Vec<RejectedEntry>,
    /// Every compaction, oldest first.
    pub compactions: Vec<CompactionReport>,
    /// Largest request of this session since the daemon started.
    pub peak_tokens: u64,
    /// Live numbers like AceClaw's `ContextMonitor`.
    pub monitor: ContextMonitor,
    /// How counts are corrected by the provider's reported usage.
    pub calibration: Calibration,
    /// The system prompt of the last request, in AceClaw's `context.inspect` shape
    /// (`sessionId`, `totalChars`, `sections`, …); absent before a `context.prepare`.
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub prompt: Option<PromptAssembly>,
    /// The section named by `detail_key`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<SectionDetail>,
    /// Where the session's requests come from when `satchel proxy` made it: the provider API
    /// and what named the session. Absent for a session of JSON-RPC clients.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<SessionOrigin>,
}

/// How a proxied session came to be: which provider API its agent speaks, what named the
/// session (README, "Which session a request belongs to"), and the compactions the agent
/// ran through its own model.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct SessionOrigin {
    /// `anthropic-messages`, `openai-chat` or `openai-responses`.
    pub api: String,
    /// What named the session: `x-satchel-session header`, `x-claude-code-session-id header`,
    /// `metadata.user_id`, `prompt_cache_key`, `user`, or `hash of the system prompt and first
    /// user message`.
    pub key_from: String,
    /// Requests in which the agent asked its model to summarise the conversation itself
    /// (Claude Code's and Codex's own compaction), oldest first. satchel prepared them like
    /// any other request, so they fit the window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub agent_compactions: Vec<AgentCompaction>,
}

/// One compaction the agent asked its own model for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct AgentCompaction {
    /// When the request came (RFC 3339).
    pub at: String,
    /// Messages of the history the agent sent with it.
    pub messages: usize,
}
