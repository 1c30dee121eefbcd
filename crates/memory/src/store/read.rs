//! What the index reads: file records, a file's chunks, BM25 candidates, chunk texts, vectors
//! and the chunks still waiting for one.

use std::collections::HashMap;

use rusqlite::{Connection, OptionalExtension, Row, params};

use super::{Store, from_sql_hash, to_sql_hash};
use crate::fusion::ChunkKey;

/// BM25 weight of the context column (the chunk's date, headings and lead, which the `terms`
/// column holds too): a tie-break, so that of two chunks with the same words the one whose
/// section matches the query (its day, its heading) ranks first.
const CONTEXT_TIE_BREAK: f64 = 0.1;

/// What the index knows about a file, to tell whether it changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileRecord {
    /// Bytes.
    pub size: u64,
    /// Modification time, nanoseconds since the Unix epoch.
    pub mtime_ns: i64,
    /// xxh3 of the content.
    pub content_hash: u64,
    /// When the content was read, nanoseconds since the Unix epoch.
    pub read_at_ns: i64,
}

/// A stored chunk, as a sync compares it with the file's new chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredChunk {
    pub id: i64,
    pub hash: u64,
    pub start_line: u32,
    pub end_line: u32,
}

/// A chunk with its vector of one model.
#[derive(Debug, Clone)]
pub(crate) struct VectorRow {
    pub id: i64,
    pub key: ChunkKey,
    pub vector: Vec<f32>,
}

/// A keyword candidate, with the terms it is scored by.
#[derive(Debug, Clone)]
pub(crate) struct Bm25Row {
    pub id: i64,
    pub key: ChunkKey,
    /// FTS5's `bm25()`, negated: higher is better. Only an order (see `index::keyword`).
    pub rank: f64,
    /// The chunk's analysed terms, joined by spaces.
    pub terms: String,
}

/// What the index holds, refreshed after each change.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Counts {
    pub files: usize,
    pub chunks: usize,
    /// Terms of all chunks: with `chunks`, their average length for the keyword score.
    pub terms: u64,
}

/// A distinct chunk (by hash) that has no vector of the model yet.
#[derive(Debug, Clone)]
pub(crate) struct Pending {
    pub hash: u64,
    pub text: String,
    pub context: String,
}

