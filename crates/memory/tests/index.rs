//! The memory index end to end, on temporary workspaces: incremental syncs (asserted through
//! `SyncReport`), rebuilding from the files after the index is deleted or corrupted, search
//! modes and their errors, hybrid search with a fake embedder, the BM25 fallback when the
//! embedder fails, and searches running while a sync writes.

use std::collections::hash_map::DefaultHasher;
use std::fs;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use satchel_memory::MemoryError;
use satchel_memory::analyze::terms;
use satchel_memory::embed::{EmbedError, Embedder};
use satchel_memory::index::{
    HitSource, IndexOptions, MemoryIndex, SearchMode, SearchOptions, SearchOutcome, SyncReport,
};

const DIMS: usize = 384;

/// A bag-of-words embedder: each analysed term adds 1 to a hashed dimension, so texts sharing
/// words are similar, deterministically. It can be made to fail, and counts the texts it saw.
#[derive(Default)]
struct FakeEmbedder {
    failing: AtomicBool,
    texts_embedded: AtomicUsize,
}

impl FakeEmbedder {
    fn failing() -> Arc<FakeEmbedder> {
        let embedder = FakeEmbedder::default();
        embedder.failing.store(true, Ordering::SeqCst);
        Arc::new(embedder)
    }

    fn set_failing(&self, failing: bool) {
        self.failing.store(failing, Ordering::SeqCst);
    }

    fn texts_embedded(&self) -> usize {
        self.texts_embedded.load(Ordering::SeqCst)
    }
}

impl Embedder for FakeEmbedder {
    fn model_id(&self) -> &str {
        "fake/bag-of-words/384"
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        if self.failing.load(Ordering::SeqCst) {
            return Err(EmbedError::new("connection refused (fake endpoint down)"));
        }
        self.texts_embedded.fetch_add(texts.len(), Ordering::SeqCst);
        Ok(texts.iter().map(|text| bag_of_words(text)).collect())
    }
}

fn bag_of_words(text: &str) -> Vec<f32> {
    let mut vector = vec![0.0f32; DIMS];
    for term in terms(text) {
        let mut hasher = DefaultHasher::new();
        term.hash(&mut hasher);
        vector[(hasher.finish() % DIMS as u64) as usize] += 1.0;
    }
    let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
    vector.iter().map(|x| x / norm).collect()
}

/// A temporary workspace with its index file outside the memory files.
struct Workspace {
    dir: tempfile::TempDir,
}

impl Workspace {
    fn new() -> Workspace {
        let ws = Workspace {
            dir: tempfile::tempdir().unwrap(),
        };
        ws.write(
            "MEMORY.md",
            "# Memory\n\n## Preferences\n\n- The user prefers tabs over spaces.\n- Commit titles stay under 60 characters.\n\n\
             ## Projects\n\n- satchel: a JSON-RPC daemon that manages an agent's context window.\n",
        );
        ws.write(
            "memory/2026-11-20.md",
            "## Compaction of session `s1` at 2026-11-20T10:00:00Z\n\n### Lessons from failures\n\n\
             - `handleWebSocketReconnect` looped forever after ECONNREFUSED; fixed with a backoff.\n\
             - The flaky test was a race in the temp directory cleanup.\n",
        );
        ws.write(
            "memory/2026-11-21.md",
            "# conv-26 session 1\nDate: 1:56 pm on 8 May, 2023\n\n- Caroline: I went to a LGBTQ support group yesterday.\n\
             - Melanie: I painted a sunrise over the lake last week.\n",
        );
        ws
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }

    fn index_file(&self) -> PathBuf {
        self.root().join(".satchel/memory/index.sqlite")
    }

