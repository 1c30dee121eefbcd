//! Request assembly (AceClaw's pipeline, spec 04): system-prompt sections under a budget,
//! the request focus that boosts them, transient pruning and the provider's real usage.
//!
//! The report types use AceClaw's camelCase field names: `context.inspect` returns them in
//! the document's shape, so a tool written for AceClaw's `context.inspect` reads them as is.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// One section of the system prompt, as a client sends it in `context.prepare`'s `sections`.
///
/// Sections are assembled in the order sent; under budget pressure the lowest priority is
/// cut first, and protected sections are never cut.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromptSection {
    /// Unique within the request, e.g. `memory:soul`, `rules:test-conventions`.
    pub key: String,
    /// The text.
    pub content: String,
    /// 0–100; higher is cut later (AceClaw: soul 100, policy 90, rules 88, git 40).
    pub priority: i64,
    /// Never cut: when protected sections alone exceed the budget, the request says so
    /// (`over_limit`) instead.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub protected: bool,
    /// Where it comes from; chooses the focus boost: `memory`, `auto-memory`,
    /// `markdown-memory`, `journal`, `rules`, `candidates`, `git`, or any other name (a
    /// section of another type is boosted when it mentions an active file or symbol).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source_type: Option<String>,
    /// `always-on` (default) or `task-local`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    /// Why it is in the prompt, shown by inspect.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Globs of the files a `rules` section applies to (`src/**/*.rs`): an active file that
    /// matches one boosts it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub paths: Vec<String>,
}

/// What the newest user message is about (AceClaw's `RequestFocus`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RequestFocus {
    /// The message, whitespace-normalised, at most 160 characters.
    pub query_summary: String,
    /// File paths it names, at most 6.
    pub active_file_paths: Vec<String>,
    /// Code symbols it names (backtick spans, CamelCase, dotted names), at most 8.
    pub active_symbols: Vec<String>,
    /// What it asks for: `continue current execution`, `planning context`,
    /// `code change requested`, `verification requested`.
    pub plan_signals: Vec<String>,
}

/// The character budget of the system prompt (AceClaw's `SystemPromptBudget`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptBudget {
    /// Largest section, in characters.
    pub max_per_tier_chars: usize,
    /// Largest assembled prompt, in characters (separators included).
    pub max_total_chars: usize,
    /// `maxTotalChars / 4`, the budget in tokens by AceClaw's estimate.
    pub budget_tokens_estimate: u64,
}

/// One section of the assembled prompt, as AceClaw's `context.inspect` lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SectionReport {
    /// The section's key.
    pub key: String,
    /// Its `source_type` (`custom` when none was given).
    pub source_type: String,
    /// Its `scope` (`always-on` when none was given).
    pub scope_type: String,
    /// Its `reason`, or a sentence saying who sent it.
    pub inclusion_reason: String,
    /// Priority after the focus boost, the one truncation used.
    pub priority: i64,
    /// Priority as sent.
    pub base_priority: i64,
    /// Never cut.
    pub protected: bool,
    /// Characters as sent.
    pub original_chars: usize,
    /// Characters in the assembled prompt (0 when dropped).
    pub final_chars: usize,
    /// `finalChars / 4`, rounded up.
    pub estimated_tokens: u64,
    /// In the assembled prompt.
    pub included: bool,
    /// Cut (or dropped) to fit the budget.
    pub truncated: bool,
    /// Why its priority is what it is: `priority=…`, `files=…`, `symbols=…`, `plan=…`, `boost=…`.
    pub evidence: Vec<String>,
}

/// How the system prompt of a request was assembled: AceClaw's `context.inspect` shape.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PromptAssembly {
    /// The session.
    pub session_id: String,
    /// Characters of the assembled system prompt.
    pub total_chars: usize,
    /// Tokens of the assembled system prompt, counted with the configured tokenizer.
    pub estimated_tokens: u64,
    /// The effective window (`max_input_length - max_output_tokens`).
    pub context_window_tokens: u64,
    /// `estimatedTokens` as a percentage of `contextWindowTokens`.
    pub system_prompt_share_pct: f64,
    /// What the newest user message is about.
    pub request_focus: RequestFocus,
    /// The budget the sections were cut to.
    pub budget: PromptBudget,
    /// Sections cut or dropped, in prompt order.
    pub truncated_section_keys: Vec<String>,
    /// Every section, in prompt order (the `task-focus` section satchel adds included).
    pub sections: Vec<SectionReport>,
    /// Set when the protected sections alone exceed the budget: they are sent whole anyway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub over_budget: Option<String>,
    /// Learned candidates (`candidates.*`) whose sections this prompt includes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub injected_candidate_ids: Vec<String>,
}

/// The provider's real usage of a request, as the client read it from the API response.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProviderUsage {
    /// Input tokens the provider billed for the request (OpenAI `prompt_tokens`, Anthropic
    /// `input_tokens` plus cache reads and writes).
    pub input_tokens: u64,
}

/// How satchel's counts are corrected by the provider's real usage.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Calibration {
    /// Every count is multiplied by this (1 until a usage is reported; kept in [0.5, 2]).
    pub factor: f64,
    /// Usages reported so far.
    pub samples: u64,
    /// The last one: the provider's input tokens and satchel's uncorrected count of the same request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<CalibrationSample>,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration {
            factor: 1.0,
            samples: 0,
            last: None,
        }
    }
}

/// One reported usage beside satchel's own count.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct CalibrationSample {
    /// The provider's input tokens.
    pub provider_tokens: u64,
    /// Satchel's uncorrected count of the same request.
    pub counted_tokens: u64,
}

/// What transient pruning did to one request (`aceclaw` mode): the session keeps everything.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PruneReport {
    /// Tool results sent as stubs.
    pub stubbed_results: usize,
    /// Reasoning blocks and fields left out.
    pub removed_reasoning: usize,
    /// Request tokens before pruning.
    pub tokens_before: u64,
    /// Request tokens after.
    pub tokens_after: u64,
}

/// `context.usage`: the provider's real usage of the last request of a session. Usually sent
/// as a notification right after the model call; as a request it answers the calibration.
pub enum ContextUsage {}

impl crate::Method for ContextUsage {
    const NAME: &'static str = "context.usage";
    const SUMMARY: &'static str =
        "Report the provider's input tokens for the session's last request; satchel corrects its counts by them.";
    type Params = UsageParams;
    type Result = Calibration;
}

/// Params of `context.usage`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UsageParams {
    /// The session whose last `context.prepare` the usage is of.
    pub session_id: String,
    /// Input tokens the provider billed for it.
    pub input_tokens: u64,
}
