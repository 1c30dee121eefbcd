//! Methods: each declared once as a type implementing [`Method`], with its params and result,
//! and listed once in the method table ([`MethodKind`]) with its [`LockScope`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::assembly::ContextUsage;
use crate::assembly::{PromptAssembly, PromptSection, ProviderUsage, PruneReport};
use crate::candidates::{CandidatesEvaluate, CandidatesFeedback, CandidatesList, CandidatesObserve, CandidatesRemove};
use crate::expand::ContextExpand;
pub use crate::inspect::{
    AgentCompaction, ContextInspect, ContextMonitor, InspectParams, InspectResult, MessageRoleTokens, OffloadedResult,
    SectionDetail, SessionOrigin,
};
pub use crate::memory::{MemoryAppend, MemoryGet, MemoryMerge, MemoryRecall, MemorySearch, MemoryStatus, MemoryWrite};
use crate::pins::{ContextPin, ContextPurge, ContextUnpin};
pub use crate::watch::{
    ActionKind, CompactionEvent, ContextEvent, ContextSessions, ContextWatch, EventKind, SessionSummary,
    SessionsParams, SessionsResult, WatchParams, WatchResult,
};
use crate::{CompactSummary, Config, DroppedIdentifier, Method, openrpc::schema_of, summary::ArchiveRange};

/// What a method's calls wait for before they run. Declared per method in the method table
/// ([`MethodKind`]) and published as `x-lock-scope` in `openrpc.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockScope {
    /// The call names a session (`session_id`) and waits its turn on it: calls on one session
    /// run one at a time, in the order they arrived, each seeing what the calls before it did.
    Session,
    /// The call reads the workspace (stored files, the list of sessions) and does not queue:
    /// it runs at once, alongside calls on any session, and never waits for one.
    Workspace,
    /// The call changes only what the daemon keeps for the calling connection (its
    /// capabilities, its subscriptions) and does not queue on any session; calls the
    /// connection sends after it see its effect.
    Connection,
    /// The call changes long-term memory (the memory files, the learning candidates) and
    /// waits its turn: such writes run one at a time, in the order they arrived, and a read
    /// sent after one's reply finds what it wrote.
    Memory,
}

impl LockScope {
    /// Every scope.
    pub const ALL: [LockScope; 4] = [
        LockScope::Session,
        LockScope::Workspace,
        LockScope::Connection,
        LockScope::Memory,
    ];

    /// The wire name, the value of `x-lock-scope` in `openrpc.json`.
    pub const fn name(self) -> &'static str {
        match self {
            LockScope::Session => "session",
            LockScope::Workspace => "workspace",
            LockScope::Connection => "connection",
            LockScope::Memory => "memory",
        }
    }

    /// What the scope means for a client, copied into `openrpc.json`.
    pub const fn meaning(self) -> &'static str {
        match self {
            LockScope::Session => {
                "Calls on one session (`session_id`) run one at a time, in the order they arrived; each sees what the calls before it did."
            }
            LockScope::Workspace => {
                "Reads the workspace without queueing: runs at once, alongside calls on any session, and never waits for one."
            }
            LockScope::Connection => {
                "Changes only the calling connection's state and queues on no session; calls the connection sends after it see its effect."
            }
            LockScope::Memory => {
                "Changes long-term memory (memory files, learning candidates): such writes run one at a time, in the order they arrived; a read sent after the reply finds what was written."
            }
        }
    }
}

/// One row of the method table: what [`MethodKind::spec`] says about a method.
#[derive(Debug, Clone, Copy)]
pub struct MethodSpec {
    /// The wire name ([`Method::NAME`]).
    pub name: &'static str,
    /// One-line description ([`Method::SUMMARY`]).
    pub summary: &'static str,
    /// What its calls wait for.
    pub lock_scope: LockScope,
    /// The JSON Schema (draft 2020-12) of its params ([`Method::Params`]).
    pub params_schema: fn() -> Value,
    /// The JSON Schema (draft 2020-12) of its result ([`Method::Result`]).
    pub result_schema: fn() -> Value,
}

