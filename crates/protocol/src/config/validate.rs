//! [`Config::validate`]: the checks serde cannot make, and [`ConfigError`], which names the key.

use std::fmt;

use super::{Config, MAX_KEEP_RECENT_MESSAGES};

/// A configuration value refused: the key (or the name it was written under, an alias or a
/// variable) and why, so that the error names what the user wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The key, or the name it was given under.
    pub key: String,
    /// Why the value was refused.
    pub reason: String,
}

impl ConfigError {
    /// An error about `key`.
    pub fn new(key: impl Into<String>, reason: impl Into<String>) -> Self {
        ConfigError {
            key: key.into(),
            reason: reason.into(),
        }
    }
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.key, self.reason)
    }
}

impl std::error::Error for ConfigError {}

impl Config {
    /// Checks the values serde cannot: ranges and relations between keys.
    ///
    /// Returns the offending key and why, so the error can name the field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_window_and_pruning()?;
        self.validate_compaction()?;
        self.validate_limits()?;
        self.validate_proxy()?;
        self.daemon.validate_memory()
    }

    /// Checks the proxy's keys: an address to listen on and two HTTP(S) base URLs.
    fn validate_proxy(&self) -> Result<(), ConfigError> {
        let proxy = &self.daemon.proxy;
        if proxy.proxy_listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::new(
                "proxy_listen",
                "must be an IP address and port, e.g. 127.0.0.1:8788",
            ));
        }
        for (key, url) in [
            ("proxy_upstream_anthropic", &proxy.proxy_upstream_anthropic),
            ("proxy_upstream_openai", &proxy.proxy_upstream_openai),
        ] {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(ConfigError::new(key, "must be an http:// or https:// base URL"));
            }
            if url.trim_end_matches('/').ends_with("/v1") {
                return Err(ConfigError::new(
                    key,
                    "must not end in /v1: the request's own path (/v1/...) is appended to it",
                ));
            }
        }
        Ok(())
    }

    /// Checks the window, pruning and prompt keys (called by [`Config::validate`]).
    fn validate_window_and_pruning(&self) -> Result<(), ConfigError> {
        if self.window.max_input_length < 1024 {
            return Err(ConfigError::new("max_input_length", "must be at least 1024"));
        }
        if self.window.max_output_tokens > self.window.max_input_length / 2 {
            return Err(ConfigError::new(
                "max_output_tokens",
                "must be at most half of max_input_length",
            ));
        }
        if !is_ratio(self.prune.prune_trigger_ratio) {
            return Err(ConfigError::new("prune_trigger_ratio", "must be in (0, 1]"));
        }
        if !is_ratio(self.prune.prune_target_ratio) || self.prune.prune_target_ratio >= self.prune.prune_trigger_ratio {
            return Err(ConfigError::new(
                "prune_target_ratio",
                "must be in (0, 1] and below prune_trigger_ratio",
            ));
        }
        if !(1..=1_000).contains(&self.recent.pruning_phase_batch) {
            return Err(ConfigError::new("pruning_phase_batch", "must be in [1, 1000]"));
        }
        if self.prune.prune_protected_turns == 0 {
            return Err(ConfigError::new("prune_protected_turns", "must be at least 1"));
        }
        if !(50..=10_000).contains(&self.prune.prune_stub_chars) {
            return Err(ConfigError::new("prune_stub_chars", "must be in [50, 10000]"));
        }
        if self.prompt.prompt_max_total_chars < 1_000 {
            return Err(ConfigError::new("prompt_max_total_chars", "must be at least 1000"));
        }
        if self.prompt.prompt_max_section_chars < 1_000
            || self.prompt.prompt_max_section_chars > self.prompt.prompt_max_total_chars
        {
            return Err(ConfigError::new(
                "prompt_max_section_chars",
                "must be at least 1000 and at most prompt_max_total_chars",
            ));
        }
        Ok(())
    }

    /// Checks the compaction and summarizing-model keys (called by [`Config::validate`]).
    fn validate_compaction(&self) -> Result<(), ConfigError> {
        if !is_ratio(self.compaction.compact_threshold_ratio) {
            return Err(ConfigError::new("compact_threshold_ratio", "must be in (0, 1]"));
        }
        if !is_ratio(self.compaction.reserve_threshold_ratio)
            || self.compaction.reserve_threshold_ratio >= self.compaction.compact_threshold_ratio
        {
            return Err(ConfigError::new(
                "reserve_threshold_ratio",
                "must be in (0, 1] and below compact_threshold_ratio",
            ));
        }
        if self.compaction.compact_keep_recent_messages > MAX_KEEP_RECENT_MESSAGES {
            return Err(ConfigError::new(
                "compact_keep_recent_messages",
                format!("must be at most {MAX_KEEP_RECENT_MESSAGES}"),
            ));
        }
        if self.summary.llm_timeout_secs.is_nan()
            || self.summary.llm_timeout_secs <= 0.0
            || self.summary.llm_timeout_secs > 3600.0
        {
            return Err(ConfigError::new("llm_timeout_secs", "must be in (0, 3600]"));
        }
        if self.summary.llm_input_budget_tokens < 1_000 {
            return Err(ConfigError::new("llm_input_budget_tokens", "must be at least 1000"));
        }
        if self.summary.llm_max_output_tokens < 100 {
            return Err(ConfigError::new("llm_max_output_tokens", "must be at least 100"));
        }
        if !(0.0..=2.0).contains(&self.summary.llm_temperature) {
            return Err(ConfigError::new("llm_temperature", "must be in [0, 2]"));
        }
        for (key, model) in [
            (
                "summarizer_upstream_model_anthropic",
                &self.summary.summarizer_upstream_model_anthropic,
            ),
            (
                "summarizer_upstream_model_openai",
                &self.summary.summarizer_upstream_model_openai,
            ),
        ] {
            // It is sent as the `model` of a JSON body: a typo of a blank is an error here,
            // not a fallback at every compaction.
            if model.trim().is_empty() || model.chars().any(char::is_control) {
                return Err(ConfigError::new(key, "must be a model name"));
            }
        }
        if !(self.summary.summary_window_share > 0.0 && self.summary.summary_window_share <= 0.25) {
            return Err(ConfigError::new("summary_window_share", "must be in (0, 0.25]"));
        }
        if (1..200).contains(&self.summary.summary_max_tokens) {
            return Err(ConfigError::new(
                "summary_max_tokens",
                "must be 0 (no cap) or at least 200",
            ));
        }
        // The budget used is at most a quarter of the window; it must still leave room below
        // the compaction threshold, or every compaction would trigger the next.
        if self.summary_budget_tokens() >= self.compact_threshold_tokens() {
            return Err(ConfigError::new(
                "summary_max_tokens",
                "the summary's budget (at most a quarter of the window) must stay below the compaction threshold",
            ));
        }
        if !(1.0..=10.0).contains(&self.tokens.token_count_estimate_divisor.get()) {
            return Err(ConfigError::new("token_count_estimate_divisor", "must be in [1, 10]"));
        }
        Ok(())
    }

    /// Checks the truncation, retention, session and dialog keys (called by
    /// [`Config::validate`]).
    fn validate_limits(&self) -> Result<(), ConfigError> {
        if !(0.0..=0.5).contains(&self.render.pruning_tail_ratio.get()) {
            return Err(ConfigError::new("pruning_tail_ratio", "must be in [0, 0.5]"));
        }
        if self.render.pruning_old_msg_max_bytes < 100 {
            return Err(ConfigError::new(
                "pruning_old_msg_max_bytes",
                "must be at least 100 bytes",
            ));
        }
        if self.render.markdown_old_msg_max_bytes < 100 {
            return Err(ConfigError::new(
                "markdown_old_msg_max_bytes",
                "must be at least 100 bytes",
            ));
        }
        if self.render.pruning_recent_msg_max_bytes < self.render.pruning_old_msg_max_bytes {
            return Err(ConfigError::new(
                "pruning_recent_msg_max_bytes",
                "must not be below pruning_old_msg_max_bytes",
            ));
        }
        if self.render.markdown_recent_msg_max_bytes < self.render.markdown_old_msg_max_bytes {
            return Err(ConfigError::new(
                "markdown_recent_msg_max_bytes",
                "must not be below markdown_old_msg_max_bytes",
            ));
        }
        if self.retention.offload_retention_days.is_nan() || self.retention.offload_retention_days <= 0.0 {
            return Err(ConfigError::new("offload_retention_days", "must be positive"));
        }
        if self.daemon.sessions.max_live_sessions == 0 {
            return Err(ConfigError::new("max_live_sessions", "must be at least 1"));
        }
        if self.daemon.sessions.session_idle_secs.is_nan() || self.daemon.sessions.session_idle_secs <= 0.0 {
            return Err(ConfigError::new("session_idle_secs", "must be positive"));
        }
        if self.daemon.sessions.dialog_path.is_empty()
            || self.daemon.sessions.dialog_path.contains("..")
            || self.daemon.sessions.dialog_path.starts_with('/')
        {
            return Err(ConfigError::new(
                "dialog_path",
                "must be a relative path inside the workspace",
            ));
        }
        Ok(())
    }
}

/// Whether a ratio key's value `v` is in (0, 1].
fn is_ratio(v: f64) -> bool {
    v > 0.0 && v <= 1.0
}
