//! The memory keys of [`Config`]: their checks, and what they resolve to (the embedding
//! backend to build, the time of the daily merge).

use crate::Config;

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

impl Config {
    /// Checks the memory keys (called by [`Config::validate`]).
    pub(crate) fn validate_memory(&self) -> Result<(), (&'static str, String)> {
        let backend = self.memory_store_backend.as_str();
        if backend == "chroma" {
            return Err((
                "memory_store_backend",
                "chroma is not supported: satchel keeps its memory index (BM25 and vectors) in one SQLite file; use auto, sqlite or local".into(),
            ));
        }
        if !STORE_BACKENDS.contains(&backend) {
            return Err(("memory_store_backend", "must be one of auto, sqlite, local".into()));
        }
        if !EMBEDDING_BACKENDS.contains(&self.embedding_backend.as_str()) {
            return Err(("embedding_backend", "must be one of auto, openai, local, none".into()));
        }
        if self.embedding_backend == "local" && self.embedding_model_path.is_empty() {
            return Err((
                "embedding_model_path",
                "must name the model directory when embedding_backend is local".into(),
            ));
        }
        if !(1..=100).contains(&self.memory_max_results) {
            return Err(("memory_max_results", "must be in [1, 100]".into()));
        }
        if !(0.0..=1.0).contains(&self.memory_min_score) {
            return Err(("memory_min_score", "must be in [0, 1]".into()));
        }
        if !(0.0..=1.0).contains(&self.memory_vector_weight) {
            return Err(("memory_vector_weight", "must be in [0, 1]".into()));
        }
        if !(1.0..=50.0).contains(&self.memory_candidate_multiplier) {
            return Err(("memory_candidate_multiplier", "must be in [1, 50]".into()));
        }
        if !(10..=10_000).contains(&self.memory_watch_debounce_ms) {
            return Err(("memory_watch_debounce_ms", "must be in [10, 10000]".into()));
        }
        if self.memory_watch_poll_ms != 0 && !(100..=600_000).contains(&self.memory_watch_poll_ms) {
            return Err(("memory_watch_poll_ms", "must be 0 (off) or in [100, 600000]".into()));
        }
        if self.merge_time().is_none() {
            return Err(("memory_merge_time", "must be HH:MM (24-hour, local time)".into()));
        }
        if !(1..=366).contains(&self.memory_merge_days) {
            return Err(("memory_merge_days", "must be in [1, 366]".into()));
        }
        if !(1..=100_000).contains(&self.embedding_dimensions) {
            return Err(("embedding_dimensions", "must be in [1, 100000]".into()));
        }
        if !(1..=2048).contains(&self.embedding_max_batch_size) {
            return Err(("embedding_max_batch_size", "must be in [1, 2048]".into()));
        }
        if self.embedding_max_input_length < 16 {
            return Err(("embedding_max_input_length", "must be at least 16".into()));
        }
        if self.embedding_cache_enabled && self.embedding_max_cache_size == 0 {
            return Err((
                "embedding_max_cache_size",
                "must be at least 1 while embedding_cache_enabled".into(),
            ));
        }
        if self.embedding_timeout_secs.is_nan()
            || self.embedding_timeout_secs <= 0.0
            || self.embedding_timeout_secs > 600.0
        {
            return Err(("embedding_timeout_secs", "must be in (0, 600]".into()));
        }
        // `auto` may still find its key in the daemon's environment, which the daemon checks
        // when it builds the backend; `none` is certain here.
        if !self.fts_enabled && self.embedding_backend == "none" && self.memory_index_enabled {
            return Err((
                "fts_enabled",
                "at least one search mode must be on: keep fts_enabled, or configure an embedding backend".into(),
            ));
        }
        Ok(())
    }

    /// The embedding backend to build; `api_key_set` says whether `embedding_api_key_env`
    /// names a variable that is set (for `auto`).
    pub fn embedding_choice(&self, api_key_set: bool) -> EmbeddingChoice {
        match self.embedding_backend.as_str() {
            "openai" => EmbeddingChoice::OpenAi,
            "local" => EmbeddingChoice::Local,
            "none" => EmbeddingChoice::None,
            _ if !self.embedding_model_path.is_empty() => EmbeddingChoice::Local,
            _ if api_key_set => EmbeddingChoice::OpenAi,
            _ => EmbeddingChoice::None,
        }
    }

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

    fn with(edit: impl FnOnce(&mut Config)) -> Result<(), (&'static str, String)> {
        let mut config = Config::default();
        edit(&mut config);
        config.validate()
    }

    #[test]
    fn chroma_is_refused_with_a_reason_and_the_other_backends_are_the_sqlite_store() {
        let (key, why) = with(|c| c.memory_store_backend = "chroma".into()).unwrap_err();
        assert_eq!(key, "memory_store_backend");
        assert!(why.contains("chroma is not supported"), "{why}");
        for backend in STORE_BACKENDS {
            with(|c| c.memory_store_backend = (*backend).into()).unwrap();
        }
    }

    #[test]
    fn at_least_one_search_mode_must_be_on() {
        let (key, why) = with(|c| {
            c.fts_enabled = false;
            c.embedding_backend = "none".into();
        })
        .unwrap_err();
        assert_eq!(key, "fts_enabled");
        assert!(why.contains("at least one search mode"), "{why}");
        with(|c| {
            c.fts_enabled = false;
            c.embedding_backend = "openai".into();
        })
        .unwrap();
    }

    #[test]
    fn auto_prefers_a_local_model_then_a_key() {
        let mut c = Config::default();
        assert_eq!(c.embedding_choice(false), EmbeddingChoice::None);
        assert_eq!(c.embedding_choice(true), EmbeddingChoice::OpenAi);
        c.embedding_model_path = "models/minilm".into();
        assert_eq!(c.embedding_choice(true), EmbeddingChoice::Local);
        c.embedding_backend = "none".into();
        assert_eq!(c.embedding_choice(true), EmbeddingChoice::None);
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
            let c = Config {
                memory_merge_time: text.into(),
                ..Config::default()
            };
            assert_eq!(c.merge_time(), parsed, "{text}");
        }
    }
}
