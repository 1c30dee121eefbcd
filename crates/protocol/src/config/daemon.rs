//! [`DaemonConfig`]: the keys only the daemon's own configuration sets, in groups read as
//! the request's groups are (see `groups.rs`).

use std::collections::BTreeMap;
use std::sync::LazyLock;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::keys_of;

/// Keys only the daemon's own configuration sets (`<workspace>/config.json` or its
/// `SATCHEL_<KEY>` environment): a per-request override of one is refused. The `llm_*`
/// ones reach the network or the daemon's environment (where the API key is sent, which
/// variable is sent, which headers), the others are daemon-wide.
#[derive(Debug, Clone, PartialEq, Default, Serialize, JsonSchema)]
pub struct DaemonConfig {
    /// Where the summarising model is reached.
    #[serde(flatten)]
    pub llm: LlmEndpointConfig,
    /// The session archive and the live sessions.
    #[serde(flatten)]
    pub sessions: SessionsConfig,
    /// The memory index.
    #[serde(flatten)]
    pub memory_index: MemoryIndexConfig,
    /// The memory index's embeddings.
    #[serde(flatten)]
    pub embedding: EmbeddingConfig,
    /// The provider-compatible proxy (`satchel proxy`).
    #[serde(flatten)]
    pub proxy: ProxyConfig,
}

impl DaemonConfig {
    /// Its keys, in order: the ones a request may not set.
    pub fn keys() -> &'static [String] {
        static KEYS: LazyLock<Vec<String>> = LazyLock::new(|| keys_of(&DaemonConfig::default()));
        &KEYS
    }

    /// Whether `key` is one of its keys, which a request may not set.
    pub fn has_key(key: &str) -> bool {
        DaemonConfig::keys().iter().any(|own| own == key)
    }
}

/// Where the summarising model is reached and with which credentials: the daemon owner's
/// choice, never a client's (the API key is sent there).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct LlmEndpointConfig {
    /// Base URL of the OpenAI-compatible API (the part before `/chat/completions`).
    /// Daemon-only: set in `<workspace>/config.json` or `SATCHEL_LLM_BASE_URL`, never per
    /// request (the API key is sent there).
    pub llm_base_url: String,
    /// Name of the environment variable holding the API key; the key itself never goes in a config file.
    /// Daemon-only: set in `<workspace>/config.json` or `SATCHEL_LLM_API_KEY_ENV`, never per
    /// request (it chooses which of the daemon's variables is sent).
    pub llm_api_key_env: String,
    /// Extra HTTP headers for the endpoint (e.g. an organisation id). Daemon-only: set in
    /// `<workspace>/config.json` or `SATCHEL_LLM_EXTRA_HEADERS`, never per request. The values
    /// are treated as secrets: `initialize` shows them as `[redacted]`, and they are redacted
    /// from any error text the endpoint sends back.
    pub llm_extra_headers: BTreeMap<String, String>,
}

impl Default for LlmEndpointConfig {
    fn default() -> Self {
        LlmEndpointConfig {
            llm_base_url: "https://api.openai.com/v1".into(),
            llm_api_key_env: "OPENAI_API_KEY".into(),
            llm_extra_headers: Default::default(),
        }
    }
}

/// Where sessions are archived and how many stay in memory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct SessionsConfig {
    /// Dialog archive directory, relative to the workspace. Daemon-only: set in
    /// `<workspace>/config.json` or `SATCHEL_DIALOG_PATH`, never per request.
    pub dialog_path: String,
    /// Sessions kept in memory at most; past it the least recently used idle one is dropped
    /// (its log stays, and the next call on it reloads it). Daemon-only: set in
    /// `<workspace>/config.json` or `SATCHEL_MAX_LIVE_SESSIONS`, never per request.
    pub max_live_sessions: usize,
    /// A session idle this long is dropped from memory (reloaded from its log when used again).
    /// Daemon-only: set in `<workspace>/config.json` or `SATCHEL_SESSION_IDLE_SECS`, never per
    /// request.
    pub session_idle_secs: f64,
}

impl Default for SessionsConfig {
    fn default() -> Self {
        SessionsConfig {
            dialog_path: "dialog".into(),
            max_live_sessions: 256,
            session_idle_secs: 1800.0,
        }
    }
}

/// The memory index: what it indexes, how it watches the files, how it searches, and the
/// daily merge.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct MemoryIndexConfig {
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
}

impl Default for MemoryIndexConfig {
    fn default() -> Self {
        MemoryIndexConfig {
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
        }
    }
}

/// The embedding backend of the memory index's vector search.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct EmbeddingConfig {
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

impl Default for EmbeddingConfig {
    fn default() -> Self {
        EmbeddingConfig {
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

/// The provider-compatible proxy (`satchel proxy`, `serve --proxy`): where it listens and
/// where it forwards. Daemon-only: the upstreams receive the clients' credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(default)]
pub struct ProxyConfig {
    /// Where the proxy listens when `--listen` is not given (`HOST:PORT`; port 0 picks a free
    /// one, recorded in `run/proxy.json`). Daemon-only.
    pub proxy_listen: String,
    /// Where Anthropic Messages requests (`/v1/messages…`, `HEAD /`) are forwarded, without
    /// `/v1`. Daemon-only: clients' API keys are sent there.
    pub proxy_upstream_anthropic: String,
    /// Where OpenAI requests (`/v1/chat/completions`, `/v1/responses`, `/v1/models`, every
    /// other path) are forwarded, without `/v1`. Daemon-only: clients' API keys are sent there.
    pub proxy_upstream_openai: String,
    /// The proxy's own bearer token: when set, each request must carry
    /// `Proxy-Authorization: Bearer <token>`. Required to listen on an address other than
    /// loopback. Daemon-only; shown as `[redacted]`.
    pub proxy_token: String,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        ProxyConfig {
            proxy_listen: "127.0.0.1:8788".into(),
            proxy_upstream_anthropic: "https://api.anthropic.com".into(),
            proxy_upstream_openai: "https://api.openai.com".into(),
            proxy_token: String::new(),
        }
    }
}
