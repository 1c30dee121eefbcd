//! Embedding backends: what turns chunk and query text into vectors.
//!
//! # Layout
//!
//! - [`Embedder`]: the one trait the index calls, with [`EmbedError`] for its failures.
//! - [`http`]: [`OpenAiEmbedder`], any OpenAI-compatible `POST /embeddings` endpoint
//!   (DashScope by default), batched, retried, with the API key kept out of every message.
//! - [`cache`]: [`CachedEmbedder`], a bounded LRU of text → vector in front of any backend, with
//!   the hit/miss/failure counters `inspect` shows.
//! - `local` (feature `local-embeddings`): `LocalEmbedder`, a BERT-family sentence model
//!   (all-MiniLM-L6-v2) run on the CPU with candle; `scripts/fetch-embedding-model` unpacks one.
//!
//! Every backend returns L2-normalised vectors, so the index compares them with a dot product.

use std::fmt;
use std::sync::Arc;

pub mod cache;
pub mod http;
#[cfg(feature = "local-embeddings")]
pub mod local;

pub use cache::{CacheStats, CachedEmbedder, EmbeddingCacheConfig};
pub use http::{HttpEmbeddingConfig, OpenAiEmbedder};
#[cfg(feature = "local-embeddings")]
pub use local::LocalEmbedder;

/// Turns texts into vectors. Implementations are called from the daemon's blocking threads.
pub trait Embedder: Send + Sync {
    /// Identity of the model (backend, name, dimensions): stored with each vector, so vectors
    /// of another model are never compared with this one's.
    fn model_id(&self) -> &str;

    /// One vector per text, in order, each L2-normalised.
    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError>;
}

// The daemon picks its backend at run time (`embedding_backend`), so it holds a
// `Box<dyn Embedder>` or shares an `Arc`; these let such a handle go wherever an `Embedder` is
// expected, e.g. inside a `CachedEmbedder`.
impl<E: Embedder + ?Sized> Embedder for Box<E> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts)
    }
}

impl<E: Embedder + ?Sized> Embedder for Arc<E> {
    fn model_id(&self) -> &str {
        (**self).model_id()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        (**self).embed(texts)
    }
}

/// Why texts could not be embedded. The text never carries the API key.
#[derive(Debug, Clone, PartialEq)]
pub struct EmbedError {
    /// What failed, for the warning a search result carries.
    pub message: String,
}

impl EmbedError {
    /// An error with this message.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl fmt::Display for EmbedError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for EmbedError {}

/// Scales `vector` to unit length in place. A zero vector stays zero: it has no direction, and
/// its dot product with anything is 0, which ranks it last instead of failing the whole batch.
pub(crate) fn l2_normalize(vector: &mut [f32]) {
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|x| *x /= norm);
    }
}
