//! The effective configuration, with the spec's key names and defaults (QwenPaw set, F9).
//!
//! It lives in the protocol crate because clients see it: `initialize` returns it (with
//! [`Config::for_clients`], so no header value leaves the daemon) and `context.prepare`
//! accepts per-request overrides of any key but the [`DaemonConfig`]'s. The daemon
//! layers it as defaults → `<workspace>/config.json` → `SATCHEL_<KEY>` environment variables
//! → request. The file and a request may also use the spec's other names (CoPaw's
//! `memory_compact_ratio`, QwenPaw's `running.light_context_config` tree, …), and the
//! environment CoPaw's `COPAW_MEMORY_COMPACT_*` variables: [`crate::aliases`] lists and
//! resolves them.
//!
//! On the wire a configuration is one flat object of keys; in Rust it is groups of the keys
//! one part of satchel reads, each flattened into [`Config`], so a function takes the group it
//! reads and a cache key is a group's derived `Hash`.
//!
//! # Layout
//!
//! - `mod.rs`: [`Config`] (its groups, the values derived from several of them, reading one
//!   from its flat keys) and the enums its keys take.
//! - `groups.rs`: the groups a request may override, among them [`RenderConfig`] and
//!   [`TokenConfig`], the two the session's caches key on.
//! - `daemon.rs`: [`DaemonConfig`], the keys only the daemon's own configuration sets.
//! - `validate.rs`: [`Config::validate`] and [`ConfigError`].
//! - [`layers`]: the daemon's layers (defaults, files, `SATCHEL_` variables, a request's
//!   overrides) merged into one checked [`Config`], each key's source kept.

use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

mod daemon;
mod groups;
pub mod layers;
#[cfg(test)]
mod tests;
mod validate;

pub use daemon::{DaemonConfig, EmbeddingConfig, LlmEndpointConfig, MemoryIndexConfig, ProxyConfig, SessionsConfig};
pub use groups::{
    CandidatesConfig, CompactionConfig, Float, PromptConfig, PruneConfig, RecentConfig, RenderConfig, RetentionConfig,
    SectionsConfig, SummaryConfig, TokenConfig, WindowConfig,
};
pub use validate::ConfigError;

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
    /// The provider a request proxied by `satchel proxy` goes to, with that request's own
    /// credentials, lent for the one `context.prepare` it triggers and never kept; the model
    /// is `summarizer_upstream_model_anthropic` or `_openai`, by the request's API. A call with
    /// no proxied request in flight (stdio, the socket) gets the extractive summary, which
    /// says why.
    Upstream,
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
// Serde cannot deny unknown keys through `flatten`: `Deserialize` is written out below
// ([`Config::from_keys`]) and the schema says it with `schemars(deny_unknown_fields)`. The
// groups' order is the order of the keys on the wire.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
#[schemars(deny_unknown_fields)]
pub struct Config {
    /// The window and the mode.
    #[serde(flatten)]
    pub window: WindowConfig,
    /// `aceclaw` mode's pruning.
    #[serde(flatten)]
    pub prune: PruneConfig,
    /// The system prompt's limits.
    #[serde(flatten)]
    pub prompt: PromptConfig,
    /// When compaction runs and what it keeps.
    #[serde(flatten)]
    pub compaction: CompactionConfig,
    /// How the summary is written.
    #[serde(flatten)]
    pub summary: SummaryConfig,
    /// How tokens are counted.
    #[serde(flatten)]
    pub tokens: TokenConfig,
    /// Which messages are recent.
    #[serde(flatten)]
    pub recent: RecentConfig,
    /// What rendering a message reads.
    #[serde(flatten)]
    pub render: RenderConfig,
    /// How long offloaded files are kept.
    #[serde(flatten)]
    pub retention: RetentionConfig,
    /// The sections satchel adds to the prompt.
    #[serde(flatten)]
    pub sections: SectionsConfig,
    /// Learning candidates.
    #[serde(flatten)]
    pub candidates: CandidatesConfig,
    /// The keys a request may not set.
    #[serde(flatten)]
    pub daemon: DaemonConfig,
}

/// Reads the flat object of keys with [`Config::from_keys`], so an unknown key is refused.
impl<'de> Deserialize<'de> for Config {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let keys = Map::<String, Value>::deserialize(deserializer)?;
        Config::from_keys(keys).map_err(serde::de::Error::custom)
    }
}

/// Default [`SummaryConfig::demonstration_prefixes`]: SWE-agent's demonstrations and the like.
pub const DEFAULT_DEMONSTRATION_PREFIXES: &[&str] = &[
    "here is a demonstration",
    "here's a demonstration",
    "here is an example of how",
    "here's an example of how",
    "--- demonstration ---",
    "demonstration:",
];

/// Most [`CompactionConfig::compact_keep_recent_messages`]: CoPaw keeps 3; a tail this long is a
/// session that compaction could not shrink anyway, so a larger value is taken for a typo.
pub const MAX_KEEP_RECENT_MESSAGES: usize = 10_000;

/// The least token budget of a summary, when a quarter of the window allows it: the fixed
/// budget summaries had before it grew with the window, so a small window's summary keeps
/// the detail it had.
pub const SUMMARY_FLOOR_TOKENS: u64 = 2_500;

