//! Search: pick the mode, gather BM25 and vector candidates, fuse them, cut snippets.
//!
//! A search never fails because the embedding backend does: a failed query embedding turns a
//! hybrid or vector search into BM25 with a warning, and the next search tries the backend
//! again.

use std::collections::{HashMap, HashSet};
use std::sync::PoisonError;
use std::sync::atomic::Ordering;

use super::keyword::QueryWeights;
use super::{Hit, MemoryIndex, SearchMode, SearchOptions, SearchOutcome, lock};
use crate::MemoryError;
use crate::analyze::terms;
use crate::fusion::{Candidate, ChunkKey, FusionParams, MAX_CANDIDATES, SPREAD_DEPTH, candidate_count, fuse};

/// A snippet is cut after this many characters: enough for a paragraph, short enough that
/// five hits fit in an agent's tool result comfortably.
const SNIPPET_CHARS: usize = 700;

/// Distinct query terms used at most. Each is an FTS5 `OR` branch with its own posting list:
/// a pasted page as a query stays fast, and its first terms are what it is about anyway.
const MAX_QUERY_TERMS: usize = 64;

impl MemoryIndex {
    /// Searches the memory files for `query`. Errors only when the requested mode cannot run
    /// at all ([`MemoryError::ModeUnavailable`]) or the index cannot be read.
    pub fn search(&self, query: &str, options: &SearchOptions) -> Result<SearchOutcome, MemoryError> {
        let mut mode = self.resolve_mode(options.mode)?;
        let mut warnings = Vec::new();
        if mode == SearchMode::Hybrid && !self.options.fts_enabled {
            warnings.push("full-text search is disabled (fts_enabled is false); results are by vector only".to_owned());
            mode = SearchMode::Vector;
        }
        let outcome = |hits, mode, warnings| Ok(SearchOutcome { hits, mode, warnings });
        if query.trim().is_empty() || options.max_results == 0 {
            return outcome(Vec::new(), mode, warnings);
        }
        let count = candidate_count(options.max_results, self.options.candidate_multiplier);
        // The chunk id of every candidate, to build the hits.
        let mut found: HashMap<ChunkKey, i64> = HashMap::new();
        let mut vector = Vec::new();
        if matches!(mode, SearchMode::Vector | SearchMode::Hybrid) {
            // At least down to the spread's depth, whatever `max_results` is (see `fusion`).
            match self.vector_candidates(query, count.max(SPREAD_DEPTH), &mut warnings)? {
                Some(candidates) => {
                    for (id, candidate) in candidates {
                        found.insert(candidate.key.clone(), id);
                        vector.push(candidate);
                    }
                }
                None if self.options.fts_enabled => mode = SearchMode::Bm25,
                None => return outcome(Vec::new(), mode, warnings),
            }
        }
        let mut bm25 = Vec::new();
        let query_terms = distinct_terms(query);
        // Only stop words left: no lexical candidates (FTS5 rejects an empty query).
        if matches!(mode, SearchMode::Bm25 | SearchMode::Hybrid) && !query_terms.is_empty() {
            for (id, candidate) in self.keyword_candidates(&query_terms)? {
                found.insert(candidate.key.clone(), id);
                bm25.push(candidate);
            }
        }
        let params = FusionParams {
            vector_weight: match mode {
                SearchMode::Bm25 => 0.0,
                SearchMode::Vector => 1.0,
                _ => self.options.vector_weight,
            },
            min_score: options.min_score,
            max_results: options.max_results,
            per_side: count,
        };
        let mut hits = Vec::new();
        let reader = lock(&self.reader);
        for fused in fuse(&bm25, &vector, &params) {
            let Some(id) = found.remove(&fused.key) else {
                continue;
            };
            // The chunk may have been replaced by a sync since its candidates were read.
            let Some(text) = reader.chunk_text(id)? else {
                continue;
            };
            hits.push(Hit {
                path: fused.key.path,
                start_line: fused.key.start_line,
                end_line: fused.key.end_line,
                score: fused.score,
                snippet: snippet(&text),
                source: fused.source,
            });
        }
        outcome(hits, mode, warnings)
    }

