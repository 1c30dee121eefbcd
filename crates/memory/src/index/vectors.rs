//! The vectors of the current chunks, one contiguous row-major `f32` matrix searched by brute
//! force: for a memory index (thousands to tens of thousands of chunks) a linear scan of dot
//! products is about a millisecond, exact, and needs no index structure to keep in sync.

use std::collections::HashMap;

use crate::fusion::{Candidate, ChunkKey};
use crate::store::VectorRow;

/// Row-major vectors with the chunk each row belongs to.
#[derive(Debug, Default)]
pub(super) struct VectorMatrix {
    /// Dimensions of every row; 0 while empty (the first row sets it).
    dims: usize,
    /// `rows.len() × dims` values, each row L2-normalised.
    data: Vec<f32>,
    /// The chunk (id, key) of each row, in row order.
    rows: Vec<(i64, ChunkKey)>,
    /// Row of each chunk id.
    by_id: HashMap<i64, usize>,
}

impl VectorMatrix {
    /// Rows held.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Dimensions of the rows (0 while empty).
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// Adds (or replaces) the row of a chunk. A vector of other dimensions than the rows held,
    /// a zero vector or one with a non-finite value is left out (logged): it could never be
    /// compared meaningfully.
    pub fn insert(&mut self, row: VectorRow) {
        let Some(vector) = normalized(&row.vector) else {
            tracing::warn!(id = row.id, "a stored vector is zero or not finite; left out");
            return;
        };
        if self.rows.is_empty() {
            self.dims = vector.len();
        }
        if vector.len() != self.dims {
            tracing::warn!(
                id = row.id,
                dims = vector.len(),
                expected = self.dims,
                "a stored vector has other dimensions; left out"
            );
            return;
        }
        match self.by_id.get(&row.id) {
            Some(&at) => {
                self.data[at * self.dims..(at + 1) * self.dims].copy_from_slice(&vector);
                self.rows[at].1 = row.key;
            }
            None => {
                self.by_id.insert(row.id, self.rows.len());
                self.rows.push((row.id, row.key));
                self.data.extend_from_slice(&vector);
            }
        }
    }

    /// Removes the row of chunk `id`, if any (the last row takes its place).
    pub fn remove(&mut self, id: i64) {
        let Some(at) = self.by_id.remove(&id) else {
            return;
        };
        let last = self.rows.len() - 1;
        if at != last {
            self.data
                .copy_within(last * self.dims..(last + 1) * self.dims, at * self.dims);
            self.rows.swap(at, last);
            self.by_id.insert(self.rows[at].0, at);
        }
        self.rows.pop();
        self.data.truncate(last * self.dims);
    }

    /// Gives chunk `id` its new line range.
    pub fn relocate(&mut self, id: i64, start_line: u32, end_line: u32) {
        if let Some(&at) = self.by_id.get(&id) {
            self.rows[at].1.start_line = start_line;
            self.rows[at].1.end_line = end_line;
        }
    }

    /// The `k` rows most similar to `query` (cosine), best first, with their chunk ids.
    /// `None` when `query` cannot be compared (other dimensions, zero).
    pub fn top_k(&self, query: &[f32], k: usize) -> Option<Vec<(i64, Candidate)>> {
        if self.rows.is_empty() {
            return Some(Vec::new());
        }
        let query = normalized(query).filter(|q| q.len() == self.dims)?;
        let mut scored: Vec<(f32, usize)> = self
            .data
            .chunks_exact(self.dims)
            .map(|row| dot(row, &query))
            .zip(0..)
            .collect();
        let by_score = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
        if k < scored.len() && k > 0 {
            scored.select_nth_unstable_by(k - 1, by_score);
        }
        scored.truncate(k);
        scored.sort_unstable_by(by_score);
        Some(
            scored
                .into_iter()
                .map(|(score, at)| {
                    let (id, key) = &self.rows[at];
                    (
                        *id,
                        Candidate {
                            key: key.clone(),
                            score: f64::from(score),
                        },
                    )
                })
                .collect(),
        )
    }
}

/// `vector / |vector|`, or `None` for a zero or non-finite vector. Backends return unit
/// vectors already; normalising again makes the dot product a cosine whatever they do.
fn normalized(vector: &[f32]) -> Option<Vec<f32>> {
    let norm = dot(vector, vector).sqrt();
    (norm.is_finite() && norm > 0.0).then(|| vector.iter().map(|x| x / norm).collect())
}

/// The dot product, with eight independent sums so the compiler can keep them in SIMD lanes
/// (a single running sum is a dependency chain it may not reorder).
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut sums = [0.0f32; 8];
    let (a_body, b_body) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = a_body
        .remainder()
        .iter()
        .zip(b_body.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in a_body.zip(b_body) {
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    sums.iter().sum::<f32>() + tail
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(id: i64, vector: &[f32]) -> VectorRow {
        VectorRow {
            id,
            key: ChunkKey {
                path: format!("memory/{id}.md"),
                start_line: 1,
                end_line: 1,
            },
            vector: vector.to_vec(),
        }
    }

    fn ids(matrix: &VectorMatrix, query: &[f32], k: usize) -> Vec<(i64, f64)> {
        let top = matrix.top_k(query, k).unwrap();
        top.into_iter()
            .map(|(id, c)| (id, (c.score * 100.0).round() / 100.0))
            .collect()
    }

    #[test]
    fn top_k_ranks_by_cosine() {
        let mut matrix = VectorMatrix::default();
        matrix.insert(row(1, &[1.0, 0.0]));
        matrix.insert(row(2, &[0.0, 3.0]));
        matrix.insert(row(3, &[1.0, 1.0]));
        assert_eq!(ids(&matrix, &[2.0, 0.0], 2), [(1, 1.0), (3, 0.71)]);
        assert_eq!(ids(&matrix, &[0.0, 1.0], 5), [(2, 1.0), (3, 0.71), (1, 0.0)]);
        assert!(matrix.top_k(&[1.0, 0.0, 0.0], 2).is_none());
        assert!(matrix.top_k(&[0.0, 0.0], 2).is_none());
    }

    #[test]
    fn rows_are_replaced_removed_and_relocated() {
        let mut matrix = VectorMatrix::default();
        for id in 1..=4 {
            matrix.insert(row(id, &[id as f32, 1.0]));
        }
        matrix.insert(row(2, &[0.0, 1.0]));
        matrix.remove(1);
        matrix.remove(9);
        matrix.relocate(3, 7, 9);
        matrix.insert(row(5, &[1.0, 2.0, 3.0]));
        matrix.insert(row(6, &[0.0, 0.0]));
        assert_eq!(matrix.len(), 3);
        assert_eq!(ids(&matrix, &[0.0, 1.0], 1), [(2, 1.0)]);
        let top = matrix.top_k(&[3.0, 1.0], 1).unwrap();
        assert_eq!((top[0].0, top[0].1.key.start_line, top[0].1.key.end_line), (3, 7, 9));
        for id in [2, 3, 4] {
            matrix.remove(id);
        }
        assert_eq!(matrix.len(), 0);
        matrix.insert(row(7, &[1.0, 2.0, 3.0]));
        assert_eq!(matrix.dims(), 3);
    }

    #[test]
    fn dot_handles_lengths_that_are_not_multiples_of_eight() {
        let a: Vec<f32> = (0..19).map(|i| i as f32).collect();
        let expected: f32 = a.iter().map(|x| x * x).sum();
        assert_eq!(dot(&a, &a), expected);
    }
}
