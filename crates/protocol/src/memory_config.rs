//! The memory keys of [`Config`](crate::Config) ([`MemoryIndexConfig`], [`EmbeddingConfig`]): their checks, and what they resolve to (the embedding
//! backend to build, the time of the daily merge).

use crate::config::{ConfigError, DaemonConfig, EmbeddingConfig, MemoryIndexConfig};

/// The embedding backend a configuration asks for, once `auto` is resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EmbeddingChoice {
    /// No vectors: BM25 only.
    None,
    /// The OpenAI-compatible endpoint at `embedding_base_url`.
    OpenAi,
    /// The local model in `embedding_model_path`.
    Local,
}

/// The values `embedding_backend` takes.
pub const EMBEDDING_BACKENDS: &[&str] = &["auto", "openai", "local", "none"];

/// The values `memory_store_backend` takes; all are satchel's one SQLite file.
pub const STORE_BACKENDS: &[&str] = &["auto", "sqlite", "local"];

impl DaemonConfig {
    /// Checks the memory keys (called by [`Config::validate`](crate::Config::validate)).
    pub(crate) fn validate_memory(&self) -> Result<(), ConfigError> {
        let (index, embedding) = (&self.memory_index, &self.embedding);
        let backend = index.memory_store_backend.as_str();
        if backend == "chroma" {
            return Err(ConfigError::new(
                "memory_store_backend",
                "chroma is not supported: satchel keeps its memory index (BM25 and vectors) in one SQLite file; use auto, sqlite or local",
            ));
        }
        if !STORE_BACKENDS.contains(&backend) {
            return Err(ConfigError::new(
                "memory_store_backend",
                "must be one of auto, sqlite, local",
            ));
        }
        if !EMBEDDING_BACKENDS.contains(&embedding.embedding_backend.as_str()) {
            return Err(ConfigError::new(
                "embedding_backend",
                "must be one of auto, openai, local, none",
            ));
        }
        if embedding.embedding_backend == "local" && embedding.embedding_model_path.is_empty() {
            return Err(ConfigError::new(
                "embedding_model_path",
                "must name the model directory when embedding_backend is local",
            ));
        }
        if !(1..=100).contains(&index.memory_max_results) {
            return Err(ConfigError::new("memory_max_results", "must be in [1, 100]"));
        }
        if !(0.0..=1.0).contains(&index.memory_min_score) {
            return Err(ConfigError::new("memory_min_score", "must be in [0, 1]"));
        }
        if !(0.0..=1.0).contains(&index.memory_vector_weight) {
            return Err(ConfigError::new("memory_vector_weight", "must be in [0, 1]"));
        }
        if !(1.0..=50.0).contains(&index.memory_candidate_multiplier) {
            return Err(ConfigError::new("memory_candidate_multiplier", "must be in [1, 50]"));
        }
        if !(10..=10_000).contains(&index.memory_watch_debounce_ms) {
            return Err(ConfigError::new("memory_watch_debounce_ms", "must be in [10, 10000]"));
        }
        if index.memory_watch_poll_ms != 0 && !(100..=600_000).contains(&index.memory_watch_poll_ms) {
            return Err(ConfigError::new(
                "memory_watch_poll_ms",
                "must be 0 (off) or in [100, 600000]",
            ));
        }
        if index.merge_time().is_none() {
            return Err(ConfigError::new(
                "memory_merge_time",
                "must be HH:MM (24-hour, local time)",
            ));
        }
        if !(1..=366).contains(&index.memory_merge_days) {
            return Err(ConfigError::new("memory_merge_days", "must be in [1, 366]"));
        }
        if !(1..=100_000).contains(&embedding.embedding_dimensions) {
            return Err(ConfigError::new("embedding_dimensions", "must be in [1, 100000]"));
        }
        if !(1..=2048).contains(&embedding.embedding_max_batch_size) {
            return Err(ConfigError::new("embedding_max_batch_size", "must be in [1, 2048]"));
        }
        if embedding.embedding_max_input_length < 16 {
            return Err(ConfigError::new("embedding_max_input_length", "must be at least 16"));
        }
        if embedding.embedding_cache_enabled && embedding.embedding_max_cache_size == 0 {
            return Err(ConfigError::new(
                "embedding_max_cache_size",
                "must be at least 1 while embedding_cache_enabled",
            ));
        }
        if embedding.embedding_timeout_secs.is_nan()
            || embedding.embedding_timeout_secs <= 0.0
            || embedding.embedding_timeout_secs > 600.0
        {
            return Err(ConfigError::new("embedding_timeout_secs", "must be in (0, 600]"));
        }
        // `auto` may still find its key in the daemon's environment, which the daemon checks
        // when it builds the backend; `none` is certain here.
        if !index.fts_enabled && embedding.embedding_backend == "none" && index.memory_index_enabled {
            return Err(ConfigError::new(
                "fts_enabled",
                "at least one search mode must be on: keep fts_enabled, or configure an embedding backend",
            ));
        }
        Ok(())
    }
}

