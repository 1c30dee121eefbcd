//! The groups of [`Config`](super::Config) keys a request may override, each the keys one
//! part of satchel reads (their order in `Config` is the keys' order on the wire).
//!
//! A group read alone skips the keys that are not its own: [`Config::from_keys`](super::Config::from_keys)
//! reads every group from the one object of keys, after refusing a key no group has.

use std::hash::{Hash, Hasher};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{
    ContextMode, DEFAULT_DEMONSTRATION_PREFIXES, OffloadNoticePath, SummarizerKind, SummaryLanguage, Tokenizer,
};

/// A real-number key of a group that is hashed: compared and hashed by its bits, so the group
/// can derive `Eq` and `Hash` (an `f64` has neither). On the wire it is the number itself.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
#[schemars(inline)]
pub struct Float(pub f64);

impl Float {
    /// The number.
    pub fn get(self) -> f64 {
        self.0
    }
}

impl PartialEq for Float {
    fn eq(&self, other: &Self) -> bool {
        self.0.to_bits() == other.0.to_bits()
    }
}

impl Eq for Float {}

impl Hash for Float {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.0.to_bits().hash(state);
    }
}
/// The context window and how a request over its threshold is made smaller.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct WindowConfig {
    /// Model context window size in tokens.
    pub max_input_length: u64,
    /// Tokens kept free for the model's answer: the effective window, which every limit and
    /// ratio applies to, is `max_input_length - max_output_tokens`. 0 (the default) when
    /// `max_input_length` is already the input budget, as in QwenPaw.
    pub max_output_tokens: u64,
    /// How a request over its threshold is made smaller: `qwenpaw` compacts at once,
    /// `aceclaw` prunes for the request first and compacts only when that is not enough.
    pub context_mode: ContextMode,
}

impl Default for WindowConfig {
    fn default() -> Self {
        WindowConfig {
            max_input_length: 131_072,
            max_output_tokens: 0,
            context_mode: ContextMode::Qwenpaw,
        }
    }
}

/// `aceclaw` mode's pruning: when it runs, how far, and what it never touches.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct PruneConfig {
    /// `aceclaw` mode: the request is pruned, and compacted if pruning is not enough, over
    /// this share of the effective window (AceClaw's trigger, 0.85).
    pub prune_trigger_ratio: f64,
    /// `aceclaw` mode: pruning stubs old tool results, oldest first, until the request is
    /// under this share of the effective window (AceClaw's prune target, 0.60).
    pub prune_target_ratio: f64,
    /// `aceclaw` mode: the newest user turns (each with the replies and tool results after
    /// it) that pruning never touches.
    pub prune_protected_turns: usize,
    /// `aceclaw` mode: characters of a pruned tool result kept before its marker.
    pub prune_stub_chars: usize,
}

impl Default for PruneConfig {
    fn default() -> Self {
        PruneConfig {
            prune_trigger_ratio: 0.85,
            prune_target_ratio: 0.60,
            prune_protected_turns: 5,
            prune_stub_chars: 200,
        }
    }
}

/// The system prompt's size limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct PromptConfig {
    /// Largest system-prompt section, in characters (AceClaw's `maxPerTierChars`); a smaller
    /// window lowers it (see `SystemPromptBudget::for_context_window`).
    pub prompt_max_section_chars: usize,
    /// Largest assembled system prompt, in characters (AceClaw's `maxTotalChars`); a smaller
    /// window lowers it.
    pub prompt_max_total_chars: usize,
}

impl Default for PromptConfig {
    fn default() -> Self {
        PromptConfig {
            prompt_max_section_chars: 20_000,
            prompt_max_total_chars: 150_000,
        }
    }
}

/// When compaction runs and how much of the history it keeps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CompactionConfig {
    /// Whether `context.prepare` compacts automatically when the threshold is crossed.
    pub compact_enabled: bool,
    /// Compaction triggers at `max_input_length × compact_threshold_ratio` tokens.
    pub compact_threshold_ratio: f64,
    /// Compaction keeps `max_input_length × reserve_threshold_ratio` tokens of recent messages.
    pub reserve_threshold_ratio: f64,
    /// Newest messages a compaction always keeps, whatever their tokens (CoPaw's
    /// `COPAW_MEMORY_COMPACT_KEEP_RECENT`): the kept tail is the reserve's tokens or this many
    /// messages, whichever is more, and still never separates a tool call from its results.
    /// 0 (the default): no minimum, the reserve alone decides.
    pub compact_keep_recent_messages: usize,
}

