//! The memory seam with the `memory` feature: the glue to `satchel-memory`. The index of the
//! workspace's memory files, its watcher and embedding backend, built from the configuration,
//! and what the `memory.*` methods and `context.prepare`'s recall ask of them.
//!
//! The index is derived: it is opened (rebuilt when corrupt) and brought up to date in the
//! background at start-up, kept up to date by the watcher, and synchronously for the file a
//! `memory.write` or `memory.append` just changed, so that file is searchable on return. When
//! the index cannot take a change (`catch_up`), the write stands and the reply says the index
//! is behind: it catches up in the background.

mod catch_up;
mod merge;
mod recall;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use satchel_memory::embed::{CachedEmbedder, Embedder, EmbeddingCacheConfig, HttpEmbeddingConfig, OpenAiEmbedder};
use satchel_memory::index::{IndexOptions, MemoryIndex, SearchOptions};
use satchel_memory::watch::{MemoryWatcher, WatchOptions};
use satchel_protocol::memory::{MemorySearchParams, MemorySearchResult, MemoryStatusResult, SearchMode};
use satchel_protocol::memory_config::EmbeddingChoice;
use satchel_protocol::{Config, PromptSection};
use satchel_storage::{Layout, Workspace};

use crate::error::RpcError;
use catch_up::CatchUp;
pub use merge::next_merge;

/// The index is built in: the index methods read their params and run.
pub const NOT_BUILT_IN: Option<&str> = None;

/// The daemon's memory index; none when `memory_index_enabled` is false.
pub struct Memory {
    service: Option<MemoryService>,
}

impl Memory {
    /// No index.
    pub fn none() -> Memory {
        Memory { service: None }
    }

    /// The index of `workspace` when `config` enables it, opened with its background sync and
    /// watcher started ([`MemoryService::open`]).
    pub fn open(
        workspace: &Workspace,
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<Memory> {
        let service = if config.daemon.memory_index.memory_index_enabled {
            Some(MemoryService::open(workspace, config, env)?)
        } else {
            None
        };
        Ok(Memory { service })
    }

    /// Re-indexes the memory file `rel`, just written, if there is an index (see
    /// [`MemoryService::reindex`]).
    pub fn reindex(&self, rel: &str) -> (usize, Vec<String>) {
        match &self.service {
            Some(service) => service.reindex(rel),
            None => (0, Vec::new()),
        }
    }

    /// `memory.search`.
    pub fn search(&self, params: &MemorySearchParams) -> Result<MemorySearchResult, RpcError> {
        self.service()?.search(params)
    }

    /// `memory.status`; `next_merge` is when the daily merge runs next.
    pub fn status(&self, next_merge: Option<String>) -> Result<MemoryStatusResult, RpcError> {
        Ok(self.service()?.status(next_merge))
    }

    /// `MemoryUnavailable` when there is no index (checked before a merge takes its turn).
    pub fn require_index(&self) -> Result<(), RpcError> {
        self.service().map(|_| ())
    }

    /// The index, or why there is none.
    fn service(&self) -> Result<&MemoryService, RpcError> {
        self.service.as_ref().ok_or_else(|| {
            RpcError::MemoryUnavailable("memory_index_enabled is false in this daemon's configuration".into())
        })
    }
}

/// The memory index of a workspace and what keeps it current.
struct MemoryService {
    index: Arc<MemoryIndex>,
    /// Changes the index has not taken yet (a failed sync), retried in the background.
    catch_up: Arc<CatchUp>,
    /// Kept for its threads: dropping it stops the watching.
    watcher: MemoryWatcher,
    /// The embedding backend as built (with its cache), for `memory.status`.
    embedding: Option<EmbeddingBackend>,
    /// The last recall section of each session: an agent loop's later calls bring tool
    /// results, not a user message, and the prompt should keep the same recall meanwhile.
    recalls: Mutex<HashMap<String, PromptSection>>,
    /// Warnings from opening the index (a corrupt file rebuilt), shown by `memory.status`.
    open_warnings: Vec<String>,
    defaults: SearchDefaults,
}

/// The search settings of the daemon's configuration.
#[derive(Debug, Clone, Copy)]
struct SearchDefaults {
    max_results: usize,
    min_score: f64,
}

/// An embedding backend and its cache.
struct EmbeddingBackend {
    kind: &'static str,
    cached: Arc<CachedEmbedder<Arc<dyn Embedder>>>,
}

impl MemoryService {
    /// Opens the index of `workspace` as `config` says and starts its background sync and
    /// watcher; `env` is the daemon's environment (the embeddings API key is read there).
    fn open(
        workspace: &Workspace,
        config: &Config,
        env: impl Fn(&str) -> Option<String>,
    ) -> anyhow::Result<MemoryService> {
        let embedding = embedding_backend(workspace.root(), config, &env)?;
        if !config.daemon.memory_index.fts_enabled && embedding.is_none() {
            anyhow::bail!(
                "memory: fts_enabled is false and no embedding backend is configured: at least one search mode must be on"
            );
        }
        let layout = workspace.layout();
        satchel_storage::perms::create_private_dir_all(&layout.index_dir())?;
        let options = IndexOptions {
            fts_enabled: config.daemon.memory_index.fts_enabled,
            vector_weight: config.daemon.memory_index.memory_vector_weight,
            candidate_multiplier: config.daemon.memory_index.memory_candidate_multiplier,
            extra_paths: config
                .daemon
                .memory_index
                .memory_extra_paths
                .iter()
                .map(PathBuf::from)
                .collect(),
        };
        let embedder: Option<Arc<dyn Embedder>> = embedding.as_ref().map(|e| e.cached.clone() as Arc<dyn Embedder>);
        let (index, open_warnings) = MemoryIndex::open(workspace.root(), &layout.memory_index(), embedder, options)?;
        for warning in &open_warnings {
            tracing::warn!("memory index: {warning}");
        }
        let index = Arc::new(index);
        let catch_up = CatchUp::new(index.clone());
        let watcher = if config.daemon.memory_index.memory_watch_enabled {
            let watched = index.clone();
            let behind = catch_up.clone();
            let options = WatchOptions {
                debounce: Duration::from_millis(config.daemon.memory_index.memory_watch_debounce_ms),
                poll_interval: (config.daemon.memory_index.memory_watch_poll_ms > 0)
                    .then(|| Duration::from_millis(config.daemon.memory_index.memory_watch_poll_ms)),
            };
            MemoryWatcher::start(index.watch_roots(), options, move |paths| {
                sync_logged(&watched, &behind, paths)
            })
        } else {
            MemoryWatcher::noop()
        };
        // Start-up stays quick: the files are compared with the index in the background
        // (searches meanwhile see the index as it was left, which is persistent).
        let syncing = index.clone();
        let behind = catch_up.clone();
        std::thread::Builder::new()
            .name("memory-sync".into())
            .spawn(move || match syncing.sync_all() {
                Ok(report) => tracing::info!(
                    files = report.files_indexed,
                    chunks = report.chunks_added,
                    removed = report.files_removed,
                    "memory index up to date"
                ),
                Err(e) => {
                    tracing::warn!("memory index: the start-up sync failed ({e}); retrying in the background");
                    behind.failed(syncing.watch_roots(), &e);
                }
            })?;
        Ok(MemoryService {
            index,
            catch_up,
            watcher,
            embedding,
            recalls: Mutex::default(),
            open_warnings,
            defaults: SearchDefaults {
                max_results: config.daemon.memory_index.memory_max_results,
                min_score: config.daemon.memory_index.memory_min_score,
            },
        })
    }