    fn write(&self, rel: &str, text: &str) {
        let path = self.root().join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    fn open_with(&self, embedder: Option<Arc<dyn Embedder>>, options: IndexOptions) -> (MemoryIndex, Vec<String>) {
        MemoryIndex::open(self.root(), &self.index_file(), embedder, options).unwrap()
    }

    fn open(&self, embedder: Option<Arc<dyn Embedder>>) -> MemoryIndex {
        let (index, warnings) = self.open_with(embedder, IndexOptions::default());
        assert!(warnings.is_empty(), "{warnings:?}");
        index
    }
}

fn search(index: &MemoryIndex, query: &str) -> SearchOutcome {
    index.search(query, &SearchOptions::default()).unwrap()
}

/// (path, start line, end line) of each hit.
fn locations(outcome: &SearchOutcome) -> Vec<(String, u32, u32)> {
    outcome
        .hits
        .iter()
        .map(|h| (h.path.clone(), h.start_line, h.end_line))
        .collect()
}

fn report(files_indexed: usize, files_removed: usize, added: usize, removed: usize, embedded: usize) -> SyncReport {
    SyncReport {
        files_indexed,
        files_removed,
        chunks_added: added,
        chunks_removed: removed,
        chunks_embedded: embedded,
        warnings: Vec::new(),
    }
}

#[test]
fn a_sync_indexes_the_memory_files_and_search_finds_them() {
    let ws = Workspace::new();
    ws.write("README.md", "tabs everywhere, but this is not memory\n");
    let index = ws.open(None);
    assert_eq!(index.sync_all().unwrap(), report(3, 0, 8, 0, 0));
    let outcome = search(&index, "does the user like tabs or spaces?");
    assert_eq!(outcome.mode, SearchMode::Bm25);
    assert_eq!(locations(&outcome)[0], ("MEMORY.md".into(), 5, 5));
    assert_eq!(outcome.hits[0].snippet, "- The user prefers tabs over spaces.");
    assert_eq!(outcome.hits[0].source, HitSource::Bm25);
    // Three of the query's four terms (not `like`): most of its weight, not all.
    let score = outcome.hits[0].score;
    assert!(score > 0.75 && score < 1.0, "{score}");
    assert!(outcome.hits.iter().all(|h| h.path != "README.md"));
    let stats = index.stats();
    assert_eq!((stats.files, stats.chunks, stats.vectors), (3, 8, 0));
    assert!(stats.index_bytes > 0 && stats.last_indexed_ms.is_some());
}

#[test]
fn identifiers_and_their_parts_are_searchable() {
    let ws = Workspace::new();
    let index = ws.open(None);
    index.sync_all().unwrap();
    let expected = ("memory/2026-11-20.md".to_owned(), 5, 5);
    for query in [
        "handleWebSocketReconnect",
        "ECONNREFUSED",
        "websocket reconnecting",
        "econnrefused",
    ] {
        assert_eq!(locations(&search(&index, query)).first(), Some(&expected), "{query}");
    }
}

#[test]
fn the_context_finds_a_session_by_its_date() {
    let ws = Workspace::new();
    let index = ws.open(None);
    index.sync_all().unwrap();
    let outcome = search(&index, "What did Melanie paint in May 2023?");
    assert_eq!(locations(&outcome)[0], ("memory/2026-11-21.md".into(), 5, 5));
    // The daily log's own date is context too.
    let outcome = search(&index, "20 November 2026 flaky test");
    assert_eq!(locations(&outcome)[0], ("memory/2026-11-20.md".into(), 6, 6));
}

#[test]
fn an_incremental_sync_touches_only_the_changed_chunks() {
    let ws = Workspace::new();
    let embedder = Arc::new(FakeEmbedder::default());
    let index = ws.open(Some(embedder.clone()));
    assert_eq!(index.sync_all().unwrap(), report(3, 0, 8, 0, 8));
    assert_eq!(index.sync_all().unwrap(), SyncReport::default(), "nothing changed");
    // One item edited, one added above the others (which move down but keep their hash).
    ws.write(
        "MEMORY.md",
        "# Memory\n\n## Preferences\n\n- Reviews happen on Fridays.\n- The user prefers tabs over spaces.\n\
         - Commit titles stay under 72 characters.\n\n## Projects\n\n- satchel: a JSON-RPC daemon that manages an agent's context window.\n",
    );
    assert_eq!(index.sync_all().unwrap(), report(1, 0, 2, 1, 2));
    assert_eq!(embedder.texts_embedded(), 10);
    let outcome = search(&index, "JSON-RPC daemon");
    assert_eq!(
        locations(&outcome)[0],
        ("MEMORY.md".into(), 11, 11),
        "moved chunks have their new lines"
    );
    assert_eq!(outcome.hits[0].source, HitSource::Hybrid);
    // The same size, written right after the sync (same mtime tick on a coarse clock).
    ws.write(
        "MEMORY.md",
        "# Memory\n\n## Preferences\n\n- Reviews happen on Mondays.\n- The user prefers tabs over spaces.\n\
         - Commit titles stay under 72 characters.\n\n## Projects\n\n- satchel: a JSON-RPC daemon that manages an agent's context window.\n",
    );
    assert_eq!(
        index.sync_paths(&[PathBuf::from("MEMORY.md")]).unwrap(),
        report(1, 0, 1, 1, 1)
    );
    assert_eq!(locations(&search(&index, "mondays"))[0], ("MEMORY.md".into(), 5, 5));
}

#[test]
fn vectors_are_reused_across_restarts_and_moves() {
    let ws = Workspace::new();
    let first = Arc::new(FakeEmbedder::default());
    ws.open(Some(first.clone())).sync_all().unwrap();
    assert_eq!(first.texts_embedded(), 8);
    let second = Arc::new(FakeEmbedder::default());
    let index = ws.open(Some(second.clone()));
    assert_eq!(index.stats().vectors, 8, "loaded at open");
    // Out of its dated section, a note has another context, so another hash and vector...
    ws.write(
        "memory/moved.md",
        "- The flaky test was a race in the temp directory cleanup.\n",
    );
    let sync = index.sync_all().unwrap();
    assert_eq!((sync.chunks_added, sync.chunks_embedded), (1, 1));
    // ...but the same text and context anywhere else reuses that vector.
    ws.write(
        "memory/copy.md",
        "- The flaky test was a race in the temp directory cleanup.\n",
    );
    assert_eq!(index.sync_all().unwrap(), report(1, 0, 1, 0, 0));
    assert_eq!(second.texts_embedded(), 1);
    assert_eq!(index.stats().chunks_without_vector, 0);
}

#[test]
fn a_deleted_index_is_rebuilt_with_the_same_results() {
    let ws = Workspace::new();
    let queries = ["tabs", "JSON-RPC daemon", "support group", "backoff reconnect"];
    let before: Vec<_> = {
        let index = ws.open(None);
        index.sync_all().unwrap();
        queries.iter().map(|q| search(&index, q).hits).collect()
    };
    fs::remove_file(ws.index_file()).unwrap();
    let index = ws.open(None);
    assert_eq!(index.sync_all().unwrap().files_indexed, 3);
    let after: Vec<_> = queries.iter().map(|q| search(&index, q).hits).collect();
    assert_eq!(before, after);
}

#[test]
fn a_corrupt_index_is_moved_aside_and_rebuilt() {
    let ws = Workspace::new();
    ws.open(None).sync_all().unwrap();
    fs::write(
        ws.index_file(),
        b"this is not a SQLite database, just garbage bytes \x00\xff\x13".repeat(100),
    )
    .unwrap();
    let (index, warnings) = ws.open_with(None, IndexOptions::default());
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].contains("corrupt") && warnings[0].contains(".corrupt"),
        "{warnings:?}"
    );
    let mut aside = ws.index_file().into_os_string();
    aside.push(".corrupt");
    assert!(Path::new(&aside).exists());
    assert_eq!(index.sync_all().unwrap().files_indexed, 3);
    assert_eq!(locations(&search(&index, "tabs"))[0], ("MEMORY.md".into(), 5, 5));
}