/// What a secret is shown as: header values in `initialize`, keys and tokens in error texts.
pub const REDACTED: &str = "[redacted]";

impl Config {
    /// Every key, in the order a configuration is serialised.
    pub fn keys() -> &'static [String] {
        static KEYS: LazyLock<Vec<String>> = LazyLock::new(|| keys_of(&Config::default()));
        &KEYS
    }

    /// A configuration from its flat object of keys (the wire form); the keys not given keep
    /// their defaults. A key of no group is refused, then each group takes its own keys from
    /// the object; an error names the key (serde's own `flatten` can do neither).
    pub fn from_keys(keys: Map<String, Value>) -> Result<Config, ConfigError> {
        let known = Config::keys();
        if let Some(unknown) = keys.keys().find(|key| !known.contains(key)) {
            let expected: Vec<String> = known.iter().map(|key| format!("`{key}`")).collect();
            return Err(ConfigError::new(
                unknown,
                format!("unknown field `{unknown}`, expected one of {}", expected.join(", ")),
            ));
        }
        let keys = Value::Object(keys);
        Ok(Config {
            window: group(&keys)?,
            prune: group(&keys)?,
            prompt: group(&keys)?,
            compaction: group(&keys)?,
            summary: group(&keys)?,
            tokens: group(&keys)?,
            recent: group(&keys)?,
            render: group(&keys)?,
            retention: group(&keys)?,
            sections: group(&keys)?,
            candidates: group(&keys)?,
            daemon: DaemonConfig {
                llm: group(&keys)?,
                sessions: group(&keys)?,
                memory_index: group(&keys)?,
                embedding: group(&keys)?,
                proxy: group(&keys)?,
            },
        })
    }

    /// The configuration as a client may see it: every `llm_extra_headers` value (the keys
    /// stay), any credentials in `llm_base_url` and the proxy's upstreams (`user:password@`,
    /// the query string) and a set `proxy_token` replaced by [`REDACTED`]. The API key is never in the configuration at all, only the
    /// name of its variable.
    pub fn for_clients(&self) -> Config {
        let mut shown = self.clone();
        for value in shown.daemon.llm.llm_extra_headers.values_mut() {
            *value = REDACTED.to_owned();
        }
        shown.daemon.llm.llm_base_url = url_without_credentials(&self.daemon.llm.llm_base_url);
        shown.daemon.embedding.embedding_base_url = url_without_credentials(&self.daemon.embedding.embedding_base_url);
        for url in [
            &mut shown.daemon.proxy.proxy_upstream_anthropic,
            &mut shown.daemon.proxy.proxy_upstream_openai,
        ] {
            *url = url_without_credentials(url);
        }
        if !shown.daemon.proxy.proxy_token.is_empty() {
            shown.daemon.proxy.proxy_token = REDACTED.to_owned();
        }
        shown
    }

    /// The window the request must fit: `max_input_length` less the room kept for the answer.
    pub fn effective_window(&self) -> u64 {
        self.window
            .max_input_length
            .saturating_sub(self.window.max_output_tokens)
    }

    /// The token count at which the request is made smaller: compaction in `qwenpaw` mode,
    /// pruning (then compaction if needed) in `aceclaw` mode.
    pub fn compact_threshold_tokens(&self) -> u64 {
        let ratio = match self.window.context_mode {
            ContextMode::Qwenpaw => self.compaction.compact_threshold_ratio,
            ContextMode::Aceclaw => self.prune.prune_trigger_ratio,
        };
        (self.effective_window() as f64 * ratio) as u64
    }

    /// `aceclaw` mode: the token count pruning aims for.
    pub fn prune_target_tokens(&self) -> u64 {
        (self.effective_window() as f64 * self.prune.prune_target_ratio) as u64
    }

    /// Token budget of a summary: `summary_window_share` of the window, at least
    /// [`SUMMARY_FLOOR_TOKENS`], never more than a quarter of the window (so a small window is
    /// not filled by its own summary, and compaction cannot thrash: a summary that large
    /// could not make the request smaller), and at most `summary_max_tokens` when that is set.
    pub fn summary_budget_tokens(&self) -> u64 {
        let window = self.effective_window();
        let share = (window as f64 * self.summary.summary_window_share) as u64;
        let budget = share.max(SUMMARY_FLOOR_TOKENS).min(window / 4);
        match self.summary.summary_max_tokens {
            0 => budget,
            cap => budget.min(cap),
        }
    }

    /// Tokens of recent messages a compaction keeps.
    pub fn reserve_tokens(&self) -> u64 {
        (self.effective_window() as f64 * self.compaction.reserve_threshold_ratio) as u64
    }
}

/// A group of `keys` (an object of flat keys): the group's own keys are read, the others
/// skipped. An error names the key by its path (`llm_extra_headers.X-Org` inside a map key).
fn group<G: DeserializeOwned>(keys: &Value) -> Result<G, ConfigError> {
    serde_path_to_error::deserialize(keys).map_err(|e| ConfigError::new(e.path().to_string(), e.inner().to_string()))
}

/// The keys `value` (a configuration or one of its groups) serialises to, in order.
fn keys_of(value: &impl Serialize) -> Vec<String> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map.into_iter().map(|(key, _)| key).collect(),
        other => unreachable!("a configuration serialises to an object of keys, not {other:?}"),
    }
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