    /// Re-indexes the memory file `rel` (just written); returns the chunks indexed and any
    /// warnings (an embedding backend down, the index behind). The write stands whatever
    /// happens here: when the index cannot take the change, it is retried in the background
    /// and the warning says so (an error would tell the client to retry a write that is done).
    fn reindex(&self, rel: &str) -> (usize, Vec<String>) {
        let path = PathBuf::from(rel);
        match self.index.sync_paths(std::slice::from_ref(&path)) {
            Ok(report) => (report.chunks_added, report.warnings),
            Err(e) => {
                tracing::warn!("memory index: {rel} is written but not indexed ({e}); retrying in the background");
                let mut warnings = vec![format!(
                    "{rel} is written, but the memory index could not take the change ({e}): searches miss it until the index catches up, which is retried in the background"
                )];
                warnings.extend(self.catch_up.failed(vec![path], &e));
                (0, warnings)
            }
        }
    }

    /// `memory.search`.
    fn search(&self, params: &MemorySearchParams) -> Result<MemorySearchResult, RpcError> {
        let max_results = params.max_results.unwrap_or(self.defaults.max_results);
        if !(1..=100).contains(&max_results) {
            return Err(RpcError::invalid_params("max_results", "must be in [1, 100]"));
        }
        let min_score = params.min_score.unwrap_or(self.defaults.min_score);
        if !(0.0..=1.0).contains(&min_score) {
            return Err(RpcError::invalid_params("min_score", "must be in [0, 1]"));
        }
        if params.query.trim().is_empty() {
            return Err(RpcError::invalid_params("query", "must not be empty"));
        }
        let options = SearchOptions {
            max_results,
            min_score,
            mode: params.mode.unwrap_or_default(),
        };
        let outcome = match self.index.search(&params.query, &options) {
            // A damaged index is rebuilt, and this search runs on the new one (with what the
            // rebuild has reached) rather than fail like every one after it.
            Err(e) if e.is_damage() => {
                let rebuilt = self.catch_up.rebuild_if_damaged(&e);
                let mut outcome = self
                    .index
                    .search(&params.query, &options)
                    .map_err(|e| search_error(e, params.mode))?;
                outcome.warnings.extend(rebuilt);
                outcome
            }
            other => other.map_err(|e| search_error(e, params.mode))?,
        };
        Ok(MemorySearchResult {
            results: outcome.hits,
            mode: outcome.mode,
            warnings: outcome.warnings,
        })
    }