impl MethodSpec {
    /// The row of method `M`, whose calls wait for `lock_scope`.
    const fn of<M: Method>(lock_scope: LockScope) -> MethodSpec {
        MethodSpec {
            name: M::NAME,
            summary: M::SUMMARY,
            lock_scope,
            params_schema: schema_of::<M::Params>,
            result_schema: schema_of::<M::Result>,
        }
    }
}

/// Declares [`MethodKind`] from the table below: its variants, [`MethodKind::ALL`] and
/// [`MethodKind::spec`] come from the same rows, so none can miss a method.
macro_rules! method_table {
    ($($method:ident: $scope:ident,)*) => {
        /// Every method of the protocol, one variant per [`Method`] type: the one list the
        /// daemon registers (with an exhaustive `match`), `initialize` reports and
        /// `openrpc.json` describes.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum MethodKind {
            $(
                #[doc = concat!("[`", stringify!($method), "`], lock scope [`LockScope::", stringify!($scope), "`].")]
                $method,
            )*
        }

        impl MethodKind {
            /// Every method, in table order (the order of `initialize`'s `methods` and of
            /// `openrpc.json`).
            pub const ALL: [MethodKind; [$(stringify!($method)),*].len()] = [$(MethodKind::$method),*];

            /// Its row of the table: wire name, summary, lock scope and schemas.
            pub const fn spec(self) -> MethodSpec {
                match self {
                    $(MethodKind::$method => MethodSpec::of::<$method>(LockScope::$scope),)*
                }
            }
        }
    };
}

// The method table: each method's declaration type and its lock scope.
method_table! {
    Initialize: Connection,
    ContextPrepare: Session,
    ContextRead: Workspace,
    ContextCompact: Session,
    ContextInspect: Session,
    ContextSessions: Workspace,
    ContextWatch: Connection,
    ContextUsage: Session,
    ContextExpand: Session,
    ContextPin: Session,
    ContextUnpin: Session,
    ContextPurge: Session,
    CandidatesObserve: Memory,
    CandidatesFeedback: Memory,
    CandidatesList: Workspace,
    CandidatesEvaluate: Memory,
    CandidatesRemove: Memory,
    MemoryWrite: Memory,
    MemoryAppend: Memory,
    MemoryGet: Workspace,
    MemorySearch: Workspace,
    MemoryMerge: Memory,
    MemoryStatus: Workspace,
}

impl MethodKind {
    /// The wire name, e.g. `context.prepare`.
    pub const fn name(self) -> &'static str {
        self.spec().name
    }

    /// What its calls wait for.
    pub const fn lock_scope(self) -> LockScope {
        self.spec().lock_scope
    }

    /// The method of a wire name.
    pub fn from_name(name: &str) -> Option<MethodKind> {
        MethodKind::ALL.into_iter().find(|kind| kind.name() == name)
    }
}

/// `initialize`: the first call of an editor plugin; tells it who answers and how it is configured.
pub enum Initialize {}

impl Method for Initialize {
    const NAME: &'static str = "initialize";
    const SUMMARY: &'static str = "Server name, version, protocol version and effective configuration.";
    type Params = InitializeParams;
    type Result = InitializeResult;
}

/// Params of `initialize`. Everything is optional so LSP-style clients can send their usual object.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct InitializeParams {
    /// Free-form client name and version, logged for diagnostics.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client_info: Option<Value>,
    /// What the client can do for satchel.
    #[serde(default)]
    pub capabilities: ClientCapabilities,
}

/// Capabilities a client declares in `initialize`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct ClientCapabilities {
    /// The client answers `summarizer.complete {messages, max_tokens}` with `{text}`, running the
    /// model it already has a connection to (the `client` summariser).
    #[serde(default)]
    pub summarizer_complete: bool,
    /// LSP's window capabilities; satchel reads `workDoneProgress` and accepts the rest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowCapabilities>,
}

impl ClientCapabilities {
    /// Whether the client takes LSP work-done progress (`window.workDoneProgress`): then a
    /// compaction that asks a model creates a progress token
    /// (`window/workDoneProgress/create`) and reports `$/progress` `begin`, `report`, `end`.
    pub fn work_done_progress(&self) -> bool {
        self.window.as_ref().is_some_and(|w| w.work_done_progress)
    }
}

