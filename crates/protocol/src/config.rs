//! The effective configuration, with the spec's key names and defaults (QwenPaw set, F9).
//!
//! It lives in the protocol crate because clients see it: `initialize` returns it (with
//! [`Config::for_clients`], so no header value leaves the daemon) and `context.prepare`
//! accepts per-request overrides of any key but the [`Config::DAEMON_ONLY_KEYS`]. The daemon
//! layers it as defaults → `<workspace>/config.json` → `SATCHEL_<KEY>` environment variables
//! → request. The file and a request may also use the spec's other names (CoPaw's
//! `memory_compact_ratio`, QwenPaw's `running.light_context_config` tree, …), and the
//! environment CoPaw's `COPAW_MEMORY_COMPACT_*` variables: [`crate::aliases`] lists and
//! resolves them.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which tokenizer counts tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Tokenizer {
    /// OpenAI's o200k_base (GPT-4o and later); exact.
    #[default]
    O200kBase,
    /// OpenAI's cl100k_base (GPT-4, GPT-3.5); exact.
    Cl100kBase,
    /// `bytes / token_count_estimate_divisor`: instant, roughly ±25 % depending on the text.
    Estimate,
}

/// Which summariser writes the compact summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SummarizerKind {
    /// Deterministic extraction: offline, instant, never fails.
    #[default]
    Extractive,
    /// An OpenAI-compatible `/chat/completions` endpoint (`llm_*` keys).
    Openai,
    /// The client runs the model: satchel sends it `summarizer.complete` requests.
    Client,
}

/// Language of the summariser's prompts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SummaryLanguage {
    /// English.
    #[default]
    En,
    /// Chinese.
    Zh,
}

/// How `context.prepare` makes a request that is over its threshold smaller.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContextMode {
    /// QwenPaw's LightContextManager: over `compact_threshold_ratio` of the window, the older
    /// part is compacted into the summary at once.
    #[default]
    Qwenpaw,
    /// AceClaw's pipeline: over `prune_trigger_ratio` of the effective window, old tool results
    /// become stubs and old reasoning goes for this request only (the session keeps them);
    /// compaction runs only when that is not enough, and its summary is marked `[COMPACTED]`.
    Aceclaw,
}

/// Which path a truncation notice gives the agent's own `read_file` tool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum OffloadNoticePath {
    /// The absolute path of the offload file (the workspace root joined with the relative
    /// path), which the agent's file tool can open from any working directory.
    #[default]
    Absolute,
    /// The workspace-relative path (`tool_result/<hash>.txt`), for agents whose working
    /// directory is the workspace.
    Relative,
}

