//! Whitespace and cutting: every cut is on a char boundary and says it cut (`…`).

/// `text` with every run of whitespace replaced by one space, trimmed.
pub fn collapse_ws(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first `max` chars of `text` (on a char boundary) and whether anything was cut.
pub fn cut_chars(text: &str, max: usize) -> (&str, bool) {
    match text.char_indices().nth(max) {
        Some((at, _)) => (&text[..at], true),
        None => (text, false),
    }
}

/// `text` cut to at most `max` chars, preferably at a space, with `…` when cut.
pub fn cut_words(text: &str, max: usize) -> String {
    let (cut, truncated) = cut_chars(text, max.saturating_sub(1));
    if !truncated {
        return text.to_owned();
    }
    let at_space = cut
        .rfind(' ')
        .filter(|&at| at >= cut.len() * 3 / 4)
        .unwrap_or(cut.len());
    format!("{}…", cut[..at_space].trim_end())
}

/// A shell word without its surrounding quotes.
pub fn unquote(word: &str) -> &str {
    word.trim_matches(|c| c == '\'' || c == '"')
}

/// Whether `word` is in a space-separated `list`.
pub fn listed(list: &str, word: &str) -> bool {
    list.split_ascii_whitespace().any(|w| w == word)
}

/// The form two texts are compared in when merging: whitespace collapsed, lower case, without
/// trailing punctuation, so "Keep it small." and "keep it small" are one item.
pub fn normalized(text: &str) -> String {
    collapse_ws(text)
        .trim_end_matches(['.', '!', '?', ';', ',', ':', '…'])
        .to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_stay_on_char_boundaries_and_say_so() {
        assert_eq!(cut_words("short", 10), "short");
        assert_eq!(cut_words("one two three four five", 12), "one two thr…");
        assert_eq!(cut_words("one two three four five", 16), "one two three…");
        assert_eq!(cut_chars("héllo", 2), ("hé", true));
        assert_eq!(normalized("  Keep it  small. "), "keep it small");
    }
}