#[test]
fn a_truncated_index_is_corrupt_too() {
    let ws = Workspace::new();
    ws.open(None).sync_all().unwrap();
    let bytes = fs::read(ws.index_file()).unwrap();
    fs::write(ws.index_file(), &bytes[..bytes.len().min(2000)]).unwrap();
    let (index, warnings) = ws.open_with(None, IndexOptions::default());
    assert!(warnings.iter().any(|w| w.contains("corrupt")), "{warnings:?}");
    index.sync_all().unwrap();
    assert!(!search(&index, "tabs").hits.is_empty());
}

#[test]
fn the_index_file_is_private() {
    let ws = Workspace::new();
    let index = ws.open(None);
    index.sync_all().unwrap();
    for suffix in ["", "-wal"] {
        let mut path = ws.index_file().into_os_string();
        path.push(suffix);
        let mode = fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{path:?}");
    }
}

#[test]
fn a_cjk_query_finds_cjk_text() {
    let ws = Workspace::new();
    ws.write(
        "memory/2026-11-22.md",
        "# 项目记忆\n\n- 用户喜欢简洁的回答。\n- 记忆系统使用混合检索。\n- メモリ検索はハイブリッドです。\n",
    );
    let index = ws.open(None);
    index.sync_all().unwrap();
    assert_eq!(
        locations(&search(&index, "记忆系统"))[0],
        ("memory/2026-11-22.md".into(), 4, 4)
    );
    assert_eq!(
        locations(&search(&index, "简洁回答"))[0],
        ("memory/2026-11-22.md".into(), 3, 3)
    );
    assert_eq!(
        locations(&search(&index, "メモリ検索"))[0],
        ("memory/2026-11-22.md".into(), 5, 5)
    );
}

