//! What a sync writes: changed files' chunks (only those whose hash changed), removed files,
//! and vectors.

use std::collections::{HashMap, VecDeque};

use rusqlite::{Connection, params};

use super::read::{FileRecord, StoredChunk, chunks_of, encode};
use super::{Store, to_sql_hash};
use crate::analyze::terms;
use crate::chunk::Chunk;

/// A file to bring up to date.
#[derive(Debug, Clone)]
pub(crate) struct FileChange {
    /// Workspace-relative path.
    pub path: String,
    /// Its new record.
    pub record: FileRecord,
    /// Its chunks from line `from_line` on, when its content changed; `None` when only the
    /// record did (a touched file).
    pub chunks: Option<Vec<Chunk>>,
    /// The first line (1-based) `chunks` cover: 1, or after an append the line chunking
    /// resumed at (the stored chunks before it stay as they are).
    pub from_line: u32,
}

/// What [`Store::apply`] did, for the report and for the in-memory vectors.
#[derive(Debug, Clone, Default)]
pub(crate) struct Applied {
    /// Chunks removed: their files were removed, or their text or context changed.
    pub removed_ids: Vec<i64>,
    /// Chunks kept whose lines moved: (id, start line, end line).
    pub moved: Vec<(i64, u32, u32)>,
    /// Chunks inserted.
    pub added_ids: Vec<i64>,
}

impl Store {
    /// Applies `changes` and removes the files `removals`, in one transaction: a search never
    /// sees a file half updated.
    ///
    /// A changed file's new chunks are matched with its stored ones by hash: a match keeps its
    /// row, its terms and its vector (only its line numbers are updated), so an edit costs
    /// the chunks it really changed.
    pub fn apply(&mut self, changes: &[FileChange], removals: &[String]) -> rusqlite::Result<Applied> {
        let tx = self.conn.transaction()?;
        let mut applied = Applied::default();
        for path in removals {
            for old in chunks_of(&tx, path, 1)? {
                delete_chunk(&tx, old.id)?;
                applied.removed_ids.push(old.id);
            }
            tx.prepare_cached("DELETE FROM files WHERE path = ?1")?
                .execute([path])?;
        }
        for change in changes {
            if let Some(chunks) = &change.chunks {
                replace_chunks(&tx, &change.path, change.from_line, chunks, &mut applied)?;
            }
            let record = change.record;
            tx.prepare_cached(
                "INSERT OR REPLACE INTO files (path, size, mtime_ns, content_hash, read_at_ns) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![
                change.path,
                i64::try_from(record.size).unwrap_or(i64::MAX),
                record.mtime_ns,
                to_sql_hash(record.content_hash),
                record.read_at_ns
            ])?;
        }
        tx.commit()?;
        Ok(applied)
    }

    /// Stores vectors of `model` by chunk hash.
    pub fn put_vectors(&mut self, model: &str, vectors: &[(u64, Vec<f32>)]) -> rusqlite::Result<()> {
        let tx = self.conn.transaction()?;
        {
            let mut insert =
                tx.prepare_cached("INSERT OR REPLACE INTO vectors (model_id, hash, vector) VALUES (?1, ?2, ?3)")?;
            for (hash, vector) in vectors {
                insert.execute(params![model, to_sql_hash(*hash), encode(vector)])?;
            }
        }
        tx.commit()
    }

    /// Deletes the vectors of chunks that are gone when they have come to outnumber the
    /// chunks: until then they are a cache for edits that are undone or text that comes back.
    /// Returns how many were deleted.
    pub fn drop_orphan_vectors(&mut self) -> rusqlite::Result<usize> {
        let (vectors, chunks): (i64, i64) = self.conn.query_row(
            "SELECT (SELECT count(*) FROM vectors), (SELECT count(*) FROM chunks)",
            [],
            |row| Ok((row.get(0)?, row.get(1)?)),
        )?;
        if vectors <= 2 * chunks + ORPHAN_VECTOR_SLACK {
            return Ok(0);
        }
        self.conn
            .execute("DELETE FROM vectors WHERE hash NOT IN (SELECT hash FROM chunks)", [])
    }
}

/// Vectors beyond twice the chunks kept before orphans are deleted, so a small index does not
/// churn its cache.
const ORPHAN_VECTOR_SLACK: i64 = 1000;