impl Default for CompactionConfig {
    fn default() -> Self {
        CompactionConfig {
            compact_enabled: true,
            compact_threshold_ratio: 0.8,
            reserve_threshold_ratio: 0.1,
            compact_keep_recent_messages: 0,
        }
    }
}

/// How a compaction's summary is written (the summariser, its model's request-level
/// settings) and whether it is also kept in the memory files. Where the model is reached
/// is the daemon's choice: [`LlmEndpointConfig`](super::LlmEndpointConfig).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SummaryConfig {
    /// Share of the window (`max_input_length` less `max_output_tokens`) the summary may fill:
    /// its token budget grows with the window, never below 2500 tokens nor above a quarter.
    pub summary_window_share: f64,
    /// A cap on the summary's token budget (at least 200); 0, the default: no cap, the window
    /// share decides.
    pub summary_max_tokens: u64,
    /// Openings of user messages that demonstrate how to work rather than ask for work
    /// (compared case-insensitively): the summary labels them and never makes them the goal.
    pub demonstration_prefixes: Vec<String>,
    /// Which summariser writes the summary; model-backed ones fall back to `extractive` on failure.
    pub summarizer: SummarizerKind,
    /// Language of the model prompts.
    pub summary_language: SummaryLanguage,
    /// Model name for compaction (a cheap one is the point).
    pub llm_model: String,
    /// `summarizer: "upstream"`: the model a compaction inside a proxied Anthropic Messages
    /// request asks, at the request's own upstream.
    pub summarizer_upstream_model_anthropic: String,
    /// `summarizer: "upstream"`: the model a compaction inside a proxied OpenAI Chat or
    /// Responses request asks, at the request's own upstream.
    pub summarizer_upstream_model_openai: String,
    /// Seconds before a model call is abandoned.
    pub llm_timeout_secs: f64,
    /// Maximum tokens the model may write.
    pub llm_max_output_tokens: u64,
    /// Sampling temperature.
    pub llm_temperature: f64,
    /// Token budget of one model input; larger spans are summarised in stages.
    pub llm_input_budget_tokens: u64,
    /// After a compaction, append the summary, preferences and lessons to `memory/YYYY-MM-DD.md`.
    pub memory_enabled: bool,
}

impl Default for SummaryConfig {
    fn default() -> Self {
        SummaryConfig {
            summary_window_share: 0.08,
            summary_max_tokens: 0,
            demonstration_prefixes: DEFAULT_DEMONSTRATION_PREFIXES.iter().map(|p| (*p).to_owned()).collect(),
            summarizer: SummarizerKind::Extractive,
            summary_language: SummaryLanguage::En,
            llm_model: "gpt-4o-mini".into(),
            summarizer_upstream_model_anthropic: "claude-haiku-4-5".into(),
            summarizer_upstream_model_openai: "gpt-4o-mini".into(),
            llm_timeout_secs: 60.0,
            llm_max_output_tokens: 2_000,
            llm_temperature: 0.2,
            llm_input_budget_tokens: 32_000,
            memory_enabled: true,
        }
    }
}

/// How tokens are counted: everything a count depends on, so the session's count cache
/// keys on this group's derived `Hash` and a key added here is part of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct TokenConfig {
    /// Divisor of the byte-based token estimate.
    pub token_count_estimate_divisor: Float,
    /// Tokenizer used for exact counts.
    pub tokenizer: Tokenizer,
}

impl Default for TokenConfig {
    fn default() -> Self {
        TokenConfig {
            token_count_estimate_divisor: Float(4.0),
            tokenizer: Tokenizer::O200kBase,
        }
    }
}

/// Which messages are recent (the first phase): the recent window and how its start moves.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RecentConfig {
    /// How many of the newest messages count as recent (first-phase limit).
    pub pruning_recent_n: usize,
    /// The recent window's start moves in steps of this many appended messages, so tool
    /// results leave it in groups and the request's prefix stays byte-identical between steps
    /// (a provider's prompt cache keeps reusing it). The window still keeps at least
    /// `pruning_recent_n` messages and the trailing tool results; 1 moves it with every message.
    pub pruning_phase_batch: usize,
}

impl Default for RecentConfig {
    fn default() -> Self {
        RecentConfig {
            pruning_recent_n: 2,
            pruning_phase_batch: 8,
        }
    }
}

