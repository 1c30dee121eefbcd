//! Files → index: which files changed, their new chunks, the removed files, and vectors for
//! the chunks that lack one.
//!
//! A sync is cheap when nothing changed: one `stat` per memory file, compared with the stored
//! size and mtime, and no write. A file whose size or mtime differs is read and hashed; only
//! when its content changed is it chunked, and then only chunks whose hash is new are
//! inserted, analysed and embedded (see `Store::apply`).

use std::collections::{HashMap, HashSet};
use std::fs;
use std::io;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{PoisonError, TryLockError};
use std::time::UNIX_EPOCH;

use xxhash_rust::xxh3::xxh3_64;

use super::paths::Target;
use super::tails::Tails;
use super::walk;
use super::{MemoryIndex, SyncReport, lock, now_ns};
use crate::MemoryError;
use crate::store::{Applied, FileChange, FileRecord, Store, Which};

/// Chunks sent to the embedding backend per call: one HTTP request of a reasonable size.
const EMBED_BATCH: usize = 64;

/// Embedding input is cut to this many characters. A long code block is a single chunk, and
/// past a model's window (512 tokens for MiniLM) the backend ignores the rest or rejects the
/// request.
const MAX_EMBED_CHARS: usize = 4000;

/// A stored size and mtime are trusted only for files last modified this long before they
/// were read. A file written again within the same mtime tick (coarse on some file systems,
/// 2 s on FAT) and to the same size would otherwise look unchanged; such a racy file is
/// re-read (and re-hashed) until it is older than this.
const MTIME_SLACK_NS: i64 = 2_000_000_000;

impl MemoryIndex {
    /// Walks `MEMORY.md`, `memory/**/*.md` and the extra paths and brings the index up to date:
    /// new and changed files re-chunked (only chunks whose hash changed are inserted and
    /// embedded), deleted files removed, and chunks still lacking a vector embedded.
    pub fn sync_all(&self) -> Result<SyncReport, MemoryError> {
        let mut report = SyncReport::default();
        let targets = walk::discover(&self.roots, &mut report.warnings);
        let mut store = lock(&self.writer);
        let known = store.files()?;
        let present: HashSet<&str> = targets.iter().map(|t| t.rel.as_str()).collect();
        let removals = known
            .keys()
            .filter(|rel| !present.contains(rel.as_str()))
            .cloned()
            .collect();
        let changed = self.reconcile(&mut store, &targets, removals, &known, &mut report)?;
        if changed {
            store.drop_orphan_vectors()?;
        }
        Ok(report)
    }

    /// The same for just these paths (absolute or workspace-relative): a file is indexed if it
    /// is a memory file, a directory stands for the memory files under it, and a path that no
    /// longer exists is removed from the index (with everything under it). Used by the watcher
    /// and after `memory.write`; paths that are not memory files are ignored.
    pub fn sync_paths(&self, paths: &[PathBuf]) -> Result<SyncReport, MemoryError> {
        let mut report = SyncReport::default();
        let mut store = lock(&self.writer);
        let known = store.files()?;
        let mut discovered: Option<Vec<Target>> = None;
        let mut targets: Vec<Target> = Vec::new();
        let mut removals: Vec<String> = Vec::new();
        for path in paths {
            let abs = self.roots.absolute(path);
            let under = |rel: &String| {
                let at = self.roots.resolve(rel);
                at == abs || at.starts_with(&abs)
            };
            if abs.is_dir() {
                let all = discovered.get_or_insert_with(|| walk::discover(&self.roots, &mut report.warnings));
                let inside: Vec<&Target> = all.iter().filter(|t| t.abs.starts_with(&abs)).collect();
                targets.extend(inside.iter().map(|t| (*t).clone()));
                let present: HashSet<&str> = inside.iter().map(|t| t.rel.as_str()).collect();
                removals.extend(
                    known
                        .keys()
                        .filter(|rel| under(rel) && !present.contains(rel.as_str()))
                        .cloned(),
                );
            } else if abs.exists() {
                // A file reached through a symbolic link is one only if the walk finds it by
                // this name: not out of the workspace, not a second name of another file.
                let reached = self.roots.is_plain(&abs)
                    || discovered
                        .get_or_insert_with(|| walk::discover(&self.roots, &mut report.warnings))
                        .iter()
                        .any(|t| t.abs == abs);
                if self.roots.is_memory_file(&abs) && reached {
                    targets.push(Target {
                        rel: self.roots.rel(&abs),
                        abs,
                    });
                }
            } else {
                removals.extend(known.keys().filter(|rel| under(rel)).cloned());
            }
        }
        targets.sort_by(|a, b| a.rel.cmp(&b.rel));
        targets.dedup_by(|a, b| a.rel == b.rel);
        removals.sort();
        removals.dedup();
        self.reconcile(&mut store, &targets, removals, &known, &mut report)?;
        Ok(report)
    }