/// Brings the stored chunks of `path` from line `from_line` on to `chunks`.
fn replace_chunks(
    conn: &Connection,
    path: &str,
    from_line: u32,
    chunks: &[Chunk],
    applied: &mut Applied,
) -> rusqlite::Result<()> {
    // Stored chunks by hash, in line order: identical chunks (two `- done` items) are matched
    // first to first.
    let mut stored: HashMap<u64, VecDeque<StoredChunk>> = HashMap::new();
    for old in chunks_of(conn, path, from_line)? {
        stored.entry(old.hash).or_default().push_back(old);
    }
    let mut insert = conn.prepare_cached(
        "INSERT INTO chunks (path, start_line, end_line, hash, text, context, terms, terms_len)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?;
    let mut insert_terms = conn.prepare_cached("INSERT INTO chunks_fts (rowid, terms, context) VALUES (?1, ?2, ?3)")?;
    let mut relocate = conn.prepare_cached("UPDATE chunks SET start_line = ?2, end_line = ?3 WHERE id = ?1")?;
    for chunk in chunks {
        match stored.get_mut(&chunk.hash).and_then(VecDeque::pop_front) {
            Some(old) if (old.start_line, old.end_line) == (chunk.start_line, chunk.end_line) => {}
            Some(old) => {
                relocate.execute(params![old.id, chunk.start_line, chunk.end_line])?;
                applied.moved.push((old.id, chunk.start_line, chunk.end_line));
            }
            None => {
                let (document, count) = document_terms(&chunk.text, &chunk.context);
                insert.execute(params![
                    path,
                    chunk.start_line,
                    chunk.end_line,
                    to_sql_hash(chunk.hash),
                    chunk.text,
                    chunk.context,
                    document,
                    count
                ])?;
                let id = conn.last_insert_rowid();
                insert_terms.execute(params![id, document, terms(&chunk.context).join(" ")])?;
                applied.added_ids.push(id);
            }
        }
    }
    for old in stored.into_values().flatten() {
        delete_chunk(conn, old.id)?;
        applied.removed_ids.push(old.id);
    }
    Ok(())
}

/// The terms a chunk is indexed and scored by, joined by spaces, and how many there are: one
/// document of the chunk's words and its context (date, headings, lead), as in the reference
/// protocol; `chunks_fts` has the context alone again as a tie-break column. The context only
/// in its own column, weighed apart, ranked worse on LoCoMo (R@5 56.8 against 57.3) at any
/// weight from 0.25 to 3.
fn document_terms(text: &str, context: &str) -> (String, i64) {
    let all = terms(&format!("{text}\n{context}"));
    (all.join(" "), i64::try_from(all.len()).unwrap_or(i64::MAX))
}

/// Migrates an index of the version before `chunks.terms`: the columns and the vocabulary
/// table are added and every chunk's terms computed, in one transaction; its vectors stay.
pub(super) fn add_terms(conn: &Connection) -> rusqlite::Result<()> {
    conn.execute_batch(
        "BEGIN;
         ALTER TABLE chunks ADD COLUMN terms TEXT NOT NULL DEFAULT '';
         ALTER TABLE chunks ADD COLUMN terms_len INTEGER NOT NULL DEFAULT 0;
         CREATE VIRTUAL TABLE chunks_vocab USING fts5vocab(chunks_fts, 'row');",
    )?;
    let migrated = (|| {
        let chunks: Vec<(i64, String, String)> = conn
            .prepare("SELECT id, text, context FROM chunks")?
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?
            .collect::<rusqlite::Result<_>>()?;
        let mut update = conn.prepare("UPDATE chunks SET terms = ?2, terms_len = ?3 WHERE id = ?1")?;
        for (id, text, context) in chunks {
            let (document, count) = document_terms(&text, &context);
            update.execute(params![id, document, count])?;
        }
        conn.execute_batch(&format!("PRAGMA user_version = {}; COMMIT;", super::SCHEMA_VERSION))
    })();
    if migrated.is_err() {
        let _ = conn.execute_batch("ROLLBACK");
    }
    migrated
}

fn delete_chunk(conn: &Connection, id: i64) -> rusqlite::Result<()> {
    conn.prepare_cached("DELETE FROM chunks_fts WHERE rowid = ?1")?
        .execute([id])?;
    conn.prepare_cached("DELETE FROM chunks WHERE id = ?1")?.execute([id])?;
    Ok(())
}