    /// `memory.status`.
    fn status(&self, next_merge: Option<String>) -> MemoryStatusResult {
        let mut modes = Vec::new();
        let stats = self.index.stats();
        let index = serde_json::to_value(&stats).unwrap_or_default();
        if index.get("fts_enabled").and_then(serde_json::Value::as_bool) != Some(false) {
            modes.push(SearchMode::Bm25);
        }
        if self.embedding.is_some() {
            modes.push(SearchMode::Vector);
        }
        let mut index = index;
        if let Some(object) = index.as_object_mut().filter(|_| !self.open_warnings.is_empty()) {
            object.insert("open_warnings".into(), serde_json::json!(self.open_warnings));
        }
        MemoryStatusResult {
            index_path: Layout::memory_index_rel(),
            modes,
            index,
            watcher: serde_json::to_value(self.watcher.state()).unwrap_or_default(),
            embedding: self.embedding.as_ref().map_or(serde_json::Value::Null, |e| {
                serde_json::json!({
                    "backend": e.kind,
                    "model": e.cached.model_id(),
                    "cache": serde_json::to_value(e.cached.stats()).unwrap_or_default(),
                })
            }),
            next_merge,
        }
    }
}

/// Re-indexes `paths` reported by the watcher; a failure is logged and the paths wait for
/// the catch-up's retries.
fn sync_logged(index: &MemoryIndex, catch_up: &Arc<CatchUp>, paths: Vec<PathBuf>) {
    match index.sync_paths(&paths) {
        Ok(report) => {
            for warning in report.warnings {
                tracing::warn!("memory index: {warning}");
            }
        }
        Err(e) => {
            tracing::warn!(
                "memory index: re-indexing {} changed files failed ({e}); retrying in the background",
                paths.len()
            );
            catch_up.failed(paths, &e);
        }
    }
}

/// The embedding backend `config` asks for, with its cache; `None` for BM25 only.
fn embedding_backend(
    root: &Path,
    config: &Config,
    env: &impl Fn(&str) -> Option<String>,
) -> anyhow::Result<Option<EmbeddingBackend>> {
    let api_key = env(&config.daemon.embedding.embedding_api_key_env).filter(|k| !k.is_empty());
    let (kind, embedder): (&'static str, Arc<dyn Embedder>) = match config.daemon.embedding.choice(api_key.is_some()) {
        EmbeddingChoice::None => return Ok(None),
        EmbeddingChoice::OpenAi => (
            "openai",
            Arc::new(OpenAiEmbedder::new(HttpEmbeddingConfig {
                base_url: config.daemon.embedding.embedding_base_url.clone(),
                api_key,
                model: config.daemon.embedding.embedding_model_name.clone(),
                dimensions: config.daemon.embedding.embedding_dimensions,
                max_input_length: config.daemon.embedding.embedding_max_input_length,
                max_batch_size: config.daemon.embedding.embedding_max_batch_size,
                timeout: Duration::from_secs_f64(config.daemon.embedding.embedding_timeout_secs),
                send_dimensions: true,
            })),
        ),
        EmbeddingChoice::Local => (
            "local",
            local_model(&root.join(&config.daemon.embedding.embedding_model_path))?,
        ),
    };
    let cache = EmbeddingCacheConfig {
        enabled: config.daemon.embedding.embedding_cache_enabled,
        max_entries: config.daemon.embedding.embedding_max_cache_size,
    };
    Ok(Some(EmbeddingBackend {
        kind,
        cached: Arc::new(CachedEmbedder::new(embedder, cache)),
    }))
}

/// The local model in `dir`.
#[cfg(feature = "local-embeddings")]
fn local_model(dir: &Path) -> anyhow::Result<Arc<dyn Embedder>> {
    let model = satchel_memory::embed::local::LocalEmbedder::load(dir)
        .map_err(|e| anyhow::anyhow!("memory: loading the embedding model in {}: {e}", dir.display()))?;
    Ok(Arc::new(model))
}

/// Without the `local-embeddings` feature there is no local model to load.
#[cfg(not(feature = "local-embeddings"))]
fn local_model(dir: &Path) -> anyhow::Result<Arc<dyn Embedder>> {
    anyhow::bail!(
        "memory: embedding_model_path is {} but this satchel was built without the `local-embeddings` feature (cargo build --features local-embeddings)",
        dir.display()
    )
}

/// A failed index operation: the disk or SQLite refused.
fn index_error(error: satchel_memory::MemoryError) -> RpcError {
    RpcError::MemoryIndex(error.to_string())
}

/// A failed search: a mode that is not on is the caller's error; anything else the index's.
fn search_error(error: satchel_memory::MemoryError, mode: Option<SearchMode>) -> RpcError {
    match error {
        satchel_memory::MemoryError::ModeUnavailable(why) if mode.is_some() => RpcError::invalid_params("mode", why),
        other => index_error(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_index_error_names_the_index_once() {
        let busy = rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY), None);
        let message = index_error(satchel_memory::MemoryError::Index(busy)).to_string();
        assert_eq!(message, "memory index: SQLite: Error code 5: database is locked");
    }
}