impl EmbeddingConfig {
    /// The embedding backend to build; `api_key_set` says whether `embedding_api_key_env`
    /// names a variable that is set (for `auto`).
    pub fn choice(&self, api_key_set: bool) -> EmbeddingChoice {
        match self.embedding_backend.as_str() {
            "openai" => EmbeddingChoice::OpenAi,
            "local" => EmbeddingChoice::Local,
            "none" => EmbeddingChoice::None,
            _ if !self.embedding_model_path.is_empty() => EmbeddingChoice::Local,
            _ if api_key_set => EmbeddingChoice::OpenAi,
            _ => EmbeddingChoice::None,
        }
    }
}

impl MemoryIndexConfig {
    /// `memory_merge_time` as (hour, minute), `None` when it is not `HH:MM`.
    pub fn merge_time(&self) -> Option<(u32, u32)> {
        let (hour, minute) = self.memory_merge_time.split_once(':')?;
        let hour: u32 = hour.parse().ok().filter(|h| *h < 24)?;
        let minute: u32 = minute.parse().ok().filter(|m| *m < 60)?;
        (minute < 60 && self.memory_merge_time.len() == 5).then_some((hour, minute))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    fn with(edit: impl FnOnce(&mut Config)) -> Result<(), ConfigError> {
        let mut config = Config::default();
        edit(&mut config);
        config.validate()
    }

    #[test]
    fn chroma_is_refused_with_a_reason_and_the_other_backends_are_the_sqlite_store() {
        let ConfigError { key, reason: why } =
            with(|c| c.daemon.memory_index.memory_store_backend = "chroma".into()).unwrap_err();
        assert_eq!(key, "memory_store_backend");
        assert!(why.contains("chroma is not supported"), "{why}");
        for backend in STORE_BACKENDS {
            with(|c| c.daemon.memory_index.memory_store_backend = (*backend).into()).unwrap();
        }
    }

    #[test]
    fn at_least_one_search_mode_must_be_on() {
        let ConfigError { key, reason: why } = with(|c| {
            c.daemon.memory_index.fts_enabled = false;
            c.daemon.embedding.embedding_backend = "none".into();
        })
        .unwrap_err();
        assert_eq!(key, "fts_enabled");
        assert!(why.contains("at least one search mode"), "{why}");
        with(|c| {
            c.daemon.memory_index.fts_enabled = false;
            c.daemon.embedding.embedding_backend = "openai".into();
        })
        .unwrap();
    }

    #[test]
    fn auto_prefers_a_local_model_then_a_key() {
        let mut c = Config::default();
        assert_eq!(c.daemon.embedding.choice(false), EmbeddingChoice::None);
        assert_eq!(c.daemon.embedding.choice(true), EmbeddingChoice::OpenAi);
        c.daemon.embedding.embedding_model_path = "models/minilm".into();
        assert_eq!(c.daemon.embedding.choice(true), EmbeddingChoice::Local);
        c.daemon.embedding.embedding_backend = "none".into();
        assert_eq!(c.daemon.embedding.choice(true), EmbeddingChoice::None);
    }

    #[test]
    fn the_merge_time_is_hh_mm() {
        for (text, parsed) in [
            ("00:00", Some((0, 0))),
            ("23:59", Some((23, 59))),
            ("24:00", None),
            ("7:30", None),
            ("noon", None),
        ] {
            let index = MemoryIndexConfig {
                memory_merge_time: text.into(),
                ..MemoryIndexConfig::default()
            };
            assert_eq!(index.merge_time(), parsed, "{text}");
        }
    }
}