/// Every tunable of satchel. Unknown keys are rejected so that a typo is an error, not a no-op.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// Model context window size in tokens.
    pub max_input_length: u64,
    /// Tokens kept free for the model's answer: the effective window, which every limit and
    /// ratio applies to, is `max_input_length - max_output_tokens`. 0 (the default) when
    /// `max_input_length` is already the input budget, as in QwenPaw.
    pub max_output_tokens: u64,
    /// How a request over its threshold is made smaller: `qwenpaw` compacts at once,
    /// `aceclaw` prunes for the request first and compacts only when that is not enough.
    pub context_mode: ContextMode,
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
    /// Largest system-prompt section, in characters (AceClaw's `maxPerTierChars`); a smaller
    /// window lowers it (see `SystemPromptBudget::for_context_window`).
    pub prompt_max_section_chars: usize,
    /// Largest assembled system prompt, in characters (AceClaw's `maxTotalChars`); a smaller
    /// window lowers it.
    pub prompt_max_total_chars: usize,
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
    /// Token budget of the compact summary; at most a quarter of `max_input_length` is used.
    pub summary_max_tokens: u64,
    /// Openings of user messages that demonstrate how to work rather than ask for work
    /// (compared case-insensitively): the summary labels them and never makes them the goal.
    pub demonstration_prefixes: Vec<String>,
    /// Which summariser writes the summary; model-backed ones fall back to `extractive` on failure.
    pub summarizer: SummarizerKind,
    /// Language of the model prompts.
    pub summary_language: SummaryLanguage,
    /// Base URL of the OpenAI-compatible API (the part before `/chat/completions`).
    /// Daemon-only: set in `<workspace>/config.json` or `SATCHEL_LLM_BASE_URL`, never per
    /// request (the API key is sent there).
    pub llm_base_url: String,
    /// Model name for compaction (a cheap one is the point).
    pub llm_model: String,
    /// Name of the environment variable holding the API key; the key itself never goes in a config file.
    /// Daemon-only: set in `<workspace>/config.json` or `SATCHEL_LLM_API_KEY_ENV`, never per
    /// request (it chooses which of the daemon's variables is sent).
    pub llm_api_key_env: String,
    /// Seconds before a model call is abandoned.
    pub llm_timeout_secs: f64,
    /// Maximum tokens the model may write.
    pub llm_max_output_tokens: u64,
    /// Sampling temperature.
    pub llm_temperature: f64,
    /// Extra HTTP headers for the endpoint (e.g. an organisation id). Daemon-only: set in
    /// `<workspace>/config.json` or `SATCHEL_LLM_EXTRA_HEADERS`, never per request. The values
    /// are treated as secrets: `initialize` shows them as `[redacted]`, and they are redacted
    /// from any error text the endpoint sends back.
    pub llm_extra_headers: std::collections::BTreeMap<String, String>,
    /// Token budget of one model input; larger spans are summarised in stages.
    pub llm_input_budget_tokens: u64,
    /// After a compaction, append the summary, preferences and lessons to `memory/YYYY-MM-DD.md`.
    pub memory_enabled: bool,
    /// Divisor of the byte-based token estimate.
    pub token_count_estimate_divisor: f64,
    /// Tokenizer used for exact counts.
    pub tokenizer: Tokenizer,
    /// Dialog archive directory, relative to the workspace. Daemon-only: set in
    /// `<workspace>/config.json` or `SATCHEL_DIALOG_PATH`, never per request.
    pub dialog_path: String,
    /// Whether long tool results are offloaded and truncated at all.
    pub pruning_enabled: bool,
    /// How many of the newest messages count as recent (first-phase limit).
    pub pruning_recent_n: usize,
    /// The recent window's start moves in steps of this many appended messages, so tool
    /// results leave it in groups and the request's prefix stays byte-identical between steps
    /// (a provider's prompt cache keeps reusing it). The window still keeps at least
    /// `pruning_recent_n` messages and the trailing tool results; 1 moves it with every message.
    pub pruning_phase_batch: usize,
    /// Byte limit of a tool result once it has left the recent window (second phase).
    pub pruning_old_msg_max_bytes: usize,
    /// Byte limit of a recent tool result (first phase).
    pub pruning_recent_msg_max_bytes: usize,
    /// A result at most this many bytes over its limit is left whole (the spec's slack).
    pub pruning_slack_bytes: usize,
    /// Share of an excerpt's byte budget spent on the end of the output, so error tails stay visible.
    pub pruning_tail_ratio: f64,
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
    /// Offloaded files older than this many days are swept, unless a session still refers to them.
    pub offload_retention_days: f64,
    /// The path a truncation notice gives for the agent's `read_file` tool: `absolute` (the
    /// default: the workspace root joined with the file's path) or `relative` (workspace-relative,
    /// as before). The `context.read` form in the notice is always workspace-relative.
    pub offload_notice_path: OffloadNoticePath,
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
    /// Learning candidates (`candidates.*`): promoted ones are assembled into the system
    /// prompt as sections (source type `candidates`, priority 54, boosted when the newest user
    /// message names one of their symbols).
    pub candidates_enabled: bool,
    /// A compaction's new lessons (a failure and what fixed it) and the constraints the user
    /// stated are observed as candidates (a constraint repeated, in other words too, merges
    /// and can be promoted).
    pub candidates_from_compaction: bool,
    /// Sessions kept in memory at most; past it the least recently used idle one is dropped
    /// (its log stays, and the next call on it reloads it). Daemon-only: set in
    /// `<workspace>/config.json` or `SATCHEL_MAX_LIVE_SESSIONS`, never per request.
    pub max_live_sessions: usize,
    /// A session idle this long is dropped from memory (reloaded from its log when used again).
    /// Daemon-only: set in `<workspace>/config.json` or `SATCHEL_SESSION_IDLE_SECS`, never per
    /// request.
    pub session_idle_secs: f64,
    /// Index `MEMORY.md` and `memory/**/*.md` and serve `memory.search` (the files and
    /// `memory.write`/`append`/`get` work either way). Daemon-only.
    pub memory_index_enabled: bool,
    /// BM25 full-text search over the memory files (SQLite FTS5); CoPaw's `FTS_ENABLED`.
    /// Daemon-only.
    pub fts_enabled: bool,
    /// Where the memory index lives: `auto`, `sqlite` and `local` are all satchel's one
    /// SQLite file (`<workspace>/index/memory.sqlite`); CoPaw's `MEMORY_STORE_BACKEND`.
    /// `chroma` is refused. Daemon-only.
    pub memory_store_backend: String,
    /// More files or directories of Markdown to index beside `MEMORY.md` and `memory/`
    /// (workspace-relative or absolute). Daemon-only.
    pub memory_extra_paths: Vec<String>,
    /// Watch the memory files and re-index what changes (an edit is searchable within a
    /// second). Daemon-only.
    pub memory_watch_enabled: bool,
    /// Milliseconds of quiet before a burst of file events is re-indexed. Daemon-only.
    pub memory_watch_debounce_ms: u64,
    /// The polling fallback: the memory files are also checked this often (milliseconds) for
    /// file systems whose events do not arrive (NFS, some containers); 0 turns it off.
    /// Daemon-only.
    pub memory_watch_poll_ms: u64,
    /// `memory.search`'s default number of results. Daemon-only.
    pub memory_max_results: usize,
    /// `memory.search`'s default minimum score. Daemon-only.
    pub memory_min_score: f64,
    /// Weight of the vector score in hybrid search (BM25 gets the rest). CoPaw uses 0.7; 0.5 is
    /// what recalled best on the LoCoMo slice with all-MiniLM-L6-v2 (`bench/memory/locomo.py`):
    /// a weak dense model must not outvote BM25. Daemon-only.
    pub memory_vector_weight: f64,
    /// Hybrid search asks each side for `max_results` times this many candidates (at most 200).
    /// Daemon-only.
    pub memory_candidate_multiplier: f64,
    /// Fold the recent daily logs into `MEMORY.md` once a day. Daemon-only.
    pub memory_merge_enabled: bool,
    /// When the daily merge runs, `HH:MM` local time. Daemon-only.
    pub memory_merge_time: String,
    /// How many days of daily logs a merge reads. Daemon-only.
    pub memory_merge_days: u32,
    /// Which embedding backend makes vectors: `auto` (a local model when
    /// `embedding_model_path` is set, else the endpoint when its API key is set, else none),
    /// `openai` (the endpoint, even without a key: a local server), `local`, or `none`.
    /// Daemon-only.
    pub embedding_backend: String,
    /// OpenAI-compatible embeddings endpoint (the part before `/embeddings`); CoPaw's
    /// `EMBEDDING_BASE_URL`. Daemon-only (the key is sent there).
    pub embedding_base_url: String,
    /// Name of the environment variable holding the embeddings API key (CoPaw's
    /// `EMBEDDING_API_KEY` by default). Daemon-only.
    pub embedding_api_key_env: String,
    /// Embedding model name; CoPaw's `EMBEDDING_MODEL_NAME`. Daemon-only.
    pub embedding_model_name: String,
    /// Vector dimensions; CoPaw's `EMBEDDING_DIMENSIONS`. Daemon-only.
    pub embedding_dimensions: usize,
    /// Cache embeddings of texts already seen; CoPaw's `EMBEDDING_CACHE_ENABLED`. Daemon-only.
    pub embedding_cache_enabled: bool,
    /// Texts the embedding cache holds; CoPaw's `EMBEDDING_MAX_CACHE_SIZE`. Daemon-only.
    pub embedding_max_cache_size: usize,
    /// Characters of one text sent to the endpoint (longer ones are cut); CoPaw's
    /// `EMBEDDING_MAX_INPUT_LENGTH`. Daemon-only.
    pub embedding_max_input_length: usize,
    /// Texts per embeddings request; CoPaw's `EMBEDDING_MAX_BATCH_SIZE`. Daemon-only.
    pub embedding_max_batch_size: usize,
    /// Seconds before an embeddings request is abandoned. Daemon-only.
    pub embedding_timeout_secs: f64,
    /// Directory of a local BERT-family sentence model (`config.json`, `tokenizer.json`,
    /// `model.safetensors`, e.g. all-MiniLM-L6-v2; `scripts/fetch-embedding-model` unpacks
    /// one). Needs a build with the `local-embeddings` feature. Daemon-only.
    pub embedding_model_path: String,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_input_length: 131_072,
            max_output_tokens: 0,
            context_mode: ContextMode::Qwenpaw,
            prune_trigger_ratio: 0.85,
            prune_target_ratio: 0.60,
            prune_protected_turns: 5,
            prune_stub_chars: 200,
            prompt_max_section_chars: 20_000,
            prompt_max_total_chars: 150_000,
            compact_enabled: true,
            compact_threshold_ratio: 0.8,
            reserve_threshold_ratio: 0.1,
            compact_keep_recent_messages: 0,
            summary_max_tokens: 2_500,
            demonstration_prefixes: DEFAULT_DEMONSTRATION_PREFIXES.iter().map(|p| (*p).to_owned()).collect(),
            summarizer: SummarizerKind::Extractive,
            summary_language: SummaryLanguage::En,
            llm_base_url: "https://api.openai.com/v1".into(),
            llm_model: "gpt-4o-mini".into(),
            llm_api_key_env: "OPENAI_API_KEY".into(),
            llm_timeout_secs: 60.0,
            llm_max_output_tokens: 2_000,
            llm_temperature: 0.2,
            llm_extra_headers: Default::default(),
            llm_input_budget_tokens: 32_000,
            memory_enabled: true,
            token_count_estimate_divisor: 4.0,
            tokenizer: Tokenizer::O200kBase,
            dialog_path: "dialog".into(),
            pruning_enabled: true,
            pruning_recent_n: 2,
            pruning_phase_batch: 8,
            pruning_old_msg_max_bytes: 3_000,
            pruning_recent_msg_max_bytes: 50_000,
            pruning_slack_bytes: 100,
            pruning_tail_ratio: 0.2,
            markdown_recent_msg_max_bytes: 100_000,
            markdown_old_msg_max_bytes: 50_000,
            markdown_tool_names: vec!["read_skill".into(), "load_skill".into(), "skill".into()],
            markdown_file_extensions: vec![".md".into(), ".mdx".into(), ".markdown".into()],
            read_file_tool_names: vec!["read_file".into(), "Read".into(), "view_file".into(), "read".into()],
            offload_retention_days: 5.0,
            offload_notice_path: OffloadNoticePath::Absolute,
            budget_section_enabled: false,
            task_focus_section_enabled: true,
            candidates_enabled: true,
            candidates_from_compaction: true,
            max_live_sessions: 256,
            session_idle_secs: 1800.0,
            memory_index_enabled: true,
            fts_enabled: true,
            memory_store_backend: "auto".into(),
            memory_extra_paths: Vec::new(),
            memory_watch_enabled: true,
            memory_watch_debounce_ms: 200,
            memory_watch_poll_ms: 500,
            memory_max_results: 5,
            memory_min_score: 0.1,
            memory_vector_weight: 0.5,
            memory_candidate_multiplier: 3.0,
            memory_merge_enabled: true,
            memory_merge_time: "00:00".into(),
            memory_merge_days: 7,
            embedding_backend: "auto".into(),
            embedding_base_url: "https://dashscope.aliyuncs.com/compatible-mode/v1".into(),
            embedding_api_key_env: "EMBEDDING_API_KEY".into(),
            embedding_model_name: "text-embedding-v4".into(),
            embedding_dimensions: 1024,
            embedding_cache_enabled: true,
            embedding_max_cache_size: 2000,
            embedding_max_input_length: 8192,
            embedding_max_batch_size: 10,
            embedding_timeout_secs: 30.0,
            embedding_model_path: String::new(),
        }
    }
}

