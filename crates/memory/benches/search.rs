//! What `memory.search` and the watcher's syncs cost on a big memory: a synthetic workspace of
//! 200 daily logs with 10,000 chunks (sessions with a date lead, list items of 10–30 words
//! drawn from a skewed vocabulary, with identifiers), generated deterministically.
//!
//! - `bm25`: full-text search (FTS5 BM25 over the analysed terms, then snippets);
//! - `hybrid`: BM25 and a brute-force cosine scan of 10,000 × 384-dimensional vectors, fused;
//!   the query is embedded by a cheap deterministic bag-of-words fake, so this measures the
//!   index, not a model;
//! - `sync_all_unchanged`: a sync that finds nothing changed (one `stat` per file against
//!   the stored size and mtime), what every watcher tick without a real change costs. Target:
//!   ≤ 100 ms.
//! - `append_to_long_log`: one line appended to a daily log of 10,000 list items, then that
//!   file synced (what `memory.append` costs the index): the file is read and hashed, and
//!   chunked and compared from its last block only. `edit_long_log_first_item` changes its
//!   first item instead (one chunk), which chunks and compares the whole file: what every
//!   append cost before.
//! - `local_model::hybrid` (feature `local-embeddings`): `memory.search`'s hybrid search end to
//!   end with all-MiniLM-L6-v2, the query embedded by the model on every call (what a query
//!   the daemon's embedding cache has not seen costs) over the same 10,000 chunks embedded by
//!   the model. Target: p50 ≤ 20 ms. `local_model::query_embedding` is that embedding alone.
//!   Needs the model (`scripts/fetch-embedding-model`, or `SATCHEL_EMBEDDING_MODEL` naming
//!   its directory); without it they say so and measure nothing.
//!
//! The fixtures (indexing and embedding the 10,000 chunks) are built once each, before the
//! first benchmark that needs them. Run: `cargo bench -p satchel-memory --bench search`, and
//! with the model `cargo bench -p satchel-memory --features local-embeddings --bench search`.

use std::fs::{self, File};
use std::path::Path;
use std::sync::{Arc, LazyLock};
use std::time::{Duration, SystemTime};

use divan::Bencher;
use satchel_memory::analyze::terms;
use satchel_memory::embed::{EmbedError, Embedder};
use satchel_memory::index::{IndexOptions, MemoryIndex, SearchMode, SearchOptions};
use xxhash_rust::xxh3::xxh3_64;

fn main() {
    divan::main();
}

const FILES: usize = 200;
const SESSIONS_PER_FILE: usize = 5;
/// Items per session; with the session's date lead, 10 chunks per session.
const ITEMS_PER_SESSION: usize = 9;
const CHUNKS: usize = FILES * SESSIONS_PER_FILE * (ITEMS_PER_SESSION + 1);
const DIMS: usize = 384;
const VOCABULARY: usize = 4000;

/// A common-word query, a rare-word query, an identifier and a longer question.
const QUERIES: [&str; 4] = [
    "kavo",
    "rebetuzi nimolaso",
    "handleRetryTimeout24",
    "when did we decide kavo lumi tesano for the release",
];

/// The synthetic workspace, written once; each fixture indexes it into its own file.
static WORKSPACE: LazyLock<tempfile::TempDir> = LazyLock::new(|| {
    let workspace = tempfile::tempdir().unwrap();
    write_workspace(workspace.path());
    workspace
});

/// The indexes of the cheap benchmarks, built once.
struct Fixture {
    bm25: MemoryIndex,
    hybrid: MemoryIndex,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| Fixture {
    bm25: index_workspace("bm25.sqlite", None),
    hybrid: index_workspace("hybrid.sqlite", Some(Arc::new(HashingEmbedder))),
});

/// The workspace indexed into `.satchel/{name}`, every chunk embedded by `embedder` if any.
fn index_workspace(name: &str, embedder: Option<Arc<dyn Embedder>>) -> MemoryIndex {
    let root = WORKSPACE.path();
    let file = root.join(".satchel").join(name);
    let (index, _) = MemoryIndex::open(root, &file, embedder, IndexOptions::default()).unwrap();
    let report = index.sync_all().unwrap();
    assert_eq!(report.chunks_added, CHUNKS);
    index
}

#[divan::bench(args = QUERIES)]
fn bm25(bencher: Bencher<'_, '_>, query: &str) {
    let index = &FIXTURE.bm25;
    let options = SearchOptions {
        mode: SearchMode::Bm25,
        ..SearchOptions::default()
    };
    bencher.bench(|| index.search(query, &options).unwrap());
}