/// The keys rendering a message reads, and nothing else: the session caches each message's
/// rendering under this group's derived `Hash`, and rendering takes this group, not the whole
/// [`Config`](super::Config), so every key rendering reads is part of the cache key. (A
/// hand-typed key once left out `markdown_file_extensions`: a warm daemon sent a cached
/// excerpt where a restarted one sent the whole result.)
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RenderConfig {
    /// Whether long tool results are offloaded and truncated at all.
    pub pruning_enabled: bool,
    /// Byte limit of a tool result once it has left the recent window (second phase).
    pub pruning_old_msg_max_bytes: usize,
    /// Byte limit of a recent tool result (first phase).
    pub pruning_recent_msg_max_bytes: usize,
    /// A result at most this many bytes over its limit is left whole (the spec's slack).
    pub pruning_slack_bytes: usize,
    /// Share of an excerpt's byte budget spent on the end of the output, so error tails stay visible.
    pub pruning_tail_ratio: Float,
    /// First-phase limit for Markdown results (skills, rules, `.md` reads).
    pub markdown_recent_msg_max_bytes: usize,
    /// Second-phase limit for Markdown results.
    pub markdown_old_msg_max_bytes: usize,
    /// Tools whose results are always Markdown (skill and rule loaders).
    pub markdown_tool_names: Vec<String>,
    /// File extensions that make a result Markdown when a tool argument names such a file.
    pub markdown_file_extensions: Vec<String>,
    /// `read_file`-like tools: never truncated while recent, and what the agent saw is saved
    /// because the file on disk may change afterwards.
    pub read_file_tool_names: Vec<String>,
    /// The path a truncation notice gives for the agent's `read_file` tool: `absolute` (the
    /// default: the workspace root joined with the file's path) or `relative` (workspace-relative,
    /// as before). The `context.read` form in the notice is always workspace-relative.
    pub offload_notice_path: OffloadNoticePath,
}

impl Default for RenderConfig {
    fn default() -> Self {
        RenderConfig {
            pruning_enabled: true,
            pruning_old_msg_max_bytes: 3_000,
            pruning_recent_msg_max_bytes: 50_000,
            pruning_slack_bytes: 100,
            pruning_tail_ratio: Float(0.2),
            markdown_recent_msg_max_bytes: 100_000,
            markdown_old_msg_max_bytes: 50_000,
            markdown_tool_names: vec!["read_skill".into(), "load_skill".into(), "skill".into()],
            markdown_file_extensions: vec![".md".into(), ".mdx".into(), ".markdown".into()],
            read_file_tool_names: vec!["read_file".into(), "Read".into(), "view_file".into(), "read".into()],
            offload_notice_path: OffloadNoticePath::Absolute,
        }
    }
}

/// How long offloaded files are kept.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct RetentionConfig {
    /// Offloaded files older than this many days are swept, unless a session still refers to them.
    pub offload_retention_days: f64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        RetentionConfig {
            offload_retention_days: 5.0,
        }
    }
}

/// The prompt sections satchel adds itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SectionsConfig {
    /// Add a prompt section the model can read (`satchel:budget`, last, priority 20): how
    /// full the window is, when the next compaction comes, and what the last one dropped and
    /// how `context.expand` gets it back. Its numbers are rounded (5 % of the window) so the
    /// system prompt changes only every few calls.
    pub budget_section_enabled: bool,
    /// When the client sends `sections`, add the `task-focus` section (last in the system
    /// prompt) that names what the newest user message is about. It changes with every user message, and the system prompt is the
    /// start of the request, so a provider's prompt cache is rebuilt from the first token at
    /// each one: turn it off to keep the system prompt byte-stable across user turns. The
    /// focus still boosts the sections that match it.
    pub task_focus_section_enabled: bool,
}

impl Default for SectionsConfig {
    fn default() -> Self {
        SectionsConfig {
            budget_section_enabled: false,
            task_focus_section_enabled: true,
        }
    }
}

/// Learning candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct CandidatesConfig {
    /// Learning candidates (`candidates.*`): promoted ones are assembled into the system
    /// prompt as sections (source type `candidates`, priority 54, boosted when the newest user
    /// message names one of their symbols).
    pub candidates_enabled: bool,
    /// A compaction's new lessons (a failure and what fixed it) and the constraints the user
    /// stated are observed as candidates (a constraint repeated, in other words too, merges
    /// and can be promoted).
    pub candidates_from_compaction: bool,
}

impl Default for CandidatesConfig {
    fn default() -> Self {
        CandidatesConfig {
            candidates_enabled: true,
            candidates_from_compaction: true,
        }
    }
}