    /// Reads the `targets` that changed, applies them and the `removals` (known paths), and
    /// embeds what lacks a vector. Returns whether the index changed.
    fn reconcile(
        &self,
        store: &mut Store,
        targets: &[Target],
        mut removals: Vec<String>,
        known: &HashMap<String, FileRecord>,
        report: &mut SyncReport,
    ) -> Result<bool, MemoryError> {
        let now = now_ns();
        let mut changes = Vec::new();
        for target in targets {
            match read_change(target, known.get(&target.rel), now, &self.tails) {
                Ok(Some(change)) => {
                    report.files_indexed += usize::from(change.chunks.is_some());
                    changes.push(change);
                }
                Ok(None) => {}
                // Deleted since it was listed: the next sync would remove it anyway.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    if known.contains_key(&target.rel) {
                        removals.push(target.rel.clone());
                    }
                }
                Err(e) => report.warnings.push(format!(
                    "memory file {}: {e}; its index entries are kept as they were",
                    target.rel
                )),
            }
        }
        let changed = !changes.is_empty() || !removals.is_empty();
        if changed {
            let applied = store.apply(&changes, &removals)?;
            report.files_removed += removals.len();
            report.chunks_added += applied.added_ids.len();
            report.chunks_removed += applied.removed_ids.len();
            self.apply_to_vectors(store, &applied)?;
            let counts = store.counts()?;
            self.files.store(counts.files, Ordering::Relaxed);
            self.chunks.store(counts.chunks, Ordering::Relaxed);
            self.terms.store(counts.terms, Ordering::Relaxed);
        }
        let (embedded, warning) = self.embed_pending(store, usize::MAX)?;
        report.chunks_embedded += embedded;
        report.warnings.extend(warning);
        let now_ms = u64::try_from(now / 1_000_000).unwrap_or(0);
        self.last_indexed_ms.store(now_ms, Ordering::Relaxed);
        Ok(changed)
    }

    /// Brings the vector matrix in line with what `apply` did: removed chunks leave it, moved
    /// ones get their new lines, and new chunks whose hash already has a vector join it.
    fn apply_to_vectors(&self, store: &Store, applied: &Applied) -> Result<(), MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(());
        };
        let cached = store.vectors(embedder.model_id(), Which::Ids(&applied.added_ids))?;
        let mut matrix = self.vectors.write().unwrap_or_else(PoisonError::into_inner);
        for id in &applied.removed_ids {
            matrix.remove(*id);
        }
        for &(id, start, end) in &applied.moved {
            matrix.relocate(id, start, end);
        }
        for row in cached {
            matrix.insert(row);
        }
        Ok(())
    }

    /// Embeds chunks that have no vector of the current model, up to `max_batches` calls of
    /// [`EMBED_BATCH`]. Stops at the first failure, which is counted and returned as a warning:
    /// a backend that is down would fail every batch the same way, and the chunks stay pending
    /// for the next sync or search. Returns how many chunks were embedded.
    pub(super) fn embed_pending(
        &self,
        store: &mut Store,
        max_batches: usize,
    ) -> Result<(usize, Option<String>), MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok((0, None));
        };
        let model = embedder.model_id();
        let mut embedded = 0;
        for _ in 0..max_batches {
            if self.chunks_without_vector() == 0 {
                break;
            }
            let pending = store.pending_vectors(model, EMBED_BATCH)?;
            if pending.is_empty() {
                break;
            }
            let texts: Vec<String> = pending.iter().map(|p| embedding_input(&p.text, &p.context)).collect();
            let dims = self.vectors.read().unwrap_or_else(PoisonError::into_inner).dims();
            let vectors = match embedder
                .embed(&texts)
                .map_err(|e| e.to_string())
                .and_then(|v| checked(v, &texts, dims))
            {
                Ok(vectors) => vectors,
                Err(message) => {
                    self.embedding_failed(&message);
                    let waiting = self.chunks_without_vector();
                    return Ok((
                        embedded,
                        Some(format!(
                            "embedding failed ({message}); {waiting} chunks are indexed for BM25 only until a later sync or search embeds them"
                        )),
                    ));
                }
            };
            let hashes: Vec<u64> = pending.iter().map(|p| p.hash).collect();
            let pairs: Vec<(u64, Vec<f32>)> = hashes.iter().copied().zip(vectors).collect();
            store.put_vectors(model, &pairs)?;
            let rows = store.vectors(model, Which::Hashes(&hashes))?;
            let mut matrix = self.vectors.write().unwrap_or_else(PoisonError::into_inner);
            for row in rows {
                matrix.insert(row);
            }
            embedded += pending.len();
        }
        Ok((embedded, None))
    }

    /// At search time: embeds one batch of waiting chunks if no sync holds the writer (a sync
    /// would embed them itself). Returns a warning when the embedding failed.
    pub(super) fn embed_some_pending(&self) -> Result<Option<String>, MemoryError> {
        if self.chunks_without_vector() == 0 {
            return Ok(None);
        }
        let mut store = match self.writer.try_lock() {
            Ok(store) => store,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return Ok(None),
        };
        Ok(self.embed_pending(&mut store, 1)?.1)
    }
}