#[divan::bench(args = QUERIES)]
fn hybrid(bencher: Bencher<'_, '_>, query: &str) {
    let index = &FIXTURE.hybrid;
    let options = SearchOptions {
        mode: SearchMode::Hybrid,
        ..SearchOptions::default()
    };
    bencher.bench(|| {
        let outcome = index.search(query, &options).unwrap();
        debug_assert!(outcome.warnings.is_empty());
        outcome
    });
}

#[divan::bench(sample_count = 20)]
fn sync_all_unchanged(bencher: Bencher<'_, '_>) {
    let index = &FIXTURE.bm25;
    bencher.bench(|| {
        let report = index.sync_all().unwrap();
        assert_eq!(report.files_indexed, 0);
    });
}

/// Items of the long daily log of the append benchmarks.
const LOG_ITEMS: usize = 10_000;

/// A workspace whose only memory file is a daily log of [`LOG_ITEMS`] items, indexed; the
/// workspace is kept alive with the index.
fn long_log() -> (tempfile::TempDir, MemoryIndex) {
    let workspace = tempfile::tempdir().unwrap();
    let memory = workspace.path().join("memory");
    fs::create_dir_all(&memory).unwrap();
    let log: String = (0..LOG_ITEMS)
        .map(|i| format!("- Item {i}: {}\n", sentence(i as u64, 12)))
        .collect();
    fs::write(memory.join("2026-11-27.md"), format!("# Log\n\n{log}")).unwrap();
    let file = workspace.path().join(".satchel/log.sqlite");
    let (index, _) = MemoryIndex::open(workspace.path(), &file, None, IndexOptions::default()).unwrap();
    index.sync_all().unwrap();
    (workspace, index)
}

#[divan::bench(sample_count = 30)]
fn append_to_long_log(bencher: Bencher<'_, '_>) {
    use std::io::Write as _;
    let (workspace, index) = long_log();
    let rel = Path::new("memory/2026-11-27.md");
    let mut round = 0u64;
    bencher.bench_local(|| {
        round += 1;
        let mut file = fs::OpenOptions::new()
            .append(true)
            .open(workspace.path().join(rel))
            .unwrap();
        writeln!(file, "- Appended {round}: {}", sentence(round, 12)).unwrap();
        let report = index.sync_paths(&[rel.to_owned()]).unwrap();
        assert_eq!(report.chunks_added, 1);
    });
}

#[divan::bench(sample_count = 30)]
fn edit_long_log_first_item(bencher: Bencher<'_, '_>) {
    let (workspace, index) = long_log();
    let rel = Path::new("memory/2026-11-27.md");
    let path = workspace.path().join(rel);
    let mut round = 0u64;
    bencher.bench_local(|| {
        round += 1;
        let text = fs::read_to_string(&path).unwrap();
        let (head, rest) = text.split_once("- Item 0").unwrap();
        let rest = rest.split_once(':').map_or(rest, |(_, after)| after);
        fs::write(&path, format!("{head}- Item 0 ({round}):{rest}")).unwrap();
        let report = index.sync_paths(&[rel.to_owned()]).unwrap();
        assert_eq!(report.chunks_added, 1);
    });
}

/// Hybrid search with the real local model: the acceptance's "query embedding included".
#[cfg(feature = "local-embeddings")]
mod local_model {
    use std::path::{Path, PathBuf};
    use std::time::Instant;

    use super::*;
    use satchel_memory::embed::LocalEmbedder;

    /// The model and the workspace indexed with it, or `None` (said once) without the model.
    struct ModelFixture {
        embedder: Arc<LocalEmbedder>,
        index: MemoryIndex,
    }

    static MODEL_FIXTURE: LazyLock<Option<ModelFixture>> = LazyLock::new(|| {
        let dir = std::env::var_os("SATCHEL_EMBEDDING_MODEL")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/models/all-MiniLM-L6-v2"));
        if !dir.join("model.safetensors").is_file() {
            eprintln!(
                "local_model: skipped, no embedding model in {}; run scripts/fetch-embedding-model",
                dir.display()
            );
            return None;
        }
        let embedder = Arc::new(LocalEmbedder::load(&dir).unwrap());
        // Embedding 10,000 chunks takes minutes on two cores. The index keeps each vector by
        // its chunk's hash, and the workspace is the same every run: an index file kept in
        // cargo's temporary directory spares the next run all but the first embedding.
        let file = Path::new(env!("CARGO_TARGET_TMPDIR")).join("search-local-model.sqlite");
        eprintln!(
            "local_model: indexing {CHUNKS} chunks with {} into {}",
            dir.display(),
            file.display()
        );
        let started = Instant::now();
        let embedder_handle: Arc<dyn Embedder> = embedder.clone();
        let (index, _) =
            MemoryIndex::open(WORKSPACE.path(), &file, Some(embedder_handle), IndexOptions::default()).unwrap();
        let report = index.sync_all().unwrap();
        let stats = index.stats();
        assert_eq!((stats.chunks, stats.vectors), (CHUNKS, CHUNKS), "{report:?}");
        eprintln!(
            "local_model: indexed in {:.1} s, {} chunks embedded",
            started.elapsed().as_secs_f64(),
            report.chunks_embedded
        );
        Some(ModelFixture { embedder, index })
    });