/// LSP's `ClientCapabilities.window`. Its other members (`showMessage`, `showDocument`, …)
/// are accepted and ignored.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct WindowCapabilities {
    /// The client handles `window/workDoneProgress/create` and `$/progress` notifications.
    #[serde(default, rename = "workDoneProgress")]
    pub work_done_progress: bool,
}

/// Result of `initialize`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct InitializeResult {
    /// Always `satchel`.
    pub server_name: String,
    /// The daemon's version (Cargo package version).
    pub server_version: String,
    /// [`crate::PROTOCOL_VERSION`].
    pub protocol_version: String,
    /// Absolute path of the workspace directory holding all state.
    pub workspace: String,
    /// The effective configuration after file and environment overrides.
    pub config: Config,
    /// Methods this daemon serves.
    pub methods: Vec<String>,
}

/// `context.prepare`: called before every model call; returns the conversation request-ready.
pub enum ContextPrepare {}

impl Method for ContextPrepare {
    const NAME: &'static str = "context.prepare";
    const SUMMARY: &'static str =
        "Ingest new messages into a session and return the request-ready conversation in the same format.";
    type Params = PrepareParams;
    type Result = PrepareResult;
}

/// The message format of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum MessageFormat {
    /// OpenAI chat completions: `tool_calls` on assistant messages, results as role `tool`.
    Openai,
    /// Anthropic messages: `tool_use` blocks, results as `tool_result` blocks in user messages.
    Anthropic,
    /// OpenAI Responses input items: `message` items, `function_call` / `custom_tool_call`
    /// items answered by `function_call_output` / `custom_tool_call_output` items with the same
    /// `call_id`, and `reasoning` items.
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
}

/// The format a client declares, or `auto` to let satchel detect it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum FormatHint {
    /// Detect from the messages (and keep what the session already uses).
    #[default]
    Auto,
    /// OpenAI chat format.
    Openai,
    /// Anthropic messages format.
    Anthropic,
    /// OpenAI Responses input items.
    #[serde(rename = "openai-responses")]
    OpenaiResponses,
}

/// `context.compact`: compact a session now (the spec's `/compact`).
pub enum ContextCompact {}

impl Method for ContextCompact {
    const NAME: &'static str = "context.compact";
    const SUMMARY: &'static str =
        "Compact everything but the reserve of recent messages now, optionally steered by an instruction.";
    type Params = CompactParams;
    type Result = CompactResult;
}

/// LSP's progress token: a string or an integer, sent back exactly as the client gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ProgressToken {
    /// An integer token.
    Integer(i64),
    /// A string token.
    String(String),
}

/// Params of `context.compact`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CompactParams {
    /// The session.
    pub session_id: String,
    /// Steers the summary, e.g. "keep requirements and decisions only".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instruction: Option<String>,
    /// LSP's `workDoneToken`: when given, a compaction's work-done progress is reported under
    /// this token (no `window/workDoneProgress/create`), even without the
    /// `window.workDoneProgress` capability.
    #[serde(default, rename = "workDoneToken", skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
    /// Per-request overrides of any [`Config`] key but the daemon-only ones
    /// ([`DaemonConfig`](crate::DaemonConfig): model endpoint, key, headers; archive path;
    /// live-session limits; the memory index), which are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Map<String, Value>>,
}

/// Result of `context.compact`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct CompactResult {
    /// Echo of the session id.
    pub session_id: String,
    /// Messages compacted (0 when there was nothing to compact).
    pub compacted: usize,
    /// The compaction, when one happened.
    pub compaction: Option<CompactionReport>,
    /// The summary now in force.
    pub summary: Option<CompactSummary>,
    /// The summary as the model reads it.
    pub summary_text: Option<String>,
}

