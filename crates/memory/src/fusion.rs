//! Hybrid ranking: BM25 candidates and vector candidates merged into one list. Pure.
//!
//! Each side is on a 0..1 scale first, because the raw scores of the two mean different things:
//!
//! - **BM25 alone is absolute**: each candidate's BM25 over the query's ideal score (every query
//!   term once in a chunk of average length; `index::keyword`), capped at 1. It depends only on
//!   the chunk, the query and the index, and a chunk that matches part of the query scores its
//!   share of the query's weight. A match that covers the query scores 1, one that covers a
//!   third of it about 0.33; among capped candidates the uncapped ratio still ranks first.
//! - **In hybrid search the BM25 ratios are spread**, min-max between the best candidate and
//!   the one at [`SPREAD_DEPTH`] (those below it score 0 on that side): the two sides must be
//!   on comparable spreads, and the absolute ratios, mostly well under 1 for a question,
//!   weighed as they are let the vector side dominate (LoCoMo hybrid R@5 / R@10 59.9 / 70.3,
//!   under the targets, against 63.0 / 72.8 spread).
//! - **Cosine similarity is spread the same way and scaled by the best cosine**: the spread of
//!   the candidates is used (MiniLM's cosines of a question to every turn sit in a narrow
//!   band, so raw cosines barely separate them), but the best keeps its own similarity, so a
//!   set of poor semantic matches stays poor and does not pass `min_score` on the vector side
//!   alone.
//!
//! The spread's ends are the best candidate and the one at a fixed depth, not the weakest of
//! those asked for, so no score depends on `max_results` (min-max over `max_results ×
//! multiplier` candidates made every score move with it). Then each side's best
//! `max_results × multiplier` candidates meet, and `score = w · vector + (1 − w) · bm25`, a
//! side that did not find a chunk adding 0, so a chunk both sides found ranks above one only
//! either found with the same scores.
//!
//! Tuned on the LoCoMo slice (304 questions, all-MiniLM-L6-v2, `bench/memory/locomo.py`),
//! R@5 / R@10, against the BM25 side of the time (56.5 / 65.1 alone): raw cosine + BM25 ÷ max at
//! the spec's w = 0.7: 55.8 / 67.2, below BM25 alone; min-max on both sides at w = 0.7: 52.0 /
//! 65.4 — the dense side must not dominate — and at w = 0.5, the default: 62.4 / 72.8. With the
//! BM25 side of `e5add8f` (57.3 / 65.7, the chunk context in its document) the default measured
//! 63.0 / 73.4; with today's (57.8 / 65.1, absolute BM25 with a never-negative IDF), 63.0 / 72.8
//! (issue 27; spreading from the weakest of all 200 candidates instead: 60.2 / 70.8, and the
//! vector side too 61.4 / 70.9, which is why the depth is that of the tuning).

use std::collections::HashMap;

/// Candidates one side may return at most, whatever `max_results` and the multiplier ask:
/// past this, fusion only sorts more of the tail.
pub const MAX_CANDIDATES: usize = 200;

/// The candidate, best first, whose score is each side's 0 in hybrid search (see the module
/// documentation): what a 10-result search compared with the default 3× multiplier when
/// fusion was tuned, so the tuned ranking is kept and is the same for any `max_results`.
pub const SPREAD_DEPTH: usize = 30;

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

/// One side's candidate with its score: BM25, its ratio to the query's ideal score (1 or more
/// is a whole match; `index::keyword`); vector, its cosine.
#[derive(Debug, Clone, PartialEq)]
pub struct Candidate {
    /// The chunk.
    pub key: ChunkKey,
    /// The side's own score.
    pub score: f64,
}

pub use satchel_protocol::memory::HitSource;

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

/// A chunk's scores from each side that found it: BM25 (normalised, and the raw ratio for
/// ties) and vector (normalised).
type Sides = (Option<(f64, f64)>, Option<f64>);

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
    /// Candidates of each side that meet in the union, best first ([`candidate_count`]; at
    /// least [`SPREAD_DEPTH`]); each side is normalised over all it was given.
    pub per_side: usize,
}