#[test]
fn a_deleted_file_vanishes_from_the_index() {
    let ws = Workspace::new();
    let index = ws.open(None);
    index.sync_all().unwrap();
    assert!(!search(&index, "support group").hits.is_empty());
    fs::remove_file(ws.root().join("memory/2026-11-21.md")).unwrap();
    let absolute = ws.root().join("memory/2026-11-21.md");
    assert_eq!(index.sync_paths(&[absolute]).unwrap(), report(0, 1, 0, 3, 0));
    assert!(search(&index, "support group").hits.is_empty());
    // A whole directory removed: sync_all notices too.
    fs::remove_dir_all(ws.root().join("memory")).unwrap();
    assert_eq!(index.sync_all().unwrap(), report(0, 1, 0, 2, 0));
    assert_eq!(index.stats().files, 1);
}

#[test]
fn sync_paths_takes_directories_and_ignores_other_files() {
    let ws = Workspace::new();
    let index = ws.open(None);
    ws.write("notes.txt", "tabs\n");
    assert_eq!(
        index
            .sync_paths(&[PathBuf::from("notes.txt"), PathBuf::from("gone.md")])
            .unwrap(),
        SyncReport::default()
    );
    assert_eq!(index.sync_paths(&[ws.root().join("memory")]).unwrap().files_indexed, 2);
    assert_eq!(
        index.sync_paths(&[PathBuf::from("./MEMORY.md")]).unwrap().files_indexed,
        1
    );
    fs::remove_dir_all(ws.root().join("memory")).unwrap();
    assert_eq!(index.sync_paths(&[PathBuf::from("memory")]).unwrap().files_removed, 2);
}

#[test]
fn extra_paths_are_indexed_under_their_names() {
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    let outside_file = outside.path().join("team.md");
    fs::write(&outside_file, "- The team deploys on Thursdays.\n").unwrap();
    ws.write("docs/notes/decisions.md", "- We chose SQLite for the memory index.\n");
    let options = IndexOptions {
        extra_paths: vec![PathBuf::from("docs/notes"), outside_file.clone()],
        ..IndexOptions::default()
    };
    let (index, _) = ws.open_with(None, options);
    assert_eq!(index.sync_all().unwrap().files_indexed, 5);
    assert_eq!(
        locations(&search(&index, "deploys"))[0].0,
        outside_file.to_string_lossy()
    );
    assert_eq!(locations(&search(&index, "sqlite"))[0].0, "docs/notes/decisions.md");
    let roots = index.watch_roots();
    assert_eq!(roots[..2], [ws.root().join("MEMORY.md"), ws.root().join("memory")]);
    assert_eq!(roots[2..], [ws.root().join("docs/notes"), outside_file]);
}