/// What the repair pass changed in the returned list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RepairKind {
    /// A tool call had no result: a result saying so was added.
    SyntheticResult,
    /// A tool result answered no call in the list: it was dropped.
    DroppedOrphanResult,
    /// Two consecutive messages of the same role were merged.
    MergedSameRole,
    /// Tool results were moved before other content of their message.
    MovedResultsFirst,
    /// The list started with an assistant message: a user message was put first.
    InsertedLeadingUser,
    /// Anthropic: a text block with no text or only whitespace (which the API rejects) was
    /// dropped from the message at `index`, one action per block. A message left with no
    /// content is dropped too, reported as `merged_same_role`.
    DroppedEmptyText,
}

/// Params of `context.prepare`. Exactly one of `messages` and `append` is given.
// `M` is how a message is held: a parsed `Value` for clients, while the daemon reads each
// message as its raw JSON text (`Box<RawValue>`) so that a resent history is recognised by
// hashing its text, without building a tree for messages it already has.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(rename = "PrepareParams", bound = "")]
pub struct PrepareParams<M = Value> {
    /// Session to use; created on first use with `messages`. 1–128 characters of `[A-Za-z0-9._-]`.
    pub session_id: String,
    /// The full conversation. Satchel reconciles it with what it holds: a known prefix is not
    /// processed again, so sending the same list twice changes nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Value>>")]
    pub messages: Option<Vec<M>>,
    /// Only the messages that are new since the last call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<Value>>")]
    pub append: Option<Vec<M>>,
    /// With `append`: how many messages the client believes the session holds (its
    /// `reconciliation.session_messages` of the last reply). When the session holds another
    /// count the call is refused (-32009) and nothing is appended, so a retry after a lost
    /// reply never appends the same messages twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expect_messages: Option<usize>,
    /// Declared format; `auto` (default) detects it (`openai-responses` from an item `type` or
    /// an `input_text` / `output_text` part; plain text turns alone tell no format apart).
    #[serde(default)]
    pub format: FormatHint,
    /// System prompt sent beside the messages: a string, or Anthropic's list of text blocks.
    /// It is the first section of the assembled prompt (key `system`, or `system:N` per
    /// block; priority 95, not protected: send a protected section to keep it whole).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<Value>,
    /// Sections of the system prompt ([`PromptSection`]), assembled after `system` in this
    /// order under the prompt budget; the result's `system` is the assembled prompt. (Held
    /// like messages: the daemon keeps each section's JSON text and parses it only when the
    /// sections change.)
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Vec<PromptSection>>")]
    pub sections: Option<Vec<M>>,
    /// Put the top `memory.search` hits for the newest user message into the prompt as one
    /// more section (key `memory:recall`, source type `memory`, the hits' files and lines as
    /// its reason). Needs the daemon's memory index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<MemoryRecall>,
    /// The provider's real usage of the previous request of this session: corrects counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ProviderUsage>,
    /// Tool definitions sent with the request; counted in the tools zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
    /// LSP's `workDoneToken`: when given, a compaction's work-done progress is reported under
    /// this token (no `window/workDoneProgress/create`), even without the
    /// `window.workDoneProgress` capability.
    #[serde(default, rename = "workDoneToken", skip_serializing_if = "Option::is_none")]
    pub work_done_token: Option<ProgressToken>,
    /// Per-request overrides of any [`Config`] key but the daemon-only ones
    /// ([`DaemonConfig`](crate::DaemonConfig): model endpoint, key, headers; archive path;
    /// live-session limits; the memory index), which are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Map<String, Value>>,
}

