//! Hybrid ranking: BM25 candidates and vector candidates merged into one list. Pure.
//!
//! Each side is put on a 0..1 scale first, differently, because the two scores mean different
//! things:
//!
//! - **BM25 is divided by the side's best score**, so the best lexical match is 1.0. A BM25
//!   score has no absolute scale (it grows with query length and term rarity), so only its
//!   ratio to the best one says anything.
//! - **Cosine similarity is kept as it is, clamped to 0..1**, not min-max normalised. It is
//!   already on an absolute scale: 0.3 is a weak match whatever else was found. Min-max would
//!   stretch the best of a set of poor matches to 1.0 and let it through any `min_score`, and
//!   would turn the worst candidate of a good set into 0.
//!
//! Then `score = w · vector + (1 − w) · bm25`, a side that did not find a chunk adding 0, so a
//! chunk both sides found ranks above one only either found with the same scores.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

/// Candidates one side may return at most, whatever `max_results` and the multiplier ask:
/// past this, fusion only sorts more of the tail.
pub const MAX_CANDIDATES: usize = 200;

/// Where a chunk is: its path and line range. Two candidates with the same key are one chunk.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChunkKey {
    /// Workspace-relative path, with `/`.
    pub path: String,
    /// First line, 1-based.
    pub start_line: u32,
    /// Last line, 1-based, inclusive.
    pub end_line: u32,
}

/// One side's candidate with its raw score (BM25: higher is better; vector: cosine).
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The chunk.
    pub key: ChunkKey,
    /// The side's own score.
    pub score: f64,
}

/// Which side found a hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HitSource {
    /// Found by BM25 only.
    Bm25,
    /// Found by vector similarity only.
    Vector,
    /// Found by both.
    Hybrid,
}

/// A fused hit.
#[derive(Debug, Clone, PartialEq)]
pub struct Fused {
    /// The chunk.
    pub key: ChunkKey,
    /// The final score, 0..1.
    pub score: f64,
    /// Which side found it.
    pub source: HitSource,
}

/// How to fuse.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FusionParams {
    /// Weight of the vector side, 0..1 (the BM25 side gets the rest). 1.0 ranks by vectors
    /// alone, 0.0 by BM25 alone.
    pub vector_weight: f64,
    /// Hits scoring below this are dropped.
    pub min_score: f64,
    /// Hits returned at most.
    pub max_results: usize,
}

/// How many candidates each side should return: `max_results × multiplier`, rounded up, at
/// least one and at most [`MAX_CANDIDATES`]. Asking each side for more than the final count
/// lets a chunk ranked modestly by both sides still meet in the union.
pub fn candidate_count(max_results: usize, multiplier: f64) -> usize {
    let wanted = (max_results as f64 * multiplier).ceil();
    // `as` saturates (and maps NaN to 0), which the clamp then bounds.
    (wanted as usize).clamp(1, MAX_CANDIDATES)
}

/// Fuses the raw candidates of both sides: normalise, union by key, weigh, sort by score
/// (ties by path, then first line), drop those under `min_score`, keep `max_results`.
pub fn fuse(bm25: &[Candidate], vector: &[Candidate], params: &FusionParams) -> Vec<Fused> {
    let weight = params.vector_weight.clamp(0.0, 1.0);
    // (bm25, vector) normalised scores per key.
    let mut sides: HashMap<&ChunkKey, (Option<f64>, Option<f64>)> = HashMap::new();
    for (candidate, score) in bm25.iter().zip(normalize_bm25(bm25)) {
        let entry = sides.entry(&candidate.key).or_default();
        entry.0 = Some(entry.0.map_or(score, |s: f64| s.max(score)));
    }
    for candidate in vector {
        let score = normalize_cosine(candidate.score);
        let entry = sides.entry(&candidate.key).or_default();
        entry.1 = Some(entry.1.map_or(score, |s: f64| s.max(score)));
    }
    let mut fused: Vec<Fused> = sides
        .into_iter()
        .map(|(key, (lexical, semantic))| Fused {
            key: key.clone(),
            score: weight * semantic.unwrap_or(0.0) + (1.0 - weight) * lexical.unwrap_or(0.0),
            source: match (lexical, semantic) {
                (Some(_), Some(_)) => HitSource::Hybrid,
                (None, Some(_)) => HitSource::Vector,
                _ => HitSource::Bm25,
            },
        })
        .filter(|hit| hit.score >= params.min_score)
        .collect();
    fused.sort_by(|a, b| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| a.key.path.cmp(&b.key.path))
            .then_with(|| a.key.start_line.cmp(&b.key.start_line))
            .then_with(|| a.key.end_line.cmp(&b.key.end_line))
    });
    fused.truncate(params.max_results);
    fused
}

/// BM25 scores divided by the best one (non-positive or non-finite scores count as 0).
fn normalize_bm25(candidates: &[Candidate]) -> Vec<f64> {
    let usable = |s: f64| if s.is_finite() && s > 0.0 { s } else { 0.0 };
    let best = candidates
        .iter()
        .map(|c| usable(c.score))
        .max_by(f64::total_cmp)
        .unwrap_or(0.0);
    candidates
        .iter()
        .map(|c| if best > 0.0 { usable(c.score) / best } else { 0.0 })
        .collect()
}