/// What the index embeds for a chunk: its context, then its text, cut to [`MAX_EMBED_CHARS`].
fn embedding_input(text: &str, context: &str) -> String {
    let full = if context.is_empty() {
        text.to_owned()
    } else {
        format!("{context}\n\n{text}")
    };
    match full.char_indices().nth(MAX_EMBED_CHARS) {
        Some((cut, _)) => full[..cut].to_owned(),
        None => full,
    }
}

/// The backend's vectors, if there is one per text, all of one non-zero size (that of the
/// vectors already held, when there are some).
fn checked(vectors: Vec<Vec<f32>>, texts: &[String], dims: usize) -> Result<Vec<Vec<f32>>, String> {
    if vectors.len() != texts.len() {
        return Err(format!(
            "the backend returned {} vectors for {} texts",
            vectors.len(),
            texts.len()
        ));
    }
    let expected = if dims > 0 {
        dims
    } else {
        vectors.first().map_or(0, Vec::len)
    };
    match vectors.iter().find(|v| v.len() != expected || v.is_empty()) {
        Some(bad) => Err(format!(
            "the backend returned a vector of {} dimensions, expected {expected}",
            bad.len()
        )),
        None => Ok(vectors),
    }
}

/// The change to apply for `target`, or `None` when it is unchanged. A file whose size and
/// mtime match its record is not read (unless the record is racy, see [`MTIME_SLACK_NS`]); a
/// file read with the same content only has its record refreshed, and only if that makes
/// the record trustworthy or its size or mtime changed. A file that only grew is chunked from
/// its last block (`tails`).
fn read_change(
    target: &Target,
    record: Option<&FileRecord>,
    now: i64,
    tails: &Tails,
) -> io::Result<Option<FileChange>> {
    let meta = fs::metadata(&target.abs)?;
    let mtime_ns = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
    let same_stat = record.is_some_and(|r| r.size == meta.len() && r.mtime_ns == mtime_ns);
    if same_stat && record.is_some_and(|r| r.mtime_ns < r.read_at_ns - MTIME_SLACK_NS) {
        return Ok(None);
    }
    let bytes = fs::read(&target.abs)?;
    let new_record = FileRecord {
        size: bytes.len() as u64,
        mtime_ns,
        content_hash: xxh3_64(&bytes),
        read_at_ns: now,
    };
    if record.is_some_and(|r| r.content_hash == new_record.content_hash) {
        let trusted_now = mtime_ns < now - MTIME_SLACK_NS;
        return Ok((!same_stat || trusted_now).then(|| FileChange {
            path: target.rel.clone(),
            record: new_record,
            chunks: None,
            from_line: 1,
        }));
    }
    let chunked = tails.chunk(&target.rel, record, &bytes, new_record.content_hash);
    Ok(Some(FileChange {
        path: target.rel.clone(),
        record: new_record,
        chunks: Some(chunked.chunks),
        from_line: chunked.from_line,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedding_input_puts_the_context_first_and_is_bounded() {
        assert_eq!(embedding_input("text", ""), "text");
        assert_eq!(
            embedding_input("text", "2026-01-01\nTitle"),
            "2026-01-01\nTitle\n\ntext"
        );
        let long = "é".repeat(MAX_EMBED_CHARS + 5);
        assert_eq!(embedding_input(&long, "").chars().count(), MAX_EMBED_CHARS);
    }

    #[test]
    fn backend_vectors_are_checked() {
        let texts = vec!["a".to_owned(), "b".to_owned()];
        assert!(checked(vec![vec![1.0; 3]; 2], &texts, 0).is_ok());
        assert!(checked(vec![vec![1.0; 3]; 2], &texts, 4).is_err());
        assert!(checked(vec![vec![1.0; 3]], &texts, 0).is_err());
        assert!(checked(vec![vec![1.0; 3], vec![1.0; 2]], &texts, 0).is_err());
        assert!(checked(vec![vec![]; 2], &texts, 0).is_err());
    }
}