/// Result of `context.prepare`.
// `L` is how the message list is held: parsed for clients, while the daemon writes the list
// from the JSON text it keeps for each rendered message (`Box<RawValue>`), without encoding
// unchanged messages again on every call.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
//
// `S` and `P` hold `system` and `prompt` the same way: the daemon keeps the JSON text of an
// assembled prompt (often 100 KB) and of its report, and writes them into every reply
// without encoding them again while the sections stay the same.
#[schemars(rename = "PrepareResult", bound = "")]
pub struct PrepareResult<L = Vec<Value>, S = Value, P = PromptAssembly> {
    /// Echo of the session id.
    pub session_id: String,
    /// The format of `messages` (as received).
    pub format: MessageFormat,
    /// The request-ready conversation, every field satchel does not manage preserved.
    #[schemars(with = "Vec<Value>")]
    pub messages: L,
    /// Token usage per zone.
    pub tokens: TokenUsage,
    /// Tokens at the start of this request identical to the previous request of the session
    /// (the part a provider's prompt cache can reuse): the tool definitions, then the system
    /// prompt, then the messages, up to the first that differs. 0 on the session's first
    /// request in this daemon; small right after a compaction (the summary changed).
    pub cache_stable_prefix_tokens: u64,
    /// What this call did.
    pub actions: Vec<Action>,
    /// How the received messages related to the session.
    pub reconciliation: Reconciliation,
    /// The summary of everything compacted so far (also the first message of `messages`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compact_summary: Option<CompactSummary>,
    /// Set when the request still exceeds the window, or its protected sections the prompt
    /// budget, saying precisely why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_limit: Option<String>,
    /// The system prompt to send, assembled from `system` and `sections` under the budget,
    /// in the shape `system` was sent in (a string when only sections were sent). Absent
    /// when the request had neither.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    pub system: Option<S>,
    /// How `system` was assembled (absent when the request had neither `system` nor `sections`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<PromptAssembly>")]
    pub prompt: Option<P>,
}

/// Tokens per zone of the request, counted with the configured tokenizer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TokenUsage {
    /// The system prompt: `system` param plus system-role messages.
    pub system: u64,
    /// Tool definitions.
    pub tools: u64,
    /// The compact-summary message.
    pub summary: u64,
    /// A compacted span brought back by `context.expand` for this one request.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub expanded: u64,
    /// The pinned block after the summary (`context.pin`): pinned texts, and pinned messages
    /// a compaction took.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pinned: u64,
    /// Older messages: what the next compaction would summarise.
    pub compactable: u64,
    /// The newest messages, up to `max_input_length × reserve_threshold_ratio` tokens.
    pub reserved: u64,
    /// All messages other than system and summary (`compactable + reserved`).
    pub messages: u64,
    /// Sum of the zones.
    pub total: u64,
    /// `max_input_length`.
    pub limit: u64,
    /// `max_input_length × compact_threshold_ratio`.
    pub threshold: u64,
    /// Tokenizer that counted.
    pub tokenizer: crate::config::Tokenizer,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// How full the window is: `total / limit` below 0.5 is low, below the compaction threshold
/// ratio medium, below 1 high, else critical.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Pressure {
    /// Under half the window.
    Low,
    /// Under the compaction threshold.
    Medium,
    /// Over the threshold, under the limit.
    High,
    /// At or over the limit.
    Critical,
}

impl TokenUsage {
    /// The pressure of this request, with the threshold of the request that produced it (a
    /// request may override the configured ratio).
    pub fn pressure(&self) -> Pressure {
        Pressure::of(self.total, self.limit, self.threshold as f64 / self.limit.max(1) as f64)
    }
}

impl Pressure {
    /// The same level in the words of AceClaw's `ContextMonitor` (`monitor.pressure_level`):
    /// one scale, two vocabularies, so a screen never shows two levels that disagree.
    pub fn monitor_level(self) -> &'static str {
        match self {
            Pressure::Low => "normal",
            Pressure::Medium => "watch",
            Pressure::High => "compact",
            Pressure::Critical => "critical",
        }
    }

    /// The pressure of `total` tokens under `limit` with compaction at `threshold_ratio`.
    pub fn of(total: u64, limit: u64, threshold_ratio: f64) -> Pressure {
        let ratio = total as f64 / limit.max(1) as f64;
        if ratio < 0.5 {
            Pressure::Low
        } else if ratio < threshold_ratio {
            Pressure::Medium
        } else if ratio < 1.0 {
            Pressure::High
        } else {
            Pressure::Critical
        }
    }
}

/// Which phase of truncation a tool result is in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Inside the recent window: first-phase (larger) limit.
    Recent,
    /// Outside the recent window: second-phase (smaller) limit.
    Old,
}