/// How many candidates each side should return: `max_results × multiplier`, rounded up, at
/// least one and at most [`MAX_CANDIDATES`]. Asking each side for more than the final count
/// lets a chunk ranked modestly by both sides still meet in the union.
pub fn candidate_count(max_results: usize, multiplier: f64) -> usize {
    let wanted = (max_results as f64 * multiplier).ceil();
    // `as` saturates (and maps NaN to 0), which the clamp then bounds.
    (wanted as usize).clamp(1, MAX_CANDIDATES)
}

/// Fuses the candidates of both sides: normalise each side over all its candidates, keep its
/// best `per_side`, union by key, weigh, sort by score (ties by the uncapped BM25 ratio, then
/// path, then first line), drop those under `min_score`, keep `max_results`.
pub fn fuse(bm25: &[Candidate], vector: &[Candidate], params: &FusionParams) -> Vec<Fused> {
    let weight = params.vector_weight.clamp(0.0, 1.0);
    // Raw BM25 ratios and normalised scores, best first.
    let mut lexical: Vec<(&ChunkKey, f64)> = bm25.iter().map(|c| (&c.key, usable_ratio(c.score))).collect();
    lexical.sort_by(|a, b| b.1.total_cmp(&a.1));
    let ratios: Vec<f64> = lexical.iter().map(|(_, ratio)| *ratio).collect();
    let lexical_scores = if weight == 0.0 {
        ratios.iter().map(|r| r.min(1.0)).collect()
    } else {
        spread(&ratios)
    };
    let mut semantic: Vec<(&ChunkKey, f64)> = vector
        .iter()
        .map(|c| (&c.key, if c.score.is_nan() { 0.0 } else { c.score.clamp(0.0, 1.0) }))
        .collect();
    semantic.sort_by(|a, b| b.1.total_cmp(&a.1));
    let cosines: Vec<f64> = semantic.iter().map(|(_, cosine)| *cosine).collect();
    let best_cosine = cosines.first().copied().unwrap_or(0.0);
    let semantic_scores = spread(&cosines).into_iter().map(|s| s * best_cosine);

    // Every candidate that scores on its side meets the other side's, whatever `per_side` is:
    // a chunk both sides rank 20th must be fused at 10 results as at 50.
    let per_side = params.per_side.max(SPREAD_DEPTH);
    let mut sides: HashMap<&ChunkKey, Sides> = HashMap::new();
    for ((key, ratio), score) in lexical.into_iter().zip(lexical_scores).take(per_side) {
        let entry = sides.entry(key).or_default();
        if entry.0.is_none_or(|(best, _)| score > best) {
            entry.0 = Some((score, ratio));
        }
    }
    for ((key, _), score) in semantic.into_iter().zip(semantic_scores).take(per_side) {
        let entry = sides.entry(key).or_default();
        entry.1 = Some(entry.1.map_or(score, |s: f64| s.max(score)));
    }
    // (hit, uncapped BM25 ratio for ties).
    let mut fused: Vec<(Fused, f64)> = sides
        .into_iter()
        .map(|(key, (lexical, semantic))| {
            let hit = Fused {
                key: key.clone(),
                score: weigh(weight, lexical.map(|(score, _)| score), semantic),
                source: match (lexical, semantic) {
                    (Some(_), Some(_)) => HitSource::Hybrid,
                    (None, Some(_)) => HitSource::Vector,
                    _ => HitSource::Bm25,
                },
            };
            (hit, lexical.map_or(0.0, |(_, ratio)| ratio))
        })
        .filter(|(hit, _)| hit.score >= params.min_score)
        .collect();
    fused.sort_by(|(a, a_ratio), (b, b_ratio)| {
        b.score
            .total_cmp(&a.score)
            .then_with(|| b_ratio.total_cmp(a_ratio))
            .then_with(|| a.key.path.cmp(&b.key.path))
            .then_with(|| a.key.start_line.cmp(&b.key.start_line))
            .then_with(|| a.key.end_line.cmp(&b.key.end_line))
    });
    fused.truncate(params.max_results);
    fused.into_iter().map(|(hit, _)| hit).collect()
}

