//! [`CachedEmbedder`]: a bounded LRU of text → vector in front of any [`Embedder`].
//!
//! Re-indexing a file re-embeds only changed chunks already, so the cache earns its keep on
//! queries (the same search asked again) and on text that moves between files. It is keyed by a
//! 128-bit xxh3 hash of the text rather than the text itself, so its memory is bounded by the
//! entry count and the vector size, whatever the chunks' length.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, PoisonError};

use serde::Serialize;
use xxhash_rust::xxh3::xxh3_128;

use super::{EmbedError, Embedder};

/// Whether to cache and how much; the configuration keys `embedding_cache_enabled` and
/// `embedding_max_cache_size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EmbeddingCacheConfig {
    /// Off: every text goes to the backend (duplicates within one call still go once).
    pub enabled: bool,
    /// Vectors kept, at most; the least recently used goes first. 1024 dimensions × 2000
    /// entries is 8 MiB.
    pub max_entries: usize,
}

impl Default for EmbeddingCacheConfig {
    fn default() -> Self {
        Self {
            enabled: true,
            max_entries: 2000,
        }
    }
}

/// What the cache has done since it was made, for `inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// Whether vectors are kept between calls.
    pub enabled: bool,
    /// Vectors held now.
    pub entries: usize,
    /// Vectors held at most (0 when disabled).
    pub capacity: usize,
    /// Texts answered without the backend: from the cache, or a repeat within the same call.
    pub hits: u64,
    /// Texts sent to the backend.
    pub misses: u64,
    /// Backend calls that failed.
    pub failures: u64,
}

/// An [`Embedder`] that asks `E` only for texts it has not seen recently, in one call, in order.
pub struct CachedEmbedder<E> {
    inner: E,
    /// The LRU and the counters. Held only to look up and to store, never across the backend
    /// call: a slow endpoint must not stall other threads' cache hits.
    state: Mutex<CacheState>,
}

struct CacheState {
    /// `None` when the cache is disabled.
    lru: Option<Lru>,
    hits: u64,
    misses: u64,
    failures: u64,
}