/// One thing `context.prepare` did, for the client and for inspection.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Action {
    /// A tool result's full text was saved to a file when it entered the session.
    Offloaded {
        /// Index of the message in the session's original history (the position in the list
        /// the client sent, before any compaction).
        index: usize,
        /// JSON pointer of the text inside the message.
        pointer: String,
        /// Workspace-relative file holding the full text.
        file: String,
        /// Size of the full text.
        total_bytes: usize,
        /// Lines of the full text.
        total_lines: usize,
        /// False when identical content was already stored (stored once).
        newly_written: bool,
    },
    /// Older messages were compacted into the summary and archived.
    Compacted(CompactionReport),
    /// Compaction was due but the summariser failed; the messages stay and nothing changed.
    CompactionFailed {
        /// Why.
        reason: String,
    },
    /// The outgoing list was repaired so every tool call has exactly one result.
    Repaired {
        /// Position in the returned list.
        index: usize,
        /// What was done.
        repair: RepairKind,
        /// The tool call concerned, if any.
        call_id: Option<String>,
    },
    /// A tool result is returned as an excerpt whose limit changed in this call
    /// (it entered truncated, or it left the recent window).
    Truncated {
        /// Index of the message in the session's original history.
        index: usize,
        /// JSON pointer of the text inside the message.
        pointer: String,
        /// The phase whose limit applies.
        phase: Phase,
        /// Workspace-relative file holding the full text.
        file: String,
        /// Bytes of the original kept in the message (head and tail excerpts).
        kept_bytes: usize,
        /// Size of the full text.
        total_bytes: usize,
    },
    /// The request was over its trigger and was pruned for this call only (`aceclaw` mode):
    /// the session, `context.read` and the archive still have every text.
    Pruned(PruneReport),
    /// The sections of the system prompt that are never cut (the client's own system prompt,
    /// protected sections) alone exceed the prompt's budget: they are sent whole and every
    /// other section is left out. `over_limit` says so too.
    PromptOverBudget {
        /// Their keys (`system`, `system:N`, protected section keys).
        keys: Vec<String>,
        /// Their characters, with separators.
        chars: usize,
        /// The budget (`prompt_max_total_chars`, or a quarter of a smaller window).
        max_total_chars: usize,
    },
}

impl Action {
    /// Its kind.
    pub fn kind(&self) -> ActionKind {
        match self {
            Action::Offloaded { .. } => ActionKind::Offloaded,
            Action::Compacted(_) => ActionKind::Compacted,
            Action::CompactionFailed { .. } => ActionKind::CompactionFailed,
            Action::Repaired { .. } => ActionKind::Repaired,
            Action::Truncated { .. } => ActionKind::Truncated,
            Action::Pruned(_) => ActionKind::Pruned,
            Action::PromptOverBudget { .. } => ActionKind::PromptOverBudget,
        }
    }
}

/// A compaction, as reported by `context.prepare`, `context.compact` and `context.inspect`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CompactionReport {
    /// Unique id (also on each archive line).
    pub id: String,
    /// When (RFC 3339, UTC).
    pub at: String,
    /// Triggered by `context.compact` rather than the threshold.
    pub manual: bool,
    /// Messages compacted.
    pub messages: usize,
    /// Request tokens before.
    pub tokens_before: u64,
    /// Request tokens after.
    pub tokens_after: u64,
    /// Where the raw messages are archived: the lines holding them, or the first run of them
    /// when they are in more than one (see `more_archive`).
    pub archive: Option<ArchiveRange>,
    /// The further runs of lines holding the messages, oldest first, each holding only this
    /// compaction's lines. A compaction is in more than one run only when a crash interrupted
    /// it mid-archive and other sessions archived before the restart finished it. Absent
    /// otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub more_archive: Vec<ArchiveRange>,
    /// Which summariser wrote the summary (`extractive`, `openai:<model>`, `client`, or
    /// `extractive (fallback: <reason>)`).
    pub summarizer: String,
    /// Identifiers of the compacted span (user requests, constraints, errors, files,
    /// commands) that the summary no longer names, most important first (at most 20):
    /// `context.expand` with this compaction's id brings the span back.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub dropped: Vec<DroppedIdentifier>,
}