#[test]
fn hybrid_search_fuses_both_sides() {
    let ws = Workspace::new();
    let index = ws.open(Some(Arc::new(FakeEmbedder::default())));
    index.sync_all().unwrap();
    let outcome = search(&index, "handleWebSocketReconnect disconnection reconnect");
    assert_eq!(outcome.mode, SearchMode::Hybrid);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    assert_eq!(locations(&outcome)[0], ("memory/2026-11-20.md".into(), 5, 5));
    assert_eq!(outcome.hits[0].source, HitSource::Hybrid);
    assert!(outcome.hits[0].score > 0.3 && outcome.hits[0].score <= 1.0);
    let vector_only = index
        .search(
            "handleWebSocketReconnect",
            &SearchOptions {
                mode: SearchMode::Vector,
                ..SearchOptions::default()
            },
        )
        .unwrap();
    assert_eq!(vector_only.mode, SearchMode::Vector);
    assert!(vector_only.hits.iter().all(|h| h.source == HitSource::Vector));
    assert_eq!(locations(&vector_only)[0], ("memory/2026-11-20.md".into(), 5, 5));
}

#[test]
fn a_failing_embedder_falls_back_to_bm25_and_recovers() {
    let ws = Workspace::new();
    let embedder = FakeEmbedder::failing();
    let index = ws.open(Some(embedder.clone()));
    let sync = index.sync_all().unwrap();
    assert_eq!((sync.chunks_added, sync.chunks_embedded), (8, 0));
    assert!(sync.warnings[0].contains("connection refused"), "{:?}", sync.warnings);
    assert_eq!(index.stats().chunks_without_vector, 8);

    let outcome = search(&index, "tabs");
    assert_eq!(outcome.mode, SearchMode::Bm25);
    assert!(outcome.warnings[0].contains("BM25 only"), "{:?}", outcome.warnings);
    assert_eq!(locations(&outcome)[0], ("MEMORY.md".into(), 5, 5));
    let stats = index.stats();
    assert_eq!(stats.embedding_failures, 2);
    assert!(stats.last_embedding_error.unwrap().contains("connection refused"));

    // The backend is back: the next search uses it and embeds the waiting chunks.
    embedder.set_failing(false);
    let outcome = search(&index, "tabs");
    assert_eq!(outcome.mode, SearchMode::Hybrid);
    assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
    assert_eq!(outcome.hits[0].source, HitSource::Hybrid);
    assert_eq!(index.stats().chunks_without_vector, 0);
    assert_eq!(index.sync_all().unwrap(), SyncReport::default());
}

#[test]
fn modes_that_cannot_run_are_clear_errors() {
    let ws = Workspace::new();
    let no_fts = IndexOptions {
        fts_enabled: false,
        ..IndexOptions::default()
    };
    let (nothing, _) = ws.open_with(None, no_fts.clone());
    let error = nothing.search("tabs", &SearchOptions::default()).unwrap_err();
    assert!(matches!(error, MemoryError::ModeUnavailable(_)));
    assert_eq!(
        error.to_string(),
        "no search mode is enabled: set fts_enabled or configure an embedding backend"
    );
    let bm25 = SearchOptions {
        mode: SearchMode::Bm25,
        ..SearchOptions::default()
    };
    let error = nothing.search("tabs", &bm25).unwrap_err();
    assert_eq!(
        error.to_string(),
        "search mode `bm25` needs full-text search, and fts_enabled is false"
    );
    drop(nothing);

    let bm25_only = ws.open(None);
    for mode in [SearchMode::Vector, SearchMode::Hybrid] {
        let error = bm25_only
            .search(
                "tabs",
                &SearchOptions {
                    mode,
                    ..SearchOptions::default()
                },
            )
            .unwrap_err();
        let expected = format!(
            "search mode `{}` needs an embedding backend, and none is configured",
            mode.name()
        );
        assert_eq!(error.to_string(), expected);
    }
    drop(bm25_only);

    let (vectors_only, _) = ws.open_with(Some(Arc::new(FakeEmbedder::default())), no_fts);
    vectors_only.sync_all().unwrap();
    let outcome = search(&vectors_only, "tabs over spaces");
    assert_eq!(outcome.mode, SearchMode::Vector);
    assert_eq!(locations(&outcome)[0], ("MEMORY.md".into(), 5, 5));
}