impl<E: Embedder> CachedEmbedder<E> {
    /// `inner` behind a cache configured by `config` (a capacity of 0 disables it).
    pub fn new(inner: E, config: EmbeddingCacheConfig) -> Self {
        let lru = (config.enabled && config.max_entries > 0).then(|| Lru::new(config.max_entries));
        Self {
            inner,
            state: Mutex::new(CacheState {
                lru,
                hits: 0,
                misses: 0,
                failures: 0,
            }),
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> CacheStats {
        let state = self.lock();
        CacheStats {
            enabled: state.lru.is_some(),
            entries: state.lru.as_ref().map_or(0, |lru| lru.entries.len()),
            capacity: state.lru.as_ref().map_or(0, |lru| lru.capacity),
            hits: state.hits,
            misses: state.misses,
            failures: state.failures,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        // Nothing panics while the lock is held, and a half-updated counter would be harmless.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<E: Embedder> Embedder for CachedEmbedder<E> {
    fn model_id(&self) -> &str {
        self.inner.model_id()
    }

    fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        let mut vectors: Vec<Option<Vec<f32>>> = vec![None; texts.len()];
        // The texts the backend is asked for (each once), their keys, and for each text still
        // without a vector, which of those answers it gets.
        let mut miss_texts = Vec::new();
        let mut miss_keys = Vec::new();
        let mut miss_of_key = HashMap::new();
        let mut waiting = Vec::new();
        {
            let mut state = self.lock();
            for (position, text) in texts.iter().enumerate() {
                let key = xxh3_128(text.as_bytes());
                if let Some(vector) = state.lru.as_mut().and_then(|lru| lru.get(key)) {
                    vectors[position] = Some(vector);
                    continue;
                }
                let miss = *miss_of_key.entry(key).or_insert_with(|| {
                    miss_texts.push(text.clone());
                    miss_keys.push(key);
                    miss_texts.len() - 1
                });
                waiting.push((position, miss));
            }
            state.misses += miss_texts.len() as u64;
            state.hits += (texts.len() - miss_texts.len()) as u64;
        }
        if !miss_texts.is_empty() {
            let fresh = self.inner.embed(&miss_texts).and_then(|fresh| {
                if fresh.len() == miss_texts.len() {
                    Ok(fresh)
                } else {
                    Err(EmbedError::new(format!(
                        "{}: {} vectors for {} texts",
                        self.inner.model_id(),
                        fresh.len(),
                        miss_texts.len()
                    )))
                }
            });
            let mut state = self.lock();
            let fresh = match fresh {
                Ok(fresh) => fresh,
                Err(error) => {
                    state.failures += 1;
                    return Err(error);
                }
            };
            if let Some(lru) = state.lru.as_mut() {
                for (key, vector) in miss_keys.iter().zip(&fresh) {
                    lru.insert(*key, vector.clone());
                }
            }
            drop(state);
            for (position, miss) in waiting {
                vectors[position] = Some(fresh[miss].clone());
            }
        }
        // Each position was filled from the cache or from `fresh`.
        Ok(vectors.into_iter().flatten().collect())
    }
}

/// A least-recently-used map from text hash to vector: a hash map for lookup plus a tree of
/// use ticks for eviction order, both O(log n) at worst.
struct Lru {
    capacity: usize,
    /// Key → (vector, tick of its last use).
    entries: HashMap<u128, (Vec<f32>, u64)>,
    /// Tick of last use → key; the first entry is the least recently used.
    recency: BTreeMap<u64, u128>,
    /// Increases on every use; u64 cannot wrap in any realistic lifetime.
    tick: u64,
}

impl Lru {
    fn new(capacity: usize) -> Self {
        Self {
            capacity,
            entries: HashMap::new(),
            recency: BTreeMap::new(),
            tick: 0,
        }
    }

    /// The vector for `key`, marked as just used.
    fn get(&mut self, key: u128) -> Option<Vec<f32>> {
        let (vector, last_use) = self.entries.get_mut(&key)?;
        self.recency.remove(last_use);
        self.tick += 1;
        *last_use = self.tick;
        self.recency.insert(self.tick, key);
        Some(vector.clone())
    }

    /// Stores `vector` under `key`, evicting the least recently used entry when full.
    fn insert(&mut self, key: u128, vector: Vec<f32>) {
        self.tick += 1;
        if let Some((_, last_use)) = self.entries.insert(key, (vector, self.tick)) {
            // Two threads missed the same text at once: keep one entry, newest tick.
            self.recency.remove(&last_use);
        } else if self.entries.len() > self.capacity
            && let Some((_, oldest)) = self.recency.pop_first()
        {
            self.entries.remove(&oldest);
        }
        self.recency.insert(self.tick, key);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// Embeds a text as `[len, calls]`, counting calls and texts.
    #[derive(Default)]
    struct Counting {
        calls: AtomicUsize,
        texts: AtomicUsize,
        fail: bool,
    }

    impl Embedder for Counting {
        fn model_id(&self) -> &str {
            "test:counting:2"
        }

        fn embed(&self, texts: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
            if self.fail {
                return Err(EmbedError::new("down"));
            }
            let call = self.calls.fetch_add(1, Ordering::SeqCst) + 1;
            self.texts.fetch_add(texts.len(), Ordering::SeqCst);
            Ok(texts.iter().map(|t| vec![t.len() as f32, call as f32]).collect())
        }
    }

    fn strings(texts: &[&str]) -> Vec<String> {
        texts.iter().map(|t| (*t).to_owned()).collect()
    }

    #[test]
    fn only_misses_reach_the_backend_in_order() {
        let cache = CachedEmbedder::new(Counting::default(), EmbeddingCacheConfig::default());
        let first = cache.embed(&strings(&["a", "bb"])).unwrap();
        assert_eq!(first, vec![vec![1.0, 1.0], vec![2.0, 1.0]]);
        // "a" and "bb" come from the cache (call 1); "ccc" and the repeated "dddd" from call 2.
        let second = cache.embed(&strings(&["ccc", "a", "dddd", "bb", "dddd"])).unwrap();
        assert_eq!(
            second,
            vec![
                vec![3.0, 2.0],
                vec![1.0, 1.0],
                vec![4.0, 2.0],
                vec![2.0, 1.0],
                vec![4.0, 2.0]
            ]
        );
        assert_eq!(cache.inner.texts.load(Ordering::SeqCst), 4);
        let stats = cache.stats();
        assert_eq!((stats.hits, stats.misses, stats.failures, stats.entries), (3, 4, 0, 4));
        // All cached: no call at all.
        cache.embed(&strings(&["dddd", "a"])).unwrap();
        assert_eq!(cache.inner.calls.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn evicts_the_least_recently_used() {
        let cache = CachedEmbedder::new(
            Counting::default(),
            EmbeddingCacheConfig {
                enabled: true,
                max_entries: 2,
            },
        );
        cache.embed(&strings(&["a", "bb"])).unwrap();
        cache.embed(&strings(&["a"])).unwrap(); // "a" is now the most recent
        cache.embed(&strings(&["ccc"])).unwrap(); // evicts "bb"
        assert_eq!(cache.stats().entries, 2);
        let texts_before = cache.inner.texts.load(Ordering::SeqCst);
        cache.embed(&strings(&["a", "ccc"])).unwrap();
        assert_eq!(cache.inner.texts.load(Ordering::SeqCst), texts_before);
        cache.embed(&strings(&["bb"])).unwrap();
        assert_eq!(cache.inner.texts.load(Ordering::SeqCst), texts_before + 1);
    }

    #[test]
    fn disabled_passes_through_and_failures_count() {
        let cache = CachedEmbedder::new(
            Counting::default(),
            EmbeddingCacheConfig {
                enabled: false,
                max_entries: 10,
            },
        );
        cache.embed(&strings(&["a"])).unwrap();
        cache.embed(&strings(&["a"])).unwrap();
        let stats = cache.stats();
        assert_eq!(
            (stats.enabled, stats.hits, stats.misses, stats.capacity),
            (false, 0, 2, 0)
        );

        let failing = CachedEmbedder::new(
            Counting {
                fail: true,
                ..Counting::default()
            },
            EmbeddingCacheConfig::default(),
        );
        assert_eq!(failing.embed(&strings(&["a"])), Err(EmbedError::new("down")));
        assert!(failing.embed(&[]).unwrap().is_empty());
        let stats = failing.stats();
        assert_eq!((stats.failures, stats.misses, stats.entries), (1, 1, 0));
    }
}