/// How the received messages were matched against the session.
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Reconciliation {
    /// Messages in the session after this call.
    pub session_messages: usize,
    /// Received messages already held (not processed again).
    pub reused: usize,
    /// Received messages that were new and processed.
    pub appended: usize,
    /// Held messages that a `messages` list no longer contained and were replaced.
    pub replaced: usize,
}

/// `context.read`: read a slice of an offloaded or archived file inside the workspace.
pub enum ContextRead {}

impl Method for ContextRead {
    const NAME: &'static str = "context.read";
    const SUMMARY: &'static str = "Read a window of an offloaded tool result or archive file, by line or byte offset.";
    type Params = ReadParams;
    type Result = ReadResult;
}

/// Params of `context.read`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadParams {
    /// Workspace-relative path, as printed in a truncation notice (e.g. `tool_result/<uuid>.txt`).
    pub path: String,
    /// 1-based line to start at (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_line: Option<usize>,
    /// Byte offset to start at; wins over `start_line` (used to continue inside a very long line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub byte_offset: Option<usize>,
    /// At most this many bytes (default 50000); the slice ends on a whole line where one fits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<usize>,
}

/// Result of `context.read`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ReadResult {
    /// Echo of the path.
    pub path: String,
    /// The slice (valid UTF-8, never a split character).
    pub content: String,
    /// Byte offset of `content` in the file.
    pub byte_offset: usize,
    /// Line `content` starts in.
    pub start_line: usize,
    /// Line `content` ends in.
    pub end_line: usize,
    /// Where to continue by line (absent at end of file or when the slice ends mid-line).
    pub next_line: Option<usize>,
    /// Where to continue by byte offset (absent at end of file).
    pub next_byte_offset: Option<usize>,
    /// True when `content` reaches the end of the file.
    pub eof: bool,
    /// Lines in the file.
    pub total_lines: usize,
    /// Bytes in the file.
    pub total_bytes: usize,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::{LockScope, MethodKind};

    #[test]
    fn table_names_are_unique_and_found_again() {
        let names: HashSet<&str> = MethodKind::ALL.iter().map(|kind| kind.name()).collect();
        assert_eq!(
            names.len(),
            MethodKind::ALL.len(),
            "a wire name appears twice in the method table"
        );
        for kind in MethodKind::ALL {
            assert_eq!(MethodKind::from_name(kind.name()), Some(kind));
        }
        assert_eq!(MethodKind::from_name("shutdown"), None);
    }

    #[test]
    fn every_method_has_its_intended_lock_scope() {
        let intended = [
            ("initialize", LockScope::Connection),
            ("context.prepare", LockScope::Session),
            ("context.read", LockScope::Workspace),
            ("context.compact", LockScope::Session),
            ("context.inspect", LockScope::Session),
            ("context.sessions", LockScope::Workspace),
            ("context.watch", LockScope::Connection),
            ("context.usage", LockScope::Session),
            ("context.expand", LockScope::Session),
            ("context.pin", LockScope::Session),
            ("context.unpin", LockScope::Session),
            ("context.purge", LockScope::Session),
            ("candidates.observe", LockScope::Memory),
            ("candidates.feedback", LockScope::Memory),
            ("candidates.list", LockScope::Workspace),
            ("candidates.evaluate", LockScope::Memory),
            ("candidates.remove", LockScope::Memory),
            ("memory.write", LockScope::Memory),
            ("memory.append", LockScope::Memory),
            ("memory.get", LockScope::Workspace),
            ("memory.search", LockScope::Workspace),
            ("memory.merge", LockScope::Memory),
            ("memory.status", LockScope::Workspace),
        ];
        let table: Vec<(&str, LockScope)> = MethodKind::ALL.iter().map(|k| (k.name(), k.lock_scope())).collect();
        assert_eq!(table, intended);
    }

    #[test]
    fn lock_scope_names_are_unique() {
        let names: HashSet<&str> = LockScope::ALL.iter().map(|scope| scope.name()).collect();
        assert_eq!(names.len(), LockScope::ALL.len());
    }
}