    /// The keyword side's candidates, with chunk ids, best first, each scored by its BM25
    /// ratio to the query's ideal score (`keyword`). FTS5 picks the [`MAX_CANDIDATES`] it ranks
    /// best, whatever `max_results` is, so the side's order and scores never depend on it;
    /// only when more chunks than that match can one that FTS5 ranked lower (its IDF is
    /// clamped for common terms) be missed.
    fn keyword_candidates(&self, query_terms: &[String]) -> Result<Vec<(i64, Candidate)>, MemoryError> {
        let reader = lock(&self.reader);
        let rows = reader.bm25(&match_expression(query_terms), MAX_CANDIDATES)?;
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let chunks_with = reader.chunks_with(query_terms)?;
        drop(reader);
        let chunks = self.chunks.load(Ordering::Relaxed) as u64;
        let weights = QueryWeights::new(query_terms, &chunks_with, chunks, self.terms.load(Ordering::Relaxed));
        let mut scored: Vec<(f64, f64, i64, ChunkKey)> = rows
            .into_iter()
            .map(|row| (weights.ratio(&row.terms), row.rank, row.id, row.key))
            .collect();
        // Ties (the same terms in the same length) keep FTS5's order, which weighs the context.
        scored.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| b.1.total_cmp(&a.1)));
        Ok(scored
            .into_iter()
            .map(|(score, _, id, key)| (id, Candidate { key, score }))
            .collect())
    }

    /// The mode `asked` resolves to, or why it cannot run.
    fn resolve_mode(&self, asked: SearchMode) -> Result<SearchMode, MemoryError> {
        let fts = self.options.fts_enabled;
        let vectors = self.embedder.is_some();
        let unavailable = |why: String| Err(MemoryError::ModeUnavailable(why));
        match asked {
            SearchMode::Auto => match (fts, vectors) {
                (true, true) => Ok(SearchMode::Hybrid),
                (true, false) => Ok(SearchMode::Bm25),
                (false, true) => Ok(SearchMode::Vector),
                (false, false) => unavailable(
                    "no search mode is enabled: set fts_enabled or configure an embedding backend".to_owned(),
                ),
            },
            SearchMode::Bm25 if !fts => {
                unavailable("search mode `bm25` needs full-text search, and fts_enabled is false".to_owned())
            }
            SearchMode::Vector | SearchMode::Hybrid if !vectors => unavailable(format!(
                "search mode `{}` needs an embedding backend, and none is configured",
                asked.name()
            )),
            other => Ok(other),
        }
    }

    /// The vector side's candidates, with chunk ids; `None` (and a warning) when the query
    /// could not be embedded or compared. Also embeds a batch of chunks still waiting for a
    /// vector, now that the backend answers.
    fn vector_candidates(
        &self,
        query: &str,
        count: usize,
        warnings: &mut Vec<String>,
    ) -> Result<Option<Vec<(i64, Candidate)>>, MemoryError> {
        let Some(embedder) = &self.embedder else {
            return Ok(None);
        };
        let embedded = embedder.embed(&[query.to_owned()]).map_err(|e| e.to_string());
        let query_vector =
            match embedded.and_then(|v| v.into_iter().next().ok_or_else(|| "no vector returned".to_owned())) {
                Ok(vector) => vector,
                Err(message) => {
                    self.embedding_failed(&message);
                    warnings.push(fallback_warning(
                        &format!("embedding the query failed: {message}"),
                        self.options.fts_enabled,
                    ));
                    return Ok(None);
                }
            };
        warnings.extend(self.embed_some_pending()?);
        let waiting = self.chunks_without_vector();
        if waiting > 0 {
            warnings.push(format!(
                "{waiting} chunks have no vector yet (their embedding failed); vector search misses them until they are embedded"
            ));
        }
        let matrix = self.vectors.read().unwrap_or_else(PoisonError::into_inner);
        let candidates = matrix.top_k(&query_vector, count);
        if candidates.is_none() {
            let reason = format!(
                "the query vector has {} dimensions and the index's have {}",
                query_vector.len(),
                matrix.dims()
            );
            warnings.push(fallback_warning(&reason, self.options.fts_enabled));
        }
        Ok(candidates)
    }
}

fn fallback_warning(reason: &str, fts_enabled: bool) -> String {
    if fts_enabled {
        format!("{reason}; results are BM25 only")
    } else {
        format!("{reason}; no results")
    }
}

/// The distinct analysed terms of `query`, at most [`MAX_QUERY_TERMS`], in order; none when
/// only stop words are left.
fn distinct_terms(query: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    terms(query)
        .into_iter()
        .filter(|term| seen.insert(term.clone()))
        .take(MAX_QUERY_TERMS)
        .collect()
}

/// The FTS5 query of `terms`: each quoted, joined by `OR`, so a chunk matching any term is a
/// candidate.
fn match_expression(terms: &[String]) -> String {
    let quoted: Vec<String> = terms
        .iter()
        .map(|term| format!("\"{}\"", term.replace('"', "\"\"")))
        .collect();
    quoted.join(" OR ")
}

/// `text` cut to [`SNIPPET_CHARS`] characters, with `…` when cut.
fn snippet(text: &str) -> String {
    match text.char_indices().nth(SNIPPET_CHARS) {
        Some((cut, _)) => format!("{}…", text[..cut].trim_end()),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_match_expression_quotes_distinct_terms() {
        let expression = |query: &str| match_expression(&distinct_terms(query));
        assert_eq!(
            expression("handleWebSocketReconnect disconnection reconnect"),
            r#""handlewebsocketreconnect" OR "handl" OR "web" OR "socket" OR "reconnect" OR "disconnect""#
        );
        assert_eq!(expression("the of and"), "");
        assert_eq!(expression("记忆系统"), r#""记忆" OR "忆系" OR "系统""#);
    }

    #[test]
    fn snippets_are_cut_on_a_char_boundary() {
        assert_eq!(snippet("short"), "short");
        let long = "é".repeat(SNIPPET_CHARS + 1);
        let cut = snippet(&long);
        assert_eq!(cut.chars().count(), SNIPPET_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
