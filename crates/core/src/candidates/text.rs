//! Token Jaccard similarity of candidate texts.

use std::collections::BTreeSet;

/// The lower-cased word tokens of a text: runs of letters, digits and `_`; everything else
/// (punctuation, whitespace) separates them.
pub fn tokens(text: &str) -> BTreeSet<String> {
    text.split(|ch: char| !(ch.is_alphanumeric() || ch == '_'))
        .filter(|t| !t.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// `|a ∩ b| / |a ∪ b|`; 0 when both are empty (an empty text merges with nothing).
pub fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f64 {
    let inter = a.intersection(b).count();
    let union = a.len() + b.len() - inter;
    if union == 0 { 0.0 } else { inter as f64 / union as f64 }
}