    #[divan::bench(args = QUERIES)]
    fn hybrid(bencher: Bencher<'_, '_>, query: &str) {
        let Some(fixture) = &*MODEL_FIXTURE else { return };
        let options = SearchOptions {
            mode: SearchMode::Hybrid,
            ..SearchOptions::default()
        };
        bencher.bench(|| {
            let outcome = fixture.index.search(query, &options).unwrap();
            // A failed query embedding would fall back to BM25 with a warning, timing the wrong thing.
            assert!(outcome.warnings.is_empty(), "{:?}", outcome.warnings);
            outcome
        });
    }

    #[divan::bench(args = QUERIES)]
    fn query_embedding(bencher: Bencher<'_, '_>, query: &str) {
        let Some(fixture) = &*MODEL_FIXTURE else { return };
        let texts = [query.to_owned()];
        bencher.bench(|| fixture.embedder.embed(&texts).unwrap());
    }
}

/// A bag-of-words embedder: each analysed term adds to one hashed dimension. Deterministic
/// and cheap (microseconds per text), with the shape of a real one: 384 dimensions, unit length.
struct HashingEmbedder;

impl Embedder for HashingEmbedder {
    fn model_id(&self) -> &str {
        "bench/hashing/384"
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        Ok(texts
            .iter()
            .map(|text| {
                let mut vector = vec![0.0f32; DIMS];
                for term in terms(text) {
                    vector[(xxh3_64(term.as_bytes()) % DIMS as u64) as usize] += 1.0;
                }
                // An empty text still gets a unit vector.
                vector[0] += 1e-3;
                let norm = vector.iter().map(|x| x * x).sum::<f32>().sqrt();
                vector.iter().map(|x| x / norm).collect()
            })
            .collect())
    }
}

/// A small deterministic generator (xorshift64*), so every run indexes the same workspace.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A vocabulary index skewed towards the first words, like word frequencies.
    fn skewed(&mut self, n: usize) -> usize {
        let x = (self.next() % 1_000_000) as f64 / 1_000_000.0;
        ((x * x * x) * n as f64) as usize
    }
}

/// Pseudo-words of two to four syllables: `kavo`, `rebetuzi`, ...
fn vocabulary() -> Vec<String> {
    const SYLLABLES: [&str; 20] = [
        "ka", "vo", "re", "be", "tu", "zi", "ni", "mo", "la", "so", "lu", "mi", "te", "sa", "no", "pe", "da", "ri",
        "go", "fu",
    ];
    let mut rng = Rng(0x5EED);
    (0..VOCABULARY)
        .map(|i| {
            let syllables = 2 + i % 3;
            (0..syllables).map(|_| SYLLABLES[rng.below(SYLLABLES.len())]).collect()
        })
        .collect()
}

/// `length` words of the synthetic vocabulary, drawn from `seed`.
fn sentence(seed: u64, length: usize) -> String {
    static WORDS: LazyLock<Vec<String>> = LazyLock::new(vocabulary);
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    (0..length)
        .map(|_| WORDS[rng.skewed(VOCABULARY)].as_str())
        .collect::<Vec<_>>()
        .join(" ")
}

fn write_workspace(root: &Path) {
    let words = vocabulary();
    let mut rng = Rng(0xC0FFEE);
    let memory = root.join("memory");
    fs::create_dir_all(&memory).unwrap();
    // Old enough that a sync trusts size and mtime without reading the files.
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    for file in 0..FILES {
        let (month, day) = (1 + file / 28, 1 + file % 28);
        let mut text = String::new();
        for session in 0..SESSIONS_PER_FILE {
            text.push_str(&format!(
                "## Session {session}\n\nDate: {}:{:02} pm on {day} {month} 2025\n\n",
                1 + session,
                rng.below(60)
            ));
            for _ in 0..ITEMS_PER_SESSION {
                let length = 10 + rng.below(21);
                let mut item: Vec<String> = (0..length).map(|_| words[rng.skewed(VOCABULARY)].clone()).collect();
                if rng.below(5) == 0 {
                    item.push(format!("handleRetryTimeout{}", rng.below(100)));
                }
                text.push_str(&format!("- {}\n", item.join(" ")));
            }
            text.push('\n');
        }
        let path = memory.join(format!("2025-{month:02}-{day:02}.md"));
        fs::write(&path, text).unwrap();
        File::options()
            .write(true)
            .open(&path)
            .unwrap()
            .set_modified(an_hour_ago)
            .unwrap();
    }
}