/// Default [`Config::demonstration_prefixes`]: SWE-agent's demonstrations and the like.
pub const DEFAULT_DEMONSTRATION_PREFIXES: &[&str] = &[
    "here is a demonstration",
    "here's a demonstration",
    "here is an example of how",
    "here's an example of how",
    "--- demonstration ---",
    "demonstration:",
];

/// Most [`Config::compact_keep_recent_messages`]: CoPaw keeps 3; a tail this long is a
/// session that compaction could not shrink anyway, so a larger value is taken for a typo.
pub const MAX_KEEP_RECENT_MESSAGES: usize = 10_000;

/// What a secret is shown as: header values in `initialize`, keys and tokens in error texts.
pub const REDACTED: &str = "[redacted]";

impl Config {
    /// Keys only the daemon's own configuration sets (`<workspace>/config.json` or its
    /// `SATCHEL_<KEY>` environment): a per-request override of one is refused. The `llm_*`
    /// ones reach the network or the daemon's environment (where the API key is sent, which
    /// variable is sent, which headers), the others are daemon-wide.
    pub const DAEMON_ONLY_KEYS: &'static [&'static str] = &[
        "llm_base_url",
        "llm_api_key_env",
        "llm_extra_headers",
        "dialog_path",
        "max_live_sessions",
        "session_idle_secs",
        "memory_index_enabled",
        "fts_enabled",
        "memory_store_backend",
        "memory_extra_paths",
        "memory_watch_enabled",
        "memory_watch_debounce_ms",
        "memory_watch_poll_ms",
        "memory_max_results",
        "memory_min_score",
        "memory_vector_weight",
        "memory_candidate_multiplier",
        "memory_merge_enabled",
        "memory_merge_time",
        "memory_merge_days",
        "embedding_backend",
        "embedding_base_url",
        "embedding_api_key_env",
        "embedding_model_name",
        "embedding_dimensions",
        "embedding_cache_enabled",
        "embedding_max_cache_size",
        "embedding_max_input_length",
        "embedding_max_batch_size",
        "embedding_timeout_secs",
        "embedding_model_path",
    ];

    /// Whether `key` is one of the [`Config::DAEMON_ONLY_KEYS`].
    pub fn is_daemon_only(key: &str) -> bool {
        Self::DAEMON_ONLY_KEYS.contains(&key)
    }

    /// The configuration as a client may see it: every `llm_extra_headers` value (the keys
    /// stay) and any credentials in `llm_base_url` (`user:password@`, the query string)
    /// replaced by [`REDACTED`]. The API key is never in the configuration at all, only the
    /// name of its variable.
    pub fn for_clients(&self) -> Config {
        let mut shown = self.clone();
        for value in shown.llm_extra_headers.values_mut() {
            *value = REDACTED.to_owned();
        }
        shown.llm_base_url = url_without_credentials(&self.llm_base_url);
        shown.embedding_base_url = url_without_credentials(&self.embedding_base_url);
        shown
    }

    /// Checks the values serde cannot: ranges and relations between keys.
    ///
    /// Returns the offending key and why, so the error can name the field.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        self.validate_window_and_pruning()?;
        self.validate_compaction()?;
        self.validate_limits()?;
        self.validate_memory()
    }

    /// Checks the window, pruning and prompt keys (called by [`Config::validate`]).
    fn validate_window_and_pruning(&self) -> Result<(), (&'static str, String)> {
        if self.max_input_length < 1024 {
            return Err(("max_input_length", "must be at least 1024".into()));
        }
        if self.max_output_tokens > self.max_input_length / 2 {
            return Err(("max_output_tokens", "must be at most half of max_input_length".into()));
        }
        if !is_ratio(self.prune_trigger_ratio) {
            return Err(("prune_trigger_ratio", "must be in (0, 1]".into()));
        }
        if !is_ratio(self.prune_target_ratio) || self.prune_target_ratio >= self.prune_trigger_ratio {
            return Err((
                "prune_target_ratio",
                "must be in (0, 1] and below prune_trigger_ratio".into(),
            ));
        }
        if !(1..=1_000).contains(&self.pruning_phase_batch) {
            return Err(("pruning_phase_batch", "must be in [1, 1000]".into()));
        }
        if self.prune_protected_turns == 0 {
            return Err(("prune_protected_turns", "must be at least 1".into()));
        }
        if !(50..=10_000).contains(&self.prune_stub_chars) {
            return Err(("prune_stub_chars", "must be in [50, 10000]".into()));
        }
        if self.prompt_max_total_chars < 1_000 {
            return Err(("prompt_max_total_chars", "must be at least 1000".into()));
        }
        if self.prompt_max_section_chars < 1_000 || self.prompt_max_section_chars > self.prompt_max_total_chars {
            return Err((
                "prompt_max_section_chars",
                "must be at least 1000 and at most prompt_max_total_chars".into(),
            ));
        }
        Ok(())
    }

    /// Checks the compaction and summarizing-model keys (called by [`Config::validate`]).
    fn validate_compaction(&self) -> Result<(), (&'static str, String)> {
        if !is_ratio(self.compact_threshold_ratio) {
            return Err(("compact_threshold_ratio", "must be in (0, 1]".into()));
        }
        if !is_ratio(self.reserve_threshold_ratio) || self.reserve_threshold_ratio >= self.compact_threshold_ratio {
            return Err((
                "reserve_threshold_ratio",
                "must be in (0, 1] and below compact_threshold_ratio".into(),
            ));
        }
        if self.compact_keep_recent_messages > MAX_KEEP_RECENT_MESSAGES {
            return Err((
                "compact_keep_recent_messages",
                format!("must be at most {MAX_KEEP_RECENT_MESSAGES}"),
            ));
        }
        if self.llm_timeout_secs.is_nan() || self.llm_timeout_secs <= 0.0 || self.llm_timeout_secs > 3600.0 {
            return Err(("llm_timeout_secs", "must be in (0, 3600]".into()));
        }
        if self.llm_input_budget_tokens < 1_000 {
            return Err(("llm_input_budget_tokens", "must be at least 1000".into()));
        }
        if self.llm_max_output_tokens < 100 {
            return Err(("llm_max_output_tokens", "must be at least 100".into()));
        }
        if !(0.0..=2.0).contains(&self.llm_temperature) {
            return Err(("llm_temperature", "must be in [0, 2]".into()));
        }
        // The budget used is capped at a quarter of the window; it must still leave room
        // below the compaction threshold, or every compaction would trigger the next.
        if self.summary_max_tokens < 200 || self.summary_budget_tokens() >= self.compact_threshold_tokens() {
            return Err((
                "summary_max_tokens",
                "must be at least 200, and the budget used (at most a quarter of max_input_length) below the compaction threshold".into(),
            ));
        }
        if !(1.0..=10.0).contains(&self.token_count_estimate_divisor) {
            return Err(("token_count_estimate_divisor", "must be in [1, 10]".into()));
        }
        Ok(())
    }

    /// Checks the truncation, retention, session and dialog keys (called by
    /// [`Config::validate`]).
    fn validate_limits(&self) -> Result<(), (&'static str, String)> {
        if !(0.0..=0.5).contains(&self.pruning_tail_ratio) {
            return Err(("pruning_tail_ratio", "must be in [0, 0.5]".into()));
        }
        if self.pruning_old_msg_max_bytes < 100 {
            return Err(("pruning_old_msg_max_bytes", "must be at least 100 bytes".into()));
        }
        if self.markdown_old_msg_max_bytes < 100 {
            return Err(("markdown_old_msg_max_bytes", "must be at least 100 bytes".into()));
        }
        if self.pruning_recent_msg_max_bytes < self.pruning_old_msg_max_bytes {
            return Err((
                "pruning_recent_msg_max_bytes",
                "must not be below pruning_old_msg_max_bytes".into(),
            ));
        }
        if self.markdown_recent_msg_max_bytes < self.markdown_old_msg_max_bytes {
            return Err((
                "markdown_recent_msg_max_bytes",
                "must not be below markdown_old_msg_max_bytes".into(),
            ));
        }
        if self.offload_retention_days.is_nan() || self.offload_retention_days <= 0.0 {
            return Err(("offload_retention_days", "must be positive".into()));
        }
        if self.max_live_sessions == 0 {
            return Err(("max_live_sessions", "must be at least 1".into()));
        }
        if self.session_idle_secs.is_nan() || self.session_idle_secs <= 0.0 {
            return Err(("session_idle_secs", "must be positive".into()));
        }
        if self.dialog_path.is_empty() || self.dialog_path.contains("..") || self.dialog_path.starts_with('/') {
            return Err(("dialog_path", "must be a relative path inside the workspace".into()));
        }
        Ok(())
    }

    /// The window the request must fit: `max_input_length` less the room kept for the answer.
    pub fn effective_window(&self) -> u64 {
        self.max_input_length.saturating_sub(self.max_output_tokens)
    }

    /// The token count at which the request is made smaller: compaction in `qwenpaw` mode,
    /// pruning (then compaction if needed) in `aceclaw` mode.
    pub fn compact_threshold_tokens(&self) -> u64 {
        let ratio = match self.context_mode {
            ContextMode::Qwenpaw => self.compact_threshold_ratio,
            ContextMode::Aceclaw => self.prune_trigger_ratio,
        };
        (self.effective_window() as f64 * ratio) as u64
    }

    /// `aceclaw` mode: the token count pruning aims for.
    pub fn prune_target_tokens(&self) -> u64 {
        (self.effective_window() as f64 * self.prune_target_ratio) as u64
    }

    /// Token budget of a summary: `summary_max_tokens`, but never more than a quarter of the
    /// window, so a small window is not filled by its own summary (and compaction cannot
    /// thrash: a summary that large could not make the request smaller).
    pub fn summary_budget_tokens(&self) -> u64 {
        self.summary_max_tokens.min(self.effective_window() / 4)
    }

    /// Tokens of recent messages a compaction keeps.
    pub fn reserve_tokens(&self) -> u64 {
        (self.effective_window() as f64 * self.reserve_threshold_ratio) as u64
    }
}