/// The fused score of a chunk from its normalised scores: `w · vector + (1 − w) · bm25`, a
/// side that did not find it counting 0.
fn weigh(weight: f64, lexical: Option<f64>, semantic: Option<f64>) -> f64 {
    weight * semantic.unwrap_or(0.0) + (1.0 - weight) * lexical.unwrap_or(0.0)
}

/// A BM25 ratio as fusion uses it: non-positive or non-finite counts as 0, and an infinite
/// one as the best there is.
fn usable_ratio(ratio: f64) -> f64 {
    if ratio == f64::INFINITY {
        f64::MAX
    } else if ratio.is_finite() && ratio > 0.0 {
        ratio
    } else {
        0.0
    }
}

/// Scores sorted best first, spread between the best (1) and the one at [`SPREAD_DEPTH`] (or
/// the last, if fewer), those below it 0; all equal: 1 each, or 0 each when they are 0.
fn spread(sorted: &[f64]) -> Vec<f64> {
    let (Some(&highest), Some(&lowest)) = (sorted.first(), sorted.get(sorted.len().clamp(1, SPREAD_DEPTH) - 1)) else {
        return Vec::new();
    };
    let range = highest - lowest;
    sorted
        .iter()
        .map(|s| {
            if range > 0.0 {
                ((s - lowest) / range).max(0.0)
            } else if highest > 0.0 {
                1.0
            } else {
                0.0
            }
        })
        .collect()
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
        per_side: 15,
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

    /// The spec's example (query "handleWebSocketReconnect disconnection reconnect", scores
    /// already normalised, vector weight 0.7): both sides, vector only, both.
    #[test]
    fn the_spec_example_weighs_normalised_scores() {
        let round = |x: f64| (x * 1000.0).round() / 1000.0;
        assert_eq!(round(weigh(0.7, Some(1.0), Some(0.85))), 0.895);
        assert_eq!(round(weigh(0.7, None, Some(0.78))), 0.546);
        assert_eq!(round(weigh(0.7, Some(0.5), Some(0.40))), 0.43);
    }

    #[test]
    fn a_chunk_both_sides_found_outranks_one_side_with_the_same_scores() {
        let hits = check(
            &[("both.md", 1, 1.0), ("lexical.md", 1, 1.0), ("weak.md", 1, 0.0)],
            &[("both.md", 1, 0.8), ("semantic.md", 1, 0.8), ("far.md", 1, 0.2)],
            &PARAMS,
        );
        assert_eq!(hits[0], ("both.md".into(), 1, 0.86, HitSource::Hybrid));
        assert_eq!(hits[1], ("semantic.md".into(), 1, 0.56, HitSource::Vector));
        assert_eq!(hits[2], ("lexical.md".into(), 1, 0.3, HitSource::Bm25));
    }

    #[test]
    fn bm25_ratios_are_kept_capped_at_one_and_ranked_by_the_uncapped_ratio() {
        let only_bm25 = FusionParams {
            vector_weight: 0.0,
            ..PARAMS
        };
        let hits = check(
            &[
                ("a.md", 1, 1.3),
                ("b.md", 1, 0.4),
                ("c.md", 1, 0.15),
                ("d.md", 1, 1.6),
                ("e.md", 1, 0.05),
            ],
            &[],
            &only_bm25,
        );
        // The ratios are the scores (no candidate's score depends on another's); e.md is under
        // min_score; d.md ranks above a.md although both are capped.
        assert_eq!(
            hits,
            [
                ("d.md".into(), 1, 1.0, HitSource::Bm25),
                ("a.md".into(), 1, 1.0, HitSource::Bm25),
                ("b.md".into(), 1, 0.4, HitSource::Bm25),
                ("c.md".into(), 1, 0.15, HitSource::Bm25),
            ]
        );
        // Fewer candidates (a smaller max_results) change no score.
        let fewer = check(&[("b.md", 1, 0.4), ("c.md", 1, 0.15)], &[], &only_bm25);
        assert_eq!(fewer[0].2, 0.4);
        assert_eq!(fewer[1].2, 0.15);
    }

    #[test]
    fn cosine_is_clamped_and_spread_but_a_poor_best_stays_poor() {
        let only_vector = FusionParams {
            vector_weight: 1.0,
            min_score: 0.0,
            ..PARAMS
        };
        let hits = check(
            &[],
            &[("a.md", 1, 0.3), ("b.md", 1, -0.2), ("c.md", 1, 1.2)],
            &only_vector,
        );
        assert_eq!(
            hits,
            [
                ("c.md".into(), 1, 1.0, HitSource::Vector),
                ("a.md".into(), 1, 0.3, HitSource::Vector),
                ("b.md".into(), 1, 0.0, HitSource::Vector),
            ]
        );
        // Three weak matches: spread over 0..0.3, the best keeping its own 0.3.
        let hits = check(
            &[],
            &[("a.md", 1, 0.30), ("b.md", 1, 0.25), ("c.md", 1, 0.20)],
            &only_vector,
        );
        let scores: Vec<f64> = hits.iter().map(|h| h.2).collect();
        assert_eq!(scores, [0.3, 0.15, 0.0]);
        let single = check(&[], &[("a.md", 1, 0.42)], &only_vector);
        assert_eq!(single[0].2, 0.42);
    }

    #[test]
    fn in_hybrid_search_bm25_is_spread_from_the_best_to_the_candidate_at_the_depth() {
        let bm25: Vec<(String, u32, f64)> = (0..40)
            .map(|i| ("b.md".to_owned(), i, 1.0 - f64::from(i) * 0.02))
            .collect();
        let bm25: Vec<(&str, u32, f64)> = bm25.iter().map(|(p, l, s)| (p.as_str(), *l, *s)).collect();
        let only_lexical = FusionParams {
            vector_weight: 0.5,
            min_score: 0.0,
            max_results: 40,
            per_side: 40,
        };
        let hits = check(&bm25, &[], &only_lexical);
        // 1.0 at the best, 0 at the 30th (0.42) and below, half-way (0.5 · 0.5) at 0.71.
        assert_eq!(hits[0].2, 0.5);
        assert_eq!(hits[29].2, 0.0);
        assert_eq!(hits[39].2, 0.0);
        assert!((hits[14].2 - 0.259).abs() < 1e-9, "{:?}", hits[14]);
    }

    /// Issue 27 item 14: asking for fewer hits (fewer candidates per side) changes no score.
    #[test]
    fn no_score_depends_on_how_many_hits_are_asked_for() {
        let scores = |i: u32, salt: f64| ((f64::from(i) * 7.3 + salt).sin() + 1.0) / 2.0;
        let bm25: Vec<(String, u32, f64)> = (0..60)
            .map(|i| (format!("{}.md", i % 7), i, 2.0 * scores(i, 0.1)))
            .collect();
        let vector: Vec<(String, u32, f64)> = (0..60).map(|i| (format!("{}.md", i % 5), i, scores(i, 0.7))).collect();
        let bm25: Vec<(&str, u32, f64)> = bm25.iter().map(|(p, l, s)| (p.as_str(), *l, *s)).collect();
        let vector: Vec<(&str, u32, f64)> = vector.iter().map(|(p, l, s)| (p.as_str(), *l, *s)).collect();
        for weight in [0.0, 0.5, 1.0] {
            let with = |max_results: usize| {
                let params = FusionParams {
                    vector_weight: weight,
                    min_score: 0.0,
                    max_results,
                    per_side: candidate_count(max_results, 3.0),
                };
                check(&bm25, &vector, &params)
            };
            let many = with(50);
            for few in [1, 3, 10] {
                let scoring = many[..few].iter().filter(|hit| hit.2 > 0.0).count();
                assert!(scoring > 0);
                assert_eq!(
                    with(few)[..scoring],
                    many[..scoring],
                    "weight {weight}, max_results {few}"
                );
            }
        }
    }

    #[test]
    fn ties_sort_by_path_then_line_and_results_are_truncated() {
        let hits = check(
            &[("b.md", 5, 0.5), ("a.md", 9, 0.5), ("a.md", 2, 0.5), ("c.md", 1, 0.5)],
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