#[test]
fn empty_and_stop_word_queries_find_nothing() {
    let ws = Workspace::new();
    let index = ws.open(None);
    index.sync_all().unwrap();
    assert!(search(&index, "  ").hits.is_empty());
    assert!(search(&index, "the of and").hits.is_empty());
    assert!(
        search(&index, "\"* OR NEAR(").hits.is_empty(),
        "FTS5 syntax is quoted away"
    );
}

#[test]
fn searches_run_while_a_sync_writes() {
    let ws = Workspace::new();
    let index = Arc::new(ws.open(Some(Arc::new(FakeEmbedder::default()))));
    index.sync_all().unwrap();
    let start = Arc::new(Barrier::new(3));
    let writer = {
        let (index, start, root) = (index.clone(), start.clone(), ws.root().to_owned());
        std::thread::spawn(move || {
            start.wait();
            let mut log = String::new();
            for round in 0..40 {
                log.push_str(&format!("- round {round}: the backoff fix held under load.\n"));
                fs::write(root.join("memory/2026-11-23.md"), &log).unwrap();
                index.sync_paths(&[PathBuf::from("memory/2026-11-23.md")]).unwrap();
            }
        })
    };
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (index, start) = (index.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                for _ in 0..100 {
                    let outcome = search(&index, "tabs");
                    assert_eq!(locations(&outcome)[0], ("MEMORY.md".into(), 5, 5));
                    search(&index, "backoff fix");
                }
            })
        })
        .collect();
    writer.join().unwrap();
    for reader in readers {
        reader.join().unwrap();
    }
    let outcome = search(&index, "round 39");
    assert_eq!(locations(&outcome)[0], ("memory/2026-11-23.md".into(), 40, 40));
}

#[test]
fn an_index_of_another_schema_version_is_rebuilt_quietly() {
    let ws = Workspace::new();
    ws.open(None).sync_all().unwrap();
    let conn = rusqlite::Connection::open(ws.index_file()).unwrap();
    conn.pragma_update(None, "user_version", 99).unwrap();
    drop(conn);
    let index = ws.open(None);
    assert_eq!(index.stats().files, 0, "rebuilt empty");
    assert_eq!(index.sync_all().unwrap().files_indexed, 3);
}

#[test]
fn an_index_of_the_version_before_chunk_terms_is_migrated_and_keeps_its_vectors() {
    let ws = Workspace::new();
    let embedder = Arc::new(FakeEmbedder::default());
    let index = ws.open(Some(embedder.clone()));
    index.sync_all().unwrap();
    let scores = |index: &MemoryIndex| -> Vec<(String, u32, f64)> {
        let options = SearchOptions {
            mode: SearchMode::Bm25,
            ..SearchOptions::default()
        };
        let outcome = index.search("user prefers tabs", &options).unwrap();
        outcome
            .hits
            .iter()
            .map(|h| (h.path.clone(), h.start_line, h.score))
            .collect()
    };
    let before = scores(&index);
    drop(index);
    // The schema of version 2: no terms in `chunks`, no vocabulary table.
    let conn = rusqlite::Connection::open(ws.index_file()).unwrap();
    conn.execute_batch(
        "ALTER TABLE chunks DROP COLUMN terms; ALTER TABLE chunks DROP COLUMN terms_len;
         DROP TABLE chunks_vocab; PRAGMA user_version = 2;",
    )
    .unwrap();
    drop(conn);
    let embedded = embedder.texts_embedded();
    let (index, warnings) = ws.open_with(Some(embedder.clone()), IndexOptions::default());
    assert!(warnings.is_empty(), "{warnings:?}");
    assert_eq!(index.sync_all().unwrap().chunks_embedded, 0);
    assert_eq!(embedder.texts_embedded(), embedded, "no chunk embedded again");
    assert_eq!(scores(&index), before);
    assert!(!before.is_empty());
}

