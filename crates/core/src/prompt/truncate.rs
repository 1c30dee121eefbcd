//! Cutting a section to a character budget: 70 % head, 20 % tail and a marker between them
//! (AceClaw's `TierTruncator.truncateContent`), so both the section's core instructions at the
//! start and its recent additions at the end survive.
//!
//! Two of AceClaw's slips are fixed here. Its marker states the 70/20 split it aimed for even
//! when the head and tail were then shrunk to make room for the marker; here the numbers are
//! the ones kept. And where the marker does not fit it returns a bare prefix; here the section
//! is dropped instead, because a fragment with no sign of the cut reads as the whole text.
//!
//! Lengths are Unicode scalar values (`char`s), never bytes: a cut never splits a character.

use std::borrow::Cow;

/// Blank line on each side of the marker; both count in the budget.
pub const SEPARATOR: &str = "\n\n";
/// Fewer characters of the original than this, head and tail together, say nothing the
/// marker does not: a cut that would keep less drops the section.
pub const MIN_KEPT_CHARS: usize = 32;

/// The marker line between head and tail (without the blank lines around it).
pub fn marker(original_chars: usize, head: usize, tail: usize) -> String {
    format!("<!-- [TRUNCATED] Original: {original_chars} chars, showing first {head} + last {tail} chars -->")
}

/// `n × pct / 100`, rounded down, without overflow.
fn share(n: usize, pct: u128) -> usize {
    (n as u128 * pct / 100) as usize
}

/// How many characters of a text of `original_chars` to keep at the head and at the tail so
/// that head + separators + marker + tail ≤ `max`; `None` when less than [`MIN_KEPT_CHARS`]
/// would be kept.
///
/// The marker is sized with the 70/20 numbers first: the kept numbers can only be smaller,
/// so the marker that states them is never longer than the room reserved for it.
pub fn plan(original_chars: usize, max: usize) -> Option<(usize, usize)> {
    let (head, tail) = (share(max, 70), share(max, 20));
    let reserved = marker(original_chars, head, tail).len() + 2 * SEPARATOR.len();
    let available = max.checked_sub(reserved)?;
    let head = head.min(share(available, 78));
    let tail = tail.min(available - head);
    (head + tail >= MIN_KEPT_CHARS).then_some((head, tail))
}

/// `text` cut to at most `max` characters: itself when it fits, empty when the budget cannot
/// hold the marker and [`MIN_KEPT_CHARS`] of the text.
pub fn truncate(text: &str, max: usize) -> Cow<'_, str> {
    let chars = text.chars().count();
    if chars <= max {
        return Cow::Borrowed(text);
    }
    Cow::Owned(cut(text, chars, max).map(|(cut, _)| cut).unwrap_or_default())
}

/// Cuts `text`, whose length is `chars` (> `max`), to at most `max` characters; returns the
/// cut and its length in characters, or `None` when the section must be dropped.
///
/// Only the head and the tail windows are walked, so a cut costs O(head + tail), not O(text).
pub(crate) fn cut(text: &str, chars: usize, max: usize) -> Option<(String, usize)> {
    debug_assert!(chars > max);
    let (head, tail) = plan(chars, max)?;
    let head_end = text.char_indices().nth(head).map_or(text.len(), |(i, _)| i);
    let tail_start = match tail {
        0 => text.len(),
        _ => text.char_indices().nth_back(tail - 1).map_or(0, |(i, _)| i),
    };
    let marker = marker(chars, head, tail);
    let mut out = String::with_capacity(head_end + marker.len() + 2 * SEPARATOR.len() + (text.len() - tail_start));
    out.push_str(&text[..head_end]);
    out.push_str(SEPARATOR);
    out.push_str(&marker);
    out.push_str(SEPARATOR);
    out.push_str(&text[tail_start..]);
    // The marker and separators are ASCII: their byte length is their char length.
    let len = head + marker.len() + 2 * SEPARATOR.len() + tail;
    debug_assert!(len <= max);
    Some((out, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fits_are_borrowed_and_cuts_state_what_they_kept() {
        assert!(matches!(truncate("short", 5), Cow::Borrowed("short")));
        let text: String = "abcdefghij".repeat(100);
        let out = truncate(&text, 200);
        let (head, tail) = plan(1000, 200).unwrap();
        assert_eq!(out.chars().count(), head + tail + 4 + marker(1000, head, tail).len());
        assert!(out.chars().count() <= 200);
        assert!(out.contains(&format!("showing first {head} + last {tail} chars")));
        assert!(out.starts_with(&text[..head]) && out.ends_with(&text[1000 - tail..]));
    }

    #[test]
    fn never_splits_a_character_and_drops_what_cannot_hold_the_marker() {
        let text = "é🦀z".repeat(400);
        let out = truncate(&text, 300);
        assert!(out.chars().count() <= 300);
        assert!(out.starts_with("é🦀zé"));
        assert_eq!(truncate(&text, 90), "");
        assert_eq!(plan(1200, 0), None);
    }
}
