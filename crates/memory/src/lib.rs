//! Satchel's long-term memory (F17–F19): `MEMORY.md` and the daily logs `memory/YYYY-MM-DD.md`
//! are the truth; an index derived from them answers `memory.search`.
//!
//! # Layout
//!
//! - [`chunk`]: Markdown cut by structure (headings, list items, paragraphs) into chunks that
//!   keep their path and line range; never splits a line.
//! - [`analyze`]: the text analysis both sides of BM25 share (English stemming and stop words,
//!   CJK bigrams).
//! - `store`: the SQLite file (chunks, FTS5, vectors); a corrupt file is rebuilt.
//! - [`embed`]: embedding backends (an OpenAI-compatible endpoint; a local candle model behind
//!   the `local-embeddings` feature) and the embedding cache.
//! - [`fusion`]: hybrid ranking of BM25 and vector candidates.
//! - [`index`]: the files → index synchronisation (incremental by chunk hash) and search.
//! - [`merge`]: the daily merge of the recent daily logs into `MEMORY.md` (extractive; its
//!   `consolidate` module asks a model to rewrite the new entries and parses the reply).
//! - [`watch`]: file watching (notify, debounced, with a polling fallback and a synthetic event
//!   source for tests).
//!
//! Deleting the index loses nothing: it is rebuilt from the files.

pub mod analyze;
pub mod chunk;
pub mod embed;
mod error;
pub mod fusion;
pub mod index;
pub mod merge;
mod store;
pub mod watch;

pub use error::MemoryError;