/// The keyword score's IDF reads FTS5's vocabulary: it must follow deletions in the
/// contentless table, or a removed file would keep weighing down its terms.
#[test]
fn the_term_counts_follow_edits_and_deletions() {
    let ws = Workspace::new();
    let index = ws.open(None);
    index.sync_all().unwrap();
    let chunks_with = |word: &str| -> i64 {
        let term = satchel_memory::analyze::terms(word).remove(0);
        let conn = rusqlite::Connection::open(ws.index_file()).unwrap();
        conn.query_row(
            "SELECT coalesce(sum(doc), 0) FROM chunks_vocab WHERE term = ?1",
            [&term],
            |r| r.get(0),
        )
        .unwrap()
    };
    assert_eq!(chunks_with("caroline"), 1);
    ws.write("memory/2026-11-22.md", "- Caroline moved.\n- Caroline painted.\n");
    index.sync_all().unwrap();
    assert_eq!(chunks_with("caroline"), 3);
    std::fs::remove_file(ws.root().join("memory/2026-11-21.md")).unwrap();
    ws.write("memory/2026-11-22.md", "- Caroline moved.\n");
    index.sync_all().unwrap();
    assert_eq!(chunks_with("caroline"), 1);
}

/// Issue 27 item 7: symbolic links in `memory/` lead nowhere out of the workspace, cycles end,
/// and a file reachable by several names is indexed once, by its own.
#[test]
fn symbolic_links_stay_in_the_workspace_and_cycles_index_each_file_once() {
    use std::os::unix::fs::symlink;
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.md"), "- The outside password is hunter2.\n").unwrap();
    let memory = ws.root().join("memory");
    symlink(outside.path(), memory.join("out")).unwrap();
    symlink(outside.path().join("secret.md"), memory.join("secret.md")).unwrap();
    symlink(".", memory.join("loop")).unwrap();
    symlink("..", memory.join("up")).unwrap();
    std::fs::create_dir(ws.root().join("notes")).unwrap();
    ws.write("notes/inside.md", "- The inside note mentions quokkas.\n");
    symlink("../notes", memory.join("notes")).unwrap();
    ws.write("README.md", "- The project readme mentions wombats.\n");
    let index = ws.open(None);
    let report = index.sync_all().unwrap();
    assert!(
        report
            .warnings
            .iter()
            .filter(|w| w.contains("out of the workspace"))
            .count()
            == 2,
        "{:?}",
        report.warnings
    );
    let bm25 = |query: &str| {
        let options = SearchOptions {
            mode: SearchMode::Bm25,
            min_score: 0.0,
            max_results: 50,
        };
        locations(&index.search(query, &options).unwrap())
    };
    assert!(bm25("hunter2 password").is_empty());
    // `up -> ..` is a cycle, not a way to the rest of the workspace.
    assert!(bm25("wombats").is_empty());
    // MEMORY.md, the two daily logs and the linked note: each once, by its own name where it
    // has one.
    assert_eq!(
        index.stats().files,
        4,
        "{:?}",
        bm25("user caroline handleWebSocketReconnect quokkas")
    );
    assert_eq!(bm25("Caroline LGBTQ"), [("memory/2026-11-21.md".into(), 4, 4)]);
    assert_eq!(bm25("quokkas"), [("memory/notes/inside.md".into(), 1, 1)]);

    // The same through sync_paths (the watcher's way): a path through a link out is ignored,
    // and one through a cycle is not a second name.
    std::fs::write(
        outside.path().join("later.md"),
        "- Another outside secret: swordfish.\n",
    )
    .unwrap();
    index
        .sync_paths(&[
            memory.join("out/later.md"),
            memory.join("loop/loop/2026-11-21.md"),
            memory.join("up/MEMORY.md"),
        ])
        .unwrap();
    assert!(bm25("swordfish").is_empty());
    assert_eq!(bm25("Caroline LGBTQ").len(), 1);
    assert_eq!(index.stats().files, 4);
}