/// Whether a ratio key's value `v` is in (0, 1].
fn is_ratio(v: f64) -> bool {
    v > 0.0 && v <= 1.0
}

/// `url` with its userinfo and query string (where credentials hide) replaced by [`REDACTED`].
fn url_without_credentials(url: &str) -> String {
    let (url, query) = match url.split_once('?') {
        Some((url, _)) => (url, Some(REDACTED)),
        None => (url, None),
    };
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let authority_end = rest.find(['/', '#']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) => format!("{REDACTED}@{host}"),
        None => authority.to_owned(),
    };
    let mut shown = String::new();
    if let Some(scheme) = scheme {
        shown.push_str(scheme);
        shown.push_str("://");
    }
    shown.push_str(&authority);
    shown.push_str(path);
    if let Some(query) = query {
        shown.push('?');
        shown.push_str(query);
    }
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_the_spec_defaults_and_valid() {
        let c = Config::default();
        assert_eq!(c.max_input_length, 131_072);
        assert_eq!(c.compact_threshold_tokens(), 104_857);
        assert_eq!(c.pruning_recent_n, 2);
        assert_eq!(
            (c.pruning_old_msg_max_bytes, c.pruning_recent_msg_max_bytes),
            (3000, 50_000)
        );
        assert_eq!(c.offload_retention_days, 5.0);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let err = serde_json::from_str::<Config>(r#"{"pruning_recent": 3}"#).unwrap_err();
        assert!(err.to_string().contains("pruning_recent"), "{err}");
    }

    #[test]
    fn inverted_limits_name_the_field() {
        let c = Config {
            pruning_recent_msg_max_bytes: 10,
            ..Config::default()
        };
        assert_eq!(c.validate().unwrap_err().0, "pruning_recent_msg_max_bytes");
    }

    /// Every validation rule, broken alone: the error names the key that breaks it.
    #[test]
    fn every_rule_names_its_own_key() {
        let cases: &[(&str, serde_json::Value)] = &[
            ("max_input_length", 1000.into()),
            ("max_output_tokens", 70_000.into()),
            ("prune_trigger_ratio", 0.0.into()),
            ("prune_target_ratio", 0.9.into()),
            ("prune_protected_turns", 0.into()),
            ("prune_stub_chars", 10.into()),
            ("prompt_max_total_chars", 999.into()),
            ("prompt_max_section_chars", 999.into()),
            ("prompt_max_section_chars", 150_001.into()),
            ("compact_threshold_ratio", 0.0.into()),
            ("compact_threshold_ratio", 1.5.into()),
            ("reserve_threshold_ratio", 0.0.into()),
            ("reserve_threshold_ratio", 0.9.into()),
            ("compact_keep_recent_messages", 10_001.into()),
            ("llm_timeout_secs", 0.0.into()),
            ("llm_timeout_secs", 3601.0.into()),
            ("llm_input_budget_tokens", 999.into()),
            ("llm_max_output_tokens", 99.into()),
            ("llm_temperature", (-0.1).into()),
            ("llm_temperature", 2.1.into()),
            ("summary_max_tokens", 199.into()),
            ("token_count_estimate_divisor", 0.5.into()),
            ("token_count_estimate_divisor", 11.0.into()),
            ("pruning_tail_ratio", 0.6.into()),
            ("pruning_old_msg_max_bytes", 0.into()),
            ("pruning_recent_msg_max_bytes", 2_999.into()),
            ("markdown_old_msg_max_bytes", 0.into()),
            ("markdown_old_msg_max_bytes", 99.into()),
            ("markdown_recent_msg_max_bytes", 49_999.into()),
            ("offload_retention_days", 0.0.into()),
            ("max_live_sessions", 0.into()),
            ("session_idle_secs", 0.0.into()),
            ("dialog_path", "".into()),
            ("dialog_path", "../elsewhere".into()),
            ("dialog_path", "/abs".into()),
        ];
        let defaults = match serde_json::to_value(Config::default()).unwrap() {
            serde_json::Value::Object(map) => map,
            other => panic!("{other}"),
        };
        for (key, bad) in cases {
            assert!(defaults.contains_key(*key), "{key} is not a config key");
            let mut map = defaults.clone();
            map.insert((*key).to_owned(), bad.clone());
            let config: Config = serde_json::from_value(serde_json::Value::Object(map)).unwrap();
            let (named, why) = config.validate().expect_err(key);
            assert_eq!(named, *key, "{key} = {bad} was reported as {named}: {why}");
        }
        // The limits at their smallest are valid: each rule is about its own key only.
        let smallest = Config {
            pruning_old_msg_max_bytes: 100,
            markdown_old_msg_max_bytes: 100,
            llm_input_budget_tokens: 1_000,
            llm_max_output_tokens: 100,
            ..Config::default()
        };
        assert_eq!(smallest.validate(), Ok(()));
    }

    #[test]
    fn daemon_only_keys_are_config_keys() {
        let keys = match serde_json::to_value(Config::default()).unwrap() {
            serde_json::Value::Object(map) => map,
            other => panic!("{other}"),
        };
        for key in Config::DAEMON_ONLY_KEYS {
            assert!(keys.contains_key(*key), "{key} is not a config key");
            assert!(Config::is_daemon_only(key));
        }
        assert!(!Config::is_daemon_only("llm_model"));
        assert!(!Config::is_daemon_only("summarizer"));
    }

    #[test]
    fn clients_see_no_header_value_and_no_url_credentials() {
        let c = Config {
            llm_extra_headers: [("X-Org".to_owned(), "org-secret-1".to_owned())].into(),
            llm_base_url: "https://user:pa55@llm.example.com:8443/v1?api-key=k3y".into(),
            ..Config::default()
        };
        let shown = c.for_clients();
        assert_eq!(shown.llm_extra_headers["X-Org"], REDACTED);
        assert_eq!(
            shown.llm_base_url,
            "https://[redacted]@llm.example.com:8443/v1?[redacted]"
        );
        let text = serde_json::to_string(&shown).unwrap();
        for secret in ["org-secret-1", "pa55", "k3y"] {
            assert!(!text.contains(secret), "{secret} shown: {text}");
        }
        assert_eq!(shown.llm_api_key_env, c.llm_api_key_env, "only the variable's name");
        let plain = Config::default();
        assert_eq!(plain.for_clients(), plain, "nothing to hide by default");
    }
}