/// A cosine similarity on the 0..1 scale: negative similarity is no similarity.
fn normalize_cosine(score: f64) -> f64 {
    if score.is_nan() { 0.0 } else { score.clamp(0.0, 1.0) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(path: &str, start: u32) -> ChunkKey {
        ChunkKey {
            path: path.into(),
            start_line: start,
            end_line: start + 1,
        }
    }

    fn candidates(scores: &[(&str, u32, f64)]) -> Vec<Candidate> {
        scores
            .iter()
            .map(|&(path, start, score)| Candidate {
                key: key(path, start),
                score,
            })
            .collect()
    }

    const PARAMS: FusionParams = FusionParams {
        vector_weight: 0.7,
        min_score: 0.1,
        max_results: 5,
    };

    /// (path, start line, rounded score, source) of each hit.
    fn check(
        bm25: &[(&str, u32, f64)],
        vector: &[(&str, u32, f64)],
        params: &FusionParams,
    ) -> Vec<(String, u32, f64, HitSource)> {
        fuse(&candidates(bm25), &candidates(vector), params)
            .into_iter()
            .map(|hit| {
                (
                    hit.key.path,
                    hit.key.start_line,
                    (hit.score * 1000.0).round() / 1000.0,
                    hit.source,
                )
            })
            .collect()
    }

    /// The spec's example: query "handleWebSocketReconnect disconnection reconnect".
    #[test]
    fn the_spec_example() {
        let hits = check(
            &[("MEMORY.md", 10, 1.0), ("memory/2026-11-20.md", 3, 0.5)],
            &[
                ("MEMORY.md", 10, 0.85),
                ("memory/2026-11-21.md", 7, 0.78),
                ("memory/2026-11-20.md", 3, 0.40),
            ],
            &PARAMS,
        );
        assert_eq!(
            hits,
            [
                ("MEMORY.md".into(), 10, 0.895, HitSource::Hybrid),
                ("memory/2026-11-21.md".into(), 7, 0.546, HitSource::Vector),
                ("memory/2026-11-20.md".into(), 3, 0.43, HitSource::Hybrid),
            ]
        );
    }

    #[test]
    fn bm25_is_divided_by_its_best_score() {
        let hits = check(
            &[("a.md", 1, 12.0), ("b.md", 1, 6.0), ("c.md", 1, 0.6)],
            &[],
            &FusionParams {
                vector_weight: 0.0,
                ..PARAMS
            },
        );
        // c.md: 0.6 / 12 = 0.05, under min_score.
        assert_eq!(
            hits,
            [
                ("a.md".into(), 1, 1.0, HitSource::Bm25),
                ("b.md".into(), 1, 0.5, HitSource::Bm25),
            ]
        );
    }

    #[test]
    fn cosine_is_clamped_not_stretched() {
        let hits = check(
            &[],
            &[("a.md", 1, 0.3), ("b.md", 1, -0.2), ("c.md", 1, 1.2)],
            &FusionParams {
                vector_weight: 1.0,
                min_score: 0.0,
                ..PARAMS
            },
        );
        assert_eq!(
            hits,
            [
                ("c.md".into(), 1, 1.0, HitSource::Vector),
                ("a.md".into(), 1, 0.3, HitSource::Vector),
                ("b.md".into(), 1, 0.0, HitSource::Vector),
            ]
        );
    }

    #[test]
    fn ties_sort_by_path_then_line_and_results_are_truncated() {
        let hits = check(
            &[("b.md", 5, 1.0), ("a.md", 9, 1.0), ("a.md", 2, 1.0), ("c.md", 1, 1.0)],
            &[],
            &FusionParams {
                vector_weight: 0.0,
                max_results: 3,
                ..PARAMS
            },
        );
        let order: Vec<(&str, u32)> = hits.iter().map(|(p, l, _, _)| (p.as_str(), *l)).collect();
        assert_eq!(order, [("a.md", 2), ("a.md", 9), ("b.md", 5)]);
    }

    #[test]
    fn degenerate_scores_count_as_zero() {
        let hits = check(
            &[("a.md", 1, 0.0), ("b.md", 1, f64::NAN)],
            &[("c.md", 1, f64::NAN)],
            &FusionParams {
                min_score: 0.0,
                ..PARAMS
            },
        );
        assert!(hits.iter().all(|h| h.2 == 0.0), "{hits:?}");
        assert!(check(&[], &[], &PARAMS).is_empty());
    }

    #[test]
    fn candidate_count_is_bounded() {
        assert_eq!(candidate_count(5, 3.0), 15);
        assert_eq!(candidate_count(5, 1.5), 8);
        assert_eq!(candidate_count(0, 3.0), 1);
        assert_eq!(candidate_count(100, 3.0), MAX_CANDIDATES);
        assert_eq!(candidate_count(5, f64::NAN), 1);
        assert_eq!(candidate_count(5, -2.0), 1);
        assert_eq!(candidate_count(usize::MAX, f64::INFINITY), MAX_CANDIDATES);
    }
}