/// A symbolic `MEMORY.md` follows the same rule.
#[test]
fn a_symlinked_memory_md_is_indexed_only_inside_the_workspace() {
    use std::os::unix::fs::symlink;
    let ws = Workspace::new();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("MEMORY.md"), "- The outside vault code is 4242.\n").unwrap();
    std::fs::remove_file(ws.root().join("MEMORY.md")).unwrap();
    symlink(outside.path().join("MEMORY.md"), ws.root().join("MEMORY.md")).unwrap();
    let index = ws.open(None);
    index.sync_all().unwrap();
    index.sync_paths(&[PathBuf::from("MEMORY.md")]).unwrap();
    assert!(search(&index, "vault code").hits.is_empty());

    std::fs::remove_file(ws.root().join("MEMORY.md")).unwrap();
    ws.write("memory/main.md", "- The inside vault code is 1717.\n");
    symlink("memory/main.md", ws.root().join("MEMORY.md")).unwrap();
    index.sync_all().unwrap();
    assert_eq!(
        locations(&search(&index, "vault code")),
        [("memory/main.md".into(), 1, 1)]
    );
}

/// Issue 27 item 26: an append is chunked from the file's last block and only the chunks from
/// there are compared and stored, not the whole file again; the result is the index a full
/// chunking makes.
#[test]
fn an_append_is_chunked_from_the_files_last_block_only() {
    use std::io::Write as _;
    let ws = Workspace::new();
    let log: String = (0..2000).map(|i| format!("- Note {i} about topic{i}.\n")).collect();
    ws.write("memory/2026-11-25.md", &format!("# Log\n\n{log}"));
    let index = ws.open(None);
    index.sync_all().unwrap();
    let append = |text: &str| {
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .open(ws.root().join("memory/2026-11-25.md"))
            .unwrap();
        file.write_all(text.as_bytes()).unwrap();
        let before = index.stats().lines_chunked;
        let report = index.sync_paths(&[PathBuf::from("memory/2026-11-25.md")]).unwrap();
        (report, index.stats().lines_chunked - before)
    };
    let (report, lines) = append("- The appended note names zyxwort.\n");
    assert_eq!((report.chunks_added, report.chunks_removed), (1, 0), "{report:?}");
    assert!(lines <= 2, "the last block and the new line, not 2,002 lines: {lines}");
    assert_eq!(
        locations(&search(&index, "zyxwort")),
        [("memory/2026-11-25.md".into(), 2003, 2003)]
    );
    // Text that continues the last block (a lazy continuation line) and a new section.
    let (report, lines) =
        append("  continued with quillbeck.\n\n## Later\n\nLead of the later part.\n\n- A later note.\n");
    assert_eq!((report.chunks_added, report.chunks_removed), (3, 1), "{report:?}");
    assert!(lines <= 8, "{lines}");

    // The same files indexed from scratch give the same chunks.
    let fresh_file = ws.root().join("index/fresh.sqlite");
    let (fresh, _) = MemoryIndex::open(ws.root(), &fresh_file, None, IndexOptions::default()).unwrap();
    fresh.sync_all().unwrap();
    assert_eq!(fresh.stats().chunks, index.stats().chunks);
    for query in ["zyxwort quillbeck", "later note", "topic1999", "lead later part"] {
        let options = SearchOptions {
            max_results: 20,
            min_score: 0.0,
            mode: SearchMode::Bm25,
        };
        let mine = index.search(query, &options).unwrap();
        let theirs = fresh.search(query, &options).unwrap();
        assert_eq!(mine.hits, theirs.hits, "{query}");
    }
}