/// Which chunks' vectors to load.
pub(crate) enum Which<'a> {
    All,
    Ids(&'a [i64]),
    Hashes(&'a [u64]),
}

impl Store {
    /// The record of every indexed file, by workspace-relative path.
    pub fn files(&self) -> rusqlite::Result<HashMap<String, FileRecord>> {
        let mut statement = self
            .conn
            .prepare_cached("SELECT path, size, mtime_ns, content_hash, read_at_ns FROM files")?;
        let rows = statement.query_map([], |row| {
            Ok((
                row.get::<_, String>(0)?,
                FileRecord {
                    size: row.get::<_, i64>(1)?.try_into().unwrap_or(0),
                    mtime_ns: row.get(2)?,
                    content_hash: from_sql_hash(row.get(3)?),
                    read_at_ns: row.get(4)?,
                },
            ))
        })?;
        rows.collect()
    }

    /// Keyword candidates for an FTS5 `query`, best first by FTS5's `bm25()`.
    pub fn bm25(&self, query: &str, limit: usize) -> rusqlite::Result<Vec<Bm25Row>> {
        // The best `limit` first, then their rows: a join in the ranked query would read the
        // row of every match (a common term matches thousands) before the sort keeps `limit`.
        let mut statement = self.conn.prepare_cached(&format!(
            "SELECT c.id, c.path, c.start_line, c.end_line, m.rank, c.terms
             FROM (SELECT rowid AS id, bm25(chunks_fts, 1.0, {CONTEXT_TIE_BREAK}) AS rank FROM chunks_fts
                   WHERE chunks_fts MATCH ?1 ORDER BY rank LIMIT ?2) m
             JOIN chunks c ON c.id = m.id ORDER BY m.rank"
        ))?;
        let rows = statement.query_map(params![query, limit as i64], |row| {
            Ok(Bm25Row {
                id: row.get(0)?,
                key: key(row, 1)?,
                rank: -row.get::<_, f64>(4)?,
                terms: row.get(5)?,
            })
        })?;
        rows.collect()
    }

    /// In how many chunks each of `terms` is (0 for a term in none).
    pub fn chunks_with(&self, terms: &[String]) -> rusqlite::Result<Vec<u64>> {
        let mut statement = self
            .conn
            .prepare_cached("SELECT doc FROM chunks_vocab WHERE term = ?1")?;
        terms
            .iter()
            .map(|term| {
                let found: Option<i64> = statement.query_row([term], |row| row.get(0)).optional()?;
                Ok(found.map_or(0, |n| u64::try_from(n).unwrap_or(0)))
            })
            .collect()
    }

    /// The text of chunk `id`, if it still exists.
    pub fn chunk_text(&self, id: i64) -> rusqlite::Result<Option<String>> {
        self.conn
            .prepare_cached("SELECT text FROM chunks WHERE id = ?1")?
            .query_row([id], |row| row.get(0))
            .optional()
    }

    /// The chunks that have a vector of `model`, with it.
    pub fn vectors(&self, model: &str, which: Which<'_>) -> rusqlite::Result<Vec<VectorRow>> {
        const SELECT: &str = "SELECT c.id, c.path, c.start_line, c.end_line, v.vector
             FROM chunks c JOIN vectors v ON v.model_id = ?1 AND v.hash = c.hash";
        let row = |row: &Row<'_>| {
            Ok(VectorRow {
                id: row.get(0)?,
                key: key(row, 1)?,
                vector: decode(&row.get::<_, Vec<u8>>(4)?),
            })
        };
        let mut out = Vec::new();
        match which {
            Which::All => {
                let mut statement = self.conn.prepare_cached(SELECT)?;
                for found in statement.query_map([model], row)? {
                    out.push(found?);
                }
            }
            Which::Ids(ids) => {
                let mut statement = self.conn.prepare_cached(&format!("{SELECT} WHERE c.id = ?2"))?;
                for id in ids {
                    out.extend(statement.query_row(params![model, id], row).optional()?);
                }
            }
            Which::Hashes(hashes) => {
                let mut statement = self.conn.prepare_cached(&format!("{SELECT} WHERE c.hash = ?2"))?;
                for &hash in hashes {
                    for found in statement.query_map(params![model, to_sql_hash(hash)], row)? {
                        out.push(found?);
                    }
                }
            }
        }
        Ok(out)
    }

    /// Up to `limit` distinct chunks (by hash) without a vector of `model`.
    pub fn pending_vectors(&self, model: &str, limit: usize) -> rusqlite::Result<Vec<Pending>> {
        let mut statement = self.conn.prepare_cached(
            "SELECT c.hash, min(c.text), min(c.context) FROM chunks c
             WHERE NOT EXISTS (SELECT 1 FROM vectors v WHERE v.model_id = ?1 AND v.hash = c.hash)
             GROUP BY c.hash LIMIT ?2",
        )?;
        let rows = statement.query_map(params![model, limit as i64], |row| {
            Ok(Pending {
                hash: from_sql_hash(row.get(0)?),
                text: row.get(1)?,
                context: row.get(2)?,
            })
        })?;
        rows.collect()
    }

    /// Files and chunks in the index, and the terms of all chunks.
    pub fn counts(&self) -> rusqlite::Result<Counts> {
        let files: i64 = self.conn.query_row("SELECT count(*) FROM files", [], |r| r.get(0))?;
        let (chunks, terms): (i64, i64) =
            self.conn
                .query_row("SELECT count(*), coalesce(sum(terms_len), 0) FROM chunks", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })?;
        let count = |n: i64| usize::try_from(n).unwrap_or(0);
        Ok(Counts {
            files: count(files),
            chunks: count(chunks),
            terms: u64::try_from(terms).unwrap_or(0),
        })
    }

    /// When a file was last read into the index, nanoseconds since the Unix epoch.
    pub fn last_read_at_ns(&self) -> rusqlite::Result<Option<i64>> {
        self.conn
            .query_row("SELECT max(read_at_ns) FROM files", [], |row| row.get(0))
    }
}

/// The chunks of `path` from line `from_line` (1-based) on, in line order.
pub(super) fn chunks_of(conn: &Connection, path: &str, from_line: u32) -> rusqlite::Result<Vec<StoredChunk>> {
    let mut statement = conn.prepare_cached(
        "SELECT id, hash, start_line, end_line FROM chunks WHERE path = ?1 AND start_line >= ?2 ORDER BY start_line",
    )?;
    let rows = statement.query_map(params![path, from_line], |row| {
        Ok(StoredChunk {
            id: row.get(0)?,
            hash: from_sql_hash(row.get(1)?),
            start_line: row.get(2)?,
            end_line: row.get(3)?,
        })
    })?;
    rows.collect()
}

/// The key in columns `at..at + 3` (path, start line, end line).
fn key(row: &Row<'_>, at: usize) -> rusqlite::Result<ChunkKey> {
    Ok(ChunkKey {
        path: row.get(at)?,
        start_line: row.get(at + 1)?,
        end_line: row.get(at + 2)?,
    })
}

/// A vector as stored: little-endian `f32`s.
pub(super) fn encode(vector: &[f32]) -> Vec<u8> {
    vector.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn decode(blob: &[u8]) -> Vec<f32> {
    blob.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}
