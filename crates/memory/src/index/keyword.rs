//! The keyword side's score: BM25 over the analysed terms, on an absolute 0..1 scale. Pure.
//!
//! FTS5 finds the chunks that hold a query term and orders them, but its `bm25()` cannot be
//! the score a hit shows and `min_score` filters:
//!
//! - its IDF, `ln((N − n + 0.5) / (n + 0.5))`, is clamped to 1e-6 for a term in more than half
//!   of the chunks, which a small memory makes of most words: the bullets that only share such
//!   a word with the query scored a millionth of the best one and fell under any `min_score`;
//! - its raw scores have no scale (they grow with the query's length and its terms' rarity),
//!   so they were min-max normalised over the candidates, whose number follows `max_results`:
//!   a hit's score changed with how many hits were asked for.
//!
//! So each candidate is scored again here: Okapi BM25 (FTS5's `k1` and `b`) with the IDF that
//! is never negative, `ln(1 + (N − n + 0.5) / (n + 0.5))` (Lucene's), divided by the query's
//! *ideal* score, that of a chunk of average length holding every query term once (`Σ idf`).
//! The ratio depends only on the chunk, the query and the index, never on `max_results`. A
//! chunk scores 1 when it matches the whole query at least that well (the score is capped
//! there; the uncapped ratio still orders such chunks), and a chunk matching only some terms
//! scores their share of the query's weight: a term that is in no chunk counts in the ideal
//! too, so a query about something memory does not know scores low everywhere.

use std::collections::HashMap;

/// BM25's term-frequency saturation, as FTS5 has it.
const K1: f64 = 1.2;
/// BM25's length normalisation, as FTS5 has it.
const B: f64 = 0.75;

/// A query's terms weighed against the index, ready to score candidates.
#[derive(Debug, Clone)]
pub(super) struct QueryWeights {
    /// Each distinct query term's place in `idf`.
    places: HashMap<String, usize>,
    /// Each distinct query term's IDF.
    idf: Vec<f64>,
    /// `Σ idf`: the score of a chunk of average length holding each term once.
    ideal: f64,
    /// Terms per chunk, on average.
    average_len: f64,
}

impl QueryWeights {
    /// `terms` (distinct) of a query, in an index of `chunks` chunks holding `total_terms`
    /// terms, where `chunks_with[i]` chunks hold `terms[i]`.
    pub fn new(terms: &[String], chunks_with: &[u64], chunks: u64, total_terms: u64) -> QueryWeights {
        let n = chunks as f64;
        let idf: Vec<f64> = chunks_with
            .iter()
            .map(|&with| {
                // A count above the chunks (the index changed between two reads) is all of them.
                let with = (with as f64).min(n);
                (1.0 + (n - with + 0.5) / (with + 0.5)).ln()
            })
            .collect();
        QueryWeights {
            places: terms.iter().enumerate().map(|(at, term)| (term.clone(), at)).collect(),
            ideal: idf.iter().sum(),
            idf,
            average_len: if chunks > 0 { total_terms as f64 / n } else { 0.0 },
        }
    }

    /// The chunk's BM25 over the ideal (uncapped; 0 when it holds no query term), from its
    /// analysed `terms` joined by spaces.
    pub fn ratio(&self, terms: &str) -> f64 {
        if self.ideal <= 0.0 {
            return 0.0;
        }
        let mut frequencies = vec![0u32; self.idf.len()];
        let mut len = 0usize;
        for term in terms.split(' ').filter(|t| !t.is_empty()) {
            len += 1;
            if let Some(&at) = self.places.get(term) {
                frequencies[at] += 1;
            }
        }
        let relative_len = if self.average_len > 0.0 {
            len as f64 / self.average_len
        } else {
            1.0
        };
        let norm = K1 * (1.0 - B + B * relative_len);
        let score: f64 = frequencies
            .iter()
            .zip(&self.idf)
            .filter(|(tf, _)| **tf > 0)
            .map(|(&tf, idf)| {
                let tf = f64::from(tf);
                idf * tf * (K1 + 1.0) / (tf + norm)
            })
            .sum();
        score / self.ideal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn weights(terms: &[&str], chunks_with: &[u64], chunks: u64, total_terms: u64) -> QueryWeights {
        let terms: Vec<String> = terms.iter().map(|t| (*t).to_owned()).collect();
        QueryWeights::new(&terms, chunks_with, chunks, total_terms)
    }

    #[test]
    fn a_chunk_of_average_length_with_every_term_once_is_ideal() {
        let query = weights(&["databas", "timeout"], &[3, 1], 4, 16);
        assert!((query.ratio("databas timeout pool size") - 1.0).abs() < 1e-12);
        // Shorter, or a term repeated: above the ideal (the score caps it at 1).
        assert!(query.ratio("databas timeout") > 1.0);
        assert!(query.ratio("databas timeout timeout size") > 1.0);
        assert_eq!(query.ratio("pool size"), 0.0);
    }

    #[test]
    fn a_term_in_most_chunks_still_counts_by_its_share_of_the_query() {
        // "databas" in 3 of 4 chunks: FTS5 gives it an IDF of 1e-6; here it keeps a share.
        let query = weights(&["databas", "connect", "timeout"], &[3, 2, 1], 4, 16);
        let partial = query.ratio("databas backup run night");
        let idf = |with: f64| (1.0 + (4.0 - with + 0.5) / (with + 0.5)).ln();
        let share = idf(3.0) / (idf(3.0) + idf(2.0) + idf(1.0));
        assert!((partial - share).abs() < 1e-12, "{partial} {share}");
        assert!(partial > 0.1, "{partial}");
        assert!(query.ratio("connect pool size ten") > partial);
    }

    #[test]
    fn a_term_memory_does_not_hold_lowers_every_score() {
        let known = weights(&["databas"], &[3], 4, 16);
        let unknown = weights(&["databas", "kubernet"], &[3, 0], 4, 16);
        let chunk = "databas backup run night";
        assert!(unknown.ratio(chunk) < known.ratio(chunk) / 3.0);
    }

    #[test]
    fn an_empty_query_scores_nothing() {
        assert_eq!(weights(&[], &[], 4, 16).ratio("databas"), 0.0);
    }
}
