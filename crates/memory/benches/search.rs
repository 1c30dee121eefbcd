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
//!
//! The fixture (indexing and embedding the 10,000 chunks twice) is built once, before the
//! first benchmark. Run: `cargo bench -p satchel-memory --bench search`.

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

/// The workspace and its two indexes, built once.
struct Fixture {
    _workspace: tempfile::TempDir,
    bm25: MemoryIndex,
    hybrid: MemoryIndex,
}

static FIXTURE: LazyLock<Fixture> = LazyLock::new(|| {
    let workspace = tempfile::tempdir().unwrap();
    write_workspace(workspace.path());
    let open = |name: &str, embedder: Option<Arc<dyn Embedder>>| {
        let file = workspace.path().join(".satchel").join(name);
        let (index, _) = MemoryIndex::open(workspace.path(), &file, embedder, IndexOptions::default()).unwrap();
        let report = index.sync_all().unwrap();
        assert_eq!(report.chunks_added, CHUNKS);
        index
    };
    Fixture {
        bm25: open("bm25.sqlite", None),
        hybrid: open("hybrid.sqlite", Some(Arc::new(HashingEmbedder))),
        _workspace: workspace,
    }
});

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
